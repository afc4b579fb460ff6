//! The workflow MCP server: the `workflow` tool, the run monitor (MCP App and Claude Code
//! channels), the run resources, the `author-workflow` prompt and the authoring skill,
//! offered to the MCP core as one [`McpHandler`].
//!
//! [`WorkflowServer`] wraps an [`Engine`]; it owns no run state of its own beyond small
//! in-memory tables: receipts of `run`/`resume` requests (so an exact retry returns the first
//! answer instead of admitting a second run), the per-run coalescing state of the
//! notification bridge, a task that turns engine notices into `resources/updated` and
//! `list_changed` events on the [`NotificationHub`], and the run monitor's receipt ledger and
//! followed runs (bounded; `monitor/`). Everything durable lives in the engine's
//! store, so a second server process over the same store serves the same resources.
//!
//! Layout, each depending only on the ones after it: this file (the server: its one `impl`,
//! the handler methods, the tool registry it serves from and the observers of its answers),
//! `bridge` (notices to hub events), `monitor/` (the run monitor: its launcher and app-only
//! tools, the panel resource, the automatic messages, the receipt ledger and the Claude Code
//! channels, `docs/monitor.md`), `workflow/` (the tool: schema, validation, exact retries,
//! engine work, answers, backend discovery, and its tasks), `session_runs` (the capped
//! session→run table the channels and the tasks share), `resources` (URIs, the events
//! document, listings, completion), `skills` (the embedded authoring skill and the skills
//! extension methods), `prompts` (the authoring prompt and one per saved workflow).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::mcp::handler::{
    McpHandler, McpResult, NotificationHub, RequestContext, ServerEvent, ServerInfo,
};
use crate::mcp::registry::ToolRegistry;
use crate::model::RunId;

mod bridge;
pub mod monitor;
mod prompts;
mod resources;
mod session_runs;
mod skills;
mod workflow;

use bridge::Bridge;
use monitor::{ChannelObserver, Channels, Monitor, ReceiptLedger};
use resources::Resources;
use workflow::{WorkflowTasks, WorkflowTool};

pub use skills::{SKILL_NAME, SKILL_URI};
pub use workflow::{
    ACTIONS, IDEMPOTENCY_KEY_META, OBSERVATION_CEILING, PREPARATION_CEILING, TOOL_NAME,
};
/// The `config` action's probes, which `agentprism config` shares.
pub(crate) use workflow::{ConfigInput, config as probe_backends};

/// Settings of a [`WorkflowServer`].
#[derive(Clone, Debug)]
pub struct WorkflowServerOptions {
    /// The project used when a request leaves out `projectDir` (`--in-process`, where the
    /// server belongs to one project). `None` makes `projectDir` required for `run` and
    /// `config`. Also scopes `resources/list` and completion to that project.
    pub default_project_dir: Option<PathBuf>,
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`; also the version the embedded skill matches.
    pub version: String,
}

impl Default for WorkflowServerOptions {
    fn default() -> Self {
        WorkflowServerOptions {
            default_project_dir: None,
            name: "agentprism".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// The MCP face of an [`Engine`]: build one with [`WorkflowServer::new`] and hand it to a
/// transport from the MCP core.
///
/// ```no_run
/// use std::sync::Arc;
/// use agentprism::engine::{Engine, EngineConfig, instant::InstantRunner};
/// use agentprism::mcp::server::{McpServer, ServerOptions};
/// use agentprism::store::SqliteStore;
/// use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
///
/// # async fn serve() -> anyhow::Result<()> {
/// let env = agentprism::env::EnvSnapshot::capture();
/// let store = Arc::new(SqliteStore::open(std::path::Path::new("/tmp/agentprism-state"))?);
/// let backends = agentprism::acp::lookup::Backends::from_env(&env).map_err(anyhow::Error::msg)?;
/// // Any `AgentRunner` works: the ACP runner in production, the instant runner in tests.
/// let engine = Engine::new(store, InstantRunner::new(), Arc::new(backends), EngineConfig::default());
/// let handler = WorkflowServer::new(engine, WorkflowServerOptions::default());
/// let server = Arc::new(McpServer::new(handler.clone(), ServerOptions::default()));
/// // Serve it on stdio; `agentprism::transport::http::serve` takes a bound listener instead,
/// // and any other transport can call `McpServer::handle` itself.
/// agentprism::transport::stdio::serve_stdio(server, tokio::io::stdin(), tokio::io::stdout()).await?;
/// handler.shutdown().await;
/// # Ok(()) }
/// ```
pub struct WorkflowServer {
    /// Every run, its resources and its notices come from here.
    engine: Engine,
    options: WorkflowServerOptions,
    /// Where resource changes are published for sessions and listen streams.
    hub: NotificationHub,
    /// The tools `tools/list` and `tools/call` answer from: the `workflow` tool, then the
    /// run monitor's launcher and app-only tools (listed to MCP Apps clients only); observed
    /// by the channels and the tasks layer.
    tools: ToolRegistry,
    /// The `workflow` tool again, to forget a closed session's receipts.
    workflow: Arc<WorkflowTool>,
    /// The Claude Code channel sender, to forget a closed session's followed runs.
    channels: Arc<Channels>,
    /// `run` and `resume` as MCP tasks (`docs/tasks.md`).
    tasks: WorkflowTasks,
    /// Stops the notification bridge and resume work handed off after a timeout.
    shutdown: CancellationToken,
    /// The bridge task and resumes that outlived their request.
    tracker: TaskTracker,
}

impl WorkflowServer {
    /// Builds the server and starts its notification bridge. Must be called inside a Tokio
    /// runtime; call [`WorkflowServer::shutdown`] to stop the bridge.
    pub fn new(engine: Engine, options: WorkflowServerOptions) -> Arc<WorkflowServer> {
        let (list_changes, list_requests) = tokio::sync::mpsc::unbounded_channel();
        let tracker = TaskTracker::new();
        let workflow = Arc::new(WorkflowTool::new(
            engine.clone(),
            options.default_project_dir.clone(),
            tracker.clone(),
            list_changes,
        ));
        let hub = NotificationHub::new();
        let channels = Arc::new(Channels::new(engine.clone(), hub.clone(), tracker.clone()));
        let tasks = WorkflowTasks::new(engine.clone(), workflow.clone(), hub.clone());
        let mut tools = ToolRegistry::new();
        tools
            .register(WorkflowTool::registration(workflow.clone()))
            .expect("the workflow tool's definition is valid");
        let monitor = Arc::new(Monitor {
            engine: engine.clone(),
            default_project: options.default_project_dir.clone(),
            ledger: ReceiptLedger::default(),
        });
        for tool in Monitor::registrations(monitor) {
            tools
                .register(tool)
                .expect("the run monitor's tool definitions are valid");
        }
        tools.observe(Arc::new(ChannelObserver {
            channels: channels.clone(),
            memo: Default::default(),
        }));
        tools.observe(tasks.observer());
        let server = Arc::new(WorkflowServer {
            engine,
            options,
            tasks,
            hub,
            tools,
            workflow,
            channels,
            shutdown: CancellationToken::new(),
            tracker,
        });
        // Subscribe before spawning so no notice between `new` and the task's start is lost.
        let notices = server.engine.subscribe();
        let bridge = Bridge {
            hub: server.hub.clone(),
            shutdown: server.shutdown.clone(),
        };
        server.tracker.spawn(bridge.run(notices, list_requests));
        let notices = server.engine.subscribe_lifecycle();
        server.tracker.spawn(
            server
                .channels
                .clone()
                .run(notices, server.shutdown.clone()),
        );
        let notices = server.engine.subscribe();
        server
            .tracker
            .spawn(server.tasks.notify_status(notices, server.shutdown.clone()));
        server
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn options(&self) -> &WorkflowServerOptions {
        &self.options
    }

    /// Deletes a run record (its store copy of the script, its result and events) and tells
    /// subscribers: `ResourceDeleted` for its URIs, then `ResourcesListChanged`.
    pub async fn delete_run(&self, run_id: &RunId) -> crate::engine::EngineResult<()> {
        let record = self.engine.load_reconciled(run_id).await?;
        self.engine.delete(run_id).await?;
        for uri in [
            resources::events_uri(run_id),
            resources::result_uri(run_id),
            crate::engine::status::script_uri(&record),
        ] {
            self.hub.publish(ServerEvent::ResourceDeleted { uri });
        }
        self.hub.publish(ServerEvent::ResourcesListChanged);
        Ok(())
    }

    /// Stops the notification bridge and waits (bounded) for handed-off work. Runs keep
    /// executing in the engine; stop those with `Engine::shutdown`.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
    }

