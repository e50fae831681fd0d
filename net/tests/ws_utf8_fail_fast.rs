//! UTF-8 "fail fast" (RFC 6455 §8.1, Autobahn 6.4.x): a text message is rejected (1007) as
//! soon as the bytes received so far cannot be UTF-8, even mid-frame, through the receive path
//! a server uses: `receiver::Receiver`, whose `partial::FrameDecoder` runs over a buffer that
//! fills read by read, feeding `MessageAssembler::check_partial` with incomplete frames and
//! `push` with whole ones.

use corecast_net::ws::frame::{encode_frame, header_len, FrameLimits, OpCode, MASK_BYTES};
use corecast_net::ws::message::ProtocolViolation;
use corecast_net::ws::receiver::{ReceiveError, Received, Receiver};

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A server's receive side (`ws::receiver::Receiver`) and the messages it gave so far.
struct Server {
    rx: Receiver,
    messages: Vec<(bool, Vec<u8>)>,
}

impl Server {
    fn new() -> Server {
        Server {
            rx: Receiver::new(FrameLimits::server(), Vec::new()),
            messages: Vec::new(),
        }
    }

    /// One read's worth of bytes: every event the receiver gives before it asks for another
    /// read, as `engine/src/session/ws_io.rs` drives it.
    fn read(&mut self, bytes: &[u8]) -> Result<(), ProtocolViolation> {
        self.rx.extend(bytes);
        loop {
            match self.rx.next_event() {
                Ok(None) => return Ok(()),
                Ok(Some(Received::Message { binary, data })) => self.messages.push((binary, data)),
                Ok(Some(Received::Ping(_) | Received::Pong)) => {}
                Ok(Some(close)) => panic!("no close is sent, got {close:?}"),
                Err(ReceiveError::Message(v)) => return Err(v),
                Err(ReceiveError::Frame(e)) => panic!("valid frames are sent, got {e}"),
            }
        }
    }
}

/// A masked client frame.
fn frame(fin: bool, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(fin, opcode, payload, Some(KEY), &mut out);
    out
}

/// Bytes of a masked header for a `len`-byte payload.
fn head(len: usize) -> usize {
    header_len(len as u64) + MASK_BYTES
}

/// Feeds `wire` one byte per read; how many bytes had been fed when it failed, and how.
fn first_failure(wire: &[u8]) -> Option<(usize, ProtocolViolation)> {
    let mut r = Server::new();
    for (i, b) in wire.iter().enumerate() {
        if let Err(v) = r.read(std::slice::from_ref(b)) {
            return Some((i + 1, v));
        }
    }
    None
}

#[test]
fn invalid_byte_in_the_first_chunk_of_a_frame_fails_before_the_rest_arrives() {
    // Autobahn 6.4.3: one 21-byte frame sent in three chops; the second is F4 90 80 80.
    let part1: &[u8] = b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5";
    let payload = [part1, b"\xf4\x90\x80\x80", b"edited"].concat();
    let wire = frame(true, OpCode::Text, &payload);
    let mut r = Server::new();
    let first = head(payload.len()) + part1.len();
    assert_eq!(r.read(&wire[..first]), Ok(()), "the first chop is valid");
    let err = r.read(&wire[first..first + 4]).unwrap_err();
    assert_eq!(err, ProtocolViolation::InvalidUtf8 { at: 11 });
    assert_eq!(err.close_code().0, 1007);
    // It stays failed: the rest of the frame changes nothing.
    assert_eq!(r.read(&wire[first + 4..]), Err(err));

    // The very first payload bytes of a frame, the rest never sent.
    let wire = frame(
        true,
        OpCode::Text,
        &[b"\xff" as &[u8], &[b'a'; 500]].concat(),
    );
    let mut r = Server::new();
    let err = r.read(&wire[..head(501) + 1]).unwrap_err();
    assert_eq!(err, ProtocolViolation::InvalidUtf8 { at: 0 });

    // Autobahn 6.4.4: F4 ends the first chop, 90 comes alone.
    let part1: &[u8] = b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xf4";
    let payload = [part1, b"\x90"].concat();
    let wire = frame(true, OpCode::Text, &payload);
    let mut r = Server::new();
    let first = head(payload.len()) + part1.len();
    assert_eq!(r.read(&wire[..first]), Ok(()));
    assert_eq!(
        r.read(&wire[first..first + 1]),
        Err(ProtocolViolation::InvalidUtf8 { at: 11 })
    );
}

