//! `corecast pub URL [--file F.jsonl | -] [--batch N] [--rate R] [--publisher ID]`.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use corecast_net::client::{blocking, ClientError, Pending, PublishOptions};
use corecast_storage::json::JsonError;

use super::input::{InputLines, Next};

/// How long `pub` waits for the next input line before it treats the input as paused and sends
/// the rows it holds (a batch not yet full): brief, so a file's batches stay full.
const INPUT_GRACE: Duration = Duration::from_millis(5);
/// How long `pub` then waits, answering the server's pings, before looking at the input again.
const INPUT_POLL: Duration = Duration::from_millis(20);

/// Arguments of `corecast pub`.
#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Publishes JSON lines, one row object per line (blank lines are skipped), pipelined: up to\n",
    "--window frames of --batch rows each are in flight at once. Each line must be a JSON object\n",
    "the stream's schema accepts; the server encodes it canonically. Stops at the first refused\n",
    "frame and names its lines. With --publisher the publish is exactly-once: line k carries seq k,\n",
    "and a rerun skips the lines the server already holds (the greeting's mark), so rerunning an\n",
    "interrupted publish never duplicates or loses a row.\n\n",
    "Examples:\n",
    "  corecast pub ws://127.0.0.1:8765/trades --file trades.jsonl\n",
    "  cat trades.jsonl | corecast pub ws://127.0.0.1:8765/trades --batch 500\n",
    "  corecast pub ws://127.0.0.1:8765/trades --file trades.jsonl --rate 1000   # 1000 rows/s\n",
    "  corecast pub ws://127.0.0.1:8765/orders --file orders.jsonl --publisher loader-1\n\n",
    crate::credentials_help!(),
        crate::exit_codes_help!()
))]
pub struct PubArgs {
    /// ws://HOST:PORT/STREAM or wss://HOST:PORT/STREAM (TLS)
    pub url: String,
    /// For wss://: trust the CA certificates in this PEM file instead of the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// The JSON-lines file to publish; `-` (the default) reads stdin.
    #[arg(long, short = 'f', value_name = "F.jsonl")]
    pub file: Option<PathBuf>,
    /// Rows per frame (one transaction each). 1 sends plain row frames.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    /// Limit the rate to R rows per second.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Publish exactly-once as publisher ID (the stream must have exactly_once on).
    #[arg(long, value_name = "ID")]
    pub publisher: Option<String>,
    /// Frames in flight at once.
    #[arg(long, value_name = "W", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub window: u64,
    /// No progress line and no summary on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

struct InFlight {
    pending: Pending,
    first_line: u64,
    last_line: u64,
}

struct Progress {
    enabled: bool,
    start: Instant,
    last_draw: Instant,
    total_bytes: Option<u64>,
}

impl Progress {
    fn draw(&mut self, rows: u64, bytes: u64, force: bool) {
        if !self.enabled || (!force && self.last_draw.elapsed() < Duration::from_millis(200)) {
            return;
        }
        self.last_draw = Instant::now();
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        let pct = match self.total_bytes {
            Some(t) if t > 0 => {
                let p = (bytes as f64 / t as f64).min(1.0);
                let filled = (p * 30.0) as usize;
                format!(
                    "[{}{}] {:5.1}%  ",
                    "#".repeat(filled),
                    "-".repeat(30 - filled),
                    p * 100.0
                )
            }
            _ => String::new(),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{pct}{rows} rows  {:.0} rows/s   ",
            rows as f64 / secs
        );
        let _ = err.flush();
    }

