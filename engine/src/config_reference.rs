//! The configuration reference that `corecast config --print-default` prints: every key the
//! config file takes, with its default and one line of help, as a TOML file.
//!
//! The defaults are read from the configuration structures themselves
//! ([`Config::embedded_default`], [`StreamConfig::with_defaults`], the `Default` impls of
//! [`HttpApiConfig`], [`KeepaliveConfig`] and [`IngestConfig`]), never restated. The lines that
//! hold a default are live TOML: the printed file loads ([`Config::load`]) into exactly those
//! defaults. Keys without one (a secret, an S3 endpoint, `[auth]`) are printed commented out,
//! with an example value. The tests below check both, and that every field of every raw
//! section the parser accepts (`RawConfig`, `RawStream`, `RawSse`, … in `config.rs` and
//! `auth/config.rs`) is listed, so the reference cannot drift from the code.

use std::fmt::Write as _;

use crate::config::{
    Config, EvictAfter, HttpApiConfig, IngestConfig, KeepaliveConfig, Published, StreamConfig,
};

/// One key of the reference.
#[derive(Debug, Clone)]
pub struct Key {
    /// The table it lives in: `""` (top level), `sse`, `stream` (`[[stream]]`), `auth.jwt`,
    /// `auth.principals.NAME`, …
    pub section: &'static str,
    /// The key.
    pub key: &'static str,
    /// Its value as TOML: the default, or an example when `default` is false.
    pub value: String,
    /// Whether `value` is the default (printed live) or only an example (printed commented).
    pub default: bool,
    /// One line of help.
    pub help: &'static str,
}

fn key(section: &'static str, key: &'static str, value: String, help: &'static str) -> Key {
    Key {
        section,
        key,
        value,
        default: true,
        help,
    }
}

