//! The writer of a stream's hot log: [`Buffer`] opens (or creates) `<stream>/` and group-commits
//! batches of already-encoded rows into its segment files.
//!
//! In: batches drained from the owner's writer queue, each a slice of encoded rows and, on an
//! exactly-once connection, the publisher id and the seq of its first row. Out: per batch, the
//! offsets it got (new rows plus the originals of leading duplicates) or a `gap` refusal; or, for
//! the whole commit, [`CommitFailed`]. Runs on the owner shard's blocking writer thread
//! (ARCHITECTURE.md, "Threads"): a commit waits for an `fdatasync`.
//!
//! One commit is ONE record ([`super::record`]: the rows, their `ts`, the marks the commit moved)
//! appended to the newest segment with ONE `pwrite` and made durable with ONE `fdatasync` before
//! this returns; readers see it only then. Segments are preallocated, so that `fdatasync` has no
//! file size to flush; when the record does not fit, the writer rolls: it writes the segment
//! header and the record into the spare file the keeper thread preallocated ([`super::keeper`]),
//! syncs it, and renames it to its segment name. Offsets start at 1, are contiguous and are never
//! reused, even when every segment is evicted (`meta.db` keeps the floor and the frontier). All
//! in-memory state changed by a commit is staged and applied only after the `fdatasync`
//! returned, so after a failed commit a retry of the same batches is exact.
//!
//! A failed write or `fdatasync` leaves the log as before the commit: the record's bytes are
//! overwritten with zeros. After a failed `fdatasync` the kernel may have dropped dirty pages and
//! marked them clean (PostgreSQL's "fsyncgate", 2018), so the newest segment is not trusted again
//! until it has been re-read from a fresh descriptor and checked record by record: the next commit
//! does that first, and fails too if it cannot.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::error::{CommitFailed, StorageError};
use super::keeper::{self, Keeper, KeeperMsg};
use super::marks::{Judgement, Mark, Marks, PublisherState};
use super::meta::{MetaDb, META_FILE_NAME};
use super::reader::BufferReader;
use super::record::{self, RecordBuilder};
use super::recovery::{self, Mode};
use super::segment::{self, SegmentHeader, DEFAULT_SEGMENT_BYTES, SEGMENT_HEADER_LEN};
use super::view::{self, SegmentView, Shared, View};

/// The lock file inside a stream's directory; held (`flock`) by the one [`Buffer`] that writes
/// the stream, released by the kernel when that process dies.
pub const LOCK_FILE_NAME: &str = "writer.lock";

/// The directory of segment files inside a stream's directory.
pub const LOG_DIR_NAME: &str = "log";

/// A spare gets its zeros written when the current segment's records average less than this;
/// for larger records (bulk ingest: megabytes a commit) it is only `fallocate`d. A small commit
/// into unwritten extents makes its `fdatasync` journal their conversion too (a 10 KiB commit
/// touches three new blocks: 53–58% of the one-`fdatasync` bound against 96–108% into zeros), but
/// a commit of many blocks converts them in one journal update, far less than writing every
/// byte twice: with zeros, ingest at 1M rows/s was half zeros on the disk.
pub const ZERO_FILL_BELOW: u64 = 256 << 10;

/// The longest a spare's zeros are spread over: a quiet stream's next segment is still ready
/// within this long of being asked for, however slowly the current one fills.
pub const SPARE_PACE_MAX: Duration = Duration::from_secs(30);

/// How a hot log is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Bytes each segment file is preallocated to ([`DEFAULT_SEGMENT_BYTES`]); a commit larger
    /// than that gets a segment of its own, as large as it needs.
    pub segment_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// The seq of an exactly-once batch: who sent it and the seq of its first row (≥ 1; rows take
/// `first_seq`, `first_seq + 1`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherSeq<'a> {
    /// The publisher id (`publisher=` on the connection).
    pub id: &'a str,
    /// The seq of the batch's first row; at least 1 (the frame decoder refuses 0).
    pub first_seq: u64,
}

/// One publisher frame's rows, queued for commit. `R` is any owned or borrowed byte row
/// (`&[u8]`, `Vec<u8>`, `bytes::Bytes`), so a queue of rows needs no copying to be appended.
#[derive(Debug, Clone, Copy)]
pub struct AppendBatch<'a, R = &'a [u8]> {
    /// The rows, each already validated and encoded (the bytes stored and replayed verbatim).
    pub rows: &'a [R],
    /// `Some` on an exactly-once connection.
    pub publisher: Option<PublisherSeq<'a>>,
}

impl<'a, R> AppendBatch<'a, R> {
    /// A batch from a plain (not exactly-once) publisher.
    pub fn plain(rows: &'a [R]) -> Self {
        AppendBatch {
            rows,
            publisher: None,
        }
    }

