//! The `run_queue` table (`RunQueue`): the folder server's starts waiting for a slot, shared by
//! every replica. Enqueueing holds a transaction advisory lock ([`QUEUE_LOCK`]) while it
//! counts and inserts, so replicas enqueueing at once never pass the bound together; claiming
//! the head is one `UPDATE … WHERE seq = (SELECT … FOR UPDATE SKIP LOCKED)`, so two replicas
//! claiming at once get two different entries.

use deadpool_postgres::Client;
use tokio_postgres::Row;

use super::connection::{Context, execute, query_one, query_opt};
use crate::model::{
    Enqueued, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, QueuedState, RunId,
};
use crate::store::{StoreError, StoreResult};

/// The advisory lock key enqueueing holds: "agentprism queue" folded into a 64-bit number,
/// distinct from the migration lock.
const QUEUE_LOCK: i64 = 0x6170_7175_6575_6531;
const START_COLUMNS: &str = "run_id, workflow, caller, arguments, enqueued_at";

pub(super) async fn enqueue(
    client: &mut Client,
    start: &QueuedStart,
    bound: u64,
) -> StoreResult<Enqueued> {
    let doing = || format!("queue the start of run {}", start.run_id);
    let arguments = serde_json::to_string(&start.arguments)
        .map_err(|error| StoreError::Io(format!("{}: {error}", doing())))?;
    let transaction = client.transaction().await.context(doing)?;
    execute(
        &transaction,
        "SELECT pg_advisory_xact_lock($1)",
        &[&QUEUE_LOCK],
    )
    .await
    .context(doing)?;
    let waiting: i64 = query_one(
        &transaction,
        "SELECT count(*) FROM run_queue WHERE outcome IS NULL",
        &[],
    )
    .await
    .context(doing)?
    .get(0);
    let waiting = u64::try_from(waiting).unwrap_or(0);
    if waiting >= bound {
        return Ok(Enqueued::Full(waiting));
    }
    let inserted = execute(
        &transaction,
        &format!(
            "INSERT INTO run_queue ({START_COLUMNS}) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id) DO NOTHING"
        ),
        &[
            &start.run_id.as_str(),
            &start.workflow,
            &start.caller,
            &arguments,
            &start.enqueued_at,
        ],
    )
    .await
    .context(doing)?;
    if inserted == 0 {
        return Err(StoreError::AlreadyExists(start.run_id.clone()));
    }
    transaction.commit().await.context(doing)?;
    Ok(Enqueued::At(waiting + 1))
}

pub(super) async fn queued(client: &Client, run_id: &RunId) -> StoreResult<Option<QueuedEntry>> {
    let doing = || format!("read the queue entry of run {run_id}");
    let row = query_opt(
        client,
        &format!(
            "SELECT {START_COLUMNS}, outcome, message, claimed_by IS NOT NULL AS claimed,
                    CASE WHEN outcome IS NULL AND claimed_by IS NULL THEN
                        (SELECT count(*) FROM run_queue AS ahead
                         WHERE ahead.outcome IS NULL AND ahead.claimed_by IS NULL
                           AND ahead.seq <= run_queue.seq)
                    END AS position
             FROM run_queue WHERE run_id = $1"
        ),
        &[&run_id.as_str()],
    )
    .await
    .context(doing)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let start = start_from_row(&row)?;
    let outcome: Option<String> = column(&row, "outcome")?;
    let state = match outcome {
        Some(outcome) => QueuedState::Ended {
            outcome: QueueOutcome::parse(&outcome).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "run_queue.outcome of run {run_id} is {outcome:?}, neither canceled nor failed"
                ))
            })?,
            message: column::<Option<String>>(&row, "message")?.unwrap_or_default(),
        },
        None if column::<bool>(&row, "claimed")? => QueuedState::Starting,
        None => QueuedState::Waiting {
            position: u64::try_from(column::<Option<i64>>(&row, "position")?.unwrap_or(0))
                .unwrap_or(0),
        },
    };
    Ok(Some(QueuedEntry { start, state }))
}

