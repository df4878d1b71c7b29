//! A bounded cache of committed journals, so a turn reads only what it has
//! not seen and the machine's summary is not rebuilt per turn.
//!
//! Every operation loads the whole journal of its session (the machine keeps
//! nothing between requests), which made each turn's read linear in the
//! session's length. The driver keeps a [`Journal`] per session — records
//! and their summary, from earlier whole-journal reads, from its own
//! acknowledged appends and from forks it writes at a cached head (the
//! child shares the parent's records) — and turns a read from the first
//! record into a
//! read from the cached head onward (or, when the read ends before the
//! cached head, of its last record alone). A snapshot of a cached journal
//! is O(1) to hand out: records are shared, not copied.
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
//! Memory is bounded by a total record count across sessions; sessions
//! picked at random are dropped first (see [`LogCache::evict`] for why not
//! the least recently used). The longest journal held does
//! not count against the budget, so one session longer than the whole
//! budget stays cached beside the others (memory: the budget plus one
//! journal, which the call that read it held in memory anyway), and the
//! next call on it (a console page, the next turn) reads only its tail.

use std::collections::BTreeMap;

use agentsessions_machine::chain::check_links;
use agentsessions_machine::journal::Journal;
use agentsessions_proto::v1::LogRecord;

/// Most records held across all sessions by default: ~160 MB of echo-sized
/// records (780 bytes each in memory, measured with a counting allocator),
/// enough for 64 busy sessions of 3 000 records before any reloads.
pub const MAX_RECORDS: usize = 200_000;

struct Entry {
    /// Records 1..=N with their summary.
    journal: Journal,
}

