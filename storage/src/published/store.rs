//! Where a published table lives: a local directory (`file://`) or an S3 bucket (`s3://`, with
//! the `s3` cargo feature), behind one small blocking API.
//!
//! In: a location URI and, for S3, [`S3Options`]. Out: [`Store`], whose keys are paths relative
//! to the location (`trades/metadata/version-hint.text`) and whose [`Store::uri`] gives the
//! absolute URI a reader names (Iceberg metadata holds absolute URIs).
//!
//! Local writes are durable and atomic: a temporary file in the same directory, `fsync`,
//! `rename`, `fsync` of the directory; a file published from local disk is hard-linked (copied
//! and synced where a link is impossible), so it costs no space beside the sealed segment it came
//! from. On S3 one `PUT` is atomic by itself (large files go up as a multipart upload, which S3
//! makes visible only on completion). Credentials are read once into the client and never
//! written anywhere, not even into errors.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

/// How to reach S3 (or an S3-compatible server). Every field left `None` falls back to the
/// standard `AWS_*` environment (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) and then to the ambient credential chain.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// e.g. `http://127.0.0.1:9000`; `http://` endpoints are allowed.
    pub endpoint: Option<String>,
    /// e.g. `us-east-1`.
    pub region: Option<String>,
    /// The access key id.
    pub access_key: Option<String>,
    /// The secret access key (never printed: see the `Debug` impl).
    pub secret_key: Option<String>,
}

impl fmt::Debug for S3Options {
    /// Never prints a key: only whether one is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key", &self.access_key.as_ref().map(|_| "<set>"))
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Why a store operation failed. The text names the URI and the operation, never a credential.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The location is not usable as written (or needs a feature this build lacks).
    #[error("{0}")]
    Config(String),
    /// A local file operation failed.
    #[error("{op} {uri}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        uri: String,
        /// The error.
        source: io::Error,
    },
    /// The object store answered an error.
    #[error("{op} {uri}: {message}")]
    Remote {
        /// The request (`GET`, `PUT`, ...).
        op: &'static str,
        /// On what.
        uri: String,
        /// The store's answer.
        message: String,
    },
}

/// A published location. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    base: String,
    inner: Arc<Inner>,
}

enum Inner {
    Local(PathBuf),
    #[cfg(feature = "s3")]
    Remote(remote::Remote),
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Store({})", self.base)
    }
}

impl Store {
    /// Opens the location `uri`: `file:///abs/dir` or `s3://bucket/prefix`. Nothing is
    /// touched yet: a local directory is made by the first write into it, so a location that
    /// is unusable (read-only, a file in the way) fails the first publish, shown in `/stats`,
    /// rather than the broker's start.
    pub fn open(uri: &str, s3: &S3Options) -> Result<Store, StoreError> {
        Store::open_with(uri, s3, false)
    }

    /// Opens the location `uri` for reading only: as [`Store::open`], but a local directory is
    /// never created (a missing one reads as holding no object).
    pub fn open_existing(uri: &str, s3: &S3Options) -> Result<Store, StoreError> {
        Store::open_with(uri, s3, false)
    }

