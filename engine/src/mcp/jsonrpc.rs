//! JSON-RPC 2.0 messages, as MCP's Streamable HTTP carries them: decoding a POST body into
//! messages and encoding replies. Pure (no I/O).
//!
//! A body is one message or a batch (an array of them, [`BATCH_MAX`] at most). A message with
//! a `method` and an `id` is a request and gets exactly one reply; one with a `method` and no
//! `id` is a notification and gets none; one with `result` or `error` is a client's reply and
//! gets none either.
//!
//! An id is echoed as the JSON text the client sent ([`Id`]), byte for byte: a number id
//! such as `123456789012345678901234567890` is not an `f64` to round. Replies are built as
//! JSON text ([`result`] embeds its result's text as given), so nothing a reply carries is
//! parsed and printed again on the way out.

use serde_json::{json, Value};

/// Most messages one batch may hold.
pub const BATCH_MAX: usize = 16;

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Bad params: an unknown tool, an argument its schema refuses, a bound passed.
pub const INVALID_PARAMS: i64 = -32602;

/// A request's id: the JSON text of a string or a number, as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Id(String);

impl Id {
    /// `null`: the id of a reply to a message whose id could not be read.
    pub fn null() -> Id {
        Id("null".into())
    }

    /// The id's JSON text.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// The id whose value is `v` (a string or a number) and whose text in the body was `raw`
    /// (when it could be found): `raw` when it is the same value, else `v` printed again.
    fn of(v: &Value, raw: Option<&str>) -> Id {
        let same_kind = |r: &str| match v {
            Value::String(_) => r.starts_with('"'),
            _ => r.starts_with(|c: char| c == '-' || c.is_ascii_digit()),
        };
        match raw {
            Some(r) if same_kind(r) => Id(r.to_string()),
            _ => Id(v.to_string()),
        }
    }
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answered once, with its `id`.
    Request {
        /// Its id (a string or a number).
        id: Id,
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// A notification: never answered.
    Notification {
        /// The method.
        method: String,
    },
    /// A reply from the client (to a request we never send): ignored.
    Reply,
    /// Not a JSON-RPC 2.0 message: answered with [`INVALID_REQUEST`] (and this id when it
    /// had a usable one).
    Invalid {
        /// The id, or `null`.
        id: Id,
        /// What is wrong.
        why: String,
    },
}

/// A body that is not one message or a batch of them.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyError {
    /// Not JSON (serde_json's reason).
    NotJson(String),
    /// An empty batch.
    EmptyBatch,
    /// More than [`BATCH_MAX`] messages.
    BatchTooLarge(usize),
}

impl BodyError {
    /// The reply: one error with a `null` id.
    pub fn reply(&self) -> String {
        match self {
            BodyError::NotJson(e) => {
                error(&Id::null(), PARSE_ERROR, &format!("not JSON: {e}"), None)
            }
            BodyError::EmptyBatch => error(&Id::null(), INVALID_REQUEST, "an empty batch", None),
            BodyError::BatchTooLarge(n) => error(
                &Id::null(),
                INVALID_REQUEST,
                &format!("a batch of {n} messages is over the maximum of {BATCH_MAX}"),
                Some(json!({"code": "resource_limit_exceeded", "maximum": BATCH_MAX})),
            ),
        }
    }
}

/// The messages of `body`, and whether it was a batch.
pub fn decode(body: &[u8]) -> Result<(Vec<Message>, bool), BodyError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| BodyError::NotJson(e.to_string()))?;
    match v {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(BodyError::EmptyBatch);
            }
            if items.len() > BATCH_MAX {
                return Err(BodyError::BatchTooLarge(items.len()));
            }
            // the raw text of each message, for its id (sonic-rs reads it without a copy)
            let raws: Vec<Option<String>> = sonic_rs::to_array_iter(body)
                .map(|item| item.ok().and_then(|i| raw_id(i.as_raw_str())))
                .collect();
            let n = items.len();
            let raws = raws.into_iter().chain(std::iter::repeat(None)).take(n);
            Ok((
                items
                    .into_iter()
                    .zip(raws)
                    .map(|(v, r)| message(v, r.as_deref()))
                    .collect(),
                true,
            ))
        }
        one => {
            let raw = std::str::from_utf8(body).ok().and_then(raw_id);
            Ok((vec![message(one, raw.as_deref())], false))
        }
    }
}

