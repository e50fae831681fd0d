//! Bringing a managed stream to its desired state on the running broker, on the control
//! thread. Neighbour streams are never touched: only this stream's log, writer entry, hubs,
//! sessions and maintenance thread change.
//!
//! - **activate** (create, start, a replaced declaration): open the log (`server::open_stream`), hand
//!   it to the owning writer, give every shard a hub at its frontier, then put the stream in the
//!   registry (so no session finds it before its hub exists), then start its maintenance thread;
//! - **deactivate** (stop): fence its writes ([`StreamState::Stopped`]: publishers check it
//!   before they hand a frame over, and the writer refuses appends to a stream not serving),
//!   wake every session (its subscribers and publishers close with 1001 `stream stopping`),
//!   stop its maintenance thread, and have the writer commit what is queued and close the log;
//!   the data stays;
//! - **retire**: publishers are refused with 4410 from then on (a connected one is closed with
//!   it), subscribers keep reading; terminal;
//! - **migrate**: deactivate, seal and publish the whole log, start the next log at its end
//!   offset (the seam), activate again ([`super::migrate`]).

use std::sync::Arc;
use std::time::Duration;

use super::{decl, ControlThread};
use crate::commit::writer::WriterMsg;
use crate::registry::{Stream, StreamState};
use crate::server::{open_stream, shell_stream, OpenAs};
use crate::shard::{hub_retain, ShardMsg};
use crate::tier::maintenance::{Maintenance, TierJob};

/// How long the control thread waits for a writer or a shard to take a change.
const TAKE_TIMEOUT: Duration = Duration::from_secs(30);

impl ControlThread {
    /// Brings stream `row.name` to `row.desired` with `row.declaration`.
    pub(crate) fn converge(&mut self, row: &super::db::Row) -> Result<(), String> {
        let value: serde_json::Value = serde_json::from_str(&row.declaration)
            .map_err(|e| format!("the stored declaration does not parse: {e}"))?;
        let cfg = decl::parse(&row.name, &value)
            .map_err(|e| format!("the stored declaration is refused: {e:?}"))?
            .cfg;
        let registry = self.shared.registry.load();
        let current = registry.get(&row.name).cloned();
        drop(registry);
        // compared as text, the stored text being the canonical form of the same function: as
        // JSON values, a schema whose properties were reordered would compare equal although
        // its column order differs
        let same_cfg = |st: &Stream| {
            serde_json::to_string(&decl::canonical(&st.cfg))
                .ok()
                .as_deref()
                == Some(row.declaration.as_str())
        };
        match (current, row.desired) {
            (None, StreamState::Stopped) => {
                let index = self.shared.registry.load().streams.len();
                let writers = self.shared.writers.len();
                let shell = shell_stream(&cfg, index, &self.data_dir, writers)?;
                self.hubs(index, 0, cfg.max_backlog, cfg.coalesce)?;
                self.shared.registry.install(shell);
                Ok(())
            }
            (None, to) => self.activate(None, &cfg, to),
            (Some(st), StreamState::Stopped) => {
                if st.state() != StreamState::Stopped {
                    self.deactivate(&st)?;
                }
                Ok(())
            }
            (Some(st), to) => match st.state() {
                StreamState::Retired => {
                    assert_eq!(to, StreamState::Retired, "retired is terminal");
                    Ok(())
                }
                StreamState::Stopped => self.activate(Some(st.index), &cfg, to),
                StreamState::Serving if !same_cfg(&st) => {
                    self.deactivate(&st)?;
                    self.activate(Some(st.index), &cfg, to)
                }
                StreamState::Serving => {
                    if to == StreamState::Retired {
                        st.set_state(StreamState::Retired);
                        // connected publishers see it on their next frame or wake-up (4410)
                        self.shared.wake_stream_sessions(st.index);
                    }
                    Ok(())
                }
            },
        }
    }

    /// Migrates stream `row.name` onto a new log with `row.declaration`'s schema: stops it if
    /// it serves (publishers and subscribers close with 1001 and reconnect after), seals and
    /// publishes its log and starts the next at the seam ([`super::migrate::migrate_log`]), then
    /// brings it back to `row.desired`.
    pub(crate) fn migrate(&mut self, row: &super::db::Row) -> Result<(), String> {
        let value: serde_json::Value = serde_json::from_str(&row.declaration)
            .map_err(|e| format!("the stored declaration does not parse: {e}"))?;
        let cfg = decl::parse(&row.name, &value)
            .map_err(|e| format!("the stored declaration is refused: {e:?}"))?
            .cfg;
        let current = self.shared.registry.load().get(&row.name).cloned();
        let Some(st) = current else {
            return Err(format!("stream {} is not in the registry", row.name));
        };
        if st.state() == StreamState::Retired {
            return Err(format!(
                "stream {} is retired: its log is not migrated",
                row.name
            ));
        }
        if st.state() != StreamState::Stopped {
            self.deactivate(&st)?;
        }
        let index = st.index;
        let done = super::migrate::migrate_log(&cfg, &self.data_dir, &self.s3)?;
        match &done {
            super::migrate::Migrated::NoLog => {
                tracing::info!(stream = %row.name, "migrated: the stream keeps no log; the new schema applies from now on")
            }
            super::migrate::Migrated::Already => {
                tracing::info!(stream = %row.name, "the stream's live log already has the new schema")
            }
            super::migrate::Migrated::Sealed { log, seam, records } => {
                tracing::info!(stream = %row.name, seam, records, "migrated: the old log is sealed and published ({records} rows in its table); the new log {log} starts at offset {seam}")
            }
        }
        match row.desired {
            StreamState::Stopped => {
                let writers = self.shared.writers.len();
                let shell = shell_stream(&cfg, index, &self.data_dir, writers)?;
                self.shared.registry.install(shell);
                Ok(())
            }
            to => self.activate(Some(index), &cfg, to),
        }
    }

