//! The queries the pending gauge and the housekeeping sweep make, each one statement: the
//! run counts by status, and the terminal runs last updated before a time. Neither has an
//! index of its own (an embedded store is one host's, and small next to a shared one): the
//! count reads the `runs` table once, and so does the listing, instead of decoding every
//! run's summary as the trait's defaults would.

use rusqlite::Connection;

use super::connection::Context;
use super::rows::stored_run_id;
use crate::model::{RunId, RunStatus};
use crate::store::{RunCounts, StoreError, StoreResult};

pub(super) fn counts(connection: &Connection) -> StoreResult<RunCounts> {
    let doing = || "count the runs by status".to_owned();
    let mut statement = connection
        .prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")
        .context(doing)?;
    let mut rows = statement.query([]).context(doing)?;
    let mut counts = RunCounts::default();
    while let Some(row) = rows.next().context(doing)? {
        let status: String = row.get(0).context(doing)?;
        let count: i64 = row.get(1).context(doing)?;
        let status = RunStatus::parse(&status).ok_or_else(|| {
            StoreError::Corrupt(format!("column runs.status: unknown value {status:?}"))
        })?;
        counts.add(status, u64::try_from(count).unwrap_or_default());
    }
    Ok(counts)
}

pub(super) fn terminal_before(
    connection: &Connection,
    before_ms: i64,
    limit: u32,
) -> StoreResult<Vec<RunId>> {
    let doing = || "list the runs that finished before a time".to_owned();
    let mut statement = connection
        .prepare_cached(
            "SELECT run_id FROM runs
             WHERE status IN ('completed', 'failed', 'aborted') AND updated_at < ?1
             ORDER BY updated_at, run_id LIMIT ?2",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![before_ms, limit])
        .context(doing)?;
    let mut run_ids = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        run_ids.push(stored_run_id(row)?);
    }
    Ok(run_ids)
}
