//! Helpers shared by the host-level catalog, model and snapshot tests:
//! request builders, journal views and a stable text rendering of effects.
#![allow(dead_code)]

use std::fmt::Write as _;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    ClientEffect, Effect, ExecuteTool, HarnessEffect, InvokeModel, Request, Response, RuntimeCall,
    RuntimeOp, StoreEffect, StreamItem,
};
use agentsessions_proto::v1::{
    ApproveRequest, CreateSessionRequest, EventKind, ExecRequest, GetSessionRequest, LogRecord,
    ReplayRequest, ResumeRequest, Session, SuspendRequest, controller_frame::Frame,
};
use agentsessions_testkit::{Call, World};

/// An Exec of `text` (no input when empty) on `harness` ("" = the session's).
pub fn exec(session: &str, harness: &str, text: &str) -> Request {
    Request::Exec(exec_req(session, harness, text))
}

/// The ExecRequest behind [`exec`], for tests that tweak fields.
pub fn exec_req(session: &str, harness: &str, text: &str) -> ExecRequest {
    ExecRequest {
        session: session.into(),
        harness: harness.into(),
        inputs: if text.is_empty() {
            vec![]
        } else {
            vec![events::text_message("user", text)]
        },
        ..Default::default()
    }
}

/// Creates a session on `harness`; returns its uid.
pub fn create(world: &mut World, harness: &str) -> String {
    let call = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: harness.into(),
            ..Default::default()
        }),
    }));
    call.session().expect("created").metadata.unwrap().uid
}

/// Sessions.Resume.
#[allow(deprecated)]
pub fn resume(sid: &str) -> Request {
    Request::Resume(ResumeRequest {
        session: sid.into(),
        boot: false,
    })
}

/// Sessions.Suspend.
pub fn suspend(sid: &str) -> Request {
    Request::Suspend(SuspendRequest {
        session: sid.into(),
    })
}

/// Sessions.GetSession.
pub fn get(sid: &str) -> Request {
    Request::GetSession(GetSessionRequest { uid: sid.into() })
}

/// Sessions.Replay of the whole journal.
pub fn replay(sid: &str) -> Request {
    Request::Replay(ReplayRequest {
        session: sid.into(),
        ..Default::default()
    })
}

/// Sessions.Approve of call `call` with reason "ok" and no identity.
pub fn approve(sid: &str, exec_id: &str, call: &str, seq: i64, approved: bool) -> Request {
    Request::Approve(ApproveRequest {
        session: sid.into(),
        execution_id: exec_id.into(),
        tool_call_id: call.into(),
        request_seq: seq,
        approved: Some(approved),
        reason: "ok".into(),
        identity: None,
    })
}

/// Event kinds of a session's journal.
pub fn kinds(world: &World, session: &str) -> Vec<EventKind> {
    kinds_of(&world.store.records(session))
}

/// Event kinds of records.
pub fn kinds_of(records: &[LogRecord]) -> Vec<EventKind> {
    records
        .iter()
        .map(|r| events::kind_of(r.event.as_ref().unwrap()))
        .collect()
}

/// Parks a gated call of harness `harness` on a new session; returns
/// (session, execution id, request seq).
pub fn parked(world: &mut World, harness: &str) -> (String, String, i64) {
    let sid = create(world, harness);
    let call = world.call(exec(&sid, "", "go"));
    assert_eq!(
        call.reply,
        Ok(Response::StreamEnd),
        "a park closes OK: {call:?}"
    );
    let pending = call
        .session()
        .and_then(|s| s.pending_approval)
        .expect("pending approval");
    (sid, pending.execution_id, pending.request_seq)
}

/// The session rendered by GetSession.
pub fn session(world: &mut World, sid: &str) -> Session {
    world.call(get(sid)).session().expect("session")
}

/// Records streamed by a call.
pub fn streamed(call: &Call) -> Vec<LogRecord> {
    call.items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Record(r) => Some(r.record().clone()),
            _ => None,
        })
        .collect()
}

/// Effects emitted since trace position `mark`.
pub fn since(world: &World, mark: usize) -> &[Effect] {
    &world.trace[mark..]
}

/// The first Start frame sent since `mark` as its harness receives it (the
/// shared history put back in): (wire execution id, start).
pub fn start_delivered(
    world: &World,
    mark: usize,
) -> Option<(String, agentsessions_proto::v1::Start)> {
    since(world, mark).iter().find_map(|e| match e {
        Effect::Harness(HarnessEffect::Send { frame, history, .. }) => {
            let mut frame = frame.clone();
            agentsessions_machine::vocab::History::attach(&mut frame, history.as_ref());
            match frame.frame {
                Some(Frame::Start(s)) => Some((frame.execution_id, s)),
                _ => None,
            }
        }
        _ => None,
    })
}

