//! The server's TLS certificate: loaded from `[tls] cert` and `key` (PEM), checked, and swapped
//! on SIGHUP ([`crate::reload`]).
//!
//! Every listener's [`rustls::ServerConfig`] asks [`CertStore`] for the certificate at each
//! handshake, so a reload changes what new handshakes present while open connections keep the
//! session they have. A new pair that does not load (a missing file, no certificate, a key that
//! does not match) is logged and the old one kept. TLS 1.2 and 1.3 with rustls's ring provider;
//! ALPN `http/1.1` (every endpoint — WebSocket, SSE, pull, `/stats`, `/metrics`, ingest — is
//! HTTP/1.1).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The provider every TLS config here uses (ring: no cmake, unlike aws-lc-rs).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the certificate chain at `cert` and the private key at `key` (PEM) and checks that
/// the key belongs to the chain's first certificate. The error names the file and the fault.
pub fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let certs_pem =
        std::fs::read(cert).map_err(|e| format!("cert {}: cannot read: {e}", cert.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&certs_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cert {}: bad PEM: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "cert {}: no certificate in the file (expected -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    let key_pem =
        std::fs::read(key).map_err(|e| format!("key {}: cannot read: {e}", key.display()))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "key {}: no private key in the file (expected -----BEGIN PRIVATE KEY----- or an RSA/EC key): {e}",
            key.display()
        )
    })?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| format!("key {}: unusable private key: {e}", key.display()))?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(pair)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(format!(
                "key {}: does not match the certificate in {}",
                key.display(),
                cert.display()
            ))
        }
        Err(e) => Err(format!("cert {}: {e}", cert.display())),
    }
}

/// The certificate new handshakes get, and the files it reloads from.
#[derive(Debug)]
pub struct CertStore {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    /// Loads the pair (see [`load_pair`]).
    pub fn load(cert: &Path, key: &Path) -> Result<CertStore, String> {
        let pair = load_pair(cert, key)?;
        Ok(CertStore {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(Arc::new(pair)),
        })
    }

    /// Reads the files again; on success new handshakes present the new certificate, on
    /// failure the old one stays and the reason is returned.
    pub fn reload(&self) -> Result<(), String> {
        let pair = load_pair(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// The certificate file (for logs).
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    /// The configuration every TLS listener shares: TLS 1.2 and 1.3, no client certificates,
    /// ALPN `http/1.1`, the certificate from `self` at each handshake.
    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}
