//! The published history on S3, end to end with the real binary built with `--features s3`
//! against a local S3 server (moto, see `tests/published_s3/moto.rs`): with
//! `published = "s3://BUCKET/prod"` and the `[s3]` keys in the config, the **unchanged official
//! client** (`tests/published/check_catch_up.py`, the anchor venv) runs the same sequence as
//! `tests/published.rs` (refused without `catch_up`, catches up from the floor, the middle,
//! EARLIEST, with `metadata=` and `where=`, live rows after the splice, `Stream.snapshot`,
//! DuckDB and pyiceberg on the table) and again after a restart; the greeting names `s3://`
//! URIs; no key appears in the server's log, in `meta.db` or in any file of the data directory.
//! And when the store goes down, commits go on (publishers get their acks), `/stats` shows the
//! failure and its count growing, and when it comes back publishing recovers and the table holds
//! every row once.
//!
//! Needs the anchor venv (`$CORECAST_ANCHOR_PY`, else `../shared/tools/anchor/setup.sh`'s) and
//! an S3 server (`$CORECAST_MOTO_VENV` or `$AWS_ENDPOINT_URL`); without them these tests say so
//! and pass, unless `CORECAST_REQUIRE_S3` (or, for the venv, `CORECAST_REQUIRE_ANCHOR`) is set.
mod support;

#[path = "published_s3/moto.rs"]
mod moto;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use moto::{Gate, Moto, ACCESS_KEY, REGION, SECRET_KEY};
use sonic_rs::{JsonContainerTrait, JsonValueTrait};
use support::*;

/// The stream of tests/published.rs (seals by size, so a tail stays unpublished), published to
/// `s3://BUCKET/prod` through `ENDPOINT` with the test keys in `[s3]`.
fn config(endpoint: &str, bucket: &str) -> String {
    format!(
        r#"
[s3]
endpoint = "{endpoint}"
region = "{REGION}"
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[[stream]]
name = "trades"
schema = "@trade"
max_replay = 100
seal_every_s = 3600
seal_target_bytes = 65536
segment_bytes = 16384
published = "s3://{bucket}/prod"
"#
    )
}

/// The official client, pyiceberg and DuckDB pointed at the S3 server with the test keys.
struct Client<'a> {
    py: String,
    moto: &'a Moto,
}

impl Client<'_> {
    /// Runs one step of the check script with the `AWS_*` environment; its last stdout line,
    /// parsed.
    fn step(&self, args: &[&str]) -> sonic_rs::Value {
        let script = format!(
            "{}/../tests/published/check_catch_up.py",
            env!("CARGO_MANIFEST_DIR")
        );
        let out = Command::new(&self.py)
            .arg(&script)
            .args(args)
            .envs(self.moto.env())
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

    fn publish(&self, url: &str, first: u64, end: u64) {
        self.step(&[
            "publish",
            "--url",
            url,
            "--first",
            &first.to_string(),
            "--end",
            &end.to_string(),
        ]);
    }

    /// Publishes `first..end` (none when equal), waits for the table, runs the whole catch-up
    /// sequence (which adds `live` rows); returns the new end.
    fn full_check(&self, url: &str, first: u64, end: u64, live: u64) -> u64 {
        if end > first {
            self.publish(url, first, end);
        }
        let w = self.step(&["wait", "--url", url]);
        let (floor, published_end) = (json_u64(&w, "floor"), json_u64(&w, "published_end"));
        let end = json_u64(&w, "end");
        assert!(published_end < end, "a tail is left for the socket: {w:?}");
        let r = self.step(&[
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
        ]);
        eprintln!("catch-up report: {r:?}");
        let metadata = r["catch_up"]["probe"]["metadata"].as_str().unwrap_or("");
        assert!(
            metadata.starts_with("s3://"),
            "the client caught up from S3: {r:?}"
        );
        end + live
    }
}

