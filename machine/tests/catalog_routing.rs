//! Which harness a recovery runs on, and the checks before it runs: the
//! recorded name and version, descriptor-id pins, admission on Resume and
//! Fork, registry pins on recorded overrides, outages and deadlines
//! (controller.md §7.1; service.md §1.1, §1.9 and the placement/ and
//! session/ routing entries of the catalog).

mod common;

use agentsessions_machine::events;
use agentsessions_machine::vocab::{
    Backend, Code, Effect, EffectId, HarnessEffect, HarnessFailure, HarnessRow, HostConfig,
    Request, Route, RuntimeCall, StoreEffect,
};
use agentsessions_proto::v1::{
    Capabilities, Event, EventKind, ExecutionStart, ForkRequest, HarnessSpec,
    RegisterHarnessRequest, RemotePlacement, Resumability, Usage, controller_frame::Frame,
    harness_spec::Placement,
};
use agentsessions_testkit::harness;
use agentsessions_testkit::{Call, MemStore, World, world};
use common::*;

use EventKind::*;

fn err(call: &Call) -> agentsessions_machine::vocab::Status {
    call.reply.clone().expect_err("the call fails")
}

fn no_writes_or_compute(world: &World, mark: usize, what: &str) {
    assert!(
        !any_of(
            since(world, mark),
            &["Runtime", "MintFence", "Append", "Send", "InvokeModel"]
        ),
        "{what}: {:?}",
        effect_names(since(world, mark))
    );
}

fn version(v: &str) -> agentsessions_proto::v1::HarnessDescriptor {
    let mut d = harness::descriptor("echo", Resumability::StatelessReplay);
    d.version = v.into();
    d
}

/// An interrupted echo turn "e1" (START with `marker`, or none, then the
/// INPUT) on a session stored on the default harness.
fn interrupted(world: &mut World, marker: Option<ExecutionStart>) -> String {
    let sid = create(world, "");
    let mut evs = Vec::new();
    if let Some(m) = marker {
        evs.push(events::execution_start("e1", m));
    }
    evs.push(events::input("e1", events::text_message("user", "hi")));
    world.store.append(&sid, 0, 1, &evs, world.now).unwrap();
    sid
}

fn marker(harness: &str, version: &str) -> Option<ExecutionStart> {
    Some(ExecutionStart {
        input_count: Some(1),
        harness: harness.into(),
        harness_version: version.into(),
        ..ExecutionStart::default()
    })
}

#[test]
fn recovery_checks_the_recorded_harness_name_and_version_and_falls_back_only_when_unrecorded() {
    // (recorded marker, served version, outcome, route described)
    let cases: Vec<(Option<ExecutionStart>, &str, Code, &str)> = vec![
        (marker("echo", "1"), "1", Code::Ok, "echo"),
        (marker("echo", "2"), "1", Code::FailedPrecondition, "echo"),
        // Exact strings: an empty served version and whitespace mismatch.
        (marker("echo", "1"), "", Code::FailedPrecondition, "echo"),
        (marker("echo", " 1"), "1", Code::FailedPrecondition, "echo"),
        // An unrecorded version is never checked.
        (marker("echo", ""), "7", Code::Ok, "echo"),
        // A recorded alias is routed to, and its version still checked.
        (marker("alias", "1"), "1", Code::Ok, "alias"),
        (marker("alias", ""), "7", Code::Ok, "alias"),
        (marker("alias", "2"), "1", Code::FailedPrecondition, "alias"),
        // No recorded name: the stored harness, version still checked.
        (marker("", "1"), "1", Code::Ok, "echo"),
        (marker("", "2"), "1", Code::FailedPrecondition, "echo"),
        (marker("", ""), "7", Code::Ok, "echo"),
        // Markerless: the stored harness and no identity check.
        (None, "7", Code::Ok, "echo"),
    ];
    for (m, served, code, route) in cases {
        let what = format!("{m:?} served {served:?}");
        let mut world = World::default();
        world.add_local("alias", "echo");
        world.descriptors.insert("echo".into(), version(served));
        let sid = interrupted(&mut world, m.clone());
        let head = world.store.records(&sid).len();
        let mark = world.trace.len();
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), code, "{what}: {call:?}");
        assert_eq!(described(&world, mark), vec![route.to_string()], "{what}");
        if code == Code::Ok {
            assert_eq!(world.model_calls, 1, "{what}");
            // MODEL_CALL, OUTPUT, END, RESUME after the recorded turn.
            assert_eq!(world.store.records(&sid).len(), head + 4, "{what}");
        } else {
            assert!(err(&call).message.contains("version mismatch"), "{what}");
            assert!(!any_of(since(&world, mark), &["Send", "Append"]), "{what}");
            assert_eq!(world.store.records(&sid).len(), head, "{what}");
        }
    }
    // A recorded name this host does not serve: no fallback, no Describe.
    let mut world = World::default();
    let sid = interrupted(&mut world, marker("gone", "1"));
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition);
    assert!(described(&world, mark).is_empty());
}

