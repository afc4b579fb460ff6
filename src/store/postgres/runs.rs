//! The `runs` and `run_scripts` tables: admission (run row, script row and first lease in one
//! transaction; a taken id is the insert's conflict, so two replicas admitting the same id
//! have one winner), loading, fenced updates, the indexed listings across runs (`scan`),
//! the housekeeping queries, the caller tag's compare-and-set, and deleting a run (its child
//! rows go with it by `ON DELETE CASCADE`, which PostgreSQL always enforces).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use deadpool_postgres::{Client, GenericClient};
use tokio_postgres::types::ToSql;

use super::connection::{Context, execute, is_unique_violation, query, query_one, query_opt};
use super::leases::LeaseRow;
use super::rows::{
    RowReader, fenced_run_key, optional_display_text, optional_json, path_text, run_key,
    stored_run_id, to_json,
};
use crate::model::{
    AutoResume, EndSummary, Lease, PauseReason, RunId, RunRecord, RunStatus, RunSummary,
    ScriptSource, is_content_digest,
};
use crate::store::{Fence, PastRunsOf, RunCounts, ScriptChange, StoreError, StoreResult};

pub(super) use crate::store::script_copies::DeletedRun as Deleted;

const CREATE: &str = "INSERT INTO runs (run_id, caller, lease_token, lease_owner_id, lease_pid,
         lease_proc_start, lease_acquired_at, lease_boot_id, lease_expires_at,
         project_dir, workflow_name, status, pause_reason, error_code, error_message,
         started_at, updated_at, generation, stream_id, script_file, script_source, cwd,
         current_phase, reset_hint, limits, token_usage, phases, args, result, setup,
         auth_context, checkpoint_context, routing, reset_at, resume_due_at, auto_resumes,
         summary, workspace, lease_host)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
         $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35,
         $36, $37, $38, $39)
     ON CONFLICT (run_id) DO NOTHING
     RETURNING run_key";

const UPDATE: &str = "UPDATE runs SET project_dir = $2, workflow_name = $3, status = $4,
         pause_reason = $5, error_code = $6, error_message = $7, started_at = $8,
         updated_at = $9, generation = $10, stream_id = $11, script_file = $12,
         script_source = $13, cwd = $14, current_phase = $15, reset_hint = $16, limits = $17,
         token_usage = $18, phases = $19, args = $20, result = $21, setup = $22,
         auth_context = $23, checkpoint_context = $24, routing = $25, reset_at = $26,
         resume_due_at = $27, auto_resumes = $28, summary = $29
     WHERE run_key = $1";

const LOAD: &str = "SELECT runs.*, run_scripts.script, run_scripts.meta,
         run_scripts.script_revisions, run_scripts.files
     FROM runs JOIN run_scripts USING (run_key)
     WHERE runs.run_id = $1";

const SUMMARY_COLUMNS: &str = "run_id, project_dir, workflow_name, status, pause_reason, \
     started_at, updated_at, result IS NOT NULL AS has_result, summary";

pub(super) async fn create(
    client: &mut Client,
    record: &RunRecord,
    lease: &Lease,
) -> StoreResult<()> {
    let run_id = &record.run_id;
    let doing = || format!("create run {run_id}");
    let run_row = RunRow::new(record)?;
    let script_row = ScriptRow::new(record)?;
    let lease_row = LeaseRow::new(lease)?;
    let run_id_text = run_id.as_str();
    let caller = record.caller.as_deref();
    let workspace = optional_json(record.workspace.as_ref(), "workspace base")?;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_id_text, &caller];
    params.extend(lease_row.params());
    params.extend(run_row.params());
    params.push(&workspace);
    params.push(lease_row.host());

    let transaction = client.transaction().await.context(doing)?;
    let inserted = match query_opt(&transaction, CREATE, &params).await {
        Ok(inserted) => inserted,
        Err(error) if is_unique_violation(&error) => None,
        Err(error) => return Err(error).context(doing),
    };
    let Some(inserted) = inserted else {
        return Err(StoreError::AlreadyExists(run_id.clone()));
    };
    let run_key: i64 = inserted.get(0);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_key];
    params.extend(script_row.params());
    execute(
        &transaction,
        "INSERT INTO run_scripts (run_key, script, meta, script_revisions, files)
         VALUES ($1, $2, $3, $4, $5)",
        &params,
    )
    .await
    .context(doing)?;
    transaction.commit().await.context(doing)
}

