//! What the client threads share: the start signal, the stop signals, live counters for the
//! progress line, and the publishers' final offset (what every subscriber must reach).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A point in time on both clocks, so a schedule (Instant) can be written as µs since the epoch.
#[derive(Clone, Copy)]
pub struct Epoch {
    pub at: Instant,
    pub us: i64,
}

impl Epoch {
    pub fn now() -> Epoch {
        Epoch {
            at: Instant::now(),
            us: now_us(),
        }
    }
    pub fn us_at(&self, t: Instant) -> i64 {
        self.us + t.saturating_duration_since(self.at).as_micros() as i64
    }
}

/// µs since the Unix epoch.
#[inline]
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub struct Shared {
    /// Set once every connection is open: the measured phase starts.
    pub go: OnceLock<Epoch>,
    /// Connections opened (or failed) so far, of publishers + subscribers.
    pub opened: AtomicUsize,
    pub open_failed: AtomicUsize,
    /// Publishers still sending or owed acks.
    pub pubs_active: AtomicUsize,
    /// Max acked offset + 1 over all publishers (0 while none).
    pub final_end: AtomicU64,
    /// Publishers must stop sending (duration reached or abort).
    pub stop_sending: AtomicBool,
    /// Give up: something failed or the hard deadline passed.
    pub abort: AtomicBool,
    /// Live counters for the progress line.
    pub rows_acked: AtomicU64,
    pub delivered: AtomicU64,
    pub subs_done: AtomicUsize,
    /// Each open subscriber's next expected offset, by slot (`u64::MAX`: no subscriber there,
    /// or it finished); read by publishers paced with `--max-lag`.
    pub sub_next: Vec<AtomicU64>,
    /// Slots of `sub_next` handed out so far.
    pub sub_slots: AtomicUsize,
}

impl Shared {
    /// State for a run with `subscribers` subscriber connections.
    pub fn new(subscribers: usize) -> Shared {
        Shared {
            go: OnceLock::new(),
            opened: AtomicUsize::new(0),
            open_failed: AtomicUsize::new(0),
            pubs_active: AtomicUsize::new(0),
            final_end: AtomicU64::new(0),
            stop_sending: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            rows_acked: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            subs_done: AtomicUsize::new(0),
            sub_next: (0..subscribers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            sub_slots: AtomicUsize::new(0),
        }
    }

    /// A slot in `sub_next` for a subscriber that starts at `next`.
    pub fn take_sub_slot(&self, next: u64) -> usize {
        let slot = self.sub_slots.fetch_add(1, AcqRel);
        self.sub_next[slot].store(next, Relaxed);
        slot
    }

    /// The slowest open subscriber's next expected offset (`u64::MAX` when none is open).
    pub fn slowest_subscriber(&self) -> u64 {
        self.sub_next
            .iter()
            .map(|n| n.load(Relaxed))
            .min()
            .unwrap_or(u64::MAX)
    }

    pub fn started(&self) -> Option<Epoch> {
        self.go.get().copied()
    }
    pub fn pubs_done(&self) -> bool {
        self.pubs_active.load(Acquire) == 0
    }
}

/// Polls `cond` every `step` until it holds or `abort` is set; false on abort.
pub async fn wait_until(shared: &Shared, step: Duration, mut cond: impl FnMut() -> bool) -> bool {
    loop {
        if cond() {
            return true;
        }
        if shared.abort.load(Relaxed) {
            return false;
        }
        corecast_net::rt::sleep(step).await;
    }
}
