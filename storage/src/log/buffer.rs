//! The writer side of a stream's buffer: [`Buffer`] opens (or creates) `<stream>/buffer.db` and
//! group-commits batches of already-encoded rows into it.
//!
//! In: batches drained from the owner's writer queue, each a slice of encoded rows and, on an
//! exactly-once connection, the publisher id and the seq of its first row. Out: per batch, the
//! offsets it got (new rows plus the originals of leading duplicates) or a `gap` refusal; or, for
//! the whole commit, [`CommitFailed`]. Runs on the owner shard's blocking writer thread
//! (ARCHITECTURE.md, "Threads"): a commit waits for an fsync.
//!
//! One commit is one SQLite transaction (`BEGIN IMMEDIATE` … `COMMIT`, WAL, `synchronous=FULL`):
//! rows, the publishers' marks and the end offset land together or not at all. The commit's new
//! rows are stored as blocks (see [`super::block`]): one SQLite row per run of up to
//! [`BLOCK_TARGET_BYTES`] of payload, not one per row, so a commit costs one B-tree insert per
//! 64 KiB rather than per row. Offsets start at
//! 1, are contiguous and are never reused, even when older rows are later deleted (the end
//! offset is kept in `meta`). All in-memory state changed by a commit is staged and applied only
//! after `COMMIT` returns, so after a failed commit a retry of the same batches is exact.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::block::BlockWriter;
use super::error::{CommitFailed, StorageError};
use super::marks::{Judgement, Mark, Marks, PublisherState};
use super::reader::BufferReader;

/// The database file inside a stream's directory.
pub const DB_FILE_NAME: &str = "buffer.db";

/// The lock file inside a stream's directory; held (`flock`) by the one [`Buffer`] that writes
/// the stream, released by the kernel when that process dies.
pub const LOCK_FILE_NAME: &str = "buffer.lock";

/// The layout version stored in `meta` (`format_version`). 1 stored one SQLite row per log row
/// (`rows`); 2 stores blocks (`blocks`). A version-1 buffer is converted when opened for writing.
pub const FORMAT_VERSION: i64 = 2;

/// A block is closed once its payload reaches this many bytes (64 KiB); a single larger row gets
/// a block of its own. It bounds what a scan starting inside a block reads and discards (at most
/// one block) while keeping the per-row cost of a large commit at a memcpy: a 10,000-row commit of
/// 110-byte trade rows is 17 B-tree inserts instead of 10,000.
pub const BLOCK_TARGET_BYTES: usize = 64 * 1024;

/// How long a connection waits for a lock SQLite holds only briefly (WAL recovery, a
/// checkpoint) before reporting `SQLITE_BUSY`.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection.
const STATEMENT_CACHE_CAPACITY: usize = 16;

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS blocks(\"offset\" INTEGER PRIMARY KEY, ts INTEGER NOT NULL, rows_count INTEGER NOT NULL, payload BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS publishers(id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_offset INTEGER);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);
";
const UPSERT_PUBLISHER: &str = "INSERT INTO publishers(id, last_seq, last_offset) VALUES (?1, ?2, ?3) \
     ON CONFLICT(id) DO UPDATE SET last_seq = excluded.last_seq, last_offset = excluded.last_offset";
const UPDATE_END_OFFSET: &str = "UPDATE meta SET value = ?1 WHERE key = 'end_offset'";

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

/// The writer of one stream's buffer database. One per stream (enforced with a lock file), owned
/// by the owner shard's writer thread.
#[derive(Debug)]
pub struct Buffer {
    // Field order is drop order: the connection closes before the lock is released.
    conn: Connection,
    _lock: File,
    dir: PathBuf,
    db_path: PathBuf,
    stream_id: String,
    schema_json: Option<String>,
    created_at_us: i64,
    /// The next offset to assign.
    end_offset: u64,
    /// The last `ts` stamped (or recovered), so stamps never go backwards within a process.
    last_ts_us: i64,
    marks: Marks,
    /// Rows this open moved out of a format-1 layout (0 when there was nothing to convert).
    converted_rows: u64,
}

/// In-memory changes of one commit, applied to the [`Buffer`] only once `COMMIT` returned.
struct Staged<'b> {
    end_offset: u64,
    last_ts_us: i64,
    /// Publishers judged in this commit: their state before it and as tentatively advanced.
    publishers: HashMap<&'b str, (Mark, PublisherState)>,
}

