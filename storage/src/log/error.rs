//! Errors of the buffer: [`StorageError`] for opening and reading, [`CommitFailed`] for a group
//! commit that did not land.
//!
//! Every message names the database file and the operation, so one log line says what failed, on
//! what, and why (STYLE.md §6).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Opening, recovering or reading a stream's buffer failed.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A file-system operation around the database failed (creating the stream directory, the
    /// writer lock file).
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
        "storage {}: schema differs from the stream's stored schema: stored {}, given {given}",
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
    /// The buffer is in a layout this build does not read: an older one that only the writer
    /// converts ([`super::Buffer::open`] does, once), or a newer one.
    #[error("storage {}: format_version {found}, this build reads {supported} ({})", path.display(), if found < supported { "opening the stream for writing, as `corecast serve` does, converts it" } else { "written by a newer corecast: run that version" })]
    Format {
        /// The database file.
        path: PathBuf,
        /// The `format_version` stored in `meta`.
        found: i64,
        /// The version this build writes and reads.
        supported: i64,
    },
    /// The database holds something the buffer never writes (a missing meta key, a negative
    /// offset): it was damaged or written by something else.
    #[error("storage {}: corrupt buffer: {detail}", path.display())]
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
    /// The database file.
    pub path: PathBuf,
    /// SQLite's error text.
    pub detail: String,
    /// SQLite said the disk (or the database's size cap) is full.
    pub disk_full: bool,
    /// Batches in the failed commit.
    pub batches_count: usize,
    /// Rows in the failed commit (duplicates included).
    pub rows_count: usize,
}

impl StorageError {
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
