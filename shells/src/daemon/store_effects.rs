//! Journal effects performed against a [`JournalStore`]: the translation
//! between the machine's store effects and outcomes and the store's API.

use agentsessions_machine::host::{EffectId, StoreEffect, StoreOutcome};

use super::convert::{append_error_of, harness_row_of, meta_of, put_error_of, row_of};
use crate::journal::{AppendBatch, JournalStore, ListHarnesses, ListSessions, StoreError};

pub(super) fn text(e: StoreError) -> String {
    e.to_string()
}

/// Performs one journal effect against the store.
pub(super) async fn perform_store<S: JournalStore>(
    store: &S,
    effect: StoreEffect,
) -> (EffectId, StoreOutcome) {
    match effect {
        StoreEffect::Append {
            id,
            session,
            expected_last_seq,
            fence,
            events,
            compute_state,
            now,
        } => {
            let batch = AppendBatch {
                session,
                expected_last_seq,
                fence,
                events,
                compute_state,
                now_unix_nanos: now,
            };
            let r = store.append(batch).await.map_err(append_error_of);
            (id, StoreOutcome::Appended(r))
        }
        StoreEffect::MintFence { id, session, now } => (
            id,
            StoreOutcome::Fence(store.mint_fence(&session, now).await.map_err(text)),
        ),
        StoreEffect::ReadLog {
            id,
            session,
            from_seq,
            to_seq,
        } => (
            id,
            StoreOutcome::Log(store.read(&session, from_seq, to_seq).await.map_err(text)),
        ),
        StoreEffect::GetSession { id, session } => {
            let r = match store.session_info(&session).await {
                Ok(info) => row_of(info).map(Some).map_err(|e| e.to_string()),
                Err(StoreError::SessionNotFound { .. }) => Ok(None),
                Err(e) => Err(e.to_string()),
            };
            (id, StoreOutcome::Session(r))
        }
        StoreEffect::PutSession {
            id,
            row,
            check,
            now,
        } => {
            let meta = meta_of(&row);
            let r = match check {
                None => store
                    .put_session(meta, now)
                    .await
                    .map_err(|e| agentsessions_machine::host::PutError::Failed(e.to_string())),
                Some(check) => {
                    let registered = check == agentsessions_machine::host::HarnessCheck::Registered;
                    store
                        .put_session_on_active_harness(meta, registered, now)
                        .await
                        .map_err(put_error_of)
                }
            };
            (id, StoreOutcome::Put(r))
        }
        StoreEffect::ListSessions {
            id,
            project,
            page_size,
            after,
        } => {
            let req = ListSessions {
                project,
                page_size,
                page_token: after
                    .map(|(t, u)| crate::journal::page_token::encode(t, &u))
                    .unwrap_or_default(),
            };
            let r = match store.list_sessions(req).await {
                Ok(page) => page
                    .sessions
                    .into_iter()
                    .map(row_of)
                    .collect::<Result<Vec<_>, _>>()
                    .map(|rows| (rows, !page.next_page_token.is_empty()))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            (id, StoreOutcome::SessionPage(r))
        }
        StoreEffect::GetHarnessRow { id, name } => {
            let r = match store.harness(&name).await {
                Ok(row) => Ok(Some(harness_row_of(row))),
                Err(crate::journal::RegistryError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.to_string()),
            };
            (id, StoreOutcome::HarnessRow(r))
        }
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
            let r = store
                .list_harnesses(req)
                .await
                .map(|rows| rows.into_iter().map(harness_row_of).collect())
                .map_err(text);
            (id, StoreOutcome::HarnessRows(r))
        }
        StoreEffect::RegisterHarnessRow { id, row, now } => {
            let reg = crate::journal::HarnessRegistration {
                name: row.name,
                uid: row.uid,
                spec: row.spec,
                spec_digest: row.spec_digest,
            };
            let r = store
                .register_harness(reg, now)
                .await
                .map(|(row, outcome)| {
                    use agentsessions_machine::host::RegisterOutcome as O;
                    let outcome = match outcome {
                        crate::journal::RegisterOutcome::Created => O::Created,
                        crate::journal::RegisterOutcome::Unchanged => O::Unchanged,
                        crate::journal::RegisterOutcome::Reactivated => O::Reactivated,
                    };
                    (harness_row_of(row), outcome)
                })
                .map_err(put_error_of);
            (id, StoreOutcome::Registered(r))
        }
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
    }
}
