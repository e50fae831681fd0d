//! Server-Sent Events: `GET /NAME` with `Accept: text/event-stream`, or `GET /NAME/events`.
//!
//! An SSE reader is the same cursor as a WebSocket subscriber ([`super::subscriber`]): it
//! attaches to the shard's hub, reads below the ring through the reader pool and slices shared
//! batches above it, one vectored write per wake-up. The bytes differ: each row is the event
//! `id: <offset>` / `data: [offset,ts,row]` / blank line, rendered once per committed batch
//! ([`FrameBatch::sse`](crate::fanout::batch::FrameBatch::sse)) by the first SSE reader that reaches it and shared by every other one;
//! streams nobody reads over SSE never render it.
//!
//! Where a stream starts: after a valid `Last-Event-ID` (header, or the `lastEventId` query
//! parameter EventSource polyfills send), else at `?offset=N` (0: the earliest held), else now.
//! A `Last-Event-ID` that is not a plain decimal offset (≤ 19 digits, within int64) starts from
//! now with a warning logged at most once a minute — never an error status, since EventSource
//! gives up for good on any non-200. An offset below what the log holds starts at the earliest
//! held row, one beyond the end starts from now, and a resume is limited to `max_replay` rows;
//! when rows asked for are skipped so, an `event: gap` naming them (`missing` first/last, and
//! `reason` `too_old` or `evicted`) comes before the first row, so the reader can fetch them
//! through the pull API instead of losing them unnoticed.
//!
//! The stream sends `retry:` first, comment pings on idle streams (jittered between
//! `sse.ping_min_ms` and `sse.ping_max_ms`), and ends with `event: end` + `data: {"reason":…}`:
//! `max_age` (after `sse.max_age_s`), `shutdown`, `behind` (fell more than `max_backlog` rows
//! behind; counted in dropped_slow), `stream_stopped` (stopped over `/control/v1`), `revoked`
//! (reserved). Open streams are capped per process
//! (`sse.max_streams`) and per client address (`sse.max_per_client`): above either, 503 with
//! `Retry-After: 30`.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use corecast_net::http::query::Query;
use corecast_net::http::request::Request;
use corecast_net::http::response::{json_error_body, ResponseHead};
use corecast_net::rt::{self, FrameVec, ReadHalf, WriteHalf};
use corecast_net::sse;

use super::deliver::{gather, write, Rendering};
use super::route::{parse_py_int, unknown_params_listed};
use super::tick::Tick;
use super::ws_io::LINGER;
use crate::config::HttpApiConfig;
use crate::fanout::signal::Signal;
use crate::filter::Filter;
use crate::registry::{now_us, Stream};
use crate::replay::ReplayJob;
use crate::shard::ShardCtx;

/// The SSE settings in force (from the config's `[sse]` table).
#[derive(Debug, Clone)]
pub struct SseSettings {
    /// Open SSE streams per process.
    pub max_streams: usize,
    /// Open SSE streams per client address.
    pub max_per_client: usize,
    /// Idle gap before a ping, lower bound.
    pub ping_min: Duration,
    /// Idle gap before a ping, upper bound.
    pub ping_max: Duration,
    /// Longest life of one stream.
    pub max_age: Duration,
    /// The `retry:` value, ms.
    pub retry_ms: u64,
}

impl From<&HttpApiConfig> for SseSettings {
    fn from(c: &HttpApiConfig) -> Self {
        SseSettings {
            max_streams: c.sse_max_streams,
            max_per_client: c.sse_max_per_client,
            ping_min: Duration::from_millis(c.sse_ping_min_ms),
            ping_max: Duration::from_millis(c.sse_ping_max_ms.max(c.sse_ping_min_ms)),
            max_age: Duration::from_secs(c.sse_max_age_s),
            retry_ms: c.sse_retry_ms,
        }
    }
}

static SETTINGS: RwLock<Option<Arc<SseSettings>>> = RwLock::new(None);
static OPEN: AtomicUsize = AtomicUsize::new(0);
static PER_CLIENT: Mutex<Option<HashMap<ClientKey, usize>>> = Mutex::new(None);
static LAST_WARN_S: AtomicI64 = AtomicI64::new(i64::MIN);
static JITTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

