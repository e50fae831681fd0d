//! Reading a segment back: an offset range → byte-identical rows, in bounded chunks.
//!
//! In: a segment file written by [`super::SegmentWriter`] (any [`ChunkReader`]: a `File`, or
//! `bytes::Bytes` in memory), the stream's [`RowCodec`] and an offset range. Out: [`RowChunk`]s of
//! at most [`ReadOptions::chunk_rows`] rows, in offset order, each row re-encoded to exactly the
//! bytes the validator produced. Runs on a replay worker's thread.
//!
//! Pruning: row groups whose `litelink_offset` chunk statistics miss the range are not read at
//! all; inside the others, the page index (the `litelink_offset` column index and offset index)
//! turns the pages that miss the range into a [`RowSelection`] skip, so their pages are neither
//! decompressed nor decoded in any column. What is left is filtered row by row.
//! [`ReadStats`] counts what was touched.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Fields};
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::statistics::Statistics;

use super::parquet_write::{leaf_count, stat_values, StatValue};
use super::row_encode::{write_struct, ColumnView};
use super::segment_schema::segment_schema;
use super::TierError;
use crate::schema::{ColumnType, RowCodec};

/// How a segment is read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The most rows in one [`RowChunk`] (and in one decoded Arrow batch).
    pub chunk_rows: usize,
    /// Row groups whose column statistics show that no row can satisfy every one of these
    /// (a `where=` filter: terms ANDed) are not read. Rows of the groups read are returned
    /// unfiltered: the caller filters them row by row. Used with [`ColumnMatch::Segment`] only.
    pub prune: Vec<ColumnPredicate>,
    /// How the file's columns are found.
    pub columns: ColumnMatch,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            chunk_rows: 8_192,
            prune: Vec::new(),
            columns: ColumnMatch::Segment,
        }
    }
}

/// How a reader finds the segment schema's columns in a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ColumnMatch {
    /// The file has exactly the segment schema (field ids, nullability and metadata included):
    /// a file corecast's sealer wrote.
    #[default]
    Segment,
    /// A data file of a published Iceberg table, written by any writer (corecast, the reference
    /// broker through pyarrow, a hand-written one). One entry per segment column, in segment
    /// order (`litelink_offset`, the declared columns or `row`, `streamcast_ts`): the column is
    /// the file's top-level column with that Parquet `field_id` or, in a file whose columns
    /// carry no field ids, the one named by the table's name mapping. Column order, extra
    /// columns, nullability and Arrow field metadata are free; each column's type must be the
    /// segment schema's (nested field names and types included), and a required column must
    /// hold no null.
    Mapped(Vec<MappedColumn>),
}

/// Where one segment column is in a published data file ([`ColumnMatch::Mapped`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedColumn {
    /// The table schema's field id of the column.
    pub field_id: i32,
    /// The names the table's `schema.name-mapping.default` gives that id (empty without a
    /// name mapping: a file without field ids then cannot be read).
    pub names: Vec<String>,
}

/// One term of a filter: the top-level column `column` equals one of `any_of`.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnPredicate {
    /// A top-level declared column.
    pub column: String,
    /// The values it may equal.
    pub any_of: Vec<PredicateValue>,
}

/// A value a filter term compares with, as `where=` parses it.
#[derive(Debug, Clone, PartialEq)]
pub enum PredicateValue {
    /// `null`: matches an absent or null value.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer literal (matches an integer column's equal value, or a float column's value
    /// equal to it as a double).
    Int(i128),
    /// A number with a fraction or exponent (matches equal doubles).
    Num(f64),
    /// A string (matches a string column's equal value).
    Str(String),
}

/// What a read touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Row groups in the file.
    pub row_groups_total: usize,
    /// Row groups whose statistics overlap the range and may hold rows the filter matches (the
    /// only ones read).
    pub row_groups_read: usize,
    /// Row groups inside the range skipped because their column statistics exclude the filter.
    pub row_groups_pruned: usize,
    /// `litelink_offset` pages in the row groups read.
    pub pages_total: usize,
    /// Of those, pages whose column-index min/max overlap the range (the rest are skipped).
    pub pages_read: usize,
    /// Rows decoded into Arrow (selected pages' rows).
    pub rows_decoded: u64,
    /// Rows returned (inside the range).
    pub rows_returned: u64,
}

