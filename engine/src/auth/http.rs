//! Which grant a request needs, decided from its head alone, and the HTTP answers of a refusal.
//!
//! [`gate`] runs on every request right after its head is parsed: the `Origin` of a WebSocket
//! upgrade, then the credentials, then the grant — before the upgrade is answered, before a body
//! is read and before the stream is looked up, so a refused client learns nothing about which
//! streams exist. Unauthenticated: 401 with `WWW-Authenticate` (`Basic realm=…` and/or
//! `Bearer realm=…`); authenticated without the grant: 403; too many failures: 429 with
//! `Retry-After`. A WebSocket request refused here never gets a 101, let alone a greeting.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use corecast_net::http::query::Query;
use corecast_net::http::request::Request;
use corecast_net::http::response::{json_error_body, ResponseHead};
use corecast_net::ws::handshake::is_upgrade_request;

use super::credentials::Failure;
use super::live::{Guard, Kind, Ticket};
use super::{counters, Action, Auth, Identity, Method};

/// What a request needs to be let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Only to be authenticated (the catalog, filtered; paths that answer 404).
    Authenticated,
    /// `action` on this stream.
    On(Action, &'a str),
    /// `action` on at least one stream (`/stats`, `/metrics`: filtered by it).
    Any(Action),
    /// `action` on `"*"` (process-wide operations).
    Every(Action),
}

/// What `req` needs, from its method, path, query and headers only.
pub fn need(req: &Request) -> Need<'_> {
    let path = req.path.as_str();
    let name = path.strip_prefix('/').unwrap_or(path);
    if is_upgrade_request(req) {
        if name == "_echo" {
            return Need::Authenticated;
        }
        let publish = Query::parse(req.query.as_bytes()).contains("publish");
        let action = if publish {
            Action::DataPublish
        } else {
            Action::DataRead
        };
        return Need::On(action, name);
    }
    if let Some(stream) = crate::ingest::endpoint::wants(path) {
        return Need::On(Action::DataPublish, stream);
    }
    // the control plane: process-wide grants, on "*" (it creates streams no grant names yet)
    if crate::control::http::wants(path) {
        return match req.method.as_str() {
            "GET" | "HEAD" => Need::Every(Action::ControlRead),
            _ if crate::control::http::is_migration(path) => Need::Every(Action::ControlMigrate),
            _ => Need::Every(Action::ControlMutate),
        };
    }
    if let Some(rest) = path.strip_prefix("/v1/principals/") {
        if rest.ends_with("/revoke") {
            return Need::Every(Action::ControlMutate);
        }
    }
    if let Some(rest) = path.strip_prefix("/v1/streams/") {
        let stream = rest.split('/').next().unwrap_or("");
        if !stream.is_empty() {
            return Need::On(Action::DataRead, stream);
        }
        return Need::Authenticated;
    }
    // MCP: each tool checks data.read on its stream itself (mcp/tools.rs); the router tries
    // /mcp before SSE, so a stream named `mcp` is read over SSE at /mcp/events only
    if path == crate::mcp::PATH {
        return Need::Authenticated;
    }
    // in the router's order (session/conn.rs): SSE is tried before /stats and /metrics, so a
    // stream named `stats` asked for with `Accept: text/event-stream` is that stream
    if req.method == "GET" {
        if let Some(stream) = name.strip_suffix("/events") {
            if !stream.is_empty() && !stream.contains('/') {
                return Need::On(Action::DataRead, stream);
            }
        }
        let sse = req
            .headers_all("accept")
            .any(|v| v.to_ascii_lowercase().contains("text/event-stream"));
        if sse && !name.is_empty() && !name.contains('/') {
            return Need::On(Action::DataRead, name);
        }
    }
    match name {
        "stats" | "metrics" => Need::Any(Action::StatsRead),
        _ => Need::Authenticated,
    }
}

/// Whether `who` meets `need`.
pub fn meets(who: &Identity, need: Need<'_>) -> bool {
    match (who, need) {
        (Identity::Open, _) => true,
        (Identity::As(_), Need::Authenticated) => true,
        (Identity::As(p), Need::On(a, s)) => p.grants.allows(a, s),
        (Identity::As(p), Need::Any(a)) => p.grants.allows_any(a),
        (Identity::As(p), Need::Every(a)) => p.grants.allows_every(a),
    }
}

