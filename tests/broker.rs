//! Black-box tests of the broker over WebSocket (PROTOCOL.md §2–§8): greetings, replay windows,
//! refusals, publishing, exactly-once, fan-out at scale, slow subscribers, shutdown and crash
//! recovery, and the full es-mbo sample. Every check is on exact bytes and exact close codes.
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use corecast_storage::schema::{RowCodec, Schema};
use support::{http_get, publish_on, recv_text, trade, ws_connect, Server, Setup, Ws};
use tungstenite::Message;

/// The trade schema as every greeting publishes it (PROTOCOL.md §4).
const TRADE_PUBLISHED: &str = r#"{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"amount":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"trade_id":{"type":"integer","format":"int64"}},"required":["event_ts","price","amount","side","symbol","trade_id"]}"#;

/// A schema with a struct and a list column, for the `where=` refusals.
const NESTED_SCHEMA: &str = r#"{"type":"object","properties":{"a":{"type":"integer"},"st":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},"l":{"type":"array","items":{"type":"string"}}},"required":["a","st","l"]}"#;

/// The streams most tests use.
fn standard_config(setup: &Setup) -> std::path::PathBuf {
    let nested = setup.tmp.path().join("nested.schema.json");
    std::fs::write(&nested, NESTED_SCHEMA).unwrap();
    setup.config(&format!(
        r#"
[[stream]]
name = "trades"
schema = "@trade"

[[stream]]
name = "live"
durable = false

[[stream]]
name = "orders"
schema = "@trade"
exactly_once = true

[[stream]]
name = "small"
schema = "@trade"
max_replay = 5

[[stream]]
name = "nested"
schema = "{}"
"#,
        nested.display()
    ))
}

// ---------------------------------------------------------------------------------------------
// helpers

fn trade_codec() -> RowCodec {
    let text =
        std::fs::read_to_string(support::shared_dir().join("tools/anchor/trade.schema.json"))
            .unwrap();
    RowCodec::Schema(Schema::compile(&text).expect("trade schema compiles"))
}

/// The canonical encoding of `row` (PROTOCOL.md §5), as the storage crate produces it.
fn canon(codec: &RowCodec, row: &str) -> String {
    let v = corecast_storage::json::parse(row.as_bytes()).expect("row parses");
    let mut out = Vec::new();
    codec.encode_row(&v, &mut out).expect("row is valid");
    String::from_utf8(out).unwrap()
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Percent-encodes everything but unreserved characters.
fn pct(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// What a greeting must be, byte for byte.
struct G<'a> {
    stream: &'a str,
    end: Option<u64>,
    replay: Option<(u64, u64)>,
    schema: Option<&'a str>,
    /// `Some` on durable streams.
    stream_id: Option<&'a str>,
    where_: Option<&'a str>,
    /// `(id, last_seq, last_offset)` on exactly-once publishers.
    publisher: Option<(&'a str, u64, Option<u64>)>,
}

fn opt(v: Option<u64>) -> String {
    v.map_or("null".into(), |n| n.to_string())
}

fn greeting_text(data: &Path, g: &G) -> String {
    let durable = g.stream_id.is_some();
    let (meta, hint) = if durable {
        let dir = data.canonicalize().unwrap().join(g.stream);
        (
            format!("\"file://{}/{}.metadata.json\"", dir.display(), g.stream),
            format!(
                "\"file://{}/{}.metadata/version-hint.text\"",
                dir.display(),
                g.stream
            ),
        )
    } else {
        ("null".into(), "null".into())
    };
    let mut s = format!(
        r#"{{"streamcast":4,"stream":"{}","end_offset":{},"replay":{},"durable":{durable},"group_commit":{durable},"schema":{},"metadata":{meta},"metadata_hint":{hint},"stream_id":{},"where":{}"#,
        g.stream,
        opt(g.end),
        g.replay
            .map_or("null".into(), |(a, b)| format!("[{a},{b}]")),
        g.schema.unwrap_or("null"),
        g.stream_id.map_or("null".into(), |i| format!("\"{i}\"")),
        g.where_.unwrap_or("null"),
    );
    if let Some((id, seq, off)) = g.publisher {
        s.push_str(&format!(
            r#","publisher":{{"id":"{id}","last_seq":{seq},"last_offset":{}}}"#,
            opt(off)
        ));
    }
    s.push('}');
    s
}

/// The `stream_id` of a greeting, checked to be a lower-case hyphenated UUID.
fn stream_id_of(greeting: &str) -> String {
    let v: sonic_rs::Value = sonic_rs::from_str(greeting).unwrap();
    use sonic_rs::JsonValueTrait;
    let id = v
        .get("stream_id")
        .and_then(|x| x.as_str())
        .expect("stream_id")
        .to_string();
    assert_eq!(id.len(), 36, "{id}");
    for (i, c) in id.chars().enumerate() {
        if [8, 13, 18, 23].contains(&i) {
            assert_eq!(c, '-', "{id}");
        } else {
            assert!(c.is_ascii_hexdigit() && !c.is_ascii_uppercase(), "{id}");
        }
    }
    id
}

/// `[offset,ts,row]` split without re-encoding the row.
fn split_frame(s: &str) -> (Option<u64>, i64, &str) {
    assert!(
        s.starts_with('[') && s.ends_with(']'),
        "not a data frame: {s}"
    );
    let inner = &s[1..s.len() - 1];
    let (o, rest) = inner.split_once(',').expect("offset");
    let (t, row) = rest.split_once(',').expect("ts");
    let off = if o == "null" {
        None
    } else {
        Some(o.parse().expect("int offset"))
    };
    (off, t.parse().expect("int ts"), row)
}

fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text.to_string())).expect("send");
}

/// Sends one frame and returns its reply.
fn call(ws: &mut Ws, text: &str) -> String {
    send(ws, text);
    recv_text(ws)
}

/// Opens a WebSocket and returns it with its greeting.
fn open(srv: &Server, path: &str) -> (Ws, String) {
    let mut ws = ws_connect(&srv.url(path));
    let g = recv_text(&mut ws);
    (ws, g)
}

/// Opens a WebSocket, keeps it in `keep`, and returns its greeting.
fn keep_open(keep: &mut Vec<Ws>, srv: &Server, path: &str) -> String {
    let (ws, g) = open(srv, path);
    keep.push(ws);
    g
}

/// The first thing the server sends must be a close (a refusal before any greeting).
fn refused(srv: &Server, path: &str) -> (u16, String) {
    let mut ws = ws_connect(&srv.url(path));
    match ws.read().expect("a close frame") {
        Message::Close(Some(c)) => (u16::from(c.code), c.reason.to_string()),
        other => panic!("{path}: expected a refusal, got {other:?}"),
    }
}

/// Reads the close frame that must come next (no data frame before it).
fn next_close(ws: &mut Ws) -> (u16, String) {
    loop {
        match ws.read().expect("ws read") {
            Message::Close(Some(c)) => return (u16::from(c.code), c.reason.to_string()),
            Message::Close(None) => return (1005, String::new()),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a close, got {other:?}"),
        }
    }
}

/// Publishes `rows` (JSON texts) in frames of `per_frame`, at most `window` frames in flight;
/// returns every acknowledged offset in order.
fn publish_all(ws: &mut Ws, rows: &[String], per_frame: usize, window: usize) -> Vec<u64> {
    let frames: Vec<String> = rows
        .chunks(per_frame)
        .map(|c| {
            if per_frame == 1 {
                c[0].clone()
            } else {
                format!("[{}]", c.join(","))
            }
        })
        .collect();
    let mut acks = Vec::with_capacity(rows.len());
    let mut in_flight = 0;
    let read_one = |ws: &mut Ws, acks: &mut Vec<u64>| {
        let r = recv_text(ws);
        acks.extend(ok_offsets(&r));
    };
    for f in &frames {
        if in_flight == window {
            read_one(ws, &mut acks);
            in_flight -= 1;
        }
        ws.write(Message::text(f.clone())).expect("write");
        ws.flush().expect("flush");
        in_flight += 1;
    }
    while in_flight > 0 {
        read_one(ws, &mut acks);
        in_flight -= 1;
    }
    acks
}

/// The offsets of an `{"ok":[…]}` reply (panics on anything else).
fn ok_offsets(reply: &str) -> Vec<u64> {
    let body = reply
        .strip_prefix("{\"ok\":[")
        .and_then(|r| r.strip_suffix("]}"))
        .unwrap_or_else(|| panic!("not a plain ok reply: {reply}"));
    body.split(',')
        .map(|x| x.parse().expect("offset"))
        .collect()
}

fn okr(range: std::ops::RangeInclusive<u64>) -> String {
    let v: Vec<String> = range.map(|o| o.to_string()).collect();
    format!("{{\"ok\":[{}]}}", v.join(","))
}

/// Reads `n` data frames and checks they carry offsets `first..first+n` and the given rows.
fn expect_rows(ws: &mut Ws, first: u64, rows: &[String]) -> Vec<String> {
    let mut got = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let f = recv_text(ws);
        let (off, ts, r) = split_frame(&f);
        assert_eq!(off, Some(first + i as u64), "frame {i}: {f}");
        assert!(ts > 1_600_000_000_000_000, "{f}");
        assert_eq!(r, row, "frame {i}");
        got.push(f);
    }
    got
}

// ---- a raw WebSocket client: fast enough for hundreds of sockets in a debug build -------------

struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
    start: usize,
}

