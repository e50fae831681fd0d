//! The ingest endpoint on the shard: `POST` and `GET` `/v1/streams/NAME/ingest`.
//!
//! In: a request head the HTTP front has parsed, the connection, the bytes already read past
//! the head. Out: one response, then the connection is closed (corecast answers one request
//! per connection). Runs on the accepting shard, which only checks the head, reads the body
//! and waits: decoding, encoding and the wait for the commit happen on an ingest worker thread
//! (one per request, at most `[ingest] max_concurrent` at once), so a large batch never holds
//! up the shard's io_uring loop.
//!
//! The checks, in order, each with its status and `code`: the method (405
//! `method_not_allowed`), the query (400 `bad_request`), the stream (404 `not_found`), a log
//! (409 `not_durable`), a stream stopped or (for `POST`) retired over `/control/v1` (409
//! `stream_stopped`, `stream_retired`), `ingest=` on a stream that takes no exactly-once
//! publishers (409 `exactly_once_unavailable`), shutdown (503 `shutting_down`); for `POST` then the content
//! type (415 `unsupported_media_type`), the length (411 `length_required`, 400 `bad_request`
//! for an empty body, 413 `payload_too_large` over `max_body_bytes`), a place under
//! `max_concurrent` (503 `busy`), the body within 30 s (408 `request_timeout`); then the rows
//! ([`super::body`]: 400 `bad_request`, 413, 422 `rejected` with `row` and `column`) and the
//! commit (409 `seq_gap`, 409 `superseded`, 503 `commit_failed`).

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use corecast_net::http::query::Query;
use corecast_net::http::request::Request;
use corecast_net::rt::{self, ReadHalf, WriteHalf};

use super::body::{self, BodyFault, Format, Limits};
use super::reply::{self, Committed, Status};
use super::{lane, Slot};
use crate::commit::writer::{Append, AppendReply, WriterMsg};
use crate::registry::{Claim, Stream};
use crate::session::route::{strict_param, unknown_params_listed};
use crate::shard::ShardCtx;

/// How long a client may take to send the rest of its body (between two reads).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The stream name when `path` is `/v1/streams/NAME/ingest`.
pub fn wants(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/streams/")?
        .strip_suffix("/ingest")
        .filter(|name| !name.is_empty() && !name.contains('/'))
}

/// What a request asks, checked.
struct Ask {
    stream: Arc<Stream>,
    /// `ingest=ID` and (for POST) `seq=N`.
    ingest: Option<(String, Option<u64>)>,
}

/// Serves one ingest request to its end.
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    req: &Request,
    name: &str,
    mut rd: ReadHalf,
    mut wr: WriteHalf,
    held: Vec<u8>,
) {
    let post = req.method == "POST";
    let response = match check(ctx, req, name, post) {
        Err(resp) => resp,
        Ok(ask) if !post => status(ctx, &ask).await,
        Ok(ask) => {
            ctx.shared.publishers_open.fetch_add(1, Ordering::SeqCst);
            let resp = ingest(ctx, req, ask, &mut rd, &mut wr, held).await;
            ctx.shared.publishers_open.fetch_sub(1, Ordering::SeqCst);
            resp
        }
    };
    crate::session::ws_io::answer_then_linger(req, &mut rd, &mut wr, response).await;
}

