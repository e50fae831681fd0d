//! The operator's kit: the Grafana dashboard (`docs/grafana/corecast.json`) against the real
//! `/metrics`, the systemd unit (`docs/examples/corecast.service`) and
//! `corecast config --print-default`.
//!
//! Always: every metric name a dashboard query uses is one the broker exposes (read from a live
//! `/metrics` after rows were published, subscribed and refused), and the stream variable's
//! query names a real label. With Prometheus (Debian's `prometheus`; `.ci/run` installs it and
//! sets `CORECAST_REQUIRE_PROMETHEUS`, else the test is skipped with the reason printed): a real
//! Prometheus scrapes the broker once a second, and every query of every panel, `$stream` set to
//! "all", returns at least one series.
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const CONFIG: &str = r#"
[[stream]]
name = "t"
schema = "@trade"
seal_every_s = 1
[[stream]]
name = "u"
schema = "@trade"
"#;

/// Every `expr` of every panel, in order.
fn dashboard_queries() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana/corecast.json");
    let text = std::fs::read_to_string(&path).expect("docs/grafana/corecast.json");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            out.push(q.to_string());
        }
    }
    assert!(out.len() >= 20, "only {} queries", out.len());
    out
}

/// The `corecast_…` names in a query (the histogram's suffixes kept).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("corecast_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        names.push(expr[start..end].to_string());
        i = end;
    }
    names
}

