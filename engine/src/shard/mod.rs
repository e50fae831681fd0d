//! Shards: one serving thread per core, pinned, each with its own io_uring loop and its own
//! `SO_REUSEPORT` listener.
//!
//! A shard owns the connections it accepted and, per stream, a local [`Hub`] (the ring of recent
//! frame batches and the subscribers reading it). Its inbox receives every committed batch of every
//! stream from the writer threads ([`ShardMsg::Batch`]) and the shutdown order. What all threads
//! share read-only (registry, writer and reader-pool senders, counters) is [`Shared`]; what only
//! this thread touches is [`ShardCtx`].

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_net::rt::{self, Driver, Listener};

use crate::commit::writer::WriterMsg;
use crate::config::KeepaliveConfig;
use crate::fanout::batch::FrameBatch;
use crate::fanout::ring::Hub;
use crate::fanout::signal::Signal;
use crate::registry::Streams;
use crate::replay::ReplaySender;
use crate::session::conn;

/// How long shutdown waits for publishers to be answered before closing subscribers anyway.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Committed batches a shard's inbox holds before the writers wait for it (backpressure that
/// reaches publishers through `max_inbound`; a healthy shard drains its inbox in microseconds).
pub const INBOX_BATCHES: usize = 4096;

/// How long, after publishers are answered at shutdown, readers may keep catching up.
pub const READER_GRACE: Duration = Duration::from_secs(2);

/// A message to a shard's inbox.
pub enum ShardMsg {
    /// A committed batch of a stream, to append to this shard's hub.
    Batch {
        /// Stream index.
        stream: usize,
        /// The frames, shared with every other shard.
        batch: Arc<FrameBatch>,
    },
    /// Stop accepting, drain publishers, close every connection with 1001.
    Shutdown,
    /// Wake the long-lived sessions of one stream (`Some`: it was stopped or retired) or of
    /// every stream (`None`: a principal was revoked) to look at their state.
    Wake(Option<usize>),
    /// Give stream `stream` a fresh hub whose head is `head` (a stream created or started
    /// again by the control thread), then answer on `done`. Sent before the stream is put in
    /// the registry, so no session looks for a hub this shard does not have yet.
    Hub {
        /// Stream index: an existing one (replaced) or the next one (added).
        stream: usize,
        /// The frontier the hub starts at.
        head: u64,
        /// The hub's retention in frames.
        retain: usize,
        /// The stream's `coalesce_us` (zero: subscribers woken at every batch).
        coalesce: Duration,
        /// Answered once the hub is in place.
        done: flume::Sender<()>,
    },
}

/// How many frames a stream's hub keeps: twice `max_backlog`, at least 65,536.
pub fn hub_retain(max_backlog: u64) -> usize {
    (max_backlog as usize).saturating_mul(2).max(65_536)
}

/// State every thread shares.
pub struct Shared {
    /// The streams (the current snapshot: [`Streams::load`]).
    pub registry: Arc<Streams>,
    /// One sender per writer thread.
    pub writers: Vec<crossbeam_channel::Sender<WriterMsg>>,
    /// The reader pool's job queue.
    pub replay: ReplaySender,
    /// Serve `/_echo`.
    pub echo: bool,
    /// WebSocket keepalive for publishers and subscribers; `None`: off.
    pub keepalive: Option<KeepaliveConfig>,
    /// Open publisher connections, all shards (shutdown closes subscribers after they drain).
    pub publishers_open: AtomicI64,
    /// Open connections, all shards.
    pub connections: AtomicI64,
    /// Set once shutdown starts.
    pub shutting_down: AtomicBool,
    /// Who may do what (`[auth]`, `allowed_origins`); reloaded on SIGHUP.
    pub auth: crate::auth::Auth,
    /// Open connections allowed, all shards (`max_connections`); `None`: the descriptors are
    /// the limit.
    pub max_connections: Option<u64>,
    /// Connections past the gate, all shards (what `max_connections` caps).
    pub admitted: AtomicI64,
    /// Every shard's inbox, to wake their sessions ([`ShardMsg::Wake`]) and to give them a
    /// stream's hub ([`ShardMsg::Hub`]).
    pub shard_inboxes: Vec<flume::Sender<ShardMsg>>,
    /// The control thread's queue (`crate::control`); `None` until it runs.
    pub control: Option<crossbeam_channel::Sender<crate::control::ControlMsg>>,
    /// Whether `/control/v1` is served, and its body limit.
    pub control_settings: crate::control::http::Settings,
    /// The CPUs the process may run on (`cpus` of `/stats`), read once at start-up by the
    /// thread that starts the server, before any shard pins itself to one core (a pinned
    /// thread sees exactly one).
    pub cpus: usize,
    driver: AtomicU8,
}

