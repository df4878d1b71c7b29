//! A test harness that calls the one tool its input names
//! (`{"tool": …, "args": {…}}`) as an ordinary host-mediated call and
//! outputs what the receipt said, so a test drives any catalog tool
//! through the daemon.

use agentsessions_proto::v1::{
    Capabilities, HarnessDescriptor, Mediation, Resumability, ToolCall, part,
};
use agentsessions_shells::harness::{Harness, HarnessError, Sink, StartInfo};
use agentsessions_shells::mcp::json_to_struct;

/// The descriptor of a caller harness.
pub fn descriptor() -> HarnessDescriptor {
    HarnessDescriptor {
        id: "caller".into(),
        version: "1".into(),
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            fork_safe: true,
            ..Capabilities::default()
        }),
        ..HarnessDescriptor::default()
    }
}

/// The call a turn's input asks for (`{"tool": …, "args": {…}}`): an
/// ordinary host-mediated call, keyed by the execution.
pub fn asked_call(start: &StartInfo) -> Result<ToolCall, HarnessError> {
    let ask: serde_json::Value = serde_json::from_str(&start.last_input_text())
        .map_err(|e| HarnessError::Invalid(e.to_string()))?;
    let args = ask["args"].as_object().cloned().unwrap_or_default();
    Ok(ToolCall {
        id: "c1".into(),
        tool: ask["tool"].as_str().unwrap_or_default().into(),
        args: Some(json_to_struct(&args).expect("test arguments fit")),
        mediation: Mediation::ControllerMediated as i32,
        idempotency_key: format!("{}-k1", start.execution_id),
    })
}

/// Calls the one tool its input names as an ordinary host-mediated call
/// (the host's policy may still gate it), and outputs `ok: TEXT ERROR` or
/// `error: TEXT ERROR` from the receipt.
pub struct Caller;

#[tonic::async_trait]
impl Harness for Caller {
    fn describe(&self) -> HarnessDescriptor {
        descriptor()
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let receipt = sink.tool_call(asked_call(&start)?).await?;
        let text: String = receipt
            .content
            .iter()
            .filter_map(|p| match &p.part {
                Some(part::Part::Text(t)) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        let verdict = if receipt.is_error { "error" } else { "ok" };
        sink.output(&format!("{verdict}: {text} {}", receipt.error))
            .await
    }
}
