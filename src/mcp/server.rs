//! The MCP core: one `McpServer` that every transport hands its messages to.
//!
//! Why this is written by hand on serde_json (and hyper in the transport) instead of taking the
//! official Rust SDK: the daemon this core serves needs to reach underneath the protocol. It
//! must answer with lame-duck responses (503 plus a header) before any dispatch, move legacy
//! sessions between processes, route its own `run/*` and `skills/*` methods next to the
//! standard ones, and see raw JSON-RPC ids, `_meta` and headers to apply the 2026-07-28
//! checks. An SDK that owns the session table, the HTTP handler and the dispatch table leaves
//! each of these as a workaround, and its API moves quickly; the protocol itself is small and
//! specified, so owning it costs a few files and keeps every answer under our control.
//!
//! The core validates a message, decides its era (a request whose `params._meta` carries a
//! protocol version is modern and stateless; `initialize` starts a legacy session), dispatches
//! it to the [`McpHandler`], shapes the result for the era, and tells the transport which HTTP
//! status fits. Notifications a request emits while it runs go to the transport's channel
//! as they happen; server-wide changes reach sessions through [`SessionEvents`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::handler::{
    Era, McpError, McpHandler, McpResult, Notification, RequestContext, RequestNotifier,
    ServerEvent, codes,
};
use super::jsonrpc::{self, Message, Request};
use super::session::{Session, SessionActivity};

/// Legacy versions we negotiate in `initialize`, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Versions accepted in a stateless request's `_meta`.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
/// What an `initialize` with an unknown version gets.
pub const LATEST_LEGACY_VERSION: &str = "2025-11-25";
/// What a legacy HTTP request without `MCP-Protocol-Version` is assumed to speak.
pub const DEFAULT_LEGACY_VERSION: &str = "2025-03-26";

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Methods the 2026-07-28 revision removed; stateless requests for them get 404/-32601.
const MODERN_REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Knobs of the core that are not the handler's business.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// `ttlMs` on modern cacheable results (lists, templates, reads, discover).
    pub cache_ttl_ms: u64,
    /// `cacheScope` on modern cacheable results.
    pub cache_scope: CacheScope,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            cache_ttl_ms: 0,
            cache_scope: CacheScope::Private,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    Http,
    Stdio,
}

/// What the transport knows about a message besides its body.
#[derive(Clone, Debug)]
pub struct TransportContext {
    pub transport: TransportKind,
    /// The legacy session the message belongs to: the `Mcp-Session-Id` header, or the stdio
    /// connection's session once it initialized.
    pub session_id: Option<String>,
    /// Scopes `notifications/cancelled` when there is no session (one per stdio connection).
    pub connection_id: String,
    /// Where notifications related to the request go while it runs.
    pub notifications: Option<mpsc::UnboundedSender<Value>>,
    /// Fired by the transport when the request's caller is gone (a closed stateless stream,
    /// stdio EOF); the request's own token is cancelled with it.
    pub cancel: CancellationToken,
}

impl TransportContext {
    pub fn new(transport: TransportKind, connection_id: impl Into<String>) -> TransportContext {
        TransportContext {
            transport,
            session_id: None,
            connection_id: connection_id.into(),
            notifications: None,
            cancel: CancellationToken::new(),
        }
    }
}

/// What came of one message.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The JSON-RPC response, or `None` for notifications and client responses.
    pub response: Option<Value>,
    /// The HTTP status that fits (200, 202, 400, 404).
    pub status: u16,
    /// Set when `initialize` created a legacy session.
    pub new_session: Option<String>,
}

impl Outcome {
    fn accepted() -> Outcome {
        Outcome {
            response: None,
            status: 202,
            new_session: None,
        }
    }
}

/// The era a request's `_meta` asks for, before any dispatch.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestEra {
    /// No protocol fields in `_meta`.
    Unstated,
    /// A valid stateless request.
    Modern {
        version: String,
        client_capabilities: Value,
        client_info: Option<Value>,
    },
    /// Protocol fields present but unusable; the error and the HTTP status to send.
    Invalid { error: McpError, status: u16 },
}