#[test]
fn resume_refuses_a_harness_that_became_unplaceable_and_recovers_once_it_fits() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 3);
    let mut memory = version("1");
    memory.capabilities = Some(Capabilities {
        resumability: Resumability::RequiresMemorySnapshot as i32,
        ..Capabilities::default()
    });
    world.descriptors.insert("echo".into(), memory);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(err(&call).message.contains("REQUIRES_MEMORY_SNAPSHOT"));
    no_writes_or_compute(&world, mark, "unplaceable");
    assert_eq!(world.store.records(&sid).len(), 3);
    world.descriptors.clear();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.model_calls, 2, "the original turn's and one re-drive");
}

fn with_pinned(kind: &str, pin: &str) -> World {
    let mut config = world::config();
    config.harnesses.insert(
        "pinned".into(),
        Route {
            backend: Backend::Local { kind: kind.into() },
            descriptor_id: pin.into(),
            registered: false,
            spec: None,
        },
    );
    World::new(config)
}

#[test]
fn a_descriptor_id_pin_refuses_an_impostor_on_resume_exec_and_fork_until_the_id_returns() {
    let mut world = with_pinned("echo", "echo");
    let sid = crashed_turn(&mut world, "pinned", 3);
    let parent = world.store.records(&sid).to_vec();
    let sessions = world.store.sessions().len();
    world.descriptors.insert(
        "echo".into(),
        harness::descriptor("impostor", Resumability::StatelessReplay),
    );
    let mark = world.trace.len();
    let requests = [
        resume(&sid),
        exec(&sid, "", "more"),
        Request::Fork(ForkRequest {
            session: sid.clone(),
            at_seq: 2,
            count: 1,
            ..Default::default()
        }),
    ];
    for request in requests {
        let call = world.call(request);
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        assert!(err(&call).message.contains("\"impostor\""), "{call:?}");
    }
    no_writes_or_compute(&world, mark, "pinned impostor");
    assert_eq!(&*world.store.records(&sid), parent.as_slice());
    assert_eq!(world.store.sessions().len(), sessions, "no child");
    world.descriptors.clear();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
}

#[test]
fn a_decided_gate_recovers_only_at_its_recorded_version_and_pinned_descriptor() {
    // The approval harness describes itself as "tools".
    let mut world = with_pinned("approval", "tools");
    let mut req = exec_req("", "pinned", "write");
    req.config = b"original".to_vec();
    req.resume_from_seq = 7;
    let call = world.call(Request::Exec(req));
    let sid = call.session().unwrap().metadata.unwrap().uid;
    let pending = call.session().unwrap().pending_approval.expect("parked");
    world.call(approve(
        &sid,
        &pending.execution_id,
        "c1",
        pending.request_seq,
        true,
    ));
    let decided = world.store.records(&sid).len();
    let mut v2 = harness::descriptor("tools", Resumability::StatelessReplay);
    v2.version = "2".into();
    for (served, want) in [
        (v2, "version mismatch"),
        (
            harness::descriptor("impostor", Resumability::StatelessReplay),
            "\"impostor\"",
        ),
    ] {
        world.descriptors.insert("approval".into(), served);
        let mark = world.trace.len();
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        assert!(err(&call).message.contains(want), "{call:?}");
        assert!(!any_of(
            since(&world, mark),
            &["Send", "Append", "ExecuteTool"]
        ));
        assert_eq!(world.store.records(&sid).len(), decided);
    }
    world.descriptors.clear();
    world.runtime_calls.clear();
    let mark = world.trace.len();
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    assert_eq!(world.runtime_calls, vec!["restore"]);
    let start = since(&world, mark).iter().find_map(|e| match e {
        Effect::Harness(HarnessEffect::Send { frame, .. }) => match &frame.frame {
            Some(Frame::Start(s)) => Some((frame.execution_id.clone(), s.clone())),
            _ => None,
        },
        _ => None,
    });
    let (exec_id, start) = start.expect("recovered");
    assert_eq!(exec_id, pending.execution_id);
    assert_eq!(
        (start.config.as_slice(), start.resume_from_seq),
        (&b"original"[..], 7)
    );
    assert_eq!(world.executor.effects, 1);
}

