//! The publisher of one stream: commits its sealed segments to the stream's Iceberg table, one
//! snapshot per commit, keeps the stream metadata in step, applies retention and deletes files
//! no kept version names once a grace period has passed.
//!
//! In: the stream's `meta.db` (the publisher's own tables beside the segment index), its
//! [`Layout`], and sealed segments in offset order. Out: files in the stores, and the
//! published extent `[floor, end)`.
//!
//! # A commit, and what a crash leaves
//!
//! 1. The plan (version `N`, its stem, snapshot id, every key it will write) is recorded in
//!    `meta.db` as the pending commit.
//! 2. Bottom up, each name written once: the data files, the manifest (every live file: the
//!    new ones `ADDED`, the others `EXISTING` with their sequence numbers), the manifest list
//!    (naming that one manifest), the table metadata `N`.
//! 3. The Iceberg `version-hint.text` (the stem): the commit point. A reader that resolves the
//!    hint sees version `N` whole, or the one before it whole: never a torn table.
//! 4. `meta.db`: the files, the version, the pending plan cleared, in one transaction.
//!
//! At open a pending plan is resolved against the hint: if the hint names its stem the commit
//! happened and step 4 is applied; otherwise nothing of it was ever visible and its objects are
//! deleted. So after any crash the table converges to a state whose rows are each published
//! exactly once, with no hole: the next commit starts where the last visible one ended.
//!
//! # Versions and garbage
//!
//! The newest [`KEEP_VERSIONS`] table metadata versions are kept, with everything they name. An
//! older version's files, and a data file no kept version names (retention removed it), are
//! deleted once the commit that superseded them is older than the grace period: a reader that
//! resolved the previous hint just before a commit can still finish.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_schema::SchemaRef;
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

use super::avro::{manifest_bytes, manifest_list_bytes, ManifestEntry, ManifestFile};
use super::iceberg::{long_bound, table_schema, SnapshotInfo, TableMetadata};
use super::layout::{stream_metadata, Layout};
use super::PublishError;
use crate::log::meta::{to_i64, MetaDb, META_FILE_NAME};
use crate::log::StorageError;

/// Table metadata versions kept (and the stream metadata's).
pub const KEEP_VERSIONS: u64 = 10;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS published_files(
    first_offset INTEGER PRIMARY KEY,
    last_offset INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    min_ts INTEGER NOT NULL,
    max_ts INTEGER NOT NULL,
    key TEXT NOT NULL UNIQUE,
    snapshot_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    removed_version INTEGER,
    removed_at_us INTEGER
);
CREATE TABLE IF NOT EXISTS published_versions(
    version INTEGER PRIMARY KEY,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS published_state(
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// What the publisher needs to know of its stream.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    /// The stream's UUID (the greeting's `stream_id`).
    pub stream_id: String,
    /// The published JSON Schema of its declared columns (`None`: schema-less).
    pub schema_json: Option<String>,
    /// The sealed segments' Arrow schema, field ids included.
    pub segment_schema: SchemaRef,
    /// Set once the stream is retired: the stream metadata then says so (version 3).
    pub retirement: Option<Retirement>,
    /// The logs earlier migrations sealed, oldest first (empty for a stream never migrated).
    pub sealed_logs: Vec<SealedLog>,
}

/// A log a migration sealed, as the stream metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct SealedLog {
    /// Its `sealed_logs` entry: the `live_log` keys plus `end_offset` (exclusive) and `end_ts`.
    pub entry: serde_json::Value,
    /// Rows its published table holds (the stream manifest's `record_count`, which the client
    /// compares with the table's count: a table holding fewer is "published short").
    pub record_count: u64,
}

/// The sealed logs the stream metadata lists when the live log's table starts at `start`: the
/// newest ones that join it without a hole — the last ending at `start` (or past it), each
/// other ending where the next one starts (or past it). So none once retention has dropped
/// the live log's first rows, and none older than a hole between two sealed logs (a log
/// migrated after retention had dropped its first rows starts past the end of the one before
/// it). Every sealed log older than a hole holds rows older than those retention dropped, so
/// it is past retention too; listed, it would put a hole in the history that the official
/// client reads across without a word (it checks the seams by row counts only: PUBLISHED.md
/// §5.3), skipping the rows retention dropped. Unlisted, a catch-up from below the first
/// listed offset is refused, as on a stream never migrated. An entry without its offsets is
/// taken to join.
pub fn listed_sealed_logs(sealed: &[SealedLog], start: u64) -> &[SealedLog] {
    let offset = |s: &SealedLog, key: &str| s.entry.get(key).and_then(serde_json::Value::as_u64);
    let mut next_start = Some(start);
    let mut first = sealed.len();
    while first > 0 {
        let log = &sealed[first - 1];
        if let (Some(end), Some(next)) = (offset(log, "end_offset"), next_start) {
            if end < next {
                break;
            }
        }
        next_start = offset(log, "start_offset");
        first -= 1;
    }
    &sealed[first..]
}

/// The stream manifest (PUBLISHED.md §3.2): one row per sealed log, `log`, `start_offset`,
/// `end_offset` and `record_count`, as Parquet. No per-column statistics: the reader then
/// prunes no log by value (a missing statistic always includes).
pub fn stream_manifest(sealed: &[SealedLog]) -> Result<Vec<u8>, PublishError> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let e = |e: String| PublishError::Encode(format!("the stream manifest: {e}"));
    let schema = Arc::new(Schema::new(vec![
        Field::new("log", DataType::Utf8, false),
        Field::new("start_offset", DataType::Int64, false),
        Field::new("end_offset", DataType::Int64, true),
        Field::new("record_count", DataType::Int64, true),
    ]));
    let int = |s: &SealedLog, k: &str| s.entry.get(k).and_then(serde_json::Value::as_i64);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(
            sealed
                .iter()
                .map(|s| {
                    s.entry
                        .get("name")
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_string()
                })
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            sealed
                .iter()
                .map(|s| int(s, "start_offset").unwrap_or(1))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            sealed
                .iter()
                .map(|s| int(s, "end_offset"))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            sealed
                .iter()
                .map(|s| Some(s.record_count as i64))
                .collect::<Vec<_>>(),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|x| e(x.to_string()))?;
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None)
        .map_err(|x| e(x.to_string()))?;
    w.write(&batch).map_err(|x| e(x.to_string()))?;
    w.close().map_err(|x| e(x.to_string()))?;
    Ok(out)
}

