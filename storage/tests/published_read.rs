//! The published-table reader against layouts written by others: the reference broker's own
//! (`../shared/tools/anchor/published_fixture.py`: pyarrow Parquet without field ids, a name
//! mapping, pyiceberg's Avro manifests, two snapshots with a merged manifest) and the
//! hand-written one of `../shared/tools/anchor/iceberg_writer_example.py` (field ids, its own
//! Avro writer), in its variants: no statistics, no field ids, neither field ids nor a name
//! mapping, a hole, a table that starts above the request. Then each refusal on a damaged copy.
//!
//! The layouts are generated once per run with the anchor venv (`../shared/tools/anchor/setup.sh`,
//! which `.ci/run` runs before `cargo test`). Without it the tests print `skipped: …` and pass,
//! except under CI (`CI` set), where they fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use corecast_storage::json;
use corecast_storage::published::{PublishedTable, ReadError, S3Options};
use corecast_storage::schema::{RowCodec, Schema};

/// `streamcast_ts` of the hand-written rows: offset i gets `TS0 + i`.
const TS0: i64 = 1796200000000000;

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn anchor() -> PathBuf {
    shared().join("tools/anchor")
}

struct Fixtures {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    python: PathBuf,
    /// The reference layout: the greeting's metadata URI, the stream id, each row's ts.
    reference_hint: String,
    reference_id: String,
    reference_ts: Vec<(u64, i64)>,
}

