//! The quickstart, run as written.
//!
//! The `sh` blocks of README.md's "Quickstart" section and of
//! docs/quickstart.md are parsed and executed in order in a temp dir, so
//! the documents cannot drift from the binary. Inside a block:
//! - `agentctl …` runs the built binary (embedded mode, so the journal lives
//!   in the temp dir); `cat FILE` reads a file; `VAR=$(command)` captures
//!   stdout, optionally through `| cut -d' ' -fN`; `$VAR` expands;
//!   `cargo …` and `export …` are setup lines and are skipped.
//! - `# text` lines under a command are lines its output (stdout then
//!   stderr) must contain, in order, with runs of blanks compared as one
//!   and `…` matching any run of non-blank characters (the rest of the
//!   line when it ends the pattern); `# exit N` is the
//!   expected exit code (0 otherwise).
//!
//! Beside the documents: `--json` output parses, a tampered journal fails
//! `verify`, NOT_FOUND has its exit code, and `--server` mode works against
//! a running `agentsessionsd`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

#[path = "support/cli.rs"]
mod cli;
use cli::{DAEMON, Daemon, agentctl, stderr, stdout};
#[path = "support/expect.rs"]
mod expect;
use expect::{glob, missing};

// ---- the document runner -------------------------------------------------

/// One command of a block and what it must print.
#[derive(Debug)]
struct Step {
    line: String,
    expect: Vec<String>,
    exit: i32,
}

/// The bodies of the ```sh blocks in `markdown`.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match &mut current {
            None if fence == "```sh" => current = Some(String::new()),
            Some(body) if fence.starts_with("```") => {
                blocks.push(std::mem::take(body));
                current = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "unterminated ```sh block");
    blocks
}

/// The text of the `## {title}` section, up to the next `## ` heading.
fn section<'a>(markdown: &'a str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let start = markdown
        .find(&heading)
        .unwrap_or_else(|| panic!("no `## {title}` section"));
    let rest = &markdown[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

fn steps(block: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for line in block.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim();
            let step = out
                .last_mut()
                .unwrap_or_else(|| panic!("output line {line:?} before any command"));
            match comment.strip_prefix("exit ") {
                Some(code) => step.exit = code.parse().expect("# exit N"),
                None => step.expect.push(comment.to_owned()),
            }
            continue;
        }
        out.push(Step {
            line: line.to_owned(),
            expect: Vec::new(),
            exit: 0,
        });
    }
    out
}

/// Shell-like words: single and double quotes, `$VAR` expansion outside
/// single quotes.
fn words(cmd: &str, vars: &HashMap<String, String>) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = cmd.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') => {
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                let value = vars
                    .get(&name)
                    .unwrap_or_else(|| panic!("${name} is not set in {cmd:?}"));
                word.get_or_insert_with(String::new).push_str(value);
            }
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(quote.is_none(), "unbalanced quote in {cmd:?}");
    words.extend(word);
    words
}

/// Runs one document's blocks in a fresh directory.
fn run_document(name: &str, blocks: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut ran = 0;
    for step in blocks.iter().flat_map(|b| steps(b)) {
        let line = step.line.trim();
        if line.starts_with("cargo ") || line.starts_with("export ") {
            continue;
        }
        // VAR=$(command [| cut ...])
        let (capture, command) = match line.split_once("=$(") {
            Some((var, rest)) if var.chars().all(|c| c.is_ascii_uppercase() || c == '_') => {
                let inner = rest
                    .strip_suffix(')')
                    .expect("VAR=$(...) closes on the line");
                (Some(var.to_owned()), inner)
            }
            _ => (None, line),
        };
        let (command, cut) = match command.split_once(" | ") {
            Some((c, pipe)) => (c, Some(pipe)),
            None => (command, None),
        };
        let argv = words(command, &vars);
        let (code, out, err) = match argv.first().map(String::as_str) {
            Some("agentctl") => {
                let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
                let o = agentctl(dir.path(), &args);
                (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
            }
            Some("cat") => {
                let text = std::fs::read_to_string(dir.path().join(&argv[1]))
                    .unwrap_or_else(|e| panic!("{name}: {line}: {e}"));
                (0, text, String::new())
            }
            _ => panic!("{name}: the quickstart runner does not know {line:?}"),
        };
        let context = format!("{name}: `{line}`\n--- stdout\n{out}--- stderr\n{err}");
        assert_eq!(code, step.exit, "exit code of {context}");
        if let Some(want) = missing(&step.expect, out.lines().chain(err.lines())) {
            panic!("{context}\nmissing (in order) the line {want:?}");
        }
        if let Some(var) = capture {
            let value = match cut {
                None => out.trim().to_owned(),
                Some(pipe) => {
                    let field: usize = pipe
                        .strip_prefix("cut -d' ' -f")
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("unsupported pipe {pipe:?}"));
                    let first = out.lines().next().unwrap_or_default();
                    first
                        .split(' ')
                        .nth(field - 1)
                        .unwrap_or_default()
                        .to_owned()
                }
            };
            assert!(!value.is_empty(), "{context}\ncaptured nothing into {var}");
            vars.insert(var, value);
        }
        ran += 1;
    }
    assert!(
        ran >= 5,
        "{name}: only {ran} commands ran; is the block syntax right?"
    );
}

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_readme_quickstart_runs_as_written() {
    let readme = repo_file("README.md");
    let blocks = sh_blocks(section(&readme, "Quickstart"));
    assert!(!blocks.is_empty(), "README Quickstart has no ```sh block");
    run_document("README.md", &blocks);
}

