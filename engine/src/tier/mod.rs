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

pub mod maintenance;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use corecast_storage::tier::SegmentEntry;

/// What the serving side knows of one durable stream's tiers.
#[derive(Debug, Default)]
pub struct TierState {
    segments: RwLock<Arc<Vec<SegmentEntry>>>,
    /// The offset after the last sealed row.
    pub sealed_end: AtomicU64,
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
}

impl TierState {
    /// A state over the recorded `segments`.
    pub fn new(segments: Vec<SegmentEntry>, sealed_end: u64) -> TierState {
        TierState {
            segments: RwLock::new(Arc::new(segments)),
            sealed_end: AtomicU64::new(sealed_end),
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
    /// offset when it is lower.
    pub fn earliest(&self, hot_floor: u64) -> u64 {
        self.segments()
            .first()
            .map_or(hot_floor, |s| s.first_offset.min(hot_floor))
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
        "{{\"earliest_offset\":{},\"hot\":{{\"segments\":{},\"rows\":{},\"bytes\":{},\"first_offset\":{},\"last_offset\":{}}},\"sealed\":{{\"segments\":{},\"rows\":{},\"bytes\":{},\"first_offset\":{},\"last_offset\":{}}},\"seal_lag\":{{\"rows\":{},\"bytes\":{},\"seconds\":{}}},\"seal_target_bytes\":{},\"seal_every_s\":{},\"retention_s\":{},\"seals\":{},\"seal_failures\":{},\"evicted_segments\":{},\"expired_segments\":{},\"last_error\":{}}}",
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
    );
    s
}
