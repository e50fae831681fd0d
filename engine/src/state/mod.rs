//! Keyed state: the latest row per key of a keyed stream (`key = [...]` in its config), kept
//! off the serving threads, checkpointed, and served as a snapshot followed by the live rows.
//!
//! One **state thread** per keyed stream (`corecast-state-NAME`) owns the entity map
//! ([`fold::StateMap`]). In, over two bounded channels created at start-up:
//! - the stream's committed batches, sent by the owner writer right after it hands them to the
//!   shards (`state inbox`, [`STATE_INBOX_BATCHES`]; at the bound the writer waits, and the
//!   publishers then wait on `max_inbound`, exactly as for a full shard inbox);
//! - readers' requests from the shards (`state requests`, [`STATE_REQUESTS`]; a shard only
//!   `try_send`s, and a full queue answers [`Unavailable::Busy`] — a shard never blocks).
//!
//! Out: a [`Snapshot`] — the entities whose latest row passes the reader's `where=`, in
//! version (offset) order, already rendered as WebSocket frames or SSE events (the same
//! `[offset,ts,row]` bytes a replay of those rows sends), and the offset `at` it is the state
//! of. The reader then continues from `at` through the ring or the reader pool like any
//! subscriber, so offsets strictly increase across the join and none is missed or repeated.
//!
//! Recovery: at start the thread reads the checkpoint ([`checkpoint`]; position C) and folds
//! the log's tail `[C, end)` through the reader pool (all tiers), then the live batches, which
//! wait in the state inbox meanwhile. A checkpoint is taken every `checkpoint_every_s` (when
//! the state moved) and at shutdown: encoded here, written to disk by the stream's checkpoint
//! writer thread (`corecast-ckpt-NAME`, one at a time), so no `fsync` holds up the fold. Rows the tail needs that no tier holds any more, or a key
//! refused at `max_keys`, make the state *incomplete*: it is no longer checkpointed, and every
//! read is refused (`state_incomplete`) rather than served a state that lacks something.

pub mod checkpoint;
pub mod fold;
pub mod http;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corecast_net::protocol::frame::encode_data_frame;
use corecast_storage::schema::{ColumnType, Schema};

use crate::config::StreamConfig;
use crate::fanout::batch::FrameBatch;
use crate::filter::{ColumnLookup, Filter};
use crate::registry::Stream;
use crate::replay::{ReplayJob, ReplaySender};
use crate::session::deliver::Rendering;
use fold::{payload_ts, Applied, KeySpec, StateMap};

/// Committed batches queued for one state thread before the writer waits.
pub const STATE_INBOX_BATCHES: usize = 4096;

/// Readers' requests queued for one state thread; above it a request is answered
/// [`Unavailable::Busy`].
pub const STATE_REQUESTS: usize = 64;

/// Bytes of rendered frames per snapshot chunk (the session writes ≤ 4 MiB per `writev`).
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

const _: () = assert!(SNAPSHOT_CHUNK_BYTES <= crate::session::deliver::WRITE_BYTES_MAX);

/// Counters of one keyed stream (`/metrics`: `corecast_state_*`).
#[derive(Default)]
pub struct StateStats {
    /// Entities held.
    pub keys: AtomicU64,
    /// Summed bytes of the entities' rows.
    pub row_bytes: AtomicU64,
    /// The next offset the state will fold.
    pub position: AtomicU64,
    /// Set while the state is incomplete (a key refused at `max_keys`, or history lost).
    pub incomplete: AtomicBool,
    /// Set once recovery (checkpoint + tail) is done.
    pub ready: AtomicBool,
    /// Rows whose new key was refused at `max_keys`.
    pub keys_refused: AtomicU64,
    /// Keys removed by `remove_when`.
    pub removals: AtomicU64,
    /// Rows with no key (none on a stream whose schema start-up checked).
    pub rows_without_key: AtomicU64,
    /// Checkpoints written since start.
    pub checkpoints: AtomicU64,
    /// The offset the latest checkpoint covers (its position; 0: none).
    pub checkpoint_offset: AtomicU64,
    /// The checkpoint position recovery started from (0: none, the whole log was folded).
    pub recovered_from: AtomicU64,
    /// Rows of the log's tail folded by recovery.
    pub recovered_tail_rows: AtomicU64,
    /// Snapshots served.
    pub snapshots: AtomicU64,
    /// Entities sent in snapshots.
    pub snapshot_entities: AtomicU64,
    /// Reads refused (busy, incomplete, over the snapshot budget).
    pub reads_refused: AtomicU64,
    /// Bytes of rendered `?state` snapshots sessions hold now (not yet written to their
    /// readers), against `state_snapshot_budget_bytes`; each [`SnapshotHold`] gives its share
    /// back as it is written or dropped.
    pub snapshot_bytes_held: Arc<AtomicU64>,
    /// `?state` joins refused because the snapshot budget was taken.
    pub snapshots_refused_budget: AtomicU64,
}