#[test]
fn resume_keeps_harness_outages_unavailable_with_no_fallback() {
    // Admission Describe of the recorded harness.
    let mut world = World::default();
    world.add_local("alias", "echo");
    let sid = create(&mut world, "");
    world.call(exec(&sid, "alias", "hi"));
    world.store.truncate(&sid, 3);
    world
        .describe_fail
        .insert("alias".into(), HarnessFailure::Unavailable("down".into()));
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Unavailable, "{call:?}");
    assert_eq!(described(&world, mark), vec!["alias"], "no fallback");
    no_writes_or_compute(&world, mark, "recorded outage");

    // The Describe of the turn's own connection.
    let mut config = world::config();
    config.harnesses.insert(
        "remote".into(),
        Route {
            backend: Backend::Remote {
                address: "a:1".into(),
            },
            descriptor_id: String::new(),
            registered: false,
            spec: None,
        },
    );
    let mut world = World::new(config);
    world.remote.insert("a:1".into(), "echo".into());
    let sid = crashed_turn(&mut world, "remote", 3);
    world.faults.recheck = Some(HarnessFailure::Unavailable("down".into()));
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Unavailable, "{call:?}");
    let names = effect_names(since(&world, mark));
    assert_eq!(
        names.iter().filter(|n| **n == "Close").count(),
        1,
        "{names:?}"
    );
    assert!(!any_of(
        since(&world, mark),
        &["MintFence", "Append", "Send"]
    ));
    assert_eq!(world.store.records(&sid).len(), 3);
}

#[test]
fn a_cancel_or_deadline_during_the_connected_describe_writes_nothing() {
    for cancel in [true, false] {
        let mut config = world::config();
        config.harnesses.insert(
            "remote".into(),
            Route {
                backend: Backend::Remote {
                    address: "a:1".into(),
                },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
        let mut world = World::new(config);
        world.remote.insert("a:1".into(), "echo".into());
        let sid = create(&mut world, "remote");
        world.pause_on = Some(Box::new(|e| {
            matches!(
                e,
                Effect::Harness(HarnessEffect::Describe { conn: Some(_), .. })
            )
        }));
        let mut req = exec_req(&sid, "", "x");
        req.deadline_unix = world.now / 1_000_000_000 + 5;
        let mark = world.trace.len();
        let id = world.start(Request::Exec(req));
        assert!(!world.replied(id), "held at the connected Describe");
        if cancel {
            world.cancel(id);
        } else {
            world.advance(10 * 1_000_000_000);
        }
        world.release();
        let call = world.take(id);
        let want = if cancel {
            Code::Cancelled
        } else {
            Code::DeadlineExceeded
        };
        assert_eq!(call.code(), want, "{call:?}");
        let names = effect_names(since(&world, mark));
        assert_eq!(
            names.iter().filter(|n| **n == "Close").count(),
            1,
            "{names:?}"
        );
        assert!(!any_of(
            since(&world, mark),
            &["MintFence", "Append", "Send", "InvokeModel"]
        ));
        assert!(world.store.records(&sid).is_empty());
    }
}

#[test]
fn a_deadline_due_when_an_answer_arrives_fires_before_the_answer_moves_the_turn() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Harness(HarnessEffect::Describe { .. }))
    }));
    let mut req = exec_req(&sid, "", "x");
    req.deadline_unix = world.now / 1_000_000_000 + 5;
    let mark = world.trace.len();
    let id = world.start(Request::Exec(req));
    assert!(!world.replied(id), "held at the Describe");
    // Time passes with no timer call; the held answer arrives late.
    world.now += 10 * 1_000_000_000;
    world.release();
    let call = world.take(id);
    assert_eq!(call.code(), Code::DeadlineExceeded, "{call:?}");
    assert!(!any_of(
        since(&world, mark),
        &[
            "Runtime",
            "Dial",
            "MintFence",
            "Append",
            "Send",
            "InvokeModel"
        ]
    ));
    assert!(world.store.records(&sid).is_empty());
}

