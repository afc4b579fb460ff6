//! The `open_sessions` table: the session each live call opened, journaled under the run's
//! lease (one row per call and generation, a later attempt's
//! session replacing an earlier one), and read back whole when a later generation starts.
//! The fenced write locks the run's row on the lease token first, as the call appends do.

use deadpool_postgres::{Client, GenericClient};

use super::connection::{Context, execute, query};
use super::rows::{RowReader, fenced_run_key, run_key, to_json};
use crate::model::{OpenSession, RunId};
use crate::store::{Fence, StoreResult};

pub(super) async fn journal(
    client: &mut Client,
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
    let session_json = to_json(&session.session, "session reference")?;
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    execute(
        &transaction,
        "INSERT INTO open_sessions (run_key, generation, call_index, hash, path, inputs_hash,
             session, cwd, opened_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (run_key, generation, call_index) DO UPDATE SET
             hash = excluded.hash, path = excluded.path, inputs_hash = excluded.inputs_hash,
             session = excluded.session, cwd = excluded.cwd, opened_at = excluded.opened_at",
        &[
            &run_key,
            &i64::from(session.generation),
            &i64::from(session.index),
            &session.hash,
            &session.path,
            &session.inputs_hash,
            &session_json,
            &session.cwd,
            &session.opened_at,
        ],
    )
    .await
    .context(doing)?;
    transaction.commit().await.context(doing)
}

pub(super) async fn all(
    client: &impl GenericClient,
    run_id: &RunId,
) -> StoreResult<Vec<OpenSession>> {
    let doing = || format!("read the journaled sessions of run {run_id}");
    let run_key = run_key(client, run_id).await?;
    let rows = query(
        client,
        "SELECT generation, call_index, hash, path, inputs_hash, session, cwd, opened_at
         FROM open_sessions WHERE run_key = $1 ORDER BY generation, call_index",
        &[&run_key],
    )
    .await
    .context(doing)?;
    rows.iter()
        .map(|row| {
            let reader = RowReader::new(row, run_id, "open_sessions");
            Ok(OpenSession {
                generation: reader.u32("generation")?,
                index: reader.u32("call_index")?,
                hash: reader.string("hash")?,
                path: reader.optional_string("path")?,
                inputs_hash: reader.optional_string("inputs_hash")?,
                session: reader.json("session")?,
                cwd: reader.string("cwd")?,
                opened_at: reader.get("opened_at")?,
            })
        })
        .collect()
}
