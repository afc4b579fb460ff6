//! The boundary between the MCP core (JSON-RPC, protocol eras, sessions, transports) and what
//! a server offers (tools, resources, prompts, extension methods).
//!
//! The core owns the wire: it parses and validates messages, negotiates the era, keeps legacy
//! sessions and their subscriptions, adds `resultType`/`ttlMs`/`cacheScope` where the modern era
//! needs them, and routes notifications to the right streams. A [`McpHandler`] only answers
//! requests with MCP result objects and publishes server-side changes on a [`NotificationHub`].
//! The workflow server, `agentprism serve <dir>` and the conformance fixture are handlers.

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::broadcast;

pub use super::context::{
    Era, McpError, McpResult, Notification, RequestContext, RequestNotifier, codes,
};
use super::registry::ToolRegistry;
use super::tasks::TaskHandler;

/// Server-side changes the core fans out to interested sessions and listen streams.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerEvent {
    /// `notifications/resources/updated` for subscribers of `uri`.
    ResourceUpdated {
        uri: String,
    },
    ResourcesListChanged,
    ToolsListChanged,
    PromptsListChanged,
    /// A resource went away: the core drops its subscriptions.
    ResourceDeleted {
        uri: String,
    },
    /// A notification only for one legacy session (e.g. a host-specific channel).
    ToSession {
        session_id: String,
        method: String,
        params: Value,
    },
}

/// The broadcast channel handlers publish [`ServerEvent`]s on. Cheap to clone.
#[derive(Clone, Debug)]
pub struct NotificationHub {
    sender: broadcast::Sender<ServerEvent>,
}

impl Default for NotificationHub {
    fn default() -> Self {
        NotificationHub::new()
    }
}

impl NotificationHub {
    pub fn new() -> NotificationHub {
        let (sender, _) = broadcast::channel(1024);
        NotificationHub { sender }
    }

    pub fn publish(&self, event: ServerEvent) {
        let _ = self.sender.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ServerEvent> {
        self.sender.subscribe()
    }
}

/// `serverInfo` / `_meta["io.modelcontextprotocol/serverInfo"]`.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub title: Option<String>,
}

/// What an MCP server offers. Results are MCP result objects (`{tools:[..]}`,
/// `{content:[..], structuredContent?, isError?}`, `{contents:[..]}`...) without
/// `resultType`/`ttlMs`/`cacheScope`, which the core adds for the modern era.
#[async_trait]
pub trait McpHandler: Send + Sync + 'static {
    fn server_info(&self) -> ServerInfo;

    /// Optional `instructions` for initialize/discover.
    fn instructions(&self) -> Option<String> {
        None
    }

    /// The `capabilities` object (tools, resources, prompts, logging, completions,
    /// extensions). The core answers methods of undeclared capabilities with -32601. Read
    /// once, when the [`McpServer`](super::McpServer) is built: the set is fixed.
    fn capabilities(&self) -> Value;

    /// The hub this handler publishes on.
    fn hub(&self) -> &NotificationHub;

    /// The tools this handler serves: when each is listed, to whom it is visible, which
    /// [`ToolHandler`](super::registry::ToolHandler) answers it, and who observes the answers.
    /// The core answers every `tools/call` from it (an unknown tool is a JSON-RPC error;
    /// arguments the tool refuses and failures of the tool itself are results with `isError:
    /// true`, MCP 2025-11-25, so the model can correct itself). The default `list_tools`
    /// answers from it too, and the core marks a modern `tools/list` `cacheScope: "private"`
    /// when [`ToolRegistry::varies_by_client`] says the list depends on who asks.
    fn tools(&self) -> &ToolRegistry {
        static NO_TOOLS: ToolRegistry = ToolRegistry::new();
        &NO_TOOLS
    }

    /// What backs tasks (`docs/tasks.md`), if this handler serves any: the core then declares
    /// the tasks capability to clients that speak tasks and answers `tasks/*` through it.
    fn tasks(&self) -> Option<&dyn TaskHandler> {
        None
    }

    /// `tools/list`. A handler that overrides this (a fixed list written out, such as the
    /// conformance fixture's) must give every client the same list, and list only tools its
    /// registry answers.
    async fn list_tools(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        Ok(self.tools().list(ctx))
    }

    async fn list_resources(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(serde_json::json!({"resources": []}))
    }

    async fn list_resource_templates(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(serde_json::json!({"resourceTemplates": []}))
    }

    /// `resources/read`. A missing resource: legacy -32002, modern -32602 with `data.uri`
    /// (the core maps [`codes::RESOURCE_NOT_FOUND`] for the modern era).
    async fn read_resource(&self, ctx: &RequestContext, uri: &str) -> McpResult<Value>;

    /// Checks that `uri` may be subscribed; the core keeps the subscription itself.
    async fn check_subscribe(&self, _ctx: &RequestContext, uri: &str) -> McpResult<()> {
        Err(McpError::invalid_params(format!(
            "{uri} cannot be subscribed"
        )))
    }

    async fn list_prompts(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        Ok(serde_json::json!({"prompts": []}))
    }

    async fn get_prompt(
        &self,
        _ctx: &RequestContext,
        name: &str,
        _arguments: Value,
    ) -> McpResult<Value> {
        Err(McpError::invalid_params(format!("unknown prompt {name}")))
    }

    /// `completion/complete`.
    async fn complete(&self, _ctx: &RequestContext, _params: Value) -> McpResult<Value> {
        Ok(serde_json::json!({"completion": {"values": [], "hasMore": false}}))
    }

    /// Any other method (`skills/list`, `skills/get`, `resources/directory/read`, `run/*`).
    /// `None` means "not mine": the core answers -32601.
    async fn custom(
        &self,
        _ctx: &RequestContext,
        _method: &str,
        _params: Value,
    ) -> Option<McpResult<Value>> {
        None
    }

    /// A legacy session ended (DELETE, eviction, stdio EOF): drop per-session state.
    async fn session_closed(&self, _session_id: &str) {}
}
