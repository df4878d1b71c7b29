//! The daemon end to end over real gRPC on loopback: the SQLite journal,
//! the local runtime serving built-in harnesses on unix sockets, the echo
//! model and the tool ledger.

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    ApproveRequest, EventKind, ExecRequest, ForkRequest, GetSessionRequest, LogRecord,
    ResumeRequest, Session, exec_update::Update,
};
use agentsessions_shells::daemon::app::Daemon;
use tonic::transport::Channel;

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, replay, text};

/// Runs one Exec and returns (records, final session frame if any).
async fn exec(
    c: &mut SessionsClient<Channel>,
    session: &str,
    input: Option<&str>,
) -> Result<(Vec<LogRecord>, Vec<Session>), tonic::Status> {
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: input.map(text).into_iter().collect(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let (mut records, mut sessions) = (Vec::new(), Vec::new());
    while let Some(update) = stream.message().await? {
        match update.update {
            Some(Update::Record(r)) => records.push(r),
            Some(Update::Session(s)) => sessions.push(s),
            _ => {}
        }
    }
    Ok((records, sessions))
}

fn kinds(records: &[LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .map(|r| EventKind::try_from(r.event.as_ref().unwrap().kind).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_turn_over_grpc_is_journaled_replayed_and_forked() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&daemon).await;
    let sid = create(&mut c, "").await;
    let (records, sessions) = exec(&mut c, &sid, Some("hello")).await.unwrap();
    assert_eq!(sessions.len(), 1, "one Session frame, first");
    assert_eq!(
        kinds(&records),
        vec![
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventModelCall,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );
    assert_eq!(
        replay(&mut c, &sid).await,
        records,
        "replay is byte-identical"
    );
    agentsessions_machine::chain::verify(&records).unwrap();

    let fork = c
        .fork(ForkRequest {
            session: sid.clone(),
            at_seq: 3,
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fork.children.len(), 2);
    let child = fork.children[0].metadata.clone().unwrap().uid;
    let child_records = replay(&mut c, &child).await;
    assert_eq!(
        &child_records[..3],
        &records[..3],
        "shared prefix, same hashes"
    );
    assert_eq!(child_records[3].prev_hash, records[2].content_hash);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_parks_then_approve_and_resume_run_the_tool_once() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&daemon).await;
    let sid = create(&mut c, "approval").await;
    let (_, sessions) = exec(&mut c, &sid, Some("remember milk")).await.unwrap();
    let pending = sessions
        .last()
        .and_then(|s| s.pending_approval.clone())
        .expect("parked with a pending approval");
    let decided = c
        .approve(ApproveRequest {
            session: sid.clone(),
            execution_id: pending.execution_id.clone(),
            tool_call_id: pending.tool_call_id.clone(),
            request_seq: pending.request_seq,
            approved: Some(true),
            reason: "fine".into(),
            identity: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(decided.decision.is_some());
    #[allow(deprecated)]
    let resumed = c
        .resume(ResumeRequest {
            session: sid.clone(),
            boot: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resumed.pending_approval.is_none());
    let all = replay(&mut c, &sid).await;
    let k = kinds(&all);
    assert!(k.contains(&EventKind::EventToolResult), "{k:?}");
    assert_eq!(k.last(), Some(&EventKind::EventLifecycle));
    let notes = std::fs::read_to_string(dir.path().join("notes").join(format!("{sid}.notes")))
        .expect("the tool wrote its note");
    assert_eq!(notes.lines().count(), 1, "{notes}");
    let got = c
        .get_session(GetSessionRequest { uid: sid.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.last_seq, all.len() as i64);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_session_is_not_found_and_the_journal_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let mut c = client(&daemon).await;
    let err = exec(&mut c, "sess-nope", Some("x")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(replay(&mut c, "sess-nope").await.is_empty());
    daemon.shutdown().await;
}

/// Two hosts on one journal: the driver's record cache must never hide
/// what the other host appended (each read starts at the cached head and
/// takes the rest from the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_see_records_another_host_appended_to_the_same_journal() {
    let dir = tempfile::tempdir().unwrap();
    let a = Daemon::start(config(dir.path())).await.unwrap();
    let b = Daemon::start(config(dir.path())).await.unwrap();
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let sid = create(&mut ca, "").await;
    let (first, _) = exec(&mut ca, &sid, Some("one")).await.unwrap();
    assert_eq!(first.last().unwrap().seq, 5);
    // A again: its cache now holds 1..=5 from its own appends.
    let (second, _) = exec(&mut ca, &sid, Some("two")).await.unwrap();
    assert_eq!(second[0].seq, 6);
    // B appends three turns A has never seen.
    for i in 0..3 {
        let (r, _) = exec(&mut cb, &sid, Some(&format!("b{i}"))).await.unwrap();
        assert_eq!(r[0].seq, 11 + 5 * i);
    }
    let (third, _) = exec(&mut ca, &sid, Some("three")).await.unwrap();
    assert_eq!(third[0].seq, 26, "A starts after B's records");
    assert_eq!(
        third[0].prev_hash,
        replay(&mut cb, &sid).await[24].content_hash
    );
    let all = replay(&mut ca, &sid).await;
    assert_eq!(all.len(), 30);
    assert_eq!(
        all,
        replay(&mut cb, &sid).await,
        "both hosts read one chain"
    );
    agentsessions_machine::chain::verify(&all).unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_daemon_refuses_to_start_on_a_journal_that_registered_one_of_its_static_names() {
    use agentsessions_shells::daemon::app::StartError;
    use agentsessions_shells::journal::sqlite::{SqliteJournal, SqliteOptions};
    use agentsessions_shells::journal::{HarnessRegistration, JournalStore};
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    {
        // Another host registered "echo", which this daemon serves built in.
        let store = SqliteJournal::open(&cfg.journal, SqliteOptions::default()).unwrap();
        let row = HarnessRegistration {
            name: "echo".into(),
            uid: "harness-000000000000000000000001".into(),
            spec: "{}".into(),
            spec_digest: "sha256:00".into(),
        };
        store.register_harness(row, 1).await.unwrap();
    }
    let Err(err) = Daemon::start(cfg).await else {
        panic!("a daemon started over a registration of a static name");
    };
    assert!(matches!(err, StartError::Registry(_)), "{err}");
    assert!(err.to_string().contains("registration row"), "{err}");
}
