//! The read side of a stream's hot log: [`BufferReader`], for replay scans, end offsets and
//! publisher marks.
//!
//! In: offset ranges asked for by subscriber sessions (replay below the ring), the HTTP pull API
//! and segment sealing. Out: committed rows `(offset, ts_us, payload)` in offset order. Runs on
//! the reader pool's blocking threads, one reader per thread.
//!
//! A reader of a stream whose writer is open in this process (the broker's case, and
//! [`Buffer::reader`](super::Buffer::reader)) shares the writer's view: it reads only bytes
//! whose `fdatasync` has returned, takes a read lock only to find where to start, and never
//! blocks the writer. A reader opened on a stream no writer in this process holds recovers its
//! own view, read-only, as of when it was opened (a closed log, a tool, a test).
//!
//! Every record read is checked against its CRC32C: damage is an error, never a wrong row.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::buffer::{uuid_bytes, LOG_DIR_NAME};
use super::error::StorageError;
use super::marks::Mark;
use super::meta::MetaDb;
use super::recovery::{self, Mode};
use super::segment::{Chunked, SEGMENT_HEADER_LEN};
use super::view::{self, Shared, View};

/// One committed row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// Its offset.
    pub offset: u64,
    /// Its batch's timestamp, µs since the Unix epoch.
    pub ts_us: i64,
    /// The encoded row, byte for byte as appended.
    pub payload: Vec<u8>,
}

/// The size of a hot log, as [`BufferReader::extent`] reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotExtent {
    /// Segment files.
    pub segments: usize,
    /// Durable record bytes in them (headers and rows; not the preallocated rest).
    pub bytes: u64,
    /// Record bytes from the asked offset on.
    pub bytes_from: u64,
    /// The first offset held (`end` when none).
    pub floor: u64,
    /// The next offset to be assigned.
    pub end: u64,
    /// The first offset of the newest segment (`end` when there is none): the segment commits
    /// append to.
    pub newest_first: u64,
}

/// A reader of a stream's hot log.
#[derive(Debug)]
pub struct BufferReader {
    shared: Arc<Shared>,
}

impl BufferReader {
    /// Opens a reader on the stream in `dir`, which a [`Buffer`](super::Buffer) must have
    /// created (a reader never creates a stream).
    pub fn open(dir: &Path) -> Result<BufferReader, StorageError> {
        if let Some(shared) = view::attached(dir) {
            return Ok(BufferReader { shared });
        }
        let (meta_db, meta) = MetaDb::open(dir, None)?;
        let snapshot = meta_db.marks()?;
        let stream_uuid = uuid_bytes(&meta.stream_id, meta_db.path())?;
        let recovered = recovery::recover(
            &dir.join(LOG_DIR_NAME),
            &meta,
            snapshot,
            stream_uuid,
            Mode::Read,
        )?;
        Ok(BufferReader {
            shared: Arc::new(Shared {
                dir: dir.to_owned(),
                stream_id: meta.stream_id,
                schema_json: meta.schema_json,
                view: RwLock::new(View {
                    segments: recovered.segments,
                    floor: recovered.floor,
                    end: recovered.end,
                }),
                marks: Mutex::new(recovered.marks),
            }),
        })
    }

    /// A reader on a writer's view.
    pub(crate) fn attach(shared: Arc<Shared>) -> BufferReader {
        BufferReader { shared }
    }

    /// The stream's id (see [`Buffer::stream_id`](super::Buffer::stream_id)).
    pub fn stream_id(&self) -> &str {
        &self.shared.stream_id
    }

    /// The schema text stored at creation.
    pub fn schema_json(&self) -> Option<&str> {
        self.shared.schema_json.as_deref()
    }

    /// The next offset the writer will assign, as of the last durable commit: 1 on an empty log.
    pub fn end_offset(&self) -> Result<u64, StorageError> {
        Ok(self.shared.offsets().1)
    }

    /// The earliest offset still held in the hot log (`None` when it holds no row).
    pub fn earliest(&self) -> Result<Option<u64>, StorageError> {
        Ok(self.shared.view.read().expect("view lock").earliest())
    }

