//! A stream's logs: the live one and those earlier migrations sealed, kept in
//! `<data>/<stream>/logs.json`.
//!
//! A stream that was never migrated has no such file: its one log is its directory
//! `<data>/<stream>/`, named for the stream and starting at offset 1. A migration (the control
//! plane's `POST /control/v1/streams/{name}/migrations`) seals the live log, publishes all of it,
//! and starts the next one, `<stream>-v<N>`, in `<data>/<stream>/logs/<stream>-v<N>/`, at the
//! previous log's end offset (the **seam**): offsets continue, none is issued twice. Writing
//! this file (temporary file, fsync, rename, fsync of the directory) is the migration's commit
//! point: before it the stream is still on its old log, after it on the new one.
//!
//! Each sealed log is kept in the form the stream metadata lists it (`sealed_logs`,
//! PUBLISHED.md §3.2: the `live_log` keys plus `end_offset`, exclusive, and `end_ts`) with the
//! number of rows its published table holds. A log that never held a row is not listed (it
//! has no table); the next log still takes the next number.
//!
//! A sealed log past retention (no longer listed by the stream metadata, see
//! [`super::expiry`]) moves to `dropping` while its files are deleted, and leaves the file
//! once they are: writing that move is the point after which nothing reads the log again.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The file's name in the stream's directory.
pub const FILE: &str = "logs.json";

/// The directory (in the stream's directory) holding the logs after the first.
pub const LOGS_DIR: &str = "logs";

/// The log being written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveLog {
    /// Its name (`live_log.name`; its published table is `<published>/<name>`).
    pub name: String,
    /// Its directory relative to the stream's (empty: the stream's directory itself).
    pub dir: String,
    /// Its first offset (the seam it started at).
    pub start_offset: u64,
    /// Its place in the stream's sequence of logs: 1 for the first, N for `<stream>-vN`.
    pub number: u64,
}

pub use corecast_storage::published::SealedLog;

/// A stream's logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Generations {
    /// The live log.
    pub live: LiveLog,
    /// The sealed ones, oldest first.
    pub sealed: Vec<SealedLog>,
    /// Sealed logs past retention whose files are being deleted (absent from older files).
    pub dropping: Vec<SealedLog>,
}

impl Generations {
    /// A stream that was never migrated: one log, its own directory, from offset 1.
    pub fn first(stream: &str) -> Generations {
        Generations {
            live: LiveLog {
                name: stream.to_string(),
                dir: String::new(),
                start_offset: 1,
                number: 1,
            },
            sealed: Vec::new(),
            dropping: Vec::new(),
        }
    }

    /// The live log's directory, given the stream's.
    pub fn live_dir(&self, home: &Path) -> PathBuf {
        if self.live.dir.is_empty() {
            home.to_path_buf()
        } else {
            home.join(&self.live.dir)
        }
    }

    /// Whether the live log is the stream's first (its directory is the stream's).
    pub fn is_first(&self) -> bool {
        self.live.dir.is_empty()
    }

    /// The name and directory (relative) of the log after the live one: `<stream>-v<N>`.
    pub fn successor(&self, stream: &str) -> (String, String) {
        let name = format!("{stream}-v{}", self.live.number + 1);
        let dir = format!("{LOGS_DIR}/{name}");
        (name, dir)
    }

    /// The sealed logs, for the stream metadata and its manifest.
    pub fn sealed_entries(&self) -> Vec<SealedLog> {
        self.sealed.clone()
    }

    /// The directory of the log `name` (one this stream's successors made, or its first),
    /// given the stream's: the stream's own for its first log, `logs/<name>` for the others.
    pub fn dir_of(&self, home: &Path, stream: &str, name: &str) -> PathBuf {
        if name == stream {
            home.to_path_buf()
        } else {
            home.join(LOGS_DIR).join(name)
        }
    }

    fn to_json(&self) -> Value {
        let logs = |list: &[SealedLog]| {
            list.iter()
                .map(|s| json!({"entry": s.entry, "record_count": s.record_count}))
                .collect::<Vec<_>>()
        };
        let mut v = json!({
            "live": {"name": self.live.name, "dir": self.live.dir, "start_offset": self.live.start_offset, "number": self.live.number},
            "sealed": logs(&self.sealed),
        });
        if !self.dropping.is_empty() {
            v["dropping"] = json!(logs(&self.dropping));
        }
        v
    }

