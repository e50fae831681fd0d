//! Row validation and canonical encoding (PROTOCOL.md §5, §9), table-driven.

use corecast_storage::json;
use corecast_storage::schema::{
    write_f32, write_f64, JsonKind, RejectReason, RowCodec, RowRejected, Schema,
};

/// One column of every kind; the last seven are nullable.
const SCHEMA: &str = r#"{"type":"object","properties":{
    "b":{"type":"boolean"},
    "i":{"type":"integer"},
    "i32":{"type":"integer","format":"int32"},
    "f":{"type":"number"},
    "f32":{"type":"number","format":"float"},
    "s":{"type":"string"},
    "ns":{"type":["string","null"]},
    "hex":{"type":["string","null"],"contentEncoding":"base16"},
    "b64":{"type":["string","null"],"contentEncoding":"base64"},
    "fix":{"type":["string","null"],"contentEncoding":"base16","format":"bytes4"},
    "st":{"type":["object","null"],"properties":{"x":{"type":"integer"},"y":{"type":["string","null"]}},"required":["x"]},
    "m":{"type":["object","null"],"additionalProperties":{"type":"number"}},
    "levels":{"type":["array","null"],"items":{"type":"object","properties":{"px":{"type":"number"},"qty":{"type":"integer","format":"int32"}},"required":["px","qty"]}}
},"required":["b","i","i32","f","f32","s"]}"#;

const COLUMNS: &[&str] = &[
    "b", "i", "i32", "f", "f32", "s", "ns", "hex", "b64", "fix", "st", "m", "levels",
];

/// The base row, as raw JSON per column (`None`: left out).
fn base() -> Vec<(&'static str, Option<String>)> {
    let required = [
        ("b", "true"),
        ("i", "1"),
        ("i32", "2"),
        ("f", "1.5"),
        ("f32", "0.5"),
        ("s", "\"x\""),
    ];
    COLUMNS
        .iter()
        .map(|c| {
            (
                *c,
                required
                    .iter()
                    .find(|(k, _)| k == c)
                    .map(|(_, v)| v.to_string()),
            )
        })
        .collect()
}

