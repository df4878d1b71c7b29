//! The bounds on a caller's requests, as the label of the refusals each one
//! counts. The daemon's limits decide; this names them.

/// Which bound refused a call (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `Limits::max_parts_per_message`.
    PartsPerMessage,
    /// `Limits::max_request_elements`.
    RequestElements,
    /// `Limits::max_streams_per_principal`.
    PrincipalStreams,
    /// `Limits::max_calls_per_principal`.
    PrincipalCalls,
    /// `Limits::max_calls_per_connection`.
    ConnectionCalls,
    /// `Limits::request_memory`.
    RequestMemory,
}

impl Bound {
    /// The label value and the flag that sets it.
    pub fn name(self) -> (&'static str, &'static str) {
        match self {
            Self::PartsPerMessage => ("parts_per_message", "--max-parts-per-message"),
            Self::RequestElements => ("request_elements", "--max-request-elements"),
            Self::PrincipalStreams => ("principal_streams", "--max-streams-per-principal"),
            Self::PrincipalCalls => ("principal_calls", "--max-calls-per-principal"),
            Self::ConnectionCalls => ("connection_calls", "--max-calls-per-connection"),
            Self::RequestMemory => ("request_memory", "--request-memory-bytes"),
        }
    }
}
