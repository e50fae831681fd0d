//! Adversarial tests of the hot log: a randomized model check (appends of every size, rolls,
//! eviction of everything, reopen with other segment sizes, injected write/sync/recheck faults,
//! exactly-once publishers, a concurrent reader), and leftover or missing files.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use corecast_storage::log::segment;
use corecast_storage::log::{
    AppendBatch, BatchOutcome, Buffer, BufferReader, Fault, LogOptions, StorageError, LOG_DIR_NAME,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A payload that names its offset and checks itself: `"<offset>:<len>:"` then filler.
fn payload(offset: u64, len: usize) -> Vec<u8> {
    let mut out = format!("{offset}:{len}:").into_bytes();
    let fill = b'a' + (offset % 26) as u8;
    while out.len() < len {
        out.push(fill);
    }
    out
}

fn check_payload(offset: u64, bytes: &[u8]) {
    let text = std::str::from_utf8(&bytes[..bytes.len().min(48)]).unwrap_or("?");
    let mut parts = text.splitn(3, ':');
    let named: u64 = parts.next().unwrap().parse().expect("offset prefix");
    let len: usize = parts.next().unwrap().parse().expect("len prefix");
    assert_eq!(named, offset, "row at offset {offset} names offset {named}");
    assert_eq!(
        bytes,
        payload(offset, len).as_slice(),
        "bytes of offset {offset}"
    );
}

struct Model {
    rows: BTreeMap<u64, Vec<u8>>,
    end: u64,
    floor: u64,
    /// exactly-once publisher "p": (last_seq, last_offset)
    mark: (u64, Option<u64>),
}

fn verify(buffer: &Buffer, model: &Model, dir: &Path) {
    assert_eq!(buffer.end_offset(), model.end, "end offset");
    let earliest = buffer.earliest();
    let floor = earliest.unwrap_or(model.end);
    assert!(
        floor >= model.floor,
        "floor went back: {floor} < {}",
        model.floor
    );
    let reader = BufferReader::open(dir).unwrap();
    assert_eq!(reader.end_offset().unwrap(), model.end);
    let rows = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(
        rows.len() as u64,
        model.end - floor,
        "rows held from {floor}"
    );
    for (stored, offset) in rows.iter().zip(floor..) {
        assert_eq!(stored.offset, offset);
        assert_eq!(
            Some(&stored.payload),
            model.rows.get(&offset),
            "payload of offset {offset}"
        );
    }
    let mark = buffer
        .publisher_mark("p")
        .map(|m| (m.last_seq, m.last_offset));
    if model.mark.0 == 0 {
        assert_eq!(mark, None);
    } else {
        assert_eq!(mark, Some(model.mark), "mark of p");
    }
}

fn spawn_reader(buffer: &Buffer, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let reader = buffer.reader().unwrap();
    std::thread::spawn(move || {
        let mut scans = 0;
        while !stop.load(Ordering::Acquire) {
            let end = reader.end_offset().unwrap();
            let mut last = None;
            let mut jumped_to = None;
            reader
                .scan_with(0, u64::MAX, usize::MAX, |offset, _, bytes| {
                    if let Some(last) = last {
                        if offset != last + 1 {
                            // only eviction during the scan may skip rows
                            jumped_to = Some(offset);
                        }
                    }
                    last = Some(offset);
                    check_payload(offset, bytes);
                    ControlFlow::Continue(())
                })
                .unwrap();
            if let Some(to) = jumped_to {
                let floor = reader.earliest().unwrap().unwrap_or(u64::MAX);
                assert!(
                    floor >= to,
                    "reader skipped to {to} but the floor is {floor}"
                );
            }
            if let Some(last) = last {
                if last + 1 < end {
                    // only if what came after was evicted during the scan
                    let floor = reader
                        .earliest()
                        .unwrap()
                        .unwrap_or_else(|| reader.end_offset().unwrap());
                    assert!(
                        floor > last + 1,
                        "scan ended at {last} before end {end}, floor {floor}"
                    );
                }
            }
            scans += 1;
        }
        scans
    })
}

fn run_model(seed: u64, steps: usize) -> (u64, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut rng = StdRng::seed_from_u64(seed);
    let sizes = [4096u64, 8192, 65536];
    let mut options = LogOptions {
        segment_bytes: sizes[rng.random_range(0..sizes.len())],
    };
    let mut model = Model {
        rows: BTreeMap::new(),
        end: 1,
        floor: 1,
        mark: (0, None),
    };
    let mut next_seq = 1u64;
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let mut stop = Arc::new(AtomicBool::new(false));
    let mut watcher = spawn_reader(&buffer, Arc::clone(&stop));
    let (mut commits, mut reopens) = (0u64, 0u64);
    for step in 0..steps {
        let what = rng.random_range(0..100);
        if what < 70 {
            // a commit of 1..4 batches, sometimes exactly-once, sometimes a fault first
            let batches_count = rng.random_range(1..4);
            let mut owned: Vec<(Vec<Vec<u8>>, Option<u64>)> = Vec::new();
            let mut predicted_end = model.end;
            let mut mark = model.mark;
            let mut seq_cursor = next_seq;
            let mut expect = Vec::new();
            for _ in 0..batches_count {
                let n = rng.random_range(1..20usize);
                let big = rng.random_range(0..10) == 0;
                let eo = rng.random_range(0..3) == 0;
                let mut first_seq = None;
                let mut dups = 0u64;
                if eo {
                    // resend a little of what landed, or go on
                    let back = rng.random_range(0..4u64).min(mark.0);
                    let s = (mark.0 + 1 - back).max(1);
                    first_seq = Some(s);
                    dups = (mark.0 + 1 - s).min(n as u64);
                }
                let mut rows = Vec::new();
                for i in 0..n as u64 {
                    let len = if big {
                        rng.random_range(3000..20000)
                    } else {
                        rng.random_range(10..200)
                    };
                    if i < dups {
                        rows.push(b"duplicate".to_vec());
                    } else {
                        rows.push(payload(predicted_end + (i - dups), len));
                    }
                }
                let fresh = n as u64 - dups;
                expect.push((predicted_end, fresh, dups));
                if let Some(s) = first_seq {
                    if fresh > 0 {
                        mark = (s + n as u64 - 1, Some(predicted_end + fresh - 1));
                    }
                    seq_cursor = mark.0 + 1;
                }
                predicted_end += fresh;
                owned.push((rows, first_seq));
            }
            let batches: Vec<AppendBatch<'_, Vec<u8>>> = owned
                .iter()
                .map(|(rows, seq)| match seq {
                    Some(s) => AppendBatch::exactly_once(rows, "p", *s),
                    None => AppendBatch::plain(rows),
                })
                .collect();
            let appends_rows = predicted_end > model.end;
            if appends_rows && rng.random_range(0..6) == 0 {
                let fault = match rng.random_range(0..3) {
                    0 => Fault::Write(28),
                    1 => Fault::Sync(5),
                    _ => Fault::Sync(5),
                };
                buffer.inject_fault(fault);
                let err = buffer.append(&batches).unwrap_err();
                assert!(!err.detail.is_empty());
                // a failed sync of the active segment makes the next commit re-read it
                let recheck = matches!(fault, Fault::Sync(_))
                    && !err.detail.contains("new segment")
                    && rng.random_range(0..3) == 0;
                if recheck {
                    buffer.inject_fault(Fault::Recheck(5));
                }
                if recheck {
                    let err = buffer.append(&batches).unwrap_err();
                    assert!(err.detail.contains("re-reading"), "step {step}: {err}");
                }
                assert_eq!(
                    buffer.end_offset(),
                    model.end,
                    "step {step}: failed commit moved end"
                );
                if rng.random_range(0..2) == 0 {
                    // no retry: forget it, maybe reopen right away
                    if rng.random_range(0..2) == 0 {
                        stop.store(true, Ordering::Release);
                        watcher.join().unwrap();
                        drop(buffer);
                        buffer = Buffer::open_with(&dir, None, options).unwrap();
                        stop = Arc::new(AtomicBool::new(false));
                        watcher = spawn_reader(&buffer, Arc::clone(&stop));
                        reopens += 1;
                    }
                    verify(&buffer, &model, &dir);
                    continue;
                }
            }
            let outcomes = buffer
                .append(&batches)
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            commits += 1;
            for (outcome, (first, fresh, dups)) in outcomes.iter().zip(&expect) {
                match outcome {
                    BatchOutcome::Appended {
                        first_offset,
                        appended,
                        dup_offsets,
                        ..
                    } => {
                        assert_eq!(*appended as u64, *fresh, "step {step}");
                        assert_eq!(dup_offsets.len() as u64, *dups, "step {step}");
                        if *fresh > 0 {
                            assert_eq!(first_offset, first, "step {step}");
                        }
                    }
                    BatchOutcome::Gap { .. } => panic!("step {step}: unexpected gap"),
                }
            }
            for (rows, _) in &owned {
                for row in rows {
                    if row != b"duplicate" {
                        model.rows.insert(model.end, row.clone());
                        model.end += 1;
                    }
                }
            }
            assert_eq!(model.end, predicted_end);
            model.mark = mark;
            next_seq = seq_cursor;
        } else if what < 82 {
            let to = rng.random_range(model.floor..model.end + 3);
            let to = if rng.random_range(0..4) == 0 {
                u64::MAX
            } else {
                to
            };
            let evicted = buffer.evict_below(to).unwrap();
            assert!(evicted.floor >= model.floor);
            assert!(
                evicted.floor <= to.max(model.floor) || evicted.floor == model.end,
                "step {step}: evicted rows at or above {to}: floor {}",
                evicted.floor
            );
            model.floor = evicted.floor;
            model.rows = model.rows.split_off(&model.floor);
        } else {
            stop.store(true, Ordering::Release);
            watcher.join().unwrap();
            drop(buffer);
            if rng.random_range(0..3) == 0 {
                options.segment_bytes = sizes[rng.random_range(0..sizes.len())];
            }
            buffer = Buffer::open_with(&dir, None, options)
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: reopen: {e}"));
            assert!(
                buffer.open_report().torn_tail.is_none(),
                "step {step}: torn tail after a clean close: {:?}",
                buffer.open_report()
            );
            stop = Arc::new(AtomicBool::new(false));
            watcher = spawn_reader(&buffer, Arc::clone(&stop));
            reopens += 1;
        }
        verify(&buffer, &model, &dir);
    }
    stop.store(true, Ordering::Release);
    watcher.join().unwrap();
    drop(buffer);
    let buffer = Buffer::open_with(&dir, None, options).unwrap();
    verify(&buffer, &model, &dir);
    (commits, reopens)
}

#[test]
fn randomized_appends_evictions_faults_and_reopens_keep_every_row() {
    let seeds: u64 = std::env::var("ADV_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let steps: usize = std::env::var("ADV_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let (mut commits, mut reopens) = (0, 0);
    for seed in 0..seeds {
        let (c, r) = run_model(seed, steps);
        commits += c;
        reopens += r;
    }
    eprintln!("{seeds} seeds x {steps} steps: {commits} commits, {reopens} reopens");
}

/// Fills one segment with a few commits (offsets 1..=30).
fn three_commits(dir: &Path) {
    let mut buffer = Buffer::open_with(
        dir,
        None,
        LogOptions {
            segment_bytes: 1 << 20,
        },
    )
    .unwrap();
    for c in 0..3u64 {
        let rows: Vec<Vec<u8>> = (c * 10 + 1..c * 10 + 11).map(|o| payload(o, 40)).collect();
        buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    }
    assert_eq!(buffer.end_offset(), 31);
}

fn seg_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join(LOG_DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| segment::parse_file_name(p.file_name().unwrap().to_str().unwrap()).is_some())
        .collect();
    files.sort();
    files
}

/// The stream's only segment file is gone (a careless operator, a restore that missed it):
/// its rows must not silently vanish and their offsets must not be handed out again.
#[test]
fn the_only_segment_missing_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    three_commits(&dir);
    let files = seg_files(&dir);
    assert_eq!(files.len(), 1);
    std::fs::remove_file(&files[0]).unwrap();
    match Buffer::open(&dir, None) {
        Err(StorageError::Corrupt { detail, .. }) => {
            assert!(detail.contains("missing segment"), "{detail}")
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(buffer) => panic!(
            "opened with rows 1..31 gone: end offset {}, earliest {:?}",
            buffer.end_offset(),
            buffer.earliest()
        ),
    }
}

/// The whole `log/` directory is gone.
#[test]
fn a_missing_log_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    three_commits(&dir);
    std::fs::remove_dir_all(dir.join(LOG_DIR_NAME)).unwrap();
    match Buffer::open(&dir, None) {
        Err(StorageError::Corrupt { detail, .. }) => {
            assert!(detail.contains("missing segment"), "{detail}")
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(buffer) => panic!(
            "opened with rows 1..31 gone: end offset {}, earliest {:?}",
            buffer.end_offset(),
            buffer.earliest()
        ),
    }
}

/// Leftovers in `log/`: a spare of the wrong size, a zero-length spare, a `spare.seg.tmp`, an
/// unrelated file; the log opens and every row is there.
#[test]
fn leftover_files_do_not_stop_the_log() {
    for case in 0..4 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        three_commits(&dir);
        let log = dir.join(LOG_DIR_NAME);
        let _ = std::fs::remove_file(log.join("spare.seg"));
        match case {
            0 => std::fs::write(log.join("spare.seg"), vec![0u8; 100]).unwrap(),
            1 => std::fs::write(log.join("spare.seg"), b"").unwrap(),
            2 => std::fs::write(log.join("spare.seg.tmp"), b"junk").unwrap(),
            _ => std::fs::write(log.join("README"), b"notes").unwrap(),
        }
        let mut buffer = Buffer::open_with(
            &dir,
            None,
            LogOptions {
                segment_bytes: 4096,
            },
        )
        .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(buffer.end_offset(), 31);
        // roll a few times through whatever spare there is
        for c in 0..20u64 {
            let first = buffer.end_offset();
            let rows: Vec<Vec<u8>> = (first..first + 10).map(|o| payload(o, 300)).collect();
            buffer
                .append(&[AppendBatch::plain(&rows)])
                .unwrap_or_else(|e| panic!("case {case} commit {c}: {e}"));
        }
        drop(buffer);
        let buffer = Buffer::open(&dir, None).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(buffer.end_offset(), 231);
        let rows = buffer
            .reader()
            .unwrap()
            .scan(0, u64::MAX, usize::MAX)
            .unwrap();
        assert_eq!(rows.len(), 230, "case {case}");
        for row in &rows {
            check_payload(row.offset, &row.payload);
        }
    }
}

