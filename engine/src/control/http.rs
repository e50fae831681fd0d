//! The shard's side of `/control/v1`: route the request, check what its head decides, read its
//! bounded body, hand a [`Call`] to the control thread and write back its [`Answer`].
//!
//! Checks in order, each with its status and `code`: the switch (403 `control_disabled`), the
//! path (404 `not_found`), the method (405 `method_not_allowed`); for a `PUT` or the `POST` of a
//! migration then the content
//! type (415 `unsupported_media_type`), the `Idempotency-Key` (428 `idempotency_key_required`,
//! 400 `bad_request`), the length (411 `length_required`, 413 `payload_too_large` over `[control]
//! max_body_bytes`, before any of the body is read), the body within 30 s (408); then a place in
//! the control thread's queue (503 `busy`, `Retry-After: 1`). The grant was checked by the gate
//! before any of this (`control.read` for GET, `control.mutate` for PUT, `control.migrate` for
//! the POST of a migration, on `"*"`).

use std::rc::Rc;
use std::time::Duration;

use corecast_net::http::request::Request;
use corecast_net::rt::{self, ReadHalf, WriteHalf};

use super::{valid_key, Answer, Call, ControlMsg, Route, IDEMPOTENCY_KEY_BYTES_MAX};
use crate::shard::ShardCtx;

/// The path prefix every control request starts with.
pub const PREFIX: &str = "/control/v1";

/// How long a client may take between two reads of its body.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `path` is the control API's.
pub fn wants(path: &str) -> bool {
    path == PREFIX || path.starts_with("/control/v1/")
}

/// What `path` addresses, `None` for no control resource.
pub fn route(path: &str) -> Option<Route> {
    let rest = path.strip_prefix(PREFIX)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [""] => Some(Route::Root),
        ["", "streams"] => Some(Route::Streams),
        ["", "streams", name] if !name.is_empty() => Some(Route::Stream(name.to_string())),
        ["", "streams", name, "desired"] if !name.is_empty() => {
            Some(Route::Desired(name.to_string()))
        }
        ["", "streams", name, "migrations"] if !name.is_empty() => {
            Some(Route::Migrations(name.to_string()))
        }
        ["", "operations", id] if !id.is_empty() => Some(Route::Operation(id.to_string())),
        _ => None,
    }
}

/// Whether `path` is `/control/v1/streams/{name}/migrations` (its POST needs `control.migrate`).
pub fn is_migration(path: &str) -> bool {
    path.strip_prefix("/control/v1/streams/")
        .and_then(|r| r.strip_suffix("/migrations"))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// The methods `route` takes.
fn allowed(route: &Route) -> &'static str {
    match route {
        Route::Root | Route::Streams | Route::Operation(_) => "GET, HEAD",
        Route::Stream(_) => "GET, HEAD, PUT",
        Route::Desired(_) => "PUT",
        Route::Migrations(_) => "POST",
    }
}

/// The settings the shard side needs (`[control]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Whether the API is served (`[auth]` configured, or `[control] enabled = true`).
    pub on: bool,
    /// Whether `[auth]` is configured (the refusal's message says which switch is missing).
    pub auth: bool,
    /// Largest mutation body in bytes (`[control] max_body_bytes`).
    pub max_body_bytes: usize,
}

/// The answer to a request the shard refuses itself (the head decides it).
fn refuse(status: u16, code: &str, message: &str) -> Vec<u8> {
    Answer::error(status, code, message).response()
}

/// Checks a request's head; the route and whether it mutates, or the refusal.
fn check(req: &Request, settings: &Settings) -> Result<(Route, bool), Vec<u8>> {
    if !settings.on {
        return Err(refuse(
            403,
            "control_disabled",
            "the control API is off on this broker: it has no [auth] section; configure [auth] (control.read, control.mutate grants) or set [control] enabled = true to serve it without authentication",
        ));
    }
    let Some(route) = route(&req.path) else {
        return Err(refuse(
            404,
            "not_found",
            "no such control resource: see GET /control/v1 (streams, streams/{name}, streams/{name}/desired, streams/{name}/migrations, operations/{id})",
        ));
    };
    let put = match req.method.as_str() {
        "GET" | "HEAD" if !matches!(route, Route::Desired(_) | Route::Migrations(_)) => false,
        "PUT" if matches!(route, Route::Stream(_) | Route::Desired(_)) => true,
        "POST" if matches!(route, Route::Migrations(_)) => true,
        m => {
            let allow = allowed(&route);
            let body = Answer::error(
                405,
                "method_not_allowed",
                &format!("{m} is not taken here; this resource takes {allow}"),
            );
            let mut resp = body.response();
            // Allow: inserted after the status line
            let at = resp
                .windows(2)
                .position(|w| w == b"\r\n")
                .map_or(0, |p| p + 2);
            let line = format!("allow: {allow}\r\n");
            resp.splice(at..at, line.into_bytes());
            return Err(resp);
        }
    };
    if !put {
        return Ok((route, false));
    }
    for name in ["content-type", "idempotency-key"] {
        if req.headers_all(name).count() > 1 {
            return Err(refuse(
                400,
                "bad_request",
                &format!("{name} is sent more than once; a control mutation takes exactly one"),
            ));
        }
    }
    let json_type = req.header("content-type").is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json_type {
        return Err(refuse(
            415,
            "unsupported_media_type",
            "a control mutation's body is JSON: send Content-Type: application/json",
        ));
    }
    match req.header("idempotency-key") {
        None => {
            return Err(refuse(
                428,
                "idempotency_key_required",
                "a control mutation needs an Idempotency-Key header (1 to 128 printable ASCII characters, no spaces), the same on every retry",
            ))
        }
        Some(k) if !valid_key(k) => {
            return Err(refuse(
                400,
                "bad_request",
                &format!("an Idempotency-Key is 1 to {IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters without spaces; got {} bytes", k.len()),
            ))
        }
        Some(_) => {}
    }
    if req.header("content-length").is_none() {
        return Err(refuse(
            411,
            "length_required",
            "a control mutation needs a content-length",
        ));
    }
    if req.content_length > settings.max_body_bytes as u64 {
        return Err(refuse(
            413,
            "payload_too_large",
            &format!(
                "a body of {} bytes is over the control limit of {} bytes ([control] max_body_bytes)",
                req.content_length, settings.max_body_bytes
            ),
        ));
    }
    Ok((route, true))
}

