//! Segment files: the hot log's home under `<stream>/log/`.
//!
//! A segment is one preallocated file (`fallocate`, [`DEFAULT_SEGMENT_BYTES`] by default) named
//! for the offset of its first row, zero-padded to 20 digits so names sort as offsets do
//! (`00000000000000000001.seg`). It starts with a [`SEGMENT_HEADER_LEN`]-byte header, then holds
//! records ([`super::record`]) back to back from byte 64, then zeros to its end: the first
//! all-zero record header ends its records. Records are only ever appended, so a crash can damage
//! at most the last record of the last segment (a torn tail).
//!
//! Header layout (little-endian): magic `CCLOGSEG` (0..8), segment format version (8..12), header
//! length (12..16), first offset (16..24), creation time µs (24..32), the stream id's 16 bytes
//! (32..48), zeros (48..60), CRC32C of bytes 0..60 (60..64).
//!
//! This module reads segments (chunked positional reads, the recovery scan of one segment, the
//! search for an intact record after a damaged one) and lays out headers; the writer
//! ([`super::buffer`]) and the keeper thread ([`super::keeper`]) create and append to them.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::record::{self, Record, RecordError, ALIGN, HEADER_LEN, RECORD_MAGIC};

/// The first eight bytes of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"CCLOGSEG";

/// The segment layout this build writes and reads.
pub const SEGMENT_VERSION: u32 = 1;

/// Bytes of the segment header; the first record starts here.
pub const SEGMENT_HEADER_LEN: u64 = 64;

/// Size segments are preallocated to unless configured otherwise (64 MiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// The smallest segment size accepted (tests use small segments to roll often).
pub const MIN_SEGMENT_BYTES: u64 = 4096;

/// The preallocated file waiting to become the next segment. Its header is written together with
/// the first record that goes into it; until then it is all zeros. Recovery adopts a spare whose
/// header is written (the writer renames it to its segment name right after that first record is
/// durable, but a crash can come between the two).
pub const SPARE_FILE_NAME: &str = "spare.seg";

/// A new file is made under this suffix and renamed into place once it is complete.
pub const TMP_SUFFIX: &str = ".tmp";

/// The sparse index holds one entry per this many bytes of a segment (and one per segment), so
/// a read from any offset decodes at most this much before reaching its first row.
pub const SPARSE_EVERY_BYTES: u64 = 64 << 10;

/// Bytes read at a time when scanning a segment.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Zeros are written into a spare this much at a time, each step on the disk before the next is
/// written: a commit's `fdatasync` (which waits for the device) then has at most one step of the
/// keeper's writes ahead of it, about half a millisecond at 200 MB/s, instead of a megabyte's 5 ms.
pub const ZERO_STEP_BYTES: usize = 128 << 10;

/// The fixed fields of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Offset of the segment's first row.
    pub first_offset: u64,
    /// When the segment was started, µs since the Unix epoch.
    pub created_us: i64,
    /// The stream id (UUID bytes), so a segment copied into another stream is refused.
    pub stream_id: [u8; 16],
}

/// The file name of the segment whose first row is at `first_offset`.
pub fn file_name(first_offset: u64) -> String {
    format!("{first_offset:020}.seg")
}

/// The first offset a segment file name stands for; `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl SegmentHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut out = [0u8; SEGMENT_HEADER_LEN as usize];
        out[0..8].copy_from_slice(&SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(SEGMENT_HEADER_LEN as u32).to_le_bytes());
        out[16..24].copy_from_slice(&self.first_offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.created_us.to_le_bytes());
        out[32..48].copy_from_slice(&self.stream_id);
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a header; [`RecordError::Unwritten`] when it is all zeros (a spare never used).
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, RecordError> {
        let Some(head) = bytes.first_chunk::<{ SEGMENT_HEADER_LEN as usize }>() else {
            return Err(RecordError::Invalid(format!(
                "the file holds {} bytes, fewer than a segment header ({SEGMENT_HEADER_LEN})",
                bytes.len()
            )));
        };
        if head.iter().all(|&b| b == 0) {
            return Err(RecordError::Unwritten);
        }
        let invalid = |detail: String| Err(RecordError::Invalid(detail));
        if head[0..8] != SEGMENT_MAGIC {
            return invalid(format!("bad segment magic {:02x?}", &head[0..8]));
        }
        let crc = u32::from_le_bytes(head[60..64].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&head[..60]) {
            return invalid("CRC32C mismatch".into());
        }
        let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if version != SEGMENT_VERSION {
            return invalid(format!(
                "segment format version {version}, this build reads {SEGMENT_VERSION}"
            ));
        }
        let header_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        if u64::from(header_len) != SEGMENT_HEADER_LEN {
            return invalid(format!("segment header of {header_len} bytes"));
        }
        Ok(SegmentHeader {
            first_offset: u64::from_le_bytes(head[16..24].try_into().expect("8 bytes")),
            created_us: i64::from_le_bytes(head[24..32].try_into().expect("8 bytes")),
            stream_id: head[32..48].try_into().expect("16 bytes"),
        })
    }
}