/// A spare whose header reached the disk but whose first record was torn (a power cut during
/// the roll, or SIGKILL in the middle of a large `pwrite`): recovery adopts it as an empty newest
/// segment `<end>.seg`. The next commit that does not fit in it rolls to a segment with the same
/// first offset, hence the same file name.
fn log_with_an_empty_newest_segment(dir: &Path) -> u64 {
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(dir, None, options).unwrap();
    for c in 0..3u64 {
        let rows: Vec<Vec<u8>> = (c * 10 + 1..c * 10 + 11).map(|o| payload(o, 40)).collect();
        buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    }
    let end = buffer.end_offset();
    drop(buffer);
    let log = dir.join(LOG_DIR_NAME);
    let first = std::fs::read(&seg_files(dir)[0]).unwrap();
    let mut stream_id = [0u8; 16];
    stream_id.copy_from_slice(&first[32..48]);
    let header = segment::SegmentHeader {
        first_offset: end,
        created_us: 1,
        stream_id,
    };
    let mut spare = vec![0u8; 4096];
    spare[..64].copy_from_slice(&header.encode());
    // the roll's one write reached the disk only in its first sector: the segment header and
    // the start of the first record made it, the rest of the record did not
    let mut record = corecast_storage::log::record::RecordBuilder::default();
    record.begin(end, 1);
    for o in end..end + 30 {
        record.push_row(&payload(o, 40)).unwrap();
    }
    let bytes = record.finish();
    assert!(64 + bytes.len() > 1024, "the record spans sectors");
    spare[64..512].copy_from_slice(&bytes[..448]);
    let _ = std::fs::remove_file(log.join("spare.seg"));
    std::fs::write(log.join("spare.seg"), &spare).unwrap();
    let buffer = Buffer::open_with(dir, None, options).unwrap();
    assert!(
        buffer.open_report().torn_tail.is_some(),
        "{:?}",
        buffer.open_report()
    );
    assert_eq!(buffer.end_offset(), end);
    assert!(log.join(segment::file_name(end)).exists());
    end
}

