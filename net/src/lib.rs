//! `corecast-net`: bytes on sockets.
//!
//! - [`http`]: HTTP/1.1 request parsing (httparse) with limits, query strings, responses.
//! - [`ws`]: the RFC 6455 upgrade and frame codec, message reassembly, close codes.
//! - [`protocol`]: streamcast protocol 4 messages: greeting, data frames, replies, close reasons.
//! - [`rt`]: every line that touches the io_uring runtime (monoio) lives here.
#![warn(missing_docs)]

pub mod client;
pub mod http;
pub mod protocol;
pub mod rt;
pub mod sse;
pub mod ws;
