//! MCP sessions: the `Mcp-Session-Id` issued at `initialize` and required after it.
//!
//! A session is a name for the protocol version negotiated and the principal that negotiated
//! it; it holds no data and no task. A request may land on any shard (`SO_REUSEPORT`), so the
//! table is one per process behind a mutex, taken once per MCP request and never on the data
//! path. Bounds: [`SESSIONS_PER_PRINCIPAL_MAX`] sessions per principal — at it, that
//! principal's `initialize` drops the session *it* used least recently, so no principal can
//! push another's sessions out — and [`SESSIONS_MAX`] in all — at it, `initialize` drops the
//! least recently used session of the principal holding the most (an open broker has one
//! principal, nobody, whose cap is [`SESSIONS_MAX`]) — and [`SESSION_IDLE`] without a
//! request, after which a session is gone. A
//! request naming a session that is gone (ended by `DELETE /mcp`, dropped, idle, or another
//! principal's) is answered 404, and the client initializes again, as the spec says.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Most sessions held at once, all principals together.
pub const SESSIONS_MAX: usize = 4096;
/// Most sessions one authenticated principal holds at once.
pub const SESSIONS_PER_PRINCIPAL_MAX: usize = 256;
/// A session without a request for this long is gone.
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);

/// One session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The protocol version negotiated at `initialize`.
    pub version: &'static str,
    /// The principal that initialized it (`None` on an open broker).
    principal: Option<String>,
    last_used: Instant,
}

fn table() -> &'static Mutex<HashMap<String, Session>> {
    static TABLE: OnceLock<Mutex<HashMap<String, Session>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<String, Session>> {
    // a panic while holding it leaves a table of plain values: still consistent
    table().lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens a session for `principal` at `version`; returns its id (128 random bits, hex).
pub fn open(principal: Option<&str>, version: &'static str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let now = Instant::now();
    let mut t = lock();
    t.retain(|_, s| now.duration_since(s.last_used) < SESSION_IDLE);
    let cap = if principal.is_some() {
        SESSIONS_PER_PRINCIPAL_MAX
    } else {
        SESSIONS_MAX
    };
    let mine = t
        .values()
        .filter(|s| s.principal.as_deref() == principal)
        .count();
    // over the principal's own cap: its own oldest goes; over the process's: the oldest of
    // whoever holds the most (never one of a principal below the largest share)
    let victim_of = if mine >= cap {
        Some(principal.map(str::to_string))
    } else if t.len() >= SESSIONS_MAX {
        let mut counts: HashMap<Option<&str>, usize> = HashMap::new();
        for s in t.values() {
            *counts.entry(s.principal.as_deref()).or_default() += 1;
        }
        counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(p, _)| p.map(str::to_string))
    } else {
        None
    };
    if let Some(victim) = victim_of {
        let oldest = t
            .iter()
            .filter(|(_, s)| s.principal == victim)
            .min_by_key(|(_, s)| s.last_used)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            t.remove(&k);
        }
    }
    t.insert(
        id.clone(),
        Session {
            version,
            principal: principal.map(str::to_string),
            last_used: now,
        },
    );
    assert!(t.len() <= SESSIONS_MAX);
    id
}

/// The session `id` of `principal`, touched; `None` when it is gone or another's.
pub fn find(id: &str, principal: Option<&str>) -> Option<Session> {
    let now = Instant::now();
    let mut t = lock();
    let s = t.get_mut(id)?;
    if now.duration_since(s.last_used) >= SESSION_IDLE {
        t.remove(id);
        return None;
    }
    if s.principal.as_deref() != principal {
        return None;
    }
    s.last_used = now;
    Some(s.clone())
}

/// Ends the session `id` of `principal`; whether there was one.
pub fn end(id: &str, principal: Option<&str>) -> bool {
    if find(id, principal).is_none() {
        return false;
    }
    lock().remove(id).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_its_principals_until_it_ends() {
        let id = open(Some("alice"), "2025-06-18");
        assert_eq!(id.len(), 32);
        assert_eq!(
            find(&id, Some("alice")).map(|s| s.version),
            Some("2025-06-18")
        );
        assert!(find(&id, Some("bob")).is_none());
        assert!(find(&id, None).is_none());
        assert!(!end(&id, Some("bob")));
        assert!(end(&id, Some("alice")));
        assert!(find(&id, Some("alice")).is_none());
        assert!(!end(&id, Some("alice")));
    }

    #[test]
    fn one_principal_cannot_push_out_anothers_sessions() {
        let keep = open(Some("carol-unit"), "2025-06-18");
        let first = open(Some("mallory-unit"), "2025-06-18");
        for _ in 0..SESSIONS_PER_PRINCIPAL_MAX + 50 {
            open(Some("mallory-unit"), "2025-06-18");
        }
        assert!(
            find(&keep, Some("carol-unit")).is_some(),
            "carol's session stays"
        );
        assert!(
            find(&first, Some("mallory-unit")).is_none(),
            "mallory's oldest went"
        );
        let held = lock()
            .values()
            .filter(|s| s.principal.as_deref() == Some("mallory-unit"))
            .count();
        assert_eq!(held, SESSIONS_PER_PRINCIPAL_MAX);
    }
}
