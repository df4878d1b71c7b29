//! A throwaway PostgreSQL cluster for the tests that need one, started
//! once per test binary by `scripts/pg-cluster.sh` and stopped by its
//! watcher when the binary exits. Each caller gets a database of its own.
//!
//! Without PostgreSQL installed the callers are skipped with a loud
//! SKIPPED line, except in CI (`CI=true`), where that is a failure.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

static CLUSTER: OnceLock<Option<String>> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn script() -> std::path::PathBuf {
    // From whichever package includes this file: the repository's script.
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("scripts/pg-cluster.sh"))
        .find(|p| p.exists())
        .expect("scripts/pg-cluster.sh in the repository")
}

/// A port nobody listens on now. PostgreSQL cannot bind port 0 and report
/// it, so a port is picked here and released; another process may take
/// it before the server binds it, which [`launch_with`] retries.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts a cluster in a new directory; its URL, or why it would not start.
fn launch(tag: &str) -> Result<(std::path::PathBuf, u16, String), String> {
    launch_with(tag, None)
}

fn launch_with(
    tag: &str,
    tls: Option<&std::path::Path>,
) -> Result<(std::path::PathBuf, u16, String), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match launch_on(tag, tls, free_port()) {
            // The port was taken between the pick and the bind: pick again.
            // (The server never started, so nobody was reached on it.)
            Err(LaunchError::PortTaken(_)) if attempt < 5 => {}
            Err(LaunchError::PortTaken(why) | LaunchError::Other(why)) => return Err(why),
            Ok(up) => return Ok(up),
        }
    }
}

enum LaunchError {
    PortTaken(String),
    Other(String),
}

fn launch_on(
    tag: &str,
    tls: Option<&std::path::Path>,
    port: u16,
) -> Result<(std::path::PathBuf, u16, String), LaunchError> {
    let dir = std::env::temp_dir().join(format!(
        "agentsessions-pg-{tag}{}-{port}",
        std::process::id()
    ));
    let mut cmd = std::process::Command::new("bash");
    if let Some(tls) = tls {
        cmd.env("PG_TLS_DIR", tls);
    }
    let out = cmd
        .arg(script())
        .arg("start")
        .arg(&dir)
        .arg(port.to_string())
        .arg(std::process::id().to_string())
        .output()
        .expect("bash runs");
    if out.status.success() {
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        return Ok((dir, port, url));
    }
    let server_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    let why = format!(
        "{}{}{server_log}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("initdb.log")).unwrap_or_default()
    );
    if server_log.contains("Address already in use") {
        // The failed cluster's directory goes; the next try makes its own.
        let _ = std::process::Command::new("bash")
            .arg(script())
            .args(["stop", dir.to_str().unwrap()])
            .output();
        return Err(LaunchError::PortTaken(why));
    }
    Err(LaunchError::Other(why))
}

fn skipped(why: &str) {
    assert!(
        !in_ci(),
        "CI=true and no PostgreSQL cluster would start: {why}"
    );
    // Straight to the process's stderr: the test harness captures eprintln!
    // of passing tests, and a skip must be seen.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the PostgreSQL tests (no cluster would start: {why})"
    );
}

fn start() -> Option<String> {
    if let Ok(url) = std::env::var("AGENTSESSIONS_PG_URL") {
        return Some(url);
    }
    match launch("") {
        Ok((_, _, url)) => Some(url),
        Err(why) => {
            skipped(&why);
            None
        }
    }
}

/// A cluster of one test's own, which it may halt and resume (the shared
/// one serves every other test of the binary). Removed on drop.
pub struct Cluster {
    dir: std::path::PathBuf,
    port: u16,
    /// The admin URL (database `postgres`).
    pub url: String,
}

impl Cluster {
    /// A new cluster, or `None` (printed SKIPPED) outside CI without one.
    pub fn start() -> Option<Self> {
        match launch("own") {
            Ok((dir, port, url)) => Some(Self { dir, port, url }),
            Err(why) => {
                skipped(&why);
                None
            }
        }
    }

