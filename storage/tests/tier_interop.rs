//! Segments read by other engines: pyarrow and DuckDB open a sealed file and find the column
//! order, types, field ids, compression, statistics, row count and every value the broker
//! sealed (`tests/tier/check_segment.py`).
//!
//! The Python packages come from `tests/tier/setup_venv.sh` (a venv under
//! `$HOME/.cache/corecast-tier-venv`, or `$CORECAST_TIER_VENV`). When they cannot be installed the test prints
//! `skipped: …` and passes, except under CI (`CI` set), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use corecast_storage::json;
use corecast_storage::schema::{write_json_str, RowCodec, Schema};
use corecast_storage::tier::{write_segment, SealOptions};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The venv's python, or why there is none.
fn python() -> Result<PathBuf, String> {
    let script = repo_root().join("tests/tier/setup_venv.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(path))
}

const NESTED_SCHEMA: &str = r#"{"type":"object","properties":{
  "i64": {"type":"integer"},
  "i32": {"type":"integer","format":"int32"},
  "f32": {"type":"number","format":"float"},
  "f64": {"type":["number","null"]},
  "s": {"type":"string"},
  "flag": {"type":["boolean","null"]},
  "hex": {"type":["string","null"],"contentEncoding":"base16"},
  "b64": {"type":"string","contentEncoding":"base64"},
  "id16": {"type":["string","null"],"contentEncoding":"base16","format":"bytes16"},
  "book": {"type":["object","null"],"properties":{
      "venue": {"type":"string"},
      "levels": {"type":"array","items":{"type":"object","properties":{
          "px": {"type":"number"}, "qty": {"type":["number","null"]}},"required":["px"]}}},
    "required":["venue","levels"]},
  "tags": {"type":"object","additionalProperties":{"type":"integer"}}
},
"required":["i64","i32","f32","s","b64","tags"]}"#;

const NESTED_ROWS: &[&str] = &[
    r#"{"i64":-9223372036854775808,"i32":-2147483648,"f32":0.1,"f64":0.1,"s":"","b64":"","tags":{}}"#,
    r#"{"i64":9223372036854775807,"i32":2147483647,"f32":3.4028235e38,"f64":1.7976931348623157e308,"s":"\u0000 \"q\" \\ é 😀","b64":"AQID","tags":{"z":1,"a":2},"flag":true,"hex":"DEADbeef","id16":"000102030405060708090a0b0c0d0e0f","book":{"venue":"XNAS","levels":[{"px":1.5},{"px":-2.25,"qty":3.0}]}}"#,
    r#"{"i64":9007199254740993,"i32":0,"f32":16777217,"f64":null,"s":"x","b64":"aGVsbG8=","tags":{"k":-1},"flag":false,"hex":"","book":{"venue":"","levels":[]}}"#,
    r#"{"i64":1,"i32":1,"f32":-0.0,"f64":5e-324,"s":"y","b64":"AA==","tags":{"a":1,"b":2,"c":3},"book":null}"#,
];

fn canonical(codec: &RowCodec, lines: impl Iterator<Item = String>) -> Vec<Vec<u8>> {
    lines
        .map(|line| {
            let value = json::parse(line.as_bytes()).expect("row parses");
            let mut out = Vec::new();
            codec.encode_row(&value, &mut out).expect("row validates");
            out
        })
        .collect()
}

