//! Schema migrations over `/control/v1` (issue 15 item 4), against the real binary on loopback:
//! a migration under pipelined publishing loses no acknowledged row (each is in the old log's
//! published table or the new log) and the offsets continue at the seam; the stream metadata
//! lists the old log as a sealed log; a subscriber below the seam is refused 4416 `evicted` with
//! the seam as `earliest`; the unchanged official client catches up across the seam; a kill -9
//! at each step of a migration finishes it exactly once after the restart; the 4xx rules of the
//! migration resource; a retired stream is never revived; exactly-once marks carry over;
//! `corecast ctl migrate`; our own client's catch-up (and `corecast sub --catch-up`) across the
//! seam, from 1, from the earliest and with a filter on the column the migration added.
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_net::client::{blocking, Offset, PublishOptions, SubscribeOptions};
use corecast_storage::published::{PublishedTable, S3Options};
use serde_json::{json, Value};
use support::{recv_close, recv_text, ws_connect, Server, Setup};

const CONFIG: &str = r#"
[[stream]]
name = "static1"

[control]
enabled = true
"#;

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn code(&self) -> String {
        let v = self.json();
        assert!(v["error"]["message"].is_string(), "{}", self.body);
        v["error"]["code"].as_str().unwrap_or_default().to_string()
    }
}

fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if method != "GET" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status");
    let headers = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Resp {
        status,
        headers,
        body: body.to_string(),
    }
}

fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, &[], "")
}

fn etag(addr: SocketAddr, name: &str) -> String {
    get(addr, &format!("/control/v1/streams/{name}"))
        .header("etag")
        .expect("etag")
        .to_string()
}

fn create(addr: SocketAddr, name: &str, decl: &Value) -> String {
    let r = http(
        addr,
        "PUT",
        &format!("/control/v1/streams/{name}"),
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", &format!("create-{name}")),
            ("If-None-Match", "*"),
        ],
        &decl.to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    r.json()["operation_id"].as_str().unwrap().to_string()
}

/// `POST …/migrations` with `key` and `If-Match: if_match`.
fn migrate_with(addr: SocketAddr, name: &str, key: &str, if_match: &str, body: &str) -> Resp {
    http(
        addr,
        "POST",
        &format!("/control/v1/streams/{name}/migrations"),
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", key),
            ("If-Match", if_match),
        ],
        body,
    )
}

