//! The frame codec (RFC 6455 §5.2): the RFC's §5.7 examples, every error and its close code,
//! encode → decode round trips, and random bytes split at random points.

use corecast_net::ws::close::{close_payload, truncate_utf8, CloseCode, CLOSE_REASON_BYTES_MAX};
use corecast_net::ws::frame::{
    apply_mask, decode, encode_close, encode_frame, encode_header, encode_ping, encode_pong,
    encode_text, frame_in_place, header_len, Decoded, FrameError, FrameHeader, FrameLimits, OpCode,
    Role,
};
use corecast_net::ws::message::MessageAssembler;
use rand::{Rng, RngCore, SeedableRng};

fn frame(buf: &mut [u8], limits: &FrameLimits) -> (FrameHeader, Vec<u8>, usize) {
    match decode(buf, limits).expect("valid frame") {
        Decoded::Frame {
            header,
            payload,
            consumed,
        } => (header, buf[payload].to_vec(), consumed),
        Decoded::NeedMore(n) => panic!("needs {n} more"),
    }
}

fn error(bytes: &[u8], limits: &FrameLimits) -> FrameError {
    decode(&mut bytes.to_vec(), limits).expect_err("invalid frame")
}

#[test]
fn rfc_examples_5_7() {
    let client = FrameLimits::client();
    let server = FrameLimits::server();
    // A single-frame unmasked text message.
    let (h, p, n) = frame(&mut [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], &client);
    assert_eq!(
        (h.fin, h.opcode, h.mask, h.len, p.as_slice(), n),
        (true, OpCode::Text, None, 5, &b"Hello"[..], 7)
    );
    // A single-frame masked text message.
    let mut masked = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let (h, p, n) = frame(&mut masked, &server);
    assert_eq!(
        (h.mask, p.as_slice(), n),
        (Some([0x37, 0xfa, 0x21, 0x3d]), &b"Hello"[..], 11)
    );
    assert!(h.masked());
    // A fragmented unmasked text message.
    let (h, p, _) = frame(&mut [0x01, 0x03, 0x48, 0x65, 0x6c], &client);
    assert_eq!(
        (h.fin, h.opcode, p.as_slice()),
        (false, OpCode::Text, &b"Hel"[..])
    );
    let (h, p, _) = frame(&mut [0x80, 0x02, 0x6c, 0x6f], &client);
    assert_eq!(
        (h.fin, h.opcode, p.as_slice()),
        (true, OpCode::Continuation, &b"lo"[..])
    );
    // Unmasked ping and masked pong.
    let (h, p, _) = frame(&mut [0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], &client);
    assert_eq!((h.opcode, p.as_slice()), (OpCode::Ping, &b"Hello"[..]));
    let mut pong = [
        0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let (h, p, _) = frame(&mut pong, &server);
    assert_eq!((h.opcode, p.as_slice()), (OpCode::Pong, &b"Hello"[..]));
    // 256 bytes binary in one unmasked frame; 64 KiB binary in one unmasked frame.
    let mut b256 = vec![0x82, 0x7e, 0x01, 0x00];
    b256.resize(4 + 256, 7);
    let (h, p, n) = frame(&mut b256, &client);
    assert_eq!(
        (h.opcode, h.len, p.len(), n),
        (OpCode::Binary, 256, 256, 260)
    );
    let mut b64k = vec![0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0];
    b64k.resize(10 + 65536, 7);
    let (h, _, n) = frame(&mut b64k, &client);
    assert_eq!((h.len, n), (65536, 10 + 65536));
}

#[test]
fn the_captured_greeting_header() {
    // PROTOCOL.md §1: `81 7e 02 b1` then `{"st...`, a 689-byte text frame.
    let mut out = Vec::new();
    encode_header(true, OpCode::Text, 689, None, &mut out);
    assert_eq!(out, [0x81, 0x7e, 0x02, 0xb1]);
}

#[test]
fn need_more_counts_exactly() {
    let mut out = Vec::new();
    encode_frame(
        true,
        OpCode::Binary,
        &[9u8; 300],
        Some([1, 2, 3, 4]),
        &mut out,
    );
    assert_eq!(out.len(), 2 + 2 + 4 + 300);
    let server = FrameLimits::server();
    let expected = |cut: usize| match cut {
        0 | 1 => 2 - cut,
        2 | 3 => 4 - cut,
        _ => out.len() - cut,
    };
    for cut in 0..out.len() {
        let mut part = out[..cut].to_vec();
        assert_eq!(
            decode(&mut part, &server),
            Ok(Decoded::NeedMore(expected(cut))),
            "cut {cut}"
        );
        assert_eq!(part, out[..cut], "NeedMore leaves the buffer alone");
    }
    let mut long = vec![0x82, 0xff, 0, 0];
    assert_eq!(decode(&mut long, &server), Ok(Decoded::NeedMore(6)));
}

#[test]
fn every_frame_error_and_its_close_code() {
    let server = FrameLimits::server();
    let client = FrameLimits::client();
    let mask = [0x80 | 0x05, 1, 2, 3, 4];
    let cases: Vec<(Vec<u8>, FrameLimits, FrameError, u16)> = vec![
        (
            vec![0xc1, 0x80, 0, 0, 0, 0],
            server,
            FrameError::ReservedBits { rsv: 0b100 },
            1002,
        ),
        (
            vec![0xb1, 0x80, 0, 0, 0, 0],
            server,
            FrameError::ReservedBits { rsv: 0b011 },
            1002,
        ),
        (
            vec![0x83, 0x80, 0, 0, 0, 0],
            server,
            FrameError::ReservedOpcode { opcode: 3 },
            1002,
        ),
        (
            vec![0x87, 0x80],
            server,
            FrameError::ReservedOpcode { opcode: 7 },
            1002,
        ),
        (
            vec![0x8b, 0x80],
            server,
            FrameError::ReservedOpcode { opcode: 0xb },
            1002,
        ),
        (
            vec![0x8f, 0x80],
            server,
            FrameError::ReservedOpcode { opcode: 0xf },
            1002,
        ),
        (
            vec![0x81, 0x05, b'H', b'e', b'l', b'l', b'o'],
            server,
            FrameError::UnmaskedFrame,
            1002,
        ),
        (
            [&[0x81][..], &mask].concat(),
            client,
            FrameError::MaskedFrame,
            1002,
        ),
        (
            vec![0x09, 0x80, 0, 0, 0, 0],
            server,
            FrameError::ControlFragmented {
                opcode: OpCode::Ping,
            },
            1002,
        ),
        (
            vec![0x08, 0x00],
            client,
            FrameError::ControlFragmented {
                opcode: OpCode::Close,
            },
            1002,
        ),
        (
            vec![0x89, 0xfe, 0x00, 0x7e],
            server,
            FrameError::ControlTooLong {
                opcode: OpCode::Ping,
                len: 126,
            },
            1002,
        ),
        (
            vec![0x88, 0x7e, 0x00, 0x7e],
            client,
            FrameError::ControlTooLong {
                opcode: OpCode::Close,
                len: 126,
            },
            1002,
        ),
        (
            vec![0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0],
            server,
            FrameError::LengthMsbSet { len: 1 << 63 },
            1002,
        ),
        (
            vec![0x82, 0xff, 0, 0, 0, 0, 0, 0x10, 0, 1],
            server,
            FrameError::TooBig {
                len: (1 << 20) + 1,
                limit: 1 << 20,
            },
            1009,
        ),
        (
            vec![0x82, 0x7f, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            client,
            FrameError::TooBig {
                len: i64::MAX as u64,
                limit: 1 << 20,
            },
            1009,
        ),
    ];
    for (bytes, limits, expected, code) in cases {
        let err = error(&bytes, &limits);
        assert_eq!(err, expected, "{bytes:02x?}");
        assert_eq!(err.close_code(), CloseCode(code));
    }
    // The size decision needs the header only: no payload was buffered.
    let tiny = FrameLimits {
        role: Role::Server,
        max_message_bytes: 10,
    };
    assert_eq!(
        error(&[0x82, 0x8b], &tiny),
        FrameError::TooBig { len: 11, limit: 10 }
    );
    let mut ten = vec![0x82, 0x8a, 0, 0, 0, 0];
    ten.resize(16, 0);
    assert!(matches!(decode(&mut ten, &tiny), Ok(Decoded::Frame { .. })));
}

#[test]
fn encode_header_uses_the_minimal_forms() {
    for (len, expected) in [
        (0u64, vec![0x81, 0x00]),
        (125, vec![0x81, 125]),
        (126, vec![0x81, 126, 0, 126]),
        (65535, vec![0x81, 126, 0xff, 0xff]),
        (65536, vec![0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        (1 << 40, vec![0x81, 127, 0, 0, 1, 0, 0, 0, 0, 0]),
    ] {
        let mut out = Vec::new();
        encode_header(true, OpCode::Text, len, None, &mut out);
        assert_eq!(out, expected, "len {len}");
        assert_eq!(header_len(len), expected.len());
        let mut masked = Vec::new();
        encode_header(
            false,
            OpCode::Continuation,
            len,
            Some([9, 8, 7, 6]),
            &mut masked,
        );
        assert_eq!(masked[0], 0x00);
        assert_eq!(masked[1], expected[1] | 0x80);
        assert_eq!(masked[expected.len()..], [9, 8, 7, 6]);
    }
}

#[test]
fn apply_mask_matches_the_bytewise_definition() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for len in 0..80 {
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        let mask: [u8; 4] = rng.random();
        let mut fast = data.clone();
        apply_mask(&mut fast, mask);
        let slow: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect();
        assert_eq!(fast, slow, "len {len}");
        apply_mask(&mut fast, mask);
        assert_eq!(fast, data);
    }
}

#[test]
fn server_and_control_encoders() {
    let mut out = Vec::new();
    encode_text(b"{}", &mut out);
    assert_eq!(out, b"\x81\x02{}");
    out.clear();
    encode_close(
        Some(CloseCode::TOO_SLOW),
        r#"{"error":"too_slow","backlog":8192}"#,
        None,
        &mut out,
    );
    assert_eq!(
        out,
        [
            &[0x88, 37, 0x11, 0x4d][..],
            br#"{"error":"too_slow","backlog":8192}"#
        ]
        .concat()
    );
    out.clear();
    encode_close(None, "ignored", None, &mut out);
    assert_eq!(out, [0x88, 0x00]);
    out.clear();
    encode_ping(b"hi", None, &mut out);
    encode_pong(b"hi", Some([1, 1, 1, 1]), &mut out);
    assert_eq!(
        out,
        [
            0x89,
            2,
            b'h',
            b'i',
            0x8a,
            0x82,
            1,
            1,
            1,
            1,
            b'h' ^ 1,
            b'i' ^ 1
        ]
    );
    // A long reason is cut at a character boundary to fit a control frame.
    out.clear();
    let reason = "é".repeat(100);
    encode_close(Some(CloseCode::GOING_AWAY), &reason, None, &mut out);
    assert_eq!(out[1] as usize, 2 + 122);
    assert!(std::str::from_utf8(&out[4..]).is_ok());
}

#[test]
fn frame_in_place_inserts_the_header() {
    for len in [0usize, 5, 125, 126, 300, 70_000] {
        let mut out = b"prefix".to_vec();
        out.extend(std::iter::repeat_n(b'x', len));
        frame_in_place(&mut out, 6, OpCode::Text);
        let mut expected = b"prefix".to_vec();
        encode_text(&vec![b'x'; len], &mut expected);
        assert_eq!(out, expected, "len {len}");
    }
}

#[test]
fn close_payloads() {
    assert_eq!(close_payload(CloseCode::NORMAL, ""), [0x03, 0xe8]);
    assert_eq!(close_payload(CloseCode(4404), "x"), [0x11, 0x34, b'x']);
    let long = "a".repeat(200);
    assert_eq!(
        close_payload(CloseCode::NORMAL, &long).len(),
        2 + CLOSE_REASON_BYTES_MAX
    );
    assert_eq!(truncate_utf8("aé", 2), "a");
    assert_eq!(truncate_utf8("aé", 3), "aé");
    for code in [1000, 1001, 1002, 1003, 1007, 1011, 1012, 1014, 3000, 4999] {
        assert!(CloseCode::is_sendable(code), "{code}");
    }
    for code in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
        assert!(!CloseCode::is_sendable(code), "{code}");
    }
}

#[test]
fn round_trips_both_roles() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let opcodes = [
        OpCode::Continuation,
        OpCode::Text,
        OpCode::Binary,
        OpCode::Close,
        OpCode::Ping,
        OpCode::Pong,
    ];
    for _ in 0..500 {
        let opcode = opcodes[rng.random_range(0..opcodes.len())];
        let len = if opcode.is_control() {
            rng.random_range(0..=125)
        } else {
            [
                0,
                1,
                125,
                126,
                127,
                65535,
                65536,
                rng.random_range(0..100_000),
            ][rng.random_range(0..8)]
        };
        let fin = opcode.is_control() || rng.random();
        let mut payload = vec![0u8; len];
        rng.fill_bytes(&mut payload);
        let masked = rng.random::<bool>();
        let mask = masked.then(|| rng.random::<[u8; 4]>());
        let mut wire = Vec::new();
        encode_frame(fin, opcode, &payload, mask, &mut wire);
        wire.extend_from_slice(b"next");
        let limits = FrameLimits {
            role: if masked { Role::Server } else { Role::Client },
            max_message_bytes: 1 << 20,
        };
        let encoded = wire.clone();
        let (h, p, consumed) = frame(&mut wire, &limits);
        assert_eq!(
            (h.fin, h.rsv, h.opcode, h.mask, h.len),
            (fin, 0, opcode, mask, len as u64)
        );
        assert_eq!(p, payload);
        assert_eq!(consumed, encoded.len() - 4);
        // Re-encoding the decoded frame reproduces the input.
        let mut again = Vec::new();
        encode_frame(h.fin, h.opcode, &p, h.mask, &mut again);
        assert_eq!(again, encoded[..consumed]);
    }
}

#[test]
fn random_bytes_split_anywhere_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xC0FFEE);
    for round in 0..2000 {
        let len = rng.random_range(0..200);
        let mut bytes = vec![0u8; len];
        rng.fill_bytes(&mut bytes);
        if round % 2 == 0 && len > 1 {
            // Bias toward plausible headers: valid opcodes, small lengths.
            bytes[0] = [0x81, 0x82, 0x01, 0x00, 0x80, 0x88, 0x89, 0x8a][rng.random_range(0..8)];
            bytes[1] = (bytes[1] & 0x80) | rng.random_range(0..130);
        }
        let limits = FrameLimits {
            role: if rng.random() {
                Role::Server
            } else {
                Role::Client
            },
            max_message_bytes: rng.random_range(0..300),
        };
        // Feed growing prefixes, as a socket would, consuming frames as they complete and
        // handing them to the message state machine.
        let mut assembler = MessageAssembler::new(limits.max_message_bytes);
        let mut buf = Vec::new();
        let mut fed = 0;
        'feed: while fed < bytes.len() {
            let step = rng.random_range(1..=bytes.len() - fed);
            buf.extend_from_slice(&bytes[fed..fed + step]);
            fed += step;
            loop {
                match decode(&mut buf, &limits) {
                    Ok(Decoded::Frame {
                        payload,
                        consumed,
                        header,
                    }) => {
                        assert!(payload.end == consumed && consumed <= buf.len());
                        assert_eq!(header.len as usize, payload.len());
                        if let Err(v) = assembler.push(&header, &buf[payload]) {
                            assert!(matches!(v.close_code().0, 1002 | 1007 | 1009));
                        }
                        buf.drain(..consumed);
                    }
                    Ok(Decoded::NeedMore(n)) => {
                        assert!(n > 0);
                        break;
                    }
                    Err(e) => {
                        assert!(matches!(e.close_code().0, 1002 | 1009));
                        break 'feed;
                    }
                }
            }
        }
    }
}
