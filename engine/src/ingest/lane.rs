//! The order in which one ingest id's batches reach the writer.
//!
//! A client may have more than one batch of an id in flight (`corecast ingest` keeps two: the
//! next one decodes and encodes while the previous one is being made durable), but the writer
//! judges exactly-once seqs in the order batches reach it, and batch `k + 1` arriving first
//! would be a `seq_gap`. So each request registers its seq when its head is read ([`enter`],
//! before `100 Continue` is sent, so a client that waits for it before sending the next head
//! has its batches registered in seq order), and hands its batch to the writer only once no
//! request of the same id with a lower seq is still registered ([`Entered::wait_turn`], then
//! [`Entered::hand_over_and_leave`]): that one has either handed its batch over or been
//! refused. The turn comes before the wait for room under the stream's `max_inbound`: a later
//! batch holding that room while it waits for an earlier one would starve the earlier one.
//! Waiting happens on the ingest worker thread, never on a shard.
//!
//! Bound: one entry per registered request, and registered requests are bounded by
//! `[ingest] max_concurrent` plus the requests reading their body (each holds a connection).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest a batch waits for a lower seq of its id to be handed over; past it the batch goes
/// to the writer anyway (which answers a gap if the lower one never landed).
pub const TURN_WAIT_MAX: Duration = Duration::from_secs(60);

/// Registered seqs by (stream index, ingest id): each request's first seq.
type Lanes = Option<HashMap<(usize, String), Vec<u64>>>;

static LANES: Mutex<Lanes> = Mutex::new(None);
static TURNS: Condvar = Condvar::new();

/// A request's place in its id's lane; leaves it on drop.
pub struct Entered {
    key: (usize, String),
    seq: u64,
    left: bool,
}

/// Registers a request of `id` on `stream` whose batch starts at `seq`.
pub fn enter(stream: usize, id: &str, seq: u64) -> Entered {
    let key = (stream, id.to_string());
    let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
    lanes
        .get_or_insert_with(HashMap::new)
        .entry(key.clone())
        .or_default()
        .push(seq);
    Entered {
        key,
        seq,
        left: false,
    }
}

impl Entered {
    /// Blocks until no request of the same id with a lower seq is registered (or
    /// [`TURN_WAIT_MAX`] passed). This request stays registered, so higher seqs keep waiting
    /// for it: whatever it does next (waiting for room under `max_inbound`, say) holds up only
    /// its own id's later batches, which could not go before it anyway.
    pub fn wait_turn(&self) {
        let deadline = Instant::now() + TURN_WAIT_MAX;
        let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let earlier = lanes
                .as_ref()
                .and_then(|l| l.get(&self.key))
                .is_some_and(|seqs| seqs.iter().any(|&s| s < self.seq));
            let left = deadline.saturating_duration_since(Instant::now());
            if !earlier || left.is_zero() {
                break;
            }
            lanes = TURNS
                .wait_timeout(lanes, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Runs `hand_over` and leaves the lane, both under the lane's lock: the next seq's turn
    /// starts only once this batch is in the writer's queue. Call [`Entered::wait_turn`] first.
    pub fn hand_over_and_leave<T>(mut self, hand_over: impl FnOnce() -> T) -> T {
        let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
        let out = hand_over();
        Self::remove(&mut lanes, &self.key, self.seq);
        self.left = true;
        drop(lanes);
        TURNS.notify_all();
        out
    }

    fn remove(
        lanes: &mut Option<HashMap<(usize, String), Vec<u64>>>,
        key: &(usize, String),
        seq: u64,
    ) {
        let Some(map) = lanes.as_mut() else { return };
        if let Some(seqs) = map.get_mut(key) {
            if let Some(i) = seqs.iter().position(|&s| s == seq) {
                seqs.swap_remove(i);
            }
            if seqs.is_empty() {
                map.remove(key);
            }
        }
    }
}

impl Drop for Entered {
    /// A request refused (or gone) before its turn leaves the lane, so later seqs go on.
    fn drop(&mut self) {
        if self.left {
            return;
        }
        let mut lanes = LANES.lock().unwrap_or_else(|p| p.into_inner());
        Self::remove(&mut lanes, &self.key, self.seq);
        drop(lanes);
        TURNS.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    #[test]
    fn a_later_seq_waits_for_the_earlier_one() {
        let order = Arc::new(StdMutex::new(Vec::new()));
        let first = enter(900, "lane-test", 1);
        let second = enter(900, "lane-test", 101);
        let o = order.clone();
        let t = std::thread::spawn(move || {
            second.wait_turn();
            second.hand_over_and_leave(|| o.lock().unwrap().push(101))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(order.lock().unwrap().is_empty(), "101 waited for 1");
        first.wait_turn();
        first.hand_over_and_leave(|| order.lock().unwrap().push(1));
        t.join().unwrap();
        assert_eq!(*order.lock().unwrap(), [1, 101]);
        // a refused earlier request (dropped) lets the later one go
        let first = enter(900, "lane-test", 1);
        let second = enter(900, "lane-test", 101);
        drop(first);
        second.wait_turn();
        assert_eq!(second.hand_over_and_leave(|| 7), 7);
        assert!(LANES
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .get(&(900, "lane-test".into()))
            .is_none());
    }
}
