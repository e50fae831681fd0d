//! Arrow record batches → canonical rows: the columnar front door (bulk ingest).
//!
//! In: one [`RecordBatch`] (decoded from an Arrow IPC body) and the stream's [`RowCodec`]. Out:
//! each row's canonical compact JSON (PROTOCOL.md §5) appended to a buffer, byte for byte what
//! [`RowCodec::encode_row`] writes for the same row published as JSON, or a [`ColumnarFault`]
//! naming the first row (in row order, then column order) that a JSON publish would refuse,
//! with the very same [`RowRejected`] message. Runs on an ingest worker thread.
//!
//! The rules are the JSON rules, read columnwise:
//!
//! - columns are matched by name, in any order; a column the schema does not declare, a reserved
//!   one (`streamcast_ts`, `litelink_offset`) or a name given twice is refused as the JSON row
//!   with those keys would be; a nullable column left out is `null` in every row; a non-null one
//!   left out is `required but absent`, and a null in it is `supplied as null`;
//! - an Arrow type stands for the JSON values it holds: every integer type (signed or not) for
//!   integers, range-checked against int32 / int64 exactly as JSON integers are; floats and
//!   integers for `number` columns (non-finite floats refused, a float32 column's range
//!   checked); utf8 (and large / view) for strings; Arrow binary (raw bytes) or utf8 text in the
//!   column's encoding (checked as JSON text is) for binary columns; struct for objects, map
//!   (utf8 keys, no repeats within a row) for maps, list for arrays; list items and map values
//!   are never null; an Arrow `null` column is a column of nulls;
//! - any other Arrow type (timestamps, decimals, dictionaries …) is refused naming it;
//! - values under a null (a struct's fields, a list's items where the struct or list is null)
//!   are not looked at, as they have no JSON counterpart.
//!
//! Conforming arrays of the canonical types are then written by the sealed tier's encoder
//! ([`crate::tier`]'s `row_encode`), the one that makes replayed frames byte-identical to live
//! ones; the JSON path and this one therefore share every value writer.
//!
//! A schema-less stream takes one utf8 column named `row`, each value a JSON object that is
//! checked and re-encoded by the schema-less codec, as a JSON publish of it would be.

use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{
    new_null_array, Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, Float64Array,
    GenericListArray, ListArray, MapArray, OffsetSizeTrait, PrimitiveArray, RecordBatch,
    StringArray, StructArray,
};
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields as ArrowFields};
use base64::Engine as _;

use super::encode::{self, BinaryFault};
use super::{
    BinaryEncoding, Column, ColumnType, Fields, JsonKind, RejectReason, RowCodec, RowRejected,
    LITELINK_OFFSET, STREAMCAST_TS,
};
use crate::tier::row_encode::{write_struct, ColumnView};

/// Why a batch (or one of its rows) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnarFault {
    /// Row `row` (0-based within the batch) would be refused as a JSON publish: the same
    /// [`RowRejected`], whose `Display` is the JSON path's message.
    Row {
        /// The row's index in the batch.
        row: usize,
        /// Which column and why.
        rejected: RowRejected,
    },
    /// Schema-less streams: row `row`'s `row` text is not a JSON value.
    NotJson {
        /// The row's index in the batch.
        row: usize,
        /// The parser's message.
        detail: String,
    },
    /// Row `row` encodes to more bytes than the stream takes in one row.
    RowTooLarge {
        /// The row's index in the batch.
        row: usize,
        /// Its encoded size.
        bytes: usize,
        /// The limit (the stream's `max_message_bytes`).
        limit: usize,
    },
    /// A schema-less stream's batch is not one utf8 column `row`.
    SchemalessShape {
        /// The batch's columns and types, e.g. `a: Int64, b: Utf8`.
        got: String,
    },
}

impl ColumnarFault {
    /// The row the fault is in, when it is one row's.
    pub fn row(&self) -> Option<usize> {
        match self {
            ColumnarFault::Row { row, .. }
            | ColumnarFault::NotJson { row, .. }
            | ColumnarFault::RowTooLarge { row, .. } => Some(*row),
            ColumnarFault::SchemalessShape { .. } => None,
        }
    }

    /// The column path, when the fault names one (`""` for the whole row).
    pub fn column(&self) -> Option<&str> {
        match self {
            ColumnarFault::Row { rejected, .. } => Some(&rejected.column),
            ColumnarFault::NotJson { .. } => Some(crate::tier::SCHEMALESS_ROW),
            ColumnarFault::RowTooLarge { .. } | ColumnarFault::SchemalessShape { .. } => None,
        }
    }

    /// Moves the fault's row index by `base` (a batch's first row within a larger body).
    pub fn shifted(self, base: usize) -> ColumnarFault {
        match self {
            ColumnarFault::Row { row, rejected } => ColumnarFault::Row {
                row: row + base,
                rejected,
            },
            ColumnarFault::NotJson { row, detail } => ColumnarFault::NotJson {
                row: row + base,
                detail,
            },
            ColumnarFault::RowTooLarge { row, bytes, limit } => ColumnarFault::RowTooLarge {
                row: row + base,
                bytes,
                limit,
            },
            other @ ColumnarFault::SchemalessShape { .. } => other,
        }
    }
}

impl fmt::Display for ColumnarFault {
    /// The message alone (the row index travels beside it): for [`ColumnarFault::Row`] exactly
    /// the JSON path's refusal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnarFault::Row { rejected, .. } => rejected.fmt(f),
            ColumnarFault::NotJson { detail, .. } => {
                write!(f, "column 'row' is not a JSON row: {detail}")
            }
            ColumnarFault::RowTooLarge { bytes, limit, .. } => write!(
                f,
                "the row encodes to {bytes} bytes, over the stream's max_message_bytes = {limit}"
            ),
            ColumnarFault::SchemalessShape { got } => write!(
                f,
                "a schema-less stream takes Arrow batches of one non-null utf8 column 'row' holding each row's JSON; got columns [{got}]"
            ),
        }
    }
}

