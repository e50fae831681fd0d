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

/// The protocol version corecast announces in the greeting (PROTOCOL.md §3).
pub const PROTOCOL_VERSION: u32 = 4;
