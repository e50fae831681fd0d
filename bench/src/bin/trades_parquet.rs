//! Writes a Parquet file of N real trade rows for `bench/ingest.sh`: the 2,001 Binance BTC/USDT
//! trades of `../shared/data/btcusdt-trades.jsonl`, repeated, with `trade_id` and `event_ts`
//! moved on by each pass so every row is distinct. Columns typed as the stream's schema
//! declares them (int64, int64, float64, float64, bool), zstd, row groups of 1,048,576 rows.
//!
//! `trades_parquet JSONL OUT.parquet ROWS`

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sonic_rs::JsonValueTrait;

const ROW_GROUP_ROWS: usize = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: trades_parquet JSONL OUT.parquet ROWS");
        std::process::exit(2);
    }
    let rows: usize = args[3].parse().expect("ROWS is a number");
    let text = std::fs::read_to_string(&args[1]).expect("read the JSON lines sample");
    let sample: Vec<(i64, i64, f64, f64, bool)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: sonic_rs::Value = sonic_rs::from_str(l).expect("a JSON row");
            (
                v["event_ts"].as_i64().expect("event_ts"),
                v["trade_id"].as_i64().expect("trade_id"),
                v["price"].as_f64().expect("price"),
                v["quantity"].as_f64().expect("quantity"),
                v["buyer_maker"].as_bool().expect("buyer_maker"),
            )
        })
        .collect();
    let n = sample.len() as i64;
    let span_us = sample.last().expect("rows").0 - sample[0].0 + 1;
    let schema = Arc::new(Schema::new(vec![
        Field::new("event_ts", DataType::Int64, false),
        Field::new("trade_id", DataType::Int64, false),
        Field::new("price", DataType::Float64, false),
        Field::new("quantity", DataType::Float64, false),
        Field::new("buyer_maker", DataType::Boolean, false),
    ]));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let file = std::fs::File::create(&args[2]).expect("create the Parquet file");
    let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).expect("writer");
    let mut done = 0usize;
    while done < rows {
        let take = (rows - done).min(ROW_GROUP_ROWS);
        let row = |i: usize| {
            let k = (done + i) as i64;
            let (ts, id, px, qty, bm) = sample[(k % n) as usize];
            let pass = k / n;
            (ts + pass * span_us, id + pass * n, px, qty, bm)
        };
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values((0..take).map(|i| row(i).0))),
            Arc::new(Int64Array::from_iter_values((0..take).map(|i| row(i).1))),
            Arc::new(Float64Array::from_iter_values((0..take).map(|i| row(i).2))),
            Arc::new(Float64Array::from_iter_values((0..take).map(|i| row(i).3))),
            Arc::new(BooleanArray::from_iter((0..take).map(|i| Some(row(i).4)))),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).expect("batch"))
            .expect("write");
        done += take;
    }
    w.close().expect("close");
}
