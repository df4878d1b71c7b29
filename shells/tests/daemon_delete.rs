//! DeleteSession and retention over real gRPC, on a real SQLite journal:
//! what a deletion removes (records, row, tool-ledger entries), what it
//! leaves (a tombstone with no content), what it never touches (fork
//! children), and the retention task that deletes stale sessions.

use std::time::Duration;

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, DeleteSessionRequest, ExecRequest, ForkRequest, GetSessionRequest,
    ListSessionsRequest, ReplayRequest, ResumeRequest, exec_update::Update,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::journal::JournalStore as _;
use rusqlite::Connection;
use tonic::Code;
use tonic::transport::Channel;

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, exec_code, replay, text};

fn exec(session: &str, input: &str) -> ExecRequest {
    ExecRequest {
        session: session.into(),
        inputs: vec![text(input)],
        ..Default::default()
    }
}

/// Runs a turn to its end; the last Session frame.
async fn run_turn(
    c: &mut SessionsClient<Channel>,
    req: ExecRequest,
) -> agentsessions_proto::v1::Session {
    let mut stream = c.exec(req).await.unwrap().into_inner();
    let mut last = None;
    while let Some(u) = stream.message().await.unwrap() {
        if let Some(Update::Session(s)) = u.update {
            last = Some(s);
        }
    }
    last.expect("a session frame")
}

fn count(db: &std::path::Path, sql: &str, uid: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [uid], |r| r.get(0))
        .unwrap()
}

fn ledger_entries(journal: &std::path::Path, uid: &str) -> i64 {
    let mut path = journal.as_os_str().to_owned();
    path.push(".tools.db");
    count(
        std::path::Path::new(&path),
        "SELECT COUNT(*) FROM tool_ledger WHERE session = ?1",
        uid,
    )
}

async fn code_of<T>(r: impl std::future::Future<Output = Result<T, tonic::Status>>) -> Code {
    match r.await {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    }
}

/// A session with an approved tool call (so the ledger holds its key),
/// deleted: afterwards it is unknown to every RPC, the file holds none of
/// its rows, the ledger forgot its key, and a tombstone without content
/// stays. A restart purges a ledger entry a crash left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_is_gone_from_every_rpc_the_file_and_the_tool_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let db = cfg.journal.clone();
    let daemon = Daemon::start(cfg.clone()).await.unwrap();
    let mut c = client(&daemon).await;

    let sid = create(&mut c, "approval").await;
    let parked = run_turn(&mut c, exec(&sid, "remember milk")).await;
    let pending = parked.pending_approval.expect("the turn parked");
    c.approve(ApproveRequest {
        session: sid.clone(),
        execution_id: pending.execution_id,
        tool_call_id: pending.tool_call_id,
        request_seq: pending.request_seq,
        approved: Some(true),
        reason: "ok".into(),
        identity: None,
    })
    .await
    .unwrap();
    c.resume(ResumeRequest {
        session: sid.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let records = replay(&mut c, &sid).await;
    assert!(records.len() > 5, "a whole approved turn");
    assert_eq!(
        ledger_entries(&db, &sid),
        1,
        "the tool ran through the ledger"
    );
    let other = create(&mut c, "echo").await;
    run_turn(&mut c, exec(&other, "keep me")).await;
    let other_records = replay(&mut c, &other).await;

    let unknown = "sess-000000000000000000000000";
    let replay_unknown = code_of(c.replay(ReplayRequest {
        session: unknown.into(),
        ..Default::default()
    }))
    .await;

    let deleted = c
        .delete_session(DeleteSessionRequest { uid: sid.clone() })
        .await
        .expect("delete")
        .into_inner();
    assert_eq!(deleted.metadata.unwrap().uid, sid);
    assert_eq!(
        deleted.last_seq,
        records.len() as i64,
        "the session as it was"
    );

    let get = code_of(c.get_session(GetSessionRequest { uid: sid.clone() })).await;
    assert_eq!(get, Code::NotFound);
    let replayed = code_of(c.replay(ReplayRequest {
        session: sid.clone(),
        ..Default::default()
    }))
    .await;
    assert_eq!(
        replayed, replay_unknown,
        "replay answers as for an unknown uid"
    );
    let listed = c
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let uids: Vec<String> = listed
        .sessions
        .iter()
        .map(|s| s.metadata.as_ref().unwrap().uid.clone())
        .collect();
    assert_eq!(uids, std::slice::from_ref(&other), "the listing omits it");
    for again in [
        code_of(c.delete_session(DeleteSessionRequest { uid: sid.clone() })).await,
        exec_code(&mut c, exec(&sid, "again")).await,
        code_of(c.resume(ResumeRequest {
            session: sid.clone(),
            ..Default::default()
        }))
        .await,
    ] {
        assert_eq!(again, Code::NotFound);
    }
    assert_eq!(
        replay(&mut c, &other).await,
        other_records,
        "others untouched"
    );

    let q = |sql: &str| count(&db, sql, &sid);
    assert_eq!(q("SELECT COUNT(*) FROM events WHERE session = ?1"), 0);
    assert_eq!(q("SELECT COUNT(*) FROM sessions WHERE session = ?1"), 0);
    assert_eq!(
        q("SELECT records FROM deleted_sessions WHERE session = ?1"),
        records.len() as i64,
        "the tombstone counts what went"
    );
    assert_eq!(
        q("SELECT COUNT(*) FROM deleted_sessions WHERE session = ?1 AND principal = ''"),
        1,
        "no principal before authentication"
    );
    // The purge follows the commit; give it a moment.
    let mut left = ledger_entries(&db, &sid);
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = ledger_entries(&db, &sid);
    }
    assert_eq!(left, 0, "the ledger forgot the deleted session's keys");
    daemon.shutdown().await;

    // A crash between the journal commit and the purge leaves entries; the
    // next start drops them.
    let mut ledger = db.as_os_str().to_owned();
    ledger.push(".tools.db");
    Connection::open(&ledger)
        .unwrap()
        .execute(
            "INSERT INTO tool_ledger (session, idempotency_key, tool, state) VALUES (?1, 'k', 't', 'started')",
            [&sid],
        )
        .unwrap();
    assert_eq!(ledger_entries(&db, &sid), 1);
    let daemon = Daemon::start(cfg).await.unwrap();
    assert_eq!(ledger_entries(&db, &sid), 0, "start-up purges leftovers");
    daemon.shutdown().await;
}

