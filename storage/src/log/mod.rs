//! The log's first tier: the **hot log** of each durable stream, which makes a row durable
//! before anyone sees it and gives it its offset.
//!
//! A stream's directory holds:
//!
//! ```text
//! <stream>/meta.db            SQLite: stream_id, schema, floor, frontier, marks snapshot (meta.rs)
//! <stream>/writer.lock        the single writer's flock
//! <stream>/log/<first>.seg    segment files, preallocated, one record per group commit
//! <stream>/log/spare.seg      the next segment, preallocated ahead by the keeper thread
//! ```
//!
//! - [`buffer`]: [`Buffer`], the writer. Group-commits queued [`AppendBatch`]es as ONE record
//!   with ONE `pwrite` and ONE `fdatasync`, assigns offsets (from 1, contiguous, never reused),
//!   stamps `ts_us`, applies the exactly-once rules, answers one [`BatchOutcome`] per batch or
//!   [`CommitFailed`] for the whole commit; evicts whole segments ([`Buffer::evict_below`]).
//!   Runs on the owner shard's writer thread.
//! - [`reader`]: [`BufferReader`], for the reader pool: end offset, earliest offset, scans in
//!   offset order, publisher marks. Never blocks the writer.
//! - [`record`]: one commit's bytes (header with CRC32C, rows, marks); [`block`]: the rows
//!   section's length-prefixed layout.
//! - [`segment`]: segment files (header, names, chunked reads, the per-segment recovery scan).
//! - `recovery`: opening a log (torn tails cleared, damage refused, marks rebuilt).
//! - `view`: what the writer shares with its readers (segments, durable ends, sparse index).
//! - [`keeper`]: the thread that preallocates spares and syncs directories off the commit path.
//! - [`meta`]: the stream's `meta.db`.
//! - [`marks`]: publisher marks `(last_seq, last_offset)` and the in-memory dedupe window of
//!   [`DEDUPE_WINDOW_RANGES`] committed ranges per publisher.
//! - `upgrade`: converts a stream from the SQLite `buffer.db` (format 2) of earlier releases.
//! - [`error`]: [`StorageError`] and [`CommitFailed`].

pub mod block;
pub mod buffer;
pub mod error;
pub mod keeper;
pub mod marks;
pub mod meta;
pub mod reader;
pub mod record;
mod recovery;
pub mod segment;
mod upgrade;
mod view;

pub use buffer::{
    AppendBatch, BatchOutcome, Buffer, Detached, Evicted, Fault, LogOptions, OpenReport,
    PublisherSeq, DB_FILE_NAME, LOCK_FILE_NAME, LOG_DIR_NAME,
};
pub use error::{CommitFailed, StorageError};
pub use marks::{Mark, DEDUPE_WINDOW_RANGES};
pub use meta::{create_successor, FORMAT_VERSION, META_FILE_NAME};
pub use reader::{BufferReader, HotExtent, StoredRow};
pub use segment::DEFAULT_SEGMENT_BYTES;
pub use upgrade::LEGACY_DB_FILE_NAME;
