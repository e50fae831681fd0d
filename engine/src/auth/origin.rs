//! The allowed-origins list (top-level `allowed_origins = ["https://app.example", …]`).
//!
//! A browser sends `Origin` on every WebSocket upgrade, and a page of any site can open a
//! WebSocket to any host — with the user's cookies (cross-site WebSocket hijacking). With a list
//! configured, an upgrade whose `Origin` is not on it is refused 403 before anything else; a
//! request without `Origin` (not from a browser) is not affected. The same list answers CORS for
//! the pull API and SSE. Without a list every origin is allowed, as before.

use corecast_net::http::request::Request;
use corecast_net::http::response::ResponseHead;

/// The allowed origins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origins {
    /// `None`: any origin.
    list: Option<Vec<String>>,
}

impl Origins {
    /// Every origin allowed.
    pub fn any() -> Origins {
        Origins { list: None }
    }

    /// The origins of the config list, checked: each `"*"` or `scheme://host[:port]`, no path.
    pub fn from_list(list: &[String]) -> Result<Origins, String> {
        let mut out = Vec::new();
        for (i, o) in list.iter().enumerate() {
            if o == "*" {
                return Ok(Origins::any());
            }
            let ok = o.split_once("://").is_some_and(|(scheme, rest)| {
                !scheme.is_empty()
                    && scheme
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
                    && !rest.is_empty()
                    && !rest.contains('/')
                    && !rest.contains('?')
                    && !rest.contains('#')
                    && !rest.contains('@')
            });
            if !ok {
                return Err(format!(
                    "allowed_origins[{i}]: {o:?} is not an origin (scheme://host[:port], no path, or \"*\")"
                ));
            }
            out.push(o.to_ascii_lowercase());
        }
        Ok(Origins { list: Some(out) })
    }

    /// Whether `origin` (an `Origin` header's value) is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        match &self.list {
            None => true,
            Some(l) => l.iter().any(|o| o.eq_ignore_ascii_case(origin.trim())),
        }
    }

    /// Whether a list is configured.
    pub fn restricted(&self) -> bool {
        self.list.is_some()
    }

    /// `Err(origin)` when `req` comes from a browser page whose origin is not allowed.
    pub fn check<'a>(&self, req: &'a Request) -> Result<(), &'a str> {
        match req.header("origin") {
            Some(o) if !self.allows(o) => Err(o),
            _ => Ok(()),
        }
    }

    /// The `Access-Control-Allow-Origin` value for `req`: `*` without a list, the request's
    /// origin when it is on the list, `None` (no header: the browser keeps the answer from the
    /// page) when it is not.
    pub fn cors_value<'a>(&self, req: &'a Request) -> Option<&'a str> {
        match (&self.list, req.header("origin")) {
            (None, _) => Some("*"),
            (Some(_), Some(o)) if self.allows(o) => Some(o),
            _ => None,
        }
    }
}

/// The answer to a CORS preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`), which browsers send without credentials before a
/// credentialed `fetch` of the pull API: 204 allowing `GET`/`HEAD` with `Authorization` and
/// `Last-Event-ID` (for `/mcp`: `POST`/`DELETE` with `Content-Type` and the MCP session headers)
/// for an allowed origin, 403 for another; `None` when `req` is not a preflight.
pub fn preflight(origins: &Origins, req: &Request) -> Option<Vec<u8>> {
    if req.method != "OPTIONS" || req.header("access-control-request-method").is_none() {
        return None;
    }
    let origin = req.header("origin")?;
    if !origins.allows(origin) || origin.bytes().any(|b| b == b'\r' || b == b'\n') {
        return Some(
            ResponseHead::new(403)
                .header("content-type", "application/json")
                .finish(&corecast_net::http::response::json_error_body(
                    "forbidden_origin",
                    "this origin is not in allowed_origins",
                    false,
                )),
        );
    }
    // the MCP endpoint takes JSON POSTs and DELETEs with its session headers (mcp/mod.rs)
    let (methods, headers) = if req.path == crate::mcp::PATH {
        (
            "POST, DELETE",
            "authorization, content-type, mcp-session-id, mcp-protocol-version",
        )
    } else {
        ("GET, HEAD", "authorization, last-event-id")
    };
    let mut h = ResponseHead::new(204)
        .header(
            "access-control-allow-origin",
            if origins.restricted() { origin } else { "*" },
        )
        .header("access-control-allow-methods", methods)
        .header("access-control-allow-headers", headers)
        .header("access-control-max-age", "600")
        .header("vary", "origin");
    if origins.restricted() {
        h = h.header("access-control-allow-credentials", "true");
    }
    Some(h.finish(b""))
}

/// The line every corecast answer of the pull API and SSE carries before the policy is applied.
const ANY_ORIGIN: &[u8] = b"access-control-allow-origin: *\r\n";

/// Applies `value` ([`Origins::cors_value`]) to a complete response built with
/// `access-control-allow-origin: *`: unchanged for `*` (no list configured), the request's
/// origin (with `vary: origin`) when it is allowed, no header at all when it is not.
pub fn apply_cors(mut resp: Vec<u8>, value: Option<&str>) -> Vec<u8> {
    if value == Some("*") {
        return resp;
    }
    let head_end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(resp.len());
    let Some(at) = resp[..head_end]
        .windows(ANY_ORIGIN.len())
        .position(|w| w.eq_ignore_ascii_case(ANY_ORIGIN))
    else {
        return resp;
    };
    let with = match value {
        // a listed origin may send its cookie or Authorization (credentialed CORS)
        Some(v) if !v.bytes().any(|b| b == b'\r' || b == b'\n') => format!(
            "access-control-allow-origin: {v}\r\naccess-control-allow-credentials: true\r\nvary: origin\r\n"
        ),
        _ => String::new(),
    };
    resp.splice(at..at + ANY_ORIGIN.len(), with.into_bytes());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_checked_and_matched() {
        let o = Origins::from_list(&["https://App.example".into(), "http://localhost:8080".into()])
            .unwrap();
        assert!(o.allows("https://app.example"));
        assert!(o.allows("http://localhost:8080"));
        assert!(!o.allows("https://evil.example"));
        assert!(!o.allows("null"));
        assert!(Origins::from_list(&["*".into()])
            .unwrap()
            .allows("https://x"));
        let e = Origins::from_list(&["https://a.example/path".into()]).unwrap_err();
        assert!(e.contains("allowed_origins[0]"), "{e}");
        assert!(Origins::from_list(&["a.example".into()]).is_err());
    }

    #[test]
    fn cors_is_rewritten_in_the_head_only() {
        let r = b"HTTP/1.1 200 OK\r\naccess-control-allow-origin: *\r\ncontent-length: 2\r\n\r\n{}"
            .to_vec();
        assert_eq!(apply_cors(r.clone(), Some("*")), r);
        let a = String::from_utf8(apply_cors(r.clone(), Some("https://app.example"))).unwrap();
        assert!(a.contains("access-control-allow-origin: https://app.example\r\naccess-control-allow-credentials: true\r\nvary: origin\r\n"), "{a}");
        let n = String::from_utf8(apply_cors(r, None)).unwrap();
        assert!(!n.contains("access-control"), "{n}");
        assert!(n.ends_with("\r\n\r\n{}"), "{n}");
    }
}
