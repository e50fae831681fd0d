//! Password checks off the shards: argon2id costs tens of milliseconds of CPU by design, which
//! must never stall an io_uring loop serving thousands of sockets.
//!
//! One thread (`corecast-auth`) takes checks from a bounded queue ([`VERIFY_QUEUE`]); a full
//! queue is answered "busy" (503 `Retry-After: 1`) instead of waiting. A password that checked
//! out is remembered (as the SHA-256 of principal, password and hash, in memory only) so a
//! reconnect storm of one client costs one argon2 run, not thousands; the memory is dropped when
//! the config is reloaded.

use std::collections::HashMap;
use std::sync::Mutex;

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use argon2::Argon2;
use sha2::{Digest, Sha256};

/// Password checks waiting for the verifier thread, at most.
pub const VERIFY_QUEUE: usize = 64;

/// Passwords remembered as checked, at most (then the memory starts over).
pub const REMEMBERED: usize = 10_000;

struct Job {
    phc: String,
    password: String,
    reply: flume::Sender<bool>,
}

/// The verifier thread's queue.
pub struct Verifier {
    tx: crossbeam_channel::Sender<Job>,
    remembered: Mutex<HashMap<[u8; 32], ()>>,
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
        std::thread::Builder::new()
            .name("corecast-auth".into())
            .spawn(move || {
                for job in rx {
                    let ok = PasswordHash::new(&job.phc).is_ok_and(|h| {
                        Argon2::default()
                            .verify_password(job.password.as_bytes(), &h)
                            .is_ok()
                    });
                    let _ = job.reply.send(ok);
                }
            })
            .expect("spawn the corecast-auth thread");
        Verifier {
            tx,
            remembered: Mutex::new(HashMap::new()),
        }
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
            .remembered
            .lock()
            .expect("auth memory")
            .contains_key(&key)
        {
            return Checked::Match;
        }
        let (reply, rx) = flume::bounded(1);
        let job = Job {
            phc: phc.to_string(),
            password: password.to_string(),
            reply,
        };
        if self.tx.try_send(job).is_err() {
            return Checked::Busy;
        }
        match rx.recv_async().await {
            Ok(true) => {
                let mut m = self.remembered.lock().expect("auth memory");
                if m.len() >= REMEMBERED {
                    m.clear();
                }
                m.insert(key, ());
                Checked::Match
            }
            Ok(false) => Checked::Mismatch,
            Err(_) => Checked::Busy,
        }
    }

    /// Forgets every remembered password (the config was reloaded).
    pub fn forget(&self) {
        self.remembered.lock().expect("auth memory").clear();
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
}
