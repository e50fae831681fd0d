//! WebSocket (RFC 6455) as pure functions over bytes.
//!
//! - [`handshake`]: the HTTP/1.1 upgrade, server side (validate, `Sec-WebSocket-Accept`, 101)
//!   and client side (request, response check).
//! - [`frame`]: the frame codec (§5.2): [`frame::decode`] over a buffer, unmasking in place;
//!   header and frame encoders writing into the caller's `Vec<u8>`.
//! - [`partial`]: [`partial::FrameDecoder`], the frame codec over a buffer that fills read by
//!   read, showing (unmasked) the received part of a frame whose payload is incomplete.
//! - [`message`]: [`message::MessageAssembler`], the state machine from frames to messages,
//!   pings and closes (§5.4-§5.5, §8.1).
//! - [`utf8`]: [`utf8::Utf8Stream`], UTF-8 validation of bytes that arrive in pieces, so a
//!   text message fails as soon as its bytes cannot be UTF-8.
//! - [`receiver`]: [`receiver::Receiver`], the receiving side of a connection (buffer,
//!   decoder, assembler): bytes as read → messages, pings, pongs, the close, or the error.
//! - [`close`]: close codes (§7.4) and close frame payloads.
//!
//! The connection itself (upgrade → open → closing → closed) and its sockets live in
//! `net/src/rt/` and the engine; nothing here does I/O.

pub mod close;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod partial;
pub mod receiver;
pub mod utf8;