/// Harness names the Describe effects since `mark` asked about.
pub fn described(world: &World, mark: usize) -> Vec<String> {
    since(world, mark)
        .iter()
        .filter_map(|e| match e {
            Effect::Harness(HarnessEffect::Describe { harness, .. }) => Some(harness.clone()),
            _ => None,
        })
        .collect()
}

/// The variant name of each effect, for exact effect-list assertions.
pub fn effect_names(effects: &[Effect]) -> Vec<&'static str> {
    effects.iter().map(Effect::name).collect()
}

/// True when any effect is one of `names`.
pub fn any_of(effects: &[Effect], names: &[&str]) -> bool {
    effects.iter().any(|e| names.contains(&e.name()))
}

/// Appends issued by `effects`, as lists of event kinds.
pub fn appended_kinds(effects: &[Effect]) -> Vec<Vec<EventKind>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::Append { events: evs, .. }) => {
                Some(evs.iter().map(events::kind_of).collect())
            }
            _ => None,
        })
        .collect()
}

fn kind_name(k: EventKind) -> &'static str {
    k.as_str_name().trim_start_matches("EVENT_")
}

fn short(hash: &str) -> &str {
    // Keep the algorithm prefix and enough digits to tell records apart.
    &hash[..hash.len().min(19)]
}

