//! A stream's `meta.db` (SQLite, WAL): what the segment files do not say.
//!
//! - `meta(key, value)`: `format_version` ([`FORMAT_VERSION`]), `stream_id` (UUID v4, minted at
//!   creation, never changed), `schema` (text or NULL), `created_at_us`, and the offsets that keep
//!   offsets from ever being reused: `floor` (the first offset the hot log holds, moved by
//!   eviction), `frontier` (an offset the log has reached: at least the first offset of its newest
//!   segment) and `marks_through` (the end offset the marks snapshot covers).
//! - `publishers(id, last_seq, last_offset)`: the exactly-once marks snapshot as of
//!   `marks_through`. Records after it carry the marks their commits moved, so recovery applies
//!   those on top; a snapshot is written before any segment is evicted, so no mark is lost with
//!   its segment.
//!
//! Written rarely (creation, eviction, segment rolls through the keeper thread): commits never
//! touch it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::error::StorageError;
use super::marks::Mark;

/// The meta database inside a stream's directory.
pub const META_FILE_NAME: &str = "meta.db";

/// The stream layout version stored in `meta` (`format_version`). 1 and 2 kept rows in a SQLite
/// `buffer.db` (one row per log row, then 64 KiB blocks); 3 keeps them in segment files.
pub const FORMAT_VERSION: i64 = 3;

/// How long a connection waits for another one's brief lock before reporting `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS publishers(id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_offset INTEGER);
";

/// The stored constants and offsets of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// UUID (hyphenated, lower case).
    pub stream_id: String,
    /// The schema text stored at creation.
    pub schema_json: Option<String>,
    /// µs since the Unix epoch.
    pub created_at_us: i64,
    /// The first offset the hot log holds (when it holds any row).
    pub floor: u64,
    /// An offset the log is known to have reached.
    pub frontier: u64,
    /// The end offset the marks snapshot covers.
    pub marks_through: u64,
}

/// A connection on `meta.db`.
#[derive(Debug)]
pub struct MetaDb {
    conn: Connection,
    path: PathBuf,
}

