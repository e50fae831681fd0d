//! `GET /metrics`: the Prometheus text exposition format (version 0.0.4).
//!
//! Per stream (label `stream`, the declared names only): rows in, frames and bytes out,
//! subscribers by transport (`websocket`, `sse`, `pull` long polls waiting), publishers, the
//! commit latency histogram (time in `Buffer::append`, measured by the writer), the lag of the
//! furthest-behind subscriber (WebSocket or SSE), readers dropped for being too slow. Per process: refusals by close
//! code (a fixed set of codes, the rest counted as `other`), connections, open SSE streams, the
//! I/O driver, uptime. Every label value comes from a bounded set, so the series count is
//! `streams × a constant`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::registry::now_us;
use crate::shard::Shared;

/// Upper bounds (seconds) of the commit latency buckets.
pub const LATENCY_BOUNDS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A fixed-bucket latency histogram, updated with relaxed atomics from any thread.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; 14],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = LATENCY_BOUNDS_S.iter().position(|&b| s <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The cursors (next offset owed) of a stream's open readers; lag = end − the smallest.
#[derive(Default)]
pub struct LagBoard {
    slots: Mutex<Vec<Weak<AtomicU64>>>,
}

impl LagBoard {
    /// Registers a reader whose next offset is `next`; it updates the returned cell as it goes
    /// and is forgotten once the cell is dropped.
    pub fn register(&self, next: u64) -> Arc<AtomicU64> {
        let cell = Arc::new(AtomicU64::new(next));
        let mut v = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(&cell));
        cell
    }

    /// The largest `end − next` over the open readers (0 with none).
    pub fn max_lag(&self, end: u64) -> u64 {
        let v = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        v.iter()
            .filter_map(Weak::upgrade)
            .map(|c| end.saturating_sub(c.load(Ordering::Relaxed)))
            .max()
            .unwrap_or(0)
    }
}

/// Close codes (and the SSE/HTTP 503) counted by name; anything else is `other`.
const REFUSAL_CODES: [u16; 10] = [1001, 1011, 4400, 4404, 4409, 4412, 4416, 4429, 503, 0];
static REFUSALS: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];

/// Counts a refusal (a close before the greeting, or an HTTP 503 of the SSE caps) by code.
pub fn count_refusal(code: u16) {
    let i = REFUSAL_CODES[..9]
        .iter()
        .position(|&c| c == code)
        .unwrap_or(9);
    REFUSALS[i].fetch_add(1, Ordering::Relaxed);
}

