//! The memory-snapshot runtime (`Backend::Memory`): one harness instance
//! per session, each published in process under its own address, whose memory is
//! captured by Snapshot and rebuilt by Restore, Fork and a Create after a
//! Snapshot.
//!
//! This stands in for a VM or container snapshot service, in process: the
//! instance's memory is taken through [`MemoryHarness::save`], kept under a
//! `mem://<id>` reference, and loaded into a new instance when the session
//! (or a fork child) comes back. Snapshots live in the daemon's memory, so
//! they do not survive a restart; a session whose snapshot is gone starts
//! from a fresh instance on Create and is refused on Restore.
//!
//! Session states, per uid:
//! * **live** — an instance is serving; Create and Restore attach to it.
//! * **cold** — a Snapshot captured it and stopped the instance; Create or
//!   Restore loads the snapshot into a new instance.
//! * **unknown** — Create starts a fresh instance.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentsessions_proto::v1::SnapshotRef;

use super::inproc::InProcess;
use crate::harness::{MemoryHarness, builtin};

/// The scheme of the snapshot references this runtime hands out.
pub const SCHEME: &str = "mem://";

struct Instance {
    harness: Arc<dyn MemoryHarness>,
    address: String,
    local: Arc<InProcess>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Executions in flight finish; the address goes now, so nothing new
        // can reach a stopped instance.
        self.local.withdraw(&self.address);
    }
}

enum Slot {
    Live(Instance),
    Cold(String),
}

struct Saved {
    kind: String,
    bytes: Arc<Vec<u8>>,
}

#[derive(Default)]
struct State {
    sessions: BTreeMap<String, Slot>,
    snapshots: BTreeMap<String, Saved>,
    next: u64,
}

/// See the module docs.
pub struct MemoryRuntime {
    local: Arc<InProcess>,
    state: Mutex<State>,
}

impl MemoryRuntime {
    /// Instances are published on `local`.
    pub fn new(local: Arc<InProcess>) -> Self {
        Self {
            local,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind, which
        // stay consistent enough to keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Create: attach to the live instance, reload a cold one, or boot.
    pub fn create(&self, kind: &str, session: &str) -> Result<String, String> {
        let mut st = self.lock();
        let saved = match st.sessions.get(session) {
            Some(Slot::Live(i)) => return Ok(i.address.clone()),
            Some(Slot::Cold(id)) => Some(snapshot_bytes(&st, id, kind)?),
            None => None,
        };
        self.start(&mut st, kind, session, saved.as_deref().map(Vec::as_slice))
    }

    /// Restore: attach to the live instance, else load the referenced
    /// snapshot (or the session's own latest one when the reference names
    /// none).
    pub fn restore(&self, kind: &str, snapshot: &SnapshotRef) -> Result<String, String> {
        let session = non_empty(&snapshot.local, "restore requires a session")?;
        let mut st = self.lock();
        if let Some(Slot::Live(i)) = st.sessions.get(session) {
            return Ok(i.address.clone());
        }
        let saved = match (snapshot_id(snapshot)?, st.sessions.get(session)) {
            (Some(id), _) => Some(snapshot_bytes(&st, id, kind)?),
            (None, Some(Slot::Cold(id))) => Some(snapshot_bytes(&st, id, kind)?),
            (None, _) => None,
        };
        self.start(&mut st, kind, session, saved.as_deref().map(Vec::as_slice))
    }

    /// Snapshot (EXTERNAL, the cold transition): capture the memory, stop
    /// the instance. A cold session answers its existing snapshot again; a
    /// session that never ran is captured as a fresh instance's memory.
    pub fn snapshot(&self, kind: &str, session: &str) -> Result<SnapshotRef, String> {
        let session = non_empty(session, "snapshot requires a session")?;
        let mut st = self.lock();
        let bytes = match st.sessions.get(session) {
            Some(Slot::Cold(id)) => return Ok(reference(session, id)),
            Some(Slot::Live(i)) => i.harness.save(),
            None => builtin::memory(kind, None)
                .map_err(|e| e.to_string())?
                .save(),
        };
        st.next += 1;
        let id = format!("{session}-{}", st.next);
        st.snapshots.insert(
            id.clone(),
            Saved {
                kind: kind.to_owned(),
                bytes: Arc::new(bytes),
            },
        );
        // Replacing the slot drops the live instance, which stops it.
        st.sessions
            .insert(session.to_owned(), Slot::Cold(id.clone()));
        Ok(reference(session, &id))
    }

    /// Fork: a live child instance loaded from the parent's snapshot.
    pub fn fork(&self, kind: &str, snapshot: &SnapshotRef, child: &str) -> Result<String, String> {
        let child = non_empty(child, "fork requires a child session")?;
        let mut st = self.lock();
        let Some(id) = snapshot_id(snapshot)? else {
            return Err("no memory snapshot to clone (the parent was not captured)".into());
        };
        let bytes = snapshot_bytes(&st, id, kind)?;
        self.start(&mut st, kind, child, Some(bytes.as_slice()))
    }

    /// Stop: destroy the session's instance and forget it.
    pub fn stop(&self, session: &str) {
        self.lock().sessions.remove(session);
    }

    fn start(
        &self,
        st: &mut State,
        kind: &str,
        session: &str,
        saved: Option<&[u8]>,
    ) -> Result<String, String> {
        let harness = builtin::memory(kind, saved).map_err(|e| e.to_string())?;
        // A fresh address per incarnation: a connection meant for a stopped
        // instance can never reach its successor by accident.
        st.next += 1;
        let address = self
            .local
            .publish(&format!("mem-{}", st.next), harness.clone());
        st.sessions.insert(
            session.to_owned(),
            Slot::Live(Instance {
                harness,
                address: address.clone(),
                local: self.local.clone(),
            }),
        );
        Ok(address)
    }
}

fn non_empty<'a>(s: &'a str, what: &str) -> Result<&'a str, String> {
    if s.is_empty() {
        Err(what.into())
    } else {
        Ok(s)
    }
}

fn reference(session: &str, id: &str) -> SnapshotRef {
    SnapshotRef {
        local: session.to_owned(),
        external_uri: format!("{SCHEME}{id}"),
        memory: true,
        sealed: false,
    }
}

/// The snapshot id a reference names; None when it names none (a
/// journal-handle reference); an error for another runtime's reference.
fn snapshot_id(r: &SnapshotRef) -> Result<Option<&str>, String> {
    if r.external_uri.is_empty() {
        return Ok(None);
    }
    r.external_uri
        .strip_prefix(SCHEME)
        .map(Some)
        .ok_or_else(|| format!("snapshot {:?} is not a memory snapshot", r.external_uri))
}

fn snapshot_bytes(st: &State, id: &str, kind: &str) -> Result<Arc<Vec<u8>>, String> {
    let saved = st.snapshots.get(id).ok_or_else(|| {
        format!("memory snapshot {SCHEME}{id} is gone (snapshots do not survive a restart)")
    })?;
    if saved.kind != kind {
        return Err(format!(
            "memory snapshot {SCHEME}{id} holds a {:?} instance, not {kind:?}",
            saved.kind
        ));
    }
    Ok(saved.bytes.clone())
}