    fn finish(&mut self, rows: u64, bytes: u64) {
        if self.enabled {
            self.draw(rows, bytes, true);
            eprintln!();
        }
    }
}

fn line_range(a: u64, b: u64) -> String {
    if a == b {
        format!("line {a}")
    } else {
        format!("lines {a}-{b}")
    }
}

/// Runs `corecast pub`.
pub fn run(args: PubArgs) -> ExitCode {
    if let Err(e) = corecast_net::client::Target::parse(&args.url) {
        return super::fail("pub", &e);
    }
    if let Err(code) = super::trust_ca("pub", args.ca.as_deref()) {
        return code;
    }
    if let Some(r) = args.rate {
        // at least one row a day: slower rates cannot be paced (and overflow a Duration)
        if !(r.is_finite() && r >= 1.0 / 86_400.0) {
            return super::usage(
                "pub",
                &format!("--rate {r} must be a number of rows per second ≥ 1/86400"),
            );
        }
    }
    let from_stdin = args.file.as_ref().is_none_or(|f| f.as_os_str() == "-");
    let (input, total_bytes): (Box<dyn BufRead + Send>, Option<u64>) = if from_stdin {
        (Box::new(std::io::BufReader::new(std::io::stdin())), None)
    } else {
        let path = args.file.as_ref().expect("file");
        match std::fs::File::open(path) {
            Ok(f) => {
                let len = f.metadata().ok().map(|m| m.len());
                (Box::new(std::io::BufReader::with_capacity(1 << 20, f)), len)
            }
            Err(e) => {
                eprintln!("corecast pub: cannot read {}: {e}", path.display());
                return ExitCode::from(super::EXIT_LOCAL);
            }
        }
    };
    let opts = PublishOptions {
        publisher: args.publisher.clone(),
        window: args.window as usize,
        authorization: super::credentials::for_url(&args.url),
    };
    let mut publisher = match blocking::publish(&args.url, opts) {
        Ok(p) => p,
        Err(e) => return super::fail("pub", &e),
    };
    let skip = publisher.mark().map(|m| m.last_seq).unwrap_or(0);
    if skip > 0 && !args.quiet {
        eprintln!(
            "corecast pub: publisher {:?} already landed seq {skip}; resuming after it",
            args.publisher.as_deref().unwrap_or("")
        );
    }
    let mut progress = Progress {
        enabled: !args.quiet && !from_stdin && std::io::stderr().is_terminal(),
        start: Instant::now(),
        last_draw: Instant::now(),
        total_bytes,
    };
    let batch_max = args.batch as usize;
    let mut batch = Batch::new(batch_max);
    let mut rows_seen = 0u64; // non-blank lines read (= seq of the last one)
    let mut bytes_read = 0u64;
    let mut tally = Tally::default();
    let start = Instant::now();

    // the input line that stopped the publish (not a JSON object); nothing from it on is sent
    let mut bad_line: Option<u64> = None;
    let lines = match InputLines::spawn(input) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("corecast pub: cannot start the input reader: {e}");
            return ExitCode::from(super::EXIT_LOCAL);
        }
    };
    let mut line_no = 0u64;
    loop {
        if tally.failure.is_some() {
            break;
        }
        let line = match lines.next_within(INPUT_GRACE) {
            Next::Line(l) => l,
            Next::End => break,
            Next::Failed(e) => {
                tally.failure = Some((
                    format!("cannot read input at line {}: {e}", line_no + 1),
                    super::EXIT_LOCAL,
                ));
                break;
            }
            Next::Paused => {
                // the input is quiet (a pipe): send the rows read so far rather than hold
                // them, and wait for more answering the server's keepalive pings
                if let Err(e) = batch
                    .send(&mut publisher, &mut tally)
                    .and_then(|()| publisher.idle(INPUT_POLL))
                {
                    tally.fail_with(&e);
                    break;
                }
                tally.settle();
                progress.draw(batch.rows_sent, bytes_read, false);
                continue;
            }
        };
        line_no += 1;
        bytes_read += line.len() as u64 + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        rows_seen += 1;
        if rows_seen <= skip {
            continue;
        }
        match corecast_storage::json::parse(trimmed.as_bytes()) {
            Ok(v) if sonic_rs::JsonValueTrait::is_object(&v) => {}
            Ok(_) => {
                tally.failure = Some((
                    format!("line {line_no}: not a JSON object"),
                    super::EXIT_LOCAL,
                ));
                bad_line = Some(line_no);
                break;
            }
            Err(e) => {
                // the parser saw this line alone: its own line number is always 1
                let what = match e {
                    JsonError::Syntax { reason, column, .. } => {
                        format!("line {line_no}, column {column}: not JSON: {reason}")
                    }
                    other => format!("line {line_no}: not JSON: {other}"),
                };
                tally.failure = Some((what, super::EXIT_LOCAL));
                bad_line = Some(line_no);
                break;
            }
        }
        let len = trimmed.len();
        let mut owned = line;
        owned.truncate(owned.trim_end().len());
        let lead = owned.len() - owned.trim_start().len();
        owned.drain(..lead);
        debug_assert_eq!(owned.len(), len);
        batch.push(owned, line_no);
        if batch.is_full() {
            if let Err(e) = batch.send(&mut publisher, &mut tally) {
                tally.fail_with(&e);
                break;
            }
            tally.settle();
            let rows_sent = batch.rows_sent;
            progress.draw(rows_sent, bytes_read, false);
            if let Some(rate) = args.rate {
                let due =
                    Duration::try_from_secs_f64(rows_sent as f64 / rate).unwrap_or(Duration::MAX);
                let elapsed = start.elapsed();
                if due > elapsed {
                    // not a plain sleep: pings from the server's keepalive are answered
                    if let Err(e) = publisher.idle(due - elapsed) {
                        tally.fail_with(&e);
                        break;
                    }
                    tally.settle();
                }
            }
        }
    }
    // the rows before a bad line go out too, so "everything before line N landed" holds
    if tally.failure.is_none() || bad_line.is_some() {
        if let Err(e) = batch.send(&mut publisher, &mut tally) {
            tally.failure = Some((super::describe(&e), super::exit_code(&e)));
            bad_line = None;
        }
    }
    let flushed = publisher.flush();
    tally.settle();
    if let (Err(e), None) = (&flushed, &tally.failure) {
        tally.failure = Some((super::describe(e), super::exit_code(e)));
    }
    if bad_line.is_some() {
        if let Some(refusal) = tally.refusal.clone() {
            // a row before the bad line was refused: that is the first thing to fix
            tally.failure = Some(refusal);
            bad_line = None;
        } else if flushed.is_err() {
            // the rows before the bad line may not all have landed: the account below applies
            bad_line = None;
        }
    }
    progress.finish(tally.rows_acked, bytes_read);
    let rows_acked = tally.rows_acked;
    let _ = publisher.close();
    let secs = start.elapsed().as_secs_f64();
    if let (Some((msg, code)), Some(line), Ok(())) = (&tally.failure, bad_line, &flushed) {
        // a bad input line: every frame before it was answered by the flush above
        eprintln!(
            "corecast pub: {msg}. Nothing from line {line} on was sent; the {rows_acked} row{} before it {} acknowledged{}",
            if rows_acked == 1 { "" } else { "s" },
            if rows_acked == 1 { "was" } else { "were" },
            if args.publisher.is_some() {
                "; fix the line and rerun the same command with the same --publisher: the server skips rows that already landed".to_string()
            } else {
                format!("; fix the line and publish from it on (e.g. `tail -n +{line} FILE | corecast pub URL`)")
            }
        );
        return ExitCode::from(*code);
    }
    if let Some((msg, code)) = tally.failure {
        // what landed: before a refused frame exactly (frames settle in order); after it,
        // frames pipelined behind may have landed too
        let landed = match tally.acked_before_refusal {
            Some(before) if tally.refusal.as_ref().is_some_and(|r| r.0 == msg) => {
                let after = rows_acked - before;
                format!(
                    "{before} row{} before it {} acknowledged; {after} row{} sent after it landed too",
                    if before == 1 { "" } else { "s" },
                    if before == 1 { "was" } else { "were" },
                    if after == 1 { "" } else { "s" },
                )
            }
            _ => match tally.unanswered_lines {
                Some((first, last)) => format!(
                    "{rows_acked} row{} acknowledged; the {} row{} sent after {} (lines {first}-{last}) got no answer and may or may not have landed: read the stream's end_offset (GET /stats) before publishing from line {first} again",
                    if rows_acked == 1 { " was" } else { "s were" },
                    tally.unanswered_rows,
                    if tally.unanswered_rows == 1 { "" } else { "s" },
                    if rows_acked == 1 { "it" } else { "them" },
                ),
                None => format!(
                    "{rows_acked} row{} acknowledged and none was left unanswered",
                    if rows_acked == 1 { " was" } else { "s were" },
                ),
            },
        };
        eprintln!(
            "corecast pub: {msg}. {landed}{}",
            if args.publisher.is_some() {
                "; rerun the same command with the same --publisher: the server skips rows that already landed"
            } else {
                "; to be able to resume a file without duplicates, publish with --publisher ID to a stream declared with exactly_once = true (the server then skips rows that already landed)"
            }
        );
        return ExitCode::from(code);
    }
    if !args.quiet {
        let offsets = match (tally.first_offset, tally.last_offset) {
            (Some(a), Some(b)) => format!(", offsets {a}..={b}"),
            _ => String::new(),
        };
        let rate = rows_acked as f64 / secs.max(1e-6);
        // slow publishes (--rate 0.5) keep their digits; fast ones print whole rows
        let rate = if rate < 10.0 {
            format!("{rate:.2}")
        } else {
            format!("{rate:.0}")
        };
        eprintln!(
            "corecast pub: published {rows_acked} row{} to {}{offsets} in {secs:.2}s ({rate} rows/s)",
            if rows_acked == 1 { "" } else { "s" },
            corecast_net::client::redact_userinfo(&args.url),
        );
    }
    ExitCode::from(super::EXIT_OK)
}

