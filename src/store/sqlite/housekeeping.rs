//! The queries the pending gauge, the housekeeping sweep and the timer loop make, each one
//! statement: the run counts by status, the terminal runs last updated before a time, and the
//! paused runs whose automatic resume is due (over its partial index). The first two have no
//! index of their own (an embedded store is one host's, and small next to a shared one): the
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

pub(super) fn resumes_due(
    connection: &Connection,
    until_ms: i64,
    limit: u32,
) -> StoreResult<Vec<(RunId, i64)>> {
    let doing = || "list the runs whose automatic resume is due".to_owned();
    let mut statement = connection
        .prepare_cached(
            "SELECT run_id, resume_due_at FROM runs
             WHERE resume_due_at IS NOT NULL AND resume_due_at <= ?1 AND status = 'paused'
             ORDER BY resume_due_at, run_id LIMIT ?2",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![until_ms, limit])
        .context(doing)?;
    let mut due = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let at: i64 = row.get("resume_due_at").context(doing)?;
        due.push((stored_run_id(row)?, at));
    }
    Ok(due)
}
