//! The segment index: which sealed Parquet files a stream has, in its `meta.db`.
//!
//! - `segments(first_offset, last_offset, min_ts, max_ts, rows, bytes, file, columns,
//!   sealed_at_us)`: one row per sealed file, in offset order, contiguous (each starts at the
//!   offset after the one before ends), `columns` the JSON of the per-column min/max the sealer
//!   read from the Parquet statistics.
//! - `meta.sealed_end`: the offset after the last sealed row. Rows below it are in a recorded
//!   segment or were dropped by retention; rows at or above it are only in the hot log. It never
//!   goes down, so a row is sealed once.
//!
//! The crash protocol ([`super::seal`]): a file is written under a temporary name, `fsync`ed,
//! renamed, the directory `fsync`ed, and only then recorded here (one transaction with
//! `sealed_end`); hot segments wholly below `sealed_end` may be evicted only after that. A crash
//! anywhere leaves every row in the hot log, in a recorded segment, or both. Files in
//! `segments/` that are not recorded are leftovers of a crash and are removed by
//! [`SegmentIndex::sweep`] at open; a recorded file that is missing is a hard error naming it.
//!
//! Runs on the maintenance thread (sealing, retention) and at start-up; readers of the sealed
//! tier take the entries from the engine's in-memory copy.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::{params, OptionalExtension};

use super::parquet_write::{ColumnStats, SegmentStats, StatValue};
use crate::log::meta::{to_i64, to_u64, MetaDb, META_FILE_NAME};
use crate::log::StorageError;

/// The directory of sealed segment files inside a stream's directory.
pub const SEGMENTS_DIR_NAME: &str = "segments";

/// The suffix of a segment file being written (never recorded; removed at open).
pub const TMP_SUFFIX: &str = ".parquet.tmp";

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS segments(
    first_offset INTEGER PRIMARY KEY,
    last_offset INTEGER NOT NULL,
    min_ts INTEGER NOT NULL,
    max_ts INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    file TEXT NOT NULL UNIQUE,
    columns TEXT NOT NULL,
    sealed_at_us INTEGER NOT NULL,
    crc32c INTEGER
);
INSERT OR IGNORE INTO meta(key, value) VALUES ('sealed_end', 1);
INSERT OR IGNORE INTO meta(key, value) VALUES ('dropped_through', 1);
";

/// One sealed segment file as the index records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Its first row's offset.
    pub first_offset: u64,
    /// Its last row's offset (the file holds every offset in between).
    pub last_offset: u64,
    /// The smallest `streamcast_ts` in it.
    pub min_ts: i64,
    /// The largest `streamcast_ts` in it (retention compares this with the cutoff).
    pub max_ts: i64,
    /// Rows in it (`last_offset - first_offset + 1`).
    pub rows: u64,
    /// The file's size in bytes.
    pub bytes: u64,
    /// The file's name inside `segments/`.
    pub file: String,
    /// Per-column min/max/null count as JSON (`{"price":{"min":…,"max":…,"nulls":0},…}`).
    pub columns: String,
    /// When it was sealed, µs since the Unix epoch.
    pub sealed_at_us: i64,
    /// CRC32C of the whole file as written (Parquet pages carry none): a reader checks it before
    /// it trusts the file.
    pub crc32c: Option<u32>,
}

impl SegmentEntry {
    /// The offset after its last row.
    pub fn end_offset(&self) -> u64 {
        self.last_offset + 1
    }

    /// Whether it holds `offset`.
    pub fn holds(&self, offset: u64) -> bool {
        (self.first_offset..=self.last_offset).contains(&offset)
    }
}

/// The name of the segment file holding `first..=last`: both offsets in 20 digits, so names
/// sort as offsets.
pub fn segment_file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.parquet")
}

/// The index of one stream's sealed segments (a connection on its `meta.db`).
#[derive(Debug)]
pub struct SegmentIndex {
    db: MetaDb,
    dir: PathBuf,
}

