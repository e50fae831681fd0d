//! The opening handshake (RFC 6455 §4), server and client side, over parsed heads and bytes.
//!
//! **Server.** [`is_upgrade_request`] tells a WebSocket request from a plain HTTP one (both
//! arrive on the same port); [`validate_upgrade`] checks it (§4.2.1) and returns the
//! `Sec-WebSocket-Accept` value ([`accept_key`], §4.2.2), or a [`HandshakeError`] whose
//! [`HandshakeError::response`] is the HTTP answer; [`response_101`] is the switch. corecast
//! matches the reference (PROTOCOL.md §1): no subprotocol is ever selected, and an offered
//! `permessage-deflate` is declined by leaving `Sec-WebSocket-Extensions` out.
//!
//! **Client.** [`client_request`] writes the upgrade request; [`check_response`] parses and
//! checks the server's answer (§4.1, "the client MUST validate the server's response").

use crate::http::request::Request;
use crate::http::response::{json_error_body, ResponseHead};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use sha1::{Digest, Sha1};
use thiserror::Error;

/// The GUID appended to the key before hashing (RFC 6455 §1.3, §4.2.2).
pub const WEBSOCKET_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The only protocol version spoken (RFC 6455 §4.4).
pub const WEBSOCKET_VERSION: &str = "13";
/// Longest 101 (or refusal) head [`check_response`] buffers, in bytes.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Why an upgrade request was refused. [`HandshakeError::status`] gives the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// The method is not GET (§4.1). 400.
    #[error("a WebSocket upgrade is a GET, not {method}")]
    MethodNotGet {
        /// The method sent.
        method: String,
    },
    /// The request is HTTP/1.0 (§4.1 needs HTTP/1.1 or later). 400.
    #[error("a WebSocket upgrade needs HTTP/1.1")]
    NotHttp11,
    /// No `Upgrade: websocket` (§4.2.1 item 3). 400.
    #[error("missing Upgrade: websocket")]
    NoUpgradeWebsocket,
    /// No `Connection: Upgrade` (§4.2.1 item 4). 400.
    #[error("missing Connection: Upgrade")]
    NoConnectionUpgrade,
    /// `Sec-WebSocket-Version` is absent or not 13 (§4.2.1 item 6). 426 with
    /// `Sec-WebSocket-Version: 13` (§4.4) and `Upgrade: websocket` (RFC 9110 §15.5.22: a 426
    /// names the protocol to upgrade to).
    #[error("{}", version_message(version.as_deref()))]
    UnsupportedVersion {
        /// The version header as sent, if any.
        version: Option<String>,
    },
    /// No `Sec-WebSocket-Key` (§4.2.1 item 5). 400.
    #[error("missing Sec-WebSocket-Key")]
    MissingKey,
    /// `Sec-WebSocket-Key` sent more than once (§11.3.1: it "MUST NOT appear more than once
    /// in an HTTP request"). 400.
    #[error("Sec-WebSocket-Key sent {count} times; send it once")]
    RepeatedKey {
        /// How many times it was sent.
        count: usize,
    },
    /// `Sec-WebSocket-Key` is not base64 of exactly 16 bytes (§4.1). 400.
    #[error("Sec-WebSocket-Key {key:?} is not base64 of 16 bytes")]
    BadKey {
        /// The key as sent.
        key: String,
    },
}

/// The message of [`HandshakeError::UnsupportedVersion`], in plain words: `unsupported
/// Sec-WebSocket-Version 8 (this server speaks 13)`, or `missing Sec-WebSocket-Version (this
/// server speaks 13)` when the header is absent or empty.
fn version_message(version: Option<&str>) -> String {
    match version.map(str::trim) {
        None | Some("") => {
            format!("missing Sec-WebSocket-Version (this server speaks {WEBSOCKET_VERSION})")
        }
        Some(v) => format!(
            "unsupported Sec-WebSocket-Version {v} (this server speaks {WEBSOCKET_VERSION})"
        ),
    }
}

impl HandshakeError {
    /// The HTTP status answering this error.
    pub fn status(&self) -> u16 {
        match self {
            HandshakeError::MethodNotGet { .. } => 400,
            HandshakeError::NotHttp11 => 400,
            HandshakeError::NoUpgradeWebsocket => 400,
            HandshakeError::NoConnectionUpgrade => 400,
            HandshakeError::UnsupportedVersion { .. } => 426,
            HandshakeError::MissingKey => 400,
            HandshakeError::RepeatedKey { .. } => 400,
            HandshakeError::BadKey { .. } => 400,
        }
    }

