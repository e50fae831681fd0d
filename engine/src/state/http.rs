//! Collection reads of a keyed stream over HTTP, on the shard that received the request (the
//! work is done on the state thread; this side checks the query, verifies and signs tokens).
//!
//! - `GET /v1/streams/NAME/state?where=&limit=&cursor=` — a window of at most `limit` (≤ 500,
//!   default 100) current entities whose latest row passes `where=`, in key order (a fixed order
//!   of the key values: an entity never moves across a window boundary), each
//!   `{"key":[…],"version":V,"ts":T,"row":{…}}`; then `next_cursor` while entities remain, or,
//!   on the last window, `token`: the offset of the first window, to read `/changes` from.
//! - `GET /v1/streams/NAME/changes?token=&limit=[&where=]` — what happened since the token, in
//!   offset order, at most `limit` (≤ 500, default 500): `{"op":"upsert",…}` for an entity whose
//!   latest row is in the selection, `{"op":"remove","key","version","why"}` for one removed by
//!   `remove_when` (`removed`) or whose latest row no longer matches the selection
//!   (`left_selection`); and a new `token`. A reader keeps the higher version of an entity it
//!   sees twice.
//!
//! Cursors and tokens are signed ([`crate::cursor`]) and bound to the stream, its `stream_id`,
//! the key (the order), the caller, and — carried inside, signed — the selection: a cursor
//! presented with another `where=`, or a token with a `where=` other than the one it was issued
//! for, is refused (`cursor_invalid` / `token_invalid`). A token below the horizon — the log's
//! earliest offset, or removals forgotten (the remembered removals are bounded by `max_keys`;
//! they are kept in the checkpoint, so a token survives a restart) — answers 410
//! `token_expired`: discard the copy and read `/state` again.

use corecast_net::http::query::Query;

use crate::cursor::{self, Binding, CursorError};
use crate::registry::Stream;
use crate::session::pull::{now_s, parse_limit, Refused};

use super::{Keyed, Unavailable};

/// How long a change token stays valid by the clock (the horizon usually ends it first).
const TOKEN_TTL_S: u64 = 365 * 86_400;

const KIND_CURSOR: u8 = b'c';
const KIND_TOKEN: u8 = b't';

/// What a cursor or token carries.
struct Carried {
    kind: u8,
    position: u64,
    selection: String,
    after_key: Vec<u8>,
}

impl Carried {
    fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(11 + self.selection.len() + self.after_key.len());
        p.push(self.kind);
        p.extend_from_slice(&self.position.to_be_bytes());
        p.extend_from_slice(&(self.selection.len() as u16).to_be_bytes());
        p.extend_from_slice(self.selection.as_bytes());
        p.extend_from_slice(&self.after_key);
        p
    }

    fn decode(p: &[u8]) -> Option<Carried> {
        let kind = *p.first()?;
        let position = u64::from_be_bytes(p.get(1..9)?.try_into().ok()?);
        let n = u16::from_be_bytes(p.get(9..11)?.try_into().ok()?) as usize;
        let selection = String::from_utf8(p.get(11..11 + n)?.to_vec()).ok()?;
        Some(Carried {
            kind,
            position,
            selection,
            after_key: p[11 + n..].to_vec(),
        })
    }
}

fn keyed(st: &Stream) -> Result<&Keyed, Refused> {
    st.keyed.as_ref().ok_or_else(|| {
        Refused::new(
            409,
            "not_keyed",
            format!(
                "stream {} is not keyed (no key = [...] in its config): it keeps no state; read its rows with /rows or stream_collect",
                st.cfg.name
            ),
        )
    })
}

fn unavailable(why: Unavailable) -> Refused {
    Refused {
        // a full queue or budget: retry after a while
        retry_after: matches!(why, Unavailable::Busy | Unavailable::OverBudget),
        retryable: why.retryable(),
        ..Refused::new(503, why.code(), why.message())
    }
}

/// What every cursor and token of `st` is bound to besides the caller: the order (the key).
fn order(st: &Stream) -> String {
    format!("state\n{}", st.cfg.key.join("\n"))
}

