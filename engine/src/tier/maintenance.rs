//! The maintenance threads: seal each durable stream's oldest unsealed rows into Parquet
//! segments, evict the hot segments the sealed tier now covers, drop segments past retention.
//!
//! In: the registry's durable streams (each with its [`SegmentIndex`] and a reader of its hot
//! log), a tick every [`TICK`]. Out: recorded segments, [`WriterMsg::Evict`] requests to the
//! stream's owner writer (which takes the segments out of the log between commits; the files
//! are deleted here, off the commit path), and the [`TierState`](super::TierState) counters.
//!
//! These threads never serve a client: they run at a lower CPU priority (nice 10; nice 0 while
//! a stream is behind, see `Priority`), one stream at a time, with memory bounded by one
//! Parquet row group. A seal that fails (a full disk, an I/O error) records nothing, leaves the
//! rows in the hot log and is tried again after a back-off that doubles from 1 s to 30 s; the
//! error is logged once per distinct message and shown in `/stats`.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use corecast_storage::log::BufferReader;
use corecast_storage::tier::{drop_expired, seal_next, SealCut, SealOptions, SegmentIndex};

use super::publish::PublishJob;
use crate::commit::writer::WriterMsg;
use crate::config::EvictAfter;
use crate::registry::{now_us, Stream};

/// How often each stream is looked at when nothing is due.
pub const TICK: Duration = Duration::from_millis(100);

/// Seals one stream may make in a row before the thread looks at the others (and at stop).
const SEALS_PER_TURN: usize = 4;

/// The first back-off after a failed seal; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One durable stream as a maintenance thread sees it.
pub struct TierJob {
    stream: Arc<Stream>,
    index: SegmentIndex,
    reader: BufferReader,
    writer: crossbeam_channel::Sender<WriterMsg>,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// `(offset, ts)` of the oldest unsealed row, read once per `sealed_end`.
    oldest: Option<(u64, i64)>,
    /// Publishing (`None`: `published = "off"`).
    publish: Option<PublishJob>,
}

impl TierJob {
    /// A job over `stream`'s opened `index`, read through `reader`, evicting through `writer`,
    /// publishing through `publish`.
    pub fn new(
        stream: Arc<Stream>,
        index: SegmentIndex,
        reader: BufferReader,
        writer: crossbeam_channel::Sender<WriterMsg>,
        publish: Option<PublishJob>,
    ) -> TierJob {
        TierJob {
            stream,
            index,
            reader,
            writer,
            retry_at: None,
            backoff: FIRST_BACKOFF,
            oldest: None,
            publish,
        }
    }
}

