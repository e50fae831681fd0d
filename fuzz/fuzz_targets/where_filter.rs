//! The `where=` parser and its evaluation on rows (`engine/src/filter.rs`).
//!
//! Input: byte 0 picks the codec (as `row_codec`: 0 schema-less, so any column may be named,
//! else a schema whose `filter_column` answers the lookup), then the filter text, a NUL, and a
//! row (validated to its canonical bytes when it validates, else used raw). Checked:
//!
//! - `parse` never panics; an accepted filter's `echo()` is a JSON object that parses again to
//!   a filter with the same echo, and that accepts and refuses the same rows;
//! - `matches` never panics on any bytes;
//! - on a canonical row, a filter naming one of its top-level scalar columns with the row's own
//!   value (alone, or in a list) matches it, and the empty filter matches every row.
#![no_main]

use std::sync::OnceLock;

use corecast_engine::filter::{ColumnLookup, Filter};
use corecast_storage::json;
use corecast_storage::schema::RowCodec;
use libfuzzer_sys::fuzz_target;
use sonic_rs::{JsonContainerTrait, JsonValueTrait};

fn codecs() -> &'static [RowCodec] {
    static CODECS: OnceLock<Vec<RowCodec>> = OnceLock::new();
    CODECS.get_or_init(corecast_fuzz::codecs)
}

fn parse(text: &str, codec: &RowCodec) -> Result<Filter, String> {
    match codec.schema() {
        None => Filter::parse(text, None),
        Some(schema) => {
            // as `engine/src/session/conn.rs` (`parse_filter`) builds it
            let lookup = |name: &str| match schema.column(name) {
                None => ColumnLookup::Unknown,
                Some((_, c)) if c.is_filterable() => ColumnLookup::Scalar,
                Some(_) => ColumnLookup::NotScalar,
            };
            Filter::parse(text, Some(&lookup))
        }
    }
}

fuzz_target!(init: corecast_fuzz::seeds::init("where_filter"), |data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let codecs = codecs();
    let codec = &codecs[sel as usize % codecs.len()];
    let (ftext, raw_row) = match rest.iter().position(|&b| b == 0) {
        Some(nul) => (&rest[..nul], &rest[nul + 1..]),
        None => (rest, &b"{}"[..]),
    };
    let canonical = json::parse(raw_row).ok().and_then(|v| {
        let mut out = Vec::new();
        codec.encode_row(&v, &mut out).ok().map(|()| out)
    });
    let row: &[u8] = canonical.as_deref().unwrap_or(raw_row);

    if let Ok(text) = std::str::from_utf8(ftext) {
        if let Ok(f) = parse(text, codec) {
            let echo = f.echo().to_string();
            let again = parse(&echo, codec)
                .unwrap_or_else(|e| panic!("echo {echo:?} of {text:?} refused: {e}"));
            assert_eq!(again.echo(), echo, "echo of the echo");
            assert_eq!(f.matches(row), again.matches(row), "echo {echo:?} filters differently");
            assert_eq!(f.matches(raw_row), again.matches(raw_row));
        }
    }

    let Some(row) = canonical else {
        return;
    };
    assert!(parse("{}", codec).expect("empty filter").matches(&row));
    let value = json::parse(&row).expect("canonical row parses");
    let obj = value.as_object().expect("a row is an object");
    for (k, v) in obj.iter() {
        if v.is_array() || v.is_object() {
            continue;
        }
        if let Some(schema) = codec.schema() {
            if schema.filter_column(k).is_none() {
                continue;
            }
        }
        let key = sonic_rs::to_string(k).expect("key");
        let val = sonic_rs::to_string(v).expect("value");
        for text in [format!("{{{key}:{val}}}"), format!("{{{key}:[true,{val}]}}")] {
            let f = parse(&text, codec).unwrap_or_else(|e| panic!("{text} refused: {e}"));
            assert!(
                f.matches(&row),
                "{text} does not match its own row {}",
                String::from_utf8_lossy(&row)
            );
        }
    }
});
