//! The console's TLS configuration: the Sessions listener's certificate and
//! key, checked and loaded for rustls (on ring, as tonic's TLS is). The
//! console gets the finished configuration and knows nothing of the files.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

use super::security::{TlsFiles, cert_check};
use super::start_error::StartError;

fn config_error(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> StartError {
    StartError::Config(format!("console TLS: {what} {}: {e}", path.display()))
}

/// The rustls server settings from the PEM files.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, StartError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| config_error("--tls-cert", &files.cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| config_error("--tls-cert", &files.cert, e))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| config_error("--tls-key", &files.key, e))?;
    // The Sessions listener checked these files already; a caller serving
    // only the console gets the same named refusal.
    cert_check::check_serving(&certs, &key, cert_check::now_unix()).map_err(|problem| {
        StartError::Config(
            cert_check::ServingCertError::new("tls", &files.cert, &files.key, problem).to_string(),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error("--tls-cert", &files.cert, e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| config_error("--tls-cert", &files.cert, e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
