//! Between Rust values and SQLite columns: the typed row reader that turns bad stored data
//! into `StoreError::Corrupt` naming the run, table and column; JSON, path and integer
//! conversions; and the run-key lookups every per-run query starts with, including the
//! fence check.

use std::cell::OnceCell;
use std::fmt::Display;
use std::path::PathBuf;

use rusqlite::types::FromSql;
use rusqlite::{Connection, OptionalExtension, Row, Statement};
use serde::de::DeserializeOwned;

use super::connection::Context;
use crate::model::RunId;
pub(super) use crate::store::codec::{
    optional_json, path_text, to_integer as to_sql_integer, to_json,
};
use crate::store::{Fence, StoreError, StoreResult};

/// Reads typed columns of one result row; bad stored data becomes `StoreError::Corrupt`
/// naming the run, table and column.
pub(super) struct RowReader<'row, 'statement> {
    row: &'row Row<'statement>,
    /// The run the row belongs to, named in every `Corrupt` message.
    pub(super) run_id: &'row RunId,
    /// The table the row comes from, for the same messages.
    table: &'static str,
    /// The statement's column names, read once on the first lookup by name. rusqlite's own
    /// lookup asks SQLite for every column's name again on each one, so a row of 40 columns
    /// read by name cost some 800 name reads and comparisons.
    names: OnceCell<Vec<&'row str>>,
}

impl<'row, 'statement> RowReader<'row, 'statement> {
    pub(super) fn new(
        row: &'row Row<'statement>,
        run_id: &'row RunId,
        table: &'static str,
    ) -> RowReader<'row, 'statement> {
        RowReader {
            row,
            run_id,
            table,
            names: OnceCell::new(),
        }
    }

    pub(super) fn get<T: FromSql>(&self, column: &str) -> StoreResult<T> {
        let index = self.index(column)?;
        self.row
            .get(index)
            .map_err(|error| self.corrupt(column, error))
    }

    /// The position of `column` in the row: the first column of that name, compared as
    /// SQLite compares names (ASCII case folded), as rusqlite's lookup by name finds it.
    fn index(&self, column: &str) -> StoreResult<usize> {
        let names = self.names.get_or_init(|| {
            let statement: &'row Statement<'statement> = self.row.as_ref();
            statement.column_names().collect()
        });
        names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(column))
            .ok_or_else(|| self.corrupt(column, "no such column in the query"))
    }

    pub(super) fn optional_unsigned(&self, column: &str) -> StoreResult<Option<u64>> {
        let value: Option<i64> = self.get(column)?;
        value
            .map(|value| u64::try_from(value).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    pub(super) fn json<T: DeserializeOwned>(&self, column: &str) -> StoreResult<T> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|error| self.corrupt(column, error))
    }

    pub(super) fn optional_json<T: DeserializeOwned>(
        &self,
        column: &str,
    ) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(column)?;
        text.map(|text| serde_json::from_str(&text).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    pub(super) fn parsed<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text: String = self.get(column)?;
        parse(&text).ok_or_else(|| self.corrupt(column, format!("unknown value {text:?}")))
    }

    pub(super) fn optional_parsed<T>(
        &self,
        column: &str,
        parse: fn(&str) -> Option<T>,
    ) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(column)?;
        text.map(|text| {
            parse(&text).ok_or_else(|| self.corrupt(column, format!("unknown value {text:?}")))
        })
        .transpose()
    }

    pub(super) fn path(&self, column: &str) -> StoreResult<PathBuf> {
        self.get::<String>(column).map(PathBuf::from)
    }

    pub(super) fn corrupt(&self, column: &str, error: impl Display) -> StoreError {
        StoreError::Corrupt(format!(
            "run {}: column {}.{column}: {error}",
            self.run_id, self.table
        ))
    }
}

pub(super) fn find_run_key(connection: &Connection, run_id: &RunId) -> StoreResult<Option<i64>> {
    connection
        .prepare_cached("SELECT run_key FROM runs WHERE run_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([run_id.as_str()], |row| row.get(0))
                .optional()
        })
        .context(|| format!("look up run {run_id}"))
}

pub(super) fn run_key(connection: &Connection, run_id: &RunId) -> StoreResult<i64> {
    find_run_key(connection, run_id)?.ok_or_else(|| StoreError::UnknownRun(run_id.clone()))
}

/// The run's key, if `fence` still holds its lease. Called inside the write transaction that
/// the fence guards.
pub(super) fn fenced_run_key(
    connection: &Connection,
    run_id: &RunId,
    fence: Fence<'_>,
) -> StoreResult<i64> {
    let found: Option<(i64, Option<String>)> = connection
        .prepare_cached("SELECT run_key, lease_token FROM runs WHERE run_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([run_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .context(|| format!("check the lease of run {run_id}"))?;
    match found {
        None => Err(StoreError::UnknownRun(run_id.clone())),
        Some((run_key, Some(token))) if token == fence.0 => Ok(run_key),
        Some(_) => Err(StoreError::Fenced(run_id.clone())),
    }
}

/// Reads the `run_id` column of a listing row back into a validated id.
pub(super) fn stored_run_id(row: &Row<'_>) -> StoreResult<RunId> {
    let text: String = row
        .get("run_id")
        .map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))?;
    RunId::parse(&text).map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::RowReader;
    use crate::model::RunId;
    use crate::store::StoreError;

    /// A column is found by name as rusqlite finds it: ASCII case folded, the first of two
    /// of one name, and a name the query lacks is a `Corrupt` naming the table and column.
    #[test]
    fn columns_are_found_by_name_as_sqlite_names_them() {
        let connection = Connection::open_in_memory().expect("an in-memory database");
        let run_id = RunId::parse("lq3k2m1-abc123").expect("a run id");
        let mut statement = connection
            .prepare("SELECT 1 AS first, 'two' AS Second, 3 AS twice, 4 AS twice")
            .expect("the query");
        let mut rows = statement.query([]).expect("the rows");
        let row = rows.next().expect("a step").expect("one row");
        let reader = RowReader::new(row, &run_id, "runs");
        assert_eq!(reader.get::<String>("second").expect("second"), "two");
        assert_eq!(reader.get::<i64>("FIRST").expect("first"), 1);
        assert_eq!(reader.get::<i64>("twice").expect("twice"), 3);
        match reader.get::<i64>("third") {
            Err(StoreError::Corrupt(message)) => {
                assert!(message.contains("column runs.third"), "{message}");
                assert!(message.contains("lq3k2m1-abc123"), "{message}");
            }
            other => panic!("a missing column read as {other:?}"),
        }
    }
}
