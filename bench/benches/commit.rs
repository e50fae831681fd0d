//! Commit throughput of the SQLite buffer at 1, 100 and 10,000 rows per transaction, with this
//! disk's fsync p50 measured in the same run. Target for ≥ 100 rows per transaction: rows/s ≥ 80%
//! of (rows per commit ÷ fsync p50). The bound and the percentage are printed after the group.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_bench::{trade_row, trade_schema};
use corecast_storage::json;
use corecast_storage::log::{AppendBatch, Buffer};
use corecast_storage::schema::{RowCodec, Schema};

/// p50 and p99 of fsync after a 128-byte append, in the given directory.
fn fsync_probe(dir: &std::path::Path, n: usize) -> (Duration, Duration) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("fsync.probe"))
        .expect("probe file");
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&[b'x'; 128]).expect("append");
        f.sync_all().expect("fsync");
        v.push(t.elapsed());
    }
    v.sort();
    (v[n / 2], v[n * 99 / 100])
}

fn commit(c: &mut Criterion) {
    let tmp =
        tempfile::tempdir_in(std::env::var_os("CORECAST_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .or_else(|_| tempfile::tempdir())
            .expect("tempdir");
    let schema = trade_schema();
    let codec = RowCodec::Schema(Schema::compile(&schema).expect("schema"));
    let encoded: Vec<Vec<u8>> = (0..10_000)
        .map(|i| {
            let mut out = Vec::new();
            codec
                .encode_row(&json::parse(trade_row(i).as_bytes()).unwrap(), &mut out)
                .unwrap();
            out
        })
        .collect();
    let mut buf = Buffer::open(&tmp.path().join("trades"), Some(&schema)).expect("buffer opens");
    let (f50, f99) = fsync_probe(tmp.path(), 300);
    eprintln!(
        "fsync p50 {:.3} ms p99 {:.3} ms (128-byte appends, same directory)",
        f50.as_secs_f64() * 1e3,
        f99.as_secs_f64() * 1e3
    );
    let mut g = c.benchmark_group("commit");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    let mut measured = Vec::new();
    for n in [1usize, 100, 10_000] {
        g.throughput(Throughput::Elements(n as u64));
        let rows = &encoded[..n];
        let mut total = Duration::ZERO;
        let mut count = 0u64;
        g.bench_function(format!("{n} rows per transaction"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    buf.append(&[AppendBatch::plain(rows)]).expect("commit");
                }
                let e = t.elapsed();
                total += e;
                count += iters;
                e
            })
        });
        measured.push((n, total.as_secs_f64() / count.max(1) as f64));
    }
    g.finish();
    let (f50_again, _) = fsync_probe(tmp.path(), 300);
    let f50s = (f50.as_secs_f64() + f50_again.as_secs_f64()) / 2.0;
    for (n, per_tx) in measured {
        let rows_s = n as f64 / per_tx;
        let bound = n as f64 / f50s;
        eprintln!(
            "commit {n:>6} rows/tx: {:>10.0} rows/s, {:.3} ms/tx; fsync bound {:>10.0} rows/s → {:.0}% {}",
            rows_s,
            per_tx * 1e3,
            bound,
            100.0 * rows_s / bound,
            if n >= 100 { if rows_s >= 0.8 * bound { "(meets ≥80%)" } else { "(below 80%)" } } else { "" }
        );
    }
}

criterion_group!(benches, commit);
criterion_main!(benches);
