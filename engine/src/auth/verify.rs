//! Password checks off the shards: argon2id costs tens of milliseconds of CPU by design, which
//! must never stall an io_uring loop serving thousands of sockets.
//!
//! One thread (`corecast-auth`) takes checks from a bounded queue ([`VERIFY_QUEUE`]); a full
//! queue is answered "busy" (503 `Retry-After: 1`) instead of waiting. A password that checked
//! out is remembered (as the SHA-256 of principal, password and hash, in memory only) so a
//! reconnect storm of one client costs one argon2 run, not thousands; the memory is dropped when
//! the config is reloaded. Checks of the same credentials that arrive while one is queued or
//! running wait for its answer instead of queueing their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;
use sha2::{Digest, Sha256};

/// Password checks waiting for the verifier thread, at most.
pub const VERIFY_QUEUE: usize = 64;

/// Passwords remembered as checked, at most (then the memory starts over).
pub const REMEMBERED: usize = 10_000;

struct Job {
    key: [u8; 32],
    phc: String,
    password: String,
}

/// What the verifier thread and the shards share.
#[derive(Default)]
struct Inner {
    /// Passwords that checked out, by [`Verifier::key`].
    remembered: Mutex<HashMap<[u8; 32], ()>>,
    /// Checks queued or running, with everyone waiting for each: a storm of connections with
    /// the same credentials costs one argon2 run and one queue place, not one each.
    checking: Mutex<HashMap<[u8; 32], Vec<flume::Sender<bool>>>>,
}

/// The verifier thread's queue.
pub struct Verifier {
    tx: crossbeam_channel::Sender<Job>,
    inner: Arc<Inner>,
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The password matches.
    Match,
    /// It does not.
    Mismatch,
    /// The queue is full: try again in a second.
    Busy,
}

impl Verifier {
    /// Starts the verifier thread.
    pub fn start() -> Verifier {
        let (tx, rx) = crossbeam_channel::bounded::<Job>(VERIFY_QUEUE);
        let inner = Arc::new(Inner::default());
        let shared = inner.clone();
        std::thread::Builder::new()
            .name("corecast-auth".into())
            .spawn(move || {
                for job in rx {
                    let ok = PasswordHash::new(&job.phc).is_ok_and(|h| {
                        Argon2::default()
                            .verify_password(job.password.as_bytes(), &h)
                            .is_ok()
                    });
                    if ok {
                        let mut m = shared.remembered.lock().expect("auth memory");
                        if m.len() >= REMEMBERED {
                            m.clear();
                        }
                        m.insert(job.key, ());
                    }
                    let waiting = shared
                        .checking
                        .lock()
                        .expect("auth checks")
                        .remove(&job.key)
                        .unwrap_or_default();
                    for w in waiting {
                        let _ = w.send(ok);
                    }
                }
            })
            .expect("spawn the corecast-auth thread");
        Verifier { tx, inner }
    }

    fn key(principal: &str, password: &str, phc: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [principal, password, phc] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().into()
    }

    /// Checks `password` against `phc` (the principal's argon2id hash).
    pub async fn check(&self, principal: &str, password: &str, phc: &str) -> Checked {
        let key = Verifier::key(principal, password, phc);
        if self
            .inner
            .remembered
            .lock()
            .expect("auth memory")
            .contains_key(&key)
        {
            return Checked::Match;
        }
        let (reply, rx) = flume::bounded(1);
        {
            let mut checking = self.inner.checking.lock().expect("auth checks");
            match checking.get_mut(&key) {
                // the same check is already queued or running: wait for its answer
                Some(waiting) => waiting.push(reply),
                None => {
                    let job = Job {
                        key,
                        phc: phc.to_string(),
                        password: password.to_string(),
                    };
                    if self.tx.try_send(job).is_err() {
                        return Checked::Busy;
                    }
                    checking.insert(key, vec![reply]);
                }
            }
        }
        match rx.recv_async().await {
            Ok(true) => Checked::Match,
            Ok(false) => Checked::Mismatch,
            Err(_) => Checked::Busy,
        }
    }

    /// Forgets every remembered password (the config was reloaded).
    pub fn forget(&self) {
        self.inner.remembered.lock().expect("auth memory").clear();
    }
}

/// Hashes `password` as an argon2id PHC string with a random salt and the crate's default cost
/// (OWASP's m = 19 MiB, t = 2, p = 1): what `corecast hash-password` prints.
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt =
        SaltString::encode_b64(uuid::Uuid::new_v4().as_bytes()).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_check_and_are_salted() {
        let a = hash_password("s3cret").unwrap();
        let b = hash_password("s3cret").unwrap();
        assert!(a.starts_with("$argon2id$v=19$"), "{a}");
        assert_ne!(a, b, "a random salt per hash");
        let v = Verifier::start();
        let run = |pw: &'static str, phc: String| {
            let mut rt = corecast_net::rt::build_runtime(64).unwrap();
            let v = &v;
            rt.block_on(async move { v.check("alice", pw, &phc).await })
        };
        assert_eq!(run("s3cret", a.clone()), Checked::Match);
        assert_eq!(run("s3cret", a.clone()), Checked::Match, "remembered");
        assert_eq!(run("S3cret", a.clone()), Checked::Mismatch);
        v.forget();
        assert_eq!(run("s3cret", a), Checked::Match);
    }

    #[test]
    fn a_storm_of_one_credential_is_one_check_not_a_full_queue() {
        let phc = hash_password("storm").unwrap();
        let v = Verifier::start();
        let results: Vec<Checked> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4 * VERIFY_QUEUE)
                .map(|_| {
                    let (v, phc) = (&v, phc.as_str());
                    s.spawn(move || {
                        let mut rt = corecast_net::rt::build_runtime(64).unwrap();
                        rt.block_on(async move { v.check("alice", "storm", phc).await })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.iter().all(|r| *r == Checked::Match), "{results:?}");
    }
}
