//! The tool registry: the tools a handler serves, when each one is listed, to whom it is
//! visible, and which [`ToolHandler`] answers it.
//!
//! Rules, in the order a request meets them:
//! - **Listing.** A tool is listed [`Listing::Always`], or only to clients that declared a
//!   capability ([`Listing::WhenClientHas`], the path inside `capabilities`, from
//!   `initialize` or the request's `_meta`), or whose capability at a path is an array that
//!   contains a value ([`Listing::WhenClientLists`]), such as an MCP Apps panel launcher for
//!   clients whose `extensions["io.modelcontextprotocol/ui"].mimeTypes` contains
//!   `text/html;profile=mcp-app`.
//! - **Visibility** is the MCP Apps `_meta.ui.visibility` (`["model"]`, `["app"]`, or both,
//!   the spec's default, written as no field at all). The spec leaves it to the host to keep
//!   `["app"]` tools from the model, so only a host that declared MCP Apps can do that: an
//!   app-only tool is listed only to such clients, whatever its listing rule says.
//! - **Calls** follow the list: a client may call what it is offered (an app calls its
//!   app-only tools through its host, the spec's way). A tool held back from this client is
//!   refused with -32021 and `data.requiredCapabilities` in the 2026-07-28 era (-32602 in a
//!   legacy session, which has no such code); a name nobody registered is -32602.
//! - **Caching.** A list whose content depends on the client is never the same for everyone,
//!   so the core sends such a 2026-07-28 `tools/list` with `cacheScope: "private"`
//!   ([`ToolRegistry::varies_by_client`]); legacy results carry no caching fields at all
//!   (`docs/api.md`, "Tool listing and caching").
//!
//! - **Tasks.** A tool registered with a [`TaskSupport`] other than forbidden shows
//!   `execution.taskSupport` only to clients that speak tasks in their era, so the listing
//!   of every other client is unchanged; the core asks [`ToolRegistry::task_support`] when a
//!   call may become a task (`docs/tasks.md`).
//! - **Observers.** What a server learns from the answers of its tools (which runs a session
//!   named, which session created a task) it learns from the [`CallObserver`]s registered
//!   here, which the core tells of every answered call; no tool is wrapped for it.
//!
//! The list keeps registration order, so every client that is offered the same tools gets
//! them in the same order (2026-07-28 S6).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::answer::ToolAnswer;
use super::context::{McpError, McpResult, RequestContext, codes};
use super::observer::{AnsweredCall, CallObserver};
use super::tasks::{TaskSupport, client_speaks_tasks};

/// The MCP Apps extension's key under `capabilities.extensions`.
pub(crate) const APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The longest tool name MCP allows.
const MAX_NAME_CHARS: usize = 128;

/// When a tool appears in `tools/list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listing {
    Always,
    /// Only to clients whose declared capabilities contain this path, e.g.
    /// `["extensions", APPS_EXTENSION]`.
    WhenClientHas(Vec<String>),
    /// Only to clients whose declared capability at `path` is an array containing `value`,
    /// e.g. `["extensions", APPS_EXTENSION, "mimeTypes"]` containing [`APPS_MIME_TYPE`]:
    /// declaring the extension is not enough when the tool needs one of its content types.
    WhenClientLists {
        path: Vec<String>,
        value: String,
    },
}

/// The MCP Apps HTML content type (`text/html;profile=mcp-app`), which a client lists in
/// `extensions["io.modelcontextprotocol/ui"].mimeTypes` when it renders such views.
pub(crate) const APPS_MIME_TYPE: &str = "text/html;profile=mcp-app";

/// Whom the host shows a tool to (MCP Apps `_meta.ui.visibility`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Visibility {
    /// The model and the app: the spec's default, so nothing is written.
    #[default]
    ModelAndApp,
    /// `["model"]`: the model only.
    Model,
    /// `["app"]`: only an MCP Apps view calls it; never in the model's tool loop.
    App,
}

impl Visibility {
    /// The `_meta.ui.visibility` value, or `None` for the default.
    fn declared(self) -> Option<Value> {
        match self {
            Visibility::ModelAndApp => None,
            Visibility::Model => Some(json!(["model"])),
            Visibility::App => Some(json!(["app"])),
        }
    }
}

