//! The embedded SQLite store: one database file, `<root>/store.db`, holds the runs of every
//! project. Several processes (a CLI run and a daemon) may open it at once, so the database runs
//! in WAL mode with a busy timeout, and every write is one short transaction; read-modify-write
//! operations (fenced writes, the lease compare-and-swap, first-writer-wins inserts) take the
//! write lock up front with `BEGIN IMMEDIATE` so that their check and their write see the same
//! state. `synchronous=NORMAL` keeps each committed transaction across a process crash, which is
//! the durability the engine relies on; a power loss may drop the last few commits.
//!
//! The schema is versioned by `PRAGMA user_version` and built by the numbered scripts in
//! `migrations/sqlite/`. The per-run tables are keyed by an integer `run_key` so that the many
//! call and event rows of a run stay small, and the script text lives in its own table so that
//! routine status updates never rewrite it.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::types::FromSql;
use rusqlite::{
    Connection, FileControl, MAIN_DB, OptionalExtension, Row, ToSql, Transaction,
    TransactionBehavior,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CallWrite, Fence, ScriptChange, Store, StoreError, StoreResult};
use crate::model::{
    CallKind, CallOrigin, CallOutcome, CallRecord, CheckpointAnswer, EventRecord, Lease,
    OperationReceipt, PauseReason, RunId, RunRecord, RunStatus, RunSummary, ScriptSource,
};

/// The database file inside the persistence root.
pub const DATABASE_FILE: &str = "store.db";

/// Schema migrations in the order they apply; after migration `n` (1-based) the database's
/// `user_version` is `n`. Append new files, never edit an applied one.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/sqlite/0001_initial.sql"),
    include_str!("migrations/sqlite/0002_runs_by_script.sql"),
    include_str!("migrations/sqlite/0003_fewer_call_indexes.sql"),
];

/// The page size of a new database. Every commit copies each page it touched into the WAL
/// whole, and a settled call touches a handful of pages with rows of a few hundred bytes, so
/// small pages keep the bytes written per call small (about 7 KiB instead of 28 KiB with
/// SQLite's default of 4 KiB). An existing database keeps the page size it was created with.
const PAGE_SIZE: i64 = 1024;

/// How long a statement waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Room for every statement text this file prepares (about thirty), so none is evicted and
/// re-prepared on a hot path.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// The run store on one SQLite database.
pub struct SqliteStore {
    root: PathBuf,
    /// The process's connection. Every method holds the lock for one short query or
    /// transaction and never across an `.await`, so a std mutex is enough.
    connection: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store under `root`, bringing its schema up to date.
    /// Refuses a database written by a newer agentprism.
    pub fn open(root: &Path) -> StoreResult<SqliteStore> {
        create_private_folder(root)?;
        let path = root.join(DATABASE_FILE);
        create_private_file(&path)?;
        let mut connection =
            Connection::open(&path).context(|| format!("open database {}", path.display()))?;
        configure(&connection, &path)?;
        migrate(&mut connection, &path)?;
        Ok(SqliteStore {
            root: root.to_path_buf(),
            connection: Mutex::new(connection),
        })
    }