fn describe(need: Need<'_>) -> String {
    match need {
        Need::Authenticated => "to be authenticated".into(),
        Need::On(a, s) => format!("the {a} grant on stream {s}"),
        Need::Any(a) => format!("a {a} grant"),
        Need::Every(a) => format!("the {a} grant on \"*\""),
    }
}

/// Lets `req` through as an [`Identity`], or answers it: the whole HTTP response to write
/// before closing the connection.
pub async fn gate(auth: &Auth, req: &Request, peer: Option<IpAddr>) -> Result<Identity, Vec<u8>> {
    if is_upgrade_request(req) {
        if let Err(origin) = auth.origins().check(req) {
            counters::ORIGIN_REFUSED.fetch_add(1, Ordering::Relaxed);
            return Err(refusal(
                403,
                "forbidden_origin",
                &format!(
                    "a WebSocket from a page of {} is not allowed here (allowed_origins)",
                    short(origin)
                ),
                &[],
            ));
        }
    }
    let policy = auth.policy();
    let who = match auth.authenticate(req, peer).await {
        Ok(w) => w,
        Err(Failure::Unauthenticated { why, bearer }) => {
            return Err(unauthorized(auth, &why, bearer));
        }
        Err(Failure::RateLimited(secs)) => {
            let s = secs.to_string();
            return Err(refusal(
                429,
                "too_many_failures",
                &format!(
                    "too many failed authentications from this address; try again in {secs} s"
                ),
                &[("retry-after", &s)],
            ));
        }
        Err(Failure::Busy) => {
            return Err(refusal(
                503,
                "auth_busy",
                "every password check is busy; try again in a second",
                &[("retry-after", "1")],
            ));
        }
    };
    let need = need(req);
    if meets(&who, need) {
        return Ok(who);
    }
    let Identity::As(p) = &who else {
        unreachable!("an open broker meets every need")
    };
    let message = format!("{} needs {}", principal_label(&p.name), describe(need));
    if p.method == Method::Anonymous {
        counters::fail("no_credentials");
        // credentials could change the answer: say how to give them
        drop(policy);
        return Err(unauthorized(
            auth,
            &format!("{message}; authenticate"),
            false,
        ));
    }
    counters::FORBIDDEN.fetch_add(1, Ordering::Relaxed);
    Err(refusal(403, "forbidden", &message, &[]))
}

/// What an admitted request holds until it ends: its tickets under the principal's caps (given
/// back on drop), and the principal's live state for the sessions to watch for revocation.
#[derive(Debug, Default)]
pub struct Admission {
    _tickets: Vec<Ticket>,
    /// What the sessions watch (revocation, deadline); `None` on an open broker.
    pub guard: Option<Guard>,
}

/// Whether `req` opens a subscription (a WebSocket reader or an SSE stream).
fn opens(req: &Request, need: Need<'_>) -> Option<Kind> {
    match need {
        Need::On(Action::DataPublish, _) if is_upgrade_request(req) => Some(Kind::Publisher),
        Need::On(Action::DataRead, _) if is_upgrade_request(req) => Some(Kind::Subscription),
        Need::On(Action::DataRead, _) if !req.path.starts_with("/v1/") => Some(Kind::Subscription),
        _ => None,
    }
}

