//! Close codes and reasons of protocol 4 (PROTOCOL.md §8).
//!
//! A refusal or an ending is a close frame whose reason is compact JSON, `error` first and the
//! fields after it in decreasing usefulness. A close reason holds at most 123 bytes
//! ([`CLOSE_REASON_BYTES_MAX`]), so [`CloseReason::encode`] drops trailing fields until it fits;
//! a `bad_request` detail is cut to 80 characters (and further if its escaping would not fit),
//! and a `no_such_stream` list keeps the names that fit. The plain-text reasons of §8 are
//! constants here. [`CloseReason::code`] is the one map from reason to close code.

use crate::protocol::json_text::{str_len, write_i64, write_opt_u64, write_str, write_u64};
use crate::ws::close::{CloseCode, CLOSE_REASON_BYTES_MAX};

/// Most characters of a `bad_request` detail.
pub const BAD_REQUEST_DETAIL_CHARS_MAX: usize = 80;

/// 1009, a message over the transport limit.
pub const FRAME_TOO_LARGE: &str = "frame too large";
/// 1001 when writes are fenced; 1011 on an unexpected server error.
pub const STREAM_UNAVAILABLE: &str = "stream unavailable";
/// 1001, the stream was taken offline.
pub const STREAM_STOPPING: &str = "stream stopping";
/// 1001, the server is stopping (corecast's deliberate difference 3: not uvicorn's 1012).
pub const SERVER_SHUTTING_DOWN: &str = "server shutting down";
/// 1001, handler cleanup.
pub const CONNECTION_ENDING: &str = "connection ending";
/// 1008, the parsed request needs a grant the caller lacks.
pub const FORBIDDEN: &str = "forbidden";

/// Why an offset cannot be replayed (PROTOCOL.md §6), with the fields each reason reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReplayable {
    /// `offset` is past the frontier `end_offset`.
    Ahead {
        /// The requested offset.
        offset: u64,
        /// The frontier.
        end_offset: u64,
    },
    /// More than `max_replay` rows are held from `offset`.
    TooOld {
        /// The requested (for EARLIEST, the resolved) offset.
        offset: u64,
        /// Rows held from it.
        behind: u64,
        /// The limit.
        max_replay: u64,
    },
    /// The rows from `offset` are gone locally; the first held is `earliest`.
    Evicted {
        /// The requested offset.
        offset: u64,
        /// The first offset still held.
        earliest: u64,
    },
    /// The stream has no log.
    NotDurable,
}

/// A JSON close reason of PROTOCOL.md §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason<'a> {
    /// 4400 `{"error":"bad_request","detail":…}`.
    BadRequest {
        /// What is wrong; cut to [`BAD_REQUEST_DETAIL_CHARS_MAX`] characters.
        detail: &'a str,
    },
    /// 4404 `{"error":"no_such_stream","serves":[…]}`; `serves` is sorted and keeps the names
    /// that fit; `None` (registry brokers) leaves the key out.
    NoSuchStream {
        /// The statically served names, in any order.
        serves: Option<&'a [&'a str]>,
    },
    /// 4409 `{"error":"superseded"}`.
    Superseded,
    /// 4410 `{"error":"stream_retired","at":µs,"end_offset":E}`.
    StreamRetired {
        /// When the stream was retired, UTC µs since the epoch.
        at_us: i64,
        /// Its final frontier; null with no log.
        end_offset: Option<u64>,
    },
    /// 4412 `{"error":"exactly_once_unavailable","why":…}` (`"stream"`: not opened
    /// exactly-once).
    ExactlyOnceUnavailable {
        /// Why, e.g. `stream`.
        why: &'a str,
    },
    /// 4416 `{"error":"not_replayable","why":…,…}`.
    NotReplayable(NotReplayable),
    /// 4429 `{"error":"too_slow","backlog":N}`.
    TooSlow {
        /// The subscriber queue's capacity in frames (`max_backlog`).
        backlog: u64,
    },
    /// 1009 `{"error":"too_big","size":N,"limit":L,"stream":…}`: over a per-stream
    /// `max_message_bytes`.
    TooBig {
        /// The message's size in bytes.
        size: u64,
        /// The stream's limit in bytes.
        limit: u64,
        /// The stream's name.
        stream: &'a str,
    },
}

