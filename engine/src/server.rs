//! Start-up and shutdown of `corecast serve`.
//!
//! Start-up: lock the data directory (an exclusive `flock`, so two processes never write one
//! log), refuse a port already in use (the shard listeners use `SO_REUSEPORT`, which would
//! otherwise share it silently), open every durable stream's log, start the writer threads, the
//! reader pool and one pinned shard per core, and log which I/O driver runs.
//!
//! Shutdown on SIGTERM/SIGINT: shards stop accepting, publishers get every reply they are owed,
//! then every connection is closed with 1001 `server shutting down`; writers commit what is queued
//! and the process exits 0.

use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use corecast_net::rt::Driver;
use corecast_storage::log::{Buffer, BufferReader, LogOptions};
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::SegmentIndex;

use crate::commit::writer::{Writer, WriterMsg};
use crate::config::StreamConfig;
use crate::config::{Config, Published};
use crate::registry::{now_us, Registry, Stream, StreamState, StreamStats, Streams};
use crate::replay::ReaderPool;
use crate::shard::{self, ShardMsg, ShardSetup, Shared};
use crate::tier::maintenance::{Maintenance, TierJob};
use crate::tier::publish::PublishJob;
use crate::tier::TierState;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another process holds the data directory.
    #[error("data directory {dir} is in use by another corecast process (lock {lock})")]
    DataDirLocked {
        /// The directory.
        dir: String,
        /// The lock file.
        lock: String,
    },
    /// The port is taken.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS's reason.
        reason: String,
    },
    /// A stream could not be opened.
    #[error("stream {stream}: {reason}")]
    Stream {
        /// The stream.
        stream: String,
        /// What failed.
        reason: String,
    },
    /// Anything else (I/O on the data directory, thread start).
    #[error("{0}")]
    Other(String),
}

/// How to run: the config plus command-line overrides.
pub struct ServeOptions {
    /// The configuration.
    pub config: Config,
    /// Serving threads (default: every core).
    pub cores: Option<usize>,
}

/// A started server: its address and the handle to stop it.
pub struct Running {
    /// The address every shard listens on.
    pub addr: SocketAddr,
    /// Whether `addr` speaks TLS (`[tls]` without `listen`).
    pub main_is_tls: bool,
    /// The TLS listener's address (`[tls] listen`).
    pub tls_addr: Option<SocketAddr>,
    /// What SIGHUP reloads.
    pub reload: crate::reload::Reload,
    /// Which driver the shards got.
    pub driver: Driver,
    shards: Vec<(flume::Sender<ShardMsg>, std::thread::JoinHandle<()>)>,
    writers: Vec<(
        crossbeam_channel::Sender<WriterMsg>,
        std::thread::JoinHandle<()>,
    )>,
    maintenance: Maintenance,
    control: Option<crate::control::Control>,
    state_threads: Vec<(Arc<Stream>, std::thread::JoinHandle<()>)>,
    pool: ReaderPool,
    shared: Arc<Shared>,
    _lock: File,
}

/// Checks that `listen` is free and returns the address the shards must bind (the port the
/// kernel picked when `listen` names port 0).
///
/// The probe binds a socket **without listening on it** and without `SO_REUSEPORT` (so a
/// server already listening on the port, with or without it, makes the bind fail with
/// `AddrInUse`), reads its address and closes it. It never listens: a listening probe would
/// accept connections into its backlog during the moment it exists, and closing it would then
/// reset them — a client connecting while a server restarts would see its connection accepted
/// and then dropped. `SO_REUSEADDR` is set as `std`'s listener sets it, so connections of a
/// previous run still in TIME_WAIT do not hold the port.
fn probe_port(listen: SocketAddr) -> std::io::Result<SocketAddr> {
    let socket = probe_socket(listen)?;
    let bound = socket.local_addr()?;
    bound.as_socket().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the probe socket has no IP address",
        )
    })
}

