//! Arrow arrays → canonical rows: the replay side's encoder.
//!
//! In: one decoded record batch of a segment and the stream's columns. Out: each row's canonical
//! compact JSON (PROTOCOL.md §5) appended to a buffer, written with the validator's own writers
//! ([`write_json_str`], [`write_f64`], [`write_f32`], `itoa`), keys in schema order, map entries
//! in stored order, a null as `null`, base16 lowercase, base64 standard padded. Runs on the
//! replay worker's thread.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeBinaryArray, Float32Array, Float64Array,
    Int32Array, Int64Array, ListArray, MapArray, StringArray, StructArray,
};
use base64::Engine as _;

use super::TierError;
use crate::schema::{write_f32, write_f64, write_json_str, BinaryEncoding, Column, ColumnType};

/// A typed view of one column of a batch, with its nested children.
pub(crate) enum ColumnView<'a> {
    Boolean(&'a BooleanArray),
    Int32(&'a Int32Array),
    Int64(&'a Int64Array),
    Float32(&'a Float32Array),
    Float64(&'a Float64Array),
    Utf8(&'a StringArray),
    Binary(BinaryEncoding, &'a BinaryArray),
    Fixed(BinaryEncoding, &'a FixedSizeBinaryArray),
    Struct(&'a StructArray, &'a [Column], Vec<ColumnView<'a>>),
    List(&'a ListArray, Box<ColumnView<'a>>),
    Map(&'a MapArray, &'a StringArray, Box<ColumnView<'a>>),
}

fn mismatch(what: &str) -> TierError {
    TierError::SchemaMismatch(format!("a column's data is not {what}"))
}

impl<'a> ColumnView<'a> {
    /// Views `array` as a column of type `ty`.
    pub(crate) fn new(ty: &'a ColumnType, array: &'a ArrayRef) -> Result<Self, TierError> {
        Self::of(ty, array.as_ref())
    }

    fn of(ty: &'a ColumnType, array: &'a dyn Array) -> Result<Self, TierError> {
        Ok(match ty {
            ColumnType::Boolean => {
                ColumnView::Boolean(array.as_boolean_opt().ok_or_else(|| mismatch("boolean"))?)
            }
            ColumnType::Int32 => ColumnView::Int32(
                array
                    .as_primitive_opt::<Int32Type>()
                    .ok_or_else(|| mismatch("int32"))?,
            ),
            ColumnType::Int64 => ColumnView::Int64(
                array
                    .as_primitive_opt::<Int64Type>()
                    .ok_or_else(|| mismatch("int64"))?,
            ),
            ColumnType::Float32 => ColumnView::Float32(
                array
                    .as_primitive_opt::<Float32Type>()
                    .ok_or_else(|| mismatch("float32"))?,
            ),
            ColumnType::Float64 => ColumnView::Float64(
                array
                    .as_primitive_opt::<Float64Type>()
                    .ok_or_else(|| mismatch("float64"))?,
            ),
            ColumnType::Utf8 => ColumnView::Utf8(
                array
                    .as_string_opt::<i32>()
                    .ok_or_else(|| mismatch("utf8"))?,
            ),
            ColumnType::Binary {
                encoding,
                fixed_len: None,
            } => ColumnView::Binary(
                *encoding,
                array
                    .as_binary_opt::<i32>()
                    .ok_or_else(|| mismatch("binary"))?,
            ),
            ColumnType::Binary {
                encoding,
                fixed_len: Some(_),
            } => ColumnView::Fixed(
                *encoding,
                array
                    .as_fixed_size_binary_opt()
                    .ok_or_else(|| mismatch("fixed_size_binary"))?,
            ),
            ColumnType::Struct(fields) => {
                let s = array.as_struct_opt().ok_or_else(|| mismatch("a struct"))?;
                if s.num_columns() != fields.columns().len() {
                    return Err(mismatch("a struct of the declared fields"));
                }
                let children = fields
                    .columns()
                    .iter()
                    .zip(s.columns())
                    .map(|(c, a)| ColumnView::of(c.ty(), a.as_ref()))
                    .collect::<Result<Vec<_>, _>>()?;
                ColumnView::Struct(s, fields.columns(), children)
            }
            ColumnType::List(item) => {
                let l = array
                    .as_list_opt::<i32>()
                    .ok_or_else(|| mismatch("a list"))?;
                ColumnView::List(l, Box::new(ColumnView::of(item, l.values().as_ref())?))
            }
            ColumnType::Map(value) => {
                let m = array.as_map_opt().ok_or_else(|| mismatch("a map"))?;
                let keys = m
                    .keys()
                    .as_string_opt::<i32>()
                    .ok_or_else(|| mismatch("a map with utf8 keys"))?;
                ColumnView::Map(
                    m,
                    keys,
                    Box::new(ColumnView::of(value, m.values().as_ref())?),
                )
            }
        })
    }

    /// Whether row `i` is null.
    #[inline]
    pub(super) fn is_null(&self, i: usize) -> bool {
        match self {
            ColumnView::Boolean(a) => a.is_null(i),
            ColumnView::Int32(a) => a.is_null(i),
            ColumnView::Int64(a) => a.is_null(i),
            ColumnView::Float32(a) => a.is_null(i),
            ColumnView::Float64(a) => a.is_null(i),
            ColumnView::Utf8(a) => a.is_null(i),
            ColumnView::Binary(_, a) => a.is_null(i),
            ColumnView::Fixed(_, a) => a.is_null(i),
            ColumnView::Struct(a, ..) => a.is_null(i),
            ColumnView::List(a, _) => a.is_null(i),
            ColumnView::Map(a, ..) => a.is_null(i),
        }
    }

    /// Appends the non-null value at row `i`.
    pub(super) fn write(&self, i: usize, out: &mut Vec<u8>) {
        match self {
            ColumnView::Boolean(a) => {
                out.extend_from_slice(if a.value(i) { b"true" } else { b"false" });
            }
            ColumnView::Int32(a) => write_int(out, i64::from(a.value(i))),
            ColumnView::Int64(a) => write_int(out, a.value(i)),
            ColumnView::Float32(a) => write_f32(out, a.value(i)),
            ColumnView::Float64(a) => write_f64(out, a.value(i)),
            ColumnView::Utf8(a) => write_json_str(out, a.value(i)),
            ColumnView::Binary(encoding, a) => write_binary(out, *encoding, a.value(i)),
            ColumnView::Fixed(encoding, a) => write_binary(out, *encoding, a.value(i)),
            ColumnView::Struct(_, columns, children) => write_struct(columns, children, i, out),
            ColumnView::List(a, item) => {
                let offsets = a.value_offsets();
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                out.push(b'[');
                for j in start..end {
                    if j > start {
                        out.push(b',');
                    }
                    item.write(j, out);
                }
                out.push(b']');
            }
            ColumnView::Map(a, keys, values) => {
                let offsets = a.value_offsets();
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                out.push(b'{');
                for j in start..end {
                    if j > start {
                        out.push(b',');
                    }
                    write_json_str(out, keys.value(j));
                    out.push(b':');
                    values.write(j, out);
                }
                out.push(b'}');
            }
        }
    }
}

/// Appends `{"a":…,"b":…}` for row `i`: the row itself or a struct value.
pub(crate) fn write_struct(
    columns: &[Column],
    views: &[ColumnView<'_>],
    i: usize,
    out: &mut Vec<u8>,
) {
    out.push(b'{');
    for (p, (column, view)) in columns.iter().zip(views).enumerate() {
        if p > 0 {
            out.push(b',');
        }
        out.extend_from_slice(column.key_json());
        if column.nullable() && view.is_null(i) {
            out.extend_from_slice(b"null");
        } else {
            view.write(i, out);
        }
    }
    out.push(b'}');
}

#[inline]
fn write_int(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Binary as the validator writes it: lowercase hex, or standard padded base64, in quotes.
fn write_binary(out: &mut Vec<u8>, encoding: BinaryEncoding, bytes: &[u8]) {
    out.push(b'"');
    match encoding {
        BinaryEncoding::Base16 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.reserve(bytes.len() * 2);
            for &b in bytes {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
        }
        BinaryEncoding::Base64 => {
            let start = out.len();
            let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
            out.resize(start + len, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(bytes, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + written);
        }
    }
    out.push(b'"');
}
