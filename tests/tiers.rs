//! The sealed Parquet tier, black-box: the real binary on loopback, its `/stats`, and what every
//! transport replays once the hot log's rows have been sealed, evicted, expired, or crashed on.
//! Every wait polls `/stats` against a deadline; no sleep is an assertion.
//!
//! - `replay_is_byte_identical_across_tiers`: the three real data files of `../shared/data`
//!   (es-mbo: its first 30,000 rows) with 64 KiB hot segments and seals; once every row is
//!   sealed and hot segments were evicted, each row's replay over WebSocket (the frame), SSE (the
//!   event's data) and the pull API (each page's `rows` bytes) is its live frame, byte for byte,
//!   unfiltered and with a `where=` filter (the same rows as filtering the live frames); again
//!   after a restart, when the shard rings are empty and every read goes to the segments;
//! - `retention_drops_the_oldest_and_never_reuses_offsets`: `retention = "2s"`; once every
//!   segment expired, the 4416 close, the SSE `event: gap` and the pull `status: "gap"` name the
//!   dropped offsets exactly, rows still held replay unchanged, rows never sealed (older ones, on
//!   a stream that seals hourly) are all kept, and new offsets continue from the old end across
//!   restarts, also when the hot log held no row any more;
//! - `a_restart_replays_every_tier_and_sweeps_what_a_crash_left`: SIGTERM and restart after
//!   sealing and eviction replays everything; a stray `.parquet.tmp` and an unrecorded
//!   `.parquet` placed while stopped are removed at start (one log line each); a recorded segment
//!   deleted while stopped refuses the start (exit 1) with a message naming the file;
//! - `kill_9_during_seal_and_evict_loses_no_acknowledged_row`: 30 rounds (or
//!   `CORECAST_TIERS_KILL_ROUNDS`; `CORECAST_TIERS_KILL_SEED` replays the timings) of a pipelined
//!   publisher killed -9 after 0.3–1.2 s while seals (16 KiB / 0.1 s) and evictions (64 KiB hot
//!   segments) run constantly; after each restart offsets 1..end are contiguous, every
//!   acknowledged row holds its bytes, no row twice, what the last check held is unchanged, and
//!   each `.parquet.tmp` the kill left is swept (none after the final clean stop);
//! - `a_full_disk_fails_seals_which_recover_when_space_returns`: the data directory on an 8 MiB
//!   tmpfs filled to ENOSPC before the first seal is due (`seal_every_s = 1` leaves that window;
//!   were the rows sealed first, the hot log's newest segment would be evicted with them and the
//!   next commit would need a new one); rows still commit into the preallocated segment, seals
//!   fail with the disk-full error in `/stats`, and once space returns every row is sealed
//!   (within the 1 s → 30 s back-off) and replays identically. Needs root to mount; without it
//!   prints `skipped: …` and passes, unless `CI` is set.
//!
//! The tests take a common lock: on a small machine they would otherwise slow each other's
//! brokers past the deadlines they poll `/stats` with. On 2 busy cores (debug build) they take
//! about 10 s, 5 s, 5 s, 100 s and 4 s; each prints its figures to stderr.
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonic_rs::{JsonContainerTrait, JsonValueTrait, Value};
use support::*;
use tungstenite::Message;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `line` to stderr past the test harness's capture, so figures show in CI logs.
fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `v.a.b.c`, panicking with the document when a key is missing.
fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    let mut cur = v;
    for k in path {
        cur = cur
            .get(*k)
            .unwrap_or_else(|| panic!("no {path:?} in {}", sonic_rs::to_string(v).unwrap()));
    }
    cur
}

fn u(v: &Value, path: &[&str]) -> u64 {
    at(v, path).as_u64().unwrap_or_else(|| {
        panic!(
            "{path:?} is not a u64 in {}",
            sonic_rs::to_string(v).unwrap()
        )
    })
}

/// The `/stats` entry of stream `name` (with its `tiers` object).
fn stats(server: &Server, name: &str) -> Value {
    let v = http_get(server.addr, "/stats").json();
    at(&v, &["streams"])
        .as_array()
        .expect("streams")
        .iter()
        .find(|s| s.get("name").and_then(|n| n.as_str()) == Some(name))
        .unwrap_or_else(|| panic!("no stream {name} in /stats"))
        .clone()
}

/// Polls `f` every 50 ms until it gives a value; fails after `timeout` with `what` and the last
/// state `f` described.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match f() {
            Ok(t) => return t,
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every row of `name` (end_offset - 1 of them) is sealed and at least one hot
/// segment was evicted; returns the stats entry.
fn wait_all_sealed(server: &Server, name: &str, rows: u64, timeout: Duration) -> Value {
    wait_for(
        &format!("{name}: all {rows} rows sealed and hot segments evicted"),
        timeout,
        || {
            let s = stats(server, name);
            let t = at(&s, &["tiers"]);
            let ok = u(&s, &["end_offset"]) == rows + 1
                && u(t, &["sealed", "rows"]) == rows
                && u(t, &["seal_lag", "rows"]) == 0
                && u(t, &["evicted_segments"]) > 0;
            if ok {
                Ok(s)
            } else {
                Err(sonic_rs::to_string(t).unwrap())
            }
        },
    )
}

