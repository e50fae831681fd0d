//! The WebSocket frame codec (RFC 6455 §5.2), decode and encode apart, no I/O.
//!
//! **Decode.** [`decode`] looks at the start of a receive buffer and answers one of three
//! things: a complete [`Decoded::Frame`] (header, payload range, bytes consumed), with the
//! payload unmasked in place; [`Decoded::NeedMore`] with how many more bytes at least it needs;
//! or a [`FrameError`], each of which maps to one close code in [`FrameError::close_code`]. A
//! frame over [`FrameLimits::max_message_bytes`] is refused (1009) from its header alone,
//! before its payload is buffered. corecast negotiates no extension, so any RSV bit is an
//! error. [`decode_header`] is the header half alone, and [`apply_mask_at`] unmasks a piece of
//! a payload; [`crate::ws::partial`] builds on both to look into frames still arriving.
//!
//! **Encode.** Encoders append to the caller's `Vec<u8>`: [`encode_header`] (the 2, 4 or
//! 10-byte forms, always the minimal one, plus the mask key), [`encode_frame`] and the
//! shorthands for server text frames, close, ping and pong. A server never masks (§5.1); a
//! client always does, with a key it chose.

use crate::ws::close::{close_payload, CloseCode};
use std::ops::Range;
use thiserror::Error;

/// Default largest frame (and message) payload: 1 MiB, the reference's `transport_max_bytes`
/// (PROTOCOL.md §1, §10).
pub const MESSAGE_BYTES_MAX_DEFAULT: u64 = 1 << 20;
/// Largest control frame payload (RFC 6455 §5.5).
pub const CONTROL_PAYLOAD_BYTES_MAX: usize = 125;
/// Bytes of a masking key (RFC 6455 §5.3).
pub const MASK_BYTES: usize = 4;
/// Longest frame header: 2 + 8 (64-bit length) + 4 (mask).
pub const HEADER_BYTES_MAX: usize = 14;

/// Which end of the connection is decoding: it decides whether frames must be masked
/// (RFC 6455 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We are the server: every frame we receive must be masked.
    Server,
    /// We are the client: no frame we receive may be masked.
    Client,
}

/// A frame opcode (RFC 6455 §5.2, §11.8). 3-7 and 0xB-0xF are reserved and never decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    /// 0x0: continues a fragmented message.
    Continuation,
    /// 0x1: starts a UTF-8 text message.
    Text,
    /// 0x2: starts a binary message.
    Binary,
    /// 0x8: connection close (control).
    Close,
    /// 0x9: ping (control).
    Ping,
    /// 0xA: pong (control).
    Pong,
}

impl OpCode {
    /// The opcode for the low four bits `bits`, or `None` when reserved.
    pub fn from_bits(bits: u8) -> Option<OpCode> {
        match bits {
            0x0 => Some(OpCode::Continuation),
            0x1 => Some(OpCode::Text),
            0x2 => Some(OpCode::Binary),
            0x8 => Some(OpCode::Close),
            0x9 => Some(OpCode::Ping),
            0xA => Some(OpCode::Pong),
            _ => None,
        }
    }

    /// The four-bit wire value.
    pub fn bits(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    /// Whether this is a control opcode (close, ping, pong: RFC 6455 §5.5).
    pub fn is_control(self) -> bool {
        self.bits() & 0x8 != 0
    }
}

/// What [`decode`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Which end is decoding (masking rule).
    pub role: Role,
    /// Largest payload accepted, in bytes; a longer frame is [`FrameError::TooBig`] (1009).
    pub max_message_bytes: u64,
}

impl FrameLimits {
    /// A server's limits: masked frames, [`MESSAGE_BYTES_MAX_DEFAULT`].
    pub fn server() -> FrameLimits {
        FrameLimits {
            role: Role::Server,
            max_message_bytes: MESSAGE_BYTES_MAX_DEFAULT,
        }
    }

    /// A client's limits: unmasked frames, [`MESSAGE_BYTES_MAX_DEFAULT`].
    pub fn client() -> FrameLimits {
        FrameLimits {
            role: Role::Client,
            max_message_bytes: MESSAGE_BYTES_MAX_DEFAULT,
        }
    }
}

/// A decoded frame header (RFC 6455 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// FIN: this is the final fragment of its message.
    pub fin: bool,
    /// RSV1-3 as bits 2-0. Always 0 in a decoded frame (no extensions are negotiated).
    pub rsv: u8,
    /// The opcode.
    pub opcode: OpCode,
    /// The masking key, when the frame was masked. The payload [`decode`] returns is already
    /// unmasked.
    pub mask: Option<[u8; MASK_BYTES]>,
    /// Payload length in bytes.
    pub len: u64,
}