fn snapshot_route(world: &World, mark: usize) -> Option<String> {
    since(world, mark).iter().find_map(|e| match e {
        Effect::Runtime(RuntimeCall {
            harness,
            op: agentsessions_machine::vocab::RuntimeOp::Snapshot { .. },
            ..
        }) => Some(harness.clone()),
        _ => None,
    })
}

#[test]
fn suspend_routes_to_the_stored_harness_unless_an_unreceipted_gate_recorded_another() {
    let mut world = World::default();
    world.add_local("recorded", "echo");
    world.add_local("recorded-gate", "approval");
    // An ordinary interrupted turn on the override.
    let sid = create(&mut world, "");
    world.call(exec(&sid, "recorded", "hi"));
    world.store.truncate(&sid, 3);
    let mark = world.trace.len();
    assert_eq!(world.call(suspend(&sid)).code(), Code::Ok);
    assert_eq!(snapshot_route(&world, mark).as_deref(), Some("echo"));
    // A gate whose receipt is durable no longer pins Suspend to its route.
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "recorded-gate", "go"));
    let p = call.session().unwrap().pending_approval.unwrap();
    world.call(approve(&sid, &p.execution_id, "c1", p.request_seq, true));
    assert_eq!(world.call(resume(&sid)).code(), Code::Ok);
    world.store.truncate(&sid, 7);
    let mark = world.trace.len();
    assert_eq!(world.call(suspend(&sid)).code(), Code::Ok);
    assert_eq!(snapshot_route(&world, mark).as_deref(), Some("echo"));
    // An unreceipted gate suspends on the route its turn recorded.
    world.store.truncate(&sid, 6);
    let mark = world.trace.len();
    assert_eq!(world.call(suspend(&sid)).code(), Code::Ok);
    assert_eq!(
        snapshot_route(&world, mark).as_deref(),
        Some("recorded-gate")
    );
}

#[test]
fn a_pending_request_on_an_unserved_recorded_harness_is_refused_before_compute() {
    let mut world = World::default();
    world.add_local("gate-alias", "approval");
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "gate-alias", "go"));
    assert!(call.session().unwrap().pending_approval.is_some());
    let store = std::mem::replace(&mut world.store, MemStore::new());
    let mut world = World::with_store(world::config(), store);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(err(&call).message.contains("gate-alias"));
    no_writes_or_compute(&world, mark, "unserved recorded gate");
    assert!(described(&world, mark).is_empty());
}

#[test]
fn an_invalid_execution_log_is_refused_without_incomplete_input_guidance() {
    let mut scratch = World::default();
    let sid = create(&mut scratch, "");
    scratch.call(exec(&sid, "", "hi"));
    let turn: Vec<Event> = scratch
        .store
        .records(&sid)
        .iter()
        .map(|r| r.event.clone().unwrap())
        .collect();
    // A completed turn one input short, and an END that lost its id.
    let mut short = turn.clone();
    if let Some(agentsessions_proto::v1::event::Body::ExecutionStart(s)) = &mut short[0].body {
        s.input_count = Some(2);
    }
    let mut idless_end = turn.clone();
    idless_end[4].execution_id.clear();
    for (evs, detail) in [(short, "input"), (idless_end, "execution")] {
        let mut world = World::default();
        let sid = create(&mut world, "");
        world.store.append(&sid, 0, 1, &evs, world.now).unwrap();
        let mark = world.trace.len();
        let call = world.call(resume(&sid));
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        let msg = err(&call).message;
        assert!(
            msg.contains("invalid execution log") && msg.contains(detail),
            "{msg}"
        );
        assert!(!msg.contains("Exec again"), "{msg}");
        no_writes_or_compute(&world, mark, detail);
    }
}

