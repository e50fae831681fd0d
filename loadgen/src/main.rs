//! `loadgen`: publishers and subscribers against a protocol-4 broker on loopback, with latency
//! histograms, server CPU and memory from `/proc`, and a loss check that fails the run loudly.
//!
//! Every client thread runs its own io_uring runtime (`corecast_net::rt`), holding a share of the
//! publishers and subscribers. Subscribers connect first; publishing starts once every connection
//! has its greeting, so each live subscriber must receive every acknowledged offset exactly once
//! and in order.

mod nats;
mod notify;
mod procstat;
mod publisher;
mod raw;
mod report;
mod shared;
mod subscriber;
mod wsclient;

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use corecast_net::rt::{self, WriteHalf};
use hdrhistogram::Histogram;
use sonic_rs::{JsonContainerTrait, JsonValueTrait};

use crate::publisher::{PubPlan, PubResult};
use crate::shared::{Epoch, Shared};
use crate::subscriber::{SubConfig, SubResult, SubState};
use crate::wsclient::{close_frame, Keys};

/// Load generator for corecast and any streamcast protocol 4 broker (loopback only).
#[derive(Parser, Clone, Debug)]
#[command(
    name = "loadgen",
    after_help = "Examples:\n  loadgen --url ws://127.0.0.1:8765/trades --publishers 1 --window 64 --batch 100 --duration 5 --json\n  loadgen --url ws://127.0.0.1:8765/trades --subscribers 1000 --rate 10000 --duration 5 --server-pid PID\n  loadgen --url ws://127.0.0.1:8765/trades --publishers 0 --subscribers 1 --offset earliest --json"
)]
pub struct Args {
    /// ws://127.0.0.1:PORT/STREAM or wss://localhost:PORT/STREAM (loopback only).
    #[arg(long)]
    pub url: String,
    /// Publisher connections.
    #[arg(long, default_value_t = 1)]
    pub publishers: usize,
    /// Frames in flight per publisher.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// Rows per publish frame (1: a plain row object; more: a JSON array).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Total rows per second over all publishers (absent: as fast as the windows allow).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Subscriber connections.
    #[arg(long, default_value_t = 0)]
    pub subscribers: usize,
    /// Pace publishers so that the slowest subscriber is at most this many rows behind what was
    /// sent (acknowledged offsets plus rows in flight): a closed-loop maximum, the fastest rate
    /// every subscriber keeps up with. Absent: publish as fast as the windows allow, and a
    /// subscriber that falls behind the server's `max_backlog` is closed (4429).
    #[arg(long)]
    pub max_lag: Option<u64>,
    /// Client threads, each with its own io_uring runtime.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seconds of publishing (or, with no publishers, of subscribing).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Rows to publish in total.
    #[arg(long)]
    pub rows: Option<u64>,
    /// Subscribe from this offset (`earliest` = 0): a replay run.
    #[arg(long)]
    pub offset: Option<String>,
    /// `where=` filter for subscribers (a JSON object); the loss check then checks order only.
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// The server's pid: its CPU time and RSS are read from /proc.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Print one JSON document at the end instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// Record the latency of one row in SAMPLE (by offset) per subscriber.
    #[arg(long, default_value_t = 16)]
    pub sample: u64,
    /// Seconds allowed, after publishing stops, for acks and deliveries to arrive.
    #[arg(long, default_value_t = 10.0)]
    pub drain: f64,
    /// For a wss:// URL: trust the CA certificates in this PEM file instead of the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// Upper bound on the whole run in seconds (connects, publishing, drain).
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    /// An `Authorization` header value sent on every upgrade (e.g. `Bearer TOKEN`); also
    /// `LOADGEN_AUTHORIZATION`, which keeps it out of `ps`.
    #[arg(long, env = "LOADGEN_AUTHORIZATION", hide_env_values = true)]
    pub authorization: Option<String>,
    /// The broker's protocol: `corecast` (streamcast protocol 4), `nats` (a NATS server's
    /// WebSocket listener; the URL's path is the subject; at most one publisher) or `raw` (a
    /// plain WebSocket pub/sub server, e.g. bench/peers/uws/server.js: the URL's path is the
    /// topic, rows are numbered by the one publisher; see loadgen/src/raw.rs).
    #[arg(long, value_enum, default_value_t = Protocol::Corecast)]
    pub protocol: Protocol,
    /// With `--protocol nats`: publish to JetStream (creates the stream, file storage, when
    /// missing) and count a row acknowledged when its JetStream PubAck arrives; subscribers
    /// each read through their own push consumer (delivery after the row is stored).
    #[arg(long)]
    pub nats_jetstream: bool,
}

