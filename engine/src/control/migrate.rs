//! A schema migration's storage work, on the control thread, with the stream's log closed (the
//! stream stopped or never opened): the live log is sealed whole into Parquet, published whole,
//! recorded as a sealed log, and the next log starts at its end offset (the seam)
//! ([`crate::tier::generations`]).
//!
//! Every step can be run again after a crash and picks up where the last run stopped: sealing
//! and publishing carry on from `sealed_end` and the table's end, the next log is made whole or
//! not at all ([`create_successor`]), and writing `logs.json` is the commit point. A run that
//! finds the live log already on the new schema has nothing to do.

use std::path::Path;

use corecast_storage::log::meta::MetaDb;
use corecast_storage::log::{create_successor, Buffer, LogOptions};
use corecast_storage::published::layout::system_schema;
use corecast_storage::published::{Publisher, SegmentToPublish, StreamInfo};
use corecast_storage::schema::{RowCodec, Schema};
use corecast_storage::tier::{seal_next, SealCut, SealOptions, SegmentIndex};
use serde_json::{json, Value};

use crate::config::{Published, StreamConfig};
use crate::tier::generations::{self, LiveLog, SealedLog};

/// The environment variable that aborts the process at a named step of the next migration
/// (kill tests, docs/RELIABILITY.md): `sealed`, `published`, `successor` or `committed`.
pub const FAULT_ENV: &str = "CORECAST_FAULT_MIGRATE";

/// Aborts the process here if [`FAULT_ENV`] names `point` (tests only).
pub fn fault(point: &str) {
    if std::env::var(FAULT_ENV).is_ok_and(|v| v == point) {
        tracing::warn!("{FAULT_ENV}={point}: aborting the process mid-migration");
        std::process::abort();
    }
}

/// Segments one publish commit takes during a migration.
const SEGMENTS_PER_COMMIT: usize = 16;

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migrated {
    /// The live log was already on the new schema (a run that finished before a crash).
    Already,
    /// The stream keeps no log (`durable: false`): nothing to seal, the new schema applies to
    /// rows from now on.
    NoLog,
    /// The old log ended at `seam`; the next one, `log`, starts there.
    Sealed {
        /// The new live log's name.
        log: String,
        /// Its first offset.
        seam: u64,
        /// Rows the sealed log's table holds.
        records: u64,
    },
}

