//! A durable stream's history in tiers: the sealed Parquet segments below the hot log, what the
//! serving side knows of them, and the maintenance threads that seal, evict and expire.
//!
//! - [`TierState`] (one per durable stream, in its [`Stream`](crate::registry::Stream)): the
//!   recorded segments as an immutable list swapped whole on change (readers take an `Arc` and
//!   never wait for the maintenance thread), and the counters `/stats` and `/metrics` show.
//! - [`maintenance`]: the threads that cut unsealed rows into segments, ask the owner writer to
//!   evict the hot segments below them, and apply retention.
//!
//! The offsets of a stream form one space across tiers: sealed segments hold
//! `[first segment's first offset, sealed_end)` contiguously, the hot log `[hot floor, end)`,
//! and the hot floor never passes `sealed_end` (only sealed rows are evicted), so `earliest`
//! (the first offset any tier holds) is the lower of the first segment's first offset and the
//! hot floor.

pub mod expiry;
pub mod generations;
pub mod maintenance;
pub mod publish;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use corecast_storage::tier::SegmentEntry;

/// What the serving side knows of one durable stream's tiers.
#[derive(Debug, Default)]
pub struct TierState {
    segments: RwLock<Arc<Vec<SegmentEntry>>>,
    /// The offset after the last sealed row.
    pub sealed_end: AtomicU64,
    /// The first offset retention has not dropped (`dropped_through`): rows below it are never
    /// served, even while an unevicted hot segment still holds them.
    pub retention_floor: AtomicU64,
    /// Hot-log segment files.
    pub hot_segments: AtomicU64,
    /// Durable record bytes in the hot log.
    pub hot_bytes: AtomicU64,
    /// The hot log's first offset (its end when it holds none).
    pub hot_floor: AtomicU64,
    /// Record bytes of the rows not sealed yet.
    pub unsealed_bytes: AtomicU64,
    /// `streamcast_ts` of the oldest unsealed row (0: none).
    pub oldest_unsealed_ts_us: AtomicI64,
    /// Segments sealed since start.
    pub seals: AtomicU64,
    /// Seal attempts that failed since start (a full disk, an I/O error); each is retried.
    pub seal_failures: AtomicU64,
    /// Hot segment files evicted since start.
    pub evicted_segments: AtomicU64,
    /// Sealed segments dropped by retention since start.
    pub expired_segments: AtomicU64,
    /// The last maintenance error, if the last attempt failed.
    pub last_error: Mutex<Option<String>>,
    /// Whether the stream publishes its history (`published` is not `"off"`).
    pub publishing: std::sync::atomic::AtomicBool,
    /// The first published offset (0: nothing published).
    pub published_floor: AtomicU64,
    /// The offset after the last published row (1: nothing published yet).
    pub published_end: AtomicU64,
    /// The lowest of the table's ends over its last kept versions (what a catch-up client that
    /// pinned an older version resumes at).
    pub published_end_oldest: AtomicU64,
    /// Live data files in the table, their rows and bytes.
    pub published_files: AtomicU64,
    /// Rows in them.
    pub published_rows: AtomicU64,
    /// Bytes in them.
    pub published_bytes: AtomicU64,
    /// The table's current metadata version (0: none).
    pub table_version: AtomicU64,
    /// `streamcast_ts` of the oldest row not published yet (0: none).
    pub oldest_unpublished_ts_us: AtomicI64,
    /// Commits to the table since start.
    pub publishes: AtomicU64,
    /// Publish attempts that failed since start (each retried with a capped back-off).
    pub publish_failures: AtomicU64,
    /// The last publishing error, if the last attempt failed.
    pub publish_error: Mutex<Option<String>>,
    /// The last error deleting sealed logs past retention (`expiry.rs`), until it succeeds.
    pub sealed_logs_error: Mutex<Option<String>>,
}

impl TierState {
    /// A state over the recorded `segments`, with retention's floor at `dropped_through`.
    pub fn new(segments: Vec<SegmentEntry>, sealed_end: u64, dropped_through: u64) -> TierState {
        TierState {
            segments: RwLock::new(Arc::new(segments)),
            sealed_end: AtomicU64::new(sealed_end),
            retention_floor: AtomicU64::new(dropped_through),
            ..TierState::default()
        }
    }