impl std::error::Error for ColumnarFault {}

/// Appends the canonical encoding of every row of `batch` to `out`, pushing each row's end
/// (its length in `out` after it) to `ends`; rows larger than `row_bytes_max` are refused.
///
/// On error `out` and `ends` are truncated back to their lengths on entry: nothing of the
/// batch is left behind.
///
/// # Errors
///
/// The first fault in row order (then column order), as a JSON publish of the rows one by one
/// would meet it.
pub fn encode_batch(
    codec: &RowCodec,
    batch: &RecordBatch,
    row_bytes_max: usize,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ColumnarFault> {
    let (out_len, ends_len) = (out.len(), ends.len());
    let result = match codec {
        RowCodec::Schema(schema) => {
            encode_with_schema(schema.fields(), batch, row_bytes_max, out, ends)
        }
        RowCodec::Schemaless => encode_schemaless(codec, batch, row_bytes_max, out, ends),
    };
    if result.is_err() {
        out.truncate(out_len);
        ends.truncate(ends_len);
    }
    result
}

fn encode_with_schema(
    fields: &Fields,
    batch: &RecordBatch,
    row_bytes_max: usize,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ColumnarFault> {
    let rows = batch.num_rows();
    if rows == 0 {
        return Ok(());
    }
    let names: Vec<&str> = batch
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let arrays = conform_fields(fields, &names, batch.columns(), rows)
        .map_err(|found| found.into_fault(""))?;
    let views = fields
        .columns()
        .iter()
        .zip(&arrays)
        .map(|(c, a)| ColumnView::new(c.ty(), a))
        .collect::<Result<Vec<_>, _>>()
        .expect("conformed arrays have the canonical types");
    out.reserve(rows * 64);
    ends.reserve(rows);
    for i in 0..rows {
        let start = out.len();
        write_struct(fields.columns(), &views, i, out);
        let bytes = out.len() - start;
        if bytes > row_bytes_max {
            return Err(ColumnarFault::RowTooLarge {
                row: i,
                bytes,
                limit: row_bytes_max,
            });
        }
        ends.push(out.len());
    }
    Ok(())
}

fn encode_schemaless(
    codec: &RowCodec,
    batch: &RecordBatch,
    row_bytes_max: usize,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ColumnarFault> {
    let schema = batch.schema_ref();
    let shape = || ColumnarFault::SchemalessShape {
        got: schema
            .fields()
            .iter()
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", "),
    };
    if schema.fields().len() != 1 || schema.field(0).name() != crate::tier::SCHEMALESS_ROW {
        return Err(shape());
    }
    let column = batch.column(0);
    let Some(text) = string_getter(column.as_ref()) else {
        return Err(shape());
    };
    for i in 0..batch.num_rows() {
        if column.is_null(i) {
            return Err(ColumnarFault::Row {
                row: i,
                rejected: RowRejected {
                    column: crate::tier::SCHEMALESS_ROW.to_string(),
                    reason: RejectReason::Null,
                },
            });
        }
        let value = crate::json::parse(text(i).as_bytes()).map_err(|e| ColumnarFault::NotJson {
            row: i,
            detail: e.to_string(),
        })?;
        let start = out.len();
        codec
            .encode_row(&value, out)
            .map_err(|rejected| ColumnarFault::Row { row: i, rejected })?;
        let bytes = out.len() - start;
        if bytes > row_bytes_max {
            return Err(ColumnarFault::RowTooLarge {
                row: i,
                bytes,
                limit: row_bytes_max,
            });
        }
        ends.push(out.len());
    }
    Ok(())
}

/// The first fault found in one array: its index in that array, the column path below it
/// (`""`: the array itself; `.x`, `[3]`, `[3].x` …) and the reason.
struct Found {
    row: usize,
    suffix: String,
    reason: RejectReason,
}

impl Found {
    fn at(row: usize, reason: RejectReason) -> Found {
        Found {
            row,
            suffix: String::new(),
            reason,
        }
    }

    /// Prepends `prefix` (a key or an index) to the path.
    fn under(mut self, prefix: &str) -> Found {
        self.suffix.insert_str(0, prefix);
        self
    }

    fn into_fault(self, column: &str) -> ColumnarFault {
        let mut path = column.to_string();
        path.push_str(&self.suffix);
        ColumnarFault::Row {
            row: self.row,
            rejected: RowRejected {
                column: path.trim_start_matches('.').to_string(),
                reason: self.reason,
            },
        }
    }
}

/// Keeps the earlier of two faults; at the same row the one found first (`best`) wins, which
/// is the order the JSON codec checks a row in.
fn earliest(best: &mut Option<Found>, candidate: Found) {
    if best.as_ref().is_none_or(|b| candidate.row < b.row) {
        *best = Some(candidate);
    }
}

/// Which rows of an array count: those under no null (a struct's null rows, a list's null
/// items). `None`: every row.
type Live<'a> = Option<&'a BooleanBuffer>;

#[inline]
fn live_at(live: Live<'_>, i: usize) -> bool {
    live.is_none_or(|b| b.value(i))
}

/// The first row that counts and holds a value.
fn first_valid(array: &dyn Array, live: Live<'_>) -> Option<usize> {
    (0..array.len()).find(|&i| live_at(live, i) && array.is_valid(i))
}

/// Rows that count and are not null in `array` (its children's live rows).
fn live_and_valid(array: &dyn Array, live: Live<'_>) -> Option<BooleanBuffer> {
    match (live, array.logical_nulls()) {
        (None, None) => None,
        (Some(l), None) => Some(l.clone()),
        (None, Some(n)) => Some(n.inner().clone()),
        (Some(l), Some(n)) => Some(l & n.inner()),
    }
}

/// Conforms a batch's named columns to the row's `fields`: one canonical array per declared
/// column, in declaration order. Faults of the row's keys (a repeated, reserved or unknown
/// column) are every row's, so row 0's.
fn conform_fields(
    fields: &Fields,
    names: &[&str],
    arrays: &[ArrayRef],
    rows: usize,
) -> Result<Vec<ArrayRef>, Found> {
    let (seen, key_fault) = match_keys(fields, names, true);
    let mut best = key_fault.map(|reason| Found::at(0, reason));
    let mut out = Vec::with_capacity(fields.columns().len());
    for (column, slot) in fields.columns().iter().zip(&seen) {
        let conformed = match slot {
            Some(j) => conform(column, &arrays[*j], None),
            None if column.nullable() => Ok(new_null_array(&canonical_type(column.ty()), rows)),
            None => Err(Found::at(0, RejectReason::Missing)),
        };
        match conformed {
            Ok(a) => out.push(a),
            Err(found) => {
                earliest(&mut best, found.under(&format!(".{}", column.name())));
                out.push(new_null_array(&canonical_type(column.ty()), rows));
            }
        }
    }
    match best {
        Some(found) => Err(found),
        None => Ok(out),
    }
}

/// Matches an object's keys against `fields` as the JSON codec does, in its order: a repeated
/// declared key or (at the `root`) a reserved key as soon as it is met, unknown keys after
/// the loop. Returns each declared column's position among `names` and the keys' fault.
fn match_keys(
    fields: &Fields,
    names: &[&str],
    root: bool,
) -> (Vec<Option<usize>>, Option<RejectReason>) {
    let mut seen = vec![None::<usize>; fields.columns().len()];
    let mut unknown: Vec<String> = Vec::new();
    for (j, name) in names.iter().enumerate() {
        match fields.position(name, j) {
            Some(p) if seen[p].is_some() => {
                let fault = RejectReason::DuplicateKey {
                    key: name.to_string(),
                };
                return (seen, Some(fault));
            }
            Some(p) => seen[p] = Some(j),
            None => {
                if root {
                    if let Some(key) = [STREAMCAST_TS, LITELINK_OFFSET]
                        .into_iter()
                        .find(|r| r == name)
                    {
                        return (seen, Some(RejectReason::Reserved { key }));
                    }
                }
                if !unknown.iter().any(|u| u == name) {
                    unknown.push(name.to_string());
                }
            }
        }
    }
    let fault = (!unknown.is_empty()).then(|| RejectReason::UnknownKeys {
        unknown,
        declared: fields.declared().to_string(),
    });
    (seen, fault)
}

/// The Arrow type `row_encode` reads a column of type `ty` as (nested fields all nullable: the
/// schema, not Arrow, says what may be null, and conforming has checked it).
fn canonical_type(ty: &ColumnType) -> DataType {
    match ty {
        ColumnType::Boolean => DataType::Boolean,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Utf8 => DataType::Utf8,
        ColumnType::Binary {
            fixed_len: Some(n), ..
        } => DataType::FixedSizeBinary(*n),
        ColumnType::Binary { .. } => DataType::Binary,
        ColumnType::Struct(fields) => DataType::Struct(struct_fields(fields)),
        ColumnType::List(item) => DataType::List(Arc::new(item_field(item))),
        ColumnType::Map(value) => DataType::Map(Arc::new(entries_field(value)), false),
    }
}

fn struct_fields(fields: &Fields) -> ArrowFields {
    fields
        .columns()
        .iter()
        .map(|c| Field::new(c.name(), canonical_type(c.ty()), true))
        .collect()
}

fn item_field(item: &ColumnType) -> Field {
    Field::new("item", canonical_type(item), true)
}

fn entries_field(value: &ColumnType) -> Field {
    Field::new(
        "entries",
        DataType::Struct(ArrowFields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", canonical_type(value), true),
        ])),
        false,
    )
}

