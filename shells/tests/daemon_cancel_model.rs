//! Cancel against a real HTTP model provider that never answers: the host
//! abandons the call, and the daemon drops the provider's request at once
//! instead of leaving it open until a timeout. The abandoned call is not
//! counted as a failed model call, and the turn is counted as canceled.

use std::time::Duration;

use agentsessions_proto::v1::{CancelRequest, ExecRequest, ExecState};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;

#[path = "support/daemon.rs"]
mod support;
use support::{client, config, create, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_drops_the_model_request_it_abandons() {
    let provider = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = provider.local_addr().unwrap();
    let (asked_tx, asked) = tokio::sync::oneshot::channel();
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    // A provider that reads the request and never answers; it reports
    // when the client closes the connection.
    tokio::spawn(async move {
        let (mut sock, _) = provider.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "a request arrived");
        let _ = asked_tx.send(());
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = closed_tx.send(());
                    return;
                }
                Ok(_) => {}
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = DaemonConfig {
        models: vec!["hangs".into()],
        model_base_url: Some(format!("http://{addr}")),
        model_api_key: Some("k".into()),
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..config(dir.path())
    };
    let daemon = Daemon::start(cfg).await.unwrap();
    let mut c = client(&daemon).await;
    let sid = create(&mut c, "chat").await;
    let mut turn_client = c.clone();
    let turn = tokio::spawn({
        let sid = sid.clone();
        async move {
            let mut stream = turn_client
                .exec(ExecRequest {
                    session: sid,
                    inputs: vec![text("hello")],
                    ..Default::default()
                })
                .await?
                .into_inner();
            while stream.message().await?.is_some() {}
            Ok::<(), tonic::Status>(())
        }
    });
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the turn called the provider")
        .unwrap();

    let canceled = c
        .cancel(CancelRequest {
            session: sid.clone(),
            execution_id: String::new(),
            reason: "hung model".into(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(canceled.exec_state, ExecState::ExecCanceled as i32);
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the abandoned model request was dropped")
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), turn)
        .await
        .expect("the Exec stream ends")
        .unwrap();
    assert_eq!(ended.unwrap_err().code(), tonic::Code::Cancelled);
    let metrics = format!("http://{}/metrics", daemon.metrics_addr.unwrap());
    let text = reqwest::get(metrics).await.unwrap().text().await.unwrap();
    assert!(
        !text.contains("agentsessions_model_call_duration_seconds_count{"),
        "an abandoned call is neither ok nor error: {text}"
    );
    assert!(
        text.contains("agentsessions_turns_total{harness=\"chat\",outcome=\"canceled\"} 1"),
        "{text}"
    );
    daemon.shutdown().await;
}
