//! Commit throughput at 1, 100 and 10,000 rows per transaction. Ignored by default (it measures
//! the disk's fsync); run with
//! `cargo test -p corecast-storage --release --test log_throughput -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use corecast_storage::log::{AppendBatch, Buffer};

/// A 120-byte row, about the size of a small trade.
fn row(i: u64) -> Vec<u8> {
    let mut row = format!(
        "{{\"sym\":\"BTC-USD\",\"px\":{}.5,\"qty\":{},\"side\":\"buy\",\"pad\":\"",
        i % 90_000,
        i % 7
    );
    row.push_str(&"x".repeat(120 - row.len() - 2));
    row.push_str("\"}");
    row.into_bytes()
}

#[test]
#[ignore = "a measurement, not a check: run it by hand"]
fn commit_throughput() {
    for rows_per_commit in [1_usize, 100, 10_000] {
        let tmp = tempfile::tempdir().unwrap();
        let mut buffer = Buffer::open(tmp.path(), None).unwrap();
        let rows: Vec<Vec<u8>> = (0..rows_per_commit as u64).map(row).collect();
        let budget = Duration::from_secs(2);
        let started = Instant::now();
        let mut commits = 0_u64;
        while started.elapsed() < budget || commits < 3 {
            buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
            commits += 1;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let rows_total = commits * rows_per_commit as u64;
        println!(
            "{rows_per_commit:>6} rows/commit: {:>8.0} commits/s {:>10.0} rows/s ({:.2} ms/commit)",
            commits as f64 / elapsed,
            rows_total as f64 / elapsed,
            elapsed * 1e3 / commits as f64
        );
        assert_eq!(buffer.end_offset(), rows_total + 1);
    }
}
