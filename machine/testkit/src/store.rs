//! An in-memory journal store with the same contract as the SQLite one:
//! CAS on the head, fence check, prev link, canonical hash, the
//! compute_state projection, keyset paging and the registry rows.

use std::collections::{BTreeMap, BTreeSet};

use agentsessions_proto::v1::{ComputeState, Event, LogRecord};

use agentsessions_machine::canon;
use agentsessions_machine::host::{
    AppendError, HarnessCheck, HarnessRow, Nanos, PutError, RegisterOutcome, RegistryRefusal,
    SessionRow, StoreEffect, StoreOutcome,
};
use agentsessions_machine::journal::projection::{batch_compute_state, compute_state_after};

#[derive(Debug, Clone, Default)]
struct Entry {
    row: SessionRow,
    fence: i64,
    records: Vec<LogRecord>,
}

/// The store. Every operation is atomic and immediately durable.
#[derive(Debug, Clone, Default)]
pub struct MemStore {
    sessions: BTreeMap<String, Entry>,
    harnesses: BTreeMap<String, HarnessRow>,
    reserved: BTreeSet<String>,
    /// Project given to rows created implicitly (fence mint, append).
    pub default_project: String,
}

impl MemStore {
    /// An empty store whose implicit rows use project "default".
    pub fn new() -> Self {
        Self {
            default_project: "default".into(),
            ..Self::default()
        }
    }

    /// The records of a session (empty when unknown).
    pub fn records(&self, session: &str) -> &[LogRecord] {
        self.sessions
            .get(session)
            .map_or(&[][..], |e| e.records.as_slice())
    }

    /// The current fence of a session.
    pub fn fence(&self, session: &str) -> i64 {
        self.sessions.get(session).map_or(0, |e| e.fence)
    }

    /// The stored row of a session.
    pub fn row(&self, session: &str) -> Option<SessionRow> {
        self.sessions.get(session).map(|e| self.view(e))
    }

    /// Session uids in the store.
    pub fn sessions(&self) -> Vec<String> {
        self.sessions.keys().cloned().collect()
    }

    /// Loads records verbatim (hashes as given), as importing a journal
    /// written elsewhere would; fences are raised to the highest seen.
    pub fn import(&mut self, session: &str, records: Vec<LogRecord>, now: Nanos) {
        let project = self.default_project.clone();
        let entry = self.entry(session, now, &project);
        for r in records {
            entry.fence = entry.fence.max(r.fence);
            if let Some(ev) = &r.event {
                entry.row.compute_state = compute_state_after(entry.row.compute_state, ev);
            }
            entry.records.push(r);
        }
    }

    /// Drops every record after the first `keep`, as a crash before the
    /// later appends committed would have left the journal. The fence and
    /// compute state stay as they were (a crash does not roll them back).
    pub fn truncate(&mut self, session: &str, keep: usize) {
        if let Some(e) = self.sessions.get_mut(session) {
            e.records.truncate(keep);
        }
    }

    fn entry(&mut self, session: &str, now: Nanos, project: &str) -> &mut Entry {
        self.sessions
            .entry(session.to_owned())
            .or_insert_with(|| Entry {
                row: SessionRow {
                    uid: session.to_owned(),
                    project: project.to_owned(),
                    created_at: now,
                    updated_at: now,
                    compute_state: ComputeState::ComputeNone,
                    ..SessionRow::default()
                },
                fence: 0,
                records: Vec::new(),
            })
    }

    fn view(&self, e: &Entry) -> SessionRow {
        let mut row = e.row.clone();
        row.last_seq = e.records.last().map_or(0, |r| r.seq);
        row
    }

    /// Appends under CAS and fence; all events or none. For tests that
    /// write as another writer would: the compute_state follows the
    /// machine's rule for the batch.
    pub fn append(
        &mut self,
        session: &str,
        expected: i64,
        fence: i64,
        events: &[Event],
        now: Nanos,
    ) -> Result<Vec<LogRecord>, AppendError> {
        let state = batch_compute_state(events);
        self.append_told(session, expected, fence, events, state, now)
    }

