//! `agentctl journal copy` and `journal verify` through the real binaries:
//! a deployment moves from SQLite to PostgreSQL and back, and the daemon on
//! each side serves the same sessions.

#[path = "support/cli.rs"]
mod cli;
use cli::{Daemon, agentctl, ok, ok_on, stderr};

#[path = "../shells/tests/support/pg.rs"]
mod pg;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_moves_to_postgres_and_back_and_the_daemons_serve_it() {
    let Some(url) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (file, back) = (d.join("a.db"), d.join("back.db"));
    let (file_s, back_s) = (file.to_str().unwrap(), back.to_str().unwrap());

    let daemon = Daemon::start(&file);
    let server = daemon.sessions.clone();
    let sid = ok_on(d, &server, &["create"]).trim().to_owned();
    for input in ["one", "two"] {
        ok_on(d, &server, &["exec", "--session", &sid, "--input", input]);
    }
    let on_sqlite = ok_on(d, &server, &["replay", "--session", &sid]);
    drop(daemon);

    let copied = ok(d, &["journal", "copy", "--from", file_s, "--to", &url]);
    assert!(copied.contains("copied 1 sessions"), "{copied}");
    assert!(copied.contains("target verified: 1 sessions"), "{copied}");
    assert!(ok(d, &["journal", "verify", &url]).starts_with("verified: 1 sessions"));

    // The daemon on PostgreSQL serves the copied session and continues it.
    let daemon = Daemon::start_with(url.as_ref(), &[]);
    let server = daemon.sessions.clone();
    assert_eq!(ok_on(d, &server, &["replay", "--session", &sid]), on_sqlite);
    ok_on(d, &server, &["exec", "--session", &sid, "--input", "three"]);
    let on_pg = ok_on(d, &server, &["replay", "--session", &sid]);
    assert!(
        on_pg.starts_with(&on_sqlite) && on_pg.contains("echo:three"),
        "{on_pg}"
    );
    drop(daemon);

    // And back to a fresh file, served by a daemon on SQLite again.
    ok(d, &["journal", "copy", "--from", &url, "--to", back_s]);
    assert!(ok(d, &["journal", "verify", back_s]).starts_with("verified: 1 sessions"));
    let daemon = Daemon::start(&back);
    assert_eq!(
        ok_on(d, &daemon.sessions, &["replay", "--session", &sid]),
        on_pg
    );
    drop(daemon);

    // A record altered behind the journal's back fails verify (exit 3).
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "UPDATE events SET hash = 'forged' WHERE session = $1 AND seq = 2",
            &[&sid],
        )
        .await
        .unwrap();
    let o = agentctl(d, &["journal", "verify", &url]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains(&sid), "{}", stderr(&o));
}
