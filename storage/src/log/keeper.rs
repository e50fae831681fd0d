//! The keeper: one background thread per open hot log that does the slow file-system work of
//! rolling segments away from the commit path.
//!
//! In: `KeeperMsg`s from the writer over a bounded channel ([`KEEPER_QUEUE`]; the writer sends
//! at most one spare request per segment and one roll notice per roll, so it never waits on it in
//! practice). Out: preallocated spare files, over a channel of one.
//!
//! - `MakeSpare`: creates `spare.seg.tmp`, preallocates it (`fallocate`, then zeros written
//!   over it, so appends never convert unwritten extents), syncs it, renames it to
//!   `spare.seg` and syncs the directory, then hands the file to the writer, which writes the next
//!   segment's header and first record into it when the current segment is full.
//! - `Rolled`: syncs the directory (the writer renamed the spare to its segment name: recovery
//!   adopts a spare whose header is written, so the rename need not be durable before the ack)
//!   and raises `meta.db`'s frontier to the end of the new segment's first record, which lets
//!   recovery tell a lost newest segment from a log that never reached it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::sync::Mutex;
use std::thread::JoinHandle;

use super::meta::MetaDb;
use super::segment::{self, SPARE_FILE_NAME, TMP_SUFFIX};

/// Messages the keeper's queue holds at most.
pub const KEEPER_QUEUE: usize = 8;

/// Work for the keeper.
#[derive(Debug)]
pub(crate) enum KeeperMsg {
    /// Preallocate a spare segment of this many bytes.
    MakeSpare(u64),
    /// The writer started a segment; its first record ends at this offset.
    Rolled(u64),
}

/// The writer's handle on its keeper thread. Dropping it stops the thread after the messages
/// already queued.
#[derive(Debug)]
pub(crate) struct Keeper {
    tx: Option<SyncSender<KeeperMsg>>,
    spares: Receiver<io::Result<File>>,
    thread: Option<JoinHandle<()>>,
    /// The last error the keeper met, for the writer to report.
    pub(crate) last_error: Arc<Mutex<Option<String>>>,
}

/// Creates `log_dir/spare.seg`, preallocated to `len` bytes (with its zeros `written` when it
/// is made ahead of time, see [`segment::preallocate`]), through a temporary name, and makes its
/// directory entry durable.
pub(crate) fn make_spare(log_dir: &Path, len: u64, written: bool) -> io::Result<File> {
    let tmp = log_dir.join(format!("{SPARE_FILE_NAME}{TMP_SUFFIX}"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = segment::preallocate(&tmp, len, written).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    std::fs::rename(&tmp, log_dir.join(SPARE_FILE_NAME))?;
    segment::sync_dir(log_dir)?;
    Ok(file)
}

impl Keeper {
    /// Starts the keeper of the log in `log_dir`, whose meta database is `meta_path`.
    pub(crate) fn start(log_dir: &Path, meta_path: &Path, name: &str) -> io::Result<Keeper> {
        let (tx, rx) = sync_channel::<KeeperMsg>(KEEPER_QUEUE);
        let (spare_tx, spares) = sync_channel::<io::Result<File>>(1);
        let last_error = Arc::new(Mutex::new(None));
        let log_dir: PathBuf = log_dir.to_owned();
        let meta_path = meta_path.to_owned();
        let errors = Arc::clone(&last_error);
        let thread = std::thread::Builder::new()
            .name(format!("corecast-keeper-{name}"))
            .spawn(move || {
                let mut meta: Option<MetaDb> = None;
                let report = |what: String| {
                    *errors.lock().expect("keeper error lock") = Some(what);
                };
                while let Ok(msg) = rx.recv() {
                    match msg {
                        KeeperMsg::MakeSpare(len) => {
                            let made = make_spare(&log_dir, len, true);
                            if let Err(e) = &made {
                                report(format!("preallocating a spare segment: {e}"));
                            }
                            if spare_tx.send(made).is_err() {
                                return;
                            }
                        }
                        KeeperMsg::Rolled(reached) => {
                            if let Err(e) = segment::sync_dir(&log_dir) {
                                report(format!("syncing {}: {e}", log_dir.display()));
                            }
                            if meta.is_none() {
                                match MetaDb::connect(&meta_path, false) {
                                    Ok(db) => meta = Some(db),
                                    Err(e) => report(e.to_string()),
                                }
                            }
                            if let Some(db) = &meta {
                                if let Err(e) = db.raise_frontier(reached) {
                                    report(e.to_string());
                                }
                            }
                        }
                    }
                }
            })?;
        Ok(Keeper {
            tx: Some(tx),
            spares,
            thread: Some(thread),
            last_error,
        })
    }

    /// Queues work (waits only if [`KEEPER_QUEUE`] messages are already queued).
    pub(crate) fn send(&self, msg: KeeperMsg) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(msg);
        }
    }

    /// Waits for the spare asked for with [`KeeperMsg::MakeSpare`].
    pub(crate) fn spare(&self) -> io::Result<File> {
        self.spares
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the keeper thread stopped")))
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            // a spare it is still making is dropped with the channel
            let _ = thread.join();
        }
    }
}
