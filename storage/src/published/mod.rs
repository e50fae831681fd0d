//! The published tier: each durable stream's sealed segments as an Iceberg v2 table plus
//! streamcast's stream metadata, laid out exactly as the official client's catch-up reads them
//! (`../shared/PUBLISHED.md`), on a local directory or S3.
//!
//! - [`store`]: the location (`file://` or `s3://`) behind one blocking API.

pub mod store;

pub use store::{S3Options, Store, StoreError};