/// What the frames sent so far came to: the unanswered ones in order, the rows acknowledged, the
/// first and last offsets, and the first refusal.
/// The rows read and not sent yet: one publish frame's worth at most.
struct Batch {
    rows: Vec<String>,
    /// Rows per frame (`--batch`).
    max: usize,
    /// Input lines of its first and last row.
    first_line: u64,
    last_line: u64,
    /// Rows sent so far, all batches.
    rows_sent: u64,
}

impl Batch {
    fn new(max: usize) -> Batch {
        Batch {
            rows: Vec::with_capacity(max),
            max,
            first_line: 0,
            last_line: 0,
            rows_sent: 0,
        }
    }

    /// Adds the row of input line `line`.
    fn push(&mut self, row: String, line: u64) {
        if self.rows.is_empty() {
            self.first_line = line;
        }
        self.last_line = line;
        self.rows.push(row);
    }

    fn is_full(&self) -> bool {
        self.rows.len() >= self.max
    }

    /// Pipelines the rows held as one frame (a plain row frame with `--batch 1`), noting it in
    /// `tally` for its answer; nothing to do when none is held.
    fn send(
        &mut self,
        publisher: &mut blocking::Publisher,
        tally: &mut Tally,
    ) -> Result<(), ClientError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let pending = if self.max == 1 {
            publisher.submit(&self.rows[0])?
        } else {
            publisher.submit_batch(&self.rows)?
        };
        tally.in_flight.push_back(InFlight {
            pending,
            first_line: self.first_line,
            last_line: self.last_line,
        });
        self.rows_sent += self.rows.len() as u64;
        self.rows.clear();
        Ok(())
    }
}

