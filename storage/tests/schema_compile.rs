//! Schema compiler: the JSON Schema subset of PROTOCOL.md §9 in, Arrow and the greeting's form out.

use std::sync::Arc;

use arrow_schema::{DataType, Field};
use corecast_storage::schema::{
    BinaryEncoding, ColumnType, Schema, SchemaError, SchemaFault, ENCODING_METADATA_KEY,
};

fn compile(text: &str) -> Schema {
    Schema::compile(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn refuse(text: &str) -> SchemaError {
    match Schema::compile(text) {
        Ok(s) => panic!("{text} compiled to {}", s.published()),
        Err(e) => e,
    }
}

/// A one-column schema `{"c": <column>}` with `c` required unless `optional`.
fn one(column: &str, optional: bool) -> String {
    let required = if optional { "[]" } else { "[\"c\"]" };
    format!(r#"{{"type":"object","properties":{{"c":{column}}},"required":{required}}}"#)
}

const TRADE: &str = include_str!("../../../shared/tools/anchor/trade.schema.json");

#[test]
fn trade_schema_publishes_byte_exact_as_the_captured_greeting() {
    let schema = compile(TRADE);
    assert_eq!(
        schema.published(),
        r#"{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},"price":{"type":"number","format":"double"},"amount":{"type":"number","format":"double"},"side":{"type":"integer","format":"int32"},"symbol":{"type":"string"},"trade_id":{"type":"integer","format":"int64"}},"required":["event_ts","price","amount","side","symbol","trade_id"]}"#
    );
    let names: Vec<&str> = schema.column_names().collect();
    assert_eq!(
        names,
        ["event_ts", "price", "amount", "side", "symbol", "trade_id"]
    );
    assert_eq!(
        schema.declared_list(),
        "['amount', 'event_ts', 'price', 'side', 'streamcast_ts', 'symbol', 'trade_id']"
    );
}

#[test]
fn every_column_type_compiles_and_publishes_explicitly() {
    // (declared column, published column, nullable)
    let cases: &[(&str, &str)] = &[
        (r#"{"type":"boolean"}"#, r#"{"type":"boolean"}"#),
        (
            r#"{"type":"integer"}"#,
            r#"{"type":"integer","format":"int64"}"#,
        ),
        (
            r#"{"type":"integer","format":"int64"}"#,
            r#"{"type":"integer","format":"int64"}"#,
        ),
        (
            r#"{"type":"integer","format":"int32"}"#,
            r#"{"type":"integer","format":"int32"}"#,
        ),
        (
            r#"{"type":"number"}"#,
            r#"{"type":"number","format":"double"}"#,
        ),
        (
            r#"{"format":"float","type":"number"}"#,
            r#"{"type":"number","format":"float"}"#,
        ),
        (
            r#"{"type":"number","format":"double","description":"d","title":"t","$comment":"c"}"#,
            r#"{"type":"number","format":"double"}"#,
        ),
        (r#"{"type":"string"}"#, r#"{"type":"string"}"#),
        (r#"{"type":["string"]}"#, r#"{"type":"string"}"#),
        (
            r#"{"type":"string","contentEncoding":"base16"}"#,
            r#"{"type":"string","contentEncoding":"base16"}"#,
        ),
        (
            r#"{"type":"string","format":"bytes8","contentEncoding":"base64"}"#,
            r#"{"type":"string","contentEncoding":"base64","format":"bytes8"}"#,
        ),
        (
            r#"{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":["number","null"]}},"required":["x"]}"#,
            r#"{"type":"object","properties":{"x":{"type":"integer","format":"int64"},"y":{"type":["number","null"],"format":"double"}},"required":["x"],"additionalProperties":false}"#,
        ),
        (
            r#"{"type":"object","properties":{"x":{"type":["integer","null"]}},"additionalProperties":false}"#,
            r#"{"type":"object","properties":{"x":{"type":["integer","null"],"format":"int64"}},"required":[],"additionalProperties":false}"#,
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":"number"}}"#,
            r#"{"type":"object","additionalProperties":{"type":"number","format":"double"}}"#,
        ),
        (
            r#"{"type":"array","items":{"type":"string"}}"#,
            r#"{"type":"array","items":{"type":"string"}}"#,
        ),
        (
            r#"{"type":"array","items":{"type":"object","properties":{"px":{"type":"number"},"qty":{"type":"integer","format":"int32"}},"required":["px","qty"]}}"#,
            r#"{"type":"array","items":{"type":"object","properties":{"px":{"type":"number","format":"double"},"qty":{"type":"integer","format":"int32"}},"required":["px","qty"],"additionalProperties":false}}"#,
        ),
    ];
    for (declared, published) in cases {
        let schema = compile(&one(declared, false));
        assert_eq!(
            schema.published(),
            format!(r#"{{"type":"object","properties":{{"c":{published}}},"required":["c"]}}"#),
            "{declared}"
        );
        // The published form compiles back to the same schema.
        assert_eq!(compile(&schema.published()), schema, "{declared}");
    }
}

#[test]
fn nullable_columns_publish_as_t_null_and_leave_required() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"type":["integer","null"],"format":"int32"}"#,
            r#"{"type":["integer","null"],"format":"int32"}"#,
        ),
        (
            r#"{"type":["null","string"]}"#,
            r#"{"type":["string","null"]}"#,
        ),
        (
            r#"{"type":["string","null"],"contentEncoding":"base64","format":"bytes8"}"#,
            r#"{"type":["string","null"],"contentEncoding":"base64","format":"bytes8"}"#,
        ),
        (
            r#"{"type":["object","null"],"additionalProperties":{"type":"number","format":"double"}}"#,
            r#"{"type":["object","null"],"additionalProperties":{"type":"number","format":"double"}}"#,
        ),
        (
            r#"{"type":["array","null"],"items":{"type":"boolean"}}"#,
            r#"{"type":["array","null"],"items":{"type":"boolean"}}"#,
        ),
    ];
    for (declared, published) in cases {
        let schema = compile(&one(declared, true));
        assert_eq!(
            schema.published(),
            format!(r#"{{"type":"object","properties":{{"c":{published}}},"required":[]}}"#),
            "{declared}"
        );
        assert!(schema.columns()[0].nullable());
    }
}

#[test]
fn required_and_nullable_combinations() {
    // required + plain: non-null; optional + nullable: nullable; required + nullable: nullable
    // (the greeting leaves it out of required); optional + plain: refused naming both fixes.
    let s = compile(&one(r#"{"type":"integer"}"#, false));
    assert!(!s.columns()[0].nullable());
    let s = compile(&one(r#"{"type":["integer","null"]}"#, true));
    assert!(s.columns()[0].nullable());
    let s = compile(&one(r#"{"type":["integer","null"]}"#, false));
    assert!(s.columns()[0].nullable());
    assert!(s.published().ends_with(r#""required":[]}"#));
    let e = refuse(&one(r#"{"type":"integer"}"#, true));
    assert_eq!(e.path, "c");
    assert!(matches!(
        e.fault,
        SchemaFault::OptionalNotNullable { ref name, ty: "integer" } if name == "c"
    ));
    let text = e.to_string();
    assert!(text.contains("add it to \"required\""), "{text}");
    assert!(text.contains("[\"integer\", \"null\"]"), "{text}");
    // No `required` at all: every plain column is optional, so refused.
    let e = refuse(r#"{"type":"object","properties":{"a":{"type":"string"}}}"#);
    assert!(matches!(e.fault, SchemaFault::OptionalNotNullable { .. }));
    // Inside a struct too.
    let e = refuse(&one(
        r#"{"type":"object","properties":{"x":{"type":"boolean"}}}"#,
        false,
    ));
    assert_eq!(e.path, "c.x");
    assert!(matches!(e.fault, SchemaFault::OptionalNotNullable { .. }));
}

#[test]
fn refusals_name_the_place_and_the_fault() {
    type Check = fn(&SchemaFault) -> bool;
    let cases: &[(&str, &str, Check)] = &[
        // Top level.
        ("[1]", "", |f| matches!(f, SchemaFault::NotAnObject { .. })),
        ("{", "", |f| matches!(f, SchemaFault::NotJson(_))),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"},"a":{"type":"string"}},"required":["a"]}"#,
            "",
            |f| matches!(f, SchemaFault::NotJson(_)),
        ),
        (r#"{"type":"array","items":{"type":"string"}}"#, "", |f| {
            matches!(f, SchemaFault::TopLevelNotObject { .. })
        }),
        (
            r#"{"type":["object","null"],"properties":{"a":{"type":"string"}},"required":["a"]}"#,
            "",
            |f| matches!(f, SchemaFault::TopLevelNotObject { .. }),
        ),
        (
            r#"{"properties":{"a":{"type":"string"}},"required":["a"]}"#,
            "",
            |f| matches!(f, SchemaFault::MissingType),
        ),
        (r#"{"type":"object"}"#, "", |f| {
            matches!(f, SchemaFault::NoProperties)
        }),
        (r#"{"type":"object","properties":{}}"#, "", |f| {
            matches!(f, SchemaFault::NoProperties)
        }),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"string"}}"#,
            "",
            |f| matches!(f, SchemaFault::StructAndMap),
        ),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":true}"#,
            "",
            |f| matches!(f, SchemaFault::BadAdditionalProperties { .. }),
        ),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a","b"]}"#,
            "",
            |f| matches!(f, SchemaFault::RequiredUnknown { name } if name == "b"),
        ),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a","a"]}"#,
            "",
            |f| matches!(f, SchemaFault::RequiredTwice { .. }),
        ),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":"a"}"#,
            "",
            |f| matches!(f, SchemaFault::BadRequired),
        ),
        (
            r#"{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"minProperties":1}"#,
            "",
            |f| matches!(f, SchemaFault::UnknownKeyword { keyword } if keyword == "minProperties"),
        ),
        (
            r#"{"type":"object","properties":[],"required":[]}"#,
            "",
            |f| matches!(f, SchemaFault::BadProperties),
        ),
        // Reserved names.
        (
            r#"{"type":"object","properties":{"streamcast_ts":{"type":"integer"}},"required":["streamcast_ts"]}"#,
            "streamcast_ts",
            |f| matches!(f, SchemaFault::Reserved { .. }),
        ),
        (
            r#"{"type":"object","properties":{"litelink_offset":{"type":"integer"}},"required":["litelink_offset"]}"#,
            "litelink_offset",
            |f| matches!(f, SchemaFault::Reserved { .. }),
        ),
        (
            r#"{"type":"object","properties":{"":{"type":"integer"}},"required":[""]}"#,
            "",
            |f| matches!(f, SchemaFault::EmptyName),
        ),
    ];
    for (text, path, check) in cases {
        let e = refuse(text);
        assert_eq!(e.path, *path, "{text}: {e}");
        assert!(check(&e.fault), "{text}: {e:?}");
    }
}

#[test]
fn column_refusals_name_the_column_and_the_fault() {
    type Check = fn(&SchemaFault) -> bool;
    let cases: &[(&str, &str, Check)] = &[
        (r#"{"type":"null"}"#, "c", |f| {
            matches!(f, SchemaFault::NullOnly)
        }),
        (r#"{"type":["null"]}"#, "c", |f| {
            matches!(f, SchemaFault::NullOnly)
        }),
        (r#"{"type":["string","integer"]}"#, "c", |f| {
            matches!(f, SchemaFault::Union { .. })
        }),
        (r#"{"type":["string","integer","null"]}"#, "c", |f| {
            matches!(f, SchemaFault::Union { .. })
        }),
        (r#"{"type":["null","null"]}"#, "c", |f| {
            matches!(f, SchemaFault::Union { .. })
        }),
        (r#"{"type":[]}"#, "c", |f| {
            matches!(f, SchemaFault::BadTypeValue { .. })
        }),
        (r#"{"type":1}"#, "c", |f| {
            matches!(f, SchemaFault::BadTypeValue { .. })
        }),
        (
            r#"{"type":"int"}"#,
            "c",
            |f| matches!(f, SchemaFault::UnknownType { name } if name == "int"),
        ),
        (r#"{"format":"int64"}"#, "c", |f| {
            matches!(f, SchemaFault::MissingType)
        }),
        (r#""string""#, "c", |f| {
            matches!(f, SchemaFault::NotAnObject { got: "a string" })
        }),
        // Unknown keywords.
        (
            r#"{"type":"string","enum":["a","b"]}"#,
            "c",
            |f| matches!(f, SchemaFault::UnknownKeyword { keyword } if keyword == "enum"),
        ),
        (
            r#"{"type":"integer","minimum":0}"#,
            "c",
            |f| matches!(f, SchemaFault::UnknownKeyword { keyword } if keyword == "minimum"),
        ),
        (r#"{"type":"integer","default":0}"#, "c", |f| {
            matches!(f, SchemaFault::UnknownKeyword { .. })
        }),
        (r#"{"oneOf":[{"type":"integer"}]}"#, "c", |f| {
            matches!(f, SchemaFault::UnknownKeyword { .. })
        }),
        (r#"{"type":"string","$schema":"x"}"#, "c", |f| {
            matches!(f, SchemaFault::UnknownKeyword { .. })
        }),
        // Formats.
        (r#"{"type":"integer","format":"int16"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { ty: "integer", .. })
        }),
        (r#"{"type":"integer","format":"float"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"number","format":"int64"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { ty: "number", .. })
        }),
        (r#"{"type":"number","format":"decimal"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (
            r#"{"type":"string","format":"date-time"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFormat { format, .. } if format == "\"date-time\""),
        ),
        (r#"{"type":"string","format":"date"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"string","format":"time"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"string","format":"byte"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"string","format":"binary"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"string","format":"bytes8"}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"string","format":1}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"integer","format":1}"#, "c", |f| {
            matches!(f, SchemaFault::BadFormat { .. })
        }),
        (r#"{"type":"boolean","format":"int32"}"#, "c", |f| {
            matches!(f, SchemaFault::KeywordNotForType { ty: "boolean", .. })
        }),
        // Binary.
        (
            r#"{"type":"string","contentEncoding":"base32"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadEncoding { .. }),
        ),
        (
            r#"{"type":"integer","contentEncoding":"base16"}"#,
            "c",
            |f| matches!(f, SchemaFault::KeywordNotForType { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"bytes0"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFixedSize { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"bytes08"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFixedSize { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"bytes-1"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFixedSize { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"bytes"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFixedSize { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"bytes9999999999"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFixedSize { .. }),
        ),
        (
            r#"{"type":"string","contentEncoding":"base16","format":"uuid"}"#,
            "c",
            |f| matches!(f, SchemaFault::BadFormat { .. }),
        ),
        // Objects, maps, lists.
        (r#"{"type":"object"}"#, "c", |f| {
            matches!(f, SchemaFault::ObjectWithoutShape)
        }),
        (
            r#"{"type":"object","additionalProperties":false}"#,
            "c",
            |f| matches!(f, SchemaFault::ObjectWithoutShape),
        ),
        (
            r#"{"type":"object","additionalProperties":true}"#,
            "c",
            |f| matches!(f, SchemaFault::BadAdditionalProperties { .. }),
        ),
        (r#"{"type":"object","properties":{}}"#, "c", |f| {
            matches!(f, SchemaFault::NoProperties)
        }),
        (
            r#"{"type":"object","properties":{"x":{"type":"string"}},"required":["x"],"additionalProperties":{"type":"string"}}"#,
            "c",
            |f| matches!(f, SchemaFault::StructAndMap),
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":"string"},"required":["x"]}"#,
            "c",
            |f| matches!(f, SchemaFault::KeywordNotForType { .. }),
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":["string","null"]}}"#,
            "c.additionalProperties",
            |f| matches!(f, SchemaFault::NullableElement),
        ),
        (
            r#"{"type":"object","additionalProperties":{"type":"string","format":"email"}}"#,
            "c.additionalProperties",
            |f| matches!(f, SchemaFault::BadFormat { .. }),
        ),
        (r#"{"type":"array"}"#, "c", |f| {
            matches!(f, SchemaFault::ArrayWithoutItems)
        }),
        (
            r#"{"type":"array","items":[{"type":"string"}]}"#,
            "c.items",
            |f| matches!(f, SchemaFault::NotAnObject { got: "an array" }),
        ),
        (
            r#"{"type":"array","items":{"type":["integer","null"]}}"#,
            "c.items",
            |f| matches!(f, SchemaFault::NullableElement),
        ),
        (
            r#"{"type":"array","items":{"type":"integer"},"maxItems":3}"#,
            "c",
            |f| matches!(f, SchemaFault::UnknownKeyword { .. }),
        ),
        (
            r#"{"type":"array","items":{"type":"integer"},"properties":{}}"#,
            "c",
            |f| matches!(f, SchemaFault::KeywordNotForType { ty: "array", .. }),
        ),
        (
            r#"{"type":"array","items":{"type":"object","properties":{"px":{"type":"number","minimum":0}},"required":["px"]}}"#,
            "c.items.px",
            |f| matches!(f, SchemaFault::UnknownKeyword { .. }),
        ),
        // Reserved names are a top-level matter: a struct may have such a field.
    ];
    for (column, path, check) in cases {
        let text = one(column, false);
        let e = refuse(&text);
        assert_eq!(e.path, *path, "{column}: {e}");
        assert!(check(&e.fault), "{column}: {e:?}");
        let message = e.to_string();
        assert!(
            path.is_empty() || message.contains(&format!("'{path}'")),
            "{message}"
        );
    }
}

