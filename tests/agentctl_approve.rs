//! `agentctl approve` / `deny` against the built binary.
//!
//! Both commit the decision and then resume the session, so one command
//! takes a parked turn to its receipt (as the reference CLI does);
//! `--no-resume` stops after the commit. A resume that fails after the
//! commit exits with the usual 10 + gRPC code and says the decision is in;
//! that path runs against a fake Sessions server whose Resume fails, since
//! a real daemon's resume of the `approval` harness does not.

use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use agentsessions_proto::grpc::sessions_server::{Sessions, SessionsServer};
use agentsessions_proto::v1::{
    ApprovalRef, ApproveRequest, ApproveResponse, CancelRequest, CreateSessionRequest,
    DeleteSessionRequest, ExecRequest, ExecUpdate, ForkRequest, ForkResponse, GetSessionRequest,
    ListSessionsRequest, ListSessionsResponse, LogRecord, ReplayRequest, ResumeRequest, Session,
    SuspendRequest,
};
use tonic::codegen::tokio_stream;
use tonic::{Request, Response, Status};

#[path = "support/cli.rs"]
mod cli;
use cli::{agentctl, stderr, stdout};

/// stdout as lines with runs of blanks squashed, so the column padding of
/// record lines does not matter.
fn lines(o: &Output) -> Vec<String> {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// An `approval` session in `dir`'s journal whose first turn parked on
/// the gated `append_note` call (APPROVAL_REQUEST at seq 4, head at 5).
fn parked(dir: &Path, note: &str) -> String {
    let o = agentctl(dir, &["create", "--harness", "approval"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sid = stdout(&o).trim().to_owned();
    let o = agentctl(dir, &["exec", "--session", &sid, "--input", note]);
    assert!(
        lines(&o).iter().any(|l| l.starts_with("pending_approval ")),
        "{}",
        stdout(&o)
    );
    sid
}

fn notes(dir: &Path, sid: &str) -> Option<String> {
    std::fs::read_to_string(dir.join("notes").join(format!("{sid}.notes"))).ok()
}

#[test]
fn approve_resumes_the_turn_and_prints_the_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember milk");
    let o = agentctl(d, &["approve", "--session", &sid, "--reason", "fine"]);
    assert_eq!(
        lines(&o),
        [
            format!(
                "session {sid} decision committed seq=6 approved=true compute=COMPUTE_LIVE last_seq=10"
            ),
            "seq=6 EVENT_APPROVAL_RESULT call=c1 approved=true request_seq=4 reason=fine".into(),
            "seq=7 EVENT_TOOL_RESULT call=c1 ok".into(),
            "seq=8 EVENT_OUTPUT assistant: append_note approved and done".into(),
            "seq=9 EVENT_END".into(),
            "seq=10 EVENT_LIFECYCLE RESUME".into(),
        ]
    );
    let note = notes(d, &sid).expect("the approved tool ran");
    assert!(note.contains("remember milk"), "{note}");
    // Nothing is left waiting, and the chain holds the whole story.
    let get = lines(&agentctl(d, &["get", "--session", &sid]));
    assert_eq!(get.len(), 1, "no pending_approval line: {get:?}");
    assert!(
        get[0].ends_with("last_seq=10 compute=COMPUTE_LIVE"),
        "{get:?}"
    );
    let o = agentctl(d, &["verify", "--session", &sid]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn deny_resumes_the_turn_and_prints_the_denial_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember eggs");
    // The positional UID works as well as --session.
    let out = lines(&agentctl(d, &["deny", &sid, "--reason", "not today"]));
    assert_eq!(
        out[0],
        format!(
            "session {sid} decision committed seq=6 approved=false compute=COMPUTE_LIVE last_seq=10"
        )
    );
    assert_eq!(
        out[1..4],
        [
            "seq=6 EVENT_APPROVAL_RESULT call=c1 approved=false request_seq=4 reason=not today",
            "seq=7 EVENT_TOOL_RESULT call=c1 error: Tool execution denied by approval decision.",
            "seq=8 EVENT_OUTPUT assistant: append_note denied: Tool execution denied by approval decision.",
        ]
    );
    assert_eq!(
        out[4..],
        ["seq=9 EVENT_END", "seq=10 EVENT_LIFECYCLE RESUME"]
    );
    assert_eq!(notes(d, &sid), None, "a denied tool never runs");
}

#[test]
fn no_resume_commits_only_and_leaves_the_turn_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember tea");
    let o = agentctl(d, &["approve", "--session", &sid, "--no-resume"]);
    assert_eq!(
        lines(&o),
        [
            format!(
                "session {sid} decision committed seq=6 approved=true compute=COMPUTE_COLD last_seq=6"
            ),
            "seq=6 EVENT_APPROVAL_RESULT call=c1 approved=true request_seq=4 reason=".into(),
        ]
    );
    // Decided but not run: nothing pending, no receipt, no effect.
    let get = lines(&agentctl(d, &["get", "--session", &sid]));
    assert_eq!(
        get.len(),
        1,
        "the decision cleared pending_approval: {get:?}"
    );
    assert!(
        get[0].ends_with("last_seq=6 compute=COMPUTE_COLD"),
        "{get:?}"
    );
    assert_eq!(notes(d, &sid), None);
    // A new turn is refused until the decided call has its receipt.
    let o = agentctl(d, &["exec", "--session", &sid, "--input", "next"]);
    assert_eq!(o.status.code(), Some(19), "{}", stderr(&o));
    assert!(stderr(&o).contains("FAILED_PRECONDITION"), "{}", stderr(&o));
    // Deciding again finds the call decided and its turn unfinished, so
    // it points at resume.
    let o = agentctl(d, &["approve", "--session", &sid]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "session {sid} has no pending approval: call c1 was already decided at seq 6 \
             (approved=true), but its turn has not finished: run `agentctl resume --session {sid}`"
        )),
        "{}",
        stderr(&o)
    );
    // `resume` finishes what the decision started.
    let o = agentctl(d, &["resume", "--session", &sid]);
    assert_eq!(
        lines(&o),
        [format!(
            "session {sid} resume compute=COMPUTE_LIVE last_seq=10"
        )]
    );
    assert!(notes(d, &sid).is_some_and(|n| n.contains("remember tea")));
}