    /// What the hot log holds now: its segment files, their durable record bytes, and the
    /// bytes of the records from the one holding `from` on (to within one sparse-index step,
    /// 64 KiB): how much a sealer starting at `from` has to cut.
    pub fn extent(&self, from: u64) -> HotExtent {
        let view = self.shared.view.read().expect("view lock");
        let mut extent = HotExtent {
            segments: view.segments.len(),
            floor: view.floor,
            end: view.end,
            newest_first: view.segments.last().map_or(view.end, |s| s.first_offset),
            ..HotExtent::default()
        };
        for segment in &view.segments {
            let bytes = segment.end_pos.saturating_sub(SEGMENT_HEADER_LEN);
            extent.bytes += bytes;
            if segment.end_offset > from {
                extent.bytes_from += if segment.first_offset >= from {
                    bytes
                } else {
                    segment.end_pos.saturating_sub(segment.start_for(from))
                };
            }
        }
        extent
    }

    /// Up to `limit` committed rows with `from <= offset < to_exclusive`, in offset order.
    pub fn scan(
        &self,
        from: u64,
        to_exclusive: u64,
        limit: usize,
    ) -> Result<Vec<StoredRow>, StorageError> {
        let mut rows = Vec::new();
        self.scan_with(from, to_exclusive, limit, |offset, ts_us, payload| {
            rows.push(StoredRow {
                offset,
                ts_us,
                payload: payload.to_vec(),
            });
            ControlFlow::Continue(())
        })?;
        Ok(rows)
    }

    /// Like [`scan`](Self::scan), but hands each row to `visit(offset, ts_us, payload)` without
    /// copying it; returns how many rows were visited. The payload borrow ends with the call.
    /// `visit` returns [`ControlFlow::Break`] to end the scan after that row (a caller bounding
    /// its chunk by bytes, say): no further record is read.
    pub fn scan_with<F>(
        &self,
        from: u64,
        to_exclusive: u64,
        limit: usize,
        mut visit: F,
    ) -> Result<usize, StorageError>
    where
        F: FnMut(u64, i64, &[u8]) -> ControlFlow<()>,
    {
        let mut visited = 0;
        let mut next = from;
        while visited < limit && next < to_exclusive {
            let start = {
                let view = self.shared.view.read().expect("view lock");
                next = next.max(view.floor);
                view.start(next)
            };
            let Some(start) = start else {
                return Ok(visited);
            };
            let mut chunked = Chunked::new(&start.file, start.end_pos);
            let mut pos = start.pos;
            let corrupt = |pos: u64, detail: String| StorageError::Corrupt {
                path: start.path.to_path_buf(),
                detail: format!("the record at byte {pos}: {detail}"),
            };
            while pos < start.end_pos {
                let record = chunked
                    .record_at(pos)
                    .map_err(|source| StorageError::Io {
                        path: start.path.to_path_buf(),
                        op: "reading a segment",
                        source,
                    })?
                    .map_err(|error| corrupt(pos, error.to_string()))?;
                let header = record.header;
                pos += header.total_len();
                if header.end_offset() <= next {
                    continue;
                }
                if header.first_offset > next {
                    return Err(corrupt(
                        pos - header.total_len(),
                        format!(
                            "starts at offset {}, but offset {next} comes first",
                            header.first_offset
                        ),
                    ));
                }
                for (offset, row) in (header.first_offset..).zip(record.rows()) {
                    let row = row.map_err(|malformed| corrupt(pos, malformed.0))?;
                    if offset < next {
                        continue;
                    }
                    if offset >= to_exclusive {
                        return Ok(visited);
                    }
                    let flow = visit(offset, header.ts_us, row);
                    visited += 1;
                    next = offset + 1;
                    if visited == limit || flow.is_break() {
                        return Ok(visited);
                    }
                }
            }
            if next < start.end_offset {
                // the segment's durable end was reached before its end offset: cannot be
                return Err(corrupt(
                    pos,
                    format!("the segment ends before offset {}", start.end_offset),
                ));
            }
            next = next.max(start.end_offset);
        }
        Ok(visited)
    }

    /// Publisher `id`'s committed mark, `None` if it never landed a row.
    pub fn publisher_mark(&self, id: &str) -> Result<Option<Mark>, StorageError> {
        Ok(self
            .shared
            .marks
            .lock()
            .expect("marks lock")
            .get(id)
            .copied())
    }

    /// The stream directory.
    pub fn dir(&self) -> PathBuf {
        self.shared.dir.clone()
    }
}