impl MetaDb {
    /// Opens `dir/meta.db`, creating it (and a new stream's meta: a fresh `stream_id`, the
    /// schema, offsets at 1) if `create` and it is absent.
    pub fn open(dir: &Path, create: Option<Option<&str>>) -> Result<(MetaDb, Meta), StorageError> {
        let path = dir.join(META_FILE_NAME);
        if create.is_none() && !path.exists() {
            return Err(StorageError::Io {
                path,
                op: "opening (no stream here: it was never opened for writing)",
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let db = MetaDb::connect(&path, create.is_some())?;
        if let Some(schema_json) = create {
            db.create_if_absent(schema_json, None)?;
        }
        let meta = db.read()?;
        Ok((db, meta))
    }

    /// Opens (creating if asked) the database file at `path` in WAL mode.
    pub(crate) fn connect(path: &Path, create: bool) -> Result<MetaDb, StorageError> {
        let sqlite = |op| StorageError::sqlite(path, op);
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = Connection::open_with_flags(path, flags).map_err(sqlite("opening"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sqlite("setting busy_timeout"))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sqlite("setting journal_mode=WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!("journal_mode is {mode} after asking for wal"),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite("setting synchronous=FULL"))?;
        Ok(MetaDb {
            conn,
            path: path.to_owned(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection (the sealed tier's index shares the database).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Creates the tables and, if no `stream_id` is stored yet, a stream's meta in one
    /// transaction (a crash half-way leaves no half-made stream). `existing` carries the meta
    /// and marks of a stream converted from an older layout; `None` mints a new stream.
    pub(crate) fn create_if_absent(
        &self,
        schema_json: Option<&str>,
        existing: Option<(&Meta, &HashMap<String, Mark>)>,
    ) -> Result<(), StorageError> {
        let result = (|| -> rusqlite::Result<()> {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            self.conn.execute_batch(CREATE_TABLES)?;
            let exists: Option<i64> = self
                .conn
                .query_row("SELECT 1 FROM meta WHERE key = 'stream_id'", [], |row| {
                    row.get(0)
                })
                .optional()?;
            if exists.is_none() {
                let fresh = Meta {
                    stream_id: uuid::Uuid::new_v4().to_string(),
                    schema_json: schema_json.map(str::to_owned),
                    created_at_us: super::buffer::now_us(),
                    floor: 1,
                    frontier: 1,
                    marks_through: 1,
                };
                let (meta, marks) = match existing {
                    Some((meta, marks)) => (meta, Some(marks)),
                    None => (&fresh, None),
                };
                let mut insert = self
                    .conn
                    .prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)")?;
                insert.execute(params!["format_version", FORMAT_VERSION])?;
                insert.execute(params!["stream_id", meta.stream_id])?;
                insert.execute(params!["schema", meta.schema_json])?;
                insert.execute(params!["created_at_us", meta.created_at_us])?;
                insert.execute(params!["floor", to_i64(meta.floor)])?;
                insert.execute(params!["frontier", to_i64(meta.frontier)])?;
                insert.execute(params!["marks_through", to_i64(meta.marks_through)])?;
                drop(insert);
                if let Some(marks) = marks {
                    write_marks(&self.conn, marks)?;
                }
            }
            self.conn.execute_batch("COMMIT")
        })();
        result.map_err(|source| {
            self.rollback();
            StorageError::sqlite(&self.path, "creating the stream's meta")(source)
        })
    }

    /// Reads `meta`.
    pub fn read(&self) -> Result<Meta, StorageError> {
        const OP: &str = "reading meta";
        let sqlite = || StorageError::sqlite(&self.path, OP);
        let mut statement = self
            .conn
            .prepare("SELECT key, value FROM meta")
            .map_err(sqlite())?;
        let mut rows = statement.query([]).map_err(sqlite())?;
        let mut values: HashMap<String, rusqlite::types::Value> = HashMap::new();
        while let Some(row) = rows.next().map_err(sqlite())? {
            let key = row.get(0).map_err(sqlite())?;
            values.insert(key, row.get(1).map_err(sqlite())?);
        }
        use rusqlite::types::Value;
        let missing = |key: &str| StorageError::Corrupt {
            path: self.path.clone(),
            detail: format!("meta key {key} missing or of the wrong type"),
        };
        let version = match values.get("format_version") {
            Some(Value::Integer(version)) => *version,
            _ => return Err(missing("format_version")),
        };
        if version != FORMAT_VERSION {
            return Err(StorageError::Format {
                path: self.path.clone(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let offset = |key: &str| match values.get(key) {
            Some(Value::Integer(offset)) if *offset >= 1 => Ok(*offset as u64),
            _ => Err(missing(key)),
        };
        let (floor, frontier, marks_through) = (
            offset("floor")?,
            offset("frontier")?,
            offset("marks_through")?,
        );
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
        Ok(Meta {
            stream_id,
            schema_json,
            created_at_us,
            floor,
            frontier,
            marks_through,
        })
    }

    /// The marks snapshot.
    pub fn marks(&self) -> Result<HashMap<String, Mark>, StorageError> {
        read_marks(&self.conn, &self.path, "reading publisher marks")
    }

    /// Raises the stored frontier to `frontier` (never lowers it).
    pub fn raise_frontier(&self, frontier: u64) -> Result<(), StorageError> {
        self.conn
            .execute(
                "UPDATE meta SET value = MAX(value, ?1) WHERE key = 'frontier'",
                [to_i64(frontier)],
            )
            .map(drop)
            .map_err(StorageError::sqlite(&self.path, "raising the frontier"))
    }

    /// Stores, in one transaction, the marks snapshot as of end offset `through`, the frontier
    /// and the floor: the step before segments below `floor` may be deleted.
    pub fn snapshot<'m>(
        &self,
        floor: u64,
        through: u64,
        marks: impl Iterator<Item = (&'m str, Mark)>,
    ) -> Result<(), StorageError> {
        let marks: HashMap<String, Mark> = marks.map(|(id, mark)| (id.to_owned(), mark)).collect();
        self.transaction("writing the marks snapshot and floor", |conn| {
            write_marks(conn, &marks)?;
            let mut update = conn.prepare("UPDATE meta SET value = ?2 WHERE key = ?1")?;
            update.execute(params!["floor", to_i64(floor)])?;
            update.execute(params!["marks_through", to_i64(through)])?;
            drop(update);
            conn.execute(
                "UPDATE meta SET value = MAX(value, ?1) WHERE key = 'frontier'",
                [to_i64(through)],
            )?;
            Ok(())
        })
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` … `COMMIT` transaction, rolled back on any error,
    /// which is reported as `op` on this database (the sealed tier's index writes through it too).
    pub(crate) fn transaction(
        &self,
        op: &'static str,
        body: impl FnOnce(&Connection) -> rusqlite::Result<()>,
    ) -> Result<(), StorageError> {
        let result = (|| -> rusqlite::Result<()> {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            body(&self.conn)?;
            self.conn.execute_batch("COMMIT")
        })();
        result.map_err(|source| {
            self.rollback();
            StorageError::sqlite(&self.path, op)(source)
        })
    }

    fn rollback(&self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// Creates, in `dir`, an empty log that starts at offset `start`: a migrated stream's next log
/// (its first offset is the previous log's end, the seam), with the same `stream_id`, the new
/// schema and the exactly-once `marks` carried over. Its `floor`, `frontier` and `marks_through`
/// are `start`, and so are the sealed tier's `sealed_end` and `dropped_through`, so the hot log,
/// the sealed tier and replay all begin there and no offset below it is ever issued again.
///
/// Built in `<dir>.creating` and renamed to `dir` once synced: a crash leaves either no log or
/// the whole one. If `dir` already holds a log (a migration that died after making it), that
/// log is accepted when it has this `stream_id` and starts at `start`, refused otherwise.
pub fn create_successor(
    dir: &Path,
    stream_id: &str,
    schema_json: Option<&str>,
    start: u64,
    marks: &HashMap<String, Mark>,
) -> Result<(), StorageError> {
    if dir.join(META_FILE_NAME).exists() {
        let (_, meta) = MetaDb::open(dir, None)?;
        if meta.stream_id != stream_id
            || meta.floor != start
            || meta.schema_json.as_deref() != schema_json
        {
            return Err(StorageError::Corrupt {
                path: dir.join(META_FILE_NAME),
                detail: format!(
                    "already holds a log (stream {}, from offset {}) that is not the successor being made (stream {stream_id}, from offset {start}, the given schema); move it away",
                    meta.stream_id, meta.floor
                ),
            });
        }
        return Ok(());
    }
    let mut tmp = dir.as_os_str().to_owned();
    tmp.push(".creating");
    let tmp = std::path::PathBuf::from(tmp);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .map_err(StorageError::io(&tmp, "removing a half-made log"))?;
    }
    std::fs::create_dir_all(&tmp).map_err(StorageError::io(&tmp, "creating the log directory"))?;
    {
        let db = MetaDb::connect(&tmp.join(META_FILE_NAME), true)?;
        let meta = Meta {
            stream_id: stream_id.to_owned(),
            schema_json: schema_json.map(str::to_owned),
            created_at_us: super::buffer::now_us(),
            floor: start,
            frontier: start,
            marks_through: start,
        };
        db.create_if_absent(schema_json, Some((&meta, marks)))?;
        db.transaction("starting the sealed tier at the seam", |c| {
            let mut insert =
                c.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)")?;
            insert.execute(params!["sealed_end", to_i64(start)])?;
            insert.execute(params!["dropped_through", to_i64(start)])?;
            Ok(())
        })?;
        // checkpointed into meta.db itself before the rename: the -wal file is not renamed apart
        db.conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .map_err(StorageError::sqlite(db.path(), "checkpointing"))?;
    }
    let sync = |p: &Path| -> Result<(), StorageError> {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(StorageError::io(p, "syncing"))
    };
    sync(&tmp.join(META_FILE_NAME))?;
    sync(&tmp)?;
    std::fs::rename(&tmp, dir).map_err(StorageError::io(dir, "renaming the new log into place"))?;
    if let Some(parent) = dir.parent() {
        sync(parent)?;
    }
    Ok(())
}

/// Reads a `publishers(id, last_seq, last_offset)` table: meta.db's snapshot, or the format-2
/// buffer's marks (same table) when converting it.
pub(crate) fn read_marks(
    conn: &Connection,
    path: &Path,
    op: &'static str,
) -> Result<HashMap<String, Mark>, StorageError> {
    let sqlite = || StorageError::sqlite(path, op);
    let mut statement = conn
        .prepare("SELECT id, last_seq, last_offset FROM publishers")
        .map_err(sqlite())?;
    let mut rows = statement.query([]).map_err(sqlite())?;
    let mut marks = HashMap::new();
    while let Some(row) = rows.next().map_err(sqlite())? {
        let columns: rusqlite::Result<(String, i64, Option<i64>)> =
            (|| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))();
        let (id, last_seq, last_offset) = columns.map_err(sqlite())?;
        let mark = Mark {
            last_seq: to_u64(last_seq, path, "publisher last_seq")?,
            last_offset: last_offset
                .map(|offset| to_u64(offset, path, "publisher last_offset"))
                .transpose()?,
        };
        marks.insert(id, mark);
    }
    Ok(marks)
}

/// Replaces the `publishers` table's contents with `marks` (inside an open transaction).
fn write_marks(conn: &Connection, marks: &HashMap<String, Mark>) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM publishers", [])?;
    let mut insert =
        conn.prepare("INSERT INTO publishers(id, last_seq, last_offset) VALUES (?1, ?2, ?3)")?;
    for (id, mark) in marks {
        insert.execute(params![
            id,
            to_i64(mark.last_seq),
            mark.last_offset.map(to_i64)
        ])?;
    }
    Ok(())
}

/// An offset or seq as SQLite stores it.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).expect("offsets and seqs stay below 2^63")
}

/// A stored integer that must not be negative.
pub(crate) fn to_u64(value: i64, path: &Path, what: &str) -> Result<u64, StorageError> {
    u64::try_from(value).map_err(|_| StorageError::Corrupt {
        path: path.to_owned(),
        detail: format!("negative {what} {value}"),
    })
}
