//! The agent harness: a tool-using loop over one configured model. Each
//! step asks the model once with the conversation so far and the offered
//! tools; every tool call it answers with goes through the host, and its
//! receipt goes back to the model, until the model answers without tools.
//!
//! Invariant: every request is rebuilt from what the journal holds (the
//! history, the inputs, the turn's config, the recorded replies and
//! receipts), so a replay or a resume makes the same model calls and the
//! same tool calls in the same order, and the host can serve them back by
//! input hash. The one outside input is the tool catalog: a replay rebuilds
//! the same model call only while the catalog is unchanged.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use agentsessions_machine::events;
use agentsessions_machine::vocab::shown;
use agentsessions_machine::vocab::{Policy, ToolRule};
use agentsessions_proto::v1::{
    EventKind, HarnessDescriptor, Mediation, Message, Part, Resumability, TextPart, ToolCall,
    ToolDefinition, ToolResult, ToolSpec, event::Body, file_part, part, tool_result::Code,
};
use serde_json::Value;

use super::descriptor;
use crate::harness::{Harness, HarnessError, ModelRequest, Sink, StartInfo};

/// The tools an agent may offer, asked for at the start of every run: the
/// host's catalog, filtered by its policy, sorted by name.
pub type ToolSource = Arc<dyn Fn() -> Vec<ToolDefinition> + Send + Sync>;

/// A source that offers nothing (no MCP servers).
pub fn no_tools() -> ToolSource {
    Arc::new(Vec::new)
}

/// Model calls per turn when the config names none.
pub const DEFAULT_MAX_STEPS: u32 = 16;
/// Most model calls a turn may ask for.
pub const MAX_STEPS: u32 = 256;
/// Most tool patterns in a config, and the longest one.
const MAX_PATTERNS: usize = 64;
const MAX_PATTERN_LEN: usize = 256;
/// Most tool calls one reply may ask for.
pub const MAX_CALLS_PER_STEP: usize = 64;
/// Most bytes of one tool result's text the model is shown.
pub const MAX_SHOWN_BYTES: usize = 64 * 1024;

/// What the model is told about a call the approver denied.
pub const DENIED: &str = "The approver denied this tool call; it was not run.";
/// What the model is told about a call of an earlier turn with no receipt.
pub const NOT_RUN: &str = "This tool call was not run: the turn ended before it.";

/// Why a turn's config was refused. Fixed texts: the config is caller data
/// and must not leak into errors (a key name is shown, clipped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentConfigError {
    /// Not a JSON object.
    #[error("agent: config must be a JSON object")]
    NotObject,
    /// `system_prompt` is not a string.
    #[error("agent: system_prompt must be a string")]
    Prompt,
    /// `tools` is not a short array of non-empty patterns.
    #[error("agent: tools must be an array of at most 64 non-empty patterns of at most 256 bytes")]
    Tools,
    /// `max_steps` is out of range.
    #[error("agent: max_steps must be an integer from 1 to 256")]
    MaxSteps,
    /// `max_tokens` is not a positive integer.
    #[error("agent: max_tokens must be a positive integer")]
    MaxTokens,
    /// A key the agent does not know (a typo would otherwise be ignored).
    #[error("agent: unknown config key {0}")]
    Unknown(String),
}

impl From<AgentConfigError> for HarnessError {
    fn from(e: AgentConfigError) -> Self {
        HarnessError::failed(e.to_string())
    }
}

/// One turn's config (`ExecRequest.config`, a JSON object; empty bytes
/// take every default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// Sent first, as a system message.
    pub system_prompt: Option<String>,
    /// Tool name patterns (`*` matches any run, as in `--tool-policy`);
    /// None offers every tool the policy does not deny.
    pub tools: Option<Vec<String>>,
    /// Most model calls in the turn.
    pub max_steps: u32,
    /// Most input plus output tokens the turn may spend before it stops
    /// calling tools.
    pub max_tokens: Option<u64>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            system_prompt: None,
            tools: None,
            max_steps: DEFAULT_MAX_STEPS,
            max_tokens: None,
        }
    }
}

