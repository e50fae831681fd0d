//! Configuration: the TOML file that declares the streams, and the embedded default.
//!
//! ```toml
//! listen = "127.0.0.1:8765"
//! data_dir = "data"
//! [[stream]]
//! name = "trades"
//! schema = "trade.schema.json"   # relative to the config file; omit for a schema-less stream
//! durable = true                 # false: live only, no log, offsets null
//! exactly_once = false
//! max_replay = 100000            # rows; "unlimited" allowed
//! max_backlog = 8192             # frames queued per subscriber
//! max_in_flight = 64             # replies owed per publisher connection
//! max_inbound = 65536            # rows queued for commit per stream
//! max_message_bytes = 1048576
//! coalesce_us = 0                # hold subscribers' writes up to this long to merge commits (0: off)
//! segment_bytes = 67108864       # durable streams: bytes per preallocated hot-log segment file
//! seal_target_bytes = 67108864   # durable streams: encoded row bytes per sealed Parquet segment
//! seal_every_s = 60              # ... or seal whatever is unsealed once its oldest row is this old
//! retention = "7d"               # drop history (sealed and published) wholly older than this; absent: keep
//! published = "local"            # where the Iceberg table goes: "local" (<data>/<stream>/published),
//!                                # "file:///dir", "s3://bucket/prefix" (the `s3` feature), or "off"
//! evict_after = "published"      # hot segments go once "published" (default with a location) or "sealed"
//! published_grace_s = 600        # unreferenced published files are deleted after this long
//! ```
//!
//! A top-level `published = "…"` is the default of every durable stream; `[s3]` holds
//! `endpoint`, `region`, `access_key_id` and `secret_access_key` for `s3://` locations (each
//! absent one falls back to the `AWS_*` environment; the keys are never logged or written).
//! Bulk ingest (`POST /v1/streams/NAME/ingest`, `crate::ingest`) has its limits in `[ingest]`:
//!
//! ```toml
//! [ingest]
//! max_body_bytes = 67108864   # one request's body (413 above it); 1 KiB ..= 1 GiB
//! max_batch_rows = 262144     # rows in one request (413 above it); 1 ..= 16777216
//! max_concurrent = 2          # requests decoded and committed at once, all streams (503 above)
//! ```
//!
//! The control plane (`/control/v1`, `crate::control`) is served when `[auth]` is configured
//! (its grants decide who may read and change it); without `[auth]` it answers 403 unless it is
//! switched on explicitly:
//!
//! ```toml
//! [control]
//! enabled = true            # serve /control/v1 without [auth]: anyone reaching the port manages streams
//! max_body_bytes = 65536    # one mutation's body (413 above it); 1 KiB ..= 16 MiB
//! max_streams = 256         # streams the registry holds, retired ones included; 1 ..= 4096
//! ```
//!
//! Top-level `write_timeout_s = 30` (1..=3600) is how long one write to a client may take before
//! the connection is given up on (a subscriber, SSE reader or publisher that stopped reading).
//!
//! Defaults mirror PROTOCOL.md §10. A bad file is refused with the file, the key and the reason
//! ([`ConfigError`]).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The six-column trade schema the embedded default serves (PROTOCOL.md §4).
pub const TRADE_SCHEMA: &str = r#"{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"amount":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"trade_id":{"type":"integer","format":"int64"}},"required":["event_ts","price","amount","side","symbol","trade_id"]}"#;

/// Default `seal_target_bytes`: 64 MiB of encoded rows per sealed segment.
pub const DEFAULT_SEAL_TARGET_BYTES: u64 = 64 << 20;

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

/// The whole server configuration, resolved (paths absolute or relative to the working dir).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address every shard listens on.
    pub listen: SocketAddr,
    /// Root of the per-stream directories.
    pub data_dir: PathBuf,
    /// Declared streams, in file order.
    pub streams: Vec<StreamConfig>,
    /// Serve `/_echo` (a WebSocket echo endpoint for conformance suites). Off by default.
    pub echo: bool,
    /// SSE and HTTP pull API settings (top-level `cursor_key`, `cursor_ttl_s`, `[sse]`).
    pub http_api: HttpApiConfig,
    /// WebSocket keepalive (`[websocket]`); `None` when `ping_interval_s = 0`.
    pub keepalive: Option<KeepaliveConfig>,
    /// How long one write to a client may take before its connection is dropped
    /// (`write_timeout_s`, default 30 s): a peer that stopped reading must not hold its
    /// descriptor and the shared batch buffers forever.
    pub write_timeout: Duration,
    /// How to reach S3 for `s3://` published locations (`[s3]`, then the `AWS_*` environment).
    pub s3: corecast_storage::published::S3Options,
    /// Bulk ingest limits (`[ingest]`).
    pub ingest: IngestConfig,
    /// Principals, credentials and grants (`[auth]`); `None`: the broker is open.
    pub auth: Option<crate::auth::AuthConfig>,
    /// The browser origins allowed (`allowed_origins`); every origin when absent.
    pub allowed_origins: crate::auth::origin::Origins,
    /// Open connections allowed per process (`max_connections`); past it, 429.
    pub max_connections: Option<u64>,
    /// TLS (`[tls]`); `None`: plaintext only.
    pub tls: Option<TlsConfig>,
    /// The control plane, `/control/v1` (`[control]`).
    pub control: ControlConfig,
}

/// `[control]`: whether `/control/v1` is served without `[auth]`, and its body limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlConfig {
    /// Serve the control API on a broker without `[auth]` (anyone who reaches the port may then
    /// create, stop and retire streams). With `[auth]` it is served, and the grants decide.
    pub enabled: bool,
    /// Largest body of a control mutation in bytes (413 above it, refused before it is read).
    pub max_body_bytes: usize,
    /// Most streams the registry holds, retired ones included (a retired stream keeps its
    /// name, its history and its row for good): a create over it is refused 409.
    pub max_streams: u64,
}

/// The default of `[control] max_streams`.
pub const MANAGED_STREAMS_DEFAULT: u64 = 256;
/// The largest `[control] max_streams` (every managed stream has a hub on every shard and,
/// when durable, its own log, maintenance thread and descriptors).
pub const MANAGED_STREAMS_MAX: u64 = 4096;

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            enabled: false,
            max_body_bytes: 64 << 10,
            max_streams: MANAGED_STREAMS_DEFAULT,
        }
    }
}

