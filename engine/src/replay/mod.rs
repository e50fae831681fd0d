//! The reader pool: blocking threads that read history below the rings — sealed Parquet segments,
//! then the hot log — and return ready-made frames.
//!
//! In: [`ReplayJob`]s from any shard (a crossbeam channel shared by the pool). Out, over a
//! one-shot flume channel the session awaits on its io_uring loop: a [`Replayed`] chunk of
//! contiguous frames (≤ [`REPLAY_CHUNK_ROWS`] rows, ≤ [`REPLAY_CHUNK_BYTES`]), where the next
//! job should start, and the offsets no tier holds any more, if the range met such a hole
//! (retention, or eviction racing the read).
//!
//! The tiers are one offset space: below the hot log's floor a job reads the sealed segment that
//! holds its first offset (`sealed.rs`: the segment's rows re-encoded to exactly the stored bytes,
//! only the row groups and pages the range and the `where=` statistics need); from the floor on
//! it reads the hot log (`BufferReader`, which never blocks the writer). Either way the frames
//! are built exactly as the writer frames live rows, so replay bytes equal live bytes.

mod sealed;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::thread::JoinHandle;

use corecast_storage::log::BufferReader;
use corecast_storage::tier::ColumnPredicate;

use crate::fanout::batch::{FrameBatch, FrameBatchBuilder};
use crate::registry::{Registry, Streams};
use sealed::{SealedRead, SealedReads};

/// Rows one replay job returns at most (a chunk; the session asks again for the next).
pub const REPLAY_CHUNK_ROWS: usize = 4096;

/// Frame bytes after which a replay job's chunk ends (the row that reaches it is the last): a
/// chunk of rows near the 1 MiB message limit stays a few MiB, not `REPLAY_CHUNK_ROWS` MiB, and
/// its frame offsets stay well inside `u32`.
pub const REPLAY_CHUNK_BYTES: usize = 4 << 20;

/// A scan request.
pub struct ReplayJob {
    /// Stream index.
    pub stream: usize,
    /// First offset wanted (inclusive).
    pub from: u64,
    /// End offset (exclusive).
    pub to: u64,
    /// The subscriber's `where=` terms: sealed row groups whose statistics exclude them are
    /// skipped (the session still filters every row it is sent).
    pub prune: Vec<ColumnPredicate>,
    /// Where the chunk goes, or the storage error's text.
    pub reply: flume::Sender<Result<Replayed, String>>,
}

/// What one job read.
pub struct Replayed {
    /// Contiguous frames from the first offset read (empty: nothing in the range to send).
    pub batch: FrameBatch,
    /// Where the next job starts: after the batch, or past rows skipped because their row
    /// groups' statistics exclude the filter (≤ the job's `to`).
    pub resume: u64,
    /// `(first, last)`: offsets at the start of the range that no tier holds (dropped by
    /// retention, or evicted while the job read); the batch starts after them.
    pub missing: Option<(u64, u64)>,
}

enum PoolMsg {
    Job(ReplayJob),
    Stop,
}

/// Where shards submit replay jobs (cheap to clone).
#[derive(Clone)]
pub struct ReplaySender {
    tx: crossbeam_channel::Sender<PoolMsg>,
}

impl ReplaySender {
    /// Queues a job; `Err` gives it back when the pool has stopped.
    pub fn submit(&self, job: ReplayJob) -> Result<(), ReplayJob> {
        self.tx.send(PoolMsg::Job(job)).map_err(|e| match e.0 {
            PoolMsg::Job(j) => j,
            PoolMsg::Stop => unreachable!("only jobs are submitted"),
        })
    }
}

/// Handle to the pool.
pub struct ReaderPool {
    tx: crossbeam_channel::Sender<PoolMsg>,
    threads: Vec<JoinHandle<()>>,
}

impl ReaderPool {
    /// Starts `threads` reader threads over `registry`'s durable streams.
    pub fn start(threads: usize, registry: Arc<Streams>) -> ReaderPool {
        let (tx, rx) = crossbeam_channel::unbounded::<PoolMsg>();
        let sealed = Arc::new(SealedReads::default());
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                let registry = registry.clone();
                let sealed = sealed.clone();
                std::thread::Builder::new()
                    .name(format!("corecast-reader-{i}"))
                    .spawn(move || reader_loop(rx, registry, sealed))
                    .expect("spawn reader thread")
            })
            .collect();
        ReaderPool { tx, threads }
    }

    /// A sender shards use to submit jobs.
    pub fn sender(&self) -> ReplaySender {
        ReplaySender {
            tx: self.tx.clone(),
        }
    }

    /// Stops the pool after the jobs already queued, and joins its threads.
    pub fn join(self) {
        for _ in &self.threads {
            let _ = self.tx.send(PoolMsg::Stop);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn reader_loop(
    rx: crossbeam_channel::Receiver<PoolMsg>,
    registry: Arc<Streams>,
    sealed: Arc<SealedReads>,
) {
    let mut readers: HashMap<usize, (u64, BufferReader)> = HashMap::new();
    while let Ok(PoolMsg::Job(job)) = rx.recv() {
        let registry = registry.load();
        // a panic in a read (a library meeting a damaged file) answers this job with an error
        // and leaves the thread serving the others
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read(&mut readers, &registry, &sealed, &job)
        }))
        .unwrap_or_else(|panic| {
            readers.remove(&job.stream);
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(format!("reading offset {}: {what}", job.from))
        });
        if let Err(e) = &res {
            let st = &registry.streams[job.stream];
            tracing::error!(stream = %st.cfg.name, from = job.from, "replay failed: {e}");
        }
        let _ = job.reply.send(res);
    }
}