impl AgentConfig {
    /// Parses `bytes`; see the type's fields.
    pub fn parse(bytes: &[u8]) -> Result<Self, AgentConfigError> {
        let mut config = Self::default();
        if bytes.is_empty() {
            return Ok(config);
        }
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(bytes) else {
            return Err(AgentConfigError::NotObject);
        };
        for (key, value) in &map {
            match key.as_str() {
                "system_prompt" => {
                    let prompt = value.as_str().ok_or(AgentConfigError::Prompt)?;
                    config.system_prompt = Some(prompt.to_owned());
                }
                "tools" => config.tools = Some(patterns(value)?),
                "max_steps" => {
                    config.max_steps = value
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| (1..=MAX_STEPS).contains(n))
                        .ok_or(AgentConfigError::MaxSteps)?;
                }
                "max_tokens" => {
                    let budget = value
                        .as_u64()
                        .filter(|&n| n > 0)
                        .ok_or(AgentConfigError::MaxTokens)?;
                    config.max_tokens = Some(budget);
                }
                other => return Err(AgentConfigError::Unknown(format!("{:?}", shown(other)))),
            }
        }
        Ok(config)
    }

    /// True when the config's patterns let the agent offer `name`.
    pub fn offers(&self, name: &str) -> bool {
        match &self.tools {
            None => true,
            Some(patterns) => patterns.iter().any(|p| {
                // The policy's own matcher, so `*` means the same in both.
                ToolRule {
                    pattern: p.clone(),
                    policy: Policy::Auto,
                    expiry_ms: None,
                }
                .covers(name)
            }),
        }
    }
}

fn patterns(value: &Value) -> Result<Vec<String>, AgentConfigError> {
    let items = value.as_array().ok_or(AgentConfigError::Tools)?;
    if items.len() > MAX_PATTERNS {
        return Err(AgentConfigError::Tools);
    }
    items
        .iter()
        .map(|p| match p.as_str() {
            Some(p) if !p.is_empty() && p.len() <= MAX_PATTERN_LEN => Ok(p.to_owned()),
            _ => Err(AgentConfigError::Tools),
        })
        .collect()
}

/// A tool-using conversation with one configured model.
///
/// Bounds: `max_steps` model calls; once the turn's usage passes
/// `max_tokens`, a reply asking for tools ends it. A bound that stops the
/// loop while the model still wants tools ends the turn FAILED; a reply
/// without tool calls ends it COMPLETED (the host recorded that reply as
/// the turn's output).
///
/// Usage counts only what this run paid for: a completion the host serves
/// from the journal (replay, or the prefix a Resume re-runs) carries none.
#[derive(Clone)]
pub struct Agent {
    model: String,
    tools: ToolSource,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent over `model` offering what `tools` lists.
    pub fn new(model: impl Into<String>, tools: ToolSource) -> Self {
        Self {
            model: model.into(),
            tools,
        }
    }

    /// The model this harness calls.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The tools offered under `config`, sorted by name (the source's order
    /// is not trusted: the request must not depend on it).
    pub fn offered(&self, config: &AgentConfig) -> Vec<ToolDefinition> {
        let mut tools: Vec<ToolDefinition> = (self.tools)()
            .into_iter()
            .filter(|t| config.offers(&t.name))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools.dedup_by(|a, b| a.name == b.name);
        tools
    }
}

