//! MCP Streamable HTTP on hyper: one endpoint ([`HttpOptions::path`], `/mcp` by default)
//! for both protocol eras.
//!
//! Every connection is first checked against [`HttpOptions::access`] (`peer.rs`: only the
//! owner's user, by the kernel's word or by bearer token) and watched for the time limits
//! (`connection.rs`: head 10 s, body 30 s, idle 60 s; at most 512 open). Every request then
//! passes Host and Origin validation (403, `http/headers.rs`), the daemon's
//! [`HttpOptions::intercept`] hook (health checks, lame-duck answers), the folder server's
//! guards (`http/guard.rs`: the bearer token of [`Access::Bearer`], the principal header;
//! 401), then the [`HttpOptions::guarded_routes`] (`http/guarded.rs`: the folder server's
//! `POST /a2a`, JSON in and out), then MCP routing: the endpoint, and with [`HttpOptions::method_paths`] a POST to
//! `<path>/<method>` whose body must be that method (400 otherwise). A POST
//! (`http/post.rs`) carries one JSON-RPC message of at most [`MAX_BODY_BYTES`] (413 beyond);
//! its era and session are resolved there once and handed to the core. Requests answer with
//! plain JSON unless they emit a notification before finishing: then the response becomes an
//! SSE stream (priming event with `retry:`, the notifications, the response), which is how
//! progress, logging and `subscriptions/listen` reach the client. Choosing lazily keeps
//! ordinary answers cheap and lets a stateless error still carry its HTTP status (400/404).
//!
//! Legacy sessions get the 2025-11-25 contract: `Mcp-Session-Id` from `initialize`, 400/404
//! for a missing/unknown id, `MCP-Protocol-Version` checks, DELETE, the GET stream for
//! server notifications, and `Last-Event-ID` replay from a bounded per-stream log
//! (`http/get.rs`, written by `http/pump.rs`). A legacy request keeps running when its client
//! disconnects (only `notifications/cancelled` stops it); a stateless request is cancelled
//! when its response stream closes.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mcp::server::McpServer;
use crate::transport::connection::{self, Activity, Limits, Stretch, Tracked, WatchedIo};
use crate::transport::in_place::InPlace;
use crate::transport::peer::{self, Access, Caller};

mod body;
mod get;
mod guard;
mod guarded;
mod headers;
mod post;
mod pump;

pub use body::HttpBody;
use body::HttpResponse;
pub use body::json_response;
use body::plain;
pub use guard::{MAX_PRINCIPAL_BYTES, OptionsError, PrincipalError, check_options, read_principal};
pub use guarded::{GuardedAnswer, GuardedHandler, GuardedRequest, GuardedRoute};
pub(crate) use headers::{host_allowed, origin_allowed};

/// The request body cap: room for a script of 1 MiB (the engine's limit, checked on the
/// decoded text) however JSON escapes it (`\u0001` is six bytes for one), plus 64 KiB for the
/// rest of the envelope.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024 + 64 * 1024;
/// Connections open at once; the next is closed at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections of other users being answered at once (one request each).
const MAX_FOREIGN_CONNECTIONS: usize = 32;
/// The MCP endpoint path.
/// The MCP endpoint path unless [`HttpOptions::path`] says otherwise; the daemon serves it.
pub(crate) const MCP_PATH: &str = "/mcp";

/// Answers a request before MCP routing (after Host/Origin checks), or passes with `None`.
/// The daemon uses it for `/healthz` and for lame-duck 503s.
pub type Intercept = Arc<dyn Fn(&Parts) -> Option<Response<HttpBody>> + Send + Sync>;

/// Adds headers to every `/mcp` response (the daemon marks a lame duck's answers with it).
pub(crate) type Decorate = Arc<dyn Fn(&mut HeaderMap) + Send + Sync>;

