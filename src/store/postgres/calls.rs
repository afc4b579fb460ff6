//! The `calls` table, one row per settled call (journal entry and call record together): the
//! fenced append (one transaction whose first statement locks the run's row on the lease
//! token, then the rows, the superseded marks and the buffered events), the whole-run reads
//! replay needs and the bounded tail status reads. `call_tallies` holds a stopped
//! generation's non-checkpoint count, as in the SQLite store.

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::Row;

use super::connection::{Context, execute, query, query_one, query_opt};
use super::events::insert_events;
use super::rows::{
    RowReader, fenced_run_key, optional_display_text, optional_json, run_key, to_bigint, to_json,
};
use crate::model::{CallKind, CallOrigin, CallOutcome, CallRecord, LiveReason, RunId};
use crate::store::{CallTail, CallWrite, Fence, StoreError, StoreResult};

/// The columns every call read selects.
macro_rules! call_columns {
    () => {
        "generation, call_index, kind, hash, path, inputs_hash, label, phase, outcome, origin, \
         result, error, aborted, attempts, usage, model_requested, model_resolved, backend_id, \
         resolved_cwd, replay, session, settlement_ordinal, superseded_by, changes, live_reason"
    };
}

const ALL: &str = concat!(
    "SELECT ",
    call_columns!(),
    " FROM calls WHERE run_key = $1 ORDER BY generation, settlement_ordinal, call_index"
);
const REPLAY_POOL: &str = concat!(
    "SELECT ",
    call_columns!(),
    " FROM calls WHERE run_key = $1 AND superseded_by IS NULL ORDER BY generation, call_index"
);
const LATEST: &str = concat!(
    "SELECT ",
    call_columns!(),
    " FROM calls WHERE run_key = $1
       AND generation = (SELECT MAX(generation) FROM calls WHERE run_key = $1)
     ORDER BY call_index"
);
const CHECKPOINTS: &str = concat!(
    "SELECT ",
    call_columns!(),
    " FROM calls WHERE run_key = $1 AND kind = 'checkpoint' AND superseded_by IS NULL
     ORDER BY generation, settlement_ordinal, call_index"
);
const TAIL_ROWS: &str = concat!(
    "SELECT ",
    call_columns!(),
    " FROM calls WHERE run_key = $1 AND generation = $2 AND kind != 'checkpoint'
     ORDER BY call_index DESC LIMIT $3"
);
const INSERT: &str = "INSERT INTO calls (run_key, generation, call_index, settlement_ordinal,
         superseded_by, kind, hash, path, inputs_hash, label, phase, outcome, origin,
         aborted, attempts, model_requested, model_resolved, backend_id, resolved_cwd,
         usage, error, replay, session, result, changes, live_reason)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
         $19, $20, $21, $22, $23, $24, $25, $26)";

/// Which whole-run read [`read`] makes.
#[derive(Clone, Copy)]
pub(super) enum Reading {
    All,
    ReplayPool,
    Latest,
    Checkpoints,
}

pub(super) async fn read(
    client: &Client,
    run_id: &RunId,
    reading: Reading,
) -> StoreResult<Vec<CallRecord>> {
    let run_key = run_key(client, run_id).await?;
    let sql = match reading {
        Reading::All => ALL,
        Reading::ReplayPool => REPLAY_POOL,
        Reading::Latest => LATEST,
        Reading::Checkpoints => CHECKPOINTS,
    };
    let rows = query(client, sql, &[&run_key])
        .await
        .context(|| format!("read calls of run {run_id}"))?;
    rows.iter().map(|row| call_from_row(row, run_id)).collect()
}

pub(super) async fn tail(client: &Client, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
    let (run_key, generation, calls) = tail_with_key(client, run_id, limit).await?;
    let Some(generation) = generation else {
        return Ok(CallTail {
            generation: None,
            total: 0,
            calls,
        });
    };
    let doing = || format!("count the calls of generation {generation} of run {run_id}");
    let generation_key = i64::from(generation);
    let recorded = query_opt(
        client,
        "SELECT calls FROM call_tallies WHERE run_key = $1 AND generation = $2",
        &[&run_key, &generation_key],
    )
    .await
    .context(doing)?;
    let total: i64 = match recorded {
        Some(row) => row.get(0),
        None => query_one(
            client,
            "SELECT COUNT(*) FROM calls
             WHERE run_key = $1 AND generation = $2 AND kind != 'checkpoint'",
            &[&run_key, &generation_key],
        )
        .await
        .context(doing)?
        .get(0),
    };
    let total = u64::try_from(total).map_err(|error| {
        StoreError::Corrupt(format!("run {run_id}: column call_tallies.calls: {error}"))
    })?;
    Ok(CallTail {
        generation: Some(generation),
        total,
        calls,
    })
}

