//! Delivering the outbox: claim due notices, POST each to every receiver,
//! settle it. At least once: a notice leaves the outbox only after every
//! receiver answered 2xx; a crash before that leaves its claim to lapse
//! and another pass (here or on another daemon) to send it again under
//! the same event id.
//!
//! Invariant: nothing here waits on a turn or holds anything a turn
//! needs; a receiver that never answers costs this task its timeout per
//! attempt and nothing else. Attempts are bounded: at most [`BATCH`]
//! notices in flight, each POST bounded by [`POST_TIMEOUT`].

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentsessions_journal::outbox::{Notice, NoticeClaim, NoticeKind, Outbox, Settle};
use agentsessions_journal::{JournalStore, StoreError};
use agentsessions_proto::v1::LogRecord;

use super::NotifySettings;
use super::body::{self, Context};
use super::sign;
use crate::metrics::NotifyMeter;

/// Notices claimed (and so in flight) per pass.
pub const BATCH: usize = 16;
/// How long one POST may take.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claim keeps other deliverers off a notice: past the longest
/// pass (every receiver timing out), so a live deliverer never loses one.
const CLAIM: Duration = Duration::from_secs(120);
/// Pause between looks at an empty outbox.
const IDLE: Duration = Duration::from_millis(200);
/// The first retry's delay; each later one doubles, up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(300);

/// The delay before attempt `attempts + 1`: exponential, capped, with up
/// to half of it again as jitter so receivers coming back are not hit by
/// every daemon's retries at once.
pub fn backoff(attempts: u32, jitter: f64) -> Duration {
    assert!((0.0..=1.0).contains(&jitter), "jitter is a fraction");
    let base = FIRST_DELAY
        .saturating_mul(1u32 << attempts.min(16))
        .min(MAX_DELAY);
    let delay = base + base.mul_f64(jitter / 2.0);
    debug_assert!(delay >= FIRST_DELAY && delay <= MAX_DELAY.mul_f64(1.5));
    delay
}

/// Delivers until `stop` turns true.
pub async fn run<S: JournalStore + Outbox + 'static>(
    store: Arc<S>,
    settings: NotifySettings,
    owner: String,
    meter: Option<NotifyMeter>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    assert!(!settings.urls.is_empty(), "started only with a receiver");
    let client = reqwest::Client::builder()
        .timeout(POST_TIMEOUT)
        .build()
        .expect("an HTTP client with rustls");
    match store.release_claims(&owner).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(n, %owner, "notify: claims of an earlier run released"),
        Err(e) => tracing::warn!(error = %e, "notify: releasing earlier claims failed"),
    }
    let me = Deliverer {
        store,
        settings,
        owner,
        meter,
        client,
    };
    loop {
        let worked = me.pass().await;
        if !worked {
            tokio::select! {
                _ = tokio::time::sleep(IDLE) => {}
                _ = stop.changed() => {}
            }
        }
        if *stop.borrow() {
            return;
        }
    }
}

struct Deliverer<S> {
    store: Arc<S>,
    settings: NotifySettings,
    owner: String,
    meter: Option<NotifyMeter>,
    client: reqwest::Client,
}