    /// The complete HTTP response: [`HandshakeError::status`], a JSON error body (code
    /// `bad_handshake`, the error as message), and `connection: close`. A 426 also carries
    /// `Sec-WebSocket-Version: 13` (RFC 6455 §4.4) and `Upgrade: websocket` with the `upgrade`
    /// connection option that must accompany it (RFC 9110 §15.5.22, §7.8): `connection:
    /// upgrade, close`.
    pub fn response(&self) -> Vec<u8> {
        let head = ResponseHead::new(self.status());
        let body = json_error_body("bad_handshake", &self.to_string(), false);
        if let HandshakeError::UnsupportedVersion { .. } = self {
            return head
                .header("Sec-WebSocket-Version", WEBSOCKET_VERSION)
                .header("Upgrade", "websocket")
                .header("content-type", "application/json")
                .finish_with_connection("upgrade, close", &body);
        }
        head.header("content-type", "application/json")
            .finish(&body)
    }
}

/// Whether `req` asks for a WebSocket (`Upgrade` lists `websocket`), so it goes to
/// [`validate_upgrade`] rather than the HTTP endpoints.
pub fn is_upgrade_request(req: &Request) -> bool {
    req.header_has_token("upgrade", "websocket")
}

/// Checks an upgrade request (RFC 6455 §4.2.1) and returns its `Sec-WebSocket-Accept` value.
/// `Sec-WebSocket-Protocol` and `Sec-WebSocket-Extensions` are ignored: none is selected.
pub fn validate_upgrade(req: &Request) -> Result<String, HandshakeError> {
    if req.method != "GET" {
        return Err(HandshakeError::MethodNotGet {
            method: req.method.clone(),
        });
    }
    if req.version_minor < 1 {
        return Err(HandshakeError::NotHttp11);
    }
    if !req.header_has_token("upgrade", "websocket") {
        return Err(HandshakeError::NoUpgradeWebsocket);
    }
    if !req.header_has_token("connection", "upgrade") {
        return Err(HandshakeError::NoConnectionUpgrade);
    }
    if !req.header_has_token("sec-websocket-version", WEBSOCKET_VERSION) {
        return Err(HandshakeError::UnsupportedVersion {
            version: req.header("sec-websocket-version").map(str::to_owned),
        });
    }
    let count = req.headers_all("sec-websocket-key").count();
    if count > 1 {
        return Err(HandshakeError::RepeatedKey { count });
    }
    let key = req
        .header("sec-websocket-key")
        .ok_or(HandshakeError::MissingKey)?;
    match BASE64.decode(key) {
        Ok(nonce) if nonce.len() == 16 => Ok(accept_key(key)),
        Ok(_) | Err(_) => Err(HandshakeError::BadKey {
            key: key.to_owned(),
        }),
    }
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2 item 5.4): base64 of the SHA-1 of the key
/// followed by [`WEBSOCKET_GUID`].
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(WEBSOCKET_GUID.as_bytes());
    BASE64.encode(sha.finalize())
}

/// The 101 answer exactly as the reference sends it (PROTOCOL.md §1), without `date` and
/// `server`: status line, `Upgrade`, `Connection`, `Sec-WebSocket-Accept`, blank line.
pub fn response_101(accept: &str) -> Vec<u8> {
    switching_head(accept).finish_head()
}

/// [`response_101`] plus `date: <date>` after the accept header, as the reference orders it
/// (`date` from [`crate::http::response::http_date`]).
pub fn response_101_with_date(accept: &str, date: &str) -> Vec<u8> {
    switching_head(accept).header("date", date).finish_head()
}

fn switching_head(accept: &str) -> ResponseHead {
    ResponseHead::new(101)
        .header("Upgrade", "websocket")
        .header("Connection", "Upgrade")
        .header("Sec-WebSocket-Accept", accept)
}

/// A `Sec-WebSocket-Key` from 16 random bytes the caller drew (RFC 6455 §4.1 item 7).
pub fn client_key(nonce: [u8; 16]) -> String {
    BASE64.encode(nonce)
}

/// The client's upgrade request (RFC 6455 §4.1) for `path_and_query` (origin-form, starting
/// with `/`, already percent-encoded) on `host` (`name` or `name:port`), offering no
/// subprotocol and no extension. Panics if either holds CR or LF.
pub fn client_request(host: &str, path_and_query: &str, key: &str) -> Vec<u8> {
    client_request_with(host, path_and_query, key, &[])
}

