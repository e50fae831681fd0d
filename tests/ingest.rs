//! Bulk ingest against the real binary on loopback: `POST /v1/streams/NAME/ingest` and
//! `corecast ingest`, with the market-data samples of `../shared/data/`.
//!
//! - Parquet, Arrow IPC (file and stream format) and JSON lines files of real trades and
//!   top-of-book updates (nullable columns) give subscribers exactly the bytes, at exactly the
//!   offsets, that publishing the same rows as JSON gives;
//! - every refusal names what was wrong, is the JSON publish path's own message where a row is
//!   at fault (checked against a WebSocket publish of the same row), and commits nothing;
//! - a batch sent again under the same ingest id and seq is answered with its original offsets
//!   and not committed twice;
//! - `kill -9` of the server during a long ingest, then the same command again: every row
//!   exactly once, in file order.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use corecast_storage::schema::{RowCodec, Schema};
use sonic_rs::{JsonValueMutTrait, JsonValueTrait};
use support::*;

const ARROW: &str = "application/vnd.apache.arrow.stream";

fn data_file(name: &str) -> PathBuf {
    shared_dir().join("data").join(name)
}

fn read_lines(name: &str) -> Vec<String> {
    std::fs::read_to_string(data_file(name))
        .expect("sample data")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The rows of a JSON lines sample as one Arrow batch typed by the stream's schema (flat
/// schemas of booleans, integers, numbers and strings, nullable or not), built value by value
/// from the parsed JSON.
fn batch_of(schema_file: &str, lines: &[String]) -> RecordBatch {
    let text = std::fs::read_to_string(data_file(schema_file)).expect("schema");
    let schema = Schema::compile(&text).expect("schema compiles");
    let arrow = schema.to_arrow();
    let rows: Vec<sonic_rs::Value> = lines
        .iter()
        .map(|l| sonic_rs::from_str(l).expect("row JSON"))
        .collect();
    let columns: Vec<ArrayRef> = arrow
        .fields()
        .iter()
        .map(|f| {
            let values = rows
                .iter()
                .map(|r| r.get(f.name()).filter(|v| !v.is_null()));
            match f.data_type() {
                DataType::Boolean => {
                    let mut b = BooleanBuilder::new();
                    values.for_each(|v| b.append_option(v.and_then(|v| v.as_bool())));
                    Arc::new(b.finish()) as ArrayRef
                }
                DataType::Int32 => {
                    let mut b = Int32Builder::new();
                    values.for_each(|v| {
                        b.append_option(v.and_then(|v| v.as_i64()).map(|x| x as i32))
                    });
                    Arc::new(b.finish())
                }
                DataType::Int64 => {
                    let mut b = Int64Builder::new();
                    values.for_each(|v| b.append_option(v.and_then(|v| v.as_i64())));
                    Arc::new(b.finish())
                }
                DataType::Float64 => {
                    let mut b = Float64Builder::new();
                    values.for_each(|v| b.append_option(v.and_then(|v| v.as_f64())));
                    Arc::new(b.finish())
                }
                DataType::Utf8 => {
                    let mut b = StringBuilder::new();
                    values.for_each(|v| b.append_option(v.and_then(|v| v.as_str())));
                    Arc::new(b.finish())
                }
                other => panic!("batch_of: no builder for {other}"),
            }
        })
        .collect();
    RecordBatch::try_new(Arc::new(arrow), columns).expect("batch")
}

fn write_parquet(path: &Path, batch: &RecordBatch, row_group_rows: usize) {
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let file = std::fs::File::create(path).expect("create parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
        .expect("parquet writer");
    w.write(batch).expect("write parquet");
    w.close().expect("close parquet");
}

fn write_arrow_file(path: &Path, batch: &RecordBatch, chunk: usize) {
    let file = std::fs::File::create(path).expect("create arrow");
    let mut w = arrow_ipc::writer::FileWriter::try_new(file, &batch.schema()).expect("writer");
    for start in (0..batch.num_rows()).step_by(chunk) {
        w.write(&batch.slice(start, chunk.min(batch.num_rows() - start)))
            .expect("write");
    }
    w.finish().expect("finish");
}

fn ipc_stream(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w =
            arrow_ipc::writer::StreamWriter::try_new(&mut out, &batches[0].schema()).expect("w");
        for b in batches {
            w.write(b).expect("write");
        }
        w.finish().expect("finish");
    }
    out
}

/// One HTTP request with a body; the status and the answer's JSON.
fn post(
    addr: SocketAddr,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, sonic_rs::Value) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).expect("head");
    let _ = s.write_all(body);
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let status: u16 = String::from_utf8_lossy(&answer[..split])
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = &answer[split + 4..];
    let v = sonic_rs::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)));
    (status, v)
}