impl Raw {
    fn connect(addr: SocketAddr, path: &str) -> Raw {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        s.set_write_timeout(Some(Duration::from_secs(30))).ok();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut raw = Raw {
            s,
            buf: Vec::new(),
            start: 0,
        };
        loop {
            if let Some(p) = raw.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw.buf[..p]).to_string();
                assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
                assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
                raw.start = p + 4;
                return raw;
            }
            assert!(raw.fill() > 0, "eof during the handshake");
        }
    }

    fn fill(&mut self) -> usize {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > (1 << 20) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + (256 << 10), 0);
        let n = self.s.read(&mut self.buf[old..]).expect("raw read");
        self.buf.truncate(old + n);
        n
    }

    /// (header length, payload length) of the frame at `at`, if its header is complete.
    fn header(&self, at: usize) -> Option<(usize, usize)> {
        let b = &self.buf[at..];
        if b.len() < 2 {
            return None;
        }
        assert_eq!(b[1] & 0x80, 0, "server frames are unmasked");
        match b[1] & 0x7f {
            126 if b.len() >= 4 => Some((4, u16::from_be_bytes([b[2], b[3]]) as usize)),
            127 if b.len() >= 10 => Some((
                10,
                u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
            )),
            126 | 127 => None,
            n => Some((2, n as usize)),
        }
    }

    /// The next frame: (first header byte, payload).
    fn next(&mut self) -> (u8, Vec<u8>) {
        loop {
            if let Some((h, p)) = self.header(self.start) {
                if self.buf.len() >= self.start + h + p {
                    let b0 = self.buf[self.start];
                    let payload = self.buf[self.start + h..self.start + h + p].to_vec();
                    self.start += h + p;
                    return (b0, payload);
                }
            }
            assert!(self.fill() > 0, "eof");
        }
    }

    fn text(&mut self) -> String {
        let (b0, p) = self.next();
        assert_eq!(
            b0,
            0x81,
            "a final text frame: {}",
            String::from_utf8_lossy(&p)
        );
        String::from_utf8(p).unwrap()
    }

    /// The raw bytes of the next `n` frames, each checked to be a final text frame.
    fn take_frames(&mut self, n: usize) -> Vec<u8> {
        let mut rel = 0;
        let mut count = 0;
        while count < n {
            let at = self.start + rel;
            match self.header(at) {
                Some((h, p)) if self.buf.len() >= at + h + p => {
                    assert_eq!(
                        self.buf[at],
                        0x81,
                        "frame {count} is not text: {}",
                        String::from_utf8_lossy(&self.buf[at..(at + h + p).min(at + 200)])
                    );
                    rel += h + p;
                    count += 1;
                }
                _ => assert!(self.fill() > 0, "eof after {count} of {n} frames"),
            }
        }
        let out = self.buf[self.start..self.start + rel].to_vec();
        self.start += rel;
        out
    }

    /// Reads frames until a close: returns the text frames before it and the close.
    fn until_close(&mut self) -> (Vec<String>, (u16, String)) {
        let mut texts = Vec::new();
        loop {
            let (b0, p) = self.next();
            match b0 & 0x0f {
                0x1 => texts.push(String::from_utf8(p).unwrap()),
                0x8 => {
                    let code = u16::from_be_bytes([p[0], p[1]]);
                    return (texts, (code, String::from_utf8(p[2..].to_vec()).unwrap()));
                }
                0x9 | 0xA => {}
                op => panic!("unexpected opcode {op}"),
            }
        }
    }

    /// After the server's close: it lets go of the socket within `within` although this peer
    /// never closes — a ping written after that is refused (the peer's reset, or a broken pipe).
    fn expect_released(&mut self, within: Duration) {
        let t0 = Instant::now();
        let ping = [0x89, 0x80, 0, 0, 0, 0];
        while self.s.write_all(&ping).is_ok() {
            assert!(
                t0.elapsed() < within,
                "the server still holds the socket {within:?} after its close"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A masked (zero key) client text frame.
fn client_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x81];
    let n = payload.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Splits the bytes of complete server text frames into their payloads.
fn split_frames(bytes: &[u8]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let (h, p) = match bytes[i + 1] & 0x7f {
            126 => (4, u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize),
            127 => (
                10,
                u64::from_be_bytes(bytes[i + 2..i + 10].try_into().unwrap()) as usize,
            ),
            n => (2, n as usize),
        };
        out.push(std::str::from_utf8(&bytes[i + h..i + h + p]).unwrap());
        i += h + p;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 1. greetings

#[test]
fn greetings_are_byte_exact_and_stream_id_survives_restart() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let mut keep = Vec::new();

    // durable stream, empty log: publisher and live subscriber get the same bytes
    let (mut publ, g) = open(&srv, "trades?publish");
    let id = stream_id_of(&g);
    let base = G {
        stream: "trades",
        end: Some(1),
        replay: None,
        schema: Some(TRADE_PUBLISHED),
        stream_id: Some(&id),
        where_: None,
        publisher: None,
    };
    assert_eq!(g, greeting_text(&data, &base));
    let g = keep_open(&mut keep, &srv, "trades");
    assert_eq!(g, greeting_text(&data, &base));
    // EARLIEST on an empty log is the frontier, not a refusal
    let g = keep_open(&mut keep, &srv, "trades?offset=0");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                replay: Some((1, 1)),
                ..base
            }
        )
    );
    let g = keep_open(
        &mut keep,
        &srv,
        &format!("trades?where={}", pct(r#"{"side":1}"#)),
    );
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                where_: Some(r#"{"side":1}"#),
                ..base
            }
        )
    );

    // after 8 rows: offset=1 with where= changes end_offset, replay and where only
    for i in 1..=8 {
        assert_eq!(
            call(&mut publ, &trade(i, "BTCUSD")),
            format!("{{\"ok\":[{i}]}}")
        );
    }
    let g = keep_open(
        &mut keep,
        &srv,
        &format!("trades?offset=1&where={}", pct(r#"{"side": 1}"#)),
    );
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(9),
                replay: Some((1, 9)),
                where_: Some(r#"{"side":1}"#),
                ..base
            }
        )
    );
    let g = keep_open(&mut keep, &srv, "trades");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(9),
                ..base
            }
        )
    );
    let g = keep_open(&mut keep, &srv, "trades?offset=9");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(9),
                replay: Some((9, 9)),
                ..base
            }
        )
    );

    // live-only stream without a schema: nulls everywhere
    let live = G {
        stream: "live",
        end: None,
        replay: None,
        schema: None,
        stream_id: None,
        where_: None,
        publisher: None,
    };
    let g = keep_open(&mut keep, &srv, "live?publish");
    assert_eq!(g, greeting_text(&data, &live));
    let g = keep_open(&mut keep, &srv, "live");
    assert_eq!(g, greeting_text(&data, &live));
    assert_eq!(
        g,
        r#"{"streamcast":4,"stream":"live","end_offset":null,"replay":null,"durable":false,"group_commit":false,"schema":null,"metadata":null,"metadata_hint":null,"stream_id":null,"where":null}"#
    );
    let g = keep_open(
        &mut keep,
        &srv,
        &format!("live?where={}", pct(r#"{"anything":[1,"x"]}"#)),
    );
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                where_: Some(r#"{"anything":[1,"x"]}"#),
                ..live
            }
        )
    );

    // exactly-once publisher: a new id, then the mark after seqs 1 to 5
    let (mut p1, g) = open(&srv, "orders?publish&publisher=p1");
    let oid = stream_id_of(&g);
    assert_ne!(oid, id, "every stream has its own id");
    let orders = G {
        stream: "orders",
        end: Some(1),
        replay: None,
        schema: Some(TRADE_PUBLISHED),
        stream_id: Some(&oid),
        where_: None,
        publisher: Some(("p1", 0, None)),
    };
    assert_eq!(g, greeting_text(&data, &orders));
    for s in 1..=5 {
        assert_eq!(
            call(&mut p1, &format!("[{s},{}]", trade(s as i64, "X"))),
            format!("{{\"ok\":[{s}]}}")
        );
    }
    drop(p1);
    // the claim may still be held for a moment by the closing connection: a takeover is fine too
    let g = keep_open(
        &mut keep,
        &srv,
        &format!("orders?publish&publisher={}", pct("p1")),
    );
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(6),
                publisher: Some(("p1", 5, Some(5))),
                ..orders
            }
        )
    );
    // a subscriber of an exactly-once stream gets no publisher key
    let g = keep_open(&mut keep, &srv, "orders");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(6),
                publisher: None,
                ..orders
            }
        )
    );
    drop(publ);
    // one subscriber stays to see the shutdown close; the others leave first
    let mut watcher = keep.pop().unwrap();
    drop(keep);
    let closer = std::thread::spawn(move || next_close(&mut watcher));
    assert_eq!(srv.stop(), Some(0));
    assert_eq!(
        closer.join().unwrap(),
        (1001, "server shutting down".to_string())
    );

    // restart: the same ids, the frontier and the marks come back
    let srv = Server::start(Some(&cfg), &data, &[]);
    let (_s, g) = open(&srv, "trades?offset=0");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(9),
                replay: Some((1, 9)),
                ..base
            }
        )
    );
    let (_p, g) = open(&srv, "orders?publish&publisher=p1");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(6),
                publisher: Some(("p1", 5, Some(5))),
                ..orders
            }
        )
    );
    let (_p, g) = open(&srv, "orders?publish&publisher=p2");
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                end: Some(6),
                publisher: Some(("p2", 0, None)),
                ..orders
            }
        )
    );
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 2. subscribe, replay windows, the splice, canonical rows

