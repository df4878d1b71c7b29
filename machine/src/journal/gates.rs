//! The approval gate kept up to date record by record.
//!
//! Invariant: after any sequence of pushes, [`GateFold::scan`] equals
//! [`approval::scan`](super::approval::scan) over the same records — the
//! same states, the same selection, the same first error. It holds because
//! the scan's only state across executions is the grouping of records by
//! execution (in first-seen order) and the last fork marker; everything else
//! is decided per gated execution by the scan's own walker, which this fold
//! runs again on a group whenever that group gains a record. Ordinary
//! executions are never walked, so an ungated session costs O(log n) per
//! record and nothing per query.
//!
//! Every field is a persistent structure, so cloning a fold (as every
//! journal snapshot does) is O(1).

use std::sync::Arc;

use agentsessions_proto::v1::{EventKind, LogRecord};
use imbl::{OrdMap, Vector};

use super::approval::{ApprovalScan, ApprovalState, is_gated_record, walk_gated_group};
use super::records::{exec_id, is_fork, kind};
use crate::error::LogError;

/// What one execution's walk found: its gates, or the first bad evidence.
type Walk = Arc<Result<Vec<ApprovalState>, LogError>>;

/// One execution: the records whose execution id is `id`, all between
/// indices `first` and `last` of the journal.
#[derive(Debug, Clone)]
struct Group {
    id: Arc<str>,
    first: usize,
    last: usize,
    /// Some record of it takes part in the gate protocol.
    gated: bool,
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub(crate) struct GateFold {
    /// Seq of the last fork marker (0: none).
    last_fork: i64,
    /// Executions in first-seen order.
    groups: Vector<Group>,
    by_id: OrdMap<Arc<str>, usize>,
    /// The walk of every gated execution, by group index.
    walked: OrdMap<usize, Walk>,
    /// Lowest group index whose walk failed: the scan's error.
    first_error: Option<usize>,
}

impl GateFold {
    /// Takes `records[index]`, the record just appended to `records`.
    pub(crate) fn push(&mut self, records: &Vector<Arc<LogRecord>>, index: usize) {
        assert_eq!(index + 1, records.len(), "records are pushed in order");
        let r = &records[index];
        debug_assert_eq!(r.seq, index as i64 + 1, "a journal's seqs count from 1");
        if kind(r) == EventKind::EventLifecycle {
            if is_fork(r) {
                assert!(r.seq > self.last_fork, "seqs ascend");
                self.last_fork = r.seq;
            }
            return;
        }
        let id = exec_id(r);
        let gi = match self.by_id.get(id) {
            Some(&gi) => gi,
            None => {
                let gi = self.groups.len();
                let id: Arc<str> = Arc::from(id);
                self.groups.push_back(Group {
                    id: Arc::clone(&id),
                    first: index,
                    last: index,
                    gated: false,
                });
                self.by_id.insert(id, gi);
                gi
            }
        };
        let group = self.groups.get_mut(gi).expect("indexed group exists");
        group.last = index;
        assert!(group.first <= group.last);
        group.gated |= is_gated_record(r);
        if group.gated {
            let group = group.clone();
            self.walk(records, gi, &group);
        }
    }

    /// Walks gated group `gi` again over all its records.
    fn walk(&mut self, records: &Vector<Arc<LogRecord>>, gi: usize, group: &Group) {
        assert!(group.gated, "only gated executions are walked");
        debug_assert_eq!(self.groups.len(), self.by_id.len(), "one group per id");
        let members: Vec<&LogRecord> = records
            .focus()
            .narrow(group.first..=group.last)
            .into_iter()
            .map(|r| &**r)
            .filter(|r| kind(r) != EventKind::EventLifecycle && exec_id(r) == &*group.id)
            .collect();
        debug_assert!(!members.is_empty(), "a group holds its first record");
        let mut states = Vec::new();
        let walk = walk_gated_group(&group.id, &members, &mut states).map(|()| states);
        let failed = walk.is_err();
        self.walked.insert(gi, Arc::new(walk));
        self.first_error = match self.first_error {
            _ if failed => Some(self.first_error.map_or(gi, |e| e.min(gi))),
            Some(e) if e == gi => self
                .walked
                .iter()
                .find(|(_, w)| w.is_err())
                .map(|(&g, _)| g),
            other => other,
        };
        debug_assert!(
            self.first_error
                .is_none_or(|e| self.walked.get(&e).is_some_and(|w| w.is_err())),
            "the first error names a failed walk"
        );
    }

    /// The scan's error, if any gated execution holds bad evidence.
    pub(crate) fn error(&self) -> Option<&LogError> {
        let gi = self.first_error?;
        self.walked.get(&gi).and_then(|w| w.as_ref().as_ref().err())
    }

    /// The gate the session waits on (the last gate of the latest
    /// execution, when that one is gated), as the scan through `head`
    /// would select it. O(1) in the journal's length.
    pub(crate) fn selected(&self, head: i64) -> Result<Option<ApprovalState>, LogError> {
        assert!(head >= self.last_fork, "the fork marker is a record taken");
        if let Some(e) = self.error() {
            return Err(e.clone());
        }
        let Some(last) = self.groups.len().checked_sub(1) else {
            return Ok(None);
        };
        let Some(walk) = self.walked.get(&last) else {
            return Ok(None);
        };
        let states = walk.as_ref().as_ref().expect("no walk failed");
        Ok(states.last().cloned().map(|mut s| {
            s.settle(head, self.last_fork);
            s
        }))
    }

    /// The whole scan through `head` (the last record pushed): every gate,
    /// copied. O(gates).
    pub(crate) fn scan(&self, head: i64) -> Result<ApprovalScan, LogError> {
        assert!(head >= self.last_fork, "the fork marker is a record taken");
        if let Some(e) = self.error() {
            return Err(e.clone());
        }
        let last = self.groups.len().saturating_sub(1);
        let mut states = Vec::new();
        let mut selected = None;
        for (&gi, walk) in &self.walked {
            let gates = walk.as_ref().as_ref().expect("no walk failed");
            if gi == last && !gates.is_empty() {
                selected = Some(states.len() + gates.len() - 1);
            }
            states.extend(gates.iter().cloned().map(|mut s| {
                s.settle(head, self.last_fork);
                s
            }));
        }
        debug_assert!(selected.is_none_or(|i| i < states.len()));
        Ok(ApprovalScan {
            states,
            selected,
            head,
        })
    }
}
