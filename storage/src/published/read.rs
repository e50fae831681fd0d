//! Reading a published stream back: the stream metadata, the Iceberg table of each of its logs
//! (a migrated stream's sealed logs, then its live log), and the rows of an offset range across
//! them, byte-identical to what a live subscriber received.
//!
//! In: a stream-metadata URI (a greeting's `metadata_hint`, `…/<stream>.metadata/version-hint.text`,
//! or its `metadata`, the plain `…/<stream>.metadata.json`), the `stream_id` the greeting
//! carried, and [`S3Options`] for `s3://` locations. Out: [`PublishedTable`], whose
//! [`extent`](PublishedTable::extent) is `[floor, end)` and whose [`rows`](PublishedTable::rows)
//! yields [`RowChunk`]s in offset order. Blocking; runs on the caller's thread (the client's
//! catch-up, a benchmark), reading every file through [`Store`].
//!
//! What is read, in order (`../shared/PUBLISHED.md` §2 step 3 and §3, the official client's
//! own path):
//!
//! 1. **the stream metadata**, resolved as the client resolves it: a hint URI is read and its
//!    stripped text is the version's file name beside it; a plain URI reads the hint in
//!    `<name>.metadata/` beside it, or the plain file itself when there is no hint. Checked:
//!    `streamcast_metadata` ∈ {1, 2, 3}, `stream`, `stream_id` (against the greeting's),
//!    `sealed_logs` (a list, oldest first, each with the `live_log` keys plus `end_offset`),
//!    `live_log.{name, published, start_offset, schema, system_schema}`, `manifest`;
//! 2. **the stream manifest** (for a stream with sealed logs whose metadata names one): the
//!    Parquet file beside the metadata, one row per sealed log, of which the `record_count`
//!    is compared with the log's table (a missing manifest compares nothing, as the official
//!    client ignores it);
//! 3. **each log's Iceberg table** at `<published>/<name>`: `metadata/version-hint.text` holds
//!    the stem of the current `<stem>.metadata.json` (no hint: nothing is published yet); the
//!    current snapshot's manifest list (Avro), its manifests (Avro), and of each live data file
//!    its path, size, record count and `litelink_offset` bounds (Iceberg's single-value
//!    serialization: 8 bytes little-endian; a file without them is measured from its own
//!    Parquet statistics);
//! 4. **rows**: oldest log first, each log's share of the range (from its `start_offset` or its
//!    table's first row, to its `end_offset` or its table's end); each data file overlapping
//!    it is fetched whole and read by [`SegmentReader`] with [`ColumnMatch::Mapped`] (columns
//!    by Parquet field id, or by the table's `schema.name-mapping.default`), re-encoded by that
//!    log's own [`RowCodec`] (built from its `schema`: a migration changes it) exactly as the
//!    validator encoded it when the row was published. A row of an older log therefore has the
//!    older log's columns, as its live subscribers received it and as the official client
//!    delivers it (the row is the table's columns).
//!
//! The extent is the official client's: the floor is that of the oldest log whose table holds
//! rows above its `start_offset`, the end the live log's table's end (its `start_offset`, the
//! last seam, when it has published nothing yet).
//!
//! # Strictness
//!
//! The official client trusts the tables (§5): it skips holes in the offsets as restore fences
//! and resumes after whatever the upper bounds say; across a seam it compares only a sealed
//! log's row count with the stream manifest's. This reader does not trust them. Within a table,
//! a file whose record count is not the size of its bounds, two files that overlap, or a hole
//! between two files is refused when the range asked for meets it ([`ReadError::Defect`]).
//! Across logs ([`SeamDefect`], refused as [`ReadError::Seam`] when the range meets it): a hole
//! or an overlap between one log's `end_offset` (or its table's end) and the next log's
//! `start_offset` (or its table's first row), a sealed log's table missing, a sealed log's
//! table holding fewer rows than the stream manifest records. While reading, every offset of
//! the range must arrive exactly once, in order, or the read fails ([`ReadError::RowsMissing`]).
//! A missing or damaged file is an error naming it, never rows skipped. Nothing taken from a
//! file is unwrapped.

use std::collections::HashMap;
use std::ops::Range;

use apache_avro::types::Value as Avro;
use bytes::Bytes;
use serde_json::Value as Json;
use sonic_rs::{JsonContainerTrait, JsonValueTrait};

use super::store::{S3Options, Store, StoreError};
use crate::schema::{RowCodec, Schema, LITELINK_OFFSET, STREAMCAST_TS};
use crate::tier::{
    ColumnMatch, MappedColumn, ReadOptions, RowChunk, SegmentReader, TierError, SCHEMALESS_ROW,
};

/// The name of both hint files.
pub const VERSION_HINT: &str = "version-hint.text";

/// The stream metadata versions this reader reads (`streamcast_metadata`).
pub const METADATA_VERSIONS: [u64; 3] = [1, 2, 3];

/// Why a published table could not be opened or read. Every variant names the URI (or the
/// stream) it is about.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The store failed (I/O, S3, a location that is not usable).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stream metadata is not there (no hint, or the plain file missing as well).
    #[error("there is no stream metadata at {uri}{}", local_note(uri))]
    NoMetadata {
        /// The URI asked for.
        uri: String,
    },
    /// The URI is neither a `…/version-hint.text` nor a `….metadata.json`.
    #[error("{uri}: not a stream metadata URI (expected …/<stream>.metadata/version-hint.text or …/<stream>.metadata.json)")]
    NotMetadataUri {
        /// The URI given.
        uri: String,
    },
    /// A file named by another one (a hint, a snapshot, a manifest) does not exist.
    #[error("{uri}: missing, but {named_by} names it")]
    Missing {
        /// The missing file.
        uri: String,
        /// The file that names it.
        named_by: String,
    },
    /// A file that does not have the form it must have: not JSON or Avro, a field missing or
    /// of the wrong type.
    #[error("{uri}: {what}")]
    Invalid {
        /// The file.
        uri: String,
        /// What is wrong, naming the field.
        what: String,
    },
    /// The metadata is another stream's.
    #[error("the metadata at {uri} is stream {found}, not {expected}: another stream's file at the same path")]
    StreamIdMismatch {
        /// The metadata file.
        uri: String,
        /// Its `stream_id`.
        found: String,
        /// The greeting's.
        expected: String,
    },
    /// A valid layout this reader does not read (delete files, another file format, an
    /// Iceberg format version other than 2).
    #[error("{uri}: {what}, which this reader does not read")]
    Unsupported {
        /// The file.
        uri: String,
        /// What it holds.
        what: String,
    },
    /// The table cannot be trusted for some offsets of the range asked for: a hole between
    /// files, files that overlap, a file whose record count does not fill its bounds.
    #[error("table {table}: {what} (offsets {}..{}); refusing to read {}..{} across it", offsets.start, offsets.end, asked.start, asked.end)]
    Defect {
        /// The table's URI.
        table: String,
        /// The offsets affected.
        offsets: Range<u64>,
        /// The range asked for.
        asked: Range<u64>,
        /// What is wrong.
        what: String,
    },
    /// The logs of a migrated stream do not splice at a seam for some offsets of the range
    /// asked for: a hole or an overlap between two logs, a sealed log's table missing or
    /// holding fewer rows than the stream manifest records.
    #[error("'{stream}': {defect}; refusing to read {}..{} across it", asked.start, asked.end)]
    Seam {
        /// The stream.
        stream: String,
        /// What is wrong, naming the log(s) and the offsets.
        defect: Box<SeamDefect>,
        /// The range asked for.
        asked: Range<u64>,
    },
    /// A range outside the table's extent.
    #[error("table {table} holds [{}, {}); {}..{} is not inside it", extent.start, extent.end, asked.start, asked.end)]
    OutsideExtent {
        /// The table's URI.
        table: String,
        /// `[floor, end)`.
        extent: Range<u64>,
        /// The range asked for.
        asked: Range<u64>,
    },
    /// A catch-up from `start` cannot begin: the published rows start above it.
    #[error("'{stream}' asked to catch up from offset {start}, but its published tables ({table}) start at {floor}: the {} rows between are in neither the server nor the published tables; subscribe from offset {floor} with catch-up to take what is left and accept the loss (the earliest the server replays may be later than the tables' start)", floor.saturating_sub(*start))]
    GapBelow {
        /// The stream.
        stream: String,
        /// The table's URI.
        table: String,
        /// The offset asked for.
        start: u64,
        /// The first published offset.
        floor: u64,
    },
    /// A catch-up from `start` has nothing to read: the published rows end at or below it.
    #[error("'{stream}' is behind the server's replay window, and its published tables ({table}) end at offset {end}, which is not above the {start} being asked for: the rows between are in neither the server nor the published tables; subscribe from the earliest offset to take what is left and accept the loss")]
    NothingAbove {
        /// The stream.
        stream: String,
        /// The table's URI.
        table: String,
        /// The offset asked for (the floor or the end for the earliest).
        start: u64,
        /// The table's end.
        end: u64,
    },
    /// A data file that could not be decoded (not Parquet, the wrong columns, damaged pages).
    #[error("{uri}: {source}")]
    Segment {
        /// The data file.
        uri: String,
        /// The reader's error.
        source: Box<TierError>,
    },
    /// A data file that did not hold every offset its manifest entry promises for the range.
    #[error("{uri}: expected offset {expected} next, {found}")]
    RowsMissing {
        /// The data file.
        uri: String,
        /// The offset that should have come.
        expected: u64,
        /// What came instead.
        found: String,
    },
}

fn local_note(uri: &str) -> &'static str {
    if uri.starts_with("file://") || uri.starts_with('/') {
        ". This stream's history is local to the server's machine and cannot be read from another one; give the stream an s3:// published location to make it readable elsewhere"
    } else {
        ""
    }
}

/// One log of the stream metadata: `live_log`, or an entry of `sealed_logs`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// The log's name: its table is `<published>/<name>`.
    pub name: String,
    /// The prefix holding the log's table (a URI with a scheme).
    pub published: String,
    /// The log's first offset.
    pub start_offset: u64,
    /// One past its last offset (`end_offset`, exclusive) for a sealed log; `None` for the live
    /// log, whose end still moves.
    pub end_offset: Option<u64>,
    /// The declared columns as JSON Schema (`{}` for a schema-less stream), compact, with
    /// its keys in the file's order (the declared column order).
    pub schema_json: String,
}

/// The stream metadata (`../shared/PUBLISHED.md` §3.2), as read.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMetadata {
    /// The file read (the version the hint named, or the plain file).
    pub uri: String,
    /// `streamcast_metadata`.
    pub version: u64,
    /// `stream`.
    pub stream: String,
    /// `stream_id`.
    pub stream_id: String,
    /// `sealed_logs`: the logs earlier migrations sealed, oldest first.
    pub sealed_logs: Vec<LogEntry>,
    /// `live_log`.
    pub live_log: LogEntry,
    /// `manifest`: the name of the stream manifest (Parquet, one row per sealed log) in the
    /// directory of the file read; `None` when the metadata names none.
    pub manifest: Option<String>,
}

impl StreamMetadata {
    /// Every log, oldest first, the live one last.
    pub fn logs(&self) -> impl Iterator<Item = &LogEntry> {
        self.sealed_logs
            .iter()
            .chain(std::iter::once(&self.live_log))
    }
}

/// One live data file of a log's table (its current snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFile {
    /// Its absolute URI, as the manifest names it.
    pub uri: String,
    /// The manifest that names it.
    pub manifest: String,
    /// Its first and last offset (`litelink_offset` lower and upper bound), inclusive.
    pub offsets: (u64, u64),
    /// `record_count`.
    pub record_count: u64,
    /// `file_size_in_bytes`.
    pub size_bytes: u64,
}

impl DataFile {
    /// The offsets the file holds, `[lower, upper + 1)`.
    pub fn range(&self) -> Range<u64> {
        self.offsets.0..self.offsets.1.saturating_add(1)
    }
}

