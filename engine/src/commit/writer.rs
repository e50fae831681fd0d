//! The writer thread: sequencing, group commit, framing, and handing batches to the fan-out.
//!
//! In: [`WriterMsg`]s from any shard over one unbounded crossbeam channel per writer (the bound is
//! the per-stream `max_inbound` row count, enforced by the publishers before they send). The
//! writer blocks for the first message, then drains *everything queued* and commits each stream's
//! appends in ONE record (`corecast_storage::log::Buffer::append`: one `pwrite`, one `fdatasync`), stamping one `ts` per
//! publish frame. It frames the committed rows once ([`FrameBatchBuilder`]), sends the shared batch
//! to every shard, and only then answers the publishers: an ack means durable *and* handed to the
//! fan-out. Live-only streams skip the log and number rows with an internal sequence.
//!
//! Runs on its own blocking thread (one per shard): a commit's fdatasync never stalls an io_uring loop.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use corecast_storage::log::{AppendBatch, BatchOutcome, Buffer, Detached, Mark, PublisherSeq};

use crate::fanout::batch::{FrameBatch, FrameBatchBuilder};
use crate::registry::{now_us, StreamState, Streams};
use crate::shard::ShardMsg;

/// Rows one writer folds into one commit at most; the rest wait for the next one.
pub const MAX_ROWS_PER_COMMIT: usize = 65_536;

/// A message to a writer thread.
pub enum WriterMsg {
    /// Append one publish frame's rows.
    Append(Append),
    /// Read an exactly-once publisher's mark after everything queued before this message
    /// committed (a new claim's greeting includes the older connection's queued rows).
    Mark {
        /// Stream index.
        stream: usize,
        /// Publisher id.
        id: String,
        /// Where the mark goes.
        reply: flume::Sender<Option<Mark>>,
    },
    /// Take the hot-log segments wholly below `below` out of the log (the sealed tier holds
    /// their rows); the files themselves are deleted by the caller ([`Detached::delete`]).
    Evict {
        /// Stream index.
        stream: usize,
        /// Every row below it is recorded in a sealed segment.
        below: u64,
        /// What was taken out, or the error's text.
        reply: flume::Sender<Result<Detached, String>>,
    },
    /// Take over stream `stream`'s log (`None`: a live-only stream), created or started again
    /// by the control thread; answered on `done` once it is in place.
    Open {
        /// Stream index (hashes to this writer).
        stream: usize,
        /// The opened log, or `None` for a live-only stream.
        log: Option<Box<Buffer>>,
        /// Answered once the writer holds it.
        done: flume::Sender<()>,
    },
    /// Commit what is queued (the stream's writes are fenced before this is sent), then give
    /// up stream `stream`'s log (a stream stopped by the control thread); answered on `done`
    /// with the frontier it closed at and the log itself, which the control thread closes: a
    /// log's close joins its keeper thread (which may be in the middle of a spare's zeros) and
    /// closes its files, and none of that may hold up the commits of the writer's other streams.
    Close {
        /// Stream index.
        stream: usize,
        /// Answered with the end offset and the durable log (`None` for a live-only stream).
        done: flume::Sender<(u64, Option<Box<Buffer>>)>,
    },
    /// Commit what is queued, then exit.
    Stop,
}

/// One publish frame's validated rows.
pub struct Append {
    /// Stream index.
    pub stream: usize,
    /// The [`Stream::generation`](crate::registry::Stream::generation) the sender checked: a
    /// frame sent to a stream that was stopped and started again since is refused, never
    /// committed to the new log (nor counted against its `max_inbound`).
    pub generation: u64,
    /// The encoded rows back to back; row `i` ends at `ends[i]`.
    pub rows: Vec<u8>,
    /// End positions of the rows in `rows`.
    pub ends: Vec<u32>,
    /// Exactly-once publisher id and the first row's seq.
    pub publisher: Option<(String, u64)>,
    /// Where the outcome goes.
    pub reply: flume::Sender<AppendReply>,
}

impl Append {
    fn row_slices(&self) -> Vec<&[u8]> {
        let mut start = 0usize;
        self.ends
            .iter()
            .map(|&e| {
                let r = &self.rows[start..e as usize];
                start = e as usize;
                r
            })
            .collect()
    }
}

/// The outcome of one [`Append`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendReply {
    /// Committed: one offset per row (`None` for rows of a live-only stream, and for duplicates
    /// the dedupe window forgot); the first `dup` rows were duplicates.
    Ok {
        /// Offsets in row order.
        offsets: Vec<Option<u64>>,
        /// Leading duplicate rows.
        dup: usize,
    },
    /// Exactly-once seq beyond the next: nothing appended.
    Gap {
        /// The seq the mark expects next.
        expected: u64,
        /// The seq the frame carried.
        got: u64,
    },
    /// The transaction failed; nothing of it is visible.
    CommitFailed(String),
}

