//! The HTTP pull API (JSON), on the same port and from the same log.
//!
//! - `GET /v1/streams` — the catalog; `GET /v1/streams/NAME` — one entry: schema (as the greeting
//!   publishes it), durable, exactly_once, stream_id, end_offset, earliest_offset, max_replay and
//!   the other limits, subscribers by transport, publishers, tiers, and `keyed` (`null`, or a
//!   keyed stream's key, `remove_when`, `max_keys` and state counters).
//! - `GET /v1/streams/NAME/latest?limit=N` — the last N rows (N ≤ 500, default 10), each as
//!   `[offset,ts,row]` (the WebSocket payload).
//! - `GET /v1/streams/NAME/rows?cursor=C&limit=N&wait=S&where=…&from=latest` — at most N rows
//!   (≤ 500, default 100) from the cursor on, with `next_cursor` and `status` (`ok`, or `gap`
//!   with the `missing` offsets when rows below the cursor are gone: the window continues from
//!   the earliest held). Without a cursor: from the earliest row, or from now with
//!   `from=latest`. `wait` (≤ 60 s) long-polls while nothing is new and answers as soon as a row
//!   commits. With `where=`, at most 4,096 rows are examined per request, so a window may hold
//!   fewer than N rows (even none) with a cursor that moved on.
//!
//! Cursors are signed ([`crate::cursor`]) and bound to the stream, its stream_id, the filter and
//! the caller's address. Refusals share one body, `{"error":{"code","message","retryable",…}}`:
//! `cursor_invalid` (400), `cursor_expired` (410), `resource_limit_exceeded` (400: limit > 500,
//! wait > 60), `bad_request` (400), `not_found` (404), `not_durable` (409: a live-only stream
//! has no log to page through; `latest` still answers from memory).
//!
//! The work is done by functions that return data — [`catalog`], [`entry_json`], [`latest`] and
//! [`rows`] (cursor sign and verify, the bounded wait), refusing with a [`Refused`] — which the
//! HTTP handlers here and the MCP tools ([`crate::mcp::tools`]) both call.
//!
//! Reads below the shard's ring go through the reader pool; the ring is sliced in place. Nothing
//! here touches SQLite on the shard thread.
//!
//! A waiting long poll watches its connection ([`rt::ReadHalf::watch_while`]): when the client
//! closes it (or it is reset), the wait ends at once, the poll's place under the caps is freed
//! and the connection is closed with nothing sent ([`Answer::ClientGone`]). Bytes the client
//! sends while it waits are held, not parsed (one request per connection: they are dropped
//! with the connection, as any bytes after the request head are).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use corecast_net::http::query::Query;
use corecast_net::http::request::Request;
use corecast_net::http::response::{json_error_body, ResponseHead};
use corecast_net::rt::{self, ReadHalf};

use crate::cursor::{self, Binding, CursorError};
use crate::fanout::signal::Signal;
use crate::filter::Filter;
use crate::registry::{now_us, Stream};
use crate::replay::ReplayJob;
use crate::shard::ShardCtx;

/// Most rows one window or `latest` returns.
pub const MAX_LIMIT: usize = 500;
/// Longest long poll, seconds.
pub const MAX_WAIT_S: f64 = 60.0;
/// Row bytes after which a `/rows` page ends (the row that reaches it is its last; the next
/// cursor goes on from there), and beyond which `latest` keeps only its newest rows. Rows may be
/// up to a stream's `max_message_bytes` each (1 MiB by default): without it one request for 500
/// of them would build a 500 MiB body. Same figure as one vectored WebSocket write.
pub const PAGE_BYTES_MAX: usize = 4 << 20;
/// Most rows a filtered window examines.
const FILTER_SCAN_ROWS: usize = 4096;
/// Most bytes a waiting long poll reads (and holds) from its client while it watches the
/// connection; past that it stops reading until the wait ends.
const MAX_HELD_BYTES: usize = 64 << 10;

/// What to do with a pull API request's connection.
#[derive(Debug)]
pub enum Answer {
    /// Send this response.
    Respond(Vec<u8>),
    /// The client closed the connection while its long poll waited: send nothing.
    ClientGone,
}

