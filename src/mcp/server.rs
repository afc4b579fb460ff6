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
//! A request's era and session are resolved once (`scope.rs`), by the transport or by
//! [`McpServer::handle`]; this file then runs the request: it registers it for
//! `notifications/cancelled`, builds the handler's [`RequestContext`], forwards the
//! notifications the request emits to the transport's channel as they happen (filtered by log
//! level), and turns the result into an [`Outcome`] with the HTTP status that fits. Method
//! routing is `dispatch.rs`, era shaping `shape.rs`, server-wide changes `events.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::answer::ToolAnswer;
use super::context::ClientRequests;
use super::dispatch;
use super::handler::{Era, McpError, McpHandler, Notification, RequestContext, RequestNotifier};
use super::jsonrpc::{self, Message, Request};
use super::scope::{self, META_LOG_LEVEL, RequestEra, Resolution, Scope};
use super::session::{Session, SessionActivity};
use super::shape;
use crate::util::sync::Lock;

pub use super::events::SessionEvents;
pub(crate) use super::scope::{LATEST_LEGACY_VERSION, LEGACY_VERSIONS};
pub use super::shape::CacheScope;

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
    /// `cacheScope` on modern cacheable results; a `tools/list` that depends on the client
    /// is private whatever this says.
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
    pub notifications: Option<crate::mcp::outbox::OutboxSender>,
    /// Fired by the transport when the request's caller is gone (a closed stateless stream,
    /// stdio EOF); the request's own token is cancelled with it.
    pub cancel: CancellationToken,
    /// Who the caller is, as an authenticated upstream named them in the HTTP transport's
    /// principal header (`HttpOptions::principal_header`); `None` on stdio, in the daemon, and
    /// on any listener without that option. The folder server keys run ownership on it.
    pub principal: Option<String>,
}

impl TransportContext {
    pub fn new(transport: TransportKind, connection_id: impl Into<String>) -> TransportContext {
        TransportContext {
            transport,
            session_id: None,
            connection_id: connection_id.into(),
            notifications: None,
            cancel: CancellationToken::new(),
            principal: None,
        }
    }
}

/// What came of one message.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The JSON-RPC response, or `None` for notifications and client responses (and when
    /// `json` holds it).
    pub response: Option<Value>,
    /// The JSON-RPC response as text, written from a handler's prepared result, in place of
    /// `response`: only [`McpServer::handle_request_wire`] answers this way.
    pub json: Option<String>,
    /// The HTTP status that fits (200, 202, 400, 404).
    pub status: u16,
    /// Set when `initialize` created a legacy session.
    pub new_session: Option<String>,
}

impl Outcome {
    fn accepted() -> Outcome {
        Outcome {
            response: None,
            json: None,
            status: 202,
            new_session: None,
        }
    }

    fn error(id: &Value, error: &McpError, status: u16) -> Outcome {
        Outcome {
            response: Some(jsonrpc::error_response(id, error)),
            json: None,
            status,
            new_session: None,
        }
    }
}

pub struct McpServer {
    /// What the server offers; the core answers everything else itself.
    handler: Arc<dyn McpHandler>,
    /// Caching hints of modern results.
    options: ServerOptions,
    /// Legacy sessions by id: created by `initialize`, ended by DELETE, eviction or EOF.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// In-flight requests by (scope, id key), for `notifications/cancelled`.
    inflight: Mutex<HashMap<(String, String), Inflight>>,
    /// Cancels every request and closes every session stream.
    shutdown: CancellationToken,
    /// Server-to-client requests awaiting the client's response (2025 task input).
    client_requests: Arc<ClientRequests>,
    /// The handler's capabilities plus `logging`, read once: every request checks them, and
    /// rebuilding the JSON each time was a tenth of what a `ping` cost the core.
    capabilities: Value,
    /// Bumped after a session or an in-flight request begins or ends, so the daemon times
    /// its idle exit from the moment the last one ended ([`McpServer::activity`]).
    activity: watch::Sender<u64>,
}

/// One request being handled: its cancellation, and whether the client asked for it.
struct Inflight {
    token: CancellationToken,
    /// Set by `notifications/cancelled`; such a request gets no response.
    by_client: Arc<AtomicBool>,
}

