//! The operations, one per kind of client request (and the host's own boot
//! and decided-approval lookups). Each owns its request from admission to
//! reply; what several share lives in [`super::stages`].

pub(crate) mod approve;
pub(crate) mod boot;
pub(crate) mod cancel;
pub(crate) mod decided;
pub(crate) mod delete;
pub(crate) mod exec;
pub(crate) mod expire;
pub(crate) mod fork;
pub(crate) mod registry;
pub(crate) mod replay;
pub(crate) mod resume;
pub(crate) mod session;
pub(crate) mod suspend;
