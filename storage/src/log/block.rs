//! A block: a run of consecutive log rows stored back to back, each behind its length. It is
//! the rows section of a segment record ([`super::record`]) and the payload of a row of the
//! format-2 SQLite buffer's `blocks` table, which the `upgrade` module converts.
//!
//! Shape: `rows_count` entries back to back, each the row's length in bytes as a `u32`
//! little-endian followed by the row's bytes, and nothing after the last one. Entry `i` of the
//! block stored at offset `o` is the log row at offset `o + i`; every entry of a block has the
//! block's `ts`.

use std::fmt;

/// Bytes of the length prefix before each row.
const LEN_BYTES: usize = 4;

/// Builds one block's payload. Reused across blocks ([`clear`](Self::clear)) so a commit
/// allocates once.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    payload: Vec<u8>,
    rows_count: u64,
}

/// A row of 4 GiB or more, which a block's `u32` length cannot hold (frames are capped far
/// below: 1 MiB by default).
#[derive(Debug)]
pub struct RowTooLarge {
    /// The row's length in bytes.
    pub len: usize,
}

impl fmt::Display for RowTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a row of {} bytes is too large to store (the limit is {} bytes)",
            self.len,
            u32::MAX
        )
    }
}

impl std::error::Error for RowTooLarge {}

impl BlockBuilder {
    /// Appends `row` as the block's next entry.
    pub fn push(&mut self, row: &[u8]) -> Result<(), RowTooLarge> {
        let len = u32::try_from(row.len()).map_err(|_| RowTooLarge { len: row.len() })?;
        self.payload.reserve(LEN_BYTES + row.len());
        self.payload.extend_from_slice(&len.to_le_bytes());
        self.payload.extend_from_slice(row);
        self.rows_count += 1;
        Ok(())
    }

    /// The payload so far, in bytes (length prefixes included).
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// Entries pushed since the last [`clear`](Self::clear).
    pub fn rows_count(&self) -> u64 {
        self.rows_count
    }

    /// The payload as stored.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Empties the block, keeping its allocation.
    pub fn clear(&mut self) {
        self.payload.clear();
        self.rows_count = 0;
    }
}

/// What is wrong with a stored block whose payload does not match its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedBlock(pub String);

/// The entries of a stored block, in order: `Ok(row bytes)`, or one `Err` (and then nothing)
/// when the payload does not hold exactly `rows_count` well-formed entries.
pub fn entries(payload: &[u8], rows_count: u64) -> Entries<'_> {
    Entries {
        rest: payload,
        left: rows_count,
        failed: false,
    }
}

/// Iterator returned by [`entries`].
pub struct Entries<'a> {
    rest: &'a [u8],
    left: u64,
    failed: bool,
}

impl<'a> Entries<'a> {
    fn fail(&mut self, detail: String) -> Option<Result<&'a [u8], MalformedBlock>> {
        self.failed = true;
        Some(Err(MalformedBlock(detail)))
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<&'a [u8], MalformedBlock>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            let extra = self.rest.len();
            return self.fail(format!("{extra} bytes after the last of its rows"));
        }
        let Some((len, rest)) = self.rest.split_first_chunk::<LEN_BYTES>() else {
            let left = self.left;
            return self.fail(format!("payload ends with {left} of its rows missing"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            let have = rest.len();
            return self.fail(format!("a row of {len} bytes, but only {have} bytes left"));
        }
        let (row, rest) = rest.split_at(len);
        self.rest = rest;
        self.left -= 1;
        Some(Ok(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(rows: &[&[u8]]) -> BlockBuilder {
        let mut block = BlockBuilder::default();
        for row in rows {
            block.push(row).unwrap();
        }
        block
    }

    #[test]
    fn entries_come_back_as_pushed() {
        let rows: [&[u8]; 4] = [b"{\"a\":1}", b"", b"\n\x00\xff", b"[1,2]"];
        let block = built(&rows);
        assert_eq!(block.rows_count(), 4);
        assert_eq!(block.payload_len(), 4 * 4 + 7 + 3 + 5);
        let back: Vec<&[u8]> = entries(block.payload(), 4).map(Result::unwrap).collect();
        assert_eq!(back, rows);
    }

    #[test]
    fn the_layout_is_length_prefixed_little_endian() {
        let block = built(&[b"ab", b"c"]);
        assert_eq!(block.payload(), b"\x02\x00\x00\x00ab\x01\x00\x00\x00c");
    }

    #[test]
    fn clear_starts_a_new_block() {
        let mut block = built(&[b"abc"]);
        block.clear();
        block.push(b"d").unwrap();
        assert_eq!(block.rows_count(), 1);
        assert_eq!(block.payload(), b"\x01\x00\x00\x00d");
    }

    #[test]
    fn a_payload_that_does_not_match_its_count_is_malformed() {
        let block = built(&[b"ab", b"c"]);
        let payload = block.payload();
        let error = |payload: &[u8], count| {
            entries(payload, count)
                .find_map(Result::err)
                .expect("malformed")
                .0
        };
        assert_eq!(error(payload, 3), "payload ends with 1 of its rows missing");
        assert_eq!(error(payload, 1), "5 bytes after the last of its rows");
        assert_eq!(
            error(&payload[..payload.len() - 1], 2),
            "a row of 1 bytes, but only 0 bytes left"
        );
        assert_eq!(
            error(&payload[..3], 1),
            "payload ends with 1 of its rows missing"
        );
        // After the error the iterator ends.
        let mut it = entries(&payload[..3], 1);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
