//! The `corecast` client subcommands end to end: `pub`, `sub`, `tail`, `--help`, exit codes and
//! error lines; plus the client library's exactly-once publisher (resume after the mark,
//! takeover) through its blocking facade.
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use corecast_net::client::{blocking, ClientError, Offset, PublishOptions, SubscribeOptions};
use support::{corecast_bin, corecast_run, dead_port, split_frame, trade, Server, Setup};

const T: Duration = Duration::from_secs(60);

fn rows(from: i64, to: i64) -> String {
    (from..=to).map(|i| trade(i, "BTCUSD") + "\n").collect()
}

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {stderr}");
    lines[0]
}

fn default_server(setup: &Setup) -> Server {
    Server::start(None, &setup.data(), &[])
}

#[test]
fn help_lists_commands_examples_and_exit_codes() {
    let out = corecast_run(&["--help"], None, T);
    assert_eq!(out.code, Some(0));
    for w in [
        "serve",
        "pub",
        "sub",
        "tail",
        "ingest",
        "Exit codes",
        "corecast sub ws://",
    ] {
        assert!(out.stdout.contains(w), "--help lacks {w}: {}", out.stdout);
    }
    for cmd in ["pub", "sub", "tail", "ingest"] {
        let out = corecast_run(&[cmd, "--help"], None, T);
        assert_eq!(out.code, Some(0), "{cmd} --help");
        for w in [
            "Examples:",
            "Exit codes:",
            "ws://HOST:PORT/STREAM",
            &format!("corecast {cmd} ws://"),
        ] {
            assert!(
                out.stdout.contains(w),
                "{cmd} --help lacks {w}: {}",
                out.stdout
            );
        }
        for code in ["  0 ", "  1 ", "  2 ", "  3 "] {
            assert!(
                out.stdout.contains(code),
                "{cmd} --help lacks exit code {code}"
            );
        }
    }
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let out = corecast_run(&["sub"], None, T);
    assert_eq!(out.code, Some(2));
    for url in [
        "http://127.0.0.1:1/trades",
        "ws://127.0.0.1:1/",
        "ws://127.0.0.1/a?offset=1",
        "wss://h:1/s?offset=1",
    ] {
        for cmd in ["sub", "pub", "tail"] {
            let out = corecast_run(&[cmd, url], None, T);
            assert_eq!(out.code, Some(2), "{cmd} {url}: {}", out.stderr);
            let line = one_line(&out.stderr);
            assert!(
                line.contains("ws://HOST:PORT/STREAM") && line.contains("bad URL"),
                "{line}"
            );
        }
    }
    let out = corecast_run(&["sub", "ws://127.0.0.1:1/s", "--offset", "-3"], None, T);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let out = corecast_run(&["pub", "ws://127.0.0.1:1/s", "--batch", "0"], None, T);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn connection_failure_exits_3() {
    let url = format!("ws://127.0.0.1:{}/trades", dead_port());
    for cmd in ["sub", "tail", "pub"] {
        let out = corecast_run(&[cmd, &url], Some(b""), T);
        assert_eq!(out.code, Some(3), "{cmd}: {}", out.stderr);
        assert!(
            one_line(&out.stderr).contains("cannot connect to 127.0.0.1:"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn pub_sub_tail_and_refusals() {
    let setup = Setup::new();
    let server = default_server(&setup);
    let url = server.url("trades");

    // pub from stdin, batched and pipelined
    let out = corecast_run(
        &["pub", &url, "--batch", "3"],
        Some(rows(1, 10).as_bytes()),
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("published 10 rows") && out.stderr.contains("offsets 1..=10"),
        "{}",
        out.stderr
    );

    // pub from a file, one row per frame, rate-limited
    let file = setup.tmp.path().join("more.jsonl");
    std::fs::write(&file, rows(11, 15)).unwrap();
    let started = std::time::Instant::now();
    let out = corecast_run(
        &[
            "pub",
            &url,
            "--file",
            &file.display().to_string(),
            "--batch",
            "1",
            "--rate",
            "50",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        started.elapsed() >= Duration::from_millis(60),
        "--rate did not pace"
    );

    // sub from earliest: frames exactly as received, offsets 1..=15
    let out = corecast_run(
        &["sub", &url, "--offset", "earliest", "--count", "15"],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines = out.lines();
    assert_eq!(lines.len(), 15);
    for (i, line) in lines.iter().enumerate() {
        let (o, ts, row) = split_frame(line);
        assert_eq!(o, Some(i as u64 + 1));
        assert!(ts.unwrap() > 1_600_000_000_000_000);
        assert_eq!(row, trade(i as i64 + 1, "BTCUSD"), "row {i}");
    }

    // --rows-only, --offset N and --where
    let out = corecast_run(
        &["sub", &url, "--offset", "12", "--count", "2", "--rows-only"],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.lines(), vec![trade(12, "BTCUSD"), trade(13, "BTCUSD")]);
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--offset",
            "0",
            "--where",
            r#"{"side":1}"#,
            "--count",
            "3",
            "--rows-only",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.lines(),
        vec![trade(1, "BTCUSD"), trade(3, "BTCUSD"), trade(5, "BTCUSD")]
    );

    // a cursor file: consume 4, then resume at 5
    let cursor = setup.tmp.path().join("c");
    let c = cursor.display().to_string();
    let out = corecast_run(
        &[
            "sub", &url, "--offset", "earliest", "--cursor", &c, "--count", "4",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), "4\n");
    // an explicit --offset wins over the cursor file, and the file never moves backwards
    let out = corecast_run(
        &[
            "sub", &url, "--offset", "earliest", "--cursor", &c, "--count", "3",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let offs: Vec<_> = out
        .lines()
        .iter()
        .map(|l| split_frame(l).0.unwrap())
        .collect();
    assert_eq!(offs, vec![1, 2, 3]);
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), "4\n");
    // without --offset the cursor decides: after 4
    let out = corecast_run(&["sub", &url, "--cursor", &c, "--count", "3"], None, T);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let offs: Vec<_> = out
        .lines()
        .iter()
        .map(|l| split_frame(l).0.unwrap())
        .collect();
    assert_eq!(offs, vec![5, 6, 7]);
    assert_eq!(std::fs::read_to_string(&cursor).unwrap(), "7\n");
    std::fs::write(&cursor, "garbage").unwrap();
    let out = corecast_run(&["sub", &url, "--cursor", &c, "--count", "1"], None, T);
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    assert!(
        one_line(&out.stderr).contains("cursor file"),
        "{}",
        out.stderr
    );

    // tail -n 3: rows 13..=15, then a live row 16
    let mut child = Command::new(corecast_bin())
        .args(["tail", &url, "-n", "3", "--count", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut got = Vec::new();
    for _ in 0..3 {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        got.push(split_frame(l.trim_end()).0.unwrap());
    }
    assert_eq!(got, vec![13, 14, 15]);
    let out = corecast_run(&["pub", &url], Some(rows(16, 16).as_bytes()), T);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut l = String::new();
    reader.read_line(&mut l).unwrap();
    let (o, _, row) = split_frame(l.trim_end());
    assert_eq!((o, row.to_string()), (Some(16), trade(16, "BTCUSD")));
    assert_eq!(child.wait().unwrap().code(), Some(0));

    // unknown stream: 4404 with the serves list in the one error line
    let out = corecast_run(&["sub", &server.url("nope")], None, T);
    assert_eq!(out.code, Some(1));
    let line = one_line(&out.stderr);
    assert!(
        line.contains(r#"["trades"]"#) && line.contains("4404") && line.contains("not found"),
        "{line}"
    );
    let out = corecast_run(&["tail", &server.url("nope")], None, T);
    assert_eq!(out.code, Some(1));

    // refused offset: 4416 ahead, naming the numbers
    let out = corecast_run(&["sub", &url, "--offset", "999"], None, T);
    assert_eq!(out.code, Some(1));
    let line = one_line(&out.stderr);
    assert!(
        line.contains("not replayable")
            && line.contains("ahead")
            && line.contains("end_offset=17")
            && line.contains("4416"),
        "{line}"
    );

    // a bad where: 4400
    let out = corecast_run(&["sub", &url, "--where", r#"{"nope":1}"#], None, T);
    assert_eq!(out.code, Some(1));
    assert!(one_line(&out.stderr).contains("4400"), "{}", out.stderr);

    // a row the schema rejects: exit 1 naming the line; a line that is not JSON: exit 4
    let input = format!("{}{{\"event_ts\":1}}\n", rows(17, 18));
    let out = corecast_run(&["pub", &url, "--batch", "1"], Some(input.as_bytes()), T);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let line = one_line(&out.stderr);
    assert!(
        line.contains("line 3") && line.contains("rejected") && line.contains("price"),
        "{line}"
    );
    assert!(
        line.contains("2 rows before it were acknowledged; 0 rows sent after it landed too"),
        "{line}"
    );
    // frames pipelined behind a refused one land; the count says so, apart
    let input = format!("{}{{\"event_ts\":1}}\n{}", rows(21, 21), rows(22, 22));
    let out = corecast_run(&["pub", &url, "--batch", "1"], Some(input.as_bytes()), T);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let line = one_line(&out.stderr);
    assert!(
        line.contains("line 2")
            && line.contains("1 row before it was acknowledged; 1 row sent after it landed too"),
        "{line}"
    );
    let out = corecast_run(&["pub", &url], Some(b"{\"a\":\nnot json\n"), T);
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    assert!(one_line(&out.stderr).contains("line 1"), "{}", out.stderr);
    // after good rows: the bad line and column, what landed, how to go on from it
    let input = format!("{}{{\"event_ts\":nope}}\n", rows(19, 20));
    let out = corecast_run(&["pub", &url], Some(input.as_bytes()), T);
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    let line = one_line(&out.stderr);
    assert!(
        line.contains("line 3, column ") && line.contains(": not JSON"),
        "{line}"
    );
    assert!(
        line.contains("Nothing from line 3 on was sent; the 2 rows before it were acknowledged"),
        "{line}"
    );
    assert!(
        line.contains("tail -n +3 FILE | corecast pub URL`"),
        "{line}"
    );

    // exactly-once on a stream without it: 4412
    let out = corecast_run(
        &["pub", &url, "--publisher", "p1"],
        Some(rows(1, 1).as_bytes()),
        T,
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(one_line(&out.stderr).contains("4412"), "{}", out.stderr);
    assert!(
        one_line(&out.stderr).contains("exactly_once = true"),
        "{}",
        out.stderr
    );

    // the server goes away normally (SIGTERM → 1001): a live sub ends with 0
    let child = Command::new(corecast_bin())
        .args(["sub", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.stop();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn exactly_once_publish_resumes_after_the_mark() {
    let setup = Setup::new();
    let cfg =
        setup.config("[[stream]]\nname = \"orders\"\nschema = \"@trade\"\nexactly_once = true\n");
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("orders");
    let file = setup.tmp.path().join("orders.jsonl");

    // the first 6 lines land; a rerun over 10 lines sends only lines 7..=10
    std::fs::write(&file, rows(1, 6)).unwrap();
    let f = file.display().to_string();
    let out = corecast_run(
        &[
            "pub",
            &url,
            "--file",
            &f,
            "--publisher",
            "loader",
            "--batch",
            "4",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    std::fs::write(&file, rows(1, 10)).unwrap();
    let out = corecast_run(
        &[
            "pub",
            &url,
            "--file",
            &f,
            "--publisher",
            "loader",
            "--batch",
            "4",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("resuming after it") && out.stderr.contains("published 4 rows"),
        "{}",
        out.stderr
    );
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--offset",
            "earliest",
            "--count",
            "10",
            "--rows-only",
        ],
        None,
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let want: Vec<String> = (1..=10).map(|i| trade(i, "BTCUSD")).collect();
    assert_eq!(out.lines(), want);

    // the library: the mark, send, submit, batches, gap, takeover
    let opts = || PublishOptions {
        publisher: Some("loader".into()),
        ..Default::default()
    };
    let mut p = blocking::publish(&url, opts()).unwrap();
    assert_eq!(p.mark().unwrap().last_seq, 10);
    assert_eq!(p.next_seq(), Some(11));
    assert_eq!(p.send(&trade(11, "BTCUSD")).unwrap(), Some(11));
    let pending = p
        .submit_batch(&[trade(12, "BTCUSD"), trade(13, "BTCUSD")])
        .unwrap();
    assert_eq!(p.wait(&pending).unwrap(), vec![Some(12), Some(13)]);
    let mut q = blocking::publish(&url, opts()).unwrap(); // takes over
    assert_eq!(q.mark().unwrap().last_seq, 13);
    assert_eq!(p.send(&trade(14, "BTCUSD")), Err(ClientError::Superseded));
    assert_eq!(
        q.send_batch(&[trade(14, "BTCUSD")]).unwrap(),
        vec![Some(14)]
    );
    q.close().unwrap();

    // a plain publisher's rejection keeps the connection usable
    let mut plain = blocking::publish(&url, PublishOptions::default()).unwrap();
    match plain.send(r#"{"event_ts":1}"#) {
        Err(ClientError::Rejected { detail }) => assert!(detail.contains("price"), "{detail}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(plain.send(&trade(15, "BTCUSD")).unwrap(), Some(15));
    plain.close().unwrap();

    // subscribe through the library
    let mut s = blocking::connect(
        &url,
        SubscribeOptions {
            offset: Some(Offset::At(14)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(s.greeting().end_offset, Some(16));
    assert_eq!(s.greeting().replay, Some((14, 16)));
    let a = s.next().unwrap().unwrap();
    let b = s.next().unwrap().unwrap();
    assert_eq!((a.offset, b.offset), (Some(14), Some(15)));
    assert_eq!(b.row(), trade(15, "BTCUSD"));
    s.close().unwrap();
    match blocking::connect(
        &url,
        SubscribeOptions {
            offset: Some(Offset::At(99)),
            ..Default::default()
        },
    ) {
        Err(e @ ClientError::NotReplayable { .. }) => assert_eq!(e.field("end_offset"), Some(16)),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("offset 99 was served"),
    }
    match blocking::connect(&server.url("nope"), SubscribeOptions::default()) {
        Err(ClientError::StreamNotFound { serves }) => {
            assert_eq!(serves, vec!["orders".to_string()])
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("nope was served"),
    }
}

/// A slow `pub` keeps its connection through the server's keepalive (here a ping after 1 s of
/// silence, the close 1 s later): between rows it waits answering pings instead of sleeping,
/// so rows 2.5 s apart all land on one connection.
#[test]
fn a_slow_pub_answers_keepalive_pings_between_rows() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[websocket]\nping_interval_s = 1\nping_timeout_s = 1\n[[stream]]\nname = \"slow\"\nschema = \"@trade\"\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("slow");
    let out = corecast_run(
        &["pub", &url, "--batch", "1", "--rate", "0.4"],
        Some(rows(1, 3).as_bytes()),
        T,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("published 3 rows") && out.stderr.contains("offsets 1..=3"),
        "{}",
        out.stderr
    );
}

/// `pub` reading a pipe that pauses (a live feed): each row is sent when the input pauses —
/// not held until a batch fills — and the connection survives the server's keepalive (a ping
/// after 1 s of silence, the close 1 s later) because `pub` answers pings while it waits.
#[test]
fn pub_from_a_pausing_pipe_sends_each_row_promptly_and_keeps_its_connection() {
    use std::io::Write;
    let setup = Setup::new();
    let cfg = setup.config(
        "[websocket]\nping_interval_s = 1\nping_timeout_s = 1\n[[stream]]\nname = \"feed\"\nschema = \"@trade\"\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("feed");
    // a subscriber that reads all the time (so it answers its own pings)
    let (tx, arrived) = std::sync::mpsc::channel();
    let sub_url = url.clone();
    std::thread::spawn(move || {
        let mut sub = blocking::connect(&sub_url, SubscribeOptions::default()).unwrap();
        tx.send(None).unwrap();
        while let Ok(Some(row)) = sub.next() {
            if tx.send(row.offset).is_err() {
                return;
            }
        }
    });
    assert_eq!(arrived.recv_timeout(T), Ok(None), "subscribed");
    let mut child = Command::new(corecast_bin())
        .args(["pub", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for i in 1..=3 {
        stdin.write_all(rows(i, i).as_bytes()).unwrap();
        stdin.flush().unwrap();
        // the row arrives though the default batch (100 rows) is far from full
        let offset = arrived
            .recv_timeout(Duration::from_secs(2))
            .expect("the row arrives while pub waits for more input");
        assert_eq!(offset, Some(i as u64));
        // longer than ping interval + timeout: pub must answer the pings
        std::thread::sleep(Duration::from_millis(2500));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("published 3 rows"), "{stderr}");
}

/// `pub` whose server dies mid-file (kill -9) cannot know which of its unanswered frames
/// landed: it says how many rows were acknowledged, which lines got no answer, and to read the
/// end offset before resuming — never that nothing after the last acknowledgement landed. The
/// restarted server holds every acknowledged row, and at most the unanswered ones besides.
#[test]
fn pub_cut_off_by_a_dead_server_names_the_unanswered_lines() {
    let setup = Setup::new();
    let server = default_server(&setup);
    let url = server.url("trades");
    let mut child = Command::new(corecast_bin())
        .args(["pub", &url, "--batch", "10", "--rate", "3000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = rows(1, 200_000);
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(input.as_bytes());
    });
    std::thread::sleep(Duration::from_millis(1500));
    let data = server.data.clone();
    server.kill9();
    let out = child.wait_with_output().unwrap();
    let _ = feeder.join();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = one_line(&stderr);
    assert_eq!(out.status.code(), Some(3), "{line}");
    assert!(line.contains("connection lost"), "{line}");
    assert!(
        line.contains("got no answer and may or may not have landed")
            && line.contains("end_offset"),
        "{line}"
    );
    let acked: u64 = line
        .split(" rows were acknowledged")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no acknowledged count in: {line}"));
    assert!(acked > 0, "{line}");
    let restarted = Server::start(None, &data, &[]);
    let stats = support::http_get(restarted.addr, "/stats").json();
    let end = sonic_rs::JsonValueTrait::as_u64(&stats["streams"][0]["end_offset"]).unwrap();
    assert!(
        end > acked,
        "every acknowledged row is held: end {end}, acked {acked}"
    );
}

/// Runs `corecast serve` under `ulimit ULIMIT` (a shell's) until it listens; its stderr so far.
fn serve_under_ulimit(ulimit: &str) -> String {
    let setup = Setup::new();
    let script =
        format!("ulimit {ulimit} && exec \"$0\" serve --listen 127.0.0.1:0 --data \"$1\"",);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(corecast_bin())
        .arg(setup.data())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let mut seen = String::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[test]
fn a_descriptor_limit_below_the_caps_is_raised_or_warned_about_at_start() {
    // a hard limit below the SSE cap (10,000 by default): one warning line with the figures
    let low = serve_under_ulimit("-n 2048");
    let warning = low
        .lines()
        .find(|l| l.contains("WARN") && l.contains("RLIMIT_NOFILE"))
        .unwrap_or_else(|| panic!("no warning in: {low}"));
    assert!(
        warning.contains("RLIMIT_NOFILE is 2048")
            && warning.contains("max_streams = 10000")
            && warning.contains("LimitNOFILE"),
        "{warning}"
    );
    assert!(low.contains("listening on"), "it still starts: {low}");
    // a soft limit below a high enough hard limit: raised, no warning
    let hard: u64 = String::from_utf8(
        Command::new("sh")
            .args(["-c", "ulimit -Hn"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap_or(0);
    if hard >= 12_000 {
        let raised = serve_under_ulimit("-Sn 1024");
        assert!(
            raised.contains("raised RLIMIT_NOFILE from 1024"),
            "{raised}"
        );
        // (the one warning left is the open broker's: no [auth] section)
        assert!(
            !raised
                .lines()
                .any(|l| l.contains("WARN") && !l.contains("no [auth] section")),
            "{raised}"
        );
    }
}

/// Ctrl-C in the middle of a long replay to a slow reader: the cursor names a row stdout got
/// (it moves every 48 KiB of output, not only when the socket has nothing more buffered, which
/// during a replay it always has), so a rerun resumes near where the reader was.
#[test]
fn ctrl_c_during_a_long_replay_keeps_the_cursor_at_a_row_stdout_got() {
    use std::io::Read;
    let setup = Setup::new();
    let server = default_server(&setup);
    let url = server.url("trades");
    let mut p = blocking::publish(&url, PublishOptions::default()).expect("publisher");
    let all: Vec<String> = (1..=20_000).map(|i| trade(i, "BTCUSD")).collect();
    for chunk in all.chunks(500) {
        p.submit_batch(chunk).expect("submit");
    }
    p.flush().expect("acks");
    p.close().expect("close");
    let cursor = setup.tmp.path().join("c");
    let mut child = Command::new(corecast_bin())
        .args(["sub", &url, "--offset", "earliest", "--cursor"])
        .arg(&cursor)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("corecast sub");
    let mut out = child.stdout.take().expect("stdout");
    // a slow reader: the CLI waits on stdout with frames buffered behind
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < 256 * 1024 {
        let n = out.read(&mut buf).expect("read");
        assert!(n > 0, "the CLI ended early");
        got.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status();
    out.read_to_end(&mut got).expect("the rest");
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    let saved: u64 = std::fs::read_to_string(&cursor)
        .expect("a cursor saved at Ctrl-C")
        .trim()
        .parse()
        .expect("an offset");
    let text = String::from_utf8(got).expect("UTF-8");
    let shown: Vec<u64> = text.lines().filter_map(|l| split_frame(l).0).collect();
    assert!(
        saved > 0 && shown.contains(&saved),
        "cursor {saved}, {} rows shown",
        shown.len()
    );
    assert!(
        saved * 2 > shown.len() as u64,
        "cursor {saved} far behind the {} rows shown",
        shown.len()
    );
}