/// A bounded run of consecutive rows: offsets, receipt stamps, and the canonical rows back to
/// back in one buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowChunk {
    /// Each row's offset, increasing.
    pub offsets: Vec<u64>,
    /// Each row's `streamcast_ts`.
    pub ts: Vec<i64>,
    /// End of each row in `bytes` (row `i` is `bytes[ends[i-1]..ends[i]]`).
    pub ends: Vec<usize>,
    /// The rows' canonical encodings, back to back.
    pub bytes: Vec<u8>,
}

impl RowChunk {
    /// Rows in the chunk.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether the chunk holds no row.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Row `i`: `(offset, ts_us, bytes)`.
    pub fn row(&self, i: usize) -> (u64, i64, &[u8]) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        (
            self.offsets[i],
            self.ts[i],
            &self.bytes[start..self.ends[i]],
        )
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, i64, &[u8])> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }
}

/// Reads one offset range of a segment.
pub struct SegmentReader {
    batches: ParquetRecordBatchReader,
    codec: RowCodec,
    range: Range<u64>,
    stats: ReadStats,
    done: bool,
    /// The last offset decoded, to check that they increase.
    last_offset: Option<i64>,
    /// For a mapped file: segment column `p` is column `order[p]` of the decoded batches, and
    /// must hold no null when `required[p]`.
    mapped: Option<Mapped>,
}

struct Mapped {
    order: Vec<usize>,
    required: Vec<bool>,
    names: Vec<String>,
}

