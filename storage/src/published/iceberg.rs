//! The Iceberg v2 pieces of a published table that are pure functions: the table schema and
//! its name mapping from a sealed segment's Arrow schema, single-value bound serialization, and
//! the table metadata JSON (PUBLISHED.md §3.4).
//!
//! In: the segment schema ([`crate::tier::segment_schema`], field ids already assigned) and the
//! table's recorded history. Out: `serde_json::Value`s, written by [`super::table`].

use arrow_schema::{DataType, Field, SchemaRef};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use serde_json::{json, Map, Value};

use super::PublishError;

/// The Iceberg type of an Arrow field, or why it has none.
fn iceberg_type(field: &Field) -> Result<Value, PublishError> {
    let t = match field.data_type() {
        DataType::Boolean => json!("boolean"),
        DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 => json!("string"),
        DataType::Binary => json!("binary"),
        DataType::FixedSizeBinary(n) => json!(format!("fixed[{n}]")),
        DataType::Struct(children) => {
            let fields: Result<Vec<Value>, _> =
                children.iter().map(|c| struct_field(c.as_ref())).collect();
            json!({"type": "struct", "fields": fields?})
        }
        DataType::List(item) => json!({
            "type": "list",
            "element-id": field_id(item)?,
            "element": iceberg_type(item)?,
            "element-required": !item.is_nullable(),
        }),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(unsupported(field));
            };
            if kv.len() != 2 {
                return Err(unsupported(field));
            }
            json!({
                "type": "map",
                "key-id": field_id(&kv[0])?,
                "key": iceberg_type(&kv[0])?,
                "value-id": field_id(&kv[1])?,
                "value": iceberg_type(&kv[1])?,
                "value-required": !kv[1].is_nullable(),
            })
        }
        _ => return Err(unsupported(field)),
    };
    Ok(t)
}

fn unsupported(field: &Field) -> PublishError {
    PublishError::Schema(format!(
        "column {:?} has Arrow type {} which has no Iceberg type",
        field.name(),
        field.data_type()
    ))
}

fn field_id(field: &Field) -> Result<i64, PublishError> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            PublishError::Schema(format!("column {:?} carries no field id", field.name()))
        })
}

fn struct_field(field: &Field) -> Result<Value, PublishError> {
    Ok(json!({
        "id": field_id(field)?,
        "name": field.name(),
        "required": !field.is_nullable(),
        "type": iceberg_type(field)?,
    }))
}

/// The table schema (`schema-id` 0) of a segment schema: every field with its id, required as
/// the segment declares it.
pub fn table_schema(schema: &SchemaRef) -> Result<Value, PublishError> {
    let fields: Result<Vec<Value>, _> = schema
        .fields()
        .iter()
        .map(|f| struct_field(f.as_ref()))
        .collect();
    Ok(json!({
        "type": "struct",
        "schema-id": 0,
        "identifier-field-ids": [],
        "fields": fields?,
    }))
}

/// The highest field id anywhere in the schema (`last-column-id`).
pub fn last_column_id(schema: &SchemaRef) -> i64 {
    fn walk(field: &Field, max: &mut i64) {
        if let Some(id) = field
            .metadata()
            .get(PARQUET_FIELD_ID_META_KEY)
            .and_then(|v| v.parse::<i64>().ok())
        {
            *max = (*max).max(id);
        }
        match field.data_type() {
            DataType::Struct(c) => c.iter().for_each(|c| walk(c, max)),
            DataType::List(item) => walk(item, max),
            DataType::Map(entries, _) => walk(entries, max),
            _ => {}
        }
    }
    let mut max = 0;
    schema.fields().iter().for_each(|f| walk(f, &mut max));
    max
}