/// Why a read of the state is not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The request queue is full: try again.
    Busy,
    /// The snapshots other readers are still receiving hold the stream's
    /// `state_snapshot_budget_bytes`: try again.
    OverBudget,
    /// The state lacks something (a key refused at `max_keys`, or history lost).
    Incomplete,
    /// The state thread has stopped (shutdown).
    Stopped,
}

/// What the reader is told when the snapshot budget is taken.
pub const OVER_BUDGET_MESSAGE: &str = "the stream's state_snapshot_budget_bytes is held by snapshots other readers are still receiving; retry later";

impl Unavailable {
    /// The error code clients see.
    pub fn code(self) -> &'static str {
        match self {
            Unavailable::Busy | Unavailable::OverBudget => "state_busy",
            Unavailable::Incomplete => "state_incomplete",
            Unavailable::Stopped => "state_stopped",
        }
    }

    /// One line for the reader: what is wrong and whether to try again.
    pub fn message(self) -> &'static str {
        match self {
            Unavailable::Busy => "the state thread's request queue is full; retry later",
            Unavailable::OverBudget => OVER_BUDGET_MESSAGE,
            Unavailable::Incomplete => "the keyed state is incomplete (a key over max_keys, or history lost; see the server log) and is not served until the server restarts with it rebuilt",
            Unavailable::Stopped => "server shutting down",
        }
    }

    /// Whether the same read may succeed later with nothing changed on the reader's side:
    /// not for an incomplete state, which stays so until the operator acts.
    pub fn retryable(self) -> bool {
        self != Unavailable::Incomplete
    }
}

/// The state as one reader selected it, rendered.
pub struct Snapshot {
    /// The state is that of every row below this offset; the reader continues from here.
    pub at: u64,
    /// The lowest version sent (`None`: no entity selected).
    pub first: Option<u64>,
    /// Entities sent.
    pub entities: u64,
    /// The rendered frames (WebSocket) or events (SSE), in version order, ≤
    /// [`SNAPSHOT_CHUNK_BYTES`] each (one larger row alone).
    pub chunks: Vec<Bytes>,
    /// The chunks' claim on the stream's snapshot budget: the session releases it as it
    /// writes them; what is left goes when it is dropped.
    pub hold: SnapshotHold,
}

impl Snapshot {
    /// Bytes of the rendered chunks.
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len() as u64).sum()
    }
}

/// Bytes of a snapshot counted in its stream's `corecast_state_snapshot_bytes_held` until
/// they are written to the reader ([`SnapshotHold::release`]) or the session drops them (the
/// rest is given back on drop, however the session ends).
#[derive(Default)]
pub struct SnapshotHold {
    held: Option<Arc<AtomicU64>>,
    left: u64,
}

impl SnapshotHold {
    fn take(held: &Arc<AtomicU64>, bytes: u64) -> SnapshotHold {
        held.fetch_add(bytes, Ordering::AcqRel);
        SnapshotHold {
            held: Some(held.clone()),
            left: bytes,
        }
    }

