//! A raw `Harness.Connect` peer that breaks the park handshake on purpose.
//!
//! The SDK refuses to acknowledge a park with the wrong tuple, so this peer
//! speaks the protocol directly: it makes one REQUIRES_APPROVAL call, and
//! when the host parks it, answers EVENT_PARKED naming a different tool
//! call. A conforming host must refuse that acknowledgement, cancel the
//! stream, and keep the durable APPROVAL_REQUEST without writing a terminal
//! event.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentsessions_machine::events;
use agentsessions_proto::grpc::harness_server::{Harness as HarnessRpc, HarnessServer};
use agentsessions_proto::v1::{
    ApprovalRef, Capabilities, ControllerFrame, DescribeRequest, Event, EventKind,
    HarnessDescriptor, Mediation, Resumability, ToolCall, controller_frame::Frame, event::Body,
};
use pbjson_types::{Struct, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::harnesses::FOREIGN_PARK;

/// What the raw peer saw.
#[derive(Debug, Default)]
pub struct ForeignParkLog {
    /// Connect streams opened.
    pub streams: AtomicUsize,
    /// Park frames received.
    pub parks: AtomicUsize,
    /// Streams that ended (cancelled, closed or broken) after the bad ack.
    pub ended_after_ack: AtomicUsize,
}

/// The raw peer.
#[derive(Debug, Clone, Default)]
pub struct ForeignPark {
    /// Shared observations.
    pub log: Arc<ForeignParkLog>,
}

impl ForeignPark {
    /// The tonic server.
    pub fn into_server(self) -> HarnessServer<Self> {
        HarnessServer::new(self)
    }
}

fn descriptor() -> HarnessDescriptor {
    HarnessDescriptor {
        id: FOREIGN_PARK.to_owned(),
        models: Vec::new(),
        tools: Vec::new(),
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            fork_safe: true,
            ..Capabilities::default()
        }),
        version: "1".to_owned(),
    }
}

#[tonic::async_trait]
impl HarnessRpc for ForeignPark {
    async fn describe(
        &self,
        _request: Request<DescribeRequest>,
    ) -> Result<Response<HarnessDescriptor>, Status> {
        Ok(Response::new(descriptor()))
    }

    type ConnectStream = ReceiverStream<Result<Event, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let (out, events) = mpsc::channel(8);
        let log = Arc::clone(&self.log);
        log.streams.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(drive(request.into_inner(), out, log));
        Ok(Response::new(ReceiverStream::new(events)))
    }
}

async fn drive(
    mut inbound: Streaming<ControllerFrame>,
    out: mpsc::Sender<Result<Event, Status>>,
    log: Arc<ForeignParkLog>,
) {
    let Ok(Some(first)) = inbound.message().await else {
        return;
    };
    let exec = first.execution_id.clone();
    if !matches!(first.frame, Some(Frame::Start(_))) {
        return;
    }
    let call = ToolCall {
        id: "c1".to_owned(),
        tool: "append_note".to_owned(),
        args: Some(Struct::from_iter([(
            "text".to_owned(),
            Value::from("never".to_owned()),
        )])),
        mediation: Mediation::RequiresApproval as i32,
        idempotency_key: format!("{FOREIGN_PARK}/{exec}/c1"),
    };
    let ev = events::event(&exec, EventKind::EventToolCall, Body::Tool(call));
    if out.send(Ok(ev)).await.is_err() {
        return;
    }
    loop {
        match inbound.message().await {
            Ok(Some(ControllerFrame {
                frame: Some(Frame::Park(park)),
                ..
            })) => {
                log.parks.fetch_add(1, Ordering::SeqCst);
                let foreign = ApprovalRef {
                    tool_call_id: "not-the-parked-call".to_owned(),
                    ..park
                };
                let ack = events::event(&exec, EventKind::EventParked, Body::Parked(foreign));
                if out.send(Ok(ack)).await.is_err() {
                    log.ended_after_ack.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            Ok(Some(ControllerFrame {
                frame: Some(Frame::Cancel(_)),
                ..
            }))
            | Ok(None)
            | Err(_) => {
                if log.parks.load(Ordering::SeqCst) > 0 {
                    log.ended_after_ack.fetch_add(1, Ordering::SeqCst);
                }
                return;
            }
            Ok(Some(_)) => {}
        }
    }
}
