//! The `run_queue` table (`RunQueue`): the folder server's starts waiting for a slot. Every
//! write is one transaction that holds the write lock from its first statement, so the bound
//! and the claim of the head hold against every process sharing the file.

use rusqlite::{Connection, OptionalExtension, Row};

use super::connection::{Context, write_transaction};
use crate::model::{
    Enqueued, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, QueuedState, RunId,
};
use crate::store::{StoreError, StoreResult};

const START_COLUMNS: &str = "run_id, workflow, caller, arguments, enqueued_at";
const WAITING_COUNT: &str = "SELECT count(*) FROM run_queue WHERE outcome IS NULL";

pub(super) fn enqueue(
    connection: &mut Connection,
    start: &QueuedStart,
    bound: u64,
) -> StoreResult<Enqueued> {
    let doing = || format!("queue the start of run {}", start.run_id);
    let transaction = write_transaction(connection, doing)?;
    let waiting: i64 = transaction
        .query_row(WAITING_COUNT, [], |row| row.get(0))
        .context(doing)?;
    let waiting = u64::try_from(waiting).unwrap_or(0);
    if waiting >= bound {
        return Ok(Enqueued::Full(waiting));
    }
    let arguments = serde_json::to_string(&start.arguments)
        .map_err(|error| StoreError::Io(format!("{}: {error}", doing())))?;
    let inserted = transaction
        .prepare_cached(&format!(
            "INSERT INTO run_queue ({START_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (run_id) DO NOTHING"
        ))
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                start.run_id.as_str(),
                start.workflow,
                start.caller,
                arguments,
                start.enqueued_at
            ])
        })
        .context(doing)?;
    if inserted == 0 {
        return Err(StoreError::AlreadyExists(start.run_id.clone()));
    }
    transaction.commit().context(doing)?;
    Ok(Enqueued::At(waiting + 1))
}

pub(super) fn queued(connection: &Connection, run_id: &RunId) -> StoreResult<Option<QueuedEntry>> {
    let doing = || format!("read the queue entry of run {run_id}");
    let found = connection
        .prepare_cached(&format!(
            "SELECT {START_COLUMNS}, seq, outcome, message, claimed_by FROM run_queue
             WHERE run_id = ?1"
        ))
        .context(doing)?
        .query_row([run_id.as_str()], |row| {
            Ok((
                start_from_row(row),
                row.get::<_, i64>(5)?,
                row.get::<_, Option<String>>(6)?,
                row.get::<_, Option<String>>(7)?,
                row.get::<_, Option<String>>(8)?.is_some(),
            ))
        })
        .optional()
        .context(doing)?;
    let Some((start, seq, outcome, message, claimed)) = found else {
        return Ok(None);
    };
    let start = start?;
    let state = match outcome {
        Some(outcome) => QueuedState::Ended {
            outcome: QueueOutcome::parse(&outcome).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "run_queue.outcome of run {run_id} is {outcome:?}, neither canceled nor failed"
                ))
            })?,
            message: message.unwrap_or_default(),
        },
        None if claimed => QueuedState::Starting,
        None => {
            let position: i64 = connection
                .prepare_cached(
                    "SELECT count(*) FROM run_queue
                     WHERE outcome IS NULL AND claimed_by IS NULL AND seq <= ?1",
                )
                .context(doing)?
                .query_row([seq], |row| row.get(0))
                .context(doing)?;
            QueuedState::Waiting {
                position: u64::try_from(position).unwrap_or(0),
            }
        }
    };
    Ok(Some(QueuedEntry { start, state }))
}

pub(super) fn stats(connection: &Connection) -> StoreResult<QueueStats> {
    let doing = || "count the queued starts".to_owned();
    let (length, oldest): (i64, Option<i64>) = connection
        .prepare_cached("SELECT count(*), min(enqueued_at) FROM run_queue WHERE outcome IS NULL")
        .context(doing)?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .context(doing)?;
    Ok(QueueStats {
        length: u64::try_from(length).unwrap_or(0),
        oldest_enqueued_at: oldest,
    })
}

