//! The tool ledger's contract: which (session, idempotency key) pairs have
//! started and finished, with each finished call's result, so a tool call is
//! never executed twice by a re-drive.
//!
//! Invariant (every backend): `start` never overwrites an entry, and
//! `finish` turns a `started` entry (or none) into `done` and leaves a `done`
//! one alone, so the first finished result is the one every later call gets,
//! whichever daemon asks. [`on_start`] and [`on_finish`] are that rule as
//! data; SQL backends say it in their statements, and
//! [`crate::contract::ledger`] holds every backend to it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentsessions_proto::v1::ToolResult;
use prost::Message as _;

/// The ledger could not be read or written (a driver's message, which names
/// tables and constraints, never bound values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LedgerError(pub String);

/// What the ledger knows about one key.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerEntry {
    /// Recorded before the effect; the effect may or may not have happened.
    Started {
        /// Tool the key was first used with.
        tool: String,
    },
    /// The effect happened and this was its result.
    Done {
        /// Tool the key was used with.
        tool: String,
        /// The stored result.
        result: ToolResult,
    },
}

impl LedgerEntry {
    /// The tool the key was used with.
    pub fn tool(&self) -> &str {
        match self {
            LedgerEntry::Started { tool } | LedgerEntry::Done { tool, .. } => tool,
        }
    }
}

/// Where ledger entries live. Calls block; an executor makes them from a
/// blocking thread. Each call is durable when it returns.
pub trait LedgerStore: Send + Sync + 'static {
    /// The entry for (session, key), if any.
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, LedgerError>;
    /// Records that the effect for (session, key) is about to happen. An
    /// existing entry is left as it is ([`on_start`]).
    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), LedgerError>;
    /// Records the effect's result. A result already stored wins
    /// ([`on_finish`]).
    fn finish(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), LedgerError>;
    /// Records the result of a run that was harmless to make twice (it had
    /// no "started" mark). Its loss only means a re-drive runs the call
    /// again, so a store may skip the sync it makes for [`finish`]; by
    /// default it is [`finish`].
    ///
    /// [`finish`]: LedgerStore::finish
    fn finish_unsynced(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), LedgerError> {
        self.finish(session, key, tool, result)
    }
    /// Forgets every key of `session` (a deleted session); returns how many
    /// entries went. Repeating it is harmless.
    fn forget(&self, session: &str) -> Result<usize, LedgerError>;
    /// Sessions with at least one entry, in uid order.
    fn sessions(&self) -> Result<Vec<String>, LedgerError>;
}

/// The entry `start` writes over `existing`: a `started` one only where
/// there is none.
pub fn on_start(existing: Option<&LedgerEntry>, tool: &str) -> Option<LedgerEntry> {
    debug_assert!(!tool.is_empty(), "a ledger entry names its tool");
    match existing {
        Some(_) => None,
        None => Some(LedgerEntry::Started { tool: tool.into() }),
    }
}

/// The entry `finish` writes over `existing`: `done` unless a result is
/// stored already (the first finished wins).
pub fn on_finish(
    existing: Option<&LedgerEntry>,
    tool: &str,
    result: &ToolResult,
) -> Option<LedgerEntry> {
    debug_assert!(!tool.is_empty(), "a ledger entry names its tool");
    match existing {
        Some(LedgerEntry::Done { .. }) => None,
        Some(LedgerEntry::Started { .. }) | None => Some(LedgerEntry::Done {
            tool: tool.into(),
            result: result.clone(),
        }),
    }
}

/// The stored columns of an entry: its tool, `started` or `done`, and the
/// encoded result of a `done` one (the same in every backend).
pub fn columns_of(entry: &LedgerEntry) -> (&str, &'static str, Option<Vec<u8>>) {
    match entry {
        LedgerEntry::Started { tool } => (tool, "started", None),
        LedgerEntry::Done { tool, result } => (tool, "done", Some(result.encode_to_vec())),
    }
}

/// An entry from its stored columns (the same in every backend).
pub fn entry_of(
    tool: String,
    state: &str,
    result: Option<&[u8]>,
) -> Result<LedgerEntry, LedgerError> {
    match (state, result) {
        ("started", _) => Ok(LedgerEntry::Started { tool }),
        ("done", Some(bytes)) => {
            let result = ToolResult::decode(bytes)
                .map_err(|_| LedgerError("stored result is corrupt".into()))?;
            Ok(LedgerEntry::Done { tool, result })
        }
        _ => Err(LedgerError("stored entry is corrupt".into())),
    }
}

/// The ledger in memory: the reference the contract suite is written
/// against, and the simulator's and tests' ledger.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    entries: Mutex<BTreeMap<(String, String), LedgerEntry>>,
}

impl MemoryLedger {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), LedgerEntry>> {
        // Every change is one insert or one retain: a panic leaves no half.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LedgerStore for MemoryLedger {
    fn get(&self, session: &str, key: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        Ok(self.entries().get(&(session.into(), key.into())).cloned())
    }

    fn start(&self, session: &str, key: &str, tool: &str) -> Result<(), LedgerError> {
        let mut entries = self.entries();
        let k = (session.to_owned(), key.to_owned());
        if let Some(e) = on_start(entries.get(&k), tool) {
            entries.insert(k, e);
        }
        Ok(())
    }

    fn finish(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        result: &ToolResult,
    ) -> Result<(), LedgerError> {
        let mut entries = self.entries();
        let k = (session.to_owned(), key.to_owned());
        if let Some(e) = on_finish(entries.get(&k), tool, result) {
            entries.insert(k, e);
        }
        debug_assert!(matches!(
            entries.get(&(session.into(), key.into())),
            Some(LedgerEntry::Done { .. })
        ));
        Ok(())
    }

    fn forget(&self, session: &str) -> Result<usize, LedgerError> {
        let mut entries = self.entries();
        let before = entries.len();
        entries.retain(|(s, _), _| s != session);
        Ok(before - entries.len())
    }

    fn sessions(&self) -> Result<Vec<String>, LedgerError> {
        let mut out: Vec<String> = self.entries().keys().map(|(s, _)| s.clone()).collect();
        out.dedup();
        Ok(out)
    }
}