#[test]
fn a_roll_from_an_empty_newest_segment_keeps_its_rows_through_eviction() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let end = log_with_an_empty_newest_segment(&dir);
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    // larger than the empty segment: a roll, to a segment named like the empty one
    let big: Vec<Vec<u8>> = (end..end + 5).map(|o| payload(o, 3000)).collect();
    buffer.append(&[AppendBatch::plain(&big)]).unwrap();
    let small: Vec<Vec<u8>> = (end + 5..end + 6).map(|o| payload(o, 40)).collect();
    buffer.append(&[AppendBatch::plain(&small)]).unwrap();
    assert_eq!(buffer.end_offset(), end + 6);
    // evict what is below `end`: rows end.. are acknowledged and must stay
    buffer.evict_below(end).unwrap();
    let rows = buffer
        .reader()
        .unwrap()
        .scan(end, u64::MAX, usize::MAX)
        .unwrap();
    assert_eq!(rows.len(), 6);
    drop(buffer);
    let buffer = Buffer::open_with(&dir, None, options)
        .unwrap_or_else(|e| panic!("reopen after evicting below {end}: {e}"));
    assert_eq!(buffer.end_offset(), end + 6);
    let rows = buffer
        .reader()
        .unwrap()
        .scan(0, u64::MAX, usize::MAX)
        .unwrap();
    assert_eq!(
        rows.len(),
        6,
        "rows {end}.. after reopen: {:?}",
        rows.iter().map(|r| r.offset).collect::<Vec<_>>()
    );
    for row in &rows {
        check_payload(row.offset, &row.payload);
    }
}

