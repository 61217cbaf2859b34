//! TLS to the management server: [`XdsTls`].

use std::path::PathBuf;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// TLS to the management server: its CA (else the system's roots), a
/// client certificate, the name to verify.
#[derive(Debug, Clone, Default)]
pub struct XdsTls {
    ca: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl XdsTls {
    /// TLS verified against the system's roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies the server against the CA certificates (PEM) of the file
    /// `path` instead of the system's roots.
    #[must_use]
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// Presents the client certificate `cert` with its key `key` (PEM
    /// files).
    #[must_use]
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// Verifies the server's certificate for `name` instead of the URL's
    /// host (envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_TLS_SAN`).
    #[must_use]
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The tonic configuration, its files read (they are read again at
    /// each connection: a renewed certificate is taken).
    pub(super) fn config(&self) -> Result<ClientTlsConfig, String> {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let mut c = ClientTlsConfig::new();
        c = match &self.ca {
            Some(p) => c.ca_certificate(Certificate::from_pem(read(p)?)),
            None => c.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            c = c.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(n) = &self.server_name {
            c = c.domain_name(n.clone());
        }
        Ok(c)
    }
}
