//! corecast-bench: criterion micro-benchmarks (`benches/`) and the side-by-side comparison with
//! the reference broker (`bench/compare`). The library only locates shared test data.

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