/// What keeps a migrated stream's logs from reading as one offset space across a seam (a log
/// boundary). Each names the log and the offsets; the official client checks only the row
/// counts (and would skip a hole as a restore fence, or read an overlap twice).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeamDefect {
    /// No table holds these offsets, between two consecutive logs.
    #[error("no log holds offsets {}..{}, between log '{log}' and log '{next}' ({detail})", offsets.start, offsets.end)]
    Hole {
        /// The earlier log.
        log: String,
        /// The later log.
        next: String,
        /// The offsets missing.
        offsets: Range<u64>,
        /// Where the two ends come from.
        detail: String,
    },
    /// Two consecutive logs both hold these offsets.
    #[error("offsets {}..{} are in both log '{log}' and log '{next}' ({detail})", offsets.start, offsets.end)]
    Overlap {
        /// The earlier log.
        log: String,
        /// The later log.
        next: String,
        /// The offsets held twice.
        offsets: Range<u64>,
        /// Where the two ends come from.
        detail: String,
    },
    /// A sealed log's table is not there (no `metadata/version-hint.text`).
    #[error("sealed log '{log}' (offsets {}..{}) has no published table at {table} (no metadata/version-hint.text)", offsets.start, offsets.end)]
    TableMissing {
        /// The sealed log.
        log: String,
        /// Its table's URI.
        table: String,
        /// Its offsets, `[start_offset, end_offset)`.
        offsets: Range<u64>,
    },
    /// A sealed log's table is there but cannot be read (its hint names a metadata file that
    /// is not there, a manifest is missing, a file does not parse).
    #[error("sealed log '{log}' (offsets {}..{}): its published table at {table} cannot be read: {error}", offsets.start, offsets.end)]
    TableUnreadable {
        /// The sealed log.
        log: String,
        /// Its table's URI.
        table: String,
        /// Its offsets, `[start_offset, end_offset)`.
        offsets: Range<u64>,
        /// Why it cannot be read.
        error: String,
    },
    /// A sealed log's table holds fewer rows than the stream manifest records for it.
    #[error("sealed log '{log}' (offsets {}..{}) is published short: its table {table} holds {holds} rows, but the stream manifest records {expected}", offsets.start, offsets.end)]
    PublishedShort {
        /// The sealed log.
        log: String,
        /// Its table's URI.
        table: String,
        /// Rows its table holds (Σ `record_count` of its data files).
        holds: u64,
        /// The manifest's `record_count`.
        expected: u64,
        /// Its offsets, `[start_offset, end_offset)`.
        offsets: Range<u64>,
    },
}

impl SeamDefect {
    /// The offsets it makes unreadable.
    pub fn offsets(&self) -> &Range<u64> {
        match self {
            SeamDefect::Hole { offsets, .. }
            | SeamDefect::Overlap { offsets, .. }
            | SeamDefect::TableMissing { offsets, .. }
            | SeamDefect::TableUnreadable { offsets, .. }
            | SeamDefect::PublishedShort { offsets, .. } => offsets,
        }
    }
}

/// One log's Iceberg table, opened: its entry, its live data files and its extent.
#[derive(Debug, Clone)]
pub struct LogTable {
    entry: LogEntry,
    table: String,
    table_metadata: Option<String>,
    files: Vec<DataFile>,
    defects: Vec<(Range<u64>, String)>,
    floor: Option<u64>,
    end: u64,
    codec: RowCodec,
    columns: Vec<MappedColumn>,
    /// Why a sealed log's table could not be read (opened empty, as if not there): a seam
    /// defect, so that only the reads that meet its offsets are refused.
    unreadable: Option<String>,
}

impl LogTable {
    /// The table of `entry` holding nothing (nothing published, or not read).
    fn empty(entry: LogEntry, codec: RowCodec) -> LogTable {
        LogTable {
            table: format!("{}/{}", entry.published.trim_end_matches('/'), entry.name),
            table_metadata: None,
            files: Vec::new(),
            defects: Vec::new(),
            floor: None,
            end: entry.start_offset,
            codec,
            columns: Vec::new(),
            entry,
            unreadable: None,
        }
    }

