//! `--protocol raw`: the same publisher, subscribers, rates, windows and latency measurement
//! against a plain WebSocket pub/sub server with topics, such as `bench/peers/uws/server.js`
//! (uWebSockets.js): what a broker with no log, no schema and no offsets costs at best.
//!
//! The wire, all text messages:
//! - a subscriber upgrades on `/TOPIC`; the server subscribes it to TOPIC and greets it with
//!   `{"subscribed":"TOPIC"}` (publishing starts only once every subscriber has its greeting);
//!   from then on every message it gets is one or more rows published to TOPIC, separated by
//!   `\n` (the server may pass a publish frame on whole); each row counts as one delivered frame,
//!   as each NATS `MSG` does in `--protocol nats` (NATS, too, packs several into one WebSocket
//!   message).
//! - the publisher (one per run) upgrades on `/TOPIC?publish` and is greeted with
//!   `{"publisher":"TOPIC"}`. A publish frame is one message of `--batch` rows separated by
//!   `\n`; the server publishes the rows to TOPIC (each as its own message, or the frame whole),
//!   then answers the publisher `{"ok":N}` (N rows), which acknowledges the frame. Replies come
//!   in order.
//!
//! There are no offsets: as with `--protocol nats`, the publisher numbers its rows
//! (`{"event_ts":T,"seq":N,...}`, N = 1, 2, ...) and each subscriber must see every
//! acknowledged N exactly once and in order.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

use corecast_net::rt::ReadHalf;
use hdrhistogram::Histogram;
use sonic_rs::JsonValueTrait;

use crate::nats::row_fields;
use crate::shared::{now_us, Shared};
use crate::subscriber::{SubConfig, SubResult, SubState};
use crate::wsclient::{parse_frame, Frame};

/// Checks the greeting of a raw pub/sub server: `{"subscribed":TOPIC}` for a subscriber,
/// `{"publisher":TOPIC}` for the publisher, TOPIC the URL's path without its `/`.
pub fn check_greeting(greeting: &sonic_rs::Value, key: &str, path: &str) -> Result<(), String> {
    let topic = path.trim_start_matches('/');
    match greeting.get(key).and_then(|v| v.as_str()) {
        Some(t) if t == topic => Ok(()),
        _ => Err(format!(
            "not a raw pub/sub server's greeting (expected {{\"{key}\":\"{topic}\"}}): {}",
            sonic_rs::to_string(greeting).unwrap_or_default()
        )),
    }
}

/// The accounting of one delivered row: order, gaps, duplicates, and its latency when sampled.
/// Errors when the message is not a loadgen row.
#[inline]
fn on_row(
    p: &[u8],
    r: &mut SubResult,
    next: &mut u64,
    sample: u64,
    recv_us: i64,
    hist: &RefCell<Histogram<u64>>,
) -> Result<(), String> {
    let Some((ts, seq)) = row_fields(p) else {
        return Err(format!(
            "not a loadgen row: {}",
            String::from_utf8_lossy(&p[..p.len().min(120)])
        ));
    };
    r.frames += 1;
    r.first.get_or_insert(seq);
    r.last = Some(seq);
    if seq == *next {
        *next += 1;
    } else if seq > *next {
        r.gaps += seq - *next;
        r.gap_events += 1;
        *next = seq + 1;
    } else {
        r.dups += 1;
    }
    if seq % sample == 0 {
        let lat = (recv_us - ts).max(0) as u64;
        hist.borrow_mut().saturating_record(lat);
    }
    Ok(())
}

/// Reads rows until the server closes (after the controller's close) or an error; the same
/// checks and latency sampling as the protocol-4 subscriber, on the row's `seq`.
pub async fn run_sub(
    cfg: SubConfig,
    shared: Arc<Shared>,
    st: Rc<SubState>,
    mut rd: ReadHalf,
    mut buf: Vec<u8>,
    hist: Rc<RefCell<Histogram<u64>>>,
) -> SubResult {
    let mut r = SubResult::default();
    let mut next = st.next.get();
    let sample = cfg.sample.max(1);
    let mut delivered_reported = 0u64;
    let mut pos = 0usize;
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
                    for row in buf[range].split(|&b| b == b'\n') {
                        if let Err(e) = on_row(row, &mut r, &mut next, sample, recv_us, &hist) {
                            r.error = Some(e);
                            break 'outer;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_must_name_the_role_and_the_topic() {
        let g = |s: &str| sonic_rs::from_str::<sonic_rs::Value>(s).unwrap();
        assert!(check_greeting(&g(r#"{"subscribed":"trades"}"#), "subscribed", "/trades").is_ok());
        assert!(check_greeting(&g(r#"{"publisher":"trades"}"#), "publisher", "/trades").is_ok());
        // corecast's greeting, another topic, the other role: refused, naming what was expected
        let e = check_greeting(
            &g(r#"{"stream":"trades","end_offset":0}"#),
            "subscribed",
            "/trades",
        )
        .unwrap_err();
        assert!(e.contains(r#"{"subscribed":"trades"}"#), "{e}");
        assert!(check_greeting(&g(r#"{"subscribed":"other"}"#), "subscribed", "/trades").is_err());
        assert!(check_greeting(&g(r#"{"subscribed":"trades"}"#), "publisher", "/trades").is_err());
    }

    #[test]
    fn counts_order_gaps_duplicates_and_refuses_a_foreign_message() {
        let hist = RefCell::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap());
        let mut r = SubResult::default();
        let mut next = 1u64;
        let row = |seq: u64| {
            let mut v = Vec::new();
            crate::nats::row(&mut v, 1_000_000, seq);
            v
        };
        for seq in [1, 2, 4, 4, 5] {
            on_row(&row(seq), &mut r, &mut next, 1, 1_000_250, &hist).unwrap();
        }
        assert_eq!(
            (r.frames, r.gaps, r.gap_events, r.dups, next),
            (5, 1, 1, 1, 6)
        );
        assert_eq!((r.first, r.last), (Some(1), Some(5)));
        assert_eq!(hist.borrow().len(), 5);
        assert_eq!(hist.borrow().max(), 250);
        let e = on_row(b"{\"ok\":1}", &mut r, &mut next, 1, 0, &hist).unwrap_err();
        assert!(e.starts_with("not a loadgen row"), "{e}");
    }
}
