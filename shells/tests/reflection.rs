//! Server reflection on the Sessions listener, in both protocol versions:
//! v1 for grpcurl and grpc-go, v1alpha for Python's grpcio-reflection,
//! Postman and Evans. (The conformance suite also asks v1alpha from a real
//! grpcio-reflection client.)

use agentsessions_shells::daemon::app::Daemon;
use tonic::transport::Channel;
use tonic_reflection::pb::{v1, v1alpha};

#[path = "support/daemon.rs"]
mod support;
use support::config;

const SESSIONS: &str = "agentsessions.v1.Sessions";

async fn channel(daemon: &Daemon) -> Channel {
    Channel::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Defines `$name`, which lists the services and then asks for the file
/// declaring Sessions over reflection version `$v`; it returns the service
/// names and the number of file descriptors in the answer. The two versions
/// have the same messages in different generated modules.
macro_rules! ask {
    ($name:ident, $v:ident) => {
        async fn $name(ch: Channel) -> (Vec<String>, usize) {
            use $v::server_reflection_request::MessageRequest as Ask;
            use $v::server_reflection_response::MessageResponse as Answer;
            let mut client = $v::server_reflection_client::ServerReflectionClient::new(ch);
            let asks = [
                Ask::ListServices(String::new()),
                Ask::FileContainingSymbol(SESSIONS.into()),
            ];
            let requests = asks.map(|a| $v::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(a),
            });
            let mut answers = client
                .server_reflection_info(tokio_stream::iter(requests))
                .await
                .unwrap()
                .into_inner();
            let (mut services, mut files) = (Vec::new(), 0);
            while let Some(a) = answers.message().await.unwrap() {
                match a.message_response.unwrap() {
                    Answer::ListServicesResponse(l) => {
                        services.extend(l.service.into_iter().map(|s| s.name))
                    }
                    Answer::FileDescriptorResponse(f) => files += f.file_descriptor_proto.len(),
                    other => panic!("unexpected answer {other:?}"),
                }
            }
            (services, files)
        }
    };
}

ask!(ask_v1, v1);
ask!(ask_v1alpha, v1alpha);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_and_v1alpha_both_list_and_describe_the_sessions_api() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(config(dir.path())).await.unwrap();
    let (v1_services, v1_files) = ask_v1(channel(&daemon).await).await;
    let (alpha_services, alpha_files) = ask_v1alpha(channel(&daemon).await).await;
    for services in [&v1_services, &alpha_services] {
        assert!(services.iter().any(|s| s == SESSIONS), "{services:?}");
    }
    // Each version lists its own reflection service; the API is the same.
    let api = |l: &[String]| -> Vec<String> {
        l.iter()
            .filter(|s| !s.starts_with("grpc.reflection."))
            .cloned()
            .collect()
    };
    assert_eq!(
        api(&v1_services),
        api(&alpha_services),
        "one API, two protocols"
    );
    assert!(
        v1_files > 0 && v1_files == alpha_files,
        "{v1_files} {alpha_files}"
    );
}
