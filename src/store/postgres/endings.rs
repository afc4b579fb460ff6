//! A generation's end in one transaction (`Endings::end_generation`): its last events, its
//! call count, its outcome and the release of its lease, each as its separate write makes
//! it, behind one fence. A refused fence writes none of them, and a status read sees the
//! run's closing events and its outcome together.

use deadpool_postgres::Client;

use super::calls::record_total_in;
use super::connection::Context;
use super::events::insert_events;
use super::leases::release;
use super::rows::fenced_run_key;
use super::runs::update_in;
use crate::model::{EventRecord, RunRecord};
use crate::store::{Fence, StoreResult};

pub(super) async fn end_generation(
    client: &mut Client,
    record: &RunRecord,
    lease_token: &str,
    events: &[EventRecord],
    call_total: Option<(u32, u64)>,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("end the generation of run {run_id} and release its lease");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, Fence(lease_token)).await?;
    insert_events(&transaction, run_key, run_id, events).await?;
    if let Some((generation, total)) = call_total {
        record_total_in(&transaction, (run_key, run_id), generation, total).await?;
    }
    update_in(&transaction, run_key, record).await?;
    release(&transaction, run_id, lease_token).await?;
    transaction.commit().await.context(doing)
}