pub(super) async fn load(client: &Client, run_id: &RunId) -> StoreResult<RunRecord> {
    let row = query_opt(client, LOAD, &[&run_id.as_str()])
        .await
        .context(|| format!("load run {run_id}"))?;
    match row {
        Some(row) => run_from_row(&RowReader::new(&row, run_id, "runs")),
        None => Err(StoreError::UnknownRun(run_id.clone())),
    }
}

pub(super) async fn update(
    client: &mut Client,
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
    let transaction = client.transaction().await.context(doing)?;
    let run_key = fenced_run_key(&transaction, run_id, fence).await?;
    update_row_in(&transaction, run_key, &run_row, run_id).await?;
    if let Some(script_row) = &script_row {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_key];
        params.extend(script_row.params());
        execute(
            &transaction,
            "UPDATE run_scripts SET script = $2, meta = $3, script_revisions = $4, files = $5
             WHERE run_key = $1",
            &params,
        )
        .await
        .context(doing)?;
    }
    transaction.commit().await.context(doing)
}

/// The run row of `record` written over run `run_key`, in the caller's transaction (after
/// its fence); the script row is left as it is.
pub(super) async fn update_in(
    client: &impl GenericClient,
    run_key: i64,
    record: &RunRecord,
) -> StoreResult<()> {
    update_row_in(client, run_key, &RunRow::new(record)?, &record.run_id).await
}

async fn update_row_in(
    client: &impl GenericClient,
    run_key: i64,
    run_row: &RunRow<'_>,
    run_id: &RunId,
) -> StoreResult<()> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_key];
    params.extend(run_row.params());
    execute(client, UPDATE, &params)
        .await
        .context(|| format!("update run {run_id}"))?;
    Ok(())
}

