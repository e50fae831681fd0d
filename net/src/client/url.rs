//! `ws://HOST:PORT/STREAM` and `wss://HOST:PORT/STREAM` URLs and the request paths built from them.

use std::net::{SocketAddr, ToSocketAddrs};

use super::ClientError;

/// A parsed `ws://HOST[:PORT]/STREAM` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as written (brackets kept for IPv6), for the `Host` header.
    pub host: String,
    /// The port (80 when the URL has none).
    pub port: u16,
    /// The stream name, percent-decoded.
    pub stream: String,
    /// `wss://`: TLS, the certificate checked against the roots of [`super::tls`] for `host`.
    pub tls: bool,
    /// The `Authorization` header sent with the upgrade: HTTP Basic from the URL's userinfo
    /// (`ws://user:password@host/…`, percent-decoded), or what the caller set. Never shown:
    /// [`Target::url`] and every error leave it out.
    pub authorization: Option<String>,
}

impl Target {
    /// Parses `url`: `ws://` or `wss://` (TLS; port 443 by default); the path is the stream name; a query string is
    /// refused (say what you want with options, not in the URL).
    pub fn parse(url: &str) -> Result<Target, ClientError> {
        let shown = redact_userinfo(url);
        let bad = |why: &str| {
            ClientError::BadUrl(format!(
                "{shown:?}: {why} (expected ws://HOST:PORT/STREAM or wss://…)"
            ))
        };
        let (rest, tls) = if let Some(r) = strip_prefix_ci(url, "ws://") {
            (r, false)
        } else if let Some(r) = strip_prefix_ci(url, "wss://") {
            (r, true)
        } else {
            return Err(bad("the scheme must be ws:// or wss://"));
        };
        if rest.contains('?') || rest.contains('#') {
            return Err(bad(
                "a query string or fragment is not allowed; use the options instead",
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let (authorization, authority) = match authority.rsplit_once('@') {
            None => (None, authority),
            Some((userinfo, host)) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let (Some(user), Some(password)) = (percent_decode(user), percent_decode(password))
                else {
                    return Err(bad("the user info is not valid percent-encoded UTF-8"));
                };
                use base64::Engine;
                let pair = format!("{user}:{password}");
                let b64 = base64::engine::general_purpose::STANDARD.encode(pair);
                (Some(format!("Basic {b64}")), host)
            }
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let (host, port) = if let Some(h) = authority.strip_prefix('[') {
            let end = h.find(']').ok_or_else(|| bad("unclosed IPv6 bracket"))?;
            let host = &authority[..end + 2];
            let after = &h[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("junk after the IPv6 address")),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("no host"));
        }
        let port = match port {
            None if tls => 443,
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad(&format!("port {p:?} is not a number from 1 to 65535")))?,
        };
        let stream = percent_decode(path)
            .ok_or_else(|| bad("the stream name is not valid percent-encoded UTF-8"))?;
        if stream.is_empty() {
            return Err(bad("no stream name in the path"));
        }
        if stream.contains('/') {
            return Err(bad("the path must be a single stream name"));
        }
        Ok(Target {
            host: host.to_string(),
            port,
            stream,
            tls,
            authorization,
        })
    }

    /// `HOST:PORT` for the `Host` header.
    pub fn host_header(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Resolves the host (blocking DNS when it is a name).
    pub fn resolve(&self) -> Result<SocketAddr, ClientError> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let err = |msg: String| ClientError::Connect {
            addr: self.host_header(),
            msg,
        };
        (host, self.port)
            .to_socket_addrs()
            .map_err(|e| err(e.to_string()))?
            .next()
            .ok_or_else(|| err("the name resolves to no address".into()))
    }

    /// `/STREAM` percent-encoded, followed by `?query` when `query` is not empty.
    pub fn path_and_query(&self, query: &[(&str, Option<&str>)]) -> String {
        let mut p = String::from("/");
        percent_encode_into(&self.stream, &mut p);
        for (i, (k, v)) in query.iter().enumerate() {
            p.push(if i == 0 { '?' } else { '&' });
            p.push_str(k);
            if let Some(v) = v {
                p.push('=');
                percent_encode_into(v, &mut p);
            }
        }
        p
    }

    /// The host without IPv6 brackets: the name a TLS certificate must carry.
    pub fn bare_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// `ws://HOST:PORT/STREAM` (or `wss://`) back again.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!(
            "{scheme}://{}{}",
            self.host_header(),
            self.path_and_query(&[])
        )
    }
}

/// `url` with the password of its userinfo replaced by `***`, for messages.
pub fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!(
                "{}{user}:***@{host}{}",
                &url[..scheme_end + 3],
                &rest[authority_end..]
            )
        }
        None => url.to_string(),
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    if s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix) {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

/// Percent-encodes every byte outside RFC 3986's unreserved set.
pub fn percent_encode_into(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let t = Target::parse("ws://127.0.0.1:8765/trades").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.stream.as_str()),
            ("127.0.0.1", 8765, "trades")
        );
        assert_eq!(t.url(), "ws://127.0.0.1:8765/trades");
        let t = Target::parse("ws://[::1]:9/a%20b").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.stream.as_str()),
            ("[::1]", 9, "a b")
        );
        assert_eq!(
            t.path_and_query(&[("offset", Some("0")), ("where", Some("{\"a\":1}"))]),
            "/a%20b?offset=0&where=%7B%22a%22%3A1%7D"
        );
        assert_eq!(Target::parse("ws://h/s").unwrap().port, 80);
        let t = Target::parse("wss://h/s").unwrap();
        assert_eq!(
            (t.port, t.tls, t.url().as_str()),
            (443, true, "wss://h:443/s")
        );
        assert!(!Target::parse("ws://h/s").unwrap().tls);
        // userinfo: sent as HTTP Basic, percent-decoded, never shown
        let t = Target::parse("ws://alice:p%40ss%3Aw@h:1/s").unwrap();
        assert_eq!(t.authorization.as_deref(), Some("Basic YWxpY2U6cEBzczp3"));
        assert_eq!(t.url(), "ws://h:1/s");
        let e = Target::parse("ws://alice:hunter2@h:1/a/b")
            .unwrap_err()
            .to_string();
        assert!(e.contains("alice:***@h:1") && !e.contains("hunter2"), "{e}");
        assert_eq!(Target::parse("ws://h:1/s").unwrap().authorization, None);
        for bad in [
            "http://h:1/s",
            "ws://h:1/",
            "ws://h:1",
            "ws://:1/s",
            "ws://h:x/s",
            "ws://h:1/s?offset=1",
            "ws://h:1/a/b",
            "h:1/s",
        ] {
            assert!(
                matches!(Target::parse(bad), Err(ClientError::BadUrl(_))),
                "{bad}"
            );
        }
    }
}
