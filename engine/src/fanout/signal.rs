//! [`Signal`]: a single-thread wake-up flag for one session task, and the direct feed of a parked
//! WebSocket subscriber.
//!
//! The hub raises a subscriber's signal when a batch lands in its ring; the connection's reader
//! task raises it when the peer pings or closes; shutdown raises every signal. The session task
//! waits on it between writes. Raising an already raised signal is free, so a burst of batches
//! costs one wake-up.
//!
//! **The direct feed.** A WebSocket subscriber without a `where=` filter on a plaintext socket
//! that is caught up and owes nothing else *parks* before it waits ([`Signal::park`]: its next
//! offset). When a batch starting exactly there lands (or, on a coalescing stream, a window of
//! batches closes), the hub writes their frames to the socket itself with one non-blocking
//! `sendmsg` ([`Signal::try_feed`]) and moves the parked
//! offset past it — no wake-up, no task poll, no vectored write of the session: at one frame per
//! write this is most of the userland cost of delivering a frame. Anything else falls back to
//! the session: the send would block (then the session writes the batch, timed as usual), it
//! took only a part (the session first writes the rest of those batches, before any control frame,
//! so the peer never sees a frame cut), the principal was revoked or its deadline passed (the
//! session closes it, as at any turn), or the signal was raised for another reason (a ping to
//! answer, a close, shutdown, a revoked principal, a stopped stream) — raising unparks, so the
//! hub feeds nothing until the session has looked and parked again. The session reads where the
//! feed left it with [`Signal::unpark`] once it wakes.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use corecast_net::rt::RawSink;

use crate::auth::live::Live;
use crate::registry::Stream;

/// What the hub needs to feed a parked subscriber: its socket, its cursor on the stream's lag
/// board, and the stream whose counters the fed frames go to.
pub struct FeedTarget {
    /// The subscriber's socket; valid while the target is installed (the session removes it
    /// before its write half goes: [`Signal::disable_feed`]).
    pub sink: RawSink,
    /// The subscriber's cell on the lag board.
    pub lag: Arc<AtomicU64>,
    /// The stream (its `frames_out`, `bytes_out`, `last_send_us`).
    pub stream: Arc<Stream>,
    /// The stream's `max_backlog`: a batch larger than this overflows a subscriber however
    /// caught up it is (PROTOCOL.md §6), so it is never fed; the session closes it 4429.
    pub max_backlog: u64,
    /// The principal's live state (`None` on an open broker): a revoked principal is not fed,
    /// the session is woken and closes 1008 as it would at any turn.
    pub live: Option<Arc<Live>>,
    /// When the session must end (a JWT's `exp`, `max_subscription_age_s`): past it, not fed.
    pub deadline: Option<Instant>,
}

/// A level-triggered wake-up flag owned by one task of this thread.
#[derive(Default)]
pub struct Signal {
    raised: Cell<bool>,
    waker: Cell<Option<Waker>>,
    /// Installed by a subscriber eligible for the direct feed.
    feed: RefCell<Option<FeedTarget>>,
    /// Parked: the next offset owed, while the session waits owing nothing.
    parked: Cell<Option<u64>>,
    /// Where the session resumes after a feed was cut short or it was raised while parked: the
    /// next offset and the bytes of the batch at it already written.
    resume: Cell<Option<(u64, usize)>>,
}

impl Signal {
    /// Raises the flag and wakes the waiting task, if any. Unparks: the hub feeds nothing more
    /// until the session parks again.
    pub fn raise(&self) {
        if let Some(next) = self.parked.take() {
            self.resume.set(Some((next, 0)));
        }
        self.raised.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Waits until the flag is raised, then lowers it.
    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        Wait { signal: self }
    }

    /// Makes this session eligible for the direct feed.
    pub fn enable_feed(&self, target: FeedTarget) {
        *self.feed.borrow_mut() = Some(target);
    }

    /// Ends the direct feed (before the socket goes).
    pub fn disable_feed(&self) {
        self.parked.set(None);
        *self.feed.borrow_mut() = None;
    }

    /// Parks at `next` (the session is about to wait, caught up, owing nothing); a no-op for a
    /// session without a feed.
    pub fn park(&self, next: u64) {
        if self.feed.borrow().is_some() {
            self.parked.set(Some(next));
        }
    }

    /// Where the feed left the session, once it woke: the next offset owed and the bytes of the
    /// batches from there that are already written (0 unless a send was cut short). `None`
    /// when it was not parked.
    pub fn unpark(&self) -> Option<(u64, usize)> {
        let parked = self.parked.take();
        self.resume.take().or(parked.map(|n| (n, 0)))
    }

    /// The hub's offer of the batches `[first, end)` whose frames are `bytes` (`len` in all):
    /// written to the socket when the session is parked exactly at `first` and the socket takes
    /// it all at once. `Some(())`: written (the caller counts it, and does not raise); `None`: the caller
    /// raises the signal (the session takes it from here).
    pub fn try_feed(
        &self,
        first: u64,
        end: u64,
        bytes: &[std::io::IoSlice<'_>],
        len: usize,
    ) -> Option<()> {
        if self.parked.get() != Some(first) {
            return None;
        }
        let feed = self.feed.borrow();
        let target = feed.as_ref()?;
        if end - first > target.max_backlog
            || target.live.as_ref().is_some_and(|l| l.revoked())
            || target.deadline.is_some_and(|d| Instant::now() >= d)
        {
            return None;
        }
        match target.sink.try_send(bytes) {
            Ok(Some(n)) if n == len => {
                self.parked.set(Some(end));
                target.lag.store(end, Ordering::Relaxed);
                Some(())
            }
            Ok(Some(n)) if n > 0 => {
                // a part went: the session writes the rest of these batches first
                self.parked.set(None);
                self.resume.set(Some((first, n)));
                None
            }
            // it would block, or failed: the session's own write finds out
            _ => None,
        }
    }

    /// The stream of the installed feed, for counting what the hub fed.
    pub fn feed_stream(&self) -> Option<Arc<Stream>> {
        self.feed.borrow().as_ref().map(|t| t.stream.clone())
    }
}

struct Wait<'a> {
    signal: &'a Signal,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.raised.replace(false) {
            Poll::Ready(())
        } else {
            self.signal.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        }
    }
}