/// Moves stream `cfg` (its new declaration: the new schema) onto a new log. The error names
/// what failed (it may name paths: the control thread logs it and reports a message without).
pub fn migrate_log(
    cfg: &StreamConfig,
    data_dir: &Path,
    s3: &corecast_storage::published::S3Options,
) -> Result<Migrated, String> {
    if !cfg.durable {
        return Ok(Migrated::NoLog);
    }
    let name = &cfg.name;
    let home = data_dir.join(name);
    let logs = generations::load(&home, name)?;
    let dir = logs.live_dir(&home);
    let new_schema = match &cfg.schema_json {
        Some(text) => Some(
            Schema::compile(text)
                .map_err(|e| format!("the new schema: {e}"))?
                .published(),
        ),
        None => None,
    };
    let (_, meta) = MetaDb::open(&dir, None).map_err(|e| e.to_string())?;
    if meta.schema_json == new_schema {
        write_metadata(
            cfg,
            &home,
            &logs,
            s3,
            meta.floor.max(logs.live.start_offset),
        )?;
        return Ok(Migrated::Already);
    }
    // the log is closed (the writer let it go): this opens it for sealing, holding its lock
    let buffer = Buffer::open_with(
        &dir,
        None,
        LogOptions {
            segment_bytes: cfg.segment_bytes,
        },
    )
    .map_err(|e| e.to_string())?;
    let seam = buffer.end_offset();
    let old_schema = buffer.schema_json().map(str::to_owned);
    let codec = match &old_schema {
        Some(text) => RowCodec::Schema(
            Schema::compile(text).map_err(|e| format!("the old log's schema: {e}"))?,
        ),
        None => RowCodec::Schemaless,
    };
    let index = SegmentIndex::open(&dir).map_err(|e| e.to_string())?;
    index.sweep().map_err(|e| e.to_string())?;
    let reader = buffer.reader().map_err(|e| e.to_string())?;
    let options = SealOptions::default();
    loop {
        let cut = SealCut {
            until: seam,
            target_bytes: cfg.seal_target_bytes,
        };
        let sealed =
            seal_next(&index, &reader, &codec, cut, &options).map_err(|e| e.to_string())?;
        if sealed.is_none() {
            break;
        }
    }
    let sealed_end = index.sealed_end().map_err(|e| e.to_string())?;
    if sealed_end != seam {
        return Err(format!(
            "sealing stopped at offset {sealed_end}, before the log's end {seam}"
        ));
    }
    fault("sealed");
    let segments = index.entries().map_err(|e| e.to_string())?;
    let layout = crate::server::live_layout(cfg, &home, &logs, s3)?.ok_or_else(|| {
        "the stream publishes nothing (published = \"off\"): its old log could not be read after a migration".to_string()
    })?;
    let old_schema_value: Value = old_schema
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| json!({}));
    let info = StreamInfo {
        stream_id: buffer.stream_id().to_string(),
        schema_json: old_schema.clone(),
        segment_schema: corecast_storage::tier::segment_schema(&codec),
        retirement: None,
        sealed_logs: logs.sealed_entries(),
    };
    let earliest = segments
        .first()
        .map_or(seam, |s| s.first_offset)
        .max(logs.live.start_offset)
        .max(1);
    let mut publisher = Publisher::open(&dir, layout.clone(), info, cfg.published_grace, earliest)
        .map_err(|e| format!("opening the old log's table: {e}"))?;
    let segments_dir = index.dir().to_path_buf();
    let relink = |first: u64, last: u64| {
        segments
            .iter()
            .find(|s| s.first_offset == first && s.last_offset == last)
            .map(|s| segments_dir.join(&s.file))
    };
    publisher
        .verify(&relink)
        .map_err(|e| format!("checking the old log's table: {e}"))?;
    loop {
        let end = publisher.end();
        let due: Vec<SegmentToPublish> = segments
            .iter()
            .filter(|s| s.first_offset >= end)
            .take(SEGMENTS_PER_COMMIT)
            .map(|s| SegmentToPublish {
                first_offset: s.first_offset,
                last_offset: s.last_offset,
                rows: s.rows,
                bytes: s.bytes,
                min_ts: s.min_ts,
                max_ts: s.max_ts,
                path: segments_dir.join(&s.file),
            })
            .collect();
        if due.is_empty() {
            break;
        }
        publisher
            .append(&due)
            .map_err(|e| format!("publishing the old log: {e}"))?;
    }
    let status = publisher.status();
    if status.floor.is_some() && status.end != seam {
        return Err(format!(
            "the old log's table ends at {}, not at the log's end {seam}",
            status.end
        ));
    }
    drop(publisher);
    fault("published");
    let marks = buffer
        .publisher_marks()
        .map(|(id, m)| (id.to_string(), m))
        .collect();
    let stream_id = buffer.stream_id().to_string();
    let (next, next_dir) = logs.successor(name);
    create_successor(
        &home.join(&next_dir),
        &stream_id,
        new_schema.as_deref(),
        seam,
        &marks,
    )
    .map_err(|e| e.to_string())?;
    fault("successor");
    let mut after = logs.clone();
    // a log that never held a row leaves no table behind: nothing to list, the next log starts
    // where it did
    if status.floor.is_some() {
        let start_ts = segments.first().map(|s| s.min_ts);
        let end_ts = segments.last().map(|s| s.max_ts);
        let entry = json!({
            "name": layout.log,
            "published": layout.published,
            "start_offset": status.floor.unwrap_or(seam).max(logs.live.start_offset),
            "start_ts": start_ts,
            "schema": old_schema_value,
            "system_schema": system_schema(),
            "sort_by": [],
            "end_offset": seam,
            "end_ts": end_ts,
        });
        after.sealed.push(SealedLog {
            entry,
            record_count: status.rows,
        });
    }
    after.live = LiveLog {
        name: next.clone(),
        dir: next_dir,
        start_offset: seam,
        number: logs.live.number + 1,
    };
    drop(reader);
    drop(index);
    // Every row of the old log is in its sealed segments and its table now, and nothing reads
    // it below the seam from the hot log again (a subscriber there gets 4416 evicted): its hot
    // segments are deleted (each a preallocated `segment_bytes` file), the floor and frontier
    // kept at the seam. A crash after this reruns the migration on an empty log at the same
    // frontier, whose seal and publish have nothing left to do.
    let mut buffer = buffer;
    buffer
        .evict_below(seam)
        .map_err(|e| format!("deleting the old log's hot segments: {e}"))?;
    drop(buffer);
    let spare = dir
        .join(corecast_storage::log::LOG_DIR_NAME)
        .join(corecast_storage::log::segment::SPARE_FILE_NAME);
    match std::fs::remove_file(&spare) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("deleting the old log's spare segment: {e}")),
    }
    generations::save(&home, &after)?;
    // a log that never held a row is listed nowhere and read by nothing: its directory (its
    // meta.db, its emptied hot log) goes now, or it would stay for good (the stream's first
    // log's directory is the stream's own, and stays)
    if status.floor.is_none() && !logs.is_first() {
        // nothing of it stays open
        drop(meta);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(stream = %name, "the empty log {} is left in place: deleting it: {e}", dir.display())
            }
        }
    }
    fault("committed");
    write_metadata(cfg, &home, &after, s3, seam)?;
    Ok(Migrated::Sealed {
        log: next,
        seam,
        records: status.rows,
    })
}

