//! TLS (issue 14 item 3): `wss://` and `https://` served by rustls, on the main port or on a
//! listener of its own beside the plaintext one, the certificate reloaded on SIGHUP.
//!
//! Every key and certificate is made at test time with rcgen (a CA, then server certificates
//! for `localhost` and 127.0.0.1 signed by it); none is committed. Peers we did not write:
//! `curl --cacert` (https, SSE), `openssl s_client` (TLS 1.3 and 1.2, ALPN), the official Python
//! client (`SSL_CERT_FILE`); ours: the client library and the CLI with `--ca`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{corecast_run, split_frame, trade, try_start_server_at, Server, Setup};

/// A test CA: its certificate (PEM file) and what signs with it.
struct Ca {
    pem: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA key's SubjectPublicKeyInfo (DER): what Chromium is told to trust.
    spki: Vec<u8>,
}

fn ca(dir: &Path, name: &str) -> Ca {
    let key = rcgen::KeyPair::generate().expect("ca key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("corecast test CA {name}"),
    );
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let cert = params.self_signed(&key).expect("ca cert");
    let pem = dir.join(format!("{name}.ca.pem"));
    std::fs::write(&pem, cert.pem()).unwrap();
    let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
    Ca {
        pem,
        issuer: rcgen::Issuer::new(params, key),
        spki,
    }
}

/// A server certificate for `localhost` and 127.0.0.1 signed by `ca`: (cert PEM, key PEM).
fn server_pair(ca: &Ca) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("server key");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("server params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca.issuer).expect("server cert");
    (cert.pem(), key.serialize_pem())
}

/// Writes a pair as `cert.pem` and `key.pem` in `dir`; returns their paths.
fn write_pair(dir: &Path, pair: &(String, String)) -> (PathBuf, PathBuf) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, &pair.0).unwrap();
    std::fs::write(&key, &pair.1).unwrap();
    (cert, key)
}

/// The trades stream, and `[tls]` with `extra` (e.g. `listen = "…"`) for the pair in `dir`.
fn tls_config(setup: &Setup, extra: &str) -> PathBuf {
    setup.config(&format!(
        r#"
[[stream]]
name = "trades"
schema = "@trade"

[tls]
cert = "cert.pem"
key = "key.pem"
{extra}
"#
    ))
}

fn start(setup: &Setup, config: &Path) -> Server {
    try_start_server_at(Some(config), &setup.data(), "127.0.0.1:0")
        .unwrap_or_else(|e| panic!("{e}"))
}

fn wss(port: u16, stream: &str) -> String {
    format!("wss://localhost:{port}/{stream}")
}

fn rows(n: i64) -> String {
    (1..=n).map(|i| trade(i, "BTC") + "\n").collect()
}

fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Waits until the server's log contains `needle`.
fn wait_log(srv: &Server, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !srv.stderr().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log: {}",
            srv.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `[tls] listen` beside the plaintext port: 3,000 rows published with `corecast pub` over
/// wss:// arrive identically over ws://, over wss:// with `corecast sub --ca`, and through the
/// client library over wss:// (more than one 64 KiB write chunk of frames).
#[test]
fn wss_beside_ws_gives_the_same_rows_to_the_cli_and_the_client() {
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    write_pair(setup.tmp.path(), &server_pair(&ca));
    let tls_port = support::dead_port();
    let cfg = tls_config(&setup, &format!("listen = \"127.0.0.1:{tls_port}\""));
    let srv = start(&setup, &cfg);
    let ca_pem = ca.pem.to_str().unwrap();
    let n = 3000;
    let out = corecast_run(
        &["pub", &wss(tls_port, "trades"), "--ca", ca_pem, "--quiet"],
        Some(rows(n).as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "pub over wss: {out:?}");
    let count = n.to_string();
    let plain = corecast_run(
        &[
            "sub",
            &srv.url("trades"),
            "--offset",
            "earliest",
            "--count",
            &count,
        ],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(plain.code, Some(0), "{plain:?}");
    assert_eq!(plain.lines().len(), n as usize);
    let tls = corecast_run(
        &[
            "sub",
            &wss(tls_port, "trades"),
            "--ca",
            ca_pem,
            "--offset",
            "earliest",
            "--count",
            &count,
        ],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(tls.code, Some(0), "{tls:?}");
    assert_eq!(
        tls.stdout, plain.stdout,
        "wss:// and ws:// give the same frames"
    );
    for (i, line) in plain.lines().iter().enumerate() {
        assert_eq!(split_frame(line).0, Some(i as u64 + 1));
    }

    // the client library, trusting the test CA
    corecast_net::client::tls::use_ca_file(&ca.pem).expect("ca file");
    let mut sub = corecast_net::client::blocking::connect(
        &wss(tls_port, "trades"),
        corecast_net::client::SubscribeOptions {
            offset: Some(corecast_net::client::Offset::Earliest),
            ..Default::default()
        },
    )
    .expect("client over wss");
    for line in plain.lines() {
        let row = sub.next().expect("row").expect("not the end");
        let (offset, _, text) = split_frame(line);
        assert_eq!(row.offset, offset);
        assert_eq!(row.row(), text);
    }
    let _ = sub.close();

    // without the CA the system roots do not vouch for the test certificate
    let refused = corecast_run(
        &["sub", &wss(tls_port, "trades"), "--count", "1"],
        None,
        Duration::from_secs(20),
    );
    assert_eq!(refused.code, Some(3), "{refused:?}");
    assert!(
        refused.stderr.contains("certificate"),
        "names the certificate: {}",
        refused.stderr
    );
    srv.stop();
}

/// `[tls]` without `listen`: the main port is TLS, and every HTTP endpoint works over it.
#[test]
fn https_endpoints_and_the_handshake_on_the_main_port() {
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    write_pair(setup.tmp.path(), &server_pair(&ca));
    let cfg = tls_config(&setup, "");
    let srv = start(&setup, &cfg);
    let port = srv.addr.port();
    let ca_pem = ca.pem.to_str().unwrap();
    let out = corecast_run(
        &["pub", &wss(port, "trades"), "--ca", ca_pem, "--quiet"],
        Some(rows(5).as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");

    if has("curl") {
        let curl = |path: &str, extra: &[&str]| {
            let o = Command::new("curl")
                .args(["-sS", "--max-time", "5", "--cacert", ca_pem])
                .args(extra)
                .arg(format!("https://localhost:{port}{path}"))
                .output()
                .expect("curl");
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let stats = curl("/stats", &[]);
        assert!(stats.contains("\"trades\""), "/stats over https: {stats}");
        let pull = curl("/v1/streams/trades/rows?limit=2", &[]);
        assert!(pull.contains("\"rows\""), "pull over https: {pull}");
        // bulk ingest over https
        let body = setup.tmp.path().join("ingest.jsonl");
        std::fs::write(
            &body,
            (100..110)
                .map(|i| trade(i, "INGEST") + "\n")
                .collect::<String>(),
        )
        .unwrap();
        let ingested = curl(
            "/v1/streams/trades/ingest",
            &[
                "-H",
                "Content-Type: application/x-ndjson",
                "--data-binary",
                &format!("@{}", body.display()),
                "-w",
                " %{http_code}",
            ],
        );
        assert!(ingested.ends_with(" 200"), "ingest over https: {ingested}");
        let metrics = curl("/metrics", &[]);
        assert!(metrics.contains("corecast_"), "/metrics over https");
        // a long poll over https (the connection watched while it waits): a row published
        // during the wait answers it
        let first = curl("/v1/streams/trades/rows?limit=500", &[]);
        let v: sonic_rs::Value = sonic_rs::from_str(&first).expect("pull JSON");
        let cursor = sonic_rs::JsonValueTrait::get(&v, "next_cursor")
            .and_then(sonic_rs::JsonValueTrait::as_str)
            .expect("next_cursor")
            .to_string();
        let t0 = Instant::now();
        let waiter = std::thread::spawn({
            let ca_pem = ca_pem.to_string();
            move || {
                let o = Command::new("curl")
                    .args(["-sS", "--max-time", "20", "--cacert", &ca_pem])
                    .arg(format!(
                        "https://localhost:{port}/v1/streams/trades/rows?cursor={cursor}&wait=10"
                    ))
                    .output()
                    .expect("curl");
                String::from_utf8_lossy(&o.stdout).into_owned()
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let out = corecast_run(
            &["pub", &wss(port, "trades"), "--ca", ca_pem, "--quiet"],
            Some((trade(77, "LONGPOLL") + "\n").as_bytes()),
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(0), "{out:?}");
        let answer = waiter.join().unwrap();
        assert!(
            answer.contains("LONGPOLL"),
            "the long poll's answer: {answer}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "answered by the row, not the wait"
        );
        // SSE: the five rows, then curl gives up at its time limit
        let sse = curl("/trades/events?offset=1", &["-N", "--max-time", "2"]);
        let data = sse.lines().filter(|l| l.starts_with("data:")).count();
        assert!(data >= 5 + 10, "SSE over https: {sse}");
    } else {
        eprintln!("skipped the curl checks: no curl on PATH");
    }

    if has("openssl") {
        for version in ["-tls1_3", "-tls1_2"] {
            let mut child = Command::new("openssl")
                .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
                .args(["-servername", "localhost", "-alpn", "http/1.1", version])
                .args(["-CAfile", ca_pem, "-verify_return_error"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("openssl");
            // one request over the session, then end it
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            let o = child.wait_with_output().expect("openssl");
            let text = String::from_utf8_lossy(&o.stdout);
            let want = if version == "-tls1_3" {
                "TLSv1.3"
            } else {
                "TLSv1.2"
            };
            assert!(text.contains(want), "{version}: {text}");
            assert!(
                text.contains("ALPN protocol: http/1.1"),
                "{version}: ALPN http/1.1 negotiated: {text}"
            );
            assert!(
                text.contains("Verify return code: 0 (ok)"),
                "{version}: {text}"
            );
        }
    } else {
        eprintln!("skipped the s_client checks: no openssl on PATH");
    }
    srv.stop();
}

/// A plaintext client on a TLS port gets a plaintext 400 (or, not speaking HTTP, a closed
/// connection); a TLS client on a plaintext port fails at once; a peer that never starts its
/// handshake is closed at the head deadline. None hangs or harms the server.
#[test]
fn the_wrong_protocol_on_either_port_fails_cleanly() {
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    write_pair(setup.tmp.path(), &server_pair(&ca));
    let tls_port = support::dead_port();
    let cfg = tls_config(&setup, &format!("listen = \"127.0.0.1:{tls_port}\""));
    let srv = start(&setup, &cfg);

    // a peer that never starts the handshake is cut off by the request head's deadline (10 s)
    let silent = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    let silent_t0 = Instant::now();
    let silent = std::thread::spawn(move || {
        let mut silent = silent;
        silent
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut sink = Vec::new();
        let _ = silent.read_to_end(&mut sink);
        silent_t0.elapsed()
    });
    let read_all = |mut s: TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        let t0 = Instant::now();
        let _ = s.read_to_end(&mut got);
        assert!(t0.elapsed() < Duration::from_secs(4), "closed promptly");
        String::from_utf8_lossy(&got).into_owned()
    };
    let mut s = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    s.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = read_all(s);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("tls_required"), "{answer}");
    let mut s = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    s.write_all(&[0u8; 64]).unwrap();
    assert_eq!(read_all(s), "", "not TLS, not HTTP: closed without a word");

    // wss:// on the plaintext port
    let out = corecast_run(
        &[
            "sub",
            &format!("wss://localhost:{}/trades", srv.addr.port()),
            "--ca",
            ca.pem.to_str().unwrap(),
            "--count",
            "1",
        ],
        None,
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(3), "{out:?}");

    // both ports still serve
    let stats = support::http_get(srv.addr, "/stats");
    assert!(stats.text().contains("trades"));
    let out = corecast_run(
        &["pub", &srv.url("trades"), "--quiet"],
        Some(rows(1).as_bytes()),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let ok = corecast_run(
        &[
            "sub",
            &wss(tls_port, "trades"),
            "--ca",
            ca.pem.to_str().unwrap(),
            "--offset",
            "earliest",
            "--count",
            "1",
        ],
        None,
        Duration::from_secs(20),
    );
    assert_eq!(ok.code, Some(0), "{ok:?}");
    let waited = silent.join().unwrap();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(15),
        "the silent peer was closed after {waited:?}"
    );
    assert!(!srv.stderr().contains("panicked"), "{}", srv.stderr());
    srv.stop();
}

/// SIGHUP reloads the certificate: an open wss:// subscriber keeps receiving, a new connection
/// sees the new certificate, and a bad new file is refused with the old one kept.
#[test]
fn sighup_reloads_the_certificate_and_keeps_connections() {
    let setup = Setup::new();
    let dir = setup.tmp.path();
    let one = ca(dir, "one");
    let two = ca(dir, "two");
    write_pair(dir, &server_pair(&one));
    let cfg = tls_config(&setup, "");
    let srv = start(&setup, &cfg);
    let port = srv.addr.port();
    let url = wss(port, "trades");
    let pub_rows = |from: i64, to: i64, ca: &Path| {
        let body: String = (from..=to).map(|i| trade(i, "ETH") + "\n").collect();
        let out = corecast_run(
            &["pub", &url, "--ca", ca.to_str().unwrap(), "--quiet"],
            Some(body.as_bytes()),
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(0), "{out:?}");
    };
    // the long-lived subscriber, trusting CA one
    let mut sub = Command::new(support::corecast_bin())
        .args(["sub", &url, "--ca", one.pem.to_str().unwrap()])
        .args(["--offset", "earliest", "--count", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sub");
    let mut lines = BufReader::new(sub.stdout.take().unwrap()).lines();
    pub_rows(1, 2, &one.pem);
    for want in 1..=2u64 {
        let line = lines.next().expect("a line").expect("utf8");
        assert_eq!(split_frame(&line).0, Some(want));
    }

    write_pair(dir, &server_pair(&two));
    Command::new("kill")
        .args(["-HUP", &srv.child.id().to_string()])
        .status()
        .unwrap();
    wait_log(&srv, "reload: tls certificate");
    // new connections get the new certificate: CA two vouches for it, CA one no longer does
    pub_rows(3, 4, &two.pem);
    let old = corecast_run(
        &[
            "sub",
            &url,
            "--ca",
            one.pem.to_str().unwrap(),
            "--count",
            "1",
        ],
        None,
        Duration::from_secs(20),
    );
    assert_eq!(old.code, Some(3), "the old CA is refused: {old:?}");
    // the open subscriber got rows 3 and 4 on its session of the old certificate
    for want in 3..=4u64 {
        let line = lines.next().expect("a line").expect("utf8");
        assert_eq!(split_frame(&line).0, Some(want));
    }
    assert!(sub.wait().unwrap().success());

    // a bad new file: logged, the certificate of CA two stays
    std::fs::write(dir.join("cert.pem"), "not a certificate\n").unwrap();
    Command::new("kill")
        .args(["-HUP", &srv.child.id().to_string()])
        .status()
        .unwrap();
    wait_log(&srv, "keeping the previous certificate");
    assert!(srv.stderr().contains("no certificate in the file"));
    pub_rows(5, 5, &two.pem);
    srv.stop();
}

/// Bad `[tls]` configuration is refused at start, naming the file and the fault.
#[test]
fn bad_tls_config_is_refused_naming_the_file() {
    let setup = Setup::new();
    let dir = setup.tmp.path();
    let one = ca(dir, "one");
    let cfg = tls_config(&setup, "");
    let refused = |why: &str| {
        let e = match try_start_server_at(Some(&cfg), &setup.data(), "127.0.0.1:0") {
            Ok(_) => panic!("started with {why}"),
            Err(e) => e,
        };
        e
    };
    // missing files
    let e = refused("no cert file");
    assert!(e.contains("cert.pem") && e.contains("cannot read"), "{e}");
    // no certificate in the PEM
    let (cert, key) = write_pair(dir, &server_pair(&one));
    std::fs::write(&cert, "hello\n").unwrap();
    let e = refused("no certificate");
    assert!(
        e.contains("cert.pem") && e.contains("no certificate"),
        "{e}"
    );
    // a key that belongs to another certificate
    let a = server_pair(&one);
    let b = server_pair(&one);
    std::fs::write(&cert, &a.0).unwrap();
    std::fs::write(&key, &b.1).unwrap();
    let e = refused("a mismatched key");
    assert!(e.contains("key.pem") && e.contains("does not match"), "{e}");
    // no key in the key file
    std::fs::write(&key, &a.0).unwrap();
    let e = refused("no key");
    assert!(e.contains("key.pem") && e.contains("no private key"), "{e}");
}

/// The official Python client (streamcast, from the anchor venv) publishes and subscribes over
/// wss://, trusting the test CA through `SSL_CERT_FILE`; the rows match ours over ws://.
#[test]
fn the_official_client_over_wss() {
    let Some(py) = support::anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    write_pair(setup.tmp.path(), &server_pair(&ca));
    let tls_port = support::dead_port();
    let cfg = tls_config(&setup, &format!("listen = \"127.0.0.1:{tls_port}\""));
    let srv = start(&setup, &cfg);
    let script = r#"
import asyncio, json, sys
import streamcast

async def main(url, n):
    rows = [json.loads(line) for line in sys.stdin]
    async with streamcast.publish(url) as pub:
        offsets = await pub.send_many(rows)
    async with streamcast.connect(url, offset=0) as sub:
        for _ in range(n):
            async with asyncio.timeout(10):
                offset, ts, row = await sub.recv()
            print(offset, json.dumps(row, separators=(",", ":")))
    print("offsets", offsets[0], offsets[-1])

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"#;
    let mut child = Command::new(&py)
        .args(["-c", script, &wss(tls_port, "trades"), "50"])
        .env("SSL_CERT_FILE", &ca.pem)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rows(50).as_bytes())
        .unwrap();
    let o = child.wait_with_output().expect("python");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "official client over wss: {text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("offsets 1 50"), "{text}");
    let plain = corecast_run(
        &[
            "sub",
            &srv.url("trades"),
            "--offset",
            "earliest",
            "--count",
            "50",
        ],
        None,
        Duration::from_secs(30),
    );
    let ours: Vec<String> = plain
        .lines()
        .iter()
        .map(|l| {
            let (o, _, row) = split_frame(l);
            format!("{} {row}", o.unwrap())
        })
        .collect();
    let theirs: Vec<&str> = text.lines().filter(|l| !l.starts_with("offsets")).collect();
    assert_eq!(theirs.len(), 50);
    for (a, b) in theirs.iter().zip(&ours) {
        // the official client parses the row: compare as JSON values
        let (ao, arow) = a.split_once(' ').unwrap();
        let (bo, brow) = b.split_once(' ').unwrap();
        assert_eq!(ao, bo);
        let av: sonic_rs::Value = sonic_rs::from_str(arow).unwrap();
        let bv: sonic_rs::Value = sonic_rs::from_str(brow).unwrap();
        assert_eq!(av, bv);
    }
    srv.stop();
}

/// TLS and authentication together: the official client signs in with
/// `wss://alice:PASSWORD@localhost:PORT/trades` (HTTP Basic inside the TLS session), publishes and
/// reads back; a wrong password is refused 401 before the upgrade.
#[test]
fn the_official_client_signs_in_over_wss() {
    let Some(py) = support::anchor_python(&["CORECAST_REQUIRE_ANCHOR"]) else {
        return;
    };
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    write_pair(setup.tmp.path(), &server_pair(&ca));
    let password = "tls and basic together";
    let hashed = corecast_run(
        &["hash-password"],
        Some(password.as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(hashed.code, Some(0), "{hashed:?}");
    let cfg = tls_config(
        &setup,
        &format!(
            "\n[auth.principals.alice]\npassword = \"{}\"\ngrants = {{ \"data.read\" = [\"trades\"], \"data.publish\" = [\"trades\"] }}\n",
            hashed.stdout.trim()
        ),
    );
    let srv = start(&setup, &cfg);
    let port = srv.addr.port();
    let script = r#"
import asyncio, json, sys
from urllib.parse import quote
import streamcast

def status_of(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(getattr(exc, "response", None), "status_code", None)
        if code is not None:
            return code
        exc = exc.__cause__ or exc.__context__
    return None

async def main(port, password):
    url = f"wss://alice:{quote(password, safe='')}@localhost:{port}/trades"
    rows = [{"event_ts": 1, "price": 1.5, "amount": 2.0, "side": 1, "symbol": "TLSAUTH", "trade_id": i}
            for i in range(3)]
    async with streamcast.publish(url) as pub:
        offsets = await pub.send_many(rows)
    got = []
    async with streamcast.connect(url, offset=0) as sub:
        for _ in range(3):
            async with asyncio.timeout(10):
                got.append((await sub.recv())[2]["trade_id"])
    try:
        async with streamcast.connect(f"wss://alice:wrong@localhost:{port}/trades") as sub:
            wrong = "accepted"
    except Exception as e:
        wrong = status_of(e)
    print(json.dumps({"offsets": offsets, "got": got, "wrong": wrong}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;
    let o = Command::new(&py)
        .args(["-c", script, &port.to_string(), password])
        .env("SSL_CERT_FILE", &ca.pem)
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: sonic_rs::Value = sonic_rs::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(report["got"].to_string(), "[0,1,2]", "{text}");
    assert_eq!(report["offsets"].to_string(), "[1,2,3]", "{text}");
    assert_eq!(report["wrong"].to_string(), "401", "{text}");
    srv.stop();
}

/// Headless Chromium subscribes over wss:// with the test CA trusted (its key's SPKI hash in
/// `--ignore-certificate-errors-spki-list`, which Chromium matches against every certificate of
/// the chain the server presents: here the full chain, leaf then CA) and reports every row, in
/// order.
#[test]
fn chromium_subscribes_over_wss() {
    let Some(chrome) = support::chromium() else {
        assert!(
            std::env::var_os("CORECAST_REQUIRE_BROWSER").is_none(),
            "CORECAST_REQUIRE_BROWSER is set but no chromium is installed"
        );
        eprintln!("SKIPPED: no chromium (apt-get install -y chromium)");
        return;
    };
    let setup = Setup::new();
    let ca = ca(setup.tmp.path(), "one");
    // the full chain, leaf then CA: Chromium matches the trusted key against the chain presented
    let (leaf, key) = server_pair(&ca);
    let chain = leaf + &std::fs::read_to_string(&ca.pem).unwrap();
    write_pair(setup.tmp.path(), &(chain, key));
    let tls_port = support::dead_port();
    let cfg = tls_config(&setup, &format!("listen = \"127.0.0.1:{tls_port}\""));
    let srv = start(&setup, &cfg);
    let out = corecast_run(
        &["pub", &srv.url("trades"), "--quiet"],
        Some(rows(100).as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let page = format!(
        r#"<!doctype html><meta charset="utf-8"><script>
const ws = new WebSocket("wss://localhost:{tls_port}/trades?offset=0");
let n = 0, last = 0, bad = 0, greeted = false;
ws.onmessage = (e) => {{
  if (!greeted) {{ greeted = true; return; }}
  const f = JSON.parse(e.data);
  if (f[0] !== last + 1) bad++;
  last = f[0]; n++;
  if (n === 100) {{ fetch(`/report?done&n=${{n}}&bad=${{bad}}&last=${{last}}`); ws.close(); }}
}};
ws.onerror = () => fetch("/report?error");
</script>"#
    );
    let (page_addr, reports) = support::page_server(page);
    use sha2::Digest;
    let spki_hash = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        sha2::Sha256::digest(&ca.spki),
    );
    let profile = tempfile::tempdir().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let browser = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--ignore-certificate-errors-spki-list={spki_hash}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--remote-debugging-port=0")
        .arg(format!("http://{page_addr}/"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let _guard = Kill(browser);
    let report = reports
        .recv_timeout(Duration::from_secs(60))
        .expect("a report from the page within 60 s");
    assert_eq!(report, "/report?done&n=100&bad=0&last=100", "{report}");
    srv.stop();
}
