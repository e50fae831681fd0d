//! The HTTP front of every accepted connection.
//!
//! Reads the request head under a deadline (slow-loris clients are cut off after
//! [`HANDSHAKE_TIMEOUT`]), parses it with httparse under `HttpLimits`, and routes it: a WebSocket
//! upgrade becomes a publisher, subscriber or echo session; `GET /stats` answers JSON; anything
//! else gets a JSON 404. Refusals of a WebSocket request (4400, 4404, 4412, 4416) are closes right
//! after the 101, before any greeting (PROTOCOL.md §8). Runs on the accepting shard.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corecast_net::http::request::{parse_request, HttpLimits, Request};
use corecast_net::http::response::{head_only, http_error_response, json_error, ResponseHead};
use corecast_net::protocol::close_reason::{CloseReason, NotReplayable};
use corecast_net::protocol::greeting::{Greeting, PublisherMark};
use corecast_net::protocol::ServerMessage;
use corecast_net::rt::{self, Conn, WriteHalf};
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::encode_close;
use corecast_net::ws::handshake::{is_upgrade_request, response_101, validate_upgrade};

use super::deliver::Rendering;
use super::publisher::ExactlyOnce;
use super::route::{bad_request, route, Intent, Refusal};
use super::subscriber::Start;
use super::ws_io::{WsReader, READ_ROOM, SUBSCRIBER_READ_ROOM};
use super::{echo, metrics, publisher, pull, sse, stats, subscriber};
use crate::auth::{Action, Identity};
use crate::fanout::signal::Signal;
use crate::filter::{ColumnLookup, Filter};
use crate::registry::Stream;
use crate::shard::ShardCtx;

/// How long a client has to send a complete request head.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The transport limit on one inbound WebSocket message (PROTOCOL.md §1): 1 MiB, or a stream's
/// larger `max_message_bytes`.
pub const TRANSPORT_MAX_BYTES: usize = 1 << 20;

/// One connection past the gate, under `max_connections`; given back on drop.
struct Admitted<'a>(&'a std::sync::atomic::AtomicI64);