/// [`probe_port`], retried for up to 2 s while the port is in use: a port whose previous owner
/// just exited can stay busy for a moment while its last connections close.
fn probe_with_retry(listen: SocketAddr) -> Result<SocketAddr, StartError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match probe_port(listen) {
            Ok(addr) => return Ok(addr),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                return Err(StartError::Listen {
                    addr: listen,
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// The socket [`probe_port`] binds: `SO_REUSEADDR`, bound to `listen`, never listening.
fn probe_socket(listen: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(listen), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&listen.into())?;
    Ok(socket)
}

fn owner(name: &str, writers: usize) -> usize {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    (h.finish() % writers as u64) as usize
}

/// A stream opened for serving: its registry entry, its log for the writer, its tier job.
pub(crate) struct Opened {
    /// The registry entry.
    pub stream: Arc<Stream>,
    /// The hot log (durable streams), for the owning writer.
    pub log: Option<Buffer>,
    /// The sealed tier's index, a reader of the hot log and the publishing job (durable
    /// streams), for a maintenance thread.
    pub tier: Option<(SegmentIndex, BufferReader, Option<PublishJob>)>,
    /// The frontier the hubs start at.
    pub head: u64,
}

/// How a stream is opened: where, by which writer, declared where, in which state.
pub(crate) struct OpenAs<'a> {
    /// Its registry index.
    pub index: usize,
    /// The data directory (canonical).
    pub data_dir: &'a std::path::Path,
    /// Writer threads (the owner is `hash(name) mod writers`).
    pub writers: usize,
    /// How to reach S3 for an `s3://` published location.
    pub s3: &'a corecast_storage::published::S3Options,
    /// Declared over `/control/v1` rather than in the TOML file.
    pub managed: bool,
    /// Serving or retired (a stopped stream is not opened: [`shell_stream`]).
    pub state: StreamState,
    /// When it was retired (0: not retired, or not known: a retired stream is then retired
    /// from now).
    pub retired_at_us: i64,
}

/// Opens stream `sc`: compiles its schema, opens (or creates) its hot log and sealed tier,
/// checks they meet, and sets up its publishing. Used at start-up for every stream and by the
/// control thread for a stream created or started at run time. The error names what failed.
pub(crate) fn open_stream(sc: &StreamConfig, how: &OpenAs<'_>) -> Result<Opened, String> {
    assert!(
        how.state != StreamState::Stopped,
        "a stopped stream is not opened"
    );
    let OpenAs {
        index,
        data_dir,
        writers: writers_n,
        s3,
        managed,
        state,
        retired_at_us,
    } = *how;
    // a retired stream opened without its retirement's time (retired just now, or before a
    // crash that came before the retirement was observed) is retired from now: 0 would date
    // it 1970 in the published metadata
    let retired_at_us = if state == StreamState::Retired && retired_at_us == 0 {
        crate::registry::now_us()
    } else {
        retired_at_us
    };
    let serr = |reason: String| reason;
    let schema = match &sc.schema_json {
        Some(text) => Some(Schema::compile(text).map_err(|e| serr(format!("schema: {e}")))?),
        None => None,
    };
    // the live log's directory: the stream's own, or the one its last migration started
    let home = data_dir.join(&sc.name);
    let logs = if sc.durable {
        crate::tier::generations::load(&home, &sc.name)?
    } else {
        crate::tier::generations::Generations::first(&sc.name)
    };
    let dir = logs.live_dir(&home);
    let writer = owner(&sc.name, writers_n);
    let mut tier_index: Option<(SegmentIndex, BufferReader, Option<PublishJob>)> = None;
    let mut tiers = TierState::default();
    let mut log = None;
    let (stream_id, end, earliest, metadata, hint) = if sc.durable {
        // the published form, so reformatting the schema file is not a schema change
        let published = schema.as_ref().map(|s| s.published());
        let options = LogOptions {
            segment_bytes: sc.segment_bytes,
        };
        let buffer = Buffer::open_with(&dir, published.as_deref(), options)
            .map_err(|e| serr(e.to_string()))?;
        let end = buffer.end_offset();
        let earliest = buffer.earliest().unwrap_or(end);
        let report = buffer.open_report();
        if report.converted_rows > 0 {
            tracing::info!(
                stream = %sc.name,
                rows = report.converted_rows,
                "converted {} from the SQLite buffer (storage format 2) to segment files",
                dir.display()
            );
        }
        if let Some((file, at, cleared)) = &report.torn_tail {
            tracing::warn!(
                stream = %sc.name,
                "cleared a torn tail in {} at byte {at} ({cleared} bytes): a commit cut off by a crash, never acknowledged",
                file.display()
            );
        }
        for file in &report.swept {
            tracing::info!(stream = %sc.name, "removed {}", file.display());
        }
        tracing::info!(
            stream = %sc.name,
            hot_earliest = earliest,
            end_offset = end,
            segments = report.segments,
            "opened the hot log {}",
            buffer.path().display()
        );
        // the sealed tier: sweep what a crash left, check it meets the hot log
        let index_db = SegmentIndex::open(&dir).map_err(|e| serr(e.to_string()))?;
        for name in index_db.sweep().map_err(|e| serr(e.to_string()))? {
            tracing::info!(stream = %sc.name, "removed segments/{name}: written but never recorded (a crash while sealing, or retention)");
        }
        let entries = index_db.entries().map_err(|e| serr(e.to_string()))?;
        let sealed_end = index_db.sealed_end().map_err(|e| serr(e.to_string()))?;
        let hot_floor = buffer.earliest().unwrap_or(end);
        if hot_floor > sealed_end {
            return Err(serr(format!(
                "offsets {sealed_end}..{hot_floor} are in no tier: the sealed segments end before {sealed_end} and the hot log starts at {hot_floor} (a file removed by hand?)"
            )));
        }
        if sealed_end > end {
            return Err(serr(format!(
                "the segment index says rows up to {} are sealed, but the log ends at {end}",
                sealed_end - 1
            )));
        }
        if let (Some(first), Some(last)) = (entries.first(), entries.last()) {
            tracing::info!(
                stream = %sc.name,
                segments = entries.len(),
                "sealed tier holds offsets {}..={}: history starts at offset {}",
                first.first_offset,
                last.last_offset,
                first.first_offset.min(hot_floor)
            );
        }
        let dropped_through = index_db
            .dropped_through()
            .map_err(|e| serr(e.to_string()))?;
        tiers = TierState::new(entries, sealed_end, dropped_through);
        let earliest = tiers.earliest(hot_floor);
        let id = buffer.stream_id().to_string();
        // the published tier: where the table and the stream metadata go
        let layout = live_layout(sc, &home, &logs, s3).map_err(serr)?;
        let (metadata, hint) = match &layout {
            Some(l) => (Some(l.metadata_uri()), Some(l.metadata_hint_uri())),
            None => (None, None),
        };
        let publish = layout.map(|layout| {
            tracing::info!(stream = %sc.name, "publishes its history to {} (table {}, stream metadata {})", layout.published, layout.table.base(), layout.metadata_hint_uri());
            tiers.publishing.store(true, Ordering::Relaxed);
            let info = corecast_storage::published::StreamInfo {
                stream_id: id.clone(),
                schema_json: published.clone(),
                segment_schema: corecast_storage::tier::segment_schema(&match &schema {
                    Some(s) => RowCodec::Schema(s.clone()),
                    None => RowCodec::Schemaless,
                }),
                // a retired stream's metadata keeps saying so (version 3)
                retirement: (state == StreamState::Retired).then_some(
                    corecast_storage::published::Retirement {
                        at_us: retired_at_us,
                        end_offset: end,
                    },
                ),
                sealed_logs: logs.sealed_entries(),
            };
            let expiry = (!logs.sealed.is_empty() || !logs.dropping.is_empty()).then(|| {
                crate::tier::expiry::SealedExpiry::new(
                    home.clone(),
                    sc.name.clone(),
                    match &sc.published {
                        Published::At(_) => Some(layout.published.clone()),
                        _ => None,
                    },
                    s3.clone(),
                    sc.published_grace,
                    logs.clone(),
                )
            });
            PublishJob::new(layout, info, index_db.dir().to_path_buf(), expiry)
        });
        tier_index = Some((
            index_db,
            buffer.reader().map_err(|e| serr(e.to_string()))?,
            publish,
        ));
        log = Some(buffer);
        (Some(id), end, earliest, metadata, hint)
    } else {
        (None, 1, 1, None, None)
    };
    let codec = match &schema {
        Some(s) => RowCodec::Schema(s.clone()),
        None => RowCodec::Schemaless,
    };
    let keyed = if sc.key.is_empty() {
        None
    } else {
        let spec = crate::state::spec_for(sc, schema.as_ref())?;
        tracing::info!(stream = %sc.name, key = ?sc.key, remove_when = ?sc.remove_when, max_keys = sc.max_keys, "keyed: the latest row per key is kept (?state)");
        Some(crate::state::Keyed::new(sc, spec, end))
    };
    let stream = Arc::new(Stream {
        index,
        cfg: sc.clone(),
        schema_published: schema.as_ref().map(|s| s.published()),
        schema,
        codec,
        stream_id,
        dir,
        metadata,
        metadata_hint: hint,
        writer,
        stats: StreamStats::default(),
        inbound: Default::default(),
        end: AtomicU64::new(end),
        earliest: AtomicU64::new(earliest),
        claims: Mutex::new(Default::default()),
        started_us: now_us(),
        tiers,
        managed,
        generation: crate::registry::next_generation(),
        state: crate::registry::StateCell::new(state),
        retired_at_us: AtomicI64::new(retired_at_us),
        keyed,
        migrated: !logs.is_first(),
    });
    Ok(Opened {
        stream,
        log,
        tier: tier_index,
        head: end,
    })
}

/// Where stream `sc`'s live log publishes (`None`: `published = "off"`): the stream's home
/// (`<data>/<stream>`, or `<location>/<stream>`) keeps the stream metadata; a migrated stream's
/// live log has its own table, `<published>/<stream>-v<N>` (PUBLISHED.md §3.2).
pub(crate) fn live_layout(
    sc: &StreamConfig,
    home: &std::path::Path,
    logs: &crate::tier::generations::Generations,
    s3: &corecast_storage::published::S3Options,
) -> Result<Option<corecast_storage::published::Layout>, String> {
    use corecast_storage::published::Layout;
    let e = |e: corecast_storage::published::StoreError| format!("published: {e}");
    let base = match &sc.published {
        Published::Off => return Ok(None),
        Published::Local => Layout::local(home, &sc.name).map_err(e)?,
        Published::At(location) => Layout::at(location, &sc.name, s3).map_err(e)?,
    };
    if logs.is_first() {
        return Ok(Some(base));
    }
    let local = matches!(sc.published, Published::Local).then(|| logs.live_dir(home));
    base.for_log(&logs.live.name, local.as_deref(), s3)
        .map(Some)
        .map_err(e)
}

/// The registry entry of a managed stream that is stopped at start-up: its declaration and codec,
/// no log (the writer holds none, nothing is served; starting it opens it with
/// [`open_stream`]).
pub(crate) fn shell_stream(
    sc: &StreamConfig,
    index: usize,
    data_dir: &std::path::Path,
    writers: usize,
) -> Result<Arc<Stream>, String> {
    let schema = match &sc.schema_json {
        Some(text) => Some(Schema::compile(text).map_err(|e| format!("schema: {e}"))?),
        None => None,
    };
    let codec = match &schema {
        Some(s) => RowCodec::Schema(s.clone()),
        None => RowCodec::Schemaless,
    };
    Ok(Arc::new(Stream {
        index,
        cfg: sc.clone(),
        schema_published: schema.as_ref().map(|s| s.published()),
        schema,
        codec,
        stream_id: None,
        dir: data_dir.join(&sc.name),
        metadata: None,
        metadata_hint: None,
        writer: owner(&sc.name, writers),
        stats: StreamStats::default(),
        inbound: Default::default(),
        end: AtomicU64::new(0),
        earliest: AtomicU64::new(0),
        claims: Mutex::new(Default::default()),
        started_us: now_us(),
        tiers: TierState::default(),
        managed: true,
        generation: crate::registry::next_generation(),
        state: crate::registry::StateCell::new(StreamState::Stopped),
        retired_at_us: AtomicI64::new(0),
        keyed: None,
        migrated: false,
    }))
}

/// Starts the server; returns once every shard listens.
pub fn start(opts: ServeOptions) -> Result<Running, StartError> {
    let cfg = opts.config;
    // on this thread, before any shard pins itself to a core (a pinned thread sees one CPU)
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = opts.cores.unwrap_or(cpus).max(1);
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        StartError::Other(format!(
            "cannot create data directory {}: {e}",
            cfg.data_dir.display()
        ))
    })?;
    let data_dir: PathBuf = cfg
        .data_dir
        .canonicalize()
        .map_err(|e| StartError::Other(format!("{}: {e}", cfg.data_dir.display())))?;
    let lock_path = data_dir.join(".corecast.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| StartError::Other(format!("cannot create {}: {e}", lock_path.display())))?;
    if lock.try_lock().is_err() {
        return Err(StartError::DataDirLocked {
            dir: data_dir.display().to_string(),
            lock: lock_path.display().to_string(),
        });
    }
    // the pull API's cursor key (configured, or kept in the data directory) and the SSE caps
    let key = crate::cursor::CursorKey::load_or_create(
        &data_dir,
        cfg.http_api.cursor_key.as_deref(),
        cfg.http_api.cursor_ttl_s,
    )
    .map_err(StartError::Other)?;
    crate::cursor::install(key);
    crate::session::sse::install(&cfg.http_api);
    crate::ingest::install(&cfg.ingest);
    crate::session::deliver::install_write_timeout(cfg.write_timeout);
    let fds = crate::limits::check_descriptors(&cfg);
    if let Some(from) = fds.raised_from {
        tracing::info!(
            "raised RLIMIT_NOFILE from {from} to {}",
            fds.limit.map_or("unlimited".into(), |l| l.to_string())
        );
    }
    if let Some(warning) = &fds.warning {
        tracing::warn!("{warning}");
    }
    // SO_REUSEPORT would let a second server share the port silently: probe without it first.
    // A port whose previous owner just exited can stay busy for a moment while its last
    // connections close: retry for up to 2 s before calling it in use.
    let addr = probe_with_retry(cfg.listen)?;
    // TLS: the certificate (checked again: the config was read a moment ago, but files move),
    // on the main address or on a listener of its own
    let (main_tls, tls_listen, reload) = match &cfg.tls {
        None => (None, None, crate::reload::Reload::default()),
        Some(t) => {
            let store = Arc::new(
                crate::tls::CertStore::load(&t.cert, &t.key)
                    .map_err(|e| StartError::Other(format!("tls: {e}")))?,
            );
            let server_cfg = store.server_config();
            let reload = crate::reload::Reload { tls: Some(store) };
            match t.listen {
                None => (Some(server_cfg), None, reload),
                Some(l) => {
                    let tls_addr = probe_with_retry(l)?;
                    if tls_addr == addr {
                        return Err(StartError::Listen {
                            addr: l,
                            reason: "tls.listen is the main listen address".into(),
                        });
                    }
                    (None, Some((tls_addr, server_cfg)), reload)
                }
            }
        }
    };
    let main_is_tls = main_tls.is_some();
    let mut listen = vec![shard::ListenOn {
        addr,
        tls: main_tls,
    }];
    if let Some((a, c)) = &tls_listen {
        listen.push(shard::ListenOn {
            addr: *a,
            tls: Some(c.clone()),
        });
    }

    // open the streams
    let writers_n = cores;
    let mut streams = Vec::new();
    let mut buffers: Vec<Vec<(usize, Buffer)>> = (0..writers_n).map(|_| Vec::new()).collect();
    let mut live: Vec<Vec<usize>> = (0..writers_n).map(|_| Vec::new()).collect();
    let mut heads = Vec::new();
    let mut tier_jobs = Vec::new();
    // the TOML streams, then the managed ones of registry.db (their pending operations are
    // finished here: each opens in the state it was last asked for)
    let control_db = crate::control::db::Db::open(&data_dir).map_err(StartError::Other)?;
    let managed = control_db.startup_streams().map_err(StartError::Other)?;
    for m in &managed {
        if cfg.streams.iter().any(|s| s.name == m.cfg.name) {
            return Err(StartError::Stream {
                stream: m.cfg.name.clone(),
                reason: "declared both in the config file and in registry.db (created over /control/v1); remove one".into(),
            });
        }
    }
    let mut managed_jobs = Vec::new();
    let declared = cfg
        .streams
        .iter()
        .map(|sc| (sc, false, StreamState::Serving, 0))
        .chain(
            managed
                .iter()
                .map(|m| (&m.cfg, true, m.desired, m.retired_at_us)),
        );
    for (index, (sc, is_managed, state, retired_at_us)) in declared.enumerate() {
        let serr = |reason: String| StartError::Stream {
            stream: sc.name.clone(),
            reason,
        };
        if state == StreamState::Stopped {
            let stream = shell_stream(sc, index, &data_dir, writers_n).map_err(serr)?;
            heads.push(0);
            streams.push(stream);
            continue;
        }
        let how = OpenAs {
            index,
            data_dir: &data_dir,
            writers: writers_n,
            s3: &cfg.s3,
            managed: is_managed,
            state,
            retired_at_us,
        };
        let opened = match open_stream(sc, &how) {
            Ok(o) => o,
            Err(reason) if !is_managed => return Err(serr(reason)),
            // a managed stream that cannot open does not keep the broker down: it stays
            // stopped (observed), and its unfinished operation fails
            Err(reason) => {
                tracing::error!(stream = %sc.name, "cannot open this stream of registry.db; it stays stopped: {reason}");
                let stream = shell_stream(sc, index, &data_dir, writers_n).map_err(serr)?;
                heads.push(0);
                streams.push(stream);
                continue;
            }
        };
        let writer = opened.stream.writer;
        match opened.log {
            Some(buffer) => buffers[writer].push((index, buffer)),
            None => live[writer].push(index),
        }
        heads.push(opened.head);
        if let Some(job) = opened.tier {
            // a managed stream's maintenance thread is its own: stopping it stops that thread
            if is_managed {
                managed_jobs.push((index, job));
            } else {
                tier_jobs.push((index, job));
            }
        }
        streams.push(opened.stream);
    }
    let registry = Arc::new(Streams::new(Registry::new(streams)));

    // channels
    let shard_chans: Vec<(flume::Sender<ShardMsg>, flume::Receiver<ShardMsg>)> = (0..cores)
        .map(|_| flume::bounded(shard::INBOX_BATCHES))
        .collect();
    let shard_senders: Vec<flume::Sender<ShardMsg>> =
        shard_chans.iter().map(|(t, _)| t.clone()).collect();
    let mut writers = Vec::new();
    let mut writer_senders = Vec::new();
    for (i, (bufs, lives)) in buffers.into_iter().zip(live).enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let w = Writer::new(rx, bufs, lives, registry.clone(), shard_senders.clone());
        let h = std::thread::Builder::new()
            .name(format!("corecast-writer-{i}"))
            .spawn(move || w.run())
            .map_err(|e| StartError::Other(format!("cannot start writer thread: {e}")))?;
        writer_senders.push(tx.clone());
        writers.push((tx, h));
    }
    let jobs = tier_jobs
        .into_iter()
        .map(|(i, (index, reader, publish))| {
            let st = registry.load().streams[i].clone();
            let writer = writer_senders[st.writer].clone();
            TierJob::new(st, index, reader, writer, publish)
        })
        .collect();
    let maintenance = Maintenance::start(jobs, (cores / 4).max(1))
        .map_err(|e| StartError::Other(format!("cannot start a maintenance thread: {e}")))?;
    let mut managed_maintenance = std::collections::HashMap::new();
    for (i, (index, reader, publish)) in managed_jobs {
        let st = registry.load().streams[i].clone();
        let writer = writer_senders[st.writer].clone();
        let job = TierJob::new(st, index, reader, writer, publish);
        let m = Maintenance::start(vec![job], 1)
            .map_err(|e| StartError::Other(format!("cannot start a maintenance thread: {e}")))?;
        managed_maintenance.insert(i, m);
    }
    let pool = ReaderPool::start(2, registry.clone());
    let mut state_threads = Vec::new();
    for st in registry.load().streams.iter().filter(|s| s.keyed.is_some()) {
        let h = crate::state::start(st.clone(), pool.sender())
            .map_err(|e| StartError::Other(format!("cannot start a state thread: {e}")))?;
        state_threads.push((st.clone(), h));
    }
    let mut shared = Shared::new(
        registry,
        writer_senders,
        pool.sender(),
        cfg.echo,
        cfg.keepalive,
    );
    shared.cpus = cpus;
    match &cfg.auth {
        None => tracing::warn!(
            "no [auth] section: the broker is open — any client that reaches the port reads and publishes every stream"
        ),
        Some(a) => tracing::info!(
            principals = a.principals.len(),
            jwt = a.jwt.is_some(),
            "authentication on"
        ),
    }
    crate::auth::warn_about(&cfg);
    shared.auth = crate::auth::Auth::new(cfg.auth.clone(), cfg.allowed_origins.clone());
    shared.max_connections = cfg.max_connections;
    shared.shard_inboxes = shard_senders.clone();
    let (control_tx, control_rx) = crate::control::Control::channel();
    shared.control = Some(control_tx.clone());
    shared.control_settings = crate::control::http::Settings {
        on: cfg.auth.is_some() || cfg.control.enabled,
        auth: cfg.auth.is_some(),
        max_body_bytes: cfg.control.max_body_bytes,
    };
    if cfg.auth.is_none() && cfg.control.enabled {
        tracing::warn!("[control] enabled without [auth]: any client that reaches the port may create, stop and retire streams over /control/v1");
    }
    let shared = Arc::new(shared);
    let core_ids = core_affinity::get_core_ids().unwrap_or_default();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut shards = Vec::new();
    for (i, (tx, rx)) in shard_chans.into_iter().enumerate() {
        let setup = ShardSetup {
            index: i,
            listen: listen.clone(),
            core: core_ids.get(i % core_ids.len().max(1)).copied(),
            shared: shared.clone(),
            inbox: rx,
            heads: heads.clone(),
            ready: ready_tx.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("corecast-shard-{i}"))
            .spawn(move || shard::run(setup))
            .map_err(|e| StartError::Other(format!("cannot start shard thread: {e}")))?;
        shards.push((tx, h));
    }
    let mut driver = Driver::IoUring;
    for _ in 0..cores {
        match ready_rx.recv() {
            Ok(Ok(d)) => {
                if d == Driver::Fallback {
                    driver = d;
                }
            }
            Ok(Err(reason)) => return Err(StartError::Other(reason)),
            Err(_) => return Err(StartError::Other("a shard thread died at start".into())),
        }
    }
    let control = crate::control::Control::start(
        crate::control::Setup {
            db: control_db,
            data_dir: data_dir.clone(),
            s3: cfg.s3.clone(),
            maintenance: managed_maintenance,
            body_bytes_max: cfg.control.max_body_bytes,
            max_streams: cfg.control.max_streams,
        },
        shared.clone(),
        control_tx,
        control_rx,
    )
    .map_err(StartError::Other)?;
    Ok(Running {
        addr,
        main_is_tls,
        tls_addr: tls_listen.map(|(a, _)| a),
        reload,
        driver,
        shards,
        writers,
        maintenance,
        control: Some(control),
        state_threads,
        pool,
        shared,
        _lock: lock,
    })
}

