//! The block layout under the log: commits cut into 64 KiB blocks, scans that start, stop and
//! limit anywhere inside and across blocks, oversized rows, damaged blocks, and the conversion
//! of a version-1 (one SQLite row per log row) buffer.

use corecast_storage::log::buffer::{BLOCK_TARGET_BYTES, FORMAT_VERSION};
use corecast_storage::log::{AppendBatch, Buffer, BufferReader, StorageError, DB_FILE_NAME};

/// A row of 60..=240 bytes whose bytes depend on `i`.
fn row(i: u64) -> Vec<u8> {
    format!(
        "{{\"i\":{i},\"pad\":\"{}\"}}",
        "y".repeat(50 + (i * 37 % 181) as usize)
    )
    .into_bytes()
}

fn blocks_in(dir: &std::path::Path) -> Vec<(i64, i64, usize)> {
    let raw = rusqlite::Connection::open(dir.join(DB_FILE_NAME)).unwrap();
    let mut statement = raw
        .prepare("SELECT \"offset\", rows_count, length(payload) FROM blocks ORDER BY \"offset\"")
        .unwrap();
    let blocks = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    blocks
}

#[test]
fn a_large_commit_is_cut_into_blocks_and_every_window_reads_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    // Three commits: 3,000 rows in batches of 500 (several blocks), 1 row, 700 rows.
    let mut next = 1;
    for sizes in [&[500_u64; 6][..], &[1], &[300, 400]] {
        let owned: Vec<Vec<Vec<u8>>> = sizes
            .iter()
            .map(|&n| {
                let batch = (next..next + n).map(row).collect();
                next += n;
                batch
            })
            .collect();
        let batches: Vec<AppendBatch<'_, Vec<u8>>> =
            owned.iter().map(|rows| AppendBatch::plain(rows)).collect();
        buffer.append(&batches).unwrap();
    }
    let end = next;
    assert_eq!(end, 3_702);

    // Blocks are contiguous, none over the target unless it holds one row, and a commit's
    // rows fill blocks across its batches.
    let blocks = blocks_in(tmp.path());
    let mut expect = 1;
    for &(offset, rows_count, payload_len) in &blocks {
        assert_eq!(offset, expect, "blocks are contiguous: {blocks:?}");
        assert!(payload_len <= BLOCK_TARGET_BYTES || rows_count == 1);
        expect += rows_count;
    }
    assert_eq!(expect as u64, end);
    let first_commit_blocks = blocks.iter().take_while(|b| b.0 <= 3_000).count();
    let first_commit_bytes: usize = (1..=3_000).map(|i| row(i).len() + 4).sum();
    assert_eq!(
        first_commit_blocks,
        first_commit_bytes.div_ceil(BLOCK_TARGET_BYTES).max(1),
        "{blocks:?}"
    );

    // Every start, every stop and several limits, inside and across blocks.
    let reader = buffer.reader().unwrap();
    let boundaries: Vec<u64> = blocks.iter().map(|b| b.0 as u64).collect();
    let mut starts: Vec<u64> = vec![0, 1, 2, end - 1, end, end + 5];
    for &b in &boundaries {
        starts.extend([b.saturating_sub(1), b, b + 1]);
    }
    for &from in &starts {
        for &to in &[from + 1, from + 2, from + 700, u64::MAX] {
            for &limit in &[1, 3, 1_000, usize::MAX] {
                let got = reader.scan(from, to, limit).unwrap();
                let first = from.max(1);
                let last = to.min(end);
                let want: Vec<u64> = (first..last).take(limit).collect();
                let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
                assert_eq!(offsets, want, "scan({from}, {to}, {limit})");
                for stored in &got {
                    assert_eq!(stored.payload, row(stored.offset));
                }
            }
        }
    }
    // The commit's rows share its ts; the next commit's ts is not earlier.
    let all = reader.scan(1, end, usize::MAX).unwrap();
    assert!(all[..3_000].iter().all(|r| r.ts_us == all[0].ts_us));
    assert!(all[3_000].ts_us >= all[2_999].ts_us);

    // Reopen: the end offset comes from the last block.
    drop(reader);
    drop(buffer);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), end);
    assert_eq!(buffer.reader().unwrap().earliest().unwrap(), Some(1));
}

#[test]
fn a_row_larger_than_a_block_gets_a_block_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let big = vec![b'z'; BLOCK_TARGET_BYTES * 3];
    let rows: Vec<Vec<u8>> = vec![row(1), big.clone(), row(3), big.clone(), big.clone()];
    buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    let blocks = blocks_in(tmp.path());
    let counts: Vec<i64> = blocks.iter().map(|b| b.1).collect();
    assert_eq!(counts, [1, 1, 1, 1, 1], "{blocks:?}");
    let stored = buffer.reader().unwrap().scan(1, 6, 10).unwrap();
    let payloads: Vec<Vec<u8>> = stored.into_iter().map(|r| r.payload).collect();
    assert_eq!(payloads, rows);
}