/// The checks every request passes, POST or GET.
fn check(ctx: &ShardCtx, req: &Request, name: &str, post: bool) -> Result<Ask, Vec<u8>> {
    if !matches!(req.method.as_str(), "POST" | "GET" | "HEAD") {
        return Err(reply::error(
            405,
            "method_not_allowed",
            &format!(
                "{} is not taken here: POST a batch of rows to ingest, or GET the mark of an ingest id",
                req.method
            ),
            &[],
        ));
    }
    let q = Query::parse(req.query.as_bytes());
    let allowed: &[&str] = if post {
        &["ingest", "seq"]
    } else {
        &["ingest"]
    };
    if let Some(detail) = unknown_params_listed(&q, allowed) {
        return Err(reply::error(400, "bad_request", &detail, &[]));
    }
    let bad = |m: &str| Err(reply::error(400, "bad_request", m, &[]));
    let id = match strict_param(req.query.as_bytes(), "ingest") {
        None => None,
        Some(Err(())) => {
            return bad("an ingest id is 1 to 128 bytes of UTF-8; got bytes that are not UTF-8")
        }
        Some(Ok(id)) if id.is_empty() || id.len() > 128 => {
            return bad(&format!(
                "an ingest id is 1 to 128 bytes of UTF-8; got {}",
                id.len()
            ))
        }
        Some(Ok(id)) => Some(id),
    };
    let seq = match q.get("seq") {
        None => None,
        Some(raw) => match raw.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return bad(&format!(
                    "seq={raw} is not an integer >= 1 (the seq of the batch's first row; seqs start at 1)"
                ))
            }
        },
    };
    if post && id.is_some() != seq.is_some() {
        return bad(if id.is_some() {
            "ingest= needs seq=N, the seq of the batch's first row (1 for the first batch)"
        } else {
            "seq= belongs to an ingest id: pass ingest=ID too"
        });
    }
    let Some(stream) = ctx.shared.registry.load().get(name).cloned() else {
        return Err(reply::error(
            404,
            "not_found",
            &format!("no such stream: {name}"),
            &[],
        ));
    };
    if !stream.durable() {
        return Err(reply::error(
            409,
            "not_durable",
            &format!(
                "stream {name} is live-only (durable = false): ingest commits rows to a log, and this stream keeps none; publish over WebSocket instead"
            ),
            &[],
        ));
    }
    match (post, stream.state()) {
        (_, crate::registry::StreamState::Stopped) => {
            return Err(reply::error(
                409,
                "stream_stopped",
                &format!("stream {name} is stopped; start it over /control/v1 first"),
                &[],
            ))
        }
        (true, crate::registry::StreamState::Retired) => {
            return Err(reply::error(
                409,
                "stream_retired",
                &format!("stream {name} is retired: it takes no more rows (it is still read)"),
                &[],
            ))
        }
        _ => {}
    }
    if id.is_some() && !stream.cfg.exactly_once {
        return Err(reply::error(
            409,
            "exactly_once_unavailable",
            &format!(
                "stream {name} takes no exactly-once publishers, so no ingest id: declare it with exactly_once = true, or ingest without ingest= (not resumable)"
            ),
            &[],
        ));
    }
    if ctx.shutting_down() {
        return Err(reply::error(
            503,
            "shutting_down",
            "server shutting down",
            &[],
        ));
    }
    Ok(Ask {
        stream,
        ingest: id.map(|id| (id, seq)),
    })
}

/// `GET`: the id's mark (read through the writer queue, so every batch queued before counts)
/// and the limits.
async fn status(ctx: &ShardCtx, ask: &Ask) -> Vec<u8> {
    let settings = super::settings();
    let mark = match &ask.ingest {
        None => None,
        Some((id, _)) => {
            let (tx, rx) = flume::bounded(1);
            let sent = ctx.shared.writers[ask.stream.writer].send(WriterMsg::Mark {
                stream: ask.stream.index,
                id: id.clone(),
                reply: tx,
            });
            if sent.is_err() {
                return writer_stopped();
            }
            let Ok(m) = rx.recv_async().await else {
                return writer_stopped();
            };
            Some((
                id.as_str(),
                m.map_or(0, |m| m.last_seq),
                m.and_then(|m| m.last_offset),
            ))
        }
    };
    Status {
        stream: &ask.stream.cfg.name,
        exactly_once: ask.stream.cfg.exactly_once,
        mark,
        max_body_bytes: settings.max_body_bytes,
        max_batch_rows: settings.max_batch_rows,
    }
    .response()
}

fn writer_stopped() -> Vec<u8> {
    reply::error(503, "commit_failed", "the stream's writer has stopped", &[])
}

