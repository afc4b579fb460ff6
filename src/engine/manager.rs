//! The engine's front door: admission, execution, resume, status, stop, pause, setup and
//! permission answers, result paging and deletion, for every project of one process.
//!
//! The CLI and the MCP tool both call these methods, so a run behaves the same whichever
//! front end started it. Each executing run has a lease in the store naming this process;
//! a run whose owner died is reconciled to `paused/interrupted` on the next look.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::approval;
use crate::engine::driver::{self, Control, DriverSetup, LiveView, Persistence};
use crate::engine::events::{EventLog, RunNotice};
use crate::engine::intents;
use crate::engine::journal::ReplayPool;
use crate::engine::permissions::{PendingPermission, PermissionBroker, PermissionError};
use crate::engine::prepare::{self, PrepareInput, Prepared, Rejection, ScriptInput};
use crate::engine::routing::{BackendLookup, RoutingSnapshot};
use crate::engine::runner::{AgentRunner, PermissionOutcome};
use crate::engine::script;
use crate::engine::status::{self, StatusQuery};
use crate::engine::vm::{NestedResolver, VmLimits};
use crate::model::{
    CheckpointAnswer, Lease, Limits, OperationReceipt, PauseReason, RunId, RunRecord, RunStatus,
    RunSummary, ScriptRevision, ScriptSource,
};
use crate::store::{self, Fence, ScriptChange, Store, StoreError};
use crate::util::{now_ms, sha256_hex};

/// Runs preparing, awaiting setup or executing at once in one project.
pub const MAX_ACTIVE_RUNS: usize = 4;
/// How long `pause` waits for executing agents before answering.
pub const PAUSE_WAIT: Duration = Duration::from_secs(2);
/// How long `stop` waits for the owner to settle the run.
pub const STOP_WAIT: Duration = Duration::from_secs(10);
/// How long `status` waits for another process to list a run's pending permissions.
pub const REMOTE_STATUS_WAIT: Duration = Duration::from_secs(1);
/// How long a cancel of one call waits for an owner without a control socket to answer its
/// intent (a foreground run reads intents every second).
pub const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How often that wait looks for the acknowledgement.
const INTENT_POLL: Duration = Duration::from_millis(50);

/// Settings of an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Per-attempt ceiling of an agent turn.
    pub agent_timeout: Duration,
    pub vm_limits: VmLimits,
    /// `AGENTPRISM_ALLOW_SCRIPT_BACKENDS`: approve `meta.backends` without a setup answer.
    pub allow_script_backends: bool,
    /// The user's home, for agent definitions in `~/.agentprism/agents`.
    pub home: Option<PathBuf>,
    /// Probe routed backends during preparation.
    pub probe: bool,
    /// How long the probes of one preparation may take together (`AGENTPRISM_PROBE_TIMEOUT_MS`);
    /// a probe unfinished by then rejects the run.
    pub probe_limit: Duration,
    /// The `ownerId` of this engine's leases. A daemon passes its `instanceId`, so a lease
    /// names the daemon whose control socket can act on the run (daemon.md 1.10 step 3);
    /// `None` (other processes) picks a fresh uuid.
    pub owner_id: Option<String>,
    /// `AGENTPRISM_DAEMON_MAX_RUNS`: runs this engine prepares or executes at once, across
    /// every project. Runs waiting for a setup answer hold no VM and do not count.
    pub max_runs: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            agent_timeout: Duration::from_secs(30 * 60),
            vm_limits: VmLimits::default(),
            allow_script_backends: false,
            home: None,
            probe: true,
            probe_limit: prepare::PROBE_LIMIT,
            owner_id: None,
            max_runs: default_max_runs(VmLimits::default().memory_limit),
        }
    }
}

/// The default of [`EngineConfig::max_runs`]: `max(2, MemTotal / (4 × heap cap))`, so the
/// script heaps of every admitted run together stay under a quarter of the machine's
/// memory. Where `/proc/meminfo` cannot be read (macOS), 8 GiB is assumed.
pub fn default_max_runs(memory_limit: usize) -> usize {
    use crate::util::safe_file::{Links, read_blocking};
    let total = read_blocking(
        std::path::Path::new("/proc/meminfo"),
        64 * 1024,
        Links::Refuse,
    )
    .ok()
    .and_then(|contents| mem_total_bytes(&String::from_utf8_lossy(&contents.bytes)))
    .unwrap_or(8 << 30);
    max_runs_for(total, memory_limit as u64)
}

fn max_runs_for(mem_total: u64, memory_limit: u64) -> usize {
    let per_run = memory_limit.max(1).saturating_mul(4);
    usize::try_from(mem_total / per_run)
        .unwrap_or(usize::MAX)
        .max(2)
}

/// `MemTotal:  16318480 kB` in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let amount: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        None => 1,
        Some(_) => return None,
    };
    amount.checked_mul(unit)
}

/// Failures of engine operations. `Rejected` is a tool error with nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Rejected(String),
    #[error("No workflow run found for runId \"{0}\"")]
    UnknownRun(RunId),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownRun(run_id) => EngineError::UnknownRun(run_id),
            other => EngineError::Store(other),
        }
    }
}

impl From<Rejection> for EngineError {
    fn from(rejection: Rejection) -> Self {
        EngineError::Rejected(rejection.message)
    }
}

pub type EngineResult<T> = Result<T, EngineError>;

/// Caller overrides of the run limits (clamped).
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitOverrides {
    pub max_agents: Option<i64>,
    pub concurrency: Option<i64>,
    pub agent_retries: Option<i64>,
}

/// A request to start a run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub project_dir: PathBuf,
    pub script: ScriptInput,
    pub args: Value,
    pub limits: LimitOverrides,
}

/// A request to continue a run under the same id.
#[derive(Clone, Debug, Default)]
pub struct ResumeRequest {
    pub run_id: Option<RunId>,
    /// Checkpoint answers by call index.
    pub checkpoint_replies: Vec<(u32, Value)>,
    pub limits: LimitOverrides,
    /// The caller's idempotency key; a repeated key returns the first answer.
    pub operation_id: Option<String>,
}

/// The acknowledgement of an admitted run or resume.
#[derive(Clone, Debug)]
pub struct Admission {
    pub run_id: RunId,
    pub status: RunStatus,
    pub script_source: ScriptSource,
    pub script_file: PathBuf,
    pub limits: Limits,
    pub setup: Option<Value>,
    pub warnings: Vec<String>,
    /// Resume only: `{scriptRevised, generation, operationId}`.
    pub continuation: Option<Value>,
}

/// How the engine reaches the process holding a run's lease when that is not this one
/// (daemon.md 1.10). The daemon layer implements it with the signed control socket; an
/// engine without one answers as if every other owner were unreachable.
#[async_trait::async_trait]
pub trait OwnerRoute: Send + Sync {
    /// Sends run-control `body` as operation `op` to the live holder of `lease` and returns
    /// its answer without `ok`.
    async fn forward(&self, lease: &Lease, op: &str, body: &Value) -> Result<Value, Unforwarded>;

    /// Ends the holder of `lease` for `forceOwner`: only a superseded daemon that still
    /// holds the lease and is not this process; SIGTERM, then SIGKILL. `Ok` once it is gone.
    async fn terminate_superseded_owner(&self, lease: &Lease) -> Result<(), String>;
}

/// Why a forwarded request got no answer from the owner.
#[derive(Clone, Debug)]
pub enum Unforwarded {
    /// The lease's process is gone (or is another process now).
    NoLiveOwner,
    /// The owner lives but could not be asked: no control socket, not answering, another
    /// key, or no control protocol at all. `owner` is the `control.owner` document.
    Unreachable { owner: Value, reason: String },
    /// The owner answered with a refusal: its wire code and message.
    Refused { code: String, message: String },
}

/// This process as a lease holder.
#[derive(Clone, Debug)]
pub struct Owner {
    pub owner_id: String,
    pub pid: u32,
    pub proc_start: u64,
}

impl Owner {
    /// This process under a fresh owner id.
    pub fn current() -> Owner {
        Owner::with_id(uuid::Uuid::new_v4().to_string())
    }

    /// This process under `owner_id` (a daemon's `instanceId`).
    pub fn with_id(owner_id: String) -> Owner {
        let pid = std::process::id();
        Owner {
            owner_id,
            pid,
            proc_start: crate::util::process_start_time(pid).unwrap_or(0),
        }
    }

    fn lease(&self) -> Lease {
        Lease {
            owner_id: self.owner_id.clone(),
            pid: self.pid,
            proc_start: self.proc_start,
            boot_id: crate::util::process::current_boot_id(),
            token: uuid::Uuid::new_v4().to_string(),
            acquired_at: now_ms(),
            expires_at: None,
        }
    }
}

struct LiveRun {
    generation: u32,
    control: mpsc::UnboundedSender<Control>,
    view: Arc<Mutex<LiveView>>,
    settled: watch::Receiver<bool>,
}

struct Inner {
    store: Arc<dyn Store>,
    runner: Arc<dyn AgentRunner>,
    backends: Arc<dyn BackendLookup>,
    config: EngineConfig,
    broker: PermissionBroker,
    notices: broadcast::Sender<RunNotice>,
    owner: Owner,
    live: Mutex<HashMap<RunId, LiveRun>>,
    /// Runs being prepared per project (they hold capacity before admission).
    preparing: Mutex<HashMap<PathBuf, usize>>,
    tracker: TaskTracker,
    /// How to reach other lease holders; set once by the front end that builds the engine.
    route: std::sync::OnceLock<Arc<dyn OwnerRoute>>,
}

