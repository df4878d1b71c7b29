//! What guards the listeners: TLS (rustls) and the credential check.
//!
//! Invariant: a listener on a non-loopback address serves TLS, unless the
//! operator said `--insecure-listen`; the registry listener is loopback
//! only, with or without TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::start_error::StartError;
use crate::auth::Authenticator;

pub mod cert_check;
pub mod peer_protocol;

/// TLS and authentication settings of a daemon.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Verifies each call's credential (`Off` without `--auth`).
    pub auth: Arc<Authenticator>,
    /// TLS on the Sessions listener.
    pub tls: Option<TlsFiles>,
    /// TLS on the registry listener.
    pub registry_tls: Option<TlsFiles>,
    /// Allow a plaintext listener on a non-loopback address.
    pub insecure_listen: bool,
    /// How `https://` harness links verify the harness and identify the
    /// host (flags `--harness-ca/-cert/-key`).
    pub harness_tls: ClientTlsFiles,
}

/// A server's PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
    /// When set, clients must present a certificate this CA signed.
    pub client_ca: Option<PathBuf>,
}

/// A TLS client's PEM files: the CA to verify the server and, for mTLS,
/// a certificate and key to present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// CA the server's certificate chains to (default: the bundled web
    /// roots).
    pub ca: Option<PathBuf>,
    /// Client certificate and key to present (mTLS).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTlsFiles {
    /// True when no file is named.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.identity.is_none()
    }

    /// The client TLS settings; `prefix` names the flags in errors
    /// (`--{prefix}-ca`, `--{prefix}-cert`, `--{prefix}-key`).
    pub fn client_config(
        &self,
        prefix: &str,
    ) -> Result<tonic::transport::ClientTlsConfig, StartError> {
        let mut config = tonic::transport::ClientTlsConfig::new();
        match &self.ca {
            Some(ca) => {
                let flag = format!("--{prefix}-ca");
                let pem = read(&flag, ca)?;
                check_pem(&flag, ca, &pem, "CERTIFICATE")?;
                config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            None => config = config.with_webpki_roots(),
        }
        if let Some((cert, key)) = &self.identity {
            let (cert_flag, key_flag) = (format!("--{prefix}-cert"), format!("--{prefix}-key"));
            let cert_pem = read(&cert_flag, cert)?;
            let key_pem = read(&key_flag, key)?;
            check_pem(&cert_flag, cert, &cert_pem, "CERTIFICATE")?;
            check_pem(&key_flag, key, &key_pem, "PRIVATE KEY")?;
            config = config.identity(tonic::transport::Identity::from_pem(cert_pem, key_pem));
        }
        Ok(config)
    }
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, StartError> {
    std::fs::read(path).map_err(|e| StartError::Config(format!("{flag} {}: {e}", path.display())))
}

impl TlsFiles {
    /// The tonic server TLS settings; `prefix` names the flags in errors
    /// ("tls" or "registry-tls").
    pub fn server_config(
        &self,
        prefix: &str,
    ) -> Result<tonic::transport::ServerTlsConfig, StartError> {
        let cert = read(&format!("--{prefix}-cert"), &self.cert)?;
        let key = read(&format!("--{prefix}-key"), &self.key)?;
        check_pem(
            &format!("--{prefix}-cert"),
            &self.cert,
            &cert,
            "CERTIFICATE",
        )?;
        check_pem(&format!("--{prefix}-key"), &self.key, &key, "PRIVATE KEY")?;
        cert_check::check_serving_pem(prefix, (&self.cert, &cert), (&self.key, &key))
            .map_err(|e| StartError::Config(e.to_string()))?;
        let mut config = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(cert, key));
        if let Some(ca) = &self.client_ca {
            let flag = format!("--{prefix}-client-ca");
            let pem = read(&flag, ca)?;
            check_pem(&flag, ca, &pem, "CERTIFICATE")?;
            config = config.client_ca_root(tonic::transport::Certificate::from_pem(pem));
        }
        Ok(config)
    }
}

/// A readable error now for a file that is not PEM of the wanted kind,
/// instead of a failed handshake on the first connection.
fn check_pem(flag: &str, path: &Path, bytes: &[u8], kind: &str) -> Result<(), StartError> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains("-----BEGIN ") && text.contains(kind) {
        return Ok(());
    }
    Err(StartError::Config(format!(
        "{flag} {}: no PEM {kind} in the file",
        path.display()
    )))
}

/// Refuses a plaintext listener off loopback unless allowed.
pub fn check_listen(
    flag: &str,
    addr: SocketAddr,
    tls: bool,
    insecure: bool,
) -> Result<(), StartError> {
    if tls || insecure || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(StartError::Config(format!(
        "{flag} {addr}: a non-loopback address needs TLS (--tls-cert and --tls-key) \
         or --insecure-listen"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_off_loopback_needs_the_insecure_flag() {
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let lo6: SocketAddr = "[::1]:1".parse().unwrap();
        assert!(check_listen("--addr", any, false, false).is_err());
        assert!(check_listen("--addr", any, true, false).is_ok());
        assert!(check_listen("--addr", any, false, true).is_ok());
        assert!(check_listen("--addr", lo, false, false).is_ok());
        assert!(check_listen("--addr", lo6, false, false).is_ok());
    }
}
