//! `--protocol nats`: the same publishers, subscribers, rates, windows and latency measurement
//! against a NATS server's WebSocket listener (`websocket { port: P, no_tls: true }`).
//!
//! The subject is the URL's path (`ws://127.0.0.1:P/trades` → `trades`, further `/` → `.`).
//! Core NATS has no offsets, so the publisher (one per run) numbers its rows: every row is
//! `{"event_ts":T,"seq":N,...}` with N = 1, 2, 3 ... and that sequence plays the offset's part in
//! the report — each subscriber must see every acknowledged N exactly once and in order.
//!
//! A publish *frame* is one WebSocket message carrying `--batch` `PUB`s (one row each, the unit
//! NATS delivers). What acknowledges it:
//! - core NATS: a `PING` at the end of the frame; the server's `PONG` means it processed (and
//!   routed to every subscription) every `PUB` before it — the NATS "flush". The window is the
//!   number of frames whose `PONG` is owed.
//! - `--nats-jetstream`: every `PUB` carries a reply subject; the frame is acknowledged when
//!   the JetStream `PubAck` of each of its rows came back (with `sync_interval: always` on the
//!   server, a `PubAck` is sent after the row was fsynced). The publisher creates the stream
//!   (file storage) on connect when it does not exist.
//!
//! Server frames are binary WebSocket messages whose payloads, concatenated, are the NATS
//! protocol stream (an operation may span two frames).
//!
//! The publisher here also drives `--protocol raw` ([`Wire::Raw`], see `raw.rs`): the same
//! numbered rows and schedule, framed as one text message per publish frame.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_net::rt::{self, Conn, ReadHalf, WriteHalf};
use corecast_net::ws::frame::OpCode;
use corecast_net::ws::handshake::{check_response, client_key, client_request_with};
use hdrhistogram::Histogram;

use crate::notify::Notify;
use crate::publisher::{PubPlan, PubResult};
use crate::shared::{now_us, Shared};
use crate::subscriber::{SubConfig, SubResult, SubState};
use crate::wsclient::{client_frame, close_frame, leading_u64, parse_frame, Frame, Keys};
use crate::Target;

/// The NATS subject of a URL path: `/trades` → `trades`, `/a/b` → `a.b`.
pub fn subject_of(path: &str) -> Result<String, String> {
    let s = path.trim_matches('/').replace('/', ".");
    if s.is_empty() || s.bytes().any(|b| b <= b' ' || b == b'*' || b == b'>') {
        return Err(format!(
            "{path:?}: the URL path names the NATS subject (e.g. ws://127.0.0.1:PORT/trades)"
        ));
    }
    Ok(s)
}

