//! The keeper: one background thread per open hot log that does the slow file-system work of
//! rolling segments away from the commit path.
//!
//! In: `KeeperMsg`s from the writer over a bounded channel ([`KEEPER_QUEUE`]; the writer sends
//! at most one spare request per segment and one roll notice per roll, so it never waits on it in
//! practice). Out: preallocated spare files, over a channel of one.
//!
//! - `MakeSpare`: creates `spare.seg.tmp`, preallocates it (`fallocate`, then zeros written
//!   over it, so appends never convert unwritten extents — in small steps paced over about half
//!   the time the current segment is expected to take to fill, so the keeper's writes never
//!   stand long in front of a commit's `fdatasync`), syncs it, renames it to
//!   `spare.seg` and syncs the directory, then hands the file to the writer, which writes the next
//!   segment's header and first record into it when the current segment is full.
//! - `Rolled`: syncs the directory (the writer renamed the spare to its segment name: recovery
//!   adopts a spare whose header is written, so the rename need not be durable before the ack)
//!   and raises `meta.db`'s frontier to the end of the new segment's first record, which lets
//!   recovery tell a lost newest segment from a log that never reached it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use super::meta::MetaDb;
use super::segment::{self, SPARE_FILE_NAME, TMP_SUFFIX};

/// Messages the keeper's queue holds at most.
pub const KEEPER_QUEUE: usize = 8;

/// Work for the keeper.
#[derive(Debug)]
pub(crate) enum KeeperMsg {
    /// Preallocate a spare segment of `len` bytes, with its zeros written (`zeros`) spread over
    /// `within` (about half the time the current segment is expected to take to fill; none: as
    /// fast as possible), or only `fallocate`d.
    MakeSpare {
        len: u64,
        zeros: bool,
        within: Option<Duration>,
    },
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
    /// Set by a writer waiting for the spare: the keeper stops pacing its zeros.
    hurry: Arc<AtomicBool>,
}

/// Creates `log_dir/spare.seg`, preallocated to `len` bytes (with its zeros `written` when it
/// is made ahead of time, see [`segment::preallocate`]), through a temporary name, and makes its
/// directory entry durable.
pub(crate) fn make_spare(
    log_dir: &Path,
    len: u64,
    written: bool,
    within: Option<Duration>,
    hurry: &AtomicBool,
) -> io::Result<File> {
    let tmp = log_dir.join(format!("{SPARE_FILE_NAME}{TMP_SUFFIX}"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = segment::preallocate_paced(&tmp, len, written, within, hurry).inspect_err(|_| {
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
        let hurry = Arc::new(AtomicBool::new(false));
        let hurried = Arc::clone(&hurry);
        let thread = std::thread::Builder::new()
            .name(format!("corecast-keeper-{name}"))
            .spawn(move || {
                let mut meta: Option<MetaDb> = None;
                let report = |what: String| {
                    *errors.lock().expect("keeper error lock") = Some(what);
                };
                while let Ok(msg) = rx.recv() {
                    match msg {
                        KeeperMsg::MakeSpare { len, zeros, within } => {
                            let made = make_spare(&log_dir, len, zeros, within, &hurried);
                            hurried.store(false, Ordering::Release);
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
            hurry,
        })
    }

    /// Queues work (waits only if [`KEEPER_QUEUE`] messages are already queued).
    pub(crate) fn send(&self, msg: KeeperMsg) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(msg);
        }
    }

    /// Waits for the spare asked for with [`KeeperMsg::MakeSpare`], telling the keeper to stop
    /// pacing it if it is not made yet.
    pub(crate) fn spare(&self) -> io::Result<File> {
        if let Ok(made) = self.spares.try_recv() {
            return made;
        }
        self.hurry.store(true, Ordering::Release);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_writer_waiting_for_a_paced_spare_ends_the_pacing() {
        let dir = tempfile::tempdir().unwrap();
        let keeper = Keeper::start(dir.path(), &dir.path().join("meta.db"), "t").unwrap();
        let within = Duration::from_secs(3600);
        keeper.send(KeeperMsg::MakeSpare {
            len: 4 << 20,
            zeros: true,
            within: Some(within),
        });
        // let it start pacing, then ask for the spare as a roll does
        std::thread::sleep(Duration::from_millis(50));
        let asked = Instant::now();
        let spare = keeper.spare().expect("the spare");
        assert!(
            asked.elapsed() < within / 60,
            "the keeper kept pacing a spare the writer was waiting for"
        );
        assert_eq!(spare.metadata().unwrap().len(), 4 << 20);
        assert!(dir.path().join(SPARE_FILE_NAME).is_file());
        // the next spare is paced again (the hurry was for the one delivered)
        assert!(!keeper.hurry.load(Ordering::Acquire));
    }
}
