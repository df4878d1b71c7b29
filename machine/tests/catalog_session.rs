//! Session rows through the host: Create, Get and List (service.md §1.2–1.4,
//! session/listing_test and the metadata entries of session/service_test).

mod common;

use std::collections::BTreeSet;

use agentsessions_machine::vocab::{Code, Request, Response};
use agentsessions_proto::v1::{
    ComputeState, CreateSessionRequest, IdentityRef, ListSessionsRequest, Origin, ResourceMetadata,
    Session,
};
use agentsessions_testkit::World;
use common::*;

fn create_with(world: &mut World, s: Session) -> Session {
    let call = world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(s),
    }));
    call.session().expect("created")
}

fn list(
    world: &mut World,
    project: &str,
    size: i32,
    token: &str,
) -> Result<(Vec<Session>, String), Code> {
    let call = world.call(Request::ListSessions(ListSessionsRequest {
        project: project.into(),
        page_size: size,
        page_token: token.into(),
    }));
    match call.reply {
        Ok(Response::Sessions(r)) => Ok((r.sessions, r.next_page_token)),
        Ok(other) => panic!("{other:?}"),
        Err(s) => Err(s.code),
    }
}

fn meta(project: &str, name: &str) -> Option<ResourceMetadata> {
    Some(ResourceMetadata {
        project: project.into(),
        name: name.into(),
        ..Default::default()
    })
}

#[test]
fn create_persists_the_callers_metadata_and_get_returns_it() {
    let mut world = World::default();
    let spec = Session {
        metadata: meta("house", "first"),
        model: "m-1".into(),
        labels: [("team".to_string(), "a".to_string())].into(),
        annotations: [("note".to_string(), "\"quoted\"\nline".to_string())].into(),
        origin: Some(Origin {
            source: "ci".into(),
            subject: "build-7".into(),
            ..Default::default()
        }),
        identity: Some(IdentityRef {
            principal: "alice".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = create_with(&mut world, spec.clone());
    let uid = created.metadata.as_ref().unwrap().uid.clone();
    assert!(uid.starts_with("sess-"));
    let got = session(&mut world, &uid);
    let m = got.metadata.as_ref().unwrap();
    assert_eq!((m.project.as_str(), m.name.as_str()), ("house", "first"));
    assert!(m.create_time.is_some());
    assert_eq!(got.model, "m-1");
    assert_eq!(got.labels, spec.labels);
    assert_eq!(got.annotations, spec.annotations);
    assert_eq!(got.origin, spec.origin);
    assert_eq!(got.identity, spec.identity);
    assert_eq!(got.harness, "echo", "the default harness is recorded");
    assert_eq!(got, created, "Create answers what Get later reads");
}

#[test]
fn a_session_without_metadata_reports_none_and_the_default_project() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    let s = session(&mut world, &sid);
    assert!(s.labels.is_empty() && s.annotations.is_empty());
    assert!(s.origin.is_none() && s.identity.is_none());
    assert_eq!(s.metadata.unwrap().project, "default");
}

#[test]
fn list_includes_sessions_with_no_events_and_carries_their_metadata() {
    let mut world = World::default();
    let s = create_with(
        &mut world,
        Session {
            labels: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        },
    );
    let (page, next) = list(&mut world, "", 0, "").unwrap();
    assert_eq!(page.len(), 1);
    assert!(next.is_empty());
    assert_eq!(page[0].last_seq, 0);
    assert_eq!(page[0].compute_state, ComputeState::ComputeNone as i32);
    assert_eq!(page[0].labels, s.labels);
}

#[test]
fn list_matches_the_project_exactly() {
    let mut world = World::default();
    for p in ["a", "a", "b"] {
        create_with(
            &mut world,
            Session {
                metadata: meta(p, ""),
                ..Default::default()
            },
        );
    }
    let sizes: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|p| list(&mut world, p, 0, "").unwrap().0.len())
        .collect();
    assert_eq!(sizes, vec![2, 1, 0]);
}

#[test]
fn list_pages_through_every_session_exactly_once_and_survives_a_restart() {
    let mut world = World::default();
    let mut all = BTreeSet::new();
    for _ in 0..7 {
        all.insert(create(&mut world, ""));
    }
    world.call(exec(all.iter().next().unwrap(), "", "hi"));
    world.restart();
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let (page, next) = list(&mut world, "", 2, &token).unwrap();
        pages += 1;
        assert!(page.len() <= 2);
        seen.extend(page.into_iter().map(|s| s.metadata.unwrap().uid));
        if next.is_empty() {
            break;
        }
        token = next;
        assert!(pages < 10, "paging terminates");
    }
    assert_eq!(seen.len(), 7, "each session once");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), all);
}

#[test]
fn a_malformed_page_token_is_an_invalid_argument() {
    let mut world = World::default();
    assert_eq!(list(&mut world, "", 2, "!!"), Err(Code::InvalidArgument));
}

#[test]
fn get_of_an_unknown_uid_is_not_found_and_of_an_empty_one_invalid() {
    let mut world = World::default();
    assert_eq!(world.call(get("sess-nope")).code(), Code::NotFound);
    assert_eq!(world.call(get("")).code(), Code::InvalidArgument);
}

#[test]
fn get_with_a_failing_journal_read_is_internal_and_names_the_session() {
    let mut world = World::default();
    let sid = create(&mut world, "");
    world.call(exec(&sid, "", "hi"));
    world.faults.read = Some((0, "disk".into()));
    let call = world.call(get(&sid));
    assert_eq!(call.code(), Code::Internal);
    assert!(call.reply.unwrap_err().message.contains(&sid));
}