/// Reads the per-request protocol fields of `params._meta`.
pub fn request_era(params: &Value) -> RequestEra {
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return RequestEra::Unstated;
    };
    let version = meta.get(META_PROTOCOL_VERSION);
    let capabilities = meta.get(META_CLIENT_CAPABILITIES);
    if version.is_none() && capabilities.is_none() {
        return RequestEra::Unstated;
    }
    let Some(version) = version.and_then(Value::as_str) else {
        return RequestEra::Invalid {
            error: McpError::invalid_params(format!(
                "_meta needs {META_PROTOCOL_VERSION} as a string"
            )),
            status: 400,
        };
    };
    if !MODERN_VERSIONS.contains(&version) {
        return RequestEra::Invalid {
            error: unsupported_version(version),
            status: 400,
        };
    }
    let Some(capabilities @ Value::Object(_)) = capabilities else {
        return RequestEra::Invalid {
            error: McpError::invalid_params(format!(
                "_meta needs {META_CLIENT_CAPABILITIES} as an object"
            )),
            status: 400,
        };
    };
    RequestEra::Modern {
        version: version.to_owned(),
        client_capabilities: capabilities.clone(),
        client_info: meta.get(META_CLIENT_INFO).cloned(),
    }
}

pub fn unsupported_version(requested: &str) -> McpError {
    McpError::new(
        codes::UNSUPPORTED_VERSION,
        format!("unsupported protocol version {requested}"),
    )
    .with_data(json!({"supported": MODERN_VERSIONS, "requested": requested}))
}

pub struct McpServer {
    handler: Arc<dyn McpHandler>,
    options: ServerOptions,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// In-flight requests by (scope, id key), for `notifications/cancelled`.
    inflight: Mutex<HashMap<(String, String), Inflight>>,
    /// Cancels every request and closes every session stream.
    shutdown: CancellationToken,
}

impl McpServer {
    pub fn new(handler: Arc<dyn McpHandler>, options: ServerOptions) -> McpServer {
        McpServer {
            handler,
            options,
            sessions: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
        }
    }

