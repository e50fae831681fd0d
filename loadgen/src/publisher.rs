//! One publisher: a writer task that keeps `window` frames of `batch` rows in flight (paced to
//! its share of `--rate`, or as fast as the window allows) and a reader task that matches the
//! replies to the frames in order.
//!
//! Every row carries its send time in `event_ts` (µs since the epoch). At a fixed rate that is the
//! frame's *scheduled* time, not the moment it left: a frame held back by a full window still
//! counts its wait, which corrects for coordinated omission.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_net::rt::{self, ReadHalf, WriteHalf};
use corecast_net::ws::frame::OpCode;
use hdrhistogram::Histogram;

use crate::notify::Notify;
use crate::shared::Shared;
use crate::wsclient::{client_frame, close_frame, leading_u64, parse_frame, Frame, Keys};

/// What a publisher is asked to do.
#[derive(Clone)]
pub struct PubPlan {
    pub id: usize,
    pub window: usize,
    pub batch: usize,
    /// Rows per second for this publisher; None: as fast as the window allows.
    pub rate: Option<f64>,
    /// Rows to send at most (None: until the duration ends).
    pub rows: Option<u64>,
    pub duration: Option<Duration>,
    /// How long to wait for owed replies once sending stops.
    pub drain: Duration,
    /// `--max-lag`: hold back while the slowest subscriber is more than this many rows behind
    /// the rows sent.
    pub max_lag: Option<u64>,
}

/// What a publisher did.
#[derive(Default)]
pub struct PubResult {
    pub frames_sent: u64,
    pub rows_sent: u64,
    pub frames_acked: u64,
    pub rows_acked: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub first_offset: Option<u64>,
    pub last_offset: Option<u64>,
    /// Acked offsets that were not contiguous within one reply or went backwards.
    pub offset_faults: u64,
    pub ack_latency: Option<Histogram<u64>>,
    /// When the last reply arrived.
    pub last_ack: Option<Instant>,
    pub owed_at_end: u64,
}

struct State {
    in_flight: Cell<usize>,
    sent_at: RefCell<VecDeque<Instant>>,
    writer_done: Cell<bool>,
    wake_writer: Notify,
    /// The payload of the latest ping from the server not answered yet (its keepalive).
    pong: RefCell<Option<Vec<u8>>>,
    /// Raised with `pong`: wakes a writer pacing its rate.
    wake_pong: Notify,
    result: RefCell<PubResult>,
}

/// Runs one publisher on an opened connection until its rows or time are spent and every reply
/// came back (or the drain time ran out).
pub async fn run(
    plan: PubPlan,
    shared: Arc<Shared>,
    rd: ReadHalf,
    wr: WriteHalf,
    leftover: Vec<u8>,
    keys: Keys,
) -> PubResult {
    let st = Rc::new(State {
        in_flight: Cell::new(0),
        sent_at: RefCell::new(VecDeque::with_capacity(plan.window)),
        writer_done: Cell::new(false),
        wake_writer: Notify::default(),
        pong: RefCell::new(None),
        wake_pong: Notify::default(),
        result: RefCell::new(PubResult {
            ack_latency: Some(Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()),
            ..PubResult::default()
        }),
    });
    let reader_done = Notify::default();
    {
        let st = st.clone();
        let shared = shared.clone();
        let reader_done = reader_done.clone();
        rt::spawn(async move {
            read_replies(st, shared, rd, leftover).await;
            reader_done.notify();
        });
    }
    let mut wr = write_frames(&plan, &st, &shared, wr, keys).await;
    st.writer_done.set(true);
    // every reply owed must come back within the drain time
    let owed = rt::timeout(plan.drain, async {
        while st.in_flight.get() > 0 && !shared.abort.load(Relaxed) {
            st.wake_writer.wait().await;
        }
    })
    .await;
    if owed.is_none() {
        fail(
            &st,
            &shared,
            format!(
                "{} replies still owed after {:?}",
                st.in_flight.get(),
                plan.drain
            ),
        );
    }
    // a close ends the reader: the server answers it (nothing is owed any more)
    if let Some(w) = wr.as_mut() {
        let mut k = Keys::new(plan.id as u64 + 77);
        let _ = w.write_all(close_frame(1000, &mut k)).await;
    }
    let _ = rt::timeout(Duration::from_secs(2), reader_done.wait()).await;
    let mut r = std::mem::take(&mut *st.result.borrow_mut());
    r.owed_at_end = st.in_flight.get() as u64;
    shared.pubs_active.fetch_sub(1, AcqRel);
    r
}

