//! From frames to messages (RFC 6455 §5.4 fragmentation, §5.5 control frames, §8.1 UTF-8).
//!
//! [`MessageAssembler`] is fed each frame [`crate::ws::frame::decode`] returns, in order, and
//! answers with at most one [`Event`] per frame, or a [`ProtocolViolation`] that ends the
//! connection with [`ProtocolViolation::close_code`]. Its states are named for what they wait
//! for: `ExpectMessage` (no message open), `ExpectContinuation` (a fragmented message is
//! open) and `Closed` (a close frame was received or a violation was found: nothing more is
//! accepted). Each frame consumes the current state and yields the next.
//!
//! Control frames may arrive between the fragments of a message. Text is validated as UTF-8
//! as it arrives ([`Utf8Stream`]), so an invalid sequence fails when its fragment arrives
//! (1007); a sequence cut at a fragment boundary is fine until the final fragment. To fail
//! even before a fragment is whole, feed the received part of a frame whose payload has not
//! all arrived to [`MessageAssembler::check_partial`] (see [`crate::ws::partial`]) before
//! [`MessageAssembler::push`]ing the whole frame: the bytes it checked are not checked again.

use crate::ws::close::CloseCode;
use crate::ws::frame::{FrameHeader, OpCode, MESSAGE_BYTES_MAX_DEFAULT};
use crate::ws::utf8::{Utf8Stream, Utf8StreamError};
use std::borrow::Cow;
use thiserror::Error;

/// What one frame amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A complete data message. A text message's payload is valid UTF-8. Borrowed from the
    /// frame when it came unfragmented, owned when reassembled.
    Message {
        /// Whether it was sent as binary (opcode 0x2) rather than text (0x1).
        binary: bool,
        /// The whole message.
        payload: Cow<'a, [u8]>,
    },
    /// A ping: answer with a pong echoing this payload (§5.5.2).
    Ping(&'a [u8]),
    /// A pong (unsolicited or answering our ping); carries no obligation.
    Pong,
    /// The peer's close frame (§5.5.1): its code (`None` for an empty payload) and reason.
    /// Echo a close and stop reading; the assembler accepts nothing after it.
    Close {
        /// The status code, when the payload had one.
        code: Option<CloseCode>,
        /// The UTF-8 reason (may be empty).
        reason: &'a str,
    },
}

/// A frame sequence that breaks RFC 6455 or the message limit. Its `Display` is a short
/// close reason; [`ProtocolViolation::close_code`] is the close code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProtocolViolation {
    /// A continuation frame with no fragmented message open (§5.4). 1002.
    #[error("continuation frame without a message to continue")]
    ContinuationWithoutMessage,
    /// A text or binary frame while a fragmented message is open (§5.4). 1002.
    #[error("{opcode:?} frame inside a fragmented message")]
    MessageAlreadyOpen {
        /// The new frame's opcode.
        opcode: OpCode,
    },
    /// The message grew past the limit. 1009.
    #[error("message of {bytes} bytes is over the {limit}-byte limit")]
    MessageTooBig {
        /// Bytes of message so far, the offending fragment included.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A text message is not UTF-8 (§8.1): an invalid sequence at byte `at` of the message,
    /// or a sequence left incomplete by the final fragment. 1007.
    #[error("text message is not UTF-8 at byte {at}")]
    InvalidUtf8 {
        /// Offset in the message of the first byte that is not valid UTF-8.
        at: usize,
    },
    /// A close frame with a one-byte payload (§5.5.1). 1002.
    #[error("close frame with a 1-byte payload")]
    CloseLengthOne,
    /// A close code that may not be sent (§7.4): below 1000, 1004-1006, 1015, 1016-2999,
    /// 5000 and up. 1002.
    #[error("invalid close code {code}")]
    InvalidCloseCode {
        /// The code received.
        code: u16,
    },
    /// A close reason that is not UTF-8 (§5.5.1). 1007.
    #[error("close reason is not UTF-8")]
    InvalidCloseReason,
    /// A frame after the peer's close frame (§5.5.1). 1002.
    #[error("{opcode:?} frame after close")]
    FrameAfterClose {
        /// The late frame's opcode.
        opcode: OpCode,
    },
}

impl ProtocolViolation {
    /// The close code that answers this violation (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> CloseCode {
        match self {
            ProtocolViolation::ContinuationWithoutMessage => CloseCode::PROTOCOL_ERROR,
            ProtocolViolation::MessageAlreadyOpen { .. } => CloseCode::PROTOCOL_ERROR,
            ProtocolViolation::MessageTooBig { .. } => CloseCode::MESSAGE_TOO_BIG,
            ProtocolViolation::InvalidUtf8 { .. } => CloseCode::INVALID_PAYLOAD,
            ProtocolViolation::CloseLengthOne => CloseCode::PROTOCOL_ERROR,
            ProtocolViolation::InvalidCloseCode { .. } => CloseCode::PROTOCOL_ERROR,
            ProtocolViolation::InvalidCloseReason => CloseCode::INVALID_PAYLOAD,
            ProtocolViolation::FrameAfterClose { .. } => CloseCode::PROTOCOL_ERROR,
        }
    }
}