/// Serves one control request to its end (one request per connection).
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    req: &Request,
    mut rd: ReadHalf,
    mut wr: WriteHalf,
    held: Vec<u8>,
) {
    let settings = ctx.shared.control_settings;
    let response = match check(req, &settings) {
        Err(resp) => resp,
        Ok((route, put)) => {
            let body = if put {
                read_body(&mut rd, held, req.content_length as usize).await
            } else {
                Ok(Vec::new())
            };
            match body {
                Err(resp) => resp,
                Ok(body) => call(ctx, req, route, put, body).await,
            }
        }
    };
    crate::session::ws_io::answer_then_linger(req, &mut rd, &mut wr, response).await;
}

async fn read_body(rd: &mut ReadHalf, held: Vec<u8>, length: usize) -> Result<Vec<u8>, Vec<u8>> {
    let mut body = held;
    body.reserve_exact(length.saturating_sub(body.len()));
    while body.len() < length {
        let room = length - body.len();
        match rt::timeout(BODY_READ_TIMEOUT, rd.read_into(body, room)).await {
            Some((Ok(n), back)) if n > 0 => body = back,
            Some(_) => {
                return Err(refuse(
                    400,
                    "bad_request",
                    "the connection ended before the whole body arrived",
                ))
            }
            None => {
                return Err(refuse(
                    408,
                    "request_timeout",
                    &format!("no body bytes for {} s", BODY_READ_TIMEOUT.as_secs()),
                ))
            }
        }
    }
    body.truncate(length);
    Ok(body)
}

async fn call(ctx: &ShardCtx, req: &Request, route: Route, put: bool, body: Vec<u8>) -> Vec<u8> {
    let Some(tx) = ctx.shared.control.as_ref() else {
        return refuse(503, "shutting_down", "the control thread is not running");
    };
    let (reply, answer) = flume::bounded(1);
    let call = Call {
        put,
        route,
        query: req.query.clone(),
        if_match: req.header("if-match").map(str::to_string),
        if_none_match: req.header("if-none-match").map(str::to_string),
        key: req.header("idempotency-key").map(str::to_string),
        body,
        reply,
    };
    match tx.try_send(ControlMsg::Call(call)) {
        Ok(()) => {}
        Err(crossbeam_channel::TrySendError::Full(_)) => {
            return refuse(
                503,
                "busy",
                &format!(
                    "{} control requests are queued, the most the broker holds; retry",
                    super::CALLS_QUEUED_MAX
                ),
            )
        }
        Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
            return refuse(503, "shutting_down", "the control thread has stopped")
        }
    }
    match answer.recv_async().await {
        Ok(a) => a.response(),
        Err(_) => refuse(
            503,
            "shutting_down",
            "the control thread stopped before it answered",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/control/v1"), Some(Route::Root));
        assert_eq!(route("/control/v1/streams"), Some(Route::Streams));
        assert_eq!(
            route("/control/v1/streams/a"),
            Some(Route::Stream("a".into()))
        );
        assert_eq!(
            route("/control/v1/streams/a/desired"),
            Some(Route::Desired("a".into()))
        );
        assert_eq!(
            route("/control/v1/operations/x"),
            Some(Route::Operation("x".into()))
        );
        assert_eq!(
            route("/control/v1/streams/a/migrations"),
            Some(Route::Migrations("a".into()))
        );
        for none in [
            "/control/v1/",
            "/control/v1/streams/",
            "/control/v1/streams/a/b",
            "/control/v1/nope",
            "/control/v2",
        ] {
            assert_eq!(route(none), None, "{none}");
        }
        assert!(is_migration("/control/v1/streams/a/migrations"));
        assert!(!is_migration("/control/v1/streams/a/desired"));
        assert!(wants("/control/v1"));
        assert!(wants("/control/v1/streams"));
        assert!(!wants("/control/v10"));
    }
}
