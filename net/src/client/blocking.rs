//! The blocking facade: the same client, each object running its own runtime on the calling
//! thread (one [`crate::rt::Runtime`] per object; do not call it from inside a runtime).

use super::{ClientError, Greeting, Pending, PublishOptions, PublisherMark, Row, SubscribeOptions};
use crate::rt::{build_runtime, Runtime};

fn runtime() -> Result<Runtime, ClientError> {
    build_runtime(256)
        .map_err(|e| ClientError::ConnectionLost(format!("cannot build a runtime: {e}")))
}

/// A blocking [`super::Subscription`].
pub struct Subscription {
    rt: Runtime,
    inner: Option<super::Subscription>,
}

/// Blocking [`super::connect`].
pub fn connect(url: &str, opts: SubscribeOptions) -> Result<Subscription, ClientError> {
    let mut rt = runtime()?;
    let inner = rt.block_on(super::connect(url, opts))?;
    Ok(Subscription {
        rt,
        inner: Some(inner),
    })
}

impl Subscription {
    fn inner(&self) -> &super::Subscription {
        self.inner.as_ref().expect("open")
    }

    /// The greeting.
    pub fn greeting(&self) -> &Greeting {
        self.inner().greeting()
    }

    /// The offset of the last row received.
    pub fn last_offset(&self) -> Option<u64> {
        self.inner().last_offset()
    }

    /// Whether rows still come from the published table (a catch-up not yet spliced onto the
    /// socket).
    pub fn is_catching_up(&self) -> bool {
        self.inner().is_catching_up()
    }

    /// The cursor file, when the subscription has one.
    pub fn cursor_path(&self) -> Option<std::path::PathBuf> {
        self.inner
            .as_ref()
            .and_then(|s| s.cursor())
            .map(|c| c.path().to_path_buf())
    }

    /// See [`super::Subscription::consume_explicitly`].
    pub fn consume_explicitly(&mut self) {
        self.inner.as_mut().expect("open").consume_explicitly();
    }

    /// See [`super::Subscription::consumed`].
    ///
    /// # Errors
    ///
    /// [`ClientError::Cursor`] when the cursor file cannot be written.
    pub fn consumed(&mut self, offset: u64) -> Result<(), ClientError> {
        self.inner.as_mut().expect("open").consumed(offset)
    }

    /// Whether a next frame's bytes are already buffered.
    pub fn has_buffered(&self) -> bool {
        self.inner().has_buffered()
    }

    /// Why the server ended the stream normally, when its close frame said.
    pub fn end_reason(&self) -> Option<&str> {
        self.inner().end_reason()
    }

    /// The next row; `None` at a normal end. Marks the previous row consumed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row>, ClientError> {
        let inner = self.inner.as_mut().expect("open");
        self.rt.block_on(inner.next())
    }

    /// Closes cleanly, saving the cursor (the last row counts as consumed).
    pub fn close(mut self) -> Result<(), ClientError> {
        let inner = self.inner.take().expect("open");
        self.rt.block_on(inner.close())
    }

    /// Closes because the consumer failed: the last row is not counted, nothing is saved.
    pub fn abandon(mut self) {
        let inner = self.inner.take().expect("open");
        self.rt.block_on(inner.abandon())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // the connection must be dropped inside its runtime's context
        if let Some(inner) = self.inner.take() {
            self.rt.block_on(async move { drop(inner) });
        }
    }
}

/// A blocking [`super::Publisher`].
pub struct Publisher {
    rt: Runtime,
    inner: Option<super::Publisher>,
}

/// Blocking [`super::publish`].
pub fn publish(url: &str, opts: PublishOptions) -> Result<Publisher, ClientError> {
    let mut rt = runtime()?;
    let inner = rt.block_on(super::publish(url, opts))?;
    Ok(Publisher {
        rt,
        inner: Some(inner),
    })
}

impl Publisher {
    fn parts(&mut self) -> (&mut Runtime, &mut super::Publisher) {
        (&mut self.rt, self.inner.as_mut().expect("open"))
    }

    /// The greeting.
    pub fn greeting(&self) -> &Greeting {
        self.inner.as_ref().expect("open").greeting()
    }

    /// The exactly-once mark from the greeting.
    pub fn mark(&self) -> Option<&PublisherMark> {
        self.inner.as_ref().expect("open").mark()
    }

    /// The seq the next frame carries (exactly-once only).
    pub fn next_seq(&self) -> Option<u64> {
        self.inner.as_ref().expect("open").next_seq()
    }

    /// Sends one row and waits for its offset.
    pub fn send(&mut self, row: &str) -> Result<Option<u64>, ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.send(row))
    }

    /// Sends a batch and waits for its offsets.
    pub fn send_batch<S: AsRef<str>>(
        &mut self,
        rows: &[S],
    ) -> Result<Vec<Option<u64>>, ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.send_batch(rows))
    }

    /// Waits `d` while keeping the connection alive (replies settle, keepalive pings are
    /// answered): see [`super::Publisher::idle`]. Use it instead of sleeping between sends.
    pub fn idle(&mut self, d: std::time::Duration) -> Result<(), ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.idle(d))
    }

    /// Pipelines one row (waits only while the window is full).
    pub fn submit(&mut self, row: &str) -> Result<Pending, ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.submit(row))
    }

    /// Pipelines a batch (waits only while the window is full).
    pub fn submit_batch<S: AsRef<str>>(&mut self, rows: &[S]) -> Result<Pending, ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.submit_batch(rows))
    }

    /// Waits for `pending`'s reply.
    pub fn wait(&mut self, pending: &Pending) -> Result<Vec<Option<u64>>, ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.wait(pending))
    }

    /// Waits for every reply.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let (rt, p) = self.parts();
        rt.block_on(p.flush())
    }

    /// Waits for every reply and closes.
    pub fn close(mut self) -> Result<(), ClientError> {
        let inner = self.inner.take().expect("open");
        self.rt.block_on(inner.close())
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.rt.block_on(async move { drop(inner) });
        }
    }
}