impl SegmentReader {
    /// Opens `file` for the rows with offsets in `range`, for a stream with `codec`.
    ///
    /// # Errors
    ///
    /// [`TierError::Parquet`] if the file is not Parquet (or the library panics on it: that is
    /// caught and answered as an error), [`TierError::SchemaMismatch`] if its schema is not the
    /// segment schema of `codec` (see [`super::segment_schema`]).
    pub fn open<R: ChunkReader + 'static>(
        file: R,
        codec: &RowCodec,
        range: Range<u64>,
        options: &ReadOptions,
    ) -> Result<SegmentReader, TierError> {
        guarded("opening the file", || {
            Self::open_file(file, codec, range, options)
        })
    }

    fn open_file<R: ChunkReader + 'static>(
        file: R,
        codec: &RowCodec,
        range: Range<u64>,
        options: &ReadOptions,
    ) -> Result<SegmentReader, TierError> {
        let arrow_options =
            ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
        let mut builder =
            ParquetRecordBatchReaderBuilder::try_new_with_options(file, arrow_options)?;
        let expected = segment_schema(codec);
        let metadata = builder.metadata().clone();
        let (offset_leaf, mapped, excluded) = match &options.columns {
            ColumnMatch::Segment => {
                if builder.schema().fields() != expected.fields() {
                    return Err(TierError::SchemaMismatch(format!(
                        "the file's columns are {:?}, the stream's segments have {:?}",
                        builder.schema().fields(),
                        expected.fields()
                    )));
                }
                let excluded = excluded_row_groups(codec, &metadata, &options.prune);
                (0, None, excluded)
            }
            ColumnMatch::Mapped(columns) => {
                let (roots, offset_leaf, mapped) = map_columns(&builder, &expected, columns)?;
                let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
                builder = builder.with_projection(mask);
                let excluded = vec![false; metadata.num_row_groups()];
                (offset_leaf, Some(mapped), excluded)
            }
        };
        let (row_groups, selection, stats) = plan(&metadata, &range, &excluded, offset_leaf);
        let batches = builder
            .with_batch_size(options.chunk_rows.max(1))
            .with_row_groups(row_groups)
            .with_row_selection(selection)
            .build()?;
        Ok(SegmentReader {
            batches,
            codec: codec.clone(),
            range,
            stats,
            done: false,
            last_offset: None,
            mapped,
        })
    }

    /// What the read has touched so far (row groups and pages are counted at open).
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// The next chunk of rows in the range, or `None` at the end.
    ///
    /// # Errors
    ///
    /// A Parquet error decoding a page, [`TierError::SchemaMismatch`] for data of the wrong
    /// shape, [`TierError::OutOfOrder`] or [`TierError::OffsetTooLarge`] for offsets that do not
    /// strictly increase or are negative (a damaged file), or [`TierError::BadRow`] for a schema-less row whose stored text is not the
    /// canonical encoding of a JSON object (a damaged file).
    pub fn next_chunk(&mut self) -> Result<Option<RowChunk>, TierError> {
        while !self.done {
            let batches = &mut self.batches;
            let next = guarded("decoding a page", || Ok(batches.next().transpose()?));
            if next.is_err() {
                // a panic leaves the decoder in no known state: nothing more is read
                self.done = true;
            }
            let Some(batch) = next? else {
                self.done = true;
                break;
            };
            self.stats.rows_decoded += batch.num_rows() as u64;
            let chunk = match &self.mapped {
                None => self.encode(batch.columns())?,
                Some(mapped) => {
                    let columns = mapped.reorder(&batch)?;
                    self.encode(&columns)?
                }
            };
            if !chunk.is_empty() {
                self.stats.rows_returned += chunk.len() as u64;
                return Ok(Some(chunk));
            }
        }
        Ok(None)
    }

    fn encode(&mut self, arrays: &[ArrayRef]) -> Result<RowChunk, TierError> {
        let n = arrays.len();
        let offsets = arrays[0]
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| TierError::SchemaMismatch("litelink_offset is not int64".into()))?;
        let ts = arrays[n - 1]
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| TierError::SchemaMismatch("streamcast_ts is not int64".into()))?;
        let mut chunk = RowChunk::default();
        // Rows are sorted by offset: find the slice of the batch inside the range. A damaged
        // file may break that (found by `fuzz/run.sh parquet_segment`: the reader returned rows
        // out of order and outside the range), so it is checked, with the batches before.
        let values = offsets.values();
        for &o in values.iter() {
            if o < 0 {
                return Err(TierError::OffsetTooLarge(o as u64));
            }
            if let Some(previous) = self.last_offset {
                if o <= previous {
                    return Err(TierError::OutOfOrder {
                        previous: previous as u64,
                        offset: o as u64,
                    });
                }
            }
            self.last_offset = Some(o);
        }
        let lo = values.partition_point(|&o| (o as u64) < self.range.start);
        let hi = values.partition_point(|&o| (o as u64) < self.range.end);
        if lo >= hi {
            return Ok(chunk);
        }
        chunk.offsets.reserve(hi - lo);
        chunk.ts.reserve(hi - lo);
        chunk.ends.reserve(hi - lo);
        match &self.codec {
            RowCodec::Schema(schema) => {
                let columns = schema.columns();
                let views = columns
                    .iter()
                    .zip(&arrays[1..n - 1])
                    .map(|(c, a)| ColumnView::new(c.ty(), a))
                    .collect::<Result<Vec<_>, _>>()?;
                chunk.bytes.reserve((hi - lo) * 64);
                for i in lo..hi {
                    write_struct(columns, &views, i, &mut chunk.bytes);
                    chunk.ends.push(chunk.bytes.len());
                }
            }
            RowCodec::Schemaless => {
                let rows = arrays[1]
                    .as_string_opt::<i32>()
                    .ok_or_else(|| TierError::SchemaMismatch("row is not utf8".into()))?;
                // The stored text is the only part of a row taken from the file verbatim: it is
                // re-encoded as the validator would and must come out the same, so a damaged
                // file (Parquet pages carry no checksum) is an error, never a frame of garbage.
                for i in lo..hi {
                    let stored = rows.value(i).as_bytes();
                    let start = chunk.bytes.len();
                    let canonical = match crate::json::parse(stored) {
                        Ok(value) => RowCodec::Schemaless
                            .encode_row(&value, &mut chunk.bytes)
                            .is_ok(),
                        Err(_) => false,
                    };
                    if !canonical || chunk.bytes[start..] != *stored {
                        let written = &chunk.bytes[start..];
                        let at = written
                            .iter()
                            .zip(stored)
                            .take_while(|(a, b)| a == b)
                            .count();
                        return Err(TierError::BadRow {
                            offset: values[i] as u64,
                            at,
                            what: "the canonical encoding of a JSON object",
                        });
                    }
                    chunk.ends.push(chunk.bytes.len());
                }
            }
        }
        chunk
            .offsets
            .extend(values[lo..hi].iter().map(|&o| o as u64));
        chunk.ts.extend_from_slice(&ts.values()[lo..hi]);
        Ok(chunk)
    }
}

