//! What a freshly started `agentsessionsd` prints and logs: the console's
//! startup line names the scheme it serves (https with `--tls-cert`), and
//! the very first RPC after a start logs its `rpc start` as well as its
//! `rpc finish`, in text and in JSON.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::ListSessionsRequest;

const DAEMON: &str = env!("CARGO_BIN_EXE_agentsessionsd");

/// A child daemon, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the daemon on `dir` with `extra` flags and `env`, its log in
/// `dir/daemon.log`; returns it and the startup lines that start with each
/// of `wanted`, in that order.
fn start(
    dir: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    wanted: &[&str],
) -> (Running, Vec<String>) {
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let mut child = Command::new(DAEMON)
        .current_dir(dir)
        .args(["--addr", "127.0.0.1:0", "--journal"])
        .arg(dir.join("j.db"))
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("AGENTSESSIONS_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let running = Running(child);
    let mut found = vec![None; wanted.len()];
    while found.iter().any(Option::is_none) {
        let line = match lines.next() {
            Some(Ok(line)) => line,
            end => panic!("stdout ended ({end:?}) before {wanted:?}"),
        };
        if let Some(i) = wanted.iter().position(|w| line.starts_with(w)) {
            found[i] = Some(line);
        }
    }
    // Keep draining, so a later line never meets a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (running, found.into_iter().map(Option::unwrap).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_rpc_after_a_start_logs_its_start_in_text_and_json() {
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, lines) = start(
            dir.path(),
            &[],
            &[("AGENTSESSIONS_LOG_FORMAT", format)],
            &["agentsessionsd listening on "],
        );
        let addr = lines[0].trim_start_matches("agentsessionsd listening on ");
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = SessionsClient::new(channel);
        // Both events are written before the reply is sent.
        c.list_sessions(ListSessionsRequest::default())
            .await
            .unwrap();
        drop(daemon);

        let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
        let of = |phase: &str| {
            log.lines()
                .filter(|l| l.contains(&format!("rpc {phase}")) && l.contains("ListSessions"))
                .count()
        };
        assert_eq!(
            (of("start"), of("finish")),
            (1, 1),
            "{format}: one start and one finish of the first RPC in\n{log}"
        );
        if format == "json" {
            for line in log.lines().filter(|l| l.contains("ListSessions")) {
                let event: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(event["target"], "agentsessions::grpc", "{line}");
            }
        }
    }
}

#[test]
fn with_tls_the_console_startup_line_says_https() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("server.pem"), dir.path().join("server.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let (_daemon, lines) = start(
        dir.path(),
        &[
            "--console-addr",
            "127.0.0.1:0",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
        &[],
        &["console listening on "],
    );
    assert!(
        lines[0].starts_with("console listening on https://127.0.0.1:"),
        "{}",
        lines[0]
    );

    // Without TLS it is plain http.
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, lines) = start(
        dir.path(),
        &["--console-addr", "127.0.0.1:0"],
        &[],
        &["console listening on "],
    );
    assert!(
        lines[0].starts_with("console listening on http://127.0.0.1:"),
        "{}",
        lines[0]
    );
}
