//! The client subcommands of the `corecast` binary: `pub`, `sub` and `tail`, built on
//! [`corecast_net::client`], and `ingest` (files in large batches over HTTP).
//!
//! Every failure is one line on stderr naming the cause, and the exit status says which kind
//! ([`EXIT_CODES_HELP`]).

pub mod credentials;
pub mod ctl;
pub mod ingest;
pub mod input;
pub mod publish;
pub mod revoke;
pub mod secret;
pub mod sub;
pub mod tail;

use std::io::Write;
use std::process::ExitCode;

use corecast_net::client::{ClientError, Row};

/// `--ca FILE`: the roots of every `wss://` connection of this run. A bad file is a usage
/// error.
pub fn trust_ca(cmd: &str, ca: Option<&std::path::Path>) -> Result<(), ExitCode> {
    match ca {
        None => Ok(()),
        Some(path) => corecast_net::client::tls::use_ca_file(path).map_err(|e| usage(cmd, &e)),
    }
}

/// Success (including the server ending the stream normally with 1000/1001).
pub const EXIT_OK: u8 = 0;
/// The server refused the request or closed with an error (4400, 4404, 4416, 4429, a rejected row…).
pub const EXIT_REFUSED: u8 = 1;
/// Usage: bad arguments or URL.
pub const EXIT_USAGE: u8 = 2;
/// The connection failed or was lost (TCP, the HTTP upgrade, no close frame).
pub const EXIT_CONNECTION: u8 = 3;
/// A local file could not be used (the input of `pub`, a cursor file, stdout), or a line of
/// `pub`'s input is not a JSON object.
pub const EXIT_LOCAL: u8 = 4;
/// The server broke the protocol.
pub const EXIT_PROTOCOL: u8 = 5;
/// `corecast ctl`: the operation was accepted but had not finished when the wait ended.
pub const EXIT_PENDING: u8 = 6;

/// How the client subcommands take credentials, for their `--help` (a literal, for `concat!`).
#[macro_export]
macro_rules! credentials_help {
    () => {
        "Credentials (a broker with [auth]): ws://USER:PASSWORD@HOST:PORT/STREAM (percent-encode\n\
special characters; never shown in messages), or the environment: CORECAST_TOKEN (a bearer\n\
token or JWT), or CORECAST_USER and CORECAST_PASSWORD.\n\n"
    };
}

/// The exit-code table shown in every subcommand's `--help` (a literal, for `concat!`).
#[macro_export]
macro_rules! exit_codes_help {
    () => {
        "Exit codes:
  0  ok (for sub and tail, the server ending the stream normally, 1000/1001, is ok
     too; pub exits 0 once every input row was acknowledged)
  1  the server refused the request or closed with an error (unknown stream 4404,
     offset not replayable 4416, bad request 4400, too slow 4429, a rejected row, ...)
  2  usage: bad arguments, or a URL that is not ws://HOST:PORT/STREAM
  3  connection failed or lost (TCP, an HTTP refusal of the upgrade, no close frame)
  4  a local file could not be read or written (pub's input, the cursor file, stdout),
     or a line of pub's input is not a JSON object
  5  the server broke the protocol
  6  (ctl) the operation was accepted but had not finished when the wait ended"
    };
}

/// The exit-code table as a constant.
pub const EXIT_CODES_HELP: &str = exit_codes_help!();

/// The exit status for a client error.
pub fn exit_code(e: &ClientError) -> u8 {
    match e {
        ClientError::BadUrl(_) | ClientError::Usage(_) => EXIT_USAGE,
        // a refusal of who is asking (401, 403, 429) is the server refusing, not a lost line
        ClientError::HttpRefused {
            status: 401 | 403 | 429,
            ..
        } => EXIT_REFUSED,
        ClientError::Connect { .. }
        | ClientError::HttpRefused { .. }
        | ClientError::ConnectionLost(_) => EXIT_CONNECTION,
        ClientError::Cursor { .. } => EXIT_LOCAL,
        ClientError::Protocol(_) => EXIT_PROTOCOL,
        _ => EXIT_REFUSED,
    }
}

/// One line describing `e`, with the close code when there was one.
pub fn describe(e: &ClientError) -> String {
    let base = match e {
        ClientError::StreamNotFound { serves } if !serves.is_empty() => {
            let list: Vec<String> = serves.iter().map(|s| format!("{s:?}")).collect();
            format!("stream not found; the server serves [{}]", list.join(","))
        }
        other => other.to_string(),
    };
    let base = base.replace(['\r', '\n'], " ");
    let base = match hint(e) {
        Some(h) => format!("{base}; {h}"),
        None => base,
    };
    match e.close_code() {
        Some(code) if code >= 4000 => format!("{base} (close {code} {})", e.kind()),
        _ => base,
    }
}

/// What to do about a refusal whose cause is the stream's configuration, not the request.
fn hint(e: &ClientError) -> Option<String> {
    match e {
        ClientError::NotReplayable { why, fields } if why == "too_old" => {
            let max = fields.iter().find(|(k, _)| k == "max_replay").map(|f| f.1);
            Some(format!(
                "a subscribe replays at most max_replay{} rows: start later (--offset, or `corecast tail -n N`), read older rows from the stream's published table (`corecast sub --catch-up`) or through the pull API (GET /v1/streams/NAME/rows pages through all of them), or raise the stream's max_replay (in the server's config, or for a stream made over the control plane in its declaration: `corecast ctl replace`)",
                max.map(|m| format!(" = {m}")).unwrap_or_default()
            ))
        }
        ClientError::Connect { msg, .. } if msg.contains("UnknownIssuer") => Some(
            "the server's certificate is not signed by a CA this machine trusts: pass --ca FILE (the CA's PEM; docs/OPERATIONS.md, \"TLS\")".into(),
        ),
        ClientError::Connect { msg, .. } if msg.contains("InvalidContentType") => Some(
            "the port did not answer TLS: it probably speaks plaintext — use ws:// for it".into(),
        ),
        ClientError::HttpRefused { status: 401, .. } => Some(
            "give credentials: ws://USER:PASSWORD@HOST/… (percent-encoded), or CORECAST_TOKEN (a bearer token or JWT), or CORECAST_USER and CORECAST_PASSWORD".into(),
        ),
        ClientError::ExactlyOnceUnavailable { why } if why == "stream" => Some(
            "the stream must be declared with exactly_once = true (and durable) in the server's config".into(),
        ),
        _ => None,
    }
}

/// Prints `corecast CMD: <line>` and returns the matching exit status.
pub fn fail(cmd: &str, e: &ClientError) -> ExitCode {
    eprintln!("corecast {cmd}: {}", describe(e));
    ExitCode::from(exit_code(e))
}

/// Prints a usage error and returns [`EXIT_USAGE`].
pub fn usage(cmd: &str, msg: &str) -> ExitCode {
    eprintln!("corecast {cmd}: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// Writes one row as a line: the frame as received, or the row alone.
pub fn write_row(out: &mut impl Write, row: &Row, rows_only: bool) -> std::io::Result<()> {
    let text = if rows_only { row.row() } else { row.frame() };
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")
}

/// What a print loop ended with.
pub enum PrintEnd {
    /// The count was reached or the server ended the stream normally.
    Done,
    /// The server or the connection failed.
    Client(ClientError),
    /// Writing stdout failed (the consumer failed).
    Stdout(std::io::Error),
}

/// On SIGINT/SIGTERM: saves `shown` (the last offset printed and flushed) to the cursor file,
/// forward only, and exits 0 — or 4 when the save fails.
fn save_cursor_on_signal(
    cmd: &str,
    path: std::path::PathBuf,
    shown: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    let cmd = cmd.to_string();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let o = shown.load(std::sync::atomic::Ordering::SeqCst);
            if o > 0 {
                if let Err(e) = corecast_net::client::Cursor::save_forward(&path, o) {
                    eprintln!("corecast {cmd}: {e}");
                    std::process::exit(i32::from(EXIT_LOCAL));
                }
            }
            std::process::exit(i32::from(EXIT_OK));
        }
    });
}

