//! Canonical rows → Arrow arrays: the sealer's decoder.
//!
//! In: one encoded row (the canonical compact JSON the validator wrote, PROTOCOL.md §5) and the
//! stream's columns. Out: the row's values appended to one [`ColumnBuilder`] per column, which
//! [`ColumnBuilder::finish`] turns into Arrow arrays. Runs on the sealer's thread.
//!
//! The parser is schema-directed and accepts only the canonical form: no whitespace, keys in
//! schema order exactly as `Column::key_json` spells them, `null` only where the column is
//! nullable, the escapes `write_json_str` writes and no others, integers without leading zeros.
//! Anything else is a [`Fault`], which the writer reports as [`super::TierError::BadRow`]. That
//! is stricter (and several times faster) than parsing a `sonic_rs::Value`: a row it accepts
//! re-encodes to the same bytes. Floats are parsed with `std` at the column's own width (an
//! `f32` column's text straight to `f32`, never through `f64`), which is correctly rounded, so
//! the shortest round-trip text gives back exactly the value it was written from.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, FixedSizeBinaryBuilder, Float32Builder, Float64Builder,
    Int32Builder, Int64Builder, NullBufferBuilder, OffsetBufferBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, ListArray, MapArray, StructArray};
use arrow_schema::{ArrowError, DataType, FieldRef, Fields};
use base64::Engine as _;

use crate::schema::{BinaryEncoding, Column, ColumnType};

/// What the parser expected at a byte position of the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fault {
    /// Byte position in the row.
    pub at: usize,
    /// What was expected.
    pub what: &'static str,
}

