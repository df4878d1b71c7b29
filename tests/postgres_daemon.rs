//! `agentsessionsd --journal postgres://…`: the real daemon binary on a
//! real PostgreSQL (a throwaway cluster, `scripts/pg-cluster.sh`), driven by
//! `agentctl --server`. Two daemons share the database: a session one of
//! them wrote is read and continued by the other, and survives the first
//! being killed; a delete on one is seen by the other.

use agentsessions_pg::{PgJournal, PgOptions};
use agentsessions_shells::journal::JournalStore as _;

#[path = "support/cli.rs"]
mod cli;
use cli::{Daemon, agentctl, ok_on as ok, stderr, stdout};

#[path = "../shells/tests/support/pg.rs"]
mod pg;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_share_one_postgres_journal() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ledger = |name: &str| d.join(name).display().to_string();
    let a = Daemon::start_with(url.as_ref(), &["--tools-ledger", &ledger("a.tools.db")]);
    let b = Daemon::start_with(url.as_ref(), &["--tools-ledger", &ledger("b.tools.db")]);

    let sid = ok(d, &a.sessions, &["create"]).trim().to_owned();
    ok(
        d,
        &a.sessions,
        &["exec", "--session", &sid, "--input", "hello"],
    );
    let on_a = ok(d, &a.sessions, &["replay", "--session", &sid]);
    assert!(on_a.contains("echo:hello"), "{on_a}");
    assert_eq!(
        ok(d, &b.sessions, &["replay", "--session", &sid]),
        on_a,
        "the other daemon reads the same records"
    );

    // The second daemon continues the session, then the first dies.
    ok(
        d,
        &b.sessions,
        &["exec", "--session", &sid, "--input", "again"],
    );
    drop(a);
    let after = ok(d, &b.sessions, &["replay", "--session", &sid]);
    assert!(after.starts_with(&on_a), "the first turn is intact");
    assert!(after.contains("echo:again"), "{after}");
    let store = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    store.verify(&sid).await.expect("the chain verifies");
    assert_eq!(store.read(&sid, 1, 0).await.unwrap().len(), 10);

    // A restarted daemon finds it; a delete there is seen everywhere.
    let c = Daemon::start_with(url.as_ref(), &["--tools-ledger", &ledger("c.tools.db")]);
    ok(d, &c.sessions, &["delete", "--session", &sid]);
    let o = agentctl(d, &["--server", &b.sessions, "get", "--session", &sid]);
    assert_eq!(o.status.code(), Some(15), "NOT_FOUND on the other daemon");
    assert!(store.read(&sid, 1, 0).await.unwrap().is_empty());
    assert!(store.tombstone(&sid).await.unwrap().is_some());
}

/// The daemon's overall health answer ("" service), as its number.
async fn health(addr: &str) -> i32 {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = HealthClient::new(channel);
    c.check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status
}

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;
/// agentctl's exit code for UNAVAILABLE (10 + the gRPC code).
const EXIT_UNAVAILABLE: i32 = 24;

