//! The signed pull cursor (`engine/src/cursor.rs`): `CursorKey::verify` on arbitrary text, and
//! `sign` → `verify` on arbitrary bindings.
//!
//! Input: `next` (8 bytes), `now` (8 bytes), then `stream NUL stream_id NUL filter NUL caller NUL
//! cursor` (missing parts are empty). Checked:
//!
//! - a cursor that verifies was produced by `sign`: signing its offset for the same binding
//!   with its expiry gives back exactly the same text;
//! - `sign` then `verify` gives the offset back before the expiry and `Expired` from it on;
//!   another binding (any one part changed), another key, or any one character of the cursor
//!   changed, is `Invalid`.
#![no_main]

use corecast_engine::cursor::{Binding, CursorError, CursorKey};
use corecast_fuzz::seeds::{CURSOR_KEY, CURSOR_TTL_S};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: corecast_fuzz::seeds::init("pull_cursor"), |data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let next = u64::from_be_bytes(data[..8].try_into().unwrap());
    let now = u64::from_be_bytes(data[8..16].try_into().unwrap());
    let text = String::from_utf8_lossy(&data[16..]);
    let mut parts = text.splitn(5, '\0');
    let mut part = || parts.next().unwrap_or("");
    let (stream, stream_id, filter, caller, cursor) = (part(), part(), part(), part(), part());
    let b = Binding {
        stream,
        stream_id,
        filter,
        caller,
    };
    let key = CursorKey::new(CURSOR_KEY, CURSOR_TTL_S);

    // an arbitrary cursor: genuine only if it is exactly what sign makes
    match key.verify(&b, cursor, now) {
        Ok(offset) => {
            assert!(
                resigned_with_expiry(&key, &b, offset, cursor),
                "verified cursor {cursor:?} is not one sign makes"
            );
        }
        Err(CursorError::Expired) => {
            assert!(resigned_with_expiry(&key, &b, None, cursor));
        }
        Err(CursorError::Invalid) => {}
    }

    // sign → verify
    let signed = key.sign(&b, next, now);
    assert!(signed.len() <= 64);
    // the expiry saturates: a cursor signed within the ttl of u64::MAX seconds expires at
    // u64::MAX (not a time a clock reaches)
    let expires = now.saturating_add(CURSOR_TTL_S);
    if expires > now {
        assert_eq!(key.verify(&b, &signed, now), Ok(next));
        assert_eq!(key.verify(&b, &signed, expires - 1), Ok(next));
    }
    assert_eq!(key.verify(&b, &signed, expires), Err(CursorError::Expired));
    // each part changed (made one character longer, so it differs whatever it was)
    let longer = |s: &str| format!("{s}\u{1}");
    let (s2, i2, f2, c2) = (longer(stream), longer(stream_id), longer(filter), longer(caller));
    for changed in [
        Binding { stream: &s2, ..b },
        Binding { stream_id: &i2, ..b },
        Binding { filter: &f2, ..b },
        Binding { caller: &c2, ..b },
    ] {
        assert_eq!(key.verify(&changed, &signed, now), Err(CursorError::Invalid));
    }
    let other_key = CursorKey::new(b"another key", CURSOR_TTL_S);
    assert_eq!(other_key.verify(&b, &signed, now), Err(CursorError::Invalid));
    let mut chars: Vec<u8> = signed.clone().into_bytes();
    let i = (next as usize ^ now as usize) % chars.len();
    chars[i] = if chars[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(chars).unwrap();
    assert_eq!(key.verify(&b, &tampered, now), Err(CursorError::Invalid));
});

/// Whether `cursor` is what `sign` makes for `b` with some expiry (and `offset`, when given):
/// decodes the fields (the format is `base64url(1 ‖ next ‖ expires ‖ tag16)`) and re-signs.
fn resigned_with_expiry(
    key: &CursorKey,
    b: &Binding<'_>,
    offset: impl Into<Option<u64>>,
    cursor: &str,
) -> bool {
    let Some(raw) = b64url_decode(cursor) else {
        return false;
    };
    if raw.len() != 33 {
        return false;
    }
    let next = u64::from_be_bytes(raw[1..9].try_into().unwrap());
    let expires = u64::from_be_bytes(raw[9..17].try_into().unwrap());
    if offset.into().is_some_and(|o| o != next) {
        return false;
    }
    // sign adds the ttl with saturation: find a `now` that gives this expiry
    let now = expires.saturating_sub(key.ttl_s());
    key.sign(b, next, now) == cursor
}

/// RFC 4648 base64url without padding, strict (canonical trailing bits), written out here so
/// the check does not share the code under test.
fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let vals: Vec<u32> = s
        .bytes()
        .map(|c| A.iter().position(|&a| a == c).map(|p| p as u32))
        .collect::<Option<_>>()?;
    if vals.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let mut acc = 0u32;
        for (i, v) in chunk.iter().enumerate() {
            acc |= v << (18 - 6 * i);
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    Some(out)
}
