//! Parsing a request head (RFC 9112 §2-§3, §5) under fixed limits.
//!
//! [`parse_request`] is called on everything buffered so far. It answers `Ok(None)` while the
//! head is incomplete and within limits, `Ok(Some((request, consumed)))` once the head
//! (through the blank line) is there, and an [`HttpError`] as soon as the bytes are wrong or
//! the buffered head has outgrown a limit, so a client streaming 100 KB of headers is answered
//! 431 after [`HttpLimits::head_bytes_max`] bytes without ever completing its request.
//!
//! Only the head is parsed. `consumed` counts the head's bytes; a body (`content-length`) is
//! the caller's to skip or read. `Transfer-Encoding` is refused (501): nothing corecast serves
//! takes a chunked body.

use crate::http::query::percent_decode;
use thiserror::Error;

/// The most headers any [`HttpLimits::headers_count_max`] may allow (the parser's stack array).
pub const HEADERS_COUNT_CAP: usize = 128;

/// Limits on a request head. Each has its status when passed: see [`HttpError::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest request line, CRLF excluded, in bytes. Default 8 KiB; over it → 414.
    pub request_line_bytes_max: usize,
    /// Longest head, request line through the final blank line, in bytes. Default 16 KiB;
    /// over it → 431, decided as soon as that many bytes are buffered without a complete head.
    pub head_bytes_max: usize,
    /// Most header fields. Default 64, at most [`HEADERS_COUNT_CAP`]; over it → 431.
    pub headers_count_max: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            request_line_bytes_max: 8 * 1024,
            head_bytes_max: 16 * 1024,
            headers_count_max: 64,
        }
    }
}

/// Why a request head was refused. Each variant maps to one status in [`HttpError::status`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HttpError {
    /// The bytes are not an HTTP/1.x request head (httparse's reason). 400.
    #[error("malformed request head: {0}")]
    Malformed(httparse::Error),
    /// The request line names a version other than HTTP/1.0 or HTTP/1.1. 505.
    #[error("unsupported HTTP version; this server speaks HTTP/1.1")]
    UnsupportedVersion,
    /// The request line is longer than the limit. 414.
    #[error("request line is {bytes} bytes, over the {limit}-byte limit")]
    RequestLineTooLong {
        /// Bytes of request line seen so far (at least this long).
        bytes: usize,
        /// [`HttpLimits::request_line_bytes_max`].
        limit: usize,
    },
    /// The head is longer than the limit. 431.
    #[error("request head is longer than the {limit}-byte limit ({bytes} bytes read)")]
    HeadTooLarge {
        /// Bytes of head seen so far (at least this long).
        bytes: usize,
        /// [`HttpLimits::head_bytes_max`].
        limit: usize,
    },
    /// More header fields than the limit. 431.
    #[error("more than {limit} header fields")]
    TooManyHeaders {
        /// [`HttpLimits::headers_count_max`].
        limit: usize,
    },
    /// The request target is neither origin-form (`/path?query`) nor absolute-form
    /// (`http://host/path`). 400.
    #[error("request target {target:?} is not a path")]
    BadTarget {
        /// The target as sent.
        target: String,
    },
    /// `content-length` is not a decimal number. 400.
    #[error("content-length {value:?} is not a decimal number of bytes")]
    BadContentLength {
        /// The offending value.
        value: String,
    },
    /// `content-length` is repeated with different values (a request smuggling shape). 400.
    #[error("content-length is given twice with different values ({first} and {second})")]
    ConflictingContentLength {
        /// The first value.
        first: u64,
        /// The value that differs from it.
        second: u64,
    },
    /// A `transfer-encoding` header was sent; no endpoint takes a coded body. 501.
    #[error("transfer-encoding is not supported")]
    TransferEncoding,
}

impl HttpError {
    /// The HTTP status that answers this error (the one place errors become statuses).
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::UnsupportedVersion => 505,
            HttpError::RequestLineTooLong { .. } => 414,
            HttpError::HeadTooLarge { .. } => 431,
            HttpError::TooManyHeaders { .. } => 431,
            HttpError::BadTarget { .. } => 400,
            HttpError::BadContentLength { .. } => 400,
            HttpError::ConflictingContentLength { .. } => 400,
            HttpError::TransferEncoding => 501,
        }
    }

    /// The machine-readable `code` of the JSON error body answering this error.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::Malformed(_) => "bad_request",
            HttpError::UnsupportedVersion => "http_version_not_supported",
            HttpError::RequestLineTooLong { .. } => "uri_too_long",
            HttpError::HeadTooLarge { .. } => "headers_too_large",
            HttpError::TooManyHeaders { .. } => "headers_too_large",
            HttpError::BadTarget { .. } => "bad_request",
            HttpError::BadContentLength { .. } => "bad_request",
            HttpError::ConflictingContentLength { .. } => "bad_request",
            HttpError::TransferEncoding => "not_implemented",
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method as sent (case-sensitive, RFC 9110 §9.1), e.g. `GET`.
    pub method: String,
    /// The request target exactly as sent, e.g. `/bad%20name?offset=5`.
    pub target: String,
    /// The HTTP minor version: 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub version_minor: u8,
    /// The path, percent-decoded (not `+`-decoded), **with** its leading `/`, as ASGI's
    /// `scope["path"]`: `/bad%20name` → `/bad name`, `/` → `/`. An absolute-form target has
    /// its scheme and authority removed first. The stream name is this minus the leading `/`
    /// (PROTOCOL.md §2).
    pub path: String,
    /// The raw query text after the first `?`, without it; `""` when there is none. Parse it
    /// with [`crate::http::query::Query::parse`].
    pub query: String,
    /// Header fields in the order sent: names lowercased, values with surrounding whitespace
    /// trimmed and decoded as UTF-8 (invalid bytes become U+FFFD).
    pub headers: Vec<(String, String)>,
    /// The declared body length in bytes (`content-length`), 0 when absent.
    pub content_length: u64,
}

