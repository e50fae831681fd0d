//! `GET /stats`: one JSON document of per-stream counters (PROTOCOL.md §11, plus corecast's
//! extras). Times are given both as the reference's float seconds and as µs integers.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::registry::now_us;
use crate::shard::Shared;

/// Renders the document:
/// `{"served_at":s,"driver":"io_uring"|"fallback","connections":n,"version":v,"cores":n,
/// "cpus":n,"uptime_s":s,"refusals":{"CODE":n,…,"other":n},"streams":[{"name","durable",
/// "end_offset","subscribers","publishers","rows_in","frames_out","bytes_out","dropped_slow",
/// "started_us","started_ts","uptime_s","last_send_us","last_send_ts","last_send_age_s","tiers",
/// "earliest_offset","subscribers_by_transport":{"websocket","sse","pull"},"subscriber_lag_rows",
/// "dropped_slow_sse"}]}` (`tiers`: [`crate::tier::tiers_json`]), listing only the streams
/// `shown` lets through (the caller's `stats.read` grants). `subscribers` and `dropped_slow`
/// count WebSocket readers, as the reference does; the keys after `tiers` (added for `/ui`) give
/// every transport, the lag of the furthest-behind reader and the refusals by close code
/// (process-wide, as in `/metrics`). `cores` counts the serving threads (one per core), `cpus` what the
/// process may run on ([`Shared::cpus`], read at start-up: this runs on a pinned shard).
pub fn render(shared: &Shared, shown: &dyn Fn(&str) -> bool) -> String {
    let now = now_us();
    let secs = |us: i64| us as f64 / 1e6;
    let mut s = String::with_capacity(512);
    let _ = write!(
        s,
        "{{\"served_at\":{},\"driver\":\"{}\",\"connections\":{},\"version\":\"{}\",\"cores\":{},\"cpus\":{},\"uptime_s\":{},\"refusals\":{{",
        secs(now),
        shared.driver_name(),
        shared.connections.load(Ordering::Relaxed),
        env!("CARGO_PKG_VERSION"),
        shared.shard_inboxes.len(),
        shared.cpus,
        secs((now - process_started_us(shared)).max(0)),
    );
    for (i, (code, n)) in super::metrics::refusals().enumerate() {
        let sep = if i > 0 { "," } else { "" };
        let _ = write!(s, "{sep}\"{code}\":{n}");
    }
    s.push_str("},\"streams\":[");
    let visible = shared
        .registry
        .streams
        .iter()
        .filter(|st| shown(&st.cfg.name));
    for (i, st) in visible.enumerate() {
        if i > 0 {
            s.push(',');
        }
        let last = st.stats.last_send_us.load(Ordering::Relaxed);
        let earliest = if st.durable() {
            let end = st.end.load(Ordering::Acquire);
            st.earliest
                .load(Ordering::Acquire)
                .min(end)
                .max(1)
                .to_string()
        } else {
            "null".into()
        };
        let end = if st.durable() {
            st.end.load(Ordering::Acquire).to_string()
        } else {
            "null".into()
        };
        let (last_us, last_ts, last_age) = if last > 0 {
            (
                last.to_string(),
                secs(last).to_string(),
                secs(now - last).to_string(),
            )
        } else {
            ("null".into(), "null".into(), "null".into())
        };
        let _ = write!(
            s,
            "{{\"name\":{},\"durable\":{},\"end_offset\":{},\"subscribers\":{},\"publishers\":{},\"rows_in\":{},\"frames_out\":{},\"bytes_out\":{},\"dropped_slow\":{},\"started_us\":{},\"started_ts\":{},\"uptime_s\":{},\"last_send_us\":{},\"last_send_ts\":{},\"last_send_age_s\":{},\"tiers\":{},\"earliest_offset\":{},\"subscribers_by_transport\":{{\"websocket\":{},\"sse\":{},\"pull\":{}}},\"subscriber_lag_rows\":{},\"dropped_slow_sse\":{}}}",
            sonic_rs::to_string(&st.cfg.name).unwrap_or_default(),
            st.durable(),
            end,
            st.stats.subscribers.load(Ordering::Relaxed),
            st.stats.publishers.load(Ordering::Relaxed),
            st.stats.rows_in.load(Ordering::Relaxed),
            st.stats.frames_out.load(Ordering::Relaxed),
            st.stats.bytes_out.load(Ordering::Relaxed),
            st.stats.dropped_slow.load(Ordering::Relaxed),
            st.started_us,
            secs(st.started_us),
            secs(now - st.started_us),
            last_us,
            last_ts,
            last_age,
            crate::tier::tiers_json(st),
            earliest,
            st.stats.subscribers.load(Ordering::Relaxed).max(0),
            st.stats.sse_subscribers.load(Ordering::Relaxed).max(0),
            st.stats.pull_waiting.load(Ordering::Relaxed).max(0),
            st.stats.lag.max_lag(st.end.load(Ordering::Acquire)),
            st.stats.sse_dropped_slow.load(Ordering::Relaxed),
        );
    }
    s.push_str("]}");
    s
}

/// When the process started serving, µs: its first stream's start (as `/metrics` counts
/// `corecast_uptime_seconds`).
fn process_started_us(shared: &Shared) -> i64 {
    shared
        .registry
        .streams
        .iter()
        .map(|s| s.started_us)
        .min()
        .unwrap_or_else(now_us)
}