    /// A batch from exactly-once publisher `id` whose first row has seq `first_seq`.
    pub fn exactly_once(rows: &'a [R], id: &'a str, first_seq: u64) -> Self {
        AppendBatch {
            rows,
            publisher: Some(PublisherSeq { id, first_seq }),
        }
    }
}

/// What became of one batch of a group commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// The batch is in the log: its leading duplicates (exactly-once only) were already there,
    /// the rest were appended at `first_offset..first_offset + appended`.
    Appended {
        /// The batch's timestamp, µs since the Unix epoch, stamped by the writer (one per commit,
        /// so every batch of a commit has the same; non-decreasing within a process).
        ts_us: i64,
        /// The offset of the first newly appended row. When `appended` is 0 (every row was a
        /// duplicate) this is the end offset at that point and names no row.
        first_offset: u64,
        /// How many rows were appended.
        appended: usize,
        /// One entry per leading duplicate row: the offset it originally landed at, or `None`
        /// when the dedupe window no longer remembers it (older than 64 commits of this
        /// publisher, or landed before a restart). Empty outside exactly-once.
        dup_offsets: Vec<Option<u64>>,
    },
    /// Exactly-once seq beyond the next one: nothing appended, the mark did not move.
    Gap {
        /// The seq the mark expects next (`last_seq + 1`).
        expected: u64,
        /// The batch's first seq.
        got: u64,
    },
}

impl BatchOutcome {
    /// The `ok` list of the reply (PROTOCOL.md §7): the duplicates' original offsets, then the
    /// new ones. `None` for a gap.
    pub fn offsets(&self) -> Option<Vec<Option<u64>>> {
        match self {
            BatchOutcome::Appended {
                first_offset,
                appended,
                dup_offsets,
                ..
            } => {
                let mut offsets = Vec::with_capacity(dup_offsets.len() + appended);
                offsets.extend_from_slice(dup_offsets);
                offsets.extend((0..*appended as u64).map(|i| Some(first_offset + i)));
                Some(offsets)
            }
            BatchOutcome::Gap { .. } => None,
        }
    }
}

/// What opening the log found and did, for the start-up log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Rows converted from a format-2 SQLite `buffer.db` (0 when there was none).
    pub converted_rows: u64,
    /// A torn tail overwritten: the segment, the byte it started at, the bytes cleared.
    pub torn_tail: Option<(PathBuf, u64, u64)>,
    /// Files removed: segments wholly below the floor, temporary files.
    pub swept: Vec<PathBuf>,
    /// Segment files held.
    pub segments: usize,
}

/// What [`Buffer::evict_below`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Segment files deleted.
    pub segments: usize,
    /// Rows they held.
    pub rows: u64,
    /// The hot log's floor afterwards (the first offset it holds, or the end offset).
    pub floor: u64,
}

/// Segments [`Buffer::detach_below`] took out of the hot log, whose files are still to delete.
#[derive(Debug)]
#[must_use = "the files stay on disk until delete() (or the next open) removes them"]
pub struct Detached {
    /// What was evicted.
    pub evicted: Evicted,
    files: Vec<PathBuf>,
    log_dir: PathBuf,
}

impl Detached {
    /// Deletes the files and syncs the log directory.
    pub fn delete(self) -> Result<(), StorageError> {
        if self.files.is_empty() {
            return Ok(());
        }
        for path in &self.files {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io(path, "deleting an evicted segment")(e)),
            }
        }
        segment::sync_dir(&self.log_dir)
            .map_err(StorageError::io(&self.log_dir, "syncing the log directory"))
    }
}

/// An I/O failure the next write or sync pretends to meet, for tests of the failure paths
/// (a full disk, an `fdatasync` that reports EIO). Not part of the supported API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next record's `pwrite` fails with this `errno`.
    Write(i32),
    /// The next `fdatasync` of a record fails with this `errno`.
    Sync(i32),
    /// Re-reading the segment after a failed sync fails with this `errno`.
    Recheck(i32),
}

/// The segment being appended to.
#[derive(Debug)]
struct Active {
    first_offset: u64,
    path: Arc<Path>,
    file: Arc<File>,
    /// Where the next record goes.
    pos: u64,
    /// The file's preallocated length.
    capacity: u64,
    /// Position of the newest sparse-index entry.
    last_sparse_pos: u64,
    /// When this writer started appending to it (a recovered segment: when it was opened), and
    /// at which position: the rate the spare's pacing is worked out from.
    since: (Instant, u64),
    /// Records this writer appended to it since then: with the bytes, their average size, which
    /// says whether the next spare needs its zeros written ([`ZERO_FILL_BELOW`]).
    records: u64,
}