/// The engine. Cheap to clone.
///
/// Running a workflow in-process, without MCP (here with the instant runner, which answers
/// every prompt at once; the ACP runner drives real agents):
///
/// ```
/// use std::sync::Arc;
/// use agentprism::engine::{Engine, EngineConfig, RunRequest, ScriptInput, StatusQuery};
/// use agentprism::engine::instant::InstantRunner;
/// use agentprism::env::EnvSnapshot;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// let state = tempfile::tempdir()?;
/// let store = Arc::new(agentprism::store::SqliteStore::open(state.path())?);
/// let env = EnvSnapshot::from_pairs([("AGENTPRISM_BACKENDS", r#"{"mine": {"command": "my-acp-agent"}}"#)]);
/// let backends = agentprism::acp::lookup::Backends::from_env(&env).map_err(anyhow::Error::msg)?;
/// let config = EngineConfig { probe: false, ..EngineConfig::default() };
/// let engine = Engine::new(store, InstantRunner::new(), Arc::new(backends), config);
/// let script = "export const meta = { name: 'hi', description: 'one agent', model: 'mine' };\n\
///               return await agent('say hi');";
/// let admission = engine
///     .start(RunRequest {
///         project_dir: state.path().to_path_buf(),
///         script: ScriptInput::Inline(script.into()),
///         args: serde_json::json!({}),
///         limits: Default::default(),
///     })
///     .await?;
/// engine.wait(&admission.run_id).await;
/// let status = engine.status(&admission.run_id, &StatusQuery::default()).await?;
/// assert_eq!(status["outcome"]["result"], "ECHO: say hi");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Holds a preparation's capacity slot until dropped.
struct Slot {
    engine: Engine,
    project_dir: PathBuf,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut preparing) = self.engine.inner.preparing.lock()
            && let Some(count) = preparing.get_mut(&self.project_dir)
        {
            *count = count.saturating_sub(1);
        }
    }
}

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        runner: Arc<dyn AgentRunner>,
        backends: Arc<dyn BackendLookup>,
        config: EngineConfig,
    ) -> Engine {
        let (notices, _) = broadcast::channel(4096);
        Engine {
            inner: Arc::new(Inner {
                store,
                runner,
                backends,
                broker: PermissionBroker::new(Some(notices.clone())),
                notices,
                owner: match &config.owner_id {
                    Some(owner_id) => Owner::with_id(owner_id.clone()),
                    None => Owner::current(),
                },
                config,
                live: Mutex::default(),
                preparing: Mutex::default(),
                tracker: TaskTracker::new(),
                route: std::sync::OnceLock::new(),
            }),
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn backends(&self) -> &Arc<dyn BackendLookup> {
        &self.inner.backends
    }

    pub fn runner(&self) -> &Arc<dyn AgentRunner> {
        &self.inner.runner
    }

    /// Live notices: events, permission requests, settlements.
    pub fn subscribe(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe()
    }

    pub fn owner(&self) -> &Owner {
        &self.inner.owner
    }

    /// Installs how this engine reaches other lease holders. The first call wins.
    pub fn set_owner_route(&self, route: Arc<dyn OwnerRoute>) {
        let _ = self.inner.route.set(route);
    }

    fn nested_resolver(&self, project_dir: &Path, run_id: &RunId) -> NestedResolver {
        let folder = project_dir.join(".agentprism").join("workflows");
        let prefix = run_id.to_string();
        let mut counter = 0u32;
        Box::new(move |name: &str| {
            let text = if name.contains("export const meta") {
                name.to_owned()
            } else {
                if name.contains('/') || name.contains("..") || name.is_empty() {
                    return Err("a saved workflow name must be a plain name".into());
                }
                let path = folder.join(format!("{name}.js"));
                prepare::read_nested(&path)?
            };
            let analyzed = script::analyze(text.as_bytes()).map_err(|e| e.message)?;
            counter += 1;
            Ok((format!("{prefix}-nested{counter}"), analyzed.body))
        })
    }

    /// Takes a capacity slot for a run about to be prepared or executed: within the
    /// project's [`MAX_ACTIVE_RUNS`] (`active` counts the project's runs in the store; `None`
    /// skips that check for a run the project already counts) and within
    /// [`EngineConfig::max_runs`] across all projects. Both are checked and the slot taken
    /// under one lock, so two concurrent requests cannot both take the last one.
    fn reserve(&self, project_dir: &Path, active: Option<usize>) -> EngineResult<Slot> {
        let mut preparing = self
            .inner
            .preparing
            .lock()
            .map_err(|_| EngineError::Rejected("engine state poisoned".into()))?;
        let in_project = preparing.get(project_dir).copied().unwrap_or(0);
        if let Some(active) = active
            && active + in_project >= MAX_ACTIVE_RUNS
        {
            return Err(EngineError::Rejected(format!(
                "project {} already has {MAX_ACTIVE_RUNS} active runs (preparing, awaiting setup or executing); wait for one to finish, pause or stop one",
                project_dir.display()
            )));
        }
        let executing = self.inner.live.lock().map(|live| live.len()).unwrap_or(0);
        let owned = executing + preparing.values().sum::<usize>();
        let cap = self.inner.config.max_runs;
        if owned >= cap {
            return Err(EngineError::Rejected(format!(
                "agentprism is already preparing or executing {owned} runs across all projects, its limit ({} = {cap}); wait for one to finish, pause or stop one (runs waiting for a setup answer do not count)",
                crate::env::DAEMON_MAX_RUNS
            )));
        }
        *preparing.entry(project_dir.to_path_buf()).or_insert(0) += 1;
        Ok(Slot {
            engine: self.clone(),
            project_dir: project_dir.to_path_buf(),
        })
    }

    async fn active_count(&self, project_dir: &Path) -> EngineResult<usize> {
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

    /// Preparation only (the CLI's `validate`): nothing is persisted.
    pub async fn validate(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        args: Value,
    ) -> EngineResult<Prepared> {
        check_project_dir(project_dir)?;
        let bytes = prepare::read_script(script).await?.bytes;
        let run_id = RunId::parse("validate-0").expect("valid id");
        Ok(prepare::prepare(PrepareInput {
            bytes,
            args,
            project_dir,
            persistence_root: self.inner.store.root(),
            home: self.inner.config.home.as_deref(),
            backends: self.inner.backends.clone(),
            runner: self.inner.runner.clone(),
            existing_routing: None,
            vm_limits: self.inner.config.vm_limits,
            probe: self.inner.config.probe,
            probe_limit: self.inner.config.probe_limit,
            nested: Some(self.nested_resolver(project_dir, &run_id)),
        })
        .await?)
    }

    /// Prepares and admits a run; execution continues in the background.
    pub async fn start(&self, request: RunRequest) -> EngineResult<Admission> {
        self.start_cancellable(request, &CancellationToken::new())
            .await
    }

    /// Like [`Engine::start`], but `cancel` abandons preparation (releasing its capacity) as
    /// long as the run is not admitted yet. Once admission begins it completes: callers must
    /// keep awaiting the future rather than dropping it.
    pub async fn start_cancellable(
        &self,
        request: RunRequest,
        cancel: &CancellationToken,
    ) -> EngineResult<Admission> {
        check_project_dir(&request.project_dir)?;
        let limits = Limits::default().with_overrides(
            request.limits.max_agents,
            request.limits.concurrency,
            request.limits.agent_retries,
        );
        let active = self.active_count(&request.project_dir).await?;
        let slot = self.reserve(&request.project_dir, Some(active))?;
        let prepare::ScriptBytes { bytes, file } = prepare::read_script(&request.script).await?;
        let run_id = RunId::generate();
        let preparation = prepare::prepare(PrepareInput {
            bytes,
            args: request.args.clone(),
            project_dir: &request.project_dir,
            persistence_root: self.inner.store.root(),
            home: self.inner.config.home.as_deref(),
            backends: self.inner.backends.clone(),
            runner: self.inner.runner.clone(),
            existing_routing: None,
            vm_limits: self.inner.config.vm_limits,
            probe: self.inner.config.probe,
            probe_limit: self.inner.config.probe_limit,
            nested: Some(self.nested_resolver(&request.project_dir, &run_id)),
        });
        let prepared = tokio::select! {
            prepared = preparation => prepared?,
            _ = cancel.cancelled() => {
                return Err(EngineError::Rejected("the request was cancelled before the run was admitted; nothing was stored".into()));
            }
        };

        let (script_source, script_file) = match &request.script {
            ScriptInput::Inline(_) => {
                let path =
                    store::script_copy_path(self.inner.store.root(), &request.project_dir, &run_id);
                // The run row keeps the text durably; the copy is what `file://` serves and what
                // a resume reads back for revisions, so it needs no fsync of its own.
                crate::util::write_replace(&path, prepared.text.as_bytes(), 0o600).map_err(
                    |e| EngineError::Rejected(format!("cannot write the run's script copy: {e}")),
                )?;
                // Recorded resolved, like a scriptPath (the root may sit behind a link, such
                // as /home -> /var/home), because later reads refuse links.
                let path = std::fs::canonicalize(&path).unwrap_or(path);
                (ScriptSource::Inline, path)
            }
            // The resolved path: later reads refuse a symlink swapped in after admission.
            ScriptInput::Path(path) => (ScriptSource::Path, file.unwrap_or_else(|| path.clone())),
        };
        let needs_setup =
            !prepared.declared_backends.is_empty() && !self.inner.config.allow_script_backends;
        let mut routing = prepared.routing.clone();
        if !needs_setup {
            routing
                .script_backends
                .extend(prepared.declared_backends.clone());
            routing.seal();
        }
        let setup =
            needs_setup.then(|| approval::backend_approval_setup(&prepared.declared_backends));
        let now = now_ms();
        let record = RunRecord {
            run_id: run_id.clone(),
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
            script_file: script_file.clone(),
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
            setup: setup.clone(),
            auth_context: None,
            checkpoint_context: None,
            reset_hint: None,
            routing: serde_json::to_value(&routing).unwrap_or(Value::Null),
        };
        let lease = self.inner.owner.lease();
        if let Err(error) = self.inner.store.create_run(&record, &lease).await {
            if script_source == ScriptSource::Inline {
                let _ = std::fs::remove_file(&script_file);
            }
            return Err(error.into());
        }
        if needs_setup {
            self.inner
                .store
                .release_lease(&run_id, &lease.token)
                .await?;
        } else {
            self.spawn_execution(record, lease, None, Vec::new());
        }
        drop(slot);
        Ok(Admission {
            run_id,
            status: if needs_setup {
                RunStatus::Pending
            } else {
                RunStatus::Running
            },
            script_source,
            script_file,
            limits,
            setup,
            warnings: prepared.warnings,
            continuation: None,
        })
    }

    /// Starts (or restarts) execution of `record`'s current generation under `lease`.
    fn spawn_execution(
        &self,
        record: RunRecord,
        lease: Lease,
        pool: Option<ReplayPool>,
        answers: Vec<CheckpointAnswer>,
    ) {
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (settled_tx, settled_rx) = watch::channel(false);
        let view = Arc::new(Mutex::new(LiveView {
            current_phase: record.current_phase.clone(),
            usage: record.token_usage,
            ..LiveView::default()
        }));
        if let Ok(mut live) = self.inner.live.lock() {
            live.insert(
                record.run_id.clone(),
                LiveRun {
                    generation: record.generation,
                    control: control_tx,
                    view: view.clone(),
                    settled: settled_rx,
                },
            );
        }
        let engine = self.clone();
        self.inner.tracker.spawn(async move {
            engine
                .execute(record, lease, pool, answers, view, control_rx)
                .await;
            let _ = settled_tx.send(true);
        });
    }

    async fn execute(
        &self,
        mut record: RunRecord,
        lease: Lease,
        pool: Option<ReplayPool>,
        answers: Vec<CheckpointAnswer>,
        view: Arc<Mutex<LiveView>>,
        control: mpsc::UnboundedReceiver<Control>,
    ) {
        let store = self.inner.store.clone();
        let run_id = record.run_id.clone();
        let routing: RoutingSnapshot =
            serde_json::from_value(record.routing.clone()).unwrap_or_default();
        let prepared_state = async {
            let pool = match pool {
                Some(pool) => pool,
                None => ReplayPool::new(store.replay_pool(&run_id).await?, false),
            };
            let last_seq = store.last_event_seq(&run_id).await?;
            let calls = store.calls(&run_id).await?;
            let next_settlement = calls
                .iter()
                .map(|c| c.settlement_ordinal + 1)
                .max()
                .unwrap_or(0);
            Ok::<_, StoreError>((pool, last_seq, next_settlement))
        }
        .await;
        let (pool, last_seq, next_settlement) = match prepared_state {
            Ok(state) => state,
            Err(error) => {
                tracing::error!(run = %run_id, "cannot start execution: {error}");
                record.status = RunStatus::Paused;
                record.pause_reason = Some(PauseReason::Interrupted);
                record.error_message = Some(format!("could not start: {error}"));
                let _ = store
                    .update_run(&record, ScriptChange::Unchanged, Fence(&lease.token))
                    .await;
                let _ = store.release_lease(&run_id, &lease.token).await;
                self.finish_live(&run_id, record.generation, record.status);
                return;
            }
        };
        let analyzed_body = match script::analyze(record.script.as_bytes()) {
            Ok(analyzed) => analyzed.body,
            Err(error) => {
                record.status = RunStatus::Failed;
                record.error_code = Some("SCRIPT_VALIDATION_ERROR".into());
                record.error_message = Some(error.message);
                record.updated_at = now_ms();
                let _ = store
                    .update_run(&record, ScriptChange::Unchanged, Fence(&lease.token))
                    .await;
                let _ = store.release_lease(&run_id, &lease.token).await;
                self.finish_live(&run_id, record.generation, record.status);
                return;
            }
        };
        let setup = DriverSetup {
            run_id: run_id.clone(),
            generation: record.generation,
            body: analyzed_body,
            args: record.args.clone(),
            cwd: record.cwd.clone(),
            phases: record.phases.clone(),
            meta_model: record
                .meta
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
            limits: record.limits,
            routing,
            backends: self.inner.backends.clone(),
            runner: self.inner.runner.clone(),
            persistence: Persistence::Store {
                store: store.clone(),
                lease_token: lease.token.clone(),
            },
            pool,
            answers,
            last_event_seq: last_seq,
            next_settlement,
            agent_timeout: self.inner.config.agent_timeout,
            vm_limits: self.inner.config.vm_limits,
            broker: self.inner.broker.clone(),
            notices: Some(self.inner.notices.clone()),
            usage: record.token_usage,
            current_phase: record.current_phase.clone(),
            nested: Some(self.nested_resolver(&record.project_dir, &run_id)),
            live: view,
        };
        let outcome = driver::run(setup, control).await;
        record.status = outcome.status;
        record.pause_reason = outcome.pause_reason;
        record.error_code = outcome.error_code.clone();
        record.error_message = outcome.error_message.clone();
        record.result = outcome.result.clone();
        record.auth_context = outcome.auth_context.clone();
        record.reset_hint = outcome.reset_hint.clone();
        record.checkpoint_context = outcome.checkpoint_context.clone();
        record.token_usage = outcome.usage;
        record.current_phase = outcome
            .current_phase
            .clone()
            .or(record.current_phase.clone());
        record.updated_at = now_ms();
        if let Some(error) = &outcome.store_error {
            record.error_message = Some(format!("run store write failed: {error}"));
        }
        if let Err(error) = store
            .update_run(&record, ScriptChange::Unchanged, Fence(&lease.token))
            .await
        {
            tracing::error!(run = %run_id, "cannot record the run's outcome: {error}");
        }
        let _ = store.release_lease(&run_id, &lease.token).await;
        self.finish_live(&run_id, record.generation, record.status);
    }

    fn finish_live(&self, run_id: &RunId, generation: u32, status: RunStatus) {
        if let Ok(mut live) = self.inner.live.lock()
            && live
                .get(run_id)
                .is_some_and(|entry| entry.generation == generation)
        {
            live.remove(run_id);
        }
        let _ = self.inner.notices.send(RunNotice::Settled {
            run_id: run_id.clone(),
            status: status.as_str().to_owned(),
        });
    }

    /// Waits until `run_id` is no longer executing in this process.
    pub async fn wait(&self, run_id: &RunId) {
        let receiver = self
            .inner
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(run_id).map(|l| l.settled.clone()));
        if let Some(mut receiver) = receiver {
            let _ = receiver.wait_for(|settled| *settled).await;
        }
    }

    /// Runs this process owns right now: executing generations plus preparations holding a
    /// capacity slot. The daemon counts them as work that keeps it from idling out.
    pub fn active_executions(&self) -> usize {
        let live = self.inner.live.lock().map(|live| live.len()).unwrap_or(0);
        let preparing: usize = self
            .inner
            .preparing
            .lock()
            .map(|preparing| preparing.values().sum())
            .unwrap_or(0);
        live + preparing
    }

    /// The runs this process executes now.
    pub fn live_run_ids(&self) -> Vec<RunId> {
        self.inner
            .live
            .lock()
            .map(|live| live.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether this process executes `run_id` now.
    pub fn is_live(&self, run_id: &RunId) -> bool {
        self.inner
            .live
            .lock()
            .map(|live| live.contains_key(run_id))
            .unwrap_or(false)
    }

    fn send_control(&self, run_id: &RunId, control: Control) -> bool {
        self.inner
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(run_id).map(|l| l.control.send(control).is_ok()))
            .unwrap_or(false)
    }

    /// Loads a run, turning a pending/running run whose owner died into `paused/interrupted`.
    pub async fn load_reconciled(&self, run_id: &RunId) -> EngineResult<RunRecord> {
        let record = self.inner.store.load_run(run_id).await?;
        if record.status != RunStatus::Running || self.is_live(run_id) {
            return Ok(record);
        }
        let lease = self.inner.store.lease(run_id).await?;
        if let Some(lease) = &lease
            && crate::util::process_is(lease.pid, lease.proc_start)
            && lease.owner_id != self.inner.owner.owner_id
        {
            return Ok(record);
        }
        // The owner is gone: take the lease, record the interruption, let go again.
        let ours = self.inner.owner.lease();
        if !self
            .inner
            .store
            .acquire_lease(run_id, lease.as_ref().map(|l| l.token.as_str()), &ours)
            .await?
        {
            return Ok(self.inner.store.load_run(run_id).await?);
        }
        let mut record = self.inner.store.load_run(run_id).await?;
        if record.status == RunStatus::Running {
            record.status = RunStatus::Paused;
            record.pause_reason = Some(PauseReason::Interrupted);
            record.updated_at = now_ms();
            let calls = self.inner.store.calls(run_id).await?;
            let mut usage = crate::model::Usage::default();
            for call in &calls {
                usage.add(&call.usage);
            }
            record.token_usage = usage;
            self.record_cold(
                &record,
                "paused",
                json!({"reason": "interrupted"}),
                &ours.token,
            )
            .await?;
        }
        self.inner.store.release_lease(run_id, &ours.token).await?;
        Ok(record)
    }

    /// Settles a run that no execution holds: one event on its stream, then the run row,
    /// both fenced by the lease the caller took for the change.
    async fn record_cold(
        &self,
        record: &RunRecord,
        event: &str,
        fields: Value,
        lease_token: &str,
    ) -> EngineResult<()> {
        let run_id = &record.run_id;
        let last = self.inner.store.last_event_seq(run_id).await?;
        let mut events = EventLog::new(run_id.clone(), last, Some(self.inner.notices.clone()));
        events.push(event, "root", fields);
        self.inner
            .store
            .append_events(run_id, &events.take(), Fence(lease_token))
            .await?;
        self.inner
            .store
            .update_run(record, ScriptChange::Unchanged, Fence(lease_token))
            .await?;
        Ok(())
    }

    /// Continues a paused, aborted or failed run under the same id.
    pub async fn resume(&self, request: ResumeRequest) -> EngineResult<Admission> {
        let run_id = request
            .run_id
            .clone()
            .ok_or_else(|| EngineError::Rejected("runId is required".into()))?;
        if let Some(operation_id) = &request.operation_id
            && let Some(receipt) = self.inner.store.receipt(&run_id, operation_id).await?
        {
            let digest = resume_digest(&request);
            if receipt.input_digest != digest {
                return Err(EngineError::Rejected(format!(
                    "operation {operation_id} was already used with different inputs"
                )));
            }
            // A receipt answers only while the generation it started is the run's latest
            // and still going (or done): once that generation was stopped, paused or failed,
            // the same request resumes again (docs/api.md, "Exact retries").
            let record = self.load_reconciled(&run_id).await?;
            let stands = receipt.generation == record.generation
                && !matches!(
                    record.status,
                    RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed
                );
            if stands {
                return admission_from_receipt(&receipt.response)
                    .ok_or_else(|| EngineError::Rejected("stored receipt is unreadable".into()));
            }
        }
        let mut record = self.load_reconciled(&run_id).await?;
        match record.status {
            RunStatus::Completed => {
                return Err(EngineError::Rejected(format!(
                    "run {run_id} is completed; a completed run cannot be resumed (start a new run)"
                )));
            }
            RunStatus::Pending => {
                return Err(EngineError::Rejected(format!(
                    "run {run_id} is waiting for a setup answer; answer it with setup-response"
                )));
            }
            RunStatus::Running => {
                return Err(EngineError::Rejected(format!(
                    "run {run_id} is running; pause or stop it before resuming"
                )));
            }
            // The one aborted run that stays aborted (docs/api.md, "setup_declined"): its
            // user said no to the commands it would run.
            RunStatus::Aborted if !approval::setup_approved(&record) => {
                return Err(EngineError::Rejected(format!(
                    "run {run_id} cannot be resumed: it was aborted because its backend approval was declined or cancelled (reason \"{}\"), and that is final; start a new run to be asked again",
                    approval::SETUP_DECLINED
                )));
            }
            RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed => {}
        }
        // Checkpoint answers: validated against the waiting checkpoint, first writer wins.
        let mut answers_written = Vec::new();
        for (index, answer) in &request.checkpoint_replies {
            let context = record
                .checkpoint_context
                .clone()
                .filter(|c| c.get("callIndex").and_then(Value::as_u64) == Some(u64::from(*index)));
            let existing = self.inner.store.checkpoint_answers(&run_id).await?;
            if let Some(previous) = existing.iter().find(|a| a.call_index == *index) {
                if &previous.answer != answer {
                    return Err(EngineError::Rejected(format!(
                        "checkpoint {index} was already answered with {}; a different answer cannot replace it",
                        previous.answer
                    )));
                }
                continue;
            }
            let Some(context) = context else {
                return Err(EngineError::Rejected(format!(
                    "checkpoint {index} is not waiting for an answer{}",
                    record
                        .checkpoint_context
                        .as_ref()
                        .and_then(|c| c.get("callIndex"))
                        .map(|i| format!(" (the run waits on checkpoint {i})"))
                        .unwrap_or_default()
                )));
            };
            validate_checkpoint_answer(&context, *index, answer)?;
            answers_written.push(CheckpointAnswer {
                call_index: *index,
                hash: context
                    .get("hash")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                answer: answer.clone(),
                answered_at: now_ms(),
            });
        }
        // A changed script file is a revision, validated like a new run.
        let mut revised = false;
        let current_text = prepare::reread_script(&record.script_file)
            .await
            .map_err(|r| EngineError::Rejected(format!("cannot resume run {run_id}: {r}")))?;
        let routing: RoutingSnapshot =
            serde_json::from_value(record.routing.clone()).unwrap_or_default();
        if let Some(bytes) = current_text
            && bytes != record.script.as_bytes()
        {
            let prepared = prepare::prepare(PrepareInput {
                bytes,
                args: record.args.clone(),
                project_dir: &record.project_dir,
                persistence_root: self.inner.store.root(),
                home: self.inner.config.home.as_deref(),
                backends: self.inner.backends.clone(),
                runner: self.inner.runner.clone(),
                existing_routing: Some(&routing),
                vm_limits: self.inner.config.vm_limits,
                probe: self.inner.config.probe,
                probe_limit: self.inner.config.probe_limit,
                nested: Some(self.nested_resolver(&record.project_dir, &run_id)),
            })
            .await
            .map_err(|r| {
                EngineError::Rejected(format!(
                    "the revised script {} was not accepted: {}",
                    record.script_file.display(),
                    r.message
                ))
            })?;
            record.script = prepared.text;
            record.meta = prepared.analyzed.meta.clone();
            record.workflow_name = prepared.analyzed.name.clone();
            record.phases = prepared.analyzed.phases.clone();
            revised = true;
        }
        let active = self.active_count(&record.project_dir).await?;
        let slot = self.reserve(&record.project_dir, Some(active))?;
        for answer in &answers_written {
            let stored = self
                .inner
                .store
                .put_checkpoint_answer(&run_id, answer)
                .await?;
            if stored.answer != answer.answer {
                return Err(EngineError::Rejected(format!(
                    "checkpoint {} was already answered differently",
                    answer.call_index
                )));
            }
        }
        let lease = self.inner.owner.lease();
        let previous = self.inner.store.lease(&run_id).await?;
        if let Some(previous) = &previous
            && crate::util::process_is(previous.pid, previous.proc_start)
            && previous.owner_id != self.inner.owner.owner_id
        {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is held by process {}",
                previous.pid
            )));
        }
        if !self
            .inner
            .store
            .acquire_lease(&run_id, previous.as_ref().map(|l| l.token.as_str()), &lease)
            .await?
        {
            return Err(EngineError::Rejected(format!(
                "run {run_id} was taken by another process while resuming"
            )));
        }
        // A stop asked for before this resume must not end the new generation.
        let runs = intents::runs_dir(self.inner.store.root(), &record.project_dir);
        for intent in intents::unacked(&runs, &run_id) {
            let retired = json!({"state": "superseded", "operationId": intent.op, "stopped": false, "reason": "the run was resumed after the stop was requested"});
            self.acknowledge(&runs, &run_id, &intent.op, &retired);
        }
        record.generation += 1;
        record.limits = record.limits.with_overrides(
            request.limits.max_agents,
            request.limits.concurrency,
            request.limits.agent_retries,
        );
        if revised {
            record.script_revisions.push(ScriptRevision {
                generation: record.generation,
                accepted_at: now_ms(),
                sha256: sha256_hex(record.script.as_bytes()),
            });
        }
        record.status = RunStatus::Running;
        record.pause_reason = None;
        record.error_code = None;
        record.error_message = None;
        record.auth_context = None;
        record.checkpoint_context = None;
        record.reset_hint = None;
        record.result = None;
        record.updated_at = now_ms();
        let operation_id = request
            .operation_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let admission = Admission {
            run_id: run_id.clone(),
            status: RunStatus::Running,
            script_source: record.script_source,
            script_file: record.script_file.clone(),
            limits: record.limits,
            setup: None,
            warnings: Vec::new(),
            continuation: Some(
                json!({"scriptRevised": revised, "generation": record.generation, "operationId": operation_id}),
            ),
        };
        let receipt = OperationReceipt {
            operation_id: operation_id.clone(),
            generation: record.generation,
            input_digest: resume_digest(&request),
            response: admission_to_receipt(&admission),
            created_at: now_ms(),
        };
        let write = async {
            self.inner.store.put_receipt(&run_id, &receipt).await?;
            self.inner
                .store
                .update_run(
                    &record,
                    if revised {
                        ScriptChange::Changed
                    } else {
                        ScriptChange::Unchanged
                    },
                    Fence(&lease.token),
                )
                .await
        };
        if let Err(error) = write.await {
            let _ = self.inner.store.release_lease(&run_id, &lease.token).await;
            return Err(error.into());
        }
        let pool = ReplayPool::new(self.inner.store.replay_pool(&run_id).await?, revised);
        let answers = self.inner.store.checkpoint_answers(&run_id).await?;
        self.spawn_execution(record, lease, Some(pool), answers);
        drop(slot);
        Ok(admission)
    }

    /// Answers a pending backend-approval setup.
    pub async fn setup_response(
        &self,
        run_id: &RunId,
        setup_id: &str,
        response: &Value,
    ) -> EngineResult<Value> {
        let mut record = self.load_reconciled(run_id).await?;
        let Some(setup) = record.setup.clone() else {
            return Err(EngineError::Rejected(format!(
                "run {run_id} has no setup request"
            )));
        };
        let request_id = setup
            .pointer("/request/id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if request_id != setup_id {
            return Err(EngineError::Rejected(format!(
                "setupId {setup_id} does not match the run's setup request"
            )));
        }
        let action = response
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let approve = match action {
            "accept" => {
                let content = response.get("content").cloned().unwrap_or(Value::Null);
                let schema = setup
                    .pointer("/request/requestedSchema")
                    .cloned()
                    .unwrap_or(Value::Null);
                crate::engine::schema::validate(&schema, &content).map_err(|e| {
                    EngineError::Rejected(format!(
                        "setup-response content does not match the requested schema: {e}"
                    ))
                })?;
                content
                    .get("approve")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            }
            "decline" | "cancel" => false,
            other => {
                return Err(EngineError::Rejected(format!(
                    "setup-response action must be accept, decline or cancel, got {other:?}"
                )));
            }
        };
        if let Some(answered) = setup.get("answer") {
            if answered == response {
                let mut answer = json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "status": record.status, "accepted": approve});
                if !approve {
                    answer["reason"] = json!(approval::SETUP_DECLINED);
                }
                return Ok(answer);
            }
            return Err(EngineError::Rejected(format!(
                "setup {setup_id} was already answered with {answered}; a different answer cannot replace it"
            )));
        }
        if record.status != RunStatus::Pending {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is not waiting for setup"
            )));
        }
        if let Some(owner) = self.foreign_owner(run_id).await? {
            // A predecessor still holds the lease: the answer is its to carry out.
            let body = json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": response});
            let answer = self.forward_live(run_id, &owner, &body).await?;
            return Ok(answer.get("answer").cloned().unwrap_or(answer));
        }
        // An approved run starts executing: it needs room under the cap across projects (it
        // already counts in its project). Refused, the setup stays unanswered.
        let slot = if approve {
            Some(self.reserve(&record.project_dir, None)?)
        } else {
            None
        };
        let lease = self.inner.owner.lease();
        let previous = self.inner.store.lease(run_id).await?;
        if !self
            .inner
            .store
            .acquire_lease(run_id, previous.as_ref().map(|l| l.token.as_str()), &lease)
            .await?
        {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is being changed by another process"
            )));
        }
        let mut answered = setup.clone();
        answered["answer"] = response.clone();
        answered["state"] = Value::String(if approve {
            "approved".into()
        } else {
            "declined".into()
        });
        record.setup = Some(answered);
        record.updated_at = now_ms();
        if approve {
            let analyzed = script::analyze(record.script.as_bytes())
                .map_err(|e| EngineError::Rejected(e.message))?;
            let mut routing: RoutingSnapshot =
                serde_json::from_value(record.routing.clone()).unwrap_or_default();
            routing
                .script_backends
                .extend(prepare::declared_backends(&analyzed));
            routing.seal();
            record.routing = serde_json::to_value(&routing).unwrap_or(Value::Null);
            record.status = RunStatus::Running;
            self.inner
                .store
                .update_run(&record, ScriptChange::Unchanged, Fence(&lease.token))
                .await?;
            let status = record.status;
            self.spawn_execution(record, lease, None, Vec::new());
            drop(slot);
            Ok(
                json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "status": status, "accepted": true}),
            )
        } else {
            record.status = RunStatus::Aborted;
            self.record_cold(
                &record,
                "stopped",
                json!({"reason": approval::SETUP_DECLINED}),
                &lease.token,
            )
            .await?;
            self.inner.store.release_lease(run_id, &lease.token).await?;
            Ok(
                json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "status": "aborted", "accepted": false, "reason": approval::SETUP_DECLINED}),
            )
        }
    }

    /// The bounded status view (engine.md 6.4).
    pub async fn status(&self, run_id: &RunId, query: &StatusQuery) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        let view = self
            .inner
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(run_id).map(|l| l.view.clone()));
        let mut live_view = view.and_then(|v| v.lock().ok().map(|v| v.clone()));
        let permissions = self.inner.broker.pending(run_id.as_str());
        // A run another live process executes: its live calls and pending permissions are
        // that process's to tell (`live-status`; an owner that does not know it is asked for
        // `list-permissions` only).
        let mut remote_permissions = Vec::new();
        if record.status == RunStatus::Running && live_view.is_none() {
            let (remote_view, remote) = self.remote_live(run_id).await?;
            live_view = remote_view;
            remote_permissions = remote;
        }
        let mut document = status::build(
            self.inner.store.as_ref(),
            &record,
            live_view.as_ref(),
            &permissions,
            query,
        )
        .await?;
        if !remote_permissions.is_empty() {
            document["pendingPermissions"] = Value::Array(remote_permissions);
        }
        Ok(document)
    }

    /// The live calls (as `live-status` sends them) of a run this process executes.
    pub fn live_status(&self, run_id: &RunId) -> Option<Value> {
        let view = self
            .inner
            .live
            .lock()
            .ok()?
            .get(run_id)
            .map(|l| l.view.clone())?;
        let view = view.lock().ok()?.clone();
        let calls: Vec<Value> = view
            .calls
            .iter()
            .map(|(index, call)| {
                json!({"index": index, "label": call.label, "phase": call.phase, "model": call.model,
                       "backendId": call.backend_id, "timeoutMs": call.timeout_ms, "status": call.state})
            })
            .collect();
        Some(json!({"currentPhase": view.current_phase, "calls": calls}))
    }

    /// Asks the live foreign owner of `run_id` for its live calls and pending permissions,
    /// within [`REMOTE_STATUS_WAIT`]; nothing when it cannot say.
    async fn remote_live(&self, run_id: &RunId) -> EngineResult<(Option<LiveView>, Vec<Value>)> {
        let Some(lease) = self.foreign_owner(run_id).await? else {
            return Ok((None, Vec::new()));
        };
        let body = json!({"action": "live-status", "runId": run_id});
        let op = uuid::Uuid::new_v4().to_string();
        let asked =
            tokio::time::timeout(REMOTE_STATUS_WAIT, self.forward(&lease, &op, &body)).await;
        match asked {
            Ok(Ok(answer)) => {
                let permissions = answer
                    .get("permissions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                Ok((answer.get("live").and_then(live_view_of), permissions))
            }
            Ok(Err(Unforwarded::Refused { .. })) => {
                Ok((None, self.remote_permissions(run_id).await?))
            }
            _ => Ok((None, Vec::new())),
        }
    }

    /// The pending permission requests of a run another live process executes, asked of
    /// that process (`list-permissions`); empty when it cannot say within a second.
    async fn remote_permissions(&self, run_id: &RunId) -> EngineResult<Vec<Value>> {
        let Some(lease) = self.foreign_owner(run_id).await? else {
            return Ok(Vec::new());
        };
        let body = json!({"action": "list-permissions", "runId": run_id});
        let op = uuid::Uuid::new_v4().to_string();
        let asked =
            tokio::time::timeout(REMOTE_STATUS_WAIT, self.forward(&lease, &op, &body)).await;
        Ok(match asked {
            Ok(Ok(answer)) => answer
                .get("permissions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => Vec::new(),
        })
    }

    /// Stops a whole run (`call_index: None`) or cancels one live agent call.
    pub async fn stop(
        &self,
        run_id: &RunId,
        call_index: Option<u32>,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        self.stop_with(run_id, call_index, false, query).await
    }

    /// [`Engine::stop`] that may also end a superseded daemon still holding the run's lease
    /// (`force_owner`, whole-run stops only; daemon.md 1.10 step 9).
    ///
    /// A run executing in another live process is stopped there: the stop is recorded as a
    /// durable intent and forwarded to the lease holder. When the holder cannot be reached
    /// the answer carries `control: {state:"pending", operationId, requestedAt, owner}` and
    /// the intent stays for the owner to carry out; a retry reuses its operation id.
    pub async fn stop_with(
        &self,
        run_id: &RunId,
        call_index: Option<u32>,
        force_owner: bool,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        if force_owner && call_index.is_some() {
            return Err(EngineError::Rejected(
                "forceOwner cannot be combined with callIndex: callIndex cancels one live call, forceOwner stops the whole run".into(),
            ));
        }
        let record = self.load_reconciled(run_id).await?;
        if let Some(index) = call_index {
            return self.cancel_agent(run_id, index, query).await;
        }
        if record.status.is_terminal() {
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(false);
            status["alreadyTerminal"] = Value::Bool(true);
            return Ok(status);
        }
        if self.send_control(run_id, Control::Stop) {
            let settled = tokio::time::timeout(STOP_WAIT, self.wait(run_id))
                .await
                .is_ok();
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(settled);
            if !settled {
                status["control"] =
                    json!({"state": "pending", "operationId": uuid::Uuid::new_v4().to_string()});
            }
            return Ok(status);
        }
        if record.status == RunStatus::Running
            && let Some(lease) = self.foreign_owner(run_id).await?
        {
            return self.stop_remote(&record, &lease, force_owner, query).await;
        }
        self.stop_cold(run_id, query).await
    }

    /// Cancels one live agent call, here or in the process executing the run.
    async fn cancel_agent(
        &self,
        run_id: &RunId,
        index: u32,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        if !self.is_live(run_id) {
            let Some(lease) = self.foreign_owner(run_id).await? else {
                return Err(EngineError::Rejected(format!(
                    "run {run_id} has no live owner process, so callIndex {index} is not a live agent call; cancelling an agent needs the process executing the run (resume the run, or stop it whole)"
                )));
            };
            let body = json!({"action": "cancel-agent", "runId": run_id, "callIndex": index});
            let op = uuid::Uuid::new_v4().to_string();
            let answer = match self.forward(&lease, &op, &body).await {
                Ok(answer) => answer,
                // An owner with no control socket (a foreground `agentprism run`) reads
                // intents every second: leave it one and wait for its answer.
                Err(Unforwarded::Unreachable { .. }) => {
                    return self.cancel_agent_by_intent(run_id, index, query).await;
                }
                Err(unforwarded) => {
                    return Err(unforwarded_error(
                        run_id,
                        &lease,
                        "cancel-agent",
                        unforwarded,
                    ));
                }
            };
            let mut status = self.status(run_id, query).await?;
            status["cancelled"] = answer
                .get("cancelled")
                .cloned()
                .unwrap_or_else(|| json!({"callIndex": index}));
            return Ok(status);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        let sent = self.send_control(
            run_id,
            Control::CancelCall {
                index,
                reply: reply_tx,
            },
        );
        let cancelled = sent && reply_rx.await.unwrap_or(false);
        if !cancelled {
            let live_calls: Vec<String> = self
                .inner
                .live
                .lock()
                .ok()
                .and_then(|live| {
                    live.get(run_id).and_then(|l| {
                        l.view.lock().ok().map(|v| {
                            v.calls
                                .iter()
                                .map(|(i, c)| format!("{i}:{}", c.label))
                                .collect()
                        })
                    })
                })
                .unwrap_or_default();
            return Err(EngineError::Rejected(format!(
                "callIndex {index} is not a live agent call of run {run_id}; live calls: {}",
                if live_calls.is_empty() {
                    "none".to_owned()
                } else {
                    live_calls.join(", ")
                }
            )));
        }
        let mut status = self.status(run_id, query).await?;
        status["cancelled"] = json!({"callIndex": index});
        Ok(status)
    }

    /// Cancels call `index` of a run whose owner has no control socket: records a
    /// [`intents::CANCEL_AGENT`] intent and waits up to [`CANCEL_WAIT`] for the owner's
    /// acknowledgement. Unacknowledged by then, the answer says `control.state:"pending"` and
    /// the intent stays for the owner.
    async fn cancel_agent_by_intent(
        &self,
        run_id: &RunId,
        index: u32,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let record = self.inner.store.load_run(run_id).await?;
        let runs = intents::runs_dir(self.inner.store.root(), &record.project_dir);
        let intent = intents::request_for_call(&runs, run_id, intents::CANCEL_AGENT, Some(index))
            .map_err(|error| {
            EngineError::Rejected(format!(
                "cannot record the cancel request for call {index} of run {run_id}: {error}"
            ))
        })?;
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        let acked = loop {
            let found = {
                let (runs, run_id, op) = (runs.clone(), run_id.clone(), intent.op.clone());
                tokio::task::spawn_blocking(move || intents::ack(&runs, &run_id, &op))
                    .await
                    .ok()
                    .flatten()
            };
            if found.is_some() || tokio::time::Instant::now() >= deadline {
                break found;
            }
            tokio::time::sleep(INTENT_POLL).await;
        };
        let Some(ack) = acked else {
            let mut status = self.status(run_id, query).await?;
            status["control"] = json!({"state": "pending", "operationId": intent.op,
                "requestedAt": intent.requested_at});
            return Ok(status);
        };
        if ack.get("cancelled").and_then(Value::as_bool) != Some(true) {
            let why = ack
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("the owner did not cancel it");
            return Err(EngineError::Rejected(format!(
                "call {index} of run {run_id} was not cancelled: {why}"
            )));
        }
        let mut status = self.status(run_id, query).await?;
        status["cancelled"] = json!({"callIndex": index});
        Ok(status)
    }

    /// Carries out a [`intents::CANCEL_AGENT`] intent for a run this engine executes, or
    /// acknowledges it as not done when nobody can (the run ended, or has no live owner).
    async fn complete_cancel_intent(&self, runs: &Path, intent: &intents::Intent) {
        let run_id = &intent.run_id;
        let index = intent.call_index.unwrap_or(u32::MAX);
        let not_done = |reason: &str| {
            json!({"state": "settled", "operationId": intent.op,
            "cancelled": false, "callIndex": index, "reason": reason})
        };
        if self.is_live(run_id) {
            let (reply, answer) = oneshot::channel();
            let sent = self.send_control(run_id, Control::CancelCall { index, reply });
            let cancelled = sent && answer.await.unwrap_or(false);
            let outcome = if cancelled {
                json!({"state": "settled", "operationId": intent.op, "cancelled": true,
                    "callIndex": index, "owner": self.owner_summary()})
            } else {
                not_done(&format!(
                    "callIndex {index} is not a live agent call of run {run_id}"
                ))
            };
            self.acknowledge(runs, run_id, &intent.op, &outcome);
            return;
        }
        match self.inner.store.load_run(run_id).await {
            Ok(record) if record.status.is_terminal() => {
                self.acknowledge(runs, run_id, &intent.op, &not_done("the run has ended"));
            }
            Ok(_) => match self.foreign_owner(run_id).await {
                // Another live process executes it: the intent is that owner's to carry out.
                Ok(Some(_)) => {}
                Ok(None) => self.acknowledge(
                    runs,
                    run_id,
                    &intent.op,
                    &not_done("the run has no live owner process"),
                ),
                Err(error) => tracing::warn!(run = %run_id, "cancel intent {}: {error}", intent.op),
            },
            Err(StoreError::UnknownRun(_)) => {
                self.acknowledge(
                    runs,
                    run_id,
                    &intent.op,
                    &not_done("the run no longer exists"),
                );
            }
            Err(error) => tracing::warn!(run = %run_id, "cancel intent {}: {error}", intent.op),
        }
    }

    /// A whole-run stop of a run another live process holds (daemon.md 1.10 steps 2-9).
    async fn stop_remote(
        &self,
        record: &RunRecord,
        lease: &Lease,
        force_owner: bool,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let run_id = &record.run_id;
        let runs = intents::runs_dir(self.inner.store.root(), &record.project_dir);
        let intent = intents::request(&runs, run_id, intents::STOP).map_err(|error| {
            EngineError::Rejected(format!(
                "cannot record the stop request for run {run_id}: {error}"
            ))
        })?;
        if force_owner {
            let route = self.inner.route.get().ok_or_else(|| {
                EngineError::Rejected(
                    "forceOwner: this process cannot verify or end other owners".into(),
                )
            })?;
            route
                .terminate_superseded_owner(lease)
                .await
                .map_err(|reason| EngineError::Rejected(format!("forceOwner refused: {reason}")))?;
            return self
                .stop_cold_acknowledged(run_id, &runs, &intent, query)
                .await;
        }
        let body = json!({"action": "stop", "runId": run_id});
        let forwarded = self.forward(lease, &intent.op, &body).await;
        let owner = match &forwarded {
            Err(Unforwarded::NoLiveOwner) => {
                return self
                    .stop_cold_acknowledged(run_id, &runs, &intent, query)
                    .await;
            }
            Err(Unforwarded::Unreachable { owner, reason }) => {
                return self
                    .stop_pending(run_id, &intent, owner.clone(), reason, query)
                    .await;
            }
            Err(Unforwarded::Refused { code, message }) if code == "UNKNOWN_RUN" => {
                return Err(EngineError::Rejected(format!(
                    "the owner of run {run_id} (pid {}) does not know it: {message}",
                    lease.pid
                )));
            }
            Err(Unforwarded::Refused { .. }) => lease_owner(lease),
            Ok(answer) => answer
                .get("owner")
                .cloned()
                .unwrap_or_else(|| lease_owner(lease)),
        };
        // Step 6: whatever the owner said, the store decides.
        let current = self.load_reconciled(run_id).await?;
        if current.status.is_terminal() {
            let answer = forwarded.as_ref().ok();
            let already = answer
                .and_then(|a| a.get("alreadyTerminal"))
                .and_then(Value::as_bool)
                .unwrap_or(current.status != RunStatus::Aborted);
            let settled = json!({
                "state": "settled",
                "operationId": intent.op,
                "stopped": !already,
                "alreadyTerminal": already,
                "owner": owner,
            });
            self.acknowledge(&runs, run_id, &intent.op, &settled);
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(!already);
            status["alreadyTerminal"] = Value::Bool(already);
            status["control"] = settled;
            return Ok(status);
        }
        match forwarded {
            Ok(_) => {
                self.stop_pending(
                    run_id,
                    &intent,
                    owner,
                    "the owner is still stopping the run",
                    query,
                )
                .await
            }
            Err(Unforwarded::Refused { message, .. }) => {
                if current.status != RunStatus::Running {
                    // The owner let go between our look and its answer: stop it here.
                    return self
                        .stop_cold_acknowledged(run_id, &runs, &intent, query)
                        .await;
                }
                Err(EngineError::Rejected(format!(
                    "the owner of run {run_id} (pid {}) refused the stop: {message}",
                    lease.pid
                )))
            }
            Err(_) => unreachable!("handled above"),
        }
    }

    async fn stop_pending(
        &self,
        run_id: &RunId,
        intent: &intents::Intent,
        owner: Value,
        reason: &str,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let mut status = self.status(run_id, query).await?;
        status["stopped"] = Value::Bool(false);
        status["control"] = json!({
            "state": "pending",
            "operationId": intent.op,
            "requestedAt": crate::util::iso_time(intent.requested_at),
            "owner": owner,
            "reason": reason,
        });
        Ok(status)
    }

    /// Step 7: nobody executes the run any more; stop it here and acknowledge the intent.
    async fn stop_cold_acknowledged(
        &self,
        run_id: &RunId,
        runs: &Path,
        intent: &intents::Intent,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let mut status = self.stop_cold(run_id, query).await?;
        let already = status["alreadyTerminal"] == true;
        let settled = json!({
            "state": "settled",
            "operationId": intent.op,
            "stopped": !already,
            "alreadyTerminal": already,
            "cold": true,
        });
        self.acknowledge(runs, run_id, &intent.op, &settled);
        status["control"] = settled;
        Ok(status)
    }

    /// Stops a run no process executes: a cold stop under a fresh lease.
    async fn stop_cold(&self, run_id: &RunId, query: &StatusQuery) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        if record.status.is_terminal() {
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(false);
            status["alreadyTerminal"] = Value::Bool(true);
            return Ok(status);
        }
        // Never take a lease a live process holds: it is executing the run, or changing it.
        if let Some(holder) = self.foreign_owner(run_id).await? {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is {} in process {}; stop it again once that process lets go",
                if record.status == RunStatus::Running {
                    "executing"
                } else {
                    "being changed"
                },
                holder.pid
            )));
        }
        let previous = self.inner.store.lease(run_id).await?;
        let lease = self.inner.owner.lease();
        if !self
            .inner
            .store
            .acquire_lease(run_id, previous.as_ref().map(|l| l.token.as_str()), &lease)
            .await?
        {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is being changed by another process"
            )));
        }
        let mut record = self.inner.store.load_run(run_id).await?;
        // Stopping a run that waits for its backend approval cancels the approval, and a
        // cancelled approval is final like a declined one.
        let cancelled_setup =
            record.status == RunStatus::Pending && approval::cancel_pending_setup(&mut record);
        record.status = RunStatus::Aborted;
        record.pause_reason = None;
        record.updated_at = now_ms();
        let fields = if cancelled_setup {
            json!({"reason": approval::SETUP_DECLINED})
        } else {
            json!({})
        };
        self.record_cold(&record, "stopped", fields, &lease.token)
            .await?;
        self.inner.store.release_lease(run_id, &lease.token).await?;
        let mut status = self.status(run_id, query).await?;
        status["stopped"] = Value::Bool(true);
        status["alreadyTerminal"] = Value::Bool(false);
        Ok(status)
    }

    fn acknowledge(&self, runs: &Path, run_id: &RunId, op: &str, outcome: &Value) {
        if let Err(error) = intents::acknowledge(runs, run_id, op, outcome) {
            tracing::warn!(run = %run_id, "cannot acknowledge stop intent {op}: {error}");
        }
    }

    /// The owner's half of a forwarded whole-run stop (daemon.md 1.10 step 5): re-reads the
    /// intent `op`, stops the run this engine executes, waits up to `wait` for the aborted
    /// state and its one `stopped` event to be stored, and acknowledges the intent.
    /// `{outcome:"stopping"}` when the run has not settled within `wait`: the intent stays
    /// and [`Engine::complete_stop_intents`] acknowledges it later.
    pub async fn stop_requested(
        &self,
        run_id: &RunId,
        op: &str,
        wait: Duration,
    ) -> EngineResult<Value> {
        let record = self.inner.store.load_run(run_id).await?;
        let runs = intents::runs_dir(self.inner.store.root(), &record.project_dir);
        let intent = intents::read(&runs, run_id, op);
        let owner = self.owner_summary();
        if record.status.is_terminal() {
            let settled = json!({"state": "settled", "operationId": op, "stopped": false, "alreadyTerminal": true, "owner": owner});
            if intent.is_some() {
                self.acknowledge(&runs, run_id, op, &settled);
            }
            return Ok(
                json!({"outcome": "settled", "stopped": false, "alreadyTerminal": true, "status": record.status, "owner": owner}),
            );
        }
        if !self.send_control(run_id, Control::Stop) {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is not executing in this process"
            )));
        }
        if tokio::time::timeout(wait, self.wait(run_id)).await.is_err() {
            return Ok(json!({"outcome": "stopping", "operationId": op, "owner": owner}));
        }
        let record = self.inner.store.load_run(run_id).await?;
        let stopped = record.status == RunStatus::Aborted;
        let settled = json!({"state": "settled", "operationId": op, "stopped": stopped, "alreadyTerminal": !stopped, "owner": owner});
        if intent.is_some() {
            self.acknowledge(&runs, run_id, op, &settled);
        }
        Ok(
            json!({"outcome": "settled", "stopped": stopped, "alreadyTerminal": !stopped, "status": record.status, "owner": owner}),
        )
    }

    /// Carries out unacknowledged stop intents (daemon.md 1.10 step 8, "owners scan intents
    /// every tick and at start"): a run this engine executes is told to stop, a settled run's
    /// intent is acknowledged, a run nobody executes is stopped cold and acknowledged; runs
    /// another live process holds are left to it. Returns how many intents name runs this
    /// engine executes: work that keeps a daemon from exiting.
    pub async fn complete_stop_intents(&self) -> usize {
        let root = self.inner.store.root().to_path_buf();
        let found = tokio::task::spawn_blocking(move || intents::scan(&root))
            .await
            .unwrap_or_default();
        let mut owned = 0;
        for (runs, intent) in found {
            if intent.action == intents::CANCEL_AGENT {
                self.complete_cancel_intent(&runs, &intent).await;
                continue;
            }
            if intent.action != intents::STOP {
                continue;
            }
            let run_id = &intent.run_id;
            let record = match self.inner.store.load_run(run_id).await {
                Ok(record) => record,
                Err(StoreError::UnknownRun(_)) => {
                    let gone = json!({"state": "settled", "operationId": intent.op, "stopped": false, "unknownRun": true});
                    self.acknowledge(&runs, run_id, &intent.op, &gone);
                    continue;
                }
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                    continue;
                }
            };
            if record.status.is_terminal() {
                let stopped = record.status == RunStatus::Aborted;
                let settled = json!({"state": "settled", "operationId": intent.op, "stopped": stopped, "alreadyTerminal": !stopped, "owner": self.owner_summary()});
                self.acknowledge(&runs, run_id, &intent.op, &settled);
                continue;
            }
            if self.send_control(run_id, Control::Stop) {
                owned += 1;
                continue;
            }
            match self.foreign_owner(run_id).await {
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                    continue;
                }
            }
            match self.stop_cold(run_id, &StatusQuery::default()).await {
                Ok(status) => {
                    let already = status["alreadyTerminal"] == true;
                    let settled = json!({"state": "settled", "operationId": intent.op, "stopped": !already, "alreadyTerminal": already, "cold": true});
                    self.acknowledge(&runs, run_id, &intent.op, &settled);
                }
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                }
            }
        }
        owned
    }

    /// Pauses a live run: running calls finish and journal, nothing new starts.
    pub async fn pause(&self, run_id: &RunId, query: &StatusQuery) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        if !self.send_control(run_id, Control::Pause(PauseReason::Requested)) {
            if record.status == RunStatus::Running {
                let Some(lease) = self.foreign_owner(run_id).await? else {
                    return Err(EngineError::Rejected(format!(
                        "run {run_id} has no live owner process to pause it"
                    )));
                };
                let body = json!({"action": "pause", "runId": run_id});
                let answer = self.forward_live(run_id, &lease, &body).await?;
                let mut status = self.status(run_id, query).await?;
                status["pauseRequested"] = Value::Bool(true);
                status["paused"] = Value::Bool(
                    answer.get("paused") == Some(&Value::Bool(true))
                        || status["status"] == "paused",
                );
                return Ok(status);
            }
            let mut status = self.status(run_id, query).await?;
            status["pauseRequested"] = Value::Bool(false);
            status["paused"] = Value::Bool(record.status == RunStatus::Paused);
            return Ok(status);
        }
        let paused = tokio::time::timeout(PAUSE_WAIT, self.wait(run_id))
            .await
            .is_ok();
        let mut status = self.status(run_id, query).await?;
        status["pauseRequested"] = Value::Bool(true);
        status["paused"] = Value::Bool(paused);
        Ok(status)
    }

    /// Interrupts every live run of this process (Ctrl-C, shutdown): they settle
    /// `paused/interrupted`, resumable.
    pub async fn interrupt_all(&self, deadline: Duration) {
        let ids: Vec<RunId> = self
            .inner
            .live
            .lock()
            .map(|live| live.keys().cloned().collect())
            .unwrap_or_default();
        for run_id in &ids {
            self.send_control(run_id, Control::Pause(PauseReason::Interrupted));
        }
        let all = async {
            for run_id in &ids {
                self.wait(run_id).await;
            }
        };
        let _ = tokio::time::timeout(deadline, all).await;
    }

    /// Answers a live permission request, here or in the process executing the run.
    pub async fn respond_permission(
        &self,
        run_id: &RunId,
        permission_id: &str,
        outcome: PermissionOutcome,
    ) -> EngineResult<Value> {
        self.inner.store.load_run(run_id).await?;
        if !self.is_live(run_id)
            && let Some(lease) = self.foreign_owner(run_id).await?
        {
            let body = json!({
                "action": "respond-permission",
                "runId": run_id,
                "permissionId": permission_id,
                "response": {"outcome": outcome},
            });
            self.forward_live(run_id, &lease, &body).await?;
            return Ok(
                json!({"action": "permissions-response", "runId": run_id, "permissionId": permission_id, "accepted": true}),
            );
        }
        self.inner
            .broker
            .answer(run_id.as_str(), permission_id, outcome.clone())
            .map_err(|e| match e {
                PermissionError::Unknown(_) | PermissionError::UnknownOption { .. } => {
                    EngineError::Rejected(e.to_string())
                }
            })?;
        Ok(
            json!({"action": "permissions-response", "runId": run_id, "permissionId": permission_id, "accepted": true}),
        )
    }

    pub fn pending_permissions(&self, run_id: &RunId) -> Vec<PendingPermission> {
        self.inner.broker.pending(run_id.as_str())
    }

    /// The lease of `run_id` when a live process other than this one holds it.
    async fn foreign_owner(&self, run_id: &RunId) -> EngineResult<Option<Lease>> {
        let lease = self.inner.store.lease(run_id).await?;
        Ok(lease.filter(|lease| {
            lease.owner_id != self.inner.owner.owner_id
                && crate::util::process::identity(lease.pid, lease.proc_start, None).is_alive()
        }))
    }

    async fn forward(&self, lease: &Lease, op: &str, body: &Value) -> Result<Value, Unforwarded> {
        match self.inner.route.get() {
            Some(route) => route.forward(lease, op, body).await,
            None => Err(Unforwarded::Unreachable {
                owner: lease_owner(lease),
                reason: "this process has no control route to other processes".into(),
            }),
        }
    }

    /// Forwards an action that only a live owner can carry out (cancel-agent, pause,
    /// permissions, setup): every failure is an error, nothing is done in its place.
    async fn forward_live(
        &self,
        run_id: &RunId,
        lease: &Lease,
        body: &Value,
    ) -> EngineResult<Value> {
        let action = body.get("action").and_then(Value::as_str).unwrap_or("");
        let op = uuid::Uuid::new_v4().to_string();
        self.forward(lease, &op, body)
            .await
            .map_err(|unforwarded| unforwarded_error(run_id, lease, action, unforwarded))
    }

    /// `control.owner` describing this engine's process.
    fn owner_summary(&self) -> Value {
        json!({"pid": self.inner.owner.pid, "instanceId": self.inner.owner.owner_id})
    }

    /// One page of the exact result JSON (engine.md 6.6).
    pub async fn result_page(
        &self,
        run_id: &RunId,
        offset: usize,
        max_bytes: usize,
    ) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        let text = exact_result(&record)?;
        let bytes = text.as_bytes();
        if offset > bytes.len() {
            return Err(EngineError::Rejected(format!(
                "offset {offset} is past the end of the result ({} bytes)",
                bytes.len()
            )));
        }
        if offset < bytes.len() && !text.is_char_boundary(offset) {
            return Err(EngineError::Rejected(format!(
                "offset {offset} is inside a UTF-8 code point; continue at a previous endOffset"
            )));
        }
        let mut end = (offset + max_bytes).min(bytes.len());
        while end > offset && !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(json!({
            "action": "result",
            "runId": run_id,
            "status": "completed",
            "resultUri": format!("workflow://runs/{run_id}/result"),
            "eventsUri": format!("workflow://runs/{run_id}/events"),
            "mimeType": "application/json",
            "encoding": "utf-8",
            "totalBytes": bytes.len(),
            "offset": offset,
            "endOffset": end,
            "hasMore": end < bytes.len(),
            "chunk": &text[offset..end],
        }))
    }

    /// Deletes a run that is not executing, with its store copy of the script.
    pub async fn delete(&self, run_id: &RunId) -> EngineResult<()> {
        let record = self.load_reconciled(run_id).await?;
        if record.status == RunStatus::Running || self.is_live(run_id) {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is running; stop it before deleting it"
            )));
        }
        self.inner.store.delete_run(run_id).await?;
        let runs = intents::runs_dir(self.inner.store.root(), &record.project_dir);
        let _ = std::fs::remove_dir_all(intents::run_folder(&runs, run_id));
        if record.script_source == ScriptSource::Inline {
            let expected =
                store::script_copy_path(self.inner.store.root(), &record.project_dir, run_id);
            if record.script_file == expected
                || std::fs::canonicalize(&expected).is_ok_and(|real| real == record.script_file)
            {
                let _ = std::fs::remove_file(&expected);
            }
        }
        Ok(())
    }

    pub async fn list(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> EngineResult<Vec<RunSummary>> {
        Ok(self.inner.store.list_runs(project_dir, limit).await?)
    }

    /// Interrupts live runs and stops the agent processes.
    pub async fn shutdown(&self, deadline: Duration) {
        self.interrupt_all(deadline).await;
        self.inner.tracker.close();
        let _ = tokio::time::timeout(deadline, self.inner.tracker.wait()).await;
        self.inner.runner.shutdown(deadline).await;
    }
}

