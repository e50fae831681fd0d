//! The wire hot path: WebSocket header build, framing a committed batch, the where= predicate.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;

use corecast_bench::trade_row;
use corecast_engine::filter::Filter;
use corecast_net::protocol::frame::encode_data_frame;
use corecast_net::ws::frame::{encode_header, OpCode};

fn header(c: &mut Criterion) {
    let mut g = c.benchmark_group("ws_header");
    let mut out = Vec::with_capacity(64);
    for len in [120u64, 1000, 70_000] {
        g.bench_function(format!("server text header, payload {len} B"), |b| {
            b.iter(|| {
                out.clear();
                encode_header(true, OpCode::Text, black_box(len), None, &mut out);
                black_box(out.len())
            })
        });
    }
    g.bench_function("client masked header, payload 120 B", |b| {
        b.iter(|| {
            out.clear();
            encode_header(
                true,
                OpCode::Text,
                black_box(120),
                Some([1, 2, 3, 4]),
                &mut out,
            );
            black_box(out.len())
        })
    });
    g.finish();
}

fn batch(c: &mut Criterion) {
    let rows: Vec<String> = (0..100).map(trade_row).collect();
    let mut g = c.benchmark_group("commit_batch_frames");
    g.throughput(Throughput::Elements(100));
    let mut out = Vec::with_capacity(100 * 160);
    g.bench_function("encode_data_frame x100 trade rows", |b| {
        b.iter(|| {
            out.clear();
            for (i, r) in rows.iter().enumerate() {
                encode_data_frame(
                    Some(1_000_000 + i as u64),
                    Some(1_796_081_766_307_229),
                    r.as_bytes(),
                    &mut out,
                );
            }
            black_box(out.len())
        })
    });
    g.finish();
}

fn filter(c: &mut Criterion) {
    let rows: Vec<String> = (0..64).map(trade_row).collect();
    let mut g = c.benchmark_group("where_filter");
    g.throughput(Throughput::Elements(rows.len() as u64));
    for text in [
        r#"{}"#,
        r#"{"side":1}"#,
        r#"{"symbol":["BTCUSD","ETHUSD"],"side":0}"#,
    ] {
        let f = Filter::parse(text, None).expect("filter parses");
        g.bench_function(format!("matches {text}"), |b| {
            b.iter(|| {
                rows.iter()
                    .filter(|r| f.matches(black_box(r.as_bytes())))
                    .count()
            })
        });
    }
    g.bench_function("parse {\"side\":1}", |b| {
        b.iter_batched(
            || (),
            |_| Filter::parse(black_box(r#"{"side":1}"#), None).is_ok(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, header, batch, filter);
criterion_main!(benches);
