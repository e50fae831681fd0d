//! A publisher connection: frames in, one reply per frame out, in frame order.
//!
//! Runs on the shard that accepted the connection, as two tasks sharing `PubState`:
//! - the **reader** decodes each message, parses it (`corecast_storage::json`), validates and
//!   encodes every row on this core (`RowCodec::encode_row`), and hands an [`Append`] to the
//!   stream's writer thread — or queues the refusal (`bad_frame`, `rejected`) in the same order.
//!   It stops reading while `max_in_flight` replies are owed, and waits while the stream has
//!   `max_inbound` rows queued for commit: backpressure by not reading, never an error;
//! - the **replier** answers the queue front to back (PROTOCOL.md §7: exactly one reply per frame,
//!   in order), batching every ready reply into one write, and closes the connection at the end
//!   (4409 when superseded, 1001 on shutdown, the peer's code when it closed, 1002/1007/1009 on
//!   a violation).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_net::protocol::close_reason::CloseReason;
use corecast_net::protocol::reply::{Offsets, Reply};
use corecast_net::protocol::ServerMessage;
use corecast_net::rt::{self, WriteHalf};
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{encode_close, encode_ping, frame_in_place, OpCode};
use corecast_storage::json;
use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

use super::deliver::write_timeout;
use super::keepalive::{self, Due, Keepalive};
use super::pong::OwedPong;
use super::ws_io::{WsIn, WsReader, LINGER};
use crate::auth::live::Guard;
use crate::commit::writer::{Append, AppendReply, WriterMsg};
use crate::fanout::signal::Signal;
use crate::registry::{Claim, Stream};
use crate::shard::ShardCtx;
use corecast_net::ws::receiver::Received;

/// An exactly-once publisher's identity on this connection.
pub struct ExactlyOnce {
    /// The publisher id (1–128 bytes of UTF-8).
    pub id: String,
    /// This connection's claim on the id.
    pub claim: Arc<Claim>,
}

enum Pending {
    /// A reply payload ready to send (text).
    Ready(Vec<u8>),
    /// A reply owed by the writer thread.
    Owed(flume::Receiver<AppendReply>),
}

#[derive(Default)]
struct PubState {
    queue: RefCell<VecDeque<Pending>>,
    /// Replies queued and not yet written (`queue`'s length; the reader pauses at
    /// `max_in_flight`).
    owed: Cell<usize>,
    /// The pong owed for the latest ping, written before the next replies.
    pong: OwedPong,
    /// When to ping the peer, and when to give up on it.
    keepalive: Keepalive,
    replier: Signal,
    reader: Signal,
    reader_busy: Cell<bool>,
    reader_done: Cell<bool>,
    /// Set once the reader task has let go of the socket (peer's side closed, or it failed).
    reader_exited: Cell<bool>,
    exited: Signal,
    close: RefCell<Option<(u16, String)>>,
    /// The connection is closing: the reader stops reading new frames.
    dead: Cell<bool>,
    /// Raised with `dead` by the reply side: wakes a reader waiting for the peer's next frame,
    /// which then only lingers for the peer's close.
    ending: Signal,
    /// The socket failed or the peer went away without a close: nothing more can be written.
    gone: Cell<bool>,
    /// The principal's revocation and deadline (`None` on an open broker): 1008.
    guard: Option<Guard>,
}

impl PubState {
    fn must_end(&self) -> bool {
        self.guard.as_ref().and_then(Guard::ending).is_some()
    }
}

impl PubState {
    /// The reply side is done with the connection: the reader stops reading frames.
    fn end_reading(&self) {
        self.dead.set(true);
        self.reader.raise();
        self.ending.raise();
    }

    fn push(&self, p: Pending) {
        self.owed.set(self.owed.get() + 1);
        self.queue.borrow_mut().push_back(p);
        self.replier.raise();
    }
}