pub(super) fn claim(
    connection: &mut Connection,
    claimer: &str,
    now_ms: i64,
    until_ms: i64,
) -> StoreResult<Option<QueuedStart>> {
    let doing = || "claim the oldest queued start".to_owned();
    let transaction = write_transaction(connection, doing)?;
    let head = transaction
        .prepare_cached(&format!(
            "SELECT {START_COLUMNS}, seq FROM run_queue
             WHERE outcome IS NULL AND (claimed_by IS NULL OR claim_until < ?1)
             ORDER BY seq LIMIT 1"
        ))
        .context(doing)?
        .query_row([now_ms], |row| {
            Ok((start_from_row(row), row.get::<_, i64>(5)?))
        })
        .optional()
        .context(doing)?;
    let Some((start, seq)) = head else {
        return Ok(None);
    };
    transaction
        .prepare_cached("UPDATE run_queue SET claimed_by = ?1, claim_until = ?2 WHERE seq = ?3")
        .and_then(|mut statement| statement.execute(rusqlite::params![claimer, until_ms, seq]))
        .context(doing)?;
    transaction.commit().context(doing)?;
    start.map(Some)
}

pub(super) fn unclaim(connection: &Connection, run_id: &RunId, claimer: &str) -> StoreResult<()> {
    connection
        .prepare_cached(
            "UPDATE run_queue SET claimed_by = NULL, claim_until = NULL
             WHERE run_id = ?1 AND claimed_by = ?2",
        )
        .and_then(|mut statement| statement.execute([run_id.as_str(), claimer]))
        .context(|| format!("give back the claim on queued run {run_id}"))?;
    Ok(())
}

pub(super) fn remove(connection: &Connection, run_id: &RunId) -> StoreResult<Option<QueueOutcome>> {
    let doing = || format!("remove queued run {run_id}");
    let outcome: Option<Option<String>> = connection
        .prepare_cached("DELETE FROM run_queue WHERE run_id = ?1 RETURNING outcome")
        .context(doing)?
        .query_row([run_id.as_str()], |row| row.get(0))
        .optional()
        .context(doing)?;
    Ok(outcome.flatten().as_deref().and_then(QueueOutcome::parse))
}

pub(super) fn end(
    connection: &Connection,
    run_id: &RunId,
    outcome: QueueOutcome,
    message: &str,
    now_ms: i64,
) -> StoreResult<bool> {
    let changed = connection
        .prepare_cached(
            "UPDATE run_queue SET outcome = ?2, message = ?3, ended_at = ?4
             WHERE run_id = ?1 AND outcome IS NULL",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                run_id.as_str(),
                outcome.as_str(),
                message,
                now_ms
            ])
        })
        .context(|| format!("end queued run {run_id}"))?;
    Ok(changed == 1)
}

pub(super) fn prune(connection: &Connection, before_ms: i64) -> StoreResult<u64> {
    let deleted = connection
        .prepare_cached("DELETE FROM run_queue WHERE outcome IS NOT NULL AND ended_at < ?1")
        .and_then(|mut statement| statement.execute([before_ms]))
        .context(|| "delete the ended queue entries".to_owned())?;
    Ok(deleted as u64)
}

/// A [`QueuedStart`] from the first five columns, [`START_COLUMNS`].
fn start_from_row(row: &Row<'_>) -> StoreResult<QueuedStart> {
    let corrupt = |what: &str, error: &dyn std::fmt::Display| {
        StoreError::Corrupt(format!("run_queue.{what}: {error}"))
    };
    let run_id: String = row.get(0).map_err(|e| corrupt("run_id", &e))?;
    let arguments: String = row.get(3).map_err(|e| corrupt("arguments", &e))?;
    Ok(QueuedStart {
        run_id: RunId::parse(&run_id).map_err(|e| corrupt("run_id", &e))?,
        workflow: row.get(1).map_err(|e| corrupt("workflow", &e))?,
        caller: row.get(2).map_err(|e| corrupt("caller", &e))?,
        arguments: serde_json::from_str(&arguments).map_err(|e| corrupt("arguments", &e))?,
        enqueued_at: row.get(4).map_err(|e| corrupt("enqueued_at", &e))?,
    })
}