    /// Opens a sealed log's table; one that is there but cannot be read (a file missing or
    /// not parsing) is opened empty with the error kept ([`SeamDefect::TableUnreadable`]). A
    /// store failure is still an error: the read may succeed again.
    fn open_sealed(
        fetcher: &mut Fetcher,
        metadata_uri: &str,
        label: &str,
        entry: LogEntry,
    ) -> Result<LogTable, ReadError> {
        match LogTable::open(fetcher, metadata_uri, label, entry.clone()) {
            Ok(t) => Ok(t),
            Err(
                e @ (ReadError::Missing { .. }
                | ReadError::Invalid { .. }
                | ReadError::Unsupported { .. }),
            ) => {
                let codec = codec_of(metadata_uri, label, &entry)?;
                Ok(LogTable {
                    unreadable: Some(e.to_string()),
                    ..LogTable::empty(entry, codec)
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Reads the table of `entry` (`label` names it in errors: `live_log`, `sealed_logs[0]`).
    /// A table without a hint is opened empty (nothing published).
    fn open(
        fetcher: &mut Fetcher,
        metadata_uri: &str,
        label: &str,
        entry: LogEntry,
    ) -> Result<LogTable, ReadError> {
        let codec = codec_of(metadata_uri, label, &entry)?;
        let mut opened = LogTable::empty(entry, codec);
        let table = opened.table.clone();
        let hint = format!("{table}/metadata/{VERSION_HINT}");
        let Some(stem) = fetcher.get(&hint)? else {
            // no table yet: nothing is published
            return Ok(opened);
        };
        let stem = file_name(&hint, &stem)?;
        let table_metadata = format!("{table}/metadata/{stem}.metadata.json");
        let bytes = fetcher
            .get(&table_metadata)?
            .ok_or_else(|| ReadError::Missing {
                uri: table_metadata.clone(),
                named_by: hint.clone(),
            })?;
        let iceberg = parse_json(&table_metadata, &bytes)?;
        match iceberg.get("format-version").and_then(Json::as_u64) {
            Some(2) => {}
            other => {
                return Err(ReadError::Unsupported {
                    uri: table_metadata,
                    what: format!(
                        "format-version {}",
                        other.map_or("(none)".into(), |v| v.to_string())
                    ),
                })
            }
        }
        // the declared columns in the table's order: the order of the keys in every row
        opened.codec = codec_in_table_order(
            metadata_uri,
            label,
            &opened.entry,
            &table_metadata,
            &iceberg,
        )?;
        opened.columns = mapped_columns(&table_metadata, &iceberg, &opened.codec)?;
        opened.table_metadata = Some(table_metadata.clone());
        let Some(list) = current_manifest_list(&table_metadata, &iceberg)? else {
            return Ok(opened);
        };
        let offset_id = opened.columns[0].field_id;
        let mut files = Vec::new();
        for manifest in manifest_paths(fetcher, &list, &table_metadata)? {
            read_manifest(fetcher, &manifest, &list, offset_id, &mut files)?;
        }
        for file in files.iter_mut().filter(|f| f.offsets.0 > f.offsets.1) {
            // no bounds in the manifest (marked by an empty range): the file's own statistics
            file.offsets = offsets_from_footer(fetcher, file, &opened.columns[0])?;
        }
        opened.set_files(files);
        Ok(opened)
    }

    /// The table's live data files: their defects, the floor and the end.
    fn set_files(&mut self, mut files: Vec<DataFile>) {
        files.sort_by_key(|f| f.offsets);
        self.defects = defects(&files);
        if let (Some(first), Some(high)) = (files.first(), files.iter().map(|f| f.offsets.1).max())
        {
            self.end = high.saturating_add(1);
            // the official client's floor: rows above the log's start, from there (retention
            // raises `start_offset` before it deletes the rows below it)
            if self.end > self.entry.start_offset {
                self.floor = Some(first.offsets.0.max(self.entry.start_offset));
            }
        }
        self.files = files;
    }

    /// The log's entry in the stream metadata.
    pub fn entry(&self) -> &LogEntry {
        &self.entry
    }

    /// Whether this is a sealed log (it has an `end_offset`).
    pub fn is_sealed(&self) -> bool {
        self.entry.end_offset.is_some()
    }

    /// The table's URI, `<published>/<name>`.
    pub fn table_uri(&self) -> &str {
        &self.table
    }

    /// The table metadata file read (`None` when the table has no hint: nothing published).
    pub fn table_metadata_uri(&self) -> Option<&str> {
        self.table_metadata.as_deref()
    }

    /// The live data files, by offset.
    pub fn files(&self) -> &[DataFile] {
        &self.files
    }

    /// Rows the table holds (Σ `record_count` of its data files).
    pub fn record_count(&self) -> u64 {
        self.files.iter().map(|f| f.record_count).sum()
    }

    /// The codec this log's rows are re-encoded with (from its own schema: a migration
    /// changes it).
    pub fn codec(&self) -> &RowCodec {
        &self.codec
    }

    /// The first readable offset of this log: the table's lowest, or `start_offset` if that
    /// is higher; `None` when the table holds nothing above `start_offset`.
    pub fn floor(&self) -> Option<u64> {
        self.floor
    }

    /// One past the table's last offset (`start_offset` when nothing is published).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The offsets read from this log: `[floor, end)`, and never past a sealed log's
    /// `end_offset`; empty when it holds nothing.
    fn readable(&self) -> Range<u64> {
        match self.floor {
            Some(floor) => floor..self.end.min(self.entry.end_offset.unwrap_or(u64::MAX)),
            None => self.end..self.end,
        }
    }
}

/// A stream's published history, opened: the metadata, every log's table (the sealed logs'
/// oldest first, then the live log's), and the extent across them.
#[derive(Debug, Clone)]
pub struct PublishedTable {
    metadata: StreamMetadata,
    /// Sealed logs oldest first, the live log last (never empty).
    logs: Vec<LogTable>,
    /// What breaks the offsets at a seam, and the offsets it affects.
    seams: Vec<SeamDefect>,
    /// The log the floor comes from.
    floor_log: Option<usize>,
    fetcher: Fetcher,
}

impl PublishedTable {
    /// Resolves `uri` and reads the stream metadata, its stream manifest (if it has sealed
    /// logs and names one) and the table of each of its logs (no data file is read unless a
    /// manifest entry lacks its offset bounds). With `stream_id`, the metadata must be that
    /// stream's.
    ///
    /// # Errors
    ///
    /// [`ReadError::NoMetadata`], [`ReadError::StreamIdMismatch`], [`ReadError::Missing`] for a
    /// file a hint, snapshot or manifest names that is not there, [`ReadError::Invalid`] for
    /// one that does not parse or lacks a field, [`ReadError::Unsupported`],
    /// [`ReadError::Store`]. What breaks the logs at a seam is not an error here: a read that
    /// meets it is refused ([`PublishedTable::rows`]).
    pub fn open(
        uri: &str,
        stream_id: Option<&str>,
        s3: &S3Options,
    ) -> Result<PublishedTable, ReadError> {
        let mut fetcher = Fetcher::new(s3.clone());
        let (metadata_uri, bytes) = resolve(&mut fetcher, uri)?;
        let metadata = parse_stream_metadata(&metadata_uri, &bytes)?;
        if let Some(expected) = stream_id {
            if metadata.stream_id != expected {
                return Err(ReadError::StreamIdMismatch {
                    uri: metadata_uri,
                    found: metadata.stream_id,
                    expected: expected.to_string(),
                });
            }
        }
        let mut logs = Vec::with_capacity(metadata.sealed_logs.len() + 1);
        for (i, entry) in metadata.sealed_logs.iter().enumerate() {
            let label = format!("sealed_logs[{i}]");
            logs.push(LogTable::open_sealed(
                &mut fetcher,
                &metadata.uri,
                &label,
                entry.clone(),
            )?);
        }
        logs.push(LogTable::open(
            &mut fetcher,
            &metadata.uri,
            "live_log",
            metadata.live_log.clone(),
        )?);
        let recorded = match &metadata.manifest {
            Some(name) if !metadata.sealed_logs.is_empty() => {
                read_stream_manifest(&mut fetcher, &metadata.uri, name)?
            }
            _ => HashMap::new(),
        };
        let floor_log = logs.iter().position(|l| l.floor.is_some());
        let seams = seam_defects(&logs, floor_log, &recorded);
        Ok(PublishedTable {
            metadata,
            logs,
            seams,
            floor_log,
            fetcher,
        })
    }

    /// The stream metadata.
    pub fn metadata(&self) -> &StreamMetadata {
        &self.metadata
    }

    /// Every log's table, oldest first, the live log's last.
    pub fn logs(&self) -> &[LogTable] {
        &self.logs
    }

    /// What keeps the logs from reading as one across a seam (empty for a stream never
    /// migrated, or migrated cleanly); a read meeting one is refused.
    pub fn seam_defects(&self) -> &[SeamDefect] {
        &self.seams
    }

    fn live(&self) -> &LogTable {
        self.logs
            .last()
            .expect("a stream has a live log: open pushes it last")
    }

    /// The live log's table URI, `<published>/<name>`.
    pub fn table_uri(&self) -> &str {
        &self.live().table
    }

    /// The live log's table metadata file read (`None` when it has no hint: nothing
    /// published).
    pub fn table_metadata_uri(&self) -> Option<&str> {
        self.live().table_metadata.as_deref()
    }

    /// The live log's data files, by offset.
    pub fn files(&self) -> &[DataFile] {
        &self.live().files
    }

    /// The codec the live log's rows are re-encoded with (from `live_log.schema`); each
    /// sealed log's is [`LogTable::codec`].
    pub fn codec(&self) -> &RowCodec {
        &self.live().codec
    }

    /// The first readable offset: that of the oldest log whose table holds rows above its
    /// `start_offset` (the table's lowest, or `start_offset` if that is higher); `None` when
    /// nothing is published.
    pub fn floor(&self) -> Option<u64> {
        self.floor_log.and_then(|i| self.logs[i].floor)
    }

    /// One past the last published offset: the live log's table's end (its `start_offset`, the
    /// seam, when it has published nothing yet).
    pub fn end(&self) -> u64 {
        self.live().end
    }

    /// `[floor, end)`; empty (`end..end`) when nothing is published.
    pub fn extent(&self) -> Range<u64> {
        self.floor().unwrap_or(self.end())..self.end()
    }

    /// The table the floor comes from (the live log's when nothing is published).
    fn floor_table(&self) -> &str {
        self.floor_log
            .map_or(self.table_uri(), |i| self.logs[i].table.as_str())
    }

    /// The tables a range of the whole extent is read from, for messages.
    fn tables_label(&self) -> String {
        match self.logs.len() {
            1 => self.table_uri().to_string(),
            n => format!(
                "{} and the tables of its {} sealed log(s)",
                self.table_uri(),
                n - 1
            ),
        }
    }

    /// The range a catch-up from `start` reads (`None`: from the earliest), with the official
    /// client's checks: the tables must end above the start, and start at or below it.
    ///
    /// # Errors
    ///
    /// [`ReadError::Seam`] if a seam defect lies in the range (from the earliest: anywhere
    /// below the end), else [`ReadError::NothingAbove`] or [`ReadError::GapBelow`].
    pub fn catch_up_range(&self, start: Option<u64>) -> Result<Range<u64>, ReadError> {
        let end = self.end();
        // from the earliest, every log's history counts: a sealed log missing or published
        // short below the floor is a refusal, not a later start (the official client fails
        // opening it too)
        let lowest = start.unwrap_or(0);
        let start = start.unwrap_or_else(|| self.floor().unwrap_or(end));
        if let Some(defect) = self.seams.iter().find(|d| {
            let r = d.offsets();
            lowest < end && !r.is_empty() && r.start < end && lowest < r.end
        }) {
            // from the earliest the range asked for reaches down to the defect
            let asked = defect.offsets().start.min(start)..end;
            return Err(ReadError::Seam {
                stream: self.metadata.stream.clone(),
                defect: Box::new(defect.clone()),
                asked,
            });
        }
        if end <= start {
            return Err(ReadError::NothingAbove {
                stream: self.metadata.stream.clone(),
                table: self.table_uri().to_string(),
                start,
                end,
            });
        }
        match self.floor() {
            Some(floor) if floor <= start => Ok(start..end),
            floor => Err(ReadError::GapBelow {
                stream: self.metadata.stream.clone(),
                table: self.floor_table().to_string(),
                start,
                floor: floor.unwrap_or(end),
            }),
        }
    }

    /// The rows with offsets in `range`, in offset order, in chunks of at most `chunk_rows`:
    /// each log's from its own table, decoded with its own schema, oldest log first, spliced
    /// at the seams with no gap and no duplicate. A chunk never spans two logs
    /// ([`TableRows::log`] says whose it is).
    ///
    /// # Errors
    ///
    /// [`ReadError::OutsideExtent`] if `range` is not inside [`PublishedTable::extent`],
    /// [`ReadError::Seam`] if a seam defect meets it (a hole or an overlap between logs, a
    /// sealed log's table missing or published short), [`ReadError::Defect`] if a table has a
    /// hole, an overlap or a short file there.
    pub fn rows(&self, range: Range<u64>, chunk_rows: usize) -> Result<TableRows, ReadError> {
        let extent = self.extent();
        // an empty range reads nothing, wherever it is
        let range = if range.start < range.end {
            range
        } else {
            range.start..range.start
        };
        let meets =
            |r: &Range<u64>| !range.is_empty() && r.start < range.end && range.start < r.end;
        if !range.is_empty() && (range.start < extent.start || range.end > extent.end) {
            return Err(ReadError::OutsideExtent {
                table: self.tables_label(),
                extent,
                asked: range,
            });
        }
        if let Some(defect) = self.seams.iter().find(|d| meets(d.offsets())) {
            return Err(ReadError::Seam {
                stream: self.metadata.stream.clone(),
                defect: Box::new(defect.clone()),
                asked: range,
            });
        }
        let mut parts = Vec::new();
        let mut covered = range.start;
        let mut previous: Option<&LogTable> = None;
        let logs = if range.is_empty() {
            &[][..]
        } else {
            &self.logs[..]
        };
        for log in logs {
            let readable = log.readable();
            let part = range.start.max(readable.start)..range.end.min(readable.end);
            if part.is_empty() {
                continue;
            }
            if part.start != covered {
                // the seam checks leave no hole in the extent: this is a bug, refused as a hole
                return Err(self.unspliced(previous, log, covered..part.start, &range));
            }
            if let Some((offsets, what)) = log
                .defects
                .iter()
                .find(|(r, _)| r.start < part.end && part.start < r.end)
            {
                return Err(ReadError::Defect {
                    table: log.table.clone(),
                    offsets: offsets.clone(),
                    asked: range.clone(),
                    what: what.clone(),
                });
            }
            let files = log
                .files
                .iter()
                .filter(|f| f.offsets.0 < part.end && part.start <= f.offsets.1)
                .cloned()
                .collect::<Vec<_>>();
            parts.push(Part {
                log: log.entry.clone(),
                table: log.table.clone(),
                codec: log.codec.clone(),
                options: ReadOptions {
                    chunk_rows: chunk_rows.max(1),
                    columns: ColumnMatch::Mapped(log.columns.clone()),
                    ..ReadOptions::default()
                },
                files: files.into_iter(),
                range: part.clone(),
            });
            covered = part.end;
            previous = Some(log);
        }
        if covered != range.end {
            let live = self.live();
            return Err(self.unspliced(previous, live, covered..range.end, &range));
        }
        Ok(TableRows {
            parts: parts.into_iter(),
            part: None,
            reader: None,
            next: range.start,
            range,
            fetcher: self.fetcher.clone(),
        })
    }

    /// The refusal of offsets no log's readable range covers (the seam checks should have
    /// named them first).
    fn unspliced(
        &self,
        before: Option<&LogTable>,
        after: &LogTable,
        offsets: Range<u64>,
        asked: &Range<u64>,
    ) -> ReadError {
        ReadError::Seam {
            stream: self.metadata.stream.clone(),
            defect: Box::new(SeamDefect::Hole {
                log: before.map_or("(none)".to_string(), |l| l.entry.name.clone()),
                next: after.entry.name.clone(),
                offsets,
                detail: "no table's rows reach them".into(),
            }),
            asked: asked.clone(),
        }
    }
}

/// What breaks the logs' offsets at their seams, in log order: for each sealed log, its table
/// missing, its table holding fewer rows than the stream manifest records (`recorded`), its
/// table's rows not reaching its `end_offset` or running past it, and its `end_offset` against
/// the next log's `start_offset`; for every log after the one the floor comes from
/// (`floor_log`), a table whose rows start above its `start_offset`.
fn seam_defects(
    logs: &[LogTable],
    floor_log: Option<usize>,
    recorded: &HashMap<String, u64>,
) -> Vec<SeamDefect> {
    let mut out = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let name = &log.entry.name;
        let start = log.entry.start_offset;
        if let (Some(floor), Some(previous)) = (log.floor, i.checked_sub(1).map(|p| &logs[p])) {
            if floor_log.is_some_and(|f| i > f) && floor > start {
                out.push(SeamDefect::Hole {
                    log: previous.entry.name.clone(),
                    next: name.clone(),
                    offsets: start..floor,
                    detail: format!(
                        "log '{name}' starts at {start}, but its table's rows start at {floor}"
                    ),
                });
            }
        }
        let Some(end) = log.entry.end_offset else {
            continue; // the live log: its start is checked against the log before it
        };
        let Some(next) = logs.get(i + 1) else {
            continue; // parse_stream_metadata puts the live log last
        };
        let next_name = &next.entry.name;
        if let Some(error) = &log.unreadable {
            out.push(SeamDefect::TableUnreadable {
                log: name.clone(),
                table: log.table.clone(),
                offsets: start..end,
                error: error.clone(),
            });
        } else if log.table_metadata.is_none() {
            out.push(SeamDefect::TableMissing {
                log: name.clone(),
                table: log.table.clone(),
                offsets: start..end,
            });
        } else {
            let holds = log.record_count();
            if let Some(&expected) = recorded.get(name).filter(|&&e| holds < e) {
                out.push(SeamDefect::PublishedShort {
                    log: name.clone(),
                    table: log.table.clone(),
                    holds,
                    expected,
                    offsets: start..end,
                });
            }
            let table_end = log.end;
            if table_end < end {
                out.push(SeamDefect::Hole {
                    log: name.clone(),
                    next: next_name.clone(),
                    offsets: table_end.max(start)..end,
                    detail: format!(
                        "log '{name}' ends at {end}, but its table's rows end at {table_end}"
                    ),
                });
            } else if table_end > end {
                out.push(SeamDefect::Overlap {
                    log: name.clone(),
                    next: next_name.clone(),
                    offsets: end..table_end,
                    detail: format!(
                        "log '{name}' ends at {end}, but its table holds rows up to {table_end}"
                    ),
                });
            }
        }
        let next_start = next.entry.start_offset;
        if end < next_start {
            out.push(SeamDefect::Hole {
                log: name.clone(),
                next: next_name.clone(),
                offsets: end..next_start,
                detail: format!(
                    "log '{name}' has end_offset {end}, log '{next_name}' start_offset {next_start}"
                ),
            });
        } else if end > next_start {
            out.push(SeamDefect::Overlap {
                log: name.clone(),
                next: next_name.clone(),
                offsets: next_start..end,
                detail: format!(
                    "log '{name}' has end_offset {end}, log '{next_name}' start_offset {next_start}"
                ),
            });
        }
    }
    out
}

/// The stream manifest's `record_count` per log (`log` column), read from `name` in the
/// directory of the stream metadata file `metadata_uri`. A manifest that is not there is no
/// manifest (the official client ignores it too: no count is then compared).
fn read_stream_manifest(
    fetcher: &mut Fetcher,
    metadata_uri: &str,
    name: &str,
) -> Result<HashMap<String, u64>, ReadError> {
    use arrow_array::{Array, Int32Array, Int64Array, LargeStringArray, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let uri = match metadata_uri.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{name}"),
        None => name.to_string(),
    };
    let invalid = |what: String| ReadError::Invalid {
        uri: uri.clone(),
        what,
    };
    if name.is_empty() || name.contains('/') || name == ".." {
        return Err(ReadError::Invalid {
            uri: metadata_uri.to_string(),
            what: format!("manifest {name:?} is not a file name beside the metadata"),
        });
    }
    let Some(bytes) = fetcher.get(&uri)? else {
        return Ok(HashMap::new());
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| invalid(format!("not Parquet: {e}")))?;
    let mut out = HashMap::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(format!("not readable: {e}")))?;
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| invalid(format!("no {name} column")))
        };
        let logs = column("log")?;
        let counts = column("record_count")?;
        for row in 0..batch.num_rows() {
            let log = if let Some(a) = logs.as_any().downcast_ref::<StringArray>() {
                a.is_valid(row).then(|| a.value(row).to_string())
            } else if let Some(a) = logs.as_any().downcast_ref::<LargeStringArray>() {
                a.is_valid(row).then(|| a.value(row).to_string())
            } else {
                return Err(invalid(format!(
                    "log is {}, not a string",
                    logs.data_type()
                )));
            };
            let count = if let Some(a) = counts.as_any().downcast_ref::<Int64Array>() {
                a.is_valid(row).then(|| a.value(row))
            } else if let Some(a) = counts.as_any().downcast_ref::<Int32Array>() {
                a.is_valid(row).then(|| i64::from(a.value(row)))
            } else {
                return Err(invalid(format!(
                    "record_count is {}, not an integer",
                    counts.data_type()
                )));
            };
            // a log or count that is null is not known: nothing to compare
            if let (Some(log), Some(count)) = (log, count) {
                let count = u64::try_from(count)
                    .map_err(|_| invalid(format!("record_count of {log} is {count}")))?;
                out.insert(log, count);
            }
        }
    }
    Ok(out)
}

