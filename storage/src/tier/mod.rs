//! The sealed Parquet tier: the segment codec, the segment index and the sealing step.
//!
//! - **Seal** ([`SegmentWriter`], [`write_segment`], `parquet_write.rs`): in, a stream's
//!   [`RowCodec`](crate::schema::RowCodec) and its committed rows `(offset, ts_us, canonical
//!   row bytes)` in strictly increasing offset order; out, one Parquet file (to any
//!   `Write + Send`) and its [`SegmentStats`]. The canonical rows are decoded (`row_decode.rs`)
//!   straight into Arrow arrays.
//! - **Read back** ([`SegmentReader`], `parquet_read.rs`): in, a file written by the sealer and an
//!   offset range; out, the rows of that range in offset order, in bounded [`RowChunk`]s, each
//!   row re-encoded (`row_encode.rs`) to exactly the bytes the validator produced. Only the row
//!   groups and pages whose `litelink_offset` statistics overlap the range are decoded.
//!
//! Both run on a blocking background thread (a sealer or a replay worker), never on an io_uring
//! serving loop: they read and write files and spend milliseconds per row group.
//!
//! # The file
//!
//! Columns, in this order (`segment_schema.rs`): `litelink_offset` (int64, required), every
//! declared column with the Arrow type [`Schema::to_arrow`](crate::schema::Schema::to_arrow)
//! gives it (binary columns keep their `streamcast.encoding` metadata), then `streamcast_ts` (int64 µs, required). A schema-less
//! stream seals one `row` column (utf8, required: the row's JSON text) between the two. ZSTD
//! (level 1), row groups of at most [`SealOptions::max_row_group_rows`] rows (65,536 by default),
//! chunk and page statistics on every column, the page index (column and offset indexes) written,
//! rows sorted by `litelink_offset` (declared as the row groups' sorting column).
//!
//! ## Field ids
//!
//! Every Arrow field carries `PARQUET:field_id` (written as the Parquet `field_id`), assigned as
//! Iceberg assigns fresh ids (`TypeUtil.assignFreshIds`), so the ids are unique across the whole
//! schema and the top level is `1..=N+2`:
//!
//! 1. the top-level fields get `1..=N+2` in column order (`litelink_offset` = 1, the declared
//!    columns `2..=N+1`, `streamcast_ts` = N+2);
//! 2. then each top-level field's type is visited in column order, depth first, with the next
//!    free id: a struct first numbers **all** its direct fields consecutively, then visits each of
//!    them in order; a list numbers its element (`item`), then visits it; a map numbers its
//!    `key`, then its `value`, then visits the value. The map's `entries` group and the list's
//!    repeated group carry no id (Iceberg has no field for them).
//!
//! For `{a: struct{x, y: list<struct{p}>}, b: map<utf8, int64>}`: `litelink_offset`=1, `a`=2,
//! `b`=3, `streamcast_ts`=4, `a.x`=5, `a.y`=6, `a.y.item`=7, `a.y.item.p`=8, `b.key`=9,
//! `b.value`=10.
//!
//! # What survives the round trip
//!
//! Everything the validator writes: it writes every value in a canonical form that is a function
//! of the typed value alone (integers exact, floats in shortest round-trip form of the column's
//! own width, strings with one fixed escaping, base16 lowercase, base64 standard padded, keys in
//! schema order, map keys in the order stored, an absent nullable column and an explicit `null`
//! both as `null`, every float zero written `0.0`). So the typed Parquet value gives
//! the bytes back; the tests check it on the shared data sets and on edge values.

mod index;
mod parquet_read;
mod parquet_write;
mod row_decode;
pub(crate) mod row_encode;
mod seal;
mod segment_schema;

pub use index::{
    file_crc32c, parse_segment_file_name, segment_file_name, SegmentEntry, SegmentIndex,
    SEGMENTS_DIR_NAME, TMP_SUFFIX,
};
pub use parquet_read::{
    ColumnMatch, ColumnPredicate, MappedColumn, PredicateValue, ReadOptions, ReadStats, RowChunk,
    SegmentReader,
};
pub use parquet_write::{
    write_segment, ColumnStats, SealOptions, SegmentStats, SegmentWriter, StatValue,
};
pub use seal::{drop_expired, seal_next, SealCut};
pub use segment_schema::{segment_schema, SCHEMALESS_ROW};

/// Why a segment could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// The Parquet library failed (I/O underneath included).
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Arrow refused an array or a batch (a bug in the codec if it happens).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// An encoded row that does not have the canonical form of the stream's schema. It cannot
    /// happen for rows the validator produced; reading, it is a schema-less segment whose stored
    /// row text was damaged.
    #[error("row at offset {offset} is not a canonical row of this schema: {what} at byte {at}")]
    BadRow {
        /// The row's offset.
        offset: u64,
        /// The byte position in the encoded row.
        at: usize,
        /// What was expected there.
        what: &'static str,
    },
    /// Offsets not strictly increasing.
    #[error("offset {offset} follows {previous}: a segment's offsets must strictly increase")]
    OutOfOrder {
        /// The previous row's offset.
        previous: u64,
        /// This row's offset.
        offset: u64,
    },
    /// An offset above `i64::MAX` (Parquet's int64 cannot hold it).
    #[error("offset {0} does not fit the int64 litelink_offset column")]
    OffsetTooLarge(u64),
    /// A file that is not a segment of this stream's schema.
    #[error("not a segment of this schema: {0}")]
    SchemaMismatch(String),
    /// The index or the hot log refused (opening, recording, reading rows to seal).
    #[error(transparent)]
    Storage(#[from] crate::log::StorageError),
    /// Writing, syncing or renaming a segment file failed (ENOSPC among others): nothing was
    /// recorded, the rows stay in the hot log, and the seal is tried again later.
    #[error("sealing {}: {op}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What was being done.
        op: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The hot log does not hold the next row to seal: rows between the sealed tier and the
    /// hot log are in neither (a file removed by hand); nothing is sealed past the hole.
    #[error("the next row to seal is offset {expected}, but the hot log's first row there is {found}: offsets {expected}..{found} are in no tier")]
    Hole {
        /// `sealed_end`.
        expected: u64,
        /// The first row the hot log holds at or above it.
        found: u64,
    },
}

impl TierError {
    /// Whether the error is a full disk (or quota): the seal waits for space.
    pub fn is_disk_full(&self) -> bool {
        let io = match self {
            TierError::Io { source, .. } => Some(source),
            TierError::Parquet(parquet::errors::ParquetError::External(e)) => {
                e.downcast_ref::<std::io::Error>()
            }
            _ => None,
        };
        io.and_then(std::io::Error::raw_os_error)
            .is_some_and(|errno| errno == 28 || errno == 122)
    }
}
