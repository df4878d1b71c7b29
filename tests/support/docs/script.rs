//! A block as commands: each command with the expected output written
//! under it, the rest of the block kept as written, and what a block may
//! not do here (run cargo, start a daemon on a default port). Invariant:
//! the commands are the block's own text, unchanged; expected output only
//! ever attaches to the command right above it.

use std::collections::BTreeSet;

use super::blocks::{Block, Marker};

/// One command of a block and what it must print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cmd {
    /// The document line it starts on.
    pub(crate) line: usize,
    /// The command, continuation and here-document lines included.
    pub(crate) text: String,
    pub(crate) expect: Vec<String>,
    pub(crate) exit: i32,
}

impl Cmd {
    /// Does it leave a job running (`… &`)?
    pub(super) fn background(&self) -> bool {
        let t = self.text.trim_end();
        t.ends_with('&') && !t.ends_with("&&")
    }
}

/// A block, line by line: commands, and everything else kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Verbatim(String),
    Cmd(Cmd),
}

/// The here-document delimiters a command line opens: (word, `<<-`).
fn heredocs(line: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("<<") {
        let after = &rest[at + 2..];
        if let Some(here_string) = after.strip_prefix('<') {
            rest = here_string;
            continue;
        }
        let (dash, after) = match after.strip_prefix('-') {
            Some(a) => (true, a),
            None => (false, after),
        };
        let after = after.trim_start();
        let word: String = after
            .trim_start_matches(['\'', '"'])
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !word.is_empty() {
            out.push((word, dash));
        }
        rest = after;
    }
    out
}

/// Adds `line` to the last command's expectations (`# exit N` sets its
/// exit code); false when there is no command to attach it to.
fn attach(pieces: &mut [Piece], line: &str) -> bool {
    let Some(Piece::Cmd(cmd)) = pieces.last_mut() else {
        return false;
    };
    match line.strip_prefix("exit ").map(|n| n.trim().parse()) {
        Some(Ok(code)) => cmd.exit = code,
        _ => cmd.expect.push(line.to_owned()),
    }
    true
}

/// An `sh`/`bash`/`shell` block: `# text` directly under a command is its
/// expected output (unless `comments`); the rest is kept as written.
pub(crate) fn sh_pieces(body: &[(usize, String)], comments: bool) -> Vec<Piece> {
    let mut pieces: Vec<Piece> = Vec::new();
    // May a `# ` line attach to the last command (no blank line between)?
    let mut attached = false;
    let mut i = 0;
    while i < body.len() {
        let (no, line) = (&body[i].0, body[i].1.as_str());
        let trimmed = line.trim();
        if trimmed.is_empty() {
            pieces.push(Piece::Verbatim(line.to_owned()));
            attached = false;
            i += 1;
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            if comments || !(attached && attach(&mut pieces, comment.trim())) {
                pieces.push(Piece::Verbatim(line.to_owned()));
            }
            i += 1;
            continue;
        }
        let mut text = String::new();
        let mut opened = Vec::new();
        loop {
            let l = body[i].1.as_str();
            text.push_str(l);
            text.push('\n');
            opened.extend(heredocs(l));
            i += 1;
            if !(l.trim_end().ends_with('\\') && i < body.len()) {
                break;
            }
        }
        for (word, dash) in opened {
            while i < body.len() {
                let l = body[i].1.as_str();
                text.push_str(l);
                text.push('\n');
                i += 1;
                let end = if dash { l.trim_start_matches('\t') } else { l };
                if end == word {
                    break;
                }
            }
        }
        pieces.push(Piece::Cmd(Cmd {
            line: *no,
            text,
            expect: Vec::new(),
            exit: 0,
        }));
        attached = true;
    }
    pieces
}

