//! The writes that end a generation, one commit instead of four ([`end_generation`]): its
//! last events with its call count ([`close_generation`]) and its outcome with the release
//! of its lease ([`record_outcome`]). Each makes exactly what its separate writes make
//! (`events::append` then `calls::record_total`; `runs::update` then `leases::release`), in
//! one transaction: a small transaction's fixed cost (its locks, the database header's WAL
//! frame, the commit and, at `full`, its sync) is most of what each of these writes costs,
//! and every run pays it once. The two halves stay apart for the ends that need only one.

use rusqlite::Connection;

use super::calls::record_total_in;
use super::connection::{Context, write_transaction};
use super::events::insert_events;
use super::leases::release_in;
use super::rows::fenced_run_key;
use super::runs::update_in;
use crate::model::{EventRecord, RunId, RunRecord};
use crate::store::{Fence, ScriptChange, StoreResult};

/// A stopped generation's last events and its call count, fenced, in one transaction.
pub(super) fn close_generation(
    connection: &mut Connection,
    run_id: &RunId,
    events: &[EventRecord],
    call_total: Option<(u32, u64)>,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("write the last events and call count of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    insert_events(&transaction, run_key, run_id, events)?;
    if let Some((generation, total)) = call_total {
        record_total_in(&transaction, (run_key, run_id), generation, total)?;
    }
    transaction.commit().context(doing)
}

/// The run row with a generation's outcome, fenced by `lease_token`, and that lease
/// released, in one transaction: a refused row leaves the lease held, as a process that
/// stopped between the two writes would.
pub(super) fn record_outcome(
    connection: &mut Connection,
    record: &RunRecord,
    lease_token: &str,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("record the outcome of run {run_id} and release its lease");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, Fence(lease_token))?;
    update_in(&transaction, run_key, record, ScriptChange::Unchanged)?;
    release_in(&transaction, run_key, run_id, lease_token)?;
    transaction.commit().context(doing)
}

/// [`close_generation`] and [`record_outcome`] in one transaction: a generation's last
/// events, its call count, its outcome and the release of its lease, or nothing.
pub(super) fn end_generation(
    connection: &mut Connection,
    record: &RunRecord,
    lease_token: &str,
    events: &[EventRecord],
    call_total: Option<(u32, u64)>,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("end the generation of run {run_id} and release its lease");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, Fence(lease_token))?;
    insert_events(&transaction, run_key, run_id, events)?;
    if let Some((generation, total)) = call_total {
        record_total_in(&transaction, (run_key, run_id), generation, total)?;
    }
    update_in(&transaction, run_key, record, ScriptChange::Unchanged)?;
    release_in(&transaction, run_key, run_id, lease_token)?;
    transaction.commit().context(doing)
}
