//! The control plane `/control/v1` (issue 15), against the real binary on loopback: every status
//! code and precondition rule of the contract, an identical retry after a lost reply, streams
//! created over HTTP served at once (WebSocket publish and subscribe) and after a restart,
//! stopped (1001), started again and retired (4410) while a subscriber of a neighbour stream
//! loses nothing, an operation finished exactly once after a kill -9 between accepting it and
//! carrying it out, and the grants.
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{corecast_run, publish_on, recv_close, recv_text, ws_connect, Server, Setup};

/// A static (TOML) stream beside `[control] enabled = true`.
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

    /// The error body's `code`, after checking the error body's shape.
    fn code(&self) -> String {
        let v = self.json();
        let e = &v["error"];
        assert!(e["message"].is_string(), "{}", self.body);
        assert!(e["retryable"].is_boolean(), "{}", self.body);
        assert!(e.get("operation_id").is_some(), "{}", self.body);
        e["code"].as_str().unwrap_or_default().to_string()
    }
}

/// One request on its own connection; the answer read to EOF.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if (method == "PUT" || method == "POST")
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
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

/// A `PUT` with a JSON content type, `key` as its Idempotency-Key and `pre` (a precondition
/// header) when given.
fn put(addr: SocketAddr, path: &str, key: &str, pre: Option<(&str, &str)>, body: &str) -> Resp {
    let mut h = vec![
        ("Content-Type", "application/json"),
        ("Idempotency-Key", key),
    ];
    if let Some(p) = pre {
        h.push(p);
    }
    http(addr, "PUT", path, &h, body)
}

fn create(addr: SocketAddr, name: &str, decl: &Value) -> Resp {
    put(
        addr,
        &format!("/control/v1/streams/{name}"),
        &format!("create-{name}"),
        Some(("If-None-Match", "*")),
        &decl.to_string(),
    )
}

/// Creates stream `name` with `decl` and waits for the creation to succeed.
fn create_and_wait(addr: SocketAddr, name: &str, decl: &Value) {
    let r = create(addr, name, decl);
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(addr, &op)["state"], "succeeded");
}

/// Sets stream `name`'s desired state with the current ETag; the 202's operation id.
fn desire(addr: SocketAddr, name: &str, state: &str) -> String {
    let etag = get(addr, &format!("/control/v1/streams/{name}"))
        .header("etag")
        .expect("etag")
        .to_string();
    let r = put(
        addr,
        &format!("/control/v1/streams/{name}/desired"),
        &format!("{name}-{state}-{etag}").replace('"', ""),
        Some(("If-Match", &etag)),
        &json!({ "state": state }).to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    r.json()["operation_id"].as_str().unwrap().to_string()
}

/// Waits for operation `id` to finish; its final JSON.
fn finished(addr: SocketAddr, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
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

fn schemaless() -> Value {
    json!({ "schema": null })
}

fn start(setup: &Setup, config: &str) -> Server {
    let cfg = setup.config(config);
    Server::start(Some(&cfg), &setup.data(), &[])
}

/// Publishes `rows` on a new publisher connection; their offsets.
fn publish(server: &Server, stream: &str, rows: &[String]) -> Vec<Option<u64>> {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    let offsets = publish_on(&mut ws, rows);
    let _ = ws.close(None);
    offsets
}

fn row(i: u64) -> String {
    json!({ "i": i }).to_string()
}

/// The next `n` data frames' offsets and `i` fields.
fn read_rows(ws: &mut support::Ws, n: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while out.len() < n {
        let text = recv_text(ws);
        let v: Value = serde_json::from_str(&text).unwrap();
        let offset = v[0].as_u64().expect("an offset");
        out.push((offset, v[2]["i"].as_u64().expect("i")));
    }
    out
}

#[test]
fn the_control_api_is_refused_without_auth_unless_switched_on() {
    let setup = Setup::new();
    let server = start(&setup, "[[stream]]\nname = \"static1\"\n");
    let r = get(server.addr, "/control/v1");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.code(), "control_disabled");
    assert!(r.body.contains("[control] enabled = true"), "{}", r.body);
    let r = put(
        server.addr,
        "/control/v1/streams/x",
        "k",
        Some(("If-None-Match", "*")),
        &schemaless().to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // no registry change was made: the broker still serves only its static stream
    let mut ws = ws_connect(&server.url("x?offset=0"));
    let (code, _) = recv_close(&mut ws);
    assert_eq!(code, 4404);
}

#[test]
fn capabilities_and_static_streams() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    let r = get(addr, "/control/v1");
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["contract"], "control/v1");
    assert_eq!(v["wire_versions"], json!({"write": 4, "read": [4, 5]}));
    assert!(
        v["broker_id"].is_string() && v["boot_id"].is_string(),
        "{v}"
    );
    assert_eq!(v["bounds"]["list_limit_max"], 1000);
    // the static stream is listed as such, with revision 0
    let r = get(addr, "/control/v1/streams/static1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("etag"), Some("\"0\""));
    let v = r.json();
    assert_eq!(v["origin"], "static");
    assert_eq!(v["observed"], "serving");
    assert_eq!(v["declaration"]["durable"], true);
    // and is not mutable over HTTP
    for (path, pre, body) in [
        (
            "/control/v1/streams/static1",
            ("If-Match", "\"0\""),
            schemaless().to_string(),
        ),
        (
            "/control/v1/streams/static1/desired",
            ("If-Match", "\"0\""),
            json!({"state": "stopped"}).to_string(),
        ),
    ] {
        let r = put(addr, path, "static-k", Some(pre), &body);
        assert_eq!(r.status, 409, "{}", r.body);
        assert_eq!(r.code(), "static_stream");
        assert!(r.body.contains("config file"), "{}", r.body);
    }
    // the broker's broker_id is kept across restarts; the boot id is not
    let before = get(addr, "/control/v1").json();
    drop(server);
    let server = Server::start(
        Some(&setup.tmp.path().join("corecast.toml")),
        &setup.data(),
        &[],
    );
    let after = get(server.addr, "/control/v1").json();
    assert_eq!(before["broker_id"], after["broker_id"]);
    assert_ne!(before["boot_id"], after["boot_id"]);
}