/// Serves a publisher until it closes, is superseded, or the server shuts down.
pub async fn run(
    ctx: Rc<ShardCtx>,
    stream: Arc<Stream>,
    ws: WsReader,
    wr: WriteHalf,
    eo: Option<ExactlyOnce>,
    guard: Option<Guard>,
) {
    let state = Rc::new(PubState {
        keepalive: Keepalive::new(ctx.shared.keepalive),
        guard,
        ..PubState::default()
    });
    stream.stats.publishers.fetch_add(1, Ordering::Relaxed);
    ctx.shared.publishers_open.fetch_add(1, Ordering::SeqCst);
    let eo = eo.map(Rc::new);
    rt::spawn(read_loop(
        ctx.clone(),
        stream.clone(),
        ws,
        state.clone(),
        eo.clone(),
    ));
    reply_loop(&ctx, &stream, wr, &state, eo.as_deref()).await;
    // the close frame is out and our side shut: give the peer LINGER to read the last replies
    // and close its side before the socket goes
    let deadline = std::time::Instant::now() + LINGER;
    while !state.reader_exited.get() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || rt::timeout(left, state.exited.wait()).await.is_none() {
            break;
        }
    }
    if let Some(eo) = &eo {
        stream.release(&eo.id, &eo.claim);
    }
    stream.stats.publishers.fetch_sub(1, Ordering::Relaxed);
    ctx.shared.publishers_open.fetch_sub(1, Ordering::SeqCst);
}

fn superseded(eo: Option<&ExactlyOnce>) -> bool {
    eo.is_some_and(|e| e.claim.superseded.load(Ordering::SeqCst))
}

async fn read_loop(
    ctx: Rc<ShardCtx>,
    stream: Arc<Stream>,
    mut ws: WsReader,
    state: Rc<PubState>,
    eo: Option<Rc<ExactlyOnce>>,
) {
    loop {
        if ctx.shutting_down()
            || superseded(eo.as_deref())
            || state.dead.get()
            || state.must_end()
            || stream.publisher_end().is_some()
        {
            break;
        }
        let Some(ev) = ws.next_until(state.ending.wait()).await else {
            break;
        };
        if ctx.shutting_down() || superseded(eo.as_deref()) {
            break;
        }
        state.keepalive.heard();
        match ev {
            WsIn::Frame(Received::Message { data, .. }) => {
                if data.len() > stream.cfg.max_message_bytes {
                    // a long stream name is dropped rather than cut (123 bytes at most)
                    let reason = CloseReason::TooBig {
                        size: data.len() as u64,
                        limit: stream.cfg.max_message_bytes as u64,
                        stream: &stream.cfg.name,
                    }
                    .encode();
                    *state.close.borrow_mut() = Some((1009, reason));
                    break;
                }
                state.reader_busy.set(true);
                let Some(p) = handle_frame(&ctx, &stream, &data, eo.as_deref()).await else {
                    // taken over before this frame reached the writer: it is not committed and
                    // not answered here (the newer connection's greeting does not count it)
                    state.reader_busy.set(false);
                    break;
                };
                state.push(p);
                state.reader_busy.set(false);
                while state.owed.get() >= stream.cfg.max_in_flight && !state.dead.get() {
                    state.reader.wait().await;
                }
            }
            WsIn::Frame(Received::Ping(p)) => {
                state.pong.owe(p);
                state.replier.raise();
            }
            WsIn::Frame(Received::Pong) => {}
            WsIn::Frame(Received::Close { code, .. }) => {
                let code = code.map_or(1000, |c| c.0);
                *state.close.borrow_mut() = Some((code, String::new()));
                break;
            }
            WsIn::Violation { code, reason } => {
                *state.close.borrow_mut() = Some((code, reason));
                break;
            }
            WsIn::Gone => {
                state.dead.set(true);
                state.gone.set(true);
                break;
            }
        }
    }
    state.reader_done.set(true);
    state.replier.raise();
    // linger: keep reading (and discarding) until the peer closes its side, so our close
    // never turns into a reset that would destroy replies the peer has not read yet — but
    // once the replies and the close are out, for LINGER at most: a peer that never closes
    // (or never stops sending) must not keep the socket
    if !state.gone.get() {
        let replies_out_then_linger = async {
            if !state.dead.get() {
                state.ending.wait().await;
            }
            rt::sleep(LINGER).await;
        };
        rt::until(ws.drain_until_eof(), replies_out_then_linger).await;
    }
    state.reader_exited.set(true);
    state.exited.raise();
}

