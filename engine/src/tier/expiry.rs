//! Sealed logs past retention: their files are deleted.
//!
//! Once retention reaches a migrated stream's live log (its table no longer starts at the
//! seam), every sealed log is past retention too and the stream metadata stops listing them
//! (`published::table::listed_sealed_logs`). Once that has been so for the stream's
//! `published_grace` — a catch-up that resolved an older version of the stream metadata, which
//! still listed them, can finish reading — each sealed log's files go: every object of its
//! published table (`<published>/<name>/`, local or on S3), then its local directory
//! (`logs/<name>/` whole for a log a migration made; the sealed segments, `segments/`, for the
//! stream's first log, whose directory is the stream's own and also holds its `logs.json`).
//!
//! In: the stream's [`Generations`] (this thread is the only writer of `logs.json` while the
//! stream serves; a migration runs with the stream stopped) and, each turn, whether the stream
//! metadata as last written lists the sealed logs. Out: `logs.json` rewritten, files deleted.
//!
//! Crash-safe by its order: `logs.json` first moves the logs from `sealed` to `dropping` (after
//! that no stream metadata this broker writes names them again), then their files are deleted,
//! then `logs.json` forgets them. A crash between leaves `dropping` entries, whose deletion the
//! next turn (after a restart, the first) finishes; deleting what is already gone is no error.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corecast_storage::published::{S3Options, Store};

use super::generations::{self, Generations, SealedLog};

/// The sealed-log expiry of one stream, run by its publishing job.
pub struct SealedExpiry {
    home: PathBuf,
    stream: String,
    s3: S3Options,
    grace: Duration,
    logs: Generations,
    /// When this process first saw the stream metadata list no sealed log (a restart starts
    /// the grace period again: it errs on the side of keeping files).
    unlisted_since: Option<Instant>,
}

impl SealedExpiry {
    /// The expiry of stream `stream` in `home` (its directory), whose logs are `logs`.
    pub fn new(
        home: PathBuf,
        stream: String,
        s3: S3Options,
        grace: Duration,
        logs: Generations,
    ) -> SealedExpiry {
        SealedExpiry {
            home,
            stream,
            s3,
            grace,
            logs,
            unlisted_since: None,
        }
    }

    /// The sealed logs still kept (what the stream metadata may list).
    pub fn sealed(&self) -> &[SealedLog] {
        &self.logs.sealed
    }

