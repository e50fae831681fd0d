//! The receiving side of one WebSocket connection, without I/O: bytes as they were read →
//! messages, pings, pongs and the close, in order.
//!
//! [`Receiver`] owns the connection's receive buffer, a [`FrameDecoder`] and a
//! [`MessageAssembler`]. The caller reads from its socket into the buffer
//! ([`Receiver::take_buffer`] / [`Receiver::put_buffer`], or [`Receiver::extend`]) and asks
//! [`Receiver::next_event`] until it answers `Ok(None)`, then reads again. A frame still
//! arriving is shown to the assembler read by read ([`MessageAssembler::check_partial`]), so a
//! text message whose bytes cannot be UTF-8 fails (1007) in the read that brought the bad byte,
//! and a frame whose header takes its message over the limit fails (1009) as soon as the header
//! is in — not when the rest of the frame arrives (RFC 6455 §8.1 "fail fast"). The outcome is
//! the same however the peer's bytes are split into reads (`net/tests/ws_split_equivalence.rs`).
//!
//! The server's sessions (`engine/src/session/ws_io.rs`) and the client
//! (`net/src/client/conn.rs`) both read through it.

use crate::ws::close::CloseCode;
use crate::ws::frame::{FrameError, FrameLimits};
use crate::ws::message::{Event, MessageAssembler, ProtocolViolation};
use crate::ws::partial::{FrameDecoder, Progress};
use thiserror::Error;

/// One thing the peer sent, owned (the caller may read again before it is handled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A complete data message; a text message's payload is valid UTF-8.
    Message {
        /// Sent as binary (opcode 0x2) rather than text (0x1).
        binary: bool,
        /// The whole message, bytes.
        data: Vec<u8>,
    },
    /// A ping: answer with a pong echoing this payload (≤ 125 bytes, §5.5.2).
    Ping(Vec<u8>),
    /// A pong; carries no obligation.
    Pong,
    /// The peer's close frame (§5.5.1). Nothing is read after it.
    Close {
        /// Its status code; `None` for an empty close payload.
        code: Option<CloseCode>,
        /// Its UTF-8 reason (may be empty).
        reason: String,
    },
}

/// Why reading a connection failed: the peer broke RFC 6455 or the size limit. Its `Display`
/// is a short close reason and [`ReceiveError::close_code`] the close code to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReceiveError {
    /// A frame header the codec refuses (masking, reserved bits or opcodes, control frame
    /// rules, a frame over the limit): 1002 or 1009.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A frame sequence breaking the message rules (fragmentation, UTF-8, close payload,
    /// message over the limit): 1002, 1007 or 1009.
    #[error(transparent)]
    Message(#[from] ProtocolViolation),
}

impl ReceiveError {
    /// The close code that answers it (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> CloseCode {
        match self {
            ReceiveError::Frame(e) => e.close_code(),
            ReceiveError::Message(v) => v.close_code(),
        }
    }
}

/// The receive state of one connection: buffered bytes, the frame in progress, the message in
/// progress. After an error or the peer's close it answers that again and reads nothing more.
#[derive(Debug)]
pub struct Receiver {
    buf: Vec<u8>,
    /// Where the first byte not yet decoded lies in `buf`.
    start: usize,
    frames: FrameDecoder,
    asm: MessageAssembler,
    /// The error or close that ended it.
    ended: Option<Result<Received, ReceiveError>>,
}

impl Receiver {
    /// A receiver enforcing `limits`: the masking rule for its role, and
    /// `limits.max_message_bytes` (bytes) on every frame and every reassembled message.
    /// `buffered` holds bytes already read after the HTTP upgrade (may be empty).
    pub fn new(limits: FrameLimits, buffered: Vec<u8>) -> Receiver {
        Receiver {
            buf: buffered,
            start: 0,
            asm: MessageAssembler::new(limits.max_message_bytes),
            frames: FrameDecoder::new(limits),
            ended: None,
        }
    }

    /// The next event from the bytes received so far: `Ok(Some(_))` for each message, ping,
    /// pong or close in the order sent, `Ok(None)` when more bytes are needed (read and ask
    /// again), `Err` when the connection must be closed with [`ReceiveError::close_code`].
    pub fn next_event(&mut self) -> Result<Option<Received>, ReceiveError> {
        if let Some(ended) = &self.ended {
            return ended.clone().map(Some);
        }
        match self.decode() {
            Ok(None) => {
                if self.start > 0 {
                    self.buf.drain(..self.start);
                    self.start = 0;
                }
                Ok(None)
            }
            Ok(Some(event)) => {
                if matches!(event, Received::Close { .. }) {
                    self.ended = Some(Ok(event.clone()));
                }
                Ok(Some(event))
            }
            Err(e) => {
                self.ended = Some(Err(e));
                Err(e)
            }
        }
    }

    fn decode(&mut self) -> Result<Option<Received>, ReceiveError> {
        while self.start < self.buf.len() {
            let base = self.start;
            match self.frames.decode(&mut self.buf[base..])? {
                Progress::Frame {
                    header,
                    payload,
                    consumed,
                } => {
                    self.start += consumed;
                    let p = &self.buf[base + payload.start..base + payload.end];
                    let event = match self.asm.push(&header, p)? {
                        None => continue,
                        Some(Event::Message { binary, payload }) => Received::Message {
                            binary,
                            data: payload.into_owned(),
                        },
                        Some(Event::Ping(p)) => Received::Ping(p.to_vec()),
                        Some(Event::Pong) => Received::Pong,
                        Some(Event::Close { code, reason }) => Received::Close {
                            code,
                            reason: reason.to_string(),
                        },
                    };
                    return Ok(Some(event));
                }
                Progress::Partial { header, received } => {
                    let p = &self.buf[base + received.start..base + received.end];
                    self.asm.check_partial(&header, p)?;
                    return Ok(None);
                }
                Progress::NeedMore(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Bytes buffered and not yet decoded: an event may come without a read when non-zero;
    /// an incomplete frame's bytes when [`Receiver::next_event`] has just answered `Ok(None)`.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether no message is open (between messages; control frames do not count).
    pub fn is_idle(&self) -> bool {
        self.asm.is_idle()
    }

    /// The buffer to read into: append the bytes read after its current contents, then hand it
    /// back with [`Receiver::put_buffer`] before asking [`Receiver::next_event`]. (For
    /// completion-based I/O, which takes the buffer's ownership for the read.)
    pub fn take_buffer(&mut self) -> Vec<u8> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        std::mem::take(&mut self.buf)
    }

    /// Gives back the buffer taken by [`Receiver::take_buffer`], with the bytes read appended.
    pub fn put_buffer(&mut self, buf: Vec<u8>) {
        self.buf = buf;
    }

    /// Appends bytes read elsewhere.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Throws away everything buffered and the frame in progress (when the rest of the
    /// connection is only drained to its end).
    pub fn discard(&mut self) {
        self.buf.clear();
        self.start = 0;
        self.frames.reset();
    }
}