/// Migrates `name` to `schema` with its current ETag; the operation id.
fn migrate(addr: SocketAddr, name: &str, schema: &Value) -> String {
    let tag = etag(addr, name);
    let r = migrate_with(
        addr,
        name,
        &format!("migrate-{name}-{}", tag.replace('"', "")),
        &tag,
        &json!({ "schema": schema }).to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(r.header("location").is_some());
    r.json()["operation_id"].as_str().unwrap().to_string()
}

fn finished(addr: SocketAddr, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = get(addr, &format!("/control/v1/operations/{id}"));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        if v["state"] == "succeeded" || v["state"] == "failed" {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "operation {id} still {}",
            v["state"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn v1() -> Value {
    json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]})
}

/// The new schema: a column added.
fn v2() -> Value {
    json!({"type": "object", "properties": {"i": {"type": "integer"}, "note": {"type": ["string", "null"]}}, "required": ["i"]})
}

fn decl(schema: Value) -> Value {
    // small sealed segments, so the old log seals into several files
    json!({ "schema": schema, "seal_target_bytes": 4096 })
}

/// Publishes rows `{"i": i}` for `is`, one frame, on a new connection; their offsets.
fn publish(server: &Server, stream: &str, rows: &[Value]) -> Vec<Option<u64>> {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    let texts: Vec<String> = rows.iter().map(Value::to_string).collect();
    let offsets = support::publish_on(&mut ws, &texts);
    let _ = ws.close(None);
    offsets
}

fn rows(from: u64, to: u64) -> Vec<Value> {
    (from..to).map(|i| json!({ "i": i })).collect()
}

/// The stream metadata the greeting's hint resolves to.
fn stream_metadata(data: &Path, name: &str) -> Value {
    let home = data.join(name);
    let dir = home.join(format!("{name}.metadata"));
    let hint = std::fs::read_to_string(dir.join("version-hint.text")).expect("hint");
    serde_json::from_slice(&std::fs::read(dir.join(hint.trim())).expect("version")).expect("json")
}

/// A pipelined publisher: one row per frame, up to `window` frames unacknowledged; when the
/// broker closes the connection (the migration stops the stream: 1001) it connects again and
/// goes on, until `stop` is set. Every acknowledged `(i, offset)`, in order.
fn pipelined(url: String, window: usize, stop: Arc<AtomicBool>) -> Vec<(u64, u64)> {
    let mut acked = Vec::new();
    let mut next = 1_000_000;
    while !stop.load(Ordering::Relaxed) {
        let Ok((mut ws, _)) = tungstenite::connect(&url) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        }
        // the greeting, or the close of a stream stopped for the migration
        match ws.read() {
            Ok(tungstenite::Message::Text(_)) => {}
            _ => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        let mut sent = std::collections::VecDeque::new();
        loop {
            while sent.len() < window && !stop.load(Ordering::Relaxed) {
                let frame = format!("[{}]", json!({ "i": next }));
                if ws.send(tungstenite::Message::text(frame)).is_err() {
                    break;
                }
                sent.push_back(next);
                next += 1;
            }
            if sent.is_empty() {
                let _ = ws.close(None);
                return acked;
            }
            match ws.read() {
                Ok(tungstenite::Message::Text(t)) => {
                    let v: Value = serde_json::from_str(&t).expect("reply");
                    let i = sent.pop_front().expect("a reply per frame");
                    // a frame refused as the stream stops is not acknowledged: nothing is owed
                    match v["ok"].as_array() {
                        Some(ok) => acked.push((i, ok[0].as_u64().expect("offset"))),
                        None => break,
                    }
                }
                Ok(tungstenite::Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    acked
}

#[test]
fn a_migration_under_pipelined_publishing_loses_nothing_and_continues_at_the_seam() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let op = create(server.addr, "m", &decl(v1()));
    assert_eq!(finished(server.addr, &op)["state"], "succeeded");
    let first: Vec<u64> = publish(&server, "m", &rows(0, 200))
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(first, (1..=200).collect::<Vec<_>>());
    let id = get(server.addr, "/control/v1/streams/m").json()["stream_id"].clone();

    // a pipelined publisher runs through the migration: the stop closes it (1001), it
    // reconnects and goes on once the stream serves again, on the new log
    let stop = Arc::new(AtomicBool::new(false));
    let url = server.url("m?publish");
    let s2 = stop.clone();
    let publisher = std::thread::spawn(move || pipelined(url, 32, s2));
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    let op = migrate(server.addr, "m", &v2());
    let done = finished(server.addr, &op);
    let took = began.elapsed();
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["kind"], "migrate");
    let m = stream_metadata(&setup.data(), "m");
    let seam = m["live_log"]["start_offset"].as_u64().expect("the seam");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let acked = publisher.join().unwrap();
    let below = acked.iter().filter(|(_, o)| *o < seam).count();
    let above: Vec<(u64, u64)> = acked.iter().copied().filter(|(_, o)| *o >= seam).collect();
    assert!(
        below > 0 && !above.is_empty(),
        "rows on both sides of the seam: {below} below, {} above",
        above.len()
    );
    // acknowledged offsets: each once, in order, dense from 201 (no offset below the seam is
    // issued after it, none is reused)
    for (k, (i, offset)) in acked.iter().enumerate() {
        assert_eq!(*offset, 201 + k as u64, "acknowledged {i} at {offset}");
    }
    assert_eq!(above[0].1, seam, "the new log's first row is at the seam");
    eprintln!(
        "migration under pipelined publishing: {} rows acknowledged, {below} below the seam {seam} (in the old log's table), {} at or above it (in the new log); accepted to succeeded in {} ms",
        acked.len(),
        above.len(),
        took.as_millis()
    );

    let s = get(server.addr, "/control/v1/streams/m").json();
    assert_eq!(s["observed"], "serving", "{s}");
    assert_eq!(
        s["stream_id"], id,
        "the stream keeps its id across the seam"
    );
    assert!(
        s["declaration"]["schema"]["properties"]["note"].is_object(),
        "{s}"
    );
    assert_eq!(
        s["log"],
        json!({"name": "m-v2", "start_offset": seam, "sealed_logs": 1}),
        "{s}"
    );
    let end = s["end_offset"].as_u64().unwrap();
    assert_eq!(end, seam + above.len() as u64);
    // every row acknowledged at or above the seam is in the new log, as sent
    let mut ws = ws_connect(&server.url(&format!("m?offset={seam}")));
    let _ = recv_text(&mut ws);
    for (i, offset) in &above {
        let frame: Value = serde_json::from_str(&recv_text(&mut ws)).unwrap();
        // the new schema's canonical row: the added column null
        assert_eq!(
            (frame[0].as_u64(), &frame[2]),
            (Some(*offset), &json!({ "i": i, "note": null }))
        );
    }
    drop(ws);

    // the unchanged official client reads every acknowledged row back across the seam
    if let Some(py) = support::anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) {
        let report = catch_up_seam(&py, &server, "m", 201, end, None);
        let got: Vec<(u64, u64)> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[1].as_u64().unwrap(), r[0].as_u64().unwrap()))
            .collect();
        assert_eq!(got, acked, "the official client's catch-up from 201");
    }

    // the stream metadata: the old log sealed, the new one live from the seam
    let m = stream_metadata(&setup.data(), "m");
    assert_eq!(m["stream_id"], id);
    assert_eq!(m["live_log"]["name"], "m-v2", "{m}");
    assert_eq!(m["live_log"]["start_offset"], seam, "{m}");
    assert!(
        m["live_log"]["schema"]["properties"]["note"].is_object(),
        "{m}"
    );
    let sealed = m["sealed_logs"].as_array().expect("sealed_logs");
    assert_eq!(sealed.len(), 1, "{m}");
    assert_eq!(sealed[0]["name"], "m");
    assert_eq!(sealed[0]["start_offset"], 1);
    assert_eq!(sealed[0]["end_offset"], seam);
    assert!(sealed[0]["schema"]["properties"]["i"].is_object(), "{m}");
    assert!(sealed[0]["schema"]["properties"]["note"].is_null(), "{m}");
    assert!(sealed[0]["end_ts"].as_i64().unwrap() > 0, "{m}");
    for key in ["published", "system_schema", "sort_by", "start_ts"] {
        assert!(sealed[0].get(key).is_some(), "sealed log lacks {key}: {m}");
    }
    // the old table holds every row of the old log
    let logs: Value =
        serde_json::from_slice(&std::fs::read(setup.data().join("m/logs.json")).unwrap()).unwrap();
    assert_eq!(logs["sealed"][0]["record_count"], seam - 1, "{logs}");
    let old_table = setup
        .data()
        .join("m/published/m/metadata/version-hint.text");
    assert!(old_table.exists(), "the old log's table is published");
    assert_eq!(
        hot_segments(&setup.data().join("m/log")),
        Vec::<String>::new(),
        "the old log's hot segments are deleted once it is sealed and published"
    );

    // the new log: the new schema
    assert_eq!(
        publish(&server, "m", &[json!({"i": 1, "note": "after"})]),
        [Some(end)]
    );
    let mut ws = ws_connect(&server.url("m?publish"));
    let _ = recv_text(&mut ws);
    ws.send(tungstenite::Message::text(r#"[{"i":"not a number"}]"#))
        .unwrap();
    let reply = recv_text(&mut ws);
    assert!(
        reply.contains("error"),
        "the new schema refuses a bad row: {reply}"
    );
    drop(ws);

    // below the seam: 4416 evicted, the seam as earliest; at the seam: served
    let mut ws = ws_connect(&server.url("m?offset=1"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4416, "{reason}");
    let r: Value = serde_json::from_str(&reason).unwrap();
    assert_eq!(
        r,
        json!({"error": "not_replayable", "why": "evicted", "offset": 1, "earliest": seam})
    );
    let mut ws = ws_connect(&server.url(&format!("m?offset={end}")));
    let greeting: Value = serde_json::from_str(&recv_text(&mut ws)).unwrap();
    assert_eq!(greeting["stream_id"], id);
    let frame: Value = serde_json::from_str(&recv_text(&mut ws)).unwrap();
    assert_eq!(frame[0], end);
    assert_eq!(frame[2], json!({"i": 1, "note": "after"}));
    drop(ws);

    // a restart keeps the new log
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let s = get(server.addr, "/control/v1/streams/m").json();
    assert_eq!(
        (s["observed"].as_str(), s["end_offset"].as_u64()),
        (Some("serving"), Some(end + 1))
    );
    assert_eq!(publish(&server, "m", &[json!({"i": 2})]), [Some(end + 1)]);
}

/// Runs `tests/control/catch_up_seam.py ADDR STREAM FROM END [MANIFEST]`; its report.
fn catch_up_seam(
    py: &str,
    server: &Server,
    stream: &str,
    from: u64,
    end: u64,
    manifest: Option<&Path>,
) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/control/catch_up_seam.py");
    let mut cmd = std::process::Command::new(py);
    cmd.arg(script)
        .arg(server.addr.to_string())
        .arg(stream)
        .arg(from.to_string())
        .arg(end.to_string());
    if let Some(m) = manifest {
        cmd.arg(m);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "catch_up_seam.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[test]
fn the_official_client_catches_up_across_the_seam() {
    let Some(py) = support::anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let op = create(server.addr, "c", &decl(v1()));
    finished(server.addr, &op);
    assert_eq!(publish(&server, "c", &rows(1, 301)).len(), 300);
    let op = migrate(server.addr, "c", &v2());
    assert_eq!(finished(server.addr, &op)["state"], "succeeded");
    let seam = 301;
    let after: Vec<Value> = (301..351)
        .map(|i| json!({"i": i, "note": format!("n{i}")}))
        .collect();
    assert_eq!(publish(&server, "c", &after)[0], Some(seam));
    // the stream manifest: one row per sealed log, named by the version beside it
    let m = stream_metadata(&setup.data(), "c");
    let manifest = m["manifest"].as_str().expect("a manifest").to_string();
    assert!(manifest.ends_with(".manifest.parquet"), "{m}");
    let manifest = setup.data().join("c/c.metadata").join(manifest);
    assert!(
        setup.data().join("c/c.manifest.parquet").exists(),
        "the plain copy"
    );
    let report = catch_up_seam(&py, &server, "c", 1, 351, Some(&manifest));
    assert_eq!(
        report["plain"],
        json!({"why": "evicted", "earliest": seam}),
        "{report}"
    );
    assert_eq!(
        report["manifest"],
        json!([{"log": "c", "start_offset": 1, "end_offset": seam, "record_count": 300}]),
        "{report}"
    );
    let got = report["rows"].as_array().unwrap();
    assert_eq!(got.len(), 350, "no gap, no duplicate: {report}");
    for (k, r) in got.iter().enumerate() {
        let offset = k as u64 + 1;
        assert_eq!(r[0], offset, "{r}");
        assert_eq!(r[1], offset, "{r}");
        let note = if offset < seam {
            Value::Null
        } else {
            json!(format!("n{offset}"))
        };
        assert_eq!(r[2], note, "{r}");
    }
}

/// Kill -9 at `point` of a migration (or, for `None`, between accepting it and carrying it
/// out); the restart finishes it exactly once, and a second restart finds nothing to do.
fn killed_mid_migration(point: Option<&str>) {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let op = create(server.addr, "k", &decl(v1()));
    finished(server.addr, &op);
    assert_eq!(publish(&server, "k", &rows(1, 101)).len(), 100);
    let id = get(server.addr, "/control/v1/streams/k").json()["stream_id"].clone();
    assert_eq!(server.stop(), Some(0));

    let env: Vec<(&str, &str)> = match point {
        Some(p) => vec![("CORECAST_FAULT_MIGRATE", p)],
        None => vec![("CORECAST_CONTROL_TEST_PAUSE_MS", "60000")],
    };
    let mut server = Server::start_env(Some(&cfg), &setup.data(), &env);
    let op = migrate(server.addr, "k", &v2());
    match point {
        // the fault aborts the process
        Some(p) => assert!(
            server.exits_within(Duration::from_secs(30)),
            "no abort at {p}"
        ),
        None => server.kill9(),
    }

    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let v = finished(server.addr, &op);
    assert_eq!(v["state"], "succeeded", "{point:?}: {v}");
    let s = get(server.addr, "/control/v1/streams/k").json();
    assert_eq!(s["observed"], "serving", "{s}");
    assert_eq!(s["stream_id"], id);
    assert_eq!(s["end_offset"], 101, "{s}");
    assert_eq!(s["pending_operation"], Value::Null);
    assert_eq!(
        server
            .stderr()
            .matches("carrying on with a migration")
            .count(),
        1,
        "{}",
        server.stderr()
    );
    let m = stream_metadata(&setup.data(), "k");
    assert_eq!(m["sealed_logs"].as_array().map(Vec::len), Some(1), "{m}");
    assert_eq!(m["sealed_logs"][0]["end_offset"], 101);
    assert_eq!(m["live_log"]["name"], "k-v2");
    assert_eq!(
        publish(&server, "k", &[json!({"i": 7, "note": "x"})]),
        [Some(101)]
    );
    assert_eq!(server.stop(), Some(0));

    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    assert!(!server.stderr().contains("carrying on with a migration"));
    let s = get(server.addr, "/control/v1/streams/k").json();
    assert_eq!(s["end_offset"], 102, "{s}");
    let m = stream_metadata(&setup.data(), "k");
    assert_eq!(
        m["sealed_logs"].as_array().map(Vec::len),
        Some(1),
        "migrated once: {m}"
    );
    assert!(!setup.data().join("k/logs/k-v3").exists());
    assert_eq!(
        hot_segments(&setup.data().join("k/log")),
        Vec::<String>::new(),
        "after a kill at {point:?}: the old log's hot segments are deleted"
    );
}

/// The segment files (`*.seg`, the spare included) in a log directory.
fn hot_segments(log_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log_dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".seg"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn kill9_between_accepting_and_carrying_out_a_migration_finishes_it_once() {
    killed_mid_migration(None);
}

#[test]
fn kill9_at_each_step_of_a_migration_finishes_it_once() {
    for point in ["sealed", "published", "successor", "committed"] {
        killed_mid_migration(Some(point));
    }
}

#[test]
fn the_migration_resource_keeps_the_mutation_rules() {
    let setup = Setup::new();
    let server = Server::start_env(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    finished(a, &create(a, "r", &decl(v1())));
    let path = "/control/v1/streams/r/migrations";
    let body = json!({ "schema": v2() }).to_string();
    let tag = etag(a, "r");
    let json_ct = ("Content-Type", "application/json");
    // the head's rules
    let r = http(a, "GET", path, &[], "");
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    assert_eq!(r.header("allow"), Some("POST"));
    let r = http(
        a,
        "POST",
        path,
        &[("Idempotency-Key", "k1"), ("If-Match", &tag)],
        &body,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (415, "unsupported_media_type")
    );
    let r = http(a, "POST", path, &[json_ct, ("If-Match", &tag)], &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (428, "idempotency_key_required")
    );
    let r = http(
        a,
        "POST",
        path,
        &[json_ct, ("Idempotency-Key", "a b")],
        &body,
    );
    assert_eq!((r.status, r.code().as_str()), (400, "bad_request"));
    // preconditions
    let r = http(
        a,
        "POST",
        path,
        &[json_ct, ("Idempotency-Key", "k2")],
        &body,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (428, "precondition_required")
    );
    let r = migrate_with(a, "r", "k3", "\"99\"", &body);
    assert_eq!((r.status, r.code().as_str()), (412, "precondition_failed"));
    let r = migrate_with(a, "r", "k4", "W/\"1\"", &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "precondition_malformed")
    );
    let r = migrate_with(a, "nope", "k5", "\"1\"", &body);
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    let r = migrate_with(a, "static1", "k6", "\"0\"", &body);
    assert_eq!((r.status, r.code().as_str()), (409, "static_stream"));
    // the body
    let r = migrate_with(a, "r", "k7", &tag, "{\"schema\": {}, \"color\": 1}");
    assert_eq!((r.status, r.code().as_str()), (400, "bad_request"));
    assert!(r.body.contains("color"), "{}", r.body);
    let r = migrate_with(a, "r", "k8", &tag, "[1]");
    assert_eq!((r.status, r.code().as_str()), (400, "bad_request"));
    let bad = json!({"schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "patternProperties": {"x": {}}}});
    let r = migrate_with(a, "r", "k9", &tag, &bad.to_string());
    assert_eq!(
        (r.status, r.code().as_str()),
        (422, "unsupported_schema"),
        "{}",
        r.body
    );
    let r = migrate_with(
        a,
        "r",
        "k10",
        &tag,
        &json!({"schema": v2(), "stream_id": "00000000-0000-0000-0000-000000000000"}).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "identity_mismatch"));
    let r = migrate_with(
        a,
        "r",
        "k11",
        &tag,
        &json!({"schema": v2(), "sort_by": ["i"]}).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (422, "unsupported_schema"));
    // the same schema: a satisfied no-op
    let r = migrate_with(a, "r", "k12", &tag, &json!({"schema": v1()}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["satisfied"], true);
    // accepted; an identical retry answers the same; the key with other intent is refused
    let id = get(a, "/control/v1/streams/r").json()["stream_id"].clone();
    let full = json!({"schema": v2(), "stream_id": id, "sort_by": []}).to_string();
    let first = migrate_with(a, "r", "k13", &tag, &full);
    assert_eq!(first.status, 202, "{}", first.body);
    let again = migrate_with(a, "r", "k13", &tag, &full);
    assert_eq!(
        (again.status, again.body.as_str()),
        (202, first.body.as_str())
    );
    let r = migrate_with(a, "r", "k13", &tag, &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "idempotency_key_reused")
    );
    let op = first.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(a, &op)["state"], "succeeded");
    // a stream that publishes nothing has nowhere to keep its old log
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/off",
        &[
            json_ct,
            ("Idempotency-Key", "c-off"),
            ("If-None-Match", "*"),
        ],
        &json!({"schema": v1(), "published": "off"}).to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    finished(a, r.json()["operation_id"].as_str().unwrap());
    let r = migrate_with(a, "off", "k14", &etag(a, "off"), &body);
    assert_eq!((r.status, r.code().as_str()), (409, "not_migratable"));
    // a schema change by PUT points at the migration
    let tag = etag(a, "r");
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/r",
        &[json_ct, ("Idempotency-Key", "p1"), ("If-Match", &tag)],
        &decl(v1()).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "migration_required"));
    assert!(r.body.contains("/migrations"), "{}", r.body);
    // retired: final, never migrated, never revived
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/r/desired",
        &[json_ct, ("Idempotency-Key", "ret"), ("If-Match", &tag)],
        "{\"state\":\"retired\"}",
    );
    assert_eq!(r.status, 202, "{}", r.body);
    finished(a, r.json()["operation_id"].as_str().unwrap());
    let tag = etag(a, "r");
    let r = migrate_with(a, "r", "k15", &tag, &json!({"schema": v1()}).to_string());
    assert_eq!((r.status, r.code().as_str()), (409, "stream_retired"));
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/r/desired",
        &[json_ct, ("Idempotency-Key", "revive"), ("If-Match", &tag)],
        "{\"state\":\"serving\"}",
    );
    assert_eq!((r.status, r.code().as_str()), (409, "stream_retired"));
    assert!(r.body.contains("revive"), "{}", r.body);
}

#[test]
fn a_migration_pending_holds_other_changes() {
    let setup = Setup::new();
    let server = Server::start_env(
        Some(&setup.config(CONFIG)),
        &setup.data(),
        &[("CORECAST_CONTROL_TEST_PAUSE_MS", "3000")],
    );
    let a = server.addr;
    let op = create(a, "p", &decl(v1()));
    finished(a, &op);
    let op = migrate(a, "p", &v2());
    let tag = etag(a, "p");
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/p/desired",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "stop-p"),
            ("If-Match", &tag),
        ],
        "{\"state\":\"stopped\"}",
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "transition_pending"),
        "{}",
        r.body
    );
    assert!(r.body.contains(&op), "{}", r.body);
    assert_eq!(
        finished(a, &op)["state"],
        "succeeded",
        "{}",
        server.stderr()
    );
    // a stopped stream migrates and stays stopped
    let tag = etag(a, "p");
    let r = http(
        a,
        "PUT",
        "/control/v1/streams/p/desired",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "stop-p2"),
            ("If-Match", &tag),
        ],
        "{\"state\":\"stopped\"}",
    );
    assert_eq!(r.status, 202, "{}", r.body);
    finished(a, r.json()["operation_id"].as_str().unwrap());
    let v3 = json!({"type": "object", "properties": {"i": {"type": "integer"}, "note": {"type": ["string", "null"]}, "n": {"type": ["number", "null"]}}, "required": ["i"]});
    let op = migrate(a, "p", &v3);
    assert_eq!(
        finished(a, &op)["state"],
        "succeeded",
        "{}",
        server.stderr()
    );
    let s = get(a, "/control/v1/streams/p").json();
    assert_eq!(s["observed"], "stopped", "{s}");
    let mut ws = ws_connect(&server.url("p?publish"));
    assert_eq!(recv_close(&mut ws).0, 1001);
}

