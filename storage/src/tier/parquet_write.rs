//! Sealing: committed rows → one Parquet segment file.
//!
//! In: the stream's [`RowCodec`], rows `(offset, ts_us, canonical bytes)` in strictly increasing
//! offset order (as the hot log holds them), and a `Write + Send` destination. Out: the file and
//! its [`SegmentStats`]. Runs on the sealer's background thread; memory is bounded by one row
//! group of encoded pages plus one batch of Arrow arrays ([`SealOptions::batch_rows`] rows).

use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{ParquetMetaData, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;

use super::row_decode::{decode_struct, ColumnBuilder, Cursor, Scratch};
use super::segment_schema::segment_schema;
use super::TierError;
use crate::schema::{ColumnType, RowCodec, Schema, LITELINK_OFFSET, STREAMCAST_TS};

/// How segments are written.
#[derive(Debug, Clone)]
pub struct SealOptions {
    /// The most rows in one row group (PUBLISHED.md and issue 11: 65,536).
    pub max_row_group_rows: usize,
    /// Rows decoded into Arrow arrays before they are handed to the Parquet writer.
    pub batch_rows: usize,
    /// ZSTD level (1 is fast and still compresses market data well).
    pub zstd_level: i32,
}

impl Default for SealOptions {
    fn default() -> SealOptions {
        SealOptions {
            max_row_group_rows: 65_536,
            batch_rows: 8_192,
            zstd_level: 1,
        }
    }
}

/// What a sealed file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentStats {
    /// Rows in the file.
    pub rows: u64,
    /// The first and last `litelink_offset` (`None` for an empty file).
    pub offsets: Option<(u64, u64)>,
    /// The smallest and largest `streamcast_ts` (`None` for an empty file).
    pub ts: Option<(i64, i64)>,
    /// The file's size in bytes.
    pub bytes: u64,
    /// Row groups written.
    pub row_groups: usize,
    /// Min/max of each top-level scalar declared column, from the Parquet chunk statistics
    /// (strings and binary only where the statistics are exact, i.e. not truncated).
    pub columns: Vec<ColumnStats>,
}

/// Min, max and null count of one top-level scalar column over the whole file.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStats {
    /// The column name.
    pub name: String,
    /// The smallest non-null value, if any.
    pub min: Option<StatValue>,
    /// The largest non-null value, if any.
    pub max: Option<StatValue>,
    /// How many rows hold null.
    pub nulls: u64,
}

/// A statistics value.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub enum StatValue {
    /// boolean
    Boolean(bool),
    /// int32 or int64
    Int(i64),
    /// float32 (widened exactly) or float64
    Float(f64),
    /// utf8
    Text(String),
    /// binary or fixed_size_binary
    Bytes(Vec<u8>),
}

/// Writes one segment file, row by row. Push rows with [`SegmentWriter::push`], then
/// [`SegmentWriter::finish`].
pub struct SegmentWriter<W: Write + Send> {
    writer: ArrowWriter<W>,
    schema: SchemaRef,
    decoder: Decoder,
    offsets: Int64Builder,
    ts: Int64Builder,
    pending: usize,
    batch_rows: usize,
    scratch: Scratch,
    rows: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
    ts_range: Option<(i64, i64)>,
}

/// Row bytes → column builders: the declared columns, or the schema-less `row` text.
enum Decoder {
    Schema {
        schema: Schema,
        builders: Vec<ColumnBuilder>,
    },
    Schemaless(StringBuilder),
}

