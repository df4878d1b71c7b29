//! The harness registry's statements behind [`crate::PgJournal`],
//! mirroring `sqlite/src/write_ops.rs`: the registry's rules
//! (`agentsessions_journal::rules`) decide, these read and write.
//!
//! Invariant: a registration, a reservation and a session checked against
//! the registry each run in one transaction (a retirement in one
//! statement), so the rule decides from the rows it then writes over.

use agentsessions_journal::columns::harness_of;
use agentsessions_journal::rules;
use agentsessions_journal::{
    HarnessRegistration, HarnessRow, HarnessState, ListHarnesses, RegisterOutcome, RegistryError,
    SessionMeta, StoreError,
};
use tokio_postgres::{Client, GenericClient};

use super::{PgRow, commit, put_session};
use crate::backend;

const HARNESS_COLUMNS: &str =
    "name, uid, spec, spec_digest, state, retire_reason, retired_at, created_at, updated_at";

pub(crate) async fn harness_row<C: GenericClient>(
    c: &C,
    name: &str,
) -> Result<Option<HarnessRow>, StoreError> {
    let sql = format!("SELECT {HARNESS_COLUMNS} FROM harnesses WHERE name = $1");
    c.query_opt(&sql, &[&name])
        .await
        .map_err(backend)?
        .map(|r| harness_of(&PgRow(&r)))
        .transpose()
}

pub(crate) async fn list_harnesses<C: GenericClient>(
    c: &C,
    req: &ListHarnesses,
) -> Result<Vec<HarnessRow>, StoreError> {
    req.check()?;
    let sql = format!(
        "SELECT {HARNESS_COLUMNS} FROM harnesses
         WHERE name > $1 AND ($2 OR state = 'active') ORDER BY name LIMIT $3"
    );
    let limit = i64::try_from(req.limit).unwrap_or(i64::MAX);
    c.query(&sql, &[&req.after, &req.include_retired, &limit])
        .await
        .map_err(backend)?
        .iter()
        .map(|r| harness_of(&PgRow(r)))
        .collect()
}

async fn is_reserved<C: GenericClient>(c: &C, name: &str) -> Result<bool, StoreError> {
    Ok(c.query_opt(
        "SELECT 1 FROM reserved_harness_names WHERE name = $1",
        &[&name],
    )
    .await
    .map_err(backend)?
    .is_some())
}

pub(crate) async fn register_harness(
    c: &mut Client,
    reg: &HarnessRegistration,
    now: i64,
) -> Result<(HarnessRow, RegisterOutcome), RegistryError> {
    reg.check()?;
    let tx = c.transaction().await.map_err(backend)?;
    let reserved = is_reserved(&tx, &reg.name).await?;
    // Insert-if-absent first, so two registrations of one name serialize
    // on the row; what the rule decides from is the row as it was.
    let inserted = !reserved
        && tx
            .execute(
                "INSERT INTO harnesses(name, uid, spec, spec_digest, state, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, 'active', $5, $5) ON CONFLICT (name) DO NOTHING",
                &[&reg.name, &reg.uid, &reg.spec, &reg.spec_digest, &now],
            )
            .await
            .map_err(backend)?
            == 1;
    let existing = if inserted || reserved {
        None
    } else {
        let sql = format!("SELECT {HARNESS_COLUMNS} FROM harnesses WHERE name = $1 FOR UPDATE");
        let row = tx.query_one(&sql, &[&reg.name]).await.map_err(backend)?;
        Some(harness_of(&PgRow(&row))?)
    };
    let outcome = rules::register(reg, reserved, existing.as_ref())?;
    assert_eq!(inserted, outcome == RegisterOutcome::Created);
    if outcome == RegisterOutcome::Reactivated {
        tx.execute(
            "UPDATE harnesses SET state = 'active', retire_reason = '', retired_at = 0, updated_at = $2
             WHERE name = $1",
            &[&reg.name, &now],
        )
        .await
        .map_err(backend)?;
    }
    let row = harness_row(&tx, &reg.name)
        .await?
        .ok_or_else(|| StoreError::Corrupt("registered row vanished".into()))?;
    commit(tx).await?;
    debug_assert_eq!(row.state, HarnessState::Active);
    Ok((row, outcome))
}

pub(crate) async fn retire_harness<C: GenericClient>(
    c: &C,
    name: &str,
    reason: &str,
    now: i64,
) -> Result<HarnessRow, RegistryError> {
    rules::check_retire(name)?;
    // Only an active row changes, so a repeat keeps the first time and
    // reason (`rules::retire`).
    c.execute(
        "UPDATE harnesses SET state = 'retired', retire_reason = $2, retired_at = $3, updated_at = $3
         WHERE name = $1 AND state = 'active'",
        &[&name, &reason, &now],
    )
    .await
    .map_err(backend)?;
    harness_row(c, name)
        .await?
        .ok_or_else(|| RegistryError::NotFound {
            name: name.to_owned(),
        })
}

pub(crate) async fn reserve_harness_names(
    c: &mut Client,
    names: &[String],
    now: i64,
) -> Result<(), RegistryError> {
    let tx = c.transaction().await.map_err(backend)?;
    for name in names {
        rules::check_reservation(name, harness_row(&tx, name).await?.is_some())?;
    }
    for name in names {
        tx.execute(
            "INSERT INTO reserved_harness_names(name, reserved_at) VALUES ($1, $2)
             ON CONFLICT (name) DO NOTHING",
            &[name, &now],
        )
        .await
        .map_err(backend)?;
    }
    commit(tx).await?;
    Ok(())
}

pub(crate) async fn put_session_on_active_harness(
    c: &mut Client,
    meta: &SessionMeta,
    registered: bool,
    now: i64,
    default_project: &str,
) -> Result<(), RegistryError> {
    let tx = c.transaction().await.map_err(backend)?;
    let sql = format!("SELECT {HARNESS_COLUMNS} FROM harnesses WHERE name = $1 FOR SHARE");
    let row = tx
        .query_opt(&sql, &[&meta.harness])
        .await
        .map_err(backend)?
        .map(|r| harness_of(&PgRow(&r)))
        .transpose()?;
    rules::session_harness(&meta.harness, registered, row.as_ref())?;
    put_session(&tx, meta, now, default_project).await?;
    commit(tx).await?;
    Ok(())
}
