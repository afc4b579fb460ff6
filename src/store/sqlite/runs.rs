//! The `runs` and `run_scripts` tables: admission (run row, script row and first lease in one
//! transaction), loading, fenced updates, the listings across runs, and deleting a run with
//! every row stored under it.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, ToSql, Transaction};

use super::connection::{Context, write_transaction};
use super::leases::LeaseRow;
use super::rows::{
    RowReader, fenced_run_key, find_run_key, optional_json, path_text, run_key, stored_run_id,
    to_json,
};
use crate::model::{
    AutoResume, EndSummary, Lease, PauseReason, RunId, RunRecord, RunStatus, RunSummary,
    ScriptSource, is_content_digest,
};
use crate::store::{Fence, PastRunsOf, ScriptChange, StoreError, StoreResult};

pub(super) use crate::store::script_copies::DeletedRun as Deleted;

/// The active runs of a project, through the partial index `runs_active_by_project`.
pub(super) const LOAD: &str = "SELECT runs.*, run_scripts.script, run_scripts.meta,
            run_scripts.script_revisions, run_scripts.files
     FROM runs JOIN run_scripts USING (run_key)
     WHERE runs.run_id = ?1";
pub(super) const ACTIVE: &str = "SELECT run_id FROM runs
     WHERE project_dir = ?1 AND status IN ('pending', 'running')
     ORDER BY started_at, run_id";

pub(super) fn create(
    connection: &mut Connection,
    record: &RunRecord,
    lease: &Lease,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("create run {run_id}");
    let run_row = RunRow::new(record)?;
    let script_row = ScriptRow::new(record)?;
    let lease_row = LeaseRow::new(lease)?;

    let transaction = write_transaction(connection, doing)?;
    if find_run_key(&transaction, run_id)?.is_some() {
        return Err(StoreError::AlreadyExists(run_id.clone()));
    }
    let run_id_text = run_id.as_str();
    let caller = record.caller.as_deref();
    let workspace = optional_json(record.workspace.as_ref(), "workspace base")?;
    let mut parameters: Vec<(&str, &dyn ToSql)> = vec![
        (":run_id", &run_id_text),
        (":caller", &caller),
        (":workspace", &workspace),
    ];
    parameters.extend(lease_row.parameters());
    parameters.extend(run_row.parameters());
    transaction
        .prepare_cached(
            "INSERT INTO runs (run_id, lease_token, lease_owner_id, lease_pid,
                 lease_proc_start, lease_acquired_at, lease_boot_id, lease_expires_at, lease_host,
                 project_dir, workflow_name, status, pause_reason, error_code, error_message,
                 started_at, updated_at, generation, stream_id, script_file, script_source, cwd,
                 current_phase, reset_hint, limits, token_usage, phases, args, result, setup,
                 auth_context, checkpoint_context, routing, caller, workspace, reset_at,
                 resume_due_at, auto_resumes, summary)
             VALUES (:run_id, :lease_token, :lease_owner_id, :lease_pid,
                 :lease_proc_start, :lease_acquired_at, :lease_boot_id, :lease_expires_at,
                 :lease_host, :project_dir, :workflow_name, :status, :pause_reason, :error_code,
                 :error_message, :started_at, :updated_at, :generation, :stream_id, :script_file,
                 :script_source, :cwd, :current_phase, :reset_hint, :limits, :token_usage,
                 :phases, :args, :result, :setup, :auth_context, :checkpoint_context, :routing, :caller,
                 :workspace, :reset_at, :resume_due_at, :auto_resumes, :summary)",
        )
        .and_then(|mut statement| statement.execute(parameters.as_slice()))
        .context(doing)?;
    let run_key = transaction.last_insert_rowid();
    let mut parameters: Vec<(&str, &dyn ToSql)> = vec![(":run_key", &run_key)];
    parameters.extend(script_row.parameters());
    transaction
        .prepare_cached(
            "INSERT INTO run_scripts (run_key, script, meta, script_revisions, files)
             VALUES (:run_key, :script, :meta, :script_revisions, :files)",
        )
        .and_then(|mut statement| statement.execute(parameters.as_slice()))
        .context(doing)?;
    transaction.commit().context(doing)
}

pub(super) fn load(connection: &Connection, run_id: &RunId) -> StoreResult<RunRecord> {
    let doing = || format!("load run {run_id}");
    let mut statement = connection.prepare_cached(LOAD).context(doing)?;
    let mut rows = statement.query([run_id.as_str()]).context(doing)?;
    match rows.next().context(doing)? {
        Some(row) => run_from_row(&RowReader::new(row, run_id, "runs")),
        None => Err(StoreError::UnknownRun(run_id.clone())),
    }
}