/// What the assembler waits for.
#[derive(Debug)]
enum State {
    /// No message open: a text or binary frame starts one.
    ExpectMessage,
    /// A fragmented message is open: continuation frames extend it.
    ExpectContinuation { binary: bool, payload: Vec<u8> },
    /// A close was received or a violation found; every further frame is refused.
    Closed,
}

/// The receive-side message state machine. One per connection.
#[derive(Debug)]
pub struct MessageAssembler {
    state: State,
    max_message_bytes: u64,
    /// The UTF-8 check of the text message open (or being started by a partial frame);
    /// at the start of a stream whenever no text is open.
    utf8: Utf8Stream,
    /// Payload bytes of the frame in progress that [`MessageAssembler::check_partial`]
    /// already fed to `utf8`; 0 when none.
    frame_checked: usize,
}

impl Default for MessageAssembler {
    fn default() -> Self {
        MessageAssembler::new(MESSAGE_BYTES_MAX_DEFAULT)
    }
}

impl MessageAssembler {
    /// An assembler refusing messages over `max_message_bytes` (1009).
    pub fn new(max_message_bytes: u64) -> MessageAssembler {
        MessageAssembler {
            state: State::ExpectMessage,
            max_message_bytes,
            utf8: Utf8Stream::new(),
            frame_checked: 0,
        }
    }