#[test]
fn a_roll_from_an_empty_newest_segment_survives_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let end = log_with_an_empty_newest_segment(&dir);
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let big: Vec<Vec<u8>> = (end..end + 5).map(|o| payload(o, 3000)).collect();
    buffer.append(&[AppendBatch::plain(&big)]).unwrap();
    assert_eq!(buffer.evict_below(1).unwrap().segments, 0);
    drop(buffer);
    let buffer = Buffer::open_with(&dir, None, options).unwrap();
    assert_eq!(buffer.end_offset(), end + 5);
    let rows = buffer
        .reader()
        .unwrap()
        .scan(0, u64::MAX, usize::MAX)
        .unwrap();
    assert_eq!(rows.len() as u64, end + 4);
}

/// A spare whose header page never reached the disk but whose later pages did (a power cut
/// during the roll's one `pwrite` of header and first record: pages are written back in no
/// particular order): its header reads as unwritten, so it is used as a spare again, and the
/// stale bytes after the records later written into it must not make the log unopenable.
#[test]
fn a_spare_with_an_unwritten_header_but_stale_bytes_is_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let options = LogOptions {
        segment_bytes: 4096,
    };
    drop(Buffer::open_with(&dir, None, options).unwrap());
    let log = dir.join(LOG_DIR_NAME);
    let _ = std::fs::remove_file(log.join("spare.seg"));
    let mut spare = vec![0u8; 4096];
    // the tail of a record whose header page was lost
    spare[4096 - 512..].fill(0x5a);
    std::fs::write(log.join("spare.seg"), &spare).unwrap();
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let mut next = 1u64;
    for _ in 0..40 {
        let rows: Vec<Vec<u8>> = (next..next + 3).map(|o| payload(o, 100)).collect();
        buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
        next += 3;
    }
    drop(buffer);
    let buffer = Buffer::open_with(&dir, None, options)
        .unwrap_or_else(|e| panic!("the broker refuses the log it wrote: {e}"));
    assert_eq!(buffer.end_offset(), next);
    let rows = buffer
        .reader()
        .unwrap()
        .scan(0, u64::MAX, usize::MAX)
        .unwrap();
    assert_eq!(rows.len() as u64, next - 1);
}

