//! The HTTP pull API: catalog, latest, windows with signed cursors, long polls.
mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};
use support::*;

const CONFIG: &str = r#"
[[stream]]
name = "t"
schema = "@trade"
[[stream]]
name = "u"
schema = "@trade"
[[stream]]
name = "live"
durable = false
[[stream]]
name = "big"
"#;

fn start(setup: &Setup, prefix: &str) -> Server {
    let cfg = setup.config(&format!("{prefix}{CONFIG}"));
    Server::start(Some(&cfg), &setup.data(), &[])
}

fn rows(from: i64, n: i64, symbol: &str) -> Vec<String> {
    (from..from + n).map(|i| trade(i, symbol)).collect()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k)
        .and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("no string {k} in {v:?}"))
}

fn offsets(v: &Value) -> Vec<u64> {
    v.get("rows")
        .and_then(|r| r.as_array())
        .unwrap_or_else(|| panic!("no rows in {v:?}"))
        .iter()
        .map(|r| r.get(0).and_then(|o| o.as_u64()).expect("offset"))
        .collect()
}

fn error_code(r: &HttpResp) -> String {
    let v = r.json();
    let e = v
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {}", r.text()));
    assert!(e.get("message").and_then(|m| m.as_str()).is_some());
    assert!(e.get("retryable").and_then(|m| m.as_bool()).is_some());
    e.get("code")
        .and_then(|c| c.as_str())
        .expect("code")
        .to_string()
}

const WHERE_A: &str = "%7B%22symbol%22%3A%22A%22%7D";
const WHERE_B: &str = "%7B%22symbol%22%3A%22B%22%7D";

#[test]
fn catalog_and_one_entry() {
    let setup = Setup::new();
    let server = start(&setup, "");
    publish_batch(&server, "t", &rows(1, 3, "A"));
    let r = http_get(server.addr, "/v1/streams");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let list = v
        .get("streams")
        .and_then(|x| x.as_array())
        .expect("streams");
    assert_eq!(list.len(), 4);
    let t = list.iter().find(|e| s(e, "name") == "t").expect("t");
    assert!(
        t.get("schema").and_then(|x| x.as_object()).is_some(),
        "schema as the greeting publishes it"
    );
    assert_eq!(t.get("durable").and_then(|x| x.as_bool()), Some(true));
    assert_eq!(t.get("exactly_once").and_then(|x| x.as_bool()), Some(false));
    assert!(!s(t, "stream_id").is_empty());
    assert_eq!(t.get("end_offset").and_then(|x| x.as_u64()), Some(4));
    assert_eq!(t.get("earliest_offset").and_then(|x| x.as_u64()), Some(1));
    assert_eq!(t.get("max_replay").and_then(|x| x.as_u64()), Some(100_000));
    let limits = t.get("limits").expect("limits");
    assert_eq!(
        limits.get("max_backlog").and_then(|x| x.as_u64()),
        Some(8192)
    );
    let subs = t.get("subscribers").expect("subscribers");
    for k in ["websocket", "sse", "pull"] {
        assert!(subs.get(k).and_then(|x| x.as_i64()).is_some(), "{k}");
    }
    let live = list.iter().find(|e| s(e, "name") == "live").expect("live");
    assert!(live.get("end_offset").expect("key").is_null());
    // the WebSocket greeting publishes the same schema
    let mut ws = ws_connect(&server.url("t"));
    let g: Value = sonic_rs::from_str(&recv_text(&mut ws)).unwrap();
    assert_eq!(
        sonic_rs::to_string(g.get("schema").unwrap()).unwrap(),
        sonic_rs::to_string(t.get("schema").unwrap()).unwrap()
    );
    assert_eq!(s(&g, "stream_id"), s(t, "stream_id"));
    let one = http_get(server.addr, "/v1/streams/t").json();
    assert_eq!(s(&one, "name"), "t");
    assert_eq!(
        one.get("subscribers")
            .unwrap()
            .get("websocket")
            .and_then(|x| x.as_i64()),
        Some(1)
    );
    let nf = http_get(server.addr, "/v1/streams/nope");
    assert_eq!(nf.status, 404);
    assert_eq!(error_code(&nf), "not_found");
}

