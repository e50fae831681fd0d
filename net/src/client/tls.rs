//! The roots a `wss://` connection checks the server's certificate against.
//!
//! By default the system's (`rustls-native-certs`: the OpenSSL store, `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` honoured); [`use_ca_file`] replaces them with the certificates of one PEM file
//! (a private CA: the CLI's `--ca FILE`). The choice is per process and made before connecting.
//! The server name checked is the URL's host (SNI too); ALPN offers `http/1.1`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::ClientError;

/// The configuration built so far (roots chosen, then cached).
static CONFIG: Mutex<Option<Arc<rustls::ClientConfig>>> = Mutex::new(None);

fn build(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Trusts the certificates in the PEM file at `path` (and no others) for every later `wss://`
/// connection of this process.
pub fn use_ca_file(path: &Path) -> Result<(), String> {
    let pem = std::fs::read(path).map_err(|e| format!("--ca {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("--ca {}: bad PEM: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("--ca {}: not a usable CA certificate: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "--ca {}: no certificate in the file (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = Some(build(roots));
    Ok(())
}

/// The configuration `wss://` connections use: the CA file's, or the system roots'.
pub(crate) fn config() -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut slot = CONFIG.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = &*slot {
        return Ok(c.clone());
    }
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or("none found".to_string(), |e| e.to_string());
        return Err(ClientError::Connect {
            addr: "wss".into(),
            msg: format!("no system root certificates ({why}); pass --ca FILE"),
        });
    }
    let cfg = build(roots);
    *slot = Some(cfg.clone());
    Ok(cfg)
}

/// What dials a `wss://` server: the client configuration and the name its certificate must
/// carry (sent as SNI).
#[derive(Clone)]
pub struct TlsDial {
    config: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
}

impl TlsDial {
    /// For `host` (a DNS name or an IP address, without brackets), with the roots chosen so
    /// far ([`use_ca_file`], else the system's).
    pub fn new(host: &str) -> Result<TlsDial, ClientError> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| ClientError::BadUrl(format!("{host}: {e}")))?;
        Ok(TlsDial {
            config: config()?,
            name,
        })
    }

    /// Dials `addr` and completes the handshake.
    pub async fn connect(&self, addr: std::net::SocketAddr) -> std::io::Result<crate::rt::Conn> {
        crate::rt::Conn::connect_tls(addr, self.config.clone(), self.name.clone()).await
    }
}
