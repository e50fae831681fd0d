//! Delivering owed rows to one socket: gather the shared, already-encoded bytes of a committed
//! batch into a vectored write, then write it and count it.
//!
//! WebSocket subscribers and SSE readers differ only in which rendering of the batch they send
//! (`FrameBatch`'s WebSocket frames, or its lazily built SSE events); the cursor arithmetic, the
//! `where=` filtering and the write bounds are the same and live here. Runs on the session's shard.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corecast_net::rt::{FrameVec, WriteHalf};

use super::tick::Tick;

use crate::fanout::batch::{FrameBatch, SseBatch};
use crate::filter::Filter;
use crate::registry::{now_us, Stream};

/// Most bytes gathered into one vectored write (4 MiB).
pub const WRITE_BYTES_MAX: usize = 4 << 20;

/// How long one write may take to complete, in ms (the config's `write_timeout_s`, 30 s unless
/// set). A subscriber whose socket accepts nothing for this long (it stopped reading) is
/// disconnected and counted in `dropped_slow`: no close frame can reach a socket that takes no
/// bytes, and the connection must not hold its descriptor and shared batch buffers forever.
/// Publishers' reply writes are bounded by the same timeout.
static WRITE_TIMEOUT_MS: AtomicU64 =
    AtomicU64::new(crate::config::DEFAULT_WRITE_TIMEOUT.as_millis() as u64);

/// Installs the write timeout (at server start, from `write_timeout_s`).
pub fn install_write_timeout(d: Duration) {
    WRITE_TIMEOUT_MS.store(d.as_millis().max(1) as u64, Ordering::Relaxed);
}

/// The write timeout in force (see [`install_write_timeout`]).
pub fn write_timeout() -> Duration {
    Duration::from_millis(WRITE_TIMEOUT_MS.load(Ordering::Relaxed))
}

/// Which rendering of a batch a session sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    /// Complete WebSocket text frames.
    WebSocket,
    /// SSE events (`id:` / `data:` / blank line).
    Sse,
}

/// A batch's rows rendered one way: message `i` of the batch as a shared slice.
trait Rendered {
    fn slice(&self, from: usize, to: usize) -> Bytes;
    fn bytes_between(&self, from: usize, to: usize) -> usize;
}

impl Rendered for FrameBatch {
    fn slice(&self, from: usize, to: usize) -> Bytes {
        FrameBatch::slice(self, from, to)
    }

    fn bytes_between(&self, from: usize, to: usize) -> usize {
        self.frame_end(to - 1) - self.frame_start(from)
    }
}

impl Rendered for SseBatch {
    fn slice(&self, from: usize, to: usize) -> Bytes {
        SseBatch::slice(self, from, to)
    }

    fn bytes_between(&self, from: usize, to: usize) -> usize {
        SseBatch::bytes_between(self, from, to)
    }
}

/// Adds the messages of `batch` from sequence `from` that pass `filter` to `fv`, in `rendering`,
/// stopping once `fv` holds [`WRITE_BYTES_MAX`] bytes or [`FrameVec::MAX_IOV`] slices (one message
/// larger than the cap still goes alone). Consecutive matching messages go as one slice.
/// Returns the next sequence owed and the number of messages added.
pub fn gather(
    batch: &FrameBatch,
    rendering: Rendering,
    from: u64,
    filter: Option<&Filter>,
    fv: &mut FrameVec,
) -> (u64, u64) {
    match rendering {
        Rendering::WebSocket => gather_from(batch, batch, from, filter, fv),
        Rendering::Sse => gather_from(batch.sse(), batch, from, filter, fv),
    }
}

fn gather_from(
    src: &impl Rendered,
    batch: &FrameBatch,
    from: u64,
    filter: Option<&Filter>,
    fv: &mut FrameVec,
) -> (u64, u64) {
    let mut i = from.saturating_sub(batch.first) as usize;
    let n = batch.len();
    let mut added = 0u64;
    match filter {
        None => {
            let mut j = i;
            while j < n && fv.len() + src.bytes_between(i, j + 1) <= WRITE_BYTES_MAX {
                j += 1;
            }
            if j == i && i < n && fv.is_empty() {
                j = i + 1;
            }
            if j > i {
                fv.push(src.slice(i, j));
                added = (j - i) as u64;
            }
            i = j;
        }
        Some(f) => {
            let mut run_start: Option<usize> = None;
            while i < n {
                if fv.len() >= WRITE_BYTES_MAX || fv.parts() + 1 >= FrameVec::MAX_IOV {
                    break;
                }
                if f.matches(batch.row(i)) {
                    run_start.get_or_insert(i);
                    added += 1;
                } else if let Some(s) = run_start.take() {
                    fv.push(src.slice(s, i));
                }
                i += 1;
            }
            if let Some(s) = run_start {
                fv.push(src.slice(s, i));
            }
        }
    }
    (batch.first + i as u64, added)
}

/// Writes everything `fv` holds and counts `messages` rows (and the bytes) as sent on `stream`.
/// `None` when the socket failed, or did not take one write (≤ 4 MiB) within
/// [`write_timeout`]: the session then ends without a close frame.
///
/// A write the socket takes at once (`WriteHalf::write_frames` tries a non-blocking send
/// first) costs no clock read and no timer. One that has to wait gets a deadline, a plain
/// `Instant` checked when the session's [`Tick`] fires (the tick is brought forward to it only
/// when it would fire later): no timer is created per write. The
/// tick may fire for the session's own clock meanwhile; the write then re-arms it for its
/// deadline and goes on, and [`Tick::take_fired`] tells the session to look at its clock.
pub async fn write(
    stream: &Stream,
    wr: &mut WriteHalf,
    fv: &mut FrameVec,
    messages: u64,
    dropped: Option<&AtomicU64>,
    tick: &mut Tick,
) -> Option<()> {
    let bytes = fv.len() as u64;
    let mut write = std::pin::pin!(wr.write_frames(std::mem::take(fv)));
    // a socket with room takes the whole write in its first poll: then no clock is read and
    // the tick is not touched
    let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
    let (res, back) = match first {
        Poll::Ready(out) => out,
        Poll::Pending => {
            let limit = Instant::now() + write_timeout();
            tick.by(limit);
            loop {
                if let Some(out) = tick.until(write.as_mut()).await {
                    break out;
                }
                if Instant::now() >= limit {
                    // counted once, under its transport (`None`: the caller already counted
                    // this reader); dropping the write cancels it
                    if let Some(d) = dropped {
                        d.fetch_add(1, Ordering::Relaxed);
                    }
                    return None;
                }
                tick.by(limit);
            }
        }
    };
    *fv = back;
    res.ok()?;
    stream
        .stats
        .frames_out
        .fetch_add(messages, Ordering::Relaxed);
    stream.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    if messages > 0 {
        stream.stats.last_send_us.store(now_us(), Ordering::Relaxed);
    }
    Some(())
}