#[test]
fn latest_rows() {
    let setup = Setup::new();
    let server = start(&setup, "");
    publish_batch(&server, "t", &rows(1, 20, "A"));
    let v = http_get(server.addr, "/v1/streams/t/latest?limit=5").json();
    assert_eq!(offsets(&v), vec![16, 17, 18, 19, 20]);
    let r0 = &v.get("rows").unwrap().as_array().unwrap()[0];
    assert!(
        r0.get(1).and_then(|x| x.as_i64()).unwrap() > 1_700_000_000_000_000,
        "ts in µs"
    );
    assert_eq!(
        r0.get(2).unwrap().get("trade_id").and_then(|x| x.as_i64()),
        Some(16)
    );
    let all = http_get(server.addr, "/v1/streams/t/latest?limit=500").json();
    assert_eq!(offsets(&all), (1..=20).collect::<Vec<_>>());
    let over = http_get(server.addr, "/v1/streams/t/latest?limit=501");
    assert_eq!(over.status, 400);
    assert_eq!(error_code(&over), "resource_limit_exceeded");
    // a live-only stream answers latest from memory
    publish_batch(
        &server,
        "live",
        &[r#"{"x":1}"#.to_string(), r#"{"x":2}"#.to_string()],
    );
    let l = http_get(server.addr, "/v1/streams/live/latest?limit=1").json();
    let rows = l.get("rows").unwrap().as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get(0).unwrap().is_null());
    let nd = http_get(server.addr, "/v1/streams/live/rows");
    assert_eq!(nd.status, 409);
    assert_eq!(error_code(&nd), "not_durable");
}

/// Rows near the 1 MiB message limit: a page holds about `PAGE_BYTES_MAX` (4 MiB) of them, not
/// 500 (500 MiB), and paging with its cursor still returns every row once, in order — from the
/// ring, and after a restart from the log (the reader pool's chunks are bounded by bytes too).
#[test]
fn pages_of_large_rows_are_bounded_by_bytes_and_lose_nothing() {
    const ROWS: u64 = 12;
    let pad = |i: u64| char::from(b'a' + i as u8).to_string().repeat(900_000);
    let row = |i: u64| format!(r#"{{"i":{i},"pad":"{}"}}"#, pad(i));
    let setup = Setup::new();
    let server = start(&setup, "");
    for i in 1..=ROWS {
        assert_eq!(publish_batch(&server, "big", &[row(i)]), vec![Some(i)]);
    }
    let page_through = |server: &Server| -> Vec<Vec<u64>> {
        let mut pages = Vec::new();
        let mut q = "limit=500".to_string();
        loop {
            let v = http_get(server.addr, &format!("/v1/streams/big/rows?{q}")).json();
            let offs = offsets(&v);
            if offs.is_empty() {
                return pages;
            }
            for (k, r) in v
                .get("rows")
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                let got = r.get(2).and_then(|x| x.get("pad")).and_then(|x| x.as_str());
                assert_eq!(got, Some(pad(offs[k]).as_str()), "row {}", offs[k]);
            }
            pages.push(offs);
            q = format!("limit=500&cursor={}", s(&v, "next_cursor"));
        }
    };
    // 900,000-byte rows: the fifth takes a page past 4 MiB and is its last
    let want = vec![
        (1..=5).collect::<Vec<_>>(),
        (6..=10).collect(),
        vec![11, 12],
    ];
    assert_eq!(page_through(&server), want);
    // latest keeps the newest rows that fit
    let v = http_get(server.addr, "/v1/streams/big/latest?limit=500").json();
    assert_eq!(offsets(&v), vec![9, 10, 11, 12]);
    assert_eq!(v.get("count").and_then(|c| c.as_u64()), Some(4));
    // from the log
    server.kill9();
    let server = start(&setup, "");
    assert_eq!(page_through(&server), want);
    let v = http_get(server.addr, "/v1/streams/big/latest?limit=500").json();
    assert_eq!(offsets(&v), vec![9, 10, 11, 12]);
    // a WebSocket replay of the same rows, chunked by bytes in the reader pool
    let mut ws = ws_connect(&server.url("big?offset=0"));
    let _greeting = recv_text(&mut ws);
    for i in 1..=ROWS {
        let f = recv_text(&mut ws);
        assert!(f.starts_with(&format!("[{i},")), "offset {i}");
        assert!(f.ends_with(&format!("{}]", row(i))), "row {i}");
    }
}

