//! The stream registry: every declared stream, its codec, its writer, its counters.
//!
//! A [`Registry`] is one immutable snapshot of the stream table, shared read-only (`Arc`) by every
//! thread; what changes inside a stream at run time is atomic (counters, the committed frontier,
//! its [`StreamState`]) or behind a short lock (exactly-once claims). The table itself changes only
//! through the control thread (`crate::control`), which builds a new snapshot and swaps it into
//! [`Streams`]: readers take the current one with [`Streams::load`] (a read lock held for one
//! `Arc` clone), on the accept path and in the writers, never across an await. Indexes only
//! grow: a stream keeps its index for the life of the process, whatever becomes of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use corecast_storage::schema::{RowCodec, Schema};

use crate::config::StreamConfig;

/// Per-stream counters read by `/stats` and `/metrics`.
#[derive(Default)]
pub struct StreamStats {
    /// Rows committed (or fanned out, on live-only streams) since start.
    pub rows_in: AtomicU64,
    /// Frames written to subscribers since start.
    pub frames_out: AtomicU64,
    /// Bytes written to subscribers since start.
    pub bytes_out: AtomicU64,
    /// Open WebSocket subscriptions.
    pub subscribers: AtomicI64,
    /// Open publisher connections.
    pub publishers: AtomicI64,
    /// Last time a frame was written to a subscriber, µs since the epoch (0 = never).
    pub last_send_us: AtomicI64,
    /// Subscribers closed with 4429.
    pub dropped_slow: AtomicU64,
    /// Open SSE streams.
    pub sse_subscribers: AtomicI64,
    /// SSE streams ended with `behind` (too slow).
    pub sse_dropped_slow: AtomicU64,
    /// HTTP pull requests waiting in a long poll.
    pub pull_waiting: AtomicI64,
    /// Group commits that failed (`commit_failed`: a full disk, a failed write or fdatasync).
    pub commit_failures: AtomicU64,
    /// Commit latency (time in `Buffer::append`).
    pub commit_latency: crate::session::metrics::Histogram,
    /// Cursors of the open subscriber sessions (WebSocket and SSE), for the lag gauge.
    pub lag: crate::session::metrics::LagBoard,
}

/// An exactly-once publisher's claim on its id. A newer connection with the same id sets
/// `superseded` on the older claim (PROTOCOL.md §7, 4409).
///
/// The takeover rule: every frame the older connection handed to the writer commits before the
/// newer greeting's mark is read (`WriterMsg::Mark` queues behind it), and no frame is handed
/// over once the newer connection may have asked for its mark. Checking `superseded` and then
/// sending is not enough on its own — the older connection's shard may check, be descheduled,
/// and send after the newer one's `Mark` — so both go through `gate`: the older connection
/// checks and sends its `Append` under it ([`Claim::hand_over`]), and the takeover sets
/// `superseded` under it ([`Stream::claim`]) before the `Mark` is sent.
#[derive(Default)]
pub struct Claim {
    /// Set when a newer connection took the id over.
    pub superseded: AtomicBool,
    /// Held while the older connection hands a frame to the writer, and while the takeover
    /// marks the claim superseded.
    gate: Mutex<()>,
}

impl Claim {
    /// Runs `send` (handing a frame to the writer) unless the claim is superseded, atomically
    /// with respect to a takeover; `None` when superseded (nothing was sent).
    pub fn hand_over<T>(&self, send: impl FnOnce() -> T) -> Option<T> {
        let _gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if self.superseded.load(Ordering::SeqCst) {
            return None;
        }
        Some(send())
    }
}

/// What a stream does now (its observed state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// Publishers and subscribers are served.
    Serving,
    /// Writes fenced, connections closed with 1001, the log closed; the data stays.
    Stopped,
    /// Terminal: publishers are refused with 4410, subscribers still read what it holds.
    Retired,
}

