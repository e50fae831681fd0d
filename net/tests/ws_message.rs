//! The message state machine (RFC 6455 §5.4, §5.5, §8.1): reassembly, control frames between
//! fragments, every violation and its close code.

use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{FrameHeader, OpCode};
use corecast_net::ws::message::{Event, MessageAssembler, ProtocolViolation};
use std::borrow::Cow;

fn header(fin: bool, opcode: OpCode, payload: &[u8]) -> FrameHeader {
    FrameHeader {
        fin,
        rsv: 0,
        opcode,
        mask: None,
        len: payload.len() as u64,
    }
}

fn push<'a>(
    a: &mut MessageAssembler,
    fin: bool,
    opcode: OpCode,
    payload: &'a [u8],
) -> Result<Option<Event<'a>>, ProtocolViolation> {
    a.push(&header(fin, opcode, payload), payload)
}

fn text(payload: &[u8]) -> Event<'_> {
    Event::Message {
        binary: false,
        payload: Cow::Borrowed(payload),
    }
}

#[test]
fn single_frame_messages_borrow_the_frame() {
    let mut a = MessageAssembler::default();
    let event = push(&mut a, true, OpCode::Text, b"{\"a\":1}")
        .unwrap()
        .unwrap();
    assert!(matches!(
        &event,
        Event::Message {
            payload: Cow::Borrowed(_),
            binary: false
        }
    ));
    assert_eq!(event, text(b"{\"a\":1}"));
    let event = push(&mut a, true, OpCode::Binary, b"\xff\x00")
        .unwrap()
        .unwrap();
    assert_eq!(
        event,
        Event::Message {
            binary: true,
            payload: Cow::Borrowed(b"\xff\x00")
        }
    );
    assert!(a.is_idle());
}

#[test]
fn fragments_reassemble_around_control_frames() {
    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Text, b"Hel"), Ok(None));
    assert!(!a.is_idle());
    assert_eq!(
        push(&mut a, true, OpCode::Ping, b"p"),
        Ok(Some(Event::Ping(b"p")))
    );
    assert_eq!(push(&mut a, true, OpCode::Pong, b""), Ok(Some(Event::Pong)));
    assert_eq!(push(&mut a, false, OpCode::Continuation, b""), Ok(None));
    let done = push(&mut a, true, OpCode::Continuation, b"lo")
        .unwrap()
        .unwrap();
    assert_eq!(
        done,
        Event::Message {
            binary: false,
            payload: Cow::Owned(b"Hello".to_vec())
        }
    );
    assert!(a.is_idle());
    // The next message starts clean.
    assert_eq!(push(&mut a, true, OpCode::Text, b"x"), Ok(Some(text(b"x"))));
}

#[test]
fn utf8_split_across_fragments_is_fine_until_fin() {
    let euro = "€".as_bytes(); // e2 82 ac
    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Text, &euro[..1]), Ok(None));
    assert_eq!(
        push(&mut a, false, OpCode::Continuation, &euro[1..2]),
        Ok(None)
    );
    let done = push(&mut a, true, OpCode::Continuation, &euro[2..])
        .unwrap()
        .unwrap();
    assert_eq!(
        done,
        Event::Message {
            binary: false,
            payload: Cow::Owned(euro.to_vec())
        }
    );

    // Incomplete at FIN.
    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Text, b"ok"), Ok(None));
    let err = push(&mut a, true, OpCode::Continuation, &euro[..2]).unwrap_err();
    assert_eq!(err, ProtocolViolation::InvalidUtf8 { at: 2 });
    assert_eq!(err.close_code(), CloseCode::INVALID_PAYLOAD);
}

#[test]
fn invalid_utf8_fails_at_its_fragment() {
    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Text, b"abc"), Ok(None));
    // 0xce 0xba is fine, 0xed 0xa0 0x80 is a surrogate: invalid at once, not at FIN.
    let err = push(&mut a, false, OpCode::Continuation, b"\xce\xba\xed\xa0\x80").unwrap_err();
    assert_eq!(err, ProtocolViolation::InvalidUtf8 { at: 5 });
    assert_eq!(err.close_code().0, 1007);
    // A single frame too.
    let mut a = MessageAssembler::default();
    let err = push(&mut a, true, OpCode::Text, b"ok\xff").unwrap_err();
    assert_eq!(err, ProtocolViolation::InvalidUtf8 { at: 2 });
    // Binary is never checked.
    let mut a = MessageAssembler::default();
    assert!(push(&mut a, true, OpCode::Binary, b"\xff")
        .unwrap()
        .is_some());
}

