//! The `corecast` command: `serve` runs the broker; `pub`, `sub` and `tail` are its clients.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use corecast_engine::cli;
use corecast_engine::config::Config;
use corecast_engine::server::{self, ServeOptions};
use corecast_net::rt::Driver;

#[derive(Parser)]
#[command(
    name = "corecast",
    version,
    about = "A thread-per-core io_uring stream broker speaking streamcast protocol 4",
    after_help = "Examples:\n  corecast serve                                  # embedded default: durable `trades` under ./data\n  corecast serve --config corecast.toml --cores 2\n  corecast serve --listen 127.0.0.1:0 --data /tmp/cc   # any free port; the address is printed\n  corecast pub ws://127.0.0.1:8765/trades --file trades.jsonl\n  corecast sub ws://127.0.0.1:8765/trades --offset earliest --count 10\n  corecast tail ws://127.0.0.1:8765/trades -n 5\n  corecast ingest ws://127.0.0.1:8765/trades --file trades.parquet\n\n\
Exit codes (pub, sub, tail): 0 ok, 1 the server refused or closed with an error, 2 usage,\n\
3 connection failed, 4 a local file could not be used, 5 the server broke the protocol.\n\
`corecast <COMMAND> --help` explains each."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the broker.
    Serve {
        /// TOML configuration declaring the streams (default: a durable `trades` stream).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on, e.g. 127.0.0.1:8765 (port 0: any free port).
        #[arg(long)]
        listen: Option<String>,
        /// Data directory (overrides the config's data_dir).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Serving threads, one per core (default: every core).
        #[arg(long)]
        cores: Option<usize>,
        /// Serve a WebSocket echo endpoint at /_echo (for conformance suites; off by default).
        #[arg(long, hide = true)]
        echo: bool,
    },
    /// Publish JSON lines from a file or stdin (pipelined, batched, optionally exactly-once).
    Pub(cli::publish::PubArgs),
    /// Subscribe: print one JSON line per row (live, from an offset, or resumed from a cursor).
    Sub(cli::sub::SubArgs),
    /// Print the last N rows of a stream, then follow it live.
    Tail(cli::tail::TailArgs),
    /// Ingest a Parquet, Arrow IPC or JSON lines file in large batches (resumable).
    Ingest(cli::ingest::IngestArgs),
    /// Print the argon2id hash of a password read from stdin, for [auth.principals.NAME].
    HashPassword(cli::secret::HashPasswordArgs),
    /// Print the SHA-256 of a bearer token read from stdin (or make a new one with --new).
    HashToken(cli::secret::HashTokenArgs),
    /// Close every connection of a principal and refuse it until the config is reloaded.
    Revoke(cli::revoke::RevokeArgs),
    /// Manage streams over /control/v1: list, get, create, replace, stop, start, retire, watch.
    Ctl(cli::ctl::CtlArgs),
    /// The configuration reference: `--print-default` prints every key with its default.
    Config {
        /// Print every key with its default and one line of help, as TOML that loads as is.
        #[arg(long, required = true)]
        print_default: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CORECAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // colour codes only for a terminal, never into a log file
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve {
            config,
            listen,
            data,
            cores,
            echo,
        } => serve(config, listen, data, cores, echo),
        Cmd::Pub(args) => cli::publish::run(args),
        Cmd::Sub(args) => cli::sub::run(args),
        Cmd::Tail(args) => cli::tail::run(args),
        Cmd::Ingest(args) => cli::ingest::run(args),
        Cmd::HashPassword(args) => cli::secret::hash_password(args),
        Cmd::HashToken(args) => cli::secret::hash_token(args),
        Cmd::Revoke(args) => cli::revoke::run(args),
        Cmd::Ctl(args) => cli::ctl::run(args),
        Cmd::Config { print_default: _ } => {
            print!("{}", corecast_engine::config_reference::render());
            ExitCode::SUCCESS
        }
    }
}

fn serve(
    config: Option<PathBuf>,
    listen: Option<String>,
    data: Option<PathBuf>,
    cores: Option<usize>,
    echo: bool,
) -> ExitCode {
    let mut cfg = match &config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("corecast: bad config: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::embedded_default(),
    };
    if let Some(l) = listen {
        match l.parse() {
            Ok(a) => cfg.listen = a,
            Err(e) => {
                eprintln!("corecast: --listen {l:?} is not an address: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(d) = data {
        cfg.data_dir = d;
    }
    cfg.echo = echo;
    if cores == Some(0) {
        eprintln!("corecast: --cores must be at least 1");
        return ExitCode::from(2);
    }
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("corecast: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let streams = cfg.streams.len();
    let shown = std::path::absolute(&cfg.data_dir).unwrap_or_else(|_| cfg.data_dir.clone());
    tracing::info!(streams, "data directory {}", shown.display());
    let running = match server::start(ServeOptions { config: cfg, cores }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("corecast: {e}");
            return ExitCode::from(1);
        }
    };
    match running.driver {
        Driver::IoUring => tracing::info!("driver: io_uring"),
        Driver::Fallback => tracing::warn!(
            "driver: fallback (epoll) — io_uring is unavailable here (seccomp or kernel); serving anyway"
        ),
    }
    tracing::info!(streams, "listening on {}", running.addr);
    if let Some(tls) = running.tls_addr {
        tracing::info!("tls listening on {tls}");
    }
    println!(
        "corecast listening on {} (driver {}{})",
        running.addr,
        running.driver.name(),
        if running.main_is_tls { ", tls" } else { "" }
    );
    if let Some(tls) = running.tls_addr {
        println!("corecast tls on {tls}");
    }
    let mut signals = signals;
    for sig in signals.forever() {
        if sig == signal_hook::consts::SIGHUP {
            // the TLS certificate, from the files named at start (a bad pair keeps the old
            // one); then what the config file may change under a running broker: [auth] and
            // allowed_origins
            running.reload.run();
            match &config {
                None => tracing::info!("SIGHUP: no config file to reload (embedded default)"),
                Some(p) => match Config::load(p) {
                    Ok(new) => running.reload_auth(&new),
                    Err(e) => tracing::error!("SIGHUP: not reloaded, the config is bad: {e}"),
                },
            }
            continue;
        }
        tracing::info!(signal = sig, "shutting down");
        break;
    }
    running.shutdown();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}
