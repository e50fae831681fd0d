//! The client's catch-up (`SubscribeOptions::catch_up`, `corecast sub --catch-up`) against a
//! stand-in protocol-4 broker over a published table written by
//! `../shared/tools/anchor/iceberg_writer_example.py`, as `../shared/PUBLISHED.md` §2 step 5
//! describes the official client's run against one: the broker holds only the tail of the
//! stream (2901..3050) with `max_replay` 100 and refuses older offsets with 4416 `too_old`; its
//! greeting names the table's stream metadata. The client must deliver 1..3055 once each, in
//! order, the table's rows framed byte for byte as the socket frames them, after exactly the
//! official sequence of subscribes: `?offset=N` (refused), the probe (no offset), then
//! `?offset=<table end>`.
//!
//! The layout needs the anchor venv (`../shared/tools/anchor/setup.sh`, run by `.ci/run`):
//! without it the tests print `skipped: …` and pass, except under CI (`CI` set).
//!
//! Then end to end with the real binary and no Python at all
//! (`catch_up_from_corecasts_own_published_table`): corecast publishes a stream's sealed
//! segments to its local table (the default `published`), and our client and `corecast sub
//! --catch-up` read 1..end from it and the socket, once each, byte for byte.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use corecast_net::client::{blocking, ClientError, Offset, PublishOptions, SubscribeOptions};
use corecast_storage::json;
use corecast_storage::published::{PublishedTable, S3Options};
use corecast_storage::schema::{RowCodec, Schema};
use tungstenite::handshake::server::{Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// `streamcast_ts` of the hand-written rows (and of the stand-in broker's): offset i gets
/// `TS0 + i`.
const TS0: i64 = 1796200000000000;

fn anchor() -> PathBuf {
    support::shared_dir().join("tools/anchor")
}

/// The anchor venv's python and a scratch directory, or why there is none.
fn venv() -> Option<&'static (PathBuf, tempfile::TempDir)> {
    static VENV: OnceLock<Result<(PathBuf, tempfile::TempDir), String>> = OnceLock::new();
    let made = VENV.get_or_init(|| {
        let setup = anchor().join("setup.sh");
        let out = Command::new("bash")
            .arg(&setup)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", setup.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                setup.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let python = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Ok((python, tempfile::tempdir().map_err(|e| e.to_string())?))
    });
    match made {
        Ok(v) => Some(v),
        Err(e) if std::env::var_os("CI").is_some() => panic!("anchor venv under CI: {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A published layout `write_layout(root, **kwargs)`: (stream hint URI, plain URI, stream id).
fn layout(name: &str, kwargs: &str) -> Option<(String, String, String)> {
    let (python, tmp) = venv()?;
    let root = tmp.path().join(name);
    std::fs::create_dir_all(&root).expect("layout dir");
    let script = format!(
        "import sys\nsys.path.insert(0, {anchor:?})\nfrom pathlib import Path\n\
         import iceberg_writer_example as w\nprint(w.write_layout(Path({root:?}){kwargs}))",
        anchor = anchor().display().to_string(),
        root = root.display().to_string(),
        kwargs = if kwargs.is_empty() {
            String::new()
        } else {
            format!(", {kwargs}")
        }
    );
    let out = Command::new(python)
        .args(["-c", &script])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "write_layout: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let home = format!("file://{}/trades", root.display());
    Some((
        format!("{home}/trades.metadata/version-hint.text"),
        format!("{home}/trades.metadata.json"),
        sid,
    ))
}

fn codec() -> RowCodec {
    let schema = std::fs::read_to_string(anchor().join("trade.schema.json")).expect("schema");
    RowCodec::Schema(Schema::compile(&schema).expect("trade schema"))
}

/// The canonical bytes of `row(i)` of the Python tools.
fn row_bytes(codec: &RowCodec, i: u64) -> String {
    let price = 85000.0 + (i % 100) as f64 * 0.5;
    let amount = (0.001 * (i % 7 + 1) as f64 * 1000.0).round() / 1000.0;
    let text = format!(
        r#"{{"event_ts": {}, "price": {price:?}, "amount": {amount:?}, "side": {}, "symbol": "{}", "trade_id": {}}}"#,
        1796000000000000u64 + i * 1000,
        i % 2,
        ["BTCUSD", "ETHUSD"][(i % 2) as usize],
        1000 + i
    );
    let mut out = Vec::new();
    codec
        .encode_row(&json::parse(text.as_bytes()).expect("json"), &mut out)
        .expect("row");
    String::from_utf8(out).expect("utf8")
}

/// The frame the server sends for offset `i`.
fn frame(codec: &RowCodec, i: u64) -> String {
    format!("[{i},{},{}]", TS0 + i as i64, row_bytes(codec, i))
}

/// What the stand-in broker holds and says.
#[derive(Clone)]
struct Broker {
    /// The offsets it still replays, `[first, end)`.
    tail: Range<u64>,
    max_replay: u64,
    /// `metadata_hint` and `metadata`.
    hint: Option<String>,
    plain: Option<String>,
    stream_id: String,
    /// Rows after `end` sent to a subscriber once its replay is done (then 1000).
    live: u64,
}

struct Running {
    addr: SocketAddr,
    /// Each connection's query string, in order.
    requests: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn url(&self) -> String {
        format!("ws://{}/trades", self.addr)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

fn start(broker: Broker) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        let codec = codec();
        for stream in listener.incoming().flatten() {
            // one connection at a time, as the client makes them: the log stays in order
            let _ = serve(stream, &broker, &codec, &seen);
        }
    });
    Running { addr, requests }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// tungstenite's handshake callback returns its own (large) error response type
#[allow(clippy::result_large_err)]
fn serve(
    stream: TcpStream,
    b: &Broker,
    codec: &RowCodec,
    seen: &Mutex<Vec<String>>,
) -> Result<(), String> {
    let mut query = String::new();
    let mut ws = tungstenite::accept_hdr(stream, |req: &Request, resp: Response| {
        query = req.uri().query().unwrap_or("").to_string();
        Ok(resp)
    })
    .map_err(|e| format!("handshake: {e}"))?;
    seen.lock().expect("lock").push(query.clone());
    let mut offset = None;
    let mut side = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "offset" => offset = v.parse::<u64>().ok(),
            // the only filter these tests send: {"side":N}
            "where" => {
                side = decode(v)
                    .trim_matches(|c| c == '{' || c == '}')
                    .split_once(':')
                    .and_then(|(_, n)| n.trim().parse::<u64>().ok())
            }
            _ => {}
        }
    }
    let end = b.tail.end;
    let text = |v: &Option<String>| v.as_ref().map_or("null".to_string(), |s| format!("{s:?}"));
    let greeting = |replay: &str| {
        format!(
            r#"{{"streamcast":4,"stream":"trades","end_offset":{end},"replay":{replay},"durable":true,"group_commit":true,"schema":null,"where":null,"metadata":{},"metadata_hint":{},"stream_id":"{}"}}"#,
            text(&b.plain),
            text(&b.hint),
            b.stream_id
        )
    };
    let Some(asked) = offset else {
        // the probe (or a live subscriber): the greeting, then wait for its close
        ws.send(Message::text(greeting("null")))
            .map_err(|e| e.to_string())?;
        while ws.read().is_ok() {}
        return Ok(());
    };
    let from = asked.max(1);
    if from < b.tail.start || end - from > b.max_replay {
        let reason = format!(
            r#"{{"error":"not_replayable","why":"too_old","offset":{asked},"behind":{},"max_replay":{}}}"#,
            end - from,
            b.max_replay
        );
        ws.close(Some(CloseFrame {
            code: CloseCode::from(4416),
            reason: reason.into(),
        }))
        .map_err(|e| e.to_string())?;
        while ws.read().is_ok() {}
        return Ok(());
    }
    ws.send(Message::text(greeting(&format!("[{from},{end}]"))))
        .map_err(|e| e.to_string())?;
    for i in from..end + b.live {
        if side.is_none_or(|s| i % 2 == s) {
            ws.send(Message::text(frame(codec, i)))
                .map_err(|e| e.to_string())?;
        }
    }
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
    .map_err(|e| e.to_string())?;
    while ws.read().is_ok() {}
    Ok(())
}

fn catch_up_from(url: &str, offset: Offset) -> Result<blocking::Subscription, ClientError> {
    blocking::connect(
        url,
        SubscribeOptions {
            offset: Some(offset),
            catch_up: true,
            ..SubscribeOptions::default()
        },
    )
}

/// Every frame until the server's normal close.
fn drain(mut s: blocking::Subscription) -> Vec<String> {
    let mut frames = Vec::new();
    while let Some(row) = s.next().expect("row") {
        frames.push(row.frame().to_string());
    }
    frames
}

fn tail_broker(hint: &str, plain: &str, sid: &str) -> Broker {
    Broker {
        tail: 2901..3051,
        max_replay: 100,
        hint: Some(hint.to_string()),
        plain: Some(plain.to_string()),
        stream_id: sid.to_string(),
        live: 5,
    }
}

#[test]
fn catch_up_reads_the_gap_from_the_table_and_splices_onto_the_socket() {
    let Some((hint, plain, sid)) = layout("splice", "") else {
        return;
    };
    let codec = codec();
    let broker = start(tail_broker(&hint, &plain, &sid));

    // without catch_up: the plain refusal
    match blocking::connect(
        &broker.url(),
        SubscribeOptions {
            offset: Some(Offset::At(1)),
            ..SubscribeOptions::default()
        },
    ) {
        Err(e @ ClientError::NotReplayable { .. }) => assert!(e.is_catch_up_recoverable()),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("offset 1 was served"),
    }

    for (offset, first, requests) in [
        (Offset::At(1), 1, vec!["offset=1", "", "offset=3001"]),
        (Offset::At(500), 500, vec!["offset=500", "", "offset=3001"]),
        (Offset::Earliest, 1, vec!["offset=0", "", "offset=3001"]),
    ] {
        let before = broker.requests().len();
        let s = catch_up_from(&broker.url(), offset).expect("catch-up connect");
        assert!(s.greeting().replay.is_none(), "the probe's greeting first");
        assert_eq!(s.greeting().metadata_hint.as_deref(), Some(hint.as_str()));
        let frames = drain(s);
        let want: Vec<String> = (first..3056).map(|i| frame(&codec, i)).collect();
        assert_eq!(frames.len(), want.len(), "from {first}");
        for (got, want) in frames.iter().zip(&want) {
            assert_eq!(got, want);
        }
        assert_eq!(broker.requests()[before..], requests[..], "from {first}");
    }

    // the greeting is replaced by the resumed subscription's at the splice
    let mut s = catch_up_from(&broker.url(), Offset::At(2850)).expect("connect");
    for want in 2850..3001 {
        assert!(s.is_catching_up());
        assert_eq!(s.next().expect("row").expect("a row").offset, Some(want));
    }
    assert!(s.greeting().replay.is_none());
    assert_eq!(s.next().expect("row").expect("a row").offset, Some(3001));
    assert!(!s.is_catching_up());
    assert_eq!(s.greeting().replay, Some((3001, 3051)));
    s.close().expect("close");
}

#[test]
fn catch_up_applies_the_filter_to_the_tables_rows() {
    let Some((hint, plain, sid)) = layout("filter", "") else {
        return;
    };
    let codec = codec();
    let broker = start(tail_broker(&hint, &plain, &sid));
    let s = blocking::connect(
        &broker.url(),
        SubscribeOptions {
            offset: Some(Offset::At(10)),
            where_json: Some(r#"{"side":1}"#.into()),
            catch_up: true,
            ..SubscribeOptions::default()
        },
    )
    .expect("connect");
    let frames = drain(s);
    let want: Vec<String> = (11..3056).step_by(2).map(|i| frame(&codec, i)).collect();
    assert_eq!(frames, want);
}

#[test]
fn catch_up_refusals_say_why() {
    let Some((hint, plain, sid)) = layout("refusals", "") else {
        return;
    };

    // no metadata in the greeting: nowhere to read
    let nowhere = start(Broker {
        hint: None,
        plain: None,
        ..tail_broker(&hint, &plain, &sid)
    });
    let e = catch_up_from(&nowhere.url(), Offset::At(1))
        .err()
        .expect("nowhere");
    assert!(matches!(e, ClientError::CatchUpNowhere { .. }), "{e}");

    // only `metadata` (the plain URI): read through the hint beside it
    let plain_only = start(Broker {
        hint: None,
        ..tail_broker(&hint, &plain, &sid)
    });
    assert_eq!(
        drain(catch_up_from(&plain_only.url(), Offset::At(1)).expect("plain")).len(),
        3055
    );

    // another stream's id in the greeting
    let other = start(Broker {
        stream_id: "24af1392-0000-4000-8000-000000000000".into(),
        ..tail_broker(&hint, &plain, &sid)
    });
    let e = catch_up_from(&other.url(), Offset::At(1))
        .err()
        .expect("id");
    assert!(matches!(e, ClientError::CatchUpFailed { .. }), "{e}");
    assert!(e.to_string().contains("not 24af1392"), "{e}");

    // the server holds 3101.. only: the table (..3000) never reaches its window; three rounds
    let ahead = start(Broker {
        tail: 3101..3151,
        ..tail_broker(&hint, &plain, &sid)
    });
    let mut s = catch_up_from(&ahead.url(), Offset::At(2990)).expect("connect");
    for want in 2990..3001 {
        assert_eq!(s.next().expect("row").expect("a row").offset, Some(want));
    }
    let e = s.next().expect_err("exhausted");
    match &e {
        ClientError::CatchUpExhausted {
            rounds, through, ..
        } => assert_eq!((*rounds, *through), (3, 3001)),
        other => panic!("{other}"),
    }
    assert!(
        e.to_string().contains("could not be caught up in 3 rounds"),
        "{e}"
    );
    assert_eq!(
        ahead.requests(),
        [
            "offset=2990",
            "",
            "offset=3001",
            "offset=3001",
            "offset=3001"
        ]
    );

    // a table that starts above the request
    let Some((hint, plain, sid)) = layout("above", "files=((101, 1001),)") else {
        return;
    };
    let above = start(Broker {
        tail: 1001..1051,
        ..tail_broker(&hint, &plain, &sid)
    });
    let e = catch_up_from(&above.url(), Offset::At(1))
        .err()
        .expect("gap below");
    assert!(
        matches!(
            e,
            ClientError::CatchUpGapBelow {
                requested: 1,
                floor: 101,
                ..
            }
        ),
        "{e}"
    );
    // ... and the earliest starts at its floor
    assert_eq!(
        drain(catch_up_from(&above.url(), Offset::Earliest).expect("earliest")).len(),
        1056 - 101
    );

    // a table with a hole: refused, not skipped
    let Some((hint, plain, sid)) = layout("hole", "files=((1, 1001), (2001, 3001))") else {
        return;
    };
    let hole = start(tail_broker(&hint, &plain, &sid));
    let e = catch_up_from(&hole.url(), Offset::At(1))
        .err()
        .expect("hole");
    assert!(matches!(e, ClientError::CatchUpFailed { .. }), "{e}");
    assert!(e.to_string().contains("1001..2001"), "{e}");
}

#[test]
fn corecast_sub_catch_up_prints_every_row_once() {
    let Some((hint, plain, sid)) = layout("cli", "") else {
        return;
    };
    let codec = codec();
    let broker = start(tail_broker(&hint, &plain, &sid));
    let out = Command::new(support::corecast_bin())
        .args(["sub", &broker.url(), "--offset", "1", "--catch-up"])
        .output()
        .expect("corecast sub");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3055);
    for (line, i) in lines.iter().zip(1..) {
        assert_eq!(*line, frame(&codec, i));
    }
    // without --catch-up: refused, and the hint names the flag
    let out = Command::new(support::corecast_bin())
        .args(["sub", &broker.url(), "--offset", "1"])
        .output()
        .expect("corecast sub");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--catch-up"));
}

/// A stream whose seals come by size (64 KiB of rows, 16 KiB hot segments), published to the
/// default local table, replaying at most 100 rows: offset 1 is soon too old for the socket.
const E2E_CONFIG: &str = r#"
[[stream]]
name = "trades"
schema = "@trade"
max_replay = 100
seal_every_s = 3600
seal_target_bytes = 65536
segment_bytes = 16384
"#;

fn e2e_row(i: u64) -> String {
    support::trade(i as i64, ["BTCUSD", "ETHUSD"][(i % 2) as usize])
}

fn publish_rows(p: &mut blocking::Publisher, rows: std::ops::Range<u64>) {
    let batch: Vec<String> = rows.map(e2e_row).collect();
    for chunk in batch.chunks(100) {
        p.submit_batch(chunk).expect("submit");
    }
    p.flush().expect("acks");
}

#[test]
fn catch_up_from_corecasts_own_published_table() {
    let setup = support::Setup::new();
    let cfg = setup.config(E2E_CONFIG);
    let server = support::Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    let codec = codec();
    let mut p = blocking::publish(&url, PublishOptions::default()).expect("publisher");
    publish_rows(&mut p, 1..3051);
    let mut end = 3051u64;

    // the probe's view: the greeting names the table's stream metadata
    let probe = blocking::connect(&url, SubscribeOptions::default()).expect("live");
    let (hint, sid) = (
        probe
            .greeting()
            .metadata_hint
            .clone()
            .expect("metadata_hint"),
        probe.greeting().stream_id.clone().expect("stream_id"),
    );
    assert!(probe.greeting().metadata.is_some());
    probe.close().expect("close");
    // wait for the table to hold most rows, with a tail left for the socket to replay
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let table_end = loop {
        let table = PublishedTable::open(&hint, Some(&sid), &S3Options::default());
        if let Ok(t) = &table {
            if t.end() > 1000 && t.end() < end {
                break t.end();
            }
            if t.end() == end {
                publish_rows(&mut p, end..end + 7);
                end += 7;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no table with a tail: {:?}",
            table.map(|t| t.extent())
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };

    // without catch-up: refused
    let e = blocking::connect(
        &url,
        SubscribeOptions {
            offset: Some(Offset::At(1)),
            ..SubscribeOptions::default()
        },
    )
    .err()
    .expect("offset 1 is refused");
    assert!(e.is_catch_up_recoverable(), "{e}");

    // the library: 1..end once each, then live rows on the same subscription
    let mut s = catch_up_from(&url, Offset::At(1)).expect("catch-up");
    let mut frames = Vec::new();
    for want in 1..end {
        let row = s.next().expect("row").expect("a row");
        assert_eq!(row.offset, Some(want));
        let mut canonical = Vec::new();
        codec
            .encode_row(
                &json::parse(e2e_row(want).as_bytes()).expect("json"),
                &mut canonical,
            )
            .expect("valid");
        assert_eq!(row.row().as_bytes(), canonical.as_slice(), "offset {want}");
        frames.push(row.frame().to_string());
    }
    // live rows on the same subscription (the broker may have published the tail meanwhile, so
    // the splice may come only now)
    publish_rows(&mut p, end..end + 5);
    for want in end..end + 5 {
        assert_eq!(
            s.next().expect("row").expect("a live row").offset,
            Some(want)
        );
    }
    assert!(!s.is_catching_up());
    let replay = s
        .greeting()
        .replay
        .expect("the resumed subscription's replay");
    // resumed where the table ended when the catch-up read it: at or above what it was before,
    // at most the frontier then
    assert!(
        (table_end..=end).contains(&replay.0),
        "resumed at {replay:?}, the table ended at {table_end} before, the stream at {end}"
    );
    s.close().expect("close");

    // the CLI: the same lines, byte for byte (ts included: the table holds the broker's own)
    let out = Command::new(support::corecast_bin())
        .args(["sub", &url, "--offset", "1", "--catch-up", "--count"])
        .arg((end - 1).to_string())
        .output()
        .expect("corecast sub");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len());
    for (line, frame) in lines.iter().zip(&frames) {
        assert_eq!(line, frame);
    }
    p.close().expect("publisher close");
    server.stop();
}

/// `corecast sub --catch-up --where` on a selection that matches one early row of the table and
/// nothing after it: the row reaches stdout while the CLI waits on the socket (it is not left in
/// the output buffer behind the table's filtered rows), the cursor names it only once it is
/// shown, and Ctrl-C keeps both.
#[test]
fn corecast_sub_catch_up_with_a_filter_shows_a_row_before_waiting() {
    let setup = support::Setup::new();
    let cfg = setup.config(E2E_CONFIG);
    let server = support::Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("trades");
    let mut p = blocking::publish(&url, PublishOptions::default()).expect("publisher");
    let rare = |i: u64| support::trade(i as i64, if i == 5 { "XRPUSD" } else { "BTCUSD" });
    let rows: Vec<String> = (1..3051).map(rare).collect();
    for chunk in rows.chunks(100) {
        p.submit_batch(chunk).expect("submit");
    }
    p.flush().expect("acks");
    // offset 1 is no longer replayed: wait for the table to hold it
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let refused = blocking::connect(
            &url,
            SubscribeOptions {
                offset: Some(Offset::At(1)),
                ..SubscribeOptions::default()
            },
        )
        .err()
        .is_some_and(|e| e.is_catch_up_recoverable());
        let probe = blocking::connect(&url, SubscribeOptions::default()).expect("live");
        let hint = probe.greeting().metadata_hint.clone().expect("hint");
        probe.close().expect("close");
        let held = PublishedTable::open(&hint, None, &S3Options::default())
            .is_ok_and(|t| t.floor() == Some(1) && t.end() > 1000);
        if refused && held {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no table from 1");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out_path = setup.tmp.path().join("out.txt");
    let cursor = setup.tmp.path().join("cursor");
    let mut child = Command::new(support::corecast_bin())
        .args(["sub", &url, "--offset", "1", "--catch-up", "--where"])
        .arg(r#"{"symbol":"XRPUSD"}"#)
        .arg("--cursor")
        .arg(&cursor)
        .stdout(std::fs::File::create(&out_path).expect("out"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("corecast sub");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(&out_path)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "row 5 never reached stdout while the CLI waited for live rows"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let shown = std::fs::read_to_string(&out_path).expect("out");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 1, "{shown}");
    assert!(lines[0].starts_with("[5,"), "{shown}");
    assert!(lines[0].contains("XRPUSD"), "{shown}");
    // Ctrl-C: a normal end; the cursor names the row shown, not one past what stdout got
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out_path).expect("out"), shown);
    assert_eq!(std::fs::read_to_string(&cursor).expect("cursor"), "5\n");
    p.close().expect("publisher close");
    server.stop();
}
