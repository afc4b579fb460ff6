//! Encoding a run model for any backend's columns, the same for SQLite and PostgreSQL: JSON
//! columns, paths as text, and counters as signed 64-bit integers. The errors name what was
//! being encoded; nothing is written when one fails.

use std::path::Path;

use serde::Serialize;

use crate::store::{StoreError, StoreResult};

pub(crate) fn to_json(value: &impl Serialize, what: &str) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|error| StoreError::Io(format!("encode {what} as JSON: {error}")))
}

pub(crate) fn optional_json(
    value: Option<&impl Serialize>,
    what: &str,
) -> StoreResult<Option<String>> {
    value.map(|value| to_json(value, what)).transpose()
}

/// Paths are stored as text so the database stays readable and comparable in SQL; the JSON
/// model cannot carry a non-UTF-8 path either.
pub(crate) fn path_text<'a>(path: &'a Path, what: &str) -> StoreResult<&'a str> {
    path.to_str().ok_or_else(|| {
        StoreError::Io(format!(
            "{what} {} is not valid UTF-8, which the run store cannot keep",
            path.display()
        ))
    })
}

/// SQLite's integers and PostgreSQL's `BIGINT` are signed 64-bit.
pub(crate) fn to_integer(value: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::Io(format!("{what} {value} is too large for the run store")))
}
