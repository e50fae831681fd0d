//! The `[auth]` section of the config: principals with their credentials and grants, and how
//! JWTs are checked. Read at start-up and again on SIGHUP; every refusal names the key and what
//! is wrong, and never echoes a secret.
//!
//! ```toml
//! [auth]
//! realm = "corecast"                 # the realm of the 401 challenges
//! cookie = "corecast_token"          # a cookie that may carry a JWT (browsers: same-origin pages)
//! max_failures_per_minute = 20       # failed authentications per client address, then 429
//!
//! [auth.jwt]
//! algorithm = "HS256"                # or "RS256", "ES256"
//! secret_file = "jwt.secret"         # HS256 (or `secret = "…"`); RS256/ES256: public_key = "key.pem"
//! issuer = "https://auth.example"    # optional: `iss` must match
//! audience = "corecast"              # optional: `aud` must contain it
//! grants_claim = "grants"            # optional claim: {"data.read": ["trades"]}
//!
//! [auth.principals.alice]
//! password = "$argon2id$v=19$m=19456,t=2,p=1$…"   # `corecast hash-password`
//! tokens = ["9f86d081884c7d65…"]                   # SHA-256 (hex) of bearer tokens: `corecast hash-token`
//! grants = { "data.read" = ["trades", "quotes"], "stats.read" = ["*"] }
//! max_connections = 100              # caps, all shards together (429 before the upgrade)
//! max_subscriptions = 50
//! max_publishers = 4
//! max_subscription_age_s = 86400     # a session is closed (1008 expired) after this long
//!
//! [auth.principals.anonymous]        # requests without credentials, when declared
//! grants = { "data.read" = ["public"] }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use argon2::password_hash::PasswordHash;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::grants::Grants;

/// The principal that requests without credentials act as, when declared.
pub const ANONYMOUS: &str = "anonymous";

/// Default `max_failures_per_minute`.
pub const DEFAULT_MAX_FAILURES_PER_MINUTE: u32 = 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    realm: Option<String>,
    cookie: Option<String>,
    max_failures_per_minute: Option<i64>,
    jwt: Option<RawJwt>,
    #[serde(default)]
    principals: BTreeMap<String, RawPrincipal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    algorithm: String,
    secret: Option<String>,
    secret_file: Option<String>,
    public_key: Option<String>,
    issuer: Option<String>,
    audience: Option<String>,
    grants_claim: Option<String>,
    leeway_s: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    password: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    grants: BTreeMap<String, Vec<String>>,
    max_connections: Option<i64>,
    max_subscriptions: Option<i64>,
    max_publishers: Option<i64>,
    max_subscription_age_s: Option<i64>,
}

