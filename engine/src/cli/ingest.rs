//! `corecast ingest ws://HOST:PORT/STREAM --file F`: a file's rows into a stream, in large
//! batches over the server's ingest endpoint (`POST /v1/streams/NAME/ingest`), resumable.
//!
//! The file is read on a thread of its own into request bodies — Arrow IPC streams for
//! `.parquet` and `.arrow` files (the Arrow IPC file or stream format), JSON lines for
//! `.jsonl` — each at most `--batch-rows` rows and the server's `max_body_bytes`, at most two
//! bodies ahead (a bounded channel). The main thread sends them, each as one atomic batch,
//! two requests at once on an exactly-once stream (`REQUESTS_IN_FLIGHT`): a request's head goes
//! out only once the previous body is (the server has then registered its seq, and commits the
//! batches in seq order); on another stream, with no ingest id to order them by, one at a time
//! (while the next body is read and encoded). It
//! shows a progress bar (`indicatif`, on a terminal only).
//!
//! On an exactly-once stream every batch carries the ingest id (`--id`, or one derived from the
//! file's path, size and modification time) and the seq of its first row (the row's 1-based
//! position in the file). Before sending, the command reads the id's mark from the server and
//! skips the rows already committed, so running the same command again after a kill — of the
//! command, or of the server — carries on where the log ends, with no row twice.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_ipc::writer::StreamWriter;
use clap::Args;
use corecast_net::client::Target;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sha2::Digest as _;
use sonic_rs::JsonValueTrait;

use super::{EXIT_CONNECTION, EXIT_LOCAL, EXIT_OK, EXIT_PROTOCOL, EXIT_REFUSED, EXIT_USAGE};
use crate::ingest::body::{ARROW_STREAM, JSON_LINES};

/// Arguments of `corecast ingest`.
#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Sends the file's rows in batches of --batch-rows (each committed atomically, two in flight,\n",
    "committed in order) and prints a summary: rows, offsets first..last, rows/s, MB/s. On a stream\n",
    "declared exactly_once = true the ingest is resumable: run the same command again after an\n",
    "interruption and it carries on from the server's mark for the ingest id, with no row twice.\n\n",
    "Formats (by extension, or --format): .parquet; .arrow / .arrows / .ipc / .feather (Arrow IPC\n",
    "file or stream format); .jsonl / .ndjson (one JSON row per line). Columns are matched to the\n",
    "stream's schema by name and checked exactly as a JSON publish of the same rows would be.\n\n",
    "Examples:\n",
    "  corecast ingest ws://127.0.0.1:8765/btc --file trades.parquet\n",
    "  corecast ingest ws://127.0.0.1:8765/btc --file trades.jsonl --batch-rows 10000 --id day-1\n\n",
    crate::credentials_help!(),
    "Exit codes:\n",
    "  0  every row of the file is in the stream\n",
    "  1  the server refused a batch (a row, the body, the stream), nothing of it committed\n",
    "  2  usage: bad arguments, or a URL that is not ws://HOST:PORT/STREAM\n",
    "  3  connection failed or lost (run the same command again to resume)\n",
    "  4  the file could not be read, or is not of its format\n",
    "  5  the server's answer was not understood"
))]
pub struct IngestArgs {
    /// ws://HOST:PORT/STREAM
    pub url: String,
    /// The file to ingest.
    #[arg(long, value_name = "F")]
    pub file: PathBuf,
    /// Rows per batch (each one request, one commit); lowered to the server's max_batch_rows.
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub batch_rows: usize,
    /// The ingest id (exactly-once streams); default: derived from the file's path, size and
    /// modification time, so the same command resumes the same ingest.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// The file's format, when its extension does not say.
    #[arg(long, value_enum)]
    pub format: Option<FileFormat>,
}

/// The formats `corecast ingest` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FileFormat {
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC, file or stream format.
    Arrow,
    /// JSON lines.
    Jsonl,
}

