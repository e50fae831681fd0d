//! Validate + encode of one row (target ≤ 1 µs): the six-column trade row and an es-mbo row.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

use corecast_bench::{shared_dir, trade_row, trade_schema};
use corecast_storage::json;
use corecast_storage::schema::{RowCodec, Schema};

fn rows(c: &mut Criterion) {
    let mbo_schema = std::fs::read_to_string(shared_dir().join("data/es-mbo.schema.json"))
        .expect("es-mbo schema");
    let mbo_rows: Vec<String> = std::fs::read_to_string(shared_dir().join("data/es-mbo.jsonl"))
        .expect("es-mbo.jsonl")
        .lines()
        .take(1000)
        .map(str::to_owned)
        .collect();
    let trade: Vec<String> = (0..1000).map(trade_row).collect();
    let cases = [
        ("trade", trade_schema(), trade),
        ("es-mbo", mbo_schema, mbo_rows),
    ];
    let mut g = c.benchmark_group("row");
    g.throughput(Throughput::Elements(1));
    for (name, schema, rows) in cases {
        let codec = RowCodec::Schema(Schema::compile(&schema).expect("schema compiles"));
        let parsed: Vec<_> = rows
            .iter()
            .map(|r| json::parse(r.as_bytes()).expect("row parses"))
            .collect();
        let mut out = Vec::with_capacity(512);
        let mut i = 0usize;
        g.bench_function(format!("{name}: validate + encode (parsed)"), |b| {
            b.iter(|| {
                out.clear();
                i = (i + 1) % parsed.len();
                codec
                    .encode_row(black_box(&parsed[i]), &mut out)
                    .expect("valid");
                black_box(out.len())
            })
        });
        g.bench_function(format!("{name}: parse + validate + encode"), |b| {
            b.iter(|| {
                out.clear();
                i = (i + 1) % rows.len();
                let v = json::parse(black_box(rows[i].as_bytes())).expect("json");
                codec.encode_row(&v, &mut out).expect("valid");
                black_box(out.len())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, rows);
criterion_main!(benches);