/// That a stream is retired (PUBLISHED.md §3.2, `retirement` of stream metadata version 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retirement {
    /// When, µs since the epoch.
    pub at_us: i64,
    /// One past its last row.
    pub end_offset: u64,
}

/// A sealed segment to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentToPublish {
    /// Its first offset.
    pub first_offset: u64,
    /// Its last offset.
    pub last_offset: u64,
    /// Rows (`last - first + 1`).
    pub rows: u64,
    /// The file's size.
    pub bytes: u64,
    /// Its smallest `streamcast_ts`.
    pub min_ts: i64,
    /// Its largest `streamcast_ts`.
    pub max_ts: i64,
    /// The sealed file on local disk.
    pub path: PathBuf,
}

/// A live (or removed, not yet deleted) data file of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PubFile {
    first: u64,
    last: u64,
    rows: u64,
    bytes: u64,
    min_ts: i64,
    max_ts: i64,
    key: String,
    snapshot_id: i64,
    seq: i64,
}

/// One committed table version as `meta.db` keeps it.
#[derive(Debug, Clone)]
struct Version {
    version: u64,
    stem: String,
    list_key: String,
    manifest_key: String,
    committed_at_us: i64,
    snapshot: SnapshotInfo,
}

/// What `/stats` shows of a publisher.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishStatus {
    /// The first published offset (`None`: nothing published).
    pub floor: Option<u64>,
    /// The offset after the last published row.
    pub end: u64,
    /// Live data files.
    pub files: u64,
    /// Rows in them.
    pub rows: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// The current table version (0: none).
    pub version: u64,
    /// `max_ts` of the last published row's file.
    pub last_max_ts: Option<i64>,
}

/// The publisher of one stream's table. Runs on a maintenance thread.
pub struct Publisher {
    db: MetaDb,
    layout: Layout,
    info: StreamInfo,
    grace: Duration,
    table_uuid: String,
    files: Vec<PubFile>,
    versions: Vec<Version>,
    end: u64,
    notes: Vec<String>,
    fault: Option<(FaultPoint, bool, u32)>,
}

/// A point inside a commit where a test makes it stop, as a crash would there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After the data files, before the manifest.
    AfterData,
    /// After the manifest and the manifest list, before the table metadata.
    AfterManifest,
    /// After the table metadata, before the hint.
    AfterMetadata,
    /// After the hint, before `meta.db` records the commit.
    AfterHint,
}

impl FaultPoint {
    /// `after_data`, `after_manifest`, `after_metadata` or `after_hint`.
    pub fn parse(text: &str) -> Option<FaultPoint> {
        Some(match text {
            "after_data" => FaultPoint::AfterData,
            "after_manifest" => FaultPoint::AfterManifest,
            "after_metadata" => FaultPoint::AfterMetadata,
            "after_hint" => FaultPoint::AfterHint,
            _ => return None,
        })
    }
}

