//! Catch-up from a local published table (issue 12): `PublishedTable::open` on the stream
//! metadata hint (the stream metadata, the Iceberg hint, table metadata, manifest list and
//! manifest), then every row of the extent through `TableRows` (each data file fetched whole
//! through the store, decoded by `SegmentReader` with the table's field-id mapping, re-encoded
//! to canonical rows), and the same framed `[offset,ts,row]` as the client hands rows out.
//! Target: ≥ 1M trade rows/s.
//!
//! Rows: the real BTCUSDT trades (2,001, cycled), 1,048,576 of them, sealed by corecast's own
//! `write_segment` into 8 data files of 131,072 rows (ZSTD, field ids, page index: what the
//! sealer writes and the publisher links), under the minimal Iceberg v2 layout of
//! `../shared/PUBLISHED.md` §3 (the writer's own layout once it lands; this one is written here
//! with `apache-avro` and JSON by hand). Before any timing every row read is asserted equal, byte
//! for byte, to the canonical row the validator produced. The files are in the page cache: the
//! figure is the read, decode and encode cost, not the disk.

use std::fs;
use std::hint::black_box;
use std::path::Path;

use apache_avro::types::Value as Avro;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_bench::shared_dir;
use corecast_storage::json;
use corecast_storage::published::{PublishedTable, S3Options};
use corecast_storage::schema::{ColumnType, RowCodec, Schema};
use corecast_storage::tier::{write_segment, SealOptions};

const ROWS: usize = 1 << 20;
const FILES: usize = 8;
const TS0: i64 = 1_796_200_000_000_000;

const MANIFEST_SCHEMA: &str = r#"{"type":"record","name":"manifest_entry","fields":[
 {"name":"status","type":"int","field-id":0},
 {"name":"snapshot_id","type":["null","long"],"default":null,"field-id":1},
 {"name":"sequence_number","type":["null","long"],"default":null,"field-id":3},
 {"name":"file_sequence_number","type":["null","long"],"default":null,"field-id":4},
 {"name":"data_file","field-id":2,"type":{"type":"record","name":"r2","fields":[
  {"name":"content","type":"int","field-id":134},
  {"name":"file_path","type":"string","field-id":100},
  {"name":"file_format","type":"string","field-id":101},
  {"name":"partition","field-id":102,"type":{"type":"record","name":"r102","fields":[]}},
  {"name":"record_count","type":"long","field-id":103},
  {"name":"file_size_in_bytes","type":"long","field-id":104},
  {"name":"lower_bounds","field-id":125,"default":null,"type":["null",{"type":"array","logicalType":"map",
    "items":{"type":"record","name":"k126_v127","fields":[{"name":"key","type":"int","field-id":126},{"name":"value","type":"bytes","field-id":127}]}}]},
  {"name":"upper_bounds","field-id":128,"default":null,"type":["null",{"type":"array","logicalType":"map",
    "items":{"type":"record","name":"k129_v130","fields":[{"name":"key","type":"int","field-id":129},{"name":"value","type":"bytes","field-id":130}]}}]}
 ]}}]}"#;

const LIST_SCHEMA: &str = r#"{"type":"record","name":"manifest_file","fields":[
 {"name":"manifest_path","type":"string","field-id":500},
 {"name":"manifest_length","type":"long","field-id":501},
 {"name":"partition_spec_id","type":"int","field-id":502},
 {"name":"content","type":"int","field-id":517},
 {"name":"sequence_number","type":"long","field-id":515},
 {"name":"min_sequence_number","type":"long","field-id":516},
 {"name":"added_snapshot_id","type":"long","field-id":503},
 {"name":"added_files_count","type":"int","field-id":504},
 {"name":"existing_files_count","type":"int","field-id":505},
 {"name":"deleted_files_count","type":"int","field-id":506},
 {"name":"added_rows_count","type":"long","field-id":512},
 {"name":"existing_rows_count","type":"long","field-id":513},
 {"name":"deleted_rows_count","type":"long","field-id":514}]}"#;

fn avro(schema: &str, records: Vec<Avro>) -> Vec<u8> {
    let schema = apache_avro::Schema::parse_str(schema).expect("avro schema");
    let mut w = apache_avro::Writer::with_codec(
        &schema,
        Vec::new(),
        apache_avro::Codec::Deflate(Default::default()),
    )
    .expect("avro writer");
    for r in records {
        w.append_value(r).expect("avro record");
    }
    w.into_inner().expect("avro file")
}