/// The refusals so far by close code (`"other"` last), as `/metrics` and `/stats` show them.
pub fn refusals() -> impl Iterator<Item = (String, u64)> {
    REFUSAL_CODES.iter().enumerate().map(|(i, c)| {
        let code = if i == 9 {
            "other".to_string()
        } else {
            c.to_string()
        };
        (code, REFUSALS[i].load(Ordering::Relaxed))
    })
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value, escaped as the text format requires (stream names never need it, but the
/// renderer does not rely on that).
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Renders every metric family, with the per-stream series of only the streams `shown` lets
/// through (the caller's `stats.read` grants; process-wide series are always there).
pub fn render(shared: &Shared, shown: &dyn Fn(&str) -> bool) -> String {
    let text = render_all(shared);
    let hidden: Vec<String> = shared
        .registry
        .load()
        .streams
        .iter()
        .filter(|s| !shown(&s.cfg.name))
        .map(|s| format!("{{stream=\"{}\"", label(&s.cfg.name)))
        .collect();
    if hidden.is_empty() {
        return text;
    }
    // every per-stream sample starts its labels with `stream="…"` (rendered below)
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if !hidden.iter().any(|h| line.contains(h.as_str())) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn render_all(shared: &Shared) -> String {
    let registry = shared.registry.load();
    let streams = &registry.streams;
    let names: Vec<String> = streams.iter().map(|s| label(&s.cfg.name)).collect();
    let mut o = String::with_capacity(4096 + streams.len() * 2048);
    let per_stream =
        |o: &mut String, name: &str, kind: &str, help: &str, f: &dyn Fn(usize) -> String| {
            family(o, name, kind, help);
            for (i, n) in names.iter().enumerate() {
                let _ = writeln!(o, "{name}{{stream=\"{n}\"}} {}", f(i));
            }
        };
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    per_stream(
        &mut o,
        "corecast_rows_in_total",
        "counter",
        "Rows committed (fanned out, on live-only streams).",
        &|i| ld(&streams[i].stats.rows_in),
    );
    per_stream(
        &mut o,
        "corecast_commit_failures_total",
        "counter",
        "Group commits that failed (commit_failed: disk full, a failed write or fdatasync); nothing of them is in the log.",
        &|i| ld(&streams[i].stats.commit_failures),
    );
    per_stream(
        &mut o,
        "corecast_frames_out_total",
        "counter",
        "Rows written to subscribers (WebSocket frames and SSE events).",
        &|i| ld(&streams[i].stats.frames_out),
    );
    per_stream(
        &mut o,
        "corecast_bytes_out_total",
        "counter",
        "Bytes written to WebSocket and SSE subscribers, pongs and pings included.",
        &|i| ld(&streams[i].stats.bytes_out),
    );
    family(
        &mut o,
        "corecast_subscribers",
        "gauge",
        "Open subscriptions by transport (pull: long polls waiting).",
    );
    for (i, n) in names.iter().enumerate() {
        let st = &streams[i].stats;
        for (t, v) in [
            ("websocket", st.subscribers.load(Ordering::Relaxed)),
            ("sse", st.sse_subscribers.load(Ordering::Relaxed)),
            ("pull", st.pull_waiting.load(Ordering::Relaxed)),
        ] {
            let _ = writeln!(
                o,
                "corecast_subscribers{{stream=\"{n}\",transport=\"{t}\"}} {}",
                v.max(0)
            );
        }
    }
    per_stream(
        &mut o,
        "corecast_publishers",
        "gauge",
        "Open publisher connections.",
        &|i| {
            streams[i]
                .stats
                .publishers
                .load(Ordering::Relaxed)
                .max(0)
                .to_string()
        },
    );
    family(
        &mut o,
        "corecast_commit_latency_seconds",
        "histogram",
        "Time the writer spent committing one stream's group (Buffer::append).",
    );
    for (i, n) in names.iter().enumerate() {
        let h = &streams[i].stats.commit_latency;
        let mut cum = 0u64;
        for (b, bound) in h.buckets.iter().zip(LATENCY_BOUNDS_S) {
            cum += b.load(Ordering::Relaxed);
            let _ = writeln!(
                o,
                "corecast_commit_latency_seconds_bucket{{stream=\"{n}\",le=\"{bound}\"}} {cum}"
            );
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(
            o,
            "corecast_commit_latency_seconds_bucket{{stream=\"{n}\",le=\"+Inf\"}} {}",
            count.max(cum)
        );
        let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            o,
            "corecast_commit_latency_seconds_sum{{stream=\"{n}\"}} {sum}"
        );
        let _ = writeln!(
            o,
            "corecast_commit_latency_seconds_count{{stream=\"{n}\"}} {}",
            count.max(cum)
        );
    }
    per_stream(
        &mut o,
        "corecast_subscriber_lag_rows",
        "gauge",
        "Rows between the committed end and the cursor of the furthest-behind subscriber (WebSocket or SSE).",
        &|i| {
            let st = &streams[i];
            st.stats
                .lag
                .max_lag(st.end.load(Ordering::Acquire))
                .to_string()
        },
    );
    tier_metrics(&mut o, &registry, &names);
    family(
        &mut o,
        "corecast_dropped_slow_total",
        "counter",
        "Subscribers dropped for falling behind (WebSocket 4429, SSE end reason behind).",
    );
    for (i, n) in names.iter().enumerate() {
        let st = &streams[i].stats;
        let _ = writeln!(
            o,
            "corecast_dropped_slow_total{{stream=\"{n}\",transport=\"websocket\"}} {}",
            ld(&st.dropped_slow)
        );
        let _ = writeln!(
            o,
            "corecast_dropped_slow_total{{stream=\"{n}\",transport=\"sse\"}} {}",
            ld(&st.sse_dropped_slow)
        );
    }
    // keyed streams only (`key = [...]`)
    let keyed: Vec<(usize, &crate::state::StateStats)> = streams
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.keyed.as_ref().map(|k| (i, &k.stats)))
        .collect();
    if !keyed.is_empty() {
        type Pick = fn(&crate::state::StateStats) -> u64;
        let families: [(&str, &str, &str, Pick); 13] = [
            ("corecast_state_keys", "gauge", "Entities a keyed stream's state holds (at most max_keys).", |s| s.keys.load(Ordering::Relaxed)),
            ("corecast_state_row_bytes", "gauge", "Summed bytes of the rows a keyed stream's state holds.", |s| s.row_bytes.load(Ordering::Relaxed)),
            ("corecast_state_position", "gauge", "The next offset the state will fold (the state is that of every row below it).", |s| s.position.load(Ordering::Relaxed)),
            ("corecast_state_incomplete", "gauge", "1 while the state lacks something (a key over max_keys, or history lost) and reads of it are refused.", |s| u64::from(s.incomplete.load(Ordering::Relaxed))),
            ("corecast_state_keys_refused_total", "counter", "Rows whose new key was over max_keys (not kept; the state is incomplete).", |s| s.keys_refused.load(Ordering::Relaxed)),
            ("corecast_state_removals_total", "counter", "Keys removed by remove_when.", |s| s.removals.load(Ordering::Relaxed)),
            ("corecast_state_checkpoints_total", "counter", "State checkpoints written since start.", |s| s.checkpoints.load(Ordering::Relaxed)),
            ("corecast_state_checkpoint_offset", "gauge", "The offset the latest checkpoint covers (rows below it).", |s| s.checkpoint_offset.load(Ordering::Relaxed)),
            ("corecast_state_recovered_from", "gauge", "The checkpoint position recovery started from at start-up (0: none).", |s| s.recovered_from.load(Ordering::Relaxed)),
            ("corecast_state_recovered_tail_rows", "gauge", "Rows of the log past the checkpoint that recovery folded at start-up.", |s| s.recovered_tail_rows.load(Ordering::Relaxed)),
            ("corecast_state_snapshot_entities_total", "counter", "Entities sent in ?state snapshots.", |s| s.snapshot_entities.load(Ordering::Relaxed)),
            ("corecast_state_snapshot_bytes_held", "gauge", "Bytes of rendered ?state snapshots sessions hold now, not yet written to their readers (at most state_snapshot_budget_bytes, or one snapshot alone).", |s| s.snapshot_bytes_held.load(Ordering::Relaxed)),
            ("corecast_state_snapshots_refused_budget_total", "counter", "?state joins refused state_busy because the snapshots other readers were still receiving held the stream's state_snapshot_budget_bytes.", |s| s.snapshots_refused_budget.load(Ordering::Relaxed)),
        ];
        for (name, kind, help, pick) in families {
            family(&mut o, name, kind, help);
            for (i, s) in &keyed {
                let _ = writeln!(o, "{name}{{stream=\"{}\"}} {}", names[*i], pick(s));
            }
        }
    }
    family(
        &mut o,
        "corecast_refusals_total",
        "counter",
        "Requests refused, by close code (503: SSE caps and shutdown).",
    );
    for (i, c) in REFUSAL_CODES.iter().enumerate() {
        let code = if i == 9 {
            "other".to_string()
        } else {
            c.to_string()
        };
        let _ = writeln!(
            o,
            "corecast_refusals_total{{code=\"{code}\"}} {}",
            ld(&REFUSALS[i])
        );
    }
    family(
        &mut o,
        "corecast_auth_failures_total",
        "counter",
        "Failed authentications, by reason (rate_limited: refused 429 before any check).",
    );
    for (reason, n) in crate::auth::counters::failures() {
        let _ = writeln!(o, "corecast_auth_failures_total{{reason=\"{reason}\"}} {n}");
    }
    family(
        &mut o,
        "corecast_auth_succeeded_total",
        "counter",
        "Requests authenticated (as a declared principal or anonymous).",
    );
    let _ = writeln!(
        o,
        "corecast_auth_succeeded_total {}",
        ld(&crate::auth::counters::SUCCEEDED)
    );
    family(
        &mut o,
        "corecast_auth_forbidden_total",
        "counter",
        "Requests refused 403: authenticated without the grant they need.",
    );
    let _ = writeln!(
        o,
        "corecast_auth_forbidden_total {}",
        ld(&crate::auth::counters::FORBIDDEN)
    );
    family(
        &mut o,
        "corecast_origin_refused_total",
        "counter",
        "WebSocket upgrades refused 403 for an Origin not in allowed_origins.",
    );
    let _ = writeln!(
        o,
        "corecast_origin_refused_total {}",
        ld(&crate::auth::counters::ORIGIN_REFUSED)
    );
    family(
        &mut o,
        "corecast_connections",
        "gauge",
        "Open TCP connections, all shards.",
    );
    let _ = writeln!(
        o,
        "corecast_connections {}",
        shared.connections.load(Ordering::Relaxed).max(0)
    );
    family(
        &mut o,
        "corecast_sse_streams",
        "gauge",
        "Open SSE streams, all streams.",
    );
    let _ = writeln!(o, "corecast_sse_streams {}", super::sse::open_streams());
    family(
        &mut o,
        "corecast_driver",
        "gauge",
        "The I/O driver the shards run on (1 for the one in use).",
    );
    let d = shared.driver_name();
    for name in ["io_uring", "fallback"] {
        let _ = writeln!(
            o,
            "corecast_driver{{driver=\"{name}\"}} {}",
            u8::from(d == name)
        );
    }
    family(
        &mut o,
        "corecast_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
    );
    let started = streams
        .iter()
        .map(|s| s.started_us)
        .min()
        .unwrap_or_else(now_us);
    let _ = writeln!(
        o,
        "corecast_uptime_seconds {}",
        (now_us() - started).max(0) as f64 / 1e6
    );
    o
}

/// The history tiers of durable streams: rows, bytes, segments and offsets per tier, the seal
/// lag, seals and their failures.
fn tier_metrics(o: &mut String, registry: &crate::registry::Registry, names: &[String]) {
    struct Tiers {
        hot: [u64; 3],
        sealed: [u64; 3],
        hot_range: Option<(u64, u64)>,
        sealed_range: Option<(u64, u64)>,
        lag_rows: u64,
        lag_s: f64,
        earliest: u64,
        publish_lag: (u64, f64),
    }
    let now = crate::registry::now_us();
    let tiers: Vec<(usize, Tiers)> = registry
        .streams
        .iter()
        .enumerate()
        .filter(|(_, st)| st.durable())
        .map(|(i, st)| {
            let t = &st.tiers;
            let end = st.end.load(Ordering::Acquire);
            let floor = t.hot_floor.load(Ordering::Relaxed).min(end).max(1);
            let sealed = t.sealed_totals();
            let (lag_rows, lag_s) = t.seal_lag(end, now);
            (
                i,
                Tiers {
                    hot: [
                        end - floor,
                        t.hot_bytes.load(Ordering::Relaxed),
                        t.hot_segments.load(Ordering::Relaxed),
                    ],
                    sealed: [sealed.rows, sealed.bytes, sealed.segments],
                    hot_range: (end > floor).then(|| (floor, end - 1)),
                    sealed_range: sealed.first.zip(sealed.last),
                    lag_rows,
                    lag_s,
                    earliest: st.earliest.load(Ordering::Acquire).min(end).max(1),
                    publish_lag: t.publish_lag(end, now),
                },
            )
        })
        .collect();
    for (k, (name, help)) in [
        ("corecast_tier_rows", "Rows held per history tier (hot: the segment log; sealed: Parquet segments); a row may be in both between its seal and the hot segment's eviction."),
        ("corecast_tier_bytes", "Bytes held per history tier (hot: durable record bytes; sealed: Parquet file sizes)."),
        ("corecast_tier_segments", "Segment files per history tier."),
    ]
    .into_iter()
    .enumerate()
    {
        family(o, name, "gauge", help);
        for (i, t) in &tiers {
            let n = &names[*i];
            let _ = writeln!(o, "{name}{{stream=\"{n}\",tier=\"hot\"}} {}", t.hot[k]);
            let _ = writeln!(o, "{name}{{stream=\"{n}\",tier=\"sealed\"}} {}", t.sealed[k]);
        }
    }
    for (name, help, first) in [
        (
            "corecast_tier_first_offset",
            "The first offset a history tier holds (absent when it holds none).",
            true,
        ),
        (
            "corecast_tier_last_offset",
            "The last offset a history tier holds (absent when it holds none).",
            false,
        ),
    ] {
        family(o, name, "gauge", help);
        for (i, t) in &tiers {
            let n = &names[*i];
            for (tier, range) in [("hot", t.hot_range), ("sealed", t.sealed_range)] {
                if let Some((a, b)) = range {
                    let v = if first { a } else { b };
                    let _ = writeln!(o, "{name}{{stream=\"{n}\",tier=\"{tier}\"}} {v}");
                }
            }
        }
    }
    type Value<'a> = &'a dyn Fn(usize, &Tiers) -> String;
    let simple: [(&str, &str, &str, Value); 5] = [
        (
            "corecast_earliest_offset",
            "gauge",
            "The first offset any local tier holds (replay below it is refused as evicted).",
            &|_, t| t.earliest.to_string(),
        ),
        (
            "corecast_seal_lag_rows",
            "gauge",
            "Committed rows not sealed into Parquet yet.",
            &|_, t| t.lag_rows.to_string(),
        ),
        (
            "corecast_seal_lag_seconds",
            "gauge",
            "Age of the oldest row not sealed yet (0 when every row is sealed).",
            &|_, t| t.lag_s.to_string(),
        ),
        (
            "corecast_seals_total",
            "counter",
            "Parquet segments sealed since start.",
            &|i, _| {
                registry.streams[i]
                    .tiers
                    .seals
                    .load(Ordering::Relaxed)
                    .to_string()
            },
        ),
        (
            "corecast_seal_failures_total",
            "counter",
            "Seal attempts that failed since start (each retried; the rows stay in the hot log).",
            &|i, _| {
                registry.streams[i]
                    .tiers
                    .seal_failures
                    .load(Ordering::Relaxed)
                    .to_string()
            },
        ),
    ];
    for (name, kind, help, f) in simple {
        family(o, name, kind, help);
        for (i, t) in &tiers {
            let _ = writeln!(o, "{name}{{stream=\"{}\"}} {}", names[*i], f(*i, t));
        }
    }
    // the published table, for the streams that publish
    let publishing: Vec<&(usize, Tiers)> = tiers
        .iter()
        .filter(|(i, _)| {
            registry.streams[*i]
                .tiers
                .publishing
                .load(Ordering::Relaxed)
        })
        .collect();
    let tier = |i: usize| &registry.streams[i].tiers;
    let published: [(&str, &str, &str, Value); 6] = [
        (
            "corecast_published_end_offset",
            "gauge",
            "The offset after the last row in the stream's published table (1: none yet).",
            &|i, _| {
                tier(i)
                    .published_end
                    .load(Ordering::Acquire)
                    .max(1)
                    .to_string()
            },
        ),
        (
            "corecast_published_rows",
            "gauge",
            "Rows in the stream's published table.",
            &|i, _| tier(i).published_rows.load(Ordering::Relaxed).to_string(),
        ),
        (
            "corecast_publish_lag_rows",
            "gauge",
            "Committed rows not in the published table yet.",
            &|_, t| t.publish_lag.0.to_string(),
        ),
        (
            "corecast_publish_lag_seconds",
            "gauge",
            "Age of the oldest row not published yet (0 when every row is published).",
            &|_, t| t.publish_lag.1.to_string(),
        ),
        (
            "corecast_publishes_total",
            "counter",
            "Commits to the published table since start.",
            &|i, _| tier(i).publishes.load(Ordering::Relaxed).to_string(),
        ),
        (
            "corecast_publish_failures_total",
            "counter",
            "Publish attempts that failed since start (each retried; readers see no change).",
            &|i, _| tier(i).publish_failures.load(Ordering::Relaxed).to_string(),
        ),
    ];
    for (name, kind, help, f) in published {
        family(o, name, kind, help);
        for (i, t) in &publishing {
            let _ = writeln!(o, "{name}{{stream=\"{}\"}} {}", names[*i], f(*i, t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        assert_eq!(h.count(), 3);
        assert_eq!(h.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(h.buckets[5].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn lag_board_forgets_dropped_readers() {
        let b = LagBoard::default();
        let a = b.register(5);
        let c = b.register(9);
        assert_eq!(b.max_lag(10), 5);
        drop(a);
        assert_eq!(b.max_lag(10), 1);
        c.store(10, Ordering::Relaxed);
        assert_eq!(b.max_lag(10), 0);
    }
}
