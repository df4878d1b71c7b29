//! [`HarnessService`]: a [`Harness`] as the tonic `Harness` service.

use std::sync::Arc;

use agentsessions_proto::grpc::harness_server::{Harness as HarnessRpc, HarnessServer};
use agentsessions_proto::v1::{
    ControllerFrame, DescribeRequest, Error, Event, EventKind, HarnessDescriptor, HarnessEnd,
    controller_frame::Frame, event::Body,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use super::sink::{Sink, Stop, stopped};
use super::{Harness, HarnessError, History, Outbound, StartInfo};

/// The generated server type wrapping a service; madsim-tonic's carries
/// an interceptor parameter that real tonic's does not.
#[cfg(not(madsim))]
pub type ServerOf<S> = HarnessServer<S>;
/// The generated server type wrapping a service; madsim-tonic's carries
/// an interceptor parameter that real tonic's does not.
#[cfg(madsim)]
pub type ServerOf<S> = HarnessServer<S, tonic::codegen::IdentityInterceptor>;

/// Events buffered towards the host before the harness has to wait.
const OUT_CAPACITY: usize = 16;

/// Serves one [`Harness`]: `Describe` answers its descriptor and every
/// `Connect` stream runs one execution.
pub struct HarnessService<H: ?Sized> {
    harness: Arc<H>,
}

impl<H: ?Sized> Clone for HarnessService<H> {
    fn clone(&self) -> Self {
        Self {
            harness: Arc::clone(&self.harness),
        }
    }
}

impl<H: Harness + ?Sized> HarnessService<H> {
    /// Wraps `harness`; state it keeps (e.g. the counter's) is shared by
    /// every stream of this service.
    pub fn new(harness: Arc<H>) -> Self {
        Self { harness }
    }

    /// What `Describe` answers.
    pub fn descriptor(&self) -> HarnessDescriptor {
        self.harness.describe()
    }

    /// The tonic server to add to a router.
    pub fn into_server(self) -> ServerOf<Self> {
        HarnessServer::new(self)
    }
}

#[tonic::async_trait]
impl<H: Harness + ?Sized> HarnessRpc for HarnessService<H> {
    async fn describe(
        &self,
        _request: Request<DescribeRequest>,
    ) -> Result<Response<HarnessDescriptor>, Status> {
        Ok(Response::new(self.harness.describe()))
    }

    type ConnectStream = ReceiverStream<Result<Event, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<ControllerFrame>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        // Answer the headers at once and read Start in the task: a host may
        // wait for the response before it sends its first frame.
        let frames = request.into_inner().map(|f| f.map(Outbound::from));
        Ok(Response::new(self.execute(frames)))
    }
}

impl<H: Harness + ?Sized> HarnessService<H> {
    /// Runs one execution over `inbound` host frames, in a task of its own,
    /// and returns its events. This is `Connect` without the transport: the
    /// tonic service and the daemon's in-process connections both use it,
    /// so the handshake, park and closing rules are the same for both.
    pub fn execute<S>(&self, inbound: S) -> ReceiverStream<Result<Event, Status>>
    where
        S: Stream<Item = Result<Outbound, Status>> + Send + Unpin + 'static,
    {
        let (out, events) = mpsc::channel(OUT_CAPACITY);
        tokio::spawn(drive(Arc::clone(&self.harness), inbound, out));
        ReceiverStream::new(events)
    }

    /// [`Self::execute`] without a task: the execution advances when the
    /// returned stream is polled, in the poller's task. The daemon's drive
    /// loop runs its in-process harnesses this way, so a frame it sends is
    /// answered within the same poll instead of after a task switch, and the
    /// loop yields (letting response frames out) only when it must wait.
    /// Dropping the stream drops the execution where it stands.
    pub fn execute_inline<S>(&self, inbound: S) -> InlineExecution
    where
        S: Stream<Item = Result<Outbound, Status>> + Send + Unpin + 'static,
        H: 'static,
    {
        let (out, events) = mpsc::channel(OUT_CAPACITY);
        InlineExecution {
            run: Some(Box::pin(drive(Arc::clone(&self.harness), inbound, out))),
            events: ReceiverStream::new(events),
        }
    }
}

/// An execution driven by its own event stream (see
/// [`HarnessService::execute_inline`]).
pub struct InlineExecution {
    run: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    events: ReceiverStream<Result<Event, Status>>,
}

impl Stream for InlineExecution {
    type Item = Result<Event, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        // Advance the run first so what it emits in this poll is seen now;
        // once it returns, its sender is gone and the stream ends after the
        // events already queued.
        if let Some(run) = self.run.as_mut()
            && run.as_mut().poll(cx).is_ready()
        {
            self.run = None;
        }
        std::pin::Pin::new(&mut self.events).poll_next(cx)
    }
}

/// How the run ended, before the closing event is chosen.
enum Outcome {
    Ran(Result<(), HarnessError>),
    Stopped(Stop),
}

