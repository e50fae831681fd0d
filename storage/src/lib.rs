//! `corecast-storage`: the log that makes a row durable and gives it its offset.
//!
//! - [`schema`]: the JSON Schema subset of PROTOCOL.md §9 compiled to an Arrow schema and back
//!   (the form a greeting publishes), and strict row validation with canonical encoding.
//! - [`json`]: the strict JSON front door (duplicate keys, lone surrogates, depth, non-finite numbers).
//! - [`log`]: the per-stream hot log (preallocated segment files, one record, one `pwrite` and
//!   one `fdatasync` per group commit), exactly-once publisher marks, readers for replay scans,
//!   and `meta.db` (SQLite) for the stream's constants, floor, frontier and marks snapshots.
//! - [`tier`]: the sealed Parquet tier's segment codec: committed rows to one Parquet file, and
//!   an offset range of such a file back to byte-identical rows.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod json;
pub mod log;
pub mod schema;
pub mod published;
pub mod tier;
