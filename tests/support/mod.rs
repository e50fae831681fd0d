//! Shared harness for the black-box tests: start the real `corecast` binary on a free loopback
//! port with a temporary data directory, and talk to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The trade schema of `../shared/tools/anchor/trade.schema.json`.
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// Path of the `corecast` binary cargo built for this test run.
pub fn corecast_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corecast"))
}

/// The `loadgen` binary beside this build's `corecast` (so `CARGO_TARGET_DIR` is honoured).
/// `cargo build -p corecast-loadgen` runs once per test process first: `cargo test` builds only
/// the binaries of the package under test, and a binary left from an older tree would test old
/// code.
pub fn loadgen_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["build", "-p", "corecast-loadgen"])
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
                .status()
                .expect("run cargo build -p corecast-loadgen");
            assert!(st.success(), "cargo build -p corecast-loadgen failed");
            let bin = corecast_bin()
                .parent()
                .expect("the binary's folder")
                .join("loadgen");
            assert!(bin.exists(), "no loadgen binary at {}", bin.display());
            bin
        })
        .clone()
}

/// A running server. Killed (SIGKILL) on drop unless stopped first.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub data: PathBuf,
    pub config: Option<PathBuf>,
    stderr_log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

/// A test's scratch directory plus a config file written into it.
pub struct Setup {
    pub tmp: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            tmp: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Writes `corecast.toml` with `body` (stream declarations); `schema = "trade"` may be
    /// written as `schema = "@trade"` to point at the shared trade schema.
    pub fn config(&self, body: &str) -> PathBuf {
        let trade = shared_dir().join("tools/anchor/trade.schema.json");
        let data = shared_dir().join("data");
        let body = body
            .replace("@trade", &trade.display().to_string())
            .replace("@data", &data.display().to_string());
        let p = self.tmp.path().join("corecast.toml");
        std::fs::write(&p, body).expect("write config");
        p
    }

    pub fn data(&self) -> PathBuf {
        self.tmp.path().join("data")
    }
}

impl Server {
    /// Starts `corecast serve --config CONFIG --data DATA --listen 127.0.0.1:0` plus `extra` args
    /// and waits for its "listening on" line.
    pub fn start(config: Option<&Path>, data: &Path, extra: &[&str]) -> Server {
        launch(config, data, "127.0.0.1:0", extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Server::start`] with no extra args, but the server's stderr goes to `stderr_log`
    /// (e.g. outside a FUSE mount that holds `data`); `Err` with it when the server exits before
    /// listening.
    pub fn start_logged(
        config: Option<&Path>,
        data: &Path,
        stderr_log: &Path,
    ) -> Result<Server, String> {
        launch_to(
            config,
            data,
            "127.0.0.1:0",
            &[],
            stderr_log.to_path_buf(),
            &[],
        )
    }

    /// Like [`Server::start`] with no extra args, with `env` set in the server's environment.
    pub fn start_env(config: Option<&Path>, data: &Path, env: &[(&str, &str)]) -> Server {
        let stderr_log = data.with_extension(format!("stderr.{}.log", std::process::id()));
        launch_to(config, data, "127.0.0.1:0", &[], stderr_log, env)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `ws://ADDR/PATH_AND_QUERY`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!(
            "ws://{}/{}",
            self.addr,
            path_and_query.trim_start_matches('/')
        )
    }

