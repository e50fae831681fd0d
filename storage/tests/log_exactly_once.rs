//! Exactly-once rules of PROTOCOL.md §7 against the buffer: duplicates, gaps, partial
//! duplicates, tentative marks inside one group commit, the dedupe window (§10) and restarts.

use corecast_storage::log::{AppendBatch, BatchOutcome, Buffer, Mark, DEDUPE_WINDOW_RANGES};

fn rows(seqs: std::ops::RangeInclusive<u64>) -> Vec<Vec<u8>> {
    seqs.map(|seq| format!("{{\"seq\":{seq}}}").into_bytes())
        .collect()
}

fn eo<'a>(rows: &'a [Vec<u8>], id: &'a str, first_seq: u64) -> AppendBatch<'a, Vec<u8>> {
    AppendBatch::exactly_once(rows, id, first_seq)
}

/// `(first_offset, appended, dup_offsets)` of an appended outcome.
fn ok(outcome: &BatchOutcome) -> (u64, usize, Vec<Option<u64>>) {
    match outcome {
        BatchOutcome::Appended {
            first_offset,
            appended,
            dup_offsets,
            ..
        } => (*first_offset, *appended, dup_offsets.clone()),
        BatchOutcome::Gap { .. } => panic!("unexpected {outcome:?}"),
    }
}

fn mark(last_seq: u64, last_offset: u64) -> Option<Mark> {
    Some(Mark {
        last_seq,
        last_offset: Some(last_offset),
    })
}

#[test]
fn duplicates_gaps_and_partial_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.publisher_mark("p"), None);

    // A first seq beyond 1 on a fresh publisher is a gap.
    let out = buffer.append(&[eo(&rows(3..=3), "p", 3)]).unwrap();
    assert_eq!(
        out,
        [BatchOutcome::Gap {
            expected: 1,
            got: 3
        }]
    );
    assert_eq!(buffer.publisher_mark("p"), None);
    assert_eq!(buffer.end_offset(), 1);

    // seqs 1..=3 land at offsets 1..=3.
    let out = buffer.append(&[eo(&rows(1..=3), "p", 1)]).unwrap();
    assert_eq!(ok(&out[0]), (1, 3, vec![]));
    assert_eq!(buffer.publisher_mark("p"), mark(3, 3));

    // A plain row in between, so offsets and seqs differ.
    let plain = rows(100..=100);
    buffer.append(&[AppendBatch::plain(&plain)]).unwrap();

    // Resend of a landed row: a duplicate with its original offset, nothing appended.
    let out = buffer.append(&[eo(&rows(2..=2), "p", 2)]).unwrap();
    assert_eq!(ok(&out[0]), (5, 0, vec![Some(2)]));
    assert_eq!(out[0].offsets().unwrap(), [Some(2)]);
    assert_eq!(buffer.end_offset(), 5);

    // seqs 2..=5 when 2 and 3 landed: dup 2, then 4 and 5 append.
    let out = buffer.append(&[eo(&rows(2..=5), "p", 2)]).unwrap();
    assert_eq!(ok(&out[0]), (5, 2, vec![Some(2), Some(3)]));
    assert_eq!(
        out[0].offsets().unwrap(),
        [Some(2), Some(3), Some(5), Some(6)]
    );
    assert_eq!(buffer.publisher_mark("p"), mark(5, 6));

    // Beyond the next: gap, the mark does not move.
    let out = buffer.append(&[eo(&rows(9..=9), "p", 9)]).unwrap();
    assert_eq!(
        out,
        [BatchOutcome::Gap {
            expected: 6,
            got: 9
        }]
    );
    assert_eq!(buffer.publisher_mark("p"), mark(5, 6));

    // The stored rows are the first copies only.
    let reader = buffer.reader().unwrap();
    let stored: Vec<Vec<u8>> = reader
        .scan(1, 100, 100)
        .unwrap()
        .into_iter()
        .map(|row| row.payload)
        .collect();
    let expect: Vec<Vec<u8>> = [rows(1..=3), plain, rows(4..=5)].concat();
    assert_eq!(stored, expect);
    assert_eq!(reader.publisher_mark("p").unwrap(), mark(5, 6));
    assert_eq!(reader.publisher_mark("nobody").unwrap(), None);
}