/// What `--protocol` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Corecast,
    Nats,
    Raw,
}

struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
    /// wss://: the TLS dialer.
    tls: Option<corecast_net::client::tls::TlsDial>,
    authorization: Option<String>,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let (rest, tls) = match (url.strip_prefix("ws://"), url.strip_prefix("wss://")) {
        (Some(r), _) => (r, false),
        (None, Some(r)) => (r, true),
        _ => {
            return Err(format!(
                "{url:?}: only ws:// and wss:// URLs (loopback) are supported"
            ))
        }
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if path.contains('?') {
        return Err("give the stream URL without a query; use --offset / --where".into());
    }
    let (host, port) = if let Some(h) = authority.strip_prefix('[') {
        let end = h.find(']').ok_or("bad IPv6 host")?;
        (&h[..end], h[end + 1..].strip_prefix(':').unwrap_or("80"))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (authority, "80"),
        }
    };
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse()
            .map_err(|_| format!("{host:?}: loadgen only dials loopback addresses"))?
    };
    if !ip.is_loopback() {
        return Err(format!(
            "{ip} is not a loopback address: loadgen refuses to load other hosts"
        ));
    }
    let tls = if tls {
        Some(corecast_net::client::tls::TlsDial::new(host).map_err(|e| e.to_string())?)
    } else {
        None
    };
    Ok(Target {
        addr: SocketAddr::new(ip, port),
        host: authority.to_string(),
        path: path.to_string(),
        tls,
        authorization: None,
    })
}