/// Answers `tools/call` for the tools registered with it. One handler may serve several
/// tools (a folder of workflows, one tool each), so it is told the name. The answer may carry
/// its JSON text already written ([`ToolAnswer::Prepared`], a kept answer); a plain result is
/// `Ok(value.into())`.
#[async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer>;
}

/// One tool to register: its `tools/list` definition, its listing rule, its visibility and
/// its handler.
pub struct Tool {
    /// The `tools/list` entry as given.
    definition: Value,
    listing: Listing,
    visibility: Visibility,
    /// Whether a call may become a task.
    task_support: TaskSupport,
    /// Answers `tools/call` for it.
    handler: Arc<dyn ToolHandler>,
}

impl Tool {
    /// A tool listed to every client and visible to model and app. `definition` is the
    /// `tools/list` entry (`name`, `inputSchema`, ...) without `_meta.ui.visibility`.
    pub fn new(definition: Value, handler: Arc<dyn ToolHandler>) -> Tool {
        Tool {
            definition,
            listing: Listing::Always,
            visibility: Visibility::ModelAndApp,
            task_support: TaskSupport::Forbidden,
            handler,
        }
    }

    /// Lets calls of the tool run as tasks (when the handler backs tasks).
    pub fn with_task_support(mut self, support: TaskSupport) -> Tool {
        self.task_support = support;
        self
    }

    pub fn listed(mut self, listing: Listing) -> Tool {
        self.listing = listing;
        self
    }

    /// Lists the tool only to clients that declared the capability at `path`.
    #[cfg(test)]
    pub(crate) fn listed_when_client_has(self, path: &[&str]) -> Tool {
        self.listed(Listing::WhenClientHas(
            path.iter().map(|key| (*key).to_owned()).collect(),
        ))
    }

    /// Lists the tool only to clients whose capability at `path` is an array containing
    /// `value`.
    #[cfg(test)]
    pub(crate) fn listed_when_client_lists(self, path: &[&str], value: &str) -> Tool {
        self.listed(Listing::WhenClientLists {
            path: path.iter().map(|key| (*key).to_owned()).collect(),
            value: value.to_owned(),
        })
    }

    pub(crate) fn visible_to(mut self, visibility: Visibility) -> Tool {
        self.visibility = visibility;
        self
    }
}

/// Why a tool cannot be registered.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a tool definition must be a JSON object with a string \"name\"")]
    MissingName,
    #[error(
        "tool name {0:?} must be 1 to {MAX_NAME_CHARS} characters from A-Z, a-z, 0-9, '_', '.' \
         and '-'"
    )]
    InvalidName(String),
    #[error("tool {0:?} is already registered")]
    Duplicate(String),
    #[error(
        "tool {0:?} sets _meta.ui.visibility in its definition; give it with Tool::visible_to, \
         which the listing rules read"
    )]
    VisibilityInDefinition(String),
}

/// A registered tool, ready to list.
struct Entry {
    name: String,
    /// The `tools/list` entry with `_meta.ui.visibility` written, built once.
    listed: Value,
    /// What the client must have declared to be offered the tool: the listing rule's, and
    /// MCP Apps for an app-only tool.
    requires: Vec<Requirement>,
    /// Whether `execution.taskSupport` is listed to clients that speak tasks.
    task_support: TaskSupport,
    handler: Arc<dyn ToolHandler>,
}

/// One capability a client must have declared: a path inside `capabilities`, and, when
/// `contains` is set, an array there holding that value.
struct Requirement {
    path: Vec<String>,
    contains: Option<String>,
}

impl Requirement {
    fn met_by(&self, ctx: &RequestContext) -> bool {
        let mut cursor = &ctx.client_capabilities;
        for key in &self.path {
            match cursor.get(key) {
                Some(next) => cursor = next,
                None => return false,
            }
        }
        match &self.contains {
            None => true,
            Some(value) => cursor
                .as_array()
                .is_some_and(|items| items.iter().any(|item| item.as_str() == Some(value))),
        }
    }
}

/// The tools of one handler, in registration order, and the observers of their answers.
#[derive(Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    observers: Vec<Arc<dyn CallObserver>>,
}