#[test]
fn windows_page_through_with_cursors_and_repeat_exactly() {
    let setup = Setup::new();
    let server = start(&setup, "");
    publish_batch(&server, "t", &rows(1, 25, "A"));
    let a = http_get(server.addr, "/v1/streams/t/rows?limit=10");
    assert_eq!(a.status, 200);
    let a = a.json();
    assert_eq!(s(&a, "status"), "ok");
    assert_eq!(offsets(&a), (1..=10).collect::<Vec<_>>());
    let c1 = s(&a, "next_cursor").to_string();
    let b = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?limit=10&cursor={c1}"),
    );
    let b2 = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?limit=10&cursor={c1}"),
    );
    let (b, b2) = (b.json(), b2.json());
    assert_eq!(offsets(&b), (11..=20).collect::<Vec<_>>());
    assert_eq!(
        sonic_rs::to_string(b.get("rows").unwrap()).unwrap(),
        sonic_rs::to_string(b2.get("rows").unwrap()).unwrap(),
        "the same cursor read twice returns the same rows"
    );
    let c = http_get(
        server.addr,
        &format!(
            "/v1/streams/t/rows?limit=10&cursor={}",
            s(&b, "next_cursor")
        ),
    )
    .json();
    assert_eq!(offsets(&c), (21..=25).collect::<Vec<_>>());
    let d = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?cursor={}", s(&c, "next_cursor")),
    )
    .json();
    assert_eq!(offsets(&d), Vec::<u64>::new());
    assert_eq!(s(&d, "status"), "ok");
    // the rows are the WebSocket payloads
    let mut ws = ws_connect(&server.url("t?offset=21"));
    let _ = recv_text(&mut ws);
    let first = recv_text(&mut ws);
    let c_rows = c.get("rows").unwrap().as_array().unwrap();
    assert_eq!(sonic_rs::to_string(&c_rows[0]).unwrap(), first);
    // from=latest starts at the frontier
    let l = http_get(server.addr, "/v1/streams/t/rows?from=latest").json();
    assert_eq!(offsets(&l), Vec::<u64>::new());
    publish_batch(&server, "t", &rows(26, 1, "A"));
    let l2 = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?cursor={}", s(&l, "next_cursor")),
    )
    .json();
    assert_eq!(offsets(&l2), vec![26]);
    // from=N starts at offset N (0: the earliest held)
    let f = http_get(server.addr, "/v1/streams/t/rows?from=24&limit=2").json();
    assert_eq!(offsets(&f), vec![24, 25]);
    let f0 = http_get(server.addr, "/v1/streams/t/rows?from=0&limit=1").json();
    assert_eq!(offsets(&f0), vec![1]);
    for bad in ["from=-1", "from=x", "from=9223372036854775808"] {
        let r = http_get(server.addr, &format!("/v1/streams/t/rows?{bad}"));
        assert_eq!(r.status, 400, "{bad}");
        assert!(
            r.text().contains("use earliest, latest or an offset"),
            "{bad}"
        );
    }
    // a query key the endpoint does not take is named with the ones it does
    let r = http_get(server.addr, "/v1/streams/t/rows?offset=5");
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains(
            "unknown query parameter(s): offset (this endpoint takes: cursor, limit, wait, where, from)"
        ),
        "{}",
        r.text()
    );
    // no endpoint: 404 whatever the query
    for path in ["/v1/streams/t/rows/?limit=1", "/v1/streams/t/nope?limit=1"] {
        let r = http_get(server.addr, path);
        assert_eq!(r.status, 404, "{path}");
        assert!(r.text().contains("no endpoint at"), "{path}");
    }
    // where=
    publish_batch(&server, "t", &rows(27, 4, "B"));
    let w = http_get(server.addr, &format!("/v1/streams/t/rows?where={WHERE_B}")).json();
    assert_eq!(offsets(&w), vec![27, 28, 29, 30]);
    // limits
    for (q, code) in [
        ("limit=501", "resource_limit_exceeded"),
        ("wait=61", "resource_limit_exceeded"),
        ("wait=abc", "bad_request"),
    ] {
        let r = http_get(server.addr, &format!("/v1/streams/t/rows?{q}"));
        assert_eq!(r.status, 400, "{q}");
        assert_eq!(error_code(&r), code, "{q}");
    }
}

