//! [`Keepalive`]: the ping/timeout clock of one WebSocket session.
//!
//! The reference server (uvicorn, `../shared/PROTOCOL.md` §1) pings every 20 s and drops a
//! peer that has not answered 20 s later. corecast does the same per connection with the
//! figures of [`KeepaliveConfig`], counting any complete message or control frame from the peer
//! as hearing from it (a publisher sending rows is alive; a subscriber answers the ping with a
//! pong). A subscriber is checked when it waits for rows, so one sent rows without pause is
//! left to the write timeout (`deliver::write_timeout`, the config's `write_timeout_s`). Without
//! it a peer that vanished (a host gone without a FIN) on a quiet stream, or one that stopped
//! in the middle of a frame, would hold its socket and its buffers for good.
//!
//! The reader task calls [`Keepalive::heard`]; the session's writer asks [`Keepalive::check`]
//! when its one timer fires (`session/tick.rs`) and has it fire again by the instant it returns.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::config::KeepaliveConfig;

/// Far enough ahead to mean "never" for a session with keepalive off.
const NEVER: Duration = Duration::from_secs(365 * 86_400);

/// The close reason of a connection the keepalive gave up on (code 1011), as the reference's
/// websockets library words it.
pub const TIMEOUT_REASON: &str = "keepalive ping timeout";

/// What the session's writer should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing; ask again at this instant at the latest.
    Wait(Instant),
    /// Send a ping now (the payload is free; corecast sends none); ask again at this instant.
    Ping(Instant),
    /// The peer did not answer the ping in time: close with 1011 [`TIMEOUT_REASON`].
    TimedOut,
}

/// The keepalive state of one connection (single-threaded: the session's shard).
#[derive(Debug)]
pub struct Keepalive {
    cfg: Option<KeepaliveConfig>,
    /// When a frame from the peer last completed.
    heard: Cell<Instant>,
    /// When the unanswered ping went out, if one did.
    pinged: Cell<Option<Instant>>,
}

impl Default for Keepalive {
    /// Off.
    fn default() -> Keepalive {
        Keepalive::new(None)
    }
}

impl Keepalive {
    /// A clock starting now; `None` turns it off ([`Keepalive::check`] only ever waits).
    pub fn new(cfg: Option<KeepaliveConfig>) -> Keepalive {
        Keepalive {
            cfg,
            heard: Cell::new(Instant::now()),
            pinged: Cell::new(None),
        }
    }

    /// Whether it pings at all.
    pub fn is_on(&self) -> bool {
        self.cfg.is_some()
    }

    /// A complete message or control frame arrived from the peer: it is alive.
    pub fn heard(&self) {
        self.heard.set(Instant::now());
        self.pinged.set(None);
    }

    /// What is due at `now`. A `Ping` is answered at most once per silence: the next check
    /// after it waits for the answer until the timeout.
    pub fn check(&self, now: Instant) -> Due {
        let Some(cfg) = self.cfg else {
            return Due::Wait(now + NEVER);
        };
        match self.pinged.get() {
            Some(at) if now >= at + cfg.timeout => Due::TimedOut,
            Some(at) => Due::Wait(at + cfg.timeout),
            None => {
                let ping_at = self.heard.get() + cfg.interval;
                if now >= ping_at {
                    self.pinged.set(Some(now));
                    Due::Ping(now + cfg.timeout)
                } else {
                    Due::Wait(ping_at)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Option<KeepaliveConfig> {
        Some(KeepaliveConfig {
            interval: Duration::from_secs(20),
            timeout: Duration::from_secs(10),
        })
    }

    #[test]
    fn pings_after_the_interval_then_times_out_unless_heard() {
        let k = Keepalive::new(cfg());
        let t0 = k.heard.get();
        assert_eq!(k.check(t0), Due::Wait(t0 + Duration::from_secs(20)));
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(k.check(t1), Due::Ping(t1 + Duration::from_secs(10)));
        // one ping per silence
        let t2 = t1 + Duration::from_secs(5);
        assert_eq!(k.check(t2), Due::Wait(t1 + Duration::from_secs(10)));
        assert_eq!(k.check(t1 + Duration::from_secs(10)), Due::TimedOut);
    }

    #[test]
    fn hearing_anything_resets_the_clock() {
        let k = Keepalive::new(cfg());
        let t0 = k.heard.get();
        let t1 = t0 + Duration::from_secs(25);
        assert!(matches!(k.check(t1), Due::Ping(_)));
        k.heard();
        let heard = k.heard.get();
        assert_eq!(k.check(heard), Due::Wait(heard + Duration::from_secs(20)));
    }

    #[test]
    fn off_never_pings() {
        let k = Keepalive::new(None);
        let now = Instant::now() + Duration::from_secs(1_000_000);
        assert!(matches!(k.check(now), Due::Wait(_)));
    }
}
