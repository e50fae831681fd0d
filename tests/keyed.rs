//! Keyed streams against the real binary on loopback (issue 18): the latest row per key, served
//! as `?state` (a snapshot in offset order, then live) over WebSocket and SSE.
//!
//! Every expected state is a fold computed here of the frames a plain `?offset=0` subscriber
//! received — the exact bytes the server stores and sends — so a snapshot must equal it byte for
//! byte:
//! - the ES MBO sample keyed by `order_id`, cancels and fills removing their order;
//! - trades keyed by `symbol` (the BTCUSDT sample spread over five symbols), with `where=`;
//! - `?state` subscribers joining while a publisher keeps publishing: snapshot offsets strictly
//!   increase and all lie below the greeting's `end_offset`, live rows start exactly there with
//!   no gap and no duplicate, and snapshot + live folds to the server's whole state;
//! - kill -9 and restart: the state comes back from the checkpoint plus the log's tail (the
//!   server's log line and `corecast_state_recovered_*` say so) and equals the fold;
//! - `max_keys`: a key over it is refused, counted, and `?state` is refused `state_incomplete`;
//! - bad declarations are refused at start naming the stream and the column;
//! - `GET /v1/streams/NAME/state` windows then `/changes?token=` keep a reader's copy equal to
//!   the fold (upserts, removals, keys leaving a `where=` selection), across a restart; a token
//!   is refused for another selection, and expires past the removals the state remembers;
//! - the official Python client, unchanged, reads `?state` then live.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};
use support::*;

const SYMBOLS: [&str; 5] = ["BTCUSDT", "ETHUSDT", "SOLUSDT", "BNBUSDT", "XRPUSDT"];

const TRADE_SCHEMA: &str = r#"{"type":"object","properties":{
  "symbol":{"type":"string"},"trade_id":{"type":"integer"},"price":{"type":"number"},
  "quantity":{"type":"number"},"side":{"type":"string"},"note":{"type":["string","null"]},
  "ratio":{"type":"number"}},
  "required":["symbol","trade_id","price","quantity","side","ratio"]}"#;

fn mbo_lines() -> Vec<String> {
    let p = shared_dir().join("data/es-mbo.jsonl");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(str::to_string)
        .collect()
}

/// The BTCUSDT trades, each given one of five symbols and a side.
fn trade_lines() -> Vec<String> {
    let p = shared_dir().join("data/btcusdt-trades.jsonl");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| {
            let v: Value = sonic_rs::from_str(l).expect("a trade");
            let id = v["trade_id"].as_i64().expect("trade_id");
            format!(
                r#"{{"symbol":"{}","trade_id":{id},"price":{},"quantity":{},"side":"{}","ratio":0.5}}"#,
                SYMBOLS[(id % 5) as usize],
                v["price"].as_f64().expect("price"),
                v["quantity"].as_f64().expect("quantity"),
                if v["buyer_maker"].as_bool() == Some(true) {
                    "sell"
                } else {
                    "buy"
                }
            )
        })
        .collect()
}

fn publish_all(server: &Server, stream: &str, rows: &[String]) {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    for chunk in rows.chunks(1000) {
        publish_on(&mut ws, chunk);
    }
    let _ = ws.close(None);
}

/// Every frame of `stream` from the first offset, as sent: `count` of them.
fn all_frames(server: &Server, stream: &str, count: usize) -> Vec<String> {
    let mut ws = ws_connect(&server.url(&format!("{stream}?offset=0")));
    let _greeting = recv_text(&mut ws);
    (0..count).map(|_| recv_text(&mut ws)).collect()
}

fn offset_of(frame: &str) -> u64 {
    split_frame(frame).0.expect("a durable offset")
}

fn row_of(frame: &str) -> Value {
    sonic_rs::from_str(split_frame(frame).2).expect("row JSON")
}

/// The fold the server must match: per key the latest frame, keys removed by `removes`, in
/// offset order, keeping those whose latest row passes `select`.
fn fold(
    frames: &[String],
    key: &dyn Fn(&Value) -> String,
    removes: &dyn Fn(&Value) -> bool,
    select: &dyn Fn(&Value) -> bool,
) -> Vec<String> {
    let mut latest: HashMap<String, &String> = HashMap::new();
    for f in frames {
        let row = row_of(f);
        let k = key(&row);
        if removes(&row) {
            latest.remove(&k);
        } else {
            latest.insert(k, f);
        }
    }
    let mut v: Vec<&String> = latest
        .into_values()
        .filter(|f| select(&row_of(f)))
        .collect();
    v.sort_by_key(|f| offset_of(f));
    v.into_iter().cloned().collect()
}

fn mbo_key(r: &Value) -> String {
    r["order_id"].as_i64().expect("order_id").to_string()
}

fn mbo_removes(r: &Value) -> bool {
    matches!(r["action"].as_str(), Some("C" | "F"))
}

fn symbol_key(r: &Value) -> String {
    r["symbol"].as_str().expect("symbol").to_string()
}

fn everything(_: &Value) -> bool {
    true
}

/// A `?state` subscription: the greeting's `end_offset`, and the connection.
fn state_sub(server: &Server, stream: &str, query: &str) -> (Value, Ws) {
    let mut ws = ws_connect(&server.url(&format!("{stream}?state{query}")));
    let greeting: Value = sonic_rs::from_str(&recv_text(&mut ws)).expect("greeting JSON");
    (greeting, ws)
}

