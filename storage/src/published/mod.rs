//! The published tier: each durable stream's sealed segments as an Iceberg v2 table plus
//! streamcast's stream metadata, laid out exactly as the official client's catch-up reads them
//! (`../shared/PUBLISHED.md`), on a local directory or S3.
//!
//! - [`store`]: the location (`file://` or `s3://`) behind one blocking API.
//! - [`layout`]: where a stream's files go ([`Layout`]) and the stream metadata JSON.
//! - [`iceberg`] and [`avro`]: the table metadata JSON, the manifest and the manifest list.
//! - [`table`]: the [`Publisher`], which commits sealed segments to the table one snapshot at a
//!   time with a crash protocol (each name written once, bottom up, the hint last), applies
//!   retention, and deletes what no kept version names after a grace period.
//! - [`read`]: a stream's published history read back ([`PublishedTable`]): the stream
//!   metadata, the table's extent, and the rows of an offset range, byte-identical to a live
//!   subscriber's (the client's catch-up).
//!
//! # The layout (default, local)
//!
//! ```text
//! <data>/<stream>/<stream>.metadata/version-hint.text        "00001-<hex32>.metadata.json"
//! <data>/<stream>/<stream>.metadata/00001-<hex32>.metadata.json   stream metadata v2
//! <data>/<stream>/<stream>.metadata.json                     plain copy
//! <data>/<stream>/published/<stream>/metadata/version-hint.text   "<stem>"
//! <data>/<stream>/published/<stream>/metadata/<stem>.metadata.json
//! <data>/<stream>/published/<stream>/metadata/snap-<id>-1-<uuid>.avro, <uuid>-m0.avro
//! <data>/<stream>/published/<stream>/data/<first>-<end>-<token>.parquet   hard links of segments/
//! ```
//!
//! With `published = "s3://bucket/prefix"` (or `file:///dir`) the stream's home is
//! `<location>/<stream>/` and its table `<location>/<stream>/<stream>/`, as the reference
//! broker lays out S3 (PUBLISHED.md §1).

pub mod avro;
pub mod iceberg;
pub mod layout;
pub mod read;
pub mod store;
pub mod table;

pub use layout::Layout;
pub use read::{DataFile, PublishedTable, ReadError, StreamMetadata, TableRows};
pub use store::{S3Options, Store, StoreError};
pub use table::{
    stream_manifest, FaultPoint, PublishStatus, Publisher, Retirement, SealedLog, SegmentToPublish,
    StreamInfo,
};

/// Why publishing failed. Every variant names what it was doing; none carries a credential.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The store refused or failed an operation.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// `meta.db` failed.
    #[error("{0}")]
    Storage(#[from] crate::log::StorageError),
    /// The stream's schema has no Iceberg form.
    #[error("schema: {0}")]
    Schema(String),
    /// An Avro or JSON file could not be encoded.
    #[error("encoding {0}")]
    Encode(String),
    /// What the table holds contradicts what is being published (a bug, or files changed by
    /// hand).
    #[error("{0}")]
    Invariant(String),
}