/// The request's connection, watched while a long poll waits.
pub struct Client<'a> {
    /// The client's address (cursors are bound to it; the per-client cap counts by it).
    pub peer: Option<IpAddr>,
    /// Who is asking: the catalog lists only the streams it may read, and cursors are bound
    /// to it as well as to the address.
    pub who: &'a crate::auth::Identity,
    /// Its revocation and deadline: a long poll that is waiting ends with 403 when it ends.
    pub guard: Option<&'a crate::auth::live::Guard>,
    /// The connection's reading half.
    pub rd: &'a mut ReadHalf,
    /// Bytes read past the request head, and any the client sends while its poll waits.
    pub held: &'a mut Vec<u8>,
}

fn json(status: u16, body: &[u8]) -> Vec<u8> {
    ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .header("access-control-allow-origin", "*")
        .finish(body)
}

fn err(status: u16, code: &str, message: &str) -> Vec<u8> {
    json(status, &json_error_body(code, message, status >= 500))
}

/// Why the pull contract refuses a request: the HTTP API answers it with `status` and the
/// shared error body; an MCP tool answers it as a tool error carrying the same body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status.
    pub status: u16,
    /// The error code (`cursor_invalid`, `resource_limit_exceeded`, `not_found`, …).
    pub code: &'static str,
    /// One line: what failed and what to do.
    pub message: String,
    /// A cap is full: answered 503 with `Retry-After: 30`.
    pub retry_after: bool,
    /// The body's `retryable`: whether the same request may succeed later without anything
    /// changed on the caller's side (a 5xx by default; `false` for a condition only the
    /// operator clears, such as an incomplete keyed state).
    pub retryable: bool,
}

impl Refused {
    pub(crate) fn new(status: u16, code: &'static str, message: impl Into<String>) -> Refused {
        Refused {
            status,
            code,
            message: message.into(),
            retry_after: false,
            retryable: status >= 500,
        }
    }

    /// The shared error body, `{"error":{"code","message","retryable",…}}`.
    pub fn body(&self) -> Vec<u8> {
        json_error_body(self.code, &self.message, self.retryable)
    }

    /// The whole HTTP response.
    pub fn response(&self) -> Vec<u8> {
        if !self.retry_after {
            return json(self.status, &self.body());
        }
        ResponseHead::new(self.status)
            .header("content-type", "application/json")
            .header("cache-control", "no-store")
            .header("access-control-allow-origin", "*")
            .header("retry-after", "30")
            .finish(&self.body())
    }
}

