//! A single-threaded wake-up: one task waits, another task of the same runtime thread wakes it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Wakes the task parked in [`Notify::wait`]; a notify with no waiter is remembered once.
#[derive(Default, Clone)]
pub struct Notify {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    flag: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    /// Wakes the waiter (or lets the next wait return at once).
    pub fn notify(&self) {
        self.inner.flag.set(true);
        if let Some(w) = self.inner.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Waits for the next notify.
    pub fn wait(&self) -> Wait<'_> {
        Wait { n: self }
    }
}

/// The future of [`Notify::wait`].
pub struct Wait<'a> {
    n: &'a Notify,
}

impl Future for Wait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.n.inner.flag.replace(false) {
            return Poll::Ready(());
        }
        *self.n.inner.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}