#[derive(Clone)]
pub struct HttpOptions {
    /// The path of the MCP endpoint; every other path is 404 (after the intercept hook).
    pub path: String,
    /// Also accept `POST <path>/<method>` (`/mcp/run/resume`, `/mcp/tools/call`; the method
    /// may contain `/`, taken from the path verbatim, not percent-decoded), whose body must be
    /// one message of exactly that method, so a policy gateway can match a method by path.
    /// Off for the daemon.
    pub method_paths: bool,
    /// Refuse a `Host` that is not a loopback name (DNS rebinding). A listener bound to a
    /// non-loopback address turns it off: there `Host` is whatever name the clients use.
    pub check_host: bool,
    /// A header (matched case-insensitively) whose value is the caller's identity, set by an
    /// authenticated upstream: it becomes `TransportContext::principal`, and a request
    /// without one valid value (1 to [`MAX_PRINCIPAL_BYTES`] bytes of visible ASCII) is 401.
    /// Only safe behind the token: [`serve`] refuses it unless `access` is
    /// [`Access::Bearer`], since any client could otherwise name itself.
    pub principal_header: Option<String>,
    /// Origins accepted besides loopback ones, matched exactly
    /// (`AGENTPRISM_DAEMON_ALLOWED_ORIGINS`).
    pub allowed_origins: Vec<String>,
    /// The POST body cap (413 beyond).
    pub max_body_bytes: usize,
    /// How often an idle SSE stream gets a `:` comment so proxies and clients keep it.
    pub keep_alive: Duration,
    /// The `retry:` value sent on SSE streams, in milliseconds.
    pub retry_ms: u64,
    /// How long graceful shutdown waits for open connections.
    pub shutdown_deadline: Duration,
    /// Routes answered before MCP routing (the daemon's `/healthz`, lame-duck 503s).
    pub intercept: Option<Intercept>,
    /// Paths answered behind the guards (token, principal header) instead of MCP routing,
    /// POST only, bodies within `max_body_bytes`: the folder server's `/a2a`. None for the
    /// daemon.
    pub guarded_routes: Vec<GuardedRoute>,
    /// Headers added to every answer (the daemon's lame-duck mark).
    pub decorate: Option<Decorate>,
    /// Whom the listener lets in (default: this process's user only).
    pub access: Access,
    /// The name `/healthz` gives to callers who may not come in.
    pub implementation: &'static str,
    /// The connection watchdog's time limits.
    pub limits: Limits,
    /// The owner's connections open at once; the next is closed at once.
    pub max_connections: usize,
    /// The runtime that runs MCP requests, when it is not the one accepting connections:
    /// the daemon accepts connections and answers `/healthz` on a small runtime of its own,
    /// so a busy engine runtime cannot starve its health check (daemon.md 1.4). A connection
    /// that opens with anything but a health check moves here once, whole; one that opened
    /// with a health check stays and sends each later MCP request here.
    pub dispatch: Option<tokio::runtime::Handle>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            path: MCP_PATH.to_owned(),
            method_paths: false,
            check_host: true,
            principal_header: None,
            allowed_origins: Vec::new(),
            max_body_bytes: MAX_BODY_BYTES,
            keep_alive: Duration::from_secs(15),
            retry_ms: 1000,
            shutdown_deadline: Duration::from_secs(5),
            intercept: None,
            guarded_routes: Vec::new(),
            decorate: None,
            access: Access::owner(None),
            implementation: "agentprism-rs",
            limits: Limits::default(),
            max_connections: MAX_CONNECTIONS,
            dispatch: None,
        }
    }
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("path", &self.path)
            .field("method_paths", &self.method_paths)
            .field("check_host", &self.check_host)
            .field("principal_header", &self.principal_header)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("retry_ms", &self.retry_ms)
            .field("intercept", &self.intercept.is_some())
            .field(
                "guarded_routes",
                &self
                    .guarded_routes
                    .iter()
                    .map(|route| route.path.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("decorate", &self.decorate.is_some())
            .field("access", &self.access)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("dispatch", &self.dispatch.is_some())
            .finish()
    }
}

