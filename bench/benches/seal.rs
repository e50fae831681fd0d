//! The sealed Parquet tier (issue 11), per core: sealing canonical rows into one Parquet segment
//! (in memory, so no disk in the figure), and reading a segment back from offset 1 as
//! byte-identical rows. Targets: seal ≥ 2M trade rows/s (≥ 1M es-mbo), replay ≥ 2M rows/s
//! (≥ 1M es-mbo).
//!
//! Rows: the real BTCUSDT trades (2,001, cycled to 65,536 with fresh offsets) and the first
//! 65,536 es-mbo events: one full row group each.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

use bytes::Bytes;
use corecast_storage::schema::RowCodec;
use corecast_storage::tier::{write_segment, ReadOptions, SealOptions, SegmentReader};

const ROWS: usize = 65_536;

fn dataset(name: &str) -> (RowCodec, Vec<Vec<u8>>) {
    let (_, codec, rows) = corecast_bench::dataset(name, ROWS);
    (codec, rows)
}

fn seal(codec: &RowCodec, rows: &[Vec<u8>]) -> Vec<u8> {
    let ts0 = 1_796_081_766_000_000i64;
    let mut file = Vec::with_capacity(4 << 20);
    let stats = write_segment(
        codec,
        rows.iter()
            .enumerate()
            .map(|(i, r)| (i as u64 + 1, ts0 + (i as i64 / 4), r.as_slice())),
        &mut file,
        &SealOptions::default(),
    )
    .expect("seal");
    assert_eq!(stats.rows, rows.len() as u64);
    file
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("seal");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    for (label, name) in [("trade", "btcusdt-trades"), ("es-mbo", "es-mbo")] {
        let (codec, rows) = dataset(name);
        g.bench_function(format!("{label}: seal {ROWS} rows"), |b| {
            b.iter(|| black_box(seal(&codec, black_box(&rows)).len()))
        });
        let file = Bytes::from(seal(&codec, &rows));
        eprintln!(
            "{label}: {} canonical bytes -> {} Parquet bytes",
            rows.iter().map(Vec::len).sum::<usize>(),
            file.len()
        );
        g.bench_function(
            format!("{label}: read back {ROWS} rows from offset 1"),
            |b| {
                b.iter(|| {
                    let mut reader = SegmentReader::open(
                        file.clone(),
                        &codec,
                        1..u64::MAX,
                        &ReadOptions::default(),
                    )
                    .expect("open");
                    let mut n = 0usize;
                    let mut bytes = 0usize;
                    while let Some(chunk) = reader.next_chunk().expect("chunk") {
                        n += chunk.len();
                        bytes += chunk.bytes.len();
                    }
                    assert_eq!(n, ROWS);
                    black_box(bytes)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(seal_benches, benches);
criterion_main!(seal_benches);