impl McpServer {
    pub fn new(handler: Arc<dyn McpHandler>, options: ServerOptions) -> McpServer {
        McpServer {
            capabilities: dispatch::capabilities(handler.as_ref()),
            handler,
            options,
            sessions: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            client_requests: Arc::new(ClientRequests::default()),
            activity: watch::Sender::new(0),
        }
    }

    /// Changes whenever a session or an in-flight request began or ended; read the counts
    /// ([`McpServer::session_count`], [`McpServer::inflight_count`]) after it changed.
    pub fn activity(&self) -> watch::Receiver<u64> {
        self.activity.subscribe()
    }

    fn note_activity(&self) {
        self.activity
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    pub fn handler(&self) -> &Arc<dyn McpHandler> {
        &self.handler
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Cancelled when [`McpServer::shutdown`] is called.
    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Cancels every in-flight request and ends every session's streams.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// The handler's capabilities plus what the core itself serves (`logging`).
    pub fn capabilities(&self) -> Value {
        self.capabilities.clone()
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.locked().get(id).cloned()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.locked().len()
    }

    /// Requests being handled right now, with or without a session (the daemon's idle
    /// check counts them).
    pub fn inflight_count(&self) -> usize {
        self.inflight.locked().len()
    }

    /// Every session's activity, for the daemon's idle reaper.
    pub fn session_activity(&self) -> Vec<(String, SessionActivity)> {
        let sessions = self.sessions.locked();
        sessions
            .iter()
            .map(|(id, session)| (id.clone(), session.activity()))
            .collect()
    }

    /// Ends a session as DELETE does: its streams close, later requests with its id get 404.
    /// Returns whether it existed.
    pub async fn evict_session(&self, id: &str) -> bool {
        let removed = self.sessions.locked().remove(id);
        let Some(session) = removed else {
            return false;
        };
        self.note_activity();
        session.closed.cancel();
        self.handler.session_closed(id).await;
        true
    }

    /// Server-wide changes as seen by one session, or `None` for an unknown session.
    pub fn session_events(&self, id: &str) -> Option<SessionEvents> {
        Some(self.events_of(self.session(id)?))
    }

    /// Server-wide changes as seen by a session the caller already holds; they end at once
    /// if it has ended.
    pub(crate) fn events_of(&self, session: Arc<Session>) -> SessionEvents {
        SessionEvents::new(
            self.handler.hub().subscribe(),
            session,
            self.shutdown.clone(),
        )
    }

    /// The `server/discover` result (S4), before era shaping.
    pub fn discover(&self) -> Value {
        dispatch::discover(self.handler.as_ref())
    }

    /// Handles one message, resolving its era and session itself (stdio and in-memory
    /// callers; the HTTP transport resolves first and calls [`McpServer::handle_request`]).
    pub async fn handle(&self, message: Message, transport: TransportContext) -> Outcome {
        match message {
            Message::Response(response) => {
                self.handle_response(response);
                Outcome::accepted()
            }
            Message::Notification(notification) => {
                let session = transport
                    .session_id
                    .as_deref()
                    .and_then(|id| self.session(id));
                self.handle_notification(&notification, session.as_ref(), &transport);
                Outcome::accepted()
            }
            Message::Request(request) => {
                let resolution = self.resolve(&request, transport.session_id.as_deref());
                self.handle_request(request, resolution, &transport).await
            }
        }
    }

    /// A client's response to one of the server's own requests; others are dropped.
    pub fn handle_response(&self, response: jsonrpc::Response) {
        self.client_requests.answer(&response.id, response.body);
    }

    /// Parses raw bytes and handles them; a parse failure becomes its error response.
    pub async fn handle_bytes(&self, bytes: &[u8], transport: TransportContext) -> Outcome {
        match jsonrpc::parse(bytes) {
            Ok(message) => self.handle(message, transport).await,
            Err(rejected) => Outcome {
                response: Some(rejected.to_response()),
                json: None,
                status: 400,
                new_session: None,
            },
        }
    }

    /// The era of `request` and, for a request without protocol fields other than
    /// `initialize`, the session named `session_id`.
    pub fn resolve(&self, request: &Request, session_id: Option<&str>) -> Resolution {
        let era = scope::request_era(&request.params);
        let looks_up = matches!(era, RequestEra::Unstated) && request.method != "initialize";
        let session = match session_id {
            Some(id) if looks_up => match self.session(id) {
                Some(session) => Some(session),
                None => return Resolution::unknown_session(),
            },
            _ => None,
        };
        Resolution::of(&request.method, era, session)
    }

    /// A notification; `session` is the legacy session the transport resolved.
    pub fn handle_notification(
        &self,
        notification: &jsonrpc::Notification,
        session: Option<&Arc<Session>>,
        transport: &TransportContext,
    ) {
        match notification.method.as_str() {
            "notifications/initialized" => {
                if let Some(session) = session {
                    session.initialized.store(true, Ordering::Relaxed);
                    session.touch();
                }
            }
            "notifications/cancelled" => {
                if let Some(id) = notification.params.get("requestId") {
                    let key = (cancel_scope(transport), jsonrpc::id_key(id));
                    if let Some(inflight) = self.inflight.locked().get(&key) {
                        inflight.by_client.store(true, Ordering::Relaxed);
                        inflight.token.cancel();
                    }
                }
            }
            _ => {}
        }
    }

    /// Runs one request whose era and session are already resolved.
    pub async fn handle_request(
        &self,
        request: Request,
        resolution: Resolution,
        transport: &TransportContext,
    ) -> Outcome {
        self.respond(request, resolution, transport, false).await
    }

    /// [`McpServer::handle_request`] for a transport that writes bytes: a prepared tool
    /// result the era would not reshape comes back as text in [`Outcome::json`], neither
    /// cloned nor serialised again.
    pub async fn handle_request_wire(
        &self,
        request: Request,
        resolution: Resolution,
        transport: &TransportContext,
    ) -> Outcome {
        self.respond(request, resolution, transport, true).await
    }

    async fn respond(
        &self,
        request: Request,
        resolution: Resolution,
        transport: &TransportContext,
        wire: bool,
    ) -> Outcome {
        let mut scope = match resolution {
            Resolution::Ready(scope) => scope,
            Resolution::Initialize => return self.initialize(&request),
            Resolution::Refused { error, status } => {
                return Outcome::error(&request.id, &error, status);
            }
        };
        if scope.era.is_modern() && MODERN_REMOVED.contains(&request.method.as_str()) {
            let error = McpError::method_not_found(&request.method);
            return Outcome::error(&request.id, &error, 404);
        }
        if let Some(session) = &scope.session {
            session.touch();
        }
        let _request_guard = scope.session.as_ref().map(|session| session.request());
        match self.run(&request, &mut scope, transport).await {
            None => Outcome::accepted(),
            Some(Ok(ToolAnswer::Prepared(prepared))) if wire => {
                match shape::prepared_text(&scope.era, &prepared) {
                    Some(result) => Outcome {
                        response: None,
                        json: Some(jsonrpc::success_text(&request.id, &result)),
                        status: 200,
                        new_session: None,
                    },
                    None => self.success(&request, &scope.era, prepared.value().clone()),
                }
            }
            Some(Ok(answer)) => self.success(&request, &scope.era, answer.into_value()),
            Some(Err(error)) => {
                let (error, status) = shape::error(&scope.era, &request.params, error);
                Outcome::error(&request.id, &error, status)
            }
        }
    }

    /// Dispatches the request while forwarding its notifications; `None` when the client
    /// cancelled it (`notifications/cancelled`): it gets no answer, whatever the handler made
    /// of the cancellation.
    async fn run(
        &self,
        request: &Request,
        scope: &mut Scope,
        transport: &TransportContext,
    ) -> Option<Result<ToolAnswer, McpError>> {
        let token = self.shutdown.child_token();
        let key = (cancel_scope(transport), jsonrpc::id_key(&request.id));
        let cancelled_by_client = Arc::new(AtomicBool::new(false));
        self.inflight.locked().insert(
            key.clone(),
            Inflight {
                token: token.clone(),
                by_client: cancelled_by_client.clone(),
            },
        );
        self.note_activity();
        let (sender, mut receiver) = mpsc::unbounded_channel::<Notification>();
        let notifier = RequestNotifier::with_requests(sender, self.client_requests.clone());
        let context = request_context(request, scope, transport, token.clone(), notifier);
        let forwarder = Forwarder {
            era: &scope.era,
            session: scope.session.as_deref(),
            log_meta: request
                .params
                .get("_meta")
                .and_then(|meta| meta.get(META_LOG_LEVEL))
                .is_some(),
            out: transport.notifications.as_ref(),
        };

        let dispatch = dispatch::dispatch(
            self.handler.as_ref(),
            &self.capabilities,
            &context,
            request,
            scope.session.as_ref(),
        );
        tokio::pin!(dispatch);
        let result = loop {
            tokio::select! {
                result = &mut dispatch => break result,
                Some(notification) = receiver.recv() => forwarder.forward(notification),
                () = transport.cancel.cancelled(), if !token.is_cancelled() => token.cancel(),
            }
        };
        while let Ok(notification) = receiver.try_recv() {
            forwarder.forward(notification);
        }
        self.inflight.locked().remove(&key);
        self.note_activity();
        if cancelled_by_client.load(Ordering::Relaxed) {
            return None;
        }
        Some(result)
    }

    fn success(&self, request: &Request, era: &Era, result: Value) -> Outcome {
        Outcome {
            response: Some(jsonrpc::success_response(
                &request.id,
                self.shape(&request.method, era, result),
            )),
            json: None,
            status: 200,
            new_session: None,
        }
    }

    /// The era's shape of a result; a `tools/list` that depends on who asks is private.
    fn shape(&self, method: &str, era: &Era, result: Value) -> Value {
        match era {
            Era::Modern { .. } => {
                let scope = if method == "tools/list" && self.handler.tools().varies_by_client() {
                    CacheScope::Private
                } else {
                    self.options.cache_scope
                };
                shape::modern(method, result, self.options.cache_ttl_ms, scope)
            }
            Era::Legacy { version } if method == "tools/call" => {
                shape::without_links_before_2025_06_18(version, result)
            }
            Era::Legacy { .. } => result,
        }
    }

    /// `initialize`: a new legacy session and the handshake result.
    fn initialize(&self, request: &Request) -> Outcome {
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
            capabilities.clone(),
            client_info,
        ));
        self.sessions.locked().insert(session_id.clone(), session);
        self.note_activity();
        let result = dispatch::initialize_result(self.handler.as_ref(), version, &capabilities);
        Outcome {
            response: Some(jsonrpc::success_response(&request.id, result)),
            json: None,
            status: 200,
            new_session: Some(session_id),
        }
    }
}