fn mbo_config(setup: &Setup, extra: &str) -> std::path::PathBuf {
    setup.config(&format!(
        "[[stream]]\nname = \"mbo\"\nschema = \"@data/es-mbo.schema.json\"\n\
         key = [\"order_id\"]\nremove_when = {{ action = [\"C\", \"F\"] }}\n{extra}"
    ))
}

fn trades_config(setup: &Setup, extra: &str) -> std::path::PathBuf {
    std::fs::write(setup.tmp.path().join("trades.schema.json"), TRADE_SCHEMA).unwrap();
    setup.config(&format!(
        "[[stream]]\nname = \"trades\"\nschema = \"trades.schema.json\"\nkey = [\"symbol\"]\n{extra}"
    ))
}

/// Reads the `?state` snapshot of `expected.len()` frames and checks the greeting describes it.
fn read_snapshot(greeting: &Value, ws: &mut Ws, expected: &[String], end: u64) {
    assert_eq!(greeting["end_offset"].as_u64(), Some(end), "{greeting:?}");
    let first = expected.first().map_or(end, |f| offset_of(f));
    assert_eq!(
        greeting["replay"][0].as_u64(),
        Some(first),
        "the replay window starts at the oldest version sent: {greeting:?}"
    );
    assert_eq!(greeting["replay"][1].as_u64(), Some(end));
    for (i, want) in expected.iter().enumerate() {
        let got = recv_text(ws);
        assert_eq!(&got, want, "snapshot frame {i} of {}", expected.len());
    }
}

