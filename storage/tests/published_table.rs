//! The published table as written by [`Publisher`], read back file by file: contiguous data
//! files with exact `litelink_offset` bounds, Parquet field ids equal to the Iceberg schema's,
//! the name mapping, one manifest naming every live file, the hint last; a crash at each point
//! of a commit converges on reopen with every row published once; retention and garbage
//! collection; refusals of holes and repeats. (PUBLISHED.md §5's traps each have a check here.)

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use apache_avro::types::Value as Avro;
use corecast_storage::json;
use corecast_storage::log::{AppendBatch, Buffer, LogOptions};
use corecast_storage::published::{
    FaultPoint, Layout, PublishError, Publisher, SegmentToPublish, StreamInfo,
};
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{
    seal_next, segment_schema, SealCut, SealOptions, SegmentEntry, SegmentIndex,
};
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

fn data(name: &str) -> String {
    format!("{}/../../shared/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    schema: Schema,
    segments: Vec<SegmentEntry>,
    index: SegmentIndex,
}

/// `rows` BTC trades committed and sealed into segments of about `target` bytes.
fn fixture(rows: usize, target: u64) -> Fixture {
    let schema = Schema::compile(
        &std::fs::read_to_string(data("btcusdt-trades.schema.json")).expect("schema file"),
    )
    .expect("schema");
    let codec = RowCodec::Schema(schema.clone());
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("btc");
    let mut buffer = Buffer::open_with(
        &dir,
        Some(&schema.published()),
        LogOptions {
            segment_bytes: 64 << 10,
        },
    )
    .expect("log");
    let text = std::fs::read_to_string(data("btcusdt-trades.jsonl")).expect("data");
    let encoded: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .cycle()
        .take(rows)
        .map(|line| {
            let mut out = Vec::new();
            codec
                .encode_row(&json::parse(line.as_bytes()).expect("json"), &mut out)
                .expect("row");
            out
        })
        .collect();
    for chunk in encoded.chunks(500) {
        buffer.append(&[AppendBatch::plain(chunk)]).expect("append");
    }
    let index = SegmentIndex::open(&dir).expect("index");
    let reader = buffer.reader().expect("reader");
    let mut segments = Vec::new();
    while let Some(e) = seal_next(
        &index,
        &reader,
        &codec,
        SealCut {
            until: buffer.end_offset(),
            target_bytes: target,
        },
        &SealOptions::default(),
    )
    .expect("seal")
    {
        segments.push(e);
    }
    Fixture {
        _tmp: tmp,
        dir,
        schema,
        segments,
        index,
    }
}

impl Fixture {
    fn open(&self, grace: Duration) -> Publisher {
        let layout = Layout::local(&self.dir, "btc").expect("layout");
        let info = StreamInfo {
            stream_id: "00000000-0000-4000-8000-000000000001".into(),
            schema_json: Some(self.schema.published()),
            segment_schema: segment_schema(&RowCodec::Schema(self.schema.clone())),
            retirement: None,
            sealed_logs: Vec::new(),
        };
        Publisher::open(&self.dir, layout, info, grace, 1).expect("publisher")
    }

    fn batch(&self, range: std::ops::Range<usize>) -> Vec<SegmentToPublish> {
        self.segments[range]
            .iter()
            .map(|s| SegmentToPublish {
                first_offset: s.first_offset,
                last_offset: s.last_offset,
                rows: s.rows,
                bytes: s.bytes,
                min_ts: s.min_ts,
                max_ts: s.max_ts,
                path: self.index.path_of(s),
            })
            .collect()
    }

    fn table(&self) -> std::path::PathBuf {
        self.dir.join("published/btc")
    }
}

fn local(uri: &str) -> &Path {
    Path::new(uri.strip_prefix("file://").expect("a file:// URI"))
}

fn avro_records(path: &Path) -> (HashMap<String, Vec<u8>>, Vec<Avro>) {
    let bytes = std::fs::read(path).expect("avro file");
    let reader = apache_avro::Reader::new(&bytes[..]).expect("avro reader");
    let meta = reader.user_metadata().clone();
    let records = reader.map(|r| r.expect("record")).collect();
    (meta, records)
}

fn field<'a>(record: &'a Avro, name: &str) -> &'a Avro {
    let Avro::Record(fields) = record else {
        panic!("not a record: {record:?}")
    };
    &fields
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .1
}