/// Writes the stream metadata naming `logs` (the new live log, the sealed ones) before the
/// stream serves again, so a client that reads it once the migration succeeded finds the seam.
fn write_metadata(
    cfg: &StreamConfig,
    home: &Path,
    logs: &generations::Generations,
    s3: &corecast_storage::published::S3Options,
    earliest: u64,
) -> Result<(), String> {
    let Some(layout) = crate::server::live_layout(cfg, home, logs, s3)? else {
        return Ok(());
    };
    let dir = logs.live_dir(home);
    let (_, meta) = MetaDb::open(&dir, None).map_err(|e| e.to_string())?;
    let codec = match &meta.schema_json {
        Some(text) => RowCodec::Schema(
            Schema::compile(text).map_err(|e| format!("the new log's schema: {e}"))?,
        ),
        None => RowCodec::Schemaless,
    };
    let info = StreamInfo {
        stream_id: meta.stream_id,
        schema_json: meta.schema_json,
        segment_schema: corecast_storage::tier::segment_schema(&codec),
        retirement: None,
        sealed_logs: logs.sealed_entries(),
    };
    Publisher::open(&dir, layout, info, cfg.published_grace, earliest)
        .map(drop)
        .map_err(|e| format!("writing the stream metadata: {e}"))
}

/// Whether stream `cfg`'s live log already has `cfg`'s schema (a migration to it finished).
pub fn applied(cfg: &StreamConfig, data_dir: &Path) -> bool {
    if !cfg.durable {
        // no log: the declaration is the whole of it
        return true;
    }
    let home = data_dir.join(&cfg.name);
    let Ok(logs) = generations::load(&home, &cfg.name) else {
        return false;
    };
    let schema = match &cfg.schema_json {
        Some(text) => match Schema::compile(text) {
            Ok(s) => Some(s.published()),
            Err(_) => return false,
        },
        None => None,
    };
    MetaDb::open(&logs.live_dir(&home), None).is_ok_and(|(_, meta)| meta.schema_json == schema)
}

/// Whether stream `cfg`'s declaration can be migrated at all: a durable stream must publish
/// (its old log is read from the published tables after the seam). `Err` says why not.
pub fn migratable(cfg: &StreamConfig) -> Result<(), String> {
    if cfg.durable && matches!(cfg.published, Published::Off) {
        return Err(format!(
            "stream {} publishes nothing (published = \"off\"): after a migration its older rows are read from the published tables, so a stream that does not publish cannot be migrated",
            cfg.name
        ));
    }
    Ok(())
}
