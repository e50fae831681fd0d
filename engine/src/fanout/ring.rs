//! The local hub: one stream's ring of recent frame batches on one shard, and the subscribers
//! reading it.
//!
//! Every committed batch of every stream reaches every shard (an `Arc`, not a copy). The hub
//! appends it to its ring and raises the signal of each subscriber of the stream on this core.
//! The ring keeps at least `retain_frames` frames (the stream's `max_backlog` and more), so a live
//! subscriber that is still allowed to be behind always finds its frames here; a replaying one
//! reads below the ring through the reader pool. Runs on the shard thread only.
//!
//! A stream with `coalesce_us` set does not wake its subscribers per batch: the first batch of a
//! quiet moment opens a window of that length (one timer per stream and shard, not per
//! subscriber — the shard's inbox loop arms it), batches that land inside it are only appended,
//! and [`Hub::flush`] hands the whole window to every parked subscriber's socket in one
//! `sendmsg` (the direct feed, `signal.rs`) or wakes it, when it closes: fewer writes per frame,
//! each frame up to `coalesce_us` later.

use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::batch::FrameBatch;

/// Most batches one direct feed hands to one `sendmsg` (the kernel's `IOV_MAX`).
const FRAMEVEC_MAX_IOV: usize = corecast_net::rt::FrameVec::MAX_IOV;
use super::signal::Signal;

/// One stream's ring on one shard.
pub struct Hub {
    ring: VecDeque<Arc<FrameBatch>>,
    frames: usize,
    retain_frames: usize,
    head: u64,
    subscribers: Vec<Weak<Signal>>,
    /// Attach prunes dead entries when the list reaches this length (amortised O(1)), so an idle
    /// stream with many short-lived readers does not grow the list until its next commit.
    prune_at: usize,
    /// The stream's `coalesce_us` (zero: wake at every batch).
    coalesce: Duration,
    /// A coalescing window is open: batches are appended without a wake until [`Hub::flush`].
    window_open: bool,
    /// The first sequence of the open window.
    window_from: u64,
}

impl Hub {
    /// An empty ring whose next sequence is `head` (the log's end offset at start); subscribers
    /// are woken `coalesce` after the first batch of a window (zero: at every batch).
    pub fn new(head: u64, retain_frames: usize, coalesce: Duration) -> Hub {
        Hub {
            ring: VecDeque::new(),
            frames: 0,
            retain_frames,
            head,
            subscribers: Vec::new(),
            prune_at: 64,
            coalesce,
            window_open: false,
            window_from: head,
        }
    }

    /// The next sequence (offset) this shard will see: the frontier at attach.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The lowest sequence still in the ring (`head` when the ring is empty).
    pub fn base(&self) -> u64 {
        self.ring.front().map_or(self.head, |b| b.first)
    }

    /// Appends a committed batch and wakes this stream's subscribers — at once, or, for a
    /// coalescing stream, by returning how long the caller waits before calling [`Hub::flush`]
    /// (`Some` only for the batch that opens a window; later ones of the window return `None`).
    /// Batches arrive in sequence order from the stream's single writer.
    #[must_use = "a coalescing hub wakes nobody until flush is called"]
    pub fn push(&mut self, batch: Arc<FrameBatch>) -> Option<Duration> {
        debug_assert_eq!(batch.first, self.head, "batches arrive in order");
        let first = batch.first;
        self.head = batch.end();
        self.frames += batch.len();
        self.ring.push_back(batch);
        while self.ring.len() > 1
            && self.frames - self.ring.front().map_or(0, |b| b.len()) >= self.retain_frames
        {
            if let Some(old) = self.ring.pop_front() {
                self.frames -= old.len();
            }
        }
        if !self.coalesce.is_zero() {
            if self.window_open {
                return None;
            }
            self.window_open = true;
            self.window_from = first;
            return Some(self.coalesce);
        }
        self.feed_or_wake(first);
        None
    }

