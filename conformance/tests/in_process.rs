//! Every conformance check against our daemon, in process (Daemon::start),
//! one test per check. A SKIP passes with its reason printed; the replay
//! outputs a check records are compared with the committed insta snapshots
//! under tests/snapshots/.

use std::sync::Arc;

use agentsessions_conformance::checks::{self, Outcome};
use agentsessions_conformance::host::InProcess;

async fn run(name: &str) {
    let check = checks::by_name(name).unwrap_or_else(|| panic!("no check named {name}"));
    let report = checks::run(check, Arc::new(InProcess)).await;
    println!("{}", report.line());
    if let Outcome::Fail(why) = &report.outcome {
        panic!("{name}: {why}");
    }
    for (snap, text) in &report.snapshots {
        insta::assert_snapshot!(snap.as_str(), text);
    }
}

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                run(stringify!($name)).await;
            }
        )*

        #[test]
        fn every_check_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for c in checks::all() {
                assert!(tested.contains(&c.name), "no test runs check {}", c.name);
            }
        }
    };
}

checks! {
    replay_reconstructs_nondeterministic_output,
    multi_turn_continue_across_restarts,
    crash_mid_turn_redrive_at_most_once,
    crash_after_usage_does_not_duplicate_accounting,
    fork_equivalence,
    single_writer,
    golden_vectors,
    replay_never_reaches_the_provider,
    streaming_does_not_change_the_journal,
    replay_emits_no_deltas,
    wire_failed_harness_journaled_as_error,
    wire_execution_start_reopen_resume_replay_fork,
    memory_snapshot_session_refuses_a_stateless_override,
    wire_controller_mediated_tool,
    crash_mid_tool_call_at_most_once,
    controller_mediated_tool_requires_key,
    unmediated_tool_call_rejected,
    wire_tool_arguments_rejected_before_effects,
    wire_tool_request_changes_fail_recovery,
    wire_approval_approved,
    wire_approval_denied,
    wire_approval_executor_error,
    wire_approval_failed_ack_keeps_durable_request,
    go_v012_completed,
    go_v012_crashed_input,
    go_v012_crashed_output,
    go_v012_crashed_model,
    go_v012_multi_turn,
    go_v012_multi_turn_crashed_output,
    go_v012_upgraded_resume,
    go_v012_mixed_completed,
    go_v012_mixed_interrupted,
    grpc_bad_input_matrix,
    python_harness_turns_replay_without_the_model,
    python_harness_crash_mid_turn_redrive_at_most_once,
    python_harness_approval_denied_then_approved,
    python_harness_fork_child_inherits_history,
    python_harness_failure_journaled_as_error,
    python_doc_harness_runs_an_echo_turn,
}

/// A Python client that knows no .proto file lists the daemon's services
/// over reflection v1alpha (what grpcio-reflection speaks) and calls
/// ListSessions with message classes built from the reflected descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reflection_client_lists_services_and_calls_list_sessions() {
    use agentsessions_conformance::host::{HostSpec, Launcher};
    use agentsessions_conformance::{client, env, model::FakeModel, python};

    if let Err(why) = python::toolchain().await {
        assert!(
            !python::required(),
            "python unavailable with CI=true: {why}"
        );
        println!("SKIPPED: python reflection client: {why}");
        return;
    }
    let model = FakeModel::start().await.expect("fake model");
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = HostSpec {
        journal: dir.path().join("journal.db"),
        model_url: model.base_url().to_owned(),
        model: env::MODEL.to_owned(),
        harnesses: Vec::new(),
        dir: dir.path().to_path_buf(),
    };
    let host = InProcess.start(&spec).await.expect("host");
    let mut c = client::connect(host.addr()).await.expect("connect");
    let uid = client::create(&mut c, "echo").await.expect("create");
    let listing = python::reflection_listing(host.addr(), "default").await;
    host.stop().await;
    let listing = listing.expect("reflection client");
    assert!(
        listing
            .services
            .iter()
            .any(|s| s == "agentsessions.v1.Sessions"),
        "services: {:?}",
        listing.services
    );
    assert_eq!(listing.sessions, vec![uid]);
}
