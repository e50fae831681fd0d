//! One client WebSocket connection on the thread's runtime: the upgrade, masked frames out,
//! messages in (pings answered, pongs skipped), and the greeting.

use std::net::SocketAddr;
use std::time::Duration;

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

use super::{ClientError, Greeting, PublisherMark};
use crate::rt::{Conn, ReadHalf, Watched, WriteHalf};
use crate::ws::close::CloseCode;
use crate::ws::frame::{encode_close, encode_frame, encode_pong, FrameLimits, OpCode};
use crate::ws::handshake::{check_response, client_key, client_request_with, ClientHandshakeError};
use crate::ws::receiver::{ReceiveError, Received, Receiver};

/// Bytes to leave free before each read.
const READ_ROOM: usize = 64 * 1024;

/// Most bytes [`WsConn::watch`] reads ahead while it waits (then it stops reading until the
/// wait ends).
const WATCH_HELD_MAX: usize = 1 << 20;

/// A xorshift64* generator for masking keys and handshake nonces (RFC 6455 asks for
/// unpredictable keys against proxy cache poisoning; this client talks to its own broker).
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn seeded() -> XorShift {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        let addr = &local as *const u8 as u64;
        let mut s = t
            ^ (u64::from(std::process::id()) << 32)
            ^ addr.rotate_left(17)
            ^ 0x9E37_79B9_7F4A_7C15;
        if s == 0 {
            s = 1;
        }
        XorShift(s)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn mask(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_le_bytes()
    }
}

/// What arrived: a whole data message, or the server's close.
pub(crate) enum Incoming {
    /// A text or binary message.
    Message(Vec<u8>),
    /// The server's close frame (code, reason).
    Close(Option<u16>, String),
}

/// A connected, upgraded client WebSocket.
pub(crate) struct WsConn {
    r: ReadHalf,
    w: WriteHalf,
    rx: Receiver,
    rng: XorShift,
    out: Vec<u8>,
    closed: bool,
}

