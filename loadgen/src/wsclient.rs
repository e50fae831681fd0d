//! The client side of the upgrade and the smallest frame parser that protocol 4 needs.
//!
//! Server frames are unmasked; the parser reads the header, hands back the payload range and
//! never copies. Client frames are masked (RFC 6455 §5.3) with a cheap per-frame key.

use std::net::SocketAddr;
use std::time::Duration;

use corecast_net::rt::{self, Conn, ReadHalf, WriteHalf};
use corecast_net::ws::frame::{encode_frame, OpCode};
use corecast_net::ws::handshake::{check_response, client_key, client_request_with};

/// A connection that passed the upgrade and read its greeting.
pub struct Opened {
    pub rd: ReadHalf,
    pub wr: WriteHalf,
    /// Bytes read past the greeting (the first data frames, possibly partial).
    pub buf: Vec<u8>,
    pub greeting: sonic_rs::Value,
}

/// A frame parsed from the front of a buffer.
pub enum Frame {
    /// Text or binary data frame with its payload range.
    Data(std::ops::Range<usize>),
    /// A close frame: code (1005 when absent) and reason.
    Close(u16, String),
    /// A ping whose payload must be echoed in a pong.
    Ping(Vec<u8>),
    /// A pong or another frame to skip.
    Skip,
}

/// Parses one server frame at `buf[pos..]`: `Ok(None)` when incomplete,
/// `Ok(Some((frame, next_pos)))`, or an error for what protocol 4 never sends
/// (masked or fragmented server frames).
#[inline]
pub fn parse_frame(buf: &[u8], pos: usize) -> Result<Option<(Frame, usize)>, String> {
    let b = &buf[pos..];
    if b.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (b[0], b[1]);
    if b1 & 0x80 != 0 {
        return Err("server sent a masked frame".into());
    }
    let (len, hl) = match b1 & 0x7f {
        126 => {
            if b.len() < 4 {
                return Ok(None);
            }
            (u16::from_be_bytes([b[2], b[3]]) as usize, 4)
        }
        127 => {
            if b.len() < 10 {
                return Ok(None);
            }
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[2..10]);
            (u64::from_be_bytes(a) as usize, 10)
        }
        n => (n as usize, 2),
    };
    if b.len() < hl + len {
        return Ok(None);
    }
    let start = pos + hl;
    let end = start + len;
    let frame = match b0 & 0x0f {
        1 | 2 => {
            if b0 & 0x80 == 0 {
                return Err("server sent a fragmented message".into());
            }
            Frame::Data(start..end)
        }
        8 => {
            let p = &buf[start..end];
            if p.len() >= 2 {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    String::from_utf8_lossy(&p[2..]).into_owned(),
                )
                    .into()
            } else {
                Frame::Close(1005, String::new())
            }
        }
        9 => Frame::Ping(buf[start..end].to_vec()),
        _ => Frame::Skip,
    };
    Ok(Some((frame, end)))
}

impl From<(u16, String)> for Frame {
    fn from((c, r): (u16, String)) -> Frame {
        Frame::Close(c, r)
    }
}

/// A xorshift key source for masks and nonces.
pub struct Keys(u64);

impl Keys {
    pub fn new(seed: u64) -> Keys {
        Keys(seed | 1)
    }
    #[inline]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    #[inline]
    pub fn mask(&mut self) -> [u8; 4] {
        (self.next() as u32).to_ne_bytes()
    }
}

/// Appends one masked client frame.
pub fn client_frame(op: OpCode, payload: &[u8], keys: &mut Keys, out: &mut Vec<u8>) {
    encode_frame(true, op, payload, Some(keys.mask()), out);
}

/// A masked close frame with `code`.
pub fn close_frame(code: u16, keys: &mut Keys) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    client_frame(OpCode::Close, &code.to_be_bytes(), keys, &mut out);
    out
}

/// Dials, upgrades and reads the greeting; refusals (HTTP or a close before the greeting)
/// come back as an error naming them. Bounded by `limit`.
pub async fn open(
    addr: SocketAddr,
    tls: Option<&corecast_net::client::tls::TlsDial>,
    host: &str,
    path: &str,
    authorization: Option<&str>,
    keys: &mut Keys,
    limit: Duration,
) -> Result<Opened, String> {
    let mut nonce = [0u8; 16];
    nonce[..8].copy_from_slice(&keys.next().to_ne_bytes());
    nonce[8..].copy_from_slice(&keys.next().to_ne_bytes());
    let key = client_key(nonce);
    let fut = async move {
        let conn = match tls {
            None => Conn::connect(addr).await,
            Some(dial) => dial.connect(addr).await,
        }
        .map_err(|e| format!("connect {addr}: {e}"))?;
        let (mut rd, mut wr) = conn.split();
        let extra: Vec<(&str, &str)> = authorization
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let (res, _) = wr
            .write_all(client_request_with(host, path, &key, &extra))
            .await;
        res.map_err(|e| format!("write upgrade: {e}"))?;
        let mut buf = Vec::with_capacity(64 * 1024);
        let head = loop {
            let (res, b) = rd.read_into(buf, 4096).await;
            buf = b;
            match res {
                Ok(0) => return Err("connection closed during the upgrade".to_string()),
                Ok(_) => {}
                Err(e) => return Err(format!("read upgrade: {e}")),
            }
            match check_response(&buf, &key) {
                Ok(Some(n)) => break n,
                Ok(None) => continue,
                Err(e) => return Err(format!("upgrade refused: {e}")),
            }
        };
        buf.drain(..head);
        loop {
            match parse_frame(&buf, 0)? {
                Some((Frame::Data(r), next)) => {
                    let greeting: sonic_rs::Value = sonic_rs::from_slice(&buf[r])
                        .map_err(|e| format!("greeting is not JSON: {e}"))?;
                    buf.drain(..next);
                    return Ok(Opened {
                        rd,
                        wr,
                        buf,
                        greeting,
                    });
                }
                Some((Frame::Close(code, reason), _)) => {
                    return Err(format!("closed before the greeting: {code} {reason}"))
                }
                Some((_, next)) => {
                    buf.drain(..next);
                }
                None => {
                    let (res, b) = rd.read_into(buf, 16 * 1024).await;
                    buf = b;
                    match res {
                        Ok(0) => return Err("connection closed before the greeting".into()),
                        Ok(_) => {}
                        Err(e) => return Err(format!("read greeting: {e}")),
                    }
                }
            }
        }
    };
    match rt::timeout(limit, fut).await {
        Some(r) => r,
        None => Err(format!("no greeting within {limit:?}")),
    }
}

/// Parses the unsigned decimal at the front of `b`; returns (value, digits).
#[inline]
pub fn leading_u64(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        v = v * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    (v, i)
}
