//! The engine's front door: admission, execution, resume, status, stop, pause, setup and
//! permission answers, result paging and deletion, for every project of one process.
//!
//! The CLI and the MCP tool both call these methods, so a run behaves the same whichever
//! front end started it. Each executing run has a lease in the store naming this process;
//! a run whose owner died is reconciled to `paused/interrupted` on the next look.
//!
//! Rooms: this file holds [`Engine`], its shared state and the bookkeeping of live runs;
//! `config` the settings, `api` the requests and answers, `error` the errors; `admission` capacity and
//! starting a run, `execution` running a generation and reconciling dead owners, `resume`
//! continuing one; `answers` setup and permission answers; `view` status; `results` result
//! paging, listing and deletion; `stop` stop and pause, `cancel` single-call cancel; `remote`
//! reaching another lease holder, `owner` this process as one (carrying out intents);
//! `caller` the caller tag a front end keeps with a run, and reclaiming it.

mod admission;
mod answers;
mod api;
mod caller;
mod cancel;
mod config;
mod confidential;
mod error;
mod execution;
mod isolation;
mod owner;
mod queue;
mod remote;
mod results;
mod resume;
mod saved;
mod size;
mod stop;
mod timers;
mod view;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::engine::driver::Control;
use crate::engine::events::{Notices, RunNotice};
use crate::engine::permissions::PermissionBroker;
use crate::engine::routing::BackendLookup;
use crate::engine::runner::AgentRunner;
use crate::engine::sources::{DiskSources, Sources};
use crate::engine::status::LiveView;
use crate::model::{PauseReason, RunId};
use crate::store::{CallReads, EventReads, RunReads, Store};
use crate::util::sync::Lock;
use crate::workspace::Workspaces;

pub use api::{
    Admission, ControlState, LimitOverrides, LiveCallStatus, LiveStatus, PauseAnswer,
    PermissionAnswer, ResultPage, ResumeRequest, RunRequest, SetupAnswer, StopAnswer,
    StopRequested,
};
pub use config::{EngineConfig, default_max_runs};
pub use error::{EngineError, EngineResult, Rejected};
pub(crate) use execution::LEASE_EXPIRED;
pub use owner::Owner;
pub(crate) use remote::{OwnerRoute, Unforwarded, lease_owner};
pub(crate) use results::exact_result;
pub use saved::{SavedMeta, SavedSource, SavedWorkflow};

/// Runs preparing, awaiting setup or executing at once in one project: the default of
/// [`EngineConfig::max_active_per_project`].
pub(crate) const MAX_ACTIVE_RUNS: usize = 4;
/// How long `pause` waits for executing agents before answering.
pub(crate) const PAUSE_WAIT: Duration = Duration::from_secs(2);
/// How long `stop` waits for the owner to settle the run.
pub const STOP_WAIT: Duration = Duration::from_secs(10);
/// How long `status` waits for another process to list a run's pending permissions.
pub(crate) const REMOTE_STATUS_WAIT: Duration = Duration::from_secs(1);
/// How long a cancel of one call waits for an owner without a control socket to answer its
/// intent (a foreground run looks for intents every 250 ms).
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How often that wait looks for the acknowledgement.
pub(super) const INTENT_POLL: Duration = Duration::from_millis(50);

/// A generation this process executes now.
struct LiveRun {
    /// Which generation: a settling older one must not remove a newer one's entry.
    generation: u32,
    /// The lease it executes under: what this process's acknowledgements of the run's
    /// control intents are fenced by.
    lease_token: String,
    /// Stop, pause and single-call cancel for its driver.
    control: mpsc::UnboundedSender<Control>,
    /// What the driver shows of its live calls, for status.
    view: Arc<Mutex<LiveView>>,
    /// Turns true once the generation has settled and its outcome is stored.
    settled: watch::Receiver<bool>,
}

