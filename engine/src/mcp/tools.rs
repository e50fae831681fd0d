//! The catalog model's five tools, each over the pull API's finite contract.
//!
//! | tool | does | bound |
//! | --- | --- | --- |
//! | `stream_catalog` | the catalog (streams the caller may read), or one entry | the streams declared |
//! | `stream_peek` | the latest rows | `limit` ≤ 500, ≤ 4 MiB |
//! | `stream_collect` | a window from a cursor (or `from`) with `next_cursor` | `limit` ≤ 500, ≤ 4 MiB, no wait |
//! | `stream_state` | a collection window of a keyed stream ([`crate::state::http::window`]: entities in key order, `next_cursor`, then a `token` for `GET …/changes`) | `limit` ≤ 500, ≤ 4 MiB |
//! | `stream_subscribe` | one long poll: the rows after a cursor, waiting for one to commit | `wait_s` ≤ 60, `limit` ≤ 500 |
//!
//! The work is [`pull`]'s own functions ([`pull::catalog`], [`pull::latest`], [`pull::rows`]):
//! the same windows, the same signed cursors (bound to the stream, its stream_id, the filter,
//! the client's address and principal — a cursor from `GET /v1/streams/NAME/rows` goes on here
//! and back), the same long-poll caps. Arguments are checked against each tool's
//! `inputSchema` ([`super::schema`]) before anything runs; a bound passed is refused, never
//! clamped. A tool needs `data.read` on its stream, checked here with the request's
//! [`Identity`], before the stream is looked up.

use serde_json::{json, Value};

use crate::auth::{Action, Identity};
use crate::session::pull::{self, Client, Polled, Refused, RowsAsk, MAX_LIMIT, MAX_WAIT_S};
use crate::shard::ShardCtx;

use super::schema::{self, Invalid};

/// The tools' names, in `tools/list` order.
pub const NAMES: [&str; 5] = [
    "stream_catalog",
    "stream_peek",
    "stream_collect",
    "stream_state",
    "stream_subscribe",
];

fn stream_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "description": "the stream's name (stream_catalog lists them)"})
}

fn limit_prop(default: usize) -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": MAX_LIMIT, "default": default,
           "description": format!("at most this many rows (≤ {MAX_LIMIT}; a page also ends after about 4 MiB of rows)")})
}

fn where_prop() -> Value {
    json!({"type": "object", "description": "a filter, as where= of the pull API: {\"column\": value} for equality, {\"column\": [v1, v2]} for membership; several columns AND"})
}

fn cursor_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": "next_cursor of an earlier result (of this tool, stream_subscribe or the pull API's /rows, with the same where)"})
}

fn state_cursor_prop() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": "next_cursor of an earlier stream_state result (or of GET /v1/streams/NAME/state) with the same where; a row cursor (stream_collect, stream_subscribe, /rows) is refused"})
}

fn from_prop() -> Value {
    json!({"type": ["string", "integer"], "minimum": 0, "description": "where to start without a cursor: \"earliest\" (default), \"latest\" (from now) or an offset (0 = the earliest held)"})
}

/// A tool's `inputSchema`.
pub fn input_schema(name: &str) -> Option<Value> {
    let object = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});
    Some(match name {
        "stream_catalog" => object(json!({"stream": stream_prop()}), &[]),
        "stream_peek" => object(
            json!({"stream": stream_prop(), "limit": limit_prop(10)}),
            &["stream"],
        ),
        "stream_collect" => object(
            json!({"stream": stream_prop(), "cursor": cursor_prop(), "from": from_prop(),
                   "limit": limit_prop(100), "where": where_prop()}),
            &["stream"],
        ),
        "stream_state" => object(
            json!({"stream": stream_prop(), "cursor": state_cursor_prop(), "limit": limit_prop(100),
                   "where": where_prop()}),
            &["stream"],
        ),
        "stream_subscribe" => object(
            json!({"stream": stream_prop(), "cursor": cursor_prop(), "from": from_prop(),
                   "limit": limit_prop(100), "where": where_prop(),
                   "wait_s": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S, "default": 30,
                              "description": format!("wait this long for a row when none is new (≤ {MAX_WAIT_S} s)")}}),
            &["stream"],
        ),
        _ => return None,
    })
}

