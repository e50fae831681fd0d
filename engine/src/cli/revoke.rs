//! `corecast revoke http://HOST:PORT NAME`: closes every connection of a principal and refuses
//! it until the broker's config is reloaded (`POST /v1/principals/NAME/revoke`, which needs
//! `control.mutate` on `"*"`). Credentials come from the environment ([`super::credentials`]).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use sonic_rs::JsonValueTrait;

use super::{EXIT_CONNECTION, EXIT_OK, EXIT_PROTOCOL, EXIT_REFUSED, EXIT_USAGE};

/// `corecast revoke`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Credentials: CORECAST_TOKEN (bearer token or JWT), or CORECAST_USER and CORECAST_PASSWORD.\n\n  CORECAST_USER=admin CORECAST_PASSWORD=… corecast revoke http://127.0.0.1:8765 mallory"
)]
pub struct RevokeArgs {
    /// The broker: http://HOST:PORT (ws:// is taken too).
    pub server: String,
    /// The principal to revoke.
    pub principal: String,
}

fn host_port(url: &str) -> Option<String> {
    let rest = ["http://", "ws://"]
        .iter()
        .find_map(|p| url.strip_prefix(p))?;
    let authority = rest.split('/').next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(if authority.contains(':') && !authority.ends_with(']') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    })
}

fn encode_path_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs `corecast revoke`.
pub fn run(args: RevokeArgs) -> ExitCode {
    let Some(hp) = host_port(&args.server) else {
        eprintln!(
            "corecast: {:?} is not http://HOST:PORT (credentials go in CORECAST_USER/CORECAST_PASSWORD or CORECAST_TOKEN, not the URL)",
            crate::config::without_userinfo(&args.server)
        );
        return ExitCode::from(EXIT_USAGE);
    };
    let addr = match hp.to_socket_addrs().ok().and_then(|mut a| a.next()) {
        Some(a) => a,
        None => {
            eprintln!("corecast: cannot resolve {hp}");
            return ExitCode::from(EXIT_CONNECTION);
        }
    };
    let mut head = format!(
        "POST /v1/principals/{}/revoke HTTP/1.1\r\nhost: {hp}\r\nuser-agent: corecast-revoke\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n",
        encode_path_segment(&args.principal)
    );
    if let Some(a) = super::credentials::authorization() {
        head.push_str(&format!("authorization: {a}\r\n"));
    }
    head.push_str("\r\n{}");
    let answer = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).and_then(|mut c| {
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        c.write_all(head.as_bytes())?;
        let mut a = Vec::new();
        c.read_to_end(&mut a)?;
        Ok(a)
    });
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            eprintln!("corecast: {hp}: {e}");
            return ExitCode::from(EXIT_CONNECTION);
        }
    };
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        eprintln!("corecast: {hp} closed the connection without a complete answer");
        return ExitCode::from(EXIT_PROTOCOL);
    };
    let status = std::str::from_utf8(&answer[..split])
        .ok()
        .and_then(|h| h.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    let body: sonic_rs::Value = sonic_rs::from_slice(&answer[split + 4..]).unwrap_or_default();
    if status == 200 {
        let n = body
            .get("connections")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        if body.get("declared").and_then(|v| v.as_bool()) == Some(false) {
            eprintln!(
                "corecast: note: no principal {:?} is declared in [auth] (a typo?); a JWT subject of that name is refused all the same",
                args.principal
            );
        }
        println!(
            "revoked {}: {n} open connection(s) closing; refused until the config is reloaded (SIGHUP)",
            args.principal
        );
        return ExitCode::from(EXIT_OK);
    }
    let msg = body
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(|m| m.as_str())
        .unwrap_or("no message");
    eprintln!("corecast: {hp} refused the revocation: HTTP {status}: {msg}");
    ExitCode::from(EXIT_REFUSED)
}