fn rec(fields: Vec<(&str, Avro)>) -> Avro {
    Avro::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn bound(id: i32, offset: u64) -> Avro {
    Avro::Union(
        1,
        Box::new(Avro::Array(vec![rec(vec![
            ("key", Avro::Int(id)),
            ("value", Avro::Bytes((offset as i64).to_le_bytes().to_vec())),
        ])])),
    )
}

fn iceberg_type(ty: &ColumnType) -> &'static str {
    match ty {
        ColumnType::Boolean => "boolean",
        ColumnType::Int32 => "int",
        ColumnType::Int64 => "long",
        ColumnType::Float32 => "float",
        ColumnType::Float64 => "double",
        ColumnType::Utf8 => "string",
        _ => "binary",
    }
}

/// Seals `rows` into `FILES` data files and writes the stream metadata and the Iceberg table
/// around them under `dir`; returns the stream metadata hint URI.
fn write_table(dir: &Path, schema_json: &str, codec: &RowCodec, rows: &[Vec<u8>]) -> String {
    let Some(schema) = codec.schema() else {
        panic!("a schema")
    };
    let table = dir.join("pub/trades");
    fs::create_dir_all(table.join("data")).expect("data dir");
    fs::create_dir_all(table.join("metadata")).expect("metadata dir");
    let uri = |p: &Path| format!("file://{}", p.display());
    let per = rows.len() / FILES;
    let mut entries = Vec::new();
    for f in 0..FILES {
        let (lo, hi) = ((f * per + 1) as u64, ((f + 1) * per) as u64);
        let path = table.join(format!("data/{lo}-{}.parquet", hi + 1));
        let mut out = std::io::BufWriter::new(fs::File::create(&path).expect("data file"));
        write_segment(
            codec,
            (lo..=hi).map(|o| (o, TS0 + o as i64, rows[(o - 1) as usize].as_slice())),
            &mut out,
            &SealOptions::default(),
        )
        .expect("seal");
        drop(out);
        let size = fs::metadata(&path).expect("size").len();
        entries.push(rec(vec![
            ("status", Avro::Int(1)),
            ("snapshot_id", Avro::Union(1, Box::new(Avro::Long(1)))),
            ("sequence_number", Avro::Union(0, Box::new(Avro::Null))),
            ("file_sequence_number", Avro::Union(0, Box::new(Avro::Null))),
            (
                "data_file",
                rec(vec![
                    ("content", Avro::Int(0)),
                    ("file_path", Avro::String(uri(&path))),
                    ("file_format", Avro::String("PARQUET".into())),
                    ("partition", rec(vec![])),
                    ("record_count", Avro::Long(per as i64)),
                    ("file_size_in_bytes", Avro::Long(size as i64)),
                    ("lower_bounds", bound(1, lo)),
                    ("upper_bounds", bound(1, hi)),
                ]),
            ),
        ]));
    }
    let manifest = table.join("metadata/m0.avro");
    let bytes = avro(MANIFEST_SCHEMA, entries);
    fs::write(&manifest, &bytes).expect("manifest");
    let list = table.join("metadata/snap-1-1-m.avro");
    let listed = rec(vec![
        ("manifest_path", Avro::String(uri(&manifest))),
        ("manifest_length", Avro::Long(bytes.len() as i64)),
        ("partition_spec_id", Avro::Int(0)),
        ("content", Avro::Int(0)),
        ("sequence_number", Avro::Long(1)),
        ("min_sequence_number", Avro::Long(1)),
        ("added_snapshot_id", Avro::Long(1)),
        ("added_files_count", Avro::Int(FILES as i32)),
        ("existing_files_count", Avro::Int(0)),
        ("deleted_files_count", Avro::Int(0)),
        ("added_rows_count", Avro::Long(rows.len() as i64)),
        ("existing_rows_count", Avro::Long(0)),
        ("deleted_rows_count", Avro::Long(0)),
    ]);
    fs::write(&list, avro(LIST_SCHEMA, vec![listed])).expect("list");
    let mut fields =
        vec![r#"{"id":1,"name":"litelink_offset","type":"long","required":true}"#.to_string()];
    for (i, c) in schema.columns().iter().enumerate() {
        fields.push(format!(
            r#"{{"id":{},"name":"{}","type":"{}","required":{}}}"#,
            i + 2,
            c.name(),
            iceberg_type(c.ty()),
            !c.nullable()
        ));
    }
    let ts_id = schema.columns().len() + 2;
    fields.push(format!(
        r#"{{"id":{ts_id},"name":"streamcast_ts","type":"long","required":true}}"#
    ));
    let metadata = format!(
        r#"{{"format-version":2,"table-uuid":"00000000-0000-4000-8000-000000000001","location":"{}",
        "last-sequence-number":1,"last-updated-ms":0,"last-column-id":{ts_id},"current-schema-id":0,
        "schemas":[{{"type":"struct","schema-id":0,"fields":[{}]}}],"default-spec-id":0,
        "partition-specs":[{{"spec-id":0,"fields":[]}}],"last-partition-id":999,"properties":{{}},
        "current-snapshot-id":1,"snapshots":[{{"snapshot-id":1,"sequence-number":1,"timestamp-ms":0,
        "manifest-list":"{}","schema-id":0,"summary":{{"operation":"append"}}}}]}}"#,
        uri(&table),
        fields.join(","),
        uri(&list)
    );
    fs::write(table.join("metadata/00001-a.metadata.json"), metadata).expect("metadata");
    fs::write(table.join("metadata/version-hint.text"), "00001-a").expect("hint");
    let home = dir.join("trades.metadata");
    fs::create_dir_all(&home).expect("home");
    let stream = format!(
        r#"{{"streamcast_metadata":2,"stream":"trades","stream_id":"bench","sealed_logs":[],
        "live_log":{{"name":"trades","published":"{}","start_offset":1,"schema":{schema_json},
        "system_schema":{{}}}},"manifest":null}}"#,
        uri(&dir.join("pub"))
    );
    let name = "00001-00000000000000000000000000000001.metadata.json";
    fs::write(home.join(name), stream).expect("stream metadata");
    fs::write(home.join("version-hint.text"), name).expect("stream hint");
    uri(&home.join("version-hint.text"))
}

