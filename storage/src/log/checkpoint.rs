//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses `wal_autocheckpoint` pages
//! (1,000 by default): that commit then copies the WAL into the database file and fsyncs it, a
//! stall of tens of milliseconds on a slow disk that every publisher waiting on the commit sees.
//! A writer that calls [`Buffer::checkpoint_elsewhere`](super::Buffer::checkpoint_elsewhere) turns
//! the automatic checkpoint off, and a maintenance thread runs [`Checkpointer::run`] on its own
//! connection instead. A PASSIVE checkpoint never blocks the writer or the readers; once it has
//! copied every frame and no reader still uses the WAL, the writer's next transaction starts the
//! WAL file over from its beginning, so commits overwrite already-allocated blocks instead of
//! growing the file.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::error::StorageError;
use super::DB_FILE_NAME;

/// What one checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Frames in the WAL when it ran.
    pub wal_frames: i64,
    /// Frames copied into the database file (equal to `wal_frames` when it caught up).
    pub checkpointed: i64,
}

/// A connection that only checkpoints one stream's buffer.
pub struct Checkpointer {
    conn: Connection,
    path: PathBuf,
}

impl Checkpointer {
    /// Opens `dir/buffer.db`, which must exist (the writer creates it).
    pub fn open(dir: &Path) -> Result<Checkpointer, StorageError> {
        let path = dir.join(DB_FILE_NAME);
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(StorageError::sqlite(&path, "opening for checkpoints"))?;
        Ok(Checkpointer { conn, path })
    }

    /// Runs one PASSIVE checkpoint: copies what it can without waiting for or blocking anyone.
    pub fn run(&self) -> Result<CheckpointStats, StorageError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok(CheckpointStats {
                    wal_frames: row.get(1)?,
                    checkpointed: row.get(2)?,
                })
            })
            .map_err(StorageError::sqlite(&self.path, "checkpointing"))
    }
}
