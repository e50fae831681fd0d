//! Cursor files: where a subscription resumes.
//!
//! The semantics follow the official client's: the file holds the offset of the **last row the
//! consumer finished with**, as decimal text and a newline; a subscription opened with it resumes
//! at the next offset. A row counts as finished only when the consumer asks for the next one (or
//! closes the subscription cleanly). The file is written atomically (a temporary file beside it,
//! fsynced, then renamed over it), at most once a second while rows flow and once more on a clean
//! close; it never moves backwards by itself; a consumer that fails (drops the subscription
//! without closing it) leaves the last saved position.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::ClientError;

/// At most one periodic save per this interval.
pub const SAVE_INTERVAL: Duration = Duration::from_secs(1);

/// A cursor file and the position it records.
#[derive(Debug)]
pub struct Cursor {
    path: PathBuf,
    saved: Option<u64>,
    pending: Option<u64>,
    last_save: Option<Instant>,
}

impl Cursor {
    /// Opens `path`: reads the last consumed offset when the file exists.
    pub fn open(path: &Path) -> Result<Cursor, ClientError> {
        let err = |msg: String| ClientError::Cursor {
            path: path.display().to_string(),
            msg,
        };
        let saved = match std::fs::read_to_string(path) {
            Ok(text) => Some(
                text.trim()
                    .parse::<u64>()
                    .ok()
                    // offsets are int64 on the wire: anything larger is a damaged file, never
                    // a reason to wrap around to 0 (EARLIEST) and replay everything
                    .filter(|&o| o < i64::MAX as u64)
                    .ok_or_else(|| err(format!("holds {:?}, not an offset", text.trim())))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(err(e.to_string())),
        };
        Ok(Cursor {
            path: path.to_path_buf(),
            saved,
            pending: None,
            last_save: None,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last consumed offset the file holds (what was read at open, or saved since).
    pub fn saved(&self) -> Option<u64> {
        self.saved
    }

    /// The offset a subscription should resume at: one after the saved one.
    pub fn resume_at(&self) -> Option<u64> {
        self.saved.map(|o| o + 1)
    }

    /// Records that the consumer finished with `offset` (not yet written).
    pub fn consumed(&mut self, offset: u64) {
        if self.pending.is_none_or(|p| offset > p) {
            self.pending = Some(offset);
        }
    }

    /// Writes the position if it moved forward and the last write is a second old.
    pub fn save_if_due(&mut self) -> Result<(), ClientError> {
        if self.last_save.is_some_and(|t| t.elapsed() < SAVE_INTERVAL) {
            return Ok(());
        }
        self.save()
    }

    /// Writes the position now if it moved forward (never backwards).
    pub fn save(&mut self) -> Result<(), ClientError> {
        let Some(p) = self.pending else { return Ok(()) };
        if self.saved.is_some_and(|s| p <= s) {
            return Ok(());
        }
        self.write(p)?;
        self.saved = Some(p);
        self.last_save = Some(Instant::now());
        Ok(())
    }

    /// Saves `offset` to `path` (write-then-rename) unless the file already holds an offset at
    /// or past it: the forward-only save a process makes on its way out (Ctrl-C), outside any
    /// [`Cursor`].
    pub fn save_forward(path: &Path, offset: u64) -> Result<(), ClientError> {
        let mut c = Cursor::open(path)?;
        c.consumed(offset);
        c.save()
    }

    fn write(&self, offset: u64) -> Result<(), ClientError> {
        let err = |e: std::io::Error| ClientError::Cursor {
            path: self.path.display().to_string(),
            msg: e.to_string(),
        };
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp.{}", std::process::id()));
        let tmp = self.path.with_file_name(name);
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(format!("{offset}\n").as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_forward_only_and_at_most_once_a_second() {
        let dir = std::env::temp_dir().join(format!("cc-cursor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c");
        let _ = std::fs::remove_file(&path);
        let mut c = Cursor::open(&path).unwrap();
        assert_eq!(c.resume_at(), None);
        c.consumed(5);
        c.save_if_due().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "5\n");
        c.consumed(6);
        c.save_if_due().unwrap(); // within the second: not written
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "5\n");
        c.save().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "6\n");
        c.consumed(3);
        c.save().unwrap();
        assert_eq!(Cursor::open(&path).unwrap().resume_at(), Some(7));
        std::fs::write(&path, "18446744073709551615").unwrap();
        assert!(
            Cursor::open(&path).is_err(),
            "past int64 is a damaged file, not a wrap to 0"
        );
        std::fs::write(&path, "junk").unwrap();
        assert!(Cursor::open(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
