//! Crash recovery: a child process (this test binary, re-executed) group-commits batches of
//! random sizes from several exactly-once publishers and plain ones, and prints each
//! acknowledged batch; the parent kills it with SIGKILL at random moments, reopens the buffer
//! and checks that every acknowledged row holds its exact bytes, offsets are contiguous from 1,
//! and every publisher's seqs landed exactly once with its mark on the last of them.

use std::io::{BufRead, BufReader, Read, Write};
use std::ops::ControlFlow;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corecast_storage::log::{AppendBatch, BatchOutcome, Buffer, BufferReader};
use rand::Rng;

/// Set (to the stream directory) only in the child.
const CHILD_ENV: &str = "CORECAST_LOG_CRASH_CHILD_DIR";
const CHILD_TEST: &str = "crash_child";
const PUBLISHERS: [&str; 3] = ["p0", "p1", "p2"];
const ROUNDS: usize = 24;
/// SIGKILL's number (what `Child::kill` sends on Unix).
const SIGKILL: i32 = 9;

fn eo_payload(id: &str, seq: u64) -> Vec<u8> {
    let pad = "x".repeat((seq * 7 % 61) as usize);
    format!("{{\"pub\":\"{id}\",\"seq\":{seq},\"pad\":\"{pad}\"}}").into_bytes()
}

fn plain_payload(seed: u64, i: u64) -> Vec<u8> {
    let pad = "y".repeat(((seed ^ i) % 97) as usize);
    format!("{{\"pub\":\"-\",\"seed\":{seed},\"i\":{i},\"pad\":\"{pad}\"}}").into_bytes()
}

/// `(publisher, seq)` of an exactly-once payload, `None` for a plain one.
fn parse_payload(payload: &[u8]) -> Option<(&str, u64)> {
    let text = std::str::from_utf8(payload).unwrap();
    let rest = text.strip_prefix("{\"pub\":\"").unwrap();
    let (id, rest) = rest.split_once('"').unwrap();
    if id == "-" {
        return None;
    }
    let rest = rest.strip_prefix(",\"seq\":").unwrap();
    let (seq, _) = rest.split_once(',').unwrap();
    Some((id, seq.parse().unwrap()))
}

/// One acknowledged batch, as the child prints it:
/// `ack FIRST_OFFSET APPENDED PUBLISHER FIRST_NEW_SEQ` or `ack FIRST_OFFSET APPENDED - SEED`.
#[derive(Debug, Clone)]
struct Ack {
    first_offset: u64,
    appended: u64,
    publisher: Option<String>,
    /// The first new seq (exactly-once) or the payload seed (plain).
    seq_or_seed: u64,
}

impl Ack {
    fn parse(line: &str) -> Option<Ack> {
        let mut words = line.strip_prefix("ack ")?.split(' ');
        let ack = Ack {
            first_offset: words.next()?.parse().ok()?,
            appended: words.next()?.parse().ok()?,
            publisher: match words.next()? {
                "-" => None,
                id => Some(id.to_owned()),
            },
            seq_or_seed: words.next()?.parse().ok()?,
        };
        words.next().is_none().then_some(ack)
    }

    fn payload(&self, i: u64) -> Vec<u8> {
        match &self.publisher {
            Some(id) => eo_payload(id, self.seq_or_seed + i),
            None => plain_payload(self.seq_or_seed, i),
        }
    }
}

