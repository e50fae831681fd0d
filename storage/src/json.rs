//! The strict JSON front door for publish frames.
//!
//! In: the bytes of one text frame (or any JSON document the broker reads from a client). Out: a
//! [`sonic_rs::Value`], or a [`JsonError`] saying what was wrong and where. Runs on the shard that
//! read the frame, before validation (`schema::validate`).
//!
//! `sonic-rs` does most of the checking; this module adds what it does not do, and pins down what
//! it does (see the tests in `tests/schema_json.rs`):
//!
//! - **Depth.** `sonic-rs` 0.5 recurses without a limit when it builds a `Value` (a few thousand
//!   `[` overflow the stack), so the bytes are scanned first and anything nested deeper than
//!   [`MAX_DEPTH`] is refused before the parser sees it.
//! - **Duplicate keys.** `sonic-rs` keeps both entries of `{"a":1,"a":2}` (and `get` returns the
//!   first). [`parse_unique`] checks every object at every depth and refuses a repeat naming the
//!   key; [`parse`], the publish path, leaves that to the row codec, which walks every object of a
//!   row anyway.
//! - **Lone surrogates** (`"\ud800"`), **invalid UTF-8**, raw control characters in strings,
//!   **non-finite numbers** (`NaN`, `Infinity`, `1e400`), trailing garbage and trailing commas are
//!   all refused by `sonic-rs` itself; the refusal is mapped to a [`JsonError`] variant here.
//!
//! What `sonic-rs` 0.5 does with numbers, which the row codec relies on:
//!
//! - an integer in `i64` range is an `i64`; one in `(i64::MAX, u64::MAX]` is a `u64`;
//! - an integer beyond `u64` (e.g. `2^70`) or below `i64::MIN` becomes an `f64` (no error), so an
//!   integer column reports it as outside int64 (see `schema::validate`);
//! - `-0` and `-0.0` become the float `0.0` (the sign is lost; `-0` is not an integer any more);
//! - `1e-400` underflows to `0.0`, but `-1e-400` underflows to `-0.0`: the row encoder writes
//!   every float zero as `0.0` (`schema::write_f64`), so the canonical row is the same either way.

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};

/// The deepest nesting of objects and arrays a document may have; the top-level object or array
/// is level 1. Deeper documents are refused with [`JsonError::TooDeep`].
pub const MAX_DEPTH: usize = 64;

/// Objects with more keys than this are checked for duplicates by sorting instead of comparing
/// every pair.
const PAIRWISE_LIMIT: usize = 16;

/// Why a document is not acceptable JSON. The `Display` text reads well after the prefix
/// `"publish frame is not JSON: "`. Byte offsets count from 0 at the start of the document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all: `reason` is what the parser saw (e.g. `Invalid JSON value`,
    /// `Expected this character to be either a ',' or a '}' while parsing`).
    #[error("{reason} at byte {offset} (line {line}, column {column})")]
    Syntax {
        /// The parser's description of the fault.
        reason: String,
        /// Byte offset of the fault.
        offset: usize,
        /// 1-based line of the fault.
        line: usize,
        /// 1-based column of the fault.
        column: usize,
    },
    /// A string holds bytes that are not UTF-8.
    #[error("invalid UTF-8 in a string at byte {offset}")]
    InvalidUtf8 {
        /// Byte offset of the fault.
        offset: usize,
    },
    /// A `\u` escape names no Unicode scalar value: a lone or reversed surrogate such as
    /// `"\ud800"` or `"\udc00"`.
    #[error("invalid \\u escape (a lone surrogate is not Unicode) at byte {offset}")]
    InvalidUnicodeEscape {
        /// Byte offset of the string holding the escape.
        offset: usize,
    },
    /// A number that is not finite: `NaN`, `Infinity` or one too large for a float (`1e400`).
    /// (`NaN` and `Infinity` are reported by the parser as [`JsonError::Syntax`], since they are
    /// not JSON tokens at all; this variant is for numerals that overflow.)
    #[error("a number at byte {offset} is not finite (a log holds only finite floats)")]
    NonFinite {
        /// Byte offset of the end of the number.
        offset: usize,
    },
    /// Objects and arrays nested deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {max} levels at byte {offset}")]
    TooDeep {
        /// The limit, [`MAX_DEPTH`].
        max: usize,
        /// Byte offset of the `[` or `{` that went past it.
        offset: usize,
    },
    /// One object names the same key twice.
    #[error("duplicate key '{key}' in {}", if .path.is_empty() { "the top-level object".to_string() } else { format!("'{}'", .path) })]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// Where the object is: `""` for the top level, else a path such as `levels[3].px`.
        path: String,
    },
}

/// Parses one publish frame strictly, except for duplicate keys.
///
/// Accepts any JSON value at the top level (a publish frame may be an object or an array);
/// whether it must be an object is for the caller to decide. Surrounding whitespace is allowed.
///
/// **Duplicate keys are not checked here**, because every object in a publish frame is a row or
/// inside one, and [`crate::schema::RowCodec::encode_row`] refuses a repeated key at any depth
/// while it walks the row anyway (a second walk here would double the cost of a row). For any
/// other document (a `where=` filter, a schema, a config) use [`parse_unique`].
///
/// # Errors
///
/// A [`JsonError`] for malformed JSON, invalid UTF-8, a lone surrogate escape, a non-finite number
/// or nesting deeper than [`MAX_DEPTH`].
pub fn parse(bytes: &[u8]) -> Result<Value, JsonError> {
    check_depth(bytes)?;
    sonic_rs::from_slice(bytes).map_err(|e| from_sonic(&e))
}

