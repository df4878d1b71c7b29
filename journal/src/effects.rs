//! Journal effects performed against a [`JournalStore`]: the translation
//! between the machine's store effects and outcomes and the store's API.

use agentsessions_machine::vocab::{
    EffectId, HarnessCheck, HarnessRow, Nanos, PutError, RegisterOutcome, SessionRow, StoreEffect,
    StoreFault, StoreOutcome,
};

use agentsessions_machine::journal::Journal;
use std::future::Future;
use std::task::{Context, Poll, Waker};

use crate::convert::{
    append_error_of, delete_error_of, fault_of, harness_row_of, meta_of, put_error_of, row_of,
};
use crate::{
    AppendBatch, DeleteSession, ForkBatch, JournalStore, ListHarnesses, ListSessions, StaleScan,
    StoreError,
};

pub fn text(e: StoreError) -> StoreFault {
    fault_of(&e)
}

/// [`perform_store`] against a store whose calls never wait (such as
/// [`crate::memory::InstantStore`]): the outcome, now.
pub fn perform_store_now<S: JournalStore>(
    store: &S,
    effect: StoreEffect,
) -> (EffectId, StoreOutcome) {
    let call = std::pin::pin!(perform_store(store, effect));
    match call.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(done) => done,
        Poll::Pending => panic!("a store whose calls never wait made a store effect wait"),
    }
}

/// An Append effect as the store's batch (`None` for any other effect):
/// the one translation the drive loop's in-place path and
/// [`perform_store`] share.
pub fn append_of(effect: StoreEffect) -> Option<(EffectId, AppendBatch)> {
    match effect {
        StoreEffect::Append {
            id,
            session,
            expected_last_seq,
            fence,
            events,
            compute_state,
            now,
            release,
        } => Some((
            id,
            AppendBatch {
                session,
                expected_last_seq,
                fence,
                events,
                compute_state,
                now_unix_nanos: now,
                release_lease: release,
            },
        )),
        _ => None,
    }
}

/// Performs one store effect against the store: the journal's own here,
/// rows and the registry in [`perform_rows`].
pub async fn perform_store<S: JournalStore>(
    store: &S,
    effect: StoreEffect,
) -> (EffectId, StoreOutcome) {
    match effect {
        append @ StoreEffect::Append { .. } => {
            let (id, batch) = append_of(append).expect("an append");
            let r = store.append(batch).await.map_err(append_error_of);
            (id, StoreOutcome::Appended(r))
        }
        StoreEffect::Fork {
            id,
            session,
            parent,
            at_seq,
            fence,
            events,
            compute_state,
            now,
        } => {
            let batch = ForkBatch {
                child: session,
                parent,
                at_seq,
                fence,
                events,
                compute_state,
                now_unix_nanos: now,
            };
            let r = store.fork(batch).await.map_err(append_error_of);
            (id, StoreOutcome::Appended(r))
        }
        StoreEffect::MintFence {
            id,
            session,
            now,
            lease,
        } => {
            let r = store.mint_fence(&session, now, lease.as_ref()).await;
            (id, StoreOutcome::Fence(r.map_err(text)))
        }
        StoreEffect::HoldLease {
            id,
            session,
            owner,
            fence,
            ttl,
            now,
        } => {
            let r = store.hold_lease(&session, &owner, fence, ttl, now).await;
            (id, StoreOutcome::LeaseHeld(r.map_err(text)))
        }
        StoreEffect::ReadLog {
            id,
            session,
            from_seq,
            to_seq,
            pace: None,
        } => (
            id,
            StoreOutcome::Log(store.read(&session, from_seq, to_seq).await.map_err(text)),
        ),
        // A paced page: whoever performs it has waited for its client.
        StoreEffect::ReadLog {
            id,
            session,
            from_seq,
            to_seq,
            pace: Some(pace),
        } => {
            let read = store.read_bounded(&session, from_seq, to_seq, pace.max_bytes);
            (id, StoreOutcome::Log(read.await.map_err(text)))
        }
        StoreEffect::ReadJournal { id, session } => {
            let read = store.read(&session, 1, 0).await.map_err(text);
            (id, StoreOutcome::Journal(read.map(Journal::from_records)))
        }
        rows => perform_rows(store, rows).await,
    }
}

