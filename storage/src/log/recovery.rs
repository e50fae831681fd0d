//! Opening a hot log: list its segments, check that they follow on, scan every record (CRC and
//! offsets), judge what does not check out, and rebuild the view and the marks.
//!
//! - A damaged record with no intact record after it, at the end of the newest segment, is a
//!   **torn tail**: the commit that wrote it never returned, so nobody was told it landed. The
//!   writer overwrites it with zeros (made durable) and appends after the last intact record.
//! - Damage anywhere else (a flipped byte mid-file, a bad header, garbage after the records of
//!   an older segment, a missing segment between two others or below the recorded floor, a
//!   newest segment missing below the recorded frontier) is a hard error naming the file and the
//!   byte: rows are never skipped silently.
//! - Segments wholly below the recorded floor are deleted (eviction records the floor before it
//!   deletes files, so a crash between the two leaves them behind); so are `*.tmp` files.
//! - A spare (`spare.seg`) whose header was written is adopted as the segment it became: the
//!   writer renames it only after its first record is durable.
//! - Marks: the snapshot in `meta.db` (as of `marks_through`) plus the marks of every record at or
//!   after it, in order.
//!
//! The writer recovers in [`Mode::Write`] (truncates, sweeps, adopts, syncs); a reader with no
//! writer in this process recovers in [`Mode::Read`] and changes nothing.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::StorageError;
use super::marks::Mark;
use super::meta::Meta;
use super::record::RecordError;
use super::segment::{self, SegmentHeader, SPARE_FILE_NAME, TMP_SUFFIX};
use super::view::SegmentView;

/// Who is opening the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The writer: may truncate a torn tail, delete swept files, adopt a spare.
    Write,
    /// A reader: changes nothing on disk.
    Read,
}

/// What recovery found and did.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    pub(crate) segments: Vec<SegmentView>,
    pub(crate) floor: u64,
    pub(crate) end: u64,
    pub(crate) last_ts_us: Option<i64>,
    pub(crate) marks: HashMap<String, Mark>,
    /// A torn tail overwritten: the file, the position, the bytes zeroed.
    pub(crate) torn: Option<(PathBuf, u64, u64)>,
    /// Files deleted (below the floor, temporary).
    pub(crate) swept: Vec<PathBuf>,
    /// An unused preallocated spare, for the writer's next roll.
    pub(crate) spare: Option<File>,
}

fn corrupt(path: &Path, detail: String) -> StorageError {
    StorageError::Corrupt {
        path: path.to_owned(),
        detail,
    }
}

