//! The stored text of `sessions.compute_state`, as the Go host writes it.
//!
//! Which state an append leaves is the machine's decision
//! (`agentsessions_machine::journal::projection::batch_compute_state`,
//! carried on every append); the stores only encode it.

use agentsessions_proto::v1::ComputeState;

/// The text the Go host stores in `sessions.compute_state`.
pub fn to_text(state: ComputeState) -> &'static str {
    match state {
        ComputeState::ComputeLive => "LIVE",
        ComputeState::ComputeCold => "COLD",
        ComputeState::ComputeWarm => "WARM",
        ComputeState::ComputeTerminated => "TERMINATED",
        ComputeState::ComputeNone | ComputeState::Unspecified => "NONE",
    }
}

/// Parses stored text; "" reads as NONE.
pub fn from_text(text: &str) -> Option<ComputeState> {
    Some(match text {
        "" | "NONE" => ComputeState::ComputeNone,
        "LIVE" => ComputeState::ComputeLive,
        "COLD" => ComputeState::ComputeCold,
        "WARM" => ComputeState::ComputeWarm,
        "TERMINATED" => ComputeState::ComputeTerminated,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_round_trips_and_empty_reads_as_none() {
        use ComputeState::*;
        for s in [
            ComputeNone,
            ComputeLive,
            ComputeCold,
            ComputeWarm,
            ComputeTerminated,
        ] {
            assert_eq!(from_text(to_text(s)), Some(s));
        }
        assert_eq!(from_text(""), Some(ComputeNone));
        assert_eq!(from_text("bogus"), None);
    }
}