/// `schema.name-mapping.default`: every field's name to its id, nested fields under `fields`
/// (so a reader that ignores Parquet field ids still maps columns right: PUBLISHED.md §5.1).
pub fn name_mapping(schema: &SchemaRef) -> String {
    fn mapping(field: &Field) -> Value {
        let mut m = Map::new();
        m.insert("names".into(), json!([field.name()]));
        if let Some(id) = field
            .metadata()
            .get(PARQUET_FIELD_ID_META_KEY)
            .and_then(|v| v.parse::<i64>().ok())
        {
            m.insert("field-id".into(), json!(id));
        }
        let children: Vec<Value> = match field.data_type() {
            DataType::Struct(c) => c.iter().map(|c| mapping(c)).collect(),
            DataType::List(item) => vec![mapping(item)],
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) => kv.iter().map(|c| mapping(c)).collect(),
                _ => vec![],
            },
            _ => vec![],
        };
        if !children.is_empty() {
            m.insert("fields".into(), Value::Array(children));
        }
        Value::Object(m)
    }
    let all: Vec<Value> = schema.fields().iter().map(|f| mapping(f)).collect();
    Value::Array(all).to_string()
}

/// Iceberg's single-value serialization of a `long`: 8 bytes little-endian.
pub fn long_bound(v: i64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// A snapshot as the table metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotInfo {
    /// Its id (positive, 63 bits).
    pub snapshot_id: i64,
    /// The one before it, if any.
    pub parent: Option<i64>,
    /// Its sequence number.
    pub sequence: i64,
    /// When it was committed, ms since the epoch.
    pub timestamp_ms: i64,
    /// The manifest list's absolute URI.
    pub manifest_list: String,
    /// `append` or `delete`.
    pub operation: &'static str,
    /// Data files added / removed by it, and the rows in them.
    pub added_files: u64,
    /// Rows added.
    pub added_rows: u64,
    /// Files removed.
    pub removed_files: u64,
    /// Rows removed.
    pub removed_rows: u64,
    /// Live files and rows after it.
    pub total_files: u64,
    /// Live rows after it.
    pub total_rows: u64,
    /// The metadata file that made it current (for `metadata-log`).
    pub metadata_file: String,
}

/// Everything the table metadata JSON is made of.
pub struct TableMetadata<'a> {
    /// The table's location URI (`<published>/<log>`).
    pub location: &'a str,
    /// The table's UUID, minted once.
    pub table_uuid: &'a str,
    /// The segment schema.
    pub schema: &'a SchemaRef,
    /// Kept snapshots, oldest first; the last is current.
    pub snapshots: &'a [SnapshotInfo],
    /// Stream-level properties added to the table's (`corecast.*`).
    pub properties: Vec<(String, String)>,
    /// Now, ms since the epoch.
    pub now_ms: i64,
}