/// The error's message and code of a refusal.
fn refusal(v: &sonic_rs::Value) -> (String, String) {
    (
        v["error"]["code"].as_str().unwrap_or_default().to_string(),
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn end_offset(server: &Server, stream: &str) -> u64 {
    http_get(server.addr, &format!("/v1/streams/{stream}")).json()["end_offset"]
        .as_u64()
        .expect("end_offset")
}

/// Every row of `stream` as `sub --offset earliest` prints it: `(offset, row text)`.
fn subscribe_all(server: &Server, stream: &str, count: usize) -> Vec<(u64, String)> {
    let url = server.url(stream);
    let out = corecast_run(
        &[
            "sub",
            &url,
            "--offset",
            "earliest",
            "--count",
            &count.to_string(),
        ],
        None,
        Duration::from_secs(120),
    );
    assert_eq!(out.code, Some(0), "sub failed: {}", out.stderr);
    out.lines()
        .into_iter()
        .map(|l| {
            let (offset, _, row) = split_frame(l);
            (offset.expect("an offset"), row.to_string())
        })
        .collect()
}

fn ingest_cli(server: &Server, stream: &str, file: &Path, extra: &[&str]) -> CliOut {
    let url = server.url(stream);
    let mut args = vec![
        "ingest",
        url.as_str(),
        "--file",
        file.to_str().expect("path"),
    ];
    args.extend_from_slice(extra);
    corecast_run(&args, None, Duration::from_secs(300))
}

/// What a WebSocket publish of `row` is answered with: the `rejected` detail.
fn ws_rejection(server: &Server, stream: &str, row: &str) -> String {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    ws.send(tungstenite::Message::text(row.to_string()))
        .expect("send");
    let reply: sonic_rs::Value = sonic_rs::from_str(&recv_text(&mut ws)).expect("reply JSON");
    let _ = ws.close(None);
    assert_eq!(reply["error"].as_str(), Some("rejected"), "{reply:?}");
    reply["detail"].as_str().expect("detail").to_string()
}

#[test]
fn parquet_arrow_and_jsonl_ingest_give_subscribers_the_bytes_json_publishing_gives() {
    let setup = Setup::new();
    let mut config = String::new();
    for (name, schema) in [
        ("pub", "btcusdt-trades"),
        ("jsonl", "btcusdt-trades"),
        ("parquet", "btcusdt-trades"),
        ("arrowfile", "btcusdt-trades"),
        ("arrowstream", "btcusdt-trades"),
        ("mbp_pub", "es-mbp1"),
        ("mbp_parquet", "es-mbp1"),
        ("mbp_jsonl", "es-mbp1"),
    ] {
        config.push_str(&format!(
            "[[stream]]\nname = \"{name}\"\nschema = \"@data/{schema}.schema.json\"\nexactly_once = true\nmax_replay = \"unlimited\"\n"
        ));
    }
    let cfg = setup.config(&config);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);

    let dir = setup.tmp.path();
    let trades = read_lines("btcusdt-trades.jsonl");
    // the top-of-book sample declares price, bid_px and ask_px nullable but holds no null:
    // every 7th row gets a null price, every 11th leaves bid_px out (null as well)
    let mbp: Vec<String> = read_lines("es-mbp1.jsonl")
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v: sonic_rs::Value = sonic_rs::from_str(&l).expect("row");
            if i % 7 == 3 {
                v.as_object_mut()
                    .unwrap()
                    .insert("price", sonic_rs::Value::new_null());
            }
            if i % 11 == 5 {
                v.as_object_mut().unwrap().remove(&"bid_px");
            }
            sonic_rs::to_string(&v).expect("row")
        })
        .collect();
    assert_eq!((trades.len(), mbp.len()), (2001, 2288));
    let mbp_jsonl = dir.join("mbp.jsonl");
    std::fs::write(&mbp_jsonl, mbp.join("\n") + "\n").expect("write");
    let out = corecast_run(
        &[
            "pub",
            &server.url("pub"),
            "--file",
            data_file("btcusdt-trades.jsonl").to_str().unwrap(),
        ],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = corecast_run(
        &[
            "pub",
            &server.url("mbp_pub"),
            "--file",
            mbp_jsonl.to_str().unwrap(),
        ],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let batch = batch_of("btcusdt-trades.schema.json", &trades);
    write_parquet(&dir.join("trades.parquet"), &batch, 700);
    write_arrow_file(&dir.join("trades.arrow"), &batch, 450);
    std::fs::write(
        dir.join("trades.arrows"),
        ipc_stream(&[batch.slice(0, 1000), batch.slice(1000, 1001)]),
    )
    .expect("write arrow stream");
    let mbp_batch = batch_of("es-mbp1.schema.json", &mbp);
    assert!(
        mbp_batch
            .column_by_name("price")
            .expect("price")
            .null_count()
            > 0,
        "nulls in the sample"
    );
    write_parquet(&dir.join("mbp.parquet"), &mbp_batch, 1000);

    for (stream, file, batch_rows, rows) in [
        ("jsonl", data_file("btcusdt-trades.jsonl"), "300", 2001),
        ("parquet", dir.join("trades.parquet"), "512", 2001),
        ("arrowfile", dir.join("trades.arrow"), "1000", 2001),
        ("arrowstream", dir.join("trades.arrows"), "333", 2001),
        ("mbp_parquet", dir.join("mbp.parquet"), "1000", 2288),
        ("mbp_jsonl", mbp_jsonl.clone(), "65536", 2288),
    ] {
        let out = ingest_cli(&server, stream, &file, &["--batch-rows", batch_rows]);
        assert_eq!(out.code, Some(0), "{stream}: {}", out.stderr);
        let summary = out.stdout.trim();
        assert!(
            summary.starts_with(&format!(
                "ingested {rows} rows into {stream}: offsets 1..{rows} in "
            )),
            "{stream}: {summary}"
        );
        assert!(
            summary.contains(" rows/s, ") && summary.contains(" MB/s sent)"),
            "{summary}"
        );
    }
    let want = subscribe_all(&server, "pub", 2001);
    assert_eq!(want.len(), 2001);
    assert!(want
        .iter()
        .enumerate()
        .all(|(i, (o, _))| *o == i as u64 + 1));
    for stream in ["jsonl", "parquet", "arrowfile", "arrowstream"] {
        assert_eq!(subscribe_all(&server, stream, 2001), want, "{stream}");
        assert_eq!(end_offset(&server, stream), 2002, "{stream}");
    }
    let want = subscribe_all(&server, "mbp_pub", 2288);
    assert!(
        want.iter().any(|(_, r)| r.contains("\"price\":null")),
        "nulls on the wire"
    );
    assert!(
        want.iter().any(|(_, r)| r.contains("\"bid_px\":null")),
        "nulls on the wire"
    );
    for stream in ["mbp_parquet", "mbp_jsonl"] {
        assert_eq!(subscribe_all(&server, stream, 2288), want, "{stream}");
    }
    // the same command again: every row is already there, nothing is sent twice
    let out = ingest_cli(&server, "parquet", &dir.join("trades.parquet"), &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the first 2001 rows are already in the stream (last at offset 2001)"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stdout.trim(),
        "nothing to ingest: the file's 2001 rows are already in parquet"
    );
    assert_eq!(end_offset(&server, "parquet"), 2002);
}

/// A refused batch: what is wrong, status, code, message (a prefix when it ends with `: `), the
/// row named, the body.
type RowCase = (
    &'static str,
    u16,
    &'static str,
    String,
    Option<u64>,
    Vec<u8>,
);
/// A refused request: path and query, content type, body, status, code, message.
type HeadCase<'a> = (&'a str, Option<&'a str>, &'a [u8], u16, &'a str, &'a str);