    /// The database file this store writes.
    pub fn database_path(&self) -> PathBuf {
        self.root.join(DATABASE_FILE)
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic under the lock cannot leave a transaction half applied: a dropped rusqlite
        // `Transaction` rolls back. So the connection behind a poisoned lock is still sound.
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn root(&self) -> &Path {
        &self.root
    }

    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        let run_id = &record.run_id;
        let doing = || format!("create run {run_id}");
        let run_row = RunRow::new(record)?;
        let script_row = ScriptRow::new(record)?;
        let lease_proc_start = to_sql_integer(lease.proc_start, "lease process start time")?;

        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        if find_run_key(&transaction, run_id)?.is_some() {
            return Err(StoreError::AlreadyExists(run_id.clone()));
        }
        let run_id_text = run_id.as_str();
        let mut parameters: Vec<(&str, &dyn ToSql)> = vec![
            (":run_id", &run_id_text),
            (":lease_token", &lease.token),
            (":lease_owner_id", &lease.owner_id),
            (":lease_pid", &lease.pid),
            (":lease_proc_start", &lease_proc_start),
            (":lease_acquired_at", &lease.acquired_at),
        ];
        parameters.extend(run_row.parameters());
        transaction
            .prepare_cached(
                "INSERT INTO runs (run_id, lease_token, lease_owner_id, lease_pid,
                     lease_proc_start, lease_acquired_at, project_dir, workflow_name, status,
                     pause_reason, error_code, error_message, started_at, updated_at, generation,
                     stream_id, script_file, script_source, cwd, current_phase, reset_hint,
                     limits, token_usage, phases, args, result, setup, auth_context,
                     checkpoint_context, routing)
                 VALUES (:run_id, :lease_token, :lease_owner_id, :lease_pid,
                     :lease_proc_start, :lease_acquired_at, :project_dir, :workflow_name, :status,
                     :pause_reason, :error_code, :error_message, :started_at, :updated_at,
                     :generation, :stream_id, :script_file, :script_source, :cwd, :current_phase,
                     :reset_hint, :limits, :token_usage, :phases, :args, :result, :setup,
                     :auth_context, :checkpoint_context, :routing)",
            )
            .and_then(|mut statement| statement.execute(parameters.as_slice()))
            .context(doing)?;
        let run_key = transaction.last_insert_rowid();
        let mut parameters: Vec<(&str, &dyn ToSql)> = vec![(":run_key", &run_key)];
        parameters.extend(script_row.parameters());
        transaction
            .prepare_cached(
                "INSERT INTO run_scripts (run_key, script, meta, script_revisions)
                 VALUES (:run_key, :script, :meta, :script_revisions)",
            )
            .and_then(|mut statement| statement.execute(parameters.as_slice()))
            .context(doing)?;
        transaction.commit().context(doing)
    }

    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        let connection = self.connection();
        let mut statement = connection
            .prepare_cached(
                "SELECT runs.*, run_scripts.script, run_scripts.meta,
                        run_scripts.script_revisions
                 FROM runs JOIN run_scripts USING (run_key)
                 WHERE runs.run_id = ?1",
            )
            .context(|| format!("load run {run_id}"))?;
        let mut rows = statement
            .query([run_id.as_str()])
            .context(|| format!("load run {run_id}"))?;
        match rows.next().context(|| format!("load run {run_id}"))? {
            Some(row) => run_from_row(&RowReader::new(row, run_id, "runs")),
            None => Err(StoreError::UnknownRun(run_id.clone())),
        }
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let run_id = &record.run_id;
        let doing = || format!("update run {run_id}");
        let run_row = RunRow::new(record)?;
        let script_row = match script {
            ScriptChange::Changed => Some(ScriptRow::new(record)?),
            ScriptChange::Unchanged => None,
        };

        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = fenced_run_key(&transaction, run_id, fence)?;
        let mut parameters: Vec<(&str, &dyn ToSql)> = vec![(":run_key", &run_key)];
        parameters.extend(run_row.parameters());
        transaction
            .prepare_cached(
                "UPDATE runs SET project_dir = :project_dir, workflow_name = :workflow_name,
                     status = :status, pause_reason = :pause_reason, error_code = :error_code,
                     error_message = :error_message, started_at = :started_at,
                     updated_at = :updated_at, generation = :generation, stream_id = :stream_id,
                     script_file = :script_file, script_source = :script_source, cwd = :cwd,
                     current_phase = :current_phase, reset_hint = :reset_hint, limits = :limits,
                     token_usage = :token_usage, phases = :phases, args = :args,
                     result = :result, setup = :setup, auth_context = :auth_context,
                     checkpoint_context = :checkpoint_context, routing = :routing
                 WHERE run_key = :run_key",
            )
            .and_then(|mut statement| statement.execute(parameters.as_slice()))
            .context(doing)?;
        if let Some(script_row) = &script_row {
            let mut parameters: Vec<(&str, &dyn ToSql)> = vec![(":run_key", &run_key)];
            parameters.extend(script_row.parameters());
            transaction
                .prepare_cached(
                    "UPDATE run_scripts SET script = :script, meta = :meta,
                         script_revisions = :script_revisions
                     WHERE run_key = :run_key",
                )
                .and_then(|mut statement| statement.execute(parameters.as_slice()))
                .context(doing)?;
        }
        transaction.commit().context(doing)
    }

    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let mut connection = self.connection();
        append_calls_in_transaction(&mut connection, run_id, std::slice::from_ref(&write), fence)
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let mut connection = self.connection();
        append_calls_in_transaction(&mut connection, run_id, writes, fence)
    }

    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("append events of run {run_id}");
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = fenced_run_key(&transaction, run_id, fence)?;
        insert_events(&transaction, run_key, run_id, events)?;
        transaction.commit().context(doing)
    }

    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        query_calls(
            &connection,
            "SELECT * FROM calls WHERE run_key = ?1
             ORDER BY generation, settlement_ordinal, call_index",
            run_key,
            run_id,
        )
    }

    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        query_calls(
            &connection,
            "SELECT * FROM calls WHERE run_key = ?1 AND superseded_by IS NULL
             ORDER BY generation, call_index",
            run_key,
            run_id,
        )
    }

    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        query_calls(
            &connection,
            "SELECT * FROM calls
             WHERE run_key = ?1
               AND generation = (SELECT MAX(generation) FROM calls WHERE run_key = ?1)
             ORDER BY call_index",
            run_key,
            run_id,
        )
    }

    async fn events(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let doing = || format!("read events of run {run_id}");
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        // A cursor beyond what SQLite integers hold can only mean "after everything".
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let mut statement = connection
            .prepare_cached(
                "SELECT seq, timestamp, redacted, truncated, event FROM events
                 WHERE run_key = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .context(doing)?;
        let mut rows = statement
            .query(rusqlite::params![run_key, after, limit])
            .context(doing)?;
        let mut events = Vec::new();
        while let Some(row) = rows.next().context(doing)? {
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

    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        last_event_seq(&connection, run_key, run_id)
    }

    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)> {
        let doing = || format!("read the log of run {run_id}");
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        let total: i64 = connection
            .prepare_cached("SELECT COUNT(*) FROM events WHERE run_key = ?1 AND event_type = 'log'")
            .and_then(|mut statement| statement.query_row([run_key], |row| row.get(0)))
            .context(doing)?;
        let mut statement = connection
            .prepare_cached(
                "SELECT seq, event FROM events WHERE run_key = ?1 AND event_type = 'log'
                 ORDER BY seq DESC LIMIT ?2",
            )
            .context(doing)?;
        let mut rows = statement
            .query(rusqlite::params![run_key, limit])
            .context(doing)?;
        let mut lines = Vec::new();
        while let Some(row) = rows.next().context(doing)? {
            let reader = RowReader::new(row, run_id, "events");
            let seq = reader.unsigned("seq")?;
            let event: Value = reader.json("event")?;
            let message = event
                .get("message")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    reader.corrupt("event", format!("log event {seq} has no message"))
                })?;
            lines.push(message.to_owned());
        }
        // Read newest first to stop after `limit`; a tail reads oldest first.
        lines.reverse();
        let total = u64::try_from(total).unwrap_or_default();
        Ok((lines, total))
    }

    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
    ) -> StoreResult<CheckpointAnswer> {
        let doing = || {
            format!(
                "record the answer to checkpoint {} of run {run_id}",
                answer.call_index
            )
        };
        let answer_json = to_json(&answer.answer, "checkpoint answer")?;
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = run_key(&transaction, run_id)?;
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO checkpoint_answers
                     (run_key, call_index, hash, answered_at, answer)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut statement| {
                statement.execute(rusqlite::params![
                    run_key,
                    answer.call_index,
                    answer.hash,
                    answer.answered_at,
                    answer_json
                ])
            })
            .context(doing)?;
        let standing = query_answers(
            &transaction,
            "SELECT * FROM checkpoint_answers WHERE run_key = ?1 AND call_index = ?2",
            rusqlite::params![run_key, answer.call_index],
            run_id,
        )?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
        transaction.commit().context(doing)?;
        Ok(standing)
    }

    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        query_answers(
            &connection,
            "SELECT * FROM checkpoint_answers WHERE run_key = ?1 ORDER BY call_index",
            rusqlite::params![run_key],
            run_id,
        )
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
    ) -> StoreResult<OperationReceipt> {
        let doing = || format!("record receipt {} of run {run_id}", receipt.operation_id);
        let response_json = to_json(&receipt.response, "receipt response")?;
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = run_key(&transaction, run_id)?;
        transaction
            .prepare_cached(
                "INSERT INTO receipts
                     (run_key, operation_id, generation, input_digest, created_at, response)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (run_key, operation_id) DO UPDATE SET
                     generation = excluded.generation, input_digest = excluded.input_digest,
                     created_at = excluded.created_at, response = excluded.response
                 WHERE excluded.generation > receipts.generation",
            )
            .and_then(|mut statement| {
                statement.execute(rusqlite::params![
                    run_key,
                    receipt.operation_id,
                    receipt.generation,
                    receipt.input_digest,
                    receipt.created_at,
                    response_json
                ])
            })
            .context(doing)?;
        let standing = query_receipt(&transaction, run_key, run_id, &receipt.operation_id)?
            .ok_or_else(|| StoreError::Io(format!("{}: the row did not read back", doing())))?;
        transaction.commit().context(doing)?;
        Ok(standing)
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        let connection = self.connection();
        let run_key = run_key(&connection, run_id)?;
        query_receipt(&connection, run_key, run_id, operation_id)
    }

    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        let doing = || format!("read the lease of run {run_id}");
        let connection = self.connection();
        let mut statement = connection
            .prepare_cached(
                "SELECT lease_token, lease_owner_id, lease_pid, lease_proc_start,
                        lease_acquired_at
                 FROM runs WHERE run_id = ?1",
            )
            .context(doing)?;
        let mut rows = statement.query([run_id.as_str()]).context(doing)?;
        let row = rows
            .next()
            .context(doing)?
            .ok_or_else(|| StoreError::UnknownRun(run_id.clone()))?;
        let reader = RowReader::new(row, run_id, "runs");
        let Some(token) = reader.get::<Option<String>>("lease_token")? else {
            return Ok(None);
        };
        let owner_id: Option<String> = reader.get("lease_owner_id")?;
        let pid: Option<u32> = reader.get("lease_pid")?;
        let proc_start = reader.optional_unsigned("lease_proc_start")?;
        let acquired_at: Option<i64> = reader.get("lease_acquired_at")?;
        // The lease columns are always written together, by one statement.
        match (owner_id, pid, proc_start, acquired_at) {
            (Some(owner_id), Some(pid), Some(proc_start), Some(acquired_at)) => Ok(Some(Lease {
                owner_id,
                pid,
                proc_start,
                token,
                acquired_at,
            })),
            _ => Err(reader.corrupt("lease_token", "set while other lease columns are empty")),
        }
    }

    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool> {
        let doing = || format!("acquire the lease of run {run_id}");
        let lease_proc_start = to_sql_integer(lease.proc_start, "lease process start time")?;
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = run_key(&transaction, run_id)?;
        // `IS` compares NULL with NULL as equal, so `expected: None` means "no lease now".
        let installed = transaction
            .prepare_cached(
                "UPDATE runs SET lease_token = ?1, lease_owner_id = ?2, lease_pid = ?3,
                     lease_proc_start = ?4, lease_acquired_at = ?5
                 WHERE run_key = ?6 AND lease_token IS ?7",
            )
            .and_then(|mut statement| {
                statement.execute(rusqlite::params![
                    lease.token,
                    lease.owner_id,
                    lease.pid,
                    lease_proc_start,
                    lease.acquired_at,
                    run_key,
                    expected
                ])
            })
            .context(doing)?;
        transaction.commit().context(doing)?;
        Ok(installed == 1)
    }

    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()> {
        let doing = || format!("release the lease of run {run_id}");
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = run_key(&transaction, run_id)?;
        transaction
            .prepare_cached(
                "UPDATE runs SET lease_token = NULL, lease_owner_id = NULL, lease_pid = NULL,
                     lease_proc_start = NULL, lease_acquired_at = NULL
                 WHERE run_key = ?1 AND lease_token = ?2",
            )
            .and_then(|mut statement| statement.execute(rusqlite::params![run_key, token]))
            .context(doing)?;
        transaction.commit().context(doing)
    }

    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>> {
        let doing = || "list runs".to_owned();
        let project_dir = project_dir
            .map(|path| path_text(path, "project folder"))
            .transpose()?;
        let connection = self.connection();
        // `?1 IS NULL OR ...` would hide the project index from the planner, hence two texts.
        let (sql, parameters): (&str, Vec<&dyn ToSql>) = match &project_dir {
            Some(project_dir) => (
                "SELECT run_id, project_dir, workflow_name, status, pause_reason, started_at,
                        updated_at, result IS NOT NULL AS has_result
                 FROM runs WHERE project_dir = ?1
                 ORDER BY started_at DESC, run_id DESC LIMIT ?2",
                vec![project_dir, &limit],
            ),
            None => (
                "SELECT run_id, project_dir, workflow_name, status, pause_reason, started_at,
                        updated_at, result IS NOT NULL AS has_result
                 FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?1",
                vec![&limit],
            ),
        };
        let mut statement = connection.prepare_cached(sql).context(doing)?;
        let mut rows = statement.query(parameters.as_slice()).context(doing)?;
        let mut summaries = Vec::new();
        while let Some(row) = rows.next().context(doing)? {
            let run_id = stored_run_id(row)?;
            let reader = RowReader::new(row, &run_id, "runs");
            summaries.push(RunSummary {
                project_dir: reader.path("project_dir")?,
                workflow_name: reader.get("workflow_name")?,
                status: reader.parsed("status", RunStatus::parse)?,
                pause_reason: reader.optional_parsed("pause_reason", PauseReason::parse)?,
                started_at: reader.get("started_at")?,
                updated_at: reader.get("updated_at")?,
                has_result: reader.get("has_result")?,
                run_id,
            });
        }
        Ok(summaries)
    }

    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>> {
        let doing = || format!("list the active runs of {}", project_dir.display());
        let project_text = path_text(project_dir, "project folder")?;
        let connection = self.connection();
        let mut statement = connection
            .prepare_cached(
                "SELECT run_id FROM runs
                 WHERE project_dir = ?1 AND status IN ('pending', 'running')
                 ORDER BY started_at, run_id",
            )
            .context(doing)?;
        let mut rows = statement.query([project_text]).context(doing)?;
        let mut run_ids = Vec::new();
        while let Some(row) = rows.next().context(doing)? {
            run_ids.push(stored_run_id(row)?);
        }
        Ok(run_ids)
    }

    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>> {
        let doing = || format!("find the runs of script {}", script_file.display());
        let Ok(path_text) = path_text(script_file, "script file") else {
            return Ok(Vec::new());
        };
        let connection = self.connection();
        let mut statement = connection
            .prepare_cached("SELECT run_id FROM runs WHERE script_file = ?1 ORDER BY started_at DESC, run_id DESC")
            .context(doing)?;
        let mut rows = statement.query([path_text]).context(doing)?;
        let mut run_ids = Vec::new();
        while let Some(row) = rows.next().context(doing)? {
            run_ids.push(stored_run_id(row)?);
        }
        Ok(run_ids)
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        let doing = || format!("delete run {run_id}");
        let mut connection = self.connection();
        let transaction = write_transaction(&mut connection, doing)?;
        let run_key = run_key(&transaction, run_id)?;
        // Children first: explicit deletes do not depend on the connection enforcing the
        // foreign keys' ON DELETE CASCADE.
        for sql in [
            "DELETE FROM events WHERE run_key = ?1",
            "DELETE FROM calls WHERE run_key = ?1",
            "DELETE FROM checkpoint_answers WHERE run_key = ?1",
            "DELETE FROM receipts WHERE run_key = ?1",
            "DELETE FROM run_scripts WHERE run_key = ?1",
            "DELETE FROM runs WHERE run_key = ?1",
        ] {
            transaction
                .prepare_cached(sql)
                .and_then(|mut statement| statement.execute([run_key]))
                .context(doing)?;
        }
        transaction.commit().context(doing)
    }
}

