//! The SSE resume point: `Last-Event-ID` (`net/src/sse/mod.rs`, `parse_last_event_id`, as
//! `engine/src/session/sse.rs` reads the header or the `lastEventId` parameter) and the
//! `?offset=` integer (`engine/src/session/route.rs`, `parse_py_int`).
//!
//! Checked: a `Last-Event-ID` is accepted exactly when it is 1-19 ASCII digits with a value
//! within int64, and then the value is the decimal one; every offset in int64 written in
//! decimal is accepted back. `parse_py_int` accepts what Python's `int()` accepts for ASCII
//! input (reference written out here, checked against CPython 3.11: ASCII whitespace, one sign, `_` only between digits) and gives
//! the same value; its own output parses back to itself.
#![no_main]

use corecast_engine::session::route::parse_py_int;
use corecast_net::sse::parse_last_event_id;
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: corecast_fuzz::seeds::init("sse_last_event_id"), |data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let got = parse_last_event_id(&text);
    let digits = !text.is_empty() && text.len() <= 19 && text.bytes().all(|b| b.is_ascii_digit());
    let want = if digits {
        text.parse::<u64>().ok().filter(|&v| v <= i64::MAX as u64)
    } else {
        None
    };
    assert_eq!(got, want, "Last-Event-ID {text:?}");
    if data.len() >= 8 {
        let v = u64::from_le_bytes(data[..8].try_into().unwrap()) >> 1;
        assert_eq!(parse_last_event_id(&v.to_string()), Some(v));
        assert_eq!(parse_py_int(&v.to_string()), Some(v as i128));
    }

    let py = parse_py_int(&text);
    if text.is_ascii() {
        assert_eq!(py, python_int(&text), "int({text:?})");
    }
    if let Some(n) = py {
        assert_eq!(parse_py_int(&n.to_string()), Some(n));
    }
});

/// Python's `int(s)` for ASCII `s`, base 10, as an i128 (None for a value outside it).
fn python_int(s: &str) -> Option<i128> {
    // `int()` strips ASCII space, \t \n \v \f \r (not \x1c-\x1f, which `str.strip` would)
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let groups: Vec<&str> = body.split('_').collect();
    if groups
        .iter()
        .any(|g| g.is_empty() || !g.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let v: i128 = groups.concat().parse().ok()?;
    Some(if neg { -v } else { v })
}