#[test]
fn docs_quickstart_runs_as_written() {
    let doc = repo_file("docs/quickstart.md");
    run_document("docs/quickstart.md", &sh_blocks(&doc));
}

#[test]
fn the_runner_matches_ellipses_and_expands_words() {
    assert!(glob(
        "session … chain verified (3 records)",
        "session sess-ab chain verified (3 records)"
    ));
    assert!(glob("approval/…/c1 note", "approval/abc/c1 note"));
    assert!(!glob("seq=1 EVENT_END", "seq=1 EVENT_ENDX"));
    assert!(glob(
        "agentctl: no pending: …",
        "agentctl: no pending: run this, or that"
    ));
    let vars = HashMap::from([("S".to_owned(), "sess-1".to_owned())]);
    assert_eq!(
        words(r#"agentctl x --session $S --input "a b" 'c $S'"#, &vars),
        [
            "agentctl",
            "x",
            "--session",
            "sess-1",
            "--input",
            "a b",
            "c $S"
        ]
    );
}

// ---- beyond the documents -------------------------------------------------

/// A session with one echo turn in `dir`'s journal.
fn one_turn(dir: &Path) -> String {
    let o = agentctl(dir, &["exec", "--input", "hello"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let first = out.lines().next().unwrap_or_default();
    first
        .strip_prefix("session ")
        .unwrap_or_else(|| panic!("exec prints `session <uid>` first: {out}"))
        .to_owned()
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn json_output_is_proto3_json_with_proto_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exec = json_lines(&agentctl(d, &["exec", "--input", "hi", "--json"]));
    assert!(
        exec[0]["session"]["metadata"]["uid"].is_string(),
        "{:?}",
        exec[0]
    );
    let sid = exec[0]["session"]["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        exec.iter()
            .any(|u| u["record"]["event"]["kind"] == "EVENT_OUTPUT")
    );

    let get = json_lines(&agentctl(d, &["get", "--session", &sid, "--json"]));
    assert_eq!(get.len(), 1);
    assert_eq!(
        get[0]["last_seq"], "5",
        "int64 as a string, proto field name"
    );
    assert_eq!(get[0]["compute_state"], "COMPUTE_LIVE");

    let replay = json_lines(&agentctl(d, &["replay", "--session", &sid, "--json"]));
    assert_eq!(replay.len(), 5, "one LogRecord per line");
    assert_eq!(replay[1]["prev_hash"], replay[0]["content_hash"]);
    assert_eq!(replay[4]["seq"], "5");

    for args in [
        &["list", "--json"][..],
        &["verify", "--session", &sid, "--json"],
        &[
            "fork",
            "--session",
            &sid,
            "--at",
            "2",
            "--count",
            "2",
            "--json",
        ],
        &["suspend", "--session", &sid, "--json"],
        &["resume", "--session", &sid, "--json"],
        &["harness", "list", "--json"],
        &["harness", "get", "--name", "echo", "--json"],
    ] {
        let v = json_lines(&agentctl(d, args));
        assert_eq!(v.len(), 1, "{args:?}");
        assert!(v[0].is_object(), "{args:?}: {:?}", v[0]);
    }
    let verify = json_lines(&agentctl(d, &["verify", "--session", &sid, "--json"]));
    assert_eq!(verify[0]["verified"], true);
    let harnesses = json_lines(&agentctl(d, &["harness", "list", "--json"]));
    let names: Vec<&str> = harnesses[0]["harnesses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"approval"),
        "{names:?}"
    );
}

#[test]
fn verify_fails_on_a_tampered_journal_and_names_the_seq() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = one_turn(d);
    let ok = agentctl(d, &["verify", "--session", &sid]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(
        stdout(&ok).trim(),
        format!("session {sid} chain verified (5 records)")
    );

    // The daemon is gone once agentctl exits, so the file is ours to edit.
    let db = rusqlite::Connection::open(d.join("agentsessions.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE events SET hash = '0000' || substr(hash, 5) WHERE session = ?1 AND seq = 3",
            [&sid],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    let bad = agentctl(d, &["verify", "--session", &sid]);
    assert_eq!(bad.status.code(), Some(3), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("content_hash mismatch at seq 3"),
        "{}",
        stderr(&bad)
    );
    let bad = agentctl(d, &["verify", "--session", &sid, "--json"]);
    assert_eq!(bad.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_str(stdout(&bad).trim()).unwrap();
    assert_eq!(v["verified"], false);
    assert_eq!(v["seq"], 3);

    // A missing record in the middle is a gap naming the missing seq.
    let dir2 = tempfile::tempdir().unwrap();
    let sid2 = one_turn(dir2.path());
    let db = rusqlite::Connection::open(dir2.path().join("agentsessions.db")).unwrap();
    db.execute("DELETE FROM events WHERE session = ?1 AND seq = 2", [&sid2])
        .unwrap();
    drop(db);
    let gap = agentctl(dir2.path(), &["verify", "--session", &sid2]);
    assert_eq!(gap.status.code(), Some(3));
    assert!(
        stderr(&gap).contains("seq 2 is missing"),
        "{}",
        stderr(&gap)
    );
}

#[test]
fn grpc_statuses_and_usage_errors_map_to_documented_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = "sess-000000000000000000000000";
    for args in [
        &["get", "--session", missing][..],
        &["replay", "--session", missing],
        &["verify", "--session", missing],
        &["harness", "get", "--name", "nope"],
    ] {
        let o = agentctl(d, args);
        assert_eq!(o.status.code(), Some(15), "{args:?}: NOT_FOUND is 15");
        assert!(stderr(&o).contains("NOT_FOUND"), "{}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
    // Usage errors exit 2, help and version 0.
    assert_eq!(agentctl(d, &[]).status.code(), Some(2));
    assert_eq!(agentctl(d, &["frobnicate"]).status.code(), Some(2));
    assert_eq!(agentctl(d, &["get"]).status.code(), Some(2));
    assert_eq!(
        agentctl(d, &["approve", "--session", "s", "--execution", "e"])
            .status
            .code(),
        Some(2),
        "the explicit tuple is all or nothing"
    );
    assert_eq!(
        agentctl(
            d,
            &["fork", "--session", "s", "--count", "2", "--names", "a"]
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(agentctl(d, &["approve", "-h"]).status.code(), Some(0));
    // A bad fork count is the server's INVALID_ARGUMENT (13).
    let sid = one_turn(d);
    let o = agentctl(d, &["fork", "--session", &sid, "--count", "129"]);
    assert_eq!(o.status.code(), Some(13), "{}", stderr(&o));
    // Nobody listening is UNAVAILABLE (24).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let o = agentctl(d, &["--server", &port.to_string(), "list"]);
    assert_eq!(o.status.code(), Some(24), "{}", stderr(&o));
    // Each cause once: transport wrappers repeat their source's text.
    let err = stderr(&o);
    let causes: Vec<&str> = err.trim().split(": ").collect();
    for (i, c) in causes.iter().enumerate() {
        assert!(!causes[..i].contains(c), "{c:?} repeated in {err}");
    }
    // A spec file that is not there is a local failure (1).
    let o = agentctl(
        d,
        &["harness", "register", "--name", "x", "--spec", "nope.json"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn both_binaries_print_the_crate_version() {
    let want = format!("agentctl {}", env!("CARGO_PKG_VERSION"));
    let dir = tempfile::tempdir().unwrap();
    for args in [&["version"][..], &["--version"]] {
        let o = agentctl(dir.path(), args);
        assert!(o.status.success());
        assert_eq!(stdout(&o).trim(), want);
    }
    let o = Command::new(DAEMON).arg("--version").output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("agentsessionsd {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn server_mode_talks_to_a_running_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(&dir.path().join("server.db"));
    let (addr, registry) = (daemon.sessions.clone(), daemon.registry.clone());
    let d = dir.path();

    let o = agentctl(d, &["--server", &addr, "exec", "--input", "remote"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.contains("EVENT_OUTPUT  assistant: echo:remote"),
        "{out}"
    );
    let sid = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("session ")
        .unwrap();
    let o = agentctl(d, &["verify", "--server", &addr, "--session", sid]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = agentctl(d, &["harness", "list", "--registry", &registry]);
    assert!(stdout(&o).contains("echo\tstate=ACTIVE"), "{}", stdout(&o));
    // No journal was opened here: embedded mode never ran.
    assert!(!d.join("agentsessions.db").exists());

    drop(daemon);
}
