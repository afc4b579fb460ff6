//! The `events` table, each run's append-only event stream with `seq` dense from 1: the
//! checked append (inside a fenced transaction, which holds the run's row lock, so two
//! appenders never read the same last seq), pages by cursor, and the log tail.

use deadpool_postgres::{Client, GenericClient};
use serde_json::Value;

use super::connection::{Context, execute, query, query_one};
use super::rows::{RowReader, fenced_run_key, run_key, to_bigint};
use crate::model::{EventRecord, RunId};
use crate::store::{Fence, StoreError, StoreResult};

pub(super) async fn append(
    client: &mut Client,
    run_id: &RunId,
    events: &[EventRecord],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append events of run {run_id}");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    insert_events(&transaction, run_key, run_id, events).await?;
    transaction.commit().await.context(doing)
}

pub(super) async fn last_event_seq(client: &Client, run_id: &RunId) -> StoreResult<u64> {
    let run_key = run_key(client, run_id).await?;
    last_seq(client, run_key, run_id).await
}

pub(super) async fn page(
    client: &Client,
    run_id: &RunId,
    after: u64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let run_key = run_key(client, run_id).await?;
    // A cursor beyond what BIGINT holds can only mean "after everything".
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = query(
        client,
        "SELECT seq, timestamp, redacted, truncated, event FROM events
         WHERE run_key = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        &[&run_key, &after, &i64::from(limit)],
    )
    .await
    .context(|| format!("read events of run {run_id}"))?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
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

pub(super) async fn log_tail(
    client: &Client,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(Vec<String>, u64)> {
    let doing = || format!("read the log of run {run_id}");
    let run_key = run_key(client, run_id).await?;
    let total: i64 = query_one(
        client,
        "SELECT COUNT(*) FROM events WHERE run_key = $1 AND event_type = 'log'",
        &[&run_key],
    )
    .await
    .context(doing)?
    .get(0);
    let rows = query(
        client,
        "SELECT seq, event FROM events WHERE run_key = $1 AND event_type = 'log'
         ORDER BY seq DESC LIMIT $2",
        &[&run_key, &i64::from(limit)],
    )
    .await
    .context(doing)?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in &rows {
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
    Ok((lines, u64::try_from(total).unwrap_or_default()))
}

/// Appends events after checking that they continue the run's stream densely. Called inside
/// a fenced transaction.
pub(super) async fn insert_events(
    client: &impl GenericClient,
    run_key: i64,
    run_id: &RunId,
    events: &[EventRecord],
) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let doing = || format!("append events of run {run_id}");
    let first_seq = last_seq(client, run_key, run_id).await? + 1;
    for (expected, event) in (first_seq..).zip(events) {
        if event.seq != expected {
            return Err(StoreError::Io(format!(
                "{}: event seq {} does not continue the stream, expected {expected}",
                doing(),
                event.seq
            )));
        }
        let seq = to_bigint(event.seq, "event seq")?;
        let event_type = event.event.event_type().unwrap_or_default();
        let event_type: &str = &event_type;
        let event_json = event.event.as_str();
        execute(
            client,
            "INSERT INTO events (run_key, seq, event_type, timestamp, redacted, truncated, event)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &run_key,
                &seq,
                &event_type,
                &event.timestamp,
                &event.redacted,
                &event.truncated,
                &event_json,
            ],
        )
        .await
        .context(doing)?;
    }
    Ok(())
}

async fn last_seq(client: &impl GenericClient, run_key: i64, run_id: &RunId) -> StoreResult<u64> {
    let last: i64 = query_one(
        client,
        "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM events WHERE run_key = $1",
        &[&run_key],
    )
    .await
    .context(|| format!("read the last event seq of run {run_id}"))?
    .get(0);
    u64::try_from(last)
        .map_err(|error| StoreError::Corrupt(format!("run {run_id}: column events.seq: {error}")))
}