impl FrameHeader {
    /// Whether the frame was masked.
    pub fn masked(&self) -> bool {
        self.mask.is_some()
    }
}

/// What [`decode`] found at the start of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete frame.
    Frame {
        /// Its header.
        header: FrameHeader,
        /// Where its (unmasked) payload lies in the buffer.
        payload: Range<usize>,
        /// Bytes the frame took, header included; the next frame starts here.
        consumed: usize,
    },
    /// The frame is incomplete: at least this many more bytes are needed.
    NeedMore(usize),
}

/// A frame that breaks RFC 6455 or a limit. [`FrameError::close_code`] gives the close code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// RSV bits set with no extension negotiated (§5.2). 1002.
    #[error("reserved bits {rsv:#05b} set with no extension negotiated")]
    ReservedBits {
        /// RSV1-3 as bits 2-0.
        rsv: u8,
    },
    /// A reserved opcode (3-7, 0xB-0xF; §5.2). 1002.
    #[error("reserved opcode {opcode:#x}")]
    ReservedOpcode {
        /// The four-bit opcode.
        opcode: u8,
    },
    /// A client frame arrived unmasked at the server (§5.1). 1002.
    #[error("client frame is not masked")]
    UnmaskedFrame,
    /// A server frame arrived masked at the client (§5.1). 1002.
    #[error("server frame is masked")]
    MaskedFrame,
    /// A control frame without FIN (§5.5). 1002.
    #[error("fragmented {opcode:?} frame")]
    ControlFragmented {
        /// The control opcode.
        opcode: OpCode,
    },
    /// A control frame with more than 125 payload bytes (§5.5). 1002.
    #[error("{opcode:?} frame of {len} bytes; control frames carry at most 125")]
    ControlTooLong {
        /// The control opcode.
        opcode: OpCode,
        /// Its declared payload length.
        len: u64,
    },
    /// A 64-bit length with its most significant bit set (§5.2). 1002.
    #[error("64-bit payload length {len:#x} has its most significant bit set")]
    LengthMsbSet {
        /// The length field as sent.
        len: u64,
    },
    /// A payload longer than [`FrameLimits::max_message_bytes`]. 1009.
    #[error("frame of {len} bytes is over the {limit}-byte limit")]
    TooBig {
        /// The declared payload length.
        len: u64,
        /// The limit.
        limit: u64,
    },
}

impl FrameError {
    /// The close code that answers this error (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> CloseCode {
        match self {
            FrameError::ReservedBits { .. } => CloseCode::PROTOCOL_ERROR,
            FrameError::ReservedOpcode { .. } => CloseCode::PROTOCOL_ERROR,
            FrameError::UnmaskedFrame => CloseCode::PROTOCOL_ERROR,
            FrameError::MaskedFrame => CloseCode::PROTOCOL_ERROR,
            FrameError::ControlFragmented { .. } => CloseCode::PROTOCOL_ERROR,
            FrameError::ControlTooLong { .. } => CloseCode::PROTOCOL_ERROR,
            FrameError::LengthMsbSet { .. } => CloseCode::PROTOCOL_ERROR,
            FrameError::TooBig { .. } => CloseCode::MESSAGE_TOO_BIG,
        }
    }
}

/// What [`decode_header`] found at the start of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodedHeader {
    /// A complete header; the payload (still masked) starts `header_bytes` into the buffer.
    Header {
        /// The header.
        header: FrameHeader,
        /// Bytes of the header (2-14), mask key included.
        header_bytes: usize,
    },
    /// The header is incomplete: at least this many more bytes are needed.
    NeedMore(usize),
}

/// Decodes the frame header at the start of `buf` (RFC 6455 §5.2) and checks everything a
/// header alone decides (RSV bits, opcode, masking rule, control frame rules, the size limit).
/// Looks at no payload byte and changes nothing. [`decode`] is this plus the payload.
pub fn decode_header(buf: &[u8], limits: &FrameLimits) -> Result<DecodedHeader, FrameError> {
    let fields = match scan_header(buf, limits)? {
        Scan::Fields(fields) => fields,
        Scan::NeedMore(n) => return Ok(DecodedHeader::NeedMore(n)),
    };
    if buf.len() < fields.header_bytes {
        return Ok(DecodedHeader::NeedMore(fields.header_bytes - buf.len()));
    }
    Ok(DecodedHeader::Header {
        header: fields.header(buf),
        header_bytes: fields.header_bytes,
    })
}

