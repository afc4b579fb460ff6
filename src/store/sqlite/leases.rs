//! The run's lease, kept in the `lease_*` columns of its `runs` row: reading it, the
//! compare-and-swap that hands it over, the renewal of its expiry and its release. The fence
//! check of every execution write reads the same `lease_token` column (`rows.rs`).

use rusqlite::{Connection, ToSql, Transaction};

use super::connection::{Context, write_transaction};
use super::rows::{RowReader, run_key, to_sql_integer};
use crate::model::{Lease, RunId};
use crate::store::{StoreError, StoreResult};

/// The lease columns of a lease, converted once so admission and the CAS bind the same thing.
pub(super) struct LeaseRow<'a> {
    lease: &'a Lease,
    /// `proc_start` as a SQLite integer.
    proc_start: i64,
}

impl<'a> LeaseRow<'a> {
    pub(super) fn new(lease: &'a Lease) -> StoreResult<LeaseRow<'a>> {
        Ok(LeaseRow {
            lease,
            proc_start: to_sql_integer(lease.proc_start, "lease process start time")?,
        })
    }

    pub(super) fn parameters(&self) -> [(&'static str, &dyn ToSql); 8] {
        [
            (":lease_token", &self.lease.token),
            (":lease_owner_id", &self.lease.owner_id),
            (":lease_pid", &self.lease.pid),
            (":lease_proc_start", &self.proc_start),
            (":lease_acquired_at", &self.lease.acquired_at),
            (":lease_boot_id", &self.lease.boot_id),
            (":lease_host", &self.lease.host),
            (":lease_expires_at", &self.lease.expires_at),
        ]
    }
}

pub(super) fn lease(connection: &Connection, run_id: &RunId) -> StoreResult<Option<Lease>> {
    let doing = || format!("read the lease of run {run_id}");
    let mut statement = connection
        .prepare_cached(
            "SELECT lease_token, lease_owner_id, lease_pid, lease_proc_start,
                    lease_acquired_at, lease_boot_id, lease_expires_at, lease_host
             FROM runs WHERE run_id = ?1",
        )
        .context(doing)?;
    let mut rows = statement.query([run_id.as_str()]).context(doing)?;
    let row = rows
        .next()
        .context(doing)?
        .ok_or_else(|| StoreError::UnknownRun(run_id.clone()))?;
    let reader = RowReader::new(row, run_id, "runs");
    let Some(token) = reader.get::<Option<String>>("lease_token")? else {
        return Ok(None);
    };
    let owner_id: Option<String> = reader.get("lease_owner_id")?;
    let pid: Option<u32> = reader.get("lease_pid")?;
    let proc_start = reader.optional_unsigned("lease_proc_start")?;
    let acquired_at: Option<i64> = reader.get("lease_acquired_at")?;
    // The lease columns are always written together, by one statement; the boot id and the
    // expiry may be NULL in a held lease.
    match (owner_id, pid, proc_start, acquired_at) {
        (Some(owner_id), Some(pid), Some(proc_start), Some(acquired_at)) => Ok(Some(Lease {
            owner_id,
            pid,
            proc_start,
            boot_id: reader.get("lease_boot_id")?,
            host: reader.get("lease_host")?,
            token,
            acquired_at,
            expires_at: reader.get("lease_expires_at")?,
        })),
        _ => Err(reader.corrupt("lease_token", "set while other lease columns are empty")),
    }
}

pub(super) fn acquire(
    connection: &mut Connection,
    run_id: &RunId,
    expected: Option<&str>,
    lease: &Lease,
) -> StoreResult<bool> {
    let doing = || format!("acquire the lease of run {run_id}");
    let lease_row = LeaseRow::new(lease)?;
    let transaction = write_transaction(connection, doing)?;
    let run_key = run_key(&transaction, run_id)?;
    let mut parameters: Vec<(&str, &dyn ToSql)> =
        vec![(":run_key", &run_key), (":expected", &expected)];
    parameters.extend(lease_row.parameters());
    // `IS` compares NULL with NULL as equal, so `expected: None` means "no lease now".
    let installed = transaction
        .prepare_cached(
            "UPDATE runs SET lease_token = :lease_token, lease_owner_id = :lease_owner_id,
                 lease_pid = :lease_pid, lease_proc_start = :lease_proc_start,
                 lease_acquired_at = :lease_acquired_at, lease_boot_id = :lease_boot_id,
                 lease_expires_at = :lease_expires_at, lease_host = :lease_host
             WHERE run_key = :run_key AND lease_token IS :expected",
        )
        .and_then(|mut statement| statement.execute(parameters.as_slice()))
        .context(doing)?;
    transaction.commit().context(doing)?;
    Ok(installed == 1)
}

pub(super) fn renew(
    connection: &mut Connection,
    run_id: &RunId,
    token: &str,
    until: i64,
) -> StoreResult<()> {
    let doing = || format!("renew the lease of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = run_key(&transaction, run_id)?;
    let renewed = transaction
        .prepare_cached(
            "UPDATE runs SET lease_expires_at = ?1 WHERE run_key = ?2 AND lease_token = ?3",
        )
        .and_then(|mut statement| statement.execute(rusqlite::params![until, run_key, token]))
        .context(doing)?;
    if renewed == 0 {
        return Err(StoreError::Fenced(run_id.clone()));
    }
    transaction.commit().context(doing)
}

pub(super) fn release(connection: &mut Connection, run_id: &RunId, token: &str) -> StoreResult<()> {
    let doing = || format!("release the lease of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = run_key(&transaction, run_id)?;
    release_in(&transaction, run_key, run_id, token)?;
    transaction.commit().context(doing)
}

/// [`release`] of the run `run_key` inside `transaction`.
pub(super) fn release_in(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    token: &str,
) -> StoreResult<()> {
    transaction
        .prepare_cached(
            "UPDATE runs SET lease_token = NULL, lease_owner_id = NULL, lease_pid = NULL,
                 lease_proc_start = NULL, lease_acquired_at = NULL, lease_boot_id = NULL,
                 lease_expires_at = NULL, lease_host = NULL
             WHERE run_key = ?1 AND lease_token = ?2",
        )
        .and_then(|mut statement| statement.execute(rusqlite::params![run_key, token]))
        .context(|| format!("release the lease of run {run_id}"))?;
    Ok(())
}