enum Log {
    Durable(Box<Buffer>),
    Live { next: u64 },
}

/// One writer thread's state: the logs of the streams it owns.
pub struct Writer {
    rx: crossbeam_channel::Receiver<WriterMsg>,
    logs: HashMap<usize, Log>,
    registry: Arc<Streams>,
    shards: Vec<flume::Sender<ShardMsg>>,
}

impl Writer {
    /// A writer over the opened `buffers` (durable streams it owns) and `live` stream indexes.
    pub fn new(
        rx: crossbeam_channel::Receiver<WriterMsg>,
        buffers: Vec<(usize, Buffer)>,
        live: Vec<usize>,
        registry: Arc<Streams>,
        shards: Vec<flume::Sender<ShardMsg>>,
    ) -> Writer {
        let mut logs = HashMap::new();
        for (i, b) in buffers {
            logs.insert(i, Log::Durable(Box::new(b)));
        }
        for i in live {
            logs.insert(i, Log::Live { next: 1 });
        }
        Writer {
            rx,
            logs,
            registry,
            shards,
        }
    }

    /// Runs until a [`WriterMsg::Stop`] arrives or every sender is gone.
    pub fn run(mut self) {
        let mut queued: Vec<Append> = Vec::new();
        while let Ok(first) = self.rx.recv() {
            let mut rows = 0usize;
            let mut next = Some(first);
            let mut stop = false;
            while let Some(msg) = next.take() {
                match msg {
                    WriterMsg::Append(a) => {
                        rows += a.ends.len();
                        queued.push(a);
                    }
                    WriterMsg::Mark { stream, id, reply } => {
                        self.commit(&mut queued);
                        let mark = match self.logs.get(&stream) {
                            Some(Log::Durable(b)) => b.publisher_mark(&id),
                            _ => None,
                        };
                        let _ = reply.send(mark);
                    }
                    WriterMsg::Evict {
                        stream,
                        below,
                        reply,
                    } => {
                        let detached = match self.logs.get_mut(&stream) {
                            Some(Log::Durable(b)) => {
                                b.detach_below(below).map_err(|e| e.to_string())
                            }
                            _ => Err(format!("stream {stream} keeps no log here")),
                        };
                        let _ = reply.send(detached);
                    }
                    WriterMsg::Open { stream, log, done } => {
                        let log = match log {
                            Some(b) => Log::Durable(b),
                            None => Log::Live { next: 1 },
                        };
                        let old = self.logs.insert(stream, log);
                        assert!(old.is_none(), "stream {stream} opened twice");
                        let _ = done.send(());
                    }
                    WriterMsg::Close { stream, done } => {
                        self.commit(&mut queued);
                        let closed = match self.logs.remove(&stream) {
                            Some(Log::Durable(b)) => (b.end_offset(), Some(b)),
                            Some(Log::Live { next }) => (next, None),
                            None => (0, None),
                        };
                        // if the control thread stopped waiting, the log is closed here
                        let _ = done.send(closed);
                    }
                    WriterMsg::Stop => stop = true,
                }
                if stop || rows >= MAX_ROWS_PER_COMMIT {
                    break;
                }
                next = self.rx.try_recv().ok();
            }
            self.commit(&mut queued);
            if stop {
                break;
            }
        }
        self.commit(&mut queued);
    }

    /// Commits `queued` (each stream's appends in one transaction) and answers every publisher.
    fn commit(&mut self, queued: &mut Vec<Append>) {
        if queued.is_empty() {
            return;
        }
        let mut by_stream: Vec<(usize, Vec<Append>)> = Vec::new();
        for a in queued.drain(..) {
            match by_stream.iter_mut().find(|(s, _)| *s == a.stream) {
                Some((_, v)) => v.push(a),
                None => by_stream.push((a.stream, vec![a])),
            }
        }
        for (stream, appends) in by_stream {
            self.commit_stream(stream, appends);
        }
    }

