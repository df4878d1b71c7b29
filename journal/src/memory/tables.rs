//! The in-memory tables and the operations on them, mirroring the SQLite
//! store's statements (`sqlite/write_ops.rs`, `sqlite/read_ops.rs`) one for
//! one, so both backends answer every call alike.
//!
//! Every write validates before it mutates: a refused write leaves the
//! tables untouched, as a rolled-back SAVEPOINT does.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use agentsessions_machine::chain::ChainVerifier;
use agentsessions_proto::v1::{ComputeState, LogRecord};

use crate::lease::{self, LeaseClaim, StoredLease};
use crate::outbox::{self, NoticeTable};
use crate::rules::{self, required};
use crate::{
    AppendBatch, AppendError, DeleteError, DeleteSession, ForkBatch, HarnessRegistration,
    HarnessRow, HarnessState, ListHarnesses, ListSessions, PrefixSpan, RegisterOutcome,
    RegistryError, SessionInfo, SessionMeta, SessionPage, StalePage, StaleScan, StoreError,
    Tombstone, VerifyError, child_spans,
};

/// One `sessions` row plus its `events`: the records it wrote, after the
/// spans of a fork parent's records it refers to (a fork child's prefix,
/// stored once under the sessions that wrote it).
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    meta: SessionMeta,
    fence: i64,
    compute: ComputeState,
    records: Vec<LogRecord>,
    prefix: Vec<PrefixSpan>,
    lease: Option<StoredLease>,
}

impl Session {
    /// Ends `owner`'s lease taken at `fence` (anyone else's stays);
    /// whether it was held.
    fn end_lease(&mut self, owner: &str, fence: i64) -> bool {
        let mine = |l: &StoredLease| l.owner == owner && l.fence == fence;
        let held = self.lease.as_ref().is_some_and(mine);
        if held {
            self.lease = None;
        }
        held
    }

    fn new(uid: &str, project: &str, now: i64) -> Self {
        Self {
            meta: SessionMeta {
                uid: uid.to_owned(),
                project: project.to_owned(),
                created_at: now,
                updated_at: now,
                ..SessionMeta::default()
            },
            fence: 0,
            compute: ComputeState::ComputeNone,
            records: Vec::new(),
            prefix: Vec::new(),
            lease: None,
        }
    }

    fn head(&self) -> i64 {
        self.records
            .last()
            .map(|r| r.seq)
            .or_else(|| self.prefix.last().map(|s| s.last))
            .unwrap_or(0)
    }

    /// The records the session wrote itself, in seq order (after its
    /// prefix spans, if it is a fork child).
    pub fn records(&self) -> &[LogRecord] {
        &self.records
    }

    /// The spans of other sessions' records its journal begins with.
    pub fn prefix(&self) -> &[PrefixSpan] {
        &self.prefix
    }

    /// The row as a read returns it (head, compute state and fence).
    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            meta: self.meta.clone(),
            last_seq: self.head(),
            compute_state: self.compute,
            fence: self.fence,
        }
    }

    /// A row written by an older build may lack project or created_at;
    /// any write fills them in (as the SQLite upserts do).
    fn fill(&mut self, project: &str, now: i64) {
        if self.meta.project.is_empty() {
            self.meta.project = project.to_owned();
        }
        if self.meta.created_at == 0 {
            self.meta.created_at = now;
        }
        self.meta.updated_at = now;
    }
}

/// The whole database: sessions with their events, the tombstones of
/// deleted ones, the records of deleted sessions that fork children still
/// refer to, and the registry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    sessions: BTreeMap<String, Session>,
    tombstones: BTreeMap<String, Tombstone>,
    /// A deleted session's records up to the last seq any child's span
    /// names; gone with the last such child.
    retained: BTreeMap<String, Vec<LogRecord>>,
    harnesses: BTreeMap<String, HarnessRow>,
    reserved: BTreeSet<String>,
    /// The notification outbox (`notify_outbox`).
    notices: NoticeTable,
}

