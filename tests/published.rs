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
    let mut w = step(py, &["wait", "--url", url]);
    // a tail for the socket to replay: a few rows more while the last seal took every row
    // (a seal by size may cut at any commit)
    for _ in 0..20 {
        if json_u64(&w, "published_end") < json_u64(&w, "end") {
            break;
        }
        let e = json_u64(&w, "end");
        step(
            py,
            &[
                "publish",
                "--url",
                url,
                "--first",
                &e.to_string(),
                "--end",
                &(e + 7).to_string(),
            ],
        );
        w = step(py, &["wait", "--url", url]);
    }
    let (floor, published_end) = (json_u64(&w, "floor"), json_u64(&w, "published_end"));
    let end = json_u64(&w, "end");
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
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
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
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
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
        let floor = json_u64(&w, "floor");
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
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
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
        let end = json_u64(&step(&py, &["wait", "--url", &url]), "end");
        full_check(&py, &url, end, end + 60, 5);
        server.stop();
    }
}

/// The `/stats` entry of stream `name`.
fn stats_of(server: &Server, name: &str) -> sonic_rs::Value {
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let v = http_get(server.addr, "/stats").json();
    v.get("streams")
        .and_then(|s| s.as_array())
        .and_then(|a| {
            a.iter()
                .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(name))
                .cloned()
        })
        .unwrap_or_else(|| panic!("no stream {name} in /stats"))
}

