//! Commit throughput of the SQLite buffer at 1, 100 and 10,000 rows per transaction, with this
//! disk's fsync p50 measured in the same run. Target for ≥ 100 rows per transaction: rows/s ≥ 80%
//! of (rows per commit ÷ fsync p50). The bound and the percentage are printed after the group.
//!
//! The verdict comes from paired rounds after the criterion group: each round times a 128-byte
//! append + fsync (the bound), one commit and the device floor back to back, so all three see the
//! same moment of the disk. The bound counts one small fsync per commit whatever its size; the
//! device floor is what that commit's bytes cost the disk — `pwrite` of the block payload a commit
//! of that many rows stores over an already allocated region of a plain file, then `fdatasync`
//! (nothing but the data to flush, as when SQLite reuses its WAL): no format makes those bytes
//! durable faster through the page cache, so it shows how much of the bound is reachable at all.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use corecast_bench::{trade_row, trade_schema};
use corecast_storage::json;
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
    /// no file size or block allocation (as SQLite reuses its WAL after a checkpoint).
    fn preallocate(&mut self, len: usize) {
        self.file.write_all(&vec![0; len]).expect("preallocate");
        self.file.sync_all().expect("fsync");
    }

    /// Overwrites the file's first `bytes.len()` bytes and makes them durable with
    /// `fdatasync`; returns how long both took.
    fn overwrite(&mut self, bytes: &[u8]) -> Duration {
        use std::os::unix::fs::FileExt;
        let t = Instant::now();
        self.file.write_all_at(bytes, 0).expect("overwrite");
        self.file.sync_data().expect("fdatasync");
        t.elapsed()
    }

    /// Appends `bytes` and makes them durable with `sync`; returns how long both took.
    fn append(&mut self, bytes: &[u8], sync: fn(&File) -> std::io::Result<()>) -> Duration {
        let t = Instant::now();
        self.file.write_all(bytes).expect("append");
        sync(&self.file).expect("sync");
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
    /// p50 of a 128-byte append + fsync: the bound's denominator.
    fsync_p50: Duration,
    /// p99 of the same.
    fsync_p99: Duration,
    /// Mean time of one commit (throughput is rows ÷ this).
    commit_mean: Duration,
    /// p50 of one commit.
    commit_p50: Duration,
    /// p50 of overwriting an allocated region with the commit's block bytes + fdatasync: the
    /// device floor.
    floor_p50: Duration,
    /// The bytes appended by the floor probe each round.
    floor_bytes: usize,
}

/// `rounds` rounds of: one 128-byte append + fsync, one commit of `rows`, one overwrite of an
/// allocated region with the bytes the commit stores + fdatasync — back to back, so the bound, the commit and the floor see
/// the same moment of a disk whose latency drifts by tens of percent between runs.
fn paired(buf: &mut Buffer, dir: &std::path::Path, rows: &[Vec<u8>], rounds: usize) -> Paired {
    let mut fsync_probe = ProbeFile::create(dir, "fsync.probe");
    let mut floor_probe = ProbeFile::create(dir, "floor.probe");
    floor_probe.preallocate(block_bytes(rows).len());
    let block = block_bytes(rows);
    let (mut fsyncs, mut commits, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        fsyncs.push(fsync_probe.append(&[b'x'; 128], File::sync_all));
        let t = Instant::now();
        buf.append(&[AppendBatch::plain(rows)]).expect("commit");
        commits.push(t.elapsed());
        floors.push(floor_probe.overwrite(&block));
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
        floor_p50: floors[rounds / 2],
        floor_bytes: block.len(),
    }
}

/// The bytes a commit of `rows` stores in its blocks: each row with its 4-byte length.
fn block_bytes(rows: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for row in rows {
        bytes.extend_from_slice(&(row.len() as u32).to_le_bytes());
        bytes.extend_from_slice(row);
    }
    bytes
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
        g.bench_function(format!("{n} rows per transaction"), |b| {
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
    eprintln!("paired rounds (128-byte append + fsync, commit, the commit's bytes + fdatasync):");
    for (n, rounds) in [(1usize, 400), (100, 400), (10_000, 60)] {
        let m = paired(&mut buf, tmp.path(), &encoded[..n], rounds);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rows_s = n as f64 / m.commit_mean.as_secs_f64();
        let bound = n as f64 / m.fsync_p50.as_secs_f64();
        let floor_rows_s = n as f64 / m.floor_p50.as_secs_f64();
        let verdict = match (n >= 100, rows_s >= 0.8 * bound) {
            (false, _) => "",
            (true, true) => " (meets ≥80%)",
            (true, false) => " (below 80%)",
        };
        eprintln!(
            "commit {n:>6} rows/tx: {rows_s:>10.0} rows/s (mean {:.3} ms/tx, p50 {:.3} ms); fsync p50 {:.3} ms p99 {:.3} ms → bound {bound:>10.0} rows/s → {:.0}%{verdict}",
            ms(m.commit_mean),
            ms(m.commit_p50),
            ms(m.fsync_p50),
            ms(m.fsync_p99),
            100.0 * rows_s / bound,
        );
        eprintln!(
            "       device floor: {} bytes overwritten + fdatasync p50 {:.3} ms → {floor_rows_s:>10.0} rows/s = {:.0}% of the bound; corecast reaches {:.0}% of the floor",
            m.floor_bytes,
            ms(m.floor_p50),
            100.0 * floor_rows_s / bound,
            100.0 * rows_s / floor_rows_s,
        );
    }
}

criterion_group!(benches, commit);
criterion_main!(benches);