pub(super) async fn list(
    client: &Client,
    project_dir: Option<&Path>,
    limit: u32,
) -> StoreResult<Vec<RunSummary>> {
    let doing = || "list runs".to_owned();
    let limit = i64::from(limit);
    let rows = match project_dir {
        Some(project_dir) => {
            let project_dir = path_text(project_dir, "project folder")?;
            let sql = format!(
                "SELECT {SUMMARY_COLUMNS} FROM runs WHERE project_dir = $1
                 ORDER BY started_at DESC, run_id DESC LIMIT $2"
            );
            query(client, &sql, &[&project_dir, &limit]).await
        }
        None => {
            let sql = format!(
                "SELECT {SUMMARY_COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC LIMIT $1"
            );
            query(client, &sql, &[&limit]).await
        }
    }
    .context(doing)?;
    let mut summaries = Vec::with_capacity(rows.len());
    for row in &rows {
        let run_id = stored_run_id(row)?;
        let reader = RowReader::new(row, &run_id, "runs");
        summaries.push(RunSummary {
            project_dir: reader.path("project_dir")?,
            workflow_name: reader.string("workflow_name")?,
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

/// Collects the `run_id` column of every row.
fn run_ids(rows: &[tokio_postgres::Row]) -> StoreResult<Vec<RunId>> {
    rows.iter().map(stored_run_id).collect()
}

pub(super) async fn active(client: &Client, project_dir: &Path) -> StoreResult<Vec<RunId>> {
    let project_text = path_text(project_dir, "project folder")?;
    let rows = query(
        client,
        "SELECT run_id FROM runs
         WHERE project_dir = $1 AND status IN ('pending', 'running')
         ORDER BY started_at, run_id",
        &[&project_text],
    )
    .await
    .context(|| format!("list the active runs of {}", project_dir.display()))?;
    run_ids(&rows)
}

pub(super) async fn with_script(client: &Client, script_file: &Path) -> StoreResult<Vec<RunId>> {
    let Ok(path_text) = path_text(script_file, "script file") else {
        return Ok(Vec::new());
    };
    let rows = query(
        client,
        "SELECT run_id FROM runs WHERE script_file = $1 ORDER BY started_at DESC, run_id DESC",
        &[&path_text],
    )
    .await
    .context(|| format!("find the runs of script {}", script_file.display()))?;
    run_ids(&rows)
}

/// [`crate::store::RunReads::past_summaries`]: the script file's runs through
/// `runs_by_script_file`, an inline script's among its project's newest through
/// `runs_by_project_started`.
pub(super) async fn past_summaries(
    client: &Client,
    of: PastRunsOf<'_>,
    limit: u32,
) -> StoreResult<Vec<EndSummary>> {
    let doing = || format!("read the summaries of {of:?}");
    let limit = i64::from(limit);
    let rows = match of {
        PastRunsOf::Script(script_file) => {
            let Ok(path) = path_text(script_file, "script file") else {
                return Ok(Vec::new());
            };
            query(
                client,
                "SELECT run_id, summary FROM runs WHERE script_file = $1
                 ORDER BY started_at DESC, run_id DESC LIMIT $2",
                &[&path, &limit],
            )
            .await
        }
        PastRunsOf::Named {
            project_dir,
            name,
            within,
        } => {
            let project = path_text(project_dir, "project folder")?;
            query(
                client,
                "SELECT run_id, summary FROM (
                     SELECT run_id, workflow_name, summary, started_at FROM runs
                     WHERE project_dir = $1 ORDER BY started_at DESC, run_id DESC LIMIT $3
                 ) AS newest
                 WHERE workflow_name = $2 ORDER BY started_at DESC, run_id DESC LIMIT $4",
                &[&project, &name, &i64::from(within), &limit],
            )
            .await
        }
    }
    .context(doing)?;
    let mut summaries = Vec::new();
    for row in &rows {
        let run_id = stored_run_id(row)?;
        let reader = RowReader::new(row, &run_id, "runs");
        summaries.extend(reader.optional_json("summary")?);
    }
    Ok(summaries)
}

/// How many runs have each status: one pass over the `runs_by_status_updated` index.
pub(super) async fn counts(client: &Client) -> StoreResult<RunCounts> {
    let doing = || "count the runs by status".to_owned();
    let rows = query(
        client,
        "SELECT status, COUNT(*) FROM runs GROUP BY status",
        &[],
    )
    .await
    .context(doing)?;
    let mut counts = RunCounts::default();
    for row in &rows {
        let status: String = row.get(0);
        let count: i64 = row.get(1);
        let status = RunStatus::parse(&status).ok_or_else(|| {
            StoreError::Corrupt(format!("column runs.status: unknown value {status:?}"))
        })?;
        counts.add(status, u64::try_from(count).unwrap_or_default());
    }
    Ok(counts)
}

/// Terminal runs last updated before `before_ms`, oldest first, at most `limit`: through
/// the `runs_by_status_updated` index.
pub(super) async fn terminal_before(
    client: &Client,
    before_ms: i64,
    limit: u32,
) -> StoreResult<Vec<RunId>> {
    let rows = query(
        client,
        "SELECT run_id FROM runs
         WHERE status IN ('completed', 'failed', 'aborted') AND updated_at < $1
         ORDER BY updated_at, run_id LIMIT $2",
        &[&before_ms, &i64::from(limit)],
    )
    .await
    .context(|| "list the runs that finished before a time".to_owned())?;
    run_ids(&rows)
}

pub(super) async fn resumes_due(
    client: &Client,
    until_ms: i64,
    limit: u32,
) -> StoreResult<Vec<(RunId, i64)>> {
    let rows = query(
        client,
        "SELECT run_id, resume_due_at FROM runs
         WHERE resume_due_at IS NOT NULL AND resume_due_at <= $1 AND status = 'paused'
         ORDER BY resume_due_at, run_id LIMIT $2",
        &[&until_ms, &i64::from(limit)],
    )
    .await
    .context(|| "list the runs whose automatic resume is due".to_owned())?;
    rows.iter()
        .map(|row| Ok((stored_run_id(row)?, row.get::<_, i64>("resume_due_at"))))
        .collect()
}

pub(super) async fn delete(client: &mut Client, run_id: &RunId) -> StoreResult<Deleted> {
    let doing = || format!("delete run {run_id}");
    let transaction = client.transaction().await.context(doing)?;
    let run_key = run_key(&transaction, run_id).await?;
    let row = query_one(
        &transaction,
        "DELETE FROM runs WHERE run_key = $1 RETURNING project_dir, script_source, script_file",
        &[&run_key],
    )
    .await
    .context(doing)?;
    transaction.commit().await.context(doing)?;
    let script_source: String = row.get(1);
    Ok(Deleted {
        project_dir: PathBuf::from(row.get::<_, String>(0)),
        inline: ScriptSource::parse(&script_source) == Some(ScriptSource::Inline),
        script_file: PathBuf::from(row.get::<_, String>(2)),
    })
}

/// The caller tag of a run: `None` when there is no such run.
pub(super) async fn caller(
    client: &impl GenericClient,
    run_id: &RunId,
) -> StoreResult<Option<Option<String>>> {
    let row = query_opt(
        client,
        "SELECT caller FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("read the caller of run {run_id}"))?;
    Ok(row.map(|row| row.get(0)))
}

/// The run's kept `traceparent`: `None` when there is no such run.
pub(super) async fn trace(
    client: &impl GenericClient,
    run_id: &RunId,
) -> StoreResult<Option<Option<String>>> {
    let row = query_opt(
        client,
        "SELECT trace_parent FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
    )
    .await
    .context(|| format!("read the trace context of run {run_id}"))?;
    Ok(row.map(|row| row.get(0)))
}

/// Keeps `traceparent` for the run unless one is kept already.
pub(super) async fn set_trace(
    client: &Client,
    run_id: &RunId,
    traceparent: &str,
) -> StoreResult<bool> {
    let changed = execute(
        client,
        "UPDATE runs SET trace_parent = $2 WHERE run_id = $1 AND trace_parent IS NULL",
        &[&run_id.as_str(), &traceparent],
    )
    .await
    .context(|| format!("keep the trace context of run {run_id}"))?;
    Ok(changed == 1)
}

/// Compare-and-set of the caller tag in one statement.
pub(super) async fn set_caller(
    client: &Client,
    run_id: &RunId,
    expected: Option<&str>,
    caller: Option<&str>,
) -> StoreResult<bool> {
    let changed = execute(
        client,
        "UPDATE runs SET caller = $2 WHERE run_id = $1 AND caller IS NOT DISTINCT FROM $3",
        &[&run_id.as_str(), &caller, &expected],
    )
    .await
    .context(|| format!("set the caller of run {run_id}"))?;
    Ok(changed == 1)
}

/// The run-table values of a record, converted once so INSERT and UPDATE bind the same thing,
/// in the order of the statements' columns.
struct RunRow<'a> {
    project_dir: &'a str,
    workflow_name: &'a str,
    status: &'static str,
    pause_reason: Option<&'static str>,
    error_code: Option<&'a str>,
    error_message: Option<Cow<'a, str>>,
    started_at: i64,
    updated_at: i64,
    generation: i64,
    stream_id: &'a str,
    script_file: &'a str,
    script_source: &'static str,
    cwd: &'a str,
    current_phase: Option<Cow<'a, str>>,
    reset_hint: Option<Cow<'a, str>>,
    limits: String,
    token_usage: String,
    phases: String,
    args: String,
    result: Option<String>,
    setup: Option<String>,
    auth_context: Option<String>,
    checkpoint_context: Option<String>,
    routing: String,
    reset_at: Option<i64>,
    resume_due_at: Option<i64>,
    auto_resumes: i64,
    summary: Option<String>,
}

impl<'a> RunRow<'a> {
    fn new(record: &'a RunRecord) -> StoreResult<RunRow<'a>> {
        Ok(RunRow {
            project_dir: path_text(&record.project_dir, "project folder")?,
            workflow_name: &record.workflow_name,
            status: record.status.as_str(),
            pause_reason: record.pause_reason.map(PauseReason::as_str),
            error_code: record.error_code.as_deref(),
            error_message: optional_display_text(record.error_message.as_deref()),
            started_at: record.started_at,
            updated_at: record.updated_at,
            generation: i64::from(record.generation),
            stream_id: &record.stream_id,
            script_file: path_text(&record.script_file, "script file")?,
            script_source: record.script_source.as_str(),
            cwd: path_text(&record.cwd, "cwd")?,
            current_phase: optional_display_text(record.current_phase.as_deref()),
            reset_hint: optional_display_text(record.reset_hint.as_deref()),
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
            reset_at: record.reset_at,
            resume_due_at: record.auto_resume.due_at,
            auto_resumes: i64::from(record.auto_resume.count),
            summary: optional_json(record.summary.as_ref(), "summary")?,
        })
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 28] {
        [
            &self.project_dir,
            &self.workflow_name,
            &self.status,
            &self.pause_reason,
            &self.error_code,
            &self.error_message,
            &self.started_at,
            &self.updated_at,
            &self.generation,
            &self.stream_id,
            &self.script_file,
            &self.script_source,
            &self.cwd,
            &self.current_phase,
            &self.reset_hint,
            &self.limits,
            &self.token_usage,
            &self.phases,
            &self.args,
            &self.result,
            &self.setup,
            &self.auth_context,
            &self.checkpoint_context,
            &self.routing,
            &self.reset_at,
            &self.resume_due_at,
            &self.auto_resumes,
            &self.summary,
        ]
    }
}

/// The `run_scripts` values of a record.
struct ScriptRow<'a> {
    script: &'a str,
    meta: String,
    script_revisions: String,
    /// NULL when the script declares no companion files.
    files: Option<String>,
}

impl<'a> ScriptRow<'a> {
    fn new(record: &'a RunRecord) -> StoreResult<ScriptRow<'a>> {
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

    fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [
            &self.script,
            &self.meta,
            &self.script_revisions,
            &self.files,
        ]
    }
}

fn run_from_row(reader: &RowReader<'_>) -> StoreResult<RunRecord> {
    Ok(RunRecord {
        run_id: reader.run_id.clone(),
        project_dir: reader.path("project_dir")?,
        workflow_name: reader.string("workflow_name")?,
        status: reader.parsed("status", RunStatus::parse)?,
        pause_reason: reader.optional_parsed("pause_reason", PauseReason::parse)?,
        error_code: reader.optional_string("error_code")?,
        error_message: reader.optional_string("error_message")?,
        script: reader.string("script")?,
        script_file: reader.path("script_file")?,
        script_source: reader.parsed("script_source", ScriptSource::parse)?,
        script_revisions: reader.json("script_revisions")?,
        meta: reader.json("meta")?,
        args: reader.json("args")?,
        cwd: reader.path("cwd")?,
        limits: reader.json("limits")?,
        phases: reader.json("phases")?,
        current_phase: reader.optional_string("current_phase")?,
        result: reader.optional_json("result")?,
        started_at: reader.get("started_at")?,
        updated_at: reader.get("updated_at")?,
        token_usage: reader.json("token_usage")?,
        stream_id: reader.string("stream_id")?,
        generation: reader.u32("generation")?,
        setup: reader.optional_json("setup")?,
        auth_context: reader.optional_json("auth_context")?,
        checkpoint_context: reader.optional_json("checkpoint_context")?,
        reset_hint: reader.optional_string("reset_hint")?,
        reset_at: reader.get("reset_at")?,
        auto_resume: AutoResume {
            due_at: reader.get("resume_due_at")?,
            count: u32::try_from(reader.get::<i64>("auto_resumes")?).unwrap_or(u32::MAX),
        },
        routing: reader.json("routing")?,
        files: reader.optional_json("files")?.unwrap_or_default(),
        caller: reader.optional_string("caller")?,
        workspace: reader.optional_json("workspace")?,
        summary: reader.optional_json("summary")?,
    })
}