/// See the module docs.
pub struct LogCache {
    sessions: BTreeMap<String, Entry>,
    total: usize,
    max_records: usize,
    /// Picks eviction victims (see [`LogCache::evict`]).
    rng: fastrand::Rng,
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

/// What a completed read gives back.
#[derive(Debug)]
pub enum Completed {
    /// The journal from its first record (past `to_seq` when the cache
    /// already reached further; callers bound it).
    Journal(Box<Journal>),
    /// What the store returned for a full read that is not a chain, as it
    /// was (the machine decides what a broken journal means).
    NotAChain(Vec<LogRecord>),
}

impl LogCache {
    /// A cache holding at most `max_records` records in all.
    pub fn new(max_records: usize) -> Self {
        Self {
            sessions: BTreeMap::new(),
            total: 0,
            max_records,
            rng: fastrand::Rng::with_seed(0x5eed_cafe),
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
        let cached = entry.journal.head();
        let through = if to_seq > 0 {
            cached.min(to_seq)
        } else {
            cached
        };
        match entry.journal.get(through) {
            Some(last) => ReadPlan::From {
                seq: last.seq,
                hash: last.content_hash.clone(),
            },
            None => ReadPlan::Full,
        }
    }

    /// Completes a read made with `plan` for records through `to_seq` (0:
    /// the end): `read` is what the store returned from the plan's first
    /// seq on. None when the cached prefix no longer matches the store (the
    /// caller reads everything).
    pub fn complete(
        &mut self,
        session: &str,
        plan: &ReadPlan,
        to_seq: i64,
        read: Vec<LogRecord>,
    ) -> Option<Completed> {
        let journal = match plan {
            ReadPlan::Full => {
                if check_links(&read, 1).is_err() {
                    self.forget(session);
                    return Some(Completed::NotAChain(read));
                }
                Journal::from_records(read)
            }
            ReadPlan::From { seq, hash } => {
                match self.extended(session, *seq, hash, to_seq, read) {
                    Some(j) => j,
                    None => {
                        self.forget(session);
                        return None;
                    }
                }
            }
        };
        debug_assert!(journal.broken().is_none(), "only chains are completed");
        self.remember(session, &journal);
        Some(Completed::Journal(Box::new(journal)))
    }

    /// The cached journal extended with what `read` (records from `seq`
    /// on) holds past it, if `read` starts at the cached record `seq` and
    /// agrees with the cache wherever they overlap.
    fn extended(
        &self,
        session: &str,
        seq: i64,
        hash: &str,
        to_seq: i64,
        mut read: Vec<LogRecord>,
    ) -> Option<Journal> {
        let first = read.first()?;
        if first.seq != seq || first.content_hash != hash {
            return None;
        }
        // The entry may have grown or been replaced since the plan was
        // made; its first `seq` records are the same whenever it still
        // holds the same record at `seq` (the hashes chain).
        let entry = self.sessions.get(session)?;
        if entry.journal.get(seq)?.content_hash != hash {
            return None;
        }
        let mut journal = entry.journal.clone();
        let head = journal.head();
        let overlap = usize::try_from(head - seq).ok()?;
        match read.get(overlap) {
            // The read reaches the cached head: it must be the same record.
            Some(at_head)
                if Some(&at_head.content_hash) != journal.last().map(|r| &r.content_hash) =>
            {
                return None;
            }
            Some(_) => {}
            // A read to the end that stops short of what this host saw
            // committed contradicts the cache.
            None if to_seq <= 0 => return None,
            None => return Some(journal),
        }
        journal.extend(read.drain(overlap + 1..)).ok()?;
        Some(journal)
    }

    /// Records this host appended (acknowledged by the store): extends the
    /// cached journal when they follow its head, else drops it.
    pub fn appended(&mut self, session: &str, records: &[LogRecord]) {
        let Some(entry) = self.sessions.get_mut(session) else {
            return;
        };
        if records.is_empty() || entry.journal.extend(records.iter().cloned()).is_err() {
            self.forget(session);
            return;
        }
        self.total += records.len();
        self.evict(session);
    }

    /// Seeds the cache of `child`, a fork of `parent` at `at_seq` about to
    /// be written, with the parent's cached journal when it ends exactly at
    /// `at_seq`: the child's records through `at_seq` are the parent's,
    /// verbatim, so its first read costs what its own rows cost instead of
    /// the whole prefix. The write's records then extend the seed
    /// ([`LogCache::appended`]); a failed write forgets it. True when
    /// seeded.
    pub fn seed_fork(&mut self, child: &str, parent: &str, at_seq: i64) -> bool {
        assert!(child != parent, "a fork's child is a new session");
        self.forget(child);
        let Some(entry) = self.sessions.get(parent) else {
            return false;
        };
        if at_seq <= 0 || entry.journal.head() != at_seq {
            return false;
        }
        let seed = entry.journal.clone();
        self.remember(child, &seed);
        true
    }

    /// Drops what is cached for `session`.
    pub fn forget(&mut self, session: &str) {
        if let Some(e) = self.sessions.remove(session) {
            self.total -= e.journal.len();
        }
    }

    fn remember(&mut self, session: &str, journal: &Journal) {
        if journal.is_empty() {
            self.forget(session);
            return;
        }
        // Keep the longer of what is cached and what was read: a read that
        // raced one of our own appends may be the shorter one.
        if let Some(e) = self.sessions.get(session)
            && e.journal.len() >= journal.len()
        {
            return;
        }
        self.forget(session);
        self.total += journal.len();
        self.sessions.insert(
            session.to_owned(),
            Entry {
                journal: journal.clone(),
            },
        );
        self.evict(session);
    }

    /// Drops sessions picked at random (never `keep`) until what is held
    /// besides the longest journal is within bounds.
    ///
    /// Not least recently used: a round-robin load over more sessions than
    /// fit (many sessions taking turns) makes LRU, like FIFO, drop exactly
    /// the session needed next, so every turn would reload its whole
    /// journal. A random victim keeps about budget/total of such turns
    /// hitting, under any access order. The generator is seeded, so a
    /// run is repeatable.
    fn evict(&mut self, keep: &str) {
        // The longest journal is looked for only when over the budget: this
        // runs after every append, and the scan is linear in sessions.
        while self.total > self.max_records && self.total - self.longest() > self.max_records {
            let longest = self.longest_session().map(str::to_owned);
            let spared = |k: &String, spare_longest: bool| {
                k.as_str() == keep || (spare_longest && Some(k) == longest.as_ref())
            };
            // The longest goes only when nothing else can.
            let spare_longest = self.sessions.keys().any(|k| !spared(k, true));
            let others = self.sessions.keys().filter(|k| !spared(k, spare_longest));
            let count = others.clone().count();
            if count == 0 {
                break;
            }
            let victim = others
                .clone()
                .nth(self.rng.usize(..count))
                .cloned()
                .expect("the pick is below the count");
            self.forget(&victim);
        }
        debug_assert!(
            self.total - self.longest() <= self.max_records || self.sessions.len() <= 1,
            "over budget by more than the longest journal"
        );
    }

    fn longest_session(&self) -> Option<&str> {
        self.sessions
            .iter()
            .max_by_key(|(_, e)| e.journal.len())
            .map(|(k, _)| k.as_str())
    }

    fn longest(&self) -> usize {
        self.sessions
            .values()
            .map(|e| e.journal.len())
            .max()
            .unwrap_or(0)
    }
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

    /// The records of a completed read through `to_seq`.
    fn got(c: Option<Completed>, to_seq: i64) -> Option<Vec<LogRecord>> {
        match c? {
            Completed::Journal(j) => Some(j.to_vec_through(to_seq)),
            Completed::NotAChain(raw) => Some(raw),
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
            got(c.complete("s", &ReadPlan::Full, 0, chain(3, "a")), 0),
            Some(chain(3, "a"))
        );
        let plan = c.plan("s", 0);
        assert_eq!(plan, from(3, "a3"));
        // Another writer appended 4 and 5 meanwhile.
        let tail = chain(5, "a")[2..].to_vec();
        assert_eq!(got(c.complete("s", &plan, 0, tail), 0), Some(chain(5, "a")));
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn a_changed_head_is_never_served_from_the_cache() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, 0, chain(3, "a"));
        let plan = c.plan("s", 0);
        // The store now holds a different record at seq 3.
        assert!(
            c.complete("s", &plan, 0, chain(4, "b")[2..].to_vec())
                .is_none()
        );
        assert_eq!(c.plan("s", 0), ReadPlan::Full);
        // An empty or shorter journal is a mismatch too.
        c.complete("s", &ReadPlan::Full, 0, chain(3, "a"));
        let plan = c.plan("s", 0);
        assert!(c.complete("s", &plan, 0, Vec::new()).is_none());
    }

