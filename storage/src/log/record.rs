//! One record of a hot-log segment: everything one group commit appended, written with one
//! `pwrite` and made durable with one `fdatasync`.
//!
//! Layout (all integers little-endian), [`HEADER_LEN`] bytes of header, then the payload, then
//! zero padding to a multiple of [`ALIGN`] bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `CCRC` |
//! | 4..6 | record format version ([`RECORD_VERSION`]) |
//! | 6..8 | flags (0) |
//! | 8..16 | offset of the first row |
//! | 16..24 | `ts_us` of every row of the commit (µs since the Unix epoch) |
//! | 24..28 | rows |
//! | 28..32 | marks |
//! | 32..40 | bytes of the rows section |
//! | 40..44 | bytes of the marks section |
//! | 44..48 | CRC32C of bytes 0..44 and of the payload |
//!
//! The rows section is each row's length as a `u32` followed by its bytes (the encoded wire row,
//! exactly as validated: replay is a copy), the layout of [`super::block`]. The marks section
//! holds, for each exactly-once publisher whose mark the commit moved, its id's length (`u16`),
//! the id, and its new `last_seq` and `last_offset` (`u64` each): recovery rebuilds the marks
//! from the last snapshot plus the records after it.
//!
//! Pure functions over bytes, no I/O: the segment reader, the recovery scan and the fuzz target
//! all decode through [`decode`].

use std::fmt;

use super::block::{self, BlockBuilder, RowTooLarge};

/// The first four bytes of every record.
pub const RECORD_MAGIC: [u8; 4] = *b"CCRC";

/// The record layout this build writes and reads.
pub const RECORD_VERSION: u16 = 1;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 48;

/// Records start at multiples of this many bytes (from the segment's start), so a scan looking
/// for the next intact record after a damaged one only tries aligned positions.
pub const ALIGN: usize = 8;

/// Bytes of one mark entry besides its id.
const MARK_FIXED_BYTES: usize = 2 + 8 + 8;

/// The fixed fields of a record, as read from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Offset of the record's first row.
    pub first_offset: u64,
    /// The commit's timestamp, µs since the Unix epoch.
    pub ts_us: i64,
    /// Rows in the record (at least 1: a commit that appends nothing writes no record).
    pub rows_count: u32,
    /// Mark entries in the record.
    pub marks_count: u32,
    /// Bytes of the rows section.
    pub rows_len: u64,
    /// Bytes of the marks section.
    pub marks_len: u32,
    /// The stored CRC32C.
    pub crc: u32,
}

impl RecordHeader {
    /// The offset after the record's last row.
    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.rows_count)
    }

    /// Bytes the whole record takes in the segment: header, payload and padding.
    pub fn total_len(&self) -> u64 {
        padded(HEADER_LEN as u64 + self.rows_len + u64::from(self.marks_len))
    }
}

/// An exactly-once mark a record carries: publisher `id` reached `last_seq`, at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMark<'a> {
    /// The publisher id.
    pub id: &'a str,
    /// Its last landed seq after this commit.
    pub last_seq: u64,
    /// The offset that seq landed at.
    pub last_offset: u64,
}

/// A record whose header and CRC checked out, borrowing the bytes it was decoded from.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The fixed fields.
    pub header: RecordHeader,
    rows: &'a [u8],
    marks: &'a [u8],
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The header is all zeros: never written (the end of a segment's records).
    Unwritten,
    /// Fewer bytes than the header or the length it claims: read more, or the record was torn.
    Short {
        /// Bytes the record needs (the header's, when only part of it is there).
        needed: u64,
        /// Bytes there were.
        have: u64,
    },
    /// The bytes are damaged or are not a record.
    Invalid(String),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Unwritten => f.write_str("no record here (zero bytes)"),
            RecordError::Short { needed, have } => {
                write!(
                    f,
                    "record of {needed} bytes, but only {have} bytes are there"
                )
            }
            RecordError::Invalid(detail) => f.write_str(detail),
        }
    }
}