impl StreamState {
    /// The name the control API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamState::Serving => "serving",
            StreamState::Stopped => "stopped",
            StreamState::Retired => "retired",
        }
    }

    /// The state called `s`.
    pub fn parse(s: &str) -> Option<StreamState> {
        match s {
            "serving" => Some(StreamState::Serving),
            "stopped" => Some(StreamState::Stopped),
            "retired" => Some(StreamState::Retired),
            _ => None,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            StreamState::Serving => 0,
            StreamState::Stopped => 1,
            StreamState::Retired => 2,
        }
    }

    fn from_u8(v: u8) -> StreamState {
        match v {
            0 => StreamState::Serving,
            1 => StreamState::Stopped,
            2 => StreamState::Retired,
            _ => unreachable!("stream state {v} was never stored"),
        }
    }
}

/// A [`StreamState`] that any thread reads and the control thread sets.
pub struct StateCell(AtomicU8);

impl StateCell {
    /// A cell holding `state`.
    pub fn new(state: StreamState) -> StateCell {
        StateCell(AtomicU8::new(state.to_u8()))
    }
}

/// One declared stream.
pub struct Stream {
    /// Index in the registry (stable for the process).
    pub index: usize,
    /// The declaration.
    pub cfg: StreamConfig,
    /// Validates and encodes rows (schema'd or schema-less).
    pub codec: RowCodec,
    /// The compiled schema, for `where=` checks; `None` on schema-less streams.
    pub schema: Option<Schema>,
    /// The schema as greetings publish it (compact JSON object).
    pub schema_published: Option<String>,
    /// The stream's UUID from its log's meta table; `None` without a log.
    pub stream_id: Option<String>,
    /// `<data_dir>/<name>`.
    pub dir: PathBuf,
    /// The greeting's `metadata` URI (`file://…/NAME/NAME.metadata.json`); `None` without a log.
    pub metadata: Option<String>,
    /// The greeting's `metadata_hint` URI.
    pub metadata_hint: Option<String>,
    /// Which writer thread sequences this stream (`hash(name) mod writers`).
    pub writer: usize,
    /// Counters.
    pub stats: StreamStats,
    /// Rows handed to the writer and not yet committed (bounded by `max_inbound`).
    pub inbound: AtomicUsize,
    /// The committed frontier: the next sequence (offset) the writer will assign.
    pub end: AtomicU64,
    /// The earliest offset the log holds (`end` when the log is empty).
    pub earliest: AtomicU64,
    /// Exactly-once claims by publisher id.
    pub claims: Mutex<HashMap<String, Arc<Claim>>>,
    /// When the stream started serving, µs since the epoch.
    pub started_us: i64,
    /// The sealed tier and the hot log's extent (durable streams; empty for live ones).
    pub tiers: crate::tier::TierState,
    /// Declared over `/control/v1` (kept in `registry.db`) rather than in the TOML file.
    pub managed: bool,
    /// Which opening of a stream this is (unique in the process): a stream stopped and started
    /// again gets a new `Stream` at the same index, and caches keyed by index check it.
    pub generation: u64,
    /// What it does now ([`Stream::state`]).
    pub state: StateCell,
    /// When the stream was retired, µs since the epoch (0: not retired).
    pub retired_at_us: AtomicI64,
    /// The keyed state's handle (`key = [...]` streams only).
    pub keyed: Option<crate::state::Keyed>,
    /// Whether the live log is not the stream's first (a migration made it): catch-up then
    /// reads older logs whose columns may differ from the schema's, so a `where=` value is not
    /// held to the schema's types.
    pub migrated: bool,
}

