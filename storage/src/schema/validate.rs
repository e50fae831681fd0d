//! Row validation and canonical encoding: step 2 of a publish (STYLE.md §3).
//!
//! In: one row, parsed by [`crate::json::parse`], and the stream's [`RowCodec`]. Out: the row's
//! canonical compact JSON (PROTOCOL.md §5) appended to the caller's buffer, or a [`RowRejected`]
//! naming the column path and what was wrong. Runs on the shard that read the publish frame; the
//! bytes it writes are what the log stores and what every live and replayed frame carries, so a
//! live frame and its replay are byte-identical.
//!
//! With a schema the row is held to its columns, strictly:
//!
//! - keys are written in column order; a nullable column left out is written as `null`;
//! - unknown keys, duplicate keys and the reserved `streamcast_ts` / `litelink_offset` are
//!   refused; a non-null column that is absent and one supplied as `null` are told apart;
//! - `true` is never an integer and `1` never a boolean; a float (even `2.0`) is never an integer,
//!   except zero, since the parser hands the integer `-0` over as the float 0.0;
//!   int32, int64 and float32 ranges are checked (an integer outside int64 is a refusal, not a
//!   crash);
//! - a `number` column is written as a float in shortest round-trip form (`85565` → `85565.0`), a
//!   `float` column in the `f32`'s own shortest form;
//! - binary text is checked against its encoding (and length for `bytesN`) and written
//!   canonically: base16 lowercase, base64 standard padded;
//! - a map column takes an object whose values all have the declared value type, a list column
//!   an array; list items and map values are never null.
//!
//! With no schema any JSON object goes, re-encoded compactly with the publisher's key order and
//! values (integers exact, floats shortest round-trip), so no stored row holds a raw line break.

use std::fmt;

use sonic_rs::{JsonContainerTrait, JsonType, JsonValueTrait, Value};

use super::encode::{self, BinaryFault};
use super::{python_list, ColumnType, Fields, Schema, LITELINK_OFFSET, STREAMCAST_TS};
use crate::json::{repeated_key, MAX_DEPTH};

/// Structs with at most this many fields keep their per-row slots on the stack.
const STACK_SLOTS: usize = 32;

/// How a stream's rows are checked and encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum RowCodec {
    /// Rows are held to the schema's columns.
    Schema(Schema),
    /// Any JSON object goes, re-encoded compactly.
    Schemaless,
}

impl RowCodec {
    /// Validates `row` and appends its canonical compact JSON to `out`.
    ///
    /// `row` should come from [`crate::json::parse`] (which refuses non-finite numbers and deep
    /// nesting); duplicate keys are refused here, in every object at every depth. On error, `out` is
    /// truncated back to its length on entry, so a batch can be encoded into one buffer and a bad
    /// row leaves nothing behind.
    ///
    /// # Errors
    ///
    /// [`RowRejected`] naming the column path (`""` for the whole row) and the reason.
    pub fn encode_row(&self, row: &Value, out: &mut Vec<u8>) -> Result<(), RowRejected> {
        let start = out.len();
        let result = match row.as_object() {
            None => Err(RowRejected::new(
                &Path::Root,
                RejectReason::NotAnObject {
                    got: JsonKind::of(row),
                },
            )),
            Some(obj) => match self {
                RowCodec::Schema(schema) => encode_struct(schema.fields(), obj, &Path::Root, out),
                RowCodec::Schemaless => encode_object_any(obj, &Path::Root, 1, out),
            },
        };
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// The schema, if the stream has one.
    pub fn schema(&self) -> Option<&Schema> {
        match self {
            RowCodec::Schema(schema) => Some(schema),
            RowCodec::Schemaless => None,
        }
    }
}

/// A row the codec refuses: which column, and why. `Display` gives the message sent back to the
/// publisher in `{"error":"rejected","detail":…}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRejected {
    /// The column path, e.g. `price`, `book.levels[3].px`, `tags.venue` (a map key); `""` when
    /// the fault is the whole row's (not an object, unknown or reserved keys).
    pub column: String,
    /// What was wrong.
    pub reason: RejectReason,
}

