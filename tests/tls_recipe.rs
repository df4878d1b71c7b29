//! docs/security.md's certificate recipe, run as written: the openssl
//! block under "### Certificates" makes a CA and a leaf that the daemon
//! serves and agentctl trusts. The certificates people get wrong (a CA
//! served as the leaf, a v1 certificate, a key of another certificate) stop
//! the daemon with the cause named, and agentctl at a port of the other
//! protocol says so.
//!
//! Needs openssl on PATH: without it the tests say SKIPPED, except on CI
//! (CI=true), where they fail.

#[path = "support/cli.rs"]
mod cli;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli::{DAEMON, Daemon, agentctl, stderr, stdout};

const HEADING: &str = "### Certificates";
const HINT_TLS: &str =
    "the server may be serving TLS: pass --tls-ca FILE or use an https:// server address";
const HINT_PLAINTEXT: &str = "the server may be serving plaintext";
const SEE: &str = "(see docs/security.md, \"Certificates\")";

/// The first ```sh block of the "Certificates" section of
/// docs/security.md.
fn recipe() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let gone = |what: &str| -> ! {
        panic!(
            "docs/security.md: {what}; the daemon's certificate errors point readers to this \
             recipe, keep it (or change this test and those messages together)"
        )
    };
    let mut lines = doc.lines().skip_while(|l| l.trim_end() != HEADING);
    if lines.next().is_none() {
        gone(&format!("no {HEADING:?} heading"));
    }
    let mut in_fence = false;
    let mut block = None::<String>;
    for line in lines {
        match (&mut block, line.trim_end()) {
            (Some(text), "```") => return std::mem::take(text),
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, "```sh") => block = Some(String::new()),
            (None, l) if l.starts_with("```") => in_fence = !in_fence,
            // The next heading ends the section.
            (None, l) if !in_fence && l.starts_with('#') => break,
            (None, _) => {}
        }
    }
    gone(&format!("no closed ```sh block under {HEADING:?}"))
}

/// A directory holding what the recipe made, or None when openssl is
/// missing (off CI).
fn made_by_the_recipe() -> Option<tempfile::TempDir> {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "openssl not found, and CI=true: the recipe must be checked on CI"
        );
        // Around libtest's capture, so the skip shows without --nocapture.
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: openssl not found (tests/tls_recipe.rs) ***\n"
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &recipe()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the recipe of docs/security.md failed: {}",
        stderr(&out)
    );
    for made in ["ca.pem", "server.pem", "server.key"] {
        assert!(dir.path().join(made).is_file(), "the recipe made no {made}");
    }
    Some(dir)
}

fn tls_daemon(dir: &Path, cert: &str, key: &str) -> Daemon {
    Daemon::start_in(
        dir,
        "sessions.db".as_ref(),
        &["--tls-cert", cert, "--tls-key", key],
    )
}

/// The daemon on `cert` and `key`, which must refuse to start; its stderr.
fn refused(dir: &Path, cert: &str, key: &str) -> String {
    let mut child = Command::new(DAEMON)
        .current_dir(dir)
        .args(["--addr", "127.0.0.1:0", "--journal", "sessions.db"])
        .args(["--tls-cert", cert, "--tls-key", key])
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "started with {cert} and {key}");
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("served {cert} with {key}: still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn failed_with(o: &Output) -> String {
    assert!(!o.status.success(), "succeeded: {}", stdout(o));
    stderr(o)
}

#[test]
fn the_documented_recipe_makes_a_certificate_that_agentctl_trusts() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let d = dir.path();
    let daemon = tls_daemon(d, "server.pem", "server.key");
    let out = agentctl(
        d,
        &[
            "--server",
            &daemon.sessions,
            "--tls-ca",
            "ca.pem",
            "exec",
            "--input",
            "hello",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("echo:hello"), "{}", stdout(&out));

    // The DNS name of the subjectAltName works as well as the IP address.
    let port = daemon.sessions.rsplit_once(':').unwrap().1;
    let by_name = format!("https://localhost:{port}");
    let out = agentctl(d, &["--server", &by_name, "--tls-ca", "ca.pem", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn plaintext_agentctl_at_the_tls_port_is_told_to_use_tls() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let d = dir.path();
    let daemon = tls_daemon(d, "server.pem", "server.key");
    // The race between the server's alert and its reset decides how the
    // call fails; run a few so both ways are likely met.
    for _ in 0..3 {
        let out = agentctl(d, &["--server", &daemon.sessions, "get", "--session", "x"]);
        let err = failed_with(&out);
        assert!(err.contains(HINT_TLS), "{err}");
        // A transport failure, exiting with its gRPC class as before.
        let code = out.status.code().unwrap();
        assert!((11..=26).contains(&code), "exit {code}: {err}");
    }
}

#[test]
fn tls_agentctl_at_a_plaintext_port_is_told_the_server_is_plaintext() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let d = dir.path();
    let daemon = Daemon::start_in(d, "plain.db".as_ref(), &[]);
    let out = agentctl(
        d,
        &[
            "--server",
            &daemon.sessions,
            "--tls-ca",
            "ca.pem",
            "get",
            "--session",
            "x",
        ],
    );
    let err = failed_with(&out);
    assert!(err.contains(HINT_PLAINTEXT), "{err}");
    assert_eq!(out.status.code(), Some(24), "could not connect: {err}");
    assert!(!err.contains(HINT_TLS), "{err}");
}

#[test]
fn a_refused_connection_gets_no_protocol_hint() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap().to_string();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let err = failed_with(&agentctl(
        dir.path(),
        &["--server", &closed, "get", "--session", "x"],
    ));
    assert!(!err.contains("may be serving"), "{err}");
}

#[test]
fn a_ca_served_as_the_leaf_stops_the_daemon_naming_the_cause() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let err = refused(dir.path(), "ca.pem", "ca.key");
    let want = format!(
        "--tls-cert ca.pem: the certificate is a CA (basicConstraints CA:TRUE); \
         serve a leaf certificate signed by it {SEE}"
    );
    assert!(err.contains(&want), "{err}");
}

#[test]
fn a_v1_certificate_stops_the_daemon_naming_the_cause() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let d = dir.path();
    // The recipe's last step without -extfile: what the issue's user ran.
    let out = Command::new("openssl")
        .args(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem"])
        .args(["-CAkey", "ca.key", "-CAcreateserial", "-days", "90"])
        .args(["-out", "v1.pem"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = refused(d, "v1.pem", "server.key");
    assert!(
        err.contains("--tls-cert v1.pem: the certificate is X.509 v1, which has no extensions"),
        "{err}"
    );
    assert!(err.contains(SEE), "{err}");
}

#[test]
fn a_key_of_another_certificate_stops_the_daemon_naming_the_key() {
    let Some(dir) = made_by_the_recipe() else {
        return;
    };
    let err = refused(dir.path(), "server.pem", "ca.key");
    assert!(
        err.contains("--tls-key ca.key: the key does not match the certificate"),
        "{err}"
    );
    assert!(err.contains(SEE), "{err}");
}