/// Adds what was being done to a SQLite error.
trait Context<T> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T>;
}

impl<T> Context<T> for rusqlite::Result<T> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T> {
        self.map_err(|error| StoreError::Io(format!("{}: {error}", doing())))
    }
}

/// The run-table values of a record, converted once so INSERT and UPDATE bind the same thing.
struct RunRow<'a> {
    project_dir: &'a str,
    workflow_name: &'a str,
    status: &'static str,
    pause_reason: Option<&'static str>,
    error_code: Option<&'a str>,
    error_message: Option<&'a str>,
    started_at: i64,
    updated_at: i64,
    generation: u32,
    stream_id: &'a str,
    script_file: &'a str,
    script_source: &'static str,
    cwd: &'a str,
    current_phase: Option<&'a str>,
    reset_hint: Option<&'a str>,
    limits: String,
    token_usage: String,
    phases: String,
    args: String,
    result: Option<String>,
    setup: Option<String>,
    auth_context: Option<String>,
    checkpoint_context: Option<String>,
    routing: String,
}

impl<'a> RunRow<'a> {
    fn new(record: &'a RunRecord) -> StoreResult<RunRow<'a>> {
        Ok(RunRow {
            project_dir: path_text(&record.project_dir, "project folder")?,
            workflow_name: &record.workflow_name,
            status: record.status.as_str(),
            pause_reason: record.pause_reason.map(PauseReason::as_str),
            error_code: record.error_code.as_deref(),
            error_message: record.error_message.as_deref(),
            started_at: record.started_at,
            updated_at: record.updated_at,
            generation: record.generation,
            stream_id: &record.stream_id,
            script_file: path_text(&record.script_file, "script file")?,
            script_source: record.script_source.as_str(),
            cwd: path_text(&record.cwd, "cwd")?,
            current_phase: record.current_phase.as_deref(),
            reset_hint: record.reset_hint.as_deref(),
            limits: to_json(&record.limits, "limits")?,
            token_usage: to_json(&record.token_usage, "token usage")?,
            phases: to_json(&record.phases, "phases")?,
            args: to_json(&record.args, "args")?,
            result: optional_json(record.result.as_ref(), "result")?,
            setup: optional_json(record.setup.as_ref(), "setup")?,
            auth_context: optional_json(record.auth_context.as_ref(), "auth context")?,
            checkpoint_context: optional_json(
                record.checkpoint_context.as_ref(),
                "checkpoint context",
            )?,
            routing: to_json(&record.routing, "routing")?,
        })
    }

    fn parameters(&self) -> [(&'static str, &dyn ToSql); 24] {
        [
            (":project_dir", &self.project_dir),
            (":workflow_name", &self.workflow_name),
            (":status", &self.status),
            (":pause_reason", &self.pause_reason),
            (":error_code", &self.error_code),
            (":error_message", &self.error_message),
            (":started_at", &self.started_at),
            (":updated_at", &self.updated_at),
            (":generation", &self.generation),
            (":stream_id", &self.stream_id),
            (":script_file", &self.script_file),
            (":script_source", &self.script_source),
            (":cwd", &self.cwd),
            (":current_phase", &self.current_phase),
            (":reset_hint", &self.reset_hint),
            (":limits", &self.limits),
            (":token_usage", &self.token_usage),
            (":phases", &self.phases),
            (":args", &self.args),
            (":result", &self.result),
            (":setup", &self.setup),
            (":auth_context", &self.auth_context),
            (":checkpoint_context", &self.checkpoint_context),
            (":routing", &self.routing),
        ]
    }
}

/// The `run_scripts` values of a record.
struct ScriptRow<'a> {
    script: &'a str,
    meta: String,
    script_revisions: String,
}

impl<'a> ScriptRow<'a> {
    fn new(record: &'a RunRecord) -> StoreResult<ScriptRow<'a>> {
        Ok(ScriptRow {
            script: &record.script,
            meta: to_json(&record.meta, "meta")?,
            script_revisions: to_json(&record.script_revisions, "script revisions")?,
        })
    }

    fn parameters(&self) -> [(&'static str, &dyn ToSql); 3] {
        [
            (":script", &self.script),
            (":meta", &self.meta),
            (":script_revisions", &self.script_revisions),
        ]
    }
}

/// Reads typed columns of one result row; bad stored data becomes `StoreError::Corrupt`
/// naming the run, table and column.
struct RowReader<'row, 'statement> {
    row: &'row Row<'statement>,
    run_id: &'row RunId,
    table: &'static str,
}

impl<'row, 'statement> RowReader<'row, 'statement> {
    fn new(
        row: &'row Row<'statement>,
        run_id: &'row RunId,
        table: &'static str,
    ) -> RowReader<'row, 'statement> {
        RowReader { row, run_id, table }
    }

    fn get<T: FromSql>(&self, column: &str) -> StoreResult<T> {
        self.row
            .get(column)
            .map_err(|error| self.corrupt(column, error))
    }

    /// A `u64` field, stored as a non-negative SQLite integer.
    fn unsigned(&self, column: &str) -> StoreResult<u64> {
        let value: i64 = self.get(column)?;
        u64::try_from(value).map_err(|error| self.corrupt(column, error))
    }

    fn optional_unsigned(&self, column: &str) -> StoreResult<Option<u64>> {
        let value: Option<i64> = self.get(column)?;
        value
            .map(|value| u64::try_from(value).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    fn json<T: DeserializeOwned>(&self, column: &str) -> StoreResult<T> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|error| self.corrupt(column, error))
    }

    fn optional_json<T: DeserializeOwned>(&self, column: &str) -> StoreResult<Option<T>> {
        let text: Option<String> = self.get(column)?;
        text.map(|text| serde_json::from_str(&text).map_err(|error| self.corrupt(column, error)))
            .transpose()
    }

    fn parsed<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
        let text: String = self.get(column)?;
        parse(&text).ok_or_else(|| self.corrupt(column, format!("unknown value {text:?}")))
    }

    fn optional_parsed<T>(
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

    fn path(&self, column: &str) -> StoreResult<PathBuf> {
        self.get::<String>(column).map(PathBuf::from)
    }

    fn corrupt(&self, column: &str, error: impl Display) -> StoreError {
        StoreError::Corrupt(format!(
            "run {}: column {}.{column}: {error}",
            self.run_id, self.table
        ))
    }
}

fn create_private_folder(root: &Path) -> StoreResult<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|error| StoreError::Io(format!("create folder {}: {error}", root.display())))
}

/// Creates the database file readable by its owner only before SQLite opens it; SQLite gives
/// the `-wal` and `-shm` files the same permissions.
fn create_private_file(path: &Path) -> StoreResult<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map(drop)
        .map_err(|error| StoreError::Io(format!("create {}: {error}", path.display())))
}

fn configure(connection: &Connection, path: &Path) -> StoreResult<()> {
    let doing = || format!("configure database {}", path.display());
    // Two processes opening a new database at once race to switch it to WAL, and SQLite
    // answers that race with SQLITE_BUSY at once instead of calling the busy handler. So
    // the settings are applied again after a short pause, within the usual busy timeout.
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    let journal_mode = loop {
        match apply_settings(connection) {
            Err(error) if is_busy(&error) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => break other.context(doing)?,
        }
    };
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{}: the journal mode stayed {journal_mode:?} instead of WAL",
            doing()
        )));
    }
    Ok(())
}

/// The connection's settings; every one of them can be applied again. Returns the journal
/// mode SQLite reports after asking for WAL.
fn apply_settings(connection: &Connection) -> rusqlite::Result<String> {
    // Set first, so that the pragmas below already wait for a concurrent opener.
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    // Before WAL mode: once a database is in WAL mode (or has any table) its page size is
    // fixed, and for such a database this is a no-op.
    connection.pragma_update(None, "page_size", PAGE_SIZE)?;
    let journal_mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    // A short-lived process (`agentprism run`, `status`) would otherwise checkpoint the WAL
    // into the database and delete it when it closes, and the next one recreate it: four
    // fsyncs per process. Committed transactions are in the WAL either way, and the next
    // opener reads them from there, so this keeps every commit across a crash; the WAL is
    // still checkpointed by the automatic checkpoint once it grows past 1,000 pages.
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    let mut persist = 1;
    connection.file_control(Some(MAIN_DB), FileControl::PersistWal(&mut persist))?;
    Ok(journal_mode)
}