fn jstr(s: &str) -> String {
    sonic_rs::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Answers a `/v1/…` request; `None` when the path is not the pull API's.
pub async fn handle(ctx: &Rc<ShardCtx>, req: &Request, client: Client<'_>) -> Option<Answer> {
    let path = req.path.as_str();
    let rest = if path == "/v1/streams" || path == "/v1/streams/" {
        ""
    } else {
        path.strip_prefix("/v1/streams/")?
    };
    if req.method != "GET" && req.method != "HEAD" {
        return Some(Answer::Respond(err(
            405,
            "method_not_allowed",
            "the pull API answers GET (and HEAD) only",
        )));
    }
    let q = Query::parse(req.query.as_bytes());
    let reg = ctx.shared.registry.load();
    let parts: Vec<&str> = rest.split('/').collect();
    let find = |name: &str| match reg.get(name) {
        None => Err(err(404, "not_found", &format!("no such stream: {name}"))),
        // its log is closed while it is stopped; start it over /control/v1 to read it
        Some(st) if st.subscriber_end().is_some() => Err(err(
            409,
            "stream_stopped",
            &format!("stream {name} is stopped; start it over /control/v1 to read it"),
        )),
        Some(st) => Ok(st.clone()),
    };
    let allowed: Option<&[&str]> = match parts.as_slice() {
        [""] | [_] | [_, ""] => Some(&[]),
        [_, "latest"] => Some(&["limit"]),
        [_, "rows"] => Some(&["cursor", "limit", "wait", "where", "from"]),
        [_, "state"] => Some(&["cursor", "limit", "where"]),
        [_, "changes"] => Some(&["token", "limit", "where"]),
        _ => None, // no endpoint: the 404 below says so, whatever the query
    };
    if let Some(detail) = allowed.and_then(|a| super::route::unknown_params_listed(&q, a)) {
        return Some(Answer::Respond(err(400, "bad_request", &detail)));
    }
    let resp = match parts.as_slice() {
        [""] => json(200, catalog(ctx, client.who).as_bytes()),
        [name] | [name, ""] => match find(name) {
            Ok(st) => json(200, entry_json(&st).as_bytes()),
            Err(e) => e,
        },
        [name, "latest"] => match find(name) {
            Ok(st) => match parse_limit(&q, 10) {
                Ok(limit) => respond(latest(ctx, &st, limit).await),
                Err(e) => e.response(),
            },
            Err(e) => e,
        },
        [name, "rows"] => match find(name) {
            Ok(st) => match rows_ask(&q) {
                Ok(ask) => match rows(ctx, &st, ask, client).await {
                    Ok(Polled::Page(body)) => json(200, &body),
                    Ok(Polled::ClientGone) => return Some(Answer::ClientGone),
                    Err(e) => e.response(),
                },
                Err(e) => e.response(),
            },
            Err(e) => e,
        },
        [name, what @ ("state" | "changes")] => match find(name) {
            Ok(st) => {
                let caller = caller_of(client.peer, client.who);
                let r = if *what == "state" {
                    match crate::state::http::window_ask(&q) {
                        Ok(ask) => crate::state::http::window(&st, ask, &caller).await,
                        Err(e) => Err(e),
                    }
                } else {
                    crate::state::http::changes(&st, &q, &caller).await
                };
                respond(r)
            }
            Err(e) => e,
        },
        _ => err(404, "not_found", &format!("no endpoint at {path}")),
    };
    Some(Answer::Respond(resp))
}

/// Whom a cursor is bound to: the client's address, and the principal when there is one (a
/// cursor issued to one principal is refused to another, even from the same address).
pub(crate) fn caller_of(peer: Option<IpAddr>, who: &crate::auth::Identity) -> String {
    let mut caller = peer.map(|p| p.to_string()).unwrap_or_default();
    if let Some(name) = who.name() {
        caller.push('\n');
        caller.push_str(name);
    }
    caller
}

fn respond(r: Result<Vec<u8>, Refused>) -> Vec<u8> {
    match r {
        Ok(body) => json(200, &body),
        Err(e) => e.response(),
    }
}

/// The catalog, `{"streams":[entry,…]}`: the streams `who` may read (`data.read`).
pub fn catalog(ctx: &ShardCtx, who: &crate::auth::Identity) -> String {
    let mut body = String::from("{\"streams\":[");
    let registry = ctx.shared.registry.load();
    let readable = registry
        .streams
        .iter()
        .filter(|st| who.allows(crate::auth::Action::DataRead, &st.cfg.name));
    for (i, st) in readable.enumerate() {
        if i > 0 {
            body.push(',');
        }
        entry(st, &mut body);
    }
    body.push_str("]}");
    body
}

/// One catalog entry as a JSON object (the caller checked `data.read`).
pub fn entry_json(st: &Stream) -> String {
    let mut body = String::new();
    entry(st, &mut body);
    body
}

/// One catalog entry.
fn entry(st: &Stream, o: &mut String) {
    let end = st.end.load(Ordering::Acquire);
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |n| n.to_string());
    let durable = st.durable();
    let _ = write!(
        o,
        "{{\"name\":{},\"schema\":{},\"durable\":{},\"exactly_once\":{},\"stream_id\":{},\"end_offset\":{},\"earliest_offset\":{},\"max_replay\":{},\"limits\":{{\"max_replay\":{},\"max_backlog\":{},\"max_in_flight\":{},\"max_inbound\":{},\"max_message_bytes\":{},\"window_rows\":{},\"wait_s\":{}}},\"subscribers\":{{\"websocket\":{},\"sse\":{},\"pull\":{}}},\"publishers\":{},\"tiers\":{},\"keyed\":{}}}",
        jstr(&st.cfg.name),
        st.schema_published.as_deref().unwrap_or("null"),
        durable,
        st.cfg.exactly_once,
        st.stream_id.as_deref().map_or("null".to_string(), jstr),
        opt(durable.then_some(end)),
        opt(durable.then(|| st.earliest.load(Ordering::Acquire).min(end).max(1))),
        opt(st.cfg.max_replay),
        opt(st.cfg.max_replay),
        st.cfg.max_backlog,
        st.cfg.max_in_flight,
        st.cfg.max_inbound,
        st.cfg.max_message_bytes,
        MAX_LIMIT,
        MAX_WAIT_S as u64,
        st.stats.subscribers.load(Ordering::Relaxed).max(0),
        st.stats.sse_subscribers.load(Ordering::Relaxed).max(0),
        st.stats.pull_waiting.load(Ordering::Relaxed).max(0),
        st.stats.publishers.load(Ordering::Relaxed).max(0),
        crate::tier::tiers_json(st),
        keyed_json(st),
    );
}

