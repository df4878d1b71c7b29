//! The machine's vocabulary: what comes in, what goes out.
//!
//! Requests and harness input enter through `Host::handle_*`; effects
//! leave through `Host::poll_effect`, and their outcomes come back keyed by
//! [`EffectId`]. This module is the bottom layer of the crate: it imports
//! nothing from the crate above it, so every layer can speak it (see
//! `docs/architecture.md`, "Layers").

pub mod caller;
pub mod committed;
pub mod config;
pub mod effect;
pub mod fault;
pub mod history;
pub mod ids;
pub mod lease;
pub mod outcome;
pub mod request;
pub mod routes;
pub mod rows;
pub mod shown;
pub mod signal;
pub mod status;
pub mod tools;

pub use caller::{
    Caller, Grant, GrantError, HOST_PRINCIPAL, Principal, Role, Scope, host_identity,
};
pub use committed::Committed;
pub use config::{Backend, HostConfig, Route};
pub use effect::{
    ClientEffect, Effect, ExecuteTool, HarnessEffect, InvokeModel, Pace, PageFill, RuntimeCall,
    RuntimeOp, StoreEffect,
};
pub use fault::{AppendError, FaultKind, StoreFault};
pub use history::History;
pub use ids::{ConnId, CountingIds, EffectId, IdSource, Nanos, RequestId};
pub use lease::{DEFAULT_LEASE, LeaseClaim, LeaseConfig};
pub use outcome::{
    DeleteRefusal, HarnessFailure, HarnessInput, HarnessOutcome, ModelFailure, ModelReply, Outcome,
    ParkRef, PutError, RegisterOutcome, RegistryRefusal, RuntimeReply, StoreOutcome, ToolFailure,
};
pub use request::{BootReport, ReplayReport, Request, Response, RetentionReport, StreamItem};
pub use rows::{HarnessCheck, HarnessRow, SessionRow};
pub use shown::{SHOWN_MAX, Shown, shown};
pub use signal::{SIGNAL_QUEUE, Signal, TurnOutcome};
pub use status::{Code, Status};
pub use tools::{Catalog, CatalogTool, Policy, ToolGate, ToolRule, Verdict, hints};
