//! The simulator's journal: the test store's contract (CAS, fence, hash
//! chain, compute_state) plus the difference between pending and durable.
//!
//! Crash model (transaction granularity, as SQLite is atomic per
//! transaction): a write is **pending** from the moment the store performs
//! it until its outcome is delivered to the host, and **durable** after. A
//! later store operation also makes it durable (the store is serialized, so
//! whatever a later read could see has committed). At a crash the one
//! pending write is either lost ([`CrashVariant::Drop`]), durable with its
//! acknowledgement lost ([`CrashVariant::Keep`]), or — for a multi-event
//! append — torn after its first `m` events ([`CrashVariant::Tear`]), the
//! shape a non-atomic writer (the Go host's two-append gate) leaves behind.

use agentsessions_machine::faults::{self, Fault};
use agentsessions_machine::vocab::{Nanos, SessionRow, StoreEffect, StoreOutcome};
use agentsessions_proto::v1::{Event, LogRecord};
use agentsessions_testkit::MemStore;
use agentsessions_testkit::store::SessionImage;

use crate::digest::Fnv;
use crate::oracle::JournalView;

/// What a crash does to the pending write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashVariant {
    /// Nothing was pending, or the pending write is lost.
    Drop,
    /// The pending write committed; only its acknowledgement is lost.
    Keep,
    /// Only the first `n` events of the pending append landed.
    Tear(usize),
}

impl CrashVariant {
    /// A short label for traces.
    pub fn label(self) -> String {
        match self {
            Self::Drop => "drop".into(),
            Self::Keep => "keep".into(),
            Self::Tear(n) => format!("tear{n}"),
        }
    }
}

/// The one write that has been performed but is not yet durable.
#[derive(Debug, Clone)]
struct Pending {
    tx: u64,
    session: String,
    /// Everything stored under the uid before the write.
    before: SessionImage,
    /// For appends: what a torn crash re-applies a prefix of.
    append: Option<(i64, i64, Vec<Event>)>,
    now: Nanos,
}

/// The journal. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct SimStore {
    mem: MemStore,
    pending: Option<Pending>,
    next_tx: u64,
}

impl SimStore {
    /// An empty journal (implicit rows use project "default").
    pub fn new() -> Self {
        Self {
            mem: MemStore::new(),
            pending: None,
            next_tx: 0,
        }
    }

    /// Everything written, pending or not (what a read sees).
    pub fn live(&self) -> &MemStore {
        &self.mem
    }

    /// Loads records written elsewhere; durable at once.
    pub fn import(&mut self, session: &str, records: Vec<LogRecord>, now: Nanos) {
        self.commit();
        self.mem.import(session, records, now);
    }

    /// The stored fence of `session` as a write would see it now.
    pub fn live_fence(&self, session: &str) -> i64 {
        self.mem.fence(session)
    }

    /// Performs a store effect. Returns its outcome and, when it wrote
    /// something, the transaction that stays pending until
    /// [`SimStore::delivered`].
    pub fn perform(&mut self, effect: &StoreEffect, now: Nanos) -> (StoreOutcome, Option<u64>) {
        // Serialized store: an earlier write is durable once a later
        // operation runs after it.
        self.commit();
        let written = match effect {
            StoreEffect::Append { session, .. }
            | StoreEffect::Fork { session, .. }
            | StoreEffect::MintFence { session, .. } => Some(session.clone()),
            StoreEffect::PutSession { row, .. } => Some(row.uid.clone()),
            StoreEffect::DeleteSession { session, .. } => Some(session.clone()),
            _ => None,
        };
        let before = written.as_ref().map(|s| self.mem.image(s));
        let outcome = self.mem.perform(effect);
        let wrote = matches!(
            outcome,
            StoreOutcome::Appended(Ok(_))
                | StoreOutcome::Fence(Ok(_))
                | StoreOutcome::Put(Ok(()))
                | StoreOutcome::Deleted(Ok(_))
        );
        let (Some(session), Some(before), true) = (written, before, wrote) else {
            return (outcome, None);
        };
        self.next_tx += 1;
        let append = match effect {
            StoreEffect::Append {
                expected_last_seq,
                fence,
                events,
                ..
            } => Some((*expected_last_seq, *fence, events.clone())),
            _ => None,
        };
        self.pending = Some(Pending {
            tx: self.next_tx,
            session,
            before,
            append,
            now,
        });
        (outcome, Some(self.next_tx))
    }

