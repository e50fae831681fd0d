//! A short loadgen run against a started corecast: 100 live subscribers for 10 s at a modest
//! rate must each receive every acknowledged offset exactly once, in order.

mod support;

use std::process::Command;

use sonic_rs::{JsonContainerTrait, JsonValueTrait};
use support::{Server, Setup};

#[test]
fn hundred_subscribers_ten_seconds_no_loss() {
    let bin = support::loadgen_bin();
    let setup = Setup::new();
    let server = Server::start(None, &setup.data(), &[]);
    let out = Command::new(&bin)
        .arg("--url")
        .arg(server.url("/trades"))
        .args([
            "--publishers",
            "1",
            "--window",
            "16",
            "--batch",
            "1",
            "--rate",
            "500",
        ])
        .args([
            "--subscribers",
            "100",
            "--threads",
            "1",
            "--duration",
            "10",
            "--max-seconds",
            "60",
        ])
        .arg("--server-pid")
        .arg(server.child.id().to_string())
        .arg("--json")
        .output()
        .expect("run loadgen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "loadgen failed ({:?}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out.status,
        server.stderr()
    );
    let doc: sonic_rs::Value =
        sonic_rs::from_str(stdout.trim()).expect("loadgen --json prints one JSON document");
    assert_eq!(
        doc.get("ok").and_then(|v| v.as_bool()),
        Some(true),
        "{stdout}"
    );
    let deliver = doc.get("deliver").expect("deliver");
    let n = |k: &str| deliver.get(k).and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
    assert_eq!(n("gaps"), 0, "{stdout}");
    assert_eq!(n("dups"), 0, "{stdout}");
    assert_eq!(n("missing"), 0, "{stdout}");
    assert_eq!(n("subscribers_complete"), 100, "{stdout}");
    let rows = doc
        .get("publish")
        .and_then(|p| p.get("rows_acked"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    assert!(
        rows >= 2_000,
        "expected ~5,000 rows at 500/s for 10 s, got {rows}: {stdout}"
    );
    assert_eq!(
        n("frames"),
        rows * 100,
        "every subscriber gets every row: {stdout}"
    );
    assert!(doc
        .get("failures")
        .and_then(|f| f.as_array())
        .is_some_and(|a| a.is_empty()));
    let _ = server.stop();
}
