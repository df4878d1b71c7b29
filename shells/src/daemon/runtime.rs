//! Runtime backends (the Runtime SPI).
//!
//! * **local** runs each built-in harness in process and publishes it under
//!   an `inproc://` address ([`super::inproc`]): the host exchanges the same
//!   frames and events with it as with a remote harness, through the same
//!   harness adapter, without the HTTP/2 transport. Filesystem-only: a
//!   snapshot is the session's journal handle; restore and fork start a
//!   fresh incarnation that the host replays into.
//! * **remote** attaches to a harness already running at an address. It
//!   owns no compute: create, restore and fork just hand out the address.
//!
//! * **memory** ([`super::memory`]) keeps one instance per session and
//!   captures its memory on Snapshot, so REQUIRES_MEMORY_SNAPSHOT harnesses
//!   (the built-in `counter`) can be placed, suspended and forked.
//!
//! Local and remote cannot capture memory, so a REQUIRES_MEMORY_SNAPSHOT
//! harness routed to them is refused at admission (the CanPlace rule lives
//! in the machine).
//!
//! The built-in `agent` offers the MCP tools of [`mcp_tools`]: never one
//! the operator's policy denies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentsessions_machine::vocab::{
    Backend, Policy, RuntimeOp, RuntimeReply, ToolGate, ToolRule, Verdict,
};
use agentsessions_proto::v1::{HarnessDescriptor, ToolDefinition};

use super::driver::{PortFuture, RuntimePort};
use super::inproc::InProcess;
use super::memory::MemoryRuntime;
use crate::harness::builtin::{self, ToolSource};
use crate::mcp::{McpHub, McpTool};

/// A built-in harness being served in process.
struct Served {
    address: String,
    /// Built-ins have a static descriptor, so it is taken once at start.
    descriptor: HarnessDescriptor,
}

/// The local and remote backends.
pub struct Runtimes {
    local: Arc<InProcess>,
    model: String,
    agent_tools: ToolSource,
    served: Mutex<BTreeMap<String, Arc<Served>>>,
    memory: MemoryRuntime,
}

impl Runtimes {
    /// Backends whose built-in harnesses are published on `local`; `model`
    /// is the default model for harnesses that need one (`chat`).
    pub fn new(local: Arc<InProcess>, model: String) -> Self {
        Self {
            memory: MemoryRuntime::new(local.clone()),
            local,
            model,
            agent_tools: builtin::no_tools(),
            served: Mutex::new(BTreeMap::new()),
        }
    }

    /// The tools the built-in `agent` offers (none by default).
    pub fn with_agent_tools(mut self, tools: ToolSource) -> Self {
        self.agent_tools = tools;
        self
    }

    /// The address of the built-in `kind`, starting it on first use.
    /// `prefix` keeps the describe-only instances of memory kinds apart
    /// from instances that run turns.
    fn local_address(&self, prefix: &str, kind: &str) -> Result<String, String> {
        self.local(prefix, kind).map(|s| s.address.clone())
    }

    fn local(&self, prefix: &str, kind: &str) -> Result<Arc<Served>, String> {
        let key = format!("{prefix}{kind}");
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = served.get(&key) {
            return Ok(s.clone());
        }
        let harness =
            builtin::build_with(kind, &self.model, &self.agent_tools).map_err(|e| e.to_string())?;
        let descriptor = harness.describe();
        let s = Arc::new(Served {
            address: self.local.publish(&key, harness),
            descriptor,
        });
        served.insert(key, s.clone());
        Ok(s)
    }

    fn address(&self, backend: &Backend) -> Result<String, String> {
        match backend {
            Backend::Local { kind } => self.local_address("", kind),
            Backend::Remote { address } => Ok(address.clone()),
            // Describe needs no session: a fresh instance answers it.
            Backend::Memory { kind } => self.local_address("describe-", kind),
        }
    }
}

impl RuntimePort for Runtimes {
    fn describe_address(&self, backend: &Backend) -> Result<String, String> {
        self.address(backend)
    }

    fn describe_in_process(&self, backend: &Backend) -> Option<Result<HarnessDescriptor, String>> {
        let served = match backend {
            Backend::Local { kind } => self.local("", kind),
            Backend::Memory { kind } => self.local("describe-", kind),
            Backend::Remote { .. } => return None,
        };
        Some(served.map(|s| s.descriptor.clone()))
    }

    fn call(
        &self,
        backend: Backend,
        op: RuntimeOp,
    ) -> PortFuture<'_, Result<RuntimeReply, String>> {
        Box::pin(async move {
            if let Backend::Memory { kind } = &backend {
                let m = &self.memory;
                return match op {
                    RuntimeOp::Create { session } => m
                        .create(kind, &session)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Restore { snapshot } => m
                        .restore(kind, &snapshot)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Fork { snapshot, child } => m
                        .fork(kind, &snapshot, &child)
                        .map(|address| RuntimeReply::Incarnation { address }),
                    RuntimeOp::Snapshot { session } => {
                        m.snapshot(kind, &session).map(RuntimeReply::Snapshot)
                    }
                    RuntimeOp::Stop { session } => {
                        m.stop(&session);
                        Ok(RuntimeReply::Done)
                    }
                };
            }
            super::remote::journal_only_reply(op, || self.address(&backend))
        })
    }
}

/// The agent's tools: every tool `hub` lists (None: no tools) that `rules`
/// do not deny, as the model is offered it, sorted by name. A tool of a
/// server that is down stays offered (a call gets an error receipt), so a
/// server going up and down does not change the requests the agent makes;
/// a replay still rebuilds the same model call only while the catalog is
/// unchanged.
pub fn mcp_tools(hub: Option<McpHub>, rules: Vec<ToolRule>) -> ToolSource {
    let Some(hub) = hub else {
        return builtin::no_tools();
    };
    // Deny is decided by the rules alone, so no catalog is needed here.
    let gate = ToolGate {
        rules,
        catalog: None,
        approval_expiry_ms: None,
    };
    Arc::new(move || {
        let mut tools: Vec<ToolDefinition> = hub
            .tools()
            .iter()
            .filter(|t| gate.verdict(&t.name) != Verdict::Policy(Policy::Deny))
            .map(definition)
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    })
}

/// `t` as a model sees it. A schema that cannot be carried as a Struct (a
/// number past ±2^53, nesting too deep) is left out rather than changed.
fn definition(t: &McpTool) -> ToolDefinition {
    ToolDefinition {
        name: t.name.clone(),
        description: t.description.clone(),
        input_schema: t
            .input_schema
            .as_object()
            .and_then(|o| crate::mcp::json_to_struct(o).ok()),
    }
}
