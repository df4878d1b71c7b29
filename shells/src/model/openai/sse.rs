//! Streamed completions: a server-sent-events line splitter and the state
//! that folds `data:` frames into a [`Completion`].
//!
//! Both are sans-io: the client feeds them body bytes as they arrive, which
//! keeps the limits (line length, accumulated size) testable without sockets.

use serde::Deserialize;
use serde_json::Value;

use super::wire::{Completion, ErrorBody, ToolCallAccumulator, WireFunction, WireUsage};
use crate::model::ModelError;

/// Splits a byte stream into lines, refusing any line longer than `max`.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// How far `buf` is known to hold no newline, so a long line being
    /// assembled is not rescanned from its start on every push.
    scanned: usize,
    max: usize,
}

/// A line exceeded the splitter's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong;

impl LineSplitter {
    /// A splitter with a line limit of `max` bytes (newline excluded).
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            scanned: 0,
            max,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line without its `\n` (or `\r\n`), if any.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineTooLong> {
        match self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(rel) => {
                let end = self.scanned + rel;
                if end > self.max {
                    return Err(LineTooLong);
                }
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.scanned = 0;
                Ok(Some(line))
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() > self.max {
                    return Err(LineTooLong);
                }
                Ok(None)
            }
        }
    }

    /// At end of input: the unterminated last line, if any.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        self.scanned = 0;
        if self.buf.is_empty() {
            return None;
        }
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Some(line)
    }
}

/// What the caller should do after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Keep reading.
    Continue,
    /// `[DONE]` was received.
    Done,
}

#[derive(Debug, Deserialize)]
struct Frame {
    #[serde(default)]
    choices: Option<Vec<DeltaChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Debug, Deserialize)]
struct DeltaChoice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Debug, Deserialize)]
struct DeltaToolCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

/// Folds a stream's frames into a completion.
#[derive(Debug)]
pub struct StreamState {
    model: String,
    max_total: usize,
    completion: Completion,
    tools: ToolCallAccumulator,
    finished: bool,
}

impl StreamState {
    /// State for a stream of `model`, bounding the accumulated text, reasoning
    /// and tool-call bytes by `max_total`.
    pub fn new(model: &str, max_total: usize) -> Self {
        Self {
            model: model.to_owned(),
            max_total,
            completion: Completion::default(),
            tools: ToolCallAccumulator::default(),
            finished: false,
        }
    }

    /// Handles one SSE line; content deltas go to `on_chunk` in order.
    pub fn line(
        &mut self,
        line: &[u8],
        on_chunk: &mut (dyn FnMut(String) + Send),
    ) -> Result<Step, ModelError> {
        // Only `data:` carries anything; blank lines, comments and the
        // event/id/retry fields are framing.
        let Some(payload) = line.strip_prefix(b"data:") else {
            return Ok(Step::Continue);
        };
        let payload = payload.trim_ascii();
        if payload == b"[DONE]" {
            return Ok(Step::Done);
        }
        if payload.is_empty() {
            return Ok(Step::Continue);
        }
        let frame: Frame = serde_json::from_slice(payload).map_err(|_| self.invalid_frame())?;
        if let Some(err) = frame.error {
            return Err(ModelError::Provider {
                model: self.model.clone(),
                detail: err.message.unwrap_or_default(),
            });
        }
        if let Some(usage) = frame.usage {
            self.completion.usage = Some(usage);
        }
        for (pos, choice) in frame.choices.unwrap_or_default().into_iter().enumerate() {
            // One completion is requested; other indexes are not ours.
            if choice.index.unwrap_or(pos as u64) != 0 {
                continue;
            }
            if choice.finish_reason.is_some_and(|r| !r.is_empty()) {
                self.finished = true;
            }
            let Some(delta) = choice.delta else { continue };
            let text = super::wire::content_text(delta.content.as_ref());
            if let Some(r) = delta.reasoning_content {
                self.completion.reasoning.push_str(&r);
            }
            for (i, tc) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                self.tools
                    .push(tc.index.unwrap_or(i as u64), tc.id, tc.function);
            }
            if !text.is_empty() {
                self.completion.content.push_str(&text);
                self.check_size()?;
                on_chunk(text);
            }
            self.check_size()?;
        }
        Ok(Step::Continue)
    }

    fn check_size(&self) -> Result<(), ModelError> {
        let total =
            self.completion.content.len() + self.completion.reasoning.len() + self.tools.byte_len();
        if total > self.max_total {
            return Err(ModelError::TooLarge {
                model: self.model.clone(),
                limit: self.max_total,
            });
        }
        Ok(())
    }

    fn invalid_frame(&self) -> ModelError {
        ModelError::InvalidFrame {
            model: self.model.clone(),
        }
    }

    /// The completion once the stream ended. Without `[DONE]` (`done` false)
    /// it is accepted only if a choice reported a finish reason; otherwise
    /// the connection was cut and the text is a fragment.
    pub fn finish(self, done: bool) -> Result<Completion, ModelError> {
        if !done && !self.finished {
            return Err(ModelError::StreamTruncated { model: self.model });
        }
        let mut completion = self.completion;
        completion.tool_calls = self.tools.finish();
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitter_handles_crlf_split_pushes_and_limit() {
        let mut s = LineSplitter::new(8);
        s.push(b"ab");
        assert_eq!(s.next_line(), Ok(None));
        s.push(b"c\r\nde\nf");
        assert_eq!(s.next_line(), Ok(Some(b"abc".to_vec())));
        assert_eq!(s.next_line(), Ok(Some(b"de".to_vec())));
        assert_eq!(s.next_line(), Ok(None));
        assert_eq!(s.finish(), Some(b"f".to_vec()));
        s.push(b"123456789");
        assert_eq!(s.next_line(), Err(LineTooLong));
    }

    #[test]
    fn non_data_lines_are_framing() {
        let mut st = StreamState::new("m", 1024);
        let mut sink = |_c: String| {};
        for l in [&b""[..], b": keepalive", b"event: x", b"id: 1", b"data:"] {
            assert_eq!(st.line(l, &mut sink), Ok(Step::Continue));
        }
        assert_eq!(st.line(b"data: [DONE]", &mut sink), Ok(Step::Done));
    }
}