    pub fn handler(&self) -> &Arc<dyn McpHandler> {
        &self.handler
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Cancelled when [`McpServer::shutdown`] is called.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Cancels every in-flight request and ends every session's streams.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// The handler's capabilities plus what the core itself serves (`logging`).
    pub fn capabilities(&self) -> Value {
        let mut capabilities = self.handler.capabilities();
        if let Value::Object(map) = &mut capabilities {
            map.entry("logging").or_insert_with(|| json!({}));
        }
        capabilities
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .expect("sessions lock")
            .get(id)
            .cloned()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.lock().expect("sessions lock").len()
    }

    /// Requests being handled right now, with or without a session (the daemon's idle
    /// check counts them).
    pub fn inflight_count(&self) -> usize {
        self.inflight.lock().expect("inflight lock").len()
    }

    /// Every session's activity, for the daemon's idle reaper.
    pub fn session_activity(&self) -> Vec<(String, SessionActivity)> {
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .iter()
            .map(|(id, session)| (id.clone(), session.activity()))
            .collect()
    }

    /// Ends a session as DELETE does: its streams close, later requests with its id get 404.
    /// Returns whether it existed.
    pub async fn evict_session(&self, id: &str) -> bool {
        let removed = self.sessions.lock().expect("sessions lock").remove(id);
        let Some(session) = removed else {
            return false;
        };
        session.closed.cancel();
        self.handler.session_closed(id).await;
        true
    }

    /// Server-wide changes as seen by one session, or `None` for an unknown session.
    pub fn session_events(&self, id: &str) -> Option<SessionEvents> {
        let session = self.session(id)?;
        Some(SessionEvents {
            receiver: self.handler.hub().subscribe(),
            session,
            shutdown: self.shutdown.clone(),
        })
    }

    /// Handles one message; the single entry point of every transport.
    pub async fn handle(&self, message: Message, transport: TransportContext) -> Outcome {
        match message {
            Message::Response(_) => Outcome::accepted(),
            Message::Notification(notification) => {
                self.handle_notification(&notification.method, &notification.params, &transport);
                Outcome::accepted()
            }
            Message::Request(request) => self.handle_request(request, transport).await,
        }
    }

    /// Parses raw bytes and handles them; a parse failure becomes its error response.
    pub async fn handle_bytes(&self, bytes: &[u8], transport: TransportContext) -> Outcome {
        match jsonrpc::parse(bytes) {
            Ok(message) => self.handle(message, transport).await,
            Err(rejected) => Outcome {
                response: Some(rejected.to_response()),
                status: 400,
                new_session: None,
            },
        }
    }

    fn handle_notification(&self, method: &str, params: &Value, transport: &TransportContext) {
        match method {
            "notifications/initialized" => {
                if let Some(session) = transport
                    .session_id
                    .as_deref()
                    .and_then(|id| self.session(id))
                {
                    session
                        .initialized
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    session.touch();
                }
            }
            "notifications/cancelled" => {
                if let Some(id) = params.get("requestId") {
                    let key = (cancel_scope(transport), jsonrpc::id_key(id));
                    if let Some(inflight) = self.inflight.lock().expect("inflight lock").get(&key) {
                        inflight
                            .by_client
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        inflight.token.cancel();
                    }
                }
            }
            _ => {}
        }
    }

    async fn handle_request(&self, request: Request, transport: TransportContext) -> Outcome {
        let id = request.id.clone();
        let fail = |error: McpError, status: u16| Outcome {
            response: Some(jsonrpc::error_response(&id, &error)),
            status,
            new_session: None,
        };
        let (era, client_capabilities, client_info, session) = match request_era(&request.params) {
            RequestEra::Invalid { error, status } => return fail(error, status),
            RequestEra::Modern {
                version,
                client_capabilities,
                client_info,
            } => (
                Era::Modern { version },
                client_capabilities,
                client_info,
                None,
            ),
            RequestEra::Unstated if request.method == "initialize" => {
                return self.initialize(&request, &transport);
            }
            RequestEra::Unstated => match transport.session_id.as_deref() {
                Some(session_id) => match self.session(session_id) {
                    Some(session) => (
                        Era::Legacy {
                            version: session.version.clone(),
                        },
                        session.client_capabilities.clone(),
                        session.client_info.clone(),
                        Some(session),
                    ),
                    None => {
                        return fail(McpError::new(-32001, "session not found"), 404);
                    }
                },
                None => {
                    return fail(
                        McpError::invalid_params(format!(
                            "a request needs params._meta with {META_PROTOCOL_VERSION} and \
                             {META_CLIENT_CAPABILITIES}, or a session from initialize"
                        )),
                        400,
                    );
                }
            },
        };
        if era.is_modern() && MODERN_REMOVED.contains(&request.method.as_str()) {
            return fail(McpError::method_not_found(&request.method), 404);
        }
        if let Some(session) = &session {
            session.touch();
        }
        let _request_guard = session.as_ref().map(|session| session.request());

        let token = self.shutdown.child_token();
        let key = (cancel_scope(&transport), jsonrpc::id_key(&id));
        let cancelled_by_client = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.inflight.lock().expect("inflight lock").insert(
            key.clone(),
            Inflight {
                token: token.clone(),
                by_client: cancelled_by_client.clone(),
            },
        );
        let (sender, mut receiver) = mpsc::unbounded_channel::<Notification>();
        let log_meta = request
            .params
            .get("_meta")
            .and_then(|meta| meta.get(META_LOG_LEVEL))
            .is_some();
        let context = RequestContext {
            era: era.clone(),
            session_id: session.as_ref().map(|session| session.id.clone()),
            request_id: id.clone(),
            method: request.method.clone(),
            client_capabilities,
            client_info,
            progress_token: request
                .params
                .get("_meta")
                .and_then(|meta| meta.get("progressToken"))
                .cloned(),
            meta: request.params.get("_meta").cloned().unwrap_or(Value::Null),
            cancel: token.clone(),
            notifier: RequestNotifier::new(sender),
        };
        let forward = |notification: Notification| {
            if notification.method == "notifications/message" {
                let allowed = match (&era, &session) {
                    (Era::Modern { .. }, _) => log_meta,
                    (Era::Legacy { .. }, Some(session)) => {
                        let minimum = session.log_level.lock().expect("log level lock").clone();
                        level_allows(
                            minimum.as_deref(),
                            notification.params.get("level").and_then(Value::as_str),
                        )
                    }
                    (Era::Legacy { .. }, None) => true,
                };
                if !allowed {
                    return;
                }
            }
            if let Some(out) = &transport.notifications {
                let _ = out.send(jsonrpc::notification(
                    &notification.method,
                    notification.params,
                ));
            }
        };

        let dispatch = self.dispatch(&context, &request, session.as_ref());
        tokio::pin!(dispatch);
        let result = loop {
            tokio::select! {
                result = &mut dispatch => break result,
                Some(notification) = receiver.recv() => forward(notification),
                () = transport.cancel.cancelled(), if !token.is_cancelled() => token.cancel(),
            }
        };
        while let Ok(notification) = receiver.try_recv() {
            forward(notification);
        }
        self.inflight.lock().expect("inflight lock").remove(&key);
        // The client said it no longer wants an answer (`notifications/cancelled`): it gets
        // none, whatever the handler made of the cancellation.
        if cancelled_by_client.load(std::sync::atomic::Ordering::Relaxed) {
            return Outcome::accepted();
        }

        match result {
            Ok(result) => {
                let result = match &era {
                    Era::Modern { .. } => self.shape_modern(&request.method, result),
                    Era::Legacy { version } if request.method == "tools/call" => {
                        without_links_before_2025_06_18(version, result)
                    }
                    Era::Legacy { .. } => result,
                };
                Outcome {
                    response: Some(jsonrpc::success_response(&id, result)),
                    status: 200,
                    new_session: None,
                }
            }
            Err(error) => {
                let error = if era.is_modern() && error.code == codes::RESOURCE_NOT_FOUND {
                    let uri = request.params.get("uri").cloned().unwrap_or(Value::Null);
                    McpError::invalid_params(error.message).with_data(json!({"uri": uri}))
                } else {
                    error
                };
                let status = if era.is_modern() {
                    modern_error_status(error.code)
                } else {
                    200
                };
                fail(error, status)
            }
        }
    }

    fn initialize(&self, request: &Request, transport: &TransportContext) -> Outcome {
        let params = &request.params;
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = match requested {
            Some(version) if LEGACY_VERSIONS.contains(&version) => version,
            _ => LATEST_LEGACY_VERSION,
        };
        let capabilities = params
            .get("capabilities")
            .filter(|c| c.is_object())
            .cloned()
            .unwrap_or_else(|| json!({}));
        let client_info = params.get("clientInfo").cloned();
        let session_id = new_session_id();
        let session = Arc::new(Session::new(
            session_id.clone(),
            version.to_owned(),
            capabilities,
            client_info,
        ));
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(session_id.clone(), session);
        let _ = transport;
        let info = self.handler.server_info();
        let mut server_info = json!({"name": info.name, "version": info.version});
        if let Some(title) = info.title {
            server_info["title"] = title.into();
        }
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": server_info,
        });
        if let Some(instructions) = self.handler.instructions() {
            result["instructions"] = instructions.into();
        }
        Outcome {
            response: Some(jsonrpc::success_response(&request.id, result)),
            status: 200,
            new_session: Some(session_id),
        }
    }

    async fn dispatch(
        &self,
        ctx: &RequestContext,
        request: &Request,
        session: Option<&Arc<Session>>,
    ) -> McpResult<Value> {
        let params = &request.params;
        let method = request.method.as_str();
        let capabilities = self.capabilities();
        let declared = |name: &str| capabilities.get(name).is_some_and(|c| !c.is_null());
        let require = |name: &str| {
            if declared(name) {
                Ok(())
            } else {
                Err(McpError::method_not_found(method))
            }
        };
        let handler = &self.handler;
        match method {
            "ping" => Ok(json!({})),
            "server/discover" => Ok(self.discover()),
            "logging/setLevel" => {
                let level = string_param(params, "level")?;
                if let Some(session) = session {
                    *session.log_level.lock().expect("log level lock") = Some(level.to_owned());
                }
                Ok(json!({}))
            }
            "tools/list" => {
                require("tools")?;
                handler.list_tools(ctx, cursor_param(params)?).await
            }
            "tools/call" => {
                require("tools")?;
                let name = string_param(params, "name")?;
                let arguments = match params.get("arguments") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(arguments @ Value::Object(_)) => arguments.clone(),
                    Some(_) => return Err(McpError::invalid_params("arguments must be an object")),
                };
                handler.call_tool(ctx, name, arguments).await
            }
            "resources/list" => {
                require("resources")?;
                handler.list_resources(ctx, cursor_param(params)?).await
            }
            "resources/templates/list" => {
                require("resources")?;
                handler
                    .list_resource_templates(ctx, cursor_param(params)?)
                    .await
            }
            "resources/read" => {
                require("resources")?;
                handler
                    .read_resource(ctx, string_param(params, "uri")?)
                    .await
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let subscribable = capabilities
                    .pointer("/resources/subscribe")
                    .and_then(Value::as_bool)
                    == Some(true);
                if !subscribable {
                    return Err(McpError::method_not_found(method));
                }
                let uri = string_param(params, "uri")?;
                let Some(session) = session else {
                    return Err(McpError::method_not_found(method));
                };
                if method == "resources/subscribe" {
                    handler.check_subscribe(ctx, uri).await?;
                    session
                        .subscriptions
                        .lock()
                        .expect("subscriptions lock")
                        .insert(uri.to_owned());
                } else {
                    session
                        .subscriptions
                        .lock()
                        .expect("subscriptions lock")
                        .remove(uri);
                }
                Ok(json!({}))
            }
            "prompts/list" => {
                require("prompts")?;
                handler.list_prompts(ctx, cursor_param(params)?).await
            }
            "prompts/get" => {
                require("prompts")?;
                let name = string_param(params, "name")?;
                let arguments = match params.get("arguments") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(Value::Object(arguments)) if arguments.values().all(Value::is_string) => {
                        Value::Object(arguments.clone())
                    }
                    Some(_) => {
                        return Err(McpError::invalid_params(
                            "arguments must be an object of strings",
                        ));
                    }
                };
                handler.get_prompt(ctx, name, arguments).await
            }
            "completion/complete" => {
                require("completions")?;
                if !params.get("ref").is_some_and(Value::is_object)
                    || !params.get("argument").is_some_and(Value::is_object)
                {
                    return Err(McpError::invalid_params(
                        "completion/complete needs ref and argument objects",
                    ));
                }
                handler.complete(ctx, params.clone()).await
            }
            "subscriptions/listen" if ctx.era.is_modern() => {
                self.listen(ctx, params, &capabilities).await
            }
            _ => match handler.custom(ctx, method, params.clone()).await {
                Some(result) => result,
                None => Err(McpError::method_not_found(method)),
            },
        }
    }

    /// The `server/discover` result (S4), before era shaping.
    pub fn discover(&self) -> Value {
        let info = self.handler.server_info();
        let mut server_info = json!({"name": info.name, "version": info.version});
        if let Some(title) = info.title {
            server_info["title"] = title.into();
        }
        let supported: Vec<&str> = MODERN_VERSIONS
            .iter()
            .chain(LEGACY_VERSIONS)
            .copied()
            .collect();
        let mut result = json!({
            "supportedVersions": supported,
            "capabilities": self.capabilities(),
            "_meta": {META_SERVER_INFO: server_info},
        });
        if let Some(instructions) = self.handler.instructions() {
            result["instructions"] = instructions.into();
        }
        result
    }

    /// `subscriptions/listen` (S9): acknowledge, forward matching changes tagged with the
    /// listen request's id, end with a complete result when cancelled.
    async fn listen(
        &self,
        ctx: &RequestContext,
        params: &Value,
        capabilities: &Value,
    ) -> McpResult<Value> {
        let requested = params
            .get("notifications")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if !requested.is_object() {
            return Err(McpError::invalid_params("notifications must be an object"));
        }
        let wants = |key: &str, capability: &str| {
            requested.get(key).and_then(Value::as_bool) == Some(true)
                && capabilities.get(capability).is_some_and(|c| !c.is_null())
        };
        let tools = wants("toolsListChanged", "tools");
        let prompts = wants("promptsListChanged", "prompts");
        let resources = wants("resourcesListChanged", "resources");
        // Only URIs the handler would let a legacy session subscribe to are honoured; the
        // acknowledgement leaves the others out, so the client sees at once which of its
        // subscriptions will never fire (a query URI, an unknown run).
        let mut subscriptions: Vec<String> = Vec::new();
        if capabilities.get("resources").is_some_and(|c| !c.is_null()) {
            let uris = requested
                .get("resourceSubscriptions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for uri in uris.iter().filter_map(Value::as_str) {
                if !subscriptions.iter().any(|known| known == uri)
                    && self.handler.check_subscribe(ctx, uri).await.is_ok()
                {
                    subscriptions.push(uri.to_owned());
                }
            }
        }
        let mut honoured = Map::new();
        if tools {
            honoured.insert("toolsListChanged".into(), true.into());
        }
        if prompts {
            honoured.insert("promptsListChanged".into(), true.into());
        }
        if resources {
            honoured.insert("resourcesListChanged".into(), true.into());
        }
        if !subscriptions.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(subscriptions));
        }
        let tag = json!({META_SUBSCRIPTION_ID: ctx.request_id});
        let mut receiver = self.handler.hub().subscribe();
        ctx.notifier.notify(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": tag, "notifications": Value::Object(honoured)}),
        );
        loop {
            let event = tokio::select! {
                () = ctx.cancel.cancelled() => break,
                event = receiver.recv() => event,
            };
            let (method, mut params) = match event {
                Ok(ServerEvent::ToolsListChanged) if tools => {
                    ("notifications/tools/list_changed", json!({}))
                }
                Ok(ServerEvent::PromptsListChanged) if prompts => {
                    ("notifications/prompts/list_changed", json!({}))
                }
                Ok(ServerEvent::ResourcesListChanged) if resources => {
                    ("notifications/resources/list_changed", json!({}))
                }
                Ok(ServerEvent::ResourceUpdated { uri }) if subscriptions.contains(&uri) => {
                    ("notifications/resources/updated", json!({"uri": uri}))
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            params["_meta"] = tag.clone();
            ctx.notifier.notify(method, params);
        }
        Ok(json!({"_meta": tag}))
    }

    /// Adds `resultType` and, for cacheable results, `ttlMs`/`cacheScope`.
    fn shape_modern(&self, method: &str, mut result: Value) -> Value {
        let Value::Object(map) = &mut result else {
            return result;
        };
        map.entry("resultType").or_insert_with(|| "complete".into());
        let cacheable = matches!(
            method,
            "tools/list"
                | "resources/list"
                | "resources/templates/list"
                | "prompts/list"
                | "resources/read"
                | "resources/directory/read"
                | "server/discover"
        );
        if cacheable {
            map.entry("ttlMs")
                .or_insert_with(|| self.options.cache_ttl_ms.into());
            map.entry("cacheScope")
                .or_insert_with(|| self.options.cache_scope.as_str().into());
        }
        result
    }
}