/// The same in the newest segment: a commit's record was cut by a power cut that kept a later
/// page of it and lost the one with its header, so the scan at open sees zeros there (the clean
/// end) and leaves the stale bytes after it; the commits written there later must not make the
/// log unopenable once the segment is rolled over.
#[test]
fn stale_bytes_after_the_clean_end_of_the_newest_segment_are_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let rows: Vec<Vec<u8>> = (1..4).map(|o| payload(o, 100)).collect();
    buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    drop(buffer);
    let newest = seg_files(&dir).pop().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    use std::os::unix::fs::FileExt;
    file.write_all_at(&[0x5a; 512], 4096 - 512).unwrap();
    drop(file);
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let mut next = 4u64;
    for _ in 0..40 {
        let rows: Vec<Vec<u8>> = (next..next + 3).map(|o| payload(o, 100)).collect();
        buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
        next += 3;
    }
    drop(buffer);
    let buffer = Buffer::open_with(&dir, None, options)
        .unwrap_or_else(|e| panic!("the broker refuses the log it wrote: {e}"));
    assert_eq!(buffer.end_offset(), next);
    let rows = buffer
        .reader()
        .unwrap()
        .scan(0, u64::MAX, usize::MAX)
        .unwrap();
    assert_eq!(rows.len() as u64, next - 1);
}

