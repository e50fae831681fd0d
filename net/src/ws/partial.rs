//! Frame decoding over a receive buffer that fills read by read, with the payload of the frame
//! in progress unmasked as its bytes arrive.
//!
//! [`crate::ws::frame::decode`] answers only for a whole frame. [`FrameDecoder`] also answers
//! [`Progress::Partial`] for a frame whose header is complete but whose payload is not: the
//! payload bytes received so far, already unmasked in place, so that a text message can be
//! checked as UTF-8 before the rest of its frame arrives (RFC 6455 §8.1 "fail fast"). It
//! remembers how much of that payload it has unmasked, so each byte is unmasked exactly once
//! whichever way the frame is split across reads.

use crate::ws::frame::{
    apply_mask_at, decode_header, payload_bytes, DecodedHeader, FrameError, FrameHeader,
    FrameLimits,
};
use std::ops::Range;

/// What [`FrameDecoder::decode`] found at the start of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A complete frame, its payload unmasked in the buffer.
    Frame {
        /// Its header.
        header: FrameHeader,
        /// Where its (unmasked) payload lies in the buffer.
        payload: Range<usize>,
        /// Bytes the frame took, header included; the next frame starts here.
        consumed: usize,
    },
    /// The header is complete, the payload is not.
    Partial {
        /// The frame's header (`len` is the whole payload's length).
        header: FrameHeader,
        /// Where the payload bytes received so far lie in the buffer, unmasked (may be empty).
        /// Always starts at the payload's first byte: each call covers the previous one's.
        received: Range<usize>,
    },
    /// The header is incomplete: at least this many more bytes are needed.
    NeedMore(usize),
}

/// A frame decoder for one connection's receive buffer.
///
/// Contract: call [`FrameDecoder::decode`] with the buffer starting at the first byte of the
/// frame in progress. After [`Progress::Frame`], drop those `consumed` bytes before the next
/// call; after [`Progress::Partial`], keep them (moving them, or appending after them, is fine).
/// [`FrameDecoder::reset`] when the buffer is thrown away.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    limits: FrameLimits,
    /// Payload bytes of the frame in progress already unmasked in the buffer.
    unmasked: usize,
}

impl FrameDecoder {
    /// A decoder enforcing `limits` (masking rule, size limit) on every frame.
    pub fn new(limits: FrameLimits) -> FrameDecoder {
        FrameDecoder {
            limits,
            unmasked: 0,
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &FrameLimits {
        &self.limits
    }

    /// Forgets the frame in progress (its unmasked bytes are gone with the buffer).
    pub fn reset(&mut self) {
        self.unmasked = 0;
    }

    /// Decodes the frame at the start of `buf`, unmasking the payload bytes not unmasked by an
    /// earlier call. Errors are those of [`crate::ws::frame::decode_header`], decided by the
    /// header alone; after one, the connection is over.
    pub fn decode(&mut self, buf: &mut [u8]) -> Result<Progress, FrameError> {
        let (header, header_bytes) = match decode_header(buf, &self.limits)? {
            DecodedHeader::Header {
                header,
                header_bytes,
            } => (header, header_bytes),
            DecodedHeader::NeedMore(n) => return Ok(Progress::NeedMore(n)),
        };
        let len = payload_bytes(header.len, &self.limits)?;
        let received = (buf.len() - header_bytes).min(len);
        debug_assert!(self.unmasked <= received, "buffer lost bytes of its frame");
        if let Some(key) = header.mask {
            let fresh = header_bytes + self.unmasked..header_bytes + received;
            apply_mask_at(&mut buf[fresh], key, self.unmasked);
        }
        let payload = header_bytes..header_bytes + received;
        if received == len {
            self.unmasked = 0;
            return Ok(Progress::Frame {
                header,
                consumed: payload.end,
                payload,
            });
        }
        self.unmasked = received;
        Ok(Progress::Partial {
            header,
            received: payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::frame::{encode_frame, OpCode};

    /// Feeds `wire` to a decoder in pieces of `step` bytes, like reads; the payload it ends
    /// with and every `Partial` prefix it showed on the way.
    fn feed(wire: &[u8], step: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut d = FrameDecoder::new(FrameLimits::server());
        let mut buf = Vec::new();
        let mut prefixes = Vec::new();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            match d.decode(&mut buf).unwrap() {
                Progress::Frame {
                    payload, consumed, ..
                } => {
                    assert_eq!(consumed, buf.len());
                    return (buf[payload].to_vec(), prefixes);
                }
                Progress::Partial { received, .. } => prefixes.push(buf[received].to_vec()),
                Progress::NeedMore(n) => assert!(n > 0),
            }
        }
        panic!("the frame never completed");
    }

    #[test]
    fn payload_split_anywhere_unmasks_once() {
        let payload: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut wire = Vec::new();
        encode_frame(
            true,
            OpCode::Binary,
            &payload,
            Some([9, 0x5a, 0xc3, 1]),
            &mut wire,
        );
        for step in [1, 2, 3, 5, 7, 13, 64, 999, wire.len()] {
            let (got, prefixes) = feed(&wire, step);
            assert_eq!(got, payload, "step {step}");
            for p in &prefixes {
                assert_eq!(p[..], payload[..p.len()], "step {step}");
            }
        }
    }

    #[test]
    fn partial_shows_the_received_prefix_before_the_rest_arrives() {
        let mut wire = Vec::new();
        encode_frame(
            true,
            OpCode::Text,
            b"hello world",
            Some([1, 2, 3, 4]),
            &mut wire,
        );
        let mut d = FrameDecoder::new(FrameLimits::server());
        let mut buf = wire[..2 + 4 + 5].to_vec();
        match d.decode(&mut buf).unwrap() {
            Progress::Partial { header, received } => {
                assert_eq!((header.opcode, header.len), (OpCode::Text, 11));
                assert_eq!(&buf[received], b"hello");
            }
            other => panic!("{other:?}"),
        }
        // Calling again with nothing new leaves the prefix as it is.
        assert!(matches!(d.decode(&mut buf), Ok(Progress::Partial { .. })));
        assert_eq!(&buf[6..], b"hello");
        buf.extend_from_slice(&wire[11..]);
        match d.decode(&mut buf).unwrap() {
            Progress::Frame { payload, .. } => assert_eq!(&buf[payload], b"hello world"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn header_errors_come_before_the_payload() {
        let mut d = FrameDecoder::new(FrameLimits::server());
        // Unmasked client frame: refused from its first two bytes.
        assert_eq!(d.decode(&mut [0x81, 0x05]), Err(FrameError::UnmaskedFrame));
        assert_eq!(d.decode(&mut [0x81]), Ok(Progress::NeedMore(1)));
    }
}