fn description(name: &str) -> &'static str {
    match name {
        "stream_catalog" => "The catalog: every stream you may read, with its schema, durability, stream_id, end_offset (the next offset to be assigned), earliest_offset and limits; with stream, that one entry.",
        "stream_peek" => "The latest rows of a stream (at most 500), each as [offset, ts_us, row], with end_offset.",
        "stream_collect" => "A window of at most 500 rows from a cursor (or from an offset, earliest or latest), each as [offset, ts_us, row], with next_offset, end_offset and next_cursor to continue; status gap names the missing offsets. Returns at once.",
        "stream_state" => "A window of the current entity per key of a keyed stream (collection read), ordered by key, each {key, version, ts, row}, with next_cursor to continue and, on the last window, a token for GET /v1/streams/NAME/changes. A stream without key = [...] answers not_keyed.",
        "stream_subscribe" => "One bounded long poll: the rows after a cursor, waiting up to wait_s (at most 60 s) for one to commit when none is new; at most 500 rows, with next_cursor to poll again.",
        _ => "",
    }
}

/// The `tools/list` result.
pub fn list() -> Value {
    let tools: Vec<Value> = NAMES
        .iter()
        .map(|n| {
            json!({
                "name": n,
                "title": n.replace('_', " "),
                "description": description(n),
                "inputSchema": input_schema(n),
                "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": n != &"stream_subscribe", "openWorldHint": false}
            })
        })
        .collect();
    json!({"tools": tools})
}

/// A `tools/call` the protocol refuses (a JSON-RPC error, not a tool result).
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// No tool of that name.
    UnknownTool(String),
    /// `params` are not `{name, arguments}`.
    BadParams(String),
    /// An argument its schema refuses.
    Invalid(Invalid),
    /// The waits of one batch passed [`MAX_WAIT_S`].
    WaitBudget {
        /// Seconds asked.
        asked_s: f64,
        /// Seconds left of the batch's budget.
        left_s: f64,
    },
}

impl CallError {
    /// The JSON-RPC error: code, message and data.
    pub fn rpc(&self) -> (i64, String, Value) {
        use super::jsonrpc::INVALID_PARAMS;
        match self {
            CallError::UnknownTool(n) => (
                INVALID_PARAMS,
                format!("unknown tool: {n} (tools/list names them)"),
                json!({"code": "unknown_tool", "tools": NAMES}),
            ),
            CallError::BadParams(why) => (
                INVALID_PARAMS,
                why.clone(),
                json!({"code": "invalid_params"}),
            ),
            CallError::Invalid(inv) => {
                let mut data = json!({"code": inv.code(), "argument": inv.argument()});
                if let Invalid::OverMaximum { maximum, .. } = inv {
                    data["maximum"] = json!(maximum);
                }
                (INVALID_PARAMS, inv.to_string(), data)
            }
            CallError::WaitBudget { asked_s, left_s } => (
                INVALID_PARAMS,
                format!("wait_s: {asked_s} s is over the {left_s} s left of this batch (the wait_s of one request's calls add up to at most {MAX_WAIT_S} s)"),
                json!({"code": "resource_limit_exceeded", "argument": "wait_s", "maximum": left_s.floor()}),
            ),
        }
    }
}

/// What a tool call came to.
#[derive(Debug)]
pub enum Called {
    /// The `tools/call` result (`isError` false or true), as JSON text.
    Result(String),
    /// The client closed its connection while the poll waited: answer nothing.
    ClientGone,
}

/// A tool result carrying `body` (the pull API's JSON) twice: as the text content and as
/// `structuredContent`, the same bytes embedded as they are — never parsed and printed again,
/// which would change a number (a float of 17 significant digits, an integer past 2^53).
fn carrying(body: &[u8], is_error: bool) -> String {
    let text = String::from_utf8_lossy(body);
    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    let structured = if is_json { text.as_ref() } else { "null" };
    format!(
        r#"{{"content":[{{"type":"text","text":{}}}],"structuredContent":{structured},"isError":{is_error}}}"#,
        Value::String(text.to_string())
    )
}

fn ok(body: &[u8]) -> String {
    carrying(body, false)
}

fn tool_error(r: &Refused) -> String {
    carrying(&r.body(), true)
}

/// The stream `name`, when `who` may read it: the grant first, so that a refused caller
/// learns nothing about which streams exist (as the gate does for `/v1/streams/NAME`).
fn readable(
    ctx: &ShardCtx,
    who: &Identity,
    name: &str,
) -> Result<std::sync::Arc<crate::registry::Stream>, Refused> {
    if !who.allows(Action::DataRead, name) {
        return Err(Refused::new(
            403,
            "forbidden",
            format!(
                "principal {} needs the data.read grant on stream {name}",
                who.name().unwrap_or("")
            ),
        ));
    }
    ctx.shared
        .registry
        .load()
        .get(name)
        .cloned()
        .ok_or_else(|| Refused::new(404, "not_found", format!("no such stream: {name}")))
}

