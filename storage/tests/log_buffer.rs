//! The hot log's writer and readers: offsets, reopen, group commit, reads beside a writer,
//! commit failure and retry, eviction.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corecast_storage::log::{
    AppendBatch, BatchOutcome, Buffer, BufferReader, Fault, LogOptions, StorageError, LOG_DIR_NAME,
};

fn row(i: u64) -> Vec<u8> {
    format!(
        "{{\"i\":{i},\"pad\":\"{}\"}}",
        "x".repeat((i % 17) as usize)
    )
    .into_bytes()
}

fn rows(range: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    range.map(row).collect()
}

fn appended(outcome: &BatchOutcome) -> (u64, usize) {
    match outcome {
        BatchOutcome::Appended {
            first_offset,
            appended,
            dup_offsets,
            ..
        } => {
            assert!(dup_offsets.is_empty());
            (*first_offset, *appended)
        }
        BatchOutcome::Gap { .. } => panic!("unexpected gap: {outcome:?}"),
    }
}

/// Every row 1..end is there, in order, with the bytes `row(offset)`.
fn assert_log_is(dir: &Path, end_offset: u64) {
    let reader = BufferReader::open(dir).unwrap();
    assert_eq!(reader.end_offset().unwrap(), end_offset);
    let stored = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(stored.len() as u64, end_offset - 1);
    for (i, stored_row) in stored.iter().enumerate() {
        assert_eq!(stored_row.offset, i as u64 + 1);
        assert_eq!(stored_row.payload, row(stored_row.offset));
    }
}

