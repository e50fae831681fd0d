//! Replay from the sealed tier: one job's chunk of a Parquet segment, as frames.
//!
//! In: a recorded segment, an offset range inside it, the subscriber's `where=` terms. Out: a
//! [`FrameBatch`] of contiguous offsets and where the next job starts. Runs on a reader-pool
//! thread.
//!
//! Opening a segment reads its footer and page index, and a page decodes thousands of rows; a
//! job takes ≤ 4,096 of them. So a read that stops mid-segment is kept open ([`SealedReads`],
//! shared by the pool's threads, at most [`MAX_OPEN`] of them) with the rows it decoded but did
//! not send, keyed by the offset it stopped at: the subscriber's next job continues it instead of
//! opening and decoding again.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use corecast_storage::schema::RowCodec;
use corecast_storage::tier::{ColumnPredicate, ReadOptions, RowChunk, SegmentEntry, SegmentReader};

use super::{REPLAY_CHUNK_BYTES, REPLAY_CHUNK_ROWS};
use crate::fanout::batch::{FrameBatch, FrameBatchBuilder};

/// Segment reads kept open between jobs, across every stream.
pub const MAX_OPEN: usize = 64;

/// One job's request on one segment.
pub struct SealedRead<'a> {
    /// Stream index.
    pub stream: usize,
    /// The segment holding `from`.
    pub entry: &'a SegmentEntry,
    /// Its file.
    pub path: &'a Path,
    /// First offset wanted.
    pub from: u64,
    /// End offset (exclusive), at most the segment's end.
    pub to: u64,
    /// Row groups these exclude are skipped.
    pub prune: &'a [ColumnPredicate],
}

/// A read stopped mid-segment.
struct Open {
    stream: usize,
    file: String,
    prune: Vec<ColumnPredicate>,
    /// The offset the next job must start at to continue this read.
    next: u64,
    reader: SegmentReader,
    /// Rows decoded but not sent yet: the chunk and the index of its first unsent row.
    pending: Option<(RowChunk, usize)>,
}

/// The open reads, shared by the pool.
#[derive(Default)]
pub struct SealedReads {
    open: Mutex<VecDeque<Open>>,
    /// `(stream, file)` whose CRC32C matched the index's since start: checked once per file
    /// (Parquet pages carry no checksum of their own, so without it a flipped byte would be
    /// served as a wrong value).
    verified: Mutex<HashSet<(usize, String)>>,
}

impl SealedReads {
    /// Reads `request`: `Ok(Some((batch, resume)))`, or `Ok(None)` if the file is gone (dropped
    /// by retention since the caller looked at the segment list).
    pub fn read(
        &self,
        codec: &RowCodec,
        request: SealedRead<'_>,
    ) -> Result<Option<(FrameBatch, u64)>, String> {
        let cached = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.iter()
                .position(|o| {
                    o.stream == request.stream
                        && o.file == request.entry.file
                        && o.next == request.from
                        && o.prune == request.prune
                })
                .and_then(|i| open.remove(i))
        };
        let mut read = match cached {
            Some(read) => read,
            None => {
                if let Some(want) = request.entry.crc32c {
                    let key = (request.stream, request.entry.file.clone());
                    let known = self
                        .verified
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(&key);
                    if !known {
                        match corecast_storage::tier::file_crc32c(request.path) {
                            Ok(got) if got == want => {
                                self.verified
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .insert(key);
                            }
                            Ok(got) => {
                                return Err(format!(
                                    "{}: CRC32C {got:08x}, the index recorded {want:08x}: the file was damaged after it was sealed; restore it from a copy",
                                    request.path.display()
                                ))
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                            Err(e) => {
                                return Err(format!("{}: reading: {e}", request.path.display()))
                            }
                        }
                    }
                }
                let file = match File::open(request.path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(format!("{}: opening: {e}", request.path.display())),
                };
                let options = ReadOptions {
                    chunk_rows: REPLAY_CHUNK_ROWS,
                    prune: request.prune.to_vec(),
                    ..ReadOptions::default()
                };
                let range = request.from..request.entry.end_offset();
                let reader = SegmentReader::open(file, codec, range, &options)
                    .map_err(|e| format!("{}: {e}", request.path.display()))?;
                Open {
                    stream: request.stream,
                    file: request.entry.file.clone(),
                    prune: request.prune.to_vec(),
                    next: request.from,
                    reader,
                    pending: None,
                }
            }
        };
        let (batch, resume, exhausted) = fill(&mut read, request.from, request.to)
            .map_err(|e| format!("{}: {e}", request.path.display()))?;
        if !exhausted {
            read.next = resume;
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            if open.len() >= MAX_OPEN {
                open.pop_front();
            }
            open.push_back(read);
        }
        Ok(Some((batch, resume)))
    }
}

/// Frames rows of `read` from `from` below `to`; returns the batch, where the next job starts,
/// and whether the segment's rows are all consumed.
fn fill(
    read: &mut Open,
    from: u64,
    to: u64,
) -> Result<(FrameBatch, u64, bool), corecast_storage::tier::TierError> {
    let mut builder: Option<FrameBatchBuilder> = None;
    loop {
        let (chunk, start) = match read.pending.take() {
            Some(p) => p,
            None => match read.reader.next_chunk()? {
                Some(chunk) => (chunk, 0),
                None => {
                    let expected = builder.as_ref().map_or(from, |b| b.next_seq());
                    if read.prune.is_empty() && expected < to {
                        return Err(corecast_storage::tier::TierError::SchemaMismatch(format!(
                            "the segment ends at offset {} but the index recorded rows up to {}",
                            expected.saturating_sub(1),
                            to - 1
                        )));
                    }
                    // every row left was in row groups or pages the range or the filter excluded
                    let resume = builder.as_ref().map_or(to, |b| b.next_seq().max(to));
                    let batch = builder
                        .unwrap_or_else(|| FrameBatchBuilder::new(to, true, 0))
                        .finish();
                    return Ok((batch, resume, true));
                }
            },
        };
        for i in start..chunk.len() {
            let (offset, ts, row) = chunk.row(i);
            if offset < from {
                continue;
            }
            if read.prune.is_empty() {
                // without a filter nothing is skipped: every offset of the range must be there
                let expected = builder.as_ref().map_or(from, |b| b.next_seq());
                if offset != expected && offset < to {
                    return Err(corecast_storage::tier::TierError::SchemaMismatch(format!(
                        "offset {offset} where {expected} was expected: the segment does not hold what the index recorded"
                    )));
                }
            }
            let stop = offset >= to
                || builder.as_ref().is_some_and(|b| {
                    b.next_seq() != offset
                        || b.len() >= REPLAY_CHUNK_ROWS
                        || b.bytes() >= REPLAY_CHUNK_BYTES
                });
            if stop {
                // rows between the batch and `offset` (if any) were skipped by the filter's
                // statistics: the next job starts at `offset`
                let resume = offset
                    .min(to)
                    .max(builder.as_ref().map_or(from, |b| b.next_seq()));
                let batch = builder
                    .unwrap_or_else(|| FrameBatchBuilder::new(resume, true, 0))
                    .finish();
                read.pending = Some((chunk, i));
                return Ok((batch, resume, false));
            }
            builder
                .get_or_insert_with(|| FrameBatchBuilder::new(offset, true, 64 * 1024))
                .push(row, ts);
        }
    }
}
