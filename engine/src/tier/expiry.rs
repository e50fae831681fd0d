//! Sealed logs past retention: their files are deleted.
//!
//! The stream metadata lists a migrated stream's sealed logs only while they join the live
//! log's table without a hole (`published::table::listed_sealed_logs`): once retention has
//! dropped the live log's first rows, every sealed log is past retention too, and a sealed log
//! older than a hole between two of them (a migration made while retention was past the
//! older seam) is unlisted as well. Once a sealed log has been unlisted for the stream's
//! `published_grace` — a catch-up that resolved an older version of the stream metadata, which
//! still listed it, can finish reading — its files go: its published table, then its local
//! files (`logs/<name>/` whole for a log a migration made; the sealed segments, `segments/`,
//! and the local table `published/<name>/` for the stream's first log, whose directory is the
//! stream's own and also holds its `logs.json`).
//!
//! **Where those files are** is worked out from this broker's own data directory and its
//! configured location, never taken from `logs.json`'s recorded `published` URI: a data
//! directory copied elsewhere (or a `logs.json` edited by hand) must not make this broker
//! delete another's table, or anything outside the stream's directory and its location. A
//! table recorded somewhere else (the location changed since the migration) is left in place,
//! with a note in the log.
//!
//! In: the stream's [`Generations`] (this thread is the only writer of `logs.json` while the
//! stream serves; a migration runs with the stream stopped) and, each turn, the names of the
//! sealed logs the stream metadata as last written does not list. Out: `logs.json` rewritten,
//! files deleted. A failure (a file that cannot be deleted, a `logs.json` entry that makes no
//! sense) is the caller's to report and retry; it never holds up publishing.
//!
//! Crash-safe by its order: every entry is checked, then `logs.json` moves the logs from
//! `sealed` to `dropping` (after that no stream metadata this broker writes names them again),
//! then their files are deleted, then `logs.json` forgets them. A crash between leaves
//! `dropping` entries, whose deletion the next turn (after a restart, the first) finishes;
//! deleting what is already gone is no error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corecast_storage::published::layout::LOCAL_PUBLISHED_DIR;
use corecast_storage::published::{S3Options, Store};
use corecast_storage::tier::SEGMENTS_DIR_NAME;

use super::generations::{self, Generations, SealedLog};

/// The sealed-log expiry of one stream, run by its publishing job.
pub struct SealedExpiry {
    home: PathBuf,
    stream: String,
    /// The prefix the tables of a configured location live under (`<location>/<stream>`, a
    /// log's table `<prefix>/<log>`); `None` for the local default.
    location: Option<String>,
    s3: S3Options,
    grace: Duration,
    logs: Generations,
    /// When this process first saw each sealed log unlisted (a restart starts the grace period
    /// again: it errs on the side of keeping files).
    unlisted_since: HashMap<String, Instant>,
}

impl SealedExpiry {
    /// The expiry of stream `stream` in `home` (its directory), whose logs are `logs`; its
    /// tables are under `location` (`<location>/<stream>`) or, with `None`, in the local
    /// default layout.
    pub fn new(
        home: PathBuf,
        stream: String,
        location: Option<String>,
        s3: S3Options,
        grace: Duration,
        logs: Generations,
    ) -> SealedExpiry {
        SealedExpiry {
            home,
            stream,
            location: location.map(|l| l.trim_end_matches('/').to_string()),
            s3,
            grace,
            logs,
            unlisted_since: HashMap::new(),
        }
    }

    /// The sealed logs still kept (what the stream metadata may list).
    pub fn sealed(&self) -> &[SealedLog] {
        &self.logs.sealed
    }

    /// Whether anything is left to do (a sealed log kept, or one being deleted).
    pub fn idle(&self) -> bool {
        self.logs.sealed.is_empty() && self.logs.dropping.is_empty()
    }

