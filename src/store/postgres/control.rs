//! The `control_intents` table: durable stop and cancel-agent intents with their first
//! acknowledgement. Putting an intent locks the run's row first, so two replicas racing to
//! stop a run serialize, and the second finds the first's pending intent and shares its
//! operation id. The acknowledgement is one conditional `UPDATE … WHERE acked_at IS NULL`.

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::connection::{Context, execute, query, query_opt};
use super::rows::{RowReader, fenced_run_key, run_key, stored_run_id, to_json};
use crate::model::RunId;
use crate::store::{
    ControlIntent, Fence, IntentAck, IntentAction, IntentScope, StoreError, StoreResult,
};

/// The columns [`intent_from_row`] reads.
macro_rules! intent_columns {
    () => {
        "intents.op, intents.action, intents.call_index, intents.requested_at, \
         intents.requested_by"
    };
}

const STANDING: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM control_intents AS intents
     WHERE run_key = $1
       AND (op = $2 OR (acked_at IS NULL AND action = $3
                        AND call_index IS NOT DISTINCT FROM $4))
     ORDER BY (op = $2) DESC, requested_at, op LIMIT 1"
);
/// Every run's pending intents, through the partial index `control_intents_pending`.
const PENDING_ALL: &str = concat!(
    "SELECT runs.run_id, ",
    intent_columns!(),
    " FROM control_intents AS intents JOIN runs USING (run_key)
     WHERE intents.acked_at IS NULL
     ORDER BY intents.requested_at, intents.op"
);
/// The pending intents of the runs one owner holds.
const PENDING_HELD_BY: &str = concat!(
    "SELECT runs.run_id, ",
    intent_columns!(),
    " FROM control_intents AS intents JOIN runs USING (run_key)
     WHERE intents.acked_at IS NULL AND runs.lease_owner_id = $1
     ORDER BY intents.requested_at, intents.op"
);
const PENDING_RUN: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM control_intents AS intents
     WHERE run_key = $1 AND acked_at IS NULL ORDER BY requested_at, op"
);

pub(super) async fn put(client: &mut Client, intent: &ControlIntent) -> StoreResult<ControlIntent> {
    let run_id = &intent.run_id;
    let doing = || format!("record control intent {} of run {run_id}", intent.op);
    let transaction = client.transaction().await.context(doing)?;
    let run_key: i64 = query_opt(
        &transaction,
        "SELECT run_key FROM runs WHERE run_id = $1 FOR NO KEY UPDATE",
        &[&run_id.as_str()],
    )
    .await
    .context(doing)?
    .ok_or_else(|| StoreError::UnknownRun(run_id.clone()))?
    .get(0);
    let call_index = intent.call_index.map(i64::from);
    let standing = query_opt(
        &transaction,
        STANDING,
        &[&run_key, &intent.op, &intent.action.as_str(), &call_index],
    )
    .await
    .context(doing)?;
    if let Some(standing) = standing {
        return intent_from_row(&standing, run_id);
    }
    execute(
        &transaction,
        "INSERT INTO control_intents
             (run_key, op, action, call_index, requested_at, requested_by)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &run_key,
            &intent.op,
            &intent.action.as_str(),
            &call_index,
            &intent.requested_at,
            &i64::from(intent.requested_by),
        ],
    )
    .await
    .context(doing)?;
    transaction.commit().await.context(doing)?;
    Ok(intent.clone())
}