/// `POST`: the body, checked, encoded and committed as one batch.
async fn ingest(
    ctx: &ShardCtx,
    req: &Request,
    ask: Ask,
    rd: &mut ReadHalf,
    wr: &mut WriteHalf,
    held: Vec<u8>,
) -> Vec<u8> {
    let settings = super::settings();
    let Some(format) = req
        .header("content-type")
        .and_then(Format::from_content_type)
    else {
        let got = req
            .header("content-type")
            .map_or("no content-type".to_string(), |c| {
                format!("content-type {c:?}")
            });
        return reply::error(
            415,
            "unsupported_media_type",
            &format!(
                "{got} is not taken here: send an Arrow IPC stream ({}) or JSON lines ({})",
                body::ARROW_STREAM,
                body::JSON_LINES
            ),
            &[],
        );
    };
    if req.header("content-length").is_none() {
        return reply::error(
            411,
            "length_required",
            "an ingest body needs a content-length (chunked bodies are not taken)",
            &[],
        );
    }
    let length = req.content_length;
    if length == 0 {
        return reply::error(
            400,
            "bad_request",
            "the body is empty; send at least one row",
            &[],
        );
    }
    if length > settings.max_body_bytes as u64 {
        return reply::error(
            413,
            "payload_too_large",
            &format!(
                "a body of {length} bytes is over the ingest limit of {} bytes (max_body_bytes); send smaller batches",
                settings.max_body_bytes
            ),
            &[("max_body_bytes", settings.max_body_bytes.to_string())],
        );
    }
    let Some(slot) = Slot::acquire(settings.max_concurrent) else {
        return reply::error(
            503,
            "busy",
            &format!(
                "{} ingest requests are running, the most the server takes at once (max_concurrent); retry",
                settings.max_concurrent
            ),
            &[],
        );
    };
    // the seq's place in its id's lane, before `100 Continue`: a client that sends its next
    // request's head only once it has this one's gets its batches committed in seq order
    let entered = ask
        .ingest
        .as_ref()
        .and_then(|(id, seq)| seq.map(|s| lane::enter(ask.stream.index, id, s)));
    if req
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        let (res, _) = wr
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec())
            .await;
        if res.is_err() {
            return Vec::new();
        }
    }
    let length = length as usize;
    let mut body = held;
    body.reserve_exact(length.saturating_sub(body.len()));
    while body.len() < length {
        let room = (length - body.len()).min(1 << 20);
        match rt::timeout(BODY_READ_TIMEOUT, rd.read_into(body, room)).await {
            Some((Ok(n), back)) if n > 0 => body = back,
            Some(_) => {
                return reply::error(
                    400,
                    "bad_request",
                    "the connection ended before the whole body arrived",
                    &[],
                )
            }
            None => {
                return reply::error(
                    408,
                    "request_timeout",
                    &format!("no body bytes for {} s", BODY_READ_TIMEOUT.as_secs()),
                    &[],
                )
            }
        }
    }
    body.truncate(length);
    let job = Job {
        stream: ask.stream.clone(),
        writer: ctx.shared.writers[ask.stream.writer].clone(),
        format,
        body,
        limits: Limits {
            rows_max: settings.max_batch_rows,
            row_bytes_max: ask.stream.cfg.max_message_bytes,
        },
        ingest: ask
            .ingest
            .as_ref()
            .and_then(|(id, seq)| seq.map(|s| (id.clone(), s))),
        entered,
    };
    let (tx, rx) = flume::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("ingest".into())
        .spawn(move || {
            let _ = tx.send(job.run());
        });
    let outcome = match spawned {
        Ok(_) => rx.recv_async().await.unwrap_or(Outcome::WriterStopped),
        Err(e) => Outcome::Spawn(e.to_string()),
    };
    drop(slot);
    outcome.response(&ask)
}

/// One request's work for its worker thread.
struct Job {
    stream: Arc<Stream>,
    writer: crossbeam_channel::Sender<WriterMsg>,
    format: Format,
    body: Vec<u8>,
    limits: Limits,
    ingest: Option<(String, u64)>,
    entered: Option<lane::Entered>,
}

/// What became of a request's batch.
enum Outcome {
    Refused(BodyFault),
    Appended { rows: usize, reply: AppendReply },
    Superseded,
    WriterStopped,
    Spawn(String),
}