/// Parses, checks and encodes one publish frame; hands it to the writer. Returns the queue entry
/// that will answer it, or `None` when the exactly-once id was taken over before the frame
/// reached the writer (it is then not sent: see [`Claim::hand_over`]).
async fn handle_frame(
    ctx: &ShardCtx,
    stream: &Stream,
    data: &[u8],
    eo: Option<&ExactlyOnce>,
) -> Option<Pending> {
    let v = match json::parse(data) {
        Ok(v) => v,
        Err(e) => {
            return Some(Pending::Ready(reply::bad_frame(&format!(
                "publish frame is not JSON: {e}"
            ))))
        }
    };
    let (rows, seq): (Vec<&Value>, Option<u64>) = match shape(&v, eo.is_some()) {
        Ok(x) => x,
        Err(detail) => return Some(Pending::Ready(reply::bad_frame(&detail))),
    };
    let mut buf = Vec::with_capacity(data.len() + 16);
    let mut ends = Vec::with_capacity(rows.len());
    for row in rows {
        if let Err(e) = stream.codec.encode_row(row, &mut buf) {
            return Some(Pending::Ready(reply::rejected(&e.to_string())));
        }
        ends.push(buf.len() as u32);
    }
    let n = ends.len();
    while stream.inbound.load(Ordering::Acquire) >= stream.cfg.max_inbound {
        rt::sleep(Duration::from_micros(500)).await;
    }
    // the control thread fences a stream it stops or retires: no frame is handed over after it
    // (the writer checks again); this frame is neither committed nor answered, and the
    // connection closes with the stream's close (1001 or 4410)
    if stream.publisher_end().is_some() {
        return None;
    }
    stream.inbound.fetch_add(n, Ordering::AcqRel);
    let (tx, rx) = flume::bounded(1);
    let msg = WriterMsg::Append(Append {
        stream: stream.index,
        generation: stream.generation,
        rows: buf,
        ends,
        publisher: eo.zip(seq).map(|(e, s)| (e.id.clone(), s)),
        reply: tx,
    });
    let writer = &ctx.shared.writers[stream.writer];
    // an exactly-once frame goes to the writer only while this connection holds the id, checked
    // and sent atomically with respect to a takeover (whose Mark then queues behind it)
    let sent = match eo {
        Some(e) => e.claim.hand_over(|| writer.send(msg)),
        None => Some(writer.send(msg)),
    };
    match sent {
        Some(Ok(())) => Some(Pending::Owed(rx)),
        Some(Err(_)) => {
            stream.inbound.fetch_sub(n, Ordering::AcqRel);
            Some(Pending::Ready(reply::commit_failed(
                "the stream's writer has stopped",
            )))
        }
        None => {
            stream.inbound.fetch_sub(n, Ordering::AcqRel);
            None
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    if v.is_null() {
        "null"
    } else if v.is_boolean() {
        "bool"
    } else if v.is_i64() || v.is_u64() {
        "int"
    } else if v.is_number() {
        "float"
    } else if v.is_str() {
        "str"
    } else if v.is_array() {
        "list"
    } else {
        "dict"
    }
}

/// The rows a publish frame holds, and its seq on exactly-once connections (PROTOCOL.md §7).
fn shape(v: &Value, exactly_once: bool) -> Result<(Vec<&Value>, Option<u64>), String> {
    fn rows_of(v: &Value) -> Result<Vec<&Value>, String> {
        if v.is_object() {
            return Ok(vec![v]);
        }
        let Some(list) = v.as_array() else {
            return Err(format!(
                "publish frame is a {}, not a row or a list",
                type_name(v)
            ));
        };
        if list.is_empty() {
            return Err("publish frame is an empty list; send at least one row".into());
        }
        let mut rows = Vec::with_capacity(list.len());
        for x in list.iter() {
            if !x.is_object() {
                return Err(format!("publish frame holds a {}, not a row", type_name(x)));
            }
            rows.push(x);
        }
        Ok(rows)
    }
    if !exactly_once {
        return rows_of(v).map(|r| (r, None));
    }
    const SHAPE: &str = "an exactly-once publish frame is [seq, row] or [seq, [rows]]";
    let Some(pair) = v.as_array().filter(|a| a.len() == 2) else {
        return Err(SHAPE.into());
    };
    let seq_v = &pair[0];
    if seq_v.is_boolean() {
        return Err(format!("{SHAPE}; seq is a bool, not an int"));
    }
    let Some(seq) = seq_v.as_u64() else {
        return Err(format!("{SHAPE}; seq must be an integer >= 1"));
    };
    if seq == 0 {
        return Err("seq=0; exactly-once seqs start at 1".into());
    }
    let rows = rows_of(&pair[1]).map_err(|e| format!("{SHAPE}: {e}"))?;
    Ok((rows, Some(seq)))
}

/// Appends the writer's answer to `out` as one text frame (the ack path: no intermediate buffer).
fn push_reply(out: &mut Vec<u8>, r: &AppendReply) {
    match r {
        AppendReply::Ok { offsets, dup } => Reply::Ok {
            offsets: Offsets::List(offsets),
            dup: *dup as u64,
        }
        .encode_frame(out),
        AppendReply::Gap { expected, got } => Reply::Gap {
            expected: *expected,
            got: *got,
        }
        .encode_frame(out),
        AppendReply::CommitFailed(detail) => Reply::CommitFailed { detail }.encode_frame(out),
    }
}

/// Reply payloads built from text.
mod reply {
    use corecast_net::protocol::reply::Reply;
    use corecast_net::protocol::ServerMessage;

    pub fn bad_frame(detail: &str) -> Vec<u8> {
        Reply::BadFrame { detail }.to_bytes()
    }

    pub fn rejected(detail: &str) -> Vec<u8> {
        Reply::Rejected { detail }.to_bytes()
    }

    pub fn commit_failed(detail: &str) -> Vec<u8> {
        Reply::CommitFailed { detail }.to_bytes()
    }
}

async fn reply_loop(
    ctx: &ShardCtx,
    stream: &Stream,
    mut wr: WriteHalf,
    state: &PubState,
    eo: Option<&ExactlyOnce>,
) {
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // keepalive: a ping when the peer has been silent, the close when it stayed silent
        match state.keepalive.check(Instant::now()) {
            Due::TimedOut => {
                *state.close.borrow_mut() = Some((1011, keepalive::TIMEOUT_REASON.into()));
                break;
            }
            Due::Ping(_) => encode_ping(&[], None, &mut out),
            Due::Wait(_) => {}
        }
        // the pong owed first, then every reply that is ready, front to back
        state.pong.take_into(&mut out);
        loop {
            let front = state.queue.borrow_mut().pop_front();
            let Some(p) = front else { break };
            match p {
                Pending::Ready(payload) => {
                    push_text(&mut out, &payload);
                    state.owed.set(state.owed.get() - 1);
                }
                Pending::Owed(rx) => match rx.try_recv() {
                    Ok(r) => {
                        push_reply(&mut out, &r);
                        state.owed.set(state.owed.get() - 1);
                    }
                    Err(flume::TryRecvError::Empty) => {
                        if !out.is_empty() {
                            state.queue.borrow_mut().push_front(Pending::Owed(rx));
                            break;
                        }
                        let r = rx.recv_async().await.unwrap_or_else(|_| {
                            AppendReply::CommitFailed("the stream's writer has stopped".into())
                        });
                        push_reply(&mut out, &r);
                        state.owed.set(state.owed.get() - 1);
                    }
                    Err(flume::TryRecvError::Disconnected) => {
                        Reply::CommitFailed {
                            detail: "the stream's writer has stopped",
                        }
                        .encode_frame(&mut out);
                        state.owed.set(state.owed.get() - 1);
                    }
                },
            }
        }
        if !out.is_empty() {
            state.reader.raise();
            // a peer that takes nothing for the write timeout is given up on, as a
            // subscriber is: its replies cannot be delivered
            let write = wr.write_all(std::mem::take(&mut out));
            let Some((res, back)) = rt::timeout(write_timeout(), write).await else {
                state.gone.set(true);
                state.end_reading();
                return;
            };
            out = back;
            out.clear();
            if res.is_err() {
                state.gone.set(true);
                state.end_reading();
                return;
            }
            continue;
        }
        let drained = state.queue.borrow().is_empty() && !state.reader_busy.get();
        if drained
            && (state.reader_done.get()
                || ctx.shutting_down()
                || superseded(eo)
                || state.must_end()
                || stream.publisher_end().is_some())
        {
            break;
        }
        // wake at least every 100 ms to notice a takeover by another shard, or the control
        // thread stopping or retiring the stream
        rt::timeout(Duration::from_millis(100), state.replier.wait()).await;
    }
    state.end_reading();
    let (code, reason) = if superseded(eo) {
        (CloseCode(4409).0, r#"{"error":"superseded"}"#.to_string())
    } else if let Some(end) = state.guard.as_ref().and_then(Guard::ending) {
        let (code, reason) = end.close();
        (code, reason.to_string())
    } else if let Some(end) = stream.publisher_end() {
        end
    } else if let Some(c) = state.close.borrow_mut().take() {
        c
    } else if ctx.shutting_down() {
        (1001, "server shutting down".to_string())
    } else {
        return;
    };
    let mut f = Vec::with_capacity(reason.len() + 4);
    encode_close(Some(CloseCode(code)), &reason, None, &mut f);
    let _ = wr.write_all(f).await;
    let _ = wr.shutdown().await;
}

/// Appends `payload` to `out` as one server text frame.
pub fn push_text(out: &mut Vec<u8>, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(payload);
    frame_in_place(out, start, OpCode::Text);
}
