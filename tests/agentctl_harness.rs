//! `agentctl harness …` never falls back to a local journal when the user
//! named a server: the Sessions port does not serve HarnessRegistry, so
//! `--server` without `--registry` is refused before anything is opened.

#[path = "support/cli.rs"]
mod cli;
use cli::{Daemon, agentctl};
use std::path::Path;

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn harness_commands_with_only_a_sessions_server_fail_naming_registry_and_create_no_file() {
    let home = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(&home.path().join("server.db"));
    let cwd = tempfile::tempdir().unwrap();
    let d = cwd.path();
    for args in [
        &["harness", "list"][..],
        &["harness", "get", "--name", "echo"],
        &["harness", "retire", "--name", "echo"],
        &["harness", "register", "--name", "x", "--spec", "spec.json"],
    ] {
        let mut argv = vec!["--server", daemon.sessions.as_str()];
        argv.extend_from_slice(args);
        let o = agentctl(d, &argv);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?} is a usage error: {err}");
        assert!(o.stdout.is_empty(), "{args:?} printed no built-ins");
        assert!(
            err.contains(&format!(
                "--server {} is a sessions address",
                daemon.sessions
            )) && err.contains("pass --registry HOST:PORT (the daemon's --registry-addr)"),
            "{args:?}: {err}"
        );
        assert_eq!(entries(d), Vec::<String>::new(), "{args:?} created files");
    }
    // With --registry beside it, the same command reaches the daemon's
    // registry, and still nothing appears here.
    let o = agentctl(
        d,
        &[
            "--server",
            &daemon.sessions,
            "harness",
            "list",
            "--registry",
            &daemon.registry,
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("echo\tstate=ACTIVE"), "{out}");
    assert_eq!(entries(d), Vec::<String>::new());
}

#[test]
fn harness_commands_without_any_address_still_use_the_embedded_registry() {
    let cwd = tempfile::tempdir().unwrap();
    let o = agentctl(cwd.path(), &["harness", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("approval\tstate=ACTIVE"));
    assert!(cwd.path().join("agentsessions.db").exists());
}

#[test]
fn harness_help_offers_registry_and_not_the_refused_server_flag() {
    let cwd = tempfile::tempdir().unwrap();
    for args in [
        &["harness", "--help"][..],
        &["harness", "list", "--help"],
        &["harness", "register", "--help"],
    ] {
        let o = agentctl(cwd.path(), args);
        assert!(o.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(help.contains("--registry <HOST:PORT>"), "{args:?}: {help}");
        assert!(
            !help.contains("--server <"),
            "{args:?} offers --server, which harness commands refuse: {help}"
        );
    }
    // The other commands still document --server.
    let o = agentctl(cwd.path(), &["list", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("--server <HOST:PORT>"));
}

#[test]
fn a_server_flag_after_the_harness_subcommand_is_refused_too() {
    let cwd = tempfile::tempdir().unwrap();
    let o = agentctl(cwd.path(), &["harness", "list", "--server", "127.0.0.1:1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("pass --registry HOST:PORT"), "{err}");
    assert_eq!(entries(cwd.path()), Vec::<String>::new());
}
