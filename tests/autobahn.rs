//! Autobahn TestSuite conformance of the WebSocket codec: cases 1.* – 7.*, 9.* (messages up to
//! 16 MiB) and 10.* against `corecast serve --echo` at `/_echo`, through
//! `tests/autobahn/run.sh`, which judges the report (OK, NON-STRICT and INFORMATIONAL pass,
//! anything else fails). The runner is the real Autobahn TestSuite (`wstest`, Python 2.7) where
//! `run.sh --install` has installed it, else kosoku (Python 3), which `run.sh` installs itself.
//!
//! Skipped, saying so, only when kosoku would run and python3 is absent. The whole run takes
//! about 20 s on a debug build (15 s with kosoku).
mod support;

use std::path::Path;
use std::process::Command;

use support::{Server, Setup};

#[test]
fn autobahn_cases_against_the_echo_endpoint() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/autobahn/run.sh");
    let runner = Command::new("bash")
        .arg(&script)
        .arg("--runner")
        .output()
        .expect("run tests/autobahn/run.sh --runner");
    assert!(runner.status.success(), "run.sh --runner: {runner:?}");
    let runner = String::from_utf8_lossy(&runner.stdout).trim().to_string();
    if runner == "kosoku" && Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED autobahn: python3 is not installed, so kosoku cannot run");
        return;
    }
    let setup = Setup::new();
    let srv = Server::start(None, &setup.data(), &["--echo"]);
    let reports = setup.tmp.path().join("reports");
    let out = Command::new("bash")
        .arg(&script)
        .env("AUTOBAHN_URL", srv.url("_echo"))
        .env("AUTOBAHN_REPORTS", &reports)
        .output()
        .expect("run tests/autobahn/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "Autobahn run failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out.status,
        srv.stderr()
    );
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    let ran = if runner == "kosoku" {
        "kosoku "
    } else {
        "autobahntestsuite "
    };
    assert!(
        stdout.contains(&format!("autobahn: {ran}")),
        "not run by {runner}: {stdout}"
    );
    assert!(
        srv.stop() == Some(0),
        "the server did not stop cleanly after the run"
    );
}
