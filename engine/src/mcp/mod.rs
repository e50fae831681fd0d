//! A Model Context Protocol endpoint: the catalog model's bounded tools at `POST /mcp`.
//!
//! Streamable HTTP (MCP 2025-06-18, also 2025-03-26 and 2024-11-05), JSON-RPC 2.0, by hand —
//! the surface is five methods and no MCP crate runs on monoio: a POST carries one message or
//! a batch ([`jsonrpc`]); requests are answered in one `application/json` body (the spec lets a
//! server answer a request that does not stream with plain JSON, whatever the client's
//! `Accept`), a body of notifications and replies only with 202. `initialize` negotiates the
//! version (the client's when we speak it, else our newest) and issues an `Mcp-Session-Id`
//! ([`session`]); every other request must carry it (400 without, 404 when it is gone);
//! `DELETE /mcp` ends it; `GET /mcp` (a server-to-client stream) answers 405: corecast sends
//! no server-initiated messages.
//!
//! Methods: `initialize`, `ping`, `tools/list`, `tools/call` ([`tools`]); notifications
//! (`notifications/initialized`, `notifications/cancelled`) are taken and ignored.
//!
//! Bounds: a body of at most [`BODY_BYTES_MAX`] (413), read within [`BODY_READ_TIMEOUT`] (408);
//! a batch of at most [`jsonrpc::BATCH_MAX`] messages; the waits of one request's long polls add
//! up to at most 60 s; each tool's own bounds ([`tools`]). Nothing here starts a task that
//! outlives the request.
//!
//! Auth: the gate lets `/mcp` through to any authenticated caller ([`crate::auth::http::need`]);
//! each tool then checks `data.read` on its stream with the request's [`Identity`], and a session
//! is bound to the principal that opened it. A request from a browser page whose `Origin` is
//! not on `allowed_origins` is refused 403 (the spec's defence against DNS rebinding). Runs on
//! the accepting shard.

pub mod jsonrpc;
pub mod schema;
pub mod session;
pub mod tools;

use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

use corecast_net::http::request::Request;
use corecast_net::http::response::{json_error_body, ResponseHead};
use corecast_net::rt::{self, ReadHalf, WriteHalf};
use serde_json::{json, Value};

use crate::auth::live::Guard;
use crate::auth::Identity;
use crate::session::pull::{self, Client};
use crate::shard::ShardCtx;

use jsonrpc::Message;

/// The path of the endpoint.
pub const PATH: &str = "/mcp";
/// Protocol versions spoken, newest first.
pub const VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];
/// Largest request body.
pub const BODY_BYTES_MAX: usize = 1 << 20;
/// How long the body may take to arrive.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `req` is for the MCP endpoint.
pub fn wants(req: &Request) -> bool {
    req.path == PATH
}

fn respond(status: u16, body: &[u8], extra: &[(&str, &str)]) -> Vec<u8> {
    let mut head = ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .header("access-control-allow-origin", "*")
        .header(
            "access-control-expose-headers",
            "mcp-session-id, mcp-protocol-version",
        );
    for (k, v) in extra {
        head = head.header(k, v);
    }
    head.finish(body)
}

fn http_error(status: u16, code: &str, message: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    respond(
        status,
        &json_error_body(code, message, status >= 500),
        extra,
    )
}

/// An HTTP refusal whose body is a JSON-RPC error with a `null` id (what the spec suggests
/// for a message the server does not accept).
fn rpc_refusal(status: u16, code: i64, message: &str) -> Vec<u8> {
    let body = jsonrpc::error(&jsonrpc::Id::null(), code, message, None);
    respond(status, body.as_bytes(), &[])
}

/// Serves one MCP request to its end.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    req: &Request,
    peer: Option<IpAddr>,
    mut rd: ReadHalf,
    mut wr: WriteHalf,
    who: &Identity,
    guard: Option<Guard>,
    held: Vec<u8>,
) {
    let origins = ctx.shared.auth.origins();
    let cors = origins.cors_value(req).map(str::to_string);
    let refused_origin = req.header("origin").is_some_and(|o| !origins.allows(o));
    drop(origins);
    let mut held = held;
    let resp = if refused_origin {
        http_error(
            403,
            "forbidden_origin",
            "an MCP request from a page of this origin is not allowed here (allowed_origins)",
            &[],
        )
    } else {
        match answer(
            ctx,
            req,
            peer,
            &mut rd,
            &mut wr,
            who,
            guard.as_ref(),
            &mut held,
        )
        .await
        {
            Some(r) => r,
            None => return, // the client went while its poll waited
        }
    };
    let resp = crate::auth::origin::apply_cors(resp, cors.as_deref());
    crate::session::ws_io::answer_then_linger(req, &mut rd, &mut wr, resp).await;
}

