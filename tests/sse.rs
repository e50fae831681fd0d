//! Server-Sent Events: `GET /NAME/events` and `GET /NAME` with `Accept: text/event-stream`.
//! A real SSE parser (tests/support) reads the events; resume with Last-Event-ID, pings, the
//! goodbye, malformed ids (always a 200 stream), where=, caps, curl, and a headless Chromium
//! whose EventSource survives a server restart (tests/browser/).
mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use support::*;

const CONFIG: &str = r#"
[sse]
ping_min_ms = 300
ping_max_ms = 500
max_age_s = 4
retry_ms = 200
max_per_client = 3
[[stream]]
name = "t"
schema = "@trade"
[[stream]]
name = "s"
max_backlog = 64
[[stream]]
name = "small"
schema = "@trade"
max_replay = 10
"#;

fn start(setup: &Setup) -> Server {
    let cfg = setup.config(CONFIG);
    Server::start(Some(&cfg), &setup.data(), &[])
}

fn rows(from: i64, n: i64, symbol: &str) -> Vec<String> {
    (from..from + n).map(|i| trade(i, symbol)).collect()
}

fn expect_event(s: &mut SseStream) -> (u64, String) {
    let (id, event, data) = s.next_event(Duration::from_secs(10)).expect("an event");
    assert_eq!(event, "message");
    (id.expect("id").parse().expect("numeric id"), data)
}

#[test]
fn events_carry_the_websocket_payload_and_resume_with_last_event_id() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 5, "A"));
    let mut s = SseStream::open(server.addr, None, "/t/events?offset=0", &[]);
    assert_eq!(s.status, 200);
    assert_eq!(s.header("content-type"), Some("text/event-stream"));
    assert_eq!(s.header("cache-control"), Some("no-cache"));
    assert_eq!(s.header("x-accel-buffering"), Some("no"));
    assert_eq!(s.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        s.next(Duration::from_secs(5)),
        Some(SseItem::Retry(200)),
        "retry: comes first"
    );
    // the same bytes as the WebSocket payload
    let mut ws = ws_connect(&server.url("t?offset=1"));
    let _greeting = recv_text(&mut ws);
    for want in 1..=5u64 {
        let (id, data) = expect_event(&mut s);
        assert_eq!(id, want);
        assert_eq!(data, recv_text(&mut ws));
        assert!(data.starts_with(&format!("[{want},")), "{data}");
    }
    // live
    publish_batch(&server, "t", &rows(6, 2, "A"));
    assert_eq!(expect_event(&mut s).0, 6);
    assert_eq!(expect_event(&mut s).0, 7);
    drop(s);
    // resume after 5 with the header
    let mut r = SseStream::open(server.addr, None, "/t/events", &[("Last-Event-ID", "5")]);
    assert_eq!(r.status, 200);
    assert_eq!(expect_event(&mut r).0, 6);
    assert_eq!(expect_event(&mut r).0, 7);
    // the Accept form; Last-Event-ID wins over offset=
    let mut a = SseStream::open(
        server.addr,
        None,
        "/t?offset=1",
        &[("Accept", "text/event-stream"), ("Last-Event-ID", "6")],
    );
    assert_eq!(a.status, 200);
    assert_eq!(expect_event(&mut a).0, 7);
    // offset= is inclusive
    let mut o = SseStream::open(server.addr, None, "/t/events?offset=3", &[]);
    assert_eq!(expect_event(&mut o).0, 3);
    // unknown stream: a JSON 404 (not an endless retry loop on a typo)
    let nf = http_get(server.addr, "/nope/events");
    assert_eq!(nf.status, 404);
}

/// A resume further back than `max_replay` rows is not served in full (as on WebSocket, where it
/// is 4416 `too_old`), but never silently: an `event: gap` names the rows skipped before the
/// first row comes, and the stream goes on (EventSource gives up for good on a non-200).
#[test]
fn a_resume_beyond_max_replay_names_the_rows_it_skips() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "small", &rows(1, 30, "A"));
    for (path, headers, first) in [
        ("/small/events?offset=1", vec![], 1),
        ("/small/events", vec![("Last-Event-ID", "4")], 5),
        ("/small/events?offset=0", vec![], 1),
    ] {
        let mut s = SseStream::open(server.addr, None, path, &headers);
        assert_eq!(s.status, 200, "{path}");
        let (id, event, data) = s.next_event(Duration::from_secs(10)).expect("gap");
        assert_eq!((id, event.as_str()), (None, "gap"), "{path}");
        assert_eq!(
            data,
            format!(
                r#"{{"reason":"too_old","missing":{{"first":{first},"last":20}},"max_replay":10}}"#
            ),
            "{path}"
        );
        for want in 21..=30 {
            assert_eq!(expect_event(&mut s).0, want, "{path}");
        }
    }
    // within max_replay: no gap event, the rows straight away
    let mut s = SseStream::open(server.addr, None, "/small/events?offset=21", &[]);
    assert_eq!(expect_event(&mut s).0, 21);
}