/// Whether SQLite refused for a lock another connection holds.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Applies the migrations the database lacks, all in one transaction, so a crash leaves the
/// old version and a concurrent opener waits and then finds nothing left to do.
fn migrate(connection: &mut Connection, path: &Path) -> StoreResult<()> {
    let doing = || format!("migrate database {}", path.display());
    // The usual case, an up-to-date database, needs no write lock.
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context(doing)?;
    if usize::try_from(version).is_ok_and(|version| version == MIGRATIONS.len()) {
        return Ok(());
    }
    let transaction = write_transaction(connection, doing)?;
    let version: i64 = transaction
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context(doing)?;
    let known = MIGRATIONS.len();
    let applied = usize::try_from(version).map_err(|_| {
        StoreError::Corrupt(format!(
            "{} has the invalid schema version {version}",
            path.display()
        ))
    })?;
    if applied > known {
        return Err(StoreError::Corrupt(format!(
            "{} has schema version {applied}, but this agentprism knows versions up to \
             {known}; use a newer agentprism for this persistence root",
            path.display()
        )));
    }
    for (number, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        let version = number + 1;
        transaction
            .execute_batch(sql)
            .context(|| format!("{}: apply migration {version}", doing()))?;
        transaction
            .pragma_update(None, "user_version", version as i64)
            .context(doing)?;
    }
    transaction.commit().context(doing)
}

/// Starts a transaction that holds the write lock from its first statement, so that what it
/// checks cannot change before it writes.
fn write_transaction(
    connection: &mut Connection,
    doing: impl FnOnce() -> String,
) -> StoreResult<Transaction<'_>> {
    connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(doing)
}

fn find_run_key(connection: &Connection, run_id: &RunId) -> StoreResult<Option<i64>> {
    connection
        .prepare_cached("SELECT run_key FROM runs WHERE run_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([run_id.as_str()], |row| row.get(0))
                .optional()
        })
        .context(|| format!("look up run {run_id}"))
}

fn run_key(connection: &Connection, run_id: &RunId) -> StoreResult<i64> {
    find_run_key(connection, run_id)?.ok_or_else(|| StoreError::UnknownRun(run_id.clone()))
}

/// The run's key, if `fence` still holds its lease. Called inside the write transaction that
/// the fence guards.
fn fenced_run_key(connection: &Connection, run_id: &RunId, fence: Fence<'_>) -> StoreResult<i64> {
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

fn append_calls_in_transaction(
    connection: &mut Connection,
    run_id: &RunId,
    writes: &[CallWrite<'_>],
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("append calls of run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence)?;
    for write in writes {
        insert_call(&transaction, run_key, run_id, write.record)?;
        for &(generation, index) in write.supersedes {
            let changed = transaction
                .prepare_cached(
                    "UPDATE calls SET superseded_by = ?1
                     WHERE run_key = ?2 AND generation = ?3 AND call_index = ?4",
                )
                .and_then(|mut statement| {
                    statement.execute(rusqlite::params![
                        write.record.generation,
                        run_key,
                        generation,
                        index
                    ])
                })
                .context(doing)?;
            if changed == 0 {
                return Err(StoreError::Io(format!(
                    "{}: call {index} of generation {generation} to supersede does not exist",
                    doing()
                )));
            }
        }
        insert_events(&transaction, run_key, run_id, write.events)?;
    }
    transaction.commit().context(doing)
}

fn insert_call(
    transaction: &Transaction<'_>,
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
    let settlement_ordinal = to_sql_integer(call.settlement_ordinal, "settlement ordinal")?;
    let usage = to_json(&call.usage, "call usage")?;
    let error = optional_json(call.error.as_ref(), "call error")?;
    let replay = optional_json(call.replay.as_ref(), "call replay")?;
    let session = optional_json(call.session.as_ref(), "call session")?;
    let result = optional_json(call.result.as_ref(), "call result")?;
    transaction
        .prepare_cached(
            "INSERT INTO calls (run_key, generation, call_index, settlement_ordinal,
                 superseded_by, kind, hash, path, inputs_hash, label, phase, outcome, origin,
                 aborted, attempts, model_requested, model_resolved, backend_id, resolved_cwd,
                 usage, error, replay, session, result)
             VALUES (:run_key, :generation, :call_index, :settlement_ordinal, :superseded_by,
                 :kind, :hash, :path, :inputs_hash, :label, :phase, :outcome, :origin, :aborted,
                 :attempts, :model_requested, :model_resolved, :backend_id, :resolved_cwd,
                 :usage, :error, :replay, :session, :result)",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::named_params! {
                ":run_key": run_key,
                ":generation": call.generation,
                ":call_index": call.index,
                ":settlement_ordinal": settlement_ordinal,
                ":superseded_by": call.superseded_by,
                ":kind": call.kind.as_str(),
                ":hash": call.hash,
                ":path": call.path,
                ":inputs_hash": call.inputs_hash,
                ":label": call.label,
                ":phase": call.phase,
                ":outcome": call.outcome.as_str(),
                ":origin": call.origin.as_str(),
                ":aborted": call.aborted,
                ":attempts": call.attempts,
                ":model_requested": call.model_requested,
                ":model_resolved": call.model_resolved,
                ":backend_id": call.backend_id,
                ":resolved_cwd": call.resolved_cwd,
                ":usage": usage,
                ":error": error,
                ":replay": replay,
                ":session": session,
                ":result": result,
            })
        })
        .context(doing)
        .map(drop)
}

/// Appends events after checking that they continue the run's stream densely.
fn insert_events(
    transaction: &Transaction<'_>,
    run_key: i64,
    run_id: &RunId,
    events: &[EventRecord],
) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let doing = || format!("append events of run {run_id}");
    let first_seq = last_event_seq(transaction, run_key, run_id)? + 1;
    let mut statement = transaction
        .prepare_cached(
            "INSERT INTO events (run_key, seq, event_type, timestamp, redacted, truncated, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .context(doing)?;
    for (expected, event) in (first_seq..).zip(events) {
        if event.seq != expected {
            return Err(StoreError::Io(format!(
                "{}: event seq {} does not continue the stream, expected {expected}",
                doing(),
                event.seq
            )));
        }
        let seq = to_sql_integer(event.seq, "event seq")?;
        let event_type = event
            .event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let event_json = to_json(&event.event, "event")?;
        statement
            .execute(rusqlite::params![
                run_key,
                seq,
                event_type,
                event.timestamp,
                event.redacted,
                event.truncated,
                event_json
            ])
            .context(doing)?;
    }
    Ok(())
}

fn last_event_seq(connection: &Connection, run_key: i64, run_id: &RunId) -> StoreResult<u64> {
    let last: i64 = connection
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_key = ?1")
        .and_then(|mut statement| statement.query_row([run_key], |row| row.get(0)))
        .context(|| format!("read the last event seq of run {run_id}"))?;
    u64::try_from(last)
        .map_err(|error| StoreError::Corrupt(format!("run {run_id}: column events.seq: {error}")))
}

fn query_calls(
    connection: &Connection,
    sql: &str,
    run_key: i64,
    run_id: &RunId,
) -> StoreResult<Vec<CallRecord>> {
    let doing = || format!("read calls of run {run_id}");
    let mut statement = connection.prepare_cached(sql).context(doing)?;
    let mut rows = statement.query([run_key]).context(doing)?;
    let mut calls = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        calls.push(call_from_row(&RowReader::new(row, run_id, "calls"))?);
    }
    Ok(calls)
}

fn query_answers(
    connection: &Connection,
    sql: &str,
    parameters: impl rusqlite::Params,
    run_id: &RunId,
) -> StoreResult<Vec<CheckpointAnswer>> {
    let doing = || format!("read checkpoint answers of run {run_id}");
    let mut statement = connection.prepare_cached(sql).context(doing)?;
    let mut rows = statement.query(parameters).context(doing)?;
    let mut answers = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let reader = RowReader::new(row, run_id, "checkpoint_answers");
        answers.push(CheckpointAnswer {
            call_index: reader.get("call_index")?,
            hash: reader.get("hash")?,
            answer: reader.json("answer")?,
            answered_at: reader.get("answered_at")?,
        });
    }
    Ok(answers)
}

fn query_receipt(
    connection: &Connection,
    run_key: i64,
    run_id: &RunId,
    operation_id: &str,
) -> StoreResult<Option<OperationReceipt>> {
    let doing = || format!("read receipt {operation_id} of run {run_id}");
    let mut statement = connection
        .prepare_cached("SELECT * FROM receipts WHERE run_key = ?1 AND operation_id = ?2")
        .context(doing)?;
    let mut rows = statement
        .query(rusqlite::params![run_key, operation_id])
        .context(doing)?;
    let Some(row) = rows.next().context(doing)? else {
        return Ok(None);
    };
    let reader = RowReader::new(row, run_id, "receipts");
    Ok(Some(OperationReceipt {
        operation_id: reader.get("operation_id")?,
        generation: reader.get("generation")?,
        input_digest: reader.get("input_digest")?,
        response: reader.json("response")?,
        created_at: reader.get("created_at")?,
    }))
}