/// Why a row (or one of its values) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectReason {
    /// The row (at `column == ""`) is not a JSON object.
    NotAnObject {
        /// What it was instead.
        got: JsonKind,
    },
    /// Keys the row (or a struct column) does not declare.
    UnknownKeys {
        /// The unknown keys, in the row's order, without repeats.
        unknown: Vec<String>,
        /// The declared names as the message lists them: sorted, Python-style; the top level
        /// includes `streamcast_ts`.
        declared: String,
    },
    /// The row supplies `streamcast_ts` or `litelink_offset`.
    Reserved {
        /// The reserved key.
        key: &'static str,
    },
    /// An object names a key twice.
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A non-null column is absent.
    Missing,
    /// A non-null column (or a list item, or a map value) is `null`.
    Null,
    /// The value's JSON type is not the column's.
    WrongType {
        /// What the column takes, e.g. `an integer`.
        expected: &'static str,
        /// What came.
        got: JsonKind,
    },
    /// A float (even an integral one like `2.0`) in an integer column.
    FloatForInteger {
        /// The float, in shortest round-trip form.
        value: String,
    },
    /// A number outside the column's range.
    OutOfRange {
        /// The number: exactly for integers up to `u64::MAX`; in shortest round-trip float form
        /// beyond (sonic-rs holds such integers as floats) and for floats.
        value: String,
        /// The declared type: `int32`, `int64` or `float32`.
        declared: &'static str,
    },
    /// A non-finite float (cannot arrive through [`crate::json::parse`]).
    NonFinite,
    /// Binary text that is not valid in the column's encoding.
    BadBinary {
        /// `base16` or `base64`.
        encoding: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Binary text of the wrong decoded length for `bytesN`.
    BinaryLength {
        /// The declared N.
        expected: i32,
        /// The decoded length.
        got: usize,
    },
    /// Nesting deeper than [`MAX_DEPTH`] (cannot arrive through [`crate::json::parse`]).
    TooDeep,
    /// An Arrow column of a type that stands for no JSON value (bulk ingest: a timestamp, a
    /// decimal, a dictionary …). Arrow types that do stand for JSON values are refused as
    /// [`RejectReason::WrongType`], with the JSON kind they hold.
    ArrowType {
        /// What the column takes, e.g. `an integer`.
        expected: &'static str,
        /// The Arrow type, as arrow-rs writes it, e.g. `Timestamp(ms, "UTC")`.
        got: String,
    },
}

impl RowRejected {
    fn new(path: &Path<'_>, reason: RejectReason) -> RowRejected {
        RowRejected {
            column: path.render(),
            reason,
        }
    }
}

impl fmt::Display for RowRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let col = &self.column;
        match &self.reason {
            RejectReason::NotAnObject { got } if col.is_empty() => {
                write!(f, "a row must be a JSON object, not {}", got.described())
            }
            RejectReason::NotAnObject { got } => {
                write!(f, "column '{col}' takes an object, not {}", got.described())
            }
            RejectReason::UnknownKeys { unknown, declared } => {
                let names = python_list(unknown.iter().map(String::as_str));
                if col.is_empty() {
                    write!(
                        f,
                        "row names columns this log does not have: {names}. Declared: {declared}"
                    )
                } else {
                    write!(
                        f,
                        "column '{col}' names fields it does not have: {names}. Declared: {declared}"
                    )
                }
            }
            RejectReason::Reserved { key } if *key == LITELINK_OFFSET => write!(
                f,
                "`offset` is assigned by the library and cannot be supplied (I11): the row names '{key}'"
            ),
            RejectReason::Reserved { key } => {
                write!(f, "'{key}' is stamped by the server; a row cannot supply it")
            }
            RejectReason::DuplicateKey { key } if col.is_empty() => {
                write!(f, "row names '{key}' twice")
            }
            RejectReason::DuplicateKey { key } => write!(f, "column '{col}' names '{key}' twice"),
            RejectReason::Missing => write!(f, "column '{col}' is required but absent"),
            RejectReason::Null => {
                write!(f, "column '{col}' is not nullable but was supplied as null")
            }
            RejectReason::WrongType { expected, got } => write!(
                f,
                "column '{col}' takes {expected}, not {}",
                got.described()
            ),
            RejectReason::FloatForInteger { value } => write!(
                f,
                "column '{col}' takes integers, not the float {value} (send it without a fraction or exponent)"
            ),
            RejectReason::OutOfRange { value, declared } => {
                let range = match *declared {
                    "int32" => "-2147483648 to 2147483647",
                    "int64" => "-9223372036854775808 to 9223372036854775807",
                    _ => "magnitude at most 3.4028235e38",
                };
                write!(
                    f,
                    "column '{col}' cannot hold {value}: it is declared {declared} ({range})"
                )
            }
            RejectReason::NonFinite => {
                write!(f, "column '{col}': a log holds only finite floats")
            }
            RejectReason::BadBinary { encoding, detail } => {
                write!(f, "column '{col}' is not valid {encoding}: {detail}")
            }
            RejectReason::BinaryLength { expected, got } => write!(
                f,
                "column '{col}' holds {got} bytes; it is declared bytes{expected}"
            ),
            RejectReason::ArrowType { expected, got } => {
                write!(f, "column '{col}' takes {expected}, not an Arrow {got} column")
            }
            RejectReason::TooDeep => write!(
                f,
                "column '{col}' is nested deeper than {MAX_DEPTH} levels"
            ),
        }
    }
}

