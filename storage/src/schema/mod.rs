//! A stream's schema: the JSON Schema subset of PROTOCOL.md §9, compiled once, and the row codec
//! that holds every row to it.
//!
//! - [`Schema::compile`] (`compile.rs`) turns a declaration into a [`Schema`]: columns in
//!   declaration order, each with a [`ColumnType`] and nullability, or a [`SchemaError`] naming the
//!   property and what was wrong with it.
//! - [`Schema::to_arrow`] (`arrow.rs`) gives the Arrow schema the log's segments are written with.
//! - [`Schema::published`] (`published.rs`) gives the compact JSON a greeting carries, every width
//!   spelled out.
//! - [`RowCodec::encode_row`] (`validate.rs`) checks one parsed row and appends its canonical
//!   encoding (PROTOCOL.md §5) to a caller's buffer, or says which column is wrong
//!   ([`RowRejected`]). It runs on the shard that read the publish frame.
//! - [`encode_batch`] (`columnar.rs`) does the same for an Arrow record batch (bulk ingest):
//!   the same rules, the same refusals, the same bytes, column by column.
//! - `encode.rs` holds the JSON writers both of them share: strings, integers, shortest round-trip
//!   floats, canonical binary text.

mod arrow;
mod columnar;
mod compile;
mod encode;
mod published;
mod validate;

use std::collections::HashMap;

pub use columnar::{encode_batch, ColumnarFault};
pub use compile::{SchemaError, SchemaFault};
pub use encode::{write_f32, write_f64, write_json_str};
pub use validate::{JsonKind, RejectReason, RowCodec, RowRejected};

/// The server-stamped receipt-time column (int64, µs since the epoch). Refused in a declaration
/// and in a row; listed among the declared columns in refusals, as the reference does.
pub const STREAMCAST_TS: &str = "streamcast_ts";

/// The log offset column. Refused in a declaration and in a row.
pub const LITELINK_OFFSET: &str = "litelink_offset";

/// Field metadata key that keeps a binary column's text encoding (`base16` or `base64`) in the
/// Arrow schema.
pub const ENCODING_METADATA_KEY: &str = "streamcast.encoding";

/// Schemas with more columns than this look keys up in a hash map instead of comparing names.
const LINEAR_LOOKUP_LIMIT: usize = 16;

/// A compiled stream schema: the row's columns, in declaration order (which is also the order of
/// keys in every encoded row).
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    fields: Fields,
}

impl Schema {
    /// Compiles a JSON Schema declaration (PROTOCOL.md §9).
    ///
    /// # Errors
    ///
    /// A [`SchemaError`] if `json` is not strict JSON, or if the schema leaves the subset: a
    /// top level that is not a non-empty `object`, an optional property whose type is not
    /// nullable, a union other than `[T, "null"]`, an unknown keyword or format, a reserved name,
    /// and so on. The error names the property path.
    pub fn compile(json: &str) -> Result<Schema, SchemaError> {
        compile::compile(json)
    }

    /// Compiles an already parsed declaration; see [`Schema::compile`]. The value should come from
    /// [`crate::json::parse_unique`], which refuses duplicate keys.
    ///
    /// # Errors
    ///
    /// As [`Schema::compile`].
    pub fn compile_value(value: &sonic_rs::Value) -> Result<Schema, SchemaError> {
        compile::compile_value(value)
    }

    /// The columns, in declaration order.
    pub fn columns(&self) -> &[Column] {
        self.fields.columns()
    }

    /// The column names, in declaration order.
    pub fn column_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.fields.columns().iter().map(Column::name)
    }

    /// A top-level column by name, with its position.
    pub fn column(&self, name: &str) -> Option<(usize, &Column)> {
        self.fields.get(name)
    }

    /// A top-level column a `where=` filter may compare against: one of scalar type
    /// (see [`Column::is_filterable`]). `None` if there is no such column or it is nested.
    pub fn filter_column(&self, name: &str) -> Option<(usize, &Column)> {
        self.column(name).filter(|(_, c)| c.is_filterable())
    }

    /// The declared columns as a refusal lists them: sorted, `streamcast_ts` included,
    /// Python-style (`['amount', 'event_ts', ..., 'streamcast_ts']`).
    pub fn declared_list(&self) -> &str {
        &self.fields.declared
    }

    /// The Arrow schema for this stream's declared columns (without `streamcast_ts` and
    /// `litelink_offset`, which the log adds). Binary columns carry their text encoding in field
    /// metadata [`ENCODING_METADATA_KEY`].
    pub fn to_arrow(&self) -> arrow_schema::Schema {
        arrow::to_arrow(self)
    }

    /// The schema as a greeting publishes it: compact JSON, keys `type`, `properties`,
    /// `required`; every width spelled out; nullable columns as `[T,"null"]` and left out of
    /// `required`; structs closed with `"additionalProperties":false`; annotations such as
    /// `description` dropped.
    pub fn published(&self) -> String {
        published::published(self)
    }

    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }
}

/// The fields of a struct (or of the row itself): columns in declaration order, with a fast
/// lookup by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Fields {
    columns: Vec<Column>,
    /// Name → position, only for wide structs (above `LINEAR_LOOKUP_LIMIT` columns).
    index: Option<HashMap<String, usize>>,
    /// Sorted names for refusals, e.g. `['a', 'b']`.
    declared: String,
}