    /// The recorded segments, in offset order (a snapshot: later changes make a new list).
    pub fn segments(&self) -> Arc<Vec<SegmentEntry>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the list.
    pub fn set_segments(&self, segments: Vec<SegmentEntry>) {
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(segments);
    }

    /// The sealed tier's totals: `(segments, rows, bytes, first offset, last offset)`.
    pub fn sealed_totals(&self) -> SealedTotals {
        let segments = self.segments();
        SealedTotals {
            segments: segments.len() as u64,
            rows: segments.iter().map(|s| s.rows).sum(),
            bytes: segments.iter().map(|s| s.bytes).sum(),
            first: segments.first().map(|s| s.first_offset),
            last: segments.last().map(|s| s.last_offset),
        }
    }

    /// The first offset any tier holds, given the hot log's floor: the first segment's first
    /// offset when it is lower, and never below what retention dropped.
    pub fn earliest(&self, hot_floor: u64) -> u64 {
        self.segments()
            .first()
            .map_or(hot_floor, |s| s.first_offset.min(hot_floor))
            .max(self.retention_floor.load(Ordering::Acquire))
    }

    /// The unsealed rows' lag: `(rows, seconds)` given the stream's end offset and the time now.
    pub fn seal_lag(&self, end: u64, now_us: i64) -> (u64, f64) {
        let rows = end.saturating_sub(self.sealed_end.load(Ordering::Acquire));
        let oldest = self.oldest_unsealed_ts_us.load(Ordering::Acquire);
        let secs = if rows == 0 || oldest == 0 {
            0.0
        } else {
            (now_us - oldest).max(0) as f64 / 1e6
        };
        (rows, secs)
    }

    /// The unpublished rows' lag: `(rows, seconds)` (both 0 when the stream does not publish).
    pub fn publish_lag(&self, end: u64, now_us: i64) -> (u64, f64) {
        if !self.publishing.load(Ordering::Relaxed) {
            return (0, 0.0);
        }
        let rows = end.saturating_sub(self.published_end.load(Ordering::Acquire).max(1));
        let oldest = self.oldest_unpublished_ts_us.load(Ordering::Acquire);
        let secs = if rows == 0 || oldest == 0 {
            0.0
        } else {
            (now_us - oldest).max(0) as f64 / 1e6
        };
        (rows, secs)
    }

    /// Whether a resume at `offset` is where a catch-up client resumes: the table has
    /// published rows (retention may have removed them since) and `offset` is at or past its
    /// end as of one of its kept versions (a slow reader pinned an older one while seals went
    /// on). Such a resume is never refused as `too_old`
    /// (the catch-up client resumes exactly there after reading the table).
    pub fn beyond_published(&self, offset: u64) -> bool {
        let end = self.published_end.load(Ordering::Acquire);
        let oldest = match self.published_end_oldest.load(Ordering::Acquire) {
            0 => end,
            o => o.min(end),
        };
        self.publishing.load(Ordering::Relaxed) && end > 1 && offset >= oldest
    }

