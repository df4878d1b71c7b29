//! Python harness peers (grpcio), so a harness that is not Rust/tonic is
//! proven against the host under test.
//!
//! `conformance/python/venv.sh` makes `target/pyvenv` with the pinned
//! packages; the stubs are generated from `proto/` with grpcio-tools into
//! `target/pygen/<digest>` (never checked in). `suite_harnesses.py` then
//! serves [`ECHO`], [`APPROVAL`], [`FAIL`] and [`DOC`] (the harness of
//! docs/harness-authoring.md) in one child process per [`PythonPeers`],
//! which prints its ports and what each run saw, takes hold commands on
//! stdin, and is killed when the peers are dropped.
//!
//! Where python3, venv or pip is missing the peers are unavailable: the
//! Python checks print `SKIPPED` and skip, except with `CI=true`, where
//! they fail.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::OnceCell;

/// One model call shaped like conf-echo; holds (when armed) after it.
pub const ECHO: &str = "py-echo";
/// One REQUIRES_APPROVAL `append_note` call, like conf-approval.
pub const APPROVAL: &str = "py-approval";
/// END FAILED "boom".
pub const FAIL: &str = "py-fail";
/// `conformance/python/echo_harness.py`, the documented harness.
pub const DOC: &str = "py-doc";

/// The documented harness file, relative to the repository root.
pub const DOC_HARNESS: &str = "conformance/python/echo_harness.py";
/// The doc that shows it verbatim.
pub const DOC_FILE: &str = "docs/harness-authoring.md";

/// How long the harness process may take to print its ports.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// True when unavailable Python peers must fail, not skip (CI).
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The repository root (the conformance crate's parent).
pub fn repo_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.parent().unwrap_or(crate_dir).to_path_buf()
}

fn python_dir() -> PathBuf {
    repo_root().join("conformance").join("python")
}

/// Bytecode goes under target/, not beside the sources.
fn pycache() -> PathBuf {
    repo_root().join("target").join("pycache")
}

/// The venv's interpreter and the generated stubs.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// `target/pyvenv/bin/python`.
    pub python: PathBuf,
    /// The directory of the generated `*_pb2*.py` modules.
    pub generated: PathBuf,
}

/// Ensures the venv and the stubs, once per process; Err says why Python
/// peers are unavailable (printed once as a loud `SKIPPED` line).
pub async fn toolchain() -> Result<&'static Toolchain, String> {
    static TOOLCHAIN: OnceCell<Result<Toolchain, String>> = OnceCell::const_new();
    TOOLCHAIN
        .get_or_init(|| async {
            let made = prepare().await;
            if let Err(why) = &made {
                let what = if required() {
                    "FAILED (CI=true)"
                } else {
                    "SKIPPED"
                };
                eprintln!("{what}: python harness peers unavailable: {why}");
            }
            made
        })
        .await
        .as_ref()
        .map_err(Clone::clone)
}

