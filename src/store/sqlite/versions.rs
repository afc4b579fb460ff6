//! The run's change counter (`Store::run_version`): one read of the run row through its
//! `run_id` index. Migration 9's triggers keep the counter for the rows of `runs`,
//! `run_scripts` and `checkpoint_answers`; the call and event transactions call [`touch`]
//! once instead of a trigger per row (migration 13).

use rusqlite::{Connection, OptionalExtension, Transaction};

use super::connection::Context;
use crate::model::{RunId, RunStatus};
use crate::store::{RunVersion, StoreError, StoreResult};

const READ: &str = "SELECT status, version FROM runs WHERE run_id = ?1";

/// The clock moves only for a run whose stored status is not 'running' (what the triggers'
/// `WHEN` said); for a running run this is one read of a row the fence read already cached.
const ADVANCE: &str = "UPDATE run_version_clock SET value = value + 1
     WHERE (SELECT status FROM runs WHERE run_key = ?1) IS NOT 'running'";
const TAKE: &str =
    "UPDATE runs SET version = (SELECT value FROM run_version_clock) WHERE run_key = ?1";

/// Gives run `run_key` a new version when it is not running, inside `transaction`: what
/// every write transaction to `calls`, `call_supersessions`, `events`, `event_blocks` and
/// `call_tallies` ends with. Called after the writes, so a status the same transaction
/// stored is the one it checks.
pub(super) fn touch(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
) -> StoreResult<()> {
    let doing = || format!("advance the version of run {run_id}");
    let advanced = transaction
        .prepare_cached(ADVANCE)
        .and_then(|mut statement| statement.execute([run_key]))
        .context(doing)?;
    if advanced > 0 {
        transaction
            .prepare_cached(TAKE)
            .and_then(|mut statement| statement.execute([run_key]))
            .context(doing)?;
    }
    Ok(())
}

pub(super) fn run_version(connection: &Connection, run_id: &RunId) -> StoreResult<RunVersion> {
    let doing = || format!("read the version of run {run_id}");
    let mut statement = connection.prepare_cached(READ).context(doing)?;
    let row: Option<(String, i64)> = statement
        .query_row([run_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .context(doing)?;
    let Some((status, version)) = row else {
        return Err(StoreError::UnknownRun(run_id.clone()));
    };
    let status = RunStatus::parse(&status).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "run {run_id}: column runs.status: unknown value {status:?}"
        ))
    })?;
    let version = u64::try_from(version).map_err(|_| {
        StoreError::Corrupt(format!(
            "run {run_id}: column runs.version: expected a non-negative integer, found {version}"
        ))
    })?;
    Ok(RunVersion { status, version })
}
