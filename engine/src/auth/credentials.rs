//! Reading and checking a request's credentials.
//!
//! Looked at, in this order: the `Authorization` header (`Basic` — also what clients send for a
//! WebSocket URI's userinfo, `ws://user:pass@host/…` — or `Bearer`, a declared token or a JWT),
//! then the configured cookie (a JWT, for browsers, which cannot set headers on `WebSocket` or
//! `EventSource`). Credentials in a query string are never interpreted. No credentials at all
//! act as the `anonymous` principal when one is declared.
//!
//! Secrets are compared in constant time (token digests with `subtle`; argon2's own check), an
//! unknown user name costs the same argon2 run as a known one, and an address with too many
//! failures in a minute is answered 429 without any check running.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use corecast_net::http::request::Request;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::counters;
use super::grants::Grants;
use super::limiter::FailureLimiter;
use super::verify::{Checked, Verifier};
use super::{Identity, Method, Policy, Principal};

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 401: what was missing or wrong (never the secret itself). `bearer` when a bearer token or
    /// JWT was presented (the challenge then says `error="invalid_token"`).
    Unauthenticated {
        /// The message.
        why: String,
        /// A bearer credential was refused.
        bearer: bool,
    },
    /// 429: too many failures from this address; try again in this many seconds.
    RateLimited(u64),
    /// 503: the password checks are all busy; try again in a second.
    Busy,
}

fn unauthenticated(reason: &'static str, why: impl Into<String>, bearer: bool) -> Failure {
    counters::fail(reason);
    Failure::Unauthenticated {
        why: why.into(),
        bearer,
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers_all("cookie")
        .flat_map(|h| h.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().trim_matches('"'))
}

/// Authenticates `req` under `policy`.
pub async fn authenticate(
    policy: &Policy,
    verifier: &Verifier,
    limiter: &FailureLimiter,
    req: &Request,
    peer: Option<IpAddr>,
) -> Result<Identity, Failure> {
    let mut auths = req.headers_all("authorization");
    let header = auths.next();
    if auths.next().is_some() {
        return Err(unauthenticated(
            "malformed",
            "more than one Authorization header",
            false,
        ));
    }
    let jwt_cookie = match (&policy.cfg.cookie, header) {
        (Some(name), None) => cookie(req, name),
        _ => None,
    };
    if header.is_none() && jwt_cookie.is_none() {
        return match &policy.anonymous {
            Some(a) => {
                counters::SUCCEEDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(Identity::As(a.clone()))
            }
            None => Err(unauthenticated(
                "no_credentials",
                "this broker needs credentials: HTTP Basic (ws://user:password@host/…), a bearer token or a JWT",
                false,
            )),
        };
    }
    let now = Instant::now();
    if let Err(secs) = limiter.take(peer, now) {
        counters::fail("rate_limited");
        return Err(Failure::RateLimited(secs));
    }
    let result = match (header, jwt_cookie) {
        (Some(h), _) => {
            let (scheme, rest) = h
                .split_once(|c: char| c.is_ascii_whitespace())
                .unwrap_or((h, ""));
            let rest = rest.trim();
            if scheme.eq_ignore_ascii_case("basic") {
                basic(policy, verifier, rest).await
            } else if scheme.eq_ignore_ascii_case("bearer") {
                bearer(policy, rest)
            } else {
                // never echoed: a client that forgot the scheme sent its secret as one
                Err(unauthenticated(
                    "malformed",
                    "the Authorization header is not `Basic …` or `Bearer …`",
                    false,
                ))
            }
        }
        (None, Some(token)) => jwt(policy, token),
        (None, None) => unreachable!("handled above"),
    };
    match &result {
        Ok(_) => {
            counters::SUCCEEDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            limiter.release(peer);
        }
        // the attempt taken above stays counted as a failure
        Err(Failure::Unauthenticated { .. }) => {}
        Err(_) => limiter.release(peer),
    }
    result
}

async fn basic(policy: &Policy, verifier: &Verifier, b64: &str) -> Result<Identity, Failure> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let Some(decoded) = decoded else {
        return Err(unauthenticated(
            "malformed",
            "the Basic credentials are not base64 of UTF-8 user:password",
            false,
        ));
    };
    let Some((user, password)) = decoded.split_once(':') else {
        return Err(unauthenticated(
            "malformed",
            "the Basic credentials have no ':' between user and password",
            false,
        ));
    };
    let found = policy
        .cfg
        .principals
        .iter()
        .position(|p| p.name == user && p.password.is_some());
    let phc = match found {
        Some(i) => policy.cfg.principals[i].password.as_deref().unwrap_or(""),
        None => &policy.decoy,
    };
    match verifier.check(user, password, phc).await {
        Checked::Match if found.is_some() => {
            Ok(Identity::As(policy.principals[found.unwrap_or(0)].clone()))
        }
        Checked::Busy => Err(Failure::Busy),
        _ => Err(unauthenticated(
            "bad_password",
            "unknown user or wrong password",
            false,
        )),
    }
}