fn sql<'d>(db: &'d MetaDb, op: &'static str) -> impl Fn(rusqlite::Error) -> PublishError + 'd {
    move |e| PublishError::Storage(StorageError::sqlite(db.path(), op)(e))
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn snapshot_id() -> i64 {
    // positive, 63 bits, as Java's and pyiceberg's
    (uuid::Uuid::new_v4().as_u128() >> 65) as i64
}

impl Publisher {
    /// Opens the publisher of the stream in `stream_dir` (its hot log and segment index already
    /// opened), resolving a commit a crash left pending. `earliest` is the stream's first held
    /// offset, the stream metadata's `start_offset` while nothing is published.
    pub fn open(
        stream_dir: &Path,
        layout: Layout,
        info: StreamInfo,
        grace: Duration,
        earliest: u64,
    ) -> Result<Publisher, PublishError> {
        let db = MetaDb::connect(&stream_dir.join(META_FILE_NAME), false)?;
        db.conn()
            .execute_batch(CREATE)
            .map_err(sql(&db, "creating the published tables"))?;
        let mut p = Publisher {
            db,
            layout,
            info,
            grace,
            table_uuid: String::new(),
            files: Vec::new(),
            versions: Vec::new(),
            end: earliest,
            notes: Vec::new(),
            fault: None,
        };
        let location = p.layout.table.base().to_string();
        match p.state("location")? {
            Some(l) if l == location => {}
            Some(old) => {
                // a new location starts a new table; the old one is left as it is
                p.notes.push(format!(
                    "the published location changed from {old} to {location}: starting a new table there (the old one is left as it is)"
                ));
                p.db.transaction("starting a new published table", |c| {
                    c.execute_batch(
                        "DELETE FROM published_files; DELETE FROM published_versions; DELETE FROM published_state;",
                    )
                })?;
            }
            None => {}
        }
        if p.state("table_uuid")?.is_none() {
            let id = uuid::Uuid::new_v4().to_string();
            let loc = location.clone();
            p.db.transaction("minting the published table", |c| {
                c.execute(
                    "INSERT OR REPLACE INTO published_state(key, value) VALUES ('table_uuid', ?1), ('location', ?2)",
                    params![id, loc],
                )?;
                Ok(())
            })?;
        }
        p.table_uuid = p.state("table_uuid")?.unwrap_or_default();
        p.settle()?;
        if p.files.is_empty() && p.end < earliest {
            p.end = earliest;
        }
        p.ensure_stream_metadata()?;
        Ok(p)
    }

    /// Makes the next commit stop at `point`: with `abort`, the process aborts there (a crash,
    /// for kill tests of the real binary); without, the commit returns an error there, leaving
    /// what a crash would leave. For tests only.
    pub fn set_fault(&mut self, point: FaultPoint, abort: bool) {
        self.set_fault_after(point, abort, 0);
    }

    /// [`Publisher::set_fault`] for the commit after `skip` commits that pass.
    pub fn set_fault_after(&mut self, point: FaultPoint, abort: bool, skip: u32) {
        self.fault = Some((point, abort, skip));
    }

    fn fault_at(&mut self, point: FaultPoint) -> Result<(), PublishError> {
        match self.fault {
            Some((p, abort, 0)) if p == point => {
                if abort {
                    std::process::abort();
                }
                self.fault = None;
                Err(PublishError::Invariant(format!(
                    "injected fault at {point:?}"
                )))
            }
            Some((p, abort, n)) if p == point => {
                self.fault = Some((p, abort, n - 1));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// What happened at open that the operator should hear of (the engine logs them).
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Resolves a pending plan (a crash, or a commit that failed half way) and reloads the
    /// state, so the next plan starts from what readers see.
    fn settle(&mut self) -> Result<(), PublishError> {
        self.load()?;
        if self.state("pending")?.is_some() {
            self.recover()?;
            self.load()?;
        }
        if let Some(e) = self.state("end")?.and_then(|v| v.parse::<u64>().ok()) {
            if let Some(last) = self.files.last() {
                if e != last.last + 1 {
                    return Err(PublishError::Invariant(format!(
                        "{}: the published end is recorded as {e} but the last live file ends at {} (meta.db damaged or edited by hand); restore meta.db, or remove the published_* tables to publish a new table",
                        self.db.path().display(),
                        last.last + 1
                    )));
                }
            }
            self.end = e;
        }
        Ok(())
    }

    /// Checks what readers resolve against `meta.db`: each live data file present with its
    /// recorded size (local stores), and the hint naming the current version whose metadata,
    /// manifest list and manifest all exist. A missing hint or metadata file is rewritten as a
    /// new version over the same files; a missing or resized data file is an error naming it
    /// (`relink` gives the sealed segment it can be published again from, if it still exists).
    pub fn verify(
        &mut self,
        relink: &dyn Fn(u64, u64) -> Option<PathBuf>,
    ) -> Result<Vec<String>, PublishError> {
        self.settle()?;
        let mut repaired = Vec::new();
        let table = self.layout.table.clone();
        for f in &self.files {
            let Some(path) = table.local_path(&f.key) else {
                break; // a remote store: readers report a missing object themselves
            };
            let size = std::fs::metadata(&path).map(|m| m.len()).ok();
            if size == Some(f.bytes) {
                continue;
            }
            match relink(f.first, f.last) {
                Some(segment)
                    if std::fs::metadata(&segment).map(|m| m.len()).ok() == Some(f.bytes) =>
                {
                    let _ = std::fs::remove_file(&path);
                    table.put_file(&f.key, &segment)?;
                    repaired.push(format!(
                        "{} was {}: published again from {}",
                        table.uri(&f.key),
                        size.map_or("missing".to_string(), |n| format!(
                            "{n} bytes, not {}",
                            f.bytes
                        )),
                        segment.display()
                    ));
                }
                _ => {
                    return Err(PublishError::Invariant(format!(
                        "{} (offsets {}..={}) is {} and no sealed segment of the same size is left to publish it from: readers of the table fail on it; restore the file",
                        table.uri(&f.key),
                        f.first,
                        f.last,
                        size.map_or("missing".to_string(), |n| format!("{n} bytes, not {}", f.bytes))
                    )));
                }
            }
        }
        if let Some(current) = self.versions.last().cloned() {
            let hint = table.get("metadata/version-hint.text")?;
            let hint_ok = hint
                .as_deref()
                .is_some_and(|h| String::from_utf8_lossy(h).trim() == current.stem);
            let mut missing = Vec::new();
            for key in [
                format!("metadata/{}.metadata.json", current.stem),
                current.list_key.clone(),
                current.manifest_key.clone(),
            ] {
                if table.get(&key)?.is_none() {
                    missing.push(key);
                }
            }
            if !hint_ok || !missing.is_empty() {
                let why = if missing.is_empty() {
                    "the hint did not name it".to_string()
                } else {
                    format!("{} missing", missing.join(", "))
                };
                self.rewrite()?;
                repaired.push(format!(
                    "table version {} was unreadable ({why}): rewritten as version {}",
                    current.version,
                    self.versions.last().map_or(0, |v| v.version)
                ));
            }
        }
        Ok(repaired)
    }

    /// A new version over the same live files (a repair: no data changes).
    fn rewrite(&mut self) -> Result<(), PublishError> {
        let version = self.next_version();
        let sid = snapshot_id();
        let seq = self.versions.last().map_or(0, |v| v.snapshot.sequence) + 1;
        let plan = Plan {
            version,
            stem: format!("{version:05}-{}", uuid::Uuid::new_v4()),
            snapshot_id: sid,
            seq,
            operation: "append",
            added: Vec::new(),
            removed: Vec::new(),
            manifest_key: format!("metadata/{}-m0.avro", uuid::Uuid::new_v4()),
            list_key: format!("metadata/snap-{sid}-1-{}.avro", uuid::Uuid::new_v4()),
        };
        let live = self.files.clone();
        self.commit(plan, &live, &[])
    }

    fn state(&self, key: &str) -> Result<Option<String>, PublishError> {
        self.db
            .conn()
            .query_row(
                "SELECT value FROM published_state WHERE key = ?1",
                params![key],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(sql(&self.db, "reading the published state"))
    }

    fn load(&mut self) -> Result<(), PublishError> {
        let mut stmt = self
            .db
            .conn()
            .prepare(
                "SELECT first_offset, last_offset, rows, bytes, min_ts, max_ts, key, snapshot_id, seq
                 FROM published_files WHERE removed_version IS NULL ORDER BY first_offset",
            )
            .map_err(sql(&self.db, "reading the published files"))?;
        let files = stmt
            .query_map([], |r| {
                Ok(PubFile {
                    first: r.get::<_, i64>(0)? as u64,
                    last: r.get::<_, i64>(1)? as u64,
                    rows: r.get::<_, i64>(2)? as u64,
                    bytes: r.get::<_, i64>(3)? as u64,
                    min_ts: r.get(4)?,
                    max_ts: r.get(5)?,
                    key: r.get(6)?,
                    snapshot_id: r.get(7)?,
                    seq: r.get(8)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql(&self.db, "reading the published files"))?;
        drop(stmt);
        for w in files.windows(2) {
            if w[1].first != w[0].last + 1 {
                return Err(PublishError::Invariant(format!(
                    "{}: the published files leave a hole between offsets {} and {}",
                    self.db.path().display(),
                    w[0].last,
                    w[1].first
                )));
            }
        }
        self.files = files;
        let mut stmt = self
            .db
            .conn()
            .prepare("SELECT doc FROM published_versions ORDER BY version")
            .map_err(sql(&self.db, "reading the published versions"))?;
        let docs = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql(&self.db, "reading the published versions"))?;
        drop(stmt);
        self.versions = docs
            .iter()
            .map(|d| version_from_json(d))
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    /// The table's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The offset after the last published row: rows below it (and at or above the floor) are
    /// in the table.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// What `/stats` shows.
    pub fn status(&self) -> PublishStatus {
        PublishStatus {
            floor: self.files.first().map(|f| f.first),
            end: self.end,
            files: self.files.len() as u64,
            rows: self.files.iter().map(|f| f.rows).sum(),
            bytes: self.files.iter().map(|f| f.bytes).sum(),
            version: self.versions.last().map_or(0, |v| v.version),
            last_max_ts: self.files.last().map(|f| f.max_ts),
        }
    }

    /// Publishes `segments` (contiguous, in offset order, starting at [`Publisher::end`] — or
    /// anywhere while the table is empty) as one `append` snapshot. A segment that starts above
    /// the end while the table holds rows (retention dropped the ones between before they were
    /// published) first removes every live file, so the table never has a hole.
    pub fn append(&mut self, segments: &[SegmentToPublish]) -> Result<(), PublishError> {
        let Some(first) = segments.first() else {
            return Ok(());
        };
        self.settle()?;
        for w in segments.windows(2) {
            if w[1].first_offset != w[0].last_offset + 1 {
                return Err(PublishError::Invariant(format!(
                    "segments to publish are not contiguous: {} then {}",
                    w[0].last_offset, w[1].first_offset
                )));
            }
        }
        if first.first_offset < self.end {
            return Err(PublishError::Invariant(format!(
                "offset {} is already published (the table ends at {})",
                first.first_offset, self.end
            )));
        }
        if let Some(last) = self.files.last() {
            if last.last + 1 != self.end {
                return Err(PublishError::Invariant(format!(
                    "the table's last file ends at {} but its end is recorded as {}",
                    last.last + 1,
                    self.end
                )));
            }
        }
        if first.first_offset > self.end && !self.files.is_empty() {
            let all = self.files.len();
            self.remove_first(all)?;
            self.notes.push(format!(
                "offsets {}..{} were dropped by retention before they were published: the table restarts at {}",
                self.end,
                first.first_offset,
                first.first_offset
            ));
        }
        let version = self.next_version();
        let sid = snapshot_id();
        let seq = self.versions.last().map_or(0, |v| v.snapshot.sequence) + 1;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let added: Vec<PubFile> = segments
            .iter()
            .map(|s| PubFile {
                first: s.first_offset,
                last: s.last_offset,
                rows: s.rows,
                bytes: s.bytes,
                min_ts: s.min_ts,
                max_ts: s.max_ts,
                key: format!(
                    "data/{:020}-{:020}-{}.parquet",
                    s.first_offset,
                    s.last_offset + 1,
                    &token[..8]
                ),
                snapshot_id: sid,
                seq,
            })
            .collect();
        let uploads: Vec<(String, PathBuf)> = added
            .iter()
            .zip(segments)
            .map(|(f, s)| (f.key.clone(), s.path.clone()))
            .collect();
        let mut live = self.files.clone();
        live.extend(added.iter().cloned());
        let plan = Plan {
            version,
            stem: format!("{version:05}-{}", uuid::Uuid::new_v4()),
            snapshot_id: sid,
            seq,
            operation: "append",
            added: added.clone(),
            removed: Vec::new(),
            manifest_key: format!("metadata/{}-m0.avro", uuid::Uuid::new_v4()),
            list_key: format!("metadata/snap-{sid}-1-{}.avro", uuid::Uuid::new_v4()),
        };
        self.commit(plan, &live, &uploads)?;
        self.ensure_stream_metadata()
    }

    /// Retention: removes the leading live files whose newest row is older than `cutoff_us`
    /// (one `delete` snapshot); returns how many. The newest file stays until a newer one is
    /// published: an empty table reads to the official client as one with no floor, and a
    /// catch-up from below `start_offset` would then skip the dropped rows without an error
    /// (streamcast 0.26.0's `Catcher.prepare` checks the floor only when the table has rows).
    pub fn expire(&mut self, cutoff_us: i64) -> Result<usize, PublishError> {
        self.settle()?;
        let n = self
            .files
            .iter()
            .take_while(|f| f.max_ts < cutoff_us)
            .count()
            .min(self.files.len().saturating_sub(1));
        if n > 0 {
            self.remove_first(n)?;
            self.ensure_stream_metadata()?;
        }
        Ok(n)
    }

    fn remove_first(&mut self, n: usize) -> Result<(), PublishError> {
        let version = self.next_version();
        let sid = snapshot_id();
        let seq = self.versions.last().map_or(0, |v| v.snapshot.sequence) + 1;
        let removed: Vec<PubFile> = self.files[..n].to_vec();
        let live: Vec<PubFile> = self.files[n..].to_vec();
        let plan = Plan {
            version,
            stem: format!("{version:05}-{}", uuid::Uuid::new_v4()),
            snapshot_id: sid,
            seq,
            operation: "delete",
            added: Vec::new(),
            removed,
            manifest_key: format!("metadata/{}-m0.avro", uuid::Uuid::new_v4()),
            list_key: format!("metadata/snap-{sid}-1-{}.avro", uuid::Uuid::new_v4()),
        };
        self.commit(plan, &live, &[])
    }

    fn next_version(&self) -> u64 {
        self.versions.last().map_or(0, |v| v.version) + 1
    }

    /// Steps 1–4 of the module docs for `plan`, whose table after it holds `live`.
    fn commit(
        &mut self,
        plan: Plan,
        live: &[PubFile],
        uploads: &[(String, PathBuf)],
    ) -> Result<(), PublishError> {
        let table = self.layout.table.clone();
        let metadata_key = format!("metadata/{}.metadata.json", plan.stem);
        // 1. the plan
        let mut keys: Vec<String> = plan.added.iter().map(|f| f.key.clone()).collect();
        keys.extend([
            plan.manifest_key.clone(),
            plan.list_key.clone(),
            metadata_key.clone(),
        ]);
        let pending = plan.to_json(&keys).to_string();
        self.db.transaction("recording a pending publish", |c| {
            c.execute(
                "INSERT OR REPLACE INTO published_state(key, value) VALUES ('pending', ?1)",
                params![pending],
            )?;
            Ok(())
        })?;
        // 2. bottom up
        for (key, path) in uploads {
            table.put_file(key, path)?;
        }
        self.fault_at(FaultPoint::AfterData)?;
        let schema_json = table_schema(&self.info.segment_schema)?.to_string();
        let entries: Vec<ManifestEntry> = live
            .iter()
            .map(|f| {
                let added = f.snapshot_id == plan.snapshot_id;
                let ts_id = self.info.segment_schema.fields().len() as i32;
                ManifestEntry {
                    status: if added { 1 } else { 0 },
                    snapshot_id: f.snapshot_id,
                    sequence: (!added).then_some(f.seq),
                    file_path: table.uri(&f.key),
                    record_count: f.rows as i64,
                    file_size: f.bytes as i64,
                    bounds: vec![
                        (1, long_bound(f.first as i64), long_bound(f.last as i64)),
                        (ts_id, long_bound(f.min_ts), long_bound(f.max_ts)),
                    ],
                    split_offsets: Vec::new(),
                }
            })
            .collect();
        let manifest = manifest_bytes(&entries, &schema_json)?;
        table.put(&plan.manifest_key, &manifest)?;
        let added_rows: u64 = plan.added.iter().map(|f| f.rows).sum();
        let existing: Vec<&PubFile> = live
            .iter()
            .filter(|f| f.snapshot_id != plan.snapshot_id)
            .collect();
        let manifests = if live.is_empty() {
            Vec::new()
        } else {
            vec![ManifestFile {
                path: table.uri(&plan.manifest_key),
                length: manifest.len() as i64,
                sequence: plan.seq,
                min_sequence: live.iter().map(|f| f.seq).min().unwrap_or(plan.seq),
                added_snapshot_id: plan.snapshot_id,
                added_files: plan.added.len() as i32,
                added_rows: added_rows as i64,
                existing_files: existing.len() as i32,
                existing_rows: existing.iter().map(|f| f.rows as i64).sum(),
            }]
        };
        let parent = self.versions.last().map(|v| v.snapshot.snapshot_id);
        let list = manifest_list_bytes(&manifests, plan.snapshot_id, parent, plan.seq)?;
        table.put(&plan.list_key, &list)?;
        self.fault_at(FaultPoint::AfterManifest)?;
        let now = now_us();
        let snapshot = SnapshotInfo {
            snapshot_id: plan.snapshot_id,
            parent,
            sequence: plan.seq,
            timestamp_ms: now / 1000,
            manifest_list: table.uri(&plan.list_key),
            operation: plan.operation,
            added_files: plan.added.len() as u64,
            added_rows,
            removed_files: plan.removed.len() as u64,
            removed_rows: plan.removed.iter().map(|f| f.rows).sum(),
            total_files: live.len() as u64,
            total_rows: live.iter().map(|f| f.rows).sum(),
            metadata_file: table.uri(&metadata_key),
        };
        let keep_from = self
            .versions
            .len()
            .saturating_sub(KEEP_VERSIONS as usize - 1);
        let mut snapshots: Vec<SnapshotInfo> = self.versions[keep_from..]
            .iter()
            .map(|v| v.snapshot.clone())
            .collect();
        snapshots.push(snapshot.clone());
        let end = live.last().map_or(self.end, |f| f.last + 1);
        let doc = TableMetadata {
            location: table.base(),
            table_uuid: &self.table_uuid,
            schema: &self.info.segment_schema,
            snapshots: &snapshots,
            properties: vec![
                ("corecast.stream".into(), self.layout.stream.clone()),
                ("corecast.stream_id".into(), self.info.stream_id.clone()),
                ("corecast.published_end".into(), end.to_string()),
            ],
            now_ms: now / 1000,
        }
        .to_json()?;
        table.put(&metadata_key, doc.as_bytes())?;
        self.fault_at(FaultPoint::AfterMetadata)?;
        // 3. the commit point
        table.put("metadata/version-hint.text", plan.stem.as_bytes())?;
        self.fault_at(FaultPoint::AfterHint)?;
        // 4. meta.db
        let version = Version {
            version: plan.version,
            stem: plan.stem.clone(),
            list_key: plan.list_key.clone(),
            manifest_key: plan.manifest_key.clone(),
            committed_at_us: now,
            snapshot,
        };
        self.record(&plan, &version, end)?;
        self.load()?;
        self.end = end;
        Ok(())
    }

    /// Step 4: the plan's files and version into `meta.db`, the pending plan cleared.
    fn record(&self, plan: &Plan, version: &Version, end: u64) -> Result<(), PublishError> {
        let doc = version_to_json(version).to_string();
        self.db.transaction("recording a publish", |c| {
            for f in &plan.added {
                c.execute(
                    "INSERT OR REPLACE INTO published_files(first_offset, last_offset, rows, bytes, min_ts, max_ts, key, snapshot_id, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        to_i64(f.first),
                        to_i64(f.last),
                        to_i64(f.rows),
                        to_i64(f.bytes),
                        f.min_ts,
                        f.max_ts,
                        f.key,
                        f.snapshot_id,
                        f.seq
                    ],
                )?;
            }
            for f in &plan.removed {
                c.execute(
                    "UPDATE published_files SET removed_version = ?1, removed_at_us = ?2 WHERE key = ?3",
                    params![to_i64(plan.version), version.committed_at_us, f.key],
                )?;
            }
            c.execute(
                "INSERT OR REPLACE INTO published_versions(version, doc) VALUES (?1, ?2)",
                params![to_i64(plan.version), doc],
            )?;
            c.execute(
                "INSERT OR REPLACE INTO published_state(key, value) VALUES ('end', ?1)",
                params![end.to_string()],
            )?;
            c.execute("DELETE FROM published_state WHERE key = 'pending'", [])?;
            Ok(())
        })?;
        Ok(())
    }

    /// Resolves a pending plan left by a crash (module docs).
    fn recover(&mut self) -> Result<(), PublishError> {
        let Some(text) = self.state("pending")? else {
            return Ok(());
        };
        let plan_doc: Value = serde_json::from_str(&text).map_err(|e| {
            PublishError::Invariant(format!("the pending publish in meta.db is unreadable: {e}"))
        })?;
        let plan = Plan::from_json(&plan_doc)?;
        let hint = self.layout.table.get("metadata/version-hint.text")?;
        let committed = hint
            .as_deref()
            .map(|h| String::from_utf8_lossy(h).trim() == plan.stem)
            .unwrap_or(false);
        if committed {
            let live_after: Vec<PubFile> = {
                let removed: BTreeSet<&str> = plan.removed.iter().map(|f| f.key.as_str()).collect();
                let mut v: Vec<PubFile> = self
                    .files
                    .iter()
                    .filter(|f| !removed.contains(f.key.as_str()))
                    .cloned()
                    .collect();
                v.extend(plan.added.iter().cloned());
                v
            };
            let end = live_after.last().map_or(self.end, |f| f.last + 1);
            // the table metadata it wrote holds the snapshot; rebuild the version from it
            let metadata_key = format!("metadata/{}.metadata.json", plan.stem);
            let snapshot = self.read_snapshot(&metadata_key, &plan)?;
            let version = Version {
                version: plan.version,
                stem: plan.stem.clone(),
                list_key: plan.list_key.clone(),
                manifest_key: plan.manifest_key.clone(),
                committed_at_us: now_us(),
                snapshot,
            };
            self.record(&plan, &version, end)?;
        } else {
            let keys: Vec<String> = plan_doc["keys"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            for key in &keys {
                self.layout.table.delete(key)?;
            }
            self.db
                .transaction("clearing a publish that never committed", |c| {
                    c.execute("DELETE FROM published_state WHERE key = 'pending'", [])?;
                    Ok(())
                })?;
        }
        Ok(())
    }

    fn read_snapshot(&self, metadata_key: &str, plan: &Plan) -> Result<SnapshotInfo, PublishError> {
        let bytes = self.layout.table.get(metadata_key)?.ok_or_else(|| {
            PublishError::Invariant(format!(
                "{} is named by the hint but missing",
                self.layout.table.uri(metadata_key)
            ))
        })?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
            PublishError::Invariant(format!("{}: {e}", self.layout.table.uri(metadata_key)))
        })?;
        let snap = doc["snapshots"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|s| s["snapshot-id"].as_i64() == Some(plan.snapshot_id))
            })
            .ok_or_else(|| {
                PublishError::Invariant(format!(
                    "{} lacks snapshot {}",
                    self.layout.table.uri(metadata_key),
                    plan.snapshot_id
                ))
            })?;
        let n = |k: &str| {
            snap["summary"][k]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(SnapshotInfo {
            snapshot_id: plan.snapshot_id,
            parent: snap["parent-snapshot-id"].as_i64(),
            sequence: plan.seq,
            timestamp_ms: snap["timestamp-ms"].as_i64().unwrap_or(0),
            manifest_list: self.layout.table.uri(&plan.list_key),
            operation: plan.operation,
            added_files: n("added-data-files"),
            added_rows: n("added-records"),
            removed_files: n("deleted-data-files"),
            removed_rows: n("deleted-records"),
            total_files: n("total-data-files"),
            total_rows: n("total-records"),
            metadata_file: self.layout.table.uri(metadata_key),
        })
    }

    /// The names of the sealed logs the stream metadata (as [`Publisher`] writes it) does not
    /// list (`listed_sealed_logs`): past retention, oldest first.
    pub fn unlisted_sealed_logs(&self) -> Vec<String> {
        let all = &self.info.sealed_logs;
        let listed = listed_sealed_logs(all, self.start()).len();
        all[..all.len() - listed]
            .iter()
            .filter_map(|s| s.entry.get("name").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// The first offset the table holds (its end when it holds none), at least 1.
    fn start(&self) -> u64 {
        self.files.first().map_or(self.end, |f| f.first).max(1)
    }

    /// Writes the stream metadata (a new version, its hint, the plain copy) when what it says
    /// differs from what was last written: at creation, and when retention moves the floor.
    fn ensure_stream_metadata(&mut self) -> Result<(), PublishError> {
        let start = self.start();
        let start_ts = self.files.first().map(|f| f.min_ts);
        let sealed = listed_sealed_logs(&self.info.sealed_logs, start);
        let doc = stream_metadata(
            &self.layout,
            &self.info.stream_id,
            self.info.schema_json.as_deref(),
            start,
            start_ts,
            self.info.retirement.as_ref(),
            &sealed.iter().map(|s| s.entry.clone()).collect::<Vec<_>>(),
        );
        // with sealed logs, a manifest beside each version (named for it) and a plain copy
        // beside the plain metadata; `text` (what is compared) names the plain one
        let mut doc = doc;
        let manifest = if sealed.is_empty() {
            None
        } else {
            doc["manifest"] = serde_json::json!(format!("{}.manifest.parquet", self.layout.stream));
            Some(stream_manifest(sealed)?)
        };
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| PublishError::Encode(format!("the stream metadata: {e}")))?;
        let home = self.layout.home.clone();
        let dir = self.layout.stream_metadata_dir();
        let written = self.state("stream_metadata")?;
        let hint_key = format!("{dir}/version-hint.text");
        let hinted = match home.get(&hint_key)? {
            Some(h) => {
                let name = String::from_utf8_lossy(&h).trim().to_string();
                !name.is_empty() && home.get(&format!("{dir}/{name}"))?.is_some()
            }
            None => false,
        };
        if written.as_deref() == Some(text.as_str()) && hinted {
            return Ok(());
        }
        // numbered past every version in the directory, not only this publisher's: a migrated
        // stream's next log publishes into the same home, and versions sort by number
        let listed = home
            .list(&dir)?
            .iter()
            .filter_map(|k| {
                let name = k.rsplit('/').next()?;
                name.split('-').next()?.parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0);
        let n: u64 = self
            .state("stream_metadata_version")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
            .max(listed)
            + 1;
        let tag = format!("{n:05}-{}", uuid::Uuid::new_v4().simple());
        let name = format!("{tag}.metadata.json");
        let versioned = match &manifest {
            Some(bytes) => {
                let named = format!("{tag}.manifest.parquet");
                home.put(&format!("{dir}/{named}"), bytes)?;
                let mut v = doc.clone();
                v["manifest"] = serde_json::json!(named);
                serde_json::to_string_pretty(&v)
                    .map_err(|e| PublishError::Encode(format!("the stream metadata: {e}")))?
            }
            None => text.clone(),
        };
        home.put(&format!("{dir}/{name}"), versioned.as_bytes())?;
        home.put(&hint_key, name.as_bytes())?;
        home.put(
            &format!("{}.metadata.json", self.layout.stream),
            text.as_bytes(),
        )?;
        let plain_manifest = format!("{}.manifest.parquet", self.layout.stream);
        match &manifest {
            Some(bytes) => home.put(&plain_manifest, bytes)?,
            // no sealed log listed any more: the plain manifest would still name them
            None => home.delete(&plain_manifest)?,
        }
        self.db.transaction("recording the stream metadata", |c| {
            c.execute(
                "INSERT OR REPLACE INTO published_state(key, value) VALUES ('stream_metadata', ?1), ('stream_metadata_version', ?2)",
                params![text, n.to_string()],
            )?;
            Ok(())
        })?;
        // the newest KEEP_VERSIONS versions stay
        let mut versions: Vec<String> = home
            .list(&dir)?
            .into_iter()
            .filter(|k| k.ends_with(".metadata.json"))
            .collect();
        versions.sort();
        let excess = versions.len().saturating_sub(KEEP_VERSIONS as usize);
        for key in &versions[..excess] {
            home.delete(key)?;
            // the manifest named for a pruned version goes with it
            if let Some(stem) = key.strip_suffix(".metadata.json") {
                let manifest = format!("{stem}.manifest.parquet");
                if home.get(&manifest)?.is_some() {
                    home.delete(&manifest)?;
                }
            }
        }
        Ok(())
    }

    /// Records that the stream is retired: a new stream metadata version (3) with its
    /// `retirement`. Nothing is written when it already says so.
    pub fn retire(&mut self, retirement: Retirement) -> Result<(), PublishError> {
        self.info.retirement = Some(retirement);
        self.ensure_stream_metadata()
    }

    /// Deletes what no kept version names, where the commit that dropped it is older than the
    /// grace period; returns the number of objects deleted.
    pub fn collect_garbage(&mut self) -> Result<usize, PublishError> {
        let now = now_us();
        let grace = self.grace.as_micros() as i64;
        let table = self.layout.table.clone();
        let mut deleted = 0;
        let current = self.versions.last().map_or(0, |v| v.version);
        let oldest_kept = current.saturating_sub(KEEP_VERSIONS - 1);
        // versions that fell out of the kept window: deletable once the version after them
        // has been current for the grace period
        let mut drop_versions = Vec::new();
        for (i, v) in self.versions.iter().enumerate() {
            if v.version >= oldest_kept {
                break;
            }
            let superseded_at = self
                .versions
                .get(i + 1)
                .map_or(i64::MAX, |n| n.committed_at_us);
            if now.saturating_sub(superseded_at) < grace {
                break;
            }
            for key in [
                format!("metadata/{}.metadata.json", v.stem),
                v.list_key.clone(),
                v.manifest_key.clone(),
            ] {
                table.delete(&key)?;
                deleted += 1;
            }
            drop_versions.push(v.version);
        }
        // data files removed by a version no kept version precedes
        let removed: Vec<(String, u64, i64)> = {
            let mut stmt = self
                .db
                .conn()
                .prepare(
                    "SELECT key, removed_version, removed_at_us FROM published_files WHERE removed_version IS NOT NULL",
                )
                .map_err(sql(&self.db, "reading removed published files"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)? as u64,
                        r.get(2)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(sql(&self.db, "reading removed published files"))?;
            rows
        };
        let mut drop_files = Vec::new();
        for (key, removed_version, removed_at) in removed {
            if removed_version <= oldest_kept && now.saturating_sub(removed_at) >= grace {
                table.delete(&key)?;
                deleted += 1;
                drop_files.push(key);
            }
        }
        if !drop_versions.is_empty() || !drop_files.is_empty() {
            self.db
                .transaction("forgetting deleted published files", |c| {
                    for v in &drop_versions {
                        c.execute(
                            "DELETE FROM published_versions WHERE version = ?1",
                            params![to_i64(*v)],
                        )?;
                    }
                    for k in &drop_files {
                        c.execute("DELETE FROM published_files WHERE key = ?1", params![k])?;
                    }
                    Ok(())
                })?;
            self.load()?;
        }
        Ok(deleted)
    }
}

/// One commit's plan, recorded before anything is written.
#[derive(Debug, Clone)]
struct Plan {
    version: u64,
    stem: String,
    snapshot_id: i64,
    seq: i64,
    operation: &'static str,
    added: Vec<PubFile>,
    removed: Vec<PubFile>,
    manifest_key: String,
    list_key: String,
}

fn file_json(f: &PubFile) -> Value {
    json!({"first": f.first, "last": f.last, "rows": f.rows, "bytes": f.bytes,
           "min_ts": f.min_ts, "max_ts": f.max_ts, "key": f.key,
           "snapshot_id": f.snapshot_id, "seq": f.seq})
}

fn file_from_json(v: &Value) -> Result<PubFile, PublishError> {
    let u = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| PublishError::Invariant(format!("pending publish: {k} missing")))
    };
    let i = |k: &str| {
        v[k].as_i64()
            .ok_or_else(|| PublishError::Invariant(format!("pending publish: {k} missing")))
    };
    Ok(PubFile {
        first: u("first")?,
        last: u("last")?,
        rows: u("rows")?,
        bytes: u("bytes")?,
        min_ts: i("min_ts")?,
        max_ts: i("max_ts")?,
        key: v["key"].as_str().unwrap_or_default().to_string(),
        snapshot_id: i("snapshot_id")?,
        seq: i("seq")?,
    })
}

impl Plan {
    fn to_json(&self, keys: &[String]) -> Value {
        json!({
            "version": self.version, "stem": self.stem, "snapshot_id": self.snapshot_id,
            "seq": self.seq, "operation": self.operation,
            "added": self.added.iter().map(file_json).collect::<Vec<_>>(),
            "removed": self.removed.iter().map(file_json).collect::<Vec<_>>(),
            "manifest_key": self.manifest_key, "list_key": self.list_key, "keys": keys,
        })
    }

    fn from_json(v: &Value) -> Result<Plan, PublishError> {
        let bad = |k: &str| PublishError::Invariant(format!("pending publish: {k} missing"));
        let files = |k: &str| -> Result<Vec<PubFile>, PublishError> {
            v[k].as_array()
                .ok_or_else(|| bad(k))?
                .iter()
                .map(file_from_json)
                .collect()
        };
        Ok(Plan {
            version: v["version"].as_u64().ok_or_else(|| bad("version"))?,
            stem: v["stem"].as_str().ok_or_else(|| bad("stem"))?.to_string(),
            snapshot_id: v["snapshot_id"]
                .as_i64()
                .ok_or_else(|| bad("snapshot_id"))?,
            seq: v["seq"].as_i64().ok_or_else(|| bad("seq"))?,
            operation: if v["operation"].as_str() == Some("delete") {
                "delete"
            } else {
                "append"
            },
            added: files("added")?,
            removed: files("removed")?,
            manifest_key: v["manifest_key"]
                .as_str()
                .ok_or_else(|| bad("manifest_key"))?
                .to_string(),
            list_key: v["list_key"]
                .as_str()
                .ok_or_else(|| bad("list_key"))?
                .to_string(),
        })
    }
}

fn version_to_json(v: &Version) -> Value {
    let s = &v.snapshot;
    json!({
        "version": v.version, "stem": v.stem, "list_key": v.list_key,
        "manifest_key": v.manifest_key, "committed_at_us": v.committed_at_us,
        "snapshot": {
            "snapshot_id": s.snapshot_id, "parent": s.parent, "sequence": s.sequence,
            "timestamp_ms": s.timestamp_ms, "manifest_list": s.manifest_list,
            "operation": s.operation, "added_files": s.added_files, "added_rows": s.added_rows,
            "removed_files": s.removed_files, "removed_rows": s.removed_rows,
            "total_files": s.total_files, "total_rows": s.total_rows,
            "metadata_file": s.metadata_file,
        }
    })
}

fn version_from_json(text: &str) -> Result<Version, PublishError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| PublishError::Invariant(format!("a published version in meta.db: {e}")))?;
    let s = &v["snapshot"];
    let u = |x: &Value| x.as_u64().unwrap_or(0);
    let st = |x: &Value| x.as_str().unwrap_or_default().to_string();
    Ok(Version {
        version: u(&v["version"]),
        stem: st(&v["stem"]),
        list_key: st(&v["list_key"]),
        manifest_key: st(&v["manifest_key"]),
        committed_at_us: v["committed_at_us"].as_i64().unwrap_or(0),
        snapshot: SnapshotInfo {
            snapshot_id: s["snapshot_id"].as_i64().unwrap_or(0),
            parent: s["parent"].as_i64(),
            sequence: s["sequence"].as_i64().unwrap_or(0),
            timestamp_ms: s["timestamp_ms"].as_i64().unwrap_or(0),
            manifest_list: st(&s["manifest_list"]),
            operation: if s["operation"].as_str() == Some("delete") {
                "delete"
            } else {
                "append"
            },
            added_files: u(&s["added_files"]),
            added_rows: u(&s["added_rows"]),
            removed_files: u(&s["removed_files"]),
            removed_rows: u(&s["removed_rows"]),
            total_files: u(&s["total_files"]),
            total_rows: u(&s["total_rows"]),
            metadata_file: st(&s["metadata_file"]),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(name: &str, start: u64, end: u64) -> SealedLog {
        SealedLog {
            entry: json!({"name": name, "start_offset": start, "end_offset": end}),
            record_count: end - start,
        }
    }

    fn names(logs: &[SealedLog]) -> Vec<&str> {
        logs.iter()
            .filter_map(|l| l.entry["name"].as_str())
            .collect()
    }

    #[test]
    fn sealed_logs_are_listed_back_to_the_first_hole() {
        let sealed = [log("t", 1, 301), log("t-v2", 301, 801)];
        // the live table starts at the last seam: both
        assert_eq!(names(listed_sealed_logs(&sealed, 801)), ["t", "t-v2"]);
        // retention has dropped the live log's first rows: none
        assert!(listed_sealed_logs(&sealed, 900).is_empty());
        // a migration made after retention had dropped t-v2's first rows (301..620): t-v2
        // starts past t's end, so t is past retention and unlisted
        let holed = [log("t", 1, 301), log("t-v2", 621, 801)];
        assert_eq!(names(listed_sealed_logs(&holed, 801)), ["t-v2"]);
        assert!(listed_sealed_logs(&holed, 802).is_empty());
        // three logs, the hole between the second and the third
        let three = [log("t", 1, 11), log("t-v2", 11, 21), log("t-v3", 30, 40)];
        assert_eq!(names(listed_sealed_logs(&three, 40)), ["t-v3"]);
        // an entry without offsets is taken to join
        let bare = [
            SealedLog {
                entry: json!({"name": "t"}),
                record_count: 0,
            },
            log("t-v2", 11, 21),
        ];
        assert_eq!(names(listed_sealed_logs(&bare, 21)), ["t", "t-v2"]);
        assert!(listed_sealed_logs(&[], 5).is_empty());
    }
}
