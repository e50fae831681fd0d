//! The allowed-origins list (top-level `allowed_origins = ["https://app.example", …]`).
//!
//! A browser sends `Origin` on every WebSocket upgrade, and a page of any site can open a
//! WebSocket to any host — with the user's cookies (cross-site WebSocket hijacking). With a list
//! configured, an upgrade whose `Origin` is not on it is refused 403 before anything else; a
//! request without `Origin` (not from a browser) is not affected. The same list answers CORS for
//! the pull API and SSE. Without a list every origin is allowed, as before.

use corecast_net::http::request::Request;

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
}