/// A cursor over one encoded row.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    fn fault(&self, what: &'static str) -> Fault {
        Fault { at: self.pos, what }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn expect_byte(&mut self, b: u8, what: &'static str) -> Result<(), Fault> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.fault(what))
        }
    }

    #[inline]
    fn expect_bytes(&mut self, want: &[u8], what: &'static str) -> Result<(), Fault> {
        if self.bytes[self.pos..].starts_with(want) {
            self.pos += want.len();
            Ok(())
        } else {
            Err(self.fault(what))
        }
    }

    /// `null` if it comes next (consumed), for nullable positions.
    #[inline]
    fn take_null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.bytes[self.pos..].starts_with(b"null") {
            self.pos += 4;
            true
        } else {
            false
        }
    }

    /// Checks that the whole row was consumed.
    pub(super) fn finish(&self) -> Result<(), Fault> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(self.fault("the end of the row"))
        }
    }

    fn boolean(&mut self) -> Result<bool, Fault> {
        let rest = &self.bytes[self.pos..];
        if rest.starts_with(b"true") {
            self.pos += 4;
            Ok(true)
        } else if rest.starts_with(b"false") {
            self.pos += 5;
            Ok(false)
        } else {
            Err(self.fault("true or false"))
        }
    }

    /// An integer as `itoa` writes it: optional `-`, no leading zeros, no `-0`, in `i64`.
    fn integer(&mut self) -> Result<i64, Fault> {
        const WHAT: &str = "an integer in canonical form";
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let digits_start = self.pos;
        let mut magnitude: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(d - b'0')))
                .ok_or(Fault {
                    at: start,
                    what: WHAT,
                })?;
            self.pos += 1;
        }
        let digits = self.pos - digits_start;
        let leading_zero = digits > 1 && self.bytes[digits_start] == b'0';
        if digits == 0 || leading_zero || (negative && magnitude == 0) {
            return Err(Fault {
                at: start,
                what: WHAT,
            });
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return Err(self.fault("an integer, not a float"));
        }
        if negative {
            if magnitude <= 1 << 63 {
                Ok((magnitude as i64).wrapping_neg())
            } else {
                Err(Fault {
                    at: start,
                    what: WHAT,
                })
            }
        } else {
            i64::try_from(magnitude).map_err(|_| Fault {
                at: start,
                what: WHAT,
            })
        }
    }

    /// The text of a number (for a float parse).
    fn number_text(&mut self) -> Result<&'a str, Fault> {
        let start = self.pos;
        while let Some(b'0'..=b'9' | b'-' | b'.' | b'e' | b'E') = self.peek() {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.fault("a number"));
        }
        std::str::from_utf8(&self.bytes[start..self.pos]).map_err(|_| self.fault("a number"))
    }

    fn f64(&mut self) -> Result<f64, Fault> {
        let at = self.pos;
        match self.number_text()?.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(Fault {
                at,
                what: "a finite float",
            }),
        }
    }

    fn f32(&mut self) -> Result<f32, Fault> {
        let at = self.pos;
        match self.number_text()?.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(Fault {
                at,
                what: "a finite float32",
            }),
        }
    }

    /// A string as `write_json_str` writes it. Borrowed when it holds no escape, else unescaped
    /// into `scratch`.
    fn string<'s>(&mut self, scratch: &'s mut String) -> Result<&'s str, Fault>
    where
        'a: 's,
    {
        self.expect_byte(b'"', "a string")?;
        let start = self.pos;
        let bytes = self.bytes;
        let mut i = start;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    self.pos = i + 1;
                    return std::str::from_utf8(&bytes[start..i]).map_err(|_| Fault {
                        at: start,
                        what: "UTF-8 text",
                    });
                }
                b'\\' => break,
                0x00..=0x1f => {
                    return Err(Fault {
                        at: i,
                        what: "an escaped control character",
                    })
                }
                _ => i += 1,
            }
        }
        // Slow path: escapes.
        scratch.clear();
        let mut raw_start = start;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    push_utf8(scratch, &bytes[raw_start..i], raw_start)?;
                    self.pos = i + 1;
                    return Ok(scratch.as_str());
                }
                b'\\' => {
                    push_utf8(scratch, &bytes[raw_start..i], raw_start)?;
                    let c = match bytes.get(i + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'u') => {
                            let hex = bytes.get(i + 2..i + 6).ok_or(Fault {
                                at: i,
                                what: "a \\u00XX escape",
                            })?;
                            let v = control_escape(hex).ok_or(Fault {
                                at: i,
                                what: "a canonical \\u00XX escape (lowercase, control only)",
                            })?;
                            i += 4;
                            char::from(v)
                        }
                        _ => {
                            return Err(Fault {
                                at: i,
                                what: "a canonical escape",
                            })
                        }
                    };
                    scratch.push(c);
                    i += 2;
                    raw_start = i;
                }
                0x00..=0x1f => {
                    return Err(Fault {
                        at: i,
                        what: "an escaped control character",
                    })
                }
                _ => i += 1,
            }
        }
        Err(Fault {
            at: bytes.len(),
            what: "the end of a string",
        })
    }

    /// The raw text of a string with no escapes (binary columns' hex or base64).
    fn plain_string(&mut self) -> Result<&'a [u8], Fault> {
        self.expect_byte(b'"', "a string")?;
        let start = self.pos;
        let end = self.bytes[start..]
            .iter()
            .position(|&b| b == b'"')
            .ok_or(self.fault("the end of a string"))?;
        self.pos = start + end + 1;
        Ok(&self.bytes[start..start + end])
    }
}

fn push_utf8(out: &mut String, bytes: &[u8], at: usize) -> Result<(), Fault> {
    let s = std::str::from_utf8(bytes).map_err(|_| Fault {
        at,
        what: "UTF-8 text",
    })?;
    out.push_str(s);
    Ok(())
}

/// `00XX` (lowercase hex) naming a control character that has no short escape.
fn control_escape(hex: &[u8]) -> Option<u8> {
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    if hex[0] != b'0' || hex[1] != b'0' {
        return None;
    }
    let v = nibble(hex[2])? << 4 | nibble(hex[3])?;
    let short = matches!(v, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
    (v < 0x20 && !short).then_some(v)
}

/// Decodes lowercase hex into `out`.
fn decode_hex(text: &[u8], out: &mut Vec<u8>) -> bool {
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    if !text.len().is_multiple_of(2) {
        return false;
    }
    out.clear();
    out.reserve(text.len() / 2);
    for pair in text.chunks_exact(2) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => out.push(h << 4 | l),
            _ => return false,
        }
    }
    true
}