#[test]
fn a_second_approve_on_a_finished_turn_says_it_was_decided_and_suggests_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember rice");
    lines(&agentctl(d, &["deny", "--session", &sid]));
    for again in ["approve", "deny"] {
        let o = agentctl(d, &[again, "--session", &sid]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(
            err.trim(),
            format!(
                "agentctl: session {sid} has no pending approval: call c1 was already decided \
                 at seq 6 (approved=false) and its turn is over"
            )
        );
        assert!(!err.contains("resume"), "resuming would do nothing: {err}");
        assert!(stdout(&o).is_empty());
    }
    // Nothing was written by the refused attempts.
    let get = lines(&agentctl(d, &["get", "--session", &sid]));
    assert!(
        get[0].ends_with("last_seq=10 compute=COMPUTE_LIVE"),
        "{get:?}"
    );
    // A fork child inherits the decided gate: still nothing to do.
    let child = stdout(&agentctl(d, &["fork", "--session", &sid]));
    let child = child.split(' ').nth(1).unwrap();
    let o = agentctl(d, &["approve", child]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "agentctl: session {child} has no pending approval: call c1 was already decided at \
             seq 6 (approved=false), before the fork"
        )
    );
}

#[test]
fn without_a_gate_approve_suggests_resume_only_for_an_interrupted_turn() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = agentctl(d, &["exec", "--input", "hi"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sid = stdout(&o)
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("session "))
        .unwrap()
        .to_owned();
    let o = agentctl(d, &["approve", &sid]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "agentctl: session {sid} has no pending approval: none of its turns is waiting for a \
             decision"
        )
    );
    // A child forked inside the turn has it unfinished: resume re-drives it.
    let o = agentctl(d, &["fork", "--session", &sid, "--at", "4"]);
    let out = stdout(&o);
    let child = out.split(' ').nth(1).unwrap();
    let o = agentctl(d, &["approve", child]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "agentctl: session {child} has no pending approval: its last turn was interrupted: \
             run `agentctl resume --session {child}` to finish it"
        )
    );
}

#[test]
fn approve_json_prints_one_approve_response_with_the_resumed_session() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember jam");
    let o = agentctl(d, &["approve", "--session", &sid, "--json"]);
    let out = lines(&o);
    assert_eq!(out.len(), 1, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
    assert_eq!(v["decision"]["seq"], "6");
    assert_eq!(v["decision"]["event"]["kind"], "EVENT_APPROVAL_RESULT");
    assert_eq!(v["session"]["last_seq"], "10", "the resumed session");
    assert_eq!(v["session"]["compute_state"], "COMPUTE_LIVE");
}