/// Serves MCP on an already-bound listener until `shutdown` resolves, then closes streams and
/// waits (bounded) for connections and request tasks.
///
/// Each accepted connection is first classified ([`peer::classify`]): the owner's
/// connections take one of [`HttpOptions::max_connections`] slots; another user's are served
/// one request at most (`/healthz` with the implementation name, 403 for anything else) from
/// a small pool of their own, so they never crowd the owner out.
///
/// Fails at once, serving nothing, on options [`check_options`] refuses.
pub async fn serve(
    listener: TcpListener,
    server: Arc<McpServer>,
    options: HttpOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    check_options(&options)?;
    let local = listener.local_addr()?;
    let owner_slots = Arc::new(Semaphore::new(options.max_connections));
    let foreign_slots = Arc::new(Semaphore::new(MAX_FOREIGN_CONNECTIONS));
    let state = Arc::new(State {
        server,
        options,
        port: local.port(),
        tasks: TaskTracker::new(),
        stopping: CancellationToken::new(),
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!("accepting an MCP connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        let slots = (owner_slots.clone(), foreign_slots.clone());
        state.tasks.clone().spawn(async move {
            let local = stream.local_addr().unwrap_or(local);
            let caller = peer::classify(&state.options.access, local, peer);
            let slots = match caller {
                Caller::Foreign(uid) => {
                    tracing::warn!(
                        "refused a connection from {peer}: {} (only this daemon's user may \
                         connect)",
                        uid.map_or("no such live socket".to_owned(), |uid| format!("uid {uid}"))
                    );
                    slots.1
                }
                Caller::Trusted | Caller::NeedsToken => slots.0,
            };
            let Ok(slot) = slots.try_acquire_owned() else {
                tracing::warn!("closed a connection from {peer}: too many open connections");
                return;
            };
            state.place(stream, caller, slot).await;
        });
    }
    drop(listener);
    state.stopping.cancel();
    state.tasks.close();
    let deadline = state.options.shutdown_deadline;
    if tokio::time::timeout(deadline, state.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("MCP connections or request tasks still open {deadline:?} after shutdown");
    }
    Ok(())
}

struct State {
    /// The MCP core every request is handed to.
    server: Arc<McpServer>,
    options: HttpOptions,
    /// The bound port, which a `Host` header may name.
    port: u16,
    /// Connections, request handlers and SSE pumps.
    tasks: TaskTracker,
    /// Ends SSE streams when the server stops.
    stopping: CancellationToken,
}

/// What a connection's first bytes say about where to serve it.
#[derive(Debug, PartialEq, Eq)]
enum FirstBytes {
    /// Closed, failed, or silent for the idle limit: nothing to serve.
    Gone,
    /// `GET /healthz`, or too little of the request line yet to tell otherwise.
    HealthCheck,
    Other,
}

/// The request line's start a health check has.
const HEALTH_CHECK: &[u8] = b"GET /healthz";

/// Looks at what has arrived on `stream` without consuming it, waiting up to `idle` (the
/// idle limit a silent connection gets anyway) for the first bytes.
async fn first_bytes(stream: &TcpStream, idle: Duration) -> FirstBytes {
    let mut seen = [0u8; HEALTH_CHECK.len()];
    match tokio::time::timeout(idle, stream.peek(&mut seen)).await {
        Ok(Ok(0) | Err(_)) | Err(_) => FirstBytes::Gone,
        Ok(Ok(read)) => classify_first_bytes(&seen[..read]),
    }
}

/// A prefix of a health check stays where health checks are answered: the safe side when a
/// client sends its request line in pieces.
fn classify_first_bytes(seen: &[u8]) -> FirstBytes {
    if HEALTH_CHECK.starts_with(seen) {
        FirstBytes::HealthCheck
    } else {
        FirstBytes::Other
    }
}

/// Aborts a task when dropped (a no-op once it has finished).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl State {
    /// Serves a connection where its requests are answered. Without
    /// [`HttpOptions::dispatch`] that is here. With it, an owner's connection whose first
    /// request is not `GET /healthz` moves to the dispatch runtime once and is served there
    /// whole, so its requests cost no hop between runtimes; a health check, and any other
    /// user's connection, stay on this (front) runtime, which a busy engine cannot starve.
    async fn place(self: Arc<Self>, stream: TcpStream, caller: Caller, slot: OwnedSemaphorePermit) {
        let Some(main) = self.options.dispatch.clone() else {
            return self.connection(stream, caller, None, slot).await;
        };
        if matches!(caller, Caller::Foreign(_)) {
            return self.connection(stream, caller, Some(main), slot).await;
        }
        match first_bytes(&stream, self.options.limits.idle).await {
            FirstBytes::Gone => {}
            FirstBytes::HealthCheck => self.connection(stream, caller, Some(main), slot).await,
            FirstBytes::Other => {
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(error) => {
                        tracing::warn!("handing a connection to the main runtime failed: {error}");
                        return;
                    }
                };
                let state = self.clone();
                main.spawn(self.tasks.track_future(async move {
                    match TcpStream::from_std(stream) {
                        Ok(stream) => state.connection(stream, caller, None, slot).await,
                        Err(error) => {
                            tracing::warn!(
                                "adopting a connection on the main runtime failed: {error}"
                            );
                        }
                    }
                }));
            }
        }
    }

    /// Serves one connection until it ends, overstays a limit, or the server stops. `hop`
    /// is the runtime its MCP requests are answered on when it is not this one.
    async fn connection(
        self: Arc<Self>,
        stream: TcpStream,
        caller: Caller,
        hop: Option<tokio::runtime::Handle>,
        _slot: OwnedSemaphorePermit,
    ) {
        let activity = Activity::new();
        let service = {
            let state = self.clone();
            let activity = activity.clone();
            service_fn(move |request| {
                let state = state.clone();
                let hop = hop.clone();
                let busy = activity.busy();
                async move {
                    let response = state.route(request, caller, hop).await;
                    Ok::<_, Infallible>(response.map(|body| Tracked::new(body, busy)))
                }
            })
        };
        let io = TokioIo::new(WatchedIo::new(stream, activity.clone()));
        let connection = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None)
            // Another user gets one answer and the door.
            .keep_alive(!matches!(caller, Caller::Foreign(_)))
            .serve_connection(io, service);
        // hyper wakes the connection inside its own poll on every request with a body.
        let mut connection = InPlace::new(connection);
        let limits = self.options.limits;
        let mut stopping = false;
        loop {
            tokio::select! {
                ended = &mut connection => {
                    if let Err(error) = ended {
                        tracing::debug!("MCP connection ended with an error: {error}");
                    }
                    return;
                }
                stretch = connection::expired(&activity, &limits) => {
                    if stretch == Stretch::ReadingHead {
                        tracing::debug!("closed a connection whose request head took over {:?}", limits.header);
                    }
                    return;
                }
                () = self.stopping.cancelled(), if !stopping => {
                    stopping = true;
                    connection.inner().graceful_shutdown();
                }
            }
        }
    }

    async fn route(
        self: Arc<Self>,
        request: Request<Incoming>,
        caller: Caller,
        hop: Option<tokio::runtime::Handle>,
    ) -> HttpResponse {
        let (parts, body) = request.into_parts();
        if let Some(refusal) = self.refuse(&parts, caller) {
            return refusal;
        }
        let mut response = match self.answer_at_the_door(&parts) {
            Some(response) => response,
            None => match hop {
                Some(runtime) => {
                    let task = runtime.spawn(self.clone().route_mcp(parts, body));
                    // A client that goes away drops this future; the request's future on the
                    // other runtime goes with it, exactly as if it ran here (a stateless
                    // request is cancelled that way; a legacy one runs on in its own task).
                    let _abort = AbortOnDrop(task.abort_handle());
                    task.await.unwrap_or_else(|error| {
                        plain(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            if error.is_cancelled() {
                                "the server is shutting down"
                            } else {
                                "the request handler failed"
                            },
                        )
                    })
                }
                None => self.clone().route_mcp(parts, body).await,
            },
        };
        if let Some(decorate) = &self.options.decorate {
            decorate(response.headers_mut());
        }
        response
    }

    /// The answer to a caller who may not come in: `/healthz` names the implementation and
    /// nothing else; every other request is refused before anything of it is read.
    fn refuse(&self, parts: &Parts, caller: Caller) -> Option<HttpResponse> {
        let status = match caller {
            Caller::Trusted => return None,
            Caller::NeedsToken => {
                let authorization = parts.headers.get(hyper::header::AUTHORIZATION);
                if peer::bearer_matches(
                    &self.options.access,
                    authorization.map(HeaderValue::as_bytes),
                ) {
                    return None;
                }
                StatusCode::UNAUTHORIZED
            }
            Caller::Foreign(_) => StatusCode::FORBIDDEN,
        };
        if parts.method == Method::GET && parts.uri.path() == "/healthz" {
            return Some(json_response(
                StatusCode::OK,
                &json!({"implementation": self.options.implementation}),
            ));
        }
        if status == StatusCode::UNAUTHORIZED {
            tracing::warn!(
                "refused {} {}: no valid bearer token (this system cannot name a connection's \
                 user, so the token is required)",
                parts.method,
                parts.uri.path()
            );
            let mut response = plain(status, "this server needs its user's bearer token");
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            return Some(response);
        }
        Some(plain(
            status,
            "this server accepts connections from its own user only",
        ))
    }

    /// What is answered without MCP work: Host/Origin refusals and the intercept's routes.
    fn answer_at_the_door(&self, parts: &Parts) -> Option<HttpResponse> {
        if let Err(reason) = self.check_host_and_origin(&parts.headers) {
            return Some(plain(StatusCode::FORBIDDEN, reason));
        }
        self.options
            .intercept
            .as_ref()
            .and_then(|intercept| intercept(parts))
    }

    async fn route_mcp(self: Arc<Self>, parts: Parts, body: Incoming) -> HttpResponse {
        let principal = match guard::admit(&self.options, &parts) {
            Ok(principal) => principal,
            Err(refusal) => return *refusal,
        };
        let path = parts.uri.path();
        if let Some(route) = self.options.guarded_routes.iter().find(|r| r.path == path) {
            let route = route.clone();
            return guarded::answer(self, route, parts, body, principal).await;
        }
        let Some(target) = self.target(parts.uri.path()) else {
            return plain(StatusCode::NOT_FOUND, "not found");
        };
        match (parts.method.clone(), target) {
            (Method::POST, target) => {
                let routed = post::Routed {
                    path_method: target.map(str::to_owned),
                    principal,
                };
                post::post(self, parts, body, routed).await
            }
            (Method::GET, None) => get::get(self, parts).await,
            (Method::DELETE, None) => get::delete(self, parts).await,
            (_, target) => {
                let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
                let allow = if target.is_some() {
                    "POST"
                } else {
                    "GET, POST, DELETE"
                };
                response
                    .headers_mut()
                    .insert("allow", HeaderValue::from_static(allow));
                response
            }
        }
    }

    /// What `path` names: `Some(None)` the endpoint, `Some(Some(method))` a per-method path
    /// (with [`HttpOptions::method_paths`]), `None` nothing of ours.
    fn target<'a>(&self, path: &'a str) -> Option<Option<&'a str>> {
        if path == self.options.path {
            return Some(None);
        }
        let method = path
            .strip_prefix(self.options.path.as_str())?
            .strip_prefix('/')
            .filter(|method| self.options.method_paths && !method.is_empty())?;
        Some(Some(method))
    }

    fn check_host_and_origin(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        if let Some(host) = headers
            .get(hyper::header::HOST)
            .filter(|_| self.options.check_host)
        {
            let host = host.to_str().map_err(|_| "invalid Host header")?;
            if !host_allowed(host, self.port) {
                return Err("Host is not a loopback address of this server");
            }
        }
        if let Some(origin) = headers.get(hyper::header::ORIGIN) {
            let origin = origin.to_str().map_err(|_| "invalid Origin header")?;
            if !origin_allowed(origin, &self.options.allowed_origins) {
                return Err("Origin is not allowed");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::mcp::handler::{McpHandler, McpResult, NotificationHub, RequestContext, ServerInfo};
    use crate::mcp::server::ServerOptions;

    struct Empty(NotificationHub);

    #[async_trait]
    impl McpHandler for Empty {
        fn server_info(&self) -> ServerInfo {
            ServerInfo {
                name: "path-test".into(),
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

    /// One HTTP/1.1 POST on a fresh connection; the status line of the answer.
    async fn post_status(port: u16, path: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[test]
    fn only_a_health_check_or_a_prefix_of_one_stays_on_the_front() {
        for stays in [&b"G"[..], b"GET /", b"GET /healthz"] {
            assert_eq!(classify_first_bytes(stays), FirstBytes::HealthCheck);
        }
        for moves in [&b"POST /mcp HT"[..], b"GET /mcp HTTP", b"P", b"DELETE"] {
            assert_eq!(classify_first_bytes(moves), FirstBytes::Other);
        }
    }

    #[tokio::test]
    async fn the_endpoint_is_served_at_the_configured_path_only() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Arc::new(McpServer::new(
            Arc::new(Empty(NotificationHub::new())),
            ServerOptions::default(),
        ));
        let options = HttpOptions {
            path: "/folders/one/mcp".into(),
            access: Access::Open,
            ..HttpOptions::default()
        };
        assert_eq!(HttpOptions::default().path, MCP_PATH);
        let stop = CancellationToken::new();
        let serving = tokio::spawn(serve(
            listener,
            server,
            options,
            stop.clone().cancelled_owned(),
        ));
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}}})
        .to_string();
        assert_eq!(
            post_status(port, "/folders/one/mcp", &initialize).await,
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            post_status(port, MCP_PATH, &initialize).await,
            "HTTP/1.1 404 Not Found"
        );
        stop.cancel();
        serving.await.unwrap().unwrap();
    }
}