/// `[tls]`: the certificate and key (PEM, read and checked when the server starts), and where
/// TLS is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf.
    pub key: PathBuf,
    /// A second listener for TLS; `None`: the main `listen` address serves TLS instead of
    /// plaintext.
    pub listen: Option<SocketAddr>,
}

/// The limits of bulk ingest (`[ingest]`): together they bound its memory at about
/// `max_concurrent` × (`max_body_bytes` + the batch's encoded rows, twice: the commit record
/// and the framed batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestConfig {
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Most rows in one request.
    pub max_batch_rows: usize,
    /// Requests decoded and committed at once, all streams.
    pub max_concurrent: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_body_bytes: 64 << 20,
            max_batch_rows: 262_144,
            max_concurrent: 2,
        }
    }
}

/// Where a durable stream's history is published (`published`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Published {
    /// Not published: no table, no stream metadata, the greeting names none.
    Off,
    /// The default: `<data>/<stream>/published/<stream>`, home `<data>/<stream>`.
    #[default]
    Local,
    /// `file:///dir` or `s3://bucket/prefix`: home `<location>/<stream>`.
    At(String),
}

/// When a durable stream's hot segments may be evicted (`evict_after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictAfter {
    /// Once their rows are in a sealed segment and published (the default while publishing).
    #[default]
    Published,
    /// Once their rows are in a sealed segment.
    Sealed,
}

/// The default of `published_grace_s`: how long a file no kept table version names stays.
pub const DEFAULT_PUBLISHED_GRACE: Duration = Duration::from_secs(600);

/// The largest `coalesce_us` (100 ms): a longer hold is latency no fan-out saving pays for.
pub const MAX_COALESCE_US: i64 = 100_000;

/// The default of `write_timeout_s`.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// WebSocket keepalive, as the reference server (uvicorn) does it (`../shared/PROTOCOL.md` §1):
/// a connection the server has heard nothing from for `interval` is pinged, and one still
/// silent `timeout` after the ping is closed with 1011 `keepalive ping timeout`. Any complete
/// message or control frame from the peer (a row, a pong, a ping) counts as hearing from it; a
/// fragment of a message does not.
///
/// ```toml
/// [websocket]
/// ping_interval_s = 20   # 0 turns keepalive off
/// ping_timeout_s = 20
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Silence after which the server pings.
    pub interval: Duration,
    /// Silence after the ping after which the server closes.
    pub timeout: Duration,
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        KeepaliveConfig {
            interval: Duration::from_secs(20),
            timeout: Duration::from_secs(20),
        }
    }
}

/// Settings of the SSE endpoint and the HTTP pull API.
///
/// ```toml
/// cursor_key = "at least 16 bytes of secret"  # omit: generated into <data_dir>/.cursor_key (0600)
/// cursor_ttl_s = 3600                          # pull cursors expire after this many seconds
/// [sse]
/// max_streams = 10000      # open SSE streams per process (503 + Retry-After: 30 above)
/// max_per_client = 16      # per client address
/// ping_min_ms = 15000      # comment pings on idle streams, jittered in [min, max]
/// ping_max_ms = 25000
/// max_age_s = 900          # a stream ends with `event: end` {"reason":"max_age"} after this
/// retry_ms = 3000          # the `retry:` sent first
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpApiConfig {
    /// The HMAC key of pull cursors; `None`: generated and kept in the data directory.
    pub cursor_key: Option<String>,
    /// Cursor lifetime in seconds.
    pub cursor_ttl_s: u64,
    /// Open SSE streams per process.
    pub sse_max_streams: usize,
    /// Open SSE streams per client address.
    pub sse_max_per_client: usize,
    /// Shortest idle gap before a comment ping, ms.
    pub sse_ping_min_ms: u64,
    /// Longest idle gap before a comment ping, ms.
    pub sse_ping_max_ms: u64,
    /// Longest life of one SSE stream, seconds.
    pub sse_max_age_s: u64,
    /// The `retry:` value, ms.
    pub sse_retry_ms: u64,
}

impl Default for HttpApiConfig {
    fn default() -> Self {
        HttpApiConfig {
            cursor_key: None,
            cursor_ttl_s: 3600,
            sse_max_streams: 10_000,
            sse_max_per_client: 16,
            sse_ping_min_ms: 15_000,
            sse_ping_max_ms: 25_000,
            sse_max_age_s: 900,
            sse_retry_ms: 3000,
        }
    }
}

/// One declared stream.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Stream name: `[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`.
    pub name: String,
    /// The schema's JSON text, read from the file the config names; `None` = schema-less.
    pub schema_json: Option<String>,
    /// Keep a log (offsets, replay, durability). `false` = live only.
    pub durable: bool,
    /// Accept `publisher=ID` exactly-once publishers.
    pub exactly_once: bool,
    /// Largest replay window in rows; `None` = unlimited.
    pub max_replay: Option<u64>,
    /// Frames a subscriber may fall behind before it is closed with 4429.
    pub max_backlog: u64,
    /// Replies a publisher connection may be owed before the server stops reading it.
    pub max_in_flight: usize,
    /// Rows queued for commit per stream before publishers wait.
    pub max_inbound: usize,
    /// Largest inbound WebSocket message in bytes (1009 above it).
    pub max_message_bytes: usize,
    /// How long a committed batch may wait before this stream's subscribers are woken for it
    /// (`coalesce_us`; zero, the default: at once). Batches committed meanwhile go out in the
    /// same write: fewer, larger writes per subscriber, each frame up to this much later.
    pub coalesce: Duration,
    /// Bytes each hot-log segment file of a durable stream is preallocated to.
    pub segment_bytes: u64,
    /// Encoded row bytes after which the unsealed rows of a durable stream are cut into a
    /// sealed Parquet segment.
    pub seal_target_bytes: u64,
    /// Age of the oldest unsealed row after which whatever is unsealed is sealed anyway.
    pub seal_every: Duration,
    /// Sealed segments whose newest row is older than this are dropped; `None`: kept forever.
    pub retention: Option<Duration>,
    /// Where the stream's history is published.
    pub published: Published,
    /// When hot segments may be evicted.
    pub evict_after: EvictAfter,
    /// How long published files no kept version names stay before they are deleted.
    pub published_grace: Duration,
    /// Key columns of a keyed stream (`key = ["symbol"]`); empty: not keyed.
    pub key: Vec<String>,
    /// `remove_when`: a `where=`-style JSON object; a row that matches removes its key.
    pub remove_when: Option<String>,
    /// Entities a keyed stream's state holds at most.
    pub max_keys: usize,
    /// How often a keyed stream's state is checkpointed (when it moved).
    pub checkpoint_every: Duration,
    /// Bytes of rendered `?state` snapshots a keyed stream's sessions may hold at once (not
    /// yet written to their readers); a join over it is refused `state_busy`.
    pub state_snapshot_budget_bytes: u64,
}

