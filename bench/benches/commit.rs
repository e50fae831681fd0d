//! Commit throughput of the hot log at 1, 100 and 10,000 rows per commit, paired with this disk's
//! `fdatasync` in the same run. Targets (issue 10): at 1 and 100 rows per commit, rows/s ≥ 95%
//! of the one-`fdatasync`-per-commit bound (rows ÷ fdatasync p50); at 10,000 rows per commit,
//! ≥ 80% of the device floor for the commit's bytes; at 1 row per commit the ack p99 within
//! fdatasync p99 + 0.2 ms. The verdicts are printed after the criterion group.
//!
//! The verdicts come from paired rounds: each round times, back to back so all three see the
//! same moment of the disk, (1) the bound's probe: a 128-byte `pwrite` into a preallocated file
//! and an `fdatasync`, (2) one commit, (3) the device floor: a `pwrite` of exactly the commit's record
//! bytes into a preallocated region + `fdatasync` — no format makes those bytes durable faster
//! through the page cache, so (3) is what is reachable at all, and (1) is the best case of one
//! small durable write per commit whatever its size.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_bench::{trade_row, trade_schema};
use corecast_storage::json;
use corecast_storage::log::record::RecordBuilder;
use corecast_storage::log::{AppendBatch, Buffer};
use corecast_storage::schema::{RowCodec, Schema};

/// An append-only scratch file in the bench directory, removed when dropped.
struct ProbeFile {
    file: File,
    path: std::path::PathBuf,
}