/// The JSON text of the `id` member of the object `text`, if it has one.
fn raw_id(text: &str) -> Option<String> {
    sonic_rs::get_from_str(text, ["id"])
        .ok()
        .map(|v| v.as_raw_str().trim().to_string())
}

fn message(v: Value, raw_id: Option<&str>) -> Message {
    let Value::Object(mut m) = v else {
        return Message::Invalid {
            id: Id::null(),
            why: "a message is a JSON object".into(),
        };
    };
    let id = match m.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(Id::of(&id, raw_id)),
        Some(_) => {
            return Message::Invalid {
                id: Id::null(),
                why: "id must be a string or a number".into(),
            }
        }
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Message::Invalid {
            id: id.unwrap_or_else(Id::null),
            why: "jsonrpc must be \"2.0\"".into(),
        };
    }
    match (m.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Message::Request {
            id,
            method,
            params: m.remove("params").unwrap_or(Value::Null),
        },
        (Some(Value::String(method)), None) => Message::Notification { method },
        (Some(_), id) => Message::Invalid {
            id: id.unwrap_or_else(Id::null),
            why: "method must be a string".into(),
        },
        (None, _) if m.contains_key("result") || m.contains_key("error") => Message::Reply,
        (None, id) => Message::Invalid {
            id: id.unwrap_or_else(Id::null),
            why: "no method".into(),
        },
    }
}

/// A success reply, as JSON text: `result` is the result's JSON text, embedded as it is.
pub fn result(id: &Id, result: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#,
        id.json()
    )
}

/// An error reply, as JSON text.
pub fn error(id: &Id, code: i64, message: &str, data: Option<Value>) -> String {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{e}}}"#, id.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_requests_notifications_and_refusals() {
        let (m, batch) = decode(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        assert!(!batch);
        assert_eq!(
            m,
            vec![Message::Request {
                id: Id("1".into()),
                method: "tools/list".into(),
                params: Value::Null
            }]
        );
        let (m, batch) = decode(
            br#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"a","result":{}},{"id":2,"method":"x"}]"#,
        )
        .unwrap();
        assert!(batch);
        assert_eq!(
            m[0],
            Message::Notification {
                method: "notifications/initialized".into()
            }
        );
        assert_eq!(m[1], Message::Reply);
        assert!(matches!(&m[2], Message::Invalid { id, .. } if id.json() == "2"));
        // ids are echoed as sent: a number past f64's exact integers, a string with escapes
        let (m, _) = decode(
            br#"[{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"},{"jsonrpc":"2.0","id" : "a\u0041","method":"ping"}]"#,
        )
        .unwrap();
        assert!(
            matches!(&m[0], Message::Request { id, .. } if id.json() == "123456789012345678901234567890")
        );
        assert!(matches!(&m[1], Message::Request { id, .. } if id.json() == r#""a\u0041""#));
        let r = result(&Id("1.50".into()), r#"{"x":0.0063289999999999996}"#);
        assert_eq!(
            r,
            r#"{"jsonrpc":"2.0","id":1.50,"result":{"x":0.0063289999999999996}}"#
        );
        let (m, _) =
            decode(br#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping"}"#).unwrap();
        assert!(
            matches!(&m[0], Message::Request { id, .. } if id.json() == "18446744073709551617")
        );
        assert!(matches!(decode(b"{"), Err(BodyError::NotJson(_))));
        assert_eq!(decode(b"[]"), Err(BodyError::EmptyBatch));
        let many = format!("[{}]", vec!["1"; BATCH_MAX + 1].join(","));
        assert_eq!(
            decode(many.as_bytes()),
            Err(BodyError::BatchTooLarge(BATCH_MAX + 1))
        );
    }
}