/// The running maintenance threads.
pub struct Maintenance {
    stop: crossbeam_channel::Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

impl Maintenance {
    /// Starts `threads` threads sharing `jobs` round-robin.
    pub fn start(jobs: Vec<TierJob>, threads: usize) -> std::io::Result<Maintenance> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let n = threads.max(1).min(jobs.len().max(1));
        let mut shares: Vec<Vec<TierJob>> = (0..n).map(|_| Vec::new()).collect();
        for (i, job) in jobs.into_iter().enumerate() {
            shares[i % n].push(job);
        }
        let mut handles = Vec::new();
        for (i, share) in shares.into_iter().enumerate() {
            if share.is_empty() {
                continue;
            }
            let stopped = stopped.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("corecast-maint-{i}"))
                    .spawn(move || run(share, stopped))?,
            );
        }
        Ok(Maintenance {
            stop,
            threads: handles,
        })
    }

    /// Stops the threads (a seal in progress finishes first) and joins them.
    pub fn stop(self) {
        drop(self.stop);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn run(mut jobs: Vec<TierJob>, stopped: crossbeam_channel::Receiver<()>) {
    let mut priority = Priority::lowered();
    let options = SealOptions::default();
    loop {
        let mut busy = false;
        for i in 0..jobs.len() {
            priority.follow(jobs.iter().any(behind));
            busy |= turn(&mut jobs[i], &options, &mut priority);
            if stop_requested(&stopped) {
                return;
            }
        }
        let wait = if busy { Duration::ZERO } else { TICK };
        match stopped.recv_timeout(wait) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

fn stop_requested(stopped: &crossbeam_channel::Receiver<()>) -> bool {
    matches!(
        stopped.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    )
}

/// One look at one stream; `true` when more work is due at once.
fn turn(job: &mut TierJob, options: &SealOptions, priority: &mut Priority) -> bool {
    let st = job.stream.clone();
    let tiers = &st.tiers;
    let mut more = false;
    let now = Instant::now();
    if job.retry_at.is_none_or(|at| now >= at) {
        for _ in 0..SEALS_PER_TURN {
            match seal_if_due(job, options, priority) {
                Ok(true) => more = true,
                Ok(false) => {
                    more = false;
                    break;
                }
                Err(e) => {
                    more = false;
                    tiers.seal_failures.fetch_add(1, Ordering::Relaxed);
                    note_error(&st, format!("sealing: {e}"));
                    job.retry_at = Some(now + job.backoff);
                    job.backoff = (job.backoff * 2).min(MAX_BACKOFF);
                    break;
                }
            }
        }
    }
    if let Some(p) = job.publish.as_mut() {
        more |= p.turn(&st);
    }
    if let Err(e) = evict(job) {
        note_error(&st, format!("evicting hot segments: {e}"));
    }
    if let Err(e) = expire(job) {
        note_error(&st, format!("retention: {e}"));
    }
    observe(job);
    more
}

/// Seals one segment if the unsealed rows reach `seal_target_bytes` or the oldest of them is
/// `seal_every` old; `Ok(true)` if it sealed one.
fn seal_if_due(
    job: &mut TierJob,
    options: &SealOptions,
    priority: &mut Priority,
) -> Result<bool, String> {
    let st = job.stream.clone();
    let tiers = &st.tiers;
    let sealed_end = tiers.sealed_end.load(Ordering::Acquire);
    let extent = job.reader.extent(sealed_end);
    if extent.end <= sealed_end {
        return Ok(false);
    }
    let by_bytes = extent.bytes_from >= st.cfg.seal_target_bytes;
    let by_age = oldest_unsealed(job, sealed_end, extent.end)
        .is_some_and(|ts| now_us() - ts >= st.cfg.seal_every.as_micros() as i64);
    if !(by_bytes || by_age) {
        return Ok(false);
    }
    if by_bytes {
        // a seal by size is due: rows arrive faster than a by-age seal would take them
        priority.follow(true);
    }
    let began = Instant::now();
    let cut = SealCut {
        until: extent.end,
        target_bytes: st.cfg.seal_target_bytes,
    };
    let Some(entry) =
        seal_next(&job.index, &job.reader, &st.codec, cut, options).map_err(|e| e.to_string())?
    else {
        return Ok(false);
    };
    tracing::info!(
        stream = %st.cfg.name,
        rows = entry.rows,
        bytes = entry.bytes,
        ms = began.elapsed().as_millis() as u64,
        "sealed offsets {}..={} into {}",
        entry.first_offset,
        entry.last_offset,
        entry.file
    );
    let mut segments = (*tiers.segments()).clone();
    let end = entry.end_offset();
    segments.push(entry);
    tiers.set_segments(segments);
    tiers.sealed_end.store(end, Ordering::Release);
    tiers.seals.fetch_add(1, Ordering::Relaxed);
    job.retry_at = None;
    job.backoff = FIRST_BACKOFF;
    clear_error(&st);
    Ok(true)
}

/// The `streamcast_ts` of the row at `sealed_end`.
fn oldest_unsealed(job: &mut TierJob, sealed_end: u64, end: u64) -> Option<i64> {
    if let Some((offset, ts)) = job.oldest {
        if offset == sealed_end {
            return Some(ts);
        }
    }
    let mut found = None;
    let _ = job.reader.scan_with(sealed_end, end, 1, |offset, ts, _| {
        found = Some((offset, ts));
        ControlFlow::Break(())
    });
    job.oldest = found.filter(|&(offset, _)| offset == sealed_end);
    job.oldest.map(|(_, ts)| ts)
}

/// Asks the owner writer to take out the hot segments below `sealed_end`, then deletes them.
fn evict(job: &mut TierJob) -> Result<(), String> {
    let st = &job.stream;
    let sealed_end = st.tiers.sealed_end.load(Ordering::Acquire);
    let extent = job.reader.extent(sealed_end);
    // whole segments below sealed_end, never the newest: commits append to it, and evicting
    // it would make the next commit create a segment itself (on the commit path, and failing
    // when the disk is full)
    let mut below = sealed_end.min(extent.newest_first);
    if st.cfg.evict_after == EvictAfter::Published {
        // only what the table holds (nothing until the publisher has opened)
        below = below.min(
            job.publish
                .as_ref()
                .and_then(|p| p.published_end())
                .unwrap_or(0),
        );
    }
    if extent.floor >= below || extent.segments <= 1 {
        return Ok(());
    }
    let (reply, answer) = flume::bounded(1);
    job.writer
        .send(WriterMsg::Evict {
            stream: st.index,
            below,
            reply,
        })
        .map_err(|_| "the writer has stopped".to_string())?;
    let detached = answer
        .recv()
        .map_err(|_| "the writer has stopped".to_string())??;
    let n = detached.evicted.segments;
    if n > 0 {
        detached.delete().map_err(|e| e.to_string())?;
        st.tiers
            .evicted_segments
            .fetch_add(n as u64, Ordering::Relaxed);
        tracing::debug!(stream = %st.cfg.name, segments = n, floor = detached_floor(&job.reader), "evicted hot segments");
    }
    Ok(())
}

fn detached_floor(reader: &BufferReader) -> u64 {
    reader.extent(0).floor
}

/// Retention: drops the sealed segments whose newest row is older than `retention`.
fn expire(job: &mut TierJob) -> Result<(), String> {
    let st = &job.stream;
    let Some(retention) = st.cfg.retention else {
        return Ok(());
    };
    let cutoff = now_us() - retention.as_micros() as i64;
    let segments = st.tiers.segments();
    let expired = segments.iter().take_while(|s| s.max_ts < cutoff).count();
    if expired == 0 {
        return Ok(());
    }
    // the serving side stops starting reads in them first (the retention floor also hides the
    // copies an unevicted hot segment still holds); readers inside one finish on the unlinked
    // file
    st.tiers.set_segments(segments[expired..].to_vec());
    st.tiers
        .retention_floor
        .fetch_max(segments[expired - 1].end_offset(), Ordering::AcqRel);
    let hot_floor = job.reader.extent(0).floor;
    st.earliest
        .store(st.tiers.earliest(hot_floor), Ordering::Release);
    let dropped =
        drop_expired(&job.index, &segments[..expired], cutoff).map_err(|e| e.to_string())?;
    if let (Some(first), Some(last)) = (dropped.first(), dropped.last()) {
        st.tiers
            .expired_segments
            .fetch_add(dropped.len() as u64, Ordering::Relaxed);
        tracing::info!(
            stream = %st.cfg.name,
            segments = dropped.len(),
            "retention dropped offsets {}..={} (older than {}s)",
            first.first_offset,
            last.last_offset,
            retention.as_secs()
        );
    }
    Ok(())
}

/// Refreshes the hot-log counters and the stream's earliest offset.
fn observe(job: &mut TierJob) {
    let st = job.stream.clone();
    let tiers = &st.tiers;
    let sealed_end = tiers.sealed_end.load(Ordering::Acquire);
    let extent = job.reader.extent(sealed_end);
    tiers
        .hot_segments
        .store(extent.segments as u64, Ordering::Relaxed);
    tiers.hot_bytes.store(extent.bytes, Ordering::Relaxed);
    tiers.hot_floor.store(extent.floor, Ordering::Relaxed);
    let unsealed = if extent.end > sealed_end {
        extent.bytes_from
    } else {
        0
    };
    tiers.unsealed_bytes.store(unsealed, Ordering::Relaxed);
    let oldest = if extent.end > sealed_end {
        oldest_unsealed(job, sealed_end, extent.end).unwrap_or(0)
    } else {
        0
    };
    tiers.oldest_unsealed_ts_us.store(oldest, Ordering::Relaxed);
    st.earliest
        .store(tiers.earliest(extent.floor), Ordering::Release);
}

fn note_error(st: &Stream, error: String) {
    if st.tiers.error().as_deref() != Some(error.as_str()) {
        tracing::warn!(stream = %st.cfg.name, "{error} (rows stay in the hot log; retried later)");
    }
    st.tiers.set_error(Some(error));
}

fn clear_error(st: &Stream) {
    if st.tiers.error().is_some() {
        tracing::info!(stream = %st.cfg.name, "maintenance recovered");
        st.tiers.set_error(None);
    }
}

/// A stream is behind when its unsealed rows (as of its last turn) reach `seal_target_bytes`:
/// a seal by size is due. Sealed at low priority on a busy machine, rows then arrive faster
/// than they are sealed and the hot log outgrows its bound (2 × `seal_target_bytes` + one
/// segment file).
fn behind(job: &TierJob) -> bool {
    let st = &job.stream;
    st.tiers.unsealed_bytes.load(Ordering::Relaxed) >= st.cfg.seal_target_bytes
}

/// The calling thread's nice value (Linux keeps it per thread): [`NICE`] while every stream
/// keeps up, so serving and committing come first (`SCHED_BATCH` would need unsafe code; nice
/// alone already gives a busy serving thread ~10x this thread's share of a shared core), and
/// [`NICE_BEHIND`] from the moment a seal by size is due until no stream is [`behind`] at the
/// start of a turn: on a saturated machine a nice-10 thread waits on the run
/// queue most of the time and sealing falls behind any publisher. Raising it back needs
/// `CAP_SYS_NICE` or `RLIMIT_NICE` (systemd `LimitNICE=`); without them the first refusal is
/// logged and the thread stays at [`NICE`].
struct Priority {
    current: i32,
    /// Whether the value is managed at all (lowering it at start worked).
    managed: bool,
    can_raise: bool,
}

/// The nice value of a maintenance thread whose streams keep up.
const NICE: i32 = 10;
/// ... and of one with a stream behind.
const NICE_BEHIND: i32 = 0;

impl Priority {
    fn lowered() -> Priority {
        match set_nice(NICE) {
            Ok(()) => Priority {
                current: NICE,
                managed: true,
                can_raise: true,
            },
            Err(e) => {
                tracing::debug!("cannot lower the maintenance thread's priority: {e}");
                Priority {
                    current: 0,
                    managed: false,
                    can_raise: false,
                }
            }
        }
    }

    fn follow(&mut self, behind: bool) {
        let want = if behind { NICE_BEHIND } else { NICE };
        if !self.managed || want == self.current || (want < self.current && !self.can_raise) {
            return;
        }
        match set_nice(want) {
            Ok(()) => {
                tracing::debug!(nice = want, "maintenance thread priority");
                self.current = want;
            }
            Err(e) if want < self.current => {
                tracing::info!("sealing is behind, but the maintenance thread cannot raise its priority back to nice {want}: {e}");
                self.can_raise = false;
            }
            Err(e) => tracing::debug!("cannot lower the maintenance thread's priority: {e}"),
        }
    }
}

fn set_nice(nice: i32) -> rustix::io::Result<()> {
    rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)
}