/// The writer of one stream's hot log. One per stream (enforced with a lock file), owned by the
/// owner shard's writer thread.
#[derive(Debug)]
pub struct Buffer {
    shared: Arc<Shared>,
    meta: MetaDb,
    // Dropped before the lock, after the files it works on are no longer written.
    keeper: Keeper,
    dir: PathBuf,
    log_dir: PathBuf,
    options: LogOptions,
    stream_uuid: [u8; 16],
    created_at_us: i64,
    active: Option<Active>,
    /// A preallocated spare, for the next roll.
    spare: Option<File>,
    /// A spare was asked of the keeper and not yet received.
    spare_asked: bool,
    /// The next offset to assign.
    end_offset: u64,
    /// The last `ts` stamped (or recovered), so stamps never go backwards within a process.
    last_ts_us: i64,
    marks: Marks,
    record: RecordBuilder,
    /// Set after a failed `fdatasync` (or a rollback that could not be written): why the newest
    /// segment must be re-read before the next commit.
    untrusted: Option<String>,
    /// Commits that failed since open.
    failures: u64,
    faults: VecDeque<Fault>,
    report: OpenReport,
    // Last: released once everything above is closed.
    _lock: File,
}

/// In-memory changes of one commit, applied to the [`Buffer`] only once it is durable.
struct Staged<'b> {
    end_offset: u64,
    /// Publishers judged in this commit: their state before it and as tentatively advanced.
    publishers: HashMap<&'b str, (Mark, PublisherState)>,
}

impl Buffer {
    /// [`Buffer::open_with`] with the default [`LogOptions`].
    pub fn open(dir: &Path, schema_json: Option<&str>) -> Result<Buffer, StorageError> {
        Buffer::open_with(dir, schema_json, LogOptions::default())
    }

