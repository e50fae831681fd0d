//! Converts a stream written by corecast before segment files (a format-2 SQLite `buffer.db`:
//! rows in 64 KiB `blocks`, marks in `publishers`, constants in `meta`) into the current layout
//! (`meta.db` + `log/*.seg`), once, when the writer opens it.
//!
//! The new layout is built beside the old one and committed by a rename: segments go to
//! `log.converting/` (each synced), then `meta.db.converting` (same `stream_id`, schema, creation
//! time, end offset and marks; synced) — renamed to `log/`, then to `meta.db`, which is the
//! commit point — and only then is `buffer.db` removed. A crash before the commit point leaves
//! the old buffer as it was and the next open starts over; a crash after it leaves a converted
//! stream and a `buffer.db` that the next open removes. One record per block: offsets, `ts` and
//! the row bytes are unchanged. Format 1 (one SQLite row per log row) is no longer converted:
//! open such a stream once with a corecast release that reads it, which rewrites it as format 2.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::block;
use super::buffer::{uuid_bytes, LogOptions, LOG_DIR_NAME};
use super::error::StorageError;
use super::meta::{to_u64, Meta, MetaDb, META_FILE_NAME};
use super::record::RecordBuilder;
use super::segment::{self, SegmentHeader, SEGMENT_HEADER_LEN};

/// The SQLite buffer of corecast before segment files.
pub const LEGACY_DB_FILE_NAME: &str = "buffer.db";

/// The suffix of what a conversion builds before it is committed.
const CONVERTING: &str = ".converting";

/// If `dir` holds a `buffer.db` and no `meta.db`, converts it; if it holds both (a conversion
/// committed, then interrupted), removes the old files. Returns the rows converted.
pub(crate) fn convert_if_needed(dir: &Path, options: LogOptions) -> Result<u64, StorageError> {
    let legacy = dir.join(LEGACY_DB_FILE_NAME);
    let meta_path = dir.join(META_FILE_NAME);
    if !legacy.exists() {
        return Ok(0);
    }
    if meta_path.exists() {
        remove_legacy(dir)?;
        return Ok(0);
    }
    let log_tmp = dir.join(format!("{LOG_DIR_NAME}{CONVERTING}"));
    let meta_tmp = dir.join(format!("{META_FILE_NAME}{CONVERTING}"));
    clear_partial(dir, &log_tmp, &meta_tmp)?;

    let sqlite = |op| StorageError::sqlite(&legacy, op);
    let conn = Connection::open_with_flags(
        &legacy,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite("opening the format-2 buffer to convert it"))?;
    let (legacy_meta, end_offset) = read_legacy_meta(&conn, &legacy)?;
    let marks = super::meta::read_marks(&conn, &legacy, "reading the old buffer's marks")?;

    std::fs::create_dir(&log_tmp)
        .map_err(StorageError::io(&log_tmp, "creating the converted log"))?;
    let stream_uuid = uuid_bytes(&legacy_meta.stream_id, &legacy)?;
    let mut writer = SegmentsWriter {
        dir: log_tmp.clone(),
        options,
        stream_uuid,
        current: None,
        record: RecordBuilder::default(),
    };
    let mut statement = conn
        .prepare("SELECT \"offset\", ts, rows_count, payload FROM blocks ORDER BY \"offset\"")
        .map_err(sqlite("reading blocks to convert"))?;
    let mut blocks = statement
        .query([])
        .map_err(sqlite("reading blocks to convert"))?;
    let mut rows_converted = 0u64;
    let mut first_held: Option<u64> = None;
    let mut next: Option<u64> = None;
    while let Some(row) = blocks.next().map_err(sqlite("reading blocks to convert"))? {
        let columns: rusqlite::Result<(i64, i64, i64, &[u8])> = (|| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get_ref(3)?.as_blob()?,
            ))
        })();
        let (offset, ts_us, rows_count, payload) =
            columns.map_err(sqlite("reading blocks to convert"))?;
        let offset = to_u64(offset, &legacy, "block offset")?;
        let rows_count = to_u64(rows_count, &legacy, "block rows_count")?;
        let corrupt = |detail: String| StorageError::Corrupt {
            path: legacy.clone(),
            detail: format!("the block at offset {offset}: {detail}"),
        };
        if let Some(expected) = next {
            if offset != expected {
                return Err(corrupt(format!(
                    "offsets {expected}..{offset} are in no block: a hole in the old buffer, which segment files cannot hold"
                )));
            }
        }
        first_held.get_or_insert(offset);
        writer.record.begin(offset, ts_us);
        for entry in block::entries(payload, rows_count) {
            let entry = entry.map_err(|malformed| corrupt(malformed.0))?;
            writer
                .record
                .push_row(entry)
                .map_err(|too_large| corrupt(too_large.to_string()))?;
        }
        if rows_count > 0 {
            writer.append()?;
        }
        rows_converted += rows_count;
        next = Some(offset + rows_count);
    }
    drop(blocks);
    drop(statement);
    writer.finish()?;
    if let Some(next) = next {
        if next != end_offset {
            return Err(StorageError::Corrupt {
                path: legacy,
                detail: format!(
                    "the last block ends at offset {next} but the stored end_offset is {end_offset}"
                ),
            });
        }
    }
    drop(conn);

    let meta = Meta {
        floor: first_held.unwrap_or(end_offset),
        frontier: end_offset,
        marks_through: end_offset,
        ..legacy_meta
    };
    {
        let db = MetaDb::connect(&meta_tmp, true)?;
        db.create_if_absent(meta.schema_json.as_deref(), Some((&meta, &marks)))?;
    }
    // the WAL was checkpointed into the file when the connection closed
    File::open(&meta_tmp)
        .and_then(|f| f.sync_all())
        .map_err(StorageError::io(&meta_tmp, "syncing the converted meta"))?;
    let log_dir = dir.join(LOG_DIR_NAME);
    if log_dir.exists() {
        std::fs::remove_dir_all(&log_dir)
            .map_err(StorageError::io(&log_dir, "removing a stale log directory"))?;
    }
    std::fs::rename(&log_tmp, &log_dir)
        .map_err(StorageError::io(&log_tmp, "committing the converted log"))?;
    segment::sync_dir(dir).map_err(StorageError::io(dir, "syncing the stream directory"))?;
    std::fs::rename(&meta_tmp, &meta_path)
        .map_err(StorageError::io(&meta_tmp, "committing the converted meta"))?;
    segment::sync_dir(dir).map_err(StorageError::io(dir, "syncing the stream directory"))?;
    remove_legacy(dir)?;
    Ok(rows_converted)
}

