//! The credentials the client subcommands send, from the environment (never from the command
//! line, where they would land in the shell history and in `ps`):
//!
//! - `CORECAST_TOKEN`: a bearer token or a JWT (`Authorization: Bearer …`);
//! - `CORECAST_USER` and `CORECAST_PASSWORD`: HTTP Basic.
//!
//! `CORECAST_TOKEN` wins when both are set. For the WebSocket commands (`pub`, `sub`, `tail`)
//! credentials in the URL's userinfo (`ws://user:password@host/…`) win over the environment.

use base64::Engine;

/// The `Authorization` header for a WebSocket command on `url`: `None` when the URL carries
/// userinfo (the client sends it as Basic) or nothing is set in the environment.
pub fn for_url(url: &str) -> Option<String> {
    let has_userinfo = crate::config::without_userinfo(url) != url;
    if has_userinfo {
        None
    } else {
        authorization()
    }
}

/// The `Authorization` header value, if credentials are set.
pub fn authorization() -> Option<String> {
    if let Ok(t) = std::env::var("CORECAST_TOKEN") {
        if !t.is_empty() {
            return Some(format!("Bearer {t}"));
        }
    }
    let user = std::env::var("CORECAST_USER").ok()?;
    let password = std::env::var("CORECAST_PASSWORD").unwrap_or_default();
    let pair = format!("{user}:{password}");
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}
