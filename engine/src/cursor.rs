//! Signed cursors of the HTTP pull API.
//!
//! A cursor is opaque to clients: `base64url(version ‖ next_offset ‖ expires_s ‖ tag)` where
//! `tag` is the first 16 bytes of HMAC-SHA256 over the same fields *and* what the cursor is bound
//! to — the stream's name, its `stream_id` (a stream deleted and recreated gets a new one), the
//! canonical `where=` filter and the caller's address. The binding is not carried in the cursor,
//! only checked: presenting it for another stream, filter or caller (or after the stream was
//! recreated, or after any byte was changed) fails the MAC and reads as `cursor_invalid`; a cursor
//! that verifies but is past its expiry is `cursor_expired`.
//!
//! The key comes from the config's `cursor_key`, or is generated on first start (32 random bytes
//! from the OS) and kept in `<data_dir>/.cursor_key` with mode 0600, so cursors survive restarts.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const VERSION: u8 = 1;
const TAG_BYTES: usize = 16;
const RAW_BYTES: usize = 1 + 8 + 8 + TAG_BYTES;
/// The version byte of a cursor carrying a payload ([`CursorKey::sign_blob`]).
const BLOB_VERSION: u8 = 2;
/// Most payload bytes one [`CursorKey::sign_blob`] cursor carries.
pub const BLOB_PAYLOAD_MAX: usize = 4096;
/// The key file's name in the data directory.
pub const KEY_FILE: &str = ".cursor_key";

/// What a cursor is bound to; all of it must match when it is read back.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// Stream name.
    pub stream: &'a str,
    /// The stream's id (its log's UUID).
    pub stream_id: &'a str,
    /// The canonical `where=` filter (`""` without one).
    pub filter: &'a str,
    /// The caller: the client's address.
    pub caller: &'a str,
}

/// Why a cursor was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorError {
    /// Not one of ours, altered, or bound to something else.
    Invalid,
    /// Genuine but past its expiry.
    Expired,
}

/// The HMAC key.
#[derive(Clone)]
pub struct CursorKey {
    key: Vec<u8>,
    ttl_s: u64,
}

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorKey")
            .field("ttl_s", &self.ttl_s)
            .finish_non_exhaustive()
    }
}

impl CursorKey {
    /// A key from raw bytes; cursors live `ttl_s` seconds.
    pub fn new(key: &[u8], ttl_s: u64) -> CursorKey {
        CursorKey {
            key: key.to_vec(),
            ttl_s,
        }
    }

