//! Reading a published stream back: the stream metadata, its live log's Iceberg table, and the
//! rows of an offset range, byte-identical to what a live subscriber receives.
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
//!    `sealed_logs` (a list; this reader reads streams whose history is their live log only),
//!    `live_log.{name, published, start_offset, schema, system_schema}`;
//! 2. **the Iceberg table** at `<published>/<name>`: `metadata/version-hint.text` holds the
//!    stem of the current `<stem>.metadata.json` (no hint: nothing is published yet); the
//!    current snapshot's manifest list (Avro), its manifests (Avro), and of each live data file
//!    its path, size, record count and `litelink_offset` bounds (Iceberg's single-value
//!    serialization: 8 bytes little-endian; a file without them is measured from its own
//!    Parquet statistics);
//! 3. **rows**: each data file overlapping the range is fetched whole and read by
//!    [`SegmentReader`] with [`ColumnMatch::Mapped`] (columns by Parquet field id, or by the
//!    table's `schema.name-mapping.default`), re-encoded by the stream's [`RowCodec`] (built
//!    from `live_log.schema`) exactly as the validator encoded it.
//!
//! # Strictness
//!
//! The official client trusts the table (§5): it skips holes in the offsets as restore fences
//! and resumes after whatever the upper bounds say. This reader does not. A file whose record
//! count is not the size of its bounds, two files that overlap, or a hole between two files is
//! refused when the range asked for meets it ([`ReadError::Defect`]); while reading, every
//! offset of the range must arrive exactly once, in order, or the read fails
//! ([`ReadError::RowsMissing`]). A missing or damaged file is an error naming it, never rows
//! skipped. Nothing taken from a file is unwrapped.

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
    /// A valid layout this reader does not read (sealed logs, delete files, another file
    /// format, an Iceberg format version other than 2).
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
    #[error("'{stream}' asked to catch up from offset {start}, but its published tables ({table}) start at {floor}: the {} rows between are in neither the server nor the published tables; subscribe from the earliest offset to take what is left and accept the loss, or from offset {floor} to state that you know what is missing", floor.saturating_sub(*start))]
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

/// One log of the stream metadata (`live_log`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// The log's name: its table is `<published>/<name>`.
    pub name: String,
    /// The prefix holding the log's table (a URI with a scheme).
    pub published: String,
    /// The log's first offset.
    pub start_offset: u64,
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
    /// `live_log`.
    pub live_log: LogEntry,
}

/// One live data file of the table's current snapshot.
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

/// A stream's published history, opened: the metadata, the live data files and the extent.
#[derive(Debug, Clone)]
pub struct PublishedTable {
    metadata: StreamMetadata,
    table: String,
    table_metadata: Option<String>,
    files: Vec<DataFile>,
    defects: Vec<(Range<u64>, String)>,
    floor: Option<u64>,
    end: u64,
    codec: RowCodec,
    columns: Vec<MappedColumn>,
    fetcher: Fetcher,
}

