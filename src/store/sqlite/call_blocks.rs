//! The `call_blocks` table: two or more agent calls of one group commit whose keys follow one
//! another (one generation, consecutive indexes), stored as one row whose body is their
//! entries compressed together. The calls a fan-out settles together are mostly neighbours,
//! and a row per call rewrote the last, partly filled leaf of the `calls` tree, its parent and
//! the next leaves on every commit; their block is one row of about a hundred bytes per call
//! (docs/store.md has the figures). `calls.rs` decides what goes into a block and merges the
//! blocks' entries with the plain rows when it reads.
//!
//! A block holds every key from its `first_key` to its `block_key` (the last), so blocks and
//! `calls` rows never share a key, blocks never overlap, and the block that holds a key is the
//! first whose `block_key` is not below it. A call whose entry is larger than [`MAX_ENTRY`],
//! and every checkpoint, is a row of its own.
//!
//! A body, before compressing, is a JSON array with one array per call in key order: the
//! call's settlement ordinal, kind, hash, path, inputs hash, label, phase, outcome, origin,
//! aborted, attempts, requested and resolved model, backend id, resolved working directory,
//! usage, error, replay, session, result, changes and live reason, each as the call record's
//! JSON has it, except the session and the result: `[]` when there is none and `[value]`
//! when there is one, so a result of `null` stays apart from no result. The call's
//! generation and index are its key's. A body is one zstd frame, as an
//! event block's is (`event_blocks.rs`).

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::call_keys::CallKeys;
use super::connection::Context;
use super::event_blocks::{compress, decompress};
use super::rows::to_sql_integer;
use crate::model::{
    CallChanges, CallError, CallKind, CallOrigin, CallOutcome, CallRecord, LiveReason, ReplayInfo,
    RunId, Usage,
};
use crate::store::{StoreError, StoreResult};

/// The largest entry (its JSON) a block takes: a call with a longer result or error is a row
/// of its own, so reading the newest calls of a run never inflates more than a few blocks of
/// small entries.
const MAX_ENTRY: usize = 4096;

/// The most entries in one block. A group commit of a fan-out holds at most 64 calls; a
/// resume's replay writes its calls in larger batches, which this cuts into blocks.
pub(super) const MAX_ENTRIES: usize = 256;

/// A call's entry as written: the columns of its row, positionally.
#[derive(Serialize)]
struct EntryOut<'a>(
    u64,
    &'a str,
    &'a str,
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
    &'a str,
    &'a str,
    bool,
    u32,
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
    &'a Option<String>,
    &'a Usage,
    &'a Option<CallError>,
    &'a Option<ReplayInfo>,
    &'a [Value],
    &'a [Value],
    &'a Option<CallChanges>,
    Option<&'a str>,
);

/// A call's entry as read back, in the order of [`EntryOut`].
#[derive(Deserialize)]
struct EntryIn(
    u64,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
    bool,
    u32,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Usage,
    Option<CallError>,
    Option<ReplayInfo>,
    Vec<Value>,
    Vec<Value>,
    Option<CallChanges>,
    Option<String>,
);

/// How a group's calls are written: each as a row, or a run of neighbours as a block.
pub(super) enum Piece<'w> {
    Row(&'w CallRecord),
    Block(Block<'w>),
}

/// Two to [`MAX_ENTRIES`] calls of one generation with consecutive indexes, and their entries.
pub(super) struct Block<'w> {
    pub(super) calls: Vec<&'w CallRecord>,
    entries: Vec<Vec<u8>>,
}

/// Cuts `ordered` (in key order) into rows and blocks: each run of two or more blockable
/// calls whose keys follow one another is a block, every other call a row.
pub(super) fn pieces<'w>(ordered: &[&'w CallRecord]) -> StoreResult<Vec<Piece<'w>>> {
    let mut pieces = Vec::new();
    let mut run: Vec<(&'w CallRecord, Vec<u8>)> = Vec::new();
    for &call in ordered {
        let entry = if call.kind == CallKind::Agent {
            Some(encode_entry(call)?).filter(|entry| entry.len() <= MAX_ENTRY)
        } else {
            None
        };
        let Some(entry) = entry else {
            flush(&mut run, &mut pieces);
            pieces.push(Piece::Row(call));
            continue;
        };
        let follows = run.last().is_some_and(|(last, _)| {
            last.generation == call.generation && last.index.checked_add(1) == Some(call.index)
        });
        if !follows || run.len() == MAX_ENTRIES {
            flush(&mut run, &mut pieces);
        }
        run.push((call, entry));
    }
    flush(&mut run, &mut pieces);
    Ok(pieces)
}

