//! The schema as a greeting publishes it (PROTOCOL.md §4, §9).
//!
//! In: a compiled [`Schema`]. Out: compact JSON, byte-exact with the reference's greeting:
//! `{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"},…},"required":[…]}`.
//! Built once per stream; the greeting splices it in.
//!
//! Per property, keys come in the order `type`, then `format` (integers and numbers), or
//! `contentEncoding` then `format` (binary), or `properties`, `required`, `additionalProperties`
//! (structs), or `additionalProperties` (maps), or `items` (lists). `required` lists the non-null
//! columns in column order, and is written even when empty.

use super::encode::write_json_str;
use super::{ColumnType, Fields, Schema};

pub(super) fn published(schema: &Schema) -> String {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"type\":\"object\",");
    write_fields(&mut out, schema.fields());
    out.push(b'}');
    // Every piece written is valid UTF-8 (names are `&str`, the rest ASCII).
    String::from_utf8(out).unwrap_or_default()
}

/// `"properties":{…},"required":[…]`
fn write_fields(out: &mut Vec<u8>, fields: &Fields) {
    out.extend_from_slice(b"\"properties\":{");
    for (i, c) in fields.columns().iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(c.key_json());
        write_type(out, c.ty(), c.nullable());
    }
    out.extend_from_slice(b"},\"required\":[");
    let mut first = true;
    for c in fields.columns().iter().filter(|c| !c.nullable()) {
        if !first {
            out.push(b',');
        }
        first = false;
        write_json_str(out, c.name());
    }
    out.push(b']');
}

/// One property's schema object.
fn write_type(out: &mut Vec<u8>, ty: &ColumnType, nullable: bool) {
    out.extend_from_slice(b"{\"type\":");
    let name = ty.json_type().as_bytes();
    if nullable {
        out.extend_from_slice(b"[\"");
        out.extend_from_slice(name);
        out.extend_from_slice(b"\",\"null\"]");
    } else {
        out.push(b'"');
        out.extend_from_slice(name);
        out.push(b'"');
    }
    match ty {
        ColumnType::Boolean | ColumnType::Utf8 => {}
        ColumnType::Int32 => out.extend_from_slice(b",\"format\":\"int32\""),
        ColumnType::Int64 => out.extend_from_slice(b",\"format\":\"int64\""),
        ColumnType::Float32 => out.extend_from_slice(b",\"format\":\"float\""),
        ColumnType::Float64 => out.extend_from_slice(b",\"format\":\"double\""),
        ColumnType::Binary {
            encoding,
            fixed_len,
        } => {
            out.extend_from_slice(b",\"contentEncoding\":\"");
            out.extend_from_slice(encoding.name().as_bytes());
            out.push(b'"');
            if let Some(n) = fixed_len {
                out.extend_from_slice(b",\"format\":\"bytes");
                out.extend_from_slice(n.to_string().as_bytes());
                out.push(b'"');
            }
        }
        ColumnType::Struct(fields) => {
            out.push(b',');
            write_fields(out, fields);
            out.extend_from_slice(b",\"additionalProperties\":false");
        }
        ColumnType::Map(values) => {
            out.extend_from_slice(b",\"additionalProperties\":");
            write_type(out, values, false);
        }
        ColumnType::List(items) => {
            out.extend_from_slice(b",\"items\":");
            write_type(out, items, false);
        }
    }
    out.push(b'}');
}