    /// Opens the stream in `dir`, creating the directory, `meta.db` and `log/` if absent. A new
    /// stream mints its `stream_id` (UUID v4) and stores `schema_json` and its creation time;
    /// these never change afterwards. A format-2 SQLite `buffer.db` found there (corecast before
    /// segment files) is converted in place, once ([`OpenReport::converted_rows`]).
    ///
    /// On reopen the log is recovered (see the `recovery` module): a torn tail is cleared, damage
    /// anywhere else is [`StorageError::Corrupt`] naming the file and the byte, marks are rebuilt.
    /// If `schema_json` is `Some` and differs (byte for byte) from the stored schema, this returns
    /// [`StorageError::SchemaMismatch`] naming both and leaves the stream untouched; `None` accepts
    /// whatever is stored (read it with [`Buffer::schema_json`]).
    ///
    /// Fails with [`StorageError::Locked`] while another `Buffer` writes the same stream.
    pub fn open_with(
        dir: &Path,
        schema_json: Option<&str>,
        options: LogOptions,
    ) -> Result<Buffer, StorageError> {
        let options = LogOptions {
            segment_bytes: record::padded(options.segment_bytes.max(segment::MIN_SEGMENT_BYTES)),
        };
        std::fs::create_dir_all(dir)
            .map_err(StorageError::io(dir, "creating the stream directory"))?;
        let lock = take_writer_lock(&dir.join(LOCK_FILE_NAME))?;
        let converted_rows = super::upgrade::convert_if_needed(dir, options)?;
        let log_dir = dir.join(LOG_DIR_NAME);
        if !dir.join(META_FILE_NAME).exists() && holds_segments(&log_dir) {
            return Err(StorageError::Corrupt {
                path: dir.join(META_FILE_NAME),
                detail: format!(
                    "missing, yet {} holds segment files: restore meta.db from a copy (it holds the stream id, the schema and the exactly-once marks); corecast will not start a new stream over an old log",
                    log_dir.display()
                ),
            });
        }
        let (meta_db, meta) = MetaDb::open(dir, Some(schema_json))?;
        if let Some(given) = schema_json {
            if meta.schema_json.as_deref() != Some(given) {
                return Err(StorageError::SchemaMismatch {
                    path: meta_db.path().to_owned(),
                    stored: meta.schema_json,
                    given: given.to_owned(),
                });
            }
        }
        let stream_uuid = uuid_bytes(&meta.stream_id, meta_db.path())?;
        let snapshot = meta_db.marks()?;
        let recovered = recovery::recover(&log_dir, &meta, snapshot, stream_uuid, Mode::Write)?;

        let active = recovered.segments.last().map(|newest| Active {
            first_offset: newest.first_offset,
            path: Arc::clone(&newest.path),
            file: Arc::clone(&newest.file),
            pos: newest.end_pos,
            capacity: newest.file.metadata().map(|m| m.len()).unwrap_or(0),
            last_sparse_pos: newest.sparse.last().map_or(0, |&(_, pos)| pos),
            since: (Instant::now(), newest.end_pos),
            records: 0,
        });
        let mut marks = Marks::default();
        for (id, mark) in &recovered.marks {
            marks.insert(id, PublisherState::recovered(*mark));
        }
        let report = OpenReport {
            converted_rows,
            torn_tail: recovered.torn.clone(),
            swept: recovered.swept.clone(),
            segments: recovered.segments.len(),
        };
        let end_offset = recovered.end;
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            stream_id: meta.stream_id.clone(),
            schema_json: meta.schema_json.clone(),
            view: RwLock::new(View {
                segments: recovered.segments,
                floor: recovered.floor,
                end: recovered.end,
            }),
            marks: Mutex::new(recovered.marks),
        });
        view::register(&shared);
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let keeper = Keeper::start(&log_dir, meta_db.path(), &name)
            .map_err(StorageError::io(&log_dir, "starting the keeper thread"))?;
        Ok(Buffer {
            shared,
            meta: meta_db,
            keeper,
            dir: dir.to_owned(),
            log_dir,
            options,
            stream_uuid,
            created_at_us: meta.created_at_us,
            active,
            spare: recovered.spare,
            spare_asked: false,
            end_offset,
            last_ts_us: recovered.last_ts_us.unwrap_or(i64::MIN),
            marks,
            record: RecordBuilder::default(),
            untrusted: None,
            failures: 0,
            faults: VecDeque::new(),
            report,
            _lock: lock,
        })
    }

    /// A reader on this stream that sees every commit once it is durable (see
    /// [`BufferReader`]); hand it to a reader thread.
    pub fn reader(&self) -> Result<BufferReader, StorageError> {
        Ok(BufferReader::attach(Arc::clone(&self.shared)))
    }

    /// The segment directory, `<dir>/log`.
    pub fn path(&self) -> &Path {
        &self.log_dir
    }

    /// The stream directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many rows this open converted from a format-2 SQLite buffer; 0 when there was none.
    pub fn converted_rows(&self) -> u64 {
        self.report.converted_rows
    }

    /// What opening the log found and did.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The stream's id: a UUID (hyphenated, lower case) minted at creation, never changed.
    pub fn stream_id(&self) -> &str {
        &self.shared.stream_id
    }

    /// The schema text stored at creation (`None`: created without one).
    pub fn schema_json(&self) -> Option<&str> {
        self.shared.schema_json.as_deref()
    }

    /// When the stream was created, µs since the Unix epoch.
    pub fn created_at_us(&self) -> i64 {
        self.created_at_us
    }

    /// The next offset to be assigned: 1 on an empty log, last offset + 1 otherwise.
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// The first offset the hot log holds, `None` when it holds no row.
    pub fn earliest(&self) -> Option<u64> {
        self.shared.view.read().expect("view lock").earliest()
    }

    /// Commits that failed since the log was opened.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Publisher `id`'s committed mark, `None` if it never landed a row.
    pub fn publisher_mark(&self, id: &str) -> Option<Mark> {
        self.marks.get(id).map(PublisherState::mark)
    }

    /// Every publisher's committed mark, in no particular order.
    pub fn publisher_marks(&self) -> impl Iterator<Item = (&str, Mark)> {
        self.marks.iter()
    }

    /// Queues an I/O failure for the next write, sync or recheck (tests of the failure paths).
    #[doc(hidden)]
    pub fn inject_fault(&mut self, fault: Fault) {
        self.faults.push_back(fault);
    }

    fn fault(&mut self, matches: impl Fn(&Fault) -> Option<i32>) -> io::Result<()> {
        if let Some(errno) = self.faults.front().and_then(&matches) {
            self.faults.pop_front();
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// Group commit: appends every batch in `batches`, judged in order, as ONE record made
    /// durable with ONE `fdatasync`, and returns one outcome per batch, in order.
    ///
    /// Plain batches append all their rows. An exactly-once batch is judged against its
    /// publisher's mark as tentatively advanced by earlier batches of the same call (PROTOCOL.md
    /// §7): a first seq beyond `last_seq + 1` is a [`BatchOutcome::Gap`] and changes nothing;
    /// otherwise the leading `min(rows, last_seq − first_seq + 1)` rows are duplicates (answered
    /// with their original offsets while the dedupe window remembers them) and the rest append.
    /// Each batch's rows get adjacent offsets; the commit's rows share one `ts`; the marks move
    /// in the same record. A call that appends no row writes nothing.
    ///
    /// On [`CommitFailed`] nothing of the call is in the log and the writer's state is as
    /// before the call, so submitting the same batches again gives exactly the outcomes this call
    /// would have given (timestamps aside).
    ///
    /// # Panics
    ///
    /// If an exactly-once batch has `first_seq` 0 (a programming error: the frame decoder
    /// refuses it).
    pub fn append<R: AsRef<[u8]>>(
        &mut self,
        batches: &[AppendBatch<'_, R>],
    ) -> Result<Vec<BatchOutcome>, CommitFailed> {
        if batches.is_empty() {
            return Ok(Vec::new());
        }
        let failed = |buffer: &mut Buffer, path: &Path, error: &io::Error, detail: String| {
            buffer.failures += 1;
            CommitFailed {
                path: path.to_owned(),
                disk_full: matches!(
                    error.raw_os_error(),
                    Some(libc_enospc::ENOSPC | libc_enospc::EDQUOT)
                ),
                detail,
                batches_count: batches.len(),
                rows_count: batches.iter().map(|batch| batch.rows.len()).sum(),
            }
        };
        if let Some(why) = self.untrusted.clone() {
            if let Err((path, error)) = self.recheck() {
                let detail = format!("{why}; re-reading the segment failed: {error}");
                return Err(failed(self, &path, &error, detail));
            }
        }

        let mut staged = Staged {
            end_offset: self.end_offset,
            publishers: HashMap::new(),
        };
        let ts_us = now_us().max(self.last_ts_us);
        let rows_count: u64 = batches.iter().map(|batch| batch.rows.len() as u64).sum();
        if self.end_offset.saturating_add(rows_count) > i64::MAX as u64 {
            let error = io::Error::other("offsets exhausted");
            let detail = format!(
                "offsets exhausted: the end offset {} plus {rows_count} rows passes 2^63 - 1",
                self.end_offset
            );
            return Err(failed(self, &self.log_dir.clone(), &error, detail));
        }
        let mut record = std::mem::take(&mut self.record);
        record.begin(self.end_offset, ts_us);
        let mut outcomes = Vec::with_capacity(batches.len());
        for batch in batches {
            let batch_rows = batch.rows.len() as u64;
            let first_offset = staged.end_offset;
            let (fresh_rows, dup_offsets) = match batch.publisher {
                None => (batch.rows, Vec::new()),
                Some(publisher) => {
                    let (_, state) = staged.publishers.entry(publisher.id).or_insert_with(|| {
                        let state = self.marks.get(publisher.id).cloned().unwrap_or_default();
                        (state.mark(), state)
                    });
                    let dups_count = match state.judge(publisher.first_seq, batch_rows) {
                        Judgement::Gap { expected, got } => {
                            outcomes.push(BatchOutcome::Gap { expected, got });
                            continue;
                        }
                        Judgement::Accept { dups_count } => dups_count,
                    };
                    let dup_offsets = (0..dups_count)
                        .map(|i| state.original_offset(publisher.first_seq + i))
                        .collect();
                    let fresh_count = batch_rows - dups_count;
                    if fresh_count > 0 {
                        state.record(publisher.first_seq + dups_count, first_offset, fresh_count);
                    }
                    (&batch.rows[dups_count as usize..], dup_offsets)
                }
            };
            for row in fresh_rows {
                if let Err(too_large) = record.push_row(row.as_ref()) {
                    self.record = record;
                    let error = io::Error::other(too_large.to_string());
                    return Err(failed(
                        self,
                        &self.log_dir.clone(),
                        &error,
                        too_large.to_string(),
                    ));
                }
            }
            staged.end_offset = first_offset + fresh_rows.len() as u64;
            outcomes.push(BatchOutcome::Appended {
                ts_us,
                first_offset,
                appended: fresh_rows.len(),
                dup_offsets,
            });
        }
        assert_eq!(
            self.end_offset + record.rows_count(),
            staged.end_offset,
            "every new row is in the record, at contiguous offsets"
        );
        if record.rows_count() == 0 {
            // nothing new (gaps, duplicates): no mark moved, nothing to write
            self.record = record;
            debug_assert!(staged
                .publishers
                .values()
                .all(|(before, state)| *before == state.mark()));
            return Ok(outcomes);
        }
        for (id, (before, state)) in &staged.publishers {
            let mark = state.mark();
            if mark != *before {
                let last_offset = mark.last_offset.expect("a moved mark names its offset");
                record.push_mark(id, mark.last_seq, last_offset);
            }
        }
        let written = self.write_record(record.finish());
        self.record = record;
        match written {
            Ok(()) => {
                self.last_ts_us = ts_us;
                self.apply(staged);
                Ok(outcomes)
            }
            Err((path, error, op)) => {
                let detail = format!("{op}: {error}");
                Err(failed(self, &path, &error, detail))
            }
        }
    }

    /// Appends one record to the newest segment (rolling to a new one when it does not fit),
    /// makes it durable, and publishes it to readers. On failure the log is as before.
    fn write_record(&mut self, bytes: &[u8]) -> Result<(), (PathBuf, io::Error, &'static str)> {
        let len = bytes.len() as u64;
        let fits = self
            .active
            .as_ref()
            .is_some_and(|active| active.pos + len <= active.capacity);
        if !fits {
            return self.roll(bytes);
        }
        let active = self.active.as_ref().expect("an active segment");
        let (file, pos, path) = (
            Arc::clone(&active.file),
            active.pos,
            active.path.to_path_buf(),
        );
        let (first_offset, end_offset) = record_span(bytes);
        if let Err(error) = self
            .fault(|f| matches!(f, Fault::Write(_)).then(|| errno(f)))
            .and_then(|()| file.write_all_at(bytes, pos))
        {
            self.roll_back(&file, pos, len, &path, None);
            return Err((path, error, "writing the commit's record"));
        }
        if let Err(error) = self
            .fault(|f| matches!(f, Fault::Sync(_)).then(|| errno(f)))
            .and_then(|()| file.sync_data())
        {
            let why = format!("fdatasync of {} failed: {error}", path.display());
            self.roll_back(&file, pos, len, &path, Some(why));
            return Err((
                path,
                error,
                "making the commit's record durable (fdatasync)",
            ));
        }
        let active = self.active.as_mut().expect("an active segment");
        active.pos += len;
        active.records += 1;
        let index_it = pos - active.last_sparse_pos >= segment::SPARSE_EVERY_BYTES;
        if index_it {
            active.last_sparse_pos = pos;
        }
        let (capacity, new_pos, since, records) =
            (active.capacity, active.pos, active.since, active.records);
        {
            let mut view = self.shared.view.write().expect("view lock");
            let segment = view
                .segments
                .last_mut()
                .expect("the active segment is in the view");
            segment.end_offset = end_offset;
            segment.end_pos = new_pos;
            if index_it {
                segment.sparse.push((first_offset, pos));
            }
            view.end = end_offset;
        }
        // The spare is asked for once an eighth of the segment is written: early enough that
        // it can be made at a gentle pace (half the time the rest of the segment is expected to
        // take at the rate so far), with a margin for the rate to double.
        if !self.spare_asked && self.spare.is_none() && new_pos > capacity / 8 {
            let (at, from) = since;
            let written = new_pos.saturating_sub(from).max(1);
            let rest = capacity.saturating_sub(new_pos);
            let within = at
                .elapsed()
                .mul_f64(rest as f64 / written as f64 / 2.0)
                .min(SPARE_PACE_MAX);
            let zeros = written / records.max(1) < ZERO_FILL_BELOW;
            self.keeper.send(KeeperMsg::MakeSpare {
                len: self.options.segment_bytes,
                zeros,
                within: Some(within),
            });
            self.spare_asked = true;
        }
        Ok(())
    }

    /// Starts a new segment with `bytes` (a record) as its first record: header and record in
    /// one `pwrite` into a preallocated spare, one `fdatasync`, then the rename to its name.
    fn roll(&mut self, bytes: &[u8]) -> Result<(), (PathBuf, io::Error, &'static str)> {
        let (first_offset, end_offset) = record_span(bytes);
        if self
            .active
            .as_ref()
            .is_some_and(|active| active.first_offset == first_offset)
        {
            // The newest segment holds no record (its first one was torn and cleared at open)
            // and has the name the new segment takes: retire it first, or the rename would
            // replace its file behind its view and evicting it would delete the new one.
            self.retire_empty_active()?;
        }
        let needed = SEGMENT_HEADER_LEN + bytes.len() as u64;
        let spare_path = self.log_dir.join(segment::SPARE_FILE_NAME);
        let mut spare = self.spare.take();
        if spare.is_none() && self.spare_asked {
            self.spare_asked = false;
            spare = self.keeper.spare().ok();
        }
        let spare = match spare {
            Some(file) if file.metadata().is_ok_and(|m| m.len() >= needed) => file,
            other => {
                drop(other);
                let _ = std::fs::remove_file(&spare_path);
                let len = self.options.segment_bytes.max(record::padded(needed));
                keeper::make_spare(&self.log_dir, len, false, None, &AtomicBool::new(false))
                    .map_err(|e| (spare_path.clone(), e, "preallocating a new segment"))?
            }
        };
        let header = SegmentHeader {
            first_offset,
            created_us: now_us(),
            stream_id: self.stream_uuid,
        };
        let mut first = Vec::with_capacity(needed as usize);
        first.extend_from_slice(&header.encode());
        first.extend_from_slice(bytes);
        let written = self
            .fault(|f| matches!(f, Fault::Write(_)).then(|| errno(f)))
            .and_then(|()| spare.write_all_at(&first, 0))
            .map_err(|e| (e, "writing the first record of a new segment"))
            .and_then(|()| {
                self.fault(|f| matches!(f, Fault::Sync(_)).then(|| errno(f)))
                    .and_then(|()| spare.sync_data())
                    .map_err(|e| (e, "making a new segment's first record durable (fdatasync)"))
            });
        let path = self.log_dir.join(segment::file_name(first_offset));
        let renamed = written.and_then(|()| {
            std::fs::rename(&spare_path, &path).map_err(|e| (e, "naming a new segment"))
        });
        if let Err((error, op)) = renamed {
            // a spare whose header is written would be adopted at the next open: clear it
            if segment::zero_from(&spare, 0).is_ok() {
                self.spare = Some(spare);
            } else {
                drop(spare);
                let _ = std::fs::remove_file(&spare_path);
            }
            return Err((spare_path, error, op));
        }
        let capacity = spare.metadata().map(|m| m.len()).unwrap_or(needed);
        let file = Arc::new(spare);
        let path: Arc<Path> = Arc::from(path.as_path());
        {
            let mut view = self.shared.view.write().expect("view lock");
            if view.segments.is_empty() {
                view.floor = first_offset;
            }
            view.segments.push(SegmentView {
                first_offset,
                path: Arc::clone(&path),
                file: Arc::clone(&file),
                end_offset,
                end_pos: needed,
                sparse: vec![(first_offset, SEGMENT_HEADER_LEN)],
            });
            view.end = end_offset;
        }
        self.active = Some(Active {
            first_offset,
            path,
            file,
            pos: needed,
            capacity,
            last_sparse_pos: SEGMENT_HEADER_LEN,
            since: (Instant::now(), needed),
            records: 1,
        });
        self.keeper.send(KeeperMsg::Rolled(end_offset));
        Ok(())
    }

    /// Removes the newest segment, which holds no record, from the directory and the view.
    fn retire_empty_active(&mut self) -> Result<(), (PathBuf, io::Error, &'static str)> {
        let active = self.active.as_ref().expect("an active segment");
        debug_assert_eq!(active.pos, SEGMENT_HEADER_LEN, "an empty segment");
        let path = active.path.to_path_buf();
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err((path, e, "removing an empty newest segment")),
        }
        {
            let mut view = self.shared.view.write().expect("view lock");
            if view
                .segments
                .last()
                .is_some_and(|segment| *segment.path == *path)
            {
                view.segments.pop();
            }
        }
        self.active = None;
        segment::sync_dir(&self.log_dir)
            .map_err(|e| (self.log_dir.clone(), e, "syncing the log directory"))
    }

    /// Overwrites a failed record's bytes with zeros so the log reads as before it; if that
    /// cannot be made durable (or `untrusted` says the sync itself failed), the segment is not
    /// trusted until [`recheck`](Self::recheck) re-reads it.
    fn roll_back(
        &mut self,
        file: &File,
        pos: u64,
        len: u64,
        path: &Path,
        untrusted: Option<String>,
    ) {
        let zeros = vec![0u8; len as usize];
        let cleared = file
            .write_all_at(&zeros, pos)
            .and_then(|()| file.sync_data());
        let why = match (untrusted, cleared) {
            (Some(why), _) => Some(why),
            (None, Err(error)) => Some(format!(
                "clearing a failed record in {} failed: {error}",
                path.display()
            )),
            (None, Ok(())) => None,
        };
        if why.is_some() {
            self.untrusted = why;
        }
    }

    /// Re-reads the newest segment from a fresh descriptor, checks every record up to the last
    /// durable one, clears anything after it, and trusts the segment again.
    fn recheck(&mut self) -> Result<(), (PathBuf, io::Error)> {
        let Some(active) = &self.active else {
            self.untrusted = None;
            return Ok(());
        };
        let path = active.path.to_path_buf();
        let (pos, end_offset) = (active.pos, self.end_offset);
        let checked = (|| -> io::Result<File> {
            self.fault(|f| matches!(f, Fault::Recheck(_)).then(|| errno(f)))?;
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let scanned = segment::scan(&file, |_, _| {})?
                .map_err(|e| io::Error::other(format!("segment header: {e}")))?;
            if scanned.end_offset < end_offset || scanned.end_pos < pos {
                return Err(io::Error::other(format!(
                    "the segment's durable records end at offset {} (byte {}), but offsets up to {} (byte {pos}) were committed: rows acknowledged earlier are gone",
                    scanned.end_offset, scanned.end_pos, end_offset
                )));
            }
            segment::zero_from(&file, pos)?;
            file.sync_data()?;
            Ok(file)
        })();
        let file = checked.map_err(|e| (path.clone(), e))?;
        let file = Arc::new(file);
        {
            let mut view = self.shared.view.write().expect("view lock");
            if let Some(segment) = view.segments.last_mut() {
                segment.file = Arc::clone(&file);
            }
        }
        let active = self.active.as_mut().expect("an active segment");
        active.file = file;
        self.untrusted = None;
        Ok(())
    }

    /// Deletes every segment file whose rows are all below `offset` (the sealed tier holds
    /// them). First stores, in `meta.db`, the marks snapshot and the new floor, so neither a mark
    /// nor an offset is lost with the files; a crash between the two leaves files that the next
    /// open deletes. Never removes a row at or above `offset`; the newest segment goes only when
    /// every row is below `offset`, and offsets go on from the end offset all the same.
    pub fn evict_below(&mut self, offset: u64) -> Result<Evicted, StorageError> {
        let detached = self.detach_below(offset)?;
        let evicted = detached.evicted;
        detached.delete()?;
        Ok(evicted)
    }

    /// [`evict_below`](Self::evict_below) without the file-system work: stores the marks
    /// snapshot and the new floor, takes the segments out of the view (readers no longer start
    /// in them), and hands back the files, to be deleted by [`Detached::delete`] on another
    /// thread so that the writer does not wait for `unlink` and a directory `fsync`. Files not
    /// deleted (a crash) are below the stored floor and are removed at the next open.
    pub fn detach_below(&mut self, offset: u64) -> Result<Detached, StorageError> {
        let (victims, floor) = {
            let view = self.shared.view.read().expect("view lock");
            let victims = view
                .segments
                .iter()
                .take_while(|segment| segment.end_offset <= offset)
                .count();
            let floor = view
                .segments
                .get(victims)
                .map_or(self.end_offset, |segment| segment.first_offset);
            (victims, floor)
        };
        if victims == 0 {
            return Ok(Detached {
                evicted: Evicted {
                    segments: 0,
                    rows: 0,
                    floor: self.earliest().unwrap_or(self.end_offset),
                },
                files: Vec::new(),
                log_dir: self.log_dir.clone(),
            });
        }
        self.meta
            .snapshot(floor, self.end_offset, self.marks.iter())?;
        let removed: Vec<SegmentView> = {
            let mut view = self.shared.view.write().expect("view lock");
            let removed = view.segments.drain(..victims).collect();
            view.floor = floor;
            removed
        };
        if self.active.as_ref().is_some_and(|active| {
            removed
                .iter()
                .any(|s| s.first_offset == active.first_offset)
        }) {
            self.active = None;
        }
        let rows = removed.iter().map(|s| s.end_offset - s.first_offset).sum();
        Ok(Detached {
            evicted: Evicted {
                segments: removed.len(),
                rows,
                floor,
            },
            files: removed.iter().map(|s| s.path.to_path_buf()).collect(),
            log_dir: self.log_dir.clone(),
        })
    }

    /// The last error the keeper thread met (preallocating a spare, syncing the directory,
    /// raising the frontier), if any; none of them loses a row.
    pub fn keeper_error(&self) -> Option<String> {
        self.keeper
            .last_error
            .lock()
            .expect("keeper error lock")
            .clone()
    }

    /// Applies a durable commit's staged state.
    fn apply(&mut self, staged: Staged<'_>) {
        assert!(staged.end_offset >= self.end_offset);
        self.end_offset = staged.end_offset;
        let mut shared_marks = self.shared.marks.lock().expect("marks lock");
        for (id, (before, state)) in staged.publishers {
            let mark = state.mark();
            if mark != before {
                shared_marks.insert(id.to_owned(), mark);
                self.marks.insert(id, state);
            }
        }
    }
}

/// Whether `log_dir` holds any segment file.
fn holds_segments(log_dir: &Path) -> bool {
    std::fs::read_dir(log_dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(segment::parse_file_name)
                .is_some()
        })
    })
}

