//! The host state machine: client requests and harness events in, effects
//! out.

pub mod io;
pub mod status;

pub use io::*;
pub use status::{Code, Status};