/// Writes the segment and the expectations, runs the checker, returns its output.
fn check(
    python: &Path,
    dir: &Path,
    name: &str,
    codec: &RowCodec,
    rows: &[Vec<u8>],
    types: &[(&str, &str, &str)],
    options: &SealOptions,
) -> String {
    let segment = dir.join(format!("{name}.parquet"));
    let ts = |i: usize| 1_796_081_766_000_000 + i as i64 * 11;
    let mut file = Vec::new();
    write_segment(
        codec,
        rows.iter()
            .enumerate()
            .map(|(i, r)| (i as u64 + 1, ts(i), r.as_slice())),
        &mut file,
        options,
    )
    .expect("segment");
    std::fs::write(&segment, file).expect("write segment");
    let mut expected = String::from("{\"rows\":[");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            expected.push(',');
        }
        let mut text = Vec::new();
        write_json_str(&mut text, std::str::from_utf8(r).expect("utf8"));
        expected.push_str(&format!(
            "[{},{},{}]",
            i + 1,
            ts(i),
            String::from_utf8(text).expect("utf8")
        ));
    }
    expected.push(']');
    let mut section = |key: &str, pyarrow: bool| {
        expected.push_str(&format!(",\"{key}\":{{"));
        for (i, t) in types.iter().enumerate() {
            if i > 0 {
                expected.push(',');
            }
            let ty = if pyarrow { t.1 } else { t.2 };
            expected.push_str(&format!("\"{}\":\"{ty}\"", t.0));
        }
        expected.push('}');
    };
    section("types", true);
    section("duckdb_types", false);
    expected.push('}');
    let expected_path = dir.join(format!("{name}.expected.json"));
    std::fs::write(&expected_path, expected).expect("write expectations");
    let out = Command::new(python)
        .arg(repo_root().join("tests/tier/check_segment.py"))
        .arg(&segment)
        .arg(&expected_path)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{name}: check_segment.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn pyarrow_and_duckdb_read_sealed_segments() {
    let python = match python() {
        Ok(p) => p,
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("CI: the pyarrow/DuckDB check cannot run: {why}")
        }
        Err(why) => {
            println!("skipped: pyarrow/DuckDB not available: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");

    let codec = RowCodec::Schema(Schema::compile(NESTED_SCHEMA).expect("schema"));
    let rows = canonical(
        &codec,
        NESTED_ROWS
            .iter()
            .cycle()
            .take(NESTED_ROWS.len() * 50)
            .map(|s| s.to_string()),
    );
    let out = check(
        &python,
        dir.path(),
        "nested",
        &codec,
        &rows,
        &[
            ("i64", "int64", "BIGINT"),
            ("i32", "int32", "INTEGER"),
            ("f32", "float", "FLOAT"),
            ("f64", "double", "DOUBLE"),
            ("s", "string", "VARCHAR"),
            ("flag", "bool", "BOOLEAN"),
            ("hex", "binary", "BLOB"),
            ("b64", "binary", "BLOB"),
            ("id16", "fixed_size_binary[16]", "BLOB"),
            (
                "book",
                "struct<venue: string not null, levels: list<item: struct<px: double not null, qty: double> not null> not null>",
                "STRUCT(venue VARCHAR, levels STRUCT(px DOUBLE, qty DOUBLE)[])",
            ),
            ("tags", "map<string, int64 not null>", "MAP(VARCHAR, BIGINT)"),
        ],
        &SealOptions {
            max_row_group_rows: 64,
            ..SealOptions::default()
        },
    );
    println!("nested: {out}");

    let schema_text = std::fs::read_to_string(format!(
        "{}/../../shared/data/es-mbp1.schema.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("schema");
    let codec = RowCodec::Schema(Schema::compile(&schema_text).expect("schema"));
    let lines = std::fs::read_to_string(format!(
        "{}/../../shared/data/es-mbp1.jsonl",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("rows");
    let rows = canonical(&codec, lines.lines().map(str::to_string));
    let out = check(
        &python,
        dir.path(),
        "es-mbp1",
        &codec,
        &rows,
        &[
            ("ts_event", "int64", "BIGINT"),
            ("instrument_id", "int64", "BIGINT"),
            ("action", "string", "VARCHAR"),
            ("side", "string", "VARCHAR"),
            ("price", "double", "DOUBLE"),
            ("size", "int32", "INTEGER"),
            ("bid_px", "double", "DOUBLE"),
            ("bid_sz", "int32", "INTEGER"),
            ("ask_px", "double", "DOUBLE"),
            ("ask_sz", "int32", "INTEGER"),
            ("sequence", "int64", "BIGINT"),
        ],
        &SealOptions::default(),
    );
    println!("es-mbp1: {out}");
}