    /// Sends SIGTERM and waits for exit; returns the exit status code.
    pub fn stop(mut self) -> Option<i32> {
        unsafe_free_sigterm(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "corecast did not exit within 30 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, then wait.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the server exits by itself within `timeout` (an abort a test provoked).
    pub fn exits_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.child.try_wait().expect("wait").is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// What the server logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// A raw TCP connection to the server.
    pub fn tcp(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        s.set_nodelay(true).ok();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM via the `kill` command (the tests stay free of unsafe code).
fn unsafe_free_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

pub type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

/// Connects with tungstenite; returns the socket (the greeting is not read).
pub fn ws_connect(url: &str) -> Ws {
    let (ws, _resp) = tungstenite::connect(url).expect("ws connect");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    }
    ws
}

/// Reads the next text message.
pub fn recv_text(ws: &mut Ws) -> String {
    loop {
        match ws.read().expect("ws read") {
            tungstenite::Message::Text(t) => return t.to_string(),
            tungstenite::Message::Binary(b) => return String::from_utf8(b.to_vec()).expect("utf8"),
            tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) => continue,
            tungstenite::Message::Close(c) => panic!("unexpected close: {c:?}"),
            tungstenite::Message::Frame(_) => continue,
        }
    }
}

/// Reads until the server closes; returns (code, reason) of its close frame.
pub fn recv_close(ws: &mut Ws) -> (u16, String) {
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Close(Some(c))) => {
                return (u16::from(c.code), c.reason.to_string())
            }
            Ok(tungstenite::Message::Close(None)) => return (1005, String::new()),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// A trade row as JSON text.
pub fn trade(trade_id: i64, symbol: &str) -> String {
    format!(
        r#"{{"event_ts":{},"price":85566.5,"amount":0.015,"side":{},"symbol":"{}","trade_id":{}}}"#,
        1_700_000_000_000_000i64 + trade_id,
        trade_id % 2,
        symbol,
        trade_id
    )
}

/// What a finished `corecast` client command left: its exit code and output.
#[derive(Debug)]
pub struct CliOut {
    /// The exit code (`None` when killed by a signal, e.g. at the timeout).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOut {
    /// stdout's lines.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

/// Runs `corecast ARGS` with `stdin` (empty when `None`), killing it after `timeout`.
pub fn corecast_run(args: &[&str], stdin: Option<&[u8]>, timeout: Duration) -> CliOut {
    let mut cmd = Command::new(corecast_bin());
    cmd.args(args)
        .env("CORECAST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn corecast");
    let input = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    let mut child_in = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = child_in.write_all(&input);
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    CliOut {
        code: status.code(),
        stdout: String::from_utf8(out_t.join().unwrap_or_default()).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned(),
    }
}

/// Splits a `sub` output line `[offset,ts,row]` into (offset, ts, row text).
pub fn split_frame(line: &str) -> (Option<u64>, Option<i64>, &str) {
    let inner = line
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not a frame: {line}"));
    let (o, rest) = inner.split_once(',').expect("offset");
    let (ts, row) = rest.split_once(',').expect("ts");
    (o.parse().ok(), ts.parse().ok(), row)
}

/// A loopback port nothing listens on (bound, then released).
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

// ---- HTTP, SSE and publishing helpers (tests/sse.rs, tests/pull.rs, tests/metrics.rs) ----

/// Starts the server like [`Server::start`] but listening on `listen` (e.g. the address of a
/// server that was just stopped, to restart it in place).
pub fn start_server_at(config: Option<&Path>, data: &Path, listen: &str) -> Server {
    try_start_server_at(config, data, listen).unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`start_server_at`]; `Err` with the server's stderr when it exits before listening.
pub fn try_start_server_at(
    config: Option<&Path>,
    data: &Path,
    listen: &str,
) -> Result<Server, String> {
    launch(config, data, listen, &[])
}

/// Spawns `corecast serve --listen LISTEN --data DATA [--config CONFIG] EXTRA…` and waits for its
/// "listening on ADDR" line; `Err` with the server's stderr when it exits before listening.
fn launch(
    config: Option<&Path>,
    data: &Path,
    listen: &str,
    extra: &[&str],
) -> Result<Server, String> {
    let stderr_log = data.with_extension(format!("stderr.{}.log", std::process::id()));
    launch_to(config, data, listen, extra, stderr_log, &[])
}

/// [`launch`] with the server's stderr going to `stderr_log`.
#[allow(clippy::zombie_processes)] // the child is owned (killed and waited) by `Server`
fn launch_to(
    config: Option<&Path>,
    data: &Path,
    listen: &str,
    extra: &[&str],
    stderr_log: PathBuf,
    env: &[(&str, &str)],
) -> Result<Server, String> {
    let mut cmd = Command::new(corecast_bin());
    cmd.envs(env.iter().copied());
    cmd.arg("serve")
        .arg("--listen")
        .arg(listen)
        .arg("--data")
        .arg(data);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(extra);
    if let Some(parent) = stderr_log.parent() {
        std::fs::create_dir_all(parent).ok();
    }
    let errf = std::fs::File::create(&stderr_log).expect("stderr log");
    cmd.stdout(Stdio::piped()).stderr(errf);
    let mut child = cmd.spawn().expect("spawn corecast");
    let stdout = child.stdout.take().expect("stdout");
    // the address line is read on a thread (which then drains stdout), so a server that never
    // reports its address fails the test after 60 s instead of hanging it
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = tx.send(None);
                return;
            }
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr: SocketAddr = rest
                    .split_whitespace()
                    .next()
                    .expect("addr")
                    .parse()
                    .expect("addr parses");
                let _ = tx.send(Some(addr));
                let mut sink = Vec::new();
                let _ = lines.read_to_end(&mut sink);
                return;
            }
        }
    });
    let stderr_text = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(addr)) => Ok(Server {
            child,
            addr,
            data: data.to_path_buf(),
            config: config.map(Path::to_path_buf),
            stderr_log,
            _tmp: None,
        }),
        Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = child.wait();
            Err(format!(
                "corecast exited before listening: {}",
                stderr_text()
            ))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "corecast did not report its address within 60 s: {}",
                stderr_text()
            ))
        }
    }
}