impl FileFormat {
    fn of(path: &Path) -> Option<FileFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "parquet" | "parq" | "pq" => FileFormat::Parquet,
            "arrow" | "arrows" | "ipc" | "feather" => FileFormat::Arrow,
            "jsonl" | "ndjson" => FileFormat::Jsonl,
            _ => return None,
        })
    }
}

/// A failure, with the exit status it ends the command with.
struct Failure {
    code: u8,
    message: String,
    /// The row of the batch the server refused (0-based), when it named one.
    row: Option<usize>,
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
        row: None,
    }
}

/// Runs `corecast ingest`.
pub fn run(args: IngestArgs) -> ExitCode {
    match ingest(&args) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(f) => {
            eprintln!("corecast ingest: {}", f.message.replace(['\r', '\n'], " "));
            ExitCode::from(f.code)
        }
    }
}

/// The server's endpoint for one stream.
struct Endpoint {
    addr: SocketAddr,
    host: String,
    path: String,
    /// The `Authorization` header: the URL's userinfo as Basic, else the environment
    /// ([`super::credentials`]).
    authorization: Option<String>,
}

impl Endpoint {
    /// One request on its own connection; the status and the body of the answer. A body is
    /// sent with `Expect: 100-continue` and only once the server has said `100 Continue` (it
    /// has then registered the batch's seq); `sent` is called when the body is out, or when the
    /// server answered without wanting it, or the request failed.
    fn request(
        &self,
        method: &str,
        query: &str,
        body: Option<(&str, &[u8])>,
        sent: &dyn Fn(),
    ) -> Result<(u16, Vec<u8>), Failure> {
        let result = self.exchange(method, query, body, sent);
        sent();
        result
    }

    fn exchange(
        &self,
        method: &str,
        query: &str,
        body: Option<(&str, &[u8])>,
        sent: &dyn Fn(),
    ) -> Result<(u16, Vec<u8>), Failure> {
        let lost = |e: std::io::Error| {
            fail(
                EXIT_CONNECTION,
                format!("{}: {e}; run the same command again to resume", self.addr),
            )
        };
        let mut conn = TcpStream::connect(self.addr).map_err(|e| {
            fail(
                EXIT_CONNECTION,
                format!(
                    "cannot connect to {}: {e}; once the server is back, run the same command again to resume",
                    self.addr
                ),
            )
        })?;
        conn.set_read_timeout(Some(Duration::from_secs(600)))
            .map_err(lost)?;
        let _ = conn.set_nodelay(true);
        let mut head = format!(
            "{method} {}{query} HTTP/1.1\r\nhost: {}\r\nuser-agent: corecast-ingest\r\n",
            self.path, self.host
        );
        if let Some(a) = &self.authorization {
            head.push_str(&format!("authorization: {a}\r\n"));
        }
        if let Some((content_type, bytes)) = body {
            head.push_str(&format!(
                "content-type: {content_type}\r\ncontent-length: {}\r\nexpect: 100-continue\r\n",
                bytes.len()
            ));
        }
        head.push_str("connection: close\r\n\r\n");
        conn.write_all(head.as_bytes()).map_err(lost)?;
        let mut answer = Vec::new();
        if let Some((_, bytes)) = body {
            // wait for `100 Continue` (or an answer that refuses the body unseen)
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end + 4;
                }
                let n = conn.read(&mut chunk).map_err(lost)?;
                if n == 0 {
                    break 0;
                }
                answer.extend_from_slice(&chunk[..n]);
            };
            if head_end > 0 && answer.starts_with(b"HTTP/1.1 100") {
                answer.drain(..head_end);
                conn.write_all(bytes).map_err(lost)?;
                sent();
            }
        }
        conn.read_to_end(&mut answer).map_err(lost)?;
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| {
                fail(
                    EXIT_CONNECTION,
                    format!(
                        "{} closed the connection without a complete answer; run the same command again to resume",
                        self.addr
                    ),
                )
            })?;
        let status = std::str::from_utf8(&answer[..split])
            .ok()
            .and_then(|h| h.split(' ').nth(1))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| fail(EXIT_PROTOCOL, "the server's answer has no HTTP status"))?;
        Ok((status, answer[split + 4..].to_vec()))
    }

    /// A JSON answer, or the failure its error body describes.
    fn json(
        &self,
        method: &str,
        query: &str,
        body: Option<(&str, &[u8])>,
        sent: &dyn Fn(),
    ) -> Result<sonic_rs::Value, Failure> {
        let (status, bytes) = self.request(method, query, body, sent)?;
        let value: sonic_rs::Value = sonic_rs::from_slice(&bytes).map_err(|e| {
            fail(
                EXIT_PROTOCOL,
                format!("the server answered {status} with a body that is not JSON: {e}"),
            )
        })?;
        if status == 200 {
            return Ok(value);
        }
        let error = &value["error"];
        let message = error["message"].as_str().unwrap_or("(no message)");
        let code = error["code"].as_str().unwrap_or("error");
        let exit = if status >= 500 {
            EXIT_CONNECTION
        } else {
            EXIT_REFUSED
        };
        Err(Failure {
            code: exit,
            message: format!("{code} ({status}): {message}"),
            row: error["row"].as_u64().map(|r| r as usize),
        })
    }
}