/// The session-row, retention and registry effects of [`perform_store`].
async fn perform_rows<S: JournalStore>(store: &S, effect: StoreEffect) -> (EffectId, StoreOutcome) {
    match effect {
        StoreEffect::GetSession { id, session } => {
            let r = match store.session_info(&session).await {
                Ok(info) => row_of(info)
                    .map(Some)
                    .map_err(|e| StoreFault::permanent(e.to_string())),
                Err(StoreError::SessionNotFound { .. }) => Ok(None),
                Err(e) => Err(fault_of(&e)),
            };
            (id, StoreOutcome::Session(r))
        }
        StoreEffect::PutSession {
            id,
            row,
            check,
            now,
        } => (
            id,
            StoreOutcome::Put(put_session(store, &row, check, now).await),
        ),
        StoreEffect::ListSessions {
            id,
            project,
            page_size,
            after,
        } => {
            let page = list_sessions(store, project, page_size, after).await;
            (id, StoreOutcome::SessionPage(page))
        }
        StoreEffect::DeleteSession {
            id,
            session,
            expected_last_seq,
            now,
            principal,
        } => {
            let req = DeleteSession {
                uid: session,
                expected_last_seq,
                principal,
                now_unix_nanos: now,
            };
            let r = store.delete_session(req).await;
            (
                id,
                StoreOutcome::Deleted(r.map(|t| t.records).map_err(delete_error_of)),
            )
        }
        StoreEffect::StaleSessions {
            id,
            after,
            before,
            scan,
        } => {
            let scan = StaleScan {
                after,
                before,
                scan: scan.max(1),
            };
            let page = store.stale_sessions(scan).await;
            (
                id,
                StoreOutcome::Stale(page.map(|p| (p.stale, p.next)).map_err(text)),
            )
        }
        StoreEffect::GetHarnessRow { id, name } => (
            id,
            StoreOutcome::HarnessRow(harness_row(store, &name).await),
        ),
        StoreEffect::ListHarnessRows {
            id,
            after,
            limit,
            include_retired,
        } => {
            let req = ListHarnesses {
                after,
                limit: limit.max(1),
                include_retired,
            };
            let rows = store.list_harnesses(req).await.map_err(text);
            let rows = rows.map(|rows| rows.into_iter().map(harness_row_of).collect());
            (id, StoreOutcome::HarnessRows(rows))
        }
        StoreEffect::RegisterHarnessRow { id, row, now } => (
            id,
            StoreOutcome::Registered(register(store, row, now).await),
        ),
        StoreEffect::RetireHarnessRow {
            id,
            name,
            reason,
            now,
        } => {
            let r = store
                .retire_harness(&name, &reason, now)
                .await
                .map(harness_row_of)
                .map_err(put_error_of);
            (id, StoreOutcome::Retired(r))
        }
        StoreEffect::ReserveHarnessNames { id, names, now } => {
            let r = store
                .reserve_harness_names(names, now)
                .await
                .map_err(put_error_of);
            (id, StoreOutcome::Reserved(r))
        }
        journal => unreachable!("{} is a journal effect", journal.name()),
    }
}

async fn put_session<S: JournalStore>(
    store: &S,
    row: &SessionRow,
    check: Option<HarnessCheck>,
    now: Nanos,
) -> Result<(), PutError> {
    let meta = meta_of(row);
    match check {
        None => store
            .put_session(meta, now)
            .await
            .map_err(|e| PutError::Failed(fault_of(&e))),
        Some(check) => {
            let registered = check == HarnessCheck::Registered;
            store
                .put_session_on_active_harness(meta, registered, now)
                .await
                .map_err(put_error_of)
        }
    }
}

async fn list_sessions<S: JournalStore>(
    store: &S,
    project: String,
    page_size: usize,
    after: Option<(Nanos, String)>,
) -> Result<(Vec<SessionRow>, bool), StoreFault> {
    let req = ListSessions {
        project,
        page_size,
        page_token: after
            .map(|(t, u)| crate::page_token::encode(t, &u))
            .unwrap_or_default(),
    };
    let page = store.list_sessions(req).await.map_err(text)?;
    let more = !page.next_page_token.is_empty();
    let rows = page.sessions.into_iter().map(row_of);
    let rows = rows
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreFault::permanent(e.to_string()))?;
    Ok((rows, more))
}

async fn register<S: JournalStore>(
    store: &S,
    row: HarnessRow,
    now: Nanos,
) -> Result<(HarnessRow, RegisterOutcome), PutError> {
    let reg = crate::HarnessRegistration {
        name: row.name,
        uid: row.uid,
        spec: row.spec,
        spec_digest: row.spec_digest,
    };
    let (row, outcome) = store
        .register_harness(reg, now)
        .await
        .map_err(put_error_of)?;
    let outcome = match outcome {
        crate::RegisterOutcome::Created => RegisterOutcome::Created,
        crate::RegisterOutcome::Unchanged => RegisterOutcome::Unchanged,
        crate::RegisterOutcome::Reactivated => RegisterOutcome::Reactivated,
    };
    Ok((harness_row_of(row), outcome))
}

async fn harness_row<S: JournalStore>(
    store: &S,
    name: &str,
) -> Result<Option<HarnessRow>, StoreFault> {
    match store.harness(name).await {
        Ok(row) => Ok(Some(harness_row_of(row))),
        Err(crate::RegistryError::NotFound { .. }) => Ok(None),
        Err(crate::RegistryError::Failed(e)) => Err(fault_of(&e)),
        Err(e) => Err(StoreFault::permanent(e.to_string())),
    }
}
