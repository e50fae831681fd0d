//! Replay from the sealed tier (issue 11), end to end through the reader pool's read path: a
//! recorded Parquet segment on disk → `SegmentReader` chunks → `FrameBatchBuilder` frames, in
//! jobs of ≤ `REPLAY_CHUNK_ROWS` rows / ≤ `REPLAY_CHUNK_BYTES` exactly as
//! `engine/src/replay/sealed.rs` builds them, from offset 1 to the end. Side by side, in the
//! same run: the same rows framed from the hot log (`BufferReader::scan_with`, as
//! `engine/src/replay/mod.rs`'s `scan`). Target: replay from segments ≥ 2M rows/s of
//! byte-identical frames from offset 1 (≥ 1M es-mbo).
//!
//! Rows: the real BTCUSDT trades (2,001, cycled) and es-mbo events (68,792, cycled), 1,048,576
//! of each, committed to a real hot log in 4,096-row commits; the segment is sealed from the
//! hot log's own `(offset, streamcast_ts, row)` (as `seal_next` does) into one file, and before
//! any timing the sealed frames are asserted equal, batch for batch and byte for byte, to the hot
//! log's frames. The segment file is in the page cache (as a segment sealed a moment ago is):
//! the figure is the decode and framing cost, not the disk.

use std::fs::File;
use std::hint::black_box;
use std::ops::ControlFlow;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_engine::fanout::batch::{FrameBatch, FrameBatchBuilder};
use corecast_engine::replay::{REPLAY_CHUNK_BYTES, REPLAY_CHUNK_ROWS};
use corecast_storage::log::{AppendBatch, Buffer, BufferReader};
use corecast_storage::schema::RowCodec;
use corecast_storage::tier::{write_segment, ReadOptions, RowChunk, SealOptions, SegmentReader};

const ROWS: usize = 1 << 20;

struct Data {
    codec: RowCodec,
    reader: BufferReader,
    segment: std::path::PathBuf,
    _tmp: tempfile::TempDir,
}

