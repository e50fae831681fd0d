//! Failed authentications per client address: after `max_failures_per_minute` failures in a
//! minute, that address gets 429 with `Retry-After` (no password check runs) until the minute
//! is over. Shared by every shard; the table is bounded ([`MAX_ADDRESSES`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window failures are counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Client addresses tracked at most; past it, windows already over are dropped, then the
/// oldest half.
pub const MAX_ADDRESSES: usize = 65_536;

/// Counts failures per address.
#[derive(Debug)]
pub struct FailureLimiter {
    max: u32,
    table: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureLimiter {
    /// A limiter allowing `max` failures per address per [`WINDOW`].
    pub fn new(max: u32) -> FailureLimiter {
        FailureLimiter {
            max,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds)` while `ip` is over its limit: how long until it may try again.
    pub fn check(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let Some(ip) = ip else { return Ok(()) };
        let t = self.table.lock().expect("auth limiter");
        match t.get(&ip) {
            Some(&(start, n)) if n >= self.max && now.duration_since(start) < WINDOW => {
                let left = WINDOW - now.duration_since(start);
                Err(left.as_secs().max(1))
            }
            _ => Ok(()),
        }
    }

    /// Counts one failure of `ip`.
    pub fn fail(&self, ip: Option<IpAddr>, now: Instant) {
        let Some(ip) = ip else { return };
        let mut t = self.table.lock().expect("auth limiter");
        if t.len() >= MAX_ADDRESSES && !t.contains_key(&ip) {
            t.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
            if t.len() >= MAX_ADDRESSES {
                let mut starts: Vec<Instant> = t.values().map(|v| v.0).collect();
                starts.sort();
                let cut = starts[starts.len() / 2];
                t.retain(|_, (start, _)| *start > cut);
            }
        }
        let e = t.entry(ip).or_insert((now, 0));
        if now.duration_since(e.0) >= WINDOW {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_limit_until_the_window_ends() {
        let l = FailureLimiter::new(3);
        let ip: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let other: Option<IpAddr> = Some("10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check(ip, t0), Ok(()));
            l.fail(ip, t0);
        }
        let e = l.check(ip, t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(e, 50);
        assert_eq!(l.check(other, t0), Ok(()), "per address");
        assert_eq!(l.check(ip, t0 + WINDOW), Ok(()));
        l.fail(ip, t0 + WINDOW);
        assert_eq!(l.check(ip, t0 + WINDOW), Ok(()), "a new window");
        assert_eq!(l.check(None, t0), Ok(()));
    }
}