/// One log's share of a read.
struct Part {
    log: LogEntry,
    table: String,
    codec: RowCodec,
    options: ReadOptions,
    files: std::vec::IntoIter<DataFile>,
    /// Its offsets of the range read.
    range: Range<u64>,
}

/// The rows of one range of a [`PublishedTable`], log by log and file by file.
pub struct TableRows {
    parts: std::vec::IntoIter<Part>,
    part: Option<Part>,
    reader: Option<(DataFile, SegmentReader, u64)>,
    next: u64,
    range: Range<u64>,
    fetcher: Fetcher,
}

impl TableRows {
    /// The next chunk, or `None` once every offset of the range was returned.
    ///
    /// # Errors
    ///
    /// [`ReadError::Missing`] for a data file that is not there, [`ReadError::Invalid`] for one
    /// of another size than its manifest says, [`ReadError::Segment`] for one that does not
    /// decode, [`ReadError::RowsMissing`] for one that lacks offsets it should hold.
    pub fn next_chunk(&mut self) -> Result<Option<RowChunk>, ReadError> {
        loop {
            if let Some((file, reader, file_end)) = &mut self.reader {
                let chunk = reader.next_chunk().map_err(|source| ReadError::Segment {
                    uri: file.uri.clone(),
                    source: Box::new(source),
                })?;
                match chunk {
                    Some(chunk) => {
                        let (Some(&first), Some(&last)) =
                            (chunk.offsets.first(), chunk.offsets.last())
                        else {
                            continue;
                        };
                        // offsets strictly increase (the segment reader checks it), so
                        // `last - first == len - 1` means they are consecutive
                        if first != self.next || last - first != chunk.len() as u64 - 1 {
                            let found = chunk
                                .offsets
                                .iter()
                                .zip(self.next..)
                                .find(|(o, want)| **o != *want)
                                .map_or(first, |(o, _)| *o);
                            return Err(ReadError::RowsMissing {
                                uri: file.uri.clone(),
                                expected: self.next,
                                found: format!("but offset {found} came"),
                            });
                        }
                        self.next = last + 1;
                        return Ok(Some(chunk));
                    }
                    None => {
                        if self.next != *file_end {
                            return Err(ReadError::RowsMissing {
                                uri: file.uri.clone(),
                                expected: self.next,
                                found: format!(
                                    "but the file ends there (its manifest entry {} gives it offsets {}..={})",
                                    file.manifest, file.offsets.0, file.offsets.1
                                ),
                            });
                        }
                        self.reader = None;
                    }
                }
            }
            let Some(part) = self.part.as_mut() else {
                match self.parts.next() {
                    Some(part) => {
                        debug_assert_eq!(part.range.start, self.next, "parts tile the range");
                        self.part = Some(part);
                        continue;
                    }
                    None if self.next < self.range.end => {
                        return Err(ReadError::RowsMissing {
                            uri: format!("offsets {}..{}", self.range.start, self.range.end),
                            expected: self.next,
                            found: "but no log's table holds it".into(),
                        })
                    }
                    None => return Ok(None),
                }
            };
            let Some(file) = part.files.next() else {
                if self.next < part.range.end {
                    return Err(ReadError::RowsMissing {
                        uri: part.table.clone(),
                        expected: self.next,
                        found: format!(
                            "but no data file of log '{}' holds it (its share of the read is {}..{})",
                            part.log.name, part.range.start, part.range.end
                        ),
                    });
                }
                self.part = None;
                continue;
            };
            let bytes = fetch_data_file(&mut self.fetcher, &file)?;
            let read = self.next..part.range.end.min(file.offsets.1.saturating_add(1));
            let reader = SegmentReader::open(bytes, &part.codec, read.clone(), &part.options)
                .map_err(|source| ReadError::Segment {
                    uri: file.uri.clone(),
                    source: Box::new(source),
                })?;
            self.reader = Some((file, reader, read.end));
        }
    }

    /// The log of the chunk [`TableRows::next_chunk`] returned last (`None` before the
    /// first).
    pub fn log(&self) -> Option<&LogEntry> {
        self.part.as_ref().map(|p| &p.log)
    }

    /// The codec of the chunk returned last: its log's (`None` before the first).
    pub fn codec(&self) -> Option<&RowCodec> {
        self.part.as_ref().map(|p| &p.codec)
    }
}

/// Fetches a data file and checks its size against the manifest's.
fn fetch_data_file(fetcher: &mut Fetcher, file: &DataFile) -> Result<Bytes, ReadError> {
    let bytes = fetcher.get(&file.uri)?.ok_or_else(|| ReadError::Missing {
        uri: file.uri.clone(),
        named_by: file.manifest.clone(),
    })?;
    if bytes.len() as u64 != file.size_bytes {
        return Err(ReadError::Invalid {
            uri: file.uri.clone(),
            what: format!(
                "{} bytes, but its manifest entry ({}) says file_size_in_bytes = {}",
                bytes.len(),
                file.manifest,
                file.size_bytes
            ),
        });
    }
    Ok(bytes)
}

/// Opens stores by directory, once each, and reads files by absolute URI.
#[derive(Debug, Clone)]
struct Fetcher {
    s3: S3Options,
    stores: HashMap<String, Store>,
}

impl Fetcher {
    fn new(s3: S3Options) -> Fetcher {
        Fetcher {
            s3,
            stores: HashMap::new(),
        }
    }

    /// The bytes at `uri` (`file://…`, `s3://…`, or an absolute path), `None` if absent.
    fn get(&mut self, uri: &str) -> Result<Option<Bytes>, ReadError> {
        let normalized = if uri.starts_with('/') {
            format!("file://{uri}")
        } else {
            uri.to_string()
        };
        let Some((dir, key)) = normalized.rsplit_once('/') else {
            return Err(StoreError::Config(format!("{uri}: not a file URI")).into());
        };
        if key.is_empty() || dir.ends_with(':') || dir.ends_with(":/") {
            return Err(StoreError::Config(format!("{uri}: not a file URI")).into());
        }
        let store = match self.stores.get(dir) {
            Some(store) => store,
            None => {
                let store = Store::open_existing(dir, &self.s3)?;
                self.stores.entry(dir.to_string()).or_insert(store)
            }
        };
        Ok(store.get(key)?)
    }
}

/// The stream metadata file `uri` resolves to, and its bytes (§2 step 3.1).
fn resolve(fetcher: &mut Fetcher, uri: &str) -> Result<(String, Bytes), ReadError> {
    let no_metadata = || ReadError::NoMetadata {
        uri: uri.to_string(),
    };
    if let Some(dir) = uri.strip_suffix(&format!("/{VERSION_HINT}")) {
        let hint = fetcher.get(uri)?.ok_or_else(no_metadata)?;
        let name = file_name(uri, &hint)?;
        let version = format!("{dir}/{name}");
        let bytes = fetcher.get(&version)?.ok_or_else(|| ReadError::Missing {
            uri: version.clone(),
            named_by: uri.to_string(),
        })?;
        return Ok((version, bytes));
    }
    if let Some(stem) = uri.strip_suffix(".metadata.json") {
        let hint = format!("{stem}.metadata/{VERSION_HINT}");
        if let Some(text) = fetcher.get(&hint)? {
            let name = file_name(&hint, &text)?;
            let version = format!("{stem}.metadata/{name}");
            let bytes = fetcher.get(&version)?.ok_or_else(|| ReadError::Missing {
                uri: version.clone(),
                named_by: hint.clone(),
            })?;
            return Ok((version, bytes));
        }
        let bytes = fetcher.get(uri)?.ok_or_else(no_metadata)?;
        return Ok((uri.to_string(), bytes));
    }
    Err(ReadError::NotMetadataUri {
        uri: uri.to_string(),
    })
}

/// A hint's content: one file name (stripped), never a path.
fn file_name(hint: &str, bytes: &[u8]) -> Result<String, ReadError> {
    let invalid = |what: String| ReadError::Invalid {
        uri: hint.to_string(),
        what,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
    let name = text.trim();
    if name.is_empty() {
        return Err(invalid("empty: a hint holds a file name".into()));
    }
    if name.contains('/') || name == "." || name == ".." {
        return Err(invalid(format!(
            "{name:?} is not a file name in the hint's directory"
        )));
    }
    Ok(name.to_string())
}

fn parse_json(uri: &str, bytes: &[u8]) -> Result<Json, ReadError> {
    let value: Json = serde_json::from_slice(bytes).map_err(|e| ReadError::Invalid {
        uri: uri.to_string(),
        what: format!("not JSON: {e}"),
    })?;
    if !value.is_object() {
        return Err(ReadError::Invalid {
            uri: uri.to_string(),
            what: "not a JSON object".into(),
        });
    }
    Ok(value)
}

/// A required field of a JSON object, by path (`live_log.name`).
fn json_field<'a>(uri: &str, root: &'a Json, path: &str) -> Result<&'a Json, ReadError> {
    let mut v = root;
    for key in path.split('.') {
        v = v.get(key).ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("no {path}"),
        })?;
    }
    Ok(v)
}

fn json_str<'a>(uri: &str, root: &'a Json, path: &str) -> Result<&'a str, ReadError> {
    json_field(uri, root, path)?
        .as_str()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("{path} is not a string"),
        })
}

/// The stream metadata's fields (§3.2).
fn parse_stream_metadata(uri: &str, bytes: &[u8]) -> Result<StreamMetadata, ReadError> {
    let doc = parse_json(uri, bytes)?;
    let version = json_field(uri, &doc, "streamcast_metadata")?
        .as_u64()
        .filter(|v| METADATA_VERSIONS.contains(v))
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!(
                "streamcast_metadata is {}; this reader reads 1, 2, 3",
                doc["streamcast_metadata"]
            ),
        })?;
    let stream = json_str(uri, &doc, "stream")?.to_string();
    let stream_id = json_str(uri, &doc, "stream_id")?.to_string();
    let sealed = json_field(uri, &doc, "sealed_logs")?
        .as_array()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: "sealed_logs is not a list".into(),
        })?;
    json_field(uri, &doc, "live_log")?;
    // serde_json's map sorts keys; the column order is the declaration's, so each schema is
    // taken from the strict parser, which keeps it
    let ordered = crate::json::parse_unique(bytes).map_err(|e| ReadError::Invalid {
        uri: uri.to_string(),
        what: format!("not strict JSON: {e}"),
    })?;
    let mut sealed_logs = Vec::with_capacity(sealed.len());
    for (i, entry) in sealed.iter().enumerate() {
        let schema = ordered
            .get("sealed_logs")
            .and_then(|s| s.get(i))
            .and_then(|l| l.get("schema"));
        sealed_logs.push(parse_log(
            uri,
            &format!("sealed_logs[{i}]"),
            entry,
            schema,
            version,
            true,
        )?);
    }
    let schema = ordered.get("live_log").and_then(|l| l.get("schema"));
    let live_log = parse_log(uri, "live_log", &doc["live_log"], schema, version, false)?;
    // consecutive logs' offsets are checked when their tables are read (a seam defect refuses
    // only the reads that meet it); a log that ends before it starts is no log
    let manifest = match doc.get("manifest") {
        None | Some(Json::Null) => None,
        Some(Json::String(m)) => Some(m.clone()),
        Some(_) => {
            return Err(ReadError::Invalid {
                uri: uri.to_string(),
                what: "manifest is not a string".into(),
            })
        }
    };
    Ok(StreamMetadata {
        uri: uri.to_string(),
        version,
        stream,
        stream_id,
        sealed_logs,
        live_log,
        manifest,
    })
}

