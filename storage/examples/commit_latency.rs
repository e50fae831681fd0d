//! Commit latency of the buffer, with SQLite's automatic checkpoint on the commit path and with
//! checkpoints on a separate thread.
//!
//! `cargo run --release -p corecast-storage --example commit_latency -- [COMMITS] [ROWS] [DIR]`
//! prints p50 / p99 / p99.9 / max of `Buffer::append` for COMMITS commits of ROWS 120-byte rows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_storage::log::{AppendBatch, Buffer, Checkpointer};

fn run(dir: &std::path::Path, commits: usize, rows: usize, elsewhere: bool) -> Vec<f64> {
    let mut buf = Buffer::open(dir, None).expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let checkpointer = elsewhere.then(|| {
        buf.checkpoint_elsewhere().expect("pragma");
        let stop = stop.clone();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let c = Checkpointer::open(&dir).expect("checkpointer");
            while !stop.load(Ordering::Relaxed) {
                let _ = c.run();
                std::thread::sleep(Duration::from_millis(1000));
            }
        })
    });
    let row = [b'x'; 120];
    let batch: Vec<&[u8]> = (0..rows).map(|_| &row[..]).collect();
    let mut lat = Vec::with_capacity(commits);
    for _ in 0..commits {
        let t = Instant::now();
        buf.append(&[AppendBatch::plain(&batch)]).expect("commit");
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = checkpointer {
        let _ = h.join();
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    lat
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let commits: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    let rows: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10);
    let base = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    for (name, elsewhere) in [
        ("checkpoint in commit", false),
        ("checkpoint thread", true),
        ("checkpoint in commit", false),
        ("checkpoint thread", true),
    ] {
        let dir = tempfile::tempdir_in(&base).expect("tempdir");
        let lat = run(dir.path(), commits, rows, elsewhere);
        let q = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
        println!(
            "{name:22} {commits} commits x {rows} rows: p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms",
            q(0.5),
            q(0.99),
            q(0.999),
            lat[lat.len() - 1]
        );
    }
}
