//! A bounded cache of committed journal records, so a turn reads only what
//! it has not seen.
//!
//! Every operation loads the whole journal of its session (the machine keeps
//! nothing between requests), which made each turn's read linear in the
//! session's length. The driver keeps the records it has already seen per
//! session — from earlier whole-journal reads and from its own acknowledged
//! appends — and turns a read from the first record into a read from the
//! cached head onward (or, when the read ends before the cached head, of
//! its last record alone).
//!
//! Correctness does not depend on the cache being current: every read still
//! goes to the store, starting at the last cached record it uses, and the
//! cached prefix is used only if the stored record at that seq still carries
//! the cached hash. Records are hash-chained (each hash covers the previous
//! one), so an equal hash at seq N means an identical prefix 1..=N; anything
//! after N (written by this host or another) comes from the store. On any
//! mismatch the whole journal is read again. The machine therefore sees
//! exactly what an uncached read at the same moment would return.
//!
//! Memory is bounded by a total record count across sessions; the least
//! recently used sessions are dropped first.

use std::collections::HashMap;

use agentsessions_proto::v1::LogRecord;

/// Most records held across all sessions.
pub const MAX_RECORDS: usize = 50_000;

struct Entry {
    /// Records 1..=N, contiguous (`records[i].seq == i + 1`).
    records: Vec<LogRecord>,
    used: u64,
}

/// See the module docs.
pub struct LogCache {
    sessions: HashMap<String, Entry>,
    total: usize,
    max_records: usize,
    clock: u64,
}

impl Default for LogCache {
    fn default() -> Self {
        Self::new(MAX_RECORDS)
    }
}

/// How a whole-journal read went to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadPlan {
    /// Read everything (`read(session, 1, 0)`).
    Full,
    /// Read from the cached head (`read(session, seq, 0)`); usable only if
    /// the first record returned is `seq` with `hash`.
    From {
        /// The cached head's seq.
        seq: i64,
        /// Its hash.
        hash: String,
    },
}

fn contiguous(records: &[LogRecord]) -> bool {
    records
        .iter()
        .enumerate()
        .all(|(i, r)| r.seq == i as i64 + 1)
}

impl LogCache {
    /// A cache holding at most `max_records` records in all.
    pub fn new(max_records: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            total: 0,
            max_records,
            clock: 0,
        }
    }

    /// Records held now (for tests).
    pub fn len(&self) -> usize {
        self.total
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How to read the journal of `session` from its first record through
    /// `to_seq` (0 or less: to its end): from the cached head, or from
    /// `to_seq` itself when the cache already reaches past it.
    pub fn plan(&self, session: &str, to_seq: i64) -> ReadPlan {
        let Some(entry) = self.sessions.get(session) else {
            return ReadPlan::Full;
        };
        let cached = entry.records.len();
        let through = match usize::try_from(to_seq) {
            Ok(to) if to > 0 => cached.min(to),
            _ => cached,
        };
        match through.checked_sub(1).map(|i| &entry.records[i]) {
            Some(last) => ReadPlan::From {
                seq: last.seq,
                hash: last.content_hash.clone(),
            },
            None => ReadPlan::Full,
        }
    }

    /// Completes a read made with `plan`: `read` is what the store returned
    /// from the plan's first seq on. Returns the journal from its first
    /// record, or None when the cached prefix no longer matches the store
    /// (the caller reads everything).
    pub fn complete(
        &mut self,
        session: &str,
        plan: &ReadPlan,
        read: Vec<LogRecord>,
    ) -> Option<Vec<LogRecord>> {
        let full = match plan {
            ReadPlan::Full => read,
            ReadPlan::From { seq, hash } => {
                let first = read.first()?;
                if first.seq != *seq || first.content_hash != *hash {
                    self.forget(session);
                    return None;
                }
                // The entry may have been replaced or dropped since the
                // plan was made; its first `seq` records are the same
                // whenever it still reaches `seq` (the hashes chain).
                let entry = self.sessions.get(session)?;
                let n = *seq as usize;
                if entry.records.len() < n || entry.records[n - 1].content_hash != *hash {
                    return None;
                }
                let mut full = Vec::with_capacity(n - 1 + read.len());
                full.extend_from_slice(&entry.records[..n - 1]);
                full.extend(read);
                full
            }
        };
        self.remember(session, &full);
        Some(full)
    }

    /// Records this host appended (acknowledged by the store): extends the
    /// cached journal when they follow its head, else drops it.
    pub fn appended(&mut self, session: &str, records: &[LogRecord]) {
        let Some(entry) = self.sessions.get_mut(session) else {
            return;
        };
        let follows = match (entry.records.last(), records.first()) {
            (Some(head), Some(first)) => {
                first.seq == head.seq + 1 && first.prev_hash == head.content_hash
            }
            _ => false,
        };
        if follows && contiguous_from(records, entry.records.len() as i64 + 1) {
            entry.records.extend_from_slice(records);
            self.total += records.len();
            self.touch(session);
            self.evict(session);
        } else {
            self.forget(session);
        }
    }

    /// Drops what is cached for `session`.
    pub fn forget(&mut self, session: &str) {
        if let Some(e) = self.sessions.remove(session) {
            self.total -= e.records.len();
        }
    }

    fn remember(&mut self, session: &str, full: &[LogRecord]) {
        if full.is_empty() || !contiguous(full) || full.len() > self.max_records {
            self.forget(session);
            return;
        }
        // Keep the longer of what is cached and what was read: a read that
        // raced one of our own appends may be the shorter one.
        if let Some(e) = self.sessions.get(session)
            && e.records.len() >= full.len()
        {
            self.touch(session);
            return;
        }
        self.forget(session);
        self.total += full.len();
        self.sessions.insert(
            session.to_owned(),
            Entry {
                records: full.to_vec(),
                used: 0,
            },
        );
        self.touch(session);
        self.evict(session);
    }

    fn touch(&mut self, session: &str) {
        self.clock += 1;
        if let Some(e) = self.sessions.get_mut(session) {
            e.used = self.clock;
        }
    }

    /// Drops least recently used sessions (never `keep`) until within bounds;
    /// `keep` itself goes if it alone is too large.
    fn evict(&mut self, keep: &str) {
        while self.total > self.max_records {
            let victim = self
                .sessions
                .iter()
                .filter(|(k, _)| k.as_str() != keep)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => self.forget(&k),
                None => {
                    self.forget(keep);
                    return;
                }
            }
        }
    }
}