impl CloseReason<'_> {
    /// The close code this reason is sent with.
    pub fn code(&self) -> CloseCode {
        match self {
            CloseReason::BadRequest { .. } => CloseCode::BAD_REQUEST,
            CloseReason::NoSuchStream { .. } => CloseCode::NO_SUCH_STREAM,
            CloseReason::Superseded => CloseCode::SUPERSEDED,
            CloseReason::StreamRetired { .. } => CloseCode::STREAM_RETIRED,
            CloseReason::ExactlyOnceUnavailable { .. } => CloseCode::EXACTLY_ONCE_UNAVAILABLE,
            CloseReason::NotReplayable(_) => CloseCode::NOT_REPLAYABLE,
            CloseReason::TooSlow { .. } => CloseCode::TOO_SLOW,
            CloseReason::TooBig { .. } => CloseCode::MESSAGE_TOO_BIG,
        }
    }

    /// The reason's JSON text, at most [`CLOSE_REASON_BYTES_MAX`] bytes.
    pub fn encode(&self) -> String {
        let mut reason = Reason::new(self.error());
        match self {
            CloseReason::BadRequest { detail } => {
                let mut end = detail
                    .char_indices()
                    .nth(BAD_REQUEST_DETAIL_CHARS_MAX)
                    .map_or(detail.len(), |(i, _)| i);
                while reason.room_for("detail") < str_len(&detail[..end]) {
                    end = detail[..end].char_indices().last().map_or(0, |(i, _)| i);
                }
                reason.field("detail", |out| write_str(&detail[..end], out));
            }
            CloseReason::NoSuchStream { serves: None } => {}
            CloseReason::NoSuchStream {
                serves: Some(names),
            } => {
                let mut sorted: Vec<&str> = names.to_vec();
                sorted.sort_unstable();
                let room = reason.room_for("serves");
                let mut used = 2; // the brackets
                let mut kept = 0;
                for name in &sorted {
                    let more = str_len(name) + usize::from(kept > 0);
                    if used + more > room {
                        break;
                    }
                    used += more;
                    kept += 1;
                }
                reason.field("serves", |out| {
                    out.push(b'[');
                    for (i, name) in sorted[..kept].iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        write_str(name, out);
                    }
                    out.push(b']');
                });
            }
            CloseReason::Superseded => {}
            CloseReason::StreamRetired { at_us, end_offset } => {
                reason.field("at", |out| write_i64(*at_us, out));
                reason.field("end_offset", |out| write_opt_u64(*end_offset, out));
            }
            CloseReason::ExactlyOnceUnavailable { why } => {
                reason.field("why", |out| write_str(why, out));
            }
            CloseReason::NotReplayable(why) => {
                let (name, fields): (&str, &[(&str, u64)]) = match why {
                    NotReplayable::Ahead { offset, end_offset } => {
                        ("ahead", &[("offset", *offset), ("end_offset", *end_offset)])
                    }
                    NotReplayable::TooOld {
                        offset,
                        behind,
                        max_replay,
                    } => (
                        "too_old",
                        &[
                            ("offset", *offset),
                            ("behind", *behind),
                            ("max_replay", *max_replay),
                        ],
                    ),
                    NotReplayable::Evicted { offset, earliest } => {
                        ("evicted", &[("offset", *offset), ("earliest", *earliest)])
                    }
                    NotReplayable::NotDurable => ("not_durable", &[]),
                };
                reason.field("why", |out| write_str(name, out));
                for (key, value) in fields {
                    reason.field(key, |out| write_u64(*value, out));
                }
            }
            CloseReason::TooSlow { backlog } => {
                reason.field("backlog", |out| write_u64(*backlog, out));
            }
            CloseReason::TooBig {
                size,
                limit,
                stream,
            } => {
                reason.field("size", |out| write_u64(*size, out));
                reason.field("limit", |out| write_u64(*limit, out));
                reason.field("stream", |out| write_str(stream, out));
            }
        }
        reason.finish()
    }

    fn error(&self) -> &'static str {
        match self {
            CloseReason::BadRequest { .. } => "bad_request",
            CloseReason::NoSuchStream { .. } => "no_such_stream",
            CloseReason::Superseded => "superseded",
            CloseReason::StreamRetired { .. } => "stream_retired",
            CloseReason::ExactlyOnceUnavailable { .. } => "exactly_once_unavailable",
            CloseReason::NotReplayable(_) => "not_replayable",
            CloseReason::TooSlow { .. } => "too_slow",
            CloseReason::TooBig { .. } => "too_big",
        }
    }
}

/// A reason being built: `{"error":…` then fields while they fit, then `}`. Once one field
/// does not fit, it and every later one are dropped.
struct Reason {
    out: Vec<u8>,
    full: bool,
}

impl Reason {
    fn new(error: &str) -> Reason {
        let mut out = Vec::with_capacity(CLOSE_REASON_BYTES_MAX);
        out.extend_from_slice(b"{\"error\":");
        write_str(error, &mut out);
        // `error` is always one of ours, short enough to leave room for the brace.
        assert!(out.len() < CLOSE_REASON_BYTES_MAX);
        Reason { out, full: false }
    }

    /// Bytes left for the value of field `key`, keeping room for the closing brace.
    fn room_for(&self, key: &str) -> usize {
        let framing = 1 + str_len(key) + 1 + 1; // `,"key":` and the closing `}`
        CLOSE_REASON_BYTES_MAX.saturating_sub(self.out.len() + framing)
    }

