//! What each principal holds open right now, for its caps and for revocation.
//!
//! Every admitted request takes [`Ticket`]s (one for the connection, one more for a
//! subscription or a publisher), counted per principal across shards and given back on drop.
//! A principal over one of its caps (`max_connections`, `max_subscriptions`, `max_publishers`)
//! is answered 429 with `Retry-After` before the upgrade. Revoking a principal marks its
//! [`Live`] and wakes every session; each sees the mark at its next turn and closes
//! (WebSocket 1008 `{"error":"revoked"}`, SSE `event: end {"reason":"revoked"}`). A revoked
//! principal is refused (403) until the config is reloaded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The close reason (WebSocket 1008) of a revoked principal's sessions.
pub const REVOKED_REASON: &str = r#"{"error":"revoked"}"#;

/// The close reason (WebSocket 1008) of a session past its principal's
/// `max_subscription_age_s` or its JWT's `exp`.
pub const EXPIRED_REASON: &str = r#"{"error":"expired"}"#;

/// Why an admitted session must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its principal was revoked.
    Revoked,
    /// It outlived its principal's `max_subscription_age_s`, or its JWT expired.
    Expired,
}

impl Ending {
    /// The WebSocket close: 1008 with a JSON reason.
    pub fn close(self) -> (u16, &'static str) {
        match self {
            Ending::Revoked => (1008, REVOKED_REASON),
            Ending::Expired => (1008, EXPIRED_REASON),
        }
    }

    /// The SSE `event: end` reason.
    pub fn sse_reason(self) -> &'static str {
        match self {
            Ending::Revoked => "revoked",
            Ending::Expired => "expired",
        }
    }
}

/// What a long-lived session of a principal watches: its revocation and its deadline.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The principal's live state.
    pub live: Arc<Live>,
    /// When the session must end (`max_subscription_age_s`, a JWT's `exp`), if ever.
    pub deadline: Option<std::time::Instant>,
}

impl Guard {
    /// Why the session must end now, if it must.
    pub fn ending(&self) -> Option<Ending> {
        if self.live.revoked() {
            return Some(Ending::Revoked);
        }
        match self.deadline {
            Some(d) if std::time::Instant::now() >= d => Some(Ending::Expired),
            _ => None,
        }
    }
}

/// One principal's open connections, subscriptions and publishers, and whether it is revoked.
#[derive(Debug, Default)]
pub struct Live {
    counts: [AtomicUsize; 3],
    revoked: AtomicBool,
}

impl Live {
    /// Whether the principal was revoked (its sessions close at their next turn).
    pub fn revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// How many of `kind` it holds.
    pub fn count(&self, kind: Kind) -> usize {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }
}

/// What a ticket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A connection (every admitted request).
    Connection = 0,
    /// A subscription (WebSocket or SSE).
    Subscription = 1,
    /// A WebSocket publisher.
    Publisher = 2,
}

impl Kind {
    /// The name of its cap in the config.
    pub fn cap_name(self) -> &'static str {
        match self {
            Kind::Connection => "max_connections",
            Kind::Subscription => "max_subscriptions",
            Kind::Publisher => "max_publishers",
        }
    }
}

/// One unit of a principal's cap, given back on drop.
#[derive(Debug)]
pub struct Ticket {
    live: Arc<Live>,
    kind: Kind,
}

impl Ticket {
    /// The principal's live state (to check for revocation).
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.live.counts[self.kind as usize].fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every principal's [`Live`], by name. Entries stay (a few bytes per principal ever seen;
/// JWT principals are bounded by who can mint tokens).
#[derive(Debug, Default)]
pub struct Board {
    by_name: Mutex<HashMap<String, Arc<Live>>>,
}

impl Board {
    /// The live state of `name`.
    pub fn get(&self, name: &str) -> Arc<Live> {
        let mut m = self.by_name.lock().expect("auth board");
        if let Some(l) = m.get(name) {
            return l.clone();
        }
        let l = Arc::new(Live::default());
        m.insert(name.to_string(), l.clone());
        l
    }

    /// Takes one `kind` for `name` unless that would exceed `cap`: `None` when it would.
    pub fn take(&self, name: &str, kind: Kind, cap: Option<u32>) -> Option<Ticket> {
        let live = self.get(name);
        let before = live.counts[kind as usize].fetch_add(1, Ordering::AcqRel);
        let ticket = Ticket { live, kind };
        match cap {
            Some(c) if before >= c as usize => None, // the drop gives it back
            _ => Some(ticket),
        }
    }

    /// Marks `name` revoked; returns how many connections it holds now (they close shortly).
    pub fn revoke(&self, name: &str) -> usize {
        let live = self.get(name);
        live.revoked.store(true, Ordering::Release);
        live.count(Kind::Connection)
    }

    /// Lifts every revocation (the config was reloaded).
    pub fn clear_revocations(&self) {
        for l in self.by_name.lock().expect("auth board").values() {
            l.revoked.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_and_give_back() {
        let b = Board::default();
        let t1 = b.take("alice", Kind::Connection, Some(2)).unwrap();
        let t2 = b.take("alice", Kind::Connection, Some(2)).unwrap();
        assert!(b.take("alice", Kind::Connection, Some(2)).is_none());
        assert_eq!(b.get("alice").count(Kind::Connection), 2);
        assert!(b.take("bob", Kind::Connection, Some(2)).is_some());
        drop(t1);
        let _t3 = b.take("alice", Kind::Connection, Some(2)).unwrap();
        assert!(b.take("alice", Kind::Publisher, None).is_some());
        assert!(!t2.live().revoked());
        assert_eq!(b.revoke("alice"), 2);
        assert!(t2.live().revoked());
        b.clear_revocations();
        assert!(!t2.live().revoked());
    }
}