fn run_from_row(reader: &RowReader<'_, '_>) -> StoreResult<RunRecord> {
    Ok(RunRecord {
        run_id: reader.run_id.clone(),
        project_dir: reader.path("project_dir")?,
        workflow_name: reader.get("workflow_name")?,
        status: reader.parsed("status", RunStatus::parse)?,
        pause_reason: reader.optional_parsed("pause_reason", PauseReason::parse)?,
        error_code: reader.get("error_code")?,
        error_message: reader.get("error_message")?,
        script: reader.get("script")?,
        script_file: reader.path("script_file")?,
        script_source: reader.parsed("script_source", ScriptSource::parse)?,
        script_revisions: reader.json("script_revisions")?,
        meta: reader.json("meta")?,
        args: reader.json("args")?,
        cwd: reader.path("cwd")?,
        limits: reader.json("limits")?,
        phases: reader.json("phases")?,
        current_phase: reader.get("current_phase")?,
        result: reader.optional_json("result")?,
        started_at: reader.get("started_at")?,
        updated_at: reader.get("updated_at")?,
        token_usage: reader.json("token_usage")?,
        stream_id: reader.get("stream_id")?,
        generation: reader.get("generation")?,
        setup: reader.optional_json("setup")?,
        auth_context: reader.optional_json("auth_context")?,
        checkpoint_context: reader.optional_json("checkpoint_context")?,
        reset_hint: reader.get("reset_hint")?,
        routing: reader.json("routing")?,
    })
}

fn call_from_row(reader: &RowReader<'_, '_>) -> StoreResult<CallRecord> {
    Ok(CallRecord {
        generation: reader.get("generation")?,
        index: reader.get("call_index")?,
        kind: reader.parsed("kind", CallKind::parse)?,
        hash: reader.get("hash")?,
        path: reader.get("path")?,
        inputs_hash: reader.get("inputs_hash")?,
        label: reader.get("label")?,
        phase: reader.get("phase")?,
        outcome: reader.parsed("outcome", CallOutcome::parse)?,
        origin: reader.parsed("origin", CallOrigin::parse)?,
        result: reader.optional_json("result")?,
        error: reader.optional_json("error")?,
        aborted: reader.get("aborted")?,
        attempts: reader.get("attempts")?,
        usage: reader.json("usage")?,
        model_requested: reader.get("model_requested")?,
        model_resolved: reader.get("model_resolved")?,
        backend_id: reader.get("backend_id")?,
        resolved_cwd: reader.get("resolved_cwd")?,
        replay: reader.optional_json("replay")?,
        session: reader.optional_json("session")?,
        settlement_ordinal: reader.unsigned("settlement_ordinal")?,
        superseded_by: reader.get("superseded_by")?,
    })
}

/// Reads the `run_id` column of a listing row back into a validated id.
fn stored_run_id(row: &Row<'_>) -> StoreResult<RunId> {
    let text: String = row
        .get("run_id")
        .map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))?;
    RunId::parse(&text).map_err(|error| StoreError::Corrupt(format!("column runs.run_id: {error}")))
}

fn to_json(value: &impl Serialize, what: &str) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|error| StoreError::Io(format!("encode {what} as JSON: {error}")))
}

fn optional_json(value: Option<&impl Serialize>, what: &str) -> StoreResult<Option<String>> {
    value.map(|value| to_json(value, what)).transpose()
}

/// Paths are stored as text so the database stays readable and comparable in SQL; the JSON
/// model cannot carry a non-UTF-8 path either.
fn path_text<'a>(path: &'a Path, what: &str) -> StoreResult<&'a str> {
    path.to_str().ok_or_else(|| {
        StoreError::Io(format!(
            "{what} {} is not valid UTF-8, which the run store cannot keep",
            path.display()
        ))
    })
}

