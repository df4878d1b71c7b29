//! The suite's peers: the fake model and the harness servers, bound on
//! loopback before the host under test starts.

use std::sync::Arc;

use agentsessions_shells::harness::HarnessService;
use agentsessions_shells::harness::serve::{ListenAddr, Listener};
use tokio::sync::watch;

use crate::harnesses::{self, Control};
use crate::model::FakeModel;
use crate::python::PythonPeers;
use crate::rawpark::ForeignPark;

/// Everything a host under test talks to besides its journal.
#[derive(Debug)]
pub struct Peers {
    /// The fake OpenAI-compatible model.
    pub model: FakeModel,
    /// Steering and observation of the SDK harnesses.
    pub control: Arc<Control>,
    /// The raw park peer.
    pub foreign_park: ForeignPark,
    /// (name, host:port) of every harness server, Python ones included.
    pub harnesses: Vec<(String, String)>,
    /// The Python harness process, or why it is unavailable.
    pub python: Result<PythonPeers, String>,
    stop: watch::Sender<bool>,
}

impl Peers {
    /// Binds and serves every peer.
    pub async fn start() -> Result<Self, String> {
        // Python boots while the Rust peers bind.
        let python = tokio::spawn(PythonPeers::start());
        let model = FakeModel::start()
            .await
            .map_err(|e| format!("fake model: {e}"))?;
        let control = Arc::new(Control::default());
        let (stop, _) = watch::channel(false);
        let mut addrs = Vec::new();
        for (name, harness) in harnesses::sdk_harnesses(&control) {
            let listener = Listener::bind(&ListenAddr::Tcp("127.0.0.1:0".into()))
                .await
                .map_err(|e| format!("harness {name}: {e}"))?;
            addrs.push((name.to_owned(), listener.local_addr().to_string()));
            let shutdown = stopped(stop.subscribe());
            tokio::spawn(listener.serve(HarnessService::new(harness), shutdown));
        }
        let foreign_park = ForeignPark::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("harness {}: {e}", harnesses::FOREIGN_PARK))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("harness {}: {e}", harnesses::FOREIGN_PARK))?;
        addrs.push((harnesses::FOREIGN_PARK.to_owned(), addr.to_string()));
        let server = foreign_park.clone().into_server();
        let shutdown = stopped(stop.subscribe());
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await;
        });
        let python = python
            .await
            .unwrap_or_else(|e| Err(format!("python harnesses: {e}")));
        if let Ok(py) = &python {
            addrs.extend(py.harnesses.iter().cloned());
        }
        Ok(Self {
            model,
            control,
            foreign_park,
            harnesses: addrs,
            python,
            stop,
        })
    }

    /// The address of harness `name`.
    pub fn address(&self, name: &str) -> Option<&str> {
        self.harnesses
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.as_str())
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