fn contiguous_from(records: &[LogRecord], first: i64) -> bool {
    records
        .iter()
        .enumerate()
        .all(|(i, r)| r.seq == first + i as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: i64, tag: &str) -> LogRecord {
        LogRecord {
            seq,
            prev_hash: if seq == 1 {
                String::new()
            } else {
                format!("{tag}{}", seq - 1)
            },
            content_hash: format!("{tag}{seq}"),
            ..Default::default()
        }
    }

    fn from(seq: i64, hash: &str) -> ReadPlan {
        ReadPlan::From {
            seq,
            hash: hash.into(),
        }
    }

    fn chain(n: i64, tag: &str) -> Vec<LogRecord> {
        (1..=n).map(|s| rec(s, tag)).collect()
    }

    #[test]
    fn a_second_read_fetches_from_the_cached_head() {
        let mut c = LogCache::new(100);
        assert_eq!(c.plan("s", 0), ReadPlan::Full);
        assert_eq!(
            c.complete("s", &ReadPlan::Full, chain(3, "a")),
            Some(chain(3, "a"))
        );
        let plan = c.plan("s", 0);
        assert_eq!(plan, from(3, "a3"));
        // Another writer appended 4 and 5 meanwhile.
        let tail = chain(5, "a")[2..].to_vec();
        assert_eq!(c.complete("s", &plan, tail), Some(chain(5, "a")));
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn a_changed_head_is_never_served_from_the_cache() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, chain(3, "a"));
        let plan = c.plan("s", 0);
        // The store now holds a different record at seq 3.
        assert_eq!(c.complete("s", &plan, chain(4, "b")[2..].to_vec()), None);
        assert_eq!(c.plan("s", 0), ReadPlan::Full);
        // An empty or shorter journal is a mismatch too.
        c.complete("s", &ReadPlan::Full, chain(3, "a"));
        let plan = c.plan("s", 0);
        assert_eq!(c.complete("s", &plan, Vec::new()), None);
    }

    #[test]
    fn a_bounded_read_uses_the_cached_prefix_up_to_its_end() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, chain(5, "a"));
        // The cache reaches past the bound: only the bound's record is read,
        // to check the prefix.
        let plan = c.plan("s", 3);
        assert_eq!(plan, from(3, "a3"));
        assert_eq!(
            c.complete("s", &plan, chain(3, "a")[2..].to_vec()),
            Some(chain(3, "a"))
        );
        // A shorter answer never shrinks what is cached.
        assert_eq!(c.len(), 5);
        // The bound lies past the cache: read from the cached head.
        let plan = c.plan("s", 7);
        assert_eq!(plan, from(5, "a5"));
        assert_eq!(
            c.complete("s", &plan, chain(7, "a")[4..].to_vec()),
            Some(chain(7, "a"))
        );
        // A changed record at the bound is a mismatch like any other.
        let plan = c.plan("s", 2);
        assert_eq!(c.complete("s", &plan, chain(2, "b")[1..].to_vec()), None);
        assert_eq!(c.plan("s", 2), ReadPlan::Full);
    }

    #[test]
    fn own_appends_extend_only_a_matching_head() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, chain(2, "a"));
        c.appended("s", &chain(4, "a")[2..]);
        assert_eq!(c.len(), 4);
        // A gap (or a foreign link) drops the entry rather than guess.
        c.appended("s", &chain(6, "a")[5..]);
        assert_eq!(c.plan("s", 0), ReadPlan::Full);
        assert!(c.is_empty());
    }

    #[test]
    fn least_recently_used_sessions_go_first() {
        let mut c = LogCache::new(5);
        c.complete("a", &ReadPlan::Full, chain(2, "a"));
        c.complete("b", &ReadPlan::Full, chain(2, "b"));
        c.plan("a", 0);
        c.complete("a", &c.plan("a", 0), chain(2, "a")[1..].to_vec());
        c.complete("c", &ReadPlan::Full, chain(2, "c"));
        assert_eq!(c.plan("b", 0), ReadPlan::Full);
        assert_ne!(c.plan("a", 0), ReadPlan::Full);
        assert_ne!(c.plan("c", 0), ReadPlan::Full);
        // A journal larger than the whole budget is not kept.
        c.complete("d", &ReadPlan::Full, chain(6, "d"));
        assert_eq!(c.plan("d", 0), ReadPlan::Full);
        assert!(c.len() <= 5);
    }
}
