//! [`ClientError`]: every way a connection, a subscription or a publish can fail, one variant per
//! close code and reply of PROTOCOL.md §7–§8.

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

/// Why a client call failed. `Clone`, so one connection failure can fail every pending ack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `ws://HOST:PORT/STREAM`.
    #[error("bad URL: {0}")]
    BadUrl(String),
    /// The TCP connection could not be made (DNS, refused, unreachable).
    #[error("cannot connect to {addr}: {msg}")]
    Connect {
        /// `host:port` as given.
        addr: String,
        /// The OS error.
        msg: String,
    },
    /// The server answered the upgrade with an HTTP status instead of 101 (401, 403, 404…).
    #[error("the server refused the WebSocket upgrade with HTTP {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    HttpRefused {
        /// The HTTP status.
        status: u16,
        /// The start of the response body (may be empty).
        body: String,
    },
    /// The connection broke: an I/O error, or the peer went away without a close frame.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The server broke the protocol (bad handshake, greeting, frame or reply).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// 4400 `bad_request`: the server could not parse the request.
    #[error("bad request: {detail}")]
    BadRequest {
        /// The server's detail.
        detail: String,
    },
    /// 4404: the stream is not served; `serves` lists the names the server does serve.
    #[error("stream not found{}", if serves.is_empty() { String::new() } else { format!("; the server serves: {}", serves.join(", ")) })]
    StreamNotFound {
        /// The sorted list of served names (may be trimmed, or empty on registry brokers).
        serves: Vec<String>,
    },
    /// 4409: a newer connection claimed this exactly-once publisher id.
    #[error("superseded: a newer connection took over this publisher id")]
    Superseded,
    /// 4410: the stream is retired (publishers only).
    #[error("the stream is retired{}{}: it takes no more rows (its history is still served)",
        at.map(|us| format!(" since {us} µs after the epoch")).unwrap_or_default(),
        end_offset.map(|e| format!(", its log ends before offset {e}")).unwrap_or_default())]
    StreamRetired {
        /// When, µs since the epoch.
        at: Option<i64>,
        /// The stream's final frontier.
        end_offset: Option<u64>,
    },
    /// 4412, or a greeting without the `publisher` mark: exactly-once is not available.
    /// `why` is `stream` (the stream has it off) or `broker` (the server does not know it).
    #[error("exactly-once is unavailable ({why})")]
    ExactlyOnceUnavailable {
        /// `stream` or `broker`.
        why: String,
    },
    /// 4416: the requested offset cannot be served. `why` is `ahead`, `too_old`, `evicted`,
    /// `not_durable` (or `empty` from old servers); `fields` are the numbers the reason carried,
    /// in order (`offset`, `end_offset`, `behind`, `max_replay`, `earliest`).
    #[error(
        "offset not replayable: {why}{}{}",
        fmt_fields(fields),
        replay_hint(why, fields)
    )]
    NotReplayable {
        /// The reason's `why`.
        why: String,
        /// The reason's other integer fields, in wire order.
        fields: Vec<(String, i64)>,
    },
    /// 4429: the subscriber fell too far behind. `offset` is the last offset it received.
    #[error("too slow: the server dropped this subscriber (backlog {backlog:?}, last offset received {offset:?})")]
    TooSlow {
        /// The server's backlog limit, when the reason carried it.
        backlog: Option<u64>,
        /// The last offset this subscription received.
        offset: Option<u64>,
    },
    /// `{"error":"rejected"}` (or any unknown error reply): the frame was refused, nothing of it landed.
    #[error("rejected: {detail}")]
    Rejected {
        /// The server's message, naming the column.
        detail: String,
    },
    /// `{"error":"gap"}`: an exactly-once frame's seq is beyond the next one expected.
    #[error("sequence gap: expected seq {expected}, got {got}")]
    SequenceGap {
        /// The seq the server expected.
        expected: u64,
        /// The seq sent.
        got: u64,
    },
    /// `{"error":"commit_failed"}`: the server could not commit (disk, SQLite); retry later.
    #[error("commit failed: {detail}")]
    CommitFailed {
        /// The server's detail.
        detail: String,
    },
    /// Any other close code (1002, 1008, 1009, 1011, 1012, …).
    #[error("connection closed with {code}{}", if reason.is_empty() { String::new() } else { format!(" {reason}") })]
    Closed {
        /// The close code (1005 when the close frame had none).
        code: u16,
        /// The close reason as sent.
        reason: String,
    },
    /// A cursor file could not be read or written.
    #[error("cursor file {path}: {msg}")]
    Cursor {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
    /// The caller used the API wrongly (a batch of zero rows, a row that is not an object…).
    #[error("{0}")]
    Usage(String),
    /// Catch-up: the server will not replay the offset, and its greeting names no published
    /// metadata (`metadata_hint` and `metadata` null: the stream has no log), so there is
    /// nowhere to read the gap from.
    #[error("stream '{stream}' is further behind than the server will replay, and the server names no published metadata for it, so there is nothing published to read the gap from: raise the stream's max_replay, or subscribe from the earliest offset to take what it still holds and accept the loss")]
    CatchUpNowhere {
        /// The stream.
        stream: String,
    },
    /// Catch-up: the published table starts above the offset asked for; the rows between are
    /// in neither the server nor the table.
    #[error("'{stream}' asked to catch up from offset {requested}, but its published tables ({table}) start at {floor}: the {} rows between are in neither the server nor the published tables; subscribe from offset {floor} with catch-up to take what is left and accept the loss (the earliest the server replays may be later than the tables' start)", floor.saturating_sub(*requested))]
    CatchUpGapBelow {
        /// The stream.
        stream: String,
        /// The table's URI.
        table: String,
        /// The offset asked for.
        requested: u64,
        /// The table's first offset.
        floor: u64,
    },
    /// Catch-up: the published table ends at or below the offset asked for, and the server
    /// has forgotten the rows between.
    #[error("'{stream}' is behind the server's replay window, and its published tables ({table}) end at offset {end}, which is not above the {requested} being asked for: the rows between are in neither the server nor the published tables; subscribe from the earliest offset to take what is left and accept the loss")]
    CatchUpNothingAbove {
        /// The stream.
        stream: String,
        /// The table's URI.
        table: String,
        /// The offset asked for (the table's floor or end for the earliest).
        requested: u64,
        /// The table's end.
        end: u64,
    },
    /// Catch-up: after `rounds` rounds of reading the table and resubscribing, the server
    /// still refuses; every published row up to `through` was delivered.
    #[error("'{stream}' could not be caught up in {rounds} rounds: everything published was delivered, up to offset {through}, and the server still will not replay from there ({refusal}); the stream is written faster than it is published, or its max_replay is too small: publish more often, raise max_replay or the catch-up retries, and resubscribe at offset {through}")]
    CatchUpExhausted {
        /// The stream.
        stream: String,
        /// The rounds made.
        rounds: u32,
        /// The offset the last round resumed at (every row below it was delivered).
        through: u64,
        /// The server's last refusal.
        refusal: String,
    },
    /// Catch-up: the published tables could not be read (a missing or damaged file, another
    /// stream's metadata, a hole in the offsets, logs that do not splice at a migration's seam,
    /// a store or credentials failure).
    #[error("cannot catch up '{stream}' from {uri}: {detail}")]
    CatchUpFailed {
        /// The stream.
        stream: String,
        /// The stream metadata URI the greeting named.
        uri: String,
        /// What failed, naming the file.
        detail: String,
    },
}