#[test]
fn an_inputless_recovery_exec_checks_cas_and_deadline_before_repairing() {
    let mut world = World::default();
    let (sid, _, _) = parked(&mut world, "approval");
    // A call-only cut: the request never landed.
    world.store.truncate(&sid, 3);
    let mut stale = exec_req(&sid, "", "");
    stale.expected_last_seq = Some(1);
    let mut late = exec_req(&sid, "", "");
    late.deadline_unix = 1;
    for (req, code) in [(stale, Code::Aborted), (late, Code::DeadlineExceeded)] {
        let mark = world.trace.len();
        let call = world.call(Request::Exec(req));
        assert_eq!(call.code(), code, "{call:?}");
        no_writes_or_compute(&world, mark, "refused recovery");
        assert_eq!(world.store.records(&sid).len(), 3);
    }
    let mut exact = exec_req(&sid, "", "");
    exact.expected_last_seq = Some(3);
    let call = world.call(Request::Exec(exact));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let frames: Vec<&str> = call
        .items
        .iter()
        .map(|i| match i {
            agentsessions_machine::vocab::StreamItem::Session(_) => "Session",
            agentsessions_machine::vocab::StreamItem::Record(_) => "Record",
            agentsessions_machine::vocab::StreamItem::Delta(_) => "Delta",
        })
        .collect();
    assert_eq!(frames, vec!["Session", "Record", "Session"]);
    let s = call.session().unwrap();
    assert_eq!(s.pending_approval.map(|p| p.request_seq), Some(4));
    assert_eq!(
        world.runtime_calls,
        vec!["create", "snapshot"],
        "no compute for the repair"
    );
}

/// A registration of `name` served by the echo script at a remote address.
fn register_remote(world: &mut World, name: &str) {
    world.remote.insert("10.0.0.9:7000".into(), "echo".into());
    let spec = HarnessSpec {
        placement: Some(Placement::Remote(RemotePlacement {
            address: "10.0.0.9:7000".into(),
        })),
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            ..Capabilities::default()
        }),
        descriptor_id: String::new(),
    };
    let call = world.call(Request::RegisterHarness(RegisterHarnessRequest {
        name: name.into(),
        spec: Some(spec),
    }));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
}

/// The journal of `world` under a restarted host whose static routes are
/// the test defaults (so "alias" and "gate-alias" are no longer static).
fn restarted(world: World) -> World {
    World::with_store(world::config(), world.store)
}

#[test]
fn a_name_registered_after_the_turn_pins_its_recovery_and_suspend() {
    // A turn recorded on the static override "alias" (interrupted), and a
    // gate recorded on "gate-alias" (decided); then both names become
    // registrations on a host where they are not static.
    let mut world = World::default();
    world.add_local("alias", "echo");
    world.add_local("gate-alias", "approval");
    let ordinary = create(&mut world, "");
    world.call(exec(&ordinary, "alias", "hi"));
    world.store.truncate(&ordinary, 3);
    let gated = create(&mut world, "");
    let call = world.call(exec(&gated, "gate-alias", "go"));
    let p = call.session().unwrap().pending_approval.unwrap();
    world.call(approve(&gated, &p.execution_id, "c1", p.request_seq, true));
    let mut world = restarted(world);
    register_remote(&mut world, "alias");
    register_remote(&mut world, "gate-alias");
    // Suspend of the ordinary turn goes to the stored harness (see
    // `suspend_routes_to_the_stored_harness_unless_an_unreceipted_gate_recorded_another`);
    // the unreceipted gate routes Suspend and the inputless Exec by its record.
    let cases = [
        (&ordinary, vec![resume(&ordinary)]),
        (
            &gated,
            vec![resume(&gated), suspend(&gated), exec(&gated, "", "")],
        ),
    ];
    for (sid, requests) in cases {
        let before = world.store.records(sid).to_vec();
        let mark = world.trace.len();
        for request in requests {
            let call = world.call(request);
            assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
            assert!(err(&call).message.contains("pinned"), "{call:?}");
        }
        assert!(described(&world, mark).is_empty());
        no_writes_or_compute(&world, mark, "pinned recovery");
        assert_eq!(&*world.store.records(sid), before.as_slice());
    }
    assert_eq!(world.executor.attempts, 0);
}