/// Rounds `len` up to a multiple of [`ALIGN`].
pub fn padded(len: u64) -> u64 {
    len.div_ceil(ALIGN as u64) * ALIGN as u64
}

/// Reads and sanity-checks a record header at the start of `bytes` (the CRC is checked by
/// [`decode`], which needs the whole record).
pub fn parse_header(bytes: &[u8]) -> Result<RecordHeader, RecordError> {
    let Some(head) = bytes.first_chunk::<HEADER_LEN>() else {
        if !bytes.is_empty() && bytes.iter().all(|&b| b == 0) {
            return Err(RecordError::Unwritten);
        }
        return Err(RecordError::Short {
            needed: HEADER_LEN as u64,
            have: bytes.len() as u64,
        });
    };
    if head.iter().all(|&b| b == 0) {
        return Err(RecordError::Unwritten);
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    if head[0..4] != RECORD_MAGIC {
        return Err(RecordError::Invalid(format!(
            "bad record magic {:02x?} (expected {:02x?})",
            &head[0..4],
            RECORD_MAGIC
        )));
    }
    let version = u16_at(4);
    if version != RECORD_VERSION {
        return Err(RecordError::Invalid(format!(
            "record format version {version}, this build reads {RECORD_VERSION}"
        )));
    }
    let flags = u16_at(6);
    if flags != 0 {
        return Err(RecordError::Invalid(format!(
            "unknown record flags {flags:#06x}"
        )));
    }
    let header = RecordHeader {
        first_offset: u64_at(8),
        ts_us: u64_at(16) as i64,
        rows_count: u32_at(24),
        marks_count: u32_at(28),
        rows_len: u64_at(32),
        marks_len: u32_at(40),
        crc: u32_at(44),
    };
    if header.rows_count == 0 {
        return Err(RecordError::Invalid("a record with no rows".into()));
    }
    if header.first_offset == 0
        || header.first_offset > i64::MAX as u64 - u64::from(header.rows_count)
    {
        return Err(RecordError::Invalid(format!(
            "first offset {} out of range",
            header.first_offset
        )));
    }
    if header.rows_len < 4 * u64::from(header.rows_count) || header.rows_len > 1 << 46 {
        return Err(RecordError::Invalid(format!(
            "{} rows cannot take {} bytes",
            header.rows_count, header.rows_len
        )));
    }
    if (header.marks_len as usize) < MARK_FIXED_BYTES * header.marks_count as usize {
        return Err(RecordError::Invalid(format!(
            "{} marks cannot take {} bytes",
            header.marks_count, header.marks_len
        )));
    }
    Ok(header)
}

/// The CRC32C a record's header and payload must carry.
fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[..44]), payload)
}

/// Decodes the record at the start of `bytes`, checking its header, its CRC and the shape of its
/// sections. `bytes` may hold more after the record (the rest of a segment).
pub fn decode(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    let header = parse_header(bytes)?;
    let total = header.total_len();
    if (bytes.len() as u64) < total {
        return Err(RecordError::Short {
            needed: total,
            have: bytes.len() as u64,
        });
    }
    let rows_end = HEADER_LEN + header.rows_len as usize;
    let marks_end = rows_end + header.marks_len as usize;
    let payload = &bytes[HEADER_LEN..marks_end];
    let crc = checksum(&bytes[..HEADER_LEN], payload);
    if crc != header.crc {
        return Err(RecordError::Invalid(format!(
            "CRC32C mismatch: stored {:08x}, computed {crc:08x}",
            header.crc
        )));
    }
    if bytes[marks_end..total as usize].iter().any(|&b| b != 0) {
        return Err(RecordError::Invalid("non-zero padding".into()));
    }
    let record = Record {
        header,
        rows: &bytes[HEADER_LEN..rows_end],
        marks: &bytes[rows_end..marks_end],
    };
    // The CRC matched, so a shape error here is a writer bug or a forged record: refuse it
    // rather than serve part of it.
    for row in record.rows() {
        row.map_err(|malformed| RecordError::Invalid(format!("rows section: {}", malformed.0)))?;
    }
    for mark in record.marks() {
        mark?;
    }
    Ok(record)
}