#[test]
fn corecast_ctl_migrates_a_stream() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    finished(server.addr, &create(server.addr, "cli", &decl(v1())));
    assert_eq!(publish(&server, "cli", &rows(1, 6)).len(), 5);
    let url = format!("http://{}", server.addr);
    let file = setup.tmp.path().join("v2.schema.json");
    std::fs::write(&file, v2().to_string()).unwrap();
    let file = file.display().to_string();
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", "--server", url.as_str()];
        all.extend_from_slice(args);
        support::corecast_run(&all, None, Duration::from_secs(60))
    };
    let out = ctl(&["migrate", "cli", "--schema", &file]);
    assert_eq!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
    assert!(out.stdout.contains(": succeeded"), "{}", out.stdout);
    let s = get(server.addr, "/control/v1/streams/cli").json();
    assert!(
        s["declaration"]["schema"]["properties"]["note"].is_object(),
        "{s}"
    );
    assert_eq!(
        publish(&server, "cli", &[json!({"i": 6, "note": "v2"})]),
        [Some(6)]
    );
    // the same schema again: nothing to do
    let out = ctl(&["migrate", "cli", "--schema", &file]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("already so"), "{}", out.stdout);
    // a file that is not JSON: refused before any request, naming it
    std::fs::write(setup.tmp.path().join("bad.json"), "{not json").unwrap();
    let bad = setup.tmp.path().join("bad.json").display().to_string();
    let out = ctl(&["migrate", "cli", "--schema", &bad]);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("bad.json") && out.stderr.contains("not JSON"),
        "{}",
        out.stderr
    );
}

