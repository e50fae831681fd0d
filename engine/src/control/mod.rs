//! The control plane, `/control/v1`: streams created, replaced, stopped, started, retired and
//! migrated over HTTP on a running broker, kept in `<data>/registry.db`.
//!
//! - [`http`] runs on the accepting shard: it routes the request, checks what the head alone
//!   decides (the switch, method, content type, `Idempotency-Key`, the body's size, refused
//!   before the body is read), reads the bounded body and hands a [`Call`] to the control
//!   thread; it writes the [`Answer`] back. A shard never waits on SQLite.
//! - The control thread ([`Control`], `corecast-control`) owns [`db::Db`]. It answers every
//!   call in arrival order from one bounded queue ([`CALLS_QUEUED_MAX`]; full: 503), commits each
//!   accepted mutation (declaration + operation + receipt, one transaction) before answering
//!   202, and then carries the operation out ([`apply`]): it opens the stream's log, hands it to
//!   the owning writer, gives every shard a hub, and only then puts the stream in the registry;
//!   stopping fences writes, wakes the stream's sessions (1001), stops its maintenance thread
//!   and has the writer commit what is queued and close the log.
//! - A migration (`POST …/migrations`) stops the stream, seals and publishes its log, starts
//!   the next log at the seam and serves it again ([`migrate`]); until it is done nothing else
//!   changes the stream (409 `transition_pending`), and a crash leaves it to be carried out
//!   again at start-up.
//! - [`decl`] checks a declaration; start-up (`server::start`) opens every managed stream in
//!   its desired state, and [`Control::start`] then marks the operations a crash left
//!   unfinished as done — each exactly once.
//!
//! `CORECAST_CONTROL_TEST_PAUSE_MS` (tests only) makes each accepted operation wait that long
//! before the control thread carries it out (calls are still answered meanwhile), so a test can
//! kill the process between accepting an operation and finishing it.

pub mod apply;
pub mod db;
pub mod decl;
pub mod http;
pub mod migrate;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::Digest;

use crate::registry::{now_us, StreamState};
use crate::shard::Shared;
use crate::tier::maintenance::Maintenance;
use db::{Accepted, Db, Op, Receipt, Row};

/// Calls waiting for the control thread; past it a request gets 503 `busy` with
/// `Retry-After: 1`.
pub const CALLS_QUEUED_MAX: usize = 64;

/// The largest `[control] max_streams`: managed streams one broker holds at most (each
/// durable one has a maintenance thread).
pub use crate::config::MANAGED_STREAMS_MAX;

/// Largest page of `GET /control/v1/streams`.
pub const LIST_LIMIT_MAX: usize = 1000;

/// The page size without `limit=`.
pub const LIST_LIMIT_DEFAULT: usize = 100;

/// Longest `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;