impl SegmentIndex {
    /// Opens the index of the stream in `stream_dir` (whose `meta.db` the hot log created),
    /// creating the table and `segments/` if absent.
    pub fn open(stream_dir: &Path) -> Result<SegmentIndex, StorageError> {
        let path = stream_dir.join(META_FILE_NAME);
        if !path.exists() {
            return Err(StorageError::Io {
                path,
                op: "opening the segment index (the stream's hot log was never opened)",
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let db = MetaDb::connect(&path, false)?;
        db.conn()
            .execute_batch(CREATE)
            .map_err(StorageError::sqlite(&path, "creating the segment index"))?;
        let has_crc: bool = db
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('segments') WHERE name = 'crc32c'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(StorageError::sqlite(
                &path,
                "reading the segment index's columns",
            ))?;
        if !has_crc {
            db.conn()
                .execute_batch("ALTER TABLE segments ADD COLUMN crc32c INTEGER")
                .map_err(StorageError::sqlite(
                    &path,
                    "adding crc32c to the segment index",
                ))?;
        }
        let dir = stream_dir.join(SEGMENTS_DIR_NAME);
        std::fs::create_dir_all(&dir)
            .map_err(StorageError::io(&dir, "creating the segments directory"))?;
        Ok(SegmentIndex { db, dir })
    }

    /// The `segments/` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a recorded file.
    pub fn path_of(&self, entry: &SegmentEntry) -> PathBuf {
        self.dir.join(&entry.file)
    }

    /// Every recorded segment, in offset order.
    pub fn entries(&self) -> Result<Vec<SegmentEntry>, StorageError> {
        let path = self.db.path();
        let sqlite = || StorageError::sqlite(path, "reading the segment index");
        let mut statement = self
            .db
            .conn()
            .prepare(
                "SELECT first_offset, last_offset, min_ts, max_ts, rows, bytes, file, columns, \
                 sealed_at_us, crc32c FROM segments ORDER BY first_offset",
            )
            .map_err(sqlite())?;
        let mut rows = statement.query([]).map_err(sqlite())?;
        let mut entries: Vec<SegmentEntry> = Vec::new();
        while let Some(row) = rows.next().map_err(sqlite())? {
            let int = |i: usize| -> Result<i64, StorageError> { row.get(i).map_err(sqlite()) };
            let text = |i: usize| -> Result<String, StorageError> { row.get(i).map_err(sqlite()) };
            let (first, last, min_ts, max_ts, count, bytes) =
                (int(0)?, int(1)?, int(2)?, int(3)?, int(4)?, int(5)?);
            let (file, columns, sealed_at_us) = (text(6)?, text(7)?, int(8)?);
            let crc: Option<i64> = row.get(9).map_err(sqlite())?;
            let entry = SegmentEntry {
                first_offset: to_u64(first, path, "segment first_offset")?,
                last_offset: to_u64(last, path, "segment last_offset")?,
                min_ts,
                max_ts,
                rows: to_u64(count, path, "segment rows")?,
                bytes: to_u64(bytes, path, "segment bytes")?,
                file,
                columns,
                sealed_at_us,
                crc32c: crc.map(|c| c as u32),
            };
            let corrupt = |detail: String| StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!("segment index, {}: {detail}", entry.file),
            };
            if entry.last_offset < entry.first_offset
                || entry.rows != entry.last_offset - entry.first_offset + 1
            {
                return Err(corrupt(format!(
                    "offsets {}..={} do not hold {} rows",
                    entry.first_offset, entry.last_offset, entry.rows
                )));
            }
            if let Some(before) = entries.last() {
                if before.end_offset() != entry.first_offset {
                    return Err(corrupt(format!(
                        "starts at offset {}, but the segment before ends at {}",
                        entry.first_offset, before.last_offset
                    )));
                }
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The offset after the last sealed row (1 when nothing was ever sealed).
    pub fn sealed_end(&self) -> Result<u64, StorageError> {
        self.offset_key("sealed_end")
    }

    /// The offset after the last row retention dropped (1 when it never dropped any): the
    /// recorded segments start there.
    pub fn dropped_through(&self) -> Result<u64, StorageError> {
        self.offset_key("dropped_through")
    }

    fn offset_key(&self, key: &str) -> Result<u64, StorageError> {
        let path = self.db.path();
        let value: Option<rusqlite::types::Value> = self
            .db
            .conn()
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
                row.get(0)
            })
            .optional()
            .map_err(StorageError::sqlite(
                path,
                "reading the segment index's offsets",
            ))?;
        match value {
            Some(rusqlite::types::Value::Integer(v)) if v >= 1 => Ok(v as u64),
            _ => Err(StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!("meta key {key} missing or not an offset"),
            }),
        }
    }

    /// Records a segment file already durable under `file` in `segments/`, and moves
    /// `sealed_end` past it, in one transaction. The segment must start at `sealed_end`.
    pub fn record(
        &self,
        file: &str,
        stats: &SegmentStats,
        sealed_at_us: i64,
        crc32c: u32,
    ) -> Result<SegmentEntry, StorageError> {
        let path = self.db.path();
        let (Some((first, last)), Some((min_ts, max_ts))) = (stats.offsets, stats.ts) else {
            return Err(StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!("{file}: an empty segment is never recorded"),
            });
        };
        let sealed_end = self.sealed_end()?;
        if first != sealed_end {
            return Err(StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!(
                    "{file}: a segment from offset {first} cannot follow sealed_end {sealed_end}"
                ),
            });
        }
        let entry = SegmentEntry {
            first_offset: first,
            last_offset: last,
            min_ts,
            max_ts,
            rows: stats.rows,
            bytes: stats.bytes,
            file: file.to_owned(),
            columns: columns_json(&stats.columns),
            sealed_at_us,
            crc32c: Some(crc32c),
        };
        self.db.transaction("recording a sealed segment", |conn| {
            conn.execute(
                "INSERT INTO segments(first_offset, last_offset, min_ts, max_ts, rows, bytes, \
                 file, columns, sealed_at_us, crc32c) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    to_i64(entry.first_offset),
                    to_i64(entry.last_offset),
                    entry.min_ts,
                    entry.max_ts,
                    to_i64(entry.rows),
                    to_i64(entry.bytes),
                    entry.file,
                    entry.columns,
                    entry.sealed_at_us,
                    i64::from(crc32c),
                ],
            )?;
            conn.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'sealed_end'",
                [to_i64(entry.end_offset())],
            )?;
            Ok(())
        })?;
        Ok(entry)
    }

    /// Forgets the oldest recorded segment, which must be `entry` (retention drops segments
    /// oldest first, so the sealed tier stays contiguous), then deletes its file. A crash
    /// between the two leaves an unrecorded file that [`sweep`](Self::sweep) removes.
    pub fn drop_oldest(&self, entry: &SegmentEntry) -> Result<(), StorageError> {
        let path = self.db.path();
        let oldest: Option<i64> = self
            .db
            .conn()
            .query_row("SELECT MIN(first_offset) FROM segments", [], |row| {
                row.get(0)
            })
            .map_err(StorageError::sqlite(path, "reading the segment index"))?;
        if oldest != Some(to_i64(entry.first_offset)) {
            return Err(StorageError::Corrupt {
                path: path.to_owned(),
                detail: format!(
                    "{}: only the oldest segment may be dropped (the oldest starts at {oldest:?})",
                    entry.file
                ),
            });
        }
        self.db
            .transaction("dropping a segment from the index", |conn| {
                conn.execute(
                    "DELETE FROM segments WHERE first_offset = ?1",
                    [to_i64(entry.first_offset)],
                )?;
                conn.execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'dropped_through'",
                    [to_i64(entry.end_offset())],
                )?;
                Ok(())
            })?;
        let file = self.path_of(entry);
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&file, "deleting a dropped segment")(e)),
        }
        crate::log::segment::sync_dir(&self.dir).map_err(StorageError::io(
            &self.dir,
            "syncing the segments directory",
        ))
    }

    /// Checks `segments/` against the index: removes what a crash left (a file being written,
    /// one written at or after `sealed_end` but never recorded, one retention dropped from the
    /// index but had not deleted yet) and returns their names. Refuses, naming it, a recorded
    /// file that is missing or whose size differs from the recorded one, a recorded range that
    /// does not run from `dropped_through` to `sealed_end`, and an unrecorded segment file
    /// inside that range (the index lost it: `meta.db` damaged or restored from an older copy).
    /// Files and directories not named as segments are left alone.
    pub fn sweep(&self) -> Result<Vec<String>, StorageError> {
        let entries = self.entries()?;
        let sealed_end = self.sealed_end()?;
        let dropped_through = self.dropped_through()?;
        let index_path = self.db.path().to_owned();
        let refuse = |path: PathBuf, detail: String| StorageError::Corrupt { path, detail };
        // the recorded segments cover dropped_through..sealed_end, no more, no less
        let covered = match (entries.first(), entries.last()) {
            (Some(first), Some(last)) => (first.first_offset, last.end_offset()),
            _ => (sealed_end, sealed_end),
        };
        if covered != (dropped_through, sealed_end) {
            return Err(refuse(
                index_path,
                format!(
                    "the segment index records offsets {}..{} but the sealed tier holds {dropped_through}..{sealed_end} (meta keys dropped_through and sealed_end): rows would be in no tier; restore meta.db or its segments table",
                    covered.0, covered.1
                ),
            ));
        }
        let recorded: HashSet<&str> = entries.iter().map(|e| e.file.as_str()).collect();
        let mut removed = Vec::new();
        let listing = std::fs::read_dir(&self.dir).map_err(StorageError::io(
            &self.dir,
            "listing the segments directory",
        ))?;
        for item in listing {
            let item = item.map_err(StorageError::io(
                &self.dir,
                "listing the segments directory",
            ))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if recorded.contains(name.as_str()) || !item.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let leftover = if name.ends_with(TMP_SUFFIX) {
                true
            } else if let Some((first, last)) = parse_segment_file_name(&name) {
                if last < dropped_through || first >= sealed_end {
                    true
                } else {
                    return Err(refuse(
                        item.path(),
                        format!(
                            "a sealed segment of offsets {first}..={last} that the segment index does not record, although it says offsets {dropped_through}..{sealed_end} are sealed: meta.db lost it (damaged, or restored from an older copy); restore meta.db, or move the file away to give its rows up"
                        ),
                    ));
                }
            } else {
                false
            };
            if leftover {
                let path = item.path();
                std::fs::remove_file(&path).map_err(StorageError::io(
                    &path,
                    "removing an unrecorded segment file",
                ))?;
                removed.push(name);
            }
        }
        for entry in &entries {
            let path = self.path_of(entry);
            let found = std::fs::metadata(&path).map(|m| m.len());
            match found {
                Ok(len) if len == entry.bytes => {}
                Ok(len) => {
                    return Err(StorageError::Corrupt {
                        path,
                        detail: format!(
                            "sealed segment of offsets {}..={} is {len} bytes, the index recorded {}",
                            entry.first_offset, entry.last_offset, entry.bytes
                        ),
                    })
                }
                Err(e) => {
                    return Err(StorageError::Corrupt {
                        path,
                        detail: format!(
                            "sealed segment of offsets {}..={} recorded in the index is missing ({e}); restore the file (rows cannot be given up from the middle of the sealed tier)",
                            entry.first_offset, entry.last_offset
                        ),
                    })
                }
            }
        }
        if !removed.is_empty() {
            crate::log::segment::sync_dir(&self.dir).map_err(StorageError::io(
                &self.dir,
                "syncing the segments directory",
            ))?;
        }
        Ok(removed)
    }
}