/// Installs the settings (at server start).
pub fn install(cfg: &HttpApiConfig) {
    *SETTINGS.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(SseSettings::from(cfg)));
}

pub(crate) fn settings() -> Arc<SseSettings> {
    SETTINGS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(|| Arc::new(SseSettings::from(&HttpApiConfig::default())))
}

/// Open SSE streams, all streams, all shards.
pub fn open_streams() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// Whom the per-client cap counts: the principal once auth is on (many users may share one
/// address behind a proxy, and one user may come from many), else the client's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    /// An authenticated principal.
    Principal(String),
    /// An address (open broker).
    Addr(IpAddr),
}

impl ClientKey {
    /// The key of a request from `peer` made as `who`; `None`: not counted per client.
    pub(crate) fn of(peer: Option<IpAddr>, who: &crate::auth::Identity) -> Option<ClientKey> {
        match who {
            // everyone without credentials is `anonymous`: counted by address, or one client
            // could take every anonymous place
            crate::auth::Identity::As(p) if p.method != crate::auth::Method::Anonymous => {
                Some(ClientKey::Principal(p.name.clone()))
            }
            _ => peer.map(ClientKey::Addr),
        }
    }
}

/// One open stream's place under the caps; released on drop.
pub(crate) struct Slot {
    client: Option<ClientKey>,
}

/// A place under the per-process and per-client caps (SSE streams and pull long polls share
/// them); `None` when either is full.
pub(crate) fn acquire(client: Option<ClientKey>, s: &SseSettings) -> Option<Slot> {
    if OPEN.fetch_add(1, Ordering::AcqRel) >= s.max_streams {
        OPEN.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    if let Some(key) = &client {
        let mut g = PER_CLIENT.lock().unwrap_or_else(|p| p.into_inner());
        let n = g
            .get_or_insert_with(HashMap::new)
            .entry(key.clone())
            .or_insert(0);
        if *n >= s.max_per_client {
            drop(g);
            OPEN.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        *n += 1;
    }
    Some(Slot { client })
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(key) = &self.client {
            let mut g = PER_CLIENT.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(m) = g.as_mut() {
                if let Some(n) = m.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(key);
                    }
                }
            }
        }
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The stream an SSE request names, if `req` is one: `GET /NAME/events` (any NAME; unknown ones
/// get a 404), or `GET /NAME` with `Accept: text/event-stream` for a declared stream.
pub fn wants<'a>(ctx: &ShardCtx, req: &Request, name: &'a str) -> Option<&'a str> {
    if req.method != "GET" {
        return None;
    }
    if let Some(n) = name.strip_suffix("/events") {
        return (!n.is_empty() && !n.contains('/')).then_some(n);
    }
    let accepts = req
        .headers_all("accept")
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"));
    (accepts && ctx.shared.registry.load().get(name).is_some()).then_some(name)
}

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// After this offset (Last-Event-ID).
    After(u64),
    /// At this offset (`?offset=`; 0 = the earliest held).
    At(u64),
    /// From the frontier.
    Now,
}

fn warn_malformed(value: &str, peer: Option<IpAddr>) {
    let now_s = now_us() / 1_000_000;
    let last = LAST_WARN_S.load(Ordering::Relaxed);
    if now_s.saturating_sub(last) >= 60
        && LAST_WARN_S
            .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let shown: String = value.chars().take(40).collect();
        tracing::warn!(
            last_event_id = ?shown,
            peer = ?peer,
            "malformed Last-Event-ID (not a decimal offset): streaming from now (logged at most once a minute)"
        );
    }
}

fn error(status: u16, code: &str, message: &str, retry_after: bool) -> Vec<u8> {
    let mut h = ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache")
        .header("access-control-allow-origin", "*");
    if retry_after {
        h = h.header("retry-after", "30");
    }
    h.finish(&json_error_body(code, message, retry_after))
}

/// Rows a reader asked for that its stream will not send: the `event: gap` that comes before
/// the first row (docs/OPERATIONS.md, Server-Sent Events), so a resume is never silently short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Skipped {
    /// First and last offset not sent.
    first: u64,
    last: u64,
    /// `Some(max_replay)` when the resume was further back than `max_replay` rows (`too_old`);
    /// `None` when the rows are no longer held (`evicted`).
    max_replay: Option<u64>,
}