#[test]
fn a_session_stored_on_a_name_registered_later_refuses_a_turn_recorded_on_a_static_one() {
    let mut world = World::default();
    world.add_local("home", "echo");
    let sid = create(&mut world, "home");
    world.call(exec(&sid, "tools", "go"));
    world.store.truncate(&sid, 3);
    let mut world = restarted(world);
    register_remote(&mut world, "home");
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert!(err(&call).message.contains("pinned"), "{call:?}");
    no_writes_or_compute(&world, mark, "registered stored harness");
    assert_eq!(world.executor.attempts, 0, "the intent is not re-driven");
}

#[test]
fn a_row_colliding_with_the_stored_static_name_does_not_stop_a_recorded_static_override() {
    let mut world = World::default();
    world.add_local("recorded", "approval");
    let sid = create(&mut world, "");
    let call = world.call(exec(&sid, "recorded", "go"));
    let p = call.session().unwrap().pending_approval.unwrap();
    world.call(approve(&sid, &p.execution_id, "c1", p.request_seq, true));
    // Another writer stores a registration under the static default name;
    // loading reports it and leaves the name static.
    let row = HarnessRow {
        name: "echo".into(),
        uid: "harness-collides".into(),
        spec: "{}".into(),
        ..HarnessRow::default()
    };
    world.store.perform(&StoreEffect::RegisterHarnessRow {
        id: EffectId(u64::MAX),
        row: row.clone(),
        now: world.now,
    });
    let isolated = world.host.load_registrations(&[row]);
    assert_eq!(isolated.len(), 1);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(described(&world, mark), vec!["recorded"]);
    let start = since(&world, mark).iter().find_map(|e| match e {
        Effect::Harness(HarnessEffect::Send { frame, .. })
            if matches!(frame.frame, Some(Frame::Start(_))) =>
        {
            Some(frame.execution_id.clone())
        }
        _ => None,
    });
    assert_eq!(start, Some(p.execution_id), "the original invocation");
    assert_eq!(world.executor.effects, 1);
    assert_eq!(
        session(&mut world, &sid).harness,
        "echo",
        "the stored harness stays"
    );
}

#[test]
fn an_unknown_stored_harness_is_an_invalid_argument_with_no_effects() {
    let mut world = World::default();
    world.add_local("gone", "echo");
    let sid = create(&mut world, "gone");
    let mut world = World::with_store(HostConfig::default(), world.store);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::InvalidArgument, "{call:?}");
    assert_eq!(
        effect_names(since(&world, mark)),
        vec!["GetSession", "ReadJournal", "Reply"]
    );
}