/// The base row with `column` set to `raw` (or removed with `None`, or added if unknown).
fn row_with(column: &str, raw: Option<&str>) -> String {
    let mut fields = base();
    match fields.iter_mut().find(|(k, _)| *k == column) {
        Some(slot) => slot.1 = raw.map(str::to_string),
        None => fields.push((
            Box::leak(column.to_string().into_boxed_str()),
            raw.map(str::to_string),
        )),
    }
    let body: Vec<String> = fields
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("\"{k}\":{v}")))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The canonical encoding of the base row with `column` written as `raw`.
fn expected_with(column: &str, raw: &str) -> String {
    let canonical = [
        ("b", "true"),
        ("i", "1"),
        ("i32", "2"),
        ("f", "1.5"),
        ("f32", "0.5"),
        ("s", "\"x\""),
    ];
    let body: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let v = if *c == column {
                raw
            } else {
                canonical
                    .iter()
                    .find(|(k, _)| k == c)
                    .map_or("null", |(_, v)| v)
            };
            format!("\"{c}\":{v}")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

fn codec() -> RowCodec {
    RowCodec::Schema(Schema::compile(SCHEMA).expect("schema"))
}

/// Encodes `text` (parsed by sonic-rs directly, so duplicate keys reach the codec).
fn encode(codec: &RowCodec, text: &str) -> Result<String, RowRejected> {
    let value: sonic_rs::Value = sonic_rs::from_str(text).expect("test row is JSON");
    let mut out = b"prefix".to_vec();
    let result = codec.encode_row(&value, &mut out);
    match result {
        Ok(()) => {
            assert!(out.starts_with(b"prefix"));
            Ok(String::from_utf8(out[6..].to_vec()).expect("UTF-8"))
        }
        Err(e) => {
            assert_eq!(out, b"prefix", "a refusal leaves the buffer as it was");
            Err(e)
        }
    }
}

#[test]
fn base_row_fills_nullable_columns_with_null() {
    let codec = codec();
    assert_eq!(
        encode(&codec, &row_with("ns", None)).expect("ok"),
        r#"{"b":true,"i":1,"i32":2,"f":1.5,"f32":0.5,"s":"x","ns":null,"hex":null,"b64":null,"fix":null,"st":null,"m":null,"levels":null}"#
    );
}

#[test]
fn accepted_values_are_written_canonically() {
    let codec = codec();
    // (column, value sent, value written)
    let cases: &[(&str, &str, &str)] = &[
        ("b", "true", "true"),
        ("b", "false", "false"),
        ("i", "0", "0"),
        ("i", "-1", "-1"),
        ("i", "9223372036854775807", "9223372036854775807"),
        ("i", "-9223372036854775808", "-9223372036854775808"),
        ("i", "9007199254740993", "9007199254740993"),
        ("i", "1703422805243925307", "1703422805243925307"),
        ("i32", "2147483647", "2147483647"),
        ("i32", "-2147483648", "-2147483648"),
        ("i32", "0", "0"),
        // number: always a float, shortest round-trip, `.0` on integral values.
        ("f", "85565", "85565.0"),
        ("f", "85566.0", "85566.0"),
        ("f", "0.015", "0.015"),
        ("f", "1e-7", "1e-7"),
        ("f", "0.0000001", "1e-7"),
        ("f", "1E20", "1e20"),
        ("f", "100000000000000000000", "1e20"),
        ("f", "1e16", "1e16"),
        ("f", "1e15", "1000000000000000.0"),
        ("f", "0.00001", "0.00001"),
        ("f", "0.000001", "1e-6"),
        ("f", "-2.5", "-2.5"),
        ("f", "0", "0.0"),
        ("f", "-0.0", "0.0"),
        ("f", "9007199254740993", "9007199254740992.0"),
        ("f", "18446744073709551615", "1.8446744073709552e19"),
        ("f", "0.00031099999999999997", "0.00031099999999999997"),
        ("f", "0.000311", "0.000311"),
        ("f", "5e-324", "5e-324"),
        ("f", "1.7976931348623157e308", "1.7976931348623157e308"),
        ("f", "1e-400", "0.0"),
        ("f", "-1e-400", "0.0"),
        // float: the f32's own shortest form.
        ("f32", "0.1", "0.1"),
        ("f32", "1", "1.0"),
        ("f32", "0.3", "0.3"),
        ("f32", "16777217", "16777216.0"),
        ("f32", "3.4028235e38", "3.4028235e38"),
        ("f32", "-3.4028235e38", "-3.4028235e38"),
        ("f32", "1e13", "1e13"),
        ("f32", "1e12", "1000000000000.0"),
        ("f32", "0.000001", "0.000001"),
        ("f32", "1e-46", "0.0"),
        ("f32", "-1e-46", "0.0"),
        ("f32", "-1e-400", "0.0"),
        ("f32", "1.401298464324817e-45", "1e-45"),
        // strings: raw UTF-8, controls escaped, escapes normalised.
        ("s", "\"\"", "\"\""),
        ("s", "\"é😀中\"", "\"é😀中\""),
        ("s", r#""\u00e9\ud83d\ude00""#, "\"é😀\""),
        ("s", r#""a\"b\\c\/d""#, r#""a\"b\\c/d""#),
        (
            "s",
            r#""\n\t\r\b\f\u0001\u001f""#,
            r#""\n\t\r\b\f\u0001\u001f""#,
        ),
        ("s", r#""\u2028\u007f""#, "\"\u{2028}\u{7f}\""),
        ("ns", "null", "null"),
        ("ns", "\"y\"", "\"y\""),
        // binary
        ("hex", "\"DEADbeef00\"", "\"deadbeef00\""),
        ("hex", "\"\"", "\"\""),
        ("b64", "\"aGVsbG8=\"", "\"aGVsbG8=\""),
        ("b64", "\"aGVsbG8h\"", "\"aGVsbG8h\""),
        ("b64", "\"\"", "\"\""),
        ("fix", "\"0011AAff\"", "\"0011aaff\""),
        // struct: declared order, nullable fields filled.
        ("st", r#"{"x":1}"#, r#"{"x":1,"y":null}"#),
        ("st", r#"{"y":"a","x":2}"#, r#"{"x":2,"y":"a"}"#),
        ("st", r#"{"x":3,"y":null}"#, r#"{"x":3,"y":null}"#),
        // map: the publisher's key order, values as the value type.
        ("m", "{}", "{}"),
        (
            "m",
            r#"{"b":1,"a":2.5,"é":1e20}"#,
            r#"{"b":1.0,"a":2.5,"é":1e20}"#,
        ),
        // list
        ("levels", "[]", "[]"),
        (
            "levels",
            r#"[{"qty":1,"px":4799},{"px":4799.25,"qty":-3}]"#,
            r#"[{"px":4799.0,"qty":1},{"px":4799.25,"qty":-3}]"#,
        ),
    ];
    for (column, sent, written) in cases {
        let got = encode(&codec, &row_with(column, Some(sent)))
            .unwrap_or_else(|e| panic!("{column}={sent}: {e}"));
        assert_eq!(got, expected_with(column, written), "{column}={sent}");
        // Canonical means a fixed point: encoding the encoding changes nothing.
        assert_eq!(
            encode(&codec, &got).as_deref(),
            Ok(got.as_str()),
            "{column}={sent}"
        );
    }
}

#[test]
fn keys_come_out_in_schema_order_whatever_order_they_came_in() {
    let codec = codec();
    let got = encode(
        &codec,
        r#"{"levels":[],"s":"x","f32":0.5,"f":1.5,"i32":2,"i":1,"b":true}"#,
    )
    .expect("ok");
    assert_eq!(got, expected_with("levels", "[]"));
}

type Check = fn(&RejectReason) -> bool;

#[test]
fn refusals_name_the_column_path() {
    let codec = codec();
    // (column, value sent (None: left out), column path reported, check)
    let cases: &[(&str, Option<&str>, &str, Check)] = &[
        // present / null
        ("i", None, "i", |r| *r == RejectReason::Missing),
        ("i", Some("null"), "i", |r| *r == RejectReason::Null),
        ("s", Some("null"), "s", |r| *r == RejectReason::Null),
        // booleans and integers never stand in for each other
        ("b", Some("1"), "b", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "a boolean",
                    got: JsonKind::Integer
                }
            )
        }),
        ("b", Some("\"true\""), "b", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::String,
                    ..
                }
            )
        }),
        ("i", Some("true"), "i", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "an integer",
                    got: JsonKind::Boolean
                }
            )
        }),
        ("i32", Some("false"), "i32", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::Boolean,
                    ..
                }
            )
        }),
        // floats are never integers
        (
            "i",
            Some("2.0"),
            "i",
            |r| matches!(r, RejectReason::FloatForInteger { value } if value == "2.0"),
        ),
        (
            "i",
            Some("1e2"),
            "i",
            |r| matches!(r, RejectReason::FloatForInteger { value } if value == "100.0"),
        ),
        ("i", Some("0.5"), "i", |r| {
            matches!(r, RejectReason::FloatForInteger { .. })
        }),
        ("i", Some("\"1\""), "i", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::String,
                    ..
                }
            )
        }),
        // int64 range: refusals, never panics
        (
            "i",
            Some("9223372036854775808"),
            "i",
            |r| matches!(r, RejectReason::OutOfRange { value, declared: "int64" } if value == "9223372036854775808"),
        ),
        ("i", Some("18446744073709551615"), "i", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int64",
                    ..
                }
            )
        }),
        ("i", Some("18446744073709551616"), "i", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int64",
                    ..
                }
            )
        }),
        (
            "i",
            Some("1180591620717411303424"),
            "i",
            |r| matches!(r, RejectReason::OutOfRange { value, declared: "int64" } if value == "1.1805916207174113e21"),
        ),
        ("i", Some("-9223372036854775809"), "i", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int64",
                    ..
                }
            )
        }),
        ("i", Some("1e19"), "i", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int64",
                    ..
                }
            )
        }),
        // int32 range
        (
            "i32",
            Some("2147483648"),
            "i32",
            |r| matches!(r, RejectReason::OutOfRange { value, declared: "int32" } if value == "2147483648"),
        ),
        ("i32", Some("-2147483649"), "i32", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int32",
                    ..
                }
            )
        }),
        ("i32", Some("9223372036854775808"), "i32", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "int32",
                    ..
                }
            )
        }),
        ("i32", Some("2.0"), "i32", |r| {
            matches!(r, RejectReason::FloatForInteger { .. })
        }),
        // numbers
        ("f", Some("\"100.5\""), "f", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "a number",
                    got: JsonKind::String
                }
            )
        }),
        ("f", Some("true"), "f", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::Boolean,
                    ..
                }
            )
        }),
        ("f", Some("[1]"), "f", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::Array,
                    ..
                }
            )
        }),
        // float32 range
        (
            "f32",
            Some("3.5e38"),
            "f32",
            |r| matches!(r, RejectReason::OutOfRange { value, declared: "float32" } if value == "3.5e38"),
        ),
        ("f32", Some("-1e39"), "f32", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "float32",
                    ..
                }
            )
        }),
        ("f32", Some("1e300"), "f32", |r| {
            matches!(
                r,
                RejectReason::OutOfRange {
                    declared: "float32",
                    ..
                }
            )
        }),
        (
            "f32",
            Some("340282356779733661637539395458142568448"),
            "f32",
            |r| {
                matches!(
                    r,
                    RejectReason::OutOfRange {
                        declared: "float32",
                        ..
                    }
                )
            },
        ),
        // strings
        ("s", Some("5"), "s", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "a string",
                    got: JsonKind::Integer
                }
            )
        }),
        ("s", Some("{}"), "s", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::Object,
                    ..
                }
            )
        }),
        // binary
        ("hex", Some("\"abc\""), "hex", |r| {
            matches!(
                r,
                RejectReason::BadBinary {
                    encoding: "base16",
                    ..
                }
            )
        }),
        ("hex", Some("\"zz\""), "hex", |r| {
            matches!(
                r,
                RejectReason::BadBinary {
                    encoding: "base16",
                    ..
                }
            )
        }),
        ("hex", Some("\"0x00\""), "hex", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("hex", Some("\"é0\""), "hex", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("hex", Some("12"), "hex", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "a base16 string",
                    ..
                }
            )
        }),
        ("b64", Some("\"aGVsbG8\""), "b64", |r| {
            matches!(
                r,
                RejectReason::BadBinary {
                    encoding: "base64",
                    ..
                }
            )
        }),
        ("b64", Some("\"aGVsbG9=\""), "b64", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("b64", Some("\"aGV-bG8=\""), "b64", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("b64", Some("\"aGVs bG8=\""), "b64", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("b64", Some("\"aGVsbG8=\\n\""), "b64", |r| {
            matches!(r, RejectReason::BadBinary { .. })
        }),
        ("fix", Some("\"001122\""), "fix", |r| {
            *r == RejectReason::BinaryLength {
                expected: 4,
                got: 3,
            }
        }),
        ("fix", Some("\"0011223344\""), "fix", |r| {
            *r == RejectReason::BinaryLength {
                expected: 4,
                got: 5,
            }
        }),
        // struct
        ("st", Some("5"), "st", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "an object",
                    ..
                }
            )
        }),
        ("st", Some("[]"), "st", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    got: JsonKind::Array,
                    ..
                }
            )
        }),
        ("st", Some(r#"{"x":"a"}"#), "st.x", |r| {
            matches!(r, RejectReason::WrongType { .. })
        }),
        ("st", Some("{}"), "st.x", |r| *r == RejectReason::Missing),
        ("st", Some(r#"{"x":null}"#), "st.x", |r| {
            *r == RejectReason::Null
        }),
        (
            "st",
            Some(r#"{"x":1,"z":2,"w":3}"#),
            "st",
            |r| matches!(r, RejectReason::UnknownKeys { unknown, declared } if unknown == &["z", "w"] && declared == "['x', 'y']"),
        ),
        (
            "st",
            Some(r#"{"x":1,"x":2}"#),
            "st",
            |r| matches!(r, RejectReason::DuplicateKey { key } if key == "x"),
        ),
        // map
        ("m", Some("[]"), "m", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "an object",
                    got: JsonKind::Array
                }
            )
        }),
        ("m", Some("1"), "m", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "an object",
                    ..
                }
            )
        }),
        ("m", Some(r#"{"a":1,"b":"x"}"#), "m.b", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "a number",
                    ..
                }
            )
        }),
        ("m", Some(r#"{"a":null}"#), "m.a", |r| {
            *r == RejectReason::Null
        }),
        (
            "m",
            Some(r#"{"a":1,"a":2}"#),
            "m",
            |r| matches!(r, RejectReason::DuplicateKey { key } if key == "a"),
        ),
        // list
        ("levels", Some("{}"), "levels", |r| {
            matches!(
                r,
                RejectReason::WrongType {
                    expected: "an array",
                    ..
                }
            )
        }),
        (
            "levels",
            Some(r#"[{"px":1,"qty":1},{"px":"x","qty":1}]"#),
            "levels[1].px",
            |r| matches!(r, RejectReason::WrongType { .. }),
        ),
        ("levels", Some("[null]"), "levels[0]", |r| {
            *r == RejectReason::Null
        }),
        ("levels", Some(r#"[{"px":1}]"#), "levels[0].qty", |r| {
            *r == RejectReason::Missing
        }),
        (
            "levels",
            Some(
                r#"[{"px":1,"qty":1},{"px":1,"qty":1},{"px":1,"qty":1},{"px":1,"qty":2147483648}]"#,
            ),
            "levels[3].qty",
            |r| {
                matches!(
                    r,
                    RejectReason::OutOfRange {
                        declared: "int32",
                        ..
                    }
                )
            },
        ),
        // whole-row faults
        (
            "extra",
            Some("1"),
            "",
            |r| matches!(r, RejectReason::UnknownKeys { unknown, .. } if unknown == &["extra"]),
        ),
        ("streamcast_ts", Some("1"), "", |r| {
            *r == RejectReason::Reserved {
                key: "streamcast_ts",
            }
        }),
        ("litelink_offset", Some("1"), "", |r| {
            *r == RejectReason::Reserved {
                key: "litelink_offset",
            }
        }),
        (
            "b",
            Some("true,\"b\":false"),
            "",
            |r| matches!(r, RejectReason::DuplicateKey { key } if key == "b"),
        ),
    ];
    for (column, sent, path, check) in cases {
        let text = row_with(column, *sent);
        let e = match encode(&codec, &text) {
            Ok(out) => panic!("{text} was accepted as {out}"),
            Err(e) => e,
        };
        assert_eq!(e.column, *path, "{text}: {e}");
        assert!(check(&e.reason), "{text}: {e:?}");
        let message = e.to_string();
        if !path.is_empty() {
            assert!(message.contains(&format!("'{path}'")), "{message}");
        }
    }
}

