//! Approval expiry and notifications through the built daemon, told to a
//! receiver we did not write in Rust: `tests/peers/notify_receiver.py`
//! (Python's http.server, checking signatures with Python's hmac).
//!
//! Where python3 is missing the tests print SKIPPED; with `CI=true` they
//! fail instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "support/cli.rs"]
mod cli;
use cli::{Daemon, agentctl, ok_on, stderr};

const SECRET: &str = "s3cret";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// python3, or None (SKIPPED) where it cannot be had outside CI.
fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is required in CI"
        );
        eprintln!("SKIPPED: notify: python3 not found");
    }
    ok.then_some("python3")
}

/// The Python receiver: writes what it got, one JSON line per POST.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// A receiver on `port` (0: any), answering `extra` as its flags say.
    fn start(dir: &Path, port: u16, extra: &[&str]) -> Self {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port_file = dir.join(format!("port-{n}"));
        let out = dir.join("events.jsonl");
        let child = Command::new("python3")
            .arg(root().join("tests/peers/notify_receiver.py"))
            .args(["--port", &port.to_string(), "--secret", SECRET])
            .arg("--port-file")
            .arg(&port_file)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the receiver");
        let bound = wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(&port_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("the receiver reports its port");
        Self {
            child,
            port: bound,
            out,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// Every POST received so far.
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// Waits until a POST of `kind` for `session` was answered 2xx.
    fn wait_kind(&self, session: &str, kind: &str, within: Duration) -> Value {
        wait_for(within, || {
            self.events().into_iter().find(|e| {
                e["body"]["session"] == session
                    && e["body"]["kind"] == kind
                    && e["answered"].as_u64().is_some_and(|c| c < 300)
            })
        })
        .unwrap_or_else(|| panic!("no {kind} for {session}; got {:#?}", self.events()))
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A parked `approval` session on the daemon at `server`, and the
/// execution id of its gated call.
fn parked_in(dir: &Path, server: &str) -> (String, String) {
    let sid = ok_on(dir, server, &["create", "--harness", "approval"])
        .trim()
        .to_owned();
    let out = ok_on(dir, server, &["exec", "--session", &sid, "--input", "x"]);
    let exec = out
        .lines()
        .find_map(|l| l.strip_prefix("pending_approval execution="))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("parked: {out}"))
        .to_owned();
    (sid, exec)
}

fn parked(dir: &Path, server: &str) -> String {
    parked_in(dir, server).0
}

/// The APPROVAL_RESULT lines of a session's replay.
fn decisions(dir: &Path, server: &str, sid: &str) -> Vec<String> {
    ok_on(dir, server, &["replay", "--session", sid])
        .lines()
        .filter(|l| l.contains("EVENT_APPROVAL_RESULT"))
        .map(str::to_owned)
        .collect()
}

fn daemon(dir: &Path, journal: &Path, extra: &[&str]) -> Daemon {
    Daemon::start_in(dir, journal.as_os_str(), extra)
}

#[test]
fn a_parked_turn_expires_the_agent_answers_and_each_event_arrives_signed() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(dir.path(), 0, &[]);
    let url = rx.url();
    let d = daemon(
        dir.path(),
        &dir.path().join("j.db"),
        &[
            "--approval-timeout",
            "2s",
            "--notify",
            &url,
            "--notify-secret",
            SECRET,
        ],
    );
    let (sid, exec) = parked_in(dir.path(), &d.sessions);
    let requested = rx.wait_kind(&sid, "approval.requested", Duration::from_secs(10));
    assert_eq!(requested["body"]["tool"], "append_note");
    assert!(
        requested["body"].get("arguments").is_none(),
        "not asked for"
    );
    let expired = rx.wait_kind(&sid, "approval.expired", Duration::from_secs(15));
    assert_eq!(expired["body"]["reason"], "expired after 2s");
    assert_eq!(expired["body"]["actor"], "agentsessions:host");
    for e in rx.events() {
        assert_eq!(e["signature_valid"], true, "{e}");
        assert_eq!(e["timestamp_fresh"], true, "{e}");
        assert_eq!(e["event_id"], e["body"]["id"], "{e}");
    }
    // The denial is journaled once and the agent answered it.
    let replay = ok_on(dir.path(), &d.sessions, &["replay", "--session", &sid]);
    assert_eq!(
        decisions(dir.path(), &d.sessions, &sid).len(),
        1,
        "{replay}"
    );
    assert!(replay.contains("reason=expired after 2s"), "{replay}");
    assert!(replay.contains("append_note denied"), "{replay}");
    // A human decision now is refused, and says why.
    let late = agentctl(
        dir.path(),
        &[
            "--server",
            &d.sessions,
            "approve",
            "--session",
            &sid,
            "--execution",
            &exec,
            "--call",
            "c1",
            "--request-seq",
            "4",
        ],
    );
    assert!(!late.status.success());
    assert!(
        stderr(&late).contains("approve: request expired after 2s: the host denied it"),
        "{}",
        stderr(&late)
    );
}

#[test]
fn a_receiver_down_for_a_while_gets_every_event_once_it_returns() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Learn a free port from a receiver, then stop it: the daemon posts to
    // a closed port until a receiver comes back on it.
    let first = Receiver::start(dir.path(), 0, &[]);
    let port = first.port;
    drop(first);
    let url = format!("http://127.0.0.1:{port}/hook");
    let d = daemon(
        dir.path(),
        &dir.path().join("j.db"),
        &[
            "--notify",
            &url,
            "--notify-secret",
            SECRET,
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    );
    let sid = parked(dir.path(), &d.sessions);
    let metrics = d.metrics.clone().unwrap();
    wait_for(Duration::from_secs(10), || {
        let text = scrape(&metrics);
        (sample(&text, "agentsessions_notify_failed_total") >= 1.0
            && sample(&text, "agentsessions_notify_queued") >= 1.0)
            .then_some(())
    })
    .expect("attempts fail while the receiver is down, and the notice stays queued");
    std::fs::remove_file(dir.path().join("events.jsonl")).ok();
    let rx = Receiver::start(dir.path(), port, &[]);
    let got = rx.wait_kind(&sid, "approval.requested", Duration::from_secs(30));
    assert_eq!(got["signature_valid"], true);
    wait_for(Duration::from_secs(10), || {
        (sample(&scrape(&metrics), "agentsessions_notify_queued") == 0.0).then_some(())
    })
    .expect("the outbox drains");
}

#[test]
fn undelivered_events_survive_a_kill_and_arrive_after_restart_under_one_id() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The receiver takes each POST but answers 503, so nothing is ever
    // settled before the daemon dies.
    let rx = Receiver::start(dir.path(), 0, &["--fail-first", "1000000"]);
    let url = rx.url();
    let journal = dir.path().join("j.db");
    let flags = ["--notify", url.as_str(), "--notify-secret", SECRET];
    let d = daemon(dir.path(), &journal, &flags);
    let sid = parked(dir.path(), &d.sessions);
    wait_for(Duration::from_secs(10), || {
        (!rx.events().is_empty()).then_some(())
    })
    .expect("an attempt reached the receiver");
    d.signal("KILL");
    drop(d);
    drop(rx);
    let rx = Receiver::start(dir.path(), 0, &[]);
    let url = rx.url();
    let d = daemon(
        dir.path(),
        &journal,
        &["--notify", &url, "--notify-secret", SECRET],
    );
    let got = rx.wait_kind(&sid, "approval.requested", Duration::from_secs(30));
    let id = got["event_id"].as_str().unwrap().to_owned();
    let attempts: Vec<Value> = rx
        .events()
        .into_iter()
        .filter(|e| e["body"]["session"] == sid.as_str())
        .collect();
    assert!(
        attempts.len() >= 2,
        "tried before the kill and after: {attempts:#?}"
    );
    assert!(
        attempts.iter().all(|e| e["event_id"] == id.as_str()),
        "every attempt of one event shares its id: {attempts:#?}"
    );
    drop(d);
}

#[test]
fn a_delivery_cut_by_a_kill_mid_post_goes_out_right_after_restart() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A receiver that takes the connection and never answers: the notice
    // is claimed and its POST in flight when the daemon dies.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_url = format!("http://{}/hook", hole.local_addr().unwrap());
    let accepted = std::thread::spawn(move || hole.accept().map(|(conn, _)| conn));
    let journal = dir.path().join("j.db");
    let d = daemon(dir.path(), &journal, &["--notify", &hole_url]);
    let sid = parked(dir.path(), &d.sessions);
    let _held = accepted
        .join()
        .unwrap()
        .expect("the POST reached the receiver");
    d.signal("KILL");
    drop(d);
    // Restarted (same journal, same owner): the claim its last run held is
    // let go at once, not after the two-minute lease.
    let rx = Receiver::start(dir.path(), 0, &[]);
    let url = rx.url();
    let d = daemon(dir.path(), &journal, &["--notify", &url]);
    rx.wait_kind(&sid, "approval.requested", Duration::from_secs(10));
    drop(d);
}