/// What the JSON messages call values of an Arrow type, when there is a JSON counterpart.
fn json_kind(dt: &DataType) -> Option<JsonKind> {
    Some(match dt {
        DataType::Null => JsonKind::Null,
        DataType::Boolean => JsonKind::Boolean,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => JsonKind::Integer,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => JsonKind::Float,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => JsonKind::String,
        DataType::Struct(_) | DataType::Map(..) => JsonKind::Object,
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => JsonKind::Array,
        _ => return None,
    })
}

/// What a column of type `ty` takes, as the JSON messages say it.
fn expected(ty: &ColumnType) -> &'static str {
    match ty {
        ColumnType::Boolean => "a boolean",
        ColumnType::Int32 | ColumnType::Int64 => "an integer",
        ColumnType::Float32 | ColumnType::Float64 => "a number",
        ColumnType::Utf8 => "a string",
        ColumnType::Binary {
            encoding: BinaryEncoding::Base16,
            ..
        } => "a base16 string",
        ColumnType::Binary {
            encoding: BinaryEncoding::Base64,
            ..
        } => "a base64 string",
        ColumnType::Struct(_) | ColumnType::Map(_) => "an object",
        ColumnType::List(_) => "an array",
    }
}

/// Conforms one column (or struct field) to its declaration.
fn conform(column: &Column, array: &ArrayRef, live: Live<'_>) -> Result<ArrayRef, Found> {
    conform_value(column.ty(), column.nullable(), array, live)
}

fn conform_value(
    ty: &ColumnType,
    nullable: bool,
    array: &ArrayRef,
    live: Live<'_>,
) -> Result<ArrayRef, Found> {
    let mut best = None;
    if !nullable && array.logical_null_count() > 0 {
        if let Some(row) = (0..array.len()).find(|&i| live_at(live, i) && array.is_null(i)) {
            best = Some(Found::at(row, RejectReason::Null));
        }
    }
    if matches!(array.data_type(), DataType::Null) {
        return match best {
            Some(f) => Err(f),
            None => Ok(new_null_array(&canonical_type(ty), array.len())),
        };
    }
    match values(ty, array, live) {
        Ok(a) => match best {
            Some(f) => Err(f),
            None => Ok(a),
        },
        Err(found) => {
            earliest(&mut best, found);
            Err(best.expect("a fault was just recorded"))
        }
    }
}

