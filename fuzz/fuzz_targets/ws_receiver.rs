//! The WebSocket receive path (`net/src/ws/receiver.rs`: `FrameDecoder` → `check_partial` /
//! `MessageAssembler::push`) on arbitrary byte streams.
//!
//! Input: byte 0 picks the limits (bit 0: the role, bits 1-2: the size limit), byte 1 seeds the
//! splits, the rest is the stream. Checked (as `net/tests/ws_split_equivalence.rs` does for
//! generated streams): the same bytes fed whole, one byte per read, in random pieces, and through
//! `take_buffer` / `put_buffer` with a first piece already buffered at construction, give the
//! same events in the same order, the same final error or close, and, when the connection is
//! still open, the same undecoded byte count and idle state; after the end every further
//! `next_event` answers the end again; a text message is UTF-8, a ping at most 125 bytes, no
//! message over the limit.
#![no_main]

use corecast_fuzz::Rng;
use corecast_net::ws::frame::{FrameLimits, Role};
use corecast_net::ws::receiver::{ReceiveError, Received, Receiver};
use libfuzzer_sys::fuzz_target;

const LIMITS: [u64; 4] = [125, 1000, 70_000, 1 << 20];

#[derive(Debug, PartialEq, Eq)]
enum End {
    Open { buffered: usize, idle: bool },
    Closed,
    Failed(ReceiveError),
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Received>,
    end: End,
}

/// Feeds `pieces` in order (the first one given at construction when `buffered_first`), asking
/// for events after each read, as the sessions do.
fn run(limits: FrameLimits, pieces: &[&[u8]], buffered_first: bool, via_take: bool) -> Outcome {
    let (mut rx, rest) = if buffered_first && !pieces.is_empty() {
        (Receiver::new(limits, pieces[0].to_vec()), &pieces[1..])
    } else {
        (Receiver::new(limits, Vec::new()), pieces)
    };
    let mut events = Vec::new();
    let drain = |rx: &mut Receiver, events: &mut Vec<Received>| -> Option<End> {
        loop {
            match rx.next_event() {
                Ok(None) => return None,
                Ok(Some(ev)) => {
                    let closed = matches!(ev, Received::Close { .. });
                    events.push(ev);
                    if closed {
                        return Some(End::Closed);
                    }
                }
                Err(e) => return Some(End::Failed(e)),
            }
        }
    };
    let mut end = drain(&mut rx, &mut events);
    for piece in rest {
        if end.is_some() {
            break;
        }
        if via_take {
            let mut buf = rx.take_buffer();
            buf.extend_from_slice(piece);
            rx.put_buffer(buf);
        } else {
            rx.extend(piece);
        }
        end = drain(&mut rx, &mut events);
    }
    let end = match end {
        Some(end) => {
            // the end is answered again, however often it is asked
            for _ in 0..2 {
                match (&end, rx.next_event()) {
                    (End::Closed, Ok(Some(Received::Close { .. }))) => {}
                    (End::Failed(e), Err(again)) => assert_eq!(*e, again),
                    (end, again) => panic!("after {end:?}, next_event answered {again:?}"),
                }
            }
            end
        }
        None => End::Open {
            buffered: rx.buffered(),
            idle: rx.is_idle(),
        },
    };
    Outcome { events, end }
}

fuzz_target!(init: corecast_fuzz::seeds::init("ws_receiver"), |data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (cfg, seed, stream) = (data[0], data[1], &data[2..]);
    let limits = FrameLimits {
        role: if cfg & 1 == 0 { Role::Server } else { Role::Client },
        max_message_bytes: LIMITS[(cfg as usize >> 1) & 3],
    };
    let whole = run(limits, &[stream], false, false);
    for ev in &whole.events {
        match ev {
            Received::Message { binary, data } => {
                assert!(data.len() as u64 <= limits.max_message_bytes);
                if !binary {
                    assert!(std::str::from_utf8(data).is_ok(), "text message not UTF-8");
                }
            }
            Received::Ping(p) => assert!(p.len() <= 125),
            Received::Pong | Received::Close { .. } => {}
        }
    }

    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(run(limits, &bytes, false, false), whole, "one byte per read");

    let mut rng = Rng::new(seed as u64 ^ (stream.len() as u64) << 8);
    for round in 0..3 {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let n = match rng.below(4) {
                0 => 1 + rng.below(3) as usize,
                1 => 1 + rng.below(16) as usize,
                2 => 1 + rng.below(200) as usize,
                _ => 1 + rng.below(stream.len() as u64) as usize,
            };
            let end = (at + n).min(stream.len());
            pieces.push(&stream[at..end]);
            at = end;
        }
        let split = run(limits, &pieces, round == 1, round == 2);
        assert_eq!(split, whole, "pieces {:?}", pieces.iter().map(|p| p.len()).collect::<Vec<_>>());
    }
});