impl Shared {
    /// Bundles the shared state.
    pub fn new(
        registry: Arc<Streams>,
        writers: Vec<crossbeam_channel::Sender<WriterMsg>>,
        replay: ReplaySender,
        echo: bool,
        keepalive: Option<KeepaliveConfig>,
    ) -> Shared {
        Shared {
            registry,
            writers,
            replay,
            echo,
            keepalive,
            publishers_open: AtomicI64::new(0),
            connections: AtomicI64::new(0),
            shutting_down: AtomicBool::new(false),
            auth: crate::auth::Auth::open(),
            max_connections: None,
            admitted: AtomicI64::new(0),
            shard_inboxes: Vec::new(),
            control: None,
            control_settings: crate::control::http::Settings {
                on: false,
                auth: false,
                max_body_bytes: 0,
            },
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            driver: AtomicU8::new(0),
        }
    }

    /// Wakes every session on every shard (off this thread: a shard's inbox may be full, and a
    /// shard must never block on another's).
    pub fn wake_all_sessions(&self) {
        self.wake(None);
    }

    /// Wakes the sessions of stream `stream` on every shard, and no other: a stream stopped or
    /// retired at run time leaves its neighbours' thousands of subscribers asleep.
    pub fn wake_stream_sessions(&self, stream: usize) {
        self.wake(Some(stream));
    }

    fn wake(&self, stream: Option<usize>) {
        let inboxes = self.shard_inboxes.clone();
        let _ = std::thread::Builder::new()
            .name("corecast-wake".into())
            .spawn(move || {
                for tx in inboxes {
                    let _ = tx.send(ShardMsg::Wake(stream));
                }
            });
    }

    /// `io_uring` or `fallback`: the worst driver any shard got.
    pub fn driver_name(&self) -> &'static str {
        match self.driver.load(Ordering::Relaxed) {
            1 => "fallback",
            _ => "io_uring",
        }
    }
}

/// One shard's thread-local state.
pub struct ShardCtx {
    /// This shard's index.
    pub index: usize,
    /// What every thread shares.
    pub shared: Arc<Shared>,
    /// One hub per stream, by stream index (a stream created at run time adds one).
    hubs: RefCell<Vec<Rc<RefCell<Hub>>>>,
    /// Long-lived sessions' signals, each with its stream's index.
    sessions: RefCell<Vec<(usize, Weak<Signal>)>>,
    shutting_down: Cell<bool>,
    drain_started: Cell<Option<Instant>>,
}

impl ShardCtx {
    /// The hub of stream `stream`. Every stream in the registry has one on every shard (the
    /// control thread adds it before it puts the stream in the registry).
    pub fn hub(&self, stream: usize) -> Rc<RefCell<Hub>> {
        let hubs = self.hubs.borrow();
        assert!(
            stream < hubs.len(),
            "stream {stream} has no hub on shard {}",
            self.index
        );
        hubs[stream].clone()
    }