impl ToolRegistry {
    pub const fn new() -> ToolRegistry {
        ToolRegistry {
            entries: Vec::new(),
            observers: Vec::new(),
        }
    }

    /// Adds an observer the core tells of every successful `tools/call` answer, in
    /// registration order.
    pub fn observe(&mut self, observer: Arc<dyn CallObserver>) {
        self.observers.push(observer);
    }

    /// Tells every observer of an answered call.
    pub(super) fn tell(&self, call: &AnsweredCall<'_>) {
        for observer in &self.observers {
            observer.answered(call);
        }
    }

    /// Adds a tool at the end of the list.
    pub fn register(&mut self, tool: Tool) -> Result<(), RegistryError> {
        let Tool {
            mut definition,
            listing,
            visibility,
            task_support,
            handler,
        } = tool;
        let name = definition
            .get("name")
            .and_then(Value::as_str)
            .ok_or(RegistryError::MissingName)?
            .to_owned();
        if !valid_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.entries.iter().any(|entry| entry.name == name) {
            return Err(RegistryError::Duplicate(name));
        }
        if definition.pointer("/_meta/ui/visibility").is_some() {
            return Err(RegistryError::VisibilityInDefinition(name));
        }
        if let Some(declared) = visibility.declared() {
            write_visibility(&mut definition, declared);
        }
        let mut requires = Vec::new();
        match listing {
            Listing::Always => {}
            Listing::WhenClientHas(path) => requires.push(Requirement {
                path,
                contains: None,
            }),
            Listing::WhenClientLists { path, value } => requires.push(Requirement {
                path,
                contains: Some(value),
            }),
        }
        if visibility == Visibility::App {
            requires.push(Requirement {
                path: vec!["extensions".to_owned(), APPS_EXTENSION.to_owned()],
                contains: None,
            });
        }
        self.entries.push(Entry {
            name,
            listed: definition,
            requires,
            task_support,
            handler,
        });
        Ok(())
    }

    /// Whether `tools/list` depends on the client's capabilities.
    pub(crate) fn varies_by_client(&self) -> bool {
        self.entries.iter().any(|entry| !entry.requires.is_empty())
    }

    /// The `tools/list` result for this client: `{tools: [...]}`.
    pub fn list(&self, ctx: &RequestContext) -> Value {
        let speaks_tasks = client_speaks_tasks(ctx);
        let tools: Vec<Value> = self
            .entries
            .iter()
            .filter(|entry| entry.missing(ctx).is_none())
            .map(|entry| {
                let mut listed = entry.listed.clone();
                if speaks_tasks && entry.task_support != TaskSupport::Forbidden {
                    listed["execution"] = json!({"taskSupport": entry.task_support.as_str()});
                }
                listed
            })
            .collect();
        json!({"tools": tools})
    }

    /// How a registered tool runs as a task for this client; `None` for a name nobody
    /// registered. A tool held back from the client never becomes a task, so its call meets
    /// the registry's refusal.
    pub(crate) fn task_support(&self, ctx: &RequestContext, name: &str) -> Option<TaskSupport> {
        let entry = self.entries.iter().find(|entry| entry.name == name)?;
        if entry.missing(ctx).is_some() {
            return Some(TaskSupport::Forbidden);
        }
        Some(entry.task_support)
    }

    /// `tools/call`: the tool's handler, if this client is offered the tool, with its answer
    /// as it gave it. Observers are not told here: the core tells them once the call is
    /// answered, whichever way it went (a plain call or a task).
    pub async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let Some(entry) = self.entries.iter().find(|entry| entry.name == name) else {
            return Err(McpError::invalid_params(format!(
                "unknown tool {name:?}; {}",
                self.offer(ctx)
            )));
        };
        if let Some(requirement) = entry.missing(ctx) {
            return Err(held_back(ctx, name, requirement));
        }
        entry.handler.call(ctx, name, arguments).await
    }

    /// The tools this client is offered, as an unknown-tool error names them.
    fn offer(&self, ctx: &RequestContext) -> String {
        let names: Vec<String> = self
            .entries
            .iter()
            .filter(|entry| entry.missing(ctx).is_none())
            .map(|entry| format!("{:?}", entry.name))
            .collect();
        match names.as_slice() {
            [] => "this server offers no tools".to_owned(),
            [only] => format!("this server has one tool, {only}"),
            many => format!("this server's tools are {}", many.join(", ")),
        }
    }
}