#[test]
fn exactly_once_marks_carry_across_the_seam() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let d = json!({ "schema": v1(), "exactly_once": true });
    finished(server.addr, &create(server.addr, "eo", &d));
    let call = |ws: &mut support::Ws, frame: String| {
        ws.send(tungstenite::Message::text(frame)).unwrap();
        recv_text(ws)
    };
    let mut p = ws_connect(&server.url("eo?publish&publisher=p1"));
    let _ = recv_text(&mut p);
    for seq in 1..=5u64 {
        assert_eq!(
            call(&mut p, format!("[{seq},{}]", json!({ "i": seq }))),
            format!("{{\"ok\":[{seq}]}}")
        );
    }
    let op = migrate(server.addr, "eo", &v2());
    assert_eq!(finished(server.addr, &op)["state"], "succeeded");
    drop(p);
    // the mark is the same on the new log: a resend is a duplicate, the next seq lands at the seam
    let mut p = ws_connect(&server.url("eo?publish&publisher=p1"));
    let g = recv_text(&mut p);
    assert!(
        g.ends_with(r#""publisher":{"id":"p1","last_seq":5,"last_offset":5}}"#),
        "{g}"
    );
    // (its original offset is not known to the new log, as after a restart whose records were
    // evicted: the dedupe window starts empty; the mark alone judges it)
    assert_eq!(
        call(&mut p, format!("[5,{}]", json!({ "i": 5 }))),
        r#"{"ok":[null],"dup":1}"#
    );
    assert_eq!(
        call(&mut p, format!("[6,{}]", json!({ "i": 6 }))),
        r#"{"ok":[6]}"#
    );
}

