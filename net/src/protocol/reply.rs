//! A publisher's reply (PROTOCOL.md §7): exactly one text frame per publish frame, in order.
//!
//! `{"ok":[1,2]}`, `{"ok":[1],"dup":1}`, `{"ok":[null]}`, `{"error":"gap","expected":5,"got":9}`,
//! `{"error":"bad_frame","detail":…}`, `{"error":"rejected","detail":…}`,
//! `{"error":"commit_failed","detail":…}`.

use crate::protocol::json_text::{write_opt_u64, write_str, write_u64};
use crate::protocol::ServerMessage;
use std::ops::Range;

/// The offsets an `ok` reply lists, one per row sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offsets<'a> {
    /// Consecutive offsets `start..end` (a plain commit): `[start,…,end-1]`.
    Range(Range<u64>),
    /// `n` nulls: rows accepted on a stream with no log.
    Nulls(usize),
    /// Any list, nulls allowed (exactly-once duplicates whose offsets were forgotten).
    List(&'a [Option<u64>]),
}

impl Offsets<'_> {
    /// How many rows the list covers.
    pub fn len(&self) -> usize {
        match self {
            Offsets::Range(r) => (r.end.saturating_sub(r.start)) as usize,
            Offsets::Nulls(n) => *n,
            Offsets::List(l) => l.len(),
        }
    }

    /// Whether the list is empty (never the case in a valid reply).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One reply to one publish frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// The rows landed (or were already there): `{"ok":[…]}`, plus `"dup":n` when the first
    /// `n` rows were duplicates (`dup` 0 leaves the key out).
    Ok {
        /// One offset per row, in row order.
        offsets: Offsets<'a>,
        /// How many leading rows were exactly-once duplicates.
        dup: u64,
    },
    /// `{"error":"gap","expected":E,"got":G}`: an exactly-once seq past the next; nothing
    /// appended.
    Gap {
        /// The seq the broker expects next.
        expected: u64,
        /// The seq the frame carried.
        got: u64,
    },
    /// `{"error":"bad_frame","detail":…}`: the frame is not a publish frame.
    BadFrame {
        /// What is wrong with it.
        detail: &'a str,
    },
    /// `{"error":"rejected","detail":…}`: a row broke the schema.
    Rejected {
        /// The validator's message naming the column.
        detail: &'a str,
    },
    /// `{"error":"commit_failed","detail":…}`: the commit itself failed; the client retries.
    CommitFailed {
        /// What failed.
        detail: &'a str,
    },
}

impl ServerMessage for Reply<'_> {
    /// Appends the reply's JSON text to `out`.
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Ok { offsets, dup } => {
                debug_assert!(*dup <= offsets.len() as u64);
                out.extend_from_slice(b"{\"ok\":[");
                match offsets {
                    Offsets::Range(range) => {
                        for (i, offset) in range.clone().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_u64(offset, out);
                        }
                    }
                    Offsets::Nulls(n) => {
                        for i in 0..*n {
                            if i > 0 {
                                out.push(b',');
                            }
                            out.extend_from_slice(b"null");
                        }
                    }
                    Offsets::List(list) => {
                        for (i, offset) in list.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_opt_u64(*offset, out);
                        }
                    }
                }
                out.push(b']');
                if *dup > 0 {
                    out.extend_from_slice(b",\"dup\":");
                    write_u64(*dup, out);
                }
                out.push(b'}');
            }
            Reply::Gap { expected, got } => {
                out.extend_from_slice(b"{\"error\":\"gap\",\"expected\":");
                write_u64(*expected, out);
                out.extend_from_slice(b",\"got\":");
                write_u64(*got, out);
                out.push(b'}');
            }
            Reply::BadFrame { detail } => error_detail("bad_frame", detail, out),
            Reply::Rejected { detail } => error_detail("rejected", detail, out),
            Reply::CommitFailed { detail } => error_detail("commit_failed", detail, out),
        }
    }
}

fn error_detail(error: &str, detail: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"error\":");
    write_str(error, out);
    out.extend_from_slice(b",\"detail\":");
    write_str(detail, out);
    out.push(b'}');
}