fn bearer(policy: &Policy, token: &str) -> Result<Identity, Failure> {
    if token.is_empty() {
        return Err(unauthenticated(
            "malformed",
            "the Bearer credentials are empty",
            true,
        ));
    }
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    // every declared digest is compared, in constant time, whatever matches first
    let mut found: Option<usize> = None;
    for (i, p) in policy.cfg.principals.iter().enumerate() {
        for t in &p.tokens {
            if bool::from(t.ct_eq(&digest)) && found.is_none() {
                found = Some(i);
            }
        }
    }
    if let Some(i) = found {
        return Ok(Identity::As(Arc::new(Principal {
            method: Method::Token,
            ..(*policy.principals[i]).clone()
        })));
    }
    if policy.cfg.jwt.is_some() && token.bytes().filter(|&b| b == b'.').count() == 2 {
        return jwt(policy, token);
    }
    Err(unauthenticated(
        "unknown_token",
        "unknown bearer token",
        true,
    ))
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

fn jwt(policy: &Policy, token: &str) -> Result<Identity, Failure> {
    let Some(cfg) = &policy.cfg.jwt else {
        return Err(unauthenticated(
            "bad_jwt",
            "this broker accepts no JWTs",
            true,
        ));
    };
    let mut v = jsonwebtoken::Validation::new(cfg.algorithm);
    v.leeway = cfg.leeway.as_secs();
    v.validate_nbf = true;
    v.set_required_spec_claims(&["exp", "sub"]);
    if let Some(iss) = &cfg.issuer {
        v.set_issuer(&[iss]);
    }
    match &cfg.audience {
        Some(aud) => v.set_audience(&[aud]),
        None => v.validate_aud = false,
    }
    let data = match jsonwebtoken::decode::<Claims>(token, &cfg.key, &v) {
        Ok(d) => d,
        Err(e) => {
            use jsonwebtoken::errors::ErrorKind as K;
            let (reason, why) = match e.kind() {
                K::ExpiredSignature => ("expired_jwt", "the JWT has expired (exp)".to_string()),
                K::ImmatureSignature => ("bad_jwt", "the JWT is not valid yet (nbf)".into()),
                K::InvalidSignature => ("bad_jwt", "the JWT's signature does not check".into()),
                K::InvalidAlgorithm => (
                    "bad_jwt",
                    format!("the JWT is not signed with {:?}", cfg.algorithm),
                ),
                K::InvalidIssuer => ("bad_jwt", "the JWT's iss is not the expected one".into()),
                K::InvalidAudience => ("bad_jwt", "the JWT's aud does not name this broker".into()),
                K::MissingRequiredClaim(c) => ("bad_jwt", format!("the JWT has no {c} claim")),
                K::Json(j) => {
                    let text = j.to_string();
                    let why = if let Some(field) = text
                        .strip_prefix("missing field `")
                        .and_then(|r| r.split('`').next())
                    {
                        format!("the JWT has no {field} claim")
                    } else if text.contains("unknown variant") {
                        format!(
                            "the JWT's header names an algorithm this broker does not take (it takes {:?} only)",
                            cfg.algorithm
                        )
                    } else {
                        "the JWT's header or claims are not the JSON a JWT holds (exp and nbf are integers, sub a string)".into()
                    };
                    ("bad_jwt", why)
                }
                _ => ("bad_jwt", format!("not a valid JWT: {e}")),
            };
            return Err(unauthenticated(reason, why, true));
        }
    };
    let name = data.claims.sub;
    if name.is_empty() || name.len() > 128 {
        return Err(unauthenticated(
            "bad_jwt",
            "the JWT's sub is not a principal name (1 to 128 characters)",
            true,
        ));
    }
    let declared = policy.principals.iter().find(|p| p.name == name);
    let caps = declared.map_or([None; 3], |p| p.caps);
    let max_age = declared.and_then(|p| p.max_age);
    let expires_at = Some(data.claims.exp);
    let grants = match data.claims.rest.get(&cfg.grants_claim) {
        Some(value) => {
            let map: BTreeMap<String, Vec<String>> = serde_json::from_value(value.clone())
                .map_err(|_| {
                    unauthenticated(
                        "bad_jwt",
                        format!(
                            "the JWT's {} claim is not an object of action → list of stream names",
                            cfg.grants_claim
                        ),
                        true,
                    )
                })?;
            Grants::from_map(&map).map_err(|why| {
                unauthenticated(
                    "bad_jwt",
                    format!("the JWT's {} claim: {why}", cfg.grants_claim),
                    true,
                )
            })?
        }
        // no claim: the grants declared for a principal of that name, if any
        None => declared.map(|p| p.grants.clone()).unwrap_or_default(),
    };
    Ok(Identity::As(Arc::new(Principal {
        name,
        grants,
        method: Method::Jwt,
        caps,
        max_age,
        expires_at,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            target: "/trades".into(),
            version_minor: 1,
            path: "/trades".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            content_length: 0,
        }
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let r = req(&[("cookie", "a=1; corecast_token=abc.def.ghi ; b=2")]);
        assert_eq!(cookie(&r, "corecast_token"), Some("abc.def.ghi"));
        assert_eq!(cookie(&r, "corecast"), None);
        assert_eq!(cookie(&r, "b"), Some("2"));
    }
}