#[test]
fn long_poll_wakes_within_50ms_of_a_publish() {
    let setup = Setup::new();
    let server = start(&setup, "");
    publish_batch(&server, "t", &rows(1, 2, "A"));
    let at_end = http_get(server.addr, "/v1/streams/t/rows?from=latest").json();
    let cursor = s(&at_end, "next_cursor").to_string();
    let addr = server.addr;
    let mut pubr = ws_connect(&server.url("t?publish"));
    let _ = recv_text(&mut pubr);
    let poll = std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = http_get(addr, &format!("/v1/streams/t/rows?cursor={cursor}&wait=20"));
        (Instant::now(), t0, r)
    });
    std::thread::sleep(Duration::from_millis(500));
    // the poll is waiting, and says so
    let m = http_get(server.addr, "/metrics").text();
    assert!(
        m.contains("corecast_subscribers{stream=\"t\",transport=\"pull\"} 1"),
        "{m}"
    );
    let sent = Instant::now();
    publish_on(&mut pubr, &rows(3, 1, "A"));
    let acked = Instant::now();
    let (answered, t0, r) = poll.join().unwrap();
    let v = r.json();
    assert_eq!(offsets(&v), vec![3]);
    assert!(
        answered.duration_since(t0) >= Duration::from_millis(450),
        "it waited"
    );
    let after = answered.saturating_duration_since(acked);
    assert!(
        after <= Duration::from_millis(50),
        "answered {after:?} after the ack ({:?} after sending)",
        answered.duration_since(sent)
    );
    // nothing new within wait: an empty window after about that long
    let t = Instant::now();
    let r = http_get(
        server.addr,
        &format!(
            "/v1/streams/t/rows?cursor={}&wait=0.3",
            s(&v, "next_cursor")
        ),
    )
    .json();
    assert_eq!(offsets(&r), Vec::<u64>::new());
    assert!(t.elapsed() >= Duration::from_millis(280) && t.elapsed() < Duration::from_secs(3));
}