impl Mapped {
    /// The batch's columns in segment order, after checking that no required column holds a
    /// null (Parquet lets an optional column stand for a required Iceberg field).
    fn reorder(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, TierError> {
        let mut columns = Vec::with_capacity(self.order.len());
        for (p, &i) in self.order.iter().enumerate() {
            let column = batch.column(i);
            if self.required[p] && column.null_count() > 0 {
                return Err(TierError::SchemaMismatch(format!(
                    "column {} holds a null, but it is required",
                    self.names[p]
                )));
            }
            columns.push(column.clone());
        }
        Ok(columns)
    }
}

/// Finds each segment column of `expected` in the file (see [`ColumnMatch::Mapped`]): the root
/// columns to project (in file order), the leaf index of `litelink_offset`, and how the
/// projected batches map back to segment order.
fn map_columns<T>(
    builder: &parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    expected: &arrow_schema::Schema,
    columns: &[MappedColumn],
) -> Result<(Vec<usize>, usize, Mapped), TierError> {
    if columns.len() != expected.fields().len() {
        return Err(TierError::SchemaMismatch(format!(
            "{} mapped columns for a segment schema of {}",
            columns.len(),
            expected.fields().len()
        )));
    }
    let descriptor = builder.parquet_schema();
    let roots = descriptor.root_schema().get_fields();
    let file_fields = builder.schema().fields();
    let any_id = roots.iter().any(|f| f.get_basic_info().has_id());
    let mut found = Vec::with_capacity(columns.len());
    for (field, column) in expected.fields().iter().zip(columns) {
        let index = if any_id {
            roots.iter().position(|f| {
                let info = f.get_basic_info();
                info.has_id() && info.id() == column.field_id
            })
        } else {
            roots
                .iter()
                .position(|f| column.names.iter().any(|n| n == f.name()))
        };
        let Some(index) = index else {
            return Err(TierError::SchemaMismatch(if any_id {
                format!(
                    "no column has field id {} (column {})",
                    column.field_id,
                    field.name()
                )
            } else if column.names.is_empty() {
                format!(
                    "the file's columns carry no field ids and the table has no name mapping for field {} (column {})",
                    column.field_id,
                    field.name()
                )
            } else {
                format!(
                    "no column named {:?} (field {}: column {}), and the file's columns carry no field ids",
                    column.names,
                    column.field_id,
                    field.name()
                )
            }));
        };
        if found.contains(&index) {
            return Err(TierError::SchemaMismatch(format!(
                "column {} of the file stands for two fields",
                roots[index].name()
            )));
        }
        let Some(file_field) = file_fields.get(index) else {
            return Err(TierError::SchemaMismatch(format!(
                "column {} is not in the file's Arrow schema",
                roots[index].name()
            )));
        };
        if !same_shape(file_field.data_type(), field.data_type()) {
            return Err(TierError::SchemaMismatch(format!(
                "column {} (field {}) is {}, the stream's segments have {}",
                field.name(),
                column.field_id,
                file_field.data_type(),
                field.data_type()
            )));
        }
        found.push(index);
    }
    let mut projected = found.clone();
    projected.sort_unstable();
    let order = found
        .iter()
        .map(|i| projected.partition_point(|p| p < i))
        .collect();
    let offset_root = found[0];
    let offset_leaf = (0..descriptor.num_columns())
        .find(|&leaf| descriptor.get_column_root_idx(leaf) == offset_root)
        .ok_or_else(|| TierError::SchemaMismatch("litelink_offset has no leaf column".into()))?;
    let mapped = Mapped {
        order,
        required: expected.fields().iter().map(|f| !f.is_nullable()).collect(),
        names: expected.fields().iter().map(|f| f.name().clone()).collect(),
    };
    Ok((projected, offset_leaf, mapped))
}

/// Whether two Arrow types have the same shape: equal, apart from nested fields' nullability
/// and metadata (field ids, encodings), which a foreign writer sets its own way.
fn same_shape(a: &DataType, b: &DataType) -> bool {
    let fields = |x: &Fields, y: &Fields| {
        x.len() == y.len()
            && x.iter()
                .zip(y.iter())
                .all(|(f, g)| f.name() == g.name() && same_shape(f.data_type(), g.data_type()))
    };
    match (a, b) {
        (DataType::Struct(x), DataType::Struct(y)) => fields(x, y),
        (DataType::List(x), DataType::List(y)) => same_shape(x.data_type(), y.data_type()),
        (DataType::Map(x, xs), DataType::Map(y, ys)) => {
            xs == ys && same_shape(x.data_type(), y.data_type())
        }
        _ => a == b,
    }
}

/// Runs a call into the Parquet library, answering a panic in it as an error. The library
/// panics on some malformed files instead of failing (found by `fuzz/run.sh parquet_segment`:
/// e.g. a page offset before its column chunk's start overflows a subtraction in
/// `SerializedPageReader`), and a damaged segment must fail its read, not the replay thread.
fn guarded<T>(what: &str, call: impl FnOnce() -> Result<T, TierError>) -> Result<T, TierError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(TierError::Parquet(ParquetError::General(format!(
                "the Parquet reader panicked {what} (a damaged file?): {message}"
            ))))
        }
    }
}

