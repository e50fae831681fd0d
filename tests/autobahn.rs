//! Autobahn TestSuite conformance of the WebSocket codec: cases 1.* – 7.*, 9.* (messages up to
//! 16 MiB) and 10.*, run by kosoku against `corecast serve --echo` at `/_echo`, through
//! `tests/autobahn/run.sh` (which installs kosoku into its venv and judges the report: OK,
//! NON-STRICT and INFORMATIONAL pass, anything else fails).
//!
//! Skipped, saying so, only when python3 is absent. The whole run takes about 15 s on a
//! debug build.
mod support;

use std::path::Path;
use std::process::Command;

use support::{Server, Setup};

#[test]
fn autobahn_cases_against_the_echo_endpoint() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED autobahn: python3 is not installed, so kosoku cannot run");
        return;
    }
    let setup = Setup::new();
    let srv = Server::start(None, &setup.data(), &["--echo"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/autobahn/run.sh");
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
    assert!(
        srv.stop() == Some(0),
        "the server did not stop cleanly after the run"
    );
}
