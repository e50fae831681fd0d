//! Commit stalls over a long run: one-row durable commits back to back for
//! `CORECAST_SOAK_S` seconds (default 600), with a 128-byte `pwrite` + `fdatasync` probe on
//! another preallocated file every tenth commit, in the same run on the same disk. Target
//! (issue 10): no commit slower than 3× the probe's p99 (no checkpoint, no segment roll, no
//! spare preallocation on the commit path). Segments are 8 MiB here so the run rolls many times.
//!
//! `CORECAST_BENCH_DIR=target CORECAST_SOAK_S=600 cargo bench -p corecast-bench --bench commit_soak`

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use corecast_bench::{trade_row, trade_schema};
use corecast_storage::json;
use corecast_storage::log::{AppendBatch, Buffer, LogOptions};
use corecast_storage::schema::{RowCodec, Schema};

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds: u64 = std::env::var("CORECAST_SOAK_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let tmp =
        tempfile::tempdir_in(std::env::var_os("CORECAST_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .or_else(|_| tempfile::tempdir())
            .expect("tempdir");
    let schema = trade_schema();
    let codec = RowCodec::Schema(Schema::compile(&schema).expect("schema"));
    let mut row = Vec::new();
    codec
        .encode_row(&json::parse(trade_row(1).as_bytes()).unwrap(), &mut row)
        .unwrap();
    let options = LogOptions {
        segment_bytes: 8 << 20,
    };
    let mut buf =
        Buffer::open_with(&tmp.path().join("trades"), Some(&schema), options).expect("opens");
    const REGION: u64 = 64 << 20;
    let probe = std::fs::File::create(tmp.path().join("probe")).expect("probe");
    probe.set_len(REGION).expect("size");
    probe.sync_all().expect("sync");
    let mut probe_pos = 0u64;
    let rows = [row];
    let (mut commits, mut probes) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut i = 0u64;
    while Instant::now() < deadline {
        let t = Instant::now();
        buf.append(&[AppendBatch::plain(&rows)]).expect("commit");
        commits.push(t.elapsed());
        if i.is_multiple_of(10) {
            if probe_pos + 128 > REGION {
                probe_pos = 0;
            }
            let t = Instant::now();
            probe.write_all_at(&[b'x'; 128], probe_pos).expect("probe");
            probe.sync_data().expect("fdatasync");
            probes.push(t.elapsed());
            probe_pos += 128;
        }
        i += 1;
    }
    let mut sorted = commits.clone();
    sorted.sort();
    probes.sort();
    let at = |v: &[Duration], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let probe_p99 = at(&probes, 0.99);
    let limit = probe_p99 * 3;
    let over = commits.iter().filter(|c| **c > limit).count();
    // the disk's own stalls: the probe is the same operation as a one-row commit
    let probes_over = probes.iter().filter(|p| **p > limit).count();
    let segments = std::fs::read_dir(tmp.path().join("trades/log"))
        .map(|d| d.count())
        .unwrap_or(0);
    eprintln!(
        "commit soak: {} one-row commits in {seconds} s ({:.0}/s), {segments} segment files (8 MiB each)",
        commits.len(),
        commits.len() as f64 / seconds.max(1) as f64
    );
    eprintln!(
        "  commit p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms max {:.3} ms",
        ms(at(&sorted, 0.5)),
        ms(at(&sorted, 0.99)),
        ms(at(&sorted, 0.999)),
        ms(*sorted.last().unwrap()),
    );
    eprintln!(
        "  fdatasync probe ({} samples) p50 {:.3} ms p99 {:.3} ms max {:.3} ms",
        probes.len(),
        ms(at(&probes, 0.5)),
        ms(probe_p99),
        ms(*probes.last().unwrap()),
    );
    let bytes: u64 = std::fs::read_dir(tmp.path().join("trades/log"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    drop(buf);
    let t = Instant::now();
    let reopened =
        Buffer::open_with(&tmp.path().join("trades"), Some(&schema), options).expect("reopens");
    let took = t.elapsed();
    assert_eq!(reopened.end_offset(), commits.len() as u64 + 1);
    eprintln!(
        "  reopen (every record of {} segments, {:.0} MiB of files, checked): {:.0} ms",
        reopened.open_report().segments,
        bytes as f64 / (1 << 20) as f64,
        ms(took)
    );
    eprintln!(
        "  commits slower than 3 × probe p99 ({:.3} ms): {over} of {} ({:.4}%, {}); probes: {probes_over} of {} ({:.4}%)",
        ms(limit),
        commits.len(),
        over as f64 * 100.0 / commits.len() as f64,
        if over == 0 { "meets" } else { "misses" },
        probes.len(),
        probes_over as f64 * 100.0 / probes.len() as f64,
    );
}