#[tonic::async_trait]
impl Harness for Agent {
    fn describe(&self) -> HarnessDescriptor {
        let mut d = descriptor(
            "agent",
            vec![self.model.clone()],
            Resumability::StatelessReplay,
            true,
        );
        // What the catalog offers now; informational, as the catalog can
        // change under a running host.
        d.tools = self
            .offered(&AgentConfig::default())
            .into_iter()
            .map(|t| ToolSpec {
                name: t.name,
                description: t.description,
                mediation: Mediation::ControllerMediated as i32,
            })
            .collect();
        d
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let config = AgentConfig::parse(&start.config)?;
        let tools = self.offered(&config);
        let names: BTreeSet<String> = tools.iter().map(|t| t.name.clone()).collect();
        let mut messages = conversation(config.system_prompt.as_deref(), &start);
        let mut spent: u64 = 0;
        let mut ids = BTreeSet::new();
        for step in 1..=config.max_steps {
            let request = ModelRequest {
                tools: tools.clone(),
                ..ModelRequest::new(self.model.clone(), messages.clone())
            };
            let result = sink.model(request).await?;
            if let Some(u) = &result.usage {
                let tokens = u.input_tokens.max(0).saturating_add(u.output_tokens.max(0));
                spent = spent.saturating_add(tokens.unsigned_abs());
            }
            let reply = result.message.unwrap_or_default();
            let calls = tool_calls(&reply);
            if calls.is_empty() {
                return Ok(());
            }
            // The calls of the last step would be run for a model that never
            // sees their results: refuse before any of them runs.
            if step == config.max_steps {
                return Err(HarnessError::failed(format!(
                    "agent: max_steps ({}) reached with tool calls pending",
                    config.max_steps
                )));
            }
            if let Some(budget) = config.max_tokens.filter(|&b| spent > b) {
                return Err(HarnessError::failed(format!(
                    "agent: max_tokens ({budget}) spent ({spent} tokens) with tool calls pending"
                )));
            }
            if calls.len() > MAX_CALLS_PER_STEP {
                return Err(HarnessError::failed(format!(
                    "agent: the model asked for {} tool calls in one step (at most {MAX_CALLS_PER_STEP})",
                    calls.len()
                )));
            }
            for call in &calls {
                // The id is the call's identity to the host (correlation,
                // idempotency key), so it must be unique in the execution.
                if call.id.is_empty() || !ids.insert(call.id.clone()) {
                    return Err(HarnessError::failed(format!(
                        "agent: the model gave tool call id {:?} twice or not at all",
                        shown(&call.id)
                    )));
                }
            }
            messages.push(reply.clone());
            for call in calls {
                let shown_result = if names.contains(&call.tool) {
                    let (receipt, decision) = sink
                        .tool_call_decided(ToolCall {
                            id: call.id.clone(),
                            tool: call.tool.clone(),
                            args: Some(call.args.clone().unwrap_or_default()),
                            mediation: Mediation::ControllerMediated as i32,
                            idempotency_key: format!("{}/{}", start.execution_id, call.id),
                        })
                        .await?;
                    model_view(&receipt, decision.as_ref().map(|d| d.reason.as_str()))
                } else {
                    // Never ask the host to run what this turn did not offer:
                    // its policy may allow a tool the config left out.
                    let text = format!("tool {:?} is not offered to this agent", shown(&call.tool));
                    let refusal = ToolResult {
                        id: call.id.clone(),
                        is_error: true,
                        error: text.clone(),
                        content: vec![text_part(text)],
                        ..ToolResult::default()
                    };
                    sink.report(refusal.clone()).await?;
                    model_view(&refusal, None)
                };
                messages.push(tool_message(shown_result));
            }
        }
        // Not reached: max_steps is at least 1 and its last step returns.
        Err(HarnessError::failed(format!(
            "agent: max_steps ({}) reached",
            config.max_steps
        )))
    }
}