impl<W: Write + Send> SegmentWriter<W> {
    /// Starts a segment for a stream with `codec`, written to `out`.
    ///
    /// # Errors
    ///
    /// [`TierError::Parquet`] if the Parquet writer cannot start (writing the magic bytes).
    pub fn new(codec: &RowCodec, out: W, options: &SealOptions) -> Result<Self, TierError> {
        let schema = segment_schema(codec);
        let batch_rows = options
            .batch_rows
            .clamp(1, options.max_row_group_rows.max(1));
        let decoder = match codec {
            RowCodec::Schema(s) => Decoder::Schema {
                builders: s
                    .columns()
                    .iter()
                    .zip(schema.fields().iter().skip(1))
                    .map(|(c, f)| ColumnBuilder::new(c.ty(), f.data_type(), batch_rows))
                    .collect(),
                schema: s.clone(),
            },
            RowCodec::Schemaless => {
                Decoder::Schemaless(StringBuilder::with_capacity(batch_rows, batch_rows * 128))
            }
        };
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties(options)?))?;
        Ok(SegmentWriter {
            writer,
            schema,
            decoder,
            offsets: Int64Builder::with_capacity(batch_rows),
            ts: Int64Builder::with_capacity(batch_rows),
            pending: 0,
            batch_rows,
            scratch: Scratch::default(),
            rows: 0,
            first_offset: None,
            last_offset: None,
            ts_range: None,
        })
    }

    /// Appends one committed row.
    ///
    /// # Errors
    ///
    /// [`TierError::OutOfOrder`] if `offset` does not follow the previous row's,
    /// [`TierError::OffsetTooLarge`] above `i64::MAX`, [`TierError::BadRow`] if `row` is not the
    /// canonical encoding of a row of the schema (the segment is then unusable: drop it), or a
    /// Parquet error when a full batch is written.
    pub fn push(&mut self, offset: u64, ts_us: i64, row: &[u8]) -> Result<(), TierError> {
        if let Some(previous) = self.last_offset {
            if offset <= previous {
                return Err(TierError::OutOfOrder { previous, offset });
            }
        }
        let offset_i64 = i64::try_from(offset).map_err(|_| TierError::OffsetTooLarge(offset))?;
        let bad = |f: super::row_decode::Fault| TierError::BadRow {
            offset,
            at: f.at,
            what: f.what,
        };
        match &mut self.decoder {
            Decoder::Schema { schema, builders } => {
                let mut cur = Cursor::new(row);
                decode_struct(schema.columns(), builders, &mut cur, &mut self.scratch)
                    .and_then(|()| cur.finish())
                    .map_err(bad)?;
            }
            Decoder::Schemaless(b) => {
                let text = std::str::from_utf8(row).map_err(|e| TierError::BadRow {
                    offset,
                    at: e.valid_up_to(),
                    what: "UTF-8 text",
                })?;
                if !(text.starts_with('{') && text.ends_with('}')) {
                    return Err(TierError::BadRow {
                        offset,
                        at: 0,
                        what: "a JSON object",
                    });
                }
                b.append_value(text);
            }
        }
        self.offsets.append_value(offset_i64);
        self.ts.append_value(ts_us);
        self.first_offset.get_or_insert(offset);
        self.last_offset = Some(offset);
        self.ts_range = Some(match self.ts_range {
            None => (ts_us, ts_us),
            Some((lo, hi)) => (lo.min(ts_us), hi.max(ts_us)),
        });
        self.rows += 1;
        self.pending += 1;
        if self.pending >= self.batch_rows {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn flush_batch(&mut self) -> Result<(), TierError> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        columns.push(Arc::new(self.offsets.finish()));
        match &mut self.decoder {
            Decoder::Schema { builders, .. } => {
                for b in builders.iter_mut() {
                    columns.push(b.finish()?);
                }
            }
            Decoder::Schemaless(b) => columns.push(Arc::new(b.finish())),
        }
        columns.push(Arc::new(self.ts.finish()));
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        self.pending = 0;
        Ok(())
    }

    /// Writes the last batch and the footer (flushed to the destination) and gives the file's
    /// stats. To keep the destination (to `fdatasync` a file, or to read a buffer), pass
    /// `&mut file` or `&mut vec` as `W`.
    ///
    /// # Errors
    ///
    /// A Parquet error (I/O included) writing the last row group or the footer.
    pub fn finish(mut self) -> Result<SegmentStats, TierError> {
        self.flush_batch()?;
        let metadata = self.writer.finish()?;
        let bytes = self.writer.bytes_written() as u64;
        let columns = match &self.decoder {
            Decoder::Schema { schema, .. } => column_stats(schema, &metadata),
            Decoder::Schemaless(_) => Vec::new(),
        };
        let stats = SegmentStats {
            rows: self.rows,
            offsets: self.first_offset.zip(self.last_offset),
            ts: self.ts_range,
            bytes,
            row_groups: metadata.num_row_groups(),
            columns,
        };
        Ok(stats)
    }
}

/// Writes `rows` as one segment to `out`: [`SegmentWriter`] in one call.
///
/// # Errors
///
/// As [`SegmentWriter::push`] and [`SegmentWriter::finish`].
pub fn write_segment<'r, W: Write + Send>(
    codec: &RowCodec,
    rows: impl IntoIterator<Item = (u64, i64, &'r [u8])>,
    out: W,
    options: &SealOptions,
) -> Result<SegmentStats, TierError> {
    let mut writer = SegmentWriter::new(codec, out, options)?;
    for (offset, ts, row) in rows {
        writer.push(offset, ts, row)?;
    }
    writer.finish()
}