/// The handler's view of one request. The client's capabilities and info move out of
/// `scope` (nothing after this reads them there), so they are not copied per request.
fn request_context(
    request: &Request,
    scope: &mut Scope,
    transport: &TransportContext,
    cancel: CancellationToken,
    notifier: RequestNotifier,
) -> RequestContext {
    let meta = request.params.get("_meta");
    RequestContext {
        era: scope.era.clone(),
        session_id: scope.session.as_ref().map(|session| session.id.clone()),
        request_id: request.id.clone(),
        method: request.method.clone(),
        client_capabilities: std::mem::take(&mut scope.client_capabilities),
        client_info: scope.client_info.take(),
        progress_token: meta.and_then(|meta| meta.get("progressToken")).cloned(),
        meta: meta.cloned().unwrap_or(Value::Null),
        cancel,
        notifier,
        principal: transport.principal.clone(),
    }
}

/// Sends a request's notifications to its transport, holding `notifications/message` to
/// the level the client asked for: a legacy session's `logging/setLevel`, a modern
/// request's `_meta` log level (none without one).
struct Forwarder<'a> {
    era: &'a Era,
    session: Option<&'a Session>,
    log_meta: bool,
    out: Option<&'a crate::mcp::outbox::OutboxSender>,
}

impl Forwarder<'_> {
    fn forward(&self, notification: Notification) {
        if notification.method == "notifications/message" {
            let allowed = match (self.era, self.session) {
                (Era::Modern { .. }, _) => self.log_meta,
                (Era::Legacy { .. }, Some(session)) => {
                    let minimum = session.log_level.locked().clone();
                    shape::level_allows(
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
        if let Some(out) = self.out {
            let mut message = jsonrpc::notification(&notification.method, notification.params);
            if let Some(id) = notification.id {
                message["id"] = id;
            }
            let _ = out.send(message);
        }
    }
}

fn cancel_scope(transport: &TransportContext) -> String {
    match &transport.session_id {
        Some(session) => format!("session:{session}"),
        None => format!("connection:{}", transport.connection_id),
    }
}

/// A random session id of visible ASCII (a v4 UUID without dashes).
fn new_session_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