/// A broker with traffic on `t`: rows published, a subscriber, an SSE reader, a refusal.
fn busy_broker(setup: &Setup) -> Server {
    let cfg = setup.config(CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let rows: Vec<String> = (1..=50).map(|i| trade(i, "A")).collect();
    publish_batch(&server, "t", &rows);
    // a refused subscription (4404) so the refusal series moves
    let mut ws = ws_connect(&server.url("nope"));
    let _ = recv_close(&mut ws);
    server
}

/// The sample names `/metrics` exposes (`name{…} v` and `name v` lines).
fn exposed(server: &Server) -> BTreeSet<String> {
    let text = http_get(server.addr, "/metrics").text();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn every_metric_the_dashboard_uses_is_exposed() {
    let setup = Setup::new();
    let server = busy_broker(&setup);
    let have = exposed(&server);
    let mut missing = BTreeSet::new();
    for q in dashboard_queries() {
        let names = metric_names(&q);
        assert!(
            !names.is_empty(),
            "a query that reads no corecast metric: {q}"
        );
        for n in names {
            if !have.contains(&n) {
                missing.insert(n);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the dashboard uses metrics /metrics does not expose: {missing:?}"
    );
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Series in Prometheus's answer to the instant query `q`; `Err` with its body when it refused.
fn prom_query(prom: std::net::SocketAddr, q: &str) -> Result<usize, String> {
    let r = http_get(prom, &format!("/api/v1/query?query={}", percent_encode(q)));
    let body = r.text();
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(body);
    }
    Ok(v["data"]["result"].as_array().map_or(0, Vec::len))
}

#[test]
fn prometheus_scrapes_the_broker_and_every_dashboard_query_returns_data() {
    let Some(prometheus) = ["prometheus", "/usr/bin/prometheus"].iter().find_map(|c| {
        Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()
            .filter(|s| s.success())
            .map(|_| c.to_string())
    }) else {
        assert!(
            std::env::var_os("CORECAST_REQUIRE_PROMETHEUS").is_none(),
            "CORECAST_REQUIRE_PROMETHEUS is set but there is no prometheus (apt-get install -y prometheus)"
        );
        eprintln!("SKIPPED: no prometheus (apt-get install -y --no-install-recommends prometheus)");
        return;
    };
    let setup = Setup::new();
    let server = busy_broker(&setup);
    let dir = setup.tmp.path().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let yml = dir.join("prometheus.yml");
    std::fs::write(
        &yml,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: corecast\n    static_configs:\n      - targets: [\"{}\"]\n",
            server.addr
        ),
    )
    .unwrap();
    let port = dead_port();
    let prom_addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prom = Kill(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", yml.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let prom_log = || std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    // up == 1 once a scrape succeeded; keep rows flowing meanwhile, so every rate has two samples
    let started = Instant::now();
    let mut sub = ws_connect(&server.url("t?offset=0"));
    let _greeting = recv_text(&mut sub);
    let mut next_id = 51;
    let mut scraped = false;
    while started.elapsed() < Duration::from_secs(60) {
        let rows: Vec<String> = (next_id..next_id + 10).map(|i| trade(i, "A")).collect();
        publish_batch(&server, "t", &rows);
        next_id += 10;
        if std::net::TcpStream::connect(prom_addr).is_ok()
            && prom_query(prom_addr, "up{job=\"corecast\"} == 1") == Ok(1)
        {
            scraped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        scraped,
        "prometheus did not scrape the broker within 60 s: {}",
        prom_log()
    );
    // five more seconds of traffic: every rate over [1m] then has several samples
    for _ in 0..10 {
        let rows: Vec<String> = (next_id..next_id + 10).map(|i| trade(i, "A")).collect();
        publish_batch(&server, "t", &rows);
        next_id += 10;
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut empty = Vec::new();
    for q in dashboard_queries() {
        let q = q.replace("$stream", ".*");
        if q.starts_with("label_values(") {
            continue; // a Grafana function, not PromQL: its metric is checked above
        }
        // a series may need one more scrape: retry for a few seconds
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match prom_query(prom_addr, &q) {
                Ok(n) if n > 0 => break,
                Ok(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(500))
                }
                Ok(_) => {
                    empty.push(q.clone());
                    break;
                }
                Err(body) => panic!("prometheus refused the dashboard query {q}: {body}"),
            }
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries with no data after {:.0} s of scraping: {empty:#?}",
        started.elapsed().as_secs_f64()
    );
    drop(sub);
}

#[test]
fn the_service_file_keeps_io_uring_working() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/corecast.service");
    let unit = std::fs::read_to_string(&path).expect("docs/examples/corecast.service");
    let lines: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let value = |k: &str| {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .collect::<Vec<_>>()
    };
    assert_eq!(value("LimitNOFILE"), ["1048576"]);
    assert_eq!(value("LimitMEMLOCK"), ["infinity"]);
    assert!(value("ExecStart")[0].contains("corecast serve --config"));
    for hardening in [
        "NoNewPrivileges",
        "ProtectSystem",
        "PrivateTmp",
        "DynamicUser",
    ] {
        assert!(!value(hardening).is_empty(), "{hardening}");
    }
    // an allow-list names io_uring's three calls; no deny-list names them or their group
    for f in value("SystemCallFilter") {
        if let Some(deny) = f.strip_prefix('~') {
            for bad in ["io_uring", "@resources", "@io-event"] {
                assert!(!deny.contains(bad), "SystemCallFilter={f} blocks {bad}");
            }
        } else {
            for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
                assert!(f.contains(call), "SystemCallFilter={f} lacks {call}");
            }
        }
    }
    assert!(
        !value("RestrictAddressFamilies")[0].contains('~'),
        "an allow-list of address families"
    );
    // systemd's own parser, where it is installed (the binary path pointed at this build)
    let verify = Command::new("systemd-analyze").arg("--version").output();
    if verify.is_ok_and(|o| o.status.success()) {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("corecast.service");
        let bin = corecast_bin().display().to_string();
        std::fs::write(&copy, unit.replace("/usr/local/bin/corecast", &bin)).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .expect("systemd-analyze verify");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("Unknown"),
            "systemd-analyze verify: {err}"
        );
    } else {
        eprintln!("systemd-analyze is not installed: the unit's syntax is not verified by systemd");
    }
}

#[test]
fn config_print_default_loads_and_serves() {
    let out = corecast_run(
        &["config", "--print-default"],
        None,
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("# corecast configuration reference"));
    for key in [
        "listen = ",
        "max_backlog = ",
        "[sse]",
        "[[stream]]",
        "# [auth]",
    ] {
        assert!(out.stdout.contains(key), "{key}");
    }
    let setup = Setup::new();
    let cfg = setup.config(&out.stdout);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let stats = http_get(server.addr, "/stats").json();
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let streams = stats.get("streams").and_then(|s| s.as_array()).unwrap();
    assert_eq!(streams.len(), 1);
    assert_eq!(
        streams[0].get("name").and_then(|n| n.as_str()),
        Some("trades")
    );
    assert_eq!(server.stop(), Some(0));
}