    fn commit_stream(&mut self, stream: usize, appends: Vec<Append>) {
        let st = self.registry.load().streams[stream].clone();
        let (appends, stale): (Vec<Append>, Vec<Append>) = appends
            .into_iter()
            .partition(|a| a.generation == st.generation);
        for a in stale {
            let _ = a.reply.send(AppendReply::CommitFailed(format!(
                "stream {} was stopped after this frame was checked",
                st.cfg.name
            )));
        }
        if appends.is_empty() {
            return;
        }
        let rows_total: usize = appends.iter().map(|a| a.ends.len()).sum();
        let bytes_total: usize = appends.iter().map(|a| a.rows.len()).sum();
        // the second fence (the publisher checked the state before sending): nothing is
        // appended to a stream that is not serving
        let refusal = match (st.state(), self.logs.get(&stream)) {
            (StreamState::Serving, Some(_)) => None,
            (StreamState::Serving, None) => Some("has no writer here"),
            (StreamState::Stopped, _) => Some("is stopped"),
            (StreamState::Retired, _) => Some("is retired"),
        };
        if let Some(why) = refusal {
            st.inbound.fetch_sub(rows_total, Ordering::AcqRel);
            for a in appends {
                let _ = a.reply.send(AppendReply::CommitFailed(format!(
                    "stream {} {why}",
                    st.cfg.name
                )));
            }
            return;
        }
        let log = self
            .logs
            .get_mut(&stream)
            .expect("checked above: the stream has a log here");
        let mut replies: Vec<AppendReply> = Vec::with_capacity(appends.len());
        let batch: Option<FrameBatch> = match log {
            Log::Live { next } => {
                let mut b = FrameBatchBuilder::new(*next, false, bytes_total + rows_total * 40);
                for a in &appends {
                    let ts = now_us();
                    for r in a.row_slices() {
                        b.push(r, ts);
                    }
                    replies.push(AppendReply::Ok {
                        offsets: vec![None; a.ends.len()],
                        dup: 0,
                    });
                }
                *next += rows_total as u64;
                Some(b.finish())
            }
            Log::Durable(buffer) => {
                let slices: Vec<Vec<&[u8]>> = appends.iter().map(|a| a.row_slices()).collect();
                let batches: Vec<AppendBatch<'_>> = appends
                    .iter()
                    .zip(&slices)
                    .map(|(a, rows)| AppendBatch {
                        rows,
                        publisher: a.publisher.as_ref().map(|(id, seq)| PublisherSeq {
                            id,
                            first_seq: *seq,
                        }),
                    })
                    .collect();
                let first = buffer.end_offset();
                let began = std::time::Instant::now();
                let appended = buffer.append(&batches);
                st.stats.commit_latency.observe(began.elapsed());
                match appended {
                    Ok(outcomes) => {
                        let mut b =
                            FrameBatchBuilder::new(first, true, bytes_total + rows_total * 40);
                        for ((outcome, rows), _a) in outcomes.iter().zip(&slices).zip(&appends) {
                            match outcome {
                                BatchOutcome::Appended {
                                    ts_us,
                                    first_offset,
                                    appended,
                                    dup_offsets,
                                } => {
                                    let dup = dup_offsets.len();
                                    debug_assert_eq!(*first_offset, first + b.len() as u64);
                                    for r in &rows[dup..dup + appended] {
                                        b.push(r, *ts_us);
                                    }
                                    let mut offsets = dup_offsets.clone();
                                    offsets.extend(
                                        (0..*appended as u64).map(|k| Some(first_offset + k)),
                                    );
                                    replies.push(AppendReply::Ok { offsets, dup });
                                }
                                BatchOutcome::Gap { expected, got } => {
                                    replies.push(AppendReply::Gap {
                                        expected: *expected,
                                        got: *got,
                                    })
                                }
                            }
                        }
                        (!b.is_empty()).then(|| b.finish())
                    }
                    Err(e) => {
                        st.stats.commit_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(stream = %st.cfg.name, "{e}");
                        // the reply names no path of the server (the log line above does)
                        let msg = e.public();
                        replies.extend(
                            appends
                                .iter()
                                .map(|_| AppendReply::CommitFailed(msg.clone())),
                        );
                        None
                    }
                }
            }
        };
        if let Some(batch) = batch {
            let n = batch.len() as u64;
            let end = batch.end();
            let batch = Arc::new(batch);
            for shard in &self.shards {
                let _ = shard.send(ShardMsg::Batch {
                    stream,
                    batch: batch.clone(),
                });
            }
            st.end.store(end, Ordering::Release);
            st.stats.rows_in.fetch_add(n, Ordering::Relaxed);
            // the keyed state, off this thread: waits only while the state inbox is full
            if let Some(k) = &st.keyed {
                k.feed(batch);
            }
        }
        st.inbound.fetch_sub(rows_total, Ordering::AcqRel);
        for (a, r) in appends.into_iter().zip(replies) {
            let _ = a.reply.send(r);
        }
    }
}