#[test]
fn empty_buffer_starts_at_offset_1_and_keeps_its_meta() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("trades");
    let schema = r#"{"type":"object","properties":{"p":{"type":"number"}}}"#;
    let (stream_id, created_at_us) = {
        let buffer = Buffer::open(&dir, Some(schema)).unwrap();
        assert_eq!(buffer.end_offset(), 1);
        assert_eq!(buffer.schema_json(), Some(schema));
        assert!(buffer.created_at_us() > 1_600_000_000_000_000);
        assert!(uuid::Uuid::parse_str(buffer.stream_id()).is_ok());
        assert_eq!(buffer.path(), dir.join(LOG_DIR_NAME));
        let reader = buffer.reader().unwrap();
        assert_eq!(reader.end_offset().unwrap(), 1);
        assert_eq!(reader.earliest().unwrap(), None);
        assert_eq!(reader.stream_id(), buffer.stream_id());
        assert_eq!(reader.schema_json(), Some(schema));
        (buffer.stream_id().to_owned(), buffer.created_at_us())
    };
    // Reopen without a schema: the stored one stands.
    let buffer = Buffer::open(&dir, None).unwrap();
    assert_eq!(buffer.stream_id(), stream_id);
    assert_eq!(buffer.created_at_us(), created_at_us);
    assert_eq!(buffer.schema_json(), Some(schema));
    drop(buffer);
    // Reopen with the same schema: fine. With another: refused, naming both.
    drop(Buffer::open(&dir, Some(schema)).unwrap());
    let error = Buffer::open(&dir, Some(r#"{"type":"object"}"#)).unwrap_err();
    assert!(
        matches!(error, StorageError::SchemaMismatch { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains(schema), "{message}");
    assert!(message.contains(r#"given {"type":"object"}"#), "{message}");
    assert!(message.contains("meta.db"), "{message}");
}

#[test]
fn second_writer_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let _buffer = Buffer::open(tmp.path(), None).unwrap();
    let error = Buffer::open(tmp.path(), None).unwrap_err();
    assert!(matches!(error, StorageError::Locked { .. }), "{error}");
}

#[test]
fn reader_needs_an_existing_buffer() {
    let tmp = tempfile::tempdir().unwrap();
    let error = BufferReader::open(tmp.path()).unwrap_err();
    assert!(error.to_string().contains("meta.db"), "{error}");
}

#[test]
fn offsets_are_contiguous_from_1_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let mut next = 1;
    for round in 0..4 {
        let mut buffer = Buffer::open(tmp.path(), None).unwrap();
        assert_eq!(buffer.end_offset(), next, "round {round}");
        for size in [1_u64, 3, 10] {
            let batch = rows(next..next + size);
            let outcomes = buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
            assert_eq!(appended(&outcomes[0]), (next, size as usize));
            assert_eq!(
                outcomes[0].offsets().unwrap(),
                (next..next + size).map(Some).collect::<Vec<_>>()
            );
            next += size;
            assert_eq!(buffer.end_offset(), next);
        }
    }
    assert_log_is(tmp.path(), next);
}

#[test]
fn group_commit_of_many_batches_in_one_call() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    // 200 batches of sizes 1..=7, one transaction.
    let mut all = Vec::new();
    let mut next = 1;
    for i in 0..200_u64 {
        let size = 1 + i % 7;
        all.push(rows(next..next + size));
        next += size;
    }
    let batches: Vec<AppendBatch<'_, Vec<u8>>> =
        all.iter().map(|batch| AppendBatch::plain(batch)).collect();
    let outcomes = buffer.append(&batches).unwrap();
    assert_eq!(outcomes.len(), 200);
    let mut expect = 1;
    let mut last_ts = i64::MIN;
    for (outcome, batch) in outcomes.iter().zip(&all) {
        assert_eq!(appended(outcome), (expect, batch.len()));
        let BatchOutcome::Appended { ts_us, .. } = outcome else {
            unreachable!()
        };
        assert!(*ts_us >= last_ts, "ts never goes back");
        last_ts = *ts_us;
        expect += batch.len() as u64;
    }
    assert_eq!(buffer.end_offset(), next);
    assert_log_is(tmp.path(), next);

    // Each batch's rows share one ts, as the scan shows.
    let reader = buffer.reader().unwrap();
    let stored = reader.scan(1, 1 + 7, 100).unwrap(); // batches of 1, 2, 3 (rows 1..7)
    assert_eq!(stored[1].ts_us, stored[2].ts_us);
    assert_eq!(stored[3].ts_us, stored[5].ts_us);

    // Empty input: nothing happens.
    assert!(buffer.append::<Vec<u8>>(&[]).unwrap().is_empty());
    // Rows of any byte type: &[u8] slices.
    let borrowed: Vec<&[u8]> = vec![b"{\"a\":1}", b"{\"a\":2}"];
    let outcomes = buffer.append(&[AppendBatch::plain(&borrowed)]).unwrap();
    assert_eq!(appended(&outcomes[0]), (next, 2));
}

#[test]
fn scans_respect_bounds_and_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let batch = rows(1..51);
    buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.earliest().unwrap(), Some(1));
    let offsets = |rows: Vec<corecast_storage::log::StoredRow>| {
        rows.into_iter().map(|row| row.offset).collect::<Vec<_>>()
    };
    assert_eq!(offsets(reader.scan(10, 14, 100).unwrap()), [10, 11, 12, 13]);
    assert_eq!(offsets(reader.scan(10, 100, 3).unwrap()), [10, 11, 12]);
    assert_eq!(offsets(reader.scan(49, 100, 100).unwrap()), [49, 50]);
    assert!(reader.scan(51, 100, 100).unwrap().is_empty());
    assert!(reader.scan(20, 20, 100).unwrap().is_empty());
    assert!(reader.scan(1, 100, 0).unwrap().is_empty());

    let mut seen = Vec::new();
    let visited = reader
        .scan_with(5, 8, 10, |offset, _ts, payload| {
            assert_eq!(payload, row(offset));
            seen.push(offset);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(visited, 3);
    assert_eq!(seen, [5, 6, 7]);
}

#[test]
fn rows_written_but_not_yet_durable_are_invisible() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let batch = rows(1..11);
    buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    let reader = buffer.reader().unwrap();
    // A commit whose fdatasync fails: its bytes reached the file, but it never became durable.
    buffer.inject_fault(Fault::Sync(5));
    let more = rows(11..12);
    let failed = buffer.append(&[AppendBatch::plain(&more)]).unwrap_err();
    assert!(!failed.disk_full, "{failed}");
    assert!(failed.detail.contains("fdatasync"), "{failed}");
    assert_eq!(reader.end_offset().unwrap(), 11, "not durable: invisible");
    assert_eq!(reader.scan(1, 100, 100).unwrap().len(), 10);
    assert_eq!(reader.earliest().unwrap(), Some(1));
    assert_eq!(buffer.failures(), 1);
    // The next commit re-reads the segment first, then lands where the failed one would have.
    let outcomes = buffer.append(&[AppendBatch::plain(&more)]).unwrap();
    assert_eq!(appended(&outcomes[0]), (11, 1));
    drop(buffer);
    drop(reader);
    assert_log_is(tmp.path(), 12);
}

#[test]
fn a_segment_that_cannot_be_reread_after_a_failed_sync_refuses_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let batch = rows(1..4);
    buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    buffer.inject_fault(Fault::Sync(5));
    buffer.inject_fault(Fault::Recheck(5));
    let more = rows(4..5);
    buffer.append(&[AppendBatch::plain(&more)]).unwrap_err();
    let refused = buffer.append(&[AppendBatch::plain(&more)]).unwrap_err();
    assert!(
        refused.detail.contains("re-reading the segment failed"),
        "{refused}"
    );
    // once it can be re-read, commits go on
    let outcomes = buffer.append(&[AppendBatch::plain(&more)]).unwrap();
    assert_eq!(appended(&outcomes[0]), (4, 1));
    drop(buffer);
    assert_log_is(tmp.path(), 5);
}