#[test]
fn refusals_name_what_was_wrong_and_commit_nothing() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[ingest]\nmax_body_bytes = 131072\nmax_batch_rows = 1000\n\
         [[stream]]\nname = \"t\"\nschema = \"@trade\"\nexactly_once = true\n\
         [[stream]]\nname = \"plain\"\nschema = \"@trade\"\n\
         [[stream]]\nname = \"live\"\nschema = \"@trade\"\ndurable = false\n\
         [[stream]]\nname = \"free\"\n\
         [[stream]]\nname = \"btc\"\nschema = \"@data/btcusdt-trades.schema.json\"\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    let path = "/v1/streams/t/ingest";
    // a valid batch of 3 trades, built column by column; `with` replaces or adds one column
    let base: Vec<(&str, ArrayRef)> = vec![
        ("event_ts", Arc::new(Int64Array::from(vec![1_i64, 2, 3]))),
        (
            "price",
            Arc::new(arrow_array::Float64Array::from(vec![1.5, 2.5, 3.5])),
        ),
        (
            "amount",
            Arc::new(arrow_array::Float64Array::from(vec![0.1, 0.2, 0.3])),
        ),
        (
            "side",
            Arc::new(arrow_array::Int32Array::from(vec![0, 1, 0])),
        ),
        ("symbol", Arc::new(StringArray::from(vec!["A", "B", "C"]))),
        ("trade_id", Arc::new(Int64Array::from(vec![7_i64, 8, 9]))),
    ];
    let body = |cols: &[(&str, ArrayRef)]| {
        let fields: Vec<Field> = cols
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        let batch = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(fields)),
            cols.iter().map(|(_, a)| a.clone()).collect(),
        )
        .expect("batch");
        ipc_stream(&[batch])
    };
    let with = |name: &'static str, array: ArrayRef| {
        let mut cols = base.clone();
        match cols.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = array,
            None => cols.push((name, array)),
        }
        cols
    };
    let without = |name: &str| {
        base.iter()
            .filter(|(n, _)| *n != name)
            .cloned()
            .collect::<Vec<_>>()
    };
    // each refusal: (what, request, status, code, message, row)
    let row_json = |side: &str, symbol: &str| {
        format!(
            r#"{{"event_ts":3,"price":3.5,"amount":0.3,"side":{side},"symbol":{symbol},"trade_id":9}}"#
        )
    };
    let cases: Vec<RowCase> = vec![
        (
            "a column missing",
            422,
            "rejected",
            ws_rejection(
                &server,
                "t",
                r#"{"event_ts":1,"price":1.5,"amount":0.1,"side":0,"trade_id":7}"#,
            ),
            Some(0),
            body(&without("symbol")),
        ),
        (
            "a column extra",
            422,
            "rejected",
            ws_rejection(
                &server,
                "t",
                r#"{"event_ts":1,"price":1.5,"amount":0.1,"side":0,"symbol":"A","trade_id":7,"venue":"x"}"#,
            ),
            Some(0),
            body(&with(
                "venue",
                Arc::new(StringArray::from(vec!["x", "y", "z"])),
            )),
        ),
        (
            "a column of the wrong type",
            422,
            "rejected",
            ws_rejection(&server, "t", &row_json("0", "5")),
            Some(0),
            body(&with(
                "symbol",
                Arc::new(Int64Array::from(vec![5_i64, 6, 7])),
            )),
        ),
        (
            "a null in a required column",
            422,
            "rejected",
            ws_rejection(&server, "t", &row_json("0", "null")),
            Some(2),
            body(&with(
                "symbol",
                Arc::new(StringArray::from(vec![Some("A"), Some("B"), None])),
            )),
        ),
        (
            "an int out of int32 range",
            422,
            "rejected",
            ws_rejection(&server, "t", &row_json("3000000000", "\"C\"")),
            Some(2),
            body(&with(
                "side",
                Arc::new(Int64Array::from(vec![0_i64, 1, 3_000_000_000])),
            )),
        ),
        (
            "a reserved column",
            422,
            "rejected",
            ws_rejection(
                &server,
                "t",
                r#"{"event_ts":1,"price":1.5,"amount":0.1,"side":0,"symbol":"A","trade_id":7,"streamcast_ts":1}"#,
            ),
            Some(0),
            body(&with(
                "streamcast_ts",
                Arc::new(Int64Array::from(vec![1_i64, 2, 3])),
            )),
        ),
        (
            "an Arrow type with no JSON counterpart",
            422,
            "rejected",
            "column 'event_ts' takes an integer, not an Arrow Date32 column".into(),
            Some(0),
            body(&with(
                "event_ts",
                Arc::new(arrow_array::Date32Array::from(vec![1, 2, 3])),
            )),
        ),
        (
            "a body that is not Arrow",
            400,
            "bad_request",
            "the body is not an Arrow IPC stream: ".into(),
            None,
            b"{\"event_ts\":1}".to_vec(),
        ),
    ];
    for (what, status, code, message, row, bytes) in &cases {
        let (got_status, v) = post(addr, &format!("{path}?ingest=a&seq=1"), Some(ARROW), bytes);
        let (got_code, got_message) = refusal(&v);
        assert_eq!(
            (got_status, got_code.as_str()),
            (*status, *code),
            "{what}: {v:?}"
        );
        if message.ends_with(": ") {
            assert!(
                got_message.starts_with(message.as_str()),
                "{what}: {got_message}"
            );
        } else {
            assert_eq!(&got_message, message, "{what}");
        }
        assert_eq!(v["error"]["row"].as_u64(), *row, "{what}: {v:?}");
    }
    // the int32 message is the one a JSON publish gets, word for word
    assert_eq!(
        cases[4].3,
        "column 'side' cannot hold 3000000000: it is declared int32 (-2147483648 to 2147483647)"
    );
    let ok = body(&base);
    let simple: Vec<HeadCase<'_>> = vec![
        (
            "/v1/streams/t/ingest?ingest=a&seq=1",
            Some("text/csv"),
            &ok,
            415,
            "unsupported_media_type",
            "content-type \"text/csv\" is not taken here: send an Arrow IPC stream (application/vnd.apache.arrow.stream) or JSON lines (application/x-ndjson)",
        ),
        (
            "/v1/streams/t/ingest?ingest=a&seq=1",
            None,
            &ok,
            415,
            "unsupported_media_type",
            "no content-type is not taken here: send an Arrow IPC stream (application/vnd.apache.arrow.stream) or JSON lines (application/x-ndjson)",
        ),
        (
            "/v1/streams/nope/ingest",
            Some(ARROW),
            &ok,
            404,
            "not_found",
            "no such stream: nope",
        ),
        (
            "/v1/streams/live/ingest",
            Some(ARROW),
            &ok,
            409,
            "not_durable",
            "stream live is live-only (durable = false): ingest commits rows to a log, and this stream keeps none; publish over WebSocket instead",
        ),
        (
            "/v1/streams/plain/ingest?ingest=a&seq=1",
            Some(ARROW),
            &ok,
            409,
            "exactly_once_unavailable",
            "stream plain takes no exactly-once publishers, so no ingest id: declare it with exactly_once = true, or ingest without ingest= (not resumable)",
        ),
        (
            "/v1/streams/t/ingest?ingest=a",
            Some(ARROW),
            &ok,
            400,
            "bad_request",
            "ingest= needs seq=N, the seq of the batch's first row (1 for the first batch)",
        ),
        (
            "/v1/streams/t/ingest?ingest=a&seq=0",
            Some(ARROW),
            &ok,
            400,
            "bad_request",
            "seq=0 is not an integer >= 1 (the seq of the batch's first row; seqs start at 1)",
        ),
        (
            "/v1/streams/t/ingest?offset=1",
            Some(ARROW),
            &ok,
            400,
            "bad_request",
            "unknown query parameter(s): offset (this endpoint takes: ingest, seq)",
        ),
        (
            "/v1/streams/free/ingest",
            Some(ARROW),
            &ok,
            422,
            "rejected",
            "a schema-less stream takes Arrow batches of one non-null utf8 column 'row' holding each row's JSON; got columns [event_ts: Int64, price: Float64, amount: Float64, side: Int32, symbol: Utf8, trade_id: Int64]",
        ),
    ];
    for (path, ct, bytes, status, code, message) in &simple {
        let (got_status, v) = post(addr, path, *ct, bytes);
        assert_eq!(
            (got_status, refusal(&v)),
            (*status, (code.to_string(), message.to_string())),
            "{path}"
        );
    }
    // over the size limits: a body of more than 128 KiB, a batch of more than 1000 rows
    let big: Vec<String> = (0..1500).map(|i| trade(i, "BTCUSD")).collect();
    let (status, v) = post(
        addr,
        "/v1/streams/t/ingest?ingest=a&seq=1",
        Some("application/x-ndjson"),
        big.join("\n").as_bytes(),
    );
    assert_eq!(
        (status, refusal(&v)),
        (
            413,
            (
                "payload_too_large".into(),
                format!("a body of {} bytes is over the ingest limit of 131072 bytes (max_body_bytes); send smaller batches", big.join("\n").len())
            )
        )
    );
    let (status, v) = post(
        addr,
        "/v1/streams/t/ingest?ingest=a&seq=1",
        Some("application/x-ndjson"),
        big[..400].join("\n").as_bytes(),
    );
    assert_eq!(status, 200, "{v:?}");
    let rows: Vec<String> = (0..1001).map(|i| format!(r#"{{"event_ts":{i},"price":1.0,"amount":1.0,"side":0,"symbol":"A","trade_id":{i}}}"#)).collect();
    let (status, v) = post(
        addr,
        "/v1/streams/t/ingest?ingest=a&seq=401",
        Some("application/x-ndjson"),
        rows.join("\n").as_bytes(),
    );
    assert_eq!(
        (status, refusal(&v)),
        (
            413,
            (
                "payload_too_large".into(),
                "the body holds more than 1000 rows (1001 so far), over the ingest limit max_batch_rows = 1000; send smaller batches".into()
            )
        )
    );
    // a JSON line refused gets the publish path's message, with the row it is in
    let mut lines: Vec<String> = (0..5).map(|i| trade(1000 + i, "ETH")).collect();
    lines[3] =
        r#"{"event_ts":1,"price":true,"amount":1.0,"side":0,"symbol":"A","trade_id":1}"#.into();
    let (status, v) = post(
        addr,
        "/v1/streams/t/ingest?ingest=a&seq=401",
        Some("application/x-ndjson"),
        lines.join("\n").as_bytes(),
    );
    assert_eq!(status, 422);
    assert_eq!(refusal(&v).1, ws_rejection(&server, "plain", &lines[3]));
    assert_eq!(
        (v["error"]["row"].as_u64(), v["error"]["column"].as_str()),
        (Some(3), Some("price"))
    );
    // of all that, only the one good batch (400 rows) is in the log
    assert_eq!(end_offset(&server, "t"), 401);
    let mark = http_get(addr, "/v1/streams/t/ingest?ingest=a").json();
    assert_eq!(
        (mark["last_seq"].as_u64(), mark["last_offset"].as_u64()),
        (Some(400), Some(400))
    );
    assert_eq!(end_offset(&server, "free"), 1);

    // the CLI on the real Parquet sample, whose columns are not the stream's: refused naming them
    let out = ingest_cli(&server, "btc", &data_file("btcusdt-trades.parquet"), &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("btcusdt-trades.parquet: row 1: rejected (422): row names columns this log does not have: ['timestamp']. Declared: ['buyer_maker', 'event_ts', 'price', 'quantity', 'streamcast_ts', 'trade_id']; nothing of this batch was committed"),
        "{}",
        out.stderr
    );
    // and on a JSON lines file with a bad row: the line is named
    let bad = setup.tmp.path().join("bad.jsonl");
    let mut text: Vec<String> = read_lines("btcusdt-trades.jsonl")[..10].to_vec();
    text[6] = text[6]
        .replace("\"buyer_maker\":true", "\"buyer_maker\":1")
        .replace("\"buyer_maker\":false", "\"buyer_maker\":1");
    std::fs::write(
        &bad,
        format!("{}\n\n{}\n", text[..2].join("\n"), text[2..].join("\n")),
    )
    .expect("write");
    let out = ingest_cli(&server, "btc", &bad, &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("bad.jsonl: row 7 (line 8): rejected (422): column 'buyer_maker' takes a boolean, not an integer; nothing of this batch was committed"),
        "{}",
        out.stderr
    );
    assert_eq!(end_offset(&server, "btc"), 1);

    // a schema-less stream takes one utf8 `row` column of JSON rows
    let rows = StringArray::from(vec![r#"{"z":1,"a":[1.50,"x"]}"#, r#"{"k":null}"#]);
    let batch = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![Field::new(
            "row",
            DataType::Utf8,
            false,
        )])),
        vec![Arc::new(rows) as ArrayRef],
    )
    .expect("batch");
    let (status, v) = post(
        addr,
        "/v1/streams/free/ingest",
        Some(ARROW),
        &ipc_stream(&[batch]),
    );
    assert_eq!(status, 200, "{v:?}");
    assert_eq!(
        subscribe_all(&server, "free", 2)
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Vec<_>>(),
        [r#"{"z":1,"a":[1.5,"x"]}"#, r#"{"k":null}"#]
    );
}

#[test]
fn a_batch_sent_again_is_answered_with_its_original_offsets_and_not_committed_twice() {
    let setup = Setup::new();
    let cfg = setup.config("[[stream]]\nname = \"t\"\nschema = \"@trade\"\nexactly_once = true\nmax_replay = \"unlimited\"\n");
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let addr = server.addr;
    let rows: Vec<String> = (1..=300).map(|i| trade(i, "BTCUSD")).collect();
    let lines = |a: usize, b: usize| rows[a - 1..b].join("\n");
    let send = |seq: usize, last: usize| {
        post(
            addr,
            &format!("/v1/streams/t/ingest?ingest=file-1&seq={seq}"),
            Some("application/x-ndjson"),
            lines(seq, last).as_bytes(),
        )
    };
    let fields = |v: &sonic_rs::Value| {
        [
            "rows",
            "appended",
            "duplicates",
            "first_offset",
            "last_offset",
            "seq",
            "next_seq",
        ]
        .map(|k| v[k].as_u64())
    };
    let (s, v) = send(1, 100);
    assert_eq!(s, 200, "{v:?}");
    assert_eq!(fields(&v), [100, 100, 0, 1, 100, 1, 101].map(Some));
    assert_eq!(v["ingest"].as_str(), Some("file-1"));
    // a publisher's rows in between: the ingest's offsets are not the seqs
    assert_eq!(
        publish_batch(&server, "t", &[trade(9000, "X"), trade(9001, "X")]),
        [Some(101), Some(102)]
    );
    let (_, v) = send(101, 200);
    assert_eq!(fields(&v), [100, 100, 0, 103, 202, 101, 201].map(Some));
    // the first batch again (a lost reply): its original offsets, nothing appended
    let (s, v) = send(1, 100);
    assert_eq!(s, 200);
    assert_eq!(fields(&v), [100, 0, 100, 1, 100, 1, 101].map(Some));
    let (_, v) = send(101, 200);
    assert_eq!(fields(&v), [100, 0, 100, 103, 202, 101, 201].map(Some));
    // overlapping: the first 50 rows were there, the other 50 are new
    let (_, v) = send(151, 250);
    assert_eq!(fields(&v), [100, 50, 50, 153, 252, 151, 251].map(Some));
    // beyond the mark: a gap, nothing committed
    let (s, v) = send(260, 300);
    assert_eq!(s, 409);
    assert_eq!(
        refusal(&v),
        ("seq_gap".into(), "seq=260 is beyond the next seq of this ingest id, 251: rows 251..259 were never committed; resend from seq=251".into())
    );
    assert_eq!(
        (v["error"]["expected"].as_u64(), v["error"]["got"].as_u64()),
        (Some(251), Some(260))
    );
    let mark = http_get(addr, "/v1/streams/t/ingest?ingest=file-1").json();
    assert_eq!(
        (mark["last_seq"].as_u64(), mark["last_offset"].as_u64()),
        (Some(250), Some(252))
    );
    // every row once, in order, around the publisher's two
    let got = subscribe_all(&server, "t", 252);
    assert_eq!(got.len(), 252);
    assert!(got.iter().enumerate().all(|(i, (o, _))| *o == i as u64 + 1));
    let codec = RowCodec::Schema(
        Schema::compile(
            &std::fs::read_to_string(shared_dir().join("tools/anchor/trade.schema.json")).unwrap(),
        )
        .unwrap(),
    );
    let canonical = |r: &str| {
        let mut out = Vec::new();
        codec
            .encode_row(
                &corecast_storage::json::parse(r.as_bytes()).unwrap(),
                &mut out,
            )
            .unwrap();
        String::from_utf8(out).unwrap()
    };
    let mut want: Vec<String> = rows[..100].iter().map(|r| canonical(r)).collect();
    want.push(canonical(&trade(9000, "X")));
    want.push(canonical(&trade(9001, "X")));
    want.extend(rows[100..250].iter().map(|r| canonical(r)));
    assert_eq!(got.into_iter().map(|(_, r)| r).collect::<Vec<_>>(), want);
    assert_eq!(end_offset(&server, "t"), 253);
}

/// Sends a request head with `Expect: 100-continue` and reads the server's `100 Continue`.
fn head_then_continue(addr: SocketAddr, path: &str, length: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-ndjson\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).expect("read"),
            1,
            "closed before 100 Continue"
        );
        got.push(byte[0]);
    }
    assert_eq!(got, b"HTTP/1.1 100 Continue\r\n\r\n");
    s
}