impl Skipped {
    /// `event: gap` / `data: {"reason":"too_old"|"evicted","missing":{"first":A,"last":B}[,"max_replay":M]}`.
    fn push_event(&self, out: &mut Vec<u8>) {
        let reason = if self.max_replay.is_some() {
            "too_old"
        } else {
            "evicted"
        };
        let mut data = format!(
            r#"{{"reason":"{reason}","missing":{{"first":{},"last":{}}}"#,
            self.first, self.last
        );
        if let Some(m) = self.max_replay {
            data.push_str(&format!(r#","max_replay":{m}"#));
        }
        data.push('}');
        sse::push_named_event("gap", data.as_bytes(), out);
    }
}

/// The first offset for `from` on a durable stream whose frontier is `head`, and the rows asked
/// for that will not be sent (below what the log holds, or more than `max_replay` back).
fn start_offset(st: &Stream, from: Start, head: u64) -> (u64, Option<Skipped>) {
    if !st.durable() {
        return (head, None);
    }
    let earliest = st.earliest.load(Ordering::Acquire).min(head).max(1);
    let first = match from {
        Start::After(n) => n.saturating_add(1),
        Start::At(0) => earliest,
        Start::At(n) => n,
        Start::Now => head,
    };
    if first > head {
        return (head, None); // ahead of the log (a stale id): from now
    }
    let wanted = first;
    let held = first.max(earliest);
    let mut first = held;
    let mut max_replay = None;
    if let Some(max) = st.cfg.max_replay {
        if head.saturating_sub(max) > first && !st.tiers.beyond_published(first) {
            first = head.saturating_sub(max);
            max_replay = Some(max);
        }
    }
    let skipped = (first > wanted).then_some(Skipped {
        first: wanted,
        last: first - 1,
        max_replay,
    });
    (first, skipped)
}

#[derive(Default)]
struct State {
    /// The client closed its side or the socket failed (set by the watch task).
    gone: Cell<bool>,
    /// Raised when the stream is over (its goodbye written, or a write failed or timed out):
    /// the watch task stops watching, lingers for the client's close, and lets go of the read
    /// half — the last hold on the socket's descriptor.
    ended: Signal,
}

/// Serves one SSE stream until the client goes, the stream ages out, falls behind, or the server
/// shuts down.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    req: &Request,
    name: &str,
    peer: Option<IpAddr>,
    rd: ReadHalf,
    mut wr: WriteHalf,
    who: &crate::auth::Identity,
    guard: Option<crate::auth::live::Guard>,
) {
    let set = settings();
    // CORS per allowed_origins: every answer below is built with `*`, then the policy applied
    let cors = ctx
        .shared
        .auth
        .origins()
        .cors_value(req)
        .map(str::to_string);
    let error = |status: u16, code: &str, message: &str, retry: bool| {
        crate::auth::origin::apply_cors(error(status, code, message, retry), cors.as_deref())
    };
    let Some(st) = ctx.shared.registry.load().get(name).cloned() else {
        let body = error(404, "not_found", &format!("no such stream: {name}"), false);
        let _ = wr.write_all(body).await;
        let _ = wr.shutdown().await;
        return;
    };
    let q = Query::parse(req.query.as_bytes());
    let refusal = unknown_params_listed(&q, &["offset", "where", "lastEventId", "state"])
        .or_else(|| super::route::state_value_refusal(&q))
        .or_else(|| {
            (q.contains("offset") && !st.durable())
                .then(|| format!("offset= needs a log; stream {name} is live only (not_durable)"))
        })
        .or_else(|| {
            (q.contains("state") && st.keyed.is_none())
                .then(|| format!("state needs a keyed stream; {name} declares no key"))
        })
        .or_else(|| {
            (q.contains("state") && q.contains("offset")).then(|| {
                "state and offset are two starts (the keyed state, or a log offset); pass one"
                    .to_string()
            })
        });
    if let Some(detail) = refusal {
        let _ = wr
            .write_all(error(400, "bad_request", &detail, false))
            .await;
        let _ = wr.shutdown().await;
        return;
    }
    let filter = match q.get("where") {
        None => None,
        Some(w) => match super::conn::parse_filter(&st, w) {
            Ok(f) => Some(f),
            Err(detail) => {
                let _ = wr
                    .write_all(error(400, "bad_request", &detail, false))
                    .await;
                let _ = wr.shutdown().await;
                return;
            }
        },
    };
    let offset = match q.get("offset") {
        None => None,
        Some(raw) => match parse_py_int(raw) {
            Some(n) if (0..=i64::MAX as i128).contains(&n) => Some(n as u64),
            _ => {
                let msg = format!(
                    "offset={raw} is not an offset (an integer in 0..=2^63-1; 0 means the earliest held)"
                );
                let _ = wr.write_all(error(400, "bad_request", &msg, false)).await;
                let _ = wr.shutdown().await;
                return;
            }
        },
    };
    let last_id = req
        .header("last-event-id")
        .or_else(|| q.get("lastEventId"))
        .filter(|v| !v.is_empty());
    let from = match last_id {
        Some(v) => match sse::parse_last_event_id(v) {
            Some(n) => Start::After(n),
            None => {
                warn_malformed(v, peer);
                Start::Now
            }
        },
        None => offset.map_or(Start::Now, Start::At),
    };
    if ctx.shutting_down() {
        super::metrics::count_refusal(503);
        let _ = wr
            .write_all(error(503, "shutting_down", "server shutting down", true))
            .await;
        let _ = wr.shutdown().await;
        return;
    }
    let Some(_slot) = acquire(ClientKey::of(peer, who), &set) else {
        super::metrics::count_refusal(503);
        let msg = "too many open SSE streams (per process or per client); retry later";
        let _ = wr
            .write_all(error(503, "too_many_streams", msg, true))
            .await;
        let _ = wr.shutdown().await;
        return;
    };
    // `?state` (unless a reconnect's Last-Event-ID says where the reader is: the snapshot
    // came in offset order, so resuming after the last id it saw completes it): the state at
    // S, then the log from S
    // (a malformed Last-Event-ID is no id, as for any SSE reader: the snapshot is sent)
    let resumed = matches!(from, Start::After(_));
    let snapshot = match (&st.keyed, q.contains("state") && !resumed) {
        (Some(k), true) => match Box::pin(k.snapshot(filter.clone(), Rendering::Sse)).await {
            Ok(s) => Some(s),
            Err(why) => {
                super::metrics::count_refusal(503);
                let _ = wr
                    .write_all(error(503, why.code(), why.message(), why.retryable()))
                    .await;
                let _ = wr.shutdown().await;
                return;
            }
        },
        _ => None,
    };
    // attach and read the frontier in one step on this thread: no gap, no duplicate
    let signal = Rc::new(Signal::default());
    let head = {
        let hub_rc = ctx.hub(st.index);
        let mut hub = hub_rc.borrow_mut();
        hub.attach(&signal);
        hub.head()
    };
    let (next, skipped) = match &snapshot {
        Some(s) => (s.at, None),
        None => start_offset(&st, from, head),
    };
    let replay_end = head.max(next);
    let out = ResponseHead::new(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .header("x-accel-buffering", "no")
        .header("access-control-allow-origin", "*")
        .header("connection", "close")
        .finish_head();
    let mut out = crate::auth::origin::apply_cors(out, cors.as_deref());
    sse::push_retry(set.retry_ms, &mut out);
    if let Some(skipped) = skipped {
        skipped.push_event(&mut out);
    }
    let (res, _) = wr.write_all(out).await;
    if res.is_err() {
        return;
    }
    // the session's one timer: its ping and deadline, and the stall deadline of the write in
    // flight (tick.rs)
    let mut tick = Tick::new();
    if let Some(s) = snapshot {
        let mut hold = s.hold;
        let mut fv = FrameVec::new();
        // after the entities, in their last write: where the copy ends and the log resumes
        let mut marker = Vec::with_capacity(96);
        let first = s.first.map_or("null".to_string(), |v| v.to_string());
        sse::push_named_event(
            "state",
            format!(
                "{{\"at\":{},\"entities\":{},\"first\":{first}}}",
                s.at, s.entities
            )
            .as_bytes(),
            &mut marker,
        );
        let mut chunks = s
            .chunks
            .into_iter()
            .chain(std::iter::once(bytes::Bytes::from(marker)))
            .peekable();
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            fv.push(chunk);
            let room = fv.len() + chunks.peek().map_or(0, |c| c.len());
            if last || room > super::deliver::WRITE_BYTES_MAX {
                let messages = if last { s.entities } else { 0 };
                let bytes = fv.len() as u64;
                if write(
                    &st,
                    &mut wr,
                    &mut fv,
                    messages,
                    Some(&st.stats.sse_dropped_slow),
                    &mut tick,
                )
                .await
                .is_none()
                {
                    return;
                }
                // written: the reader has these bytes, the budget has them back
                hold.release(bytes);
            }
        }
    }
    let state = Rc::new(State::default());
    rt::spawn(watch(rd, state.clone(), Rc::downgrade(&signal)));
    ctx.register(st.index, &signal);
    st.stats.sse_subscribers.fetch_add(1, Ordering::Relaxed);
    let lag = st.stats.lag.register(next);
    let reason = run(
        ctx,
        &st,
        &mut wr,
        &state,
        &signal,
        &set,
        next,
        replay_end,
        filter.as_ref(),
        &lag,
        guard.as_ref(),
        &mut tick,
    )
    .await;
    st.stats.sse_subscribers.fetch_sub(1, Ordering::Relaxed);
    if let Some(reason) = reason {
        let mut bye = Vec::with_capacity(64);
        sse::push_named_event(
            "end",
            format!("{{\"reason\":\"{reason}\"}}").as_bytes(),
            &mut bye,
        );
        let _ = rt::timeout(Duration::from_secs(5), wr.write_all(bye)).await;
    }
    let _ = wr.shutdown().await;
    // the write half goes when this returns; the watch task must let go of the read half too,
    // or a client that stopped reading (and never closes) keeps the descriptor for good
    state.ended.raise();
}

/// Watches the socket for the peer going away, reading (and dropping) whatever it sends, until
/// the stream is over ([`State::ended`]); then gives the client [`LINGER`] to close its side
/// and drops the read half whatever it does, as a WebSocket session does. Holds the signal
/// weakly so an idle peer does not keep the session counted as live at shutdown.
async fn watch(mut rd: ReadHalf, state: Rc<State>, signal: std::rc::Weak<Signal>) {
    let mut buf = Vec::with_capacity(512);
    loop {
        buf.clear();
        match rt::until(rd.read_into(buf, 512), state.ended.wait()).await {
            Some((Ok(n), b)) if n > 0 => buf = b,
            Some(_) => {
                state.gone.set(true);
                if let Some(s) = signal.upgrade() {
                    s.raise();
                }
                return;
            }
            // the stream is over: the read in flight was dropped with its buffer
            None => break,
        }
    }
    let drain = async {
        loop {
            match rd.read_into(Vec::with_capacity(512), 512).await {
                (Ok(n), _) if n > 0 => {}
                _ => return,
            }
        }
    };
    let _ = rt::timeout(LINGER, drain).await;
}

fn ping_gap(set: &SseSettings) -> Duration {
    let spread = set.ping_max.saturating_sub(set.ping_min).as_millis() as u64;
    // xorshift over a shared seed: cheap jitter, no RNG dependency
    let mut x = JITTER.load(Ordering::Relaxed) ^ (now_us() as u64);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    JITTER.store(x, Ordering::Relaxed);
    set.ping_min + Duration::from_millis(if spread == 0 { 0 } else { x % (spread + 1) })
}

/// The stream's loop; `Some(reason)` when it ends with a goodbye, `None` when the client went or
/// a write failed.
#[allow(clippy::too_many_arguments)]
async fn run(
    ctx: &ShardCtx,
    st: &Stream,
    wr: &mut WriteHalf,
    state: &State,
    signal: &Signal,
    set: &SseSettings,
    mut next: u64,
    replay_end: u64,
    filter: Option<&Filter>,
    lag: &AtomicU64,
    guard: Option<&crate::auth::live::Guard>,
    tick: &mut Tick,
) -> Option<&'static str> {
    let deadline = Instant::now() + set.max_age;
    // the principal's deadline, when sooner, ends the stream with `expired` instead of `max_age`
    let deadline = match guard.and_then(|g| g.deadline) {
        Some(d) if d < deadline => d,
        _ => deadline,
    };
    let mut last_write = Instant::now();
    let mut gap = ping_gap(set);
    let mut fv = FrameVec::new();
    loop {
        if state.gone.get() {
            return None;
        }
        if let Some(end) = guard.and_then(|g| g.ending()) {
            return Some(end.sse_reason());
        }
        // stopped over /control/v1 (a retired stream is still read)
        if st.subscriber_end().is_some() {
            return Some("stream_stopped");
        }
        let now = Instant::now();
        if now >= deadline {
            return Some("max_age");
        }
        let (head, base) = {
            let hub_rc = ctx.hub(st.index);
            let hub = hub_rc.borrow();
            (hub.head(), hub.base())
        };
        if head.saturating_sub(next.max(replay_end)) > st.cfg.max_backlog {
            st.stats.sse_dropped_slow.fetch_add(1, Ordering::Relaxed);
            return Some("behind");
        }
        let mut events = 0u64;
        let owed_from = next;
        if next < head {
            if next < base && st.durable() {
                let (tx, rx) = flume::bounded(1);
                let job = ReplayJob {
                    stream: st.index,
                    from: next,
                    to: base,
                    prune: filter.map(Filter::predicates).unwrap_or_default(),
                    reply: tx,
                };
                if ctx.shared.replay.submit(job).is_err() {
                    return Some("shutdown");
                }
                match rx.recv_async().await {
                    Ok(Ok(r)) => {
                        if let Some((first, last)) = r.missing {
                            // rows dropped by retention while this reader read: name them
                            let mut gap = Vec::new();
                            Skipped {
                                first,
                                last,
                                max_replay: None,
                            }
                            .push_event(&mut gap);
                            fv.push(bytes::Bytes::from(gap));
                            next = next.max(last + 1);
                        }
                        let batch = &r.batch;
                        let mut from = next.max(batch.first);
                        while from < batch.end() {
                            let (n, e) = gather(batch, Rendering::Sse, from, filter, &mut fv);
                            events += e;
                            from = n;
                            if from < batch.end() {
                                write(
                                    st,
                                    wr,
                                    &mut fv,
                                    events,
                                    Some(&st.stats.sse_dropped_slow),
                                    tick,
                                )
                                .await?;
                                events = 0;
                            }
                        }
                        next = r.resume.max(next);
                    }
                    _ => return None,
                }
            } else {
                next = next.max(base);
                let hub_rc = ctx.hub(st.index);
                let hub = hub_rc.borrow();
                for b in hub.batches_from(next) {
                    let (n, e) = gather(b, Rendering::Sse, next, filter, &mut fv);
                    next = n;
                    events += e;
                    if n < b.end() {
                        break;
                    }
                }
            }
        }
        if !fv.is_empty() {
            write(
                st,
                wr,
                &mut fv,
                events,
                Some(&st.stats.sse_dropped_slow),
                tick,
            )
            .await?;
            lag.store(next, Ordering::Relaxed);
            last_write = Instant::now();
            // shutdown: a reader still catching up gets READER_GRACE, then its goodbye
            if ctx.readers_must_close(false) {
                return Some("shutdown");
            }
            continue;
        }
        lag.store(next, Ordering::Relaxed);
        if next < head && next > owed_from {
            // a `where=` filter matched nothing in what was read: read on, nothing to wait for
            continue;
        }
        if ctx.shutting_down()
            && ctx.shared.publishers_open.load(Ordering::SeqCst) == 0
            && next >= head
        {
            return Some("shutdown");
        }
        let now = Instant::now();
        let ping_at = last_write + gap;
        if now >= ping_at {
            let mut p = Vec::with_capacity(8);
            sse::push_comment("ping", &mut p);
            fv.push(bytes::Bytes::from(p));
            write(st, wr, &mut fv, 0, Some(&st.stats.sse_dropped_slow), tick).await?;
            last_write = Instant::now();
            gap = ping_gap(set);
            continue;
        }
        // the tick fires by the ping or the deadline, whichever is first; one that fired for an
        // earlier ping instant (a write moved it on since) is re-armed on the next turn
        tick.by(ping_at.min(deadline));
        fv.trim();
        let _ = tick.until(signal.wait()).await;
        tick.take_fired();
    }
}