impl std::error::Error for RowRejected {}

/// The JSON type of a value, as refusals name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `null`
    Null,
    /// `true` / `false`
    Boolean,
    /// A number without fraction or exponent that fits `i64` or `u64`.
    Integer,
    /// Any other number.
    Float,
    /// A string.
    String,
    /// An object.
    Object,
    /// An array.
    Array,
}

impl JsonKind {
    /// The kind of `v`.
    pub fn of(v: &Value) -> JsonKind {
        match v.get_type() {
            JsonType::Null => JsonKind::Null,
            JsonType::Boolean => JsonKind::Boolean,
            JsonType::Number if v.is_f64() => JsonKind::Float,
            JsonType::Number => JsonKind::Integer,
            JsonType::String => JsonKind::String,
            JsonType::Object => JsonKind::Object,
            JsonType::Array => JsonKind::Array,
        }
    }

    /// With its article, for messages: `null`, `a boolean`, `an integer`, `a float`, ….
    pub fn described(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Boolean => "a boolean",
            JsonKind::Integer => "an integer",
            JsonKind::Float => "a float",
            JsonKind::String => "a string",
            JsonKind::Object => "an object",
            JsonKind::Array => "an array",
        }
    }
}

/// Where the codec is in a row; lives on the stack, rendered only for a refusal.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    fn render_into(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.render_into(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, i) => {
                parent.render_into(out);
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }

    fn is_root(&self) -> bool {
        matches!(self, Path::Root)
    }
}

fn reject(path: &Path<'_>, reason: RejectReason) -> Result<(), RowRejected> {
    Err(RowRejected::new(path, reason))
}