fn selection(st: &Stream, q: &Query) -> Result<Option<crate::filter::Filter>, Refused> {
    match q.get("where") {
        None => Ok(None),
        Some(w) => crate::session::conn::parse_filter(st, w)
            .map(Some)
            .map_err(|d| Refused::new(400, "bad_request", d)),
    }
}

fn sign(
    key: &cursor::CursorKey,
    b: &Binding<'_>,
    carried: &Carried,
    expires_s: u64,
) -> Result<String, Refused> {
    let payload = carried.encode();
    if payload.len() > cursor::BLOB_PAYLOAD_MAX {
        return Err(Refused::new(
            400,
            "bad_request",
            format!(
                "the selection and key take {} bytes, more than a cursor holds ({})",
                payload.len(),
                cursor::BLOB_PAYLOAD_MAX
            ),
        ));
    }
    Ok(key.sign_blob(b, &payload, expires_s))
}

fn jstr(s: &str) -> String {
    sonic_rs::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// What one window asks for: `/state`'s query, or the MCP tool `stream_state`'s arguments.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowAsk<'a> {
    /// `next_cursor` of the previous window.
    pub cursor: Option<&'a str>,
    /// Entities at most (≤ 500).
    pub limit: usize,
    /// The selection (`where=` JSON text).
    pub filter: Option<&'a str>,
}

/// `/state`'s query as a [`WindowAsk`].
pub fn window_ask(q: &Query) -> Result<WindowAsk<'_>, Refused> {
    Ok(WindowAsk {
        cursor: q.get("cursor"),
        limit: parse_limit(q, 100)?,
        filter: q.get("where"),
    })
}