fn unwrap_union(v: &Avro) -> &Avro {
    match v {
        Avro::Union(_, inner) => inner,
        other => other,
    }
}

fn long(v: &Avro) -> Option<i64> {
    match unwrap_union(v) {
        Avro::Long(n) => Some(*n),
        Avro::Int(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// A bound map (array of `{key, value}`) as `field id → bytes`.
fn bounds(v: &Avro) -> HashMap<i32, Vec<u8>> {
    let Avro::Array(items) = unwrap_union(v) else {
        panic!("bounds not an array: {v:?}")
    };
    items
        .iter()
        .map(|kv| {
            let Avro::Int(k) = field(kv, "key") else {
                panic!()
            };
            let Avro::Bytes(b) = field(kv, "value") else {
                panic!()
            };
            (*k, b.clone())
        })
        .collect()
}

/// What a reader sees: the hint, the metadata it names, the current snapshot's one manifest,
/// and that manifest's entries as `(first, last, rows, status, path)`.
struct Seen {
    metadata: Value,
    entries: Vec<(i64, i64, i64, i32, String)>,
}

fn read_table(table: &Path) -> Seen {
    let stem = std::fs::read_to_string(table.join("metadata/version-hint.text")).expect("hint");
    assert!(
        !stem.ends_with(".metadata.json"),
        "the Iceberg hint holds the stem, not the file name"
    );
    let metadata: Value = serde_json::from_slice(
        &std::fs::read(table.join(format!("metadata/{}.metadata.json", stem.trim())))
            .expect("metadata named by the hint"),
    )
    .expect("metadata json");
    let current = metadata["current-snapshot-id"].as_i64().expect("current");
    let snapshot = metadata["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(current))
        .expect("the current snapshot is listed");
    assert!(snapshot["summary"]["operation"].is_string());
    let (list_meta, manifests) =
        avro_records(local(snapshot["manifest-list"].as_str().expect("list")));
    assert_eq!(
        list_meta.get("snapshot-id").map(|v| v.as_slice()),
        Some(current.to_string().as_bytes())
    );
    let mut entries = Vec::new();
    for m in &manifests {
        let Avro::String(path) = field(m, "manifest_path") else {
            panic!()
        };
        let (_, rows) = avro_records(local(path));
        for e in rows {
            let Avro::Int(status) = field(&e, "status") else {
                panic!()
            };
            let df = field(&e, "data_file");
            let Avro::String(file) = field(df, "file_path") else {
                panic!()
            };
            let lower = bounds(field(df, "lower_bounds"));
            let upper = bounds(field(df, "upper_bounds"));
            let lo = i64::from_le_bytes(lower[&1].clone().try_into().expect("8 bytes"));
            let hi = i64::from_le_bytes(upper[&1].clone().try_into().expect("8 bytes"));
            let rows = long(field(df, "record_count")).expect("record_count");
            let size = long(field(df, "file_size_in_bytes")).expect("size");
            assert_eq!(
                std::fs::metadata(local(file)).expect("data file").len() as i64,
                size,
                "file_size_in_bytes is exact"
            );
            entries.push((lo, hi, rows, *status, file.clone()));
        }
    }
    entries.sort();
    Seen { metadata, entries }
}

#[test]
fn files_are_contiguous_with_exact_bounds_field_ids_and_a_name_mapping() {
    let f = fixture(6000, 48 << 10);
    assert!(f.segments.len() >= 4, "{} segments", f.segments.len());
    let mut p = f.open(Duration::from_secs(600));
    p.append(&f.batch(0..2)).expect("first publish");
    p.append(&f.batch(2..f.segments.len()))
        .expect("second publish");
    let last = f.segments.last().expect("segments").last_offset;
    assert_eq!(p.end(), last + 1);

    let seen = read_table(&f.table());
    // §5.3: no hole, from the first offset to the end
    let mut next = 1;
    for (lo, hi, rows, _, _) in &seen.entries {
        assert_eq!(*lo, next, "hole or overlap before {lo}");
        assert_eq!(*rows, hi - lo + 1);
        next = hi + 1;
    }
    assert_eq!(next as u64, last + 1);
    // EXISTING entries from the first publish, ADDED from the second
    let statuses: Vec<i32> = seen.entries.iter().map(|e| e.3).collect();
    assert_eq!(&statuses[..2], &[0, 0]);
    assert!(statuses[2..].iter().all(|&s| s == 1));

    // §5.2: the bounds are the file's true min and max; §5.1: field ids match the schema
    let schema_fields = seen.metadata["schemas"][0]["fields"]
        .as_array()
        .expect("fields")
        .clone();
    let ids: HashMap<String, i64> = schema_fields
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["id"].as_i64().unwrap(),
            )
        })
        .collect();
    for (lo, hi, rows, _, file) in &seen.entries {
        let reader = SerializedFileReader::new(std::fs::File::open(local(file)).expect("parquet"))
            .expect("parquet reader");
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), *rows);
        let descr = meta.file_metadata().schema_descr();
        for i in 0..descr.num_columns() {
            let col = descr.column(i);
            let info = col.self_type().get_basic_info();
            assert!(
                info.has_id(),
                "column {} has no Parquet field id",
                col.name()
            );
            assert_eq!(
                i64::from(info.id()),
                ids[col.name()],
                "column {}'s field id",
                col.name()
            );
        }
        let (mut min, mut max) = (i64::MAX, i64::MIN);
        for rg in meta.row_groups() {
            match rg.column(0).statistics() {
                Some(parquet::file::statistics::Statistics::Int64(s)) => {
                    min = min.min(*s.min_opt().expect("min"));
                    max = max.max(*s.max_opt().expect("max"));
                }
                other => panic!("litelink_offset statistics: {other:?}"),
            }
        }
        assert_eq!((min, max), (*lo, *hi), "bounds of {file}");
    }
    let mapping: Value = serde_json::from_str(
        seen.metadata["properties"]["schema.name-mapping.default"]
            .as_str()
            .expect("name mapping"),
    )
    .expect("mapping json");
    for m in mapping.as_array().expect("mapping") {
        let name = m["names"][0].as_str().unwrap();
        assert_eq!(m["field-id"].as_i64(), Some(ids[name]), "{name}");
    }
    assert_eq!(
        schema_fields.first().unwrap()["name"],
        "litelink_offset",
        "litelink_offset first"
    );
    assert_eq!(schema_fields.last().unwrap()["name"], "streamcast_ts");

    // the stream metadata: hint → version, plain copy equal, start_offset 1
    let hint = std::fs::read_to_string(f.dir.join("btc.metadata/version-hint.text")).unwrap();
    assert!(hint.ends_with(".metadata.json"), "{hint}");
    let version: Value =
        serde_json::from_slice(&std::fs::read(f.dir.join("btc.metadata").join(&hint)).unwrap())
            .unwrap();
    let plain: Value =
        serde_json::from_slice(&std::fs::read(f.dir.join("btc.metadata.json")).unwrap()).unwrap();
    assert_eq!(version, plain);
    assert_eq!(version["live_log"]["start_offset"], 1);
    assert_eq!(
        version["live_log"]["published"].as_str().unwrap(),
        format!("file://{}/published", f.dir.display())
    );
    assert_eq!(version["stream_id"], "00000000-0000-4000-8000-000000000001");
    // the declared column order survives (it is the key order of every row)
    let declared: Vec<String> = f
        .schema
        .to_arrow()
        .fields()
        .iter()
        .map(|c| c.name().clone())
        .collect();
    let written: Vec<String> = version["live_log"]["schema"]["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .cloned()
        .collect();
    assert_eq!(written, declared);
}

