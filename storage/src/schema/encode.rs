//! JSON writers for the canonical row encoding (PROTOCOL.md §5): compact, raw UTF-8, control
//! characters escaped, integers exact, floats in shortest round-trip form laid out as msgspec lays
//! them out (`85566.0`, `0.015`, `1e-7`, `1e20`, `1.5e300`).
//!
//! Everything appends to a caller's `Vec<u8>` and allocates nothing else (binary base64 aside).

use base64::Engine as _;

use super::BinaryEncoding;

/// Appends `s` as a JSON string: `"` and `\` escaped, `\b \f \n \r \t` in their short forms, other
/// control characters as `\u00XX` (lowercase hex), everything else (all non-ASCII included) raw.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x00..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short == 0 {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends a finite `f64` in shortest round-trip form: `.0` on integral values, plain decimals for
/// exponents −5 to 15 (`0.00001`, `1000000000000000.0`), scientific otherwise with no `+` and no
/// leading zeros in the exponent (`1e16`, `1e-7`, `1.2345e-300`). This is the layout of msgspec
/// (and of the `ryu` crate). Callers pass finite values only; a non-finite one is written as
/// `null`, as msgspec does.
///
/// Every zero is written `0.0`, `-0.0` included: the parser already reads the literals `-0` and
/// `-0.0` as `0.0` (see [`crate::json`]), so a negative zero reached only by underflow
/// (`-1e-400`) would otherwise be written `-0.0` and read back as `0.0`, and the canonical form
/// would not be stable.
pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if v == 0.0 {
        out.extend_from_slice(b"0.0");
        return;
    }
    let mut buf = zmij::Buffer::new();
    push_without_plus(out, buf.format_finite(v).as_bytes());
}

/// Appends a finite `f32` in its own shortest round-trip form (`0.1`, not the `f64` widening
/// `0.10000000149011612`): plain decimals for exponents −6 to 12, scientific otherwise, with the
/// same layout rules as [`write_f64`], a zero of either sign written `0.0` included.
pub fn write_f32(out: &mut Vec<u8>, v: f32) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if v == 0.0 {
        out.extend_from_slice(b"0.0");
        return;
    }
    let mut buf = zmij::Buffer::new();
    push_without_plus(out, buf.format_finite(v).as_bytes());
}

/// `zmij` writes positive exponents as `e+20`; msgspec and `ryu` write `e20`. Otherwise the two
/// layouts are the same (the fixed-notation ranges match), which the tests check against an
/// independent formatter built on `std`.
#[inline]
fn push_without_plus(out: &mut Vec<u8>, text: &[u8]) {
    match text.iter().position(|&b| b == b'+') {
        Some(p) => {
            out.extend_from_slice(&text[..p]);
            out.extend_from_slice(&text[p + 1..]);
        }
        None => out.extend_from_slice(text),
    }
}

/// Appends an integer exactly.
#[inline]
pub(crate) fn write_i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends an unsigned integer exactly.
#[inline]
pub(crate) fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Why a binary column's text is not valid in its encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BinaryFault {
    /// Not text in the encoding; the string says what is wrong.
    Malformed(String),
    /// Valid text, but not the declared number of bytes.
    Length { expected: i32, got: usize },
}

/// Checks `text` against `encoding` (and `fixed_len`) and appends its canonical form as a JSON
/// string: lowercase hex for base16 (either case accepted), standard padded base64 for base64
/// (only that form accepted, so the text is copied as it came).
pub(crate) fn write_binary(
    out: &mut Vec<u8>,
    text: &str,
    encoding: BinaryEncoding,
    fixed_len: Option<i32>,
) -> Result<(), BinaryFault> {
    let len = match encoding {
        BinaryEncoding::Base16 => {
            let bytes = text.as_bytes();
            if !bytes.len().is_multiple_of(2) {
                return Err(BinaryFault::Malformed(format!(
                    "odd number of hex digits ({})",
                    bytes.len()
                )));
            }
            check_len(bytes.len() / 2, fixed_len)?;
            out.reserve(bytes.len() + 2);
            out.push(b'"');
            for (i, &b) in bytes.iter().enumerate() {
                match b {
                    b'0'..=b'9' | b'a'..=b'f' => out.push(b),
                    b'A'..=b'F' => out.push(b.to_ascii_lowercase()),
                    _ => {
                        let c = text[i..].chars().next().unwrap_or('?');
                        return Err(BinaryFault::Malformed(format!(
                            "{c:?} at position {i} is not a hex digit"
                        )));
                    }
                }
            }
            out.push(b'"');
            return Ok(());
        }
        BinaryEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|e| BinaryFault::Malformed(e.to_string()))?
            .len(),
    };
    check_len(len, fixed_len)?;
    // Standard padded base64 that decodes cleanly (the engine refuses stray trailing bits) is
    // already canonical: copy it.
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
    Ok(())
}

fn check_len(got: usize, fixed_len: Option<i32>) -> Result<(), BinaryFault> {
    match fixed_len {
        Some(n) if usize::try_from(n).ok() != Some(got) => {
            Err(BinaryFault::Length { expected: n, got })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(v: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, v);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn floats_follow_msgspec_layout() {
        for (v, want) in [
            (85566.0, "85566.0"),
            (0.015, "0.015"),
            (1e-7, "1e-7"),
            (1e20, "1e20"),
            (1e16, "1e16"),
            (1e15, "1000000000000000.0"),
            (0.00001, "0.00001"),
            (0.000001, "1e-6"),
            (-0.0, "0.0"),
            (0.0, "0.0"),
            (1.5e300, "1.5e300"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e308"),
            (123456789012345680.0, "1.2345678901234568e17"),
        ] {
            assert_eq!(f64s(v), want, "{v:?}");
        }
    }

    #[test]
    fn strings_escape_controls_only() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\n\u{1}\u{7f}é😀");
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "\"a\\\"b\\\\c\\n\\u0001\u{7f}é😀\""
        );
    }

    #[test]
    fn hex_is_lowercased_and_checked() {
        let mut out = Vec::new();
        assert!(write_binary(&mut out, "DEadBEef", BinaryEncoding::Base16, Some(4)).is_ok());
        assert_eq!(out, b"\"deadbeef\"");
        assert!(matches!(
            write_binary(&mut out, "abc", BinaryEncoding::Base16, None),
            Err(BinaryFault::Malformed(_))
        ));
        assert!(matches!(
            write_binary(&mut out, "ab", BinaryEncoding::Base16, Some(2)),
            Err(BinaryFault::Length {
                expected: 2,
                got: 1
            })
        ));
    }
}
