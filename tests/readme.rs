//! Every command in README.md, run against the real binary.
//!
//! The first screen's broker command is run as `corecast serve` (what `cargo run --release --bin
//! corecast -- serve` builds and runs) in a scratch directory, and must serve the embedded default.
//! The tour's block is run as one bash script with three substitutions a test needs: a free port
//! instead of 8766, scratch paths instead of `/tmp/...`, and `--count 2` on the endless `tail`.
//! `target/release` in the PATH line is replaced by this build's binary folder.

mod support;

use std::process::Command;

use support::*;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md")
}

/// The fenced ```bash blocks of the README, in order.
fn bash_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match (&mut cur, line.trim_start()) {
            (None, l) if l.starts_with("```bash") => cur = Some(String::new()),
            (Some(b), l) if l.starts_with("```") => {
                blocks.push(std::mem::take(b));
                cur = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

fn commands(block: &str) -> Vec<String> {
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn first_screen_has_two_commands_and_the_broker_serves_the_embedded_default() {
    let blocks = bash_blocks(&readme());
    let setup = commands(&blocks[0]);
    assert_eq!(setup.len(), 2, "exactly two set-up commands: {setup:?}");
    assert!(setup[0].contains("corecast -- serve"), "{}", setup[0]);
    assert_eq!(setup[1], "cargo test --workspace");
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/run"))
        .expect(".ci/run");
    assert!(
        ci.contains(&setup[1]),
        ".ci/run must call the README's test command"
    );

    // `corecast serve` with no config: the embedded default (durable `trades`, trade schema)
    let s = Setup::new();
    let server = Server::start(None, &s.data(), &[]);
    let mut ws = ws_connect(&server.url("trades?publish"));
    let greeting = recv_text(&mut ws);
    assert!(greeting.starts_with(r#"{"streamcast":4,"stream":"trades","end_offset":1,"replay":null,"durable":true,"group_commit":true,"schema":{"type":"object","properties":{"event_ts":{"type":"integer","format":"int64"}"#), "{greeting}");
    ws.send(tungstenite::Message::text(trade(1, "README")))
        .expect("send");
    assert_eq!(recv_text(&mut ws), r#"{"ok":[1]}"#);
    assert!(
        s.data().join("trades/meta.db").exists() && s.data().join("trades/log").is_dir(),
        "the log lives under the data directory"
    );
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn the_tour_runs_as_written() {
    let blocks = bash_blocks(&readme());
    let tour = blocks
        .iter()
        .find(|b| b.contains("corecast pub"))
        .expect("a tour block with `corecast pub`");
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let bin_dir = corecast_bin()
        .parent()
        .expect("bin dir")
        .display()
        .to_string();
    let t = tmp.path().display().to_string();
    // scratch paths first, so a checkout or target folder under /tmp keeps its binary path
    let script = tour
        .replace("/tmp/", &format!("{t}/"))
        .replace("$PWD/target/release", &bin_dir)
        .replace("127.0.0.1:8766", &format!("127.0.0.1:{port}"))
        .replace(" -n 2\n", " -n 2 --count 2\n");
    let script = format!("set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tour failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("corecast listening"))
        .collect();
    // sub --offset earliest --count 3
    for (i, l) in lines[0..3].iter().enumerate() {
        assert!(l.starts_with(&format!("[{},", i + 1)), "line {i}: {l}");
        assert!(l.contains(r#""trade_id":"#), "{l}");
    }
    // where= membership, rows only
    assert!(
        lines[3].starts_with(r#"{"event_ts":1610064000278000,"trade_id":553287559,"#),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].starts_with(r#"{"event_ts":1610064000310000,"trade_id":553287560,"#),
        "{}",
        lines[4]
    );
    // cursor: 1..=5, then 6..=10
    for (k, l) in lines[5..15].iter().enumerate() {
        assert!(
            l.starts_with(&format!("[{},", k + 1)),
            "cursor line {k}: {l}"
        );
    }
    // tail -n 2: the last two rows of 2,001
    assert!(lines[15].starts_with("[2000,"), "{}", lines[15]);
    assert!(lines[16].starts_with("[2001,"), "{}", lines[16]);
    // /stats
    assert!(
        lines[17].contains(r#""name":"btc""#) && lines[17].contains(r#""end_offset":2002"#),
        "{}",
        lines[17]
    );
    // the pull API's first page: rows 1 and 2 and a cursor
    assert!(
        lines[18].contains(r#""rows":[[1,"#)
            && lines[18].contains(r#"[2,"#)
            && lines[18].contains(r#""next_cursor":""#),
        "{}",
        lines[18]
    );
}
