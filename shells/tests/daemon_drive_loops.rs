//! A daemon with its sessions partitioned over two drive loops: each loop
//! is a host of its own, so what one host knows (a registration) must reach
//! the other, and a session's calls must always meet the host that owns it
//! (forks make children on the parent's loop that other loops then serve).

use std::collections::BTreeSet;

use agentsessions_machine::chain;
use agentsessions_proto::grpc::harness_registry_client::HarnessRegistryClient;
use agentsessions_proto::v1::{
    Capabilities, ExecRequest, ForkRequest, HarnessSpec, RegisterHarnessRequest, RemotePlacement,
    Resumability, harness_spec::Placement,
};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::builtin;
use tonic::Code;
use tonic::transport::Channel;

#[path = "support/daemon.rs"]
mod support;

fn two_loops(dir: &std::path::Path) -> DaemonConfig {
    DaemonConfig {
        registry_addr: Some("127.0.0.1:0".parse().unwrap()),
        drive_loops: 2,
        ..support::config(dir)
    }
}

fn turn(session: &str, text: &str) -> ExecRequest {
    ExecRequest {
        session: session.into(),
        inputs: vec![support::text(text)],
        ..ExecRequest::default()
    }
}

/// Creates sessions on `harness` until both loops own at least `each`.
async fn on_both_loops(
    daemon: &Daemon,
    c: &mut agentsessions_proto::grpc::sessions_client::SessionsClient<Channel>,
    harness: &str,
    each: usize,
) -> Vec<String> {
    let mut sessions = Vec::new();
    let mut owned = [0usize; 2];
    while owned.iter().any(|&n| n < each) {
        assert!(sessions.len() < 256, "the uids never reached both loops");
        let uid = support::create(c, harness).await;
        owned[daemon.driver.loop_of(&uid)] += 1;
        sessions.push(uid);
    }
    sessions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_on_sessions_of_both_loops_commit_whole_chains() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(two_loops(dir.path())).await.unwrap();
    assert_eq!(daemon.driver.loops(), 2);
    let mut c = support::client(&daemon).await;
    let sessions = on_both_loops(&daemon, &mut c, "echo", 4).await;

    // Three turns on every session at once, spread over both loops.
    let mut tasks = Vec::new();
    for uid in sessions.clone() {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..3 {
                let code = support::exec_code(&mut c, turn(&uid, &format!("hi {i}"))).await;
                assert_eq!(code, Code::Ok, "turn {i} on {uid}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for uid in &sessions {
        let records = support::replay(&mut c, uid).await;
        assert_eq!(
            records.len(),
            15,
            "three echo turns of five records on {uid}"
        );
        chain::verify(&records).expect("the chain verifies");
    }

    // A fork makes its children on the parent's loop; every child is then
    // served by whichever loop owns it, from the same prefix.
    let parent = &sessions[0];
    let forked = c
        .fork(ForkRequest {
            session: parent.clone(),
            at_seq: 10,
            count: 8,
            ..ForkRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let prefix = support::replay(&mut c, parent).await[..10].to_vec();
    let mut owners = BTreeSet::new();
    for child in &forked.children {
        let uid = child.metadata.as_ref().unwrap().uid.clone();
        owners.insert(daemon.driver.loop_of(&uid));
        assert_eq!(
            support::exec_code(&mut c, turn(&uid, "after the fork")).await,
            Code::Ok
        );
        let records = support::replay(&mut c, &uid).await;
        // The same records and hashes (a copy carries the child's fence).
        let chained = |r: &[agentsessions_proto::v1::LogRecord]| {
            r.iter()
                .map(|r| (r.seq, r.content_hash.clone(), r.event.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            chained(&records[..10]),
            chained(&prefix),
            "the child starts with the prefix"
        );
        chain::verify(&records).expect("the child's chain verifies");
    }
    assert_eq!(owners.len(), 2, "eight children land on both loops");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_reaches_every_loop() {
    let dir = tempfile::tempdir().unwrap();
    // The built-in echo harness served over gRPC: a remote harness that
    // only a registration names.
    let (peer, _stop) = support::serve_harness(builtin::build("echo", "").unwrap()).await;

    let daemon = Daemon::start(two_loops(dir.path())).await.unwrap();
    let registry = Channel::from_shared(format!("http://{}", daemon.registry_addr.unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HarnessRegistryClient::new(registry)
        .register_harness(RegisterHarnessRequest {
            name: "far-echo".into(),
            spec: Some(HarnessSpec {
                placement: Some(Placement::Remote(RemotePlacement { address: peer })),
                capabilities: Some(Capabilities {
                    resumability: Resumability::StatelessReplay as i32,
                    ..Capabilities::default()
                }),
                descriptor_id: String::new(),
            }),
        })
        .await
        .unwrap();

    // Sessions on the new name, owned by each loop, all run a turn.
    let mut c = support::client(&daemon).await;
    for uid in on_both_loops(&daemon, &mut c, "far-echo", 2).await {
        let code = support::exec_code(&mut c, turn(&uid, "hello")).await;
        assert_eq!(
            code,
            Code::Ok,
            "loop {} serves far-echo",
            daemon.driver.loop_of(&uid)
        );
        assert_eq!(support::replay(&mut c, &uid).await.len(), 5);
    }
    daemon.shutdown().await;
}