/// The engine's shared state: its ports (store, runner, sources) and what it knows of the
/// runs it executes.
struct Inner {
    /// Every durable fact of a run: rows, calls, events, leases, receipts.
    store: Arc<dyn Store>,
    /// What agent calls run on.
    runner: Arc<dyn AgentRunner>,
    /// The configured backends routes resolve against.
    backends: Arc<dyn BackendLookup>,
    /// Where scripts, saved workflows, agent definitions and tiers are read.
    sources: Arc<dyn Sources>,
    /// Timeouts, VM limits, probes, the owner id and the daemon-wide cap.
    config: EngineConfig,
    /// Permission requests of live calls waiting for an answer.
    broker: PermissionBroker,
    /// Live notices: permission requests, settlements, and each run's activity (at most a
    /// notice per step of its driver, without the event records).
    notices: Notices,
    /// This process as a lease holder.
    owner: Owner,
    /// Generations executing in this process, by run.
    live: Mutex<HashMap<RunId, LiveRun>>,
    /// Runs being prepared per project (they hold capacity before admission).
    preparing: Mutex<HashMap<PathBuf, usize>>,
    /// Told when a slot may have freed (`queue.rs`): a generation ended, a slot dropped.
    freed: tokio::sync::Notify,
    /// Runs this process is starting: stored as running, their generation not yet live
    /// ([`Engine::starting`]). Reconciliation leaves them alone.
    starting: Mutex<std::collections::HashSet<RunId>>,
    /// Every execution task, awaited at shutdown.
    tracker: TaskTracker,
    /// How to reach other lease holders; set once by the front end that builds the engine.
    route: std::sync::OnceLock<Arc<dyn OwnerRoute>>,
    /// Where isolated calls get their worktrees; set once by the composition root. An
    /// engine without it fails isolated calls, naming why.
    workspaces: std::sync::OnceLock<Arc<dyn Workspaces>>,
    /// Where runs' spans and metrics go; set once by the composition root, `NoTelemetry`
    /// until then.
    telemetry: std::sync::OnceLock<Arc<dyn crate::telemetry::Telemetry>>,
    /// The automatic-resume loop's wake-up and stop (`timers.rs`).
    timers: timers::TimerLoop,
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
///         caller: None,
///         trace: None,
///     })
///     .await?;
/// engine.wait(&admission.run_id).await;
/// let status = engine.status(&admission.run_id, &StatusQuery::default()).await?;
/// let result = status.outcome.and_then(|outcome| outcome.result);
/// assert_eq!(result, Some(serde_json::json!("ECHO: say hi")));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Holds a preparation's capacity slot until dropped.
struct Slot {
    /// Whose `preparing` count the slot is part of.
    engine: Engine,
    /// The project it counts in.
    project_dir: PathBuf,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(count) = self
            .engine
            .inner
            .preparing
            .locked()
            .get_mut(&self.project_dir)
        {
            *count = count.saturating_sub(1);
        }
        self.engine.inner.freed.notify_one();
    }
}

impl Engine {
    /// An engine that reads scripts and their companion files from disk.
    pub fn new(
        store: Arc<dyn Store>,
        runner: Arc<dyn AgentRunner>,
        backends: Arc<dyn BackendLookup>,
        config: EngineConfig,
    ) -> Engine {
        Engine::with_sources(store, runner, backends, DiskSources::shared(), config)
    }

    /// An engine that reads scripts and their companion files through `sources`.
    pub(crate) fn with_sources(
        store: Arc<dyn Store>,
        runner: Arc<dyn AgentRunner>,
        backends: Arc<dyn BackendLookup>,
        sources: Arc<dyn Sources>,
        config: EngineConfig,
    ) -> Engine {
        let notices = Notices::new(4096);
        Engine {
            inner: Arc::new(Inner {
                store,
                runner,
                backends,
                sources,
                broker: PermissionBroker::new(Some(notices.clone())),
                notices,
                owner: match &config.owner_id {
                    Some(owner_id) => Owner::with_id(owner_id.clone()),
                    None => Owner::current(),
                },
                config,
                live: Mutex::default(),
                preparing: Mutex::default(),
                freed: tokio::sync::Notify::new(),
                starting: Mutex::default(),
                tracker: TaskTracker::new(),
                route: std::sync::OnceLock::new(),
                workspaces: std::sync::OnceLock::new(),
                telemetry: std::sync::OnceLock::new(),
                timers: timers::TimerLoop::default(),
            }),
        }
    }

    /// The stored runs, read-only: what inspection outside the engine reads (records,
    /// versions, listings). Every write goes through the engine's own methods.
    pub fn runs(&self) -> &dyn RunReads {
        self.inner.store.as_ref()
    }

    /// The stored call rows, read-only.
    pub fn calls(&self) -> &dyn CallReads {
        self.inner.store.as_ref()
    }

    /// The stored event streams and log lines, read-only.
    pub fn events(&self) -> &dyn EventReads {
        self.inner.store.as_ref()
    }

    pub fn backends(&self) -> &Arc<dyn BackendLookup> {
        &self.inner.backends
    }

    /// Where this engine reads scripts and their companion files.
    pub fn sources(&self) -> &Arc<dyn Sources> {
        &self.inner.sources
    }

    pub fn runner(&self) -> &Arc<dyn AgentRunner> {
        &self.inner.runner
    }

    /// Live notices: events, permission requests, settlements.
    pub fn subscribe(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe()
    }