/// Everything a write to one uid can change: its session (row and
/// records) or its tombstone, and the retained records of the uid and of
/// the sessions its prefix refers to (a delete may free those), so a
/// rolled-back write can be undone like any other.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionImage {
    session: Option<Session>,
    tombstone: Option<Tombstone>,
    retained: Vec<(String, Option<Vec<LogRecord>>)>,
    /// The session's journal as a read returned it then.
    journal: Vec<LogRecord>,
}

impl SessionImage {
    /// The session as stored (`None`: no row).
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The session's whole journal (its prefix resolved) when the image
    /// was taken.
    pub fn journal(&self) -> &[LogRecord] {
        &self.journal
    }

    /// The tombstone (`None`: not deleted).
    pub fn tombstone(&self) -> Option<&Tombstone> {
        self.tombstone.as_ref()
    }
}

/// A fork at a seq the parent does not hold.
fn no_record(parent: &str, seq: i64) -> StoreError {
    StoreError::InvalidArgument(format!("fork parent {parent} has no record at seq {seq}"))
}

impl Tables {
    // ---- whole sessions (for stores that roll writes back) ------------

    /// A copy of everything a write to `session` can change.
    pub fn image(&self, session: &str) -> SessionImage {
        let stored = self.sessions.get(session);
        let mut owners: BTreeSet<&str> = BTreeSet::from([session]);
        owners.extend(
            stored
                .iter()
                .flat_map(|s| &s.prefix)
                .map(|p| p.owner.as_str()),
        );
        SessionImage {
            session: stored.cloned(),
            tombstone: self.tombstones.get(session).cloned(),
            retained: owners
                .into_iter()
                .map(|o| (o.to_owned(), self.retained.get(o).cloned()))
                .collect(),
            journal: self.records(session).into_owned(),
        }
    }

    /// Puts `session` back to `image`, as rolling back every write since
    /// the image was taken would.
    pub fn restore(&mut self, session: &str, image: SessionImage) {
        match image.session {
            Some(s) => {
                assert_eq!(s.meta.uid, session, "an image restores its own session");
                self.sessions.insert(session.to_owned(), s);
            }
            None => {
                self.sessions.remove(session);
            }
        }
        match image.tombstone {
            Some(t) => {
                self.tombstones.insert(session.to_owned(), t);
            }
            None => {
                self.tombstones.remove(session);
            }
        }
        for (owner, kept) in image.retained {
            match kept {
                Some(records) => {
                    self.retained.insert(owner, records);
                }
                None => {
                    self.retained.remove(&owner);
                }
            }
        }
    }

