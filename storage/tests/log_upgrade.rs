//! A stream written by corecast before segment files (a format-2 SQLite `buffer.db`) is
//! converted in place the first time the writer opens it: same stream id, schema, offsets, `ts`,
//! row bytes and marks; the old files are gone afterwards; an interrupted conversion starts
//! over; format 1 is refused with what to do.

use std::path::Path;

use corecast_storage::log::block::BlockBuilder;
use corecast_storage::log::{Buffer, BufferReader, StorageError, LEGACY_DB_FILE_NAME};
use rusqlite::{params, Connection};

const SCHEMA: &str = r#"{"type":"object","properties":{"i":{"type":"integer"}}}"#;
const STREAM_ID: &str = "8a4d2c1e-52a7-4a3e-9b70-1f2e3d4c5b6a";

fn row(i: u64) -> Vec<u8> {
    format!("{{\"i\":{i},\"s\":\"{}\"}}", "é".repeat((i % 5) as usize)).into_bytes()
}

/// Writes a format-2 buffer holding rows `first..end` in blocks of `per_block`, `ts = 1000 +
/// offset / per_block`, and one publisher mark.
fn legacy_buffer(dir: &Path, first: u64, end: u64, per_block: u64, end_offset: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let conn = Connection::open(dir.join(LEGACY_DB_FILE_NAME)).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE blocks(\"offset\" INTEGER PRIMARY KEY, ts INTEGER NOT NULL, rows_count INTEGER NOT NULL, payload BLOB NOT NULL);
         CREATE TABLE publishers(id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_offset INTEGER);
         CREATE TABLE meta(key TEXT PRIMARY KEY, value);",
    )
    .unwrap();
    let meta = [
        ("format_version", rusqlite::types::Value::Integer(2)),
        ("stream_id", rusqlite::types::Value::Text(STREAM_ID.into())),
        ("schema", rusqlite::types::Value::Text(SCHEMA.into())),
        (
            "created_at_us",
            rusqlite::types::Value::Integer(1_600_000_000_000_000),
        ),
        (
            "end_offset",
            rusqlite::types::Value::Integer(end_offset as i64),
        ),
    ];
    for (key, value) in meta {
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)",
            params![key, value],
        )
        .unwrap();
    }
    let mut offset = first;
    while offset < end {
        let n = per_block.min(end - offset);
        let mut block = BlockBuilder::default();
        for o in offset..offset + n {
            block.push(&row(o)).unwrap();
        }
        conn.execute(
            "INSERT INTO blocks(\"offset\", ts, rows_count, payload) VALUES (?1, ?2, ?3, ?4)",
            params![
                offset as i64,
                1000 + (offset / per_block) as i64,
                n as i64,
                block.payload()
            ],
        )
        .unwrap();
        offset += n;
    }
    conn.execute(
        "INSERT INTO publishers(id, last_seq, last_offset) VALUES ('pub-1', 77, ?1)",
        [(end - 1) as i64],
    )
    .unwrap();
}

#[test]
fn a_format_2_buffer_is_converted_once_with_everything_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("trades");
    legacy_buffer(&dir, 1, 5001, 300, 5001);
    let mut buffer = Buffer::open(&dir, Some(SCHEMA)).unwrap();
    assert_eq!(buffer.converted_rows(), 5000);
    assert_eq!(buffer.stream_id(), STREAM_ID);
    assert_eq!(buffer.created_at_us(), 1_600_000_000_000_000);
    assert_eq!(buffer.end_offset(), 5001);
    let mark = buffer.publisher_mark("pub-1").unwrap();
    assert_eq!((mark.last_seq, mark.last_offset), (77, Some(5000)));
    assert!(
        !dir.join(LEGACY_DB_FILE_NAME).exists(),
        "the old buffer is gone"
    );
    let reader = buffer.reader().unwrap();
    let rows = reader.scan(1, u64::MAX, usize::MAX).unwrap();
    assert_eq!(rows.len(), 5000);
    for stored in &rows {
        assert_eq!(stored.payload, row(stored.offset));
        let block_start = 1 + (stored.offset - 1) / 300 * 300;
        assert_eq!(stored.ts_us, 1000 + (block_start / 300) as i64);
    }
    // and it goes on
    let more = [row(5001)];
    let outcomes = buffer
        .append(&[corecast_storage::log::AppendBatch::plain(&more)])
        .unwrap();
    assert_eq!(outcomes[0].offsets().unwrap(), [Some(5001)]);
    drop(buffer);
    drop(reader);
    let buffer = Buffer::open(&dir, Some(SCHEMA)).unwrap();
    assert_eq!(buffer.converted_rows(), 0, "once");
    assert_eq!(buffer.end_offset(), 5002);
}

#[test]
fn a_buffer_whose_old_rows_were_deleted_keeps_its_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    legacy_buffer(&dir, 400, 450, 16, 450);
    let buffer = Buffer::open(&dir, None).unwrap();
    assert_eq!(buffer.earliest(), Some(400));
    assert_eq!(buffer.end_offset(), 450);
    drop(buffer);
    let reader = BufferReader::open(&dir).unwrap();
    assert_eq!(reader.scan(0, u64::MAX, usize::MAX).unwrap()[0].offset, 400);
}

#[test]
fn an_interrupted_conversion_starts_over() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    legacy_buffer(&dir, 1, 1001, 100, 1001);
    // what a crash half-way through leaves: a partial log and meta under their temporary names
    std::fs::create_dir(dir.join("log.converting")).unwrap();
    std::fs::write(dir.join("log.converting/00000000000000000001.seg"), b"half").unwrap();
    std::fs::write(dir.join("meta.db.converting"), b"not yet a database").unwrap();
    let buffer = Buffer::open(&dir, None).unwrap();
    assert_eq!(buffer.converted_rows(), 1000);
    assert!(!dir.join("log.converting").exists());
    drop(buffer);
    let reader = BufferReader::open(&dir).unwrap();
    assert_eq!(reader.scan(0, u64::MAX, usize::MAX).unwrap().len(), 1000);
}

#[test]
fn format_1_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    legacy_buffer(&dir, 1, 3, 1, 3);
    let conn = Connection::open(dir.join(LEGACY_DB_FILE_NAME)).unwrap();
    conn.execute("UPDATE meta SET value = 1 WHERE key = 'format_version'", [])
        .unwrap();
    drop(conn);
    let error = Buffer::open(&dir, None).unwrap_err();
    assert!(
        matches!(error, StorageError::Legacy { found: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("corecast 0.1"), "{error}");
    assert!(dir.join(LEGACY_DB_FILE_NAME).exists(), "left as it was");
}
