//! The `calls` table, one row per settled call (journal entry and call record together), or
//! for neighbours settled together an entry of a `call_blocks` row (`call_blocks.rs`, which
//! the reads here merge in key order): the fenced append that also supersedes replayed rows
//! and appends the buffered events, the whole-run reads replay needs, and the bounded tail
//! status reads. `call_tallies` holds a generation's non-checkpoint count, recorded once when
//! the generation stops running (the driver counts in memory while it runs), so the tail of
//! a stopped generation never counts and a settled call writes no page but its own. A call
//! appended to a generation drops that generation's recorded count, so a count that stands
//! is never stale; a generation without one (still running, or its process died) is counted.

use rusqlite::types::FromSql;
use rusqlite::{Connection, OptionalExtension, Row, Transaction};
use serde::de::DeserializeOwned;

use super::call_blocks::{self, Piece};
use super::call_keys::{CallKeys, latest_generation};
use super::connection::{Context, write_transaction};
use super::events::insert_events;
use super::rows::{RowReader, fenced_run_key, optional_json, run_key, to_sql_integer};
use crate::model::{CallKind, CallOrigin, CallOutcome, CallRecord, LiveReason, OpenSession, RunId};
use crate::store::{CallTail, CallWrite, Fence, StoreError, StoreResult};

/// The columns every call read selects, in the order of [`CALL_COLUMNS`], from
/// [`calls_from!`]: read by position, since looking a column up by name costs a scan of the
/// row's column names per field. A row's supersession is its `call_supersessions` entry.
macro_rules! call_columns {
    () => {
        "c.generation, c.call_index, c.kind, c.hash, c.path, c.inputs_hash, c.label, c.phase, \
         c.outcome, c.origin, c.result, c.error, c.aborted, c.attempts, c.usage, \
         c.model_requested, c.model_resolved, c.backend_id, c.resolved_cwd, c.replay, \
         c.session, c.settlement_ordinal, s.superseded_by, c.changes, c.live_reason"
    };
}

/// The call rows `c` with their supersessions `s`: one primary-key lookup per row, in a table
/// that holds only the rows a resume replayed or re-executed.
macro_rules! calls_from {
    () => {
        " FROM calls c LEFT JOIN call_supersessions s
             ON s.run_key = c.run_key AND s.generation = c.generation
                AND s.call_index = c.call_index"
    };
}

/// Whether a row is superseded, in the terms of [`calls_from!`].
macro_rules! not_superseded {
    () => {
        "s.superseded_by IS NULL"
    };
}

/// The names of [`call_columns!`] by position, for the messages about bad stored data.
const CALL_COLUMNS: [&str; 25] = [
    "generation",
    "call_index",
    "kind",
    "hash",
    "path",
    "inputs_hash",
    "label",
    "phase",
    "outcome",
    "origin",
    "result",
    "error",
    "aborted",
    "attempts",
    "usage",
    "model_requested",
    "model_resolved",
    "backend_id",
    "resolved_cwd",
    "replay",
    "session",
    "settlement_ordinal",
    "superseded_by",
    "changes",
    "live_reason",
];

/// Its non-checkpoint count, as recorded when it stopped running.
pub(super) const TAIL_COUNT: &str =
    "SELECT calls FROM call_tallies WHERE run_key = ?1 AND generation = ?2";
/// Its non-checkpoint count, counted over its key range: only for a generation without a
/// recorded count.
pub(super) const TAIL_COUNTED: &str = "SELECT COUNT(*) FROM calls
     WHERE call_key BETWEEN ?1 AND ?2 AND kind != 'checkpoint'";
/// The run's checkpoint rows, through the partial index `calls_checkpoints`.
pub(super) const CHECKPOINT_ROWS: &str = concat!(
    "SELECT ",
    call_columns!(),
    calls_from!(),
    " WHERE c.run_key = ?1 AND c.kind = 'checkpoint' AND ",
    not_superseded!(),
    " ORDER BY c.generation, c.settlement_ordinal, c.call_index"
);
/// A generation's last rows: its key range walked backwards from its end.
pub(super) const TAIL_ROWS: &str = concat!(
    "SELECT ",
    call_columns!(),
    calls_from!(),
    " WHERE c.call_key BETWEEN ?1 AND ?2 AND c.kind != 'checkpoint'
     ORDER BY c.call_key DESC LIMIT ?3"
);