#[allow(clippy::too_many_arguments)]
async fn answer(
    ctx: &Rc<ShardCtx>,
    req: &Request,
    peer: Option<IpAddr>,
    rd: &mut ReadHalf,
    wr: &mut WriteHalf,
    who: &Identity,
    guard: Option<&Guard>,
    held: &mut Vec<u8>,
) -> Option<Vec<u8>> {
    let allow = [("allow", "POST, DELETE")];
    let session_id = req.header("mcp-session-id").map(str::to_string);
    match req.method.as_str() {
        "POST" => {}
        "DELETE" => {
            return Some(match session_id {
                None => http_error(400, "bad_request", "DELETE /mcp needs the Mcp-Session-Id header of the session to end", &[]),
                Some(id) if session::end(&id, who.name()) => respond(200, b"{}", &[]),
                Some(_) => http_error(404, "not_found", "no such session (ended, expired or never issued); initialize a new one", &[]),
            });
        }
        "GET" => {
            return Some(http_error(
                405,
                "method_not_allowed",
                "this server sends no server-initiated messages: there is no stream to GET; POST JSON-RPC requests to /mcp",
                &allow,
            ))
        }
        m => {
            return Some(http_error(
                405,
                "method_not_allowed",
                &format!("{} is not taken here: POST JSON-RPC messages to /mcp (DELETE ends a session)", m.chars().take(16).collect::<String>()),
                &allow,
            ))
        }
    }
    let json_body = req.header("content-type").is_some_and(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/json")
    });
    if !json_body {
        return Some(http_error(
            415,
            "unsupported_media_type",
            "an MCP message is sent with Content-Type: application/json",
            &[],
        ));
    }
    if let Some(accept) = req.header("accept") {
        let a = accept.to_ascii_lowercase();
        if !(a.contains("application/json") || a.contains("*/*") || a.contains("application/*")) {
            return Some(http_error(406, "not_acceptable", "MCP answers are application/json: send Accept: application/json, text/event-stream", &[]));
        }
    }
    if let Some(v) = req.header("mcp-protocol-version") {
        if !VERSIONS.contains(&v) {
            return Some(http_error(
                400,
                "unsupported_protocol_version",
                &format!(
                    "MCP-Protocol-Version {} is not spoken here; this server speaks {}",
                    v.chars().take(32).collect::<String>(),
                    VERSIONS.join(", ")
                ),
                &[],
            ));
        }
    }
    if req.header("content-length").is_none() {
        return Some(http_error(
            411,
            "length_required",
            "an MCP request needs a content-length (chunked bodies are not taken)",
            &[],
        ));
    }
    let length = req.content_length;
    if length > BODY_BYTES_MAX as u64 {
        return Some(http_error(
            413,
            "payload_too_large",
            &format!("a body of {length} bytes is over the maximum of {BODY_BYTES_MAX} bytes"),
            &[],
        ));
    }
    let length = length as usize;
    if req
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        let (res, _) = wr
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec())
            .await;
        res.ok()?;
    }
    let mut body = std::mem::take(held);
    while body.len() < length {
        let room = (length - body.len()).min(64 << 10);
        match rt::timeout(BODY_READ_TIMEOUT, rd.read_into(body, room)).await {
            Some((Ok(n), back)) if n > 0 => body = back,
            Some(_) => {
                return Some(http_error(
                    400,
                    "bad_request",
                    "the connection ended before the whole body arrived",
                    &[],
                ))
            }
            None => {
                return Some(http_error(
                    408,
                    "request_timeout",
                    &format!("no body bytes for {} s", BODY_READ_TIMEOUT.as_secs()),
                    &[],
                ))
            }
        }
    }
    // bytes past the body are held, as a long poll holds what arrives while it waits
    *held = body.split_off(length);
    let (messages, batch) = match jsonrpc::decode(&body) {
        Ok(x) => x,
        Err(e) => return Some(respond(400, e.reply().as_bytes(), &[])),
    };
    drop(body);
    let initialize = messages
        .iter()
        .any(|m| matches!(m, Message::Request { method, .. } if method == "initialize"));
    if initialize {
        if batch {
            return Some(rpc_refusal(
                400,
                jsonrpc::INVALID_REQUEST,
                "initialize must not be part of a batch",
            ));
        }
        let Some(Message::Request { id, params, .. }) = messages.into_iter().next() else {
            unreachable!("one message, the initialize request")
        };
        return Some(initialize_reply(&id, &params, who));
    }
    let initialize_note = messages
        .iter()
        .any(|m| matches!(m, Message::Notification { method } if method == "initialize"));
    if initialize_note {
        return Some(rpc_refusal(
            400,
            jsonrpc::INVALID_REQUEST,
            "initialize must be a request with an id (it was sent as a notification, without one): the reply carries the Mcp-Session-Id",
        ));
    }
    let only_notes = messages
        .iter()
        .all(|m| matches!(m, Message::Notification { .. } | Message::Reply));
    let Some(id) = session_id else {
        return Some(rpc_refusal(
            400,
            jsonrpc::INVALID_REQUEST,
            "Mcp-Session-Id is required: send the id initialize returned (or initialize first)",
        ));
    };
    let Some(sess) = session::find(&id, who.name()) else {
        return Some(rpc_refusal(
            404,
            jsonrpc::INVALID_REQUEST,
            "no such session (ended, expired or never issued); initialize a new one",
        ));
    };
    if only_notes {
        return Some(
            ResponseHead::new(202)
                .header("cache-control", "no-store")
                .header("access-control-allow-origin", "*")
                .finish(b""),
        );
    }
    let mut wait_left_s = pull::MAX_WAIT_S;
    let mut replies = Vec::with_capacity(messages.len());
    for m in messages {
        let reply = match m {
            Message::Notification { .. } | Message::Reply => continue,
            Message::Invalid { id, why } => jsonrpc::error(&id, jsonrpc::INVALID_REQUEST, &why, None),
            Message::Request { id, method, params } => match method.as_str() {
                "ping" => jsonrpc::result(&id, "{}"),
                "tools/list" => jsonrpc::result(&id, &tools::list().to_string()),
                "tools/call" => {
                    let client = Client {
                        peer,
                        who,
                        guard,
                        rd: &mut *rd,
                        held: &mut *held,
                    };
                    match tools::call(ctx, &params, client, &mut wait_left_s).await {
                        Ok(tools::Called::Result(r)) => jsonrpc::result(&id, &r),
                        Ok(tools::Called::ClientGone) => return None,
                        Err(e) => {
                            let (code, message, data) = e.rpc();
                            jsonrpc::error(&id, code, &message, Some(data))
                        }
                    }
                }
                other => jsonrpc::error(
                    &id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &format!("method not found: {} (this server has initialize, ping, tools/list, tools/call)", other.chars().take(64).collect::<String>()),
                    None,
                ),
            },
        };
        replies.push(reply);
    }
    let body = if batch {
        format!("[{}]", replies.join(","))
    } else {
        replies.pop().unwrap_or_default()
    };
    Some(respond(
        200,
        body.as_bytes(),
        &[("mcp-protocol-version", sess.version)],
    ))
}

