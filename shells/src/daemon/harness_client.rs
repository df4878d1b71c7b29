//! The host side of the Harness SPI over gRPC: Describe and Connect to a
//! harness at `host:port`, `dns:///host:port`, `https://host:port` (TLS,
//! the server verified against `--harness-ca`, optionally presenting a
//! client certificate) or a unix socket.
//!
//! Under `--cfg madsim` tonic is madsim-tonic, whose channels run over the
//! simulated network: TCP addresses work unchanged (a lazy channel to
//! `http://ip:port`), unix sockets are refused.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use agentsessions_machine::vocab::HarnessFailure;
use agentsessions_proto::grpc::harness_client::HarnessClient;
use agentsessions_proto::v1::{DescribeRequest, Event, HarnessDescriptor};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};

use super::driver::{Connection, HarnessPort, PortFuture};
use crate::causes;
use crate::harness::Outbound;

/// Where a harness address points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// TCP, as an `http://host:port` URI.
    Tcp(String),
    /// TLS over TCP, as an `https://host:port` URI.
    Tls(String),
    /// A unix socket path.
    Unix(String),
}

/// Parses the address forms the daemon accepts; anything else is refused.
pub fn parse_address(address: &str) -> Result<Target, String> {
    if let Some(path) = address.strip_prefix("unix://") {
        return non_empty(path).map(Target::Unix);
    }
    if let Some(path) = address.strip_prefix("unix:") {
        return non_empty(path).map(Target::Unix);
    }
    let host_port = if let Some(rest) = address.strip_prefix("dns:///") {
        rest
    } else if let Some(rest) = address.strip_prefix("dns://") {
        // dns://resolver/host:port: the system resolver is used.
        rest.split_once('/').map(|(_, hp)| hp).unwrap_or("")
    } else if address.starts_with("http://") {
        return Ok(Target::Tcp(address.to_owned()));
    } else if let Some(rest) = address.strip_prefix("https://") {
        return match rest.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Target::Tls(address.to_owned()))
            }
            _ => Err(format!("unsupported harness address {address:?}")),
        };
    } else {
        address
    };
    match host_port.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(Target::Tcp(format!("http://{host_port}")))
        }
        _ => Err(format!("unsupported harness address {address:?}")),
    }
}

fn non_empty(path: &str) -> Result<String, String> {
    if path.is_empty() {
        Err("empty unix socket path".into())
    } else {
        Ok(path.to_owned())
    }
}

/// TLS settings for `https://` harness addresses.
#[cfg(not(madsim))]
pub type HarnessTls = tonic::transport::ClientTlsConfig;
/// TLS settings for `https://` harness addresses (TLS is not simulated).
#[cfg(madsim)]
pub type HarnessTls = ();

/// A lazily connecting channel to `target`; `tls` verifies an https
/// harness (without it, the bundled web roots do).
pub fn channel(target: &Target, tls: Option<&HarnessTls>) -> Result<Channel, String> {
    match target {
        Target::Tcp(uri) => Endpoint::from_shared(uri.clone())
            .map(|e| e.connect_lazy())
            .map_err(|e| format!("bad harness address: {e}")),
        #[cfg(madsim)]
        Target::Tls(uri) => {
            let _ = tls;
            Err(format!(
                "{uri}: TLS is not available in the madsim simulation"
            ))
        }
        #[cfg(not(madsim))]
        Target::Tls(uri) => {
            let config = tls
                .cloned()
                .unwrap_or_else(|| HarnessTls::new().with_webpki_roots());
            Endpoint::from_shared(uri.clone())
                .and_then(|e| e.tls_config(config))
                .map(|e| e.connect_lazy())
                .map_err(|e| format!("bad harness address {uri}: {e}"))
        }
        #[cfg(madsim)]
        Target::Unix(path) => Err(format!(
            "unix socket {path}: not available in the madsim simulation"
        )),
        #[cfg(not(madsim))]
        Target::Unix(path) => {
            let path = path.clone();
            // The URI is required by the API and ignored by the connector.
            let endpoint = Endpoint::from_static("http://localhost");
            Ok(
                endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                })),
            )
        }
    }
}

