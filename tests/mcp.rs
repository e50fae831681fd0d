//! The MCP endpoint (`POST /mcp`): an MCP client session against the real binary on loopback —
//! initialize, the tool list, each tool, refused unbounded and bad requests, sessions, grants.
mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const CONFIG: &str = r#"
[[stream]]
name = "t"
schema = "@trade"
[[stream]]
name = "live"
durable = false
"#;

/// `method path` with a body and headers; reads the whole answer (the server closes).
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> HttpResp {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(90))).ok();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
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
    HttpResp {
        status,
        headers,
        body: buf[end + 4..].to_vec(),
    }
}

fn json_of(r: &HttpResp) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.text()))
}

/// One MCP client session over Streamable HTTP.
struct Mcp {
    addr: SocketAddr,
    auth: Option<String>,
    sid: Option<String>,
    next_id: u64,
}

impl Mcp {
    fn new(addr: SocketAddr, auth: Option<&str>) -> Mcp {
        Mcp {
            addr,
            auth: auth.map(String::from),
            sid: None,
            next_id: 1,
        }
    }

    fn post(&self, body: &str) -> HttpResp {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        if let Some(a) = &self.auth {
            h.push(("authorization", a));
        }
        if let Some(s) = &self.sid {
            h.push(("mcp-session-id", s));
            h.push(("mcp-protocol-version", "2025-06-18"));
        }
        request(self.addr, "POST", "/mcp", body, &h)
    }

    /// `initialize` then `notifications/initialized`; returns the initialize result.
    fn initialize(&mut self) -> Value {
        let r = self.post(
            &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
                "protocolVersion":"2025-06-18","capabilities":{},
                "clientInfo":{"name":"corecast-test","version":"1"}}})
            .to_string(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        self.sid = Some(
            r.header("mcp-session-id")
                .expect("a session id")
                .to_string(),
        );
        let v = json_of(&r);
        let n = self.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(n.status, 202, "{}", n.text());
        assert!(n.body.is_empty());
        v["result"].clone()
    }

    /// A request; returns the whole reply.
    fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let r = self
            .post(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string());
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v = json_of(&r);
        assert_eq!(v["id"], json!(id), "{v}");
        assert_eq!(v["jsonrpc"], "2.0");
        v
    }

    /// `tools/call`; returns the result (which may be a tool error).
    fn tool(&mut self, name: &str, args: Value) -> Value {
        let v = self.rpc("tools/call", json!({"name": name, "arguments": args}));
        assert!(v.get("error").is_none(), "{name}: {v}");
        let r = v["result"].clone();
        // the text is the structured content, as JSON
        let text = r["content"][0]["text"].as_str().expect("text content");
        let parsed: Value = serde_json::from_str(text).expect("text is JSON");
        assert_eq!(parsed, r["structuredContent"], "{r}");
        r
    }

    /// `tools/call` that the protocol refuses; returns the JSON-RPC error.
    fn refused(&mut self, name: &str, args: Value) -> Value {
        let v = self.rpc("tools/call", json!({"name": name, "arguments": args}));
        assert!(v.get("result").is_none(), "{name} {v}");
        v["error"].clone()
    }
}

fn ok(r: &Value) -> &Value {
    assert_eq!(r["isError"], json!(false), "{r}");
    &r["structuredContent"]
}

fn tool_error(r: &Value) -> (String, String) {
    assert_eq!(r["isError"], json!(true), "{r}");
    let e = &r["structuredContent"]["error"];
    (
        e["code"].as_str().expect("code").to_string(),
        e["message"].as_str().expect("message").to_string(),
    )
}

fn offsets(v: &Value) -> Vec<u64> {
    v["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {v}"))
        .iter()
        .map(|r| r[0].as_u64().expect("offset"))
        .collect()
}

fn start(setup: &Setup) -> Server {
    let cfg = setup.config(CONFIG);
    Server::start(Some(&cfg), &setup.data(), &[])
}

fn rows(from: i64, n: i64, symbol: &str) -> Vec<String> {
    (from..from + n).map(|i| trade(i, symbol)).collect()
}

