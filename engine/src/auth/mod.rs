//! Who is asking, and whether they may: authentication, grants, and the browser's `Origin`.
//!
//! Every request is decided here once, right after its head is read and before anything else
//! happens to it — before a WebSocket upgrade is answered, before a body is read, before the
//! stream it names is looked up ([`gate`]). The answer is an [`Identity`] that the endpoints
//! that list streams (`/stats`, `/metrics`, the catalog) filter by, and that pull cursors and the
//! SSE caps are bound to. Nothing is checked per frame: the per-frame cost of auth is zero.
//!
//! - [`config`]: the `[auth]` section (principals, password and token hashes, grants, JWT keys);
//! - [`grants`]: the six actions on stream names or `"*"`;
//! - [`credentials`]: HTTP Basic, bearer tokens, JWTs (header or cookie), checked;
//! - [`verify`]: argon2id off the shards, on the `corecast-auth` thread;
//! - [`limiter`]: failed authentications per client address;
//! - [`origin`]: the allowed-origins list (cross-site WebSocket hijacking, CORS);
//! - [`http`]: which grant a request needs, and the 401/403/429 answers.
//!
//! With no `[auth]` section the broker is open (every request is [`Identity::Open`]), as before,
//! and says so at start-up in one warning line.

pub mod config;
pub mod credentials;
pub mod grants;
pub mod http;
pub mod limiter;
pub mod live;
pub mod origin;
pub mod verify;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub use config::AuthConfig;
pub use grants::{Action, Grants};
pub use http::gate;

use limiter::FailureLimiter;
use verify::Verifier;

/// How a principal proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// No credentials: the declared `anonymous` principal.
    Anonymous,
    /// HTTP Basic (also a WebSocket URI's userinfo, which clients send as Basic).
    Basic,
    /// A bearer token whose SHA-256 is declared.
    Token,
    /// A signed JWT (the `Authorization: Bearer` header or the configured cookie).
    Jwt,
}

/// An authenticated principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name (a JWT's `sub`).
    pub name: String,
    /// What it may do.
    pub grants: Grants,
    /// How it authenticated.
    pub method: Method,
    /// Its caps ([`config::PrincipalConfig::caps`]).
    pub caps: [Option<u32>; 3],
    /// How long one of its sessions may last (`max_subscription_age_s`).
    pub max_age: Option<std::time::Duration>,
    /// When its credentials expire (a JWT's `exp`, Unix seconds): its sessions end then.
    pub expires_at: Option<u64>,
}

/// Who a request acts as.
#[derive(Debug, Clone)]
pub enum Identity {
    /// The broker has no `[auth]`: everything is allowed.
    Open,
    /// This principal.
    As(Arc<Principal>),
}

impl Identity {
    /// Whether `action` on `stream` is allowed.
    pub fn allows(&self, action: Action, stream: &str) -> bool {
        match self {
            Identity::Open => true,
            Identity::As(p) => p.grants.allows(action, stream),
        }
    }

    /// The principal's name; `None` when open.
    pub fn name(&self) -> Option<&str> {
        match self {
            Identity::Open => None,
            Identity::As(p) => Some(&p.name),
        }
    }
}

/// Warns about a config that is valid but unsafe: a JWT cookie without `allowed_origins` lets
/// any site's page open a WebSocket with the user's cookie (cross-site WebSocket hijacking).
pub fn warn_about(cfg: &crate::config::Config) {
    if let Some(a) = &cfg.auth {
        if a.cookie.is_some() && !cfg.allowed_origins.restricted() {
            tracing::warn!(
                "[auth] cookie is set but allowed_origins is not: any web page can open a WebSocket with your users' cookie; list your sites' origins"
            );
        }
    }
}

/// The checked `[auth]` config with its principals ready to hand out.
pub struct Policy {
    /// The config.
    pub cfg: AuthConfig,
    principals: Vec<Arc<Principal>>,
    anonymous: Option<Arc<Principal>>,
    /// A real argon2id hash of nothing anyone knows: an unknown user name is checked against it,
    /// so that answering takes as long as for a known one (no user enumeration by timing).
    decoy: String,
}

impl Policy {
    /// Builds the policy of `cfg`.
    pub fn new(cfg: AuthConfig) -> Policy {
        let principals = cfg
            .principals
            .iter()
            .map(|p| {
                Arc::new(Principal {
                    name: p.name.clone(),
                    grants: p.grants.clone(),
                    method: Method::Basic,
                    caps: p.caps,
                    max_age: p.max_age,
                    expires_at: None,
                })
            })
            .collect::<Vec<_>>();
        let anonymous = cfg
            .principals
            .iter()
            .position(|p| p.name == config::ANONYMOUS)
            .map(|i| {
                Arc::new(Principal {
                    method: Method::Anonymous,
                    ..(*principals[i]).clone()
                })
            });
        let decoy = verify::hash_password(&uuid::Uuid::new_v4().to_string())
            .expect("argon2 hashes a random password");
        Policy {
            cfg,
            principals,
            anonymous,
            decoy,
        }
    }

