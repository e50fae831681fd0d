//! Power loss: every row corecast acknowledged survives a power cut, byte for byte, at its offset.
//!
//! A plain `kill -9` proves little about durability: the page cache still holds every write the
//! broker made, synced or not. This test cuts the power instead, with
//! `../shared/tools/powerloss/dropfs.py`: a passthrough FUSE filesystem that remembers what each
//! file held at its last `fsync`/`fdatasync` and, when unmounted, rolls every file back to it.
//! So an acknowledgement sent before the data was synced shows up here as a lost row.
//!
//! Each round, on the same data (the log accumulates over the rounds):
//!
//! 1. mount dropfs over `BACKING` on `MOUNT`;
//! 2. start `corecast serve --data MOUNT/data` with one durable, exactly-once trade stream whose
//!    sealed tier works all the time (seal every 0.2 s or 16 KiB, 256 KiB hot segments evicted
//!    once sealed), so cuts land during seals, index updates and evictions too;
//! 3. publish, pipelined, for a random 0.3–1.5 s: plain publishers send batches with many frames
//!    in flight, exactly-once publishers (`?publisher=E1`, `E2`) send `[seq,[rows]]` frames and
//!    first resend whatever the previous round left unacknowledged (as a real client does), so
//!    the broker's dedupe is exercised on rows that may or may not have survived; every
//!    acknowledged offset and its exact row bytes are recorded (rows are sent in canonical form,
//!    `support::trade`, so what comes back must be the very bytes sent);
//! 4. `kill -9` the broker in the middle of that, then unmount dropfs: the power cut;
//! 5. restart corecast on `BACKING/data` — the plain filesystem, another path — and check,
//!    through the broker only (a WebSocket replay from `offset=0` and each exactly-once
//!    publisher's greeting mark), that
//!    * offsets run 1, 2, … `end_offset - 1` with none missing,
//!    * every acknowledged offset holds exactly the bytes sent for it,
//!    * every row the previous restart showed is still there, unchanged (nothing that recovered
//!      once is lost later),
//!    * every row is one some publisher sent,
//!    * each exactly-once publisher's rows are its seqs 1, 2, … M in order, with no duplicate and
//!      no hole, M is the greeting's `last_seq` (≥ the last seq acknowledged to it) and
//!      `last_offset` is the offset of seq M,
//!    * the broker logs no ERROR while reopening, and stops cleanly (exit 0).
//!
//! The test looks at no file of the data directory, so it holds unchanged for any storage layout
//! (the SQLite buffer, a segment log). Rows sent but never acknowledged may be gone or present.
//! It prints a line per round and its totals (rounds, rows acknowledged, rows held, missing,
//! files dropfs rolled back, seals and evictions before the cuts; the run fails if the sealed
//! tier never sealed or evicted). A round takes 1–12 s on 2 cores (the later ones replay
//! ~300,000 rows, mostly from Parquet segments, in a debug build), the 20 rounds about 100 s.
//! It does catch an early ack: with the SQLite buffer's `synchronous=FULL` turned to `OFF` it
//! fails in the first round, every acknowledged row gone and both exactly-once marks back at 0.
//!
//! Needs `/dev/fuse` and the rights to mount (root, or the setuid `fusermount3`), plus a Python
//! with mfusepy: `$CORECAST_DROPFS_PY`, else what `../shared/tools/powerloss/setup.sh` installs
//! and prints. Without FUSE it prints `skipped: …` and passes, unless `CI` is set or
//! `CORECAST_REQUIRE_POWERLOSS=1`, where it fails. `CORECAST_POWERLOSS_ROUNDS` (default 20) sets
//! the rounds, `CORECAST_POWERLOSS_SEED` (printed at the start) the publish times and batch sizes.
mod support;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sonic_rs::{JsonContainerTrait, JsonValueTrait};
use support::{split_frame, trade, Server, Setup, Ws};
use tungstenite::Message;

