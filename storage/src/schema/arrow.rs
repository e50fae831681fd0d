//! The Arrow schema of a stream's declared columns (PROTOCOL.md §9).
//!
//! In: a compiled [`Schema`]. Out: an [`arrow_schema::Schema`] whose fields follow the columns'
//! order and nullability. Lists name their element `item`, maps their entries `entries` with
//! `key` (utf8) and `value`, as arrow-rs does by default; list items and map values are never
//! null. Binary fields (at any depth) carry their text encoding in the metadata key
//! [`ENCODING_METADATA_KEY`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field};

use super::{ColumnType, Fields, Schema, ENCODING_METADATA_KEY};

pub(super) fn to_arrow(schema: &Schema) -> arrow_schema::Schema {
    arrow_schema::Schema::new(struct_fields(schema.fields()))
}

fn struct_fields(fields: &Fields) -> Vec<Field> {
    fields
        .columns()
        .iter()
        .map(|c| field(c.name(), c.ty(), c.nullable()))
        .collect()
}

fn field(name: &str, ty: &ColumnType, nullable: bool) -> Field {
    let data_type = match ty {
        ColumnType::Boolean => DataType::Boolean,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Utf8 => DataType::Utf8,
        ColumnType::Binary {
            encoding,
            fixed_len,
        } => {
            let data_type = match fixed_len {
                Some(n) => DataType::FixedSizeBinary(*n),
                None => DataType::Binary,
            };
            let metadata = HashMap::from([(
                ENCODING_METADATA_KEY.to_string(),
                encoding.name().to_string(),
            )]);
            return Field::new(name, data_type, nullable).with_metadata(metadata);
        }
        ColumnType::Struct(fields) => DataType::Struct(struct_fields(fields).into()),
        ColumnType::Map(values) => {
            return Field::new_map(
                name,
                "entries",
                Field::new("key", DataType::Utf8, false),
                field("value", values, false),
                false,
                nullable,
            )
        }
        ColumnType::List(items) => DataType::List(Arc::new(field("item", items, false))),
    };
    Field::new(name, data_type, nullable)
}
