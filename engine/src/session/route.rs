//! What a WebSocket request asks for: the stream (the path) and the purpose (the query string),
//! checked exactly as PROTOCOL.md §2 describes. Pure: no I/O, no shard state.

use corecast_net::http::query::Query;
use corecast_net::protocol::close_reason::CloseReason;

use crate::config::valid_stream_name;
use crate::registry::Registry;

/// A checked WebSocket request.
#[derive(Debug, PartialEq, Eq)]
pub enum Intent {
    /// Read the stream.
    Subscribe {
        /// Stream index.
        stream: usize,
        /// `offset=N` (0 = EARLIEST); `None` = live only.
        offset: Option<u64>,
        /// The raw `where=` JSON.
        where_json: Option<String>,
        /// `?state`: the keyed state first (the latest row per key), then live.
        state: bool,
    },
    /// Publish to the stream.
    Publish {
        /// Stream index.
        stream: usize,
        /// `publisher=ID`: an exactly-once publisher.
        publisher: Option<String>,
    },
}

/// A refusal sent as a close before any greeting.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Close code (4400, 4404, 4412).
    pub code: u16,
    /// JSON reason.
    pub reason: String,
}

impl From<CloseReason<'_>> for Refusal {
    /// The close for `reason`: its code, and its JSON text within the 123 bytes a close reason
    /// holds (trailing fields dropped, a string value shortened at a character boundary; never
    /// cut JSON).
    fn from(reason: CloseReason<'_>) -> Refusal {
        Refusal {
            code: reason.code().0,
            reason: reason.encode(),
        }
    }
}

/// 4400 `{"error":"bad_request","detail":…}` with the detail cut to 80 characters, and further
/// at a character boundary when its escaped form would not fit in the 123 bytes of a close
/// reason.
pub fn bad_request(detail: &str) -> Refusal {
    CloseReason::BadRequest { detail }.into()
}

/// `unknown query parameter(s): a, b` when `q` names a key outside `allowed` (every endpoint
/// refuses what it does not understand rather than ignoring it).
pub fn unknown_params(q: &Query, allowed: &[&str]) -> Option<String> {
    let unknown: Vec<&str> = q.keys().filter(|k| !allowed.contains(k)).collect();
    (!unknown.is_empty()).then(|| format!("unknown query parameter(s): {}", unknown.join(", ")))
}

/// [`unknown_params`] followed by the keys the endpoint takes, for HTTP answers (a WebSocket
/// close reason has room for the short form only: 123 bytes).
pub fn unknown_params_listed(q: &Query, allowed: &[&str]) -> Option<String> {
    let takes = if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed.join(", ")
    };
    unknown_params(q, allowed).map(|m| format!("{m} (this endpoint takes: {takes})"))
}

/// Parses an offset the way Python's `int()` does (surrounding whitespace, a sign, `_` between
/// digits), which is what the reference accepts (`+5`, ` 5 `, `5_000`).
pub fn parse_py_int(s: &str) -> Option<i128> {
    let t = s.trim();
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let mut v: i128 = 0;
    for c in digits.bytes() {
        match c {
            b'0'..=b'9' => {
                v = v.checked_mul(10)?.checked_add((c - b'0') as i128)?;
            }
            b'_' => {}
            _ => return None,
        }
    }
    Some(if neg { -v } else { v })
}

/// The last value of `key` in a raw query string, percent-decoded without loss: `Err` when the
/// decoded bytes are not UTF-8 (the lenient [`Query`] would turn them into U+FFFD, and two
/// different ids would then name one exactly-once publisher).
pub(crate) fn strict_param(query: &[u8], key: &str) -> Option<Result<String, ()>> {
    let mut found = None;
    for pair in query.split(|&b| b == b'&') {
        let mut kv = pair.splitn(2, |&b| b == b'=');
        let k = kv.next().unwrap_or_default();
        if decode_bytes(k) != key.as_bytes() {
            continue;
        }
        let v = kv.next().unwrap_or_default();
        found = Some(String::from_utf8(decode_bytes(v)).map_err(|_| ()));
    }
    found
}