/// Appends one column's values; one per top-level column, a tree of them for nested types.
pub(super) enum ColumnBuilder {
    /// boolean
    Boolean(BooleanBuilder),
    /// int32
    Int32(Int32Builder),
    /// int64
    Int64(Int64Builder),
    /// float32
    Float32(Float32Builder),
    /// float64
    Float64(Float64Builder),
    /// utf8
    Utf8(StringBuilder),
    /// binary
    Binary(BinaryEncoding, BinaryBuilder),
    /// fixed_size_binary(N)
    Fixed(BinaryEncoding, FixedSizeBinaryBuilder, Vec<u8>),
    /// struct
    Struct {
        /// The Arrow fields (ids included).
        fields: Fields,
        /// One builder per field.
        children: Vec<ColumnBuilder>,
        /// Validity.
        nulls: NullBufferBuilder,
    },
    /// list
    List {
        /// The item field.
        item: FieldRef,
        /// Offsets into the items.
        offsets: OffsetBufferBuilder<i32>,
        /// The items.
        child: Box<ColumnBuilder>,
        /// Validity.
        nulls: NullBufferBuilder,
    },
    /// map
    Map {
        /// The `entries` field.
        entries: FieldRef,
        /// Offsets into the entries.
        offsets: OffsetBufferBuilder<i32>,
        /// The keys.
        keys: StringBuilder,
        /// The values.
        values: Box<ColumnBuilder>,
        /// Validity.
        nulls: NullBufferBuilder,
    },
}

impl ColumnBuilder {
    /// A builder for a column of type `ty` whose Arrow field has `data_type`.
    pub(super) fn new(ty: &ColumnType, data_type: &DataType, capacity: usize) -> ColumnBuilder {
        match (ty, data_type) {
            (ColumnType::Boolean, _) => {
                ColumnBuilder::Boolean(BooleanBuilder::with_capacity(capacity))
            }
            (ColumnType::Int32, _) => ColumnBuilder::Int32(Int32Builder::with_capacity(capacity)),
            (ColumnType::Int64, _) => ColumnBuilder::Int64(Int64Builder::with_capacity(capacity)),
            (ColumnType::Float32, _) => {
                ColumnBuilder::Float32(Float32Builder::with_capacity(capacity))
            }
            (ColumnType::Float64, _) => {
                ColumnBuilder::Float64(Float64Builder::with_capacity(capacity))
            }
            (ColumnType::Utf8, _) => {
                ColumnBuilder::Utf8(StringBuilder::with_capacity(capacity, capacity * 8))
            }
            (
                ColumnType::Binary {
                    encoding,
                    fixed_len: Some(n),
                },
                _,
            ) => ColumnBuilder::Fixed(
                *encoding,
                FixedSizeBinaryBuilder::with_capacity(capacity, *n),
                vec![0; usize::try_from(*n).unwrap_or(0)],
            ),
            (ColumnType::Binary { encoding, .. }, _) => ColumnBuilder::Binary(
                *encoding,
                BinaryBuilder::with_capacity(capacity, capacity * 8),
            ),
            (ColumnType::Struct(columns), DataType::Struct(fields)) => ColumnBuilder::Struct {
                children: columns
                    .columns()
                    .iter()
                    .zip(fields.iter())
                    .map(|(c, f)| ColumnBuilder::new(c.ty(), f.data_type(), capacity))
                    .collect(),
                fields: fields.clone(),
                nulls: NullBufferBuilder::new(capacity),
            },
            (ColumnType::List(item_ty), DataType::List(item)) => ColumnBuilder::List {
                child: Box::new(ColumnBuilder::new(item_ty, item.data_type(), capacity)),
                item: item.clone(),
                offsets: OffsetBufferBuilder::new(capacity),
                nulls: NullBufferBuilder::new(capacity),
            },
            (ColumnType::Map(value_ty), DataType::Map(entries, _)) => {
                let value_type = match entries.data_type() {
                    DataType::Struct(kv) if kv.len() == 2 => kv[1].data_type().clone(),
                    other => other.clone(),
                };
                ColumnBuilder::Map {
                    values: Box::new(ColumnBuilder::new(value_ty, &value_type, capacity)),
                    entries: entries.clone(),
                    offsets: OffsetBufferBuilder::new(capacity),
                    keys: StringBuilder::with_capacity(capacity, capacity * 8),
                    nulls: NullBufferBuilder::new(capacity),
                }
            }
            // `segment_schema` derives the Arrow type from the same `ColumnType`, so the shapes
            // always agree; a mismatch would be a bug there.
            (ty, dt) => unreachable!("column type {ty:?} with Arrow type {dt}"),
        }
    }