#[test]
fn an_expiry_due_while_the_daemon_was_down_happens_once_after_restart() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    // Expiries are watched through their notices, so nothing here reads
    // the sessions (a read would find the deadline by itself).
    let rx = Receiver::start(dir.path(), 0, &[]);
    let url = rx.url();
    let flags = ["--approval-timeout", "2s", "--notify", url.as_str()];
    let with_metrics = [&flags[..], &["--metrics-addr", "127.0.0.1:0"]].concat();
    let d = daemon(dir.path(), &journal, &flags);
    let first = parked(dir.path(), &d.sessions);
    d.signal("KILL");
    drop(d);
    std::thread::sleep(Duration::from_millis(2500));
    // With metrics on, the boot count's read of every session finds it.
    let d = daemon(dir.path(), &journal, &with_metrics);
    let expired = rx.wait_kind(&first, "approval.expired", Duration::from_secs(15));
    assert_eq!(expired["body"]["reason"], "expired after 2s");
    let second = parked(dir.path(), &d.sessions);
    d.signal("KILL");
    drop(d);
    std::thread::sleep(Duration::from_millis(2500));
    // Without metrics, the daemon's own boot walk finds it.
    let d = daemon(dir.path(), &journal, &flags);
    rx.wait_kind(&second, "approval.expired", Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(500));
    for sid in [&first, &second] {
        let decided = decisions(dir.path(), &d.sessions, sid);
        assert_eq!(decided.len(), 1, "never twice: {decided:?}");
        assert!(decided[0].contains("expired after 2s"), "{decided:?}");
    }
}