/// True when `status` was made by the transport (a refused TLS handshake,
/// a reset connection), not sent by the harness.
fn from_transport(status: &tonic::Status) -> bool {
    let mut cause = std::error::Error::source(status);
    while let Some(c) = cause {
        if c.is::<tonic::transport::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Maps a gRPC failure: outages and timeouts are "unavailable", and so is
/// a connection the transport could not make or keep (a refused TLS
/// handshake reaches here as CANCELLED or as UNKNOWN "transport error";
/// the host never cancels a call it still awaits).
fn failure(status: tonic::Status) -> HarnessFailure {
    // A transport-made status keeps the cause (refused, reset, a TLS
    // alert) in its source; the message alone says only "tcp connect error".
    let message = causes::status(&status);
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            HarnessFailure::Unavailable(message)
        }
        tonic::Code::Unknown if from_transport(&status) => HarnessFailure::Unavailable(message),
        code => HarnessFailure::Other {
            code: code as i32,
            message,
        },
    }
}

/// How a broken Connect stream is reported to the machine.
pub(crate) fn stream_failure(status: tonic::Status) -> String {
    format!("harness stream failed: {}", causes::status(&status))
}

/// A harness client with one cached channel per address.
#[derive(Default)]
pub struct GrpcHarnesses {
    channels: Mutex<BTreeMap<String, Channel>>,
    tls: Option<HarnessTls>,
}

impl GrpcHarnesses {
    /// A client whose `https://` channels use `tls`.
    pub fn with_tls(tls: Option<HarnessTls>) -> Self {
        Self {
            channels: Mutex::default(),
            tls,
        }
    }

    fn client(&self, address: &str) -> Result<HarnessClient<Channel>, HarnessFailure> {
        self.channel(address).map(HarnessClient::new)
    }

    fn channel(&self, address: &str) -> Result<Channel, HarnessFailure> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ch) = channels.get(address) {
            return Ok(ch.clone());
        }
        let target = parse_address(address).map_err(HarnessFailure::Unavailable)?;
        let ch = channel(&target, self.tls.as_ref()).map_err(HarnessFailure::Unavailable)?;
        if matches!(target, Target::Unix(_)) {
            // Harnesses on unix sockets come and go (a harnessnode per
            // sandbox); a path that no longer exists will never answer
            // again, so its channel is dropped rather than kept for the
            // daemon's life.
            channels.retain(|a, _| match parse_address(a) {
                Ok(Target::Unix(p)) => std::path::Path::new(&p).exists(),
                _ => true,
            });
        }
        channels.insert(address.to_owned(), ch.clone());
        Ok(ch)
    }
}

impl HarnessPort for GrpcHarnesses {
    fn describe(
        &self,
        address: String,
    ) -> PortFuture<'_, Result<HarnessDescriptor, HarnessFailure>> {
        Box::pin(async move {
            let mut client = self.client(&address)?;
            client
                .describe(DescribeRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(failure)
        })
    }

    fn connect(&self, address: String) -> PortFuture<'_, Result<Connection, HarnessFailure>> {
        Box::pin(async move {
            let channel = self.channel(&address)?;
            // Unbounded: the drive loop sends frames without waiting. The
            // machine sends one frame per harness event it answers, and
            // caps a harness's unanswered events (INBOX_LIMIT).
            let (frames, frames_rx) = mpsc::unbounded_channel();
            let outbound = UnboundedReceiverStream::new(frames_rx);
            let mut request = tonic::Request::new(outbound);
            // The dial's span is current: a harness that traces joins it.
            for (key, value) in crate::telemetry::propagation::outgoing_headers() {
                if let (Ok(k), Ok(v)) = (
                    tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
                    value.parse(),
                ) {
                    request.metadata_mut().insert(k, v);
                }
            }
            // The call is not awaited here: its future resolves only when
            // the harness sends response headers, and grpcio and grpc-go
            // harnesses send them with their first event, after reading
            // Start. The drive loop polls the events stream, which drives
            // the call, so Start flows while the headers are still due.
            let call: CallFuture = Box::pin(async move {
                connect_call(channel, request)
                    .await
                    .map(tonic::Response::into_inner)
            });
            Ok(Connection {
                frames,
                events: Box::pin(Opening::Call(call)),
            })
        })
    }
}