impl Request {
    /// The first value of header `name` (matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, in order (matched case-insensitively).
    pub fn headers_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether any `name` header's comma-separated list (RFC 9110 §5.6.1) holds `token`,
    /// compared case-insensitively: `Connection: keep-alive, Upgrade` holds `upgrade`.
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers_all(name).any(|v| {
            v.split(',')
                .any(|t| t.trim_matches([' ', '\t']).eq_ignore_ascii_case(token))
        })
    }

    /// Whether HTTP/1.1 persistence applies: 1.1 without `Connection: close`, or 1.0 with
    /// `Connection: keep-alive` (RFC 9112 §9.3).
    pub fn keep_alive(&self) -> bool {
        if self.version_minor >= 1 {
            !self.header_has_token("connection", "close")
        } else {
            self.header_has_token("connection", "keep-alive")
        }
    }
}

/// Parses the request head at the start of `buf` (RFC 9112 §2-§3).
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some((request, consumed)))` where
/// `consumed` is the length of the head including its final CRLF CRLF, or the first
/// [`HttpError`] the bytes or the limits call for. Call it again on the grown buffer after
/// `Ok(None)`; the limits bound the work to re-parse.
pub fn parse_request(
    buf: &[u8],
    limits: &HttpLimits,
) -> Result<Option<(Request, usize)>, HttpError> {
    assert!(limits.headers_count_max <= HEADERS_COUNT_CAP);
    // The request line first, so a 100 KB target is 414 rather than 431.
    let line_window = &buf[..buf.len().min(limits.request_line_bytes_max + 2)];
    match line_window.iter().position(|&b| b == b'\n') {
        Some(lf) => {
            let line_bytes = if lf > 0 && buf[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            if line_bytes > limits.request_line_bytes_max {
                return Err(HttpError::RequestLineTooLong {
                    bytes: line_bytes,
                    limit: limits.request_line_bytes_max,
                });
            }
        }
        None if buf.len() > limits.request_line_bytes_max + 1 => {
            return Err(HttpError::RequestLineTooLong {
                bytes: buf.len(),
                limit: limits.request_line_bytes_max,
            });
        }
        None => {}
    }

    let mut storage = [httparse::EMPTY_HEADER; HEADERS_COUNT_CAP];
    let mut req = httparse::Request::new(&mut storage[..limits.headers_count_max]);
    let consumed = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.head_bytes_max {
                return Err(HttpError::HeadTooLarge {
                    bytes: buf.len(),
                    limit: limits.head_bytes_max,
                });
            }
            return Ok(None);
        }
        Err(httparse::Error::Version) => return Err(HttpError::UnsupportedVersion),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::TooManyHeaders {
                limit: limits.headers_count_max,
            })
        }
        Err(e) => return Err(HttpError::Malformed(e)),
    };
    if consumed > limits.head_bytes_max {
        return Err(HttpError::HeadTooLarge {
            bytes: consumed,
            limit: limits.head_bytes_max,
        });
    }
    // A complete parse always fills these three.
    let method = req.method.unwrap_or_default().to_owned();
    let target = req.path.unwrap_or_default().to_owned();
    let version_minor = req.version.unwrap_or(1);

    let Some(origin) = origin_form(&target) else {
        return Err(HttpError::BadTarget { target });
    };
    let (raw_path, query) = match origin.find('?') {
        Some(q) => (&origin[..q], &origin[q + 1..]),
        None => (origin, ""),
    };
    let raw_path = if raw_path.is_empty() { "/" } else { raw_path };
    let path = percent_decode(raw_path.as_bytes(), false).into_owned();
    let query = query.to_owned();

    let mut headers = Vec::with_capacity(req.headers.len());
    let mut content_length: Option<u64> = None;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value)
            .trim_matches([' ', '\t'])
            .to_owned();
        if name == "transfer-encoding" {
            return Err(HttpError::TransferEncoding);
        }
        if name == "content-length" {
            let parsed = parse_content_length(&value)?;
            if let Some(first) = content_length.filter(|prev| *prev != parsed) {
                return Err(HttpError::ConflictingContentLength {
                    first,
                    second: parsed,
                });
            }
            content_length = Some(parsed);
        }
        headers.push((name, value));
    }

    Ok(Some((
        Request {
            method,
            target,
            version_minor,
            path,
            query,
            headers,
            content_length: content_length.unwrap_or(0),
        },
        consumed,
    )))
}

/// The origin-form part of a target: the target itself when it starts with `/`, the part from
/// the first `/` or `?` after the authority of an absolute-form `http(s)://` target (`/` when
/// neither follows; a bare `?query` gets the path `/` from the caller).
fn origin_form(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let lower = target
        .get(..8)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return None;
    };
    match rest.find(['/', '?']) {
        Some(i) => Some(&rest[i..]),
        None => Some("/"),
    }
}

fn parse_content_length(value: &str) -> Result<u64, HttpError> {
    let bad = || HttpError::BadContentLength {
        value: value.to_owned(),
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value.parse::<u64>().map_err(|_| bad())
}
