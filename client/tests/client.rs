//! The typed client against a real daemon (in process, SQLite journal,
//! built-in harnesses): a turn gathered, a decision that resumes, every
//! page of a listing, replay, fork, typed errors, and a retry that is
//! refused rather than repeated.

#[path = "../../shells/tests/support/daemon.rs"]
mod support;

use agentsessions_client::{Client, ClientError, Options, Retry};
use agentsessions_proto::v1::{EventKind, ExecRequest, Session};
use agentsessions_shells::daemon::app::Daemon;

async fn daemon(dir: &std::path::Path) -> (Daemon, Client) {
    let d = Daemon::start(support::config(dir)).await.unwrap();
    let c = Client::connect(&d.addr.to_string(), Options::default())
        .await
        .unwrap();
    (d, c)
}

fn uid(s: &Session) -> String {
    s.metadata.as_ref().unwrap().uid.clone()
}

fn kinds(records: &[agentsessions_proto::v1::LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .map(|r| EventKind::try_from(r.event.as_ref().unwrap().kind).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_gathered_with_its_records_output_and_session() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, mut c) = daemon(dir.path()).await;
    let s = c.create("echo", "t").await.unwrap();
    let turn = c.exec_text(&uid(&s), "hello").await.unwrap();
    assert!(turn.output().contains("hello"), "{}", turn.output());
    assert!(turn.pending().is_none());
    assert_eq!(turn.session.last_seq, turn.records.last().unwrap().seq);
    assert_eq!(kinds(&turn.records).last(), Some(&EventKind::EventEnd));
    // Replay returns the same records, the whole journal from 1.
    let all = c.replay(&uid(&s), 1, 0).await.unwrap();
    assert_eq!(&all[all.len() - turn.records.len()..], &turn.records[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_commits_then_resumes_and_the_turn_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, mut c) = daemon(dir.path()).await;
    for approved in [true, false] {
        let s = c.create("approval", "").await.unwrap();
        let turn = c.exec_text(&uid(&s), "remember milk").await.unwrap();
        let pending = turn.pending().cloned().expect("parked on the gate");
        let (decision, resumed) = c
            .approve(&turn.session, &pending, approved, "test")
            .await
            .unwrap();
        assert_eq!(
            kinds(std::slice::from_ref(&decision)),
            [EventKind::EventApprovalResult]
        );
        assert!(resumed.pending().is_none());
        assert!(resumed.records.first().unwrap().seq > decision.seq);
        let receipts: Vec<_> = resumed
            .records
            .iter()
            .filter_map(|r| agentsessions_machine::events::body::result(r.event.as_ref()?))
            .collect();
        assert_eq!(receipts.len(), 1, "{:?}", kinds(&resumed.records));
        assert_eq!(receipts[0].is_error, !approved, "{:?}", receipts[0]);
        // Deciding again the other way is refused, typed.
        let again = c.approve(&turn.session, &pending, !approved, "").await;
        assert_eq!(again.unwrap_err().code(), tonic::Code::FailedPrecondition);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reads_every_page_and_fork_makes_children() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, mut c) = daemon(dir.path()).await;
    let mut made = Vec::new();
    for i in 0..7 {
        made.push(uid(&c.create("echo", &format!("s{i}")).await.unwrap()));
    }
    // Pages of two: the client follows every token.
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .raw()
            .list_sessions(agentsessions_proto::v1::ListSessionsRequest {
                project: String::new(),
                page_size: 2,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.sessions.len() <= 2);
        listed.extend(page.sessions.iter().map(uid));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut all: Vec<_> = c.list("").await.unwrap().iter().map(uid).collect();
    all.sort();
    listed.sort();
    made.sort();
    assert_eq!(all, made);
    assert_eq!(listed, made);

    c.exec_text(&made[0], "x").await.unwrap();
    let children = c.fork(&made[0], 0, 3).await.unwrap();
    assert_eq!(children.len(), 3);
    assert!(children.iter().all(|ch| ch.parent_uid == made[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_their_status_and_a_stale_exec_is_refused_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let (_d, mut c) = daemon(dir.path()).await;
    let missing = c.get("sess-nope").await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(matches!(
        missing,
        ClientError::Status {
            call: "GetSession",
            ..
        }
    ));

    let s = c.create("echo", "").await.unwrap();
    let head = c.exec_text(&uid(&s), "one").await.unwrap().session.last_seq;
    // An Exec that names a head the session has left is refused, and the
    // refusal is not retried into a second turn.
    let mut c = c.with_retry(Retry::default());
    let stale = ExecRequest {
        session: uid(&s),
        inputs: vec![agentsessions_client::user_text("two")],
        expected_last_seq: Some(head - 1),
        ..Default::default()
    };
    let err = c.exec(stale).await.unwrap_err();
    assert!(
        matches!(
            err.code(),
            tonic::Code::Aborted | tonic::Code::FailedPrecondition
        ),
        "{err}"
    );
    assert_eq!(
        c.get(&uid(&s)).await.unwrap().last_seq,
        head,
        "nothing written"
    );
}
