//! The chat harness.

use agentsessions_machine::events;
use agentsessions_proto::v1::{EventKind, HarnessDescriptor, Message, Resumability, event::Body};
use serde_json::Value;

use super::descriptor;
use crate::harness::{Harness, HarnessError, ModelRequest, Sink, StartInfo};

/// The failure for a config that is not a JSON object. Fixed text: the
/// config is caller data and must not leak into errors.
pub const CONFIG_NOT_OBJECT: &str = "chatagent: config must be a JSON object";

/// The failure for a `system_prompt` that is not a JSON string.
pub const PROMPT_NOT_STRING: &str = "chatagent: system_prompt must be a string";

/// A conversation with one configured model.
///
/// Each run sends the whole conversation: an optional system prompt (from
/// the JSON config's `system_prompt`), every earlier INPUT and OUTPUT
/// message from History, then this execution's inputs. Because History
/// carries the prior turns, replay and resume rebuild the same request.
#[derive(Debug, Clone)]
pub struct Chat {
    model: String,
}

impl Chat {
    /// A chat harness for `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
        }
    }

    /// The model this harness calls.
    pub fn model(&self) -> &str {
        &self.model
    }
}

/// The system prompt from `config`; empty config means none.
pub(crate) fn system_prompt(config: &[u8]) -> Result<Option<String>, HarnessError> {
    if config.is_empty() {
        return Ok(None);
    }
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(config) else {
        return Err(HarnessError::failed(CONFIG_NOT_OBJECT));
    };
    match map.get("system_prompt") {
        None => Ok(None),
        Some(Value::String(prompt)) => Ok(Some(prompt.clone())),
        Some(_) => Err(HarnessError::failed(PROMPT_NOT_STRING)),
    }
}

/// The conversation sent for `start`.
pub(crate) fn conversation(prompt: Option<&str>, start: &StartInfo) -> Vec<Message> {
    let mut messages = Vec::with_capacity(1 + start.history.len() + start.inputs.len());
    if let Some(prompt) = prompt.filter(|p| !p.is_empty()) {
        messages.push(events::text_message("system", prompt));
    }
    // Only the turns themselves: model calls, tool traffic and host records
    // stay out even when they carry a message.
    for ev in start.history.iter() {
        let turn =
            ev.kind == EventKind::EventInput as i32 || ev.kind == EventKind::EventOutput as i32;
        if let (true, Some(Body::Message(m))) = (turn, &ev.body) {
            messages.push(m.clone());
        }
    }
    messages.extend(start.inputs.iter().cloned());
    messages
}

#[tonic::async_trait]
impl Harness for Chat {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(
            "chat",
            vec![self.model.clone()],
            Resumability::StatelessReplay,
            true,
        )
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let prompt = system_prompt(&start.config)?;
        let messages = conversation(prompt.as_deref(), &start);
        sink.model(ModelRequest::new(self.model.clone(), messages))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::History;
    use agentsessions_proto::v1::Event;

    fn start(history: Vec<Event>, inputs: Vec<Message>) -> StartInfo {
        StartInfo {
            execution_id: "e".into(),
            history: History::from_events(history),
            inputs,
            ..StartInfo::default()
        }
    }

    #[test]
    fn config_rules() {
        assert_eq!(system_prompt(b""), Ok(None));
        assert_eq!(system_prompt(b"{}"), Ok(None));
        assert_eq!(system_prompt(br#"{"other": 1}"#), Ok(None));
        assert_eq!(
            system_prompt(br#"{"system_prompt": "be brief"}"#),
            Ok(Some("be brief".into()))
        );
        for bad in [&b"[]"[..], b"\"x\"", b"null", b"not json", b"{", b" "] {
            assert_eq!(
                system_prompt(bad),
                Err(HarnessError::failed(CONFIG_NOT_OBJECT)),
                "{bad:?}"
            );
        }
        for bad in [
            &br#"{"system_prompt": null}"#[..],
            br#"{"system_prompt": 3}"#,
        ] {
            assert_eq!(
                system_prompt(bad),
                Err(HarnessError::failed(PROMPT_NOT_STRING))
            );
        }
    }

    #[test]
    fn conversation_keeps_turns_and_repeats() {
        let hi = events::text_message("user", "hi");
        let history = vec![
            events::input("e0", hi.clone()),
            // A message-carrying event of another kind stays out.
            events::event(
                "e0",
                EventKind::EventToolResult,
                Body::Message(events::text_message("tool", "x")),
            ),
            events::output("e0", events::assistant_text("hello")),
            events::end_completed("e0"),
        ];
        let inputs = vec![hi.clone(), hi.clone()];
        let got = conversation(Some("sys"), &start(history, inputs));
        let want = vec![
            events::text_message("system", "sys"),
            hi.clone(),
            events::assistant_text("hello"),
            hi.clone(),
            hi,
        ];
        assert_eq!(got, want);
        assert_eq!(conversation(Some(""), &start(vec![], vec![])), vec![]);
    }
}