pub(super) fn update(
    connection: &mut Connection,
    record: &RunRecord,
    script: ScriptChange,
    fence: Fence<'_>,
) -> StoreResult<()> {
    let doing = || format!("update run {}", record.run_id);
    let transaction = write_transaction(connection, doing)?;
    let run_key = fenced_run_key(&transaction, &record.run_id, fence)?;
    update_in(&transaction, run_key, record, script)?;
    transaction.commit().context(doing)
}

/// [`update`]'s rewrite of the row `run_key` (already fenced) inside `transaction`.
pub(super) fn update_in(
    transaction: &Transaction<'_>,
    run_key: i64,
    record: &RunRecord,
    script: ScriptChange,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("update run {run_id}");
    let run_row = RunRow::new(record)?;
    let script_row = match script {
        ScriptChange::Changed => Some(ScriptRow::new(record)?),
        ScriptChange::Unchanged => None,
    };
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
                 checkpoint_context = :checkpoint_context, routing = :routing,
                 reset_at = :reset_at, resume_due_at = :resume_due_at,
                 auto_resumes = :auto_resumes, summary = :summary
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
                     script_revisions = :script_revisions, files = :files
                 WHERE run_key = :run_key",
            )
            .and_then(|mut statement| statement.execute(parameters.as_slice()))
            .context(doing)?;
    }
    Ok(())
}

pub(super) fn list(
    connection: &Connection,
    project_dir: Option<&Path>,
    limit: u32,
) -> StoreResult<Vec<RunSummary>> {
    let doing = || "list runs".to_owned();
    let project_dir = project_dir
        .map(|path| path_text(path, "project folder"))
        .transpose()?;
    // `?1 IS NULL OR ...` would hide the project index from the planner, hence two texts.
    let (sql, parameters): (&str, Vec<&dyn ToSql>) = match &project_dir {
        Some(project_dir) => (
            "SELECT run_id, project_dir, workflow_name, status, pause_reason, started_at,
                    updated_at, result IS NOT NULL AS has_result, summary
             FROM runs WHERE project_dir = ?1
             ORDER BY started_at DESC, run_id DESC LIMIT ?2",
            vec![project_dir, &limit],
        ),
        None => (
            "SELECT run_id, project_dir, workflow_name, status, pause_reason, started_at,
                    updated_at, result IS NOT NULL AS has_result, summary
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
            summary: reader.optional_json("summary")?,
            run_id,
        });
    }
    Ok(summaries)
}

pub(super) fn active(connection: &Connection, project_dir: &Path) -> StoreResult<Vec<RunId>> {
    let doing = || format!("list the active runs of {}", project_dir.display());
    let project_text = path_text(project_dir, "project folder")?;
    let mut statement = connection.prepare_cached(ACTIVE).context(doing)?;
    let mut rows = statement.query([project_text]).context(doing)?;
    let mut run_ids = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        run_ids.push(stored_run_id(row)?);
    }
    Ok(run_ids)
}

pub(super) fn with_script(connection: &Connection, script_file: &Path) -> StoreResult<Vec<RunId>> {
    let doing = || format!("find the runs of script {}", script_file.display());
    let Ok(path_text) = path_text(script_file, "script file") else {
        return Ok(Vec::new());
    };
    let mut statement = connection
        .prepare_cached(
            "SELECT run_id FROM runs WHERE script_file = ?1 ORDER BY started_at DESC, run_id DESC",
        )
        .context(doing)?;
    let mut rows = statement.query([path_text]).context(doing)?;
    let mut run_ids = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        run_ids.push(stored_run_id(row)?);
    }
    Ok(run_ids)
}