#[test]
fn idle_streams_get_pings_and_a_goodbye_at_max_age() {
    let setup = Setup::new();
    let server = start(&setup);
    let t0 = Instant::now();
    let mut s = SseStream::open(server.addr, None, "/t/events", &[]);
    assert_eq!(s.status, 200);
    let mut pings = 0;
    let mut bye = None;
    while let Some(item) = s.next(Duration::from_secs(10)) {
        match item {
            SseItem::Comment(c) if c == "ping" => pings += 1,
            SseItem::Event { event, data, .. } if event == "end" => bye = Some(data),
            _ => {}
        }
    }
    let age = t0.elapsed();
    assert!(s.closed, "the server closes after the goodbye");
    assert_eq!(bye.as_deref(), Some(r#"{"reason":"max_age"}"#));
    assert!(
        age >= Duration::from_secs(4) && age < Duration::from_secs(8),
        "{age:?}"
    );
    // 4 s of idle at 300–500 ms per ping
    assert!((6..=14).contains(&pings), "pings: {pings}");
}

#[test]
fn malformed_last_event_ids_stream_from_now_with_200() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 3, "A"));
    let bad_headers = [
        "²",
        "-1",
        "1e3",
        "trades:5",
        "5-0",
        "0x10",
        "99999999999999999999",
        "9223372036854775808",
    ];
    let mut next_id = 4;
    for bad in bad_headers {
        let mut s = SseStream::open(
            server.addr,
            None,
            "/t/events?offset=0",
            &[("Last-Event-ID", bad)],
        );
        assert_eq!(s.status, 200, "Last-Event-ID {bad:?}");
        assert_eq!(s.next(Duration::from_secs(5)), Some(SseItem::Retry(200)));
        publish_batch(&server, "t", &rows(next_id, 1, "A"));
        assert_eq!(
            expect_event(&mut s).0,
            next_id as u64,
            "{bad:?} starts from now"
        );
        next_id += 1;
    }
    // a line break can only arrive through the query form polyfills use
    for q in ["lastEventId=5%0A6", "lastEventId=%0D", "lastEventId=%C2%B2"] {
        let mut s = SseStream::open(server.addr, None, &format!("/t/events?offset=0&{q}"), &[]);
        assert_eq!(s.status, 200, "{q}");
        publish_batch(&server, "t", &rows(next_id, 1, "A"));
        assert_eq!(
            expect_event(&mut s).0,
            next_id as u64,
            "{q} starts from now"
        );
        next_id += 1;
    }
    // a valid id in the query form resumes
    let mut s = SseStream::open(server.addr, None, "/t/events?lastEventId=2", &[]);
    assert_eq!(expect_event(&mut s).0, 3);
    // the warning is logged, at most once a minute
    std::thread::sleep(Duration::from_millis(200));
    let warned = server.stderr().matches("malformed Last-Event-ID").count();
    assert_eq!(warned, 1, "{}", server.stderr());
}

#[test]
fn where_filters_events() {
    let setup = Setup::new();
    let server = start(&setup);
    let mut batch = rows(1, 4, "A");
    batch.extend(rows(5, 4, "B"));
    publish_batch(&server, "t", &batch);
    let mut s = SseStream::open(
        server.addr,
        None,
        "/t/events?offset=0&where=%7B%22symbol%22%3A%22B%22%7D",
        &[],
    );
    assert_eq!(s.status, 200);
    for want in 5..=8 {
        let (id, data) = expect_event(&mut s);
        assert_eq!(id, want);
        assert!(data.contains("\"symbol\":\"B\""));
    }
    let bad = http_get_from(
        server.addr,
        None,
        "/t/events?where=%7B%22nope%22%3A1%7D",
        &[],
    );
    assert_eq!(bad.status, 400);
}