impl Buffer {
    /// Opens the buffer of the stream in `dir`, creating the directory and `dir/buffer.db` if
    /// absent. A new buffer mints its `stream_id` (UUID v4) and stores `schema_json` and its
    /// creation time; these never change afterwards.
    ///
    /// On reopen the stored values are read back, with the end offset and every publisher's
    /// mark (the dedupe windows start empty). If `schema_json` is `Some` and differs (byte for
    /// byte) from the stored schema, this returns [`StorageError::SchemaMismatch`] naming both and
    /// leaves the stream untouched; the engine decides what follows. `None` accepts whatever is
    /// stored (read it with [`Buffer::schema_json`]).
    ///
    /// Fails with [`StorageError::Locked`] while another `Buffer` writes the same stream.
    pub fn open(dir: &Path, schema_json: Option<&str>) -> Result<Buffer, StorageError> {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
            path: dir.to_owned(),
            op: "creating the stream directory",
            source,
        })?;
        let lock = take_writer_lock(&dir.join(LOCK_FILE_NAME))?;
        let db_path = dir.join(DB_FILE_NAME);
        let sqlite = |op: &'static str| {
            let path = db_path.clone();
            move |source| StorageError::Sqlite { path, op, source }
        };

        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&db_path, flags).map_err(sqlite("opening"))?;
        let journal_mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sqlite("setting journal_mode=WAL"))?;
        if !journal_mode.eq_ignore_ascii_case("wal") {
            return Err(StorageError::Corrupt {
                path: db_path,
                detail: format!("journal_mode is {journal_mode} after asking for wal"),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite("setting synchronous=FULL"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite("setting busy_timeout"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);

        // Creation is one transaction, so a crash half-way leaves no half-made stream: the next
        // open sees no stream_id and creates it again.
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(sqlite("starting the creation transaction"))?;
        let created =
            create_if_absent(&conn, schema_json).and_then(|()| conn.execute_batch("COMMIT"));
        if let Err(source) = created {
            rollback(&conn);
            return Err(sqlite("creating tables and meta")(source));
        }

        let converted_rows = super::upgrade::upgrade(&conn, &db_path)?;
        let meta = read_meta(&conn, &db_path)?;
        if let Some(given) = schema_json {
            if meta.schema_json.as_deref() != Some(given) {
                return Err(StorageError::SchemaMismatch {
                    path: db_path,
                    stored: meta.schema_json,
                    given: given.to_owned(),
                });
            }
        }

        let (max_offset, last_ts_us): (Option<i64>, Option<i64>) = conn
            .query_row(
                "SELECT \"offset\" + rows_count - 1, ts FROM blocks ORDER BY \"offset\" DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sqlite("reading the last block"))?
            .map_or((None, None), |(offset, ts)| (Some(offset), Some(ts)));
        let end_offset = match max_offset {
            None => meta.end_offset,
            Some(max) => {
                let after_max = to_u64(max, &db_path, "row offset")? + 1;
                if after_max > meta.end_offset {
                    return Err(StorageError::Corrupt {
                        path: db_path,
                        detail: format!(
                            "last row offset {max} is at or past the stored end_offset {}",
                            meta.end_offset
                        ),
                    });
                }
                meta.end_offset
            }
        };

        let mut marks = Marks::default();
        {
            let mut statement = conn
                .prepare("SELECT id, last_seq, last_offset FROM publishers")
                .map_err(sqlite("reading publisher marks"))?;
            let mut rows = statement
                .query([])
                .map_err(sqlite("reading publisher marks"))?;
            while let Some(row) = rows.next().map_err(sqlite("reading publisher marks"))? {
                let columns: rusqlite::Result<(String, i64, Option<i64>)> =
                    (|| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))();
                let (id, last_seq, last_offset) =
                    columns.map_err(sqlite("reading publisher marks"))?;
                let mark = Mark {
                    last_seq: to_u64(last_seq, &db_path, "publisher last_seq")?,
                    last_offset: last_offset
                        .map(|offset| to_u64(offset, &db_path, "publisher last_offset"))
                        .transpose()?,
                };
                marks.insert(&id, PublisherState::recovered(mark));
            }
        }

        Ok(Buffer {
            conn,
            _lock: lock,
            dir: dir.to_owned(),
            db_path,
            stream_id: meta.stream_id,
            schema_json: meta.schema_json,
            created_at_us: meta.created_at_us,
            end_offset,
            last_ts_us: last_ts_us.unwrap_or(i64::MIN),
            marks,
            converted_rows,
        })
    }

    /// Opens a read connection on this stream (see [`BufferReader`]); hand it to a reader
    /// thread.
    pub fn reader(&self) -> Result<BufferReader, StorageError> {
        BufferReader::open(&self.dir)
    }

    /// The database file, `<dir>/buffer.db`.
    pub fn path(&self) -> &Path {
        &self.db_path
    }

    /// How many rows this open converted from the format-1 layout (one SQLite row per log row)
    /// into blocks; 0 when the buffer was already current. For the start-up log.
    pub fn converted_rows(&self) -> u64 {
        self.converted_rows
    }

    /// The stream's id: a UUID (hyphenated, lower case) minted at creation, never changed.
    pub fn stream_id(&self) -> &str {
        &self.stream_id
    }

    /// The schema text stored at creation (`None`: created without one).
    pub fn schema_json(&self) -> Option<&str> {
        self.schema_json.as_deref()
    }

    /// When the stream was created, µs since the Unix epoch.
    pub fn created_at_us(&self) -> i64 {
        self.created_at_us
    }

    /// The next offset to be assigned: 1 on an empty log, last offset + 1 otherwise.
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// Publisher `id`'s committed mark, `None` if it never landed a row.
    pub fn publisher_mark(&self, id: &str) -> Option<Mark> {
        self.marks.get(id).map(PublisherState::mark)
    }

    /// Every publisher's committed mark, in no particular order.
    pub fn publisher_marks(&self) -> impl Iterator<Item = (&str, Mark)> {
        self.marks.iter()
    }

    /// Turns SQLite's automatic checkpoint off for this writer: a maintenance thread runs
    /// [`super::Checkpointer::run`] instead, so no commit pays for copying the WAL into the
    /// database file. Without that thread the WAL grows without bound; call this only with one.
    pub fn checkpoint_elsewhere(&mut self) -> Result<(), StorageError> {
        self.conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(StorageError::sqlite(
                &self.db_path,
                "setting wal_autocheckpoint=0",
            ))
    }

    /// Caps the database at `pages` pages (`PRAGMA max_page_count`; SQLite will not set it below
    /// the current size) and returns the cap in force. A commit that would pass it fails as disk
    /// full. A per-stream quota, and the way tests simulate a full disk.
    pub fn set_max_page_count(&mut self, pages: u64) -> Result<u64, StorageError> {
        let pages_in_force: i64 = self
            .conn
            .pragma_update_and_check(None, "max_page_count", pages, |row| row.get(0))
            .map_err(StorageError::sqlite(
                &self.db_path,
                "setting max_page_count",
            ))?;
        to_u64(pages_in_force, &self.db_path, "max_page_count")
    }

    /// Group commit: appends every batch in `batches`, judged in order, in ONE transaction, and
    /// returns one outcome per batch, in order.
    ///
    /// Plain batches append all their rows. An exactly-once batch is judged against its
    /// publisher's mark as tentatively advanced by earlier batches of the same call (PROTOCOL.md
    /// §7): a first seq beyond `last_seq + 1` is a [`BatchOutcome::Gap`] and changes nothing;
    /// otherwise the leading `min(rows, last_seq − first_seq + 1)` rows are duplicates (answered
    /// with their original offsets while the dedupe window remembers them) and the rest append.
    /// Each batch's rows get adjacent offsets; the commit's rows share one `ts`; marks move in
    /// the same transaction.
    ///
    /// On [`CommitFailed`] nothing of the call is in the database and the writer's state is as
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
        let mut staged = Staged {
            end_offset: self.end_offset,
            last_ts_us: self.last_ts_us,
            publishers: HashMap::new(),
        };
        let committed = self
            .conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut begin| begin.execute([]))
            .and_then(|_| self.write_batches(batches, &mut staged))
            .and_then(|outcomes| {
                self.write_marks(&staged)?;
                self.conn.prepare_cached("COMMIT")?.execute([])?;
                Ok(outcomes)
            });
        match committed {
            Ok(outcomes) => {
                self.apply(staged);
                Ok(outcomes)
            }
            Err(error) => {
                rollback(&self.conn);
                Err(CommitFailed {
                    path: self.db_path.clone(),
                    disk_full: error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
                    detail: error.to_string(),
                    batches_count: batches.len(),
                    rows_count: batches.iter().map(|batch| batch.rows.len()).sum(),
                })
            }
        }
    }

    /// Judges every batch and inserts the new rows as blocks inside the open transaction,
    /// advancing `staged` only. The commit's rows share one `ts` (one value per batch, as every
    /// batch of the commit becomes durable at the same moment).
    fn write_batches<'b, R: AsRef<[u8]>>(
        &self,
        batches: &[AppendBatch<'b, R>],
        staged: &mut Staged<'b>,
    ) -> rusqlite::Result<Vec<BatchOutcome>> {
        let ts_us = now_us().max(staged.last_ts_us);
        staged.last_ts_us = ts_us;
        let rows_count: u64 = batches.iter().map(|batch| batch.rows.len() as u64).sum();
        if staged.end_offset.saturating_add(rows_count) > i64::MAX as u64 {
            // SQLite integers are signed 64-bit: offsets end at 2^63 − 1
            return Err(rusqlite::Error::ToSqlConversionFailure(
                format!(
                    "offsets exhausted: the end offset {} plus {rows_count} rows passes 2^63 - 1",
                    staged.end_offset
                )
                .into(),
            ));
        }
        let mut blocks = BlockWriter::new(&self.conn, staged.end_offset, ts_us)?;
        let mut outcomes = Vec::with_capacity(batches.len());
        for batch in batches {
            let rows_count = batch.rows.len() as u64;
            let first_offset = staged.end_offset;

            let (fresh_rows, dup_offsets) = match batch.publisher {
                None => (batch.rows, Vec::new()),
                Some(publisher) => {
                    let (_, state) = staged.publishers.entry(publisher.id).or_insert_with(|| {
                        let state = self.marks.get(publisher.id).cloned().unwrap_or_default();
                        (state.mark(), state)
                    });
                    let dups_count = match state.judge(publisher.first_seq, rows_count) {
                        Judgement::Gap { expected, got } => {
                            outcomes.push(BatchOutcome::Gap { expected, got });
                            continue;
                        }
                        Judgement::Accept { dups_count } => dups_count,
                    };
                    let dup_offsets = (0..dups_count)
                        .map(|i| state.original_offset(publisher.first_seq + i))
                        .collect();
                    let fresh_count = rows_count - dups_count;
                    if fresh_count > 0 {
                        state.record(publisher.first_seq + dups_count, first_offset, fresh_count);
                    }
                    (&batch.rows[dups_count as usize..], dup_offsets)
                }
            };

            for row in fresh_rows {
                blocks.push(row.as_ref())?;
            }
            staged.end_offset = first_offset + fresh_rows.len() as u64;
            outcomes.push(BatchOutcome::Appended {
                ts_us,
                first_offset,
                appended: fresh_rows.len(),
                dup_offsets,
            });
        }
        blocks.flush()?;
        assert_eq!(
            blocks.next_offset(),
            staged.end_offset,
            "every new row is in a block, at contiguous offsets"
        );
        Ok(outcomes)
    }

    /// Writes the moved marks and the end offset inside the open transaction.
    fn write_marks(&self, staged: &Staged<'_>) -> rusqlite::Result<()> {
        let mut upsert = self.conn.prepare_cached(UPSERT_PUBLISHER)?;
        for (id, (before, state)) in &staged.publishers {
            let mark = state.mark();
            if mark != *before {
                upsert.execute(params![
                    id,
                    to_i64(mark.last_seq),
                    mark.last_offset.map(to_i64)
                ])?;
            }
        }
        if staged.end_offset != self.end_offset {
            self.conn
                .prepare_cached(UPDATE_END_OFFSET)?
                .execute([to_i64(staged.end_offset)])?;
        }
        Ok(())
    }

    /// Applies a committed commit's staged state.
    fn apply(&mut self, staged: Staged<'_>) {
        assert!(staged.end_offset >= self.end_offset);
        self.end_offset = staged.end_offset;
        self.last_ts_us = staged.last_ts_us;
        for (id, (before, state)) in staged.publishers {
            if state.mark() != before {
                self.marks.insert(id, state);
            }
        }
    }
}