    fn open_with(uri: &str, s3: &S3Options, create: bool) -> Result<Store, StoreError> {
        let base = uri.trim_end_matches('/').to_string();
        if let Some(path) = base.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(StoreError::Config(format!(
                    "{uri}: a file:// location needs an absolute path (file:///dir)"
                )));
            }
            let dir = PathBuf::from(path);
            if create {
                fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                    op: "create",
                    uri: base.clone(),
                    source,
                })?;
            }
            return Ok(Store {
                base,
                inner: Arc::new(Inner::Local(dir)),
            });
        }
        if base.starts_with("s3://") {
            #[cfg(feature = "s3")]
            {
                let remote = remote::Remote::open(&base, s3)?;
                return Ok(Store {
                    base,
                    inner: Arc::new(Inner::Remote(remote)),
                });
            }
            #[cfg(not(feature = "s3"))]
            {
                let _ = s3;
                return Err(StoreError::Config(format!(
                    "{uri}: this corecast was built without S3 support; rebuild with `--features s3`"
                )));
            }
        }
        Err(StoreError::Config(format!(
            "{uri}: a published location is file:///absolute/dir or s3://bucket/prefix"
        )))
    }

    /// The location's URI, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether the location is on this machine's disk.
    pub fn is_local(&self) -> bool {
        matches!(*self.inner, Inner::Local(_))
    }

    /// The absolute URI of `key`.
    pub fn uri(&self, key: &str) -> String {
        format!("{}/{}", self.base, key)
    }

    /// The key of an absolute URI under this location (`None` when it is elsewhere).
    pub fn key_of<'a>(&self, uri: &'a str) -> Option<&'a str> {
        uri.strip_prefix(self.base.as_str())?.strip_prefix('/')
    }

    /// The local path of `key` (local stores only).
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        match &*self.inner {
            Inner::Local(dir) => Some(dir.join(key)),
            #[cfg(feature = "s3")]
            Inner::Remote(_) => None,
        }
    }

    fn io(&self, op: &'static str, key: &str) -> impl FnOnce(io::Error) -> StoreError {
        let uri = self.uri(key);
        move |source| StoreError::Io { op, uri, source }
    }

    /// The bytes of `key`, or `None` if there is no such object.
    pub fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        match &*self.inner {
            Inner::Local(dir) => match fs::read(dir.join(key)) {
                Ok(b) => Ok(Some(Bytes::from(b))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(self.io("read", key)(e)),
            },
            #[cfg(feature = "s3")]
            Inner::Remote(r) => r.get(key).map_err(|m| self.remote("GET", key, m)),
        }
    }

    /// Writes `bytes` as `key`, atomically (readers see the old object or the whole new one) and
    /// durably.
    pub fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        match &*self.inner {
            Inner::Local(dir) => {
                let path = dir.join(key);
                write_atomic(&path, bytes).map_err(self.io("write", key))
            }
            #[cfg(feature = "s3")]
            Inner::Remote(r) => r
                .put(key, Bytes::copy_from_slice(bytes))
                .map_err(|m| self.remote("PUT", key, m)),
        }
    }

    /// Publishes the local file `from` as `key` (a hard link on a local store, where it can;
    /// an upload on S3).
    pub fn put_file(&self, key: &str, from: &Path) -> Result<(), StoreError> {
        match &*self.inner {
            Inner::Local(dir) => {
                let path = dir.join(key);
                link_or_copy(from, &path).map_err(self.io("link", key))
            }
            #[cfg(feature = "s3")]
            Inner::Remote(r) => r
                .put_file(key, from)
                .map_err(|m| self.remote("PUT", key, m)),
        }
    }

    /// Deletes `key`; a missing object is not an error.
    pub fn delete(&self, key: &str) -> Result<(), StoreError> {
        match &*self.inner {
            Inner::Local(dir) => match fs::remove_file(dir.join(key)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.io("delete", key)(e)),
            },
            #[cfg(feature = "s3")]
            Inner::Remote(r) => r.delete(key).map_err(|m| self.remote("DELETE", key, m)),
        }
    }

    /// The keys under `prefix` (a directory-like key ending without `/`), recursively.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        match &*self.inner {
            Inner::Local(dir) => {
                let mut out = Vec::new();
                let root = dir.join(prefix);
                list_local(&root, prefix, &mut out).map_err(self.io("list", prefix))?;
                out.sort();
                Ok(out)
            }
            #[cfg(feature = "s3")]
            Inner::Remote(r) => r.list(prefix).map_err(|m| self.remote("LIST", prefix, m)),
        }
    }

    #[cfg(feature = "s3")]
    fn remote(&self, op: &'static str, key: &str, message: String) -> StoreError {
        StoreError::Remote {
            op,
            uri: self.uri(key),
            message,
        }
    }
}

fn list_local(dir: &Path, prefix: &str, out: &mut Vec<String>) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            list_local(&entry.path(), &key, out)?;
        } else {
            out.push(key);
        }
    }
    Ok(())
}

/// `path`'s content becomes `bytes`: a temporary file beside it, fsync, rename, fsync of the
/// directory (directories made as needed).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Hard-links `from` as `to` (replacing nothing: an existing `to` with the same size is taken
/// as done); across file systems, copies to a temporary, fsyncs and renames. The directory is
/// synced either way.
fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    let dir = to.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    match fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let (a, b) = (fs::metadata(from)?.len(), fs::metadata(to)?.len());
            if a != b {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists with another size ({b} bytes, not {a})",
                        to.display()
                    ),
                ));
            }
        }
        Err(_) => {
            let tmp = dir.join(format!(".link.{}.tmp", uuid::Uuid::new_v4().simple()));
            let result = (|| {
                fs::copy(from, &tmp)?;
                File::open(&tmp)?.sync_all()?;
                fs::rename(&tmp, to)
            })();
            if result.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            result?;
        }
    }
    File::open(dir)?.sync_all()
}

