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
//! - bad declarations are refused at start naming the stream and the column.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sonic_rs::{JsonValueTrait, Value};
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
    // an empty keyed stream: an empty snapshot, replay [1, 1], then live
    let (greeting, mut ws) = state_sub(&server, "trades", "");
    assert_eq!(greeting["end_offset"].as_u64(), Some(1));
    assert_eq!(greeting["replay"][0].as_u64(), Some(1));
    publish_batch(&server, "trades", &trade_lines()[..1]);
    assert_eq!(offset_of(&recv_text(&mut ws)), 1);
}