/// Removes what an interrupted conversion built (nothing was committed).
fn clear_partial(dir: &Path, log_tmp: &Path, meta_tmp: &Path) -> Result<(), StorageError> {
    if log_tmp.exists() {
        std::fs::remove_dir_all(log_tmp).map_err(StorageError::io(
            log_tmp,
            "removing an interrupted conversion",
        ))?;
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let path = PathBuf::from(format!("{}{suffix}", meta_tmp.display()));
        if path.exists() {
            std::fs::remove_file(&path).map_err(StorageError::io(
                &path,
                "removing an interrupted conversion",
            ))?;
        }
    }
    let _ = dir;
    Ok(())
}

/// Removes the old buffer's files once the conversion is committed.
fn remove_legacy(dir: &Path) -> Result<(), StorageError> {
    for name in ["buffer.db", "buffer.db-wal", "buffer.db-shm", "buffer.lock"] {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&path, "removing the converted buffer")(e)),
        }
    }
    segment::sync_dir(dir).map_err(StorageError::io(dir, "syncing the stream directory"))
}

fn read_legacy_meta(conn: &Connection, path: &Path) -> Result<(Meta, u64), StorageError> {
    let sqlite = |op| StorageError::sqlite(path, op);
    let value = |key: &str| -> Result<rusqlite::types::Value, StorageError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
            row.get(0)
        })
        .map_err(sqlite("reading the old buffer's meta"))
    };
    use rusqlite::types::Value;
    let missing = |key: &str| StorageError::Corrupt {
        path: path.to_owned(),
        detail: format!("meta key {key} missing or of the wrong type"),
    };
    match value("format_version")? {
        Value::Integer(2) => {}
        Value::Integer(found) => {
            return Err(StorageError::Legacy {
                path: path.to_owned(),
                found,
            })
        }
        _ => return Err(missing("format_version")),
    }
    let Value::Text(stream_id) = value("stream_id")? else {
        return Err(missing("stream_id"));
    };
    let schema_json = match value("schema")? {
        Value::Text(schema) => Some(schema),
        Value::Null => None,
        _ => return Err(missing("schema")),
    };
    let Value::Integer(created_at_us) = value("created_at_us")? else {
        return Err(missing("created_at_us"));
    };
    let end_offset = match value("end_offset")? {
        Value::Integer(offset) if offset >= 1 => offset as u64,
        _ => return Err(missing("end_offset")),
    };
    Ok((
        Meta {
            stream_id,
            schema_json,
            created_at_us,
            floor: 1,
            frontier: end_offset,
            marks_through: end_offset,
        },
        end_offset,
    ))
}

/// Writes converted records into segment files, rolling at the configured size.
struct SegmentsWriter {
    dir: PathBuf,
    options: LogOptions,
    stream_uuid: [u8; 16],
    /// The segment being filled: file, path, write position, capacity.
    current: Option<(File, PathBuf, u64, u64)>,
    record: RecordBuilder,
}

impl SegmentsWriter {
    /// Appends the record built in `self.record`.
    fn append(&mut self) -> Result<(), StorageError> {
        let bytes = self.record.finish().to_vec();
        let first_offset = super::record::parse_header(&bytes)
            .expect("a record just built")
            .first_offset;
        let len = bytes.len() as u64;
        if self
            .current
            .as_ref()
            .is_none_or(|(_, _, pos, capacity)| pos + len > *capacity)
        {
            self.finish()?;
            let path = self.dir.join(segment::file_name(first_offset));
            let capacity = self
                .options
                .segment_bytes
                .max(super::record::padded(SEGMENT_HEADER_LEN + len));
            let file = segment::preallocate(&path, capacity, false)
                .map_err(StorageError::io(&path, "preallocating a converted segment"))?;
            let header = SegmentHeader {
                first_offset,
                created_us: super::buffer::now_us(),
                stream_id: self.stream_uuid,
            };
            file.write_all_at(&header.encode(), 0)
                .map_err(StorageError::io(&path, "writing a converted segment"))?;
            self.current = Some((file, path, SEGMENT_HEADER_LEN, capacity));
        }
        let (file, path, pos, _) = self.current.as_mut().expect("a current segment");
        file.write_all_at(&bytes, *pos)
            .map_err(StorageError::io(path, "writing a converted segment"))?;
        *pos += len;
        Ok(())
    }

    /// Syncs the segment being filled.
    fn finish(&mut self) -> Result<(), StorageError> {
        if let Some((file, path, _, _)) = self.current.take() {
            file.sync_data()
                .map_err(StorageError::io(&path, "syncing a converted segment"))?;
        }
        Ok(())
    }
}
