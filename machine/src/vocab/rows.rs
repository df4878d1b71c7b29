//! Rows as the store keeps them: session metadata and harness
//! registrations.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{ComputeState, IdentityRef, Origin};

use super::ids::Nanos;

/// Session metadata as the store keeps it, plus the derived head.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRow {
    /// `sess-…`.
    pub uid: String,
    /// Tenant.
    pub project: String,
    /// Display name.
    pub name: String,
    /// The session's harness (registry name); empty on legacy rows.
    pub harness: String,
    /// Model id.
    pub model: String,
    /// Fork lineage.
    pub parent_uid: String,
    /// Seq the session was forked at.
    pub fork_seq: i64,
    /// Unix nanos; 0 = unset.
    pub created_at: Nanos,
    /// Unix nanos.
    pub updated_at: Nanos,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// External context.
    pub origin: Option<Origin>,
    /// Provenance.
    pub identity: Option<IdentityRef>,
    /// Head of the journal (0 when empty); read-only.
    pub last_seq: i64,
    /// Projection maintained by appends; read-only.
    pub compute_state: ComputeState,
}

/// How a new session row must relate to the harness registry when stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarnessCheck {
    /// The harness is a registered one: it must have an active row.
    Registered,
    /// The harness is static: no registration row may exist for it.
    Static,
}

/// One stored harness registration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HarnessRow {
    /// Registry name.
    pub name: String,
    /// `harness-…`.
    pub uid: String,
    /// Canonical proto3-JSON of the spec.
    pub spec: String,
    /// `sha256:…`.
    pub spec_digest: String,
    /// Retired rows refuse new sessions.
    pub retired: bool,
    /// First retire reason.
    pub retire_reason: String,
    /// Unix nanos of the first retirement; 0 while active.
    pub retired_at: Nanos,
    /// Unix nanos.
    pub created_at: Nanos,
    /// Unix nanos.
    pub updated_at: Nanos,
}
