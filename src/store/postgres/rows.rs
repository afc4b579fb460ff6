//! Between Rust values and PostgreSQL columns: the typed row reader that turns bad stored
//! data into `StoreError::Corrupt` naming the run, table and column; the integer
//! conversions (the model's `u32`/`u64` are `BIGINT` here); and the run-key lookups every
//! per-run statement starts with, including the fence, which locks the run's row for the
//! rest of the transaction.

use std::borrow::Cow;
use std::fmt::Display;
use std::path::PathBuf;

use deadpool_postgres::GenericClient;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use super::connection::{Context, query_opt};
use crate::model::RunId;
pub(super) use crate::store::codec::{optional_json, path_text, to_integer as to_bigint, to_json};
use crate::store::{Fence, StoreError, StoreResult};

/// Reads typed columns of one result row; bad stored data becomes `StoreError::Corrupt`.
pub(super) struct RowReader<'row> {
    row: &'row Row,
    /// The run the row belongs to, named in every `Corrupt` message.
    pub(super) run_id: &'row RunId,
    /// The table the row comes from, for the same messages.
    table: &'static str,
}

impl<'row> RowReader<'row> {
    pub(super) fn new(row: &'row Row, run_id: &'row RunId, table: &'static str) -> Self {
        RowReader { row, run_id, table }
    }

    pub(super) fn get<'a, T: FromSql<'a>>(&'a self, column: &str) -> StoreResult<T> {
        self.row
            .try_get(column)
            .map_err(|error| self.corrupt(column, error))
    }

    pub(super) fn string(&self, column: &str) -> StoreResult<String> {
        self.get::<String>(column)
    }

    pub(super) fn optional_string(&self, column: &str) -> StoreResult<Option<String>> {
        self.get::<Option<String>>(column)
    }

    pub(super) fn unsigned(&self, column: &str) -> StoreResult<u64> {
        let value: i64 = self.get(column)?;
        u64::try_from(value).map_err(|error| self.corrupt(column, error))
    }

    pub(super) fn optional_unsigned(&self, column: &str) -> StoreResult<Option<u64>> {
        let value: Option<i64> = self.get(column)?;
        value
            .map(|value| u64::try_from(value).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    pub(super) fn u32(&self, column: &str) -> StoreResult<u32> {
        let value: i64 = self.get(column)?;
        u32::try_from(value).map_err(|error| self.corrupt(column, error))
    }

    pub(super) fn optional_u32(&self, column: &str) -> StoreResult<Option<u32>> {
        let value: Option<i64> = self.get(column)?;
        value
            .map(|value| u32::try_from(value).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    pub(super) fn json<T: DeserializeOwned>(&self, column: &str) -> StoreResult<T> {
        let text = self.string(column)?;
        serde_json::from_str(&text).map_err(|error| self.corrupt(column, error))
    }

    pub(super) fn optional_json<T: DeserializeOwned>(
        &self,
        column: &str,
    ) -> StoreResult<Option<T>> {
        self.optional_string(column)?
            .map(|text| serde_json::from_str(&text).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    pub(super) fn parsed<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text = self.string(column)?;
        parse(&text).ok_or_else(|| self.corrupt(column, format!("unknown value {text:?}")))
    }

    pub(super) fn optional_parsed<T>(
        &self,
        column: &str,
        parse: fn(&str) -> Option<T>,
    ) -> StoreResult<Option<T>> {
        self.optional_string(column)?
            .map(|text| {
                parse(&text).ok_or_else(|| self.corrupt(column, format!("unknown value {text:?}")))
            })
            .transpose()
    }

    pub(super) fn path(&self, column: &str) -> StoreResult<PathBuf> {
        self.string(column).map(PathBuf::from)
    }

    pub(super) fn corrupt(&self, column: &str, error: impl Display) -> StoreError {
        StoreError::Corrupt(format!(
            "run {}: column {}.{column}: {error}",
            self.run_id, self.table
        ))
    }
}

pub(super) async fn find_run_key(
    client: &impl GenericClient,
    run_id: &RunId,
) -> StoreResult<Option<i64>> {
    let row = query_opt(
        client,
        "SELECT run_key FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("look up run {run_id}"))?;
    Ok(row.map(|row| row.get(0)))
}

pub(super) async fn run_key(client: &impl GenericClient, run_id: &RunId) -> StoreResult<i64> {
    find_run_key(client, run_id)
        .await?
        .ok_or_else(|| StoreError::UnknownRun(run_id.clone()))
}

/// The run's key, if `fence` still holds its lease; the first statement of the transaction
/// it guards. It locks the run's row (`FOR NO KEY UPDATE`) until that transaction ends, so a
/// lease change (`acquire_lease` updates the same row) waits for the write or the write sees
/// the new token: the check and the write are one atomic step.
pub(super) async fn fenced_run_key(
    client: &impl GenericClient,
    run_id: &RunId,
    fence: Fence<'_>,
) -> StoreResult<i64> {
    let row = query_opt(
        client,
        "SELECT run_key, lease_token FROM runs WHERE run_id = $1 FOR NO KEY UPDATE",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("check the lease of run {run_id}"))?;
    let Some(row) = row else {
        return Err(StoreError::UnknownRun(run_id.clone()));
    };
    let token: Option<&str> = row.get(1);
    if token == Some(fence.0) {
        Ok(row.get(0))
    } else {
        Err(StoreError::Fenced(run_id.clone()))
    }
}

/// Reads the `run_id` column of a listing row back into a validated id.
pub(super) fn stored_run_id(row: &Row) -> StoreResult<RunId> {
    let text: String = row
        .try_get("run_id")
        .map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))?;
    RunId::parse(&text).map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))
}

/// A free-text display value (an error message, a phase name, a call label) as PostgreSQL's
/// `text` can keep it: a NUL character, which `text` refuses, becomes U+FFFD. Without this an
/// agent whose error message carried a NUL would leave its run unable to record that it
/// failed. Identity columns (run ids, paths, the workflow name, the script) are never
/// rewritten: a NUL there is refused instead (`connection::describe`).
pub(super) fn display_text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// [`display_text`] of an optional value.
pub(super) fn optional_display_text(text: Option<&str>) -> Option<Cow<'_, str>> {
    text.map(display_text)
}