pub(super) async fn read(
    client: &Client,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<ControlIntent>> {
    let run_key = run_key(client, run_id).await?;
    let row = query_opt(
        client,
        concat!(
            "SELECT ",
            intent_columns!(),
            " FROM control_intents AS intents WHERE run_key = $1 AND op = $2"
        ),
        &[&run_key, &op],
    )
    .await
    .context(|| format!("read control intent {op} of run {run_id}"))?;
    row.map(|row| intent_from_row(&row, run_id)).transpose()
}

pub(super) async fn pending(
    client: &Client,
    scope: IntentScope<'_>,
) -> StoreResult<Vec<ControlIntent>> {
    let doing = || "list pending control intents".to_owned();
    let rows = match scope {
        IntentScope::Run(run_id) => {
            let run_key = run_key(client, run_id).await?;
            let rows = query(client, PENDING_RUN, &[&run_key])
                .await
                .context(doing)?;
            return rows
                .iter()
                .map(|row| intent_from_row(row, run_id))
                .collect();
        }
        IntentScope::HeldBy(owner) => query(client, PENDING_HELD_BY, &[&owner]).await,
        IntentScope::All => query(client, PENDING_ALL, &[]).await,
    }
    .context(doing)?;
    let mut intents = Vec::with_capacity(rows.len());
    for row in &rows {
        let run_id = stored_run_id(row)?;
        intents.push(intent_from_row(row, &run_id)?);
    }
    Ok(intents)
}

pub(super) async fn acknowledge(
    client: &mut Client,
    run_id: &RunId,
    op: &str,
    ack: &IntentAck,
    fence: Option<Fence<'_>>,
) -> StoreResult<IntentAck> {
    let doing = || format!("acknowledge control intent {op} of run {run_id}");
    let outcome = to_json(&ack.outcome, "intent outcome")?;
    let transaction = client.transaction().await.context(doing)?;
    let run_key = match fence {
        Some(fence) => fenced_run_key(&transaction, run_id, fence).await?,
        None => run_key(&transaction, run_id).await?,
    };
    execute(
        &transaction,
        "UPDATE control_intents SET acked_at = $1, acked_by = $2, outcome = $3
         WHERE run_key = $4 AND op = $5 AND acked_at IS NULL",
        &[
            &ack.acked_at,
            &i64::from(ack.acked_by),
            &outcome,
            &run_key,
            &op,
        ],
    )
    .await
    .context(doing)?;
    let standing = read_ack(&transaction, run_key, run_id, op).await?;
    transaction.commit().await.context(doing)?;
    match standing {
        Some(Some(standing)) => Ok(standing),
        Some(None) => Err(StoreError::Io(format!(
            "{}: the acknowledgement did not read back",
            doing()
        ))),
        None => Err(StoreError::UnknownIntent {
            run_id: run_id.clone(),
            op: op.to_owned(),
        }),
    }
}

pub(super) async fn ack(
    client: &Client,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<IntentAck>> {
    let run_key = run_key(client, run_id).await?;
    Ok(read_ack(client, run_key, run_id, op).await?.flatten())
}

/// `None` when the intent does not exist, `Some(None)` while it is pending.
async fn read_ack(
    client: &impl GenericClient,
    run_key: i64,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<Option<IntentAck>>> {
    let row = query_opt(
        client,
        "SELECT acked_at, acked_by, outcome FROM control_intents
         WHERE run_key = $1 AND op = $2",
        &[&run_key, &op],
    )
    .await
    .context(|| format!("read the acknowledgement of control intent {op} of run {run_id}"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let reader = RowReader::new(&row, run_id, "control_intents");
    let Some(acked_at) = reader.get::<Option<i64>>("acked_at")? else {
        return Ok(Some(None));
    };
    Ok(Some(Some(IntentAck {
        acked_at,
        acked_by: reader
            .optional_u32("acked_by")?
            .ok_or_else(|| reader.corrupt("acked_by", "empty while acked_at is set"))?,
        outcome: reader.json("outcome")?,
    })))
}

fn intent_from_row(row: &Row, run_id: &RunId) -> StoreResult<ControlIntent> {
    let reader = RowReader::new(row, run_id, "control_intents");
    Ok(ControlIntent {
        op: reader.string("op")?,
        run_id: run_id.clone(),
        action: reader.parsed("action", IntentAction::parse)?,
        call_index: reader.optional_u32("call_index")?,
        requested_at: reader.get("requested_at")?,
        requested_by: reader.u32("requested_by")?,
    })
}