/// The child: appends forever, checking each outcome against its own bookkeeping, and prints
/// one line per acknowledged batch. Runs only when the parent sets [`CHILD_ENV`].
#[test]
#[ignore = "the child of crash_recovery_keeps_every_acknowledged_row, which runs it"]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut buffer = Buffer::open(Path::new(&dir), None).unwrap();
    let mut next_seq: Vec<u64> = PUBLISHERS
        .iter()
        .map(|id| {
            buffer
                .publisher_mark(id)
                .map_or(1, |mark| mark.last_seq + 1)
        })
        .collect();
    let mut rng = rand::rng();
    let mut stdout = std::io::stdout().lock();
    loop {
        // Build 1..=8 batches, with what each should answer.
        struct Planned {
            rows: Vec<Vec<u8>>,
            publisher: Option<(usize, u64)>,
            seed: u64,
            dups: u64,
            gap: bool,
        }
        let mut planned = Vec::new();
        for _ in 0..rng.random_range(1..=8) {
            let size: u64 = rng.random_range(1..=20);
            let kind = rng.random_range(0..=PUBLISHERS.len());
            if kind == PUBLISHERS.len() {
                let seed = rng.random::<u32>() as u64;
                planned.push(Planned {
                    rows: (0..size).map(|i| plain_payload(seed, i)).collect(),
                    publisher: None,
                    seed,
                    dups: 0,
                    gap: false,
                });
                continue;
            }
            let next = next_seq[kind];
            let (first_seq, gap) = if rng.random_bool(0.05) {
                (next + 1 + rng.random_range(1..5), true)
            } else if rng.random_bool(0.25) {
                (next - rng.random_range(0..next.min(40)), false) // resend an overlap
            } else {
                (next, false)
            };
            let dups = if gap { 0 } else { (next - first_seq).min(size) };
            if !gap {
                next_seq[kind] = next_seq[kind].max(first_seq + size);
            }
            planned.push(Planned {
                rows: (first_seq..first_seq + size)
                    .map(|seq| eo_payload(PUBLISHERS[kind], seq))
                    .collect(),
                publisher: Some((kind, first_seq)),
                seed: 0,
                dups,
                gap,
            });
        }
        let batches: Vec<AppendBatch<'_, Vec<u8>>> = planned
            .iter()
            .map(|plan| match plan.publisher {
                None => AppendBatch::plain(&plan.rows),
                Some((kind, first_seq)) => {
                    AppendBatch::exactly_once(&plan.rows, PUBLISHERS[kind], first_seq)
                }
            })
            .collect();
        let outcomes = buffer.append(&batches).unwrap();
        for (plan, outcome) in planned.iter().zip(&outcomes) {
            match outcome {
                BatchOutcome::Gap { .. } => assert!(plan.gap, "unplanned {outcome:?}"),
                BatchOutcome::Appended {
                    first_offset,
                    appended,
                    dup_offsets,
                    ..
                } => {
                    assert!(!plan.gap, "planned a gap, got {outcome:?}");
                    assert_eq!(dup_offsets.len() as u64, plan.dups);
                    assert_eq!(*appended as u64, plan.rows.len() as u64 - plan.dups);
                    if *appended == 0 {
                        continue;
                    }
                    let line = match plan.publisher {
                        None => format!("ack {first_offset} {appended} - {}\n", plan.seed),
                        Some((kind, first_seq)) => format!(
                            "ack {first_offset} {appended} {} {}\n",
                            PUBLISHERS[kind],
                            first_seq + plan.dups
                        ),
                    };
                    // One write per line: a pipe write under PIPE_BUF bytes is atomic.
                    stdout.write_all(line.as_bytes()).unwrap();
                    stdout.flush().unwrap();
                }
            }
        }
    }
}

/// Runs one child for `lifetime`, SIGKILLs it, and returns the acknowledgements it printed.
fn run_child(dir: &Path, lifetime: Duration) -> Vec<Ack> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut line = String::new();
        // Only whole lines count: a line cut by the kill has no newline.
        while stdout.read_line(&mut line).unwrap() > 0 {
            if line.ends_with('\n') {
                if let Some(ack) = Ack::parse(line.trim_end()) {
                    acks.push(ack);
                }
            }
            line.clear();
        }
        acks
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    std::thread::sleep(lifetime);
    let _ = child.kill(); // SIGKILL
    let status = child.wait().unwrap();
    let acks = lines.join().unwrap();
    let errors = errors.join().unwrap();
    assert_eq!(
        status.signal(),
        Some(SIGKILL),
        "the child must die by SIGKILL, not exit ({status}); stderr:\n{errors}"
    );
    acks
}

/// What the acknowledgements so far promise.
#[derive(Default)]
struct Acknowledged {
    /// The acknowledged bytes by offset − 1 (`None`: not acknowledged).
    rows: Vec<Option<Vec<u8>>>,
    /// Per publisher (index into [`PUBLISHERS`]), the last acknowledged seq.
    last_seq: [u64; PUBLISHERS.len()],
}

