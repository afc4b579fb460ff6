//! `agentprism serve <dir>`: a folder of workflow scripts served as an MCP server of its own
//! (docs/serve.md).
//!
//! [`FolderServer`] is a second [`McpHandler`] on the same MCP core and engine as the
//! `workflow` tool: one tool per workflow script of the folder (`folder`), answered
//! synchronously (`sync_call`); the async run API as `mhl_run_*` tools and `run/*` methods
//! (`tools`, `runs`), every answer owner-gated (`owners`) and shaped as the original serve
//! mode's status object (`view`); the workflow manifests and run resources (`resources`).
//! It holds no run state of its own beyond who owns which run: runs, calls and logs live in
//! the engine's store, under `--state-dir` or a per-process temporary folder.
//!
//! `a2a` is the folder's A2A face (Agent Card, tasks over A2A JSON-RPC) over the same run
//! API.
//!
//! `queue` keeps starts beyond capacity and starts them as slots free, on any replica.
//!
//! Layout, each depending only on the ones after it: this file, `a2a`, `tools`, `sync_call`,
//! `resources`, `runs` with `queue` (the run API queues a start there, and the dispatcher
//! starts it through the run API), `view`, `owners`, `folder`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::mcp::handler::{McpHandler, McpResult, NotificationHub, RequestContext, ServerInfo};
use crate::mcp::registry::{Tool, ToolRegistry};
use crate::mcp::server::McpServer;
use crate::model::RunStatus;

pub(crate) mod a2a;
pub mod folder;
pub(crate) mod owners;
pub(crate) mod queue;
pub(crate) mod replica;
mod resources;
pub(crate) mod runs;
mod sync_call;
pub(crate) mod tools;
pub(crate) mod view;

pub use folder::{Folder, FolderError, Workflow};
pub use queue::QueueOptions;

use owners::Owners;
use runs::RunApi;
use sync_call::{FolderTasks, SyncCalls};
use tools::{RunMethod, RunTools};

/// How often the housekeeping sweep runs: finished runs past their time to live are
/// deleted, idle sessions ended, the store gauges refreshed.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// A legacy session with no open connection and no request for this long is ended by the
/// sweep (its client starts a new one; its runs stay reclaimable by id).
pub(crate) const SESSION_IDLE_TTL: Duration = Duration::from_secs(3600);
/// How long a finished run stays pollable (`MHL_SERVE_TERMINAL_RUN_TTL`'s default).
pub(crate) const TERMINAL_RUN_TTL: Duration = Duration::from_secs(3600);

/// The request body cap of the folder server's HTTP listener (1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Settings of a [`FolderServer`].
#[derive(Clone, Debug)]
pub struct FolderOptions {
    /// `serverInfo.name`.
    pub name: String,
    /// Whether the `mhl://run/*` resources are served (HTTP only: over stdio the one session
    /// reads its runs through the tools).
    pub run_resources: bool,
    /// How long a finished run stays pollable before the sweep deletes it.
    pub terminal_ttl: Duration,
    /// How often the housekeeping sweep runs ([`SWEEP_INTERVAL`]; tests shorten it).
    pub sweep_interval: Duration,
    /// The queue of starts beyond capacity (`queue.rs`).
    pub queue: QueueOptions,
}

impl Default for FolderOptions {
    fn default() -> Self {
        FolderOptions {
            name: "agentprism-serve".to_owned(),
            run_resources: false,
            terminal_ttl: TERMINAL_RUN_TTL,
            sweep_interval: SWEEP_INTERVAL,
            queue: QueueOptions::default(),
        }
    }
}

/// The MCP face of a served folder.
pub struct FolderServer {
    options: FolderOptions,
    /// The run API both the tools and the methods answer from.
    api: Arc<RunApi>,
    /// A workflow's call as an MCP task, over the same run API (docs/tasks.md).
    tasks: FolderTasks,
    /// The workflows' tools and the six `mhl_run_*` tools.
    tools: ToolRegistry,
    /// Nothing is published yet (the tool list is fixed at start-up), but the core asks.
    hub: NotificationHub,
    /// Stops the housekeeping sweep.
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The MCP core serving this handler, whose idle legacy sessions the sweep ends; set
    /// once it exists ([`FolderServer::reap_sessions_of`]). Weak: the core owns the handler.
    sessions: Arc<std::sync::OnceLock<Weak<McpServer>>>,
}