impl<'a> Admitted<'a> {
    fn take(shared: &'a crate::shard::Shared) -> Option<Admitted<'a>> {
        let n = shared.admitted.fetch_add(1, Ordering::AcqRel);
        let slot = Admitted(&shared.admitted);
        match shared.max_connections {
            Some(max) if n as u64 >= max => None, // the drop gives it back
            _ => Some(slot),
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one accepted connection to its end.
pub async fn handle(ctx: Rc<ShardCtx>, conn: Conn) {
    ctx.shared.connections.fetch_add(1, Ordering::Relaxed);
    serve(&ctx, conn).await;
    ctx.shared.connections.fetch_sub(1, Ordering::Relaxed);
}

async fn serve(ctx: &Rc<ShardCtx>, conn: Conn) {
    let peer = conn.peer_addr().ok().map(|a| a.ip());
    let (mut rd, mut wr) = conn.split();
    let limits = HttpLimits::default();
    let mut buf = Vec::with_capacity(4096);
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let (req, used) = loop {
        match parse_request(&buf, &limits) {
            Ok(Some(x)) => break x,
            Ok(None) => {}
            Err(e) => {
                let _ = wr.write_all(http_error_response(&e)).await;
                let _ = wr.shutdown().await;
                return;
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rt::timeout(left, rd.read_into(std::mem::take(&mut buf), 4096)).await {
            Some((Ok(n), b)) if n > 0 => buf = b,
            Some(_) => return,
            None => {
                let body = json_error(
                    408,
                    "request_timeout",
                    "no complete request head in 10 s",
                    true,
                );
                let _ = wr.write_all(body).await;
                let _ = wr.shutdown().await;
                return;
            }
        }
    };
    // the bytes past the head, in an allocation of their own: the 4 KiB head buffer must not
    // stay with a session that may last days
    let mut leftover = buf[used..].to_vec();
    drop(buf);
    // Every handler but the subscriber's is boxed below: an idle subscriber keeps this future
    // for its whole life, sized by the largest future awaited anywhere in it.
    // who is asking, and may they: before the upgrade, any body, or the stream's lookup
    // a CORS preflight carries no credentials: answered before the gate, from the list alone
    if let Some(resp) = crate::auth::origin::preflight(&ctx.shared.auth.origins(), &req) {
        let _ = wr.write_all(resp).await;
        let _ = wr.shutdown().await;
        return;
    }
    // max_connections counts connections past the gate: clients that never finish a head, or
    // fail to authenticate, cannot fill it and lock out the ones that can (an operator's revoke)
    // boxed: the gate's future (credential checks, the argon2 round trip) would otherwise size
    // the whole connection's future, which an idle subscriber keeps for its life
    let admitted = Box::pin(crate::auth::gate(&ctx.shared.auth, &req, peer))
        .await
        .and_then(|who| crate::auth::http::admit(&ctx.shared.auth, &who, &req).map(|a| (who, a)))
        .and_then(|x| match Admitted::take(&ctx.shared) {
            Some(slot) => Ok((x, slot)),
            None => Err(ResponseHead::new(429)
                .header("content-type", "application/json")
                .header("retry-after", "1")
                .finish(&corecast_net::http::response::json_error_body(
                    "too_many_connections",
                    &format!(
                        "this server holds its max_connections ({}); try again later",
                        ctx.shared.max_connections.unwrap_or(0)
                    ),
                    true,
                ))),
        });
    let ((who, admission), _slot) = match admitted {
        Ok(x) => x,
        Err(resp) => {
            let resp = if req.method == "HEAD" {
                head_only(resp)
            } else {
                resp
            };
            let _ = wr.write_all(resp).await;
            let _ = wr.shutdown().await;
            return;
        }
    };
    let guard = admission.guard.clone();
    let name = req.path.strip_prefix('/').unwrap_or(&req.path).to_string();
    if !is_upgrade_request(&req) {
        if let Some(resp) =
            crate::auth::http::revoke(&ctx.shared.auth, &req, || ctx.shared.wake_all_sessions())
        {
            let _ = wr.write_all(resp).await;
            let _ = wr.shutdown().await;
            return;
        }
        if crate::control::http::wants(&req.path) {
            return Box::pin(crate::control::http::serve(ctx, &req, rd, wr, leftover)).await;
        }
        if let Some(stream) = crate::ingest::endpoint::wants(&req.path) {
            let stream = stream.to_string();
            return Box::pin(crate::ingest::endpoint::serve(
                ctx, &req, &stream, rd, wr, leftover,
            ))
            .await;
        }
        // before SSE, as auth::http::need decides: GET /mcp is MCP's, whatever the Accept
        if crate::mcp::wants(&req) {
            return Box::pin(crate::mcp::serve(
                ctx, &req, peer, rd, wr, &who, guard, leftover,
            ))
            .await;
        }
        if let Some(stream) = sse::wants(ctx, &req, &name) {
            return Box::pin(sse::serve(ctx, &req, stream, peer, rd, wr, &who, guard)).await;
        }
        let client = pull::Client {
            peer,
            who: &who,
            guard: guard.as_ref(),
            rd: &mut rd,
            held: &mut leftover,
        };
        let resp = match Box::pin(pull::handle(ctx, &req, client)).await {
            Some(pull::Answer::Respond(r)) => r,
            // the client closed its connection while a long poll waited: nothing to answer
            Some(pull::Answer::ClientGone) => return,
            None => plain_http(ctx, &req, &name, &who),
        };
        let resp =
            crate::auth::origin::apply_cors(resp, ctx.shared.auth.origins().cors_value(&req));
        // HEAD: the GET answer's head alone (RFC 9110 §9.3.2: every server supports HEAD)
        let resp = if req.method == "HEAD" {
            head_only(resp)
        } else {
            resp
        };
        let _ = wr.write_all(resp).await;
        let _ = wr.shutdown().await;
        return;
    }
    let accept = match validate_upgrade(&req) {
        Ok(k) => k,
        Err(e) => {
            let _ = wr.write_all(e.response()).await;
            let _ = wr.shutdown().await;
            return;
        }
    };
    let mut out = response_101(&accept);
    if name == "_echo" && ctx.shared.echo {
        let (res, _) = wr.write_all(out).await;
        if res.is_ok() {
            Box::pin(echo::run(
                WsReader::new(rd, leftover, 16 << 20, READ_ROOM),
                wr,
            ))
            .await;
        }
        return;
    }
    let readable = |s: &str| who.allows(Action::DataRead, s);
    let intent = route(
        &name,
        req.query.as_bytes(),
        &ctx.shared.registry.load(),
        &readable,
    );
    let intent = match intent {
        Ok(i) => i,
        Err(r) => return refuse(wr, out, r).await,
    };
    if ctx.shutting_down() {
        return refuse(
            wr,
            out,
            Refusal {
                code: 1001,
                reason: "server shutting down".into(),
            },
        )
        .await;
    }
    match intent {
        Intent::Publish { stream, publisher } => {
            let st = ctx.shared.registry.load().streams[stream].clone();
            // a retired stream refuses publishers (4410), a stopped one everyone (1001)
            if let Some((code, reason)) = st.publisher_end() {
                return refuse(wr, out, Refusal { code, reason }).await;
            }
            let eo = match publisher {
                Some(id) => {
                    let claim = st.claim(&id);
                    Some(ExactlyOnce { id, claim })
                }
                None => None,
            };
            let mark = match &eo {
                Some(e) => {
                    let (tx, rx) = flume::bounded(1);
                    let _ = ctx.shared.writers[st.writer].send(
                        crate::commit::writer::WriterMsg::Mark {
                            stream,
                            id: e.id.clone(),
                            reply: tx,
                        },
                    );
                    let m = rx.recv_async().await.ok().flatten();
                    Some(PublisherMark {
                        id: &e.id,
                        last_seq: m.as_ref().map_or(0, |m| m.last_seq),
                        last_offset: m.and_then(|m| m.last_offset),
                    })
                }
                None => None,
            };
            let end = st.durable().then(|| st.end.load(Ordering::Acquire));
            greeting(&st, end, None, None, mark, &mut out);
            let (res, _) = wr.write_all(out).await;
            if res.is_err() {
                if let Some(e) = &eo {
                    st.release(&e.id, &e.claim);
                }
                return;
            }
            let max = st.cfg.max_message_bytes.max(TRANSPORT_MAX_BYTES);
            Box::pin(publisher::run(
                ctx.clone(),
                st,
                WsReader::new(rd, leftover, max, READ_ROOM),
                wr,
                eo,
                guard,
            ))
            .await;
        }
        Intent::Subscribe {
            stream,
            offset,
            where_json,
            state,
        } => {
            let st = ctx.shared.registry.load().streams[stream].clone();
            if let Some((code, reason)) = st.subscriber_end() {
                return refuse(wr, out, Refusal { code, reason }).await;
            }
            let filter = match where_json {
                None => None,
                Some(w) => match parse_filter(&st, &w) {
                    Ok(f) => Some(f),
                    Err(detail) => return refuse(wr, out, bad_request(&detail)).await,
                },
            };
            // `?state`: the state thread's snapshot at offset S (a commit boundary), then the
            // log from S, like a replay from S: every key's latest row below S once, in offset
            // order, then every row from S on — no gap, no duplicate at the join
            let snapshot = match (state, &st.keyed) {
                // boxed: only a `?state` subscribe waits for a snapshot
                (true, Some(k)) => {
                    match Box::pin(k.snapshot(filter.clone(), Rendering::WebSocket)).await {
                        Ok(s) => Some(s),
                        Err(why) => {
                            return refuse(
                                wr,
                                out,
                                Refusal {
                                    code: if matches!(
                                        why,
                                        crate::state::Unavailable::Busy
                                            | crate::state::Unavailable::OverBudget
                                    ) {
                                        1013
                                    } else {
                                        1011
                                    },
                                    reason: format!("{{\"error\":\"{}\"}}", why.code()),
                                },
                            )
                            .await
                        }
                    }
                }
                _ => None,
            };
            // attach and read the frontier in one step on this thread: no gap, no duplicate
            let signal = Rc::new(Signal::default());
            let head = {
                let hub_rc = ctx.hub(stream);
                let mut hub = hub_rc.borrow_mut();
                hub.attach(&signal);
                hub.head()
            };
            let (start, replay, end_offset) = match (offset, snapshot) {
                (_, Some(s)) => (
                    Start {
                        next: s.at,
                        // rows between S and this shard's head are owed as a replay is
                        replay_end: head.max(s.at),
                        snapshot: s.chunks,
                        snapshot_entities: s.entities,
                        snapshot_hold: s.hold,
                    },
                    Some((s.first.unwrap_or(s.at), s.at)),
                    s.at,
                ),
                (None, None) => (
                    Start {
                        next: head,
                        replay_end: head,
                        snapshot: Vec::new(),
                        snapshot_entities: 0,
                        snapshot_hold: Default::default(),
                    },
                    None,
                    head,
                ),
                (Some(n), None) => match replay_window(&st, n, head) {
                    Ok(first) => (
                        Start {
                            next: first,
                            replay_end: head,
                            snapshot: Vec::new(),
                            snapshot_entities: 0,
                            snapshot_hold: Default::default(),
                        },
                        Some((first, head)),
                        head,
                    ),
                    Err(r) => return refuse(wr, out, r).await,
                },
            };
            greeting(
                &st,
                st.durable().then_some(end_offset),
                replay,
                filter.as_ref().map(|f| f.echo()),
                None,
                &mut out,
            );
            let (res, _) = wr.write_all(out).await;
            if res.is_err() {
                return;
            }
            ctx.register(st.index, &signal);
            let ws = WsReader::new(rd, leftover, TRANSPORT_MAX_BYTES, SUBSCRIBER_READ_ROOM);
            if let Some(deadline) = guard.as_ref().and_then(|g| g.deadline) {
                // an idle subscriber is woken at its deadline to close (1008 expired); the
                // timer looks at least once a minute whether the session is still there, so
                // it outlives a closed one by a minute at most
                let weak = Rc::downgrade(&signal);
                rt::spawn(async move {
                    loop {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        rt::sleep(left.min(Duration::from_secs(60))).await;
                        let Some(s) = weak.upgrade() else { return };
                        if std::time::Instant::now() >= deadline {
                            s.raise();
                            return;
                        }
                    }
                });
            }
            subscriber::run(ctx.clone(), st, ws, wr, start, filter, signal, guard).await;
        }
    }
}

/// The first offset to replay for `offset=n` with the frontier at `head`, or the 4416 refusal
/// (PROTOCOL.md §6).
fn replay_window(st: &Stream, n: u64, head: u64) -> Result<u64, Refusal> {
    let refuse = |why: NotReplayable| Err(CloseReason::NotReplayable(why).into());
    if !st.durable() {
        return refuse(NotReplayable::NotDurable);
    }
    let earliest = st.earliest.load(Ordering::Acquire).min(head).max(1);
    let first = if n == 0 { earliest } else { n };
    if first > head {
        return refuse(NotReplayable::Ahead {
            offset: first,
            end_offset: head,
        });
    }
    if first < earliest {
        return refuse(NotReplayable::Evicted {
            offset: first,
            earliest,
        });
    }
    if let Some(max) = st.cfg.max_replay {
        let behind = head - first;
        // rows at or past the table's end are nowhere else: a catch-up resumes exactly there
        if behind > max && !st.tiers.beyond_published(first) {
            return refuse(NotReplayable::TooOld {
                offset: first,
                behind,
                max_replay: max,
            });
        }
    }
    Ok(first)
}

pub(crate) fn parse_filter(st: &Stream, text: &str) -> Result<Filter, String> {
    match &st.schema {
        Some(schema) => {
            let lookup = |c: &str| match schema.column(c) {
                None => ColumnLookup::Unknown,
                Some((_, col)) if col.is_filterable() => ColumnLookup::Scalar,
                Some(_) => ColumnLookup::NotScalar,
            };
            let filter = Filter::parse(text, Some(&lookup))?;
            // a term no row can match would make a subscription that never receives a row,
            // which looks exactly like a quiet stream (after a migration the older logs a
            // catch-up reads may hold other types: not checked then)
            match crate::filter::never_matching(text, schema).filter(|_| !st.migrated) {
                Some(why) => Err(format!("where= {}", why.short())),
                None => Ok(filter),
            }
        }
        None => Filter::parse(text, None),
    }
}

/// Appends the greeting as one text frame to `out` (after the 101 response).
fn greeting(
    st: &Stream,
    end_offset: Option<u64>,
    replay: Option<(u64, u64)>,
    where_json: Option<&str>,
    publisher: Option<PublisherMark<'_>>,
    out: &mut Vec<u8>,
) {
    Greeting {
        stream: &st.cfg.name,
        end_offset,
        replay,
        durable: st.durable(),
        group_commit: st.durable(),
        schema_json: st.schema_published.as_deref(),
        metadata: st.metadata.as_deref(),
        metadata_hint: st.metadata_hint.as_deref(),
        stream_id: st.stream_id.as_deref(),
        where_json,
        publisher,
    }
    .encode_frame(out);
}

async fn refuse(mut wr: WriteHalf, mut out: Vec<u8>, r: Refusal) {
    metrics::count_refusal(r.code);
    encode_close(Some(CloseCode(r.code)), &r.reason, None, &mut out);
    let _ = wr.write_all(out).await;
    let _ = wr.shutdown().await;
}

fn plain_http(ctx: &ShardCtx, req: &Request, name: &str, who: &Identity) -> Vec<u8> {
    let shown = |stream: &str| who.allows(Action::StatsRead, stream);
    match (req.method.as_str(), name) {
        ("GET" | "HEAD", "stats") => {
            let body = stats::render(&ctx.shared, &shown);
            ResponseHead::new(200)
                .header("content-type", "application/json")
                .header("cache-control", "no-cache")
                .finish(body.as_bytes())
        }
        ("GET" | "HEAD", "metrics") => ResponseHead::new(200)
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .header("cache-control", "no-cache")
            .finish(metrics::render(&ctx.shared, &shown).as_bytes()),
        ("GET" | "HEAD", page) if crate::ui::wants(page) => crate::ui::serve(page),
        (method, page) if crate::ui::wants(page) => crate::ui::not_allowed(method, page),
        // a stream the caller may not read is, to it, no such path
        _ if ctx.shared.registry.load().get(name).is_some() && who.allows(Action::DataRead, name) => {
            json_error(
            404,
            "not_found",
            &format!(
                "/{name} is a stream: subscribe over WebSocket (ws://HOST/{name}) or Server-Sent Events (GET /{name}/events, or Accept: text/event-stream)"
            ),
            false,
            )
        }
        _ => json_error(404, "not_found", &format!("no such path: /{name}"), false),
    }
}