/// Every call of the run, rows and blocks, ordered by (generation, settlement ordinal).
pub(super) fn all(connection: &Connection, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
    let keys = run_keys(connection, run_id)?;
    let mut calls = query_calls(
        connection,
        concat!(
            "SELECT ",
            call_columns!(),
            calls_from!(),
            " WHERE c.call_key BETWEEN ?1 AND ?2
             ORDER BY c.generation, c.settlement_ordinal, c.call_index"
        ),
        keys.run(),
        run_id,
    )?;
    if with_blocks(connection, keys, run_id, keys.run(), &mut calls)? {
        calls.sort_by_key(|call| (call.generation, call.settlement_ordinal, call.index));
    }
    Ok(calls)
}

/// Adds the calls of the blocks with keys in `range` to `calls`, with their supersessions;
/// whether there were any.
fn with_blocks(
    connection: &Connection,
    keys: CallKeys,
    run_id: &RunId,
    range: [i64; 2],
    calls: &mut Vec<CallRecord>,
) -> StoreResult<bool> {
    let mut blocked = call_blocks::read(connection, (keys, run_id), range)?;
    if blocked.is_empty() {
        return Ok(false);
    }
    let superseded = call_blocks::supersessions(connection, keys.run_key(), run_id)?;
    for call in &mut blocked {
        call.superseded_by = superseded.get(&(call.generation, call.index)).copied();
    }
    calls.append(&mut blocked);
    Ok(true)
}

/// One past the highest settlement ordinal of the run's calls (0 without any), read from the
/// rows and the blocks' `last_ordinal` without building records.
pub(super) fn next_settlement_ordinal(connection: &Connection, run_id: &RunId) -> StoreResult<u64> {
    let doing = || format!("read the last settlement ordinal of run {run_id}");
    let keys = run_keys(connection, run_id)?;
    let row: Option<i64> = connection
        .prepare_cached(
            "SELECT MAX(settlement_ordinal) FROM calls WHERE call_key BETWEEN ?1 AND ?2",
        )
        .and_then(|mut statement| statement.query_row(keys.run(), |row| row.get(0)))
        .context(doing)?;
    let block = call_blocks::last_ordinal(connection, keys.run())?;
    let Some(highest) = row.max(block) else {
        return Ok(0);
    };
    u64::try_from(highest)
        .ok()
        .and_then(|highest| highest.checked_add(1))
        .ok_or_else(|| {
            StoreError::Corrupt(format!(
                "run {run_id}: column calls.settlement_ordinal: {highest} is out of range"
            ))
        })
}

/// Calls not superseded yet, rows and blocks, by (generation, index).
pub(super) fn replay_pool(connection: &Connection, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
    let keys = run_keys(connection, run_id)?;
    let mut calls = query_calls(
        connection,
        concat!(
            "SELECT ",
            call_columns!(),
            calls_from!(),
            " WHERE c.call_key BETWEEN ?1 AND ?2 AND ",
            not_superseded!(),
            " ORDER BY c.call_key"
        ),
        keys.run(),
        run_id,
    )?;
    if with_blocks(connection, keys, run_id, keys.run(), &mut calls)? {
        calls.retain(|call| call.superseded_by.is_none());
        calls.sort_by_key(|call| (call.generation, call.index));
    }
    Ok(calls)
}

/// The calls of the latest generation that has any, rows and blocks, by index.
pub(super) fn latest(connection: &Connection, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
    let keys = run_keys(connection, run_id)?;
    let Some(generation) = latest_generation(connection, keys, run_id)? else {
        return Ok(Vec::new());
    };
    let range = keys.generation(generation, run_id)?;
    let mut calls = query_calls(
        connection,
        concat!(
            "SELECT ",
            call_columns!(),
            calls_from!(),
            " WHERE c.call_key BETWEEN ?1 AND ?2 ORDER BY c.call_key"
        ),
        range,
        run_id,
    )?;
    if with_blocks(connection, keys, run_id, range, &mut calls)? {
        calls.sort_by_key(|call| call.index);
    }
    Ok(calls)
}

