//! An ingest body → the batch's encoded rows, or why not.
//!
//! In: the body's bytes, its [`Format`], the stream's codec and limits. Out: every row's
//! canonical bytes back to back with their ends, ready for one
//! [`Append`](crate::commit::writer::Append) — or the first [`BodyFault`]. Pure (no I/O); runs on an
//! ingest worker thread, never on a shard.
//!
//! - **Arrow IPC stream**: a schema message then record batches, read with arrow-ipc (which
//!   checks offsets and UTF-8; zstd-compressed buffers are taken), each batch checked and
//!   encoded by [`encode_batch`]; row indexes count across the body's batches.
//! - **JSON lines**: one row per line (blank lines skipped), each parsed by the publish path's
//!   strict parser and checked and encoded by `RowCodec::encode_row`, exactly as a JSON publish
//!   of that row; a line longer than the stream's `max_message_bytes` is refused as a publish
//!   frame that long would be.

use std::fmt;
use std::io::Cursor;

use arrow_ipc::reader::StreamReader;
use corecast_storage::json;
use corecast_storage::schema::{encode_batch, ColumnarFault, RowCodec};

/// `Content-Type` of an Arrow IPC stream body.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// `Content-Type` of a JSON lines body.
pub const JSON_LINES: &str = "application/x-ndjson";

/// How a body is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Arrow IPC streaming format ([`ARROW_STREAM`]).
    ArrowStream,
    /// Newline-delimited JSON rows ([`JSON_LINES`]).
    JsonLines,
}

impl Format {
    /// The format a `Content-Type` value names (parameters and case ignored), if one.
    pub fn from_content_type(value: &str) -> Option<Format> {
        let media = value.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case(ARROW_STREAM) {
            Some(Format::ArrowStream)
        } else if media.eq_ignore_ascii_case(JSON_LINES) {
            Some(Format::JsonLines)
        } else {
            None
        }
    }
}

/// A batch's rows, encoded.
#[derive(Debug, Default)]
pub struct Encoded {
    /// The rows' canonical bytes back to back.
    pub rows: Vec<u8>,
    /// Row `i` ends at `ends[i]` in `rows`.
    pub ends: Vec<u32>,
}

/// Why a body is refused. Nothing of it is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFault {
    /// The bytes are not an Arrow IPC stream (arrow-ipc's reason).
    NotArrow(String),
    /// The body holds no row.
    Empty,
    /// More rows than `max_batch_rows` (counted up to the first batch that passes it).
    TooManyRows {
        /// Rows seen when the limit was passed.
        rows: usize,
        /// `max_batch_rows`.
        limit: usize,
    },
    /// The encoded rows pass 4 GiB, the most one commit's rows may hold.
    TooLarge {
        /// Encoded bytes when the limit was passed.
        bytes: usize,
    },
    /// A JSON line is not JSON.
    NotJson {
        /// The row's index in the body (0-based, blank lines not counted).
        row: usize,
        /// The parser's message.
        detail: String,
    },
    /// A row a JSON publish of it would have refused (or one too large); its index counts
    /// rows across the whole body.
    Row(ColumnarFault),
}

impl fmt::Display for BodyFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyFault::NotArrow(e) => write!(f, "the body is not an Arrow IPC stream: {e}"),
            BodyFault::Empty => write!(f, "the body holds no rows; send at least one"),
            BodyFault::TooManyRows { rows, limit } => write!(
                f,
                "the body holds more than {limit} rows ({rows} so far), over the ingest limit max_batch_rows = {limit}; send smaller batches"
            ),
            BodyFault::TooLarge { bytes } => write!(
                f,
                "the body's rows encode to more than 4 GiB ({bytes} bytes so far); send smaller batches"
            ),
            BodyFault::NotJson { detail, .. } => write!(f, "the row is not JSON: {detail}"),
            BodyFault::Row(fault) => fault.fmt(f),
        }
    }
}

impl BodyFault {
    /// The row the fault is in, when it is one row's (0-based within the body).
    pub fn row(&self) -> Option<usize> {
        match self {
            BodyFault::NotJson { row, .. } => Some(*row),
            BodyFault::Row(fault) => fault.row(),
            _ => None,
        }
    }

    /// The column path the fault names, when it names one.
    pub fn column(&self) -> Option<&str> {
        match self {
            BodyFault::Row(fault) => fault.column(),
            _ => None,
        }
    }
}

/// The limits a body is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most rows (`max_batch_rows`).
    pub rows_max: usize,
    /// Largest row: the stream's `max_message_bytes` (a JSON line's length; an Arrow row's
    /// encoded length).
    pub row_bytes_max: usize,
}