/// Runs `tools/call` with `params`. `wait_left_s` is what remains of the request's wait
/// budget ([`MAX_WAIT_S`] per request, batch or not); a long poll spends its declared
/// `wait_s` from it (whether it waited that long or not), so two polls of 30 s fit in one
/// batch and a third of any wait does not.
pub async fn call(
    ctx: &ShardCtx,
    params: &Value,
    client: Client<'_>,
    wait_left_s: &mut f64,
) -> Result<Called, CallError> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(CallError::BadParams(
            "tools/call needs params.name, a tool's name".into(),
        ));
    };
    let Some(schema) = input_schema(name) else {
        return Err(CallError::UnknownTool(name.chars().take(64).collect()));
    };
    let args = params.get("arguments");
    schema::check(&schema, args).map_err(CallError::Invalid)?;
    let empty = json!({});
    let args = args.filter(|a| a.is_object()).unwrap_or(&empty);
    let arg_str = |k: &str| args.get(k).and_then(Value::as_str);
    let limit = |default: usize| {
        args.get("limit")
            .and_then(Value::as_f64)
            .map_or(default, |n| n as usize)
    };
    let who = client.who;
    let stream = arg_str("stream");
    let out = match name {
        "stream_catalog" => match stream {
            None => Ok(pull::catalog(ctx, who).into_bytes()),
            Some(s) => readable(ctx, who, s).map(|st| pull::entry_json(&st).into_bytes()),
        },
        "stream_peek" => match readable(ctx, who, stream.unwrap_or("")) {
            Ok(st) => pull::latest(ctx, &st, limit(10)).await,
            Err(e) => Err(e),
        },
        "stream_state" => match readable(ctx, who, stream.unwrap_or("")) {
            Err(e) => Err(e),
            Ok(st) => {
                let where_text = args.get("where").map(Value::to_string);
                let ask = crate::state::http::WindowAsk {
                    cursor: arg_str("cursor"),
                    limit: limit(100),
                    filter: where_text.as_deref(),
                };
                let caller = pull::caller_of(client.peer, who);
                crate::state::http::window(&st, ask, &caller).await
            }
        },
        "stream_collect" | "stream_subscribe" => {
            let wait_s = if name == "stream_subscribe" {
                args.get("wait_s").and_then(Value::as_f64).unwrap_or(30.0)
            } else {
                0.0
            };
            if wait_s > *wait_left_s {
                return Err(CallError::WaitBudget {
                    asked_s: wait_s,
                    left_s: *wait_left_s,
                });
            }
            let where_text = args.get("where").map(Value::to_string);
            let from_text = args.get("from").map(|f| match f {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            match readable(ctx, who, stream.unwrap_or("")) {
                Err(e) => Err(e),
                Ok(st) => {
                    let ask = RowsAsk {
                        cursor: arg_str("cursor"),
                        from: from_text.as_deref(),
                        limit: limit(100),
                        wait_s,
                        filter: where_text.as_deref(),
                    };
                    *wait_left_s -= wait_s;
                    match pull::rows(ctx, &st, ask, client).await {
                        Ok(Polled::Page(body)) => Ok(body),
                        Ok(Polled::ClientGone) => return Ok(Called::ClientGone),
                        // the pull API's message names /latest: here the tool is stream_peek
                        Err(mut e) if e.code == "not_durable" => {
                            e.message = format!(
                                "stream {} keeps no log to page through: stream_peek shows its latest rows (SSE or WebSocket follow it)",
                                st.cfg.name
                            );
                            Err(e)
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        }
        _ => unreachable!("input_schema knows exactly the names in NAMES"),
    };
    Ok(Called::Result(match out {
        Ok(body) => ok(&body),
        Err(e) => tool_error(&e),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(v: &Value, path: &str) {
        let Some(m) = v.as_object() else { return };
        for (k, sub) in m {
            assert!(
                schema::KEYWORDS.contains(&k.as_str()),
                "{path}: keyword {k} is not one the validator checks"
            );
            if k == "properties" {
                for (p, ps) in sub.as_object().expect("properties is an object") {
                    walk(ps, &format!("{path}.{p}"));
                }
            }
        }
    }

    #[test]
    fn every_schema_uses_only_checked_keywords() {
        for n in NAMES {
            let s = input_schema(n).expect(n);
            assert_eq!(s["additionalProperties"], json!(false), "{n}");
            walk(&s, n);
        }
        assert_eq!(list()["tools"].as_array().map(Vec::len), Some(5));
        assert!(input_schema("stream_nope").is_none());
    }
}
