//! TLS harness links: `harnessnode --tls-*` serves the Harness service over
//! TLS and requires the host's client certificate; `agentsessionsd --harness
//! NAME=https://… --harness-ca --harness-cert --harness-key` verifies the
//! harness and presents its certificate. A host without the certificate, a
//! certificate from another CA and plaintext to the TLS port all fail.

#[path = "support/cli.rs"]
mod cli;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentsessions_proto::grpc::harness_client::HarnessClient;
use agentsessions_proto::v1::DescribeRequest;
use cli::{Daemon, agentctl, stderr, stdout};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// A CA and the leaf certificates of one test, written as PEM files.
struct Pki<'a> {
    dir: &'a Path,
}

impl<'a> Pki<'a> {
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// A CA named `name`: `name.pem`, and its issuer for leaves.
    fn ca(&self, name: &str) -> Issuer<'static, KeyPair> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        self.write(&format!("{name}.pem"), &cert.pem());
        Issuer::new(params, key)
    }

    /// A leaf for `sans` signed by `ca`: `name.pem` and `name.key`.
    fn leaf(&self, name: &str, sans: &[&str], ca: &Issuer<'_, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, ca).unwrap();
        self.write(&format!("{name}.pem"), &cert.pem());
        self.write(&format!("{name}.key"), &key.serialize_pem());
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// A harnessnode child; killed when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_node(args: &[&str]) -> (Node, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_harnessnode"))
        .args(args)
        .env_remove("HARNESS_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn harnessnode");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let addr = line
        .strip_prefix("harnessnode: serving echo on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    (Node(child), addr)
}

async fn describe(endpoint: Endpoint) -> Result<String, String> {
    let endpoint = endpoint.connect_timeout(Duration::from_secs(10));
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    let mut client = HarnessClient::new(channel);
    let d = client
        .describe(DescribeRequest {})
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(d.into_inner().id)
}

fn tls(pki: &Pki<'_>, client: Option<&str>) -> ClientTlsConfig {
    let ca = std::fs::read(pki.path("ca.pem")).unwrap();
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    if let Some(name) = client {
        let cert = std::fs::read(pki.path(&format!("{name}.pem"))).unwrap();
        let key = std::fs::read(pki.path(&format!("{name}.key"))).unwrap();
        config = config.identity(Identity::from_pem(cert, key));
    }
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_harness_serves_only_a_host_that_verifies_it_and_shows_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki { dir: dir.path() };
    let ca = pki.ca("ca");
    let rogue = pki.ca("rogue-ca");
    pki.leaf("node", &["localhost", "127.0.0.1"], &ca);
    pki.leaf("host", &["host.example"], &ca);
    pki.leaf("stranger", &["host.example"], &rogue);
    let (_node, addr) = spawn_node(&[
        "--kind",
        "echo",
        "--addr",
        "127.0.0.1:0",
        "--readyz",
        "",
        "--tls-cert",
        &pki.path("node.pem"),
        "--tls-key",
        &pki.path("node.key"),
        "--tls-client-ca",
        &pki.path("ca.pem"),
    ]);
    let https = format!("https://{addr}");

    // The wire itself, from a tonic client.
    let with = |client: Option<&str>| {
        Endpoint::from_shared(https.clone())
            .unwrap()
            .tls_config(tls(&pki, client))
            .unwrap()
    };
    assert_eq!(describe(with(Some("host"))).await.unwrap(), "echo");
    assert!(describe(with(None)).await.is_err(), "no client certificate");
    assert!(
        describe(with(Some("stranger"))).await.is_err(),
        "a client certificate from another CA"
    );
    let plain = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    assert!(describe(plain).await.is_err(), "plaintext to the TLS port");

    // A daemon dialing it: a turn runs with the host's certificate, and
    // fails UNAVAILABLE without it.
    let model = agentsessions_conformance::model::FakeModel::start()
        .await
        .unwrap();
    let turn = |extra: &[&str], name: &str| {
        let mut flags = vec![
            "--model",
            "gpt-test",
            "--model-base-url",
            model.base_url(),
            "--harness-ca",
        ];
        let ca_path = pki.path("ca.pem");
        let harness = format!("tlsecho={https}");
        flags.push(&ca_path);
        flags.extend(["--harness", &harness]);
        flags.extend(extra);
        let journal = dir.path().join(format!("{name}.db"));
        let daemon = Daemon::start_in(dir.path(), journal.as_os_str(), &flags);
        let o = agentctl(
            dir.path(),
            &[
                "--server",
                &daemon.sessions,
                "exec",
                "--harness",
                "tlsecho",
                "--input",
                "over tls",
            ],
        );
        (o.status.code(), stdout(&o), stderr(&o))
    };
    let (host_cert, host_key) = (pki.path("host.pem"), pki.path("host.key"));
    let (code, out, err) = turn(
        &["--harness-cert", &host_cert, "--harness-key", &host_key],
        "ok",
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("over tls"), "the turn ran: {out}");
    let (code, out, err) = turn(&[], "nocert");
    assert_eq!(
        code,
        Some(24),
        "UNAVAILABLE without the host's certificate: {out}\n{err}"
    );
}

#[test]
fn tls_flags_on_a_unix_socket_and_unreadable_files_are_startup_errors() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_harnessnode"))
            .args(args)
            .output()
            .unwrap()
    };
    let sock = format!("unix://{}", dir.path().join("h.sock").display());
    let missing = dir.path().join("missing.pem").display().to_string();
    let o = run(&[
        "--addr",
        &sock,
        "--readyz",
        "",
        "--tls-cert",
        &missing,
        "--tls-key",
        &missing,
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.pem"), "{}", stderr(&o));
    let pki = Pki { dir: dir.path() };
    let ca = pki.ca("ca");
    pki.leaf("node", &["localhost"], &ca);
    let o = run(&[
        "--addr",
        &sock,
        "--readyz",
        "",
        "--tls-cert",
        &pki.path("node.pem"),
        "--tls-key",
        &pki.path("node.key"),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unix socket"), "{}", stderr(&o));
}
