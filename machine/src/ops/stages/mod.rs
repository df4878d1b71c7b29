//! The stages operations share: authorizing a call, the operation's handle
//! on the host ([`cx`]), the leases held, loading a session, placing a
//! harness, running an invocation, routing and rendering. A stage never
//! replies to a client on its own; the request that runs it does.

pub(crate) mod authorize;
pub(crate) mod cx;
pub(crate) mod expiry;
pub(crate) mod first_event;
pub(crate) mod flow;
pub(crate) mod leases;
pub(crate) mod load;
pub(crate) mod override_check;
pub(crate) mod placement;
pub(crate) mod present;
pub mod render;
pub(crate) mod routing;
pub(crate) mod run;