impl FolderServer {
    /// Serves `folder` over `engine` and starts the housekeeping sweep (inside a Tokio
    /// runtime). Fails when a workflow's name cannot be registered as a tool.
    pub fn new(
        engine: Engine,
        folder: Folder,
        options: FolderOptions,
    ) -> anyhow::Result<Arc<FolderServer>> {
        let api = Arc::new(RunApi {
            engine,
            folder: Arc::new(folder),
            owners: Arc::new(Owners::default()),
            run_links: options.run_resources,
            queue: queue::StartQueue::new(options.queue),
        });
        let mut registry = ToolRegistry::new();
        let sync = Arc::new(SyncCalls { api: api.clone() });
        for workflow in api.folder.workflows.values() {
            registry.register(
                Tool::new(workflow.tool_definition(), sync.clone())
                    .with_task_support(crate::mcp::tasks::TaskSupport::Optional),
            )?;
        }
        let run_tools = Arc::new(RunTools { api: api.clone() });
        for method in RunMethod::ALL {
            registry.register(Tool::new(method.definition(), run_tools.clone()))?;
        }
        let hub = NotificationHub::new();
        let tasks = FolderTasks {
            api: api.clone(),
            immediate: crate::mcp::tasks::MemoryTasks::new(hub.clone()),
        };
        let server = Arc::new(FolderServer {
            options,
            api,
            tasks,
            tools: registry,
            hub,
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            sessions: Arc::new(std::sync::OnceLock::new()),
        });
        server.tracker.spawn(sweep_loop(
            Housekeeping {
                api: server.api.clone(),
                terminal_ttl: server.options.terminal_ttl,
                sessions: server.sessions.clone(),
            },
            server.options.sweep_interval,
            server.shutdown.clone(),
        ));
        server.tracker.spawn(queue::dispatch_loop(
            server.api.clone(),
            server.shutdown.clone(),
        ));
        Ok(server)
    }

    /// Lets the sweep end `server`'s legacy sessions idle for [`SESSION_IDLE_TTL`].
    pub(crate) fn reap_sessions_of(&self, server: &Arc<McpServer>) {
        let _ = self.sessions.set(Arc::downgrade(server));
    }

    /// The A2A face over the same run API (`POST /a2a` and the Agent Card, HTTP only);
    /// `bearer` says the endpoint requires the token, which the card declares; `pushes` where
    /// push notifications may go.
    pub(crate) fn a2a(&self, bearer: bool, pushes: a2a::Pushes) -> Arc<a2a::A2a> {
        Arc::new(a2a::A2a::new(
            self.api.clone(),
            self.options.name.clone(),
            bearer,
            pushes,
        ))
    }

    /// The engine the runs execute on.
    pub fn engine(&self) -> &Engine {
        &self.api.engine
    }

    /// Stops the sweep, then interrupts the runs still going within `deadline` (they stay
    /// resumable: with `--state-dir`, a later process continues them).
    pub async fn shutdown(&self, deadline: Duration) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.api.engine.shutdown(deadline).await;
    }
}

#[async_trait]
impl McpHandler for FolderServer {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: self.options.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            title: None,
        }
    }

    fn instructions(&self) -> Option<String> {
        Some(
            "Each tool runs one workflow to completion. For long workflows, or ones that stop \
             at a checkpoint, start them with mhl_run_start and poll mhl_run_status."
                .to_owned(),
        )
    }

    fn capabilities(&self) -> Value {
        json!({
            "tools": {"listChanged": false},
            "resources": {"subscribe": false, "listChanged": false},
        })
    }

    fn hub(&self) -> &NotificationHub {
        &self.hub
    }

    fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    fn tasks(&self) -> Option<&dyn crate::mcp::tasks::TaskHandler> {
        Some(&self.tasks)
    }

    async fn list_resources(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(resources::list(&self.api.folder))
    }

    async fn list_resource_templates(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(resources::templates(self.options.run_resources))
    }

    async fn read_resource(&self, ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        resources::read(&self.api, ctx, uri, self.options.run_resources).await
    }

    async fn custom(
        &self,
        ctx: &RequestContext,
        method: &str,
        params: Value,
    ) -> Option<McpResult<Value>> {
        let method = RunMethod::from_method(method)?;
        Some(tools::method_answer(&self.api, ctx, method, &params).await)
    }
}