#[derive(Default)]
struct Tally {
    in_flight: VecDeque<InFlight>,
    rows_acked: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
    failure: Option<(String, u8)>,
    /// The first frame the server refused (also `failure`, unless a local failure came first).
    refusal: Option<(String, u8)>,
    /// Rows acknowledged before the first refused frame.
    acked_before_refusal: Option<u64>,
    /// Frames that got no answer because the connection ended (lost, or closed by the server
    /// before answering): their rows and input lines. They may or may not have landed.
    unanswered_rows: u64,
    unanswered_lines: Option<(u64, u64)>,
}

impl Tally {
    /// Settles what was answered, then records `e` as the failure unless one came first.
    fn fail_with(&mut self, e: &ClientError) {
        self.settle();
        if self.failure.is_none() {
            self.failure = Some((super::describe(e), super::exit_code(e)));
        }
    }

    /// Settles every answered frame at the front; records the first refusal.
    fn settle(&mut self) {
        while self.in_flight.front().is_some_and(|f| f.pending.is_done()) {
            let f = self.in_flight.pop_front().expect("front");
            match f.pending.result().expect("done") {
                Ok(offsets) => {
                    self.rows_acked += offsets.len() as u64;
                    if let Some(Some(o)) = offsets.first() {
                        self.first_offset.get_or_insert(*o);
                    }
                    if let Some(Some(o)) = offsets.last() {
                        self.last_offset = Some(*o);
                    }
                }
                Err(e @ (ClientError::ConnectionLost(_) | ClientError::Closed { .. })) => {
                    // not an answer: the connection ended with this frame in flight
                    self.unanswered_rows += f.last_line - f.first_line + 1;
                    let lines = self
                        .unanswered_lines
                        .get_or_insert((f.first_line, f.last_line));
                    lines.1 = f.last_line;
                    if self.failure.is_none() {
                        self.failure = Some((super::describe(&e), super::exit_code(&e)));
                    }
                }
                Err(e) => {
                    if self.refusal.is_none() {
                        self.acked_before_refusal = Some(self.rows_acked);
                        let what = line_range(f.first_line, f.last_line);
                        self.refusal = Some((
                            format!("{what}: {}", super::describe(&e)),
                            super::exit_code(&e),
                        ));
                    }
                    if self.failure.is_none() {
                        self.failure = self.refusal.clone();
                    }
                }
            }
        }
    }
}
