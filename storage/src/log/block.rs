//! A block: the payload of one row of the buffer's `blocks` table, holding a run of consecutive
//! log rows that were committed together.
//!
//! Shape: `rows_count` entries back to back, each the row's length in bytes as a `u32`
//! little-endian followed by the row's bytes, and nothing after the last one. Entry `i` of the
//! block stored at offset `o` is the log row at offset `o + i`; every entry of a block has the
//! block's `ts`.
//!
//! Why blocks: a per-row SQLite insert costs about 1 µs of CPU (B-tree seek, record build, page
//! cache), so a 10,000-row commit spent ~10 ms in SQLite against a 0.2 ms fsync. Appending a row
//! to a block is a memcpy; SQLite then does one insert per [`BLOCK_TARGET_BYTES`] of rows
//! (figures in `docs/PERFORMANCE.md`, "Commit throughput").

use std::fmt;

use rusqlite::params;

use super::buffer::{to_i64, BLOCK_TARGET_BYTES};

/// Bytes of the length prefix before each row.
const LEN_BYTES: usize = 4;

/// Builds one block's payload. Reused across blocks ([`clear`](Self::clear)) so a commit
/// allocates once.
#[derive(Debug, Default)]
pub(crate) struct BlockBuilder {
    payload: Vec<u8>,
    rows_count: u64,
}

/// A row of 4 GiB or more, which a block's `u32` length cannot hold (frames are capped far
/// below: 1 MiB by default).
#[derive(Debug)]
pub(crate) struct RowTooLarge {
    /// The row's length in bytes.
    pub(crate) len: usize,
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
    pub(crate) fn push(&mut self, row: &[u8]) -> Result<(), RowTooLarge> {
        let len = u32::try_from(row.len()).map_err(|_| RowTooLarge { len: row.len() })?;
        self.payload.reserve(LEN_BYTES + row.len());
        self.payload.extend_from_slice(&len.to_le_bytes());
        self.payload.extend_from_slice(row);
        self.rows_count += 1;
        Ok(())
    }

    /// The payload so far, in bytes (length prefixes included).
    pub(crate) fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// Entries pushed since the last [`clear`](Self::clear).
    pub(crate) fn rows_count(&self) -> u64 {
        self.rows_count
    }

    /// The payload as stored.
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Empties the block, keeping its allocation.
    pub(crate) fn clear(&mut self) {
        self.payload.clear();
        self.rows_count = 0;
    }
}

/// What is wrong with a stored block whose payload does not match its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MalformedBlock(pub(crate) String);

/// The entries of a stored block, in order: `Ok(row bytes)`, or one `Err` (and then nothing)
/// when the payload does not hold exactly `rows_count` well-formed entries.
pub(crate) fn entries(payload: &[u8], rows_count: u64) -> Entries<'_> {
    Entries {
        rest: payload,
        left: rows_count,
        failed: false,
    }
}

/// Iterator returned by [`entries`].
pub(crate) struct Entries<'a> {
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

const INSERT_BLOCK: &str =
    "INSERT INTO blocks(\"offset\", ts, rows_count, payload) VALUES (?1, ?2, ?3, ?4)";

/// Cuts a commit's new rows into blocks and inserts each full one.
pub(crate) struct BlockWriter<'c> {
    insert: rusqlite::CachedStatement<'c>,
    block: BlockBuilder,
    /// The offset of the block being built (of the next row pushed once it is flushed).
    first_offset: u64,
    ts_us: i64,
}

impl<'c> BlockWriter<'c> {
    /// A writer whose first block starts at `first_offset`, stamped `ts_us`, inside the
    /// transaction open on `conn`.
    pub(crate) fn new(
        conn: &'c rusqlite::Connection,
        first_offset: u64,
        ts_us: i64,
    ) -> rusqlite::Result<Self> {
        Ok(BlockWriter {
            insert: conn.prepare_cached(INSERT_BLOCK)?,
            block: BlockBuilder::default(),
            first_offset,
            ts_us,
        })
    }

    /// Adds the row at the next offset; inserts the block first when it is full.
    pub(crate) fn push(&mut self, row: &[u8]) -> rusqlite::Result<()> {
        let full = self.block.payload_len() + LEN_BYTES + row.len() > BLOCK_TARGET_BYTES;
        if self.block.rows_count() > 0 && full {
            self.flush()?;
        }
        self.block
            .push(row)
            .map_err(|too_large| rusqlite::Error::ToSqlConversionFailure(Box::new(too_large)))
    }

    /// The `ts` of the block being built.
    pub(crate) fn ts_us(&self) -> i64 {
        self.ts_us
    }

    /// The offset the next pushed row gets.
    pub(crate) fn next_offset(&self) -> u64 {
        self.first_offset + self.block.rows_count()
    }

    /// Inserts the block being built, then starts the next one at `first_offset` with `ts_us`
    /// (rows not adjacent to the previous ones, or stamped differently, need a new block).
    pub(crate) fn restart_at(&mut self, first_offset: u64, ts_us: i64) -> rusqlite::Result<()> {
        self.flush()?;
        self.first_offset = first_offset;
        self.ts_us = ts_us;
        Ok(())
    }

    /// Inserts the block being built, if it holds any row.
    pub(crate) fn flush(&mut self) -> rusqlite::Result<()> {
        let rows_count = self.block.rows_count();
        if rows_count == 0 {
            return Ok(());
        }
        self.insert.execute(params![
            to_i64(self.first_offset),
            self.ts_us,
            to_i64(rows_count),
            self.block.payload()
        ])?;
        self.first_offset += rows_count;
        self.block.clear();
        Ok(())
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
