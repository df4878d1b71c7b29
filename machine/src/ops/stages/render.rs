//! Rendering a stored session as the wire `Session`.

use agentsessions_proto::v1::{ComputeState, ExecState, LogRecord, ResourceMetadata, Session};

use crate::error::LogError;
use crate::journal::Journal;
use crate::journal::projection::{SessionStatus, session_status};
use crate::vocab::shown;
use crate::vocab::{SessionRow, Status};

pub use crate::vocab::ids::timestamp;

/// Renders `row` with the approval projection over `records` (the journal
/// through at least `row.last_seq`; records past it are ignored, so a
/// decision that landed after the row was read does not show).
pub fn session(row: &SessionRow, records: &[LogRecord]) -> Result<Session, Status> {
    let status = session_status(records, row.last_seq).map_err(|e| projection_error(row, &e))?;
    Ok(with_status(row, status))
}

fn projection_error(row: &SessionRow, e: &LogError) -> Status {
    Status::internal(format!(
        "session {:?} approval projection: {e}",
        shown(&row.uid)
    ))
}

fn with_status(row: &SessionRow, status: SessionStatus) -> Session {
    assert_eq!(
        status.pending_approval.is_some(),
        status.exec_state == ExecState::ExecAwaiting,
        "a session awaits exactly when it names the pending approval"
    );
    let compute = if row.compute_state == ComputeState::Unspecified {
        ComputeState::ComputeNone
    } else {
        row.compute_state
    };
    Session {
        metadata: Some(ResourceMetadata {
            project: row.project.clone(),
            name: row.name.clone(),
            uid: row.uid.clone(),
            version: 0,
            create_time: timestamp(row.created_at),
            update_time: timestamp(row.updated_at),
        }),
        harness: row.harness.clone(),
        model: row.model.clone(),
        exec_state: status.exec_state as i32,
        compute_state: compute as i32,
        pending_approval: status.pending_approval,
        last_seq: row.last_seq,
        parent_uid: row.parent_uid.clone(),
        fork_seq: row.fork_seq,
        identity: row.identity.clone(),
        compute: None,
        origin: row.origin.clone(),
        labels: row.labels.clone(),
        annotations: row.annotations.clone(),
    }
}

/// [`session`] over a loaded journal: from its summary when the row's
/// cursor is the journal's head (the usual case), else by projecting the
/// records through the cursor.
pub fn session_of(row: &SessionRow, journal: &Journal) -> Result<Session, Status> {
    if row.last_seq != journal.head() {
        return session(row, &journal.to_vec_through(row.last_seq));
    }
    let status = journal
        .summary()
        .status()
        .map_err(|e| projection_error(row, &e))?;
    Ok(with_status(row, status))
}

/// A session that has never been run: no journal to inspect.
pub fn fresh_session(row: &SessionRow) -> Session {
    debug_assert_eq!(row.last_seq, 0);
    let mut s = session(row, &[]).expect("an empty journal always projects");
    s.exec_state = ExecState::ExecPending as i32;
    s
}