    /// Permission requests, settlements and every event with its record: for a subscriber
    /// that shows the events themselves.
    pub fn subscribe_records(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe_records()
    }

    /// Permission requests and settlements, without the runs' events: for a subscriber
    /// that would only skip them.
    pub fn subscribe_lifecycle(&self) -> broadcast::Receiver<RunNotice> {
        self.inner.notices.subscribe_lifecycle()
    }

    pub fn owner(&self) -> &Owner {
        &self.inner.owner
    }

    /// Installs where isolated calls get their worktrees. The first call wins.
    pub fn set_workspaces(&self, workspaces: Arc<dyn Workspaces>) {
        let _ = self.inner.workspaces.set(workspaces);
    }

    /// Installs where runs' spans and metrics go. The first call wins.
    pub fn set_telemetry(&self, telemetry: Arc<dyn crate::telemetry::Telemetry>) {
        let _ = self.inner.telemetry.set(telemetry);
    }

    /// Where runs' spans and metrics go.
    pub(crate) fn telemetry(&self) -> Arc<dyn crate::telemetry::Telemetry> {
        match self.inner.telemetry.get() {
            Some(telemetry) => telemetry.clone(),
            None => Arc::new(crate::telemetry::NoTelemetry),
        }
    }

    /// Installs how this engine reaches other lease holders. The first call wins.
    pub(crate) fn set_owner_route(&self, route: Arc<dyn OwnerRoute>) {
        let _ = self.inner.route.set(route);
    }

    /// Waits until `run_id` is no longer executing in this process.
    pub async fn wait(&self, run_id: &RunId) {
        let receiver = self
            .inner
            .live
            .locked()
            .get(run_id)
            .map(|l| l.settled.clone());
        if let Some(mut receiver) = receiver {
            let _ = receiver.wait_for(|settled| *settled).await;
        }
    }

    /// Runs this process owns right now: executing generations plus preparations holding a
    /// capacity slot. The daemon counts them as work that keeps it from idling out.
    pub(crate) fn active_executions(&self) -> usize {
        let live = self.inner.live.locked().len();
        let preparing: usize = self.inner.preparing.locked().values().sum();
        live + preparing
    }

    /// The runs this process executes now.
    pub(crate) fn live_run_ids(&self) -> Vec<RunId> {
        self.inner.live.locked().keys().cloned().collect()
    }

    /// Whether this process executes `run_id` now.
    pub(crate) fn is_live(&self, run_id: &RunId) -> bool {
        self.inner.live.locked().contains_key(run_id)
    }

    /// Whether the next change of `run_id`'s waits or settlement is still to be announced
    /// (by a `Permission` or `Settled` notice not sent yet): the run executes in this
    /// process and no permission request of it waits. A run settles by leaving the live map
    /// before its `Settled` goes out, and a permission request waits in the broker before
    /// its `Permission` does, so a caller that sees `true` has missed no such notice.
    pub(crate) fn announces_changes(&self, run_id: &RunId) -> bool {
        self.is_live(run_id) && !self.inner.broker.has_pending(run_id.as_str())
    }

    /// The revision of the live view of a run this process executes (`LiveView::revision`),
    /// when an answer status builds now may be kept or a kept one served: between two steps
    /// of its driver, with no permission request of the run waiting (those reach status from
    /// the broker, not through a step). `None` otherwise, and for a run not executed here.
    pub(crate) fn live_revision(&self, run_id: &RunId) -> Option<u64> {
        let view = self.inner.live.locked().get(run_id)?.view.clone();
        let revision = view.locked().revision;
        (revision % 2 == 0 && !self.inner.broker.has_pending(run_id.as_str())).then_some(revision)
    }

    pub(super) fn send_control(&self, run_id: &RunId, control: Control) -> bool {
        self.inner
            .live
            .locked()
            .get(run_id)
            .is_some_and(|l| l.control.send(control).is_ok())
    }

    /// Interrupts every live run of this process (Ctrl-C, shutdown): they settle
    /// `paused/interrupted`, resumable.
    pub(crate) async fn interrupt_all(&self, deadline: Duration) {
        let ids: Vec<RunId> = self.inner.live.locked().keys().cloned().collect();
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

    /// Interrupts live runs and stops the agent processes.
    pub async fn shutdown(&self, deadline: Duration) {
        self.stop_timers();
        self.interrupt_all(deadline).await;
        self.inner.tracker.close();
        let _ = tokio::time::timeout(deadline, self.inner.tracker.wait()).await;
        self.inner.runner.shutdown(deadline).await;
        // The generations have ended: their last spans and the metrics go out now.
        self.telemetry().shutdown();
    }
}

#[cfg(test)]
mod tests;