/// [`client_request`] with extra header fields (e.g. `Authorization`). Panics if any part holds
/// CR or LF.
pub fn client_request_with(
    host: &str,
    path_and_query: &str,
    key: &str,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    for part in [host, path_and_query, key]
        .into_iter()
        .chain(extra.iter().flat_map(|(k, v)| [*k, *v]))
    {
        assert!(!part.bytes().any(|b| b == b'\r' || b == b'\n'));
    }
    let mut out = Vec::with_capacity(160 + host.len() + path_and_query.len());
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\r\nSec-WebSocket-Version: 13\r\n");
    for (k, v) in extra {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Why the server's answer to our upgrade is not a valid switch (RFC 6455 §4.1).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientHandshakeError {
    /// The bytes are not an HTTP/1.1 response head.
    #[error("malformed response head: {0}")]
    Malformed(httparse::Error),
    /// The head passed [`RESPONSE_HEAD_BYTES_MAX`] without ending.
    #[error("response head over {limit} bytes")]
    HeadTooLarge {
        /// [`RESPONSE_HEAD_BYTES_MAX`].
        limit: usize,
    },
    /// The server answered something other than 101 (a refusal such as 401, 403, 404).
    /// Its body, if any, follows `head_bytes`.
    #[error("server answered {status} instead of 101")]
    Refused {
        /// The status code.
        status: u16,
        /// Bytes of the response head.
        head_bytes: usize,
        /// Its `content-length`, 0 when absent or unreadable.
        content_length: u64,
    },
    /// The 101 lacks `Upgrade: websocket`.
    #[error("101 without Upgrade: websocket")]
    NoUpgradeWebsocket,
    /// The 101 lacks `Connection: Upgrade`.
    #[error("101 without Connection: Upgrade")]
    NoConnectionUpgrade,
    /// `Sec-WebSocket-Accept` is missing or does not match our key.
    #[error("Sec-WebSocket-Accept {got:?} does not match our key")]
    BadAccept {
        /// The value received, if any.
        got: Option<String>,
    },
    /// The server selected an extension we did not offer.
    #[error("server selected extension {value:?}; none was offered")]
    UnexpectedExtension {
        /// The `Sec-WebSocket-Extensions` value.
        value: String,
    },
    /// The server selected a subprotocol we did not offer.
    #[error("server selected subprotocol {value:?}; none was offered")]
    UnexpectedProtocol {
        /// The `Sec-WebSocket-Protocol` value.
        value: String,
    },
}

/// Checks the server's answer to [`client_request`] sent with `key`. Returns `Ok(None)` while
/// the head is incomplete, `Ok(Some(consumed))` for a valid 101 (frames start at `consumed`).
pub fn check_response(buf: &[u8], key: &str) -> Result<Option<usize>, ClientHandshakeError> {
    let mut storage = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut storage);
    let consumed = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= RESPONSE_HEAD_BYTES_MAX => {
            return Err(ClientHandshakeError::HeadTooLarge {
                limit: RESPONSE_HEAD_BYTES_MAX,
            })
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(ClientHandshakeError::Malformed(e)),
    };
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    };
    let has_token = |name: &str, token: &str| {
        resp.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .any(|h| {
                String::from_utf8_lossy(h.value)
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case(token))
            })
    };
    let status = resp.code.unwrap_or_default();
    if status != 101 {
        let content_length = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        return Err(ClientHandshakeError::Refused {
            status,
            head_bytes: consumed,
            content_length,
        });
    }
    if !has_token("upgrade", "websocket") {
        return Err(ClientHandshakeError::NoUpgradeWebsocket);
    }
    if !has_token("connection", "upgrade") {
        return Err(ClientHandshakeError::NoConnectionUpgrade);
    }
    let got = header("sec-websocket-accept");
    if got.as_deref() != Some(accept_key(key).as_str()) {
        return Err(ClientHandshakeError::BadAccept { got });
    }
    if let Some(value) = header("sec-websocket-extensions") {
        return Err(ClientHandshakeError::UnexpectedExtension { value });
    }
    if let Some(value) = header("sec-websocket-protocol") {
        return Err(ClientHandshakeError::UnexpectedProtocol { value });
    }
    Ok(Some(consumed))
}
