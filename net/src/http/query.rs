//! Query strings and percent-decoding with Python's semantics (PROTOCOL.md §2).
//!
//! The reference server folds the query with `dict(parse_qsl(qs, keep_blank_values=True))`:
//! pairs are split on `&` only, empty pieces are skipped, a piece without `=` is a key with an
//! empty value, `+` becomes a space before percent-decoding, a malformed escape such as `%zz` or
//! a trailing `%4` is kept literally, and decoded bytes that are not UTF-8 become U+FFFD
//! (`errors='replace'`). A repeated key keeps its last value but its first position.
//!
//! One deliberate difference: raw (unescaped) bytes ≥ 0x80 in the query are read as UTF-8
//! here, where an ASGI app decoding `query_string` as latin-1 would see one character per byte.

use std::borrow::Cow;

/// Percent-decodes `input` (RFC 3986 §2.1) like Python's `urllib.parse.unquote`, after turning
/// `+` into a space when `plus_as_space` (as `unquote_plus` and `parse_qsl` do; a path keeps `+`).
///
/// Never fails: an escape that is not `%` followed by two hex digits is kept as written, and
/// decoded bytes that are not UTF-8 are replaced by U+FFFD per maximal invalid subpart, as
/// Python's `errors='replace'` does. Borrows when nothing needed changing.
pub fn percent_decode(input: &[u8], plus_as_space: bool) -> Cow<'_, str> {
    let needs_work = input
        .iter()
        .any(|&b| b == b'%' || (plus_as_space && b == b'+'));
    if !needs_work {
        return String::from_utf8_lossy(input);
    }
    let mut bytes = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        match b {
            b'%' if i + 2 < input.len() => {
                match (hex_value(input[i + 1]), hex_value(input[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        bytes.push(hi << 4 | lo);
                        i += 3;
                        continue;
                    }
                    _ => bytes.push(b'%'),
                }
            }
            b'+' if plus_as_space => bytes.push(b' '),
            _ => bytes.push(b),
        }
        i += 1;
    }
    match String::from_utf8(bytes) {
        Ok(s) => Cow::Owned(s),
        Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Python `urllib.parse.parse_qsl(query, keep_blank_values=True)`: every `(key, value)` pair in
/// order, repeats included. `query` is the raw text after `?`, without the `?`.
pub fn parse_qsl(query: &[u8]) -> Vec<(String, String)> {
    query
        .split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (key, value) = match piece.iter().position(|&b| b == b'=') {
                Some(eq) => (&piece[..eq], &piece[eq + 1..]),
                None => (piece, &piece[piece.len()..]),
            };
            (
                percent_decode(key, true).into_owned(),
                percent_decode(value, true).into_owned(),
            )
        })
        .collect()
}

/// A query folded as `dict(parse_qsl(query, keep_blank_values=True))`: each key once, at the
/// position of its first occurrence, holding its last value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses and folds the raw query text (without the `?`). Never fails (see the module docs).
    pub fn parse(query: &[u8]) -> Query {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (key, value) in parse_qsl(query) {
            match pairs.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => pairs.push((key, value)),
            }
        }
        Query { pairs }
    }

    /// The (last) value of `key`, or `None` when the key is absent. A key given without `=`
    /// (`?publish`) has the value `""`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is present, with any value.
    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The distinct keys in first-occurrence order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// The folded `(key, value)` pairs in first-occurrence order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The number of distinct keys.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether the query holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}