/// `control.owner` for a lease holder known only by its lease.
pub fn lease_owner(lease: &Lease) -> Value {
    json!({
        "pid": lease.pid,
        "instanceId": lease.owner_id,
        "version": Value::Null,
        "lameDuck": false,
        "controlProtocol": 0,
    })
}

fn check_project_dir(project_dir: &Path) -> EngineResult<()> {
    if !project_dir.is_absolute() {
        return Err(EngineError::Rejected(format!(
            "projectDir must be an absolute path, got {}",
            project_dir.display()
        )));
    }
    if !project_dir.is_dir() {
        return Err(EngineError::Rejected(format!(
            "projectDir {} is not an existing directory",
            project_dir.display()
        )));
    }
    Ok(())
}

/// The exact `JSON.stringify(result)` of a completed run.
pub fn exact_result(record: &RunRecord) -> EngineResult<String> {
    if record.status != RunStatus::Completed {
        return Err(EngineError::Rejected(format!(
            "run {} has no result: it is {}{}",
            record.run_id,
            record.status.as_str(),
            if record.status.is_terminal() {
                ""
            } else {
                " (read it again once it completes)"
            }
        )));
    }
    match &record.result {
        Some(value) => Ok(value.to_string()),
        None => Err(EngineError::Rejected(format!(
            "run {} completed without a value",
            record.run_id
        ))),
    }
}