impl Running {
    /// Applies what SIGHUP reloads from a freshly read config: the principals, their
    /// credentials and grants, and the allowed origins. New requests are decided by it;
    /// connections already admitted keep running.
    pub fn reload_auth(&self, cfg: &Config) {
        if cfg.auth.is_none() && self.shared.auth.policy().is_some() {
            tracing::warn!(
                "SIGHUP: the new config has no [auth] section: the broker is now OPEN — any client that reaches the port reads and publishes every stream"
            );
        }
        crate::auth::warn_about(cfg);
        self.shared
            .auth
            .reload(cfg.auth.clone(), cfg.allowed_origins.clone());
        tracing::info!(
            principals = cfg.auth.as_ref().map_or(0, |a| a.principals.len()),
            open = cfg.auth.is_none(),
            "reloaded [auth] and allowed_origins"
        );
    }

    /// Stops the server: drain publishers, close every connection with 1001, commit what is
    /// queued, join every thread.
    pub fn shutdown(mut self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        // first: an operation under way talks to the shards and writers
        if let Some(c) = self.control.take() {
            c.stop();
        }
        for (tx, _) in &self.shards {
            let _ = tx.send(ShardMsg::Shutdown);
        }
        for (_, h) in self.shards {
            let _ = h.join();
        }
        // before the writers: it asks them to evict
        self.maintenance.stop();
        for (tx, _) in &self.writers {
            let _ = tx.send(WriterMsg::Stop);
        }
        for (_, h) in self.writers {
            let _ = h.join();
        }
        // after the writers: every committed batch is in the state inboxes; each thread folds
        // them and writes its last checkpoint
        for (st, _) in &self.state_threads {
            if let Some(k) = &st.keyed {
                k.stop();
            }
        }
        for (_, h) in self.state_threads {
            let _ = h.join();
        }
        drop(self.shared);
        self.pool.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The port probe never accepts a connection: one made while it holds the port is refused,
    /// not queued in a backlog that closing the probe would reset.
    #[test]
    fn the_port_probe_does_not_listen() {
        let probe = probe_socket("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = probe.local_addr().unwrap().as_socket().unwrap();
        assert_ne!(addr.port(), 0, "the kernel picked a port");
        let e = std::net::TcpStream::connect(addr).expect_err("nothing listens");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        drop(probe);
        // a port some listener holds is in use for the probe
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = probe_port(l.local_addr().unwrap()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        // port 0: the address of a free port the kernel picked
        assert_ne!(
            probe_port("127.0.0.1:0".parse().unwrap()).unwrap().port(),
            0
        );
    }
}
