//! `GET /ui` in a real browser: headless Debian chromium driven by playwright-core
//! (tests/ui/check_ui.mjs) against the real binary. The page loads and lists the streams, the
//! rate sparkline moves while rows are published, the live tail shows those rows (checked by
//! value), a `where=` filter narrows it, pause holds it and resume continues it, and after a
//! broker restart (same port, same data directory) the tail goes on with no gap and no
//! duplicate; a pause before any row resumes with nothing skipped, a live-only stream's rows
//! (no offset) are shown with their int64 digits exact, a refused `where=` and a 503 with
//! `Retry-After: 30` are reported with the server's message (no retry loop, the wait honoured),
//! and with `[auth]` a reader revoked while it tails sees why and the tail stops. The script
//! writes a screenshot (`target/tmp/ui.png`, or `CORECAST_UI_SCREENSHOT`).
//!
//! Needs node, playwright-core (in `CORECAST_UI_NODE_MODULES`, default
//! `~/.cache/corecast-ui/node_modules`; `.ci/run` installs it) and chromium; without them the
//! browser test is skipped with the reason printed, unless `CORECAST_REQUIRE_UI` is set (CI sets
//! it), when it fails instead. The assets' own checks need none of that.
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const CONFIG: &str = r#"
[sse]
retry_ms = 200
max_per_client = 6
[[stream]]
name = "t"
schema = "@trade"
[[stream]]
name = "u"
schema = "@trade"
[[stream]]
name = "live"
durable = false
"#;

/// Opens SSE streams of `stream` from this address until the server refuses one (503, its
/// per-client cap) twice in a row, a moment apart; returns the ones it let in, held open.
fn fill_sse(addr: std::net::SocketAddr, stream: &str) -> Vec<std::net::TcpStream> {
    use std::io::Read;
    let mut held = Vec::new();
    let mut refused = 0;
    while refused < 2 {
        assert!(held.len() < 64, "the SSE cap never refused");
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        write!(
            s,
            "GET /{stream}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("send");
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n") && head.len() < 256 {
            match s.read(&mut b) {
                Ok(1) => head.push(b[0]),
                _ => break,
            }
        }
        let line = String::from_utf8_lossy(&head).into_owned();
        if line.starts_with("HTTP/1.1 200") {
            held.push(s);
            refused = 0;
        } else {
            assert!(
                line.starts_with("HTTP/1.1 503"),
                "an SSE stream answered {line:?}"
            );
            refused += 1;
            std::thread::sleep(Duration::from_millis(700));
        }
    }
    held
}

fn which(names: &[&str]) -> Option<String> {
    names.iter().find_map(|c| {
        Command::new("which")
            .arg(c)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    })
}

fn node_modules() -> PathBuf {
    match std::env::var_os("CORECAST_UI_NODE_MODULES") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/corecast-ui/node_modules"),
    }
}

/// node, the playwright-core directory and chromium; `None` (after printing why, or failing
/// under `CORECAST_REQUIRE_UI`) when one is missing.
fn browser_kit() -> Option<(String, PathBuf, String)> {
    let modules = node_modules();
    let missing = match (
        which(&["node", "nodejs"]),
        modules.join("playwright-core/package.json").is_file(),
        which(&["chromium", "chromium-browser", "google-chrome"]),
    ) {
        (Some(node), true, Some(chrome)) => return Some((node, modules, chrome)),
        (None, _, _) => "no node (apt-get install -y nodejs npm)".to_string(),
        (_, false, _) => format!(
            "no playwright-core in {} (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix {} playwright-core; .ci/run does it)",
            modules.display(),
            modules.parent().map_or(String::new(), |p| p.display().to_string())
        ),
        (_, _, None) => "no chromium (apt-get install -y chromium)".to_string(),
    };
    assert!(
        std::env::var_os("CORECAST_REQUIRE_UI").is_none(),
        "CORECAST_REQUIRE_UI is set but the browser test cannot run: {missing}"
    );
    eprintln!("SKIPPED: the /ui browser test: {missing}");
    None
}

fn trade_rows(from: i64, count: i64) -> Vec<String> {
    (from..from + count)
        .map(|i| trade(i, if i % 2 == 0 { "A" } else { "B" }))
        .collect()
}