/// Checks and converts the non-null values that count; nulls are kept as they are.
fn values(ty: &ColumnType, array: &ArrayRef, live: Live<'_>) -> Result<ArrayRef, Found> {
    let dt = array.data_type();
    let mismatch = || -> Result<ArrayRef, Found> {
        match first_valid(array.as_ref(), live) {
            // every value that counts is null: the column is all nulls
            None => Ok(new_null_array(&canonical_type(ty), array.len())),
            Some(row) => Err(Found::at(
                row,
                match json_kind(dt) {
                    Some(got) => RejectReason::WrongType {
                        expected: expected(ty),
                        got,
                    },
                    None => RejectReason::ArrowType {
                        expected: expected(ty),
                        got: dt.to_string(),
                    },
                },
            )),
        }
    };
    match ty {
        ColumnType::Boolean => match dt {
            DataType::Boolean => Ok(array.clone()),
            _ => mismatch(),
        },
        ColumnType::Int32 | ColumnType::Int64 => {
            let int32 = matches!(ty, ColumnType::Int32);
            match ints(array, live, int32) {
                Some(r) => r,
                None => mismatch(),
            }
        }
        ColumnType::Float64 => match dt {
            DataType::Float64 => {
                let a = array.as_primitive::<Float64Type>();
                check_finite(a, live)?;
                Ok(array.clone())
            }
            DataType::Float32 => {
                let a = array.as_primitive::<Float32Type>();
                check_finite(a, live)?;
                Ok(Arc::new(a.unary::<_, Float64Type>(f64::from)))
            }
            _ => match int_as_f64(array) {
                Some(a) => Ok(Arc::new(a)),
                None => mismatch(),
            },
        },
        ColumnType::Float32 => match dt {
            DataType::Float32 => {
                let a = array.as_primitive::<Float32Type>();
                check_finite(a, live)?;
                Ok(array.clone())
            }
            DataType::Float64 => {
                let a = array.as_primitive::<Float64Type>();
                check_finite(a, live)?;
                if let Some(row) = (0..a.len()).find(|&i| {
                    live_at(live, i) && a.is_valid(i) && (a.value(i) as f32).is_infinite()
                }) {
                    let mut text = Vec::new();
                    encode::write_f64(&mut text, a.value(row));
                    return Err(Found::at(
                        row,
                        RejectReason::OutOfRange {
                            value: String::from_utf8(text).unwrap_or_default(),
                            declared: "float32",
                        },
                    ));
                }
                Ok(Arc::new(a.unary::<_, Float32Type>(|x| x as f32)))
            }
            _ => match int_as_f64(array) {
                Some(a) => Ok(Arc::new(a.unary::<_, Float32Type>(|x| x as f32))),
                None => mismatch(),
            },
        },
        ColumnType::Utf8 => match dt {
            DataType::Utf8 => Ok(array.clone()),
            DataType::LargeUtf8 => Ok(Arc::new(
                array.as_string::<i64>().iter().collect::<StringArray>(),
            )),
            DataType::Utf8View => Ok(Arc::new(
                array.as_string_view().iter().collect::<StringArray>(),
            )),
            _ => mismatch(),
        },
        ColumnType::Binary {
            encoding,
            fixed_len,
        } => binary(array, live, *encoding, *fixed_len).unwrap_or_else(mismatch),
        ColumnType::Struct(fields) => match dt {
            DataType::Struct(arrow_fields) => {
                let s = array.as_struct();
                let names: Vec<&str> = arrow_fields.iter().map(|f| f.name().as_str()).collect();
                let live_struct = live_and_valid(s, live);
                let children = conform_struct(fields, &names, s, live, live_struct.as_ref())?;
                Ok(Arc::new(
                    StructArray::try_new(struct_fields(fields), children, s.nulls().cloned())
                        .expect("conformed children fit the struct"),
                ))
            }
            _ => mismatch(),
        },
        ColumnType::List(item) => match dt {
            DataType::List(_) => list(item, array.as_list::<i32>(), live),
            DataType::LargeList(_) => list(item, array.as_list::<i64>(), live),
            _ => mismatch(),
        },
        ColumnType::Map(value) => match dt {
            DataType::Map(..) => map(value, array.as_map(), live),
            _ => mismatch(),
        },
    }
}

/// A struct's children: like a row's columns, with the object's faults at its first valid row
/// that counts and the children's rows counting only where the struct is valid.
fn conform_struct(
    fields: &Fields,
    names: &[&str],
    s: &StructArray,
    live: Live<'_>,
    live_children: Live<'_>,
) -> Result<Vec<ArrayRef>, Found> {
    let rows = s.len();
    let mut best: Option<Found> = None;
    let (seen, key_fault) = match_keys(fields, names, false);
    if let Some(reason) = key_fault {
        if let Some(row) = first_valid(s, live) {
            earliest(&mut best, Found::at(row, reason));
        }
    }
    let mut out = Vec::with_capacity(fields.columns().len());
    for (column, slot) in fields.columns().iter().zip(&seen) {
        let key = format!(".{}", column.name());
        let conformed = match slot {
            Some(j) => conform(column, s.column(*j), live_children),
            None if column.nullable() => Ok(new_null_array(&canonical_type(column.ty()), rows)),
            None => match (0..rows).find(|&i| live_at(live_children, i)) {
                Some(row) => Err(Found::at(row, RejectReason::Missing)),
                None => Ok(new_null_array(&canonical_type(column.ty()), rows)),
            },
        };
        match conformed {
            Ok(a) => out.push(a),
            Err(found) => {
                earliest(&mut best, found.under(&key));
                out.push(new_null_array(&canonical_type(column.ty()), rows));
            }
        }
    }
    match best {
        Some(found) => Err(found),
        None => Ok(out),
    }
}