/// A keyed stream's declaration and state counters, or `null`.
fn keyed_json(st: &Stream) -> String {
    let Some(k) = &st.keyed else {
        return "null".into();
    };
    let s = &k.stats;
    format!(
        "{{\"key\":{},\"remove_when\":{},\"max_keys\":{},\"keys\":{},\"position\":{},\"incomplete\":{},\"ready\":{}}}",
        sonic_rs::to_string(&st.cfg.key).unwrap_or_else(|_| "[]".into()),
        st.cfg.remove_when.as_deref().unwrap_or("null"),
        k.max_keys,
        s.keys.load(Ordering::Relaxed),
        s.position.load(Ordering::Relaxed),
        s.incomplete.load(Ordering::Relaxed),
        s.ready.load(Ordering::Acquire),
    )
}

pub(crate) fn parse_limit(q: &Query, default: usize) -> Result<usize, Refused> {
    match q.get("limit") {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n <= MAX_LIMIT as u64 => Ok(n as usize),
            Ok(n) => Err(Refused::new(
                400,
                "resource_limit_exceeded",
                format!("limit={n} is over the maximum of {MAX_LIMIT} rows"),
            )),
            Err(_) => Err(Refused::new(
                400,
                "bad_request",
                format!("limit={v} is not a row count"),
            )),
        },
    }
}

/// Which rows of a window survive [`PAGE_BYTES_MAX`].
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// The first ones: the window ends after the row that reaches the budget (`/rows`).
    #[default]
    Oldest,
    /// The last ones: the oldest rows are dropped while the rest exceed it (`latest`).
    Newest,
}

/// Rows read from the ring or the log.
#[derive(Default)]
struct Window {
    /// `[offset,ts,row]` items, in offset order.
    rows: VecDeque<Vec<u8>>,
    /// Bytes of `rows`.
    bytes: usize,
    keep: Keep,
    /// The sequence after the last row examined.
    next: u64,
    /// Offsets found missing at the start of the window (`first..=last`).
    missing: Option<(u64, u64)>,
    /// Rows examined (matching or not).
    examined: usize,
}

impl Window {
    fn push(&mut self, payload: &[u8]) {
        self.rows.push_back(payload.to_vec());
        self.bytes += payload.len();
        if self.keep == Keep::Newest {
            while self.bytes > PAGE_BYTES_MAX && self.rows.len() > 1 {
                let dropped = self.rows.pop_front().map_or(0, |r| r.len());
                self.bytes -= dropped;
            }
        }
    }

    /// `Keep::Oldest` and the budget is reached: no more rows.
    fn full(&self) -> bool {
        self.keep == Keep::Oldest && self.bytes >= PAGE_BYTES_MAX
    }

    fn n(&self) -> usize {
        self.rows.len()
    }

    /// The rows as the items of a JSON array (comma-separated), appended to `out`.
    fn write_items(&self, out: &mut Vec<u8>) {
        out.reserve(self.bytes + self.rows.len());
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(row);
        }
    }
}

