//! Publishing, as the maintenance threads run it: each durable stream's sealed segments go to
//! its Iceberg table ([`Publisher`]), retention is applied to the table too, and files no kept
//! version names are deleted after the grace period, as are the files of a migrated stream's
//! sealed logs once retention is past them ([`SealedExpiry`]).
//!
//! In: the stream's recorded segments ([`TierState`](super::TierState)) and its [`Layout`].
//! Out: table commits, and the `published_*` counters of the stream's `TierState` (the serving
//! side reads `published_end` to decide replays, `/stats` and `/metrics` show the rest).
//!
//! Never on the commit path: a publish is files in a store and a `meta.db` transaction on this
//! thread. A failure (the store unreachable, a full disk) changes nothing readers see, is
//! retried after a back-off that doubles from 1 s to 60 s, and is shown in `/stats`; the hot
//! log keeps the unpublished rows meanwhile when `evict_after = "published"`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_storage::published::{Layout, Publisher, SegmentToPublish, StreamInfo};
use corecast_storage::tier::SegmentEntry;

use super::expiry::SealedExpiry;
use crate::registry::{now_us, Stream};

/// The first back-off after a failed publish; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Segments one commit publishes at most (a stream far behind catches up in several).
const SEGMENTS_PER_COMMIT: usize = 16;

/// How often garbage is looked for.
const GC_EVERY: Duration = Duration::from_secs(10);

/// How long after a failed deletion of sealed logs it is tried again.
const EXPIRY_RETRY: Duration = Duration::from_secs(60);

/// One stream's publishing state on its maintenance thread.
pub struct PublishJob {
    layout: Layout,
    info: StreamInfo,
    segments_dir: PathBuf,
    publisher: Option<Publisher>,
    retry_at: Option<Instant>,
    backoff: Duration,
    gc_at: Instant,
    /// The table's end after each of the last kept commits, oldest first: a catch-up client
    /// that read any kept version resumes at one of these.
    ends: std::collections::VecDeque<u64>,
    /// The sealed logs' expiry (`None`: a stream never migrated).
    expiry: Option<SealedExpiry>,
    /// After a failed expiry turn: when to try again.
    expiry_retry_at: Option<Instant>,
}

impl PublishJob {
    /// A job publishing to `layout`; the publisher opens on the first turn (a store that is
    /// down at start delays publishing, not serving). `expiry` deletes the sealed logs past
    /// retention.
    pub fn new(
        layout: Layout,
        info: StreamInfo,
        segments_dir: PathBuf,
        expiry: Option<SealedExpiry>,
    ) -> PublishJob {
        PublishJob {
            layout,
            info,
            segments_dir,
            publisher: None,
            retry_at: None,
            backoff: FIRST_BACKOFF,
            gc_at: Instant::now() + GC_EVERY,
            ends: std::collections::VecDeque::new(),
            expiry,
            expiry_retry_at: None,
        }
    }

    /// One look: open, publish what is sealed and not published, apply retention, collect
    /// garbage. `true` when more is due at once.
    pub fn turn(&mut self, st: &Arc<Stream>) -> bool {
        let now = Instant::now();
        if self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        match self.step(st) {
            Ok(more) => {
                self.retry_at = None;
                self.backoff = FIRST_BACKOFF;
                if st.tiers.publish_error().is_some() {
                    tracing::info!(stream = %st.cfg.name, "publishing recovered");
                    st.tiers.set_publish_error(None);
                }
                self.expire_sealed_logs(st, now);
                more
            }
            Err(e) => {
                st.tiers.publish_failures.fetch_add(1, Ordering::Relaxed);
                if st.tiers.publish_error().as_deref() != Some(e.as_str()) {
                    tracing::warn!(stream = %st.cfg.name, "publishing to {}: {e} (retried in {:?}; nothing readers see changed)", self.layout.table.base(), self.backoff);
                }
                st.tiers.set_publish_error(Some(e));
                self.retry_at = Some(now + self.backoff);
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                // reopen next time: the failure may have left a plan pending
                self.publisher = None;
                false
            }
        }
    }

