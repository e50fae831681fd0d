//! Recovery of the hot log from what a crash, a bad disk or a careless operator leaves: a torn
//! tail is cleared (that commit never returned), damage anywhere else refuses to open naming the
//! file and the byte, missing segments are noticed, a spare caught between its first record and
//! its rename is adopted, and a full disk fails the commit without losing anything.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use corecast_storage::log::segment::{self, SEGMENT_HEADER_LEN};
use corecast_storage::log::{
    AppendBatch, Buffer, BufferReader, LogOptions, StorageError, LOG_DIR_NAME,
};

fn row(i: u64) -> Vec<u8> {
    format!(
        "{{\"i\":{i},\"pad\":\"{}\"}}",
        "r".repeat((i % 23) as usize)
    )
    .into_bytes()
}

/// Commits `commits` batches of `per` rows (offsets from 1, `row(offset)`).
fn fill(dir: &Path, options: LogOptions, commits: u64, per: u64) -> Buffer {
    let mut buffer = Buffer::open_with(dir, None, options).unwrap();
    let start = buffer.end_offset();
    for c in 0..commits {
        let first = start + c * per;
        let batch: Vec<Vec<u8>> = (first..first + per).map(row).collect();
        buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    }
    buffer
}

/// Every row from `from` to `end` is there with its bytes.
fn assert_rows(dir: &Path, from: u64, end: u64) {
    let reader = BufferReader::open(dir).unwrap();
    assert_eq!(reader.end_offset().unwrap(), end);
    let rows = reader.scan(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(rows.len() as u64, end - from, "rows held");
    for (stored, offset) in rows.iter().zip(from..) {
        assert_eq!(stored.offset, offset);
        assert_eq!(stored.payload, row(offset), "offset {offset}");
    }
}

/// The segment files, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(LOG_DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| segment::parse_file_name(p.file_name().unwrap().to_str().unwrap()).is_some())
        .collect();
    files.sort();
    files
}

/// Positions of the records of a segment file.
fn record_positions(path: &Path) -> Vec<(u64, u64)> {
    let file = std::fs::File::open(path).unwrap();
    let mut positions = Vec::new();
    let scanned = segment::scan(&file, |record, pos| {
        positions.push((pos, record.header.total_len()))
    })
    .unwrap()
    .unwrap();
    assert!(scanned.damage.is_none());
    positions
}

fn corrupt_message(error: StorageError) -> String {
    match error {
        StorageError::Corrupt { .. } => error.to_string(),
        other => panic!("expected Corrupt, got {other}"),
    }
}

#[test]
fn a_torn_tail_is_cleared_and_the_log_goes_on_after_the_last_whole_record() {
    let tmp = tempfile::tempdir().unwrap();
    let buffer = fill(tmp.path(), LogOptions::default(), 6, 40);
    drop(buffer);
    let path = &segments(tmp.path())[0];
    let (last_pos, last_len) = *record_positions(path).last().unwrap();
    // the last commit reached the disk only in part: the sectors after its first never did
    let torn_from = (last_pos / 512 + 1) * 512;
    assert!(torn_from < last_pos + last_len, "the record spans sectors");
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(
        &vec![0; (last_pos + last_len - torn_from) as usize],
        torn_from,
    )
    .unwrap();
    drop(file);

    let mut buffer = Buffer::open(tmp.path(), None).unwrap();
    let (torn_file, at, cleared) = buffer.open_report().torn_tail.clone().expect("torn");
    assert_eq!((torn_file.as_path(), at), (path.as_path(), last_pos));
    assert!(cleared > 0);
    assert_eq!(
        buffer.end_offset(),
        201,
        "the torn commit (201..241) is gone"
    );
    let batch: Vec<Vec<u8>> = (201..241).map(row).collect();
    buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    drop(buffer);
    assert_rows(tmp.path(), 1, 241);
    assert!(Buffer::open(tmp.path(), None)
        .unwrap()
        .open_report()
        .torn_tail
        .is_none());
}

#[test]
fn a_flipped_byte_in_the_last_record_is_damage_not_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    drop(fill(tmp.path(), LogOptions::default(), 4, 3));
    let path = &segments(tmp.path())[0];
    let before = std::fs::read(path).unwrap();
    let (pos, len) = *record_positions(path).last().unwrap();
    flip(path, pos + len / 2);
    let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
    assert!(message.contains("written whole"), "{message}");
    assert!(
        message.contains(&format!("byte {pos} (offset 10)")),
        "{message}"
    );
    // refusing changed nothing: flipping the byte back gives the log back
    flip(path, pos + len / 2);
    assert_eq!(std::fs::read(path).unwrap(), before);
    assert_rows(tmp.path(), 1, 13);
}

