//! Catch-up from a local published table (issue 12): `PublishedTable::open` on the stream
//! metadata hint (the stream metadata, the Iceberg hint, table metadata, manifest list and
//! manifest), then every row of the extent through `TableRows` (each data file fetched whole
//! through the store, decoded by `SegmentReader` with the table's field-id mapping, re-encoded
//! to canonical rows), and the same framed `[offset,ts,row]` as the client hands rows out.
//! Target: ≥ 1M trade rows/s.
//!
//! Rows: the real BTCUSDT trades (2,001, cycled), 1,048,576 of them, sealed by corecast's own
//! `write_segment` into 8 data files of 131,072 rows (ZSTD, field ids, page index: what the
//! sealer writes and the publisher links), committed to the Iceberg v2 layout of
//! `../shared/PUBLISHED.md` §3 by corecast's own `Publisher`. Before any timing every row read
//! is asserted equal, byte for byte, to the canonical row the validator produced. The files are
//! in the page cache: the figure is the read, decode and encode cost, not the disk.

use std::fs;
use std::hint::black_box;
use std::path::Path;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_storage::log::{Buffer, LogOptions};
use corecast_storage::published::{
    Layout, PublishedTable, Publisher, S3Options, SegmentToPublish, StreamInfo,
};
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{segment_schema, write_segment, SealOptions};

const ROWS: usize = 1 << 20;
const FILES: usize = 8;
const TS0: i64 = 1_796_200_000_000_000;

/// The table as corecast publishes it: `FILES` segments written by the sealer's
/// `write_segment`, committed by the real `Publisher` (one `append`), under the default local
/// layout of a stream directory `dir/trades`; returns the stream metadata hint's URI.
fn write_table(
    dir: &Path,
    schema: &Schema,
    codec: &RowCodec,
    rows: &[Vec<u8>],
) -> (String, String) {
    let stream = dir.join("trades");
    // the publisher keeps its state in the stream's meta.db, which opening the log creates
    let _log =
        Buffer::open_with(&stream, Some(&schema.published()), LogOptions::default()).expect("log");
    let segments = stream.join("sealed");
    fs::create_dir_all(&segments).expect("segments dir");
    let per = rows.len() / FILES;
    let mut batch = Vec::new();
    for f in 0..FILES {
        let (lo, hi) = ((f * per + 1) as u64, ((f + 1) * per) as u64);
        let path = segments.join(format!("{lo}-{hi}.parquet"));
        let mut out = std::io::BufWriter::new(fs::File::create(&path).expect("data file"));
        write_segment(
            codec,
            (lo..=hi).map(|o| (o, TS0 + o as i64, rows[(o - 1) as usize].as_slice())),
            &mut out,
            &SealOptions::default(),
        )
        .expect("seal");
        drop(out);
        batch.push(SegmentToPublish {
            first_offset: lo,
            last_offset: hi,
            rows: hi - lo + 1,
            bytes: fs::metadata(&path).expect("size").len(),
            min_ts: TS0 + lo as i64,
            max_ts: TS0 + hi as i64,
            path,
        });
    }
    let layout = Layout::local(&stream, "trades").expect("layout");
    let hint = layout.metadata_hint_uri();
    let stream_id = "00000000-0000-4000-8000-0000000be0c4".to_string();
    let info = StreamInfo {
        stream_id: stream_id.clone(),
        schema_json: Some(schema.published()),
        segment_schema: segment_schema(codec),
        retirement: None,
        sealed_logs: Vec::new(),
    };
    let mut p =
        Publisher::open(&stream, layout, info, Duration::from_secs(600), 1).expect("publisher");
    p.append(&batch).expect("publish");
    (hint, stream_id)
}

/// Every row of the table, handed to `sink` as `(offset, ts, row)`; returns the count.
fn read(hint: &str, stream_id: &str, mut sink: impl FnMut(u64, i64, &[u8])) -> usize {
    let table = PublishedTable::open(hint, Some(stream_id), &S3Options::default()).expect("open");
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
    let (schema_json, codec, rows) = corecast_bench::dataset("btcusdt-trades", ROWS);
    let tmp =
        tempfile::tempdir_in(std::env::var_os("CORECAST_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .or_else(|_| tempfile::tempdir())
            .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("absolute");
    let schema = Schema::compile(&schema_json).expect("schema compiles");
    let (hint, stream_id) = write_table(&dir, &schema, &codec, &rows);
    // byte-identical, every offset once, in order
    let mut next = 1u64;
    let n = read(&hint, &stream_id, |o, ts, row| {
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
                let n = read(&hint, &stream_id, |_, _, row| bytes += row.len());
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
                let n = read(&hint, &stream_id, |o, ts, row| {
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
