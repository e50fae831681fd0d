//! Hostile input from raw TCP clients. Each case is answered exactly as specified (HTTP status,
//! or a close frame whose code is read by parsing the server's frames off the raw socket) while a
//! well-behaved subscriber and publisher on the same server keep being served, before, during
//! and after the case.
//!
//! The slow cases (slow loris, a silent client, both cut off by the 10 s handshake timeout) run
//! in parallel threads of one test, so the whole file takes about as long as that timeout.
mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use support::{recv_text, ws_connect, Server, Setup, Ws};

const CONFIG: &str = r#"
[[stream]]
name = "trades"
schema = "@trade"
durable = true

[[stream]]
name = "live"
durable = false
"#;

/// A valid `Sec-WebSocket-Key` (base64 of 16 bytes), the RFC 6455 §1.3 example.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

// ---------------------------------------------------------------------------------------------
// The bystanders: one subscriber and one publisher on `live`, checked around every case.

struct Witness {
    sub: Ws,
    publ: Ws,
    n: u64,
}

impl Witness {
    fn new(srv: &Server) -> Witness {
        let mut sub = ws_connect(&srv.url("live"));
        let greeting = recv_text(&mut sub);
        assert!(
            greeting.contains(r#""stream":"live""#),
            "greeting: {greeting}"
        );
        let mut publ = ws_connect(&srv.url("live?publish"));
        let greeting = recv_text(&mut publ);
        assert!(
            greeting.contains(r#""stream":"live""#),
            "greeting: {greeting}"
        );
        let mut w = Witness { sub, publ, n: 0 };
        w.check();
        w
    }

    /// One round trip: publish a row, expect its acknowledgement and its data frame.
    fn check(&mut self) {
        self.n += 1;
        let row = format!(r#"{{"witness":{}}}"#, self.n);
        self.publ
            .send(tungstenite::Message::text(row.clone()))
            .expect("witness publish");
        let reply = recv_text(&mut self.publ);
        assert!(reply.starts_with(r#"{"ok":["#), "witness reply: {reply}");
        let frame = recv_text(&mut self.sub);
        assert!(
            frame.starts_with('[') && frame.ends_with(&format!("{row}]")),
            "witness frame: {frame}"
        );
    }
}

/// A server with the test streams, and its witness already checked once.
fn start() -> (Server, Witness, Setup) {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let w = Witness::new(&srv);
    (srv, w, setup)
}

/// The server is still running and the witness still served.
fn still_fine(srv: &mut Server, w: &mut Witness) {
    assert!(
        srv.child.try_wait().expect("try_wait").is_none(),
        "server exited; stderr:\n{}",
        srv.stderr()
    );
    w.check();
}

// ---------------------------------------------------------------------------------------------
// A raw client: exact bytes out, HTTP responses and WebSocket frames parsed by hand.

struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> sonic_rs::Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        sonic_rs::from_slice(&self.body).expect("JSON body")
    }

    /// `error.code` of corecast's JSON error body.
    fn error_code(&self) -> String {
        use sonic_rs::JsonValueTrait;
        let v = self.json();
        v["error"]["code"].as_str().unwrap_or_default().to_string()
    }
}

#[derive(Debug)]
struct Frame {
    fin: bool,
    rsv: u8,
    opcode: u8,
    payload: Vec<u8>,
}

impl Raw {
    fn connect(srv: &Server) -> Raw {
        Raw {
            s: srv.tcp(),
            buf: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("raw write");
    }

    /// Reads more bytes into the buffer; 0 at end of stream (a reset counts as the end).
    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 8192];
        match self.s.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
            Err(e) => panic!(
                "raw read: {e} (have {:?})",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads one HTTP response: status line, headers, and a `content-length` body.
    fn response(&mut self) -> Response {
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            assert!(
                self.fill() > 0,
                "connection ended inside a response head: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        };
        let head = String::from_utf8(self.buf[..end].to_vec()).expect("ASCII head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("status line");
        assert!(
            status_line.starts_with("HTTP/1.1 "),
            "status line {status_line:?}"
        );
        let status: u16 = status_line[9..12].parse().expect("status code");
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').expect("header line");
                (n.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        self.buf.drain(..end);
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.parse().expect("content-length"));
        while self.buf.len() < len {
            assert!(self.fill() > 0, "connection ended inside a body");
        }
        let body = self.buf.drain(..len).collect();
        Response {
            status,
            headers,
            body,
        }
    }

    /// Reads one server frame (RFC 6455 §5.2); a server frame is never masked.
    fn frame(&mut self) -> Frame {
        loop {
            if let Some((f, used)) = parse_frame(&self.buf) {
                self.buf.drain(..used);
                return f;
            }
            assert!(
                self.fill() > 0,
                "connection ended without a close frame (buffered {:?})",
                self.buf
            );
        }
    }

    /// Skips data frames up to the server's close frame; returns its code and reason.
    fn close(&mut self) -> (u16, String) {
        loop {
            let f = self.frame();
            assert!(f.fin && f.rsv == 0, "bad server frame {f:?}");
            match f.opcode {
                0x1 | 0x2 | 0xA => continue,
                0x8 => {
                    assert!(f.payload.len() >= 2, "close frame without a code: {f:?}");
                    let code = u16::from_be_bytes([f.payload[0], f.payload[1]]);
                    let reason = String::from_utf8(f.payload[2..].to_vec()).expect("UTF-8 reason");
                    return (code, reason);
                }
                op => panic!("unexpected opcode {op:#x} before the close"),
            }
        }
    }

    /// After the server's answer: it ends the connection (EOF or reset) within the read timeout.
    fn expect_end(&mut self) {
        while self.fill() > 0 {}
    }

    /// Opens a WebSocket by hand to `path`, checks the 101 and reads the greeting.
    fn upgrade(srv: &Server, path: &str) -> Raw {
        let mut raw = Raw::connect(srv);
        raw.send(handshake(path, &[]).as_bytes());
        let resp = raw.response();
        assert_eq!(resp.status, 101, "{resp:?}");
        let greeting = raw.frame();
        assert_eq!(greeting.opcode, 0x1, "greeting {greeting:?}");
        assert!(greeting.fin && greeting.rsv == 0);
        raw
    }
}

/// Parses a complete unmasked frame at the start of `buf`: the frame and the bytes it took.
fn parse_frame(buf: &[u8]) -> Option<(Frame, usize)> {
    if buf.len() < 2 {
        return None;
    }
    let (b0, b1) = (buf[0], buf[1]);
    assert_eq!(b1 & 0x80, 0, "server frame is masked");
    let (len, at) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return None;
            }
            (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4)
        }
        127 => {
            if buf.len() < 10 {
                return None;
            }
            let mut l = [0u8; 8];
            l.copy_from_slice(&buf[2..10]);
            (u64::from_be_bytes(l) as usize, 10)
        }
        n => (n as usize, 2),
    };
    if buf.len() < at + len {
        return None;
    }
    Some((
        Frame {
            fin: b0 & 0x80 != 0,
            rsv: (b0 >> 4) & 0x7,
            opcode: b0 & 0xF,
            payload: buf[at..at + len].to_vec(),
        },
        at + len,
    ))
}

/// A client frame: the first byte as given (FIN, RSV, opcode), the payload masked with `mask`.
fn frame(b0: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![b0];
    let mbit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => out.push(mbit | n as u8),
        n @ 126..=0xFFFF => {
            out.push(mbit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mbit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// An upgrade request for `path` with `extra` header lines (each `Name: value`); a header in
/// `extra` replaces the default of the same name.
fn handshake(path: &str, extra: &[&str]) -> String {
    let defaults = [
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        &format!("Sec-WebSocket-Key: {KEY}"),
        "Sec-WebSocket-Version: 13",
    ];
    let name = |h: &str| h.split(':').next().unwrap_or("").to_ascii_lowercase();
    let mut req = format!("GET /{path} HTTP/1.1\r\n");
    for h in defaults {
        if !extra.iter().any(|e| name(e) == name(h)) {
            req.push_str(h);
            req.push_str("\r\n");
        }
    }
    for e in extra {
        req.push_str(e);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req
}

/// Sends `bytes` from a writer thread (ignoring errors: the server may answer and close before
/// taking them all) while reading the response here.
fn exchange(srv: &Server, bytes: Vec<u8>) -> Response {
    let mut raw = Raw::connect(srv);
    let mut writer = raw.s.try_clone().expect("clone");
    let t = thread::spawn(move || {
        for chunk in bytes.chunks(1024) {
            if writer.write_all(chunk).is_err() {
                return;
            }
        }
    });
    let resp = raw.response();
    raw.expect_end();
    t.join().expect("writer thread");
    resp
}

/// Opens a publisher and a subscriber by hand, sends `bytes` on each, and checks the server
/// answers with a close frame of `code` (and `reason` on the publisher, if given), then ends
/// the connection.
fn expect_close(srv: &mut Server, w: &mut Witness, bytes: &[u8], code: u16, reason: Option<&str>) {
    for path in ["live?publish", "trades"] {
        let mut raw = Raw::upgrade(srv, path);
        raw.send(bytes);
        let (got, why) = raw.close();
        assert_eq!(got, code, "{path}: close {got} {why:?}, want {code}");
        if let (Some(r), true) = (reason, path.ends_with("publish")) {
            assert_eq!(why, r, "{path}: close reason");
        }
        raw.expect_end();
        still_fine(srv, w);
    }
}

// ---------------------------------------------------------------------------------------------
// The handshake.

#[test]
fn truncated_handshake_then_close_is_dropped_without_harm() {
    let (mut srv, mut w, _s) = start();
    for cut in [1, 20, 60] {
        let req = handshake("live", &[]);
        let mut raw = Raw::connect(&srv);
        raw.send(&req.as_bytes()[..cut]);
        raw.s.shutdown(Shutdown::Write).expect("shutdown");
        raw.expect_end();
        assert!(
            raw.buf.is_empty(),
            "answered a truncated head: {:?}",
            raw.buf
        );
        still_fine(&mut srv, &mut w);
    }
    // dropped outright, without even a half-close
    for _ in 0..5 {
        let mut raw = Raw::connect(&srv);
        raw.send(&handshake("live?publish", &[]).as_bytes()[..40]);
        drop(raw);
    }
    still_fine(&mut srv, &mut w);
}

#[test]
fn bad_sec_websocket_key_is_400() {
    let (mut srv, mut w, _s) = start();
    for key in [
        "Sec-WebSocket-Key: not base64!",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j", // base64 of 15 bytes... not 16
        "Sec-WebSocket-Key: ",
    ] {
        let resp = exchange(&srv, handshake("live", &[key]).into_bytes());
        assert_eq!(resp.status, 400, "{key}: {resp:?}");
        assert_eq!(resp.error_code(), "bad_handshake");
        still_fine(&mut srv, &mut w);
    }
}

#[test]
fn wrong_websocket_version_is_426_naming_13() {
    let (mut srv, mut w, _s) = start();
    for v in ["Sec-WebSocket-Version: 8", "Sec-WebSocket-Version: 14"] {
        let resp = exchange(&srv, handshake("live", &[v]).into_bytes());
        assert_eq!(resp.status, 426, "{v}: {resp:?}");
        assert_eq!(resp.header("sec-websocket-version"), Some("13"), "{resp:?}");
        still_fine(&mut srv, &mut w);
    }
}

#[test]
fn huge_headers_are_431() {
    let (mut srv, mut w, _s) = start();
    // one 100 KB header
    let big = format!("X-Big: {}", "a".repeat(100 * 1024));
    let resp = exchange(&srv, handshake("live", &[&big]).into_bytes());
    assert_eq!(resp.status, 431, "{:?}", resp.status);
    assert_eq!(resp.error_code(), "headers_too_large");
    still_fine(&mut srv, &mut w);
    // 100 KB of small headers
    let lines: Vec<String> = (0..4000).map(|i| format!("X-H{i}: {i:020}")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let req = handshake("live", &refs);
    assert!(req.len() >= 100 * 1024);
    let resp = exchange(&srv, req.into_bytes());
    assert_eq!(resp.status, 431, "{:?}", resp.status);
    assert_eq!(resp.error_code(), "headers_too_large");
    still_fine(&mut srv, &mut w);
}

#[test]
fn slow_clients_are_cut_off_by_the_handshake_timeout() {
    let (mut srv, mut w, _s) = start();
    let addr = srv.addr;
    let started = Instant::now();
    // a slow loris: one byte a second, never finishing its head
    let loris = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(1000))).ok();
        let req = handshake("live", &[]);
        let mut got = Vec::new();
        for b in req.as_bytes().iter().cycle() {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            let mut chunk = [0u8; 1024];
            match s.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
            assert!(started.elapsed() < Duration::from_secs(20), "never cut off");
        }
        (got, started.elapsed())
    });
    // a client that connects and says nothing
    let silent = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        (got, started.elapsed())
    });
    // everyone else is served meanwhile
    while !(loris.is_finished() && silent.is_finished()) {
        still_fine(&mut srv, &mut w);
        let resp = exchange(&srv, b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n".to_vec());
        assert_eq!(resp.status, 200);
        thread::sleep(Duration::from_millis(250));
        assert!(started.elapsed() < Duration::from_secs(25));
    }
    for (name, t) in [("slow loris", loris), ("silent client", silent)] {
        let (got, took) = t.join().expect("thread");
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{name}: {text:?}"
        );
        assert!(
            text.contains("\"code\":\"request_timeout\""),
            "{name}: {text}"
        );
        assert!(
            took >= Duration::from_secs(9) && took < Duration::from_secs(15),
            "{name}: cut off after {took:?}"
        );
    }
    still_fine(&mut srv, &mut w);
}

#[test]
fn plain_get_of_an_unknown_path_is_json_404() {
    let (mut srv, mut w, _s) = start();
    for path in ["nope", "trades/extra", "_echo"] {
        let req = format!("GET /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let resp = exchange(&srv, req.into_bytes());
        assert_eq!(resp.status, 404, "{path}: {resp:?}");
        assert_eq!(resp.error_code(), "not_found");
        still_fine(&mut srv, &mut w);
    }
}

#[test]
fn get_stats_is_200_json_listing_the_streams() {
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let (mut srv, mut w, _s) = start();
    let resp = exchange(
        &srv,
        b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
    );
    assert_eq!(resp.status, 200, "{resp:?}");
    // the server closes after one response, and says so (RFC 9112 §9.6)
    assert_eq!(resp.header("connection"), Some("close"), "{resp:?}");
    // HEAD: the same head, no body (RFC 9110 §9.3.2)
    for path in ["/stats", "/metrics", "/v1/streams/trades"] {
        let mut raw = Raw::connect(&srv);
        raw.send(format!("HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes());
        raw.expect_end();
        let text = String::from_utf8(raw.buf.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {text}");
        assert!(text.contains("\r\ncontent-length: "), "{path}: {text}");
        assert!(
            text.ends_with("\r\n\r\n"),
            "{path}: a body came back: {text}"
        );
    }
    let v = resp.json();
    let streams = v["streams"].as_array().expect("streams array");
    let names: Vec<&str> = streams.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(
        names.contains(&"live") && names.contains(&"trades"),
        "{names:?}"
    );
    let live = streams
        .iter()
        .find(|s| s["name"].as_str() == Some("live"))
        .unwrap();
    assert_eq!(
        live["subscribers"].as_u64(),
        Some(1),
        "the witness subscriber"
    );
    assert!(live["end_offset"].is_null());
    still_fine(&mut srv, &mut w);
}

#[test]
fn offered_permessage_deflate_is_declined() {
    let (mut srv, mut w, _s) = start();
    let mut raw = Raw::connect(&srv);
    raw.send(
        handshake(
            "trades?publish",
            &["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"],
        )
        .as_bytes(),
    );
    let resp = raw.response();
    assert_eq!(resp.status, 101, "{resp:?}");
    assert_eq!(resp.header("sec-websocket-extensions"), None, "{resp:?}");
    assert_eq!(
        resp.header("sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "RFC 6455 §1.3's accept for its sample key"
    );
    let greeting = raw.frame();
    assert_eq!(
        (greeting.opcode, greeting.rsv),
        (0x1, 0),
        "uncompressed text greeting"
    );
    sonic_rs::from_slice::<sonic_rs::Value>(&greeting.payload).expect("greeting is JSON");
    // and the connection works uncompressed
    raw.send(&frame(
        0x81,
        support::trade(1, "BTCUSD").as_bytes(),
        Some(MASK),
    ));
    let reply = raw.frame();
    assert_eq!((reply.opcode, reply.rsv), (0x1, 0));
    assert!(reply.payload.starts_with(br#"{"ok":["#), "{reply:?}");
    still_fine(&mut srv, &mut w);
}

// ---------------------------------------------------------------------------------------------
// Frames (RFC 6455 §5), on a publisher and on a subscriber.

#[test]
fn unmasked_client_frame_is_1002() {
    let (mut srv, mut w, _s) = start();
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x81, br#"{"n":1}"#, None),
        1002,
        None,
    );
    // also when it arrives in the same packet as the handshake
    let mut bytes = handshake("live?publish", &[]).into_bytes();
    bytes.extend_from_slice(&frame(0x81, br#"{"n":1}"#, None));
    let mut raw = Raw::connect(&srv);
    raw.send(&bytes);
    assert_eq!(raw.response().status, 101);
    assert_eq!(raw.close().0, 1002);
    raw.expect_end();
    still_fine(&mut srv, &mut w);
}

#[test]
fn invalid_utf8_text_is_1007() {
    let (mut srv, mut w, _s) = start();
    // one frame: "κόσμε" then a lone continuation byte
    let bad = b"{\"s\":\"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\x80\"}";
    expect_close(&mut srv, &mut w, &frame(0x81, bad, Some(MASK)), 1007, None);
    // a UTF-16 surrogate encoded as UTF-8, which is not UTF-8
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x81, b"\xed\xa0\x80", Some(MASK)),
        1007,
        None,
    );
    // fragmented: the first fragment is already invalid; the message never finishes
    let mut raw = Raw::upgrade(&srv, "live?publish");
    raw.send(&frame(0x01, b"{\"s\":\"\xff", Some(MASK)));
    assert_eq!(raw.close().0, 1007, "fail fast on the first fragment");
    raw.expect_end();
    still_fine(&mut srv, &mut w);
}

#[test]
fn fragmented_control_frame_is_1002() {
    let (mut srv, mut w, _s) = start();
    // ping without FIN
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x09, b"hi", Some(MASK)),
        1002,
        None,
    );
    // close without FIN
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x08, &1000u16.to_be_bytes(), Some(MASK)),
        1002,
        None,
    );
    // a control frame over 125 bytes
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x89, &[b'x'; 126], Some(MASK)),
        1002,
        None,
    );
}

#[test]
fn reserved_opcode_is_1002() {
    let (mut srv, mut w, _s) = start();
    for op in [0x3u8, 0x7, 0xB, 0xF] {
        expect_close(
            &mut srv,
            &mut w,
            &frame(0x80 | op, b"", Some(MASK)),
            1002,
            None,
        );
    }
}

#[test]
fn reserved_bits_are_1002() {
    let (mut srv, mut w, _s) = start();
    for rsv in [0x40u8, 0x20, 0x10] {
        expect_close(
            &mut srv,
            &mut w,
            &frame(0x80 | rsv | 0x1, br#"{"n":1}"#, Some(MASK)),
            1002,
            None,
        );
    }
}

#[test]
fn two_mib_frame_is_1009_from_its_header_alone() {
    let (mut srv, mut w, _s) = start();
    // only the header of a 2 MiB masked binary frame: the payload is never sent, so an answer
    // at all proves it was decided from the header
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(2u64 << 20).to_be_bytes());
    header.extend_from_slice(&MASK);
    expect_close(&mut srv, &mut w, &header, 1009, Some("frame too large"));
    // the 16-bit length form is fine below the limit; a fragmented message over it is 1009 too
    let mut raw = Raw::upgrade(&srv, "live?publish");
    let part = vec![b' '; 600 * 1024];
    raw.send(&frame(0x01, &part, Some(MASK)));
    raw.send(&frame(0x00, &part, Some(MASK)));
    assert_eq!(raw.close(), (1009, "frame too large".to_string()));
    raw.expect_end();
    still_fine(&mut srv, &mut w);
}

#[test]
fn bad_close_frames_and_lengths_are_refused() {
    let (mut srv, mut w, _s) = start();
    // a close payload of one byte
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x88, &[0x03], Some(MASK)),
        1002,
        None,
    );
    // close codes that may not be sent: 1005 (no status), 999, 2999, 5000
    for code in [1005u16, 999, 2999, 5000] {
        expect_close(
            &mut srv,
            &mut w,
            &frame(0x88, &code.to_be_bytes(), Some(MASK)),
            1002,
            None,
        );
    }
    // a close reason that is not UTF-8
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye \xff");
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x88, &payload, Some(MASK)),
        1007,
        None,
    );
    // a 64-bit length with its top bit set
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 63 | 5).to_be_bytes());
    header.extend_from_slice(&MASK);
    expect_close(&mut srv, &mut w, &header, 1002, None);
    // a continuation with no message open, and a new message inside a fragmented one
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x80, b"{}", Some(MASK)),
        1002,
        None,
    );
    let mut two = frame(0x01, b"{", Some(MASK));
    two.extend_from_slice(&frame(0x81, b"{}", Some(MASK)));
    expect_close(&mut srv, &mut w, &two, 1002, None);
    // a well-formed close is answered with the same code
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    expect_close(
        &mut srv,
        &mut w,
        &frame(0x88, &payload, Some(MASK)),
        1000,
        None,
    );
}