/// Harness.Connect with each frame encoded by [`Outbound::encode_wire`]:
/// a Start's history goes onto the wire from the shared journal records,
/// not from a copy of them.
#[cfg(not(madsim))]
async fn connect_call(
    channel: Channel,
    request: tonic::Request<UnboundedReceiverStream<Outbound>>,
) -> Result<tonic::Response<tonic::Streaming<Event>>, tonic::Status> {
    use tonic::codegen::{GrpcMethod, http};
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| {
        tonic::Status::unavailable(format!("harness channel not ready: {}", causes::chain(&e)))
    })?;
    let mut request = request;
    request
        .extensions_mut()
        .insert(GrpcMethod::new("agentsessions.v1.Harness", "Connect"));
    let path = http::uri::PathAndQuery::from_static("/agentsessions.v1.Harness/Connect");
    grpc.streaming(request, path, ConnectCodec).await
}

/// madsim-tonic moves messages without encoding them: the frame is built
/// whole, history copied in, and sent through the generated client.
#[cfg(madsim)]
async fn connect_call(
    channel: Channel,
    request: tonic::Request<UnboundedReceiverStream<Outbound>>,
) -> Result<tonic::Response<tonic::Streaming<Event>>, tonic::Status> {
    use tokio_stream::StreamExt as _;
    let request = request.map(|frames| frames.map(Outbound::into_wire));
    HarnessClient::new(channel).connect(request).await
}

/// The host's codec for Connect: frames out by [`Outbound::encode_wire`],
/// events in by prost.
#[cfg(not(madsim))]
struct ConnectCodec;

#[cfg(not(madsim))]
impl tonic::codec::Codec for ConnectCodec {
    type Encode = Outbound;
    type Decode = Event;
    type Encoder = OutboundEncoder;
    type Decoder = tonic_prost::ProstDecoder<Event>;

    fn encoder(&mut self) -> Self::Encoder {
        OutboundEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(tonic::codec::BufferSettings::default())
    }
}

#[cfg(not(madsim))]
struct OutboundEncoder;

#[cfg(not(madsim))]
impl tonic::codec::Encoder for OutboundEncoder {
    type Item = Outbound;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Outbound,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode_wire(buf)
            .map_err(|e| tonic::Status::internal(format!("encoding a frame: {e}")))
    }
}

type CallFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<tonic::Streaming<Event>, tonic::Status>> + Send>>;

/// A Connect call's events: first the call itself (until the response
/// headers), then the response stream. A call refused before any header is
/// a stream failure like any other.
enum Opening {
    Call(CallFuture),
    Open(Box<tonic::Streaming<Event>>),
    Done,
}

impl tokio_stream::Stream for Opening {
    type Item = Result<Event, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match &mut *self {
                Opening::Call(call) => match std::task::ready!(call.as_mut().poll(cx)) {
                    Ok(stream) => *self = Opening::Open(Box::new(stream)),
                    Err(status) => {
                        *self = Opening::Done;
                        return Poll::Ready(Some(Err(stream_failure(status))));
                    }
                },
                Opening::Open(stream) => {
                    let item = std::task::ready!(Pin::new(&mut **stream).poll_next(cx));
                    return Poll::Ready(item.map(|r| r.map_err(stream_failure)));
                }
                Opening::Done => return Poll::Ready(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_forms_parse_and_unknown_forms_are_refused() {
        assert_eq!(
            parse_address("127.0.0.1:9000"),
            Ok(Target::Tcp("http://127.0.0.1:9000".into()))
        );
        assert_eq!(
            parse_address("dns:///h.example:80"),
            Ok(Target::Tcp("http://h.example:80".into()))
        );
        assert_eq!(
            parse_address("dns://8.8.8.8/h.example:80"),
            Ok(Target::Tcp("http://h.example:80".into()))
        );
        assert_eq!(
            parse_address("unix:///run/h.sock"),
            Ok(Target::Unix("/run/h.sock".into()))
        );
        assert_eq!(
            parse_address("unix:h.sock"),
            Ok(Target::Unix("h.sock".into()))
        );
        assert!(parse_address("h.example").is_err());
        assert!(parse_address("unix:").is_err());
        assert!(parse_address("h:notaport").is_err());
    }
}