impl ProbeFile {
    fn create(dir: &std::path::Path, name: &str) -> ProbeFile {
        let path = dir.join(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .expect("probe file");
        ProbeFile { file, path }
    }

    /// Writes `len` zero bytes and makes them durable, so later overwrites of that region change
    /// no file size or block allocation.
    fn preallocate(&mut self, len: usize) {
        self.file.write_all(&vec![0; len]).expect("preallocate");
        self.file.sync_all().expect("fsync");
    }

    /// Writes `bytes` at the next position of a preallocated region (wrapping at its end) and
    /// makes them durable with `fdatasync`; returns how long both took.
    fn advance(&mut self, bytes: &[u8], pos: &mut u64, region: u64) -> Duration {
        use std::os::unix::fs::FileExt;
        if *pos + bytes.len() as u64 > region {
            *pos = 0;
        }
        let t = Instant::now();
        self.file.write_all_at(bytes, *pos).expect("write");
        self.file.sync_data().expect("fdatasync");
        *pos += bytes.len() as u64;
        t.elapsed()
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the paired rounds for one commit size measured.
struct Paired {
    /// p50 of a 128-byte pwrite + fdatasync: the bound's denominator.
    fsync_p50: Duration,
    /// p99 of the same.
    fsync_p99: Duration,
    /// Mean time of one commit (throughput is rows ÷ this).
    commit_mean: Duration,
    /// p50 of one commit.
    commit_p50: Duration,
    /// p99 of one commit (the ack latency a publisher sees, less the network).
    commit_p99: Duration,
    /// p50 of overwriting an allocated region with the commit's block bytes + fdatasync: the
    /// device floor.
    floor_p50: Duration,
    /// The bytes appended by the floor probe each round.
    floor_bytes: usize,
}

/// `rounds` rounds of: one 128-byte pwrite + fdatasync, one commit of `rows`, one write of the
/// commit's record bytes into a preallocated region + fdatasync — back to back, so the bound,
/// the commit and the floor see the same moment of a disk whose latency drifts by tens of
/// percent between runs.
fn paired(buf: &mut Buffer, dir: &std::path::Path, rows: &[Vec<u8>], rounds: usize) -> Paired {
    const REGION: u64 = 64 << 20;
    let mut fsync_probe = ProbeFile::create(dir, "fsync.probe");
    fsync_probe.preallocate(REGION as usize);
    let block = record_bytes(rows);
    let mut floor_probe = ProbeFile::create(dir, "floor.probe");
    floor_probe.preallocate((REGION as usize).max(2 * block.len()));
    let floor_region = (REGION).max(2 * block.len() as u64);
    let (mut probe_pos, mut floor_pos) = (0u64, 0u64);
    let (mut fsyncs, mut commits, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        fsyncs.push(fsync_probe.advance(&[b'x'; 128], &mut probe_pos, REGION));
        let t = Instant::now();
        buf.append(&[AppendBatch::plain(rows)]).expect("commit");
        commits.push(t.elapsed());
        floors.push(floor_probe.advance(&block, &mut floor_pos, floor_region));
    }
    let commit_mean = commits.iter().sum::<Duration>() / rounds as u32;
    for v in [&mut fsyncs, &mut commits, &mut floors] {
        v.sort();
    }
    Paired {
        fsync_p50: fsyncs[rounds / 2],
        fsync_p99: fsyncs[rounds * 99 / 100],
        commit_mean,
        commit_p50: commits[rounds / 2],
        commit_p99: commits[rounds * 99 / 100],
        floor_p50: floors[rounds / 2],
        floor_bytes: block.len(),
    }
}

/// The bytes a commit of `rows` appends: its record (header, rows with their lengths, padding).
fn record_bytes(rows: &[Vec<u8>]) -> Vec<u8> {
    let mut record = RecordBuilder::default();
    record.begin(1, 0);
    for row in rows {
        record.push_row(row).expect("row fits");
    }
    record.finish().to_vec()
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
    let mut g = c.benchmark_group("commit");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for n in [1usize, 100, 10_000] {
        g.throughput(Throughput::Elements(n as u64));
        let rows = &encoded[..n];
        g.bench_function(format!("{n} rows per commit"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    buf.append(&[AppendBatch::plain(rows)]).expect("commit");
                }
                t.elapsed()
            })
        });
    }
    g.finish();
    eprintln!(
        "paired rounds (128-byte pwrite + fdatasync, commit, the commit's bytes + fdatasync):"
    );
    for (n, rounds) in [(1usize, 1000), (100, 1000), (10_000, 100)] {
        let m = paired(&mut buf, tmp.path(), &encoded[..n], rounds);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rows_s = n as f64 / m.commit_mean.as_secs_f64();
        let bound = n as f64 / m.fsync_p50.as_secs_f64();
        let floor_rows_s = n as f64 / m.floor_p50.as_secs_f64();
        let floor_share = rows_s / floor_rows_s;
        let verdict = if n >= 10_000 {
            if floor_share >= 0.8 {
                " (meets ≥80% of the floor)"
            } else {
                " (below 80% of the floor)"
            }
        } else if rows_s >= 0.95 * bound {
            " (meets ≥95% of the bound)"
        } else {
            " (below 95% of the bound)"
        };
        eprintln!(
            "commit {n:>6} rows/tx: {rows_s:>10.0} rows/s (mean {:.3} ms/tx, p50 {:.3} ms, p99 {:.3} ms); fdatasync p50 {:.3} ms p99 {:.3} ms → bound {bound:>10.0} rows/s → {:.0}%{}",
            ms(m.commit_mean),
            ms(m.commit_p50),
            ms(m.commit_p99),
            ms(m.fsync_p50),
            ms(m.fsync_p99),
            100.0 * rows_s / bound,
            if n < 10_000 { verdict } else { "" },
        );
        eprintln!(
            "       device floor: {} bytes + fdatasync p50 {:.3} ms → {floor_rows_s:>10.0} rows/s = {:.0}% of the bound; corecast reaches {:.0}% of the floor{}",
            m.floor_bytes,
            ms(m.floor_p50),
            100.0 * floor_rows_s / bound,
            100.0 * floor_share,
            if n >= 10_000 { verdict } else { "" },
        );
        if n == 1 {
            let slack = m.commit_p99.saturating_sub(m.fsync_p99);
            eprintln!(
                "       ack p99 {:.3} ms vs fdatasync p99 {:.3} ms + 0.2 ms: {}",
                ms(m.commit_p99),
                ms(m.fsync_p99),
                if slack <= Duration::from_micros(200) {
                    "meets"
                } else {
                    "misses"
                }
            );
        }
    }
}

criterion_group!(benches, commit);
criterion_main!(benches);
