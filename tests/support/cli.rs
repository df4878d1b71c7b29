//! Helpers the CLI tests share: running the built `agentctl` in a
//! directory, reading its output, and a real `agentsessionsd` child on
//! loopback ports it picks itself (port 0) and reports.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

pub const AGENTCTL: &str = env!("CARGO_BIN_EXE_agentctl");
pub const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");

/// Runs `agentctl args…` with `dir` as its working directory.
pub fn agentctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(AGENTCTL)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run agentctl")
}

/// Runs `agentctl args…` in `dir`, asserts it succeeded, returns stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let o = agentctl(dir, args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// [`ok`] against the daemon at `server`.
pub fn ok_on(dir: &Path, server: &str, args: &[&str]) -> String {
    let mut argv = vec!["--server", server];
    argv.extend_from_slice(args);
    ok(dir, &argv)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A daemon on its own journal, and its Sessions and registry addresses;
/// killed when dropped.
pub struct Daemon {
    child: Child,
    pub sessions: String,
    pub registry: String,
    /// The `/metrics` address, when `--metrics-addr` was among the flags.
    pub metrics: Option<String>,
    /// The console's base URL, when `--console-addr` was among the flags.
    pub console: Option<String>,
}

impl Daemon {
    pub fn start(journal: &Path) -> Self {
        Self::start_with(journal.as_os_str(), &[])
    }

    /// A daemon on `journal` (a file or a database URL) with `extra` flags.
    pub fn start_with(journal: &std::ffi::OsStr, extra: &[&str]) -> Self {
        Self::start_in(Path::new("."), journal, extra)
    }

    /// [`Daemon::start_with`] with `dir` as the daemon's working directory
    /// (where relative paths, such as its notes, land).
    pub fn start_in(dir: &Path, journal: &std::ffi::OsStr, extra: &[&str]) -> Self {
        Self::start_logging(dir, journal, extra, Stdio::null())
    }

    /// [`Daemon::start_in`] with the daemon's log (stderr) going to `log`.
    pub fn start_logging(
        dir: &Path,
        journal: &std::ffi::OsStr,
        extra: &[&str],
        log: Stdio,
    ) -> Self {
        let mut child = Command::new(DAEMON)
            .current_dir(dir)
            .args(["--addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0"])
            .arg("--journal")
            .arg(journal)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start agentsessionsd");
        // Every listener binds port 0 and the daemon prints the port it
        // got: a port picked here and released could be taken by another
        // process before the daemon binds it. The lines come from the
        // child's own stdout, so each address is one the child bound.
        let mut wanted = vec![
            "agentsessionsd listening on ",
            "harness registry listening on ",
        ];
        if extra.contains(&"--metrics-addr") {
            wanted.push("metrics listening on ");
        }
        if extra.contains(&"--console-addr") {
            wanted.push("console listening on ");
        }
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut found = std::collections::HashMap::new();
        while found.len() < wanted.len() {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                end => panic!("daemon stdout ended ({end:?}) before {wanted:?}; got {found:?}"),
            };
            // In any order, other lines skipped: only the addresses matter.
            if let Some((prefix, addr)) = wanted
                .iter()
                .find_map(|p| line.strip_prefix(p).map(|a| (*p, a.to_owned())))
            {
                assert!(!addr.ends_with(":0"), "{line:?}: not the bound port");
                found.insert(prefix, addr);
            }
        }
        // Keep reading, so a later line cannot fail on a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let mut take = |prefix: &str| found.remove(prefix);
        Self {
            sessions: take("agentsessionsd listening on ").expect("sessions line"),
            registry: take("harness registry listening on ").expect("registry line"),
            metrics: take("metrics listening on "),
            console: take("console listening on "),
            child,
        }
    }
}

impl Daemon {
    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a `kill -s` name: STOP, CONT, KILL) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -s {signal}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