    /// Appends a null (`nullable`) or, under a null parent, a placeholder that no reader sees.
    pub(super) fn append_null(&mut self, nullable: bool) {
        if !nullable {
            self.append_placeholder();
            return;
        }
        match self {
            ColumnBuilder::Boolean(b) => b.append_null(),
            ColumnBuilder::Int32(b) => b.append_null(),
            ColumnBuilder::Int64(b) => b.append_null(),
            ColumnBuilder::Float32(b) => b.append_null(),
            ColumnBuilder::Float64(b) => b.append_null(),
            ColumnBuilder::Utf8(b) => b.append_null(),
            ColumnBuilder::Binary(_, b) => b.append_null(),
            ColumnBuilder::Fixed(_, b, _) => b.append_null(),
            ColumnBuilder::Struct {
                fields,
                children,
                nulls,
            } => {
                for (f, c) in fields.iter().zip(children.iter_mut()) {
                    c.append_null(f.is_nullable());
                }
                nulls.append_null();
            }
            ColumnBuilder::List { offsets, nulls, .. }
            | ColumnBuilder::Map { offsets, nulls, .. } => {
                offsets.push_length(0);
                nulls.append_null();
            }
        }
    }

    /// A valid default value (zero, empty) for a non-nullable child of a null struct.
    fn append_placeholder(&mut self) {
        match self {
            ColumnBuilder::Boolean(b) => b.append_value(false),
            ColumnBuilder::Int32(b) => b.append_value(0),
            ColumnBuilder::Int64(b) => b.append_value(0),
            ColumnBuilder::Float32(b) => b.append_value(0.0),
            ColumnBuilder::Float64(b) => b.append_value(0.0),
            ColumnBuilder::Utf8(b) => b.append_value(""),
            ColumnBuilder::Binary(_, b) => b.append_value(b""),
            ColumnBuilder::Fixed(_, b, zeros) => {
                // The zero buffer has the declared length, so this cannot fail.
                let _ = b.append_value(zeros.as_slice());
            }
            ColumnBuilder::Struct {
                fields,
                children,
                nulls,
            } => {
                for (f, c) in fields.iter().zip(children.iter_mut()) {
                    c.append_null(f.is_nullable());
                }
                nulls.append_non_null();
            }
            ColumnBuilder::List { offsets, nulls, .. }
            | ColumnBuilder::Map { offsets, nulls, .. } => {
                offsets.push_length(0);
                nulls.append_non_null();
            }
        }
    }