#[test]
fn refusal_messages_read_like_the_reference() {
    let codec = codec();
    let message = |column: &str, sent: Option<&str>| {
        encode(&codec, &row_with(column, sent))
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        message("extra", Some("1")),
        "row names columns this log does not have: ['extra']. Declared: ['b', 'b64', 'f', 'f32', 'fix', 'hex', 'i', 'i32', 'levels', 'm', 'ns', 's', 'st', 'streamcast_ts']"
    );
    assert_eq!(
        message("streamcast_ts", Some("1")),
        "'streamcast_ts' is stamped by the server; a row cannot supply it"
    );
    assert!(message("litelink_offset", Some("1"))
        .starts_with("`offset` is assigned by the library and cannot be supplied (I11)"));
    assert_eq!(
        message("i32", Some("2147483648")),
        "column 'i32' cannot hold 2147483648: it is declared int32 (-2147483648 to 2147483647)"
    );
    assert_eq!(message("i", None), "column 'i' is required but absent");
    assert_eq!(
        message("i", Some("null")),
        "column 'i' is not nullable but was supplied as null"
    );
    assert_eq!(
        message("i", Some("true")),
        "column 'i' takes an integer, not a boolean"
    );
    assert_eq!(
        message("i", Some("2.0")),
        "column 'i' takes integers, not the float 2.0 (send it without a fraction or exponent)"
    );
    assert_eq!(
        message("hex", Some("\"abc\"")),
        "column 'hex' is not valid base16: odd number of hex digits (3)"
    );
    assert_eq!(
        message("fix", Some("\"00\"")),
        "column 'fix' holds 1 bytes; it is declared bytes4"
    );
}