#[test]
fn cursors_refuse_tampering_other_streams_filters_callers_and_recreated_streams() {
    let setup = Setup::new();
    let server = start(&setup, "");
    publish_batch(&server, "t", &rows(1, 5, "A"));
    publish_batch(&server, "u", &rows(1, 5, "A"));
    let v = http_get(server.addr, "/v1/streams/t/rows?limit=2").json();
    let c = s(&v, "next_cursor").to_string();
    let ok = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?limit=2&cursor={c}"),
    );
    assert_eq!(offsets(&ok.json()), vec![3, 4]);
    // tampered: every single-character change
    for i in 0..c.len() {
        let mut t = c.clone().into_bytes();
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        let t = String::from_utf8(t).unwrap();
        let r = http_get(server.addr, &format!("/v1/streams/t/rows?cursor={t}"));
        assert_eq!(
            (r.status, error_code(&r).as_str()),
            (400, "cursor_invalid"),
            "{t}"
        );
    }
    for junk in ["x", "AAAA", "%00", "eyJvZmZzZXQiOjN9"] {
        let r = http_get(server.addr, &format!("/v1/streams/t/rows?cursor={junk}"));
        assert_eq!(error_code(&r), "cursor_invalid", "{junk}");
    }
    // another stream
    let r = http_get(server.addr, &format!("/v1/streams/u/rows?cursor={c}"));
    assert_eq!((r.status, error_code(&r).as_str()), (400, "cursor_invalid"));
    // another filter (and none vs one)
    let fa = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?limit=1&where={WHERE_A}"),
    )
    .json();
    let ca = s(&fa, "next_cursor").to_string();
    assert_eq!(
        error_code(&http_get(
            server.addr,
            &format!("/v1/streams/t/rows?cursor={ca}&where={WHERE_B}")
        )),
        "cursor_invalid"
    );
    assert_eq!(
        error_code(&http_get(
            server.addr,
            &format!("/v1/streams/t/rows?cursor={ca}")
        )),
        "cursor_invalid"
    );
    assert_eq!(
        error_code(&http_get(
            server.addr,
            &format!("/v1/streams/t/rows?cursor={c}&where={WHERE_A}")
        )),
        "cursor_invalid"
    );
    let same = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?cursor={ca}&where={WHERE_A}"),
    );
    assert_eq!(same.status, 200);
    // another caller: 127.0.0.2 vs 127.0.0.1
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let r = http_get_from(
        server.addr,
        Some(other),
        &format!("/v1/streams/t/rows?cursor={c}"),
        &[],
    );
    assert_eq!((r.status, error_code(&r).as_str()), (400, "cursor_invalid"));
    let mine = http_get_from(server.addr, Some(other), "/v1/streams/t/rows?limit=1", &[]).json();
    let r = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?cursor={}", s(&mine, "next_cursor")),
    );
    assert_eq!(error_code(&r), "cursor_invalid");
    // the key survives a restart; a recreated stream (new stream_id) does not accept old cursors
    let data = setup.data();
    let cfg = server.config.clone();
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(cfg.as_deref(), &data, &[]);
    let r = http_get(
        server.addr,
        &format!("/v1/streams/t/rows?limit=2&cursor={c}"),
    );
    assert_eq!(offsets(&r.json()), vec![3, 4], "cursors survive a restart");
    assert_eq!(server.stop(), Some(0));
    std::fs::remove_dir_all(data.join("t")).unwrap();
    let server = Server::start(cfg.as_deref(), &data, &[]);
    publish_batch(&server, "t", &rows(1, 5, "A"));
    let r = http_get(server.addr, &format!("/v1/streams/t/rows?cursor={c}"));
    assert_eq!((r.status, error_code(&r).as_str()), (400, "cursor_invalid"));
}

#[test]
fn cursors_expire() {
    let setup = Setup::new();
    let server = start(&setup, "cursor_ttl_s = 1\n");
    publish_batch(&server, "t", &rows(1, 3, "A"));
    let v = http_get(server.addr, "/v1/streams/t/rows?limit=1").json();
    let c = s(&v, "next_cursor").to_string();
    std::thread::sleep(Duration::from_millis(2100));
    let r = http_get(server.addr, &format!("/v1/streams/t/rows?cursor={c}"));
    assert_eq!((r.status, error_code(&r).as_str()), (410, "cursor_expired"));
}