pub(super) async fn stats(client: &Client) -> StoreResult<QueueStats> {
    let row = query_one(
        client,
        "SELECT count(*), min(enqueued_at) FROM run_queue WHERE outcome IS NULL",
        &[],
    )
    .await
    .context(|| "count the queued starts".to_owned())?;
    let length: i64 = row.get(0);
    Ok(QueueStats {
        length: u64::try_from(length).unwrap_or(0),
        oldest_enqueued_at: row.get(1),
    })
}

pub(super) async fn claim(
    client: &Client,
    claimer: &str,
    now_ms: i64,
    until_ms: i64,
) -> StoreResult<Option<QueuedStart>> {
    let row = query_opt(
        client,
        &format!(
            "UPDATE run_queue SET claimed_by = $1, claim_until = $2
             WHERE seq = (SELECT seq FROM run_queue
                          WHERE outcome IS NULL AND (claimed_by IS NULL OR claim_until < $3)
                          ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING {START_COLUMNS}"
        ),
        &[&claimer, &until_ms, &now_ms],
    )
    .await
    .context(|| "claim the oldest queued start".to_owned())?;
    row.as_ref().map(start_from_row).transpose()
}

pub(super) async fn unclaim(client: &Client, run_id: &RunId, claimer: &str) -> StoreResult<()> {
    execute(
        client,
        "UPDATE run_queue SET claimed_by = NULL, claim_until = NULL
         WHERE run_id = $1 AND claimed_by = $2",
        &[&run_id.as_str(), &claimer],
    )
    .await
    .context(|| format!("give back the claim on queued run {run_id}"))?;
    Ok(())
}

pub(super) async fn remove(client: &Client, run_id: &RunId) -> StoreResult<Option<QueueOutcome>> {
    let row = query_opt(
        client,
        "DELETE FROM run_queue WHERE run_id = $1 RETURNING outcome",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("remove queued run {run_id}"))?;
    let outcome: Option<String> = match &row {
        Some(row) => column(row, "outcome")?,
        None => None,
    };
    Ok(outcome.as_deref().and_then(QueueOutcome::parse))
}

pub(super) async fn end(
    client: &Client,
    run_id: &RunId,
    outcome: QueueOutcome,
    message: &str,
    now_ms: i64,
) -> StoreResult<bool> {
    let changed = execute(
        client,
        "UPDATE run_queue SET outcome = $2, message = $3, ended_at = $4
         WHERE run_id = $1 AND outcome IS NULL",
        &[&run_id.as_str(), &outcome.as_str(), &message, &now_ms],
    )
    .await
    .context(|| format!("end queued run {run_id}"))?;
    Ok(changed == 1)
}

pub(super) async fn prune(client: &Client, before_ms: i64) -> StoreResult<u64> {
    execute(
        client,
        "DELETE FROM run_queue WHERE outcome IS NOT NULL AND ended_at < $1",
        &[&before_ms],
    )
    .await
    .context(|| "delete the ended queue entries".to_owned())
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> StoreResult<T> {
    row.try_get(name)
        .map_err(|error| StoreError::Corrupt(format!("run_queue.{name}: {error}")))
}

/// A [`QueuedStart`] from the columns of [`START_COLUMNS`].
fn start_from_row(row: &Row) -> StoreResult<QueuedStart> {
    let run_id: String = column(row, "run_id")?;
    let arguments: String = column(row, "arguments")?;
    Ok(QueuedStart {
        run_id: RunId::parse(&run_id)
            .map_err(|error| StoreError::Corrupt(format!("run_queue.run_id: {error}")))?,
        workflow: column(row, "workflow")?,
        caller: column(row, "caller")?,
        arguments: serde_json::from_str(&arguments)
            .map_err(|error| StoreError::Corrupt(format!("run_queue.arguments: {error}")))?,
        enqueued_at: column(row, "enqueued_at")?,
    })
}