    /// Whether some principal signs in with a password (the 401 then offers `Basic`).
    pub fn takes_passwords(&self) -> bool {
        self.cfg.principals.iter().any(|p| p.password.is_some())
    }

    /// Whether bearer tokens or JWTs are accepted (the 401 then offers `Bearer`).
    pub fn takes_bearer(&self) -> bool {
        self.cfg.jwt.is_some() || self.cfg.principals.iter().any(|p| !p.tokens.is_empty())
    }
}

/// Counters for `/metrics`.
pub mod counters {
    use super::*;

    /// Why an authentication failed, by label.
    pub const FAILURE_REASONS: [&str; 7] = [
        "no_credentials",
        "bad_password",
        "unknown_token",
        "bad_jwt",
        "expired_jwt",
        "malformed",
        "rate_limited",
    ];
    pub(crate) static FAILURES: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
    /// Authenticated requests.
    pub static SUCCEEDED: AtomicU64 = AtomicU64::new(0);
    /// Requests refused 403 (authenticated, without the grant).
    pub static FORBIDDEN: AtomicU64 = AtomicU64::new(0);
    /// WebSocket upgrades and CORS requests refused for their `Origin`.
    pub static ORIGIN_REFUSED: AtomicU64 = AtomicU64::new(0);

    /// Counts one failure with this reason (one of [`FAILURE_REASONS`]).
    pub(crate) fn fail(reason: &str) {
        let i = FAILURE_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(5);
        FAILURES[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The failure counts, with their reasons.
    pub fn failures() -> impl Iterator<Item = (&'static str, u64)> {
        FAILURE_REASONS
            .iter()
            .zip(FAILURES.iter())
            .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
    }
}

/// The broker's authentication state, shared by every shard.
pub struct Auth {
    policy: RwLock<Option<Arc<Policy>>>,
    verifier: Verifier,
    limiter: RwLock<Arc<FailureLimiter>>,
    origins: RwLock<Arc<origin::Origins>>,
    /// What each principal holds open (caps, revocation).
    pub board: live::Board,
}

impl Auth {
    /// The state for `cfg` (`None`: open) and the allowed origins.
    pub fn new(cfg: Option<AuthConfig>, origins: origin::Origins) -> Auth {
        let max = cfg
            .as_ref()
            .map_or(config::DEFAULT_MAX_FAILURES_PER_MINUTE, |c| {
                c.max_failures_per_minute
            });
        Auth {
            policy: RwLock::new(cfg.map(|c| Arc::new(Policy::new(c)))),
            verifier: Verifier::start(),
            limiter: RwLock::new(Arc::new(FailureLimiter::new(max))),
            origins: RwLock::new(Arc::new(origins)),
            board: live::Board::default(),
        }
    }

    /// No `[auth]`, every origin: what a broker without this module did.
    pub fn open() -> Auth {
        Auth::new(None, origin::Origins::any())
    }

    /// The current policy; `None`: open.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.policy.read().expect("auth policy").clone()
    }

    /// The current allowed origins.
    pub fn origins(&self) -> Arc<origin::Origins> {
        self.origins.read().expect("auth origins").clone()
    }

    /// Replaces the policy and the allowed origins (SIGHUP). Remembered passwords are
    /// forgotten; connections already open keep the identity they were admitted with.
    pub fn reload(&self, cfg: Option<AuthConfig>, origins: origin::Origins) {
        let max = cfg
            .as_ref()
            .map_or(config::DEFAULT_MAX_FAILURES_PER_MINUTE, |c| {
                c.max_failures_per_minute
            });
        *self.policy.write().expect("auth policy") = cfg.map(|c| Arc::new(Policy::new(c)));
        *self.limiter.write().expect("auth limiter") = Arc::new(FailureLimiter::new(max));
        *self.origins.write().expect("auth origins") = Arc::new(origins);
        self.verifier.forget();
        self.board.clear_revocations();
    }

    fn limiter(&self) -> Arc<FailureLimiter> {
        self.limiter.read().expect("auth limiter").clone()
    }

    /// Authenticates `req` from `peer` (no grant checked yet).
    pub async fn authenticate(
        &self,
        req: &corecast_net::http::request::Request,
        peer: Option<IpAddr>,
    ) -> Result<Identity, credentials::Failure> {
        let Some(policy) = self.policy() else {
            return Ok(Identity::Open);
        };
        let limiter = self.limiter();
        credentials::authenticate(&policy, &self.verifier, &limiter, req, peer).await
    }
}