fn example(section: &'static str, key: &'static str, value: &str, help: &'static str) -> Key {
    Key {
        section,
        key,
        value: value.to_string(),
        default: false,
        help,
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Every key, in the order printed (top-level keys first, as TOML requires).
pub fn keys() -> Vec<Key> {
    let d = Config::embedded_default();
    let h = HttpApiConfig::default();
    let k = KeepaliveConfig::default();
    let i = IngestConfig::default();
    let s = StreamConfig::with_defaults("trades", None, true);
    let published = |p: &Published| match p {
        Published::Off => "off".to_string(),
        Published::Local => "local".to_string(),
        Published::At(l) => l.clone(),
    };
    vec![
        key("", "listen", toml_str(&d.listen.to_string()), "address every shard listens on (port 0: any free port; --listen overrides)"),
        key("", "data_dir", toml_str(&d.data_dir.display().to_string()), "root of the per-stream directories, relative to this file's folder (--data overrides)"),
        key("", "write_timeout_s", d.write_timeout.as_secs().to_string(), "seconds one write to a client may take before its connection is dropped (1..=3600)"),
        key("", "cursor_ttl_s", h.cursor_ttl_s.to_string(), "seconds a pull API cursor stays valid"),
        example("", "cursor_key", "\"at least 16 bytes of secret\"", "HMAC key of pull cursors; absent: generated into <data_dir>/.cursor_key (0600)"),
        example("", "published", "\"local\"", "the default `published` of every durable stream (\"local\", \"off\", file:///dir, s3://bucket/prefix)"),
        example("", "max_connections", "100000", "open connections per process, all shards (429 above); absent: the descriptor limit"),
        example("", "allowed_origins", "[\"https://dash.example\"]", "browser Origins allowed for WebSocket, CORS and SSE; absent: every origin"),
        key("sse", "max_streams", h.sse_max_streams.to_string(), "open SSE streams per process (503 + Retry-After: 30 above)"),
        key("sse", "max_per_client", h.sse_max_per_client.to_string(), "open SSE streams per client address"),
        key("sse", "ping_min_ms", h.sse_ping_min_ms.to_string(), "shortest idle gap before a comment ping, ms (jittered up to ping_max_ms)"),
        key("sse", "ping_max_ms", h.sse_ping_max_ms.to_string(), "longest idle gap before a comment ping, ms"),
        key("sse", "max_age_s", h.sse_max_age_s.to_string(), "an SSE stream ends with event: end {\"reason\":\"max_age\"} after this many seconds"),
        key("sse", "retry_ms", h.sse_retry_ms.to_string(), "the retry: sent first (EventSource's reconnect delay), ms"),
        key("websocket", "ping_interval_s", k.interval.as_secs().to_string(), "silence after which the server pings a WebSocket peer (0: keepalive off)"),
        key("websocket", "ping_timeout_s", k.timeout.as_secs().to_string(), "silence after the ping after which it closes with 1011"),
        key("ingest", "max_body_bytes", i.max_body_bytes.to_string(), "largest bulk ingest body (413 above it); 1 KiB ..= 1 GiB"),
        key("ingest", "max_batch_rows", i.max_batch_rows.to_string(), "most rows in one ingest request (413 above it)"),
        key("ingest", "max_concurrent", i.max_concurrent.to_string(), "ingest requests decoded and committed at once, all streams (503 above)"),
        key("control", "enabled", "false".into(), "serve /control/v1 without [auth] (anyone reaching the port manages streams); with [auth] it is served and the grants decide"),
        key("control", "max_streams", crate::config::MANAGED_STREAMS_DEFAULT.to_string(), "most streams the control plane's registry holds, retired ones included (a retired stream keeps its name and history for good); a create over it is refused 409 too_many_streams; 1 ..= 4096"),
        key("control", "max_body_bytes", crate::config::ControlConfig::default().max_body_bytes.to_string(), "largest control mutation body (413 above it, refused before it is read); 1 KiB ..= 16 MiB"),
        example("s3", "endpoint", "\"http://127.0.0.1:9000\"", "S3 endpoint for s3:// published locations; absent: AWS_ENDPOINT_URL or AWS"),
        example("s3", "region", "\"us-east-1\"", "absent: AWS_REGION / AWS_DEFAULT_REGION"),
        example("s3", "access_key_id", "\"…\"", "absent: AWS_ACCESS_KEY_ID (never logged)"),
        example("s3", "secret_access_key", "\"…\"", "absent: AWS_SECRET_ACCESS_KEY (never logged)"),
        example("tls", "cert", "\"tls/cert.pem\"", "the certificate chain (PEM), leaf first, relative to this file; no [tls]: plaintext"),
        example("tls", "key", "\"tls/key.pem\"", "its private key (PEM: PKCS#8, RSA or SEC1 EC)"),
        example("tls", "listen", "\"0.0.0.0:8443\"", "a second listener for TLS; absent: the main listen serves TLS only"),
        key("stream", "name", toml_str(&s.name), "required: the stream's name, [A-Za-z0-9][A-Za-z0-9_.-]{0,127}"),
        example("stream", "schema", "\"trade.schema.json\"", "JSON Schema file, relative to this file; absent: schema-less"),
        key("stream", "durable", s.durable.to_string(), "keep a log (offsets, replay, history); false: live only"),
        key("stream", "exactly_once", s.exactly_once.to_string(), "accept publisher=ID exactly-once publishers"),
        key("stream", "max_replay", s.max_replay.map_or_else(|| "\"unlimited\"".into(), |n| n.to_string()), "largest replay window, rows (\"unlimited\" allowed)"),
        key("stream", "max_backlog", s.max_backlog.to_string(), "frames a subscriber may fall behind before it is closed with 4429"),
        key("stream", "max_in_flight", s.max_in_flight.to_string(), "replies a publisher connection may be owed before the server stops reading it"),
        key("stream", "max_inbound", s.max_inbound.to_string(), "rows queued for commit per stream before publishers wait"),
        key("stream", "max_message_bytes", s.max_message_bytes.to_string(), "largest inbound WebSocket message, bytes (1009 above it)"),
        key("stream", "coalesce_us", s.coalesce.as_micros().to_string(), "hold subscribers' writes up to this many µs to merge commits into one write (0: off; ≤ 100000)"),
        key("stream", "segment_bytes", s.segment_bytes.to_string(), "bytes each hot-log segment file is preallocated to"),
        key("stream", "seal_target_bytes", s.seal_target_bytes.to_string(), "encoded row bytes per sealed Parquet segment"),
        key("stream", "seal_every_s", s.seal_every.as_secs().to_string(), "seal whatever is unsealed once its oldest row is this many seconds old"),
        example("stream", "retention", "\"7d\"", "drop history wholly older than this (s, m, h, d); absent: keep"),
        key("stream", "published", toml_str(&published(&s.published)), "where the Iceberg table goes: \"local\", \"off\", file:///dir, s3://bucket/prefix"),
        key("stream", "evict_after", toml_str(match s.evict_after { EvictAfter::Published => "published", EvictAfter::Sealed => "sealed" }), "hot segments go once \"published\" (default with a location) or \"sealed\""),
        key("stream", "published_grace_s", s.published_grace.as_secs().to_string(), "seconds before unreferenced published files are deleted"),
        example("stream", "key", "[\"symbol\"]", "keyed stream: the latest row per key is kept (?state); required, non-null boolean/integer/string columns"),
        example("stream", "remove_when", "{ action = [\"C\"] }", "keyed stream: a row matching this where=-style table removes its key"),
        example("stream", "max_keys", &crate::config::DEFAULT_MAX_KEYS.to_string(), "keyed stream: entities held at most; a new key beyond it makes the state incomplete (reads refused)"),
        example("stream", "checkpoint_every_s", &crate::config::DEFAULT_CHECKPOINT_EVERY.as_secs().to_string(), "keyed stream: seconds between state checkpoints (restart folds only the log past it)"),
        example("stream", "state_snapshot_budget_bytes", &crate::config::DEFAULT_STATE_SNAPSHOT_BUDGET_BYTES.to_string(), "keyed stream: bytes of ?state snapshots held for readers at once; a join over it is refused state_busy (retry)"),
        example("auth", "realm", "\"corecast\"", "the realm of the 401 challenges (default \"corecast\"); no [auth]: the broker is open"),
        example("auth", "cookie", "\"corecast_token\"", "a cookie that may carry a JWT (same-origin browser pages, e.g. /ui)"),
        example("auth", "max_failures_per_minute", &crate::auth::config::DEFAULT_MAX_FAILURES_PER_MINUTE.to_string(), "failed authentications per client address per minute, then 429"),
        example("auth.jwt", "algorithm", "\"HS256\"", "HS256, RS256 or ES256"),
        example("auth.jwt", "secret", "\"…\"", "HS256: the shared secret (or secret_file)"),
        example("auth.jwt", "secret_file", "\"jwt.secret\"", "HS256: a file holding the secret"),
        example("auth.jwt", "public_key", "\"key.pem\"", "RS256/ES256: the PEM public key file"),
        example("auth.jwt", "issuer", "\"https://auth.example\"", "optional: iss must match"),
        example("auth.jwt", "audience", "\"corecast\"", "optional: aud must contain it"),
        example("auth.jwt", "grants_claim", "\"grants\"", "the claim holding grants, {\"data.read\": [\"trades\"]} (default \"grants\")"),
        example("auth.jwt", "leeway_s", "30", "clock skew allowed on exp/nbf, seconds (0..=3600; default 30)"),
        example("auth.principals.alice", "password", "\"$argon2id$v=19$…\"", "argon2id hash: `corecast hash-password`"),
        example("auth.principals.alice", "tokens", "[\"9f86d081884c7d65…\"]", "SHA-256 (hex) of bearer tokens: `corecast hash-token`"),
        example("auth.principals.alice", "grants", "{ \"data.read\" = [\"trades\"], \"stats.read\" = [\"*\"] }", "actions on streams: data.read, data.publish, stats.read, control.read/mutate/migrate"),
        example("auth.principals.alice", "max_connections", "100", "caps, all shards together (429 before the upgrade); absent: none"),
        example("auth.principals.alice", "max_subscriptions", "50", "open subscriptions (WebSocket and SSE)"),
        example("auth.principals.alice", "max_subscription_age_s", "86400", "a session is closed (1008 expired) after this long; absent: no limit"),
        example("auth.principals.alice", "max_publishers", "4", "open publisher connections"),
    ]
}

/// The reference as a TOML file.
pub fn render() -> String {
    let keys = keys();
    let mut out = String::from(
        "# corecast configuration reference (`corecast config --print-default`): every key with its\n\
         # default and one line of help. Live lines hold the defaults (this file loads as is);\n\
         # commented ones have no default and show an example. docs/OPERATIONS.md explains each.\n",
    );
    let width = keys
        .iter()
        .map(|k| k.key.len() + k.value.len() + 3)
        .filter(|&w| w <= 44)
        .max()
        .unwrap_or(40);
    let mut section = None;
    for k in &keys {
        if section != Some(k.section) {
            section = Some(k.section);
            let live = keys.iter().any(|o| o.section == k.section && o.default);
            let head = match k.section {
                "" => None,
                "stream" => Some("[[stream]]".to_string()),
                s => Some(format!("[{s}]")),
            };
            if let Some(head) = head {
                let _ = writeln!(out, "\n{}{head}", if live { "" } else { "# " });
            } else {
                out.push('\n');
            }
        }
        let line = format!("{} = {}", k.key, k.value);
        if k.default {
            let _ = writeln!(out, "{line:<width$}  # {}", k.help);
        } else {
            let w = width.saturating_sub(2);
            let _ = writeln!(out, "# {line:<w$}  # {}", k.help);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field names of `struct NAME { … }` in `src` (one field per line, `name: Type,`).
    fn fields(src: &str, name: &str) -> Vec<String> {
        let start = src
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name} not found"));
        let body = &src[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#') && !l.starts_with("//") && l.contains(':'))
            .map(|l| {
                l.trim_start_matches("pub ")
                    .split(':')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn every_key_the_parser_takes_is_listed() {
        let config = include_str!("config.rs");
        let auth = include_str!("auth/config.rs");
        let keys = keys();
        let listed = |section: &str, field: &str| {
            keys.iter().any(|k| k.section == section && k.key == field)
        };
        let tables = [
            "stream",
            "sse",
            "websocket",
            "s3",
            "ingest",
            "auth",
            "tls",
            "control",
        ];
        let mut missing = Vec::new();
        for (src, raw, section) in [
            (config, "RawConfig", ""),
            (config, "RawStream", "stream"),
            (config, "RawSse", "sse"),
            (config, "RawWebsocket", "websocket"),
            (config, "RawS3", "s3"),
            (config, "RawIngest", "ingest"),
            (config, "RawTls", "tls"),
            (config, "RawControl", "control"),
            (auth, "RawAuth", "auth"),
            (auth, "RawJwt", "auth.jwt"),
            (auth, "RawPrincipal", "auth.principals.alice"),
        ] {
            for f in fields(src, raw) {
                let table = match (section, f.as_str()) {
                    ("", t) if tables.contains(&t) => continue,
                    ("auth", "jwt" | "principals") => continue,
                    _ => section,
                };
                if !listed(table, &f) {
                    missing.push(format!("{raw}.{f}"));
                }
            }
        }
        assert!(missing.is_empty(), "not in the reference: {missing:?}");
    }

    #[test]
    fn the_printed_defaults_load_as_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("corecast.toml");
        std::fs::write(&p, render()).unwrap();
        let c = Config::load(&p).unwrap_or_else(|e| panic!("{e}\n{}", render()));
        let d = Config::embedded_default();
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.write_timeout, d.write_timeout);
        assert_eq!(c.http_api, HttpApiConfig::default());
        assert_eq!(c.keepalive, Some(KeepaliveConfig::default()));
        assert_eq!(c.ingest, IngestConfig::default());
        assert!(c.auth.is_none());
        assert_eq!(c.max_connections, None);
        assert_eq!(c.streams.len(), 1);
        let (got, want) = (
            &c.streams[0],
            StreamConfig::with_defaults("trades", None, true),
        );
        assert_eq!(got.name, want.name);
        assert_eq!(got.schema_json, None);
        assert_eq!(
            (
                got.durable,
                got.exactly_once,
                got.max_replay,
                got.max_backlog
            ),
            (
                want.durable,
                want.exactly_once,
                want.max_replay,
                want.max_backlog
            )
        );
        assert_eq!(
            (
                got.max_in_flight,
                got.max_inbound,
                got.max_message_bytes,
                got.coalesce
            ),
            (
                want.max_in_flight,
                want.max_inbound,
                want.max_message_bytes,
                want.coalesce
            )
        );
        assert_eq!(
            (got.segment_bytes, got.seal_target_bytes, got.seal_every),
            (want.segment_bytes, want.seal_target_bytes, want.seal_every)
        );
        assert_eq!(
            (
                &got.published,
                got.evict_after,
                got.published_grace,
                got.retention
            ),
            (
                &want.published,
                want.evict_after,
                want.published_grace,
                want.retention
            )
        );
    }

    #[test]
    fn every_line_has_help() {
        for k in keys() {
            assert!(!k.help.is_empty() && !k.help.contains('\n'), "{}", k.key);
        }
    }
}