/// Tries a few times when the tiers move under the read (a seal evicting the hot rows, or
/// retention dropping the segment, between reading where they are and reading them).
const ATTEMPTS: usize = 4;

fn read(
    readers: &mut HashMap<usize, (u64, BufferReader)>,
    registry: &Registry,
    sealed: &SealedReads,
    job: &ReplayJob,
) -> Result<Replayed, String> {
    let stream = &registry.streams[job.stream];
    // a reader of an earlier opening of this index (a stream stopped and started again) is
    // opened afresh
    if readers
        .get(&job.stream)
        .is_some_and(|(generation, _)| *generation != stream.generation)
    {
        readers.remove(&job.stream);
    }
    let reader = match readers.entry(job.stream) {
        std::collections::hash_map::Entry::Occupied(o) => &mut o.into_mut().1,
        std::collections::hash_map::Entry::Vacant(v) => {
            let opened = BufferReader::open(&stream.dir).map_err(|e| e.to_string())?;
            &mut v.insert((stream.generation, opened)).1
        }
    };
    let mut last_hot: Option<Replayed> = None;
    for _ in 0..ATTEMPTS {
        let segments = stream.tiers.segments();
        let extent = reader.extent(u64::MAX);
        let hot_floor = extent.floor;
        let earliest = segments
            .first()
            .map_or(hot_floor, |s| s.first_offset.min(hot_floor));
        let mut from = job.from;
        let mut missing = None;
        if from < earliest {
            missing = Some((from, earliest.min(job.to) - 1));
            from = earliest;
        }
        if from >= job.to {
            return Ok(Replayed {
                batch: FrameBatchBuilder::new(job.to, true, 0).finish(),
                resume: job.to,
                missing,
            });
        }
        if from < hot_floor {
            let Some(entry) = segments.iter().find(|s| s.holds(from)) else {
                continue; // the list changed under us
            };
            let path = stream
                .dir
                .join(corecast_storage::tier::SEGMENTS_DIR_NAME)
                .join(&entry.file);
            let request = SealedRead {
                stream: job.stream,
                entry,
                path: &path,
                from,
                to: job.to.min(entry.end_offset()),
                prune: &job.prune,
            };
            match sealed.read(&stream.codec, request) {
                Ok(Some((batch, resume))) => {
                    return Ok(Replayed {
                        batch,
                        resume,
                        missing,
                    })
                }
                Ok(None) => continue, // the file was dropped by retention meanwhile
                Err(e) => return Err(e),
            }
        }
        let batch = scan(reader, from, job.to)?;
        if !batch.is_empty() && batch.first > from {
            // evicted while we read: the rows are in the sealed tier now (or were dropped)
            let hole = (from, batch.first - 1);
            let resume = batch.end();
            last_hot = Some(Replayed {
                batch,
                resume,
                missing: Some((missing.map_or(hole.0, |m| m.0), hole.1)),
            });
            continue;
        }
        if batch.is_empty() && reader.extent(u64::MAX).floor > from {
            // evicted between the look at the floor and the scan: read the sealed tier
            continue;
        }
        let resume = if batch.is_empty() {
            job.to
        } else {
            batch.end()
        };
        return Ok(Replayed {
            batch,
            resume,
            missing,
        });
    }
    last_hot.ok_or_else(|| {
        format!(
            "the tiers of {} kept moving while offset {} was read",
            stream.cfg.name, job.from
        )
    })
}

/// Frames the hot log's rows from `from` (or its floor, if higher) below `to`.
fn scan(reader: &BufferReader, from: u64, to: u64) -> Result<FrameBatch, String> {
    let mut builder: Option<FrameBatchBuilder> = None;
    reader
        .scan_with(from, to, REPLAY_CHUNK_ROWS, |offset, ts_us, payload| {
            let b = builder.get_or_insert_with(|| FrameBatchBuilder::new(offset, true, 64 * 1024));
            if b.next_seq() != offset {
                // a hole (retention): stop here; the session asks again from the next offset
                return ControlFlow::Break(());
            }
            b.push(payload, ts_us);
            if b.bytes() >= REPLAY_CHUNK_BYTES {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    Ok(builder
        .unwrap_or_else(|| FrameBatchBuilder::new(to, true, 0))
        .finish())
}