/// One log's entry, `label` (`live_log`, `sealed_logs[2]`) naming it in errors; `schema` is its
/// `schema` from the order-keeping parser. A sealed log needs an `end_offset` (exclusive) at
/// or above its `start_offset`.
fn parse_log(
    uri: &str,
    label: &str,
    entry: &Json,
    schema: Option<&sonic_rs::Value>,
    version: u64,
    sealed: bool,
) -> Result<LogEntry, ReadError> {
    let invalid = |what: String| ReadError::Invalid {
        uri: uri.to_string(),
        what,
    };
    if !entry.is_object() {
        return Err(invalid(format!("{label} is not an object")));
    }
    let field = |key: &str| {
        entry
            .get(key)
            .ok_or_else(|| invalid(format!("no {label}.{key}")))
    };
    let offset = |key: &str| {
        field(key)?
            .as_u64()
            .ok_or_else(|| invalid(format!("{label}.{key} is not a non-negative integer")))
    };
    let name = field("name")?
        .as_str()
        .ok_or_else(|| invalid(format!("{label}.name is not a string")))?
        .to_string();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(invalid(format!("{label}.name {name:?} is not a log name")));
    }
    let start_offset = offset("start_offset")?;
    let end_offset = if sealed {
        let end = offset("end_offset")?;
        if end < start_offset {
            return Err(invalid(format!(
                "{label} ({name}) has end_offset {end} below its start_offset {start_offset}"
            )));
        }
        Some(end)
    } else {
        None
    };
    field("schema")?;
    field("system_schema")?;
    let schema_json = schema.map(|s| s.to_string()).unwrap_or_default();
    let published = match entry.get("published") {
        Some(Json::String(p)) => p.clone(),
        Some(Json::Null) | None => {
            return Err(invalid(format!(
                "{label}.published is missing (streamcast_metadata {version}): the stream names no published location"
            )))
        }
        Some(_) => return Err(invalid(format!("{label}.published is not a string"))),
    };
    if !(published.starts_with("file:///") || published.starts_with("s3://")) {
        return Err(invalid(format!(
            "{label}.published {published:?} is not a file:/// or s3:// URI (a published location needs a scheme)"
        )));
    }
    Ok(LogEntry {
        name,
        published,
        start_offset,
        end_offset,
        schema_json,
    })
}

/// The row codec of a log's schema (`label`: `live_log`, `sealed_logs[0]`): a schema with
/// properties, or schema-less for `{}`.
fn codec_of(metadata_uri: &str, label: &str, entry: &LogEntry) -> Result<RowCodec, ReadError> {
    let invalid = |what: String| ReadError::Invalid {
        uri: metadata_uri.to_string(),
        what: format!("{label}.schema: {what}"),
    };
    let schema = crate::json::parse_unique(entry.schema_json.as_bytes())
        .map_err(|e| invalid(e.to_string()))?;
    let schemaless = schema.is_null() || schema.as_object().is_some_and(|o| o.is_empty());
    if schemaless {
        return Ok(RowCodec::Schemaless);
    }
    Schema::compile_value(&schema)
        .map(RowCodec::Schema)
        .map_err(|e| invalid(e.to_string()))
}

/// The row codec of a log's schema with its properties (at every depth) in the order of its
/// table schema's fields. The table's column order is the declaration order, which is the key
/// order of every canonical row; the official client also takes caught-up rows' key order from
/// the table (PUBLISHED.md §3.7), and a writer that stored the JSON Schema through a sorted map
/// loses it there. Properties the table lacks keep their place after the ones it has (and are
/// then refused by [`mapped_columns`]).
fn codec_in_table_order(
    metadata_uri: &str,
    label: &str,
    entry: &LogEntry,
    table_uri: &str,
    iceberg: &Json,
) -> Result<RowCodec, ReadError> {
    let invalid = |e: String| ReadError::Invalid {
        uri: metadata_uri.to_string(),
        what: format!("{label}.schema: {e}"),
    };
    let declared = crate::json::parse_unique(entry.schema_json.as_bytes())
        .map_err(|e| invalid(e.to_string()))?;
    if declared.as_object().is_none_or(|o| o.is_empty()) {
        return codec_of(metadata_uri, label, entry);
    }
    let table = current_schema(table_uri, iceberg)?;
    let mut ordered = String::with_capacity(entry.schema_json.len());
    write_ordered(&declared, Some(table), &mut ordered);
    let schema =
        crate::json::parse_unique(ordered.as_bytes()).map_err(|e| invalid(e.to_string()))?;
    Schema::compile_value(&schema)
        .map(RowCodec::Schema)
        .map_err(|e| invalid(e.to_string()))
}

/// Writes the JSON Schema `node` with the `properties` of each object in the order of the
/// Iceberg struct `ty`'s fields (`items` follows a list's `element`, `additionalProperties` a
/// map's `value`).
fn write_ordered(node: &sonic_rs::Value, ty: Option<&Json>, out: &mut String) {
    let Some(object) = node.as_object() else {
        out.push_str(&node.to_string());
        return;
    };
    let nested = |key: &str| ty.and_then(|t| t.get(key));
    out.push('{');
    for (i, (key, value)) in object.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::Value::from(key).to_string());
        out.push(':');
        match key {
            "properties" if value.is_object() => {
                let fields = nested("fields").and_then(Json::as_array);
                let properties: Vec<(&str, &sonic_rs::Value)> = value
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.iter())
                    .collect();
                let mut listed: Vec<(&str, &sonic_rs::Value, Option<&Json>)> = Vec::new();
                for f in fields.into_iter().flatten() {
                    let name = f.get("name").and_then(Json::as_str);
                    if let Some(&(k, v)) = properties.iter().find(|(k, _)| Some(*k) == name) {
                        listed.push((k, v, f.get("type")));
                    }
                }
                for &(k, v) in &properties {
                    if !listed.iter().any(|(n, _, _)| *n == k) {
                        listed.push((k, v, None));
                    }
                }
                out.push('{');
                for (j, (k, v, t)) in listed.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::from(*k).to_string());
                    out.push(':');
                    write_ordered(v, *t, out);
                }
                out.push('}');
            }
            "items" => write_ordered(value, nested("element"), out),
            "additionalProperties" => write_ordered(value, nested("value"), out),
            _ => out.push_str(&value.to_string()),
        }
    }
    out.push('}');
}

/// The table's current schema (`schemas[current-schema-id]`).
fn current_schema<'a>(uri: &str, iceberg: &'a Json) -> Result<&'a Json, ReadError> {
    let current = json_field(uri, iceberg, "current-schema-id")?
        .as_i64()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: "current-schema-id is not an integer".into(),
        })?;
    json_field(uri, iceberg, "schemas")?
        .as_array()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: "schemas is not a list".into(),
        })?
        .iter()
        .find(|s| s.get("schema-id").and_then(Json::as_i64) == Some(current))
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("no schema with schema-id {current} in schemas"),
        })
}

/// The table schema's field id of each segment column (`litelink_offset`, the declared
/// columns or `row`, `streamcast_ts`), with the names the table's name mapping gives it.
fn mapped_columns(
    uri: &str,
    iceberg: &Json,
    codec: &RowCodec,
) -> Result<Vec<MappedColumn>, ReadError> {
    let invalid = |what: String| ReadError::Invalid {
        uri: uri.to_string(),
        what,
    };
    let schema = current_schema(uri, iceberg)?;
    let current = schema.get("schema-id").and_then(Json::as_i64).unwrap_or(0);
    let fields = schema
        .get("fields")
        .and_then(Json::as_array)
        .ok_or_else(|| invalid(format!("schema {current} has no fields list")))?;
    let mut by_name = HashMap::new();
    for f in fields {
        let (Some(name), Some(id)) = (
            f.get("name").and_then(Json::as_str),
            f.get("id")
                .and_then(Json::as_i64)
                .and_then(|i| i32::try_from(i).ok()),
        ) else {
            return Err(invalid(format!(
                "schema {current} has a field without a name or an id: {f}"
            )));
        };
        by_name.insert(name, id);
    }
    let mut names_of: HashMap<i32, Vec<String>> = HashMap::new();
    if let Some(mapping) = iceberg
        .get("properties")
        .and_then(|p| p.get("schema.name-mapping.default"))
    {
        let text = mapping.as_str().ok_or_else(|| {
            invalid("properties.schema.name-mapping.default is not a string".into())
        })?;
        let entries: Json = serde_json::from_str(text).map_err(|e| {
            invalid(format!(
                "properties.schema.name-mapping.default is not JSON: {e}"
            ))
        })?;
        for entry in entries.as_array().into_iter().flatten() {
            let id = entry
                .get("field-id")
                .and_then(Json::as_i64)
                .and_then(|i| i32::try_from(i).ok());
            let names = entry.get("names").and_then(Json::as_array);
            if let (Some(id), Some(names)) = (id, names) {
                names_of
                    .entry(id)
                    .or_default()
                    .extend(names.iter().filter_map(Json::as_str).map(str::to_string));
            }
        }
    }
    let mut wanted = vec![LITELINK_OFFSET.to_string()];
    match codec {
        RowCodec::Schema(s) => wanted.extend(s.column_names().map(str::to_string)),
        RowCodec::Schemaless => wanted.push(SCHEMALESS_ROW.to_string()),
    }
    wanted.push(STREAMCAST_TS.to_string());
    wanted
        .iter()
        .map(|name| {
            let id = *by_name.get(name.as_str()).ok_or_else(|| {
                invalid(format!(
                    "the table's schema {current} has no column {name} (it has {:?})",
                    fields
                        .iter()
                        .filter_map(|f| f.get("name").and_then(Json::as_str))
                        .collect::<Vec<_>>()
                ))
            })?;
            Ok(MappedColumn {
                field_id: id,
                names: names_of.get(&id).cloned().unwrap_or_default(),
            })
        })
        .collect()
}

/// The current snapshot's manifest list, or `None` for a table without a current snapshot.
fn current_manifest_list(uri: &str, iceberg: &Json) -> Result<Option<String>, ReadError> {
    let current = match iceberg.get("current-snapshot-id") {
        None | Some(Json::Null) => return Ok(None),
        Some(v) => v.as_i64().ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: "current-snapshot-id is not an integer".into(),
        })?,
    };
    if current == -1 {
        return Ok(None);
    }
    let snapshots = json_field(uri, iceberg, "snapshots")?
        .as_array()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: "snapshots is not a list".into(),
        })?;
    let snapshot = snapshots
        .iter()
        .find(|s| s.get("snapshot-id").and_then(Json::as_i64) == Some(current))
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("current-snapshot-id {current} is not among the snapshots"),
        })?;
    snapshot
        .get("manifest-list")
        .and_then(Json::as_str)
        .map(|s| Some(s.to_string()))
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("snapshot {current} has no manifest-list"),
        })
}