    /// One look. `listed`: whether the stream metadata as last written lists the sealed logs.
    /// Returns the logs whose files were deleted, by name.
    ///
    /// # Errors
    ///
    /// A file that could not be written or deleted, named; the turn is tried again later and
    /// finishes what is left.
    pub fn turn(&mut self, listed: bool) -> Result<Vec<String>, String> {
        if self.logs.sealed.is_empty() && self.logs.dropping.is_empty() {
            return Ok(Vec::new());
        }
        if !self.logs.sealed.is_empty() {
            if listed {
                self.unlisted_since = None;
            } else {
                let since = *self.unlisted_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.grace {
                    let mut after = self.logs.clone();
                    let past = std::mem::take(&mut after.sealed);
                    after.dropping.extend(past);
                    generations::save(&self.home, &after)?;
                    self.logs = after;
                }
            }
        }
        if self.logs.dropping.is_empty() {
            return Ok(Vec::new());
        }
        // every entry checked before anything is deleted
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

    /// What deleting the sealed log `log` deletes; `Err` names what in `logs.json` is wrong.
    fn target(&self, log: &SealedLog) -> Result<Target, String> {
        let file = self.home.join(generations::FILE);
        let text = |k: &str| log.entry.get(k).and_then(serde_json::Value::as_str);
        let (Some(name), Some(published)) = (text("name"), text("published")) else {
            return Err(format!(
                "{}: a sealed log without name or published: {}",
                file.display(),
                log.entry
            ));
        };
        // never the live log's files (a logs.json edited by hand could name it)
        let dir = self.logs.dir_of(&self.home, &self.stream, name);
        if name == self.logs.live.name || dir == self.logs.live_dir(&self.home) {
            return Err(format!(
                "{}: the sealed log {name} is the live log",
                file.display()
            ));
        }
        // the stream's first log: its directory is the stream's own; its sealed segments and
        // its table in the local default layout are the bulk (its hot segments went at the
        // migration). Named here too, the table goes even if the data directory was moved
        // since `published` was recorded.
        let local = if dir == self.home {
            vec![
                dir.join(corecast_storage::tier::SEGMENTS_DIR_NAME),
                dir.join(corecast_storage::published::layout::LOCAL_PUBLISHED_DIR)
                    .join(name),
            ]
        } else {
            vec![dir]
        };
        Ok(Target {
            name: name.to_string(),
            table: format!("{}/{name}", published.trim_end_matches('/')),
            local,
        })
    }

    /// Deletes `target`'s table, every object, then its local directory.
    fn delete(&self, target: &Target) -> Result<(), String> {
        let table = Store::open(&target.table, &self.s3).map_err(|e| e.to_string())?;
        let keys = table.list("").map_err(|e| e.to_string())?;
        for key in &keys {
            table.delete(key).map_err(|e| e.to_string())?;
        }
        if let Some(root) = table.local_path("") {
            remove_dir(&root)?;
        }
        for dir in &target.local {
            remove_dir(dir)?;
        }
        tracing::info!(
            stream = %self.stream,
            log = %target.name,
            table = %target.table,
            objects = keys.len(),
            "retention: deleted the sealed log {} (its table and {}): it is older than every row the stream still holds",
            target.name,
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

/// A sealed log's files.
struct Target {
    name: String,
    /// Its table's location (`<published>/<name>`).
    table: String,
    /// Its local directory; for the stream's first log, its sealed segments' and its local
    /// table's.
    local: Vec<PathBuf>,
}

/// Removes `dir` and everything in it; a missing one is no error.
fn remove_dir(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("deleting {}: {e}", dir.display())),
    }
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
            S3Options::default(),
            grace,
            logs,
        )
    }

    #[test]
    fn listed_logs_and_logs_within_the_grace_period_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let logs = migrated(home);
        let mut x = expiry(home, logs.clone(), Duration::from_secs(3600));
        assert!(x.turn(true).unwrap().is_empty());
        // unlisted, but for less than the grace period
        assert!(x.turn(false).unwrap().is_empty());
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
        assert_eq!(x.turn(false).unwrap(), vec!["t", "t-v2"]);
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
        assert!(x.turn(false).unwrap().is_empty());
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
        assert_eq!(x.turn(true).unwrap(), vec!["t", "t-v2"]);
        assert!(!home.join("segments").exists() && !home.join("logs/t-v2").exists());
        let after = generations::load(home, "t").unwrap();
        assert!(after.dropping.is_empty());
    }

    #[test]
    fn the_first_logs_local_table_goes_even_when_the_data_directory_was_moved() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let mut logs = migrated(home);
        // `published` as recorded before the data directory moved here
        logs.sealed[0].entry["published"] = json!("file:///srv/old-data/t/published");
        let mut x = expiry(home, logs, Duration::ZERO);
        assert_eq!(x.turn(false).unwrap(), vec!["t", "t-v2"]);
        assert!(!home.join("published/t").exists() && !home.join("segments").exists());
        assert!(home
            .join("logs/t-v3/published/t-v3/data/a.parquet")
            .exists());
    }

    #[test]
    fn a_sealed_entry_naming_the_live_log_is_refused_and_deletes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path();
        let mut logs = migrated(home);
        logs.sealed[1].entry["name"] = json!("t-v3");
        let mut x = expiry(home, logs, Duration::ZERO);
        let e = x.turn(false).expect_err("refused");
        assert!(
            e.contains("logs.json") && e.contains("t-v3 is the live log"),
            "{e}"
        );
        assert!(home.join("logs/t-v3/segments/1.parquet").exists());
    }
}
