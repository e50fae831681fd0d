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
    #[allow(clippy::zombie_processes)] // every path either returns the child (Drop kills and
                                       // waits) or panics after it exited or timed out
    pub fn start(config: Option<&Path>, data: &Path, extra: &[&str]) -> Server {
        let mut cmd = Command::new(corecast_bin());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data")
            .arg(data);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(extra);
        let stderr_log = data.with_extension(format!("stderr.{}.log", std::process::id()));
        if let Some(parent) = stderr_log.parent() {
            std::fs::create_dir_all(parent).ok();
        }
        let errf = std::fs::File::create(&stderr_log).expect("stderr log");
        cmd.stdout(Stdio::piped()).stderr(errf);
        let mut child = cmd.spawn().expect("spawn corecast");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            line.clear();
            let n = lines.read_line(&mut line).expect("read stdout");
            if n == 0 {
                let _ = child.wait();
                let err = std::fs::read_to_string(&stderr_log).unwrap_or_default();
                panic!("corecast exited before listening: {err}");
            }
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().expect("addr");
                let addr: SocketAddr = addr.parse().expect("addr parses");
                // keep draining stdout in the background so the child never blocks on it
                std::thread::spawn(move || {
                    let mut sink = Vec::new();
                    let _ = lines.read_to_end(&mut sink);
                });
                return Server {
                    child,
                    addr,
                    data: data.to_path_buf(),
                    config: config.map(Path::to_path_buf),
                    stderr_log,
                    _tmp: None,
                };
            }
            assert!(Instant::now() < deadline, "no listening line within 30 s");
        }
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