#[cfg(feature = "s3")]
mod remote {
    //! S3 through `object_store`, driven by a private current-thread tokio runtime (the
    //! maintenance threads and the client's catch-up are blocking code).
    use super::*;
    use futures_util::StreamExt;
    use object_store::aws::AmazonS3Builder;
    use object_store::path::Path as ObjPath;
    use object_store::{BackoffConfig, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

    /// Files at least this large go up in parts of this size.
    const PART: usize = 16 << 20;

    /// How long one request is retried inside the client before its error surfaces. Short: the
    /// publisher retries a failed publish itself (1 s doubling to 60 s), and a request stuck in
    /// object_store's default retry loop (10 retries over up to 3 minutes) holds the
    /// maintenance thread, and so the stream's seals, for that long when the store is down.
    fn retry() -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: std::time::Duration::from_millis(100),
                max_backoff: std::time::Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: std::time::Duration::from_secs(15),
        }
    }

    pub struct Remote {
        store: Box<dyn ObjectStore>,
        prefix: String,
        rt: tokio::runtime::Runtime,
    }

    /// Whether `e` says the object does not exist. object_store maps every 404 to `NotFound`,
    /// a missing bucket's too (S3 answers `NoSuchBucket` with 404): that one is an error (a
    /// wrong bucket name, or a bucket deleted under the table), never "no such object", which
    /// would make a table that is there look empty.
    fn absent(e: &object_store::Error) -> bool {
        matches!(e, object_store::Error::NotFound { .. }) && !e.to_string().contains("NoSuchBucket")
    }

    impl Remote {
        pub fn open(base: &str, o: &S3Options) -> Result<Remote, StoreError> {
            let rest = base.strip_prefix("s3://").unwrap_or(base);
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Config(format!("{base}: no bucket named")));
            }
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry());
            let endpoint = o
                .endpoint
                .clone()
                .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
            if let Some(e) = &endpoint {
                b = b
                    .with_endpoint(e.clone())
                    .with_allow_http(e.starts_with("http://"));
            }
            if let Some(r) = o
                .region
                .clone()
                .or_else(|| std::env::var("AWS_REGION").ok())
            {
                b = b.with_region(r);
            }
            if let Some(k) = &o.access_key {
                b = b.with_access_key_id(k.clone());
            }
            if let Some(k) = &o.secret_key {
                b = b.with_secret_access_key(k.clone());
            }
            let store = b.build().map_err(|e| {
                StoreError::Config(format!("{base}: cannot configure the S3 client: {e}"))
            })?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StoreError::Config(format!("{base}: tokio runtime: {e}")))?;
            Ok(Remote {
                store: Box::new(store),
                prefix: prefix.trim_matches('/').to_string(),
                rt,
            })
        }

        fn path(&self, key: &str) -> ObjPath {
            if key.is_empty() {
                // the location itself: `list("")` lists everything under it
                ObjPath::from(self.prefix.as_str())
            } else if self.prefix.is_empty() {
                ObjPath::from(key)
            } else {
                ObjPath::from(format!("{}/{key}", self.prefix))
            }
        }

        pub fn get(&self, key: &str) -> Result<Option<Bytes>, String> {
            let path = self.path(key);
            self.rt.block_on(async {
                match self.store.get(&path).await {
                    Ok(r) => r.bytes().await.map(Some).map_err(|e| e.to_string()),
                    Err(e) if absent(&e) => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            })
        }

        pub fn put(&self, key: &str, bytes: Bytes) -> Result<(), String> {
            let path = self.path(key);
            self.rt.block_on(async {
                self.store
                    .put(&path, PutPayload::from_bytes(bytes))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        }

        pub fn put_file(&self, key: &str, from: &Path) -> Result<(), String> {
            let len = fs::metadata(from)
                .map_err(|e| format!("{}: {e}", from.display()))?
                .len() as usize;
            if len < PART {
                let bytes = fs::read(from).map_err(|e| format!("{}: {e}", from.display()))?;
                return self.put(key, Bytes::from(bytes));
            }
            let path = self.path(key);
            self.rt.block_on(async {
                let mut upload = self
                    .store
                    .put_multipart(&path)
                    .await
                    .map_err(|e| e.to_string())?;
                let result: Result<(), String> = async {
                    use std::io::Read;
                    let mut f = File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
                    loop {
                        let mut buf = vec![0u8; PART];
                        let mut n = 0;
                        while n < PART {
                            let k = f
                                .read(&mut buf[n..])
                                .map_err(|e| format!("{}: {e}", from.display()))?;
                            if k == 0 {
                                break;
                            }
                            n += k;
                        }
                        if n == 0 {
                            break;
                        }
                        buf.truncate(n);
                        upload
                            .put_part(PutPayload::from(buf))
                            .await
                            .map_err(|e| e.to_string())?;
                        if n < PART {
                            break;
                        }
                    }
                    upload
                        .complete()
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                .await;
                if result.is_err() {
                    let _ = upload.abort().await;
                }
                result
            })
        }

        pub fn delete(&self, key: &str) -> Result<(), String> {
            let path = self.path(key);
            self.rt.block_on(async {
                match self.store.delete(&path).await {
                    Ok(()) => Ok(()),
                    Err(e) if absent(&e) => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            })
        }

        pub fn list(&self, prefix: &str) -> Result<Vec<String>, String> {
            let path = self.path(prefix);
            let strip = if self.prefix.is_empty() {
                String::new()
            } else {
                format!("{}/", self.prefix)
            };
            self.rt.block_on(async {
                let mut out = Vec::new();
                let mut s = self.store.list(Some(&path));
                while let Some(meta) = s.next().await {
                    let meta = meta.map_err(|e| e.to_string())?;
                    let full = meta.location.to_string();
                    out.push(full.strip_prefix(&strip).unwrap_or(&full).to_string());
                }
                out.sort();
                Ok(out)
            })
        }
    }
}