    /// Whether this shard is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// During shutdown, once every publisher is answered: readers still catching up get at most
    /// [`READER_GRACE`] more before they are closed (1001 / SSE `event: end`), and a reader still
    /// replaying history is closed at once — it resumes from its offset after the restart.
    pub fn readers_must_close(&self, replaying: bool) -> bool {
        self.shutting_down.get()
            && self.shared.publishers_open.load(Ordering::SeqCst) == 0
            && (replaying
                || self
                    .drain_started
                    .get()
                    .is_some_and(|t| t.elapsed() >= READER_GRACE))
    }

    /// Registers a long-lived session of stream `stream` so that shutdown, a revocation or a
    /// change of its stream's state can wake it.
    pub fn register(&self, stream: usize, s: &Rc<Signal>) {
        let mut v = self.sessions.borrow_mut();
        v.retain(|(_, w)| w.strong_count() > 0);
        v.push((stream, Rc::downgrade(s)));
    }

    /// Raises the signals of stream `only`'s sessions, or of every session (`None`).
    fn raise(&self, only: Option<usize>) {
        for (stream, w) in self.sessions.borrow().iter() {
            if only.is_some_and(|o| o != *stream) {
                continue;
            }
            if let Some(s) = w.upgrade() {
                s.raise();
            }
        }
    }

    fn raise_all(&self) {
        self.raise(None);
    }
}

/// One listening address and whether it speaks TLS.
#[derive(Clone)]
pub struct ListenOn {
    /// The address (port resolved).
    pub addr: SocketAddr,
    /// The TLS configuration, or `None` for plaintext.
    pub tls: Option<rt::TlsServerConfig>,
}

/// Everything a shard thread needs to start.
pub struct ShardSetup {
    /// Shard index.
    pub index: usize,
    /// Addresses to listen on (ports already resolved): the main one first, then a TLS-only
    /// one when `[tls] listen` is set.
    pub listen: Vec<ListenOn>,
    /// Core to pin to, if any.
    pub core: Option<core_affinity::CoreId>,
    /// Shared state.
    pub shared: Arc<Shared>,
    /// The inbox.
    pub inbox: flume::Receiver<ShardMsg>,
    /// Initial frontier per stream (the hubs' heads).
    pub heads: Vec<u64>,
    /// Reports the driver (or the start error) once the listener is bound.
    pub ready: std::sync::mpsc::Sender<Result<Driver, String>>,
}

/// Runs a shard thread to completion (returns after shutdown drained its connections).
pub fn run(setup: ShardSetup) {
    if let Some(core) = setup.core {
        core_affinity::set_for_current(core);
    }
    let mut runtime = match rt::build_runtime(4096) {
        Ok(r) => r,
        Err(e) => {
            let _ = setup
                .ready
                .send(Err(format!("cannot build the runtime: {e}")));
            return;
        }
    };
    let driver = runtime.driver();
    if driver == Driver::Fallback {
        setup.shared.driver.store(1, Ordering::Relaxed);
    }
    let ShardSetup {
        index,
        listen,
        shared,
        inbox,
        heads,
        ready,
        ..
    } = setup;
    runtime.block_on(async move {
        let mut listeners = Vec::new();
        for on in listen {
            match Listener::bind_shared(on.addr) {
                Ok(l) => listeners.push((l, on.tls)),
                Err(e) => {
                    let _ = ready.send(Err(format!("cannot listen on {}: {e}", on.addr)));
                    return;
                }
            }
        }
        let registry = shared.registry.load();
        assert_eq!(registry.streams.len(), heads.len(), "one head per stream");
        let hubs = registry
            .streams
            .iter()
            .zip(heads)
            .map(|(s, h)| {
                Rc::new(RefCell::new(Hub::new(
                    h,
                    hub_retain(s.cfg.max_backlog),
                    s.cfg.coalesce,
                )))
            })
            .collect();
        drop(registry);
        let ctx = Rc::new(ShardCtx {
            index,
            shared,
            hubs: RefCell::new(hubs),
            sessions: RefCell::new(Vec::new()),
            shutting_down: Cell::new(false),
            drain_started: Cell::new(None),
        });
        let _ = ready.send(Ok(driver));
        for (listener, tls) in listeners {
            rt::spawn(accept_loop(ctx.clone(), listener, tls));
        }
        inbox_loop(&ctx, inbox).await;
    });
}

