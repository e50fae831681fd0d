//! Authentication and grants (issue 14), against the real binary on loopback: every refusal on
//! every transport comes before the upgrade (no 101, no greeting) and before the stream is
//! looked up; discovery is filtered by grant; cursors are bound to the principal; JWTs
//! (header and cookie) are checked for signature, algorithm and expiry; failures are counted
//! and rate-limited per address; SIGHUP reloads principals and grants; a browser `Origin` not
//! on the list is refused. The official client signs in with `ws://user:pass@host` too
//! (`tests/auth/official_client.py`, when the anchor venv is there).

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use sonic_rs::{JsonContainerTrait, JsonValueTrait};
use support::*;
use tungstenite::client::IntoClientRequest;

const HS_SECRET: &str = "a-test-secret-of-at-least-32-bytes-for-hs256!";
const ALICE_PW: &str = "correct horse battery staple";
const BOB_TOKEN: &str = "bob-token-7f3e2c1a9b8d";

fn hash_password(pw: &str) -> String {
    let out = corecast_run(
        &["hash-password"],
        Some(pw.as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "hash-password: {}", out.stderr);
    out.stdout.trim().to_string()
}

fn hash_token(t: &str) -> String {
    let out = corecast_run(&["hash-token"], Some(t.as_bytes()), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "hash-token: {}", out.stderr);
    out.stdout.trim().to_string()
}

/// The config: `trades` (durable, trade schema), `public` and `secret`; alice reads `trades`
/// and sees its stats; bob publishes and reads `trades` with a token; anonymous reads
/// `public`; JWTs HS256 (also from the `cc_token` cookie).
fn config_text(alice_hash: &str, bob_hash: &str, extra: &str) -> String {
    format!(
        r#"
allowed_origins = ["https://app.example"]

[[stream]]
name = "trades"
schema = "@trade"

[[stream]]
name = "public"

[[stream]]
name = "secret"

[auth]
cookie = "cc_token"
max_failures_per_minute = 1000

[auth.jwt]
algorithm = "HS256"
secret = "{HS_SECRET}"

[auth.principals.alice]
password = "{alice_hash}"
grants = {{ "data.read" = ["trades"], "stats.read" = ["trades"] }}

[auth.principals.bob]
tokens = ["{bob_hash}"]
grants = {{ "data.read" = ["trades"], "data.publish" = ["trades"] }}

[auth.principals.anonymous]
grants = {{ "data.read" = ["public"] }}
{extra}
"#
    )
}

fn basic(user: &str, pw: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"))
    )
}