#[test]
fn caps_answer_503_with_retry_after() {
    let setup = Setup::new();
    let server = start(&setup);
    let open: Vec<SseStream> = (0..3)
        .map(|_| SseStream::open(server.addr, None, "/t/events", &[]))
        .collect();
    assert!(open.iter().all(|s| s.status == 200));
    let refused = http_get(server.addr, "/t/events");
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("30"));
    assert!(refused.text().contains("\"error\""));
    // another client address has its own allowance
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let s = SseStream::open(server.addr, Some(other), "/t/events", &[]);
    assert_eq!(s.status, 200);
    drop(open);
    std::thread::sleep(Duration::from_millis(300));
    let again = SseStream::open(server.addr, None, "/t/events", &[]);
    assert_eq!(again.status, 200, "slots are released when streams close");
}

#[test]
fn shutdown_says_goodbye() {
    let setup = Setup::new();
    let server = start(&setup);
    let mut s = SseStream::open(server.addr, None, "/t/events", &[]);
    assert_eq!(s.next(Duration::from_secs(5)), Some(SseItem::Retry(200)));
    assert_eq!(server.stop(), Some(0));
    let mut bye = None;
    while let Some(item) = s.next(Duration::from_secs(10)) {
        if let SseItem::Event { event, data, .. } = item {
            if event == "end" {
                bye = Some(data);
            }
        }
    }
    assert_eq!(bye.as_deref(), Some(r#"{"reason":"shutdown"}"#));
}

#[test]
fn slow_readers_are_dropped_with_reason_behind() {
    let setup = Setup::new();
    let server = start(&setup);
    // a reader that does not read while ~12 MB are published (stream s: max_backlog 64)
    let mut s = SseStream::open(server.addr, None, "/s/events", &[]);
    assert_eq!(s.status, 200);
    let pad = "x".repeat(1500);
    let mut ws = ws_connect(&server.url("s?publish"));
    let _ = recv_text(&mut ws);
    for b in 0..40 {
        let batch: Vec<String> = (0..200)
            .map(|i| format!(r#"{{"i":{},"pad":"{pad}"}}"#, b * 200 + i))
            .collect();
        publish_on(&mut ws, &batch);
    }
    let mut bye = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(item) = s.next(Duration::from_secs(20)) {
        if let SseItem::Event { event, data, .. } = item {
            if event == "end" {
                bye = Some(data);
                break;
            }
        }
        assert!(Instant::now() < deadline);
    }
    assert_eq!(bye.as_deref(), Some(r#"{"reason":"behind"}"#));
    let m = http_get(server.addr, "/metrics").text();
    assert!(
        m.contains("corecast_dropped_slow_total{stream=\"s\",transport=\"sse\"} 1"),
        "{m}"
    );
}

#[test]
fn curl_receives_events() {
    let setup = Setup::new();
    let server = start(&setup);
    publish_batch(&server, "t", &rows(1, 3, "A"));
    let out = std::process::Command::new("curl")
        .args(["-N", "-s", "--max-time", "2"])
        .arg(format!("http://{}/t/events?offset=0", server.addr))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("retry: 200\n\n"), "{text}");
    for i in 1..=3 {
        assert!(text.contains(&format!("id: {i}\ndata: [{i},")), "{text}");
    }
    // the Accept form too
    let out = std::process::Command::new("curl")
        .args([
            "-N",
            "-s",
            "--max-time",
            "2",
            "-H",
            "Accept: text/event-stream",
            "-H",
            "Last-Event-ID: 2",
        ])
        .arg(format!("http://{}/t", server.addr))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("id: 3\ndata: [3,") && !text.contains("id: 2\n"),
        "{text}"
    );
}

// ---- a real browser ----

#[test]
fn browser_eventsource_survives_a_restart_without_loss_or_duplicate() {
    let Some(chrome) = support::chromium() else {
        // CI installs Debian's chromium and sets this, so the browser test can never pass unseen
        assert!(
            std::env::var_os("CORECAST_REQUIRE_BROWSER").is_none(),
            "CORECAST_REQUIRE_BROWSER is set but no chromium is installed"
        );
        eprintln!("SKIPPED: no chromium (apt-get install -y chromium)");
        return;
    };
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser/eventsource.html"),
    )
    .expect("tests/browser/eventsource.html")
    .replace("__SSE_URL__", &format!("http://{addr}/t/events?offset=0"))
    .replace("__TOTAL__", "1000");
    let (page_addr, reports) = support::page_server(page);
    let profile = tempfile::tempdir().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let browser = std::process::Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--remote-debugging-port=0")
        .arg(format!("http://{page_addr}/"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromium");
    let _guard = Kill(browser);
    let wait_report = |prefix: &str, secs: u64| -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = reports
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {prefix} report within {secs} s"));
            if r.starts_with(prefix) {
                return r;
            }
        }
    };
    wait_report("/report?open", 60);
    // 500 rows, then a restart in the middle of the stream, then 500 more
    let mut ws = ws_connect(&server.url("t?publish"));
    let _ = recv_text(&mut ws);
    for b in 0..5 {
        publish_on(&mut ws, &rows(1 + b * 100, 100, "A"));
    }
    drop(ws);
    wait_report("/report?progress=500", 30);
    assert_eq!(server.stop(), Some(0));
    // the port may be briefly held (e.g. by the browser's reconnect attempts): retry a little
    let mut tries = 0;
    let server = loop {
        match try_start_server_at(Some(&cfg), &setup.data(), &addr.to_string()) {
            Ok(s) => break s,
            Err(e) => {
                let ss = std::process::Command::new("ss")
                    .args(["-tanp"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                let port = format!(":{}", addr.port());
                let held: Vec<&str> = ss.lines().filter(|l| l.contains(&port)).collect();
                eprintln!("restart attempt {tries}: {e}\n{}", held.join("\n"));
                tries += 1;
                assert!(tries < 50, "cannot restart on {addr}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let mut ws = ws_connect(&server.url("t?publish"));
    let _ = recv_text(&mut ws);
    for b in 5..10 {
        publish_on(&mut ws, &rows(1 + b * 100, 100, "A"));
    }
    let done = wait_report("/report?done", 60);
    // done&count=1000&dups=0&gaps=0&first=1&last=1000&opens=N&ends=...
    let q: std::collections::HashMap<String, String> = done
        .trim_start_matches("/report?")
        .split('&')
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(q["count"], "1000", "{done}");
    assert_eq!(q["dups"], "0", "{done}");
    assert_eq!(q["gaps"], "0", "{done}");
    assert_eq!(q["first"], "1", "{done}");
    assert_eq!(q["last"], "1000", "{done}");
    assert!(
        q["opens"].parse::<u32>().unwrap() >= 2,
        "the EventSource reconnected: {done}"
    );
    assert_eq!(
        q["recreated"], "0",
        "resumed by the browser's own Last-Event-ID: {done}"
    );
}

/// SSE refuses what it does not understand, as WebSocket does: unknown query keys, and an
/// `offset=` on a stream without a log (a 400 naming it, before any stream starts).
#[test]
fn unknown_keys_and_offsets_on_live_only_streams_are_refused() {
    let setup = Setup::new();
    let cfg = setup.config("[[stream]]\nname = \"t\"\nschema = \"@trade\"\n[[stream]]\nname = \"live\"\ndurable = false\n");
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let r = http_get(server.addr, "/t/events?foo=1");
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("unknown query parameter(s): foo"),
        "{}",
        r.text()
    );
    let r = http_get(server.addr, "/live/events?offset=0");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("not_durable"), "{}", r.text());
    let r = http_get(server.addr, "/v1/streams/t/rows?foo=1");
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("unknown query parameter(s): foo"),
        "{}",
        r.text()
    );
}

#[test]
fn a_filtered_replay_reads_past_rows_with_no_match_without_waiting_for_a_publish() {
    let setup = Setup::new();
    // Pings far apart: before the fix a stream whose replay chunk matched nothing waited for a
    // publish or the next ping before reading the next chunk.
    let cfg = setup.config(
        &CONFIG
            .replace("ping_min_ms = 300", "ping_min_ms = 20000")
            .replace("ping_max_ms = 500", "ping_max_ms = 30000")
            .replace("max_age_s = 4", "max_age_s = 60"),
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    // 12,000 rows of symbol A (about three replay chunks), then one of B; then a restart, so
    // the replay comes from the reader pool, and no publish after it.
    for chunk in 0..12 {
        publish_batch(&server, "t", &rows(1 + chunk * 1000, 1000, "A"));
    }
    assert_eq!(
        publish_batch(&server, "t", &rows(12_001, 1, "B")),
        [Some(12_001)]
    );
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut s = SseStream::open(
        server.addr,
        None,
        "/t/events?offset=1&where=%7B%22symbol%22%3A%22B%22%7D",
        &[],
    );
    assert_eq!(s.status, 200);
    let (id, event, data) = s.next_event(Duration::from_secs(10)).expect("the match");
    assert_eq!((id.as_deref(), event.as_str()), (Some("12001"), "message"));
    assert!(data.contains("\"symbol\":\"B\""), "{data}");
}

/// The inodes of the server-side sockets of the connection from `client_port` to `server_port`
/// (`/proc/net/tcp`; 0 once no descriptor holds a socket).
fn tcp_inodes(server_port: u16, client_port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap_or(""), 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && port(f[1]) == Some(server_port) && port(f[2]) == Some(client_port))
                .then(|| f[9].parse().ok())
                .flatten()
        })
        .collect()
}

/// Whether process `pid` holds a descriptor of the server side of the connection from
/// `client_port`.
fn holds_socket(pid: u32, server_port: u16, client_port: u16) -> bool {
    let inodes = tcp_inodes(server_port, client_port);
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
        .any(|ino| ino != 0 && inodes.contains(&ino))
}

/// Issue 13, 1: an SSE reader that stops reading (4 KiB receive buffer, never read after its
/// first event) is released — its descriptor closed, not only half-closed — shortly after a write
/// to it has not completed within `write_timeout_s`, as a WebSocket subscriber is.
#[test]
fn a_reader_that_stops_reading_is_released_after_the_write_timeout() {
    use std::io::{Read, Write};
    let setup = Setup::new();
    let cfg =
        setup.config("write_timeout_s = 2\n[[stream]]\nname = \"trades\"\nschema = \"@trade\"\n");
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let pid = server.child.id();
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    sock.connect(&server.addr.into()).expect("connect");
    let mut sse: std::net::TcpStream = sock.into();
    sse.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let client_port = sse.local_addr().expect("local addr").port();
    write!(
        sse,
        "GET /trades/events HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .expect("request");
    let mut publ = ws_connect(&server.url("trades?publish"));
    let _greeting = recv_text(&mut publ);
    // 200,000 rows in batches of 100, 32 batches in flight at a time
    let mut sent = 0i64;
    let mut first_event = false;
    while sent < 200_000 {
        let mut window = 0;
        while window < 32 && sent < 200_000 {
            let frame = format!("[{}]", rows(sent, 100, "A").join(","));
            publ.send(tungstenite::Message::text(frame))
                .expect("publish");
            sent += 100;
            window += 1;
        }
        for _ in 0..window {
            let reply = recv_text(&mut publ);
            assert!(reply.contains("\"ok\""), "{reply}");
        }
        // read up to the first event, then never again
        let mut got = Vec::new();
        while !first_event {
            let mut chunk = [0u8; 1024];
            let n = sse.read(&mut chunk).expect("read the first event");
            assert!(n > 0, "the stream ended before its first event");
            got.extend_from_slice(&chunk[..n]);
            first_event = got.windows(7).any(|w| w == b"\ndata: ");
            if first_event {
                // the server holds the reader's socket while it is being read (publishing the
                // rest can take longer than the write timeout on a loaded machine, so this is
                // checked here, not after the last publish)
                assert!(holds_socket(pid, server.addr.port(), client_port));
            }
        }
    }
    // the write in flight times out after 2 s; the descriptor must go soon after
    let deadline = Instant::now() + Duration::from_secs(15);
    while holds_socket(pid, server.addr.port(), client_port) {
        assert!(
            Instant::now() < deadline,
            "the server still holds the stalled SSE reader's socket 15 s after its last publish"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = http_get(server.addr, "/metrics").text();
    assert!(
        m.contains("corecast_subscribers{stream=\"trades\",transport=\"sse\"} 0"),
        "{m}"
    );
    // counted once, as an SSE reader (it was counted under websocket before)
    assert!(
        m.contains("corecast_dropped_slow_total{stream=\"trades\",transport=\"sse\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("corecast_dropped_slow_total{stream=\"trades\",transport=\"websocket\"} 0"),
        "{m}"
    );
    // what the kernel still held for it arrives, then the end of the stream
    let mut sink = vec![0u8; 1 << 16];
    loop {
        match sse.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no end of stream after the release: {e}"),
        }
    }
}