/// Fork children share the parent's prefix (stored once, under the
/// parent): deleting the parent leaves them whole, verifying, and able to
/// run; the shared records go with the last child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_children_outlive_their_deleted_parent_and_still_verify() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let db = cfg.journal.clone();
    let daemon = Daemon::start(cfg).await.unwrap();
    let mut c = client(&daemon).await;
    let parent = create(&mut c, "echo").await;
    run_turn(&mut c, exec(&parent, "one")).await;
    run_turn(&mut c, exec(&parent, "two")).await;
    let prefix = replay(&mut c, &parent).await;
    let children = c
        .fork(ForkRequest {
            session: parent.clone(),
            at_seq: 0,
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .children;
    assert_eq!(children.len(), 2);
    c.delete_session(DeleteSessionRequest {
        uid: parent.clone(),
    })
    .await
    .expect("a parent with children deletes");
    for child in &children {
        let uid = child.metadata.as_ref().unwrap().uid.clone();
        daemon
            .journal()
            .verify(&uid)
            .await
            .expect("the child verifies");
        let records = replay(&mut c, &uid).await;
        let hashes = |r: &[agentsessions_proto::v1::LogRecord]| {
            r.iter().map(|r| r.content_hash.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            hashes(&records[..prefix.len()]),
            hashes(&prefix),
            "the child's copy of the prefix is intact"
        );
        run_turn(&mut c, exec(&uid, "three")).await;
        let after = replay(&mut c, &uid).await;
        assert_eq!(
            after.len(),
            records.len() + 5,
            "the child still runs a turn"
        );
        daemon
            .journal()
            .verify(&uid)
            .await
            .expect("and verifies after");
    }
    let rows = |sql: &str| count(&db, sql, &parent);
    let kept = "SELECT COUNT(*) FROM events WHERE session = ?1";
    assert_eq!(rows(kept), prefix.len() as i64, "kept for the children");
    for (i, child) in children.iter().enumerate() {
        let uid = child.metadata.as_ref().unwrap().uid.clone();
        c.delete_session(DeleteSessionRequest { uid })
            .await
            .expect("a finished child deletes");
        let left = if i + 1 < children.len() {
            prefix.len() as i64
        } else {
            0
        };
        assert_eq!(rows(kept), left, "freed with the last child");
    }
    assert_eq!(
        rows("SELECT COUNT(*) FROM session_prefixes WHERE ?1 <> ''"),
        0
    );
    daemon.shutdown().await;
}

/// Retention deletes sessions whose last write is older than the period,
/// and keeps one parked on an approval however old it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_stale_sessions_and_keeps_parked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DaemonConfig {
        retain_completed: Some(Duration::from_secs(2)),
        retention_interval: Duration::from_millis(100),
        lease: None,
        ..config(dir.path())
    };
    let db = cfg.journal.clone();
    let daemon = Daemon::start(cfg).await.unwrap();
    let mut c = client(&daemon).await;
    let done = create(&mut c, "echo").await;
    run_turn(&mut c, exec(&done, "hi")).await;
    let parked = create(&mut c, "approval").await;
    let frame = run_turn(&mut c, exec(&parked, "remember milk")).await;
    assert!(frame.pending_approval.is_some(), "parked");

    let mut gone = false;
    for _ in 0..200 {
        if code_of(c.get_session(GetSessionRequest { uid: done.clone() })).await == Code::NotFound {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the completed session was deleted by retention");
    // More passes run; the parked one stays.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let kept = c
        .get_session(GetSessionRequest {
            uid: parked.clone(),
        })
        .await
        .expect("the parked session is kept")
        .into_inner();
    assert!(kept.pending_approval.is_some());
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM deleted_sessions WHERE session = ?1",
            &done
        ),
        1
    );
    daemon.shutdown().await;
}