#[test]
fn an_interrupted_turn_on_an_override_alias_recovers_there_after_a_restart() {
    // Aliases differ from descriptor ids: alias-a serves echo ("echo"),
    // alias-b serves the tool user ("tools").
    let mut config = world::config();
    for (alias, kind) in [("alias-a", "echo"), ("alias-b", "tools")] {
        config.harnesses.insert(
            alias.into(),
            Route {
                backend: Backend::Local { kind: kind.into() },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
    }
    let mut world = World::new(config.clone());
    let sid = create(&mut world, "alias-a");
    world.call(exec(&sid, "alias-b", "go"));
    // Cut at the tool intent: the result never landed.
    world.store.truncate(&sid, 3);
    let mut world = World::with_store(config, world.store);
    let mark = world.trace.len();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    assert_eq!(described(&world, mark), vec!["alias-b"]);
    // TOOL_RESULT, OUTPUT, END, RESUME after the cut.
    assert_eq!(world.store.records(&sid).len(), 7);
    assert_eq!(world.model_calls, 0);
    // The next turn runs on the stored alias again.
    let mark = world.trace.len();
    assert_eq!(world.call(exec(&sid, "", "next")).code(), Code::Ok);
    assert_eq!(described(&world, mark), vec!["alias-a"]);
    assert_eq!(world.model_calls, 1);
}

#[test]
fn a_model_call_answered_by_a_recorded_error_is_not_redriven_when_later_effects_follow() {
    // A journal another writer left: the provider failed, the harness
    // carried on and reported usage, then the host crashed.
    let mut scratch = World::default();
    let src = create(&mut scratch, "");
    scratch.call(exec(&src, "", "hi"));
    let mut evs: Vec<Event> = scratch.store.records(&src)[..3]
        .iter()
        .map(|r| r.event.clone().unwrap())
        .collect();
    let exec_id = evs[0].execution_id.clone();
    evs.push(events::error(&exec_id, "model: provider down"));
    evs.push(harness::ev(
        &exec_id,
        EventUsage,
        agentsessions_proto::v1::event::Body::Usage(Usage::default()),
    ));
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.store.append(&sid, 0, 1, &evs, world.now).unwrap();
    let call = world.call(resume(&sid));
    assert_eq!(call.code(), Code::Internal, "{call:?}");
    assert!(
        err(&call).message.contains("recorded completion missing"),
        "{call:?}"
    );
    assert_eq!(
        world.model_calls, 0,
        "a non-trailing MODEL_CALL is never re-driven"
    );
    assert_eq!(kinds(&world, &sid)[5..].to_vec(), vec![EventError]);
}

/// An approval session parked on its gate and then approved, not resumed:
/// an inputless Exec recovers it through the resume path.
fn decided_gate(world: &mut World) -> (String, usize) {
    let (sid, exec_id, seq) = parked(world, "approval");
    let call_id = {
        let recs = &*world.store.records(&sid);
        let req = recs.iter().find(|r| r.seq == seq).expect("request");
        agentsessions_machine::events::body::approval(req.event.as_ref().unwrap())
            .expect("a request")
            .tool_call_id
            .clone()
    };
    let call = world.call(approve(&sid, &exec_id, &call_id, seq, true));
    assert_eq!(call.code(), Code::Ok, "{call:?}");
    let head = world.store.records(&sid).len();
    (sid, head)
}

#[test]
fn a_deadline_ends_an_inputless_recovery_in_placement_or_while_it_runs() {
    const LATER: i64 = 10 * 1_000_000_000;
    // Held at the recovery's Describe: nothing is written.
    let mut world = World::default();
    let (sid, head) = decided_gate(&mut world);
    world.pause_on = Some(Box::new(|e| {
        matches!(e, Effect::Harness(HarnessEffect::Describe { .. }))
    }));
    let mut req = exec_req(&sid, "", "");
    req.deadline_unix = world.now / 1_000_000_000 + 5;
    let id = world.start(Request::Exec(req));
    assert!(!world.replied(id), "held at the Describe");
    world.advance(LATER);
    world.release();
    assert_eq!(world.take(id).code(), Code::DeadlineExceeded);
    assert_eq!(world.store.records(&sid).len(), head, "nothing written");
    assert!(world.connections().is_empty(), "no connection left open");

    // Running, its harness's events held: the recovery journals the cause.
    let mut world = World::default();
    let (sid, head) = decided_gate(&mut world);
    world.hold = true;
    let mut req = exec_req(&sid, "", "");
    req.deadline_unix = world.now / 1_000_000_000 + 5;
    let id = world.start(Request::Exec(req));
    assert!(!world.replied(id), "the recovery waits for its harness");
    world.advance(LATER);
    world.release();
    assert_eq!(world.take(id).code(), Code::DeadlineExceeded);
    let records = &*world.store.records(&sid);
    assert!(records.len() > head, "the cause is journaled");
    let last = records.last().and_then(|r| r.event.as_ref()).unwrap();
    assert_eq!(
        agentsessions_machine::events::kind_of(last),
        agentsessions_proto::v1::EventKind::EventError,
    );
    assert!(world.connections().is_empty(), "no connection left open");
}
