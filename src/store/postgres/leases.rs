//! The run's lease, kept in the `lease_*` columns of its `runs` row: reading it, the
//! compare-and-swap that hands it over (one `UPDATE … WHERE lease_token IS NOT DISTINCT FROM
//! $expected`, atomic on its own: of two replicas expecting the same token one updates the
//! row, the other then sees the new token and updates nothing), the renewal and the release,
//! each one conditional statement. The database's clock answers `clock_ms`.

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::types::ToSql;

use super::connection::{Context, execute, query_one, query_opt};
use super::rows::{RowReader, find_run_key, to_bigint};
use crate::model::{Lease, RunId};
use crate::store::{StoreError, StoreResult};

/// The lease columns of a lease, converted once so admission and the CAS bind the same thing,
/// in the order `lease_token, lease_owner_id, lease_pid, lease_proc_start,
/// lease_acquired_at, lease_boot_id, lease_expires_at`.
pub(super) struct LeaseRow<'a> {
    lease: &'a Lease,
    /// `pid` as a `BIGINT`.
    pid: i64,
    /// `proc_start` as a `BIGINT`.
    proc_start: i64,
}

impl<'a> LeaseRow<'a> {
    pub(super) fn new(lease: &'a Lease) -> StoreResult<LeaseRow<'a>> {
        Ok(LeaseRow {
            lease,
            pid: i64::from(lease.pid),
            proc_start: to_bigint(lease.proc_start, "lease process start time")?,
        })
    }

    /// The holder's host: bound after the other lease columns, as `lease_host`.
    pub(super) fn host(&self) -> &(dyn ToSql + Sync) {
        &self.lease.host
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.lease.token,
            &self.lease.owner_id,
            &self.pid,
            &self.proc_start,
            &self.lease.acquired_at,
            &self.lease.boot_id,
            &self.lease.expires_at,
        ]
    }
}

pub(super) async fn lease(client: &Client, run_id: &RunId) -> StoreResult<Option<Lease>> {
    let row = query_opt(
        client,
        "SELECT lease_token, lease_owner_id, lease_pid, lease_proc_start,
                lease_acquired_at, lease_boot_id, lease_expires_at, lease_host
         FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("read the lease of run {run_id}"))?
    .ok_or_else(|| StoreError::UnknownRun(run_id.clone()))?;
    let reader = RowReader::new(&row, run_id, "runs");
    let Some(token) = reader.optional_string("lease_token")? else {
        return Ok(None);
    };
    let owner_id = reader.optional_string("lease_owner_id")?;
    let pid = reader.optional_u32("lease_pid")?;
    let proc_start = reader.optional_unsigned("lease_proc_start")?;
    let acquired_at: Option<i64> = reader.get("lease_acquired_at")?;
    // The lease columns are always written together, by one statement; the boot id and the
    // expiry may be NULL in a held lease.
    match (owner_id, pid, proc_start, acquired_at) {
        (Some(owner_id), Some(pid), Some(proc_start), Some(acquired_at)) => Ok(Some(Lease {
            owner_id,
            pid,
            proc_start,
            boot_id: reader.optional_string("lease_boot_id")?,
            host: reader.optional_string("lease_host")?,
            token,
            acquired_at,
            expires_at: reader.get("lease_expires_at")?,
        })),
        _ => Err(reader.corrupt("lease_token", "set while other lease columns are empty")),
    }
}

pub(super) async fn acquire(
    client: &Client,
    run_id: &RunId,
    expected: Option<&str>,
    lease: &Lease,
) -> StoreResult<bool> {
    let doing = || format!("acquire the lease of run {run_id}");
    let lease_row = LeaseRow::new(lease)?;
    let run_id_text = run_id.as_str();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_id_text, &expected];
    params.extend(lease_row.params());
    params.push(lease_row.host());
    let installed = execute(
        client,
        "UPDATE runs SET lease_token = $3, lease_owner_id = $4, lease_pid = $5,
             lease_proc_start = $6, lease_acquired_at = $7, lease_boot_id = $8,
             lease_expires_at = $9, lease_host = $10
         WHERE run_id = $1 AND lease_token IS NOT DISTINCT FROM $2",
        &params,
    )
    .await
    .context(doing)?;
    if installed == 1 {
        return Ok(true);
    }
    match find_run_key(client, run_id).await? {
        Some(_) => Ok(false),
        None => Err(StoreError::UnknownRun(run_id.clone())),
    }
}

pub(super) async fn renew(
    client: &Client,
    run_id: &RunId,
    token: &str,
    until: i64,
) -> StoreResult<()> {
    let renewed = execute(
        client,
        "UPDATE runs SET lease_expires_at = $3 WHERE run_id = $1 AND lease_token = $2",
        &[&run_id.as_str(), &token, &until],
    )
    .await
    .context(|| format!("renew the lease of run {run_id}"))?;
    if renewed == 1 {
        return Ok(());
    }
    match find_run_key(client, run_id).await? {
        Some(_) => Err(StoreError::Fenced(run_id.clone())),
        None => Err(StoreError::UnknownRun(run_id.clone())),
    }
}

/// Gives up `token`'s lease of the run, in a transaction of the caller's or alone.
pub(super) async fn release(
    client: &impl GenericClient,
    run_id: &RunId,
    token: &str,
) -> StoreResult<()> {
    let released = execute(
        client,
        "UPDATE runs SET lease_token = NULL, lease_owner_id = NULL, lease_pid = NULL,
             lease_proc_start = NULL, lease_acquired_at = NULL, lease_boot_id = NULL,
             lease_expires_at = NULL, lease_host = NULL
         WHERE run_id = $1 AND lease_token = $2",
        &[&run_id.as_str(), &token],
    )
    .await
    .context(|| format!("release the lease of run {run_id}"))?;
    if released == 0 && find_run_key(client, run_id).await?.is_none() {
        return Err(StoreError::UnknownRun(run_id.clone()));
    }
    Ok(())
}

/// The database's clock in Unix ms.
pub(super) async fn clock_ms(client: &Client) -> StoreResult<i64> {
    let row = query_one(
        client,
        "SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000))::BIGINT",
        &[],
    )
    .await
    .context(|| "read the database's clock".to_owned())?;
    Ok(row.get(0))
}