async fn prepare() -> Result<Toolchain, String> {
    let script = python_dir().join("venv.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    let python = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .ok_or("venv.sh printed no interpreter")?;
    let generated = generate(&python).await?;
    Ok(Toolchain { python, generated })
}

/// Generates the stubs from `proto/` into `target/pygen/<digest>`, where the
/// digest covers the protos and the pins, so an edit regenerates and
/// concurrent suites share one finished directory.
async fn generate(python: &Path) -> Result<PathBuf, String> {
    let root = repo_root();
    let proto_dir = root.join("proto").join("proto");
    let mut protos: Vec<PathBuf> = std::fs::read_dir(&proto_dir)
        .map_err(|e| format!("{}: {e}", proto_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    protos.sort();
    let mut digest = DefaultHasher::new();
    for p in protos
        .iter()
        .chain([&python_dir().join("requirements.txt")])
    {
        p.file_name().hash(&mut digest);
        std::fs::read(p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .hash(&mut digest);
    }
    let base = root.join("target").join("pygen");
    let done = base.join(format!("{:016x}", digest.finish()));
    if done.join("harness_pb2_grpc.py").is_file() {
        return Ok(done);
    }
    // Generated beside the final name, then renamed: a reader never sees
    // half a directory.
    let staging = base.join(format!(
        "staging-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let out = Command::new(python)
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", proto_dir.display()))
        .arg(format!("--python_out={}", staging.display()))
        .arg(format!("--grpc_python_out={}", staging.display()))
        .args(&protos)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("grpc_tools.protoc: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!(
            "grpc_tools.protoc failed: {}",
            tail(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    if std::fs::rename(&staging, &done).is_err() {
        // Another suite finished first; its directory is the same.
        let _ = std::fs::remove_dir_all(&staging);
    }
    if done.join("harness_pb2_grpc.py").is_file() {
        Ok(done)
    } else {
        Err(format!("no generated stubs in {}", done.display()))
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

/// What the harness process reported so far: (tag, JSON payload).
type Reports = Arc<Mutex<Vec<(String, Json)>>>;

/// The Python harness process of one environment.
pub struct PythonPeers {
    /// (name, host:port) of every Python harness.
    pub harnesses: Vec<(String, String)>,
    // Killed on drop (`kill_on_drop`); its stdin closing stops it too.
    _child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    reports: Reports,
    held_at_arm: AtomicUsize,
}

impl std::fmt::Debug for PythonPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonPeers")
            .field("harnesses", &self.harnesses)
            .finish()
    }
}

impl PythonPeers {
    /// Starts `suite_harnesses.py` and waits for its ports.
    pub async fn start() -> Result<Self, String> {
        let tc = toolchain().await?;
        let mut child = Command::new(&tc.python)
            .arg("-u")
            .arg(python_dir().join("suite_harnesses.py"))
            .env("PYTHONPATH", &tc.generated)
            .env("PYTHONPYCACHEPREFIX", pycache())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn python harnesses: {e}"))?;
        let stdin = child.stdin.take().ok_or("python harnesses: no stdin")?;
        let stdout = child.stdout.take().ok_or("python harnesses: no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let harnesses = tokio::time::timeout(READY_TIMEOUT, ports(&mut lines))
            .await
            .map_err(|_| format!("python harnesses printed no ports within {READY_TIMEOUT:?}"))??;
        let reports = Reports::default();
        tokio::spawn(collect(lines, Arc::clone(&reports)));
        Ok(Self {
            harnesses,
            _child: child,
            stdin: tokio::sync::Mutex::new(stdin),
            reports,
            held_at_arm: AtomicUsize::new(0),
        })
    }

    /// The address of harness `name`.
    pub fn address(&self, name: &str) -> Option<&str> {
        self.harnesses
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.as_str())
    }

    /// Makes the next run that reaches its hold point stop there until the
    /// host goes away; returns once the process acknowledged it.
    pub async fn arm_hold(&self) -> Result<(), String> {
        let armed = self.count("armed");
        self.held_at_arm.store(self.count("held"), Ordering::SeqCst);
        self.stdin
            .lock()
            .await
            .write_all(b"hold\n")
            .await
            .map_err(|e| format!("python harnesses: {e}"))?;
        if self
            .wait(Duration::from_secs(10), |r| count(r, "armed") > armed)
            .await
        {
            Ok(())
        } else {
            Err("python harnesses never acknowledged the hold".into())
        }
    }

    /// Waits until a run holds on the last armed hold; false on timeout.
    pub async fn wait_held(&self, timeout: Duration) -> bool {
        let before = self.held_at_arm.load(Ordering::SeqCst);
        self.wait(timeout, |r| count(r, "held") > before).await
    }

    /// Every Start a Python harness received, in order: `harness`,
    /// `execution_id`, `session`, `inputs`, `history_kinds`,
    /// `history_texts`, `resume_from_seq`.
    pub fn starts(&self) -> Vec<Json> {
        self.tagged("start")
    }

    /// Every receipt py-approval received: `execution_id`, `id`,
    /// `is_error`, `code`, `error`, `approval_request_seq`,
    /// `approval_decision_seq`, and the decision's `approved` and
    /// `decision_request_seq`.
    pub fn receipts(&self) -> Vec<Json> {
        self.tagged("receipt")
    }

    fn tagged(&self, tag: &str) -> Vec<Json> {
        self.reports
            .lock()
            .map(|r| {
                r.iter()
                    .filter(|(t, _)| t == tag)
                    .map(|(_, j)| j.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn count(&self, tag: &str) -> usize {
        self.reports.lock().map(|r| count(&r, tag)).unwrap_or(0)
    }

    async fn wait(&self, timeout: Duration, done: impl Fn(&[(String, Json)]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.reports.lock().is_ok_and(|r| done(&r)) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn count(reports: &[(String, Json)], tag: &str) -> usize {
    reports.iter().filter(|(t, _)| t == tag).count()
}

/// Reads `serving <name> on <addr>` lines up to `ready`.
async fn ports(
    lines: &mut tokio::io::Lines<BufReader<ChildStdout>>,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    loop {
        let line = lines
            .next_line()
            .await
            .map_err(|e| format!("python harnesses: {e}"))?
            .ok_or("python harnesses exited before serving")?;
        if line == "ready" {
            return Ok(out);
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["serving", name, "on", addr] = words[..] {
            out.push((name.to_owned(), addr.to_owned()));
        }
    }
}

async fn collect(mut lines: tokio::io::Lines<BufReader<ChildStdout>>, reports: Reports) {
    while let Ok(Some(line)) = lines.next_line().await {
        let (tag, payload) = line.split_once(' ').unwrap_or((line.as_str(), "null"));
        let payload = serde_json::from_str(payload).unwrap_or(Json::Null);
        if let Ok(mut r) = reports.lock() {
            r.push((tag.to_owned(), payload));
        }
    }
}

/// What `reflection_client.py` found on a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReflectionListing {
    /// Services listed over reflection v1alpha.
    pub services: Vec<String>,
    /// Session uids ListSessions returned, called with message classes
    /// built from the reflected descriptors.
    pub sessions: Vec<String>,
}

/// Runs the Python reflection client against `addr` for `project`.
pub async fn reflection_listing(
    addr: std::net::SocketAddr,
    project: &str,
) -> Result<ReflectionListing, String> {
    let tc = toolchain().await?;
    let run = Command::new(&tc.python)
        .arg(python_dir().join("reflection_client.py"))
        .env("PYTHONPYCACHEPREFIX", pycache())
        .arg(addr.to_string())
        .arg(project)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| "reflection client timed out".to_owned())?
        .map_err(|e| format!("reflection client: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "reflection client failed: {}",
            tail(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    let v: Json = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("reflection client output: {e}"))?;
    Ok(ReflectionListing {
        services: json_strings(&v, "services"),
        sessions: json_strings(&v, "sessions"),
    })
}

/// The fence that marks the verbatim copy of [`DOC_HARNESS`] in
/// [`DOC_FILE`]: this comment line, then a ```python block.
pub const DOC_MARKER: &str = "<!-- verbatim: conformance/python/echo_harness.py -->";

/// The code block after [`DOC_MARKER`] in `doc`.
pub fn doc_block(doc: &str) -> Result<String, String> {
    let mut lines = doc.lines().skip_while(|l| l.trim() != DOC_MARKER);
    lines
        .next()
        .ok_or_else(|| format!("{DOC_FILE} has no {DOC_MARKER} line"))?;
    if lines.next().map(str::trim) != Some("```python") {
        return Err(format!("{DOC_MARKER} must be followed by ```python"));
    }
    let mut block = String::new();
    for line in lines {
        if line.trim_end() == "```" {
            return Ok(block);
        }
        block.push_str(line);
        block.push('\n');
    }
    Err(format!("the block after {DOC_MARKER} is not closed"))
}

/// Ok when the doc shows [`DOC_HARNESS`] exactly as the suite runs it.
pub fn doc_matches_harness() -> Result<(), String> {
    let root = repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).map_err(|e| format!("{p}: {e}"));
    let (doc, file) = (read(DOC_FILE)?, read(DOC_HARNESS)?);
    let block = doc_block(&doc)?;
    if block != file {
        let line = block
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(block.lines().count().min(file.lines().count()));
        return Err(format!(
            "the python harness in {DOC_FILE} differs from {DOC_HARNESS} at line {}",
            line + 1
        ));
    }
    Ok(())
}

/// The strings of the JSON array `v[key]` (none when absent).
pub(crate) fn json_strings(v: &Json, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_python_harness_is_the_file_the_suite_serves() {
        doc_matches_harness().unwrap();
    }

    #[test]
    fn doc_block_is_the_fenced_code_after_the_marker() {
        let doc = format!("intro\n{DOC_MARKER}\n```python\nimport grpc\n\nx = 1\n```\nafter\n");
        assert_eq!(doc_block(&doc).unwrap(), "import grpc\n\nx = 1\n");
        assert!(doc_block("no marker here").is_err());
        assert!(doc_block(&format!("{DOC_MARKER}\n```rust\n```\n")).is_err());
        assert!(doc_block(&format!("{DOC_MARKER}\n```python\nopen\n")).is_err());
    }
}
