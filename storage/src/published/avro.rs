//! The table's two Avro files: the manifest (one entry per data file) and the manifest list
//! (one entry per manifest), with Iceberg's v2 writer schemas — every field carrying its
//! `field-id`, without which DuckDB cannot read them (PUBLISHED.md §3.5, §3.6).
//!
//! In: [`ManifestEntry`]s / [`ManifestFile`]s. Out: the bytes of an Avro object container
//! (codec `null`), written by [`super::table`]. The encoder is ours (a few dozen lines): the
//! `apache-avro` writer re-serializes the schema and drops `logicalType: map` from the arrays,
//! after which DuckDB refuses the file ("Can't change source type … to MAP").

use super::PublishError;

/// The manifest's writer schema (record `manifest_entry`): status, snapshot and sequence
/// numbers, and the data file with its record count, size, value/null counts and bounds.
pub const MANIFEST_SCHEMA: &str = r#"{
  "type": "record", "name": "manifest_entry", "fields": [
    {"name": "status", "type": "int", "field-id": 0},
    {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
    {"name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3},
    {"name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4},
    {"name": "data_file", "field-id": 2, "type": {"type": "record", "name": "r2", "fields": [
      {"name": "content", "type": "int", "field-id": 134},
      {"name": "file_path", "type": "string", "field-id": 100},
      {"name": "file_format", "type": "string", "field-id": 101},
      {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": []}},
      {"name": "record_count", "type": "long", "field-id": 103},
      {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
      {"name": "value_counts", "default": null, "field-id": 109, "type": ["null", {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": "k119_v120", "fields": [
          {"name": "key", "type": "int", "field-id": 119}, {"name": "value", "type": "long", "field-id": 120}]}}]},
      {"name": "null_value_counts", "default": null, "field-id": 110, "type": ["null", {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": "k121_v122", "fields": [
          {"name": "key", "type": "int", "field-id": 121}, {"name": "value", "type": "long", "field-id": 122}]}}]},
      {"name": "lower_bounds", "default": null, "field-id": 125, "type": ["null", {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": "k126_v127", "fields": [
          {"name": "key", "type": "int", "field-id": 126}, {"name": "value", "type": "bytes", "field-id": 127}]}}]},
      {"name": "upper_bounds", "default": null, "field-id": 128, "type": ["null", {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": "k129_v130", "fields": [
          {"name": "key", "type": "int", "field-id": 129}, {"name": "value", "type": "bytes", "field-id": 130}]}}]},
      {"name": "split_offsets", "default": null, "field-id": 132, "type": ["null", {"type": "array", "items": "long", "element-id": 133}]},
      {"name": "sort_order_id", "type": ["null", "int"], "default": null, "field-id": 140}
    ]}}
  ]}"#;

/// The manifest list's writer schema (record `manifest_file`).
pub const MANIFEST_LIST_SCHEMA: &str = r#"{
  "type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string", "field-id": 500},
    {"name": "manifest_length", "type": "long", "field-id": 501},
    {"name": "partition_spec_id", "type": "int", "field-id": 502},
    {"name": "content", "type": "int", "field-id": 517},
    {"name": "sequence_number", "type": "long", "field-id": 515},
    {"name": "min_sequence_number", "type": "long", "field-id": 516},
    {"name": "added_snapshot_id", "type": "long", "field-id": 503},
    {"name": "added_files_count", "type": "int", "field-id": 504},
    {"name": "existing_files_count", "type": "int", "field-id": 505},
    {"name": "deleted_files_count", "type": "int", "field-id": 506},
    {"name": "added_rows_count", "type": "long", "field-id": 512},
    {"name": "existing_rows_count", "type": "long", "field-id": 513},
    {"name": "deleted_rows_count", "type": "long", "field-id": 514}
  ]}"#;

/// One data file's entry in a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestEntry {
    /// 0 EXISTING, 1 ADDED, 2 DELETED.
    pub status: i32,
    /// The snapshot that added it.
    pub snapshot_id: i64,
    /// Its data and file sequence number; `None` for an ADDED entry (inherited from the list).
    pub sequence: Option<i64>,
    /// The file's absolute URI.
    pub file_path: String,
    /// Rows in it.
    pub record_count: i64,
    /// Its size in bytes.
    pub file_size: i64,
    /// `(field id, lower bound, upper bound)` in single-value serialization, plus the value
    /// count (rows; these columns have no nulls).
    pub bounds: Vec<(i32, Vec<u8>, Vec<u8>)>,
    /// The row groups' byte offsets (readers may split there).
    pub split_offsets: Vec<i64>,
}