impl WsConn {
    /// Dials `addr` (with TLS for `wss://`), sends the upgrade for `path` with the target's
    /// host, and checks the 101.
    pub(crate) async fn open(
        addr: SocketAddr,
        target: &super::Target,
        path: &str,
    ) -> Result<WsConn, ClientError> {
        let host = &target.host_header();
        let fail = |e: std::io::Error| ClientError::Connect {
            addr: host.to_string(),
            msg: e.to_string(),
        };
        let conn = if target.tls {
            let dial = super::tls::TlsDial::new(target.bare_host())?;
            dial.connect(addr).await.map_err(fail)?
        } else {
            Conn::connect(addr).await.map_err(fail)?
        };
        let (mut r, mut w) = conn.split();
        let mut rng = XorShift::seeded();
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
        nonce[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
        let key = client_key(nonce);
        let auth: Vec<(&str, &str)> = target
            .authorization
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let req = client_request_with(host, path, &key, &auth);
        let (res, _) = w.write_all(req).await;
        res.map_err(ClientError::io)?;
        let mut buf = Vec::with_capacity(READ_ROOM);
        loop {
            match check_response(&buf, &key) {
                Ok(Some(consumed)) => {
                    buf.drain(..consumed);
                    let limits = FrameLimits {
                        max_message_bytes: crate::ws::frame::MESSAGE_BYTES_MAX_DEFAULT * 16,
                        ..FrameLimits::client()
                    };
                    return Ok(WsConn {
                        r,
                        w,
                        rx: Receiver::new(limits, buf),
                        rng,
                        out: Vec::new(),
                        closed: false,
                    });
                }
                Ok(None) => {}
                Err(ClientHandshakeError::Refused {
                    status,
                    head_bytes,
                    content_length,
                }) => {
                    let want = head_bytes + (content_length.min(4096) as usize);
                    while buf.len() < want {
                        let (n, b) = fill(&mut r, buf).await;
                        buf = b;
                        if n.unwrap_or(0) == 0 {
                            break;
                        }
                    }
                    let end = buf.len().min(want);
                    let body = String::from_utf8_lossy(&buf[head_bytes.min(end)..end])
                        .replace(['\r', '\n'], " ")
                        .trim()
                        .to_string();
                    return Err(ClientError::HttpRefused { status, body });
                }
                Err(e) => return Err(ClientError::Protocol(format!("upgrade failed: {e}"))),
            }
            let (n, b) = fill(&mut r, buf).await;
            buf = b;
            if n? == 0 {
                return Err(ClientError::ConnectionLost(
                    "the server closed the connection during the upgrade".into(),
                ));
            }
        }
    }

    /// Whether a complete frame may already be buffered (no read needed for the next message).
    pub(crate) fn has_buffered(&self) -> bool {
        self.rx.buffered() > 0
    }

    /// The next message or close. Answers pings on the way.
    pub(crate) async fn recv(&mut self) -> Result<Incoming, ClientError> {
        loop {
            if let Some(incoming) = self.try_recv().await? {
                return Ok(incoming);
            }
            let (n, buf) = fill(&mut self.r, self.rx.take_buffer()).await;
            self.rx.put_buffer(buf);
            if n? == 0 {
                return Err(ClientError::ConnectionLost(
                    "the server went away without a close frame".into(),
                ));
            }
        }
    }

    /// The next message or close among the bytes already read, answering the pings before it;
    /// `None` when a read is needed. A frame that breaks RFC 6455 is answered with the close
    /// code it calls for (1002, 1007, 1009: RFC 6455 §7.1.7) and returned as an error.
    pub(crate) async fn try_recv(&mut self) -> Result<Option<Incoming>, ClientError> {
        loop {
            let event = match self.rx.next_event() {
                Ok(event) => event,
                Err(e) => {
                    self.send_close(e.close_code().0).await;
                    return Err(match e {
                        ReceiveError::Frame(e) => {
                            ClientError::Protocol(format!("bad frame from the server: {e}"))
                        }
                        ReceiveError::Message(e) => {
                            ClientError::Protocol(format!("bad message from the server: {e}"))
                        }
                    });
                }
            };
            match event {
                None => return Ok(None),
                Some(Received::Pong) => {}
                Some(Received::Message { data, .. }) => return Ok(Some(Incoming::Message(data))),
                Some(Received::Ping(p)) => {
                    let mask = self.rng.mask();
                    let mut out = std::mem::take(&mut self.out);
                    out.clear();
                    encode_pong(&p, Some(mask), &mut out);
                    let (res, out) = self.w.write_all(out).await;
                    self.out = out;
                    res.map_err(ClientError::io)?;
                }
                Some(Received::Close { code, reason }) => {
                    let code = code.map(|c| c.0);
                    // echo the close (best effort) and stop
                    self.send_close(code.unwrap_or(1000)).await;
                    return Ok(Some(Incoming::Close(code, reason)));
                }
            }
        }
    }

    /// Waits `d`, reading what the server sends meanwhile into the receive buffer (for
    /// [`WsConn::try_recv`]); `false` when the server closed the connection. Cancel-safe: a
    /// read cut short by the deadline still hands over its bytes
    /// ([`crate::rt::ReadHalf::watch_while`]).
    pub(crate) async fn watch(&mut self, d: Duration) -> bool {
        let mut held = Vec::new();
        let watched = self
            .r
            .watch_while(&mut held, WATCH_HELD_MAX, crate::rt::sleep(d))
            .await;
        self.rx.extend(&held);
        watched != Watched::Closed
    }

    /// Sends one text message, masked.
    pub(crate) async fn send_text(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mask = self.rng.mask();
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        encode_frame(true, OpCode::Text, payload, Some(mask), &mut out);
        let (res, out) = self.w.write_all(out).await;
        self.out = out;
        res.map_err(ClientError::io)
    }

    /// Sends a close frame once (best effort; errors are ignored).
    pub(crate) async fn send_close(&mut self, code: u16) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mask = self.rng.mask();
        let mut out = Vec::new();
        let code = if CloseCode::is_sendable(code) {
            code
        } else {
            1000
        };
        encode_close(Some(CloseCode(code)), "", Some(mask), &mut out);
        let _ = self.w.write_all(out).await;
    }