/// Decodes, checks and encodes every row of `body`.
///
/// # Errors
///
/// The first [`BodyFault`], in row order.
pub fn decode(
    format: Format,
    body: &[u8],
    codec: &RowCodec,
    limits: Limits,
) -> Result<Encoded, BodyFault> {
    let (rows, ends) = match format {
        Format::ArrowStream => decode_arrow(body, codec, limits)?,
        Format::JsonLines => decode_lines(body, codec, limits)?,
    };
    if ends.is_empty() {
        return Err(BodyFault::Empty);
    }
    if rows.len() > u32::MAX as usize {
        return Err(BodyFault::TooLarge { bytes: rows.len() });
    }
    let ends = ends.into_iter().map(|e| e as u32).collect();
    Ok(Encoded { rows, ends })
}

fn decode_arrow(
    body: &[u8],
    codec: &RowCodec,
    limits: Limits,
) -> Result<(Vec<u8>, Vec<usize>), BodyFault> {
    let reader = StreamReader::try_new(Cursor::new(body), None)
        .map_err(|e| BodyFault::NotArrow(e.to_string()))?;
    // canonical JSON rows take about 2.5 times their Arrow IPC bytes (trades: 40 → 105)
    let mut rows = Vec::with_capacity(body.len() * 3);
    let mut ends = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| BodyFault::NotArrow(e.to_string()))?;
        let base = ends.len();
        let seen = base + batch.num_rows();
        if seen > limits.rows_max {
            return Err(BodyFault::TooManyRows {
                rows: seen,
                limit: limits.rows_max,
            });
        }
        encode_parallel(codec, &batch, limits.row_bytes_max, &mut rows, &mut ends)
            .map_err(|fault| BodyFault::Row(fault.shifted(base)))?;
        if rows.len() > u32::MAX as usize {
            return Err(BodyFault::TooLarge { bytes: rows.len() });
        }
    }
    Ok((rows, ends))
}

/// One part of a batch encoded: its rows and their ends, or its first fault.
type PartResult = Result<(Vec<u8>, Vec<usize>), ColumnarFault>;

/// Rows below which a batch is encoded on the calling thread alone.
const PARALLEL_ROWS_MIN: usize = 16_384;
/// Most threads one batch is encoded on.
const PARALLEL_THREADS_MAX: usize = 4;

/// [`encode_batch`] over row ranges of `batch` on up to [`PARALLEL_THREADS_MAX`] threads (one
/// per core the process may use), the parts appended in row order. The fault reported is the
/// first part's that has one, which is the first in row order: a part holds earlier rows than
/// every part after it.
fn encode_parallel(
    codec: &RowCodec,
    batch: &arrow_array::RecordBatch,
    row_bytes_max: usize,
    rows: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ColumnarFault> {
    let n = batch.num_rows();
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(PARALLEL_THREADS_MAX)
        .min(n / PARALLEL_ROWS_MIN)
        .max(1);
    if threads == 1 {
        return encode_batch(codec, batch, row_bytes_max, rows, ends);
    }
    let per = n.div_ceil(threads);
    let parts: Vec<(usize, PartResult)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = t * per;
                let len = per.min(n - start);
                let part = batch.slice(start, len);
                let handle = scope.spawn(move || {
                    let mut out = Vec::with_capacity(len * 128);
                    let mut part_ends = Vec::with_capacity(len);
                    encode_batch(codec, &part, row_bytes_max, &mut out, &mut part_ends)
                        .map(|()| (out, part_ends))
                });
                (start, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(start, h)| (start, h.join().expect("an encoding thread panicked")))
            .collect()
    });
    for (start, part) in parts {
        let (out, part_ends) = part.map_err(|fault| fault.shifted(start))?;
        let base = rows.len();
        rows.extend_from_slice(&out);
        ends.extend(part_ends.into_iter().map(|e| e + base));
    }
    Ok(())
}