/// A TCP connection to `addr` from the local address `local` (e.g. 127.0.0.2) when given.
pub fn tcp_from(addr: SocketAddr, local: Option<std::net::IpAddr>) -> TcpStream {
    let s = match local {
        None => TcpStream::connect(addr).expect("connect"),
        Some(ip) => {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("socket");
            sock.bind(&SocketAddr::new(ip, 0).into())
                .expect("bind the local address");
            sock.connect(&addr.into()).expect("connect");
            sock.into()
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.set_nodelay(true).ok();
    s
}

/// A plain HTTP response, read to the end of the connection.
#[derive(Debug)]
pub struct HttpResp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResp {
    /// First header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> sonic_rs::Value {
        sonic_rs::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> (u16, Vec<(String, String)>) {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let status: u16 = status_line
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .expect("status");
            let headers = lines
                .filter_map(|l| {
                    l.split_once(':')
                        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                })
                .collect();
            return (status, headers);
        }
        let n = s.read(&mut chunk).expect("read response head");
        assert!(
            n > 0,
            "connection closed before a response head: {:?}",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn write_request(
    s: &mut TcpStream,
    addr: SocketAddr,
    path_and_query: &str,
    headers: &[(&str, &str)],
) {
    use std::io::Write;
    let mut req = format!("GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send request");
}

/// `GET path_and_query` with extra headers, from `local` when given; reads to EOF.
pub fn http_get_from(
    addr: SocketAddr,
    local: Option<std::net::IpAddr>,
    path_and_query: &str,
    headers: &[(&str, &str)],
) -> HttpResp {
    let mut s = tcp_from(addr, local);
    s.set_read_timeout(Some(Duration::from_secs(90))).ok();
    write_request(&mut s, addr, path_and_query, headers);
    let mut buf = Vec::new();
    let (status, headers) = read_head(&mut s, &mut buf);
    let _ = s.read_to_end(&mut buf);
    HttpResp {
        status,
        headers,
        body: buf,
    }
}

/// `GET path_and_query` from 127.0.0.1.
pub fn http_get(addr: SocketAddr, path_and_query: &str) -> HttpResp {
    http_get_from(addr, None, path_and_query, &[])
}

/// One SSE item as a client's parser sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event (`event` is `message` unless named).
    Event {
        id: Option<String>,
        event: String,
        data: String,
    },
    /// A `retry:` field.
    Retry(u64),
    /// A comment line (without the leading colon).
    Comment(String),
}

/// An open SSE response, parsed incrementally (WHATWG event-stream rules).
pub struct SseStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    sock: TcpStream,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<SseItem>,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
    pub closed: bool,
}

impl SseStream {
    /// Opens `path_and_query` with `headers` (add `Accept: text/event-stream` when the path is a
    /// bare stream) from `local` when given.
    pub fn open(
        addr: SocketAddr,
        local: Option<std::net::IpAddr>,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> SseStream {
        let mut sock = tcp_from(addr, local);
        write_request(&mut sock, addr, path_and_query, headers);
        let mut buf = Vec::new();
        let (status, headers) = read_head(&mut sock, &mut buf);
        SseStream {
            status,
            headers,
            sock,
            buf,
            pending: Default::default(),
            id: None,
            event: None,
            data: None,
            closed: false,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn parse_lines(&mut self) {
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).expect("SSE is UTF-8");
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    self.pending.push_back(SseItem::Event {
                        id: self.id.clone(),
                        event: self.event.take().unwrap_or_else(|| "message".into()),
                        data,
                    });
                }
                self.event = None;
                continue;
            }
            if let Some(c) = line.strip_prefix(':') {
                self.pending
                    .push_back(SseItem::Comment(c.trim_start().to_string()));
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f.to_string(), v.strip_prefix(' ').unwrap_or(v).to_string()),
                None => (line.clone(), String::new()),
            };
            match field.as_str() {
                "id" => self.id = Some(value),
                "event" => self.event = Some(value),
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&value);
                    }
                    None => self.data = Some(value),
                },
                "retry" => {
                    if let Ok(ms) = value.parse() {
                        self.pending.push_back(SseItem::Retry(ms));
                    }
                }
                _ => {}
            }
        }
    }

    /// The next item, waiting at most `timeout`; `None` on timeout or once the server closed.
    pub fn next(&mut self, timeout: Duration) -> Option<SseItem> {
        let deadline = Instant::now() + timeout;
        loop {
            self.parse_lines();
            if let Some(i) = self.pending.pop_front() {
                return Some(i);
            }
            if self.closed {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.sock
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .ok();
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(_) => self.closed = true,
            }
        }
    }

    /// The next data event (skipping retry and comments), as `(id, event, data)`.
    pub fn next_event(&mut self, timeout: Duration) -> Option<(Option<String>, String, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left)? {
                SseItem::Event { id, event, data } => return Some((id, event, data)),
                _ => continue,
            }
        }
    }
}

