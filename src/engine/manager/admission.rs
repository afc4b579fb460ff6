//! Capacity and admission: the per-project and daemon-wide caps, preparation, and the
//! one step that creates the run row, its lease and its script copy (none for a pack run,
//! whose texts the store gets only as digests).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::approval;
use crate::engine::manager::confidential;
use crate::engine::manager::{
    Admission, Engine, EngineError, EngineResult, Rejected, RunRequest, Slot,
};
use crate::engine::prepare::{self, PrepareInput, Prepared, ScriptInput};
use crate::engine::routing::RoutingSnapshot;
use crate::model::{Lease, Limits, RunId, RunRecord, RunStatus, ScriptSource};
use crate::util::now_ms;
use crate::util::sync::Lock;

impl Engine {
    /// Takes a capacity slot for a run about to be prepared or executed: within the
    /// project's cap, [`EngineConfig::max_active_per_project`] (`active` counts the project's
    /// runs in the store; `None` skips that check for a run the project already counts) and
    /// within [`EngineConfig::max_runs`] across all projects. Both are checked and the slot
    /// taken under one lock, so two concurrent requests cannot both take the last one.
    ///
    /// [`EngineConfig::max_active_per_project`]: crate::engine::EngineConfig::max_active_per_project
    /// [`EngineConfig::max_runs`]: crate::engine::EngineConfig::max_runs
    pub(super) fn reserve(&self, project_dir: &Path, active: Option<usize>) -> EngineResult<Slot> {
        let mut preparing = self.inner.preparing.locked();
        let in_project = preparing.get(project_dir).copied().unwrap_or(0);
        let per_project = self.inner.config.max_active_per_project;
        if let Some(active) = active
            && active + in_project >= per_project
        {
            return Err(EngineError::Rejected(Rejected::Capacity(format!(
                "project {} already has {per_project} active runs (preparing, awaiting setup or executing); wait for one to finish, pause or stop one",
                project_dir.display()
            ))));
        }
        let executing = self.inner.live.locked().len();
        let owned = executing + preparing.values().sum::<usize>();
        let cap = self.inner.config.max_runs;
        if owned >= cap {
            return Err(EngineError::Rejected(Rejected::Capacity(format!(
                "agentprism is already preparing or executing {owned} runs across all projects, its limit ({} = {cap}); wait for one to finish, pause or stop one (runs waiting for a setup answer do not count)",
                crate::env::DAEMON_MAX_RUNS
            ))));
        }
        *preparing.entry(project_dir.to_path_buf()).or_insert(0) += 1;
        Ok(Slot {
            engine: self.clone(),
            project_dir: project_dir.to_path_buf(),
        })
    }

    /// The project's active runs where a per-project cap applies; 0 without one (no read).
    pub(super) async fn project_active_count(&self, project_dir: &Path) -> EngineResult<usize> {
        if self.inner.config.max_active_per_project == usize::MAX {
            return Ok(0);
        }
        self.active_count(project_dir).await
    }

