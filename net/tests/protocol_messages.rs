//! Protocol-4 messages against the bytes captured from the reference (PROTOCOL.md §4-§8).

use corecast_net::protocol::close_reason::{CloseReason, NotReplayable};
use corecast_net::protocol::frame::{data_frame_len, encode_data_frame};
use corecast_net::protocol::greeting::{Greeting, PublisherMark};
use corecast_net::protocol::json_text;
use corecast_net::protocol::reply::{Offsets, Reply};
use corecast_net::protocol::ServerMessage;
use corecast_net::ws::close::CloseCode;
use corecast_net::ws::frame::{decode, Decoded, FrameLimits, OpCode};

const TRADES_SCHEMA: &str = r#"{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"amount":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"trade_id":{"type":"integer","format":"int64"}},"required":["event_ts","price","amount","side","symbol","trade_id"]}"#;

fn trades(end_offset: u64) -> Greeting<'static> {
    Greeting {
        stream: "trades",
        end_offset: Some(end_offset),
        replay: None,
        durable: true,
        group_commit: true,
        schema_json: Some(TRADES_SCHEMA),
        metadata: Some("file:///srv/data/trades/trades.metadata.json"),
        metadata_hint: Some("file:///srv/data/trades/trades.metadata/version-hint.text"),
        stream_id: Some("17282330-1d09-46d5-826f-2513ca1bef83"),
        where_json: None,
        publisher: None,
    }
}

/// Decodes `bytes` as one complete server frame and returns its text payload.
fn server_text_frame(bytes: &[u8]) -> String {
    let mut buf = bytes.to_vec();
    match decode(&mut buf, &FrameLimits::client()).unwrap() {
        Decoded::Frame {
            header,
            payload,
            consumed,
        } => {
            assert!(header.fin);
            assert_eq!(header.opcode, OpCode::Text);
            assert_eq!(consumed, bytes.len());
            String::from_utf8(buf[payload].to_vec()).unwrap()
        }
        Decoded::NeedMore(n) => panic!("incomplete frame, {n} more"),
    }
}

#[test]
fn greeting_durable_live_subscribe_empty_log() {
    let captured = r#"{"streamcast":4,"stream":"trades","end_offset":1,"replay":null,"durable":true,"group_commit":true,"schema":{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"amount":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"trade_id":{"type":"integer","format":"int64"}},"required":["event_ts","price","amount","side","symbol","trade_id"]},"metadata":"file:///srv/data/trades/trades.metadata.json","metadata_hint":"file:///srv/data/trades/trades.metadata/version-hint.text","stream_id":"17282330-1d09-46d5-826f-2513ca1bef83","where":null}"#;
    assert_eq!(String::from_utf8(trades(1).to_bytes()).unwrap(), captured);
    // PROTOCOL.md §1 saw `81 7e 02 b1 7b 22 73 74` for a 689-byte greeting (its paths were
    // longer than the ones printed in §4); this one is 659 bytes, so `02 93`.
    assert_eq!(captured.len(), 659);
    let mut framed = Vec::new();
    trades(1).encode_frame(&mut framed);
    assert_eq!(
        framed[..8],
        [0x81, 0x7e, 0x02, 0x93, 0x7b, 0x22, 0x73, 0x74]
    );
    assert_eq!(server_text_frame(&framed), captured);
}