fn path_u64(v: &sonic_rs::Value, path: &[&str]) -> Option<u64> {
    use sonic_rs::JsonValueTrait;
    let mut cur = v.clone();
    for p in path {
        cur = cur.get(*p)?.clone();
    }
    cur.as_u64()
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return,
            Err(last) => assert!(
                std::time::Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; last: {last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `evict_after = "published"` keeps the hot log while publishing fails (the table's data
/// directory replaced by a file: every upload fails), shows the error and counts the failures
/// in `/stats` and `/metrics` while commits go on; once the store works again the table
/// converges on every sealed row and the hot segments go. With `evict_after = "sealed"` they go
/// as soon as they are sealed.
#[test]
fn evict_after_published_keeps_the_hot_log_until_the_table_holds_it() {
    use sonic_rs::JsonValueTrait;
    for policy in ["published", "sealed"] {
        let setup = Setup::new();
        let cfg = setup.config(&format!("{CONFIG}evict_after = \"{policy}\"\n"));
        let server = Server::start(Some(&cfg), &setup.data(), &[]);
        let table = setup.data().join("trades/published/trades");
        // the publisher has opened (the stream metadata is written) before the store breaks
        wait_until("the stream metadata", Duration::from_secs(30), || {
            setup
                .data()
                .join("trades/trades.metadata/version-hint.text")
                .exists()
                .then_some(())
                .ok_or_else(|| "no stream hint".into())
        });
        std::fs::create_dir_all(&table).unwrap();
        let _ = std::fs::remove_dir_all(table.join("data"));
        std::fs::write(table.join("data"), b"not a directory").unwrap();
        let rows: Vec<String> = (1..=4000).map(|i| trade(i, "BTCUSD")).collect();
        for chunk in rows.chunks(500) {
            let offsets = publish_batch(&server, "trades", chunk);
            assert!(offsets.iter().all(|o| o.is_some()), "commits go on");
        }
        wait_until(
            "seals and a failed publish",
            Duration::from_secs(60),
            || {
                let s = stats_of(&server, "trades");
                let sealed = path_u64(&s, &["tiers", "sealed", "segments"]).unwrap_or(0);
                let failures = path_u64(&s, &["tiers", "published", "failures"]).unwrap_or(0);
                let error = s["tiers"]["published"]["last_error"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                if sealed >= 4 && failures >= 1 && error.contains("data") {
                    Ok(())
                } else {
                    Err(format!(
                        "sealed {sealed}, failures {failures}, error {error:?}"
                    ))
                }
            },
        );
        let s = stats_of(&server, "trades");
        let evicted = path_u64(&s, &["tiers", "evicted_segments"]).unwrap_or(0);
        let hot_first = path_u64(&s, &["tiers", "hot", "first_offset"]);
        if policy == "published" {
            assert_eq!(evicted, 0, "nothing evicted while unpublished: {s:?}");
            assert_eq!(
                hot_first,
                Some(1),
                "the hot log keeps every unpublished row"
            );
        } else {
            wait_until("eviction after sealing", Duration::from_secs(30), || {
                let s = stats_of(&server, "trades");
                (path_u64(&s, &["tiers", "evicted_segments"]).unwrap_or(0) > 0)
                    .then_some(())
                    .ok_or_else(|| format!("{s:?}"))
            });
        }
        let metrics = http_get(server.addr, "/metrics").text();
        let failures_line = metrics
            .lines()
            .find(|l| l.starts_with("corecast_publish_failures_total{stream=\"trades\"}"))
            .expect("publish failures metric");
        assert!(!failures_line.ends_with(" 0"), "{failures_line}");
        // the store works again: the table converges, then the hot log is evicted
        std::fs::remove_file(table.join("data")).unwrap();
        wait_until("the table catching up", Duration::from_secs(90), || {
            let s = stats_of(&server, "trades");
            let sealed_last = path_u64(&s, &["tiers", "sealed", "last_offset"]).unwrap_or(0);
            let end = path_u64(&s, &["tiers", "published", "end_offset"]).unwrap_or(0);
            let error_cleared = s["tiers"]["published"]["last_error"].is_null();
            let evicted = path_u64(&s, &["tiers", "evicted_segments"]).unwrap_or(0);
            if end == sealed_last + 1 && error_cleared && evicted > 0 {
                Ok(())
            } else {
                Err(format!(
                    "published end {end}, sealed last {sealed_last}, evicted {evicted}"
                ))
            }
        });
        // every published offset once, contiguous from 1
        let mut files: Vec<(u64, u64)> = std::fs::read_dir(table.join("data"))
            .unwrap()
            .map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                let mut parts = name.split('-');
                let a: u64 = parts.next().unwrap().parse().unwrap();
                let b: u64 = parts.next().unwrap().parse().unwrap();
                (a, b)
            })
            .collect();
        files.sort();
        let mut next = 1;
        for (a, b) in files {
            assert_eq!(a, next, "{policy}: hole or repeat in the published files");
            next = b;
        }
        server.stop();
    }
}

/// Retention hides what it dropped from every tier: rows still in the newest hot segment (never
/// evicted) are not served once their sealed segment is dropped — a subscribe below the floor is
/// refused `evicted`, `earliest_offset` moves up — and the table keeps its newest file, so the
/// official client is told the rows are gone rather than skipping them.
#[test]
fn retention_hides_dropped_rows_still_in_the_hot_log() {
    use sonic_rs::JsonValueTrait;
    let setup = Setup::new();
    let cfg = setup.config(
        "[[stream]]\nname = \"trades\"\nschema = \"@trade\"\nseal_every_s = 0.5\nretention = \"3s\"\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let rows: Vec<String> = (1..=500).map(|i| trade(i, "BTCUSD")).collect();
    publish_batch(&server, "trades", &rows);
    wait_until(
        "retention dropping the sealed rows",
        Duration::from_secs(30),
        || {
            let s = stats_of(&server, "trades");
            let earliest = path_u64(&s, &["tiers", "earliest_offset"]).unwrap_or(0);
            let expired = path_u64(&s, &["tiers", "expired_segments"]).unwrap_or(0);
            if expired >= 1 && earliest == 501 {
                Ok(())
            } else {
                Err(format!("earliest {earliest}, expired {expired}: {s:?}"))
            }
        },
    );
    let s = stats_of(&server, "trades");
    assert_eq!(
        path_u64(&s, &["tiers", "hot", "first_offset"]),
        Some(1),
        "the newest hot segment still holds the rows (it is never evicted)"
    );
    let mut ws = ws_connect(&server.url("trades?offset=1"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4416, "{reason}");
    assert!(
        reason.contains("\"why\":\"evicted\"") && reason.contains("\"earliest\":501"),
        "{reason}"
    );
    // the table keeps its newest file: the official client's floor is that file's first offset
    let table = setup.data().join("trades/published/trades/data");
    assert_eq!(
        std::fs::read_dir(&table).unwrap().count(),
        1,
        "the newest published file stays"
    );
    let meta: sonic_rs::Value = sonic_rs::from_slice(
        &std::fs::read(setup.data().join("trades/trades.metadata.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["live_log"]["start_offset"].as_u64(), Some(1));
    server.stop();
}

/// A published location that cannot be used (a file where its directory should be) does not
/// stop the broker: it starts, commits and serves; the publish fails, named in `/stats`.
#[test]
fn an_unusable_location_fails_publishing_not_the_start() {
    use sonic_rs::JsonValueTrait;
    let setup = Setup::new();
    let blocker = setup.tmp.path().join("afile");
    std::fs::write(&blocker, b"in the way").unwrap();
    let cfg = setup.config(&format!(
        "[[stream]]\nname = \"trades\"\nschema = \"@trade\"\nseal_every_s = 0.5\npublished = \"file://{}\"\n",
        blocker.display()
    ));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let rows: Vec<String> = (1..=200).map(|i| trade(i, "BTCUSD")).collect();
    let offsets = publish_batch(&server, "trades", &rows);
    assert!(offsets.iter().all(|o| o.is_some()), "commits go on");
    wait_until(
        "the publish error in /stats",
        Duration::from_secs(30),
        || {
            let s = stats_of(&server, "trades");
            let e = s["tiers"]["published"]["last_error"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if e.contains("afile") {
                Ok(())
            } else {
                Err(format!("last_error {e:?}"))
            }
        },
    );
    let mut ws = ws_connect(&server.url("trades?offset=1"));
    let _greeting = recv_text(&mut ws);
    let first = recv_text(&mut ws);
    assert!(first.starts_with("[1,"), "{first}");
    server.stop();
}
