//! A local S3 server for the S3 tests (`tests/published_s3.rs`, `tests/published_s3_store.rs`,
//! `tests/catch_up_s3.rs`): moto (`moto[server]==5.2.5`, `../shared/PUBLISHED.md` §8), started on
//! a free loopback port from the venv `$CORECAST_MOTO_VENV`, or an S3 server already running at
//! `$AWS_ENDPOINT_URL`. Neither: the tests say so and pass, unless `CORECAST_REQUIRE_S3` is set
//! (CI sets it), then they fail. Also a [`Gate`]: a TCP forwarder in front of the server that can
//! go dark (its port refuses connections) and come back on the same port, for outage tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The keys the tests give corecast and the client. Distinctive, so that a search for them in
/// logs and files finds only a leak (moto accepts any keys).
pub const ACCESS_KEY: &str = "AKIACORECASTTEST7Q2X";
pub const SECRET_KEY: &str = "cOrEcAsT/tEsT+sEcReT/kEy/nEvEr/lOgGeD/0042";
pub const REGION: &str = "us-east-1";

/// A running S3 server (stopped on drop when this started it).
pub struct Moto {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The server's address.
    pub addr: SocketAddr,
    /// A python with boto3 (for creating buckets).
    python: PathBuf,
}

/// A python with boto3: the moto venv's, else the anchor venv's (the official client's).
fn boto3_python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("CORECAST_MOTO_VENV").map(|v| PathBuf::from(v).join("bin/python")),
        std::env::var_os("CORECAST_ANCHOR_PY").map(PathBuf::from),
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".cache/corecast-anchor/venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|py| {
        Command::new(py)
            .args(["-c", "import boto3"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// `None` with a message, or a panic when `CORECAST_REQUIRE_S3` is set.
fn unavailable(why: &str) -> Option<Moto> {
    assert!(
        std::env::var_os("CORECAST_REQUIRE_S3").is_none(),
        "CORECAST_REQUIRE_S3 is set but {why}"
    );
    eprintln!("skipped: {why} (set CORECAST_MOTO_VENV to a venv with moto[server]==5.2.5, see docs/OPERATIONS.md, \"Publishing to S3\")");
    None
}

/// A loopback port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Whether an HTTP server answers at `addr`.
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    if s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

impl Moto {
    /// The server: `$AWS_ENDPOINT_URL` when set (reused as it is), else a new `moto_server` from
    /// `$CORECAST_MOTO_VENV`; `None` when neither exists (see the module docs).
    pub fn start() -> Option<Moto> {
        let Some(python) = boto3_python() else {
            return unavailable("no python with boto3 (the moto venv or the anchor venv)");
        };
        if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
            let hostport = endpoint
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string();
            let addr: SocketAddr = hostport.parse().unwrap_or_else(|e| {
                panic!("AWS_ENDPOINT_URL={endpoint}: the tests need http://IP:PORT ({e})")
            });
            assert!(answers(addr), "AWS_ENDPOINT_URL={endpoint} does not answer");
            return Some(Moto {
                child: None,
                endpoint: format!("http://{addr}"),
                addr,
                python,
            });
        }
        let Some(venv) = std::env::var_os("CORECAST_MOTO_VENV").map(PathBuf::from) else {
            return unavailable("neither CORECAST_MOTO_VENV nor AWS_ENDPOINT_URL is set");
        };
        let bin = venv.join("bin/moto_server");
        if !bin.exists() {
            return unavailable(&format!("{} does not exist", bin.display()));
        }
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let mut moto = Moto {
            child: Some(child),
            endpoint: format!("http://{addr}"),
            addr,
            python: venv.join("bin/python"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !answers(addr) {
            if let Some(st) = moto
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("moto_server exited before answering: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer on {addr} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }

    /// The `AWS_*` environment that points a client (the official Python client, pyiceberg,
    /// DuckDB, boto3) at this server with the test keys.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_DEFAULT_REGION", REGION.to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ]
    }

    /// Runs `code` (Python, with `boto3` and an S3 client `s3` at this server in scope); its
    /// stdout.
    pub fn boto3(&self, code: &str) -> String {
        let script = format!("import boto3\ns3 = boto3.client('s3')\n{code}\n");
        let out = Command::new(&self.python)
            .args(["-c", &script])
            .envs(self.env())
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "boto3 failed: {}\n{script}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates the bucket `name` (a new one per test, so tests share one server).
    pub fn create_bucket(&self, name: &str) {
        self.boto3(&format!("s3.create_bucket(Bucket={name:?})"));
    }

    /// The keys in `bucket` under `prefix`, sorted.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let out = self.boto3(&format!(
            "p = s3.get_paginator('list_objects_v2')\n\
             for page in p.paginate(Bucket={bucket:?}, Prefix={prefix:?}):\n    \
                 for o in page.get('Contents', []):\n        print(o['Key'])"
        ));
        let mut keys: Vec<String> = out.lines().map(str::to_string).collect();
        keys.sort();
        keys
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A bucket name unique to this process and `tag` (S3 names: lowercase, digits, `-`).
pub fn bucket(tag: &str) -> String {
    format!("corecast-{tag}-{}", std::process::id())
}

/// A TCP forwarder on a fixed loopback port to `target`. [`Gate::close`] makes the port refuse
/// connections (the listener is closed and open connections are cut), [`Gate::open`] listens on
/// the same port again: a store endpoint that goes down and comes back.
pub struct Gate {
    /// The forwarder's address (what the store under test is configured with).
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Gate {
    /// Forwards a free loopback port to `target`, open.
    pub fn start(target: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let up = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let (up2, stop2) = (up.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            let mut listener = Some(listener);
            while !stop2.load(Ordering::Acquire) {
                let want = up2.load(Ordering::Acquire);
                if want && listener.is_none() {
                    // SO_REUSEADDR (std sets it): the port is free again at once
                    match TcpListener::bind(addr) {
                        Ok(l) => listener = Some(l),
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    }
                }
                if !want && listener.is_some() {
                    listener = None;
                    for c in conns.lock().expect("conns").drain(..) {
                        let _ = c.shutdown(Shutdown::Both);
                    }
                }
                let Some(l) = &listener else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                l.set_nonblocking(true).expect("nonblocking");
                match l.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).expect("blocking");
                        let Ok(server) = TcpStream::connect(target) else {
                            continue;
                        };
                        let mut held = conns.lock().expect("conns");
                        held.retain(|c| c.peer_addr().is_ok());
                        for s in [&client, &server] {
                            if let Ok(c) = s.try_clone() {
                                held.push(c);
                            }
                        }
                        drop(held);
                        pipe(&client, &server);
                        pipe(&server, &client);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Gate {
            addr,
            up,
            stop,
            thread: Some(thread),
        }
    }

    /// The port refuses connections (within a few milliseconds) and open ones are cut.
    pub fn close(&self) {
        self.up.store(false, Ordering::Release);
        std::thread::sleep(Duration::from_millis(100));
    }

    /// The port forwards again.
    pub fn open(&self) {
        self.up.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(self.addr).is_err() {
            assert!(Instant::now() < deadline, "the gate did not reopen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Copies `from` to `to` on a thread until either end closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
