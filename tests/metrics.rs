//! `GET /metrics`: the Prometheus text format, checked by a strict parser here and, when the
//! anchor venv has it (`CORECAST_PROM_PY`, or `$(shared/tools/anchor/setup.sh)` with
//! `pip install prometheus_client`), by `prometheus_client.parser` too.
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use support::*;

const CONFIG: &str = r#"
[[stream]]
name = "t"
schema = "@trade"
[[stream]]
name = "live"
durable = false
"#;

/// A strict reading of the text format: every sample belongs to a family declared by `# TYPE`
/// before it, names and labels are well formed, values are floats, no series repeats, histogram
/// buckets are cumulative and end at `+Inf` = `_count`.
fn parse_strict(text: &str) -> HashMap<String, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut seen = HashSet::new();
    let mut out = HashMap::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    assert!(text.ends_with('\n'));
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut it = rest.splitn(3, ' ');
            match it.next() {
                Some("TYPE") => {
                    let n = it.next().unwrap();
                    let t = it.next().unwrap();
                    assert!(name_ok(n), "{line}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line}"
                    );
                    assert!(
                        types.insert(n.to_string(), t.to_string()).is_none(),
                        "family twice: {line}"
                    );
                }
                Some("HELP") => assert!(name_ok(it.next().unwrap()), "{line}"),
                _ => panic!("bad comment: {line}"),
            }
            continue;
        }
        assert!(!line.is_empty(), "no blank lines");
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("value: {line}")),
        };
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "{line}");
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                let inner = labels
                    .strip_prefix('{')
                    .and_then(|l| l.strip_suffix('}'))
                    .unwrap_or_else(|| panic!("{line}"));
                for kv in inner.split("\",") {
                    let (k, v) = kv
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("label: {line}"));
                    assert!(name_ok(k) && !k.contains(':'), "{line}");
                    assert!(!v.trim_end_matches('"').contains('"'), "{line}");
                }
            }
        }
        let family = types.keys().find(|f| {
            name == f.as_str()
                || (types[*f] == "histogram"
                    && [("_bucket"), ("_sum"), ("_count")]
                        .iter()
                        .any(|s| name == format!("{f}{s}")))
        });
        assert!(family.is_some(), "sample before its # TYPE: {line}");
        assert!(seen.insert(series.to_string()), "series twice: {line}");
        out.insert(series.to_string(), v);
    }
    out
}

fn prom_python() -> Option<String> {
    if let Ok(p) = std::env::var("CORECAST_PROM_PY") {
        return Some(p);
    }
    let default = std::env::var("HOME").ok()? + "/.cache/corecast-anchor/venv/bin/python";
    let ok = std::process::Command::new(&default)
        .args(["-c", "import prometheus_client.parser"])
        .output()
        .ok()?
        .status
        .success();
    ok.then_some(default)
}

#[test]
fn metrics_parse_and_count() {
    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let rows: Vec<String> = (1..=10).map(|i| trade(i, "A")).collect();
    publish_batch(&server, "t", &rows);
    publish_batch(&server, "t", &rows[..3]);
    // one subscriber of each kind, each fed everything
    let mut ws = ws_connect(&server.url("t?offset=0"));
    let _ = recv_text(&mut ws);
    for _ in 0..13 {
        recv_text(&mut ws);
    }
    let mut sse = SseStream::open(server.addr, None, "/t/events?offset=0", &[]);
    for _ in 0..13 {
        sse.next_event(Duration::from_secs(5)).expect("event");
    }
    let mut publisher = ws_connect(&server.url("live?publish"));
    let _ = recv_text(&mut publisher);
    // a refusal: 4404
    let mut nope = ws_connect(&server.url("nope"));
    let _ = recv_close(&mut nope);
    std::thread::sleep(Duration::from_millis(200));

    let r = http_get(server.addr, "/metrics");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text();
    let m = parse_strict(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
    assert_eq!(get("corecast_rows_in_total{stream=\"t\"}"), 13.0);
    assert_eq!(
        get("corecast_frames_out_total{stream=\"t\"}"),
        26.0,
        "13 frames + 13 events"
    );
    assert!(get("corecast_bytes_out_total{stream=\"t\"}") > 2000.0);
    assert_eq!(
        get("corecast_subscribers{stream=\"t\",transport=\"websocket\"}"),
        1.0
    );
    assert_eq!(
        get("corecast_subscribers{stream=\"t\",transport=\"sse\"}"),
        1.0
    );
    assert_eq!(
        get("corecast_subscribers{stream=\"t\",transport=\"pull\"}"),
        0.0
    );
    assert_eq!(get("corecast_publishers{stream=\"live\"}"), 1.0);
    assert_eq!(
        get("corecast_commit_latency_seconds_count{stream=\"t\"}"),
        2.0
    );
    assert_eq!(
        get("corecast_commit_latency_seconds_bucket{stream=\"t\",le=\"+Inf\"}"),
        2.0
    );
    assert!(get("corecast_commit_latency_seconds_sum{stream=\"t\"}") > 0.0);
    assert_eq!(get("corecast_subscriber_lag_rows{stream=\"t\"}"), 0.0);
    assert_eq!(get("corecast_refusals_total{code=\"4404\"}"), 1.0);
    assert_eq!(
        get("corecast_dropped_slow_total{stream=\"t\",transport=\"websocket\"}"),
        0.0
    );
    assert!(get("corecast_connections") >= 4.0);
    assert_eq!(get("corecast_sse_streams"), 1.0);
    let drivers =
        get("corecast_driver{driver=\"io_uring\"}") + get("corecast_driver{driver=\"fallback\"}");
    assert_eq!(drivers, 1.0);
    assert!(get("corecast_uptime_seconds") > 0.0);
    // labels are bounded: only declared stream names and fixed kinds
    for series in m.keys() {
        if let Some(i) = series.find("stream=\"") {
            let name = &series[i + 8..].split('"').next().unwrap();
            assert!(["t", "live"].contains(name), "{series}");
        }
    }

    match prom_python() {
        None => eprintln!(
            "prometheus_client not found (set CORECAST_PROM_PY); the strict Rust parser passed"
        ),
        Some(py) => {
            let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(sys.stdin.read()))
names = {f.name for f in fams}
for want in ["corecast_rows_in", "corecast_frames_out", "corecast_commit_latency_seconds", "corecast_subscribers", "corecast_refusals"]:
    assert want in names, (want, names)
h = [f for f in fams if f.name == "corecast_commit_latency_seconds"][0]
assert h.type == "histogram", h.type
print(len(fams), sum(len(f.samples) for f in fams))
"#;
            use std::io::Write;
            let mut child = std::process::Command::new(py)
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("python");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "prometheus_client refused the exposition: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!(
                "prometheus_client parsed: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
    }
}