    fn field(&mut self, key: &str, write_value: impl FnOnce(&mut Vec<u8>)) {
        if self.full {
            return;
        }
        let mark = self.out.len();
        self.out.push(b',');
        write_str(key, &mut self.out);
        self.out.push(b':');
        write_value(&mut self.out);
        if self.out.len() + 1 > CLOSE_REASON_BYTES_MAX {
            self.out.truncate(mark);
            self.full = true;
        }
    }

    fn finish(mut self) -> String {
        self.out.push(b'}');
        assert!(self.out.len() <= CLOSE_REASON_BYTES_MAX);
        // Built only from `&str`s and ASCII.
        String::from_utf8(self.out).expect("close reason is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

    /// Characters of every UTF-8 width and every kind of JSON escape.
    const ALPHABET: [char; 12] = [
        'a', ' ', 'é', '€', '😀', '"', '\\', '\n', '\u{1}', '\u{7f}', 'ß', '\'',
    ];

    /// A deterministic detail of `n` characters drawn from [`ALPHABET`] with `seed`.
    fn detail(n: usize, seed: usize) -> String {
        (0..n)
            .map(|i| ALPHABET[(i * (seed | 1) + seed / 3 + i / 7) % ALPHABET.len()])
            .collect()
    }

    /// Valid JSON (hence valid UTF-8, the reason being a `String`) within 123 bytes, `error` first.
    fn parsed(reason: &str, error: &str) -> Value {
        assert!(
            reason.len() <= CLOSE_REASON_BYTES_MAX,
            "{} bytes: {reason}",
            reason.len()
        );
        let v: Value =
            sonic_rs::from_str(reason).unwrap_or_else(|e| panic!("not JSON ({e}): {reason:?}"));
        assert_eq!(v["error"].as_str(), Some(error), "{reason}");
        assert!(reason.starts_with(&format!("{{\"error\":\"{error}\"")));
        v
    }

    #[test]
    fn bad_request_details_are_shortened_inside_the_string_never_cut() {
        for seed in 0..40 {
            for n in 0..=200 {
                let full = detail(n, seed);
                let reason = CloseReason::BadRequest { detail: &full }.encode();
                let v = parsed(&reason, "bad_request");
                let kept = v["detail"].as_str().expect("detail is a string");
                assert!(
                    full.starts_with(kept),
                    "{kept:?} is not a prefix of {full:?}"
                );
                let kept_chars = kept.chars().count();
                assert!(kept_chars <= BAD_REQUEST_DETAIL_CHARS_MAX);
                // as long as fits: one more character would break 80 characters or 123 bytes
                if kept_chars < full.chars().count() && kept_chars < BAD_REQUEST_DETAIL_CHARS_MAX {
                    let more: String = full.chars().take(kept_chars + 1).collect();
                    let longer = CloseReason::BadRequest { detail: &more }.encode();
                    assert!(
                        sonic_rs::from_str::<Value>(&longer).expect("JSON")["detail"]
                            .as_str()
                            .is_some_and(|d| d.len() < more.len()),
                        "{kept:?} was shortened though {more:?} fits"
                    );
                }
            }
        }
    }

    #[test]
    fn trailing_fields_are_dropped_whole() {
        for n in 0..=140 {
            let name = "s".repeat(n);
            let reason = CloseReason::TooBig {
                size: u64::MAX,
                limit: 1 << 20,
                stream: &name,
            }
            .encode();
            let v = parsed(&reason, "too_big");
            assert_eq!(v["size"].as_u64(), Some(u64::MAX));
            match v["stream"].as_str() {
                Some(s) => assert_eq!(s, name),
                None => assert!(reason.len() + n + 12 > CLOSE_REASON_BYTES_MAX, "{reason}"),
            }
            let why = detail(n, n);
            let reason = CloseReason::ExactlyOnceUnavailable { why: &why }.encode();
            let v = parsed(&reason, "exactly_once_unavailable");
            if let Some(w) = v["why"].as_str() {
                assert_eq!(w, why);
            }
        }
    }

    #[test]
    fn served_names_keep_those_that_fit_sorted() {
        for count in 0..60 {
            let names: Vec<String> = (0..count)
                .map(|i| format!("stream-{:03}", count - i))
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let reason = CloseReason::NoSuchStream {
                serves: Some(&refs),
            }
            .encode();
            let v = parsed(&reason, "no_such_stream");
            let kept: Vec<&str> = v["serves"]
                .as_array()
                .expect("serves")
                .iter()
                .map(|n| n.as_str().expect("a name"))
                .collect();
            let mut sorted = refs.clone();
            sorted.sort_unstable();
            assert_eq!(kept, sorted[..kept.len()]);
        }
    }
}