/// `GET /v1/streams/NAME/state`: one window (see the module docs). The caller checked
/// `data.read`.
pub async fn window(st: &Stream, ask: WindowAsk<'_>, caller: &str) -> Result<Vec<u8>, Refused> {
    let k = keyed(st)?;
    let limit = ask.limit;
    if limit > crate::session::pull::MAX_LIMIT {
        return Err(Refused::new(
            400,
            "resource_limit_exceeded",
            format!(
                "limit={limit} is over the maximum of {} entities",
                crate::session::pull::MAX_LIMIT
            ),
        ));
    }
    let filter = match ask.filter {
        None => None,
        Some(w) => Some(
            crate::session::conn::parse_filter(st, w)
                .map_err(|d| Refused::new(400, "bad_request", d))?,
        ),
    };
    let echo = filter.as_ref().map_or("", |f| f.echo()).to_string();
    let order = order(st);
    let stream_id = st.stream_id.as_deref().unwrap_or("");
    let b = Binding {
        stream: &st.cfg.name,
        stream_id,
        filter: &order,
        caller,
    };
    let key = cursor::key();
    let now = now_s();
    let (first_at, after) = match ask.cursor.filter(|c| !c.is_empty()) {
        None => (None, None),
        Some(c) => {
            let invalid = || {
                Refused::new(
                    400,
                    "cursor_invalid",
                    "this cursor was not issued for this stream, selection (where=) and caller, or was altered",
                )
            };
            let p = key.verify_blob(&b, c, now).map_err(|e| match e {
                CursorError::Invalid => invalid(),
                CursorError::Expired => Refused::new(
                    410,
                    "cursor_expired",
                    "this cursor has expired; read the state again without one",
                ),
            })?;
            let carried = Carried::decode(&p).ok_or_else(invalid)?;
            if carried.kind != KIND_CURSOR || carried.selection != echo {
                return Err(invalid());
            }
            (Some(carried.position), Some(carried.after_key))
        }
    };
    let w = k
        .window(filter, after.clone().map(super::fold::Key::from), limit)
        .await
        .map_err(unavailable)?;
    // every window of one read hands on the first window's position: the changes since it
    // cover whatever moved while the windows were read
    let first_at = first_at.unwrap_or(w.at);
    let after_key = w.last_key.map(|k| k.to_vec()).or(after).unwrap_or_default();
    let (next_cursor, token) = if w.more {
        let c = Carried {
            kind: KIND_CURSOR,
            position: first_at,
            selection: echo.clone(),
            after_key,
        };
        (
            jstr(&sign(&key, &b, &c, now.saturating_add(key.ttl_s()))?),
            "null".to_string(),
        )
    } else {
        let t = Carried {
            kind: KIND_TOKEN,
            position: first_at,
            selection: echo.clone(),
            after_key: Vec::new(),
        };
        (
            "null".to_string(),
            jstr(&sign(&key, &b, &t, now.saturating_add(TOKEN_TTL_S))?),
        )
    };
    let mut body = format!(
        r#"{{"stream":{},"stream_id":{},"key":{},"at":{},"count":{},"entities":["#,
        jstr(&st.cfg.name),
        jstr(stream_id),
        sonic_rs::to_string(&st.cfg.key).unwrap_or_else(|_| "[]".into()),
        w.at,
        w.count
    )
    .into_bytes();
    body.extend_from_slice(&w.entities_json);
    body.extend_from_slice(
        format!(r#"],"next_cursor":{next_cursor},"token":{token}}}"#).as_bytes(),
    );
    Ok(body)
}

/// `GET /v1/streams/NAME/changes`: what happened since a token (see the module docs).
pub async fn changes(st: &Stream, q: &Query, caller: &str) -> Result<Vec<u8>, Refused> {
    let k = keyed(st)?;
    let limit = parse_limit(q, 500)?;
    let Some(token) = q.get("token").filter(|t| !t.is_empty()) else {
        return Err(Refused::new(
            400,
            "bad_request",
            "token= is required: the token of /state's last window, or of the previous /changes",
        ));
    };
    let order = order(st);
    let stream_id = st.stream_id.as_deref().unwrap_or("");
    let b = Binding {
        stream: &st.cfg.name,
        stream_id,
        filter: &order,
        caller,
    };
    let key = cursor::key();
    let now = now_s();
    let invalid = |why: &str| {
        Refused::new(
            400,
            "token_invalid",
            format!(
                "this token {why}; read the state again (GET /v1/streams/{}/state)",
                st.cfg.name
            ),
        )
    };
    let expired = |message: String| Refused::new(410, "token_expired", message);
    let p = key.verify_blob(&b, token, now).map_err(|e| match e {
        CursorError::Invalid => {
            invalid("was not issued for this stream, its key and this caller, or was altered")
        }
        CursorError::Expired => expired(format!(
            "this token is older than a token lives ({} days): discard your copy and read the state again (GET /v1/streams/{}/state), then follow the token that read returns",
            TOKEN_TTL_S / 86_400,
            st.cfg.name
        )),
    })?;
    let carried = Carried::decode(&p).ok_or_else(|| invalid("is damaged"))?;
    if carried.kind != KIND_TOKEN {
        return Err(invalid("is a window cursor, not a change token"));
    }
    if let Some(f) = selection(st, q)? {
        if f.echo() != carried.selection {
            return Err(invalid(&format!(
                "was issued for the selection {}, not {}",
                if carried.selection.is_empty() {
                    "(everything)"
                } else {
                    &carried.selection
                },
                f.echo()
            )));
        }
    }
    let filter = if carried.selection.is_empty() {
        None
    } else {
        Some(
            crate::session::conn::parse_filter(st, &carried.selection)
                .map_err(|_| invalid("names a selection this stream no longer takes"))?,
        )
    };
    let c = k
        .changes(filter, carried.position, limit)
        .await
        .map_err(unavailable)?
        .map_err(|e| expired(e.message(&st.cfg.name)))?;
    let t = Carried {
        kind: KIND_TOKEN,
        position: c.next,
        selection: carried.selection,
        after_key: Vec::new(),
    };
    let token = sign(&key, &b, &t, now.saturating_add(TOKEN_TTL_S))?;
    let mut body = format!(
        r#"{{"stream":{},"stream_id":{},"at":{},"count":{},"changes":["#,
        jstr(&st.cfg.name),
        jstr(stream_id),
        c.at,
        c.count
    )
    .into_bytes();
    body.extend_from_slice(&c.changes_json);
    body.extend_from_slice(format!(r#"],"token":{}}}"#, jstr(&token)).as_bytes());
    Ok(body)
}
