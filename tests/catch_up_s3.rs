//! Our own client's catch-up from a table on S3, end to end: the real binary built with
//! `--features s3` publishes a stream to `s3://BUCKET/prod` on a local S3 server (moto, see
//! `tests/published_s3/moto.rs`), and our Rust client (`corecast_net::client`,
//! `SubscribeOptions::catch_up`) and `corecast sub --catch-up` read what the socket no longer
//! replays (further back than `max_replay`) from that table, then splice onto the socket.
//!
//! The client is configured only as a user would configure it: the standard `AWS_*` environment
//! (`AWS_ENDPOINT_URL` an `http://` endpoint, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`), set in this process (so in the library's, and inherited by `corecast sub`);
//! the broker reaches the store through its `[s3]` config keys, as in `tests/published_s3.rs`.
//!
//! What it checks, from offset 1, from a middle offset and from EARLIEST: every offset once,
//! contiguous and in order, through the splice and on into live rows; each frame byte for byte
//! (offset, `ts` and row) the frame a plain live subscriber got when the row was committed; the
//! rows before the splice came from the table, and the socket resumed exactly where they ended.
//! `corecast sub --catch-up` prints the same frames.
//!
//! Then across a migration's seam on S3 (`seam_scenario`): a stream created and migrated over the
//! control plane (a column added), its old log's table and its new log's both under
//! `s3://BUCKET/prod/seam/`; our client from 1 and from EARLIEST reads both tables, oldest first,
//! then the socket, every frame the live subscriber's (the old log's rows without the new
//! column), and `corecast sub --catch-up` prints them. A second migrated stream, with a
//! retention of 2 s: once retention is past its seam, its old log's table is deleted from the
//! bucket and the new log's stays.
//!
//! One test, so that the `AWS_*` environment is set once, before any other thread runs. Without
//! an S3 server (`$CORECAST_MOTO_VENV` or `$AWS_ENDPOINT_URL`) it says so and passes, unless
//! `CORECAST_REQUIRE_S3` is set.
mod support;

#[path = "published_s3/moto.rs"]
mod moto;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use corecast_net::client::{blocking, ClientError, Offset, PublishOptions, SubscribeOptions};
use corecast_storage::json;
use corecast_storage::published::{PublishedTable, S3Options};
use corecast_storage::schema::{RowCodec, Schema};
use moto::{Moto, ACCESS_KEY, REGION, SECRET_KEY};
use support::{corecast_run, Server, Setup};

/// Both scenarios must finish within this (the blocking client has no read timeout: a lost
/// row would otherwise hang the test rather than fail it).
const DEADLINE: Duration = Duration::from_secs(420);

/// A middle offset: in the table, far further back than `max_replay`.
const MIDDLE: u64 = 1234;

/// The stream of tests/catch_up.rs's end-to-end test (seals by size, so a tail stays unsealed
/// and unpublished; offset 1 is soon too old for the socket), published to `s3://BUCKET/prod`.
fn config(endpoint: &str, bucket: &str) -> String {
    format!(
        r#"
[s3]
endpoint = "{endpoint}"
region = "{REGION}"
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[[stream]]
name = "trades"
schema = "@trade"
max_replay = 100
seal_every_s = 3600
seal_target_bytes = 65536
segment_bytes = 16384
published = "s3://{bucket}/prod"
"#
    )
}

fn row(i: u64) -> String {
    support::trade(i as i64, ["BTCUSD", "ETHUSD"][(i % 2) as usize])
}

fn codec() -> RowCodec {
    let path = support::shared_dir().join("tools/anchor/trade.schema.json");
    let schema = std::fs::read_to_string(path).expect("schema");
    RowCodec::Schema(Schema::compile(&schema).expect("trade schema"))
}

/// Publishes rows and records, for every offset, the frame a plain live subscriber got.
struct Feed {
    publisher: blocking::Publisher,
    /// Subscribed live before the first row: sees every row as it is committed.
    live: blocking::Subscription,
    /// `frames[o - 1]`: the live subscriber's frame for offset `o`.
    frames: Vec<String>,
    codec: RowCodec,
}