impl<'a> Record<'a> {
    /// The rows, in offset order from [`RecordHeader::first_offset`].
    pub fn rows(&self) -> impl Iterator<Item = Result<&'a [u8], block::MalformedBlock>> + 'a {
        block::entries(self.rows, u64::from(self.header.rows_count))
    }

    /// The marks the commit moved.
    pub fn marks(&self) -> impl Iterator<Item = Result<RecordMark<'a>, RecordError>> + 'a {
        let mut rest = self.marks;
        let mut left = self.header.marks_count;
        std::iter::from_fn(move || {
            if left == 0 {
                if rest.is_empty() {
                    return None;
                }
                let extra = rest.len();
                rest = &[];
                return Some(Err(RecordError::Invalid(format!(
                    "marks section: {extra} bytes after the last mark"
                ))));
            }
            left -= 1;
            let bad = |detail: &str| RecordError::Invalid(format!("marks section: {detail}"));
            let Some((len, after)) = rest.split_first_chunk::<2>() else {
                left = 0;
                rest = &[];
                return Some(Err(bad("ends inside a mark")));
            };
            let len = u16::from_le_bytes(*len) as usize;
            if after.len() < len + 16 {
                left = 0;
                rest = &[];
                return Some(Err(bad("ends inside a mark")));
            }
            let (id, after) = after.split_at(len);
            let Ok(id) = std::str::from_utf8(id) else {
                left = 0;
                rest = &[];
                return Some(Err(bad("a publisher id that is not UTF-8")));
            };
            let last_seq = u64::from_le_bytes(after[..8].try_into().expect("8 bytes"));
            let last_offset = u64::from_le_bytes(after[8..16].try_into().expect("8 bytes"));
            rest = &after[16..];
            Some(Ok(RecordMark {
                id,
                last_seq,
                last_offset,
            }))
        })
    }
}

/// Builds one record. Reused across commits ([`begin`](Self::begin)) so a commit allocates
/// nothing once the buffer has grown to the largest commit.
#[derive(Debug, Default)]
pub struct RecordBuilder {
    buf: Vec<u8>,
    rows: BlockBuilder,
    marks: Vec<u8>,
    marks_count: u32,
    first_offset: u64,
    ts_us: i64,
}

impl RecordBuilder {
    /// Starts a record whose first row is at `first_offset`, stamped `ts_us`.
    pub fn begin(&mut self, first_offset: u64, ts_us: i64) {
        self.rows.clear();
        self.marks.clear();
        self.marks_count = 0;
        self.first_offset = first_offset;
        self.ts_us = ts_us;
    }

    /// Appends the row at the next offset.
    pub fn push_row(&mut self, row: &[u8]) -> Result<(), RowTooLarge> {
        self.rows.push(row)
    }

    /// Rows pushed since [`begin`](Self::begin).
    pub fn rows_count(&self) -> u64 {
        self.rows.rows_count()
    }

    /// Records that publisher `id` now stands at `last_seq`, landed at `last_offset`.
    ///
    /// # Panics
    ///
    /// If `id` is longer than 65,535 bytes (publisher ids are capped far below, at 128).
    pub fn push_mark(&mut self, id: &str, last_seq: u64, last_offset: u64) {
        let len = u16::try_from(id.len()).expect("publisher ids are short");
        self.marks.extend_from_slice(&len.to_le_bytes());
        self.marks.extend_from_slice(id.as_bytes());
        self.marks.extend_from_slice(&last_seq.to_le_bytes());
        self.marks.extend_from_slice(&last_offset.to_le_bytes());
        self.marks_count += 1;
    }