/// Every row of the table, handed to `sink` as `(offset, ts, row)`; returns the count.
fn read(hint: &str, mut sink: impl FnMut(u64, i64, &[u8])) -> usize {
    let table = PublishedTable::open(hint, Some("bench"), &S3Options::default()).expect("open");
    let mut rows = table.rows(table.extent(), 8_192).expect("rows");
    let mut n = 0;
    while let Some(chunk) = rows.next_chunk().expect("chunk") {
        for (o, ts, row) in chunk.iter() {
            sink(o, ts, row);
        }
        n += chunk.len();
    }
    n
}

fn benches(c: &mut Criterion) {
    let schema_json = std::fs::read_to_string(shared_dir().join("data/btcusdt-trades.schema.json"))
        .expect("schema");
    let codec = RowCodec::Schema(Schema::compile(&schema_json).expect("schema compiles"));
    let lines =
        std::fs::read_to_string(shared_dir().join("data/btcusdt-trades.jsonl")).expect("rows");
    let canonical: Vec<Vec<u8>> = lines
        .lines()
        .map(|l| {
            let mut out = Vec::new();
            codec
                .encode_row(&json::parse(l.as_bytes()).expect("json"), &mut out)
                .expect("valid");
            out
        })
        .collect();
    let rows: Vec<Vec<u8>> = canonical.iter().cycle().take(ROWS).cloned().collect();
    let tmp =
        tempfile::tempdir_in(std::env::var_os("CORECAST_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .or_else(|_| tempfile::tempdir())
            .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("absolute");
    let hint = write_table(&dir, &schema_json, &codec, &rows);
    // byte-identical, every offset once, in order
    let mut next = 1u64;
    let n = read(&hint, |o, ts, row| {
        assert_eq!(o, next);
        assert_eq!(ts, TS0 + o as i64);
        assert!(row == rows[(o - 1) as usize].as_slice(), "row {o} differs");
        next += 1;
    });
    assert_eq!(n, ROWS);
    eprintln!("trade: {ROWS} rows in {FILES} files read back byte for byte");

    let mut g = c.benchmark_group("catch_up");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    g.bench_function(
        format!("trade: local table -> rows, {ROWS} rows from offset 1"),
        |b| {
            b.iter(|| {
                let mut bytes = 0usize;
                let n = read(&hint, |_, _, row| bytes += row.len());
                assert_eq!(n, ROWS);
                black_box(bytes)
            })
        },
    );
    g.bench_function(
        format!("trade: local table -> [offset,ts,row] frames, {ROWS} rows from offset 1"),
        |b| {
            b.iter(|| {
                let mut frames = 0usize;
                let n = read(&hint, |o, ts, row| {
                    // what the client's Row holds for a caught-up row
                    let mut frame = String::with_capacity(row.len() + 44);
                    frame.push('[');
                    frame.push_str(itoa::Buffer::new().format(o));
                    frame.push(',');
                    frame.push_str(itoa::Buffer::new().format(ts));
                    frame.push(',');
                    frame.push_str(std::str::from_utf8(row).expect("utf8"));
                    frame.push(']');
                    frames += black_box(frame).len();
                });
                assert_eq!(n, ROWS);
                black_box(frames)
            })
        },
    );
    g.finish();
}

criterion_group!(catch_up_benches, benches);
criterion_main!(catch_up_benches);
