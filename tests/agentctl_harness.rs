//! `agentctl harness …` never falls back to a local journal when the user
//! named a server: the Sessions port does not serve HarnessRegistry, so
//! `--server` without `--registry` is refused before anything is opened.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const AGENTCTL: &str = env!("CARGO_BIN_EXE_agentctl");
const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");

fn agentctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(AGENTCTL)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run agentctl")
}

/// A daemon on its own journal, and its Sessions and registry addresses.
struct Daemon {
    child: Child,
    sessions: String,
    registry: String,
}

impl Daemon {
    fn start(journal: &Path) -> Self {
        let mut child = Command::new(DAEMON)
            .args(["--addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0"])
            .arg("--journal")
            .arg(journal)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut addr_of = |prefix: &str| {
            let line = lines.next().expect("daemon line").unwrap();
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{line:?}"))
                .to_owned()
        };
        let sessions = addr_of("agentsessionsd listening on ");
        let registry = addr_of("harness registry listening on ");
        Self {
            child,
            sessions,
            registry,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
