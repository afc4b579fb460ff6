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
    /// Asks the notification bridge for a `resources/list_changed`, which it coalesces.
    list_changes: tokio::sync::mpsc::UnboundedSender<()>,
    /// Stops the notification bridge and resume work handed off after a timeout.
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl WorkflowServer {
    /// Builds the server and starts its notification bridge. Must be called inside a Tokio
    /// runtime; call [`WorkflowServer::shutdown`] to stop the bridge.
    pub fn new(engine: Engine, options: WorkflowServerOptions) -> Arc<WorkflowServer> {
        let (list_changes, list_requests) = tokio::sync::mpsc::unbounded_channel();
        let server = Arc::new(WorkflowServer {
            engine,
            options,
            hub: NotificationHub::new(),
            receipts: Mutex::new(Receipts::default()),
            list_changes,
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
        server.tracker.spawn(bridge.run(notices, list_requests));
        server
    }

    /// The list of resources changed (a run was admitted): one coalesced
    /// `resources/list_changed` goes out at the end of the window (see [`Bridge`]).
    pub(super) fn list_changed(&self) {
        let _ = self.list_changes.send(());
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
        let action = match workflow::parse(&arguments, self.default_project()) {
            Ok(action) => action,
            // Bad input is the model's to correct: a tool execution error, not a protocol one.
            Err(error) => return Ok(workflow::invalid_input(error)),
        };
        if !action.admits() {
            return self.dispatch(ctx, action, None).await;
        }
        // Run and resume: an exact retry answers from the receipt instead of admitting again.
        let is_resume = matches!(action, workflow::Action::Resume(_));
        let key = match receipt_key(ctx, &arguments, is_resume) {
            Ok(Some(key)) => key,
            // A stateless run without an idempotency key is always a new run.
            Ok(None) => return self.dispatch(ctx, action, None).await,
            Err(message) => return Ok(workflow::tool_error(message)),
        };
        let receipt = match self
            .receipt(&key, ctx.session_id.is_none() && is_resume)
            .await
        {
            Ok(receipt) => receipt,
            Err(message) => return Ok(workflow::tool_error(message)),
        };
        let operation_id = format!("mcp-{}", &crate::util::sha256_hex(key.id.as_bytes())[..32]);
        let answer = receipt
            .answer
            .get_or_try_init(|| async {
                let value = self
                    .dispatch(ctx, action, Some(operation_id))
                    .await
                    .map_err(Uncached::Error)?;
                // A request cancelled before admission has no answer worth repeating; nor,
                // without a session, has a refusal: the retry tries again.
                let stateless = ctx.session_id.is_none();
                if (ctx.cancel.is_cancelled() || stateless) && value["isError"] == true {
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
    /// The receipt for `key`, made when there is none. The same key with other arguments is
    /// refused. For a stateless resume (`check_generation`) a receipt whose answer no longer
    /// describes the run (a newer generation, or the generation it started was stopped or
    /// paused since) is replaced by a fresh one, so the request resumes again.
    async fn receipt(
        &self,
        key: &ReceiptKey,
        check_generation: bool,
    ) -> Result<Arc<Receipt>, String> {
        let receipt = self.lock_receipts().get_or_insert(&key.id, &key.digest);
        if receipt.digest != key.digest {
            return Err(format!(
                "{} was already used with different arguments; use a new key for a new request",
                key.describe
            ));
        }
        let stale = match receipt.answer.get() {
            Some(answer) if check_generation => !self.resume_still_stands(answer).await,
            _ => false,
        };
        if !stale {
            return Ok(receipt);
        }
        let mut receipts = self.lock_receipts();
        // Another retry may have replaced it meanwhile: share that one.
        if let Some(current) = receipts.get(&key.id)
            && !Arc::ptr_eq(&current, &receipt)
        {
            return Ok(current);
        }
        receipts.remove(&key.id);
        Ok(receipts.insert(&key.id, &key.digest))
    }

    /// Whether a resume acknowledgement still describes the run: the generation it started
    /// is the latest, and it has not been stopped, paused or failed since.
    async fn resume_still_stands(&self, answer: &Value) -> bool {
        let acknowledged = answer
            .pointer("/structuredContent/continuation/generation")
            .and_then(Value::as_u64);
        let Some(run_id) = answer
            .pointer("/structuredContent/runId")
            .and_then(Value::as_str)
            .and_then(|id| RunId::parse(id).ok())
        else {
            return false;
        };
        match self.engine.load_reconciled(&run_id).await {
            Ok(record) => {
                acknowledged == Some(u64::from(record.generation))
                    && !matches!(
                        record.status,
                        RunStatus::Paused | RunStatus::Aborted | RunStatus::Failed
                    )
            }
            Err(_) => false,
        }
    }

    fn lock_receipts(&self) -> std::sync::MutexGuard<'_, Receipts> {
        self.receipts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `_meta` key that makes a stateless `run` retryable (docs/api.md, "Exact retries").
pub const IDEMPOTENCY_KEY_META: &str = "agentprism/idempotencyKey";
/// Longest idempotency key accepted, in bytes.
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// What identifies one run/resume request for exact retries.
struct ReceiptKey {
    /// The receipt table's key; the engine's operation id is derived from it.
    id: String,
    /// Digest of the arguments: a receipt answers only the same arguments.
    digest: String,
    /// How the key is named in an error.
    describe: String,
}

/// Exact-retry identity (docs/api.md). In a legacy session: the session and the JSON-RPC
/// id, which is unique there. Stateless, where every client numbers its requests from 1:
/// the client's `_meta["agentprism/idempotencyKey"]` with the arguments; without one a `run`
/// has no identity (it always admits a new run) and a `resume` is known by its id and
/// arguments, its receipt checked against the run before it answers.
fn receipt_key(
    ctx: &RequestContext,
    arguments: &Value,
    is_resume: bool,
) -> Result<Option<ReceiptKey>, String> {
    let id = ctx.request_id.to_string();
    if let Some(session) = &ctx.session_id {
        return Ok(Some(ReceiptKey {
            id: format!("s\u{0}{session}\u{0}{id}"),
            // A legacy retry is known by its id alone.
            digest: String::new(),
            describe: format!("request id {id}"),
        }));
    }
    let digest =
        crate::util::sha256_hex(crate::engine::journal::canonical_json(arguments).as_bytes());
    let action = if is_resume { "resume" } else { "run" };
    match ctx.meta.get(IDEMPOTENCY_KEY_META) {
        None | Some(Value::Null) => {}
        Some(Value::String(key)) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_BYTES => {
            return Ok(Some(ReceiptKey {
                id: format!("k\u{0}{action}\u{0}{key}"),
                digest,
                describe: format!("_meta[\"{IDEMPOTENCY_KEY_META}\"] {key:?}"),
            }));
        }
        Some(_) => {
            return Err(format!(
                "_meta[\"{IDEMPOTENCY_KEY_META}\"] must be a string of 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
            ));
        }
    }
    if !is_resume {
        return Ok(None);
    }
    Ok(Some(ReceiptKey {
        id: format!("n\u{0}{id}\u{0}{digest}"),
        digest,
        describe: format!("request id {id}"),
    }))
}

/// One request identity's answer. A retry that arrives while the first request still
/// prepares waits on the same cell.
struct Receipt {
    digest: String,
    answer: OnceCell<Value>,
}

/// Bounded receipts of run/resume answers, one per request identity; the oldest go first.
#[derive(Default)]
struct Receipts {
    cells: HashMap<String, Arc<Receipt>>,
    order: VecDeque<String>,
}

impl Receipts {
    fn get(&self, key: &str) -> Option<Arc<Receipt>> {
        self.cells.get(key).cloned()
    }

    fn get_or_insert(&mut self, key: &str, digest: &str) -> Arc<Receipt> {
        match self.get(key) {
            Some(receipt) => receipt,
            None => self.insert(key, digest),
        }
    }

    fn insert(&mut self, key: &str, digest: &str) -> Arc<Receipt> {
        while self.order.len() >= MAX_RECEIPTS {
            if let Some(oldest) = self.order.pop_front() {
                self.cells.remove(&oldest);
            }
        }
        let receipt = Arc::new(Receipt {
            digest: digest.to_owned(),
            answer: OnceCell::new(),
        });
        self.cells.insert(key.to_owned(), receipt.clone());
        self.order.push_back(key.to_owned());
        receipt
    }

    fn remove(&mut self, key: &str) {
        self.cells.remove(key);
        self.order.retain(|known| known != key);
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
///
/// List changes (an admission, a result that became available) are trailing only: the first
/// opens a window, and one `resources/list_changed` goes out when it ends, whatever else
/// changed the list meanwhile. So a run admitted and completed within the window is one
/// change, not two; deletions still notify at once ([`WorkflowServer::delete_run`]).
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
    async fn run(
        self,
        mut notices: tokio::sync::broadcast::Receiver<RunNotice>,
        mut list_requests: tokio::sync::mpsc::UnboundedReceiver<()>,
    ) {
        let mut windows: HashMap<RunId, Window> = HashMap::new();
        let mut list_window: Option<tokio::time::Instant> = None;
        loop {
            let next_end = windows.values().map(|w| w.ends).min();
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                Some(()) = list_requests.recv() => {
                    list_window.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE_WINDOW);
                }
                _ = sleep_until(list_window), if list_window.is_some() => {
                    list_window = None;
                    self.hub.publish(ServerEvent::ResourcesListChanged);
                }
                notice = notices.recv() => match notice {
                    Ok(notice) => {
                        if self.notice(notice, &mut windows).await {
                            list_window.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE_WINDOW);
                        }
                    }
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

    /// Handles one notice; returns whether it changed the resource list.
    async fn notice(&self, notice: RunNotice, windows: &mut HashMap<RunId, Window>) -> bool {
        match notice {
            RunNotice::Event { run_id, .. } => {
                match windows.get_mut(&run_id) {
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
                }
                false
            }
            RunNotice::Settled { run_id, status } => {
                // The settled record (and every event) is durable now: one last hint.
                self.updated(&run_id);
                if let Some(window) = windows.get_mut(&run_id) {
                    window.dirty = false;
                }
                status == RunStatus::Completed.as_str()
                    && self
                        .engine
                        .store()
                        .load_run(&run_id)
                        .await
                        .is_ok_and(|record| record.result.is_some())
            }
            RunNotice::Permission { .. } => false,
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