/// Decodes the frame at the start of `buf` (RFC 6455 §5.2) and unmasks its payload in place.
///
/// Non-minimal length encodings are accepted (the RFC asks senders for the minimal form; being
/// lenient costs nothing). A returned frame's payload is unmasked in `buf`: consume it before
/// calling again, or the second call would mask it back. `NeedMore` leaves `buf` unchanged.
/// To look at a payload before all of it has arrived, use [`crate::ws::partial::FrameDecoder`].
pub fn decode(buf: &mut [u8], limits: &FrameLimits) -> Result<Decoded, FrameError> {
    let fields = match scan_header(buf, limits)? {
        Scan::Fields(fields) => fields,
        Scan::NeedMore(n) => return Ok(Decoded::NeedMore(n)),
    };
    let header_bytes = fields.header_bytes;
    let total = header_bytes.saturating_add(payload_bytes(fields.len, limits)?);
    if buf.len() < total {
        return Ok(Decoded::NeedMore(total - buf.len()));
    }
    let header = fields.header(buf);
    if let Some(key) = header.mask {
        apply_mask(&mut buf[header_bytes..total], key);
    }
    Ok(Decoded::Frame {
        header,
        payload: header_bytes..total,
        consumed: total,
    })
}

/// A header's fields up to its length, checked, and where its mask key (if any) lies.
struct HeaderFields {
    fin: bool,
    rsv: u8,
    opcode: OpCode,
    masked: bool,
    len: u64,
    /// Bytes of the whole header, mask key included.
    header_bytes: usize,
}

impl HeaderFields {
    /// The header, reading the mask key from `buf` (which holds at least `header_bytes`).
    fn header(&self, buf: &[u8]) -> FrameHeader {
        let mask = self.masked.then(|| {
            let mut key = [0u8; MASK_BYTES];
            key.copy_from_slice(&buf[self.header_bytes - MASK_BYTES..self.header_bytes]);
            key
        });
        FrameHeader {
            fin: self.fin,
            rsv: self.rsv,
            opcode: self.opcode,
            mask,
            len: self.len,
        }
    }
}

/// What [`scan_header`] found.
enum Scan {
    Fields(HeaderFields),
    NeedMore(usize),
}

/// Reads and checks the header's first 2-10 bytes (everything but the mask key).
fn scan_header(buf: &[u8], limits: &FrameLimits) -> Result<Scan, FrameError> {
    if buf.len() < 2 {
        return Ok(Scan::NeedMore(2 - buf.len()));
    }
    let (b0, b1) = (buf[0], buf[1]);
    let fin = b0 & 0x80 != 0;
    let rsv = (b0 >> 4) & 0x7;
    if rsv != 0 {
        return Err(FrameError::ReservedBits { rsv });
    }
    let opcode =
        OpCode::from_bits(b0 & 0xF).ok_or(FrameError::ReservedOpcode { opcode: b0 & 0xF })?;
    let masked = b1 & 0x80 != 0;
    match (limits.role, masked) {
        (Role::Server, false) => return Err(FrameError::UnmaskedFrame),
        (Role::Client, true) => return Err(FrameError::MaskedFrame),
        (Role::Server, true) | (Role::Client, false) => {}
    }
    if opcode.is_control() && !fin {
        return Err(FrameError::ControlFragmented { opcode });
    }
    let (len, len_bytes) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return Ok(Scan::NeedMore(4 - buf.len()));
            }
            (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 2)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(Scan::NeedMore(10 - buf.len()));
            }
            let mut field = [0u8; 8];
            field.copy_from_slice(&buf[2..10]);
            let len = u64::from_be_bytes(field);
            if len >> 63 != 0 {
                return Err(FrameError::LengthMsbSet { len });
            }
            (len, 8)
        }
        short => (u64::from(short), 0),
    };
    if opcode.is_control() && len > CONTROL_PAYLOAD_BYTES_MAX as u64 {
        return Err(FrameError::ControlTooLong { opcode, len });
    }
    if len > limits.max_message_bytes {
        return Err(FrameError::TooBig {
            len,
            limit: limits.max_message_bytes,
        });
    }
    Ok(Scan::Fields(HeaderFields {
        fin,
        rsv,
        opcode,
        masked,
        len,
        header_bytes: 2 + len_bytes + if masked { MASK_BYTES } else { 0 },
    }))
}

/// A checked payload length `len` as a `usize`. It is at most `max_message_bytes`, so this
/// fails only where that limit exceeds the address space ([`FrameError::TooBig`]).
pub(crate) fn payload_bytes(len: u64, limits: &FrameLimits) -> Result<usize, FrameError> {
    usize::try_from(len).map_err(|_| FrameError::TooBig {
        len,
        limit: limits.max_message_bytes,
    })
}

