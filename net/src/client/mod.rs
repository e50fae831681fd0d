//! The client library: subscribe to and publish into a streamcast-protocol-4 broker (corecast or
//! the reference server) over `ws://` or `wss://` (TLS: the system roots, or a CA file through
//! [`tls::use_ca_file`]).
//!
//! Async on this crate's runtime ([`crate::rt`]), with a blocking facade ([`blocking`]) that runs
//! a runtime on the calling thread.
//!
//! - [`connect`] subscribes (live, from the earliest row, or from an offset; optionally filtered
//!   by `where`; optionally resumed from a cursor file) and yields [`Row`]s `(offset, ts, row)`.
//! - [`publish`] opens a publisher: [`Publisher::send`] waits for its ack,
//!   [`Publisher::submit`] pipelines up to a window and returns a [`Pending`] that resolves to
//!   the offsets; batches are one transaction; `publisher = Some(id)` makes it exactly-once,
//!   resuming after the greeting's mark.
//! - With [`SubscribeOptions::catch_up`] (cargo feature `catch-up`), an offset older than the
//!   server replays is read from the stream's published Iceberg table first, then the socket
//!   resumes where the table ends: one stream of rows, no gap, no duplicate (the official
//!   client's `catch_up=True`; `catch_up.rs`).
//! - Every close code and error reply is a [`ClientError`] variant.
//!
//! ```no_run
//! use corecast_net::client::{blocking, Offset, SubscribeOptions, PublishOptions};
//! let mut p = blocking::publish("ws://127.0.0.1:8765/trades", PublishOptions::default())?;
//! let offset = p.send(r#"{"event_ts":1,"price":1.0,"amount":1.0,"side":1,"symbol":"X","trade_id":1}"#)?;
//! let mut s = blocking::connect("ws://127.0.0.1:8765/trades", SubscribeOptions {
//!     offset: Some(Offset::Earliest), ..Default::default() })?;
//! while let Some(row) = s.next()? {
//!     println!("{} {:?} {}", row.offset.unwrap_or(0), row.ts, row.row());
//! }
//! s.close();
//! # Ok::<(), corecast_net::client::ClientError>(())
//! ```

pub mod blocking;
#[cfg(feature = "catch-up")]
mod catch_up;
mod conn;
mod cursor;
mod error;
mod publish;
mod subscribe;
pub mod tls;
mod url;

use std::ops::Range;
use std::path::PathBuf;

pub use cursor::Cursor;
pub use error::ClientError;
pub use publish::{publish, Pending, PublishOptions, Publisher, DEFAULT_WINDOW};
pub use subscribe::{connect, Subscription};
pub use url::{redact_userinfo, Target};

/// Where a subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offset {
    /// From the frontier on: only rows committed after attaching (no `offset=`).
    #[default]
    Live,
    /// From the lowest offset the server holds (`offset=0`).
    Earliest,
    /// From offset `n`, inclusive (`offset=n`; 0 means earliest).
    At(u64),
}

/// Rounds of read-the-table-then-resubscribe a catch-up makes before giving up (the official
/// client's `catch_up_retries` default).
pub const CATCH_UP_RETRIES: u32 = 3;

/// How to subscribe.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// Where to start. An offset given here wins over the cursor file (as in the official
    /// client); `None` lets the cursor file decide, and without one the subscription is live.
    pub offset: Option<Offset>,
    /// A `where=` filter: a JSON object mapping column to value or list of values.
    pub where_json: Option<String>,
    /// A cursor file: when `offset` is `None` and the file exists, the subscription resumes
    /// after the offset it holds; the position is saved back as rows are consumed, never
    /// backwards (see [`Cursor`]).
    pub cursor_file: Option<PathBuf>,
    /// When the server refuses the offset as older than it replays (4416 `too_old` or
    /// `evicted`), read the gap from the stream's published table and resume the socket where
    /// the table ends, as the official client's `catch_up=True` does (PROTOCOL.md, "Catch-up"):
    /// the rows arrive once each, in offset order, with no gap, byte for byte as the socket
    /// would have sent them. Needs the `catch-up` cargo feature (`s3` for `s3://` tables, with
    /// credentials from the standard `AWS_*` environment); without it, asking for it is a
    /// [`ClientError::Usage`].
    pub catch_up: bool,
    /// How many rounds of reading the table and resubscribing a catch-up makes while the
    /// server keeps refusing (it moves on while the table is read); then
    /// [`ClientError::CatchUpExhausted`]. Default [`CATCH_UP_RETRIES`].
    pub catch_up_retries: u32,
    /// The `Authorization` header sent with every upgrade (e.g. `Bearer TOKEN`); `None`: the
    /// URL's userinfo (`ws://user:password@host/…`, sent as HTTP Basic), if any.
    pub authorization: Option<String>,
    /// On a keyed stream, start with its state (`?state`, PROTOCOL.md §8): the latest row of
    /// each key (that matches [`SubscribeOptions::where_json`]) in offset order, then every
    /// row from the snapshot's offset on, live. A start of its own: with `offset` or
    /// `catch_up` it is a [`ClientError::Usage`]; with a cursor file that holds a position the
    /// subscription resumes after it instead (the snapshot came in offset order, so the log
    /// from there completes the copy), and takes the state again when the server no longer
    /// replays from there (`too_old`, `evicted`): rows of entities it already holds may then
    /// come again, each at its latest version.
    pub state: bool,
}