fn check_finite<T>(a: &PrimitiveArray<T>, live: Live<'_>) -> Result<(), Found>
where
    T: arrow_array::ArrowPrimitiveType,
    T::Native: num_finite::Finite,
{
    let values = a.values();
    // the common case first: no non-finite value at all (one vectorisable pass)
    if values.iter().all(|x| num_finite::Finite::finite(*x)) {
        return Ok(());
    }
    match (0..a.len())
        .find(|&i| live_at(live, i) && a.is_valid(i) && !num_finite::Finite::finite(values[i]))
    {
        Some(row) => Err(Found::at(row, RejectReason::NonFinite)),
        None => Ok(()),
    }
}

/// `is_finite` over the float types, for [`check_finite`].
mod num_finite {
    pub trait Finite: Copy {
        fn finite(self) -> bool;
    }
    impl Finite for f32 {
        fn finite(self) -> bool {
            self.is_finite()
        }
    }
    impl Finite for f64 {
        fn finite(self) -> bool {
            self.is_finite()
        }
    }
}

/// An integer array of any width as an int32 or int64 column, range-checked; `None` when the
/// array is not of an integer type.
fn ints(array: &ArrayRef, live: Live<'_>, int32: bool) -> Option<Result<ArrayRef, Found>> {
    let declared = if int32 { "int32" } else { "int64" };
    let (lo, hi): (i128, i128) = if int32 {
        (i32::MIN.into(), i32::MAX.into())
    } else {
        (i64::MIN.into(), i64::MAX.into())
    };
    fn widen<T>(a: &PrimitiveArray<T>) -> impl Fn(usize) -> i128 + '_
    where
        T: arrow_array::ArrowPrimitiveType,
        T::Native: Into<i128>,
    {
        move |i| a.value(i).into()
    }
    macro_rules! check {
        ($t:ty, $fits:expr) => {{
            let a = array.as_primitive::<$t>();
            if !$fits {
                let value = widen(a);
                if let Some(row) = (0..a.len())
                    .find(|&i| live_at(live, i) && a.is_valid(i) && !(lo..=hi).contains(&value(i)))
                {
                    return Some(Err(Found::at(
                        row,
                        RejectReason::OutOfRange {
                            value: value(row).to_string(),
                            declared,
                        },
                    )));
                }
            }
            Some(Ok(if int32 {
                if matches!(array.data_type(), DataType::Int32) {
                    array.clone()
                } else {
                    Arc::new(a.unary::<_, Int32Type>(|x| x as i32)) as ArrayRef
                }
            } else if matches!(array.data_type(), DataType::Int64) {
                array.clone()
            } else {
                Arc::new(a.unary::<_, Int64Type>(|x| x as i64)) as ArrayRef
            }))
        }};
    }
    match array.data_type() {
        DataType::Int8 => check!(Int8Type, true),
        DataType::Int16 => check!(Int16Type, true),
        DataType::Int32 => check!(Int32Type, true),
        DataType::Int64 => check!(Int64Type, !int32),
        DataType::UInt8 => check!(UInt8Type, true),
        DataType::UInt16 => check!(UInt16Type, true),
        DataType::UInt32 => check!(UInt32Type, !int32),
        DataType::UInt64 => check!(UInt64Type, false),
        _ => None,
    }
}

/// An integer array as floats (a JSON integer in a `number` column is its nearest double).
fn int_as_f64(array: &ArrayRef) -> Option<Float64Array> {
    macro_rules! conv {
        ($t:ty) => {
            Some(
                array
                    .as_primitive::<$t>()
                    .unary::<_, Float64Type>(|x| x as f64),
            )
        };
    }
    match array.data_type() {
        DataType::Int8 => conv!(Int8Type),
        DataType::Int16 => conv!(Int16Type),
        DataType::Int32 => conv!(Int32Type),
        DataType::Int64 => conv!(Int64Type),
        DataType::UInt8 => conv!(UInt8Type),
        DataType::UInt16 => conv!(UInt16Type),
        DataType::UInt32 => conv!(UInt32Type),
        DataType::UInt64 => conv!(UInt64Type),
        _ => None,
    }
}

/// A binary column from raw bytes (binary of any kind) or from utf8 text in the column's
/// encoding; `None` when the array is neither.
fn binary(
    array: &ArrayRef,
    live: Live<'_>,
    encoding: BinaryEncoding,
    fixed_len: Option<i32>,
) -> Option<Result<ArrayRef, Found>> {
    let len = array.len();
    let mut bytes: Vec<Option<Vec<u8>>> = Vec::with_capacity(len);
    let counts = |i: usize| live_at(live, i) && array.is_valid(i);
    let raw = bytes_getter(array.as_ref());
    if let Some(raw) = raw {
        for i in 0..len {
            if !counts(i) {
                bytes.push(None);
                continue;
            }
            let b = raw(i);
            if let Some(n) = fixed_len {
                if usize::try_from(n).ok() != Some(b.len()) {
                    return Some(Err(Found::at(
                        i,
                        RejectReason::BinaryLength {
                            expected: n,
                            got: b.len(),
                        },
                    )));
                }
            }
            bytes.push(Some(b.to_vec()));
        }
    } else {
        let text = string_getter(array.as_ref())?;
        let mut scratch = Vec::new();
        for i in 0..len {
            if !counts(i) {
                bytes.push(None);
                continue;
            }
            let t = text(i);
            scratch.clear();
            match encode::write_binary(&mut scratch, t, encoding, fixed_len) {
                Ok(()) => {}
                Err(BinaryFault::Malformed(detail)) => {
                    return Some(Err(Found::at(
                        i,
                        RejectReason::BadBinary {
                            encoding: encoding.name(),
                            detail,
                        },
                    )))
                }
                Err(BinaryFault::Length { expected, got }) => {
                    return Some(Err(Found::at(
                        i,
                        RejectReason::BinaryLength { expected, got },
                    )))
                }
            }
            bytes.push(Some(decode_text(t, encoding)));
        }
    }
    let nulls = NullBuffer::from_iter(bytes.iter().map(Option::is_some));
    Some(Ok(match fixed_len {
        Some(n) => {
            let width = usize::try_from(n).unwrap_or(0);
            let mut flat = Vec::with_capacity(len * width);
            for b in &bytes {
                match b {
                    Some(b) => flat.extend_from_slice(b),
                    None => flat.resize(flat.len() + width, 0),
                }
            }
            Arc::new(FixedSizeBinaryArray::new(n, flat.into(), Some(nulls)))
        }
        None => Arc::new(bytes.iter().map(Option::as_deref).collect::<BinaryArray>()),
    }))
}

/// Row `i`'s text, for any utf8 array; `None` for other types.
fn string_getter<'a>(array: &'a dyn Array) -> Option<Box<dyn Fn(usize) -> &'a str + 'a>> {
    Some(match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            Box::new(move |i| a.value(i))
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            Box::new(move |i| a.value(i))
        }
        DataType::Utf8View => {
            let a = array.as_string_view();
            Box::new(move |i| a.value(i))
        }
        _ => return None,
    })
}

