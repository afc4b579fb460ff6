//! First-writer-wins records: checkpoint answers (one per call index) and operation
//! receipts (one per operation id, replaced only by a newer generation's). Each is one
//! conditional insert (`ON CONFLICT`), atomic against every other replica: a concurrent
//! insert of the same key waits for the first to commit and then yields to it. The standing
//! row is read back by the next statement, which sees every committed row. Both are written
//! in a transaction whose first statement checks the writer's lease (`rows::fenced_run_key`).

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::connection::{Context, execute, query, query_opt};
use super::rows::{RowReader, fenced_run_key, run_key, to_json};
use crate::model::{CheckpointAnswer, OperationReceipt, RunId};
use crate::store::{Fence, StoreError, StoreResult};

pub(super) async fn put_checkpoint_answer(
    client: &mut Client,
    run_id: &RunId,
    answer: &CheckpointAnswer,
    fence: Fence<'_>,
) -> StoreResult<CheckpointAnswer> {
    let doing = || {
        format!(
            "record the answer to checkpoint {} of run {run_id}",
            answer.call_index
        )
    };
    let answer_json = to_json(&answer.answer, "checkpoint answer")?;
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    let call_index = i64::from(answer.call_index);
    execute(
        &transaction,
        "INSERT INTO checkpoint_answers (run_key, call_index, hash, answered_at, answer)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (run_key, call_index) DO NOTHING",
        &[
            &run_key,
            &call_index,
            &answer.hash,
            &answer.answered_at,
            &answer_json,
        ],
    )
    .await
    .context(doing)?;
    let rows = query(
        &transaction,
        "SELECT * FROM checkpoint_answers WHERE run_key = $1 AND call_index = $2",
        &[&run_key, &call_index],
    )
    .await
    .context(doing)?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
    let standing = answer_from_row(row, run_id)?;
    transaction.commit().await.context(doing)?;
    Ok(standing)
}

pub(super) async fn checkpoint_answers(
    client: &Client,
    run_id: &RunId,
) -> StoreResult<Vec<CheckpointAnswer>> {
    let run_key = run_key(client, run_id).await?;
    let rows = query(
        client,
        "SELECT * FROM checkpoint_answers WHERE run_key = $1 ORDER BY call_index",
        &[&run_key],
    )
    .await
    .context(|| format!("read checkpoint answers of run {run_id}"))?;
    rows.iter()
        .map(|row| answer_from_row(row, run_id))
        .collect()
}

pub(super) async fn put_receipt(
    client: &mut Client,
    run_id: &RunId,
    receipt: &OperationReceipt,
    fence: Fence<'_>,
) -> StoreResult<OperationReceipt> {
    let doing = || format!("record receipt {} of run {run_id}", receipt.operation_id);
    let response_json = to_json(&receipt.response, "receipt response")?;
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    execute(
        &transaction,
        "INSERT INTO receipts
             (run_key, operation_id, generation, input_digest, created_at, response)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (run_key, operation_id) DO UPDATE SET
             generation = excluded.generation, input_digest = excluded.input_digest,
             created_at = excluded.created_at, response = excluded.response
         WHERE excluded.generation > receipts.generation",
        &[
            &run_key,
            &receipt.operation_id,
            &i64::from(receipt.generation),
            &receipt.input_digest,
            &receipt.created_at,
            &response_json,
        ],
    )
    .await
    .context(doing)?;
    let standing = query_receipt(&transaction, run_key, run_id, &receipt.operation_id)
        .await?
        .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
    transaction.commit().await.context(doing)?;
    Ok(standing)
}

pub(super) async fn receipt(
    client: &Client,
    run_id: &RunId,
    operation_id: &str,
) -> StoreResult<Option<OperationReceipt>> {
    let run_key = run_key(client, run_id).await?;
    query_receipt(client, run_key, run_id, operation_id).await
}

fn answer_from_row(row: &Row, run_id: &RunId) -> StoreResult<CheckpointAnswer> {
    let reader = RowReader::new(row, run_id, "checkpoint_answers");
    Ok(CheckpointAnswer {
        call_index: reader.u32("call_index")?,
        hash: reader.string("hash")?,
        answer: reader.json("answer")?,
        answered_at: reader.get("answered_at")?,
    })
}

async fn query_receipt(
    client: &impl GenericClient,
    run_key: i64,
    run_id: &RunId,
    operation_id: &str,
) -> StoreResult<Option<OperationReceipt>> {
    let row = query_opt(
        client,
        "SELECT * FROM receipts WHERE run_key = $1 AND operation_id = $2",
        &[&run_key, &operation_id],
    )
    .await
    .context(|| format!("read receipt {operation_id} of run {run_id}"))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let reader = RowReader::new(&row, run_id, "receipts");
    Ok(Some(OperationReceipt {
        operation_id: reader.string("operation_id")?,
        generation: reader.u32("generation")?,
        input_digest: reader.string("input_digest")?,
        response: reader.json("response")?,
        created_at: reader.get("created_at")?,
    }))
}
