//! The HarnessRegistry admin service: register, get, list and retire
//! harness registrations.
//!
//! A registration is an immutable (name, spec) row in the store; only its
//! state moves between active and retired. Registering also gives this host
//! a route for the name, so sessions can run on it at once. Static
//! (configured) names are read-only here, and names reserved in
//! configuration can never be registered. The validation and the stored
//! form live in [`rules`], shared with startup loading.

mod get;
mod list;
mod register;
mod retire;
pub mod rules;

use agentsessions_proto::v1::{
    GetHarnessRequest, HarnessRegistration, HarnessSource, HarnessState, ListHarnessesRequest,
    RegisterHarnessRequest, ResourceMetadata, RetireHarnessRequest,
};

use crate::ops::requests::registry::rules::decode_stored_spec;
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::Flow;
use crate::ops::stages::render;
use crate::vocab::{EffectId, HarnessFailure, HarnessRow, Outcome, RequestId};

/// One HarnessRegistry call in flight.
pub(crate) enum RegistryOp {
    Register(register::RegisterOp),
    Get(get::GetOp),
    List(list::ListOp),
    Retire(retire::RetireOp),
}

impl RegistryOp {
    pub(crate) fn register(request: RequestId, r: RegisterHarnessRequest) -> Self {
        Self::Register(register::RegisterOp::new(request, r))
    }

    pub(crate) fn get(request: RequestId, r: GetHarnessRequest) -> Self {
        Self::Get(get::GetOp::new(request, r))
    }

    pub(crate) fn list(request: RequestId, r: ListHarnessesRequest) -> Self {
        Self::List(list::ListOp::new(request, r))
    }

    pub(crate) fn retire(request: RequestId, r: RetireHarnessRequest) -> Self {
        Self::Retire(retire::RetireOp::new(request, r))
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self {
            Self::Register(op) => op.start(cx),
            Self::Get(op) => op.start(cx),
            Self::List(op) => op.start(cx),
            Self::Retire(op) => op.start(cx),
        }
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        match self {
            Self::Register(op) => op.on_outcome(cx, id, outcome),
            Self::Get(op) => op.on_outcome(cx, id, outcome),
            Self::List(op) => op.on_outcome(cx, id, outcome),
            Self::Retire(op) => op.on_outcome(cx, id, outcome),
        }
    }
}

/// Hint for a row this host has neither loaded nor isolated: it was
/// registered by another host sharing the store after this one booted.
pub(crate) const NOT_LOADED: &str = "registration is not loaded on this host; restart this host or register the identical compatible spec locally to serve it";

/// A static harness as the registry shows it: no spec, no digest.
pub(crate) fn static_registration(name: &str) -> HarnessRegistration {
    HarnessRegistration {
        metadata: Some(ResourceMetadata {
            name: name.to_owned(),
            ..ResourceMetadata::default()
        }),
        state: HarnessState::Active as i32,
        source: HarnessSource::Static as i32,
        ..HarnessRegistration::default()
    }
}

/// A stored row as the registry shows it, with why this host cannot serve
/// it (if it cannot). The digest is always the stored one, even when the
/// spec no longer decodes, so operators can still compare registrations.
pub(crate) fn registration(cx: &Cx<'_>, row: &HarnessRow) -> HarnessRegistration {
    let (spec, decode_error) = match decode_stored_spec(&row.spec) {
        Ok(spec) => (Some(spec), None),
        Err(e) => (None, Some(e)),
    };
    let unservable_reason = decode_error
        .or_else(|| cx.core.unservable.get(&row.name).cloned())
        .or_else(|| {
            let loaded = cx.route(&row.name).is_some_and(|r| r.registered);
            (!loaded).then(|| NOT_LOADED.to_owned())
        })
        .unwrap_or_default();
    let (state, retire_time, retire_reason) = if row.retired {
        (
            HarnessState::Retired,
            render::timestamp(row.retired_at),
            row.retire_reason.clone(),
        )
    } else {
        (HarnessState::Active, None, String::new())
    };
    HarnessRegistration {
        metadata: Some(ResourceMetadata {
            name: row.name.clone(),
            uid: row.uid.clone(),
            create_time: render::timestamp(row.created_at),
            update_time: render::timestamp(row.updated_at),
            ..ResourceMetadata::default()
        }),
        spec,
        spec_digest: row.spec_digest.clone(),
        state: state as i32,
        source: HarnessSource::Registered as i32,
        retire_time,
        retire_reason,
        observed: None,
        observe_error: String::new(),
        unservable_reason,
    }
}

/// Human text of a failed Describe, for `observe_error`.
pub(crate) fn describe_failure(e: &HarnessFailure) -> String {
    match e {
        HarnessFailure::Unavailable(m) => format!("describe: unavailable: {m}"),
        HarnessFailure::Timeout => "describe: no answer within the describe timeout".to_owned(),
        HarnessFailure::Other { code, message } => format!("describe: code {code}: {message}"),
    }
}
