//! The main job on real input: three real market-data files published with `corecast pub`, read
//! back from the earliest row with `corecast sub` and compared row by row with the canonical
//! encoding of the input; then `kill -9`, a restart on the same data directory, and a
//! cursor-resumed `corecast sub` that continues with no gap and no duplicate.
mod support;

use std::path::PathBuf;
use std::time::Duration;

use corecast_storage::schema::{RowCodec, Schema};
use sonic_rs::JsonValueMutTrait;
use support::{corecast_run, shared_dir, split_frame, Server, Setup};

const STREAMS: [&str; 3] = ["es-mbo", "es-mbp1", "btcusdt-trades"];
const LONG: Duration = Duration::from_secs(300);

struct Input {
    name: &'static str,
    file: PathBuf,
    /// The canonical row text of every non-blank input line, in order.
    canonical: Vec<String>,
    /// The input lines as given.
    raw: Vec<String>,
}

fn load(name: &'static str) -> Input {
    let data = shared_dir().join("data");
    let file = data.join(format!("{name}.jsonl"));
    let schema = std::fs::read_to_string(data.join(format!("{name}.schema.json"))).expect("schema");
    let codec = RowCodec::Schema(Schema::compile(&schema).expect("schema compiles"));
    let text = std::fs::read_to_string(&file).expect("input");
    let raw: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let canonical = raw
        .iter()
        .map(|l| {
            let v = corecast_storage::json::parse(l.as_bytes()).expect("input line parses");
            let mut out = Vec::new();
            codec.encode_row(&v, &mut out).expect("input line is valid");
            String::from_utf8(out).expect("utf8")
        })
        .collect();
    Input {
        name,
        file,
        canonical,
        raw,
    }
}

fn config(setup: &Setup) -> PathBuf {
    let mut body = String::new();
    for name in STREAMS.iter().chain(&["es-mbp1-nulls"]) {
        let schema = name.trim_end_matches("-nulls");
        body.push_str(&format!(
            "[[stream]]\nname = \"{name}\"\nschema = \"@data/{schema}.schema.json\"\nmax_replay = \"unlimited\"\n\n"
        ));
    }
    setup.config(&body)
}

/// Checks `lines` are frames at offsets `first..` whose rows equal `expect`.
fn check_frames(name: &str, lines: &[&str], first: u64, expect: &[String]) {
    assert_eq!(lines.len(), expect.len(), "{name}: row count");
    let mut last_ts = None;
    for (i, (line, want)) in lines.iter().zip(expect).enumerate() {
        let (offset, ts, row) = split_frame(line);
        assert_eq!(offset, Some(first + i as u64), "{name}: offset of row {i}");
        assert!(ts.is_some(), "{name}: ts of row {i}");
        if let (Some(a), Some(b)) = (last_ts, ts) {
            assert!(b >= a, "{name}: ts went backwards at row {i}");
        }
        last_ts = ts;
        assert_eq!(row, want, "{name}: row at offset {}", first + i as u64);
    }
}