fn jwt(sub: &str, exp_from_now: i64, grants: Option<&str>, secret: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut claims: serde_json::Value =
        serde_json::json!({"sub": sub, "exp": now + exp_from_now, "iat": now});
    if let Some(g) = grants {
        claims["grants"] = serde_json::from_str(g).unwrap();
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// A raw WebSocket upgrade request with extra headers; returns the whole answer (read to EOF).
fn raw_upgrade(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // a refusal ends the connection; an accepted upgrade stays open (then: what came in 2 s)
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
            Err(e) => panic!("read: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&all).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text, all)
}

fn ws_with(server: &Server, path: &str, headers: &[(&str, &str)]) -> Result<Ws, u16> {
    let mut req = server.url(path).into_client_request().unwrap();
    for (k, v) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut()
            .insert(name, tungstenite::http::HeaderValue::from_str(v).unwrap());
    }
    match tungstenite::connect(req) {
        Ok((ws, _)) => {
            if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
                s.set_read_timeout(Some(Duration::from_secs(10))).ok();
            }
            Ok(ws)
        }
        Err(tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("connect {path}: {e}"),
    }
}

/// A WebSocket to `path` that was let in: its greeting read.
fn greeted(server: &Server, path: &str, headers: &[(&str, &str)]) -> Ws {
    let mut ws = ws_with(server, path, headers)
        .unwrap_or_else(|status| panic!("{path} refused with HTTP {status}"));
    greeting(&mut ws);
    ws
}

fn greeting(ws: &mut Ws) -> sonic_rs::Value {
    let g = recv_text(ws);
    sonic_rs::from_str(&g).unwrap()
}

/// `corecast serve` on a config that must be refused: its output.
fn serve_refused(cfg: &Path, data: &Path) -> CliOut {
    corecast_run(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        None,
        Duration::from_secs(30),
    )
}

/// The data of the SSE stream's `event: end`.
fn sse_end(sse: &mut SseStream) -> String {
    loop {
        match sse.next_event(Duration::from_secs(10)) {
            Some((_, ev, data)) if ev == "end" => return data,
            Some(_) => continue,
            None => panic!("no end event"),
        }
    }
}

/// Sends SIGHUP to the server.
fn sighup(server: &Server) {
    let pid = server.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
}

struct World {
    setup: Setup,
    server: Server,
    alice: String,
    bob: String,
}

fn world(extra: &str) -> World {
    world_edited(extra, |t| t)
}

/// [`world`] with its config text passed through `edit` first.
fn world_edited(extra: &str, edit: impl Fn(String) -> String) -> World {
    let setup = Setup::new();
    let alice = hash_password(ALICE_PW);
    let bob = hash_token(BOB_TOKEN);
    assert!(alice.starts_with("$argon2id$"), "{alice}");
    assert_eq!(bob.len(), 64, "{bob}");
    let cfg = setup.config(&edit(config_text(&alice, &bob, extra)));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    World {
        setup,
        server,
        alice,
        bob,
    }
}

fn json_names(v: &sonic_rs::Value, list_key: &str) -> Vec<String> {
    v.get(list_key)
        .and_then(|x| x.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.get("name").and_then(|n| n.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_websocket_refusal_comes_before_the_upgrade() {
    let w = world("");
    let addr = w.server.addr;
    // no credentials, a stream anonymous may not read: 401 with both challenges, no 101
    let (status, text, _) = raw_upgrade(addr, "/trades", &[]);
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("101"), "no upgrade: {text}");
    assert!(
        text.contains("www-authenticate: Basic realm=\"corecast\""),
        "{text}"
    );
    assert!(
        text.contains("www-authenticate: Bearer realm=\"corecast\""),
        "{text}"
    );
    assert!(text.contains("\"code\":\"unauthorized\""), "{text}");
    assert!(
        text.contains("principal anonymous needs the data.read grant on stream trades"),
        "{text}"
    );
    // a stream that does not exist answers the same: nothing is looked up before the grant
    let (status, text, _) = raw_upgrade(addr, "/no-such-stream", &[]);
    assert_eq!(status, 401, "{text}");
    // anonymous reads public
    let mut ws = ws_with(&w.server, "/public", &[]).expect("anonymous reads public");
    let g = greeting(&mut ws);
    assert_eq!(g.get("stream").and_then(|s| s.as_str()), Some("public"));
    // alice: reads trades; publishing is 403 (authenticated, no grant); wrong password 401
    let alice = basic("alice", ALICE_PW);
    let mut ws = ws_with(&w.server, "/trades?offset=0", &[("authorization", &alice)]).unwrap();
    let g = greeting(&mut ws);
    assert_eq!(g.get("stream").and_then(|s| s.as_str()), Some("trades"));
    let (status, text, _) = raw_upgrade(addr, "/trades?publish", &[("Authorization", &alice)]);
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("principal alice needs the data.publish grant on stream trades"),
        "{text}"
    );
    assert!(!text.contains("www-authenticate"), "{text}");
    let (status, _, _) = raw_upgrade(addr, "/secret", &[("Authorization", &alice)]);
    assert_eq!(status, 403);
    let (status, text, _) = raw_upgrade(
        addr,
        "/trades",
        &[("Authorization", &basic("alice", "wrong"))],
    );
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("unknown user or wrong password"), "{text}");
    let (status, _, _) = raw_upgrade(
        addr,
        "/trades",
        &[("Authorization", &basic("mallory", "x"))],
    );
    assert_eq!(status, 401);
    let (status, text, _) = raw_upgrade(addr, "/trades", &[("Authorization", "Digest abc")]);
    assert_eq!(status, 401);
    assert!(
        text.contains("is not `Basic …` or `Bearer …`") && !text.contains("abc"),
        "{text}"
    );
    // credentials in the query string are never interpreted
    let (status, text, _) = raw_upgrade(addr, &format!("/trades?access_token={BOB_TOKEN}"), &[]);
    assert_eq!(status, 401, "{text}");
    // bob publishes with his token; alice sees the rows
    let bearer = format!("Bearer {BOB_TOKEN}");
    let mut p = greeted(&w.server, "/trades?publish", &[("authorization", &bearer)]);
    let rows: Vec<String> = (1..=3).map(|i| trade(i, "AUTH")).collect();
    let acks = publish_on(&mut p, &rows);
    assert_eq!(acks, vec![Some(1), Some(2), Some(3)]);
    for (i, row) in rows.iter().enumerate() {
        let f = recv_text(&mut ws);
        assert!(
            f.contains(&format!("\"trade_id\":{}", i + 1)),
            "{f} vs {row}"
        );
    }
    let (status, text, _) = raw_upgrade(addr, "/trades", &[("authorization", "Bearer nope")]);
    assert_eq!(status, 401);
    assert!(text.contains("error=\"invalid_token\""), "{text}");
    drop(w);
}

#[test]
fn jwts_from_the_header_and_the_cookie() {
    let w = world("");
    let addr = w.server.addr;
    let good = jwt("carol", 300, Some(r#"{"data.read":["trades"]}"#), HS_SECRET);
    let mut ws = ws_with(
        &w.server,
        "/trades",
        &[("authorization", &format!("Bearer {good}"))],
    )
    .expect("a valid JWT reads trades");
    greeting(&mut ws);
    let (status, _, _) = raw_upgrade(
        addr,
        "/trades?publish",
        &[("authorization", &format!("Bearer {good}"))],
    );
    assert_eq!(status, 403, "the claim grants data.read only");
    // the cookie (what a same-origin browser page sends)
    let cookie = format!("theme=dark; cc_token={good}");
    let mut ws = ws_with(
        &w.server,
        "/trades",
        &[("cookie", &cookie), ("origin", "https://app.example")],
    )
    .expect("a JWT cookie reads trades");
    greeting(&mut ws);
    // expired, bad signature, missing sub, grants claim malformed
    let cases = [
        (
            jwt(
                "carol",
                -120,
                Some(r#"{"data.read":["trades"]}"#),
                HS_SECRET,
            ),
            "expired",
        ),
        (
            jwt(
                "carol",
                300,
                Some(r#"{"data.read":["trades"]}"#),
                "another-secret-of-at-least-32-bytes!!",
            ),
            "signature",
        ),
        (
            jwt("carol", 300, Some(r#"{"data.reed":["trades"]}"#), HS_SECRET),
            "unknown action",
        ),
        (
            jwt("carol", 300, Some(r#"["trades"]"#), HS_SECRET),
            "not an object",
        ),
    ];
    for (token, expect) in cases {
        let (status, text, _) = raw_upgrade(
            addr,
            "/trades",
            &[("authorization", &format!("Bearer {token}"))],
        );
        assert_eq!(status, 401, "{expect}: {text}");
        assert!(text.contains(expect), "{expect}: {text}");
        assert!(text.contains("error=\"invalid_token\""), "{text}");
    }
    // alg confusion: a token signed HS384 is refused by an HS256 broker
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let hs384 = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS384),
        &serde_json::json!({"sub":"carol","exp":now+300}),
        &jsonwebtoken::EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .unwrap();
    let (status, text, _) = raw_upgrade(
        addr,
        "/trades",
        &[("authorization", &format!("Bearer {hs384}"))],
    );
    assert_eq!(status, 401, "{text}");
    // a JWT without a grants claim gets the grants declared for its sub
    let as_alice = jwt("alice", 300, None, HS_SECRET);
    let _ws = greeted(
        &w.server,
        "/trades",
        &[("authorization", &format!("Bearer {as_alice}"))],
    );
    let (status, _, _) = raw_upgrade(
        addr,
        "/secret",
        &[("authorization", &format!("Bearer {as_alice}"))],
    );
    assert_eq!(status, 403);
}

#[test]
fn http_endpoints_refuse_and_filter_by_grant() {
    let w = world("");
    let addr = w.server.addr;
    let alice = basic("alice", ALICE_PW);
    let bearer = format!("Bearer {BOB_TOKEN}");
    // SSE
    let r = http_get_from(addr, None, "/trades/events", &[]);
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.header("www-authenticate").is_some());
    let r = http_get_from(addr, None, "/secret/events", &[("authorization", &alice)]);
    assert_eq!(r.status, 403, "{}", r.text());
    let sse = SseStream::open(addr, None, "/trades/events", &[("authorization", &alice)]);
    assert_eq!(sse.status, 200);
    drop(sse);
    // the catalog lists only what the caller may read
    let r = http_get_from(addr, None, "/v1/streams", &[("authorization", &alice)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json_names(&r.json(), "streams"), vec!["trades".to_string()]);
    let r = http_get_from(addr, None, "/v1/streams", &[]);
    assert_eq!(json_names(&r.json(), "streams"), vec!["public".to_string()]);
    let r = http_get_from(
        addr,
        None,
        "/v1/streams/secret",
        &[("authorization", &alice)],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = http_get_from(
        addr,
        None,
        "/v1/streams/nonexistent/rows",
        &[("authorization", &alice)],
    );
    assert_eq!(r.status, 403, "no lookup before the grant: {}", r.text());
    // /stats and /metrics: alice sees trades only; bob has no stats.read: 403; anonymous: 401
    let r = http_get_from(addr, None, "/stats", &[("authorization", &alice)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json_names(&r.json(), "streams"), vec!["trades".to_string()]);
    let r = http_get_from(addr, None, "/metrics", &[("authorization", &alice)]);
    assert_eq!(r.status, 200);
    let m = r.text();
    assert!(
        m.contains("corecast_rows_in_total{stream=\"trades\"}"),
        "{m}"
    );
    assert!(!m.contains("stream=\"secret\""), "secret is hidden");
    assert!(!m.contains("stream=\"public\""), "public is hidden");
    assert!(m.contains("corecast_auth_failures_total{reason=\"bad_password\"}"));
    let r = http_get_from(addr, None, "/stats", &[("authorization", &bearer)]);
    assert_eq!(r.status, 403, "{}", r.text());
    let r = http_get_from(addr, None, "/metrics", &[]);
    assert_eq!(r.status, 401);
    // a pull cursor issued to bob is refused to alice, from the same address
    let mut p = greeted(&w.server, "/trades?publish", &[("authorization", &bearer)]);
    publish_on(&mut p, &[trade(1, "CUR"), trade(2, "CUR")]);
    let r = http_get_from(
        addr,
        None,
        "/v1/streams/trades/rows?limit=1",
        &[("authorization", &bearer)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let cursor = r
        .json()
        .get("next_cursor")
        .and_then(|c| c.as_str())
        .map(String::from)
        .expect("cursor");
    let path = format!("/v1/streams/trades/rows?limit=1&cursor={cursor}");
    let r = http_get_from(addr, None, &path, &[("authorization", &bearer)]);
    assert_eq!(r.status, 200, "bob resumes: {}", r.text());
    let r = http_get_from(addr, None, &path, &[("authorization", &alice)]);
    assert_eq!(
        r.status,
        400,
        "alice may not use bob's cursor: {}",
        r.text()
    );
    assert!(r.text().contains("cursor"), "{}", r.text());
    // ingest: 403 before the body is read (none is sent)
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /v1/streams/trades/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: {alice}\r\nContent-Type: application/vnd.apache.arrow.stream\r\nContent-Length: 1000000\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
}

#[test]
fn origins_not_on_the_list_are_refused() {
    let w = world("");
    let addr = w.server.addr;
    let (status, text, _) = raw_upgrade(addr, "/public", &[("Origin", "https://evil.example")]);
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("forbidden_origin"), "{text}");
    let _ws = greeted(&w.server, "/public", &[("origin", "https://app.example")]);
    let mut ws = ws_with(&w.server, "/public", &[]).expect("no Origin: not a browser");
    greeting(&mut ws);
    // CORS for the pull API and SSE follows the same list
    let alice = basic("alice", ALICE_PW);
    let r = http_get_from(
        addr,
        None,
        "/v1/streams/trades",
        &[("authorization", &alice), ("origin", "https://app.example")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let r = http_get_from(
        addr,
        None,
        "/v1/streams/trades",
        &[
            ("authorization", &alice),
            ("origin", "https://evil.example"),
        ],
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        None,
        "the page may not read it"
    );
    let sse = SseStream::open(
        addr,
        None,
        "/public/events",
        &[("origin", "https://app.example")],
    );
    assert_eq!(sse.status, 200);
    assert_eq!(
        sse.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    drop(sse);
    // the preflight of a credentialed fetch: no credentials, answered from the list
    let preflight = |origin: &str| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "OPTIONS /v1/streams/trades/rows HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: authorization\r\n\r\n").unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    };
    let ok = preflight("https://app.example");
    assert!(ok.starts_with("HTTP/1.1 204"), "{ok}");
    assert!(
        ok.contains("access-control-allow-headers: authorization"),
        "{ok}"
    );
    assert!(preflight("https://evil.example").starts_with("HTTP/1.1 403"));
}

#[test]
fn failures_are_rate_limited_per_address() {
    let w = world("");
    drop(w);
    let setup = Setup::new();
    let alice = hash_password(ALICE_PW);
    let cfg_text = config_text(&alice, &hash_token(BOB_TOKEN), "")
        .replace(
            "max_failures_per_minute = 1000",
            "max_failures_per_minute = 3",
        )
        .replace(
            "grants = { \"data.read\" = [\"public\"] }",
            "grants = { \"data.read\" = [\"public\"], \"stats.read\" = [\"*\"] }",
        );
    let cfg = setup.config(&cfg_text);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    for _ in 0..3 {
        let (status, _, _) = raw_upgrade(
            addr,
            "/trades",
            &[("Authorization", &basic("alice", "bad"))],
        );
        assert_eq!(status, 401);
    }
    let t = Instant::now();
    let (status, text, _) = raw_upgrade(
        addr,
        "/trades",
        &[("Authorization", &basic("alice", ALICE_PW))],
    );
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("retry-after: "), "{text}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "no password check ran"
    );
    // anonymous requests carry no credentials: not limited
    let _ws = greeted(&server, "/public", &[]);
    let m = http_get_from(addr, None, "/metrics", &[]).text();
    assert!(
        m.contains("corecast_auth_failures_total{reason=\"rate_limited\"} 1"),
        "{m}"
    );
    let _ = setup;
}

#[test]
fn sighup_reloads_principals_and_grants() {
    let w = world("");
    let addr = w.server.addr;
    let alice = basic("alice", ALICE_PW);
    let mut live = greeted(&w.server, "/trades", &[("authorization", &alice)]);
    // take alice's grant away, add dave
    let dave_hash = hash_password("dave-pw");
    let text = config_text(&w.alice, &w.bob, &format!(
        "\n[auth.principals.dave]\npassword = \"{dave_hash}\"\ngrants = {{ \"data.read\" = [\"*\"] }}\n"
    ))
    .replace(
        "grants = { \"data.read\" = [\"trades\"], \"stats.read\" = [\"trades\"] }",
        "grants = { \"stats.read\" = [\"trades\"] }",
    );
    w.setup.config(&text);
    sighup(&w.server);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, _) = raw_upgrade(addr, "/trades", &[("Authorization", &alice)]);
        if status == 403 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never took effect ({status})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ws = greeted(
        &w.server,
        "/secret",
        &[("authorization", &basic("dave", "dave-pw"))],
    );
    // a bad config is refused and the policy kept
    std::fs::write(
        w.setup.tmp.path().join("corecast.toml"),
        "[auth]\nbogus = 1\n",
    )
    .unwrap();
    sighup(&w.server);
    std::thread::sleep(Duration::from_millis(500));
    let _ws = greeted(
        &w.server,
        "/secret",
        &[("authorization", &basic("dave", "dave-pw"))],
    );
    assert!(
        w.server.stderr().contains("SIGHUP: not reloaded"),
        "{}",
        w.server.stderr()
    );
    // the connection admitted before the reload keeps running
    let mut p = greeted(
        &w.server,
        "/trades?publish",
        &[("authorization", &format!("Bearer {BOB_TOKEN}"))],
    );
    publish_on(&mut p, &[trade(7, "HUP")]);
    let f = recv_text(&mut live);
    assert!(f.contains("\"trade_id\":7"), "{f}");
}

#[test]
fn bad_auth_config_is_refused_naming_the_key() {
    let setup = Setup::new();
    let data = setup.data();
    let cases: [(&str, &str); 6] = [
        (
            "[auth.principals.alice]\npassword = \"hunter2\"\n",
            "auth.principals.alice.password",
        ),
        (
            "[auth.principals.alice]\ntokens = [\"abc\"]\n",
            "auth.principals.alice.tokens[0]",
        ),
        (
            "[auth.principals.alice]\ngrants = { \"data.write\" = [\"trades\"] }\n",
            "unknown action \"data.write\"",
        ),
        (
            "[auth.jwt]\nalgorithm = \"HS256\"\nsecret = \"short\"\n",
            "at least 32 bytes",
        ),
        ("[auth.jwt]\nalgorithm = \"none\"\n", "auth.jwt.algorithm"),
        (
            "allowed_origins = [\"https://a.example/x\"]\n",
            "allowed_origins",
        ),
    ];
    for (body, expect) in cases {
        let cfg = setup.config(&format!("{body}\n[[stream]]\nname = \"t\"\n"));
        let out = serve_refused(&cfg, &data);
        assert_eq!(out.code, Some(2), "{body}: {}", out.stderr);
        assert!(out.stderr.contains(expect), "{body}: {}", out.stderr);
        assert!(
            !out.stderr.contains("hunter2"),
            "the secret is never echoed: {}",
            out.stderr
        );
    }
    // the CLI refuses an empty password
    let out = corecast_run(&["hash-password"], Some(b""), Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn an_open_broker_says_so_once() {
    let setup = Setup::new();
    let server = Server::start(None, &setup.data(), &[]);
    let mut ws = ws_connect(&server.url("/trades"));
    greeting(&mut ws);
    let log = server.stderr();
    assert_eq!(log.matches("no [auth] section").count(), 1, "{log}");
}

#[test]
fn the_official_client_signs_in_with_userinfo() {
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let w = world("");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/auth/official_client.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .arg(w.server.addr.to_string())
        .arg(ALICE_PW)
        .arg(BOB_TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "official_client.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(report["rows"], 3, "{report}");
    assert_eq!(report["wrong_password_status"], 401, "{report}");
    assert_eq!(report["publish_denied_status"], 403, "{report}");
}

const ERIN_TOKEN: &str = "erin-token-55aa";

fn erin_and_admin(admin_hash: &str) -> String {
    format!(
        r#"
[auth.principals.erin]
tokens = ["{}"]
grants = {{ "data.read" = ["trades"], "data.publish" = ["trades"] }}
max_connections = 3
max_subscriptions = 2
max_publishers = 1

[auth.principals.admin]
password = "{admin_hash}"
grants = {{ "control.mutate" = ["*"] }}
"#,
        hash_token(ERIN_TOKEN)
    )
}

#[test]
fn a_principal_over_its_caps_gets_429_before_the_upgrade() {
    let w = world(&erin_and_admin(&hash_password("admin-pw")));
    let addr = w.server.addr;
    let erin = format!("Bearer {ERIN_TOKEN}");
    let h = [("authorization", erin.as_str())];
    let mut s1 = greeted(&w.server, "/trades", &h);
    let _s2 = greeted(&w.server, "/trades", &h);
    let (status, text, _) = raw_upgrade(addr, "/trades", &[("Authorization", &erin)]);
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("max_subscriptions of 2"), "{text}");
    assert!(text.contains("retry-after: 5"), "{text}");
    let _p1 = greeted(&w.server, "/trades?publish", &h);
    // three connections open: a fourth of any kind is over max_connections
    let r = http_get_from(addr, None, "/v1/streams/trades", &h);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("max_connections of 3"), "{}", r.text());
    // one closes: room again (once the server has seen the close)
    s1.close(None).ok();
    let _ = s1.read();
    drop(s1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ws_with(&w.server, "/trades", &h) {
            Ok(mut s) => {
                greeting(&mut s);
                break;
            }
            Err(429) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(code) => panic!("no room after a close: {code}"),
        }
    }
    // caps are per principal: alice is not affected
    let _a = greeted(
        &w.server,
        "/trades",
        &[("authorization", &basic("alice", ALICE_PW))],
    );
}

fn revoke_cli(addr: SocketAddr, who: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    cli_env(&["revoke", &format!("http://{addr}"), who], b"", env)
}

#[test]
fn revoking_a_principal_closes_its_sockets_and_refuses_it_until_reload() {
    let w = world(&erin_and_admin(&hash_password("admin-pw")));
    let addr = w.server.addr;
    let erin = format!("Bearer {ERIN_TOKEN}");
    let h = [("authorization", erin.as_str())];
    let mut sub = greeted(&w.server, "/trades", &h);
    let mut publ = greeted(&w.server, "/trades?publish", &h);
    let mut sse = SseStream::open(addr, None, "/trades/events", &h);
    assert_eq!(sse.status, 200);
    let mut alice = greeted(
        &w.server,
        "/trades",
        &[("authorization", &basic("alice", ALICE_PW))],
    );
    // alice may not revoke (no control.mutate), nor may anyone without credentials
    let (code, _, err) = revoke_cli(
        addr,
        "erin",
        &[("CORECAST_USER", "alice"), ("CORECAST_PASSWORD", ALICE_PW)],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("HTTP 403"), "{err}");
    let (code, _, err) = revoke_cli(addr, "erin", &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("HTTP 401"), "{err}");
    let t = Instant::now();
    let (code, out, err) = revoke_cli(
        addr,
        "erin",
        &[
            ("CORECAST_USER", "admin"),
            ("CORECAST_PASSWORD", "admin-pw"),
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("revoked erin: 3 open connection(s)"), "{out}");
    assert_eq!(
        recv_close(&mut sub),
        (1008, r#"{"error":"revoked"}"#.to_string())
    );
    assert_eq!(
        recv_close(&mut publ),
        (1008, r#"{"error":"revoked"}"#.to_string())
    );
    let end = sse_end(&mut sse);
    assert_eq!(end, r#"{"reason":"revoked"}"#);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "closed promptly: {:?}",
        t.elapsed()
    );
    // refused from now on, with a 403 that says why; alice keeps reading
    let (status, text, _) = raw_upgrade(addr, "/trades", &[("Authorization", &erin)]);
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("was revoked"), "{text}");
    let mut p = greeted(
        &w.server,
        "/trades?publish",
        &[("authorization", &format!("Bearer {BOB_TOKEN}"))],
    );
    publish_on(&mut p, &[trade(42, "REV")]);
    assert!(recv_text(&mut alice).contains("\"trade_id\":42"));
    // SIGHUP reloads the config: erin is back
    sighup(&w.server);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ws_with(&w.server, "/trades", &h) {
            Ok(mut s) => {
                greeting(&mut s);
                break;
            }
            Err(403) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(code) => panic!("erin not back after SIGHUP: {code}"),
        }
    }
}

#[test]
fn sessions_end_at_the_age_limit_and_at_the_jwt_expiry() {
    let extra = format!(
        "\n[auth.principals.frank]\ntokens = [\"{}\"]\ngrants = {{ \"data.read\" = [\"trades\"] }}\nmax_subscription_age_s = 2\n",
        hash_token("frank-token")
    );
    // a JWT session ends at exp + leeway_s (the leeway it was admitted with): 1 s here
    let w = world_edited(&extra, |t| {
        t.replace("secret = \"", "leeway_s = 1\nsecret = \"")
    });
    let addr = w.server.addr;
    let frank = [("authorization", "Bearer frank-token")];
    let t = Instant::now();
    let mut ws = greeted(&w.server, "/trades", &frank);
    let mut sse = SseStream::open(addr, None, "/trades/events", &frank);
    assert_eq!(sse.status, 200);
    assert_eq!(
        recv_close(&mut ws),
        (1008, r#"{"error":"expired"}"#.to_string())
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    let end = sse_end(&mut sse);
    assert_eq!(end, r#"{"reason":"expired"}"#);
    // a JWT's exp ends its sessions too (the client reconnects with a fresh token)
    let token = jwt("carol", 3, Some(r#"{"data.read":["trades"]}"#), HS_SECRET);
    let t = Instant::now();
    let mut ws = greeted(
        &w.server,
        "/trades",
        &[("authorization", &format!("Bearer {token}"))],
    );
    assert_eq!(
        recv_close(&mut ws),
        (1008, r#"{"error":"expired"}"#.to_string())
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(7),
        "{waited:?}"
    );
    // alice has no age limit: still reading
    let _a = greeted(
        &w.server,
        "/trades",
        &[("authorization", &basic("alice", ALICE_PW))],
    );
}

/// The age limit ends a subscription that rows keep arriving for, too: a caught-up subscriber
/// whose frames the hub writes to its socket directly (no wake-up per row) still closes 1008
/// `expired` at its deadline, after a contiguous run of rows.
#[test]
fn a_subscription_fed_rows_without_pause_still_ends_at_the_age_limit() {
    let extra = format!(
        "\n[auth.principals.frank]\ntokens = [\"{}\"]\ngrants = {{ \"data.read\" = [\"trades\"] }}\nmax_subscription_age_s = 2\n",
        hash_token("frank-token")
    );
    let w = world_edited(&extra, |t| t.to_string());
    let frank = [("authorization", "Bearer frank-token")];
    let bob = format!("Bearer {BOB_TOKEN}");
    let mut p = greeted(&w.server, "/trades?publish", &[("authorization", &bob)]);
    let t = Instant::now();
    let mut ws = greeted(&w.server, "/trades", &frank);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && k < 400 {
                support::publish_on(&mut p, &[trade(k, "FEED")]);
                k += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            k
        })
    };
    let mut offsets = Vec::new();
    let close = loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(f)) => {
                offsets.push(f[1..f.find(',').unwrap()].parse::<u64>().unwrap())
            }
            Ok(tungstenite::Message::Close(Some(c))) => {
                break (u16::from(c.code), c.reason.to_string())
            }
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    let waited = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let published = publisher.join().unwrap();
    assert_eq!(close, (1008, r#"{"error":"expired"}"#.to_string()));
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert!(!offsets.is_empty() && published > 0);
    let first = offsets[0];
    assert_eq!(
        offsets,
        (first..first + offsets.len() as u64).collect::<Vec<_>>(),
        "contiguous"
    );
}

/// Regressions found by trying to break the layer.
#[test]
fn what_a_hostile_client_tried_is_refused() {
    let extra = format!(
        "{}\n[[stream]]\nname = \"stats\"\n",
        erin_and_admin(&hash_password("admin-pw"))
    );
    // the streams must come before [auth] in TOML: put `stats` first
    let w = {
        let setup = Setup::new();
        let alice = hash_password(ALICE_PW);
        let bob = hash_token(BOB_TOKEN);
        let text = config_text(&alice, &bob, "");
        let (head, tail) = text.split_at(text.find("[auth]").unwrap());
        let cfg = setup.config(&format!(
            "{head}[[stream]]\nname = \"stats\"\n\n{tail}{}",
            extra.replace("\n[[stream]]\nname = \"stats\"\n", "")
        ));
        let server = Server::start(Some(&cfg), &setup.data(), &[]);
        World {
            setup,
            server,
            alice,
            bob,
        }
    };
    let addr = w.server.addr;
    let alice = basic("alice", ALICE_PW);
    // a stream named `stats`, asked for as SSE, needs data.read on it (not any stats.read)
    let r = http_get_from(
        addr,
        None,
        "/stats?offset=0",
        &[("authorization", &alice), ("accept", "text/event-stream")],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        r.text().contains("data.read grant on stream stats"),
        "{}",
        r.text()
    );
    // a stream the caller may not read looks like no stream at all
    let r = http_get_from(addr, None, "/secret", &[]);
    assert_eq!(r.status, 404);
    assert!(r.text().contains("no such path"), "{}", r.text());
    // a grant on a stream that does not exist: its 4404 lists only readable streams
    let ghost = jwt(
        "ghost",
        300,
        Some(r#"{"data.read":["ghost","public"]}"#),
        HS_SECRET,
    );
    let mut ws = ws_with(
        &w.server,
        "/ghost",
        &[("authorization", &format!("Bearer {ghost}"))],
    )
    .unwrap();
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4404);
    assert!(
        !reason.contains("secret") && !reason.contains("trades"),
        "{reason}"
    );
    assert!(reason.contains("public"), "{reason}");
    // a revocation needs a JSON content type (no cross-site form) and, from a page, a listed origin
    let admin = basic("admin", "admin-pw");
    let post = |headers: &str| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "POST /v1/principals/erin/revoke HTTP/1.1\r\nHost: x\r\nAuthorization: {admin}\r\n{headers}Content-Length: 0\r\n\r\n").unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    };
    assert!(post("Content-Type: text/plain\r\n").starts_with("HTTP/1.1 415"));
    assert!(
        post("Content-Type: application/json\r\nOrigin: https://evil.example\r\n")
            .starts_with("HTTP/1.1 403")
    );
    // a JWT principal whose sub holds '/' can be revoked
    let sub = "https://idp.example/users/42";
    let token = jwt(sub, 300, Some(r#"{"data.read":["trades"]}"#), HS_SECRET);
    let mut s = greeted(
        &w.server,
        "/trades",
        &[("authorization", &format!("Bearer {token}"))],
    );
    let (code, out, err) = revoke_cli(
        addr,
        sub,
        &[
            ("CORECAST_USER", "admin"),
            ("CORECAST_PASSWORD", "admin-pw"),
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        recv_close(&mut s),
        (1008, r#"{"error":"revoked"}"#.to_string())
    );
    // a waiting long poll ends when its principal is revoked
    let erin = format!("Bearer {ERIN_TOKEN}");
    let poller = std::thread::spawn(move || {
        let t = Instant::now();
        let r = http_get_from(
            addr,
            None,
            "/v1/streams/trades/rows?from=latest&wait=20",
            &[("authorization", &erin)],
        );
        (r.status, r.text(), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let (code, _, err) = revoke_cli(
        addr,
        "erin",
        &[
            ("CORECAST_USER", "admin"),
            ("CORECAST_PASSWORD", "admin-pw"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (status, text, took) = poller.join().unwrap();
    assert_eq!(status, 403, "{text}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn a_burst_of_wrong_passwords_runs_no_more_checks_than_the_limit() {
    let setup = Setup::new();
    let cfg_text = config_text(&hash_password(ALICE_PW), &hash_token(BOB_TOKEN), "").replace(
        "max_failures_per_minute = 1000",
        "max_failures_per_minute = 5",
    );
    let cfg = setup.config(&cfg_text);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..30)
            .map(|_| {
                s.spawn(move || {
                    raw_upgrade(
                        addr,
                        "/trades",
                        &[("Authorization", &basic("alice", "bad"))],
                    )
                    .0
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert!(checked <= 5, "{statuses:?}");
    assert_eq!(checked + limited, 30, "{statuses:?}");
}

#[test]
fn a_syntax_error_on_a_secret_line_does_not_print_the_secret() {
    let setup = Setup::new();
    let cfg = setup.config(&format!(
        "[[stream]]\nname = \"t\"\n[auth.jwt]\nalgorithm = \"HS256\"\nsecret = \"{HS_SECRET}\n"
    ));
    let data = setup.data();
    let out = serve_refused(&cfg, &data);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("secret = <redacted>"), "{}", out.stderr);
    assert!(!out.stderr.contains(HS_SECRET), "{}", out.stderr);
}

#[test]
fn max_connections_counts_admitted_connections_only() {
    let setup = Setup::new();
    let text = config_text(&hash_password(ALICE_PW), &hash_token(BOB_TOKEN), "").replace(
        "allowed_origins = [",
        "max_connections = 2\nallowed_origins = [",
    );
    let cfg = setup.config(&text);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    // clients that never finish a head hold no place
    let idle: Vec<_> = (0..5)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let _a = greeted(&server, "/public", &[]);
    let _b = greeted(&server, "/public", &[]);
    let (status, text, _) = raw_upgrade(addr, "/public", &[]);
    assert_eq!(status, 429, "{text}");
    assert!(
        text.contains("too_many_connections") && text.contains("retry-after: 1"),
        "{text}"
    );
    drop(idle);
}

/// `corecast ARGS` with `env` set (and no credentials inherited from the test's environment).
fn cli_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    use std::process::Stdio;
    let mut child = std::process::Command::new(corecast_bin())
        .args(args)
        .env("CORECAST_LOG", "warn")
        .env_remove("CORECAST_TOKEN")
        .env_remove("CORECAST_USER")
        .env_remove("CORECAST_PASSWORD")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_signs_in_from_the_url_or_the_environment() {
    let w = world("");
    let addr = w.server.addr;
    let rows: String = (1..=20).map(|i| trade(i, "CLI") + "\n").collect();
    let url = format!("ws://{addr}/trades");
    // no credentials: refused (exit 1), with what to do
    let (code, _, err) = cli_env(&["pub", &url], rows.as_bytes(), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("HTTP 401") && err.contains("CORECAST_TOKEN"),
        "{err}"
    );
    // bob's token from the environment publishes
    let (code, out, err) = cli_env(
        &["pub", &url],
        rows.as_bytes(),
        &[("CORECAST_TOKEN", BOB_TOKEN)],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    // alice reads with her password in the URL (percent-encoded), every row, in order
    let with_userinfo = format!("ws://alice:{}@{addr}/trades", ALICE_PW.replace(' ', "%20"));
    let (code, out, err) = cli_env(
        &[
            "sub",
            &with_userinfo,
            "--offset",
            "1",
            "--count",
            "20",
            "--rows-only",
        ],
        b"",
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), 20, "{out}");
    for (i, line) in got.iter().enumerate() {
        assert!(line.contains(&format!("\"trade_id\":{}", i + 1)), "{line}");
    }
    // ... and with CORECAST_USER/CORECAST_PASSWORD, through tail
    let (code, out, err) = cli_env(
        &["tail", &url, "-n", "3", "--count", "3", "--rows-only"],
        b"",
        &[("CORECAST_USER", "alice"), ("CORECAST_PASSWORD", ALICE_PW)],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    // alice may not publish: 403, exit 1
    let (code, _, err) = cli_env(&["pub", &with_userinfo], rows.as_bytes(), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("HTTP 403"), "{err}");
    // a bad URL with a password never shows it
    let (code, _, err) = cli_env(
        &["sub", &format!("ws://alice:hunter2@{addr}/a/b")],
        b"",
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        !err.contains("hunter2") && err.contains("alice:***@"),
        "{err}"
    );
    // ingest takes the same credentials
    let file = w.setup.tmp.path().join("more.jsonl");
    let more: String = (21..=30).map(|i| trade(i, "CLI") + "\n").collect();
    std::fs::write(&file, more).unwrap();
    let f = file.to_str().unwrap();
    let (code, _, err) = cli_env(&["ingest", &url, "--file", f], b"", &[]);
    assert_eq!(code, Some(1), "{err}");
    let (code, out, err) = cli_env(
        &["ingest", &url, "--file", f],
        b"",
        &[("CORECAST_TOKEN", BOB_TOKEN)],
    );
    assert_eq!(code, Some(0), "{out}{err}");
}

#[test]
fn an_age_limit_per_grant_ends_only_the_sessions_of_that_grant() {
    let extra = format!(
        "\n[auth.principals.gina]\ntokens = [\"{}\"]\ngrants = {{ \"data.read\" = [\"trades\"], \"data.publish\" = [\"trades\"] }}\nmax_subscription_age_s = {{ \"data.read\" = 2 }}\n",
        hash_token("gina-token")
    );
    let w = world(&extra);
    let gina = [("authorization", "Bearer gina-token")];
    let mut sub = greeted(&w.server, "/trades", &gina);
    let mut publ = greeted(&w.server, "/trades?publish", &gina);
    assert_eq!(
        recv_close(&mut sub),
        (1008, r#"{"error":"expired"}"#.to_string())
    );
    std::thread::sleep(Duration::from_millis(500));
    // the publisher (data.publish has no age limit) carries on
    let acks = publish_on(&mut publ, &[trade(1, "AGE")]);
    assert_eq!(acks.len(), 1);
}

fn openssl(args: &[&str], dir: &Path) {
    let ok = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "openssl {args:?} (CI installs openssl)");
}

#[test]
fn rs256_and_es256_jwts_check_against_a_public_key() {
    for (alg, algorithm, gen) in [
        (
            "RS256",
            jsonwebtoken::Algorithm::RS256,
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                "key.pem",
            ][..],
        ),
        (
            "ES256",
            jsonwebtoken::Algorithm::ES256,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "key.pem",
            ][..],
        ),
    ] {
        let setup = Setup::new();
        let dir = setup.tmp.path();
        openssl(gen, dir);
        openssl(
            &["pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"],
            dir,
        );
        let cfg = setup.config(&format!(
            "[[stream]]\nname = \"trades\"\n[auth.jwt]\nalgorithm = \"{alg}\"\npublic_key = \"pub.pem\"\n"
        ));
        let server = Server::start(Some(&cfg), &setup.data(), &[]);
        let pem = std::fs::read(dir.join("key.pem")).unwrap();
        let key = match algorithm {
            jsonwebtoken::Algorithm::RS256 => jsonwebtoken::EncodingKey::from_rsa_pem(&pem),
            _ => jsonwebtoken::EncodingKey::from_ec_pem(&pem),
        }
        .unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let token = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(algorithm),
            &serde_json::json!({"sub":"svc","exp":now+300,"grants":{"data.read":["trades"]}}),
            &key,
        )
        .unwrap();
        let mut ws = ws_with(
            &server,
            "/trades",
            &[("authorization", &format!("Bearer {token}"))],
        )
        .unwrap_or_else(|s| panic!("{alg}: {s}"));
        greeting(&mut ws);
        // a token signed with another key of the same kind is refused
        let other = Setup::new();
        openssl(gen, other.tmp.path());
        let pem2 = std::fs::read(other.tmp.path().join("key.pem")).unwrap();
        let key2 = match algorithm {
            jsonwebtoken::Algorithm::RS256 => jsonwebtoken::EncodingKey::from_rsa_pem(&pem2),
            _ => jsonwebtoken::EncodingKey::from_ec_pem(&pem2),
        }
        .unwrap();
        let forged = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(algorithm),
            &serde_json::json!({"sub":"svc","exp":now+300,"grants":{"data.read":["trades"]}}),
            &key2,
        )
        .unwrap();
        let (status, text, _) = raw_upgrade(
            server.addr,
            "/trades",
            &[("authorization", &format!("Bearer {forged}"))],
        );
        assert_eq!(status, 401, "{alg}: {text}");
        assert!(text.contains("signature"), "{alg}: {text}");
    }
}