/// The greeting's `metadata` and `metadata_hint`.
fn greeting_uris(server: &Server) -> (String, String) {
    let mut ws = ws_connect(&server.url("trades"));
    let text = recv_text(&mut ws);
    let g: sonic_rs::Value = sonic_rs::from_str(&text).expect("greeting");
    let field = |k: &str| {
        g.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("{k} in {text}"))
            .to_string()
    };
    (field("metadata"), field("metadata_hint"))
}

/// `/stats` for the stream `trades`.
fn stats(server: &Server) -> sonic_rs::Value {
    let doc = http_get(server.addr, "/stats").json();
    let streams = doc.get("streams").expect("streams");
    let arr = streams.as_array().expect("array");
    arr.iter()
        .find(|s| s.get("name").and_then(|n| n.as_str()) == Some("trades"))
        .expect("trades in /stats")
        .clone()
}

/// The failures count and last error of the published tier in `/stats`.
fn published_failure(server: &Server) -> (u64, Option<String>) {
    let s = stats(server);
    let p = &s["tiers"]["published"];
    let failures = p["failures"].as_u64().expect("failures");
    let error = p["last_error"].as_str().map(str::to_string);
    (failures, error)
}

/// No file under `dir` (recursively) holds either test key.
fn no_key_in_files(dir: &Path) {
    let mut checked = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            for key in [ACCESS_KEY, SECRET_KEY] {
                assert!(
                    !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                    "{} holds a key",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no files under {}", dir.display());
}

fn no_key_in(what: &str, text: &str) {
    for key in [ACCESS_KEY, SECRET_KEY] {
        assert!(!text.contains(key), "{what} shows a key:\n{text}");
    }
}

/// The server's stderr log (written by the test harness beside the data directory).
fn stderr_log(setup: &Setup) -> String {
    let p = setup
        .data()
        .with_extension(format!("stderr.{}.log", std::process::id()));
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn the_official_client_catches_up_from_a_table_on_s3_and_after_a_restart() {
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR", "CORECAST_REQUIRE_S3"]) else {
        return;
    };
    let Some(moto) = Moto::start() else { return };
    let bucket = moto::bucket("e2e");
    moto.create_bucket(&bucket);
    let client = Client { py, moto: &moto };
    let setup = Setup::new();
    let cfg = setup.config(&config(&moto.endpoint, &bucket));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");

    // the greeting names the stream metadata on S3
    let (metadata, hint) = greeting_uris(&server);
    assert_eq!(
        metadata,
        format!("s3://{bucket}/prod/trades/trades.metadata.json")
    );
    assert_eq!(
        hint,
        format!("s3://{bucket}/prod/trades/trades.metadata/version-hint.text")
    );

    let began = Instant::now();
    let end = client.full_check(&url, 1, 3051, 10);
    eprintln!("first sequence: {:?}", began.elapsed());

    // the objects are the layout's (PUBLISHED.md §1), and nothing was published locally
    let keys = moto.keys(&bucket, "prod/");
    for want in [
        "prod/trades/trades.metadata.json",
        "prod/trades/trades.metadata/version-hint.text",
        "prod/trades/trades/metadata/version-hint.text",
    ] {
        assert!(keys.iter().any(|k| k == want), "{want} in {keys:?}");
    }
    assert!(
        keys.iter()
            .any(|k| k.starts_with("prod/trades/trades/data/") && k.ends_with(".parquet")),
        "data files in {keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("prod/trades/trades/metadata/snap-") && k.ends_with(".avro")),
        "a manifest list in {keys:?}"
    );
    assert!(
        !setup.data().join("trades/published").exists(),
        "a table was written locally too"
    );

    // no key in /stats, in the log, in meta.db or in any file of the data directory
    no_key_in("/stats", &http_get(server.addr, "/stats").text());
    no_key_in("/metrics", &http_get(server.addr, "/metrics").text());
    assert_eq!(server.stop(), Some(0));
    no_key_in("the server's log", &stderr_log(&setup));
    assert!(
        stderr_log(&setup).contains(&format!("s3://{bucket}/prod/trades/trades")),
        "the log names where the table goes"
    );
    assert!(setup.data().join("trades/meta.db").exists(), "meta.db");
    no_key_in_files(&setup.data());

    // after a restart: the same table on S3, more rows, the same sequence
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    let began = Instant::now();
    client.full_check(&url, end, end + 1500, 10);
    eprintln!("after the restart: {:?}", began.elapsed());
    assert_eq!(server.stop(), Some(0));
    no_key_in("the server's log after the restart", &stderr_log(&setup));
    no_key_in_files(&setup.data());
}

#[test]
fn publishing_retries_while_the_store_is_down_and_converges_when_it_returns() {
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR", "CORECAST_REQUIRE_S3"]) else {
        return;
    };
    let Some(moto) = Moto::start() else { return };
    let bucket = moto::bucket("outage");
    moto.create_bucket(&bucket);
    let client = Client { py, moto: &moto };
    // corecast reaches the store through a gate that can go dark
    let gate = Gate::start(moto.addr);
    let setup = Setup::new();
    let cfg = setup.config(&config(&format!("http://{}", gate.addr), &bucket));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");

    let began = Instant::now();
    client.publish(&url, 1, 1001);
    let up_took = began.elapsed();
    eprintln!("1000 rows acknowledged in {up_took:?} with the store up");
    let w = client.step(&["wait", "--url", &url]);
    let published_before = json_u64(&w, "published_end");
    assert_eq!(published_failure(&server), (0, None));

    // the store goes down: commits go on (the publisher asserts every ack's offset), seals go
    // on, publishing fails and says so
    gate.close();
    let began = Instant::now();
    client.publish(&url, 1001, 3051);
    let acked_in = began.elapsed();
    eprintln!("2050 rows acknowledged in {acked_in:?} with the store down");
    assert!(
        acked_in < Duration::from_secs(30),
        "commits waited on the store: {acked_in:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let (first_failures, error) = loop {
        let (failures, error) = published_failure(&server);
        if let (true, Some(e)) = (failures > 0, &error) {
            break (failures, e.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no publish failure shown in 60 s: {:?}",
            stats(&server)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("last_error while down: {error}");
    assert!(
        error.contains(&format!("s3://{bucket}/prod/trades")),
        "the error names the location: {error}"
    );
    no_key_in("last_error", &error);
    // retried with back-off: the count grows; seals go on meanwhile, nothing is published
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        let s = stats(&server);
        let p = &s["tiers"]["published"];
        let failures = p["failures"].as_u64().expect("failures");
        assert!(p["last_error"].as_str().is_some(), "still failing: {s:?}");
        assert_eq!(
            p["end_offset"].as_u64(),
            Some(published_before),
            "nothing published while down: {s:?}"
        );
        let sealed_last = s["tiers"]["sealed"]["last_offset"].as_u64().unwrap_or(0);
        if failures > first_failures && sealed_last >= published_before {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "failures stayed at {failures} or nothing sealed for 60 s: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(s["end_offset"].as_u64(), Some(3051), "every row committed");

    // the store returns: publishing recovers by itself (within the back-off cap) and the table
    // converges on the sealed tier
    gate.open();
    let w = client.step(&["wait", "--url", &url]);
    assert_eq!(json_u64(&w, "floor"), 1);
    let end = json_u64(&w, "published_end");
    assert!(end > published_before, "published after recovery: {w:?}");
    // (the error is cleared just after the publish that succeeded)
    let deadline = Instant::now() + Duration::from_secs(10);
    let failures = loop {
        match published_failure(&server) {
            (failures, None) => break failures,
            (_, Some(e)) => assert!(
                Instant::now() < deadline,
                "the error stays after recovery: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(failures >= 2, "the failures stay counted: {failures}");
    // every row once, with the right values, read with no server's help
    let hint = format!("s3://{bucket}/prod/trades/trades.metadata/version-hint.text");
    let t = client.step(&["table", "--url", &url, "--hint", &hint]);
    eprintln!("after recovery: {t:?}");
    assert_eq!(
        (json_u64(&t, "floor"), json_u64(&t, "end")),
        (1, end),
        "{t:?}"
    );
    assert_eq!(json_u64(&t, "duckdb_rows"), end - 1);
    assert_eq!(json_u64(&t, "pyiceberg_rows"), end - 1);
    // and the official client catches up across the outage
    client.full_check(&url, 3051, 3051, 10);
    server.stop();
    no_key_in("the server's log", &stderr_log(&setup));
}

/// One request on its own connection; status and body (the control plane).
fn control(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.addr).expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let (head, body) = buf.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, body.to_string())
}

/// Waits for operation `id`; its final state.
fn operation_state(server: &Server, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = control(
            server,
            "GET",
            &format!("/control/v1/operations/{id}"),
            &[],
            "",
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let state = v["state"].as_str().unwrap_or("").to_string();
        if state == "succeeded" || state == "failed" || Instant::now() > deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_migration_of_a_stream_published_to_s3_is_caught_up_across_its_seam() {
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR", "CORECAST_REQUIRE_S3"]) else {
        return;
    };
    let Some(moto) = Moto::start() else { return };
    let bucket = moto::bucket("migrate");
    moto.create_bucket(&bucket);
    let setup = Setup::new();
    let cfg = setup.config(&format!(
        r#"
[s3]
endpoint = "{}"
region = "{REGION}"
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[control]
enabled = true
"#,
        moto.endpoint
    ));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let v1 = serde_json::json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]});
    let v2 = serde_json::json!({"type": "object", "properties": {"i": {"type": "integer"}, "note": {"type": ["string", "null"]}}, "required": ["i"]});
    let decl = serde_json::json!({"schema": v1, "seal_target_bytes": 4096, "published": format!("s3://{bucket}/prod")});
    let (status, body) = control(
        &server,
        "PUT",
        "/control/v1/streams/m",
        &[("Idempotency-Key", "c1"), ("If-None-Match", "*")],
        &decl.to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let op: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        operation_state(&server, op["operation_id"].as_str().unwrap()),
        "succeeded"
    );
    let rows: Vec<String> = (1..=300).map(|i| format!("{{\"i\":{i}}}")).collect();
    assert_eq!(publish_batch(&server, "m", &rows).len(), 300);
    let body = serde_json::json!({ "schema": v2 }).to_string();
    let (status, answer) = control(
        &server,
        "POST",
        "/control/v1/streams/m/migrations",
        &[("Idempotency-Key", "m1"), ("If-Match", "\"1\"")],
        &body,
    );
    assert_eq!(status, 202, "{answer}");
    let op: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        operation_state(&server, op["operation_id"].as_str().unwrap()),
        "succeeded",
        "{}",
        stderr_log(&setup)
    );
    let after: Vec<String> = (301..=350)
        .map(|i| format!("{{\"i\":{i},\"note\":\"n{i}\"}}"))
        .collect();
    assert_eq!(publish_batch(&server, "m", &after)[0], Some(301));

    // the old log's table and the stream metadata on S3, the new log's table beside the old
    let keys = moto.keys(&bucket, "prod/");
    for want in [
        "prod/m/m.metadata/version-hint.text",
        "prod/m/m.manifest.parquet",
        "prod/m/m/metadata/version-hint.text",
    ] {
        assert!(keys.iter().any(|k| k == want), "{want} in {keys:?}");
    }
    assert!(
        !setup.data().join("m/published").exists(),
        "nothing published locally"
    );

    let script = format!(
        "{}/../tests/control/catch_up_seam.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new(&py)
        .arg(&script)
        .arg(server.addr.to_string())
        .arg("m")
        .arg("1")
        .arg("351")
        .envs(moto.env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "catch_up_seam.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        report["plain"],
        serde_json::json!({"why": "evicted", "earliest": 301}),
        "{report}"
    );
    let got = report["rows"].as_array().unwrap();
    assert_eq!(got.len(), 350, "{report}");
    for (k, r) in got.iter().enumerate() {
        assert_eq!(r[0], k as u64 + 1, "{r}");
        assert_eq!(r[1], k as u64 + 1, "{r}");
    }
    no_key_in("the server's log", &stderr_log(&setup));
}