fn pct_encode(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// One subscriber's end state, gathered per thread.
pub struct SubOutcome {
    pub result: SubResult,
    pub start: u64,
    pub next: u64,
    pub replay_end: u64,
    pub connect_at: Instant,
    pub greeting_us: u64,
    pub replay_done_at: Option<Instant>,
}

#[derive(Default)]
pub struct ThreadOut {
    pub pubs: Vec<PubResult>,
    pub subs: Vec<SubOutcome>,
    pub open_errors: Vec<String>,
    pub latency: Option<Histogram<u64>>,
    pub greeting: Option<Histogram<u64>>,
    pub hit_deadline: bool,
}

struct ThreadPlan {
    tid: usize,
    pubs: Vec<PubPlan>,
    subs: usize,
    sub_path: String,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

fn thread_main(
    plan: ThreadPlan,
    args: Arc<Args>,
    target: Arc<Target>,
    shared: Arc<Shared>,
    deadline: Instant,
) -> ThreadOut {
    let mut runtime = match rt::build_runtime(4096) {
        Ok(r) => r,
        Err(e) => {
            shared.abort.store(true, Relaxed);
            return ThreadOut {
                open_errors: vec![format!("runtime: {e}")],
                ..ThreadOut::default()
            };
        }
    };
    runtime.block_on(thread_body(plan, args, target, shared, deadline))
}

struct SubSlot {
    st: Rc<SubState>,
    wr: Option<WriteHalf>,
    closed: bool,
}

/// A subscriber that ran to its end: counted as done, its outcome kept for the report.
fn sub_finished(shared: &Shared, out: &RefCell<ThreadOut>, outcome: SubOutcome) {
    shared.subs_done.fetch_add(1, AcqRel);
    out.borrow_mut().subs.push(outcome);
}

/// A subscriber whose connection could not open: counted, the run aborted, the error kept
/// (`who` names the kind of connection).
fn open_failed(shared: &Shared, out: &RefCell<ThreadOut>, who: &str, e: impl std::fmt::Display) {
    shared.open_failed.fetch_add(1, AcqRel);
    shared.abort.store(true, Relaxed);
    out.borrow_mut().open_errors.push(format!("{who}: {e}"));
}

/// Registers a subscriber that got its greeting (corecast) or its subscription (NATS): its
/// state from `start` with replay up to `replay_end`, its write half for the final close, its
/// greeting time, and its slot on the lag board.
#[allow(clippy::too_many_arguments)]
fn attach_sub(
    shared: &Shared,
    slots: &RefCell<Vec<SubSlot>>,
    out: &RefCell<ThreadOut>,
    wr: WriteHalf,
    (start, replay_end): (u64, u64),
    greeting_us: u64,
    (filtered, sample): (bool, u64),
) -> (Rc<SubState>, SubConfig) {
    let st = Rc::new(SubState {
        next: start.into(),
        replay_end: replay_end.into(),
        replay_done_at: None.into(),
        finished: false.into(),
        pong: RefCell::new(Vec::new()),
    });
    slots.borrow_mut().push(SubSlot {
        st: st.clone(),
        wr: Some(wr),
        closed: false,
    });
    if let Some(h) = out.borrow_mut().greeting.as_mut() {
        h.saturating_record(greeting_us);
    }
    shared.opened.fetch_add(1, AcqRel);
    let slot = shared.take_sub_slot(start);
    (
        st,
        SubConfig {
            filtered,
            sample,
            slot,
        },
    )
}

async fn thread_body(
    plan: ThreadPlan,
    args: Arc<Args>,
    target: Arc<Target>,
    shared: Arc<Shared>,
    deadline: Instant,
) -> ThreadOut {
    let out = Rc::new(RefCell::new(ThreadOut {
        latency: Some(hist()),
        greeting: Some(hist()),
        ..ThreadOut::default()
    }));
    let lat = Rc::new(RefCell::new(hist()));
    let slots: Rc<RefCell<Vec<SubSlot>>> = Rc::new(RefCell::new(Vec::new()));
    let tasks = plan.pubs.len() + plan.subs;
    let done = Rc::new(std::cell::Cell::new(0usize));
    let connect_limit = Duration::from_secs(30);
    let seed = (plan.tid as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ shared::now_us() as u64;

    for (i, pp) in plan.pubs.into_iter().enumerate() {
        let (shared, target, out, done) =
            (shared.clone(), target.clone(), out.clone(), done.clone());
        if args.protocol == Protocol::Nats {
            let jetstream = args.nats_jetstream;
            rt::spawn(async move {
                let mut keys = Keys::new(seed.wrapping_add(1000 + i as u64));
                let subject = nats::subject_of(&target.path).expect("checked in run");
                let setup = nats::pub_setup(&subject, pp.id, jetstream);
                let opened = nats::open(&target, &mut keys, connect_limit, &setup, jetstream)
                    .await
                    .and_then(|(o, reply)| match reply {
                        Some(r) => nats::check_stream_reply(&r).map(|()| o),
                        None => Ok(o),
                    });
                match opened {
                    Ok(o) => {
                        shared.opened.fetch_add(1, AcqRel);
                        if shared::wait_until(&shared, Duration::from_millis(1), || {
                            shared.go.get().is_some()
                        })
                        .await
                        {
                            let wire = if jetstream {
                                nats::Wire::JetStream
                            } else {
                                nats::Wire::Core
                            };
                            let r = nats::run_pub(pp, shared.clone(), o, keys, subject, wire).await;
                            out.borrow_mut().pubs.push(r);
                        } else {
                            shared.pubs_active.fetch_sub(1, AcqRel);
                        }
                    }
                    Err(e) => {
                        shared.open_failed.fetch_add(1, AcqRel);
                        shared.pubs_active.fetch_sub(1, AcqRel);
                        shared.abort.store(true, Relaxed);
                        out.borrow_mut().open_errors.push(format!("publisher: {e}"));
                    }
                }
                done.set(done.get() + 1);
            });
            continue;
        }
        let raw = args.protocol == Protocol::Raw;
        rt::spawn(async move {
            let mut keys = Keys::new(seed.wrapping_add(1000 + i as u64));
            let path = format!("{}?publish", target.path);
            let opened = wsclient::open(
                target.addr,
                target.tls.as_ref(),
                &target.host,
                &path,
                target.authorization.as_deref(),
                &mut keys,
                connect_limit,
            )
            .await
            .and_then(|o| {
                if raw {
                    raw::check_greeting(&o.greeting, "publisher", &target.path)?;
                }
                Ok(o)
            });
            match opened {
                Ok(o) => {
                    shared.opened.fetch_add(1, AcqRel);
                    if shared::wait_until(&shared, Duration::from_millis(1), || {
                        shared.go.get().is_some()
                    })
                    .await
                    {
                        let r = if raw {
                            let o = nats::Opened {
                                rd: o.rd,
                                wr: o.wr,
                                buf: o.buf,
                                proto: Vec::new(),
                            };
                            nats::run_pub(
                                pp,
                                shared.clone(),
                                o,
                                keys,
                                String::new(),
                                nats::Wire::Raw,
                            )
                            .await
                        } else {
                            publisher::run(pp, shared.clone(), o.rd, o.wr, o.buf, keys).await
                        };
                        out.borrow_mut().pubs.push(r);
                    } else {
                        shared.pubs_active.fetch_sub(1, AcqRel);
                    }
                }
                Err(e) => {
                    shared.open_failed.fetch_add(1, AcqRel);
                    shared.pubs_active.fetch_sub(1, AcqRel);
                    shared.abort.store(true, Relaxed);
                    out.borrow_mut().open_errors.push(format!("publisher: {e}"));
                }
            }
            done.set(done.get() + 1);
        });
    }
    for i in 0..plan.subs {
        let (shared, target, out, done, slots, lat) = (
            shared.clone(),
            target.clone(),
            out.clone(),
            done.clone(),
            slots.clone(),
            lat.clone(),
        );
        let path = plan.sub_path.clone();
        let filtered = args.where_.is_some();
        let sample = args.sample;
        if args.protocol == Protocol::Nats {
            let jetstream = args.nats_jetstream;
            let sub_id = 1_000_000 + plan.tid * 100_000 + i;
            rt::spawn(async move {
                let mut keys = Keys::new(seed.wrapping_add(i as u64));
                let connect_at = Instant::now();
                let subject = nats::subject_of(&target.path).expect("checked in run");
                let opened = if jetstream {
                    // the stream (created here too: subscribers may connect before the
                    // publisher), then a push consumer delivering to this connection's inbox
                    let ib = nats::inbox(sub_id);
                    let setup = nats::js_sub_setup(&subject, sub_id);
                    match nats::open(&target, &mut keys, connect_limit, &setup, true).await {
                        Ok((mut o, reply)) => {
                            match nats::check_stream_reply(&reply.unwrap_or_default()) {
                                Ok(()) => {
                                    let (subj, body) = nats::consumer_request(&subject, &ib);
                                    let reply = format!("{ib}.consumer");
                                    nats::request(
                                        &mut o,
                                        &mut keys,
                                        &subj,
                                        &reply,
                                        &body,
                                        connect_limit,
                                    )
                                    .await
                                    .and_then(|r| nats::check_consumer_reply(&r))
                                    .map(|()| (o, None))
                                }
                                Err(e) => Err(e),
                            }
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    nats::open(
                        &target,
                        &mut keys,
                        connect_limit,
                        &nats::sub_setup(&subject),
                        false,
                    )
                    .await
                };
                match opened {
                    Ok((o, _)) => {
                        // the subscription is registered (its PONG came back): it must see
                        // every row from seq 1 on
                        let greeting_us = connect_at.elapsed().as_micros() as u64;
                        let (st, cfg) = attach_sub(
                            &shared,
                            &slots,
                            &out,
                            o.wr,
                            (1, 1),
                            greeting_us,
                            (filtered, sample),
                        );
                        let r = nats::run_sub(
                            cfg,
                            shared.clone(),
                            st.clone(),
                            o.rd,
                            o.buf,
                            o.proto,
                            lat,
                        )
                        .await;
                        sub_finished(
                            &shared,
                            &out,
                            SubOutcome {
                                result: r,
                                start: 1,
                                next: st.next.get(),
                                replay_end: 1,
                                connect_at,
                                greeting_us,
                                replay_done_at: None,
                            },
                        );
                    }
                    Err(e) => {
                        open_failed(&shared, &out, "subscriber", e);
                    }
                }
                done.set(done.get() + 1);
            });
            continue;
        }
        if args.protocol == Protocol::Raw {
            rt::spawn(async move {
                let mut keys = Keys::new(seed.wrapping_add(i as u64));
                let connect_at = Instant::now();
                let opened = wsclient::open(
                    target.addr,
                    target.tls.as_ref(),
                    &target.host,
                    &path,
                    target.authorization.as_deref(),
                    &mut keys,
                    connect_limit,
                )
                .await
                .and_then(|o| {
                    raw::check_greeting(&o.greeting, "subscribed", &target.path)?;
                    Ok(o)
                });
                match opened {
                    Ok(o) => {
                        // subscribed (its greeting came after the subscription): it must see
                        // every row from seq 1 on
                        let greeting_us = connect_at.elapsed().as_micros() as u64;
                        let (st, cfg) = attach_sub(
                            &shared,
                            &slots,
                            &out,
                            o.wr,
                            (1, 1),
                            greeting_us,
                            (filtered, sample),
                        );
                        let r =
                            raw::run_sub(cfg, shared.clone(), st.clone(), o.rd, o.buf, lat).await;
                        sub_finished(
                            &shared,
                            &out,
                            SubOutcome {
                                result: r,
                                start: 1,
                                next: st.next.get(),
                                replay_end: 1,
                                connect_at,
                                greeting_us,
                                replay_done_at: None,
                            },
                        );
                    }
                    Err(e) => {
                        open_failed(&shared, &out, "subscriber", e);
                    }
                }
                done.set(done.get() + 1);
            });
            continue;
        }
        rt::spawn(async move {
            let mut keys = Keys::new(seed.wrapping_add(i as u64));
            let connect_at = Instant::now();
            match wsclient::open(
                target.addr,
                target.tls.as_ref(),
                &target.host,
                &path,
                target.authorization.as_deref(),
                &mut keys,
                connect_limit,
            )
            .await
            {
                Ok(o) => {
                    let greeting_us = connect_at.elapsed().as_micros() as u64;
                    let g = &o.greeting;
                    let end_offset = g.get("end_offset").and_then(|v| v.as_u64()).unwrap_or(0);
                    let (start, replay_end) = match g.get("replay").and_then(|v| v.as_array()) {
                        Some(a) if a.len() == 2 => {
                            (a[0].as_u64().unwrap_or(0), a[1].as_u64().unwrap_or(0))
                        }
                        _ => (end_offset, end_offset),
                    };
                    let (st, cfg) = attach_sub(
                        &shared,
                        &slots,
                        &out,
                        o.wr,
                        (start, replay_end),
                        greeting_us,
                        (filtered, sample),
                    );
                    let r =
                        subscriber::run(cfg, shared.clone(), st.clone(), o.rd, o.buf, lat).await;
                    sub_finished(
                        &shared,
                        &out,
                        SubOutcome {
                            result: r,
                            start,
                            next: st.next.get(),
                            replay_end,
                            connect_at,
                            greeting_us,
                            replay_done_at: st.replay_done_at.get(),
                        },
                    );
                }
                Err(e) => {
                    open_failed(&shared, &out, "subscriber", e);
                }
            }
            done.set(done.get() + 1);
        });
    }

    // the controller: pongs, and the close that ends each subscriber once it has everything
    let mut keys = Keys::new(seed ^ 0xABCD);
    let drain = Duration::from_secs_f64(args.drain);
    let has_pubs = args.publishers > 0;
    let mut pubs_done_at: Option<Instant> = None;
    let mut hit_deadline = false;
    let pong_op = match args.protocol {
        Protocol::Corecast | Protocol::Raw => corecast_net::ws::frame::OpCode::Pong,
        Protocol::Nats => corecast_net::ws::frame::OpCode::Binary,
    };
    loop {
        if done.get() >= tasks {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            hit_deadline = true;
            shared.abort.store(true, Relaxed);
            break;
        }
        let started = shared.go.get().map(|e| e.at);
        if has_pubs && started.is_some() && shared.pubs_done() && pubs_done_at.is_none() {
            pubs_done_at = Some(now);
        }
        let final_end = shared.final_end.load(Acquire);
        let duration_over = match (args.duration, started) {
            (Some(d), Some(t0)) => now >= t0 + Duration::from_secs_f64(d),
            _ => false,
        };
        let abort = shared.abort.load(Relaxed);
        let n = slots.borrow().len();
        for i in 0..n {
            let (pongs, should_close, wr) = {
                let mut s = slots.borrow_mut();
                let slot = &mut s[i];
                if slot.closed || slot.st.finished.get() {
                    continue;
                }
                let pongs: Vec<Vec<u8>> = slot.st.pong.borrow_mut().drain(..).collect();
                let next = slot.st.next.get();
                let should = abort
                    || if has_pubs {
                        match pubs_done_at {
                            Some(at) => next >= final_end || now >= at + drain,
                            None => false,
                        }
                    } else if args.offset.is_some() && args.duration.is_none() {
                        next >= slot.st.replay_end.get()
                    } else {
                        duration_over
                    };
                if pongs.is_empty() && !should {
                    continue;
                }
                (pongs, should, slot.wr.take())
            };
            let Some(mut wr) = wr else { continue };
            let mut bytes = Vec::new();
            for p in pongs {
                // NATS: the subscriber queued `PONG` answers to the server's `PING`s (data);
                // a WebSocket ping's payload otherwise
                wsclient::client_frame(pong_op, &p, &mut keys, &mut bytes);
            }
            if should_close {
                bytes.extend_from_slice(&close_frame(1000, &mut keys));
            }
            let (_res, _) = wr.write_all(bytes).await;
            let mut s = slots.borrow_mut();
            s[i].wr = Some(wr);
            if should_close {
                s[i].closed = true;
            }
        }
        rt::sleep(Duration::from_millis(2)).await;
    }
    // subscribers that closed but whose reads never ended (server ignored the close)
    let mut o = std::mem::take(&mut *out.borrow_mut());
    o.hit_deadline = hit_deadline;
    if let Some(l) = o.latency.as_mut() {
        let _ = l.add(&*lat.borrow());
    }
    o
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    if let Some(ca) = &args.ca {
        corecast_net::client::tls::use_ca_file(ca)?;
    }
    let mut target = parse_url(&args.url)?;
    target.authorization = args.authorization.clone();
    if args.threads == 0 || args.window == 0 || args.batch == 0 {
        return Err("--threads, --window and --batch must be at least 1".into());
    }
    if args.publishers == 0 && args.subscribers == 0 {
        return Err("nothing to do: give --publishers and/or --subscribers".into());
    }
    let replay_offset = match args.offset.as_deref() {
        None => None,
        Some("earliest") => Some(0u64),
        Some(n) => Some(
            n.parse::<u64>()
                .map_err(|_| format!("--offset {n:?}: a number or `earliest`"))?,
        ),
    };
    if args.publishers > 0 && args.duration.is_none() && args.rows.is_none() {
        return Err("publishing needs --duration and/or --rows (runs are bounded)".into());
    }
    if args.publishers == 0 && replay_offset.is_none() && args.duration.is_none() {
        return Err("live subscribers with no publishers need --duration".into());
    }
    if let Some(r) = args.rate {
        if r.is_nan() || r <= 0.0 {
            return Err("--rate must be positive".into());
        }
    }
    if args.protocol == Protocol::Nats {
        nats::subject_of(&target.path)?;
        if args.publishers > 1 {
            return Err("--protocol nats: at most one publisher (it numbers the rows)".into());
        }
        if replay_offset.is_some() || args.where_.is_some() {
            return Err(
                "--protocol nats: core NATS has no replay or filters (--offset, --where)".into(),
            );
        }
    } else if args.nats_jetstream {
        return Err("--nats-jetstream needs --protocol nats".into());
    }
    if args.protocol == Protocol::Raw {
        let topic = target.path.trim_start_matches('/');
        if topic.is_empty() {
            return Err(
                "--protocol raw: the URL's path names the topic (e.g. ws://127.0.0.1:PORT/trades)"
                    .into(),
            );
        }
        if args.publishers > 1 {
            return Err("--protocol raw: at most one publisher (it numbers the rows)".into());
        }
        if replay_offset.is_some() || args.where_.is_some() {
            return Err(
                "--protocol raw: a raw pub/sub server has no replay or filters (--offset, --where)"
                    .into(),
            );
        }
    }
    let mut query = Vec::new();
    if let Some(o) = replay_offset {
        query.push(format!("offset={o}"));
    }
    if let Some(w) = &args.where_ {
        query.push(format!("where={}", pct_encode(w)));
    }
    let sub_path = if query.is_empty() {
        target.path.clone()
    } else {
        format!("{}?{}", target.path, query.join("&"))
    };

    let pid = args.server_pid.map(|p| p.to_string());
    let t_begin = Instant::now();
    let deadline = t_begin + Duration::from_secs_f64(args.max_seconds);
    let shared = Arc::new(Shared::new(args.subscribers));
    shared.pubs_active.store(args.publishers, Release);
    let args = Arc::new(args);
    let target = Arc::new(target);

    // per-publisher shares of rows and rate
    let p = args.publishers as u64;
    let mut plans: Vec<ThreadPlan> = (0..args.threads)
        .map(|tid| ThreadPlan {
            tid,
            pubs: Vec::new(),
            subs: 0,
            sub_path: sub_path.clone(),
        })
        .collect();
    for i in 0..args.publishers {
        let rows = args.rows.map(|n| n / p + u64::from((i as u64) < n % p));
        plans[i % args.threads].pubs.push(PubPlan {
            id: i,
            window: args.window,
            batch: args.batch,
            rate: args.rate.map(|r| r / p as f64),
            rows,
            duration: args.duration.map(Duration::from_secs_f64),
            drain: Duration::from_secs_f64(args.drain),
            max_lag: args.max_lag,
        });
    }
    for j in 0..args.subscribers {
        plans[j % args.threads].subs += 1;
    }

    let mut cpu0 = pid.as_deref().and_then(procstat::cpu_seconds);
    let self_cpu0 = procstat::cpu_seconds("self");
    if args.publishers == 0 {
        let _ = shared.go.set(Epoch::now());
    }
    let handles: Vec<_> = plans
        .into_iter()
        .map(|plan| {
            let (a, t, s) = (args.clone(), target.clone(), shared.clone());
            std::thread::Builder::new()
                .name(format!("loadgen-{}", plan.tid))
                .spawn(move || {
                    let s2 = s.clone();
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        thread_main(plan, a, t, s, deadline)
                    }));
                    r.unwrap_or_else(|_| {
                        s2.abort.store(true, Relaxed);
                        ThreadOut {
                            open_errors: vec!["a client thread panicked".into()],
                            ..ThreadOut::default()
                        }
                    })
                })
                .expect("spawn client thread")
        })
        .collect();

    let total_conns = args.publishers + args.subscribers;
    if args.publishers > 0 {
        // every connection open (with its greeting) before the first row goes out
        let open_limit = Instant::now() + Duration::from_secs(60);
        while shared.opened.load(Acquire) + shared.open_failed.load(Acquire) < total_conns {
            if Instant::now() > open_limit || shared.abort.load(Relaxed) {
                shared.abort.store(true, Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        cpu0 = pid.as_deref().and_then(procstat::cpu_seconds);
        let _ = shared.go.set(Epoch::now());
    }
    let go = shared.go.get().copied().expect("go is set");
    let long_run = args.duration.is_some_and(|d| d > 3.0) || args.rows.is_some_and(|r| r > 200_000);
    let mut last_print = Instant::now();
    let (mut last_rows, mut last_del) = (0u64, 0u64);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() > deadline + Duration::from_secs(5) {
            shared.abort.store(true, Relaxed);
        }
        if last_print.elapsed() >= Duration::from_secs(1) {
            let rows = shared.rows_acked.load(Relaxed);
            let del = shared.delivered.load(Relaxed);
            let dt = last_print.elapsed().as_secs_f64();
            if long_run || go.at.elapsed() > Duration::from_secs(3) {
                let cpu = match (pid.as_deref().and_then(procstat::cpu_seconds), cpu0) {
                    (Some(c), Some(c0)) => format!(" server cpu {:.2}s", c - c0),
                    _ => String::new(),
                };
                eprintln!(
                    "loadgen: t={:.1}s acked {} rows ({:.0}/s) delivered {} frames ({:.0}/s) subs done {}/{}{}",
                    go.at.elapsed().as_secs_f64(),
                    rows,
                    (rows - last_rows) as f64 / dt,
                    del,
                    (del - last_del) as f64 / dt,
                    shared.subs_done.load(Relaxed),
                    args.subscribers,
                    cpu
                );
            }
            last_rows = rows;
            last_del = del;
            last_print = Instant::now();
        }
    }
    let outs: Vec<ThreadOut> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    let end = Instant::now();
    let cpu1 = pid.as_deref().and_then(procstat::cpu_seconds);
    let rss = pid.as_deref().and_then(procstat::rss_kib);
    let self_cpu = match (procstat::cpu_seconds("self"), self_cpu0) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    let server_cpu = match (cpu1, cpu0) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    let rep = report::Report::build(
        &args,
        &shared,
        go,
        end,
        outs,
        replay_offset,
        server_cpu,
        rss,
        self_cpu,
    );
    if args.json {
        println!("{}", rep.json());
    } else {
        println!("{}", rep.text());
    }
    if !rep.ok {
        eprintln!("loadgen: FAILED: {}", rep.failures.join("; "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
