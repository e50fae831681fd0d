//! Adversarial checks of the block layout: damaged blocks of every kind are errors naming the
//! block (never a panic, never a loop), a commit that fails after some of its blocks were
//! inserted leaves nothing behind and retries exactly, and rows sized right at the block target.

use corecast_storage::log::buffer::BLOCK_TARGET_BYTES;
use corecast_storage::log::{AppendBatch, BatchOutcome, Buffer, BufferReader, DB_FILE_NAME};

fn row(i: u64) -> Vec<u8> {
    format!(
        "{{\"i\":{i},\"pad\":\"{}\"}}",
        "q".repeat((i * 53 % 300) as usize)
    )
    .into_bytes()
}

fn raw(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(DB_FILE_NAME)).unwrap()
}

/// A buffer holding rows 1..=n in commits of 250 (several blocks each with 1 KiB rows).
fn filled(dir: &std::path::Path, n: u64) -> Buffer {
    let mut buffer = Buffer::open(dir, None).unwrap();
    let rows: Vec<Vec<u8>> = (1..=n).map(row).collect();
    for chunk in rows.chunks(250) {
        buffer.append(&[AppendBatch::plain(chunk)]).unwrap();
    }
    buffer
}

/// Every scan window over a damaged buffer ends, and either reads rows or reports an error;
/// a reopen of the writer does not panic either.
fn scans_end_without_panic(dir: &std::path::Path, end: u64) -> Vec<String> {
    let reader = BufferReader::open(dir).unwrap();
    let mut errors = Vec::new();
    for from in [0, 1, 2, end / 2, end.saturating_sub(1), end, u64::MAX] {
        for (to, limit) in [
            (u64::MAX, usize::MAX),
            (end, 1),
            (from.saturating_add(3), 2),
        ] {
            if let Err(e) = reader.scan(from, to, limit) {
                errors.push(e.to_string());
            }
        }
    }
    let _ = reader.earliest();
    errors
}

#[test]
fn damaged_blocks_are_errors_not_panics() {
    // (description, SQL applied to a healthy buffer of 1,000 rows, an error is expected)
    let damage: &[(&str, &str, bool)] = &[
        ("negative rows_count", "UPDATE blocks SET rows_count = -1 WHERE \"offset\" = (SELECT MIN(\"offset\") FROM blocks)", true),
        ("huge rows_count", "UPDATE blocks SET rows_count = 9223372036854775807 WHERE \"offset\" = (SELECT MIN(\"offset\") FROM blocks)", true),
        ("huge rows_count on the last block", "UPDATE blocks SET rows_count = 9223372036854775807 WHERE \"offset\" = (SELECT MAX(\"offset\") FROM blocks)", true),
        ("zero rows_count, payload kept", "UPDATE blocks SET rows_count = 0 WHERE \"offset\" = (SELECT MIN(\"offset\") FROM blocks)", true),
        ("length prefix 0xFFFFFFFF", "UPDATE blocks SET payload = x'FFFFFFFF' || substr(payload, 5)", true),
        ("payload cut in a prefix", "UPDATE blocks SET payload = substr(payload, 1, 2)", true),
        ("payload as text", "UPDATE blocks SET payload = CAST(payload AS TEXT)", true),
        ("ts as text", "UPDATE blocks SET ts = 'yesterday'", true),
        ("rows_count as real", "UPDATE blocks SET rows_count = 2.5", true),
        ("negative block offset", "INSERT INTO blocks VALUES (-5, 0, 1, x'0100000078')", true),
        ("overlapping block", "INSERT INTO blocks VALUES (3, 0, 1, x'0100000078')", true),
        ("block past i64", "INSERT INTO blocks VALUES (9223372036854775806, 0, 3, x'010000007801000000780100000078')", false),
    ];
    for &(what, sql, expect_error) in damage {
        let tmp = tempfile::tempdir().unwrap();
        let buffer = filled(tmp.path(), 1_000);
        drop(buffer);
        raw(tmp.path()).execute_batch(sql).unwrap();
        let errors = scans_end_without_panic(tmp.path(), 1_001);
        if expect_error {
            assert!(!errors.is_empty(), "{what}: no scan reported the damage");
        }
        for e in &errors {
            assert!(
                e.contains("block")
                    || e.contains("Invalid column type")
                    || e.contains("conversion"),
                "{what}: {e}"
            );
        }
        // Reopening the writer must not panic (an error is fine).
        let _ = Buffer::open(tmp.path(), None);
    }
}

