//! `corecast sub URL [--offset N|earliest | --state] [--where JSON] [--cursor FILE] [--catch-up [--catch-up-retries N]] [--count N] [--rows-only]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use corecast_net::client::{blocking, Offset, SubscribeOptions};

/// Arguments of `corecast sub`.
#[derive(Args, Debug)]
#[command(after_help = const_format_help())]
pub struct SubArgs {
    /// ws://HOST:PORT/STREAM or wss://HOST:PORT/STREAM (TLS)
    pub url: String,
    /// For wss://: trust the CA certificates in this PEM file instead of the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// Start at this offset (inclusive), or `earliest` (same as 0). Default: live, from the next row.
    #[arg(long, value_parser = parse_offset, allow_hyphen_values = true)]
    pub offset: Option<Offset>,
    /// Only rows matching this filter: a JSON object of column -> value or list of values.
    #[arg(long = "where", value_name = "JSON")]
    pub where_json: Option<String>,
    /// Resume from (and save the position to) this cursor file: without --offset the
    /// subscription starts after the offset it holds (an explicit --offset wins); it holds the
    /// last offset consumed, is saved at most once a second and on exit, and never moves back.
    #[arg(long, value_name = "FILE")]
    pub cursor: Option<PathBuf>,
    /// When the server no longer replays the offset asked for (4416 too_old or evicted), read
    /// the gap from the stream's published tables (after a migration, the sealed logs' tables,
    /// oldest first, then the live log's), then resume on the socket where they end: every row
    /// once, in order, as the socket would have sent it (a row from before a migration with the
    /// columns it had). An s3:// table is read
    /// with the standard AWS_* environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY).
    #[arg(long)]
    pub catch_up: bool,
    /// Rounds of reading the table and resubscribing before giving up, while the server keeps
    /// refusing (it moves on while the table is read).
    #[arg(long, value_name = "N", default_value_t = corecast_net::client::CATCH_UP_RETRIES, requires = "catch_up")]
    pub catch_up_retries: u32,
    /// On a keyed stream: start with its state — the latest row of each key (matching
    /// --where), in offset order — then every row live. With --cursor, a saved position wins
    /// (the log after it completes the copy), and the state is taken again when the server no
    /// longer replays from there.
    #[arg(long, conflicts_with_all = ["offset", "catch_up"])]
    pub state: bool,
    /// Stop after N rows.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Print each row object alone instead of `[offset,ts,row]`.
    #[arg(long)]
    pub rows_only: bool,
}

const fn const_format_help() -> &'static str {
    concat!(
        "Prints one JSON line per row: [offset,ts,row] exactly as received (ts in µs), or the row alone with --rows-only.\n\n",
        "Examples:\n",
        "  corecast sub ws://127.0.0.1:8765/trades                        # live rows\n",
        "  corecast sub ws://127.0.0.1:8765/trades --offset earliest --count 100\n",
        "  corecast sub ws://127.0.0.1:8765/trades --offset 1200 --where '{\"side\":1}'\n",
        "  corecast sub ws://127.0.0.1:8765/trades --cursor trades.cursor --offset earliest   # resumable\n",
        "  corecast sub ws://127.0.0.1:8765/trades --offset 1 --catch-up  # older rows from the published table\n",
        "  corecast sub ws://127.0.0.1:8765/quotes --state               # the latest row per key, then live\n\n",
        crate::credentials_help!(),
        crate::exit_codes_help!()
    )
}

/// Parses `--offset`: a non-negative integer (0 = earliest) or `earliest`.
pub fn parse_offset(s: &str) -> Result<Offset, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("earliest") {
        return Ok(Offset::Earliest);
    }
    match t.parse::<u64>() {
        Ok(0) => Ok(Offset::Earliest),
        Ok(n) => Ok(Offset::At(n)),
        Err(_) => Err(format!(
            "{s:?} is not an offset (a non-negative integer or `earliest`)"
        )),
    }
}

/// Runs `corecast sub`.
pub fn run(args: SubArgs) -> ExitCode {
    if let Err(e) = corecast_net::client::Target::parse(&args.url) {
        return super::fail("sub", &e);
    }
    if let Err(code) = super::trust_ca("sub", args.ca.as_deref()) {
        return code;
    }
    if let Some(w) = &args.where_json {
        if !w.trim_start().starts_with('{') {
            return super::usage("sub", &format!("--where {w:?} is not a JSON object"));
        }
    }
    let opts = SubscribeOptions {
        offset: args.offset,
        where_json: args.where_json,
        cursor_file: args.cursor,
        catch_up: args.catch_up,
        catch_up_retries: args.catch_up_retries,
        authorization: super::credentials::for_url(&args.url),
        state: args.state,
    };
    let sub = match blocking::connect(&args.url, opts) {
        Ok(s) => s,
        Err(e) => return super::fail("sub", &e),
    };
    super::print_rows("sub", sub, args.count, args.rows_only)
}
