//! Every shell block of README.md and docs/*.md, run as written (#41).
//!
//! A fenced block tagged `sh`, `bash`, `shell` or `console` either runs
//! here or says, in an HTML comment right above it (invisible once
//! rendered), why it does not:
//!
//! - `<!-- docs-test: skip: REASON -->`: it cannot run here (it runs cargo
//!   or a test suite, needs a production host, …); the run prints
//!   `SKIPPED <block>: REASON`.
//! - `<!-- docs-test: illustrative -->` (or `illustrative: REASON`): a
//!   transcript or a sketch, not meant to be pasted.
//! - `<!-- docs-test: quickstart.rs -->`: run by tests/quickstart.rs. The
//!   blocks that test runs (```sh in README's Quickstart section and in
//!   docs/quickstart.md) are recognised without the marker; the marker on
//!   any other block is an error.
//!
//! A block with none of these runs, so a new block cannot be skipped
//! silently; a `docs-test:` comment that is not understood, or that is
//! followed by no shell block, is an error. A block that runs may also
//! carry:
//!
//! - `<!-- docs-test: needs: openssl, python -->`: prerequisites besides
//!   the ones read off its commands (`openssl`, `node`, `python`, `pip` or
//!   the venv, `curl`, `psql` or a `postgres://` URL).
//! - `<!-- docs-test: in-checkout -->`: it uses the checkout's files
//!   (`conformance/…`, `proto/…`): its directory links the repository's
//!   top-level entries (`target/` is the real one, so the test venv is
//!   reused).
//! - `<!-- docs-test: continues -->`: it runs in the same shell as the
//!   block before it (directory, variables, background daemons).
//! - `<!-- docs-test: comments -->`: its `# ` lines are comments on the
//!   commands below them, not expected output (see below).
//!
//! Running: the block is one `bash -euo pipefail` script in a fresh
//! directory, in a process group of its own, with `PATH` starting with the
//! freshly built `agentsessionsd`, `agentctl` and `harnessnode`, then the
//! test venv's `bin` (for `python`) when the block needs Python, and
//! `HOME`, the XDG directories and `TMPDIR` inside the temp directory.
//! Every loopback port the block names (`127.0.0.1:8080`, `localhost:…`,
//! `0.0.0.0:…`) is moved to a free one, the same everywhere in the block
//! (its expected output and bare uses of the number included), so blocks
//! run beside each other and beside whatever already listens on 8080; a
//! daemon the block starts must therefore name its `--addr` (and
//! harnessnode its `--readyz`). When the block is done every process of
//! its group gets SIGTERM (and SIGKILL if it lingers), so a daemon it left
//! running in the background (`agentsessionsd … &`, followed by a
//! wait-until-ready line) is stopped. A block has 45 s.
//!
//! Expected output follows tests/quickstart.rs: `# text` lines directly
//! under a command (no blank line between) are lines its output (stdout,
//! then stderr) must contain in order, runs of blanks compared as one and
//! `…` standing for a run of non-blank characters (the rest of the line
//! when it ends the pattern); `# exit N` is its expected exit code (0
//! otherwise). A comment after a blank line is just a comment. In a
//! `console` block, `$ ` lines are commands and the lines under them their
//! output. Lines of a background command may arrive late: they are waited
//! for (5 s) before the block's processes are stopped. A block without
//! expected output must exit 0.
//!
//! A block whose prerequisite is absent prints `SKIPPED <block>: needs …`
//! and passes, except with `CI=true`, where that is a failure. Blocks that
//! run cargo are refused: mark them skipped (a test suite that CI runs, a
//! build), so this test stays well under two minutes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

#[path = "support/docs/mod.rs"]
mod docs;
#[path = "support/expect.rs"]
mod expect;

use docs::blocks::{Block, Marker, Plan, marker, plan, shell_blocks};
use docs::ports::{move_ports, ports_in};
use docs::run::{Outcome, Unit, in_ci, run_unit};
use docs::script::{
    Cmd, Piece, commands, console_pieces, detected_needs, pieces, refusals, sh_pieces,
};
use docs::{REPO, WORKERS, documents, say};
use expect::missing;