/// Chooses the row groups and, inside them, the rows (whole pages of `litelink_offset`) whose
/// statistics overlap `range`.
fn plan(
    metadata: &ParquetMetaData,
    range: &Range<u64>,
    excluded: &[bool],
    offset_leaf: usize,
) -> (Vec<usize>, RowSelection, ReadStats) {
    let mut stats = ReadStats {
        row_groups_total: metadata.num_row_groups(),
        ..ReadStats::default()
    };
    let overlaps = |min: i64, max: i64| (max as u64) >= range.start && (min as u64) < range.end;
    let mut row_groups = Vec::new();
    let mut selectors: Vec<RowSelector> = Vec::new();
    for (rg, meta) in metadata.row_groups().iter().enumerate() {
        let rows = usize::try_from(meta.num_rows()).unwrap_or(0);
        let keep = match meta.column(offset_leaf).statistics() {
            Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                (Some(&min), Some(&max)) => overlaps(min, max),
                _ => true,
            },
            _ => true,
        };
        if !keep || range.start >= range.end {
            continue;
        }
        if excluded.get(rg).copied().unwrap_or(false) {
            stats.row_groups_pruned += 1;
            continue;
        }
        row_groups.push(rg);
        stats.row_groups_read += 1;
        let page_index = metadata.page_index_for_row_group(rg);
        let pages = match (
            page_index.column_index(offset_leaf),
            page_index.offset_index(offset_leaf),
        ) {
            (Some(ColumnIndexMetaData::INT64(ci)), Some(oi)) => Some((ci, oi)),
            _ => None,
        };
        let Some((ci, oi)) = pages else {
            stats.pages_total += 1;
            stats.pages_read += 1;
            selectors.push(RowSelector::select(rows));
            continue;
        };
        let locations = oi.page_locations();
        stats.pages_total += locations.len();
        for (p, loc) in locations.iter().enumerate() {
            let first = usize::try_from(loc.first_row_index).unwrap_or(0);
            let end = locations
                .get(p + 1)
                .map_or(rows, |l| usize::try_from(l.first_row_index).unwrap_or(rows));
            let page_rows = end.saturating_sub(first);
            let keep = match (ci.min_value(p), ci.max_value(p)) {
                (Some(&min), Some(&max)) => overlaps(min, max),
                _ => true,
            };
            if keep {
                stats.pages_read += 1;
                selectors.push(RowSelector::select(page_rows));
            } else {
                selectors.push(RowSelector::skip(page_rows));
            }
        }
    }
    (row_groups, RowSelection::from(selectors), stats)
}