/// The checkpoint rows not superseded, through the partial index `calls_checkpoints`.
pub(super) fn checkpoints(connection: &Connection, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
    let run_key = run_key(connection, run_id)?;
    query_calls(connection, CHECKPOINT_ROWS, [run_key], run_id)
}

/// The key range of the run's call rows.
pub(super) fn run_keys(connection: &Connection, run_id: &RunId) -> StoreResult<CallKeys> {
    CallKeys::of(run_key(connection, run_id)?, run_id)
}

/// The latest generation's count and last `limit` non-checkpoint rows (see [`tail_rows`]):
/// the count recorded when the generation stopped, else counted.
pub(super) fn tail(connection: &Connection, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
    let (generation, calls) = tail_rows(connection, run_id, limit)?;
    let Some(generation) = generation else {
        return Ok(CallTail {
            generation: None,
            total: 0,
            calls,
        });
    };
    let keys = run_keys(connection, run_id)?;
    let total = generation_total(connection, run_id, keys, generation)?;
    Ok(CallTail {
        generation: Some(generation),
        total,
        calls,
    })
}

/// A generation's non-checkpoint count: recorded when it stopped, else counted.
pub(super) fn generation_total(
    connection: &Connection,
    run_id: &RunId,
    keys: CallKeys,
    generation: u32,
) -> StoreResult<u64> {
    let doing = || format!("count the calls of generation {generation} of run {run_id}");
    let range = keys.generation(generation, run_id)?;
    let recorded: Option<i64> = connection
        .prepare_cached(TAIL_COUNT)
        .and_then(|mut statement| {
            statement
                .query_row(rusqlite::params![keys.run_key(), generation], |row| {
                    row.get(0)
                })
                .optional()
        })
        .context(doing)?;
    let total = match recorded {
        Some(total) => total,
        None => {
            let rows: i64 = connection
                .prepare_cached(TAIL_COUNTED)
                .and_then(|mut statement| statement.query_row(range, |row| row.get(0)))
                .context(doing)?;
            rows + call_blocks::count(connection, range)?
        }
    };
    u64::try_from(total).map_err(|error| {
        StoreError::Corrupt(format!("run {run_id}: column call_tallies.calls: {error}"))
    })
}

/// The latest generation with any row and its last `limit` non-checkpoint rows, ascending:
/// the generation from the run's last key (one descent), the rows by walking the
/// generation's key range backwards from its end. Checkpoint rows met on the way are
/// skipped; there are as few as there are questions to a human.
pub(super) fn tail_rows(
    connection: &Connection,
    run_id: &RunId,
    limit: u32,
) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
    let doing = || format!("read the last calls of run {run_id}");
    let keys = run_keys(connection, run_id)?;
    let Some(generation) = latest_generation(connection, keys, run_id)? else {
        return Ok((None, Vec::new()));
    };
    let [first, last] = keys.generation(generation, run_id)?;
    let mut statement = connection.prepare_cached(TAIL_ROWS).context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![first, last, limit])
        .context(doing)?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let call = call_from_row(row, run_id)?;
        found.push((keys.key(call.generation, call.index, run_id)?, call));
    }
    let calls = call_blocks::newest(
        connection,
        (keys, run_id),
        [first, last],
        limit,
        found,
        |mut call| {
            call.superseded_by = call_blocks::superseded_by(connection, keys.run_key(), &call)?;
            Ok(call)
        },
    )?;
    Ok((Some(generation), calls))
}