    /// Offers the batches from `from` to the head to each parked subscriber's direct feed
    /// (`signal.rs`: one `sendmsg` of the batches' frames, shared by every socket) and wakes
    /// the others; counts what was fed on the stream.
    fn feed_or_wake(&mut self, from: u64) {
        let mut slices: Vec<std::io::IoSlice<'_>> = Vec::new();
        let (mut frames, mut len) = (0u64, 0usize);
        for b in self
            .ring
            .iter()
            .skip(self.ring.partition_point(|b| b.end() <= from))
        {
            if b.first < from || slices.len() == FRAMEVEC_MAX_IOV {
                // not whole batches (cannot happen: the window starts at a batch), or more
                // than one sendmsg takes: the sessions write them
                slices.clear();
                break;
            }
            slices.push(std::io::IoSlice::new(&b.frames));
            frames += b.len() as u64;
            len += b.frames.len();
        }
        let end = self.head;
        let mut fed = 0u64;
        let mut counted_on = None;
        self.subscribers.retain(|w| match w.upgrade() {
            Some(s) => {
                if !slices.is_empty() && s.try_feed(from, end, &slices, len).is_some() {
                    fed += 1;
                    if counted_on.is_none() {
                        counted_on = s.feed_stream();
                    }
                } else {
                    s.raise();
                }
                true
            }
            None => false,
        });
        if let Some(st) = counted_on {
            st.stats
                .frames_out
                .fetch_add(fed * frames, Ordering::Relaxed);
            st.stats
                .bytes_out
                .fetch_add(fed * len as u64, Ordering::Relaxed);
            st.stats
                .last_send_us
                .store(crate::registry::now_us(), Ordering::Relaxed);
        }
    }

    /// Closes the coalescing window: wakes every subscriber for what it holds.
    pub fn flush(&mut self) {
        if self.window_open {
            self.window_open = false;
            self.feed_or_wake(self.window_from);
        }
    }

    /// Registers a subscriber's signal (dropped signals are pruned on the next push).
    pub fn attach(&mut self, signal: &Rc<Signal>) {
        if self.subscribers.len() >= self.prune_at {
            self.subscribers.retain(|w| w.strong_count() > 0);
            self.prune_at = (self.subscribers.len() * 2).max(64);
        }
        self.subscribers.push(Rc::downgrade(signal));
    }

    /// Batches holding sequences at or after `from`, oldest first.
    pub fn batches_from(&self, from: u64) -> impl Iterator<Item = &Arc<FrameBatch>> {
        let skip = self.ring.partition_point(|b| b.end() <= from);
        self.ring.range(skip..)
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::FrameBatchBuilder;
    use super::*;

    fn batch(first: u64, n: usize) -> Arc<FrameBatch> {
        let mut b = FrameBatchBuilder::new(first, true, 64);
        for _ in 0..n {
            b.push(b"{}", 1);
        }
        Arc::new(b.finish())
    }

    #[test]
    fn attach_prunes_dropped_subscribers_without_a_commit() {
        let mut h = Hub::new(1, 8, Duration::ZERO);
        for _ in 0..10_000 {
            let s = Rc::new(Signal::default());
            h.attach(&s);
        }
        assert!(h.subscribers.len() <= 64, "{}", h.subscribers.len());
    }

    #[test]
    fn ring_retains_and_finds() {
        let mut h = Hub::new(1, 8, Duration::ZERO);
        let s = Rc::new(Signal::default());
        h.attach(&s);
        assert_eq!(h.push(batch(1, 4)), None);
        assert_eq!(h.push(batch(5, 4)), None);
        assert_eq!(h.push(batch(9, 4)), None);
        assert_eq!(h.head(), 13);
        assert_eq!(
            h.base(),
            5,
            "the oldest batch goes once 8 frames remain without it"
        );
        let firsts: Vec<u64> = h.batches_from(9).map(|b| b.first).collect();
        assert_eq!(firsts, vec![9]);
        let firsts: Vec<u64> = h.batches_from(6).map(|b| b.first).collect();
        assert_eq!(firsts, vec![5, 9]);
    }

    /// A raised signal reads as ready at once; a lowered one stays pending.
    fn raised(s: &Signal) -> bool {
        use std::future::Future;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut wait = std::pin::pin!(s.wait());
        wait.as_mut().poll(&mut cx).is_ready()
    }

    #[test]
    fn a_coalescing_hub_wakes_once_per_window_on_flush() {
        let mut h = Hub::new(1, 64, Duration::from_micros(500));
        let s = Rc::new(Signal::default());
        h.attach(&s);
        assert_eq!(h.push(batch(1, 2)), Some(Duration::from_micros(500)));
        assert_eq!(h.push(batch(3, 2)), None, "inside the window");
        assert!(!raised(&s), "nobody is woken before the window closes");
        assert_eq!(h.head(), 5, "but the batches are in the ring");
        h.flush();
        assert!(raised(&s));
        // the next batch opens a new window
        assert_eq!(h.push(batch(5, 1)), Some(Duration::from_micros(500)));
        assert!(!raised(&s));
    }
}