/// Row `i`'s bytes, for any binary array; `None` for other types.
fn bytes_getter<'a>(array: &'a dyn Array) -> Option<Box<dyn Fn(usize) -> &'a [u8] + 'a>> {
    Some(match array.data_type() {
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            Box::new(move |i| a.value(i))
        }
        DataType::LargeBinary => {
            let a = array.as_binary::<i64>();
            Box::new(move |i| a.value(i))
        }
        DataType::BinaryView => {
            let a = array.as_binary_view();
            Box::new(move |i| a.value(i))
        }
        DataType::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            Box::new(move |i| a.value(i))
        }
        _ => return None,
    })
}

/// The bytes of binary text already checked by [`encode::write_binary`].
fn decode_text(text: &str, encoding: BinaryEncoding) -> Vec<u8> {
    match encoding {
        BinaryEncoding::Base16 => hex::decode(text).unwrap_or_default(),
        BinaryEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .unwrap_or_default(),
    }
}

/// The live rows of a list's (or map's) values: the items of rows that count and are valid.
fn item_live(
    offsets: &[usize],
    parent: Live<'_>,
    valid: &dyn Array,
    items: usize,
) -> BooleanBuffer {
    let mut b = BooleanBufferBuilder::new(items);
    b.append_n(items, false);
    for i in 0..offsets.len() - 1 {
        if live_at(parent, i) && valid.is_valid(i) {
            for j in offsets[i]..offsets[i + 1] {
                b.set_bit(j, true);
            }
        }
    }
    b.finish()
}

/// Most items all the lists (or maps) of one column may hold in one batch: Arrow's own offsets
/// are 32-bit, and a body of a few bytes can declare a `null`-typed list of billions of items.
const NESTED_ITEMS_MAX: usize = 1 << 26;

/// The fault of a list or map column holding more than [`NESTED_ITEMS_MAX`] items.
fn too_many_items(array: &dyn Array, live: Live<'_>, items: usize) -> Result<ArrayRef, Found> {
    Err(Found::at(
        first_valid(array, live).unwrap_or(0),
        RejectReason::ArrowType {
            expected: "at most 67108864 list items or map entries per batch",
            got: format!("{} with {items} of them", array.data_type()),
        },
    ))
}

/// The row holding item `j`, and `j`'s index within it.
fn row_of(offsets: &[usize], j: usize) -> (usize, usize) {
    let row = offsets.partition_point(|&o| o <= j) - 1;
    (row, j - offsets[row])
}

fn list<O: OffsetSizeTrait>(
    item: &ColumnType,
    l: &GenericListArray<O>,
    live: Live<'_>,
) -> Result<ArrayRef, Found> {
    let values = l.values();
    if values.len() > NESTED_ITEMS_MAX {
        return too_many_items(l, live, values.len());
    }
    let offsets: Vec<usize> = l.value_offsets().iter().map(|o| o.as_usize()).collect();
    let items = item_live(&offsets, live, l, values.len());
    let conformed = conform_value(item, false, values, Some(&items)).map_err(|found| {
        let (row, index) = row_of(&offsets, found.row);
        Found {
            row,
            suffix: format!("[{index}]{}", found.suffix),
            reason: found.reason,
        }
    })?;
    // below NESTED_ITEMS_MAX (< 2^31): every offset fits
    let offsets32: Vec<i32> = offsets.iter().map(|&o| o as i32).collect();
    Ok(Arc::new(
        ListArray::try_new(
            Arc::new(item_field(item)),
            OffsetBuffer::new(ScalarBuffer::from(offsets32)),
            conformed,
            l.nulls().cloned(),
        )
        .expect("conformed items fit the list"),
    ))
}