#[test]
fn real_data_round_trip_then_kill9_and_cursor_resume() {
    let inputs: Vec<Input> = STREAMS.iter().map(|n| load(n)).collect();
    // the data really has what the issue cares about
    let mbo = &inputs[0];
    assert!(
        mbo.canonical.iter().any(|r| r.contains("\"ts_event\":17")),
        "ns timestamps"
    );
    let mbp1 = &inputs[1];

    let setup = Setup::new();
    let cfg = config(&setup);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);

    // publish the three files
    for input in &inputs {
        let url = server.url(input.name);
        let file = input.file.display().to_string();
        let out = corecast_run(&["pub", &url, "--file", &file], None, LONG);
        assert_eq!(out.code, Some(0), "pub {}: {}", input.name, out.stderr);
        assert!(
            out.stderr
                .contains(&format!("published {} rows", input.raw.len())),
            "pub {}: {}",
            input.name,
            out.stderr
        );
    }

    // read everything back from the earliest row and compare with the canonical encoding
    for input in &inputs {
        let url = server.url(input.name);
        let n = input.raw.len().to_string();
        let out = corecast_run(
            &["sub", &url, "--offset", "earliest", "--count", &n],
            None,
            LONG,
        );
        assert_eq!(out.code, Some(0), "sub {}: {}", input.name, out.stderr);
        check_frames(input.name, &out.lines(), 1, &input.canonical);
    }

    // int64 nanoseconds beyond 2^53 come back exactly as they went in
    let out = corecast_run(
        &[
            "sub",
            &server.url("es-mbo"),
            "--offset",
            "earliest",
            "--count",
            "50",
            "--rows-only",
        ],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for (line, input) in out.lines().iter().zip(&mbo.raw) {
        let ts_in = input
            .split("\"ts_event\":")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(ts_in.parse::<i64>().unwrap() > (1i64 << 53));
        assert!(
            line.contains(&format!("\"ts_event\":{ts_in},")),
            "{line} vs {input}"
        );
    }

    // es-mbp1's price, bid_px and ask_px are nullable, but the sample holds no null: publish
    // real rows with those columns set to null or left out, and check they come back as null
    let nulls_file = setup.tmp.path().join("es-mbp1-nulls.jsonl");
    let schema = std::fs::read_to_string(shared_dir().join("data/es-mbp1.schema.json")).unwrap();
    let codec = RowCodec::Schema(Schema::compile(&schema).unwrap());
    let mut lines = Vec::new();
    let mut expect = Vec::new();
    for (i, line) in mbp1.raw.iter().take(60).enumerate() {
        let mut v: sonic_rs::Value = sonic_rs::from_str(line).unwrap();
        let obj = v.as_object_mut().unwrap();
        match i % 3 {
            0 => {
                obj.insert("price", sonic_rs::Value::new_null());
            }
            1 => {
                obj.remove(&"bid_px");
            }
            _ => {
                obj.insert("ask_px", sonic_rs::Value::new_null());
                obj.remove(&"price");
            }
        }
        let text = sonic_rs::to_string(&v).unwrap();
        let mut out = Vec::new();
        codec
            .encode_row(
                &corecast_storage::json::parse(text.as_bytes()).unwrap(),
                &mut out,
            )
            .unwrap();
        let canonical = String::from_utf8(out).unwrap();
        assert!(canonical.contains(":null"), "{canonical}");
        lines.push(text);
        expect.push(canonical);
    }
    std::fs::write(&nulls_file, lines.join("\n") + "\n").unwrap();
    let url = server.url("es-mbp1-nulls");
    let out = corecast_run(
        &[
            "pub",
            &url,
            "--file",
            &nulls_file.display().to_string(),
            "--batch",
            "7",
        ],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = corecast_run(
        &["sub", &url, "--offset", "earliest", "--count", "60"],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    check_frames("es-mbp1-nulls", &out.lines(), 1, &expect);

    // consume part of es-mbp1 with a cursor
    let cursor = setup.tmp.path().join("mbp1.cursor");
    let cursor_arg = cursor.display().to_string();
    let url = server.url("es-mbp1");
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--offset",
            "earliest",
            "--cursor",
            &cursor_arg,
            "--count",
            "1000",
        ],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    check_frames(
        "es-mbp1 first part",
        &out.lines(),
        1,
        &mbp1.canonical[..1000],
    );
    assert_eq!(std::fs::read_to_string(&cursor).unwrap().trim(), "1000");

    // kill -9 and restart on the same data directory
    server.kill9();
    let server = Server::start(Some(&cfg), &setup.data(), &[]);

    // every acknowledged row survived: the last row of each stream is where it was
    for input in &inputs {
        let out = corecast_run(
            &["tail", &server.url(input.name), "-n", "1", "--count", "1"],
            None,
            LONG,
        );
        assert_eq!(out.code, Some(0), "tail {}: {}", input.name, out.stderr);
        check_frames(
            input.name,
            &out.lines(),
            input.raw.len() as u64,
            &input.canonical[input.raw.len() - 1..],
        );
    }

    // resume with the same cursor: the next offset is exactly the one after the last consumed
    let url = server.url("es-mbp1");
    let out = corecast_run(
        &["sub", &url, "--cursor", &cursor_arg, "--count", "500"],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    check_frames(
        "es-mbp1 resumed",
        &out.lines(),
        1001,
        &mbp1.canonical[1000..1500],
    );
    assert_eq!(std::fs::read_to_string(&cursor).unwrap().trim(), "1500");

    // and once more to the end of the stream
    let rest = (mbp1.raw.len() - 1500).to_string();
    let out = corecast_run(
        &["sub", &url, "--cursor", &cursor_arg, "--count", &rest],
        None,
        LONG,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    check_frames("es-mbp1 rest", &out.lines(), 1501, &mbp1.canonical[1500..]);
    assert_eq!(
        std::fs::read_to_string(&cursor).unwrap().trim(),
        mbp1.raw.len().to_string()
    );
    server.stop();
}
