//! The figures of approval expiry and of the notification outbox.
//!
//! Invariant: the queued and oldest-age gauges are set only from the
//! outbox's own count (a store read), never kept by adding and
//! subtracting here, so several daemons on one journal all report the
//! journal's truth.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct NotifyMeter {
    expired: Counter,
    queued: Gauge,
    delivered: Counter,
    failed: Counter,
    oldest: Gauge,
}

impl NotifyMeter {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "approvals_expired",
            "Approval requests the host denied when their wait ran out",
            self.expired.clone(),
        );
        r.register(
            "notify_queued",
            "Notifications in the journal's outbox not yet delivered",
            self.queued.clone(),
        );
        r.register(
            "notify_delivered",
            "Notifications delivered (every --notify receiver answered 2xx)",
            self.delivered.clone(),
        );
        r.register(
            "notify_failed",
            "Notification delivery attempts that failed and will be retried",
            self.failed.clone(),
        );
        r.register(
            "notify_oldest_undelivered_seconds",
            "Age of the oldest notification not yet delivered (0 when none)",
            self.oldest.clone(),
        );
    }

    /// The host denied a request at its deadline.
    pub fn expired(&self) {
        self.expired.inc();
    }

    /// One notification was delivered to every receiver.
    pub fn delivered(&self) {
        self.delivered.inc();
    }

    /// One delivery attempt failed.
    pub fn failed(&self) {
        self.failed.inc();
    }

    /// The outbox as last read: `queued` rows, the oldest `age_secs` old.
    pub fn outbox(&self, queued: u64, age_secs: u64) {
        debug_assert!(queued > 0 || age_secs == 0, "an empty outbox has no age");
        self.queued.set(i64::try_from(queued).unwrap_or(i64::MAX));
        self.oldest.set(i64::try_from(age_secs).unwrap_or(i64::MAX));
    }
}