    /// Gives every shard a fresh hub for stream `index` at `head`, and waits until each has it.
    fn hubs(
        &self,
        index: usize,
        head: u64,
        max_backlog: u64,
        coalesce: std::time::Duration,
    ) -> Result<(), String> {
        let mut waits = Vec::with_capacity(self.shared.shard_inboxes.len());
        for inbox in &self.shared.shard_inboxes {
            let (done, rx) = flume::bounded(1);
            inbox
                .send(ShardMsg::Hub {
                    stream: index,
                    head,
                    retain: hub_retain(max_backlog),
                    coalesce,
                    done,
                })
                .map_err(|_| "a shard has stopped".to_string())?;
            waits.push(rx);
        }
        for rx in waits {
            rx.recv_timeout(TAKE_TIMEOUT)
                .map_err(|_| "a shard did not take the stream's hub in 30 s".to_string())?;
        }
        Ok(())
    }

    /// Opens stream `cfg` at `index` (`None`: the next index) in state `to`.
    fn activate(
        &mut self,
        index: Option<usize>,
        cfg: &crate::config::StreamConfig,
        to: StreamState,
    ) -> Result<(), String> {
        assert!(
            to != StreamState::Stopped,
            "a stopped stream is not activated"
        );
        let index = index.unwrap_or_else(|| self.shared.registry.load().streams.len());
        let how = OpenAs {
            index,
            data_dir: &self.data_dir,
            writers: self.shared.writers.len(),
            s3: &self.s3,
            managed: true,
            state: to,
            // a stream retired now: open_stream dates it
            retired_at_us: 0,
        };
        let opened = open_stream(cfg, &how)?;
        let stream = opened.stream.clone();
        let writer = self.shared.writers[stream.writer].clone();
        let (done, rx) = flume::bounded(1);
        writer
            .send(WriterMsg::Open {
                stream: index,
                log: opened.log.map(Box::new),
                done,
            })
            .map_err(|_| "the stream's writer has stopped".to_string())?;
        rx.recv_timeout(TAKE_TIMEOUT)
            .map_err(|_| "the writer did not take the stream's log in 30 s".to_string())?;
        self.hubs(index, opened.head, cfg.max_backlog, cfg.coalesce)?;
        self.shared.registry.install(stream.clone());
        if let Some((index_db, reader, publish)) = opened.tier {
            let job = TierJob::new(stream.clone(), index_db, reader, writer, publish);
            match Maintenance::start(vec![job], 1) {
                Ok(m) => {
                    self.maintenance.insert(index, m);
                }
                // the stream serves; its history is not sealed until it is started again
                Err(e) => {
                    tracing::error!(stream = %cfg.name, "cannot start a maintenance thread: {e}")
                }
            }
        }
        tracing::info!(stream = %cfg.name, index, state = to.as_str(), "stream opened");
        Ok(())
    }

    /// Stops stream `st`: fence, close its sessions, stop its maintenance, drain and close
    /// its log.
    fn deactivate(&mut self, st: &Arc<Stream>) -> Result<(), String> {
        assert!(st.managed, "only managed streams are stopped at run time");
        st.set_state(StreamState::Stopped);
        self.shared.wake_stream_sessions(st.index);
        if let Some(m) = self.maintenance.remove(&st.index) {
            m.stop();
        }
        let (done, rx) = flume::bounded(1);
        self.shared.writers[st.writer]
            .send(WriterMsg::Close {
                stream: st.index,
                done,
            })
            .map_err(|_| "the stream's writer has stopped".to_string())?;
        let (end, log) = rx
            .recv_timeout(TAKE_TIMEOUT)
            .map_err(|_| "the writer did not close the stream's log in 30 s".to_string())?;
        // closed here, on the control thread, not on the writer its neighbours commit through
        drop(log);
        tracing::info!(stream = %st.cfg.name, end_offset = end, "stream stopped");
        Ok(())
    }
}