#[test]
fn greeting_replay_with_where() {
    let g = Greeting {
        replay: Some((1, 9)),
        where_json: Some(r#"{"side":1}"#),
        ..trades(9)
    };
    let expected = String::from_utf8(trades(1).to_bytes())
        .unwrap()
        .replace(
            r#""end_offset":1,"replay":null"#,
            r#""end_offset":9,"replay":[1,9]"#,
        )
        .replace(r#""where":null}"#, r#""where":{"side":1}}"#);
    assert_eq!(String::from_utf8(g.to_bytes()).unwrap(), expected);
}

#[test]
fn greeting_no_log() {
    let g = Greeting {
        stream: "live",
        end_offset: None,
        replay: None,
        durable: false,
        group_commit: false,
        schema_json: None,
        metadata: None,
        metadata_hint: None,
        stream_id: None,
        where_json: None,
        publisher: None,
    };
    assert_eq!(
        String::from_utf8(g.to_bytes()).unwrap(),
        r#"{"streamcast":4,"stream":"live","end_offset":null,"replay":null,"durable":false,"group_commit":false,"schema":null,"metadata":null,"metadata_hint":null,"stream_id":null,"where":null}"#
    );
}

#[test]
fn greeting_exactly_once_publisher() {
    let fresh = Greeting {
        stream: "orders",
        publisher: Some(PublisherMark {
            id: "p1",
            last_seq: 0,
            last_offset: None,
        }),
        ..trades(1)
    };
    let text = String::from_utf8(fresh.to_bytes()).unwrap();
    assert!(text.starts_with(r#"{"streamcast":4,"stream":"orders","end_offset":1,"replay":null,"#));
    assert!(
        text.ends_with(r#","where":null,"publisher":{"id":"p1","last_seq":0,"last_offset":null}}"#)
    );
    let resumed = Greeting {
        stream: "orders",
        publisher: Some(PublisherMark {
            id: "p1",
            last_seq: 5,
            last_offset: Some(5),
        }),
        ..trades(6)
    };
    let text = String::from_utf8(resumed.to_bytes()).unwrap();
    assert!(text.starts_with(r#"{"streamcast":4,"stream":"orders","end_offset":6,"replay":null,"#));
    assert!(
        text.ends_with(r#","where":null,"publisher":{"id":"p1","last_seq":5,"last_offset":5}}"#)
    );
}

#[test]
fn greeting_escapes_names() {
    let g = Greeting {
        stream: "we\"ird\\name\u{1}",
        publisher: Some(PublisherMark {
            id: "é\n",
            last_seq: 0,
            last_offset: None,
        }),
        ..trades(1)
    };
    let text = String::from_utf8(g.to_bytes()).unwrap();
    assert!(text.contains(r#""stream":"we\"ird\\name\u0001""#));
    assert!(text.contains("\"id\":\"é\\n\""));
}

#[test]
fn data_frames_match_the_captured_rows() {
    let row = br#"{"event_ts":1796081766304281,"price":85566.0,"amount":0.015,"side":1,"symbol":"BTCUSD","trade_id":1001}"#;
    let mut out = Vec::new();
    encode_data_frame(Some(1), Some(1_796_081_766_307_229), row, &mut out);
    let first_len = out.len();
    assert_eq!(
        first_len,
        data_frame_len(Some(1), Some(1_796_081_766_307_229), row.len())
    );
    encode_data_frame(
        None,
        Some(1_796_081_797_207_861),
        br#"{"b":2,"a":1.0,"flag":true,"n":null}"#,
        &mut out,
    );
    assert_eq!(
        server_text_frame(&out[..first_len]),
        r#"[1,1796081766307229,{"event_ts":1796081766304281,"price":85566.0,"amount":0.015,"side":1,"symbol":"BTCUSD","trade_id":1001}]"#
    );
    assert_eq!(
        server_text_frame(&out[first_len..]),
        r#"[null,1796081797207861,{"b":2,"a":1.0,"flag":true,"n":null}]"#
    );
    let mut nulls = Vec::new();
    encode_data_frame(Some(u64::MAX), None, b"{}", &mut nulls);
    assert_eq!(server_text_frame(&nulls), "[18446744073709551615,null,{}]");
    let mut negative = Vec::new();
    encode_data_frame(Some(7), Some(i64::MIN), b"{}", &mut negative);
    assert_eq!(server_text_frame(&negative), "[7,-9223372036854775808,{}]");
}

#[test]
fn data_frames_use_every_header_form() {
    for row_bytes in [0usize, 100, 200, 70_000] {
        let mut row = b"{\"s\":\"".to_vec();
        row.resize(6 + row_bytes, b'x');
        row.extend_from_slice(b"\"}");
        let mut out = Vec::new();
        encode_data_frame(Some(42), Some(1), &row, &mut out);
        assert_eq!(out.len(), data_frame_len(Some(42), Some(1), row.len()));
        let text = server_text_frame(&out);
        assert_eq!(text.len(), 7 + row.len());
    }
}

#[test]
fn replies() {
    let cases: Vec<(Reply, &str)> = vec![
        (
            Reply::Ok {
                offsets: Offsets::Range(1..2),
                dup: 0,
            },
            r#"{"ok":[1]}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::Range(2..5),
                dup: 0,
            },
            r#"{"ok":[2,3,4]}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::Nulls(1),
                dup: 0,
            },
            r#"{"ok":[null]}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::Nulls(2),
                dup: 0,
            },
            r#"{"ok":[null,null]}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::Range(1..2),
                dup: 1,
            },
            r#"{"ok":[1],"dup":1}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::List(&[Some(2), Some(3), Some(4)]),
                dup: 2,
            },
            r#"{"ok":[2,3,4],"dup":2}"#,
        ),
        (
            Reply::Ok {
                offsets: Offsets::List(&[None, None, Some(9)]),
                dup: 2,
            },
            r#"{"ok":[null,null,9],"dup":2}"#,
        ),
        (
            Reply::Gap {
                expected: 5,
                got: 9,
            },
            r#"{"error":"gap","expected":5,"got":9}"#,
        ),
        (
            Reply::BadFrame {
                detail: "publish frame is not JSON: unexpected character",
            },
            r#"{"error":"bad_frame","detail":"publish frame is not JSON: unexpected character"}"#,
        ),
        (
            Reply::Rejected {
                detail: "column 'side' cannot hold 2147483648: it is declared int32",
            },
            r#"{"error":"rejected","detail":"column 'side' cannot hold 2147483648: it is declared int32"}"#,
        ),
        (
            Reply::Rejected {
                detail: "row names columns this log does not have: ['extra']",
            },
            r#"{"error":"rejected","detail":"row names columns this log does not have: ['extra']"}"#,
        ),
        (
            Reply::CommitFailed {
                detail: "disk \"full\"\n\ttab\u{7f}/é",
            },
            "{\"error\":\"commit_failed\",\"detail\":\"disk \\\"full\\\"\\n\\ttab\u{7f}/é\"}",
        ),
    ];
    for (reply, expected) in cases {
        assert_eq!(String::from_utf8(reply.to_bytes()).unwrap(), expected);
        let mut framed = Vec::new();
        reply.encode_frame(&mut framed);
        assert_eq!(server_text_frame(&framed), expected);
    }
    assert_eq!(Offsets::Range(2..5).len(), 3);
    assert!(Offsets::Nulls(0).is_empty());
}

#[test]
fn close_reasons_as_captured() {
    let serves = ["trades", "live", "orders"];
    let cases: Vec<(CloseReason, u16, &str)> = vec![
        (
            CloseReason::BadRequest {
                detail: "unknown query parameter(s): foo",
            },
            4400,
            r#"{"error":"bad_request","detail":"unknown query parameter(s): foo"}"#,
        ),
        (
            CloseReason::NoSuchStream {
                serves: Some(&serves),
            },
            4404,
            r#"{"error":"no_such_stream","serves":["live","orders","trades"]}"#,
        ),
        (
            CloseReason::NoSuchStream { serves: None },
            4404,
            r#"{"error":"no_such_stream"}"#,
        ),
        (CloseReason::Superseded, 4409, r#"{"error":"superseded"}"#),
        (
            CloseReason::StreamRetired {
                at_us: 1_796_081_823_413_501,
                end_offset: Some(1),
            },
            4410,
            r#"{"error":"stream_retired","at":1796081823413501,"end_offset":1}"#,
        ),
        (
            CloseReason::ExactlyOnceUnavailable { why: "stream" },
            4412,
            r#"{"error":"exactly_once_unavailable","why":"stream"}"#,
        ),
        (
            CloseReason::NotReplayable(NotReplayable::Ahead {
                offset: 20,
                end_offset: 9,
            }),
            4416,
            r#"{"error":"not_replayable","why":"ahead","offset":20,"end_offset":9}"#,
        ),
        (
            CloseReason::NotReplayable(NotReplayable::TooOld {
                offset: 1,
                behind: 100_001,
                max_replay: 100_000,
            }),
            4416,
            r#"{"error":"not_replayable","why":"too_old","offset":1,"behind":100001,"max_replay":100000}"#,
        ),
        (
            CloseReason::NotReplayable(NotReplayable::Evicted {
                offset: 3,
                earliest: 1_048_577,
            }),
            4416,
            r#"{"error":"not_replayable","why":"evicted","offset":3,"earliest":1048577}"#,
        ),
        (
            CloseReason::NotReplayable(NotReplayable::NotDurable),
            4416,
            r#"{"error":"not_replayable","why":"not_durable"}"#,
        ),
        (
            CloseReason::TooSlow { backlog: 8192 },
            4429,
            r#"{"error":"too_slow","backlog":8192}"#,
        ),
        (
            CloseReason::TooBig {
                size: 4640,
                limit: 4096,
                stream: "trades",
            },
            1009,
            r#"{"error":"too_big","size":4640,"limit":4096,"stream":"trades"}"#,
        ),
    ];
    for (reason, code, expected) in cases {
        assert_eq!(reason.code(), CloseCode(code));
        assert_eq!(reason.encode(), expected);
    }
}

#[test]
fn close_reasons_fit_in_123_bytes() {
    // bad_request: detail cut to 80 characters.
    let long = "x".repeat(200);
    let text = CloseReason::BadRequest { detail: &long }.encode();
    assert_eq!(
        text,
        format!(r#"{{"error":"bad_request","detail":"{}"}}"#, "x".repeat(80))
    );
    // ... and further when escaping would not fit, never splitting a character or an escape.
    let controls = "\u{1}".repeat(80);
    let text = CloseReason::BadRequest { detail: &controls }.encode();
    assert!(text.len() <= 123, "{text}");
    assert!(text.ends_with("\\u0001\"}"), "{text}");
    let wide = "€".repeat(80);
    let text = CloseReason::BadRequest { detail: &wide }.encode();
    assert!(text.len() <= 123 && text.len() > 110, "{}", text.len());
    // no_such_stream keeps the sorted names that fit.
    let names: Vec<String> = (0..40).map(|i| format!("stream-{i:02}")).collect();
    let refs: Vec<&str> = names.iter().rev().map(String::as_str).collect();
    let text = CloseReason::NoSuchStream {
        serves: Some(&refs),
    }
    .encode();
    assert!(text.len() <= 123, "{text}");
    assert!(
        text.starts_with(r#"{"error":"no_such_stream","serves":["stream-00","stream-01","#),
        "{text}"
    );
    assert!(text.ends_with("\"]}"), "{text}");
    // too_big drops the trailing stream name when it does not fit.
    let name = "n".repeat(128);
    let text = CloseReason::TooBig {
        size: 4640,
        limit: 4096,
        stream: &name,
    }
    .encode();
    assert_eq!(text, r#"{"error":"too_big","size":4640,"limit":4096}"#);
    // Every numeric reason fits even at its widest.
    let widest = [
        CloseReason::NotReplayable(NotReplayable::TooOld {
            offset: u64::MAX,
            behind: u64::MAX,
            max_replay: u64::MAX,
        }),
        CloseReason::StreamRetired {
            at_us: i64::MIN,
            end_offset: Some(u64::MAX),
        },
        CloseReason::ExactlyOnceUnavailable { why: &long },
    ];
    for reason in widest {
        assert!(reason.encode().len() <= 123, "{}", reason.encode());
    }
    assert_eq!(
        CloseReason::NotReplayable(NotReplayable::TooOld {
            offset: u64::MAX,
            behind: u64::MAX,
            max_replay: u64::MAX
        })
        .encode(),
        r#"{"error":"not_replayable","why":"too_old","offset":18446744073709551615,"behind":18446744073709551615}"#
    );
}

#[test]
fn json_text_escapes_like_msgspec() {
    let mut out = Vec::new();
    let s = "a\"b\\c\u{8}\u{c}\n\r\t\u{0}\u{1f}/\u{7f}é€😀";
    json_text::write_str(s, &mut out);
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0000\\u001f/\u{7f}é€😀\""
    );
    assert_eq!(json_text::str_len(s), out.len());
}
