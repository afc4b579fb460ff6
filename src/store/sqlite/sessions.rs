//! The `open_sessions` table: the session each live call opened, journaled under the run's
//! lease (one row per call and generation, a later attempt's session replacing an earlier
//! one), and read back whole when a later generation starts.

use rusqlite::{Connection, Transaction};

use super::connection::{Context, write_transaction};
use super::rows::{RowReader, fenced_run_key, run_key, to_json};
use crate::model::{OpenSession, RunId};
use crate::store::{Fence, StoreResult};

pub(super) fn journal(
    connection: &mut Connection,
    run_id: &RunId,
    session: &OpenSession,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || {
        format!(
            "journal the session of call {} of run {run_id}",
            session.index
        )
    };
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    insert(&transaction, run_key, run_id, session)?;
    transaction.commit().context(doing)
}

/// Writes `session`'s row (replacing the call's earlier entry of its generation) inside a
/// transaction that already holds the fence.
pub(super) fn insert(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    session: &OpenSession,
) -> StoreResult<()> {
    let doing = || {
        format!(
            "journal the session of call {} of run {run_id}",
            session.index
        )
    };
    let session_json = to_json(&session.session, "session reference")?;
    transaction
        .prepare_cached(
            "INSERT INTO open_sessions (run_key, generation, call_index, hash, path,
                 inputs_hash, session, cwd, opened_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (run_key, generation, call_index) DO UPDATE SET
                 hash = excluded.hash, path = excluded.path,
                 inputs_hash = excluded.inputs_hash, session = excluded.session,
                 cwd = excluded.cwd, opened_at = excluded.opened_at",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![
                run_key,
                session.generation,
                session.index,
                session.hash,
                session.path,
                session.inputs_hash,
                session_json,
                session.cwd,
                session.opened_at,
            ])
        })
        .context(doing)?;
    Ok(())
}

pub(super) fn all(connection: &Connection, run_id: &RunId) -> StoreResult<Vec<OpenSession>> {
    let doing = || format!("read the journaled sessions of run {run_id}");
    let run_key = run_key(connection, run_id)?;
    let mut statement = connection
        .prepare_cached(
            "SELECT generation, call_index, hash, path, inputs_hash, session, cwd, opened_at
             FROM open_sessions WHERE run_key = ?1 ORDER BY generation, call_index",
        )
        .context(doing)?;
    let mut rows = statement.query([run_key]).context(doing)?;
    let mut sessions = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "open_sessions");
        sessions.push(OpenSession {
            generation: reader.get("generation")?,
            index: reader.get("call_index")?,
            hash: reader.get("hash")?,
            path: reader.get("path")?,
            inputs_hash: reader.get("inputs_hash")?,
            session: reader.json("session")?,
            cwd: reader.get("cwd")?,
            opened_at: reader.get("opened_at")?,
        });
    }
    Ok(sessions)
}