/// Reads at most `limit` rows passing `filter` from `[from, to)`, examining at most `scan` rows,
/// holding about [`PAGE_BYTES_MAX`] of them as `keep` says.
#[allow(clippy::too_many_arguments)]
async fn read_window(
    ctx: &ShardCtx,
    st: &Stream,
    from: u64,
    to: u64,
    filter: Option<&Filter>,
    limit: usize,
    scan: usize,
    keep: Keep,
) -> Result<Window, Refused> {
    let mut w = Window {
        next: from,
        keep,
        ..Window::default()
    };
    // visits one batch from `w.next`; returns false once a bound is hit
    let visit = |w: &mut Window, b: &crate::fanout::batch::FrameBatch| -> bool {
        let mut i = w.next.saturating_sub(b.first) as usize;
        while i < b.len() && b.first + (i as u64) < to {
            if w.n() >= limit || w.examined >= scan || w.full() {
                w.next = b.first + i as u64;
                return false;
            }
            if filter.is_none_or(|f| f.matches(b.row(i))) {
                w.push(b.payload(i));
            }
            w.examined += 1;
            i += 1;
        }
        w.next = b.first + i as u64;
        w.next < to
    };
    while w.next < to && w.n() < limit && w.examined < scan && !w.full() {
        let base = ctx.hub(st.index).borrow().base();
        if w.next >= base || !st.durable() {
            w.next = w.next.max(base);
            let hub_rc = ctx.hub(st.index);
            let hub = hub_rc.borrow();
            for b in hub.batches_from(w.next) {
                if !visit(&mut w, b) {
                    break;
                }
            }
            break;
        }
        let end = base.min(to).min(w.next + (scan - w.examined) as u64);
        let (tx, rx) = flume::bounded(1);
        let job = ReplayJob {
            stream: st.index,
            from: w.next,
            to: end,
            prune: filter.map(Filter::predicates).unwrap_or_default(),
            reply: tx,
        };
        if ctx.shared.replay.submit(job).is_err() {
            return Err(Refused::new(
                503,
                "unavailable",
                "the reader pool has stopped",
            ));
        }
        let r = match rx.recv_async().await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(Refused::new(500, "storage_error", e)),
            Err(_) => {
                return Err(Refused::new(
                    503,
                    "unavailable",
                    "the reader pool has stopped",
                ))
            }
        };
        if let Some((first, last)) = r.missing {
            if w.n() > 0 || w.missing.is_some() {
                // a hole after rows: this page ends before it; the next one reports it
                break;
            }
            w.missing = Some((first, last));
            w.next = last + 1;
        }
        if r.batch.is_empty() {
            w.next = w.next.max(r.resume);
            continue;
        }
        w.next = w.next.max(r.batch.first);
        if !visit(&mut w, &r.batch) {
            break;
        }
        if w.next == r.batch.end() {
            // rows after the batch that the filter's statistics excluded
            w.next = w.next.max(r.resume.min(to));
        }
    }
    Ok(w)
}

/// The last `limit` (≤ [`MAX_LIMIT`]) rows of `st` as the `latest` body:
/// `{"stream","end_offset","count","rows":[[offset,ts,row],…]}` (the caller checked
/// `data.read`).
pub async fn latest(ctx: &ShardCtx, st: &Stream, limit: usize) -> Result<Vec<u8>, Refused> {
    if limit > MAX_LIMIT {
        return Err(over_limit(limit));
    }
    let (head, base) = {
        let hub_rc = ctx.hub(st.index);
        let hub = hub_rc.borrow();
        (hub.head(), hub.base())
    };
    let floor = if st.durable() {
        st.earliest.load(Ordering::Acquire).min(head).max(1)
    } else {
        base
    };
    let from = head.saturating_sub(limit as u64).max(floor);
    let w = read_window(ctx, st, from, head, None, limit, limit, Keep::Newest).await?;
    let mut body = Vec::with_capacity(w.bytes + w.n() + 128);
    let end = if st.durable() {
        head.to_string()
    } else {
        "null".into()
    };
    let _ = write!(
        Bytes(&mut body),
        "{{\"stream\":{},\"end_offset\":{},\"count\":{},\"rows\":[",
        jstr(&st.cfg.name),
        end,
        w.n()
    );
    w.write_items(&mut body);
    body.extend_from_slice(b"]}");
    Ok(body)
}

fn over_limit(limit: usize) -> Refused {
    Refused::new(
        400,
        "resource_limit_exceeded",
        format!("limit={limit} is over the maximum of {MAX_LIMIT} rows"),
    )
}

struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

pub(crate) fn now_s() -> u64 {
    (now_us() / 1_000_000).max(0) as u64
}

