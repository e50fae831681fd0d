//! The answers of the ingest endpoint, as HTTP responses with JSON bodies. Pure.
//!
//! - a committed batch: `200 {"stream","rows","appended","duplicates","first_offset",
//!   "last_offset","ingest","seq","next_seq"}`;
//! - an ingest id's mark: `200 {"stream","ingest","last_seq","last_offset","exactly_once",
//!   "max_body_bytes","max_batch_rows"}`;
//! - a refusal: the HTTP API's error body (PROTOCOL.md, "HTTP errors")
//!   `{"error":{"code","message","retryable","operation_id"}}`, with `row` and `column` added
//!   when one row is at fault, or `expected` and `got` for a seq gap.

use std::fmt::Write as _;

use corecast_net::http::response::ResponseHead;

/// A JSON string literal.
fn jstr(s: &str) -> String {
    sonic_rs::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "null".to_string(), |n| n.to_string())
}

/// A JSON response with `status`.
pub fn json(status: u16, body: &str) -> Vec<u8> {
    ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .finish(body.as_bytes())
}

/// A refusal: `status`, the error body, `extra` (`"key":json` pairs) inside `error`.
pub fn error(status: u16, code: &str, message: &str, extra: &[(&str, String)]) -> Vec<u8> {
    let mut body = format!(
        "{{\"error\":{{\"code\":{},\"message\":{},\"retryable\":{},\"operation_id\":null",
        jstr(code),
        jstr(message),
        status >= 500
    );
    for (k, v) in extra {
        let _ = write!(body, ",{}:{v}", jstr(k));
    }
    body.push_str("}}");
    let head = ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store");
    let head = match status {
        503 => head.header("retry-after", "1"),
        405 => head.header("allow", "GET, HEAD, POST"),
        _ => head,
    };
    head.finish(body.as_bytes())
}

/// What became of a committed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<'a> {
    /// The stream.
    pub stream: &'a str,
    /// Rows in the batch.
    pub rows: u64,
    /// Rows newly appended.
    pub appended: u64,
    /// Leading rows that were already in the log (a batch sent again).
    pub duplicates: u64,
    /// The offset of the batch's first row (its original one for a duplicate); `None` when the
    /// dedupe window no longer remembers it.
    pub first_offset: Option<u64>,
    /// The offset of the batch's last row, likewise.
    pub last_offset: Option<u64>,
    /// The ingest id and the batch's seq, for a resumable ingest.
    pub ingest: Option<(&'a str, u64)>,
}

impl Committed<'_> {
    /// The 200 response.
    pub fn response(&self) -> Vec<u8> {
        let (ingest, seq, next) = match self.ingest {
            Some((id, seq)) => (jstr(id), seq.to_string(), (seq + self.rows).to_string()),
            None => ("null".into(), "null".into(), "null".into()),
        };
        json(
            200,
            &format!(
                "{{\"stream\":{},\"rows\":{},\"appended\":{},\"duplicates\":{},\"first_offset\":{},\"last_offset\":{},\"ingest\":{ingest},\"seq\":{seq},\"next_seq\":{next}}}",
                jstr(self.stream),
                self.rows,
                self.appended,
                self.duplicates,
                opt(self.first_offset),
                opt(self.last_offset),
            ),
        )
    }
}

/// An ingest id's mark and the limits a client sizes its batches by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status<'a> {
    /// The stream.
    pub stream: &'a str,
    /// Whether the stream takes ingest ids (`exactly_once = true`).
    pub exactly_once: bool,
    /// The id asked about, its last seq (0: none yet) and the offset that row landed at.
    pub mark: Option<(&'a str, u64, Option<u64>)>,
    /// `[ingest] max_body_bytes`.
    pub max_body_bytes: usize,
    /// `[ingest] max_batch_rows`.
    pub max_batch_rows: usize,
}

impl Status<'_> {
    /// The 200 response.
    pub fn response(&self) -> Vec<u8> {
        let (id, last_seq, last_offset) = match self.mark {
            Some((id, seq, offset)) => (jstr(id), seq.to_string(), opt(offset)),
            None => ("null".into(), "null".into(), "null".into()),
        };
        json(
            200,
            &format!(
                "{{\"stream\":{},\"exactly_once\":{},\"ingest\":{id},\"last_seq\":{last_seq},\"last_offset\":{last_offset},\"max_body_bytes\":{},\"max_batch_rows\":{}}}",
                jstr(self.stream),
                self.exactly_once,
                self.max_body_bytes,
                self.max_batch_rows,
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(resp: &[u8]) -> String {
        let text = String::from_utf8_lossy(resp);
        text.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
    }

    #[test]
    fn bodies() {
        let c = Committed {
            stream: "btc",
            rows: 3,
            appended: 3,
            duplicates: 0,
            first_offset: Some(10),
            last_offset: Some(12),
            ingest: Some(("f1", 7)),
        };
        assert_eq!(
            body(&c.response()),
            r#"{"stream":"btc","rows":3,"appended":3,"duplicates":0,"first_offset":10,"last_offset":12,"ingest":"f1","seq":7,"next_seq":10}"#
        );
        let e = error(
            422,
            "rejected",
            "column 'a' is required but absent",
            &[("row", "4".into()), ("column", jstr("a"))],
        );
        assert_eq!(
            body(&e),
            r#"{"error":{"code":"rejected","message":"column 'a' is required but absent","retryable":false,"operation_id":null,"row":4,"column":"a"}}"#
        );
        assert!(String::from_utf8_lossy(&error(503, "busy", "x", &[])).contains("retry-after: 1"));
    }
}