/// XORs `buf` with the repeating 4-byte `mask` (RFC 6455 §5.3), starting at mask byte 0.
/// Masking and unmasking are the same operation. Works eight bytes at a time.
pub fn apply_mask(buf: &mut [u8], mask: [u8; MASK_BYTES]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // The remainder starts at a multiple of 8, so at mask byte 0.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// Like [`apply_mask`] for a slice that starts `offset` bytes into the masked payload (so at
/// mask byte `offset % 4`): unmasks a payload piece by piece as it arrives.
pub fn apply_mask_at(buf: &mut [u8], mask: [u8; MASK_BYTES], offset: usize) {
    let mut key = mask;
    key.rotate_left(offset % MASK_BYTES);
    apply_mask(buf, key);
}

/// Bytes of an unmasked header for a `len`-byte payload: 2 (≤ 125), 4 (≤ 65535) or 10.
/// A masked header is [`MASK_BYTES`] longer.
pub fn header_len(len: u64) -> usize {
    match len {
        0..=125 => 2,
        126..=0xFFFF => 4,
        _ => 10,
    }
}

/// Appends a frame header (RFC 6455 §5.2): FIN, RSV 0, `opcode`, the minimal length form for
/// `len`, and `mask` when given. Panics if `len` has its top bit set, or if a control frame is
/// not final or longer than 125 bytes (programmer errors).
pub fn encode_header(
    fin: bool,
    opcode: OpCode,
    len: u64,
    mask: Option<[u8; MASK_BYTES]>,
    out: &mut Vec<u8>,
) {
    let (header, header_bytes) = header_array(fin, opcode, len, mask);
    out.extend_from_slice(&header[..header_bytes]);
}

/// The header [`encode_header`] writes, on the stack: the bytes and how many are used.
fn header_array(
    fin: bool,
    opcode: OpCode,
    len: u64,
    mask: Option<[u8; MASK_BYTES]>,
) -> ([u8; HEADER_BYTES_MAX], usize) {
    assert!(len >> 63 == 0);
    if opcode.is_control() {
        assert!(fin);
        assert!(len <= CONTROL_PAYLOAD_BYTES_MAX as u64);
    }
    let mut header = [0u8; HEADER_BYTES_MAX];
    header[0] = if fin { 0x80 } else { 0 } | opcode.bits();
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    let mut used = header_len(len);
    match used {
        2 => header[1] = mask_bit | len as u8,
        4 => {
            header[1] = mask_bit | 126;
            header[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            header[1] = mask_bit | 127;
            header[2..10].copy_from_slice(&len.to_be_bytes());
        }
    }
    if let Some(key) = mask {
        header[used..used + MASK_BYTES].copy_from_slice(&key);
        used += MASK_BYTES;
    }
    (header, used)
}

/// Appends one whole frame: header, then `payload` (masked with `mask` when given).
pub fn encode_frame(
    fin: bool,
    opcode: OpCode,
    payload: &[u8],
    mask: Option<[u8; MASK_BYTES]>,
    out: &mut Vec<u8>,
) {
    out.reserve(HEADER_BYTES_MAX + payload.len());
    encode_header(fin, opcode, payload.len() as u64, mask, out);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key);
    }
}

/// Appends a server text frame: FIN, unmasked, `payload` (which the caller guarantees is
/// UTF-8 JSON).
pub fn encode_text(payload: &[u8], out: &mut Vec<u8>) {
    encode_frame(true, OpCode::Text, payload, None, out);
}

/// Turns the bytes `out[start..]`, already written, into one final unmasked frame of
/// `opcode` by inserting the header before them. For payloads built in place (replies,
/// greetings) whose length is known only once written.
pub fn frame_in_place(out: &mut Vec<u8>, start: usize, opcode: OpCode) {
    assert!(start <= out.len());
    let len = (out.len() - start) as u64;
    let (header, header_bytes) = header_array(true, opcode, len, None);
    out.splice(start..start, header[..header_bytes].iter().copied());
}

/// Appends a close frame (RFC 6455 §5.5.1): `code` and `reason` (cut to 123 bytes at a
/// character boundary), or an empty payload when `code` is `None`.
pub fn encode_close(
    code: Option<CloseCode>,
    reason: &str,
    mask: Option<[u8; MASK_BYTES]>,
    out: &mut Vec<u8>,
) {
    match code {
        Some(code) => encode_frame(true, OpCode::Close, &close_payload(code, reason), mask, out),
        None => encode_frame(true, OpCode::Close, &[], mask, out),
    }
}

/// Appends a ping carrying `payload` (≤ 125 bytes; panics otherwise).
pub fn encode_ping(payload: &[u8], mask: Option<[u8; MASK_BYTES]>, out: &mut Vec<u8>) {
    encode_frame(true, OpCode::Ping, payload, mask, out);
}

/// Appends a pong echoing `payload` (≤ 125 bytes; panics otherwise), as a ping's answer
/// must (RFC 6455 §5.5.3).
pub fn encode_pong(payload: &[u8], mask: Option<[u8; MASK_BYTES]>, out: &mut Vec<u8>) {
    encode_frame(true, OpCode::Pong, payload, mask, out);
}