/// Records `generation`'s non-checkpoint count once it stopped running, fenced.
pub(super) fn record_total(
    connection: &mut Connection,
    run_id: &RunId,
    generation: u32,
    total: u64,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("record the call count of generation {generation} of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    record_total_in(&transaction, (run_key, run_id), generation, total)?;
    transaction.commit().context(doing)
}

/// [`record_total`]'s row for the run `run_key` (already fenced) inside `transaction`.
pub(super) fn record_total_in(
    transaction: &Transaction<'_>,
    (run_key, run_id): (i64, &RunId),
    generation: u32,
    total: u64,
) -> StoreResult<()> {
    let doing = || format!("record the call count of generation {generation} of run {run_id}");
    let total = to_sql_integer(total, "call count")?;
    transaction
        .prepare_cached(
            "INSERT INTO call_tallies (run_key, generation, calls) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_key, generation) DO UPDATE SET calls = excluded.calls",
        )
        .and_then(|mut statement| statement.execute(rusqlite::params![run_key, generation, total]))
        .context(doing)?;
    Ok(())
}

pub(super) fn append(
    connection: &mut Connection,
    run_id: &RunId,
    writes: &[CallWrite<'_>],
    fence: Fence<'_>,
) -> StoreResult<()> {
    commit_group(connection, run_id, &[], writes, fence)
}

/// Journals `sessions` and appends `writes` in one transaction ([`crate::store::Calls::commit_group`]).
pub(super) fn commit_group(
    connection: &mut Connection,
    run_id: &RunId,
    sessions: &[OpenSession],
    writes: &[CallWrite<'_>],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append calls of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    let keys = CallKeys::of(run_key, run_id)?;
    for session in sessions {
        super::sessions::insert(&transaction, run_key, run_id, session)?;
    }
    // In key order, whatever order the calls settled in: a key above every key of the table
    // is an append to its last page, and one below it would split a page in the middle; and
    // neighbours in key order make blocks.
    let mut ordered: Vec<&CallRecord> = writes.iter().map(|write| write.record).collect();
    ordered.sort_by_key(|call| (call.generation, call.index));
    for piece in call_blocks::pieces(&ordered)? {
        match piece {
            Piece::Row(call) => insert_call(&transaction, keys, run_id, call)?,
            Piece::Block(block) => {
                call_blocks::insert(&transaction, keys, run_id, &block)?;
                for call in &block.calls {
                    insert_handed_supersession(&transaction, keys, run_id, call)?;
                }
            }
        }
    }
    for write in writes {
        for &row in write.supersedes {
            supersede(
                &transaction,
                (keys, run_id),
                row,
                write.record.generation,
                doing,
            )?;
        }
    }
    let events = writes.iter().flat_map(|write| write.events);
    insert_events(&transaction, run_key, run_id, events)?;
    forget_totals(&transaction, run_key, run_id, writes)?;
    transaction.commit().context(doing)
}

/// Sets aside rows a resume reruns ([`crate::store::Calls::set_aside_calls`]).
pub(super) fn set_aside(
    connection: &mut Connection,
    run_id: &RunId,
    rows: &[(u32, u32)],
    by: u32,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("set aside calls of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let keys = CallKeys::of(fenced_run_key(&transaction, run_id, fence)?, run_id)?;
    for &row in rows {
        supersede(&transaction, (keys, run_id), row, by, doing)?;
    }
    transaction.commit().context(doing)
}

/// Marks the row `(generation, index)` superseded by generation `by`. Only a row that
/// exists is superseded; a row superseded again takes the later generation.
fn supersede(
    transaction: &Transaction<'_>,
    (keys, run_id): (CallKeys, &RunId),
    (generation, index): (u32, u32),
    by: u32,
    doing: impl Fn() -> String,
) -> StoreResult<()> {
    let key = keys.key(generation, index, run_id)?;
    let row: Option<i64> = transaction
        .prepare_cached("SELECT call_key FROM calls WHERE call_key = ?1")
        .and_then(|mut statement| statement.query_row([key], |row| row.get(0)).optional())
        .context(&doing)?;
    if row.is_none() && !call_blocks::holds(transaction, key)? {
        return Err(StoreError::Io(format!(
            "{}: call {index} of generation {generation} to supersede does not exist",
            doing()
        )));
    }
    transaction
        .prepare_cached(
            "INSERT INTO call_supersessions (run_key, generation, call_index, superseded_by)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (run_key, generation, call_index)
                 DO UPDATE SET superseded_by = excluded.superseded_by",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![keys.run_key(), generation, index, by])
        })
        .context(&doing)?;
    Ok(())
}

fn insert_call(
    transaction: &Transaction<'_>,
    keys: CallKeys,
    run_id: &RunId,
    call: &CallRecord,
) -> StoreResult<()> {
    let doing = || {
        format!(
            "record call {} of generation {} of run {run_id}",
            call.index, call.generation
        )
    };
    let key = keys.key(call.generation, call.index, run_id)?;
    if call_blocks::holds(transaction, key)? {
        return Err(StoreError::Io(format!(
            "{}: the call is already recorded",
            doing()
        )));
    }
    let settlement_ordinal = to_sql_integer(call.settlement_ordinal, "settlement ordinal")?;
    let usage = super::usage_column::stored(&call.usage);
    let error = optional_json(call.error.as_ref(), "call error")?;
    let replay = optional_json(call.replay.as_ref(), "call replay")?;
    let session = optional_json(call.session.as_ref(), "call session")?;
    let result = optional_json(call.result.as_ref(), "call result")?;
    let changes = optional_json(call.changes.as_ref(), "call changes")?;
    transaction
        .prepare_cached(
            "INSERT INTO calls (call_key, settlement_ordinal, kind, hash, path, inputs_hash,
                 label, phase, outcome, origin, aborted, attempts, model_requested,
                 model_resolved, backend_id, resolved_cwd, usage, error, replay, session,
                 result, changes, live_reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19, ?20, ?21, ?22, ?23)",
        )
        // Positional, in the columns' order: binding 23 names looks each one up among all.
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                key,
                settlement_ordinal,
                call.kind.as_str(),
                super::hashes::stored(&call.hash),
                call.path,
                super::hashes::stored_optional(call.inputs_hash.as_deref()),
                call.label,
                call.phase,
                call.outcome.as_str(),
                call.origin.as_str(),
                call.aborted,
                call.attempts,
                call.model_requested,
                call.model_resolved,
                call.backend_id,
                call.resolved_cwd,
                usage,
                error,
                replay,
                session,
                result,
                changes,
                call.live_reason.map(LiveReason::as_str),
            ])
        })
        .context(doing)?;
    insert_handed_supersession(transaction, keys, run_id, call)
}