/// Publishes `rows` (JSON objects) to `stream` as one batch frame; returns their offsets.
pub fn publish_batch(server: &Server, stream: &str, rows: &[String]) -> Vec<Option<u64>> {
    let mut ws = ws_connect(&server.url(&format!("{stream}?publish")));
    let _greeting = recv_text(&mut ws);
    let offsets = publish_on(&mut ws, rows);
    let _ = ws.close(None);
    offsets
}

/// Publishes `rows` as one batch frame on an open publisher connection.
pub fn publish_on(ws: &mut Ws, rows: &[String]) -> Vec<Option<u64>> {
    let frame = format!("[{}]", rows.join(","));
    ws.send(tungstenite::Message::text(frame))
        .expect("send publish frame");
    let reply = recv_text(ws);
    let v: sonic_rs::Value = sonic_rs::from_str(&reply).expect("reply is JSON");
    use sonic_rs::{JsonContainerTrait, JsonValueTrait};
    let ok = v
        .get("ok")
        .and_then(|o| o.as_array())
        .unwrap_or_else(|| panic!("publish refused: {reply}"));
    ok.iter().map(|x| x.as_u64()).collect()
}

/// The anchor venv's python (`$CORECAST_ANCHOR_PY`, else `../shared/tools/anchor/setup.sh`'s),
/// with the official client, litelink, pyiceberg and DuckDB; `None` (the test says it skipped)
/// when it is missing, unless one of `required` is set in the environment: then it fails.
pub fn anchor_python(required: &[&str]) -> Option<String> {
    let py = std::env::var("CORECAST_ANCHOR_PY").ok().or_else(|| {
        Some(std::env::var("HOME").ok()? + "/.cache/corecast-anchor/venv/bin/python")
    })?;
    let ok = Command::new(&py)
        .args(["-c", "import streamcast, litelink, pyiceberg, duckdb"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return Some(py);
    }
    let set: Vec<&&str> = required
        .iter()
        .filter(|v| std::env::var_os(v).is_some())
        .collect();
    assert!(
        set.is_empty(),
        "{set:?} set but {py} lacks streamcast/litelink/pyiceberg/duckdb (run ../shared/tools/anchor/setup.sh)"
    );
    eprintln!("skipped: no anchor venv at {py} (../shared/tools/anchor/setup.sh installs it)");
    None
}

/// The unsigned integer at `key` of a JSON object (a check script's report).
pub fn json_u64(v: &sonic_rs::Value, key: &str) -> u64 {
    use sonic_rs::JsonValueTrait;
    v.get(key)
        .and_then(|x| x.as_u64())
        .unwrap_or_else(|| panic!("{key} in {v:?}"))
}

/// The path of a Chromium on `PATH`, if there is one.
pub fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|c| {
            std::process::Command::new("which")
                .arg(c)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        })
}

/// A tiny HTTP server for a browser test's page: serves `page` at `/` and collects what the page
/// reports (`GET /report?...`) into a channel.
pub fn page_server(page: String) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            c.set_read_timeout(Some(Duration::from_secs(5))).ok();
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut chunk) {
                    Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            let head = String::from_utf8_lossy(&buf).into_owned();
            let target = head.split(' ').nth(1).unwrap_or("/").to_string();
            let (ctype, body) = if target.starts_with("/report") {
                let _ = tx.send(target.clone());
                ("text/plain", "ok".to_string())
            } else if target == "/" {
                ("text/html", page.clone())
            } else {
                ("text/plain", String::new())
            };
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\naccess-control-allow-origin: *\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = c.write_all(resp.as_bytes());
        }
    });
    (addr, rx)
}

/// Every frame a live subscriber of `url` gets for `rows`, published in one batch by our client
/// after it subscribed, at offsets `first..` (the acknowledged offsets are checked too); both
/// are closed after. Our client on both sides: on a thread holding one of its subscriptions a
/// blocking read of another library's socket may be interrupted (EINTR) by its completions.
pub fn live_frames(url: &str, rows: &[String], first: u64) -> Vec<String> {
    use corecast_net::client::{blocking, PublishOptions, SubscribeOptions};
    let mut live = blocking::connect(url, SubscribeOptions::default()).expect("live subscriber");
    let mut p = blocking::publish(url, PublishOptions::default()).expect("publisher");
    let offsets = p.send_batch(rows).expect("acknowledged");
    p.close().expect("publisher close");
    let want: Vec<u64> = (first..first + rows.len() as u64).collect();
    assert_eq!(offsets, want.iter().map(|&o| Some(o)).collect::<Vec<_>>());
    let frames = want
        .iter()
        .map(|&want| {
            let row = live.next().expect("live row").expect("a live row");
            assert_eq!(row.offset, Some(want));
            row.frame().to_string()
        })
        .collect();
    live.close().expect("live close");
    frames
}
