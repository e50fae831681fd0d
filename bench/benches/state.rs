//! Keyed state (issue 18): the fold's cost per row (target ≤ 200 ns, on the state thread, off
//! the commit path), and a `?state` snapshot of 1,000,000 keys selected and rendered as
//! WebSocket frames (target ≥ 2M entities/s).
//!
//! Times are the benchmark thread's **CPU time** (`CLOCK_THREAD_CPUTIME_ID`), not wall time:
//! the work is one thread's, and on a shared machine wall time also counts the time other
//! processes held the core.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use corecast_bench::shared_dir;
use corecast_engine::filter::{ColumnLookup, Filter};
use corecast_engine::session::deliver::Rendering;
use corecast_engine::state::fold::{KeySpec, StateMap};
use corecast_engine::state::render_snapshot;

fn any(_: &str) -> ColumnLookup {
    ColumnLookup::Scalar
}

/// The calling thread's CPU time.
struct ThreadCpu;

fn thread_cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

static WALL: WallTime = WallTime;

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, began: Duration) -> Duration {
        thread_cpu_now().saturating_sub(began)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // nanoseconds, as wall time is shown
        WALL.formatter()
    }
}

fn fold(c: &mut Criterion<ThreadCpu>) {
    let rows: Vec<String> = std::fs::read_to_string(shared_dir().join("data/es-mbo.jsonl"))
        .expect("es-mbo.jsonl")
        .lines()
        .map(str::to_owned)
        .collect();
    let spec = KeySpec::new(
        vec!["order_id".into()],
        Some(Filter::parse(r#"{"action":["C","F"]}"#, Some(&any)).unwrap()),
    );
    {
        let mut m = StateMap::new(1, 1_000_000);
        for (i, r) in rows.iter().enumerate() {
            m.apply(&spec, 1 + i as u64, 0, r.as_bytes());
        }
        assert_eq!(
            m.len(),
            fold_by_lookups(&spec, &rows),
            "the two folds agree"
        );
    }
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
    // the steady state: the state already holds what a first pass left (13,969 entities,
    // 17,999 remembered removals, its table and row pages grown), and folds the rows again
    // as the next offsets (keys come back, are updated and removed again); the state is cloned
    // before and dropped after the timed part
    let base = {
        let mut m = StateMap::new(1, 1_000_000);
        for (i, r) in rows.iter().enumerate() {
            m.apply(&spec, 1 + i as u64, 0, r.as_bytes());
        }
        m
    };
    let next = 1 + rows.len() as u64;
    g.bench_function(
        "fold es-mbo by order_id, steady state (68,792 rows onto a pass's state)",
        |b| {
            b.iter_batched(
                || base.clone(),
                |mut m| {
                    for (i, r) in rows.iter().enumerate() {
                        black_box(m.apply(&spec, next + i as u64, 0, r.as_bytes()));
                    }
                    m
                },
                BatchSize::PerIteration,
            )
        },
    );
    // the fold as it was before the one-pass scan (the before of docs/PERFORMANCE.md, in
    // the same run): a lookup per key column and one for `remove_when`, a copy of the key
    // and of the row per row, the removals in two ordered maps
    g.bench_function(
        "fold es-mbo by order_id, per-column lookups (before)",
        |b| b.iter(|| black_box(fold_by_lookups(&spec, &rows))),
    );
    let keys: usize = 1_000_000;
    g.throughput(Throughput::Elements(keys as u64));
    g.sample_size(10);
    g.bench_function("snapshot of 1,000,000 keys, WebSocket frames", |b| {
        // built here, so that running the fold alone does not build it
        let spec = KeySpec::new(vec!["k".into()], None);
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
        b.iter(|| black_box(render_snapshot(&m, None, Rendering::WebSocket).chunks.len()))
    });
    g.finish();
}

/// The earlier fold, entity for entity what `StateMap::apply` computes (checked against it).
fn fold_by_lookups(spec: &KeySpec, rows: &[String]) -> usize {
    type Key = Box<[u8]>;
    let mut entries: BTreeMap<Key, (u64, i64, Box<[u8]>)> = BTreeMap::new();
    let mut tombstones: BTreeMap<Key, u64> = BTreeMap::new();
    let mut by_offset: BTreeMap<u64, Key> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let offset = 1 + i as u64;
        let row = r.as_bytes();
        let Ok(key) = spec.key_of(row) else { continue };
        let key: Key = key.as_bytes().into();
        if spec.removes(row) {
            if entries.remove(&key).is_some() {
                if let Some(at) = tombstones.insert(key.clone(), offset) {
                    by_offset.remove(&at);
                }
                by_offset.insert(offset, key);
            }
            continue;
        }
        let entry = (offset, 0, row.into());
        match entries.get_mut(&key) {
            Some(e) => *e = entry,
            None => {
                if let Some(at) = tombstones.remove(&key) {
                    by_offset.remove(&at);
                }
                entries.insert(key, entry);
            }
        }
    }
    entries.len()
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = fold
}
criterion_main!(benches);