impl StreamConfig {
    /// A stream with every limit at its default.
    pub fn with_defaults(name: &str, schema_json: Option<String>, durable: bool) -> StreamConfig {
        StreamConfig {
            name: name.to_string(),
            schema_json,
            durable,
            exactly_once: false,
            max_replay: Some(100_000),
            max_backlog: 8192,
            max_in_flight: 64,
            max_inbound: 65_536,
            max_message_bytes: 1 << 20,
            coalesce: Duration::ZERO,
            segment_bytes: corecast_storage::log::DEFAULT_SEGMENT_BYTES,
            seal_target_bytes: DEFAULT_SEAL_TARGET_BYTES,
            seal_every: Duration::from_secs(60),
            retention: None,
            published: if durable {
                Published::Local
            } else {
                Published::Off
            },
            evict_after: EvictAfter::Published,
            published_grace: DEFAULT_PUBLISHED_GRACE,
            key: Vec::new(),
            remove_when: None,
            max_keys: DEFAULT_MAX_KEYS,
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
            state_snapshot_budget_bytes: DEFAULT_STATE_SNAPSHOT_BUDGET_BYTES,
        }
    }
}

/// Why a configuration was refused: the file, the key, and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {reason}")]
pub struct ConfigError {
    /// The file (or `<embedded default>`).
    pub file: String,
    /// The key path, e.g. `stream[2].max_replay`.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    data_dir: Option<String>,
    #[serde(default)]
    stream: Vec<RawStream>,
    cursor_key: Option<String>,
    cursor_ttl_s: Option<i64>,
    sse: Option<RawSse>,
    websocket: Option<RawWebsocket>,
    write_timeout_s: Option<i64>,
    published: Option<String>,
    s3: Option<RawS3>,
    ingest: Option<RawIngest>,
    auth: Option<crate::auth::config::RawAuth>,
    allowed_origins: Option<Vec<String>>,
    max_connections: Option<i64>,
    tls: Option<RawTls>,
    control: Option<RawControl>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    enabled: Option<bool>,
    max_body_bytes: Option<i64>,
    max_streams: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: String,
    key: String,
    listen: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawS3 {
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIngest {
    max_body_bytes: Option<i64>,
    max_batch_rows: Option<i64>,
    max_concurrent: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebsocket {
    ping_interval_s: Option<i64>,
    ping_timeout_s: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSse {
    max_streams: Option<i64>,
    max_per_client: Option<i64>,
    ping_min_ms: Option<i64>,
    ping_max_ms: Option<i64>,
    max_age_s: Option<i64>,
    retry_ms: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStream {
    name: String,
    schema: Option<String>,
    durable: Option<bool>,
    exactly_once: Option<bool>,
    max_replay: Option<toml::Value>,
    max_backlog: Option<i64>,
    max_in_flight: Option<i64>,
    max_inbound: Option<i64>,
    max_message_bytes: Option<i64>,
    coalesce_us: Option<i64>,
    segment_bytes: Option<i64>,
    seal_target_bytes: Option<i64>,
    seal_every_s: Option<toml::Value>,
    retention: Option<String>,
    published: Option<String>,
    evict_after: Option<String>,
    published_grace_s: Option<i64>,
    key: Option<Vec<String>>,
    remove_when: Option<toml::Value>,
    max_keys: Option<i64>,
    checkpoint_every_s: Option<i64>,
    state_snapshot_budget_bytes: Option<i64>,
}

/// Entities a keyed stream's state holds unless `max_keys` says otherwise.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// How often a keyed stream's state is checkpointed unless `checkpoint_every_s` says otherwise.
pub const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// Bytes of `?state` snapshots one keyed stream's sessions hold at once unless
/// `state_snapshot_budget_bytes` says otherwise (docs/OPERATIONS.md, "Keyed streams").
pub const DEFAULT_STATE_SNAPSHOT_BUDGET_BYTES: u64 = 1 << 30;

/// The keyed-state keys of one stream (`key`, `remove_when`, `max_keys`, `checkpoint_every_s`):
/// `Err((key, why))`. The key columns are checked against the schema at start-up
/// (`state::spec_for`), where the schema is compiled.
fn keyed_keys(s: &RawStream, sc: &mut StreamConfig) -> Result<(), (&'static str, String)> {
    let needs_key = |key: &'static str| -> Result<(), (&'static str, String)> {
        if s.key.is_none() {
            return Err((
                key,
                "set on a stream without key = [...]: only a keyed stream keeps state".into(),
            ));
        }
        Ok(())
    };
    if let Some(cols) = &s.key {
        if cols.is_empty() {
            return Err((
                "key",
                "an empty list: name one or more columns, e.g. key = [\"symbol\"]".into(),
            ));
        }
        for (i, c) in cols.iter().enumerate() {
            if cols[..i].contains(c) {
                return Err(("key", format!("column {c:?} is named twice")));
            }
        }
        if !sc.durable {
            return Err(("key", "a keyed stream needs a log (its state is recovered from it): set durable = true or drop key".into()));
        }
        sc.key = cols.clone();
    }
    if let Some(v) = &s.remove_when {
        needs_key("remove_when")?;
        let text = match v {
            toml::Value::String(t) => t.clone(),
            toml::Value::Table(_) => serde_json::to_string(v).map_err(|e| ("remove_when", e.to_string()))?,
            other => {
                return Err(("remove_when", format!("{other} is not a table of column = value(s) such as {{ action = [\"C\"] }} (or that JSON object as a string)")))
            }
        };
        if serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v.as_object().is_some_and(|o| o.is_empty()))
        {
            return Err((
                "remove_when",
                "an empty filter matches every row: every key would be removed as soon as it is written (name a column, e.g. { action = [\"C\"] })".into(),
            ));
        }
        sc.remove_when = Some(text);
    }
    if let Some(n) = s.max_keys {
        needs_key("max_keys")?;
        let max: i64 = 1 << 30;
        if !(1..=max).contains(&n) {
            return Err((
                "max_keys",
                format!("{n} is outside 1..={max} (the default is {DEFAULT_MAX_KEYS})"),
            ));
        }
        sc.max_keys = n as usize;
    }
    if let Some(n) = s.checkpoint_every_s {
        needs_key("checkpoint_every_s")?;
        if !(1..=86_400).contains(&n) {
            return Err((
                "checkpoint_every_s",
                format!(
                    "{n} is outside 1..=86400 seconds (the default is {})",
                    DEFAULT_CHECKPOINT_EVERY.as_secs()
                ),
            ));
        }
        sc.checkpoint_every = Duration::from_secs(n as u64);
    }
    if let Some(n) = s.state_snapshot_budget_bytes {
        needs_key("state_snapshot_budget_bytes")?;
        let (min, max): (i64, i64) = (1 << 20, 1 << 40);
        if !(min..=max).contains(&n) {
            return Err((
                "state_snapshot_budget_bytes",
                format!(
                    "{n} is outside {min}..={max} bytes (1 MiB to 1 TiB; the default is {DEFAULT_STATE_SNAPSHOT_BUDGET_BYTES})"
                ),
            ));
        }
        sc.state_snapshot_budget_bytes = n as u64;
    }
    Ok(())
}

/// Parses a `published` value (`key` names it in errors).
/// A config line as an error may show it: the value of a key that holds a secret is replaced
/// (a syntax error on such a line must not print the secret to the log).
fn redact_secret(line: &str) -> String {
    const SECRET_KEYS: [&str; 5] = [
        "secret",
        "password",
        "secret_access_key",
        "access_key_id",
        "cursor_key",
    ];
    if let Some((key, _)) = line.split_once('=') {
        let key = key.trim().trim_matches('"');
        if SECRET_KEYS.contains(&key) {
            return format!("{key} = <redacted>");
        }
    }
    line.to_string()
}

pub(crate) fn parse_published(text: &str) -> Result<Published, String> {
    // a location is shown in refusals, logs and `GET`: credentials never belong in it
    let shown = without_userinfo(text);
    if shown != text {
        return Err(format!(
            "{shown:?} carries credentials in the location (user:key@); a location never holds \
             them: set access_key_id and secret_access_key under [s3], or the AWS_* environment"
        ));
    }
    match text {
        "off" => Ok(Published::Off),
        "local" => Ok(Published::Local),
        t if t.starts_with("file:///") || t.starts_with("s3://") => {
            if t.starts_with("s3://")
                && t.trim_start_matches("s3://")
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .is_empty()
            {
                return Err(format!("{t:?} names no bucket (s3://bucket/prefix)"));
            }
            if cfg!(not(feature = "s3")) && t.starts_with("s3://") {
                return Err(format!(
                    "{t:?}: this corecast was built without S3 support; rebuild with `cargo build --features s3`"
                ));
            }
            Ok(Published::At(t.trim_end_matches('/').to_string()))
        }
        t => Err(format!(
            "{t:?} is not \"local\", \"off\", file:///absolute/dir or s3://bucket/prefix"
        )),
    }
}

/// `text` with the user information of a URI (`scheme://user:secret@host/…`) replaced by
/// `…@`, so that a location given with credentials can be named in a refusal without them.
pub(crate) fn without_userinfo(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://…{}", &rest[at..]),
        None => text.to_string(),
    }
}

/// Parses a retention period: a positive whole number and a unit, `s`, `m`, `h` or `d`
/// (`"7d"`, `"12h"`, `"30m"`).
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{text:?} is not a period: a positive whole number and a unit s, m, h or d, e.g. \"7d\", \"12h\", \"30m\"")
    };
    let t = text.trim();
    let unit = t.chars().last().ok_or_else(bad)?;
    let per: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    n.checked_mul(per)
        .filter(|&s| s <= 100 * 365 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is longer than 100 years"))
}

