//! [`Signal`]: a single-thread wake-up flag for one session task.
//!
//! The hub raises a subscriber's signal when a batch lands in its ring; the connection's reader
//! task raises it when the peer pings or closes; shutdown raises every signal. The session task
//! waits on it between writes. Raising an already raised signal is free, so a burst of batches
//! costs one wake-up.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A level-triggered wake-up flag owned by one task of this thread.
#[derive(Default)]
pub struct Signal {
    raised: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Signal {
    /// Raises the flag and wakes the waiting task, if any.
    pub fn raise(&self) {
        self.raised.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Waits until the flag is raised, then lowers it.
    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        Wait { signal: self }
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