/// One execution: handshake, run, closing event.
async fn drive<H, S>(harness: Arc<H>, inbound: S, out: mpsc::Sender<Result<Event, Status>>)
where
    H: Harness + ?Sized,
    S: Stream<Item = Result<Outbound, Status>> + Send + Unpin + 'static,
{
    let mut inbound = inbound;
    let first = tokio::select! {
        biased;
        _ = out.closed() => return,
        first = inbound.next() => first.transpose(),
    };
    // A Start from this process carries its history beside the frame;
    // one read off the wire carries it inside.
    let (first, shared) = match first {
        Ok(Some(Outbound { frame, history })) => (Ok(Some(frame)), history),
        Ok(None) => (Ok(None), None),
        Err(e) => (Err(e), None),
    };
    let inbound = inbound.map(|f| f.map(|o| o.frame));
    let (envelope, start) = match first {
        Ok(Some(ControllerFrame {
            session,
            execution_id,
            frame: Some(Frame::Start(start)),
        })) if !execution_id.is_empty() => ((session, execution_id), start),
        Ok(Some(ControllerFrame {
            frame: Some(Frame::Start(_)),
            ..
        })) => {
            let _ = out
                .send(Err(Status::invalid_argument(
                    "start without an execution id",
                )))
                .await;
            return;
        }
        Ok(Some(_)) => {
            let _ = out
                .send(Err(Status::invalid_argument("first frame must be start")))
                .await;
            return;
        }
        // Closed or broken before Start: there is no execution to end.
        Ok(None) | Err(_) => return,
    };
    let (session, execution_id) = envelope;

    let (stop_tx, mut stop_rx) = watch::channel(None);
    let (frames_tx, frames_rx) = mpsc::channel(1);
    let mut sink = Sink::new(
        execution_id.clone(),
        session.clone(),
        out.clone(),
        frames_rx,
        stop_rx.clone(),
    );
    let info = StartInfo {
        execution_id,
        session,
        config: start.config,
        history: shared.unwrap_or_else(|| History::from_events(start.history)),
        inputs: start.inputs,
        identity: start.identity,
        resume_from_seq: start.resume_from_seq,
    };
    let outcome = {
        // Dropping the run future is how a stop interrupts a harness that
        // is busy outside the sink.
        let run = harness.run(info, &mut sink);
        tokio::pin!(run);
        // The pump runs beside the harness in this same future, not as a
        // task of its own; its end (a half-close, or a Cancel it has
        // already reported through `stop`) does not end the run.
        let pump = pump(inbound, frames_tx, stop_tx);
        tokio::pin!(pump);
        let mut pumping = true;
        loop {
            tokio::select! {
                biased;
                stop = stopped(&mut stop_rx) => break Outcome::Stopped(stop),
                _ = out.closed() => break Outcome::Stopped(Stop::Gone),
                () = &mut pump, if pumping => pumping = false,
                result = &mut run => break Outcome::Ran(result),
            }
        }
    };
    close(&sink, outcome).await;
}

/// Reads host frames while the harness runs, so a Cancel or a broken
/// transport is noticed even when the harness is not waiting for a reply.
async fn pump<S>(
    mut inbound: S,
    frames: mpsc::Sender<ControllerFrame>,
    stop: watch::Sender<Option<Stop>>,
) where
    S: Stream<Item = Result<ControllerFrame, Status>> + Unpin,
{
    loop {
        let next = tokio::select! {
            biased;
            _ = frames.closed() => return,
            next = inbound.next() => next.transpose(),
        };
        match next {
            Ok(Some(ControllerFrame {
                frame: Some(Frame::Cancel(cancel)),
                ..
            })) => {
                stop.send_replace(Some(Stop::Canceled(cancel.reason)));
                return;
            }
            Ok(Some(frame)) => {
                if frames.send(frame).await.is_err() {
                    return;
                }
            }
            // A half-close is not a cancel: the harness may still emit, and
            // only a sink call that needs a reply fails (the frames channel
            // closes when this returns).
            Ok(None) => return,
            Err(_) => {
                stop.send_replace(Some(Stop::Gone));
                return;
            }
        }
    }
}

/// Sends what ends the stream: PARKED after a pure park, else END.
async fn close(sink: &Sink, outcome: Outcome) {
    let result = match outcome {
        Outcome::Stopped(Stop::Gone) => return,
        Outcome::Stopped(Stop::Canceled(reason)) => Err(HarnessError::Canceled(reason)),
        Outcome::Ran(result) => result,
    };
    if let Some(park) = sink.parked() {
        match result {
            Ok(()) => {}
            Err(HarnessError::Parked(ref unwound)) if unwound == park => {}
            // The park was joined with another failure: the harness did
            // not simply stop, so it must not acknowledge the park.
            Err(e) => {
                sink.send_status(Status::unknown(e.to_string())).await;
                return;
            }
        }
        sink.send_final(EventKind::EventParked, Body::Parked(park.clone()))
            .await;
        return;
    }
    let failure = sink.sticky_failure().cloned().or(result.err());
    match failure {
        None => {
            sink.send_final(EventKind::EventEnd, end("COMPLETED", None))
                .await;
        }
        Some(HarnessError::Canceled(reason)) => {
            let error = Error {
                code: Code::Cancelled as i32,
                description: reason.clone(),
            };
            sink.send_final(EventKind::EventEnd, end("CANCELED", Some(error)))
                .await;
            sink.send_status(Status::cancelled(reason)).await;
        }
        Some(e) => {
            let description = e.to_string();
            let error = Error {
                code: 0,
                description: description.clone(),
            };
            sink.send_final(EventKind::EventEnd, end("FAILED", Some(error)))
                .await;
            // As the reference does, the stream also fails after the END.
            sink.send_status(Status::unknown(description)).await;
        }
    }
}

fn end(state: &str, error: Option<Error>) -> Body {
    Body::End(HarnessEnd {
        state: state.to_owned(),
        error,
    })
}
