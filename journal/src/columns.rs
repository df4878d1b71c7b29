//! Stored rows from their columns, written once for every SQL backend: a
//! session (in the order of the backends' `SESSION_COLUMNS`), a harness
//! registration (`HARNESS_COLUMNS`) and a record (`seq, prev_hash, hash,
//! fence, event`). A backend implements [`Columns`] over its driver's row;
//! what a column means, and what makes a row corrupt, is decided here.

use agentsessions_proto::v1::LogRecord;

use crate::compute_text::from_text;
use crate::encode::record_of_columns;
use crate::{HarnessRow, HarnessState, SessionInfo, SessionMeta, StoreError};

/// One row of a driver, read by column index.
pub trait Columns {
    /// A text column.
    fn text(&self, i: usize) -> Result<String, StoreError>;
    /// An integer column.
    fn int(&self, i: usize) -> Result<i64, StoreError>;
    /// A blob column, borrowed from the row.
    fn blob(&self, i: usize) -> Result<&[u8], StoreError>;
}

/// A session row: uid, project, name, harness, model, parent_uid,
/// fork_seq, created_at, updated_at, labels, annotations, origin, identity,
/// compute_state, fence, last_seq.
pub fn session_of(row: &impl Columns) -> Result<SessionInfo, StoreError> {
    let uid = row.text(0)?;
    let state_text = row.text(13)?;
    let compute_state = from_text(&state_text).ok_or_else(|| {
        StoreError::Corrupt(format!("session {uid}: compute_state {state_text:?}"))
    })?;
    let info = SessionInfo {
        meta: SessionMeta {
            uid,
            project: row.text(1)?,
            name: row.text(2)?,
            harness: row.text(3)?,
            model: row.text(4)?,
            parent_uid: row.text(5)?,
            fork_seq: row.int(6)?,
            created_at: row.int(7)?,
            updated_at: row.int(8)?,
            labels: row.text(9)?,
            annotations: row.text(10)?,
            origin: row.text(11)?,
            identity: row.text(12)?,
        },
        compute_state,
        fence: row.int(14)?,
        last_seq: row.int(15)?,
    };
    if info.last_seq < 0 || info.fence < 0 {
        return Err(StoreError::Corrupt(format!(
            "session {}: negative head or fence",
            info.meta.uid
        )));
    }
    Ok(info)
}

/// A registration row: name, uid, spec, spec_digest, state, retire_reason,
/// retired_at, created_at, updated_at.
pub fn harness_of(row: &impl Columns) -> Result<HarnessRow, StoreError> {
    let state = match row.text(4)?.as_str() {
        "active" => HarnessState::Active,
        "retired" => HarnessState::Retired,
        other => return Err(StoreError::Corrupt(format!("harness state {other:?}"))),
    };
    Ok(HarnessRow {
        name: row.text(0)?,
        uid: row.text(1)?,
        spec: row.text(2)?,
        spec_digest: row.text(3)?,
        state,
        retire_reason: row.text(5)?,
        retired_at: row.int(6)?,
        created_at: row.int(7)?,
        updated_at: row.int(8)?,
    })
}

/// A record of `session` (the session holding the row): seq, prev_hash,
/// hash, fence, event.
pub fn record_of(session: &str, row: &impl Columns) -> Result<LogRecord, StoreError> {
    let seq = row.int(0)?;
    let blob = row.blob(4).map_err(|e| StoreError::Decode {
        session: session.to_owned(),
        seq,
        reason: e.to_string(),
    })?;
    let record = record_of_columns(session, seq, row.text(1)?, row.text(2)?, row.int(3)?, blob)?;
    debug_assert_eq!(record.seq, seq);
    Ok(record)
}