impl Acknowledged {
    fn add(&mut self, ack: &Ack) {
        for i in 0..ack.appended {
            let index = (ack.first_offset + i - 1) as usize;
            if self.rows.len() <= index {
                self.rows.resize(index + 1, None);
            }
            assert!(
                self.rows[index].is_none(),
                "offset {} acknowledged twice",
                index + 1
            );
            self.rows[index] = Some(ack.payload(i));
        }
        if let Some(id) = &ack.publisher {
            let publisher = PUBLISHERS.iter().position(|p| p == id).unwrap();
            self.last_seq[publisher] = ack.seq_or_seed + ack.appended - 1;
        }
    }
}

/// Reopens the log and checks it against every acknowledgement so far; returns the end offset.
fn check_log(dir: &Path, acknowledged: &Acknowledged, round: usize) -> u64 {
    let buffer = Buffer::open(dir, None).unwrap();
    let reader = BufferReader::open(dir).unwrap();
    let end_offset = buffer.end_offset();
    assert_eq!(reader.end_offset().unwrap(), end_offset);
    assert!(
        (acknowledged.rows.len() as u64) < end_offset,
        "round {round}: acknowledged offset {} lost (end_offset {end_offset})",
        acknowledged.rows.len()
    );

    // Offsets contiguous from 1, acknowledged rows byte for byte, and each publisher's seqs
    // 1, 2, 3 … each exactly once.
    let mut expect_offset = 1;
    let mut last = [(0_u64, 0_u64); PUBLISHERS.len()]; // (seq, offset) per publisher
    reader
        .scan_with(1, u64::MAX, usize::MAX, |offset, _ts, payload| {
            assert_eq!(
                offset, expect_offset,
                "round {round}: offsets contiguous from 1"
            );
            expect_offset += 1;
            if let Some(Some(expected)) = acknowledged.rows.get(offset as usize - 1) {
                assert_eq!(payload, expected, "round {round}: bytes at {offset}");
            }
            if let Some((id, seq)) = parse_payload(payload) {
                let publisher = PUBLISHERS.iter().position(|p| *p == id).unwrap();
                let previous = last[publisher].0;
                assert_eq!(seq, previous + 1, "round {round}: {id} at offset {offset}");
                last[publisher] = (seq, offset);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(
        expect_offset, end_offset,
        "round {round}: rows up to end_offset"
    );

    // Each mark is the last seq that landed: the last acknowledged one, or a later one whose
    // commit returned just before the kill (its rows are checked above to be seq-contiguous).
    for (publisher, id) in PUBLISHERS.iter().enumerate() {
        let mark = buffer.publisher_mark(id);
        assert_eq!(mark, reader.publisher_mark(id).unwrap());
        let (seq, offset) = last[publisher];
        if seq == 0 {
            assert_eq!(mark, None, "round {round}: {id}");
            continue;
        }
        let mark = mark.unwrap();
        assert_eq!(mark.last_seq, seq, "round {round}: {id}'s mark");
        assert_eq!(mark.last_offset, Some(offset), "round {round}: {id}'s mark");
        assert!(mark.last_seq >= acknowledged.last_seq[publisher]);
    }
    end_offset
}

#[test]
fn crash_recovery_keeps_every_acknowledged_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stream");
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut acknowledged = Acknowledged::default();
    let (mut batches, mut rows) = (0, 0);
    let mut unacknowledged_tails = 0;
    for round in 0..ROUNDS {
        let lifetime = Duration::from_millis(rng.random_range(5..250));
        let new_acks = run_child(&dir, lifetime);
        let acked_end = new_acks.last().map(|ack| ack.first_offset + ack.appended);
        for ack in &new_acks {
            acknowledged.add(ack);
            batches += 1;
            rows += ack.appended;
        }
        let end_offset = check_log(&dir, &acknowledged, round);
        if acked_end.is_some_and(|acked_end| acked_end < end_offset) {
            unacknowledged_tails += 1; // committed, killed before the ack was printed
        }
    }
    eprintln!(
        "{ROUNDS} kills, {} acknowledged batches ({rows} rows), {unacknowledged_tails} commits \
         durable but unacknowledged, {:?}",
        batches,
        started.elapsed()
    );
    assert!(rows > 0, "the children acknowledged nothing");
}