    /// A new TLS-only cluster presenting `tls`/server.{crt,key}; `None`
    /// (printed SKIPPED) outside CI without PostgreSQL.
    pub fn start_tls(tls: &std::path::Path) -> Option<Self> {
        match launch_with("tls", Some(tls)) {
            Ok((dir, port, url)) => Some(Self { dir, port, url }),
            Err(why) => {
                skipped(&why);
                None
            }
        }
    }

    fn run(&self, args: &[&str]) {
        let out = std::process::Command::new("bash")
            .arg(script())
            .args(args)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "pg-cluster.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops the server (fast shutdown: sessions are disconnected); the
    /// data stays.
    pub fn halt(&self) {
        self.run(&["halt", self.dir.to_str().unwrap()]);
    }

    /// Starts the halted server again on the same port (its URL's), which
    /// another process could take while it is down: then this fails.
    pub fn resume(&self) {
        let port = self.port.to_string();
        self.run(&["resume", self.dir.to_str().unwrap(), &port]);
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A streaming hot standby of this cluster (`pg_basebackup -R`), on a
    /// port of its own; removed on drop like any cluster.
    pub fn standby(&self) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "agentsessions-pg-standby{}-{port}",
            std::process::id()
        ));
        let out = std::process::Command::new("bash")
            .arg(script())
            .args(["standby", self.dir.to_str().unwrap()])
            .arg(self.port.to_string())
            .arg(&dir)
            .arg(port.to_string())
            .arg(std::process::id().to_string())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "pg-cluster.sh standby: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(dir.join("basebackup.log")).unwrap_or_default()
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        Self { dir, port, url }
    }

    /// Waits until a standby streams from this primary, then makes
    /// replication synchronous: a commit returns once the standby has it.
    pub fn sync_standby(&self) {
        let port = self.port.to_string();
        self.run(&["sync", self.dir.to_str().unwrap(), &port]);
    }

    /// Stops the server at once (`-m immediate`), as a power cut would.
    pub fn crash(&self) {
        self.run(&["crash", self.dir.to_str().unwrap()]);
    }

    /// Makes this standby the primary.
    pub fn promote(&self) {
        self.run(&["promote", self.dir.to_str().unwrap()]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(script())
            .args(["stop", self.dir.to_str().unwrap()])
            .output();
    }
}

/// The URL of a fresh, empty database, or `None` (printed SKIPPED) when
/// there is no PostgreSQL here and this is not CI.
pub async fn fresh_database() -> Option<String> {
    let admin = CLUSTER.get_or_init(start).clone()?;
    let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
    let name = format!("t{}_{n}", std::process::id());
    Some(
        agentsessions_pg::create_database(&admin, &name)
            .await
            .expect("create a test database"),
    )
}

/// A test CA and a server certificate it signed for 127.0.0.1, made with
/// the `openssl` tool in `dir` (`ca.crt`, `server.crt`, `server.key`), and
/// a second, unrelated CA (`other-ca.crt`). `None` (printed SKIPPED)
/// outside CI without `openssl`.
pub fn test_certificates(dir: &std::path::Path) -> Option<()> {
    let openssl = |args: &[&str]| {
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: Vec<Vec<&str>> = vec![
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=agentsessions test CA",
            ],
        ]
        .concat(),
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "other-ca.key",
                "-out",
                "other-ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=another CA",
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    ];
    for step in &steps {
        match openssl(step) {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("openssl {step:?}: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                skipped(&format!("no openssl to make test certificates: {e}"));
                return None;
            }
        }
    }
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let sign = openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ])
    .expect("openssl runs");
    assert!(
        sign.status.success(),
        "{}",
        String::from_utf8_lossy(&sign.stderr)
    );
    Some(())
}
