//! The published history, end to end with the real binary: the **unchanged official client**
//! (streamcast 0.26.0, `tests/published/check_catch_up.py` run with the anchor venv) is refused
//! without `catch_up`, catches up from the table and resumes on the socket with no gap and no
//! duplicate (from the floor, the middle, EARLIEST, with `metadata=` and `where=`), then takes
//! live rows; `Stream.snapshot`, DuckDB `iceberg_scan` and pyiceberg read the table with the
//! right types and values; all again after a restart, and after retention; and a kill -9 at each
//! point of a publish leaves readers a whole table and converges on restart.
//!
//! The venv is `../shared/tools/anchor/setup.sh`'s (`$CORECAST_ANCHOR_PY` to point elsewhere);
//! without it these tests say so and pass, unless `CORECAST_REQUIRE_ANCHOR` is set (CI sets it).
mod support;

use std::process::Command;
use std::time::Duration;

use support::*;

/// A stream whose seals come by size (64 KiB of rows, 16 KiB hot segments), so a tail stays
/// unsealed and unpublished: the catch-up reads the table, then the socket replays the tail.
const CONFIG: &str = r#"
[[stream]]
name = "trades"
schema = "@trade"
max_replay = 100
seal_every_s = 3600
seal_target_bytes = 65536
segment_bytes = 16384
"#;

fn anchor_python() -> Option<String> {
    let py = std::env::var("CORECAST_ANCHOR_PY").ok().or_else(|| {
        Some(std::env::var("HOME").ok()? + "/.cache/corecast-anchor/venv/bin/python")
    })?;
    let ok = Command::new(&py)
        .args(["-c", "import streamcast, litelink, pyiceberg, duckdb"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return Some(py);
    }
    assert!(
        std::env::var_os("CORECAST_REQUIRE_ANCHOR").is_none(),
        "CORECAST_REQUIRE_ANCHOR is set but {py} lacks streamcast/litelink/pyiceberg/duckdb (run ../shared/tools/anchor/setup.sh)"
    );
    eprintln!("skipped: no anchor venv at {py} (../shared/tools/anchor/setup.sh installs it)");
    None
}

/// Runs one step of the check script; its last stdout line, parsed.
fn step(py: &str, args: &[&str]) -> sonic_rs::Value {
    let script = format!(
        "{}/../tests/published/check_catch_up.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new(py)
        .arg(&script)
        .args(args)
        .output()
        .expect("run check_catch_up.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check_catch_up.py {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or("").to_string();
    sonic_rs::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

fn num(v: &sonic_rs::Value, key: &str) -> u64 {
    use sonic_rs::JsonValueTrait;
    v.get(key)
        .and_then(|x| x.as_u64())
        .unwrap_or_else(|| panic!("{key} in {v:?}"))
}

/// Publishes `first..end` (none when equal), waits for the table, runs the whole catch-up
/// sequence (which adds `live` rows); returns the new end.
fn full_check(py: &str, url: &str, first: u64, end: u64, live: u64) -> u64 {
    if end > first {
        step(
            py,
            &[
                "publish",
                "--url",
                url,
                "--first",
                &first.to_string(),
                "--end",
                &end.to_string(),
            ],
        );
    }
    let w = step(py, &["wait", "--url", url]);
    let (floor, published_end) = (num(&w, "floor"), num(&w, "published_end"));
    let end = num(&w, "end");
    assert!(published_end < end, "a tail is left for the socket: {w:?}");
    let r = step(
        py,
        &[
            "catch_up",
            "--url",
            url,
            "--floor",
            &floor.to_string(),
            "--published-end",
            &published_end.to_string(),
            "--end",
            &end.to_string(),
            "--live",
            &live.to_string(),
        ],
    );
    eprintln!("catch-up report: {r:?}");
    end + live
}

#[test]
fn the_official_client_catches_up_from_the_published_table_and_after_a_restart() {
    let Some(py) = anchor_python() else { return };
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    let end = full_check(&py, &url, 1, 3051, 10);
    assert_eq!(server.stop(), Some(0));
    // after a restart: the same table, more rows, the same sequence
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    full_check(&py, &url, end, end + 1500, 10);
    server.stop();
}

#[test]
fn catch_up_after_retention_refuses_below_the_floor_and_takes_what_is_left() {
    let Some(py) = anchor_python() else { return };
    let setup = Setup::new();
    let cfg = setup.config(&format!("{CONFIG}retention = \"20s\"\n"));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    step(
        &py,
        &["publish", "--url", &url, "--first", "1", "--end", "2001"],
    );
    step(&py, &["wait", "--url", &url]);
    // the first rows pass the retention window, then newer ones arrive
    std::thread::sleep(Duration::from_secs(21));
    step(
        &py,
        &["publish", "--url", &url, "--first", "2001", "--end", "4051"],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let floor = loop {
        let w = step(&py, &["wait", "--url", &url]);
        let floor = num(&w, "floor");
        if floor > 1 {
            break floor;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never moved the floor: {w:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let r = step(
        &py,
        &[
            "below",
            "--url",
            &url,
            "--first",
            "1",
            "--floor",
            &floor.to_string(),
            "--end",
            "4051",
        ],
    );
    eprintln!("after retention: {r:?}");
    server.stop();
}

#[test]
fn kill9_during_a_publish_leaves_a_whole_table_and_converges() {
    let Some(py) = anchor_python() else { return };
    for point in [
        "after_data",
        "after_manifest",
        "after_metadata",
        "after_hint",
    ] {
        let setup = Setup::new();
        let cfg = setup.config(CONFIG);
        // the first publish passes; the second aborts the process at `point`
        let fault = format!("{point}:1");
        let mut server = Server::start_env(
            Some(&cfg),
            &setup.data(),
            &[("CORECAST_FAULT_PUBLISH", &fault)],
        );
        let url = server.url("trades");
        step(
            &py,
            &["publish", "--url", &url, "--first", "1", "--end", "1001"],
        );
        step(&py, &["wait", "--url", &url]);
        // more rows: the next seal's publish aborts
        let _ = Command::new(&py)
            .arg(format!(
                "{}/../tests/published/check_catch_up.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(["publish", "--url", &url, "--first", "1001", "--end", "3051"])
            .output();
        assert!(
            server.exits_within(Duration::from_secs(30)),
            "{point}: the fault did not fire"
        );
        // a reader now: the table it resolves is whole (the old version, or the new one after
        // the hint): every row of it once, contiguous, with the right values
        let meta = setup.data().join("trades/trades.metadata.json");
        assert!(meta.exists(), "{point}: stream metadata");
        let r = step(
            &py,
            &[
                "table",
                "--url",
                &url,
                "--data",
                &setup.data().join("trades").display().to_string(),
            ],
        );
        eprintln!("{point}: while down: {r:?}");
        // restart without the fault: the table converges on the sealed tier
        let server = Server::start(Some(&cfg), &setup.data(), &[]);
        let url = server.url("trades");
        let end = num(&step(&py, &["wait", "--url", &url]), "end");
        full_check(&py, &url, end, end + 60, 5);
        server.stop();
    }
}