/// Ends a run of neighbours: a block of two or more, a row of one.
fn flush<'w>(run: &mut Vec<(&'w CallRecord, Vec<u8>)>, pieces: &mut Vec<Piece<'w>>) {
    match run.len() {
        0 => {}
        1 => pieces.push(Piece::Row(run[0].0)),
        _ => {
            let (calls, entries) = run.drain(..).unzip();
            pieces.push(Piece::Block(Block { calls, entries }));
        }
    }
    run.clear();
}

fn encode_entry(call: &CallRecord) -> StoreResult<Vec<u8>> {
    let entry = EntryOut(
        call.settlement_ordinal,
        call.kind.as_str(),
        &call.hash,
        &call.path,
        &call.inputs_hash,
        &call.label,
        &call.phase,
        call.outcome.as_str(),
        call.origin.as_str(),
        call.aborted,
        call.attempts,
        &call.model_requested,
        &call.model_resolved,
        &call.backend_id,
        &call.resolved_cwd,
        &call.usage,
        &call.error,
        &call.replay,
        call.session.as_slice(),
        call.result.as_slice(),
        &call.changes,
        call.live_reason.map(LiveReason::as_str),
    );
    serde_json::to_vec(&entry)
        .map_err(|error| StoreError::Io(format!("encode a call as JSON: {error}")))
}

/// Writes `block` as one row. Refused, naming the call, when a key of it is already a row or
/// in another block: a key is recorded once.
pub(super) fn insert(
    transaction: &Transaction<'_>,
    keys: CallKeys,
    run_id: &RunId,
    block: &Block<'_>,
) -> StoreResult<()> {
    let (Some(first), Some(last)) = (block.calls.first(), block.calls.last()) else {
        return Ok(());
    };
    let doing = || {
        format!(
            "record calls {} to {} of generation {} of run {run_id}",
            first.index, last.index, first.generation
        )
    };
    let first_key = keys.key(first.generation, first.index, run_id)?;
    let last_key = keys.key(last.generation, last.index, run_id)?;
    let row: Option<i64> = transaction
        .prepare_cached("SELECT call_key FROM calls WHERE call_key BETWEEN ?1 AND ?2 LIMIT 1")
        .and_then(|mut statement| {
            statement
                .query_row([first_key, last_key], |row| row.get(0))
                .optional()
        })
        .context(doing)?;
    // A block that holds a key of this one holds `first_key` or begins after it.
    let held = block_holding(transaction, first_key)?
        .filter(|&(_, first)| first <= last_key)
        .map(|(_, first)| first.max(first_key));
    if let Some(key) = row.or(held) {
        let (generation, index) = keys.locate(key).unwrap_or_default();
        return Err(StoreError::Io(format!(
            "{}: call {index} of generation {generation} is already recorded",
            doing()
        )));
    }
    let mut body = Vec::with_capacity(
        block
            .entries
            .iter()
            .map(|entry| entry.len() + 1)
            .sum::<usize>()
            + 2,
    );
    body.push(b'[');
    for (position, entry) in block.entries.iter().enumerate() {
        if position > 0 {
            body.push(b',');
        }
        body.extend_from_slice(entry);
    }
    body.push(b']');
    let stored = compress(&body)?;
    let last_ordinal = block
        .calls
        .iter()
        .map(|call| call.settlement_ordinal)
        .max()
        .unwrap_or_default();
    let last_ordinal = to_sql_integer(last_ordinal, "settlement ordinal")?;
    transaction
        .prepare_cached(
            "INSERT INTO call_blocks (block_key, first_key, last_ordinal, body)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![last_key, first_key, last_ordinal, stored])
        })
        .context(doing)?;
    Ok(())
}