/// The stored constants of a stream.
pub(crate) struct Meta {
    pub(crate) stream_id: String,
    pub(crate) schema_json: Option<String>,
    pub(crate) created_at_us: i64,
    pub(crate) end_offset: u64,
}

/// Reads `meta` (the buffer must exist and have been created).
pub(crate) fn read_meta(conn: &Connection, db_path: &Path) -> Result<Meta, StorageError> {
    const OP: &str = "reading meta";
    let mut statement = conn
        .prepare("SELECT key, value FROM meta")
        .map_err(StorageError::sqlite(db_path, OP))?;
    let mut rows = statement
        .query([])
        .map_err(StorageError::sqlite(db_path, OP))?;
    let mut values: HashMap<String, rusqlite::types::Value> = HashMap::new();
    while let Some(row) = rows.next().map_err(StorageError::sqlite(db_path, OP))? {
        let key = row.get(0).map_err(StorageError::sqlite(db_path, OP))?;
        values.insert(key, row.get(1).map_err(StorageError::sqlite(db_path, OP))?);
    }
    use rusqlite::types::Value;
    let missing = |key: &str| StorageError::Corrupt {
        path: db_path.to_owned(),
        detail: format!("meta key {key} missing or of the wrong type"),
    };
    let version = match values.get("format_version") {
        Some(Value::Integer(version)) => *version,
        _ => return Err(missing("format_version")),
    };
    if version != FORMAT_VERSION {
        return Err(StorageError::Format {
            path: db_path.to_owned(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let stream_id = match values.remove("stream_id") {
        Some(Value::Text(id)) => id,
        _ => return Err(missing("stream_id")),
    };
    let schema_json = match values.remove("schema") {
        Some(Value::Text(schema)) => Some(schema),
        Some(Value::Null) => None,
        _ => return Err(missing("schema")),
    };
    let created_at_us = match values.get("created_at_us") {
        Some(Value::Integer(us)) => *us,
        _ => return Err(missing("created_at_us")),
    };
    let end_offset = match values.get("end_offset") {
        Some(Value::Integer(offset)) if *offset >= 1 => *offset as u64,
        _ => return Err(missing("end_offset")),
    };
    Ok(Meta {
        stream_id,
        schema_json,
        created_at_us,
        end_offset,
    })
}

/// Creates the tables and, if no stream_id is stored yet, the meta of a new stream. Runs inside
/// the creation transaction.
fn create_if_absent(conn: &Connection, schema_json: Option<&str>) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE_TABLES)?;
    let exists: Option<i64> = conn
        .query_row("SELECT 1 FROM meta WHERE key = 'stream_id'", [], |row| {
            row.get(0)
        })
        .optional()?;
    if exists.is_some() {
        return Ok(());
    }
    let mut insert = conn.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)")?;
    insert.execute(params!["format_version", FORMAT_VERSION])?;
    insert.execute(params!["stream_id", uuid::Uuid::new_v4().to_string()])?;
    insert.execute(params!["schema", schema_json])?;
    insert.execute(params!["created_at_us", now_us()])?;
    insert.execute(params!["end_offset", 1_i64])?;
    Ok(())
}

/// Takes the stream's writer lock (released by the kernel when the file closes or the process
/// dies).
fn take_writer_lock(lock_path: &Path) -> Result<File, StorageError> {
    let io = |op: &'static str| {
        let path = lock_path.to_owned();
        move |source| StorageError::Io { path, op, source }
    };
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .map_err(io("opening the writer lock file"))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(StorageError::Locked {
            path: lock_path.to_owned(),
        }),
        Err(TryLockError::Error(source)) => Err(io("locking the writer lock file")(source)),
    }
}

/// Ends the open transaction, if any, discarding its writes. A failure here leaves the
/// transaction open; the next `BEGIN` then fails and that commit is reported failed too.
pub(crate) fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// Now, µs since the Unix epoch.
pub(crate) fn now_us() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

/// An offset or seq as SQLite stores it.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).expect("offsets and seqs stay below 2^63")
}

/// A stored integer that must not be negative.
pub(crate) fn to_u64(value: i64, db_path: &Path, what: &str) -> Result<u64, StorageError> {
    u64::try_from(value).map_err(|_| StorageError::Corrupt {
        path: db_path.to_owned(),
        detail: format!("negative {what} {value}"),
    })
}