/// What to do about a 4416, when the reason says.
fn replay_hint(why: &str, fields: &[(String, i64)]) -> String {
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    match (why, field("earliest"), field("end_offset")) {
        ("evicted", Some(e), _) => format!(
            " (the server no longer replays rows below {e}: a migration's older log, or rows retention dropped; catch-up reads what the published tables still hold, else start at offset {e})"
        ),
        ("too_old", _, _) => " (further back than the stream's max_replay: start nearer the end)".into(),
        ("ahead", _, Some(end)) => format!(" (the stream ends at {end}: start at or below it)"),
        _ => String::new(),
    }
}

fn fmt_fields(fields: &[(String, i64)]) -> String {
    let mut s = String::new();
    for (k, v) in fields {
        s.push_str(&format!(" {k}={v}"));
    }
    s
}

impl ClientError {
    /// A short stable name for the variant (`not_replayable`, `too_slow`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::BadUrl(_) => "bad_url",
            ClientError::Connect { .. } => "connect",
            ClientError::HttpRefused { .. } => "http_refused",
            ClientError::ConnectionLost(_) => "connection_lost",
            ClientError::Protocol(_) => "protocol",
            ClientError::BadRequest { .. } => "bad_request",
            ClientError::StreamNotFound { .. } => "no_such_stream",
            ClientError::Superseded => "superseded",
            ClientError::StreamRetired { .. } => "stream_retired",
            ClientError::ExactlyOnceUnavailable { .. } => "exactly_once_unavailable",
            ClientError::NotReplayable { .. } => "not_replayable",
            ClientError::TooSlow { .. } => "too_slow",
            ClientError::Rejected { .. } => "rejected",
            ClientError::SequenceGap { .. } => "gap",
            ClientError::CommitFailed { .. } => "commit_failed",
            ClientError::Closed { .. } => "closed",
            ClientError::Cursor { .. } => "cursor",
            ClientError::Usage(_) => "usage",
            ClientError::CatchUpNowhere { .. } => "catch_up_nowhere",
            ClientError::CatchUpGapBelow { .. } => "catch_up_gap_below",
            ClientError::CatchUpNothingAbove { .. } => "catch_up_nothing_above",
            ClientError::CatchUpExhausted { .. } => "catch_up_exhausted",
            ClientError::CatchUpFailed { .. } => "catch_up_failed",
        }
    }

    /// The close code this error came from, when it came from a close frame.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            ClientError::BadRequest { .. } => Some(4400),
            ClientError::StreamNotFound { .. } => Some(4404),
            ClientError::Superseded => Some(4409),
            ClientError::StreamRetired { .. } => Some(4410),
            ClientError::ExactlyOnceUnavailable { why } if why == "stream" => Some(4412),
            ClientError::NotReplayable { .. } => Some(4416),
            ClientError::TooSlow { .. } => Some(4429),
            ClientError::Closed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The integer field `name` of a [`ClientError::NotReplayable`].
    pub fn field(&self, name: &str) -> Option<i64> {
        match self {
            ClientError::NotReplayable { fields, .. } => {
                fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
            }
            _ => None,
        }
    }

    /// Whether this refusal is one a catch-up answers: 4416 `too_old` or `evicted` (the rows
    /// exist but the server no longer replays them). `ahead`, `not_durable` and `empty` are
    /// not gaps in the published table.
    pub fn is_catch_up_recoverable(&self) -> bool {
        matches!(self, ClientError::NotReplayable { why, .. } if why == "too_old" || why == "evicted")
    }

    pub(crate) fn io(e: std::io::Error) -> ClientError {
        ClientError::ConnectionLost(e.to_string())
    }
}

