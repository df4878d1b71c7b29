//! In-process connections to the harnesses the daemon runs itself.
//!
//! The local and memory runtimes serve built-in harnesses inside the
//! daemon. Their incarnations are published here under `inproc://…`
//! addresses, and [`Harnesses`] connects to those by running the harness
//! adapter ([`HarnessService::execute_inline`]) on a pair of channels
//! instead of over HTTP/2. The frames and events are the same
//! `ControllerFrame` and `Event` messages, and the adapter enforces the same
//! handshake, park and closing rules as on the wire; what is skipped is
//! encoding, h2 framing, a socket per hop, and a task: the execution
//! advances whenever the drive loop polls the connection's events. Every
//! other address goes to the gRPC client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentsessions_machine::vocab::HarnessFailure;
use agentsessions_proto::v1::HarnessDescriptor;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::driver::{Connection, HarnessPort, PortFuture};
use super::harness_client::{GrpcHarnesses, stream_failure};
use crate::harness::{Harness, HarnessService};

/// The scheme of in-process harness addresses.
pub const SCHEME: &str = "inproc://";

/// The harnesses this process serves, by address.
#[derive(Default)]
pub struct InProcess {
    served: Mutex<BTreeMap<String, HarnessService<dyn Harness>>>,
}

impl InProcess {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, HarnessService<dyn Harness>>> {
        // The map stays consistent across a panic elsewhere: every update
        // is a single insert or remove.
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes `harness` as `inproc://{name}` and returns that address.
    /// A name can be published once; withdraw it first to replace it.
    pub fn publish(&self, name: &str, harness: Arc<dyn Harness>) -> String {
        let address = format!("{SCHEME}{name}");
        let previous = self
            .lock()
            .insert(address.clone(), HarnessService::new(harness));
        assert!(previous.is_none(), "{address} published twice");
        address
    }

    /// Stops accepting connections to `address`. Executions already running
    /// finish: each holds its own reference to the harness.
    pub fn withdraw(&self, address: &str) {
        self.lock().remove(address);
    }

    fn service(&self, address: &str) -> Result<HarnessService<dyn Harness>, HarnessFailure> {
        self.lock()
            .get(address)
            .cloned()
            .ok_or_else(|| HarnessFailure::Unavailable(format!("no harness serves {address}")))
    }

    /// The descriptor of the harness at `address`.
    pub fn describe(&self, address: &str) -> Result<HarnessDescriptor, HarnessFailure> {
        self.service(address).map(|s| s.descriptor())
    }

    /// Opens one execution stream to the harness at `address`.
    pub fn connect(&self, address: &str) -> Result<Connection, HarnessFailure> {
        let service = self.service(address)?;
        // Unbounded for the same reason as the gRPC client's frames: the
        // drive loop never waits, and the machine bounds what it sends.
        let (frames, frames_rx) = mpsc::unbounded_channel();
        let inbound = UnboundedReceiverStream::new(frames_rx).map(Ok);
        let events = service
            .execute_inline(inbound)
            .map(|item| item.map_err(stream_failure));
        Ok(Connection {
            frames,
            events: Box::pin(events),
        })
    }
}

/// The daemon's harness client: in-process addresses are served by
/// [`InProcess`], all others over gRPC.
pub struct Harnesses {
    local: Arc<InProcess>,
    wire: GrpcHarnesses,
}

impl Harnesses {
    /// A client that reaches `local`'s harnesses without a transport.
    pub fn new(local: Arc<InProcess>) -> Self {
        Self::with_wire(local, GrpcHarnesses::default())
    }

    /// [`Harnesses::new`] with `wire` for every other address.
    pub fn with_wire(local: Arc<InProcess>, wire: GrpcHarnesses) -> Self {
        Self { local, wire }
    }
}

impl HarnessPort for Harnesses {
    fn describe(
        &self,
        address: String,
    ) -> PortFuture<'_, Result<HarnessDescriptor, HarnessFailure>> {
        if address.starts_with(SCHEME) {
            let described = self.local.describe(&address);
            return Box::pin(async move { described });
        }
        self.wire.describe(address)
    }

    fn connect(&self, address: String) -> PortFuture<'_, Result<Connection, HarnessFailure>> {
        if address.starts_with(SCHEME) {
            let connected = self.local.connect(&address);
            return Box::pin(async move { connected });
        }
        self.wire.connect(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::builtin;
    use agentsessions_machine::events;
    use agentsessions_proto::v1::{
        ControllerFrame, EventKind, ModelResult, Start, controller_frame::Frame, event::Body,
    };

    fn start(execution_id: &str, text: &str) -> ControllerFrame {
        ControllerFrame {
            session: "s1".into(),
            execution_id: execution_id.into(),
            frame: Some(Frame::Start(Start {
                inputs: vec![events::text_message("user", text)],
                ..Start::default()
            })),
        }
    }

    #[tokio::test]
    async fn an_unpublished_or_withdrawn_address_is_unavailable() {
        let local = Arc::new(InProcess::default());
        let harnesses = Harnesses::new(local.clone());
        let missing = harnesses.connect(format!("{SCHEME}nobody")).await;
        assert!(matches!(missing, Err(HarnessFailure::Unavailable(_))));

        let address = local.publish("echo", builtin::build("echo", "").unwrap());
        assert_eq!(
            harnesses.describe(address.clone()).await.unwrap().id,
            builtin::build("echo", "").unwrap().describe().id
        );
        local.withdraw(&address);
        assert!(matches!(
            harnesses.describe(address).await,
            Err(HarnessFailure::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn a_start_frame_runs_one_execution_to_its_end_event() {
        let local = Arc::new(InProcess::default());
        let address = local.publish("echo", builtin::build("echo", "").unwrap());
        let Connection { frames, mut events } = local.connect(&address).unwrap();
        frames.send(start("x1", "hello").into()).unwrap();

        let call = events.next().await.unwrap().unwrap();
        assert_eq!(call.execution_id, "x1");
        assert_eq!(call.kind, EventKind::EventModelCall as i32);
        let Some(Body::Model(model)) = call.body else {
            panic!("not a model call: {call:?}");
        };
        assert_eq!(events::message_text(&model.messages[0]), "hello");
        frames
            .send(
                ControllerFrame {
                    session: "s1".into(),
                    execution_id: "x1".into(),
                    frame: Some(Frame::Model(ModelResult {
                        model_call_id: model.id,
                        ..ModelResult::default()
                    })),
                }
                .into(),
            )
            .unwrap();

        let end = events.next().await.unwrap().unwrap();
        assert_eq!(end.kind, EventKind::EventEnd as i32);
        let Some(Body::End(end)) = end.body else {
            panic!("not an end: {end:?}");
        };
        assert_eq!(end.state, "COMPLETED");
        assert!(events.next().await.is_none(), "the stream closes after END");
    }

    #[tokio::test]
    async fn a_stream_without_start_fails_with_invalid_argument() {
        let local = Arc::new(InProcess::default());
        let address = local.publish("echo", builtin::build("echo", "").unwrap());
        let Connection { frames, mut events } = local.connect(&address).unwrap();
        frames
            .send(
                ControllerFrame {
                    execution_id: "x1".into(),
                    ..ControllerFrame::default()
                }
                .into(),
            )
            .unwrap();
        let failed = events.next().await.unwrap().unwrap_err();
        assert!(failed.contains("first frame must be start"), "{failed}");
        assert!(events.next().await.is_none());
    }
}