// ---- a resume that fails after the commit ---------------------------------

/// A Sessions server with one parked session: Approve commits seq 6 and
/// Resume fails with `resume_fails`. It records the calls it served.
#[derive(Clone)]
struct FailingResume {
    resume_fails: tonic::Code,
    calls: Arc<Mutex<Vec<String>>>,
}

const SID: &str = "sess-00000000000000000000000a";

fn session(last_seq: i64, pending: bool) -> Session {
    Session {
        metadata: Some(agentsessions_proto::v1::ResourceMetadata {
            uid: SID.to_owned(),
            ..Default::default()
        }),
        harness: "approval".to_owned(),
        last_seq,
        pending_approval: pending.then(|| ApprovalRef {
            execution_id: "e1".to_owned(),
            tool_call_id: "c1".to_owned(),
            request_seq: 4,
        }),
        ..Default::default()
    }
}

impl FailingResume {
    fn called(&self, what: String) {
        self.calls.lock().unwrap().push(what);
    }
}

type Unused<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Sessions for FailingResume {
    async fn get_session(&self, r: Request<GetSessionRequest>) -> Unused<Session> {
        self.called(format!("GetSession {}", r.into_inner().uid));
        Ok(Response::new(session(5, true)))
    }
    async fn approve(&self, r: Request<ApproveRequest>) -> Unused<ApproveResponse> {
        let r = r.into_inner();
        self.called(format!(
            "Approve {} {} {} {} {:?}",
            r.session, r.execution_id, r.tool_call_id, r.request_seq, r.approved
        ));
        Ok(Response::new(ApproveResponse {
            session: Some(session(6, false)),
            decision: Some(LogRecord {
                seq: 6,
                ..Default::default()
            }),
        }))
    }
    async fn resume(&self, r: Request<ResumeRequest>) -> Unused<Session> {
        self.called(format!("Resume {}", r.into_inner().session));
        Err(Status::new(self.resume_fails, "the harness is gone"))
    }

    type ExecStream = tokio_stream::Empty<Result<ExecUpdate, Status>>;
    type ReplayStream = tokio_stream::Empty<Result<LogRecord, Status>>;
    async fn create_session(&self, _: Request<CreateSessionRequest>) -> Unused<Session> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_sessions(&self, _: Request<ListSessionsRequest>) -> Unused<ListSessionsResponse> {
        Err(Status::unimplemented("fake"))
    }
    async fn delete_session(&self, _: Request<DeleteSessionRequest>) -> Unused<Session> {
        Err(Status::unimplemented("fake"))
    }
    async fn exec(&self, _: Request<ExecRequest>) -> Unused<Self::ExecStream> {
        Err(Status::unimplemented("fake"))
    }
    async fn replay(&self, _: Request<ReplayRequest>) -> Unused<Self::ReplayStream> {
        Err(Status::unimplemented("fake"))
    }
    async fn cancel(&self, _: Request<CancelRequest>) -> Unused<Session> {
        Err(Status::unimplemented("fake"))
    }
    async fn suspend(&self, _: Request<SuspendRequest>) -> Unused<Session> {
        Err(Status::unimplemented("fake"))
    }
    async fn fork(&self, _: Request<ForkRequest>) -> Unused<ForkResponse> {
        Err(Status::unimplemented("fake"))
    }
}