#[test]
fn a_failed_migration_leaves_the_stream_stopped_and_the_same_request_finishes_it() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    finished(a, &create(a, "f", &decl(v1())));
    assert_eq!(publish(&server, "f", &rows(1, 51)).len(), 50);
    // the new log's directory cannot be made: a file holds its parent's name
    std::fs::write(setup.data().join("f/logs"), b"in the way").unwrap();
    let body = json!({ "schema": v2() }).to_string();
    let r = migrate_with(a, "f", "f-1", &etag(a, "f"), &body);
    assert_eq!(r.status, 202, "{}", r.body);
    let v = finished(a, r.json()["operation_id"].as_str().unwrap());
    assert_eq!(v["state"], "failed", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("broker's log"), "{message}");
    assert!(
        !message.contains(&setup.data().display().to_string()),
        "{message}"
    );
    let s = get(a, "/control/v1/streams/f").json();
    assert_eq!(
        (s["desired"].as_str(), s["observed"].as_str()),
        (Some("serving"), Some("stopped")),
        "{s}"
    );
    let mut ws = ws_connect(&server.url("f?publish"));
    assert_eq!(recv_close(&mut ws).0, 1001);
    // cleared, the same migration (a new key) runs again and finishes at the same seam
    std::fs::remove_file(setup.data().join("f/logs")).unwrap();
    let r = migrate_with(a, "f", "f-2", &etag(a, "f"), &body);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        finished(a, r.json()["operation_id"].as_str().unwrap())["state"],
        "succeeded"
    );
    let s = get(a, "/control/v1/streams/f").json();
    assert_eq!(
        (s["observed"].as_str(), s["end_offset"].as_u64()),
        (Some("serving"), Some(51)),
        "{s}"
    );
    assert_eq!(
        publish(&server, "f", &[json!({"i": 51, "note": "v2"})]),
        [Some(51)]
    );
    let m = stream_metadata(&setup.data(), "f");
    assert_eq!(m["sealed_logs"].as_array().map(Vec::len), Some(1), "{m}");
}