impl Default for SubscribeOptions {
    fn default() -> SubscribeOptions {
        SubscribeOptions {
            offset: None,
            where_json: None,
            cursor_file: None,
            catch_up: false,
            catch_up_retries: CATCH_UP_RETRIES,
            authorization: None,
            state: false,
        }
    }
}

/// The exactly-once publisher mark a greeting carries (PROTOCOL.md §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherMark {
    /// The publisher id.
    pub id: String,
    /// The last seq that landed (0 for a new publisher).
    pub last_seq: u64,
    /// The offset of that row (null for a new publisher or one the broker forgot).
    pub last_offset: Option<u64>,
}

/// The first frame of every connection (PROTOCOL.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The protocol version (4 or 5).
    pub version: u8,
    /// The server's name for the stream.
    pub stream: String,
    /// The offset the next row will get; `None` on a stream with no log.
    pub end_offset: Option<u64>,
    /// The replay window `[start, end)`, for a subscription with an offset.
    pub replay: Option<(u64, u64)>,
    /// Whether the stream keeps a log.
    pub durable: bool,
    /// Whether sends may share a transaction.
    pub group_commit: bool,
    /// The stream's stable id.
    pub stream_id: Option<String>,
    /// The URI of the stream's plain metadata file (`…/<stream>.metadata.json`), where its
    /// history is published; `None` with no log.
    pub metadata: Option<String>,
    /// The URI of the stream metadata's hint (`…/<stream>.metadata/version-hint.text`), which a
    /// catch-up reads first; `None` with no log (or from servers that send only `metadata`).
    pub metadata_hint: Option<String>,
    /// The exactly-once mark (exactly-once publishers only).
    pub publisher: Option<PublisherMark>,
    /// The published schema as JSON text.
    pub schema: Option<String>,
    /// The whole greeting as received.
    pub raw: String,
}

/// One data frame: `[offset, ts, row]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The log offset (`None` on a stream with no log).
    pub offset: Option<u64>,
    /// The server's receipt time, µs since the epoch.
    pub ts: Option<i64>,
    frame: String,
    row: Range<usize>,
}

impl Row {
    /// A row read from somewhere other than the socket (the published table), framed as the
    /// server frames it: `[offset,ts,row]`.
    #[cfg_attr(not(feature = "catch-up"), allow(dead_code))]
    pub(crate) fn from_parts(offset: u64, ts: i64, row: &str) -> Row {
        let mut frame = String::with_capacity(row.len() + 44);
        let mut a = itoa::Buffer::new();
        let mut b = itoa::Buffer::new();
        frame.push('[');
        frame.push_str(a.format(offset));
        frame.push(',');
        frame.push_str(b.format(ts));
        frame.push(',');
        let start = frame.len();
        frame.push_str(row);
        frame.push(']');
        Row {
            offset: Some(offset),
            ts: Some(ts),
            row: start..start + row.len(),
            frame,
        }
    }

    /// The row object's JSON text, exactly as received.
    pub fn row(&self) -> &str {
        &self.frame[self.row.clone()]
    }

    /// The whole frame `[offset,ts,row]`, exactly as received.
    pub fn frame(&self) -> &str {
        &self.frame
    }

