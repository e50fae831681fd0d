//! The reader pool: blocking threads that scan the log below the rings and return ready-made
//! frames.
//!
//! In: [`ReplayJob`]s from any shard (a crossbeam channel shared by the pool). Each thread keeps
//! one read connection per stream (`corecast_storage::log::BufferReader`, WAL: readers never block
//! the writer), scans `[from, to)` up to `limit` rows, frames them exactly as the writer frames live
//! rows (the stored payload is the wire row, so replay bytes equal live bytes), and answers over a
//! one-shot flume channel that the session awaits on its io_uring loop.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::thread::JoinHandle;

use corecast_storage::log::BufferReader;

use crate::fanout::batch::{FrameBatch, FrameBatchBuilder};
use crate::registry::Registry;

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
    /// Where the frames go: a batch of contiguous offsets starting at the first held offset
    /// ≥ `from` (empty when the log holds nothing in the range), or the storage error's text.
    pub reply: flume::Sender<Result<FrameBatch, String>>,
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
    pub fn start(threads: usize, registry: Arc<Registry>) -> ReaderPool {
        let (tx, rx) = crossbeam_channel::unbounded::<PoolMsg>();
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                let registry = registry.clone();
                std::thread::Builder::new()
                    .name(format!("corecast-reader-{i}"))
                    .spawn(move || reader_loop(rx, registry))
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

fn reader_loop(rx: crossbeam_channel::Receiver<PoolMsg>, registry: Arc<Registry>) {
    let mut readers: HashMap<usize, BufferReader> = HashMap::new();
    while let Ok(PoolMsg::Job(job)) = rx.recv() {
        let res = scan(&mut readers, &registry, &job);
        let _ = job.reply.send(res);
    }
}

fn scan(
    readers: &mut HashMap<usize, BufferReader>,
    registry: &Registry,
    job: &ReplayJob,
) -> Result<FrameBatch, String> {
    let stream = &registry.streams[job.stream];
    let reader = match readers.entry(job.stream) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(BufferReader::open(&stream.dir).map_err(|e| e.to_string())?)
        }
    };
    let mut builder: Option<FrameBatchBuilder> = None;
    reader
        .scan_with(
            job.from,
            job.to,
            REPLAY_CHUNK_ROWS,
            |offset, ts_us, payload| {
                let b =
                    builder.get_or_insert_with(|| FrameBatchBuilder::new(offset, true, 64 * 1024));
                if b.next_seq() != offset {
                    // a hole (retention): stop here; the session asks again from the next offset
                    return ControlFlow::Break(());
                }
                b.push(payload, ts_us);
                if b.bytes() >= REPLAY_CHUNK_BYTES {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            },
        )
        .map_err(|e| e.to_string())?;
    Ok(builder
        .unwrap_or_else(|| FrameBatchBuilder::new(job.to, true, 0))
        .finish())
}