impl PublishedTable {
    /// Resolves `uri` and reads the stream metadata and its live log's table (no data file is
    /// read unless a manifest entry lacks its offset bounds). With `stream_id`, the metadata
    /// must be that stream's.
    ///
    /// # Errors
    ///
    /// [`ReadError::NoMetadata`], [`ReadError::StreamIdMismatch`], [`ReadError::Missing`] for a
    /// file a hint, snapshot or manifest names that is not there, [`ReadError::Invalid`] for
    /// one that does not parse or lacks a field, [`ReadError::Unsupported`],
    /// [`ReadError::Store`].
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
        let codec = codec_of(&metadata)?;
        let log = &metadata.live_log;
        let table = format!("{}/{}", log.published.trim_end_matches('/'), log.name);
        let mut opened = PublishedTable {
            table: table.clone(),
            table_metadata: None,
            files: Vec::new(),
            defects: Vec::new(),
            floor: None,
            end: log.start_offset,
            codec,
            columns: Vec::new(),
            fetcher,
            metadata,
        };
        let hint = format!("{table}/metadata/{VERSION_HINT}");
        let Some(stem) = opened.fetcher.get(&hint)? else {
            // no table yet: nothing is published
            return Ok(opened);
        };
        let stem = file_name(&hint, &stem)?;
        let table_metadata = format!("{table}/metadata/{stem}.metadata.json");
        let bytes = opened
            .fetcher
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
        opened.codec = codec_in_table_order(&opened.metadata, &table_metadata, &iceberg)?;
        opened.columns = mapped_columns(&table_metadata, &iceberg, &opened.codec)?;
        opened.table_metadata = Some(table_metadata.clone());
        let Some(list) = current_manifest_list(&table_metadata, &iceberg)? else {
            return Ok(opened);
        };
        let offset_id = opened.columns[0].field_id;
        let mut files = Vec::new();
        for manifest in manifest_paths(&mut opened.fetcher, &list, &table_metadata)? {
            read_manifest(&mut opened.fetcher, &manifest, &list, offset_id, &mut files)?;
        }
        for file in files.iter_mut().filter(|f| f.offsets.0 > f.offsets.1) {
            // no bounds in the manifest (marked by an empty range): the file's own statistics
            file.offsets = offsets_from_footer(&mut opened.fetcher, file, &opened.columns[0])?;
        }
        files.sort_by_key(|f| f.offsets);
        opened.defects = defects(&files);
        if let (Some(first), Some(high)) = (files.first(), files.iter().map(|f| f.offsets.1).max())
        {
            opened.floor = Some(first.offsets.0.max(opened.metadata.live_log.start_offset));
            opened.end = high.saturating_add(1);
        }
        opened.files = files;
        Ok(opened)
    }

    /// The stream metadata.
    pub fn metadata(&self) -> &StreamMetadata {
        &self.metadata
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

    /// The codec rows are re-encoded with (from `live_log.schema`).
    pub fn codec(&self) -> &RowCodec {
        &self.codec
    }

    /// The first readable offset: the table's lowest, or `live_log.start_offset` if that is
    /// higher; `None` when nothing is published.
    pub fn floor(&self) -> Option<u64> {
        self.floor
    }

    /// One past the last published offset (`live_log.start_offset` when nothing is published).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// `[floor, end)`; empty (`end..end`) when nothing is published.
    pub fn extent(&self) -> Range<u64> {
        self.floor.unwrap_or(self.end)..self.end
    }

    /// The range a catch-up from `start` reads (`None`: from the earliest), with the official
    /// client's checks: the table must end above the start, and start at or below it.
    ///
    /// # Errors
    ///
    /// [`ReadError::NothingAbove`] or [`ReadError::GapBelow`].
    pub fn catch_up_range(&self, start: Option<u64>) -> Result<Range<u64>, ReadError> {
        let start = start.unwrap_or_else(|| self.floor.unwrap_or(self.end));
        if self.end <= start {
            return Err(ReadError::NothingAbove {
                stream: self.metadata.stream.clone(),
                table: self.table.clone(),
                start,
                end: self.end,
            });
        }
        match self.floor {
            Some(floor) if floor <= start => Ok(start..self.end),
            floor => Err(ReadError::GapBelow {
                stream: self.metadata.stream.clone(),
                table: self.table.clone(),
                start,
                floor: floor.unwrap_or(self.end),
            }),
        }
    }

    /// The rows with offsets in `range`, in offset order, in chunks of at most `chunk_rows`.
    ///
    /// # Errors
    ///
    /// [`ReadError::OutsideExtent`] if `range` is not inside [`PublishedTable::extent`],
    /// [`ReadError::Defect`] if the table has a hole, an overlap or a short file there.
    pub fn rows(&self, range: Range<u64>, chunk_rows: usize) -> Result<TableRows, ReadError> {
        let extent = self.extent();
        // an empty range reads nothing, wherever it is
        let range = if range.start < range.end {
            range
        } else {
            range.start..range.start
        };
        if !range.is_empty() && (range.start < extent.start || range.end > extent.end) {
            return Err(ReadError::OutsideExtent {
                table: self.table.clone(),
                extent,
                asked: range,
            });
        }
        if let Some((offsets, what)) = self
            .defects
            .iter()
            .find(|(r, _)| !range.is_empty() && r.start < range.end && range.start < r.end)
        {
            return Err(ReadError::Defect {
                table: self.table.clone(),
                offsets: offsets.clone(),
                asked: range,
                what: what.clone(),
            });
        }
        let files = self
            .files
            .iter()
            .filter(|f| !range.is_empty() && f.offsets.0 < range.end && range.start <= f.offsets.1)
            .cloned()
            .collect::<Vec<_>>();
        Ok(TableRows {
            files: files.into_iter(),
            reader: None,
            next: range.start,
            range,
            codec: self.codec.clone(),
            options: ReadOptions {
                chunk_rows: chunk_rows.max(1),
                columns: ColumnMatch::Mapped(self.columns.clone()),
                ..ReadOptions::default()
            },
            fetcher: self.fetcher.clone(),
        })
    }
}