#[test]
fn a_commit_that_fails_after_some_blocks_leaves_nothing_and_retries_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = filled(tmp.path(), 100);
    let page_size: u64 = raw(tmp.path())
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let pages: u64 = raw(tmp.path())
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    // Room for about 3 blocks of the 20 this commit needs.
    let cap = pages + 3 * (BLOCK_TARGET_BYTES as u64) / page_size;
    buffer.set_max_page_count(cap).unwrap();
    let big: Vec<Vec<u8>> = (0..1_300u64)
        .map(|i| format!("{{\"b\":{i},\"pad\":\"{}\"}}", "z".repeat(1_000)).into_bytes())
        .collect();
    let batches = [
        AppendBatch::exactly_once(&big[..700], "p", 1),
        AppendBatch::exactly_once(&big[700..], "p", 701),
    ];
    let failed = buffer.append(&batches).unwrap_err();
    assert!(failed.disk_full, "{failed:?}");
    assert_eq!(buffer.end_offset(), 101);
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.scan(0, u64::MAX, usize::MAX).unwrap().len(), 100);
    assert_eq!(reader.end_offset().unwrap(), 101);
    assert!(reader.publisher_mark("p").unwrap().is_none());

    buffer.set_max_page_count(u32::MAX as u64).unwrap();
    let outcomes = buffer.append(&batches).unwrap();
    let firsts: Vec<(u64, usize)> = outcomes
        .iter()
        .map(|o| match o {
            BatchOutcome::Appended {
                first_offset,
                appended,
                ..
            } => (*first_offset, *appended),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(firsts, [(101, 700), (801, 600)]);
    let stored = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(stored.len(), 1_400);
    for (i, r) in stored.iter().enumerate() {
        assert_eq!(r.offset, i as u64 + 1);
    }
    let tail: Vec<Vec<u8>> = stored[100..].iter().map(|r| r.payload.clone()).collect();
    assert_eq!(tail, big);
    drop(reader);
    drop(buffer);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), 1_401);
    assert_eq!(buffer.publisher_mark("p").unwrap().last_seq, 1_300);
}

#[test]
fn rows_sized_at_the_block_target_and_empty_rows_read_back_in_every_window() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let t = BLOCK_TARGET_BYTES;
    let mut rows: Vec<Vec<u8>> = Vec::new();
    for len in [
        t - 5,
        t - 4,
        t - 3,
        0,
        t,
        t + 1,
        0,
        0,
        1,
        t - 1,
        3,
        t - 8,
        4,
        0,
        t + 4,
    ] {
        rows.push(vec![b'a' + (rows.len() % 26) as u8; len]);
    }
    // Many empty rows: 4 bytes each.
    rows.extend(std::iter::repeat_n(Vec::new(), 40_000));
    rows.push(b"last".to_vec());
    buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    let end = rows.len() as u64 + 1;
    let reader = buffer.reader().unwrap();
    let raw = raw(tmp.path());
    let starts: Vec<u64> = raw
        .prepare("SELECT \"offset\" FROM blocks ORDER BY \"offset\"")
        .unwrap()
        .query_map([], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|o| o.unwrap() as u64)
        .collect();
    let mut points: Vec<u64> = starts
        .iter()
        .flat_map(|&b| [b.saturating_sub(1), b, b + 1])
        .chain([0, 1, end - 1, end])
        .collect();
    points.sort();
    points.dedup();
    for &from in &points {
        for &to in &points {
            for limit in [1, 2, usize::MAX] {
                let got = reader.scan(from, to, limit).unwrap();
                let lo = from.max(1);
                let hi = to.min(end).max(lo);
                let want = ((hi - lo) as usize).min(limit);
                assert_eq!(got.len(), want, "from {from} to {to} limit {limit}");
                for r in &got {
                    assert_eq!(
                        r.payload,
                        rows[(r.offset - 1) as usize],
                        "offset {}",
                        r.offset
                    );
                }
                if let Some(first) = got.first() {
                    assert_eq!(first.offset, lo);
                }
            }
        }
    }
}

#[test]
fn offsets_near_2_pow_63_fail_the_commit_instead_of_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    drop(filled(tmp.path(), 10));
    let last = i64::MAX - 1; // room for exactly one more row (offset 2^63 − 2 ... end 2^63 − 1)
    raw(tmp.path())
        .execute(
            "UPDATE meta SET value = ?1 WHERE key = 'end_offset'",
            [last],
        )
        .unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), last as u64);
    let two: Vec<Vec<u8>> = (1..=2).map(row).collect();
    let failed = buffer.append(&[AppendBatch::plain(&two)]).unwrap_err();
    assert!(failed.detail.contains("offsets exhausted"), "{failed}");
    assert_eq!(buffer.end_offset(), last as u64, "nothing moved");
    // One row still fits, and the writer is usable after the refusal.
    let outcomes = buffer.append(&[AppendBatch::plain(&two[..1])]).unwrap();
    assert!(matches!(
        outcomes[0],
        BatchOutcome::Appended { first_offset, appended: 1, .. } if first_offset == last as u64
    ));
    let stored = buffer
        .reader()
        .unwrap()
        .scan(last as u64, u64::MAX, 10)
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, row(1));
}