/// A `console` block: `$ ` lines are commands (`> ` or a trailing `\`
/// continues one); the lines under a command are its output.
pub(crate) fn console_pieces(body: &[(usize, String)]) -> Result<Vec<Piece>, String> {
    let mut pieces: Vec<Piece> = Vec::new();
    let mut continues = false;
    for (no, line) in body {
        let trimmed = line.trim_end();
        if trimmed.trim().is_empty() {
            continues = false;
            continue;
        }
        if continues && let Some(Piece::Cmd(cmd)) = pieces.last_mut() {
            let more = trimmed.strip_prefix("> ").unwrap_or(trimmed);
            cmd.text.push_str(more);
            cmd.text.push('\n');
            continues = more.ends_with('\\');
            continue;
        }
        if let Some(command) = trimmed.strip_prefix("$ ") {
            pieces.push(Piece::Cmd(Cmd {
                line: *no,
                text: format!("{command}\n"),
                expect: Vec::new(),
                exit: 0,
            }));
            continues = command.ends_with('\\');
        } else if !attach(&mut pieces, trimmed.trim()) {
            return Err(format!("line {no}: output before any `$ ` command"));
        }
    }
    Ok(pieces)
}

pub(crate) fn pieces(b: &Block, body: &[(usize, String)]) -> Result<Vec<Piece>, String> {
    if b.is_console() {
        console_pieces(body)
    } else {
        Ok(sh_pieces(body, b.markers.contains(&Marker::Comments)))
    }
}

/// The commands among `pieces`.
pub(crate) fn commands(pieces: &[Piece]) -> Vec<&Cmd> {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Cmd(c) => Some(c),
            Piece::Verbatim(_) => None,
        })
        .collect()
}

/// The words of a command, split where the shell would split commands.
pub(super) fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || "|&;()$`\"'<>=".contains(c))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The program a word runs, without its directory.
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Prerequisites read off the commands.
pub(crate) fn detected_needs(cmds: &[&Cmd]) -> BTreeSet<String> {
    let mut needs = BTreeSet::new();
    for cmd in cmds {
        if cmd.text.contains("postgres://") || cmd.text.contains("postgresql://") {
            needs.insert("postgres".to_owned());
        }
        for w in words(&cmd.text) {
            let need = match program(w) {
                "openssl" => "openssl",
                "node" | "npm" | "npx" => "node",
                "python" | "python3" | "pip" | "pip3" | "venv.sh" | "pyvenv" => "python",
                "curl" => "curl",
                "psql" | "pg_ctl" | "initdb" => "postgres",
                _ => continue,
            };
            needs.insert(need.to_owned());
        }
    }
    needs
}

/// What a block may not do here, whatever the document says.
pub(crate) fn refusals(cmds: &[&Cmd]) -> Vec<String> {
    let mut out = Vec::new();
    for cmd in cmds {
        let ws = words(&cmd.text);
        let first_line = cmd.text.lines().next().unwrap_or_default().trim();
        if ws.iter().any(|w| program(w) == "cargo") {
            out.push(format!(
                "line {}: `{first_line}` runs cargo; mark the block \
                 `<!-- docs-test: skip: runs a test suite; CI runs it -->` (or say what it builds)",
                cmd.line
            ));
        }
        let has = |flags: &[&str]| ws.iter().any(|w| flags.contains(w));
        let info = has(&["--version", "-V", "--help", "-h", "--print-config"]);
        if ws.iter().any(|w| program(w) == "agentsessionsd")
            && !info
            && !has(&["--addr", "--config"])
        {
            out.push(format!(
                "line {}: `{first_line}` starts a daemon on the default 127.0.0.1:8080: name \
                 --addr, so the test can move it to a free port",
                cmd.line
            ));
        }
        if ws.iter().any(|w| program(w) == "harnessnode")
            && !info
            && !(has(&["--addr"]) && has(&["--readyz"]))
        {
            out.push(format!(
                "line {}: `{first_line}` starts harnessnode: name --addr and --readyz (its \
                 defaults are 127.0.0.1:9000 and :9001), so the test can move them to free ports",
                cmd.line
            ));
        }
    }
    out
}