    /// Parses a data frame (PROTOCOL.md §5): a JSON list of `[int|null, int|null, object]`.
    pub fn parse(frame: Vec<u8>) -> Result<Row, ClientError> {
        let frame = String::from_utf8(frame)
            .map_err(|_| ClientError::Protocol("a data frame is not UTF-8".into()))?;
        let (offset, ts, row): (Option<u64>, Option<i64>, sonic_rs::LazyValue<'_>) =
            sonic_rs::from_str(&frame).map_err(|e| {
                ClientError::Protocol(format!(
                    "a data frame is not [offset, ts, row]: {e}: {}",
                    frame.chars().take(80).collect::<String>()
                ))
            })?;
        let raw = row.as_raw_str();
        if !raw.starts_with('{') {
            return Err(ClientError::Protocol(
                "a data frame's row is not an object".into(),
            ));
        }
        let start = raw.as_ptr() as usize - frame.as_ptr() as usize;
        let range = start..start + raw.len();
        Ok(Row {
            offset,
            ts,
            frame,
            row: range,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_a_start_of_its_own() {
        // refused before anything connects (nothing listens on port 1)
        for opts in [
            SubscribeOptions {
                state: true,
                offset: Some(Offset::At(5)),
                ..SubscribeOptions::default()
            },
            SubscribeOptions {
                state: true,
                catch_up: true,
                ..SubscribeOptions::default()
            },
        ] {
            match blocking::connect("ws://127.0.0.1:1/quotes", opts) {
                Err(ClientError::Usage(m)) => assert!(m.contains("state"), "{m}"),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("connected"),
            }
        }
    }

    #[test]
    fn rows_parse_exactly() {
        let r = Row::parse(
            br#"[7,1796081766307229,{"a":1719878281218218853,"b":null,"c":"x,]"}]"#.to_vec(),
        )
        .unwrap();
        assert_eq!(r.offset, Some(7));
        assert_eq!(r.ts, Some(1796081766307229));
        assert_eq!(r.row(), r#"{"a":1719878281218218853,"b":null,"c":"x,]"}"#);
        let r = Row::parse(br#"[null,null,{}]"#.to_vec()).unwrap();
        assert_eq!((r.offset, r.ts, r.row()), (None, None, "{}"));
        for bad in [
            &b"[1,2]"[..],
            b"[1,2,3]",
            b"[1,2,{},4]",
            b"{}",
            b"[\"1\",2,{}]",
            b"nope",
        ] {
            assert!(
                Row::parse(bad.to_vec()).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn greetings_parse() {
        let g = Greeting::parse(br#"{"streamcast":4,"stream":"t","end_offset":6,"replay":[1,6],"durable":true,"group_commit":true,"schema":null,"where":null,"publisher":{"id":"p1","last_seq":5,"last_offset":5}}"#.to_vec()).unwrap();
        assert_eq!(g.end_offset, Some(6));
        assert_eq!(g.replay, Some((1, 6)));
        assert_eq!(g.publisher.unwrap().last_seq, 5);
        assert!(Greeting::parse(br#"{"streamcast":3,"end_offset":1}"#.to_vec()).is_err());
        assert!(Greeting::parse(br#"{"streamcast":4}"#.to_vec()).is_err());
        assert!(
            Greeting::parse(br#"{"streamcast":4,"end_offset":null}"#.to_vec())
                .unwrap()
                .end_offset
                .is_none()
        );
    }

    #[test]
    fn close_codes_map() {
        use error::from_close;
        assert_eq!(from_close(Some(1000), "", None), None);
        assert_eq!(from_close(Some(1001), "server shutting down", None), None);
        assert_eq!(
            from_close(
                Some(4404),
                r#"{"error":"no_such_stream","serves":["a","b"]}"#,
                None
            ),
            Some(ClientError::StreamNotFound {
                serves: vec!["a".into(), "b".into()]
            })
        );
        let e = from_close(
            Some(4416),
            r#"{"error":"not_replayable","why":"ahead","offset":9,"end_offset":3}"#,
            None,
        )
        .unwrap();
        assert_eq!(e.field("end_offset"), Some(3));
        assert!(matches!(e, ClientError::NotReplayable { ref why, .. } if why == "ahead"));
        assert_eq!(
            from_close(
                Some(4429),
                r#"{"error":"too_slow","backlog":8192}"#,
                Some(41)
            ),
            Some(ClientError::TooSlow {
                backlog: Some(8192),
                offset: Some(41)
            })
        );
        assert_eq!(
            from_close(Some(4409), "x", None),
            Some(ClientError::Superseded)
        );
        assert_eq!(
            from_close(
                Some(4412),
                r#"{"error":"exactly_once_unavailable","why":"stream"}"#,
                None
            ),
            Some(ClientError::ExactlyOnceUnavailable {
                why: "stream".into()
            })
        );
        assert_eq!(
            from_close(
                Some(4400),
                r#"{"error":"bad_request","detail":"unknown query parameter(s): publisher"}"#,
                None
            ),
            Some(ClientError::ExactlyOnceUnavailable {
                why: "broker".into()
            })
        );
        assert_eq!(
            from_close(
                Some(4400),
                r#"{"error":"bad_request","detail":"bad where"}"#,
                None
            ),
            Some(ClientError::BadRequest {
                detail: "bad where".into()
            })
        );
        assert_eq!(
            from_close(Some(1012), "", None),
            Some(ClientError::Closed {
                code: 1012,
                reason: String::new()
            })
        );
    }
}