    /// The run resources, scoped to the default project when there is one.
    fn resources(&self) -> Resources<'_> {
        Resources {
            engine: &self.engine,
            project: self.options.default_project_dir.as_deref(),
        }
    }
}

#[async_trait]
impl McpHandler for WorkflowServer {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: self.options.name.clone(),
            version: self.options.version.clone(),
            title: Some("agentprism workflows".to_owned()),
        }
    }

    fn instructions(&self) -> Option<String> {
        Some(format!(
            "Runs durable multi-agent workflow scripts. Start with workflow action \"config\" to \
             discover backends, then \"run\" a script; watch it with \"status\" or the events \
             resource, answer checkpoints with \"resume\", and read the exact output with \
             \"result\". Authoring guide: the skill {SKILL_URI} (or the author-workflow prompt)."
        ))
    }

    fn capabilities(&self) -> Value {
        json!({
            "tools": {"listChanged": false},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {},
            "completions": {},
            "logging": {},
            "extensions": {"io.modelcontextprotocol/skills": {"directoryRead": true}},
            "experimental": {monitor::CHANNEL_CAPABILITY: {}},
        })
    }

    fn hub(&self) -> &NotificationHub {
        &self.hub
    }

    fn tasks(&self) -> Option<&dyn crate::mcp::tasks::TaskHandler> {
        Some(&self.tasks)
    }

    fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    async fn list_resources(
        &self,
        ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        let mut listed = self.resources().resource_list().await?;
        if monitor::ui_capable(ctx)
            && let Some(resources) = listed["resources"].as_array_mut()
        {
            resources.push(monitor::panel_listing());
        }
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(json!({"resourceTemplates": resources::templates()}))
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        if uri == monitor::PANEL_URI {
            return Ok(monitor::read_panel());
        }
        self.resources().read(uri).await
    }

    async fn check_subscribe(&self, _ctx: &RequestContext, uri: &str) -> McpResult<()> {
        self.resources().subscribable(uri).await
    }

    async fn list_prompts(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        prompts::list(&self.engine, ctx).await
    }

    async fn get_prompt(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: Value,
    ) -> McpResult<Value> {
        prompts::get(&self.engine, ctx, name, &arguments).await
    }

    async fn complete(&self, _ctx: &RequestContext, params: Value) -> McpResult<Value> {
        self.resources().completion(&params).await
    }

    async fn custom(
        &self,
        _ctx: &RequestContext,
        method: &str,
        params: Value,
    ) -> Option<McpResult<Value>> {
        skills::custom(method, &params)
    }

    async fn session_closed(&self, session_id: &str) {
        self.workflow.session_closed(session_id);
        self.channels.session_closed(session_id);
        self.tasks.session_closed(session_id);
    }
}