    fn from_json(v: &Value) -> Option<Generations> {
        let live = v.get("live")?;
        let dir = live.get("dir")?.as_str()?.to_string();
        // a relative path inside the stream's directory, nothing else
        if dir.starts_with('/') || dir.split('/').any(|p| p == ".." || p == ".") {
            return None;
        }
        Some(Generations {
            live: LiveLog {
                name: live.get("name")?.as_str()?.to_string(),
                dir,
                start_offset: live.get("start_offset")?.as_u64()?,
                number: live.get("number")?.as_u64()?,
            },
            sealed: sealed_list(v.get("sealed")?)?,
            dropping: match v.get("dropping") {
                Some(d) => sealed_list(d)?,
                None => Vec::new(),
            },
        })
    }
}

fn sealed_list(v: &Value) -> Option<Vec<SealedLog>> {
    v.as_array()?
        .iter()
        .map(|s| {
            let entry = s.get("entry")?;
            // a log's name is a file name in its stream's directory, nothing else
            let name = entry.get("name")?.as_str()?;
            if name.is_empty()
                || name.contains(['/', '\\'])
                || name.chars().any(char::is_control)
                || name == ".."
                || name == "."
            {
                return None;
            }
            Some(SealedLog {
                entry: entry.clone(),
                record_count: s.get("record_count")?.as_u64()?,
            })
        })
        .collect()
}

/// The logs of the stream in `home` (its directory) called `stream`; [`Generations::first`]
/// when it was never migrated. The error names the file.
pub fn load(home: &Path, stream: &str) -> Result<Generations, String> {
    let path = home.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let v: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
            Generations::from_json(&v).ok_or_else(|| {
                format!(
                    "{}: not a list of logs (live.name, live.dir, live.start_offset, sealed[].entry with its name, sealed[].record_count)",
                    path.display()
                )
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Generations::first(stream)),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `g` as the logs of the stream in `home`, atomically and durably.
pub fn save(home: &Path, g: &Generations) -> Result<(), String> {
    let path = home.join(FILE);
    let tmp = home.join(format!("{FILE}.tmp"));
    let text = serde_json::to_vec_pretty(&g.to_json()).map_err(|e| e.to_string())?;
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("writing", e))?;
        f.write_all(&text).map_err(|e| io("writing", e))?;
        f.sync_all().map_err(|e| io("syncing", e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming into place", e))?;
    std::fs::File::open(home)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing the directory of", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_never_migrated_has_one_log_in_its_directory() {
        let dir = tempfile::tempdir().expect("tmp");
        let g = load(dir.path(), "trades").expect("load");
        assert_eq!(g, Generations::first("trades"));
        assert_eq!(g.live_dir(dir.path()), dir.path());
        assert_eq!(
            g.successor("trades"),
            ("trades-v2".into(), "logs/trades-v2".into())
        );
    }

    #[test]
    fn saved_logs_read_back_and_bad_files_are_named() {
        let dir = tempfile::tempdir().expect("tmp");
        let g = Generations {
            live: LiveLog {
                name: "t-v2".into(),
                dir: "logs/t-v2".into(),
                start_offset: 101,
                number: 2,
            },
            sealed: vec![SealedLog {
                entry: json!({"name": "t", "start_offset": 1, "end_offset": 101}),
                record_count: 100,
            }],
            dropping: Vec::new(),
        };
        save(dir.path(), &g).expect("save");
        assert_eq!(load(dir.path(), "t").expect("load"), g);
        assert_eq!(g.live_dir(dir.path()), dir.path().join("logs/t-v2"));
        assert_eq!(g.successor("t").0, "t-v3");
        std::fs::write(
            dir.path().join(FILE),
            br#"{"live":{"name":"t","dir":"../x","start_offset":1,"number":1},"sealed":[]}"#,
        )
        .expect("write");
        let e = load(dir.path(), "t").expect_err("escapes");
        assert!(e.contains("logs.json"), "{e}");
    }
}
