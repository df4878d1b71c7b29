//! The table of invalid requests: one row per refusal, with its status.

use super::*;

pub(super) fn rows(w: &World) -> Vec<Row> {
    use Code::*;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let unknown = "sess-000000000000000000000000";
    let (e, p, h) = (w.echo.as_str(), w.parked.as_str(), w.held.as_str());
    let (x, t, q) = (w.exec_id.as_str(), w.call_id.as_str(), w.request_seq);
    let mut out = vec![
        // CreateSession
        row(
            "create: unknown harness",
            InvalidArgument,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "nope".into(),
                    ..Default::default()
                }),
            }),
        ),
        row(
            "create: harness name in the wrong case",
            InvalidArgument,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "ECHO".into(),
                    ..Default::default()
                }),
            }),
        ),
        row(
            "create: retired registered harness",
            FailedPrecondition,
            Call::Create(CreateSessionRequest {
                session: Some(Session {
                    harness: "old".into(),
                    ..Default::default()
                }),
            }),
        ),
        // GetSession
        row(
            "get: empty uid",
            InvalidArgument,
            Call::Get(GetSessionRequest { uid: String::new() }),
        ),
        row(
            "get: unknown uid",
            NotFound,
            Call::Get(GetSessionRequest {
                uid: unknown.into(),
            }),
        ),
        // ListSessions
        row(
            "list: token is not base64",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: "not a token!".into(),
                ..Default::default()
            }),
        ),
        row(
            "list: token without a separator",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: b64("12345"),
                ..Default::default()
            }),
        ),
        row(
            "list: token with a non-numeric time",
            InvalidArgument,
            Call::List(ListSessionsRequest {
                page_token: b64("yesterday\0sess-1"),
                ..Default::default()
            }),
        ),
        // DeleteSession
        row(
            "delete: empty uid",
            InvalidArgument,
            Call::Delete(DeleteSessionRequest { uid: String::new() }),
        ),
        row(
            "delete: unknown uid",
            NotFound,
            Call::Delete(DeleteSessionRequest {
                uid: unknown.into(),
            }),
        ),
        row(
            "delete: a running turn",
            FailedPrecondition,
            Call::Delete(DeleteSessionRequest { uid: h.into() }),
        ),
        row(
            "delete: a turn parked on an approval",
            FailedPrecondition,
            Call::Delete(DeleteSessionRequest { uid: p.into() }),
        ),
        // Cancel
        row(
            "cancel: a running turn, naming another execution",
            FailedPrecondition,
            Call::Cancel(CancelRequest {
                session: h.into(),
                execution_id: "x".into(),
                reason: "stop".into(),
            }),
        ),
        row(
            "cancel: a parked turn, naming another execution",
            FailedPrecondition,
            Call::Cancel(CancelRequest {
                session: p.into(),
                execution_id: "x".into(),
                reason: "stop".into(),
            }),
        ),
        row(
            "cancel: a completed execution",
            FailedPrecondition,
            Call::Cancel(CancelRequest {
                session: e.into(),
                ..Default::default()
            }),
        ),
        row(
            "cancel: unknown session",
            NotFound,
            Call::Cancel(CancelRequest {
                session: unknown.into(),
                ..Default::default()
            }),
        ),
        row(
            "cancel: empty",
            InvalidArgument,
            Call::Cancel(CancelRequest::default()),
        ),
        // Exec
        row(
            "exec: unknown session",
            NotFound,
            Call::Exec(exec(unknown, Some("x"))),
        ),
        row(
            "exec: auto-create on an unknown harness",
            InvalidArgument,
            Call::Exec(ExecRequest {
                harness: "nope".into(),
                ..exec("", Some("x"))
            }),
        ),
        row(
            "exec: auto-create on a retired harness",
            FailedPrecondition,
            Call::Exec(ExecRequest {
                harness: "old".into(),
                ..exec("", Some("x"))
            }),
        ),
        row(
            "exec: override onto an unknown harness",
            InvalidArgument,
            Call::Exec(ExecRequest {
                harness: "nope".into(),
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: static session overridden onto a registered harness",
            FailedPrecondition,
            Call::Exec(ExecRequest {
                harness: "reg".into(),
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: a Struct nested past the decode limit",
            InvalidArgument,
            Call::Exec(ExecRequest {
                inputs: vec![nested_data(60)],
                ..exec(e, None)
            }),
        ),
        cas_row(
            "exec: stale expected_last_seq",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(3),
                ..exec(e, Some("x"))
            }),
        ),
        cas_row(
            "exec: expected_last_seq past the head",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(99),
                ..exec(e, Some("x"))
            }),
        ),
        cas_row(
            "exec: explicit expected_last_seq 0 on a non-empty session",
            Call::Exec(ExecRequest {
                expected_last_seq: Some(0),
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: deadline already past",
            DeadlineExceeded,
            Call::Exec(ExecRequest {
                deadline_unix: 1,
                ..exec(e, Some("x"))
            }),
        ),
        row(
            "exec: new input while an approval is pending",
            FailedPrecondition,
            Call::Exec(exec(p, Some("x"))),
        ),
        row(
            "exec: overlaps a held turn",
            Aborted,
            Call::Exec(exec(h, Some("x"))),
        ),
        row(
            "exec: recovery overlaps a held turn",
            Aborted,
            Call::Exec(exec(h, None)),
        ),
        // Approve
        row(
            "approve: empty session",
            InvalidArgument,
            approve("", x, t, q, Some(true)),
        ),
        row(
            "approve: empty execution id",
            InvalidArgument,
            approve(p, "", t, q, Some(true)),
        ),
        row(
            "approve: empty tool call id",
            InvalidArgument,
            approve(p, x, "", q, Some(true)),
        ),
        row(
            "approve: request_seq 0",
            InvalidArgument,
            approve(p, x, t, 0, Some(true)),
        ),
        row(
            "approve: negative request_seq",
            InvalidArgument,
            approve(p, x, t, -4, Some(true)),
        ),
        row(
            "approve: approved absent",
            InvalidArgument,
            approve(p, x, t, q, None),
        ),
        row(
            "approve: unknown session",
            NotFound,
            approve(unknown, x, t, q, Some(true)),
        ),
        row(
            "approve: wrong execution id",
            FailedPrecondition,
            approve(p, "0000000000000000", t, q, Some(true)),
        ),
        row(
            "approve: wrong tool call id",
            FailedPrecondition,
            approve(p, x, "no-such-call", q, Some(true)),
        ),
        row(
            "approve: wrong request_seq",
            FailedPrecondition,
            approve(p, x, t, q + 1, Some(true)),
        ),
        row(
            "approve: session without approvals",
            FailedPrecondition,
            approve(e, x, t, q, Some(false)),
        ),
        row(
            "approve: overlaps a held turn",
            Aborted,
            approve(h, x, t, q, Some(true)),
        ),
        // Suspend and Resume
        row(
            "suspend: empty session",
            InvalidArgument,
            Call::Suspend(SuspendRequest::default()),
        ),
        row(
            "suspend: unknown session",
            NotFound,
            Call::Suspend(SuspendRequest {
                session: unknown.into(),
            }),
        ),
        row(
            "suspend: overlaps a held turn",
            Aborted,
            Call::Suspend(SuspendRequest { session: h.into() }),
        ),
        row(
            "resume: empty session",
            InvalidArgument,
            Call::Resume(ResumeRequest::default()),
        ),
        row(
            "resume: unknown session",
            NotFound,
            Call::Resume(ResumeRequest {
                session: unknown.into(),
                ..Default::default()
            }),
        ),
        row(
            "resume: overlaps a held turn",
            Aborted,
            Call::Resume(ResumeRequest {
                session: h.into(),
                ..Default::default()
            }),
        ),
        // Fork
        row(
            "fork: identity set (empty message)",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef::default()),
                ..fork(e, 1)
            }),
        ),
        row(
            "fork: identity set on an unknown session",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef {
                    subject: "alice".into(),
                    ..IdentityRef::default()
                }),
                ..fork(unknown, 1)
            }),
        ),
        row(
            "fork: identity set on an empty session",
            InvalidArgument,
            Call::Fork(ForkRequest {
                identity: Some(IdentityRef::default()),
                ..fork("", 1)
            }),
        ),
        row(
            "fork: empty session",
            InvalidArgument,
            Call::Fork(fork("", 1)),
        ),
        row(
            "fork: unknown session",
            NotFound,
            Call::Fork(fork(unknown, 1)),
        ),
        row("fork: count 129", InvalidArgument, Call::Fork(fork(e, 129))),
        row(
            "fork: at_seq past the head (a false FORK marker)",
            OutOfRange,
            Call::Fork(ForkRequest {
                at_seq: 1 << 62,
                ..fork(e, 1)
            }),
        ),
        row(
            "fork: count i32::MAX",
            InvalidArgument,
            Call::Fork(fork(e, i32::MAX)),
        ),
        row(
            "fork: more names than children",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into(), "b".into()],
                ..fork(e, 1)
            }),
        ),
        row(
            "fork: fewer names than children",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into()],
                ..fork(e, 3)
            }),
        ),
        row(
            "fork: count 0 means 1, so two names are too many",
            InvalidArgument,
            Call::Fork(ForkRequest {
                child_names: vec!["a".into(), "b".into()],
                ..fork(e, 0)
            }),
        ),
        // HarnessRegistry
        row(
            "register: empty name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: String::new(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: uppercase name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "Upper".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: 64-character name",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "a".repeat(64),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: name starting with a hyphen",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "-lead".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: static name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "echo".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: reserved name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "chat".into(),
                spec: Some(remote_spec(&w.block_address)),
            }),
        ),
        row(
            "register: no spec",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: None,
            }),
        ),
        row(
            "register: no placement",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    placement: None,
                    ..remote_spec("x")
                }),
            }),
        ),
        row(
            "register: empty remote address",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(remote_spec("")),
            }),
        ),
        row(
            "register: substrate without a template",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    placement: Some(Placement::Substrate(SubstratePlacement {
                        atespace: "a".into(),
                        template: String::new(),
                    })),
                    ..remote_spec("x")
                }),
            }),
        ),
        row(
            "register: no capabilities",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    capabilities: None,
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: resumability unspecified",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    capabilities: Some(Capabilities::default()),
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: canonical spec over 4096 bytes",
            InvalidArgument,
            Call::Register(RegisterHarnessRequest {
                name: "fresh".into(),
                spec: Some(HarnessSpec {
                    descriptor_id: "d".repeat(5000),
                    ..remote_spec(&w.block_address)
                }),
            }),
        ),
        row(
            "register: a different spec under a registered name",
            AlreadyExists,
            Call::Register(RegisterHarnessRequest {
                name: "reg".into(),
                spec: Some(remote_spec("127.0.0.1:1")),
            }),
        ),
        row(
            "get harness: empty name",
            InvalidArgument,
            Call::GetHarness(GetHarnessRequest::default()),
        ),
        row(
            "get harness: unknown name",
            NotFound,
            Call::GetHarness(GetHarnessRequest {
                name: "nope".into(),
                observe: true,
            }),
        ),
        row(
            "list harnesses: negative page size",
            InvalidArgument,
            Call::ListHarnesses(ListHarnessesRequest {
                page_size: -1,
                ..Default::default()
            }),
        ),
        row(
            "list harnesses: token is not base64",
            InvalidArgument,
            Call::ListHarnesses(ListHarnessesRequest {
                page_token: "%%%".into(),
                ..Default::default()
            }),
        ),
        row(
            "retire: empty name",
            InvalidArgument,
            Call::Retire(RetireHarnessRequest::default()),
        ),
        row(
            "retire: static built-in",
            FailedPrecondition,
            Call::Retire(RetireHarnessRequest {
                name: "echo".into(),
                reason: "no".into(),
            }),
        ),
        row(
            "retire: static approval harness",
            FailedPrecondition,
            Call::Retire(RetireHarnessRequest {
                name: "approval".into(),
                reason: "no".into(),
            }),
        ),
        row(
            "retire: unknown name",
            NotFound,
            Call::Retire(RetireHarnessRequest {
                name: "nope".into(),
                reason: "gone".into(),
            }),
        ),
        row(
            "retire: reason over 1024 bytes",
            InvalidArgument,
            Call::Retire(RetireHarnessRequest {
                name: "reg".into(),
                reason: "r".repeat(1025),
            }),
        ),
    ];
    // Replay validates nothing: these are empty OK streams, and they must
    // not create anything either.
    for (name, session) in [
        ("replay: empty session", ""),
        ("replay: unknown session", unknown),
    ] {
        out.push(row(
            name,
            Ok,
            Call::Replay(ReplayRequest {
                session: session.into(),
                ..Default::default()
            }),
        ));
    }
    out.push(row(
        "replay: from past the head",
        Ok,
        Call::Replay(ReplayRequest {
            session: e.into(),
            from_seq: 50,
            to_seq: 0,
        }),
    ));
    out
}