/// Reads `len` bytes at `pos`, fewer only at the end of the file.
pub fn read_at(file: &File, pos: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut out[filled..], pos + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.truncate(filled);
    Ok(out)
}

/// Positional reads of one segment through a window of at least [`CHUNK_BYTES`], so walking
/// records costs one `pread` per megabyte rather than two per record.
pub struct Chunked<'f> {
    file: &'f File,
    /// Reads never go past this position (the durable end, for a reader).
    limit: u64,
    window: Vec<u8>,
    window_pos: u64,
}

impl<'f> Chunked<'f> {
    /// Reads `file` up to byte `limit`.
    pub fn new(file: &'f File, limit: u64) -> Chunked<'f> {
        Chunked {
            file,
            limit,
            window: Vec::new(),
            window_pos: 0,
        }
    }

    /// The bytes from `pos` on: at least `want` of them unless the limit comes first.
    pub fn bytes_at(&mut self, pos: u64, want: u64) -> io::Result<&[u8]> {
        let want = want.min(self.limit.saturating_sub(pos));
        let window_end = self.window_pos + self.window.len() as u64;
        if pos < self.window_pos || pos + want > window_end {
            let len = (want as usize)
                .max(CHUNK_BYTES)
                .min(self.limit.saturating_sub(pos) as usize);
            self.window = read_at(self.file, pos, len)?;
            self.window_pos = pos;
        }
        Ok(&self.window[(pos - self.window_pos) as usize..])
    }

    /// The record at `pos`, decoded and checked.
    pub fn record_at(&mut self, pos: u64) -> io::Result<Result<Record<'_>, RecordError>> {
        let head = self.bytes_at(pos, HEADER_LEN as u64)?;
        let total = match record::parse_header(head) {
            Ok(header) => header.total_len(),
            Err(error) => return Ok(Err(error)),
        };
        Ok(record::decode(self.bytes_at(pos, total)?))
    }
}

/// What the recovery scan of one segment found.
#[derive(Debug)]
pub struct Scanned {
    /// The header.
    pub header: SegmentHeader,
    /// The position after the last intact record (where the next one goes).
    pub end_pos: u64,
    /// The offset after the last intact record's last row (`header.first_offset` when empty).
    pub end_offset: u64,
    /// The `ts_us` of the last intact record.
    pub last_ts_us: Option<i64>,
    /// `(first offset, position)` of a record every [`SPARSE_EVERY_BYTES`].
    pub sparse: Vec<(u64, u64)>,
    /// The first damaged bytes after the intact records, if the segment does not end cleanly.
    pub damage: Option<Damage>,
    /// Bytes in the file.
    pub file_len: u64,
}

/// Bytes after a segment's intact records that are neither a record nor zeros.
#[derive(Debug, Clone)]
pub struct Damage {
    /// Where they start (the position after the last intact record).
    pub pos: u64,
    /// What is wrong there.
    pub detail: String,
    /// The record there runs past the end of the file: the file was cut short (segments are
    /// preallocated, so no crash makes a record end past the file's end).
    pub cut_short: bool,
}