// ---------------------------------------------------------------------------------------------
// Control frames without end.

/// A peer that pings without reading costs the server one pong, not a queue: only the most
/// recent ping is answered (RFC 6455 §5.5.3), on a subscriber and on a publisher connection.
/// With a pong queued per ping, every one of the 300,000 pings would come back (38 MB held).
#[test]
fn a_ping_flood_that_never_reads_is_answered_with_the_latest_pong_only() {
    const PINGS: u64 = 300_000;
    let (mut srv, mut w, _s) = start();
    for path in ["trades", "live?publish"] {
        let mut raw = Raw::upgrade(&srv, path);
        let mut writer = raw.s.try_clone().expect("clone");
        let sender = thread::spawn(move || {
            let mut chunk = Vec::with_capacity(1 << 16);
            for i in 0..PINGS {
                chunk.extend_from_slice(&frame(0x89, &i.to_be_bytes(), Some(MASK)));
                if chunk.len() >= (1 << 16) - 16 || i == PINGS - 1 {
                    writer
                        .write_all(&chunk)
                        .expect("the server keeps reading pings");
                    chunk.clear();
                }
            }
        });
        sender.join().expect("sender");
        // now read what came back, up to the pong for the last ping
        let mut pongs = 0u64;
        let mut last = None;
        while last != Some(PINGS - 1) {
            let f = raw.frame();
            assert_eq!(f.opcode, 0xA, "{path}: only pongs were owed, got {f:?}");
            assert_eq!(f.payload.len(), 8, "{path}: a pong echoes its ping");
            let n = u64::from_be_bytes(f.payload.try_into().unwrap());
            assert!(last.is_none_or(|l| n > l), "{path}: pongs in ping order");
            last = Some(n);
            pongs += 1;
        }
        assert!(
            pongs < PINGS / 2,
            "{path}: {pongs} pongs for {PINGS} pings that were not read meanwhile"
        );
        // and the connection still works: a ping now is answered at once
        raw.send(&frame(0x89, b"again", Some(MASK)));
        let f = raw.frame();
        assert_eq!((f.opcode, f.payload.as_slice()), (0xA, &b"again"[..]));
        still_fine(&mut srv, &mut w);
    }
}