#[test]
fn every_status_code_and_precondition_rule() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    let path = "/control/v1/streams/orders";
    let body = schemaless().to_string();
    let inm = Some(("If-None-Match", "*"));

    // routing: 404 for no such resource or stream, 405 for a method a resource does not take
    let r = get(addr, "/control/v1/nothing");
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    let r = get(addr, path);
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    let r = get(addr, "/control/v1/operations/no-such-op");
    assert_eq!(r.status, 404, "{}", r.body);
    let r = http(addr, "DELETE", path, &[], "");
    assert_eq!((r.status, r.code().as_str()), (405, "method_not_allowed"));
    assert_eq!(r.header("allow"), Some("GET, HEAD, PUT"));
    let r = get(addr, "/control/v1/streams/orders/desired");
    assert_eq!(r.status, 405, "{}", r.body);
    // a migration is a mutation: its head is checked like a PUT's (tests/migration.rs has the rest)
    let r = http(
        addr,
        "POST",
        "/control/v1/streams/orders/migrations",
        &[],
        "",
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (415, "unsupported_media_type")
    );

    // the head's checks: content type 415, Idempotency-Key 428 / 400, length 413 before the body
    let r = http(
        addr,
        "PUT",
        path,
        &[("Idempotency-Key", "k1"), ("If-None-Match", "*")],
        &body,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (415, "unsupported_media_type")
    );
    let r = http(
        addr,
        "PUT",
        path,
        &[("Content-Type", "application/json"), ("If-None-Match", "*")],
        &body,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (428, "idempotency_key_required")
    );
    for bad in ["has space", &"k".repeat(129)] {
        let r = put(addr, path, bad, inm, &body);
        assert_eq!((r.status, r.code().as_str()), (400, "bad_request"), "{bad}");
    }
    // a header that decides the request, sent twice: refused, not the first one silently taken
    for (twice, a, b) in [
        ("Content-Type", "application/json", "text/plain"),
        ("Idempotency-Key", "twoa", "twob"),
    ] {
        let mut headers = vec![(twice, a), (twice, b), ("If-None-Match", "*")];
        for (h, v) in [
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "k2"),
        ] {
            if h != twice {
                headers.push((h, v));
            }
        }
        let r = http(addr, "PUT", path, &headers, &body);
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "bad_request"),
            "{twice}"
        );
        assert!(r.body.contains("more than once"), "{}", r.body);
    }
    // 10 MB declared, none sent: the answer comes without the server waiting for the body
    let began = Instant::now();
    let r = http(
        addr,
        "PUT",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "big"),
            ("Content-Length", "10000000"),
        ],
        "",
    );
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(r.body.contains("max_body_bytes"), "{}", r.body);
    // and a client already sending a body over the limit reads the 413, not a reset
    let big = "x".repeat(200_000);
    let r = put(addr, path, "big2", inm, &big);
    assert_eq!((r.status, r.code().as_str()), (413, "payload_too_large"));

    // preconditions: 428 without one, 412 malformed, both, or If-None-Match other than *
    let r = put(addr, path, "k2", None, &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (428, "precondition_required")
    );
    let r = put(addr, path, "k3", Some(("If-Match", "3")), &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "precondition_malformed")
    );
    let r = put(addr, path, "k4", Some(("If-None-Match", "\"1\"")), &body);
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "precondition_malformed")
    );
    let r = http(
        addr,
        "PUT",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "k5"),
            ("If-None-Match", "*"),
            ("If-Match", "\"1\""),
        ],
        &body,
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "precondition_malformed")
    );
    // If-Match on a stream that does not exist
    let r = put(addr, path, "k6", Some(("If-Match", "\"1\"")), &body);
    assert_eq!((r.status, r.code().as_str()), (412, "precondition_failed"));

    // the body: not JSON, duplicate keys, unknown keys 400; an unsupported schema keyword 422
    for bad in [
        "{nope".to_string(),
        r#"{"schema":null,"schema":null}"#.to_string(),
        json!({"schema": null, "colour": "red"}).to_string(),
        json!({"schema": null, "limits": {"max_backlog": 0}}).to_string(),
        "[]".to_string(),
    ] {
        let r = put(addr, path, "k7", inm, &bad);
        assert_eq!((r.status, r.code().as_str()), (400, "bad_request"), "{bad}");
    }
    let r = put(
        addr,
        path,
        "k8",
        inm,
        &json!({"schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (422, "unsupported_schema"));
    let r = put(addr, "/control/v1/streams/bad%20name", "k9", inm, &body);
    assert_eq!((r.status, r.code().as_str()), (400, "bad_request"));
    // the registry's own file is not a stream directory
    let r = put(
        addr,
        "/control/v1/streams/registry.db-wal",
        "k10",
        inm,
        &body,
    );
    assert_eq!((r.status, r.code().as_str()), (400, "bad_request"));
    assert!(r.body.contains("reserved"), "{}", r.body);

    // create: 202 with operation_id, revision, ETag and Location
    let r = put(addr, path, "create-orders", inm, &body);
    assert_eq!(r.status, 202, "{}", r.body);
    let v = r.json();
    let op = v["operation_id"].as_str().unwrap().to_string();
    assert_eq!(v["revision"], 1);
    assert_eq!(r.header("etag"), Some("\"1\""));
    assert_eq!(
        r.header("location"),
        Some(format!("/control/v1/operations/{op}").as_str())
    );
    // an identical retry (the reply was lost) gets the same answer, and changes nothing
    let again = put(addr, path, "create-orders", inm, &body);
    assert_eq!(again.status, 202);
    assert_eq!(again.body, r.body);
    assert_eq!(again.header("etag"), r.header("etag"));
    assert_eq!(again.header("location"), r.header("location"));
    // the same key with a different intent
    let r2 = put(
        addr,
        path,
        "create-orders",
        inm,
        &json!({"schema": null, "exactly_once": true}).to_string(),
    );
    assert_eq!(
        (r2.status, r2.code().as_str()),
        (409, "idempotency_key_reused")
    );
    let done = finished(addr, &op);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["kind"], "create");
    // the retry after the operation finished still answers as the first time
    let late = put(addr, path, "create-orders", inm, &body);
    assert_eq!(late.body, r.body);
    // a second create with a new key: the stream exists
    let r = put(addr, path, "create-again", inm, &body);
    assert_eq!((r.status, r.code().as_str()), (412, "precondition_failed"));

    let r = get(addr, path);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("etag"), Some("\"1\""));
    let v = r.json();
    assert_eq!(v["origin"], "managed");
    assert_eq!(v["desired"], "serving");
    assert_eq!(v["observed"], "serving");
    assert!(v["stream_id"].is_string(), "{v}");
    assert_eq!(v["pending_operation"], Value::Null);

    // replace: stale If-Match 412; the same declaration is a satisfied no-op (200); a new one 202
    let r = put(addr, path, "rep-stale", Some(("If-Match", "\"7\"")), &body);
    assert_eq!((r.status, r.code().as_str()), (412, "precondition_failed"));
    let r = put(addr, path, "rep-same", Some(("If-Match", "\"1\"")), &body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["satisfied"], true);
    assert_eq!(r.header("etag"), Some("\"1\""));
    let r = put(
        addr,
        path,
        "rep-schema",
        Some(("If-Match", "\"1\"")),
        &json!({"schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "migration_required"));
    let r = put(
        addr,
        path,
        "rep-limits",
        Some(("If-Match", "\"1\"")),
        &json!({"schema": null, "limits": {"max_backlog": 100}}).to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.header("etag"), Some("\"2\""));
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    let v = get(addr, path).json();
    assert_eq!(v["declaration"]["limits"]["max_backlog"], 100);
    assert_eq!(v["revision"], 2);

    // desired: 428 without If-Match, 412 stale or malformed, 404 on no stream, 400 bad body,
    // 200 when already so
    let dpath = "/control/v1/streams/orders/desired";
    let stop = json!({"state": "stopped"}).to_string();
    let r = put(addr, dpath, "d1", None, &stop);
    assert_eq!(
        (r.status, r.code().as_str()),
        (428, "precondition_required")
    );
    let r = put(addr, dpath, "d2", Some(("If-Match", "\"1\"")), &stop);
    assert_eq!((r.status, r.code().as_str()), (412, "precondition_failed"));
    let r = put(addr, dpath, "d3", Some(("If-Match", "W/\"2\"")), &stop);
    assert_eq!(
        (r.status, r.code().as_str()),
        (412, "precondition_malformed")
    );
    let r = put(
        addr,
        "/control/v1/streams/nobody/desired",
        "d4",
        Some(("If-Match", "\"1\"")),
        &stop,
    );
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));
    for bad in [
        r#"{"state":"paused"}"#,
        r#"{"state":"stopped","x":1}"#,
        "{}",
    ] {
        let r = put(addr, dpath, "d5", Some(("If-Match", "\"2\"")), bad);
        assert_eq!((r.status, r.code().as_str()), (400, "bad_request"), "{bad}");
    }
    let r = put(
        addr,
        dpath,
        "d6",
        Some(("If-Match", "\"2\"")),
        &json!({"state": "serving"}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // the list: name-ordered pages bound to the collection revision
    let r = create(addr, "alpha", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
    let r = get(addr, "/control/v1/streams?limit=2");
    assert_eq!(r.status, 200, "{}", r.body);
    let page = r.json();
    let names: Vec<&str> = page["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "orders"]);
    let cursor = page["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let r = get(
        addr,
        &format!("/control/v1/streams?limit=2&cursor={cursor}"),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let last = r.json();
    assert_eq!(last["streams"][0]["name"], "static1");
    assert_eq!(last["streams"][0]["origin"], "static");
    assert_eq!(last["next_cursor"], Value::Null);
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=zz", "color=red"] {
        let r = get(addr, &format!("/control/v1/streams?{bad}"));
        assert_eq!((r.status, r.code().as_str()), (400, "bad_request"), "{bad}");
    }
    // a mutation invalidates the older cursor
    desire(addr, "orders", "stopped");
    let r = get(
        addr,
        &format!("/control/v1/streams?limit=2&cursor={cursor}"),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "cursor_stale"));

    // HEAD answers the GET's head
    let r = http(addr, "HEAD", path, &[], "");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());

    // no message names a path of the data directory
    let data = setup.data().display().to_string();
    for p in ["/control/v1/streams", path, "/control/v1"] {
        assert!(!get(addr, p).body.contains(&data), "{p}");
    }
}

#[test]
fn a_stream_created_over_http_serves_at_once_and_after_a_restart() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    let r = create(
        addr,
        "made",
        &json!({"schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}, "exactly_once": true}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    // subscribe live, then publish: both on the new stream, without a restart
    let mut sub = ws_connect(&server.url("made?offset=0"));
    let greeting: Value = serde_json::from_str(&recv_text(&mut sub)).unwrap();
    assert_eq!(greeting["stream"], "made");
    assert!(greeting["schema"].is_object(), "{greeting}");
    let offsets = publish(&server, "made", &[row(1), row(2), row(3)]);
    assert_eq!(offsets, [Some(1), Some(2), Some(3)]);
    assert_eq!(read_rows(&mut sub, 3), [(1, 1), (2, 2), (3, 3)]);
    // the schema is enforced
    let mut p = ws_connect(&server.url("made?publish"));
    let _ = recv_text(&mut p);
    p.send(tungstenite::Message::text(r#"[{"i":"x"}]"#))
        .unwrap();
    assert!(recv_text(&mut p).contains("rejected"));
    drop(p);
    let stream_id = get(addr, "/control/v1/streams/made").json()["stream_id"].clone();
    assert_eq!(server.stop(), Some(0));

    // registry replay at start-up: the stream is back, with its log
    let server = Server::start(
        Some(&setup.tmp.path().join("corecast.toml")),
        &setup.data(),
        &[],
    );
    let v = get(server.addr, "/control/v1/streams/made").json();
    assert_eq!(v["observed"], "serving", "{v}");
    assert_eq!(v["stream_id"], stream_id);
    assert_eq!(v["end_offset"], 4);
    let mut sub = ws_connect(&server.url("made?offset=0"));
    let _ = recv_text(&mut sub);
    assert_eq!(read_rows(&mut sub, 3), [(1, 1), (2, 2), (3, 3)]);
    assert_eq!(publish(&server, "made", &[row(4)]), [Some(4)]);
    assert_eq!(read_rows(&mut sub, 1), [(4, 4)]);
    // the static stream is untouched
    assert_eq!(publish(&server, "static1", &[row(9)]), [Some(1)]);
}

#[test]
fn stop_start_and_retire_leave_a_neighbour_untouched() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    // a subscriber of the static neighbour, fed by a publisher for the whole test
    let mut neighbour = ws_connect(&server.url("static1?offset=0"));
    let _ = recv_text(&mut neighbour);
    let url = server.url("static1?publish");
    let stop_feed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feed = {
        let stop_feed = stop_feed.clone();
        std::thread::spawn(move || {
            let mut ws = ws_connect(&url);
            let _ = recv_text(&mut ws);
            let mut n = 0u64;
            while !stop_feed.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                assert_eq!(publish_on(&mut ws, &[row(n)]), [Some(n)]);
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = ws.close(None);
            n
        })
    };

    // create, publish, then stop while a subscriber and a publisher are connected
    let r = create(addr, "dyn", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
    finished(addr, r.json()["operation_id"].as_str().unwrap());
    assert_eq!(
        publish(&server, "dyn", &[row(1), row(2)]),
        [Some(1), Some(2)]
    );
    let mut sub = ws_connect(&server.url("dyn?offset=0"));
    let _ = recv_text(&mut sub);
    assert_eq!(read_rows(&mut sub, 2), [(1, 1), (2, 2)]);
    let mut publisher = ws_connect(&server.url("dyn?publish"));
    let _ = recv_text(&mut publisher);
    let op = desire(addr, "dyn", "stopped");
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    assert_eq!(recv_close(&mut sub), (1001, "stream stopping".into()));
    assert_eq!(recv_close(&mut publisher), (1001, "stream stopping".into()));
    let v = get(addr, "/control/v1/streams/dyn").json();
    assert_eq!(
        (v["desired"].as_str(), v["observed"].as_str()),
        (Some("stopped"), Some("stopped"))
    );
    // a stopped stream serves no one
    let mut late = ws_connect(&server.url("dyn?offset=0"));
    assert_eq!(recv_close(&mut late).0, 1001);

    // start again: the data stayed, offsets continue
    let op = desire(addr, "dyn", "serving");
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    assert_eq!(publish(&server, "dyn", &[row(3)]), [Some(3)]);
    let mut sub = ws_connect(&server.url("dyn?offset=0"));
    let _ = recv_text(&mut sub);
    assert_eq!(read_rows(&mut sub, 3), [(1, 1), (2, 2), (3, 3)]);

    // retire: the connected publisher is closed with 4410, a new one refused with it, and the
    // stream is still read
    let mut publisher = ws_connect(&server.url("dyn?publish"));
    let _ = recv_text(&mut publisher);
    let op = desire(addr, "dyn", "retired");
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    let (code, reason) = recv_close(&mut publisher);
    assert_eq!(code, 4410, "{reason}");
    let reason: Value = serde_json::from_str(&reason).unwrap();
    assert_eq!(reason["error"], "stream_retired");
    assert_eq!(reason["end_offset"], 4);
    assert!(reason["at"].as_i64().unwrap() > 0);
    let mut refused = ws_connect(&server.url("dyn?publish"));
    assert_eq!(recv_close(&mut refused).0, 4410);
    let mut reader = ws_connect(&server.url("dyn?offset=0"));
    let _ = recv_text(&mut reader);
    assert_eq!(read_rows(&mut reader, 3), [(1, 1), (2, 2), (3, 3)]);
    // the live subscriber is not closed by the retirement
    drop(sub);
    // retired is final
    let etag = get(addr, "/control/v1/streams/dyn")
        .header("etag")
        .unwrap()
        .to_string();
    let r = put(
        addr,
        "/control/v1/streams/dyn/desired",
        "revive",
        Some(("If-Match", &etag)),
        &json!({"state": "serving"}).to_string(),
    );
    assert_eq!((r.status, r.code().as_str()), (409, "stream_retired"));
    let v = get(addr, "/control/v1/streams/dyn").json();
    assert_eq!(v["observed"], "retired");
    let at = v["retired_at_us"].as_i64().unwrap();
    assert!(at > 0);
    // the published stream metadata records the retirement (version 3, PUBLISHED.md §3.2)
    let metadata = setup.data().join("dyn/dyn.metadata.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    let doc = loop {
        let doc: Option<Value> = std::fs::read_to_string(&metadata)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if let Some(d) = doc.filter(|d| d["streamcast_metadata"] == 3) {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "{} never said retired",
            metadata.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(doc["retirement"]["at"], at);
    assert_eq!(doc["retirement"]["end_offset"], 4);
    assert_eq!(doc["stream_id"], v["stream_id"]);

    // the neighbour's subscriber got every row, in order, none missing
    stop_feed.store(true, std::sync::atomic::Ordering::SeqCst);
    let n = feed.join().unwrap();
    assert!(n > 10, "the feed ran through the whole test ({n} rows)");
    let got = read_rows(&mut neighbour, n as usize);
    let want: Vec<(u64, u64)> = (1..=n).map(|i| (i, i)).collect();
    assert_eq!(got, want);

    // a retired stream stays retired (and read) after a restart
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(
        Some(&setup.tmp.path().join("corecast.toml")),
        &setup.data(),
        &[],
    );
    let mut refused = ws_connect(&server.url("dyn?publish"));
    assert_eq!(recv_close(&mut refused).0, 4410);
    let mut reader = ws_connect(&server.url("dyn?offset=0"));
    let _ = recv_text(&mut reader);
    assert_eq!(read_rows(&mut reader, 3), [(1, 1), (2, 2), (3, 3)]);
}

#[test]
fn kill9_between_accepting_and_finishing_completes_once_after_restart() {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    // the control thread waits a minute before carrying out each operation
    let server = Server::start_env(
        Some(&cfg),
        &setup.data(),
        &[("CORECAST_CONTROL_TEST_PAUSE_MS", "60000")],
    );
    let r = create(server.addr, "late", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    let v = get(server.addr, &format!("/control/v1/operations/{op}")).json();
    assert_eq!(v["state"], "accepted", "{v}");
    let s = get(server.addr, "/control/v1/streams/late").json();
    assert_eq!(s["pending_operation"]["id"], op.as_str());
    assert_eq!(s["observed"], "stopped");
    server.kill9();

    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let v = get(server.addr, &format!("/control/v1/operations/{op}")).json();
    assert_eq!(v["state"], "succeeded", "{v}");
    let s = get(server.addr, "/control/v1/streams/late").json();
    assert_eq!(s["observed"], "serving");
    assert_eq!(s["pending_operation"], Value::Null);
    assert_eq!(publish(&server, "late", &[row(1)]), [Some(1)]);
    let finished_logs = server.stderr().matches("finished at start-up").count();
    assert_eq!(finished_logs, 1, "{}", server.stderr());
    // once: a second restart finds nothing left to finish, and the stream kept its one log
    let id = s["stream_id"].clone();
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    assert!(!server.stderr().contains("finished at start-up"));
    let s = get(server.addr, "/control/v1/streams/late").json();
    assert_eq!(s["stream_id"], id);
    assert_eq!(s["end_offset"], 2);
}

#[test]
fn a_managed_stream_that_cannot_open_leaves_the_broker_serving() {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start_env(
        Some(&cfg),
        &setup.data(),
        &[("CORECAST_CONTROL_TEST_PAUSE_MS", "60000")],
    );
    let r = create(server.addr, "blocked", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    server.kill9();
    // the stream's directory cannot be made: a file holds its name
    std::fs::write(setup.data().join("blocked"), b"not a directory").unwrap();
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let v = get(server.addr, &format!("/control/v1/operations/{op}")).json();
    assert_eq!(v["state"], "failed", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("broker's log"), "{message}");
    assert!(
        !message.contains(&setup.data().display().to_string()),
        "{message}"
    );
    let s = get(server.addr, "/control/v1/streams/blocked").json();
    assert_eq!(
        (s["desired"].as_str(), s["observed"].as_str()),
        (Some("serving"), Some("stopped"))
    );
    assert!(server
        .stderr()
        .contains("cannot open this stream of registry.db"));
    // the rest of the broker serves
    assert_eq!(publish(&server, "static1", &[row(1)]), [Some(1)]);
    let mut ws = ws_connect(&server.url("blocked?publish"));
    assert_eq!(recv_close(&mut ws).0, 1001);
}

/// Runs `tests/control/official_client.py ADDR STREAM MODE`; its report.
fn official_client(py: &str, server: &Server, stream: &str, mode: &str) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/control/official_client.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg(server.addr.to_string())
        .arg(stream)
        .arg(mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "official_client.py {mode} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[test]
fn the_official_client_on_a_stream_created_over_http() {
    let Some(py) = support::anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let r = create(
        server.addr,
        "py",
        &json!({"schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    finished(server.addr, r.json()["operation_id"].as_str().unwrap());
    let report = official_client(&py, &server, "py", "serve");
    assert_eq!(report["first_offset"], 1, "{report}");
    assert_eq!(report["rows"], json!([[1, 0], [2, 1], [3, 2]]), "{report}");
    let op = desire(server.addr, "py", "retired");
    finished(server.addr, &op);
    let report = official_client(&py, &server, "py", "retired");
    assert_eq!(report["refused"], "StreamRetired", "{report}");
    assert!(report["at"].as_i64().unwrap() > 0, "{report}");
    assert_eq!(report["end_offset"], 4, "{report}");
    assert_eq!(report["rows"], 3, "{report}");
}

fn hash_token(t: &str) -> String {
    let out = corecast_run(&["hash-token"], Some(t.as_bytes()), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "hash-token: {}", out.stderr);
    out.stdout.trim().to_string()
}

#[test]
fn the_grants_decide_with_auth() {
    let setup = Setup::new();
    let (ops, viewer) = ("ops-token-5c1d9e", "viewer-token-77ab3");
    let server = start(
        &setup,
        &format!(
            r#"
[[stream]]
name = "static1"

[auth]
max_failures_per_minute = 1000

[auth.principals.ops]
tokens = ["{}"]
grants = {{ "control.read" = ["*"], "control.mutate" = ["*"], "data.publish" = ["*"] }}

[auth.principals.viewer]
tokens = ["{}"]
grants = {{ "control.read" = ["*"] }}
"#,
            hash_token(ops),
            hash_token(viewer)
        ),
    );
    let addr = server.addr;
    let bearer = |t: &str| format!("Bearer {t}");
    let r = get(addr, "/control/v1");
    assert_eq!(r.status, 401, "{}", r.body);
    let r = http(
        addr,
        "GET",
        "/control/v1/streams",
        &[("Authorization", &bearer(viewer))],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let body = schemaless().to_string();
    let mut h = vec![
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "g1"),
        ("If-None-Match", "*"),
    ];
    let vb = bearer(viewer);
    h.push(("Authorization", &vb));
    let r = http(addr, "PUT", "/control/v1/streams/g", &h, &body);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("control.mutate"), "{}", r.body);
    h.pop();
    let ob = bearer(ops);
    h.push(("Authorization", &ob));
    let r = http(addr, "PUT", "/control/v1/streams/g", &h, &body);
    assert_eq!(r.status, 202, "{}", r.body);
    // a migration needs control.migrate, which control.mutate does not give
    let migration = json!({"schema": {"type": "object"}}).to_string();
    let m = [
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "g2"),
        ("If-Match", "\"1\""),
        ("Authorization", ob.as_str()),
    ];
    let r = http(
        addr,
        "POST",
        "/control/v1/streams/g/migrations",
        &m,
        &migration,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("control.migrate"), "{}", r.body);
}

#[test]
fn corecast_ctl_drives_the_contract() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let url = format!("http://{}", server.addr);
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", "--server", url.as_str()];
        all.extend_from_slice(args);
        corecast_run(&all, None, Duration::from_secs(60))
    };
    // a TOML declaration whose schema names a JSON Schema file beside it
    let dir = setup.tmp.path();
    std::fs::write(
        dir.join("i.schema.json"),
        r#"{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("made.toml"),
        "schema = \"i.schema.json\"\nexactly_once = true\n[limits]\nmax_backlog = 500\n",
    )
    .unwrap();
    let decl = dir.join("made.toml").display().to_string();
    let out = ctl(&["create", "made", &decl]);
    assert_eq!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("accepted, operation"), "{}", out.stdout);
    assert!(out.stdout.contains(": succeeded"), "{}", out.stdout);
    assert_eq!(publish(&server, "made", &[row(1)]), [Some(1)]);
    let out = ctl(&["get", "made"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["declaration"]["limits"]["max_backlog"], 500);
    assert_eq!(v["declaration"]["exactly_once"], true);
    assert_eq!(v["declaration"]["schema"]["required"], json!(["i"]));
    // create again: refused with the contract's message, exit 1
    let out = ctl(&["create", "made", &decl]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains("412 precondition_failed"),
        "{}",
        out.stderr
    );
    // stop (already stopped the second time), start, retire; the ETags are read for us
    let out = ctl(&["stop", "made"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = ctl(&["stop", "made"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("already so"), "{}", out.stdout);
    let out = ctl(&["start", "made"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(publish(&server, "made", &[row(2)]), [Some(2)]);
    let out = ctl(&["--no-wait", "retire", "made"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out
        .stdout
        .split("operation ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .expect("an operation id")
        .to_string();
    let out = ctl(&["watch", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    let mut refused = ws_connect(&server.url("made?publish"));
    assert_eq!(recv_close(&mut refused).0, 4410);
    let out = ctl(&["list"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", out.stdout);
    assert!(
        lines[1].starts_with("made") && lines[1].contains("retired"),
        "{}",
        out.stdout
    );
    assert!(
        lines[2].starts_with("static1") && lines[2].contains("static"),
        "{}",
        out.stdout
    );
    // a broker that is not there: exit 3 after the retries
    let out = corecast_run(
        &[
            "ctl",
            "--server",
            &format!("http://127.0.0.1:{}", support::dead_port()),
            "list",
        ],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(3), "{}", out.stderr);
}

/// One loadgen run on the static `trades` stream: 200 subscribers at 200 rows/s for 8 s; its
/// report, after checking that every subscriber got every acknowledged row once, in order.
fn neighbour_load(server: &Server) -> Value {
    let out = std::process::Command::new(support::loadgen_bin())
        .arg("--url")
        .arg(server.url("/trades"))
        .args(["--publishers", "1", "--window", "16", "--batch", "1"])
        .args(["--rate", "200", "--subscribers", "200", "--threads", "1"])
        .args(["--duration", "8", "--max-seconds", "90", "--json"])
        .output()
        .expect("run loadgen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loadgen failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_str(stdout.trim()).expect("one JSON document");
    assert_eq!(doc["ok"], true, "{stdout}");
    let d = &doc["deliver"];
    assert_eq!(
        (
            d["gaps"].as_u64(),
            d["dups"].as_u64(),
            d["missing"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{stdout}"
    );
    assert_eq!(d["subscribers_complete"], 200, "{stdout}");
    let rows = doc["publish"]["rows_acked"].as_u64().unwrap();
    assert!(rows >= 1_000, "about 1,600 rows at 200/s for 8 s: {stdout}");
    assert_eq!(d["frames"].as_u64(), Some(rows * 200), "{stdout}");
    doc
}

#[test]
fn a_neighbours_subscribers_lose_nothing_while_streams_are_created_stopped_and_retired() {
    let setup = Setup::new();
    let server = start(
        &setup,
        "[[stream]]\nname = \"trades\"\nschema = \"@trade\"\n\n[control]\nenabled = true\n",
    );
    let addr = server.addr;
    let quiet = neighbour_load(&server);
    // the same load while another thread creates, publishes to, stops, starts and retires
    // streams over and over
    let stop_churn = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop_churn = stop_churn.clone();
        let url = server.url("");
        std::thread::spawn(move || {
            let mut cycles = 0;
            while !stop_churn.load(std::sync::atomic::Ordering::SeqCst) {
                let name = format!("churn{cycles}");
                let r = create(addr, &name, &schemaless());
                assert_eq!(r.status, 202, "{}", r.body);
                assert_eq!(
                    finished(addr, r.json()["operation_id"].as_str().unwrap())["state"],
                    "succeeded"
                );
                let mut ws = ws_connect(&format!("{url}{name}?publish"));
                let _ = recv_text(&mut ws);
                assert_eq!(publish_on(&mut ws, &[row(1)]), [Some(1)]);
                drop(ws);
                for state in ["stopped", "serving", "retired"] {
                    let op = desire(addr, &name, state);
                    assert_eq!(finished(addr, &op)["state"], "succeeded", "{name} {state}");
                }
                cycles += 1;
            }
            cycles
        })
    };
    let busy = neighbour_load(&server);
    stop_churn.store(true, std::sync::atomic::Ordering::SeqCst);
    let cycles = churn.join().unwrap();
    assert!(
        cycles >= 2,
        "the churn ran through the load ({cycles} cycles)"
    );
    let p99 = |d: &Value| d["latency_us"]["p99"].as_u64().unwrap();
    eprintln!(
        "neighbour delivery p99: {} µs quiet, {} µs with {cycles} create/stop/start/retire cycles",
        p99(&quiet),
        p99(&busy)
    );
    // a gross stall (a shard waiting on SQLite or a log open) would show as seconds
    assert!(
        p99(&busy) < 1_000_000,
        "p99 {} µs quiet, {} µs busy",
        p99(&quiet),
        p99(&busy)
    );
}

#[test]
fn an_operation_runs_while_clients_poll_the_control_api_without_pause() {
    let setup = Setup::new();
    // each operation is due 300 ms after it is accepted: by then four clients keep a call
    // queued at every moment, which must not hold the operation back
    let server = Server::start_env(
        Some(&setup.config(CONFIG)),
        &setup.data(),
        &[("CORECAST_CONTROL_TEST_PAUSE_MS", "300")],
    );
    let addr = server.addr;
    let r = create(addr, "polled", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            let path = format!("/control/v1/operations/{op}");
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = get(addr, &path);
                    assert!(r.status == 200 || r.status == 503, "{}", r.body);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let v = finished(addr, &op);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let polls: u64 = pollers.into_iter().map(|p| p.join().unwrap()).sum();
    assert_eq!(v["state"], "succeeded", "{v}");
    assert!(polls > 0);
    assert_eq!(publish(&server, "polled", &[row(1)]), [Some(1)]);
}

#[test]
fn a_reordered_schema_is_a_migration_not_a_replace() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    let path = "/control/v1/streams/cols";
    // raw text: the order of `properties` is the column order
    let ab = r#"{"schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"]}}"#;
    let ba = r#"{"schema":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["a","b"]}}"#;
    let r = put(addr, path, "cols-create", Some(("If-None-Match", "*")), ab);
    assert_eq!(r.status, 202, "{}", r.body);
    let op = r.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    let r = put(addr, path, "cols-reorder", Some(("If-Match", "\"1\"")), ba);
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "migration_required"),
        "{}",
        r.body
    );
    assert!(r.body.contains("order of properties"), "{}", r.body);
    let v = get(addr, path).json();
    assert_eq!(v["revision"], 1);
    let props: Vec<&String> = v["declaration"]["schema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(props, ["a", "b"], "{v}");
}

#[test]
fn a_create_over_an_earlier_streams_data_is_refused() {
    let setup = Setup::new();
    // the directory an earlier stream of the name left (one removed from the TOML file)
    let leftover = setup.data().join("old");
    std::fs::create_dir_all(leftover.join("log")).unwrap();
    std::fs::write(
        leftover.join("log").join("1.seg"),
        b"rows of another schema",
    )
    .unwrap();
    let server = start(&setup, CONFIG);
    let r = create(server.addr, "old", &schemaless());
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "data_exists"),
        "{}",
        r.body
    );
    assert!(
        !r.body.contains(&setup.data().display().to_string()),
        "{}",
        r.body
    );
    assert_eq!(get(server.addr, "/control/v1/streams/old").status, 404);
    // the data is left as it was
    assert_eq!(
        std::fs::read(leftover.join("log").join("1.seg")).unwrap(),
        b"rows of another schema"
    );
    // an empty directory is no one's data
    std::fs::create_dir_all(setup.data().join("fresh")).unwrap();
    let r = create(server.addr, "fresh", &schemaless());
    assert_eq!(r.status, 202, "{}", r.body);
}

#[test]
fn the_registry_cap_is_configured_and_its_refusal_says_how_to_raise_it() {
    let setup = Setup::new();
    let server = start(&setup, &format!("{CONFIG}max_streams = 2\n"));
    let caps = get(server.addr, "/control/v1").json();
    assert_eq!(caps["bounds"]["managed_streams_max"], 2, "{caps}");
    for name in ["one", "two"] {
        create_and_wait(server.addr, name, &schemaless());
    }
    let op = desire(server.addr, "one", "retired");
    assert_eq!(finished(server.addr, &op)["state"], "succeeded");
    let r = create(server.addr, "three", &schemaless());
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "too_many_streams"),
        "{}",
        r.body
    );
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("2 streams (1 of them retired"),
        "{message}"
    );
    assert!(message.contains("max_streams = 2"), "{message}");
    drop(server);
    let setup_bad = setup.config(&format!("{CONFIG}max_streams = 0\n"));
    let out = corecast_run(
        &[
            "serve",
            "--config",
            setup_bad.to_str().unwrap(),
            "--data",
            setup.data().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        None,
        Duration::from_secs(20),
    );
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("control.max_streams") && out.stderr.contains("1..=4096"),
        "{out:?}"
    );
}

#[test]
fn a_long_poll_is_answered_when_its_stream_is_stopped() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    create_and_wait(addr, "polls", &schemaless());
    assert_eq!(publish(&server, "polls", &[row(1)]), [Some(1)]);
    let first = get(addr, "/v1/streams/polls/rows?limit=10");
    assert_eq!(first.status, 200, "{}", first.body);
    let cursor = first.json()["next_cursor"].as_str().unwrap().to_string();
    let poll = std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = get(
            addr,
            &format!("/v1/streams/polls/rows?cursor={cursor}&wait=30"),
        );
        (r, t0.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let op = desire(addr, "polls", "stopped");
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    let (r, took) = poll.join().unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("stream_stopped"), "{}", r.body);
    assert!(took < Duration::from_secs(20), "answered after {took:?}");
}

#[test]
fn a_location_with_credentials_is_refused_and_never_echoed() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let r = create(
        server.addr,
        "leaky",
        &json!({"schema": null, "published": "s3://AKIAEXAMPLEKEY:wJalrXUtnSECRET@bucket/prefix"}),
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "bad_request"),
        "{}",
        r.body
    );
    assert!(r.body.contains("credentials"), "{}", r.body);
    assert!(
        !r.body.contains("AKIAEXAMPLEKEY") && !r.body.contains("wJalrXUtnSECRET"),
        "{}",
        r.body
    );
    assert!(!server.stderr().contains("wJalrXUtnSECRET"));
}

#[test]
fn a_retry_spelt_differently_is_the_same_request_and_a_live_only_stream_shows_no_log() {
    let setup = Setup::new();
    let server = start(&setup, CONFIG);
    let addr = server.addr;
    let path = "/control/v1/streams/spelt";
    let compact = r#"{"schema":null,"durable":false}"#;
    let spaced = "{ \"schema\" : null,\n  \"durable\" : false }";
    let first = put(addr, path, "spelt-1", Some(("If-None-Match", "*")), compact);
    assert_eq!(first.status, 202, "{}", first.body);
    let again = put(addr, path, "spelt-1", Some(("If-None-Match", "*")), spaced);
    assert_eq!(again.status, 202, "{}", again.body);
    assert_eq!(again.body, first.body);
    let other = put(
        addr,
        path,
        "spelt-1",
        Some(("If-None-Match", "*")),
        r#"{"schema":null,"durable":true}"#,
    );
    assert_eq!(
        (other.status, other.code().as_str()),
        (409, "idempotency_key_reused")
    );
    let op = first.json()["operation_id"].as_str().unwrap().to_string();
    assert_eq!(finished(addr, &op)["state"], "succeeded");
    let v = get(addr, path).json();
    assert_eq!(v["declaration"]["durable"], false, "{v}");
    assert!(v.get("log").is_none(), "{v}");
}