/// Runs `agentctl --server <fake> args` against a fresh fake whose Resume
/// fails with `code`; returns the output and the calls the fake served.
async fn against_fake(code: tonic::Code, args: &[&str]) -> (Output, Vec<String>) {
    let fake = FailingResume {
        resume_fails: code,
        calls: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SessionsServer::new(fake.clone()))
            .serve_with_incoming(incoming),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut argv = vec!["--server".to_owned(), addr];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let cwd = dir.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        agentctl(&cwd, &argv)
    })
    .await
    .unwrap();
    server.abort();
    let calls = fake.calls.lock().unwrap().clone();
    (out, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_fails_after_the_commit_exits_with_its_grpc_code_and_says_the_decision_is_in()
{
    for (code, exit) in [
        (tonic::Code::Unavailable, 24),
        (tonic::Code::FailedPrecondition, 19),
    ] {
        let (o, calls) = against_fake(code, &["approve", SID]).await;
        assert_eq!(o.status.code(), Some(exit), "{code:?}: {}", stderr(&o));
        assert_eq!(
            calls,
            [
                format!("GetSession {SID}"),
                format!("Approve {SID} e1 c1 4 Some(true)"),
                format!("Resume {SID}"),
            ]
        );
        let err = stderr(&o);
        assert!(
            err.contains("the decision was committed at seq 6, but resuming failed"),
            "{err}"
        );
        assert!(
            err.contains(&format!("agentctl resume --session {SID}")),
            "{err}"
        );
        assert!(
            err.contains("Resume: ") && err.contains("the harness is gone"),
            "{err}"
        );
        assert!(
            stdout(&o).is_empty(),
            "nothing is claimed on stdout: {}",
            stdout(&o)
        );
    }
    // --no-resume never calls Resume, so the same server succeeds.
    let (o, calls) = against_fake(tonic::Code::Unavailable, &["deny", SID, "--no-resume"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        calls.last().unwrap(),
        &format!("Approve {SID} e1 c1 4 Some(false)")
    );
    assert!(
        stdout(&o).starts_with(&format!(
            "session {SID} decision committed seq=6 approved=false"
        )),
        "{}",
        stdout(&o)
    );
}

#[test]
fn cancel_resolves_a_parked_turn_and_a_later_approve_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember bread");
    let out = lines(&agentctl(
        d,
        &["cancel", "--session", &sid, "--reason", "not needed"],
    ));
    assert_eq!(
        out,
        [format!(
            "session {sid} cancel compute=COMPUTE_COLD last_seq=7"
        )]
    );
    let replay = lines(&agentctl(d, &["replay", "--session", &sid]));
    assert_eq!(
        replay[replay.len() - 2..],
        [
            "seq=6 EVENT_LIFECYCLE CANCEL not needed",
            "seq=7 EVENT_END CANCELED"
        ],
        "{replay:?}"
    );
    // Nothing is pending any more; naming the canceled request is refused.
    let o = agentctl(d, &["approve", "--session", &sid]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "agentctl: session {sid} has no pending approval: the turn that asked about call c1 \
             ended without a decision"
        ),
        "a canceled turn is not resumed, so resume is not suggested"
    );
    let o = agentctl(d, &["replay", "--session", &sid, "--json"]);
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    let exec_id = first["event"]["execution_id"].as_str().unwrap().to_owned();
    let o = agentctl(
        d,
        &[
            "approve",
            "--session",
            &sid,
            "--execution",
            &exec_id,
            "--call",
            "c1",
            "--request-seq",
            "4",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(19),
        "10 + FAILED_PRECONDITION: {}",
        stderr(&o)
    );
    assert_eq!(notes(d, &sid), None, "the gated tool never ran");
    let o = agentctl(d, &["verify", "--session", &sid]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `agentctl delete`: refused (exit 10 + FAILED_PRECONDITION) while the
/// turn is parked, then, after a cancel, the session is gone: `get` is
/// NOT_FOUND, `list` omits it, and the journal file keeps only its
/// tombstone.
#[test]
fn delete_refuses_a_parked_session_and_removes_it_once_canceled() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember eggs");
    let o = agentctl(d, &["delete", "--session", &sid]);
    assert_eq!(o.status.code(), Some(19), "{}", stderr(&o));
    assert!(stderr(&o).contains("cancel it first"), "{}", stderr(&o));
    lines(&agentctl(d, &["cancel", "--session", &sid]));
    let out = lines(&agentctl(d, &["delete", "--session", &sid]));
    assert_eq!(
        out,
        [format!(
            "session {sid} deleted compute=COMPUTE_COLD last_seq=7"
        )]
    );
    let o = agentctl(d, &["get", "--session", &sid]);
    assert_eq!(o.status.code(), Some(15), "{}", stderr(&o));
    let listed = stdout(&agentctl(d, &["list"]));
    assert!(!listed.contains(&sid), "{listed}");
    let o = agentctl(d, &["delete", "--session", &sid]);
    assert_eq!(o.status.code(), Some(15), "a second delete: {}", stderr(&o));
}

#[test]
fn get_shows_the_gated_call_and_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sid = parked(d, "remember rice");
    let get = lines(&agentctl(d, &["get", "--session", &sid]));
    assert_eq!(
        get.last().map(String::as_str),
        Some(r#"pending_call tool=append_note args={"text":"remember rice"}"#),
        "{get:?}"
    );
}
