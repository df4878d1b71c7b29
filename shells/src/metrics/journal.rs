//! The journal's metrics, handed to a store so its writer can time commits
//! where they happen. Cloning shares the series.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Commit timings and batch sizes of one journal.
#[derive(Debug, Clone)]
pub struct JournalMeter {
    append: Histogram,
    commit: Histogram,
    group_size: Histogram,
    in_place: Counter,
    reopens: Counter,
    commit_unknown: Family<OutcomeLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

impl Default for JournalMeter {
    fn default() -> Self {
        Self {
            append: Histogram::new(super::latency_buckets()),
            commit: Histogram::new(super::latency_buckets()),
            // 1, 2, 4, … 512 appends per commit.
            group_size: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            in_place: Counter::default(),
            reopens: Counter::default(),
            commit_unknown: Family::default(),
        }
    }
}

impl JournalMeter {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "journal_append_duration_seconds",
            "From an append being queued to it being durable",
            self.append.clone(),
        );
        r.register(
            "journal_commit_duration_seconds",
            "One commit (a group of appends) from BEGIN to a durable COMMIT",
            self.commit.clone(),
        );
        r.register(
            "journal_group_commit_size",
            "Appends per successful commit",
            self.group_size.clone(),
        );
        r.register(
            "journal_commits_in_place",
            "Commits made on the caller's thread while the writer was idle",
            self.in_place.clone(),
        );
        r.register(
            "journal_reopens",
            "Times the journal came back after being down (new connections or handle)",
            self.reopens.clone(),
        );
        r.register(
            "journal_commit_unknown",
            "Writes whose COMMIT answer was lost, by what reading them back found (committed, not_committed, unreadable)",
            self.commit_unknown.clone(),
        );
    }

    /// One successful commit of `appends` appends that took `took`, made
    /// in place (on the caller's thread) or by the writer.
    pub fn committed(&self, appends: usize, took: Duration, in_place: bool) {
        debug_assert!(appends > 0, "a commit carries at least one append");
        self.group_size.observe(appends as f64);
        self.commit.observe(took.as_secs_f64());
        if in_place {
            self.in_place.inc();
        }
    }

    /// One append, `waited` from being queued to being durable.
    pub fn appended(&self, waited: Duration) {
        self.append.observe(waited.as_secs_f64());
    }
}

impl agentsessions_journal::CommitMeter for JournalMeter {
    fn committed(&self, appends: usize, took: Duration, in_place: bool) {
        JournalMeter::committed(self, appends, took, in_place);
    }

    fn appended(&self, waited: Duration) {
        JournalMeter::appended(self, waited);
    }

    fn reopened(&self) {
        self.reopens.inc();
    }

    fn commit_unknown(&self, outcome: agentsessions_journal::UnknownOutcome) {
        let labels = OutcomeLabels {
            outcome: outcome.as_str(),
        };
        self.commit_unknown.get_or_create(&labels).inc();
    }
}
