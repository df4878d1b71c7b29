//! The store rules, each written once as a pure function over plain data.
//! A backend reads what a rule needs (in its own transaction, under its own
//! locks), asks the rule, and writes what the rule decided; it never decides
//! again itself. The lease rule is [`crate::lease`], the tool ledger's
//! [`crate::ledger`]; fork prefixes are [`crate::child_spans`] and
//! [`crate::ForkBatch`]. [`crate::contract`] holds every backend to them.
//!
//! Invariant: a rule only looks at what it is given. Every refusal is a
//! typed error, decided before the backend writes anything.

use crate::{
    DeleteError, DeleteSession, HarnessRegistration, HarnessRow, HarnessState, ListHarnesses,
    RegisterOutcome, RegistryError, SessionInfo, SessionPage, StoreError, Tombstone, page_token,
};

/// Refuses an empty required field.
pub fn required(what: &str, v: &str) -> Result<(), StoreError> {
    if v.is_empty() {
        Err(StoreError::InvalidArgument(format!("{what} is required")))
    } else {
        Ok(())
    }
}

// ---- the harness registry --------------------------------------------------

/// What registering `reg` does, given whether its name is reserved and the
/// row stored under it: a new row, nothing, or the retired row made active
/// again. A registration never changes a spec (`SpecConflict`), and a
/// reserved name never gets a row (`NameReserved`).
pub fn register(
    reg: &HarnessRegistration,
    reserved: bool,
    existing: Option<&HarnessRow>,
) -> Result<RegisterOutcome, RegistryError> {
    reg.check()?;
    if reserved {
        return Err(RegistryError::NameReserved {
            name: reg.name.clone(),
        });
    }
    match existing {
        None => Ok(RegisterOutcome::Created),
        Some(row) => {
            assert_eq!(row.name, reg.name, "the row stored under the name");
            if row.spec_digest != reg.spec_digest {
                Err(RegistryError::SpecConflict {
                    name: reg.name.clone(),
                })
            } else if row.state == HarnessState::Active {
                Ok(RegisterOutcome::Unchanged)
            } else {
                Ok(RegisterOutcome::Reactivated)
            }
        }
    }
}

/// The row a [`RegisterOutcome::Created`] registration writes.
pub fn new_harness_row(reg: &HarnessRegistration, now: i64) -> HarnessRow {
    debug_assert!(reg.check().is_ok());
    HarnessRow {
        name: reg.name.clone(),
        uid: reg.uid.clone(),
        spec: reg.spec.clone(),
        spec_digest: reg.spec_digest.clone(),
        state: HarnessState::Active,
        retire_reason: String::new(),
        retired_at: 0,
        created_at: now,
        updated_at: now,
    }
}

/// `row` made active again: the retire fields cleared.
pub fn reactivate(row: &mut HarnessRow, now: i64) {
    assert_eq!(
        row.state,
        HarnessState::Retired,
        "only a retired row reactivates"
    );
    row.state = HarnessState::Active;
    row.retire_reason.clear();
    row.retired_at = 0;
    row.updated_at = now;
}

/// Refuses a retirement without a name.
pub fn check_retire(name: &str) -> Result<(), RegistryError> {
    required("harness name", name).map_err(RegistryError::from)
}

/// `row` retired with `reason` at `now`. Only an active row changes, so a
/// repeat keeps the first reason and time.
pub fn retire(row: &mut HarnessRow, reason: &str, now: i64) {
    if row.state == HarnessState::Active {
        row.state = HarnessState::Retired;
        row.retire_reason = reason.to_owned();
        row.retired_at = now;
        row.updated_at = now;
    }
    debug_assert_eq!(row.state, HarnessState::Retired);
}

