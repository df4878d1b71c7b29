//! One check's world: fresh peers, a fresh journal directory, and the host
//! under test, which the check may restart or kill.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentsessions_proto::v1::LogRecord;
use tempfile::TempDir;

use crate::checks::Failure;
use crate::client::{self, Client};
use crate::host::{HostSpec, Launcher, Running};
use crate::peers::Peers;

/// The model id hosts are configured with.
pub const MODEL: &str = "gpt-test";

/// A check's environment.
pub struct Env {
    /// The fake model and the harness servers.
    pub peers: Peers,
    launcher: Arc<dyn Launcher>,
    spec: HostSpec,
    host: Option<Box<dyn Running>>,
    client: Option<Client>,
    pub(crate) snapshots: Vec<(String, String)>,
    pub(crate) notes: Vec<String>,
    _dir: TempDir,
}

impl Env {
    /// Starts fresh peers and prepares an empty journal path; the host is
    /// not started yet, so a check may preload the journal first.
    pub async fn new(launcher: Arc<dyn Launcher>) -> Result<Self, Failure> {
        let dir = tempfile::Builder::new()
            .prefix("conformance-")
            .tempdir()
            .map_err(|e| Failure(format!("temp dir: {e}")))?;
        let peers = Peers::start().await.map_err(Failure)?;
        let spec = HostSpec {
            journal: dir.path().join("journal.db"),
            model_url: peers.model.base_url().to_owned(),
            model: MODEL.to_owned(),
            harnesses: peers.harnesses.clone(),
            dir: dir.path().to_path_buf(),
        };
        Ok(Self {
            peers,
            launcher,
            spec,
            host: None,
            client: None,
            snapshots: Vec::new(),
            notes: Vec::new(),
            _dir: dir,
        })
    }

    /// The journal file the host is started with.
    pub fn journal(&self) -> &Path {
        &self.spec.journal
    }

    /// Starts the host (a no-op if it runs).
    pub async fn start(&mut self) -> Result<(), Failure> {
        if self.host.is_some() {
            return Ok(());
        }
        let host = self
            .launcher
            .start(&self.spec)
            .await
            .map_err(|e| Failure(format!("start host: {e}")))?;
        self.client = Some(client::connect(host.addr()).await.map_err(Failure)?);
        self.host = Some(host);
        Ok(())
    }

    /// Stops the host gracefully and starts a new one on the same journal
    /// (a fresh controller, a new fence).
    pub async fn restart(&mut self) -> Result<(), Failure> {
        self.client = None;
        if let Some(h) = self.host.take() {
            h.stop().await;
        }
        self.start().await
    }

    /// Kills the host abruptly (no restart).
    pub async fn kill(&mut self) {
        self.client = None;
        if let Some(h) = self.host.take() {
            h.kill().await;
        }
    }

    /// Kills the host and starts a new one on the same journal.
    pub async fn crash(&mut self) -> Result<(), Failure> {
        self.kill().await;
        self.start().await
    }

    /// A client of the running host.
    pub fn client(&self) -> Result<Client, Failure> {
        self.client
            .clone()
            .ok_or_else(|| Failure("no host is running".into()))
    }

    /// Completion requests the fake model received so far.
    pub fn model_requests(&self) -> usize {
        self.peers.model.requests()
    }

    /// Records a normalized snapshot of `records` under `name`.
    pub fn snapshot(&mut self, name: &str, sessions: &[&str], records: &[LogRecord]) {
        self.snapshots
            .push((name.to_owned(), crate::render::render(sessions, records)));
    }

    /// Adds a remark to the check's report line (e.g. a part skipped).
    pub fn note(&mut self, text: impl Into<String>) {
        let text = text.into();
        if !self.notes.contains(&text) {
            self.notes.push(text);
        }
    }

    /// How many notes `append_note` wrote for `session`, if the host keeps
    /// them where our daemon does (`<journal dir>/notes/<uid>.notes`). The
    /// count of a real side effect is host-specific, so None means "not
    /// observable here", not zero.
    pub fn effect_count(&self, session: &str) -> Option<usize> {
        let dir = self.spec.journal.parent()?.join("notes");
        if !dir.is_dir() {
            // Our daemon creates the directory with its first note.
            return self.launcher.notes_beside_journal().then_some(0);
        }
        let file: PathBuf = dir.join(format!("{session}.notes"));
        Some(
            std::fs::read_to_string(file)
                .map(|t| t.lines().count())
                .unwrap_or(0),
        )
    }

    /// Ends the host abruptly (a held turn would block a graceful stop).
    pub async fn teardown(mut self) {
        self.kill().await;
    }
}