/// What the housekeeping sweep works on.
struct Housekeeping {
    api: Arc<RunApi>,
    terminal_ttl: Duration,
    sessions: Arc<std::sync::OnceLock<Weak<McpServer>>>,
}

/// Every `every` (first at once), one housekeeping sweep.
async fn sweep_loop(work: Housekeeping, every: Duration, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(every.min(work.terminal_ttl));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {
                sweep(&work.api, work.terminal_ttl).await;
                if let Some(server) = work.sessions.get().and_then(Weak::upgrade) {
                    reap_idle_sessions(&server, SESSION_IDLE_TTL).await;
                }
            }
        }
    }
}

/// Ends the legacy sessions with no open connection, no request and no activity for `idle`.
pub(crate) async fn reap_idle_sessions(server: &McpServer, idle: Duration) -> usize {
    let mut ended = 0;
    for (id, activity) in server.session_activity() {
        if activity.open_connections == 0
            && activity.inflight_requests == 0
            && activity.last_activity.elapsed() >= idle
            && server.evict_session(&id).await
        {
            ended += 1;
        }
    }
    ended
}

/// One sweep over the runs of the folder (every replica's, on a shared store: one query):
/// completed, failed and stopped runs whose last change is older than `ttl` are deleted and
/// forgotten, and the store gauges of `/metrics` are set from what the query found. Runs
/// waiting at a checkpoint are kept: someone may still answer them.
pub async fn sweep(api: &RunApi, ttl: Duration) -> usize {
    let cutoff = crate::util::now_ms() - ttl.as_millis() as i64;
    let Ok(runs) = api.engine.list(Some(&api.folder.root), u32::MAX).await else {
        return 0;
    };
    let mut deleted = 0;
    let mut by_state: Vec<(&str, u64)> = Vec::new();
    let mut pending = 0;
    for run in runs {
        let finished = matches!(
            run.status,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Aborted
        ) || (run.status == RunStatus::Paused
            && run.pause_reason != Some(crate::model::PauseReason::CheckpointRequired));
        if finished && run.updated_at < cutoff && !api.engine.is_live(&run.run_id) {
            if api.engine.delete(&run.run_id).await.is_ok() {
                deleted += 1;
                api.owners.forget(&run.run_id);
                continue;
            }
            api.owners.forget(&run.run_id);
        }
        if matches!(run.status, RunStatus::Pending | RunStatus::Running) {
            pending += 1;
        }
        let state = run.status.as_str();
        match by_state.iter_mut().find(|(name, _)| *name == state) {
            Some((_, count)) => *count += 1,
            None => by_state.push((state, 1)),
        }
    }
    for status in [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Aborted,
    ] {
        if !by_state.iter().any(|(name, _)| *name == status.as_str()) {
            by_state.push((status.as_str(), 0));
        }
    }
    crate::metrics::global().set_runs(pending, &by_state);
    if let Err(error) = api.engine.queue().prune_queue(cutoff).await {
        tracing::warn!("housekeeping: cannot delete the ended queue entries: {error}");
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::{ServerOptions, TransportContext, TransportKind};

    struct Bare(NotificationHub);

    #[async_trait]
    impl McpHandler for Bare {
        fn server_info(&self) -> ServerInfo {
            ServerInfo {
                name: "reap-test".into(),
                version: "1.0.0".into(),
                title: None,
            }
        }

        fn capabilities(&self) -> Value {
            json!({})
        }

        fn hub(&self) -> &NotificationHub {
            &self.0
        }

        async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
            Err(crate::mcp::McpError::invalid_params(uri.to_owned()))
        }
    }

    #[tokio::test]
    async fn the_sweep_ends_sessions_idle_for_the_ttl_and_keeps_younger_ones() {
        let server = McpServer::new(
            Arc::new(Bare(NotificationHub::new())),
            ServerOptions::default(),
        );
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}});
        let outcome = server
            .handle_bytes(
                initialize.to_string().as_bytes(),
                TransportContext::new(TransportKind::Http, "reap-test"),
            )
            .await;
        let session = outcome.new_session.expect("a legacy session");
        assert_eq!(
            reap_idle_sessions(&server, Duration::from_secs(3600)).await,
            0
        );
        assert!(
            server.session(&session).is_some(),
            "younger than the TTL: kept"
        );
        assert_eq!(reap_idle_sessions(&server, Duration::ZERO).await, 1);
        assert!(
            server.session(&session).is_none(),
            "idle for the TTL: ended"
        );
    }
}
