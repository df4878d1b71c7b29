//! Dialing a server: plaintext or TLS (a CA to verify the server, and
//! optionally a client certificate), with the bearer credential attached
//! to every call.

use std::sync::OnceLock;
use std::time::Duration;

use agentsessions_shells::causes;
use agentsessions_shells::daemon::security::ClientTlsFiles;
use agentsessions_shells::daemon::security::peer_protocol::{self, Mismatch};
use tonic::transport::{Channel, ClientTlsConfig};

use super::args::Common;
use super::exit::{RpcError, UsageError};

/// The client crate's bearer channel (one definition for every client).
pub use agentsessions_client::{Bearer, Conn};

/// The credential of `--token` / `AGENTSESSIONS_TOKEN`.
pub fn bearer(common: &Common) -> anyhow::Result<Bearer> {
    Bearer::new(common.token.as_deref())
        .map_err(|_| UsageError("--token: not a printable ASCII credential".to_owned()).into())
}

/// The TLS settings the flags ask for, if any: `--tls-ca` or an https://
/// address turns TLS on (an https:// address without a CA verifies the
/// server against the bundled web roots).
pub fn tls(common: &Common, addr: &str) -> anyhow::Result<Option<ClientTlsConfig>> {
    let files = ClientTlsFiles {
        ca: common.tls_ca.clone(),
        identity: common.tls_cert.clone().zip(common.tls_key.clone()),
    };
    if !addr.starts_with("https://") && files.is_empty() {
        return Ok(None);
    }
    let config = files
        .client_config("tls")
        .map_err(|e| UsageError(e.to_string()))?;
    Ok(Some(config))
}

/// Dials `addr` (host:port, http:// or https://) within `timeout`, over
/// TLS when `tls` is set.
pub async fn connect(
    addr: &str,
    tls: Option<ClientTlsConfig>,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let mut endpoint = Channel::from_shared(uri)
        .map_err(|e| UsageError(format!("bad address {addr:?}: {e}")))?
        .connect_timeout(timeout);
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| UsageError(format!("TLS settings for {addr}: {e}")))?;
    }
    // The causes are kept: a TLS failure hides in a source. Each
    // connection is sniffed so that a TLS/plaintext mismatch is named (see
    // `mismatch_hint`).
    endpoint
        .connect_with_connector(peer_protocol::connector(|m| {
            let _ = MISMATCH.set(m);
        }))
        .await
        .map_err(|e| {
            let hint = mismatch_hint(Some(&e))
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            RpcError::new(
                "connect",
                tonic::Status::unavailable(format!("{addr}: {}{hint}", causes::chain(&e))),
            )
            .into()
        })
}

/// The first TLS/plaintext mismatch a connection of this process met. A
/// call waiting on that connection may fail with only "connection closed"
/// (the mismatch went to the connection, not the call); agentctl makes one
/// connection per run, so the process is the right scope.
static MISMATCH: OnceLock<Mismatch> = OnceLock::new();

/// What to do about a TLS/plaintext mismatch behind `err` or met by this
/// process's connection: a plaintext client at a TLS port fails its first
/// call (an h2 protocol error, a reset or a closed connection), a TLS
/// client at a plaintext port fails its handshake.
pub fn mismatch_hint(err: Option<&(dyn std::error::Error + 'static)>) -> Option<&'static str> {
    let mismatch = err
        .and_then(Mismatch::find)
        .or_else(|| MISMATCH.get().copied())?;
    Some(if mismatch.server_may_want_tls() {
        "the server may be serving TLS: pass --tls-ca FILE or use an https:// server address"
    } else {
        "the server may be serving plaintext: drop --tls-ca/--tls-cert and use a host:port \
         or http:// server address"
    })
}