/// One NATS protocol operation parsed from the stream.
pub enum Op<'a> {
    Msg { payload: &'a [u8] },
    Ping,
    Pong,
    Ok,
    Err(&'a [u8]),
    Info,
    Other,
}

/// Parses complete operations from the front of `data`, calling `on` for each; returns the
/// bytes consumed (the rest is an incomplete operation). `on` returning false stops early.
#[inline]
pub fn parse_ops(data: &[u8], mut on: impl FnMut(Op<'_>) -> bool) -> usize {
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = &rest[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let op = if line.starts_with(b"MSG ") {
            // MSG <subject> <sid> [reply-to] <#bytes>
            let mut parts = line[4..]
                .split(|&b| b == b' ' || b == b'\t')
                .filter(|p| !p.is_empty());
            let _subject = parts.next();
            let _sid = parts.next();
            let a = parts.next().unwrap_or(b"");
            // with a reply subject, the length comes after it
            let len_s = parts.next().unwrap_or(a);
            let (len, n) = leading_u64(len_s);
            let len = if n == 0 { 0 } else { len as usize };
            let body = nl + 1;
            if rest.len() < body + len + 2 {
                break;
            }
            let payload = &rest[body..body + len];
            let consumed = body + len + 2;
            let go = on(Op::Msg { payload });
            pos += consumed;
            if !go {
                return pos;
            }
            continue;
        } else if line == b"PING" {
            Op::Ping
        } else if line == b"PONG" {
            Op::Pong
        } else if line == b"+OK" {
            Op::Ok
        } else if let Some(e) = line.strip_prefix(b"-ERR") {
            Op::Err(e)
        } else if line.starts_with(b"INFO") {
            Op::Info
        } else {
            Op::Other
        };
        pos += nl + 1;
        if !on(op) {
            return pos;
        }
    }
    pos
}

/// An upgraded connection to a NATS WebSocket listener, past `CONNECT` (and `SUB`s) with the
/// server's `PONG` in hand.
pub struct Opened {
    pub rd: ReadHalf,
    pub wr: WriteHalf,
    /// WebSocket bytes read past the handshake.
    pub buf: Vec<u8>,
    /// NATS protocol bytes of an incomplete operation.
    pub proto: Vec<u8>,
}

/// Appends one masked binary frame carrying `nats` (NATS protocol bytes).
pub fn nats_frame(nats: &[u8], keys: &mut Keys, out: &mut Vec<u8>) {
    client_frame(OpCode::Binary, nats, keys, out);
}

/// Moves the payloads of complete data frames at the front of `buf` into `proto`; errors on a
/// close.
fn pump(buf: &mut Vec<u8>, proto: &mut Vec<u8>) -> Result<(), String> {
    let mut pos = 0;
    while let Some((f, next)) = parse_frame(buf, pos)? {
        match f {
            Frame::Data(r) => proto.extend_from_slice(&buf[r]),
            Frame::Close(c, reason) => return Err(format!("closed by the server: {c} {reason}")),
            _ => {}
        }
        pos = next;
    }
    buf.drain(..pos);
    Ok(())
}

/// Dials, upgrades, reads `INFO`, sends `CONNECT` + `setup` (e.g. `SUB`s) + `PING` and waits for
/// the `PONG` (and, when `want_reply` names an inbox, for the first `MSG`, returned). Bounded by
/// `limit`.
pub async fn open(
    target: &Target,
    keys: &mut Keys,
    limit: Duration,
    setup: &[u8],
    want_reply: bool,
) -> Result<(Opened, Option<Vec<u8>>), String> {
    let mut nonce = [0u8; 16];
    nonce[..8].copy_from_slice(&keys.next().to_ne_bytes());
    nonce[8..].copy_from_slice(&keys.next().to_ne_bytes());
    let key = client_key(nonce);
    let mut k2 = Keys::new(keys.next());
    let (addr, host, path) = (target.addr, target.host.as_str(), target.path.as_str());
    let authorization = target.authorization.as_deref();
    let fut = async move {
        let conn = Conn::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let (mut rd, mut wr) = conn.split();
        let extra: Vec<(&str, &str)> = authorization
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let (res, _) = wr
            .write_all(client_request_with(host, path, &key, &extra))
            .await;
        res.map_err(|e| format!("write upgrade: {e}"))?;
        let mut buf = Vec::with_capacity(64 * 1024);
        let head = loop {
            let (res, b) = rd.read_into(buf, 4096).await;
            buf = b;
            match res {
                Ok(0) => return Err("connection closed during the upgrade".to_string()),
                Ok(_) => {}
                Err(e) => return Err(format!("read upgrade: {e}")),
            }
            match check_response(&buf, &key) {
                Ok(Some(n)) => break n,
                Ok(None) => continue,
                Err(e) => return Err(format!("upgrade refused: {e}")),
            }
        };
        buf.drain(..head);
        let mut proto = Vec::new();
        // 0: waiting for INFO, 1: waiting for PONG, 2: waiting for the reply, 3: done
        let mut stage = 0u8;
        let mut reply: Option<Vec<u8>> = None;
        loop {
            pump(&mut buf, &mut proto)?;
            let mut err: Option<String> = None;
            let mut send_connect = false;
            let mut pongs = 0usize;
            let n = parse_ops(&proto, |op| {
                match op {
                    Op::Info if stage == 0 => {
                        stage = 1;
                        send_connect = true;
                    }
                    Op::Pong if stage == 1 => {
                        stage = if want_reply && reply.is_none() { 2 } else { 3 }
                    }
                    Op::Msg { payload, .. } if stage >= 1 && want_reply && reply.is_none() => {
                        reply = Some(payload.to_vec());
                        if stage == 2 {
                            stage = 3;
                        }
                    }
                    Op::Ping => pongs += 1,
                    Op::Err(e) => err = Some(String::from_utf8_lossy(e).trim().to_string()),
                    _ => {}
                }
                stage != 3 || reply.is_none() && want_reply
            });
            proto.drain(..n);
            if let Some(e) = err {
                return Err(format!("NATS -ERR {e}"));
            }
            if send_connect || pongs > 0 {
                let mut ops = Vec::new();
                if send_connect {
                    ops.extend_from_slice(
                        b"CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"loadgen\",\"lang\":\"rust\",\"version\":\"0\",\"protocol\":1,\"echo\":true,\"headers\":false,\"no_responders\":false}\r\n",
                    );
                    ops.extend_from_slice(setup);
                    ops.extend_from_slice(b"PING\r\n");
                }
                for _ in 0..pongs {
                    ops.extend_from_slice(b"PONG\r\n");
                }
                let mut out = Vec::new();
                nats_frame(&ops, &mut k2, &mut out);
                let (res, _) = wr.write_all(out).await;
                res.map_err(|e| format!("write CONNECT: {e}"))?;
            }
            if stage == 3 && (!want_reply || reply.is_some()) {
                return Ok((Opened { rd, wr, buf, proto }, reply));
            }
            let (res, b) = rd.read_into(buf, 16 * 1024).await;
            buf = b;
            match res {
                Ok(0) => return Err("connection closed during the NATS handshake".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    match rt::timeout(limit, fut).await {
        Some(r) => r,
        None => Err(format!("no NATS handshake within {limit:?}")),
    }
}

/// `SUB subject 1` for a subscriber.
pub fn sub_setup(subject: &str) -> Vec<u8> {
    format!("SUB {subject} 1\r\n").into_bytes()
}

/// The inbox of connection `id` (its replies arrive on `INBOX.*`).
pub fn inbox(id: usize) -> String {
    format!("_INBOX.loadgen.{}.{id}", std::process::id())
}

/// Sends a request (`PUB subject reply body`) on an opened connection and waits for the first
/// `MSG` back (the connection must be subscribed to `reply`); bounded by `limit`.
pub async fn request(
    o: &mut Opened,
    keys: &mut Keys,
    subject: &str,
    reply: &str,
    body: &str,
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let op = format!("PUB {subject} {reply} {}\r\n{body}\r\n", body.len());
    nats_frame(op.as_bytes(), keys, &mut out);
    let (res, _) = o.wr.write_all(out).await;
    res.map_err(|e| format!("write request: {e}"))?;
    let fut = async {
        loop {
            pump(&mut o.buf, &mut o.proto)?;
            let mut got: Option<Result<Vec<u8>, String>> = None;
            let n = parse_ops(&o.proto, |op| {
                match op {
                    Op::Msg { payload } => got = Some(Ok(payload.to_vec())),
                    Op::Err(e) => {
                        got = Some(Err(format!(
                            "NATS -ERR {}",
                            String::from_utf8_lossy(e).trim()
                        )))
                    }
                    _ => {}
                }
                got.is_none()
            });
            o.proto.drain(..n);
            if let Some(r) = got {
                return r;
            }
            let (res, b) = o.rd.read_into(std::mem::take(&mut o.buf), 16 * 1024).await;
            o.buf = b;
            match res {
                Ok(0) => return Err("connection closed during a request".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    match rt::timeout(limit, fut).await {
        Some(r) => r,
        None => Err(format!("no reply to {subject} within {limit:?}")),
    }
}

/// A JetStream push consumer for one subscriber: ephemeral, delivering to `INBOX.d` (see
/// [`js_sub_setup`]) every row stored from now on, no acks. Rows reach it
/// only after the stream stored them (with `sync_interval: always`: after the fsync), as
/// corecast delivers only committed rows. Returns the request's (subject, body).
pub fn consumer_request(subject: &str, ib: &str) -> (String, String) {
    let name = subject.replace('.', "_");
    (
        format!("$JS.API.CONSUMER.CREATE.{name}"),
        format!(
            "{{\"stream_name\":\"{name}\",\"config\":{{\"deliver_subject\":\"{ib}.d\",\"deliver_policy\":\"new\",\"ack_policy\":\"none\",\"replay_policy\":\"instant\",\"flow_control\":false}}}}"
        ),
    )
}

/// Whether a `$JS.API.CONSUMER.CREATE` reply created the consumer.
pub fn check_consumer_reply(reply: &[u8]) -> Result<(), String> {
    let t = String::from_utf8_lossy(reply);
    if t.contains("\"error\"") {
        Err(format!("JetStream consumer create: {t}"))
    } else {
        Ok(())
    }
}

/// A publisher's setup: for JetStream, its ack inbox and the request that creates the stream
/// (`subject` with `.` → `_`), file storage; the reply (created, or already there) is checked
/// by [`check_stream_reply`].
pub fn pub_setup(subject: &str, id: usize, jetstream: bool) -> Vec<u8> {
    if !jetstream {
        return Vec::new();
    }
    let ib = inbox(id);
    let mut o = format!("SUB {ib}.* 1\r\n").into_bytes();
    o.extend_from_slice(&stream_create(subject, &ib));
    o
}

/// A JetStream subscriber's setup: its literal inbox subjects (a push consumer delivers only
/// once its deliver subject has a literal subscription; a wildcard alone is not enough) and the
/// stream create request.
pub fn js_sub_setup(subject: &str, id: usize) -> Vec<u8> {
    let ib = inbox(id);
    let mut o =
        format!("SUB {ib}.create 11\r\nSUB {ib}.consumer 12\r\nSUB {ib}.d 1\r\n").into_bytes();
    o.extend_from_slice(&stream_create(subject, &ib));
    o
}

fn stream_create(subject: &str, ib: &str) -> Vec<u8> {
    let name = subject.replace('.', "_");
    let cfg = format!(
        "{{\"name\":\"{name}\",\"subjects\":[\"{subject}\"],\"storage\":\"file\",\"retention\":\"limits\",\"discard\":\"old\",\"num_replicas\":1}}"
    );
    format!(
        "PUB $JS.API.STREAM.CREATE.{name} {ib}.create {}\r\n{cfg}\r\n",
        cfg.len()
    )
    .into_bytes()
}

/// Whether the `$JS.API.STREAM.CREATE` reply says the stream exists now.
pub fn check_stream_reply(reply: &[u8]) -> Result<(), String> {
    let t = String::from_utf8_lossy(reply);
    // 10058: stream name already in use (with a different config); an identical config succeeds
    if !t.contains("\"error\"") || t.contains("10058") {
        Ok(())
    } else {
        Err(format!("JetStream stream create: {t}"))
    }
}

// ---- subscriber ----

/// The `event_ts` and `seq` at the front of a loadgen row (see [`row`]).
#[inline]
pub fn row_fields(p: &[u8]) -> Option<(i64, u64)> {
    const TS: &[u8] = b"{\"event_ts\":";
    const SEQ: &[u8] = b",\"seq\":";
    let r = p.strip_prefix(TS)?;
    let (ts, n) = leading_u64(r);
    let r = r[n..].strip_prefix(SEQ)?;
    let (seq, m) = leading_u64(r);
    (n > 0 && m > 0).then_some((ts as i64, seq))
}

struct SubAcc<'a> {
    r: &'a mut SubResult,
    next: &'a mut u64,
    sample: u64,
    recv_us: i64,
    hist: &'a RefCell<Histogram<u64>>,
    pings: usize,
    err: Option<String>,
}

impl SubAcc<'_> {
    #[inline]
    fn op(&mut self, op: Op<'_>) -> bool {
        match op {
            Op::Msg { payload, .. } => {
                let Some((ts, seq)) = row_fields(payload) else {
                    self.err = Some(format!(
                        "not a loadgen row: {}",
                        String::from_utf8_lossy(&payload[..payload.len().min(120)])
                    ));
                    return false;
                };
                let r = &mut *self.r;
                r.frames += 1;
                r.first.get_or_insert(seq);
                r.last = Some(seq);
                let next = *self.next;
                if seq == next {
                    *self.next += 1;
                } else if seq > next {
                    r.gaps += seq - next;
                    r.gap_events += 1;
                    *self.next = seq + 1;
                } else {
                    r.dups += 1;
                }
                if seq % self.sample == 0 {
                    let lat = (self.recv_us - ts).max(0) as u64;
                    self.hist.borrow_mut().saturating_record(lat);
                }
                true
            }
            Op::Ping => {
                self.pings += 1;
                true
            }
            Op::Err(e) => {
                self.err = Some(format!("NATS -ERR {}", String::from_utf8_lossy(e).trim()));
                false
            }
            _ => true,
        }
    }
}

/// Reads `MSG`s until the server closes (after the controller's close) or an error; the same
/// checks and the same latency sampling as the protocol-4 subscriber, on the row's `seq`.
pub async fn run_sub(
    cfg: SubConfig,
    shared: Arc<Shared>,
    st: Rc<SubState>,
    mut rd: ReadHalf,
    mut buf: Vec<u8>,
    mut proto: Vec<u8>,
    hist: Rc<RefCell<Histogram<u64>>>,
) -> SubResult {
    let mut r = SubResult::default();
    let mut next = st.next.get();
    let sample = cfg.sample.max(1);
    let mut delivered_reported = 0u64;
    let mut pos = 0usize;
    'outer: loop {
        let now = Instant::now();
        let frames_before = r.frames;
        let mut acc = SubAcc {
            r: &mut r,
            next: &mut next,
            sample,
            recv_us: now_us(),
            hist: &hist,
            pings: 0,
            err: None,
        };
        let mut closed = None;
        loop {
            let (frame, np) = match parse_frame(&buf, pos) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    acc.err = Some(e);
                    break;
                }
            };
            pos = np;
            match frame {
                Frame::Data(range) => {
                    let data = &buf[range];
                    if proto.is_empty() {
                        let n = parse_ops(data, |op| acc.op(op));
                        if n < data.len() && acc.err.is_none() {
                            proto.extend_from_slice(&data[n..]);
                        }
                    } else {
                        proto.extend_from_slice(data);
                        let n = parse_ops(&proto, |op| acc.op(op));
                        proto.drain(..n);
                    }
                    if acc.err.is_some() {
                        break;
                    }
                }
                Frame::Close(code, reason) => {
                    closed = Some((code, reason));
                    break;
                }
                Frame::Ping(p) => st.pong.borrow_mut().push(p),
                Frame::Skip => {}
            }
        }
        let (pings, err) = (acc.pings, acc.err.take());
        for _ in 0..pings {
            // the controller frames these as binary data frames in NATS mode
            st.pong.borrow_mut().push(b"PONG\r\n".to_vec());
        }
        if let Some(e) = err {
            r.error = Some(e);
            break 'outer;
        }
        if r.frames != frames_before {
            r.last_frame_at = Some(now);
            st.next.set(next);
            shared.sub_next[cfg.slot].store(next, Relaxed);
            let d = r.frames - delivered_reported;
            if d >= 256 {
                shared.delivered.fetch_add(d, Relaxed);
                delivered_reported = r.frames;
            }
        }
        if let Some(c) = closed {
            r.close = Some(c);
            break;
        }
        if pos > 0 {
            let left = buf.len() - pos;
            buf.copy_within(pos.., 0);
            buf.truncate(left);
            pos = 0;
        }
        let (res, b) = rd.read_into(buf, 64 * 1024).await;
        buf = b;
        match res {
            Ok(0) => {
                r.error = Some("connection closed without a close frame".into());
                break;
            }
            Ok(_) => {}
            Err(e) => {
                r.error = Some(format!("read: {e}"));
                break;
            }
        }
    }
    st.next.set(next);
    shared.sub_next[cfg.slot].store(u64::MAX, Relaxed);
    shared
        .delivered
        .fetch_add(r.frames - delivered_reported, Relaxed);
    st.finished.set(true);
    r
}

// ---- publisher ----

struct InFlight {
    sent: Instant,
    rows: u64,
    last_seq: u64,
    /// Replies still owed for this frame (1 PONG, or one PubAck per row).
    owed: u64,
}

struct PubState {
    frames: RefCell<VecDeque<InFlight>>,
    writer_done: Cell<bool>,
    wake_writer: Notify,
    /// NATS `PING`s from the server not answered yet.
    pongs_owed: Cell<usize>,
    /// Payloads of WebSocket pings from the server not answered yet.
    ws_pongs: RefCell<Vec<Vec<u8>>>,
    wake_pong: Notify,
    result: RefCell<PubResult>,
    wire: Wire,
}

/// What a publish frame is and what acknowledges it (see the module docs and `raw.rs`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `PUB`s and a `PING`; the `PONG` acknowledges the frame.
    Core,
    /// `PUB`s with a reply subject; one JetStream `PubAck` per row.
    JetStream,
    /// `--protocol raw`: the rows, one per line, in one text message; the server's
    /// `{"ok":N}` acknowledges it.
    Raw,
}

/// One loadgen row numbered `seq` (the loss check's offset), sent at `event_ts` (µs since the
/// epoch).
pub fn row(out: &mut Vec<u8>, event_ts: i64, seq: u64) {
    use std::io::Write as _;
    let _ = write!(
        out,
        "{{\"event_ts\":{event_ts},\"seq\":{seq},\"price\":85566.5,\"amount\":0.015,\"side\":{},\"symbol\":\"BTCUSD\",\"trade_id\":{seq}}}",
        seq & 1
    );
}

/// Runs the one publisher on an opened connection: the protocol-4 publisher's schedule
/// (window, batch, rate, max-lag, duration/rows, drain) with NATS acknowledgements (`wire`
/// `Core` or `JetStream`, `subject` the NATS subject) or raw ones (`Raw`, `subject` unused).
pub async fn run_pub(
    plan: PubPlan,
    shared: Arc<Shared>,
    o: Opened,
    keys: Keys,
    subject: String,
    wire: Wire,
) -> PubResult {
    let st = Rc::new(PubState {
        frames: RefCell::new(VecDeque::with_capacity(plan.window)),
        writer_done: Cell::new(false),
        wake_writer: Notify::default(),
        pongs_owed: Cell::new(0),
        ws_pongs: RefCell::new(Vec::new()),
        wake_pong: Notify::default(),
        result: RefCell::new(PubResult {
            ack_latency: Some(Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()),
            ..PubResult::default()
        }),
        wire,
    });
    let reader_done = Notify::default();
    {
        let (st, shared, reader_done) = (st.clone(), shared.clone(), reader_done.clone());
        let (rd, buf, proto) = (o.rd, o.buf, o.proto);
        rt::spawn(async move {
            read_acks(st, shared, rd, buf, proto).await;
            reader_done.notify();
        });
    }
    let mut wr = write_pubs(&plan, &st, &shared, o.wr, keys, &subject).await;
    st.writer_done.set(true);
    let owed = rt::timeout(plan.drain, async {
        while !st.frames.borrow().is_empty() && !shared.abort.load(Relaxed) {
            st.wake_writer.wait().await;
        }
    })
    .await;
    if owed.is_none() {
        fail(
            &st,
            &shared,
            format!(
                "{} frames still owed replies after {:?}",
                st.frames.borrow().len(),
                plan.drain
            ),
        );
    }
    if let Some(w) = wr.as_mut() {
        let mut k = Keys::new(plan.id as u64 + 77);
        let _ = w.write_all(close_frame(1000, &mut k)).await;
    }
    let _ = rt::timeout(Duration::from_secs(2), reader_done.wait()).await;
    let mut r = std::mem::take(&mut *st.result.borrow_mut());
    r.owed_at_end = st.frames.borrow().len() as u64;
    shared.pubs_active.fetch_sub(1, AcqRel);
    r
}

async fn write_or_abort(
    st: &PubState,
    shared: &Shared,
    wr: &mut WriteHalf,
    out: &mut Vec<u8>,
) -> bool {
    let (res, back) = wr.write_all(std::mem::take(out)).await;
    *out = back;
    if let Err(e) = res {
        let mut r = st.result.borrow_mut();
        r.errors += 1;
        r.first_error.get_or_insert(format!("publisher write: {e}"));
        shared.abort.store(true, Relaxed);
        return false;
    }
    true
}

async fn write_pubs(
    plan: &PubPlan,
    st: &Rc<PubState>,
    shared: &Shared,
    mut wr: WriteHalf,
    mut keys: Keys,
    subject: &str,
) -> Option<WriteHalf> {
    use std::io::Write as _;
    let epoch = shared.started().expect("publishers run after go");
    let t0 = epoch.at;
    let end = plan.duration.map(|d| t0 + d);
    let frame_interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(plan.batch as f64 / r));
    let total_frames = plan.rows.map(|r| r.div_ceil(plan.batch as u64));
    let mut sent_frames: u64 = 0;
    let mut sent_rows: u64 = 0;
    let mut nats = Vec::with_capacity(plan.batch * 200 + 64);
    let mut payload = Vec::with_capacity(200);
    let mut out = Vec::with_capacity(256 * 1024);
    let reply = format!("{}.a", inbox(plan.id));
    let pub_head = if st.wire == Wire::JetStream {
        format!("PUB {subject} {reply} ")
    } else {
        format!("PUB {subject} ")
    };
    loop {
        if shared.stop_sending.load(Relaxed) || shared.abort.load(Relaxed) {
            break;
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) || total_frames.is_some_and(|t| sent_frames >= t) {
            break;
        }
        let pongs = st.pongs_owed.replace(0);
        let ws_pongs = std::mem::take(&mut *st.ws_pongs.borrow_mut());
        if pongs > 0 || !ws_pongs.is_empty() {
            out.clear();
            if pongs > 0 {
                nats.clear();
                for _ in 0..pongs {
                    nats.extend_from_slice(b"PONG\r\n");
                }
                nats_frame(&nats, &mut keys, &mut out);
            }
            for p in ws_pongs {
                client_frame(OpCode::Pong, &p, &mut keys, &mut out);
            }
            if !write_or_abort(st, shared, &mut wr, &mut out).await {
                return None;
            }
        }
        let in_flight = st.frames.borrow().len();
        let room = plan.window - in_flight.min(plan.window);
        if room == 0 {
            st.wake_writer.wait().await;
            continue;
        }
        let mut n = room as u64;
        if let Some(max_lag) = plan.max_lag {
            let slowest = shared.slowest_subscriber();
            let sent_end = shared.final_end.load(Acquire).max(1) + (in_flight * plan.batch) as u64;
            if slowest != u64::MAX {
                let lag = sent_end.saturating_sub(slowest);
                if lag >= max_lag {
                    rt::sleep(Duration::from_micros(200)).await;
                    continue;
                }
                n = n.min(((max_lag - lag) / plan.batch as u64).max(1));
            }
        }
        if let Some(t) = total_frames {
            n = n.min(t - sent_frames);
        }
        if let Some(iv) = frame_interval {
            let due = (now.duration_since(t0).as_nanos() / iv.as_nanos().max(1)) as u64 + 1;
            let owed = due.saturating_sub(sent_frames);
            if owed == 0 {
                let next = t0 + iv.mul_f64(sent_frames as f64);
                let wait = next.saturating_duration_since(now);
                rt::timeout(wait.max(Duration::from_micros(100)), st.wake_pong.wait()).await;
                continue;
            }
            n = n.min(owed);
        }
        n = n.min(512);
        out.clear();
        let now_us = epoch.us_at(now);
        {
            let mut q = st.frames.borrow_mut();
            for i in 0..n {
                let frame_no = sent_frames + i;
                let ts = match frame_interval {
                    Some(iv) => epoch.us + (iv.as_nanos() as u64 * frame_no / 1000) as i64,
                    None => now_us,
                };
                let mut rows_here = plan.batch as u64;
                if let Some(r) = plan.rows {
                    rows_here = rows_here.min(r - sent_rows);
                }
                nats.clear();
                for j in 0..rows_here {
                    sent_rows += 1;
                    if st.wire == Wire::Raw {
                        if j > 0 {
                            nats.push(b'\n');
                        }
                        row(&mut nats, ts, sent_rows);
                        continue;
                    }
                    payload.clear();
                    row(&mut payload, ts, sent_rows);
                    nats.extend_from_slice(pub_head.as_bytes());
                    let _ = write!(nats, "{}\r\n", payload.len());
                    nats.extend_from_slice(&payload);
                    nats.extend_from_slice(b"\r\n");
                }
                match st.wire {
                    Wire::Core => {
                        nats.extend_from_slice(b"PING\r\n");
                        nats_frame(&nats, &mut keys, &mut out);
                    }
                    Wire::JetStream => nats_frame(&nats, &mut keys, &mut out),
                    Wire::Raw => client_frame(OpCode::Text, &nats, &mut keys, &mut out),
                }
                q.push_back(InFlight {
                    sent: now,
                    rows: rows_here,
                    last_seq: sent_rows,
                    owed: if st.wire == Wire::JetStream {
                        rows_here
                    } else {
                        1
                    },
                });
            }
        }
        sent_frames += n;
        if !write_or_abort(st, shared, &mut wr, &mut out).await {
            return None;
        }
        let mut r = st.result.borrow_mut();
        r.frames_sent = sent_frames;
        r.rows_sent = sent_rows;
    }
    Some(wr)
}

fn fail(st: &PubState, shared: &Shared, e: String) {
    let mut r = st.result.borrow_mut();
    r.errors += 1;
    r.first_error.get_or_insert(e);
    shared.abort.store(true, Relaxed);
    st.wake_writer.notify();
}

/// One reply (a PONG, or a PubAck) for the oldest frame in flight.
fn on_reply(st: &PubState, shared: &Shared, now: Instant) -> Result<(), String> {
    let mut q = st.frames.borrow_mut();
    let Some(f) = q.front_mut() else {
        return Err("a reply with no publish in flight".into());
    };
    f.owed -= 1;
    if f.owed > 0 {
        return Ok(());
    }
    let f = q.pop_front().expect("front");
    drop(q);
    st.wake_writer.notify();
    let mut r = st.result.borrow_mut();
    r.frames_acked += 1;
    r.rows_acked += f.rows;
    r.last_ack = Some(now);
    if r.first_offset.is_none() {
        r.first_offset = Some(f.last_seq + 1 - f.rows);
    }
    r.last_offset = Some(f.last_seq);
    if let Some(h) = r.ack_latency.as_mut() {
        h.saturating_record(now.duration_since(f.sent).as_micros() as u64);
    }
    shared.final_end.fetch_max(f.last_seq + 1, AcqRel);
    shared.rows_acked.fetch_add(f.rows, Relaxed);
    Ok(())
}

async fn read_acks(
    st: Rc<PubState>,
    shared: Arc<Shared>,
    mut rd: ReadHalf,
    mut buf: Vec<u8>,
    mut proto: Vec<u8>,
) {
    loop {
        let mut pos = 0;
        let mut err: Option<String> = None;
        let mut closed = false;
        let mut pings = 0usize;
        loop {
            let (frame, np) = match parse_frame(&buf, pos) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            };
            pos = np;
            match frame {
                Frame::Data(range) if st.wire == Wire::Raw => {
                    let p = &buf[range];
                    let res = if p.starts_with(b"{\"ok\":") {
                        on_reply(&st, &shared, Instant::now())
                    } else {
                        Err(format!(
                            "not an acknowledgement ({{\"ok\":N}}): {}",
                            String::from_utf8_lossy(&p[..p.len().min(200)])
                        ))
                    };
                    if let Err(e) = res {
                        err = Some(e);
                        break;
                    }
                }
                Frame::Data(range) => {
                    proto.extend_from_slice(&buf[range]);
                    let now = Instant::now();
                    let n = parse_ops(&proto, |op| {
                        let res = match op {
                            Op::Pong if st.wire == Wire::Core => on_reply(&st, &shared, now),
                            Op::Msg { payload, .. } if st.wire == Wire::JetStream => {
                                if payload.windows(8).any(|w| w == b"\"error\"") {
                                    Err(format!(
                                        "JetStream publish refused: {}",
                                        String::from_utf8_lossy(&payload[..payload.len().min(200)])
                                    ))
                                } else {
                                    on_reply(&st, &shared, now)
                                }
                            }
                            Op::Ping => {
                                pings += 1;
                                Ok(())
                            }
                            Op::Err(e) => {
                                Err(format!("NATS -ERR {}", String::from_utf8_lossy(e).trim()))
                            }
                            _ => Ok(()),
                        };
                        match res {
                            Ok(()) => true,
                            Err(e) => {
                                err = Some(e);
                                false
                            }
                        }
                    });
                    proto.drain(..n);
                    if err.is_some() {
                        break;
                    }
                }
                Frame::Close(code, reason) => {
                    if !st.frames.borrow().is_empty() {
                        err = Some(format!("publisher closed by server: {code} {reason}"));
                    }
                    closed = true;
                    break;
                }
                Frame::Ping(p) => {
                    // a WebSocket keepalive (uWebSockets sends them): answered by the writer
                    st.ws_pongs.borrow_mut().push(p);
                    st.wake_writer.notify();
                    st.wake_pong.notify();
                }
                Frame::Skip => {}
            }
        }
        if pings > 0 {
            st.pongs_owed.set(st.pongs_owed.get() + pings);
            st.wake_writer.notify();
            st.wake_pong.notify();
        }
        if let Some(e) = err {
            fail(&st, &shared, e);
            return;
        }
        if closed {
            return;
        }
        buf.drain(..pos);
        if st.writer_done.get() && st.frames.borrow().is_empty() {
            return;
        }
        let (res, b) = rd.read_into(buf, 64 * 1024).await;
        buf = b;
        match res {
            Ok(0) => {
                if !st.frames.borrow().is_empty() {
                    fail(
                        &st,
                        &shared,
                        "publisher connection closed with replies owed".into(),
                    );
                }
                return;
            }
            Ok(_) => {}
            Err(e) => {
                fail(&st, &shared, format!("publisher read: {e}"));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(data: &[u8]) -> (Vec<String>, usize) {
        let mut v = Vec::new();
        let n = parse_ops(data, |op| {
            v.push(match op {
                Op::Msg { payload } => format!("MSG {}", String::from_utf8_lossy(payload)),
                Op::Ping => "PING".into(),
                Op::Pong => "PONG".into(),
                Op::Ok => "+OK".into(),
                Op::Err(e) => format!("-ERR{}", String::from_utf8_lossy(e)),
                Op::Info => "INFO".into(),
                Op::Other => "?".into(),
            });
            true
        });
        (v, n)
    }

    #[test]
    fn parses_operations_and_stops_at_an_incomplete_one() {
        let d = b"INFO {}\r\nPING\r\nMSG a 1 5\r\nhello\r\nMSG a 1 $JS.ACK.x.y 3\r\nabc\r\n+OK\r\n-ERR 'x'\r\nPONG\r\nMSG a 1 10\r\nonly";
        let (v, n) = ops(d);
        assert_eq!(
            v,
            [
                "INFO",
                "PING",
                "MSG hello",
                "MSG abc",
                "+OK",
                "-ERR 'x'",
                "PONG"
            ]
        );
        assert_eq!(&d[n..], b"MSG a 1 10\r\nonly");
        // a payload may contain CR LF; the length decides
        let (v, n) = ops(b"MSG a 1 4\r\n\r\n\r\n\r\nPI");
        assert_eq!(v, ["MSG \r\n\r\n"]);
        assert_eq!(n, 17);
    }

    #[test]
    fn reads_the_row_fields_and_the_subject() {
        let mut r = Vec::new();
        row(&mut r, 1_700_000_000_000_000, 42);
        assert_eq!(row_fields(&r), Some((1_700_000_000_000_000, 42)));
        assert_eq!(row_fields(b"{\"x\":1}"), None);
        assert_eq!(subject_of("/trades").unwrap(), "trades");
        assert_eq!(subject_of("/a/b").unwrap(), "a.b");
        assert!(subject_of("/").is_err());
        assert!(subject_of("/a*").is_err());
    }
}