/// Encodes an object against `fields` (the row itself at the root, or a struct column).
fn encode_struct(
    fields: &Fields,
    obj: &sonic_rs::Object,
    path: &Path<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RowRejected> {
    let columns = fields.columns();
    let mut stack: [Option<&Value>; STACK_SLOTS] = [None; STACK_SLOTS];
    let mut heap: Vec<Option<&Value>>;
    let slots: &mut [Option<&Value>] = if columns.len() <= STACK_SLOTS {
        &mut stack[..columns.len()]
    } else {
        heap = vec![None; columns.len()];
        &mut heap
    };
    let mut unknown: Vec<String> = Vec::new();
    for (i, (key, v)) in obj.iter().enumerate() {
        match fields.position(key, i) {
            Some(p) => {
                if slots[p].is_some() {
                    return reject(
                        path,
                        RejectReason::DuplicateKey {
                            key: key.to_string(),
                        },
                    );
                }
                slots[p] = Some(v);
            }
            None => {
                if path.is_root() {
                    for reserved in [STREAMCAST_TS, LITELINK_OFFSET] {
                        if key == reserved {
                            return reject(path, RejectReason::Reserved { key: reserved });
                        }
                    }
                }
                if !unknown.iter().any(|u| u == key) {
                    unknown.push(key.to_string());
                }
            }
        }
    }
    if !unknown.is_empty() {
        return reject(
            path,
            RejectReason::UnknownKeys {
                unknown,
                declared: fields.declared().to_string(),
            },
        );
    }
    out.push(b'{');
    for (p, column) in columns.iter().enumerate() {
        if p > 0 {
            out.push(b',');
        }
        out.extend_from_slice(column.key_json());
        match slots[p] {
            Some(v) if !v.is_null() => {
                encode_value(column.ty(), v, &Path::Key(path, column.name()), out)?;
            }
            _ if column.nullable() => out.extend_from_slice(b"null"),
            None => return reject(&Path::Key(path, column.name()), RejectReason::Missing),
            Some(_) => return reject(&Path::Key(path, column.name()), RejectReason::Null),
        }
    }
    out.push(b'}');
    Ok(())
}

/// Encodes one non-null value of type `ty`.
fn encode_value(
    ty: &ColumnType,
    v: &Value,
    path: &Path<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RowRejected> {
    let wrong = |expected: &'static str| {
        reject(
            path,
            RejectReason::WrongType {
                expected,
                got: JsonKind::of(v),
            },
        )
    };
    match ty {
        ColumnType::Boolean => match v.as_bool() {
            Some(true) => out.extend_from_slice(b"true"),
            Some(false) => out.extend_from_slice(b"false"),
            None => return wrong("a boolean"),
        },
        ColumnType::Int64 | ColumnType::Int32 => {
            let declared = if matches!(ty, ColumnType::Int32) {
                "int32"
            } else {
                "int64"
            };
            if let Some(i) = v.as_i64() {
                if declared == "int32" && i32::try_from(i).is_err() {
                    return reject(
                        path,
                        RejectReason::OutOfRange {
                            value: i.to_string(),
                            declared,
                        },
                    );
                }
                encode::write_i64(out, i);
            } else if let Some(u) = v.as_u64() {
                return reject(
                    path,
                    RejectReason::OutOfRange {
                        value: u.to_string(),
                        declared,
                    },
                );
            } else if v.as_f64() == Some(0.0) {
                // JSON `-0` is an integer literal meaning 0, but sonic-rs 0.5 hands it over as
                // the float 0.0, the same value as `0.0`, `-0.0` or `0e0`: a float zero is
                // therefore taken as the integer 0 (and written `0`); any other float is refused.
                encode::write_i64(out, 0);
            } else if let Some(x) = v.as_f64() {
                // sonic-rs turns integers beyond u64 (and below i64::MIN) into floats; an integral
                // float that large is reported as out of range rather than as "a float".
                if x.fract() == 0.0 && x.abs() >= 9_223_372_036_854_775_808.0 {
                    return reject(
                        path,
                        RejectReason::OutOfRange {
                            value: float_text(x),
                            declared,
                        },
                    );
                }
                return reject(
                    path,
                    RejectReason::FloatForInteger {
                        value: float_text(x),
                    },
                );
            } else {
                return wrong("an integer");
            }
        }
        ColumnType::Float64 => match number(v) {
            Some(x) if x.is_finite() => encode::write_f64(out, x),
            Some(_) => return reject(path, RejectReason::NonFinite),
            None => return wrong("a number"),
        },
        ColumnType::Float32 => match number(v) {
            Some(x) if x.is_finite() => {
                let narrow = x as f32;
                if narrow.is_infinite() {
                    return reject(
                        path,
                        RejectReason::OutOfRange {
                            value: raw_number_text(v),
                            declared: "float32",
                        },
                    );
                }
                encode::write_f32(out, narrow);
            }
            Some(_) => return reject(path, RejectReason::NonFinite),
            None => return wrong("a number"),
        },
        ColumnType::Utf8 => match v.as_str() {
            Some(s) => encode::write_json_str(out, s),
            None => return wrong("a string"),
        },
        ColumnType::Binary {
            encoding,
            fixed_len,
        } => {
            let Some(s) = v.as_str() else {
                return wrong(match encoding {
                    super::BinaryEncoding::Base16 => "a base16 string",
                    super::BinaryEncoding::Base64 => "a base64 string",
                });
            };
            match encode::write_binary(out, s, *encoding, *fixed_len) {
                Ok(()) => {}
                Err(BinaryFault::Malformed(detail)) => {
                    return reject(
                        path,
                        RejectReason::BadBinary {
                            encoding: encoding.name(),
                            detail,
                        },
                    )
                }
                Err(BinaryFault::Length { expected, got }) => {
                    return reject(path, RejectReason::BinaryLength { expected, got })
                }
            }
        }
        ColumnType::Struct(fields) => match v.as_object() {
            Some(obj) => encode_struct(fields, obj, path, out)?,
            None => return wrong("an object"),
        },
        ColumnType::Map(values) => {
            let Some(obj) = v.as_object() else {
                return wrong("an object");
            };
            encode_entries(obj, path, out, |item, here, out| {
                if item.is_null() {
                    return reject(here, RejectReason::Null);
                }
                encode_value(values, item, here, out)
            })?;
        }
        ColumnType::List(items) => {
            let Some(arr) = v.as_array() else {
                return wrong("an array");
            };
            out.push(b'[');
            for (i, item) in arr.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let here = Path::Index(path, i);
                if item.is_null() {
                    return reject(&here, RejectReason::Null);
                }
                encode_value(items, item, &here, out)?;
            }
            out.push(b']');
        }
    }
    Ok(())
}