/// `(first, last)` of a segment file name (`<first:020>-<last:020>.parquet`).
pub fn parse_segment_file_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".parquet")?;
    let (first, last) = stem.split_once('-')?;
    if first.len() != 20 || last.len() != 20 {
        return None;
    }
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// CRC32C of a whole file (the check a reader makes against [`SegmentEntry::crc32c`]).
pub fn file_crc32c(path: &Path) -> std::io::Result<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// The per-column statistics as the index stores them.
fn columns_json(columns: &[ColumnStats]) -> String {
    let mut out = String::from("{");
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&quote(&column.name));
        out.push_str(":{\"min\":");
        stat_json(column.min.as_ref(), &mut out);
        out.push_str(",\"max\":");
        stat_json(column.max.as_ref(), &mut out);
        out.push_str(",\"nulls\":");
        out.push_str(&column.nulls.to_string());
        out.push('}');
    }
    out.push('}');
    out
}

fn stat_json(value: Option<&StatValue>, out: &mut String) {
    match value {
        None => out.push_str("null"),
        Some(StatValue::Boolean(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(StatValue::Int(i)) => out.push_str(&i.to_string()),
        Some(StatValue::Float(f)) if f.is_finite() => out.push_str(&f.to_string()),
        Some(StatValue::Float(_)) => out.push_str("null"),
        Some(StatValue::Text(s)) => out.push_str(&quote(s)),
        Some(StatValue::Bytes(b)) => out.push_str(&quote(&hex::encode(b))),
    }
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_offsets() {
        assert_eq!(
            segment_file_name(1, 99),
            "00000000000000000001-00000000000000000099.parquet"
        );
        assert!(segment_file_name(99, 100) < segment_file_name(101, 200));
    }

    #[test]
    fn column_statistics_are_json() {
        let json = columns_json(&[
            ColumnStats {
                name: "p\"x".into(),
                min: Some(StatValue::Float(1.5)),
                max: Some(StatValue::Float(f64::NAN)),
                nulls: 2,
            },
            ColumnStats {
                name: "b".into(),
                min: Some(StatValue::Bytes(vec![0xab])),
                max: None,
                nulls: 0,
            },
        ]);
        assert_eq!(
            json,
            r#"{"p\"x":{"min":1.5,"max":null,"nulls":2},"b":{"min":"ab","max":null,"nulls":0}}"#
        );
        let _: sonic_rs::Value = sonic_rs::from_str(&json).unwrap();
    }
}