/// A record handed over already superseded keeps that as its supersession row.
fn insert_handed_supersession(
    transaction: &Transaction<'_>,
    keys: CallKeys,
    run_id: &RunId,
    call: &CallRecord,
) -> StoreResult<()> {
    let doing = || {
        format!(
            "record the supersession of call {} of generation {} of run {run_id}",
            call.index, call.generation
        )
    };
    if let Some(superseded_by) = call.superseded_by {
        transaction
            .prepare_cached(
                "INSERT INTO call_supersessions (run_key, generation, call_index, superseded_by)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut statement| {
                statement.execute(rusqlite::params![
                    keys.run_key(),
                    call.generation,
                    call.index,
                    superseded_by
                ])
            })
            .context(doing)?;
    }
    Ok(())
}

/// Drops the recorded counts of the generations `writes` add rows to: they no longer hold.
/// While a generation runs it has none, so this finds nothing and writes no page.
fn forget_totals(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    writes: &[CallWrite<'_>],
) -> StoreResult<()> {
    let mut generations: Vec<u32> = writes.iter().map(|write| write.record.generation).collect();
    generations.dedup();
    for generation in generations {
        transaction
            .prepare_cached("DELETE FROM call_tallies WHERE run_key = ?1 AND generation = ?2")
            .and_then(|mut statement| statement.execute(rusqlite::params![run_key, generation]))
            .context(|| {
                format!("drop the call count of generation {generation} of run {run_id}")
            })?;
    }
    Ok(())
}

fn query_calls(
    connection: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    run_id: &RunId,
) -> StoreResult<Vec<CallRecord>> {
    let doing = || format!("read calls of run {run_id}");
    let mut statement = connection.prepare_cached(sql).context(doing)?;
    let mut rows = statement.query(params).context(doing)?;
    let mut calls = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        calls.push(call_from_row(row, run_id)?);
    }
    Ok(calls)
}

