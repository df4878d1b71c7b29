//! MCP tools as host tools: a call named `SERVER__TOOL` that the ledger
//! executor found no built-in for goes to the [`McpHub`].
//!
//! At most once is kept above this file: the ledger commits "started"
//! before the call, and a key found started and not done reaches a tool
//! again only when the machine says so (`ToolGate::may_rerun`: the tool
//! says it is idempotent). Otherwise the machine journals an EXECUTOR_ERROR
//! receipt saying the outcome is unknown. A call whose turn is canceled is
//! dropped ([`Tool::interruptible`]), which sends the server
//! `notifications/cancelled` for it.

use agentsessions_proto::v1::{ToolCall, ToolResult};

use super::{Tool, ToolContext, ToolError};
use crate::mcp::{McpError, McpHub, json, receipt};
use crate::model::BoxFuture;

/// One MCP tool, bound to the hub that serves it.
pub struct McpCall {
    hub: McpHub,
}

impl McpCall {
    /// The tool called `name`, when a server of `hub` lists it.
    pub fn find(hub: &McpHub, name: &str) -> Option<Self> {
        hub.tools()
            .iter()
            .any(|t| t.name == name)
            .then(|| Self { hub: hub.clone() })
    }
}

impl Tool for McpCall {
    fn interruptible(&self) -> bool {
        true
    }

    fn run<'a>(
        &'a self,
        cx: ToolContext<'a>,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        Box::pin(async move {
            let _ = cx;
            let args = match call.args.as_ref().map(json::args_to_json) {
                None => serde_json::Map::new(),
                Some(Ok(a)) => a,
                Some(Err(e)) => {
                    return Ok(receipt::error_result(&call.id, &McpError::Arguments(e)));
                }
            };
            // Every failure, the server's or the transport's, is the call's
            // durable answer: the model is told and the turn goes on.
            Ok(match self.hub.call(&call.tool, args).await {
                Ok(outcome) => receipt::to_tool_result(&call.id, &outcome),
                Err(e) => receipt::error_result(&call.id, &e),
            })
        })
    }
}
