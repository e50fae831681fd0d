//! `loadgen --protocol nats` end to end against a real nats-server: core NATS fan-out (every
//! subscriber gets every published row once, in order, with latency samples), a JetStream
//! publish with PubAcks to a file-storage stream on a server with `sync_interval: always`, and
//! JetStream fan-out through push consumers.
//!
//! nats-server comes from `$CORECAST_NATS_SERVER`, `$CORECAST_NATS_VENV/bin/nats-server`,
//! `~/.cache/corecast-nats/venv/bin/nats-server` (what `bench/nats_setup.sh` installs) or `PATH`.
//! Without one the test says so and passes, unless `CORECAST_REQUIRE_NATS=1` (set by `.ci/run`).

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sonic_rs::JsonValueTrait;

fn nats_server_bin() -> Option<PathBuf> {
    let mut cands = Vec::new();
    if let Some(p) = std::env::var_os("CORECAST_NATS_SERVER") {
        cands.push(PathBuf::from(p));
    }
    if let Some(v) = std::env::var_os("CORECAST_NATS_VENV") {
        cands.push(Path::new(&v).join("bin/nats-server"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        cands.push(Path::new(&h).join(".cache/corecast-nats/venv/bin/nats-server"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        cands.extend(std::env::split_paths(&path).map(|d| d.join("nats-server")));
    }
    cands.into_iter().find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

struct Nats {
    child: Child,
    dir: PathBuf,
    ws: u16,
}

impl Nats {
    fn start(bin: &Path) -> Nats {
        let dir = std::env::temp_dir().join(format!(
            "cc-loadgen-nats-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (ws, cl) = (free_port(), free_port());
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:{cl}\"\nwebsocket {{ listen: \"127.0.0.1:{ws}\", no_tls: true }}\njetstream {{ store_dir: \"{}\", sync_interval: always }}\n",
                dir.join("js").display()
            ),
        )
        .expect("write nats.conf");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("nats.log")).expect("log"))
            .spawn()
            .expect("start nats-server");
        let mut n = Nats { child, dir, ws };
        let addr: SocketAddr = ([127, 0, 0, 1], ws).into();
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                n.child.try_wait().expect("poll nats-server").is_none(),
                "nats-server exited: {}",
                n.log()
            );
            assert!(
                Instant::now() < until,
                "nats-server not listening: {}",
                n.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        n
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nats.log")).unwrap_or_default()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn loadgen(nats: &Nats, path: &str, args: &[&str]) -> sonic_rs::Value {
    let out = Command::new(support::loadgen_bin())
        .arg("--url")
        .arg(format!("ws://127.0.0.1:{}{path}", nats.ws))
        .args([
            "--protocol",
            "nats",
            "--json",
            "--threads",
            "1",
            "--max-seconds",
            "8",
        ])
        .arg("--server-pid")
        .arg(nats.child.id().to_string())
        .args(args)
        .output()
        .expect("run loadgen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "loadgen {args:?} failed ({:?}):\n{stdout}\n{stderr}\nnats-server log:\n{}",
        out.status,
        nats.log()
    );
    let doc: sonic_rs::Value =
        sonic_rs::from_str(stdout.trim()).expect("loadgen --json prints one JSON document");
    assert_eq!(
        doc.get("ok").and_then(|v| v.as_bool()),
        Some(true),
        "{stdout}"
    );
    doc
}

fn num(doc: &sonic_rs::Value, a: &str, b: &str) -> u64 {
    doc.get(a)
        .and_then(|x| x.get(b))
        .and_then(|v| v.as_u64())
        .unwrap_or(u64::MAX)
}

#[test]
fn loadgen_drives_core_nats_and_jetstream() {
    let Some(bin) = nats_server_bin() else {
        assert!(
            std::env::var_os("CORECAST_REQUIRE_NATS").is_none_or(|v| v != "1"),
            "CORECAST_REQUIRE_NATS=1 but no nats-server (run bench/nats_setup.sh)"
        );
        eprintln!(
            "SKIPPED loadgen_nats: no nats-server binary (bench/nats_setup.sh installs one; \
             CORECAST_REQUIRE_NATS=1 makes this a failure)"
        );
        return;
    };
    // build loadgen before the broker starts, so that no step below waits on a compile
    let _ = support::loadgen_bin();
    let nats = Nats::start(&bin);

    // core NATS: 20 subscribers, 2,000 rows/s for 2 s, every row sampled
    let doc = loadgen(
        &nats,
        "/trades",
        &[
            "--publishers",
            "1",
            "--window",
            "16",
            "--rate",
            "2000",
            "--subscribers",
            "20",
            "--duration",
            "2",
            "--drain",
            "3",
            "--sample",
            "1",
        ],
    );
    let rows = num(&doc, "publish", "rows_acked");
    assert!(rows >= 1_000, "expected ~4,000 rows: {doc:?}");
    assert_eq!(num(&doc, "publish", "first_offset"), 1, "{doc:?}");
    assert_eq!(num(&doc, "publish", "end_offset"), rows + 1, "{doc:?}");
    assert_eq!(
        num(&doc, "deliver", "frames"),
        rows * 20,
        "every subscriber gets every row: {doc:?}"
    );
    for k in ["gaps", "dups", "missing"] {
        assert_eq!(num(&doc, "deliver", k), 0, "{k}: {doc:?}");
    }
    assert_eq!(num(&doc, "deliver", "subscribers_complete"), 20, "{doc:?}");
    assert_eq!(num(&doc, "latency_us", "samples"), rows * 20, "{doc:?}");
    assert!(num(&doc, "server", "rss_kib") > 0, "{doc:?}");
    assert_eq!(
        doc.get("config")
            .and_then(|c| c.get("protocol"))
            .and_then(|v| v.as_str()),
        Some("nats")
    );

    // JetStream: acknowledged publishes into a file-storage stream (created by loadgen)
    let doc = loadgen(
        &nats,
        "/trades_js",
        &[
            "--nats-jetstream",
            "--publishers",
            "1",
            "--window",
            "16",
            "--batch",
            "10",
            "--duration",
            "1",
            "--drain",
            "5",
        ],
    );
    let rows = num(&doc, "publish", "rows_acked");
    assert!(rows >= 10, "{doc:?}");
    assert_eq!(
        num(&doc, "publish", "rows_sent"),
        rows,
        "every row acked: {doc:?}"
    );
    assert_eq!(
        doc.get("config")
            .and_then(|c| c.get("protocol"))
            .and_then(|v| v.as_str()),
        Some("nats-jetstream")
    );
    // JetStream fan-out: 5 subscribers, each through its own push consumer
    let doc = loadgen(
        &nats,
        "/trades_js",
        &[
            "--nats-jetstream",
            "--publishers",
            "1",
            "--window",
            "16",
            "--rate",
            "1000",
            "--subscribers",
            "5",
            "--duration",
            "1",
            "--drain",
            "5",
        ],
    );
    let rows = num(&doc, "publish", "rows_acked");
    assert!(rows >= 100, "{doc:?}");
    assert_eq!(num(&doc, "deliver", "frames"), rows * 5, "{doc:?}");
    for k in ["gaps", "dups", "missing"] {
        assert_eq!(num(&doc, "deliver", k), 0, "{k}: {doc:?}");
    }
    let stream_dir = nats.dir.join("js/jetstream/$G/streams/trades_js");
    assert!(
        stream_dir.is_dir(),
        "the stream is on disk at {}: {}",
        stream_dir.display(),
        nats.log()
    );
}