    #[test]
    fn a_bounded_read_uses_the_cached_prefix_up_to_its_end() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, 0, chain(5, "a"));
        // The cache reaches past the bound: only the bound's record is read,
        // to check the prefix.
        let plan = c.plan("s", 3);
        assert_eq!(plan, from(3, "a3"));
        assert_eq!(
            got(c.complete("s", &plan, 3, chain(3, "a")[2..].to_vec()), 3),
            Some(chain(3, "a"))
        );
        // A shorter answer never shrinks what is cached.
        assert_eq!(c.len(), 5);
        // The bound lies past the cache: read from the cached head.
        let plan = c.plan("s", 7);
        assert_eq!(plan, from(5, "a5"));
        assert_eq!(
            got(c.complete("s", &plan, 7, chain(7, "a")[4..].to_vec()), 7),
            Some(chain(7, "a"))
        );
        // A changed record at the bound is a mismatch like any other.
        let plan = c.plan("s", 2);
        assert!(
            c.complete("s", &plan, 2, chain(2, "b")[1..].to_vec())
                .is_none()
        );
        assert_eq!(c.plan("s", 2), ReadPlan::Full);
    }

    #[test]
    fn own_appends_extend_only_a_matching_head() {
        let mut c = LogCache::new(100);
        c.complete("s", &ReadPlan::Full, 0, chain(2, "a"));
        c.appended("s", &chain(4, "a")[2..]);
        assert_eq!(c.len(), 4);
        // A gap (or a foreign link) drops the entry rather than guess.
        c.appended("s", &chain(6, "a")[5..]);
        assert_eq!(c.plan("s", 0), ReadPlan::Full);
        assert!(c.is_empty());
    }

    /// One turn of `session` (grown to `len` records so far): its read,
    /// then its own append. True when the read hit the cache.
    fn turn(c: &mut LogCache, session: &str, len: i64) -> bool {
        let plan = c.plan(session, 0);
        let hit = plan != ReadPlan::Full;
        let read = match &plan {
            ReadPlan::Full => chain(len, session),
            ReadPlan::From { seq, .. } => chain(len, session)[(*seq - 1) as usize..].to_vec(),
        };
        assert!(c.complete(session, &plan, 0, read).is_some());
        c.appended(session, &chain(len + 1, session)[len as usize..]);
        hit
    }

    #[test]
    fn sessions_taking_turns_round_robin_keep_hitting_when_not_all_fit() {
        // Ten sessions of ~20 records against a budget of 100: half fit.
        // LRU (or FIFO) would drop exactly the next session every time and
        // never hit.
        let mut c = LogCache::new(100);
        let names: Vec<String> = (0..10).map(|i| format!("s{i}-")).collect();
        let (mut hits, mut turns) = (0, 0);
        for round in 0..20 {
            for name in &names {
                let hit = turn(&mut c, name, 10 + round);
                if round > 0 {
                    turns += 1;
                    hits += usize::from(hit);
                }
                assert!(c.len() - c.longest() <= 100, "the budget holds");
            }
        }
        assert!(
            hits * 4 >= turns,
            "{hits} hits in {turns} turns: at least a quarter must hit"
        );
    }

    #[test]
    fn the_longest_journal_stays_beside_a_budget_of_others() {
        let mut c = LogCache::new(5);
        c.complete("a", &ReadPlan::Full, 0, chain(2, "a"));
        c.complete("b", &ReadPlan::Full, 0, chain(2, "b"));
        c.complete("c", &ReadPlan::Full, 0, chain(2, "c"));
        // The longest journal is not counted: 6 - 2 fits the budget of 5.
        assert_eq!(c.len(), 6);
        c.complete("x", &ReadPlan::Full, 0, chain(2, "x"));
        assert_eq!(c.len(), 6, "one of the others went");
        assert_ne!(c.plan("x", 0), ReadPlan::Full, "never the one just read");
        // A journal larger than the whole budget is kept beside at most a
        // budget's worth of others.
        c.complete("d", &ReadPlan::Full, 0, chain(9, "d"));
        assert_ne!(c.plan("d", 0), ReadPlan::Full);
        for other in ["e", "f", "g"] {
            c.complete(other, &ReadPlan::Full, 0, chain(2, other));
            assert_ne!(c.plan("d", 0), ReadPlan::Full, "the long one stays");
            assert!(c.len() - 9 <= 5);
        }
    }

    #[test]
    fn a_full_read_that_is_not_a_chain_comes_back_as_read_and_is_not_kept() {
        let mut c = LogCache::new(100);
        let mut broken = chain(3, "a");
        broken[2].prev_hash = "elsewhere".into();
        match c.complete("s", &ReadPlan::Full, 0, broken.clone()) {
            Some(Completed::NotAChain(raw)) => assert_eq!(raw, broken),
            other => panic!("not handed back as read: {other:?}"),
        }
        assert!(c.is_empty());
    }

    #[test]
    fn a_handed_out_journal_does_not_move_when_the_cache_grows() {
        let mut c = LogCache::new(100);
        let Some(Completed::Journal(snapshot)) = c.complete("s", &ReadPlan::Full, 0, chain(2, "a"))
        else {
            panic!("a chain is completed as a journal");
        };
        c.appended("s", &chain(4, "a")[2..]);
        assert_eq!(snapshot.to_vec(), chain(2, "a"));
        assert_eq!(snapshot.summary().head(), 2);
        // Our appends landed while a read from the old head was out: the
        // read's overlap with the cache is checked, its tail taken.
        let plan = from(2, "a2");
        let read = chain(5, "a")[1..].to_vec();
        assert_eq!(got(c.complete("s", &plan, 0, read), 0), Some(chain(5, "a")));
        let Some(Completed::Journal(j)) =
            c.complete("s", &from(5, "a5"), 0, chain(5, "a")[4..].to_vec())
        else {
            panic!("the cached head is served");
        };
        assert_eq!((j.head(), j.summary().head_hash()), (5, "a5"));
        // A read that disagrees with the cache where they overlap is not
        // served.
        let mut diverged = chain(6, "a")[3..].to_vec();
        diverged[1].content_hash = "other".into();
        assert!(c.complete("s", &from(4, "a4"), 0, diverged).is_none());
        assert!(c.is_empty());
    }

    #[test]
    fn a_fork_at_the_cached_head_starts_from_the_parents_journal() {
        let mut c = LogCache::new(1_000);
        let parent = chain(5, "p");
        assert!(
            c.complete("p", &ReadPlan::Full, 0, parent.clone())
                .is_some()
        );
        // Not at the cached head, or of an uncached parent: nothing seeded.
        assert!(!c.seed_fork("c", "p", 3));
        assert!(!c.seed_fork("c", "q", 5));
        assert!(matches!(c.plan("c", 0), ReadPlan::Full));
        // At the head: the child's read starts after the shared prefix, and
        // the write's marker extends it.
        assert!(c.seed_fork("c", "p", 5));
        let marker = LogRecord {
            seq: 6,
            prev_hash: parent[4].content_hash.clone(),
            content_hash: "c6".into(),
            ..LogRecord::default()
        };
        c.appended("c", std::slice::from_ref(&marker));
        assert_eq!(c.plan("c", 0), from(6, "c6"));
        // The parent is untouched.
        assert_eq!(c.plan("p", 0), from(5, &parent[4].content_hash));
        // A failed write forgets the seed.
        assert!(c.seed_fork("d", "p", 5));
        c.forget("d");
        assert!(matches!(c.plan("d", 0), ReadPlan::Full));
    }
}