/// `application/x-www-form-urlencoded` decoding to bytes: `+` is a space, `%XX` a byte; a `%`
/// not followed by two hex digits stays as it is (as Python's `unquote` does).
fn decode_bytes(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                let hex = std::str::from_utf8(&s[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// Checks a request for stream `name` (percent-decoded path without the leading `/`) with the
/// raw query string. A 4404 lists only the streams `visible` lets through (the caller's
/// `data.read` grants).
pub fn route(
    name: &str,
    query: &[u8],
    registry: &Registry,
    visible: &dyn Fn(&str) -> bool,
) -> Result<Intent, Refusal> {
    let q = Query::parse(query);
    if let Some(detail) = unknown_params(&q, &["offset", "publish", "publisher", "where", "state"])
    {
        return Err(bad_request(&detail));
    }
    let publish = q.contains("publish");
    if publish && q.contains("offset") {
        return Err(bad_request(
            "publish and offset are different requests; pass one",
        ));
    }
    if publish && q.contains("where") {
        return Err(bad_request(
            "publish takes no where=; a publisher receives nothing",
        ));
    }
    if let Some(detail) = state_value_refusal(&q) {
        return Err(bad_request(&detail));
    }
    let state = q.contains("state");
    if state && publish {
        return Err(bad_request(
            "state is a way to subscribe; a publisher receives nothing",
        ));
    }
    if state && q.contains("offset") {
        return Err(bad_request(
            "state and offset are two starts (the keyed state, or a log offset); pass one",
        ));
    }
    let publisher = q.get("publisher").map(str::to_string);
    if publisher.is_some() && !publish {
        return Err(bad_request(
            "publisher= names an exactly-once publisher; it needs publish",
        ));
    }
    if let Some(p) = &publisher {
        if strict_param(query, "publisher").is_some_and(|raw| raw.is_err()) {
            return Err(bad_request(
                "a publisher id is 1 to 128 bytes of UTF-8; got bytes that are not UTF-8",
            ));
        }
        if p.is_empty() || p.len() > 128 {
            return Err(bad_request(&format!(
                "a publisher id is 1 to 128 bytes of UTF-8; got {}",
                p.len()
            )));
        }
    }
    let Some(stream) = registry.get(name) else {
        if !valid_stream_name(name) {
            return Err(bad_request("invalid stream name"));
        }
        // the names that fit in a close reason (123 bytes), sorted
        let names: Vec<&str> = registry
            .names_sorted
            .iter()
            .map(String::as_str)
            .filter(|n| visible(n))
            .collect();
        return Err(CloseReason::NoSuchStream {
            serves: Some(&names),
        }
        .into());
    };
    if publish {
        if publisher.is_some() && !stream.cfg.exactly_once {
            return Err(CloseReason::ExactlyOnceUnavailable { why: "stream" }.into());
        }
        return Ok(Intent::Publish {
            stream: stream.index,
            publisher,
        });
    }
    if state && stream.keyed.is_none() {
        return Err(bad_request(&format!(
            "state needs a keyed stream; {name} declares no key"
        )));
    }
    let offset = match q.get("offset") {
        None => None,
        Some(raw) => match parse_py_int(raw) {
            None => return Err(bad_request(&format!("offset={raw} is not an integer"))),
            Some(n) if n < 0 => {
                return Err(bad_request(&format!(
                    "offset={n} is negative; 0 means everything"
                )))
            }
            Some(n) if n > i64::MAX as i128 => {
                return Err(bad_request(&format!("offset={raw} is beyond int64")))
            }
            Some(n) => Some(n as u64),
        },
    };
    Ok(Intent::Subscribe {
        stream: stream.index,
        offset,
        where_json: q.get("where").map(str::to_string),
        state,
    })
}

/// `state` is a flag (`?state`, or `state=true`/`state=1`): any other value — `state=false`
/// above all — is refused rather than read as the flag.
pub(crate) fn state_value_refusal(q: &Query) -> Option<String> {
    match q.get("state") {
        Some(v) if !matches!(v, "" | "true" | "1") => Some(format!(
            "state is a flag (?state, state=true or state=1), not state={v:?}"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publisher_ids_must_be_utf8() {
        assert_eq!(
            strict_param(b"publish&publisher=p%C3%A9", "publisher"),
            Some(Ok("pé".into()))
        );
        assert_eq!(
            strict_param(b"publish&publisher=%FF", "publisher"),
            Some(Err(()))
        );
        assert_eq!(
            strict_param(b"publish&publisher=%ED%A0%80", "publisher"),
            Some(Err(()))
        );
        assert_eq!(
            strict_param(b"publish&publisher=a+b", "publisher"),
            Some(Ok("a b".into()))
        );
        assert_eq!(strict_param(b"publish", "publisher"), None);
    }

    #[test]
    fn python_ints() {
        assert_eq!(parse_py_int("5"), Some(5));
        assert_eq!(parse_py_int(" +5 "), Some(5));
        assert_eq!(parse_py_int("5_000"), Some(5000));
        assert_eq!(parse_py_int("-1"), Some(-1));
        for bad in ["", "abc", "5__0", "_5", "5_", "1e3", "0x10", "+"] {
            assert_eq!(parse_py_int(bad), None, "{bad}");
        }
    }
}
