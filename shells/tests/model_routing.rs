//! Model calls are routed by the id the harness names (issue #41): a
//! remote harness needs no `--model`, `echo` stays the built-in model when
//! a provider is configured, and a harness naming a model nothing serves
//! is refused before its turn starts.

#[allow(dead_code)]
mod openai_fake;
#[path = "support/daemon.rs"]
mod support;

use agentsessions_proto::v1::ExecRequest;
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::harness::builtin;
use tonic::Code;

fn turn(uid: &str, text: &str) -> ExecRequest {
    ExecRequest {
        session: uid.into(),
        inputs: vec![support::text(text)],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_harness_runs_without_a_model_flag_and_echo_never_reaches_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let provider = openai_fake::serve(openai_fake::sse(
        &[serde_json::json!({"choices": [{"delta": {"content": "hi"}}]})],
        true,
    ))
    .await;
    let (echo, _stop) = support::serve_harness(builtin::build("echo", "").unwrap()).await;
    let daemon = Daemon::start(DaemonConfig {
        harnesses: vec![("far-echo".into(), echo)],
        models: vec!["gpt-test".into()],
        model_base_url: Some(format!("{}/v1", provider.base)),
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let mut c = support::client(&daemon).await;
    for harness in ["echo", "far-echo"] {
        let uid = support::create(&mut c, harness).await;
        assert_eq!(support::exec_code(&mut c, turn(&uid, "hi")).await, Code::Ok);
    }
    assert_eq!(provider.requests().len(), 0, "echo is the host's own model");
    let chat = support::create(&mut c, "chat").await;
    assert_eq!(
        support::exec_code(&mut c, turn(&chat, "hi")).await,
        Code::Ok
    );
    assert_eq!(
        provider.requests().len(),
        1,
        "chat's model is the provider's"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_naming_an_unserved_model_is_refused_before_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    // A chat harness served remotely names "gpt-4o", which nothing serves.
    let (chat, _stop) = support::serve_harness(builtin::build("chat", "gpt-4o").unwrap()).await;
    let daemon = Daemon::start(DaemonConfig {
        harnesses: vec![("far-chat".into(), chat)],
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let mut c = support::client(&daemon).await;
    let uid = support::create(&mut c, "far-chat").await;
    assert_eq!(
        support::exec_code(&mut c, turn(&uid, "hi")).await,
        Code::FailedPrecondition
    );
    assert!(
        support::replay(&mut c, &uid).await.is_empty(),
        "nothing journaled"
    );
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_provider_fails_the_turn_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(DaemonConfig {
        models: vec!["gpt-test=http://127.0.0.1:1/v1".into()],
        ..support::config(dir.path())
    })
    .await
    .unwrap();
    let mut c = support::client(&daemon).await;
    let uid = support::create(&mut c, "chat").await;
    assert_eq!(
        support::exec_code(&mut c, turn(&uid, "hi")).await,
        Code::Unavailable,
        "a retryable status"
    );
    let echo = support::create(&mut c, "echo").await;
    assert_eq!(
        support::exec_code(&mut c, turn(&echo, "hi")).await,
        Code::Ok,
        "a provider that is down never fails an echo turn"
    );
    daemon.shutdown().await;
}
