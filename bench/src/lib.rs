//! corecast-bench: criterion micro-benchmarks (`benches/`) and the side-by-side comparison with
//! the reference broker (`bench/compare`). The library locates and loads shared test data.

use std::path::PathBuf;

/// `../shared` next to the workspace (the trade schema, the es-mbo sample).
pub fn shared_dir() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for cand in [here.join("../../shared"), PathBuf::from("/work/shared")] {
        if cand.exists() {
            return cand;
        }
    }
    here.join("../../shared")
}

/// A six-column trade row as the load generator writes it.
pub fn trade_row(i: u64) -> String {
    format!(
        r#"{{"event_ts":{},"price":85566.5,"amount":0.015,"side":{},"symbol":"BTCUSD","trade_id":{}}}"#,
        1_796_081_766_304_281u64 + i,
        i % 2,
        i
    )
}

/// The trade schema's JSON.
pub fn trade_schema() -> String {
    std::fs::read_to_string(shared_dir().join("tools/anchor/trade.schema.json"))
        .expect("trade schema")
}

/// The shared data set `name` (`data/NAME.schema.json`, `data/NAME.jsonl`): its schema's JSON,
/// its codec, and `rows` canonical rows as the validator encodes them (the file's rows, cycled).
pub fn dataset(
    name: &str,
    rows: usize,
) -> (String, corecast_storage::schema::RowCodec, Vec<Vec<u8>>) {
    use corecast_storage::schema::{RowCodec, Schema};
    let schema = std::fs::read_to_string(shared_dir().join(format!("data/{name}.schema.json")))
        .expect("schema");
    let codec = RowCodec::Schema(Schema::compile(&schema).expect("schema compiles"));
    let lines =
        std::fs::read_to_string(shared_dir().join(format!("data/{name}.jsonl"))).expect("rows");
    let canonical: Vec<Vec<u8>> = lines
        .lines()
        .map(|l| {
            let mut out = Vec::new();
            codec
                .encode_row(
                    &corecast_storage::json::parse(l.as_bytes()).expect("json"),
                    &mut out,
                )
                .expect("valid");
            out
        })
        .collect();
    let rows = canonical.iter().cycle().take(rows).cloned().collect();
    (schema, codec, rows)
}
