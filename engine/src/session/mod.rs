//! Connections: the HTTP front ([`conn`]) routes each accepted socket to a WebSocket session —
//! [`publisher`], [`subscriber`], [`echo`] — or answers a plain HTTP request ([`stats`], 404).
//! [`ws_io`] turns socket bytes into WebSocket events for all of them; [`pong`] holds the one
//! pong a session may owe; [`tick`] is a delivering session's one timer (keepalive and write
//! stall).

pub mod conn;
pub mod deliver;
pub mod echo;
pub mod keepalive;
pub mod metrics;
pub mod pong;
pub mod publisher;
pub mod pull;
pub mod route;
pub mod sse;
pub mod stats;
pub mod subscriber;
pub mod tick;
pub mod ws_io;
