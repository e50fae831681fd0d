//! The WebSocket frame codec (`net/src/ws/frame.rs`, `partial.rs`) and the incremental UTF-8
//! check (`utf8.rs`) on arbitrary bytes.
//!
//! Input: byte 0 picks the limits (bit 0: the role, bits 1-2: the size limit); bit 7 set
//! makes the rest a UTF-8 stream case instead. Checked:
//!
//! - `decode_header`, `decode` and `FrameDecoder::decode` agree on every buffer: the same
//!   error, the same header, `NeedMore` counts that add up (`decode`'s at least the header's), a payload unmasked in place
//!   (exactly the payload's bytes change), a partial frame's received bytes unmasked;
//! - a decoded frame re-encoded (`encode_frame`, minimal length form) decodes to the same header
//!   and payload;
//! - `Utf8Stream` fed the bytes in two pieces accepts exactly what `std::str::from_utf8` accepts,
//!   and reports the same first invalid offset.
#![no_main]

use corecast_net::ws::frame::{
    apply_mask, decode, decode_header, encode_frame, Decoded, DecodedHeader, FrameLimits, OpCode,
    Role,
};
use corecast_net::ws::partial::{FrameDecoder, Progress};
use corecast_net::ws::utf8::Utf8Stream;
use libfuzzer_sys::fuzz_target;

const LIMITS: [u64; 4] = [125, 1000, 70_000, 1 << 20];

fuzz_target!(init: corecast_fuzz::seeds::init("ws_frame"), |data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    if cfg & 0x80 != 0 {
        utf8_case(cfg, rest);
        return;
    }
    let limits = FrameLimits {
        role: if cfg & 1 == 0 { Role::Server } else { Role::Client },
        max_message_bytes: LIMITS[(cfg as usize >> 1) & 3],
    };
    let h = decode_header(rest, &limits);
    let mut b1 = rest.to_vec();
    let d = decode(&mut b1, &limits);
    let mut b2 = rest.to_vec();
    let mut fd = FrameDecoder::new(limits);
    let p = fd.decode(&mut b2);
    match h {
        Err(e) => {
            assert_eq!(d, Err(e));
            assert_eq!(p, Err(e));
            assert_eq!(b1, rest);
            assert_eq!(b2, rest);
        }
        Ok(DecodedHeader::NeedMore(n)) => {
            assert!(n > 0);
            // both are lower bounds: `decode` may already count the payload it knows of
            assert!(matches!(d, Ok(Decoded::NeedMore(m)) if m >= n), "{d:?} after NeedMore({n})");
            assert_eq!(p, Ok(Progress::NeedMore(n)));
            assert_eq!(b1, rest);
            assert_eq!(b2, rest);
        }
        Ok(DecodedHeader::Header {
            header,
            header_bytes,
        }) => {
            assert!((2..=14).contains(&header_bytes));
            assert_eq!(header.rsv, 0);
            assert!(header.len <= limits.max_message_bytes);
            assert_eq!(header.masked(), limits.role == Role::Server);
            if header.opcode.is_control() {
                assert!(header.fin && header.len <= 125);
            }
            let total = header_bytes + header.len as usize;
            let unmasked = |range: std::ops::Range<usize>| {
                let mut v = rest[range].to_vec();
                if let Some(key) = header.mask {
                    apply_mask(&mut v, key);
                }
                v
            };
            if rest.len() < total {
                assert_eq!(d, Ok(Decoded::NeedMore(total - rest.len())));
                assert_eq!(b1, rest);
                let Ok(Progress::Partial {
                    header: ph,
                    received,
                }) = p
                else {
                    panic!("partial frame answered {p:?}");
                };
                assert_eq!(ph, header);
                assert_eq!(received, header_bytes..rest.len());
                assert_eq!(b2[..header_bytes], rest[..header_bytes]);
                assert_eq!(b2[header_bytes..], unmasked(header_bytes..rest.len())[..]);
            } else {
                let want = Decoded::Frame {
                    header,
                    payload: header_bytes..total,
                    consumed: total,
                };
                assert_eq!(d, Ok(want));
                assert_eq!(
                    p,
                    Ok(Progress::Frame {
                        header,
                        payload: header_bytes..total,
                        consumed: total,
                    })
                );
                let payload = unmasked(header_bytes..total);
                assert_eq!(b1[header_bytes..total], payload[..]);
                assert_eq!(b1[..header_bytes], rest[..header_bytes]);
                assert_eq!(b1[total..], rest[total..]);
                assert_eq!(b1, b2);
                reencode(&limits, header.fin, header.opcode, header.mask, &payload);
            }
        }
    }
});

fn reencode(
    limits: &FrameLimits,
    fin: bool,
    opcode: OpCode,
    mask: Option<[u8; 4]>,
    payload: &[u8],
) {
    let mut out = Vec::new();
    encode_frame(fin, opcode, payload, mask, &mut out);
    let mut copy = out.clone();
    match decode(&mut copy, limits) {
        Ok(Decoded::Frame {
            header,
            payload: range,
            consumed,
        }) => {
            assert_eq!(consumed, out.len());
            assert_eq!(
                (header.fin, header.opcode, header.mask),
                (fin, opcode, mask)
            );
            assert_eq!(&copy[range], payload);
        }
        other => panic!("re-encoded frame decodes as {other:?}"),
    }
}

fn utf8_case(cfg: u8, bytes: &[u8]) {
    let cut = if bytes.is_empty() {
        0
    } else {
        (cfg as usize & 0x7f) % (bytes.len() + 1)
    };
    let mut s = Utf8Stream::new();
    let result = s
        .feed(&bytes[..cut])
        .and_then(|()| s.feed(&bytes[cut..]))
        .and_then(|()| s.finish());
    match std::str::from_utf8(bytes) {
        Ok(_) => {
            assert_eq!(result, Ok(()));
            assert_eq!(s.fed(), bytes.len());
        }
        Err(e) => {
            let err = result.expect_err("invalid UTF-8 accepted");
            assert_eq!(err.at, e.valid_up_to(), "first invalid byte");
        }
    }
}
