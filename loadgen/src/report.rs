//! Gathers the threads' results into one verdict, a JSON document and a text summary.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::*;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::shared::{Epoch, Shared};
use crate::{Args, ThreadOut};

pub struct Report {
    pub ok: bool,
    pub failures: Vec<String>,
    doc: String,
    text: String,
}

fn pcts(h: &Histogram<u64>) -> [u64; 6] {
    if h.is_empty() {
        return [0; 6];
    }
    [
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
    ]
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => {
            if x.abs() >= 100.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.4}")
            }
        }
        _ => "null".into(),
    }
}

fn jstr(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        args: &Args,
        shared: &Shared,
        go: Epoch,
        end: Instant,
        outs: Vec<ThreadOut>,
        replay_offset: Option<u64>,
        server_cpu: Option<f64>,
        rss: Option<(u64, u64)>,
        self_cpu: Option<f64>,
    ) -> Report {
        let mut failures = Vec::new();
        let mut lat = crate::hist();
        let mut greet = crate::hist();
        let mut ack = crate::hist();
        let (mut frames_sent, mut rows_sent, mut frames_acked, mut rows_acked, mut pub_errors) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut first_offset: Option<u64> = None;
        let mut last_ack: Option<Instant> = None;
        let mut subs = Vec::new();
        let mut deadline_hit = false;
        for o in outs {
            deadline_hit |= o.hit_deadline;
            for e in o.open_errors {
                failures.push(e);
            }
            if let Some(h) = &o.latency {
                let _ = lat.add(h);
            }
            if let Some(h) = &o.greeting {
                let _ = greet.add(h);
            }
            for p in o.pubs {
                frames_sent += p.frames_sent;
                rows_sent += p.rows_sent;
                frames_acked += p.frames_acked;
                rows_acked += p.rows_acked;
                pub_errors += p.errors;
                if p.offset_faults > 0 {
                    failures.push(format!(
                        "publisher acks went backwards {} times",
                        p.offset_faults
                    ));
                }
                if let Some(e) = p.first_error {
                    failures.push(e);
                }
                if let Some(h) = &p.ack_latency {
                    let _ = ack.add(h);
                }
                if let Some(f) = p.first_offset {
                    first_offset = Some(first_offset.map_or(f, |x: u64| x.min(f)));
                }
                last_ack = last_ack.max(p.last_ack);
            }
            subs.extend(o.subs);
        }
        if deadline_hit {
            failures.push(format!("the run passed --max-seconds {}", args.max_seconds));
        }
        let filtered = args.where_.is_some();
        let final_end = shared.final_end.load(Acquire);
        let (mut delivered, mut gaps, mut gap_events, mut dups, mut missing, mut expected) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut last_frame: Option<Instant> = None;
        let mut complete = 0usize;
        let mut bad_closes = 0usize;
        let mut first_bad: Option<String> = None;
        let (mut replay_rows, mut replay_first, mut replay_last) =
            (0u64, None::<Instant>, None::<Instant>);
        let mut replay_incomplete = 0usize;
        let (mut first_received, mut last_received) = (None::<u64>, None::<u64>);
        for s in &subs {
            delivered += s.result.frames;
            gaps += s.result.gaps;
            gap_events += s.result.gap_events;
            dups += s.result.dups;
            if let Some(f) = s.result.first {
                first_received = Some(first_received.map_or(f, |x: u64| x.min(f)));
            }
            last_received = last_received.max(s.result.last);
            last_frame = last_frame.max(s.result.last_frame_at);
            let end_expected = if args.publishers > 0 {
                Some(if final_end > 0 {
                    final_end.max(s.start)
                } else {
                    s.start
                })
            } else if replay_offset.is_some() && args.duration.is_none() {
                Some(s.replay_end)
            } else {
                None
            };
            let mut start = s.start;
            if let (Some(f), true) = (first_offset, args.publishers > 0 && replay_offset.is_none())
            {
                if s.start > f {
                    // attached after the first acked row: those rows never reached it
                    missing += s.start - f;
                    start = f;
                }
            }
            if let Some(want) = replay_offset.filter(|&o| o > 0) {
                if s.start != want {
                    failures.push(format!(
                        "replay asked for {want}, the greeting's window starts at {}",
                        s.start
                    ));
                }
            }
            if let Some(e) = end_expected {
                expected += e.saturating_sub(start);
                if !filtered {
                    let m = e.saturating_sub(s.next);
                    missing += m;
                    if m == 0 {
                        complete += 1;
                    }
                }
            }
            let closed_ok = matches!(
                s.result.close,
                Some((1000, _)) | Some((1001, _)) | Some((1005, _))
            );
            let reached = end_expected.is_none_or(|e| s.next >= e);
            if !(closed_ok || (s.result.error.is_some() && reached && s.result.close.is_none()))
                || (s.result.error.is_some() && !reached)
            {
                bad_closes += 1;
                if first_bad.is_none() {
                    first_bad = Some(match (&s.result.close, &s.result.error) {
                        (Some((c, r)), _) => format!("subscriber closed {c} {r}"),
                        (None, Some(e)) => format!("subscriber: {e}"),
                        _ => "subscriber ended early".into(),
                    });
                }
            }
            if replay_offset.is_some() && s.replay_end > s.start {
                replay_rows += s.replay_end - s.start;
                replay_first =
                    Some(replay_first.map_or(s.connect_at, |x: Instant| x.min(s.connect_at)));
                match s.replay_done_at {
                    Some(d) => replay_last = replay_last.max(Some(d)),
                    None => replay_incomplete += 1,
                }
            }
        }
        if subs.len() < args.subscribers {
            failures.push(format!(
                "{} of {} subscribers never finished",
                args.subscribers - subs.len(),
                args.subscribers
            ));
        }
        if gaps > 0 {
            failures.push(format!("LOSS: {gaps} offsets skipped ({gap_events} gaps)"));
        }
        if dups > 0 {
            failures.push(format!(
                "DUPLICATES: {dups} frames repeated or out of order"
            ));
        }
        if missing > 0 {
            failures.push(format!("LOSS: {missing} expected offsets never arrived"));
        }
        if bad_closes > 0 {
            failures.push(format!(
                "{bad_closes} subscribers ended badly (first: {})",
                first_bad.unwrap_or_default()
            ));
        }
        if replay_incomplete > 0 {
            failures.push(format!("{replay_incomplete} replays did not complete"));
        }
        if args.publishers > 0 && rows_acked == 0 {
            failures.push("no row was acknowledged".into());
        }
        let _ = pub_errors;
        failures.dedup();
        let ok = failures.is_empty();

        let pub_secs = last_ack.map(|t| t.duration_since(go.at).as_secs_f64());
        let del_secs = last_frame.map(|t| t.duration_since(go.at).as_secs_f64());
        let rows_per_s = pub_secs.filter(|s| *s > 0.0).map(|s| rows_acked as f64 / s);
        let frames_per_s = del_secs.filter(|s| *s > 0.0).map(|s| delivered as f64 / s);
        let replay_secs = match (replay_first, replay_last) {
            (Some(a), Some(b)) => Some(b.duration_since(a).as_secs_f64()),
            _ => None,
        };
        let replay_rate = replay_secs
            .filter(|s| *s > 0.0)
            .map(|s| replay_rows as f64 / s);
        let elapsed = end.duration_since(go.at).as_secs_f64();
        let per_frame = server_cpu
            .filter(|_| delivered > 0)
            .map(|c| c * 1e6 / delivered as f64);
        let per_row = server_cpu
            .filter(|_| rows_acked > 0)
            .map(|c| c * 1e6 / rows_acked as f64);
        let l = pcts(&lat);
        let g = pcts(&greet);
        let a = pcts(&ack);

        let mut d = String::new();
        let _ = write!(
            d,
            "{{\"ok\":{ok},\"failures\":[{}]",
            failures
                .iter()
                .map(|f| jstr(f))
                .collect::<Vec<_>>()
                .join(",")
        );
        let _ = write!(
            d,
            ",\"config\":{{\"url\":{},\"publishers\":{},\"window\":{},\"batch\":{},\"rate\":{},\"subscribers\":{},\"threads\":{},\"duration\":{},\"rows\":{},\"offset\":{},\"where\":{},\"sample\":{},\"protocol\":{}}}",
            jstr(&args.url),
            args.publishers,
            args.window,
            args.batch,
            num(args.rate),
            args.subscribers,
            args.threads,
            num(args.duration),
            args.rows.map_or("null".into(), |r| r.to_string()),
            replay_offset.map_or("null".into(), |r| r.to_string()),
            args.where_.as_deref().map_or("null".into(), jstr),
            args.sample,
            jstr(match (args.protocol, args.nats_jetstream) {
                (crate::Protocol::Corecast, _) => "corecast",
                (crate::Protocol::Nats, false) => "nats",
                (crate::Protocol::Nats, true) => "nats-jetstream",
                (crate::Protocol::Raw, _) => "raw",
            })
        );
        let _ = write!(d, ",\"elapsed_s\":{}", num(Some(elapsed)));
        let _ = write!(
            d,
            ",\"publish\":{{\"frames_sent\":{frames_sent},\"rows_sent\":{rows_sent},\"frames_acked\":{frames_acked},\"rows_acked\":{rows_acked},\"errors\":{pub_errors},\"seconds\":{},\"rows_per_s\":{},\"first_offset\":{},\"end_offset\":{final_end},\"ack_latency_us\":{{\"p50\":{},\"p99\":{},\"max\":{}}}}}",
            num(pub_secs),
            num(rows_per_s),
            first_offset.map_or("null".into(), |o| o.to_string()),
            a[1],
            a[3],
            a[5]
        );
        let _ = write!(
            d,
            ",\"deliver\":{{\"subscribers_reported\":{},\"subscribers_complete\":{complete},\"frames\":{delivered},\"expected\":{expected},\"gaps\":{gaps},\"gap_events\":{gap_events},\"dups\":{dups},\"missing\":{missing},\"first_offset\":{},\"last_offset\":{},\"seconds\":{},\"frames_per_s\":{}}}",
            subs.len(),
            first_received.map_or("null".into(), |o| o.to_string()),
            last_received.map_or("null".into(), |o| o.to_string()),
            num(del_secs),
            num(frames_per_s)
        );
        let _ = write!(
            d,
            ",\"latency_us\":{{\"samples\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p999\":{},\"max\":{},\"corrected_for_co\":{}}}",
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            l[5],
            args.rate.is_some()
        );
        let _ = write!(
            d,
            ",\"greeting_us\":{{\"count\":{},\"p50\":{},\"p99\":{},\"max\":{}}}",
            g[0], g[1], g[3], g[5]
        );
        let _ = write!(
            d,
            ",\"replay\":{{\"rows\":{replay_rows},\"seconds\":{},\"rows_per_s\":{}}}",
            num(replay_secs),
            num(replay_rate)
        );
        let _ = write!(
            d,
            ",\"server\":{{\"pid\":{},\"cpu_s\":{},\"cpu_us_per_delivered_frame\":{},\"cpu_us_per_published_row\":{},\"rss_kib\":{},\"rss_peak_kib\":{}}}",
            args.server_pid.map_or("null".into(), |p| p.to_string()),
            num(server_cpu),
            num(per_frame),
            num(per_row),
            rss.map_or("null".into(), |r| r.0.to_string()),
            rss.map_or("null".into(), |r| r.1.to_string())
        );
        let _ = write!(d, ",\"client_cpu_s\":{}}}", num(self_cpu));

        let mut t = String::new();
        let _ = writeln!(
            t,
            "loadgen {} ({})",
            args.url,
            if ok { "OK" } else { "FAILED" }
        );
        if args.publishers > 0 {
            let _ = writeln!(
                t,
                "  publish: {rows_acked} rows acked in {frames_acked} frames, {} rows/s; ack p50 {} µs p99 {} µs",
                num(rows_per_s),
                a[1],
                a[3]
            );
        }
        if args.subscribers > 0 {
            let _ = writeln!(
                t,
                "  deliver: {delivered} frames to {} subscribers ({} frames/s); gaps {gaps} dups {dups} missing {missing}",
                subs.len(),
                num(frames_per_s)
            );
            let _ = writeln!(
                t,
                "  latency µs ({} samples): p50 {} p90 {} p99 {} p99.9 {} max {}",
                l[0], l[1], l[2], l[3], l[4], l[5]
            );
            let _ = writeln!(t, "  greeting µs: p50 {} max {}", g[1], g[5]);
        }
        if replay_offset.is_some() {
            let _ = writeln!(
                t,
                "  replay: {replay_rows} rows, {} rows/s",
                num(replay_rate)
            );
        }
        if let Some(c) = server_cpu {
            let _ = writeln!(
                t,
                "  server: cpu {c:.2} s, {} µs/delivered frame, {} µs/published row, rss {} KiB",
                num(per_frame),
                num(per_row),
                rss.map_or(0, |r| r.0)
            );
        }
        for f in &failures {
            let _ = writeln!(t, "  FAIL: {f}");
        }
        Report {
            ok,
            failures,
            doc: d,
            text: t,
        }
    }

    pub fn json(&self) -> String {
        self.doc.clone()
    }

    pub fn text(&self) -> String {
        self.text.clone()
    }
}
