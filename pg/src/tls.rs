//! TLS to the database.
//!
//! Invariant: when TLS is asked for (`sslmode=require` in the journal URL,
//! or a CA file given) every connection is encrypted and the server's
//! certificate is verified against that CA (chain and host name), or the
//! connection is not made. There is no "encrypt but trust anyone" mode, and
//! a CA file turns `sslmode=prefer` (the URL default) into `require`, so a
//! server that offers no TLS is refused rather than used in the clear.

use std::path::Path;
use std::sync::Arc;

use agentsessions_journal::StoreError;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How connections to one database are made.
#[derive(Clone)]
pub(crate) enum Connector {
    Plain,
    Tls(MakeRustlsConnect),
}

/// The connector for `config` (whose SSL mode it may raise to `require`),
/// with the server verified against the PEM certificates in `ca`.
pub(crate) fn connector(
    config: &mut tokio_postgres::Config,
    ca: Option<&Path>,
) -> Result<Connector, StoreError> {
    let mode = config.get_ssl_mode();
    if mode == SslMode::Disable && ca.is_some() {
        return Err(StoreError::InvalidArgument(
            "journal CA given but the URL says sslmode=disable".into(),
        ));
    }
    if mode != SslMode::Require && ca.is_none() {
        return Ok(Connector::Plain);
    }
    let Some(ca) = ca else {
        return Err(StoreError::InvalidArgument(
            "sslmode=require needs the journal CA file (--journal-ca): \
             the certificate that signed the database server's"
                .into(),
        ));
    };
    config.ssl_mode(SslMode::Require);
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .map_err(|e| StoreError::InvalidArgument(format!("journal CA {}: {e}", ca.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| {
            StoreError::InvalidArgument(format!("journal CA {}: {e}", ca.display()))
        })?;
        roots.add(cert).map_err(|e| {
            StoreError::InvalidArgument(format!("journal CA {}: {e}", ca.display()))
        })?;
    }
    if roots.is_empty() {
        return Err(StoreError::InvalidArgument(format!(
            "journal CA {}: no certificate in it",
            ca.display()
        )));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::InvalidArgument(format!("tls: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Connector::Tls(MakeRustlsConnect::new(tls)))
}

/// One plain client (not pooled), its connection driven by a task.
pub(crate) async fn connect(
    config: &tokio_postgres::Config,
    connector: &Connector,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    match connector {
        Connector::Plain => {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            Ok(client)
        }
        Connector::Tls(tls) => {
            let (client, connection) = config.connect(tls.clone()).await?;
            tokio::spawn(connection);
            Ok(client)
        }
    }
}