    /// Appends under CAS and fence and stores the compute_state it is told
    /// (`None`: unchanged), as a shell store does.
    fn append_told(
        &mut self,
        session: &str,
        expected: i64,
        fence: i64,
        events: &[Event],
        compute_state: Option<ComputeState>,
        now: Nanos,
    ) -> Result<Vec<LogRecord>, AppendError> {
        let head = self.records(session).last().map_or(0, |r| r.seq);
        if expected != head && !crate::planted!(DropCas) {
            return Err(AppendError::Conflict { head });
        }
        let current = self.fence(session);
        if fence < current && !crate::planted!(SkipFenceCheck) {
            return Err(AppendError::Fenced { current });
        }
        let mut prev = self
            .records(session)
            .last()
            .map(|r| r.content_hash.clone())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(events.len());
        for (i, ev) in events.iter().enumerate() {
            let seq = head + 1 + i as i64;
            let hash = canon::content_hash(&prev, seq, ev)
                .map_err(|e| AppendError::Failed(format!("canonicalize seq {seq}: {e}")))?;
            out.push(LogRecord {
                seq,
                prev_hash: std::mem::replace(&mut prev, hash.clone()),
                content_hash: hash,
                fence,
                event: Some(ev.clone()),
            });
        }
        let project = self.default_project.clone();
        let entry = self.entry(session, now, &project);
        if let Some(state) = compute_state {
            entry.row.compute_state = state;
        }
        entry.row.updated_at = now;
        entry.records.extend(out.iter().cloned());
        Ok(out)
    }