    /// Notes a publishing error (kept for `/stats` until the next success).
    pub fn set_publish_error(&self, error: Option<String>) {
        *self.publish_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// The last publishing error, if any.
    pub fn publish_error(&self) -> Option<String> {
        self.publish_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes an error deleting sealed logs (kept for `/stats` until the next success).
    pub fn set_sealed_logs_error(&self, error: Option<String>) {
        *self
            .sealed_logs_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// The last error deleting sealed logs, if any.
    pub fn sealed_logs_error(&self) -> Option<String> {
        self.sealed_logs_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes an error (kept for `/stats` until the next success).
    pub fn set_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// The last error, if any.
    pub fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Totals of a sealed tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedTotals {
    /// Segment files.
    pub segments: u64,
    /// Rows in them.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The first offset held.
    pub first: Option<u64>,
    /// The last offset held.
    pub last: Option<u64>,
}

/// The `tiers` object of `/stats` and `/v1/streams/NAME` for a stream (`null` for a live one):
/// `{"earliest_offset":E,"hot":{…},"sealed":{…},"seal_lag":{"rows":R,"seconds":S},…}`, each
/// tier with `segments`, `rows`, `bytes`, `first_offset`, `last_offset` (`null` when empty).
pub fn tiers_json(st: &crate::registry::Stream) -> String {
    use std::fmt::Write as _;
    if !st.durable() {
        return "null".into();
    }
    let t = &st.tiers;
    let end = st.end.load(Ordering::Acquire);
    let hot_floor = t.hot_floor.load(Ordering::Relaxed).min(end).max(1);
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let hot_rows = end.saturating_sub(hot_floor);
    let sealed = t.sealed_totals();
    let (lag_rows, lag_s) = t.seal_lag(end, crate::registry::now_us());
    let mut s = String::with_capacity(512);
    let _ = write!(
        s,
        "{{\"earliest_offset\":{},\"hot\":{{\"segments\":{},\"rows\":{},\"bytes\":{},\"first_offset\":{},\"last_offset\":{}}},\"sealed\":{{\"segments\":{},\"rows\":{},\"bytes\":{},\"first_offset\":{},\"last_offset\":{}}},\"seal_lag\":{{\"rows\":{},\"bytes\":{},\"seconds\":{}}},\"seal_target_bytes\":{},\"seal_every_s\":{},\"retention_s\":{},\"seals\":{},\"seal_failures\":{},\"evicted_segments\":{},\"expired_segments\":{},\"last_error\":{},\"published\":{}}}",
        st.earliest.load(Ordering::Acquire).min(end).max(1),
        t.hot_segments.load(Ordering::Relaxed),
        hot_rows,
        t.hot_bytes.load(Ordering::Relaxed),
        opt((hot_rows > 0).then_some(hot_floor)),
        opt((hot_rows > 0).then(|| end - 1)),
        sealed.segments,
        sealed.rows,
        sealed.bytes,
        opt(sealed.first),
        opt(sealed.last),
        lag_rows,
        t.unsealed_bytes.load(Ordering::Relaxed),
        lag_s,
        st.cfg.seal_target_bytes,
        st.cfg.seal_every.as_secs_f64(),
        opt(st.cfg.retention.map(|r| r.as_secs())),
        t.seals.load(Ordering::Relaxed),
        t.seal_failures.load(Ordering::Relaxed),
        t.evicted_segments.load(Ordering::Relaxed),
        t.expired_segments.load(Ordering::Relaxed),
        t.error()
            .map_or("null".into(), |e| sonic_rs::to_string(&e).unwrap_or_default()),
        published_json(st, end),
    );
    s
}

/// The `published` object inside `tiers` (`null` when the stream does not publish):
/// `{"location":URI,"metadata_hint":URI,"first_offset":F,"end_offset":E,"files":N,"rows":R,
/// "bytes":B,"version":V,"lag":{"rows":R,"seconds":S},"evict_after":…,"publishes":N,
/// "failures":N,"last_error":…}`.
fn published_json(st: &crate::registry::Stream, end: u64) -> String {
    let t = &st.tiers;
    if !t.publishing.load(Ordering::Relaxed) {
        return "null".into();
    }
    let js = |v: Option<&str>| {
        v.map_or("null".to_string(), |v| {
            sonic_rs::to_string(&v).unwrap_or_default()
        })
    };
    let floor = t.published_floor.load(Ordering::Acquire);
    let (lag_rows, lag_s) = t.publish_lag(end, crate::registry::now_us());
    let location = match &st.cfg.published {
        crate::config::Published::At(l) => l.clone(),
        _ => format!("file://{}/published", st.dir.display()),
    };
    format!(
        "{{\"location\":{},\"metadata_hint\":{},\"first_offset\":{},\"end_offset\":{},\"files\":{},\"rows\":{},\"bytes\":{},\"version\":{},\"lag\":{{\"rows\":{},\"seconds\":{}}},\"evict_after\":{},\"publishes\":{},\"failures\":{},\"last_error\":{},\"sealed_logs_error\":{}}}",
        js(Some(&location)),
        js(st.metadata_hint.as_deref()),
        if floor == 0 { "null".to_string() } else { floor.to_string() },
        t.published_end.load(Ordering::Acquire).max(1),
        t.published_files.load(Ordering::Relaxed),
        t.published_rows.load(Ordering::Relaxed),
        t.published_bytes.load(Ordering::Relaxed),
        t.table_version.load(Ordering::Relaxed),
        lag_rows,
        lag_s,
        js(Some(match st.cfg.evict_after {
            crate::config::EvictAfter::Published => "published",
            crate::config::EvictAfter::Sealed => "sealed",
        })),
        t.publishes.load(Ordering::Relaxed),
        t.publish_failures.load(Ordering::Relaxed),
        js(t.publish_error().as_deref()),
        js(t.sealed_logs_error().as_deref()),
    )
}
