//! The run's change counter (`Store::run_version`): one read of the run row through its
//! `run_id` index. The schema's triggers keep the counter: every write to a run's rows
//! while its stored status is not 'running' gives it a value of the store-wide clock it
//! never had.

use rusqlite::{Connection, OptionalExtension};

use super::connection::Context;
use crate::model::{RunId, RunStatus};
use crate::store::{RunVersion, StoreError, StoreResult};

const READ: &str = "SELECT status, version FROM runs WHERE run_id = ?1";

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