/// The tool calls of an assistant message, in order.
fn tool_calls(m: &Message) -> Vec<ToolCall> {
    m.parts
        .iter()
        .filter_map(|p| match &p.part {
            Some(part::Part::ToolCall(c)) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn text_part(text: String) -> Part {
    Part {
        part: Some(part::Part::Text(TextPart { text })),
    }
}

/// A `tool` message carrying one result.
fn tool_message(result: ToolResult) -> Message {
    Message {
        role: "tool".to_owned(),
        parts: vec![Part {
            part: Some(part::Part::ToolResult(result)),
        }],
    }
}

/// `text` cut to [`MAX_SHOWN_BYTES`] on a char boundary.
fn clip(mut text: String) -> String {
    if text.len() <= MAX_SHOWN_BYTES {
        return text;
    }
    let mut cut = MAX_SHOWN_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("\n[{dropped} more bytes not shown]"));
    text
}

/// What the model is shown for `receipt`, the same live and from history:
/// a denial says so with the approver's `reason`; another error, its text;
/// a success, its text (media and data named, not inlined: the provider
/// takes only text here) or else its structured output. Approval evidence
/// stays in the journal.
pub(crate) fn model_view(receipt: &ToolResult, reason: Option<&str>) -> ToolResult {
    let mut shown = ToolResult {
        id: receipt.id.clone(),
        is_error: receipt.is_error,
        code: receipt.code,
        ..ToolResult::default()
    };
    if receipt.code == Code::ApprovalDenied as i32 {
        let text = match reason.filter(|r| !r.is_empty()) {
            Some(r) => clip(format!("{DENIED} Reason: {r}")),
            None => DENIED.to_owned(),
        };
        shown.is_error = true;
        shown.error.clone_from(&text);
        shown.content = vec![text_part(text)];
        return shown;
    }
    let text = content_text(&receipt.content);
    if receipt.is_error {
        let text = clip(match (receipt.error.is_empty(), text.is_empty()) {
            (false, _) => receipt.error.clone(),
            (true, false) => text,
            (true, true) => "the tool failed".to_owned(),
        });
        shown.error.clone_from(&text);
        shown.content = vec![text_part(text)];
        return shown;
    }
    if text.is_empty() {
        shown.output.clone_from(&receipt.output);
    } else {
        shown.content = vec![text_part(clip(text))];
    }
    shown
}

/// The text of result parts, one line each; media and data by name only.
fn content_text(parts: &[Part]) -> String {
    let mut lines = Vec::with_capacity(parts.len());
    for p in parts {
        match &p.part {
            Some(part::Part::Text(t)) => lines.push(t.text.clone()),
            Some(part::Part::File(f)) => {
                let name = match (&f.name, &f.source) {
                    (n, _) if !n.is_empty() => n.clone(),
                    (_, Some(file_part::Source::Uri(u))) if !u.starts_with("data:") => u.clone(),
                    _ => String::new(),
                };
                lines.push(format!("[file {} {:?} not shown]", f.mime, shown(&name)));
            }
            Some(part::Part::Data(_)) => lines.push("[data not shown]".to_owned()),
            _ => {}
        }
    }
    lines.join("\n")
}

/// The conversation `start` begins with: the system prompt, the earlier
/// turns (inputs, outputs with their tool calls, and each call's receipt as
/// a `tool` message right after the output that asked for it), then this
/// execution's inputs. A call with no receipt (its turn failed or was
/// canceled first) is answered with [`NOT_RUN`], since providers refuse a
/// tool call left unanswered; receipts answering nothing are left out.
pub(crate) fn conversation(prompt: Option<&str>, start: &StartInfo) -> Vec<Message> {
    let mut messages = Vec::with_capacity(1 + start.history.len() + start.inputs.len());
    if let Some(prompt) = prompt.filter(|p| !p.is_empty()) {
        messages.push(events::text_message("system", prompt));
    }
    // Calls of the last output still waiting for a receipt, in order.
    let mut open: Vec<String> = Vec::new();
    // Approvers' reasons by (execution, call id).
    let mut reasons: HashMap<(&str, &str), &str> = HashMap::new();
    for ev in start.history.iter() {
        let kind = EventKind::try_from(ev.kind).unwrap_or(EventKind::Unspecified);
        match (kind, &ev.body) {
            (EventKind::EventInput, Some(Body::Message(m))) => {
                close_open(&mut open, &mut messages);
                messages.push(m.clone());
            }
            (EventKind::EventOutput, Some(Body::Message(m))) => {
                close_open(&mut open, &mut messages);
                messages.push(m.clone());
                open = tool_calls(m).into_iter().map(|c| c.id).collect();
            }
            (EventKind::EventApprovalResult, Some(Body::ApprovalResult(d))) => {
                reasons.insert(
                    (ev.execution_id.as_str(), d.tool_call_id.as_str()),
                    d.reason.as_str(),
                );
            }
            (EventKind::EventToolResult, Some(Body::Result(r))) => {
                if let Some(i) = open.iter().position(|id| *id == r.id) {
                    open.remove(i);
                    let reason = reasons
                        .get(&(ev.execution_id.as_str(), r.id.as_str()))
                        .copied();
                    messages.push(tool_message(model_view(r, reason)));
                }
            }
            _ => {}
        }
    }
    close_open(&mut open, &mut messages);
    messages.extend(start.inputs.iter().cloned());
    messages
}

/// Answers every call still open with [`NOT_RUN`].
fn close_open(open: &mut Vec<String>, messages: &mut Vec<Message>) {
    for id in open.drain(..) {
        messages.push(tool_message(ToolResult {
            id,
            is_error: true,
            error: NOT_RUN.to_owned(),
            content: vec![text_part(NOT_RUN.to_owned())],
            ..ToolResult::default()
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::History;
    use agentsessions_proto::v1::{ApprovalResult, Event, FilePart};
    use pbjson_types::Struct;

    fn start(history: Vec<Event>, inputs: Vec<Message>) -> StartInfo {
        StartInfo {
            execution_id: "e".into(),
            history: History::from_events(history),
            inputs,
            ..StartInfo::default()
        }
    }

    fn call_part(id: &str, tool: &str) -> Part {
        Part {
            part: Some(part::Part::ToolCall(ToolCall {
                id: id.into(),
                tool: tool.into(),
                args: Some(Struct::default()),
                ..ToolCall::default()
            })),
        }
    }

    fn asking(ids: &[&str]) -> Message {
        Message {
            role: "assistant".into(),
            parts: ids.iter().map(|id| call_part(id, "fs__read")).collect(),
        }
    }

    fn receipt(id: &str, text: &str) -> ToolResult {
        ToolResult {
            id: id.into(),
            content: vec![text_part(text.into())],
            ..ToolResult::default()
        }
    }

    fn result_event(exec: &str, r: ToolResult) -> Event {
        events::event(exec, EventKind::EventToolResult, Body::Result(r))
    }

    fn shown_text(m: &Message) -> (String, String) {
        match &m.parts[..] {
            [
                Part {
                    part: Some(part::Part::ToolResult(r)),
                },
            ] => {
                assert_eq!(m.role, "tool");
                let text = r
                    .content
                    .iter()
                    .map(|p| match &p.part {
                        Some(part::Part::Text(t)) => t.text.clone(),
                        _ => String::new(),
                    })
                    .collect();
                (r.id.clone(), text)
            }
            _ => panic!("not a tool message: {m:?}"),
        }
    }

    #[test]
    fn config_defaults_and_fields() {
        assert_eq!(AgentConfig::parse(b""), Ok(AgentConfig::default()));
        assert_eq!(AgentConfig::parse(b"{}"), Ok(AgentConfig::default()));
        let got = AgentConfig::parse(
            br#"{"system_prompt": "be brief", "tools": ["fs__*", "git__log"],
                 "max_steps": 3, "max_tokens": 5000}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            AgentConfig {
                system_prompt: Some("be brief".into()),
                tools: Some(vec!["fs__*".into(), "git__log".into()]),
                max_steps: 3,
                max_tokens: Some(5000),
            }
        );
        assert_eq!(AgentConfig::default().max_steps, 16);
    }

    #[test]
    fn config_bounds_and_bad_values() {
        for ok in [1, 256] {
            let c = AgentConfig::parse(format!(r#"{{"max_steps": {ok}}}"#).as_bytes()).unwrap();
            assert_eq!(c.max_steps, ok);
        }
        let cases: Vec<(&[u8], AgentConfigError)> = vec![
            (b"[]", AgentConfigError::NotObject),
            (b"null", AgentConfigError::NotObject),
            (b"not json", AgentConfigError::NotObject),
            (b" ", AgentConfigError::NotObject),
            (br#"{"system_prompt": 3}"#, AgentConfigError::Prompt),
            (br#"{"system_prompt": null}"#, AgentConfigError::Prompt),
            (br#"{"tools": "fs__*"}"#, AgentConfigError::Tools),
            (br#"{"tools": [""]}"#, AgentConfigError::Tools),
            (br#"{"tools": [1]}"#, AgentConfigError::Tools),
            (br#"{"max_steps": 0}"#, AgentConfigError::MaxSteps),
            (br#"{"max_steps": 257}"#, AgentConfigError::MaxSteps),
            (br#"{"max_steps": -1}"#, AgentConfigError::MaxSteps),
            (br#"{"max_steps": 2.5}"#, AgentConfigError::MaxSteps),
            (br#"{"max_steps": "3"}"#, AgentConfigError::MaxSteps),
            (br#"{"max_steps": 4294967297}"#, AgentConfigError::MaxSteps),
            (br#"{"max_tokens": 0}"#, AgentConfigError::MaxTokens),
            (br#"{"max_tokens": -5}"#, AgentConfigError::MaxTokens),
            (br#"{"max_tokens": null}"#, AgentConfigError::MaxTokens),
            (
                br#"{"max_step": 3}"#,
                AgentConfigError::Unknown("\"max_step\"".into()),
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                AgentConfig::parse(bytes),
                Err(want),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
        let bytes = serde_json::to_vec(&serde_json::json!({ "tools": many })).unwrap();
        assert_eq!(AgentConfig::parse(&bytes), Err(AgentConfigError::Tools));
        let long = "x".repeat(257);
        let bytes = serde_json::to_vec(&serde_json::json!({ "tools": [long] })).unwrap();
        assert_eq!(AgentConfig::parse(&bytes), Err(AgentConfigError::Tools));
        // A refused value never appears in the error.
        let e = AgentConfig::parse(br#"{"system_prompt": ["sk-secret"]}"#).unwrap_err();
        assert!(!HarnessError::from(e).to_string().contains("secret"));
    }

    fn def(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: format!("{name} does things"),
            input_schema: None,
        }
    }

    fn agent(names: &[&str]) -> Agent {
        let defs: Vec<ToolDefinition> = names.iter().map(|n| def(n)).collect();
        Agent::new("m", Arc::new(move || defs.clone()))
    }

    fn names(tools: &[ToolDefinition]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn patterns_filter_the_offered_tools_sorted_by_name() {
        let a = agent(&[
            "git__log",
            "fs__write_file",
            "fs__read_text_file",
            "fs__read_text_file",
        ]);
        let all = a.offered(&AgentConfig::default());
        assert_eq!(
            names(&all),
            ["fs__read_text_file", "fs__write_file", "git__log"]
        );
        let only = |patterns: &[&str]| AgentConfig {
            tools: Some(patterns.iter().map(|p| p.to_string()).collect()),
            ..AgentConfig::default()
        };
        assert_eq!(
            names(&a.offered(&only(&["fs__*"]))),
            ["fs__read_text_file", "fs__write_file"]
        );
        assert_eq!(
            names(&a.offered(&only(&["*__read_*", "git__log"]))),
            ["fs__read_text_file", "git__log"]
        );
        assert_eq!(names(&a.offered(&only(&["*"]))).len(), 3);
        assert!(
            a.offered(&only(&["fs__read"])).is_empty(),
            "no prefix match"
        );
        assert!(a.offered(&only(&[])).is_empty());
        assert!(agent(&[]).offered(&AgentConfig::default()).is_empty());
        let d = a.describe();
        assert_eq!(d.id, "agent");
        assert_eq!(d.models, ["m"]);
        assert_eq!(d.tools.len(), 3);
        assert!(
            d.tools
                .iter()
                .all(|t| t.mediation == Mediation::ControllerMediated as i32)
        );
    }

    #[test]
    fn history_threads_calls_receipts_and_denials() {
        let hi = events::text_message("user", "hi");
        let again = events::text_message("user", "again");
        let denied = ToolResult {
            id: "c2".into(),
            is_error: true,
            error: "Tool execution denied by approval decision.".into(),
            code: Code::ApprovalDenied as i32,
            approval_request_seq: 7,
            approval_decision_seq: 9,
            ..ToolResult::default()
        };
        let decision = ApprovalResult {
            tool_call_id: "c2".into(),
            approved: false,
            reason: "not today".into(),
            request_seq: 7,
        };
        let history = vec![
            events::input("e0", hi.clone()),
            events::event(
                "e0",
                EventKind::EventModelCall,
                Body::Model(Default::default()),
            ),
            events::output("e0", asking(&["c1", "c2"])),
            events::event(
                "e0",
                EventKind::EventToolCall,
                Body::Tool(ToolCall {
                    id: "c1".into(),
                    ..ToolCall::default()
                }),
            ),
            result_event("e0", receipt("c1", "file body")),
            events::event(
                "e0",
                EventKind::EventApprovalResult,
                Body::ApprovalResult(decision),
            ),
            result_event("e0", denied),
            // A receipt answering no open call stays out.
            result_event("e0", receipt("zz", "stray")),
            events::output("e0", events::assistant_text("done")),
            events::end_completed("e0"),
        ];
        let got = conversation(Some("sys"), &start(history, vec![again.clone()]));
        assert_eq!(got.len(), 7, "{got:#?}");
        assert_eq!(got[0], events::text_message("system", "sys"));
        assert_eq!(got[1], hi);
        assert_eq!(got[2], asking(&["c1", "c2"]), "tool calls are kept");
        assert_eq!(shown_text(&got[3]), ("c1".into(), "file body".into()));
        assert_eq!(
            shown_text(&got[4]),
            ("c2".into(), format!("{DENIED} Reason: not today"))
        );
        let Some(part::Part::ToolResult(r)) = &got[4].parts[0].part else {
            unreachable!()
        };
        assert!(r.is_error);
        assert_eq!(r.code, Code::ApprovalDenied as i32);
        assert_eq!(r.approval_request_seq, 0, "evidence stays in the journal");
        assert_eq!(got[5], events::assistant_text("done"));
        assert_eq!(got[6], again);
    }

    #[test]
    fn unanswered_calls_are_closed_before_the_next_turn() {
        let history = vec![
            events::input("e0", events::text_message("user", "go")),
            events::output("e0", asking(&["c1", "c2"])),
            result_event("e0", receipt("c1", "ok")),
            events::end_completed("e0"),
            events::input("e1", events::text_message("user", "next")),
            events::output("e1", asking(&["c3"])),
        ];
        let got = conversation(None, &start(history, vec![]));
        let tools: Vec<(String, String)> = got
            .iter()
            .filter(|m| m.role == "tool")
            .map(shown_text)
            .collect();
        assert_eq!(
            tools,
            [
                ("c1".into(), "ok".into()),
                ("c2".into(), NOT_RUN.into()),
                ("c3".into(), NOT_RUN.into())
            ]
        );
        // Order: the closing answer sits before the next input.
        assert_eq!(got[3].role, "tool");
        assert_eq!(got[4], events::text_message("user", "next"));
    }

    #[test]
    fn the_model_view_of_receipts() {
        let failed = ToolResult {
            id: "c".into(),
            is_error: true,
            error: "no such file".into(),
            code: Code::ExecutorError as i32,
            content: vec![text_part("ignored".into())],
            ..ToolResult::default()
        };
        let v = model_view(&failed, None);
        assert!(v.is_error);
        assert_eq!(v.error, "no such file");
        let denied = ToolResult {
            code: Code::ApprovalDenied as i32,
            is_error: true,
            ..ToolResult::default()
        };
        assert_eq!(model_view(&denied, Some("")).error, DENIED);
        let media = ToolResult {
            id: "c".into(),
            content: vec![
                text_part("a".into()),
                Part {
                    part: Some(part::Part::File(FilePart {
                        mime: "image/png".into(),
                        name: "pic".into(),
                        ..FilePart::default()
                    })),
                },
            ],
            ..ToolResult::default()
        };
        let v = model_view(&media, None);
        assert_eq!(
            v.content,
            vec![text_part("a\n[file image/png \"pic\" not shown]".into())]
        );
        let structured = ToolResult {
            id: "c".into(),
            output: Some(Struct::default()),
            ..ToolResult::default()
        };
        assert_eq!(
            model_view(&structured, None).output,
            Some(Struct::default())
        );
        let big = receipt("c", &"é".repeat(MAX_SHOWN_BYTES));
        let v = model_view(&big, None);
        let Some(part::Part::Text(t)) = &v.content[0].part else {
            unreachable!()
        };
        assert!(t.text.len() < MAX_SHOWN_BYTES + 64);
        assert!(t.text.ends_with("more bytes not shown]"));
    }
}