impl Fields {
    /// Builds the lookup structures. `extra` names are listed among the declared ones in
    /// refusals (the top level passes `streamcast_ts`).
    fn new(columns: Vec<Column>, extra: &[&str]) -> Fields {
        let index = (columns.len() > LINEAR_LOOKUP_LIMIT).then(|| {
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name.clone(), i))
                .collect()
        });
        let mut names: Vec<&str> = columns.iter().map(Column::name).collect();
        names.extend_from_slice(extra);
        names.sort_unstable();
        let declared = python_list(names.iter().copied());
        Fields {
            columns,
            index,
            declared,
        }
    }

    /// The columns, in declaration order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// A column by name, with its position.
    pub fn get(&self, name: &str) -> Option<(usize, &Column)> {
        self.position(name, usize::MAX)
            .map(|i| (i, &self.columns[i]))
    }

    /// The position of `name`, trying `hint` first (rows usually list keys in column order).
    #[inline]
    pub(crate) fn position(&self, name: &str, hint: usize) -> Option<usize> {
        if let Some(c) = self.columns.get(hint) {
            if c.name == name {
                return Some(hint);
            }
        }
        match &self.index {
            Some(index) => index.get(name).copied(),
            None => self.columns.iter().position(|c| c.name == name),
        }
    }

    /// Sorted names as refusals list them, e.g. `['a', 'b']`.
    pub(crate) fn declared(&self) -> &str {
        &self.declared
    }
}

/// Writes names as a Python list literal of strings, the way the reference's messages do.
pub(crate) fn python_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, n) in names.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('\'');
        out.push_str(n);
        out.push('\'');
    }
    out.push(']');
    out
}

/// One column of a row, or one field of a struct column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    name: String,
    ty: ColumnType,
    nullable: bool,
    /// `"name":` as compact JSON, written before the value.
    key_json: Box<[u8]>,
}

impl Column {
    pub(crate) fn new(name: String, ty: ColumnType, nullable: bool) -> Column {
        let mut key_json = Vec::with_capacity(name.len() + 3);
        encode::write_json_str(&mut key_json, &name);
        key_json.push(b':');
        Column {
            name,
            ty,
            nullable,
            key_json: key_json.into_boxed_slice(),
        }
    }

    /// The property name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value type.
    pub fn ty(&self) -> &ColumnType {
        &self.ty
    }

    /// Whether the column may be null (its declared type was `[T, "null"]`). A nullable column
    /// a row leaves out is written as `null`.
    pub fn nullable(&self) -> bool {
        self.nullable
    }

    /// Whether a `where=` filter may compare against this column: its type is a scalar
    /// (boolean, integer, number, string or binary).
    pub fn is_filterable(&self) -> bool {
        self.ty.is_scalar()
    }

    pub(crate) fn key_json(&self) -> &[u8] {
        &self.key_json
    }
}

/// A column's value type, as JSON Schema declares it and Arrow stores it.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnType {
    /// `boolean` → Arrow bool.
    Boolean,
    /// `integer` + `format: int32` → Arrow int32.
    Int32,
    /// `integer` (+ `format: int64`) → Arrow int64.
    Int64,
    /// `number` + `format: float` → Arrow float32.
    Float32,
    /// `number` (+ `format: double`) → Arrow float64.
    Float64,
    /// `string` → Arrow utf8.
    Utf8,
    /// `string` + `contentEncoding` → Arrow binary, or fixed_size_binary(N) with `format: bytesN`.
    Binary {
        /// How the bytes travel as JSON text.
        encoding: BinaryEncoding,
        /// `Some(N)` for `format: bytesN`: every value holds exactly N bytes.
        fixed_len: Option<i32>,
    },
    /// `object` + `properties` → Arrow struct.
    Struct(Fields),
    /// `object` + `additionalProperties: {schema}` → Arrow `map<utf8, T>`, values never null.
    Map(Box<ColumnType>),
    /// `array` + `items` → Arrow `list<T>`, items never null.
    List(Box<ColumnType>),
}

impl ColumnType {
    /// Whether values of this type are single JSON scalars (not struct, map or list).
    pub fn is_scalar(&self) -> bool {
        !matches!(
            self,
            ColumnType::Struct(_) | ColumnType::Map(_) | ColumnType::List(_)
        )
    }

    /// The JSON Schema `type` name.
    pub fn json_type(&self) -> &'static str {
        match self {
            ColumnType::Boolean => "boolean",
            ColumnType::Int32 | ColumnType::Int64 => "integer",
            ColumnType::Float32 | ColumnType::Float64 => "number",
            ColumnType::Utf8 | ColumnType::Binary { .. } => "string",
            ColumnType::Struct(_) | ColumnType::Map(_) => "object",
            ColumnType::List(_) => "array",
        }
    }
}

/// The text form of a binary column's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryEncoding {
    /// Hex. Written lowercase; either case is accepted in a row.
    Base16,
    /// Standard alphabet, padded (what msgspec writes). Only that form is accepted.
    Base64,
}

impl BinaryEncoding {
    /// The `contentEncoding` keyword value, also the Arrow metadata value.
    pub fn name(self) -> &'static str {
        match self {
            BinaryEncoding::Base16 => "base16",
            BinaryEncoding::Base64 => "base64",
        }
    }
}