/// The output `print_rows` holds before it flushes and moves the cursor past what it wrote,
/// below its 64 KiB buffer so that the buffer rarely flushes on its own.
const FLUSH_AT: usize = 48 * 1024;

/// Prints rows from `sub` until `count` rows, the end, or an error; saves the cursor unless
/// stdout failed. Returns the exit status.
pub fn print_rows(
    cmd: &str,
    mut sub: corecast_net::client::blocking::Subscription,
    count: Option<u64>,
    rows_only: bool,
) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut printed = 0u64;
    // Ctrl-C / SIGTERM end a live `sub` normally: save the cursor at the last row that reached
    // stdout (every row shown is consumed), then exit 0
    let shown = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(path) = sub.cursor_path() {
        save_cursor_on_signal(cmd, path, shown.clone());
    }
    // a row in `out`'s buffer is not shown yet: the cursor moves only past flushed rows (a
    // signal or a crash never leaves it past a row stdout did not get)
    sub.consume_explicitly();
    let end = loop {
        if count.is_some_and(|c| printed >= c) {
            break PrintEnd::Done;
        }
        match sub.next() {
            Ok(None) => {
                // a normal end (exit 0), but not a silent one: say what the server said
                if let Some(why) = sub.end_reason() {
                    eprintln!("corecast {cmd}: the server ended the stream: {why}");
                }
                break PrintEnd::Done;
            }
            Err(e) => break PrintEnd::Client(e),
            Ok(Some(row)) => {
                if let Err(e) = write_row(&mut out, &row, rows_only) {
                    break PrintEnd::Stdout(e);
                }
                printed += 1;
                let last = count.is_some_and(|c| printed >= c);
                // flushed before `out` would flush by itself (it cannot say which rows that
                // wrote): during a long replay the cursor then moves every 48 KiB of output
                if last || !sub.has_buffered() || out.buffer().len() >= FLUSH_AT {
                    if out.flush().is_err() {
                        break PrintEnd::Stdout(std::io::Error::other("stdout closed"));
                    }
                    if let Some(o) = row.offset {
                        shown.store(o, std::sync::atomic::Ordering::SeqCst);
                        if let Err(e) = sub.consumed(o) {
                            break PrintEnd::Client(e);
                        }
                    }
                }
            }
        }
    };
    let flushed = out.flush();
    match end {
        PrintEnd::Stdout(e) => {
            sub.abandon();
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return ExitCode::from(EXIT_OK);
            }
            eprintln!("corecast {cmd}: cannot write to stdout: {e}");
            ExitCode::from(EXIT_LOCAL)
        }
        _ if flushed.is_err() => {
            sub.abandon();
            ExitCode::from(EXIT_OK)
        }
        PrintEnd::Done => match sub.close() {
            Ok(()) => ExitCode::from(EXIT_OK),
            Err(e) => fail(cmd, &e),
        },
        PrintEnd::Client(e) => {
            // every row printed was consumed: keep the cursor, then report the server's error
            let _ = sub.close();
            fail(cmd, &e)
        }
    }
}
