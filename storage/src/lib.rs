//! `corecast-storage`: the log that makes a row durable and gives it its offset.
//!
//! - [`schema`]: the JSON Schema subset of PROTOCOL.md §9 compiled to an Arrow schema and back
//!   (the form a greeting publishes), and strict row validation with canonical encoding.
//! - [`json`]: the strict JSON front door (duplicate keys, lone surrogates, depth, non-finite numbers).
//! - [`log`]: the per-stream SQLite buffer (WAL, `synchronous=FULL`), group commit, exactly-once
//!   publisher marks, and read connections for replay scans.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod json;
pub mod log;
pub mod schema;