/// One manifest's entry in a manifest list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    /// The manifest's absolute URI.
    pub path: String,
    /// Its length in bytes.
    pub length: i64,
    /// Its sequence number (the snapshot's that wrote it).
    pub sequence: i64,
    /// The lowest data sequence number of its live entries.
    pub min_sequence: i64,
    /// The snapshot that wrote it.
    pub added_snapshot_id: i64,
    /// ADDED entries in it, and their rows.
    pub added_files: i32,
    /// Rows in the ADDED entries.
    pub added_rows: i64,
    /// EXISTING entries in it.
    pub existing_files: i32,
    /// Rows in the EXISTING entries.
    pub existing_rows: i64,
}

/// The Avro binary encoding of the few types these two files use, into one buffer.
#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    /// `int` and `long`: zigzag, then a base-128 varint.
    fn long(&mut self, v: i64) {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.long(b.len() as i64);
        self.0.extend_from_slice(b);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// A `["null", long]` union.
    fn opt_long(&mut self, v: Option<i64>) {
        match v {
            None => self.long(0),
            Some(v) => {
                self.long(1);
                self.long(v);
            }
        }
    }

    /// A `["null", array<{key:int, value}>]` union holding a (possibly empty) array.
    fn kv<V>(&mut self, items: &[(i32, V)], mut value: impl FnMut(&mut Enc, &V)) {
        self.long(1);
        if !items.is_empty() {
            self.long(items.len() as i64);
            for (k, v) in items {
                self.long(i64::from(*k));
                value(self, v);
            }
        }
        self.long(0);
    }
}

/// An Avro object container (codec `null`, one block): the magic, the header map with the
/// writer schema **verbatim** (so the `field-id` and `logicalType: map` attributes readers
/// depend on survive), a sync marker, the block.
fn container(schema: &str, meta: &[(&str, String)], records: usize, block: &[u8]) -> Vec<u8> {
    let mut e = Enc::default();
    e.0.extend_from_slice(b"Obj\x01");
    e.long(meta.len() as i64 + 2);
    e.str("avro.schema");
    // compact, as other writers store it
    let compact: String = match serde_json::from_str::<serde_json::Value>(schema) {
        Ok(v) => v.to_string(),
        Err(_) => schema.to_string(),
    };
    e.str(&compact);
    e.str("avro.codec");
    e.str("null");
    for (k, v) in meta {
        e.str(k);
        e.str(v);
    }
    e.long(0);
    let sync = *uuid::Uuid::new_v4().as_bytes();
    e.0.extend_from_slice(&sync);
    if records > 0 {
        e.long(records as i64);
        e.long(block.len() as i64);
        e.0.extend_from_slice(block);
        e.0.extend_from_slice(&sync);
    }
    e.0
}

/// The manifest of `entries` as an Avro container, with the header metadata other engines
/// read (`schema`, `partition-spec`, `format-version`, `content`).
pub fn manifest_bytes(
    entries: &[ManifestEntry],
    table_schema_json: &str,
) -> Result<Vec<u8>, PublishError> {
    let mut e = Enc::default();
    for m in entries {
        e.long(i64::from(m.status));
        e.opt_long(Some(m.snapshot_id));
        e.opt_long(m.sequence);
        e.opt_long(m.sequence);
        // data_file
        e.long(0);
        e.str(&m.file_path);
        e.str("PARQUET");
        // partition: an empty record
        e.long(m.record_count);
        e.long(m.file_size);
        let counts: Vec<(i32, i64)> = m.bounds.iter().map(|b| (b.0, m.record_count)).collect();
        e.kv(&counts, |e, v| e.long(*v));
        let nulls: Vec<(i32, i64)> = m.bounds.iter().map(|b| (b.0, 0)).collect();
        e.kv(&nulls, |e, v| e.long(*v));
        let lower: Vec<(i32, &[u8])> = m.bounds.iter().map(|b| (b.0, &b.1[..])).collect();
        e.kv(&lower, |e, v| e.bytes(v));
        let upper: Vec<(i32, &[u8])> = m.bounds.iter().map(|b| (b.0, &b.2[..])).collect();
        e.kv(&upper, |e, v| e.bytes(v));
        if m.split_offsets.is_empty() {
            e.long(0);
        } else {
            e.long(1);
            e.long(m.split_offsets.len() as i64);
            for o in &m.split_offsets {
                e.long(*o);
            }
            e.long(0);
        }
        // sort_order_id: 0 (unsorted)
        e.long(1);
        e.long(0);
    }
    let meta = [
        ("schema", table_schema_json.to_string()),
        ("schema-id", "0".to_string()),
        ("partition-spec", "[]".to_string()),
        ("partition-spec-id", "0".to_string()),
        ("format-version", "2".to_string()),
        ("content", "data".to_string()),
    ];
    Ok(container(MANIFEST_SCHEMA, &meta, entries.len(), &e.0))
}

