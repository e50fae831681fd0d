//! `corecast ctl`: the control plane (`/control/v1`) from the command line.
//!
//! `list`, `get NAME`, `create NAME FILE` (a JSON or TOML declaration), `replace NAME FILE`,
//! `stop`/`start`/`retire NAME`, `migrate NAME --schema FILE`, `watch OPERATION`. Every mutation gets a fresh
//! `Idempotency-Key` and carries the stream's ETag (`If-None-Match: *` to create, `If-Match` read
//! by a `GET` first otherwise), and is retried with the same key after a lost connection or a
//! 503, so a retry never does the work twice. A mutation waits for its operation to finish unless
//! `--no-wait` is given. Credentials come from the environment ([`super::credentials`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    EXIT_CONNECTION, EXIT_LOCAL, EXIT_OK, EXIT_PENDING, EXIT_PROTOCOL, EXIT_REFUSED, EXIT_USAGE,
};

/// Attempts of one request when the connection fails or the broker answers 503.
const ATTEMPTS: u32 = 5;

/// How long `watch` and a waiting mutation wait for an operation.
const WATCH_TIMEOUT: Duration = Duration::from_secs(120);

/// `corecast ctl`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Credentials: CORECAST_TOKEN (bearer token or JWT), or CORECAST_USER and CORECAST_PASSWORD.\n\n  corecast ctl create orders orders.json\n  corecast ctl stop orders\n  corecast ctl list"
)]
pub struct CtlArgs {
    /// The broker: http://HOST:PORT.
    #[arg(long, default_value = "http://127.0.0.1:8765")]
    pub server: String,
    /// Answer at once with the operation's id instead of waiting for it to finish.
    #[arg(long)]
    pub no_wait: bool,
    /// What to do.
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

/// A `corecast ctl` command.
#[derive(clap::Subcommand, Debug)]
pub enum CtlCmd {
    /// Every stream, static and managed, in name order.
    List,
    /// One stream, as JSON.
    Get {
        /// The stream.
        name: String,
    },
    /// Create a stream from a declaration file (.json, or .toml whose `schema` may name a JSON
    /// Schema file).
    Create {
        /// The stream.
        name: String,
        /// The declaration.
        file: PathBuf,
    },
    /// Replace a stream's declaration (its connections reopen with the new one).
    Replace {
        /// The stream.
        name: String,
        /// The declaration.
        file: PathBuf,
    },
    /// Stop a stream: its connections close with 1001, its data stays.
    Stop {
        /// The stream.
        name: String,
    },
    /// Start a stopped stream again.
    Start {
        /// The stream.
        name: String,
    },
    /// Retire a stream (final): publishers get 4410, subscribers still read it.
    Retire {
        /// The stream.
        name: String,
    },
    /// Migrate a stream to a new schema: its log is sealed and published, and a new log starts
    /// at its end offset (the seam). A serving stream's connections close with 1001 and
    /// reconnect once it serves again.
    Migrate {
        /// The stream.
        name: String,
        /// The new JSON Schema (a .json file).
        #[arg(long)]
        schema: PathBuf,
    },
    /// Wait for an operation to finish, printing each state it passes through.
    Watch {
        /// The operation's id.
        operation: String,
    },
}

/// A failure, with its exit code.
struct Fail(u8, String);

/// One answer.
struct Answer {
    status: u16,
    etag: Option<String>,
    body: Value,
}

impl Answer {
    fn message(&self) -> String {
        let e = &self.body["error"];
        match (e["code"].as_str(), e["message"].as_str()) {
            (Some(c), Some(m)) => format!("HTTP {} {c}: {m}", self.status),
            _ => format!("HTTP {}", self.status),
        }
    }
}

struct Broker {
    addr: SocketAddr,
    host: String,
    authorization: Option<String>,
}

impl Broker {
    fn open(server: &str) -> Result<Broker, Fail> {
        let usage = || {
            Fail(
                EXIT_USAGE,
                format!(
                    "{:?} is not http://HOST:PORT (credentials go in CORECAST_TOKEN or CORECAST_USER/CORECAST_PASSWORD, never in the URL)",
                    crate::config::without_userinfo(server)
                ),
            )
        };
        let rest = server.strip_prefix("http://").ok_or_else(usage)?;
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty() || host.contains('@') {
            return Err(usage());
        }
        let hp = if host.contains(':') && !host.ends_with(']') {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        let addr = hp
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| Fail(EXIT_CONNECTION, format!("cannot resolve {hp}")))?;
        Ok(Broker {
            addr,
            host: hp,
            authorization: super::credentials::authorization(),
        })
    }

