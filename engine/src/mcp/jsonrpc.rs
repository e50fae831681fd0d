//! JSON-RPC 2.0 messages, as MCP's Streamable HTTP carries them: decoding a POST body into
//! messages and encoding replies. Pure (no I/O).
//!
//! A body is one message or a batch (an array of them, [`BATCH_MAX`] at most). A message with
//! a `method` and an `id` is a request and gets exactly one reply; one with a `method` and no
//! `id` is a notification and gets none; one with `result` or `error` is a client's reply and
//! gets none either.

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

/// One decoded message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answered once, with its `id`.
    Request {
        /// Its id (a string or a number).
        id: Value,
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
        id: Value,
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
    pub fn reply(&self) -> Value {
        match self {
            BodyError::NotJson(e) => {
                error(&Value::Null, PARSE_ERROR, &format!("not JSON: {e}"), None)
            }
            BodyError::EmptyBatch => error(&Value::Null, INVALID_REQUEST, "an empty batch", None),
            BodyError::BatchTooLarge(n) => error(
                &Value::Null,
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
            Ok((items.into_iter().map(message).collect(), true))
        }
        one => Ok((vec![message(one)], false)),
    }
}

fn message(v: Value) -> Message {
    let Value::Object(mut m) = v else {
        return Message::Invalid {
            id: Value::Null,
            why: "a message is a JSON object".into(),
        };
    };
    let id = match m.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(_) => {
            return Message::Invalid {
                id: Value::Null,
                why: "id must be a string or a number".into(),
            }
        }
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Message::Invalid {
            id: id.unwrap_or(Value::Null),
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
            id: id.unwrap_or(Value::Null),
            why: "method must be a string".into(),
        },
        (None, _) if m.contains_key("result") || m.contains_key("error") => Message::Reply,
        (None, id) => Message::Invalid {
            id: id.unwrap_or(Value::Null),
            why: "no method".into(),
        },
    }
}

/// A success reply.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error reply.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": e})
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
                id: json!(1),
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
        assert!(matches!(&m[2], Message::Invalid { id, .. } if *id == json!(2)));
        assert!(matches!(decode(b"{"), Err(BodyError::NotJson(_))));
        assert_eq!(decode(b"[]"), Err(BodyError::EmptyBatch));
        let many = format!("[{}]", vec!["1"; BATCH_MAX + 1].join(","));
        assert_eq!(
            decode(many.as_bytes()),
            Err(BodyError::BatchTooLarge(BATCH_MAX + 1))
        );
    }
}