#[test]
fn a_stream_without_a_log_takes_its_new_schema_at_once() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    finished(
        a,
        &create(a, "live", &json!({"schema": v1(), "durable": false})),
    );
    let mut sub = ws_connect(&server.url("live"));
    let _ = recv_text(&mut sub);
    let op = migrate(a, "live", &v2());
    assert_eq!(finished(a, &op)["state"], "succeeded");
    // its connections closed (1001), the stream serves with the new schema
    assert_eq!(recv_close(&mut sub).0, 1001);
    let mut ws = ws_connect(&server.url("live?publish"));
    let g: Value = serde_json::from_str(&recv_text(&mut ws)).unwrap();
    assert!(g["schema"]["properties"]["note"].is_object(), "{g}");
    drop(ws);
    assert!(!setup.data().join("live/logs.json").exists());
}

/// Publishes `rows` in one frame through our own client; their offsets. (While one of our
/// client's subscriptions is open on this thread, a blocking read of another library's socket
/// may be interrupted, EINTR, by the io_uring completions of ours.)
fn publish_ours(server: &Server, stream: &str, rows: &[Value]) -> Vec<Option<u64>> {
    let mut p =
        blocking::publish(&server.url(stream), PublishOptions::default()).expect("publisher");
    let texts: Vec<String> = rows.iter().map(Value::to_string).collect();
    let offsets = p.send_batch(&texts).expect("acknowledged");
    p.close().expect("publisher close");
    offsets
}

/// Every frame a live subscriber of `stream` gets for `rows` (at offsets `first..`).
fn published_frames(server: &Server, stream: &str, rows: &[Value], first: u64) -> Vec<String> {
    let texts: Vec<String> = rows.iter().map(Value::to_string).collect();
    support::live_frames(&server.url(stream), &texts, first)
}