impl Job {
    /// Decodes and encodes the body, waits for room under `max_inbound`, hands the rows to the
    /// writer as one append and waits for its answer. Blocking: runs on its own thread.
    fn run(self) -> Outcome {
        let stream = &self.stream;
        let encoded = match body::decode(self.format, &self.body, &stream.codec, self.limits) {
            Ok(e) => e,
            Err(fault) => return Outcome::Refused(fault),
        };
        drop(self.body);
        let rows = encoded.ends.len();
        // this id's earlier batches first: a later one must not hold the room under
        // max_inbound that an earlier one waits for
        if let Some(entered) = &self.entered {
            entered.wait_turn();
        }
        while stream.inbound.load(Ordering::Acquire) >= stream.cfg.max_inbound {
            std::thread::sleep(Duration::from_micros(500));
        }
        stream.inbound.fetch_add(rows, Ordering::AcqRel);
        let (tx, rx) = flume::bounded(1);
        let id = self.ingest.as_ref().map(|(id, _)| id.clone());
        let msg = WriterMsg::Append(Append {
            stream: stream.index,
            generation: stream.generation,
            rows: encoded.rows,
            ends: encoded.ends,
            publisher: self.ingest,
            reply: tx,
        });
        let writer = &self.writer;
        let sent = match (self.entered, id) {
            // an exactly-once batch goes to the writer in its id's seq order, and under a claim
            // on the id, checked and sent atomically with respect to a takeover by a publisher
            // connection (as a publisher's frame is); the claim ends once the batch is queued
            (Some(entered), Some(id)) => entered.hand_over_and_leave(|| {
                let claim: Arc<Claim> = stream.claim(&id);
                let sent = claim.hand_over(|| writer.send(msg));
                stream.release(&id, &claim);
                sent
            }),
            _ => Some(writer.send(msg)),
        };
        match sent {
            Some(Ok(())) => match rx.recv() {
                Ok(reply) => Outcome::Appended { rows, reply },
                Err(_) => Outcome::WriterStopped,
            },
            Some(Err(_)) => {
                stream.inbound.fetch_sub(rows, Ordering::AcqRel);
                Outcome::WriterStopped
            }
            None => {
                stream.inbound.fetch_sub(rows, Ordering::AcqRel);
                Outcome::Superseded
            }
        }
    }
}

impl Outcome {
    fn response(self, ask: &Ask) -> Vec<u8> {
        let name = &ask.stream.cfg.name;
        match self {
            Outcome::Refused(fault) => {
                let (status, code) = match &fault {
                    BodyFault::NotArrow(_) | BodyFault::Empty => (400, "bad_request"),
                    BodyFault::TooManyRows { .. } | BodyFault::TooLarge { .. } => {
                        (413, "payload_too_large")
                    }
                    BodyFault::NotJson { .. } => (400, "bad_frame"),
                    BodyFault::Row(_) => (422, "rejected"),
                };
                let mut extra = Vec::new();
                if let Some(row) = fault.row() {
                    extra.push(("row", row.to_string()));
                }
                if let Some(column) = fault.column() {
                    extra.push((
                        "column",
                        sonic_rs::to_string(column).unwrap_or_else(|_| "null".into()),
                    ));
                }
                reply::error(status, code, &fault.to_string(), &extra)
            }
            Outcome::Appended { rows, reply } => match reply {
                AppendReply::Ok { offsets, dup } => Committed {
                    stream: name,
                    rows: rows as u64,
                    appended: (rows - dup) as u64,
                    duplicates: dup as u64,
                    first_offset: offsets.first().copied().flatten(),
                    last_offset: offsets.last().copied().flatten(),
                    ingest: ask
                        .ingest
                        .as_ref()
                        .and_then(|(id, seq)| seq.map(|s| (id.as_str(), s))),
                }
                .response(),
                AppendReply::Gap { expected, got } => reply::error(
                    409,
                    "seq_gap",
                    &format!(
                        "seq={got} is beyond the next seq of this ingest id, {expected}: rows {expected}..{} were never committed; resend from seq={expected}",
                        got - 1
                    ),
                    &[("expected", expected.to_string()), ("got", got.to_string())],
                ),
                AppendReply::CommitFailed(detail) => {
                    reply::error(503, "commit_failed", &detail, &[])
                }
            },
            Outcome::Superseded => reply::error(
                409,
                "superseded",
                "a publisher connection took this ingest id over as this batch was handed to the writer; nothing of this batch was committed",
                &[],
            ),
            Outcome::WriterStopped => writer_stopped(),
            Outcome::Spawn(e) => reply::error(
                503,
                "busy",
                &format!("cannot start an ingest worker: {e}"),
                &[],
            ),
        }
    }
}