/// Server-wide changes as one legacy session sees them: `resources/updated` only for its
/// subscriptions, list changes, and notifications addressed to it.
pub struct SessionEvents {
    receiver: broadcast::Receiver<ServerEvent>,
    session: Arc<Session>,
    shutdown: CancellationToken,
}

impl SessionEvents {
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The next notification for this session, or `None` once the session or server ends.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let event = tokio::select! {
                () = self.session.closed.cancelled() => return None,
                () = self.shutdown.cancelled() => return None,
                event = self.receiver.recv() => event,
            };
            let message = match event {
                Ok(ServerEvent::ResourceUpdated { uri }) if self.session.is_subscribed(&uri) => {
                    jsonrpc::notification("notifications/resources/updated", json!({"uri": uri}))
                }
                Ok(ServerEvent::ResourceDeleted { uri }) => {
                    self.session
                        .subscriptions
                        .lock()
                        .expect("subscriptions lock")
                        .remove(&uri);
                    continue;
                }
                Ok(ServerEvent::ResourcesListChanged) => {
                    jsonrpc::notification("notifications/resources/list_changed", json!({}))
                }
                Ok(ServerEvent::ToolsListChanged) => {
                    jsonrpc::notification("notifications/tools/list_changed", json!({}))
                }
                Ok(ServerEvent::PromptsListChanged) => {
                    jsonrpc::notification("notifications/prompts/list_changed", json!({}))
                }
                Ok(ServerEvent::ToSession {
                    session_id,
                    method,
                    params,
                }) if session_id == self.session.id => jsonrpc::notification(&method, params),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            return Some(message);
        }
    }
}