    /// The configured key, or the one kept in `data_dir` (created with mode 0600 on first start).
    pub fn load_or_create(
        data_dir: &Path,
        configured: Option<&str>,
        ttl_s: u64,
    ) -> Result<CursorKey, String> {
        if let Some(k) = configured {
            return Ok(CursorKey::new(k.as_bytes(), ttl_s));
        }
        let path = data_dir.join(KEY_FILE);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                let mut key = [0u8; 32];
                std::fs::File::open("/dev/urandom")
                    .and_then(|mut r| r.read_exact(&mut key))
                    .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
                let text = hex_encode(&key);
                f.write_all(text.as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Ok(CursorKey::new(&key, ttl_s))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let key = hex_decode(text.trim())
                    .filter(|k| k.len() >= 16)
                    .ok_or_else(|| {
                        format!(
                            "{} does not hold a hex key of 16 bytes or more",
                            path.display()
                        )
                    })?;
                let mode = std::fs::metadata(&path)
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or(0);
                if mode & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), "cursor key file was readable by others; setting mode 0600");
                    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
                }
                Ok(CursorKey::new(&key, ttl_s))
            }
            Err(e) => Err(format!("cannot create {}: {e}", path.display())),
        }
    }

    /// Cursor lifetime in seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }

    fn tag(&self, b: &Binding<'_>, fixed: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"corecast-cursor-v1\0");
        for part in [b.stream, b.stream_id, b.filter, b.caller] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(fixed);
        mac.finalize().into_bytes().into()
    }

    /// A cursor resuming at `next`, expiring `ttl_s` after `now_s` (Unix seconds).
    pub fn sign(&self, b: &Binding<'_>, next: u64, now_s: u64) -> String {
        let mut raw = Vec::with_capacity(RAW_BYTES);
        raw.push(VERSION);
        raw.extend_from_slice(&next.to_be_bytes());
        raw.extend_from_slice(&now_s.saturating_add(self.ttl_s).to_be_bytes());
        let tag = self.tag(b, &raw);
        raw.extend_from_slice(&tag[..TAG_BYTES]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    /// A cursor carrying `payload` (≤ [`BLOB_PAYLOAD_MAX`] bytes), valid until `expires_s`
    /// (Unix seconds): the keyed state's window cursors and change tokens
    /// (`crate::state::http`), bound like the pull cursors.
    pub fn sign_blob(&self, b: &Binding<'_>, payload: &[u8], expires_s: u64) -> String {
        assert!(
            payload.len() <= BLOB_PAYLOAD_MAX,
            "a cursor payload is bounded"
        );
        let mut raw = Vec::with_capacity(1 + 8 + payload.len() + TAG_BYTES);
        raw.push(BLOB_VERSION);
        raw.extend_from_slice(&expires_s.to_be_bytes());
        raw.extend_from_slice(payload);
        let tag = self.tag(b, &raw);
        raw.extend_from_slice(&tag[..TAG_BYTES]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    /// The payload of a [`CursorKey::sign_blob`] cursor, if it is ours, intact, bound to `b`
    /// and not expired.
    pub fn verify_blob(
        &self,
        b: &Binding<'_>,
        cursor: &str,
        now_s: u64,
    ) -> Result<Vec<u8>, CursorError> {
        if cursor.len() > (1 + 8 + BLOB_PAYLOAD_MAX + TAG_BYTES) * 4 / 3 + 4 {
            return Err(CursorError::Invalid);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Invalid)?;
        if raw.len() < 1 + 8 + TAG_BYTES || raw[0] != BLOB_VERSION {
            return Err(CursorError::Invalid);
        }
        let (fixed, tag) = raw.split_at(raw.len() - TAG_BYTES);
        let want = self.tag(b, fixed);
        if !constant_time_eq(&want[..TAG_BYTES], tag) {
            return Err(CursorError::Invalid);
        }
        let expires = u64::from_be_bytes(fixed[1..9].try_into().expect("8 bytes"));
        if now_s >= expires {
            return Err(CursorError::Expired);
        }
        Ok(fixed[9..].to_vec())
    }

    /// The next offset a cursor carries, if it is ours, intact, bound to `b` and not expired.
    pub fn verify(&self, b: &Binding<'_>, cursor: &str, now_s: u64) -> Result<u64, CursorError> {
        if cursor.len() > 64 {
            return Err(CursorError::Invalid);
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Invalid)?;
        if raw.len() != RAW_BYTES || raw[0] != VERSION {
            return Err(CursorError::Invalid);
        }
        let (fixed, tag) = raw.split_at(1 + 8 + 8);
        let want = self.tag(b, fixed);
        if !constant_time_eq(&want[..TAG_BYTES], tag) {
            return Err(CursorError::Invalid);
        }
        let next = u64::from_be_bytes(fixed[1..9].try_into().expect("8 bytes"));
        let expires = u64::from_be_bytes(fixed[9..17].try_into().expect("8 bytes"));
        if now_s >= expires {
            return Err(CursorError::Expired);
        }
        Ok(next)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

static KEY: RwLock<Option<Arc<CursorKey>>> = RwLock::new(None);

/// Installs the process's cursor key (at server start).
pub fn install(key: CursorKey) {
    *KEY.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(key));
}

/// The installed key (a random per-process key if none was installed).
pub fn key() -> Arc<CursorKey> {
    if let Some(k) = KEY.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        return k.clone();
    }
    let mut w = KEY.write().unwrap_or_else(|p| p.into_inner());
    w.get_or_insert_with(|| {
        let mut k = [0u8; 32];
        let _ = std::fs::File::open("/dev/urandom").and_then(|mut r| r.read_exact(&mut k));
        Arc::new(CursorKey::new(&k, 3600))
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b<'a>(stream: &'a str, filter: &'a str, caller: &'a str) -> Binding<'a> {
        Binding {
            stream,
            stream_id: "id-1",
            filter,
            caller,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let k = CursorKey::new(b"0123456789abcdef", 60);
        let c = k.sign(&b("t", "", "127.0.0.1"), 42, 1000);
        assert_eq!(k.verify(&b("t", "", "127.0.0.1"), &c, 1000), Ok(42));
        assert_eq!(
            k.verify(&b("u", "", "127.0.0.1"), &c, 1000),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            k.verify(&b("t", "{\"a\":1}", "127.0.0.1"), &c, 1000),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            k.verify(&b("t", "", "127.0.0.2"), &c, 1000),
            Err(CursorError::Invalid)
        );
        let other = Binding {
            stream_id: "id-2",
            ..b("t", "", "127.0.0.1")
        };
        assert_eq!(k.verify(&other, &c, 1000), Err(CursorError::Invalid));
        assert_eq!(
            k.verify(&b("t", "", "127.0.0.1"), &c, 1060),
            Err(CursorError::Expired)
        );
        // flip every character in turn: never accepted
        for i in 0..c.len() {
            let mut t: Vec<u8> = c.clone().into_bytes();
            t[i] = if t[i] == b'A' { b'B' } else { b'A' };
            let t = String::from_utf8(t).unwrap();
            if t != c {
                assert!(k.verify(&b("t", "", "127.0.0.1"), &t, 1000).is_err(), "{t}");
            }
        }
        let k2 = CursorKey::new(b"another key of 16b", 60);
        assert_eq!(
            k2.verify(&b("t", "", "127.0.0.1"), &c, 1000),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            k.verify(&b("t", "", "127.0.0.1"), "", 1000),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            k.verify(&b("t", "", "127.0.0.1"), "!!", 1000),
            Err(CursorError::Invalid)
        );
    }

    #[test]
    fn blobs_round_trip_bound_and_never_read_as_offsets() {
        let k = CursorKey::new(b"0123456789abcdef", 60);
        let c = k.sign_blob(&b("t", "state", "x"), b"\x01payload", 1060);
        assert_eq!(
            k.verify_blob(&b("t", "state", "x"), &c, 1000),
            Ok(b"\x01payload".to_vec())
        );
        assert_eq!(
            k.verify_blob(&b("t", "state2", "x"), &c, 1000),
            Err(CursorError::Invalid)
        );
        assert_eq!(
            k.verify_blob(&b("t", "state", "x"), &c, 1060),
            Err(CursorError::Expired)
        );
        assert_eq!(
            k.verify(&b("t", "state", "x"), &c, 1000),
            Err(CursorError::Invalid)
        );
        let pull = k.sign(&b("t", "state", "x"), 5, 1000);
        assert_eq!(
            k.verify_blob(&b("t", "state", "x"), &pull, 1000),
            Err(CursorError::Invalid)
        );
    }

    #[test]
    fn key_file_is_created_0600_and_reused() {
        let d = tempfile::tempdir().unwrap();
        let k1 = CursorKey::load_or_create(d.path(), None, 60).unwrap();
        let mode = std::fs::metadata(d.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let k2 = CursorKey::load_or_create(d.path(), None, 60).unwrap();
        let c = k1.sign(&b("t", "", "x"), 1, 0);
        assert_eq!(k2.verify(&b("t", "", "x"), &c, 0), Ok(1));
    }
}