/// A JSON number as `f64` (integers beyond 2^53 rounded to nearest); `None` for non-numbers.
#[inline]
fn number(v: &Value) -> Option<f64> {
    if v.is_number() {
        v.as_f64()
    } else {
        None
    }
}

/// A number as received: integers exactly, floats in shortest round-trip form.
fn raw_number_text(v: &Value) -> String {
    if let Some(i) = v.as_i64() {
        i.to_string()
    } else if let Some(u) = v.as_u64() {
        u.to_string()
    } else {
        float_text(v.as_f64().unwrap_or(f64::NAN))
    }
}

fn float_text(x: f64) -> String {
    let mut out = Vec::new();
    encode::write_f64(&mut out, x);
    String::from_utf8(out).unwrap_or_default()
}

/// Schemaless: re-encodes any object compactly, keeping key order and values.
fn encode_object_any(
    obj: &sonic_rs::Object,
    path: &Path<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RowRejected> {
    if depth > MAX_DEPTH {
        return reject(path, RejectReason::TooDeep);
    }
    encode_entries(obj, path, out, |v, here, out| {
        encode_any(v, here, depth, out)
    })
}

/// Writes `obj` as a JSON object in its own key order, each value by `value`; refuses a repeated
/// key naming it. Shared by map columns and schema-less objects.
fn encode_entries(
    obj: &sonic_rs::Object,
    path: &Path<'_>,
    out: &mut Vec<u8>,
    mut value: impl FnMut(&Value, &Path<'_>, &mut Vec<u8>) -> Result<(), RowRejected>,
) -> Result<(), RowRejected> {
    if let Some(key) = repeated_key(obj) {
        return reject(
            path,
            RejectReason::DuplicateKey {
                key: key.to_string(),
            },
        );
    }
    out.push(b'{');
    for (i, (key, v)) in obj.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        encode::write_json_str(out, key);
        out.push(b':');
        value(v, &Path::Key(path, key), out)?;
    }
    out.push(b'}');
    Ok(())
}

fn encode_any(
    v: &Value,
    path: &Path<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RowRejected> {
    match v.get_type() {
        JsonType::Null => out.extend_from_slice(b"null"),
        JsonType::Boolean => out.extend_from_slice(if v.is_true() { b"true" } else { b"false" }),
        JsonType::Number => {
            if let Some(i) = v.as_i64() {
                encode::write_i64(out, i);
            } else if let Some(u) = v.as_u64() {
                encode::write_u64(out, u);
            } else {
                match v.as_f64() {
                    Some(x) if x.is_finite() => encode::write_f64(out, x),
                    _ => return reject(path, RejectReason::NonFinite),
                }
            }
        }
        JsonType::String => encode::write_json_str(out, v.as_str().unwrap_or_default()),
        JsonType::Object => {
            if let Some(obj) = v.as_object() {
                encode_object_any(obj, path, depth + 1, out)?;
            }
        }
        JsonType::Array => {
            if depth + 1 > MAX_DEPTH {
                return reject(path, RejectReason::TooDeep);
            }
            out.push(b'[');
            for (i, item) in v.as_array().into_iter().flat_map(|a| a.iter()).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                encode_any(item, &Path::Index(path, i), depth + 1, out)?;
            }
            out.push(b']');
        }
    }
    Ok(())
}