#[test]
fn every_shell_block_of_the_docs_runs_or_says_why_not() {
    let mut errors: Vec<String> = Vec::new();
    // (document, block) → (name, disposition), in reading order.
    let mut table: BTreeMap<(usize, usize), (String, String)> = BTreeMap::new();
    let mut units: Vec<((usize, usize), Unit)> = Vec::new();
    for (doc_no, file) in documents().into_iter().enumerate() {
        let text = std::fs::read_to_string(Path::new(REPO).join(&file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let (blocks, errs) = shell_blocks(&file, &text);
        errors.extend(errs);
        for b in blocks {
            let key = (doc_no, b.index);
            let mut note = |what: String| table.insert(key, (b.name(), what));
            let (needs, in_checkout, continues) = match plan(&b) {
                Err(e) => {
                    errors.push(format!("{}: {e}", b.name()));
                    continue;
                }
                Ok(Plan::Skip(reason)) => {
                    say(&format!("SKIPPED {}: {reason}", b.name()));
                    note(format!("skipped: {reason}"));
                    continue;
                }
                Ok(Plan::Illustrative(reason)) if reason.is_empty() => {
                    note("illustrative".into());
                    continue;
                }
                Ok(Plan::Illustrative(reason)) => {
                    note(format!("illustrative: {reason}"));
                    continue;
                }
                Ok(Plan::QuickstartRs) => {
                    note("run by tests/quickstart.rs".into());
                    continue;
                }
                Ok(Plan::Run {
                    needs,
                    in_checkout,
                    continues,
                }) => (needs, in_checkout, continues),
            };
            let ps = match pieces(&b, &b.body) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(format!("{}: {e}", b.name()));
                    continue;
                }
            };
            let cmds = commands(&ps);
            for r in refusals(&cmds) {
                errors.push(format!("{}: {r}", b.name()));
            }
            let mut all_needs = detected_needs(&cmds);
            all_needs.extend(needs);
            let previous = units.last_mut().map(|(_, u)| u).filter(|u| {
                u.blocks
                    .last()
                    .is_some_and(|l| l.file == b.file && l.index + 1 == b.index)
            });
            match (continues, previous) {
                (true, Some(u)) => {
                    u.needs.extend(all_needs);
                    u.in_checkout |= in_checkout;
                    u.blocks.push(b);
                }
                (true, None) => errors.push(format!(
                    "{}: marked continues, but the shell block before it does not run",
                    b.name()
                )),
                (false, _) => units.push((
                    key,
                    Unit {
                        blocks: vec![b],
                        needs: all_needs,
                        in_checkout,
                    },
                )),
            }
        }
    }
    assert!(
        errors.is_empty(),
        "the docs' shell blocks are not all accounted for:\n{}",
        errors.join("\n")
    );

    // Run the units, two at a time.
    let queue: Mutex<VecDeque<usize>> = Mutex::new((0..units.len()).collect());
    let outcomes: Mutex<HashMap<usize, Outcome>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let Some(i) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let outcome = run_unit(&units[i].1);
                    outcomes.lock().unwrap().insert(i, outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    let mut failures = Vec::new();
    for (i, (key, unit)) in units.iter().enumerate() {
        let name = unit.name();
        let what = match outcomes.remove(&i).expect("every unit ran") {
            Outcome::Passed(t) => format!("ran ({:.1} s)", t.as_secs_f64()),
            Outcome::Skipped(why) if in_ci() => {
                failures.push(format!(
                    "{name}: {why} (CI=true: a prerequisite may not be absent)"
                ));
                format!("FAILED: {why}")
            }
            Outcome::Skipped(why) => {
                say(&format!("SKIPPED {name}: {why}"));
                format!("SKIPPED: {why}")
            }
            Outcome::Failed(why) => {
                failures.push(format!("{name}: {why}"));
                "FAILED".into()
            }
        };
        table.insert(*key, (name, what));
    }
    eprintln!("docs-test: every shell block:");
    for (name, what) in table.values() {
        eprintln!("  {name}: {what}");
    }
    assert!(
        failures.is_empty(),
        "{} docs block(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn quickstart_rs_still_runs_what_we_think() {
    let source = std::fs::read_to_string(Path::new(REPO).join("tests/quickstart.rs")).unwrap();
    for selection in [
        "None if fence == \"```sh\" =>",
        "sh_blocks(section(&readme, \"Quickstart\"))",
        "repo_file(\"docs/quickstart.md\")",
    ] {
        assert!(
            source.contains(selection),
            "tests/quickstart.rs no longer has {selection:?}: update run_by_quickstart_rs, \
             which leaves the blocks it names to that test"
        );
    }
    let docs = documents();
    for doc in [
        "README.md",
        "docs/quickstart.md",
        "docs/security.md",
        "docs/console.md",
        "docs/observability.md",
        "docs/harness-authoring.md",
        "docs/lifecycle.md",
        "docs/journal.md",
        "docs/architecture.md",
        "docs/fuzzing.md",
        "docs/simulation.md",
    ] {
        assert!(docs.iter().any(|d| d == doc), "{doc} is among {docs:?}");
    }
}

// ---- the runner's own parts -------------------------------------------------

fn body(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

#[test]
fn markers_are_read_and_typos_refused() {
    assert_eq!(
        marker("<!-- docs-test: skip: runs a test suite; CI runs it -->"),
        Some(Ok(Marker::Skip("runs a test suite; CI runs it".into())))
    );
    assert_eq!(
        marker("<!-- docs-test: needs: openssl, python -->"),
        Some(Ok(Marker::Needs(vec!["openssl".into(), "python".into()])))
    );
    assert_eq!(
        marker("<!-- docs-test: illustrative -->"),
        Some(Ok(Marker::Illustrative(String::new())))
    );
    assert_eq!(marker("<!-- verbatim: x.py -->"), None);
    assert!(matches!(marker("<!-- docs-test: skip -->"), Some(Err(_))));
    assert!(matches!(
        marker("<!-- docs-test: skipp: x -->"),
        Some(Err(_))
    ));
    assert!(matches!(
        marker("<!-- docs-test: needs: java -->"),
        Some(Err(_))
    ));
}

#[test]
fn blocks_carry_their_heading_markers_and_quickstart_rule() {
    let doc = "# T\n\n## Quickstart\n\n```sh\nagentctl list\n```\n\n## Other\n\n\
               <!-- docs-test: skip: needs a key -->\n\n```bash\nexport X=1\n```\n\n\
               ```console\n$ agentctl list\n```\n\n```python\nx\n```\n";
    let (blocks, errors) = shell_blocks("README.md", doc);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(blocks.len(), 3);
    assert_eq!(plan(&blocks[0]), Ok(Plan::QuickstartRs));
    assert_eq!(blocks[1].name(), "README.md#2 \"Other\" (line 13)");
    assert_eq!(plan(&blocks[1]), Ok(Plan::Skip("needs a key".into())));
    assert!(matches!(plan(&blocks[2]), Ok(Plan::Run { .. })));

    let (_, errors) = shell_blocks("x.md", "<!-- docs-test: skip: x -->\ntext\n");
    assert_eq!(errors.len(), 1, "a marker must sit right above its block");
    let (_, errors) = shell_blocks("x.md", "```\ncargo test\n```\n");
    assert_eq!(errors.len(), 1, "commands in an untagged fence");
    let (blocks, _) = shell_blocks(
        "docs/x.md",
        "<!-- docs-test: quickstart.rs -->\n```sh\nls\n```\n",
    );
    assert!(plan(&blocks[0]).is_err(), "not a block quickstart.rs runs");
}

#[test]
fn expected_output_attaches_to_the_command_above_it() {
    let b = body(
        "# a comment\nX=$(agentctl create)\nagentctl get --session $X \\\n  --json\n# line one\n\
         # exit 15\n\n# another comment\ncat > f <<'EOF'\n# not output\nEOF\nls\n",
    );
    let p = sh_pieces(&b, false);
    let cmds = commands(&p);
    assert_eq!(cmds.len(), 4);
    assert_eq!(cmds[1].line, 3);
    assert_eq!(cmds[1].text, "agentctl get --session $X \\\n  --json\n");
    assert_eq!(cmds[1].expect, ["line one"]);
    assert_eq!(cmds[1].exit, 15);
    assert_eq!(cmds[2].text, "cat > f <<'EOF'\n# not output\nEOF\n");
    assert!(cmds[2].expect.is_empty());
    let p = sh_pieces(&b, true);
    let cmds = commands(&p);
    assert_eq!(cmds.len(), 4);
    assert!(
        cmds.iter().all(|c| c.expect.is_empty() && c.exit == 0),
        "a `comments` block has no expected output"
    );

    let c = console_pieces(&body("$ agentctl list \\\n> --json\nsess-…\n$ true\n")).unwrap();
    assert_eq!(
        c,
        [
            Piece::Cmd(Cmd {
                line: 1,
                text: "agentctl list \\\n--json\n".into(),
                expect: vec!["sess-…".into()],
                exit: 0
            }),
            Piece::Cmd(Cmd {
                line: 4,
                text: "true\n".into(),
                expect: vec![],
                exit: 0
            })
        ]
    );
}

#[test]
fn ports_move_together_and_nothing_else_does() {
    let text = "agentsessionsd --addr 127.0.0.1:8080 --max-in-flight 8080 &\n\
                python h.py 9000 & agentctl --server localhost:9000\n\
                # listening on 127.0.0.1:8080 version 1.8080 x18080\n";
    let ports = ports_in(text);
    assert_eq!(ports, BTreeSet::from([8080, 9000]));
    let map = BTreeMap::from([(8080, 1111), (9000, 2222)]);
    assert_eq!(
        move_ports(text, &map),
        "agentsessionsd --addr 127.0.0.1:1111 --max-in-flight 1111 &\n\
         python h.py 2222 & agentctl --server localhost:2222\n\
         # listening on 127.0.0.1:1111 version 1.8080 x18080\n"
    );
}

#[test]
fn refusals_name_cargo_and_daemons_on_default_ports() {
    let b = body(
        "cargo test -p x\nagentsessionsd --journal j.db &\nagentsessionsd --addr 127.0.0.1:1 &\n\
         agentsessionsd --version\nharnessnode --addr 127.0.0.1:2 &\n",
    );
    let p = sh_pieces(&b, false);
    let cmds = commands(&p);
    let r = refusals(&cmds);
    assert_eq!(r.len(), 3, "{r:#?}");
    assert!(r[0].contains("runs cargo"));
    assert!(r[1].contains("line 2"));
    assert!(r[2].contains("--readyz"));
    assert_eq!(
        detected_needs(&cmds),
        BTreeSet::new(),
        "nothing beyond the built binaries"
    );
    let p = sh_pieces(
        &body("openssl req -x509\ntarget/pyvenv/bin/python x.py\nX=\"$(curl -s http://x)\"\n"),
        false,
    );
    let cmds = commands(&p);
    assert_eq!(
        detected_needs(&cmds),
        BTreeSet::from(["curl".to_owned(), "openssl".to_owned(), "python".to_owned()])
    );
}

#[test]
fn expectations_match_in_order_with_ellipses() {
    let printed =
        "session sess-1\nseq=1   EVENT_EXECUTION_START\nseq=4   EVENT_OUTPUT  assistant: echo:hi\n";
    assert_eq!(
        missing(
            &[
                "seq=1 EVENT_EXECUTION_START".into(),
                "seq=4   EVENT_OUTPUT  assistant: echo:…".into()
            ],
            printed.lines()
        ),
        None
    );
    assert!(
        missing(
            &["seq=4 EVENT_OUTPUT …".into(), "seq=1 …".into()],
            printed.lines()
        )
        .is_some()
    );
}

#[test]
fn a_block_runs_in_its_own_group_and_its_daemons_are_stopped() {
    let out = tempfile::tempdir().unwrap();
    let pid_file = out.path().join("pid");
    let block = |text: &str| Unit {
        blocks: vec![Block {
            file: "t.md".into(),
            index: 1,
            line: 1,
            heading: "t".into(),
            section: String::new(),
            info: "sh".into(),
            body: body(text),
            markers: vec![],
        }],
        needs: BTreeSet::new(),
        in_checkout: false,
    };
    let passing = block(&format!(
        "sleep 300 &\necho $! > {}\ntest \"$HOME\" != ~root\necho \"a  b\" && echo oops >&2\n\
         # a b\n# oops\nfalse\n# exit 1\n( sleep 0.3; echo late ) &\n# late\n",
        pid_file.display()
    ));
    match run_unit(&passing) {
        Outcome::Passed(_) => {}
        Outcome::Failed(why) | Outcome::Skipped(why) => panic!("{why}"),
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !Path::new("/proc").join(pid.trim()).exists(),
        "the background sleep {} was stopped",
        pid.trim()
    );

    match run_unit(&block("echo hi\n# bye\n")) {
        Outcome::Failed(why) => assert!(why.contains("\"bye\""), "{why}"),
        _ => panic!("a missing line fails the block"),
    }
    match run_unit(&block("true\nfalse\ntrue\n")) {
        Outcome::Failed(why) => assert!(why.contains("exit status 1 at: false"), "{why}"),
        _ => panic!("a failing command fails the block"),
    }
}