/// A call row of a query that selected [`call_columns!`].
pub(super) fn call_from_row(row: &Row<'_>, run_id: &RunId) -> StoreResult<CallRecord> {
    let columns = Columns {
        row,
        reader: RowReader::new(row, run_id, "calls"),
    };
    Ok(CallRecord {
        generation: columns.get(0)?,
        index: columns.get(1)?,
        kind: columns.parsed(2, CallKind::parse)?,
        hash: columns.hash(3)?,
        path: columns.get(4)?,
        inputs_hash: columns.optional_hash(5)?,
        label: columns.get(6)?,
        phase: columns.get(7)?,
        outcome: columns.parsed(8, CallOutcome::parse)?,
        origin: columns.parsed(9, CallOrigin::parse)?,
        result: columns.optional_json(10)?,
        error: columns.optional_json(11)?,
        aborted: columns.get(12)?,
        attempts: columns.get(13)?,
        usage: columns.usage(14)?,
        model_requested: columns.get(15)?,
        model_resolved: columns.get(16)?,
        backend_id: columns.get(17)?,
        resolved_cwd: columns.get(18)?,
        replay: columns.optional_json(19)?,
        session: columns.optional_json(20)?,
        settlement_ordinal: columns.unsigned(21)?,
        superseded_by: columns.get(22)?,
        changes: columns.optional_json(23)?,
        live_reason: columns.optional_parsed(24, LiveReason::parse)?,
    })
}

/// Typed reads of a call row by position; bad stored data is `Corrupt`, named as
/// [`RowReader`] names it.
struct Columns<'row, 'statement> {
    row: &'row Row<'statement>,
    reader: RowReader<'row, 'statement>,
}

impl Columns<'_, '_> {
    fn get<T: FromSql>(&self, index: usize) -> StoreResult<T> {
        self.row
            .get(index)
            .map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    /// A hash column, stored as bytes or text (`hashes`).
    fn hash(&self, index: usize) -> StoreResult<String> {
        let value = self.value(index)?;
        super::hashes::read(value).map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    fn optional_hash(&self, index: usize) -> StoreResult<Option<String>> {
        let value = self.value(index)?;
        super::hashes::read_optional(value)
            .map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    fn value(&self, index: usize) -> StoreResult<rusqlite::types::ValueRef<'_>> {
        self.row
            .get_ref(index)
            .map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    /// The usage column, stored as `usage_column` writes it.
    fn usage(&self, index: usize) -> StoreResult<crate::model::Usage> {
        let text: String = self.get(index)?;
        super::usage_column::read(&text)
            .map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    fn unsigned(&self, index: usize) -> StoreResult<u64> {
        let value: i64 = self.get(index)?;
        u64::try_from(value).map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
    }

    fn optional_json<T: DeserializeOwned>(&self, index: usize) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(index)?;
        text.map(|text| {
            serde_json::from_str(&text)
                .map_err(|error| self.reader.corrupt(CALL_COLUMNS[index], error))
        })
        .transpose()
    }

    fn parsed<T>(&self, index: usize, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text: String = self.get(index)?;
        parse(&text).ok_or_else(|| {
            self.reader
                .corrupt(CALL_COLUMNS[index], format!("unknown value {text:?}"))
        })
    }

    fn optional_parsed<T>(
        &self,
        index: usize,
        parse: fn(&str) -> Option<T>,
    ) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(index)?;
        text.map(|text| {
            parse(&text).ok_or_else(|| {
                self.reader
                    .corrupt(CALL_COLUMNS[index], format!("unknown value {text:?}"))
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::CALL_COLUMNS;

    /// The names by position are the columns the queries select, in that order.
    #[test]
    fn the_column_names_follow_the_selected_columns() {
        let selected: Vec<&str> = call_columns!()
            .split(", ")
            .map(|column| {
                let column = column.trim();
                column
                    .strip_prefix("c.")
                    .or_else(|| column.strip_prefix("s."))
                    .unwrap_or(column)
            })
            .collect();
        assert_eq!(selected, CALL_COLUMNS);
    }
}
