//! Errors of the log: [`StorageError`] for opening and reading, [`CommitFailed`] for a group
//! commit that did not land.
//!
//! Every message names the file and the operation, so one log line says what failed, on
//! what, and why (STYLE.md §6).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Opening, recovering or reading a stream's buffer failed.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A file-system operation failed (creating the stream directory, the writer lock file,
    /// reading or writing a segment).
    #[error("storage {}: {op}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What was being done, e.g. `creating the stream directory`.
        op: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// SQLite refused an operation on the buffer database.
    #[error("storage {}: {op}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done, e.g. `opening`, `scanning rows`.
        op: &'static str,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// Another [`Buffer`](super::Buffer) (in this process or another one) already writes this
    /// stream; a stream has exactly one writer.
    #[error("storage {}: already open for writing by another writer; a stream has one writer", path.display())]
    Locked {
        /// The lock file that is held.
        path: PathBuf,
    },
    /// The caller's schema differs from the one stored when the stream was created. The buffer
    /// never rewrites its schema: the engine decides what to do (refuse, or open a new stream).
    #[error(
        "storage {}: schema differs from the stream's stored schema: stored {}, given {given} (a stream's schema is fixed: give the new schema a new stream name, or start on a new data directory)",
        path.display(),
        stored.as_deref().unwrap_or("none")
    )]
    SchemaMismatch {
        /// The database file.
        path: PathBuf,
        /// The schema text stored at creation (`None`: the stream was created without one).
        stored: Option<String>,
        /// The schema text the caller passed.
        given: String,
    },
    /// The stream's `meta.db` is of a layout this build does not read (written by a newer
    /// corecast).
    #[error("storage {}: format_version {found}, this build reads {supported} ({})", path.display(), if found > supported { "written by a newer corecast: run that version" } else { "not a layout this build reads" })]
    Format {
        /// The database file.
        path: PathBuf,
        /// The `format_version` stored in `meta`.
        found: i64,
        /// The version this build writes and reads.
        supported: i64,
    },
    /// A SQLite `buffer.db` of a layout this build no longer converts (format 1: one SQLite row
    /// per log row).
    #[error("storage {}: a buffer of format_version {found}, which this build no longer converts: open the stream once with corecast 0.1 (it rewrites the buffer as format 2), then with this build", path.display())]
    Legacy {
        /// The old database file.
        path: PathBuf,
        /// Its `format_version`.
        found: i64,
    },
    /// A file holds something the log never writes (a record whose CRC fails in the middle of
    /// a segment, a missing segment, a missing meta key): it was damaged or written by something
    /// else. Nothing is skipped: the stream does not open until the file is restored or removed.
    #[error("storage {}: corrupt log: {detail}", path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong, with the offending value.
        detail: String,
    },
}

/// A group commit failed (disk full, I/O error, …). Every batch of the commit failed with it:
/// nothing of it was written, and the writer's in-memory state (end offset, publisher marks,
/// dedupe window) is as it was before, so re-submitting the same batches is exact.
///
/// On the wire each batch of the commit answers `{"error":"commit_failed","detail":…}`
/// (PROTOCOL.md §7) with [`CommitFailed::detail`].
#[derive(Debug, Clone, Error)]
#[error("storage {}: {} committing {rows_count} rows in {batches_count} batches: {detail}", path.display(), if *disk_full { "disk full" } else { "commit failed" })]
pub struct CommitFailed {
    /// The segment file (or log directory) the commit failed on.
    pub path: PathBuf,
    /// What failed and the operating system's error.
    pub detail: String,
    /// The disk (or a quota) is full: ENOSPC or EDQUOT.
    pub disk_full: bool,
    /// Batches in the failed commit.
    pub batches_count: usize,
    /// Rows in the failed commit (duplicates included).
    pub rows_count: usize,
}

impl CommitFailed {
    /// What a publisher is told: whether the disk is full, how much was refused, and that none
    /// of it is stored — without the file or the operating system's text, which name paths of
    /// the server (the full form, [`std::fmt::Display`], goes to the broker's log).
    pub fn public(&self) -> String {
        format!(
            "{} committing {} rows in {} batches: nothing of it is stored{}",
            if self.disk_full {
                "disk full"
            } else {
                "the log could not store the commit"
            },
            self.rows_count,
            self.batches_count,
            if self.disk_full {
                "; publish again once the operator has freed space (the broker's log names the file)"
            } else {
                " (the broker's log names the file and the error)"
            }
        )
    }
}

impl StorageError {
    /// A `map_err` adapter: wraps an I/O error with the file and `op`.
    pub(crate) fn io<'a>(
        path: &'a Path,
        op: &'static str,
    ) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
        move |source| StorageError::Io {
            path: path.to_owned(),
            op,
            source,
        }
    }

    /// A `map_err` adapter: wraps a SQLite error with the database file and `op`, copying the
    /// path only when there is an error.
    pub(crate) fn sqlite<'a>(
        path: &'a Path,
        op: &'static str,
    ) -> impl FnOnce(rusqlite::Error) -> StorageError + 'a {
        move |source| StorageError::Sqlite {
            path: path.to_owned(),
            op,
            source,
        }
    }
}
