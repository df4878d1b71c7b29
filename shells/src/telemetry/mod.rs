//! What the daemon tells about itself, shared by the gRPC services, the
//! console and the model client: the RPC log line and logging setup
//! ([`observe`]), trace context across edges ([`propagation`]) and span
//! export ([`otlp`]). It knows nothing of the daemon that uses it.

pub mod observe;
#[cfg(not(madsim))]
pub mod otlp;
pub mod propagation;
