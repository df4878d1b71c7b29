//! The tools this daemon can run, told to the machine: the built-ins and
//! every tool its MCP servers list, kept current as servers change theirs
//! or go up and down. The machine decides policy from it (see the
//! machine's `ToolGate`); the executor runs what it allows.
//!
//! Invariant: with no `--mcp` the machine keeps no catalog, and tools are
//! gated by the harness's mediation and the operator's rules alone, as
//! before MCP.

use std::sync::Arc;

use agentsessions_machine::vocab::{Catalog, CatalogTool};

use super::handle::DriverHandle;
use super::start_error::StartError;
use crate::mcp::{McpConfig, McpHub, ServerSpec};
use crate::metrics::Metrics;

/// Starts the `--mcp` servers, if any. A server that cannot start does
/// not stop the daemon (its tools are down and calls to them get error
/// receipts); a malformed or repeated spec does.
pub async fn start(specs: &[String], config: McpConfig) -> Result<Option<McpHub>, StartError> {
    if specs.is_empty() {
        return Ok(None);
    }
    let parsed = specs
        .iter()
        .map(|s| s.parse::<ServerSpec>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Config(format!("--mcp: {e}")))?;
    ServerSpec::check_unique(&parsed).map_err(|e| StartError::Config(format!("--mcp: {e}")))?;
    if config.call_timeout.is_zero() || config.max_concurrent_calls == 0 {
        return Err(StartError::Config(
            "--mcp-call-timeout and --mcp-max-calls: want more than zero".into(),
        ));
    }
    let hub = McpHub::start(parsed, config).await;
    for (server, up, error) in hub.servers() {
        if !up {
            tracing::warn!(%server, %error, "mcp server is down; its tools get error receipts");
        }
    }
    Ok(Some(hub))
}

/// The catalog of `builtins` and `hub`'s tools.
pub fn catalog<'a>(hub: &McpHub, builtins: impl IntoIterator<Item = &'a str>) -> Catalog {
    let builtins = builtins.into_iter().map(|name| CatalogTool {
        name: name.to_owned(),
        server: String::new(),
        read_only: false,
        idempotent: false,
        destructive: true,
        open_world: false,
        description: "built into the host".to_owned(),
        up: true,
    });
    let mcp = hub.tools().into_iter().map(|t| CatalogTool {
        name: t.name,
        server: t.server,
        read_only: t.read_only,
        idempotent: t.idempotent,
        destructive: t.destructive,
        open_world: t.open_world,
        description: t.description,
        up: t.up,
    });
    Catalog::new(builtins.chain(mcp))
}

/// Tells the drive loops the catalog now and after every change of
/// `hub`'s, until `stop`.
pub fn follow(
    hub: McpHub,
    builtins: Vec<String>,
    driver: DriverHandle,
    metrics: Option<Arc<Metrics>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let mut changes = hub.changes();
    let tell = move |hub: &McpHub| {
        driver.set_catalog(&catalog(hub, builtins.iter().map(String::as_str)));
        if let Some(m) = &metrics {
            for (server, up, _) in hub.servers() {
                m.mcp_server(&server, up);
            }
        }
    };
    tell(&hub);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    tell(&hub);
                }
                _ = stop.changed() => return,
            }
        }
    })
}