/// Parses one JSON document strictly, duplicate keys included: [`parse`], then
/// [`check_duplicate_keys`].
///
/// # Errors
///
/// As [`parse`], and [`JsonError::DuplicateKey`] for a key named twice in any object.
pub fn parse_unique(bytes: &[u8]) -> Result<Value, JsonError> {
    let value = parse(bytes)?;
    check_duplicate_keys(&value)?;
    Ok(value)
}

/// Refuses documents nested deeper than [`MAX_DEPTH`], by a scan of the raw bytes that skips
/// string contents. Malformed documents pass through to the parser, which reports them.
fn check_depth(bytes: &[u8]) -> Result<(), JsonError> {
    // A document with few brackets in all cannot be deep: one vectorisable count settles the
    // common case (one row) without the scan.
    let openers = bytes.iter().filter(|&&b| b == b'[' || b == b'{').count();
    if openers <= MAX_DEPTH {
        return Ok(());
    }
    // A batch frame of rows has more: walk the structural bytes, jumping over each string to
    // its closing quote (a 100-row trade frame: 15 µs byte by byte, 10 µs like this).
    let mut depth = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        if !STRUCTURAL[b as usize] {
            at += 1;
            continue;
        }
        match b {
            b'"' => {
                at = after_string(bytes, at + 1);
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(JsonError::TooDeep {
                        max: MAX_DEPTH,
                        offset: at,
                    });
                }
            }
            _ => depth = depth.saturating_sub(1),
        }
        at += 1;
    }
    Ok(())
}

/// The bytes [`check_depth`] stops at: a quote and the four brackets.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'[' as usize] = true;
    table[b'{' as usize] = true;
    table[b']' as usize] = true;
    table[b'}' as usize] = true;
    table
};

/// The offset just past the quote closing the string whose contents start at `from` (a
/// backslash escapes the byte after it), or the end of `bytes` if the string never closes.
fn after_string(bytes: &[u8], mut from: usize) -> usize {
    while let Some(k) = bytes
        .get(from..)
        .and_then(|rest| rest.iter().position(|&c| c == b'"' || c == b'\\'))
    {
        let at = from + k;
        if bytes[at] == b'"' {
            return at + 1;
        }
        from = at + 2;
    }
    bytes.len()
}

/// Maps a `sonic-rs` error to a [`JsonError`]. `sonic-rs` keeps its error code private, so the
/// variant is chosen from the code's text (the first part of its `Display`), which the tests pin.
fn from_sonic(e: &sonic_rs::Error) -> JsonError {
    let text = e.to_string();
    // "<code> at line L column C\n\n\t<context>": keep only the code's own words.
    let reason = match text.find(" at line ") {
        Some(cut) => &text[..cut],
        None => text.lines().next().unwrap_or(""),
    };
    let offset = e.offset();
    if reason.starts_with("Invalid UTF-8") {
        JsonError::InvalidUtf8 { offset }
    } else if reason.starts_with("Invalid unicode code point")
        || reason.starts_with("Invalid surrogate")
    {
        JsonError::InvalidUnicodeEscape { offset }
    } else if reason.starts_with("Float number must be finite") {
        JsonError::NonFinite { offset }
    } else {
        JsonError::Syntax {
            reason: reason.to_string(),
            offset,
            line: e.line(),
            column: e.column(),
        }
    }
}

/// Checks every object in `value`, at any depth, for a key named twice.
///
/// # Errors
///
/// [`JsonError::DuplicateKey`] naming the first repeated key found and the path of its object.
pub fn check_duplicate_keys(value: &Value) -> Result<(), JsonError> {
    let mut path = Vec::new();
    match dup_in(value, &mut path) {
        None => Ok(()),
        Some(key) => Err(JsonError::DuplicateKey {
            key: key.to_string(),
            path: render_path(path.iter().rev()),
        }),
    }
}

/// One step from a container to an element, for error paths.
pub(crate) enum Seg<'a> {
    /// An object member.
    Key(&'a str),
    /// An array element.
    Index(usize),
}

/// Renders steps outermost first as `a.b[3].c`.
pub(crate) fn render_path<'s, 'a: 's>(segs: impl Iterator<Item = &'s Seg<'a>>) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// The first repeated key under `value`; on return `path` holds the steps to its object,
/// innermost first (so the happy path builds nothing).
fn dup_in<'a>(value: &'a Value, path: &mut Vec<Seg<'a>>) -> Option<&'a str> {
    if let Some(obj) = value.as_object() {
        if let Some(key) = repeated_key(obj) {
            return Some(key);
        }
        for (key, v) in obj.iter() {
            if v.is_object() || v.is_array() {
                if let Some(found) = dup_in(v, path) {
                    path.push(Seg::Key(key));
                    return Some(found);
                }
            }
        }
    } else if let Some(arr) = value.as_array() {
        for (i, v) in arr.iter().enumerate() {
            if v.is_object() || v.is_array() {
                if let Some(found) = dup_in(v, path) {
                    path.push(Seg::Index(i));
                    return Some(found);
                }
            }
        }
    }
    None
}

/// The first key that appears twice in `obj`, if any.
pub(crate) fn repeated_key(obj: &sonic_rs::Object) -> Option<&str> {
    let n = obj.len();
    if n < 2 {
        return None;
    }
    if n <= PAIRWISE_LIMIT {
        let mut keys: [&str; PAIRWISE_LIMIT] = [""; PAIRWISE_LIMIT];
        for (i, (k, _)) in obj.iter().enumerate() {
            if keys[..i].contains(&k) {
                return Some(k);
            }
            keys[i] = k;
        }
        return None;
    }
    let mut keys: Vec<&str> = obj.iter().map(|(k, _)| k).collect();
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}
