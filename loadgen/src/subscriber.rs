//! One subscriber: reads frames with the least work protocol 4 allows — the WebSocket header,
//! the offset, and on sampled rows the `event_ts` the publisher wrote — and checks that every
//! expected offset arrives exactly once and in order.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

use corecast_net::rt::ReadHalf;
use hdrhistogram::Histogram;

use crate::shared::{now_us, Shared};
use crate::wsclient::{leading_u64, parse_frame, Frame};

/// The subscriber's progress, shared with its thread's controller (which sends pongs and the
/// final close).
pub struct SubState {
    /// The next offset expected.
    pub next: Cell<u64>,
    /// End of the greeting's replay window (== start for live).
    pub replay_end: Cell<u64>,
    /// When the replay window was complete.
    pub replay_done_at: Cell<Option<Instant>>,
    pub finished: Cell<bool>,
    pub pong: RefCell<Vec<Vec<u8>>>,
}

/// What a subscriber saw.
#[derive(Default)]
pub struct SubResult {
    pub frames: u64,
    pub gaps: u64,
    pub gap_events: u64,
    pub dups: u64,
    pub close: Option<(u16, String)>,
    pub error: Option<String>,
    pub last_frame_at: Option<Instant>,
    /// The first and the last offset received.
    pub first: Option<u64>,
    pub last: Option<u64>,
}

pub struct SubConfig {
    /// Offsets may skip (a `where=` filter): only order and duplicates are checked.
    pub filtered: bool,
    /// Record the latency of one row in `sample` (by offset).
    pub sample: u64,
    /// This subscriber's slot in [`Shared::sub_next`].
    pub slot: usize,
}

#[inline]
fn event_ts(row: &[u8]) -> Option<i64> {
    // `{"event_ts":` is the first column of the trade schema; look a little further otherwise
    const KEY: &[u8] = b"\"event_ts\":";
    let at = row.windows(KEY.len()).take(256).position(|w| w == KEY)?;
    let (v, n) = leading_u64(&row[at + KEY.len()..]);
    (n > 0).then_some(v as i64)
}

/// Reads until the server closes (normally after the controller's close) or an error.
pub async fn run(
    cfg: SubConfig,
    shared: Arc<Shared>,
    st: Rc<SubState>,
    mut rd: ReadHalf,
    mut buf: Vec<u8>,
    hist: Rc<RefCell<Histogram<u64>>>,
) -> SubResult {
    let mut r = SubResult::default();
    let mut pos = 0usize;
    let mut next = st.next.get();
    let replay_end = st.replay_end.get();
    let sample = cfg.sample.max(1);
    let mut delivered_reported = 0u64;
    'outer: loop {
        let now = Instant::now();
        let recv_us = now_us();
        let frames_before = r.frames;
        loop {
            let (frame, np) = match parse_frame(&buf, pos) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    r.error = Some(e);
                    break 'outer;
                }
            };
            pos = np;
            match frame {
                Frame::Data(range) => {
                    let p = &buf[range];
                    // [offset,ts,{row}]
                    if p.first() != Some(&b'[') {
                        r.error = Some(format!(
                            "not a data frame: {}",
                            String::from_utf8_lossy(&p[..p.len().min(120)])
                        ));
                        break 'outer;
                    }
                    let (off, n) = leading_u64(&p[1..]);
                    if n == 0 {
                        r.error = Some("data frame without an offset (stream has no log?)".into());
                        break 'outer;
                    }
                    r.frames += 1;
                    r.first.get_or_insert(off);
                    r.last = Some(off);
                    if off == next {
                        next += 1;
                    } else if off > next {
                        if !cfg.filtered {
                            r.gaps += off - next;
                            r.gap_events += 1;
                        }
                        next = off + 1;
                    } else {
                        r.dups += 1;
                    }
                    if off % sample == 0 && off >= replay_end {
                        // skip `offset,ts,` to the row
                        let rest = &p[1 + n..];
                        if let Some(c) = rest.iter().skip(1).position(|&b| b == b',') {
                            if let Some(ts) = event_ts(&rest[c + 2..]) {
                                let lat = (recv_us - ts).max(0) as u64;
                                hist.borrow_mut().saturating_record(lat);
                            }
                        }
                    }
                }
                Frame::Close(code, reason) => {
                    r.close = Some((code, reason));
                    break 'outer;
                }
                Frame::Ping(p) => st.pong.borrow_mut().push(p),
                Frame::Skip => {}
            }
        }
        if r.frames != frames_before {
            r.last_frame_at = Some(now);
            st.next.set(next);
            shared.sub_next[cfg.slot].store(next, Relaxed);
            if st.replay_done_at.get().is_none() && next >= replay_end {
                st.replay_done_at.set(Some(now));
            }
            let d = r.frames - delivered_reported;
            if d >= 256 {
                shared.delivered.fetch_add(d, Relaxed);
                delivered_reported = r.frames;
            }
        }
        if pos > 0 {
            let left = buf.len() - pos;
            buf.copy_within(pos.., 0);
            buf.truncate(left);
            pos = 0;
        }
        let (res, b) = rd.read_into(buf, 64 * 1024).await;
        buf = b;
        match res {
            Ok(0) => {
                r.error = Some("connection closed without a close frame".into());
                break;
            }
            Ok(_) => {}
            Err(e) => {
                r.error = Some(format!("read: {e}"));
                break;
            }
        }
    }
    st.next.set(next);
    // a finished subscriber no longer paces anyone
    shared.sub_next[cfg.slot].store(u64::MAX, Relaxed);
    shared
        .delivered
        .fetch_add(r.frames - delivered_reported, Relaxed);
    st.finished.set(true);
    r
}