/// A live subscriber attached now (before anything is published): a thread that collects
/// frames exactly as received until [`Live::finish`] says how many there are.
struct Live {
    target: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<Vec<String>>,
}

impl Live {
    fn open(server: &Server, stream: &str) -> Live {
        let mut ws = ws_connect(&server.url(stream));
        let _greeting = recv_text(&mut ws);
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(100))).ok();
        }
        let target = Arc::new(AtomicU64::new(u64::MAX));
        let want = target.clone();
        let handle = std::thread::spawn(move || {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(300);
            while (got.len() as u64) < want.load(Ordering::Acquire) {
                match ws.read() {
                    Ok(Message::Text(t)) => got.push(t.to_string()),
                    Ok(Message::Close(c)) => panic!("live subscriber closed: {c:?}"),
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        assert!(Instant::now() < deadline, "live subscriber: no end");
                    }
                    Err(e) => panic!("live subscriber: {e}"),
                }
            }
            got
        });
        Live { target, handle }
    }

    /// The first `n` live frames (all there are: exactly `n` arrived).
    fn finish(self, n: usize) -> Vec<String> {
        self.target.store(n as u64, Ordering::Release);
        let got = self.handle.join().expect("live subscriber");
        assert_eq!(got.len(), n, "live frames");
        for (i, f) in got.iter().enumerate() {
            assert_eq!(frame_offset(f), i as u64 + 1, "live frames in order");
        }
        got
    }
}

/// The first `n` lines of a shared data file.
fn data_rows(file: &str, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(shared_dir().join("data").join(file)).expect("data file");
    text.lines().take(n).map(str::to_string).collect()
}

/// Publishes `rows` in batches of `batch` on one connection; asserts the offsets run on from
/// `first`.
fn publish_all(server: &Server, stream: &str, rows: &[String], batch: usize, first: u64) {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    let mut next = first;
    for chunk in rows.chunks(batch) {
        let offs = publish_on(&mut ws, chunk);
        let want: Vec<Option<u64>> = (next..next + chunk.len() as u64).map(Some).collect();
        assert_eq!(offs, want, "{stream}: offsets of a batch");
        next += chunk.len() as u64;
    }
    let _ = ws.close(None);
}

fn frame_offset(f: &str) -> u64 {
    split_frame(f).0.unwrap_or_else(|| panic!("no offset: {f}"))
}

/// Reads `n` frames of a WebSocket replay at `path_and_query`.
fn ws_replay(server: &Server, path_and_query: &str, n: usize) -> Vec<String> {
    let mut ws = ws_connect(&server.url(path_and_query));
    let _greeting = recv_text(&mut ws);
    let got = (0..n).map(|_| recv_text(&mut ws)).collect();
    let _ = ws.close(None);
    got
}

/// Reads `n` message events of an SSE replay at `path_and_query`: `(id, data)`.
fn sse_replay(server: &Server, path_and_query: &str, n: usize) -> Vec<(u64, String)> {
    let mut s = SseStream::open(server.addr, None, path_and_query, &[]);
    assert_eq!(s.status, 200, "{path_and_query}");
    (0..n)
        .map(|i| {
            let (id, event, data) = s
                .next_event(Duration::from_secs(30))
                .unwrap_or_else(|| panic!("{path_and_query}: event {i} of {n} did not come"));
            assert_eq!(event, "message", "{path_and_query}: {data}");
            (id.expect("id").parse().expect("numeric id"), data)
        })
        .collect()
}

/// Pages through `/v1/streams/NAME/rows` from offset `from` up to `end` (`where_q`: `&where=…`
/// or empty). Each page's `rows` array must be, byte for byte, the live frames of the offsets
/// it names joined by commas (`live[o - 1]` is offset o's frame). Returns the offsets.
fn pull_all(
    server: &Server,
    name: &str,
    from: u64,
    end: u64,
    where_q: &str,
    live: &[String],
) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut q = format!("from={from}&limit=500{where_q}");
    loop {
        let r = http_get(server.addr, &format!("/v1/streams/{name}/rows?{q}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(at(&v, &["status"]).as_str(), Some("ok"), "{}", r.text());
        let page: Vec<u64> = at(&v, &["rows"])
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row.get(0).and_then(|o| o.as_u64()).expect("offset"))
            .collect();
        let text = r.text();
        let start = text.find("\"rows\":[").expect("rows") + "\"rows\":[".len();
        let raw = text[start..].strip_suffix("]}").expect("rows last");
        let want: Vec<&str> = page
            .iter()
            .map(|&o| live[o as usize - 1].as_str())
            .collect();
        assert_eq!(
            raw,
            want.join(","),
            "{name}: a pull page differs from the live frames"
        );
        offsets.extend(&page);
        let next = u(&v, &["next_offset"]);
        if next >= end {
            return offsets;
        }
        assert!(
            !page.is_empty() || !where_q.is_empty(),
            "{name}: an empty page at {next} of {end}"
        );
        q = format!(
            "limit=500&cursor={}{where_q}",
            at(&v, &["next_cursor"]).as_str().unwrap()
        );
    }
}

