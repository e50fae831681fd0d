//! Response heads and bodies (RFC 9112 §4, §6), built into one `Vec<u8>` ready to write.
//!
//! Header names are written as given; corecast writes them lower case, as uvicorn does. A
//! response with a body always carries `content-length`; `date` is the caller's to add
//! ([`http_date`]), so a connection can format it once a second.

use crate::http::request::HttpError;
use crate::protocol::json_text;

/// The reason phrase for `status` (RFC 9110 §15), or `""` for a status not listed.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        428 => "Precondition Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// A response head being built: the status line, then headers in the order added.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    buf: Vec<u8>,
}

impl ResponseHead {
    /// Starts `HTTP/1.1 <status> <reason>`. Panics unless `100 <= status <= 999`.
    pub fn new(status: u16) -> ResponseHead {
        assert!((100..=999).contains(&status));
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"HTTP/1.1 ");
        json_text::write_u64(u64::from(status), &mut buf);
        buf.push(b' ');
        buf.extend_from_slice(reason_phrase(status).as_bytes());
        buf.extend_from_slice(b"\r\n");
        ResponseHead { buf }
    }

    /// Adds `name: value`. Panics if either holds CR or LF (header injection is a bug here).
    pub fn header(mut self, name: &str, value: &str) -> ResponseHead {
        assert!(!name.bytes().any(|b| b == b'\r' || b == b'\n' || b == b':'));
        assert!(!value.bytes().any(|b| b == b'\r' || b == b'\n'));
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// Ends the head with `connection: close` and `content-length: <body.len()>`, and appends
    /// the body. corecast answers one request per connection and closes it after the response,
    /// which RFC 9112 §9.6 asks a server to announce with `connection: close`.
    pub fn finish(self, body: &[u8]) -> Vec<u8> {
        self.finish_with_connection("close", body)
    }

    /// [`ResponseHead::finish`] with `connection: <options>` instead of `connection: close`;
    /// `options` should still hold `close` (e.g. a 426's `upgrade, close`). Panics if
    /// `options` holds CR or LF.
    pub fn finish_with_connection(mut self, options: &str, body: &[u8]) -> Vec<u8> {
        assert!(!options.bytes().any(|b| b == b'\r' || b == b'\n'));
        self.buf.extend_from_slice(b"connection: ");
        self.buf.extend_from_slice(options.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(b"content-length: ");
        json_text::write_u64(body.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(b"\r\n\r\n");
        self.buf.extend_from_slice(body);
        self.buf
    }

    /// Ends the head with no `content-length` and no body: for 101 and for streamed bodies
    /// whose end is the end of the connection.
    pub fn finish_head(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"\r\n");
        self.buf
    }
}

/// The answer to a HEAD request from the GET answer `response`: its status line and headers
/// (`content-length` included: the length the GET body has), no body (RFC 9110 §9.3.2).
pub fn head_only(mut response: Vec<u8>) -> Vec<u8> {
    if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
        response.truncate(end + 4);
    }
    response
}

/// `unix_secs` as an IMF-fixdate (RFC 9110 §5.6.7), e.g. `Mon, 30 Nov 2026 23:35:45 GMT`.
pub fn http_date(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let secs_of_day = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    )
}

/// Days since 1970-01-01 → (year, month 1-12, day 1-31), Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The JSON error body of corecast's HTTP API (PROTOCOL.md §11):
/// `{"error":{"code":…,"message":…,"retryable":bool,"operation_id":null}}`.
pub fn json_error_body(code: &str, message: &str, retryable: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + code.len() + message.len());
    body.extend_from_slice(b"{\"error\":{\"code\":");
    json_text::write_str(code, &mut body);
    body.extend_from_slice(b",\"message\":");
    json_text::write_str(message, &mut body);
    body.extend_from_slice(b",\"retryable\":");
    json_text::write_bool(retryable, &mut body);
    body.extend_from_slice(b",\"operation_id\":null}}");
    body
}

/// A complete `status` response with `content-type: application/json` and the
/// [`json_error_body`].
pub fn json_error(status: u16, code: &str, message: &str, retryable: bool) -> Vec<u8> {
    ResponseHead::new(status)
        .header("content-type", "application/json")
        .finish(&json_error_body(code, message, retryable))
}

/// The 404 for a path no endpoint serves: code `not_found`, message naming the path.
pub fn not_found(path: &str) -> Vec<u8> {
    let message = format!("no endpoint at {path}");
    json_error(404, "not_found", &message, false)
}

/// The response to a request head that [`crate::http::request::parse_request`] refused: its
/// [`HttpError::status`], its [`HttpError::code`], the error as message, and
/// `connection: close` (the rest of the stream cannot be trusted).
pub fn http_error_response(err: &HttpError) -> Vec<u8> {
    ResponseHead::new(err.status())
        .header("content-type", "application/json")
        .finish(&json_error_body(err.code(), &err.to_string(), false))
}