fn unix_nanos() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl<S: JournalStore + Outbox + 'static> Deliverer<S> {
    /// One claim and its deliveries; false when there was nothing to do.
    async fn pass(&self) -> bool {
        let now = unix_nanos();
        self.report(now).await;
        let claim = NoticeClaim {
            owner: self.owner.clone(),
            now,
            lease: i64::try_from(CLAIM.as_nanos()).expect("two minutes in ns"),
            limit: BATCH,
        };
        let claimed = match self.store.claim_notices(claim).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "notify: claiming from the outbox failed");
                return false;
            }
        };
        assert!(claimed.len() <= BATCH, "the store honours the limit");
        if claimed.is_empty() {
            return false;
        }
        let sends = claimed.iter().map(|n| self.deliver(n));
        futures_util::future::join_all(sends).await;
        true
    }

    /// Sets the queue gauges from the outbox itself.
    async fn report(&self, now: i64) {
        let Some(meter) = &self.meter else { return };
        if let Ok(stats) = self.store.outbox_stats().await {
            let age = stats.oldest_created.map_or(0, |at| {
                u64::try_from(now.saturating_sub(at) / 1_000_000_000).unwrap_or(0)
            });
            meter.outbox(stats.queued, if stats.queued == 0 { 0 } else { age });
        }
    }

    async fn deliver(&self, notice: &Notice) {
        let outcome = match self.body(notice).await {
            Ok(bytes) => self.post_all(notice, &bytes).await,
            Err(e) => Err(format!("reading the announced records: {e}")),
        };
        let settle = match outcome {
            Ok(()) => {
                if let Some(m) = &self.meter {
                    m.delivered();
                }
                Settle::Delivered
            }
            Err(error) => {
                if let Some(m) = &self.meter {
                    m.failed();
                }
                let delay = backoff(notice.attempts, fastrand::f64());
                tracing::info!(event = %notice.event_id, attempts = notice.attempts + 1,
                    retry_in = ?delay, %error, "notify: delivery failed");
                let due_at = unix_nanos()
                    .saturating_add(i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX));
                Settle::Retry { due_at, error }
            }
        };
        if let Err(e) = self
            .store
            .settle_notice(&self.owner, &notice.event_id, settle)
            .await
        {
            // The claim lapses and the notice goes again: at least once.
            tracing::warn!(event = %notice.event_id, error = %e, "notify: settling failed");
        }
    }

    /// The body for `notice`, from the records it announces.
    async fn body(&self, notice: &Notice) -> Result<Vec<u8>, StoreError> {
        let records = self.records(notice).await?;
        let project = match self.store.session_info(&notice.session).await {
            Ok(info) => info.meta.project,
            Err(StoreError::SessionNotFound { .. }) => String::new(),
            Err(e) => return Err(e),
        };
        let cx = Context {
            project,
            console: self.settings.console.clone(),
            include_arguments: self.settings.include_arguments,
        };
        let event = body::event(notice, &records, &cx);
        Ok(body::render(&event, self.settings.format))
    }

    /// The announced record and, for an approval, the call it gates: a
    /// gated call is journaled with its request, so a decision reads back
    /// from the record before its request.
    async fn records(&self, notice: &Notice) -> Result<Vec<LogRecord>, StoreError> {
        let mut records = self
            .store
            .read(&notice.session, notice.seq, notice.seq)
            .await?;
        let request_seq = match notice.kind {
            NoticeKind::ApprovalRequested => Some(notice.seq),
            NoticeKind::ApprovalDecided | NoticeKind::ApprovalExpired => records
                .first()
                .and_then(|r| r.event.as_ref())
                .and_then(agentsessions_machine::events::body::approval_result)
                .map(|d| d.request_seq),
            NoticeKind::TurnFailed => None,
        };
        if let Some(seq) = request_seq.filter(|s| *s > 1) {
            records.extend(self.store.read(&notice.session, seq - 1, seq - 1).await?);
        }
        Ok(records)
    }

    /// POSTs `bytes` to every receiver; Ok once all answered 2xx.
    async fn post_all(&self, notice: &Notice, bytes: &[u8]) -> Result<(), String> {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut failures = Vec::new();
        for url in &self.settings.urls {
            let mut req = self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(sign::EVENT_ID, &notice.event_id)
                .header(sign::TIMESTAMP, stamp.to_string());
            if let Some(secret) = &self.settings.secret {
                req = req.header(
                    sign::SIGNATURE,
                    sign::signature(secret.as_bytes(), stamp, bytes),
                );
            }
            match req.body(bytes.to_vec()).send().await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => failures.push(format!("{url}: {}", r.status())),
                Err(e) => failures.push(format!("{url}: {e}")),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_to_a_cap_with_bounded_jitter() {
        assert_eq!(backoff(0, 0.0), Duration::from_secs(1));
        assert_eq!(backoff(3, 0.0), Duration::from_secs(8));
        assert_eq!(backoff(3, 1.0), Duration::from_secs(12));
        assert_eq!(backoff(40, 0.0), MAX_DELAY, "capped, and no overflow");
        assert!(backoff(40, 1.0) <= MAX_DELAY.mul_f64(1.5));
    }
}