/// Polls `f` every 100 ms until it holds, for at most 30 s.
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..300 {
        if f().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_rides_out_a_postgres_restart_without_restarting() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let url = agentsessions_pg::create_database(&cluster.url, "restart")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ledger = d.join("tools.db").display().to_string();
    let daemon = Daemon::start_with(url.as_ref(), &["--tools-ledger", &ledger]);
    let sid = ok(d, &daemon.sessions, &["create"]).trim().to_owned();
    ok(
        d,
        &daemon.sessions,
        &["exec", "--session", &sid, "--input", "before"],
    );
    let acknowledged = ok(d, &daemon.sessions, &["replay", "--session", &sid]);
    assert_eq!(health(&daemon.sessions).await, SERVING);

    cluster.halt();
    let down = ["exec", "--session", &sid, "--input", "during"];
    let mut argv = vec!["--server", daemon.sessions.as_str()];
    argv.extend_from_slice(&down);
    let o = agentctl(d, &argv);
    assert_eq!(
        o.status.code(),
        Some(EXIT_UNAVAILABLE),
        "UNAVAILABLE while the database is down: {}",
        stderr(&o)
    );
    eventually("health NOT_SERVING while down", async || {
        health(&daemon.sessions).await == NOT_SERVING
    })
    .await;
    let o = agentctl(d, &["--server", &daemon.sessions, "get", "--session", &sid]);
    assert_eq!(o.status.code(), Some(EXIT_UNAVAILABLE), "reads too");

    cluster.resume();
    let again = ["exec", "--session", &sid, "--input", "after"];
    let mut argv = vec!["--server", daemon.sessions.as_str()];
    argv.extend_from_slice(&again);
    eventually("exec succeeds once the database is back", async || {
        agentctl(d, &argv).status.success()
    })
    .await;
    assert_eq!(health(&daemon.sessions).await, SERVING);
    let after = ok(d, &daemon.sessions, &["replay", "--session", &sid]);
    assert!(
        after.starts_with(&acknowledged),
        "nothing acknowledged lost"
    );
    assert!(after.contains("echo:after"), "{after}");
    assert!(
        !after.contains("echo:during"),
        "the refused turn left nothing"
    );
    let store = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    store.verify(&sid).await.expect("the chain verifies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_reaches_a_tls_only_database_through_its_journal_ca() {
    let certs = tempfile::tempdir().unwrap();
    if pg::test_certificates(certs.path()).is_none() {
        return;
    }
    let Some(cluster) = pg::Cluster::start_tls(certs.path()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("{}?sslmode=require", cluster.url);
    let ca = certs.path().join("ca.crt");
    let daemon = Daemon::start_with(
        url.as_ref(),
        &[
            "--journal-ca",
            ca.to_str().unwrap(),
            "--tools-ledger",
            d.join("tools.db").to_str().unwrap(),
        ],
    );
    let sid = ok(d, &daemon.sessions, &["create"]).trim().to_owned();
    let out = ok(
        d,
        &daemon.sessions,
        &["exec", "--session", &sid, "--input", "over tls"],
    );
    assert!(out.contains("echo:over tls"), "{out}");
    drop(daemon);
    // The records are in that database, read back over TLS.
    let options = PgOptions {
        ca_file: Some(ca),
        ..PgOptions::default()
    };
    let store = PgJournal::open(&url, options).await.unwrap();
    store.verify(&sid).await.unwrap();
    assert!(store.head(&sid).await.unwrap() >= 3);
}

/// A zombie host: daemon A is paused (SIGSTOP) in the middle of a turn,
/// its model call in flight. While A's lease is live, daemon B refuses to
/// take the session (ABORTED); once it lapses, B takes it over and
/// finishes the turn; A wakes (SIGCONT) past its lease with its model
/// answer and cannot append it: its fence is older than B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_paused_past_its_lease_is_taken_over_and_cannot_append() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let model = agentsessions_conformance::model::FakeModel::start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let flags = |name: &str| {
        vec![
            "--model".to_owned(),
            "gpt-test".to_owned(),
            "--model-base-url".to_owned(),
            model.base_url().to_owned(),
            "--tools-ledger".to_owned(),
            d.join(format!("{name}.tools.db")).display().to_string(),
            "--host-id".to_owned(),
            format!("host-{name}"),
            "--lease".to_owned(),
            "2s".to_owned(),
        ]
    };
    let (fa, fb) = (flags("a"), flags("b"));
    let a = Daemon::start_with(
        url.as_ref(),
        &fa.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let b = Daemon::start_with(
        url.as_ref(),
        &fb.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let sid = ok(&d, &a.sessions, &["create", "--harness", "chat"])
        .trim()
        .to_owned();

    // A's turn goes as far as the model call and waits there.
    let hold = model.hold_next();
    let turn_on_a = {
        let (d, server, sid) = (d.clone(), a.sessions.clone(), sid.clone());
        std::thread::spawn(move || {
            agentctl(
                &d,
                &[
                    "--server",
                    &server,
                    "exec",
                    "--session",
                    &sid,
                    "--input",
                    "first",
                ],
            )
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while model.requests() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "A never called the model"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    a.signal("STOP");
    let paused = std::time::Instant::now();

    // A's lease is live: B does not fight it.
    let early = agentctl(&d, &["--server", &b.sessions, "resume", "--session", &sid]);
    assert_eq!(
        early.status.code(),
        Some(20),
        "ABORTED (10 + 10): {}",
        stderr(&early)
    );
    assert!(
        stderr(&early).contains("leased to host host-a"),
        "{}",
        stderr(&early)
    );

    // Past the lease, B re-drives the interrupted turn under its own fence.
    tokio::time::sleep(std::time::Duration::from_millis(2500).saturating_sub(paused.elapsed()))
        .await;
    let on_b = ok(&d, &b.sessions, &["resume", "--session", &sid]);
    assert!(on_b.contains(" resume "), "{on_b}");

    // A wakes with its answer.
    drop(hold);
    a.signal("CONT");
    let on_a = turn_on_a.join().unwrap();
    assert!(
        !on_a.status.success(),
        "the zombie's turn must fail: {}",
        stdout(&on_a)
    );

    let store = PgJournal::open(&url, PgOptions::default()).await.unwrap();
    store.verify(&sid).await.unwrap();
    let records = store.read(&sid, 1, 0).await.unwrap();
    // Fences never go back along the chain, and nothing of A's lands after
    // B's first record.
    assert!(
        records.windows(2).all(|w| w[0].fence <= w[1].fence),
        "{:?}",
        records.iter().map(|r| r.fence).collect::<Vec<_>>()
    );
    let kinds = |r: &agentsessions_proto::v1::LogRecord| r.event.as_ref().map(|e| e.kind);
    let ends = records
        .iter()
        .filter(|r| kinds(r) == Some(agentsessions_proto::v1::EventKind::EventEnd as i32))
        .count();
    assert_eq!(ends, 1, "one turn, finished once (by B)");
    let outputs: Vec<_> = records
        .iter()
        .filter(|r| kinds(r) == Some(agentsessions_proto::v1::EventKind::EventOutput as i32))
        .collect();
    assert_eq!(outputs.len(), 1, "only B's answer was recorded");
    assert_eq!(
        outputs[0].fence,
        records.last().unwrap().fence,
        "the answer is under B's fence"
    );
    // A is alive and serves the session as it now stands.
    assert_eq!(
        ok(&d, &a.sessions, &["replay", "--session", &sid]),
        ok(&d, &b.sessions, &["replay", "--session", &sid])
    );
}
