//! Reading a WebSocket connection: bytes from the socket → frames → messages and control events.
//!
//! Wraps the read half of a connection with `corecast_net::ws::receiver::Receiver` (frame
//! decode with the server's limits, then the message assembler). Runs on the connection's
//! shard, in the connection's reader task. Events are returned owned so the caller may await
//! between them.
//!
//! A frame still arriving is shown to the assembler read by read (`check_partial`), so a text
//! message whose bytes cannot be UTF-8 ends the connection (1007) as soon as they arrive, not
//! when the rest of their frame does (RFC 6455 §8.1 "fail fast").

use std::future::Future;
use std::time::Duration;

use corecast_net::rt::ReadHalf;
use corecast_net::ws::frame::{FrameLimits, Role};
use corecast_net::ws::receiver::{Received, Receiver};

/// Bytes asked of the socket per read at least, on a connection that sends data (publishers,
/// the echo endpoint).
pub const READ_ROOM: usize = 16 * 1024;

/// The same for a subscriber, whose peer sends only control frames (≤ 131 bytes each) and its
/// close: a read waiting on an idle subscriber holds this buffer for as long as it waits, so
/// with tens of thousands of them it is most of their memory. A larger message still arrives
/// whole: the buffer grows by this much per read until it fits.
pub const SUBSCRIBER_READ_ROOM: usize = 512;

/// How long a closing connection waits for the peer to close its side after our close frame
/// (RFC 6455 §7.1.1: the server closes the TCP connection after the close handshake), reading
/// and discarding what it sends meanwhile.
pub const LINGER: Duration = Duration::from_secs(2);

/// Ends a plain HTTP exchange (pull-style endpoints: ingest, MCP, control): writes `response`
/// (its head only for a `HEAD` request), shuts the write side, then reads away what the client
/// still sends for at most [`LINGER`] — a refused body may still be arriving, and closing the
/// socket on unread bytes would reset the connection before the client has read the answer.
pub async fn answer_then_linger(
    req: &corecast_net::http::request::Request,
    rd: &mut ReadHalf,
    wr: &mut corecast_net::rt::WriteHalf,
    response: Vec<u8>,
) {
    let response = if req.method == "HEAD" {
        corecast_net::http::response::head_only(response)
    } else {
        response
    };
    let _ = wr.write_all(response).await;
    let _ = wr.shutdown().await;
    let linger = async {
        let mut sink = Vec::with_capacity(64 << 10);
        loop {
            sink.clear();
            match rd.read_into(sink, 64 << 10).await {
                (Ok(n), back) if n > 0 => sink = back,
                _ => break,
            }
        }
    };
    let _ = corecast_net::rt::timeout(LINGER, linger).await;
}

/// One thing the peer sent, or why reading ended.
#[derive(Debug)]
pub enum WsIn {
    /// A message, ping, pong or the peer's close frame.
    Frame(Received),
    /// The peer broke RFC 6455 or a limit: close with this code and reason.
    Violation {
        /// Close code (1002, 1007, 1009).
        code: u16,
        /// Close reason.
        reason: String,
    },
    /// The socket ended or failed without a close frame.
    Gone,
}

/// The reading side of a WebSocket connection.
pub struct WsReader {
    rd: ReadHalf,
    rx: Receiver,
    room: usize,
}

impl WsReader {
    /// Reads from `rd`, starting with `leftover` (bytes read past the HTTP head), asking the
    /// socket for at least `room` bytes per read ([`READ_ROOM`], [`SUBSCRIBER_READ_ROOM`]).
    /// Messages over `max_message_bytes` end the connection with 1009.
    pub fn new(rd: ReadHalf, leftover: Vec<u8>, max_message_bytes: usize, room: usize) -> WsReader {
        let limits = FrameLimits {
            role: Role::Server,
            max_message_bytes: max_message_bytes as u64,
        };
        WsReader {
            rd,
            rx: Receiver::new(limits, leftover),
            room: room.max(1),
        }
    }

    /// Reads and throws away whatever the peer sends until it closes its side (the lingering
    /// half of a close: leaving unread bytes in the socket would make the kernel answer with a
    /// reset, which destroys the replies and the close frame the peer has not read yet).
    /// Returns when the peer's side is closed or the socket failed.
    pub async fn drain_until_eof(&mut self) {
        loop {
            self.rx.discard();
            let buf = self.rx.take_buffer();
            let (res, buf) = self.rd.read_into(buf, self.room).await;
            self.rx.put_buffer(buf);
            match res {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// The next event, unless `stop` finishes first: then `None`, and the read in flight is
    /// dropped with whatever part of a frame it held, so after `None` only
    /// [`WsReader::drain_until_eof`] should be asked. (A session whose writer has ended uses it
    /// to take its reader down with it.)
    pub async fn next_until<F: Future>(&mut self, stop: F) -> Option<WsIn> {
        corecast_net::rt::until(self.next(), stop).await
    }

    /// The next event. After the peer's close, [`WsIn::Violation`] or [`WsIn::Gone`] nothing more
    /// should be asked.
    pub async fn next(&mut self) -> WsIn {
        loop {
            match self.rx.next_event() {
                Ok(Some(frame)) => return WsIn::Frame(frame),
                Err(e) => return violation(e.close_code().0, e.to_string()),
                Ok(None) => {}
            }
            let buf = self.rx.take_buffer();
            let (res, buf) = self.rd.read_into(buf, self.room).await;
            self.rx.put_buffer(buf);
            match res {
                Ok(0) | Err(_) => return WsIn::Gone,
                Ok(_) => {}
            }
        }
    }
}

/// The close for a violation: over the size limit, the reference's plain `frame too large`
/// (PROTOCOL.md §8), whether one frame or a fragmented message outgrew it; else the codec's
/// description.
fn violation(code: u16, description: String) -> WsIn {
    let reason = if code == 1009 {
        "frame too large".to_string()
    } else {
        description
    };
    WsIn::Violation { code, reason }
}