/// Restarts a stopped server at its old address (the port may be held briefly: retry).
fn restart_at(cfg: &std::path::Path, data: &std::path::Path, addr: &str) -> Server {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match try_start_server_at(Some(cfg), data, addr) {
            Ok(s) => return s,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot restart on {addr}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[test]
fn the_page_lists_streams_tails_filters_and_survives_a_restart() {
    let shot = std::env::var_os("CORECAST_UI_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui.png"));
    if !browser_check(CONFIG, "main", &shot, &[]) {
        return;
    }
    let png = std::fs::metadata(&shot).expect("the screenshot").len();
    eprintln!("screenshot {} ({png} bytes)", shot.display());
}

/// With `[auth]`, a reader signed in with its password (the browser's Basic prompt): once it
/// is revoked, the tail stops and the status lines say why (the server's "revoked"), with no
/// retry loop.
#[test]
fn a_revoked_reader_sees_why_and_the_tail_stops() {
    const ADMIN: &str = "admin-token-0123456789";
    const PASSWORD: &str = "reader password 1";
    let hashed = corecast_run(
        &["hash-password"],
        Some(PASSWORD.as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(hashed.code, Some(0), "hash-password: {}", hashed.stderr);
    let config = format!(
        "{CONFIG}\n[auth]\n[auth.principals.reader]\npassword = \"{}\"\ngrants = {{ \"data.read\" = [\"t\"], \"stats.read\" = [\"t\"] }}\n[auth.principals.admin]\ntokens = [\"{}\"]\ngrants = {{ \"control.mutate\" = [\"*\"], \"data.publish\" = [\"*\"] }}\n",
        hashed.stdout.trim(),
        hash_token(ADMIN)
    );
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-revoked.png");
    browser_check(
        &config,
        "revoke",
        &shot,
        &[
            ("CORECAST_UI_PASSWORD", PASSWORD),
            ("CORECAST_UI_ADMIN", ADMIN),
        ],
    );
}

/// Runs check_ui.mjs in `mode` against a broker of `config`, doing the steps it asks for;
/// false when the browser kit is missing (the test is skipped).
fn browser_check(config: &str, mode: &str, shot: &std::path::Path, env: &[(&str, &str)]) -> bool {
    let Some((node, modules, chrome)) = browser_kit() else {
        return false;
    };
    let setup = Setup::new();
    let cfg = setup.config(config);
    let mut server = Some(Server::start(Some(&cfg), &setup.data(), &[]));
    let addr = server.as_ref().unwrap().addr;
    let admin = env
        .iter()
        .find(|(k, _)| *k == "CORECAST_UI_ADMIN")
        .map(|(_, v)| format!("Bearer {v}"));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/ui/check_ui.mjs");
    let started = Instant::now();
    let mut child = Command::new(node)
        .arg(&script)
        .env("CORECAST_UI_BASE", format!("http://{addr}"))
        .env("CORECAST_UI_CHROMIUM", &chrome)
        .env("CORECAST_UI_NODE_MODULES", &modules)
        .env("CORECAST_UI_SCREENSHOT", shot)
        .env("CORECAST_UI_MODE", mode)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start node");
    struct Kill(Option<std::process::Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut to_node = child.stdin.take().expect("stdin");
    let from_node = BufReader::new(child.stdout.take().expect("stdout"));
    let mut guard = Kill(Some(child));
    let mut sse_held = Vec::new();
    // the script's steps: one JSON command per line, answered "ok" once done
    for line in from_node.lines() {
        let line = line.expect("read the script's stdout");
        let cmd: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("check_ui.mjs wrote {line:?}, not a command: {e}"));
        let n = |k: &str| cmd[k].as_i64().unwrap_or_else(|| panic!("{k} in {line}"));
        let srv = server.as_ref().expect("a running server");
        match cmd["do"].as_str() {
            Some("publish") if admin.is_some() => {
                let stream = cmd["stream"].as_str().expect("stream");
                let body: String = trade_rows(n("from"), n("count"))
                    .iter()
                    .map(|r| format!("{r}\n"))
                    .collect();
                let r = post(
                    addr,
                    &format!("/v1/streams/{stream}/ingest"),
                    &body,
                    admin.as_deref(),
                );
                assert!(r.starts_with("HTTP/1.1 200"), "ingest: {r}");
            }
            Some("publish") => {
                let stream = cmd["stream"].as_str().expect("stream");
                publish_batch(srv, stream, &trade_rows(n("from"), n("count")));
            }
            Some("revoke") => {
                let who = cmd["who"].as_str().expect("who");
                let r = post(
                    addr,
                    &format!("/v1/principals/{who}/revoke"),
                    "{}",
                    admin.as_deref(),
                );
                assert!(r.starts_with("HTTP/1.1 200"), "revoke: {r}");
            }
            Some("trickle") => {
                let stream = cmd["stream"].as_str().expect("stream");
                let (from, per) = (n("from"), n("per"));
                for b in 0..n("batches") {
                    publish_batch(srv, stream, &trade_rows(from + b * per, per));
                    std::thread::sleep(Duration::from_millis(n("gap_ms") as u64));
                }
            }
            Some("publish_raw") => {
                let stream = cmd["stream"].as_str().expect("stream");
                let rows: Vec<String> = cmd["rows"]
                    .as_array()
                    .expect("rows")
                    .iter()
                    .map(|r| r.as_str().expect("a row's JSON text").to_string())
                    .collect();
                publish_batch(srv, stream, &rows);
            }
            Some("fill_sse") => {
                sse_held = fill_sse(srv.addr, cmd["stream"].as_str().expect("stream"));
            }
            Some("release_sse") => {
                sse_held.clear();
                std::thread::sleep(Duration::from_millis(500));
            }
            Some("restart") => {
                assert_eq!(server.take().unwrap().stop(), Some(0));
                server = Some(restart_at(&cfg, &setup.data(), &addr.to_string()));
            }
            _ => panic!("check_ui.mjs asked for {line}"),
        }
        writeln!(to_node, "ok").expect("answer the script");
    }
    let status = guard.0.take().unwrap().wait().expect("wait for node");
    assert!(
        status.success(),
        "check_ui.mjs ({mode}) failed ({status}); see its lines above"
    );
    eprintln!(
        "the /ui browser check ({mode}) passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    true
}

/// `POST path` with a JSON or JSON-lines body and a credential; the whole answer as text.
fn post(addr: std::net::SocketAddr, path: &str, body: &str, auth: Option<&str>) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let ctype = if body.starts_with('{') && !body.contains('\n') {
        "application/json"
    } else {
        "application/x-ndjson"
    };
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok();
    answer
}

#[test]
fn the_assets_are_served_from_the_binary() {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut total = 0;
    for (path, ctype) in [
        ("/ui", "text/html; charset=utf-8"),
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
    ] {
        let r = http_get(server.addr, path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(ctype), "{path}");
        assert!(
            r.header("content-security-policy")
                .is_some_and(|v| v.contains("connect-src 'self'")),
            "{path}"
        );
        if path != "/ui/" {
            total += r.body.len();
        }
    }
    assert!(total <= 200 * 1024, "the page weighs {total} bytes");
    let r = http_get(server.addr, "/ui/nothing");
    assert_eq!(r.status, 404);
    // any other method on the page: 405 naming what is taken, not "no such path"
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        for path in ["/ui", "/ui/app.js"] {
            let mut s = std::net::TcpStream::connect(server.addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(30))).ok();
            write!(
                s,
                "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            )
            .expect("send");
            let mut answer = String::new();
            std::io::Read::read_to_string(&mut s, &mut answer).ok();
            assert!(
                answer.starts_with("HTTP/1.1 405"),
                "{method} {path}: {answer}"
            );
            assert!(
                answer
                    .to_ascii_lowercase()
                    .contains("\r\nallow: get, head\r\n"),
                "{method} {path}: {answer}"
            );
            assert!(
                answer.contains("method_not_allowed"),
                "{method} {path}: {answer}"
            );
        }
    }
    // what the page reads from /stats, beside the keys the reference has
    let stats = http_get(server.addr, "/stats").json();
    use sonic_rs::JsonValueTrait;
    for key in ["version", "cores", "cpus", "uptime_s", "refusals", "driver"] {
        assert!(stats.get(key).is_some(), "/stats lacks {key}");
    }
    // the CPUs the process may run on, not the one core a shard thread is pinned to
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert_eq!(json_u64(&stats, "cpus"), cpus, "cpus of /stats");
    let t = stats.get("streams").unwrap().get(0).unwrap();
    for key in [
        "earliest_offset",
        "subscribers_by_transport",
        "subscriber_lag_rows",
        "dropped_slow_sse",
        "tiers",
    ] {
        assert!(t.get(key).is_some(), "/stats streams[0] lacks {key}");
    }
}

fn hash_token(t: &str) -> String {
    let out = corecast_run(&["hash-token"], Some(t.as_bytes()), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "hash-token: {}", out.stderr);
    out.stdout.trim().to_string()
}

#[test]
fn with_auth_the_page_needs_what_any_reader_needs() {
    const READER: &str = "reader-token-0123456789";
    const NOBODY: &str = "nobody-token-0123456789";
    let setup = Setup::new();
    let cfg = setup.config(&format!(
        "{CONFIG}\n[auth]\n[auth.principals.reader]\ntokens = [\"{}\"]\ngrants = {{ \"data.read\" = [\"t\"], \"stats.read\" = [\"t\"] }}\n[auth.principals.nobody]\ntokens = [\"{}\"]\n",
        hash_token(READER),
        hash_token(NOBODY)
    ));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let get = |path: &str, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("authorization", a)])
            .unwrap_or_default();
        http_get_from(server.addr, None, path, &headers)
    };
    // the page itself: authenticated only
    assert_eq!(get("/ui", None).status, 401);
    assert_eq!(get("/ui/app.js", None).status, 401);
    assert_eq!(get("/ui", Some(NOBODY)).status, 200);
    // its data: the grants of any reader
    assert_eq!(get("/stats", Some(NOBODY)).status, 403);
    assert_eq!(get("/t/events?offset=0", Some(NOBODY)).status, 403);
    let stats = get("/stats", Some(READER));
    assert_eq!(stats.status, 200);
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let v = stats.json();
    let names: Vec<&str> = v
        .get("streams")
        .and_then(|s| s.as_array())
        .unwrap()
        .iter()
        .filter_map(|s| s.get("name").and_then(|n| n.as_str()))
        .collect();
    assert_eq!(names, ["t"], "only the streams stats.read allows");
    assert_eq!(get("/v1/streams/t", Some(READER)).status, 200);
    assert_eq!(get("/v1/streams/u", Some(READER)).status, 403);
}