    /// Appends records verbatim (hashes and fences as given), as importing
    /// a journal written elsewhere does: the fence rises to the highest
    /// seen and the compute state follows each event. No chain check, so
    /// a test can load a broken journal on purpose.
    pub fn import(&mut self, session: &str, records: Vec<LogRecord>, now: i64, project: &str) {
        let s = self
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| Session::new(session, project, now));
        for r in records {
            s.fence = s.fence.max(r.fence);
            if let Some(ev) = &r.event {
                s.compute =
                    agentsessions_machine::journal::projection::compute_state_after(s.compute, ev);
            }
            s.records.push(r);
        }
    }

    /// Drops every record of `session` after the first `keep`, as a crash
    /// before the later appends committed would have left it; fence and
    /// compute state stay (a crash does not roll those back).
    pub fn truncate(&mut self, session: &str, keep: usize) {
        if let Some(s) = self.sessions.get_mut(session) {
            let shared: i64 = s.prefix.iter().map(|p| p.last - p.first + 1).sum();
            let shared = usize::try_from(shared).unwrap_or(usize::MAX);
            s.records.truncate(keep.saturating_sub(shared));
        }
    }

    // ---- reads -------------------------------------------------------

    pub fn sessions(&self) -> Vec<String> {
        self.sessions.keys().cloned().collect()
    }

    /// The session's journal: a fork child's prefix resolved through the
    /// sessions that hold it, then its own records. Empty for an unknown or
    /// deleted uid (a deleted session's records kept for its children are
    /// read only through them).
    pub fn records(&self, session: &str) -> Cow<'_, [LogRecord]> {
        let Some(s) = self.sessions.get(session) else {
            return Cow::Borrowed(&[]);
        };
        if s.prefix.is_empty() {
            return Cow::Borrowed(&s.records);
        }
        let mut out = Vec::with_capacity(usize::try_from(s.head()).unwrap_or(0));
        for span in &s.prefix {
            let held = self.held(&span.owner);
            out.extend(
                held.iter()
                    .filter(|r| r.seq >= span.first && r.seq <= span.last)
                    .cloned(),
            );
        }
        out.extend(s.records.iter().cloned());
        Cow::Owned(out)
    }

    /// The records `owner` wrote itself, live or retained for its children.
    fn held(&self, owner: &str) -> &[LogRecord] {
        match self.sessions.get(owner) {
            Some(s) => &s.records,
            None => self.retained.get(owner).map_or(&[], Vec::as_slice),
        }
    }

    /// Records stored once each (what a SQL store's `events` table holds):
    /// every session's own, and those retained for fork children.
    pub fn stored_records(&self) -> usize {
        let own: usize = self.sessions.values().map(|s| s.records.len()).sum();
        own + self.retained.values().map(Vec::len).sum::<usize>()
    }

    /// Prefix spans stored (a SQL store's `session_prefixes` rows).
    pub fn stored_spans(&self) -> usize {
        self.sessions.values().map(|s| s.prefix.len()).sum()
    }

    pub fn head(&self, session: &str) -> i64 {
        self.sessions.get(session).map_or(0, Session::head)
    }

    pub fn read(&self, session: &str, from_seq: i64, to_seq: i64) -> Vec<LogRecord> {
        let to = if to_seq <= 0 { i64::MAX } else { to_seq };
        self.records(session)
            .iter()
            .filter(|r| r.seq >= from_seq && r.seq <= to)
            .cloned()
            .collect()
    }

    pub fn verify(&self, session: &str) -> Result<(), VerifyError> {
        let mut verifier = ChainVerifier::new();
        for rec in self.records(session).iter() {
            verifier
                .push(rec)
                .map_err(|cause| VerifyError::of_chain(session, cause))?;
        }
        Ok(())
    }

    pub fn tombstone(&self, uid: &str) -> Option<Tombstone> {
        self.tombstones.get(uid).cloned()
    }

    /// Uids of deleted sessions.
    pub fn deleted(&self) -> Vec<String> {
        self.tombstones.keys().cloned().collect()
    }

    /// One bounded retention step, as the SQLite store's.
    pub fn stale_sessions(&self, scan: &StaleScan) -> Result<StalePage, StoreError> {
        scan.check()?;
        let mut page = StalePage::default();
        let window: Vec<&Session> = self
            .sessions
            .range::<str, _>((
                std::ops::Bound::Excluded(scan.after.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .map(|(_, s)| s)
            .take(scan.scan)
            .collect();
        page.stale = window
            .iter()
            .filter(|s| s.meta.updated_at < scan.before)
            .map(|s| s.meta.uid.clone())
            .collect();
        if window.len() == scan.scan {
            page.next = window.last().expect("scan > 0").meta.uid.clone();
        }
        Ok(page)
    }

    pub fn session_info(&self, uid: &str) -> Result<SessionInfo, StoreError> {
        self.sessions
            .get(uid)
            .map(Session::info)
            .ok_or_else(|| StoreError::SessionNotFound {
                uid: uid.to_owned(),
            })
    }

    /// Keyset paging over (created_at DESC, uid ASC), as the SQLite store.
    pub fn list_sessions(
        &self,
        req: &ListSessions,
        default_project: &str,
    ) -> Result<SessionPage, StoreError> {
        let plan = req.plan(default_project)?;
        let (project, after) = (plan.project, &plan.after);
        let mut rows: Vec<SessionInfo> = self
            .sessions
            .values()
            .filter(|s| s.meta.project == project)
            .filter(|s| match &after {
                None => true,
                Some((t, u)) => {
                    s.meta.created_at < *t || (s.meta.created_at == *t && &s.meta.uid > u)
                }
            })
            .map(Session::info)
            .collect();
        rows.sort_by(|a, b| {
            b.meta
                .created_at
                .cmp(&a.meta.created_at)
                .then_with(|| a.meta.uid.cmp(&b.meta.uid))
        });
        Ok(SessionPage::cut(rows, plan.size))
    }

    pub fn harness(&self, name: &str) -> Result<HarnessRow, RegistryError> {
        self.harnesses
            .get(name)
            .cloned()
            .ok_or_else(|| RegistryError::NotFound {
                name: name.to_owned(),
            })
    }

    pub fn list_harnesses(&self, req: &ListHarnesses) -> Result<Vec<HarnessRow>, StoreError> {
        req.check()?;
        Ok(self
            .harnesses
            .values()
            .filter(|h| h.name > req.after)
            .filter(|h| req.include_retired || h.state == HarnessState::Active)
            .take(req.limit)
            .cloned()
            .collect())
    }

    // ---- writes ------------------------------------------------------

    /// The CAS + fence checked append of one batch.
    pub fn append(
        &mut self,
        batch: &AppendBatch,
        default_project: &str,
    ) -> Result<Vec<LogRecord>, AppendError> {
        required("session", &batch.session)?;
        if batch.events.is_empty() {
            return Err(
                StoreError::InvalidArgument("append needs at least one event".into()).into(),
            );
        }
        let existing = self.sessions.get(&batch.session);
        if existing.is_none() {
            self.refuse_deleted(&batch.session)?;
        }
        let head = existing.map_or(0, Session::head);
        let current = existing.map_or(0, |s| s.fence);
        if batch.expected_last_seq != head && !crate::memory::planted!(DropCas) {
            return Err(AppendError::Conflict { head });
        }
        if batch.fence < current && !crate::memory::planted!(SkipFenceCheck) {
            return Err(AppendError::Fenced { current });
        }
        let prev = existing
            .and_then(|s| s.records.last())
            .map(|r| r.content_hash.clone())
            .unwrap_or_default();
        let records = batch.chain(head, &prev)?;
        let now = batch.now_unix_nanos;
        let session = self
            .sessions
            .entry(batch.session.clone())
            .or_insert_with(|| Session::new(&batch.session, default_project, now));
        session.fill(default_project, now);
        if let Some(state) = batch.compute_state {
            session.compute = state;
        }
        session.records.extend(records.iter().cloned());
        if let Some(owner) = &batch.release_lease {
            session.end_lease(owner, batch.fence);
        }
        Ok(records)
    }

    /// [`Tables::append`], and with `outbox` on the notice rows of the
    /// records it committed, in the same step (a refused append adds none).
    pub fn append_announcing(
        &mut self,
        batch: &AppendBatch,
        default_project: &str,
        outbox: bool,
    ) -> Result<Vec<LogRecord>, AppendError> {
        let records = self.append(batch, default_project)?;
        if outbox {
            let rows = outbox::rows_for(&batch.session, &records, batch.now_unix_nanos);
            debug_assert!(rows.iter().all(|r| r.session == batch.session));
            self.notices.insert(rows);
        }
        Ok(records)
    }

    /// The notification outbox.
    pub fn notices(&self) -> &NoticeTable {
        &self.notices
    }

    /// The notification outbox, for claims and settles.
    pub fn notices_mut(&mut self) -> &mut NoticeTable {
        &mut self.notices
    }

    /// A fork child's first write: the parent's records up to `at_seq` by
    /// reference (flattened to the sessions that hold them), then the
    /// batch's events chained from the parent's record at `at_seq`.
    pub fn fork(
        &mut self,
        batch: &ForkBatch,
        default_project: &str,
    ) -> Result<Vec<LogRecord>, AppendError> {
        batch.check()?;
        let existing = self.sessions.get(&batch.child);
        if existing.is_none() {
            self.refuse_deleted(&batch.child)?;
        }
        let head = existing.map_or(0, Session::head);
        if head != 0 {
            return Err(AppendError::Conflict { head });
        }
        let current = existing.map_or(0, |s| s.fence);
        if batch.fence < current && !crate::memory::planted!(SkipFenceCheck) {
            return Err(AppendError::Fenced { current });
        }
        let (spans, prev) = if batch.at_seq == 0 {
            (Vec::new(), String::new())
        } else {
            self.refuse_deleted(&batch.parent)?;
            let parent = self.sessions.get(&batch.parent);
            let spans = parent.map_or(&[][..], |p| p.prefix.as_slice());
            let prev = self
                .records(&batch.parent)
                .iter()
                .find(|r| r.seq == batch.at_seq)
                .map(|r| r.content_hash.clone())
                .ok_or_else(|| no_record(&batch.parent, batch.at_seq))?;
            (child_spans(&batch.parent, spans, batch.at_seq), prev)
        };
        let records = batch.chain(&prev)?;
        let now = batch.now_unix_nanos;
        let child = self
            .sessions
            .entry(batch.child.clone())
            .or_insert_with(|| Session::new(&batch.child, default_project, now));
        child.fill(default_project, now);
        if let Some(state) = batch.compute_state {
            child.compute = state;
        }
        child.prefix = spans;
        child.records.extend(records.iter().cloned());
        Ok(records)
    }

    /// The last seq of `owner`'s records any fork child's span names (0:
    /// none refers to it).
    fn referenced(&self, owner: &str) -> i64 {
        self.sessions
            .values()
            .flat_map(|s| &s.prefix)
            .filter(|p| p.owner == owner)
            .map(|p| p.last)
            .max()
            .unwrap_or(0)
    }

    /// Keeps of a deleted `owner`'s records only what children still name.
    fn release(&mut self, owner: &str) {
        let keep = self.referenced(owner);
        if let Some(records) = self.retained.get_mut(owner) {
            records.retain(|r| r.seq <= keep);
            if records.is_empty() {
                self.retained.remove(owner);
            }
        }
    }

    /// fence = fence + 1 (1 on first mint); creates the row if missing.
    /// With a claim, takes the lease too, or refuses and changes nothing.
    pub fn mint_fence(
        &mut self,
        session: &str,
        now: i64,
        default_project: &str,
        lease: Option<&LeaseClaim>,
    ) -> Result<i64, StoreError> {
        required("session", session)?;
        self.refuse_deleted(session)?;
        if let Some(claim) = lease {
            let held = self.sessions.get(session).and_then(|s| s.lease.as_ref());
            lease::check_claim(session, held, claim, now)?;
        }
        let s = self
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| Session::new(session, default_project, now));
        s.fill(default_project, now);
        s.fence += 1;
        if let Some(claim) = lease {
            s.lease = Some(lease::taken(claim, s.fence, now));
        }
        Ok(s.fence)
    }

    /// Renews (ttl > 0) or releases (0) `owner`'s lease taken under
    /// `fence`; whether `owner` held it.
    pub fn hold_lease(
        &mut self,
        session: &str,
        owner: &str,
        fence: i64,
        ttl: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        required("session", session)?;
        required("lease owner", owner)?;
        let Some(s) = self.sessions.get_mut(session) else {
            return Ok(false);
        };
        if ttl == 0 {
            return Ok(s.end_lease(owner, fence));
        }
        let Some(held) = s.lease.as_mut() else {
            return Ok(false);
        };
        if held.owner != owner || held.fence != fence {
            return Ok(false);
        }
        held.expires_at = now.saturating_add(ttl);
        Ok(true)
    }

    /// The session's lease as stored (for tests and reports).
    pub fn lease(&self, session: &str) -> Option<StoredLease> {
        self.sessions.get(session)?.lease.clone()
    }

    /// The metadata upsert; never touches fence, compute state or events.
    pub fn put_session(
        &mut self,
        meta: &SessionMeta,
        now: i64,
        default_project: &str,
    ) -> Result<(), StoreError> {
        required("session uid", &meta.uid)?;
        self.refuse_deleted(&meta.uid)?;
        let project = meta.project_or(default_project);
        let s = self
            .sessions
            .entry(meta.uid.clone())
            .or_insert_with(|| Session::new(&meta.uid, project, 0));
        // An explicit created_at wins; 0 means "now on insert, keep on
        // update" (or fill it if an append created the row without one).
        let created_at = match (meta.created_at, s.meta.created_at) {
            (0, 0) => now,
            (0, kept) => kept,
            (given, _) => given,
        };
        s.meta = SessionMeta {
            project: project.to_owned(),
            created_at,
            updated_at: now,
            ..meta.clone()
        };
        Ok(())
    }

    fn refuse_deleted(&self, uid: &str) -> Result<(), StoreError> {
        if self.tombstones.contains_key(uid) && !crate::memory::planted!(IgnoreTombstone) {
            return Err(StoreError::SessionDeleted {
                uid: uid.to_owned(),
            });
        }
        Ok(())
    }

    /// Removes the session's row and records and leaves its tombstone.
    pub fn delete_session(&mut self, req: &DeleteSession) -> Result<Tombstone, DeleteError> {
        let deleted = self.refuse_deleted(&req.uid).is_err();
        let found = self.sessions.get(&req.uid);
        let head = found.map_or(0, Session::head);
        rules::check_delete(req, deleted, found.is_some(), head)?;
        let records = i64::try_from(self.records(&req.uid).len()).expect("fits i64");
        // The planted bug: the tombstone is written but the session stays.
        if !crate::memory::planted!(DeleteKeepsRecords) {
            let gone = self.sessions.remove(&req.uid).expect("looked up above");
            // Children keep what they share of it; what it shared of
            // other deleted sessions may be free now.
            let keep = self.referenced(&req.uid);
            let kept: Vec<LogRecord> = gone.records.into_iter().filter(|r| r.seq <= keep).collect();
            if !kept.is_empty() {
                self.retained.insert(req.uid.clone(), kept);
            }
            let owners: BTreeSet<String> = gone.prefix.into_iter().map(|p| p.owner).collect();
            for owner in owners {
                self.release(&owner);
            }
        }
        let tombstone = rules::tombstone(req, records);
        self.tombstones.insert(req.uid.clone(), tombstone.clone());
        Ok(tombstone)
    }

    pub fn register_harness(
        &mut self,
        reg: &HarnessRegistration,
        now: i64,
    ) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
        let reserved = self.reserved.contains(&reg.name);
        let outcome = rules::register(reg, reserved, self.harnesses.get(&reg.name))?;
        let row = match outcome {
            RegisterOutcome::Created => {
                let row = rules::new_harness_row(reg, now);
                self.harnesses.insert(reg.name.clone(), row.clone());
                row
            }
            RegisterOutcome::Unchanged => self.harnesses[&reg.name].clone(),
            RegisterOutcome::Reactivated => {
                let row = self.harnesses.get_mut(&reg.name).expect("the rule saw it");
                rules::reactivate(row, now);
                row.clone()
            }
        };
        Ok((row, outcome))
    }

    /// Only an active row changes, so a repeat keeps the first reason/time.
    pub fn retire_harness(
        &mut self,
        name: &str,
        reason: &str,
        now: i64,
    ) -> Result<HarnessRow, RegistryError> {
        rules::check_retire(name)?;
        let row = self
            .harnesses
            .get_mut(name)
            .ok_or_else(|| RegistryError::NotFound {
                name: name.to_owned(),
            })?;
        rules::retire(row, reason, now);
        Ok(row.clone())
    }

    pub fn reserve_harness_names(&mut self, names: &[String]) -> Result<(), RegistryError> {
        for name in names {
            rules::check_reservation(name, self.harnesses.contains_key(name))?;
        }
        self.reserved.extend(names.iter().cloned());
        Ok(())
    }

    pub fn put_session_on_active_harness(
        &mut self,
        meta: &SessionMeta,
        registered: bool,
        now: i64,
        default_project: &str,
    ) -> Result<(), RegistryError> {
        rules::session_harness(&meta.harness, registered, self.harnesses.get(&meta.harness))?;
        self.put_session(meta, now, default_project)?;
        Ok(())
    }
}