impl Feed {
    /// The next offset to be assigned.
    fn end(&self) -> u64 {
        self.frames.len() as u64 + 1
    }

    fn frame(&self, offset: u64) -> &str {
        &self.frames[(offset - 1) as usize]
    }

    /// Publishes the next `n` rows (acknowledged), then takes their frames from the live
    /// subscriber: contiguous offsets, and the row bytes the canonical encoding of what was
    /// published.
    fn publish(&mut self, n: u64) {
        let first = self.end();
        let rows: Vec<String> = (first..first + n).map(row).collect();
        for chunk in rows.chunks(100) {
            self.publisher.submit_batch(chunk).expect("submit");
        }
        self.publisher.flush().expect("acks");
        for want in first..first + n {
            let got = self.live.next().expect("live row").expect("a live row");
            assert_eq!(got.offset, Some(want), "the live subscriber's offsets");
            let mut canonical = Vec::new();
            self.codec
                .encode_row(
                    &json::parse(row(want).as_bytes()).expect("json"),
                    &mut canonical,
                )
                .expect("valid");
            assert_eq!(got.row().as_bytes(), canonical.as_slice(), "offset {want}");
            self.frames.push(got.frame().to_string());
        }
    }
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

/// One catch-up from `offset` (`first` the offset it must start at): every offset from `first`
/// to the stream's end once, in order, each frame the live subscriber's; a prefix from the table
/// and the socket resumed exactly after it; then 5 rows published after the catch-up read
/// the table arrive on the same subscription. `table_end` is where the table ended before.
fn check_catch_up(
    feed: &mut Feed,
    url: &str,
    hint: &str,
    offset: Offset,
    first: u64,
    table_end: u64,
) {
    let began = Instant::now();
    let mut s = catch_up_from(url, offset).expect("catch-up connect");
    // the probe's greeting: the table is named on S3, and that is where the rows come from
    assert!(s.greeting().replay.is_none(), "the probe's greeting first");
    assert_eq!(s.greeting().metadata_hint.as_deref(), Some(hint));
    assert!(s.is_catching_up(), "refused at {offset:?}: catching up");
    let end = feed.end();
    // the first offset the socket delivered (the table delivered everything below it)
    let mut spliced_at = None;
    for want in first..end {
        check_row(feed, &mut s, first, want, &mut spliced_at);
    }
    // rows published after the table was read come on the same subscription
    feed.publish(5);
    for want in end..feed.end() {
        check_row(feed, &mut s, first, want, &mut spliced_at);
    }
    assert!(!s.is_catching_up(), "from {first}: spliced");
    let spliced_at = spliced_at.expect("spliced");
    let replay = s
        .greeting()
        .replay
        .expect("the resumed subscription's replay");
    assert_eq!(
        replay.0, spliced_at,
        "from {first}: the socket resumed where the table's rows ended"
    );
    assert!(
        spliced_at > first && (table_end..=end).contains(&spliced_at),
        "from {first}: spliced at {spliced_at}; the table ended at {table_end} before, the stream at {end}"
    );
    eprintln!(
        "from {offset:?}: {} rows from the table, {} from the socket, in {:?}",
        spliced_at - first,
        feed.end() - spliced_at,
        began.elapsed()
    );
    s.close().expect("close");
}

/// The next row of `s` is offset `want`, byte for byte the live subscriber's frame; records
/// in `spliced_at` the first offset the socket (not the table) delivered.
fn check_row(
    feed: &Feed,
    s: &mut blocking::Subscription,
    first: u64,
    want: u64,
    spliced_at: &mut Option<u64>,
) {
    let got = s.next().expect("row").expect("a row");
    assert_eq!(
        got.offset,
        Some(want),
        "from {first}: offsets once, in order"
    );
    assert_eq!(got.frame(), feed.frame(want), "from {first}: offset {want}");
    match (s.is_catching_up(), *spliced_at) {
        (false, None) => *spliced_at = Some(want),
        (true, Some(at)) => panic!("from {first}: a table row {want} after the splice at {at}"),
        _ => {}
    }
}

/// `corecast sub URL --offset FROM --catch-up --count N` prints exactly the live subscriber's
/// frames for `first..first + N`.
fn check_cli(feed: &Feed, url: &str, from: &str, first: u64) {
    let began = Instant::now();
    let count = feed.end() - first;
    let out = corecast_run(
        &[
            "sub",
            url,
            "--offset",
            from,
            "--catch-up",
            "--count",
            &count.to_string(),
        ],
        None,
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "corecast sub --offset {from}: {out:?}");
    let lines = out.lines();
    assert_eq!(lines.len() as u64, count, "--offset {from}: {}", out.stderr);
    for (line, o) in lines.iter().zip(first..) {
        assert_eq!(*line, feed.frame(o), "--offset {from}: offset {o}");
    }
    eprintln!(
        "corecast sub --offset {from} --catch-up: {count} rows in {:?}",
        began.elapsed()
    );
}

/// The scenario, on a thread of its own (see [`DEADLINE`]); sends the server's pid first.
fn scenario(moto: &Moto, bucket: &str, pid: mpsc::Sender<u32>) {
    let setup = Setup::new();
    let cfg = setup.config(&config(&moto.endpoint, bucket));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let _ = pid.send(server.child.id());
    let url = server.url("trades");
    let home = format!("s3://{bucket}/prod/trades");
    let hint = format!("{home}/trades.metadata/version-hint.text");

    let live = blocking::connect(&url, SubscribeOptions::default()).expect("live subscriber");
    assert_eq!(
        live.greeting().metadata_hint.as_deref(),
        Some(hint.as_str())
    );
    assert_eq!(
        live.greeting().metadata.as_deref(),
        Some(format!("{home}/trades.metadata.json").as_str())
    );
    let sid = live.greeting().stream_id.clone().expect("stream_id");
    let mut feed = Feed {
        publisher: blocking::publish(&url, PublishOptions::default()).expect("publisher"),
        live,
        frames: Vec::new(),
        codec: codec(),
    };
    let began = Instant::now();
    feed.publish(3050);

    // wait for the table on S3 to hold most rows, with a tail left for the socket to replay
    let store = S3Options {
        endpoint: Some(moto.endpoint.clone()),
        region: Some(REGION.to_string()),
        access_key: Some(ACCESS_KEY.to_string()),
        secret_key: Some(SECRET_KEY.to_string()),
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let table_end = loop {
        let table = PublishedTable::open(&hint, Some(&sid), &store);
        if let Ok(t) = &table {
            if t.end() > 1 {
                assert_eq!(t.floor(), Some(1), "nothing dropped from the table");
            }
            if t.end() > MIDDLE + 100 && t.end() < feed.end() {
                break t.end();
            }
            if t.end() == feed.end() {
                feed.publish(7);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no table with a tail on S3 in 90 s: {:?}",
            table.map(|t| t.extent())
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "published {} rows, the table on S3 ends at {table_end}, after {:?}",
        feed.end() - 1,
        began.elapsed()
    );
    assert!(
        moto.keys(bucket, "prod/trades/trades/data/")
            .iter()
            .any(|k| k.ends_with(".parquet")),
        "data files on S3"
    );
    assert!(
        !setup.data().join("trades/published").exists(),
        "a table was written locally too"
    );

    // without catch-up both starts are refused: those rows are only in the table now
    for at in [1, MIDDLE] {
        let e = blocking::connect(
            &url,
            SubscribeOptions {
                offset: Some(Offset::At(at)),
                ..SubscribeOptions::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("offset {at} was served without catch-up"));
        assert!(e.is_catch_up_recoverable(), "offset {at}: {e}");
    }

    // the library
    for (offset, first) in [
        (Offset::At(1), 1),
        (Offset::At(MIDDLE), MIDDLE),
        (Offset::Earliest, 1),
    ] {
        check_catch_up(&mut feed, &url, &hint, offset, first, table_end);
    }

    // the CLI
    check_cli(&feed, &url, "1", 1);
    check_cli(&feed, &url, &MIDDLE.to_string(), MIDDLE);
    check_cli(&feed, &url, "earliest", 1);

    // the endpoint really comes from AWS_ENDPOINT_URL: pointed at a port nothing answers, the
    // catch-up fails (within the store's retry bound), prints no row, names the table's URI
    // and shows no key
    let began = Instant::now();
    let dead = format!("http://127.0.0.1:{}", moto::free_port());
    let out = Command::new(support::corecast_bin())
        .args(["sub", &url, "--offset", "1", "--catch-up", "--count", "1"])
        .env("AWS_ENDPOINT_URL", &dead)
        .env("CORECAST_LOG", "warn")
        .output()
        .expect("corecast sub");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "with AWS_ENDPOINT_URL={dead}: {:?} in {:?}: {}",
        out.status.code(),
        began.elapsed(),
        stderr.trim()
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "rows printed: {:?}", out.stdout);
    assert!(stderr.contains(&home), "the error names {home}: {stderr}");
    for key in [ACCESS_KEY, SECRET_KEY] {
        assert!(!stderr.contains(key), "the error shows a key: {stderr}");
    }

    feed.live.close().expect("live close");
    feed.publisher.close().expect("publisher close");
    assert_eq!(server.stop(), Some(0));
}

/// A managed stream published to `s3://BUCKET/prod`, created and migrated over the control
/// plane (`corecast ctl`): small seals, a replay window of 20 rows.
fn seam_config(endpoint: &str) -> String {
    format!(
        r#"
[s3]
endpoint = "{endpoint}"
region = "{REGION}"
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[control]
enabled = true
"#
    )
}

/// Our client across a migration's seam on S3: the old log's table and the new log's, both
/// under `s3://BUCKET/prod/seam/`, read from 1 and from the earliest, every row once, each frame
/// its live subscriber's (the old log's rows without the column the migration added), then the
/// socket; `corecast sub --catch-up` the same.
fn seam_scenario(moto: &Moto, bucket: &str, pid: mpsc::Sender<u32>) {
    let setup = Setup::new();
    let cfg = setup.config(&seam_config(&moto.endpoint));
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let _ = pid.send(server.child.id());
    let control = format!("http://{}", server.addr);
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", "--server", control.as_str()];
        all.extend_from_slice(args);
        let out = corecast_run(&all, None, Duration::from_secs(60));
        assert_eq!(
            out.code,
            Some(0),
            "ctl {args:?}: {} {}",
            out.stdout,
            out.stderr
        );
    };
    let v1 = r#"{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}"#;
    let v2 = r#"{"type":"object","properties":{"i":{"type":"integer"},"note":{"type":["string","null"]}},"required":["i"]}"#;
    let decl = setup.tmp.path().join("seam.json");
    std::fs::write(
        &decl,
        format!(
            r#"{{"schema":{v1},"seal_target_bytes":4096,"max_replay":20,"published":"s3://{bucket}/prod"}}"#
        ),
    )
    .unwrap();
    let v2_file = setup.tmp.path().join("v2.schema.json");
    std::fs::write(&v2_file, v2).unwrap();
    ctl(&["create", "seam", decl.to_str().unwrap()]);
    let url = server.url("seam");
    let mut frames = support::live_frames(
        &url,
        &(1..301)
            .map(|i| format!(r#"{{"i":{i}}}"#))
            .collect::<Vec<_>>(),
        1,
    );
    ctl(&["migrate", "seam", "--schema", v2_file.to_str().unwrap()]);
    let seam = 301;
    frames.extend(support::live_frames(
        &url,
        &(301..701)
            .map(|i| format!(r#"{{"i":{i},"note":"n{i}"}}"#))
            .collect::<Vec<_>>(),
        seam,
    ));
    assert!(frames[0].ends_with(r#",{"i":1}]"#), "{}", frames[0]);
    // the new log publishes part of itself past the seam, on S3 beside the old log's table
    let hint = format!("s3://{bucket}/prod/seam/seam.metadata/version-hint.text");
    let store = S3Options {
        endpoint: Some(moto.endpoint.clone()),
        region: Some(REGION.to_string()),
        access_key: Some(ACCESS_KEY.to_string()),
        secret_key: Some(SECRET_KEY.to_string()),
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let table_end = loop {
        let t = PublishedTable::open(&hint, None, &store);
        if let Ok(t) = &t {
            if t.end() > seam + 100 {
                let tables: Vec<&str> = t.logs().iter().map(|l| l.table_uri()).collect();
                assert_eq!(
                    tables,
                    [
                        format!("s3://{bucket}/prod/seam/seam"),
                        format!("s3://{bucket}/prod/seam/seam-v2")
                    ]
                );
                assert!(t.seam_defects().is_empty(), "{:?}", t.seam_defects());
                break t.end();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the new log published nothing past the seam on S3 in 90 s: {:?}",
            t.map(|t| t.extent())
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        !setup.data().join("seam/published").exists(),
        "the old log's table was written locally"
    );
    // rows the tables do not hold yet (unless published at once), for the socket's share
    let next = frames.len() as u64 + 1;
    frames.extend(support::live_frames(
        &url,
        &(next..next + 20)
            .map(|i| format!(r#"{{"i":{i}}}"#))
            .collect::<Vec<_>>(),
        next,
    ));
    // the earliest (the seam) is too old for the socket once the broker has seen its new table
    // hold rows past it
    loop {
        match blocking::connect(
            &url,
            SubscribeOptions {
                offset: Some(Offset::Earliest),
                ..SubscribeOptions::default()
            },
        ) {
            Err(e) => {
                assert!(e.is_catch_up_recoverable(), "{e}");
                break;
            }
            Ok(s) => {
                s.close().expect("close");
                assert!(Instant::now() < deadline, "the earliest is still served");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    for offset in [Offset::At(1), Offset::Earliest] {
        let began = Instant::now();
        let mut s = catch_up_from(&url, offset).expect("catch-up connect");
        assert!(s.is_catching_up(), "{offset:?}: refused, so catching up");
        let mut from_tables = 0u64;
        for (k, frame) in frames.iter().enumerate() {
            let row = s.next().expect("row").expect("a row");
            assert_eq!(row.offset, Some(k as u64 + 1), "{offset:?}");
            assert_eq!(row.frame(), frame, "{offset:?}: offset {}", k + 1);
            from_tables += u64::from(s.is_catching_up());
        }
        assert!(from_tables >= table_end - 1, "{offset:?}: {from_tables}");
        eprintln!(
            "across the seam on S3 from {offset:?}: {} rows once each, {from_tables} from the two tables (the old log's 300, the new log's {}), {} from the socket, in {:?}",
            frames.len(),
            from_tables - 300,
            frames.len() as u64 - from_tables,
            began.elapsed()
        );
        s.close().expect("close");
    }
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--offset",
            "1",
            "--catch-up",
            "--count",
            &frames.len().to_string(),
        ],
        None,
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "corecast sub across the seam: {out:?}");
    assert_eq!(
        out.lines(),
        frames.iter().map(String::as_str).collect::<Vec<_>>()
    );
    sealed_log_past_retention_on_s3(&setup, &server, &store, bucket, &ctl, &v2_file);
    assert_eq!(server.stop(), Some(0));
}

/// A second migrated stream on S3 with a retention of 2 s and a grace period of 1 s: once
/// retention is past the seam the stream metadata lists no sealed log, and a second later the
/// old log's table is gone from the bucket (every object under `prod/gone/gone/`) while the
/// new log's (`prod/gone/gone-v2/`, a sibling whose name starts the same) stays.
fn sealed_log_past_retention_on_s3(
    setup: &Setup,
    server: &Server,
    store: &S3Options,
    bucket: &str,
    ctl: &dyn Fn(&[&str]),
    v2_file: &std::path::Path,
) {
    let v1 = r#"{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}"#;
    let decl = setup.tmp.path().join("gone.json");
    std::fs::write(
        &decl,
        format!(
            r#"{{"schema":{v1},"seal_target_bytes":4096,"max_replay":20,"retention":"2s","published_grace_s":1,"published":"s3://{bucket}/prod"}}"#
        ),
    )
    .unwrap();
    ctl(&["create", "gone", decl.to_str().unwrap()]);
    let url = server.url("gone");
    let rows = |from: u64, to: u64, note: bool| {
        (from..to)
            .map(|i| {
                if note {
                    format!(r#"{{"i":{i},"note":null}}"#)
                } else {
                    format!(r#"{{"i":{i}}}"#)
                }
            })
            .collect::<Vec<_>>()
    };
    support::live_frames(&url, &rows(1, 301, false), 1);
    ctl(&["migrate", "gone", "--schema", v2_file.to_str().unwrap()]);
    let old =
        corecast_storage::published::Store::open(&format!("s3://{bucket}/prod/gone/gone"), store)
            .expect("open");
    let new = corecast_storage::published::Store::open(
        &format!("s3://{bucket}/prod/gone/gone-v2"),
        store,
    )
    .expect("open");
    assert!(
        !old.list("data").expect("list").is_empty(),
        "the old log's table"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let hint = format!("s3://{bucket}/prod/gone/gone.metadata/version-hint.text");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut next = 301;
    loop {
        support::live_frames(&url, &rows(next, next + 50, true), next);
        next += 50;
        let gone = old.list("").expect("list");
        if gone.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old log's table is still on S3: {} objects, {:?}",
            gone.len(),
            PublishedTable::open(&hint, None, store).map(|t| t.logs().len())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = PublishedTable::open(&hint, None, store).expect("the stream's table");
    assert_eq!(t.logs().len(), 1, "only the live log is listed");
    assert_eq!(
        t.logs()[0].table_uri(),
        format!("s3://{bucket}/prod/gone/gone-v2")
    );
    assert!(
        !new.list("data").expect("list").is_empty(),
        "the new log's table"
    );
    let logs: serde_json::Value = serde_json::from_slice(
        &std::fs::read(setup.data().join("gone/logs.json")).expect("logs.json"),
    )
    .expect("JSON");
    assert_eq!(logs["sealed"], serde_json::json!([]), "{logs}");
    assert!(!setup.data().join("gone/segments").exists());
}

#[test]
fn our_client_and_corecast_sub_catch_up_from_a_table_on_s3() {
    let Some(moto) = Moto::start() else { return };
    // what a user of the client sets: the standard AWS_* environment, nothing in code
    for (k, v) in moto.env() {
        std::env::set_var(k, v);
    }
    // an http:// AWS_ENDPOINT_URL is enough: no AWS_ALLOW_HTTP needed
    std::env::remove_var("AWS_ALLOW_HTTP");
    let bucket = moto::bucket("catchup");
    moto.create_bucket(&bucket);
    let seam_bucket = moto::bucket("catchupseam");
    moto.create_bucket(&seam_bucket);
    let began = Instant::now();
    let (pid_tx, pid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scenario(&moto, &bucket, pid_tx.clone());
                seam_scenario(&moto, &seam_bucket, pid_tx);
            }));
            let _ = done_tx.send(());
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        });
        if done_rx.recv_timeout(DEADLINE).is_err() {
            // the worker is stuck in a read: kill the brokers (a socket closes, the read ends)
            while let Ok(pid) = pid_rx.try_recv() {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            panic!("the scenario did not finish in {DEADLINE:?}");
        }
        if let Err(panic) = worker.join() {
            std::panic::resume_unwind(panic);
        }
    });
    eprintln!("the whole scenario: {:?}", began.elapsed());
}
