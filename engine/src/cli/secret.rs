//! `corecast hash-password` and `corecast hash-token`: the hashes that go into `[auth]`, so that
//! no password or token is ever written into the config itself.
//!
//! The secret is read from stdin (one line; a terminal prompt is the shell's business, e.g.
//! `read -rs`), never from the command line, where it would land in the shell history and in
//! `ps`. `hash-token` without input makes a new random token and prints both it and its hash.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use sha2::{Digest, Sha256};

use super::{EXIT_LOCAL, EXIT_OK, EXIT_USAGE};

/// `corecast hash-password`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Reads the password from the first line of stdin and prints its argon2id hash for\n[auth.principals.NAME] password = \"…\":\n\n  printf '%s' \"$PASSWORD\" | corecast hash-password\n  read -rs PW && printf '%s' \"$PW\" | corecast hash-password"
)]
pub struct HashPasswordArgs {}

/// `corecast hash-token`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Prints the SHA-256 (hex) of a bearer token for [auth.principals.NAME] tokens = [\"…\"].\nWith --new, makes a random token (32 bytes, URL-safe base64) and prints the token, then its hash:\n\n  corecast hash-token --new\n  printf '%s' \"$TOKEN\" | corecast hash-token"
)]
pub struct HashTokenArgs {
    /// Make a new random token instead of reading one from stdin.
    #[arg(long)]
    pub new: bool,
}

fn read_secret(what: &str) -> Result<String, ExitCode> {
    if std::io::stdin().is_terminal() {
        eprintln!("corecast: type the {what} and press Enter (it is shown; prefer a pipe)");
    }
    let mut line = String::new();
    if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
        eprintln!("corecast: cannot read the {what} from stdin: {e}");
        return Err(ExitCode::from(EXIT_LOCAL));
    }
    let secret = line.strip_suffix('\n').unwrap_or(&line);
    let secret = secret.strip_suffix('\r').unwrap_or(secret).to_string();
    if secret.is_empty() {
        eprintln!("corecast: the {what} is empty (give it on stdin)");
        return Err(ExitCode::from(EXIT_USAGE));
    }
    Ok(secret)
}

/// Runs `corecast hash-password`.
pub fn hash_password(_args: HashPasswordArgs) -> ExitCode {
    let pw = match read_secret("password") {
        Ok(p) => p,
        Err(code) => return code,
    };
    match crate::auth::verify::hash_password(&pw) {
        Ok(h) => {
            println!("{h}");
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("corecast: cannot hash the password: {e}");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}

/// Runs `corecast hash-token`.
pub fn hash_token(args: HashTokenArgs) -> ExitCode {
    let token = if args.new {
        use base64::Engine;
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        let t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        println!("token:  {t}");
        t
    } else {
        match read_secret("token") {
            Ok(t) => t,
            Err(code) => return code,
        }
    };
    let digest = hex::encode(Sha256::digest(token.as_bytes()));
    if args.new {
        println!("sha256: {digest}");
    } else {
        println!("{digest}");
    }
    let _ = std::io::stdout().flush();
    ExitCode::from(EXIT_OK)
}