#[test]
fn a_client_session_initializes_lists_and_calls_every_tool() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 5, "A"));
    let mut c = Mcp::new(server.addr, None);
    let init = c.initialize();
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["serverInfo"]["name"], "corecast");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");

    // the tool list: five tools, each with its JSON Schema, bounds declared
    let list = c.rpc("tools/list", json!({}))["result"]["tools"].clone();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "stream_catalog",
            "stream_peek",
            "stream_collect",
            "stream_state",
            "stream_subscribe"
        ]
    );
    for t in list.as_array().unwrap() {
        let s = &t["inputSchema"];
        assert_eq!(s["type"], "object", "{t}");
        assert_eq!(s["additionalProperties"], false, "{t}");
        assert!(t["description"].as_str().is_some_and(|d| !d.is_empty()));
        if t["name"] != "stream_catalog" {
            assert_eq!(s["required"], json!(["stream"]), "{t}");
            assert_eq!(s["properties"]["limit"]["maximum"], 500, "{t}");
        }
    }
    let sub = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "stream_subscribe");
    assert_eq!(
        sub.unwrap()["inputSchema"]["properties"]["wait_s"]["maximum"],
        60.0
    );

    // stream_catalog: every stream; one entry with its offsets
    let cat = c.tool("stream_catalog", json!({}));
    let names: Vec<&str> = ok(&cat)["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["t", "live"]);
    let one = c.tool("stream_catalog", json!({"stream": "t"}));
    assert_eq!(ok(&one)["end_offset"], 6);
    assert_eq!(ok(&one)["earliest_offset"], 1);
    assert!(ok(&one)["schema"].is_object());

    // stream_peek: the latest rows, citing end_offset
    let peek = c.tool("stream_peek", json!({"stream": "t", "limit": 2}));
    assert_eq!(offsets(ok(&peek)), [4, 5]);
    assert_eq!(ok(&peek)["end_offset"], 6);
    assert_eq!(ok(&peek)["rows"][0][2]["trade_id"], 4);

    // stream_collect: a window and its cursor, then the rest
    let w1 = c.tool("stream_collect", json!({"stream": "t", "limit": 3}));
    assert_eq!(offsets(ok(&w1)), [1, 2, 3]);
    assert_eq!(ok(&w1)["status"], "ok");
    assert_eq!(ok(&w1)["next_offset"], 4);
    let cur = ok(&w1)["next_cursor"].as_str().unwrap().to_string();
    let w2 = c.tool("stream_collect", json!({"stream": "t", "cursor": cur}));
    assert_eq!(offsets(ok(&w2)), [4, 5]);
    assert_eq!(ok(&w2)["next_offset"], ok(&w2)["end_offset"]);
    let end_cursor = ok(&w2)["next_cursor"].as_str().unwrap().to_string();
    // from an offset, and with a filter
    publish_batch(&server, "t", &rows(6, 3, "B"));
    let wf = c.tool(
        "stream_collect",
        json!({"stream": "t", "from": 2, "where": {"symbol": "B"}}),
    );
    assert_eq!(offsets(ok(&wf)), [6, 7, 8]);
    let wl = c.tool("stream_collect", json!({"stream": "t", "from": "latest"}));
    assert_eq!(offsets(ok(&wl)), Vec::<u64>::new());
    assert_eq!(ok(&wl)["next_offset"], 9);
    // a pull API cursor goes on over MCP (the same signed cursor, the same binding)
    let r = http_get(server.addr, "/v1/streams/t/rows?limit=1");
    let pull: Value = serde_json::from_slice(&r.body).unwrap();
    let pc = pull["next_cursor"].as_str().unwrap();
    let wp = c.tool(
        "stream_collect",
        json!({"stream": "t", "cursor": pc, "limit": 2}),
    );
    assert_eq!(offsets(ok(&wp)), [2, 3]);

    // stream_subscribe: one bounded long poll that answers as soon as a row commits
    let sid = c.sid.clone();
    let addr = server.addr;
    let poll = std::thread::spawn(move || {
        let mut c2 = Mcp::new(addr, None);
        c2.sid = sid;
        let started = Instant::now();
        let r = c2.tool(
            "stream_subscribe",
            json!({"stream": "t", "cursor": end_cursor, "wait_s": 20, "where": {"symbol": "C"}}),
        );
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    publish_batch(&server, "t", &rows(9, 1, "C"));
    let (r, took) = poll.join().unwrap();
    // end_cursor was issued without a filter: refused for this one, at once
    let (code, _) = tool_error(&r);
    assert_eq!(code, "cursor_invalid");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let latest = c.tool("stream_collect", json!({"stream": "t", "from": "latest"}));
    let at_end = ok(&latest)["next_cursor"].as_str().unwrap().to_string();
    let sid = c.sid.clone();
    let poll = std::thread::spawn(move || {
        let mut c2 = Mcp::new(addr, None);
        c2.sid = sid;
        let started = Instant::now();
        let r = c2.tool(
            "stream_subscribe",
            json!({"stream": "t", "cursor": at_end, "wait_s": 20}),
        );
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    publish_batch(&server, "t", &rows(10, 2, "D"));
    let (r, took) = poll.join().unwrap();
    assert_eq!(offsets(ok(&r)), [10, 11], "{r}");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(ok(&r)["next_offset"], 12);
    // nothing new: it waits its wait_s, then answers an empty window with a cursor
    let started = Instant::now();
    let cur = ok(&r)["next_cursor"].as_str().unwrap().to_string();
    let r = c.tool(
        "stream_subscribe",
        json!({"stream": "t", "cursor": cur, "wait_s": 0.5}),
    );
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(ok(&r)["count"], 0);
    assert!(ok(&r)["next_cursor"].is_string());

    // stream_state on a stream without a key: a clear tool error, no fake data (a keyed
    // stream's windows: tests/keyed.rs)
    let (code, msg) = tool_error(&c.tool("stream_state", json!({"stream": "t"})));
    assert_eq!(code, "not_keyed");
    assert!(msg.contains("stream t is not keyed"), "{msg}");

    // the pull API's refusals, as tool errors
    let (code, msg) = tool_error(&c.tool("stream_collect", json!({"stream": "live"})));
    assert_eq!(code, "not_durable");
    assert!(
        msg.contains("stream_peek") && !msg.contains("/latest"),
        "an MCP user is pointed to a tool: {msg}"
    );
    let (code, msg) = tool_error(&c.tool("stream_peek", json!({"stream": "nope"})));
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("not_found", "no such stream: nope")
    );
    let (code, _) = tool_error(&c.tool("stream_collect", json!({"stream": "t", "cursor": "x.y"})));
    assert_eq!(code, "cursor_invalid");
    let (code, _) = tool_error(&c.tool(
        "stream_collect",
        json!({"stream": "t", "where": {"nope": 1}}),
    ));
    assert_eq!(code, "bad_request");
    let live = c.tool("stream_peek", json!({"stream": "live"}));
    assert_eq!(ok(&live)["end_offset"], Value::Null);

    // ping, an unknown method
    assert_eq!(c.rpc("ping", json!({}))["result"], json!({}));
    assert_eq!(c.rpc("resources/list", json!({}))["error"]["code"], -32601);
}

#[test]
fn unbounded_and_bad_requests_are_refused_naming_the_bound() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 2, "A"));
    let mut c = Mcp::new(server.addr, None);
    c.initialize();
    // the unbounded request: refused, not clamped
    let e = c.refused("stream_collect", json!({"stream": "t", "limit": 10000}));
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["code"], "resource_limit_exceeded");
    assert_eq!(e["data"]["argument"], "limit");
    assert_eq!(e["data"]["maximum"], 500.0);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("limit: 10000 is over the maximum of 500"),
        "{e}"
    );
    let started = Instant::now();
    let e = c.refused("stream_subscribe", json!({"stream": "t", "wait_s": 600}));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused before any wait"
    );
    assert_eq!(e["data"]["code"], "resource_limit_exceeded");
    assert_eq!(e["data"]["argument"], "wait_s");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("600 is over the maximum of 60"),
        "{e}"
    );
    let e = c.refused("stream_peek", json!({"stream": "t", "limit": 501}));
    assert_eq!(e["data"]["argument"], "limit");
    // bad arguments, each named
    let e = c.refused("stream_peek", json!({"stream": "t", "limit": "ten"}));
    assert_eq!(e["data"]["code"], "invalid_argument");
    assert_eq!(e["data"]["argument"], "limit");
    assert_eq!(e["message"], "limit: must be integer");
    let e = c.refused("stream_collect", json!({"stream": "t", "follow": true}));
    assert_eq!(e["data"]["argument"], "follow");
    let e = c.refused("stream_peek", json!({}));
    assert_eq!(e["message"], "stream: required, missing");
    let e = c.refused(
        "stream_collect",
        json!({"stream": "t", "where": "symbol=A"}),
    );
    assert_eq!(e["data"]["argument"], "where");
    let e = c.refused("stream_subscribe", json!({"stream": "t", "wait_s": -1}));
    assert_eq!(e["data"]["argument"], "wait_s");
    let e = c.refused("stream_forever", json!({}));
    assert_eq!(e["data"]["code"], "unknown_tool");
    // the waits of one batch add up to at most 60 s
    let sid = c.sid.clone().unwrap();
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stream_subscribe","arguments":{"stream":"t","from":"latest","wait_s":0.2}}},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stream_subscribe","arguments":{"stream":"t","from":"latest","wait_s":60}}},
        {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}
    ]);
    let r = c.post(&batch.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = json_of(&r);
    let replies = v.as_array().expect("a batch answer");
    assert_eq!(replies.len(), 2, "{v}");
    assert_eq!(replies[0]["result"]["isError"], false, "{v}");
    assert_eq!(
        replies[1]["error"]["data"]["code"], "resource_limit_exceeded",
        "{v}"
    );
    assert!(
        replies[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 60 s"),
        "{v}"
    );
    // a batch over 16, a body that is not JSON, initialize in a batch
    let many: Vec<Value> = (0..17)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    let r = c.post(&Value::Array(many).to_string());
    assert_eq!(r.status, 400);
    assert_eq!(json_of(&r)["error"]["code"], -32600);
    let r = c.post("{\"jsonrpc\":");
    assert_eq!(r.status, 400);
    assert_eq!(json_of(&r)["error"]["code"], -32700);
    let r = c.post(r#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}]"#);
    assert_eq!(r.status, 400, "{}", r.text());
    // not a JSON-RPC message
    let r = c.post(r#"{"id":3,"method":"ping"}"#);
    assert_eq!(json_of(&r)["error"]["code"], -32600);
    assert_eq!(json_of(&r)["id"], 3);
    drop(sid);
}

#[test]
fn sessions_are_issued_required_and_ended() {
    let setup = Setup::new();
    let server = start(&setup);
    let addr = server.addr;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    // without a session id: 400; with one never issued: 404
    let mut c = Mcp::new(addr, None);
    let r = c.post(list);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(json_of(&r)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Mcp-Session-Id"));
    c.sid = Some("0123456789abcdef0123456789abcdef".into());
    assert_eq!(c.post(list).status, 404);
    // version negotiation: the client's when spoken, else ours
    let init = |v: &str| {
        let r = request(
            addr,
            "POST",
            "/mcp",
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":v,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}).to_string(),
            &[("content-type", "application/json")],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        (
            json_of(&r)["result"]["protocolVersion"]
                .as_str()
                .unwrap()
                .to_string(),
            r.header("mcp-session-id").unwrap().to_string(),
        )
    };
    assert_eq!(init("2025-03-26").0, "2025-03-26");
    assert_eq!(init("2024-11-05").0, "2024-11-05");
    assert_eq!(init("2099-01-01").0, "2025-06-18");
    let (_, a) = init("2025-06-18");
    let (_, b) = init("2025-06-18");
    assert_ne!(a, b);
    c.sid = Some(a.clone());
    assert_eq!(c.post(list).status, 200);
    // DELETE ends it
    let r = request(addr, "DELETE", "/mcp", "", &[("mcp-session-id", &a)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(c.post(list).status, 404);
    let r = request(addr, "DELETE", "/mcp", "", &[("mcp-session-id", &a)]);
    assert_eq!(r.status, 404);
    // the other one lives on
    c.sid = Some(b);
    assert_eq!(c.post(list).status, 200);
    // GET (no server-initiated stream), a wrong media type, a version not spoken
    let r = request(addr, "GET", "/mcp", "", &[("accept", "text/event-stream")]);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, DELETE"));
    let r = request(
        addr,
        "POST",
        "/mcp",
        list,
        &[("content-type", "text/plain")],
    );
    assert_eq!(r.status, 415);
    let r = request(
        addr,
        "POST",
        "/mcp",
        list,
        &[
            ("content-type", "application/json"),
            ("mcp-protocol-version", "1999-01-01"),
        ],
    );
    assert_eq!(r.status, 400);
    let r = request(
        addr,
        "POST",
        "/mcp",
        list,
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
    );
    assert_eq!(r.status, 406);
}

fn hash_token(t: &str) -> String {
    let out = corecast_run(&["hash-token"], Some(t.as_bytes()), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "hash-token: {}", out.stderr);
    out.stdout.trim().to_string()
}

#[test]
fn each_tool_checks_the_data_read_grant() {
    let setup = Setup::new();
    let cfg = format!(
        r#"allowed_origins = ["https://app.example"]
{CONFIG}
[[stream]]
name = "u"
schema = "@trade"

[auth]
[auth.principals.carol]
tokens = ["{}"]
grants = {{ "data.read" = ["t"], "data.publish" = ["t"] }}

[auth.principals.dave]
tokens = ["{}"]
grants = {{ "data.read" = ["u"] }}
"#,
        hash_token("carol-token-1"),
        hash_token("dave-token-2")
    );
    let cfg = setup.config(&cfg);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    let carol = "Bearer carol-token-1";
    let dave = "Bearer dave-token-2";
    let r = request(
        addr,
        "POST",
        "/v1/streams/t/ingest",
        &format!("{}\n{}\n", trade(1, "A"), trade(2, "A")),
        &[
            ("authorization", carol),
            ("content-type", "application/x-ndjson"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // no credentials: 401 before anything
    let r = Mcp::new(addr, None).post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#);
    assert_eq!(r.status, 401, "{}", r.text());
    // carol reads t
    let mut c = Mcp::new(addr, Some(carol));
    c.initialize();
    let peek = c.tool("stream_peek", json!({"stream": "t"}));
    assert_eq!(offsets(ok(&peek)), [1, 2]);
    let cat = c.tool("stream_catalog", json!({}));
    assert_eq!(ok(&cat)["streams"].as_array().unwrap().len(), 1);
    assert_eq!(ok(&cat)["streams"][0]["name"], "t");
    let w = c.tool("stream_collect", json!({"stream": "t", "limit": 1}));
    let carols_cursor = ok(&w)["next_cursor"].as_str().unwrap().to_string();
    // dave may not: every tool on t is refused, naming the grant; the catalog hides t
    let mut d = Mcp::new(addr, Some(dave));
    d.initialize();
    let cat = d.tool("stream_catalog", json!({}));
    let names: Vec<&str> = ok(&cat)["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["u"]);
    for (tool, args) in [
        ("stream_catalog", json!({"stream": "t"})),
        ("stream_peek", json!({"stream": "t"})),
        ("stream_collect", json!({"stream": "t"})),
        (
            "stream_collect",
            json!({"stream": "t", "cursor": carols_cursor}),
        ),
        ("stream_state", json!({"stream": "t"})),
        ("stream_subscribe", json!({"stream": "t", "wait_s": 1})),
    ] {
        let (code, msg) = tool_error(&d.tool(tool, args));
        assert_eq!(code, "forbidden", "{tool}");
        assert_eq!(
            msg, "principal dave needs the data.read grant on stream t",
            "{tool}"
        );
    }
    // no lookup before the grant: a stream that does not exist reads the same
    let (code, _) = tool_error(&d.tool("stream_peek", json!({"stream": "nonexistent"})));
    assert_eq!(code, "forbidden");
    // a session is its principal's: carol's id is no session to dave
    let mut d2 = Mcp::new(addr, Some(dave));
    d2.sid = c.sid.clone();
    assert_eq!(
        d2.post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .status,
        404
    );
    let r = request(
        addr,
        "DELETE",
        "/mcp",
        "",
        &[
            ("authorization", dave),
            ("mcp-session-id", c.sid.as_deref().unwrap()),
        ],
    );
    assert_eq!(r.status, 404);
    // GET /mcp (an MCP client's server-to-client stream): 405, also for a principal that
    // reads no stream named mcp
    let r = request(
        addr,
        "GET",
        "/mcp",
        "",
        &[("authorization", dave), ("accept", "text/event-stream")],
    );
    assert_eq!(r.status, 405, "{}", r.text());
    // a page of another origin is refused; a listed one's preflight allows the MCP headers
    let r = request(
        addr,
        "POST",
        "/mcp",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &[
            ("authorization", carol),
            ("content-type", "application/json"),
            ("origin", "https://evil.example"),
            ("mcp-session-id", c.sid.as_deref().unwrap()),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = request(
        addr,
        "OPTIONS",
        "/mcp",
        "",
        &[
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type, mcp-session-id",
            ),
        ],
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("POST, DELETE")
    );
    assert!(r
        .header("access-control-allow-headers")
        .is_some_and(|h| h.contains("mcp-session-id") && h.contains("content-type")));
    let r = request(
        addr,
        "POST",
        "/mcp",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &[
            ("authorization", carol),
            ("content-type", "application/json"),
            ("origin", "https://app.example"),
            ("mcp-session-id", c.sid.as_deref().unwrap()),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    // and carol's session still works
    let w = c.tool(
        "stream_collect",
        json!({"stream": "t", "cursor": carols_cursor}),
    );
    assert_eq!(offsets(ok(&w)), [2]);
}

/// The official Python SDK's client (`pip install mcp`, in `~/.cache/corecast-mcp-venv` or
/// `CORECAST_MCP_PY`): initialize, list, each tool, a refused unbounded request.
#[test]
fn the_official_python_client_runs_a_session() {
    let py = std::env::var("CORECAST_MCP_PY").unwrap_or_else(|_| {
        std::env::var("HOME").unwrap_or_default() + "/.cache/corecast-mcp-venv/bin/python"
    });
    let has = std::process::Command::new(&py)
        .args(["-c", "import mcp.client.streamable_http"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(
            std::env::var_os("CORECAST_MCP_PY").is_none(),
            "CORECAST_MCP_PY={py} lacks the mcp package"
        );
        eprintln!(
            "skipped: no MCP Python SDK at {py} (python3 -m venv ~/.cache/corecast-mcp-venv && ~/.cache/corecast-mcp-venv/bin/pip install mcp==1.26.0)"
        );
        return;
    }
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 3, "A"));
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/client_session.py");
    let url = format!("http://{}/mcp", server.addr);
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(&url)
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["protocol"], "2025-06-18", "{v}");
    assert_eq!(v["server"], "corecast");
    assert_eq!(v["session"], true);
    assert_eq!(
        v["tools"],
        json!([
            "stream_catalog",
            "stream_peek",
            "stream_collect",
            "stream_state",
            "stream_subscribe"
        ])
    );
    assert_eq!(v["catalog"], json!(["t", "live"]));
    assert_eq!(v["peek"], json!([2, 3]));
    assert_eq!(v["collect"], json!([1, 2]));
    assert_eq!(v["collect_next"], json!([3]));
    assert_eq!(v["subscribe"], json!({"count": 0, "cursor": true}));
    assert_eq!(v["state"]["isError"], true);
    assert!(
        v["state"]["text"].as_str().unwrap().contains("not keyed"),
        "{v}"
    );
    assert_eq!(v["unbounded"]["code"], -32602, "{v}");
    assert!(
        v["unbounded"]["message"]
            .as_str()
            .unwrap()
            .contains("limit: 10000 is over the maximum of 500"),
        "{v}"
    );
}

/// `stream_state` on a keyed stream: the windows of the collection in key order, then the
/// token `GET /v1/streams/NAME/changes` takes (the state itself: tests/keyed.rs).
#[test]
fn stream_state_reads_a_keyed_streams_collection_in_windows() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[[stream]]\nname = \"k\"\nschema = \"@trade\"\nkey = [\"symbol\"]\nremove_when = { side = 0 }\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    // symbols s0..s4, twice each (the later row wins); trade_id odd: side 1, kept
    let mut published = Vec::new();
    for round in 0..2 {
        for s in 0..5 {
            published.push(trade(1 + 2 * (round * 5 + s), &format!("s{s}")));
        }
    }
    publish_batch(&server, "k", &published);
    // one removal: an even trade_id has side 0
    publish_batch(&server, "k", &[trade(100, "s2")]);
    let mut c = Mcp::new(server.addr, None);
    c.initialize();
    let first = c.tool("stream_state", json!({"stream": "k", "limit": 3}));
    let w1 = ok(&first).clone();
    assert_eq!(w1["count"], 3);
    let keys = |w: &Value| -> Vec<String> {
        w["entities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["key"][0].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(keys(&w1), ["s0", "s1", "s3"], "key order, s2 removed");
    assert_eq!(w1["entities"][0]["version"], 6, "the later row of s0");
    assert!(w1["token"].is_null());
    let cursor = w1["next_cursor"].as_str().expect("a cursor").to_string();
    let second = c.tool("stream_state", json!({"stream": "k", "cursor": cursor}));
    let w2 = ok(&second).clone();
    assert_eq!(keys(&w2), ["s4"]);
    assert!(w2["next_cursor"].is_null());
    let token = w2["token"].as_str().expect("a token");
    let changes = http_get(server.addr, &format!("/v1/streams/k/changes?token={token}"));
    assert_eq!(changes.status, 200, "{}", changes.text());
    assert_eq!(json_of(&changes)["count"], 0, "nothing since");
    // bounds: refused, never clamped
    let e = c.refused("stream_state", json!({"stream": "k", "limit": 501}));
    assert_eq!(e["code"], -32602, "{e}");
}

/// The raw JSON text at `path` of `body` (what a client that keeps numbers exact reads).
fn raw_at(body: &[u8], path: &[&str]) -> String {
    use sonic_rs::PointerNode;
    let nodes: Vec<PointerNode> = path
        .iter()
        .map(|p| match p.parse::<usize>() {
            Ok(i) => PointerNode::Index(i),
            Err(_) => PointerNode::Key(p.to_string().into()),
        })
        .collect();
    sonic_rs::get_from_slice(body, &nodes)
        .unwrap_or_else(|e| panic!("{path:?} in {}: {e}", String::from_utf8_lossy(body)))
        .as_raw_str()
        .to_string()
}

#[test]
fn numbers_and_ids_come_back_exactly_as_they_are() {
    let setup = Setup::new();
    let server = start(&setup);
    // a float that needs 17 significant digits, an int64 past 2^53
    let row = r#"{"event_ts":1703548799446724905,"price":0.0063289999999999996,"amount":0.30000000000000004,"side":1,"symbol":"A","trade_id":1}"#;
    publish_batch(&server, "t", &[row.to_string()]);
    let pulled = http_get(server.addr, "/v1/streams/t/rows?from=1&limit=1");
    assert_eq!(pulled.status, 200, "{}", pulled.text());
    for n in [
        "1703548799446724905",
        "0.0063289999999999996",
        "0.30000000000000004",
    ] {
        assert!(
            pulled.text().contains(n),
            "/rows lacks {n}: {}",
            pulled.text()
        );
    }
    let mut c = Mcp::new(server.addr, None);
    c.initialize();
    let r = c.post(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"stream_collect","arguments":{"stream":"t","from":1,"limit":1}}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let text: String = serde_json::from_str(&raw_at(&r.body, &["result", "content", "0", "text"]))
        .expect("the text content is a JSON string");
    let structured = raw_at(&r.body, &["result", "structuredContent"]);
    // the two copies are the same bytes, and the numbers are the source's
    assert_eq!(
        structured, text,
        "structuredContent differs from the text content"
    );
    for n in [
        "1703548799446724905",
        "0.0063289999999999996",
        "0.30000000000000004",
    ] {
        assert!(
            structured.contains(n),
            "structuredContent lacks {n}: {structured}"
        );
    }
    let rows_at = |body: &str| raw_at(body.as_bytes(), &["rows"]);
    assert_eq!(
        rows_at(&structured),
        rows_at(&pulled.text()),
        "the rows /rows answers"
    );
    // a tool error carries its body twice too
    let r = c.post(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"stream_peek","arguments":{"stream":"nope"}}}"#,
    );
    let text: String =
        serde_json::from_str(&raw_at(&r.body, &["result", "content", "0", "text"])).unwrap();
    assert_eq!(raw_at(&r.body, &["result", "structuredContent"]), text);

    // ids: echoed as sent, a number past f64's exact integers included
    let r = c.post(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}"#
    );
    let r = c.post(
        r#"[{"jsonrpc":"2.0","id":-1.50,"method":"ping"},{"jsonrpc":"2.0","id":"caf\u00e9","method":"nope"},{"jsonrpc":"2.0","id":18446744073709551616}]"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(raw_at(&r.body, &["0", "id"]), "-1.50");
    assert_eq!(raw_at(&r.body, &["1", "id"]), r#""caf\u00e9""#);
    assert_eq!(raw_at(&r.body, &["2", "id"]), "18446744073709551616");
    assert_eq!(json_of(&r)[2]["error"]["code"], -32600, "{}", r.text());
}

#[test]
fn the_wait_budget_counts_declared_waits_and_initialize_is_checked() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 2, "A"));
    let mut c = Mcp::new(server.addr, None);
    c.initialize();
    // two polls of 30 s: exactly the 60 s of a batch (these answer at once: rows are there);
    // a third of any wait is over, with whole seconds left
    let sub = |id: u32, wait: f64| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"stream_subscribe",
            "arguments":{"stream":"t","from":"earliest","wait_s":wait}}})
    };
    let started = Instant::now();
    let r = c.post(&json!([sub(1, 30.0), sub(2, 30.0), sub(3, 0.5)]).to_string());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no poll waited"
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = json_of(&r);
    assert_eq!(v[0]["result"]["isError"], false, "{v}");
    assert_eq!(
        v[1]["result"]["isError"], false,
        "30 + 30 s fit in a batch: {v}"
    );
    let e = &v[2]["error"];
    assert_eq!(e["data"]["code"], "resource_limit_exceeded", "{v}");
    assert_eq!(e["data"]["maximum"], 0.0, "{v}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("wait_s: 0.5 s is over the 0 s left of this batch"),
        "{v}"
    );
    // initialize: protocolVersion must be a string; initialize is a request, never a notification
    let r = request(
        server.addr,
        "POST",
        "/mcp",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":20250618}}"#,
        &[("content-type", "application/json")],
    );
    let v = json_of(&r);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(
            "params.protocolVersion must be a string such as \"2025-06-18\", not a number"
        ),
        "{v}"
    );
    let r = request(
        server.addr,
        "POST",
        "/mcp",
        r#"{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
        &[("content-type", "application/json")],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let v = json_of(&r);
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("initialize must be a request with an id"),
        "{v}"
    );
}

#[test]
fn one_principal_cannot_evict_anothers_sessions() {
    let setup = Setup::new();
    let cfg = format!(
        "{CONFIG}\n[auth]\n[auth.principals.carol]\ntokens = [\"{}\"]\ngrants = {{ \"data.read\" = [\"t\"] }}\n[auth.principals.mallory]\ntokens = [\"{}\"]\n",
        hash_token("carol-token-1"),
        hash_token("mallory-token-2")
    );
    let cfg = setup.config(&cfg);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut carol = Mcp::new(server.addr, Some("Bearer carol-token-1"));
    carol.initialize();
    let mut mallory = Mcp::new(server.addr, Some("Bearer mallory-token-2"));
    mallory.initialize();
    let first = mallory.sid.clone().unwrap();
    // mallory (no grants at all) opens more sessions than its cap of 256
    for _ in 0..256 {
        mallory.initialize();
    }
    let last = mallory.sid.clone().unwrap();
    assert_eq!(
        carol.rpc("ping", json!({}))["result"],
        json!({}),
        "carol's session lives"
    );
    mallory.sid = Some(first);
    let r = mallory.post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(r.status, 404, "mallory's oldest session went: {}", r.text());
    mallory.sid = Some(last);
    assert_eq!(mallory.rpc("ping", json!({}))["result"], json!({}));
}