/// The next [`Stream::generation`].
pub fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Stream {
    /// What the stream does now.
    pub fn state(&self) -> StreamState {
        StreamState::from_u8(self.state.0.load(Ordering::SeqCst))
    }

    /// Sets what the stream does (the control thread only). Retired is terminal.
    pub fn set_state(&self, to: StreamState) {
        assert!(
            self.state() != StreamState::Retired || to == StreamState::Retired,
            "stream {}: retired is terminal",
            self.cfg.name
        );
        if to == StreamState::Retired && self.retired_at_us.load(Ordering::SeqCst) == 0 {
            self.retired_at_us.store(now_us(), Ordering::SeqCst);
        }
        self.state.0.store(to.to_u8(), Ordering::SeqCst);
    }

    /// The close a publisher of this stream gets now, `None` while it is serving: 4410 on a
    /// retired stream, 1001 `stream stopping` on a stopped one.
    pub fn publisher_end(&self) -> Option<(u16, String)> {
        match self.state() {
            StreamState::Serving => None,
            StreamState::Stopped => Some((1001, "stream stopping".into())),
            StreamState::Retired => Some((
                corecast_net::ws::close::CloseCode::STREAM_RETIRED.0,
                corecast_net::protocol::close_reason::CloseReason::StreamRetired {
                    at_us: self.retired_at_us.load(Ordering::SeqCst),
                    end_offset: self.durable().then(|| self.end.load(Ordering::Acquire)),
                }
                .encode(),
            )),
        }
    }

    /// The close a subscriber of this stream gets now: 1001 `stream stopping` once it is
    /// stopped (a retired stream is still read).
    pub fn subscriber_end(&self) -> Option<(u16, String)> {
        (self.state() == StreamState::Stopped).then(|| (1001, "stream stopping".into()))
    }

    /// Whether the stream keeps a log.
    pub fn durable(&self) -> bool {
        self.cfg.durable
    }

    /// Takes the exactly-once id `id` for a new connection, marking any older claim superseded.
    /// When this returns, the older connection has handed its last frame to the writer (under
    /// the claim's gate) and will hand over no more: a `WriterMsg::Mark` sent after it reads a
    /// mark that includes every frame the older connection will ever be acknowledged for.
    pub fn claim(&self, id: &str) -> Arc<Claim> {
        let claim = Arc::new(Claim::default());
        let old = {
            let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            claims.insert(id.to_string(), claim.clone())
        };
        if let Some(old) = old {
            let _gate = old.gate.lock().unwrap_or_else(|p| p.into_inner());
            old.superseded.store(true, Ordering::SeqCst);
        }
        claim
    }

    /// Releases `claim` if it is still the current one for `id`.
    pub fn release(&self, id: &str, claim: &Arc<Claim>) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if claims.get(id).is_some_and(|c| Arc::ptr_eq(c, claim)) {
            claims.remove(id);
        }
    }
}

/// The current [`Registry`] snapshot, swapped whole by the control thread.
pub struct Streams {
    current: RwLock<Arc<Registry>>,
}

impl Streams {
    /// The table starting as `registry`.
    pub fn new(registry: Registry) -> Streams {
        Streams {
            current: RwLock::new(Arc::new(registry)),
        }
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Registry> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts `stream` in the table: at its index when one holds it (a stream started again), or
    /// as the next index (a stream created). Indexes never shrink or move.
    pub fn install(&self, stream: Arc<Stream>) {
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        let mut streams = cur.streams.clone();
        assert!(stream.index <= streams.len(), "stream indexes are dense");
        if stream.index == streams.len() {
            assert!(
                cur.get(&stream.cfg.name).is_none(),
                "stream {} already has an index",
                stream.cfg.name
            );
            streams.push(stream);
        } else {
            let at = stream.index;
            assert_eq!(streams[at].cfg.name, stream.cfg.name);
            streams[at] = stream;
        }
        *cur = Arc::new(Registry::new(streams));
    }
}

/// Every stream, by index and by name.
#[derive(Clone)]
pub struct Registry {
    /// Streams in declaration order.
    pub streams: Vec<Arc<Stream>>,
    by_name: HashMap<String, usize>,
    /// Sorted names, for 4404's `serves`.
    pub names_sorted: Vec<String>,
}

impl Registry {
    /// Builds the registry from opened streams.
    pub fn new(streams: Vec<Arc<Stream>>) -> Registry {
        let by_name = streams
            .iter()
            .map(|s| (s.cfg.name.clone(), s.index))
            .collect();
        let mut names_sorted: Vec<String> = streams.iter().map(|s| s.cfg.name.clone()).collect();
        names_sorted.sort();
        Registry {
            streams,
            by_name,
            names_sorted,
        }
    }

    /// The stream called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Stream>> {
        self.by_name.get(name).map(|&i| &self.streams[i])
    }
}

/// Current time in µs since the Unix epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