/// A stable one-line-per-effect rendering of a trace: variant and its key
/// fields, with no pointers or Debug layout.
pub fn render(effects: &[Effect]) -> String {
    let mut out = String::new();
    for e in effects {
        let line = match e {
            Effect::Store(StoreEffect::Append {
                session,
                expected_last_seq,
                fence,
                events: evs,
                ..
            }) => format!(
                "Append {session} after={expected_last_seq} fence={fence} [{}]",
                evs.iter()
                    .map(|ev| kind_name(events::kind_of(ev)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Effect::Store(StoreEffect::Fork {
                session,
                parent,
                at_seq,
                fence,
                events: evs,
                ..
            }) => format!(
                "Fork {session} shares {parent}..={at_seq} fence={fence} [{}]",
                evs.iter()
                    .map(|ev| kind_name(events::kind_of(ev)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Effect::Store(StoreEffect::MintFence { session, .. }) => format!("MintFence {session}"),
            Effect::Store(StoreEffect::ReadLog {
                session,
                from_seq,
                to_seq,
                ..
            }) => format!("ReadLog {session} {from_seq}..={to_seq}"),
            Effect::Store(StoreEffect::ReadJournal { session, .. }) => {
                format!("ReadJournal {session}")
            }
            Effect::Store(StoreEffect::GetSession { session, .. }) => {
                format!("GetSession {session}")
            }
            Effect::Store(StoreEffect::PutSession { row, .. }) => {
                format!("PutSession {} harness={}", row.uid, row.harness)
            }
            Effect::Harness(HarnessEffect::Describe { harness, conn, .. }) => match conn {
                Some(c) => format!("Describe {harness} conn={}", c.0),
                None => format!("Describe {harness}"),
            },
            Effect::Runtime(RuntimeCall { harness, op, .. }) => {
                let op = match op {
                    RuntimeOp::Create { session } => format!("create {session}"),
                    RuntimeOp::Restore { snapshot } => format!(
                        "restore local={} uri={:?} memory={}",
                        snapshot.local, snapshot.external_uri, snapshot.memory
                    ),
                    RuntimeOp::Snapshot { session } => format!("snapshot {session}"),
                    RuntimeOp::Fork { snapshot, child } => {
                        format!("fork local={} child={child}", snapshot.local)
                    }
                    RuntimeOp::Stop { session } => format!("stop {session}"),
                };
                format!("Runtime {harness} {op}")
            }
            Effect::Harness(HarnessEffect::Dial {
                harness,
                address,
                conn,
                ..
            }) => format!("Dial {harness} {address} conn={}", conn.0),
            Effect::Harness(HarnessEffect::Send {
                conn,
                frame,
                history,
            }) => {
                let what = match &frame.frame {
                    Some(Frame::Start(s)) => format!(
                        "Start history={} inputs={}",
                        s.history.len() + history.as_ref().map_or(0, |h| h.len()),
                        s.inputs.len()
                    ),
                    Some(Frame::Model(m)) => format!(
                        "Model {:?}",
                        m.message
                            .as_ref()
                            .map(events::message_text)
                            .unwrap_or_default()
                    ),
                    Some(Frame::Tool(t)) => format!(
                        "Tool id={} error={} code={} seqs={}/{}",
                        t.id, t.is_error, t.code, t.approval_request_seq, t.approval_decision_seq
                    ),
                    Some(Frame::Approval(a)) => format!(
                        "Approval call={} approved={} request_seq={}",
                        a.tool_call_id, a.approved, a.request_seq
                    ),
                    Some(Frame::Park(p)) => {
                        format!("Park call={} request_seq={}", p.tool_call_id, p.request_seq)
                    }
                    Some(Frame::Cancel(_)) => "Cancel".into(),
                    None => "empty".into(),
                };
                format!("Send conn={} exec={} {what}", conn.0, frame.execution_id)
            }
            Effect::Harness(HarnessEffect::Close { conn }) => format!("Close conn={}", conn.0),
            Effect::Model(InvokeModel {
                execution_id,
                request,
                ..
            }) => format!(
                "InvokeModel exec={execution_id} model={} messages={}",
                request.model,
                request.messages.len()
            ),
            Effect::Tool(ExecuteTool { intent, call, .. }) => format!(
                "ExecuteTool intent_seq={} call={} key={}",
                intent.record().seq,
                call.id,
                call.idempotency_key
            ),
            Effect::Client(ClientEffect::Stream { request, item }) => {
                let what = match item {
                    StreamItem::Session(s) => format!(
                        "Session last_seq={} exec_state={} compute={} pending={}",
                        s.last_seq,
                        s.exec_state,
                        s.compute_state,
                        s.pending_approval.as_ref().map_or("-".into(), |p| format!(
                            "{}@{}",
                            p.tool_call_id, p.request_seq
                        ))
                    ),
                    StreamItem::Record(r) => {
                        let r = r.record();
                        format!(
                            "Record seq={} {} {}",
                            r.seq,
                            kind_name(events::kind_of(r.event.as_ref().unwrap())),
                            short(&r.content_hash)
                        )
                    }
                    StreamItem::Delta(d) => format!("Delta {:?} done={}", d.chunk, d.done),
                };
                format!("Stream req={} {what}", request.0)
            }
            Effect::Client(ClientEffect::Reply { request, result }) => {
                let what = match result {
                    Ok(r) => format!("Ok {}", response_name(r)),
                    Err(s) => format!("Err {:?}", s.code),
                };
                format!("Reply req={} {what}", request.0)
            }
            other => other.name().to_owned(),
        };
        let _ = writeln!(out, "{line}");
    }
    out
}

fn response_name(r: &Response) -> &'static str {
    match r {
        Response::Session(_) => "Session",
        Response::Sessions(_) => "Sessions",
        Response::Fork(_) => "Fork",
        Response::Approve(_) => "Approve",
        Response::StreamEnd => "StreamEnd",
        Response::Replayed(_) => "Replayed",
        Response::Harness(_) => "Harness",
        Response::Registered(_) => "Registered",
        Response::Harnesses(_) => "Harnesses",
        Response::Booted(_) => "Booted",
        Response::Retained(_) => "Retained",
        Response::Decided(_) => "Decided",
        Response::Tools(_) => "Tools",
    }
}

/// Builds a fork child of `parent` at its first `at` records by hand (the
/// prefix verbatim plus a FORK marker), on a row with `harness`; returns
/// the child's uid.
pub fn fork_child(world: &mut World, parent: &str, at: usize, harness: &str) -> String {
    use agentsessions_machine::vocab::{EffectId, SessionRow};
    let child = format!("{parent}-child{at}");
    let row = SessionRow {
        uid: child.clone(),
        harness: harness.into(),
        parent_uid: parent.into(),
        fork_seq: at as i64,
        created_at: world.now,
        ..SessionRow::default()
    };
    world.store.perform(&StoreEffect::PutSession {
        id: EffectId(u64::MAX),
        row,
        check: None,
        now: world.now,
    });
    let prefix = world.store.records(parent)[..at].to_vec();
    world.store.import(&child, prefix, world.now);
    let fence = world.store.fence(&child);
    world
        .store
        .append(
            &child,
            at as i64,
            fence,
            &[events::fork_marker(at as i64)],
            world.now,
        )
        .expect("marker appends at the copied head");
    child
}

/// Runs an echo/tools turn to completion and cuts its journal back to the
/// first `keep` records, as a crash would.
pub fn crashed_turn(world: &mut World, harness: &str, keep: usize) -> String {
    let sid = create(world, harness);
    let call = world.call(exec(&sid, "", "hello"));
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    world.store.truncate(&sid, keep);
    sid
}