#[test]
fn fragmentation_violations_are_1002() {
    let mut a = MessageAssembler::default();
    let err = push(&mut a, true, OpCode::Continuation, b"x").unwrap_err();
    assert_eq!(err, ProtocolViolation::ContinuationWithoutMessage);
    assert_eq!(err.close_code(), CloseCode::PROTOCOL_ERROR);

    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Binary, b"x"), Ok(None));
    let err = push(&mut a, true, OpCode::Text, b"y").unwrap_err();
    assert_eq!(
        err,
        ProtocolViolation::MessageAlreadyOpen {
            opcode: OpCode::Text
        }
    );
    assert_eq!(err.close_code(), CloseCode::PROTOCOL_ERROR);
    // After a violation nothing is accepted.
    assert!(a.is_closed());
    assert_eq!(
        push(&mut a, true, OpCode::Ping, b""),
        Err(ProtocolViolation::FrameAfterClose {
            opcode: OpCode::Ping
        })
    );
}

#[test]
fn messages_over_the_limit_are_1009() {
    let mut a = MessageAssembler::new(10);
    assert!(push(&mut a, true, OpCode::Binary, &[0; 10])
        .unwrap()
        .is_some());
    let err = push(&mut a, true, OpCode::Binary, &[0; 11]).unwrap_err();
    assert_eq!(
        err,
        ProtocolViolation::MessageTooBig {
            bytes: 11,
            limit: 10
        }
    );
    assert_eq!(err.close_code(), CloseCode::MESSAGE_TOO_BIG);

    let mut a = MessageAssembler::new(10);
    assert_eq!(push(&mut a, false, OpCode::Text, b"123456"), Ok(None));
    let err = push(&mut a, false, OpCode::Continuation, b"78901").unwrap_err();
    assert_eq!(
        err,
        ProtocolViolation::MessageTooBig {
            bytes: 11,
            limit: 10
        }
    );
}

#[test]
fn close_frames() {
    let mut a = MessageAssembler::default();
    assert_eq!(
        push(&mut a, true, OpCode::Close, b""),
        Ok(Some(Event::Close {
            code: None,
            reason: ""
        }))
    );
    assert!(a.is_closed());
    assert_eq!(
        push(&mut a, true, OpCode::Text, b"late"),
        Err(ProtocolViolation::FrameAfterClose {
            opcode: OpCode::Text
        })
    );

    let mut a = MessageAssembler::default();
    assert_eq!(push(&mut a, false, OpCode::Text, b"half"), Ok(None));
    assert_eq!(
        push(&mut a, true, OpCode::Close, b"\x03\xe8bye"),
        Ok(Some(Event::Close {
            code: Some(CloseCode::NORMAL),
            reason: "bye"
        }))
    );

    let cases: [(&[u8], ProtocolViolation, u16); 6] = [
        (b"\x03", ProtocolViolation::CloseLengthOne, 1002),
        (
            b"\x03\xe7",
            ProtocolViolation::InvalidCloseCode { code: 999 },
            1002,
        ),
        (
            b"\x03\xed",
            ProtocolViolation::InvalidCloseCode { code: 1005 },
            1002,
        ),
        (
            b"\x03\xf7",
            ProtocolViolation::InvalidCloseCode { code: 1015 },
            1002,
        ),
        (
            b"\x13\x88",
            ProtocolViolation::InvalidCloseCode { code: 5000 },
            1002,
        ),
        (
            b"\x03\xe8\xce\xba\xed",
            ProtocolViolation::InvalidCloseReason,
            1007,
        ),
    ];
    for (payload, expected, code) in cases {
        let mut a = MessageAssembler::default();
        let err = push(&mut a, true, OpCode::Close, payload).unwrap_err();
        assert_eq!(err, expected);
        assert_eq!(err.close_code(), CloseCode(code));
    }
    for valid in [
        1000u16, 1001, 1003, 3000, 1007, 1011, 1012, 1014, 3999, 4000, 4429, 4999,
    ] {
        let mut a = MessageAssembler::default();
        let payload = valid.to_be_bytes();
        assert!(
            push(&mut a, true, OpCode::Close, &payload).is_ok(),
            "{valid}"
        );
    }
}

#[test]
fn violations_have_short_reasons() {
    let all = [
        ProtocolViolation::ContinuationWithoutMessage,
        ProtocolViolation::MessageAlreadyOpen {
            opcode: OpCode::Binary,
        },
        ProtocolViolation::MessageTooBig {
            bytes: u64::MAX,
            limit: u64::MAX,
        },
        ProtocolViolation::InvalidUtf8 { at: usize::MAX },
        ProtocolViolation::CloseLengthOne,
        ProtocolViolation::InvalidCloseCode { code: 65535 },
        ProtocolViolation::InvalidCloseReason,
        ProtocolViolation::FrameAfterClose {
            opcode: OpCode::Continuation,
        },
    ];
    for v in all {
        assert!(v.to_string().len() <= 123, "{v}");
    }
}