/// The block (its last and first key) that may hold `key`: the first whose last key is not
/// below it. It holds `key` when its first key is not above it.
fn block_holding(connection: &Connection, key: i64) -> StoreResult<Option<(i64, i64)>> {
    connection
        .prepare_cached(
            "SELECT block_key, first_key FROM call_blocks WHERE block_key >= ?1
             ORDER BY block_key LIMIT 1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .context(|| format!("find the call block of key {key}"))
}

/// Whether a block holds `key`.
pub(super) fn holds(connection: &Connection, key: i64) -> StoreResult<bool> {
    Ok(block_holding(connection, key)?.is_some_and(|(_, first)| first <= key))
}

/// The highest key the blocks with keys in `range` hold.
pub(super) const LAST_KEY: &str = "SELECT block_key FROM call_blocks
     WHERE block_key BETWEEN ?1 AND ?2 ORDER BY block_key DESC LIMIT 1";
/// How many calls the blocks with keys in `range` hold.
pub(super) const COUNT: &str = "SELECT COALESCE(SUM(block_key - first_key + 1), 0)
     FROM call_blocks WHERE block_key BETWEEN ?1 AND ?2";
/// The blocks with keys in `range`, newest first.
pub(super) const NEWEST: &str = "SELECT block_key, first_key, body FROM call_blocks
     WHERE block_key BETWEEN ?1 AND ?2 ORDER BY block_key DESC";

pub(super) fn last_key(connection: &Connection, range: [i64; 2]) -> StoreResult<Option<i64>> {
    connection
        .prepare_cached(LAST_KEY)
        .and_then(|mut statement| statement.query_row(range, |row| row.get(0)).optional())
        .context(|| "read the last key of the call blocks".to_owned())
}

pub(super) fn count(connection: &Connection, range: [i64; 2]) -> StoreResult<i64> {
    connection
        .prepare_cached(COUNT)
        .and_then(|mut statement| statement.query_row(range, |row| row.get(0)))
        .context(|| "count the calls of the call blocks".to_owned())
}

/// The highest settlement ordinal among the entries of the blocks with keys in `range`.
pub(super) fn last_ordinal(connection: &Connection, range: [i64; 2]) -> StoreResult<Option<i64>> {
    connection
        .prepare_cached(
            "SELECT MAX(last_ordinal) FROM call_blocks WHERE block_key BETWEEN ?1 AND ?2",
        )
        .and_then(|mut statement| statement.query_row(range, |row| row.get(0)))
        .context(|| "read the last settlement ordinal of the call blocks".to_owned())
}

/// The calls of the blocks with keys in `range`, in key order, without their supersessions
/// (`calls.rs` adds them).
pub(super) fn read(
    connection: &Connection,
    (keys, run_id): (CallKeys, &RunId),
    range: [i64; 2],
) -> StoreResult<Vec<CallRecord>> {
    let doing = || format!("read the call blocks of run {run_id}");
    let mut statement = connection
        .prepare_cached(
            "SELECT block_key, first_key, body FROM call_blocks
             WHERE block_key BETWEEN ?1 AND ?2 ORDER BY block_key",
        )
        .context(doing)?;
    let mut rows = statement.query(range).context(doing)?;
    let mut calls = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let (last, first, body): (i64, i64, Vec<u8>) = (
            row.get(0).context(doing)?,
            row.get(1).context(doing)?,
            row.get(2).context(doing)?,
        );
        calls.extend(decode((keys, run_id), [first, last], &body)?);
    }
    Ok(calls)
}

/// The newest `limit` calls of `found` (each with its key) and of the blocks with keys in
/// `range`, oldest first; the blocks' calls that are kept are made into a `T` by `convert`.
/// The blocks are walked from the range's end; the walk stops at the first block whose last
/// key is below the `limit`-th newest key found so far, since no block after it holds a
/// newer one.
pub(super) fn newest<T>(
    connection: &Connection,
    (keys, run_id): (CallKeys, &RunId),
    range: [i64; 2],
    limit: u32,
    found: Vec<(i64, T)>,
    mut convert: impl FnMut(CallRecord) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let doing = || format!("read the last call blocks of run {run_id}");
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut found: Vec<(i64, Found<T>)> = found
        .into_iter()
        .map(|(key, call)| (key, Found::Row(call)))
        .collect();
    let mut statement = connection.prepare_cached(NEWEST).context(doing)?;
    let mut rows = statement.query(range).context(doing)?;
    while let Some(row) = rows.next().context(doing)? {
        let last: i64 = row.get(0).context(doing)?;
        if limit == 0 || (found.len() >= limit && last < limit_key(&mut found, limit)) {
            break;
        }
        let (first, body): (i64, Vec<u8>) =
            (row.get(1).context(doing)?, row.get(2).context(doing)?);
        for call in decode((keys, run_id), [first, last], &body)? {
            let key = keys.key(call.generation, call.index, run_id)?;
            found.push((key, Found::Block(Box::new(call))));
        }
    }
    found.sort_unstable_by_key(|(key, _)| std::cmp::Reverse(*key));
    found.truncate(limit);
    found.reverse();
    found
        .into_iter()
        .map(|(_, call)| match call {
            Found::Row(call) => Ok(call),
            Found::Block(call) => convert(*call),
        })
        .collect()
}