    /// Whether no fragmented message is open and no close was received.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::ExpectMessage)
    }

    /// Whether a close frame was received or a violation found.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Feeds one decoded frame (`payload` already unmasked). Returns the event it completes,
    /// `None` for a non-final fragment, or the violation; after a close or a violation every
    /// frame is [`ProtocolViolation::FrameAfterClose`]. When [`MessageAssembler::check_partial`]
    /// saw the start of this frame, `payload` must begin with the very bytes it saw.
    pub fn push<'a>(
        &mut self,
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> Result<Option<Event<'a>>, ProtocolViolation> {
        debug_assert_eq!(header.len, payload.len() as u64);
        let state = std::mem::replace(&mut self.state, State::Closed);
        let (next, result) = self.handle(state, header, payload);
        self.frame_checked = 0;
        self.state = match result {
            Ok(_) => next,
            Err(_) => State::Closed,
        };
        result
    }

    /// Checks the first bytes of a frame whose payload has not all arrived: `received` is the
    /// payload so far (unmasked, from its first byte; each call's covers the last one's). For
    /// a text message's frame, the bytes not checked yet are validated as UTF-8 at once, so an
    /// invalid sequence fails (1007) without waiting for the rest of the frame; a frame that
    /// may not come now (a continuation with no message open, a data frame inside a fragmented
    /// message, anything after a close) or whose length takes its message over the limit
    /// fails as [`MessageAssembler::push`] would fail it, in the order `push` checks (size
    /// before UTF-8), so the error is the same however the frame is split. Binary payloads
    /// and control frames are left for `push`. After an error the assembler is closed.
    pub fn check_partial(
        &mut self,
        header: &FrameHeader,
        received: &[u8],
    ) -> Result<(), ProtocolViolation> {
        debug_assert!(received.len() as u64 <= header.len);
        // Whether the frame is text, and the bytes of message before it.
        let text = match (&self.state, header.opcode) {
            (_, OpCode::Ping | OpCode::Pong | OpCode::Close) => return Ok(()),
            (State::Closed, opcode) => Err(ProtocolViolation::FrameAfterClose { opcode }),
            (State::ExpectMessage, OpCode::Text) => Ok((true, 0)),
            (State::ExpectMessage, OpCode::Binary) => Ok((false, 0)),
            (State::ExpectMessage, OpCode::Continuation) => {
                Err(ProtocolViolation::ContinuationWithoutMessage)
            }
            (State::ExpectContinuation { binary, payload }, OpCode::Continuation) => {
                Ok((!binary, payload.len()))
            }
            (State::ExpectContinuation { .. }, opcode) => {
                Err(ProtocolViolation::MessageAlreadyOpen { opcode })
            }
        };
        // The size before the UTF-8, as `push` checks them: the frame's whole length is known
        // from its header, so a message it takes over the limit fails now (1009) whichever
        // of its bytes have arrived.
        let text = text.and_then(|(text, before)| {
            self.check_size((before as u64).saturating_add(header.len))?;
            Ok(text)
        });
        let result = match text {
            Ok(true) => {
                let fresh = &received[self.frame_checked.min(received.len())..];
                self.frame_checked = received.len().max(self.frame_checked);
                self.utf8.feed(fresh).map_err(invalid_utf8)
            }
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.state = State::Closed;
        }
        result
    }

    fn handle<'a>(
        &mut self,
        state: State,
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> (State, Result<Option<Event<'a>>, ProtocolViolation>) {
        let opcode = header.opcode;
        if let State::Closed = state {
            return (state, Err(ProtocolViolation::FrameAfterClose { opcode }));
        }
        match opcode {
            OpCode::Close => (State::Closed, close_event(payload)),
            OpCode::Ping => (state, Ok(Some(Event::Ping(payload)))),
            OpCode::Pong => (state, Ok(Some(Event::Pong))),
            OpCode::Text | OpCode::Binary => match state {
                State::ExpectMessage => self.start(opcode == OpCode::Binary, header.fin, payload),
                State::ExpectContinuation { .. } | State::Closed => {
                    (state, Err(ProtocolViolation::MessageAlreadyOpen { opcode }))
                }
            },
            OpCode::Continuation => match state {
                State::ExpectContinuation {
                    binary,
                    payload: buffered,
                } => self.extend(binary, buffered, header.fin, payload),
                State::ExpectMessage | State::Closed => {
                    (state, Err(ProtocolViolation::ContinuationWithoutMessage))
                }
            },
        }
    }

    fn start<'a>(
        &mut self,
        binary: bool,
        fin: bool,
        payload: &'a [u8],
    ) -> (State, Result<Option<Event<'a>>, ProtocolViolation>) {
        if let Err(e) = self.check_size(payload.len() as u64) {
            return (State::Closed, Err(e));
        }
        if fin {
            if !binary {
                if let Err(e) = self.check_utf8(payload, true) {
                    return (State::Closed, Err(e));
                }
            }
            let event = Event::Message {
                binary,
                payload: Cow::Borrowed(payload),
            };
            return (State::ExpectMessage, Ok(Some(event)));
        }
        self.extend(binary, Vec::new(), false, payload)
    }

    fn extend<'a>(
        &mut self,
        binary: bool,
        mut buffered: Vec<u8>,
        fin: bool,
        payload: &'a [u8],
    ) -> (State, Result<Option<Event<'a>>, ProtocolViolation>) {
        if let Err(e) = self.check_size((buffered.len() + payload.len()) as u64) {
            return (State::Closed, Err(e));
        }
        if !binary {
            if let Err(e) = self.check_utf8(payload, fin) {
                return (State::Closed, Err(e));
            }
        }
        buffered.extend_from_slice(payload);
        if fin {
            let event = Event::Message {
                binary,
                payload: Cow::Owned(buffered),
            };
            (State::ExpectMessage, Ok(Some(event)))
        } else {
            let next = State::ExpectContinuation {
                binary,
                payload: buffered,
            };
            (next, Ok(None))
        }
    }

    /// Validates a text frame's `payload`, less the bytes `check_partial` already saw, and at
    /// the end of the message (`fin`) that no code point was left incomplete. The check starts
    /// afresh for the next message once this one ends, well or not.
    fn check_utf8(&mut self, payload: &[u8], fin: bool) -> Result<(), ProtocolViolation> {
        let fresh = &payload[self.frame_checked.min(payload.len())..];
        let mut result = self.utf8.feed(fresh);
        if fin {
            result = result.and_then(|()| self.utf8.finish());
        }
        if fin || result.is_err() {
            self.utf8.reset();
        }
        result.map_err(invalid_utf8)
    }

    fn check_size(&self, bytes: u64) -> Result<(), ProtocolViolation> {
        if bytes > self.max_message_bytes {
            return Err(ProtocolViolation::MessageTooBig {
                bytes,
                limit: self.max_message_bytes,
            });
        }
        Ok(())
    }
}

/// The violation for an invalid sequence at byte `at` of the message.
fn invalid_utf8(e: Utf8StreamError) -> ProtocolViolation {
    ProtocolViolation::InvalidUtf8 { at: e.at }
}

/// Reads a close frame's payload (RFC 6455 §5.5.1).
fn close_event(payload: &[u8]) -> Result<Option<Event<'_>>, ProtocolViolation> {
    match payload.len() {
        0 => Ok(Some(Event::Close {
            code: None,
            reason: "",
        })),
        1 => Err(ProtocolViolation::CloseLengthOne),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            if !CloseCode::is_sendable(code) {
                return Err(ProtocolViolation::InvalidCloseCode { code });
            }
            let reason = std::str::from_utf8(&payload[2..])
                .map_err(|_| ProtocolViolation::InvalidCloseReason)?;
            Ok(Some(Event::Close {
                code: Some(CloseCode(code)),
                reason,
            }))
        }
    }
}