    /// Parses one non-null value of `ty` at the cursor and appends it.
    pub(super) fn append_value(
        &mut self,
        ty: &ColumnType,
        cur: &mut Cursor<'_>,
        scratch: &mut Scratch,
    ) -> Result<(), Fault> {
        match (self, ty) {
            (ColumnBuilder::Boolean(b), _) => b.append_value(cur.boolean()?),
            (ColumnBuilder::Int32(b), _) => {
                let at = cur.pos;
                let v = i32::try_from(cur.integer()?).map_err(|_| Fault {
                    at,
                    what: "an int32",
                })?;
                b.append_value(v);
            }
            (ColumnBuilder::Int64(b), _) => b.append_value(cur.integer()?),
            (ColumnBuilder::Float32(b), _) => b.append_value(cur.f32()?),
            (ColumnBuilder::Float64(b), _) => b.append_value(cur.f64()?),
            (ColumnBuilder::Utf8(b), _) => b.append_value(cur.string(&mut scratch.text)?),
            (ColumnBuilder::Binary(encoding, b), _) => {
                decode_binary(*encoding, cur, &mut scratch.bytes)?;
                b.append_value(&scratch.bytes);
            }
            (ColumnBuilder::Fixed(encoding, b, _), _) => {
                let at = cur.pos;
                decode_binary(*encoding, cur, &mut scratch.bytes)?;
                b.append_value(&scratch.bytes).map_err(|_| Fault {
                    at,
                    what: "binary of the declared bytesN length",
                })?;
            }
            (
                ColumnBuilder::Struct {
                    children, nulls, ..
                },
                ColumnType::Struct(columns),
            ) => {
                decode_struct(columns.columns(), children, cur, scratch)?;
                nulls.append_non_null();
            }
            (
                ColumnBuilder::List {
                    offsets,
                    child,
                    nulls,
                    ..
                },
                ColumnType::List(item_ty),
            ) => {
                cur.expect_byte(b'[', "an array")?;
                let mut n = 0;
                if cur.peek() == Some(b']') {
                    cur.pos += 1;
                } else {
                    loop {
                        child.append_value(item_ty, cur, scratch)?;
                        n += 1;
                        match cur.peek() {
                            Some(b',') => cur.pos += 1,
                            Some(b']') => {
                                cur.pos += 1;
                                break;
                            }
                            _ => return Err(cur.fault("',' or ']'")),
                        }
                    }
                }
                offsets.push_length(n);
                nulls.append_non_null();
            }
            (
                ColumnBuilder::Map {
                    offsets,
                    keys,
                    values,
                    nulls,
                    ..
                },
                ColumnType::Map(value_ty),
            ) => {
                cur.expect_byte(b'{', "an object")?;
                let mut n = 0;
                if cur.peek() == Some(b'}') {
                    cur.pos += 1;
                } else {
                    loop {
                        keys.append_value(cur.string(&mut scratch.text)?);
                        cur.expect_byte(b':', "':'")?;
                        values.append_value(value_ty, cur, scratch)?;
                        n += 1;
                        match cur.peek() {
                            Some(b',') => cur.pos += 1,
                            Some(b'}') => {
                                cur.pos += 1;
                                break;
                            }
                            _ => return Err(cur.fault("',' or '}'")),
                        }
                    }
                }
                offsets.push_length(n);
                nulls.append_non_null();
            }
            _ => return Err(cur.fault("a value of the column's type")),
        }
        Ok(())
    }