/// The records of an Avro object container file.
fn avro_records(
    fetcher: &mut Fetcher,
    uri: &str,
    named_by: &str,
) -> Result<Vec<Vec<(String, Avro)>>, ReadError> {
    let bytes = fetcher.get(uri)?.ok_or_else(|| ReadError::Missing {
        uri: uri.to_string(),
        named_by: named_by.to_string(),
    })?;
    let invalid = |what: String| ReadError::Invalid {
        uri: uri.to_string(),
        what,
    };
    let reader = apache_avro::Reader::new(&bytes[..])
        .map_err(|e| invalid(format!("not an Avro object container: {e}")))?;
    let mut records = Vec::new();
    for (i, value) in reader.enumerate() {
        match value.map_err(|e| invalid(format!("record {i}: {e}")))? {
            Avro::Record(fields) => records.push(fields),
            other => return Err(invalid(format!("record {i} is not a record: {other:?}"))),
        }
    }
    Ok(records)
}

/// A field of an Avro record, through a union (`None` for an absent field or a null).
fn avro_field<'a>(record: &'a [(String, Avro)], name: &str) -> Option<&'a Avro> {
    let mut v = &record.iter().find(|(n, _)| n == name)?.1;
    while let Avro::Union(_, inner) = v {
        v = inner;
    }
    match v {
        Avro::Null => None,
        v => Some(v),
    }
}

fn avro_long(record: &[(String, Avro)], name: &str) -> Option<i64> {
    match avro_field(record, name)? {
        Avro::Long(v) => Some(*v),
        Avro::Int(v) => Some(i64::from(*v)),
        _ => None,
    }
}

fn avro_string<'a>(record: &'a [(String, Avro)], name: &str) -> Option<&'a str> {
    match avro_field(record, name)? {
        Avro::String(s) => Some(s),
        _ => None,
    }
}

/// The manifests the manifest list names (data manifests only).
fn manifest_paths(
    fetcher: &mut Fetcher,
    list: &str,
    named_by: &str,
) -> Result<Vec<String>, ReadError> {
    let mut paths = Vec::new();
    for (i, record) in avro_records(fetcher, list, named_by)?.iter().enumerate() {
        let path = avro_string(record, "manifest_path").ok_or_else(|| ReadError::Invalid {
            uri: list.to_string(),
            what: format!("record {i} has no manifest_path"),
        })?;
        match avro_long(record, "content").unwrap_or(0) {
            0 => paths.push(path.to_string()),
            content => {
                return Err(ReadError::Unsupported {
                    uri: list.to_string(),
                    what: format!("manifest {path} of content {content} (delete files)"),
                })
            }
        }
    }
    Ok(paths)
}

/// The live data files of one manifest, appended to `files`. A file without offset bounds
/// gets the empty marker `(1, 0)`, measured later from its footer.
fn read_manifest(
    fetcher: &mut Fetcher,
    manifest: &str,
    list: &str,
    offset_id: i32,
    files: &mut Vec<DataFile>,
) -> Result<(), ReadError> {
    let invalid = |i: usize, what: String| ReadError::Invalid {
        uri: manifest.to_string(),
        what: format!("entry {i}: {what}"),
    };
    for (i, entry) in avro_records(fetcher, manifest, list)?.iter().enumerate() {
        let status = avro_long(entry, "status").ok_or_else(|| invalid(i, "no status".into()))?;
        if status == 2 {
            continue; // DELETED
        }
        if !(0..=1).contains(&status) {
            return Err(invalid(i, format!("status {status} is not 0, 1 or 2")));
        }
        let Some(Avro::Record(data)) = avro_field(entry, "data_file") else {
            return Err(invalid(i, "no data_file record".into()));
        };
        let path = avro_string(data, "file_path")
            .ok_or_else(|| invalid(i, "no data_file.file_path".into()))?;
        let content = avro_long(data, "content").unwrap_or(0);
        if content != 0 {
            return Err(ReadError::Unsupported {
                uri: manifest.to_string(),
                what: format!("entry {i} ({path}) of content {content} (delete files)"),
            });
        }
        let format = avro_string(data, "file_format")
            .ok_or_else(|| invalid(i, "no data_file.file_format".into()))?;
        if !format.eq_ignore_ascii_case("parquet") {
            return Err(ReadError::Unsupported {
                uri: manifest.to_string(),
                what: format!("entry {i} ({path}) in format {format}"),
            });
        }
        let count = |name: &str| {
            avro_long(data, name)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| invalid(i, format!("data_file.{name} is not a non-negative long")))
        };
        let record_count = count("record_count")?;
        let size_bytes = count("file_size_in_bytes")?;
        let lower = bound(data, "lower_bounds", offset_id).map_err(|w| invalid(i, w))?;
        let upper = bound(data, "upper_bounds", offset_id).map_err(|w| invalid(i, w))?;
        let offsets = match (lower, upper) {
            (Some(lo), Some(hi)) if lo <= hi => (lo, hi),
            (Some(lo), Some(hi)) => {
                return Err(invalid(
                    i,
                    format!("litelink_offset lower bound {lo} is above its upper bound {hi}"),
                ))
            }
            _ => (1, 0),
        };
        files.push(DataFile {
            uri: path.to_string(),
            manifest: manifest.to_string(),
            offsets,
            record_count,
            size_bytes,
        });
    }
    Ok(())
}

/// The `litelink_offset` bound in `lower_bounds`/`upper_bounds` (an Iceberg map, in Avro an
/// array of `{key, value}`): 8 bytes little-endian.
fn bound(data: &[(String, Avro)], name: &str, id: i32) -> Result<Option<u64>, String> {
    let Some(map) = avro_field(data, name) else {
        return Ok(None);
    };
    let Avro::Array(items) = map else {
        return Err(format!(
            "data_file.{name} is not a list of key/value records"
        ));
    };
    for item in items {
        let Avro::Record(kv) = item else {
            return Err(format!("data_file.{name} holds a non-record"));
        };
        if avro_long(kv, "key") != Some(i64::from(id)) {
            continue;
        }
        let bytes = match avro_field(kv, "value") {
            Some(Avro::Bytes(b)) | Some(Avro::Fixed(_, b)) => b,
            _ => return Err(format!("data_file.{name}[{id}] is not bytes")),
        };
        let raw: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
            format!(
                "data_file.{name}[{id}] (litelink_offset, a long) is {} bytes, not 8",
                bytes.len()
            )
        })?;
        let value = i64::from_le_bytes(raw);
        return u64::try_from(value)
            .map(Some)
            .map_err(|_| format!("data_file.{name}[{id}] is the negative offset {value}"));
    }
    Ok(None)
}

/// A data file's offsets from its Parquet footer statistics (for a manifest entry without
/// bounds).
fn offsets_from_footer(
    fetcher: &mut Fetcher,
    file: &DataFile,
    offset: &MappedColumn,
) -> Result<(u64, u64), ReadError> {
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::statistics::Statistics;

    let bytes = fetch_data_file(fetcher, file)?;
    let invalid = |what: String| ReadError::Invalid {
        uri: file.uri.clone(),
        what,
    };
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .map_err(|e| invalid(format!("not Parquet: {e}")))?;
    let schema = metadata.file_metadata().schema_descr();
    let leaf = (0..schema.num_columns()).find(|&leaf| {
        let root = schema.get_column_root(leaf);
        let info = root.get_basic_info();
        if info.has_id() {
            info.id() == offset.field_id
        } else {
            offset.names.iter().any(|n| n == root.name())
        }
    });
    let Some(leaf) = leaf else {
        return Err(invalid(format!(
            "no litelink_offset column (field {})",
            offset.field_id
        )));
    };
    let mut range: Option<(i64, i64)> = None;
    for (rg, meta) in metadata.row_groups().iter().enumerate() {
        if meta.num_rows() == 0 {
            continue;
        }
        let Some(Statistics::Int64(s)) = meta.column(leaf).statistics() else {
            return Err(invalid(format!(
                "its manifest entry has no litelink_offset bounds and row group {rg} has no int64 statistics for it"
            )));
        };
        let (Some(&lo), Some(&hi)) = (s.min_opt(), s.max_opt()) else {
            return Err(invalid(format!(
                "its manifest entry has no litelink_offset bounds and row group {rg} has no min/max for it"
            )));
        };
        range = Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
    }
    match range {
        Some((lo, hi)) if lo >= 0 => Ok((lo as u64, hi as u64)),
        Some((lo, _)) => Err(invalid(format!("holds the negative offset {lo}"))),
        None => Err(invalid("holds no rows".into())),
    }
}