fn dataset(name: &str) -> Data {
    let (schema, codec, rows) = corecast_bench::dataset(name, ROWS);
    let tmp =
        tempfile::tempdir_in(std::env::var_os("CORECAST_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .or_else(|_| tempfile::tempdir())
            .expect("tempdir");
    let mut buf = Buffer::open(&tmp.path().join("hot"), Some(&schema)).expect("buffer opens");
    for chunk in rows.chunks(4096) {
        buf.append(&[AppendBatch::plain(chunk)]).expect("commit");
    }
    let reader = buf.reader().expect("reader");
    drop(buf);
    // seal from the hot log's own rows and timestamps, as seal_next does
    let mut stored: Vec<(u64, i64, Vec<u8>)> = Vec::with_capacity(ROWS);
    let mut from = 1;
    while from <= ROWS as u64 {
        reader
            .scan_with(from, ROWS as u64 + 1, 65_536, |o, ts, row| {
                stored.push((o, ts, row.to_vec()));
                ControlFlow::Continue(())
            })
            .expect("scan");
        from = stored.last().expect("rows").0 + 1;
    }
    assert_eq!(stored.len(), ROWS);
    let segment = tmp.path().join("segment.parquet");
    let mut file = std::io::BufWriter::new(File::create(&segment).expect("segment file"));
    let stats = write_segment(
        &codec,
        stored.iter().map(|(o, ts, r)| (*o, *ts, r.as_slice())),
        &mut file,
        &SealOptions::default(),
    )
    .expect("seal");
    drop(file);
    assert_eq!(stats.rows, ROWS as u64);
    eprintln!(
        "{name}: {ROWS} rows, {} canonical bytes -> {} Parquet bytes",
        stored.iter().map(|r| r.2.len()).sum::<usize>(),
        std::fs::metadata(&segment).expect("segment").len()
    );
    Data {
        codec,
        reader,
        segment,
        _tmp: tmp,
    }
}

/// The hot log's frames from offset 1: one job after another, as the pool's `scan`.
fn hot_frames(reader: &BufferReader, mut sink: impl FnMut(FrameBatch)) {
    let to = ROWS as u64 + 1;
    let mut from = 1;
    while from < to {
        let mut builder: Option<FrameBatchBuilder> = None;
        reader
            .scan_with(from, to, REPLAY_CHUNK_ROWS, |offset, ts_us, payload| {
                let b =
                    builder.get_or_insert_with(|| FrameBatchBuilder::new(offset, true, 64 * 1024));
                if b.next_seq() != offset {
                    return ControlFlow::Break(());
                }
                b.push(payload, ts_us);
                if b.bytes() >= REPLAY_CHUNK_BYTES {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            })
            .expect("scan");
        let batch = builder.expect("rows").finish();
        from = batch.end();
        sink(batch);
    }
}

/// The sealed tier's frames from offset 1: the segment opened once (the pool keeps a read open
/// between jobs) and framed job by job with `sealed.rs`'s stop rules.
fn sealed_frames(codec: &RowCodec, segment: &Path, mut sink: impl FnMut(FrameBatch)) {
    let to = ROWS as u64 + 1;
    let options = ReadOptions {
        chunk_rows: REPLAY_CHUNK_ROWS,
        ..ReadOptions::default()
    };
    let file = File::open(segment).expect("segment");
    let mut reader = SegmentReader::open(file, codec, 1..to, &options).expect("open");
    let mut pending: Option<(RowChunk, usize)> = None;
    let mut builder: Option<FrameBatchBuilder> = None;
    loop {
        let (chunk, start) = match pending.take() {
            Some(p) => p,
            None => match reader.next_chunk().expect("chunk") {
                Some(c) => (c, 0),
                None => break,
            },
        };
        let mut i = start;
        while i < chunk.len() {
            let (offset, ts, row) = chunk.row(i);
            let stop = builder.as_ref().is_some_and(|b| {
                b.next_seq() != offset
                    || b.len() >= REPLAY_CHUNK_ROWS
                    || b.bytes() >= REPLAY_CHUNK_BYTES
            });
            if stop {
                sink(builder.take().expect("batch").finish());
                continue; // the same row starts the next job's batch
            }
            builder
                .get_or_insert_with(|| FrameBatchBuilder::new(offset, true, 64 * 1024))
                .push(row, ts);
            i += 1;
        }
    }
    if let Some(b) = builder {
        sink(b.finish());
    }
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay_sealed");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    for (label, name) in [("trade", "btcusdt-trades"), ("es-mbo", "es-mbo")] {
        let d = dataset(name);
        // byte-identical: the same batches, the same bytes, every offset once
        let mut hot = Vec::new();
        hot_frames(&d.reader, |b| hot.push(b));
        let mut sealed = Vec::new();
        sealed_frames(&d.codec, &d.segment, |b| sealed.push(b));
        assert_eq!(hot.len(), sealed.len(), "{label}: batch count");
        let mut next = 1;
        for (h, s) in hot.iter().zip(&sealed) {
            assert_eq!(
                (h.first, h.len()),
                (s.first, s.len()),
                "{label}: batch bounds"
            );
            assert_eq!(h.first, next);
            assert!(
                h.frames == s.frames,
                "{label}: frames at {} differ",
                h.first
            );
            next = h.end();
        }
        assert_eq!(next, ROWS as u64 + 1);
        eprintln!(
            "{label}: {} batches, {} frame bytes, sealed == hot byte for byte",
            hot.len(),
            hot.iter().map(|b| b.frames.len()).sum::<usize>()
        );
        drop((hot, sealed));
        g.bench_function(
            format!("{label}: segment -> frames, {ROWS} rows from offset 1"),
            |b| {
                b.iter(|| {
                    let mut n = 0usize;
                    sealed_frames(&d.codec, &d.segment, |batch| n += batch.len());
                    assert_eq!(n, ROWS);
                    black_box(n)
                })
            },
        );
        g.bench_function(
            format!("{label}: hot log -> frames, {ROWS} rows from offset 1"),
            |b| {
                b.iter(|| {
                    let mut n = 0usize;
                    hot_frames(&d.reader, |batch| n += batch.len());
                    assert_eq!(n, ROWS);
                    black_box(n)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(replay_benches, benches);
criterion_main!(replay_benches);
