//! `loadgen --protocol raw` end to end against `bench/peers/uws/server.js` (uWebSockets.js
//! under node): fan-out at a fixed rate (every subscriber gets every acknowledged row once, in
//! order, each one sampled for latency), batched publishing paced by `--max-lag`, and a clear
//! refusal when raw mode is pointed at corecast (its greeting is not a raw server's).
//!
//! uWebSockets.js comes from `bench/peers/uws/node_modules` (what `bench/peers/uws/setup.sh`
//! installs). Without it, or without node, the test says so and passes, unless
//! `CORECAST_REQUIRE_UWS=1` (set by `.ci/run`).

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sonic_rs::JsonValueTrait;

fn uws_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/peers/uws")
}

struct Uws {
    child: Child,
    port: u16,
}

impl Uws {
    /// `node server.js 0 MODE`: `row` (a message per row) or `frame` (a message per publish
    /// frame, its rows separated by `\n`).
    fn start(mode: &str) -> Uws {
        let dir = uws_dir();
        let mut child = Command::new("node")
            .args(["server.js", "0", mode])
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node server.js");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the server's first line");
        let port = line
            .trim()
            .strip_prefix("listening on 127.0.0.1:")
            .and_then(|p| p.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("server.js did not say where it listens: {line:?}"));
        Uws { child, port }
    }
}

impl Drop for Uws {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn loadgen(url: &str, pid: u32, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(support::loadgen_bin())
        .args([
            "--url",
            url,
            "--protocol",
            "raw",
            "--json",
            "--max-seconds",
            "20",
        ])
        .arg("--server-pid")
        .arg(pid.to_string())
        .args(args)
        .output()
        .expect("run loadgen");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok_doc(uws: &Uws, args: &[&str]) -> sonic_rs::Value {
    let url = format!("ws://127.0.0.1:{}/trades", uws.port);
    let (ok, stdout, stderr) = loadgen(&url, uws.child.id(), args);
    assert!(ok, "loadgen {args:?} failed:\n{stdout}\n{stderr}");
    let doc: sonic_rs::Value =
        sonic_rs::from_str(stdout.trim()).expect("loadgen --json prints one JSON document");
    assert_eq!(
        doc.get("ok").and_then(|v| v.as_bool()),
        Some(true),
        "{stdout}"
    );
    doc
}

fn num(doc: &sonic_rs::Value, a: &str, b: &str) -> u64 {
    doc.get(a)
        .and_then(|x| x.get(b))
        .and_then(|v| v.as_u64())
        .unwrap_or(u64::MAX)
}

fn assert_complete(doc: &sonic_rs::Value, subs: u64) -> u64 {
    let rows = num(doc, "publish", "rows_acked");
    assert_eq!(num(doc, "publish", "first_offset"), 1, "{doc:?}");
    assert_eq!(num(doc, "publish", "end_offset"), rows + 1, "{doc:?}");
    assert_eq!(
        num(doc, "publish", "rows_sent"),
        rows,
        "every row acked: {doc:?}"
    );
    assert_eq!(
        num(doc, "deliver", "frames"),
        rows * subs,
        "every subscriber gets every row: {doc:?}"
    );
    for k in ["gaps", "dups", "missing"] {
        assert_eq!(num(doc, "deliver", k), 0, "{k}: {doc:?}");
    }
    assert_eq!(num(doc, "deliver", "subscribers_complete"), subs, "{doc:?}");
    rows
}

#[test]
fn loadgen_drives_a_raw_pub_sub_server() {
    let installed = uws_dir()
        .join("node_modules/uws-pack/package.json")
        .is_file();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed || !node {
        assert!(
            std::env::var_os("CORECAST_REQUIRE_UWS").is_none_or(|v| v != "1"),
            "CORECAST_REQUIRE_UWS=1 but uWebSockets.js is not installed (node: {node}; run \
             bench/peers/uws/setup.sh)"
        );
        eprintln!(
            "SKIPPED loadgen_raw: no node or no bench/peers/uws/node_modules \
             (bench/peers/uws/setup.sh installs it; CORECAST_REQUIRE_UWS=1 makes this a failure)"
        );
        return;
    }
    // build loadgen before the server starts, so that no step below waits on a compile
    let _ = support::loadgen_bin();
    let uws = Uws::start("row");

    // 20 subscribers, 1,000 rows/s for 2 s, one row per frame, every row sampled
    let doc = ok_doc(
        &uws,
        &[
            "--publishers",
            "1",
            "--window",
            "16",
            "--rate",
            "1000",
            "--subscribers",
            "20",
            "--duration",
            "2",
            "--drain",
            "5",
            "--sample",
            "1",
        ],
    );
    let rows = assert_complete(&doc, 20);
    assert!(rows >= 500, "expected ~2,000 rows: {doc:?}");
    assert_eq!(num(&doc, "latency_us", "samples"), rows * 20, "{doc:?}");
    assert!(num(&doc, "server", "rss_kib") > 0, "{doc:?}");
    assert_eq!(
        doc.get("config")
            .and_then(|c| c.get("protocol"))
            .and_then(|v| v.as_str()),
        Some("raw")
    );

    // 100 rows per publish frame (one message each to the subscribers), as fast as 5
    // subscribers keep up with
    let doc = ok_doc(
        &uws,
        &[
            "--publishers",
            "1",
            "--window",
            "8",
            "--batch",
            "100",
            "--subscribers",
            "5",
            "--duration",
            "1",
            "--drain",
            "5",
            "--max-lag",
            "2048",
        ],
    );
    let rows = assert_complete(&doc, 5);
    assert!(rows >= 100, "{doc:?}");
    assert_eq!(num(&doc, "publish", "frames_acked") * 100, rows, "{doc:?}");

    // the same against a server passing each publish frame on whole: 100 rows in one message,
    // each counted, checked and sampled as its own delivered frame
    let whole = Uws::start("frame");
    let doc = ok_doc(
        &whole,
        &[
            "--publishers",
            "1",
            "--window",
            "8",
            "--batch",
            "100",
            "--subscribers",
            "5",
            "--duration",
            "1",
            "--drain",
            "5",
            "--max-lag",
            "2048",
            "--sample",
            "1",
        ],
    );
    let rows = assert_complete(&doc, 5);
    assert!(rows >= 100, "{doc:?}");
    assert_eq!(num(&doc, "latency_us", "samples"), rows * 5, "{doc:?}");
    drop(whole);

    // raw mode against corecast: refused at the greeting, naming what was expected
    let setup = support::Setup::new();
    let server = support::Server::start(None, &setup.data(), &[]);
    let url = server.url("/trades");
    let (ok, stdout, stderr) = loadgen(
        &url,
        server.child.id(),
        &["--publishers", "0", "--subscribers", "1", "--duration", "1"],
    );
    assert!(!ok, "raw mode must refuse corecast:\n{stdout}\n{stderr}");
    // the JSON report's failures name the greeting and what a raw server would have said
    assert!(
        stdout.contains("not a raw pub/sub server's greeting")
            && stdout.contains(r#"{\"subscribed\":\"trades\"}"#),
        "{stdout}\n{stderr}"
    );
}