/// A call [`newest`] found: already what the caller wants, or a block's, made so once kept.
enum Found<T> {
    Row(T),
    Block(Box<CallRecord>),
}

/// The `limit`-th newest key of `found` (which holds at least `limit`).
fn limit_key<T>(found: &mut [(i64, T)], limit: usize) -> i64 {
    found.sort_unstable_by_key(|(key, _)| std::cmp::Reverse(*key));
    found[limit - 1].0
}

/// The supersessions of the run's rows, by generation and index.
pub(super) fn supersessions(
    connection: &Connection,
    run_key: i64,
    run_id: &RunId,
) -> StoreResult<HashMap<(u32, u32), u32>> {
    let doing = || format!("read the supersessions of run {run_id}");
    let mut statement = connection
        .prepare_cached(
            "SELECT generation, call_index, superseded_by FROM call_supersessions
             WHERE run_key = ?1",
        )
        .context(doing)?;
    let rows = statement
        .query_map([run_key], |row| {
            Ok(((row.get(0)?, row.get(1)?), row.get(2)?))
        })
        .context(doing)?;
    rows.collect::<Result<_, _>>().context(doing)
}

/// One call's supersession, if it has one.
pub(super) fn superseded_by(
    connection: &Connection,
    run_key: i64,
    call: &CallRecord,
) -> StoreResult<Option<u32>> {
    connection
        .prepare_cached(
            "SELECT superseded_by FROM call_supersessions
             WHERE run_key = ?1 AND generation = ?2 AND call_index = ?3",
        )
        .and_then(|mut statement| {
            statement
                .query_row(
                    rusqlite::params![run_key, call.generation, call.index],
                    |row| row.get(0),
                )
                .optional()
        })
        .context(|| format!("read the supersession of call {}", call.index))
}

/// A block's calls; anything that is not what [`insert`] writes for keys `first..=last` is
/// `Corrupt`, naming the run and the block.
fn decode(
    (keys, run_id): (CallKeys, &RunId),
    [first, last]: [i64; 2],
    stored: &[u8],
) -> StoreResult<Vec<CallRecord>> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "run {run_id}: table call_blocks, block of keys {first} to {last}: {what}"
        ))
    };
    let (Some((generation, index)), Some((last_generation, last_index))) =
        (keys.locate(first), keys.locate(last))
    else {
        return Err(corrupt("its keys are not the run's"));
    };
    if generation != last_generation || last_index < index {
        return Err(corrupt("its keys are not one generation's, in order"));
    }
    let body = decompress(stored).map_err(|what| corrupt(&what))?;
    let entries: Vec<EntryIn> = serde_json::from_slice(&body)
        .map_err(|error| corrupt(&format!("the body is not its entries ({error})")))?;
    if entries.len() != (last_index - index) as usize + 1 {
        return Err(corrupt(&format!(
            "it holds {} entries for {} keys",
            entries.len(),
            last_index - index + 1
        )));
    }
    (index..)
        .zip(entries)
        .map(|(index, entry)| {
            let EntryIn(
                settlement_ordinal,
                kind,
                hash,
                path,
                inputs_hash,
                label,
                phase,
                outcome,
                origin,
                aborted,
                attempts,
                model_requested,
                model_resolved,
                backend_id,
                resolved_cwd,
                usage,
                error,
                replay,
                session,
                result,
                changes,
                live_reason,
            ) = entry;
            let unknown =
                |column: &str, text: &str| corrupt(&format!("{column}: unknown value {text:?}"));
            let optional = |column: &str, values: Vec<Value>| {
                if values.len() > 1 {
                    return Err(corrupt(&format!("{column}: more than one value")));
                }
                Ok(values.into_iter().next())
            };
            Ok(CallRecord {
                generation,
                index,
                kind: CallKind::parse(&kind).ok_or_else(|| unknown("kind", &kind))?,
                hash,
                path,
                inputs_hash,
                label,
                phase,
                outcome: CallOutcome::parse(&outcome)
                    .ok_or_else(|| unknown("outcome", &outcome))?,
                origin: CallOrigin::parse(&origin).ok_or_else(|| unknown("origin", &origin))?,
                result: optional("result", result)?,
                error,
                aborted,
                attempts,
                usage,
                model_requested,
                model_resolved,
                backend_id,
                resolved_cwd,
                replay,
                session: optional("session", session)?,
                settlement_ordinal,
                superseded_by: None,
                changes,
                live_reason: live_reason
                    .map(|text| {
                        LiveReason::parse(&text).ok_or_else(|| unknown("live_reason", &text))
                    })
                    .transpose()?,
            })
        })
        .collect()
}