/// A [`LiveView`] from another process's `live-status` answer (what [`Engine::live_status`]
/// sends); entries that do not parse are left out.
fn live_view_of(live: &Value) -> Option<LiveView> {
    let calls = live
        .get("calls")?
        .as_array()?
        .iter()
        .filter_map(|call| {
            let index = u32::try_from(call.get("index")?.as_u64()?).ok()?;
            let text = |key: &str| call.get(key).and_then(Value::as_str).map(str::to_owned);
            let state = match call.get("status").and_then(Value::as_str) {
                Some("queued") => "queued",
                _ => "running",
            };
            Some((
                index,
                crate::engine::driver::LiveCall {
                    label: text("label").unwrap_or_default(),
                    phase: text("phase"),
                    model: text("model"),
                    backend_id: text("backendId"),
                    state,
                    timeout_ms: call.get("timeoutMs").and_then(Value::as_u64).unwrap_or(0),
                },
            ))
        })
        .collect();
    Some(LiveView {
        current_phase: live
            .get("currentPhase")
            .and_then(Value::as_str)
            .map(str::to_owned),
        calls,
        ..LiveView::default()
    })
}

fn validate_checkpoint_answer(context: &Value, index: u32, answer: &Value) -> EngineResult<()> {
    let kind = context
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("confirm");
    let valid = match kind {
        "confirm" => answer.is_boolean(),
        "input" => answer.is_string(),
        "select" => context
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|choices| choices.contains(answer)),
        _ => false,
    };
    if valid {
        return Ok(());
    }
    let expected = match kind {
        "confirm" => "true or false".to_owned(),
        "input" => "a string".to_owned(),
        _ => format!(
            "one of {}",
            context.get("choices").cloned().unwrap_or(Value::Null)
        ),
    };
    Err(EngineError::Rejected(format!(
        "checkpoint {index} is a {kind} checkpoint: its answer must be {expected}, got {answer}"
    )))
}