fn metric(server: &Server, name: &str, stream: &str) -> Option<u64> {
    let text = http_get(server.addr, "/metrics").text();
    let prefix = format!("{name}{{stream=\"{stream}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until the state thread has folded every row below `end` (a publish is acknowledged
/// once committed; the state thread folds it right after, asynchronously).
fn folded(server: &Server, stream: &str, end: u64) {
    wait_for(
        "the state thread to fold the rows",
        Duration::from_secs(30),
        || metric(server, "corecast_state_position", stream) >= Some(end),
    );
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn mbo_state_by_order_id_is_the_fold_of_the_first_n_rows_then_live() {
    let setup = Setup::new();
    let server = Server::start(Some(&mbo_config(&setup, "")), &setup.data(), &[]);
    let lines = mbo_lines();
    let n = 40_000;
    publish_all(&server, "mbo", &lines[..n]);
    folded(&server, "mbo", n as u64 + 1);
    let frames = all_frames(&server, "mbo", n);
    let expected = fold(&frames, &mbo_key, &mbo_removes, &everything);
    assert!(
        expected.len() > 100 && expected.len() < n / 2,
        "cancels and fills removed orders: {} of {n} rows",
        expected.len()
    );
    let (greeting, mut ws) = state_sub(&server, "mbo", "");
    read_snapshot(&greeting, &mut ws, &expected, n as u64 + 1);
    // then live, from the snapshot's end on, every row
    publish_all(&server, "mbo", &lines[n..n + 3000]);
    for k in 0..3000u64 {
        let f = recv_text(&mut ws);
        assert_eq!(offset_of(&f), n as u64 + 1 + k, "live row {k}");
    }
    // where=: the latest row of each order that is a bid (an order whose latest row stopped
    // matching is not in the selection)
    let frames = all_frames(&server, "mbo", n + 3000);
    let bids = |r: &Value| r["side"].as_str() == Some("B");
    let expected = fold(&frames, &mbo_key, &mbo_removes, &bids);
    folded(&server, "mbo", (n + 3000) as u64 + 1);
    let (greeting, mut ws) = state_sub(&server, "mbo", "&where=%7B%22side%22%3A%22B%22%7D");
    assert_eq!(greeting["where"]["side"].as_str(), Some("B"));
    read_snapshot(&greeting, &mut ws, &expected, (n + 3000) as u64 + 1);
    assert!(
        metric(&server, "corecast_state_removals_total", "mbo").unwrap() > 0,
        "removals counted"
    );
    assert_eq!(
        metric(&server, "corecast_state_keys", "mbo"),
        Some(fold(&frames, &mbo_key, &mbo_removes, &everything).len() as u64)
    );
}

#[test]
fn trades_by_symbol_snapshot_then_live_has_no_gap_and_no_duplicate_while_publishing() {
    let setup = Setup::new();
    let server = Server::start(Some(&trades_config(&setup, "")), &setup.data(), &[]);
    let lines = trade_lines();
    assert_eq!(lines.len(), 2001);
    // a publisher keeps publishing small frames while subscribers join
    let addr_url = server.url("trades?publish");
    let rows = lines.clone();
    let publisher = std::thread::spawn(move || {
        let mut ws = ws_connect(&addr_url);
        let _greeting = recv_text(&mut ws);
        for chunk in rows.chunks(7) {
            publish_on(&mut ws, chunk);
        }
        let _ = ws.close(None);
    });
    let total = lines.len() as u64;
    let mut joins = Vec::new();
    let mut subs = Vec::new();
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(40));
        let (greeting, ws) = state_sub(&server, "trades", "");
        subs.push((greeting, ws));
    }
    publisher.join().expect("publisher");
    let frames = all_frames(&server, "trades", total as usize);
    for (greeting, mut ws) in subs {
        let at = greeting["end_offset"].as_u64().expect("end_offset");
        joins.push(at);
        // the snapshot is the fold of the rows below `at`
        let below: Vec<String> = frames[..(at - 1) as usize].to_vec();
        let expected = fold(&below, &symbol_key, &|_| false, &everything);
        read_snapshot(&greeting, &mut ws, &expected, at);
        // then every row from `at` on, in order, none twice
        for want in at..=total {
            let f = recv_text(&mut ws);
            assert_eq!(offset_of(&f), want, "live after joining at {at}");
            assert_eq!(f, frames[(want - 1) as usize], "live bytes as stored");
        }
    }
    assert!(
        joins.iter().any(|&j| j > 1 && j <= total),
        "some subscriber joined mid-stream: {joins:?}"
    );
    // where= selection on the whole state: each symbol's latest trade, if it was a buy
    let buys = |r: &Value| r["side"].as_str() == Some("buy");
    let expected = fold(&frames, &symbol_key, &|_| false, &buys);
    let (greeting, mut ws) = state_sub(&server, "trades", "&where=%7B%22side%22%3A%22buy%22%7D");
    read_snapshot(&greeting, &mut ws, &expected, total + 1);
    // SSE: the same snapshot as events, then live
    let mut sse = SseStream::open(server.addr, None, "/trades/events?state", &[]);
    assert_eq!(sse.status, 200);
    let expected = fold(&frames, &symbol_key, &|_| false, &everything);
    assert_eq!(expected.len(), SYMBOLS.len());
    for want in &expected {
        let (id, _, data) = sse.next_event(Duration::from_secs(10)).expect("an event");
        assert_eq!(&data, want);
        assert_eq!(id, Some(offset_of(want).to_string()));
    }
    // where the copy ends: the snapshot's offset, what it held, its oldest version; no id of
    // its own (the last event id stays the last entity's: a reconnect resumes after it)
    let (id, event, data) = sse.next_event(Duration::from_secs(10)).expect("the marker");
    let oldest = expected
        .iter()
        .map(|f| offset_of(f))
        .min()
        .expect("entities");
    let newest = expected
        .iter()
        .map(|f| offset_of(f))
        .max()
        .expect("entities");
    assert_eq!(event, "state");
    assert_eq!(id, Some(newest.to_string()));
    assert_eq!(
        data,
        format!(
            r#"{{"at":{},"entities":{},"first":{oldest}}}"#,
            total + 1,
            expected.len()
        )
    );
    // corecast sub --state: the same snapshot, each frame as received; with --where the
    // selection's; --state with --offset is a usage error
    let url = server.url("trades");
    let sub_state = |extra: &[&str], want: &[String]| {
        let count = want.len().to_string();
        let mut args = vec!["sub", url.as_str(), "--state", "--count", count.as_str()];
        args.extend_from_slice(extra);
        let out = corecast_run(&args, None, Duration::from_secs(30));
        assert_eq!(out.code, Some(0), "{out:?}");
        assert_eq!(
            out.lines(),
            want.iter().map(String::as_str).collect::<Vec<_>>()
        );
    };
    sub_state(&[], &expected);
    let buying = fold(&frames, &symbol_key, &|_| false, &buys);
    sub_state(&["--where", r#"{"side":"buy"}"#], &buying);
    let out = corecast_run(
        &["sub", &url, "--state", "--offset", "5"],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--state") && out.stderr.contains("--offset"),
        "{}",
        out.stderr
    );
    publish_batch(&server, "trades", &lines[..2]);
    for k in 0..2 {
        let (_, _, data) = sse
            .next_event(Duration::from_secs(10))
            .expect("a live event");
        assert_eq!(offset_of(&data), total + 1 + k);
    }
}

#[test]
fn kill9_then_restart_recovers_the_state_from_the_checkpoint_plus_the_tail() {
    let setup = Setup::new();
    let config = mbo_config(&setup, "checkpoint_every_s = 1\n");
    let server = Server::start(Some(&config), &setup.data(), &[]);
    let lines = mbo_lines();
    let (n1, n2) = (20_000, 5_000);
    publish_all(&server, "mbo", &lines[..n1]);
    wait_for(
        "a checkpoint covering the first rows",
        Duration::from_secs(20),
        || metric(&server, "corecast_state_checkpoint_offset", "mbo") == Some(n1 as u64 + 1),
    );
    assert!(setup.data().join("mbo/state.checkpoint").exists());
    // more rows, killed before the next checkpoint could cover them (the interval is 1 s)
    publish_all(&server, "mbo", &lines[n1..n1 + n2]);
    let covered = metric(&server, "corecast_state_checkpoint_offset", "mbo").unwrap();
    server.kill9();
    let server = Server::start(Some(&config), &setup.data(), &[]);
    wait_for("recovery", Duration::from_secs(30), || {
        server.stderr().contains("state recovered")
    });
    let log = server.stderr();
    let tail = (n1 + n2 + 1) as u64 - covered;
    assert!(tail > 0, "killed before a checkpoint covered the last rows");
    assert!(
        log.contains(&format!(
            "state recovered: from the checkpoint at offset {covered} plus {tail} rows of the log"
        )),
        "{log}"
    );
    assert_eq!(
        metric(&server, "corecast_state_recovered_from", "mbo"),
        Some(covered)
    );
    assert_eq!(
        metric(&server, "corecast_state_recovered_tail_rows", "mbo"),
        Some(tail)
    );
    let frames = all_frames(&server, "mbo", n1 + n2);
    let expected = fold(&frames, &mbo_key, &mbo_removes, &everything);
    let (greeting, mut ws) = state_sub(&server, "mbo", "");
    read_snapshot(&greeting, &mut ws, &expected, (n1 + n2) as u64 + 1);
    // a clean stop writes a last checkpoint: the next start folds no tail
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(Some(&config), &setup.data(), &[]);
    wait_for("recovery", Duration::from_secs(30), || {
        server.stderr().contains("state recovered")
    });
    assert!(server.stderr().contains(&format!(
        "state recovered: from the checkpoint at offset {} plus 0 rows",
        n1 + n2 + 1
    )));
}

#[test]
fn a_key_over_max_keys_is_refused_counted_and_the_state_is_not_served() {
    let setup = Setup::new();
    let server = Server::start(
        Some(&trades_config(&setup, "max_keys = 3\n")),
        &setup.data(),
        &[],
    );
    let lines = trade_lines();
    // four symbols among the first rows
    publish_all(&server, "trades", &lines[..3]);
    let (greeting, mut ws) = state_sub(&server, "trades", "");
    assert_eq!(greeting["end_offset"].as_u64(), Some(4));
    for _ in 0..3 {
        recv_text(&mut ws);
    }
    publish_all(&server, "trades", &lines[3..10]);
    wait_for("the refusal to be counted", Duration::from_secs(10), || {
        metric(&server, "corecast_state_keys_refused_total", "trades").unwrap_or(0) > 0
    });
    assert_eq!(
        metric(&server, "corecast_state_incomplete", "trades"),
        Some(1)
    );
    assert_eq!(metric(&server, "corecast_state_keys", "trades"), Some(3));
    let mut ws = ws_connect(&server.url("trades?state"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 1011);
    assert_eq!(reason, r#"{"error":"state_incomplete"}"#);
    let sse = http_get(server.addr, "/trades/events?state");
    assert_eq!(sse.status, 503);
    assert!(sse.text().contains("state_incomplete"), "{}", sse.text());
    assert!(
        sse.text().contains(r#""retryable":false"#),
        "{}",
        sse.text()
    );
    // a collection read: 503, but not retryable — it stays so until an operator acts
    let read = http_get(server.addr, "/v1/streams/trades/state");
    assert_eq!(read.status, 503);
    let body: Value = sonic_rs::from_str(&read.text()).expect("JSON");
    let error = body.get("error").expect("error");
    assert_eq!(
        error.get("code").and_then(|v| v.as_str()),
        Some("state_incomplete"),
        "{}",
        read.text()
    );
    assert_eq!(
        error.get("retryable").and_then(|v| v.as_bool()),
        Some(false),
        "{}",
        read.text()
    );
    assert!(
        server.stderr().contains("over max_keys (3)"),
        "{}",
        server.stderr()
    );
    // the log itself is whole: only the state is refused
    assert_eq!(all_frames(&server, "trades", 10).len(), 10);
}

#[test]
fn bad_key_declarations_are_refused_at_start_naming_stream_and_column() {
    let cases = [
        (
            "key = [\"note\"]",
            "stream trades: key column \"note\" is nullable",
        ),
        (
            "key = [\"nope\"]",
            "stream trades: key column \"nope\" is not a column of the schema",
        ),
        (
            "key = [\"ratio\"]",
            "stream trades: key column \"ratio\" is of type number",
        ),
        (
            "key = [\"symbol\"]\nremove_when = { gone = true }",
            "stream trades: remove_when: names unknown column \"gone\"",
        ),
    ];
    for (decl, want) in cases {
        let setup = Setup::new();
        std::fs::write(setup.tmp.path().join("trades.schema.json"), TRADE_SCHEMA).unwrap();
        let config = setup.config(&format!(
            "[[stream]]\nname = \"trades\"\nschema = \"trades.schema.json\"\n{decl}\n"
        ));
        let err = try_start_server_at(Some(&config), &setup.data(), "127.0.0.1:0")
            .err()
            .unwrap_or_else(|| panic!("{decl} started"));
        assert!(err.contains(want), "{decl}: {err}");
    }
    // config-level refusals name the stream's key path
    let setup = Setup::new();
    let config = setup.config("[[stream]]\nname = \"t\"\ndurable = false\nkey = [\"k\"]\n");
    let err = try_start_server_at(Some(&config), &setup.data(), "127.0.0.1:0")
        .err()
        .expect("refused");
    assert!(
        err.contains("stream[0].key: a keyed stream needs a log"),
        "{err}"
    );
    let config = setup.config("[[stream]]\nname = \"t\"\nmax_keys = 5\n");
    let err = try_start_server_at(Some(&config), &setup.data(), "127.0.0.1:0")
        .err()
        .expect("refused");
    assert!(
        err.contains("stream[0].max_keys: set on a stream without key"),
        "{err}"
    );
}

#[test]
fn a_state_reader_whose_saved_position_is_too_old_takes_the_state_again() {
    let setup = Setup::new();
    let config = trades_config(&setup, "max_replay = 5\n");
    let server = Server::start(Some(&config), &setup.data(), &[]);
    // three symbols trade only at the start, two on: their entities stay far behind the end
    let lines: Vec<String> = trade_lines()
        .into_iter()
        .enumerate()
        .filter(|(i, l)| *i < 20 || l.contains("BNBUSDT") || l.contains("XRPUSDT"))
        .map(|(_, l)| l)
        .take(200)
        .collect();
    let n = lines.len();
    assert!(n > 100, "{n}");
    // every frame as a live subscriber gets it (a replay of them all is past max_replay)
    let mut live = ws_connect(&server.url("trades"));
    let _greeting = recv_text(&mut live);
    publish_all(&server, "trades", &lines);
    let frames: Vec<String> = (0..n).map(|_| recv_text(&mut live)).collect();
    let _ = live.close(None);
    let expected = fold(&frames, &symbol_key, &|_| false, &everything);
    let url = server.url("trades");
    let cursor = setup.tmp.path().join("state.cursor");
    let cursor_arg = cursor.to_str().unwrap();
    // the first entities, then stop: the cursor holds the third one's version, far behind
    let out = corecast_run(
        &[
            "sub", &url, "--state", "--cursor", cursor_arg, "--count", "3",
        ],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.lines(),
        expected[..3].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let saved: u64 = std::fs::read_to_string(&cursor)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(saved, offset_of(&expected[2]));
    assert!(n as u64 - saved > 5, "older than max_replay");
    // again: the server no longer replays from there, so the state comes again, whole
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--state",
            "--cursor",
            cursor_arg,
            "--count",
            &expected.len().to_string(),
        ],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.lines(),
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    let saved: u64 = std::fs::read_to_string(&cursor)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        saved,
        offset_of(expected.last().unwrap()),
        "never back, on to the newest"
    );
    // SSE: a malformed Last-Event-ID is no id — the snapshot is sent, then its marker
    let mut sse = SseStream::open(
        server.addr,
        None,
        "/trades/events?state",
        &[("Last-Event-ID", "abc")],
    );
    assert_eq!(sse.status, 200);
    for want in &expected {
        let (_, _, data) = sse.next_event(Duration::from_secs(10)).expect("an entity");
        assert_eq!(&data, want);
    }
    let (_, event, _) = sse.next_event(Duration::from_secs(10)).expect("the marker");
    assert_eq!(event, "state");
}

#[test]
fn state_requests_a_keyed_stream_and_no_offset() {
    let setup = Setup::new();
    std::fs::write(setup.tmp.path().join("trades.schema.json"), TRADE_SCHEMA).unwrap();
    let config = setup.config(
        "[[stream]]\nname = \"trades\"\nschema = \"trades.schema.json\"\nkey = [\"symbol\"]\n\
         [[stream]]\nname = \"plain\"\n",
    );
    let server = Server::start(Some(&config), &setup.data(), &[]);
    let mut ws = ws_connect(&server.url("plain?state"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4400);
    assert!(reason.contains("state needs a keyed stream"), "{reason}");
    let mut ws = ws_connect(&server.url("trades?state&offset=0"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4400);
    assert!(reason.contains("state and offset"), "{reason}");
    let r = http_get(server.addr, "/plain/events?state");
    assert_eq!(r.status, 400);
    // state is a flag: state=false is refused, not read as the flag
    let mut ws = ws_connect(&server.url("trades?state=false"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4400);
    assert!(
        reason.contains(r#"state is a flag (?state, state=true or state=1), not state=\"false\""#),
        "{reason}"
    );
    let r = http_get(server.addr, "/trades/events?state=false");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("state is a flag"), "{}", r.text());
    // the catalog says which streams are keyed
    let entry = http_get(server.addr, "/v1/streams/trades").json();
    assert_eq!(
        entry["keyed"]["key"][0].as_str(),
        Some("symbol"),
        "{entry:?}"
    );
    assert_eq!(entry["keyed"]["max_keys"].as_u64(), Some(1_000_000));
    assert!(http_get(server.addr, "/v1/streams/plain").json()["keyed"].is_null());
    let r = http_get(server.addr, "/v1/streams/plain/state");
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["code"].as_str(), Some("not_keyed"));
    // an empty keyed stream: an empty snapshot, replay [1, 1], then live
    let (greeting, mut ws) = state_sub(&server, "trades", "");
    assert_eq!(greeting["end_offset"].as_u64(), Some(1));
    assert_eq!(greeting["replay"][0].as_u64(), Some(1));
    publish_batch(&server, "trades", &trade_lines()[..1]);
    assert_eq!(offset_of(&recv_text(&mut ws)), 1);
}

/// A copy of the collection as a reader of `/state` and `/changes` keeps it: key → (version,
/// row), the higher version winning.
type Copy = HashMap<String, (u64, String)>;

fn state_read(server: &Server, stream: &str, where_q: &str) -> (Copy, String, Vec<String>) {
    let mut copy = Copy::new();
    let mut keys_in_order = Vec::new();
    let mut cursor = String::new();
    loop {
        let r = http_get(
            server.addr,
            &format!("/v1/streams/{stream}/state?limit=500{where_q}{cursor}"),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let entities = v["entities"].as_array().expect("entities");
        assert!(entities.len() <= 500);
        for e in entities.iter() {
            let key = sonic_rs::to_string(&e["key"]).unwrap();
            keys_in_order.push(key.clone());
            let version = e["version"].as_u64().expect("version");
            let row = sonic_rs::to_string(&e["row"]).unwrap();
            assert!(
                copy.insert(key, (version, row)).is_none(),
                "an entity twice"
            );
        }
        match v["next_cursor"].as_str() {
            Some(c) => {
                assert!(v["token"].is_null());
                cursor = format!("&cursor={c}");
            }
            None => {
                return (
                    copy,
                    v["token"].as_str().expect("a token").to_string(),
                    keys_in_order,
                )
            }
        }
    }
}

/// Applies `/changes` from `token` until nothing is new; returns the last token.
fn apply_changes(server: &Server, stream: &str, copy: &mut Copy, mut token: String) -> String {
    loop {
        let r = http_get(
            server.addr,
            &format!("/v1/streams/{stream}/changes?token={token}&limit=500"),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let changes = v["changes"].as_array().expect("changes");
        let mut last = 0;
        for c in changes.iter() {
            let key = sonic_rs::to_string(&c["key"]).unwrap();
            let version = c["version"].as_u64().expect("version");
            assert!(version >= last, "changes in offset order");
            last = version;
            match c["op"].as_str() {
                Some("upsert") => {
                    let row = sonic_rs::to_string(&c["row"]).unwrap();
                    let newer = copy.get(&key).is_none_or(|(v, _)| *v < version);
                    if newer {
                        copy.insert(key, (version, row));
                    }
                }
                Some("remove") => {
                    assert!(matches!(
                        c["why"].as_str(),
                        Some("removed" | "left_selection")
                    ));
                    copy.remove(&key);
                }
                other => panic!("op {other:?}"),
            }
        }
        token = v["token"].as_str().expect("a token").to_string();
        if changes.is_empty() {
            return token;
        }
    }
}

/// The fold as the copy a reader must end up with.
fn fold_copy(expected: &[String], key: &dyn Fn(&Value) -> String) -> Copy {
    expected
        .iter()
        .map(|f| {
            let row = row_of(f);
            (
                format!("[{}]", key_json_of(&row, key)),
                (offset_of(f), sonic_rs::to_string(&row).unwrap()),
            )
        })
        .collect()
}

fn key_json_of(row: &Value, key: &dyn Fn(&Value) -> String) -> String {
    let k = key(row);
    if k.parse::<i64>().is_ok() {
        k
    } else {
        sonic_rs::to_string(&k).unwrap()
    }
}

#[test]
fn state_windows_then_changes_keep_a_copy_equal_to_the_fold() {
    let setup = Setup::new();
    let server = Server::start(Some(&mbo_config(&setup, "")), &setup.data(), &[]);
    let lines = mbo_lines();
    let n = 12_000;
    publish_all(&server, "mbo", &lines[..n]);
    folded(&server, "mbo", n as u64 + 1);
    let (mut copy, token, order) = state_read(&server, "mbo", "");
    let frames = all_frames(&server, "mbo", n);
    let expected = fold(&frames, &mbo_key, &mbo_removes, &everything);
    assert!(
        expected.len() > 500,
        "more than one window: {}",
        expected.len()
    );
    assert_eq!(copy, fold_copy(&expected, &mbo_key));
    let ids: Vec<i64> = order
        .iter()
        .map(|k| k.trim_matches(['[', ']']).parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "windows in key order");
    // more rows: adds, modifies, cancels and fills; the changes bring the copy up to date
    publish_all(&server, "mbo", &lines[n..n + 8000]);
    folded(&server, "mbo", n as u64 + 8001);
    let token = apply_changes(&server, "mbo", &mut copy, token);
    let frames = all_frames(&server, "mbo", n + 8000);
    let expected = fold(&frames, &mbo_key, &mbo_removes, &everything);
    assert_eq!(copy, fold_copy(&expected, &mbo_key));
    // a selection: bids only; an order whose latest row stops being a bid leaves it
    let bids_q = "&where=%7B%22side%22%3A%22B%22%7D";
    let (mut bids, bid_token, _) = state_read(&server, "mbo", bids_q);
    let is_bid = |r: &Value| r["side"].as_str() == Some("B");
    assert_eq!(
        bids,
        fold_copy(&fold(&frames, &mbo_key, &mbo_removes, &is_bid), &mbo_key)
    );
    publish_all(&server, "mbo", &lines[n + 8000..n + 10_000]);
    folded(&server, "mbo", n as u64 + 10_001);
    let bid_token = apply_changes(&server, "mbo", &mut bids, bid_token);
    let frames = all_frames(&server, "mbo", n + 10_000);
    assert_eq!(
        bids,
        fold_copy(&fold(&frames, &mbo_key, &mbo_removes, &is_bid), &mbo_key)
    );
    // a token is refused for another selection, and a window cursor for another where=
    let asks = http_get(
        server.addr,
        &format!("/v1/streams/mbo/changes?token={bid_token}&where=%7B%22side%22%3A%22A%22%7D"),
    );
    assert_eq!(asks.status, 400, "{}", asks.text());
    assert_eq!(asks.json()["error"]["code"].as_str(), Some("token_invalid"));
    let first = http_get(
        server.addr,
        &format!("/v1/streams/mbo/state?limit=2{bids_q}"),
    )
    .json();
    let c = first["next_cursor"].as_str().expect("a cursor").to_string();
    let other = http_get(
        server.addr,
        &format!("/v1/streams/mbo/state?limit=2&cursor={c}"),
    );
    assert_eq!(other.status, 400);
    assert_eq!(
        other.json()["error"]["code"].as_str(),
        Some("cursor_invalid")
    );
    let as_token = http_get(server.addr, &format!("/v1/streams/mbo/changes?token={c}"));
    assert_eq!(
        as_token.status, 400,
        "a window cursor is not a change token"
    );
    assert!(http_get(server.addr, "/v1/streams/mbo/state?limit=501").status == 400);
    // a restart: the removals since the token are in the checkpoint, so it still works
    let mut before = copy.clone();
    let kept = apply_changes(&server, "mbo", &mut before, token.clone());
    assert_eq!(server.stop(), Some(0));
    let server = Server::start(Some(&mbo_config(&setup, "")), &setup.data(), &[]);
    publish_all(&server, "mbo", &lines[n + 10_000..n + 12_000]);
    folded(&server, "mbo", n as u64 + 12_001);
    let mut after = copy.clone();
    apply_changes(&server, "mbo", &mut after, token);
    let mut resumed = before;
    apply_changes(&server, "mbo", &mut resumed, kept);
    let frames = all_frames(&server, "mbo", n + 12_000);
    let expected = fold_copy(
        &fold(&frames, &mbo_key, &mbo_removes, &everything),
        &mbo_key,
    );
    assert_eq!(after, expected, "a token from before the restart");
    assert_eq!(
        resumed, expected,
        "the token of the last read before the restart"
    );
    let r = http_get(server.addr, "/v1/streams/nope/state");
    assert_eq!(r.status, 404, "no such stream");
}

/// The official Python client (streamcast, from the anchor venv), unchanged, subscribes with
/// `?state`: it accepts the snapshot (offsets strictly increase, gaps forward are ordinary)
/// and the live rows after it; what it received folds to the server's state.
#[test]
fn the_official_client_reads_state_then_live() {
    let Some(py) = anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let setup = Setup::new();
    let server = Server::start(Some(&trades_config(&setup, "")), &setup.data(), &[]);
    let lines = trade_lines();
    publish_all(&server, "trades", &lines[..1500]);
    let script = r#"
import asyncio, json, sys
import streamcast

async def main(url, snapshot, rows):
    async with streamcast.connect(url + "?state") as sub:
        info = sub.info
        print("greeting", info.end_offset, json.dumps(list(info.replay)))
        for _ in range(snapshot):
            async with asyncio.timeout(10):
                offset, ts, row = await sub.recv()
            print(offset, json.dumps(row, separators=(",", ":")))
        async with streamcast.publish(url) as pub:
            await pub.send_many(rows)
        for _ in range(len(rows)):
            async with asyncio.timeout(10):
                offset, ts, row = await sub.recv()
            print(offset, json.dumps(row, separators=(",", ":")))

rows = [json.loads(line) for line in sys.stdin]
asyncio.run(main(sys.argv[1], int(sys.argv[2]), rows))
"#;
    let frames = all_frames(&server, "trades", 1500);
    let expected = fold(&frames, &symbol_key, &|_| false, &everything);
    let url = server.url("trades");
    let mut child = std::process::Command::new(&py)
        .args(["-c", script, &url, &expected.len().to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for l in &lines[1500..1600] {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let o = child.wait_with_output().expect("python");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "official client: {text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut out = text.lines();
    let first = expected.first().map(|f| offset_of(f)).unwrap();
    assert_eq!(
        out.next(),
        Some(format!("greeting 1501 [{first}, 1501]").as_str())
    );
    let got: Vec<(u64, Value)> = out
        .map(|l| {
            let (o, row) = l.split_once(' ').unwrap();
            (o.parse().unwrap(), sonic_rs::from_str(row).unwrap())
        })
        .collect();
    assert_eq!(got.len(), expected.len() + 100);
    for (g, want) in got.iter().zip(&expected) {
        assert_eq!(g.0, offset_of(want));
        assert_eq!(g.1, row_of(want), "the client decodes the stored row");
    }
    let live: Vec<u64> = got[expected.len()..].iter().map(|g| g.0).collect();
    assert_eq!(
        live,
        (1501..1601).collect::<Vec<u64>>(),
        "live from the join, no gap"
    );
}

/// A token from before removals the state no longer remembers (more than `max_keys` of them
/// since) answers 410 `token_expired`: the reader must read the state again.
#[test]
fn a_token_past_the_remembered_removals_has_expired() {
    let setup = Setup::new();
    let server = Server::start(
        Some(&trades_config(
            &setup,
            "max_keys = 3\nremove_when = { side = \"gone\" }\n",
        )),
        &setup.data(),
        &[],
    );
    let row = |symbol: &str, id: i64, side: &str| {
        format!(
            r#"{{"symbol":"{symbol}","trade_id":{id},"price":1.5,"quantity":2.0,"side":"{side}","ratio":0.5}}"#
        )
    };
    publish_batch(&server, "trades", &[row("A", 1, "buy")]);
    let (mut copy, token, _) = state_read(&server, "trades", "");
    assert_eq!(copy.len(), 1);
    // removals of two keys: remembered, the token sees them
    publish_batch(
        &server,
        "trades",
        &[row("B", 2, "buy"), row("B", 3, "gone"), row("A", 4, "gone")],
    );
    let token2 = apply_changes(&server, "trades", &mut copy, token.clone());
    assert!(copy.is_empty(), "both removed: {copy:?}");
    // two more removals: four remembered with room for three, the oldest is forgotten
    publish_batch(
        &server,
        "trades",
        &[
            row("C", 5, "buy"),
            row("C", 6, "gone"),
            row("D", 7, "buy"),
            row("D", 8, "gone"),
        ],
    );
    let r = http_get(
        server.addr,
        &format!("/v1/streams/trades/changes?token={token}"),
    );
    assert_eq!(r.status, 410, "{}", r.text());
    assert_eq!(r.json()["error"]["code"].as_str(), Some("token_expired"));
    assert!(r.text().contains("read the state again"), "{}", r.text());
    assert!(
        r.text().contains("are no longer remembered") && r.text().contains("discard your copy"),
        "the message says what happened and what to do: {}",
        r.text()
    );
    // a token after the forgotten removal still reads on
    let r = http_get(
        server.addr,
        &format!("/v1/streams/trades/changes?token={token2}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let whys: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["why"].as_str().unwrap_or("upsert"))
        .collect();
    assert_eq!(whys, ["removed", "removed"], "C and D came and went");
}

/// `state_snapshot_budget_bytes`: readers that do not read hold their rendered snapshots; once
/// those held bytes reach the budget a further `?state` join is refused `state_busy` (WebSocket
/// 1013, SSE 503 with `Retry-After`) instead of rendering another copy, and counted; when those
/// readers go, their bytes are given back and a join is served again.
#[test]
fn state_joins_over_the_snapshot_budget_are_refused_until_the_held_snapshots_go() {
    let setup = Setup::new();
    std::fs::write(setup.tmp.path().join("trades.schema.json"), TRADE_SCHEMA).unwrap();
    let config = setup.config(
        "[[stream]]\nname = \"big\"\nschema = \"trades.schema.json\"\nkey = [\"trade_id\"]\n\
         state_snapshot_budget_bytes = 1048576\n",
    );
    let server = Server::start(Some(&config), &setup.data(), &[]);
    // 3,000 entities of 8 KiB: a 24 MiB snapshot, far more than loopback socket buffers take
    let note = "n".repeat(8192);
    let rows: Vec<String> = (0..3000)
        .map(|i| {
            format!(
                r#"{{"symbol":"S{}","trade_id":{i},"price":1.5,"quantity":2.0,"side":"buy","note":"{note}","ratio":0.5}}"#,
                i % 7
            )
        })
        .collect();
    let mut ws = ws_connect(&server.url("big?publish"));
    let _greeting = recv_text(&mut ws);
    for chunk in rows.chunks(50) {
        publish_on(&mut ws, chunk);
    }
    let _ = ws.close(None);
    wait_for(
        "the state to hold every row",
        Duration::from_secs(30),
        || metric(&server, "corecast_state_keys", "big") == Some(3000),
    );
    // a reader that takes the greeting and then reads nothing
    let (g1, _stalled1) = state_sub(&server, "big", "");
    assert_eq!(g1["end_offset"].as_u64(), Some(3001), "{g1:?}");
    wait_for(
        "the first snapshot to be held",
        Duration::from_secs(10),
        || metric(&server, "corecast_state_snapshot_bytes_held", "big").unwrap_or(0) > 1 << 20,
    );
    let held = metric(&server, "corecast_state_snapshot_bytes_held", "big").unwrap();
    assert!(held <= 24 << 20, "at most one snapshot: {held}");
    // over the budget: refused, retryable, nothing more held
    let mut refused = ws_connect(&server.url("big?state"));
    let (code, reason) = recv_close(&mut refused);
    assert_eq!(code, 1013, "{reason}");
    assert_eq!(reason, r#"{"error":"state_busy"}"#);
    let sse = http_get(server.addr, "/big/events?state");
    assert_eq!(sse.status, 503);
    assert!(sse.text().contains("state_busy"), "{}", sse.text());
    assert!(
        sse.text().contains("state_snapshot_budget_bytes"),
        "the refusal names the limit: {}",
        sse.text()
    );
    assert!(sse.header("retry-after").is_some(), "retryable");
    assert_eq!(
        metric(
            &server,
            "corecast_state_snapshots_refused_budget_total",
            "big"
        ),
        Some(2)
    );
    assert!(metric(&server, "corecast_state_snapshot_bytes_held", "big").unwrap() <= held);
    // the stalled reader goes: its bytes come back, and a join is served whole
    drop(_stalled1);
    wait_for(
        "the held bytes to be given back",
        Duration::from_secs(20),
        || metric(&server, "corecast_state_snapshot_bytes_held", "big") == Some(0),
    );
    let (g2, mut reader) = state_sub(&server, "big", "");
    assert_eq!(g2["end_offset"].as_u64(), Some(3001), "{g2:?}");
    for i in 0..3000u64 {
        assert_eq!(offset_of(&recv_text(&mut reader)), i + 1);
    }
    wait_for(
        "a snapshot read whole is given back",
        Duration::from_secs(10),
        || metric(&server, "corecast_state_snapshot_bytes_held", "big") == Some(0),
    );
}