/// The errno a [`Fault`] carries.
fn errno(fault: &Fault) -> i32 {
    match *fault {
        Fault::Write(errno) | Fault::Sync(errno) | Fault::Recheck(errno) => errno,
    }
}

/// The errno values a full disk reports.
mod libc_enospc {
    /// No space left on device.
    pub const ENOSPC: i32 = 28;
    /// Disk quota exceeded.
    pub const EDQUOT: i32 = 122;
}

/// The first offset and the end offset of a record the writer just built.
fn record_span(bytes: &[u8]) -> (u64, u64) {
    let header = record::parse_header(bytes).expect("the writer's own record");
    (header.first_offset, header.end_offset())
}

/// The 16 bytes of a stored UUID.
pub(crate) fn uuid_bytes(stream_id: &str, path: &Path) -> Result<[u8; 16], StorageError> {
    uuid::Uuid::parse_str(stream_id)
        .map(|id| *id.as_bytes())
        .map_err(|e| StorageError::Corrupt {
            path: path.to_owned(),
            detail: format!("stream_id {stream_id:?} is not a UUID: {e}"),
        })
}

/// Takes the stream's writer lock (released by the kernel when the file closes or the process
/// dies).
fn take_writer_lock(lock_path: &Path) -> Result<File, StorageError> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(StorageError::io(lock_path, "opening the writer lock file"))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(StorageError::Locked {
            path: lock_path.to_owned(),
        }),
        Err(TryLockError::Error(source)) => Err(StorageError::io(
            lock_path,
            "locking the writer lock file",
        )(source)),
    }
}

/// Now, µs since the Unix epoch.
pub(crate) fn now_us() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

/// The meta database's file name (re-exported for callers that name files).
pub const DB_FILE_NAME: &str = META_FILE_NAME;