    /// One look. `unlisted`: the names of the sealed logs the stream metadata as last written
    /// does not list. Returns the logs whose files were deleted, by name.
    ///
    /// # Errors
    ///
    /// An entry of `logs.json` that names no log of this stream (nothing is moved or deleted
    /// then), or a file that could not be written or deleted, named; the next turn tries again
    /// and finishes what is left.
    pub fn turn(&mut self, unlisted: &[String]) -> Result<Vec<String>, String> {
        if self.idle() {
            return Ok(Vec::new());
        }
        let now = Instant::now();
        self.unlisted_since
            .retain(|name, _| unlisted.contains(name));
        for name in unlisted {
            self.unlisted_since.entry(name.clone()).or_insert(now);
        }
        let due: Vec<SealedLog> = self
            .logs
            .sealed
            .iter()
            .filter(|log| {
                log_name(log).is_some_and(|n| {
                    self.unlisted_since
                        .get(n)
                        .is_some_and(|since| since.elapsed() >= self.grace)
                })
            })
            .cloned()
            .collect();
        if !due.is_empty() {
            // every entry checked before logs.json changes
            for log in &due {
                self.target(log)?;
            }
            let mut after = self.logs.clone();
            after.sealed.retain(|log| !due.contains(log));
            after.dropping.extend(due);
            generations::save(&self.home, &after)?;
            self.logs = after;
        }
        if self.logs.dropping.is_empty() {
            return Ok(Vec::new());
        }
        let targets = self
            .logs
            .dropping
            .iter()
            .map(|log| self.target(log))
            .collect::<Result<Vec<_>, _>>()?;
        let mut deleted = Vec::new();
        for target in &targets {
            self.delete(target)?;
            deleted.push(target.name.clone());
        }
        let mut after = self.logs.clone();
        after.dropping.clear();
        generations::save(&self.home, &after)?;
        self.logs = after;
        Ok(deleted)
    }

    /// What deleting the sealed log `log` deletes: paths worked out from this stream's
    /// directory and location alone. `Err` names what in `logs.json` is wrong.
    fn target(&self, log: &SealedLog) -> Result<Target, String> {
        let file = self.home.join(generations::FILE);
        let Some(name) = log_name(log) else {
            return Err(format!(
                "{}: a sealed log without a name: {}",
                file.display(),
                log.entry
            ));
        };
        // a file name in the stream's directory (generations checks it at load too)
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains(['/', '\\'])
            || name.chars().any(char::is_control)
        {
            return Err(format!(
                "{}: the sealed log {name:?} is not a log's name",
                file.display()
            ));
        }
        // never the live log's files
        if name == self.logs.live.name {
            return Err(format!(
                "{}: the sealed log {name} is the live log",
                file.display()
            ));
        }
        let first = name == self.stream;
        if first && self.logs.is_first() {
            return Err(format!(
                "{}: the sealed log {name} is the stream's first log, which is the live one",
                file.display()
            ));
        }
        let dir = self.logs.dir_of(&self.home, &self.stream, name);
        let (local, local_table) = if first {
            (
                vec![
                    dir.join(SEGMENTS_DIR_NAME),
                    dir.join(LOCAL_PUBLISHED_DIR).join(name),
                ],
                dir.join(LOCAL_PUBLISHED_DIR),
            )
        } else {
            (vec![dir.clone()], dir.join(LOCAL_PUBLISHED_DIR))
        };
        // where this broker put the log's table; the recorded URI only to see whether it
        // agrees (a table recorded elsewhere is not this broker's to delete)
        let (table, prefix) = match &self.location {
            Some(prefix) => (Some(format!("{prefix}/{name}")), prefix.clone()),
            None => {
                let abs = std::path::absolute(&local_table).unwrap_or(local_table);
                (None, format!("file://{}", abs.display()))
            }
        };
        let recorded = log
            .entry
            .get("published")
            .and_then(serde_json::Value::as_str);
        let elsewhere = recorded
            .map(|r| r.trim_end_matches('/'))
            .filter(|r| *r != prefix)
            .map(|r| format!("{r}/{name}"));
        Ok(Target {
            name: name.to_string(),
            first,
            table,
            local,
            elsewhere,
        })
    }

    /// Deletes `target`'s table on the configured location, every object, then its local
    /// files.
    fn delete(&self, target: &Target) -> Result<(), String> {
        let mut objects = 0;
        if let Some(uri) = &target.table {
            let table = Store::open(uri, &self.s3).map_err(|e| e.to_string())?;
            let keys = table.list("").map_err(|e| e.to_string())?;
            for key in &keys {
                table.delete(key).map_err(|e| e.to_string())?;
            }
            if let Some(root) = table.local_path("") {
                remove_dir(&root)?;
            }
            objects += keys.len();
        }
        for dir in &target.local {
            objects += remove_dir(dir)?;
        }
        // the first log's directories left empty (its emptied hot log, the local tables' root)
        if target.first {
            for dir in [
                self.home.join(corecast_storage::log::LOG_DIR_NAME),
                self.home.join(LOCAL_PUBLISHED_DIR),
            ] {
                let _ = std::fs::remove_dir(dir);
            }
        }
        if let Some(uri) = &target.elsewhere {
            tracing::warn!(
                stream = %self.stream,
                log = %target.name,
                "retention: the sealed log {}'s table is recorded at {uri}, not where this broker puts it (the data directory or the location changed since): it is left there; remove it by hand if nothing else uses it",
                target.name
            );
        }
        tracing::info!(
            stream = %self.stream,
            log = %target.name,
            objects,
            "retention: deleted the sealed log {} ({}{}): it is older than every row the stream still holds",
            target.name,
            target.table.as_deref().map_or(String::new(), |t| format!("{t}, ")),
            target
                .local
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(())
    }
}

/// A sealed log's `name`.
fn log_name(log: &SealedLog) -> Option<&str> {
    log.entry.get("name").and_then(serde_json::Value::as_str)
}

/// A sealed log's files.
struct Target {
    name: String,
    /// Whether it is the stream's first log (whose directory is the stream's own).
    first: bool,
    /// Its table on the configured location (`<location>/<stream>/<name>`); `None` in the
    /// local default layout, where the table is among `local`.
    table: Option<String>,
    /// Its local directory; for the stream's first log, its sealed segments' and its local
    /// table's.
    local: Vec<PathBuf>,
    /// The table `logs.json` records, when that is not where this broker puts it (left alone).
    elsewhere: Option<String>,
}

/// Removes `dir` and everything in it; returns the files it held. A missing one is no error.
fn remove_dir(dir: &Path) -> Result<usize, String> {
    let files = count_files(dir);
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(files),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("deleting {}: {e}", dir.display())),
    }
}

