//! streamcast protocol 4 messages as byte builders (PROTOCOL.md §4, §5, §7, §8).
//!
//! Every server message is compact JSON in a text frame, keys in the exact order the reference
//! emits them. These builders write bytes directly; nothing here parses.
//!
//! - [`greeting`]: the first frame of every accepted connection (§4).
//! - [`frame`]: a data frame `[offset,ts,row]`, written as one complete WebSocket frame (§5).
//! - [`reply`]: a publisher's one reply per frame (§7).
//! - [`close_reason`]: the JSON close reasons and their codes (§8), ≤ 123 bytes.
//! - [`json_text`]: the one JSON string and number writer they all share.

pub mod close_reason;
pub mod frame;
pub mod greeting;
pub mod json_text;
pub mod reply;

use crate::ws::frame::{frame_in_place, OpCode};

/// A server message: compact JSON text, sent as one unmasked text frame.
pub trait ServerMessage {
    /// Appends the message's JSON text to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// The message's JSON text.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Appends the message as one complete server text frame (header written once the length
    /// is known), with no intermediate buffer.
    fn encode_frame(&self, out: &mut Vec<u8>) {
        let start = out.len();
        self.encode(out);
        frame_in_place(out, start, OpCode::Text);
    }
}

/// The protocol version corecast announces in the greeting (PROTOCOL.md §3).
pub const PROTOCOL_VERSION: u32 = 4;
