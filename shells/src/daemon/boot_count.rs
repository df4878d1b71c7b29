//! Walks over every session through the host: the boot count of
//! `agentsessions_approvals_pending` (the sessions the journal leaves
//! waiting for a decision when the daemon starts), and the search for
//! approval deadlines this daemon did not arm itself.
//!
//! Invariant: the count only reads (the journal's session index and the
//! host's own GetSession); a decision the machine signals while it runs
//! outranks what it read (see [`Metrics::boot_count_started`]).

use std::sync::Arc;

use agentsessions_machine::vocab::{Caller, Request, Response};
use agentsessions_proto::v1::{ExecState, GetSessionRequest};

use super::driver::DriverHandle;
use crate::journal::{JournalStore, StaleScan};
use crate::metrics::Metrics;

/// Sessions looked at per step of the boot count.
const COUNT_PAGE: usize = 500;

/// Sets the approvals gauge from the journal: every session the machine
/// renders as AWAITING is counted, a page at a time, while the daemon
/// already serves (a decision signalled meanwhile outranks what the count
/// read; see [`Metrics::boot_count_started`]). A store failure ends the
/// count early and says so.
pub(super) async fn count_awaiting<S: JournalStore>(
    handle: DriverHandle,
    store: Arc<S>,
    metrics: Arc<Metrics>,
) {
    metrics.boot_count_started();
    let mut counted = 0usize;
    each_session(&handle, &*store, |uid, s| {
        if s.exec_state == ExecState::ExecAwaiting as i32 {
            metrics.counted_awaiting(uid);
            counted += 1;
        }
    })
    .await;
    metrics.boot_count_finished();
    tracing::debug!(counted, "approvals_pending counted from the journal");
}

/// Finds the approval deadlines of sessions this daemon did not park: at
/// boot (unless `booted`: the boot count's walk reads every session
/// already), then every `every` (`None`: no more). Each session is read
/// through the host, whose every read of a journal arms the deadline of a
/// pending request (the machine's `stages::expiry`).
pub(super) async fn find_deadlines<S: JournalStore>(
    handle: DriverHandle,
    store: Arc<S>,
    (booted, every): (bool, Option<std::time::Duration>),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut walk = !booted;
    loop {
        if walk {
            let seen = each_session(&handle, &*store, |_, _| {}).await;
            tracing::debug!(seen, "approval deadlines looked for");
        }
        walk = true;
        let Some(every) = every else { return };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Reads every session through the host, a page at a time, and shows each
/// to `visit`; returns how many `visit` saw. A store failure ends the walk
/// early and says so.
async fn each_session<S: JournalStore>(
    handle: &DriverHandle,
    store: &S,
    mut visit: impl FnMut(&str, &agentsessions_proto::v1::Session),
) -> usize {
    let mut after = String::new();
    let mut seen = 0usize;
    loop {
        let scan = StaleScan {
            after: after.clone(),
            before: i64::MAX,
            scan: COUNT_PAGE,
        };
        let page = match store.stale_sessions(scan).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "a walk over the sessions stopped early");
                return seen;
            }
        };
        for uid in &page.stale {
            let get = Request::GetSession(GetSessionRequest { uid: uid.clone() });
            if let Ok(Response::Session(s)) = handle.unary(Caller::Open, get).await {
                visit(uid, &s);
                seen += 1;
            }
        }
        if page.next.is_empty() {
            return seen;
        }
        assert!(page.next > after, "the scan moves forward");
        after = page.next;
    }
}
