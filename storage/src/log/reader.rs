//! The read side of a stream's buffer: [`BufferReader`], a separate SQLite connection for replay
//! scans, end offsets and publisher marks.
//!
//! In: offset ranges asked for by subscriber sessions (replay below the ring), the HTTP pull API
//! and segment sealing. Out: committed rows `(offset, ts_us, payload)` in offset order. Runs on
//! the reader pool's blocking threads, one reader per thread (a connection is `Send`, not
//! `Sync`).
//!
//! In WAL mode a reader never blocks the writer and the writer never blocks a reader: each
//! statement reads one committed snapshot, so a scan sees every row of a commit or none of it,
//! and never a row whose commit has not returned.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::block;
use super::buffer::{read_meta, to_i64, to_u64, BUSY_TIMEOUT, DB_FILE_NAME};
use super::error::StorageError;
use super::marks::Mark;

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

/// A read-only connection on a stream's buffer.
#[derive(Debug)]
pub struct BufferReader {
    conn: Connection,
    db_path: PathBuf,
    stream_id: String,
    schema_json: Option<String>,
}

/// The blocks holding offsets `?1..?2`: the one containing `?1` (the last block starting at or
/// before it), then every later one starting before `?2`.
const SCAN: &str = "SELECT \"offset\", ts, rows_count, payload FROM blocks \
     WHERE \"offset\" >= COALESCE((SELECT MAX(\"offset\") FROM blocks WHERE \"offset\" <= ?1), ?1) \
     AND \"offset\" < ?2 ORDER BY \"offset\"";

impl BufferReader {
    /// Opens a read connection on the buffer in `dir`, which a [`Buffer`](super::Buffer) must
    /// have created (a reader never creates a stream).
    pub fn open(dir: &Path) -> Result<BufferReader, StorageError> {
        let db_path = dir.join(DB_FILE_NAME);
        if !db_path.exists() {
            return Err(StorageError::Io {
                path: db_path,
                op: "opening for reading (no buffer here: the stream was never opened for writing)",
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let sqlite = |op: &'static str| {
            let path = db_path.clone();
            move |source| StorageError::Sqlite { path, op, source }
        };
        // Read-write without CREATE, then query_only: a strictly read-only connection cannot
        // open a WAL database whose -shm file is missing, and this one never writes anyway.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(&db_path, flags).map_err(sqlite("opening for reading"))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(sqlite("setting query_only"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite("setting busy_timeout"))?;
        let meta = read_meta(&conn, &db_path)?;
        Ok(BufferReader {
            conn,
            db_path,
            stream_id: meta.stream_id,
            schema_json: meta.schema_json,
        })
    }

    /// The stream's id (see [`Buffer::stream_id`](super::Buffer::stream_id)).
    pub fn stream_id(&self) -> &str {
        &self.stream_id
    }

    /// The schema text stored at creation.
    pub fn schema_json(&self) -> Option<&str> {
        self.schema_json.as_deref()
    }

    /// The next offset the writer will assign, as of the last commit: 1 on an empty log.
    pub fn end_offset(&self) -> Result<u64, StorageError> {
        let end_offset: i64 = self
            .conn
            .prepare_cached("SELECT value FROM meta WHERE key = 'end_offset'")
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .map_err(self.sqlite("reading end_offset"))?;
        to_u64(end_offset, &self.db_path, "end_offset")
    }

    /// The earliest offset still held in the buffer (`None` when it holds no row).
    pub fn earliest(&self) -> Result<Option<u64>, StorageError> {
        let earliest: Option<i64> = self
            .conn
            .prepare_cached("SELECT MIN(\"offset\") FROM blocks")
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .map_err(self.sqlite("reading the earliest offset"))?;
        earliest
            .map(|offset| to_u64(offset, &self.db_path, "row offset"))
            .transpose()
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
    /// its chunk by bytes, say): no further block is read.
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
        let cap = i64::MAX as u64;
        let (from, to_exclusive) = (from.min(cap), to_exclusive.min(cap));
        if limit == 0 || from >= to_exclusive {
            return Ok(0);
        }
        let mut statement = self
            .conn
            .prepare_cached(SCAN)
            .map_err(self.sqlite("preparing a scan"))?;
        let mut blocks = statement
            .query(params![to_i64(from), to_i64(to_exclusive)])
            .map_err(self.sqlite("scanning blocks"))?;
        let mut visited = 0;
        let mut next: Option<u64> = None;
        while let Some(block) = blocks.next().map_err(self.sqlite("scanning blocks"))? {
            let columns: rusqlite::Result<(i64, i64, i64, &[u8])> = (|| {
                Ok((
                    block.get(0)?,
                    block.get(1)?,
                    block.get(2)?,
                    block.get_ref(3)?.as_blob()?,
                ))
            })();
            let (first_offset, ts_us, rows_count, payload) =
                columns.map_err(self.sqlite("scanning blocks"))?;
            let first_offset = to_u64(first_offset, &self.db_path, "block offset")?;
            let rows_count = to_u64(rows_count, &self.db_path, "block rows_count")?;
            if let Some(next) = next {
                if first_offset < next {
                    return Err(self.corrupt(
                        first_offset,
                        format!("overlaps the block before it, which ends at {}", next - 1),
                    ));
                }
            }
            next = Some(first_offset + rows_count);
            for (offset, entry) in (first_offset..).zip(block::entries(payload, rows_count)) {
                let row = entry.map_err(|malformed| self.corrupt(first_offset, malformed.0))?;
                if offset < from {
                    continue;
                }
                if offset >= to_exclusive {
                    return Ok(visited);
                }
                let flow = visit(offset, ts_us, row);
                visited += 1;
                if visited == limit || flow.is_break() {
                    return Ok(visited);
                }
            }
        }
        Ok(visited)
    }

    /// A block that does not match its shape: the file is damaged or was not written by us.
    fn corrupt(&self, block_offset: u64, detail: String) -> StorageError {
        StorageError::Corrupt {
            path: self.db_path.clone(),
            detail: format!("the block at offset {block_offset}: {detail}"),
        }
    }

    /// Publisher `id`'s committed mark, `None` if it never landed a row.
    pub fn publisher_mark(&self, id: &str) -> Result<Option<Mark>, StorageError> {
        let mark: Option<(i64, Option<i64>)> = self
            .conn
            .prepare_cached("SELECT last_seq, last_offset FROM publishers WHERE id = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(self.sqlite("reading a publisher mark"))?;
        let Some((last_seq, last_offset)) = mark else {
            return Ok(None);
        };
        Ok(Some(Mark {
            last_seq: to_u64(last_seq, &self.db_path, "publisher last_seq")?,
            last_offset: last_offset
                .map(|offset| to_u64(offset, &self.db_path, "publisher last_offset"))
                .transpose()?,
        }))
    }

    /// Wraps a SQLite error with the file and `op` (copying the path only on error).
    fn sqlite(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> StorageError + '_ {
        StorageError::sqlite(&self.db_path, op)
    }
}