    fn step(&mut self, st: &Arc<Stream>) -> Result<bool, String> {
        let segments = st.tiers.segments();
        if self.publisher.is_none() {
            let earliest = st.earliest.load(Ordering::Acquire).max(1);
            let mut p = Publisher::open(
                &st.dir,
                self.layout.clone(),
                self.info.clone(),
                st.cfg.published_grace,
                earliest,
            )
            .map_err(|e| format!("opening the table: {e}"))?;
            for note in p.take_notes() {
                tracing::warn!(stream = %st.cfg.name, "{note}");
            }
            // what readers resolve must match meta.db: rewrite a lost hint or metadata, publish
            // a lost data file again from its sealed segment
            let dir = self.segments_dir.clone();
            let relink = |first: u64, last: u64| {
                segments
                    .iter()
                    .find(|s| s.first_offset == first && s.last_offset == last)
                    .map(|s| dir.join(&s.file))
            };
            for note in p
                .verify(&relink)
                .map_err(|e| format!("checking the table: {e}"))?
            {
                tracing::warn!(stream = %st.cfg.name, "repaired the published table: {note}");
            }
            // kill tests: abort inside the next commit, at a named point (docs/RELIABILITY.md)
            // (`POINT` or `POINT:N`: after N commits that pass)
            if let Ok(v) = std::env::var("CORECAST_FAULT_PUBLISH") {
                let (point, skip) = v.split_once(':').unwrap_or((v.as_str(), "0"));
                if let (Some(point), Ok(skip)) = (
                    corecast_storage::published::FaultPoint::parse(point),
                    skip.parse::<u32>(),
                ) {
                    tracing::warn!(stream = %st.cfg.name, "CORECAST_FAULT_PUBLISH: publish number {} aborts the process at {point:?}", skip + 1);
                    p.set_fault_after(point, true, skip);
                }
            }
            self.publisher = Some(p);
            self.observe(st, &segments);
        }
        let Some(p) = self.publisher.as_mut() else {
            return Ok(false);
        };
        // retired over /control/v1: the stream metadata records it (version 3, `retirement`);
        // kept in `info` so a reopened publisher writes it again
        if st.state() == crate::registry::StreamState::Retired && self.info.retirement.is_none() {
            let retirement = corecast_storage::published::Retirement {
                at_us: st.retired_at_us.load(Ordering::SeqCst),
                end_offset: st.end.load(Ordering::Acquire),
            };
            p.retire(retirement)
                .map_err(|e| format!("recording the retirement: {e}"))?;
            self.info.retirement = Some(retirement);
            tracing::info!(stream = %st.cfg.name, end_offset = retirement.end_offset, "the stream metadata records the retirement");
        }
        let mut more = false;
        // retention first, so nothing expired is published
        if let Some(retention) = st.cfg.retention {
            let cutoff = now_us() - retention.as_micros() as i64;
            let n = p.expire(cutoff).map_err(|e| format!("retention: {e}"))?;
            if n > 0 {
                st.tiers.publishes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(stream = %st.cfg.name, files = n, "retention removed published files older than {}s", retention.as_secs());
            }
        }
        let end = p.end();
        if let Some(s) = segments
            .iter()
            .find(|s| s.first_offset < end && end <= s.last_offset)
        {
            return Err(format!(
                "the table's end {end} falls inside sealed segment {} (offsets {}..={}): meta.db's published state does not match the segment index",
                s.file, s.first_offset, s.last_offset
            ));
        }
        let due: Vec<&SegmentEntry> = segments
            .iter()
            .filter(|s| s.first_offset >= end)
            .take(SEGMENTS_PER_COMMIT)
            .collect();
        if !due.is_empty() {
            let began = Instant::now();
            let batch: Vec<SegmentToPublish> = due
                .iter()
                .map(|s| SegmentToPublish {
                    first_offset: s.first_offset,
                    last_offset: s.last_offset,
                    rows: s.rows,
                    bytes: s.bytes,
                    min_ts: s.min_ts,
                    max_ts: s.max_ts,
                    path: self.segments_dir.join(&s.file),
                })
                .collect();
            p.append(&batch).map_err(|e| e.to_string())?;
            for note in p.take_notes() {
                tracing::warn!(stream = %st.cfg.name, "{note}");
            }
            st.tiers.publishes.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                stream = %st.cfg.name,
                files = batch.len(),
                ms = began.elapsed().as_millis() as u64,
                "published offsets {}..={} to {}",
                batch[0].first_offset,
                batch[batch.len() - 1].last_offset,
                self.layout.table.base()
            );
            more = segments
                .iter()
                .filter(|s| s.first_offset >= p.end())
                .count()
                > 0;
        }
        if Instant::now() >= self.gc_at {
            self.gc_at = Instant::now() + GC_EVERY;
            let n = p
                .collect_garbage()
                .map_err(|e| format!("deleting old files: {e}"))?;
            if n > 0 {
                tracing::debug!(stream = %st.cfg.name, objects = n, "deleted published files no kept version names");
            }
        }
        self.observe(st, &segments);
        Ok(more)
    }

    /// Deletes the sealed logs the stream metadata has not listed for the grace period
    /// ([`SealedExpiry`]). Its own error (shown in `/stats` as `sealed_logs_error`, logged
    /// once per distinct message, tried again a minute later) never holds up publishing.
    fn expire_sealed_logs(&mut self, st: &Stream, now: Instant) {
        let (Some(expiry), Some(p)) = (self.expiry.as_mut(), self.publisher.as_ref()) else {
            return;
        };
        if expiry.idle() || self.expiry_retry_at.is_some_and(|at| now < at) {
            return;
        }
        match expiry.turn(&p.unlisted_sealed_logs()) {
            Ok(gone) => {
                self.expiry_retry_at = None;
                if !gone.is_empty() {
                    self.info.sealed_logs = expiry.sealed().to_vec();
                }
                if st.tiers.sealed_logs_error().is_some() {
                    tracing::info!(stream = %st.cfg.name, "deleting sealed logs past retention recovered");
                    st.tiers.set_sealed_logs_error(None);
                }
            }
            Err(e) => {
                let e = format!("deleting sealed logs past retention: {e}");
                if st.tiers.sealed_logs_error().as_deref() != Some(e.as_str()) {
                    tracing::warn!(stream = %st.cfg.name, "{e} (tried again in {}s; publishing goes on)", EXPIRY_RETRY.as_secs());
                }
                st.tiers.set_sealed_logs_error(Some(e));
                self.expiry_retry_at = Some(now + EXPIRY_RETRY);
            }
        }
    }

    /// Copies the publisher's extent into the stream's counters, and the age of the oldest row
    /// not published.
    fn observe(&mut self, st: &Stream, segments: &[SegmentEntry]) {
        let Some(p) = &self.publisher else {
            return;
        };
        let s = p.status();
        let t = &st.tiers;
        // only versions with rows: a client that read an empty table does not resume from it
        if s.floor.is_some() && self.ends.back() != Some(&s.end) {
            self.ends.push_back(s.end);
            while self.ends.len() > corecast_storage::published::table::KEEP_VERSIONS as usize {
                self.ends.pop_front();
            }
        }
        t.published_end_oldest.store(
            self.ends.front().copied().unwrap_or(s.end),
            Ordering::Release,
        );
        t.published_floor
            .store(s.floor.unwrap_or(0), Ordering::Release);
        t.published_end.store(s.end, Ordering::Release);
        t.published_files.store(s.files, Ordering::Relaxed);
        t.published_rows.store(s.rows, Ordering::Relaxed);
        t.published_bytes.store(s.bytes, Ordering::Relaxed);
        t.table_version.store(s.version, Ordering::Relaxed);
        let oldest = segments
            .iter()
            .find(|seg| seg.holds(s.end))
            .map(|seg| seg.min_ts)
            .unwrap_or_else(|| t.oldest_unsealed_ts_us.load(Ordering::Relaxed));
        t.oldest_unpublished_ts_us.store(oldest, Ordering::Relaxed);
    }

    /// The offset below which the table holds every row (the eviction bound under
    /// `evict_after = "published"`); `None` until the publisher has opened.
    pub fn published_end(&self) -> Option<u64> {
        self.publisher.as_ref().map(|p| p.end())
    }
}
