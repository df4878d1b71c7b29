//! A compact gRPC bad-input matrix: one row per documented refusal
//! (surface.md §2e). The exhaustive matrix for our daemon (50+ rows) is
//! `shells/tests/daemon_bad_input.rs`; this one only holds what any
//! implementation of the contract must answer the same way.

use agentsessions_proto::v1::{
    ApproveRequest, CancelRequest, DeleteSessionRequest, ForkRequest, GetSessionRequest,
    IdentityRef, ListSessionsRequest,
};
use tonic::Code;

use super::support::{session, turn_ok};
use super::{Check, CheckResult, Failure, Verdict};
use crate::client::{self, ExecOpts};
use crate::env::Env;
use crate::harnesses::ECHO;
use crate::host::BoxFuture;

pub(super) fn checks() -> Vec<Check> {
    vec![check!(
        "grpc_bad_input_matrix",
        "surface.md §2e error table",
        matrix
    )]
}

const MISSING: &str = "sess-0000000000000000deadbeef";

fn code<T>(r: Result<T, tonic::Status>) -> Code {
    r.map_or_else(|s| s.code(), |_| Code::Ok)
}

async fn matrix(env: &mut Env) -> CheckResult {
    env.start().await?;
    let sid = session(env, ECHO).await?;
    turn_ok(env, &sid, &["one"], ExecOpts::default()).await?;
    let mut c = env.client()?;
    let fork = |count: i32| ForkRequest {
        session: sid.clone(),
        count,
        ..ForkRequest::default()
    };
    let mut rows: Vec<(&str, Code, Vec<Code>)> = Vec::new();

    let t = client::exec(&mut c, MISSING, &["x"], ExecOpts::default()).await;
    rows.push(("Exec on an unknown session", t.code(), vec![Code::NotFound]));
    let t = client::exec(
        &mut c,
        &sid,
        &["x"],
        ExecOpts {
            harness: "conf-no-such-harness".into(),
            ..ExecOpts::default()
        },
    )
    .await;
    rows.push((
        "Exec with an unknown harness override",
        t.code(),
        vec![
            Code::FailedPrecondition,
            Code::NotFound,
            Code::InvalidArgument,
        ],
    ));
    rows.push((
        "GetSession of an unknown uid",
        code(
            c.get_session(GetSessionRequest {
                uid: MISSING.into(),
            })
            .await,
        ),
        vec![Code::NotFound],
    ));
    rows.push((
        "Resume of an unknown uid",
        code(client::resume(&mut c, MISSING).await),
        vec![Code::NotFound],
    ));
    rows.push((
        "Fork count 129",
        code(c.fork(fork(129)).await),
        vec![Code::InvalidArgument],
    ));
    let mut names = fork(2);
    names.child_names = vec!["only-one".into()];
    rows.push((
        "Fork with child_names of the wrong length",
        code(c.fork(names).await),
        vec![Code::InvalidArgument],
    ));
    let mut ident = fork(1);
    ident.identity = Some(IdentityRef {
        principal: "someone".into(),
        ..IdentityRef::default()
    });
    rows.push((
        "Fork with identity set",
        code(c.fork(ident).await),
        vec![Code::InvalidArgument],
    ));
    let list = ListSessionsRequest {
        project: String::new(),
        page_size: 10,
        page_token: "not-a-token".into(),
    };
    rows.push((
        "ListSessions with a bad page token",
        code(c.list_sessions(list).await),
        vec![Code::InvalidArgument],
    ));
    let approve = ApproveRequest {
        session: sid.clone(),
        execution_id: "e".into(),
        tool_call_id: "c1".into(),
        request_seq: 1,
        approved: None,
        reason: String::new(),
        identity: None,
    };
    rows.push((
        "Approve without the approved flag",
        code(c.approve(approve).await),
        vec![Code::InvalidArgument],
    ));
    // The reference declares DeleteSession and answers UNIMPLEMENTED; a
    // host that implements it refuses what it cannot delete.
    rows.push((
        "DeleteSession with an empty uid",
        code(
            c.delete_session(DeleteSessionRequest { uid: String::new() })
                .await,
        ),
        vec![Code::InvalidArgument, Code::Unimplemented],
    ));
    rows.push((
        "DeleteSession of an unknown session",
        code(
            c.delete_session(DeleteSessionRequest {
                uid: "sess-conformance-never-created".into(),
            })
            .await,
        ),
        vec![Code::NotFound, Code::Unimplemented],
    ));
    let cancel = CancelRequest {
        session: sid.clone(),
        ..CancelRequest::default()
    };
    // The reference declares Cancel and answers UNIMPLEMENTED; a host that
    // implements it refuses a session whose execution already completed.
    rows.push((
        "Cancel of a completed execution",
        code(c.cancel(cancel).await),
        vec![Code::FailedPrecondition, Code::Unimplemented],
    ));

    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, got, want)| !want.contains(got))
        .map(|(what, got, want)| format!("{what}: got {got:?}, want {want:?}"))
        .collect();
    if !wrong.is_empty() {
        return Err(Failure(wrong.join("; ")));
    }
    env.note(format!(
        "{} rows; the full matrix is shells/tests/daemon_bad_input.rs",
        rows.len()
    ));
    Ok(Verdict::Pass)
}