/// SQLite integers are signed 64-bit.
fn to_sql_integer(value: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::Io(format!("{what} {value} is too large for the run store")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;
    use crate::model::{Limits, Phase, ScriptRevision, Usage};

    const PROJECT: &str = "/home/dev/shop";

    /// Several openers of a database that does not exist yet race to create it and switch it
    /// to WAL; every one of them must get a working store (SQLite answers the WAL switch
    /// with SQLITE_BUSY without waiting, which once failed `agentprism run` started beside
    /// `agentprism runs`).
    #[test]
    fn openers_racing_to_create_the_store_all_succeed() {
        const OPENERS: usize = 8;
        for _ in 0..25 {
            let dir = tempfile::tempdir().unwrap();
            let start = std::sync::Arc::new(std::sync::Barrier::new(OPENERS));
            let openers: Vec<_> = (0..OPENERS)
                .map(|_| {
                    let (root, start) = (dir.path().to_path_buf(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        SqliteStore::open(&root).map(|store| store.database_path())
                    })
                })
                .collect();
            for opener in openers {
                let opened = opener.join().expect("opener thread");
                assert!(opened.is_ok(), "{opened:?}");
            }
        }
    }
    const OTHER_PROJECT: &str = "/home/dev/blog";

    fn run_id(text: &str) -> RunId {
        RunId::parse(text).expect("test run ids are valid")
    }

    /// A run as admission creates it: optional fields unset.
    fn run_record(id: &str, project_dir: &str, started_at: i64) -> RunRecord {
        RunRecord {
            run_id: run_id(id),
            project_dir: PathBuf::from(project_dir),
            workflow_name: "review".to_owned(),
            status: RunStatus::Running,
            pause_reason: None,
            error_code: None,
            error_message: None,
            script: "export const meta = { name: \"review\" };\nawait agent(\"look\");\n"
                .to_owned(),
            script_file: PathBuf::from(format!("/store/runs/{id}.script.js")),
            script_source: ScriptSource::Inline,
            script_revisions: Vec::new(),
            meta: json!({ "name": "review" }),
            args: json!({ "target": "src" }),
            cwd: PathBuf::from(project_dir),
            limits: Limits::default(),
            phases: Vec::new(),
            current_phase: None,
            result: None,
            started_at,
            updated_at: started_at,
            token_usage: Usage::default(),
            stream_id: "0123456789abcdef0123456789abcdef".to_owned(),
            generation: 1,
            setup: None,
            auth_context: None,
            checkpoint_context: None,
            reset_hint: None,
            routing: json!({ "tiers": {}, "integrity": "abc" }),
        }
    }

    /// A run with every optional field set, paused at a checkpoint in its second generation.
    fn full_run_record() -> RunRecord {
        RunRecord {
            status: RunStatus::Paused,
            pause_reason: Some(PauseReason::CheckpointRequired),
            error_code: Some("CHECKPOINT_REQUIRED".to_owned()),
            error_message: Some("waiting for an answer".to_owned()),
            script_source: ScriptSource::Path,
            script_file: PathBuf::from("/home/dev/shop/flows/review.js"),
            script_revisions: vec![ScriptRevision {
                generation: 2,
                accepted_at: 1_700_000_050_000,
                sha256: "ab".repeat(32),
            }],
            limits: Limits {
                max_agents: 50,
                concurrency: 4,
                agent_retries: 2,
            },
            phases: vec![
                Phase {
                    title: "Read".to_owned(),
                    detail: Some("read the code".to_owned()),
                    model: Some("fast".to_owned()),
                },
                Phase {
                    title: "Write".to_owned(),
                    detail: None,
                    model: None,
                },
            ],
            current_phase: Some("Write".to_owned()),
            result: Some(json!({ "summary": "ok", "count": 3, "ratio": 0.5 })),
            updated_at: 1_700_000_060_000,
            token_usage: Usage {
                input_tokens: 1200,
                output_tokens: 340,
                total_tokens: 1540,
                cost_usd: Some(0.25),
            },
            generation: 2,
            setup: Some(json!({ "state": "done", "request": null })),
            auth_context: Some(json!({ "backendId": "claude", "methods": [] })),
            checkpoint_context: Some(json!({
                "callIndex": 2, "hash": "cafe", "prompt": "Ship it?", "kind": "confirm"
            })),
            reset_hint: Some("resets at 5pm".to_owned()),
            ..run_record("lq3k2m1-abc123", PROJECT, 1_700_000_000_000)
        }
    }

    fn lease(token: &str) -> Lease {
        Lease {
            owner_id: "daemon-1".to_owned(),
            pid: 4242,
            proc_start: 987_654_321,
            token: token.to_owned(),
            acquired_at: 1_700_000_000_000,
        }
    }

    fn call(generation: u32, index: u32, settlement_ordinal: u64) -> CallRecord {
        CallRecord {
            generation,
            index,
            kind: CallKind::Agent,
            hash: format!("hash-{index}"),
            path: Some("3:7<1:1".to_owned()),
            inputs_hash: Some(format!("inputs-{index}")),
            label: Some(format!("call {index}")),
            phase: None,
            outcome: CallOutcome::Result,
            origin: CallOrigin::Runner,
            result: Some(json!({ "answer": index })),
            error: None,
            aborted: false,
            attempts: 1,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                total_tokens: 15,
                cost_usd: None,
            },
            model_requested: Some("fast".to_owned()),
            model_resolved: Some("claude-haiku".to_owned()),
            backend_id: Some("claude".to_owned()),
            resolved_cwd: Some(PROJECT.to_owned()),
            replay: None,
            session: Some(json!({ "sessionId": "s-1" })),
            settlement_ordinal,
            superseded_by: None,
        }
    }

    fn event(seq: u64, event_type: &str) -> EventRecord {
        EventRecord {
            seq,
            timestamp: 1_700_000_000_000 + seq as i64,
            event: json!({ "type": event_type, "runId": "lq3k2m1-abc123", "scope": "root" }),
            redacted: false,
            truncated: false,
        }
    }

    fn log_event(seq: u64, message: &str) -> EventRecord {
        EventRecord {
            event: json!({
                "type": "log", "runId": "lq3k2m1-abc123", "scope": "root", "message": message
            }),
            ..event(seq, "log")
        }
    }

    fn write<'a>(
        record: &'a CallRecord,
        supersedes: &'a [(u32, u32)],
        events: &'a [EventRecord],
    ) -> CallWrite<'a> {
        CallWrite {
            record,
            supersedes,
            events,
        }
    }

    /// A store in a fresh folder holding one running run under lease `token-a`.
    async fn store_with_run() -> (tempfile::TempDir, SqliteStore, RunRecord) {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(&folder.path().join("root")).expect("open store");
        let record = run_record("lq3k2m1-abc123", PROJECT, 1_700_000_000_000);
        store
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create run");
        (folder, store, record)
    }

    fn assert_fenced<T: std::fmt::Debug>(result: StoreResult<T>) {
        match result {
            Err(StoreError::Fenced(id)) => assert_eq!(id.as_str(), "lq3k2m1-abc123"),
            other => panic!("expected Fenced, got {other:?}"),
        }
    }

    fn assert_unknown<T: std::fmt::Debug>(result: StoreResult<T>) {
        match result {
            Err(StoreError::UnknownRun(_)) => {}
            other => panic!("expected UnknownRun, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn open_creates_private_root_and_database() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let root = folder.path().join("nested").join("root");
        let store = SqliteStore::open(&root).expect("open store");
        assert_eq!(store.root(), root);
        let root_mode = std::fs::metadata(&root).expect("root").permissions().mode();
        assert_eq!(root_mode & 0o777, 0o700);
        let database_mode = std::fs::metadata(store.database_path())
            .expect("database")
            .permissions()
            .mode();
        assert_eq!(database_mode & 0o777, 0o600);
        let connection = store.connection();
        let journal_mode: String = connection
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .expect("journal mode");
        assert_eq!(journal_mode, "wal");
        let version: i64 = connection
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("user version");
        assert_eq!(version, MIGRATIONS.len() as i64);
    }

    #[tokio::test]
    async fn new_databases_use_small_pages() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let page_size: i64 = store
            .connection()
            .pragma_query_value(None, "page_size", |row| row.get(0))
            .expect("page size");
        assert_eq!(page_size, PAGE_SIZE);
    }

    #[tokio::test]
    async fn a_commit_survives_a_process_that_never_closes_the_store() {
        // What kill -9 leaves: the WAL written, no checkpoint, no close. Leaking the
        // connection keeps its file descriptors open, as a killed process's are until exit.
        let folder = tempfile::tempdir().expect("temporary folder");
        let record = run_record("lq3k2m1-abc123", PROJECT, 1);
        let store = SqliteStore::open(folder.path()).expect("open store");
        store
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create");
        std::mem::forget(store);
        let store = SqliteStore::open(folder.path()).expect("reopen store");
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    }

    #[tokio::test]
    async fn closing_keeps_the_wal_and_the_next_opener_reads_it() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let record = run_record("lq3k2m1-abc123", PROJECT, 1);
        {
            let store = SqliteStore::open(folder.path()).expect("open store");
            store
                .create_run(&record, &lease("token-a"))
                .await
                .expect("create");
        }
        let wal = folder.path().join(format!("{DATABASE_FILE}-wal"));
        assert!(wal.exists(), "the WAL is kept across connections");
        let store = SqliteStore::open(folder.path()).expect("reopen store");
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    }

    #[tokio::test]
    async fn reopening_keeps_data_and_skips_applied_migrations() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let record = run_record("lq3k2m1-abc123", PROJECT, 1);
        {
            let store = SqliteStore::open(folder.path()).expect("open store");
            store
                .create_run(&record, &lease("token-a"))
                .await
                .expect("create");
        }
        let store = SqliteStore::open(folder.path()).expect("reopen store");
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    }

    #[tokio::test]
    async fn newer_schema_is_refused_naming_both_versions() {
        let folder = tempfile::tempdir().expect("temporary folder");
        drop(SqliteStore::open(folder.path()).expect("open store"));
        let newer = MIGRATIONS.len() + 1;
        let connection = Connection::open(folder.path().join(DATABASE_FILE)).expect("open");
        connection
            .pragma_update(None, "user_version", newer as i64)
            .expect("bump version");
        drop(connection);
        match SqliteStore::open(folder.path()) {
            Err(StoreError::Corrupt(message)) => {
                assert!(
                    message.contains(&format!("schema version {newer}")),
                    "{message}"
                );
                assert!(
                    message.contains(&format!("up to {}", MIGRATIONS.len())),
                    "{message}"
                );
            }
            Err(other) => panic!("expected Corrupt, got {other:?}"),
            Ok(_) => panic!("a newer schema was accepted"),
        }
    }

    #[tokio::test]
    async fn frozen_v1_sample_reads_back() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let connection = Connection::open(folder.path().join(DATABASE_FILE)).expect("open");
        connection.execute_batch(MIGRATIONS[0]).expect("schema 1");
        connection
            .pragma_update(None, "user_version", 1)
            .expect("version 1");
        connection
            .execute_batch(include_str!("testdata/v1_sample.sql"))
            .expect("load sample");
        drop(connection);

        let store = SqliteStore::open(folder.path()).expect("open sample");
        let expected: Value =
            serde_json::from_str(include_str!("testdata/v1_sample.expected.json"))
                .expect("expected records parse");
        let field = |name: &str| expected[name].clone();
        let id = run_id("lq3k2m1-abc123");
        let run: RunRecord = serde_json::from_value(field("run")).expect("run");
        let lease: Option<Lease> = serde_json::from_value(field("lease")).expect("lease");
        let calls: Vec<CallRecord> = serde_json::from_value(field("calls")).expect("calls");
        let events: Vec<EventRecord> = serde_json::from_value(field("events")).expect("events");
        let answers: Vec<CheckpointAnswer> =
            serde_json::from_value(field("checkpointAnswers")).expect("answers");
        let receipts: Vec<OperationReceipt> =
            serde_json::from_value(field("receipts")).expect("receipts");

        assert_eq!(store.load_run(&id).await.expect("load run"), run);
        assert_eq!(store.lease(&id).await.expect("lease"), lease);
        assert_eq!(store.calls(&id).await.expect("calls"), calls);
        assert_eq!(store.events(&id, 0, 100).await.expect("events"), events);
        assert_eq!(
            store.checkpoint_answers(&id).await.expect("answers"),
            answers
        );
        assert_eq!(
            store.receipt(&id, "op-1").await.expect("receipt").as_ref(),
            receipts.first()
        );
        // The sample's shape, so an expected file emptied by mistake cannot pass.
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].superseded_by, Some(2));
        assert_eq!(events.len(), 5);
        assert_eq!(store.replay_pool(&id).await.expect("pool").len(), 3);
        assert_eq!(
            store.log_tail(&id, 10).await.expect("log"),
            (vec!["starting".to_owned(), "replayed call 0".to_owned()], 2)
        );
        let listed = store.list_runs(None, 10).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert!(listed[0].has_result);
    }

    #[tokio::test]
    async fn full_record_round_trips() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let record = full_run_record();
        store
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create");
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
        assert_eq!(
            store.lease(&record.run_id).await.expect("lease"),
            Some(lease("token-a"))
        );
        // `Some(null)` is a result (the script returned null), distinct from no result.
        let null_result = RunRecord {
            result: Some(Value::Null),
            ..run_record("lq3k2m1-nul111", PROJECT, 5)
        };
        store
            .create_run(&null_result, &lease("token-b"))
            .await
            .expect("create");
        assert_eq!(
            store.load_run(&null_result.run_id).await.expect("load"),
            null_result
        );
    }

    #[tokio::test]
    async fn create_refuses_a_taken_id() {
        let (_folder, store, record) = store_with_run().await;
        let again = RunRecord {
            workflow_name: "other".to_owned(),
            ..record.clone()
        };
        match store.create_run(&again, &lease("token-z")).await {
            Err(StoreError::AlreadyExists(id)) => assert_eq!(id, record.run_id),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), record);
    }

    #[tokio::test]
    async fn update_run_unchanged_keeps_the_script() {
        let (_folder, store, record) = store_with_run().await;
        let updated = RunRecord {
            status: RunStatus::Completed,
            result: Some(json!("done")),
            updated_at: record.updated_at + 10,
            script: "a different script".to_owned(),
            meta: json!({ "name": "changed" }),
            script_revisions: vec![ScriptRevision {
                generation: 2,
                accepted_at: 9,
                sha256: "ff".repeat(32),
            }],
            ..record.clone()
        };
        store
            .update_run(&updated, ScriptChange::Unchanged, Fence("token-a"))
            .await
            .expect("update");
        let loaded = store.load_run(&record.run_id).await.expect("load");
        assert_eq!(
            loaded,
            RunRecord {
                script: record.script.clone(),
                meta: record.meta.clone(),
                script_revisions: record.script_revisions.clone(),
                ..updated.clone()
            }
        );

        store
            .update_run(&updated, ScriptChange::Changed, Fence("token-a"))
            .await
            .expect("update with script");
        assert_eq!(store.load_run(&record.run_id).await.expect("load"), updated);
    }

    #[tokio::test]
    async fn fenced_writes_are_refused_after_another_lease_and_write_nothing() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let installed = store
            .acquire_lease(id, Some("token-a"), &lease("token-b"))
            .await
            .expect("take over");
        assert!(installed);

        let stale = Fence("token-a");
        let changed = RunRecord {
            status: RunStatus::Failed,
            script: "changed".to_owned(),
            ..record.clone()
        };
        assert_fenced(
            store
                .update_run(&changed, ScriptChange::Changed, stale)
                .await,
        );
        let first = call(1, 0, 1);
        let events = [log_event(1, "lost")];
        assert_fenced(
            store
                .append_call(id, write(&first, &[], &events), stale)
                .await,
        );
        assert_fenced(
            store
                .append_calls(id, &[write(&first, &[], &events)], stale)
                .await,
        );
        assert_fenced(store.append_events(id, &events, stale).await);

        assert_eq!(store.load_run(id).await.expect("load"), record);
        assert!(store.calls(id).await.expect("calls").is_empty());
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 0);

        // The new holder writes fine; no lease at all fences everyone.
        store
            .append_call(id, write(&first, &[], &events), Fence("token-b"))
            .await
            .expect("current holder writes");
        store.release_lease(id, "token-b").await.expect("release");
        assert_fenced(
            store
                .append_events(id, &[log_event(2, "x")], Fence("token-b"))
                .await,
        );
    }

    #[tokio::test]
    async fn append_call_supersedes_rows_and_appends_events() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let fence = Fence("token-a");
        let (first, second) = (call(1, 0, 1), call(1, 1, 2));
        store
            .append_calls(
                id,
                &[
                    write(&first, &[], &[event(1, "agentEnd")]),
                    write(&second, &[], &[event(2, "agentEnd")]),
                ],
                fence,
            )
            .await
            .expect("generation 1");
        let replayed = CallRecord {
            origin: CallOrigin::JournalReplay,
            ..call(2, 0, 1)
        };
        store
            .append_call(
                id,
                write(&replayed, &[(1, 0)], &[event(3, "agentEnd")]),
                fence,
            )
            .await
            .expect("generation 2");

        let calls = store.calls(id).await.expect("calls");
        assert_eq!(
            calls,
            vec![
                CallRecord {
                    superseded_by: Some(2),
                    ..first.clone()
                },
                second.clone(),
                replayed.clone(),
            ]
        );
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);

        // Superseding a row that does not exist rolls the whole write back.
        let orphan = call(2, 1, 2);
        let result = store
            .append_call(
                id,
                write(&orphan, &[(1, 7)], &[event(4, "agentEnd")]),
                fence,
            )
            .await;
        assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
        assert_eq!(store.calls(id).await.expect("calls").len(), 3);
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 3);
    }

    #[tokio::test]
    async fn calls_are_ordered_by_generation_then_settlement() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        // Index 1 settles before index 0 (completion order differs from call order).
        let (early, late) = (call(1, 1, 1), call(1, 0, 2));
        store
            .append_calls(
                id,
                &[write(&early, &[], &[]), write(&late, &[], &[])],
                Fence("token-a"),
            )
            .await
            .expect("append");
        let order: Vec<u32> = store
            .calls(id)
            .await
            .expect("calls")
            .iter()
            .map(|call| call.index)
            .collect();
        assert_eq!(order, vec![1, 0]);
        let pool: Vec<u32> = store
            .replay_pool(id)
            .await
            .expect("pool")
            .iter()
            .map(|call| call.index)
            .collect();
        assert_eq!(pool, vec![0, 1]);
    }

    #[tokio::test]
    async fn replay_pool_excludes_superseded_rows() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let fence = Fence("token-a");
        let rows = [call(1, 0, 1), call(1, 1, 2), call(1, 2, 3)];
        let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
        store
            .append_calls(id, &writes, fence)
            .await
            .expect("generation 1");
        let rerun = call(2, 0, 1);
        store
            .append_call(id, write(&rerun, &[(1, 0), (1, 2)], &[]), fence)
            .await
            .expect("generation 2");
        let pool: Vec<(u32, u32)> = store
            .replay_pool(id)
            .await
            .expect("pool")
            .iter()
            .map(|call| (call.generation, call.index))
            .collect();
        assert_eq!(pool, vec![(1, 1), (2, 0)]);
    }

    #[tokio::test]
    async fn latest_calls_returns_only_the_highest_generation() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let fence = Fence("token-a");
        assert!(store.latest_calls(id).await.expect("latest").is_empty());
        let rows = [call(1, 0, 1), call(1, 1, 2), call(2, 1, 1), call(2, 0, 2)];
        let writes: Vec<CallWrite<'_>> = rows.iter().map(|row| write(row, &[], &[])).collect();
        store
            .append_calls(id, &writes, fence)
            .await
            .expect("append");
        let latest = store.latest_calls(id).await.expect("latest");
        assert_eq!(latest, vec![rows[3].clone(), rows[2].clone()]);
    }

    #[tokio::test]
    async fn events_page_by_cursor_and_limit() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let fence = Fence("token-a");
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 0);
        assert!(store.events(id, 0, 10).await.expect("events").is_empty());
        let events: Vec<EventRecord> = (1..=7).map(|seq| event(seq, "phase")).collect();
        store
            .append_events(id, &events[..3], fence)
            .await
            .expect("first batch");
        store
            .append_events(id, &events[3..], fence)
            .await
            .expect("second batch");
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 7);
        assert_eq!(store.events(id, 0, 100).await.expect("all"), events);
        assert_eq!(
            store.events(id, 2, 3).await.expect("page"),
            events[2..5].to_vec()
        );
        assert_eq!(
            store.events(id, 5, 100).await.expect("tail"),
            events[5..].to_vec()
        );
        assert!(store.events(id, 7, 100).await.expect("end").is_empty());
        assert!(
            store
                .events(id, u64::MAX, 100)
                .await
                .expect("beyond")
                .is_empty()
        );
    }

    #[tokio::test]
    async fn events_must_continue_the_stream_densely() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let fence = Fence("token-a");
        store
            .append_events(id, &[event(1, "phase")], fence)
            .await
            .expect("first");
        for bad in [
            [event(3, "phase"), event(4, "phase")],
            [event(2, "phase"), event(2, "phase")],
        ] {
            let result = store.append_events(id, &bad, fence).await;
            assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
        }
        assert_eq!(store.last_event_seq(id).await.expect("seq"), 1);
    }

    #[tokio::test]
    async fn log_tail_returns_the_last_lines_and_the_count() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let mut events = Vec::new();
        for seq in 1..=9 {
            events.push(if seq % 3 == 0 {
                event(seq, "agentEnd")
            } else {
                log_event(seq, &format!("line {seq}"))
            });
        }
        store
            .append_events(id, &events, Fence("token-a"))
            .await
            .expect("append");
        let (lines, total) = store.log_tail(id, 3).await.expect("tail");
        assert_eq!(lines, vec!["line 5", "line 7", "line 8"]);
        assert_eq!(total, 6);
        let (lines, total) = store.log_tail(id, 100).await.expect("whole log");
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[0], "line 1");
        assert_eq!(total, 6);
    }

    #[tokio::test]
    async fn checkpoint_answers_and_receipts_are_first_writer_wins_per_generation() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let first = CheckpointAnswer {
            call_index: 2,
            hash: "cafe".to_owned(),
            answer: json!(true),
            answered_at: 10,
        };
        let conflicting = CheckpointAnswer {
            answer: json!(false),
            answered_at: 11,
            ..first.clone()
        };
        let other = CheckpointAnswer {
            call_index: 1,
            ..conflicting.clone()
        };
        assert_eq!(
            store.put_checkpoint_answer(id, &first).await.expect("put"),
            first
        );
        assert_eq!(
            store
                .put_checkpoint_answer(id, &conflicting)
                .await
                .expect("put again"),
            first
        );
        assert_eq!(
            store
                .put_checkpoint_answer(id, &other)
                .await
                .expect("put other"),
            other
        );
        assert_eq!(
            store.checkpoint_answers(id).await.expect("answers"),
            vec![other.clone(), first.clone()]
        );

        let receipt = OperationReceipt {
            operation_id: "op-1".to_owned(),
            generation: 2,
            input_digest: "digest".to_owned(),
            response: json!({ "status": "running" }),
            created_at: 20,
        };
        let retry = OperationReceipt {
            response: json!({ "status": "other" }),
            ..receipt.clone()
        };
        assert_eq!(store.receipt(id, "op-1").await.expect("none yet"), None);
        assert_eq!(store.put_receipt(id, &receipt).await.expect("put"), receipt);
        // The same generation: the first writer wins.
        assert_eq!(
            store.put_receipt(id, &retry).await.expect("put again"),
            receipt
        );
        assert_eq!(
            store.receipt(id, "op-1").await.expect("read"),
            Some(receipt.clone())
        );
        // The same operation resumed the run again (its receipt had gone stale): the newer
        // generation's receipt replaces it, and an older one never comes back.
        let newer = OperationReceipt {
            generation: 3,
            response: json!({ "status": "running", "generation": 3 }),
            created_at: 30,
            ..receipt.clone()
        };
        assert_eq!(store.put_receipt(id, &newer).await.expect("newer"), newer);
        assert_eq!(store.put_receipt(id, &receipt).await.expect("older"), newer);
    }

    #[tokio::test]
    async fn acquire_lease_is_a_compare_and_swap() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        assert!(
            !store
                .acquire_lease(id, None, &lease("token-b"))
                .await
                .expect("cas")
        );
        assert!(
            !store
                .acquire_lease(id, Some("token-x"), &lease("token-b"))
                .await
                .expect("cas")
        );
        assert_eq!(
            store.lease(id).await.expect("lease"),
            Some(lease("token-a"))
        );

        assert!(
            store
                .acquire_lease(id, Some("token-a"), &lease("token-b"))
                .await
                .expect("cas")
        );
        assert_eq!(
            store.lease(id).await.expect("lease"),
            Some(lease("token-b"))
        );

        store
            .release_lease(id, "token-a")
            .await
            .expect("stale release");
        assert_eq!(
            store.lease(id).await.expect("lease"),
            Some(lease("token-b"))
        );
        store.release_lease(id, "token-b").await.expect("release");
        assert_eq!(store.lease(id).await.expect("lease"), None);

        assert!(
            !store
                .acquire_lease(id, Some("token-b"), &lease("token-c"))
                .await
                .expect("cas")
        );
        assert!(
            store
                .acquire_lease(id, None, &lease("token-c"))
                .await
                .expect("cas")
        );
        assert_eq!(
            store.lease(id).await.expect("lease"),
            Some(lease("token-c"))
        );
    }

    #[tokio::test]
    async fn list_runs_newest_first_and_per_project() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let runs = [
            run_record("a-aaaaaa", PROJECT, 300),
            run_record("b-bbbbbb", OTHER_PROJECT, 200),
            RunRecord {
                status: RunStatus::Completed,
                result: Some(json!(1)),
                ..run_record("c-cccccc", PROJECT, 100)
            },
            run_record("d-dddddd", PROJECT, 400),
        ];
        for run in &runs {
            store
                .create_run(run, &lease("token"))
                .await
                .expect("create");
        }
        let ids = |summaries: Vec<RunSummary>| -> Vec<String> {
            summaries
                .into_iter()
                .map(|summary| summary.run_id.as_str().to_owned())
                .collect()
        };
        assert_eq!(
            ids(store.list_runs(None, 10).await.expect("all")),
            vec!["d-dddddd", "a-aaaaaa", "b-bbbbbb", "c-cccccc"]
        );
        assert_eq!(
            ids(store.list_runs(None, 2).await.expect("limited")),
            vec!["d-dddddd", "a-aaaaaa"]
        );
        let project = store
            .list_runs(Some(Path::new(PROJECT)), 10)
            .await
            .expect("project");
        assert_eq!(
            project.last(),
            Some(&RunSummary {
                run_id: run_id("c-cccccc"),
                project_dir: PathBuf::from(PROJECT),
                workflow_name: "review".to_owned(),
                status: RunStatus::Completed,
                pause_reason: None,
                started_at: 100,
                updated_at: 100,
                has_result: true,
            })
        );
        assert_eq!(ids(project), vec!["d-dddddd", "a-aaaaaa", "c-cccccc"]);
        assert!(
            store
                .list_runs(Some(Path::new("/nowhere")), 10)
                .await
                .expect("empty")
                .is_empty()
        );
    }

    #[tokio::test]
    async fn active_runs_are_pending_or_running_runs_of_the_project() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let runs = [
            run_record("a-aaaaaa", PROJECT, 1),
            RunRecord {
                status: RunStatus::Pending,
                ..run_record("b-bbbbbb", PROJECT, 2)
            },
            RunRecord {
                status: RunStatus::Paused,
                ..run_record("c-cccccc", PROJECT, 3)
            },
            run_record("d-dddddd", OTHER_PROJECT, 4),
        ];
        for run in &runs {
            store
                .create_run(run, &lease("token"))
                .await
                .expect("create");
        }
        assert_eq!(
            store.active_runs(Path::new(PROJECT)).await.expect("active"),
            vec![run_id("a-aaaaaa"), run_id("b-bbbbbb")]
        );
        let finished = RunRecord {
            status: RunStatus::Completed,
            ..runs[0].clone()
        };
        store
            .update_run(&finished, ScriptChange::Unchanged, Fence("token"))
            .await
            .expect("finish");
        assert_eq!(
            store.active_runs(Path::new(PROJECT)).await.expect("active"),
            vec![run_id("b-bbbbbb")]
        );
    }

    #[tokio::test]
    async fn delete_run_removes_everything() {
        let (_folder, store, record) = store_with_run().await;
        let id = &record.run_id;
        let keep = run_record("k-kkkkkk", PROJECT, 5);
        store
            .create_run(&keep, &lease("token-k"))
            .await
            .expect("create");
        let row = call(1, 0, 1);
        store
            .append_call(
                id,
                write(&row, &[], &[log_event(1, "hello")]),
                Fence("token-a"),
            )
            .await
            .expect("append");
        store
            .append_call(
                &keep.run_id,
                write(&row, &[], &[log_event(1, "kept")]),
                Fence("token-k"),
            )
            .await
            .expect("append");
        let answer = CheckpointAnswer {
            call_index: 0,
            hash: "h".to_owned(),
            answer: json!("yes"),
            answered_at: 1,
        };
        store
            .put_checkpoint_answer(id, &answer)
            .await
            .expect("answer");
        let receipt = OperationReceipt {
            operation_id: "op".to_owned(),
            generation: 1,
            input_digest: "d".to_owned(),
            response: json!({}),
            created_at: 1,
        };
        store.put_receipt(id, &receipt).await.expect("receipt");

        store.delete_run(id).await.expect("delete");
        assert_unknown(store.load_run(id).await);
        assert_unknown(store.calls(id).await);
        assert_unknown(store.delete_run(id).await);
        {
            let connection = store.connection();
            for table in [
                "runs",
                "run_scripts",
                "calls",
                "events",
                "checkpoint_answers",
                "receipts",
            ] {
                let rows: i64 = connection
                    .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                        row.get(0)
                    })
                    .expect("count");
                let expected = if matches!(table, "checkpoint_answers" | "receipts") {
                    0
                } else {
                    1
                };
                assert_eq!(rows, expected, "rows left in {table}");
            }
        }
        assert_eq!(store.load_run(&keep.run_id).await.expect("kept"), keep);
        assert_eq!(store.log_tail(&keep.run_id, 5).await.expect("log").1, 1);
    }

    #[tokio::test]
    async fn unknown_runs_are_reported_as_such() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let id = run_id("z-zzzzzz");
        let fence = Fence("token");
        assert_unknown(store.load_run(&id).await);
        let record = run_record("z-zzzzzz", PROJECT, 1);
        assert_unknown(
            store
                .update_run(&record, ScriptChange::Unchanged, fence)
                .await,
        );
        assert_unknown(store.append_events(&id, &[event(1, "log")], fence).await);
        assert_unknown(store.events(&id, 0, 1).await);
        assert_unknown(store.last_event_seq(&id).await);
        assert_unknown(store.log_tail(&id, 1).await);
        assert_unknown(store.replay_pool(&id).await);
        assert_unknown(store.latest_calls(&id).await);
        assert_unknown(store.lease(&id).await);
        assert_unknown(store.acquire_lease(&id, None, &lease("t")).await);
        assert_unknown(store.release_lease(&id, "t").await);
        assert_unknown(store.receipt(&id, "op").await);
        assert_unknown(store.checkpoint_answers(&id).await);
    }

    #[tokio::test]
    async fn corrupt_json_names_the_run_and_column() {
        let (_folder, store, record) = store_with_run().await;
        store
            .connection()
            .execute("UPDATE runs SET args = '{not json'", [])
            .expect("damage the row");
        match store.load_run(&record.run_id).await {
            Err(StoreError::Corrupt(message)) => {
                assert!(message.contains("lq3k2m1-abc123"), "{message}");
                assert!(message.contains("runs.args"), "{message}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_second_open_sees_the_first_ones_writes() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let first = SqliteStore::open(folder.path()).expect("open first");
        let second = SqliteStore::open(folder.path()).expect("open second");
        let record = run_record("lq3k2m1-abc123", PROJECT, 1);
        first
            .create_run(&record, &lease("token-a"))
            .await
            .expect("create");
        assert_eq!(second.load_run(&record.run_id).await.expect("load"), record);

        // A lease taken through one connection fences writes through the other.
        assert!(
            second
                .acquire_lease(&record.run_id, Some("token-a"), &lease("token-b"))
                .await
                .expect("take over")
        );
        assert_fenced(
            first
                .append_events(&record.run_id, &[event(1, "log")], Fence("token-a"))
                .await,
        );
        second
            .append_events(
                &record.run_id,
                &[log_event(1, "from second")],
                Fence("token-b"),
            )
            .await
            .expect("append");
        assert_eq!(
            first.log_tail(&record.run_id, 5).await.expect("log"),
            (vec!["from second".to_owned()], 1)
        );
    }

    #[tokio::test]
    async fn runs_are_found_by_their_script_file() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(folder.path()).expect("open store");
        let shared = PathBuf::from("/work/flows/shared.js");
        let first = RunRecord {
            script_file: shared.clone(),
            ..run_record("a-aaaaaa", PROJECT, 1)
        };
        let second = RunRecord {
            script_file: shared.clone(),
            ..run_record("b-bbbbbb", PROJECT, 2)
        };
        let other = run_record("c-cccccc", PROJECT, 3);
        for run in [&first, &second, &other] {
            store
                .create_run(run, &lease("token"))
                .await
                .expect("create");
        }
        assert_eq!(
            store.runs_with_script(&shared).await.expect("lookup"),
            vec![run_id("b-bbbbbb"), run_id("a-aaaaaa")]
        );
        assert!(
            store
                .runs_with_script(Path::new("/nowhere.js"))
                .await
                .expect("lookup")
                .is_empty()
        );
    }
}
