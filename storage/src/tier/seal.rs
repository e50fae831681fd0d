//! The sealing step and retention: hot-log rows → one recorded Parquet segment; expired
//! segments → dropped.
//!
//! In: a stream's [`SegmentIndex`], a reader of its hot log, its [`RowCodec`], and where to cut.
//! Out: the [`SegmentEntry`] recorded, or nothing to seal. Runs on a maintenance thread; memory
//! is bounded by the Parquet writer's one row group plus one scan chunk.
//!
//! The crash protocol, step by step (each step durable before the next): write
//! `segments/<first>.parquet.tmp`, `fsync` it, rename it to `<first>-<last>.parquet`, `fsync`
//! the directory, record it in the index with the new `sealed_end` (one SQLite transaction).
//! Only after that may the caller evict hot segments below `sealed_end`. A crash before the
//! record leaves a file the index does not know (swept at the next open) and every row in the
//! hot log; after it, the rows are in the segment and, until eviction, in the hot log too.

use std::fs::File;
use std::io::BufWriter;
use std::ops::ControlFlow;
use std::time::{SystemTime, UNIX_EPOCH};

use super::index::{segment_file_name, SegmentEntry, SegmentIndex, TMP_SUFFIX};
use super::parquet_write::{SealOptions, SegmentWriter};
use super::TierError;
use crate::log::segment::sync_dir;
use crate::log::BufferReader;
use crate::schema::RowCodec;

/// Rows read from the hot log per scan call while sealing.
const SCAN_ROWS: usize = 16_384;

/// Where a seal stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealCut {
    /// Seal nothing at or above this offset (the hot log's end when the seal was decided).
    pub until: u64,
    /// End the segment with the row whose encoded bytes make the segment's total reach this.
    pub target_bytes: u64,
}

/// Seals the oldest unsealed rows (from the index's `sealed_end`, below `cut.until`, up to
/// `cut.target_bytes` of encoded rows) into one segment file and records it. `Ok(None)`: no
/// row to seal. On any error nothing is recorded, the temporary file is removed, and the rows
/// stay in the hot log: the seal can simply be tried again.
///
/// # Errors
///
/// [`TierError::Io`] / [`TierError::Parquet`] writing or syncing the file (a full disk:
/// [`TierError::is_disk_full`]), [`TierError::Storage`] reading the hot log or recording,
/// [`TierError::Hole`] when the hot log no longer holds `sealed_end`, [`TierError::BadRow`] for
/// a row that is not canonical for the schema.
pub fn seal_next(
    index: &SegmentIndex,
    reader: &BufferReader,
    codec: &RowCodec,
    cut: SealCut,
    options: &SealOptions,
) -> Result<Option<SegmentEntry>, TierError> {
    let from = index.sealed_end()?;
    if from >= cut.until {
        return Ok(None);
    }
    let tmp = index.dir().join(format!("{from:020}{TMP_SUFFIX}"));
    let result = write_and_record(index, reader, codec, cut, options, from, &tmp);
    if result.as_ref().map_or(true, Option::is_none) {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_and_record(
    index: &SegmentIndex,
    reader: &BufferReader,
    codec: &RowCodec,
    cut: SealCut,
    options: &SealOptions,
    from: u64,
    tmp: &std::path::Path,
) -> Result<Option<SegmentEntry>, TierError> {
    let io = |op: &'static str| {
        move |source| TierError::Io {
            path: tmp.to_owned(),
            op,
            source,
        }
    };
    let file = File::create(tmp).map_err(io("creating the segment file"))?;
    let mut out = BufWriter::with_capacity(
        1 << 20,
        Crc32cWriter {
            inner: file,
            crc: 0,
        },
    );
    let mut writer = SegmentWriter::new(codec, &mut out, options)?;
    let mut next = from;
    let mut bytes = 0u64;
    let mut failed: Option<TierError> = None;
    'scan: while next < cut.until && bytes < cut.target_bytes {
        let before = next;
        reader.scan_with(next, cut.until, SCAN_ROWS, |offset, ts_us, row| {
            if offset != next {
                failed = Some(TierError::Hole {
                    expected: next,
                    found: offset,
                });
                return ControlFlow::Break(());
            }
            if let Err(e) = writer.push(offset, ts_us, row) {
                failed = Some(e);
                return ControlFlow::Break(());
            }
            next = offset + 1;
            bytes += row.len() as u64;
            if bytes >= cut.target_bytes {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        if let Some(e) = failed.take() {
            return Err(e);
        }
        if next == before {
            // the hot log holds nothing from `next` on below `until`
            break 'scan;
        }
    }
    if next == from {
        let found = reader.extent(from).floor;
        if found > from && found < cut.until {
            return Err(TierError::Hole {
                expected: from,
                found,
            });
        }
        return Ok(None);
    }
    let stats = writer.finish()?;
    let Crc32cWriter { inner: file, crc } = out
        .into_inner()
        .map_err(|e| io("writing the segment file")(e.into_error()))?;
    file.sync_all().map_err(io("syncing the segment file"))?;
    drop(file);
    let (first, last) = stats.offsets.expect("rows were pushed");
    debug_assert_eq!((first, last + 1), (from, next));
    let name = segment_file_name(first, last);
    let path = index.dir().join(&name);
    std::fs::rename(tmp, &path).map_err(io("renaming the segment file"))?;
    sync_dir(index.dir()).map_err(|source| TierError::Io {
        path: index.dir().to_owned(),
        op: "syncing the segments directory",
        source,
    })?;
    match index.record(&name, &stats, now_us(), crc) {
        Ok(entry) => Ok(Some(entry)),
        Err(e) => {
            // not recorded: the file must not outlive this attempt (the next one rewrites it)
            let _ = std::fs::remove_file(&path);
            Err(e.into())
        }
    }
}

/// Retention: drops, oldest first, every segment whose newest row (`max_ts`) is older than
/// `cutoff_us`, stopping at the first that is not; returns those dropped. Oldest first keeps
/// the sealed tier contiguous, and comparing the rows' own `streamcast_ts` (never file times)
/// means a clock stepped back cannot bring a dropped row back nor drop a newer one early.
///
/// # Errors
///
/// [`TierError::Storage`] from the index; what was dropped before the error stays dropped.
pub fn drop_expired(
    index: &SegmentIndex,
    entries: &[SegmentEntry],
    cutoff_us: i64,
) -> Result<Vec<SegmentEntry>, TierError> {
    let mut dropped = Vec::new();
    for entry in entries {
        if entry.max_ts >= cutoff_us {
            break;
        }
        index.drop_oldest(entry)?;
        dropped.push(entry.clone());
    }
    Ok(dropped)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Passes writes through to `inner`, computing the CRC32C of everything written.
struct Crc32cWriter<W> {
    inner: W,
    crc: u32,
}

impl<W: std::io::Write> std::io::Write for Crc32cWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