    /// Lays out the record (header with its CRC, payload, padding) and returns its bytes.
    ///
    /// # Panics
    ///
    /// If no row was pushed, or there are more than `u32::MAX` rows or marks, or 4 GiB of marks:
    /// the writer never builds such a commit.
    pub fn finish(&mut self) -> &[u8] {
        let rows_count = u32::try_from(self.rows.rows_count()).expect("rows per record fit u32");
        assert!(rows_count > 0, "a record holds at least one row");
        let rows = self.rows.payload();
        let marks_len = u32::try_from(self.marks.len()).expect("marks fit u32");
        let total = padded((HEADER_LEN + rows.len() + self.marks.len()) as u64) as usize;
        self.buf.clear();
        self.buf.reserve(total);
        self.buf.extend_from_slice(&RECORD_MAGIC);
        self.buf.extend_from_slice(&RECORD_VERSION.to_le_bytes());
        self.buf.extend_from_slice(&0u16.to_le_bytes());
        self.buf.extend_from_slice(&self.first_offset.to_le_bytes());
        self.buf.extend_from_slice(&self.ts_us.to_le_bytes());
        self.buf.extend_from_slice(&rows_count.to_le_bytes());
        self.buf.extend_from_slice(&self.marks_count.to_le_bytes());
        self.buf
            .extend_from_slice(&(rows.len() as u64).to_le_bytes());
        self.buf.extend_from_slice(&marks_len.to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        debug_assert_eq!(self.buf.len(), HEADER_LEN);
        self.buf.extend_from_slice(rows);
        self.buf.extend_from_slice(&self.marks);
        let crc = checksum(&self.buf[..HEADER_LEN], &self.buf[HEADER_LEN..]);
        self.buf[44..48].copy_from_slice(&crc.to_le_bytes());
        self.buf.resize(total, 0);
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(first: u64, rows: &[&[u8]], marks: &[(&str, u64, u64)]) -> Vec<u8> {
        let mut builder = RecordBuilder::default();
        builder.begin(first, 1_700_000_000_000_000);
        for row in rows {
            builder.push_row(row).unwrap();
        }
        for (id, seq, offset) in marks {
            builder.push_mark(id, *seq, *offset);
        }
        builder.finish().to_vec()
    }

    #[test]
    fn a_record_decodes_to_what_was_built() {
        let rows: [&[u8]; 3] = [b"{\"a\":1}", b"", b"[1,2,\"\xc3\xa9\"]"];
        let bytes = built(7, &rows, &[("p1", 3, 9), ("", 1, 8)]);
        assert_eq!(bytes.len() % ALIGN, 0);
        let record = decode(&bytes).unwrap();
        assert_eq!(record.header.first_offset, 7);
        assert_eq!(record.header.end_offset(), 10);
        assert_eq!(record.header.ts_us, 1_700_000_000_000_000);
        assert_eq!(record.header.total_len(), bytes.len() as u64);
        let back: Vec<&[u8]> = record.rows().map(Result::unwrap).collect();
        assert_eq!(back, rows);
        let marks: Vec<RecordMark<'_>> = record.marks().map(Result::unwrap).collect();
        assert_eq!(
            marks,
            [
                RecordMark {
                    id: "p1",
                    last_seq: 3,
                    last_offset: 9
                },
                RecordMark {
                    id: "",
                    last_seq: 1,
                    last_offset: 8
                }
            ]
        );
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let bytes = built(1, &[b"{\"x\":1}", b"{\"y\":22}"], &[("pub", 2, 2)]);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[i] ^= 1 << bit;
                assert!(
                    decode(&damaged).is_err(),
                    "flipping bit {bit} of byte {i} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn short_and_unwritten_bytes_are_told_apart() {
        let bytes = built(1, &[b"abc"], &[]);
        assert_eq!(decode(&[0; 64]).unwrap_err(), RecordError::Unwritten);
        assert_eq!(decode(&[0; 10]).unwrap_err(), RecordError::Unwritten);
        assert!(matches!(
            decode(&bytes[..20]).unwrap_err(),
            RecordError::Short { needed: 48, .. }
        ));
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]).unwrap_err(),
            RecordError::Short { .. }
        ));
        // Trailing bytes after a record are the next record's business.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xff; 100]);
        assert_eq!(decode(&longer).unwrap().header.rows_count, 1);
    }
}