/// A zeroed stretch (a lost write-back, a trimmed block) over a record in the middle of the
/// newest segment reads as the clean end of its records: the intact records after it hold
/// acknowledged rows, so the log must be refused, not opened without them (and their offsets
/// handed out again).
#[test]
fn zeros_over_a_record_in_the_middle_of_the_newest_segment_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    three_commits(&dir);
    let newest = seg_files(&dir).pop().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&newest)
        .unwrap();
    // the second record starts after the first: header 64, then the first record
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 48];
    file.read_exact_at(&mut head, 64).unwrap();
    let rows_len = u64::from_le_bytes(head[32..40].try_into().unwrap());
    let marks_len = u64::from(u32::from_le_bytes(head[40..44].try_into().unwrap()));
    let second = 64 + (48 + rows_len + marks_len).div_ceil(8) * 8;
    file.write_all_at(&[0u8; 48], second).unwrap();
    drop(file);
    match Buffer::open(&dir, None) {
        Err(StorageError::Corrupt { detail, .. }) => {
            assert!(detail.contains("intact record follows"), "{detail}")
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(buffer) => panic!(
            "opened without the rows after the zeros: end offset {}",
            buffer.end_offset()
        ),
    }
}

/// How long an open of a default-sized (64 MiB) newest segment takes, for the report.
#[test]
#[ignore = "timing probe"]
fn open_time_of_a_default_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut buffer = Buffer::open(&dir, None).unwrap();
    let rows: Vec<Vec<u8>> = (1..11).map(|o| payload(o, 40)).collect();
    buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
    drop(buffer);
    for _ in 0..3 {
        let started = std::time::Instant::now();
        drop(Buffer::open(&dir, None).unwrap());
        eprintln!("open: {:?}", started.elapsed());
    }
    let file = std::fs::File::open(&seg_files(&dir)[0]).unwrap();
    let started = std::time::Instant::now();
    let found = segment::first_nonzero(&file, 4096).unwrap();
    eprintln!("first_nonzero: {found:?} {:?}", started.elapsed());
}

/// A zero-length segment file named after the end offset (an operator's `touch`, a copy cut
/// short): refused, naming the file, in words about a segment header.
#[test]
fn a_zero_length_segment_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    three_commits(&dir);
    let empty = dir.join(LOG_DIR_NAME).join(segment::file_name(31));
    std::fs::write(&empty, b"").unwrap();
    match Buffer::open(&dir, None) {
        Err(StorageError::Corrupt { path, detail }) => {
            assert_eq!(path, empty);
            assert!(detail.contains("fewer than a segment header"), "{detail}");
            eprintln!("zero-length segment: {detail}");
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(buffer) => panic!("opened: end offset {}", buffer.end_offset()),
    }
}