#[test]
fn holes_and_repeats_are_refused() {
    let f = fixture(4000, 32 << 10);
    let mut p = f.open(Duration::from_secs(600));
    p.append(&f.batch(0..1)).expect("publish");
    let repeat = p.append(&f.batch(0..1)).unwrap_err();
    assert!(
        matches!(&repeat, PublishError::Invariant(m) if m.contains("already published")),
        "{repeat}"
    );
    let mut gappy = f.batch(1..2);
    gappy.extend(f.batch(3..4));
    let hole = p.append(&gappy).unwrap_err();
    assert!(
        matches!(&hole, PublishError::Invariant(m) if m.contains("not contiguous")),
        "{hole}"
    );
    assert_eq!(p.end(), f.segments[0].last_offset + 1, "nothing moved");
}

#[test]
fn a_crash_at_any_point_converges_with_each_row_once() {
    for (point, committed) in [
        (FaultPoint::AfterData, false),
        (FaultPoint::AfterManifest, false),
        (FaultPoint::AfterMetadata, false),
        (FaultPoint::AfterHint, true),
    ] {
        let f = fixture(4000, 32 << 10);
        let mut p = f.open(Duration::from_secs(600));
        p.append(&f.batch(0..1)).expect("first publish");
        let before = read_table(&f.table());
        p.set_fault(point, false);
        p.append(&f.batch(1..3)).unwrap_err();
        // what a reader sees meanwhile: the old version whole, or (after the hint) the new one
        let during = read_table(&f.table());
        if committed {
            assert_eq!(during.entries.len(), 3, "{point:?}");
        } else {
            assert_eq!(during.entries, before.entries, "{point:?}: torn table");
        }
        drop(p);
        // reopen: the pending commit is resolved
        let mut p = f.open(Duration::from_secs(600));
        let expect_end = if committed {
            f.segments[2].last_offset + 1
        } else {
            f.segments[0].last_offset + 1
        };
        assert_eq!(p.end(), expect_end, "{point:?}");
        let metadata_files = std::fs::read_dir(f.table().join("metadata"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".metadata.json")
            })
            .count();
        assert_eq!(
            metadata_files,
            if committed { 2 } else { 1 },
            "{point:?}: the rolled-back version's files are deleted"
        );
        let data_files = std::fs::read_dir(f.table().join("data")).unwrap().count();
        assert_eq!(data_files, if committed { 3 } else { 1 }, "{point:?}");
        // and the next publish carries on with no hole and no repeat
        let rest = if committed { 3..4 } else { 1..4 };
        p.append(&f.batch(rest)).expect("publish after reopen");
        let seen = read_table(&f.table());
        let mut next = 1;
        for (lo, hi, _, _, _) in &seen.entries {
            assert_eq!(*lo, next, "{point:?}");
            next = hi + 1;
        }
        assert_eq!(next as u64, f.segments[3].last_offset + 1, "{point:?}");
    }
}