/// The manifest list naming `manifests` for snapshot `snapshot_id`.
pub fn manifest_list_bytes(
    manifests: &[ManifestFile],
    snapshot_id: i64,
    parent: Option<i64>,
    sequence: i64,
) -> Result<Vec<u8>, PublishError> {
    let mut e = Enc::default();
    for m in manifests {
        e.str(&m.path);
        e.long(m.length);
        e.long(0); // partition_spec_id
        e.long(0); // content: data
        e.long(m.sequence);
        e.long(m.min_sequence);
        e.long(m.added_snapshot_id);
        e.long(i64::from(m.added_files));
        e.long(i64::from(m.existing_files));
        e.long(0); // deleted files
        e.long(m.added_rows);
        e.long(m.existing_rows);
        e.long(0); // deleted rows
    }
    let meta = [
        ("snapshot-id", snapshot_id.to_string()),
        (
            "parent-snapshot-id",
            parent.map_or("null".to_string(), |p| p.to_string()),
        ),
        ("sequence-number", sequence.to_string()),
        ("format-version", "2".to_string()),
    ];
    Ok(container(
        MANIFEST_LIST_SCHEMA,
        &meta,
        manifests.len(),
        &e.0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value;
    use apache_avro::Reader;

    #[test]
    fn manifest_round_trips_with_field_ids_in_the_header() {
        let e = ManifestEntry {
            status: 1,
            snapshot_id: 42,
            sequence: None,
            file_path: "file:///t/data/1-2001-x.parquet".into(),
            record_count: 2000,
            file_size: 12345,
            bounds: vec![(
                1,
                1i64.to_le_bytes().to_vec(),
                2000i64.to_le_bytes().to_vec(),
            )],
            split_offsets: vec![4],
        };
        let bytes = manifest_bytes(&[e], "{}").expect("manifest");
        let reader = Reader::new(&bytes[..]).expect("reader");
        let header_schema = reader.writer_schema().canonical_form();
        assert!(!header_schema.is_empty());
        // the raw header keeps every field-id attribute (canonical form strips them)
        let text = String::from_utf8_lossy(&bytes);
        for id in [
            "\"field-id\":0",
            "\"field-id\":2",
            "\"field-id\":125",
            "\"field-id\":130",
            "\"logicalType\":\"map\"",
        ] {
            assert!(text.contains(id), "{id} missing from the header");
        }
        assert_eq!(
            reader
                .user_metadata()
                .get("format-version")
                .map(|v| v.as_slice()),
            Some(&b"2"[..])
        );
        let rows: Vec<Value> = reader.map(|r| r.expect("record")).collect();
        assert_eq!(rows.len(), 1);
        let Value::Record(fields) = &rows[0] else {
            panic!("not a record")
        };
        assert_eq!(fields[0], ("status".into(), Value::Int(1)));
        assert_eq!(fields[2].1, Value::Union(0, Box::new(Value::Null)));
    }

    #[test]
    fn manifest_list_round_trips() {
        let m = ManifestFile {
            path: "file:///t/metadata/a-m0.avro".into(),
            length: 999,
            sequence: 3,
            min_sequence: 1,
            added_snapshot_id: 7,
            added_files: 1,
            added_rows: 10,
            existing_files: 2,
            existing_rows: 20,
        };
        let bytes = manifest_list_bytes(&[m], 7, Some(6), 3).expect("list");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("\"field-id\":500"));
        let reader = Reader::new(&bytes[..]).expect("reader");
        assert_eq!(
            reader
                .user_metadata()
                .get("parent-snapshot-id")
                .map(|v| v.as_slice()),
            Some(&b"6"[..])
        );
        assert_eq!(reader.count(), 1);
    }
}