fn row(out: &mut Vec<u8>, event_ts: i64, trade_id: u64) {
    let mut a = itoa_buf(event_ts as u64);
    out.extend_from_slice(b"{\"event_ts\":");
    out.extend_from_slice(a.as_bytes());
    out.extend_from_slice(b",\"price\":85566.5,\"amount\":0.015,\"side\":");
    out.push(if trade_id & 1 == 0 { b'0' } else { b'1' });
    out.extend_from_slice(b",\"symbol\":\"BTCUSD\",\"trade_id\":");
    a = itoa_buf(trade_id);
    out.extend_from_slice(a.as_bytes());
    out.push(b'}');
}

struct Digits {
    b: [u8; 20],
    n: usize,
}
impl Digits {
    fn as_bytes(&self) -> &[u8] {
        &self.b[20 - self.n..]
    }
}
fn itoa_buf(mut v: u64) -> Digits {
    let mut d = Digits { b: [0; 20], n: 0 };
    loop {
        d.n += 1;
        d.b[20 - d.n] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return d;
        }
    }
}

/// Writes `out` (handing the buffer back); on a failed write records the error and stops the
/// run. Returns whether the write went through.
async fn write_or_abort(
    plan: &PubPlan,
    st: &State,
    shared: &Shared,
    wr: &mut WriteHalf,
    out: &mut Vec<u8>,
) -> bool {
    let (res, back) = wr.write_all(std::mem::take(out)).await;
    *out = back;
    if let Err(e) = res {
        let mut r = st.result.borrow_mut();
        r.errors += 1;
        r.first_error
            .get_or_insert(format!("publisher {} write: {e}", plan.id));
        shared.abort.store(true, Relaxed);
        return false;
    }
    true
}

async fn write_frames(
    plan: &PubPlan,
    st: &Rc<State>,
    shared: &Shared,
    mut wr: WriteHalf,
    mut keys: Keys,
) -> Option<WriteHalf> {
    let epoch = shared.started().expect("publishers run after go");
    let t0 = epoch.at;
    let end = plan.duration.map(|d| t0 + d);
    let frame_interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(plan.batch as f64 / r));
    let total_frames = plan.rows.map(|r| r.div_ceil(plan.batch as u64));
    let mut sent_frames: u64 = 0;
    let mut sent_rows: u64 = 0;
    let mut payload = Vec::with_capacity(plan.batch * 128 + 2);
    let mut out = Vec::with_capacity(256 * 1024);
    let id_base = (plan.id as u64) << 40;
    loop {
        if shared.stop_sending.load(Relaxed) || shared.abort.load(Relaxed) {
            break;
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        if total_frames.is_some_and(|t| sent_frames >= t) {
            break;
        }
        // the server's keepalive ping first: a publisher paced slower than its interval must
        // still answer
        let pong = st.pong.borrow_mut().take();
        if let Some(p) = pong {
            out.clear();
            client_frame(OpCode::Pong, &p, &mut keys, &mut out);
            if !write_or_abort(plan, st, shared, &mut wr, &mut out).await {
                return None;
            }
        }
        let room = plan.window - st.in_flight.get();
        if room == 0 {
            st.wake_writer.wait().await;
            continue;
        }
        let mut n = room as u64;
        if let Some(max_lag) = plan.max_lag {
            let slowest = shared.slowest_subscriber();
            let sent_end =
                shared.final_end.load(Acquire) + (st.in_flight.get() * plan.batch) as u64;
            if slowest != u64::MAX {
                // frames that keep the slowest subscriber within max_lag rows (at least one)
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
                // (a ping wakes it early)
                rt::timeout(wait.max(Duration::from_micros(100)), st.wake_pong.wait()).await;
                continue;
            }
            n = n.min(owed);
        }
        n = n.min(512);
        out.clear();
        let now_us = epoch.us_at(now);
        for i in 0..n {
            let frame_no = sent_frames + i;
            let ts = match frame_interval {
                Some(iv) => epoch.us + (iv.as_nanos() as u64 * frame_no / 1000) as i64,
                None => now_us,
            };
            let mut rows_here = plan.batch as u64;
            if let Some(r) = plan.rows {
                rows_here = rows_here.min(r - (sent_rows));
            }
            payload.clear();
            if plan.batch == 1 {
                row(&mut payload, ts, id_base + sent_rows);
            } else {
                payload.push(b'[');
                for j in 0..rows_here {
                    if j > 0 {
                        payload.push(b',');
                    }
                    row(&mut payload, ts, id_base + sent_rows + j);
                }
                payload.push(b']');
            }
            sent_rows += rows_here;
            client_frame(OpCode::Text, &payload, &mut keys, &mut out);
        }
        sent_frames += n;
        st.in_flight.set(st.in_flight.get() + n as usize);
        {
            let mut q = st.sent_at.borrow_mut();
            for _ in 0..n {
                q.push_back(now);
            }
        }
        if !write_or_abort(plan, st, shared, &mut wr, &mut out).await {
            return None;
        }
        let mut r = st.result.borrow_mut();
        r.frames_sent = sent_frames;
        r.rows_sent = sent_rows;
    }
    Some(wr)
}