/// The files under `dir` (for the log line; what cannot be read counts as none).
fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => count_files(&e.path()),
                Ok(_) => 1,
                Err(_) => 0,
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::generations::LiveLog;
    use serde_json::json;

    /// A stream `t` migrated twice: sealed logs `t` (the stream's directory) and `t-v2`, live
    /// `t-v3`, each with a table and sealed segments in the local default layout.
    fn migrated(home: &Path) -> Generations {
        let published = |dir: &Path| format!("file://{}/published", dir.display());
        let sealed = |name: &str, dir: &Path, start: u64, end: u64| SealedLog {
            entry: json!({"name": name, "published": published(dir), "start_offset": start, "end_offset": end}),
            record_count: end - start,
        };
        for (name, dir) in [
            ("t", home.to_path_buf()),
            ("t-v2", home.join("logs/t-v2")),
            ("t-v3", home.join("logs/t-v3")),
        ] {
            for f in [
                format!("published/{name}/data/a.parquet"),
                format!("published/{name}/metadata/v1.metadata.json"),
                "segments/1.parquet".to_string(),
            ] {
                let p = dir.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, b"x").unwrap();
            }
        }
        std::fs::write(home.join("meta.db"), b"kept").unwrap();
        Generations {
            live: LiveLog {
                name: "t-v3".into(),
                dir: "logs/t-v3".into(),
                start_offset: 201,
                number: 3,
            },
            sealed: vec![
                sealed("t", home, 1, 101),
                sealed("t-v2", &home.join("logs/t-v2"), 101, 201),
            ],
            dropping: Vec::new(),
        }
    }

    fn expiry(home: &Path, logs: Generations, grace: Duration) -> SealedExpiry {
        generations::save(home, &logs).unwrap();
        SealedExpiry::new(
            home.to_path_buf(),
            "t".into(),
            None,
            S3Options::default(),
            grace,
            logs,
        )
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn listed_logs_and_logs_within_the_grace_period_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let logs = migrated(home);
        let mut x = expiry(home, logs.clone(), Duration::from_secs(3600));
        assert!(x.turn(&[]).unwrap().is_empty());
        // unlisted, but for less than the grace period
        assert!(x.turn(&names(&["t", "t-v2"])).unwrap().is_empty());
        assert_eq!(generations::load(home, "t").unwrap(), logs);
        assert!(home.join("published/t/data/a.parquet").exists());
        assert!(home.join("logs/t-v2/segments/1.parquet").exists());
    }

    #[test]
    fn unlisted_past_the_grace_period_the_sealed_logs_files_go_and_the_live_logs_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let logs = migrated(home);
        let mut x = expiry(home, logs.clone(), Duration::ZERO);
        assert_eq!(x.turn(&names(&["t", "t-v2"])).unwrap(), vec!["t", "t-v2"]);
        assert!(x.sealed().is_empty());
        let after = generations::load(home, "t").unwrap();
        assert_eq!(after.live, logs.live);
        assert!(after.sealed.is_empty() && after.dropping.is_empty());
        // the first log's table and segments, the second's directory whole
        assert!(!home.join("published/t").exists());
        assert!(!home.join("segments").exists());
        assert!(!home.join("logs/t-v2").exists());
        // the stream's own files and the live log's
        assert!(home.join("meta.db").exists() && home.join("logs.json").exists());
        assert!(home
            .join("logs/t-v3/published/t-v3/data/a.parquet")
            .exists());
        assert!(home.join("logs/t-v3/segments/1.parquet").exists());
        // nothing left to do
        assert!(x.idle());
        assert!(x.turn(&names(&["t", "t-v2"])).unwrap().is_empty());
    }

    #[test]
    fn a_crash_after_the_move_to_dropping_is_finished_at_the_next_start() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let mut logs = migrated(home);
        // what a crash right after the commit point leaves: the logs in `dropping`, one of
        // them already partly deleted
        logs.dropping = std::mem::take(&mut logs.sealed);
        std::fs::remove_dir_all(home.join("published/t")).unwrap();
        let mut x = expiry(home, logs.clone(), Duration::from_secs(3600));
        let reloaded = generations::load(home, "t").unwrap();
        assert_eq!(reloaded.dropping.len(), 2, "dropping survives in logs.json");
        // the grace period was spent before the move: no wait, whatever the stream metadata says
        assert_eq!(x.turn(&[]).unwrap(), vec!["t", "t-v2"]);
        assert!(!home.join("segments").exists() && !home.join("logs/t-v2").exists());
        let after = generations::load(home, "t").unwrap();
        assert!(after.dropping.is_empty());
    }

    #[test]
    fn only_the_unlisted_logs_go_and_only_once_each_has_had_its_grace_period() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let logs = migrated(home);
        let mut x = expiry(home, logs.clone(), Duration::from_millis(300));
        // the oldest unlisted (a hole after it), the other still listed
        assert!(x.turn(&names(&["t"])).unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(x.turn(&names(&["t"])).unwrap(), vec!["t"]);
        assert_eq!(x.sealed(), &logs.sealed[1..]);
        assert!(!home.join("segments").exists());
        assert!(home.join("logs/t-v2/segments/1.parquet").exists());
        // t-v2 unlisted now: its own grace period starts
        assert!(x.turn(&names(&["t-v2"])).unwrap().is_empty());
        assert!(home.join("logs/t-v2").exists());
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(x.turn(&names(&["t-v2"])).unwrap(), vec!["t-v2"]);
        assert!(!home.join("logs/t-v2").exists());
    }

    #[test]
    fn a_table_recorded_elsewhere_is_left_alone_and_the_local_files_go() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("copy/t");
        std::fs::create_dir_all(&home).unwrap();
        let mut logs = migrated(&home);
        // what a copied data directory's logs.json says: the original's tables, which must
        // survive (as must anything a hand edit points at)
        let orig = tmp.path().join("orig/t");
        for (i, name) in ["t", "t-v2"].iter().enumerate() {
            let elsewhere = if i == 0 {
                orig.join("published")
            } else {
                tmp.path().join("victim")
            };
            std::fs::create_dir_all(elsewhere.join(name).join("data")).unwrap();
            std::fs::write(elsewhere.join(name).join("data/keep"), b"x").unwrap();
            logs.sealed[i].entry["published"] = json!(format!("file://{}", elsewhere.display()));
        }
        let mut x = expiry(&home, logs, Duration::ZERO);
        assert_eq!(x.turn(&names(&["t", "t-v2"])).unwrap(), vec!["t", "t-v2"]);
        assert!(orig.join("published/t/data/keep").exists());
        assert!(tmp.path().join("victim/t-v2/data/keep").exists());
        // this copy's own files went
        assert!(!home.join("published/t").exists() && !home.join("segments").exists());
        assert!(!home.join("logs/t-v2").exists());
        assert!(home
            .join("logs/t-v3/published/t-v3/data/a.parquet")
            .exists());
    }

    #[test]
    fn entries_naming_no_sealed_log_are_refused_before_anything_moves() {
        for bad in ["t-v3", "", "..", "a/b", "x\u{0}y"] {
            let tmp = tempfile::tempdir().unwrap();
            let home = tmp.path();
            let mut logs = migrated(home);
            logs.sealed[1].entry["name"] = json!(bad);
            let mut x = expiry(home, logs.clone(), Duration::ZERO);
            let e = x.turn(&names(&["t", bad])).expect_err("refused");
            assert!(e.contains("logs.json"), "{bad:?}: {e}");
            // nothing moved to dropping, nothing deleted
            let raw: serde_json::Value =
                serde_json::from_slice(&std::fs::read(home.join(generations::FILE)).unwrap())
                    .unwrap();
            assert_eq!(raw["sealed"].as_array().map(Vec::len), Some(2), "{bad:?}");
            assert!(raw.get("dropping").is_none(), "{bad:?}");
            assert!(home.join("segments/1.parquet").exists(), "{bad:?}");
            assert!(
                home.join("logs/t-v3/segments/1.parquet").exists(),
                "{bad:?}"
            );
        }
    }
}
