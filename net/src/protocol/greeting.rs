//! The greeting (PROTOCOL.md §4): the first frame on every accepted connection.
//!
//! Keys in the reference's order: `streamcast`, `stream`, `end_offset`, `replay`, `durable`,
//! `group_commit`, `schema`, `metadata`, `metadata_hint`, `stream_id`, `where`, and `publisher`
//! only on an exactly-once publisher's greeting. Every other key is always present (`null`
//! when empty).

use crate::protocol::json_text::{write_bool, write_opt_str, write_opt_u64, write_str, write_u64};
use crate::protocol::ServerMessage;
use crate::protocol::PROTOCOL_VERSION;

/// An exactly-once publisher's mark, echoed in its greeting (PROTOCOL.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherMark<'a> {
    /// The publisher id from `publisher=`.
    pub id: &'a str,
    /// The last committed seq; 0 for a new publisher.
    pub last_seq: u64,
    /// The offset of that seq's last row; `None` (null) for a new publisher.
    pub last_offset: Option<u64>,
}

/// The fields of a greeting. Borrowed, so building one allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting<'a> {
    /// The stream's own name, without mount prefix.
    pub stream: &'a str,
    /// The frontier at attach (the next row's offset); `None` with no log.
    pub end_offset: Option<u64>,
    /// The half-open replay window `[start, end)`; `None` for live-only and publishers.
    pub replay: Option<(u64, u64)>,
    /// Whether a log is attached.
    pub durable: bool,
    /// Whether sends may share a transaction.
    pub group_commit: bool,
    /// The schema as pre-rendered compact JSON object text, inserted verbatim; `None` → null.
    pub schema_json: Option<&'a str>,
    /// URI of the plain metadata file; `None` with no log.
    pub metadata: Option<&'a str>,
    /// URI of the version hint.
    pub metadata_hint: Option<&'a str>,
    /// The stream's stable UUID; `None` with no log.
    pub stream_id: Option<&'a str>,
    /// The filter applied, as compact JSON object text inserted verbatim; `None` → null.
    pub where_json: Option<&'a str>,
    /// The exactly-once mark; the key is left out when `None`.
    pub publisher: Option<PublisherMark<'a>>,
}

impl ServerMessage for Greeting<'_> {
    /// Appends the greeting's JSON text to `out`.
    fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(256 + self.schema_json.map_or(0, str::len));
        out.extend_from_slice(b"{\"streamcast\":");
        write_u64(u64::from(PROTOCOL_VERSION), out);
        out.extend_from_slice(b",\"stream\":");
        write_str(self.stream, out);
        out.extend_from_slice(b",\"end_offset\":");
        write_opt_u64(self.end_offset, out);
        out.extend_from_slice(b",\"replay\":");
        match self.replay {
            Some((start, end)) => {
                out.push(b'[');
                write_u64(start, out);
                out.push(b',');
                write_u64(end, out);
                out.push(b']');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"durable\":");
        write_bool(self.durable, out);
        out.extend_from_slice(b",\"group_commit\":");
        write_bool(self.group_commit, out);
        out.extend_from_slice(b",\"schema\":");
        write_verbatim(self.schema_json, out);
        out.extend_from_slice(b",\"metadata\":");
        write_opt_str(self.metadata, out);
        out.extend_from_slice(b",\"metadata_hint\":");
        write_opt_str(self.metadata_hint, out);
        out.extend_from_slice(b",\"stream_id\":");
        write_opt_str(self.stream_id, out);
        out.extend_from_slice(b",\"where\":");
        write_verbatim(self.where_json, out);
        if let Some(mark) = &self.publisher {
            out.extend_from_slice(b",\"publisher\":{\"id\":");
            write_str(mark.id, out);
            out.extend_from_slice(b",\"last_seq\":");
            write_u64(mark.last_seq, out);
            out.extend_from_slice(b",\"last_offset\":");
            write_opt_u64(mark.last_offset, out);
            out.push(b'}');
        }
        out.push(b'}');
    }
}

fn write_verbatim(json: Option<&str>, out: &mut Vec<u8>) {
    match json {
        Some(text) => {
            debug_assert!(text.starts_with('{') && text.ends_with('}'));
            out.extend_from_slice(text.as_bytes());
        }
        None => out.extend_from_slice(b"null"),
    }
}