    /// `bytes` of the snapshot were written (or dropped): no longer counted.
    pub fn release(&mut self, bytes: u64) {
        let n = bytes.min(self.left);
        self.left -= n;
        if let Some(h) = &self.held {
            h.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Bytes still counted.
    pub fn left(&self) -> u64 {
        self.left
    }
}

impl Drop for SnapshotHold {
    fn drop(&mut self) {
        self.release(self.left);
    }
}

/// A request to a state thread.
pub enum Request {
    /// The entities matching `filter`, rendered.
    Snapshot {
        /// The reader's `where=`.
        filter: Option<Filter>,
        /// WebSocket frames or SSE events.
        rendering: Rendering,
        /// Where the answer goes.
        reply: flume::Sender<Result<Snapshot, Unavailable>>,
    },
    /// A window of the collection in key order (`GET /v1/streams/NAME/state`).
    Window {
        /// The selection.
        filter: Option<Filter>,
        /// Start after this key (the previous window's last); `None`: from the first.
        after: Option<fold::Key>,
        /// Entities at most.
        limit: usize,
        /// Where the answer goes.
        reply: flume::Sender<Result<Window, Unavailable>>,
    },
    /// What changed since a token's offset (`GET /v1/streams/NAME/changes`).
    Changes {
        /// The selection the token was issued for.
        filter: Option<Filter>,
        /// The token's offset.
        since: u64,
        /// Changes at most.
        limit: usize,
        /// Where the answer goes: `Ok(None)` when the token is past the horizon.
        reply: flume::Sender<Result<Result<Changes, Expired>, Unavailable>>,
    },
    /// Fold what is queued, checkpoint, exit.
    Stop,
}

/// One window of the collection, rendered.
pub struct Window {
    /// The state's position when the window was read.
    pub at: u64,
    /// The entities as JSON objects `{"key","version","ts","row"}`, comma-separated.
    pub entities_json: Vec<u8>,
    /// Entities in it.
    pub count: usize,
    /// Its last key (where the next window starts), if any.
    pub last_key: Option<fold::Key>,
    /// Whether selected entities remain after it.
    pub more: bool,
}

/// Changes since a token, rendered.
pub struct Changes {
    /// The state's position when they were read.
    pub at: u64,
    /// The changes as JSON objects, comma-separated, in offset order: `{"op":"upsert","key",
    /// "version","ts","row"}` or `{"op":"remove","key","version","why":"removed"|"left_selection"}`.
    pub changes_json: Vec<u8>,
    /// Changes in it.
    pub count: usize,
    /// The offset the next token holds.
    pub next: u64,
}

/// Why a change token can no longer be answered (`token_expired`): what changed since it
/// cannot be told whole, so the reader discards its copy and reads the state again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Retention dropped the rows from the token's offset on.
    LogDropped {
        /// The token's offset.
        since: u64,
        /// The log's first offset now.
        earliest: u64,
    },
    /// Removals after the token's offset are no longer remembered: the state remembers
    /// removed keys from `floor` on (at most `max_keys` of them, and none from before it was
    /// built or recovered without them).
    RemovalsForgotten {
        /// The token's offset.
        since: u64,
        /// The oldest offset whose removals are all remembered.
        floor: u64,
    },
    /// The token is ahead of the state (which was rebuilt from less than the token saw).
    Ahead {
        /// The token's offset.
        since: u64,
        /// The state's position.
        position: u64,
    },
}

impl Expired {
    /// What the reader is told (`stream` names the state to read again).
    pub fn message(&self, stream: &str) -> String {
        let again = format!("discard your copy and read the state again (GET /v1/streams/{stream}/state), then follow the token that read returns");
        match *self {
            Expired::LogDropped { since, earliest } => format!(
                "this token is at offset {since}, but the log now starts at offset {earliest} (retention dropped the rows in between), so what changed since cannot be told: {again}"
            ),
            Expired::RemovalsForgotten { since, floor } => format!(
                "keys removed after this token's offset {since} are no longer remembered (removals are remembered from offset {floor} on, at most max_keys of them), so your copy may still hold keys that are gone: {again}"
            ),
            Expired::Ahead { since, position } => format!(
                "this token is at offset {since}, ahead of the state (at offset {position}; it was rebuilt from less than the token saw): {again}"
            ),
        }
    }
}

/// Row bytes after which a window or a changes answer ends (as a pull page).
pub const ANSWER_BYTES_MAX: usize = crate::session::pull::PAGE_BYTES_MAX;

fn push_entity(key: &[u8], e: &fold::Entry<'_>, upsert: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if upsert {
        br#"{"op":"upsert","key":"#.as_slice()
    } else {
        br#"{"key":"#.as_slice()
    });
    fold::key_json(key, out);
    out.extend_from_slice(
        format!(r#","version":{},"ts":{},"row":"#, e.version, e.ts_us).as_bytes(),
    );
    out.extend_from_slice(e.row);
    out.push(b'}');
}

type Receivers = (
    crossbeam_channel::Receiver<Arc<FrameBatch>>,
    crossbeam_channel::Receiver<Request>,
);

/// A keyed stream's state: the declaration, the channels to its thread, its counters.
pub struct Keyed {
    /// The key and `remove_when`.
    pub spec: KeySpec,
    /// Entities held at most.
    pub max_keys: usize,
    /// How often the state is checkpointed (when it moved).
    pub checkpoint_every: Duration,
    /// Bytes of rendered snapshots its sessions may hold at once (`state_snapshot_budget_bytes`).
    pub snapshot_budget: u64,
    /// Counters.
    pub stats: StateStats,
    /// The log's end when the stream was opened: recovery folds the tail up to it, the live
    /// batches start there.
    opened_end: u64,
    batches: crossbeam_channel::Sender<Arc<FrameBatch>>,
    requests: crossbeam_channel::Sender<Request>,
    receivers: Mutex<Option<Receivers>>,
}

impl Keyed {
    /// The state of a stream declared `cfg` (checked by [`spec_for`]) whose log ends at
    /// `opened_end`.
    pub fn new(cfg: &StreamConfig, spec: KeySpec, opened_end: u64) -> Keyed {
        let (btx, brx) = crossbeam_channel::bounded(STATE_INBOX_BATCHES);
        let (rtx, rrx) = crossbeam_channel::bounded(STATE_REQUESTS);
        Keyed {
            spec,
            max_keys: cfg.max_keys,
            checkpoint_every: cfg.checkpoint_every,
            snapshot_budget: cfg.state_snapshot_budget_bytes,
            stats: StateStats::default(),
            opened_end,
            batches: btx,
            requests: rtx,
            receivers: Mutex::new(Some((brx, rrx))),
        }
    }

    /// Hands a committed batch to the state thread (the writer calls it after the shards got
    /// the batch). Waits while the state inbox is full.
    pub fn feed(&self, batch: Arc<FrameBatch>) {
        // the thread only goes at shutdown, after the writers: nothing is lost then
        let _ = self.batches.send(batch);
    }

    /// Asks for a snapshot (from a shard: never blocks; waits for the answer asynchronously).
    pub async fn snapshot(
        &self,
        filter: Option<Filter>,
        rendering: Rendering,
    ) -> Result<Snapshot, Unavailable> {
        self.ask(|reply| Request::Snapshot {
            filter,
            rendering,
            reply,
        })
        .await
    }

