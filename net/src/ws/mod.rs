//! WebSocket (RFC 6455) as pure functions over bytes.
//!
//! - [`handshake`]: the HTTP/1.1 upgrade, server side (validate, `Sec-WebSocket-Accept`, 101)
//!   and client side (request, response check).
//! - [`frame`]: the frame codec (§5.2): [`frame::decode`] over a buffer, unmasking in place;
//!   header and frame encoders writing into the caller's `Vec<u8>`.
//! - [`message`]: [`message::MessageAssembler`], the state machine from frames to messages,
//!   pings and closes (§5.4-§5.5, §8.1).
//! - [`close`]: close codes (§7.4) and close frame payloads.
//!
//! The connection itself (upgrade → open → closing → closed) and its sockets live in
//! `net/src/rt/` and the engine; nothing here does I/O.

pub mod close;
pub mod frame;
pub mod handshake;
pub mod message;