/// For each row group, whether its statistics prove that no row satisfies every predicate.
fn excluded_row_groups(
    codec: &RowCodec,
    metadata: &ParquetMetaData,
    prune: &[ColumnPredicate],
) -> Vec<bool> {
    let groups = metadata.num_row_groups();
    let RowCodec::Schema(schema) = codec else {
        return vec![false; groups];
    };
    if prune.is_empty() {
        return vec![false; groups];
    }
    // (leaf index, column type) of each top-level column; leaf 0 is litelink_offset
    let mut leaves = Vec::new();
    let mut leaf = 1;
    for column in schema.columns() {
        leaves.push((column.name(), leaf, column.ty()));
        leaf += leaf_count(column.ty());
    }
    let terms: Vec<(usize, &ColumnType, &ColumnPredicate)> = prune
        .iter()
        .filter_map(|p| {
            leaves
                .iter()
                .find(|(name, _, _)| *name == p.column)
                .map(|&(_, leaf, ty)| (leaf, ty, p))
        })
        .collect();
    metadata
        .row_groups()
        .iter()
        .map(|rg| {
            terms.iter().any(|&(leaf, ty, p)| {
                let Some(s) = rg.column(leaf).statistics() else {
                    return false;
                };
                !p.any_of.iter().any(|v| may_hold(ty, s, v))
            })
        })
        .collect()
}

/// Whether a row group with statistics `s` on a column of type `ty` may hold a value equal to
/// `v` as `where=` compares (false only when the statistics prove it cannot).
fn may_hold(ty: &ColumnType, s: &Statistics, v: &PredicateValue) -> bool {
    if let PredicateValue::Null = v {
        return s.null_count_opt().is_none_or(|n| n > 0);
    }
    let (min, max) = stat_values(s, matches!(ty, ColumnType::Utf8));
    let (Some(min), Some(max)) = (min, max) else {
        // no min/max (no statistics, inexact ones, or only nulls): cannot tell
        return true;
    };
    match (ty, v, min, max) {
        (
            ColumnType::Boolean,
            PredicateValue::Bool(b),
            StatValue::Boolean(lo),
            StatValue::Boolean(hi),
        ) => lo <= *b && *b <= hi,
        (ColumnType::Boolean, _, _, _) => false,
        (
            ColumnType::Int32 | ColumnType::Int64,
            PredicateValue::Int(i),
            StatValue::Int(lo),
            StatValue::Int(hi),
        ) => i128::from(lo) <= *i && *i <= i128::from(hi),
        // an integer column compared with a double: the filter converts the integer to f64;
        // rounding makes exact bounds unreliable, so this never prunes
        (ColumnType::Int32 | ColumnType::Int64, PredicateValue::Num(_), _, _) => true,
        (ColumnType::Int32 | ColumnType::Int64, _, _, _) => false,
        (
            ColumnType::Float64,
            PredicateValue::Int(_) | PredicateValue::Num(_),
            StatValue::Float(lo),
            StatValue::Float(hi),
        ) => {
            let x = as_f64(v);
            lo <= x && x <= hi
        }
        (
            ColumnType::Float32,
            PredicateValue::Int(_) | PredicateValue::Num(_),
            StatValue::Float(lo),
            StatValue::Float(hi),
        ) => {
            // rows hold float32 values written in their shortest form and read back as doubles:
            // compare in float32, one step of slack each way
            let x = as_f64(v) as f32;
            x.next_up() >= lo as f32 && x.next_down() <= hi as f32
        }
        (
            ColumnType::Float32 | ColumnType::Float64,
            PredicateValue::Bool(_) | PredicateValue::Str(_),
            _,
            _,
        ) => false,
        (ColumnType::Utf8, PredicateValue::Str(x), StatValue::Text(lo), StatValue::Text(hi)) => {
            lo.as_str() <= x.as_str() && x.as_str() <= hi.as_str()
        }
        (
            ColumnType::Utf8,
            PredicateValue::Bool(_) | PredicateValue::Int(_) | PredicateValue::Num(_),
            _,
            _,
        ) => false,
        _ => true,
    }
}

fn as_f64(v: &PredicateValue) -> f64 {
    match v {
        PredicateValue::Int(i) => *i as f64,
        PredicateValue::Num(x) => *x,
        _ => f64::NAN,
    }
}