/// The environment variable that pauses the control thread before each operation (tests).
pub const TEST_PAUSE_ENV: &str = "CORECAST_CONTROL_TEST_PAUSE_MS";

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/control/v1`: the capabilities.
    Root,
    /// `/control/v1/streams`: the collection.
    Streams,
    /// `/control/v1/streams/{name}`.
    Stream(String),
    /// `/control/v1/streams/{name}/desired`.
    Desired(String),
    /// `/control/v1/streams/{name}/migrations` (`POST`: a new schema, a new log).
    Migrations(String),
    /// `/control/v1/operations/{id}`.
    Operation(String),
}

/// A request for the control thread, checked as far as its head goes.
pub struct Call {
    /// A mutation (`PUT`, or the `POST` of a migration) rather than a `GET`.
    pub put: bool,
    /// What it addresses.
    pub route: Route,
    /// The raw query (GET of the collection: `limit`, `cursor`).
    pub query: String,
    /// `If-Match`.
    pub if_match: Option<String>,
    /// `If-None-Match`.
    pub if_none_match: Option<String>,
    /// `Idempotency-Key` (checked well-formed; mutations only).
    pub key: Option<String>,
    /// The body (mutations only).
    pub body: Vec<u8>,
    /// Where the answer goes.
    pub reply: flume::Sender<Answer>,
}

/// A message to the control thread.
pub enum ControlMsg {
    /// Answer a request.
    Call(Call),
    /// Finish the operation under way and exit (shutdown).
    Stop,
}

/// One HTTP answer: status, extra headers, JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// `ETag`, when the answer names a revision.
    pub etag: Option<String>,
    /// `Location`, for an accepted operation.
    pub location: Option<String>,
    /// The JSON body.
    pub body: String,
}

impl Answer {
    /// A JSON answer without extra headers.
    pub fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            etag: None,
            location: None,
            body: body.to_string(),
        }
    }

    /// The error body `{"error":{"code","message","retryable","operation_id"}}`; 503 is the only
    /// retryable status here.
    pub fn error(status: u16, code: &str, message: &str) -> Answer {
        Answer::json(
            status,
            json!({"error": {"code": code, "message": message, "retryable": status == 503, "operation_id": null}}),
        )
    }

    /// The whole HTTP response.
    pub fn response(&self) -> Vec<u8> {
        let mut head = corecast_net::http::response::ResponseHead::new(self.status)
            .header("content-type", "application/json")
            .header("cache-control", "no-store");
        if let Some(e) = &self.etag {
            head = head.header("etag", e);
        }
        if let Some(l) = &self.location {
            head = head.header("location", l);
        }
        if self.status == 503 {
            head = head.header("retry-after", "1");
        }
        head.finish(self.body.as_bytes())
    }
}

/// The quoted decimal revision, e.g. `"3"`.
pub fn etag(revision: u64) -> String {
    format!("\"{revision}\"")
}

/// The revision an `If-Match` value names: one quoted decimal (a weak `W/` tag or a list is
/// refused: a precondition must name exactly one revision).
pub fn parse_etag(v: &str) -> Option<u64> {
    let inner = v.trim().strip_prefix('"')?.strip_suffix('"')?;
    if inner.is_empty() || inner.len() > 19 || !inner.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inner.parse().ok()
}

/// Whether `key` is a well-formed `Idempotency-Key`: 1 to 128 printable ASCII characters, no
/// spaces.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= IDEMPOTENCY_KEY_BYTES_MAX
        && key.bytes().all(|b| b.is_ascii_graphic())
}

/// The running control thread.
pub struct Control {
    tx: crossbeam_channel::Sender<ControlMsg>,
    thread: std::thread::JoinHandle<()>,
}

/// What the control thread needs besides the shared state.
pub struct Setup {
    /// The registry, opened by start-up.
    pub db: Db,
    /// The data directory (canonical).
    pub data_dir: PathBuf,
    /// How to reach S3 for published locations.
    pub s3: corecast_storage::published::S3Options,
    /// The maintenance threads of the managed streams opened at start-up, by stream index.
    pub maintenance: HashMap<usize, Maintenance>,
    /// Largest mutation body, for the capabilities document.
    pub body_bytes_max: usize,
    /// Most streams the registry holds, retired ones included (`[control] max_streams`).
    pub max_streams: u64,
}

impl Control {
    /// The channel shards send calls on (bounded: [`CALLS_QUEUED_MAX`]).
    pub fn channel() -> (
        crossbeam_channel::Sender<ControlMsg>,
        crossbeam_channel::Receiver<ControlMsg>,
    ) {
        crossbeam_channel::bounded(CALLS_QUEUED_MAX)
    }

    /// Finishes what a crash left unfinished (start-up opened every managed stream in its
    /// desired state), then starts the thread serving `rx`.
    pub fn start(
        setup: Setup,
        shared: Arc<Shared>,
        tx: crossbeam_channel::Sender<ControlMsg>,
        rx: crossbeam_channel::Receiver<ControlMsg>,
    ) -> Result<Control, String> {
        let pause = std::env::var(TEST_PAUSE_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        let mut thread = ControlThread {
            db: setup.db,
            shared,
            data_dir: setup.data_dir,
            s3: setup.s3,
            maintenance: setup.maintenance,
            boot_id: uuid::Uuid::new_v4().to_string(),
            body_bytes_max: setup.body_bytes_max,
            max_streams: setup.max_streams,
            pending: VecDeque::new(),
            pause,
        };
        thread
            .finish_startup()
            .map_err(|e| format!("registry.db: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("corecast-control".into())
            .spawn(move || thread.run(rx))
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        Ok(Control { tx, thread })
    }

    /// Stops the thread after the operation under way, and its streams' maintenance threads.
    pub fn stop(self) {
        let _ = self.tx.send(ControlMsg::Stop);
        let _ = self.thread.join();
    }
}

/// The control thread's state.
pub(crate) struct ControlThread {
    pub(crate) db: Db,
    pub(crate) shared: Arc<Shared>,
    pub(crate) data_dir: PathBuf,
    pub(crate) s3: corecast_storage::published::S3Options,
    /// The managed streams' maintenance threads, by stream index.
    pub(crate) maintenance: HashMap<usize, Maintenance>,
    boot_id: String,
    body_bytes_max: usize,
    max_streams: u64,
    /// Accepted operations not carried out yet, oldest first, each with when it is due.
    pending: VecDeque<(String, Instant)>,
    pause: Option<Duration>,
}

/// How long before an operation whose outcome could not be recorded is carried out again.
const OUTCOME_RETRY: Duration = Duration::from_secs(5);

fn db_failed(e: rusqlite::Error) -> Answer {
    tracing::error!("registry.db: {e}");
    Answer::error(
        503,
        "registry_unavailable",
        "the registry could not be read or written; the broker's log has the cause",
    )
}

fn stream_json(row: &Row, pending: Option<&Op>, end_offset: Option<u64>) -> Value {
    json!({
        "name": row.name,
        "origin": "managed",
        "declaration": serde_json::from_str::<Value>(&row.declaration).unwrap_or(Value::Null),
        "desired": row.desired.as_str(),
        "observed": row.observed.as_str(),
        "revision": row.revision,
        "stream_id": row.stream_id,
        "end_offset": end_offset,
        "retired_at_us": (row.retired_at_us > 0).then_some(row.retired_at_us),
        "pending_operation": pending.map(op_json),
    })
}

fn op_json(op: &Op) -> Value {
    json!({
        "id": op.id,
        "stream": op.stream,
        "kind": op.kind,
        "state": op.state,
        "revision": op.revision,
        "error": op.error.as_ref().map(|m| json!({"code": "operation_failed", "message": m})),
        "created_us": op.created_us,
        "updated_us": op.updated_us,
    })
}

/// The list cursor: the collection revision and the last name of the page, hex-encoded.
fn cursor_encode(revision: u64, last: &str) -> String {
    hex::encode(format!("{revision}:{last}"))
}

fn cursor_decode(c: &str) -> Option<(u64, String)> {
    let text = String::from_utf8(hex::decode(c).ok()?).ok()?;
    let (rev, name) = text.split_once(':')?;
    Some((rev.parse().ok()?, name.to_string()))
}

impl ControlThread {
    fn run(mut self, rx: crossbeam_channel::Receiver<ControlMsg>) {
        loop {
            // one operation at a time, interleaved with calls: a long open never holds up an
            // answer for more than that one operation, and an operation that is due runs
            // before the next call (a client polling its status in a tight loop would
            // otherwise keep it waiting for ever). An operation is due at once, or after the
            // test pause: calls are answered while it waits.
            let msg = match self.pending.front() {
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                },
                Some((_, due)) => {
                    let wait = due.saturating_duration_since(Instant::now());
                    if wait.is_zero() {
                        None
                    } else {
                        match rx.recv_timeout(wait) {
                            Ok(m) => Some(m),
                            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                        }
                    }
                }
            };
            match msg {
                Some(ControlMsg::Call(call)) => {
                    let reply = call.reply.clone();
                    let answer = self.answer(call);
                    let _ = reply.send(answer);
                    continue;
                }
                Some(ControlMsg::Stop) => break,
                None => {}
            }
            if let Some((id, _)) = self.pending.pop_front() {
                self.carry_out(&id);
            }
        }
        for (_, m) in self.maintenance.drain() {
            m.stop();
        }
    }

    /// Start-up opened every managed stream in its desired state: what is observed is what
    /// was desired, and every operation left unfinished by a crash is done (exactly once:
    /// [`Db::set_op`] moves only unfinished ones).
    fn finish_startup(&mut self) -> rusqlite::Result<()> {
        let registry = self.shared.registry.load();
        for row in self.db.streams()? {
            if let Some(st) = registry.get(&row.name) {
                self.db.set_observed(
                    &row.name,
                    st.state(),
                    st.stream_id.as_deref(),
                    st.retired_at_us.load(std::sync::atomic::Ordering::SeqCst),
                )?;
            }
        }
        for op in self.db.pending()? {
            // a migration a stop or crash cut short is carried out again (each step is
            // idempotent; the stream stayed stopped at start-up)
            if op.kind == "migrate" {
                tracing::info!(operation = %op.id, stream = %op.stream, "carrying on with a migration accepted before the last stop");
                self.pending.push_back((op.id.clone(), Instant::now()));
                continue;
            }
            let reached = match (self.db.stream(&op.stream)?, registry.get(&op.stream)) {
                (Some(row), Some(st)) => row.desired == st.state(),
                _ => false,
            };
            let (state, error) = if reached {
                ("succeeded", None)
            } else {
                (
                    "failed",
                    Some("the stream could not be opened at start-up; the broker's log has the cause"),
                )
            };
            if self.db.set_op(&op.id, state, error)? {
                tracing::info!(operation = %op.id, stream = %op.stream, kind = %op.kind, state, "finished at start-up an operation accepted before the last stop");
            }
        }
        Ok(())
    }

    fn answer(&mut self, call: Call) -> Answer {
        let res = match (&call.route, call.put) {
            (Route::Root, false) => self.capabilities(),
            (Route::Streams, false) => self.list(&call.query),
            (Route::Stream(name), false) => self.get(name),
            (Route::Operation(id), false) => match self.db.operation(id) {
                Ok(Some(op)) => Ok(Answer::json(200, op_json(&op))),
                Ok(None) => Ok(Answer::error(
                    404,
                    "not_found",
                    &format!("no operation {id}"),
                )),
                Err(e) => Err(e),
            },
            (Route::Stream(_), true) | (Route::Desired(_), true) | (Route::Migrations(_), true) => {
                self.mutate(&call)
            }
            _ => Ok(Answer::error(
                405,
                "method_not_allowed",
                "this control path does not take that method",
            )),
        };
        res.unwrap_or_else(db_failed)
    }

    fn capabilities(&self) -> rusqlite::Result<Answer> {
        Ok(Answer::json(
            200,
            json!({
                "contract": "control/v1",
                "broker_id": self.db.broker_id()?,
                "boot_id": self.boot_id,
                "bounds": {
                    "list_limit_max": LIST_LIMIT_MAX,
                    "list_limit_default": LIST_LIMIT_DEFAULT,
                    "idempotency_key_bytes_max": IDEMPOTENCY_KEY_BYTES_MAX,
                    "body_bytes_max": self.body_bytes_max,
                    "managed_streams_max": self.max_streams,
                },
                "wire_versions": {"write": 4, "read": [4, 5]},
                "states": ["serving", "stopped", "retired"],
                "declaration_keys": decl::KEYS,
                "limit_keys": decl::LIMIT_KEYS,
            }),
        ))
    }

    /// The JSON of stream `name` and its revision: managed (registry.db) or static (TOML).
    fn describe(&self, name: &str) -> rusqlite::Result<Option<(Value, u64)>> {
        let registry = self.shared.registry.load();
        let live = registry.get(name);
        // a stopped stream's log is closed: its frontier is not known until it opens again
        let end = live
            .filter(|s| s.durable() && s.state() != StreamState::Stopped)
            .map(|s| s.end.load(std::sync::atomic::Ordering::Acquire));
        if let Some(st) = live.filter(|s| !s.managed) {
            let v = json!({
                "name": name,
                "origin": "static",
                "declaration": decl::canonical(&st.cfg),
                "desired": "serving",
                "observed": st.state().as_str(),
                "revision": 0,
                "stream_id": st.stream_id,
                "end_offset": end,
                "retired_at_us": null,
                "pending_operation": null,
            });
            return Ok(Some((v, 0)));
        }
        let Some(row) = self.db.stream(name)? else {
            return Ok(None);
        };
        let pending = self.db.pending_on(name)?;
        let mut v = stream_json(&row, pending.as_ref(), end);
        // the live log: its name and first offset (the seam of the last migration); a
        // `durable: false` stream keeps none
        let durable = v["declaration"]["durable"] == json!(true);
        if let Some(logs) = durable
            .then(|| crate::tier::generations::load(&self.data_dir.join(name), name).ok())
            .flatten()
        {
            v["log"] = json!({
                "name": logs.live.name,
                "start_offset": logs.live.start_offset,
                "sealed_logs": logs.sealed.len(),
            });
        }
        Ok(Some((v, row.revision)))
    }

    fn get(&self, name: &str) -> rusqlite::Result<Answer> {
        Ok(match self.describe(name)? {
            Some((v, rev)) => Answer {
                etag: Some(etag(rev)),
                ..Answer::json(200, v)
            },
            None => Answer::error(404, "not_found", &format!("no stream {name}")),
        })
    }

    fn list(&self, query: &str) -> rusqlite::Result<Answer> {
        let q = corecast_net::http::query::Query::parse(query.as_bytes());
        if let Some(m) = crate::session::route::unknown_params_listed(&q, &["limit", "cursor"]) {
            return Ok(Answer::error(400, "bad_request", &m));
        }
        let limit = match q.get("limit") {
            None => LIST_LIMIT_DEFAULT,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => n,
                _ => {
                    return Ok(Answer::error(
                        400,
                        "bad_request",
                        &format!("limit={raw} is not a whole number in 1..={LIST_LIMIT_MAX}"),
                    ))
                }
            },
        };
        let revision = self.db.collection_revision()?;
        let after = match q.get("cursor") {
            None => None,
            Some(raw) => match cursor_decode(raw) {
                None => {
                    return Ok(Answer::error(
                        400,
                        "bad_request",
                        "cursor= is not a cursor this broker made (pass the next_cursor of a page)",
                    ))
                }
                Some((rev, _)) if rev != revision => {
                    return Ok(Answer::error(
                        409,
                        "cursor_stale",
                        &format!("the collection changed since this cursor was made (revision {rev}, now {revision}); list again from the first page"),
                    ))
                }
                Some((_, name)) => Some(name),
            },
        };
        let registry = self.shared.registry.load();
        let mut names: Vec<String> = registry
            .streams
            .iter()
            .filter(|s| !s.managed)
            .map(|s| s.cfg.name.clone())
            .chain(self.db.streams()?.into_iter().map(|r| r.name))
            .filter(|n| after.as_deref().is_none_or(|a| n.as_str() > a))
            .collect();
        names.sort();
        names.dedup();
        let more = names.len() > limit;
        names.truncate(limit);
        let mut items = Vec::with_capacity(names.len());
        for n in &names {
            if let Some((v, _)) = self.describe(n)? {
                items.push(v);
            }
        }
        let next = match (more, names.last()) {
            (true, Some(last)) => Some(cursor_encode(revision, last)),
            _ => None,
        };
        Ok(Answer::json(
            200,
            json!({"revision": revision, "streams": items, "next_cursor": next}),
        ))
    }

    /// A `PUT`: the receipt of a retry, or the mutation checked, committed and queued.
    fn mutate(&mut self, call: &Call) -> rusqlite::Result<Answer> {
        let key = call
            .key
            .as_deref()
            .expect("the shard checked the Idempotency-Key of a mutation");
        let (name, what): (&str, &[u8]) = match &call.route {
            Route::Stream(n) => (n.as_str(), b"stream\0"),
            Route::Desired(n) => (n.as_str(), b"desired\0"),
            Route::Migrations(n) => (n.as_str(), b"migration\0"),
            _ => unreachable!("only stream routes mutate"),
        };
        // the intent is what the request asks, not how its JSON was spelt: a retry that
        // re-serialises the same body (other spacing) is the same request; the order of keys
        // counts (that of a schema's properties is its column order)
        let intent = {
            let mut h = sha2::Sha256::new();
            h.update(what);
            h.update(name.as_bytes());
            h.update(b"\0");
            match serde_json::from_slice::<Value>(&call.body) {
                Ok(v) => h.update(v.to_string().as_bytes()),
                Err(_) => h.update(&call.body),
            }
            hex::encode(h.finalize())
        };
        if let Some(r) = self.db.receipt(key)? {
            if r.intent != intent {
                return Ok(Answer::error(
                    409,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used for a different request; use a new key for a new request",
                ));
            }
            return Ok(Answer {
                status: r.status,
                etag: Some(r.etag),
                location: r.location,
                body: r.body,
            });
        }
        if !crate::config::valid_stream_name(name) {
            return Ok(Answer::error(
                400,
                "bad_request",
                "a stream name matches [A-Za-z0-9][A-Za-z0-9_.-]{0,127}",
            ));
        }
        // a stream's directory is <data>/<name>: the registry's own files are not streams
        if name.starts_with(db::FILE) {
            return Ok(Answer::error(
                400,
                "bad_request",
                &format!("{name} is reserved (the registry's own file); pick another stream name"),
            ));
        }
        let body: Value = match corecast_storage::json::parse_unique(&call.body)
            .map_err(|e| e.to_string())
            .and_then(|_| serde_json::from_slice(&call.body).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                return Ok(Answer::error(
                    400,
                    "bad_request",
                    &format!("the body is not a JSON object with unique keys: {e}"),
                ))
            }
        };
        let registry = self.shared.registry.load();
        if registry.get(name).is_some_and(|s| !s.managed) {
            return Ok(Answer::error(
                409,
                "static_stream",
                &format!("stream {name} is declared in the config file: it is static, and changes only with the file and a restart"),
            ));
        }
        drop(registry);
        let row = self.db.stream(name)?;
        // a migration is one irreversible step: nothing else changes the stream until it is done
        if let Some(op) = self.db.pending_on(name)? {
            let migrating = op.kind == "migrate";
            if migrating || matches!(call.route, Route::Migrations(_)) {
                return Ok(Answer::error(
                    409,
                    "transition_pending",
                    &format!(
                        "stream {name} has an unfinished {} operation ({}); wait for it (GET /control/v1/operations/{})",
                        op.kind, op.id, op.id
                    ),
                ));
            }
        }
        let prepared = match &call.route {
            Route::Desired(_) => self.prepare_desired(name, row, call, &body)?,
            Route::Migrations(_) => self.prepare_migration(name, row, call, &body)?,
            _ => self.prepare_put(name, row, call, &body)?,
        };
        let (row, kind) = match prepared {
            Prepared::Refused(a) => return Ok(a),
            Prepared::Satisfied(row) => {
                let receipt = Receipt {
                    intent,
                    status: 200,
                    body: json!({"operation_id": null, "stream": name, "revision": row.revision, "satisfied": true}).to_string(),
                    etag: etag(row.revision),
                    location: None,
                };
                self.db.accept_noop(key, &receipt)?;
                return Ok(Answer {
                    status: 200,
                    etag: Some(receipt.etag),
                    location: None,
                    body: receipt.body,
                });
            }
            Prepared::Change(row, kind) => (row, kind),
        };
        let now = now_us();
        let op = Op {
            id: uuid::Uuid::new_v4().to_string(),
            stream: name.to_string(),
            kind: kind.to_string(),
            state: "accepted".into(),
            revision: row.revision,
            error: None,
            created_us: now,
            updated_us: now,
        };
        let location = format!("/control/v1/operations/{}", op.id);
        let receipt = Receipt {
            intent,
            status: 202,
            body: json!({"operation_id": op.id, "stream": name, "revision": row.revision, "state": "accepted"}).to_string(),
            etag: etag(row.revision),
            location: Some(location),
        };
        self.db.accept(Accepted {
            row: &row,
            op: &op,
            receipt: (key, &receipt),
        })?;
        let due = Instant::now() + self.pause.unwrap_or(Duration::ZERO);
        self.pending.push_back((op.id, due));
        Ok(Answer {
            status: 202,
            etag: Some(receipt.etag),
            location: receipt.location,
            body: receipt.body,
        })
    }

    fn prepare_put(
        &self,
        name: &str,
        row: Option<Row>,
        call: &Call,
        body: &Value,
    ) -> rusqlite::Result<Prepared> {
        let refuse = |s: u16, code: &str, m: &str| Ok(Prepared::Refused(Answer::error(s, code, m)));
        let create = match (call.if_none_match.as_deref(), call.if_match.as_deref()) {
            (None, None) => {
                return refuse(
                    428,
                    "precondition_required",
                    "a PUT needs If-None-Match: * to create the stream, or If-Match with its ETag to replace it",
                )
            }
            (Some(_), Some(_)) => {
                return refuse(
                    412,
                    "precondition_malformed",
                    "pass one of If-None-Match: * (create) or If-Match (replace), not both",
                )
            }
            (Some(inm), None) if inm.trim() != "*" => {
                return refuse(
                    412,
                    "precondition_malformed",
                    "If-None-Match takes * only (create the stream when it does not exist)",
                )
            }
            (Some(_), None) => true,
            (None, Some(im)) => match parse_etag(im) {
                None => {
                    return refuse(
                        412,
                        "precondition_malformed",
                        "If-Match takes one quoted decimal revision, the ETag of GET, e.g. \"3\"",
                    )
                }
                Some(rev) => match &row {
                    None => {
                        return refuse(
                            412,
                            "precondition_failed",
                            &format!("stream {name} does not exist; create it with If-None-Match: *"),
                        )
                    }
                    Some(r) if r.revision != rev => {
                        return refuse(
                            412,
                            "precondition_failed",
                            &format!("stream {name} is at revision {}, not {rev}; GET it and retry with its ETag", r.revision),
                        )
                    }
                    Some(_) => false,
                },
            },
        };
        if create {
            if let Some(r) = &row {
                return refuse(
                    412,
                    "precondition_failed",
                    &format!(
                        "stream {name} exists (revision {}); replace it with If-Match",
                        r.revision
                    ),
                );
            }
        }
        let declaration = match decl::parse(name, body) {
            Ok(d) => d,
            Err(decl::DeclError::Invalid(m)) => return refuse(400, "bad_request", &m),
            Err(decl::DeclError::Schema(m)) => return refuse(422, "unsupported_schema", &m),
        };
        match row {
            None => {
                // a directory left by an earlier stream of the name (one removed from the
                // configuration file) holds a log of its own: opening it under this declaration
                // would serve or refuse that data, so the operator moves it first
                let home = self.data_dir.join(name);
                if std::fs::read_dir(&home).is_ok_and(|mut d| d.next().is_some()) {
                    return refuse(
                        409,
                        "data_exists",
                        &format!("the data directory already holds data for a stream named {name} (an earlier stream of that name, e.g. one removed from the configuration file); move the directory {name} out of the data directory, or pick another name"),
                    );
                }
                let held = self.db.count()?;
                if held >= self.max_streams {
                    let retired = self.db.count_retired()?;
                    return refuse(
                        409,
                        "too_many_streams",
                        &format!("the registry holds {held} streams ({retired} of them retired, which keep their names and history for good), its most: [control] max_streams = {}; raise it (at most {MANAGED_STREAMS_MAX}) and restart the broker", self.max_streams),
                    );
                }
                Ok(Prepared::Change(
                    Row {
                        name: name.to_string(),
                        declaration: declaration.canonical,
                        desired: StreamState::Serving,
                        observed: StreamState::Stopped,
                        revision: 1,
                        stream_id: None,
                        retired_at_us: 0,
                    },
                    "create",
                ))
            }
            Some(r) => {
                if r.desired == StreamState::Retired {
                    return refuse(
                        409,
                        "stream_retired",
                        &format!(
                            "stream {name} is retired; a retired stream's declaration is final"
                        ),
                    );
                }
                if r.declaration == declaration.canonical {
                    return Ok(Prepared::Satisfied(r));
                }
                let old: Value = serde_json::from_str(&r.declaration).unwrap_or(Value::Null);
                let new: Value =
                    serde_json::from_str(&declaration.canonical).unwrap_or(Value::Null);
                // compared as text: a JSON map compares equal whatever its key order, but the
                // order of `properties` is the rows' column order, so a reordered schema is a
                // different schema
                let text = |v: &Value, k: &str| v.get(k).map(Value::to_string);
                if text(&old, "schema") != text(&new, "schema") {
                    return refuse(409, "migration_required", &format!("the schema of stream {name} differs from its log's (the order of properties counts: it is the column order): a schema change is a migration (POST /control/v1/streams/{name}/migrations with {{\"schema\": …}})"));
                }
                if old.get("durable") != new.get("durable") {
                    return refuse(
                        409,
                        "durability_fixed",
                        &format!("stream {name}'s durable setting is fixed when it is created"),
                    );
                }
                Ok(Prepared::Change(
                    Row {
                        declaration: declaration.canonical,
                        revision: r.revision + 1,
                        ..r
                    },
                    "replace",
                ))
            }
        }
    }

    /// The stream's row when `call`'s If-Match names its current revision, else the refusal:
    /// 428 without If-Match (`what` needs it: "a migration", ...), 412 for a malformed or stale
    /// ETag, 404 for no stream `name`.
    fn matched_row(name: &str, row: Option<Row>, call: &Call, what: &str) -> Result<Row, Answer> {
        let Some(im) = call.if_match.as_deref() else {
            return Err(Answer::error(
                428,
                "precondition_required",
                &format!("{what} needs If-Match with the stream's ETag"),
            ));
        };
        let Some(rev) = parse_etag(im) else {
            return Err(Answer::error(
                412,
                "precondition_malformed",
                "If-Match takes one quoted decimal revision, the ETag of GET, e.g. \"3\"",
            ));
        };
        let Some(row) = row else {
            return Err(Answer::error(
                404,
                "not_found",
                &format!("no stream {name}"),
            ));
        };
        if row.revision != rev {
            return Err(Answer::error(
                412,
                "precondition_failed",
                &format!(
                    "stream {name} is at revision {}, not {rev}; GET it and retry with its ETag",
                    row.revision
                ),
            ));
        }
        Ok(row)
    }

    fn prepare_desired(
        &self,
        name: &str,
        row: Option<Row>,
        call: &Call,
        body: &Value,
    ) -> rusqlite::Result<Prepared> {
        let refuse = |s: u16, code: &str, m: &str| Ok(Prepared::Refused(Answer::error(s, code, m)));
        let row = match Self::matched_row(name, row, call, "a change of desired state") {
            Ok(row) => row,
            Err(refusal) => return Ok(Prepared::Refused(refusal)),
        };
        let state = match body.as_object() {
            Some(o) if o.len() == 1 => o.get("state").and_then(Value::as_str),
            _ => None,
        };
        let Some(to) = state.and_then(StreamState::parse) else {
            return refuse(
                400,
                "bad_request",
                "the body is {\"state\": \"serving\" | \"stopped\" | \"retired\"} and nothing else",
            );
        };
        if row.desired == to {
            return Ok(Prepared::Satisfied(row));
        }
        if row.desired == StreamState::Retired {
            return refuse(
                409,
                "stream_retired",
                &format!("stream {name} is retired, which is final: a retired stream is not revived over the control plane (nor by streamcast's); its data stays readable, and a new stream takes new rows"),
            );
        }
        Ok(Prepared::Change(
            Row {
                desired: to,
                revision: row.revision + 1,
                ..row
            },
            "desired",
        ))
    }

    /// Checks a migration (`POST …/migrations`, body `{"schema": …}`, optionally the stream's
    /// `stream_id` and `sort_by: []`): the stream's row with the new schema, or the refusal.
    fn prepare_migration(
        &self,
        name: &str,
        row: Option<Row>,
        call: &Call,
        body: &Value,
    ) -> rusqlite::Result<Prepared> {
        let refuse = |s: u16, code: &str, m: &str| Ok(Prepared::Refused(Answer::error(s, code, m)));
        let row = match Self::matched_row(name, row, call, "a migration") {
            Ok(row) => row,
            Err(refusal) => return Ok(Prepared::Refused(refusal)),
        };
        let Some(obj) = body.as_object() else {
            return refuse(
                400,
                "bad_request",
                "a migration's body is a JSON object: {\"schema\": {…}}",
            );
        };
        if let Some(k) = obj
            .keys()
            .find(|k| !["schema", "stream_id", "sort_by"].contains(&k.as_str()))
        {
            return refuse(
                400,
                "bad_request",
                &format!("unknown key {k:?} in a migration (it takes schema, and optionally stream_id and sort_by)"),
            );
        }
        let Some(schema) = obj.get("schema") else {
            return refuse(
                400,
                "bad_request",
                "a migration needs \"schema\": the stream's new JSON Schema",
            );
        };
        if obj.get("sort_by").is_some_and(|v| v != &json!([])) {
            return refuse(
                422,
                "unsupported_schema",
                "sort_by: this broker writes every log in offset order; pass [] or leave it out",
            );
        }
        if let Some(id) = obj.get("stream_id") {
            if row.stream_id.is_none() || id.as_str() != row.stream_id.as_deref() {
                return refuse(
                    409,
                    "identity_mismatch",
                    &format!(
                        "stream_id does not name stream {name}'s log (GET it for its stream_id)"
                    ),
                );
            }
        }
        if row.desired == StreamState::Retired {
            return refuse(
                409,
                "stream_retired",
                &format!("stream {name} is retired, which is final: its log is not migrated"),
            );
        }
        let mut declaration: Value = serde_json::from_str(&row.declaration).unwrap_or(Value::Null);
        declaration["schema"] = schema.clone();
        let parsed = match decl::parse(name, &declaration) {
            Ok(d) => d,
            Err(decl::DeclError::Invalid(m)) => return refuse(400, "bad_request", &m),
            Err(decl::DeclError::Schema(m)) => return refuse(422, "unsupported_schema", &m),
        };
        if let Err(m) = migrate::migratable(&parsed.cfg) {
            return refuse(409, "not_migratable", &m);
        }
        // the same schema again is a no-op once its log is there; after a failed migration it
        // is the retry that finishes it
        if parsed.canonical == row.declaration && migrate::applied(&parsed.cfg, &self.data_dir) {
            return Ok(Prepared::Satisfied(row));
        }
        Ok(Prepared::Change(
            Row {
                declaration: parsed.canonical,
                revision: row.revision + 1,
                ..row
            },
            "migrate",
        ))
    }

    /// Carries out operation `id`: converges its stream on the latest row (a later operation
    /// on the same stream makes this one's work part of it), then records the outcome.
    fn carry_out(&mut self, id: &str) {
        let step = |db: &Db, state: &str, error: Option<&str>| match db.set_op(id, state, error) {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(operation = id, "registry.db: {e}");
                false
            }
        };
        let op = match self.db.operation(id) {
            Ok(Some(op)) => op,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(operation = id, "registry.db: {e}");
                return;
            }
        };
        step(&self.db, "running", None);
        // an outcome the registry could not record (a full disk) is not left `running`: the
        // operation is carried out again (converging is idempotent) until its outcome is written
        let retry = |pending: &mut VecDeque<(String, Instant)>| {
            tracing::warn!(
                operation = id,
                "the outcome could not be recorded; trying again in {} s",
                OUTCOME_RETRY.as_secs()
            );
            pending.push_back((id.to_string(), Instant::now() + OUTCOME_RETRY));
        };
        let row = match self.db.stream(&op.stream) {
            Ok(Some(r)) => r,
            Ok(None) => {
                step(
                    &self.db,
                    "failed",
                    Some("the stream is no longer in the registry"),
                );
                return;
            }
            Err(e) => {
                tracing::error!(operation = id, "registry.db: {e}");
                return;
            }
        };
        let done = if op.kind == "migrate" {
            self.migrate(&row)
        } else {
            self.converge(&row)
        };
        // what the stream is now, whatever the outcome (a failed migration leaves it stopped)
        let registry = self.shared.registry.load();
        if let Some(st) = registry.get(&row.name) {
            if let Err(e) = self.db.set_observed(
                &row.name,
                st.state(),
                st.stream_id.as_deref(),
                st.retired_at_us.load(std::sync::atomic::Ordering::SeqCst),
            ) {
                tracing::error!(stream = %row.name, "registry.db: {e}");
            }
        }
        drop(registry);
        match done {
            Ok(()) => {
                if !step(&self.db, "succeeded", None) {
                    return retry(&mut self.pending);
                }
                tracing::info!(operation = id, stream = %row.name, kind = %op.kind, desired = row.desired.as_str(), "operation succeeded");
            }
            Err(cause) => {
                // the cause may name paths: the log has it, the operation a message without
                tracing::error!(operation = id, stream = %row.name, "operation failed: {cause}");
                if !step(
                    &self.db,
                    "failed",
                    Some("the stream could not be brought to its desired state; the broker's log has the cause"),
                ) {
                    retry(&mut self.pending);
                }
            }
        }
    }
}

/// What a mutation comes to once checked.
enum Prepared {
    /// Refused: the answer says why.
    Refused(Answer),
    /// Already so: 200, nothing changes.
    Satisfied(Row),
    /// A change: the stream's new row and the operation's kind.
    Change(Row, &'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_and_keys() {
        assert_eq!(etag(3), "\"3\"");
        assert_eq!(parse_etag("\"3\""), Some(3));
        assert_eq!(parse_etag(" \"12\" "), Some(12));
        for bad in ["3", "W/\"3\"", "\"\"", "\"3\", \"4\"", "\"x\"", "*"] {
            assert_eq!(parse_etag(bad), None, "{bad}");
        }
        assert!(valid_key("a-1_B.c:d"));
        assert!(!valid_key(""));
        assert!(!valid_key("a b"));
        assert!(!valid_key("é"));
        assert!(!valid_key(&"k".repeat(129)));
        assert!(valid_key(&"k".repeat(128)));
    }

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let c = cursor_encode(7, "orders");
        assert_eq!(cursor_decode(&c), Some((7, "orders".into())));
        assert_eq!(cursor_decode("zz"), None);
        assert_eq!(cursor_decode(&hex::encode("nocolon")), None);
    }
}