/// What a window of rows asks for: the query of `/rows`, or an MCP tool's arguments.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowsAsk<'a> {
    /// A cursor from an earlier window (it wins over `from`).
    pub cursor: Option<&'a str>,
    /// `earliest`, `latest` or an offset (decimal); absent: the earliest held.
    pub from: Option<&'a str>,
    /// At most this many rows (≤ [`MAX_LIMIT`]).
    pub limit: usize,
    /// Long-poll this long while nothing is new (≤ [`MAX_WAIT_S`]).
    pub wait_s: f64,
    /// A `where=` filter (its JSON text).
    pub filter: Option<&'a str>,
}

/// How a window ended.
#[derive(Debug)]
pub enum Polled {
    /// The window's body: `{"stream","status",["missing",]"count","next_offset","end_offset",
    /// "next_cursor","rows"}`.
    Page(Vec<u8>),
    /// The client closed the connection while the poll waited.
    ClientGone,
}

/// `/rows`' query as a [`RowsAsk`], its bounds checked.
fn rows_ask(q: &Query) -> Result<RowsAsk<'_>, Refused> {
    let limit = parse_limit(q, 100)?;
    let wait_s = match q.get("wait") {
        None => 0.0,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=MAX_WAIT_S).contains(&s) => s,
            Ok(s) if s.is_finite() && s > MAX_WAIT_S => {
                return Err(Refused::new(
                    400,
                    "resource_limit_exceeded",
                    format!("wait={v} is over the maximum of {MAX_WAIT_S} s"),
                ))
            }
            _ => {
                return Err(Refused::new(
                    400,
                    "bad_request",
                    format!("wait={v} is not a number of seconds ≥ 0"),
                ))
            }
        },
    };
    Ok(RowsAsk {
        cursor: q.get("cursor"),
        from: q.get("from"),
        limit,
        wait_s,
        filter: q.get("where"),
    })
}