    /// Performs a store effect.
    pub fn perform(&mut self, effect: &StoreEffect) -> StoreOutcome {
        match effect {
            StoreEffect::Append {
                session,
                expected_last_seq,
                fence,
                events,
                compute_state,
                now,
                ..
            } => StoreOutcome::Appended(self.append_told(
                session,
                *expected_last_seq,
                *fence,
                events,
                *compute_state,
                *now,
            )),
            StoreEffect::MintFence { session, now, .. } => {
                let project = self.default_project.clone();
                let e = self.entry(session, *now, &project);
                e.fence += 1;
                e.row.updated_at = *now;
                StoreOutcome::Fence(Ok(e.fence))
            }
            StoreEffect::ReadLog {
                session,
                from_seq,
                to_seq,
                ..
            } => StoreOutcome::Log(Ok(self
                .records(session)
                .iter()
                .filter(|r| r.seq >= *from_seq && (*to_seq == 0 || r.seq <= *to_seq))
                .cloned()
                .collect())),
            StoreEffect::GetSession { session, .. } => StoreOutcome::Session(Ok(self.row(session))),
            StoreEffect::PutSession {
                row, check, now, ..
            } => StoreOutcome::Put(self.put_session(row, *check, *now)),
            StoreEffect::ListSessions {
                project,
                page_size,
                after,
                ..
            } => {
                let mut rows: Vec<SessionRow> = self
                    .sessions
                    .values()
                    .filter(|e| &e.row.project == project)
                    .map(|e| self.view(e))
                    .filter(|r| match after {
                        None => true,
                        Some((t, u)) => r.created_at < *t || (r.created_at == *t && &r.uid > u),
                    })
                    .collect();
                rows.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.uid.cmp(&b.uid)));
                let more = rows.len() > *page_size;
                rows.truncate(*page_size);
                StoreOutcome::SessionPage(Ok((rows, more)))
            }
            StoreEffect::GetHarnessRow { name, .. } => {
                StoreOutcome::HarnessRow(Ok(self.harnesses.get(name).cloned()))
            }
            StoreEffect::ListHarnessRows {
                after,
                limit,
                include_retired,
                ..
            } => StoreOutcome::HarnessRows(Ok(self
                .harnesses
                .values()
                .filter(|h| &h.name > after && (*include_retired || !h.retired))
                .take(*limit)
                .cloned()
                .collect())),
            StoreEffect::RegisterHarnessRow { row, now, .. } => {
                StoreOutcome::Registered(self.register(row, *now))
            }
            StoreEffect::RetireHarnessRow {
                name, reason, now, ..
            } => StoreOutcome::Retired(match self.harnesses.get_mut(name) {
                None => Err(PutError::Refused(RegistryRefusal::NotFound)),
                Some(h) => {
                    if !h.retired {
                        h.retired = true;
                        h.retire_reason = reason.clone();
                        h.retired_at = *now;
                        h.updated_at = *now;
                    }
                    Ok(h.clone())
                }
            }),
            StoreEffect::ReserveHarnessNames { names, .. } => StoreOutcome::Reserved(
                if names
                    .iter()
                    .any(|n| n.is_empty() || self.harnesses.contains_key(n))
                {
                    Err(PutError::Refused(RegistryRefusal::NameCollision))
                } else {
                    self.reserved.extend(names.iter().cloned());
                    Ok(())
                },
            ),
        }
    }

    fn put_session(
        &mut self,
        row: &SessionRow,
        check: Option<HarnessCheck>,
        now: Nanos,
    ) -> Result<(), PutError> {
        match check {
            Some(HarnessCheck::Registered) => match self.harnesses.get(&row.harness) {
                None => return Err(PutError::Refused(RegistryRefusal::NotFound)),
                Some(h) if h.retired => return Err(PutError::Refused(RegistryRefusal::Retired)),
                Some(_) => {}
            },
            Some(HarnessCheck::Static) if self.harnesses.contains_key(&row.harness) => {
                return Err(PutError::Refused(RegistryRefusal::NameCollision));
            }
            _ => {}
        }
        let project = if row.project.is_empty() {
            self.default_project.clone()
        } else {
            row.project.clone()
        };
        let entry = self.entry(&row.uid, now, &project);
        let keep = (entry.row.compute_state, entry.row.created_at);
        entry.row = SessionRow {
            project,
            compute_state: keep.0,
            created_at: if row.created_at != 0 {
                row.created_at
            } else {
                keep.1
            },
            updated_at: now,
            last_seq: 0,
            ..row.clone()
        };
        Ok(())
    }

    fn register(
        &mut self,
        row: &HarnessRow,
        now: Nanos,
    ) -> Result<(HarnessRow, RegisterOutcome), PutError> {
        if self.reserved.contains(&row.name) {
            return Err(PutError::Refused(RegistryRefusal::Reserved));
        }
        match self.harnesses.get_mut(&row.name) {
            None => {
                let mut stored = row.clone();
                stored.created_at = now;
                stored.updated_at = now;
                self.harnesses.insert(row.name.clone(), stored.clone());
                Ok((stored, RegisterOutcome::Created))
            }
            Some(h) if h.spec_digest != row.spec_digest => {
                Err(PutError::Refused(RegistryRefusal::SpecConflict))
            }
            Some(h) if !h.retired => Ok((h.clone(), RegisterOutcome::Unchanged)),
            Some(h) => {
                h.retired = false;
                h.retire_reason.clear();
                h.retired_at = 0;
                h.updated_at = now;
                Ok((h.clone(), RegisterOutcome::Reactivated))
            }
        }
    }
}

/// One session's stored state (row, fence and records), so a simulator can
/// roll back a transaction that a crash did not let commit.
#[derive(Debug, Clone)]
pub struct SessionImage(Entry);

impl SessionImage {
    /// The session's records.
    pub fn records(&self) -> &[LogRecord] {
        &self.0.records
    }

    /// The session's fence.
    pub fn fence(&self) -> i64 {
        self.0.fence
    }

    /// The session's row, with `last_seq` derived from the records.
    pub fn row(&self) -> SessionRow {
        let mut row = self.0.row.clone();
        row.last_seq = self.0.records.last().map_or(0, |r| r.seq);
        row
    }
}

impl MemStore {
    /// The stored state of `session` (`None` when it does not exist).
    pub fn image(&self, session: &str) -> Option<SessionImage> {
        self.sessions.get(session).cloned().map(SessionImage)
    }

    /// Puts `session` back to `image` (`None` removes it), as rolling back
    /// every write since the image was taken would.
    pub fn restore(&mut self, session: &str, image: Option<SessionImage>) {
        match image {
            Some(SessionImage(entry)) => {
                self.sessions.insert(session.to_owned(), entry);
            }
            None => {
                self.sessions.remove(session);
            }
        }
    }
}
