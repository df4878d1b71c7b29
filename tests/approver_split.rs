//! The role split docs/security.md recommends: writers run sessions,
//! approvers decide their gated calls and hold no writer role. Found
//! broken from outside (issue #41): `agentctl approve` committed the
//! decision and its resume was PERMISSION_DENIED, so the tool never ran.
//! Against the built `agentsessionsd --auth` and `agentctl`.

#[path = "support/cli.rs"]
mod cli;

use std::path::Path;

use cli::{Daemon, agentctl, stderr, stdout};
use sha2::{Digest, Sha256};

const ALICE: &str = "alice-writer-key-0123456789abcdef";
const ABE: &str = "abe-approver-key-0123456789abcdef";

fn start(dir: &Path) -> Daemon {
    let digest = |k: &str| hex::encode(Sha256::digest(k.as_bytes()));
    let text = format!(
        "separate_approver = true\n\n\
         [[api_key]]\nprincipal = \"alice\"\nsha256 = \"{}\"\nroles = [\"*:writer\"]\n\n\
         [[api_key]]\nprincipal = \"abe\"\nsha256 = \"{}\"\nroles = [\"*:approver\"]\n",
        digest(ALICE),
        digest(ABE)
    );
    let auth = dir.join("auth.toml");
    std::fs::write(&auth, text).unwrap();
    let auth = auth.display().to_string();
    Daemon::start_in(dir, dir.join("j.db").as_os_str(), &["--auth", &auth])
}

fn ctl(dir: &Path, server: &str, key: &str, args: &[&str]) -> std::process::Output {
    let mut argv = vec!["--server", server, "--token", key];
    argv.extend_from_slice(args);
    agentctl(dir, &argv)
}

#[test]
fn an_approver_without_writer_approves_and_the_tool_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let daemon = start(d);
    let s = &daemon.sessions;
    let created = ctl(d, s, ALICE, &["create", "--harness", "approval"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let sid = stdout(&created).trim().to_owned();
    let parked = ctl(d, s, ALICE, &["exec", "--session", &sid, "--input", "go"]);
    assert!(parked.status.success(), "{}", stderr(&parked));

    let approved = ctl(d, s, ABE, &["approve", "--session", &sid]);
    assert!(
        approved.status.success(),
        "approve and its resume: {}",
        stderr(&approved)
    );
    let log = ctl(d, s, ABE, &["--json", "replay", "--session", &sid]);
    assert!(log.status.success(), "{}", stderr(&log));
    let text = stdout(&log);
    assert!(
        text.contains("TOOL_RESULT"),
        "the approved call ran: {text}"
    );

    // The approver's authority ends with that execution: nothing is left
    // to resume, and it may not start a turn.
    let again = ctl(d, s, ABE, &["resume", "--session", &sid]);
    assert_eq!(again.status.code(), Some(17), "{}", stderr(&again));
    let turn = ctl(d, s, ABE, &["exec", "--session", &sid, "--input", "more"]);
    assert_eq!(turn.status.code(), Some(17), "{}", stderr(&turn));
}
