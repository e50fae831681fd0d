//! The Arrow schema of a sealed segment: `litelink_offset`, the declared columns (or `row`),
//! `streamcast_ts`, every field numbered with `PARQUET:field_id` by Iceberg's rule (see the
//! module docs of [`crate::tier`]).
//!
//! In: a [`RowCodec`]. Out: the [`SchemaRef`] the writer writes and the reader expects. Pure.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, SchemaRef};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::schema::{RowCodec, LITELINK_OFFSET, STREAMCAST_TS};

/// The single column a schema-less stream's segments hold between `litelink_offset` and
/// `streamcast_ts`: the row's JSON text (utf8).
pub const SCHEMALESS_ROW: &str = "row";

/// The segment schema for a stream with this codec, field ids included.
pub fn segment_schema(codec: &RowCodec) -> SchemaRef {
    let declared: Vec<Field> = match codec {
        RowCodec::Schema(schema) => schema
            .to_arrow()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect(),
        RowCodec::Schemaless => vec![Field::new(SCHEMALESS_ROW, DataType::Utf8, false)],
    };
    let mut top = Vec::with_capacity(declared.len() + 2);
    top.push(Field::new(LITELINK_OFFSET, DataType::Int64, false));
    top.extend(declared);
    top.push(Field::new(STREAMCAST_TS, DataType::Int64, false));
    let mut next = 1;
    let top = number_fields(top, &mut next);
    let fields: Vec<Field> = top
        .into_iter()
        .map(|f| number_children(f, &mut next))
        .collect();
    Arc::new(arrow_schema::Schema::new(fields))
}

/// Gives each field of one struct level the next consecutive ids.
fn number_fields(fields: Vec<Field>, next: &mut i32) -> Vec<Field> {
    fields
        .into_iter()
        .map(|f| {
            let id = *next;
            *next += 1;
            with_id(f, id)
        })
        .collect()
}

/// Numbers the nested fields inside `field` (whose own id is already set), depth first.
fn number_children(field: Field, next: &mut i32) -> Field {
    let data_type = match field.data_type() {
        DataType::Struct(children) => {
            let children =
                number_fields(children.iter().map(|c| c.as_ref().clone()).collect(), next);
            let children: Vec<Field> = children
                .into_iter()
                .map(|c| number_children(c, next))
                .collect();
            DataType::Struct(Fields::from(children))
        }
        DataType::List(item) => {
            let item = with_id(item.as_ref().clone(), *next);
            *next += 1;
            DataType::List(Arc::new(number_children(item, next)))
        }
        DataType::Map(entries, sorted) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return field;
            };
            let mut kv: Vec<Field> =
                number_fields(kv.iter().map(|c| c.as_ref().clone()).collect(), next);
            for f in &mut kv {
                *f = number_children(f.clone(), next);
            }
            let entries = entries
                .as_ref()
                .clone()
                .with_data_type(DataType::Struct(Fields::from(kv)));
            DataType::Map(Arc::new(entries), *sorted)
        }
        _ => return field,
    };
    field.with_data_type(data_type)
}

fn with_id(field: Field, id: i32) -> Field {
    let mut metadata: HashMap<String, String> = field.metadata().clone().into();
    metadata.insert(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string());
    field.with_metadata(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schema;

    fn id(f: &Field) -> i32 {
        f.metadata()
            .get(PARQUET_FIELD_ID_META_KEY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    }

    #[test]
    fn ids_follow_icebergs_rule() {
        let schema = Schema::compile(
            r#"{"type":"object","properties":{
                "a":{"type":"object","properties":{"x":{"type":"integer"},
                     "y":{"type":"array","items":{"type":"object","properties":{"p":{"type":"number"}},"required":["p"]}}},
                     "required":["x","y"]},
                "b":{"type":"object","additionalProperties":{"type":"integer"}}},
              "required":["a","b"]}"#,
        )
        .expect("schema");
        let s = segment_schema(&RowCodec::Schema(schema));
        let f = s.fields();
        assert_eq!(f.iter().map(|f| id(f)).collect::<Vec<_>>(), [1, 2, 3, 4]);
        let DataType::Struct(a) = f[1].data_type() else {
            panic!()
        };
        assert_eq!((id(&a[0]), id(&a[1])), (5, 6));
        let DataType::List(item) = a[1].data_type() else {
            panic!()
        };
        assert_eq!(id(item), 7);
        let DataType::Struct(p) = item.data_type() else {
            panic!()
        };
        assert_eq!(id(&p[0]), 8);
        let DataType::Map(entries, _) = f[2].data_type() else {
            panic!()
        };
        assert!(!entries.metadata().contains_key(PARQUET_FIELD_ID_META_KEY));
        let DataType::Struct(kv) = entries.data_type() else {
            panic!()
        };
        assert_eq!((id(&kv[0]), id(&kv[1])), (9, 10));
    }
}