/// The stream's ingest settings and, for an exactly-once stream, where the id's ingest stands.
struct Start {
    max_body_bytes: usize,
    max_batch_rows: usize,
    /// The ingest id and its last committed seq (0: none) and offset.
    ingest: Option<(String, u64, Option<u64>)>,
}

fn start(endpoint: &Endpoint, args: &IngestArgs) -> Result<Start, Failure> {
    let status = endpoint.json("GET", "", None, &|| {})?;
    let limit = |key: &str| status[key].as_u64().map(|n| n as usize);
    let (Some(max_body_bytes), Some(max_batch_rows)) =
        (limit("max_body_bytes"), limit("max_batch_rows"))
    else {
        return Err(fail(
            EXIT_PROTOCOL,
            "the server's ingest status names no limits",
        ));
    };
    let exactly_once = status["exactly_once"].as_bool().unwrap_or(false);
    let ingest = if exactly_once {
        let id = match &args.id {
            Some(id) => id.clone(),
            None => derived_id(&args.file)?,
        };
        let mark = endpoint.json(
            "GET",
            &format!("?ingest={}", query_escape(&id)),
            None,
            &|| {},
        )?;
        Some((
            id,
            mark["last_seq"].as_u64().unwrap_or(0),
            mark["last_offset"].as_u64(),
        ))
    } else {
        if args.id.is_some() {
            return Err(fail(
                EXIT_REFUSED,
                "--id needs a stream declared with exactly_once = true in the server's config",
            ));
        }
        None
    };
    Ok(Start {
        max_body_bytes,
        max_batch_rows,
        ingest,
    })
}