fn properties(options: &SealOptions) -> Result<WriterProperties, TierError> {
    let offset = ColumnPath::from(LITELINK_OFFSET);
    let ts = ColumnPath::from(STREAMCAST_TS);
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(options.zstd_level)?))
        .set_max_row_group_row_count(Some(options.max_row_group_rows.max(1)))
        // Page statistics = chunk statistics + the column index; the offset index is always on.
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_sorting_columns(Some(vec![SortingColumn {
            column_idx: 0,
            descending: false,
            nulls_first: false,
        }]))
        // Offsets (and receipt stamps) only grow: a dictionary never pays, deltas are tiny.
        .set_column_dictionary_enabled(offset.clone(), false)
        .set_column_encoding(offset, Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(ts.clone(), false)
        .set_column_encoding(ts, Encoding::DELTA_BINARY_PACKED)
        .build())
}

/// Folds the row groups' chunk statistics of each top-level scalar column.
fn column_stats(schema: &Schema, metadata: &ParquetMetaData) -> Vec<ColumnStats> {
    let mut out = Vec::new();
    // Leaf 0 is litelink_offset; declared columns follow, nested ones spanning several leaves.
    let mut leaf = 1;
    for column in schema.columns() {
        let here = leaf;
        leaf += leaf_count(column.ty());
        if !column.ty().is_scalar() {
            continue;
        }
        let mut stats = ColumnStats {
            name: column.name().to_string(),
            min: None,
            max: None,
            nulls: 0,
        };
        for rg in metadata.row_groups() {
            let Some(s) = rg.column(here).statistics() else {
                continue;
            };
            stats.nulls += s.null_count_opt().unwrap_or(0);
            let (min, max) = stat_values(s, matches!(column.ty(), ColumnType::Utf8));
            fold(&mut stats.min, min, std::cmp::Ordering::Less);
            fold(&mut stats.max, max, std::cmp::Ordering::Greater);
        }
        out.push(stats);
    }
    out
}

fn fold(acc: &mut Option<StatValue>, v: Option<StatValue>, keep: std::cmp::Ordering) {
    if let Some(v) = v {
        let replace = match acc {
            None => true,
            Some(a) => v.partial_cmp(a) == Some(keep),
        };
        if replace {
            *acc = Some(v);
        }
    }
}

/// `text`: the column is utf8 (not binary).
pub(super) fn stat_values(s: &Statistics, text: bool) -> (Option<StatValue>, Option<StatValue>) {
    let exact = s.min_is_exact() && s.max_is_exact();
    match s {
        Statistics::Boolean(v) => (
            v.min_opt().map(|&b| StatValue::Boolean(b)),
            v.max_opt().map(|&b| StatValue::Boolean(b)),
        ),
        Statistics::Int32(v) => (
            v.min_opt().map(|&i| StatValue::Int(i.into())),
            v.max_opt().map(|&i| StatValue::Int(i.into())),
        ),
        Statistics::Int64(v) => (
            v.min_opt().map(|&i| StatValue::Int(i)),
            v.max_opt().map(|&i| StatValue::Int(i)),
        ),
        Statistics::Float(v) => (
            v.min_opt().map(|&f| StatValue::Float(f.into())),
            v.max_opt().map(|&f| StatValue::Float(f.into())),
        ),
        Statistics::Double(v) => (
            v.min_opt().map(|&f| StatValue::Float(f)),
            v.max_opt().map(|&f| StatValue::Float(f)),
        ),
        Statistics::ByteArray(v) if exact => {
            let text = |b: &[u8]| match std::str::from_utf8(b) {
                Ok(s) if text => StatValue::Text(s.to_string()),
                _ => StatValue::Bytes(b.to_vec()),
            };
            (
                v.min_opt().map(|b| text(b.data())),
                v.max_opt().map(|b| text(b.data())),
            )
        }
        Statistics::FixedLenByteArray(v) if exact => (
            v.min_opt().map(|b| StatValue::Bytes(b.data().to_vec())),
            v.max_opt().map(|b| StatValue::Bytes(b.data().to_vec())),
        ),
        _ => (None, None),
    }
}

/// Parquet leaf columns under a column of type `ty`.
pub(super) fn leaf_count(ty: &ColumnType) -> usize {
    match ty {
        ColumnType::Struct(fields) => fields.columns().iter().map(|c| leaf_count(c.ty())).sum(),
        ColumnType::List(item) => leaf_count(item),
        ColumnType::Map(value) => 1 + leaf_count(value),
        _ => 1,
    }
}