/// Admits `req` of `who` under its principal's caps, unless the principal is revoked (403)
/// or at a cap (429 with `Retry-After`), before anything is upgraded or read.
pub fn admit(auth: &Auth, who: &Identity, req: &Request) -> Result<Admission, Vec<u8>> {
    let Identity::As(p) = who else {
        return Ok(Admission::default());
    };
    let board = &auth.board;
    let live = board.get(&p.name);
    if live.revoked() {
        counters::FORBIDDEN.fetch_add(1, Ordering::Relaxed);
        return Err(refusal(
            403,
            "revoked",
            &format!(
                "{} was revoked; it is refused until the config is reloaded",
                principal_label(&p.name)
            ),
            &[],
        ));
    }
    let mut tickets = Vec::with_capacity(2);
    let kinds = [Some(Kind::Connection), opens(req, need(req))];
    for kind in kinds.into_iter().flatten() {
        let cap = p.caps[kind as usize];
        match board.take(&p.name, kind, cap) {
            Some(t) => tickets.push(t),
            None => {
                return Err(refusal(
                    429,
                    "too_many",
                    &format!(
                        "{} is at its {} of {}; close one or try again later",
                        principal_label(&p.name),
                        kind.cap_name(),
                        cap.unwrap_or(0)
                    ),
                    &[("retry-after", "5")],
                ))
            }
        }
    }
    // the session's deadline: its age limit, and its JWT's expiry
    let now = std::time::Instant::now();
    let by_age = match need(req) {
        Need::On(action, _) => p.max_age[action as usize].map(|a| now + a),
        _ => None,
    };
    // the same leeway as at sign-in: a token admitted within it is not closed at once
    let leeway = auth
        .policy()
        .and_then(|pol| pol.cfg.jwt.as_ref().map(|j| j.leeway.as_secs()))
        .unwrap_or(0);
    let by_exp = p.expires_at.map(|exp| {
        let exp = exp.saturating_add(leeway);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now + std::time::Duration::from_secs(exp.saturating_sub(unix))
    });
    let deadline = match (by_age, by_exp) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Admission {
        _tickets: tickets,
        guard: Some(Guard { live, deadline }),
    })
}

/// `POST /v1/principals/NAME/revoke` (the gate already checked `control.mutate` on `"*"`):
/// marks the principal revoked and wakes every session, which closes it; `None` when `req` is
/// not this endpoint. `wake` wakes every shard's sessions.
pub fn revoke(auth: &Auth, req: &Request, wake: impl FnOnce()) -> Option<Vec<u8>> {
    let name = req
        .path
        .strip_prefix("/v1/principals/")?
        .strip_suffix("/revoke")?;
    if req.method != "POST" {
        return Some(refusal(
            405,
            "method_not_allowed",
            "revoke with POST /v1/principals/NAME/revoke",
            &[("allow", "POST")],
        ));
    }
    if name.is_empty() {
        return Some(refusal(
            400,
            "bad_request",
            "no principal name in the path",
            &[],
        ));
    }
    // not from a cross-site form (CSRF): forms cannot send JSON, and a browser page must be on
    // the allowed-origins list — an explicit one
    let json = req.header("content-type").is_some_and(|c| {
        c.trim()
            .to_ascii_lowercase()
            .starts_with("application/json")
    });
    if !json {
        return Some(refusal(
            415,
            "unsupported_media_type",
            "a revocation is sent with Content-Type: application/json",
            &[],
        ));
    }
    if let Some(origin) = req.header("origin") {
        let origins = auth.origins();
        if !origins.restricted() || !origins.allows(origin) {
            counters::ORIGIN_REFUSED.fetch_add(1, Ordering::Relaxed);
            return Some(refusal(
                403,
                "forbidden_origin",
                "a revocation from a browser page needs its origin in allowed_origins",
                &[],
            ));
        }
    }
    if auth.policy().is_none() {
        return Some(refusal(
            409,
            "no_auth",
            "this broker has no [auth] section: there are no principals to revoke",
            &[],
        ));
    }
    let declared = auth
        .policy()
        .is_some_and(|p| p.cfg.principals.iter().any(|x| x.name == name));
    let open = auth.board.revoke(name);
    wake();
    tracing::warn!(principal = %short(name), connections = open, "principal revoked");
    let mut body = Vec::with_capacity(96);
    body.extend_from_slice(b"{\"principal\":");
    body.extend_from_slice(
        sonic_rs::to_string(name)
            .unwrap_or_else(|_| "\"\"".into())
            .as_bytes(),
    );
    body.extend_from_slice(
        format!(",\"revoked\":true,\"declared\":{declared},\"connections\":{open}}}").as_bytes(),
    );
    Some(
        ResponseHead::new(200)
            .header("content-type", "application/json")
            .header("cache-control", "no-store")
            .finish(&body),
    )
}