/// `ingest-` and 16 hex digits of SHA-256 over the file's absolute path, size and mtime.
fn derived_id(path: &Path) -> Result<String, Failure> {
    let local = |e: std::io::Error| fail(EXIT_LOCAL, format!("{}: {e}", path.display()));
    let absolute = std::fs::canonicalize(path).map_err(local)?;
    let meta = std::fs::metadata(&absolute).map_err(local)?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let mut h = sha2::Sha256::new();
    h.update(absolute.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(meta.len().to_le_bytes());
    h.update(mtime.to_le_bytes());
    let digest = h.finalize();
    Ok(format!(
        "ingest-{}",
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// Percent-encodes every byte outside RFC 3986's unreserved set (a path segment or a query
/// value).
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Requests `corecast ingest` keeps in flight: the next batch is read, sent and encoded while
/// the previous one is being made durable (the server hands them to the writer in seq order).
const REQUESTS_IN_FLIGHT: usize = 2;

/// A request sent and not answered yet.
struct InFlight {
    /// Its rows (the bytes themselves went with the request).
    body: Body,
    /// The body's size.
    bytes_len: usize,
    /// The thread waiting for the answer.
    handle: std::thread::JoinHandle<Result<sonic_rs::Value, Failure>>,
}

/// One request body: `rows` rows starting at the file's row `first_row` (0-based).
struct Body {
    bytes: Vec<u8>,
    rows: usize,
    first_row: u64,
    /// JSON lines: the file's line number of each row (1-based), for messages.
    lines: Vec<u64>,
}

fn ingest(args: &IngestArgs) -> Result<(), Failure> {
    let target = Target::parse(&args.url).map_err(|e| fail(EXIT_USAGE, e.to_string()))?;
    if target.tls {
        return Err(fail(
            EXIT_USAGE,
            "wss:// is not supported by ingest yet: use ws:// on a plaintext listener, or POST to https://…/v1/streams/NAME/ingest (curl)",
        ));
    }
    if args.batch_rows == 0 {
        return Err(fail(EXIT_USAGE, "--batch-rows must be at least 1"));
    }
    let format = match args.format.or_else(|| FileFormat::of(&args.file)) {
        Some(f) => f,
        None => {
            return Err(fail(
                EXIT_USAGE,
                format!(
                    "{}: cannot tell the format from the extension; pass --format parquet, arrow or jsonl",
                    args.file.display()
                ),
            ))
        }
    };
    let addr = target
        .resolve()
        .map_err(|e| fail(EXIT_CONNECTION, e.to_string()))?;
    let path = format!("/v1/streams/{}/ingest", query_escape(&target.stream));
    let endpoint = Endpoint {
        addr,
        host: target.host_header(),
        path,
        authorization: target
            .authorization
            .clone()
            .or_else(super::credentials::authorization),
    };
    let start = start(&endpoint, args)?;
    let skip = start.ingest.as_ref().map_or(0, |(_, seq, _)| *seq);
    let batch_rows = args.batch_rows.min(start.max_batch_rows);
    match &start.ingest {
        Some((id, 0, _)) => eprintln!("corecast ingest: ingest id {id}"),
        Some((id, seq, offset)) => eprintln!(
            "corecast ingest: ingest id {id}: the first {seq} rows are already in the stream (last at offset {}); resuming at row {}",
            offset.map_or("unknown".into(), |o| o.to_string()),
            seq + 1
        ),
        None => eprintln!(
            "corecast ingest: stream {} is not exactly-once: this ingest cannot be resumed (declare exactly_once = true to make it so)",
            target.stream
        ),
    }
    let opened = open(&args.file, format, skip, batch_rows, start.max_body_bytes)?;
    let progress = progress_bar(opened.total_rows.map(|t| t.saturating_sub(skip)));
    let began = Instant::now();
    let mut sent_rows = 0u64;
    let mut duplicates = 0u64;
    let mut sent_bytes = 0u64;
    let mut first_offset = None;
    let mut last_offset = None;
    let endpoint = std::sync::Arc::new(endpoint);
    // the server puts an ingest id's batches in seq order; batches without one (a stream that
    // is not exactly-once) would be committed in whichever order they arrive, so they go one
    // at a time (the next one is still read and encoded meanwhile)
    let window = if start.ingest.is_some() {
        REQUESTS_IN_FLIGHT
    } else {
        1
    };
    let mut in_flight: std::collections::VecDeque<InFlight> = std::collections::VecDeque::new();
    let mut failure: Option<Failure> = None;
    let mut answered = |done: InFlight, failure: &mut Option<Failure>| {
        let answer = done
            .handle
            .join()
            .unwrap_or_else(|_| Err(fail(EXIT_PROTOCOL, "a request thread panicked")));
        let answer = match answer {
            Ok(a) => a,
            Err(f) => {
                if failure.is_none() {
                    *failure = Some(locate(f, &done.body, &args.file));
                }
                return;
            }
        };
        if failure.is_some() {
            return;
        }
        if first_offset.is_none() {
            first_offset = answer["first_offset"].as_u64();
        }
        if let Some(o) = answer["last_offset"].as_u64() {
            last_offset = Some(o);
        }
        duplicates += answer["duplicates"].as_u64().unwrap_or(0);
        sent_rows += done.body.rows as u64;
        sent_bytes += done.bytes_len as u64;
        progress.inc(done.body.rows as u64);
    };
    for body in opened.bodies {
        let body = match body {
            Ok(b) => b,
            Err(f) => {
                failure.get_or_insert(f);
                break;
            }
        };
        let query = match &start.ingest {
            Some((id, _, _)) => format!("?ingest={}&seq={}", query_escape(id), body.first_row + 1),
            None => String::new(),
        };
        let Body {
            bytes,
            rows,
            first_row,
            lines,
        } = body;
        let meta = Body {
            bytes: Vec::new(),
            rows,
            first_row,
            lines,
        };
        let bytes_len = bytes.len();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel::<()>();
        let ep = endpoint.clone();
        let content_type = opened.content_type;
        let handle = std::thread::spawn(move || {
            let signal = move || {
                let _ = sent_tx.send(());
            };
            ep.json("POST", &query, Some((content_type, &bytes)), &signal)
        });
        // the next request's head goes out only once this one's body is (its seq registered)
        let _ = sent_rx.recv();
        in_flight.push_back(InFlight {
            body: meta,
            bytes_len,
            handle,
        });
        while in_flight.len() >= window || failure.is_some() {
            let Some(done) = in_flight.pop_front() else {
                break;
            };
            answered(done, &mut failure);
        }
        if failure.is_some() {
            break;
        }
    }
    while let Some(done) = in_flight.pop_front() {
        answered(done, &mut failure);
    }
    if let Some(f) = failure {
        progress.abandon();
        return Err(f);
    }
    progress.finish_and_clear();
    let secs = began.elapsed().as_secs_f64().max(1e-6);
    let out = std::io::stdout();
    let mut out = out.lock();
    let offsets = match (first_offset, last_offset) {
        (Some(f), Some(l)) => format!("offsets {f}..{l}"),
        _ => "no new offsets".to_string(),
    };
    let dup = if duplicates > 0 {
        format!(" ({duplicates} already there, answered at their original offsets)")
    } else {
        String::new()
    };
    let resumed = if skip > 0 {
        format!(", resumed after row {skip}")
    } else {
        String::new()
    };
    if sent_rows == 0 {
        let _ = writeln!(
            out,
            "nothing to ingest: the file's {skip} rows are already in {}",
            target.stream
        );
        return Ok(());
    }
    let _ = writeln!(
        out,
        "ingested {sent_rows} rows{dup} into {}: {offsets} in {secs:.2} s ({:.0} rows/s, {:.1} MB/s sent{resumed})",
        target.stream,
        sent_rows as f64 / secs,
        sent_bytes as f64 / secs / 1e6,
    );
    Ok(())
}

/// Names the file's row (and line, for JSON lines) a refusal is about, or the batch's rows.
fn locate(f: Failure, body: &Body, file: &Path) -> Failure {
    let place = match f.row {
        Some(r) => {
            let line = body
                .lines
                .get(r)
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            format!(
                "{}: row {}{line}",
                file.display(),
                body.first_row + r as u64 + 1
            )
        }
        None => format!(
            "{}: rows {}..{}",
            file.display(),
            body.first_row + 1,
            body.first_row + body.rows as u64
        ),
    };
    Failure {
        code: f.code,
        message: format!(
            "{place}: {}; nothing of this batch was committed",
            f.message
        ),
        row: f.row,
    }
}

fn progress_bar(total: Option<u64>) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = match total {
        Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let template = if total.is_some() {
        "{bar:40} {human_pos}/{human_len} rows  {per_sec}  eta {eta}"
    } else {
        "{spinner} {human_pos} rows  {per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// A file opened for ingest: its bodies, produced on a reader thread.
struct Opened {
    content_type: &'static str,
    total_rows: Option<u64>,
    bodies: Receiver<Result<Body, Failure>>,
}

/// How many bodies the reader thread may have ready ahead of the one being sent.
const BODIES_AHEAD: usize = 2;

fn open(
    path: &Path,
    format: FileFormat,
    skip: u64,
    batch_rows: usize,
    max_body_bytes: usize,
) -> Result<Opened, Failure> {
    let local = |e: &dyn std::fmt::Display| fail(EXIT_LOCAL, format!("{}: {e}", path.display()));
    let file = File::open(path).map_err(|e| local(&e))?;
    let (tx, rx) = sync_channel(BODIES_AHEAD);
    let shown = path.display().to_string();
    let (content_type, total_rows) = match format {
        FileFormat::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| local(&e))?;
            let total = builder.metadata().file_metadata().num_rows().max(0) as u64;
            let reader = builder
                .with_batch_size(batch_rows)
                .with_offset(skip.min(total) as usize)
                .build()
                .map_err(|e| local(&e))?;
            let batches = reader.map(move |b| b.map_err(|e| e.to_string()));
            spawn_arrow(
                batches,
                skip.min(total),
                0,
                batch_rows,
                max_body_bytes,
                shown,
                tx,
            );
            (ARROW_STREAM, Some(total))
        }
        FileFormat::Arrow => {
            let mut magic = [0u8; 6];
            let is_file = File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
                && &magic == b"ARROW1";
            if is_file {
                let reader = FileReader::try_new(file, None).map_err(|e| local(&e))?;
                let batches = reader.map(|b| b.map_err(|e| e.to_string()));
                spawn_arrow(batches, 0, skip, batch_rows, max_body_bytes, shown, tx);
            } else {
                let reader = StreamReader::try_new(BufReader::with_capacity(1 << 20, file), None)
                    .map_err(|e| local(&e))?;
                let batches = reader.map(|b| b.map_err(|e| e.to_string()));
                spawn_arrow(batches, 0, skip, batch_rows, max_body_bytes, shown, tx);
            }
            (ARROW_STREAM, None)
        }
        FileFormat::Jsonl => {
            let total = None;
            spawn_lines(file, skip, batch_rows, max_body_bytes, shown, tx);
            (JSON_LINES, total)
        }
    };
    Ok(Opened {
        content_type,
        total_rows,
        bodies: rx,
    })
}

/// Batches → bodies of at most `batch_rows` rows and `max_body_bytes` bytes. `first_row` is
/// the file row of the first batch's first row; `skip` more rows are dropped first.
fn spawn_arrow(
    batches: impl Iterator<Item = Result<RecordBatch, String>> + Send + 'static,
    first_row: u64,
    skip: u64,
    batch_rows: usize,
    max_body_bytes: usize,
    shown: String,
    tx: std::sync::mpsc::SyncSender<Result<Body, Failure>>,
) {
    std::thread::spawn(move || {
        let mut row = first_row;
        let mut to_skip = skip;
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0usize;
        let flush = |pending: &mut Vec<RecordBatch>, rows: &mut usize, row: &mut u64| {
            let batches = std::mem::take(pending);
            let result = bodies_of(&batches, *row, max_body_bytes);
            *row += *rows as u64;
            *rows = 0;
            result
        };
        for batch in batches {
            let mut batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(fail(EXIT_LOCAL, format!("{shown}: {e}"))));
                    return;
                }
            };
            if to_skip > 0 {
                let n = (to_skip as usize).min(batch.num_rows());
                batch = batch.slice(n, batch.num_rows() - n);
                to_skip -= n as u64;
                row += n as u64;
            }
            while batch.num_rows() > 0 {
                let take = (batch_rows - pending_rows).min(batch.num_rows());
                pending.push(batch.slice(0, take));
                pending_rows += take;
                batch = batch.slice(take, batch.num_rows() - take);
                if pending_rows == batch_rows {
                    for body in flush(&mut pending, &mut pending_rows, &mut row) {
                        if tx.send(body).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        if pending_rows > 0 {
            for body in flush(&mut pending, &mut pending_rows, &mut row) {
                if tx.send(body).is_err() {
                    return;
                }
            }
        }
    });
}

/// One IPC stream body of `batches`, split in halves while it is over `max_body_bytes`.
fn bodies_of(
    batches: &[RecordBatch],
    first_row: u64,
    max_body_bytes: usize,
) -> Vec<Result<Body, Failure>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows == 0 {
        return Vec::new();
    }
    let bytes = match ipc_stream(batches) {
        Ok(b) => b,
        Err(e) => return vec![Err(fail(EXIT_LOCAL, format!("encoding Arrow IPC: {e}")))],
    };
    if bytes.len() <= max_body_bytes {
        return vec![Ok(Body {
            bytes,
            rows,
            first_row,
            lines: Vec::new(),
        })];
    }
    if rows == 1 {
        return vec![Err(fail(
            EXIT_LOCAL,
            format!(
                "row {} alone is {} bytes of Arrow IPC, over the server's max_body_bytes = {max_body_bytes}",
                first_row + 1,
                bytes.len()
            ),
        ))];
    }
    // split the rows in two halves and try again
    let half = rows / 2;
    let (mut left, mut right) = (Vec::new(), Vec::new());
    let mut seen = 0usize;
    for b in batches {
        let n = b.num_rows();
        if seen + n <= half {
            left.push(b.clone());
        } else if seen >= half {
            right.push(b.clone());
        } else {
            let k = half - seen;
            left.push(b.slice(0, k));
            right.push(b.slice(k, n - k));
        }
        seen += n;
    }
    let mut out = bodies_of(&left, first_row, max_body_bytes);
    out.extend(bodies_of(&right, first_row + half as u64, max_body_bytes));
    out
}

fn ipc_stream(batches: &[RecordBatch]) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let schema = batches[0].schema();
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::get_array_memory_size).sum());
    {
        let mut w = StreamWriter::try_new(&mut out, &schema)?;
        for b in batches {
            w.write(b)?;
        }
        w.finish()?;
    }
    Ok(out)
}

/// JSON lines → bodies of at most `batch_rows` rows and `max_body_bytes` bytes, the first
/// `skip` rows (blank lines not counted) dropped.
fn spawn_lines(
    file: File,
    skip: u64,
    batch_rows: usize,
    max_body_bytes: usize,
    shown: String,
    tx: std::sync::mpsc::SyncSender<Result<Body, Failure>>,
) {
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut line = Vec::new();
        let mut line_no = 0u64;
        let mut row = 0u64;
        let mut body = Body {
            bytes: Vec::new(),
            rows: 0,
            first_row: skip,
            lines: Vec::new(),
        };
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(fail(EXIT_LOCAL, format!("{shown}: {e}"))));
                    return;
                }
            }
            line_no += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            row += 1;
            if row <= skip {
                continue;
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            if line.len() > max_body_bytes {
                let _ = tx.send(Err(fail(
                    EXIT_LOCAL,
                    format!(
                        "{shown}: line {line_no} is {} bytes, over the server's max_body_bytes = {max_body_bytes}",
                        line.len()
                    ),
                )));
                return;
            }
            if body.rows == batch_rows || body.bytes.len() + line.len() > max_body_bytes {
                let next = Body {
                    bytes: Vec::with_capacity(body.bytes.len()),
                    rows: 0,
                    first_row: body.first_row + body.rows as u64,
                    lines: Vec::new(),
                };
                if tx.send(Ok(std::mem::replace(&mut body, next))).is_err() {
                    return;
                }
            }
            body.bytes.extend_from_slice(&line);
            body.rows += 1;
            body.lines.push(line_no);
        }
        if body.rows > 0 {
            let _ = tx.send(Ok(body));
        }
    });
}