/// Our client's catch-up of `stream` from `offset` with `where_json`: it must deliver exactly
/// `want` (offset, frame), then `live` rows published once it has read them (at offsets
/// `live_first..`) on the same subscription. Returns how many rows came from the tables, and
/// the live rows' frames.
fn our_catch_up(
    server: &Server,
    stream: &str,
    offset: Offset,
    where_json: Option<&str>,
    want: &[(u64, String)],
    live: &[Value],
    live_first: u64,
) -> (u64, Vec<String>) {
    let mut s = blocking::connect(
        &server.url(stream),
        SubscribeOptions {
            offset: Some(offset),
            where_json: where_json.map(str::to_string),
            catch_up: true,
            ..SubscribeOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("catch-up from {offset:?} where {where_json:?}: {e}"));
    assert!(s.is_catching_up(), "{offset:?}: refused, so catching up");
    let mut from_tables = 0;
    for (at, frame) in want {
        let row = s.next().expect("row").expect("a row");
        assert_eq!(row.offset, Some(*at), "{offset:?} {where_json:?}");
        assert_eq!(row.frame(), frame, "{offset:?} {where_json:?}: offset {at}");
        from_tables += u64::from(s.is_catching_up());
    }
    let mut live_frames = Vec::new();
    if !live.is_empty() {
        let offsets: Vec<Option<u64>> = (live_first..live_first + live.len() as u64)
            .map(Some)
            .collect();
        assert_eq!(publish_ours(server, stream, live), offsets);
        for (k, v) in live.iter().enumerate() {
            let row = s.next().expect("row").expect("a live row");
            assert_eq!(row.offset, Some(live_first + k as u64));
            let got: Value = serde_json::from_str(row.row()).unwrap();
            assert_eq!(got["i"], v["i"]);
            live_frames.push(row.frame().to_string());
        }
        assert!(!s.is_catching_up(), "spliced onto the socket");
    }
    s.close().expect("close");
    (from_tables, live_frames)
}

#[test]
fn our_catch_up_reads_across_the_seam() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    // small seals, a small replay window: what the live log's table holds is soon too old for
    // the socket, so a catch-up from the earliest is refused too and reads both logs' tables
    let d = json!({ "schema": v1(), "seal_target_bytes": 4096, "max_replay": 20 });
    finished(a, &create(a, "ours", &d));
    let mut frames = published_frames(&server, "ours", &rows(1, 301), 1);
    let op = migrate(a, "ours", &v2());
    assert_eq!(finished(a, &op)["state"], "succeeded");
    let seam = 301;
    let s = get(a, "/control/v1/streams/ours").json();
    assert_eq!(s["declaration"]["max_replay"], 20, "{s}");
    // the new log, with the new column: every other row leaves it null
    let after: Vec<Value> = (301..701)
        .map(|i| match i % 2 {
            0 => json!({ "i": i, "note": format!("n{i}") }),
            _ => json!({ "i": i }),
        })
        .collect();
    frames.extend(published_frames(&server, "ours", &after, seam));
    let end = 701u64;
    assert!(frames[0].ends_with(r#",{"i":1}]"#), "{}", frames[0]);
    assert!(
        frames[300].ends_with(r#",{"i":301,"note":null}]"#),
        "{}",
        frames[300]
    );
    assert!(
        frames[301].ends_with(r#",{"i":302,"note":"n302"}]"#),
        "{}",
        frames[301]
    );

    // let the new log publish: its table past the seam
    let probe = blocking::connect(&server.url("ours"), SubscribeOptions::default()).unwrap();
    let hint = probe
        .greeting()
        .metadata_hint
        .clone()
        .expect("metadata_hint");
    let sid = probe.greeting().stream_id.clone().expect("stream_id");
    probe.close().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let table_end = loop {
        let t = PublishedTable::open(&hint, Some(&sid), &S3Options::default());
        if let Ok(t) = &t {
            if t.end() > seam + 100 {
                assert_eq!(t.logs().len(), 2);
                assert!(t.seam_defects().is_empty(), "{:?}", t.seam_defects());
                assert_eq!(t.extent().start, 1);
                break t.end();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the new log published nothing past the seam: {:?}",
            t.map(|t| t.extent())
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // rows the tables do not hold yet (unless they are sealed and published at once), for the
    // socket's share
    let tail: Vec<Value> = (end..end + 20).map(|i| json!({ "i": i })).collect();
    frames.extend(published_frames(&server, "ours", &tail, end));

    // without catch-up: below the seam evicted; the earliest (the seam) too old once the broker
    // has seen its new table hold rows past it (until then a resume at the seam is at the end of
    // a table a catch-up may have read, and is served)
    for offset in [Offset::At(1), Offset::Earliest] {
        let e = loop {
            match blocking::connect(
                &server.url("ours"),
                SubscribeOptions {
                    offset: Some(offset),
                    ..SubscribeOptions::default()
                },
            ) {
                Err(e) => break e,
                Ok(s) => {
                    s.close().unwrap();
                    assert!(Instant::now() < deadline, "{offset:?} is still served");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        assert!(e.is_catch_up_recoverable(), "{offset:?}: {e}");
    }

    // from 1 and from the earliest: every acknowledged row once, each frame byte for byte the
    // one its live subscriber got (a row of the old log has the old log's columns), then live
    // rows on the same subscription
    let numbered = |frames: &[String]| -> Vec<(u64, String)> {
        frames
            .iter()
            .enumerate()
            .map(|(k, f)| (k as u64 + 1, f.clone()))
            .collect()
    };
    for offset in [Offset::At(1), Offset::Earliest] {
        let next = frames.len() as u64 + 1;
        let live: Vec<Value> = (next..next + 3).map(|i| json!({ "i": i })).collect();
        let want = numbered(&frames);
        let (n, live_frames) = our_catch_up(&server, "ours", offset, None, &want, &live, next);
        assert!(n >= table_end - 1, "{offset:?}: {n} rows from the tables");
        eprintln!(
            "our catch-up from {offset:?} across the seam at {seam}: {} rows once each, {n} from the tables (the old log's 300, the new log's {}), {} from the socket, then {} live",
            want.len(),
            n - 300,
            want.len() as u64 - n,
            live_frames.len()
        );
        frames.extend(live_frames);
    }
    let all = numbered(&frames);
    // a filter on the column the migration added: the old log's rows read it as null
    let nulls: Vec<(u64, String)> = all
        .iter()
        .filter(|(o, f)| *o < seam || f.ends_with(r#","note":null}]"#) || *o == 302)
        .cloned()
        .collect();
    assert_eq!(
        nulls.len(),
        300 + 200 + 20 + 6 + 1,
        "the old rows, the odd new rows, the tail and the live rows, 302"
    );
    let (n, _) = our_catch_up(
        &server,
        "ours",
        Offset::At(1),
        Some(r#"{"note":[null,"n302"]}"#),
        &nulls,
        &[],
        0,
    );
    eprintln!(
        "where note is null or n302, from 1: {} rows, {n} from the tables",
        nulls.len()
    );
    // ... and a value: no row of the old log has it
    let one: Vec<(u64, String)> = all.iter().filter(|(o, _)| *o == 302).cloned().collect();
    our_catch_up(
        &server,
        "ours",
        Offset::Earliest,
        Some(r#"{"note":"n302"}"#),
        &one,
        &[],
        0,
    );

    // corecast sub --catch-up: the same frames
    let url = server.url("ours");
    for (from, filter, want) in [
        ("1", None, &all),
        ("earliest", Some(r#"{"note":[null,"n302"]}"#), &nulls),
    ] {
        let count = want.len().to_string();
        let mut args = vec![
            "sub",
            url.as_str(),
            "--offset",
            from,
            "--catch-up",
            "--count",
            count.as_str(),
        ];
        if let Some(w) = filter {
            args.extend(["--where", w]);
        }
        let out = support::corecast_run(&args, None, Duration::from_secs(60));
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        let lines = out.lines();
        assert_eq!(lines.len(), want.len(), "{args:?}");
        for (line, (o, frame)) in lines.iter().zip(want.iter()) {
            assert_eq!(*line, frame.as_str(), "{args:?}: offset {o}");
        }
        eprintln!(
            "corecast sub --offset {from} --catch-up (where {filter:?}): {} lines, each the live frame",
            lines.len()
        );
    }
}

/// Retention on a migrated stream's live log: once it drops the live log's first rows, the
/// sealed log (all older rows) is no longer listed in the stream metadata, so a catch-up from
/// below the live table's floor is refused, naming the floor — listed, the seam would hold a
/// hole that the official client reads across without a word, skipping the dropped rows.
fn logs_json(home: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(home.join("logs.json")).expect("logs.json"))
        .expect("logs.json is JSON")
}

fn parquet_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
            .count()
    })
}

#[test]
fn retention_past_the_seam_lists_no_sealed_log_then_deletes_its_files() {
    let setup = Setup::new();
    let mut server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    let d = json!({ "schema": v1(), "seal_target_bytes": 4096, "max_replay": 20, "retention": "2s", "published_grace_s": 1 });
    finished(a, &create(a, "r", &d));
    assert_eq!(publish(&server, "r", &rows(1, 301)).len(), 300);
    let op = migrate(a, "r", &v2());
    assert_eq!(finished(a, &op)["state"], "succeeded");
    let seam = 301;
    assert_eq!(publish(&server, "r", &rows(301, 701))[0], Some(seam));
    // while the live log's table starts at the seam, the sealed log is listed
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = stream_metadata(&setup.data(), "r");
        if m["live_log"]["start_offset"] == seam {
            assert_eq!(m["sealed_logs"].as_array().map(Vec::len), Some(1), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "no live table at the seam: {m}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // the sealed log's files while it is listed: its table and its sealed segments
    let home = setup.data().join("r");
    let old_table = home.join("published/r");
    assert!(
        parquet_files(&old_table.join("data")) > 0,
        "the old log's table"
    );
    assert!(
        parquet_files(&home.join("segments")) > 0,
        "the old log's segments"
    );
    assert_eq!(logs_json(&home)["sealed"].as_array().map(Vec::len), Some(1));
    assert!(
        home.join("r.manifest.parquet").is_file(),
        "the plain stream manifest"
    );
    // rows 2 s later: retention drops the live log's older files
    std::thread::sleep(Duration::from_millis(2500));
    let mut next = 701;
    let floor = loop {
        publish(&server, "r", &rows(next, next + 50));
        next += 50;
        let m = stream_metadata(&setup.data(), "r");
        let start = m["live_log"]["start_offset"].as_u64().unwrap();
        if start > seam {
            assert_eq!(m["sealed_logs"], json!([]), "{m}");
            assert_eq!(m["manifest"], Value::Null, "{m}");
            // nor does the plain manifest still name the sealed log
            assert!(!home.join("r.manifest.parquet").exists());
            break start;
        }
        assert!(Instant::now() < deadline, "retention dropped nothing: {m}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // our client: from 1 refused, naming where the published history starts now
    let e = blocking::connect(
        &server.url("r"),
        SubscribeOptions {
            offset: Some(Offset::At(1)),
            catch_up: true,
            ..SubscribeOptions::default()
        },
    )
    .err()
    .expect("a catch-up from 1 across dropped rows is refused");
    let text = e.to_string();
    assert!(
        text.contains("asked to catch up from offset 1") && text.contains("start at"),
        "{text}"
    );
    assert!(floor > seam, "{floor}");
    // unlisted for the grace period (1 s), the sealed log's files go: its table and its
    // sealed segments; logs.json forgets it; the live log's files stay
    let live = home.join("logs/r-v2");
    loop {
        let logs = logs_json(&home);
        if !old_table.exists() && !home.join("segments").exists() {
            assert_eq!(logs["sealed"], json!([]), "{logs}");
            assert!(logs.get("dropping").is_none(), "{logs}");
            assert_eq!(logs["live"]["name"], "r-v2", "{logs}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sealed log's files are still there: {logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(parquet_files(&live.join("published/r-v2/data")) > 0);
    assert!(parquet_files(&live.join("segments")) > 0);
    // the first log's emptied directories went with it
    assert!(!home.join("published").exists() && !home.join("log").exists());
    // the stream metadata and the control plane's view are those of a stream whose history
    // starts at the floor; the broker restarts on what is left and carries on
    // (retention keeps dropping rows older than 2 s, so the subscriber asks for the last ten)
    let check = |server: &Server, first: u64, next: u64| {
        let m = stream_metadata(&setup.data(), "r");
        assert_eq!(m["sealed_logs"], json!([]), "{m}");
        assert!(m["live_log"]["start_offset"].as_u64() >= Some(first), "{m}");
        let mut s = blocking::connect(
            &server.url("r"),
            SubscribeOptions {
                offset: Some(Offset::At(next - 10)),
                catch_up: true,
                ..SubscribeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("from {}: {e}", next - 10));
        for at in next - 10..next {
            let row = s.next().expect("row").expect("a row");
            assert_eq!(row.offset, Some(at));
        }
        s.close().expect("close");
    };
    check(&server, floor, next);
    assert_eq!(server.stop(), Some(0));
    server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    assert_eq!(publish(&server, "r", &rows(next, next + 1))[0], Some(next));
    check(&server, floor, next + 1);
    assert!(!old_table.exists() && !home.join("segments").exists());
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_log_that_never_held_a_row_leaves_no_directory_behind() {
    let setup = Setup::new();
    let server = Server::start(Some(&setup.config(CONFIG)), &setup.data(), &[]);
    let a = server.addr;
    let d = json!({ "schema": v1(), "seal_target_bytes": 4096, "max_replay": 20 });
    finished(a, &create(a, "e", &d));
    assert_eq!(publish(&server, "e", &rows(1, 11)).len(), 10);
    assert_eq!(finished(a, &migrate(a, "e", &v2()))["state"], "succeeded");
    let home = setup.data().join("e");
    assert!(home.join("logs/e-v2").is_dir());
    // a second migration with nothing published between: e-v2 never held a row
    let v3 = json!({"type": "object", "properties": {"i": {"type": "integer"}, "note": {"type": ["string", "null"]}, "more": {"type": ["integer", "null"]}}, "required": ["i"]});
    assert_eq!(finished(a, &migrate(a, "e", &v3))["state"], "succeeded");
    let logs = logs_json(&home);
    assert_eq!(logs["live"]["name"], "e-v3", "{logs}");
    assert_eq!(logs["sealed"].as_array().map(Vec::len), Some(1), "{logs}");
    assert!(
        !home.join("logs/e-v2").exists(),
        "the empty log's directory is gone"
    );
    assert!(home.join("logs/e-v3").is_dir());
    // the offsets go on from the seam
    assert_eq!(publish(&server, "e", &rows(11, 12))[0], Some(11));
    // a where= value the live schema's column cannot hold is not refused on a migrated stream
    // (a catch-up reads older logs whose columns may differ), where it is on another
    let mut ws = ws_connect(&server.url("e?where=%7B%22i%22%3A%22x%22%7D"));
    let greeting: Value = serde_json::from_str(&recv_text(&mut ws)).expect("greeting");
    assert_eq!(greeting["where"], json!({"i": "x"}), "{greeting}");
    let _ = ws.close(None);
    finished(a, &create(a, "p", &d));
    let mut ws = ws_connect(&server.url("p?where=%7B%22i%22%3A%22x%22%7D"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4400, "{reason}");
    assert!(reason.contains("never matches"), "{reason}");
    assert_eq!(server.stop(), Some(0));
}
