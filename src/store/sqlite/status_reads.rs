//! The narrow call read `status` makes (`Store::status_call_tail`): the latest generation's
//! last rows with only the columns a status entry shows, read by position, so no usage,
//! replay, session, hash or path column is read or parsed. The generation, the count and the
//! row order are those of `calls.rs`'s tail, through the same statements' keys.

use rusqlite::types::FromSql;
use rusqlite::{Connection, Row};
use serde::de::DeserializeOwned;

use super::call_keys::latest_generation;
use super::calls::{generation_total, run_keys};
use super::connection::Context;
use super::rows::RowReader;
use crate::model::{CallKind, CallOrigin, CallOutcome, LiveReason, RunId};
use crate::store::{CallSummary, StoreResult, SummaryTail};

/// The shown columns, in the order [`SHOWN`] names them.
pub(super) const TAIL_SUMMARIES: &str = "SELECT generation, call_index, kind, label, phase,
         model_requested, backend_id, outcome, origin, result, error, changes, attempts,
         live_reason
     FROM calls
     WHERE call_key BETWEEN ?1 AND ?2 AND kind != 'checkpoint'
     ORDER BY call_key DESC LIMIT ?3";
const SHOWN: [&str; 14] = [
    "generation",
    "call_index",
    "kind",
    "label",
    "phase",
    "model_requested",
    "backend_id",
    "outcome",
    "origin",
    "result",
    "error",
    "changes",
    "attempts",
    "live_reason",
];

pub(super) fn tail(
    connection: &Connection,
    run_id: &RunId,
    limit: u32,
    count: bool,
) -> StoreResult<SummaryTail> {
    let doing = || format!("read the last calls of run {run_id}");
    let keys = run_keys(connection, run_id)?;
    let Some(generation) = latest_generation(connection, keys, run_id)? else {
        return Ok(SummaryTail {
            total: count.then_some(0),
            ..SummaryTail::default()
        });
    };
    let [first, last] = keys.generation(generation, run_id)?;
    let mut statement = connection.prepare_cached(TAIL_SUMMARIES).context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![first, last, limit])
        .context(doing)?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let call = summary(row, run_id)?;
        found.push((keys.key(call.generation, call.index, run_id)?, call));
    }
    let calls = super::call_blocks::newest(
        connection,
        (keys, run_id),
        [first, last],
        limit,
        found,
        |call| Ok(CallSummary::from(&call)),
    )?;
    let total = if count {
        Some(generation_total(connection, run_id, keys, generation)?)
    } else {
        None
    };
    Ok(SummaryTail {
        generation: Some(generation),
        total,
        calls,
    })
}

fn summary(row: &Row<'_>, run_id: &RunId) -> StoreResult<CallSummary> {
    let columns = Columns {
        row,
        reader: RowReader::new(row, run_id, "calls"),
    };
    Ok(CallSummary {
        generation: columns.get(0)?,
        index: columns.get(1)?,
        kind: columns.parsed(2, CallKind::parse)?,
        label: columns.get(3)?,
        phase: columns.get(4)?,
        model_requested: columns.get(5)?,
        backend_id: columns.get(6)?,
        outcome: columns.parsed(7, CallOutcome::parse)?,
        origin: columns.parsed(8, CallOrigin::parse)?,
        result: columns.optional_json(9)?,
        error: columns.optional_json(10)?,
        changes: columns.optional_json(11)?,
        attempts: columns.get::<u32>(12).map(|n| (n > 0).then_some(n))?,
        live_reason: columns
            .get::<Option<String>>(13)?
            .map(|text| {
                LiveReason::parse(&text).ok_or_else(|| {
                    columns
                        .reader
                        .corrupt(SHOWN[13], format!("unknown value {text:?}"))
                })
            })
            .transpose()?,
    })
}

/// Typed reads by position; bad stored data is `Corrupt`, naming the column.
struct Columns<'row, 'statement> {
    row: &'row Row<'statement>,
    reader: RowReader<'row, 'statement>,
}

impl Columns<'_, '_> {
    fn get<T: FromSql>(&self, index: usize) -> StoreResult<T> {
        self.row
            .get(index)
            .map_err(|error| self.reader.corrupt(SHOWN[index], error))
    }

    fn optional_json<T: DeserializeOwned>(&self, index: usize) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(index)?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|error| self.reader.corrupt(SHOWN[index], error))
        })
        .transpose()
    }

    fn parsed<T>(&self, index: usize, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text: String = self.get(index)?;
        parse(&text).ok_or_else(|| {
            self.reader
                .corrupt(SHOWN[index], format!("unknown value {text:?}"))
        })
    }
}