/// The version to speak: the client's when we speak it, else our newest (the spec's rule).
pub fn negotiate(asked: Option<&str>) -> &'static str {
    asked
        .and_then(|a| VERSIONS.iter().find(|v| **v == a))
        .copied()
        .unwrap_or(VERSIONS[0])
}

fn initialize_reply(id: &jsonrpc::Id, params: &Value, who: &Identity) -> Vec<u8> {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        let why = match params.get("protocolVersion") {
            None => "initialize needs params.protocolVersion, a string such as \"2025-06-18\""
                .to_string(),
            Some(v) => format!(
                "params.protocolVersion must be a string such as \"2025-06-18\", not {}",
                match v {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::Array(_) => "an array",
                    Value::Object(_) => "an object",
                    Value::String(_) => unreachable!("a string is taken"),
                }
            ),
        };
        let e = jsonrpc::error(id, jsonrpc::INVALID_PARAMS, &why, None);
        return respond(200, e.as_bytes(), &[]);
    };
    let version = negotiate(Some(asked));
    let sid = session::open(who.name(), version);
    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "corecast", "title": "corecast stream broker", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Bounded reads of corecast streams. stream_catalog lists the streams you may read; stream_peek shows the latest rows; stream_collect pages through a stream with next_cursor; stream_subscribe waits (at most 60 s) for new rows after a cursor. Every row is [offset, ts_us, row]; every result is finite (at most 500 rows) and cites end_offset and, for windows, next_offset and next_cursor."
    });
    let body = jsonrpc::result(id, &result.to_string());
    respond(
        200,
        body.as_bytes(),
        &[("mcp-session-id", &sid), ("mcp-protocol-version", version)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_the_clients_version_or_our_newest() {
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate(Some("2099-01-01")), "2025-06-18");
        assert_eq!(negotiate(None), "2025-06-18");
    }
}