pub(super) async fn tail_rows(
    client: &Client,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
    let (_, generation, calls) = tail_with_key(client, run_id, limit).await?;
    Ok((generation, calls))
}

/// The run's key, its latest generation with any row and that generation's last `limit`
/// non-checkpoint rows, ascending.
async fn tail_with_key(
    client: &Client,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(i64, Option<u32>, Vec<CallRecord>)> {
    let doing = || format!("read the last calls of run {run_id}");
    let run_key = run_key(client, run_id).await?;
    let generation: Option<i64> = query_one(
        client,
        "SELECT MAX(generation) FROM calls WHERE run_key = $1",
        &[&run_key],
    )
    .await
    .context(doing)?
    .get(0);
    let Some(generation) = generation else {
        return Ok((run_key, None, Vec::new()));
    };
    let generation = u32::try_from(generation).map_err(|error| {
        StoreError::Corrupt(format!("run {run_id}: column calls.generation: {error}"))
    })?;
    let rows = query(
        client,
        TAIL_ROWS,
        &[&run_key, &i64::from(generation), &i64::from(limit)],
    )
    .await
    .context(doing)?;
    let mut calls = rows
        .iter()
        .map(|row| call_from_row(row, run_id))
        .collect::<StoreResult<Vec<_>>>()?;
    // Read newest first to stop after `limit`; a tail reads oldest first.
    calls.reverse();
    Ok((run_key, Some(generation), calls))
}

pub(super) async fn record_total(
    client: &mut Client,
    run_id: &RunId,
    generation: u32,
    total: u64,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("record the call count of generation {generation} of run {run_id}");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    record_total_in(&transaction, (run_key, run_id), generation, total).await?;
    transaction.commit().await.context(doing)
}

/// [`record_total`]'s row, in the caller's transaction (after its fence).
pub(super) async fn record_total_in(
    client: &impl GenericClient,
    (run_key, run_id): (i64, &RunId),
    generation: u32,
    total: u64,
) -> StoreResult<()> {
    let total = to_bigint(total, "call count")?;
    execute(
        client,
        "INSERT INTO call_tallies (run_key, generation, calls) VALUES ($1, $2, $3)
         ON CONFLICT (run_key, generation) DO UPDATE SET calls = excluded.calls",
        &[&run_key, &i64::from(generation), &total],
    )
    .await
    .context(|| format!("record the call count of generation {generation} of run {run_id}"))?;
    Ok(())
}

pub(super) async fn append(
    client: &mut Client,
    run_id: &RunId,
    writes: &[CallWrite<'_>],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append calls of run {run_id}");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    let mut generations: Vec<u32> = Vec::new();
    for write in writes {
        insert_call(&transaction, run_key, run_id, write.record).await?;
        for &row in write.supersedes {
            supersede(&transaction, run_key, row, write.record.generation, doing).await?;
        }
        insert_events(&transaction, run_key, run_id, write.events).await?;
        if !generations.contains(&write.record.generation) {
            generations.push(write.record.generation);
        }
    }
    // The recorded counts of the generations these rows join no longer hold.
    for generation in generations {
        execute(
            &transaction,
            "DELETE FROM call_tallies WHERE run_key = $1 AND generation = $2",
            &[&run_key, &i64::from(generation)],
        )
        .await
        .context(doing)?;
    }
    transaction.commit().await.context(doing)
}

/// Sets aside rows a resume reruns ([`crate::store::Calls::set_aside_calls`]).
pub(super) async fn set_aside(
    client: &mut Client,
    run_id: &RunId,
    rows: &[(u32, u32)],
    by: u32,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("set aside calls of run {run_id}");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    for &row in rows {
        supersede(&transaction, run_key, row, by, doing).await?;
    }
    transaction.commit().await.context(doing)
}

/// Marks the row `(generation, index)` superseded by generation `by`; a row that does not
/// exist fails the write.
async fn supersede(
    client: &impl GenericClient,
    run_key: i64,
    (generation, index): (u32, u32),
    by: u32,
    doing: impl Fn() -> String,
) -> StoreResult<()> {
    let changed = execute(
        client,
        "UPDATE calls SET superseded_by = $1
         WHERE run_key = $2 AND generation = $3 AND call_index = $4",
        &[
            &i64::from(by),
            &run_key,
            &i64::from(generation),
            &i64::from(index),
        ],
    )
    .await
    .context(&doing)?;
    if changed == 0 {
        return Err(StoreError::Io(format!(
            "{}: call {index} of generation {generation} to supersede does not exist",
            doing()
        )));
    }
    Ok(())
}

async fn insert_call(
    client: &impl GenericClient,
    run_key: i64,
    run_id: &RunId,
    call: &CallRecord,
) -> StoreResult<()> {
    let doing = || {
        format!(
            "record call {} of generation {} of run {run_id}",
            call.index, call.generation
        )
    };
    let settlement_ordinal = to_bigint(call.settlement_ordinal, "settlement ordinal")?;
    let usage = to_json(&call.usage, "call usage")?;
    let error = optional_json(call.error.as_ref(), "call error")?;
    let replay = optional_json(call.replay.as_ref(), "call replay")?;
    let session = optional_json(call.session.as_ref(), "call session")?;
    let result = optional_json(call.result.as_ref(), "call result")?;
    let changes = optional_json(call.changes.as_ref(), "call changes")?;
    let superseded_by = call.superseded_by.map(i64::from);
    let label = optional_display_text(call.label.as_deref());
    let phase = optional_display_text(call.phase.as_deref());
    execute(
        client,
        INSERT,
        &[
            &run_key,
            &i64::from(call.generation),
            &i64::from(call.index),
            &settlement_ordinal,
            &superseded_by,
            &call.kind.as_str(),
            &call.hash,
            &call.path,
            &call.inputs_hash,
            &label,
            &phase,
            &call.outcome.as_str(),
            &call.origin.as_str(),
            &call.aborted,
            &i64::from(call.attempts),
            &call.model_requested,
            &call.model_resolved,
            &call.backend_id,
            &call.resolved_cwd,
            &usage,
            &error,
            &replay,
            &session,
            &result,
            &changes,
            &call.live_reason.map(LiveReason::as_str),
        ],
    )
    .await
    .context(doing)
    .map(drop)
}

fn call_from_row(row: &Row, run_id: &RunId) -> StoreResult<CallRecord> {
    let reader = RowReader::new(row, run_id, "calls");
    Ok(CallRecord {
        generation: reader.u32("generation")?,
        index: reader.u32("call_index")?,
        kind: reader.parsed("kind", CallKind::parse)?,
        hash: reader.string("hash")?,
        path: reader.optional_string("path")?,
        inputs_hash: reader.optional_string("inputs_hash")?,
        label: reader.optional_string("label")?,
        phase: reader.optional_string("phase")?,
        outcome: reader.parsed("outcome", CallOutcome::parse)?,
        origin: reader.parsed("origin", CallOrigin::parse)?,
        result: reader.optional_json("result")?,
        error: reader.optional_json("error")?,
        aborted: reader.get("aborted")?,
        attempts: reader.u32("attempts")?,
        usage: reader.json("usage")?,
        model_requested: reader.optional_string("model_requested")?,
        model_resolved: reader.optional_string("model_resolved")?,
        backend_id: reader.optional_string("backend_id")?,
        resolved_cwd: reader.optional_string("resolved_cwd")?,
        replay: reader.optional_json("replay")?,
        session: reader.optional_json("session")?,
        settlement_ordinal: reader.unsigned("settlement_ordinal")?,
        superseded_by: reader.optional_u32("superseded_by")?,
        changes: reader.optional_json("changes")?,
        live_reason: reader
            .optional_string("live_reason")?
            .map(|text| {
                LiveReason::parse(&text).ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "run {run_id}: column calls.live_reason: unknown value {text:?}"
                    ))
                })
            })
            .transpose()?,
    })
}