fn answer_of(mut s: TcpStream) -> sonic_rs::Value {
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head");
    sonic_rs::from_slice(&answer[split + 4..]).expect("JSON")
}

#[test]
fn overlapping_batches_of_one_id_commit_in_seq_order_whichever_body_arrives_first() {
    let setup = Setup::new();
    let cfg = setup.config("[[stream]]\nname = \"t\"\nschema = \"@trade\"\nexactly_once = true\nmax_replay = \"unlimited\"\nmax_inbound = 1000\n");
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let rows: Vec<String> = (1..=2000).map(|i| trade(i, "ETHUSD")).collect();
    let first = rows[..1000].join("\n");
    let second = rows[1000..].join("\n");
    // both seqs registered (their 100 Continue), then the later batch's body goes first; each
    // batch fills max_inbound, so the later one must not take that room while it waits
    let mut a = head_then_continue(
        server.addr,
        "/v1/streams/t/ingest?ingest=o&seq=1",
        first.len(),
    );
    let mut b = head_then_continue(
        server.addr,
        "/v1/streams/t/ingest?ingest=o&seq=1001",
        second.len(),
    );
    b.write_all(second.as_bytes()).expect("body");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(end_offset(&server, "t"), 1, "seq 1001 waits for seq 1");
    a.write_all(first.as_bytes()).expect("body");
    let (va, vb) = (answer_of(a), answer_of(b));
    assert_eq!(
        (va["first_offset"].as_u64(), va["last_offset"].as_u64()),
        (Some(1), Some(1000)),
        "{va:?}"
    );
    assert_eq!(
        (vb["first_offset"].as_u64(), vb["last_offset"].as_u64()),
        (Some(1001), Some(2000)),
        "{vb:?}"
    );
    let got: Vec<u64> = subscribe_all(&server, "t", 2000)
        .into_iter()
        .map(|(o, row)| {
            let v: sonic_rs::Value = sonic_rs::from_str(&row).expect("row");
            assert_eq!(v["trade_id"].as_u64(), Some(o), "row at offset {o}");
            o
        })
        .collect();
    assert_eq!(got.len(), 2000);
}