impl Entry {
    /// The first requirement this client did not meet, if any.
    fn missing(&self, ctx: &RequestContext) -> Option<&Requirement> {
        self.requires
            .iter()
            .find(|requirement| !requirement.met_by(ctx))
    }
}

/// Tool names: 1 to 128 characters from `[A-Za-z0-9_.-]` (MCP 2025-11-25).
fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
}

fn write_visibility(definition: &mut Value, visibility: Value) {
    let Value::Object(tool) = definition else {
        return;
    };
    let meta = tool
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let ui = &mut meta["ui"];
    if !ui.is_object() {
        *ui = Value::Object(Map::new());
    }
    ui["visibility"] = visibility;
}

/// The refusal of a registered tool this client is not offered.
fn held_back(ctx: &RequestContext, name: &str, requirement: &Requirement) -> McpError {
    let path = &requirement.path;
    let mut described = String::new();
    let mut required = match &requirement.contains {
        Some(value) => json!([value]),
        None => json!({}),
    };
    for key in path.iter().rev() {
        required = json!({key: required});
    }
    for (index, key) in path.iter().enumerate() {
        if index == 0 {
            described.push_str(key);
        } else {
            described.push_str(&format!("[{key:?}]"));
        }
    }
    if let Some(value) = &requirement.contains {
        described.push_str(&format!(" containing {value:?}"));
    }
    let message =
        format!("tool {name:?} is offered only to clients that declare capabilities.{described}");
    let code = if ctx.era.is_modern() {
        codes::MISSING_CAPABILITY
    } else {
        codes::INVALID_PARAMS
    };
    McpError::new(code, message).with_data(json!({"requiredCapabilities": required}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::handler::{McpHandler, NotificationHub, ServerInfo};
    use crate::mcp::server::{
        CacheScope, McpServer, ServerOptions, TransportContext, TransportKind,
    };

    /// Answers every tool with its own name.
    struct Echo;

    #[async_trait]
    impl ToolHandler for Echo {
        async fn call(
            &self,
            _ctx: &RequestContext,
            name: &str,
            _arguments: &Value,
        ) -> McpResult<ToolAnswer> {
            Ok(json!({"content": [{"type": "text", "text": name}]}).into())
        }
    }

    struct Handler {
        hub: NotificationHub,
        tools: ToolRegistry,
    }

    #[async_trait]
    impl McpHandler for Handler {
        fn server_info(&self) -> ServerInfo {
            ServerInfo {
                name: "registry-test".into(),
                version: "1.0.0".into(),
                title: None,
            }
        }

        fn capabilities(&self) -> Value {
            json!({"tools": {"listChanged": false}})
        }

        fn hub(&self) -> &NotificationHub {
            &self.hub
        }

        fn tools(&self) -> &ToolRegistry {
            &self.tools
        }

        async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
            Err(McpError::invalid_params(format!("no resource {uri}")))
        }
    }

    fn tool(name: &str) -> Tool {
        Tool::new(
            json!({"name": name, "inputSchema": {"type": "object"}}),
            Arc::new(Echo),
        )
    }

    /// `always` for everyone, `panel` for MCP Apps clients, `feed` app-only. The server's
    /// own cache scope is public, so a private one can only come from the registry.
    fn server(gated: bool) -> McpServer {
        let mut tools = ToolRegistry::new();
        tools.register(tool("always")).unwrap();
        if gated {
            tools
                .register(tool("panel").listed_when_client_has(&["extensions", APPS_EXTENSION]))
                .unwrap();
            tools
                .register(tool("feed").visible_to(Visibility::App))
                .unwrap();
        }
        let handler = Arc::new(Handler {
            hub: NotificationHub::new(),
            tools,
        });
        let options = ServerOptions {
            cache_ttl_ms: 0,
            cache_scope: CacheScope::Public,
        };
        McpServer::new(handler, options)
    }

    fn apps() -> Value {
        json!({"extensions": {APPS_EXTENSION: {"mimeTypes": ["text/html;profile=mcp-app"]}}})
    }

    fn context(session: Option<&str>) -> TransportContext {
        let mut context = TransportContext::new(TransportKind::Stdio, "registry-test");
        context.session_id = session.map(str::to_owned);
        context
    }

    /// A stateless request: `(HTTP status, response)`.
    async fn modern(
        server: &McpServer,
        capabilities: Value,
        method: &str,
        params: Value,
    ) -> (u16, Value) {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let outcome = server
            .handle_bytes(body.to_string().as_bytes(), context(None))
            .await;
        (outcome.status, outcome.response.expect("a response"))
    }

    async fn initialize(server: &McpServer, capabilities: Value) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
        }});
        let outcome = server
            .handle_bytes(body.to_string().as_bytes(), context(None))
            .await;
        outcome.new_session.expect("a session")
    }

    async fn legacy(server: &McpServer, session: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let outcome = server
            .handle_bytes(body.to_string().as_bytes(), context(Some(session)))
            .await;
        outcome.response.expect("a response")
    }

    fn names(response: &Value) -> Vec<&str> {
        response["result"]["tools"]
            .as_array()
            .expect("a tool list")
            .iter()
            .map(|tool| tool["name"].as_str().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn gated_tools_are_listed_only_to_the_declaring_client_and_privately() {
        let server = server(true);
        let (_, plain) = modern(&server, json!({}), "tools/list", json!({})).await;
        assert_eq!(names(&plain), ["always"]);
        assert_eq!(plain["result"]["cacheScope"], "private");
        let (_, with_apps) = modern(&server, apps(), "tools/list", json!({})).await;
        assert_eq!(names(&with_apps), ["always", "panel", "feed"]);
        assert_eq!(with_apps["result"]["cacheScope"], "private");

        let without = initialize(&server, json!({})).await;
        let listed = legacy(&server, &without, "tools/list", json!({})).await;
        assert_eq!(names(&listed), ["always"]);
        assert!(listed["result"].get("cacheScope").is_none(), "{listed}");
        let with = initialize(&server, apps()).await;
        let listed = legacy(&server, &with, "tools/list", json!({})).await;
        assert_eq!(names(&listed), ["always", "panel", "feed"]);
        assert!(listed["result"].get("cacheScope").is_none(), "{listed}");
    }

    #[tokio::test]
    async fn a_list_that_is_the_same_for_everyone_keeps_the_server_scope() {
        let server = server(false);
        let (_, listed) = modern(&server, apps(), "tools/list", json!({})).await;
        assert_eq!(names(&listed), ["always"]);
        assert_eq!(listed["result"]["cacheScope"], "public");
        assert!(listed["result"]["tools"][0].get("_meta").is_none());
    }

    #[tokio::test]
    async fn app_only_tools_carry_their_visibility_and_answer_the_app() {
        let server = server(true);
        let (_, listed) = modern(&server, apps(), "tools/list", json!({})).await;
        let tools = listed["result"]["tools"].as_array().unwrap();
        assert_eq!(tools[2]["_meta"], json!({"ui": {"visibility": ["app"]}}));
        assert!(
            tools[0].get("_meta").is_none(),
            "the default visibility is not written"
        );
        assert!(tools[1].get("_meta").is_none());

        let (status, called) = modern(&server, apps(), "tools/call", json!({"name": "feed"})).await;
        assert_eq!(status, 200);
        assert_eq!(called["result"]["content"][0]["text"], "feed");
        let session = initialize(&server, apps()).await;
        let called = legacy(&server, &session, "tools/call", json!({"name": "panel"})).await;
        assert_eq!(called["result"]["content"][0]["text"], "panel");
    }

    #[tokio::test]
    async fn a_held_back_tool_names_the_capability_it_needs() {
        let server = server(true);
        let (status, refused) =
            modern(&server, json!({}), "tools/call", json!({"name": "feed"})).await;
        assert_eq!(status, 400);
        assert_eq!(refused["error"]["code"], codes::MISSING_CAPABILITY);
        assert_eq!(
            refused["error"]["data"],
            json!({"requiredCapabilities": {"extensions": {APPS_EXTENSION: {}}}})
        );
        assert_eq!(
            refused["error"]["message"],
            "tool \"feed\" is offered only to clients that declare \
             capabilities.extensions[\"io.modelcontextprotocol/ui\"]"
        );
        let session = initialize(&server, json!({})).await;
        let refused = legacy(&server, &session, "tools/call", json!({"name": "panel"})).await;
        assert_eq!(refused["error"]["code"], codes::INVALID_PARAMS);

        let unknown = legacy(&server, &session, "tools/call", json!({"name": "nope"})).await;
        assert_eq!(
            unknown["error"]["message"],
            "unknown tool \"nope\"; this server has one tool, \"always\""
        );
    }

    /// "mimeTypes contains": the extension alone, or another mime type, is not enough, in
    /// either era; the refusal names the value it needs.
    #[tokio::test]
    async fn a_listing_may_need_a_value_in_a_declared_array() {
        let path = ["extensions", APPS_EXTENSION, "mimeTypes"];
        let mut tools = ToolRegistry::new();
        tools.register(tool("always")).unwrap();
        tools
            .register(tool("html").listed_when_client_lists(&path, APPS_MIME_TYPE))
            .unwrap();
        assert!(tools.varies_by_client());
        let server = McpServer::new(
            Arc::new(Handler {
                hub: NotificationHub::new(),
                tools,
            }),
            ServerOptions::default(),
        );
        let declared = |types: Value| json!({"extensions": {APPS_EXTENSION: {"mimeTypes": types}}});
        for (capabilities, listed) in [
            (json!({}), false),
            (json!({"extensions": {APPS_EXTENSION: {}}}), false),
            (declared(json!(["text/html"])), false),
            (declared(json!("text/html;profile=mcp-app")), false),
            (declared(json!(["text/html", APPS_MIME_TYPE])), true),
        ] {
            let expected: &[&str] = if listed {
                &["always", "html"]
            } else {
                &["always"]
            };
            let (_, modern_list) =
                modern(&server, capabilities.clone(), "tools/list", json!({})).await;
            assert_eq!(names(&modern_list), expected, "{capabilities}");
            let session = initialize(&server, capabilities.clone()).await;
            let legacy_list = legacy(&server, &session, "tools/list", json!({})).await;
            assert_eq!(names(&legacy_list), expected, "{capabilities}");
        }
        let (status, refused) = modern(
            &server,
            declared(json!(["text/html"])),
            "tools/call",
            json!({"name": "html"}),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(
            refused["error"]["data"],
            json!({"requiredCapabilities": {"extensions": {APPS_EXTENSION: {"mimeTypes": [APPS_MIME_TYPE]}}}})
        );
        assert_eq!(
            refused["error"]["message"],
            "tool \"html\" is offered only to clients that declare \
             capabilities.extensions[\"io.modelcontextprotocol/ui\"][\"mimeTypes\"] containing \
             \"text/html;profile=mcp-app\""
        );
    }

    #[test]
    fn registration_refuses_bad_names_duplicates_and_hand_written_visibility() {
        let mut tools = ToolRegistry::new();
        tools.register(tool("a.b-c_1")).unwrap();
        assert_eq!(
            tools.register(tool("a.b-c_1")),
            Err(RegistryError::Duplicate("a.b-c_1".into()))
        );
        assert_eq!(
            tools.register(tool("has space")),
            Err(RegistryError::InvalidName("has space".into()))
        );
        assert_eq!(
            tools.register(tool(&"x".repeat(129))),
            Err(RegistryError::InvalidName("x".repeat(129)))
        );
        let nameless = Tool::new(json!({"inputSchema": {}}), Arc::new(Echo));
        assert_eq!(tools.register(nameless), Err(RegistryError::MissingName));
        let written = Tool::new(
            json!({"name": "w", "_meta": {"ui": {"visibility": ["app"]}}}),
            Arc::new(Echo),
        );
        assert_eq!(
            tools.register(written),
            Err(RegistryError::VisibilityInDefinition("w".into()))
        );
        assert!(!tools.varies_by_client());
    }
}