    fn once(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> std::io::Result<Vec<u8>> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nuser-agent: corecast-ctl\r\nconnection: close\r\n",
            self.host
        );
        if let Some(a) = &self.authorization {
            head.push_str(&format!("authorization: {a}\r\n"));
        }
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if method == "PUT" || method == "POST" {
            head.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        head.push_str(body);
        let mut c = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))?;
        c.set_read_timeout(Some(Duration::from_secs(60)))?;
        c.write_all(head.as_bytes())?;
        let mut a = Vec::new();
        c.read_to_end(&mut a)?;
        Ok(a)
    }

    /// One request, retried (same headers, so the same idempotency key) after a lost
    /// connection or a 503.
    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Answer, Fail> {
        let mut wait = Duration::from_millis(200);
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            match self.once(method, path, headers, body) {
                Ok(raw) => {
                    let answer = parse(&raw).ok_or_else(|| {
                        Fail(
                            EXIT_PROTOCOL,
                            format!("{} sent no complete HTTP answer", self.host),
                        )
                    })?;
                    if answer.status != 503 || attempt == ATTEMPTS {
                        return Ok(answer);
                    }
                    last = answer.message();
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(3));
        }
        Err(Fail(
            EXIT_CONNECTION,
            format!("{}: {last} (after {ATTEMPTS} attempts)", self.host),
        ))
    }
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let etag = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("etag"))
        .map(|(_, v)| v.trim().to_string());
    let body = serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null);
    Some(Answer { status, etag, body })
}

/// A declaration file as the JSON the API takes: `.toml` is converted (a string `schema` names a
/// JSON Schema file, relative to the declaration), anything else is read as JSON.
fn declaration(file: &Path) -> Result<String, Fail> {
    let local = |m: String| Fail(EXIT_LOCAL, m);
    let text = std::fs::read_to_string(file)
        .map_err(|e| local(format!("cannot read {}: {e}", file.display())))?;
    if file.extension().is_some_and(|e| e == "toml") {
        let t: toml::Value = toml::from_str(&text)
            .map_err(|e| local(format!("{}: not TOML: {e}", file.display())))?;
        let mut v =
            serde_json::to_value(t).map_err(|e| local(format!("{}: {e}", file.display())))?;
        if let Some(Value::String(p)) = v.get("schema").cloned() {
            let sp = file.parent().unwrap_or(Path::new(".")).join(&p);
            let schema = std::fs::read_to_string(&sp)
                .map_err(|e| local(format!("cannot read the schema {}: {e}", sp.display())))?;
            v["schema"] = serde_json::from_str(&schema)
                .map_err(|e| local(format!("{}: not JSON: {e}", sp.display())))?;
        } else if v.get("schema").is_none() {
            // TOML has no null: a declaration without `schema` is schema-less
            v["schema"] = Value::Null;
        }
        return Ok(v.to_string());
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| local(format!("{}: not JSON: {e}", file.display())))?;
    Ok(v.to_string())
}

fn new_key(what: &str) -> String {
    format!("ctl-{what}-{}", uuid::Uuid::new_v4())
}

fn stream_path(name: &str) -> String {
    format!("/control/v1/streams/{name}")
}