/// [`crate::store::RunReads::past_summaries`]: the script file's runs through
/// `runs_by_script_file`, an inline script's among its project's newest through
/// `runs_by_project_started`.
pub(super) fn past_summaries(
    connection: &Connection,
    of: PastRunsOf<'_>,
    limit: u32,
) -> StoreResult<Vec<EndSummary>> {
    let doing = || format!("read the summaries of {of:?}");
    let mut statement;
    let mut rows = match of {
        PastRunsOf::Script(script_file) => {
            let Ok(path) = path_text(script_file, "script file") else {
                return Ok(Vec::new());
            };
            statement = connection
                .prepare_cached(
                    "SELECT run_id, summary FROM runs WHERE script_file = ?1
                     ORDER BY started_at DESC, run_id DESC LIMIT ?2",
                )
                .context(doing)?;
            statement.query(rusqlite::params![path, limit])
        }
        PastRunsOf::Named {
            project_dir,
            name,
            within,
        } => {
            let project = path_text(project_dir, "project folder")?;
            statement = connection
                // The start of the project's `within`th newest run bounds the walk down the
                // index, which stops at `limit` runs of the name: a subquery of the newest
                // runs would read and sort all `within` of them.
                .prepare_cached(
                    "SELECT run_id, summary FROM runs
                     WHERE project_dir = ?1 AND workflow_name = ?2 AND started_at >= COALESCE(
                         (SELECT started_at FROM runs WHERE project_dir = ?1
                          ORDER BY started_at DESC, run_id DESC LIMIT 1 OFFSET ?3 - 1),
                         -9223372036854775808)
                     ORDER BY started_at DESC, run_id DESC LIMIT ?4",
                )
                .context(doing)?;
            statement.query(rusqlite::params![project, name, within, limit])
        }
    }
    .context(doing)?;
    let mut summaries = Vec::new();
    while let Some(row) = rows.next().context(doing)? {
        let run_id = stored_run_id(row)?;
        let reader = RowReader::new(row, &run_id, "runs");
        summaries.extend(reader.optional_json("summary")?);
    }
    Ok(summaries)
}

pub(super) fn delete(connection: &mut Connection, run_id: &RunId) -> StoreResult<Deleted> {
    let doing = || format!("delete run {run_id}");
    let transaction = write_transaction(connection, doing)?;
    let run_key = run_key(&transaction, run_id)?;
    let deleted = transaction
        .prepare_cached(
            "SELECT project_dir, script_source, script_file FROM runs WHERE run_key = ?1",
        )
        .context(doing)?
        .query_row([run_key], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .context(doing)?;
    // Children first: explicit deletes do not depend on the connection enforcing the
    // foreign keys' ON DELETE CASCADE.
    for sql in [
        // The run's range of event keys (events.rs).
        "DELETE FROM events
         WHERE event_key > ?1 * 4294967296 AND event_key <= ?1 * 4294967296 + 4294967295",
        // The same range of block keys (event_blocks.rs).
        "DELETE FROM event_blocks
         WHERE block_key > ?1 * 4294967296 AND block_key <= ?1 * 4294967296 + 4294967295",
        "DELETE FROM call_supersessions WHERE run_key = ?1",
        // The run's range of call keys (call_keys.rs).
        "DELETE FROM calls
         WHERE call_key >= ?1 * 4294967296 AND call_key <= ?1 * 4294967296 + 4294967295",
        // The same range of block keys (call_blocks.rs).
        "DELETE FROM call_blocks
         WHERE block_key >= ?1 * 4294967296 AND block_key <= ?1 * 4294967296 + 4294967295",
        "DELETE FROM call_tallies WHERE run_key = ?1",
        "DELETE FROM open_sessions WHERE run_key = ?1",
        "DELETE FROM checkpoint_answers WHERE run_key = ?1",
        "DELETE FROM receipts WHERE run_key = ?1",
        "DELETE FROM control_intents WHERE run_key = ?1",
        "DELETE FROM run_scripts WHERE run_key = ?1",
        "DELETE FROM runs WHERE run_key = ?1",
    ] {
        transaction
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([run_key]))
            .context(doing)?;
    }
    transaction.commit().context(doing)?;
    Ok(Deleted {
        project_dir: PathBuf::from(deleted.0),
        inline: ScriptSource::parse(&deleted.1) == Some(ScriptSource::Inline),
        script_file: PathBuf::from(deleted.2),
    })
}

/// The run-table values of a record, converted once so INSERT and UPDATE bind the same thing.
pub(super) struct RunRow<'a> {
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
    reset_at: Option<i64>,
    resume_due_at: Option<i64>,
    auto_resumes: u32,
    limits: String,
    token_usage: String,
    phases: String,
    args: String,
    result: Option<String>,
    setup: Option<String>,
    auth_context: Option<String>,
    checkpoint_context: Option<String>,
    routing: String,
    summary: Option<String>,
}