    pub(super) async fn active_count(&self, project_dir: &Path) -> EngineResult<usize> {
        let ids = self.inner.store.active_runs(project_dir).await?;
        let mut count = 0;
        for run_id in ids {
            let record = self.load_reconciled(&run_id).await?;
            if record.status.is_active() {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Preparation only (the CLI's `validate`): nothing is persisted. The static checks and
    /// the VM's parse of the body come first, so a syntax error is a [`Rejected::Parse`]
    /// rather than the dry run's failure.
    pub async fn validate(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        args: Value,
    ) -> EngineResult<Prepared> {
        self.validate_with(project_dir, script, args, None).await
    }

    /// [`Engine::validate`] with scripted answers for the dry run (`validate
    /// --mock-answers`); their report is read from `mock_answers` afterwards.
    pub async fn validate_with(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        args: Value,
        mock_answers: Option<std::sync::Arc<crate::engine::mock_answers::MockAnswers>>,
    ) -> EngineResult<Prepared> {
        check_project_dir(project_dir)?;
        let bytes = prepare::read_script(self.inner.sources.as_ref(), script)
            .await?
            .bytes;
        prepare::check_static(&bytes, self.inner.config.vm_limits)?;
        let run_id = RunId::parse("validate-0").expect("valid id");
        let mut input = self.prepare_input(bytes, args, project_dir, &run_id, None);
        input.mock_answers = mock_answers;
        Ok(prepare::prepare(input).await?)
    }

    /// What preparation needs from this engine: its persistence root, home, backends, runner,
    /// VM limits and probe settings, and a resolver for nested workflows of `run_id`.
    pub(super) fn prepare_input<'a>(
        &'a self,
        bytes: Vec<u8>,
        args: Value,
        project_dir: &'a Path,
        run_id: &RunId,
        existing_routing: Option<&'a RoutingSnapshot>,
    ) -> PrepareInput<'a> {
        PrepareInput {
            bytes,
            args,
            project_dir,
            persistence_root: self.inner.config.persistence_root.as_deref(),
            home: self.inner.config.home.as_deref(),
            backends: self.inner.backends.clone(),
            runner: self.inner.runner.clone(),
            sources: self.inner.sources.clone(),
            existing_routing,
            vm_limits: self.inner.config.vm_limits,
            probe: self.inner.config.probe,
            probe_limit: self.inner.config.probe_limit,
            nested: Some(self.nested_resolver(project_dir, run_id)),
            budget: Default::default(),
            mock_answers: None,
        }
    }

    /// Prepares and admits a run; execution continues in the background.
    pub async fn start(&self, request: RunRequest) -> EngineResult<Admission> {
        self.start_cancellable(request, &CancellationToken::new())
            .await
    }

    /// Like [`Engine::start`], but `cancel` abandons preparation (releasing its capacity) as
    /// long as the run is not admitted yet. Once admission begins it completes: callers must
    /// keep awaiting the future rather than dropping it.
    pub(crate) async fn start_cancellable(
        &self,
        request: RunRequest,
        cancel: &CancellationToken,
    ) -> EngineResult<Admission> {
        self.start_admitting(request, cancel, RunId::generate())
            .await
    }

    /// [`Engine::start`] under an id the caller chose and already answered (the folder
    /// server's queued starts): fails with the store's `AlreadyExists` if a run has it.
    pub(crate) async fn start_as(
        &self,
        request: RunRequest,
        run_id: RunId,
    ) -> EngineResult<Admission> {
        self.start_admitting(request, &CancellationToken::new(), run_id)
            .await
    }

    async fn start_admitting(
        &self,
        request: RunRequest,
        cancel: &CancellationToken,
        run_id: RunId,
    ) -> EngineResult<Admission> {
        check_project_dir(&request.project_dir)?;
        // The count reads the store: one that cannot be reached cannot give the lease either.
        let active = self
            .project_active_count(&request.project_dir)
            .await
            .map_err(|error| self.unleased(error))?;
        let slot = self.reserve(&request.project_dir, Some(active))?;
        let prepare::ScriptBytes { bytes, file } =
            prepare::read_script(self.inner.sources.as_ref(), &request.script).await?;
        let mut input = self.prepare_input(
            bytes,
            request.args.clone(),
            &request.project_dir,
            &run_id,
            None,
        );
        input.budget = request.limits.budget;
        let mut prepared = prepare_unless_cancelled(input, cancel).await?;
        let size = self.size_gate(&request, &prepared).await?;
        let (workspace, warning) = self.admission_base(&request.project_dir, &prepared).await?;
        prepared.warnings.extend(warning);
        let (script_source, script_file) = match &request.script {
            ScriptInput::Inline(_) => (
                ScriptSource::Inline,
                self.place_script_copy(&request.project_dir, &run_id)
                    .await?,
            ),
            // A pack's script: the path composed under the served folder, nothing on disk.
            ScriptInput::Path(path) if self.inner.sources.confidential() => {
                (ScriptSource::Pack, file.unwrap_or_else(|| path.clone()))
            }
            // The resolved path: later reads refuse a symlink swapped in after admission.
            ScriptInput::Path(path) => (ScriptSource::Path, file.unwrap_or_else(|| path.clone())),
        };
        let needs_setup =
            !prepared.declared_backends.is_empty() && !self.inner.config.allow_script_backends;
        let mut record = admitted_record(
            &request,
            &prepared,
            run_id.clone(),
            (script_source, script_file.clone()),
            needs_setup,
            self.inner.config.agent_timeout,
        );
        record.workspace = workspace;
        let lease = self
            .new_lease()
            .await
            .map_err(|error| self.unleased(error))?;
        // A pack run's texts stay in memory: the store gets their digests.
        let stored = confidential::concealed(&record);
        let _starting = self.starting(&run_id);
        let copy = (script_source == ScriptSource::Inline)
            .then(|| self.spawn_script_copy(&request.project_dir, &run_id, &prepared.text));
        self.record_admitted(&stored, &lease, copy).await?;
        let (status, limits, setup) = (record.status, record.limits, record.setup.clone());
        if needs_setup {
            self.inner
                .store
                .release_lease(&run_id, &lease.token)
                .await?;
        } else if let Some(result) = prepared.known_result.clone() {
            self.spawn_known(record, lease, result, request.trace.clone());
        } else {
            self.spawn_admitted(record, lease, request.trace.clone());
        }
        drop(slot);
        Ok(Admission {
            run_id,
            status,
            script_source,
            script_file,
            limits,
            setup,
            warnings: prepared.warnings,
            size: Some(size),
            continuation: None,
        })
    }

    /// Where the store writes an inline script's copy (what `file://` serves and what a
    /// resume reads back for revisions), resolved like a scriptPath because later reads
    /// refuse links.
    async fn place_script_copy(&self, project_dir: &Path, run_id: &RunId) -> EngineResult<PathBuf> {
        self.inner
            .store
            .script_copy_place(project_dir, run_id)
            .await
            .map_err(|e| copy_refused(&e))
    }

    /// Has the store write an inline script's copy on a blocking thread, so the write (on
    /// some file systems mostly the new file's inode) runs while the run row's commit waits
    /// for its sync.
    fn spawn_script_copy(&self, project_dir: &Path, run_id: &RunId, text: &str) -> ScriptCopy {
        let (store, handle) = (self.inner.store.clone(), tokio::runtime::Handle::current());
        let (folder, run_id, text) = (project_dir.to_path_buf(), run_id.clone(), text.to_owned());
        let written = tokio::task::spawn_blocking(move || {
            handle
                .block_on(store.create_script_copy(&folder, &run_id, &text))
                .map(drop)
        });
        ScriptCopy {
            project_dir: project_dir.to_path_buf(),
            written,
        }
    }

    /// Commits the run row and its lease while `copy` is written; admitted only when both
    /// succeed. A failed commit removes the copy; a failed copy deletes the committed run
    /// (its copy with it), so a refusal leaves neither. A crash between the commit and the
    /// copy's end leaves a run without its copy: its resume writes the copy again.
    async fn record_admitted(
        &self,
        stored: &RunRecord,
        lease: &Lease,
        copy: Option<ScriptCopy>,
    ) -> EngineResult<()> {
        let created = self.inner.store.create_run(stored, lease).await;
        let Some(copy) = copy else {
            return created.map_err(|error| self.unleased(error.into()));
        };
        let copied = copy.written.await.unwrap_or_else(|joined| {
            Err(crate::store::StoreError::Io(format!(
                "the copy's writer ended: {joined}"
            )))
        });
        let run_id = &stored.run_id;
        match (created, copied) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(error), _) => {
                if let Err(left) = self
                    .inner
                    .store
                    .delete_script_copy(&copy.project_dir, run_id)
                    .await
                {
                    tracing::warn!(run = %run_id, "admission failed and its script copy stays: {left}");
                }
                Err(self.unleased(error.into()))
            }
            (Ok(()), Err(error)) => {
                if let Err(left) = self.inner.store.delete_run(run_id).await {
                    tracing::warn!(run = %run_id, "its script copy failed and the run stays: {left}");
                }
                Err(copy_refused(&error))
            }
        }
    }
}

