//! `corecast tail URL [-n N]`: the last N rows, then live.

use std::process::ExitCode;

use clap::Args;
use corecast_net::client::{blocking, Offset, SubscribeOptions};

/// Arguments of `corecast tail`.
#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Reads the frontier E from a first connection's greeting, then subscribes at max(1, E-N)\n",
    "(from the earliest row when the stream holds fewer than N) and keeps printing live rows.\n\n",
    "Examples:\n",
    "  corecast tail ws://127.0.0.1:8765/trades            # the last 10 rows, then live\n",
    "  corecast tail ws://127.0.0.1:8765/trades -n 100 --rows-only\n\n",
    crate::credentials_help!(),
        crate::exit_codes_help!()
))]
pub struct TailArgs {
    /// ws://HOST:PORT/STREAM or wss://HOST:PORT/STREAM (TLS)
    pub url: String,
    /// For wss://: trust the CA certificates in this PEM file instead of the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// How many of the latest rows to print before following live.
    #[arg(short = 'n', long = "lines", value_name = "N", default_value_t = 10)]
    pub n: u64,
    /// Stop after printing N rows in all.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Print each row object alone instead of `[offset,ts,row]`.
    #[arg(long)]
    pub rows_only: bool,
}

/// Runs `corecast tail`.
pub fn run(args: TailArgs) -> ExitCode {
    if let Err(e) = corecast_net::client::Target::parse(&args.url) {
        return super::fail("tail", &e);
    }
    if let Err(code) = super::trust_ca("tail", args.ca.as_deref()) {
        return code;
    }
    // First connection: read the frontier from the greeting, then leave.
    let authorization = super::credentials::for_url(&args.url);
    let probe = match blocking::connect(
        &args.url,
        SubscribeOptions {
            authorization: authorization.clone(),
            ..Default::default()
        },
    ) {
        Ok(s) => s,
        Err(e) => return super::fail("tail", &e),
    };
    let end = probe.greeting().end_offset;
    let _ = probe.close();
    let offset = match end {
        None => Offset::Live, // no log: nothing to replay
        // max(1, E-N); the earliest row the server holds when that would reach below it
        Some(e) if e > args.n + 1 => Offset::At(e - args.n),
        Some(e) if args.n == 0 => Offset::At(e.max(1)),
        Some(_) => Offset::Earliest,
    };
    let opts = SubscribeOptions {
        offset: Some(offset),
        authorization,
        ..Default::default()
    };
    let sub = match blocking::connect(&args.url, opts) {
        Ok(s) => s,
        Err(e) => return super::fail("tail", &e),
    };
    super::print_rows("tail", sub, args.count, args.rows_only)
}