/// Accepts connections on `listener` and serves each on this shard; over TLS when `tls` is
/// set (the handshake then runs inside the request head's first reads, under its deadline).
async fn accept_loop(ctx: Rc<ShardCtx>, listener: Listener, tls: Option<rt::TlsServerConfig>) {
    // failures (EMFILE when descriptors run out) are logged at most once a second, with a count
    let mut last_log: Option<Instant> = None;
    let mut suppressed = 0u64;
    loop {
        match listener.accept().await {
            Ok((conn, _peer)) => {
                if ctx.shutting_down() {
                    drop(conn);
                    continue;
                }
                let conn = match &tls {
                    None => conn,
                    Some(cfg) => match conn.tls_accept(cfg) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(shard = ctx.index, "tls session not created: {e}");
                            continue;
                        }
                    },
                };
                rt::spawn(conn::handle(ctx.clone(), conn));
            }
            Err(e) => {
                if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    tracing::warn!(
                        shard = ctx.index,
                        suppressed,
                        "accept failed: {e} (retrying; connections wait in the backlog)"
                    );
                    last_log = Some(Instant::now());
                    suppressed = 0;
                } else {
                    suppressed += 1;
                }
                rt::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn inbox_loop(ctx: &Rc<ShardCtx>, inbox: flume::Receiver<ShardMsg>) {
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let msg = if drain_deadline.is_some() {
            rt::timeout(Duration::from_millis(20), inbox.recv_async()).await
        } else {
            Some(inbox.recv_async().await)
        };
        match msg {
            Some(Ok(ShardMsg::Batch { stream, batch })) => {
                let hub = ctx.hub(stream);
                let window = hub.borrow_mut().push(batch);
                if let Some(d) = window {
                    // a coalescing stream: one timer per window on this shard wakes its
                    // subscribers for every batch that landed meanwhile
                    rt::spawn(async move {
                        rt::sleep(d).await;
                        hub.borrow_mut().flush();
                    });
                }
            }
            Some(Ok(ShardMsg::Hub {
                stream,
                head,
                retain,
                coalesce,
                done,
            })) => {
                let hub = Rc::new(RefCell::new(Hub::new(head, retain, coalesce)));
                let mut hubs = ctx.hubs.borrow_mut();
                assert!(stream <= hubs.len(), "stream indexes are dense");
                if stream == hubs.len() {
                    hubs.push(hub);
                } else {
                    // the stream's sessions ended when it stopped; a straggler still attached
                    // to the old hub finds its stream stopped and closes
                    hubs[stream] = hub;
                }
                drop(hubs);
                let _ = done.send(());
            }
            Some(Ok(ShardMsg::Wake(only))) => ctx.raise(only),
            Some(Ok(ShardMsg::Shutdown)) | Some(Err(_)) => {
                if drain_deadline.is_none() {
                    ctx.shutting_down.set(true);
                    ctx.drain_started.set(Some(Instant::now()));
                    drain_deadline = Some(Instant::now() + DRAIN_TIMEOUT);
                }
                ctx.raise_all();
            }
            None => {}
        }
        if let Some(deadline) = drain_deadline {
            ctx.raise_all();
            let live = ctx
                .sessions
                .borrow()
                .iter()
                .any(|(_, w)| w.strong_count() > 0);
            let pubs = ctx.shared.publishers_open.load(Ordering::SeqCst);
            if (!live && pubs == 0) || Instant::now() > deadline + Duration::from_secs(5) {
                return;
            }
        }
    }
}
