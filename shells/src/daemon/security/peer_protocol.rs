//! Telling a TLS/plaintext mismatch from other transport failures, so a
//! client can say which flag is missing instead of "transport error".
//!
//! A gRPC (HTTP/2) server speaks first: its SETTINGS frame, whose first
//! byte is 0 (a short length). A TLS server speaks only after the client's
//! hello, in records whose first byte is a content type, 20 to 23. So the
//! first byte from the server tells which one it is:
//!
//! - a plaintext client that gets a TLS record (the alert a TLS server
//!   sends after reading the HTTP/2 preface), or a close before any byte
//!   (the alert lost to the reset), is talking to a TLS server;
//! - a TLS client that gets anything but a TLS record is talking to a
//!   plaintext server.
//!
//! [`connector`] wraps each TCP connection in a [`Sniffed`] stream that
//! checks that byte, fails the read with a [`Mismatch`] and reports it. h2
//! keeps only the text of an I/O error's cause, so [`Mismatch::find`] also
//! recognises its own messages in an error chain; and a call that was
//! waiting on the connection fails with only "connection closed", hence
//! the report.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::Uri;

/// What the first bytes (or their absence) say about the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Plaintext sent, a TLS record came back.
    #[error("the server answered with TLS")]
    ServerSpeaksTls,
    /// Plaintext sent, the connection ended before the server said
    /// anything (an HTTP/2 server would have sent its SETTINGS).
    #[error("the server closed the connection without speaking HTTP/2")]
    ClosedWithoutHttp2,
    /// TLS sent, something other than a TLS record came back.
    #[error("the server answered without TLS")]
    ServerSpeaksPlaintext,
}

impl Mismatch {
    const ALL: [Self; 3] = [
        Self::ServerSpeaksTls,
        Self::ClosedWithoutHttp2,
        Self::ServerSpeaksPlaintext,
    ];

    /// True when the client spoke plaintext and the server may want TLS.
    pub fn server_may_want_tls(self) -> bool {
        !matches!(self, Self::ServerSpeaksPlaintext)
    }

    /// The mismatch behind `err`, if one is in its chain (as the error
    /// itself, inside an `io::Error`, or as text: h2 keeps only that).
    pub fn find(err: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut cause = Some(err);
        while let Some(e) = cause {
            if let Some(m) = e.downcast_ref::<Self>() {
                return Some(*m);
            }
            if let Some(m) = e
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Self>())
            {
                return Some(*m);
            }
            let text = e.to_string();
            if let Some(m) = Self::ALL
                .into_iter()
                .find(|m| text.contains(&m.to_string()))
            {
                return Some(m);
            }
            cause = e.source();
        }
        None
    }

    fn into_io(self, kind: io::ErrorKind) -> io::Error {
        io::Error::new(kind, self)
    }
}

/// First byte of a TLS record: change_cipher_spec, alert, handshake or
/// application_data.
fn is_tls_record(first: u8) -> bool {
    (20..=23).contains(&first)
}

/// Told of each mismatch a [`Sniffed`] connection meets.
pub type Report = Arc<dyn Fn(Mismatch) + Send + Sync>;

/// A connection that checks the server's first byte against the protocol
/// the client speaks.
pub struct Sniffed<T> {
    io: T,
    tls: bool,
    heard: bool,
    report: Report,
}

impl<T> Sniffed<T> {
    /// Wraps `io`; `tls` says whether the client speaks TLS on it.
    pub fn new(io: T, tls: bool, report: Report) -> Self {
        Self {
            io,
            tls,
            heard: false,
            report,
        }
    }

    fn mismatch(&self, m: Mismatch, kind: io::ErrorKind) -> io::Error {
        (self.report)(m);
        m.into_io(kind)
    }