#[test]
fn kill_9_during_a_long_ingest_then_the_same_command_again_gives_every_row_exactly_once() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[[stream]]\nname = \"mbo\"\nschema = \"@data/es-mbo.schema.json\"\nexactly_once = true\nmax_replay = \"unlimited\"\n",
    );
    let file = data_file("es-mbo.jsonl");
    let lines = read_lines("es-mbo.jsonl");
    assert_eq!(lines.len(), 68_792);
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let url = server.url("mbo");
    let mut child = Command::new(corecast_bin())
        .args([
            "ingest",
            &url,
            "--file",
            file.to_str().unwrap(),
            "--batch-rows",
            "500",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ingest");
    // wait until some batches are in, then kill the server in the middle of the ingest
    let deadline = Instant::now() + Duration::from_secs(120);
    let at_kill = loop {
        let mark = http_get(server.addr, "/v1/streams/mbo/ingest").json();
        assert_eq!(mark["exactly_once"].as_bool(), Some(true));
        let end = end_offset(&server, "mbo");
        if end > 2000 {
            break end;
        }
        assert!(Instant::now() < deadline, "the ingest did not start");
        std::thread::sleep(Duration::from_millis(2));
    };
    let data = server.data.clone();
    server.kill9();
    let status = child.wait().expect("ingest exits");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the first run loses its server: {stderr}"
    );
    assert!(
        stderr.contains("run the same command again to resume"),
        "{stderr}"
    );

    let server = Server::start(Some(&cfg), &data, &[]);
    let before = end_offset(&server, "mbo");
    assert!(
        before >= at_kill && before <= lines.len() as u64,
        "{before}"
    );
    let out = ingest_cli(&server, "mbo", &file, &["--batch-rows", "4000"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let done = before - 1;
    assert!(
        out.stderr.contains(&format!("the first {done} rows are already in the stream (last at offset {done}); resuming at row {}", done + 1)),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.starts_with(&format!(
            "ingested {} rows into mbo: offsets {}..68792 in ",
            68_792 - done,
            done + 1
        )),
        "{}",
        out.stdout
    );
    let got = subscribe_all(&server, "mbo", lines.len());
    assert_eq!(got.len(), lines.len());
    let codec = RowCodec::Schema(
        Schema::compile(&std::fs::read_to_string(data_file("es-mbo.schema.json")).unwrap())
            .unwrap(),
    );
    for (i, ((offset, row), line)) in got.iter().zip(&lines).enumerate() {
        assert_eq!(*offset, i as u64 + 1);
        let mut want = Vec::new();
        codec
            .encode_row(
                &corecast_storage::json::parse(line.as_bytes()).unwrap(),
                &mut want,
            )
            .unwrap();
        assert_eq!(row.as_bytes(), want.as_slice(), "row {}", i + 1);
    }
    assert_eq!(end_offset(&server, "mbo"), 68_793);
}

/// A stream that is not exactly-once has no ingest id to order batches by: `corecast ingest`
/// sends them one at a time, so the rows land in the file's order (with two in flight, the
/// short last batch of the order-book file, 3,256 rows, was committed before the 65,536 ahead
/// of it).
#[test]
fn ingest_into_a_stream_without_exactly_once_keeps_the_file_order() {
    let setup = Setup::new();
    let cfg = setup.config(
        "[[stream]]\nname = \"plain\"\nschema = \"@data/es-mbo.schema.json\"\nmax_replay = \"unlimited\"\n",
    );
    let server = Server::start(Some(&cfg), &setup.data(), &[]);
    let file = data_file("es-mbo.jsonl");
    let lines = read_lines("es-mbo.jsonl");
    let out = ingest_cli(&server, "plain", &file, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let n = lines.len() as u64;
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains(&format!("offsets 1..{n}")), "{said}");
    assert_eq!(end_offset(&server, "plain"), n + 1);
    let rows = subscribe_all(&server, "plain", lines.len());
    assert_eq!(rows.len(), lines.len());
    let id = |v: &sonic_rs::Value| {
        (
            v["ts_event"].as_u64(),
            v["order_id"].as_u64(),
            v["sequence"].as_u64(),
            v["action"].as_str().map(str::to_string),
        )
    };
    for (k, ((offset, row), line)) in rows.iter().zip(&lines).enumerate() {
        assert_eq!(*offset, k as u64 + 1);
        let got: sonic_rs::Value = sonic_rs::from_str(row).expect("row JSON");
        let want: sonic_rs::Value = sonic_rs::from_str(line).expect("line JSON");
        assert_eq!(
            id(&got),
            id(&want),
            "offset {offset}: not the file's row {}",
            k + 1
        );
    }
    server.stop();
}