#[test]
fn readers_see_whole_commits_while_the_writer_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let reader = buffer.reader().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    const BATCH_ROWS: u64 = 2_000;
    let watcher = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut reads = 0;
            let mut slowest = Duration::ZERO;
            while !done.load(Ordering::Acquire) {
                let started = Instant::now();
                let end = reader.end_offset().unwrap();
                let count = reader
                    .scan_with(1, u64::MAX, usize::MAX, |_, _, _| ControlFlow::Continue(()))
                    .unwrap() as u64;
                slowest = slowest.max(started.elapsed());
                // A scan after end_offset may see later commits, never a part of one.
                assert_eq!((end - 1) % BATCH_ROWS, 0, "end_offset {end} mid-commit");
                assert_eq!(
                    count % BATCH_ROWS,
                    0,
                    "scan saw {count} rows: part of a commit"
                );
                assert!(count >= end - 1);
                reads += 1;
            }
            (reads, slowest)
        })
    };
    for i in 0..10 {
        let batch = rows(i * BATCH_ROWS + 1..(i + 1) * BATCH_ROWS + 1);
        buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    }
    done.store(true, Ordering::Release);
    let (reads, slowest) = watcher.join().unwrap();
    assert!(reads > 0);
    assert!(slowest < Duration::from_secs(2), "slowest read {slowest:?}");
    assert_log_is(tmp.path(), 10 * BATCH_ROWS + 1);
}

#[test]
fn failed_commit_changes_nothing_and_a_retry_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let first = rows(1..4);
    buffer
        .append(&[AppendBatch::exactly_once(&first, "p", 1)])
        .unwrap();
    let end_before = buffer.end_offset();
    let mark_before = buffer.publisher_mark("p");

    // The disk is full: the next commit's write fails with ENOSPC.
    buffer.inject_fault(Fault::Write(28));
    let big: Vec<Vec<u8>> = (0..64).map(|i| vec![b'a' + (i % 26) as u8; 4096]).collect();
    let small = rows(100..102);
    let dup_and_new = rows(2..6); // seqs 2..=5: 2, 3 are dups, 4, 5 new
    let batches = [
        AppendBatch::plain(&small[..]),
        AppendBatch::exactly_once(&dup_and_new[..], "p", 2),
        AppendBatch::plain(&big[..]),
    ];
    let failed = buffer.append(&batches).unwrap_err();
    assert!(failed.disk_full, "{failed}");
    assert_eq!(failed.batches_count, 3);
    assert_eq!(failed.rows_count, 2 + 4 + 64);
    let message = failed.to_string();
    assert!(
        message.contains(".seg") && message.contains("disk full"),
        "{message}"
    );

    // Nothing moved, in memory or on disk.
    assert_eq!(buffer.end_offset(), end_before);
    assert_eq!(buffer.publisher_mark("p"), mark_before);
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.end_offset().unwrap(), end_before);
    assert_eq!(reader.scan(1, u64::MAX, usize::MAX).unwrap().len(), 3);
    assert_eq!(reader.publisher_mark("p").unwrap(), mark_before);

    // Room again: the retry gets exactly the outcomes the failed commit would have had.
    let outcomes = buffer.append(&batches).unwrap();
    assert_eq!(appended(&outcomes[0]), (4, 2));
    let BatchOutcome::Appended {
        first_offset,
        appended: fresh,
        dup_offsets,
        ..
    } = &outcomes[1]
    else {
        panic!("{:?}", outcomes[1]);
    };
    assert_eq!((*first_offset, *fresh), (6, 2));
    assert_eq!(dup_offsets, &[Some(2), Some(3)]);
    assert_eq!(appended(&outcomes[2]), (8, 64));
    assert_eq!(buffer.end_offset(), 72);
    let mark = buffer.publisher_mark("p").unwrap();
    assert_eq!((mark.last_seq, mark.last_offset), (5, Some(7)));
    assert_eq!(reader.scan(8, 9, 1).unwrap()[0].payload, big[0]);

    drop(buffer);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), 72);
    assert_eq!(buffer.publisher_mark("p"), Some(mark));
}

