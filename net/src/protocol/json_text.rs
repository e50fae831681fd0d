//! The one JSON text writer behind every message corecast builds by hand.
//!
//! Output matches msgspec's compact encoding (PROTOCOL.md §5): no whitespace, non-ASCII as raw
//! UTF-8, and in strings only `"`, `\` and the C0 controls escaped (`\b \f \n \r \t` in short
//! form, the rest as `\u00XX`); `/` and DEL are written as they are.

/// Bytes `s` takes once escaped and quoted by [`write_str`].
pub fn str_len(s: &str) -> usize {
    2 + s.bytes().map(escaped_len).sum::<usize>()
}

fn escaped_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

/// Appends `s` as a quoted, escaped JSON string (RFC 8259 §7).
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if escaped_len(b) == 1 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends `v` in decimal.
pub fn write_u64(v: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal, with a leading `-` when negative.
pub fn write_i64(v: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal, or `null` for `None`.
pub fn write_opt_u64(v: Option<u64>, out: &mut Vec<u8>) {
    match v {
        Some(v) => write_u64(v, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `s` as a JSON string, or `null` for `None`.
pub fn write_opt_str(s: Option<&str>, out: &mut Vec<u8>) {
    match s {
        Some(s) => write_str(s, out),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends `true` or `false`.
pub fn write_bool(v: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}
