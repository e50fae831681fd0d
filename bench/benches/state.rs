//! Keyed state (issue 18): the fold's cost per row (target ≤ 200 ns, on the state thread, off
//! the commit path), and a `?state` snapshot of 1,000,000 keys selected and rendered as
//! WebSocket frames (target ≥ 2M entities/s).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

use corecast_bench::shared_dir;
use corecast_engine::filter::{ColumnLookup, Filter};
use corecast_engine::session::deliver::Rendering;
use corecast_engine::state::fold::{KeySpec, StateMap};
use corecast_engine::state::render_snapshot;

fn any(_: &str) -> ColumnLookup {
    ColumnLookup::Scalar
}

fn fold(c: &mut Criterion) {
    let rows: Vec<String> = std::fs::read_to_string(shared_dir().join("data/es-mbo.jsonl"))
        .expect("es-mbo.jsonl")
        .lines()
        .map(str::to_owned)
        .collect();
    let spec = KeySpec {
        columns: vec!["order_id".into()],
        remove_when: Some(Filter::parse(r#"{"action":["C","F"]}"#, Some(&any)).unwrap()),
    };
    let mut g = c.benchmark_group("state");
    g.throughput(Throughput::Elements(rows.len() as u64));
    g.bench_function("fold es-mbo by order_id (68,792 rows, per batch)", |b| {
        b.iter(|| {
            let mut m = StateMap::new(1, 1_000_000);
            for (i, r) in rows.iter().enumerate() {
                black_box(m.apply(&spec, 1 + i as u64, 0, r.as_bytes()));
            }
            black_box(m.len())
        })
    });
    let keys: usize = 1_000_000;
    let spec = KeySpec {
        columns: vec!["k".into()],
        remove_when: None,
    };
    let mut m = StateMap::new(1, keys);
    for i in 0..keys {
        let row = format!(
            r#"{{"k":{i},"symbol":"S{}","price":{}.25,"size":{}}}"#,
            i % 5000,
            10_000 + i % 977,
            i % 31
        );
        m.apply(&spec, 1 + i as u64, 1_700_000_000_000_000, row.as_bytes());
    }
    g.throughput(Throughput::Elements(keys as u64));
    g.sample_size(10);
    g.bench_function("snapshot of 1,000,000 keys, WebSocket frames", |b| {
        b.iter(|| black_box(render_snapshot(&m, None, Rendering::WebSocket).chunks.len()))
    });
    g.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