    /// Closes cleanly: sends 1000 and waits (briefly) for the server's close.
    pub(crate) async fn close(&mut self) {
        self.send_close(1000).await;
        let _ = crate::rt::timeout(std::time::Duration::from_secs(2), async {
            while let Ok(Incoming::Message(_)) = self.recv().await {}
        })
        .await;
        let _ = self.w.shutdown().await;
    }

    /// Reads the greeting: the first message, or the close that refuses the request.
    pub(crate) async fn greeting(&mut self) -> Result<Greeting, ClientError> {
        match self.recv().await? {
            Incoming::Close(code, reason) => Err(super::error::from_close(code, &reason, None)
                .unwrap_or_else(|| ClientError::Closed {
                    code: code.unwrap_or(1005),
                    reason,
                })),
            Incoming::Message(bytes) => Greeting::parse(bytes),
        }
    }
}

/// Reads more bytes after `buf`'s contents; `Ok(0)` at end of stream.
async fn fill(r: &mut ReadHalf, buf: Vec<u8>) -> (Result<usize, ClientError>, Vec<u8>) {
    let (res, buf) = r.read_into(buf, READ_ROOM).await;
    (res.map_err(ClientError::io), buf)
}

impl Greeting {
    /// Parses a greeting (PROTOCOL.md §4): a JSON object with `streamcast` 4 or 5 and an
    /// `end_offset` key.
    pub fn parse(bytes: Vec<u8>) -> Result<Greeting, ClientError> {
        let text = String::from_utf8(bytes)
            .map_err(|_| ClientError::Protocol("the greeting is not UTF-8".into()))?;
        let v: Value = sonic_rs::from_str(&text)
            .map_err(|e| ClientError::Protocol(format!("the greeting is not JSON: {e}")))?;
        if !v.is_object() {
            return Err(ClientError::Protocol(
                "the greeting is not a JSON object".into(),
            ));
        }
        let version = v.get("streamcast").and_then(|x| x.as_u64());
        if !matches!(version, Some(4) | Some(5)) {
            return Err(ClientError::Protocol(format!(
                "unsupported protocol version {:?} (this client speaks 4 and 5)",
                v.get("streamcast").map(|x| x.to_string())
            )));
        }
        let end_offset = match v.get("end_offset") {
            None => {
                return Err(ClientError::Protocol(
                    "the greeting has no end_offset".into(),
                ))
            }
            Some(x) if x.is_null() => None,
            Some(x) => Some(x.as_u64().ok_or_else(|| {
                ClientError::Protocol("the greeting's end_offset is not an integer".into())
            })?),
        };
        let replay = match v.get("replay") {
            None => None,
            Some(x) if x.is_null() => None,
            Some(x) => {
                let a = x.as_array().filter(|a| a.len() == 2);
                let pair = a.and_then(|a| Some((a.first()?.as_u64()?, a.get(1)?.as_u64()?)));
                Some(pair.ok_or_else(|| {
                    ClientError::Protocol("the greeting's replay is not [start, end]".into())
                })?)
            }
        };
        let flag = |k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
        let text_of = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let publisher = v
            .get("publisher")
            .filter(|p| p.is_object())
            .map(|p| PublisherMark {
                id: p
                    .get("id")
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string(),
                last_seq: p.get("last_seq").and_then(|x| x.as_u64()).unwrap_or(0),
                last_offset: p.get("last_offset").and_then(|x| x.as_u64()),
            });
        Ok(Greeting {
            version: version.unwrap_or(4) as u8,
            stream: text_of("stream").unwrap_or_default(),
            end_offset,
            replay,
            durable: flag("durable"),
            group_commit: flag("group_commit"),
            stream_id: text_of("stream_id"),
            metadata: text_of("metadata"),
            metadata_hint: text_of("metadata_hint"),
            publisher,
            schema: v
                .get("schema")
                .filter(|s| !s.is_null())
                .map(|s| s.to_string()),
            raw: text,
        })
    }
}