/// The resolved `[auth]` section.
#[derive(Clone)]
pub struct AuthConfig {
    /// The realm named in `WWW-Authenticate`.
    pub realm: String,
    /// The cookie that may carry a JWT.
    pub cookie: Option<String>,
    /// Failed authentications allowed per client address per minute before 429.
    pub max_failures_per_minute: u32,
    /// How JWTs are checked; `None`: JWTs are not accepted.
    pub jwt: Option<JwtConfig>,
    /// The declared principals, by name order.
    pub principals: Vec<PrincipalConfig>,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("realm", &self.realm)
            .field("cookie", &self.cookie)
            .field("max_failures_per_minute", &self.max_failures_per_minute)
            .field("jwt", &self.jwt.as_ref().map(|j| j.algorithm))
            .field(
                "principals",
                &self.principals.iter().map(|p| &p.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One declared principal. Its secrets are hashes only: an argon2id PHC string, SHA-256 digests
/// of bearer tokens.
#[derive(Clone)]
pub struct PrincipalConfig {
    /// The name.
    pub name: String,
    /// The argon2id hash of its password (HTTP Basic), as a PHC string.
    pub password: Option<String>,
    /// SHA-256 of each of its bearer tokens.
    pub tokens: Vec<[u8; 32]>,
    /// What it may do.
    pub grants: Grants,
    /// Its caps: connections, subscriptions, publishers open at once (`None`: no cap), in
    /// [`super::live::Kind`] order.
    pub caps: [Option<u32>; 3],
    /// How long one of its sessions (WebSocket, SSE) may last before it is closed
    /// (1008 `{"error":"expired"}`, SSE `end` `expired`); the client reconnects and is checked
    /// again.
    pub max_age: Option<Duration>,
}

/// How JWTs are checked.
#[derive(Clone)]
pub struct JwtConfig {
    /// The one algorithm accepted (a token naming another is refused: no `alg` confusion).
    pub algorithm: Algorithm,
    /// The key that checks signatures.
    pub key: DecodingKey,
    /// `iss` must equal this, when set.
    pub issuer: Option<String>,
    /// `aud` must contain this, when set.
    pub audience: Option<String>,
    /// The claim that lists grants.
    pub grants_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

impl AuthConfig {
    /// Resolves `[auth]` read from a file in `base`; `Err((key, reason))`.
    pub(crate) fn resolve(raw: RawAuth, base: &Path) -> Result<AuthConfig, (String, String)> {
        let e = |k: &str, r: String| (format!("auth.{k}"), r);
        let realm = raw.realm.unwrap_or_else(|| "corecast".into());
        if realm.is_empty()
            || realm
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control())
        {
            return Err(e(
                "realm",
                "a realm is non-empty text without quotes, backslashes or control characters"
                    .into(),
            ));
        }
        if let Some(c) = &raw.cookie {
            if c.is_empty()
                || !c
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(e(
                    "cookie",
                    format!("{c:?} is not a cookie name (RFC 6265 token characters)"),
                ));
            }
        }
        let max_failures_per_minute = match raw.max_failures_per_minute {
            None => DEFAULT_MAX_FAILURES_PER_MINUTE,
            Some(n) if (1..=1_000_000).contains(&n) => n as u32,
            Some(n) => {
                return Err(e(
                    "max_failures_per_minute",
                    format!("{n} is outside 1..=1000000"),
                ))
            }
        };
        let jwt = match raw.jwt {
            None => None,
            Some(j) => Some(resolve_jwt(j, base).map_err(|(k, r)| e(&format!("jwt.{k}"), r))?),
        };
        if raw.cookie.is_some() && jwt.is_none() {
            return Err(e(
                "cookie",
                "a cookie carries a JWT: it needs [auth.jwt]".into(),
            ));
        }
        let mut principals = Vec::new();
        for (name, p) in raw.principals {
            let k = |f: &str| format!("principals.{name}.{f}");
            if name.is_empty()
                || name.len() > 128
                || name.chars().any(|c| c.is_control() || c == ':')
            {
                return Err(e(
                    &format!("principals.{name}"),
                    "a principal name is 1 to 128 characters, no ':' or control character".into(),
                ));
            }
            if name == ANONYMOUS && (p.password.is_some() || !p.tokens.is_empty()) {
                return Err(e(
                    &format!("principals.{name}"),
                    "the anonymous principal stands for requests without credentials: it takes grants only".into(),
                ));
            }
            let password = match p.password {
                None => None,
                Some(h) => {
                    match PasswordHash::new(&h) {
                        Ok(ph) if ph.algorithm.as_str() == "argon2id" => {}
                        Ok(ph) => {
                            return Err(e(
                                &k("password"),
                                format!(
                                    "the hash is {}, not argon2id (make one with `corecast hash-password`)",
                                    ph.algorithm
                                ),
                            ))
                        }
                        Err(err) => {
                            return Err(e(
                                &k("password"),
                                format!("not an argon2id PHC string ({err}); make one with `corecast hash-password` (the password itself never goes in the file)"),
                            ))
                        }
                    }
                    Some(h)
                }
            };
            let mut tokens = Vec::new();
            for (i, t) in p.tokens.iter().enumerate() {
                let mut d = [0u8; 32];
                match hex::decode_to_slice(t.trim(), &mut d) {
                    Ok(()) => tokens.push(d),
                    Err(_) => {
                        return Err(e(
                            &format!("principals.{name}.tokens[{i}]"),
                            "not a SHA-256 digest (64 hex digits); make one with `corecast hash-token` (the token itself never goes in the file)".into(),
                        ))
                    }
                }
            }
            let grants = Grants::from_map(&p.grants).map_err(|r| e(&k("grants"), r))?;
            let mut caps = [None; 3];
            for (i, (key, v)) in [
                ("max_connections", p.max_connections),
                ("max_subscriptions", p.max_subscriptions),
                ("max_publishers", p.max_publishers),
            ]
            .into_iter()
            .enumerate()
            {
                caps[i] = match v {
                    None => None,
                    Some(n) if (0..=10_000_000).contains(&n) => Some(n as u32),
                    Some(n) => return Err(e(&k(key), format!("{n} is outside 0..=10000000"))),
                };
            }
            let max_age = match p.max_subscription_age_s {
                None => None,
                Some(n) if (1..=31_536_000).contains(&n) => Some(Duration::from_secs(n as u64)),
                Some(n) => {
                    return Err(e(
                        &k("max_subscription_age_s"),
                        format!("{n} is outside 1..=31536000"),
                    ))
                }
            };
            principals.push(PrincipalConfig {
                name,
                password,
                tokens,
                grants,
                caps,
                max_age,
            });
        }
        Ok(AuthConfig {
            realm,
            cookie: raw.cookie,
            max_failures_per_minute,
            jwt,
            principals,
        })
    }
}

fn resolve_jwt(j: RawJwt, base: &Path) -> Result<JwtConfig, (String, String)> {
    let e = |k: &str, r: String| (k.to_string(), r);
    let algorithm = match j.algorithm.as_str() {
        "HS256" => Algorithm::HS256,
        "RS256" => Algorithm::RS256,
        "ES256" => Algorithm::ES256,
        other => {
            return Err(e(
                "algorithm",
                format!("{other:?} is not one of \"HS256\", \"RS256\", \"ES256\""),
            ))
        }
    };
    let read = |key: &str, p: &str| {
        let path = base.join(p);
        std::fs::read(&path).map_err(|err| e(key, format!("cannot read {}: {err}", path.display())))
    };
    let key = match algorithm {
        Algorithm::HS256 => {
            if j.public_key.is_some() {
                return Err(e(
                    "public_key",
                    "HS256 checks with a shared secret (secret or secret_file)".into(),
                ));
            }
            let secret = match (&j.secret, &j.secret_file) {
                (Some(s), None) => s.as_bytes().to_vec(),
                (None, Some(f)) => {
                    let mut b = read("secret_file", f)?;
                    while b.last().is_some_and(|c| c.is_ascii_whitespace()) {
                        b.pop();
                    }
                    b
                }
                _ => {
                    return Err(e(
                        "secret",
                        "HS256 needs exactly one of secret and secret_file".into(),
                    ))
                }
            };
            if secret.len() < 32 {
                return Err(e(
                    "secret",
                    format!(
                        "an HS256 secret is at least 32 bytes (RFC 7518 §3.2); this one has {}",
                        secret.len()
                    ),
                ));
            }
            DecodingKey::from_secret(&secret)
        }
        _ => {
            if j.secret.is_some() || j.secret_file.is_some() {
                return Err(e(
                    "secret",
                    format!(
                        "{:?} checks with a public key (public_key = \"key.pem\")",
                        algorithm
                    ),
                ));
            }
            let Some(p) = &j.public_key else {
                return Err(e(
                    "public_key",
                    format!("{algorithm:?} needs public_key = \"key.pem\""),
                ));
            };
            let pem = read("public_key", p)?;
            let k = match algorithm {
                Algorithm::RS256 => DecodingKey::from_rsa_pem(&pem),
                _ => DecodingKey::from_ec_pem(&pem),
            };
            k.map_err(|err| {
                e(
                    "public_key",
                    format!("{} is not a PEM {algorithm:?} public key: {err}", p),
                )
            })?
        }
    };
    let leeway = match j.leeway_s {
        None => Duration::from_secs(30),
        Some(n) if (0..=3600).contains(&n) => Duration::from_secs(n as u64),
        Some(n) => return Err(e("leeway_s", format!("{n} is outside 0..=3600"))),
    };
    Ok(JwtConfig {
        algorithm,
        key,
        issuer: j.issuer,
        audience: j.audience,
        grants_claim: j.grants_claim.unwrap_or_else(|| "grants".into()),
        leeway,
    })
}
