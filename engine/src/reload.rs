//! What SIGHUP reloads from files named at start: the main thread calls [`Reload::run`] on each
//! SIGHUP, then re-reads the config file for `[auth]` and `allowed_origins`
//! ([`crate::server::Running::reload_auth`]).
//!
//! Today that is the TLS certificate ([`crate::tls::CertStore`]). Each part reloads on its own
//! and logs its outcome; a part that fails keeps what it had, so one bad file never takes the
//! others down. A new part adds a field here and one step to [`Reload::run`].

use std::sync::Arc;

use crate::tls::CertStore;

/// Everything SIGHUP reloads.
#[derive(Default, Clone)]
pub struct Reload {
    /// The TLS certificate and key, when `[tls]` is configured.
    pub tls: Option<Arc<CertStore>>,
}

impl Reload {
    /// Reloads every part, logging each outcome.
    pub fn run(&self) {
        if let Some(store) = &self.tls {
            match store.reload() {
                Ok(()) => tracing::info!(
                    "reload: tls certificate {} loaded; new connections use it",
                    store.cert_path().display()
                ),
                Err(e) => tracing::error!("reload: {e}; keeping the previous certificate"),
            }
        }
    }
}
