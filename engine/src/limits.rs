//! The descriptor limit at start-up: raised to the hard limit, and checked against the caps.
//!
//! Every connection is a descriptor, and so are the files of each durable stream (segments,
//! `meta.db` connections, sealed segments being replayed). A broker whose `RLIMIT_NOFILE` is
//! below what its caps allow fails with `EMFILE` at accept time, under load, where it is hard to
//! tell why; so the start-up raises the soft limit to the hard one (as nginx and Go's runtime do)
//! and warns, in one line, when even that leaves less than the caps need.

use rustix::process::{getrlimit, setrlimit, Resource};

use crate::config::Config;

/// Descriptors a durable stream may hold at once (hot segments, the spare, the lock, its
/// `meta.db` connections: writer, keeper, index, readers), a generous count.
const PER_DURABLE_STREAM: u64 = 16;
/// Listeners, the sealed segments kept open for replay, logs, the data-directory lock.
const BASE: u64 = 256;
/// WebSocket connections the check wants room for beyond the SSE cap (there is no WebSocket cap).
const WEBSOCKET_ROOM: u64 = 1024;

/// What the check found: the limit in force and, when it is too low, the warning to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorCheck {
    /// The soft limit after raising it (`None`: unlimited).
    pub limit: Option<u64>,
    /// The soft limit before (when it was raised).
    pub raised_from: Option<u64>,
    /// The warning, when the limit leaves less than the caps need.
    pub warning: Option<String>,
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit and checks it against `cfg`'s caps.
pub fn check_descriptors(cfg: &Config) -> DescriptorCheck {
    let before = getrlimit(Resource::Nofile);
    let mut raised_from = None;
    let mut limit = before.current;
    if before.current.is_some() && before.current != before.maximum {
        let raised = rustix::process::Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            raised_from = before.current;
            limit = before.maximum;
        }
    }
    let durable = cfg.streams.iter().filter(|s| s.durable).count() as u64;
    let files = BASE + durable * PER_DURABLE_STREAM;
    let sse = cfg.http_api.sse_max_streams as u64;
    let need = files + sse + WEBSOCKET_ROOM;
    let warning = limit.filter(|&l| l < need).map(|l| {
        format!(
            "RLIMIT_NOFILE is {l} descriptors (hard limit {}): [sse] max_streams = {sse} plus ~{files} for files and listeners leaves {} for WebSocket connections; raise it (ulimit -n, systemd LimitNOFILE=) to at least {need}, or lower [sse] max_streams",
            before.maximum.map_or("unlimited".to_string(), |m| m.to_string()),
            l.saturating_sub(files + sse),
        )
    });
    DescriptorCheck {
        limit,
        raised_from,
        warning,
    }
}