/// Power cuts during the last commit, page by page: each 4 KiB page the last commit's write
/// touched either reached the disk or did not (in no particular order); a roll's write also may
/// not have been renamed yet (the file is still `spare.seg`). Every open must succeed with every
/// earlier row, and the log must go on: more commits, more rolls, and reopen again.
#[test]
fn power_cuts_during_the_last_commit_page_by_page() {
    let iterations: u64 = std::env::var("ADV_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    const PAGE: u64 = 4096;
    for iteration in 0..iterations {
        let mut rng = StdRng::seed_from_u64(1000 + iteration);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let options = LogOptions {
            segment_bytes: [8192u64, 16384, 65536][rng.random_range(0..3)],
        };
        let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
        let mut end = 1u64;
        let commits = rng.random_range(1..30);
        for _ in 0..commits {
            let n = rng.random_range(1..10);
            let rows: Vec<Vec<u8>> = (end..end + n)
                .map(|o| payload(o, rng.random_range(10..1500)))
                .collect();
            buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
            end += n;
        }
        let before_last = end;
        drop(buffer);
        // snapshot the files, make the last commit, then undo pages of it
        let log = dir.join(LOG_DIR_NAME);
        let snapshot = |log: &Path| -> BTreeMap<String, Vec<u8>> {
            std::fs::read_dir(log)
                .unwrap()
                .map(|e| e.unwrap().path())
                .map(|p| {
                    (
                        p.file_name().unwrap().to_str().unwrap().to_owned(),
                        std::fs::read(&p).unwrap(),
                    )
                })
                .collect()
        };
        let old = snapshot(&log);
        // the cut comes before the last commit's fdatasync returned: meta.db as before it (the
        // keeper raises the frontier only after a roll's rename is durable)
        let meta_before: Vec<(std::path::PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("meta.db")
            })
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
        let n = rng.random_range(1..12);
        let big = rng.random_range(0..3) == 0;
        let rows: Vec<Vec<u8>> = (end..end + n)
            .map(|o| {
                payload(
                    o,
                    if big {
                        rng.random_range(2000..9000)
                    } else {
                        rng.random_range(10..1500)
                    },
                )
            })
            .collect();
        buffer.append(&[AppendBatch::plain(&rows)]).unwrap();
        drop(buffer);
        let new = snapshot(&log);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("meta.db")
            {
                std::fs::remove_file(&path).unwrap();
            }
        }
        for (path, bytes) in &meta_before {
            std::fs::write(path, bytes).unwrap();
        }
        let rolled = new
            .keys()
            .find(|k| !old.contains_key(*k) && segment::parse_file_name(k).is_some())
            .cloned();
        for (name, bytes) in &new {
            let (path, before) = match (&rolled, old.get(name)) {
                (Some(r), _) if r == name => {
                    // not renamed yet, maybe: the spare it was
                    let path = if rng.random_range(0..2) == 0 {
                        std::fs::rename(log.join(name), log.join("spare.seg")).unwrap();
                        log.join("spare.seg")
                    } else {
                        log.join(name)
                    };
                    (path, vec![0u8; bytes.len()])
                }
                (_, Some(before)) if before.len() == bytes.len() => {
                    (log.join(name), before.clone())
                }
                _ => continue,
            };
            let is_named_roll = rolled.as_deref() == Some(name.as_str())
                && path.file_name().unwrap() != "spare.seg";
            let mut cut = bytes.clone();
            for page in 0..(bytes.len() as u64).div_ceil(PAGE) {
                let (a, b) = (
                    (page * PAGE) as usize,
                    ((page + 1) * PAGE).min(bytes.len() as u64) as usize,
                );
                if bytes[a..b] != before[a..b] && !(is_named_roll) && rng.random_range(0..2) == 0 {
                    cut[a..b].copy_from_slice(&before[a..b]);
                }
            }
            std::fs::write(&path, &cut).unwrap();
        }
        let check = |dir: &Path, at_least: u64| -> u64 {
            let buffer = Buffer::open_with(dir, None, options)
                .unwrap_or_else(|e| panic!("iteration {iteration}: reopen after the cut: {e}"));
            let end = buffer.end_offset();
            assert!(
                end >= at_least,
                "iteration {iteration}: end {end} < {at_least}"
            );
            let rows = buffer
                .reader()
                .unwrap()
                .scan(0, u64::MAX, usize::MAX)
                .unwrap();
            assert_eq!(rows.len() as u64, end - 1, "iteration {iteration}");
            for (row, offset) in rows.iter().zip(1..) {
                assert_eq!(row.offset, offset);
                check_payload(offset, &row.payload);
            }
            end
        };
        let mut end = check(&dir, before_last);
        // and the log goes on, rolling over whatever the cut left
        let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
        for _ in 0..rng.random_range(5..40) {
            let n = rng.random_range(1..10);
            let rows: Vec<Vec<u8>> = (end..end + n)
                .map(|o| payload(o, rng.random_range(10..3000)))
                .collect();
            buffer
                .append(&[AppendBatch::plain(&rows)])
                .unwrap_or_else(|e| panic!("iteration {iteration}: {e}"));
            end += n;
        }
        drop(buffer);
        assert_eq!(check(&dir, end), end);
    }
}