#[test]
fn key_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let setup = Setup::new();
    let _server = start(&setup, "");
    let mode = std::fs::metadata(setup.data().join(".cursor_key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Long polls hold a connection each, so they count under the SSE caps: the 17th concurrent long
/// poll from one address is answered 503 with `Retry-After: 30`, and a slot frees when a poll ends.
#[test]
fn long_polls_count_under_the_per_client_cap() {
    use std::io::{Read, Write};
    let setup = Setup::new();
    let server = start(&setup, "");
    let req = b"GET /v1/streams/t/rows?from=latest&wait=5 HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut c = server.tcp();
        c.write_all(req).unwrap();
        held.push(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    let r = http_get(server.addr, "/v1/streams/t/rows?from=latest&wait=5");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("30"));
    assert_eq!(error_code(&r), "too_many_streams");
    // end one poll: its slot is free again once it answers (here: a publish wakes them all)
    publish_batch(&server, "t", &rows(1, 1, "CAP"));
    let mut first = held.remove(0);
    let mut buf = [0u8; 256];
    let n = first.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let r = http_get(server.addr, "/v1/streams/t/rows?from=latest&wait=0");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Reads `/metrics` until it shows every line in `want`, for at most `within`; panics otherwise.
fn metrics_show(server: &Server, want: &[&str], within: Duration) {
    let t0 = Instant::now();
    loop {
        let m = http_get(server.addr, "/metrics").text();
        if want.iter().all(|w| m.lines().any(|l| l == *w)) {
            return;
        }
        assert!(
            t0.elapsed() < within,
            "after {within:?}, not all of {want:?} in:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A long poll watches its connection while it waits: a client that closes (FIN) or resets
/// (RST) its socket frees the poll's slot at once, so with one slot per client the same address
/// polls again within 2 s instead of being refused by its own dead poll for up to 60 s.
#[test]
fn a_long_poll_whose_client_goes_frees_its_slot_at_once() {
    use std::io::Write;
    let setup = Setup::new();
    let server = start(&setup, "[sse]\nmax_per_client = 1\n");
    let req = b"GET /v1/streams/t/rows?from=latest&wait=60 HTTP/1.1\r\nHost: x\r\n\r\n";
    let waiting = [
        "corecast_sse_streams 1",
        "corecast_subscribers{stream=\"t\",transport=\"pull\"} 1",
    ];
    let idle = [
        "corecast_sse_streams 0",
        "corecast_subscribers{stream=\"t\",transport=\"pull\"} 0",
    ];
    for reset in [false, true] {
        let mut a = server.tcp();
        a.write_all(req).unwrap();
        metrics_show(&server, &waiting, Duration::from_secs(5));
        // the cap is full: a second poll from this address is refused
        let r = http_get(server.addr, "/v1/streams/t/rows?from=latest&wait=1");
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(error_code(&r), "too_many_streams");
        if reset {
            socket2::SockRef::from(&a)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        }
        let gone = Instant::now();
        drop(a);
        // the slot comes back at once, and the gauges say so
        metrics_show(&server, &idle, Duration::from_secs(2));
        let r = loop {
            let r = http_get(server.addr, "/v1/streams/t/rows?from=latest&wait=0.2");
            if r.status != 503 || gone.elapsed() >= Duration::from_secs(2) {
                break r;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(r.status, 200, "reset={reset}: {}", r.text());
        assert_eq!(offsets(&r.json()), Vec::<u64>::new());
        assert!(
            gone.elapsed() < Duration::from_secs(2),
            "reset={reset}: {:?}",
            gone.elapsed()
        );
    }
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

/// Bytes a client sends while its long poll waits (a pipelined next request) are not a
/// disconnect: the poll keeps its slot, goes on waiting and answers the next commit.
#[test]
fn a_long_poll_keeps_waiting_when_its_client_sends_more() {
    use std::io::{Read, Write};
    let setup = Setup::new();
    let server = start(&setup, "[sse]\nmax_per_client = 1\n");
    let mut a = server.tcp();
    a.write_all(
        b"GET /v1/streams/t/rows?from=latest&wait=20 HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/str",
    )
    .unwrap();
    let waiting = [
        "corecast_sse_streams 1",
        "corecast_subscribers{stream=\"t\",transport=\"pull\"} 1",
    ];
    metrics_show(&server, &waiting, Duration::from_secs(5));
    a.write_all(b"eams HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // still waiting, still holding the client's one slot
    metrics_show(&server, &waiting, Duration::from_secs(1));
    let r = http_get(server.addr, "/v1/streams/t/rows?from=latest&wait=1");
    assert_eq!(r.status, 503, "{}", r.text());
    // a commit answers it
    publish_batch(&server, "t", &rows(1, 1, "P"));
    let mut resp = Vec::new();
    let _ = a.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = &resp[text.find("\r\n\r\n").expect("a head") + 4..];
    let v: Value = sonic_rs::from_slice(body).expect("JSON");
    assert_eq!(offsets(&v), vec![1]);
    metrics_show(
        &server,
        &[
            "corecast_sse_streams 0",
            "corecast_subscribers{stream=\"t\",transport=\"pull\"} 0",
        ],
        Duration::from_secs(2),
    );
}