/// Reads a segment's header and walks its records from the first, checking each record's CRC
/// and that offsets follow on; hands each intact record to `visit` with its position. Stops at
/// the first all-zero header (the clean end) or the first record that does not check out
/// (reported in [`Scanned::damage`], for the caller to judge: a torn tail or damage).
pub fn scan(
    file: &File,
    mut visit: impl FnMut(&Record<'_>, u64),
) -> io::Result<Result<Scanned, RecordError>> {
    let file_len = file.metadata()?.len();
    let head = read_at(file, 0, SEGMENT_HEADER_LEN as usize)?;
    let header = match SegmentHeader::decode(&head) {
        Ok(header) => header,
        Err(error) => return Ok(Err(error)),
    };
    let mut chunked = Chunked::new(file, file_len);
    let mut scanned = Scanned {
        header,
        end_pos: SEGMENT_HEADER_LEN,
        end_offset: header.first_offset,
        last_ts_us: None,
        sparse: Vec::new(),
        damage: None,
        file_len,
    };
    let mut last_sparse: Option<u64> = None;
    loop {
        let pos = scanned.end_pos;
        if pos >= file_len {
            break;
        }
        let record = match chunked.record_at(pos)? {
            Ok(record) => record,
            Err(RecordError::Unwritten) => break,
            Err(error) => {
                scanned.damage = Some(Damage {
                    pos,
                    cut_short: matches!(error, RecordError::Short { .. }),
                    detail: error.to_string(),
                });
                break;
            }
        };
        if record.header.first_offset != scanned.end_offset {
            scanned.damage = Some(Damage {
                pos,
                detail: format!(
                    "the record starts at offset {}, expected {}",
                    record.header.first_offset, scanned.end_offset
                ),
                cut_short: false,
            });
            break;
        }
        if last_sparse.is_none_or(|last| pos - last >= SPARSE_EVERY_BYTES) {
            scanned.sparse.push((record.header.first_offset, pos));
            last_sparse = Some(pos);
        }
        visit(&record, pos);
        scanned.end_offset = record.header.end_offset();
        scanned.last_ts_us = Some(record.header.ts_us);
        scanned.end_pos = pos + record.header.total_len();
    }
    Ok(Ok(scanned))
}

/// The first intact record after `after` (at an aligned position) whose first offset is at
/// least `min_offset`: `(position, first offset)`. A damaged record followed by an intact one is
/// damage in the middle of the log, never a torn tail.
pub fn intact_record_after(
    file: &File,
    after: u64,
    min_offset: u64,
) -> io::Result<Option<(u64, u64)>> {
    let file_len = file.metadata()?.len();
    let mut chunked = Chunked::new(file, file_len);
    let mut pos = after + ALIGN as u64;
    pos -= pos % ALIGN as u64;
    while pos + HEADER_LEN as u64 <= file_len {
        let window = chunked.bytes_at(pos, HEADER_LEN as u64)?;
        // scan the window for the magic at aligned positions before decoding anything
        let mut step = 0usize;
        let mut found = None;
        while step + HEADER_LEN <= window.len() {
            if window[step..step + 4] == RECORD_MAGIC {
                found = Some(pos + step as u64);
                break;
            }
            step += ALIGN;
        }
        let Some(candidate) = found else {
            pos += step.max(ALIGN) as u64;
            continue;
        };
        if let Ok(record) = chunked.record_at(candidate)? {
            if record.header.first_offset >= min_offset {
                return Ok(Some((candidate, record.header.first_offset)));
            }
        }
        pos = candidate + ALIGN as u64;
    }
    Ok(None)
}

/// Bytes of the unit a disk writes atomically at the least (a sector).
pub const SECTOR_BYTES: u64 = 512;

/// Whether the record at `pos`, which fails its check, shows the mark of a torn write: some
/// sector's share of it reads as zeros (never written: segments are zeros where no record went)
/// — at least 8 bytes of it, or the record's last bytes. A complete record never holds 8 zero
/// bytes in a row where a sector starts or ends (its header starts with the magic and ends with
/// the CRC, rows are JSON text, a mark ends with a non-zero offset), so a flipped or overwritten
/// byte in a record that was wholly written is damage, not a torn tail.
pub fn looks_torn(file: &File, pos: u64) -> io::Result<bool> {
    let file_len = file.metadata()?.len();
    let head = read_at(file, pos, HEADER_LEN)?;
    let claimed = match record::parse_header(&head) {
        Ok(header) => HEADER_LEN as u64 + header.rows_len + u64::from(header.marks_len),
        Err(_) => HEADER_LEN as u64,
    };
    let end = (pos + claimed).min(file_len);
    let bytes = read_at(file, pos, (end - pos) as usize)?;
    let mut lo = pos;
    while lo < end {
        let hi = ((lo / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
        let share = &bytes[(lo - pos) as usize..(hi - pos) as usize];
        if share.iter().all(|&b| b == 0) && (share.len() >= 8 || hi == end) {
            return Ok(true);
        }
        lo = hi;
    }
    Ok(false)
}

/// The next position at or after `pos` that may hold data: the filesystem's `SEEK_DATA` skips
/// holes and unwritten (preallocated) extents; `None` when only those follow. Where the
/// filesystem cannot tell, `pos` itself.
fn next_data(file: &File, pos: u64) -> Option<u64> {
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(pos)) {
        Ok(at) => Some(at.max(pos)),
        Err(rustix::io::Errno::NXIO) => None,
        Err(_) => Some(pos),
    }
}

/// The position of the first non-zero byte at or after `from`, if any. Reads only what the
/// filesystem holds as data, so the preallocated rest of a segment costs next to nothing.
pub fn first_nonzero(file: &File, from: u64) -> io::Result<Option<u64>> {
    let file_len = file.metadata()?.len();
    let zeros = vec![0u8; CHUNK_BYTES];
    let mut pos = from;
    while pos < file_len {
        let Some(at) = next_data(file, pos) else {
            return Ok(None);
        };
        pos = at;
        if pos >= file_len {
            break;
        }
        let len = CHUNK_BYTES.min((file_len - pos) as usize);
        let chunk = read_at(file, pos, len)?;
        if chunk.is_empty() {
            break;
        }
        // a slice comparison is a memcmp, fast even in a debug build
        if chunk[..] != zeros[..chunk.len()] {
            let i = chunk.iter().position(|&b| b != 0).expect("a non-zero byte");
            return Ok(Some(pos + i as u64));
        }
        pos += chunk.len() as u64;
    }
    Ok(None)
}

/// Overwrites every non-zero byte from `from` to the end of the file with zeros and makes that
/// durable: a torn tail (or a failed commit's bytes) no longer reads as anything. Returns how
/// many bytes it overwrote (in whole chunks).
pub fn zero_from(file: &File, from: u64) -> io::Result<u64> {
    let file_len = file.metadata()?.len();
    let zeros = vec![0u8; CHUNK_BYTES];
    let mut pos = from;
    let mut zeroed = 0;
    while pos < file_len {
        // holes and unwritten extents read as zeros: skip them
        let Some(at) = next_data(file, pos) else {
            break;
        };
        pos = at;
        if pos >= file_len {
            break;
        }
        let len = CHUNK_BYTES.min((file_len - pos) as usize);
        let chunk = read_at(file, pos, len)?;
        if chunk[..] != zeros[..chunk.len()] {
            file.write_all_at(&zeros[..chunk.len()], pos)?;
            zeroed += chunk.len() as u64;
        }
        pos += len as u64;
    }
    if zeroed > 0 {
        file.sync_data()?;
    }
    Ok(zeroed)
}

/// Creates `path` (which must not exist) preallocated to `len` bytes of zeros with `fallocate`
/// (or, where the filesystem has no `fallocate`, by writing the zeros) and made durable, so
/// appending into it later changes no file size. With `written`, the zeros are also written
/// over the allocated space: `fallocate` leaves *unwritten* extents, and the first write into
/// each block of one makes the next `fdatasync` journal the extent's conversion too — measured
/// here, a 100-row commit (10 KiB, three new blocks) cost 0.10 ms against 0.06 ms into written
/// blocks. Writing the zeros costs the disk the segment's size once more, off the commit path
/// (the keeper thread does it for every spare).
pub fn preallocate(path: &Path, len: u64, written: bool) -> io::Result<File> {
    preallocate_paced(path, len, written, None, &AtomicBool::new(false))
}

/// [`preallocate`], with the zeros (when written) spread over `within`: after each
/// [`ZERO_STEP_BYTES`] step the keeper waits until its share of `within` has passed, so the disk
/// time it takes from the commits is spread over the segment's life rather than taken in one
/// burst. Once behind schedule the zeros are written as fast as the disk allows until they are on
/// it again; once `hurry` is set (the writer is waiting for this spare) there is no more waiting.
/// The waits are `park_timeout`s: whoever sets `hurry` unparks this thread.
pub fn preallocate_paced(
    path: &Path,
    len: u64,
    written: bool,
    within: Option<Duration>,
    hurry: &AtomicBool,
) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    let write_zeros =
        match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len) {
            Ok(()) => written,
            // filesystems without fallocate (FUSE, some network filesystems): write the zeros
            Err(rustix::io::Errno::OPNOTSUPP) => true,
            Err(errno) => return Err(io::Error::from(errno)),
        };
    if write_zeros {
        let zeros = vec![0u8; ZERO_STEP_BYTES];
        let started = Instant::now();
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(ZERO_STEP_BYTES as u64) as usize;
            file.write_all_at(&zeros[..n], pos)?;
            file.sync_data()?;
            pos += n as u64;
            if let Some(within) = within {
                let due = within.mul_f64(pos as f64 / len as f64);
                while !hurry.load(Ordering::Acquire) {
                    match due.checked_sub(started.elapsed()) {
                        Some(early) if !early.is_zero() => std::thread::park_timeout(early),
                        _ => break,
                    }
                }
            }
        }
    }
    file.sync_all()?;
    Ok(file)
}

/// Makes the directory's entries (created, renamed, removed files) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_offsets() {
        assert_eq!(file_name(1), "00000000000000000001.seg");
        assert_eq!(parse_file_name(&file_name(1234567)), Some(1234567));
        assert_eq!(parse_file_name("spare.seg"), None);
        assert_eq!(parse_file_name("1.seg"), None);
        assert!(file_name(99) < file_name(100));
    }

    #[test]
    fn headers_round_trip_and_damage_is_seen() {
        let header = SegmentHeader {
            first_offset: 42,
            created_us: 7,
            stream_id: [9; 16],
        };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes).unwrap(), header);
        assert_eq!(
            SegmentHeader::decode(&[0; 64]).unwrap_err(),
            RecordError::Unwritten
        );
        for i in 0..64 {
            let mut damaged = bytes;
            damaged[i] ^= 0x10;
            assert!(SegmentHeader::decode(&damaged).is_err(), "byte {i}");
        }
    }
}
