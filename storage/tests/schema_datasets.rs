//! The shared market-data samples, validated and encoded row by row, each compared with an
//! independent canonical re-encoding built here from the raw line (a flat-object tokenizer and
//! `std`'s float formatting; no JSON library).

use std::time::Instant;

use corecast_storage::json;
use corecast_storage::schema::{ColumnType, RowCodec, Schema};

fn data(name: &str) -> String {
    format!("{}/../../shared/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> (Schema, String) {
    let schema_text =
        std::fs::read_to_string(data(&format!("{name}.schema.json"))).expect("schema file");
    let schema = Schema::compile(&schema_text).expect("schema compiles");
    let rows = std::fs::read_to_string(data(&format!("{name}.jsonl"))).expect("rows file");
    (schema, rows)
}

/// Splits a flat JSON object into (key, raw value token) pairs. The samples hold no escapes,
/// nested values or whitespace inside strings; anything else fails the test.
fn tokens(line: &str) -> Vec<(&str, &str)> {
    let inner = line
        .trim()
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .expect("flat object");
    let mut out = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let after_quote = rest.strip_prefix('"').expect("key quote");
        let end = after_quote.find('"').expect("key end");
        let key = &after_quote[..end];
        let after_key = after_quote[end + 1..].trim_start();
        let value_text = after_key.strip_prefix(':').expect("colon").trim_start();
        let value_end = if let Some(string) = value_text.strip_prefix('"') {
            1 + string.find('"').expect("string end") + 1
        } else {
            value_text.find(',').unwrap_or(value_text.len())
        };
        out.push((key, value_text[..value_end].trim_end()));
        rest = value_text[value_end..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    out
}

/// `std`'s shortest digits laid out as msgspec does (see `schema_validate.rs`).
fn reference_float(v: f64) -> String {
    let sci = format!("{v:e}");
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
    let body = if 0 <= k && kk <= 16 {
        format!("{digits}{}.0", "0".repeat(k as usize))
    } else if 0 < kk && kk <= 16 {
        format!("{}.{}", &digits[..kk as usize], &digits[kk as usize..])
    } else if -5 < kk && kk <= 0 {
        format!("0.{}{digits}", "0".repeat((-kk) as usize))
    } else if length == 1 {
        format!("{digits}e{}", kk - 1)
    } else {
        format!("{}.{}e{}", &digits[..1], &digits[1..], kk - 1)
    };
    format!("{sign}{body}")
}

/// The canonical encoding of one flat row, built independently of the codec.
fn independent(schema: &Schema, line: &str) -> String {
    let fields = tokens(line);
    let mut out = String::from("{");
    for (i, column) in schema.columns().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(column.name());
        out.push_str("\":");
        let raw = fields
            .iter()
            .find(|(k, _)| *k == column.name())
            .map_or("null", |(_, v)| *v);
        let canonical = match column.ty() {
            _ if raw == "null" => "null".to_string(),
            ColumnType::Float64 => reference_float(raw.parse::<f64>().expect("number")),
            ColumnType::Int64 | ColumnType::Int32 => {
                assert!(
                    raw.bytes().all(|b| b.is_ascii_digit() || b == b'-'),
                    "{raw}"
                );
                raw.to_string()
            }
            _ => raw.to_string(),
        };
        out.push_str(&canonical);
    }
    out.push('}');
    out
}

/// Timings of one pass, in ns per row.
struct PerRow {
    parse: f64,
    encode: f64,
}

/// Encodes every line and checks it against [`independent`]; returns the row count, how many
/// rows came out identical to their input line, and the time spent in `json::parse` and in
/// `encode_row` (checking excluded).
fn check_all(schema: &Schema, rows: &str) -> (usize, usize, PerRow) {
    let codec = RowCodec::Schema(schema.clone());
    let mut out = Vec::with_capacity(256);
    let mut n = 0;
    let mut identical = 0;
    let (mut parse_ns, mut encode_ns) = (0u128, 0u128);
    for line in rows.lines().filter(|l| !l.is_empty()) {
        out.clear();
        let t0 = Instant::now();
        let value = json::parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        let t1 = Instant::now();
        codec
            .encode_row(&value, &mut out)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let t2 = Instant::now();
        parse_ns += (t1 - t0).as_nanos();
        encode_ns += (t2 - t1).as_nanos();
        let got = std::str::from_utf8(&out).expect("UTF-8");
        assert_eq!(got, independent(schema, line), "row {n}: {line}");
        if got == line {
            identical += 1;
        }
        n += 1;
    }
    let per = |ns: u128| ns as f64 / n.max(1) as f64;
    let timing = PerRow {
        parse: per(parse_ns),
        encode: per(encode_ns),
    };
    (n, identical, timing)
}

#[test]
fn es_mbo_all_rows_validate_and_encode_byte_exact() {
    let (schema, rows) = load("es-mbo");
    let (n, identical, t) = check_all(&schema, &rows);
    assert_eq!(n, 68_792);
    // The sample is already canonical (compact, schema order, `.0` floats, ns integers beyond
    // 2^53), so every encoded row equals its input line.
    assert_eq!(identical, n);
    eprintln!(
        "es-mbo: {n} rows; per row: json::parse {:.0} ns, validate+encode {:.0} ns (this build)",
        t.parse, t.encode
    );
}

#[test]
fn btcusdt_trades_all_rows() {
    let (schema, rows) = load("btcusdt-trades");
    let (n, identical, t) = check_all(&schema, &rows);
    assert_eq!(n, 2_001);
    eprintln!(
        "btcusdt: per row: json::parse {:.0} ns, validate+encode {:.0} ns (this build)",
        t.parse, t.encode
    );
    // 52 quantities are written by Python as `1e-05` and the like; canonical is `0.00001`.
    assert_eq!(n - identical, 52);
}

#[test]
fn es_mbp1_all_rows_and_their_nullable_columns() {
    let (schema, rows) = load("es-mbp1");
    let (n, identical, _) = check_all(&schema, &rows);
    assert_eq!((n, identical), (2_288, 2_288));

    // The sample has no nulls: make some. Every third row leaves the nullable prices out, every
    // third sends them as null; both come out as null, in place.
    let nullable: Vec<&str> = schema
        .columns()
        .iter()
        .filter(|c| c.nullable())
        .map(|c| c.name())
        .collect();
    assert_eq!(nullable, ["price", "bid_px", "ask_px"]);
    let codec = RowCodec::Schema(schema.clone());
    let mut out = Vec::new();
    for (i, line) in rows.lines().enumerate() {
        let fields = tokens(line);
        let edited: Vec<String> = fields
            .iter()
            .filter_map(|(k, v)| match (nullable.contains(k), i % 3) {
                (true, 0) => None,
                (true, 1) => Some(format!("\"{k}\":null")),
                _ => Some(format!("\"{k}\":{v}")),
            })
            .collect();
        let edited = format!("{{{}}}", edited.join(","));
        let value = json::parse(edited.as_bytes()).expect("JSON");
        out.clear();
        codec.encode_row(&value, &mut out).expect("valid");
        let got = std::str::from_utf8(&out).expect("UTF-8");
        assert_eq!(got, independent(&schema, &edited), "{edited}");
        if i % 3 != 2 {
            assert!(got.contains("\"price\":null") && got.contains("\"ask_px\":null"));
        }
    }
}

#[test]
fn trade_rows_schemaless_round_trip() {
    // With no schema the rows keep their own bytes (they are already compact and canonical).
    let (_, rows) = load("es-mbo");
    let mut out = Vec::new();
    for line in rows.lines().take(5_000) {
        let value = json::parse(line.as_bytes()).expect("JSON");
        out.clear();
        RowCodec::Schemaless
            .encode_row(&value, &mut out)
            .expect("valid");
        assert_eq!(std::str::from_utf8(&out).expect("UTF-8"), line);
    }
}

/// A rough hot-loop probe of the publish path (the criterion bench is the real measure):
/// `cargo test --release -p corecast-storage --test schema_datasets -- --ignored --nocapture`.
#[test]
#[ignore = "timing probe; run in release"]
fn hot_loop_probe() {
    let trade_schema = std::fs::read_to_string(format!(
        "{}/../../shared/tools/anchor/trade.schema.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("trade schema");
    let trade = r#"{"event_ts":1796081766304281,"price":85566.0,"amount":0.015,"side":1,"symbol":"BTCUSD","trade_id":1001}"#;
    let (mbo_schema, mbo_rows) = load("es-mbo");
    let mbo_line = mbo_rows.lines().next().expect("row").to_string();
    for (name, schema, line) in [
        (
            "trade",
            Schema::compile(&trade_schema).expect("schema"),
            trade,
        ),
        ("es-mbo", mbo_schema, mbo_line.as_str()),
    ] {
        let codec = RowCodec::Schema(schema);
        let rounds = 200_000;
        let mut out = Vec::with_capacity(256);
        let t0 = Instant::now();
        for _ in 0..rounds {
            let v = json::parse(std::hint::black_box(line.as_bytes())).expect("JSON");
            std::hint::black_box(&v);
        }
        let parse = t0.elapsed().as_nanos() as f64 / rounds as f64;
        let t0 = Instant::now();
        for _ in 0..rounds {
            let v: sonic_rs::Value =
                sonic_rs::from_slice(std::hint::black_box(line.as_bytes())).expect("JSON");
            std::hint::black_box(&v);
        }
        let sonic = t0.elapsed().as_nanos() as f64 / rounds as f64;
        let value = json::parse(line.as_bytes()).expect("JSON");
        let t0 = Instant::now();
        for _ in 0..rounds {
            use sonic_rs::{JsonContainerTrait, JsonValueTrait};
            let mut n = 0usize;
            if let Some(o) = std::hint::black_box(&value).as_object() {
                for (k, v) in o.iter() {
                    n += k.len() + usize::from(v.is_number());
                }
            }
            std::hint::black_box(n);
        }
        let walk = t0.elapsed().as_nanos() as f64 / rounds as f64;
        eprintln!("{name}: sonic_rs::from_slice {sonic:.0} ns/row, bare walk {walk:.0} ns/row");
        let t0 = Instant::now();
        for _ in 0..rounds {
            out.clear();
            codec
                .encode_row(std::hint::black_box(&value), &mut out)
                .expect("valid");
            std::hint::black_box(&out);
        }
        let encode = t0.elapsed().as_nanos() as f64 / rounds as f64;
        eprintln!("{name}: json::parse {parse:.0} ns/row, validate+encode {encode:.0} ns/row");
    }
}
