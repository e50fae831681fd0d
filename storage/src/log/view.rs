//! What readers see of a hot log: its segments with their durable ends and sparse indexes, the
//! floor and the durable end offset, shared between the writer and every reader of the stream
//! in this process.
//!
//! The writer updates the view after each commit's `fdatasync` returned, under a write lock held
//! for a few assignments; readers take the read lock only to find where to start and where the
//! durable bytes end, then `pread` without it. So a reader never sees a row before it is durable,
//! never waits for a commit, and never makes the writer wait for a read. A segment's file handle
//! is shared (`Arc<File>`): a reader inside a segment that eviction deletes finishes its read on
//! the unlinked file.
//!
//! [`attached`] finds the view of a writer open in this process for a directory, so that
//! [`BufferReader::open`](super::BufferReader::open) by path reads the writer's durable state.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};

use super::marks::Mark;
use super::segment::SEGMENT_HEADER_LEN;

/// One segment as readers see it.
#[derive(Debug, Clone)]
pub(crate) struct SegmentView {
    pub(crate) first_offset: u64,
    pub(crate) path: Arc<Path>,
    pub(crate) file: Arc<File>,
    /// The offset after its last durable row.
    pub(crate) end_offset: u64,
    /// The position after its last durable record.
    pub(crate) end_pos: u64,
    /// `(first offset, position)` of a record every `SPARSE_EVERY_BYTES`, ascending.
    pub(crate) sparse: Vec<(u64, u64)>,
}

impl SegmentView {
    /// The position of the last indexed record starting at or before `offset`.
    pub(crate) fn start_for(&self, offset: u64) -> u64 {
        let index = self.sparse.partition_point(|&(first, _)| first <= offset);
        match index {
            0 => SEGMENT_HEADER_LEN,
            i => self.sparse[i - 1].1,
        }
    }
}

/// The segments and offsets of one hot log.
#[derive(Debug, Default)]
pub(crate) struct View {
    /// In offset order, contiguous: each starts where the one before ends.
    pub(crate) segments: Vec<SegmentView>,
    /// The first offset held (the end when no row is held).
    pub(crate) floor: u64,
    /// The next offset to be assigned: every row below it is durable.
    pub(crate) end: u64,
}

/// Where a read of offsets from some `from` starts: a segment, a position in it, and how far
/// its durable bytes go.
#[derive(Debug, Clone)]
pub(crate) struct ReadStart {
    pub(crate) file: Arc<File>,
    pub(crate) path: Arc<Path>,
    pub(crate) pos: u64,
    pub(crate) end_pos: u64,
    pub(crate) end_offset: u64,
}

impl View {
    /// The first offset held, `None` when the log holds no row.
    pub(crate) fn earliest(&self) -> Option<u64> {
        (self.floor < self.end).then_some(self.floor)
    }

    /// Where to read `from` (clamped up to the floor) on; `None` past the end.
    pub(crate) fn start(&self, from: u64) -> Option<ReadStart> {
        let from = from.max(self.floor);
        if from >= self.end {
            return None;
        }
        let index = self
            .segments
            .partition_point(|segment| segment.first_offset <= from);
        let segment = &self.segments[index.checked_sub(1)?];
        if from >= segment.end_offset {
            // only the newest segment can end before `end`: between a roll and its first
            // record there is none
            return None;
        }
        Some(ReadStart {
            file: Arc::clone(&segment.file),
            path: Arc::clone(&segment.path),
            pos: segment.start_for(from),
            end_pos: segment.end_pos,
            end_offset: segment.end_offset,
        })
    }
}

/// The view plus what never changes, shared by a writer and its readers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) stream_id: String,
    pub(crate) schema_json: Option<String>,
    pub(crate) view: RwLock<View>,
    /// Every publisher's committed mark.
    pub(crate) marks: Mutex<HashMap<String, Mark>>,
}

impl Shared {
    /// A consistent copy of the floor and end.
    pub(crate) fn offsets(&self) -> (u64, u64) {
        let view = self.view.read().expect("view lock");
        (view.floor, view.end)
    }
}

/// Views of the writers open in this process, by canonical stream directory.
static WRITERS: Mutex<Vec<(PathBuf, Weak<Shared>)>> = Mutex::new(Vec::new());

/// Registers the view of a writer that just opened `dir`.
pub(crate) fn register(shared: &Arc<Shared>) {
    let key = canonical(&shared.dir);
    let mut writers = WRITERS.lock().expect("writers lock");
    writers.retain(|(dir, weak)| weak.strong_count() > 0 && *dir != key);
    writers.push((key, Arc::downgrade(shared)));
}

/// The view of the writer open on `dir` in this process, if there is one.
pub(crate) fn attached(dir: &Path) -> Option<Arc<Shared>> {
    let key = canonical(dir);
    let writers = WRITERS.lock().expect("writers lock");
    writers
        .iter()
        .find(|(d, _)| *d == key)
        .and_then(|(_, weak)| weak.upgrade())
}

fn canonical(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned())
}
