//! A subscriber: a cursor over the log, fed from the reader pool below the ring and from the
//! shard's ring above it.
//!
//! The session holds `next`, the next offset owed. While `next` is below the ring it asks the
//! reader pool for a chunk of ready-made frames; once inside the ring it slices the shared batch
//! buffers. Either way it writes everything owed with one vectored write per wake-up, so replay and
//! live are the same loop and the splice is an offset: no gap, no duplicate. A subscriber whose
//! lag past its replay window exceeds `max_backlog` frames gets what it was already sent plus the
//! `max_backlog` frames queued before the overflow (a contiguous prefix) and then close 4429
//! `{"error":"too_slow","backlog":N}`; nobody else waits for it. Runs on the shard that accepted
//! the connection: one writer task and one reader task (pings, the peer's close).

use std::cell::Cell;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use corecast_net::protocol::close_reason::{CloseReason, NotReplayable};
use corecast_net::rt::{self, FrameVec, WriteHalf};
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{encode_close, encode_ping};

use super::deliver::{gather, write, Rendering};
use super::keepalive::{self, Due, Keepalive};
use super::pong::OwedPong;
use super::tick::Tick;
use super::ws_io::{WsIn, WsReader, LINGER};
use crate::auth::live::Guard;
use crate::fanout::signal::{FeedTarget, Signal};
use crate::filter::Filter;
use crate::registry::Stream;
use crate::replay::ReplayJob;
use crate::shard::ShardCtx;
use corecast_net::ws::receiver::Received;

#[derive(Default)]
struct SubState {
    /// The pong owed for the latest ping, written before the next frames.
    pong: OwedPong,
    /// When to ping the peer, and when to give up on it.
    keepalive: Keepalive,
    peer_close: Cell<Option<(u16, bool)>>,
    gone: Cell<bool>,
    /// Raised when the session is over (its close written, or the peer gone): the reader task
    /// stops reading frames, lingers for the peer's close, and lets go of the socket.
    ended: Signal,
    /// The principal's revocation and deadline (`None` on an open broker): 1008.
    guard: Option<Guard>,
}

/// Where a subscription starts.
pub struct Start {
    /// First offset (sequence) owed.
    pub next: u64,
    /// End of the replay window (the frontier at attach); live lag is counted past it.
    pub replay_end: u64,
    /// `?state`: the keyed state's frames, in offset order, all below `next`, written before
    /// anything else (empty otherwise).
    pub snapshot: Vec<bytes::Bytes>,
    /// Entities in `snapshot`.
    pub snapshot_entities: u64,
    /// `snapshot`'s claim on the stream's snapshot budget, given back as it is written.
    pub snapshot_hold: crate::state::SnapshotHold,
}

/// Serves a subscriber until it closes, falls too far behind, or the server shuts down.
/// The greeting was already written by the caller.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    ctx: Rc<ShardCtx>,
    stream: Arc<Stream>,
    ws: WsReader,
    mut wr: WriteHalf,
    start: Start,
    filter: Option<Filter>,
    signal: Rc<Signal>,
    guard: Option<Guard>,
) {
    let state = Rc::new(SubState {
        keepalive: Keepalive::new(ctx.shared.keepalive),
        guard,
        ..SubState::default()
    });
    stream.stats.subscribers.fetch_add(1, Ordering::Relaxed);
    // the reader task holds the signal weakly: a peer that never sends must not keep the
    // session counted as live (shutdown waits for live sessions)
    rt::spawn(read_loop(ws, state.clone(), Rc::downgrade(&signal)));
    let close = serve(
        &ctx,
        &stream,
        &mut wr,
        &state,
        &signal,
        start,
        filter.as_ref(),
    )
    .await;
    stream.stats.subscribers.fetch_sub(1, Ordering::Relaxed);
    if let Some((code, reason)) = close {
        let mut f = Vec::with_capacity(reason.len() + 8 + 127);
        state.pong.take_into(&mut f);
        encode_close(Some(CloseCode(code)), &reason, None, &mut f);
        let _ = Box::pin(rt::timeout(
            std::time::Duration::from_secs(5),
            wr.write_all(f),
        ))
        .await;
        let _ = wr.shutdown().await;
    }
    state.ended.raise();
}