    /// The array of everything appended so far; the builder starts over empty.
    pub(super) fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            ColumnBuilder::Boolean(b) => Arc::new(b.finish()),
            ColumnBuilder::Int32(b) => Arc::new(b.finish()),
            ColumnBuilder::Int64(b) => Arc::new(b.finish()),
            ColumnBuilder::Float32(b) => Arc::new(b.finish()),
            ColumnBuilder::Float64(b) => Arc::new(b.finish()),
            ColumnBuilder::Utf8(b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(_, b) => Arc::new(b.finish()),
            ColumnBuilder::Fixed(_, b, _) => Arc::new(b.finish()),
            ColumnBuilder::Struct {
                fields,
                children,
                nulls,
            } => {
                let arrays = children
                    .iter_mut()
                    .map(ColumnBuilder::finish)
                    .collect::<Result<Vec<_>, _>>()?;
                let len = nulls.len();
                Arc::new(StructArray::try_new_with_length(
                    fields.clone(),
                    arrays,
                    nulls.finish(),
                    len,
                )?)
            }
            ColumnBuilder::List {
                item,
                offsets,
                child,
                nulls,
            } => {
                let offsets = std::mem::replace(offsets, OffsetBufferBuilder::new(0)).finish();
                Arc::new(ListArray::try_new(
                    item.clone(),
                    offsets,
                    child.finish()?,
                    nulls.finish(),
                )?)
            }
            ColumnBuilder::Map {
                entries,
                offsets,
                keys,
                values,
                nulls,
            } => {
                let offsets = std::mem::replace(offsets, OffsetBufferBuilder::new(0)).finish();
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(ArrowError::SchemaError(
                        "map entries are not a struct".to_string(),
                    ));
                };
                let keys: ArrayRef = Arc::new(keys.finish());
                let values = values.finish()?;
                let entry_array = StructArray::try_new(kv.clone(), vec![keys, values], None)?;
                Arc::new(MapArray::try_new(
                    entries.clone(),
                    offsets,
                    entry_array,
                    nulls.finish(),
                    false,
                )?)
            }
        })
    }

    /// How many values are appended (for checks).
    #[cfg(test)]
    fn len(&mut self) -> usize {
        use arrow_array::Array as _;
        self.finish().map(|a| a.len()).unwrap_or(0)
    }
}

/// Reusable buffers for unescaped strings and decoded binary.
#[derive(Default)]
pub(super) struct Scratch {
    text: String,
    bytes: Vec<u8>,
}

fn decode_binary(
    encoding: BinaryEncoding,
    cur: &mut Cursor<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Fault> {
    let at = cur.pos;
    let text = cur.plain_string()?;
    let ok = match encoding {
        BinaryEncoding::Base16 => decode_hex(text, out),
        BinaryEncoding::Base64 => {
            out.clear();
            base64::engine::general_purpose::STANDARD
                .decode_vec(text, out)
                .is_ok()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Fault {
            at,
            what: match encoding {
                BinaryEncoding::Base16 => "lowercase hex",
                BinaryEncoding::Base64 => "standard padded base64",
            },
        })
    }
}

/// Parses `{"a":…,"b":…}` against `columns` (the row itself, or a struct value), appending each
/// field to its builder.
pub(super) fn decode_struct(
    columns: &[Column],
    builders: &mut [ColumnBuilder],
    cur: &mut Cursor<'_>,
    scratch: &mut Scratch,
) -> Result<(), Fault> {
    cur.expect_byte(b'{', "'{'")?;
    for (i, (column, builder)) in columns.iter().zip(builders.iter_mut()).enumerate() {
        if i > 0 {
            cur.expect_byte(b',', "','")?;
        }
        cur.expect_bytes(column.key_json(), "the next column's key")?;
        if column.nullable() && cur.take_null() {
            builder.append_null(true);
        } else {
            builder.append_value(column.ty(), cur, scratch)?;
        }
    }
    cur.expect_byte(b'}', "'}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_canonical_only() {
        for (text, want) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("01", None),
            ("-0", None),
            ("1.0", None),
            ("", None),
        ] {
            assert_eq!(Cursor::new(text.as_bytes()).integer().ok(), want, "{text}");
        }
    }

    #[test]
    fn strings_unescape_what_the_validator_escapes() {
        let mut s = String::new();
        let text = br#""a\"b\\c\n\u0001\u001f\t""#;
        assert_eq!(
            Cursor::new(text).string(&mut s).ok(),
            Some("a\"b\\c\n\u{1}\u{1f}\t")
        );
        for bad in [&br#""\u000a""#[..], br#""\u001F""#, br#""\/""#, b"\"\x01\""] {
            assert!(Cursor::new(bad).string(&mut s).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn placeholders_keep_lengths() {
        let mut b = ColumnBuilder::new(&ColumnType::Int64, &DataType::Int64, 4);
        b.append_null(false);
        b.append_null(true);
        assert_eq!(b.len(), 2);
    }
}
