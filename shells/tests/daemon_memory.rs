//! The memory-snapshot runtime under the daemon: the `counter` harness
//! (REQUIRES_MEMORY_SNAPSHOT) keeps its count in one instance per session;
//! Suspend captures it, a later turn restores it, and a fork at the head
//! clones it into the child.

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::{
    EventKind, ExecRequest, ForkRequest, LogRecord, ResumeRequest, SuspendRequest, event::Body,
    exec_update::Update, lifecycle,
};
use agentsessions_shells::daemon::app::Daemon;
use tonic::transport::Channel;

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, replay, text};

async fn start(dir: &std::path::Path) -> (Daemon, SessionsClient<Channel>) {
    let daemon = Daemon::start(config(dir)).await.unwrap();
    let c = client(&daemon).await;
    (daemon, c)
}

/// One turn; returns the text of every OUTPUT it journaled.
async fn turn(
    c: &mut SessionsClient<Channel>,
    session: &str,
) -> Result<Vec<String>, tonic::Status> {
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: vec![text("tick")],
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut outputs = Vec::new();
    while let Some(u) = stream.message().await? {
        if let Some(Update::Record(r)) = u.update {
            outputs.extend(output_text(&r));
        }
    }
    Ok(outputs)
}

fn output_text(r: &LogRecord) -> Option<String> {
    let event = r.event.as_ref()?;
    if event.kind != EventKind::EventOutput as i32 {
        return None;
    }
    match event.body.as_ref()? {
        Body::Message(m) => Some(agentsessions_machine::events::message_text(m)),
        _ => None,
    }
}

fn suspends(records: &[LogRecord]) -> Vec<(String, bool)> {
    records
        .iter()
        .filter_map(|r| match r.event.as_ref()?.body.as_ref()? {
            Body::Lifecycle(l) if l.kind == lifecycle::Kind::LifecycleSuspend as i32 => {
                Some((l.snapshot_external_uri.clone(), l.snapshot_memory))
            }
            _ => None,
        })
        .collect()
}

fn kind(r: &LogRecord) -> EventKind {
    EventKind::try_from(r.event.as_ref().unwrap().kind).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_turns_count_in_the_sessions_own_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, mut c) = start(dir.path()).await;
    let a = create(&mut c, "counter").await;
    let b = create(&mut c, "counter").await;
    assert_eq!(turn(&mut c, &a).await.unwrap(), ["1"]);
    assert_eq!(turn(&mut c, &a).await.unwrap(), ["2"]);
    // Another session has its own instance.
    assert_eq!(turn(&mut c, &b).await.unwrap(), ["1"]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_captures_memory_and_the_next_turn_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, mut c) = start(dir.path()).await;
    let s = create(&mut c, "counter").await;
    turn(&mut c, &s).await.unwrap();
    turn(&mut c, &s).await.unwrap();
    let suspended = c
        .suspend(SuspendRequest { session: s.clone() })
        .await
        .unwrap()
        .into_inner();
    let log = replay(&mut c, &s).await;
    let refs = suspends(&log);
    assert_eq!(refs.len(), 1);
    assert!(refs[0].0.starts_with("mem://"), "{refs:?}");
    assert!(refs[0].1, "the SUSPEND records a memory snapshot");
    assert_eq!(suspended.last_seq, log.len() as i64);

    // The instance is gone; the count comes back from the snapshot, not
    // from re-running the two journaled turns (the counter ignores
    // History, and no earlier execution is re-driven).
    assert_eq!(turn(&mut c, &s).await.unwrap(), ["3"]);
    let after = replay(&mut c, &s).await;
    assert_eq!(&after[..log.len()], &log[..]);
    assert_eq!(
        after[log.len()..].iter().map(kind).collect::<Vec<_>>(),
        [
            EventKind::EventExecutionStart,
            EventKind::EventInput,
            EventKind::EventOutput,
            EventKind::EventEnd
        ]
    );

    // Suspend and Resume (restore from the referenced snapshot) keep it too.
    c.suspend(SuspendRequest { session: s.clone() })
        .await
        .unwrap();
    #[allow(deprecated)]
    c.resume(ResumeRequest {
        session: s.clone(),
        boot: false,
    })
    .await
    .unwrap();
    assert_eq!(turn(&mut c, &s).await.unwrap(), ["4"]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_the_head_continues_from_the_parents_count() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, mut c) = start(dir.path()).await;
    let parent = create(&mut c, "counter").await;
    turn(&mut c, &parent).await.unwrap();
    turn(&mut c, &parent).await.unwrap();
    let children = c
        .fork(ForkRequest {
            session: parent.clone(),
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .children;
    assert_eq!(children.len(), 2);
    // The fork checkpoints the parent with one memory SUSPEND.
    assert_eq!(suspends(&replay(&mut c, &parent).await).len(), 1);
    let first = children[0].metadata.clone().unwrap().uid;
    let second = children[1].metadata.clone().unwrap().uid;
    assert_eq!(turn(&mut c, &first).await.unwrap(), ["3"]);
    assert_eq!(turn(&mut c, &first).await.unwrap(), ["4"]);
    assert_eq!(turn(&mut c, &second).await.unwrap(), ["3"]);
    // The parent resumes from its checkpoint, unaffected by the children.
    assert_eq!(turn(&mut c, &parent).await.unwrap(), ["3"]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_historical_fork_of_a_memory_harness_is_refused_without_side_effects() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, mut c) = start(dir.path()).await;
    let parent = create(&mut c, "counter").await;
    turn(&mut c, &parent).await.unwrap();
    turn(&mut c, &parent).await.unwrap();
    let before = replay(&mut c, &parent).await;
    let err = c
        .fork(ForkRequest {
            session: parent.clone(),
            at_seq: 4,
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(replay(&mut c, &parent).await, before);
    // Nothing was captured: the live instance keeps counting.
    assert_eq!(turn(&mut c, &parent).await.unwrap(), ["3"]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_route_is_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, mut c) = start(dir.path()).await;
    let s = create(&mut c, "echo").await;
    assert_eq!(turn(&mut c, &s).await.unwrap(), ["echo:tick"]);
    c.suspend(SuspendRequest { session: s.clone() })
        .await
        .unwrap();
    let refs = suspends(&replay(&mut c, &s).await);
    assert_eq!(
        refs,
        [(String::new(), false)],
        "a journal handle, no memory"
    );
    assert_eq!(turn(&mut c, &s).await.unwrap(), ["echo:tick"]);
    let fork = c
        .fork(ForkRequest {
            session: s.clone(),
            at_seq: 3,
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fork.children.len(), 1, "historical forks stay allowed");
    daemon.shutdown().await;
}
