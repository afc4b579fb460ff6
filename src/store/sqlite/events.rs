//! The `events` table, each run's append-only event stream with `seq` dense from 1: the
//! checked append (inside the caller's transaction, so a call and its events commit
//! together), pages by cursor, and the log tail.

use rusqlite::{Connection, Transaction};
use serde_json::Value;

use super::connection::{Context, write_transaction};
use super::rows::{RowReader, fenced_run_key, run_key, to_json, to_sql_integer};
use crate::model::{EventRecord, RunId};
use crate::store::{Fence, StoreError, StoreResult};

/// Appends `events` under the lease `fence` holds.
pub(super) fn append(
    connection: &mut Connection,
    run_id: &RunId,
    events: &[EventRecord],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append events of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    insert_events(&transaction, run_key, run_id, events)?;
    transaction.commit().context(doing)
}

/// The highest event seq of the run (0 when none).
pub(super) fn last_event_seq(connection: &Connection, run_id: &RunId) -> StoreResult<u64> {
    let run_key = run_key(connection, run_id)?;
    last_seq(connection, run_key, run_id)
}

pub(super) fn page(
    connection: &Connection,
    run_id: &RunId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let doing = || format!("read events of run {run_id}");
    let run_key = run_key(connection, run_id)?;
    // A cursor beyond what SQLite integers hold can only mean "after everything".
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut statement = connection
        .prepare_cached(
            "SELECT seq, timestamp, redacted, truncated, event FROM events
             WHERE run_key = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![run_key, after, limit])
        .context(doing)?;
    let mut events = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "events");
        events.push(EventRecord {
            seq: reader.unsigned("seq")?,
            timestamp: reader.get("timestamp")?,
            event: reader.json("event")?,
            redacted: reader.get("redacted")?,
            truncated: reader.get("truncated")?,
        });
    }
    Ok(events)
}

pub(super) fn log_tail(
    connection: &Connection,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(Vec<String>, u64)> {
    let doing = || format!("read the log of run {run_id}");
    let run_key = run_key(connection, run_id)?;
    let total: i64 = connection
        .prepare_cached("SELECT COUNT(*) FROM events WHERE run_key = ?1 AND event_type = 'log'")
        .and_then(|mut statement| statement.query_row([run_key], |row| row.get(0)))
        .context(doing)?;
    let mut statement = connection
        .prepare_cached(
            "SELECT seq, event FROM events WHERE run_key = ?1 AND event_type = 'log'
             ORDER BY seq DESC LIMIT ?2",
        )
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![run_key, limit])
        .context(doing)?;
    let mut lines = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "events");
        let seq = reader.unsigned("seq")?;
        let event: Value = reader.json("event")?;
        let message = event
            .get("message")
            .and_then(Value::as_str)
            .ok_or_else(|| reader.corrupt("event", format!("log event {seq} has no message")))?;
        lines.push(message.to_owned());
    }
    // Read newest first to stop after `limit`; a tail reads oldest first.
    lines.reverse();
    let total = u64::try_from(total).unwrap_or_default();
    Ok((lines, total))
}

/// Appends events after checking that they continue the run's stream densely.
pub(super) fn insert_events(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    events: &[EventRecord],
) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let doing = || format!("append events of run {run_id}");
    let first_seq = last_seq(transaction, run_key, run_id)? + 1;
    let mut statement = transaction
        .prepare_cached(
            "INSERT INTO events (run_key, seq, event_type, timestamp, redacted, truncated, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .context(doing)?;
    for (expected, event) in (first_seq..).zip(events) {
        if event.seq != expected {
            return Err(StoreError::Io(format!(
                "{}: event seq {} does not continue the stream, expected {expected}",
                doing(),
                event.seq
            )));
        }
        let seq = to_sql_integer(event.seq, "event seq")?;
        let event_type = event
            .event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let event_json = to_json(&event.event, "event")?;
        statement
            .execute(rusqlite::params![
                run_key,
                seq,
                event_type,
                event.timestamp,
                event.redacted,
                event.truncated,
                event_json
            ])
            .context(doing)?;
    }
    Ok(())
}

pub(super) fn last_seq(connection: &Connection, run_key: i64, run_id: &RunId) -> StoreResult<u64> {
    let last: i64 = connection
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_key = ?1")
        .and_then(|mut statement| statement.query_row([run_key], |row| row.get(0)))
        .context(|| format!("read the last event seq of run {run_id}"))?;
    u64::try_from(last)
        .map_err(|error| StoreError::Corrupt(format!("run {run_id}: column events.seq: {error}")))
}