impl TableMetadata<'_> {
    /// The v2 table metadata JSON (pretty-printed).
    pub fn to_json(&self) -> Result<String, PublishError> {
        let current = self.snapshots.last();
        let mut properties = Map::new();
        properties.insert(
            "schema.name-mapping.default".into(),
            json!(name_mapping(self.schema)),
        );
        properties.insert(
            "write.metadata.previous-versions-max".into(),
            json!(super::table::KEEP_VERSIONS.to_string()),
        );
        properties.insert("write.parquet.compression-codec".into(), json!("zstd"));
        for (k, v) in &self.properties {
            properties.insert(k.clone(), json!(v));
        }
        let snapshots: Vec<Value> = self
            .snapshots
            .iter()
            .map(|s| {
                let mut o = json!({
                    "snapshot-id": s.snapshot_id,
                    "sequence-number": s.sequence,
                    "timestamp-ms": s.timestamp_ms,
                    "manifest-list": s.manifest_list,
                    "schema-id": 0,
                    "summary": {
                        "operation": s.operation,
                        "added-data-files": s.added_files.to_string(),
                        "added-records": s.added_rows.to_string(),
                        "deleted-data-files": s.removed_files.to_string(),
                        "deleted-records": s.removed_rows.to_string(),
                        "total-data-files": s.total_files.to_string(),
                        "total-records": s.total_rows.to_string(),
                        "total-delete-files": "0",
                        "total-position-deletes": "0",
                        "total-equality-deletes": "0",
                    },
                });
                if let Some(p) = s.parent {
                    o["parent-snapshot-id"] = json!(p);
                }
                o
            })
            .collect();
        let snapshot_log: Vec<Value> = self
            .snapshots
            .iter()
            .map(|s| json!({"snapshot-id": s.snapshot_id, "timestamp-ms": s.timestamp_ms}))
            .collect();
        // the earlier kept versions (the current file is not in its own log)
        let metadata_log: Vec<Value> = self
            .snapshots
            .iter()
            .take(self.snapshots.len().saturating_sub(1))
            .map(|s| json!({"metadata-file": s.metadata_file, "timestamp-ms": s.timestamp_ms}))
            .collect();
        let mut doc = json!({
            "format-version": 2,
            "table-uuid": self.table_uuid,
            "location": self.location,
            "last-sequence-number": current.map_or(0, |s| s.sequence),
            "last-updated-ms": self.now_ms,
            "last-column-id": last_column_id(self.schema),
            "current-schema-id": 0,
            "schemas": [table_schema(self.schema)?],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": Value::Object(properties),
            "snapshots": snapshots,
            "snapshot-log": snapshot_log,
            "metadata-log": metadata_log,
            "statistics": [],
            "partition-statistics": [],
        });
        match current {
            Some(s) => {
                doc["current-snapshot-id"] = json!(s.snapshot_id);
                doc["refs"] = json!({"main": {"snapshot-id": s.snapshot_id, "type": "branch"}});
            }
            None => {
                doc["current-snapshot-id"] = json!(-1);
                doc["refs"] = json!({});
            }
        }
        serde_json::to_string_pretty(&doc).map_err(|e| PublishError::Schema(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{RowCodec, Schema};
    use crate::tier::segment_schema;

    fn trade() -> SchemaRef {
        let s = Schema::compile(
            r#"{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"tags":{"type":["array","null"],"items":{"type":"string"}}},"required":["event_ts","price","side","symbol"]}"#,
        )
        .expect("schema");
        segment_schema(&RowCodec::Schema(s))
    }

    #[test]
    fn schema_maps_types_and_ids() {
        let s = table_schema(&trade()).expect("table schema");
        let fields = s["fields"].as_array().expect("fields");
        let got: Vec<(i64, &str, Value, bool)> = fields
            .iter()
            .map(|f| {
                (
                    f["id"].as_i64().unwrap(),
                    f["name"].as_str().unwrap(),
                    f["type"].clone(),
                    f["required"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(got[0], (1, "litelink_offset", json!("long"), true));
        assert_eq!(got[1], (2, "event_ts", json!("long"), true));
        assert_eq!(got[2], (3, "price", json!("double"), true));
        assert_eq!(got[3], (4, "side", json!("int"), true));
        assert_eq!(got[4], (5, "symbol", json!("string"), true));
        assert_eq!(
            got[5],
            (
                6,
                "tags",
                json!({"type":"list","element-id":8,"element":"string","element-required":true}),
                false
            )
        );
        assert_eq!(got[6], (7, "streamcast_ts", json!("long"), true));
        assert_eq!(last_column_id(&trade()), 8);
    }

    #[test]
    fn name_mapping_names_every_id() {
        let m: Value = serde_json::from_str(&name_mapping(&trade())).expect("json");
        let m = m.as_array().expect("array");
        assert_eq!(m[0], json!({"names":["litelink_offset"],"field-id":1}));
        assert_eq!(
            m[5],
            json!({"names":["tags"],"field-id":6,"fields":[{"names":["item"],"field-id":8}]})
        );
        assert_eq!(m[6], json!({"names":["streamcast_ts"],"field-id":7}));
    }

    #[test]
    fn bounds_are_little_endian() {
        assert_eq!(long_bound(1), vec![1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(long_bound(2000), vec![0xd0, 0x07, 0, 0, 0, 0, 0, 0]);
    }
}