#[test]
fn offsets_are_never_reused_after_every_segment_is_evicted() {
    let tmp = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(tmp.path(), None, options).unwrap();
    for i in 0..40 {
        let batch = rows(i * 10 + 1..i * 10 + 11);
        buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    }
    let segments = std::fs::read_dir(tmp.path().join(LOG_DIR_NAME))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap() != "spare.seg")
        .count();
    assert!(segments > 3, "{segments} segments: small segments roll");

    // Evicting below an offset inside a segment keeps that segment whole.
    let reader = buffer.reader().unwrap();
    let evicted = buffer.evict_below(250).unwrap();
    assert!(evicted.segments >= 1);
    assert!(evicted.floor <= 250 && evicted.floor > 1, "{evicted:?}");
    assert_eq!(reader.earliest().unwrap(), Some(evicted.floor));
    let held = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(held[0].offset, evicted.floor);
    assert_eq!(held.last().unwrap().offset, 400);
    assert_eq!(held.len() as u64, 401 - evicted.floor);

    // Everything.
    let evicted = buffer.evict_below(401).unwrap();
    assert_eq!(evicted.floor, 401);
    assert_eq!(reader.earliest().unwrap(), None);
    assert_eq!(reader.scan(0, u64::MAX, usize::MAX).unwrap(), []);
    drop(buffer);
    drop(reader);

    let mut buffer = Buffer::open_with(tmp.path(), None, options).unwrap();
    assert_eq!(buffer.end_offset(), 401);
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.earliest().unwrap(), None);
    let more = rows(401..403);
    let outcomes = buffer.append(&[AppendBatch::plain(&more)]).unwrap();
    assert_eq!(appended(&outcomes[0]), (401, 2));
    assert_eq!(reader.earliest().unwrap(), Some(401));
    assert_eq!(reader.end_offset().unwrap(), 403);
    drop(buffer);
    let buffer = Buffer::open_with(tmp.path(), None, options).unwrap();
    assert_eq!(buffer.end_offset(), 403);
    assert_eq!(buffer.earliest(), Some(401));
}

#[test]
fn marks_survive_the_eviction_of_the_segments_that_moved_them() {
    let tmp = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(tmp.path(), None, options).unwrap();
    let first = rows(1..4);
    buffer
        .append(&[AppendBatch::exactly_once(&first, "early", 1)])
        .unwrap();
    for i in 0..30 {
        let batch = rows(10 * i + 4..10 * i + 14);
        buffer
            .append(&[AppendBatch::exactly_once(&batch, "late", 10 * i + 1)])
            .unwrap();
    }
    let end = buffer.end_offset();
    buffer.evict_below(end - 5).unwrap();
    drop(buffer);
    let buffer = Buffer::open_with(tmp.path(), None, options).unwrap();
    let early = buffer.publisher_mark("early").unwrap();
    assert_eq!((early.last_seq, early.last_offset), (3, Some(3)));
    let late = buffer.publisher_mark("late").unwrap();
    assert_eq!((late.last_seq, late.last_offset), (300, Some(end - 1)));
}

#[test]
fn writer_and_reader_move_to_other_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Buffer>();
    assert_send::<BufferReader>();
}