#[test]
fn retention_removes_the_oldest_files_and_old_versions_go_after_the_grace_period() {
    let f = fixture(16000, 16 << 10);
    let n = f.segments.len();
    assert!(n >= 14, "{n} segments");
    let mut p = f.open(Duration::ZERO);
    for i in 0..12 {
        p.append(&f.batch(i..i + 1)).expect("publish");
    }
    // retention: everything up to segment 2's newest row
    let cutoff = f.segments[2].max_ts + 1;
    let removed = p.expire(cutoff).expect("expire");
    assert!(removed >= 3, "{removed}");
    let seen = read_table(&f.table());
    let floor = seen.entries[0].0 as u64;
    assert!(floor > f.segments[2].last_offset, "{floor}");
    let stream_meta: Value =
        serde_json::from_slice(&std::fs::read(f.dir.join("btc.metadata.json")).unwrap()).unwrap();
    assert_eq!(
        stream_meta["live_log"]["start_offset"].as_u64(),
        Some(floor),
        "the stream metadata's start_offset follows retention"
    );
    // removed files stay while a kept version names them
    p.collect_garbage().expect("gc");
    assert_eq!(
        std::fs::read_dir(f.table().join("data")).unwrap().count(),
        12
    );
    for i in 12..n {
        p.append(&f.batch(i..i + 1)).expect("publish");
    }
    p.collect_garbage().expect("gc");
    let versions = std::fs::read_dir(f.table().join("metadata"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".metadata.json")
        })
        .count();
    assert_eq!(versions, 10, "the newest 10 versions are kept");
    let data = std::fs::read_dir(f.table().join("data")).unwrap().count();
    assert_eq!(data, n - removed, "the removed files are deleted");
    // what is left still reads whole
    let seen = read_table(&f.table());
    assert_eq!(seen.entries.len(), n - removed);
    // everything past retention: the newest file stays (an empty table would let the official
    // client skip the dropped rows silently), and its first offset is the floor
    let more = p.expire(i64::MAX).expect("expire all");
    assert_eq!(more, n - removed - 1);
    let seen = read_table(&f.table());
    assert_eq!(seen.entries.len(), 1, "the newest file stays");
    assert_eq!(seen.entries[0].0 as u64, f.segments[n - 1].first_offset);
    let stream_meta: Value =
        serde_json::from_slice(&std::fs::read(f.dir.join("btc.metadata.json")).unwrap()).unwrap();
    assert_eq!(
        stream_meta["live_log"]["start_offset"].as_u64(),
        Some(f.segments[n - 1].first_offset)
    );
}