    /// A failure before the server said anything: a plaintext client was
    /// most likely refused by a TLS server.
    fn silent(&self, e: io::Error) -> io::Error {
        let closed = matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        );
        if self.heard || self.tls || !closed {
            return e;
        }
        self.mismatch(Mismatch::ClosedWithoutHttp2, e.kind())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Sniffed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A read into no room says nothing about the end of the stream.
        if this.heard || buf.remaining() == 0 {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        if let Err(e) = ready!(Pin::new(&mut this.io).poll_read(cx, buf)) {
            return Poll::Ready(Err(this.silent(e)));
        }
        let Some(&first) = buf.filled().get(before) else {
            // The end before any byte: rustls names it to a TLS client.
            if this.tls {
                return Poll::Ready(Ok(()));
            }
            let closed = this.mismatch(Mismatch::ClosedWithoutHttp2, io::ErrorKind::UnexpectedEof);
            return Poll::Ready(Err(closed));
        };
        this.heard = true;
        let mismatch = match (this.tls, is_tls_record(first)) {
            (false, true) => Some(Mismatch::ServerSpeaksTls),
            (true, false) => Some(Mismatch::ServerSpeaksPlaintext),
            _ => None,
        };
        match mismatch {
            Some(m) => {
                buf.set_filled(before);
                Poll::Ready(Err(this.mismatch(m, io::ErrorKind::InvalidData)))
            }
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Sniffed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write(cx, data));
        Poll::Ready(written.map_err(|e| this.silent(e)))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = ready!(Pin::new(&mut this.io).poll_flush(cx));
        Poll::Ready(flushed.map_err(|e| this.silent(e)))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs));
        Poll::Ready(written.map_err(|e| this.silent(e)))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A tonic connector (`Endpoint::connect_with_connector`) dialing TCP with
/// TCP_NODELAY, as tonic's own does, each connection [`Sniffed`] and
/// telling `report` of a mismatch. tonic layers TLS on top for an
/// `https://` URI, so that is what the client speaks there.
pub fn connector(
    report: impl Fn(Mismatch) + Send + Sync + 'static,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<Sniffed<TcpStream>>,
    Error = io::Error,
    Future: Send + 'static,
> + Clone
+ Send
+ 'static {
    let report: Report = Arc::new(report);
    tower::service_fn(move |uri: Uri| {
        let report = report.clone();
        async move {
            let tls = uri.scheme_str() == Some("https");
            let host = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "no host in the address")
                })?;
            let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            Ok(TokioIo::new(Sniffed::new(tcp, tls, report)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn first_read(tls: bool, server_says: &'static [u8]) -> io::Result<Vec<u8>> {
        let (client, mut server) = tokio::io::duplex(64);
        server.write_all(server_says).await.unwrap();
        drop(server);
        let mut sniffed = Sniffed::new(client, tls, Arc::new(|_| {}));
        let mut buf = vec![0; 16];
        let n = sniffed.read(&mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    }

    fn mismatch(r: io::Result<Vec<u8>>) -> Option<Mismatch> {
        Mismatch::find(&r.unwrap_err())
    }

    #[tokio::test]
    async fn a_tls_alert_to_a_plaintext_client_names_tls() {
        let alert: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32];
        assert_eq!(
            mismatch(first_read(false, alert).await),
            Some(Mismatch::ServerSpeaksTls)
        );
    }

    #[tokio::test]
    async fn http2_settings_pass_a_plaintext_client_and_fail_a_tls_one() {
        let settings: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
        assert_eq!(first_read(false, settings).await.unwrap(), settings);
        assert_eq!(
            mismatch(first_read(true, settings).await),
            Some(Mismatch::ServerSpeaksPlaintext)
        );
    }

    #[tokio::test]
    async fn a_close_before_any_byte_names_tls_only_to_a_plaintext_client() {
        assert_eq!(
            mismatch(first_read(false, b"").await),
            Some(Mismatch::ClosedWithoutHttp2)
        );
        assert!(first_read(true, b"").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_mismatch_is_reported_for_calls_that_see_only_a_closed_connection() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (client, mut server) = tokio::io::duplex(64);
        server.write_all(&[0x15, 0x03, 0x03]).await.unwrap();
        let log = seen.clone();
        let mut sniffed = Sniffed::new(
            client,
            false,
            Arc::new(move |m| log.lock().unwrap().push(m)),
        );
        assert!(sniffed.read(&mut [0; 8]).await.is_err());
        assert_eq!(*seen.lock().unwrap(), [Mismatch::ServerSpeaksTls]);
    }

    #[test]
    fn the_mismatch_is_found_again_in_the_text_h2_keeps() {
        let io = Mismatch::ServerSpeaksTls.into_io(io::ErrorKind::InvalidData);
        let as_h2_keeps_it = io::Error::new(io.kind(), io.to_string());
        assert_eq!(
            Mismatch::find(&as_h2_keeps_it),
            Some(Mismatch::ServerSpeaksTls)
        );
        assert_eq!(Mismatch::find(&io::Error::other("reset")), None);
    }
}