const CONFIG: &str = r#"
[[stream]]
name = "trades"
schema = "@trade"
durable = true
exactly_once = true
max_replay = "unlimited"
# small segments: every round rolls several times, so cuts land during rolls too
segment_bytes = 262144
# the sealed tier at work during every round: the oldest rows are cut into Parquet segments
# every 0.2 s (or 16 KiB), the hot segments below them evicted, so cuts land during seals,
# index updates and evictions too
seal_target_bytes = 16384
seal_every_s = 0.2
"#;

/// Plain (at-least-once) publishers, one connection each per round: their rows' `symbol`.
const PLAIN: &[&str] = &["P1", "P2", "P3"];
/// Exactly-once publisher ids, one connection each per round: their rows' `symbol`.
const EXACTLY_ONCE: &[&str] = &["E1", "E2"];

/// A row the test sends, `trade(trade_id, symbol)` (canonical: in schema column order, floats
/// in shortest form), kept as `(symbol, trade_id)`: a plain row's `trade_id` is unique, an
/// exactly-once row's is its seq.
type Key = (&'static str, i64);

fn row_of((symbol, id): Key) -> String {
    trade(id, symbol)
}

/// xorshift64*: enough randomness for timings and batch sizes, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Writes `line` to stderr past the test harness's capture (which only takes `print!` and
/// `eprint!`), so the figures show in a CI log of a passing run too.
fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Runs `cmd`, true when it exits 0 (output discarded).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn is_mounted(mnt: &Path) -> bool {
    succeeds(Command::new("mountpoint").arg("-q").arg(mnt))
}

/// Waits up to `timeout` for `child` to exit.
fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The Python that runs dropfs: `$CORECAST_DROPFS_PY`, else the one `setup.sh` installs.
fn dropfs_python() -> Result<PathBuf, String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse: this kernel or container offers no FUSE".into());
    }
    if let Some(py) = std::env::var_os("CORECAST_DROPFS_PY") {
        let py = PathBuf::from(py);
        return if py.exists() {
            Ok(py)
        } else {
            Err(format!(
                "CORECAST_DROPFS_PY={} does not exist",
                py.display()
            ))
        };
    }
    let setup = support::shared_dir().join("tools/powerloss/setup.sh");
    let out = Command::new(&setup)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", setup.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(py) if out.status.success() && !py.is_empty() => Ok(PathBuf::from(py)),
        _ => Err(format!(
            "{} failed ({}): {}",
            setup.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// A mounted dropfs. Dropping it unmounts (lazily if need be) and reaps the process, so a failing
/// test leaves no mount behind.
struct DropFs {
    mnt: PathBuf,
    child: Option<Child>,
    log: PathBuf,
}

impl DropFs {
    /// Mounts `backing` on `mnt` and waits (≤ 20 s) until it is a mount point.
    fn mount(py: &Path, backing: &Path, mnt: &Path, log: &Path) -> Result<DropFs, String> {
        let script = support::shared_dir().join("tools/powerloss/dropfs.py");
        let child = Command::new(py)
            .arg(&script)
            .arg(backing)
            .arg(mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).map_err(|e| format!("{}: {e}", log.display()))?)
            .spawn()
            .map_err(|e| format!("cannot start {} {}: {e}", py.display(), script.display()))?;
        let mut fs = DropFs {
            mnt: mnt.to_path_buf(),
            child: Some(child),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(mnt) {
            let exited = fs.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(st) = exited {
                fs.child = None;
                return Err(format!(
                    "dropfs exited ({st}) before mounting: {}",
                    fs.log_text()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "dropfs did not mount within 20 s: {}",
                    fs.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(fs)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// The power cut: unmounts (retrying ≤ 15 s while the dead broker's files are still being
    /// released), waits for dropfs to exit, and returns how many files it rolled back.
    fn power_cut(&mut self) -> Result<u64, String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let out = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .output()
                .map_err(|e| format!("cannot run fusermount3: {e}"))?;
            if out.status.success() {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "fusermount3 -u failed for 15 s: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut child = self.child.take().expect("dropfs is running");
        match wait_exit(&mut child, Duration::from_secs(30)) {
            Some(st) if st.success() => {}
            Some(st) => return Err(format!("dropfs exited with {st}: {}", self.log_text())),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("dropfs did not exit within 30 s of the unmount".into());
            }
        }
        let log = self.log_text();
        log.lines()
            .find_map(|l| {
                l.strip_prefix("dropfs: power loss: rolled back ")?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .ok_or_else(|| format!("dropfs did not report its roll-back: {log:?}"))
    }
}

impl Drop for DropFs {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) && !succeeds(Command::new("fusermount3").arg("-u").arg(&self.mnt))
        {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut child) = self.child.take() {
            if wait_exit(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Who publishes on a connection.
#[derive(Clone)]
enum Who {
    /// A plain publisher; its rows' `trade_id`s start at `first_id`.
    Plain { symbol: &'static str, first_id: i64 },
    /// An exactly-once publisher `id`, resuming at `from_seq` (the seq after the last one it was
    /// acknowledged); the row of seq s is `trade(s, id)`.
    Exactly { id: &'static str, from_seq: u64 },
}

/// What one publisher connection did until the broker died.
#[derive(Default)]
struct Outcome {
    /// `(offset, row)` of every row acknowledged with an offset.
    acked: Vec<(u64, Key)>,
    /// Plain: the `trade_id` of every row written to the socket.
    sent_ids: Vec<i64>,
    /// Plain: the `trade_id`s of rows written but not acknowledged.
    unacked_ids: Vec<i64>,
    /// Exactly-once: the greeting's `last_seq`.
    greeting_seq: Option<u64>,
    /// Exactly-once: the highest seq acknowledged (`from_seq - 1` if none).
    last_acked_seq: u64,
    /// Exactly-once: the highest seq written to the socket.
    sent_seq_hi: u64,
    /// Exactly-once: rows answered as duplicates.
    dups: u64,
    /// Replies that were neither `ok` nor expected.
    refusals: Vec<String>,
    /// How the connection ended (the broker was killed: a reset or EOF).
    end: String,
}

/// Reads the next text message.
fn read_text(ws: &mut Ws) -> Result<String, String> {
    loop {
        match ws.read().map_err(|e| e.to_string())? {
            Message::Text(t) => return Ok(t.to_string()),
            Message::Close(c) => return Err(format!("closed: {c:?}")),
            _ => continue,
        }
    }
}

fn connect(url: &str) -> Result<Ws, String> {
    let (ws, _) = tungstenite::connect(url).map_err(|e| format!("connect {url}: {e}"))?;
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        s.set_write_timeout(Some(Duration::from_secs(10))).ok();
        s.set_nodelay(true).ok();
    }
    Ok(ws)
}

/// The `publisher` mark `(last_seq, last_offset)` of an exactly-once publisher's greeting.
fn greeting_mark(greeting: &str) -> Result<(u64, Option<u64>), String> {
    let v: sonic_rs::Value =
        sonic_rs::from_str(greeting).map_err(|e| format!("greeting is not JSON ({e})"))?;
    let p = v
        .get("publisher")
        .ok_or_else(|| format!("no publisher mark in the greeting: {greeting}"))?;
    let seq = p
        .get("last_seq")
        .and_then(|s| s.as_u64())
        .ok_or_else(|| format!("no last_seq: {greeting}"))?;
    Ok((seq, p.get("last_offset").and_then(|o| o.as_u64())))
}

/// Publishes pipelined on `url` until the connection fails (the broker is killed) or `deadline`.
fn publish(url: &str, who: Who, seed: u64, deadline: Instant) -> Outcome {
    let mut out = Outcome::default();
    let mut rng = Rng(seed | 1);
    if let Who::Exactly { from_seq, .. } = who {
        out.last_acked_seq = from_seq - 1;
        out.sent_seq_hi = from_seq - 1;
    }
    let mut ws = match connect(url) {
        Ok(ws) => ws,
        Err(e) => {
            out.end = e;
            return out;
        }
    };
    let greeting = match read_text(&mut ws) {
        Ok(g) => g,
        Err(e) => {
            out.end = format!("no greeting: {e}");
            return out;
        }
    };
    let (window, max_batch) = match who {
        Who::Plain { .. } => (8, 4),
        Who::Exactly { .. } => (8, 3),
    };
    let (mut next_id, mut next_seq) = match &who {
        Who::Plain { first_id, .. } => (*first_id, 0),
        Who::Exactly { from_seq, .. } => {
            match greeting_mark(&greeting) {
                Ok((seq, _)) => out.greeting_seq = Some(seq),
                Err(e) => {
                    out.refusals.push(e);
                    return out;
                }
            }
            (0, *from_seq)
        }
    };
    // in flight: (first seq or trade_id, rows)
    let mut inflight: VecDeque<(i64, Vec<Key>)> = VecDeque::new();
    out.end = loop {
        if Instant::now() > deadline {
            break "deadline".into();
        }
        let mut failed = None;
        while inflight.len() < window {
            let n = rng.range(1, max_batch) as usize;
            let (first, rows, frame) = match &who {
                Who::Plain { symbol, .. } => {
                    let first = next_id;
                    next_id += n as i64;
                    let rows: Vec<Key> = (first..next_id).map(|i| (*symbol, i)).collect();
                    let text: Vec<String> = rows.iter().map(|k| row_of(*k)).collect();
                    let frame = if n == 1 && rng.range(0, 1) == 0 {
                        text[0].clone()
                    } else {
                        format!("[{}]", text.join(","))
                    };
                    out.sent_ids.extend(first..next_id);
                    (first, rows, frame)
                }
                Who::Exactly { id, .. } => {
                    let first = next_seq;
                    next_seq += n as u64;
                    let rows: Vec<Key> = (first..next_seq).map(|s| (*id, s as i64)).collect();
                    let text: Vec<String> = rows.iter().map(|k| row_of(*k)).collect();
                    let frame = if n == 1 {
                        format!("[{first},{}]", text[0])
                    } else {
                        format!("[{first},[{}]]", text.join(","))
                    };
                    out.sent_seq_hi = next_seq - 1;
                    (first as i64, rows, frame)
                }
            };
            if let Err(e) = ws.write(Message::text(frame)) {
                failed = Some(format!("write: {e}"));
                break;
            }
            inflight.push_back((first, rows));
        }
        if let Some(e) = failed {
            break e;
        }
        if let Err(e) = ws.flush() {
            break format!("flush: {e}");
        }
        let reply = match read_text(&mut ws) {
            Ok(r) => r,
            Err(e) => break format!("read: {e}"),
        };
        let (first, rows) = inflight.pop_front().expect("a frame in flight");
        let v: sonic_rs::Value = match sonic_rs::from_str(&reply) {
            Ok(v) => v,
            Err(_) => {
                out.refusals.push(reply);
                break "a reply that is not JSON".into();
            }
        };
        let Some(ok) = v.get("ok").and_then(|o| o.as_array()) else {
            out.refusals.push(reply);
            // an exactly-once stream answers gap to everything after a refusal: stop here
            break "a refusal".into();
        };
        if ok.len() != rows.len() {
            out.refusals
                .push(format!("{} rows sent, reply {reply}", rows.len()));
            break "a short reply".into();
        }
        let dup = v.get("dup").and_then(|d| d.as_u64()).unwrap_or(0);
        if matches!(who, Who::Plain { .. }) && dup != 0 {
            out.refusals
                .push(format!("dup on a plain publisher: {reply}"));
        }
        out.dups += dup;
        for (i, (off, row)) in ok.iter().zip(rows).enumerate() {
            match off.as_u64() {
                Some(o) => out.acked.push((o, row)),
                // a duplicate whose original offset the broker no longer remembers
                None if (i as u64) < dup => {}
                None => out.refusals.push(format!("row {i} has no offset: {reply}")),
            }
        }
        if let Who::Exactly { .. } = who {
            out.last_acked_seq = first as u64 + ok.len() as u64 - 1;
        }
    };
    for (first, rows) in inflight {
        if let Who::Plain { .. } = who {
            out.unacked_ids
                .extend(first..first + i64::try_from(rows.len()).expect("batch size"));
        }
    }
    out
}

/// One row of the log as the broker returns it.
struct Held {
    /// The row's JSON text; empty for an offset the replay skipped.
    row: String,
    /// Which row the test sent it is, when it is byte for byte one the test sends.
    key: Option<Key>,
}

/// Reads the whole log through a WebSocket replay from EARLIEST: `(end_offset, rows)`, with
/// `rows[i]` at offset `i + 1`. Offsets that do not follow on are reported in `problems`.
fn read_log(srv: &Server, problems: &mut Vec<String>) -> Result<(u64, Vec<Held>), String> {
    let mut ws = connect(&srv.url("trades?offset=0"))?;
    let g = read_text(&mut ws)?;
    let v: sonic_rs::Value = sonic_rs::from_str(&g).map_err(|e| format!("greeting: {e}"))?;
    let end = v
        .get("end_offset")
        .and_then(|e| e.as_u64())
        .ok_or_else(|| format!("no end_offset: {g}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rows = Vec::with_capacity(end as usize);
    let mut expect = 1;
    while expect < end {
        if Instant::now() > deadline {
            return Err(format!("replay stalled at offset {expect} of {end}"));
        }
        let f = read_text(&mut ws).map_err(|e| format!("replay at offset {expect}: {e}"))?;
        let (off, _ts, row) = split_frame(&f);
        let off = off.ok_or_else(|| format!("a frame with no offset: {f}"))?;
        if off != expect {
            problems.push(format!(
                "offsets not contiguous: got {off} where {expect} was next"
            ));
            if off < expect {
                return Err(format!("offset went back from {expect} to {off}"));
            }
            // keep the index = offset - 1 relation: the missing offsets hold nothing
            while expect < off {
                rows.push(Held {
                    row: String::new(),
                    key: None,
                });
                expect += 1;
            }
        }
        let r: sonic_rs::Value = sonic_rs::from_str(row).map_err(|e| format!("row {off}: {e}"))?;
        let symbol = r.get("symbol").and_then(|s| s.as_str()).unwrap_or_default();
        let key = PLAIN
            .iter()
            .chain(EXACTLY_ONCE)
            .find(|s| **s == symbol)
            .zip(r.get("trade_id").and_then(|t| t.as_i64()))
            .map(|(s, id)| (*s, id))
            .filter(|k| row_of(*k) == row);
        rows.push(Held {
            row: row.to_string(),
            key,
        });
        expect += 1;
    }
    let _ = ws.close(None);
    Ok((end, rows))
}

/// The mark an exactly-once publisher gets in its greeting when it connects now.
fn mark_of(srv: &Server, id: &str) -> Result<(u64, Option<u64>), String> {
    let mut ws = connect(&srv.url(&format!("trades?publish&publisher={id}")))?;
    let g = read_text(&mut ws)?;
    let _ = ws.close(None);
    let _ = read_text(&mut ws);
    greeting_mark(&g)
}

/// Everything one run learned, carried from round to round.
#[derive(Default)]
struct Totals {
    /// offset → the row acknowledged for it, over all rounds.
    acked: BTreeMap<u64, Key>,
    /// Every row the last restart showed, by offset - 1: none may change or go later.
    known: Vec<Key>,
    /// Plain rows' `trade_id`s ever written.
    sent_plain: HashSet<i64>,
    /// Exactly-once id → the last seq acknowledged to it.
    eo_acked: HashMap<&'static str, u64>,
    /// Exactly-once id → the mark the last restart reported.
    eo_mark: HashMap<&'static str, u64>,
    files_rolled_back: u64,
    /// Rows written but never acknowledged: how many were gone after the cut, and how many held.
    unacked_gone: u64,
    unacked_held: u64,
    dups: u64,
    /// Seals and hot-segment evictions the brokers on dropfs made before their kill.
    seals: u64,
    evictions: u64,
}

/// `(seals, evicted_segments)` of the `trades` stream's `/stats` tiers (since its start).
fn tier_counts(srv: &Server) -> (u64, u64) {
    let r = support::http_get(srv.addr, "/stats");
    let v: sonic_rs::Value = sonic_rs::from_slice(&r.body).unwrap_or_default();
    let tiers = v
        .get("streams")
        .and_then(|s| s.as_array())
        .and_then(|a| {
            a.iter()
                .find(|s| s.get("name").and_then(|n| n.as_str()) == Some("trades"))
        })
        .and_then(|s| s.get("tiers"));
    let n = |k: &str| {
        tiers
            .and_then(|t| t.get(k))
            .and_then(|x| x.as_u64())
            .unwrap_or(0)
    };
    (n("seals"), n("evicted_segments"))
}

#[test]
fn acknowledged_rows_survive_power_loss() {
    let required = std::env::var_os("CI").is_some()
        || std::env::var("CORECAST_REQUIRE_POWERLOSS").is_ok_and(|v| v == "1");
    let skip = |why: String| {
        assert!(
            !required,
            "the power-loss test must run here (CI or CORECAST_REQUIRE_POWERLOSS=1), but: {why}"
        );
        report(&format!("skipped: power-loss test: {why}"));
    };
    let py = match dropfs_python() {
        Ok(py) => py,
        Err(e) => return skip(e),
    };
    let rounds: u64 = std::env::var("CORECAST_POWERLOSS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CORECAST_POWERLOSS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    report(&format!(
        "powerloss: {rounds} rounds, CORECAST_POWERLOSS_SEED={seed}"
    ));
    let mut rng = Rng(seed | 1);

    let setup = Setup::new();
    let cfg = setup.config(CONFIG);
    let base = setup.tmp.path();
    let (backing, mnt, logs) = (base.join("backing"), base.join("mnt"), base.join("logs"));
    for d in [&backing, &mnt, &logs] {
        std::fs::create_dir_all(d).expect("mkdir");
    }

    let started = Instant::now();
    let mut t = Totals::default();
    for round in 1..=rounds {
        let round_start = Instant::now();
        // 1. the filesystem that can lose power
        let mut fs = match DropFs::mount(
            &py,
            &backing,
            &mnt,
            &logs.join(format!("dropfs.{round}.log")),
        ) {
            Ok(fs) => fs,
            Err(e) if round == 1 => return skip(format!("cannot mount dropfs: {e}")),
            Err(e) => panic!("round {round}: {e}"),
        };
        // 2. the broker on it
        let log_a = logs.join(format!("corecast.{round}.cut.log"));
        let mut srv = Server::start_logged(Some(&cfg), &mnt.join("data"), &log_a)
            .unwrap_or_else(|e| panic!("round {round}: corecast on dropfs: {e}"));
        // 3. pipelined publishers, until the power goes
        let publish_for = Duration::from_millis(rng.range(300, 1500));
        let deadline = Instant::now() + publish_for + Duration::from_secs(30);
        let mut whos = Vec::new();
        for (c, symbol) in (1..).zip(PLAIN) {
            // unique over the run: 10 million ids per connection and round
            let first_id = i64::try_from(round * 100_000_000 + c * 10_000_000).expect("id");
            whos.push(Who::Plain { symbol, first_id });
        }
        for id in EXACTLY_ONCE {
            let from_seq = t.eo_acked.get(id).copied().unwrap_or(0) + 1;
            whos.push(Who::Exactly { id, from_seq });
        }
        let threads: Vec<_> = whos
            .into_iter()
            .map(|who| {
                let url = match &who {
                    Who::Plain { .. } => srv.url("trades?publish"),
                    Who::Exactly { id, .. } => srv.url(&format!("trades?publish&publisher={id}")),
                };
                let s = rng.next();
                let w = who.clone();
                (
                    who,
                    std::thread::spawn(move || publish(&url, w, s, deadline)),
                )
            })
            .collect();
        std::thread::sleep(publish_for);
        let (seals, evictions) = tier_counts(&srv);
        t.seals += seals;
        t.evictions += evictions;
        // 4. kill -9, then the power cut
        let _ = srv.child.kill();
        assert!(
            wait_exit(&mut srv.child, Duration::from_secs(20)).is_some(),
            "round {round}: corecast did not die within 20 s of SIGKILL"
        );
        let outcomes: Vec<(Who, Outcome)> = threads
            .into_iter()
            .map(|(who, h)| (who, h.join().expect("publisher thread")))
            .collect();
        drop(srv);
        let rolled_back = fs
            .power_cut()
            .unwrap_or_else(|e| panic!("round {round}: power cut: {e}"));
        drop(fs);
        t.files_rolled_back += rolled_back;

        // what this round's publishers were told
        let mut problems = Vec::new();
        let mut acked_now = 0u64;
        let mut unacked_plain = Vec::new();
        let mut eo_sent_hi = HashMap::new();
        for (who, o) in &outcomes {
            problems.extend(o.refusals.iter().map(|r| format!("unexpected reply: {r}")));
            if o.end == "deadline" {
                problems.push("a publisher's connection outlived the killed broker by 30 s".into());
            }
            acked_now += o.acked.len() as u64;
            for (off, key) in &o.acked {
                if let Some(before) = t.acked.insert(*off, *key) {
                    if before != *key {
                        problems.push(format!(
                            "offset {off} acknowledged twice, for {} and for {}",
                            row_of(before),
                            row_of(*key)
                        ));
                    }
                }
            }
            t.dups += o.dups;
            match who {
                Who::Plain { .. } => {
                    t.sent_plain.extend(&o.sent_ids);
                    unacked_plain.extend(&o.unacked_ids);
                }
                Who::Exactly { id, from_seq } => {
                    if let Some(g) = o.greeting_seq {
                        let want = t.eo_mark.get(*id).copied().unwrap_or(0);
                        if g != want {
                            problems.push(format!(
                                "{id}: greeting on dropfs said last_seq {g}, the last restart said {want}"
                            ));
                        }
                    }
                    debug_assert!(o.last_acked_seq + 1 >= *from_seq);
                    t.eo_acked.insert(id, o.last_acked_seq);
                    eo_sent_hi.insert(*id, o.sent_seq_hi);
                }
            }
        }

        // 5. restart on the plain filesystem, at another path, and check through the broker
        let log_b = logs.join(format!("corecast.{round}.restart.log"));
        let srv = Server::start_logged(Some(&cfg), &backing.join("data"), &log_b)
            .unwrap_or_else(|e| panic!("round {round}: corecast after the power cut: {e}"));
        let (end, held) = read_log(&srv, &mut problems)
            .unwrap_or_else(|e| panic!("round {round}: reading the log back: {e}"));
        let mut missing = Vec::new();
        for (off, key) in &t.acked {
            match held.get(*off as usize - 1) {
                Some(h) if h.key == Some(*key) => {}
                Some(h) if h.row.is_empty() => missing.push(*off),
                Some(h) => problems.push(format!(
                    "offset {off} holds {} but {} was acknowledged for it",
                    h.row,
                    row_of(*key)
                )),
                None => missing.push(*off),
            }
        }
        if !missing.is_empty() {
            problems.push(format!(
                "{} acknowledged row(s) missing (end_offset {end}): offsets {}",
                missing.len(),
                ranges(&missing)
            ));
        }
        for (i, key) in t.known.iter().enumerate() {
            match held.get(i) {
                Some(h) if h.key == Some(*key) => {}
                other => {
                    problems.push(format!(
                        "offset {} held {} at the last restart, now {:?}",
                        i + 1,
                        row_of(*key),
                        other.map(|h| &h.row)
                    ));
                    break;
                }
            }
        }
        // every row is one a publisher sent; each exactly-once id's seqs run 1..=M
        let mut eo_seqs: HashMap<&str, (u64, u64)> = HashMap::new(); // id → (M, offset of M)
        let mut held_plain = HashSet::new();
        for (i, h) in held.iter().enumerate() {
            let off = i as u64 + 1;
            match h.key {
                _ if h.row.is_empty() => {}
                None => problems.push(format!(
                    "offset {off} holds a row no publisher sent: {}",
                    h.row
                )),
                Some((id, seq)) if EXACTLY_ONCE.contains(&id) => {
                    let (m, at) = eo_seqs.entry(id).or_insert((0, 0));
                    if seq as u64 != *m + 1 {
                        problems.push(format!(
                            "{id}: offset {off} holds seq {seq} after seq {m} (a duplicate or a hole)"
                        ));
                    }
                    *m = seq as u64;
                    *at = off;
                }
                Some((_, id)) => {
                    if !t.sent_plain.contains(&id) {
                        problems.push(format!("offset {off} holds a row never sent: {}", h.row));
                    }
                    held_plain.insert(id);
                }
            }
        }
        for id in EXACTLY_ONCE {
            let (m, at) = eo_seqs.get(id).copied().unwrap_or((0, 0));
            let acked = t.eo_acked.get(*id).copied().unwrap_or(0);
            match mark_of(&srv, id) {
                Ok((seq, last_off)) => {
                    if seq != m || (m > 0 && last_off != Some(at)) {
                        problems.push(format!(
                            "{id}: greeting mark last_seq {seq} last_offset {last_off:?}, but the log holds seqs 1..={m} (seq {m} at offset {at})"
                        ));
                    }
                    if seq < acked {
                        problems.push(format!(
                            "{id}: greeting mark last_seq {seq} is below seq {acked}, which was acknowledged"
                        ));
                    }
                }
                Err(e) => problems.push(format!("{id}: {e}")),
            }
            let hi = eo_sent_hi.get(*id).copied().unwrap_or(acked);
            if hi > acked {
                let held_above = m.saturating_sub(acked).min(hi - acked);
                t.unacked_held += held_above;
                t.unacked_gone += hi - acked - held_above;
            }
            t.eo_mark.insert(id, m);
        }
        for id in &unacked_plain {
            if held_plain.contains(id) {
                t.unacked_held += 1;
            } else {
                t.unacked_gone += 1;
            }
        }
        let restart_log = std::fs::read_to_string(&log_b).unwrap_or_default();
        for l in restart_log.lines().filter(|l| l.contains("ERROR")) {
            problems.push(format!("the restarted broker logged: {l}"));
        }
        let code = srv.stop();
        if code != Some(0) {
            problems.push(format!("the restarted broker exited with {code:?}"));
        }
        if problems.len() > 30 {
            let more = problems.len() - 30;
            problems.truncate(30);
            problems.push(format!("… and {more} more"));
        }
        assert!(
            problems.is_empty(),
            "round {round} (seed {seed}): the power cut lost or changed data:\n  {}\n\
             the broker's log before the cut:\n{}\nthe broker's log after the cut:\n{}",
            problems.join("\n  "),
            std::fs::read_to_string(&log_a).unwrap_or_default(),
            restart_log,
        );
        t.known = held.into_iter().map(|h| h.key.expect("checked")).collect();
        report(&format!(
            "powerloss: round {round:>2}: published {:>4} ms, acknowledged {acked_now:>5} rows, log holds {:>6} rows, {seals} seals and {evictions} evictions before the cut, dropfs rolled back {rolled_back} file(s), marks {}; {:.1} s",
            publish_for.as_millis(),
            end - 1,
            EXACTLY_ONCE
                .iter()
                .map(|id| format!("{id}={}", t.eo_mark[*id]))
                .collect::<Vec<_>>()
                .join(" "),
            round_start.elapsed().as_secs_f64(),
        ));
    }
    let held = t.known.len();
    report(&format!(
        "powerloss: {rounds} rounds in {:.1} s: {} rows acknowledged, {held} rows in the log, \
         0 missing; dropfs rolled back {} file(s) in total; rows sent but never acknowledged: \
         {} gone, {} held anyway; {} exactly-once resends answered as duplicates; {} seals and {} \
         hot-segment evictions before the cuts",
        started.elapsed().as_secs_f64(),
        t.acked.len(),
        t.files_rolled_back,
        t.unacked_gone,
        t.unacked_held,
        t.dups,
        t.seals,
        t.evictions,
    ));
    assert!(
        t.seals > 0 && t.evictions > 0,
        "the sealed tier never sealed or evicted during the rounds ({} seals, {} evictions)",
        t.seals,
        t.evictions
    );
    assert!(!t.acked.is_empty(), "no row was ever acknowledged");
    assert!(
        t.files_rolled_back > 0,
        "dropfs never rolled anything back: the cuts did not hit writes in flight"
    );
}

/// `[1, 2, 3, 7, 9, 10]` → `1-3, 7, 9-10`.
fn ranges(offs: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < offs.len() {
        let mut j = i;
        while j + 1 < offs.len() && offs[j + 1] == offs[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            offs[i].to_string()
        } else {
            format!("{}-{}", offs[i], offs[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}
