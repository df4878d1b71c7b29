//! The approval demo harness.

use agentsessions_proto::v1::{
    HarnessDescriptor, Mediation, Resumability, ToolCall, ToolSpec, tool_result::Code,
};
use pbjson_types::{Struct, Value};

use super::descriptor;
use crate::harness::{Harness, HarnessError, Sink, StartInfo};

/// The tool the approval harness calls.
pub const TOOL: &str = "append_note";

/// Asks the host to run `append_note` with the last input's text, gated on
/// a human's approval, then outputs what the receipt says happened.
///
/// Live, the host commits the call and parks; once someone approves or
/// denies, Resume replays the run and the same call (same id, same
/// idempotency key, both derived from the execution) receives the decision
/// and its receipt.
#[derive(Debug, Clone, Copy, Default)]
pub struct Approval;

impl Approval {
    /// The call this harness makes in `execution_id` for `text`.
    pub fn call(execution_id: &str, text: &str) -> ToolCall {
        let args = Struct::from_iter([("text".to_owned(), Value::from(text.to_owned()))]);
        ToolCall {
            id: "c1".to_owned(),
            tool: TOOL.to_owned(),
            args: Some(args),
            mediation: Mediation::RequiresApproval as i32,
            // Stable across replays of one execution and distinct across
            // executions, so an executor dedups retries but not new turns.
            idempotency_key: format!("approval/{execution_id}/c1"),
        }
    }
}

#[tonic::async_trait]
impl Harness for Approval {
    fn describe(&self) -> HarnessDescriptor {
        let mut d = descriptor("approval", Vec::new(), Resumability::StatelessReplay, true);
        d.tools.push(ToolSpec {
            name: TOOL.to_owned(),
            description: "Appends a note; a human must approve each call".to_owned(),
            mediation: Mediation::RequiresApproval as i32,
        });
        d
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let call = Self::call(&start.execution_id, &start.last_input_text());
        let receipt = sink.tool_call(call).await?;
        let text = if !receipt.is_error {
            format!("{TOOL} approved and done")
        } else if receipt.code == Code::ApprovalDenied as i32 {
            format!("{TOOL} denied: {}", receipt.error)
        } else {
            format!("{TOOL} approved but failed: {}", receipt.error)
        };
        sink.output(&text).await
    }
}