    /// The outcome of transaction `tx` reached the host: it is durable.
    pub fn delivered(&mut self, tx: u64) {
        if faults::active(Fault::AckBeforeDurable) {
            // The planted bug: acknowledge now, make durable "later" (at
            // the next store operation), so a crash in between loses it.
            return;
        }
        if self.pending.as_ref().is_some_and(|p| p.tx == tx) {
            self.commit();
        }
    }

    /// Makes the pending write durable.
    pub fn commit(&mut self) {
        self.pending = None;
    }

    /// The distinct outcomes a crash can have right now.
    pub fn crash_variants(&self) -> Vec<CrashVariant> {
        match &self.pending {
            None => vec![CrashVariant::Drop],
            Some(p) => {
                let mut v = vec![CrashVariant::Drop, CrashVariant::Keep];
                if let Some((_, _, events)) = &p.append {
                    v.extend((1..events.len()).map(CrashVariant::Tear));
                }
                v
            }
        }
    }

    /// Applies a crash: afterwards nothing is pending.
    pub fn crash(&mut self, variant: CrashVariant) {
        let Some(p) = self.pending.take() else {
            return;
        };
        match variant {
            CrashVariant::Keep => {}
            CrashVariant::Drop => self.mem.restore(&p.session, p.before),
            CrashVariant::Tear(n) => {
                self.mem.restore(&p.session, p.before);
                let (expected, fence, events) = p.append.expect("only appends tear");
                assert!(n > 0 && n < events.len(), "a tear keeps a strict prefix");
                self.mem
                    .append(&p.session, expected, fence, &events[..n], p.now)
                    .expect("the prefix of a write that committed commits");
            }
        }
    }

    /// The pending write's transaction, if any.
    pub fn pending_tx(&self) -> Option<u64> {
        self.pending.as_ref().map(|p| p.tx)
    }

    /// True while a write is pending.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Mixes the whole state (pending marker included) into `h`.
    pub fn digest(&self, h: &mut Fnv) {
        for s in self.mem.sessions() {
            h.str(&s).i64(self.mem.fence(&s));
            if let Some(row) = self.mem.row(&s) {
                h.i64(row.compute_state as i64)
                    .str(&row.harness)
                    .str(&row.parent_uid);
            }
            for r in self.mem.records(&s).iter() {
                h.i64(r.seq).i64(r.fence).str(&r.content_hash);
            }
        }
        for s in self.mem.deleted() {
            h.str("deleted").str(&s);
        }
        if let Some(p) = &self.pending {
            h.str("pending").str(&p.session);
        }
    }

    fn pending_for(&self, session: &str) -> Option<&Pending> {
        self.pending.as_ref().filter(|p| p.session == session)
    }
}

/// The durable part of the store: what survives a crash that drops the
/// pending write.
impl JournalView for SimStore {
    fn sessions(&self) -> Vec<String> {
        let mut out: std::collections::BTreeSet<String> = self
            .mem
            .sessions()
            .into_iter()
            .filter(|s| self.pending_for(s).is_none())
            .collect();
        // The pending write's uid as it was before (a pending delete
        // removed it from the live tables).
        if let Some(p) = &self.pending
            && p.before.row().is_some()
        {
            out.insert(p.session.clone());
        }
        out.into_iter().collect()
    }

    fn deleted(&self) -> Vec<String> {
        let mut out: std::collections::BTreeSet<String> = self
            .mem
            .deleted()
            .into_iter()
            .filter(|s| self.pending_for(s).is_none())
            .collect();
        if let Some(p) = &self.pending
            && p.before.is_deleted()
        {
            out.insert(p.session.clone());
        }
        out.into_iter().collect()
    }

    fn records(&self, session: &str) -> std::borrow::Cow<'_, [LogRecord]> {
        match self.pending_for(session) {
            Some(p) => std::borrow::Cow::Borrowed(p.before.records()),
            None => self.mem.records(session),
        }
    }

    fn row(&self, session: &str) -> Option<SessionRow> {
        match self.pending_for(session) {
            Some(p) => p.before.row(),
            None => self.mem.row(session),
        }
    }

    fn fence(&self, session: &str) -> i64 {
        match self.pending_for(session) {
            Some(p) => p.before.fence(),
            None => self.mem.fence(session),
        }
    }
}
