//! MCP tools as host tools: a call named `SERVER__TOOL` that the ledger
//! executor found no built-in for goes to the [`McpHub`].
//!
//! Invariant: a tool that does not say it is idempotent runs at most once
//! per idempotency key. The ledger commits "started" before the call; a key
//! found started and not done (the host stopped mid-call) gets a durable
//! EXECUTOR_ERROR receipt saying the outcome is unknown, and the server is
//! not called again. An idempotent tool is simply called again. A call
//! whose turn is canceled is dropped ([`Tool::interruptible`]), which sends
//! the server `notifications/cancelled` for it.

use agentsessions_proto::v1::{ToolCall, ToolResult, tool_result::Code};

use super::{Tool, ToolContext, ToolError};
use crate::mcp::{McpError, McpHub, json, receipt};
use crate::model::BoxFuture;

/// One MCP tool, bound to the hub that serves it.
pub struct McpCall {
    hub: McpHub,
    idempotent: bool,
}

impl McpCall {
    /// The tool called `name`, when a server of `hub` lists it.
    pub fn find(hub: &McpHub, name: &str) -> Option<Self> {
        let tool = hub.tools().into_iter().find(|t| t.name == name)?;
        Some(Self {
            hub: hub.clone(),
            idempotent: tool.idempotent,
        })
    }
}

/// The receipt of a call whose earlier run may or may not have happened.
pub fn outcome_unknown(call: &ToolCall) -> ToolResult {
    let why = format!(
        "outcome unknown: the host stopped while {} ran, and the tool does not say it is idempotent, so it is not called again",
        call.tool
    );
    ToolResult {
        id: call.id.clone(),
        is_error: true,
        code: Code::ExecutorError as i32,
        content: vec![
            agentsessions_machine::events::text_message("tool", &why)
                .parts
                .remove(0),
        ],
        error: why,
        ..ToolResult::default()
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
            if cx.redrive && !self.idempotent {
                return Ok(outcome_unknown(call));
            }
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