impl<'a> RunRow<'a> {
    pub(super) fn new(record: &'a RunRecord) -> StoreResult<RunRow<'a>> {
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
            reset_at: record.reset_at,
            resume_due_at: record.auto_resume.due_at,
            auto_resumes: record.auto_resume.count,
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
            summary: optional_json(record.summary.as_ref(), "summary")?,
        })
    }

    pub(super) fn parameters(&self) -> [(&'static str, &dyn ToSql); 28] {
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
            (":reset_at", &self.reset_at),
            (":resume_due_at", &self.resume_due_at),
            (":auto_resumes", &self.auto_resumes),
            (":limits", &self.limits),
            (":token_usage", &self.token_usage),
            (":phases", &self.phases),
            (":args", &self.args),
            (":result", &self.result),
            (":setup", &self.setup),
            (":auth_context", &self.auth_context),
            (":checkpoint_context", &self.checkpoint_context),
            (":routing", &self.routing),
            (":summary", &self.summary),
        ]
    }
}

/// The `run_scripts` values of a record.
pub(super) struct ScriptRow<'a> {
    script: &'a str,
    meta: String,
    script_revisions: String,
    /// NULL when the script declares no companion files.
    files: Option<String>,
}

impl<'a> ScriptRow<'a> {
    pub(super) fn new(record: &'a RunRecord) -> StoreResult<ScriptRow<'a>> {
        // The one place a script text reaches the database: a pack run's never does.
        if record.script_source == ScriptSource::Pack
            && (!is_content_digest(&record.script)
                || !record.files.values().all(|text| is_content_digest(text)))
        {
            return Err(StoreError::Confidential(record.run_id.clone()));
        }
        let files = (!record.files.is_empty())
            .then(|| to_json(&record.files, "companion files"))
            .transpose()?;
        Ok(ScriptRow {
            script: &record.script,
            meta: to_json(&record.meta, "meta")?,
            script_revisions: to_json(&record.script_revisions, "script revisions")?,
            files,
        })
    }

    pub(super) fn parameters(&self) -> [(&'static str, &dyn ToSql); 4] {
        [
            (":script", &self.script),
            (":meta", &self.meta),
            (":script_revisions", &self.script_revisions),
            (":files", &self.files),
        ]
    }
}

pub(super) fn run_from_row(reader: &RowReader<'_, '_>) -> StoreResult<RunRecord> {
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
        reset_at: reader.get("reset_at")?,
        auto_resume: AutoResume {
            due_at: reader.get("resume_due_at")?,
            count: reader.get("auto_resumes")?,
        },
        routing: reader.json("routing")?,
        files: reader.optional_json("files")?.unwrap_or_default(),
        caller: reader.get("caller")?,
        workspace: reader.optional_json("workspace")?,
        summary: reader.optional_json("summary")?,
    })
}

/// The caller tag of a run: `None` when there is no such run. One lookup through the
/// `run_id` index; nothing is decoded.
pub(super) fn caller(
    connection: &Connection,
    run_id: &RunId,
) -> StoreResult<Option<Option<String>>> {
    connection
        .prepare_cached("SELECT caller FROM runs WHERE run_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([run_id.as_str()], |row| row.get(0))
                .optional()
        })
        .context(|| format!("read the caller of run {run_id}"))
}

/// The run's kept `traceparent`: `None` when there is no such run.
pub(super) fn trace(
    connection: &Connection,
    run_id: &RunId,
) -> StoreResult<Option<Option<String>>> {
    connection
        .prepare_cached("SELECT trace_parent FROM runs WHERE run_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([run_id.as_str()], |row| row.get(0))
                .optional()
        })
        .context(|| format!("read the trace context of run {run_id}"))
}

/// Keeps `traceparent` for the run unless one is kept already.
pub(super) fn set_trace(
    connection: &Connection,
    run_id: &RunId,
    traceparent: &str,
) -> StoreResult<bool> {
    let changed = connection
        .prepare_cached(
            "UPDATE runs SET trace_parent = ?2 WHERE run_id = ?1 AND trace_parent IS NULL",
        )
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![run_id.as_str(), traceparent])
        })
        .context(|| format!("keep the trace context of run {run_id}"))?;
    Ok(changed == 1)
}

/// Compare-and-set of a run's caller tag in one statement, atomic on its own: `true` when
/// the row held `expected` (NULL for `None`) and now holds `caller`; `false` otherwise,
/// including when there is no such run.
pub(super) fn set_caller(
    connection: &Connection,
    run_id: &RunId,
    expected: Option<&str>,
    caller: Option<&str>,
) -> StoreResult<bool> {
    let changed = connection
        .prepare_cached("UPDATE runs SET caller = ?2 WHERE run_id = ?1 AND caller IS ?3")
        .and_then(|mut statement| {
            statement.execute(rusqlite::params![run_id.as_str(), caller, expected])
        })
        .context(|| format!("set the caller of run {run_id}"))?;
    Ok(changed == 1)
}
