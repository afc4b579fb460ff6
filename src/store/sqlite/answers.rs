//! First-writer-wins records: checkpoint answers (one per call index) and operation
//! receipts (one per operation id, replaced only by a newer generation's), each written with
//! a conditional insert whose standing row is read back in the same transaction.

use rusqlite::Connection;

use super::connection::{Context, write_transaction};
use super::rows::{RowReader, fenced_run_key, run_key, to_json};
use crate::model::{CheckpointAnswer, OperationReceipt, RunId};
use crate::store::{Fence, StoreError, StoreResult};

pub(super) fn put_checkpoint_answer(
    connection: &mut Connection,
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
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    transaction
        .prepare_cached(
            "INSERT OR IGNORE INTO checkpoint_answers
                 (run_key, call_index, hash, answered_at, answer)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                run_key,
                answer.call_index,
                answer.hash,
                answer.answered_at,
                answer_json
            ])
        })
        .context(doing)?;
    let standing = query_answers(
        &transaction,
        "SELECT * FROM checkpoint_answers WHERE run_key = ?1 AND call_index = ?2",
        rusqlite::params![run_key, answer.call_index],
        run_id,
    )?
    .into_iter()
    .next()
    .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
    transaction.commit().context(doing)?;
    Ok(standing)
}

pub(super) fn checkpoint_answers(
    connection: &Connection,
    run_id: &RunId,
) -> StoreResult<Vec<CheckpointAnswer>> {
    let run_key = run_key(connection, run_id)?;
    query_answers(
        connection,
        "SELECT * FROM checkpoint_answers WHERE run_key = ?1 ORDER BY call_index",
        rusqlite::params![run_key],
        run_id,
    )
}

pub(super) fn put_receipt(
    connection: &mut Connection,
    run_id: &RunId,
    receipt: &OperationReceipt,
    fence: Fence<'_>,
) -> StoreResult<OperationReceipt> {
    let doing = || format!("record receipt {} of run {run_id}", receipt.operation_id);
    let response_json = to_json(&receipt.response, "receipt response")?;
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    transaction
        .prepare_cached(
            "INSERT INTO receipts
                 (run_key, operation_id, generation, input_digest, created_at, response)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (run_key, operation_id) DO UPDATE SET
                 generation = excluded.generation, input_digest = excluded.input_digest,
                 created_at = excluded.created_at, response = excluded.response
             WHERE excluded.generation > receipts.generation",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                run_key,
                receipt.operation_id,
                receipt.generation,
                receipt.input_digest,
                receipt.created_at,
                response_json
            ])
        })
        .context(doing)?;
    let standing = query_receipt(&transaction, run_key, run_id, &receipt.operation_id)?
        .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
    transaction.commit().context(doing)?;
    Ok(standing)
}

pub(super) fn receipt(
    connection: &Connection,
    run_id: &RunId,
    operation_id: &str,
) -> StoreResult<Option<OperationReceipt>> {
    let run_key = run_key(connection, run_id)?;
    query_receipt(connection, run_key, run_id, operation_id)
}

fn query_answers(
    connection: &Connection,
    sql: &str,
    parameters: impl rusqlite::Params,
    run_id: &RunId,
) -> StoreResult<Vec<CheckpointAnswer>> {
    let doing = || format!("read checkpoint answers of run {run_id}");
    let mut statement = connection.prepare_cached(sql).context(doing)?;
    let mut rows = statement.query(parameters).context(doing)?;
    let mut answers = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "checkpoint_answers");
        answers.push(CheckpointAnswer {
            call_index: reader.get("call_index")?,
            hash: reader.get("hash")?,
            answer: reader.json("answer")?,
            answered_at: reader.get("answered_at")?,
        });
    }
    Ok(answers)
}

fn query_receipt(
    connection: &Connection,
    run_key: i64,
    run_id: &RunId,
    operation_id: &str,
) -> StoreResult<Option<OperationReceipt>> {
    let doing = || format!("read receipt {operation_id} of run {run_id}");
    let mut statement = connection
        .prepare_cached("SELECT * FROM receipts WHERE run_key = ?1 AND operation_id = ?2")
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![run_key, operation_id])
        .context(doing)?;
    let Some(row) = rows.next().context(doing)? else {
        return Ok(None);
    };
    let reader = RowReader::new(row, run_id, "receipts");
    Ok(Some(OperationReceipt {
        operation_id: reader.get("operation_id")?,
        generation: reader.get("generation")?,
        input_digest: reader.get("input_digest")?,
        response: reader.json("response")?,
        created_at: reader.get("created_at")?,
    }))
}
