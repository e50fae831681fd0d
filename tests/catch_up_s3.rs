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

/// The whole scenario must finish within this (the blocking client has no read timeout: a lost
/// row would otherwise hang the test rather than fail it).
const DEADLINE: Duration = Duration::from_secs(300);

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
    let began = Instant::now();
    let (pid_tx, pid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scenario(&moto, &bucket, pid_tx)
            }));
            let _ = done_tx.send(());
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        });
        if done_rx.recv_timeout(DEADLINE).is_err() {
            // the worker is stuck in a read: kill the broker (its socket closes, the read ends)
            if let Ok(pid) = pid_rx.try_recv() {
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