/// How a close frame ended a connection: a normal end (1000, 1001) or an error.
pub(crate) fn from_close(
    code: Option<u16>,
    reason: &str,
    last_offset: Option<u64>,
) -> Option<ClientError> {
    let code = code.unwrap_or(1005);
    if code == 1000 || code == 1001 {
        return None;
    }
    // A reason that does not parse degrades to ("", {}) (PROTOCOL.md §8).
    let parsed: Option<Value> = sonic_rs::from_str::<Value>(reason)
        .ok()
        .filter(|v| v.is_object());
    let empty = Value::new_object();
    let v = parsed.as_ref().unwrap_or(&empty);
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let err = match code {
        4400 => {
            let detail = s("detail");
            let detail = if detail.is_empty() {
                s("error")
            } else {
                detail
            };
            if detail.contains("publisher") {
                ClientError::ExactlyOnceUnavailable {
                    why: "broker".into(),
                }
            } else {
                ClientError::BadRequest { detail }
            }
        }
        4404 => ClientError::StreamNotFound {
            serves: v
                .get("serves")
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        },
        4409 => ClientError::Superseded,
        4410 => ClientError::StreamRetired {
            at: v.get("at").and_then(|x| x.as_i64()),
            end_offset: v.get("end_offset").and_then(|x| x.as_u64()),
        },
        4412 => ClientError::ExactlyOnceUnavailable {
            why: Some(s("why"))
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "stream".into()),
        },
        4416 => {
            let mut fields = Vec::new();
            if let Some(obj) = v.as_object() {
                for (k, x) in obj.iter() {
                    if let Some(n) = x.as_i64() {
                        fields.push((k.to_string(), n));
                    }
                }
            }
            ClientError::NotReplayable {
                why: s("why"),
                fields,
            }
        }
        4429 => ClientError::TooSlow {
            backlog: v.get("backlog").and_then(|x| x.as_u64()),
            offset: last_offset,
        },
        _ => ClientError::Closed {
            code,
            reason: reason.to_string(),
        },
    };
    Some(err)
}
