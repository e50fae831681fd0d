//! `json::parse`: the strict front door, and what sonic-rs 0.5 does at the edges (pinned here so
//! an upgrade that changes it fails loudly).

use corecast_storage::json::{parse, parse_unique, JsonError, MAX_DEPTH};
use corecast_storage::schema::{RejectReason, RowCodec};
use sonic_rs::{JsonContainerTrait, JsonValueTrait};

/// The refusal of `parse_unique` (which is `parse` plus the duplicate-key walk).
fn err(input: &[u8]) -> JsonError {
    match parse_unique(input) {
        Ok(v) => panic!(
            "{:?} parsed as {:?}",
            String::from_utf8_lossy(input),
            sonic_rs::to_string(&v)
        ),
        Err(e) => e,
    }
}

#[test]
fn malformed_json_names_what_the_parser_saw_and_where() {
    let cases: &[(&[u8], &str, usize)] = &[
        (b"", "Invalid JSON value", 0),
        (
            b"{\"a\":1,}",
            "Expected this character to be '\"' or '}'",
            7,
        ),
        (
            b"{\"a\":01}",
            "Expected this character to be either a ','",
            6,
        ),
        (b"{\"a\":1} x", "trailing characters", 8),
        (b"{\"a\":NaN}", "Invalid JSON value", 5),
        (b"{\"a\":Infinity}", "Invalid JSON value", 5),
        (b"{\"a\" 1}", "':'", 5),
        (b"{'a':1}", "", 1),
        (b"{\"a\":\"\n\"}", "Control character", 5),
        (b"{\"a\":[1,2}", "", 9),
    ];
    for (input, words, offset) in cases {
        match err(input) {
            JsonError::Syntax {
                reason,
                offset: at,
                line,
                ..
            } => {
                assert!(
                    reason.contains(words),
                    "{:?}: {reason:?} lacks {words:?}",
                    String::from_utf8_lossy(input)
                );
                assert_eq!(
                    at,
                    *offset,
                    "{:?}: {reason}",
                    String::from_utf8_lossy(input)
                );
                assert!(!reason.contains('\n'), "one line: {reason:?}");
                assert!(line >= 1);
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
}

#[test]
fn display_reads_after_the_bad_frame_prefix() {
    let e = err(b"{\"a\":tru}");
    let text = format!("publish frame is not JSON: {e}");
    assert!(text.contains("Invalid literal"), "{text}");
    assert!(text.ends_with("at byte 8 (line 1, column 9)"), "{text}");
    let e = err(br#"{"a":{"b":1,"b":2}}"#);
    assert_eq!(e.to_string(), "duplicate key 'b' in 'a'");
}

#[test]
fn lone_surrogates_and_invalid_utf8_are_refused() {
    for input in [
        &br#"{"a":"\ud800"}"#[..],
        br#"{"a":"\udc00x"}"#,
        br#"{"a":"\ud800\u0041"}"#,
        br#"{"\udfff":1}"#,
    ] {
        assert!(
            matches!(err(input), JsonError::InvalidUnicodeEscape { .. }),
            "{:?} -> {:?}",
            String::from_utf8_lossy(input),
            err(input)
        );
    }
    assert!(matches!(
        err(b"{\"a\":\"\xff\"}"),
        JsonError::InvalidUtf8 { offset: 6 }
    ));
    assert!(matches!(
        err(b"{\"a\":\"\xed\xa0\x80\"}"),
        JsonError::InvalidUtf8 { .. }
    ));
    // A proper pair is one character.
    let v = parse(br#"{"a":"\ud83d\ude00"}"#).unwrap_or_default();
    assert_eq!(v.get("a").and_then(|s| s.as_str()), Some("😀"));
}

#[test]
fn non_finite_numbers_are_refused() {
    for input in [&b"{\"a\":1e400}"[..], b"{\"a\":-1e400}", b"[1.8e308]"] {
        assert!(
            matches!(err(input), JsonError::NonFinite { .. }),
            "{:?}",
            err(input)
        );
    }
    // Underflow is not an error: it is zero.
    let v = parse(b"{\"a\":1e-400}").unwrap_or_default();
    assert_eq!(v.get("a").and_then(|x| x.as_f64()), Some(0.0));
}

#[test]
fn nesting_is_limited_before_the_parser_recurses() {
    let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
    assert!(parse(ok.as_bytes()).is_ok());
    let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    assert!(matches!(
        err(deep.as_bytes()),
        JsonError::TooDeep {
            max: 64,
            offset: 64
        }
    ));
    // sonic-rs 0.5 overflows the stack on this without the pre-scan.
    let huge = "{\"a\":".repeat(100_000) + "1" + &"}".repeat(100_000);
    assert!(matches!(err(huge.as_bytes()), JsonError::TooDeep { .. }));
    // Brackets inside strings do not count, escaped quotes do not end a string.
    let s = format!("{{\"a\":\"\\\"{}\"}}", "[".repeat(200));
    assert!(parse(s.as_bytes()).is_ok());
    // Many brackets, little depth.
    let wide = format!("[{}[]]", "[],".repeat(500));
    assert!(parse(wide.as_bytes()).is_ok());
    // Closing brackets inside strings do not hide depth; an escaped backslash before a quote
    // ends the string (the quote is not escaped), so the brackets after it count.
    let hidden = format!(
        "{}\"]]]]\\\\\"{}{}",
        "[".repeat(MAX_DEPTH),
        ",[1]",
        "]".repeat(MAX_DEPTH)
    );
    assert!(
        matches!(err(hidden.as_bytes()), JsonError::TooDeep { .. }),
        "{hidden}"
    );
    // A batch of 100 flat rows (more than MAX_DEPTH openers) is fine.
    let batch = format!(
        "[{}]",
        vec![r#"{"a":"[{","b":[1,{"c":"}"}]}"#; 100].join(",")
    );
    assert!(parse(batch.as_bytes()).is_ok());
}

#[test]
fn duplicate_keys_are_refused_at_any_depth() {
    let cases: &[(&str, &str, &str)] = &[
        (r#"{"a":1,"a":2}"#, "a", ""),
        (r#"{"a":1,"b":{"c":1,"c":1}}"#, "c", "b"),
        (r#"[{"x":[{"y":1,"y":2}]}]"#, "y", "[0].x[0]"),
        (r#"{"a":"\u0062","b":1,"\u0062":2}"#, "b", ""),
    ];
    for (input, key, path) in cases {
        match err(input.as_bytes()) {
            JsonError::DuplicateKey { key: k, path: p } => {
                assert_eq!((k.as_str(), p.as_str()), (*key, *path), "{input}");
            }
            other => panic!("{input}: {other:?}"),
        }
    }
    // Wide objects take the sorting path.
    let wide: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    let ok = format!("{{{}}}", wide.join(","));
    assert!(parse(ok.as_bytes()).is_ok());
    let dup = format!("{{{},\"k7\":0}}", wide.join(","));
    assert!(matches!(err(dup.as_bytes()), JsonError::DuplicateKey { key, .. } if key == "k7"));
}

#[test]
fn sonic_number_edges_are_pinned() {
    let num = |text: &str| parse(format!("{{\"a\":{text}}}").as_bytes()).unwrap_or_default();
    // i64 range: an i64.
    let v = num("9223372036854775807");
    assert_eq!(v.get("a").and_then(|x| x.as_i64()), Some(i64::MAX));
    let v = num("-9223372036854775808");
    assert_eq!(v.get("a").and_then(|x| x.as_i64()), Some(i64::MIN));
    // 2^63 .. u64::MAX: a u64, not an i64.
    let v = num("9223372036854775808");
    let a = v.get("a");
    assert_eq!(a.and_then(|x| x.as_i64()), None);
    assert_eq!(a.and_then(|x| x.as_u64()), Some(1 << 63));
    assert_eq!(a.map(|x| x.is_f64()), Some(false));
    // Beyond u64 and below i64::MIN: silently a float.
    for text in [
        "18446744073709551616",
        "1180591620717411303424",
        "-9223372036854775809",
    ] {
        let v = num(text);
        let a = v.get("a");
        assert_eq!(a.map(|x| x.is_f64()), Some(true), "{text}");
        assert_eq!(a.and_then(|x| x.as_u64()), None, "{text}");
    }
    // `-0` loses its sign and its integer-ness.
    let v = num("-0");
    assert_eq!(v.get("a").map(|x| x.is_f64()), Some(true));
    // Exponent forms are floats even when integral.
    let v = num("1E2");
    assert_eq!(v.get("a").map(|x| x.is_f64()), Some(true));
}

#[test]
fn top_level_may_be_any_value_and_whitespace_is_allowed() {
    assert!(parse(b" [1,2] ").is_ok_and(|v| v.is_array()));
    assert!(parse(b"42").is_ok_and(|v| v.is_number()));
    assert!(parse(b"\n{\"a\":1}\r\n").is_ok_and(|v| v.as_object().map(|o| o.len()) == Some(1)));
}

#[test]
fn plain_parse_leaves_duplicates_to_the_row_codec() {
    // The publish path: `parse` keeps both entries (as sonic-rs does), the codec refuses them.
    let v = parse(br#"{"a":1,"a":2}"#).expect("parse keeps duplicates");
    assert_eq!(v.as_object().map(|o| o.len()), Some(2));
    let e = RowCodec::Schemaless
        .encode_row(&v, &mut Vec::new())
        .expect_err("codec refuses");
    assert_eq!(
        (e.column.as_str(), e.reason),
        (
            "",
            RejectReason::DuplicateKey {
                key: "a".to_string()
            }
        )
    );
}
