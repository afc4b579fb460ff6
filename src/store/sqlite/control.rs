//! The `control_intents` table: durable stop and cancel-agent intents with their first
//! acknowledgement. Putting an intent reuses a pending one for the same action and call, in
//! the same write transaction, so two callers racing to stop a run share one operation id.

use rusqlite::{Connection, OptionalExtension, Row};

use super::connection::{Context, write_transaction};
use super::rows::{RowReader, fenced_run_key, run_key, stored_run_id, to_json};
use crate::model::RunId;
use crate::store::{
    ControlIntent, Fence, IntentAck, IntentAction, IntentScope, StoreError, StoreResult,
};

/// The intent columns, in the order [`intent_from_row`] reads them by name.
const INTENT_COLUMNS: &str = "op, action, call_index, requested_at, requested_by";

/// Pending intents across runs (`?1`: the lease holder, or NULL for every run), through the
/// partial index `control_intents_pending`.
pub(super) const PENDING_ACROSS_RUNS: &str =
    "SELECT runs.run_id, intents.op, intents.action, intents.call_index,
            intents.requested_at, intents.requested_by
     FROM control_intents AS intents JOIN runs USING (run_key)
     WHERE intents.acked_at IS NULL AND (?1 IS NULL OR runs.lease_owner_id = ?1)
     ORDER BY intents.requested_at, intents.op";

pub(super) fn put(
    connection: &mut Connection,
    intent: &ControlIntent,
) -> StoreResult<ControlIntent> {
    let run_id = &intent.run_id;
    let doing = || format!("record control intent {} of run {run_id}", intent.op);
    let transaction = write_transaction(connection, doing)?;
    let run_key = run_key(&transaction, run_id)?;
    let standing = transaction
        .prepare_cached(&format!(
            "SELECT {INTENT_COLUMNS} FROM control_intents
             WHERE run_key = ?1
               AND (op = ?2 OR (acked_at IS NULL AND action = ?3 AND call_index IS ?4))
             ORDER BY op = ?2 DESC, requested_at, op LIMIT 1"
        ))
        .context(doing)?
        .query_row(
            rusqlite::params![
                run_key,
                intent.op,
                intent.action.as_str(),
                intent.call_index
            ],
            |row| Ok(intent_from_row(row, run_id)),
        )
        .optional()
        .context(doing)?
        .transpose()?;
    if let Some(standing) = standing {
        return Ok(standing);
    }
    transaction
        .prepare_cached(
            "INSERT INTO control_intents
                 (run_key, op, action, call_index, requested_at, requested_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                run_key,
                intent.op,
                intent.action.as_str(),
                intent.call_index,
                intent.requested_at,
                intent.requested_by
            ])
        })
        .context(doing)?;
    transaction.commit().context(doing)?;
    Ok(intent.clone())
}

pub(super) fn read(
    connection: &Connection,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<ControlIntent>> {
    let doing = || format!("read control intent {op} of run {run_id}");
    let run_key = run_key(connection, run_id)?;
    connection
        .prepare_cached(&format!(
            "SELECT {INTENT_COLUMNS} FROM control_intents WHERE run_key = ?1 AND op = ?2"
        ))
        .context(doing)?
        .query_row(rusqlite::params![run_key, op], |row| {
            Ok(intent_from_row(row, run_id))
        })
        .optional()
        .context(doing)?
        .transpose()
}

pub(super) fn pending(
    connection: &Connection,
    scope: IntentScope<'_>,
) -> StoreResult<Vec<ControlIntent>> {
    let doing = || "list pending control intents".to_owned();
    let mut intents = Vec::new();
    if let IntentScope::Run(run_id) = scope {
        let run_key = run_key(connection, run_id)?;
        let mut statement = connection
            .prepare_cached(&format!(
                "SELECT {INTENT_COLUMNS} FROM control_intents
                 WHERE run_key = ?1 AND acked_at IS NULL ORDER BY requested_at, op"
            ))
            .context(doing)?;
        let mut rows = statement.query([run_key]).context(doing)?;
        while let Some(row) = rows.next().context(doing)? {
            intents.push(intent_from_row(row, run_id)?);
        }
        return Ok(intents);
    }
    // Through the partial index of pending intents, joined to their runs for the id (and the
    // lease holder).
    let owner = match scope {
        IntentScope::HeldBy(owner) => Some(owner),
        _ => None,
    };
    let mut statement = connection
        .prepare_cached(PENDING_ACROSS_RUNS)
        .context(doing)?;
    let mut rows = statement.query([owner]).context(doing)?;
    while let Some(row) = rows.next().context(doing)? {
        let run_id = stored_run_id(row)?;
        intents.push(intent_from_row(row, &run_id)?);
    }
    Ok(intents)
}

pub(super) fn acknowledge(
    connection: &mut Connection,
    run_id: &RunId,
    op: &str,
    ack: &IntentAck,
    fence: Option<Fence<'_>>,
) -> StoreResult<IntentAck> {
    let doing = || format!("acknowledge control intent {op} of run {run_id}");
    let outcome = to_json(&ack.outcome, "intent outcome")?;
    let transaction = write_transaction(connection, doing)?;
    let run_key = match fence {
        Some(fence) => fenced_run_key(&transaction, run_id, fence)?,
        None => run_key(&transaction, run_id)?,
    };
    transaction
        .prepare_cached(
            "UPDATE control_intents SET acked_at = ?1, acked_by = ?2, outcome = ?3
             WHERE run_key = ?4 AND op = ?5 AND acked_at IS NULL",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                ack.acked_at,
                ack.acked_by,
                outcome,
                run_key,
                op
            ])
        })
        .context(doing)?;
    let standing = read_ack(&transaction, run_key, run_id, op)?;
    transaction.commit().context(doing)?;
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

pub(super) fn ack(
    connection: &Connection,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<IntentAck>> {
    let run_key = run_key(connection, run_id)?;
    Ok(read_ack(connection, run_key, run_id, op)?.flatten())
}

/// `None` when the intent does not exist, `Some(None)` while it is pending.
fn read_ack(
    connection: &Connection,
    run_key: i64,
    run_id: &RunId,
    op: &str,
) -> StoreResult<Option<Option<IntentAck>>> {
    let doing = || format!("read the acknowledgement of control intent {op} of run {run_id}");
    let mut statement = connection
        .prepare_cached(
            "SELECT acked_at, acked_by, outcome FROM control_intents
             WHERE run_key = ?1 AND op = ?2",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![run_key, op])
        .context(doing)?;
    let Some(row) = rows.next().context(doing)? else {
        return Ok(None);
    };
    let reader = RowReader::new(row, run_id, "control_intents");
    let Some(acked_at) = reader.get::<Option<i64>>("acked_at")? else {
        return Ok(Some(None));
    };
    Ok(Some(Some(IntentAck {
        acked_at,
        acked_by: reader.get("acked_by")?,
        outcome: reader.json("outcome")?,
    })))
}

fn intent_from_row(row: &Row<'_>, run_id: &RunId) -> StoreResult<ControlIntent> {
    let reader = RowReader::new(row, run_id, "control_intents");
    Ok(ControlIntent {
        op: reader.get("op")?,
        run_id: run_id.clone(),
        action: reader.parsed("action", IntentAction::parse)?,
        call_index: reader.get("call_index")?,
        requested_at: reader.get("requested_at")?,
        requested_by: reader.get("requested_by")?,
    })
}