fn resume_digest(request: &ResumeRequest) -> String {
    let body = json!({
        "runId": request.run_id,
        "checkpointReplies": request.checkpoint_replies.iter().map(|(i, v)| json!([i, v])).collect::<Vec<_>>(),
        "maxAgents": request.limits.max_agents,
        "concurrency": request.limits.concurrency,
        "agentRetries": request.limits.agent_retries,
    });
    sha256_hex(crate::engine::journal::canonical_json(&body).as_bytes())
}

fn admission_to_receipt(admission: &Admission) -> Value {
    json!({
        "runId": admission.run_id,
        "status": admission.status,
        "scriptSource": admission.script_source,
        "scriptFile": admission.script_file,
        "limits": admission.limits,
        "continuation": admission.continuation,
    })
}

fn admission_from_receipt(value: &Value) -> Option<Admission> {
    Some(Admission {
        run_id: RunId::parse(value.get("runId")?.as_str()?).ok()?,
        status: serde_json::from_value(value.get("status")?.clone()).ok()?,
        script_source: serde_json::from_value(value.get("scriptSource")?.clone()).ok()?,
        script_file: PathBuf::from(value.get("scriptFile")?.as_str()?),
        limits: serde_json::from_value(value.get("limits")?.clone()).ok()?,
        setup: None,
        warnings: Vec::new(),
        continuation: value.get("continuation").cloned(),
    })
}