/// Recovers the hot log in `log_dir` of the stream described by `meta`, whose marks snapshot is
/// `snapshot`.
pub(crate) fn recover(
    log_dir: &Path,
    meta: &Meta,
    snapshot: HashMap<String, Mark>,
    stream_id: [u8; 16],
    mode: Mode,
) -> Result<Recovered, StorageError> {
    let mut out = Recovered {
        marks: snapshot,
        ..Recovered::default()
    };
    if !log_dir.exists() {
        if meta.frontier > meta.floor {
            return Err(corrupt(
                log_dir,
                format!(
                    "missing segments: the log directory is gone, yet meta.db says the log holds offsets from {} and reached {}: restore it from a copy",
                    meta.floor, meta.frontier
                ),
            ));
        }
        if mode == Mode::Write {
            std::fs::create_dir_all(log_dir)
                .map_err(StorageError::io(log_dir, "creating the log directory"))?;
        }
        out.end = meta.frontier.max(meta.floor);
        out.floor = out.end;
        return Ok(out);
    }

    // List the directory.
    let mut named: Vec<(u64, PathBuf)> = Vec::new();
    let mut spare_path = None;
    let entries =
        std::fs::read_dir(log_dir).map_err(StorageError::io(log_dir, "listing segments"))?;
    for entry in entries {
        let entry = entry.map_err(StorageError::io(log_dir, "listing segments"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if let Some(first) = segment::parse_file_name(name) {
            named.push((first, path));
        } else if name == SPARE_FILE_NAME {
            spare_path = Some(path);
        } else if name.ends_with(TMP_SUFFIX) && mode == Mode::Write {
            std::fs::remove_file(&path)
                .map_err(StorageError::io(&path, "removing a temporary file"))?;
            out.swept.push(path);
        }
    }

    // A spare with a header is the newest segment, not yet renamed.
    if let Some(path) = spare_path {
        let file = open(&path, mode)?;
        let head = segment::read_at(&file, 0, segment::SEGMENT_HEADER_LEN as usize)
            .map_err(StorageError::io(&path, "reading the spare segment"))?;
        match SegmentHeader::decode(&head) {
            Ok(header) if !named.iter().any(|(first, _)| *first == header.first_offset) => {
                if mode == Mode::Write {
                    let to = log_dir.join(segment::file_name(header.first_offset));
                    std::fs::rename(&path, &to)
                        .map_err(StorageError::io(&path, "adopting the spare segment"))?;
                    named.push((header.first_offset, to));
                } else {
                    named.push((header.first_offset, path));
                }
            }
            Ok(_) | Err(RecordError::Unwritten) | Err(_) => {
                // unused, a copy of a segment already named, or a first write that was torn
                // (that record never returned): cleared, it is a spare again
                if mode == Mode::Write {
                    segment::zero_from(&file, 0)
                        .map_err(StorageError::io(&path, "clearing a torn spare segment"))?;
                    out.spare = Some(file);
                }
            }
        }
    }
    named.sort();

    // Segments wholly below the floor: eviction recorded the floor, then crashed before deleting.
    let mut kept: Vec<(u64, PathBuf)> = Vec::new();
    for (i, (first, path)) in named.iter().enumerate() {
        let next_first = named.get(i + 1).map(|(next, _)| *next);
        if next_first.is_some_and(|next| next <= meta.floor) {
            if mode == Mode::Write {
                std::fs::remove_file(path)
                    .map_err(StorageError::io(path, "removing an evicted segment"))?;
                out.swept.push(path.clone());
            }
            continue;
        }
        kept.push((*first, path.clone()));
    }

    let newest = kept.len().saturating_sub(1);
    // (segment index, position, torn): where the newest segment's records end, cleared of
    // whatever a torn write left after them once every check has passed
    let mut clear_from: Option<(usize, u64, bool)> = None;
    for (i, (first, path)) in kept.iter().enumerate() {
        let file = open(path, mode)?;
        let marks_through = meta.marks_through;
        let marks = &mut out.marks;
        let mut mark_error = None;
        let scanned = segment::scan(&file, |record, pos| {
            if record.header.first_offset < marks_through {
                return;
            }
            for mark in record.marks() {
                match mark {
                    Ok(mark) => {
                        marks.insert(
                            mark.id.to_owned(),
                            Mark {
                                last_seq: mark.last_seq,
                                last_offset: Some(mark.last_offset),
                            },
                        );
                    }
                    Err(error) => {
                        mark_error.get_or_insert((pos, error.to_string()));
                    }
                }
            }
        })
        .map_err(StorageError::io(path, "scanning a segment"))?;
        if let Some((pos, detail)) = mark_error {
            return Err(corrupt(path, format!("the record at byte {pos}: {detail}")));
        }
        let scanned = scanned.map_err(|error| corrupt(path, format!("segment header: {error}")))?;
        if scanned.header.first_offset != *first {
            return Err(corrupt(
                path,
                format!(
                    "the header says the segment starts at offset {}, its name says {first}",
                    scanned.header.first_offset
                ),
            ));
        }
        if scanned.header.stream_id != stream_id {
            return Err(corrupt(
                path,
                "the segment belongs to another stream (its stream id differs from meta.db's)"
                    .into(),
            ));
        }
        match out.segments.last() {
            Some(previous) if previous.end_offset != *first => {
                return Err(corrupt(
                    path,
                    format!(
                        "missing segment: offsets {} to {} are in no segment file (expected {}): restore it from a copy",
                        previous.end_offset,
                        first - 1,
                        segment::file_name(previous.end_offset)
                    ),
                ));
            }
            None if *first > meta.floor => {
                return Err(corrupt(
                    path,
                    format!(
                        "missing segment: meta.db's floor is offset {} but the oldest segment starts at {first} (expected {}): restore it from a copy; segments are removed only by eviction, which moves the floor first",
                        meta.floor,
                        segment::file_name(meta.floor)
                    ),
                ));
            }
            _ => {}
        }
        let at = |pos: u64| format!("the record at byte {pos} (offset {})", scanned.end_offset);
        if let Some(damage) = &scanned.damage {
            if i != newest {
                return Err(corrupt(
                    path,
                    format!(
                        "{}: {}; this is not the newest segment, so no commit can have been torn here: restore the file from a copy (the stream does not start without it)",
                        at(damage.pos),
                        damage.detail
                    ),
                ));
            }
            if damage.cut_short {
                return Err(corrupt(
                    path,
                    format!(
                        "{}: {}: the file was cut short ({} bytes; segments are preallocated, so no crash shortens one) and rows from offset {} on are lost: restore the file from a copy",
                        at(damage.pos),
                        damage.detail,
                        scanned.file_len,
                        scanned.end_offset
                    ),
                ));
            }
        }
        if i == newest {
            // What follows the last intact record must be a torn tail or nothing: an intact record
            // further on means damage in the middle.
            let after = scanned.damage.as_ref().map_or(scanned.end_pos, |d| d.pos);
            let stray = segment::first_nonzero(&file, after)
                .map_err(StorageError::io(path, "scanning a segment"))?;
            let intact_after = match stray {
                None => None,
                Some(_) => segment::intact_record_after(&file, after, scanned.end_offset)
                    .map_err(StorageError::io(path, "scanning a segment"))?,
            };
            if let Some((pos, offset)) = intact_after {
                let what = scanned
                    .damage
                    .as_ref()
                    .map_or("the record header is zeros".to_owned(), |d| {
                        d.detail.clone()
                    });
                return Err(corrupt(
                    path,
                    format!(
                        "{}: {what}, yet an intact record follows at byte {pos} (offset {offset}): the file is damaged in the middle, not torn at its end; restore it from a copy",
                        at(after)
                    ),
                ));
            }
            if let Some(damage) = &scanned.damage {
                let torn = segment::looks_torn(&file, damage.pos)
                    .map_err(StorageError::io(path, "scanning a segment"))?;
                if !torn {
                    return Err(corrupt(
                        path,
                        format!(
                            "{}: {}, and it was written whole (no sector of it reads as unwritten), so it is damage, not a commit torn by a crash: restore the file from a copy",
                            at(damage.pos),
                            damage.detail
                        ),
                    ));
                }
            }
            // cleared once every check has passed (below): a refusal changes nothing
            if stray.is_some() {
                clear_from = Some((i, after, scanned.damage.is_some()));
            }
        }
        out.last_ts_us = scanned.last_ts_us.or(out.last_ts_us);
        out.segments.push(SegmentView {
            first_offset: *first,
            path: Arc::from(path.as_path()),
            file: Arc::new(file),
            end_offset: scanned.end_offset,
            end_pos: scanned.end_pos,
            sparse: scanned.sparse,
        });
    }

    // The newest segment wholly below the floor (everything was evicted but the files remain).
    if let Some(newest) = out.segments.last() {
        if newest.end_offset <= meta.floor && newest.first_offset < meta.floor {
            let newest = out.segments.pop().expect("a newest segment");
            if mode == Mode::Write {
                std::fs::remove_file(&newest.path).map_err(StorageError::io(
                    &newest.path,
                    "removing an evicted segment",
                ))?;
                out.swept.push(newest.path.to_path_buf());
            }
        }
    }

    match (out.segments.first(), out.segments.last()) {
        (Some(oldest), Some(newest)) => {
            if meta.frontier > newest.end_offset {
                return Err(corrupt(
                    &newest.path,
                    format!(
                        "missing segment: meta.db says the log reached offset {} but the newest segment ends at {} (expected {})",
                        meta.frontier,
                        newest.end_offset,
                        segment::file_name(newest.end_offset)
                    ),
                ));
            }
            out.floor = oldest.first_offset;
            out.end = newest.end_offset;
        }
        _ => {
            if meta.frontier > meta.floor {
                return Err(corrupt(
                    log_dir,
                    format!(
                        "missing segments: meta.db says the log holds offsets from {} and reached {}, but there is no segment file (expected {}): restore the log directory from a copy",
                        meta.floor,
                        meta.frontier,
                        segment::file_name(meta.floor)
                    ),
                ));
            }
            out.end = meta.frontier.max(meta.floor);
            out.floor = out.end;
        }
    }
    if let (Mode::Write, Some((index, pos, torn))) = (mode, clear_from) {
        if let Some(newest) = out.segments.get(index) {
            let path = newest.path.to_path_buf();
            let cleared = segment::zero_from(&newest.file, pos)
                .map_err(StorageError::io(&path, "clearing a torn tail"))?;
            if torn || cleared > 0 {
                out.torn = Some((path, pos, cleared));
            }
        }
    }
    if let (Mode::Write, Some(newest)) = (mode, out.segments.last()) {
        // records that reached only the page cache before a crash become durable before anyone
        // is served them
        newest
            .file
            .sync_data()
            .map_err(StorageError::io(&newest.path, "syncing the newest segment"))?;
    }
    if mode == Mode::Write && !out.swept.is_empty() {
        segment::sync_dir(log_dir)
            .map_err(StorageError::io(log_dir, "syncing the log directory"))?;
    }
    Ok(out)
}

fn open(path: &Path, mode: Mode) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(mode == Mode::Write)
        .open(path)
        .map_err(StorageError::io(path, "opening a segment"))
}