/// One request being handled: its cancellation, and whether the client asked for it.
struct Inflight {
    token: CancellationToken,
    /// Set by `notifications/cancelled`; such a request gets no response.
    by_client: Arc<std::sync::atomic::AtomicBool>,
}

/// `resource_link` content blocks arrived with 2025-06-18; an older session's client may
/// reject a result that has one, so its tool results keep only the other blocks.
fn without_links_before_2025_06_18(version: &str, mut result: Value) -> Value {
    // Versions are dates, so they order as strings.
    if version >= "2025-06-18" {
        return result;
    }
    if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
        content.retain(|block| block.get("type").and_then(Value::as_str) != Some("resource_link"));
    }
    result
}

fn cancel_scope(transport: &TransportContext) -> String {
    match &transport.session_id {
        Some(session) => format!("session:{session}"),
        None => format!("connection:{}", transport.connection_id),
    }
}

/// The HTTP status for an error of a stateless request.
fn modern_error_status(code: i64) -> u16 {
    match code {
        codes::METHOD_NOT_FOUND => 404,
        codes::HEADER_MISMATCH | codes::MISSING_CAPABILITY | codes::UNSUPPORTED_VERSION => 400,
        _ => 200,
    }
}

fn string_param<'a>(params: &'a Value, name: &str) -> McpResult<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params(format!("params.{name} must be a string")))
}

fn cursor_param(params: &Value) -> McpResult<Option<&str>> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(cursor)) => Ok(Some(cursor)),
        Some(_) => Err(McpError::invalid_params("params.cursor must be a string")),
    }
}

const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn level_allows(minimum: Option<&str>, level: Option<&str>) -> bool {
    let rank = |name: &str| LOG_LEVELS.iter().position(|candidate| *candidate == name);
    match (minimum.and_then(rank), level.and_then(rank)) {
        (Some(minimum), Some(level)) => level >= minimum,
        _ => true,
    }
}

/// A random session id of visible ASCII (a v4 UUID without dashes).
fn new_session_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