#[test]
fn a_torn_write_that_lost_the_header_sector_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let buffer = fill(tmp.path(), LogOptions::default(), 30, 40);
    drop(buffer);
    let path = &segments(tmp.path())[0];
    let (pos, len) = *record_positions(path).last().unwrap();
    assert!(len > 1024, "the last record spans sectors");
    // the sector holding the record's start never reached the disk; later ones did
    let sector_end = (pos / 512 + 1) * 512;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&vec![0; (sector_end - pos) as usize], pos)
        .unwrap();
    drop(file);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert_eq!(buffer.end_offset(), 29 * 40 + 1);
    let (_, at, cleared) = buffer.open_report().torn_tail.clone().expect("cleared");
    assert_eq!(at, pos);
    assert!(
        cleared > 0,
        "what the torn write left after the header is cleared"
    );
    drop(buffer);
    let buffer = Buffer::open(tmp.path(), None).unwrap();
    assert!(
        buffer.open_report().torn_tail.is_none(),
        "nothing left to clear"
    );
}

#[test]
fn a_newest_segment_cut_short_refuses_to_open_and_is_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    drop(fill(tmp.path(), LogOptions::default(), 50, 20));
    let path = &segments(tmp.path())[0];
    let (pos, len) = record_positions(path)[30];
    let cut = pos + len / 2;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(cut).unwrap();
    drop(file);
    let before = std::fs::read(path).unwrap();
    let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
    assert!(message.contains("cut short"), "{message}");
    assert!(
        message.contains("rows from offset 601 on are lost"),
        "{message}"
    );
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "a refusal changes nothing"
    );
}

#[test]
fn deleting_every_segment_or_the_log_directory_is_noticed() {
    for whole_dir in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        drop(fill(tmp.path(), LogOptions::default(), 3, 3));
        let log = tmp.path().join(LOG_DIR_NAME);
        if whole_dir {
            std::fs::remove_dir_all(&log).unwrap();
        } else {
            for file in segments(tmp.path()) {
                std::fs::remove_file(file).unwrap();
            }
        }
        let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
        assert!(message.contains("missing"), "{message}");
        assert!(message.contains("reached 4"), "{message}");
    }
}

#[test]
fn a_missing_meta_db_beside_a_log_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    drop(fill(tmp.path(), LogOptions::default(), 3, 3));
    for name in ["meta.db", "meta.db-wal", "meta.db-shm"] {
        let _ = std::fs::remove_file(tmp.path().join(name));
    }
    let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
    assert!(message.contains("restore meta.db"), "{message}");
    assert!(
        !tmp.path().join("meta.db").exists(),
        "no new stream was made"
    );
}

#[test]
fn a_flipped_byte_mid_file_refuses_to_open_naming_the_file_and_byte() {
    let tmp = tempfile::tempdir().unwrap();
    drop(fill(tmp.path(), LogOptions::default(), 5, 4));
    let path = &segments(tmp.path())[0];
    let (pos, len) = record_positions(path)[1];
    flip(path, pos + len - 9);
    let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("the record at byte {pos} (offset 5)")),
        "{message}"
    );
    assert!(message.contains("intact record follows"), "{message}");
    // a reader refuses the same way, and the file was not touched
    let message = corrupt_message(BufferReader::open(tmp.path()).unwrap_err());
    assert!(message.contains("intact record follows"), "{message}");
    flip(path, pos + len - 9);
    assert_rows(tmp.path(), 1, 21);
}

#[test]
fn damage_in_an_older_segment_refuses_to_open() {
    let tmp = tempfile::tempdir().unwrap();
    let small = LogOptions {
        segment_bytes: 4096,
    };
    drop(fill(tmp.path(), small, 40, 5));
    let files = segments(tmp.path());
    assert!(files.len() >= 3, "{files:?}");
    let (pos, len) = *record_positions(&files[0]).last().unwrap();
    flip(&files[0], pos + len - 9);
    let message = corrupt_message(Buffer::open_with(tmp.path(), None, small).unwrap_err());
    assert!(
        message.contains(&files[0].display().to_string()),
        "{message}"
    );
    assert!(message.contains("not the newest segment"), "{message}");
}

#[test]
fn a_damaged_segment_header_refuses_to_open() {
    let tmp = tempfile::tempdir().unwrap();
    drop(fill(tmp.path(), LogOptions::default(), 2, 2));
    let path = &segments(tmp.path())[0];
    flip(path, 20);
    let message = corrupt_message(Buffer::open(tmp.path(), None).unwrap_err());
    assert!(message.contains("segment header"), "{message}");
}

