//! The workflow MCP server: the `workflow` tool, the run resources, the `author-workflow`
//! prompt and the authoring skill, offered to the MCP core as one [`McpHandler`].
//!
//! [`WorkflowServer`] wraps an [`Engine`]; it owns no run state of its own beyond two small
//! in-memory tables: receipts of `run`/`resume` requests (so an exact retry returns the first
//! answer instead of admitting a second run) and the per-run coalescing state of the
//! notification bridge, a task that turns engine notices into `resources/updated` and
//! `list_changed` events on the [`NotificationHub`]. Everything durable lives in the engine's
//! store, so a second server process over the same store serves the same resources.
//!
//! Layout: `workflow` (input schema, per-action validation, dispatch), `config` (backend
//! discovery), `resources` (URIs, the events document, listings, completion), `skills` (the
//! embedded authoring skill and the skills extension methods), `prompt`, `text` (summaries).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::engine::events::RunNotice;
use crate::mcp::handler::{
    McpError, McpHandler, McpResult, NotificationHub, RequestContext, ServerEvent, ServerInfo,
};
use crate::model::{RunId, RunStatus};

mod config;
mod prompt;
mod resources;
mod skills;
mod text;
mod workflow;

pub use skills::{SKILL_NAME, SKILL_URI};
pub use workflow::{ACTIONS, TOOL_NAME};

