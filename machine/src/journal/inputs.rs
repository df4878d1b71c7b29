//! The input-completeness rule of an execution: its start marker declares
//! how many INPUT records follow, and the journal must hold exactly that
//! many (fewer only while the turn is still open). Both the execution
//! grouping and the approval scan apply it, so it sits below both.

use agentsessions_proto::v1::ExecutionStart;

use crate::error::LogError;

/// The completeness rule over raw counts, applied by the execution grouping and the approval scan.
pub(crate) fn check_input_counts(
    id: &str,
    marker: Option<&ExecutionStart>,
    records: usize,
    missing_payload: bool,
    completed: bool,
) -> Result<(), LogError> {
    debug_assert!(
        !missing_payload || records > 0,
        "a missing payload is counted as an input record"
    );
    let Some(marker) = marker else {
        return Ok(());
    };
    debug_assert!(!id.is_empty(), "only id-bearing executions carry a marker");
    let Some(count) = marker.input_count else {
        return Err(LogError::invalid(format!(
            "execution {id} start has no input count"
        )));
    };
    if count < 0 {
        return Err(LogError::invalid(format!(
            "execution {id} start has negative input count {count}"
        )));
    }
    if missing_payload {
        return Err(LogError::invalid(format!(
            "execution {id} has an input without a message"
        )));
    }
    let recorded = i64::try_from(records).unwrap_or(i64::MAX);
    if recorded == count {
        return Ok(());
    }
    if !completed && recorded < count {
        return Err(LogError::IncompleteInvocation(format!(
            "execution {id} recorded {recorded} of {count} inputs"
        )));
    }
    Err(LogError::invalid(format!(
        "execution {id} recorded {recorded} inputs, start declared {count}"
    )))
}
