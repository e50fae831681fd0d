//! The log's first tier: one SQLite buffer per stream, which makes a row durable before anyone
//! sees it and gives it its offset.
//!
//! - [`buffer`]: [`Buffer`], the writer. Opens or creates `<stream>/buffer.db` (WAL,
//!   `synchronous=FULL`), group-commits queued [`AppendBatch`]es in one transaction, assigns
//!   offsets (from 1, contiguous, never reused), stamps `ts_us`, and applies the exactly-once
//!   rules; answers one [`BatchOutcome`] per batch or [`CommitFailed`] for the whole commit.
//!   Runs on the owner shard's writer thread.
//! - [`reader`]: [`BufferReader`], a separate connection for the reader pool: end offset,
//!   earliest offset, scans in offset order, publisher marks. Never blocks the writer.
//! - [`marks`]: publisher marks `(last_seq, last_offset)` and the in-memory dedupe window of
//!   [`DEDUPE_WINDOW_RANGES`] committed ranges per publisher.
//! - [`error`]: [`StorageError`] and [`CommitFailed`].
//!
//! - [`block`]: the layout of a block, a run of consecutive rows stored as one SQLite value.
//!
//! The database holds three tables:
//! `blocks("offset" INTEGER PRIMARY KEY, ts INTEGER, rows_count INTEGER, payload BLOB)`, each a
//! run of `rows_count` rows committed together from `offset` on, their encoded bytes
//! length-prefixed in `payload` (a commit's rows share its `ts`),
//! `publishers(id, last_seq, last_offset)`, and `meta(key, value)` with `format_version`,
//! `stream_id` (UUID v4, minted at creation, never changed), `schema` (text or NULL),
//! `created_at_us` and `end_offset` (the next offset, kept so offsets are never reused after
//! old rows are deleted).

pub mod block;
pub mod buffer;
pub mod checkpoint;
pub mod error;
pub mod marks;
pub mod reader;
mod upgrade;

pub use buffer::{AppendBatch, BatchOutcome, Buffer, PublisherSeq, DB_FILE_NAME, LOCK_FILE_NAME};
pub use checkpoint::{CheckpointStats, Checkpointer};
pub use error::{CommitFailed, StorageError};
pub use marks::{Mark, DEDUPE_WINDOW_RANGES};
pub use reader::{BufferReader, StoredRow};