#[test]
fn a_damaged_block_is_reported_not_read_past() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let rows: Vec<Vec<u8>> = (1..=10).map(row).collect();
    buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    let raw = rusqlite::Connection::open(tmp.path().join(DB_FILE_NAME)).unwrap();
    raw.execute("UPDATE blocks SET rows_count = 11", [])
        .unwrap();
    let reader = buffer.reader().unwrap();
    // Rows before the damage still read; the damage itself is an error naming the block.
    assert_eq!(reader.scan(1, 11, 10).unwrap().len(), 10);
    let error = reader.scan(1, 100, 100).unwrap_err();
    assert!(matches!(error, StorageError::Corrupt { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("the block at offset 1") && message.contains("1 of its rows missing"),
        "{message}"
    );
    raw.execute(
        "UPDATE blocks SET rows_count = 10, payload = CAST(payload || x'00' AS BLOB)",
        [],
    )
    .unwrap();
    let message = reader.scan(1, 100, 100).unwrap_err().to_string();
    assert!(message.contains("1 bytes after the last"), "{message}");
}

/// Writes a buffer the way format version 1 laid it out: one SQLite row per log row.
fn write_version_1(dir: &std::path::Path, rows: &[(i64, i64, Vec<u8>)], end_offset: i64) {
    std::fs::create_dir_all(dir).unwrap();
    let raw = rusqlite::Connection::open(dir.join(DB_FILE_NAME)).unwrap();
    raw.pragma_update(None, "journal_mode", "WAL").unwrap();
    raw.execute_batch(
        "CREATE TABLE rows(\"offset\" INTEGER PRIMARY KEY, ts INTEGER NOT NULL, payload BLOB NOT NULL);
         CREATE TABLE publishers(id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, last_offset INTEGER);
         CREATE TABLE meta(key TEXT PRIMARY KEY, value);
         INSERT INTO meta VALUES ('format_version', 1), ('stream_id', '0e0c3a4e-7b43-4b0e-9f3c-3d6f1f0a1b2c'),
           ('schema', NULL), ('created_at_us', 1700000000000000);
         INSERT INTO publishers VALUES ('feed-a', 41, 5);",
    )
    .unwrap();
    raw.execute("INSERT INTO meta VALUES ('end_offset', ?1)", [end_offset])
        .unwrap();
    for (offset, ts, payload) in rows {
        raw.execute(
            "INSERT INTO rows VALUES (?1, ?2, ?3)",
            rusqlite::params![offset, ts, payload],
        )
        .unwrap();
    }
}

#[test]
fn a_version_1_buffer_is_converted_when_the_writer_opens_it() {
    let tmp = tempfile::tempdir().unwrap();
    // Rows 3..=8 survive (1 and 2 were deleted); 3..=5 share a ts, 6..=8 another; end 9.
    let v1: Vec<(i64, i64, Vec<u8>)> = (3..=8)
        .map(|i| (i, if i <= 5 { 1_000 } else { 2_000 }, row(i as u64)))
        .collect();
    write_version_1(tmp.path(), &v1, 9);

    // A reader alone does not convert; it says what will.
    let error = BufferReader::open(tmp.path()).unwrap_err().to_string();
    assert!(
        error.contains("format_version 1, this build reads 2") && error.contains("converts it"),
        "{error}"
    );
    // And a newer layout is refused by the writer too, naming it.
    let newer = tempfile::tempdir().unwrap();
    write_version_1(newer.path(), &[], 1);
    let raw = rusqlite::Connection::open(newer.path().join(DB_FILE_NAME)).unwrap();
    raw.execute("UPDATE meta SET value = 3 WHERE key = 'format_version'", [])
        .unwrap();
    let error = Buffer::open(newer.path(), None).unwrap_err();
    assert!(
        matches!(
            error,
            StorageError::Format {
                found: 3,
                supported: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("newer corecast"), "{error}");

    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.converted_rows(), 6);
    assert_eq!(buffer.end_offset(), 9);
    assert_eq!(buffer.stream_id(), "0e0c3a4e-7b43-4b0e-9f3c-3d6f1f0a1b2c");
    let mark = buffer.publisher_mark("feed-a").unwrap();
    assert_eq!((mark.last_seq, mark.last_offset), (41, Some(5)));
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.earliest().unwrap(), Some(3));
    let stored = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    let back: Vec<(i64, i64, Vec<u8>)> = stored
        .into_iter()
        .map(|r| (r.offset as i64, r.ts_us, r.payload))
        .collect();
    assert_eq!(back, v1);
    let counts: Vec<(i64, i64)> = blocks_in(tmp.path()).iter().map(|b| (b.0, b.1)).collect();
    assert_eq!(counts, [(3, 3), (6, 3)]);

    // The old table is gone, the version recorded, and appends go on from the end offset.
    let raw = rusqlite::Connection::open(tmp.path().join(DB_FILE_NAME)).unwrap();
    let old_tables: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'rows'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old_tables, 0);
    let version: i64 = raw
        .query_row(
            "SELECT value FROM meta WHERE key = 'format_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, FORMAT_VERSION);
    let more = vec![row(9)];
    buffer.append(&[AppendBatch::plain(&more)]).unwrap();
    assert_eq!(reader.scan(9, 10, 1).unwrap()[0].payload, row(9));
    drop(reader);
    drop(buffer);
    // Opening again changes nothing.
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.converted_rows(), 0);
    assert_eq!(buffer.end_offset(), 10);
}