/// How long `run` may prepare before it is abandoned (nothing stored).
pub const PREPARATION_CEILING: Duration = Duration::from_secs(120);
/// How long an observation (`status`, `result`, `config`) may take.
pub const OBSERVATION_CEILING: Duration = Duration::from_secs(45);
/// Run receipts kept for exact retries; the oldest go first.
const MAX_RECEIPTS: usize = 1024;
/// After an events notification for a run, further appends within this window are folded
/// into one trailing notification. The driver makes events durable at least every 250 ms,
/// so a window a little longer than that lets the trailing hint find the events readable.
const COALESCE_WINDOW: Duration = Duration::from_millis(300);

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
    engine: Engine,
    options: WorkflowServerOptions,
    hub: NotificationHub,
    receipts: Mutex<Receipts>,
    /// Stops the notification bridge and resume work handed off after a timeout.
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl WorkflowServer {
    /// Builds the server and starts its notification bridge. Must be called inside a Tokio
    /// runtime; call [`WorkflowServer::shutdown`] to stop the bridge.
    pub fn new(engine: Engine, options: WorkflowServerOptions) -> Arc<WorkflowServer> {
        let server = Arc::new(WorkflowServer {
            engine,
            options,
            hub: NotificationHub::new(),
            receipts: Mutex::new(Receipts::default()),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        // Subscribe before spawning so no notice between `new` and the task's start is lost.
        let notices = server.engine.subscribe();
        let bridge = Bridge {
            engine: server.engine.clone(),
            hub: server.hub.clone(),
            shutdown: server.shutdown.clone(),
        };
        server.tracker.spawn(bridge.run(notices));
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

    /// The project a request without `projectDir` means.
    fn default_project(&self) -> Option<&std::path::Path> {
        self.options.default_project_dir.as_deref()
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
        })
    }

    fn hub(&self) -> &NotificationHub {
        &self.hub
    }

    async fn list_tools(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        // The list never changes while the process runs: build it once.
        static TOOLS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        Ok(TOOLS
            .get_or_init(|| json!({"tools": [workflow::tool_definition()]}))
            .clone())
    }

    async fn call_tool(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: Value,
    ) -> McpResult<Value> {
        if name != TOOL_NAME {
            return Err(McpError::invalid_params(format!(
                "unknown tool {name:?}; this server has one tool, {TOOL_NAME:?}"
            )));
        }
        let action = workflow::parse(&arguments, self.default_project())?;
        if !action.admits() {
            return self.dispatch(ctx, action, None).await;
        }
        // Run and resume: an exact retry answers from the receipt instead of admitting again.
        let key = receipt_key(ctx, &arguments);
        let cell = self.receipt_cell(&key);
        let operation_id = format!("mcp-{}", &crate::util::sha256_hex(key.as_bytes())[..32]);
        let answer = cell
            .get_or_try_init(|| async {
                let value = self
                    .dispatch(ctx, action, Some(operation_id))
                    .await
                    .map_err(Uncached::Error)?;
                // A request cancelled before admission has no answer worth repeating.
                if ctx.cancel.is_cancelled() && value["isError"] == true {
                    return Err(Uncached::Answer(value));
                }
                Ok(value)
            })
            .await;
        match answer {
            Ok(value) => Ok(value.clone()),
            Err(Uncached::Error(error)) => Err(error),
            Err(Uncached::Answer(value)) => Ok(value),
        }
    }

    async fn list_resources(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        self.resource_list().await
    }

    async fn list_resource_templates(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(json!({"resourceTemplates": resources::templates()}))
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        self.read(uri).await
    }

    async fn check_subscribe(&self, _ctx: &RequestContext, uri: &str) -> McpResult<()> {
        self.subscribable(uri).await
    }

    async fn list_prompts(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        Ok(json!({"prompts": [prompt::definition()]}))
    }

    async fn get_prompt(
        &self,
        _ctx: &RequestContext,
        name: &str,
        arguments: Value,
    ) -> McpResult<Value> {
        prompt::get(name, &arguments)
    }

    async fn complete(&self, _ctx: &RequestContext, params: Value) -> McpResult<Value> {
        self.completion(&params).await
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
        if let Ok(mut receipts) = self.receipts.lock() {
            receipts.forget_session(session_id);
        }
    }
}

/// Why a receipt cell was left empty.
enum Uncached {
    Error(McpError),
    Answer(Value),
}

impl WorkflowServer {
    fn receipt_cell(&self, key: &str) -> Arc<OnceCell<Value>> {
        let mut receipts = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
        receipts.cell(key)
    }
}

/// Exact-retry identity (engine.md Decision 6): the session and JSON-RPC id, or for a
/// stateless request the id and a digest of the arguments.
fn receipt_key(ctx: &RequestContext, arguments: &Value) -> String {
    let id = ctx.request_id.to_string();
    match &ctx.session_id {
        Some(session) => format!("s\u{0}{session}\u{0}{id}"),
        None => {
            let digest = crate::util::sha256_hex(
                crate::engine::journal::canonical_json(arguments).as_bytes(),
            );
            format!("n\u{0}{id}\u{0}{digest}")
        }
    }
}

/// Bounded receipts of run/resume answers, one cell per request identity. A retry that
/// arrives while the first request still prepares waits on the same cell.
#[derive(Default)]
struct Receipts {
    cells: HashMap<String, Arc<OnceCell<Value>>>,
    order: VecDeque<String>,
}

impl Receipts {
    fn cell(&mut self, key: &str) -> Arc<OnceCell<Value>> {
        if let Some(cell) = self.cells.get(key) {
            return cell.clone();
        }
        while self.order.len() >= MAX_RECEIPTS {
            if let Some(oldest) = self.order.pop_front() {
                self.cells.remove(&oldest);
            }
        }
        let cell = Arc::new(OnceCell::new());
        self.cells.insert(key.to_owned(), cell.clone());
        self.order.push_back(key.to_owned());
        cell
    }

    fn forget_session(&mut self, session_id: &str) {
        let prefix = format!("s\u{0}{session_id}\u{0}");
        self.cells.retain(|key, _| !key.starts_with(&prefix));
        self.order.retain(|key| !key.starts_with(&prefix));
    }
}

/// Turns engine notices into hub events. Event appends are coalesced per run: the first
/// append notifies at once, later ones within [`COALESCE_WINDOW`] only mark the run dirty,
/// and a dirty run gets one trailing notification when its window ends. So a burst of a
/// thousand events costs a subscriber a handful of re-reads, and the last hint always comes
/// after the last append.
struct Bridge {
    engine: Engine,
    hub: NotificationHub,
    shutdown: CancellationToken,
}

struct Window {
    ends: tokio::time::Instant,
    dirty: bool,
}

impl Bridge {
    async fn run(self, mut notices: tokio::sync::broadcast::Receiver<RunNotice>) {
        let mut windows: HashMap<RunId, Window> = HashMap::new();
        loop {
            let next_end = windows.values().map(|w| w.ends).min();
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                notice = notices.recv() => match notice {
                    Ok(notice) => self.notice(notice, &mut windows).await,
                    // Missed notices: the trailing hints of open windows still go out, and
                    // readers catch up from their durable cursor.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for window in windows.values_mut() {
                            window.dirty = true;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = sleep_until(next_end) => {
                    let now = tokio::time::Instant::now();
                    windows.retain(|run_id, window| {
                        if window.ends > now {
                            return true;
                        }
                        if window.dirty {
                            self.updated(run_id);
                            window.dirty = false;
                            window.ends = now + COALESCE_WINDOW;
                            return true;
                        }
                        false
                    });
                }
            }
        }
    }

    async fn notice(&self, notice: RunNotice, windows: &mut HashMap<RunId, Window>) {
        match notice {
            RunNotice::Event { run_id, .. } => match windows.get_mut(&run_id) {
                Some(window) => window.dirty = true,
                None => {
                    self.updated(&run_id);
                    windows.insert(
                        run_id,
                        Window {
                            ends: tokio::time::Instant::now() + COALESCE_WINDOW,
                            dirty: false,
                        },
                    );
                }
            },
            RunNotice::Settled { run_id, status } => {
                // The settled record (and every event) is durable now: one last hint.
                self.updated(&run_id);
                if let Some(window) = windows.get_mut(&run_id) {
                    window.dirty = false;
                }
                if status == RunStatus::Completed.as_str()
                    && let Ok(record) = self.engine.store().load_run(&run_id).await
                    && record.result.is_some()
                {
                    self.hub.publish(ServerEvent::ResourcesListChanged);
                }
            }
            RunNotice::Permission { .. } => {}
        }
    }

    fn updated(&self, run_id: &RunId) {
        self.hub.publish(ServerEvent::ResourceUpdated {
            uri: resources::events_uri(run_id),
        });
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