#[test]
fn the_four_required_nullable_combinations() {
    // required + plain, required + nullable, optional + nullable (optional + plain is refused by
    // the compiler).
    let schema = Schema::compile(
        r#"{"type":"object","properties":{"rp":{"type":"integer"},"rn":{"type":["integer","null"]},"on":{"type":["integer","null"]}},"required":["rp","rn"]}"#,
    )
    .expect("schema");
    assert!(Schema::compile(
        r#"{"type":"object","properties":{"op":{"type":"integer"}},"required":[]}"#
    )
    .is_err());
    let codec = RowCodec::Schema(schema);
    type Want = Result<&'static str, (&'static str, RejectReason)>;
    let cases: &[(&str, Want)] = &[
        (r#"{"rp":1,"rn":2,"on":3}"#, Ok(r#"{"rp":1,"rn":2,"on":3}"#)),
        (r#"{"rp":1}"#, Ok(r#"{"rp":1,"rn":null,"on":null}"#)),
        (
            r#"{"rp":1,"rn":null,"on":null}"#,
            Ok(r#"{"rp":1,"rn":null,"on":null}"#),
        ),
        (r#"{"rn":1}"#, Err(("rp", RejectReason::Missing))),
        (r#"{"rp":null}"#, Err(("rp", RejectReason::Null))),
    ];
    for (sent, want) in cases {
        let got = encode(&codec, sent).map_err(|e| (e.column, e.reason));
        let want = want
            .clone()
            .map(str::to_string)
            .map_err(|(c, r)| (c.to_string(), r));
        assert_eq!(got, want, "{sent}");
    }
}

#[test]
fn non_object_rows_are_refused_whole() {
    for codec in [codec(), RowCodec::Schemaless] {
        for (text, kind) in [
            ("[1]", JsonKind::Array),
            ("1", JsonKind::Integer),
            ("\"x\"", JsonKind::String),
            ("null", JsonKind::Null),
        ] {
            let e = encode(&codec, text).expect_err("refused");
            assert_eq!(e.column, "");
            assert_eq!(e.reason, RejectReason::NotAnObject { got: kind });
            assert!(e.to_string().starts_with("a row must be a JSON object"));
        }
    }
}

#[test]
fn schemaless_rows_keep_order_and_values_compactly() {
    let codec = RowCodec::Schemaless;
    let cases: &[(&str, &str)] = &[
        (
            r#"{"b":2,"a":1.0,"flag":true,"n":null}"#,
            r#"{"b":2,"a":1.0,"flag":true,"n":null}"#,
        ),
        (
            "{ \"a\" : 1 ,\n \"b\" : [ 1 , 2.50 , \"x\\u00e9\" ] , \"c\" : { \"d\" : 1E20 } }",
            r#"{"a":1,"b":[1,2.5,"xé"],"c":{"d":1e20}}"#,
        ),
        (r#"{"s":"a\nb\u2028"}"#, "{\"s\":\"a\\nb\u{2028}\"}"),
        (
            r#"{"big":18446744073709551615,"min":-9223372036854775808,"ns":1703422805243925307}"#,
            r#"{"big":18446744073709551615,"min":-9223372036854775808,"ns":1703422805243925307}"#,
        ),
        (
            r#"{"streamcast_ts":1,"x":{}}"#,
            r#"{"streamcast_ts":1,"x":{}}"#,
        ),
        (r#"{}"#, r#"{}"#),
        (r#"{"a":[[],[{}]]}"#, r#"{"a":[[],[{}]]}"#),
        (
            r#"{"f":0.1,"g":1e-7,"h":123456789.0}"#,
            r#"{"f":0.1,"g":1e-7,"h":123456789.0}"#,
        ),
        // every float zero is `0.0`, a negative one reached by underflow (the fuzzer's find)
        // as much as the literal `-0.0`, so the canonical row reads back to itself
        (
            r#"{"a":-1e-400,"b":-0.0,"c":[-0e3,1e-400],"d":-0}"#,
            r#"{"a":0.0,"b":0.0,"c":[0.0,0.0],"d":0.0}"#,
        ),
    ];
    for (sent, written) in cases {
        let got = encode(&codec, sent).unwrap_or_else(|e| panic!("{sent}: {e}"));
        assert_eq!(got, *written, "{sent}");
        assert!(!got.contains('\n'));
        let again = encode(&codec, &got).unwrap_or_else(|e| panic!("{got}: {e}"));
        assert_eq!(again, got, "the canonical row of {sent} is not stable");
    }
    let e = encode(&codec, r#"{"a":{"b":[{"c":1,"c":2}]}}"#).expect_err("duplicate");
    assert_eq!(e.column, "a.b[0]");
    assert_eq!(
        e.reason,
        RejectReason::DuplicateKey {
            key: "c".to_string()
        }
    );
}

#[test]
fn json_parse_then_encode_is_the_publish_path() {
    // The engine's path: json::parse refuses what is not JSON (bad_frame); encode_row refuses
    // what the schema does not allow (rejected). A 2^63 integer is the latter, naming the column.
    let codec = codec();
    let text = row_with("i", Some("9223372036854775808"));
    let value = json::parse(text.as_bytes()).expect("JSON");
    let mut out = Vec::new();
    let e = codec.encode_row(&value, &mut out).expect_err("rejected");
    assert_eq!(e.column, "i");
    assert!(out.is_empty());
    let text = row_with("i", Some("1e400"));
    assert!(json::parse(text.as_bytes()).is_err());
    // A batch into one buffer: each row appended in turn.
    let mut out = Vec::new();
    for i in 0..3 {
        let text = row_with("i", Some(&i.to_string()));
        let value = json::parse(text.as_bytes()).expect("JSON");
        codec.encode_row(&value, &mut out).expect("ok");
        out.push(b'\n');
    }
    assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 3);
}

/// JSON `-0` is an integer literal (RFC 8259 §6) meaning 0: an integer column takes it on the
/// publish path (json::parse, which hands it over as the float 0.0) and writes `0`.
#[test]
fn minus_zero_in_an_integer_column_is_the_integer_0() {
    let codec = codec();
    let publish = |text: &str| {
        let value = json::parse(text.as_bytes()).expect("JSON");
        let mut out = Vec::new();
        codec
            .encode_row(&value, &mut out)
            .map(|()| String::from_utf8(out).expect("UTF-8"))
    };
    for col in ["i", "i32"] {
        assert_eq!(
            publish(&row_with(col, Some("-0"))),
            Ok(expected_with(col, "0")),
            "{col}"
        );
    }
    // nested integer fields too
    assert_eq!(
        publish(&row_with("st", Some(r#"{"x":-0}"#))),
        Ok(expected_with("st", r#"{"x":0,"y":null}"#))
    );
    assert_eq!(
        publish(&row_with("levels", Some(r#"[{"px":-0,"qty":-0}]"#))),
        Ok(expected_with("levels", r#"[{"px":0.0,"qty":0}]"#))
    );
    // any other float is still refused
    for float in ["-0.5", "-1e2", "2.0"] {
        let e = publish(&row_with("i", Some(float))).expect_err(float);
        assert!(
            matches!(e.reason, RejectReason::FloatForInteger { .. }),
            "{float}: {e:?}"
        );
    }
}

/// An independent formatter: `std`'s shortest digits (`{:e}`), laid out as msgspec / ryu do.
fn reference_layout(sci: &str, max_fixed: i32, min_fixed: i32) -> String {
    let (mantissa, exp) = sci.split_once('e').expect("sci");
    let exp: i32 = exp.parse().expect("exp");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if digits == "0" {
        return format!("{sign}0.0");
    }
    let length = digits.len() as i32;
    let kk = exp + 1;
    let k = kk - length;
    let body = if 0 <= k && kk <= max_fixed {
        format!("{digits}{}.0", "0".repeat(k as usize))
    } else if 0 < kk && kk <= max_fixed {
        format!("{}.{}", &digits[..kk as usize], &digits[kk as usize..])
    } else if min_fixed < kk && kk <= 0 {
        format!("0.{}{digits}", "0".repeat((-kk) as usize))
    } else if length == 1 {
        format!("{digits}e{}", kk - 1)
    } else {
        format!("{}.{}e{}", &digits[..1], &digits[1..], kk - 1)
    };
    format!("{sign}{body}")
}

/// Equal, or a tie between two equally near shortest candidates (1308548795726862.25 → `.2` or
/// `.3`): std rounds half up, ryu (so msgspec) and zmij round half to even. Same layout, same
/// length, differing only in the last digit, which must be even in ours.
fn same_or_even_tie(got: &str, want: &str) -> bool {
    if got == want {
        return true;
    }
    let (g, w) = (got.as_bytes(), want.as_bytes());
    let last_digit = |s: &[u8]| s.iter().rposition(u8::is_ascii_digit);
    let (Some(i), Some(j)) = (
        last_digit(&g[..g.iter().position(|b| *b == b'e').unwrap_or(g.len())]),
        last_digit(&w[..w.iter().position(|b| *b == b'e').unwrap_or(w.len())]),
    ) else {
        return false;
    };
    i == j
        && g.len() == w.len()
        && g[..i] == w[..i]
        && g[i + 1..] == w[i + 1..]
        && (g[i] - b'0').is_multiple_of(2)
        && g[i].abs_diff(w[i]) == 1
}

#[test]
fn float_layout_matches_an_independent_formatter() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut out = Vec::new();
    let mut checked = 0;
    let mut ties = 0;
    for i in 0..200_000u32 {
        let bits = next();
        // Half random bit patterns (all magnitudes), half "decimal-looking" values.
        let v = if i % 2 == 0 {
            f64::from_bits(bits)
        } else {
            (bits % 10_000_000) as f64 / 10f64.powi((bits >> 60) as i32)
        };
        if !v.is_finite() {
            continue;
        }
        out.clear();
        write_f64(&mut out, v);
        let got = std::str::from_utf8(&out).expect("ascii");
        let want = reference_layout(&format!("{v:e}"), 16, -5);
        assert_eq!(got.parse::<f64>().ok(), Some(v), "round trip {got}");
        assert!(same_or_even_tie(got, &want), "{v:?}: {got} vs {want}");
        if got != want {
            ties += 1;
        }
        let w = f32::from_bits(bits as u32);
        if w.is_finite() {
            out.clear();
            write_f32(&mut out, w);
            let got = std::str::from_utf8(&out).expect("ascii");
            let want = reference_layout(&format!("{w:e}"), 13, -6);
            assert_eq!(got.parse::<f32>().ok(), Some(w), "round trip {got}");
            assert!(same_or_even_tie(got, &want), "{w:?}: {got} vs {want}");
            if got != want {
                ties += 1;
            }
        }
        checked += 1;
    }
    assert!(checked > 150_000);
    assert!(ties < 1_000, "{ties} ties");
}