#[test]
fn missing_segments_are_noticed_wherever_they_were() {
    let small = LogOptions {
        segment_bytes: 4096,
    };
    for victim in ["oldest", "middle", "newest"] {
        let tmp = tempfile::tempdir().unwrap();
        drop(fill(tmp.path(), small, 40, 5));
        let files = segments(tmp.path());
        assert!(files.len() >= 3);
        let index = match victim {
            "oldest" => 0,
            "middle" => files.len() / 2,
            _ => files.len() - 1,
        };
        std::fs::remove_file(&files[index]).unwrap();
        let message = corrupt_message(Buffer::open_with(tmp.path(), None, small).unwrap_err());
        assert!(message.contains("missing segment"), "{victim}: {message}");
        let name = files[index].file_name().unwrap().to_str().unwrap();
        assert!(message.contains(name), "{victim}: {message} names {name}");
    }
}

#[test]
fn a_spare_caught_between_its_first_record_and_its_rename_is_adopted() {
    let tmp = tempfile::tempdir().unwrap();
    let small = LogOptions {
        segment_bytes: 4096,
    };
    drop(fill(tmp.path(), small, 40, 5));
    let files = segments(tmp.path());
    let newest = files.last().unwrap();
    let spare = tmp.path().join(LOG_DIR_NAME).join(segment::SPARE_FILE_NAME);
    let _ = std::fs::remove_file(&spare);
    std::fs::rename(newest, &spare).unwrap();
    let buffer = Buffer::open_with(tmp.path(), None, small).unwrap();
    assert_eq!(buffer.end_offset(), 201);
    assert!(newest.exists(), "renamed to its segment name");
    drop(buffer);
    assert_rows(tmp.path(), 1, 201);
}

#[test]
fn a_segment_copied_from_another_stream_is_refused() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    drop(fill(a.path(), LogOptions::default(), 2, 2));
    drop(fill(b.path(), LogOptions::default(), 2, 2));
    let from = &segments(a.path())[0];
    std::fs::copy(from, &segments(b.path())[0]).unwrap();
    let message = corrupt_message(Buffer::open(b.path(), None).unwrap_err());
    assert!(message.contains("another stream"), "{message}");
}

#[test]
fn segments_are_preallocated_and_hold_one_record_per_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 1 << 20,
    };
    let buffer = fill(tmp.path(), options, 7, 3);
    let files = segments(tmp.path());
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 1 << 20);
    let positions = record_positions(&files[0]);
    assert_eq!(positions.len(), 7, "one record per commit");
    assert_eq!(positions[0].0, SEGMENT_HEADER_LEN);
    drop(buffer);
}

/// The real thing: a small tmpfs fills up while segments roll. The commit that needs a new
/// segment fails as disk full, nothing is lost, and commits go on once there is room.
#[test]
fn a_full_disk_fails_the_commit_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mount = tmp.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mount)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must mount a tmpfs for this test"
        );
        eprintln!("skipped: cannot mount a tmpfs here (not root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.clone());
    let dir = mount.join("trades");
    let options = LogOptions {
        segment_bytes: 1 << 20,
    };
    let mut buffer = Buffer::open_with(&dir, None, options).unwrap();
    let first: Vec<Vec<u8>> = (1..51).map(row).collect();
    buffer.append(&[AppendBatch::plain(&first)]).unwrap();
    // fill the disk, leaving less than one segment
    let filler = mount.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![7u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let mut next = 51u64;
    let mut failure = None;
    for _ in 0..10_000 {
        let batch: Vec<Vec<u8>> = (next..next + 50).map(row).collect();
        match buffer.append(&[AppendBatch::plain(&batch)]) {
            Ok(_) => next += 50,
            Err(failed) => {
                failure = Some(failed);
                break;
            }
        }
    }
    let failed = failure.expect("the disk filled up");
    assert!(failed.disk_full, "{failed}");
    assert!(failed.to_string().contains("disk full"), "{failed}");
    assert_eq!(buffer.end_offset(), next, "nothing of the failed commit");
    let reader = buffer.reader().unwrap();
    assert_eq!(reader.end_offset().unwrap(), next);
    // again while still full: the same answer, still nothing lost
    let batch: Vec<Vec<u8>> = (next..next + 50).map(row).collect();
    assert!(
        buffer
            .append(&[AppendBatch::plain(&batch)])
            .unwrap_err()
            .disk_full
    );
    // room again
    std::fs::remove_file(&filler).unwrap();
    buffer.append(&[AppendBatch::plain(&batch)]).unwrap();
    next += 50;
    drop(buffer);
    drop(reader);
    assert_rows(&dir, 1, next);
}

fn flip(path: &Path, at: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 0x5a;
    file.write_all_at(&byte, at).unwrap();
}