#[test]
fn code_points_split_across_reads_and_continuation_frames_are_accepted() {
    let text = "κόσμε € 😀 \u{10FFFF}".as_bytes();
    for cut in 0..=text.len() {
        // Two fragments cut at every byte, with a ping between them.
        let wire = [
            frame(false, OpCode::Text, &text[..cut]),
            frame(true, OpCode::Ping, b"p"),
            frame(true, OpCode::Continuation, &text[cut..]),
            frame(true, OpCode::Binary, b"\xff\xfe"),
            frame(true, OpCode::Text, text),
        ]
        .concat();
        // Delivered in reads of every size.
        for step in [1, 2, 3, 5, 7, 11, wire.len()] {
            let mut r = Server::new();
            for piece in wire.chunks(step) {
                r.read(piece)
                    .unwrap_or_else(|v| panic!("cut {cut} step {step}: {v}"));
            }
            assert_eq!(
                r.messages,
                [
                    (false, text.to_vec()),
                    (true, b"\xff\xfe".to_vec()),
                    (false, text.to_vec())
                ],
                "cut {cut} step {step}"
            );
            assert!(r.rx.is_idle());
        }
    }
}

#[test]
fn truncated_code_point_at_the_end_of_the_final_frame_fails() {
    let euro = "€".as_bytes();
    // Unfragmented: fine while the frame arrives, refused once it is whole.
    let wire = frame(true, OpCode::Text, &[b"ok" as &[u8], &euro[..2]].concat());
    assert_eq!(
        first_failure(&wire),
        Some((wire.len(), ProtocolViolation::InvalidUtf8 { at: 2 }))
    );
    // Fragmented: the final fragment ends mid code point.
    let wire = [
        frame(false, OpCode::Text, b"ok"),
        frame(true, OpCode::Continuation, &euro[..1]),
    ]
    .concat();
    assert_eq!(
        first_failure(&wire),
        Some((wire.len(), ProtocolViolation::InvalidUtf8 { at: 2 }))
    );
    // An empty final fragment after a cut one.
    let wire = [
        frame(false, OpCode::Text, &euro[..2]),
        frame(true, OpCode::Continuation, b""),
    ]
    .concat();
    assert_eq!(
        first_failure(&wire),
        Some((wire.len(), ProtocolViolation::InvalidUtf8 { at: 0 }))
    );
}

#[test]
fn overlong_surrogate_and_too_big_fail_on_the_offending_byte() {
    // (sequence, index of the first byte that makes it invalid)
    let cases: [(&[u8], usize); 5] = [
        (b"\xc0\xaf", 0),         // overlong '/': C0 is never a lead byte
        (b"\xe0\x80\xaf", 1),     // overlong 3-byte form
        (b"\xf0\x80\x80\xaf", 1), // overlong 4-byte form
        (b"\xed\xa0\x80", 1),     // U+D800, a surrogate
        (b"\xf4\x90\x80\x80", 1), // U+110000, over U+10FFFF
    ];
    for (bad, offending) in cases {
        // In one frame with more text after it.
        let payload = [b"ab" as &[u8], bad, b"never read"].concat();
        let wire = frame(true, OpCode::Text, &payload);
        assert_eq!(
            first_failure(&wire),
            Some((
                head(payload.len()) + 2 + offending + 1,
                ProtocolViolation::InvalidUtf8 { at: 2 }
            )),
            "{bad:02x?}"
        );
        // Its first byte ends one fragment, the rest starts the next.
        let wire = [
            frame(false, OpCode::Text, &[b"ab" as &[u8], &bad[..1]].concat()),
            frame(
                true,
                OpCode::Continuation,
                &[&bad[1..], b"x" as &[u8]].concat(),
            ),
        ]
        .concat();
        let fails_at = if offending == 0 {
            head(3) + 3
        } else {
            head(3) + 3 + head(bad.len()) + offending
        };
        assert_eq!(
            first_failure(&wire),
            Some((fails_at, ProtocolViolation::InvalidUtf8 { at: 2 })),
            "{bad:02x?} across fragments"
        );
    }
}

#[test]
fn misplaced_frames_fail_from_their_first_bytes() {
    // A continuation with no message open, its payload still arriving.
    let wire = frame(true, OpCode::Continuation, &[b'a'; 50]);
    assert_eq!(
        first_failure(&wire),
        Some((head(50), ProtocolViolation::ContinuationWithoutMessage))
    );
    // Binary payloads are never checked as UTF-8, whole or in part.
    let mut r = Server::new();
    let wire = frame(true, OpCode::Binary, b"\xff\xc0\xed\xa0\x80");
    for b in &wire {
        r.read(std::slice::from_ref(b)).unwrap();
    }
    assert_eq!(r.messages.len(), 1);
}