/// The rows of one range of a [`PublishedTable`], file by file.
pub struct TableRows {
    files: std::vec::IntoIter<DataFile>,
    reader: Option<(DataFile, SegmentReader, u64)>,
    next: u64,
    range: Range<u64>,
    codec: RowCodec,
    options: ReadOptions,
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
            let Some(file) = self.files.next() else {
                if self.next < self.range.end {
                    return Err(ReadError::RowsMissing {
                        uri: self.range_label(),
                        expected: self.next,
                        found: "but no data file holds it".into(),
                    });
                }
                return Ok(None);
            };
            let bytes = fetch_data_file(&mut self.fetcher, &file)?;
            let read = self.next..self.range.end.min(file.offsets.1.saturating_add(1));
            let reader = SegmentReader::open(bytes, &self.codec, read.clone(), &self.options)
                .map_err(|source| ReadError::Segment {
                    uri: file.uri.clone(),
                    source: Box::new(source),
                })?;
            self.reader = Some((file, reader, read.end));
        }
    }

    fn range_label(&self) -> String {
        format!("offsets {}..{}", self.range.start, self.range.end)
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

fn json_u64(uri: &str, root: &Json, path: &str) -> Result<u64, ReadError> {
    json_field(uri, root, path)?
        .as_u64()
        .ok_or_else(|| ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("{path} is not a non-negative integer"),
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
    if !sealed.is_empty() {
        return Err(ReadError::Unsupported {
            uri: uri.to_string(),
            what: format!(
                "{} sealed log(s) (a migrated stream's earlier logs)",
                sealed.len()
            ),
        });
    }
    let name = json_str(uri, &doc, "live_log.name")?.to_string();
    if name.is_empty() || name.contains('/') {
        return Err(ReadError::Invalid {
            uri: uri.to_string(),
            what: format!("live_log.name {name:?} is not a log name"),
        });
    }
    let start_offset = json_u64(uri, &doc, "live_log.start_offset")?;
    json_field(uri, &doc, "live_log.schema")?;
    json_field(uri, &doc, "live_log.system_schema")?;
    // serde_json's map sorts keys; the column order is the declaration's, so the schema is
    // taken from the strict parser, which keeps it
    let ordered = crate::json::parse_unique(bytes).map_err(|e| ReadError::Invalid {
        uri: uri.to_string(),
        what: format!("not strict JSON: {e}"),
    })?;
    let schema_json = ordered
        .get("live_log")
        .and_then(|l| l.get("schema"))
        .map(|s| s.to_string())
        .unwrap_or_default();
    let published = match doc["live_log"].get("published") {
        Some(Json::String(p)) => p.clone(),
        Some(Json::Null) | None => {
            return Err(ReadError::Invalid {
                uri: uri.to_string(),
                what: format!(
                    "live_log.published is missing (streamcast_metadata {version}): the stream names no published location"
                ),
            })
        }
        Some(_) => {
            return Err(ReadError::Invalid {
                uri: uri.to_string(),
                what: "live_log.published is not a string".into(),
            })
        }
    };
    if !(published.starts_with("file:///") || published.starts_with("s3://")) {
        return Err(ReadError::Invalid {
            uri: uri.to_string(),
            what: format!(
                "live_log.published {published:?} is not a file:/// or s3:// URI (a published location needs a scheme)"
            ),
        });
    }
    Ok(StreamMetadata {
        uri: uri.to_string(),
        version,
        stream,
        stream_id,
        live_log: LogEntry {
            name,
            published,
            start_offset,
            schema_json,
        },
    })
}

/// The row codec of `live_log.schema`: a schema with properties, or schema-less for `{}`.
fn codec_of(metadata: &StreamMetadata) -> Result<RowCodec, ReadError> {
    let invalid = |what: String| ReadError::Invalid {
        uri: metadata.uri.clone(),
        what: format!("live_log.schema: {what}"),
    };
    let schema = crate::json::parse_unique(metadata.live_log.schema_json.as_bytes())
        .map_err(|e| invalid(e.to_string()))?;
    let schemaless = schema.is_null() || schema.as_object().is_some_and(|o| o.is_empty());
    if schemaless {
        return Ok(RowCodec::Schemaless);
    }
    Schema::compile_value(&schema)
        .map(RowCodec::Schema)
        .map_err(|e| invalid(e.to_string()))
}

/// The row codec of `live_log.schema` with its properties (at every depth) in the order of the
/// table schema's fields. The table's column order is the declaration order, which is the key
/// order of every canonical row; the official client also takes caught-up rows' key order from
/// the table (PUBLISHED.md §3.7), and a writer that stored the JSON Schema through a sorted map
/// loses it there. Properties the table lacks keep their place after the ones it has (and are
/// then refused by [`mapped_columns`]).
fn codec_in_table_order(
    metadata: &StreamMetadata,
    table_uri: &str,
    iceberg: &Json,
) -> Result<RowCodec, ReadError> {
    let declared =
        crate::json::parse_unique(metadata.live_log.schema_json.as_bytes()).map_err(|e| {
            ReadError::Invalid {
                uri: metadata.uri.clone(),
                what: format!("live_log.schema: {e}"),
            }
        })?;
    if declared.as_object().is_none_or(|o| o.is_empty()) {
        return codec_of(metadata);
    }
    let table = current_schema(table_uri, iceberg)?;
    let mut ordered = String::with_capacity(metadata.live_log.schema_json.len());
    write_ordered(&declared, Some(table), &mut ordered);
    let schema = crate::json::parse_unique(ordered.as_bytes()).map_err(|e| ReadError::Invalid {
        uri: metadata.uri.clone(),
        what: format!("live_log.schema: {e}"),
    })?;
    Schema::compile_value(&schema)
        .map(RowCodec::Schema)
        .map_err(|e| ReadError::Invalid {
            uri: metadata.uri.clone(),
            what: format!("live_log.schema: {e}"),
        })
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
        let m = parse_stream_metadata("u", good.as_bytes()).expect("minimal");
        assert_eq!((m.version, m.live_log.start_offset), (2, 1));
        assert_eq!(codec_of(&m).unwrap(), RowCodec::Schemaless);
        for (change, needle) in [
            (
                ("\"streamcast_metadata\":2", "\"streamcast_metadata\":99"),
                "99; this reader reads 1, 2, 3",
            ),
            (("\"stream_id\":\"id\",", ""), "no stream_id"),
            (("\"sealed_logs\":[]", "\"sealed_logs\":[{}]"), "sealed log"),
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
    }
}
