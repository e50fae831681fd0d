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

    /// Takes one attempt of `ip` before its credentials are checked: `Err(seconds)` while it is
    /// over its limit (nothing is checked then). The attempt counts as a failure unless
    /// [`FailureLimiter::release`] gives it back — so attempts checked concurrently count
    /// before their answers come, and a burst cannot run more checks than the limit.
    pub fn take(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let Some(ip) = ip else { return Ok(()) };
        let mut t = self.table.lock().expect("auth limiter");
        if let Some(&(start, n)) = t.get(&ip) {
            let age = now.duration_since(start);
            if n >= self.max && age < WINDOW {
                return Err((WINDOW - age).as_secs().max(1));
            }
        }
        if t.len() >= MAX_ADDRESSES && !t.contains_key(&ip) {
            // room: windows that are over, then the addresses furthest from their limit; an
            // address at its limit is never dropped while its window lasts (dropping the oldest
            // would let a flood of new addresses lift every lockout)
            t.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
            if t.len() >= MAX_ADDRESSES {
                let max = self.max;
                let mut counts: Vec<u32> = t.values().map(|v| v.1).filter(|&n| n < max).collect();
                counts.sort_unstable();
                if let Some(&cut) = counts.get(counts.len() / 2) {
                    t.retain(|_, (_, n)| *n >= max || *n > cut);
                }
            }
            if t.len() >= MAX_ADDRESSES {
                return Ok(()); // every tracked address is locked out: this one goes untracked
            }
        }
        let e = t.entry(ip).or_insert((now, 0));
        if now.duration_since(e.0) >= WINDOW {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
        Ok(())
    }

    /// Gives back an attempt [`FailureLimiter::take`] counted: it succeeded, or could not be
    /// checked (busy) — neither is the client's failure.
    pub fn release(&self, ip: Option<IpAddr>) {
        let Some(ip) = ip else { return };
        let mut t = self.table.lock().expect("auth limiter");
        if let Some(e) = t.get_mut(&ip) {
            e.1 = e.1.saturating_sub(1);
        }
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
        // a success gives its attempt back
        assert_eq!(l.take(ip, t0), Ok(()));
        l.release(ip);
        // three attempts in flight at once use the whole limit: a fourth is refused unchecked
        for _ in 0..3 {
            assert_eq!(l.take(ip, t0), Ok(()));
        }
        assert_eq!(l.take(ip, t0 + Duration::from_secs(10)), Err(50));
        assert_eq!(l.take(other, t0), Ok(()), "per address");
        assert_eq!(l.take(ip, t0 + WINDOW), Ok(()), "a new window");
        assert_eq!(l.take(None, t0), Ok(()));
    }

    #[test]
    fn a_flood_of_new_addresses_does_not_lift_a_lockout() {
        let l = FailureLimiter::new(2);
        let locked: Option<IpAddr> = Some("10.9.9.9".parse().unwrap());
        let t0 = Instant::now();
        l.take(locked, t0).unwrap();
        l.take(locked, t0).unwrap();
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0b00_0000 + i));
            let _ = l.take(Some(ip), t0);
        }
        assert!(l.take(locked, t0).is_err(), "still locked out");
        assert!(l.table.lock().unwrap().len() <= MAX_ADDRESSES);
    }
}
