//! The session token budget (issue #36): once the USAGE a session has
//! committed reaches its budget, the machine refuses further model calls
//! before their intent, with a durable ERROR record and RESOURCE_EXHAUSTED.
//! A session label overrides the host's budget.

mod common;

use agentsessions_machine::vocab::{Code, Request, config::TOKEN_BUDGET_LABEL};
use agentsessions_proto::v1::{
    CreateSessionRequest, EventKind, ModelCall, Session, Usage, controller_frame::Frame,
    event::Body,
};
use agentsessions_testkit::harness::{FnScript, Reply, end, ev};
use agentsessions_testkit::{World, world};
use common::*;

/// A harness that reports 6 + 5 tokens, then asks the model once.
fn spender(world: &mut World) {
    world.scripts.insert(
        "echo".into(),
        Box::new(|| {
            Box::new(FnScript::new("echo", |f| match &f.frame {
                Some(Frame::Start(_)) => Reply::send(vec![
                    ev(
                        &f.execution_id,
                        EventKind::EventUsage,
                        Body::Usage(Usage {
                            model: "echo".into(),
                            input_tokens: 6,
                            output_tokens: 5,
                            reasoning_tokens: 0,
                        }),
                    ),
                    ev(
                        &f.execution_id,
                        EventKind::EventModelCall,
                        Body::Model(ModelCall {
                            model: "echo".into(),
                            id: "m1".into(),
                            messages: vec![agentsessions_machine::events::text_message(
                                "user", "hi",
                            )],
                            ..ModelCall::default()
                        }),
                    ),
                ]),
                Some(Frame::Model(_)) => Reply::finish(vec![end(&f.execution_id)]),
                _ => Reply::default(),
            }))
        }),
    );
}

fn with_budget(budget: Option<i64>) -> World {
    let mut config = world::config();
    config.session_token_budget = budget;
    let mut world = World::new(config);
    spender(&mut world);
    world
}

fn create_labelled(world: &mut World, budget: &str) -> String {
    let call = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: "echo".into(),
            labels: [(TOKEN_BUDGET_LABEL.to_owned(), budget.to_owned())].into(),
            ..Default::default()
        }),
    }));
    call.session().expect("created").metadata.unwrap().uid
}

#[test]
fn a_model_call_past_the_budget_is_refused_with_a_durable_error() {
    let mut world = with_budget(Some(20));
    let sid = create(&mut world, "echo");
    assert_eq!(
        world.call(exec(&sid, "", "one")).code(),
        Code::Ok,
        "11 of 20"
    );
    let calls = world.model_calls;
    let second = world.call(exec(&sid, "", "two"));
    assert_eq!(second.code(), Code::ResourceExhausted, "{:?}", second.reply);
    assert_eq!(world.model_calls, calls, "the provider was not asked");
    let kinds = kinds(&world, &sid);
    assert_eq!(kinds.last(), Some(&EventKind::EventError), "{kinds:?}");
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventKind::EventModelCall)
            .count(),
        1,
        "no intent for the refused call"
    );
}

#[test]
fn a_session_label_overrides_the_hosts_budget() {
    let mut world = with_budget(Some(5));
    let roomy = create_labelled(&mut world, "1000");
    for _ in 0..3 {
        assert_eq!(world.call(exec(&roomy, "", "go")).code(), Code::Ok);
    }
    let mut world = with_budget(None);
    let tight = create_labelled(&mut world, "10");
    assert_eq!(
        world.call(exec(&tight, "", "go")).code(),
        Code::ResourceExhausted
    );
}

#[test]
fn without_a_budget_nothing_is_counted_against_the_session() {
    let mut world = with_budget(None);
    let sid = create(&mut world, "echo");
    for _ in 0..3 {
        assert_eq!(world.call(exec(&sid, "", "go")).code(), Code::Ok);
    }
}