async fn read_replies(st: Rc<State>, shared: Arc<Shared>, mut rd: ReadHalf, mut buf: Vec<u8>) {
    let mut pos = 0usize;
    loop {
        // parse what is buffered
        loop {
            let parsed = match parse_frame(&buf, pos) {
                Ok(p) => p,
                Err(e) => {
                    fail(&st, &shared, e);
                    return;
                }
            };
            let Some((frame, next)) = parsed else { break };
            pos = next;
            match frame {
                Frame::Data(r) => {
                    let now = Instant::now();
                    on_reply(&st, &shared, &buf[r], now);
                }
                Frame::Close(code, reason) => {
                    if st.in_flight.get() > 0 {
                        fail(
                            &st,
                            &shared,
                            format!("publisher closed by server: {code} {reason}"),
                        );
                    }
                    return;
                }
                Frame::Ping(p) => {
                    *st.pong.borrow_mut() = Some(p);
                    st.wake_writer.notify();
                    st.wake_pong.notify();
                }
                Frame::Skip => {}
            }
        }
        if pos > 0 {
            buf.drain(..pos);
            pos = 0;
        }
        if st.writer_done.get() && st.in_flight.get() == 0 {
            return;
        }
        let res = rd.read_into(buf, 64 * 1024).await;
        let (res, b) = res;
        buf = b;
        match res {
            Ok(0) => {
                if st.in_flight.get() > 0 {
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

fn fail(st: &State, shared: &Shared, e: String) {
    let mut r = st.result.borrow_mut();
    r.errors += 1;
    r.first_error.get_or_insert(e);
    shared.abort.store(true, Relaxed);
    st.wake_writer.notify();
}

fn on_reply(st: &State, shared: &Shared, p: &[u8], now: Instant) {
    let sent = st.sent_at.borrow_mut().pop_front();
    st.in_flight.set(st.in_flight.get().saturating_sub(1));
    st.wake_writer.notify();
    let mut r = st.result.borrow_mut();
    r.frames_acked += 1;
    r.last_ack = Some(now);
    if let (Some(s), Some(h)) = (sent, r.ack_latency.as_mut()) {
        h.saturating_record(now.duration_since(s).as_micros() as u64);
    }
    if !p.starts_with(b"{\"ok\":[") {
        let text = String::from_utf8_lossy(&p[..p.len().min(200)]).into_owned();
        r.errors += 1;
        r.first_error
            .get_or_insert(format!("publish refused: {text}"));
        shared.abort.store(true, Relaxed);
        return;
    }
    // {"ok":[a,a+1,...,b]} — contiguous offsets, in order
    let mut i = 7;
    let mut count = 0u64;
    let mut prev: Option<u64> = r.last_offset;
    let mut faults = 0;
    while i < p.len() && p[i] != b']' {
        let (v, n) = leading_u64(&p[i..]);
        if n == 0 {
            // null (a stream with no log): count it, no offset
            if p[i..].starts_with(b"null") {
                i += 4;
                count += 1;
            } else {
                i += 1;
                continue;
            }
        } else {
            i += n;
            count += 1;
            if prev.is_some_and(|pv| v <= pv) {
                faults += 1;
            }
            if r.first_offset.is_none() {
                r.first_offset = Some(v);
            }
            prev = Some(v);
        }
        if i < p.len() && p[i] == b',' {
            i += 1;
        }
    }
    r.offset_faults += faults;
    r.rows_acked += count;
    r.last_offset = prev;
    if let Some(pv) = prev {
        shared.final_end.fetch_max(pv + 1, AcqRel);
    }
    shared.rows_acked.fetch_add(count, Relaxed);
}
