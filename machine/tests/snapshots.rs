//! Effect traces of the host's main flows, as stable text snapshots (one
//! line per effect: kind and key fields, content hashes shortened). A
//! change in the order or content of effects shows up as a snapshot diff.
//! Review with `cargo insta review` (or `INSTA_UPDATE=always`).

mod common;

use agentsessions_machine::vocab::{Code, Request};
use agentsessions_proto::v1::ForkRequest;
use agentsessions_testkit::World;
use common::*;

/// Runs `req` and renders the effects it caused.
fn traced(world: &mut World, req: Request) -> String {
    let mark = world.trace.len();
    let call = world.call(req);
    assert!(
        call.code() == Code::Ok,
        "the snapshotted flows all succeed: {call:?}"
    );
    render(since(world, mark))
}

#[test]
fn an_echo_turn() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    insta::assert_snapshot!(traced(&mut world, exec(&sid, "", "hello")));
}

#[test]
fn a_replay() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hello"));
    insta::assert_snapshot!(traced(&mut world, replay(&sid)));
}

#[test]
fn a_resume_after_a_crash_past_output() {
    let mut world = World::default();
    let sid = crashed_turn(&mut world, "", 4);
    insta::assert_snapshot!(traced(&mut world, resume(&sid)));
}

#[test]
fn park_approve_resume() {
    let mut world = World::default();
    let sid = create(&mut world, "approval");
    let park = traced(&mut world, exec(&sid, "", "go"));
    let p = session(&mut world, &sid).pending_approval.unwrap();
    let decide = traced(
        &mut world,
        approve(&sid, &p.execution_id, "c1", p.request_seq, true),
    );
    let recover = traced(&mut world, resume(&sid));
    insta::assert_snapshot!(format!(
        "# park\n{park}\n# approve\n{decide}\n# resume\n{recover}"
    ));
}

#[test]
fn a_denial() {
    let mut world = World::default();
    let (sid, eid, seq) = parked(&mut world, "approval");
    let decide = traced(&mut world, approve(&sid, &eid, "c1", seq, false));
    let recover = traced(&mut world, resume(&sid));
    insta::assert_snapshot!(format!("# deny\n{decide}\n# resume\n{recover}"));
}

#[test]
fn a_fork_at_a_historical_seq() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "one"));
    world.call(exec(&sid, "", "two"));
    let req = Request::Fork(ForkRequest {
        session: sid.clone(),
        at_seq: 5,
        count: 1,
        ..Default::default()
    });
    insta::assert_snapshot!(traced(&mut world, req));
}