fn principal_label(name: &str) -> String {
    format!("principal {}", short(name))
}

/// At most 64 characters of client-sent text in a message.
fn short(s: &str) -> String {
    let mut out: String = s.chars().filter(|c| !c.is_control()).take(64).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}

fn unauthorized(auth: &Auth, why: &str, bearer_error: bool) -> Vec<u8> {
    let (realm, basic, bearer) = match auth.policy() {
        Some(p) => (p.cfg.realm.clone(), p.takes_passwords(), p.takes_bearer()),
        None => ("corecast".into(), true, false),
    };
    let basic_v = format!("Basic realm=\"{realm}\", charset=\"UTF-8\"");
    let bearer_v = if bearer_error {
        format!("Bearer realm=\"{realm}\", error=\"invalid_token\"")
    } else {
        format!("Bearer realm=\"{realm}\"")
    };
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if basic || !bearer {
        headers.push(("www-authenticate", &basic_v));
    }
    if bearer {
        headers.push(("www-authenticate", &bearer_v));
    }
    refusal(401, "unauthorized", why, &headers)
}

fn refusal(status: u16, code: &str, message: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut head = ResponseHead::new(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store");
    for (k, v) in headers {
        head = head.header(k, v);
    }
    head.finish(&json_error_body(
        code,
        message,
        status == 429 || status == 503,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, headers: &[(&str, &str)]) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.into(),
            target: target.into(),
            version_minor: 1,
            path: path.into(),
            query: query.into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            content_length: 0,
        }
    }

    const WS: [(&str, &str); 4] = [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn needs_from_the_head() {
        use Action::*;
        assert_eq!(
            need(&req("GET", "/trades", &WS)),
            Need::On(DataRead, "trades")
        );
        assert_eq!(
            need(&req("GET", "/trades?publish", &WS)),
            Need::On(DataPublish, "trades")
        );
        assert_eq!(
            need(&req("GET", "/trades?publish&publisher=p", &WS)),
            Need::On(DataPublish, "trades")
        );
        assert_eq!(need(&req("GET", "/_echo", &WS)), Need::Authenticated);
        assert_eq!(
            need(&req("GET", "/trades/events", &[])),
            Need::On(DataRead, "trades")
        );
        assert_eq!(
            need(&req("GET", "/trades", &[("accept", "text/event-stream")])),
            Need::On(DataRead, "trades")
        );
        assert_eq!(
            need(&req("POST", "/v1/streams/trades/ingest", &[])),
            Need::On(DataPublish, "trades")
        );
        assert_eq!(
            need(&req("GET", "/v1/streams/trades/rows?limit=5", &[])),
            Need::On(DataRead, "trades")
        );
        assert_eq!(need(&req("GET", "/v1/streams", &[])), Need::Authenticated);
        assert_eq!(need(&req("GET", "/stats", &[])), Need::Any(StatsRead));
        assert_eq!(need(&req("GET", "/metrics", &[])), Need::Any(StatsRead));
        assert_eq!(
            need(&req("POST", "/v1/principals/bob/revoke", &[])),
            Need::Every(ControlMutate)
        );
        assert_eq!(need(&req("GET", "/nothing/here", &[])), Need::Authenticated);
        assert_eq!(
            need(&req("GET", "/control/v1/streams", &[])),
            Need::Every(ControlRead)
        );
        assert_eq!(
            need(&req("PUT", "/control/v1/streams/a/desired", &[])),
            Need::Every(ControlMutate)
        );
        assert_eq!(
            need(&req("POST", "/control/v1/streams/a/migrations", &[])),
            Need::Every(ControlMigrate)
        );
        assert_eq!(need(&req("POST", "/mcp", &[])), Need::Authenticated);
        assert_eq!(
            need(&req("GET", "/mcp", &[("accept", "text/event-stream")])),
            Need::Authenticated
        );
        assert_eq!(need(&req("GET", "/mcp", &WS)), Need::On(DataRead, "mcp"));
    }
}
