//! Built-in tools: `append_note` (a real side effect, exactly once) and
//! `echo_args` (pure, for tests).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentsessions_proto::v1::{Part, TextPart, ToolCall, ToolResult, part};
use pbjson_types::value::Kind;

use super::{Tool, ToolContext, ToolError};
use crate::model::BoxFuture;

/// Name of the note-appending tool.
pub const APPEND_NOTE: &str = "append_note";
/// Name of the argument-echoing tool.
pub const ECHO_ARGS: &str = "echo_args";

/// Longest session id used as a file name.
const MAX_SESSION_LEN: usize = 128;

/// Returns its arguments as its output. No side effect.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoArgs;

impl Tool for EchoArgs {
    fn run<'a>(
        &'a self,
        _cx: ToolContext<'a>,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        Box::pin(std::future::ready(Ok(ToolResult {
            id: call.id.clone(),
            output: Some(call.args.clone().unwrap_or_default()),
            ..ToolResult::default()
        })))
    }
}

/// Appends `args.text` as one line to `<dir>/<session>.notes`.
///
/// Each line is `<key>\t<text>\n` with backslash, tab, CR and LF escaped, so
/// a line always holds exactly one note and its idempotency key can be found
/// again. Exactly-once across crashes rests on the executor's ledger
/// ("started" is durable before the write, "done" after) plus one check here:
/// on a re-drive the file is searched for the key's line before appending.
/// A crash mid-write can leave an unterminated tail; that tail is not a
/// finished note, so it is cut off before anything is appended or searched.
#[derive(Debug, Clone)]
pub struct AppendNote {
    dir: PathBuf,
    /// One writer at a time: two keys of a session share a file, and the
    /// tail repair must not race an append.
    write: Arc<Mutex<()>>,
}

impl AppendNote {
    /// Notes go under `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            write: Arc::default(),
        }
    }

    /// The notes file of `session`.
    pub fn path(&self, session: &str) -> Result<PathBuf, ToolError> {
        if !session_is_file_name(session) {
            return Err(ToolError::InvalidSession);
        }
        Ok(self.dir.join(format!("{session}.notes")))
    }

    /// The line written for `key` and `text`, newline included.
    pub fn line(key: &str, text: &str) -> String {
        format!("{}\t{}\n", escape(key), escape(text))
    }
}

impl Tool for AppendNote {
    fn run<'a>(
        &'a self,
        cx: ToolContext<'a>,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        Box::pin(async move {
            let text = note_text(call)?;
            let path = self.path(cx.session)?;
            let tag = format!("{}\t", escape(cx.idempotency_key));
            let line = Self::line(cx.idempotency_key, text);
            let dir = self.dir.clone();
            let write = Arc::clone(&self.write);
            let redrive = cx.redrive;
            let io = move || {
                let _one = write.lock().unwrap_or_else(|e| e.into_inner());
                append_once(&dir, &path, &tag, &line, redrive)
            };
            // madsim runs blocking closures inline (and marks the call
            // deprecated to say so); the note file is real I/O either way.
            #[cfg_attr(madsim, allow(deprecated))]
            let written = tokio::task::spawn_blocking(io);
            written
                .await
                .map_err(|_| io_err(std::io::ErrorKind::Other))?
                .map_err(|e| io_err(e.kind()))?;
            Ok(ToolResult {
                id: call.id.clone(),
                output: Some(
                    [("appended".to_owned(), pbjson_types::Value::from(true))]
                        .into_iter()
                        .collect(),
                ),
                content: vec![Part {
                    part: Some(part::Part::Text(TextPart {
                        text: "note appended".to_owned(),
                    })),
                }],
                ..ToolResult::default()
            })
        })
    }
}

fn io_err(kind: std::io::ErrorKind) -> ToolError {
    ToolError::Io {
        tool: APPEND_NOTE,
        kind,
    }
}

/// `args.text`, which must be a string.
fn note_text(call: &ToolCall) -> Result<&str, ToolError> {
    let invalid = |reason| ToolError::InvalidArgs {
        tool: APPEND_NOTE,
        reason,
    };
    let value = call
        .args
        .as_ref()
        .and_then(|a| a.fields.get("text"))
        .ok_or_else(|| invalid("missing text"))?;
    match &value.kind {
        Some(Kind::StringValue(s)) => Ok(s),
        _ => Err(invalid("text must be a string")),
    }
}

/// Session ids are host-minted, but they still name a file here, so only a
/// conservative alphabet passes (no separators, no leading dot).
fn session_is_file_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SESSION_LEN
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn append_once(
    dir: &Path,
    path: &Path,
    tag: &str,
    line: &str,
    redrive: bool,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    if !existed {
        sync_dir(dir)?;
    }
    cut_torn_tail(&mut file)?;
    if redrive && has_tagged_line(&mut file, tag)? {
        return Ok(());
    }
    file.write_all(line.as_bytes())?;
    file.sync_data()
}

/// Truncates an unterminated last line (a write cut short by a crash).
fn cut_torn_tail(file: &mut File) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    let mut all = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut all)?;
    let keep = all.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    file.set_len(keep as u64)?;
    file.sync_data()
}

/// Whether a complete line starts with `tag` (the escaped key and a tab).
fn has_tagged_line(file: &mut File, tag: &str) -> std::io::Result<bool> {
    let mut all = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut all)?;
    Ok(all
        .split(|&b| b == b'\n')
        .any(|l| l.starts_with(tag.as_bytes())))
}

/// Makes a newly created file's directory entry durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}