fn decode_lines(
    body: &[u8],
    codec: &RowCodec,
    limits: Limits,
) -> Result<(Vec<u8>, Vec<usize>), BodyFault> {
    let mut rows = Vec::with_capacity(body.len() + body.len() / 8);
    let mut ends = Vec::new();
    for line in body.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let row = ends.len();
        if row >= limits.rows_max {
            return Err(BodyFault::TooManyRows {
                rows: row + 1,
                limit: limits.rows_max,
            });
        }
        if line.len() > limits.row_bytes_max {
            return Err(BodyFault::Row(ColumnarFault::RowTooLarge {
                row,
                bytes: line.len(),
                limit: limits.row_bytes_max,
            }));
        }
        let value = json::parse(line).map_err(|e| BodyFault::NotJson {
            row,
            detail: e.to_string(),
        })?;
        codec
            .encode_row(&value, &mut rows)
            .map_err(|rejected| BodyFault::Row(ColumnarFault::Row { row, rejected }))?;
        ends.push(rows.len());
    }
    Ok((rows, ends))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corecast_storage::schema::Schema;

    const SCHEMA: &str = r#"{"type":"object","properties":{"a":{"type":"integer","format":"int32"},"b":{"type":"number"}},"required":["a","b"]}"#;

    fn limits() -> Limits {
        Limits {
            rows_max: 3,
            row_bytes_max: 64,
        }
    }

    #[test]
    fn json_lines_go_through_the_publish_codec() {
        let codec = RowCodec::Schema(Schema::compile(SCHEMA).expect("schema"));
        let e = decode(
            Format::JsonLines,
            b"{\"b\":1,\"a\":2}\n\n{\"a\":-1,\"b\":0.5}\r\n",
            &codec,
            limits(),
        )
        .expect("rows");
        assert_eq!(e.rows, br#"{"a":2,"b":1.0}{"a":-1,"b":0.5}"#);
        assert_eq!(e.ends, [15, 31]);
        let fault = decode(
            Format::JsonLines,
            b"{\"a\":1,\"b\":1}\n{\"a\":3000000000,\"b\":1}\n",
            &codec,
            limits(),
        )
        .expect_err("refused");
        assert_eq!(fault.row(), Some(1));
        assert_eq!(
            fault.to_string(),
            "column 'a' cannot hold 3000000000: it is declared int32 (-2147483648 to 2147483647)"
        );
        let fault = decode(
            Format::JsonLines,
            b"{\"a\":1,\"b\":1}\n{\n",
            &codec,
            limits(),
        )
        .expect_err("refused");
        assert_eq!(fault.row(), Some(1));
        assert!(
            fault.to_string().starts_with("the row is not JSON"),
            "{fault}"
        );
        let fault = decode(
            Format::JsonLines,
            "{\"a\":1,\"b\":1}\n".repeat(4).as_bytes(),
            &codec,
            limits(),
        )
        .expect_err("refused");
        assert_eq!(fault, BodyFault::TooManyRows { rows: 4, limit: 3 });
        assert_eq!(
            decode(Format::JsonLines, b"\n \n", &codec, limits()).expect_err("empty"),
            BodyFault::Empty
        );
    }

    #[test]
    fn a_large_batch_encodes_in_parts_to_the_same_bytes_and_the_first_fault() {
        use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
        use std::sync::Arc;
        let codec = RowCodec::Schema(Schema::compile(SCHEMA).expect("schema"));
        let rows = 50_000usize;
        let batch = |bad: Option<usize>| {
            let a: Vec<i64> = (0..rows as i64)
                .map(|i| {
                    if Some(i as usize) == bad {
                        1 << 40
                    } else {
                        i - 7
                    }
                })
                .collect();
            let b: Vec<f64> = (0..rows).map(|i| i as f64 / 8.0).collect();
            RecordBatch::try_from_iter(vec![
                ("a", Arc::new(Int64Array::from(a)) as ArrayRef),
                ("b", Arc::new(Float64Array::from(b)) as ArrayRef),
            ])
            .expect("batch")
        };
        let (mut seq, mut seq_ends) = (Vec::new(), Vec::new());
        encode_batch(&codec, &batch(None), 64, &mut seq, &mut seq_ends).expect("rows");
        let (mut par, mut par_ends) = (Vec::new(), Vec::new());
        encode_parallel(&codec, &batch(None), 64, &mut par, &mut par_ends).expect("rows");
        assert_eq!(par, seq);
        assert_eq!(par_ends, seq_ends);
        assert_eq!(par_ends.len(), rows);
        let fault = encode_parallel(
            &codec,
            &batch(Some(41_234)),
            64,
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .expect_err("refused");
        assert_eq!(fault.row(), Some(41_234));
        assert_eq!(
            fault.to_string(),
            "column 'a' cannot hold 1099511627776: it is declared int32 (-2147483648 to 2147483647)"
        );
    }

    #[test]
    fn garbage_is_not_arrow() {
        let codec = RowCodec::Schemaless;
        let fault = decode(Format::ArrowStream, b"not arrow at all", &codec, limits())
            .expect_err("refused");
        assert!(matches!(fault, BodyFault::NotArrow(_)), "{fault:?}");
        assert!(fault
            .to_string()
            .starts_with("the body is not an Arrow IPC stream: "));
    }

    #[test]
    fn content_types() {
        assert_eq!(
            Format::from_content_type("application/vnd.apache.arrow.stream"),
            Some(Format::ArrowStream)
        );
        assert_eq!(
            Format::from_content_type("Application/X-NDJSON; charset=utf-8"),
            Some(Format::JsonLines)
        );
        assert_eq!(Format::from_content_type("application/json"), None);
    }
}
