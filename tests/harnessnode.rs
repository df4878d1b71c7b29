//! The `harnessnode` binary: startup refusals, serving over TCP and a unix
//! socket, readiness, the socket lock, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentsessions_proto::grpc::harness_client::HarnessClient;
use agentsessions_proto::v1::DescribeRequest;
use tonic::transport::Endpoint;

const WAIT: Duration = Duration::from_secs(20);

/// The binary with no HARNESS_* settings leaking in from the environment.
fn node(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harnessnode"));
    for var in [
        "HARNESS_KIND",
        "HARNESS_MODEL",
        "HARNESS_ADDR",
        "HARNESS_READYZ",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args);
    cmd
}

fn run(args: &[&str]) -> Output {
    node(args).output().expect("run harnessnode")
}

/// A running node and the lines it printed on stdout.
struct Node {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Node {
    fn spawn(args: &[&str]) -> Self {
        let mut child = node(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn harnessnode");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The address after `prefix` in the next stdout line.
    fn address(&self, prefix: &str) -> String {
        let line = self.lines.recv_timeout(WAIT).expect("a listening line");
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"))
            .to_owned()
    }

    /// SIGTERM, then the exit status and stderr.
    fn terminate(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).unwrap();
        }
        (status.success(), stderr)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Only when a test failed before terminate(): never leak the child.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn describe(endpoint: Endpoint) -> String {
    let channel = endpoint.connect().await.expect("connect");
    let mut client = HarnessClient::new(channel);
    let d = client.describe(DescribeRequest {}).await.expect("describe");
    d.into_inner().id
}

#[test]
fn unknown_kind_is_fatal() {
    let out = run(&["--kind", "nope", "--addr", "127.0.0.1:0", "--readyz", ""]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown harness kind \"nope\""), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing was served");

    let out = node(&["--addr", "127.0.0.1:0", "--readyz", ""])
        .env("HARNESS_KIND", "nope")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the env var is no fallback either"
    );
}

#[test]
fn chat_needs_a_model_before_any_listener() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("h.sock");
    let addr = format!("unix://{}", sock.display());
    let out = run(&["--kind", "chat", "--addr", &addr, "--readyz", ""]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a model"));
    assert!(!sock.exists() && !Path::new(&format!("{}.lock", sock.display())).exists());
}

/// The `[default: …]` that `--help` shows for `flag`.
fn help_default(help: &str, flag: &str) -> String {
    let at = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("{flag} in --help:\n{help}"));
    let rest = &help[at..];
    let start = rest.find("[default: ").expect("a default") + "[default: ".len();
    let len = rest[start..].find(']').expect("closing bracket");
    rest[start..start + len].to_owned()
}

#[test]
fn defaults_listen_on_loopback_and_unprivileged_ports() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--addr", "--readyz"] {
        let default = help_default(&help, flag);
        let addr: std::net::SocketAddr = default
            .parse()
            .unwrap_or_else(|e| panic!("{flag} default {default:?}: {e}"));
        // An unflagged node must not be reachable from other hosts (its
        // link is plaintext) nor need root to bind.
        assert!(addr.ip().is_loopback(), "{flag} default {addr}");
        assert!(addr.port() >= 1024, "{flag} default {addr}");
    }
    assert_ne!(
        help_default(&help, "--addr"),
        help_default(&help, "--readyz"),
        "two listeners cannot share a port"
    );
}

#[test]
fn bad_addresses_are_fatal() {
    for addr in ["nonsense", "unix:"] {
        let out = run(&["--addr", addr, "--readyz", ""]);
        assert_eq!(out.status.code(), Some(1), "{addr}");
    }
}

// Multi-threaded: the test blocks on the child while the client's
// connection task must still answer the server's GOAWAY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_tcp_with_readiness_and_stops_on_sigterm() {
    let node = Node::spawn(&[
        "--kind",
        "counter",
        "--addr",
        "127.0.0.1:0",
        "--readyz",
        "127.0.0.1:0",
    ]);
    let addr = node.address("harnessnode: serving counter on ");
    let readyz = node.address("harnessnode: readyz on ");

    let endpoint = Endpoint::from_shared(format!("http://{addr}")).unwrap();
    assert_eq!(describe(endpoint).await, "counter");

    let mut conn = TcpStream::connect(&readyz).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    assert!(response.ends_with("\r\n\r\nok"), "{response}");

    let (ok, stderr) = node.terminate();
    assert!(ok, "clean exit on SIGTERM: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_is_locked_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("h.sock");
    let addr = format!("unix://{}", sock.display());
    let node = Node::spawn(&["--kind", "echo", "--addr", &addr, "--readyz", ""]);
    assert_eq!(node.address("harnessnode: serving echo on "), addr);

    // A second instance on the same socket is refused.
    let out = run(&["--kind", "echo", "--addr", &addr, "--readyz", ""]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("held by another instance"), "{stderr}");

    let path = sock.clone();
    // The URI is a placeholder; the connector dials the socket.
    let channel = Endpoint::from_static("http://[::1]:1")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect unix");
    let mut client = HarnessClient::new(channel);
    let d = client.describe(DescribeRequest {}).await.unwrap();
    assert_eq!(d.into_inner().id, "echo");
    drop(client);

    let (ok, stderr) = node.terminate();
    assert!(ok, "{stderr}");
    assert!(!sock.exists(), "the socket is removed on a clean stop");
}