/// Percent-encodes a `where=` JSON for a query string.
fn where_param(json: &str) -> String {
    let mut out = String::from("&where=");
    for b in json.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Which rows of a test's own filtering pass (the `where=` the broker is given, in Rust).
type RowPredicate<'a> = &'a dyn Fn(&Value) -> bool;

/// Checks offsets 1..=live.len() of `name` replay byte-identically over WebSocket, SSE and
/// pull, and (when given) that `where_json` selects exactly the live frames `keep` selects.
fn check_replays(
    server: &Server,
    name: &str,
    live: &[String],
    filter: Option<(&str, RowPredicate<'_>)>,
) {
    let n = live.len();
    let end = n as u64 + 1;
    let ws = ws_replay(server, &format!("{name}?offset=1"), n);
    for (i, (got, want)) in ws.iter().zip(live).enumerate() {
        assert_eq!(got, want, "{name}: WebSocket replay of offset {}", i + 1);
    }
    let sse = sse_replay(server, &format!("/{name}/events?offset=1"), n);
    for (i, ((id, data), want)) in sse.iter().zip(live).enumerate() {
        assert_eq!(*id, i as u64 + 1, "{name}: SSE id");
        assert_eq!(data, want, "{name}: SSE replay of offset {}", i + 1);
    }
    let pulled = pull_all(server, name, 1, end, "", live);
    assert_eq!(pulled, (1..end).collect::<Vec<_>>(), "{name}: pull offsets");
    let Some((where_json, keep)) = filter else {
        return;
    };
    let want: Vec<&String> = live
        .iter()
        .filter(|f| {
            let row: Value = sonic_rs::from_str(split_frame(f).2).expect("row JSON");
            keep(&row)
        })
        .collect();
    assert!(
        !want.is_empty() && want.len() < n,
        "{name}: {where_json} selects some rows"
    );
    let wq = where_param(where_json);
    let ws = ws_replay(server, &format!("{name}?offset=1{wq}"), want.len());
    assert_eq!(
        ws.iter().collect::<Vec<_>>(),
        want,
        "{name}: filtered WebSocket replay {where_json}"
    );
    let sse = sse_replay(server, &format!("/{name}/events?offset=1{wq}"), want.len());
    assert_eq!(
        sse.iter().map(|(_, d)| d).collect::<Vec<_>>(),
        want,
        "{name}: filtered SSE replay {where_json}"
    );
    let pulled = pull_all(server, name, 1, end, &wq, live);
    assert_eq!(
        pulled,
        want.iter().map(|f| frame_offset(f)).collect::<Vec<_>>(),
        "{name}: filtered pull {where_json}"
    );
    report(&format!(
        "tiers: {name}: {n} rows identical over WebSocket, SSE and pull; {where_json}: {} rows",
        want.len()
    ));
}

fn segments_dir(data: &Path, stream: &str) -> PathBuf {
    data.join(stream).join("segments")
}

fn list_dir(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------

const FILES_CONFIG: &str = r#"
[[stream]]
name = "btc"
schema = "@data/btcusdt-trades.schema.json"
segment_bytes = 65536
seal_target_bytes = 65536
seal_every_s = 0.5
[[stream]]
name = "mbp"
schema = "@data/es-mbp1.schema.json"
segment_bytes = 65536
seal_target_bytes = 65536
seal_every_s = 0.5
[[stream]]
name = "mbo"
schema = "@data/es-mbo.schema.json"
segment_bytes = 65536
seal_target_bytes = 65536
seal_every_s = 0.5
"#;

fn str_is(key: &'static str, want: &'static str) -> impl Fn(&Value) -> bool {
    move |row| row.get(key).and_then(|x| x.as_str()) == Some(want)
}

#[test]
fn replay_is_byte_identical_across_tiers() {
    let _serial = serial();
    let t0 = Instant::now();
    let setup = Setup::new();
    let cfg = setup.config(FILES_CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let sets = [
        ("btc", data_rows("btcusdt-trades.jsonl", usize::MAX)),
        ("mbp", data_rows("es-mbp1.jsonl", usize::MAX)),
        ("mbo", data_rows("es-mbo.jsonl", 30_000)),
    ];
    let mut lives = HashMap::new();
    for (name, rows) in &sets {
        let live = Live::open(&server, name);
        publish_all(&server, name, rows, 200, 1);
        lives.insert(*name, live.finish(rows.len()));
    }
    for (name, rows) in &sets {
        let s = wait_all_sealed(&server, name, rows.len() as u64, Duration::from_secs(90));
        let t = at(&s, &["tiers"]);
        assert_eq!(u(t, &["earliest_offset"]), 1, "{name}: nothing dropped");
        assert_eq!(u(t, &["sealed", "first_offset"]), 1);
        assert_eq!(u(t, &["sealed", "last_offset"]), rows.len() as u64);
        assert!(u(t, &["seals"]) > 1, "{name}: several segments");
        assert!(at(t, &["last_error"]).is_null(), "{name}: no error");
        // the catalog entry shows the same tiers object
        let one = http_get(server.addr, &format!("/v1/streams/{name}")).json();
        assert_eq!(u(&one, &["tiers", "sealed", "rows"]), rows.len() as u64);
        report(&format!(
            "tiers: {name}: {} rows sealed into {} segments, {} hot segments evicted",
            rows.len(),
            u(t, &["sealed", "segments"]),
            u(t, &["evicted_segments"])
        ));
    }
    let maker = |row: &Value| row.get("buyer_maker").and_then(|x| x.as_bool()) == Some(true);
    let check_all = |server: &Server| {
        check_replays(
            server,
            "btc",
            &lives["btc"],
            Some((r#"{"buyer_maker":true}"#, &maker)),
        );
        check_replays(
            server,
            "mbp",
            &lives["mbp"],
            Some((r#"{"action":"T"}"#, &str_is("action", "T"))),
        );
        check_replays(
            server,
            "mbo",
            &lives["mbo"],
            Some((r#"{"action":"C"}"#, &str_is("action", "C"))),
        );
    };
    // the shard rings still hold the newest 8,192+ frames of each stream (all of btc and mbp)
    check_all(&server);
    // after a restart the rings start empty: every replay reads the Parquet segments (and the
    // hot log's newest, already sealed, segment)
    let addr = server.addr.to_string();
    assert_eq!(server.stop(), Some(0));
    let server = start_server_at(Some(&cfg), &setup.data(), &addr);
    for (name, rows) in &sets {
        let s = stats(&server, name);
        assert_eq!(
            u(&s, &["tiers", "sealed", "rows"]),
            rows.len() as u64,
            "{name}"
        );
    }
    check_all(&server);
    let m = http_get(server.addr, "/metrics").text();
    for want in [
        "corecast_tier_rows{",
        "corecast_seals_total",
        "corecast_seal_failures_total",
        "corecast_earliest_offset",
    ] {
        assert!(m.contains(want), "/metrics has {want}");
    }
    assert_eq!(server.stop(), Some(0));
    report(&format!(
        "tiers: byte-identical replay in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
}

// ---------------------------------------------------------------------------------------------

const RETENTION_CONFIG: &str = r#"
[[stream]]
name = "r"
schema = "@trade"
segment_bytes = 16384
seal_target_bytes = 8192
seal_every_s = 0.2
retention = "2s"
# never sealed while the test runs: retention must not touch it
[[stream]]
name = "u"
schema = "@trade"
segment_bytes = 16384
seal_every_s = 3600
retention = "2s"
"#;

fn trades(from: i64, n: i64) -> Vec<String> {
    (from..from + n).map(|i| trade(i, "R")).collect()
}

/// Waits until retention dropped every sealed segment (and nothing is left to seal) of `r`;
/// returns the earliest offset `/stats` shows then, which no longer moves.
fn wait_all_expired(server: &Server, end: u64) -> u64 {
    wait_for(
        "every sealed segment expired",
        Duration::from_secs(30),
        || {
            let s = stats(server, "r");
            let t = at(&s, &["tiers"]);
            let ok = u(&s, &["end_offset"]) == end
                && u(t, &["seal_lag", "rows"]) == 0
                && u(t, &["sealed", "segments"]) == 0
                && u(t, &["expired_segments"]) > 0
            // every segment sealed since start is dropped, files included
            && u(t, &["expired_segments"]) == u(t, &["seals"])
                && u(t, &["earliest_offset"]) > 1;
            if ok {
                Ok(u(t, &["earliest_offset"]))
            } else {
                Err(sonic_rs::to_string(t).unwrap())
            }
        },
    )
}

/// Asserts the three transports refuse offset 1 as evicted below `earliest` and replay
/// `earliest..end` as `live` holds them.
fn check_evicted(server: &Server, earliest: u64, end: u64, live: &[String]) {
    // WebSocket: 4416 at connect, the exact reason
    let mut ws = ws_connect(&server.url("r?offset=1"));
    let (code, reason) = recv_close(&mut ws);
    assert_eq!(code, 4416, "{reason}");
    assert_eq!(
        reason,
        format!(r#"{{"error":"not_replayable","why":"evicted","offset":1,"earliest":{earliest}}}"#)
    );
    // SSE: a gap event first, then the held rows
    let mut s = SseStream::open(server.addr, None, "/r/events?offset=1", &[]);
    assert_eq!(s.status, 200);
    let (_, event, data) = s.next_event(Duration::from_secs(10)).expect("gap event");
    assert_eq!(event, "gap");
    assert_eq!(
        data,
        format!(
            r#"{{"reason":"evicted","missing":{{"first":1,"last":{}}}}}"#,
            earliest - 1
        )
    );
    for o in earliest..end {
        let (id, event, data) = s.next_event(Duration::from_secs(10)).expect("a held row");
        assert_eq!((id, event.as_str()), (Some(o.to_string()), "message"));
        assert_eq!(data, live[o as usize - 1], "SSE row {o}");
    }
    drop(s);
    // pull: status gap naming the range, the window from earliest
    let r = http_get(server.addr, "/v1/streams/r/rows?from=1&limit=500");
    let v = r.json();
    assert_eq!(at(&v, &["status"]).as_str(), Some("gap"), "{}", r.text());
    assert_eq!(u(&v, &["missing", "first"]), 1);
    assert_eq!(u(&v, &["missing", "last"]), earliest - 1);
    let first = at(&v, &["rows"])
        .as_array()
        .unwrap()
        .first()
        .map(|r| r.get(0).and_then(|o| o.as_u64()));
    // nothing held at all when the hot log's newest segment went too (every row was sealed)
    let want = (earliest < end).then_some(Some(earliest));
    assert_eq!(first, want, "{}", r.text());
    assert_eq!(
        pull_all(server, "r", earliest, end, "", live),
        (earliest..end).collect::<Vec<_>>()
    );
    // the rows still held replay unchanged over WebSocket too
    let got = ws_replay(
        server,
        &format!("r?offset={earliest}"),
        (end - earliest) as usize,
    );
    assert_eq!(got.as_slice(), &live[earliest as usize - 1..]);
}

#[test]
fn retention_drops_the_oldest_and_never_reuses_offsets() {
    let _serial = serial();
    let t0 = Instant::now();
    let setup = Setup::new();
    let cfg = setup.config(RETENTION_CONFIG);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    // rows that stay unsealed, published before (so older than) every row of "r"
    let unsealed = trades(1, 300);
    let u_live = Live::open(&server, "u");
    publish_all(&server, "u", &unsealed, 100, 1);
    let u_live = u_live.finish(unsealed.len());
    let first_rows = trades(1, 1500);
    let live = Live::open(&server, "r");
    publish_all(&server, "r", &first_rows, 100, 1);
    let mut live = live.finish(first_rows.len());
    let mut end = live.len() as u64 + 1;
    let earliest = wait_all_expired(&server, end);
    // "u"'s rows are older than everything retention just dropped, but not sealed: all held
    let s = stats(&server, "u");
    assert_eq!(u(&s, &["tiers", "earliest_offset"]), 1);
    assert_eq!(u(&s, &["tiers", "sealed", "rows"]), 0);
    assert_eq!(u(&s, &["tiers", "seal_lag", "rows"]), unsealed.len() as u64);
    assert_eq!(u(&s, &["tiers", "expired_segments"]), 0);
    assert_eq!(ws_replay(&server, "u?offset=1", unsealed.len()), u_live);
    let t = stats(&server, "r");
    assert!(u(&t, &["tiers", "evicted_segments"]) > 0);
    check_evicted(&server, earliest, end, &live);
    report(&format!(
        "tiers: retention: {} rows, earliest {earliest} ({} rows still in the hot log), {} segments expired",
        end - 1,
        end - earliest,
        u(&t, &["tiers", "expired_segments"])
    ));

    // a restart keeps the offsets: new rows continue from the old end
    let addr = server.addr.to_string();
    assert_eq!(server.stop(), Some(0));
    let server = start_server_at(Some(&cfg), &setup.data(), &addr);
    let s = stats(&server, "r");
    assert_eq!(u(&s, &["end_offset"]), end);
    assert!(u(&s, &["tiers", "earliest_offset"]) >= earliest);
    let more = trades(2000, 500);
    let mut ws = ws_connect(&server.url(&format!("r?offset={end}")));
    let _greeting = recv_text(&mut ws);
    publish_all(&server, "r", &more, 100, end);
    live.extend((0..more.len()).map(|_| recv_text(&mut ws)));
    drop(ws);
    end += more.len() as u64;
    let earliest2 = wait_all_expired(&server, end);
    assert!(earliest2 > earliest, "{earliest2} > {earliest}");
    check_evicted(&server, earliest2, end, &live);
    // and once more after everything expired: stop, start, publish
    assert_eq!(server.stop(), Some(0));
    let server = start_server_at(Some(&cfg), &setup.data(), &addr);
    let offs = publish_batch(&server, "r", &trades(5000, 3));
    assert_eq!(
        offs,
        vec![Some(end), Some(end + 1), Some(end + 2)],
        "offsets never reused"
    );
    assert_eq!(
        ws_replay(&server, "u?offset=1", unsealed.len()),
        u_live,
        "unsealed rows held"
    );
    assert_eq!(server.stop(), Some(0));
    report(&format!(
        "tiers: retention in {:.1} s (end {}, earliest {earliest2})",
        t0.elapsed().as_secs_f64(),
        end + 3
    ));
}

// ---------------------------------------------------------------------------------------------

const RESTART_CONFIG: &str = r#"
[[stream]]
name = "btc"
schema = "@data/btcusdt-trades.schema.json"
segment_bytes = 16384
seal_target_bytes = 16384
seal_every_s = 0.2
"#;

/// Starts `corecast serve` expecting it to refuse: `(exit code, stderr)`.
fn serve_refused(cfg: &Path, data: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(corecast_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--config")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("corecast started although a recorded segment is missing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), reader.join().unwrap_or_default())
}

#[test]
fn a_restart_replays_every_tier_and_sweeps_what_a_crash_left() {
    let _serial = serial();
    let t0 = Instant::now();
    let setup = Setup::new();
    let cfg = setup.config(RESTART_CONFIG);
    let data = setup.data();
    let server = Server::start(Some(&cfg), &data, &[]);
    let rows = data_rows("btcusdt-trades.jsonl", usize::MAX);
    let n = rows.len() as u64;
    let live = Live::open(&server, "btc");
    publish_all(&server, "btc", &rows, 100, 1);
    let live = live.finish(rows.len());
    let before = wait_all_sealed(&server, "btc", n, Duration::from_secs(60));
    let addr = server.addr.to_string();
    assert_eq!(server.stop(), Some(0));

    // everything replays from 1 identically after the restart (the ring starts empty)
    let server = start_server_at(Some(&cfg), &data, &addr);
    let s = stats(&server, "btc");
    assert_eq!(u(&s, &["end_offset"]), n + 1);
    assert_eq!(u(&s, &["tiers", "earliest_offset"]), 1);
    assert_eq!(
        u(&s, &["tiers", "sealed", "segments"]),
        u(&before, &["tiers", "sealed", "segments"])
    );
    check_replays(&server, "btc", &live, None);
    assert_eq!(server.stop(), Some(0));

    // what a crash leaves in segments/ is removed at start
    let segs = segments_dir(&data, "btc");
    let recorded = list_dir(&segs);
    assert!(
        recorded.len() > 1 && recorded.iter().all(|f| f.ends_with(".parquet")),
        "{recorded:?}"
    );
    let stray_tmp = "x.parquet.tmp";
    let unrecorded = format!("{:020}-{:020}.parquet", n + 1, n + 10);
    std::fs::write(segs.join(stray_tmp), b"half a seal").unwrap();
    std::fs::write(segs.join(&unrecorded), b"PAR1 never recorded PAR1").unwrap();
    let server = start_server_at(Some(&cfg), &data, &addr);
    assert_eq!(list_dir(&segs), recorded, "the sweep removed both strays");
    let log = server.stderr();
    for f in [stray_tmp, unrecorded.as_str()] {
        assert!(
            log.contains(&format!("removed segments/{f}")),
            "a log line names {f}: {log}"
        );
    }
    let got = ws_replay(&server, "btc?offset=1", live.len());
    assert_eq!(got, live);
    assert_eq!(server.stop(), Some(0));

    // a recorded segment missing: the start is refused, naming it
    let gone = &recorded[recorded.len() / 2];
    std::fs::remove_file(segs.join(gone)).unwrap();
    let (code, stderr) = serve_refused(&cfg, &data);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {stderr}");
    assert!(
        stderr.contains(gone.as_str()),
        "stderr names {gone}: {stderr}"
    );
    assert!(stderr.contains("missing"), "{stderr}");
    report(&format!(
        "tiers: restart and sweep in {:.1} s ({} segments; refused with exit {code:?})",
        t0.elapsed().as_secs_f64(),
        recorded.len()
    ));
}

// ---------------------------------------------------------------------------------------------

const KILL_CONFIG: &str = r#"
[[stream]]
name = "k"
schema = "@trade"
max_replay = "unlimited"
segment_bytes = 65536
seal_target_bytes = 16384
seal_every_s = 0.1
"#;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One pipelined plain publisher until its connection fails: `(offset, trade_id)` of every
/// acknowledged row, and the next unused trade_id.
fn pipelined(url: &str, mut next_id: i64, seed: u64) -> (Vec<(u64, i64)>, i64, String) {
    let mut acked = Vec::new();
    let mut rng = Rng(seed | 1);
    let Ok((mut ws, _)) = tungstenite::connect(url) else {
        return (acked, next_id, "connect failed".into());
    };
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        s.set_nodelay(true).ok();
    }
    let text = |ws: &mut Ws| -> Result<String, String> {
        loop {
            match ws.read().map_err(|e| e.to_string())? {
                Message::Text(t) => return Ok(t.to_string()),
                Message::Close(c) => return Err(format!("closed: {c:?}")),
                _ => continue,
            }
        }
    };
    if let Err(e) = text(&mut ws) {
        return (acked, next_id, format!("no greeting: {e}"));
    }
    let mut inflight: std::collections::VecDeque<(i64, i64)> = Default::default();
    let end = loop {
        let mut failed = None;
        while inflight.len() < 6 {
            let n = rng.range(1, 8) as i64;
            let rows: Vec<String> = (next_id..next_id + n).map(|i| trade(i, "K")).collect();
            let first = next_id;
            // counted as sent before the write: a failed write may still have reached the broker
            next_id += n;
            if let Err(e) = ws.write(Message::text(format!("[{}]", rows.join(",")))) {
                failed = Some(format!("write: {e}"));
                break;
            }
            inflight.push_back((first, n));
        }
        if let Some(e) = failed {
            break e;
        }
        if let Err(e) = ws.flush() {
            break format!("flush: {e}");
        }
        let reply = match text(&mut ws) {
            Ok(r) => r,
            Err(e) => break format!("read: {e}"),
        };
        let (first, n) = inflight.pop_front().expect("in flight");
        let v: Value = sonic_rs::from_str(&reply).expect("reply JSON");
        let ok = v
            .get("ok")
            .and_then(|o| o.as_array())
            .unwrap_or_else(|| panic!("refused: {reply}"));
        assert_eq!(ok.len() as i64, n, "{reply}");
        for (i, o) in ok.iter().enumerate() {
            acked.push((o.as_u64().expect("offset"), first + i as i64));
        }
    };
    (acked, next_id, end)
}

/// The whole log of `k` through a WebSocket replay from 1, checked contiguous: `rows[i]` is
/// offset `i + 1`'s row text.
fn read_k(server: &Server) -> Vec<String> {
    let mut ws = ws_connect(&server.url("k?offset=1"));
    let g: Value = sonic_rs::from_str(&recv_text(&mut ws)).expect("greeting");
    let end = u(&g, &["end_offset"]);
    let mut rows = Vec::with_capacity(end as usize);
    for want in 1..end {
        let f = recv_text(&mut ws);
        let (o, _, row) = split_frame(&f);
        assert_eq!(o, Some(want), "offsets contiguous");
        rows.push(row.to_string());
    }
    let _ = ws.close(None);
    rows
}

#[test]
fn kill_9_during_seal_and_evict_loses_no_acknowledged_row() {
    let _serial = serial();
    let t0 = Instant::now();
    let rounds: u64 = std::env::var("CORECAST_TIERS_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let seed = std::env::var("CORECAST_TIERS_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    report(&format!(
        "tiers: kill -9: {rounds} rounds, CORECAST_TIERS_KILL_SEED={seed}"
    ));
    let mut rng = Rng(seed | 1);
    let setup = Setup::new();
    let cfg = setup.config(KILL_CONFIG);
    let data = setup.data();
    let segs = segments_dir(&data, "k");
    // offset → trade_id acknowledged, over all rounds
    let mut acked: HashMap<u64, i64> = HashMap::new();
    let mut next_id: i64 = 1;
    let mut held: Vec<String> = Vec::new();
    let (mut seals, mut evicted, mut seal_checked) = (0u64, 0u64, 0u64);
    let mut tmp_swept = 0usize;
    let mut server = Server::start(Some(&cfg), &data, &[]);
    for round in 1..=rounds {
        let url = server.url("k?publish");
        let id0 = next_id;
        let pseed = rng.next();
        let publisher = std::thread::spawn(move || pipelined(&url, id0, pseed));
        // the moment of the kill (the publisher keeps going until the broker dies)
        std::thread::sleep(Duration::from_millis(rng.range(300, 1200)));
        let s = stats(&server, "k");
        seals += u(&s, &["tiers", "seals"]);
        evicted += u(&s, &["tiers", "evicted_segments"]);
        server.kill9();
        let (rows_acked, next, _end) = publisher.join().expect("publisher");
        next_id = next;
        for (o, id) in rows_acked {
            assert!(
                acked.insert(o, id).is_none(),
                "offset {o} acknowledged twice"
            );
        }
        // what the kill left mid-seal: removed by the restart's sweep, which logs each (a seal
        // the restarted broker begins at once may write a file of the same name, so the log
        // line, not the directory, is the proof here; the directory is checked after the
        // clean stop at the end)
        let left: Vec<String> = list_dir(&segs)
            .into_iter()
            .filter(|f| f.ends_with(".tmp"))
            .collect();
        server = Server::start(Some(&cfg), &data, &[]);
        let log = server.stderr();
        for f in &left {
            assert!(
                log.contains(&format!("removed segments/{f}")),
                "round {round}: {f} left by the kill was not swept: {log}"
            );
        }
        tmp_swept += left.len();
        let log = read_k(&server);
        assert!(
            log.len() >= held.len() && log[..held.len()] == held[..],
            "round {round}: rows that were held before changed or went"
        );
        let mut seen = std::collections::HashSet::new();
        for (i, row) in log.iter().enumerate() {
            let v: Value = sonic_rs::from_str(row).expect("row");
            let id = v
                .get("trade_id")
                .and_then(|x| x.as_i64())
                .expect("trade_id");
            assert!(
                id >= 1 && id < next_id,
                "round {round}: a row never sent: {row}"
            );
            assert_eq!(
                *row,
                trade(id, "K"),
                "round {round}: offset {} bytes",
                i + 1
            );
            assert!(seen.insert(id), "round {round}: trade_id {id} twice");
        }
        for (&o, &id) in &acked {
            let got = log.get(o as usize - 1);
            assert_eq!(
                got.map(String::as_str),
                Some(trade(id, "K").as_str()),
                "round {round}: acknowledged offset {o}"
            );
        }
        let s = stats(&server, "k");
        seal_checked = u(&s, &["tiers", "sealed", "rows"]);
        held = log;
        report(&format!(
            "tiers: kill -9 round {round}: {} rows held, {} acknowledged, {seal_checked} sealed when checked",
            held.len(),
            acked.len()
        ));
    }
    // a clean stop at the end, and nothing lost by it
    let addr = server.addr.to_string();
    assert_eq!(server.stop(), Some(0));
    let server = start_server_at(Some(&cfg), &data, &addr);
    assert_eq!(read_k(&server), held);
    assert_eq!(server.stop(), Some(0));
    let tmp: Vec<String> = list_dir(&segs)
        .into_iter()
        .filter(|f| f.ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "left after a clean stop: {tmp:?}");
    assert!(
        seals > 0 && evicted > 0,
        "seals {seals}, evictions {evicted}"
    );
    report(&format!(
        "tiers: kill -9: {rounds} rounds in {:.1} s: {} rows acknowledged, {} held, {seals} seals and {evicted} hot segments evicted before the kills, {seal_checked} rows sealed at the end, {tmp_swept} .parquet.tmp left by kills and swept",
        t0.elapsed().as_secs_f64(),
        acked.len(),
        held.len()
    ));
}

// ---------------------------------------------------------------------------------------------

/// A tmpfs mounted on a temporary directory; unmounted (lazily if need be) on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

const ENOSPC_CONFIG: &str = r#"
[[stream]]
name = "f"
schema = "@trade"
segment_bytes = 262144
seal_target_bytes = 65536
seal_every_s = 1
"#;

/// Fills the filesystem of `dir` with `dir/filler` until ENOSPC; returns the bytes written.
fn fill(dir: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let mut written = 0u64;
    for chunk in [1 << 20, 4096, 512] {
        let buf = vec![0xa5u8; chunk];
        loop {
            match f.write(&buf) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
    }
    let _ = f.sync_all();
    written
}

#[test]
fn a_full_disk_fails_seals_which_recover_when_space_returns() {
    let _serial = serial();
    let t0 = Instant::now();
    let setup = Setup::new();
    let mnt = setup.tmp.path().join("small");
    let fs = match Tmpfs::mount(&mnt, "8m") {
        Ok(fs) => fs,
        Err(e) if std::env::var_os("CI").is_none() => {
            report(&format!("skipped: tiers ENOSPC test: {e} (needs root)"));
            return;
        }
        Err(e) => panic!("{e} (CI is set: this test needs root to mount a tmpfs)"),
    };
    let cfg = setup.config(ENOSPC_CONFIG);
    let data = fs.dir.join("data");
    let log = setup.tmp.path().join("corecast.stderr.log");
    let server = Server::start_logged(Some(&cfg), &data, &log).expect("start");
    let first = trades(1, 300);
    let live = Live::open(&server, "f");
    publish_all(&server, "f", &first, 100, 1);
    // full before the first seal is due (its rows are 1 s old): the seal must fail, and the hot
    // log keeps its segment (once every row in it is sealed the newest segment is evicted too,
    // and the next commit would have to preallocate a new one on the full disk)
    let filled = fill(&fs.dir);
    let s = stats(&server, "f");
    assert_eq!(
        u(&s, &["tiers", "sealed", "rows"]),
        0,
        "a seal came before the disk was full (more than 1 s after the publish?)"
    );
    // rows still commit into the hot log's preallocated segment
    let mut ws = ws_connect(&server.url("f?publish"));
    let _greeting = recv_text(&mut ws);
    let mut committed = first.len() as u64;
    let mut failed_commits = Vec::new();
    for b in 0..4 {
        let rows = trades(1000 + b * 10, 10);
        ws.send(Message::text(format!("[{}]", rows.join(","))))
            .expect("send");
        let reply = recv_text(&mut ws);
        if reply.contains("\"ok\"") {
            committed += rows.len() as u64;
        } else {
            failed_commits.push(reply);
        }
    }
    let _ = ws.close(None);
    let s = wait_for(
        "a seal failure naming the full disk",
        Duration::from_secs(30),
        || {
            let s = stats(&server, "f");
            let t = at(&s, &["tiers"]);
            let err = at(t, &["last_error"])
                .as_str()
                .unwrap_or_default()
                .to_string();
            if u(t, &["seal_failures"]) > 0 && err.to_lowercase().contains("space") {
                Ok(s)
            } else {
                Err(sonic_rs::to_string(t).unwrap())
            }
        },
    );
    assert!(
        u(&s, &["tiers", "seal_lag", "rows"]) > 0,
        "rows wait in the hot log"
    );
    report(&format!(
        "tiers: ENOSPC: filled {filled} bytes; {} seal failures, last_error {}; {} commits failed{}",
        u(&s, &["tiers", "seal_failures"]),
        sonic_rs::to_string(at(&s, &["tiers", "last_error"])).unwrap(),
        failed_commits.len(),
        failed_commits.first().map(|r| format!(" (first: {r})")).unwrap_or_default()
    ));
    for r in &failed_commits {
        assert!(
            r.contains("commit_failed"),
            "a commit refused otherwise: {r}"
        );
    }
    std::fs::remove_file(fs.dir.join("filler")).expect("remove filler");
    let recovered = Instant::now();
    wait_for(
        "every row sealed once space returned",
        Duration::from_secs(45),
        || {
            let s = stats(&server, "f");
            let t = at(&s, &["tiers"]);
            let ok = u(t, &["sealed", "rows"]) == committed
                && u(t, &["seal_lag", "rows"]) == 0
                && at(t, &["last_error"]).is_null();
            ok.then_some(()).ok_or(sonic_rs::to_string(t).unwrap())
        },
    );
    let recovery_s = recovered.elapsed().as_secs_f64();
    // the live subscriber saw every committed row; all of them replay identically from 1
    let live = live.finish(committed as usize);
    let got = ws_replay(&server, "f?offset=1", live.len());
    assert_eq!(got, live, "replay after the full disk");
    let pulled = pull_all(&server, "f", 1, committed + 1, "", &live);
    assert_eq!(pulled.len() as u64, committed);
    assert_eq!(server.stop(), Some(0));
    drop(fs);
    report(&format!(
        "tiers: ENOSPC: {committed} rows, sealed {recovery_s:.1} s after space returned; {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
}
