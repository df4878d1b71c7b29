//! The boot count of `agentsessions_approvals_pending`: the sessions the
//! journal leaves waiting for a decision when the daemon starts.
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
    let mut after = String::new();
    let mut counted = 0usize;
    loop {
        let scan = StaleScan {
            after: after.clone(),
            before: i64::MAX,
            scan: COUNT_PAGE,
        };
        let page = match store.stale_sessions(scan).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "approvals_pending: boot count stopped early");
                break;
            }
        };
        for uid in &page.stale {
            let get = Request::GetSession(GetSessionRequest { uid: uid.clone() });
            if let Ok(Response::Session(s)) = handle.unary(Caller::Open, get).await
                && s.exec_state == ExecState::ExecAwaiting as i32
            {
                metrics.counted_awaiting(uid);
                counted += 1;
            }
        }
        if page.next.is_empty() {
            break;
        }
        assert!(page.next > after, "the scan moves forward");
        after = page.next;
    }
    metrics.boot_count_finished();
    tracing::debug!(counted, "approvals_pending counted from the journal");
}