/// An inline script's copy being written beside the run row's commit.
struct ScriptCopy {
    project_dir: PathBuf,
    written: tokio::task::JoinHandle<crate::store::StoreResult<()>>,
}

/// The refusal of a run whose script copy cannot be placed or written.
fn copy_refused(error: &crate::store::StoreError) -> EngineError {
    EngineError::Rejected(Rejected::Unrecorded(format!(
        "cannot write the run's script copy: {error}"
    )))
}

/// The run row admission creates: `pending` while its declared backends wait for approval,
/// else `running` with those backends sealed into its routing.
fn admitted_record(
    request: &RunRequest,
    prepared: &Prepared,
    run_id: RunId,
    (script_source, script_file): (ScriptSource, PathBuf),
    needs_setup: bool,
    agent_timeout: std::time::Duration,
) -> RunRecord {
    let limits = prepared
        .budget
        .set_on(Limits::default().with_overrides(
            request.limits.max_agents,
            request.limits.concurrency,
            request.limits.agent_retries,
        ))
        .with_agent_timeout(agent_timeout);
    let limits = Limits {
        auto_resume: request.limits.auto_resume.filter(|on| !on),
        ..limits
    };
    let mut routing = prepared.routing.clone();
    if !needs_setup {
        routing
            .script_backends
            .extend(prepared.declared_backends.clone());
        routing.seal();
    }
    let setup = needs_setup.then(|| approval::backend_approval_setup(&prepared.declared_backends));
    let now = now_ms();
    RunRecord {
        run_id,
        project_dir: request.project_dir.clone(),
        workflow_name: prepared.analyzed.name.clone(),
        status: if needs_setup {
            RunStatus::Pending
        } else {
            RunStatus::Running
        },
        pause_reason: None,
        error_code: None,
        error_message: None,
        script: prepared.text.clone(),
        script_file,
        script_source,
        script_revisions: Vec::new(),
        meta: prepared.analyzed.meta.clone(),
        args: prepared.args.clone(),
        cwd: request.project_dir.clone(),
        limits,
        phases: prepared.analyzed.phases.clone(),
        current_phase: prepared.analyzed.phases.first().map(|p| p.title.clone()),
        result: None,
        started_at: now,
        updated_at: now,
        token_usage: Default::default(),
        stream_id: uuid::Uuid::new_v4().simple().to_string(),
        generation: 1,
        setup,
        auth_context: None,
        checkpoint_context: None,
        reset_hint: None,
        reset_at: None,
        auto_resume: Default::default(),
        routing,
        files: prepared.files.clone(),
        caller: request.caller.clone(),
        workspace: None,
        summary: None,
    }
}

pub(super) fn check_project_dir(project_dir: &Path) -> EngineResult<()> {
    if !project_dir.is_absolute() {
        return Err(EngineError::Rejected(Rejected::input(
            "projectDir",
            format!(
                "projectDir must be an absolute path, got {}",
                project_dir.display()
            ),
        )));
    }
    if !project_dir.is_dir() {
        return Err(EngineError::Rejected(Rejected::input(
            "projectDir",
            format!(
                "projectDir {} is not an existing directory",
                project_dir.display()
            ),
        )));
    }
    Ok(())
}

/// Prepares a run unless `cancel` fires first. A request cancelled before or during
/// preparation is refused whatever finishes first: the cancellation is looked at first, and
/// again once preparation is done.
async fn prepare_unless_cancelled(
    input: PrepareInput<'_>,
    cancel: &CancellationToken,
) -> EngineResult<Prepared> {
    let cancelled = || {
        EngineError::Rejected(Rejected::Cancelled(
            "the request was cancelled before the run was admitted; nothing was stored".into(),
        ))
    };
    let prepared = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(cancelled()),
        prepared = prepare::prepare(input) => prepared?,
    };
    if cancel.is_cancelled() {
        return Err(cancelled());
    }
    Ok(prepared)
}