#[test]
fn messages_name_what_was_wrong() {
    let text = |column: &str| refuse(&one(column, false)).to_string();
    assert_eq!(
        text(r#"{"type":"string","format":"date-time"}"#),
        "schema property 'c': format \"date-time\" is refused for type \"string\" (allowed: none; \"bytesN\" with contentEncoding)"
    );
    assert_eq!(
        text(r#"{"type":"integer","enum":[1]}"#),
        "schema property 'c': unknown keyword \"enum\" (corecast enforces only type, format, contentEncoding, properties, required, additionalProperties and items)"
    );
    assert_eq!(
        text(r#"{"type":["string","integer"]}"#),
        "schema property 'c': the union [\"string\",\"integer\"] is refused: only [T, \"null\"] is allowed"
    );
    assert_eq!(
        refuse(r#"{"type":"object","properties":{"streamcast_ts":{"type":"integer"}},"required":["streamcast_ts"]}"#).to_string(),
        "schema property 'streamcast_ts': 'streamcast_ts' is reserved: the server supplies it"
    );
    assert_eq!(
        refuse(&one(r#"{"type":"number"}"#, true)).to_string(),
        "schema property 'c': 'c' is optional but its type \"number\" is not nullable: add it to \"required\", or declare \"type\": [\"number\", \"null\"]"
    );
}

#[test]
fn struct_fields_may_use_reserved_names() {
    let s = compile(&one(
        r#"{"type":"object","properties":{"streamcast_ts":{"type":"integer"}},"required":["streamcast_ts"]}"#,
        false,
    ));
    assert!(matches!(s.columns()[0].ty(), ColumnType::Struct(_)));
}

#[test]
fn arrow_schema_follows_the_columns() {
    let schema = compile(
        r#"{"type":"object","properties":{
            "b":{"type":"boolean"},
            "i":{"type":"integer"},
            "i32":{"type":["integer","null"],"format":"int32"},
            "f":{"type":"number"},
            "f32":{"type":"number","format":"float"},
            "s":{"type":["string","null"]},
            "hex":{"type":"string","contentEncoding":"base16"},
            "blob8":{"type":["string","null"],"contentEncoding":"base64","format":"bytes8"},
            "st":{"type":"object","properties":{"x":{"type":"integer","format":"int32"}},"required":["x"]},
            "m":{"type":["object","null"],"additionalProperties":{"type":"number"}},
            "l":{"type":"array","items":{"type":"string","contentEncoding":"base16"}}
        },"required":["b","i","f","f32","hex","st","l"]}"#,
    );
    let arrow = schema.to_arrow();
    let enc = |e: &str| {
        std::collections::HashMap::from([(ENCODING_METADATA_KEY.to_string(), e.to_string())])
    };
    let expected = arrow_schema::Schema::new(vec![
        Field::new("b", DataType::Boolean, false),
        Field::new("i", DataType::Int64, false),
        Field::new("i32", DataType::Int32, true),
        Field::new("f", DataType::Float64, false),
        Field::new("f32", DataType::Float32, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("hex", DataType::Binary, false).with_metadata(enc("base16")),
        Field::new("blob8", DataType::FixedSizeBinary(8), true).with_metadata(enc("base64")),
        Field::new(
            "st",
            DataType::Struct(vec![Field::new("x", DataType::Int32, false)].into()),
            false,
        ),
        Field::new_map(
            "m",
            "entries",
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Float64, false),
            false,
            true,
        ),
        Field::new(
            "l",
            DataType::List(Arc::new(
                Field::new("item", DataType::Binary, false).with_metadata(enc("base16")),
            )),
            false,
        ),
    ]);
    assert_eq!(arrow, expected);
    assert!(arrow.field_with_name("streamcast_ts").is_err());

    // The greeting form of the same schema (the §9 example, spelled out).
    assert_eq!(
        schema.published(),
        concat!(
            r#"{"type":"object","properties":{"b":{"type":"boolean"},"i":{"type":"integer","format":"int64"},"#,
            r#""i32":{"type":["integer","null"],"format":"int32"},"f":{"type":"number","format":"double"},"#,
            r#""f32":{"type":"number","format":"float"},"s":{"type":["string","null"]},"#,
            r#""hex":{"type":"string","contentEncoding":"base16"},"#,
            r#""blob8":{"type":["string","null"],"contentEncoding":"base64","format":"bytes8"},"#,
            r#""st":{"type":"object","properties":{"x":{"type":"integer","format":"int32"}},"required":["x"],"additionalProperties":false},"#,
            r#""m":{"type":["object","null"],"additionalProperties":{"type":"number","format":"double"}},"#,
            r#""l":{"type":"array","items":{"type":"string","contentEncoding":"base16"}}},"#,
            r#""required":["b","i","f","f32","hex","st","l"]}"#
        )
    );
}

#[test]
fn lookup_for_filters() {
    let schema = compile(
        r#"{"type":"object","properties":{
            "sym":{"type":"string"},"px":{"type":["number","null"]},
            "st":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},
            "blob":{"type":"string","contentEncoding":"base64"}
        },"required":["sym","st","blob"]}"#,
    );
    let (i, c) = schema.filter_column("px").expect("px");
    assert_eq!((i, c.ty(), c.nullable()), (1, &ColumnType::Float64, true));
    assert!(schema.filter_column("st").is_none());
    assert!(schema.column("st").is_some());
    assert!(schema.filter_column("nope").is_none());
    let (_, blob) = schema.filter_column("blob").expect("blob");
    assert_eq!(
        blob.ty(),
        &ColumnType::Binary {
            encoding: BinaryEncoding::Base64,
            fixed_len: None
        }
    );
}

#[test]
fn wide_schemas_look_up_by_hash() {
    let props: Vec<String> = (0..100)
        .map(|i| format!("\"c{i}\":{{\"type\":\"integer\"}}"))
        .collect();
    let req: Vec<String> = (0..100).map(|i| format!("\"c{i}\"")).collect();
    let schema = compile(&format!(
        r#"{{"type":"object","properties":{{{}}},"required":[{}]}}"#,
        props.join(","),
        req.join(",")
    ));
    assert_eq!(schema.column("c57").map(|(i, _)| i), Some(57));
    assert_eq!(schema.columns().len(), 100);
}

#[test]
fn shared_dataset_schemas_compile() {
    for name in ["es-mbo", "es-mbp1", "btcusdt-trades"] {
        let path = format!(
            "{}/../../shared/data/{name}.schema.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("read schema");
        let schema = compile(&text);
        assert_eq!(compile(&schema.published()), schema, "{name}");
    }
}