#[test]
fn replay_windows_splice_into_live_without_gap_or_duplicate() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let codec = trade_codec();

    // loosely typed input is normalised on the live path: 85565 → 85565.0
    let (mut publ, _) = open(&srv, "trades?publish");
    let (mut live0, _) = open(&srv, "trades");
    let loose = r#"{"trade_id":1,"symbol":"BTCUSD","side":1,"amount":1,"price":85565,"event_ts":1796081766304281}"#;
    assert_eq!(call(&mut publ, loose), r#"{"ok":[1]}"#);
    let f1 = recv_text(&mut live0);
    let (_, ts1, _) = split_frame(&f1);
    assert_eq!(
        f1,
        format!(
            r#"[1,{ts1},{{"event_ts":1796081766304281,"price":85565.0,"amount":1.0,"side":1,"symbol":"BTCUSD","trade_id":1}}]"#
        )
    );
    assert!(
        (ts1 - now_us()).abs() < 60_000_000,
        "ts is µs since the epoch: {ts1}"
    );

    // a batch shares one ts; rows 2..=10
    let rows: Vec<String> = (2..=10).map(|i| trade(i, "BTCUSD")).collect();
    let canon_rows: Vec<String> = rows.iter().map(|r| canon(&codec, r)).collect();
    assert_eq!(
        call(&mut publ, &format!("[{}]", rows.join(","))),
        okr(2..=10)
    );
    let live_frames = expect_rows(&mut live0, 2, &canon_rows);
    let ts_batch: Vec<i64> = live_frames.iter().map(|f| split_frame(f).1).collect();
    assert!(
        ts_batch.iter().all(|t| *t == ts_batch[0]),
        "one stamp per publish frame"
    );
    assert!(ts_batch[0] >= ts1);

    // replay windows: [N, end) exactly, then live frames; replayed bytes equal live bytes
    let mut all_live = vec![f1.clone()];
    all_live.extend(live_frames.iter().cloned());
    let mut subs = Vec::new();
    for (q, first) in [
        ("offset=4", 4u64),
        ("offset=0", 1),
        ("offset=1", 1),
        ("offset=11", 11),
        ("offset=%2B3", 3),
    ] {
        let (mut ws, g) = open(&srv, &format!("trades?{q}"));
        assert!(
            g.contains(&format!("\"end_offset\":11,\"replay\":[{first},11],")),
            "{q}: {g}"
        );
        for off in first..11 {
            assert_eq!(
                recv_text(&mut ws),
                all_live[(off - 1) as usize],
                "{q}: offset {off}"
            );
        }
        subs.push((q, ws, 11u64));
    }
    let (w, g) = open(
        &srv,
        &format!("trades?offset=1&where={}", pct(r#"{"side":[1]}"#)),
    );
    assert!(g.contains("\"replay\":[1,11],"), "{g}");
    let mut filtered = w;
    for off in [1u64, 3, 5, 7, 9] {
        assert_eq!(recv_text(&mut filtered), all_live[(off - 1) as usize]);
    }

    // more rows: every subscriber continues at 11 with no gap, no duplicate
    let more: Vec<String> = (11..=15).map(|i| trade(i, "ETHUSD")).collect();
    for (k, r) in more.iter().enumerate() {
        assert_eq!(call(&mut publ, r), format!("{{\"ok\":[{}]}}", 11 + k));
    }
    let more_canon: Vec<String> = more.iter().map(|r| canon(&codec, r)).collect();
    let live_more = expect_rows(&mut live0, 11, &more_canon);
    for (q, ws, first) in subs.iter_mut() {
        let got = expect_rows(ws, *first, &more_canon);
        assert_eq!(got, live_more, "{q}: the same bytes on every connection");
    }
    for off in [11u64, 13, 15] {
        assert_eq!(recv_text(&mut filtered), live_more[(off - 11) as usize]);
    }

    // live-only stream: null offsets, the publisher's own key order and values
    let (mut lp, _) = open(&srv, "live?publish");
    let (mut ls, _) = open(&srv, "live");
    assert_eq!(
        call(&mut lp, r#"{"b":2,"a":1.0,"flag":true,"n":null}"#),
        r#"{"ok":[null]}"#
    );
    assert_eq!(
        call(&mut lp, r#"[{"x":"é"},{"y":[1,{"z":1e-7}]}]"#),
        r#"{"ok":[null,null]}"#
    );
    let f = recv_text(&mut ls);
    let (_, t, _) = split_frame(&f);
    assert_eq!(
        f,
        format!(r#"[null,{t},{{"b":2,"a":1.0,"flag":true,"n":null}}]"#)
    );
    let f = recv_text(&mut ls);
    let (_, t2, _) = split_frame(&f);
    assert_eq!(f, format!(r#"[null,{t2},{{"x":"é"}}]"#));
    assert_eq!(
        recv_text(&mut ls),
        format!(r#"[null,{t2},{{"y":[1,{{"z":1e-7}}]}}]"#)
    );
    drop((publ, lp, live0, subs, filtered, ls));
    assert_eq!(srv.stop(), Some(0));

    // after a restart the ring is empty: replay comes from the log (reader pool) while a
    // publisher keeps going; every subscriber splices into live exactly once
    let srv = Server::start(Some(&cfg), &data, &[]);
    // a filtered replay from the log (`+` is a space in the query, as the official client sends)
    let mut fsub = Raw::connect(
        srv.addr,
        "/trades?offset=1&where=%7B%22symbol%22:+%22ETHUSD%22%7D",
    );
    let g = fsub.text();
    assert!(
        g.contains(r#""end_offset":16,"replay":[1,16],"#)
            && g.ends_with(r#""where":{"symbol":"ETHUSD"}}"#),
        "{g}"
    );
    for off in 11..=15u64 {
        assert_eq!(
            fsub.text(),
            live_more[(off - 11) as usize],
            "filtered replay, offset {off}"
        );
    }
    let (mut publ, _) = open(&srv, "trades?publish");
    let bulk: Vec<String> = (16..=3015).map(|i| trade(i, "SOLUSD")).collect();
    let acks = publish_all(&mut publ, &bulk, 50, 8);
    assert_eq!(acks, (16..=3015).collect::<Vec<u64>>());
    let bulk_canon: Vec<String> = bulk.iter().map(|r| canon(&codec, r)).collect();
    let final_end = 6015u64;
    let rows2: Vec<String> = (3016..final_end as i64)
        .map(|i| trade(i, "SOLUSD"))
        .collect();
    let pubber = std::thread::spawn(move || {
        let mut acks = Vec::new();
        for chunk in rows2.chunks(300) {
            acks.extend(publish_all(&mut publ, chunk, 10, 4));
            std::thread::sleep(Duration::from_millis(5));
        }
        acks
    });
    let mut joined = Vec::new();
    for (k, q) in ["offset=0", "offset=2000", "", "offset=1", "offset=3000", ""]
        .iter()
        .enumerate()
    {
        std::thread::sleep(Duration::from_millis(40 * k as u64));
        let mut r = Raw::connect(srv.addr, &format!("/trades?{q}"));
        let g = r.text();
        let v: sonic_rs::Value = sonic_rs::from_str(&g).unwrap();
        use sonic_rs::JsonValueTrait;
        let end = v.get("end_offset").and_then(|x| x.as_u64()).unwrap();
        let first = match q.strip_prefix("offset=") {
            Some("0") => 1,
            Some(n) => n.parse().unwrap(),
            None => end,
        };
        if q.is_empty() {
            assert!(g.contains("\"replay\":null,"), "{g}");
        } else {
            assert!(g.contains(&format!("\"replay\":[{first},{end}],")), "{g}");
        }
        joined.push((q.to_string(), r, first));
    }
    let acks2 = pubber.join().unwrap();
    assert_eq!(acks2, (3016..final_end).collect::<Vec<u64>>());
    for (q, mut r, first) in joined {
        let n = (final_end - first) as usize;
        let bytes = r.take_frames(n);
        for (k, f) in split_frames(&bytes).into_iter().enumerate() {
            let off = first + k as u64;
            let (o, _, row) = split_frame(f);
            assert_eq!(o, Some(off), "{q}: frame {k}");
            let want = if off <= 10 {
                None
            } else if off <= 15 {
                Some(&more_canon[(off - 11) as usize])
            } else if off <= 3015 {
                Some(&bulk_canon[(off - 16) as usize])
            } else {
                None
            };
            if let Some(w) = want {
                assert_eq!(row, w, "{q}: offset {off}");
            } else if off > 3015 {
                assert_eq!(
                    row,
                    canon(&codec, &trade(off as i64, "SOLUSD")),
                    "{q}: offset {off}"
                );
            } else {
                assert_eq!(
                    f,
                    all_live[(off - 1) as usize],
                    "{q}: replayed bytes equal live bytes"
                );
            }
        }
    }
    // the filtered subscriber skipped all 6000 SOLUSD rows: its next frame is the next ETHUSD row
    let (mut p2, _) = open(&srv, "trades?publish");
    assert_eq!(
        call(&mut p2, &trade(final_end as i64, "ETHUSD")),
        format!("{{\"ok\":[{final_end}]}}")
    );
    let f = fsub.text();
    assert_eq!(split_frame(&f).0, Some(final_end));
    assert_eq!(
        split_frame(&f).2,
        canon(&codec, &trade(final_end as i64, "ETHUSD"))
    );
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 3. refusals

#[test]
fn refusals_carry_exact_codes_and_reasons() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let (mut p, _) = open(&srv, "small?publish");
    assert_eq!(
        call(
            &mut p,
            &format!(
                "[{}]",
                (1..=10)
                    .map(|i| trade(i, "A"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        ),
        okr(1..=10)
    );
    let (mut p, _) = open(&srv, "trades?publish");
    assert_eq!(call(&mut p, &trade(1, "A")), okr(1..=1));

    let nr = |fields: &str| format!(r#"{{"error":"not_replayable",{fields}}}"#);
    let br = |detail: &str| {
        format!(
            r#"{{"error":"bad_request","detail":{}}}"#,
            sonic_rs::to_string(detail).unwrap()
        )
    };
    let cases: Vec<(String, u16, String)> = vec![
        // 4416
        (
            "small?offset=12".into(),
            4416,
            nr(r#""why":"ahead","offset":12,"end_offset":11"#),
        ),
        (
            "trades?offset=3".into(),
            4416,
            nr(r#""why":"ahead","offset":3,"end_offset":2"#),
        ),
        (
            "small?offset=5".into(),
            4416,
            nr(r#""why":"too_old","offset":5,"behind":6,"max_replay":5"#),
        ),
        (
            "small?offset=0".into(),
            4416,
            nr(r#""why":"too_old","offset":1,"behind":10,"max_replay":5"#),
        ),
        ("live?offset=1".into(), 4416, nr(r#""why":"not_durable""#)),
        ("live?offset=0".into(), 4416, nr(r#""why":"not_durable""#)),
        // 4404
        (
            "nope".into(),
            4404,
            r#"{"error":"no_such_stream","serves":["live","nested","orders","small","trades"]}"#
                .into(),
        ),
        (
            "nope?publish".into(),
            4404,
            r#"{"error":"no_such_stream","serves":["live","nested","orders","small","trades"]}"#
                .into(),
        ),
        // 4412
        (
            "trades?publish&publisher=p1".into(),
            4412,
            r#"{"error":"exactly_once_unavailable","why":"stream"}"#.into(),
        ),
        // 4400: the query
        (
            "trades?foo=1".into(),
            4400,
            br("unknown query parameter(s): foo"),
        ),
        (
            "trades?offset=1&limit=2&format=arrow".into(),
            4400,
            br("unknown query parameter(s): limit, format"),
        ),
        (
            "trades?publish&offset=1".into(),
            4400,
            br("publish and offset are different requests; pass one"),
        ),
        (
            "trades?publish=0&offset=0".into(),
            4400,
            br("publish and offset are different requests; pass one"),
        ),
        (
            format!("trades?publish&where={}", pct("{}")),
            4400,
            br("publish takes no where=; a publisher receives nothing"),
        ),
        (
            "trades?publisher=p1".into(),
            4400,
            br("publisher= names an exactly-once publisher; it needs publish"),
        ),
        (
            format!("orders?publish&publisher={}", "x".repeat(200)),
            4400,
            br("a publisher id is 1 to 128 bytes of UTF-8; got 200"),
        ),
        (
            "trades?offset=-1".into(),
            4400,
            br("offset=-1 is negative; 0 means everything"),
        ),
        (
            "trades?offset=abc".into(),
            4400,
            br("offset=abc is not an integer"),
        ),
        (
            "trades?offset=1.5".into(),
            4400,
            br("offset=1.5 is not an integer"),
        ),
        (
            "trades?offset=".into(),
            4400,
            br("offset= is not an integer"),
        ),
        ("bad%20name".into(), 4400, br("invalid stream name")),
        // 4400: where=
        (
            format!("trades?where={}", pct("[1]")),
            4400,
            br("where= must be a JSON object of column: value"),
        ),
        (
            format!("trades?where={}", pct("1")),
            4400,
            br("where= must be a JSON object of column: value"),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":[]}"#)),
            4400,
            br(r#"where= list for "side" is empty"#),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":{"eq":1}}"#)),
            4400,
            br(r#"where= value for "side" must be a scalar or a list"#),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":[[1]]}"#)),
            4400,
            br(r#"where= values for "side" must be scalars"#),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":[1,{"a":1}]}"#)),
            4400,
            br(r#"where= values for "side" must be scalars"#),
        ),
        (
            format!("trades?offset=0&where={}", pct(r#"{"nope":1}"#)),
            4400,
            br(r#"where= names unknown column "nope""#),
        ),
        // a value no row of its column can hold: refused, not a subscription that never
        // receives a row (an integral number does match an integer column; a list is refused
        // when none of its values can match)
        (
            format!("trades?where={}", pct(r#"{"side":"buy"}"#)),
            4400,
            br(r#"where= column "side" (integers, never null) never matches "buy""#),
        ),
        (
            format!("trades?where={}", pct(r#"{"symbol":[1,2]}"#)),
            4400,
            br(r#"where= column "symbol" (strings, never null) never matches any of [1,2]"#),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":null}"#)),
            4400,
            br(r#"where= column "side" (integers, never null) never matches null"#),
        ),
        (
            format!("trades?where={}", pct(r#"{"side":3000000000}"#)),
            4400,
            br(r#"where= column "side" (integers, never null) never matches 3000000000"#),
        ),
        (
            format!("nested?where={}", pct(r#"{"st":1}"#)),
            4400,
            br(r#"where= cannot filter struct/list/map column "st""#),
        ),
        (
            format!("nested?where={}", pct(r#"{"l":"x"}"#)),
            4400,
            br(r#"where= cannot filter struct/list/map column "l""#),
        ),
    ];
    for (path, code, reason) in &cases {
        let (c, r) = refused(&srv, path);
        assert_eq!((c, r.as_str()), (*code, reason.as_str()), "{path}");
        assert!(r.len() <= 123, "{path}: reason too long");
    }
    // not JSON: the detail names it (the parser's words follow)
    for bad in ["{side", "{\"side\":1", "nope"] {
        let path = format!("trades?where={}", pct(bad));
        let (c, r) = refused(&srv, &path);
        assert_eq!(c, 4400, "{path}: {r}");
        assert!(
            r.starts_with(r#"{"error":"bad_request","detail":"where= is not JSON"#),
            "{path}: {r}"
        );
        assert!(r.len() <= 123);
    }
    // boundaries that are accepted: behind == max_replay, offset == end_offset, a filter on a
    // nested stream's scalar column, the python-int spellings
    for ok in [
        "small?offset=6",
        "small?offset=11",
        "trades?offset=2",
        "trades?offset=%201%20",
        "trades?offset=0_1",
    ] {
        let (_ws, g) = open(&srv, ok);
        assert!(g.starts_with(r#"{"streamcast":4,"#), "{ok}: {g}");
    }
    let (_ws, g) = open(&srv, &format!("nested?where={}", pct(r#"{"a":[1,2]}"#)));
    assert!(g.ends_with(r#""where":{"a":[1,2]}}"#), "{g}");
    // values that can match are taken: an exact integer written with a fraction of zeros, a
    // list with one dead value, an integral number on an integer column
    for ok in [
        r#"{"trade_id":6412754147602.00000}"#,
        r#"{"symbol":["A",1]}"#,
        r#"{"side":1.0}"#,
    ] {
        let (_ws, g) = open(&srv, &format!("trades?where={}", pct(ok)));
        assert!(g.starts_with(r#"{"streamcast":4,"#), "{ok}: {g}");
    }
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 4. publishing

#[test]
fn publish_replies_one_per_frame_in_order_and_batches_are_atomic() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let codec = trade_codec();
    let (mut p, _) = open(&srv, "trades?publish");
    let (mut sub, _) = open(&srv, "trades");

    assert_eq!(call(&mut p, &trade(1, "A")), r#"{"ok":[1]}"#);
    assert_eq!(
        call(
            &mut p,
            &format!("[{},{},{}]", trade(2, "A"), trade(3, "A"), trade(4, "A"))
        ),
        r#"{"ok":[2,3,4]}"#
    );
    // one bad row rejects the whole batch; nothing lands
    let bad_batch = format!(
        "[{},{},{}]",
        trade(5, "A"),
        trade(6, "A").replace("\"side\":0", "\"side\":true"),
        trade(7, "A")
    );
    let r = call(&mut p, &bad_batch);
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("side"),
        "{r}"
    );
    let r = call(&mut p, &trade(5, "A").replace("}", r#","extra":1}"#));
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"row names columns this log does not have: ['extra']. Declared: ["#),
        "{r}"
    );
    let r = call(
        &mut p,
        &trade(5, "A").replace("\"side\":1", "\"side\":2147483648"),
    );
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("side"),
        "{r}"
    );
    let r = call(
        &mut p,
        &trade(5, "A").replace("\"trade_id\":5", "\"trade_id\":9223372036854775808"),
    );
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("trade_id"),
        "{r}"
    );
    let r = call(
        &mut p,
        &trade(5, "A").replace("\"trade_id\":5", "\"trade_id\":5.0"),
    );
    assert!(r.starts_with(r#"{"error":"rejected","detail":"#), "{r}");
    let r = call(&mut p, &trade(5, "A").replace(",\"symbol\":\"A\"", ""));
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("symbol"),
        "{r}"
    );
    let r = call(
        &mut p,
        &trade(5, "A").replace("}", r#","streamcast_ts":1}"#),
    );
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("streamcast_ts"),
        "{r}"
    );
    // bad frames
    let r = call(&mut p, "not json");
    assert!(
        r.starts_with(r#"{"error":"bad_frame","detail":"publish frame is not JSON: "#),
        "{r}"
    );
    let r = call(&mut p, "[1e400]");
    assert!(
        r.starts_with(r#"{"error":"bad_frame","detail":"publish frame is not JSON: "#),
        "{r}"
    );
    assert_eq!(
        call(&mut p, "[]"),
        r#"{"error":"bad_frame","detail":"publish frame is an empty list; send at least one row"}"#
    );
    assert_eq!(
        call(&mut p, "[1,2]"),
        r#"{"error":"bad_frame","detail":"publish frame holds a int, not a row"}"#
    );
    assert_eq!(
        call(&mut p, "42"),
        r#"{"error":"bad_frame","detail":"publish frame is a int, not a row or a list"}"#
    );
    assert_eq!(
        call(&mut p, &format!("[1,{}]", trade(5, "A"))),
        r#"{"error":"bad_frame","detail":"publish frame holds a int, not a row"}"#
    );
    // a binary frame is a publish frame too
    p.send(Message::binary(trade(5, "A").into_bytes())).unwrap();
    assert_eq!(recv_text(&mut p), r#"{"ok":[5]}"#);

    // pipelined, mixed: exactly one reply per frame, in frame order
    let frames = [
        trade(6, "B"),
        "{oops".to_string(),
        trade(7, "B").replace("\"price\":85566.5", "\"price\":\"x\""),
        format!("[{},{}]", trade(7, "B"), trade(8, "B")),
        "[]".to_string(),
        trade(9, "B"),
    ];
    for f in &frames {
        p.write(Message::text(f.clone())).unwrap();
    }
    p.flush().unwrap();
    let replies: Vec<String> = (0..frames.len()).map(|_| recv_text(&mut p)).collect();
    assert_eq!(replies[0], r#"{"ok":[6]}"#);
    assert!(
        replies[1].starts_with(r#"{"error":"bad_frame","#),
        "{}",
        replies[1]
    );
    assert!(
        replies[2].starts_with(r#"{"error":"rejected","#),
        "{}",
        replies[2]
    );
    assert_eq!(replies[3], r#"{"ok":[7,8]}"#);
    assert!(
        replies[4].starts_with(r#"{"error":"bad_frame","#),
        "{}",
        replies[4]
    );
    assert_eq!(replies[5], r#"{"ok":[9]}"#);

    // the subscriber saw exactly the rows that landed, in order
    let landed: Vec<String> = [
        trade(1, "A"),
        trade(2, "A"),
        trade(3, "A"),
        trade(4, "A"),
        trade(5, "A"),
        trade(6, "B"),
        trade(7, "B"),
        trade(8, "B"),
        trade(9, "B"),
    ]
    .iter()
    .map(|r| canon(&codec, r))
    .collect();
    expect_rows(&mut sub, 1, &landed);
    let (mut all, _) = open(&srv, "trades?offset=0");
    expect_rows(&mut all, 1, &landed);
    // nothing else: the next frame is the next row published
    assert_eq!(call(&mut p, &trade(10, "C")), r#"{"ok":[10]}"#);
    expect_rows(&mut sub, 10, &[canon(&codec, &trade(10, "C"))]);
    expect_rows(&mut all, 10, &[canon(&codec, &trade(10, "C"))]);
    srv.kill9();
}

#[test]
fn exactly_once_dup_gap_rejected_and_superseded() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let (mut p, g) = open(&srv, "orders?publish&publisher=p1");
    assert!(
        g.ends_with(r#""publisher":{"id":"p1","last_seq":0,"last_offset":null}}"#),
        "{g}"
    );
    let t = |i: i64| trade(i, "EO");
    assert_eq!(call(&mut p, &format!("[1,{}]", t(1))), r#"{"ok":[1]}"#);
    assert_eq!(
        call(&mut p, &format!("[2,[{},{},{}]]", t(2), t(3), t(4))),
        r#"{"ok":[2,3,4]}"#
    );
    assert_eq!(
        call(&mut p, &format!("[1,{}]", t(1))),
        r#"{"ok":[1],"dup":1}"#
    );
    assert_eq!(
        call(&mut p, &format!("[3,[{},{},{}]]", t(3), t(4), t(5))),
        r#"{"ok":[3,4,5],"dup":2}"#
    );
    assert_eq!(
        call(&mut p, &format!("[9,{}]", t(9))),
        r#"{"error":"gap","expected":6,"got":9}"#
    );
    // bad shapes on an exactly-once connection
    let r = call(&mut p, &t(6));
    assert!(r.starts_with(r#"{"error":"bad_frame","detail":"an exactly-once publish frame is [seq, row] or [seq, [rows]]"#), "{r}");
    assert_eq!(
        call(&mut p, &format!("[0,{}]", t(6))),
        r#"{"error":"bad_frame","detail":"seq=0; exactly-once seqs start at 1"}"#
    );
    let r = call(&mut p, &format!("[true,{}]", t(6)));
    assert!(r.starts_with(r#"{"error":"bad_frame","#), "{r}");
    // after a rejected frame the mark does not move: what was pipelined behind it is a gap
    let bad6 = t(6).replace("\"symbol\":\"EO\"", "\"symbol\":7");
    for f in [
        format!("[6,{bad6}]"),
        format!("[7,{}]", t(7)),
        format!("[6,{}]", t(6)),
        format!("[7,[{},{}]]", t(7), t(8)),
    ] {
        p.write(Message::text(f)).unwrap();
    }
    p.flush().unwrap();
    let r = recv_text(&mut p);
    assert!(
        r.starts_with(r#"{"error":"rejected","detail":"#) && r.contains("symbol"),
        "{r}"
    );
    assert_eq!(recv_text(&mut p), r#"{"error":"gap","expected":6,"got":7}"#);
    assert_eq!(recv_text(&mut p), r#"{"ok":[6]}"#);
    assert_eq!(recv_text(&mut p), r#"{"ok":[7,8]}"#);

    // takeover: A pipelines 20 frames without reading, then B claims the id. A's queued rows
    // commit and are answered, then A gets 4409; B's greeting mark includes them.
    for s in 9..=28 {
        p.write(Message::text(format!("[{s},{}]", t(s)))).unwrap();
    }
    p.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (mut b, g) = open(&srv, "orders?publish&publisher=p1");
    let mut a_acks = Vec::new();
    let close = loop {
        match p.read().expect("A reads") {
            Message::Text(r) => a_acks.push(ok_offsets(&r)),
            Message::Close(Some(c)) => break (u16::from(c.code), c.reason.to_string()),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(close, (4409, r#"{"error":"superseded"}"#.to_string()));
    assert_eq!(
        a_acks,
        (9..=28).map(|o| vec![o]).collect::<Vec<_>>(),
        "every queued frame committed and answered"
    );
    assert!(
        g.ends_with(r#""publisher":{"id":"p1","last_seq":28,"last_offset":28}}"#),
        "{g}"
    );
    assert!(g.contains(r#""end_offset":29,"#), "{g}");
    // B continues where the mark says; a resend of A's last is a dup
    assert_eq!(
        call(&mut b, &format!("[28,{}]", t(28))),
        r#"{"ok":[28],"dup":1}"#
    );
    assert_eq!(call(&mut b, &format!("[29,{}]", t(29))), r#"{"ok":[29]}"#);
    // and a third claim supersedes B even while it is idle
    let (_c, g) = open(&srv, "orders?publish&publisher=p1");
    assert!(
        g.ends_with(r#""publisher":{"id":"p1","last_seq":29,"last_offset":29}}"#),
        "{g}"
    );
    assert_eq!(
        next_close(&mut b),
        (4409, r#"{"error":"superseded"}"#.to_string())
    );
    // a superseded connection that never answers the close is let go after the linger
    let mut raw = Raw::connect(srv.addr, "/orders?publish&publisher=p2");
    assert!(raw.text().contains(r#""publisher":{"id":"p2""#));
    let (_d, _) = open(&srv, "orders?publish&publisher=p2");
    let (_, close) = raw.until_close();
    assert_eq!(close, (4409, r#"{"error":"superseded"}"#.to_string()));
    raw.expect_released(Duration::from_secs(10));
    // the log holds each seq exactly once, in order
    let codec = trade_codec();
    let (mut s, _) = open(&srv, "orders?offset=0");
    let want: Vec<String> = (1..=29).map(|i| canon(&codec, &t(i))).collect();
    expect_rows(&mut s, 1, &want);
    srv.kill9();
}

#[test]
fn ten_thousand_pipelined_frames_get_ten_thousand_ordered_replies() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let (mut p, _) = open(&srv, "trades?publish");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = p.get_ref() {
        s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    }
    let n = 10_000u64;
    for i in 1..=n {
        p.write(Message::text(trade(i as i64, "PIPE")))
            .expect("write without reading");
    }
    p.flush().expect("flush");
    for i in 1..=n {
        assert_eq!(recv_text(&mut p), format!("{{\"ok\":[{i}]}}"), "reply {i}");
    }
    // and the log holds them in order
    let mut r = Raw::connect(srv.addr, "/trades?offset=0");
    assert!(r.text().contains("\"replay\":[1,10001],"));
    let codec = trade_codec();
    let bytes = r.take_frames(n as usize);
    for (k, f) in split_frames(&bytes).into_iter().enumerate() {
        let (o, _, row) = split_frame(f);
        assert_eq!(o, Some(k as u64 + 1));
        assert_eq!(row, canon(&codec, &trade(k as i64 + 1, "PIPE")));
    }
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 5. fan-out to 500 subscribers

#[test]
fn five_hundred_subscribers_receive_the_same_ten_thousand_rows() {
    let setup = Setup::new();
    let cfg =
        setup.config("[[stream]]\nname = \"fan\"\nschema = \"@trade\"\nmax_backlog = 100000\n");
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    const SUBS: usize = 500;
    const THREADS: usize = 5;
    const ROWS: usize = 10_000;
    let mut socks: Vec<Vec<Raw>> = (0..THREADS).map(|_| Vec::new()).collect();
    let mut greeting = None;
    for i in 0..SUBS {
        let mut r = Raw::connect(srv.addr, "/fan");
        let g = r.text();
        match &greeting {
            None => greeting = Some(g),
            Some(first) => assert_eq!(&g, first),
        }
        socks[i % THREADS].push(r);
    }
    let g = greeting.unwrap();
    let id = stream_id_of(&g);
    assert_eq!(
        g,
        greeting_text(
            &data,
            &G {
                stream: "fan",
                end: Some(1),
                replay: None,
                schema: Some(TRADE_PUBLISHED),
                stream_id: Some(&id),
                where_: None,
                publisher: None
            }
        )
    );
    let rows: Vec<String> = (1..=ROWS as i64).map(|i| trade(i, "FAN")).collect();
    let codec = trade_codec();
    let canon_rows: Vec<String> = rows.iter().map(|r| canon(&codec, r)).collect();
    let (mut p, _) = open(&srv, "fan?publish");
    let acks = publish_all(&mut p, &rows, 100, 16);
    assert_eq!(acks, (1..=ROWS as u64).collect::<Vec<_>>());
    let canon_rows = std::sync::Arc::new(canon_rows);
    let handles: Vec<_> = socks
        .into_iter()
        .map(|mut group| {
            let canon_rows = canon_rows.clone();
            std::thread::spawn(move || {
                let first = group[0].take_frames(ROWS);
                let frames = split_frames(&first);
                assert_eq!(frames.len(), ROWS);
                let mut last_ts = 0;
                for (k, f) in frames.iter().enumerate() {
                    let (o, ts, row) = split_frame(f);
                    assert_eq!(o, Some(k as u64 + 1));
                    assert_eq!(row, canon_rows[k]);
                    assert!(ts >= last_ts);
                    last_ts = ts;
                }
                for (j, r) in group.iter_mut().enumerate().skip(1) {
                    let other = r.take_frames(ROWS);
                    assert!(other == first, "subscriber {j} got different bytes");
                }
                first
            })
        })
        .collect();
    let results: Vec<Vec<u8>> = handles
        .into_iter()
        .map(|h| h.join().expect("reader thread"))
        .collect();
    for r in &results[1..] {
        assert!(r == &results[0], "every subscriber gets the same bytes");
    }
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 6. a stalled subscriber

#[test]
fn stalled_subscriber_gets_a_contiguous_prefix_then_4429_while_a_fast_one_gets_everything() {
    let setup = Setup::new();
    // keepalive off: neither subscriber ever sends, and on a loaded machine the test outlasts
    // the 20 s ping interval (a ping frame amid the rows is not what this test reads for)
    let cfg = setup
        .config("[websocket]\nping_interval_s = 0\n[[stream]]\nname = \"big\"\nmax_backlog = 64\n");
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    const ROWS: usize = 20_480;
    const PER_FRAME: usize = 32;
    let pad = "x".repeat(1000);
    let row = |i: usize| format!(r#"{{"i":{i},"pad":"{pad}"}}"#);

    let mut slow = Raw::connect(srv.addr, "/big");
    assert!(slow.text().contains(r#""end_offset":1,"replay":null,"#));
    let mut fast = Raw::connect(srv.addr, "/big");
    fast.text();
    let (mut p, _) = open(&srv, "big?publish");
    // the publisher waits for the fast subscriber after each frame, so the fast one is never
    // more than one frame (32 rows) behind; the slow one never reads
    let mut next = 1u64;
    for chunk in (1..=ROWS).collect::<Vec<_>>().chunks(PER_FRAME) {
        let body: Vec<String> = chunk.iter().map(|&i| row(i)).collect();
        let reply = call(&mut p, &format!("[{}]", body.join(",")));
        let want: Vec<u64> = (next..next + chunk.len() as u64).collect();
        assert_eq!(ok_offsets(&reply), want);
        let bytes = fast.take_frames(chunk.len());
        for (k, f) in split_frames(&bytes).into_iter().enumerate() {
            let (o, _, r) = split_frame(f);
            assert_eq!(o, Some(next + k as u64));
            assert_eq!(r, row(chunk[k]));
        }
        next += chunk.len() as u64;
    }
    // now the slow one reads: a contiguous prefix from offset 1, then 4429
    let (texts, close) = slow.until_close();
    assert_eq!(
        close,
        (4429, r#"{"error":"too_slow","backlog":64}"#.to_string())
    );
    // at least the 64 frames queued before the overflow (PROTOCOL.md §6), never everything
    assert!(
        texts.len() >= 64 && texts.len() < ROWS,
        "a strict prefix: {}",
        texts.len()
    );
    for (k, f) in texts.iter().enumerate() {
        let (o, _, r) = split_frame(f);
        assert_eq!(o, Some(k as u64 + 1), "contiguous");
        assert_eq!(r, row(k + 1));
    }
    // it never answers the close; the server drops the socket after its 2 s linger anyway
    slow.expect_released(Duration::from_secs(10));
    // the fast one is still served
    assert_eq!(
        call(&mut p, &row(ROWS + 1)),
        format!("{{\"ok\":[{}]}}", ROWS + 1)
    );
    let f = fast.text();
    assert_eq!(split_frame(&f).0, Some(ROWS as u64 + 1));
    // one commit larger than the backlog overflows every subscriber at once: each still gets
    // the 64 frames queued before the overflow, then 4429
    let burst: Vec<String> = (ROWS + 2..ROWS + 102).map(row).collect();
    let first = ROWS as u64 + 2;
    assert_eq!(
        ok_offsets(&call(&mut p, &format!("[{}]", burst.join(",")))),
        (first..first + 100).collect::<Vec<_>>()
    );
    let (texts, close) = fast.until_close();
    assert_eq!(
        close,
        (4429, r#"{"error":"too_slow","backlog":64}"#.to_string())
    );
    let offs: Vec<u64> = texts.iter().map(|f| split_frame(f).0.unwrap()).collect();
    assert_eq!(offs, (first..first + 64).collect::<Vec<_>>());
    srv.kill9();
}

/// `coalesce_us`: commits landing inside a window reach every subscriber together, whole, in
/// order, none lost or repeated — whether the hub hands the window to a parked subscriber's
/// socket itself or wakes it (a `where=` subscriber is always woken).
#[test]
fn a_coalescing_stream_delivers_every_commit_in_order() {
    let setup = Setup::new();
    let cfg = setup.config("[[stream]]\nname = \"c\"\ncoalesce_us = 2000\n");
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut subs: Vec<Raw> = (0..3).map(|_| Raw::connect(srv.addr, "/c")).collect();
    let mut odd = Raw::connect(srv.addr, "/c?where=%7B%22odd%22%3Atrue%7D");
    for s in subs.iter_mut() {
        s.text();
    }
    odd.text();
    let (mut p, _) = open(&srv, "c?publish");
    const ROWS: u64 = 300;
    // ten frames in flight at a time, one row each: several commits per window
    let mut i = 1u64;
    while i <= ROWS {
        let n = (ROWS + 1 - i).min(10);
        for k in i..i + n {
            p.send(Message::text(format!(
                r#"{{"i":{k},"odd":{}}}"#,
                k % 2 == 1
            )))
            .unwrap();
        }
        for _ in 0..n {
            assert!(recv_text(&mut p).contains("\"ok\""));
        }
        i += n;
    }
    for s in subs.iter_mut() {
        let bytes = s.take_frames(ROWS as usize);
        let offs: Vec<u64> = split_frames(&bytes)
            .into_iter()
            .map(|f| split_frame(f).0.unwrap())
            .collect();
        assert_eq!(offs, (1..=ROWS).collect::<Vec<_>>());
    }
    let bytes = odd.take_frames(ROWS as usize / 2);
    let offs: Vec<u64> = split_frames(&bytes)
        .into_iter()
        .map(|f| split_frame(f).0.unwrap())
        .collect();
    assert_eq!(offs, (1..=ROWS).step_by(2).collect::<Vec<_>>());
    let m = http_get(srv.addr, "/metrics").text();
    assert!(
        m.contains(&format!(
            "corecast_frames_out_total{{stream=\"c\"}} {}",
            3 * ROWS + ROWS / 2
        )),
        "every delivered frame counted once: {m}"
    );
    srv.kill9();
}

/// A subscriber that stops reading while the server writes to it is released once one write
/// has not completed within `write_timeout_s` (its descriptor closed, no close frame: none can
/// reach it), and counted once in `dropped_slow` — whether the write is timed by a timer of its
/// own or, as now, by the session's one tick (`session/tick.rs`). Its backlog limit is far
/// above what is published, so the write timeout is the only way out.
#[test]
fn a_subscriber_that_stops_reading_is_released_after_the_write_timeout() {
    let setup = Setup::new();
    let cfg =
        setup.config("write_timeout_s = 2\n[[stream]]\nname = \"big\"\nmax_backlog = 100000\n");
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    const ROWS: usize = 20_480;
    const PER_FRAME: usize = 32;
    let pad = "x".repeat(1000);
    let row = |i: usize| format!(r#"{{"i":{i},"pad":"{pad}"}}"#);
    let mut stalled = Raw::connect(srv.addr, "/big");
    stalled.text();
    let (mut p, _) = open(&srv, "big?publish");
    // ~20 MB: far more than the two sockets' buffers hold, so a write to it stalls
    let t0 = Instant::now();
    for chunk in (1..=ROWS).collect::<Vec<_>>().chunks(PER_FRAME) {
        let body: Vec<String> = chunk.iter().map(|&i| row(i)).collect();
        assert!(call(&mut p, &format!("[{}]", body.join(","))).contains("\"ok\""));
    }
    let published = t0.elapsed();
    // the write in flight times out 2 s after it started; the socket must go soon after
    stalled.expect_released(Duration::from_secs(15));
    let m = http_get(srv.addr, "/metrics").text();
    assert!(
        m.contains("corecast_subscribers{stream=\"big\",transport=\"websocket\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("corecast_dropped_slow_total{stream=\"big\",transport=\"websocket\"} 1"),
        "{m}"
    );
    // not before the timeout: the first stalled write began after the greeting, so the
    // release took at least 2 s from the first publish
    assert!(t0.elapsed() >= Duration::from_secs(2), "{published:?}");
    // the publisher is still served
    assert_eq!(
        call(&mut p, &row(ROWS + 1)),
        format!("{{\"ok\":[{}]}}", ROWS + 1)
    );
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 7. SIGTERM mid-publish

#[test]
fn sigterm_mid_publish_keeps_every_ack_exits_zero_and_closes_1001() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let mut sub = Raw::connect(srv.addr, "/trades");
    sub.text();
    let mut pubr = Raw::connect(srv.addr, "/trades?publish");
    pubr.text();
    let mut w = pubr.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut sent = 0u64;
        for i in 1..=200_000i64 {
            if w.write_all(&client_frame(trade(i, "TERM").as_bytes()))
                .is_err()
            {
                break;
            }
            sent += 1;
        }
        sent
    });
    let reader = std::thread::spawn(move || {
        let (texts, close) = pubr.until_close();
        (texts, close)
    });
    let sub_reader = std::thread::spawn(move || sub.until_close());
    std::thread::sleep(Duration::from_millis(700));
    let code = srv.stop();
    assert_eq!(code, Some(0), "exit status after SIGTERM");
    let (replies, close) = reader.join().unwrap();
    assert_eq!(close, (1001, "server shutting down".to_string()));
    let sent = writer.join().unwrap();
    let acks: Vec<u64> = replies.iter().flat_map(|r| ok_offsets(r)).collect();
    assert!(
        !acks.is_empty(),
        "some frames were acknowledged before the stop"
    );
    assert!((acks.len() as u64) <= sent);
    assert_eq!(
        acks,
        (1..=acks.len() as u64).collect::<Vec<_>>(),
        "in order, contiguous"
    );
    let (frames, sclose) = sub_reader.join().unwrap();
    assert_eq!(sclose, (1001, "server shutting down".to_string()));
    // the live subscriber got every acknowledged row before its close
    assert!(
        frames.len() >= acks.len(),
        "{} frames < {} acks",
        frames.len(),
        acks.len()
    );
    for (k, f) in frames.iter().enumerate() {
        assert_eq!(split_frame(f).0, Some(k as u64 + 1));
    }

    // after a restart every acknowledged offset is there, with its row
    let srv = Server::start(Some(&cfg), &data, &[]);
    let mut r = Raw::connect(srv.addr, "/trades?offset=0");
    let g = r.text();
    let v: sonic_rs::Value = sonic_rs::from_str(&g).unwrap();
    use sonic_rs::JsonValueTrait;
    let end = v.get("end_offset").and_then(|x| x.as_u64()).unwrap();
    assert!(
        end > acks.len() as u64,
        "end_offset {end} covers {} acks",
        acks.len()
    );
    assert_eq!(
        end - 1,
        frames.len() as u64,
        "the log holds exactly what was fanned out"
    );
    let codec = trade_codec();
    let bytes = r.take_frames((end - 1) as usize);
    for (k, f) in split_frames(&bytes).into_iter().enumerate() {
        let (o, _, row) = split_frame(f);
        assert_eq!(o, Some(k as u64 + 1));
        assert_eq!(row, canon(&codec, &trade(k as i64 + 1, "TERM")));
        assert_eq!(f, frames[k], "replay bytes equal the live bytes");
    }
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 8. kill -9

#[test]
fn kill9_keeps_acknowledged_rows_and_offsets_continue() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let data = setup.data();
    let codec = trade_codec();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let (mut p, g) = open(&srv, "trades?publish");
    let id = stream_id_of(&g);
    let rows: Vec<String> = (1..=500).map(|i| trade(i, "K9")).collect();
    assert_eq!(
        publish_all(&mut p, &rows, 7, 8),
        (1..=500).collect::<Vec<u64>>()
    );
    let (mut eo, _) = open(&srv, "orders?publish&publisher=k");
    assert_eq!(
        call(
            &mut eo,
            &format!("[1,[{},{}]]", trade(1, "E"), trade(2, "E"))
        ),
        r#"{"ok":[1,2]}"#
    );
    // unacknowledged frames in flight at the kill may or may not land; acknowledged ones must
    for i in 501..=600 {
        p.write(Message::text(trade(i, "K9"))).unwrap();
    }
    p.flush().unwrap();
    srv.kill9();

    let srv = Server::start(Some(&cfg), &data, &[]);
    let mut r = Raw::connect(srv.addr, "/trades?offset=0");
    let g = r.text();
    assert_eq!(stream_id_of(&g), id, "stream_id survives a crash");
    let v: sonic_rs::Value = sonic_rs::from_str(&g).unwrap();
    use sonic_rs::JsonValueTrait;
    let end = v.get("end_offset").and_then(|x| x.as_u64()).unwrap();
    assert!((501..=601).contains(&end), "end_offset {end}");
    let bytes = r.take_frames((end - 1) as usize);
    for (k, f) in split_frames(&bytes).into_iter().enumerate() {
        let (o, _, row) = split_frame(f);
        assert_eq!(o, Some(k as u64 + 1));
        assert_eq!(row, canon(&codec, &trade(k as i64 + 1, "K9")));
    }
    // the exactly-once mark survived with the rows
    let (_eo, g) = open(&srv, "orders?publish&publisher=k");
    assert!(
        g.ends_with(r#""publisher":{"id":"k","last_seq":2,"last_offset":2}}"#),
        "{g}"
    );
    // a subscriber resuming at last+1 gets exactly the new rows
    let (mut resume, g) = open(&srv, &format!("trades?offset={end}"));
    assert!(
        g.contains(&format!("\"end_offset\":{end},\"replay\":[{end},{end}],")),
        "{g}"
    );
    let (mut p, _) = open(&srv, "trades?publish");
    let more: Vec<String> = (0..50).map(|k| trade(end as i64 + k, "K9")).collect();
    assert_eq!(
        publish_all(&mut p, &more, 5, 4),
        (end..end + 50).collect::<Vec<u64>>()
    );
    let more_canon: Vec<String> = more.iter().map(|r| canon(&codec, r)).collect();
    expect_rows(&mut resume, end, &more_canon);
    // and the offset=0 reader continues from the replay into the new rows
    let bytes = r.take_frames(50);
    for (k, f) in split_frames(&bytes).into_iter().enumerate() {
        assert_eq!(split_frame(f).0, Some(end + k as u64));
        assert_eq!(split_frame(f).2, more_canon[k]);
    }
    // a second crash right after acknowledged writes
    srv.kill9();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let (_s, g) = open(&srv, "trades");
    assert!(g.contains(&format!("\"end_offset\":{},", end + 50)), "{g}");
    srv.kill9();
}

// ---------------------------------------------------------------------------------------------
// 9. the es-mbo sample, end to end

#[test]
fn es_mbo_sample_reaches_two_subscribers_byte_identical() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[[stream]]\nname = \"mbo\"\nschema = \"@data/es-mbo.schema.json\"\nmax_replay = \"unlimited\"\nmax_backlog = 100000\n",
    );
    let data = setup.data();
    let srv = Server::start(Some(&cfg), &data, &[]);
    let dir = support::shared_dir().join("data");
    let schema = std::fs::read_to_string(dir.join("es-mbo.schema.json")).unwrap();
    let codec = RowCodec::Schema(Schema::compile(&schema).unwrap());
    let text = std::fs::read_to_string(dir.join("es-mbo.jsonl")).unwrap();
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 68_792);
    let expected: Vec<String> = lines.iter().map(|l| canon(&codec, l)).collect();
    let n = lines.len();

    let mut live = Raw::connect(srv.addr, "/mbo");
    assert!(live.text().contains(r#""end_offset":1,"replay":null,"#));
    let (mut p, _) = open(&srv, "mbo?publish");
    let started = Instant::now();
    let half = n / 2;
    let first_half: Vec<String> = lines[..half].to_vec();
    let second_half: Vec<String> = lines[half..].to_vec();
    let acks1 = publish_all(&mut p, &first_half, 500, 8);
    assert_eq!(acks1, (1..=half as u64).collect::<Vec<_>>());
    // the live reader drains concurrently
    let live_h = std::thread::spawn(move || live.take_frames(n));
    let pub_h = std::thread::spawn(move || publish_all(&mut p, &second_half, 500, 8));
    std::thread::sleep(Duration::from_millis(100));
    let mut late = Raw::connect(srv.addr, "/mbo?offset=0");
    let g = late.text();
    assert!(g.contains(r#""replay":[1,"#), "{g}");
    let late_bytes = late.take_frames(n);
    let acks2 = pub_h.join().unwrap();
    assert_eq!(acks2, (half as u64 + 1..=n as u64).collect::<Vec<_>>());
    let live_bytes = live_h.join().unwrap();
    assert!(
        live_bytes == late_bytes,
        "live and replayed bytes are identical"
    );
    let frames = split_frames(&live_bytes);
    assert_eq!(frames.len(), n);
    for (k, f) in frames.into_iter().enumerate() {
        let (o, _, row) = split_frame(f);
        assert_eq!(o, Some(k as u64 + 1));
        assert_eq!(row, expected[k], "row {k}");
    }
    eprintln!("es-mbo: {n} rows in {:?}", started.elapsed());
    srv.kill9();
}

#[test]
fn sigterm_does_not_wait_for_idle_peers_that_never_read_or_answer() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    // subscribers and an SSE reader that read their greeting and then go silent (never answer
    // the close frame, never send anything)
    let mut idle = Vec::new();
    for _ in 0..5 {
        let (ws, _greeting) = open(&srv, "trades");
        idle.push(ws);
    }
    let mut sse = srv.tcp();
    std::io::Write::write_all(
        &mut sse,
        b"GET /trades/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
    )
    .expect("sse request");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    assert_eq!(srv.stop(), Some(0));
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "shutdown took {:?} with idle peers",
        t0.elapsed()
    );
    drop(idle);
}

/// A publisher that is slow to read when SIGTERM arrives must still get a reply for every frame
/// whose rows were committed, then close 1001: the server lingers after its close frame instead
/// of resetting a socket that still holds unread client bytes (a reset destroys the replies the
/// client has not read yet, and a plain publisher would then resend committed rows).
#[test]
fn sigterm_with_a_slow_reading_publisher_answers_every_committed_frame() {
    use std::io::{Read, Write};
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut s = srv.tcp();
    s.write_all(
        b"GET /trades?publish HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .unwrap();
    // write frames (10 rows each) from another thread without reading anything back
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut sent = 0u64;
        for f in 0..20_000u64 {
            let rows: Vec<String> = (0..10)
                .map(|k| trade((f * 10 + k) as i64, "LINGER"))
                .collect();
            if w.write_all(&client_frame(format!("[{}]", rows.join(",")).as_bytes()))
                .is_err()
            {
                break;
            }
            sent += 1;
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(700));
    let pid = srv.child.id();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    // stay away from the socket a little longer, then read everything until the server is done
    std::thread::sleep(Duration::from_millis(300));
    let mut bytes = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes.extend_from_slice(&buf[..n]);
                // stop once the close frame (0x88) is complete at the end
                if let Some(p) = close_frame_at_end(&bytes) {
                    bytes.truncate(p.0);
                    assert_eq!(p.1, 1001, "close code");
                    break;
                }
            }
            Err(e) => panic!("the server reset or stalled the connection: {e}"),
        }
    }
    drop(s);
    let _sent = writer.join().unwrap();
    assert_eq!(srv.stop(), Some(0), "exit 0");
    // the HTTP head, then the greeting, then one reply per answered frame
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let frames = split_frames(&bytes[head_end..]);
    let replies = &frames[1..];
    let acked: u64 = replies
        .iter()
        .map(|r| {
            assert!(r.starts_with(r#"{"ok":["#), "{r}");
            ok_offsets(r).len() as u64
        })
        .sum();
    assert!(acked > 0, "some frames were answered before the signal");
    // restart and count what the log holds: exactly the acknowledged rows
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let (mut pubws, greeting) = open(&srv, "trades?publish");
    assert!(
        greeting.contains(&format!(r#""end_offset":{}"#, acked + 1)),
        "log holds exactly the {acked} acknowledged rows: {greeting}"
    );
    drop(pubws.close(None));
}

/// `(start, code)` of a complete server close frame ending `bytes`, if there is one.
fn close_frame_at_end(bytes: &[u8]) -> Option<(usize, u16)> {
    // a server close frame here is at most 2 + 125 bytes; scan its possible starts
    let from = bytes.len().saturating_sub(127);
    (from..bytes.len().saturating_sub(3)).find_map(|i| {
        let len = (bytes[i + 1] & 0x7f) as usize;
        (bytes[i] == 0x88 && bytes[i + 1] < 126 && i + 2 + len == bytes.len() && len >= 2)
            .then(|| (i, u16::from_be_bytes([bytes[i + 2], bytes[i + 3]])))
    })
}

/// Publisher ids are compared as bytes of UTF-8: ids whose percent-decoding is not UTF-8 are
/// refused (a lossy decoding would merge `%FF` and `%C3` into one exactly-once publisher and
/// answer the second one's rows as duplicates); query values beyond int64 are refused too.
#[test]
fn publisher_ids_that_are_not_utf8_and_offsets_beyond_int64_are_refused() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    for id in ["%FF", "%C3", "%ED%A0%80"] {
        let (code, reason) = refused(&srv, &format!("orders?publish&publisher={id}"));
        assert_eq!(code, 4400, "{id}");
        assert_eq!(
            reason,
            r#"{"error":"bad_request","detail":"a publisher id is 1 to 128 bytes of UTF-8; got bytes that are not UTF-8"}"#
        );
    }
    let (mut ws, greeting) = open(&srv, "orders?publish&publisher=p%C3%A9");
    assert!(
        greeting.ends_with(r#""publisher":{"id":"pé","last_seq":0,"last_offset":null}}"#),
        "{greeting}"
    );
    drop(ws.close(None));
    let (code, reason) = refused(&srv, "trades?offset=99999999999999999999999");
    assert_eq!(code, 4400);
    assert!(reason.contains("beyond int64"), "{reason}");
}

/// At shutdown a subscriber still replaying history is closed with 1001 between two frames
/// (it resumes from its offset later) instead of holding the server for the whole drain and then
/// being cut mid-frame.
#[test]
fn sigterm_closes_a_slow_replaying_subscriber_promptly_between_frames() {
    use std::io::{Read, Write};
    let setup = Setup::new();
    let cfg = setup
        .config("[[stream]]\nname = \"trades\"\nschema = \"@trade\"\nmax_replay = \"unlimited\"\n");
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let (mut p, _) = open(&srv, "trades?publish");
    for f in 0..100 {
        let rows: Vec<String> = (0..1000).map(|k| trade(f * 1000 + k, "REPLAY")).collect();
        support::publish_on(&mut p, &rows);
    }
    drop(p.close(None));
    drop(p);
    let mut s = srv.tcp();
    s.write_all(
        b"GET /trades?offset=0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    bytes.extend_from_slice(&buf[..n]);
    let pid = srv.child.id();
    let t0 = Instant::now();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    // read slowly at first, then drain whatever is left
    for _ in 0..20 {
        let n = s.read(&mut buf).unwrap();
        bytes.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(10));
    }
    s.read_to_end(&mut bytes).unwrap();
    assert_eq!(srv.stop(), Some(0));
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        t0.elapsed()
    );
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (start, code) =
        close_frame_at_end(&bytes).expect("the stream ends with a complete close frame");
    assert_eq!(code, 1001);
    let frames = split_frames(&bytes[head_end..start]);
    assert!(frames.len() > 1, "greeting and some replayed rows");
    assert!(
        frames.len() < 100_001,
        "not the whole replay: closed promptly"
    );
    for (i, f) in frames[1..].iter().enumerate() {
        assert!(
            f.starts_with(&format!("[{},", i + 1)),
            "frame {i} is whole and in order"
        );
    }
}

/// 12,000 rows that a `{"side":1}` filter refuses (about three replay chunks), then one it
/// accepts, published and then read back after a restart (the ring is empty, so every row comes
/// from the reader pool). Returns the restarted server.
fn quiet_stream_with_one_late_match(setup: &Setup) -> Server {
    let cfg = standard_config(setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let mut publ = ws_connect(&srv.url("trades?publish"));
    let _greeting = recv_text(&mut publ);
    for chunk in 0..12 {
        let rows: Vec<String> = (0..1000)
            .map(|i| trade(2 * (chunk * 1000 + i), "BTCUSD")) // even trade ids: side 0
            .collect();
        publish_on(&mut publ, &rows);
    }
    assert_eq!(publish_on(&mut publ, &[trade(1, "ETHUSD")]), [Some(12_001)]);
    let _ = publ.close(None);
    assert_eq!(srv.stop(), Some(0));
    Server::start(Some(&cfg), &setup.data(), &[])
}

#[test]
fn a_filtered_replay_reads_past_chunks_with_no_match_without_waiting_for_a_publish() {
    let setup = Setup::new();
    let srv = quiet_stream_with_one_late_match(&setup);
    // Nothing is published from here on: the match must come from the replay alone.
    let (mut ws, _greeting) = open(
        &srv,
        &format!("trades?offset=1&where={}", pct(r#"{"side":1}"#)),
    );
    let frame = recv_text(&mut ws);
    let (offset, _ts, row) = split_frame(&frame);
    assert_eq!(offset, Some(12_001), "{frame}");
    assert!(row.contains("\"symbol\":\"ETHUSD\""), "{frame}");
}

/// Issue 13, 4: JSON `-0` is an integer literal meaning 0. An integer column takes it and the
/// subscriber receives `0`; a fractional float is still rejected.
#[test]
fn minus_zero_is_accepted_by_an_integer_column_as_0() {
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &[]);
    let (mut sub, _) = open(&srv, "trades");
    let (mut publ, _) = open(&srv, "trades?publish");
    let row =
        r#"{"event_ts":-0,"price":85566.5,"amount":0.015,"side":-0,"symbol":"A","trade_id":-0}"#;
    let reply = call(&mut publ, row);
    assert_eq!(reply, r#"{"ok":[1]}"#, "{reply}");
    let frame = recv_text(&mut sub);
    assert!(
        frame.ends_with(
            r#"{"event_ts":0,"price":85566.5,"amount":0.015,"side":0,"symbol":"A","trade_id":0}]"#
        ),
        "{frame}"
    );
    let reply = call(&mut publ, &row.replace(r#""side":-0"#, r#""side":-0.5"#));
    assert!(
        reply.contains("rejected") && reply.contains("side"),
        "{reply}"
    );
}

/// The `last_seq` of an exactly-once greeting.
fn greeting_last_seq(greeting: &str) -> u64 {
    let at = greeting
        .find("\"last_seq\":")
        .unwrap_or_else(|| panic!("no last_seq: {greeting}"));
    greeting[at + 11..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("last_seq: {greeting}"))
}

/// Issue 13, 5: takeovers of an exactly-once id while the older connection has a window of
/// frames in flight, hundreds of times, on two cores kept busy by CPU hogs. The older
/// connection's frames handed to the writer before the takeover commit before the newer
/// greeting's mark is read; none after it is acknowledged: every seq acknowledged to the older
/// connection is at most the newer greeting's `last_seq`, and the older one ends with 4409.
#[test]
fn exactly_once_takeovers_never_ack_the_old_connection_past_the_new_mark() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let setup = Setup::new();
    let cfg = standard_config(&setup);
    let srv = Server::start(Some(&cfg), &setup.data(), &["--cores", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let hog_until = Instant::now() + Duration::from_secs(60);
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < hog_until {
                    for i in 0..10_000u64 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
                    }
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let path = "orders?publish&publisher=takeover";
    let (mut old, g) = open(&srv, path);
    let mut last = greeting_last_seq(&g);
    let until = Instant::now() + Duration::from_secs(25);
    let mut round = 0;
    let mut failure = None;
    while round < 400 && Instant::now() < until {
        round += 1;
        // a window of 40 frames in flight
        for s in last + 1..=last + 40 {
            send(&mut old, &format!("[{s},{}]", trade(s as i64, "T")));
        }
        // the takeover
        let (new, g) = open(&srv, path);
        let mark = greeting_last_seq(&g);
        // what the older connection was told: one reply per frame, in order
        let mut acked = last;
        let code = loop {
            match old.read() {
                Ok(Message::Text(t)) => {
                    assert!(t.starts_with("{\"ok\":["), "round {round}: {t}");
                    acked += 1;
                }
                Ok(Message::Close(c)) => break c.map(|c| u16::from(c.code)),
                Ok(_) => {}
                Err(e) => panic!("round {round}: the older connection ended without a close: {e}"),
            }
        };
        assert_eq!(code, Some(4409), "round {round}");
        if acked > mark {
            failure = Some(format!(
                "round {round}: the older connection was acknowledged up to seq {acked}, \
                 past the newer greeting's last_seq {mark}"
            ));
            break;
        }
        assert!(
            mark <= last + 40,
            "round {round}: mark {mark} past what was sent"
        );
        old = new;
        last = mark;
    }
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().expect("hog");
    }
    if let Some(f) = failure {
        panic!("{f}");
    }
    assert!(round >= 50, "only {round} takeovers in the time allowed");
}