#[test]
fn the_signature_check_in_the_operations_guide_works_as_written() {
    let Some(py) = python() else { return };
    let out = Command::new(py)
        .arg(root().join("tests/notify_snippet.py"))
        .arg(root().join("docs/operations.md"))
        .output()
        .expect("run the snippet test");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn scrape(addr: &str) -> String {
    let (code, body) = http_get(addr, "/metrics");
    assert_eq!(code, 200);
    body
}

#[path = "support/scrape.rs"]
mod scrape_support;
use scrape_support::http_get;

fn sample(text: &str, series: &str) -> f64 {
    scrape_support::sample(text, series).unwrap_or(0.0)
}

#[path = "../shells/tests/support/pg.rs"]
mod pg;

/// Two daemons on one PostgreSQL journal, both delivering to one receiver:
/// the outbox's claims share the rows out, so in normal operation each
/// event arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_on_postgres_deliver_each_event_once() {
    if python().is_none() {
        return;
    }
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rx = Receiver::start(d, 0, &[]);
    let hook = rx.url();
    let start = |name: &str| {
        let ledger = d.join(format!("{name}.tools.db")).display().to_string();
        let flags = ["--tools-ledger", ledger.as_str(), "--notify", hook.as_str()];
        Daemon::start_with(url.as_ref(), &flags)
    };
    let (a, b) = (start("a"), start("b"));
    const EACH: usize = 6;
    let mut sessions = Vec::new();
    for _ in 0..EACH {
        sessions.push(parked(d, &a.sessions));
        sessions.push(parked(d, &b.sessions));
    }
    for sid in &sessions {
        rx.wait_kind(sid, "approval.requested", Duration::from_secs(30));
    }
    // Give a second deliverer time to send anything twice.
    std::thread::sleep(Duration::from_secs(1));
    let mut ids: Vec<String> = rx
        .events()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2 * EACH, "one event per parked session");
    assert_eq!(all, ids.len(), "no event delivered twice");
}

#[test]
fn a_failed_turn_is_announced_with_its_reason() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(dir.path(), 0, &[]);
    let url = rx.url();
    // A model nobody serves: the chat turn's model call fails, and the
    // turn ends with a durable ERROR, which is what a failed turn announces.
    let flags = [
        "--notify",
        url.as_str(),
        "--notify-secret",
        SECRET,
        "--model",
        "m=http://127.0.0.1:1/v1",
    ];
    let d = daemon(dir.path(), &dir.path().join("j.db"), &flags);
    let sid = ok_on(dir.path(), &d.sessions, &["create", "--harness", "chat"])
        .trim()
        .to_owned();
    let turn = agentctl(
        dir.path(),
        &[
            "--server",
            &d.sessions,
            "exec",
            "--session",
            &sid,
            "--input",
            "hi",
        ],
    );
    assert!(!turn.status.success(), "the turn fails");
    let failed = rx.wait_kind(&sid, "turn.failed", Duration::from_secs(15));
    let reason = failed["body"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("model"), "{failed}");
    assert_eq!(failed["signature_valid"], true);
    assert_eq!(failed["body"]["seq"], 4, "the ERROR record: {failed}");
}