fn map(value: &ColumnType, m: &MapArray, live: Live<'_>) -> Result<ArrayRef, Found> {
    if m.entries().len() > NESTED_ITEMS_MAX {
        return too_many_items(m, live, m.entries().len());
    }
    let offsets: Vec<usize> = m.value_offsets().iter().map(|&o| o as usize).collect();
    let Some(keys) = m.keys().as_string_opt::<i32>() else {
        return match first_valid(m, live) {
            None => Ok(new_null_array(
                &canonical_type(&ColumnType::Map(Box::new(value.clone()))),
                m.len(),
            )),
            Some(row) => Err(Found::at(
                row,
                RejectReason::ArrowType {
                    expected: "an object",
                    got: m.data_type().to_string(),
                },
            )),
        };
    };
    let mut best = None;
    // a key repeated within one row is the JSON codec's first check of that object
    for i in 0..m.len() {
        if !(live_at(live, i) && m.is_valid(i)) {
            continue;
        }
        let range = offsets[i]..offsets[i + 1];
        let repeated = range
            .clone()
            .find(|&j| (range.start..j).any(|k| keys.value(k) == keys.value(j)));
        if let Some(j) = repeated {
            best = Some(Found::at(
                i,
                RejectReason::DuplicateKey {
                    key: keys.value(j).to_string(),
                },
            ));
            break;
        }
    }
    let items = item_live(&offsets, live, m, keys.len());
    let values = conform_value(value, false, m.values(), Some(&items)).map_err(|found| {
        let (row, index) = row_of(&offsets, found.row);
        let key = keys.value(offsets[row] + index);
        Found {
            row,
            suffix: format!(".{key}{}", found.suffix),
            reason: found.reason,
        }
    });
    let values = match values {
        Ok(v) => v,
        Err(found) => {
            earliest(&mut best, found);
            return Err(best.expect("a fault was just recorded"));
        }
    };
    if let Some(found) = best {
        return Err(found);
    }
    let DataType::Struct(kv) = entries_field(value).data_type().clone() else {
        unreachable!("map entries are a struct")
    };
    let entries = StructArray::try_new(kv, vec![Arc::new(keys.clone()) as ArrayRef, values], None)
        .expect("keys and values of one map");
    Ok(Arc::new(
        MapArray::try_new(
            Arc::new(entries_field(value)),
            m.offsets().clone(),
            entries,
            m.nulls().cloned(),
            false,
        )
        .expect("conformed entries fit the map"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schema;
    use arrow_array::{Int32Array, Int64Array};
    use arrow_schema::Schema as ArrowSchema;

    fn codec(json: &str) -> RowCodec {
        RowCodec::Schema(Schema::compile(json).expect("schema"))
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(ArrowSchema::new(fields)),
            columns.into_iter().map(|(_, a)| a).collect(),
        )
        .expect("batch")
    }

    fn encode(codec: &RowCodec, b: &RecordBatch) -> Result<Vec<String>, (Option<usize>, String)> {
        let mut out = Vec::new();
        let mut ends = Vec::new();
        encode_batch(codec, b, 1 << 20, &mut out, &mut ends)
            .map_err(|f| (f.row(), f.to_string()))?;
        let mut start = 0;
        Ok(ends
            .iter()
            .map(|&e| {
                let s = String::from_utf8(out[start..e].to_vec()).expect("utf8");
                start = e;
                s
            })
            .collect())
    }

    /// The JSON path's bytes (or refusal) for the same rows.
    fn json_path(codec: &RowCodec, rows: &[&str]) -> Result<Vec<String>, (Option<usize>, String)> {
        let mut outs = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let v = crate::json::parse(r.as_bytes()).expect("json");
            let mut out = Vec::new();
            codec
                .encode_row(&v, &mut out)
                .map_err(|e| (Some(i), e.to_string()))?;
            outs.push(String::from_utf8(out).expect("utf8"));
        }
        Ok(outs)
    }

    const TRADE: &str = r#"{"type":"object","properties":{
        "ts":{"type":"integer"},"px":{"type":"number"},"qty":{"type":"number","format":"float"},
        "side":{"type":"integer","format":"int32"},"sym":{"type":"string"},
        "note":{"type":["string","null"]}},"required":["ts","px","qty","side","sym"]}"#;

    #[test]
    fn same_bytes_as_the_json_path() {
        let c = codec(TRADE);
        let b = batch(vec![
            (
                "sym",
                Arc::new(StringArray::from(vec!["BTC", "E\"TH\n"])) as ArrayRef,
            ),
            ("ts", Arc::new(Int64Array::from(vec![1_i64, -5]))),
            ("px", Arc::new(Int64Array::from(vec![85565_i64, 3]))),
            ("qty", Arc::new(Float64Array::from(vec![0.1, 1e20]))),
            (
                "side",
                Arc::new(arrow_array::UInt8Array::from(vec![1_u8, 0])),
            ),
        ]);
        let json = json_path(
            &c,
            &[
                r#"{"ts":1,"px":85565,"qty":0.1,"side":1,"sym":"BTC"}"#,
                r#"{"sym":"E\"TH\n","ts":-5,"px":3,"qty":1e20,"side":0,"note":null}"#,
            ],
        );
        assert_eq!(encode(&c, &b), json);
        assert_eq!(
            encode(&c, &b).expect("rows")[0],
            r#"{"ts":1,"px":85565.0,"qty":0.1,"side":1,"sym":"BTC","note":null}"#
        );
    }

    #[test]
    fn refusals_match_the_json_path() {
        let c = codec(TRADE);
        let base = |side: ArrayRef| {
            vec![
                (
                    "ts",
                    Arc::new(Int64Array::from(vec![1_i64, 2, 3])) as ArrayRef,
                ),
                ("px", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
                ("qty", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
                ("side", side),
                ("sym", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
            ]
        };
        // out of int32 range in row 2
        let b = batch(base(Arc::new(Int64Array::from(vec![
            1_i64,
            2,
            3_000_000_000,
        ]))));
        let want = json_path(
            &c,
            &[r#"{"ts":3,"px":3.0,"qty":3.0,"side":3000000000,"sym":"c"}"#],
        )
        .expect_err("refused")
        .1;
        assert_eq!(encode(&c, &b), Err((Some(2), want)));
        // a null in a required column in row 1
        let b = batch(base(Arc::new(Int32Array::from(vec![
            Some(1),
            None,
            Some(3),
        ]))));
        assert_eq!(
            encode(&c, &b),
            Err((
                Some(1),
                "column 'side' is not nullable but was supplied as null".into()
            ))
        );
        // a missing column
        let mut cols = base(Arc::new(Int32Array::from(vec![1, 2, 3])));
        cols.remove(4);
        assert_eq!(
            encode(&c, &batch(cols)),
            Err((Some(0), "column 'sym' is required but absent".into()))
        );
        // an extra column
        let mut cols = base(Arc::new(Int32Array::from(vec![1, 2, 3])));
        cols.push(("venue", Arc::new(StringArray::from(vec!["x", "y", "z"]))));
        assert_eq!(
            encode(&c, &batch(cols)),
            Err((
                Some(0),
                "row names columns this log does not have: ['venue']. Declared: ['note', 'px', 'qty', 'side', 'streamcast_ts', 'sym', 'ts']".into()
            ))
        );
        // a wrong type
        let b = batch(base(Arc::new(StringArray::from(vec!["1", "2", "3"]))));
        assert_eq!(
            encode(&c, &b),
            Err((
                Some(0),
                "column 'side' takes an integer, not a string".into()
            ))
        );
        // an Arrow type with no JSON counterpart
        let b = batch(base(Arc::new(arrow_array::Date32Array::from(vec![
            1, 2, 3,
        ]))));
        assert_eq!(
            encode(&c, &b),
            Err((
                Some(0),
                "column 'side' takes an integer, not an Arrow Date32 column".into()
            ))
        );
        // reserved
        let mut cols = base(Arc::new(Int32Array::from(vec![1, 2, 3])));
        cols.push((
            "streamcast_ts",
            Arc::new(Int64Array::from(vec![1_i64, 2, 3])),
        ));
        assert_eq!(
            encode(&c, &batch(cols)),
            Err((
                Some(0),
                "'streamcast_ts' is stamped by the server; a row cannot supply it".into()
            ))
        );
        // non-finite
        let mut cols = base(Arc::new(Int32Array::from(vec![1, 2, 3])));
        cols[1].1 = Arc::new(Float64Array::from(vec![1.0, f64::NAN, 3.0]));
        assert_eq!(
            encode(&c, &batch(cols)),
            Err((
                Some(1),
                "column 'px': a log holds only finite floats".into()
            ))
        );
        // float32 range
        let mut cols = base(Arc::new(Int32Array::from(vec![1, 2, 3])));
        cols[2].1 = Arc::new(Float64Array::from(vec![1.0, 2.0, 1e300]));
        let want = json_path(&c, &[r#"{"ts":3,"px":3.0,"qty":1e300,"side":3,"sym":"c"}"#])
            .expect_err("refused")
            .1;
        assert_eq!(encode(&c, &batch(cols)), Err((Some(2), want)));
    }

    #[test]
    fn first_fault_in_row_order_then_column_order() {
        let c = codec(TRADE);
        let b = batch(vec![
            (
                "ts",
                Arc::new(Int64Array::from(vec![1_i64, 2, 3])) as ArrayRef,
            ),
            (
                "px",
                Arc::new(Float64Array::from(vec![1.0, 2.0, f64::INFINITY])),
            ),
            ("qty", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
            ("side", Arc::new(Int64Array::from(vec![1_i64, i64::MAX, 3]))),
            (
                "sym",
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ),
        ]);
        let err = encode(&c, &b).expect_err("refused");
        assert_eq!(err.0, Some(1));
        assert!(
            err.1
                .starts_with("column 'side' cannot hold 9223372036854775807"),
            "{}",
            err.1
        );
    }

    #[test]
    fn nested_columns() {
        let c = codec(
            r#"{"type":"object","properties":{
                "book":{"type":"object","properties":{
                    "px":{"type":"array","items":{"type":"number"}},
                    "id":{"type":"string","contentEncoding":"base16"}},"required":["px","id"]},
                "tags":{"type":["object","null"],"additionalProperties":{"type":"integer","format":"int32"}}},
              "required":["book"]}"#,
        );
        let px = Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(vec![
            Some(vec![Some(1.0), Some(2.5)]),
            Some(vec![]),
        ])) as ArrayRef;
        let id = Arc::new(BinaryArray::from(vec![&b"\xde\xad"[..], &b""[..]])) as ArrayRef;
        let book = StructArray::from(vec![
            (Arc::new(Field::new("id", DataType::Binary, true)), id),
            (
                Arc::new(Field::new("px", px.data_type().clone(), true)),
                px.clone(),
            ),
        ]);
        let b = batch(vec![("book", Arc::new(book) as ArrayRef)]);
        let json = json_path(
            &c,
            &[
                r#"{"book":{"px":[1.0,2.5],"id":"DEAD"}}"#,
                r#"{"book":{"px":[],"id":""}}"#,
            ],
        );
        assert_eq!(encode(&c, &b), json);
        // a null item inside the list of row 1
        let px = Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(vec![
            Some(vec![Some(1.0)]),
            Some(vec![Some(2.0), None]),
        ])) as ArrayRef;
        let id = Arc::new(StringArray::from(vec!["ab", "cd"])) as ArrayRef;
        let book = StructArray::from(vec![
            (Arc::new(Field::new("px", px.data_type().clone(), true)), px),
            (Arc::new(Field::new("id", DataType::Utf8, true)), id),
        ]);
        let b = batch(vec![("book", Arc::new(book) as ArrayRef)]);
        assert_eq!(
            encode(&c, &b),
            Err((
                Some(1),
                "column 'book.px[1]' is not nullable but was supplied as null".into()
            ))
        );
    }

    #[test]
    fn schemaless_takes_a_row_column() {
        let c = RowCodec::Schemaless;
        let b = batch(vec![(
            "row",
            Arc::new(StringArray::from(vec![r#"{"b":1, "a":[2.50]}"#])) as ArrayRef,
        )]);
        assert_eq!(encode(&c, &b), Ok(vec![r#"{"b":1,"a":[2.5]}"#.to_string()]));
        let b = batch(vec![(
            "x",
            Arc::new(Int64Array::from(vec![1_i64])) as ArrayRef,
        )]);
        assert_eq!(
            encode(&c, &b),
            Err((None, "a schema-less stream takes Arrow batches of one non-null utf8 column 'row' holding each row's JSON; got columns [x: Int64]".into()))
        );
    }
}