/// What makes offsets untrustworthy: files whose count does not fill their bounds, overlaps,
/// holes between consecutive files.
fn defects(files: &[DataFile]) -> Vec<(Range<u64>, String)> {
    let mut out = Vec::new();
    for f in files {
        let span = f.offsets.1 - f.offsets.0 + 1;
        if f.record_count != span {
            out.push((
                f.range(),
                format!(
                    "data file {} holds {} records but its litelink_offset bounds {}..={} span {span}: a hole inside it, or wrong bounds",
                    f.uri, f.record_count, f.offsets.0, f.offsets.1
                ),
            ));
        }
    }
    // the highest upper bound so far, and the file that has it
    let mut high: Option<&DataFile> = None;
    for b in files {
        let Some(a) = high else {
            high = Some(b);
            continue;
        };
        let after = a.offsets.1.saturating_add(1);
        if b.offsets.0 < after {
            out.push((
                b.offsets.0..after.min(b.offsets.1.saturating_add(1)),
                format!(
                    "data files {} ({}..={}) and {} ({}..={}) overlap",
                    a.uri, a.offsets.0, a.offsets.1, b.uri, b.offsets.0, b.offsets.1
                ),
            ));
        } else if b.offsets.0 > after {
            out.push((
                after..b.offsets.0,
                format!(
                    "no data file holds offsets {after}..{} (between {} and {}): a hole the official client would skip silently",
                    b.offsets.0, a.uri, b.uri
                ),
            ));
        }
        if b.offsets.1 > a.offsets.1 {
            high = Some(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lo: u64, hi: u64, count: u64) -> DataFile {
        DataFile {
            uri: format!("file:///t/data/{lo}-{hi}.parquet"),
            manifest: "file:///t/metadata/m0.avro".into(),
            offsets: (lo, hi),
            record_count: count,
            size_bytes: 1,
        }
    }

    #[test]
    fn bounds_must_be_exact_and_files_dense() {
        // the upper bound 10 too high (PUBLISHED.md §5.2): the count no longer fills it
        let d = defects(&[file(1, 2000, 2000), file(2001, 3010, 1000)]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, 2001..3011);
        assert!(d[0].1.contains("holds 1000 records"), "{}", d[0].1);
        // a hole (§5.3) and an overlap, each with its offsets
        let d = defects(&[file(1, 1000, 1000), file(2001, 3000, 1000)]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, 1001..2001);
        let d = defects(&[file(1, 1000, 1000), file(10, 20, 11), file(900, 1100, 201)]);
        assert_eq!(
            d.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
            [10..21, 900..1001]
        );
        assert!(defects(&[file(1, 1, 1), file(2, 3, 2), file(4, 9, 6)]).is_empty());
    }

    fn bounds(entries: &[(i32, Vec<u8>)]) -> Vec<(String, Avro)> {
        let items = entries
            .iter()
            .map(|(k, v)| {
                Avro::Record(vec![
                    ("key".into(), Avro::Int(*k)),
                    ("value".into(), Avro::Bytes(v.clone())),
                ])
            })
            .collect();
        vec![(
            "lower_bounds".into(),
            Avro::Union(1, Box::new(Avro::Array(items))),
        )]
    }

    #[test]
    fn offset_bounds_are_8_byte_little_endian() {
        let data = bounds(&[(2, vec![1, 2, 3]), (1, 2000i64.to_le_bytes().to_vec())]);
        assert_eq!(bound(&data, "lower_bounds", 1), Ok(Some(2000)));
        assert_eq!(bound(&data, "lower_bounds", 7), Ok(None));
        assert_eq!(bound(&data, "upper_bounds", 1), Ok(None));
        let short = bounds(&[(1, vec![0xd0, 0x07, 0, 0])]);
        assert!(bound(&short, "lower_bounds", 1)
            .unwrap_err()
            .contains("4 bytes, not 8"));
        let negative = bounds(&[(1, (-5i64).to_le_bytes().to_vec())]);
        assert!(bound(&negative, "lower_bounds", 1)
            .unwrap_err()
            .contains("negative"));
        let null = vec![("lower_bounds".into(), Avro::Union(0, Box::new(Avro::Null)))];
        assert_eq!(bound(&null, "lower_bounds", 1), Ok(None));
    }

    #[test]
    fn declared_order_comes_from_the_table_at_every_depth() {
        // a stream metadata schema stored through a sorted map, and the table in declared order
        let sorted = r#"{"properties":{"a":{"type":"integer"},"b":{"properties":{"x":{"type":"string"},"y":{"type":"boolean"}},"required":["x","y"],"type":"object"},"z":{"type":"number"}},"required":["z","a","b"],"type":"object"}"#;
        let table: Json = serde_json::from_str(
            r#"{"type":"struct","fields":[{"id":1,"name":"litelink_offset","type":"long"},
              {"id":2,"name":"z","type":"double"},
              {"id":3,"name":"b","type":{"type":"struct","fields":[{"id":6,"name":"y","type":"boolean"},{"id":7,"name":"x","type":"string"}]}},
              {"id":4,"name":"a","type":"long"},{"id":5,"name":"streamcast_ts","type":"long"}]}"#,
        )
        .unwrap();
        let mut out = String::new();
        write_ordered(
            &crate::json::parse_unique(sorted.as_bytes()).unwrap(),
            Some(&table),
            &mut out,
        );
        let schema = Schema::compile(&out).expect("still the same schema");
        assert_eq!(schema.column_names().collect::<Vec<_>>(), ["z", "b", "a"]);
        assert!(
            out.contains(r#""b":{"properties":{"y":{"type":"boolean"},"x":{"type":"string"}}"#),
            "{out}"
        );
        // without a table, the order is the file's
        let mut out = String::new();
        write_ordered(
            &crate::json::parse_unique(sorted.as_bytes()).unwrap(),
            None,
            &mut out,
        );
        let schema = Schema::compile(&out).expect("schema");
        assert_eq!(schema.column_names().collect::<Vec<_>>(), ["a", "b", "z"]);
    }

    #[test]
    fn hints_hold_one_file_name() {
        assert_eq!(
            file_name("h", b" 00001-ab.metadata.json\n").unwrap(),
            "00001-ab.metadata.json"
        );
        for bad in [&b""[..], b"  \n", b"../x", b"a/b", b"..", b"\xff"] {
            assert!(file_name("h", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stream_metadata_fields_are_checked() {
        let good = r#"{"streamcast_metadata":2,"stream":"t","stream_id":"id","sealed_logs":[],
            "live_log":{"name":"t","published":"file:///p","start_offset":1,"schema":{},"system_schema":{}}}"#;
        let sealed = r#"{"name":"t0","published":"file:///p","start_offset":1,"schema":{},"system_schema":{}}"#;
        let m = parse_stream_metadata("u", good.as_bytes()).expect("minimal");
        assert_eq!((m.version, m.live_log.start_offset), (2, 1));
        assert_eq!(
            codec_of(&m.uri, "live_log", &m.live_log).unwrap(),
            RowCodec::Schemaless
        );
        assert!(m.sealed_logs.is_empty() && m.manifest.is_none());
        for (change, needle) in [
            (
                ("\"streamcast_metadata\":2", "\"streamcast_metadata\":99"),
                "99; this reader reads 1, 2, 3",
            ),
            (("\"stream_id\":\"id\",", ""), "no stream_id"),
            (
                ("\"sealed_logs\":[]", "\"sealed_logs\":[{}]"),
                "no sealed_logs[0].name",
            ),
            (
                ("\"sealed_logs\":[]", "\"sealed_logs\":{}"),
                "sealed_logs is not a list",
            ),
            ((",\"system_schema\":{}", ""), "no live_log.system_schema"),
            (("\"file:///p\"", "\"/p\""), "needs a scheme"),
            (
                ("\"published\":\"file:///p\",", ""),
                "live_log.published is missing",
            ),
            (
                ("\"start_offset\":1", "\"start_offset\":-1"),
                "live_log.start_offset",
            ),
        ] {
            let text = good.replace(change.0, change.1);
            let e = parse_stream_metadata("file:///m.json", text.as_bytes())
                .expect_err(needle)
                .to_string();
            assert!(e.contains(needle) && e.starts_with("file:///m.json"), "{e}");
        }
        // a sealed log: the live_log keys plus end_offset, at or above its start
        let with = |entry: &str| {
            good.replace("\"sealed_logs\":[]", &format!("\"sealed_logs\":[{entry}]"))
                .replace(
                    "\"live_log\"",
                    "\"manifest\":\"00002-ab.manifest.parquet\",\"live_log\"",
                )
        };
        let m = parse_stream_metadata(
            "u",
            with(&sealed.replace(
                "\"start_offset\":1",
                "\"start_offset\":1,\"end_offset\":301",
            ))
            .as_bytes(),
        )
        .expect("a sealed log");
        assert_eq!(m.sealed_logs.len(), 1);
        assert_eq!(
            (m.sealed_logs[0].name.as_str(), m.sealed_logs[0].end_offset),
            ("t0", Some(301))
        );
        assert_eq!(m.live_log.end_offset, None);
        assert_eq!(m.manifest.as_deref(), Some("00002-ab.manifest.parquet"));
        assert_eq!(
            m.logs().map(|l| l.name.as_str()).collect::<Vec<_>>(),
            ["t0", "t"]
        );
        for (entry, needle) in [
            (sealed.to_string(), "no sealed_logs[0].end_offset"),
            (
                sealed.replace("\"start_offset\":1", "\"start_offset\":5,\"end_offset\":4"),
                "sealed_logs[0] (t0) has end_offset 4 below its start_offset 5",
            ),
            (
                sealed.replace(",\"system_schema\":{}", ",\"end_offset\":9"),
                "no sealed_logs[0].system_schema",
            ),
            (
                r#"{"name":"t0","published":"/p","start_offset":1,"end_offset":9,"schema":{},"system_schema":{}}"#.to_string(),
                "sealed_logs[0].published \"/p\" is not a file:/// or s3:// URI",
            ),
        ] {
            let e = parse_stream_metadata("file:///m.json", with(&entry).as_bytes())
                .expect_err(needle)
                .to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    /// A log's table holding `files` (`(lo, hi)` inclusive, dense), or none (`exists` false).
    fn log_table(
        name: &str,
        start: u64,
        end: Option<u64>,
        files: &[(u64, u64)],
        exists: bool,
    ) -> LogTable {
        let mut t = LogTable {
            entry: LogEntry {
                name: name.into(),
                published: "file:///p".into(),
                start_offset: start,
                end_offset: end,
                schema_json: "{}".into(),
            },
            table: format!("file:///p/{name}"),
            table_metadata: exists
                .then(|| format!("file:///p/{name}/metadata/00001-x.metadata.json")),
            files: Vec::new(),
            defects: Vec::new(),
            floor: None,
            end: start,
            codec: RowCodec::Schemaless,
            columns: Vec::new(),
            unreadable: None,
        };
        t.set_files(
            files
                .iter()
                .map(|&(lo, hi)| file(lo, hi, hi - lo + 1))
                .collect(),
        );
        t
    }

    /// A stream of `logs` (the last one live) whose stream manifest records `recorded`.
    fn stream_of(logs: Vec<LogTable>, recorded: &[(&str, u64)]) -> PublishedTable {
        let recorded: HashMap<String, u64> =
            recorded.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let floor_log = logs.iter().position(|l| l.floor.is_some());
        let seams = seam_defects(&logs, floor_log, &recorded);
        let mut entries: Vec<LogEntry> = logs.iter().map(|l| l.entry.clone()).collect();
        let live_log = entries.pop().expect("a live log");
        PublishedTable {
            metadata: StreamMetadata {
                uri: "file:///p/s.metadata/00002-x.metadata.json".into(),
                version: 2,
                stream: "s".into(),
                stream_id: "id".into(),
                sealed_logs: entries,
                live_log,
                manifest: None,
            },
            logs,
            seams,
            floor_log,
            fetcher: Fetcher::new(S3Options::default()),
        }
    }

    /// The seam defect a read of `range` is refused with.
    fn refused(t: &PublishedTable, range: Range<u64>) -> SeamDefect {
        match t.rows(range.clone(), 100) {
            Err(ReadError::Seam {
                defect,
                asked,
                stream,
            }) => {
                assert_eq!((asked, stream.as_str()), (range, "s"));
                *defect
            }
            Err(e) => panic!("refused otherwise: {e}"),
            Ok(_) => panic!("{range:?} was read"),
        }
    }

    #[test]
    fn logs_splice_at_their_seams() {
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 150), (151, 300)], true),
                log_table("s-v2", 301, Some(401), &[(301, 400)], true),
                log_table("s-v3", 401, None, &[(401, 450)], true),
            ],
            &[("s", 300), ("s-v2", 100)],
        );
        assert!(t.seam_defects().is_empty(), "{:?}", t.seam_defects());
        assert_eq!(t.extent(), 1..451);
        assert_eq!(t.catch_up_range(None).unwrap(), 1..451);
        assert_eq!(t.catch_up_range(Some(350)).unwrap(), 350..451);
        // each log's share, in order, tiling the range
        let rows = t.rows(250..420, 100).expect("across two seams");
        let shares: Vec<(String, Range<u64>)> = rows.parts.map(|p| (p.log.name, p.range)).collect();
        assert_eq!(
            shares,
            [
                ("s".to_string(), 250..301),
                ("s-v2".to_string(), 301..401),
                ("s-v3".to_string(), 401..420)
            ]
        );
        // a live log that has published nothing yet: the tables end at the seam
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 300)], true),
                log_table("s-v2", 301, None, &[], false),
            ],
            &[],
        );
        assert_eq!(t.extent(), 1..301);
        assert_eq!(t.catch_up_range(Some(1)).unwrap(), 1..301);
        assert!(matches!(
            t.catch_up_range(Some(301)),
            Err(ReadError::NothingAbove { end: 301, .. })
        ));
    }

    #[test]
    fn a_hole_between_logs_is_refused_naming_both_and_the_offsets() {
        // the next log starts 10 above the seam
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 300)], true),
                log_table("s-v2", 311, None, &[(311, 350)], true),
            ],
            &[],
        );
        let d = refused(&t, 1..351);
        assert_eq!(
            d,
            SeamDefect::Hole {
                log: "s".into(),
                next: "s-v2".into(),
                offsets: 301..311,
                detail: "log 's' has end_offset 301, log 's-v2' start_offset 311".into()
            }
        );
        let e = ReadError::Seam {
            stream: "s".into(),
            defect: Box::new(d),
            asked: 1..351,
        }
        .to_string();
        assert!(
            e.contains("no log holds offsets 301..311, between log 's' and log 's-v2'"),
            "{e}"
        );
        assert!(matches!(
            t.catch_up_range(Some(1)),
            Err(ReadError::Seam { .. })
        ));
        assert!(matches!(
            t.catch_up_range(None),
            Err(ReadError::Seam { .. })
        ));
        // above the hole: read
        assert_eq!(t.catch_up_range(Some(320)).unwrap(), 320..351);
        assert!(t.rows(320..351, 100).is_ok());
        // a sealed table whose rows end below its end_offset
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 290)], true),
                log_table("s-v2", 301, None, &[(301, 350)], true),
            ],
            &[],
        );
        let d = refused(&t, 280..351);
        assert!(
            matches!(&d, SeamDefect::Hole { offsets, .. } if *offsets == (291..301)),
            "{d}"
        );
        assert!(d.to_string().contains("its table's rows end at 291"), "{d}");
        // a later log's table starting above its start_offset
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 300)], true),
                log_table("s-v2", 301, None, &[(305, 350)], true),
            ],
            &[],
        );
        let d = refused(&t, 1..351);
        assert!(
            matches!(&d, SeamDefect::Hole { offsets, .. } if *offsets == (301..305)),
            "{d}"
        );
    }

    #[test]
    fn an_overlap_between_logs_is_refused_naming_both_and_the_offsets() {
        // the next log starts below the seam
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 300)], true),
                log_table("s-v2", 291, None, &[(291, 350)], true),
            ],
            &[],
        );
        let d = refused(&t, 1..351);
        assert_eq!(
            d,
            SeamDefect::Overlap {
                log: "s".into(),
                next: "s-v2".into(),
                offsets: 291..301,
                detail: "log 's' has end_offset 301, log 's-v2' start_offset 291".into()
            }
        );
        assert!(
            d.to_string()
                .contains("offsets 291..301 are in both log 's' and log 's-v2'"),
            "{d}"
        );
        // a sealed table holding rows past its end_offset
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 310)], true),
                log_table("s-v2", 301, None, &[(301, 350)], true),
            ],
            &[],
        );
        let d = refused(&t, 1..351);
        assert!(
            matches!(&d, SeamDefect::Overlap { offsets, .. } if *offsets == (301..311)),
            "{d}"
        );
        assert!(
            d.to_string().contains("its table holds rows up to 311"),
            "{d}"
        );
        assert!(
            t.rows(320..351, 100).is_ok(),
            "the live log alone, above it"
        );
    }

    #[test]
    fn a_sealed_log_without_a_table_is_refused_naming_it() {
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[], false),
                log_table("s-v2", 301, None, &[(301, 350)], true),
            ],
            &[("s", 300)],
        );
        let want = SeamDefect::TableMissing {
            log: "s".into(),
            table: "file:///p/s".into(),
            offsets: 1..301,
        };
        // the floor would come from the live log: from 1 and from the earliest, the missing
        // table is the refusal, not a later start or a gap below
        for start in [Some(1), Some(300), None] {
            match t.catch_up_range(start) {
                Err(ReadError::Seam { defect, .. }) => assert_eq!(*defect, want, "{start:?}"),
                other => panic!("{start:?}: {other:?}"),
            }
        }
        assert!(want
            .to_string()
            .contains("sealed log 's' (offsets 1..301) has no published table at file:///p/s"));
        assert_eq!(t.catch_up_range(Some(301)).unwrap(), 301..351);
    }

    #[test]
    fn a_sealed_log_published_short_is_refused_with_both_counts() {
        // offsets look whole, but the manifest recorded more rows than the table holds
        let t = stream_of(
            vec![
                log_table("s", 1, Some(301), &[(1, 300)], true),
                log_table("s-v2", 301, None, &[(301, 350)], true),
            ],
            &[("s", 310)],
        );
        let d = refused(&t, 1..351);
        assert_eq!(
            d,
            SeamDefect::PublishedShort {
                log: "s".into(),
                table: "file:///p/s".into(),
                holds: 300,
                expected: 310,
                offsets: 1..301,
            }
        );
        assert!(d.to_string().contains("is published short: its table file:///p/s holds 300 rows, but the stream manifest records 310"), "{d}");
        assert!(matches!(
            t.catch_up_range(None),
            Err(ReadError::Seam { .. })
        ));
        // as many as recorded, or more (the client refuses only fewer): read
        for count in [300, 290] {
            let t = stream_of(
                vec![
                    log_table("s", 1, Some(301), &[(1, 300)], true),
                    log_table("s-v2", 301, None, &[(301, 350)], true),
                ],
                &[("s", count)],
            );
            assert!(t.seam_defects().is_empty(), "{count}");
        }
    }

    /// Seals and publishes `rows` (encoded with `codec`) of the log in `dir` (created with
    /// `schema`, or already there at the seam); the publisher's status.
    fn publish_log(
        dir: &std::path::Path,
        layout: &super::super::Layout,
        schema: &Schema,
        rows: &[serde_json::Value],
        sealed_logs: Vec<super::super::SealedLog>,
        earliest: u64,
    ) -> super::super::PublishStatus {
        use super::super::{Publisher, SegmentToPublish, StreamInfo};
        use crate::log::{AppendBatch, Buffer, LogOptions};
        use crate::tier::{seal_next, segment_schema, SealCut, SealOptions, SegmentIndex};

        let codec = RowCodec::Schema(schema.clone());
        let mut buffer = Buffer::open_with(
            dir,
            Some(&schema.published()),
            LogOptions {
                segment_bytes: 64 << 10,
            },
        )
        .expect("log");
        let encoded: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| {
                let mut out = Vec::new();
                codec
                    .encode_row(
                        &crate::json::parse(r.to_string().as_bytes()).unwrap(),
                        &mut out,
                    )
                    .expect("row");
                out
            })
            .collect();
        for chunk in encoded.chunks(40) {
            buffer.append(&[AppendBatch::plain(chunk)]).expect("append");
        }
        let index = SegmentIndex::open(dir).expect("index");
        let reader = buffer.reader().expect("reader");
        let cut = || SealCut {
            until: buffer.end_offset(),
            target_bytes: 1024,
        };
        while seal_next(&index, &reader, &codec, cut(), &SealOptions::default())
            .expect("seal")
            .is_some()
        {}
        let info = StreamInfo {
            stream_id: "00000000-0000-4000-8000-00000000000a".into(),
            schema_json: Some(schema.published()),
            segment_schema: segment_schema(&codec),
            retirement: None,
            sealed_logs,
        };
        let mut publisher = Publisher::open(
            dir,
            layout.clone(),
            info,
            std::time::Duration::from_secs(600),
            earliest,
        )
        .expect("publisher");
        let segments: Vec<SegmentToPublish> = index
            .entries()
            .expect("entries")
            .iter()
            .map(|s| SegmentToPublish {
                first_offset: s.first_offset,
                last_offset: s.last_offset,
                rows: s.rows,
                bytes: s.bytes,
                min_ts: s.min_ts,
                max_ts: s.max_ts,
                path: index.path_of(s),
            })
            .collect();
        assert!(segments.len() > 1, "several files per log");
        publisher.append(&segments).expect("publish");
        publisher.status()
    }

    #[test]
    fn a_migrated_stream_reads_across_the_seam_each_log_with_its_own_schema() {
        use super::super::{Layout, SealedLog};
        use serde_json::json;

        let v1 = Schema::compile(
            r#"{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}"#,
        )
        .unwrap();
        let v2 = Schema::compile(r#"{"type":"object","properties":{"i":{"type":"integer"},"note":{"type":["string","null"]}},"required":["i"]}"#).unwrap();
        let tmp = tempfile::tempdir().expect("tmp");
        let home = tmp.path().join("s");
        let layout = Layout::local(&home, "s").expect("layout");
        let old: Vec<serde_json::Value> = (1..301).map(|i| json!({ "i": i })).collect();
        let status = publish_log(&home, &layout, &v1, &old, Vec::new(), 1);
        assert_eq!((status.end, status.rows), (301, 300));
        // the next log at the seam, with a column added, its table beside its directory
        let next = home.join("logs/s-v2");
        crate::log::create_successor(
            &next,
            "00000000-0000-4000-8000-00000000000a",
            Some(&v2.published()),
            301,
            &HashMap::new(),
        )
        .expect("successor");
        let next_layout = layout
            .for_log("s-v2", Some(&next), &S3Options::default())
            .expect("layout");
        let sealed = SealedLog {
            entry: json!({
                "name": "s", "published": layout.published, "start_offset": 1, "end_offset": 301,
                "schema": serde_json::from_str::<serde_json::Value>(&v1.published()).unwrap(),
                "system_schema": super::super::layout::system_schema(), "sort_by": [],
            }),
            record_count: 300,
        };
        let new: Vec<serde_json::Value> = (301..351)
            .map(|i| json!({ "i": i, "note": format!("n{i}") }))
            .collect();
        publish_log(&next, &next_layout, &v2, &new, vec![sealed.clone()], 301);

        let hint = layout.metadata_hint_uri();
        let t = PublishedTable::open(&hint, None, &S3Options::default()).expect("open");
        assert_eq!(t.metadata().sealed_logs.len(), 1);
        assert!(t
            .metadata()
            .manifest
            .as_deref()
            .is_some_and(|m| m.ends_with(".manifest.parquet")));
        assert_eq!(
            t.logs()
                .iter()
                .map(|l| l.entry().name.as_str())
                .collect::<Vec<_>>(),
            ["s", "s-v2"]
        );
        assert!(t.seam_defects().is_empty(), "{:?}", t.seam_defects());
        assert_eq!(t.extent(), 1..351);
        assert_eq!(t.catch_up_range(None).unwrap(), 1..351);
        // every row once, in order, each as its own log's codec encoded it
        let mut rows = t.rows(1..351, 64).expect("rows");
        let mut next_offset = 1;
        while let Some(chunk) = rows.next_chunk().expect("chunk") {
            let log = rows.log().expect("the chunk's log").name.clone();
            for (o, _ts, bytes) in chunk.iter() {
                assert_eq!(o, next_offset);
                let (want, want_log) = if o < 301 {
                    (format!(r#"{{"i":{o}}}"#), "s")
                } else {
                    (format!(r#"{{"i":{o},"note":"n{o}"}}"#), "s-v2")
                };
                assert_eq!(String::from_utf8_lossy(bytes), want);
                assert_eq!(log, want_log, "offset {o}");
                next_offset += 1;
            }
        }
        assert_eq!(next_offset, 351);

        // the manifest records more rows than the old table holds: published short
        let dir = home.join("s.metadata");
        let manifest = dir.join(t.metadata().manifest.as_deref().unwrap());
        let short = super::super::stream_manifest(&[SealedLog {
            record_count: 301,
            ..sealed.clone()
        }])
        .unwrap();
        let kept = std::fs::read(&manifest).unwrap();
        std::fs::write(&manifest, short).unwrap();
        let t = PublishedTable::open(&hint, None, &S3Options::default()).expect("open");
        match t.catch_up_range(Some(1)) {
            Err(ReadError::Seam { defect, .. }) => assert!(
                matches!(
                    *defect,
                    SeamDefect::PublishedShort {
                        holds: 300,
                        expected: 301,
                        ..
                    }
                ),
                "{defect}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(t.rows(301..351, 64).is_ok(), "the live log alone");
        std::fs::write(&manifest, kept).unwrap();
        // the metadata says the old log ends below the seam: refused as an overlap
        let version = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
            .max()
            .unwrap();
        let text = std::fs::read_to_string(&version).unwrap();
        std::fs::write(
            &version,
            text.replace("\"end_offset\": 301", "\"end_offset\": 291"),
        )
        .unwrap();
        let t = PublishedTable::open(&hint, None, &S3Options::default()).expect("open");
        let e = t.rows(1..351, 64).err().expect("refused");
        assert!(
            e.to_string()
                .contains("offsets 291..301 are in both log 's' and log 's-v2'"),
            "{e}"
        );
        std::fs::write(&version, text).unwrap();
        // the old log's hint names a metadata file that is not there: the reads that meet its
        // offsets are refused naming it, the live log's alone are not
        let old_hint = home.join("published/s/metadata/version-hint.text");
        let kept_hint = std::fs::read(&old_hint).unwrap();
        std::fs::write(&old_hint, "00099-gone\n").unwrap();
        let t = PublishedTable::open(&hint, None, &S3Options::default()).expect("open");
        let e = t.catch_up_range(Some(1)).expect_err("unreadable");
        assert!(
            matches!(&e, ReadError::Seam { defect, .. } if matches!(defect.as_ref(), SeamDefect::TableUnreadable { offsets, .. } if *offsets == (1..301))),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("sealed log 's' (offsets 1..301): its published table")
                && e.to_string().contains("00099-gone"),
            "{e}"
        );
        assert_eq!(
            t.catch_up_range(Some(301)).expect("the live log alone"),
            301..351
        );
        assert!(t.rows(301..351, 64).is_ok());
        std::fs::write(&old_hint, kept_hint).unwrap();
        // the old log's table gone: refused naming it
        std::fs::remove_file(home.join("published/s/metadata/version-hint.text")).unwrap();
        let t = PublishedTable::open(&hint, None, &S3Options::default()).expect("open");
        let e = t.catch_up_range(None).expect_err("no table");
        assert!(
            matches!(&e, ReadError::Seam { defect, .. } if matches!(defect.as_ref(), SeamDefect::TableMissing { offsets, .. } if *offsets == (1..301))),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("sealed log 's' (offsets 1..301) has no published table"),
            "{e}"
        );
    }
}