#[test]
fn damage_readers_would_hit_is_repaired_or_refused_at_open() {
    let f = fixture(4000, 32 << 10);
    let mut p = f.open(Duration::from_secs(600));
    p.append(&f.batch(0..3)).expect("publish");
    drop(p);
    let meta = f.table().join("metadata");
    // a lost hint and a lost metadata file: rewritten as a new version over the same files
    std::fs::remove_file(meta.join("version-hint.text")).unwrap();
    let mut p = f.open(Duration::from_secs(600));
    let notes = p.verify(&|_, _| None).expect("verify");
    assert!(notes.iter().any(|n| n.contains("rewritten")), "{notes:?}");
    assert_eq!(read_table(&f.table()).entries.len(), 3);
    let stem = std::fs::read_to_string(meta.join("version-hint.text")).unwrap();
    std::fs::remove_file(meta.join(format!("{stem}.metadata.json"))).unwrap();
    let notes = p.verify(&|_, _| None).expect("verify");
    assert!(notes.iter().any(|n| n.contains("missing")), "{notes:?}");
    assert_eq!(read_table(&f.table()).entries.len(), 3);
    // a lost data file: published again from its sealed segment, or refused naming it
    let seen = read_table(&f.table());
    let victim = local(&seen.entries[1].4).to_path_buf();
    std::fs::remove_file(&victim).unwrap();
    let e = p.verify(&|_, _| None).unwrap_err();
    assert!(
        e.to_string().contains(&victim.display().to_string()) && e.to_string().contains("missing"),
        "{e}"
    );
    let segments: Vec<(u64, u64, std::path::PathBuf)> = f
        .segments
        .iter()
        .map(|s| (s.first_offset, s.last_offset, f.index.path_of(s)))
        .collect();
    let relink = |a: u64, b: u64| {
        segments
            .iter()
            .find(|s| s.0 == a && s.1 == b)
            .map(|s| s.2.clone())
    };
    let notes = p.verify(&relink).expect("relink");
    assert!(
        notes.iter().any(|n| n.contains("published again")),
        "{notes:?}"
    );
    assert!(victim.exists());
    drop(p);
    // meta.db edited so that its end no longer matches the files: refused, naming both
    let db = rusqlite::Connection::open(f.dir.join("meta.db")).unwrap();
    db.execute(
        "UPDATE published_state SET value = '5' WHERE key = 'end'",
        [],
    )
    .unwrap();
    drop(db);
    let layout = Layout::local(&f.dir, "btc").expect("layout");
    let info = StreamInfo {
        stream_id: "00000000-0000-4000-8000-000000000001".into(),
        schema_json: Some(f.schema.published()),
        segment_schema: segment_schema(&RowCodec::Schema(f.schema.clone())),
        retirement: None,
        sealed_logs: Vec::new(),
    };
    let e = Publisher::open(&f.dir, layout, info, Duration::from_secs(600), 1)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("recorded as 5"), "{e}");
}