/// Waits for operation `id`, printing each new state; the final one.
fn watch(b: &Broker, id: &str) -> Result<Value, Fail> {
    let deadline = Instant::now() + WATCH_TIMEOUT;
    let mut shown = String::new();
    loop {
        let a = b.call("GET", &format!("/control/v1/operations/{id}"), &[], "")?;
        if a.status != 200 {
            return Err(Fail(EXIT_REFUSED, a.message()));
        }
        let state = a.body["state"].as_str().unwrap_or("").to_string();
        if state != shown {
            println!("operation {id}: {state}");
            shown = state.clone();
        }
        match state.as_str() {
            "succeeded" => return Ok(a.body),
            "failed" => {
                let m = a.body["error"]["message"].as_str().unwrap_or("no message");
                return Err(Fail(EXIT_REFUSED, format!("operation {id} failed: {m}")));
            }
            _ => {}
        }
        if Instant::now() > deadline {
            return Err(Fail(
                EXIT_PENDING,
                format!(
                    "operation {id} is still {state} after {} s (watch it with `corecast ctl watch {id}`)",
                    WATCH_TIMEOUT.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A mutation's answer: 200 (already so) or 202 (then waited for unless `no_wait`).
fn mutated(b: &Broker, a: Answer, what: &str, no_wait: bool) -> Result<(), Fail> {
    match a.status {
        200 => {
            println!("{what}: already so (revision {})", a.body["revision"]);
            Ok(())
        }
        202 => {
            let id = a.body["operation_id"].as_str().unwrap_or("").to_string();
            println!(
                "{what}: accepted, operation {id} (revision {})",
                a.body["revision"]
            );
            if !no_wait {
                watch(b, &id)?;
            }
            Ok(())
        }
        _ => Err(Fail(EXIT_REFUSED, format!("{what}: {}", a.message()))),
    }
}

fn etag_of(b: &Broker, name: &str) -> Result<String, Fail> {
    let a = b.call("GET", &stream_path(name), &[], "")?;
    match (a.status, &a.etag) {
        (200, Some(e)) => Ok(e.clone()),
        _ => Err(Fail(EXIT_REFUSED, format!("{name}: {}", a.message()))),
    }
}

fn run_cmd(args: &CtlArgs) -> Result<(), Fail> {
    let name = match &args.cmd {
        CtlCmd::Get { name }
        | CtlCmd::Create { name, .. }
        | CtlCmd::Replace { name, .. }
        | CtlCmd::Stop { name }
        | CtlCmd::Start { name }
        | CtlCmd::Retire { name }
        | CtlCmd::Migrate { name, .. } => Some(name),
        CtlCmd::List | CtlCmd::Watch { .. } => None,
    };
    if let Some(name) = name.filter(|n| !crate::config::valid_stream_name(n)) {
        return Err(Fail(
            EXIT_USAGE,
            format!(
                "{name:?} is not a stream name: 1 to 128 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
            ),
        ));
    }
    let b = Broker::open(&args.server)?;
    match &args.cmd {
        CtlCmd::List => {
            let mut cursor: Option<String> = None;
            // the header once the first page is in: a refusal prints nothing on stdout
            let mut header = true;
            loop {
                let path = match &cursor {
                    None => "/control/v1/streams?limit=1000".to_string(),
                    Some(c) => format!("/control/v1/streams?limit=1000&cursor={c}"),
                };
                let a = b.call("GET", &path, &[], "")?;
                if a.status != 200 {
                    return Err(Fail(EXIT_REFUSED, a.message()));
                }
                if std::mem::take(&mut header) {
                    println!(
                        "{:<32} {:<8} {:<8} {:<8} {:>8}",
                        "NAME", "ORIGIN", "DESIRED", "OBSERVED", "REVISION"
                    );
                }
                for s in a.body["streams"].as_array().into_iter().flatten() {
                    println!(
                        "{:<32} {:<8} {:<8} {:<8} {:>8}",
                        s["name"].as_str().unwrap_or(""),
                        s["origin"].as_str().unwrap_or(""),
                        s["desired"].as_str().unwrap_or(""),
                        s["observed"].as_str().unwrap_or(""),
                        s["revision"]
                    );
                }
                match a.body["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_string()),
                    None => return Ok(()),
                }
            }
        }
        CtlCmd::Get { name } => {
            let a = b.call("GET", &stream_path(name), &[], "")?;
            if a.status != 200 {
                return Err(Fail(EXIT_REFUSED, format!("{name}: {}", a.message())));
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&a.body).unwrap_or_default()
            );
            Ok(())
        }
        CtlCmd::Create { name, file } => {
            let body = declaration(file)?;
            let key = new_key("create");
            let a = b.call(
                "PUT",
                &stream_path(name),
                &[("idempotency-key", &key), ("if-none-match", "*")],
                &body,
            )?;
            mutated(&b, a, &format!("create {name}"), args.no_wait)
        }
        CtlCmd::Replace { name, file } => {
            let body = declaration(file)?;
            let etag = etag_of(&b, name)?;
            let key = new_key("replace");
            let a = b.call(
                "PUT",
                &stream_path(name),
                &[("idempotency-key", &key), ("if-match", &etag)],
                &body,
            )?;
            mutated(&b, a, &format!("replace {name}"), args.no_wait)
        }
        CtlCmd::Stop { name } | CtlCmd::Start { name } | CtlCmd::Retire { name } => {
            let (verb, state) = match &args.cmd {
                CtlCmd::Stop { .. } => ("stop", "stopped"),
                CtlCmd::Start { .. } => ("start", "serving"),
                _ => ("retire", "retired"),
            };
            let etag = etag_of(&b, name)?;
            let key = new_key(verb);
            let a = b.call(
                "PUT",
                &format!("{}/desired", stream_path(name)),
                &[("idempotency-key", &key), ("if-match", &etag)],
                &json!({ "state": state }).to_string(),
            )?;
            mutated(&b, a, &format!("{verb} {name}"), args.no_wait)
        }
        CtlCmd::Migrate { name, schema } => {
            let local = |m: String| Fail(EXIT_LOCAL, m);
            let text = std::fs::read_to_string(schema)
                .map_err(|e| local(format!("cannot read {}: {e}", schema.display())))?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| local(format!("{}: not JSON: {e}", schema.display())))?;
            let etag = etag_of(&b, name)?;
            let key = new_key("migrate");
            let a = b.call(
                "POST",
                &format!("{}/migrations", stream_path(name)),
                &[("idempotency-key", &key), ("if-match", &etag)],
                &json!({ "schema": v }).to_string(),
            )?;
            mutated(&b, a, &format!("migrate {name}"), args.no_wait)
        }
        CtlCmd::Watch { operation } => watch(&b, operation).map(|_| ()),
    }
}

/// Runs `corecast ctl`.
pub fn run(args: CtlArgs) -> ExitCode {
    match run_cmd(&args) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(Fail(code, m)) => {
            eprintln!("corecast: {m}");
            ExitCode::from(code)
        }
    }
}