/// Whether `name` may be reserved, given whether it has a registration row:
/// reservations are all or nothing, so a backend checks every name first.
pub fn check_reservation(name: &str, has_row: bool) -> Result<(), RegistryError> {
    if name.is_empty() {
        return Err(StoreError::InvalidArgument("reserved harness name is empty".into()).into());
    }
    if has_row {
        return Err(RegistryError::NameCollision {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Whether a session may be stored on `harness`, given the registry's row
/// for it. `registered`: the name must be an active registration; else (a
/// static harness) it must have no registration row at all.
pub fn session_harness(
    harness: &str,
    registered: bool,
    row: Option<&HarnessRow>,
) -> Result<(), RegistryError> {
    let name = || harness.to_owned();
    match (registered, row) {
        (true, None) => Err(RegistryError::NotFound { name: name() }),
        (true, Some(r)) if r.state == HarnessState::Retired => {
            Err(RegistryError::Retired { name: name() })
        }
        (false, Some(_)) => Err(RegistryError::NameCollision { name: name() }),
        _ => Ok(()),
    }
}

impl ListHarnesses {
    /// Refuses a listing that could return nothing.
    pub fn check(&self) -> Result<(), StoreError> {
        if self.limit == 0 {
            return Err(StoreError::InvalidArgument("limit must be positive".into()));
        }
        Ok(())
    }
}

impl crate::StaleScan {
    /// Refuses a retention step that could make no progress.
    pub fn check(&self) -> Result<(), StoreError> {
        if self.scan == 0 {
            return Err(StoreError::InvalidArgument("scan must be positive".into()));
        }
        Ok(())
    }
}

// ---- sessions ----------------------------------------------------------------

/// What a `list_sessions` page reads: the project, the page's length, the
/// rows to fetch (one more, to know whether a next page exists) and the
/// keyset position to continue after (`None`: the first page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePlan<'a> {
    pub project: &'a str,
    pub size: usize,
    pub fetch: i64,
    pub after: Option<(i64, String)>,
}

impl crate::ListSessions {
    /// The page `self` asks for, with `default_project` for "".
    pub fn plan<'a>(&'a self, default_project: &'a str) -> Result<PagePlan<'a>, StoreError> {
        let size = self.page_len();
        assert!((1..=crate::MAX_PAGE_SIZE).contains(&size));
        let after = if self.page_token.is_empty() {
            None
        } else {
            Some(page_token::decode(&self.page_token)?)
        };
        Ok(PagePlan {
            project: self.project_or(default_project),
            size,
            fetch: (size + 1) as i64,
            after,
        })
    }
}

impl SessionPage {
    /// The page from up to `size + 1` rows in list order: the first `size`,
    /// and a token naming the last of them when there was one more.
    pub fn cut(mut rows: Vec<SessionInfo>, size: usize) -> SessionPage {
        assert!(size >= 1, "a page holds at least one row");
        debug_assert!(rows.windows(2).all(|w| {
            (w[0].meta.created_at, std::cmp::Reverse(&w[0].meta.uid))
                > (w[1].meta.created_at, std::cmp::Reverse(&w[1].meta.uid))
        }));
        let mut next_page_token = String::new();
        if rows.len() > size {
            rows.truncate(size);
            let last = rows.last().expect("size >= 1");
            next_page_token = page_token::encode(last.meta.created_at, &last.meta.uid);
        }
        SessionPage {
            sessions: rows,
            next_page_token,
        }
    }
}

// ---- writes whose answer was lost --------------------------------------------

/// What a write did whose COMMIT went out and whose answer never came back
/// (the connection died, the primary failed over), judged from what the
/// store holds now. Never an acknowledgement of what is not durable, never
/// "failed" for what committed.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// The write is there: these are its records, as stored.
    Committed(Vec<agentsessions_proto::v1::LogRecord>),
    /// The write is not there (nothing at its seqs, or another writer's
    /// records): a retry may write it.
    NotCommitted,
}

/// Reconciles `batch` against `stored`: the session's records from seq
/// `expected_last_seq` (the head it was written on; none when 0) through
/// `expected_last_seq + events`, read after the answer was lost. The write
/// committed exactly when the records after the head are the ones the
/// batch makes on it, hash for hash.
pub fn reconcile_append(
    batch: &crate::AppendBatch,
    stored: &[agentsessions_proto::v1::LogRecord],
) -> Result<Reconciled, StoreError> {
    let head = batch.expected_last_seq;
    assert!(head >= 0 && !batch.events.is_empty());
    debug_assert!(stored.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    let (prev, after) = match stored.split_first() {
        _ if head == 0 => ("", stored),
        Some((at, after)) if at.seq == head => (at.content_hash.as_str(), after),
        // The head it was written on is gone (deleted): not this write's.
        _ => return Ok(Reconciled::NotCommitted),
    };
    Ok(match_chain(batch.chain(head, prev)?, after))
}

/// [`reconcile_append`] for a fork child's first write: `prev` is the
/// parent's hash at `at_seq` ("" at 0), `stored` the child's own records
/// after `at_seq`.
pub fn reconcile_fork(
    batch: &crate::ForkBatch,
    prev: &str,
    stored: &[agentsessions_proto::v1::LogRecord],
) -> Result<Reconciled, StoreError> {
    assert!(batch.at_seq >= 0 && !batch.events.is_empty());
    Ok(match_chain(batch.chain(prev)?, stored))
}

/// `Committed` with the stored records when they are `ours`, hash for hash.
fn match_chain(
    ours: Vec<agentsessions_proto::v1::LogRecord>,
    stored: &[agentsessions_proto::v1::LogRecord],
) -> Reconciled {
    let same = stored.len() >= ours.len()
        && ours
            .iter()
            .zip(stored)
            .all(|(o, s)| o.seq == s.seq && o.content_hash == s.content_hash);
    if same {
        Reconciled::Committed(stored[..ours.len()].to_vec())
    } else {
        Reconciled::NotCommitted
    }
}

// ---- deletion ----------------------------------------------------------------

/// Whether `req` deletes its session, given whether the session has a row,
/// its head, and whether it is deleted already. Returns the record count
/// the tombstone keeps (the journal's length, prefix included).
pub fn check_delete(
    req: &DeleteSession,
    deleted: bool,
    has_row: bool,
    head: i64,
) -> Result<i64, DeleteError> {
    required("session uid", &req.uid)?;
    assert!(head >= 0);
    if deleted {
        return Err(StoreError::SessionDeleted {
            uid: req.uid.clone(),
        }
        .into());
    }
    if !has_row && head == 0 {
        return Err(StoreError::SessionNotFound {
            uid: req.uid.clone(),
        }
        .into());
    }
    if req.expected_last_seq != head {
        return Err(DeleteError::Conflict { head });
    }
    Ok(head)
}

/// The tombstone a deletion of `records` records leaves.
pub fn tombstone(req: &DeleteSession, records: i64) -> Tombstone {
    assert!(records >= 0);
    Tombstone {
        uid: req.uid.clone(),
        deleted_at: req.now_unix_nanos,
        records,
        principal: req.principal.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(digest: &str) -> HarnessRegistration {
        HarnessRegistration {
            name: "h".into(),
            uid: "harness-1".into(),
            spec: "{}".into(),
            spec_digest: digest.into(),
        }
    }

    #[test]
    fn a_registration_creates_keeps_reactivates_or_conflicts() {
        let r = reg("sha256:a");
        assert_eq!(register(&r, false, None).unwrap(), RegisterOutcome::Created);
        let mut row = new_harness_row(&r, 5);
        assert_eq!(
            register(&r, false, Some(&row)).unwrap(),
            RegisterOutcome::Unchanged
        );
        retire(&mut row, "old", 6);
        retire(&mut row, "again", 7);
        assert_eq!((row.retire_reason.as_str(), row.retired_at), ("old", 6));
        assert_eq!(
            register(&r, false, Some(&row)).unwrap(),
            RegisterOutcome::Reactivated
        );
        reactivate(&mut row, 8);
        assert_eq!(
            (row.state, row.retired_at, row.updated_at),
            (HarnessState::Active, 0, 8)
        );
        assert!(matches!(
            register(&reg("sha256:b"), false, Some(&row)),
            Err(RegistryError::SpecConflict { .. })
        ));
        assert!(matches!(
            register(&r, true, None),
            Err(RegistryError::NameReserved { .. })
        ));
    }

    #[test]
    fn a_session_needs_an_active_registration_or_no_row_at_all() {
        let mut row = new_harness_row(&reg("sha256:a"), 1);
        assert!(session_harness("h", true, Some(&row)).is_ok());
        assert!(session_harness("h", false, None).is_ok());
        assert!(matches!(
            session_harness("h", true, None),
            Err(RegistryError::NotFound { .. })
        ));
        assert!(matches!(
            session_harness("h", false, Some(&row)),
            Err(RegistryError::NameCollision { .. })
        ));
        retire(&mut row, "r", 2);
        assert!(matches!(
            session_harness("h", true, Some(&row)),
            Err(RegistryError::Retired { .. })
        ));
    }

    fn append(head: i64, texts: &[&str]) -> crate::AppendBatch {
        crate::AppendBatch {
            session: "s".into(),
            expected_last_seq: head,
            fence: 1,
            events: texts
                .iter()
                .map(|t| {
                    agentsessions_machine::events::input(
                        "e",
                        agentsessions_machine::events::text_message("user", t),
                    )
                })
                .collect(),
            compute_state: None,
            now_unix_nanos: 1,
            release_lease: None,
        }
    }

    #[test]
    fn a_lost_answer_is_committed_only_when_the_stored_chain_is_the_batchs_own() {
        let first = append(0, &["a", "b"]);
        let stored = first.chain(0, "").unwrap();
        assert_eq!(
            reconcile_append(&first, &stored).unwrap(),
            Reconciled::Committed(stored.clone())
        );
        assert_eq!(
            reconcile_append(&first, &[]).unwrap(),
            Reconciled::NotCommitted
        );
        // Another writer's records at the same seqs are not this write.
        let other = append(0, &["x", "y"]).chain(0, "").unwrap();
        assert_eq!(
            reconcile_append(&first, &other).unwrap(),
            Reconciled::NotCommitted
        );
        // On a head: the stored head's hash is what the batch chains from.
        let second = append(2, &["c"]);
        let on = second.chain(2, &stored[1].content_hash).unwrap();
        let read = [stored[1].clone(), on[0].clone()];
        assert_eq!(
            reconcile_append(&second, &read).unwrap(),
            Reconciled::Committed(on)
        );
        assert_eq!(
            reconcile_append(&second, &read[..1]).unwrap(),
            Reconciled::NotCommitted
        );
        assert_eq!(
            reconcile_append(&second, &[]).unwrap(),
            Reconciled::NotCommitted
        );
    }

    #[test]
    fn a_delete_needs_a_live_session_at_the_head_it_was_decided_from() {
        let req = DeleteSession {
            uid: "s".into(),
            expected_last_seq: 3,
            principal: "p".into(),
            now_unix_nanos: 9,
        };
        assert_eq!(check_delete(&req, false, true, 3).unwrap(), 3);
        assert!(matches!(
            check_delete(&req, false, true, 4),
            Err(DeleteError::Conflict { head: 4 })
        ));
        assert!(matches!(
            check_delete(&req, false, false, 0),
            Err(DeleteError::Failed(StoreError::SessionNotFound { .. }))
        ));
        assert!(matches!(
            check_delete(&req, true, true, 3),
            Err(DeleteError::Failed(StoreError::SessionDeleted { .. }))
        ));
        let t = tombstone(&req, 3);
        assert_eq!((t.deleted_at, t.records, t.principal.as_str()), (9, 3, "p"));
    }
}
