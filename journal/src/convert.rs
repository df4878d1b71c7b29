//! Conversions between the journal store's row types and the machine's.
//!
//! The store keeps labels and annotations as JSON text and origin and
//! identity as proto3-JSON text, exactly as the Go host does; the machine
//! works with typed values. Malformed stored text is reported, never
//! guessed at.

use std::collections::BTreeMap;

use agentsessions_machine::host::{self as m};

use agentsessions_machine::vocab::Nanos;
use agentsessions_proto::v1::{ComputeState, IdentityRef, Origin};

use crate::{self as store, HarnessState, SessionInfo, SessionMeta};

/// A stored text field that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("session {uid}: stored {field} does not decode: {reason}")]
pub struct RowError {
    uid: String,
    field: &'static str,
    reason: String,
}

fn map_text(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        String::new()
    } else {
        serde_json::to_string(map).expect("a string map always encodes")
    }
}

fn proto_text<T: serde::Serialize>(value: &Option<T>) -> String {
    match value {
        None => String::new(),
        Some(v) => serde_json::to_string(v).unwrap_or_default(),
    }
}

fn parse_map(
    uid: &str,
    field: &'static str,
    text: &str,
) -> Result<BTreeMap<String, String>, RowError> {
    if text.is_empty() {
        return Ok(BTreeMap::new());
    }
    serde_json::from_str(text).map_err(|e| RowError {
        uid: uid.to_owned(),
        field,
        reason: e.to_string(),
    })
}

fn parse_proto<T: serde::de::DeserializeOwned>(
    uid: &str,
    field: &'static str,
    text: &str,
) -> Result<Option<T>, RowError> {
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text).map(Some).map_err(|e| RowError {
        uid: uid.to_owned(),
        field,
        reason: e.to_string(),
    })
}

/// The machine's row as the store's metadata.
pub fn meta_of(row: &m::SessionRow) -> SessionMeta {
    SessionMeta {
        uid: row.uid.clone(),
        project: row.project.clone(),
        name: row.name.clone(),
        harness: row.harness.clone(),
        model: row.model.clone(),
        parent_uid: row.parent_uid.clone(),
        fork_seq: row.fork_seq,
        created_at: row.created_at,
        updated_at: row.updated_at,
        labels: map_text(&row.labels),
        annotations: map_text(&row.annotations),
        origin: proto_text::<Origin>(&row.origin),
        identity: proto_text::<IdentityRef>(&row.identity),
    }
}

/// The store's session info as the machine's row.
pub fn row_of(info: SessionInfo) -> Result<m::SessionRow, RowError> {
    let meta = info.meta;
    let uid = meta.uid.clone();
    Ok(m::SessionRow {
        labels: parse_map(&uid, "labels", &meta.labels)?,
        annotations: parse_map(&uid, "annotations", &meta.annotations)?,
        origin: parse_proto(&uid, "origin", &meta.origin)?,
        identity: parse_proto(&uid, "identity", &meta.identity)?,
        uid,
        project: meta.project,
        name: meta.name,
        harness: meta.harness,
        model: meta.model,
        parent_uid: meta.parent_uid,
        fork_seq: meta.fork_seq,
        created_at: meta.created_at,
        updated_at: meta.updated_at,
        last_seq: info.last_seq,
        compute_state: if info.compute_state == ComputeState::Unspecified {
            ComputeState::ComputeNone
        } else {
            info.compute_state
        },
    })
}

/// The store's harness row as the machine's.
pub fn harness_row_of(row: store::HarnessRow) -> m::HarnessRow {
    m::HarnessRow {
        name: row.name,
        uid: row.uid,
        spec: row.spec,
        spec_digest: row.spec_digest,
        retired: row.state == HarnessState::Retired,
        retire_reason: row.retire_reason,
        retired_at: row.retired_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// The store's registry refusals as the machine's.
pub fn put_error_of(e: store::RegistryError) -> m::PutError {
    use m::RegistryRefusal as R;
    match e {
        store::RegistryError::NameReserved { .. } => m::PutError::Refused(R::Reserved),
        store::RegistryError::SpecConflict { .. } => m::PutError::Refused(R::SpecConflict),
        store::RegistryError::NotFound { .. } => m::PutError::Refused(R::NotFound),
        store::RegistryError::Retired { .. } => m::PutError::Refused(R::Retired),
        store::RegistryError::NameCollision { .. } => m::PutError::Refused(R::NameCollision),
        store::RegistryError::Failed(e) => m::PutError::Failed(fault_of(&e)),
    }
}

/// A store failure as the machine's fault, keeping whether it is transient.
pub fn fault_of(e: &store::StoreError) -> m::StoreFault {
    if matches!(e, store::StoreError::Leased { .. }) {
        m::StoreFault::busy(e.to_string())
    } else if e.is_retryable() {
        m::StoreFault::transient(e.to_string())
    } else {
        m::StoreFault::permanent(e.to_string())
    }
}

/// The store's append refusals as the machine's.
pub fn append_error_of(e: store::AppendError) -> m::AppendError {
    match e {
        store::AppendError::Conflict { head } => m::AppendError::Conflict { head },
        store::AppendError::Fenced { current } => m::AppendError::Fenced { current },
        store::AppendError::Failed(store::StoreError::SessionDeleted { .. }) => {
            m::AppendError::Deleted
        }
        store::AppendError::Failed(e) => m::AppendError::Failed(fault_of(&e)),
    }
}

/// The machine's view of a refused delete.
pub fn delete_error_of(e: store::DeleteError) -> m::DeleteRefusal {
    match e {
        store::DeleteError::Conflict { head } => m::DeleteRefusal::Conflict { head },
        store::DeleteError::Failed(
            store::StoreError::SessionNotFound { .. } | store::StoreError::SessionDeleted { .. },
        ) => m::DeleteRefusal::NotFound,
        store::DeleteError::Failed(e) => m::DeleteRefusal::Failed(fault_of(&e)),
    }
}

/// Wall-clock now in unix nanos (the shell's clock; the machine has none).
pub fn now() -> Nanos {
    crate::system_now_unix_nanos()
}