    /// Asks for a window of the collection (from a shard: never blocks).
    pub async fn window(
        &self,
        filter: Option<Filter>,
        after: Option<fold::Key>,
        limit: usize,
    ) -> Result<Window, Unavailable> {
        self.ask(|reply| Request::Window {
            filter,
            after,
            limit,
            reply,
        })
        .await
    }

    /// Asks for the changes since `since` (from a shard: never blocks); `Ok(None)`: the token
    /// is past the horizon.
    pub async fn changes(
        &self,
        filter: Option<Filter>,
        since: u64,
        limit: usize,
    ) -> Result<Result<Changes, Expired>, Unavailable> {
        self.ask(|reply| Request::Changes {
            filter,
            since,
            limit,
            reply,
        })
        .await
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(flume::Sender<Result<T, Unavailable>>) -> Request,
    ) -> Result<T, Unavailable> {
        let (tx, rx) = flume::bounded(1);
        let req = make(tx);
        match self.requests.try_send(req) {
            Ok(()) => {}
            Err(crossbeam_channel::TrySendError::Full(_)) => {
                self.stats.reads_refused.fetch_add(1, Ordering::Relaxed);
                return Err(Unavailable::Busy);
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                return Err(Unavailable::Stopped)
            }
        }
        let answer = rx.recv_async().await.unwrap_or(Err(Unavailable::Stopped));
        if answer.is_err() {
            self.stats.reads_refused.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    /// Asks the thread to fold what is queued, checkpoint and exit (at shutdown, after the
    /// writers stopped).
    pub fn stop(&self) {
        let _ = self.requests.send(Request::Stop);
    }
}

/// Checks a keyed stream's declaration against its schema: every key column declared,
/// required (not nullable) and a boolean, integer or string; `remove_when` a valid `where=`.
/// The error names the stream's column and what is wrong with it.
pub fn spec_for(cfg: &StreamConfig, schema: Option<&Schema>) -> Result<KeySpec, String> {
    assert!(!cfg.key.is_empty(), "only keyed streams have a spec");
    let Some(schema) = schema else {
        return Err(format!(
            "key = {:?} needs a schema declaring the key columns; the stream is schema-less",
            cfg.key
        ));
    };
    for c in &cfg.key {
        let Some((_, col)) = schema.column(c).filter(|_| c != "streamcast_ts") else {
            if c == "streamcast_ts" {
                return Err(format!(
                    "key column {c:?} is the system timestamp every row gets, not a declared column: a key is made of declared columns"
                ));
            }
            return Err(format!(
                "key column {c:?} is not a column of the schema (it declares {})",
                schema.declared_list()
            ));
        };
        if col.nullable() {
            return Err(format!(
                "key column {c:?} is nullable; a key column must be required and never null"
            ));
        }
        match col.ty() {
            ColumnType::Boolean | ColumnType::Int32 | ColumnType::Int64 | ColumnType::Utf8 => {}
            other => {
                return Err(format!(
                "key column {c:?} is of type {}; a key column is a boolean, an integer or a string",
                match other {
                    ColumnType::Float32 | ColumnType::Float64 => "number (floating point)",
                    ColumnType::Binary { .. } => "binary",
                    _ => other.json_type(),
                }
            ))
            }
        }
    }
    let remove_when = match &cfg.remove_when {
        None => None,
        Some(text) => {
            let lookup = |c: &str| match schema.column(c) {
                None => ColumnLookup::Unknown,
                Some((_, col)) if col.is_filterable() => ColumnLookup::Scalar,
                Some(_) => ColumnLookup::NotScalar,
            };
            let filter = Filter::parse(text, Some(&lookup))
                .map_err(|e| format!("remove_when: {}", e.strip_prefix("where= ").unwrap_or(&e)))?;
            remove_when_types(text, schema)?;
            Some(filter)
        }
    };
    Ok(KeySpec::new(cfg.key.clone(), remove_when))
}

/// Refuses a `remove_when` value that no row can hold in its column (`{ action = 1 }` for a
/// string column, `1.5` for an integer one, `null` for a required one): such a term would never
/// match, and the keys it was meant to remove would stay without a word.
fn remove_when_types(text: &str, schema: &Schema) -> Result<(), String> {
    match crate::filter::never_matching(text, schema) {
        Some(why) => Err(format!("remove_when: {why}: no row would be removed by it")),
        None => Ok(()),
    }
}

/// The entities of `map` whose latest row passes `filter`, in version order, rendered as
/// WebSocket frames or SSE events in chunks of about [`SNAPSHOT_CHUNK_BYTES`] (on the state
/// thread; `pub` for the benchmarks).
pub fn render_snapshot(map: &StateMap, filter: Option<&Filter>, rendering: Rendering) -> Snapshot {
    let selected = map.selected_by_version(filter);
    let mut chunks = Vec::new();
    let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK_BYTES.min(selected.len() * 256 + 64));
    let mut payload = Vec::new();
    for e in &selected {
        match rendering {
            Rendering::WebSocket => {
                encode_data_frame(Some(e.version), Some(e.ts_us), e.row, &mut buf)
            }
            Rendering::Sse => {
                payload.clear();
                payload.push(b'[');
                payload.extend_from_slice(e.version.to_string().as_bytes());
                payload.push(b',');
                payload.extend_from_slice(e.ts_us.to_string().as_bytes());
                payload.push(b',');
                payload.extend_from_slice(e.row);
                payload.push(b']');
                corecast_net::sse::push_event(Some(e.version), &payload, &mut buf);
            }
        }
        if buf.len() >= SNAPSHOT_CHUNK_BYTES {
            chunks.push(Bytes::from(std::mem::take(&mut buf)));
            buf.reserve(SNAPSHOT_CHUNK_BYTES);
        }
    }
    if !buf.is_empty() {
        chunks.push(Bytes::from(buf));
    }
    Snapshot {
        at: map.position(),
        first: selected.first().map(|e| e.version),
        entities: selected.len() as u64,
        chunks,
        hold: SnapshotHold::default(),
    }
}

/// Starts the state thread of keyed stream `st`.
pub fn start(st: Arc<Stream>, replay: ReplaySender) -> std::io::Result<JoinHandle<()>> {
    let keyed = st.keyed.as_ref().expect("a keyed stream");
    let (batches, requests) = keyed
        .receivers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .expect("one state thread per stream");
    std::thread::Builder::new()
        .name(format!("corecast-state-{}", st.cfg.name))
        .spawn(move || Thread::new(st, replay).run(batches, requests))
}

/// A checkpoint written: its position, bytes, how long the write took, or the error.
type Written = (u64, usize, Duration, Result<(), String>);

/// The checkpoint writer (`corecast-ckpt-NAME`): the state thread encodes a checkpoint (a copy
/// of the state in memory) and hands the bytes over, so the disk's `write` and `fsync`s never
/// hold up the fold; one checkpoint at a time (a queue of one: while one is being written, the
/// next tick skips).
struct Checkpointer {
    jobs: Option<crossbeam_channel::Sender<(u64, Vec<u8>)>>,
    done: crossbeam_channel::Receiver<Written>,
    thread: Option<JoinHandle<()>>,
    in_flight: bool,
}

impl Checkpointer {
    fn start(name: &str, dir: std::path::PathBuf) -> Checkpointer {
        let (jobs, jrx) = crossbeam_channel::bounded::<(u64, Vec<u8>)>(1);
        let (dtx, done) = crossbeam_channel::bounded::<Written>(1);
        let thread = std::thread::Builder::new()
            .name(format!("corecast-ckpt-{name}"))
            .spawn(move || {
                for (position, buf) in jrx {
                    let began = Instant::now();
                    let r = checkpoint::write_bytes(&dir, &buf).map_err(|e| e.to_string());
                    if dtx.send((position, buf.len(), began.elapsed(), r)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| tracing::error!("cannot start a checkpoint writer thread ({e}); checkpoints are written on the state thread"))
            .ok();
        Checkpointer {
            jobs: thread.is_some().then_some(jobs),
            done,
            thread,
            in_flight: false,
        }
    }
}

struct Thread {
    st: Arc<Stream>,
    replay: ReplaySender,
    map: StateMap,
    id: checkpoint::Identity,
    last_checkpoint: Instant,
    checkpointed_at: u64,
    writer: Checkpointer,
}

impl Thread {
    fn new(st: Arc<Stream>, replay: ReplaySender) -> Thread {
        let k = st.keyed.as_ref().expect("a keyed stream");
        let id = checkpoint::Identity {
            stream_id: st.stream_id.clone().expect("a keyed stream is durable"),
            key: st.cfg.key.clone(),
            remove_when: st.cfg.remove_when.clone(),
        };
        let writer = Checkpointer::start(&st.cfg.name, st.dir.clone());
        Thread {
            map: StateMap::new(1, k.max_keys),
            writer,
            st,
            replay,
            id,
            last_checkpoint: Instant::now(),
            checkpointed_at: 0,
        }
    }

    fn keyed(&self) -> &Keyed {
        self.st.keyed.as_ref().expect("a keyed stream")
    }

    fn run(
        mut self,
        batches: crossbeam_channel::Receiver<Arc<FrameBatch>>,
        requests: crossbeam_channel::Receiver<Request>,
    ) {
        self.recover();
        let every = self.keyed().checkpoint_every;
        let done = self.writer.done.clone();
        loop {
            let wait = every.saturating_sub(self.last_checkpoint.elapsed());
            crossbeam_channel::select! {
                recv(done) -> w => {
                    if let Ok(w) = w {
                        self.written(w);
                    }
                }
                recv(batches) -> b => match b {
                    Ok(b) => self.fold_batch(&b),
                    Err(_) => break,
                },
                recv(requests) -> r => match r {
                    Ok(Request::Snapshot { filter, rendering, reply }) => {
                        let _ = reply.send(self.snapshot(filter.as_ref(), rendering));
                    }
                    Ok(Request::Window { filter, after, limit, reply }) => {
                        let _ = reply.send(self.window(filter.as_ref(), after.as_deref(), limit));
                    }
                    Ok(Request::Changes { filter, since, limit, reply }) => {
                        let _ = reply.send(self.changes(filter.as_ref(), since, limit));
                    }
                    Ok(Request::Stop) | Err(_) => {
                        while let Ok(b) = batches.try_recv() {
                            self.fold_batch(&b);
                        }
                        self.last_checkpoint_at_stop();
                        break;
                    }
                },
                default(wait) => {}
            }
            if self.last_checkpoint.elapsed() >= every {
                self.checkpoint();
            }
        }
    }

    /// Checkpoint, then the log's tail through the reader pool.
    fn recover(&mut self) {
        let name = self.st.cfg.name.clone();
        let k = self.st.keyed.as_ref().expect("keyed");
        let end = k.opened_end;
        let earliest = self
            .st
            .earliest
            .load(Ordering::Acquire)
            .clamp(1, end.max(1));
        let began = Instant::now();
        let from_checkpoint = match checkpoint::read(&self.st.dir, &self.id, k.max_keys) {
            Ok(Some(m)) if m.position() <= end => {
                tracing::info!(stream = %name, offset = m.position(), entities = m.len(), "state: read the checkpoint covering offsets below {}", m.position());
                if m.len() > k.max_keys {
                    // max_keys was lowered since: the state cannot be served whole
                    k.stats.incomplete.store(true, Ordering::Relaxed);
                    tracing::error!(stream = %name, entities = m.len(), max_keys = k.max_keys, "state: the checkpoint holds {} entities, more than max_keys ({}): the state is incomplete, reads are refused (state_incomplete); raise max_keys to at least {} and restart", m.len(), k.max_keys, m.len());
                }
                self.map = m;
                true
            }
            Ok(Some(m)) => {
                tracing::warn!(stream = %name, "state: the checkpoint covers offsets below {} but the log ends at {end}; not used, the state is folded from the log", m.position());
                false
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(stream = %name, "state: checkpoint {} not used ({e}); the state is folded from the log", checkpoint::path(&self.st.dir).display());
                false
            }
        };
        if !from_checkpoint {
            self.map = StateMap::new(earliest, k.max_keys);
            if earliest > 1 {
                tracing::warn!(stream = %name, earliest, "state: no checkpoint and the log starts at offset {earliest}: the state holds what rows {earliest}.. say (rows below were dropped before the stream was keyed)");
            }
        } else {
            k.stats
                .recovered_from
                .store(self.map.position(), Ordering::Relaxed);
            self.checkpointed_at = self.map.position();
        }
        if self.map.position() < earliest {
            let lost = (self.map.position(), earliest - 1);
            self.lost(lost);
        }
        let started_at = self.map.position();
        while self.map.position() < end {
            let from = self.map.position();
            let (tx, rx) = flume::bounded(1);
            let job = ReplayJob {
                stream: self.st.index,
                from,
                to: end,
                prune: Vec::new(),
                reply: tx,
            };
            if self.replay.submit(job).is_err() {
                tracing::error!(stream = %name, "state: the reader pool is gone; recovery stops at offset {from}");
                self.lost((from, end - 1));
                break;
            }
            match rx.recv() {
                Ok(Ok(r)) => {
                    if let Some(missing) = r.missing {
                        self.lost(missing);
                    }
                    if !r.batch.is_empty() {
                        self.fold_batch(&r.batch);
                    }
                    if self.map.position() < r.resume {
                        // rows the read skipped (none without a filter): never silently
                        self.lost((self.map.position(), r.resume - 1));
                    }
                    if self.map.position() == from {
                        tracing::error!(stream = %name, "state: the log read made no progress at offset {from}");
                        self.lost((from, end - 1));
                        break;
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!(stream = %name, "state: reading the log from offset {from} failed: {e}");
                    self.lost((from, end - 1));
                    break;
                }
                Err(_) => {
                    self.lost((from, end - 1));
                    break;
                }
            }
        }
        let tail = end.saturating_sub(started_at);
        let k = self.keyed();
        k.stats.recovered_tail_rows.store(tail, Ordering::Relaxed);
        k.stats.ready.store(true, Ordering::Release);
        self.publish_stats();
        tracing::info!(
            stream = %name,
            checkpoint = if from_checkpoint { started_at } else { 0 },
            tail_rows = tail,
            entities = self.map.len(),
            position = self.map.position(),
            "state recovered: from {} plus {tail} rows of the log in {} ms",
            if from_checkpoint { format!("the checkpoint at offset {started_at}") } else { "no checkpoint".to_string() },
            began.elapsed().as_millis()
        );
    }

    /// Offsets `first..=last` the state should have folded are in no tier.
    fn lost(&mut self, (first, last): (u64, u64)) {
        tracing::error!(stream = %self.st.cfg.name, "state: offsets {first}..={last} are no longer held; the state is incomplete and reads of it are refused (state_incomplete) until it is rebuilt: restart once a checkpoint covering them exists, or drop state.checkpoint to fold what the log holds");
        self.map.mark_incomplete();
        if self.map.position() <= last {
            self.map.skip_to(last + 1);
        }
        self.keyed().stats.incomplete.store(true, Ordering::Relaxed);
    }

    fn fold_batch(&mut self, b: &FrameBatch) {
        let spec = &self.st.keyed.as_ref().expect("keyed").spec;
        assert!(
            b.first <= self.map.position(),
            "a batch starting at {} after the state's position {}",
            b.first,
            self.map.position()
        );
        let stats = &self.st.keyed.as_ref().expect("keyed").stats;
        let skip = (self.map.position() - b.first) as usize;
        for i in skip..b.len() {
            let offset = b.first + i as u64;
            let ts = payload_ts(b.payload(i)).expect("a framed row carries its ts");
            match self.map.apply(spec, offset, ts, b.row(i)) {
                Applied::Inserted | Applied::Updated | Applied::RemovedAbsent => {}
                Applied::Removed => {
                    stats.removals.fetch_add(1, Ordering::Relaxed);
                }
                Applied::Refused => {
                    if !stats.incomplete.swap(true, Ordering::Relaxed) {
                        tracing::error!(stream = %self.st.cfg.name, offset, max_keys = self.map.len(), "state: a new key at offset {offset} is over max_keys ({}); the state is incomplete from here: reads are refused (state_incomplete) and no checkpoint is written; raise max_keys and restart (recovery folds from the last checkpoint)", self.map.len());
                    }
                    stats.keys_refused.fetch_add(1, Ordering::Relaxed);
                }
                Applied::NoKey(e) => {
                    stats.rows_without_key.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(stream = %self.st.cfg.name, offset, "state: row has no key ({} holds {}); not folded", e.column, e.found);
                }
            }
        }
        self.publish_stats();
    }

    fn publish_stats(&self) {
        let s = &self.keyed().stats;
        s.keys.store(self.map.len() as u64, Ordering::Relaxed);
        s.row_bytes
            .store(self.map.row_bytes() as u64, Ordering::Relaxed);
        s.position.store(self.map.position(), Ordering::Relaxed);
    }

    /// Hands a checkpoint of the state to the checkpoint writer, unless nothing moved since
    /// the last one, one is still being written, or the state is incomplete.
    fn checkpoint(&mut self) {
        self.last_checkpoint = Instant::now();
        if self.map.incomplete()
            || self.map.position() == self.checkpointed_at
            || self.writer.in_flight
        {
            return;
        }
        let buf = match checkpoint::encode(&self.id, &mut self.map) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(stream = %self.st.cfg.name, "state: encoding a checkpoint failed: {e}");
                return;
            }
        };
        let position = self.map.position();
        match &self.writer.jobs {
            Some(jobs) => {
                if jobs.try_send((position, buf)).is_ok() {
                    self.writer.in_flight = true;
                }
            }
            None => {
                let began = Instant::now();
                let r = checkpoint::write_bytes(&self.st.dir, &buf).map_err(|e| e.to_string());
                self.written((position, buf.len(), began.elapsed(), r));
            }
        }
    }

    /// At shutdown: the checkpoint in flight finishes, then the last one is written here.
    fn last_checkpoint_at_stop(&mut self) {
        drop(self.writer.jobs.take());
        if let Some(t) = self.writer.thread.take() {
            let _ = t.join();
        }
        while let Ok(w) = self.writer.done.try_recv() {
            self.written(w);
        }
        self.writer.in_flight = false;
        self.checkpoint();
    }

    /// A checkpoint write finished.
    fn written(&mut self, (position, bytes, took, r): Written) {
        self.writer.in_flight = false;
        match r {
            Ok(()) => {
                self.checkpointed_at = position;
                let s = &self.keyed().stats;
                s.checkpoints.fetch_add(1, Ordering::Relaxed);
                s.checkpoint_offset.store(position, Ordering::Relaxed);
                tracing::debug!(stream = %self.st.cfg.name, position, bytes, ms = took.as_millis() as u64, "state: checkpoint written");
            }
            Err(e) => {
                tracing::error!(stream = %self.st.cfg.name, "state: a checkpoint failed ({e}); the previous checkpoint stays, retried in {} s", self.keyed().checkpoint_every.as_secs());
            }
        }
    }

    fn window(
        &mut self,
        filter: Option<&Filter>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Window, Unavailable> {
        if self.map.incomplete() {
            return Err(Unavailable::Incomplete);
        }
        let at = self.map.position();
        let (entities, more) = self.map.window(filter, after, limit, ANSWER_BYTES_MAX);
        let mut out = Vec::new();
        for (i, (k, e)) in entities.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_entity(k, e, false, &mut out);
        }
        Ok(Window {
            at,
            entities_json: out,
            count: entities.len(),
            last_key: entities.last().map(|(k, _)| (*k).clone()),
            more,
        })
    }

    fn changes(
        &self,
        filter: Option<&Filter>,
        since: u64,
        limit: usize,
    ) -> Result<Result<Changes, Expired>, Unavailable> {
        if self.map.incomplete() {
            return Err(Unavailable::Incomplete);
        }
        // the log's horizon too: rows below it are no longer held anywhere
        let earliest = self.st.earliest.load(Ordering::Acquire);
        if since < earliest {
            return Ok(Err(Expired::LogDropped { since, earliest }));
        }
        let Some((changes, mut next)) = self.map.changes(filter, since, limit) else {
            return Ok(Err(if since > self.map.position() {
                Expired::Ahead {
                    since,
                    position: self.map.position(),
                }
            } else {
                Expired::RemovalsForgotten {
                    since,
                    floor: self.map.changes_floor(),
                }
            }));
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut count = 0usize;
        for c in &changes {
            if bytes >= ANSWER_BYTES_MAX {
                next = c.offset();
                break;
            }
            if count > 0 {
                out.push(b',');
            }
            let before = out.len();
            match c {
                fold::Change::Upsert(k, e) => push_entity(k, e, true, &mut out),
                fold::Change::Left(k, v) | fold::Change::Removed(k, v) => {
                    out.extend_from_slice(br#"{"op":"remove","key":"#);
                    fold::key_json(k, &mut out);
                    let why = if matches!(c, fold::Change::Left(..)) {
                        "left_selection"
                    } else {
                        "removed"
                    };
                    out.extend_from_slice(format!(r#","version":{v},"why":"{why}"}}"#).as_bytes());
                }
            }
            bytes += out.len() - before;
            count += 1;
        }
        Ok(Ok(Changes {
            at: self.map.position(),
            changes_json: out,
            count,
            next,
        }))
    }

    fn snapshot(
        &self,
        filter: Option<&Filter>,
        rendering: Rendering,
    ) -> Result<Snapshot, Unavailable> {
        if self.map.incomplete() {
            return Err(Unavailable::Incomplete);
        }
        let k = self.keyed();
        let s = &k.stats;
        // only this thread adds to what is held (sessions only give back), so what it reads
        // here is at most what is held when it adds; one snapshot alone is always served,
        // however large, or a state bigger than the budget could never be read
        let over = |held: u64, more: u64| held > 0 && held.saturating_add(more) > k.snapshot_budget;
        let refused = || {
            s.snapshots_refused_budget.fetch_add(1, Ordering::Relaxed);
            Err(Unavailable::OverBudget)
        };
        if over(s.snapshot_bytes_held.load(Ordering::Acquire), 1) {
            return refused();
        }
        let mut snap = render_snapshot(&self.map, filter, rendering);
        let bytes = snap.bytes();
        if over(s.snapshot_bytes_held.load(Ordering::Acquire), bytes) {
            return refused();
        }
        snap.hold = SnapshotHold::take(&s.snapshot_bytes_held, bytes);
        s.snapshots.fetch_add(1, Ordering::Relaxed);
        s.snapshot_entities
            .fetch_add(snap.entities, Ordering::Relaxed);
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBO: &str = r#"{"type":"object","properties":{"order_id":{"type":"integer"},"action":{"type":"string"},"size":{"type":"integer"},"note":{"type":["string","null"]},"px":{"type":"number"}},"required":["order_id","action","size","px"]}"#;

    fn spec_of(key: &[&str], remove_when: Option<&str>) -> Result<KeySpec, String> {
        let mut cfg = StreamConfig::with_defaults("mbo", Some(MBO.to_string()), true);
        cfg.key = key.iter().map(|c| c.to_string()).collect();
        cfg.remove_when = remove_when.map(str::to_string);
        spec_for(&cfg, Some(&Schema::compile(MBO).expect("schema")))
    }

    #[test]
    fn a_remove_when_value_no_row_can_hold_is_refused_naming_it() {
        for ok in [
            r#"{"action":["C","F"]}"#,
            r#"{"size":0}"#,
            r#"{"note":null}"#,
            r#"{"px":[1,2.5]}"#,
            // a dead value beside one that matches: the term still removes
            r#"{"action":["C",1]}"#,
            r#"{"size":2.0}"#,
        ] {
            assert!(spec_of(&["order_id"], Some(ok)).is_ok(), "{ok}");
        }
        for (bad, names) in [
            (
                r#"{"action":1}"#,
                "1 can never match column \"action\", which holds strings and is never null",
            ),
            (
                r#"{"action":[1,2]}"#,
                "any of [1,2] can never match column \"action\"",
            ),
            (
                r#"{"size":1.5}"#,
                "1.5 can never match column \"size\", which holds integers",
            ),
            (r#"{"size":null}"#, "null can never match column \"size\""),
            (
                r#"{"note":true}"#,
                "true can never match column \"note\", which holds strings or null",
            ),
        ] {
            let Err(e) = spec_of(&["order_id"], Some(bad)) else {
                panic!("{bad} accepted");
            };
            assert!(
                e.starts_with("remove_when: ") && e.contains(names),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_system_timestamp_is_not_a_key_column() {
        let Err(e) = spec_of(&["streamcast_ts"], None) else {
            panic!("accepted")
        };
        assert!(e.contains("is the system timestamp"), "{e}");
        let Err(e) = spec_of(&["nope"], None) else {
            panic!("accepted")
        };
        assert!(e.contains("\"nope\" is not a column of the schema"), "{e}");
    }
}