/// The error for an action only a live owner can carry out, when forwarding it failed.
fn unforwarded_error(
    run_id: &RunId,
    lease: &Lease,
    action: &str,
    unforwarded: Unforwarded,
) -> EngineError {
    match unforwarded {
        Unforwarded::NoLiveOwner => EngineError::Rejected(format!(
            "run {run_id} has no live owner process (pid {} has ended); {action} needs the process executing the run",
            lease.pid
        )),
        Unforwarded::Unreachable { reason, .. } => EngineError::Rejected(format!(
            "run {run_id} is executing in process {}, which cannot be reached for {action}: {reason}",
            lease.pid
        )),
        Unforwarded::Refused { code, message } => {
            if code == "UNKNOWN_RUN" {
                return EngineError::UnknownRun(run_id.clone());
            }
            EngineError::Rejected(format!(
                "process {} executing run {run_id} refused {action}: {message}",
                lease.pid
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_is_a_quarter_of_memory_in_script_heaps() {
        let meminfo = "MemTotal:       16318480 kB\nMemFree:         1234 kB\n";
        let total = mem_total_bytes(meminfo).unwrap();
        assert_eq!(total, 16318480 * 1024);
        // 15.56 GiB / (4 × 64 MiB) = 62.2
        assert_eq!(max_runs_for(total, 64 << 20), 62);
        assert_eq!(max_runs_for(total, 48 << 20), 83);
        // Never below 2, however small the machine or large the heap.
        assert_eq!(max_runs_for(512 << 20, 64 << 20), 2);
        assert_eq!(max_runs_for(total, 8 << 30), 2);
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        assert!(default_max_runs(64 << 20) >= 2);
    }
}