/// Whether `name` is a valid stream name (`[A-Za-z0-9][A-Za-z0-9_.-]{0,127}`, PROTOCOL.md §2).
pub fn valid_stream_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

impl Config {
    /// The embedded default: a durable `trades` stream with the trade schema under `./data`.
    pub fn embedded_default() -> Config {
        Config {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses"),
            data_dir: PathBuf::from("data"),
            streams: vec![StreamConfig::with_defaults(
                "trades",
                Some(TRADE_SCHEMA.to_string()),
                true,
            )],
            echo: false,
            http_api: HttpApiConfig::default(),
            keepalive: Some(KeepaliveConfig::default()),
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            s3: Default::default(),
            ingest: IngestConfig::default(),
            auth: None,
            allowed_origins: crate::auth::origin::Origins::any(),
            control: ControlConfig::default(),
            max_connections: None,
            tls: None,
        }
    }

    /// Reads and checks a TOML file. Relative schema paths resolve against the file's folder;
    /// a relative `data_dir` too.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let err = |key: &str, reason: String| ConfigError {
            file: file.clone(),
            key: key.to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err("(file)", e.to_string()))?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| {
            let msg = e.message().to_string();
            let key = e
                .span()
                .map(|s| {
                    // line and column (1-based), then the line itself, as an editor shows it
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    let shown = redact_secret(text.lines().nth(line - 1).unwrap_or("").trim());
                    format!("line {line}, column {column} (`{shown}`)")
                })
                .unwrap_or_else(|| "(document)".into());
            err(&key, msg)
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let listen = match raw.listen {
            Some(l) => l
                .parse()
                .map_err(|e| err("listen", format!("{l:?} is not an address: {e}")))?,
            None => DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses"),
        };
        let data_dir = base.join(raw.data_dir.unwrap_or_else(|| "data".into()));
        let mut seen = HashSet::new();
        let default_published = match &raw.published {
            Some(text) => Some(parse_published(text).map_err(|why| err("published", why))?),
            None => None,
        };
        let mut streams = Vec::new();
        for (i, mut s) in raw.stream.into_iter().enumerate() {
            let k = |f: &str| format!("stream[{i}].{f}");
            if !valid_stream_name(&s.name) {
                return Err(err(
                    &k("name"),
                    format!(
                        "{:?} does not match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}",
                        s.name
                    ),
                ));
            }
            if !seen.insert(s.name.clone()) {
                return Err(err(
                    &k("name"),
                    format!("stream {:?} is declared twice", s.name),
                ));
            }
            let schema_json = match &s.schema {
                Some(p) => {
                    let sp = base.join(p);
                    Some(std::fs::read_to_string(&sp).map_err(|e| {
                        err(&k("schema"), format!("cannot read {}: {e}", sp.display()))
                    })?)
                }
                None => None,
            };
            let mut sc =
                StreamConfig::with_defaults(&s.name, schema_json, s.durable.unwrap_or(true));
            sc.exactly_once = s.exactly_once.unwrap_or(false);
            if sc.exactly_once && !sc.durable {
                return Err(err(
                    &k("exactly_once"),
                    "exactly-once needs a log: set durable = true or drop exactly_once".into(),
                ));
            }
            match s.max_replay.take() {
                None => {}
                Some(toml::Value::String(v)) if v == "unlimited" => sc.max_replay = None,
                Some(toml::Value::Integer(n)) if n >= 0 => sc.max_replay = Some(n as u64),
                Some(v) => {
                    return Err(err(
                        &k("max_replay"),
                        format!("{v} is neither a row count ≥ 0 nor \"unlimited\""),
                    ))
                }
            }
            let positive =
                |v: Option<i64>, key: &str, max: i64| -> Result<Option<i64>, ConfigError> {
                    match v {
                        None => Ok(None),
                        Some(n) if n >= 1 && n <= max => Ok(Some(n)),
                        Some(n) => Err(err(&k(key), format!("{n} is outside 1..={max}"))),
                    }
                };
            if let Some(n) = positive(s.max_backlog, "max_backlog", 1 << 24)? {
                sc.max_backlog = n as u64;
            }
            if let Some(n) = positive(s.max_in_flight, "max_in_flight", 65_536)? {
                sc.max_in_flight = n as usize;
            }
            if let Some(n) = positive(s.max_inbound, "max_inbound", 1 << 24)? {
                sc.max_inbound = n as usize;
            }
            if let Some(n) = positive(s.max_message_bytes, "max_message_bytes", 1 << 30)? {
                sc.max_message_bytes = n as usize;
            }
            match s.coalesce_us {
                None => {}
                Some(n) if (0..=MAX_COALESCE_US).contains(&n) => {
                    sc.coalesce = Duration::from_micros(n as u64);
                }
                Some(n) => {
                    return Err(err(
                        &k("coalesce_us"),
                        format!("{n} is outside 0..={MAX_COALESCE_US} (µs; 0 turns it off)"),
                    ))
                }
            }
            if let Some(n) = s.segment_bytes {
                let min = corecast_storage::log::segment::MIN_SEGMENT_BYTES as i64;
                let max: i64 = 1 << 34;
                if !(min..=max).contains(&n) {
                    return Err(err(
                        &k("segment_bytes"),
                        format!("{n} is outside {min}..={max} (4 KiB to 16 GiB; the default is 67108864, 64 MiB)"),
                    ));
                }
                if !sc.durable {
                    return Err(err(
                        &k("segment_bytes"),
                        "set on a stream with durable = false, which keeps no log".into(),
                    ));
                }
                sc.segment_bytes = n as u64;
            }
            let tier_key = |key: &str| -> Result<(), ConfigError> {
                if sc.durable {
                    Ok(())
                } else {
                    Err(err(
                        &k(key),
                        "set on a stream with durable = false, which keeps no history".into(),
                    ))
                }
            };
            if let Some(n) = s.seal_target_bytes {
                tier_key("seal_target_bytes")?;
                let (min, max): (i64, i64) = (4096, 1 << 34);
                if !(min..=max).contains(&n) {
                    return Err(err(
                        &k("seal_target_bytes"),
                        format!("{n} is outside {min}..={max} (4 KiB to 16 GiB; the default is 67108864, 64 MiB)"),
                    ));
                }
                sc.seal_target_bytes = n as u64;
            }
            if let Some(v) = &s.seal_every_s {
                tier_key("seal_every_s")?;
                let secs = match v {
                    toml::Value::Integer(i) => Some(*i as f64),
                    toml::Value::Float(f) => Some(*f),
                    _ => None,
                };
                match secs {
                    Some(x) if (0.1..=86_400.0).contains(&x) => {
                        sc.seal_every = Duration::from_secs_f64(x)
                    }
                    _ => {
                        return Err(err(
                            &k("seal_every_s"),
                            format!(
                                "{v} is not a number of seconds in 0.1..=86400 (the default is 60)"
                            ),
                        ))
                    }
                }
            }
            if let Some(text) = &s.retention {
                tier_key("retention")?;
                sc.retention =
                    Some(parse_retention(text).map_err(|why| err(&k("retention"), why))?);
            }
            if sc.durable {
                if let Some(p) = &default_published {
                    sc.published = p.clone();
                }
            }
            if let Some(text) = &s.published {
                tier_key("published")?;
                sc.published = parse_published(text).map_err(|why| err(&k("published"), why))?;
            }
            match (s.evict_after.as_deref(), &sc.published) {
                (None, Published::Off) => sc.evict_after = EvictAfter::Sealed,
                (None, _) => {}
                (Some("sealed"), _) => {
                    tier_key("evict_after")?;
                    sc.evict_after = EvictAfter::Sealed;
                }
                (Some("published"), Published::Off) => {
                    return Err(err(
                        &k("evict_after"),
                        "\"published\" on a stream with published = \"off\": nothing would ever be evicted".into(),
                    ))
                }
                (Some("published"), _) => tier_key("evict_after")?,
                (Some(other), _) => {
                    return Err(err(
                        &k("evict_after"),
                        format!("{other:?} is not \"published\" or \"sealed\""),
                    ))
                }
            }
            if let Some(n) = s.published_grace_s {
                tier_key("published_grace_s")?;
                if !(0..=30 * 86_400).contains(&n) {
                    return Err(err(
                        &k("published_grace_s"),
                        format!("{n} is outside 0..=2592000 seconds (the default is 600)"),
                    ));
                }
                sc.published_grace = Duration::from_secs(n as u64);
            }
            keyed_keys(&s, &mut sc).map_err(|(key, why)| err(&k(key), why))?;
            streams.push(sc);
        }
        // streams may all come from the control plane's registry.db: it is served when
        // `[control] enabled` or `[auth]` (whose grants decide) is set
        let control_served = raw
            .control
            .as_ref()
            .is_some_and(|c| c.enabled == Some(true))
            || raw.auth.is_some();
        if streams.is_empty() && !control_served {
            return Err(err(
                "stream",
                "no [[stream]] declared: nothing to serve (declare one, or serve the control plane \
                 with [control] enabled = true or [auth] and create streams over /control/v1)"
                    .into(),
            ));
        }
        let mut api = HttpApiConfig::default();
        if let Some(key) = raw.cursor_key {
            if key.len() < 16 {
                return Err(err(
                    "cursor_key",
                    "a cursor key is at least 16 bytes".into(),
                ));
            }
            api.cursor_key = Some(key);
        }
        let within =
            |v: Option<i64>, key: &str, lo: i64, hi: i64| -> Result<Option<u64>, ConfigError> {
                match v {
                    None => Ok(None),
                    Some(n) if n >= lo && n <= hi => Ok(Some(n as u64)),
                    Some(n) => Err(err(key, format!("{n} is outside {lo}..={hi}"))),
                }
            };
        if let Some(n) = within(raw.cursor_ttl_s, "cursor_ttl_s", 1, 365 * 86_400)? {
            api.cursor_ttl_s = n;
        }
        if let Some(sse) = raw.sse {
            if let Some(n) = within(sse.max_streams, "sse.max_streams", 1, 1 << 24)? {
                api.sse_max_streams = n as usize;
            }
            if let Some(n) = within(sse.max_per_client, "sse.max_per_client", 1, 1 << 24)? {
                api.sse_max_per_client = n as usize;
            }
            if let Some(n) = within(sse.ping_min_ms, "sse.ping_min_ms", 10, 3_600_000)? {
                api.sse_ping_min_ms = n;
            }
            if let Some(n) = within(sse.ping_max_ms, "sse.ping_max_ms", 10, 3_600_000)? {
                api.sse_ping_max_ms = n;
            }
            if api.sse_ping_max_ms < api.sse_ping_min_ms {
                return Err(err(
                    "sse.ping_max_ms",
                    "must be at least sse.ping_min_ms".into(),
                ));
            }
            if let Some(n) = within(sse.max_age_s, "sse.max_age_s", 1, 7 * 86_400)? {
                api.sse_max_age_s = n;
            }
            if let Some(n) = within(sse.retry_ms, "sse.retry_ms", 0, 3_600_000)? {
                api.sse_retry_ms = n;
            }
        }
        let mut keepalive = KeepaliveConfig::default();
        let mut keepalive_on = true;
        if let Some(ws) = raw.websocket {
            match within(ws.ping_interval_s, "websocket.ping_interval_s", 0, 86_400)? {
                Some(0) => keepalive_on = false,
                Some(n) => keepalive.interval = Duration::from_secs(n),
                None => {}
            }
            if let Some(n) = within(ws.ping_timeout_s, "websocket.ping_timeout_s", 1, 86_400)? {
                keepalive.timeout = Duration::from_secs(n);
            }
        }
        let write_timeout = within(raw.write_timeout_s, "write_timeout_s", 1, 3600)?
            .map_or(DEFAULT_WRITE_TIMEOUT, Duration::from_secs);
        let mut s3 = corecast_storage::published::S3Options::default();
        if let Some(r) = raw.s3 {
            if let Some(e) = &r.endpoint {
                if !(e.starts_with("http://") || e.starts_with("https://")) {
                    return Err(err(
                        "s3.endpoint",
                        format!("{e:?} is not an http:// or https:// URL"),
                    ));
                }
            }
            s3.endpoint = r.endpoint;
            s3.region = r.region;
            s3.access_key = r.access_key_id;
            s3.secret_key = r.secret_access_key;
            if s3.access_key.is_some() != s3.secret_key.is_some() {
                return Err(err(
                    "s3",
                    "access_key_id and secret_access_key go together (or neither: the AWS_* environment)".into(),
                ));
            }
        }
        let mut ingest = IngestConfig::default();
        if let Some(raw) = raw.ingest {
            if let Some(n) = within(raw.max_body_bytes, "ingest.max_body_bytes", 1024, 1 << 30)? {
                ingest.max_body_bytes = n as usize;
            }
            if let Some(n) = within(raw.max_batch_rows, "ingest.max_batch_rows", 1, 1 << 24)? {
                ingest.max_batch_rows = n as usize;
            }
            if let Some(n) = within(raw.max_concurrent, "ingest.max_concurrent", 1, 1024)? {
                ingest.max_concurrent = n as usize;
            }
        }
        let mut control = ControlConfig::default();
        if let Some(raw) = raw.control {
            control.enabled = raw.enabled.unwrap_or(false);
            if let Some(n) = within(raw.max_body_bytes, "control.max_body_bytes", 1024, 16 << 20)? {
                control.max_body_bytes = n as usize;
            }
            if let Some(n) = within(
                raw.max_streams,
                "control.max_streams",
                1,
                MANAGED_STREAMS_MAX as i64,
            )? {
                control.max_streams = n;
            }
        }
        let tls = match raw.tls {
            None => None,
            Some(t) => {
                // the files themselves are read (and checked) by `server::start` and at each
                // SIGHUP, so that a bad new certificate never blocks reloading the rest
                let cert = base.join(&t.cert);
                let key = base.join(&t.key);
                let tls_listen = match t.listen {
                    None => None,
                    Some(l) => {
                        let a: SocketAddr = l.parse().map_err(|e| {
                            err("tls.listen", format!("{l:?} is not an address: {e}"))
                        })?;
                        if a == listen {
                            return Err(err(
                                "tls.listen",
                                format!("{a} is the main listen address; drop tls.listen to serve TLS there"),
                            ));
                        }
                        Some(a)
                    }
                };
                Some(TlsConfig {
                    cert,
                    key,
                    listen: tls_listen,
                })
            }
        };
        let auth = match raw.auth {
            None => None,
            Some(a) => Some(
                crate::auth::AuthConfig::resolve(a, base).map_err(|(key, why)| err(&key, why))?,
            ),
        };
        let allowed_origins = match &raw.allowed_origins {
            None => crate::auth::origin::Origins::any(),
            Some(list) => crate::auth::origin::Origins::from_list(list)
                .map_err(|why| err("allowed_origins", why))?,
        };
        let max_connections = match raw.max_connections {
            None => None,
            Some(n) if n >= 1 => Some(n as u64),
            Some(n) => return Err(err("max_connections", format!("{n} is not at least 1"))),
        };
        Ok(Config {
            max_connections,
            control,
            tls,
            listen,
            data_dir,
            streams,
            echo: false,
            http_api: api,
            keepalive: keepalive_on.then_some(keepalive),
            write_timeout,
            s3,
            ingest,
            auth,
            allowed_origins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_location_with_credentials_is_refused_without_showing_them() {
        for text in [
            "s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/prefix",
            "s3://AKIAEXAMPLE@bucket",
            "file://me:pw@/var/x",
        ] {
            let why = parse_published(text).unwrap_err();
            assert!(why.contains("credentials"), "{why}");
            assert!(
                !why.contains("AKIA") && !why.contains("wJal") && !why.contains("pw"),
                "{why}"
            );
        }
        assert_eq!(
            without_userinfo("s3://k:s@b/p@x?q=a@b"),
            "s3://…@b/p@x?q=a@b"
        );
        assert_eq!(without_userinfo("s3://b/p@x"), "s3://b/p@x");
        assert_eq!(without_userinfo("local"), "local");
        assert!(parse_published("s3://bucket/a@b").is_ok() || cfg!(not(feature = "s3")));
    }

    #[test]
    fn names() {
        assert!(valid_stream_name("trades"));
        assert!(valid_stream_name("a.b-c_1"));
        assert!(!valid_stream_name(""));
        assert!(!valid_stream_name("-x"));
        assert!(!valid_stream_name("bad name"));
        assert!(!valid_stream_name(&"a".repeat(129)));
    }

    #[test]
    fn loads_and_resolves_relative_paths() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "t.json", TRADE_SCHEMA);
        let p = write(
            d.path(),
            "c.toml",
            "listen = \"127.0.0.1:0\"\n[[stream]]\nname = \"t\"\nschema = \"t.json\"\nmax_replay = \"unlimited\"\n[[stream]]\nname = \"live\"\ndurable = false\n",
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(c.streams.len(), 2);
        assert_eq!(c.streams[0].max_replay, None);
        assert!(c.streams[0].schema_json.is_some());
        assert!(!c.streams[1].durable);
        assert_eq!(c.data_dir, d.path().join("data"));
    }

    #[test]
    fn websocket_keepalive_defaults_to_the_reference_and_can_be_off() {
        let d = tempfile::tempdir().unwrap();
        let load = |extra: &str| {
            let p = write(
                d.path(),
                "k.toml",
                &format!("{extra}[[stream]]\nname = \"t\"\n"),
            );
            Config::load(&p)
        };
        let twenty = Duration::from_secs(20);
        let default = Some(KeepaliveConfig {
            interval: twenty,
            timeout: twenty,
        });
        assert_eq!(load("").unwrap().keepalive, default);
        assert_eq!(Config::embedded_default().keepalive, default);
        let set = load("[websocket]\nping_interval_s = 5\nping_timeout_s = 3\n").unwrap();
        assert_eq!(
            set.keepalive,
            Some(KeepaliveConfig {
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(3),
            })
        );
        assert_eq!(
            load("[websocket]\nping_interval_s = 0\n")
                .unwrap()
                .keepalive,
            None
        );
        let e = load("[websocket]\nping_timeout_s = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("websocket.ping_timeout_s"), "{e}");
    }

    #[test]
    fn write_timeout_defaults_to_30_s_and_can_be_set() {
        let d = tempfile::tempdir().unwrap();
        let load = |extra: &str| {
            let p = write(
                d.path(),
                "w.toml",
                &format!("{extra}[[stream]]\nname = \"t\"\n"),
            );
            Config::load(&p)
        };
        assert_eq!(load("").unwrap().write_timeout, Duration::from_secs(30));
        assert_eq!(
            Config::embedded_default().write_timeout,
            Duration::from_secs(30)
        );
        assert_eq!(
            load("write_timeout_s = 2\n").unwrap().write_timeout,
            Duration::from_secs(2)
        );
        let e = load("write_timeout_s = 0\n").unwrap_err();
        assert_eq!(e.key, "write_timeout_s", "{e}");
    }

    #[test]
    fn keyed_stream_keys_load_and_refusals_name_the_key() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "k.toml",
            "[[stream]]\nname = \"mbo\"\nkey = [\"order_id\", \"side\"]\n\
             remove_when = { action = [\"C\", \"F\"] }\nmax_keys = 500\ncheckpoint_every_s = 3\n\
             [[stream]]\nname = \"s\"\nkey = [\"id\"]\nremove_when = '{\"gone\":true}'\n\
             [[stream]]\nname = \"plain\"\n",
        );
        let c = Config::load(&p).unwrap();
        let mbo = &c.streams[0];
        assert_eq!(mbo.key, ["order_id", "side"]);
        let rw: serde_json::Value =
            serde_json::from_str(mbo.remove_when.as_deref().unwrap()).unwrap();
        assert_eq!(rw, serde_json::json!({"action": ["C", "F"]}));
        assert_eq!(
            (mbo.max_keys, mbo.checkpoint_every),
            (500, Duration::from_secs(3))
        );
        assert_eq!(
            c.streams[1].remove_when.as_deref(),
            Some(r#"{"gone":true}"#)
        );
        assert!(c.streams[2].key.is_empty());
        assert_eq!(c.streams[2].max_keys, DEFAULT_MAX_KEYS);
        for (body, key, why) in [
            ("key = []", "stream[0].key", "an empty list"),
            ("key = [\"a\", \"a\"]", "stream[0].key", "named twice"),
            (
                "durable = false\nkey = [\"a\"]",
                "stream[0].key",
                "needs a log",
            ),
            (
                "remove_when = { a = 1 }",
                "stream[0].remove_when",
                "without key",
            ),
            (
                "key = [\"a\"]\nremove_when = 3",
                "stream[0].remove_when",
                "is not a table",
            ),
            (
                "key = [\"a\"]\nremove_when = {}",
                "stream[0].remove_when",
                "matches every row",
            ),
            (
                "key = [\"a\"]\nremove_when = '{}'",
                "stream[0].remove_when",
                "matches every row",
            ),
            (
                "key = [\"a\"]\nmax_keys = 0",
                "stream[0].max_keys",
                "outside 1..=",
            ),
            (
                "coalesce_us = -1",
                "stream[0].coalesce_us",
                "outside 0..=100000",
            ),
            (
                "coalesce_us = 100001",
                "stream[0].coalesce_us",
                "outside 0..=100000",
            ),
            (
                "checkpoint_every_s = 5",
                "stream[0].checkpoint_every_s",
                "without key",
            ),
            (
                "key = [\"a\"]\ncheckpoint_every_s = 0",
                "stream[0].checkpoint_every_s",
                "outside 1..=86400",
            ),
        ] {
            let p = write(
                d.path(),
                "bad.toml",
                &format!("[[stream]]\nname = \"t\"\n{body}\n"),
            );
            let e = Config::load(&p).unwrap_err();
            assert_eq!(e.key, key, "{body}: {e}");
            assert!(e.reason.contains(why), "{body}: {e}");
        }
    }

    #[test]
    fn coalesce_us_defaults_to_off_and_can_be_set() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "a.toml", "[[stream]]\nname = \"t\"\n");
        assert_eq!(
            Config::load(&p).unwrap().streams[0].coalesce,
            Duration::ZERO
        );
        let p = write(
            d.path(),
            "b.toml",
            "[[stream]]\nname = \"t\"\ncoalesce_us = 500\n",
        );
        assert_eq!(
            Config::load(&p).unwrap().streams[0].coalesce,
            Duration::from_micros(500)
        );
    }

    #[test]
    fn refusals_name_file_key_and_reason() {
        let d = tempfile::tempdir().unwrap();
        let cases = [
            ("[[stream]]\nname = \"bad name\"\n", "stream[0].name"),
            (
                "[[stream]]\nname = \"t\"\nmax_replay = -3\n",
                "stream[0].max_replay",
            ),
            (
                "[[stream]]\nname = \"t\"\nmax_backlog = 0\n",
                "stream[0].max_backlog",
            ),
            (
                "[[stream]]\nname = \"t\"\nschema = \"missing.json\"\n",
                "stream[0].schema",
            ),
            (
                "[[stream]]\nname = \"t\"\n[[stream]]\nname = \"t\"\n",
                "stream[1].name",
            ),
            ("listen = \"nowhere\"\n[[stream]]\nname = \"t\"\n", "listen"),
            (
                "[[stream]]\nname = \"t\"\ndurable = false\nexactly_once = true\n",
                "stream[0].exactly_once",
            ),
            (
                "[[stream]]\nname = \"t\"\nsegment_bytes = 0\n",
                "stream[0].segment_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\nsegment_bytes = 100\n",
                "stream[0].segment_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\nsegment_bytes = 1099511627776\n",
                "stream[0].segment_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\ndurable = false\nsegment_bytes = 65536\n",
                "stream[0].segment_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\nseal_target_bytes = 100\n",
                "stream[0].seal_target_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\ndurable = false\nseal_target_bytes = 65536\n",
                "stream[0].seal_target_bytes",
            ),
            (
                "[[stream]]\nname = \"t\"\nseal_every_s = 0\n",
                "stream[0].seal_every_s",
            ),
            (
                "[[stream]]\nname = \"t\"\nseal_every_s = \"1m\"\n",
                "stream[0].seal_every_s",
            ),
            (
                "[[stream]]\nname = \"t\"\nretention = \"7\"\n",
                "stream[0].retention",
            ),
            (
                "[[stream]]\nname = \"t\"\nretention = \"0d\"\n",
                "stream[0].retention",
            ),
            (
                "[[stream]]\nname = \"t\"\nretention = \"99999999d\"\n",
                "stream[0].retention",
            ),
            (
                "[[stream]]\nname = \"t\"\ndurable = false\nretention = \"7d\"\n",
                "stream[0].retention",
            ),
            (
                "[[stream]]\nname = \"t\"\nmax_backlog = \"x\"\n",
                "line 3, column 15 (`max_backlog = \"x\"`)",
            ),
            (
                "[[stream]]\nname = \"t\"\npublished = \"/srv/history\"\n",
                "stream[0].published",
            ),
            (
                "[[stream]]\nname = \"t\"\npublished = \"s3:///prefix\"\n",
                "stream[0].published",
            ),
            (
                "published = \"elsewhere\"\n[[stream]]\nname = \"t\"\n",
                "published",
            ),
            (
                "[[stream]]\nname = \"t\"\ndurable = false\npublished = \"local\"\n",
                "stream[0].published",
            ),
            (
                "[[stream]]\nname = \"t\"\nevict_after = \"never\"\n",
                "stream[0].evict_after",
            ),
            (
                "[[stream]]\nname = \"t\"\npublished = \"off\"\nevict_after = \"published\"\n",
                "stream[0].evict_after",
            ),
            (
                "[[stream]]\nname = \"t\"\npublished_grace_s = -1\n",
                "stream[0].published_grace_s",
            ),
            (
                "[s3]\naccess_key_id = \"AKIA\"\n[[stream]]\nname = \"t\"\n",
                "s3",
            ),
            (
                "[s3]\nendpoint = \"127.0.0.1:9000\"\n[[stream]]\nname = \"t\"\n",
                "s3.endpoint",
            ),
        ];
        for (text, key) in cases {
            let p = write(d.path(), "c.toml", text);
            let e = Config::load(&p).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.to_string().contains("c.toml"), "{e}");
        }
        let p = write(
            d.path(),
            "c.toml",
            "[[stream]]\nname = \"t\"\nseal_target_bytes = 8388608\nseal_every_s = 0.5\nretention = \"12h\"\n",
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(c.streams[0].published, Published::Local);
        assert_eq!(c.streams[0].evict_after, EvictAfter::Published);
        assert_eq!(c.streams[0].published_grace, DEFAULT_PUBLISHED_GRACE);
        let p = write(
            d.path(),
            "c.toml",
            "published = \"file:///srv/history/\"\n[[stream]]\nname = \"a\"\n[[stream]]\nname = \"b\"\npublished = \"off\"\n[[stream]]\nname = \"c\"\nevict_after = \"sealed\"\npublished_grace_s = 5\n[[stream]]\nname = \"live\"\ndurable = false\n",
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(
            c.streams[0].published,
            Published::At("file:///srv/history".into())
        );
        assert_eq!(c.streams[1].published, Published::Off);
        assert_eq!(
            c.streams[1].evict_after,
            EvictAfter::Sealed,
            "off: evict after the seal"
        );
        assert_eq!(c.streams[2].evict_after, EvictAfter::Sealed);
        assert_eq!(c.streams[2].published_grace, Duration::from_secs(5));
        assert_eq!(
            c.streams[3].published,
            Published::Off,
            "a live stream publishes nothing"
        );
        let p = write(
            d.path(),
            "c.toml",
            "[[stream]]\nname = \"t\"\nseal_target_bytes = 8388608\nseal_every_s = 0.5\nretention = \"12h\"\n",
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(c.streams[0].seal_target_bytes, 8 << 20);
        assert_eq!(c.streams[0].seal_every, Duration::from_millis(500));
        assert_eq!(c.streams[0].retention, Some(Duration::from_secs(12 * 3600)));
        for (text, secs) in [
            ("30m", 1800),
            ("90s", 90),
            ("7d", 7 * 86_400),
            (" 2h ", 7200),
        ] {
            assert_eq!(
                parse_retention(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        let p = write(d.path(), "c.toml", "[[stream]]\nname = \"t\"\nbogus = 1\n");
        let e = Config::load(&p).unwrap_err();
        assert!(e.reason.contains("bogus"), "{e}");
    }
}