#[test]
fn frames_of_one_commit_are_judged_against_the_tentative_mark() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let (a, b, c, d) = (rows(1..=2), rows(3..=4), rows(2..=6), rows(8..=8));
    let plain = rows(50..=51);
    let e = rows(7..=7);
    let out = buffer
        .append(&[
            eo(&a, "p", 1),             // 1,2 → offsets 1,2
            eo(&a, "q", 1),             // another publisher → 3,4
            eo(&b, "p", 3),             // 3,4 → 5,6 (after the tentative mark 2)
            AppendBatch::plain(&plain), // → 7,8
            eo(&c, "p", 2),             // 2..4 dups (1,2 … 5,6), 5,6 → 9,10
            eo(&d, "p", 8),             // gap: expected 7
            eo(&e, "p", 7),             // 7 → 11 (the gap moved nothing)
        ])
        .unwrap();
    assert_eq!(ok(&out[0]), (1, 2, vec![]));
    assert_eq!(ok(&out[1]), (3, 2, vec![]));
    assert_eq!(ok(&out[2]), (5, 2, vec![]));
    assert_eq!(ok(&out[3]), (7, 2, vec![]));
    assert_eq!(ok(&out[4]), (9, 2, vec![Some(2), Some(5), Some(6)]));
    assert_eq!(
        out[5],
        BatchOutcome::Gap {
            expected: 7,
            got: 8
        }
    );
    assert_eq!(ok(&out[6]), (11, 1, vec![]));
    assert_eq!(buffer.publisher_mark("p"), mark(7, 11));
    assert_eq!(buffer.publisher_mark("q"), mark(2, 4));

    // The same from disk.
    drop(buffer);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.publisher_mark("p"), mark(7, 11));
    assert_eq!(buffer.publisher_mark("q"), mark(2, 4));
    let mut marks: Vec<(String, Mark)> = buffer
        .publisher_marks()
        .map(|(id, mark)| (id.to_owned(), mark))
        .collect();
    marks.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(marks.len(), 2);
    assert_eq!(buffer.end_offset(), 12);
}

#[test]
fn a_rejected_frame_leaves_the_mark_so_the_pipelined_ones_gap() {
    // The engine refuses a row before it reaches the buffer; the buffer sees the frames after it.
    // Captured (PROTOCOL.md §7): seq 5 rejected, seq 6 → gap expected 5 got 6, a good seq 5 → ok.
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let first = rows(1..=4);
    buffer.append(&[eo(&first, "p", 1)]).unwrap();
    let (six, five) = (rows(6..=6), rows(5..=5));
    let out = buffer
        .append(&[eo(&six, "p", 6), eo(&five, "p", 5)])
        .unwrap();
    assert_eq!(
        out[0],
        BatchOutcome::Gap {
            expected: 5,
            got: 6
        }
    );
    assert_eq!(ok(&out[1]), (5, 1, vec![]));
}

#[test]
fn duplicates_beyond_the_window_or_after_a_restart_are_null() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let plain = rows(0..=0);
    // Interleave plain rows so each of p's commits is its own range in the window.
    let commits = DEDUPE_WINDOW_RANGES as u64 + 6;
    for seq in 1..=commits {
        let one = rows(seq..=seq);
        buffer
            .append(&[eo(&one, "p", seq), AppendBatch::plain(&plain)])
            .unwrap();
    }
    // seq s landed at offset 2s − 1.
    assert_eq!(buffer.publisher_mark("p"), mark(commits, 2 * commits - 1));
    let all = rows(1..=commits);
    let out = buffer.append(&[eo(&all, "p", 1)]).unwrap();
    let (_, appended, dups) = ok(&out[0]);
    assert_eq!(appended, 0);
    let forgotten = commits as usize - DEDUPE_WINDOW_RANGES;
    for (i, dup) in dups.iter().enumerate() {
        let seq = i as u64 + 1;
        if i < forgotten {
            assert_eq!(*dup, None, "seq {seq} is older than the window");
        } else {
            assert_eq!(*dup, Some(2 * seq - 1), "seq {seq} is in the window");
        }
    }

    // After a restart the mark stands but the window is empty: every duplicate is null.
    let end_offset = buffer.end_offset();
    drop(buffer);
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), end_offset);
    let tail = rows(commits - 1..=commits + 1);
    let out = buffer.append(&[eo(&tail, "p", commits - 1)]).unwrap();
    assert_eq!(ok(&out[0]), (end_offset, 1, vec![None, None]));
    assert_eq!(buffer.publisher_mark("p"), mark(commits + 1, end_offset));
    // New commits after the restart are remembered again.
    let again = rows(commits + 1..=commits + 1);
    let out = buffer.append(&[eo(&again, "p", commits + 1)]).unwrap();
    assert_eq!(ok(&out[0]), (end_offset + 1, 0, vec![Some(end_offset)]));
}

#[test]
fn an_empty_exactly_once_batch_appends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let none: Vec<Vec<u8>> = Vec::new();
    let out = buffer.append(&[eo(&none, "p", 1)]).unwrap();
    assert_eq!(ok(&out[0]), (1, 0, vec![]));
    assert_eq!(buffer.publisher_mark("p"), None);
    assert_eq!(buffer.end_offset(), 1);
}