fn generate() -> Result<Fixtures, String> {
    let setup = anchor().join("setup.sh");
    let out = Command::new("bash")
        .arg(&setup)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", setup.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            setup.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let python = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path().to_path_buf();
    let reference = root.join("reference");
    run(
        &python,
        &[
            anchor().join("published_fixture.py").to_str().unwrap_or(""),
            "--root",
            reference.to_str().unwrap_or(""),
        ],
    )?;
    let verify: serde_json::Value = serde_json::from_slice(
        &std::fs::read(reference.join("VERIFY.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let greeting = &verify["client"]["catch_up_probe_greeting"];
    let reference_hint = greeting["metadata"].as_str().unwrap_or("").to_string();
    let reference_id = greeting["stream_id"].as_str().unwrap_or("").to_string();
    // each published row's streamcast_ts, as pyarrow reads the data files
    let ts = run(
        &python,
        &[
            "-c",
            "import glob, json, sys, pyarrow.parquet as pq\n\
             rows = []\n\
             for f in sorted(glob.glob(sys.argv[1] + '/trades/trades/published/trades/data/**/*.parquet', recursive=True)):\n\
             \x20   t = pq.read_table(f, columns=['litelink_offset', 'streamcast_ts'])\n\
             \x20   rows += list(zip(t.column(0).to_pylist(), t.column(1).to_pylist()))\n\
             print(json.dumps(sorted(rows)))",
            reference.to_str().unwrap_or(""),
        ],
    )?;
    let reference_ts: Vec<(u64, i64)> = serde_json::from_str(&ts).map_err(|e| e.to_string())?;
    Ok(Fixtures {
        _tmp: tmp,
        root,
        python,
        reference_hint,
        reference_id,
        reference_ts,
    })
}

fn run(python: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(python)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {:?} failed: {}",
            python.display(),
            args.first(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The generated fixtures, or `None` (the test then passes, saying why) without the venv.
fn fixtures() -> Option<&'static Fixtures> {
    static FIXTURES: OnceLock<Result<Fixtures, String>> = OnceLock::new();
    match FIXTURES.get_or_init(generate) {
        Ok(f) => Some(f),
        Err(e) if std::env::var_os("CI").is_some() => panic!("fixtures under CI: {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A hand-written layout (`write_layout(root, **kwargs)`) in its own directory; returns the
/// stream metadata hint URI and the stream id.
fn handwritten(f: &Fixtures, name: &str, kwargs: &str) -> (PathBuf, String, String) {
    let root = f.root.join(name);
    let script = format!(
        "import sys\nsys.path.insert(0, {anchor:?})\nfrom pathlib import Path\n\
         import iceberg_writer_example as w\n\
         print(w.write_layout(Path({root:?}){kwargs}))",
        anchor = anchor().display().to_string(),
        root = root.display().to_string(),
        kwargs = if kwargs.is_empty() {
            String::new()
        } else {
            format!(", {kwargs}")
        },
    );
    std::fs::create_dir_all(&root).expect("layout dir");
    let sid = run(&f.python, &["-c", &script]).expect("write_layout");
    let hint = format!(
        "file://{}/trades/trades.metadata/version-hint.text",
        root.display()
    );
    (root, hint, sid)
}

/// The trade schema both Python tools declare, compiled here (not taken from the table), so
/// the column order of the rows read is checked too.
fn trade_codec() -> RowCodec {
    let text = std::fs::read_to_string(anchor().join("trade.schema.json")).expect("schema");
    RowCodec::Schema(Schema::compile(&text).expect("trade schema"))
}

/// The canonical bytes of `row(i)` of both Python tools, encoded as the validator encodes the
/// JSON the reference's publisher sent (`json.dumps` of the row).
fn expected_row(codec: &RowCodec, i: u64) -> Vec<u8> {
    let price = 85000.0 + (i % 100) as f64 * 0.5;
    let amount = 0.001 * (i % 7 + 1) as f64;
    let amount = (amount * 1000.0).round() / 1000.0;
    let text = format!(
        r#"{{"event_ts": {}, "price": {price:?}, "amount": {amount:?}, "side": {}, "symbol": "{}", "trade_id": {}}}"#,
        1796000000000000u64 + i * 1000,
        i % 2,
        ["BTCUSD", "ETHUSD"][(i % 2) as usize],
        1000 + i
    );
    let value = json::parse(text.as_bytes()).expect("row json");
    let mut out = Vec::new();
    codec.encode_row(&value, &mut out).expect("row encodes");
    out
}

/// Every row of `range`, as `(offset, ts, bytes)`.
fn read_all(table: &PublishedTable, range: std::ops::Range<u64>) -> Vec<(u64, i64, Vec<u8>)> {
    let mut rows = table.rows(range, 700).expect("rows");
    let mut out = Vec::new();
    while let Some(chunk) = rows.next_chunk().expect("chunk") {
        assert!(chunk.len() <= 700);
        out.extend(chunk.iter().map(|(o, t, b)| (o, t, b.to_vec())));
    }
    out
}

fn check_rows(table: &PublishedTable, range: std::ops::Range<u64>, ts: impl Fn(u64) -> i64) {
    let rows = read_all(table, range.clone());
    assert_eq!(rows.len() as u64, range.end - range.start);
    let codec = trade_codec();
    assert_eq!(table.codec(), &codec);
    for ((o, t, bytes), want) in rows.iter().zip(range) {
        assert_eq!(*o, want);
        assert_eq!(*t, ts(want), "ts of offset {want}");
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&expected_row(&codec, want)),
            "offset {want}"
        );
    }
}

fn no_s3() -> S3Options {
    S3Options::default()
}

#[test]
fn reference_layout_reads_every_published_row_byte_for_byte() {
    let Some(f) = fixtures() else { return };
    let table = PublishedTable::open(&f.reference_hint, Some(&f.reference_id), &no_s3())
        .expect("open the reference layout");
    assert_eq!(table.metadata().stream, "trades");
    assert_eq!(table.metadata().version, 2);
    assert_eq!(table.extent(), 1..3001);
    assert_eq!(
        table
            .files()
            .iter()
            .map(|d| (d.offsets, d.record_count))
            .collect::<Vec<_>>(),
        [((1, 2000), 2000), ((2001, 3000), 1000)]
    );
    assert!(table
        .table_metadata_uri()
        .is_some_and(|u| u.contains("/metadata/00003-")));
    assert_eq!(table.catch_up_range(Some(1)).expect("from 1"), 1..3001);
    assert_eq!(table.catch_up_range(None).expect("earliest"), 1..3001);
    assert_eq!(f.reference_ts.len(), 3000);
    let ts = |o: u64| f.reference_ts[(o - 1) as usize].1;
    check_rows(&table, 1..3001, ts);
    // from the middle of the first file to the middle of the second
    check_rows(&table, 500..2500, ts);
}

#[test]
fn reference_layout_resolves_through_the_plain_uri() {
    let Some(f) = fixtures() else { return };
    let plain = f
        .reference_hint
        .replace("trades.metadata/version-hint.text", "trades.metadata.json");
    let table = PublishedTable::open(&plain, Some(&f.reference_id), &no_s3()).expect("plain");
    // the hint beside the plain file wins: the current version is read, not the plain copy
    assert!(table.metadata().uri.contains("/trades.metadata/00002-"));
    assert_eq!(table.extent(), 1..3001);
}

#[test]
fn handwritten_layout_reads_every_row() {
    let Some(f) = fixtures() else { return };
    let (_, hint, sid) = handwritten(f, "hw", "");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    assert_eq!(table.extent(), 1..3001);
    assert_eq!(table.files().len(), 2);
    check_rows(&table, 1..3001, |o| TS0 + o as i64);
    check_rows(&table, 2000..2002, |o| TS0 + o as i64);
    // an empty range reads nothing, even across the extent's end
    for empty in [5..5, 3001..3001, 9000..9000] {
        let mut rows = table.rows(empty, 10).expect("empty range");
        assert!(rows.next_chunk().expect("no rows").is_none());
    }
}

#[test]
fn handwritten_variants_read_the_same_rows() {
    let Some(f) = fixtures() else { return };
    for (name, kwargs) in [
        // the extent then comes from each file's Parquet statistics
        (
            "hw-nostats",
            "stats=False, codec='null', manifest_header=False",
        ),
        // columns by the table's name mapping
        ("hw-noids", "parquet_field_ids=False"),
        // one file, one snapshot
        ("hw-onefile", "files=((1, 3001),)"),
    ] {
        let (_, hint, sid) = handwritten(f, name, kwargs);
        let table = PublishedTable::open(&hint, Some(&sid), &no_s3())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(table.extent(), 1..3001, "{name}");
        check_rows(&table, 1..3001, |o| TS0 + o as i64);
    }
}

#[test]
fn neither_field_ids_nor_a_name_mapping_is_refused_not_read_as_nulls() {
    let Some(f) = fixtures() else { return };
    let (_, hint, sid) = handwritten(
        f,
        "hw-neither",
        "parquet_field_ids=False, name_mapping=False",
    );
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    let mut rows = table.rows(1..3001, 1000).expect("rows");
    let e = rows.next_chunk().expect_err("unmappable columns");
    let text = e.to_string();
    assert!(matches!(e, ReadError::Segment { .. }), "{text}");
    assert!(
        text.contains("no field ids") && text.contains("no name mapping"),
        "{text}"
    );
    assert!(text.contains("1-2001-"), "names the file: {text}");
}

#[test]
fn a_hole_between_files_is_refused_inside_the_range_only() {
    let Some(f) = fixtures() else { return };
    let (_, hint, sid) = handwritten(f, "hw-hole", "files=((1, 1001), (2001, 3001))");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    assert_eq!(table.extent(), 1..3001);
    let e = table.rows(1..3001, 1000).err().expect("a hole");
    match &e {
        ReadError::Defect { offsets, .. } => assert_eq!(*offsets, 1001..2001),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("1001..2001"), "{e}");
    assert!(table.rows(1500..2500, 1000).is_err());
    // on either side of it, the rows read
    check_rows(&table, 1..1001, |o| TS0 + o as i64);
    check_rows(&table, 2001..3001, |o| TS0 + o as i64);
}

#[test]
fn a_table_above_the_request_is_refused_with_the_gap() {
    let Some(f) = fixtures() else { return };
    let (_, hint, sid) = handwritten(f, "hw-above", "files=((101, 1001),)");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    assert_eq!(table.extent(), 101..1001);
    let e = table.catch_up_range(Some(1)).expect_err("gap below");
    assert!(
        matches!(
            e,
            ReadError::GapBelow {
                start: 1,
                floor: 101,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("the 100 rows between"), "{e}");
    assert_eq!(
        table.catch_up_range(Some(101)).expect("at the floor"),
        101..1001
    );
    assert_eq!(table.catch_up_range(None).expect("earliest"), 101..1001);
    let e = table.catch_up_range(Some(1001)).expect_err("nothing above");
    assert!(
        matches!(
            e,
            ReadError::NothingAbove {
                start: 1001,
                end: 1001,
                ..
            }
        ),
        "{e}"
    );
    assert!(table.rows(1..1001, 100).is_err(), "outside the extent");
}

#[test]
fn refusals_on_damaged_layouts_name_what_is_wrong() {
    let Some(f) = fixtures() else { return };

    // the stream hint missing: the greeting's URI fails, the plain URI reads the plain copy
    let (root, hint, sid) = handwritten(f, "hw-nohint", "");
    std::fs::remove_file(root.join("trades/trades.metadata/version-hint.text")).expect("rm");
    let e = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect_err("no hint");
    assert!(matches!(e, ReadError::NoMetadata { .. }), "{e}");
    assert!(e.to_string().contains(&hint) && e.to_string().contains("local to the server"));
    let plain = format!("file://{}/trades/trades.metadata.json", root.display());
    let table = PublishedTable::open(&plain, Some(&sid), &no_s3()).expect("the plain copy");
    assert_eq!(table.metadata().uri, plain);
    assert_eq!(table.extent(), 1..3001);

    // another stream's metadata
    let (_, hint, _) = handwritten(f, "hw-sid", "sid='24af1392-0000-4000-8000-000000000000'");
    let e = PublishedTable::open(
        &hint,
        Some("f23e6bae-bb18-48ff-9956-48bb69dfdc73"),
        &no_s3(),
    )
    .expect_err("stream id");
    assert!(matches!(e, ReadError::StreamIdMismatch { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("is stream 24af1392-0000-4000-8000-000000000000, not f23e6bae"));

    // a corrupt manifest: named, never read as an empty table
    let (root, hint, sid) = handwritten(f, "hw-manifest", "");
    let metadata = root.join("trades/trades/published/trades/metadata");
    let manifest = std::fs::read_dir(&metadata)
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-m0.avro"))
        .expect("a manifest");
    let mut bytes = std::fs::read(&manifest).expect("read");
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&manifest, &bytes).expect("write");
    let e = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect_err("corrupt manifest");
    assert!(matches!(e, ReadError::Invalid { .. }), "{e}");
    assert!(
        e.to_string().contains(&manifest.display().to_string()),
        "{e}"
    );

    // no Iceberg hint: nothing published, the catch-up has nothing above
    let (root, hint, sid) = handwritten(f, "hw-notable", "");
    std::fs::remove_file(root.join("trades/trades/published/trades/metadata/version-hint.text"))
        .expect("rm");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    assert_eq!(table.extent(), 1..1);
    let e = table.catch_up_range(Some(1)).expect_err("nothing");
    assert!(
        e.to_string()
            .contains("end at offset 1, which is not above the 1"),
        "{e}"
    );

    // a data file deleted: the read fails naming it (the client cannot see it at open)
    let (root, hint, sid) = handwritten(f, "hw-nodata", "");
    let data = root.join("trades/trades/published/trades/data");
    let second = std::fs::read_dir(&data)
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().contains("/2001-3001-"))
        .expect("second file");
    std::fs::remove_file(&second).expect("rm");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    let mut rows = table.rows(1..3001, 5000).expect("rows");
    let first = rows.next_chunk().expect("first file").expect("rows");
    assert_eq!((first.offsets[0], first.len()), (1, 2000));
    let e = rows.next_chunk().expect_err("missing file");
    assert!(matches!(e, ReadError::Missing { .. }), "{e}");
    assert!(e.to_string().contains(&second.display().to_string()), "{e}");

    // a damaged data file (the same size): a decode error naming it, not garbage rows
    let (root, hint, sid) = handwritten(f, "hw-baddata", "files=((1, 3001),)");
    let data = root.join("trades/trades/published/trades/data");
    let file = std::fs::read_dir(&data)
        .expect("ls")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .next()
        .expect("the file");
    let mut bytes = std::fs::read(&file).expect("read");
    let len = bytes.len();
    for b in &mut bytes[4..len / 2] {
        *b = 0xA5;
    }
    std::fs::write(&file, &bytes).expect("write");
    let table = PublishedTable::open(&hint, Some(&sid), &no_s3()).expect("open");
    let e = (|| {
        let mut rows = table.rows(1..3001, 5000)?;
        while rows.next_chunk()?.is_some() {}
        Ok::<(), ReadError>(())
    })()
    .expect_err("damaged pages");
    assert!(matches!(e, ReadError::Segment { .. }), "{e}");
    assert!(e.to_string().contains(&file.display().to_string()), "{e}");
}