/// A window of at most `ask.limit` rows of `st` from the cursor on, with its signed
/// `next_cursor` (bound to the stream, its stream_id, the filter, the client's address and
/// principal); waits up to `ask.wait_s` while nothing is new. [`Polled::ClientGone`] when the
/// client closed the connection while the poll waited. The caller checked `data.read`.
pub async fn rows(
    ctx: &ShardCtx,
    st: &Stream,
    ask: RowsAsk<'_>,
    client: Client<'_>,
) -> Result<Polled, Refused> {
    let Client {
        peer,
        who,
        guard,
        rd,
        held,
    } = client;
    let limit = ask.limit;
    if limit > MAX_LIMIT {
        return Err(over_limit(limit));
    }
    let wait = ask.wait_s;
    if !(wait.is_finite() && (0.0..=MAX_WAIT_S).contains(&wait)) {
        return Err(Refused::new(
            400,
            "resource_limit_exceeded",
            format!("wait={wait} is outside 0..={MAX_WAIT_S} s"),
        ));
    }
    if !st.durable() {
        return Err(Refused::new(
            409,
            "not_durable",
            format!(
                "stream {} keeps no log to page through; use /latest, SSE or WebSocket",
                st.cfg.name
            ),
        ));
    }
    let filter = match ask.filter {
        None => None,
        Some(w) => match super::conn::parse_filter(st, w) {
            Ok(f) => Some(f),
            Err(detail) => return Err(Refused::new(400, "bad_request", detail)),
        },
    };
    let caller = caller_of(peer, who);
    let binding = Binding {
        stream: &st.cfg.name,
        stream_id: st.stream_id.as_deref().unwrap_or(""),
        filter: filter.as_ref().map_or("", |f| f.echo()),
        caller: &caller,
    };
    let key = cursor::key();
    let head0 = ctx.hub(st.index).borrow().head();
    let earliest = st.earliest.load(Ordering::Acquire).min(head0).max(1);
    let mut next =
        match (ask.cursor.filter(|c| !c.is_empty()), ask.from) {
            (Some(c), _) => match key.verify(&binding, c, now_s()) {
                Ok(n) => n,
                Err(CursorError::Invalid) => return Err(Refused::new(
                    400,
                    "cursor_invalid",
                    "this cursor was not issued for this stream, filter and caller, or was altered (send the same where= as the request that returned it, from the same address, as the same principal)",
                )),
                Err(CursorError::Expired) => {
                    return Err(Refused::new(
                        410,
                        "cursor_expired",
                        "this cursor has expired; start again without one",
                    ))
                }
            },
            (None, None | Some("earliest")) => earliest,
            (None, Some("latest")) => head0,
            (None, Some(v)) => match super::route::parse_py_int(v) {
                Some(0) => earliest,
                Some(n) if (1..=i64::MAX as i128).contains(&n) => n as u64,
                _ => {
                    return Err(Refused::new(
                        400,
                        "bad_request",
                        format!(
                            "from={v}: use earliest, latest or an offset (an integer in 0..=2^63-1; 0 means the earliest held)"
                        ),
                    ))
                }
            },
        };
    let mut missing = None;
    if next < earliest {
        missing = Some((next, earliest - 1));
        next = earliest;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let mut signal: Option<Rc<Signal>> = None;
    // a long poll holds a connection: it counts under the same caps as an SSE stream
    let mut slot: Option<super::sse::Slot> = None;
    let scan = if filter.is_some() {
        FILTER_SCAN_ROWS
    } else {
        limit
    };
    let w = loop {
        // stopped while the poll waited (its wake-up says so): its log is closing, the poll is
        // answered now rather than at its deadline
        if st.subscriber_end().is_some() {
            return Err(Refused::new(
                409,
                "stream_stopped",
                format!(
                    "stream {} was stopped while the poll waited; start it over /control/v1 to read it",
                    st.cfg.name
                ),
            ));
        }
        if let Some(end) = guard.and_then(crate::auth::live::Guard::ending) {
            return Err(Refused::new(
                403,
                end.sse_reason(),
                "this principal's session ended while the poll waited (revoked or expired)",
            ));
        }
        let head = ctx.hub(st.index).borrow().head();
        let w = if next < head && limit > 0 {
            let keep = Keep::Oldest;
            read_window(ctx, st, next, head, filter.as_ref(), limit, scan, keep).await?
        } else {
            Window {
                next,
                ..Window::default()
            }
        };
        if missing.is_none() {
            missing = w.missing;
        }
        let now = Instant::now();
        if w.n() > 0 || missing.is_some() || now >= deadline || limit == 0 || ctx.shutting_down() {
            break w;
        }
        next = w.next;
        if slot.is_none() {
            match super::sse::acquire(
                super::sse::ClientKey::of(peer, who),
                &super::sse::settings(),
            ) {
                Some(s) => slot = Some(s),
                None => {
                    super::metrics::count_refusal(503);
                    return Err(Refused {
                        retry_after: true,
                        ..Refused::new(
                            503,
                            "too_many_streams",
                            "too many open SSE streams and long polls (per process or per client); retry later",
                        )
                    });
                }
            }
        }
        // nothing new: wait for a commit (attach first, then look again: no lost wake-up)
        let s = signal.get_or_insert_with(|| {
            let s = Rc::new(Signal::default());
            ctx.hub(st.index).borrow_mut().attach(&s);
            ctx.register(st.index, &s);
            s
        });
        if ctx.hub(st.index).borrow().head() > next {
            continue;
        }
        // ...while watching the connection: a client that goes frees its slot at once
        st.stats.pull_waiting.fetch_add(1, Ordering::Relaxed);
        let waited = rd
            .watch_while(held, MAX_HELD_BYTES, rt::timeout(deadline - now, s.wait()))
            .await;
        st.stats.pull_waiting.fetch_sub(1, Ordering::Relaxed);
        if waited == rt::Watched::Closed {
            return Ok(Polled::ClientGone);
        }
    };
    let head = ctx.hub(st.index).borrow().head();
    let next_cursor = key.sign(&binding, w.next, now_s());
    let mut body = Vec::with_capacity(w.bytes + w.n() + 256);
    let status = if missing.is_some() { "gap" } else { "ok" };
    let _ = write!(
        Bytes(&mut body),
        "{{\"stream\":{},\"status\":\"{status}\",",
        jstr(&st.cfg.name)
    );
    if let Some((a, b)) = missing {
        let _ = write!(
            Bytes(&mut body),
            "\"missing\":{{\"first\":{a},\"last\":{b}}},"
        );
    }
    let _ = write!(
        Bytes(&mut body),
        "\"count\":{},\"next_offset\":{},\"end_offset\":{head},\"next_cursor\":{},\"rows\":[",
        w.n(),
        w.next,
        jstr(&next_cursor)
    );
    w.write_items(&mut body);
    body.extend_from_slice(b"]}");
    Ok(Polled::Page(body))
}