/// Ends the session's direct feed when `serve` returns (or is dropped): the hub must not write
/// to a socket about to go.
struct FeedOff<'a>(&'a Signal);

impl Drop for FeedOff<'_> {
    fn drop(&mut self) {
        self.0.disable_feed();
    }
}

async fn read_loop(mut ws: WsReader, state: Rc<SubState>, signal: Weak<Signal>) {
    let raise = || {
        if let Some(s) = signal.upgrade() {
            s.raise();
        }
    };
    // until the session ends; then the socket is only drained (below)
    while let Some(ev) = ws.next_until(state.ended.wait()).await {
        state.keepalive.heard();
        match ev {
            WsIn::Frame(Received::Message { .. } | Received::Pong) => {}
            WsIn::Frame(Received::Ping(p)) => {
                state.pong.owe(p);
                raise();
            }
            WsIn::Frame(Received::Close { code, .. }) => {
                state
                    .peer_close
                    .set(Some((code.map_or(1000, |c| c.0), true)));
                raise();
                return;
            }
            WsIn::Violation { code, .. } => {
                state.peer_close.set(Some((code, false)));
                raise();
                return;
            }
            WsIn::Gone => {
                state.gone.set(true);
                raise();
                return;
            }
        }
    }
    // the session is over and our close (if any) is out: give the peer LINGER to answer it
    // and close its side, then drop the socket whatever it does (a peer that never stops
    // sending, or never sends, must not keep it)
    // boxed: only a closing session needs the timed drain's state
    let _ = Box::pin(rt::timeout(LINGER, ws.drain_until_eof())).await;
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    ctx: &ShardCtx,
    stream: &Arc<Stream>,
    wr: &mut WriteHalf,
    state: &SubState,
    signal: &Signal,
    mut start: Start,
    filter: Option<&Filter>,
) -> Option<(u16, String)> {
    let mut next = start.next;
    // the session's one timer: the keepalive's next instant and the stall deadline of the
    // write in flight (tick.rs) — not a timer (nor a clock read) per wake-up on the fan-out path
    let mut tick = Tick::new();
    // the keyed state first (`?state`): whole frames, ≤ 4 MiB per write, every offset below
    // `next`; the log then continues from `next`
    let snapshot = std::mem::take(&mut start.snapshot);
    if !snapshot.is_empty() {
        let mut fv = FrameVec::new();
        let mut chunks = snapshot.into_iter().peekable();
        while let Some(chunk) = chunks.next() {
            if state.gone.get() {
                return None;
            }
            let last = chunks.peek().is_none();
            fv.push(chunk);
            let room = fv.len() + chunks.peek().map_or(0, |c| c.len());
            if last || room > super::deliver::WRITE_BYTES_MAX {
                let messages = if last { start.snapshot_entities } else { 0 };
                let bytes = fv.len() as u64;
                write(
                    stream,
                    wr,
                    &mut fv,
                    messages,
                    Some(&stream.stats.dropped_slow),
                    &mut tick,
                )
                .await?;
                // written: the reader has these bytes, the budget has them back
                start.snapshot_hold.release(bytes);
            }
        }
    }
    // this subscriber's cursor on the stream's lag board (/metrics: corecast_subscriber_lag_rows)
    let lag = stream.stats.lag.register(next);
    // the hub's direct feed (fanout/signal.rs): an unfiltered plaintext subscriber that is
    // caught up gets each batch written by the hub itself, without a wake-up; removed (by the
    // guard's drop) before this returns, so before the socket goes
    let _feed = FeedOff(signal);
    if let (None, Some(sink)) = (filter, wr.raw_sink()) {
        signal.enable_feed(FeedTarget {
            sink,
            lag: lag.clone(),
            stream: stream.clone(),
            max_backlog: stream.cfg.max_backlog,
            live: state.guard.as_ref().map(|g| g.live.clone()),
            deadline: state.guard.as_ref().and_then(|g| g.deadline),
        });
    }
    let mut fv = FrameVec::new();
    let max_backlog = stream.cfg.max_backlog;
    let keepalive_on = state.keepalive.is_on();
    let mut keepalive_check = keepalive_on;
    loop {
        if state.gone.get() {
            return None;
        }
        if let Some(end) = state.guard.as_ref().and_then(Guard::ending) {
            let (code, reason) = end.close();
            return Some((code, reason.into()));
        }
        if let Some((code, _)) = state.peer_close.get() {
            return Some((code, String::new()));
        }
        // the control thread stopped the stream (a retired one is still read)
        if let Some(end) = stream.subscriber_end() {
            return Some(end);
        }
        // shutdown: between writes, so the peer never sees half a frame
        if ctx.readers_must_close(next < start.replay_end) {
            return Some((1001, "server shutting down".into()));
        }
        let (head, base) = {
            let hub_rc = ctx.hub(stream.index);
            let hub = hub_rc.borrow();
            (hub.head(), hub.base())
        };
        let lag_from = next.max(start.replay_end);
        if head.saturating_sub(lag_from) > max_backlog {
            stream.stats.dropped_slow.fetch_add(1, Ordering::Relaxed);
            // the frames queued before the overflow still go first (PROTOCOL.md §6): up to
            // `max_backlog` past the lag origin, while the ring holds them
            if next >= base {
                let upto = lag_from + max_backlog;
                let mut frames = 0u64;
                {
                    let hub_rc = ctx.hub(stream.index);
                    let hub = hub_rc.borrow();
                    for b in hub.batches_from(next) {
                        if next >= upto {
                            break;
                        }
                        let from = (next - b.first) as usize;
                        let to = (upto.min(b.end()) - b.first) as usize;
                        match filter {
                            None => {
                                fv.push(b.slice(from, to));
                                frames += (to - from) as u64;
                            }
                            Some(f) => {
                                for i in from..to {
                                    if f.matches(b.row(i)) {
                                        fv.push(b.slice(i, i + 1));
                                        frames += 1;
                                    }
                                }
                            }
                        }
                        next = b.first + to as u64;
                    }
                }
                if !fv.is_empty() {
                    write(stream, wr, &mut fv, frames, None, &mut tick).await?;
                }
            }
            return Some((
                4429,
                CloseReason::TooSlow {
                    backlog: max_backlog,
                }
                .encode(),
            ));
        }
        let mut frames = 0u64;
        let owed_from = next;
        // keepalive: a ping when the peer has been silent, the close when it stayed silent;
        // looked at when the tick fired (for it, or for a write's deadline)
        if tick.take_fired() && keepalive_on {
            keepalive_check = true;
        }
        if keepalive_check {
            keepalive_check = false;
            let now = Instant::now();
            let by = match state.keepalive.check(now) {
                Due::TimedOut => return Some((1011, keepalive::TIMEOUT_REASON.into())),
                Due::Ping(by) => {
                    let mut ping = Vec::with_capacity(2);
                    encode_ping(&[], None, &mut ping);
                    fv.push(bytes::Bytes::from(ping));
                    by
                }
                Due::Wait(by) => by,
            };
            tick.by(by);
        }
        // the owed pong first
        if state.pong.is_owed() {
            let mut pong = Vec::with_capacity(127);
            state.pong.take_into(&mut pong);
            fv.push(bytes::Bytes::from(pong));
        }
        if next < head {
            if next < base {
                // below the ring: the reader pool
                let (tx, rx) = flume::bounded(1);
                let job = ReplayJob {
                    stream: stream.index,
                    from: next,
                    to: base,
                    prune: filter.map(Filter::predicates).unwrap_or_default(),
                    reply: tx,
                };
                if ctx.shared.replay.submit(job).is_err() {
                    return Some((1011, "stream unavailable".into()));
                }
                match rx.recv_async().await {
                    Ok(Ok(r)) => {
                        if let Some((_, last)) = r.missing {
                            // rows this subscriber was owed are gone (retention dropped them
                            // while it read): what was sent is a contiguous prefix; say where
                            // history now starts
                            if !fv.is_empty() {
                                write(
                                    stream,
                                    wr,
                                    &mut fv,
                                    frames,
                                    Some(&stream.stats.dropped_slow),
                                    &mut tick,
                                )
                                .await?;
                            }
                            return Some((
                                4416,
                                CloseReason::NotReplayable(NotReplayable::Evicted {
                                    offset: next,
                                    // where a reconnect is accepted (the ring may still hold
                                    // rows retention dropped from disk)
                                    earliest: (last + 1)
                                        .max(stream.earliest.load(Ordering::Acquire)),
                                })
                                .encode(),
                            ));
                        }
                        let batch = &r.batch;
                        let mut from = next.max(batch.first);
                        while from < batch.end() {
                            let (n, f) = gather(batch, Rendering::WebSocket, from, filter, &mut fv);
                            frames += f;
                            from = n;
                            if from < batch.end() {
                                write(
                                    stream,
                                    wr,
                                    &mut fv,
                                    frames,
                                    Some(&stream.stats.dropped_slow),
                                    &mut tick,
                                )
                                .await?;
                                frames = 0;
                            }
                        }
                        next = r.resume.max(next);
                    }
                    _ => return Some((1011, "stream unavailable".into())),
                }
            } else {
                let hub_rc = ctx.hub(stream.index);
                let hub = hub_rc.borrow();
                for b in hub.batches_from(next) {
                    let (n, f) = gather(b, Rendering::WebSocket, next, filter, &mut fv);
                    next = n;
                    frames += f;
                    if n < b.end() {
                        break;
                    }
                }
            }
        }
        if !fv.is_empty() {
            write(
                stream,
                wr,
                &mut fv,
                frames,
                Some(&stream.stats.dropped_slow),
                &mut tick,
            )
            .await?;
            lag.store(next, Ordering::Relaxed);
            continue;
        }
        if next < head && next > owed_from {
            // a `where=` filter matched nothing in what was read: read on, nothing to wait for
            lag.store(next, Ordering::Relaxed);
            continue;
        }
        // caught up with everything committed: the hub's head may still trail the writer's
        // frontier while the last batch waits in this shard's inbox
        if ctx.shutting_down()
            && ctx.shared.publishers_open.load(Ordering::SeqCst) == 0
            && next >= head
            && head >= stream.end.load(Ordering::Acquire)
        {
            return Some((1001, "server shutting down".into()));
        }
        fv.trim();
        // a firing tick is looked at on the next turn (take_fired above); parked, the hub may
        // write batches from `next` on itself meanwhile
        signal.park(next);
        let _ = tick.until(signal.wait()).await;
        if let Some((fed_to, written)) = signal.unpark() {
            next = fed_to;
            if written > 0 {
                // the hub's send of the batches from `next` was cut short: the rest of the
                // batch it stopped in goes first, before any control frame
                let mut left = written;
                let mut whole = 0u64;
                let cut = {
                    let hub_rc = ctx.hub(stream.index);
                    let hub = hub_rc.borrow();
                    let mut cut = None;
                    for b in hub.batches_from(next) {
                        if b.first != next {
                            break;
                        }
                        if left >= b.frames.len() {
                            // written whole by the hub (not counted there)
                            left -= b.frames.len();
                            whole += b.len() as u64;
                            next = b.end();
                            if left == 0 {
                                break;
                            }
                            continue;
                        }
                        cut = Some((b.frames.clone(), b.len() as u64));
                        next = b.end();
                        break;
                    }
                    cut
                };
                stream.stats.frames_out.fetch_add(whole, Ordering::Relaxed);
                stream
                    .stats
                    .bytes_out
                    .fetch_add((written - left) as u64, Ordering::Relaxed);
                if left > 0 {
                    // gone from the ring, the batch cannot be completed: drop the connection
                    // (a close frame now would land inside a frame)
                    let (bytes, frames) = cut?;
                    fv.push(bytes);
                    fv.advance(left);
                    stream
                        .stats
                        .bytes_out
                        .fetch_add(left as u64, Ordering::Relaxed);
                    write(
                        stream,
                        wr,
                        &mut fv,
                        frames,
                        Some(&stream.stats.dropped_slow),
                        &mut tick,
                    )
                    .await?;
                }
            }
            lag.store(next, Ordering::Relaxed);
        }
    }
}