/// Keepalive (PROTOCOL.md §1, uvicorn's 20 s ping / 20 s timeout; here 1 s each): a peer that
/// has been silent is pinged; one that does not answer — a subscriber that never reads, a
/// publisher stopped in the middle of a frame — is closed with 1011 `keepalive ping timeout`
/// and its socket let go; one that answers the pings stays, and is served.
#[test]
fn silent_peers_are_pinged_then_closed_1011_and_answering_ones_stay() {
    let setup = Setup::new();
    let cfg = setup.config(&format!(
        "[websocket]\nping_interval_s = 1\nping_timeout_s = 1\n{CONFIG}"
    ));
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);

    /// Reads frames up to the close, noting the pings; the close's code and reason.
    fn pinged_then_closed(raw: &mut Raw) -> (usize, u16, String) {
        let mut pings = 0;
        loop {
            let f = raw.frame();
            match f.opcode {
                0x9 => pings += 1,
                0x8 => {
                    let code = u16::from_be_bytes([f.payload[0], f.payload[1]]);
                    let reason = String::from_utf8(f.payload[2..].to_vec()).unwrap();
                    return (pings, code, reason);
                }
                op => panic!("unexpected opcode {op:#x}"),
            }
        }
    }
    let t0 = Instant::now();
    // a subscriber that reads but never answers
    let mut silent = Raw::upgrade(&srv, "trades");
    // a publisher stopped in the middle of a frame: 10 of its 100 payload bytes sent
    let mut stuck = Raw::upgrade(&srv, "live?publish");
    let whole = frame(0x81, &[b' '; 100], Some(MASK));
    stuck.send(&whole[..whole.len() - 90]);
    // a subscriber that answers every ping
    let mut alive = Raw::upgrade(&srv, "live");
    let answering = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut pings = 0;
        while Instant::now() < deadline {
            let f = alive.frame();
            assert_eq!(f.opcode, 0x9, "only pings before the row: {f:?}");
            alive.send(&frame(0x8A, &f.payload, Some(MASK)));
            pings += 1;
        }
        (alive, pings)
    });
    for (name, raw) in [("subscriber", &mut silent), ("publisher", &mut stuck)] {
        let (pings, code, reason) = pinged_then_closed(raw);
        assert_eq!(pings, 1, "{name}: one ping per silence");
        assert_eq!(
            (code, reason.as_str()),
            (1011, "keepalive ping timeout"),
            "{name}"
        );
        raw.expect_end();
    }
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(8),
        "closed after {elapsed:?}, want interval + timeout = 2 s"
    );
    let (mut alive, pings) = answering.join().expect("answering subscriber");
    assert!(pings >= 2, "pinged every second while silent: {pings}");
    // still served: a row published now reaches it
    let mut publ = ws_connect(&srv.url("live?publish"));
    let _ = recv_text(&mut publ);
    publ.send(tungstenite::Message::text(r#"{"k":1}"#)).unwrap();
    assert!(recv_text(&mut publ).starts_with(r#"{"ok":"#));
    loop {
        let f = alive.frame();
        if f.opcode == 0x9 {
            alive.send(&frame(0x8A, &f.payload, Some(MASK)));
            continue;
        }
        assert_eq!(f.opcode, 0x1);
        assert!(String::from_utf8(f.payload)
            .unwrap()
            .ends_with(r#"{"k":1}]"#));
        break;
    }
}

// ---------------------------------------------------------------------------------------------
// Close reasons.

/// Issue 13, 2: a 4400 reason whose detail is long (a `where=` duplicate key; a query key of
/// multibyte characters) stays valid JSON within 123 bytes: the detail is shortened at a character
/// boundary inside its string, never the JSON cut.
#[test]
fn long_4400_reasons_are_valid_json_within_123_bytes() {
    use sonic_rs::JsonValueTrait;
    let (mut srv, mut w, _s) = start();
    let accented = "%C3%A9".repeat(31);
    let cases = [
        (
            "trades?where=%7B%22side%22%3A1%2C%22side%22%3A0%7D".to_string(),
            "duplicate key 'side'",
        ),
        (
            format!("trades?{accented}=1"),
            "unknown query parameter(s): éé",
        ),
        (
            format!("trades?publish&{accented}=1"),
            "unknown query parameter(s): éé",
        ),
    ];
    for (path, starts) in cases {
        let mut raw = Raw::connect(&srv);
        raw.send(handshake(&path, &[]).as_bytes());
        let resp = raw.response();
        assert_eq!(resp.status, 101, "{path}: {resp:?}");
        let (code, reason) = raw.close();
        assert_eq!(code, 4400, "{path}: {reason}");
        assert!(reason.len() <= 123, "{path}: {} bytes", reason.len());
        let v: sonic_rs::Value = sonic_rs::from_str(&reason)
            .unwrap_or_else(|e| panic!("{path}: reason is not JSON ({e}): {reason}"));
        assert_eq!(v["error"].as_str(), Some("bad_request"), "{reason}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(starts) && detail.len() > starts.len(),
            "{path}: detail {detail:?}"
        );
        raw.expect_end();
        still_fine(&mut srv, &mut w);
    }
}

/// Issue 13, 3: the 426 for an unsupported or missing `Sec-WebSocket-Version` names the protocol
/// to switch to (`Upgrade: websocket`, RFC 9110 §15.5.22) and the version spoken
/// (`Sec-WebSocket-Version: 13`, RFC 6455 §4.4), and says what was wrong in plain words.
#[test]
fn the_426_carries_upgrade_websocket_and_a_plain_message() {
    use sonic_rs::JsonValueTrait;
    let (mut srv, mut w, _s) = start();
    let missing = handshake("live", &[]).replace("Sec-WebSocket-Version: 13\r\n", "");
    let cases = [
        (
            handshake("live", &["Sec-WebSocket-Version: 8"]),
            "unsupported Sec-WebSocket-Version 8 (this server speaks 13)",
        ),
        (
            handshake("live", &["Sec-WebSocket-Version: 14"]),
            "unsupported Sec-WebSocket-Version 14 (this server speaks 13)",
        ),
        (
            missing,
            "missing Sec-WebSocket-Version (this server speaks 13)",
        ),
    ];
    for (req, message) in cases {
        let resp = exchange(&srv, req.into_bytes());
        assert_eq!(resp.status, 426, "{resp:?}");
        assert_eq!(resp.header("sec-websocket-version"), Some("13"), "{resp:?}");
        assert!(
            resp.header("upgrade")
                .is_some_and(|u| u.eq_ignore_ascii_case("websocket")),
            "{resp:?}"
        );
        let connection: Vec<String> = resp
            .headers
            .iter()
            .filter(|(n, _)| n == "connection")
            .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
            .collect();
        assert!(
            connection.iter().any(|t| t == "upgrade") && connection.iter().any(|t| t == "close"),
            "{resp:?}"
        );
        assert_eq!(resp.error_code(), "bad_handshake");
        assert_eq!(resp.json()["error"]["message"].as_str(), Some(message));
        still_fine(&mut srv, &mut w);
    }
}

// ---------------------------------------------------------------------------------------------
// Start-up.

/// What one connection attempt during a restart got.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// Nothing listens yet (or any more): the connect itself was refused.
    Refused,
    /// Accepted and answered with an HTTP status line.
    Answered,
    /// Accepted, then closed or reset before any status line: what must never happen.
    Dropped(String),
}

fn attempt(addr: std::net::SocketAddr) -> Attempt {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return Attempt::Refused;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    if let Err(e) = s.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") {
        return Attempt::Dropped(format!("write: {e}"));
    }
    let mut got = Vec::new();
    let mut chunk = [0u8; 512];
    while got.len() < 9 {
        match s.read(&mut chunk) {
            Ok(0) => return Attempt::Dropped(format!("EOF after {got:?}")),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => return Attempt::Dropped(format!("read: {e}")),
        }
    }
    assert!(got.starts_with(b"HTTP/1.1 "), "{got:?}");
    Attempt::Answered
}

/// Whether a socket listens on `port` (`/proc/net/tcp`, state 0A).
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && f[3] == "0A"
            && f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

/// Issue 13, 6: a client connecting while a restarting server probes its port is refused or
/// served, never accepted and then reset (the port probe must not listen). Clients connect in
/// tight loops across repeated restarts on one address.
#[test]
fn connections_during_start_up_are_refused_or_served_never_reset() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let first = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = first.addr;
    assert_eq!(first.stop(), Some(0));
    // the probe of the old code listened for well under a millisecond per start: many rounds
    let until = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while Instant::now() < until {
        round += 1;
        // the previous run's listeners outlive its process for a moment (io_uring releases
        // their descriptors after exit): wait until nothing listens, so that what the clients
        // meet is this start-up alone
        let deadline = Instant::now() + Duration::from_secs(10);
        while listening(addr.port()) {
            assert!(
                Instant::now() < deadline,
                "the stopped server still listens"
            );
            thread::sleep(Duration::from_millis(5));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut answered = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        match attempt(addr) {
                            Attempt::Refused => {}
                            Attempt::Answered => answered += 1,
                            Attempt::Dropped(why) => return Err(why),
                        }
                    }
                    Ok(answered)
                })
            })
            .collect();
        let server = support::start_server_at(Some(&cfg), &setup.data(), &addr.to_string());
        // let the clients be served a moment, then stop them before the server stops
        thread::sleep(Duration::from_millis(5));
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            match c.join().expect("client thread") {
                Ok(_) => {}
                Err(why) => panic!("round {round}: a connection was accepted, then dropped: {why}"),
            }
        }
        assert_eq!(server.stop(), Some(0));
    }
}
