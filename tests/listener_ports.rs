//! Launchers give the daemon port 0 and read the port each listener got
//! from the daemon's own output (issue #41): a port picked by the launcher
//! and released could be taken by another process first, and the suite
//! then talked to that process.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/scrape.rs"]
mod scrape;

use std::time::Duration;

use agentsessions_conformance::host::{CommandHost, HostSpec, Launcher as _};
use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::GetSessionRequest;
use cli::{DAEMON, Daemon};
use tonic::Code;

/// The status a Sessions call on `addr` gets: NOT_FOUND from our daemon,
/// UNIMPLEMENTED from any other gRPC server.
async fn get_session_code(addr: &str) -> Code {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let err = SessionsClient::new(channel)
        .get_session(GetSessionRequest {
            uid: "sess-000000000000000000000000".into(),
        })
        .await
        .expect_err("no such session");
    err.code()
}

#[tokio::test]
async fn every_listener_bound_on_port_0_is_reported_with_its_port_and_reached() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let d = Daemon::start_with(
        journal.as_os_str(),
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--console-addr",
            "127.0.0.1:0",
        ],
    );
    let metrics = d.metrics.clone().expect("a metrics line");
    let console = d.console.clone().expect("a console line");
    let console = console.strip_prefix("http://").expect("a URL");
    for addr in [&d.sessions, &d.registry, &metrics, console] {
        let port = addr.parse::<std::net::SocketAddr>().unwrap().port();
        assert_ne!(port, 0, "{addr}");
    }
    assert_eq!(get_session_code(&d.sessions).await, Code::NotFound);
    let list = cli::ok(dir.path(), &["harness", "list", "--registry", &d.registry]);
    assert!(list.contains("echo"), "{list}");
    scrape::metrics(&metrics);
    let (status, _) = scrape::http_get(console, "/");
    assert!((200..500).contains(&status), "console answered {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conformance_child_host_is_reached_at_the_port_it_printed() {
    let dir = tempfile::tempdir().unwrap();
    let spec = HostSpec {
        journal: dir.path().join("journal.db"),
        // Never called: no turn runs.
        model_url: "http://127.0.0.1:9/v1".into(),
        model: "gpt-test".into(),
        harnesses: Vec::new(),
        dir: dir.path().to_path_buf(),
    };
    let launcher = CommandHost::new(agentsessions_conformance::cli::our_daemon_template(DAEMON));
    let host = launcher.start(&spec).await.expect("the daemon starts");
    let addr = host.addr();
    assert_ne!(addr.port(), 0);
    // The address is the one the child printed, not one picked for it.
    let logs: String = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        logs.contains(&format!("agentsessionsd listening on {addr}\n")),
        "{logs}"
    );
    assert_eq!(get_session_code(&addr.to_string()).await, Code::NotFound);
    host.stop().await;
}
