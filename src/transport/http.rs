//! MCP Streamable HTTP on hyper: one `/mcp` endpoint for both protocol eras.
//!
//! Every connection is first checked against [`HttpOptions::access`] (`peer.rs`: only the
//! owner's user, by the kernel's word or by bearer token) and watched for the time limits
//! (`connection.rs`: head 10 s, body 30 s, idle 60 s; at most 512 open). Every request then
//! passes Host and Origin validation (403), the daemon's [`HttpOptions::intercept`] hook
//! (health checks, lame-duck answers), then MCP routing. A POST carries one JSON-RPC message
//! of at most [`MAX_BODY_BYTES`] (413 beyond). Requests answer with
//! plain JSON unless they emit a notification before finishing: then the response becomes an
//! SSE stream (priming event with `retry:`, the notifications, the response), which is how
//! progress, logging and `subscriptions/listen` reach the client. Choosing lazily keeps
//! ordinary answers cheap and lets a stateless error still carry its HTTP status (400/404).
//!
//! Legacy sessions get the 2025-11-25 contract: `Mcp-Session-Id` from `initialize`, 400/404
//! for a missing/unknown id, `MCP-Protocol-Version` checks, DELETE, the GET stream for
//! server notifications, and `Last-Event-ID` replay from a bounded per-stream log. A legacy
//! request keeps running when its client disconnects (only `notifications/cancelled` stops
//! it); a stateless request is cancelled when its response stream closes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mcp::handler::{McpError, codes};
use crate::mcp::jsonrpc::{self, Message};
use crate::mcp::server::{
    LEGACY_VERSIONS, META_PROTOCOL_VERSION, McpServer, Outcome, TransportContext, TransportKind,
};
use crate::mcp::session::{Replay, Session, parse_event_id};
use crate::transport::connection::{self, Activity, Limits, Stretch, Tracked, WatchedIo};
use crate::transport::peer::{self, Access, Caller};

/// The request body cap: room for a script of 1 MiB (the engine's limit, checked on the
/// decoded text) however JSON escapes it (`\u0001` is six bytes for one), plus 64 KiB for the
/// rest of the envelope.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024 + 64 * 1024;
/// Connections open at once; the next is closed at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections of other users being answered at once (one request each).
const MAX_FOREIGN_CONNECTIONS: usize = 32;
/// The MCP endpoint path.
pub const MCP_PATH: &str = "/mcp";

/// Answers a request before MCP routing (after Host/Origin checks), or passes with `None`.
/// The daemon uses it for `/healthz` and for lame-duck 503s.
pub type Intercept = Arc<dyn Fn(&Parts) -> Option<Response<HttpBody>> + Send + Sync>;

/// Adds headers to every `/mcp` response (the daemon marks a lame duck's answers with it).
pub type Decorate = Arc<dyn Fn(&mut HeaderMap) + Send + Sync>;

#[derive(Clone)]
pub struct HttpOptions {
    /// Origins accepted besides loopback ones, matched exactly
    /// (`AGENTPRISM_DAEMON_ALLOWED_ORIGINS`).
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// How often an idle SSE stream gets a `:` comment so proxies and clients keep it.
    pub keep_alive: Duration,
    /// The `retry:` value sent on SSE streams, in milliseconds.
    pub retry_ms: u64,
    /// How long graceful shutdown waits for open connections.
    pub shutdown_deadline: Duration,
    pub intercept: Option<Intercept>,
    pub decorate: Option<Decorate>,
    /// Whom the listener lets in (default: this process's user only).
    pub access: Access,
    /// The name `/healthz` gives to callers who may not come in.
    pub implementation: &'static str,
    pub limits: Limits,
    pub max_connections: usize,
    /// The runtime that runs MCP requests, when it is not the one serving the connections:
    /// the daemon accepts connections and answers `/healthz` on a small runtime of its own,
    /// so a busy engine runtime cannot starve its health check (daemon.md 1.4).
    pub dispatch: Option<tokio::runtime::Handle>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            allowed_origins: Vec::new(),
            max_body_bytes: MAX_BODY_BYTES,
            keep_alive: Duration::from_secs(15),
            retry_ms: 1000,
            shutdown_deadline: Duration::from_secs(5),
            intercept: None,
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
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("retry_ms", &self.retry_ms)
            .field("intercept", &self.intercept.is_some())
            .field("decorate", &self.decorate.is_some())
            .field("access", &self.access)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("dispatch", &self.dispatch.is_some())
            .finish()
    }
}

/// A response body: a whole buffer, or SSE frames from a channel. Dropping it (the client
/// went away) closes the channel, which is how a stream notices a disconnect.
pub enum HttpBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl HttpBody {
    pub fn empty() -> HttpBody {
        HttpBody::Full(None)
    }

    pub fn full(bytes: impl Into<Bytes>) -> HttpBody {
        HttpBody::Full(Some(bytes.into()))
    }
}

impl Body for HttpBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            HttpBody::Full(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            HttpBody::Stream(receiver) => receiver
                .poll_recv(cx)
                .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, HttpBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            HttpBody::Full(bytes) => hyper::body::SizeHint::with_exact(
                bytes.as_ref().map_or(0, |bytes| bytes.len() as u64),
            ),
            HttpBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// Serves MCP on an already-bound listener until `shutdown` resolves, then closes streams and
/// waits (bounded) for connections and request tasks.
///
/// Each accepted connection is first classified ([`peer::classify`]): the owner's
/// connections take one of [`HttpOptions::max_connections`] slots; another user's are served
/// one request at most (`/healthz` with the implementation name, 403 for anything else) from
/// a small pool of their own, so they never crowd the owner out.
pub async fn serve(
    listener: TcpListener,
    server: Arc<McpServer>,
    options: HttpOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
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
            let Ok(_slot) = slots.try_acquire_owned() else {
                tracing::warn!("closed a connection from {peer}: too many open connections");
                return;
            };
            state.connection(stream, caller).await;
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
    server: Arc<McpServer>,
    options: HttpOptions,
    port: u16,
    /// Connections, request handlers and SSE pumps.
    tasks: TaskTracker,
    /// Ends SSE streams when the server stops.
    stopping: CancellationToken,
}

/// Aborts a task when dropped (a no-op once it has finished).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The response to a POST before it is turned into HTTP.
type HttpResponse = Response<HttpBody>;

impl State {
    /// Serves one connection until it ends, overstays a limit, or the server stops.
    async fn connection(self: Arc<Self>, stream: TcpStream, caller: Caller) {
        let activity = Activity::new();
        let service = {
            let state = self.clone();
            let activity = activity.clone();
            service_fn(move |request| {
                let state = state.clone();
                let busy = activity.busy();
                async move {
                    let response = state.route(request, caller).await;
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
        tokio::pin!(connection);
        let limits = self.options.limits;
        let mut stopping = false;
        loop {
            tokio::select! {
                ended = connection.as_mut() => {
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
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }

    async fn route(self: Arc<Self>, request: Request<Incoming>, caller: Caller) -> HttpResponse {
        let (parts, body) = request.into_parts();
        if let Some(refusal) = self.refuse(&parts, caller) {
            return refusal;
        }
        let mut response = match self.answer_at_the_door(&parts) {
            Some(response) => response,
            None => match self.options.dispatch.clone() {
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
        if parts.uri.path() != MCP_PATH {
            return plain(StatusCode::NOT_FOUND, "not found");
        }
        match parts.method {
            Method::POST => self.post(parts, body).await,
            Method::GET => self.get(parts).await,
            Method::DELETE => self.delete(parts).await,
            _ => {
                let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
                response
                    .headers_mut()
                    .insert("allow", HeaderValue::from_static("GET, POST, DELETE"));
                response
            }
        }
    }

    fn check_host_and_origin(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        if let Some(host) = headers.get(hyper::header::HOST) {
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

    /// The whole body of a POST, within the size cap and the body time limit; the refusal
    /// (413, 400, or 408 with `Connection: close`) otherwise.
    async fn read_body(&self, parts: &Parts, body: Incoming) -> Result<Bytes, HttpResponse> {
        let limit = self.options.max_body_bytes;
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > limit as u64) {
            return Err(too_large(limit));
        }
        let body_limit = self.options.limits.body;
        match tokio::time::timeout(body_limit, Limited::new(body, limit).collect()).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
                Err(too_large(limit))
            }
            Ok(Err(error)) => Err(plain(
                StatusCode::BAD_REQUEST,
                &format!("reading the body failed: {error}"),
            )),
            Err(_elapsed) => {
                let mut response = plain(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("the request body took over {body_limit:?}"),
                );
                response
                    .headers_mut()
                    .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                Err(response)
            }
        }
    }

    async fn post(self: Arc<Self>, parts: Parts, body: Incoming) -> HttpResponse {
        let bytes = match self.read_body(&parts, body).await {
            Ok(bytes) => bytes,
            Err(refusal) => return refusal,
        };
        let message = match jsonrpc::parse(&bytes) {
            Ok(message) => message,
            Err(rejected) => {
                return json_response(StatusCode::BAD_REQUEST, &rejected.to_response());
            }
        };
        let headers = &parts.headers;
        let modern_version = match &message {
            Message::Request(request) => request
                .params
                .get("_meta")
                .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        // Every session-less exchange is a scope of its own: HTTP clients share no connection,
        // and their ids restart at 1, so one client's `notifications/cancelled` must never
        // reach another client's request (a stateless request is cancelled by closing its
        // response stream instead).
        let mut context = TransportContext::new(
            TransportKind::Http,
            format!("http:{}", uuid::Uuid::new_v4().simple()),
        );
        let mut session = None;
        if let (Some(version), Message::Request(request)) = (&modern_version, &message) {
            if let Err(error) =
                check_modern_headers(headers, version, &request.method, &request.params)
            {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &jsonrpc::error_response(&request.id, &error),
                );
            }
        } else if !matches!(&message, Message::Request(request) if request.method == "initialize")
            && let Some(session_id) = header(headers, "mcp-session-id")
        {
            {
                let Some(found) = self.server.session(session_id) else {
                    let id = match &message {
                        Message::Request(request) => request.id.clone(),
                        _ => Value::Null,
                    };
                    let error = McpError::new(-32001, "session not found");
                    return json_response(
                        StatusCode::NOT_FOUND,
                        &jsonrpc::error_response(&id, &error),
                    );
                };
                if let Some(version) = header(headers, "mcp-protocol-version")
                    && !LEGACY_VERSIONS.contains(&version)
                {
                    return plain(
                        StatusCode::BAD_REQUEST,
                        &format!("unsupported MCP-Protocol-Version {version}"),
                    );
                }
                context.session_id = Some(session_id.to_owned());
                session = Some(found);
            }
        }
        match &message {
            Message::Request(_) => {}
            Message::Notification(_) | Message::Response(_) => {
                self.server.handle(message, context).await;
                return status_only(StatusCode::ACCEPTED);
            }
        };
        let _connection = session.as_ref().map(|session| session.connection());

        let (notes_sender, mut notes) = mpsc::unbounded_channel::<Value>();
        let (done_sender, mut done) = oneshot::channel::<Outcome>();
        let stream_closed = CancellationToken::new();
        context.notifications = Some(notes_sender);
        context.cancel = stream_closed.clone();
        let modern = modern_version.is_some();
        // A stateless request dies with its caller; a legacy one outlives a disconnect.
        let cancel_on_drop = modern.then(|| stream_closed.clone().drop_guard());
        let server = self.server.clone();
        self.tasks.spawn(async move {
            let outcome = server.handle(message, context).await;
            let _ = done_sender.send(outcome);
        });
        // JSON unless a notification comes before the answer. The handler's side of `notes`
        // closes before `done` is sent, so no notification is ever skipped.
        let Some(first_note) = notes.recv().await else {
            return answered(done.await);
        };
        if let Some(guard) = cancel_on_drop {
            guard.disarm();
        }
        let (body_sender, body_receiver) = mpsc::channel::<Bytes>(64);
        let pump = Pump {
            body: body_sender,
            session: if modern { None } else { session.clone() },
            stream: None,
            local_sequence: 0,
            client_gone: false,
        };
        let keep_alive = self.options.keep_alive;
        let retry_ms = self.options.retry_ms;
        let stopping = self.stopping.clone();
        let connection_guard = session.as_ref().map(|session| session.connection());
        self.tasks.spawn(async move {
            let _connection = connection_guard;
            let mut pump = pump;
            pump.open(retry_ms).await;
            pump.event(&first_note).await;
            let watch = pump.body.clone();
            let mut ticker = tokio::time::interval(keep_alive);
            ticker.reset();
            loop {
                tokio::select! {
                    Some(note) = notes.recv() => pump.event(&note).await,
                    outcome = &mut done => {
                        while let Ok(note) = notes.try_recv() {
                            pump.event(&note).await;
                        }
                        if let Ok(Outcome { response: Some(response), .. }) = outcome {
                            pump.event(&response).await;
                        }
                        break;
                    }
                    _ = ticker.tick() => pump.comment("keep-alive").await,
                    () = watch.closed(), if !pump.client_gone => {
                        pump.client_gone = true;
                        if modern {
                            stream_closed.cancel();
                        }
                    }
                    () = stopping.cancelled() => {
                        stream_closed.cancel();
                        pump.retry(retry_ms).await;
                        break;
                    }
                }
            }
            pump.finish();
        });
        sse_response(body_receiver)
    }

    async fn get(self: Arc<Self>, parts: Parts) -> HttpResponse {
        let headers = &parts.headers;
        let accepts_sse =
            header(headers, "accept").is_some_and(|accept| accept.contains("text/event-stream"));
        if !accepts_sse {
            return plain(
                StatusCode::NOT_ACCEPTABLE,
                "GET needs Accept: text/event-stream",
            );
        }
        let Some(session_id) = header(headers, "mcp-session-id") else {
            return plain(StatusCode::BAD_REQUEST, "GET needs an Mcp-Session-Id");
        };
        let Some(session) = self.server.session(session_id) else {
            return plain(StatusCode::NOT_FOUND, "session not found");
        };
        let (body_sender, body_receiver) = mpsc::channel::<Bytes>(64);
        let resume = header(headers, "last-event-id").and_then(parse_event_id);
        let keep_alive = self.options.keep_alive;
        let retry_ms = self.options.retry_ms;
        let stopping = self.stopping.clone();
        let (stream, cursor, priming) = match resume {
            Some((stream, after)) => (stream, after, None),
            None => {
                // A new standalone stream: its recorder logs the session's notifications for
                // as long as the stream is the session's current one, connected or not, and
                // every GET on it (this one, and later ones with `Last-Event-ID`) reads the log.
                let Some(mut events) = self.server.session_events(session_id) else {
                    return plain(StatusCode::NOT_FOUND, "session not found");
                };
                let (stream, recording) = session.open_standalone_stream();
                let priming = session.record_event(stream, String::new());
                let recorder = session.clone();
                self.tasks.spawn(async move {
                    loop {
                        tokio::select! {
                            event = events.next() => match event {
                                Some(message) => {
                                    recorder.record_event(stream, message.to_string());
                                }
                                None => break,
                            },
                            () = recording.cancelled() => break,
                        }
                    }
                    recorder.finish_stream(stream);
                });
                let cursor = parse_event_id(&priming).map_or(0, |(_, sequence)| sequence);
                (stream, cursor, Some(priming))
            }
        };
        let connection = session.connection();
        self.tasks.spawn(async move {
            let _connection = connection;
            let mut pump = Pump {
                body: body_sender,
                session: Some(session.clone()),
                stream: Some(stream),
                local_sequence: 0,
                client_gone: false,
            };
            let watch = pump.body.clone();
            let mut ticker = tokio::time::interval(keep_alive);
            ticker.reset();
            match &priming {
                Some(id) => {
                    pump.send(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
                        .await;
                }
                None => pump.comment("resumed").await,
            }
            // Follows the stream's log from the cursor: replayed and live events alike come
            // from it, until the stream finishes (a POST stream after its response, a GET
            // stream when a newer one replaced it or the session ended).
            let mut cursor = Some(cursor);
            loop {
                let changed = session.stream_change_listener();
                match session.replay(stream, cursor) {
                    Replay::Events(replayed) => {
                        for (id, data) in replayed {
                            cursor = parse_event_id(&id).map(|(_, sequence)| sequence);
                            pump.raw_event(&id, &data).await;
                        }
                        if pump.client_gone {
                            return;
                        }
                        continue;
                    }
                    // An ended session's streams just close: reconnecting would find no
                    // session.
                    _ if session.closed.is_cancelled() => return,
                    Replay::Finished | Replay::Unknown => {
                        pump.retry(retry_ms).await;
                        return;
                    }
                    Replay::Pending => {}
                }
                tokio::select! {
                    () = changed => {}
                    _ = ticker.tick() => pump.comment("keep-alive").await,
                    () = watch.closed() => return,
                    () = stopping.cancelled() => { pump.retry(retry_ms).await; return; }
                    () = session.closed.cancelled() => return,
                }
            }
        });
        sse_response(body_receiver)
    }

    async fn delete(self: Arc<Self>, parts: Parts) -> HttpResponse {
        let Some(session_id) = header(&parts.headers, "mcp-session-id") else {
            return plain(StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id");
        };
        if self.server.evict_session(session_id).await {
            status_only(StatusCode::OK)
        } else {
            plain(StatusCode::NOT_FOUND, "session not found")
        }
    }
}

/// Writes SSE frames for one stream, recording legacy events for replay.
struct Pump {
    body: mpsc::Sender<Bytes>,
    /// The legacy session whose log records this stream; `None` for stateless streams.
    session: Option<Arc<Session>>,
    stream: Option<u64>,
    /// Event numbers for stateless streams, which have no log.
    local_sequence: u64,
    /// The client closed the connection; events are still logged for replay.
    client_gone: bool,
}

impl Pump {
    /// The priming event: an id to resume from, the reconnection delay, empty data.
    async fn open(&mut self, retry_ms: u64) {
        if let Some(session) = &self.session
            && self.stream.is_none()
        {
            self.stream = Some(session.open_stream());
        }
        let id = self.next_id(String::new());
        self.send(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
            .await;
    }

    async fn event(&mut self, message: &Value) {
        let data = message.to_string();
        let id = self.next_id(data.clone());
        self.send(format!("id: {id}\ndata: {data}\n\n")).await;
    }

    async fn raw_event(&mut self, id: &str, data: &str) {
        self.send(format!("id: {id}\ndata: {data}\n\n")).await;
    }

    async fn comment(&mut self, text: &str) {
        self.send(format!(": {text}\n\n")).await;
    }

    async fn retry(&mut self, retry_ms: u64) {
        self.send(format!("retry: {retry_ms}\n\n")).await;
    }

    fn next_id(&mut self, data: String) -> String {
        match (&self.session, self.stream) {
            (Some(session), Some(stream)) => session.record_event(stream, data),
            _ => {
                self.local_sequence += 1;
                format!("0-{}", self.local_sequence)
            }
        }
    }

    async fn send(&mut self, frame: String) {
        if self.client_gone {
            return;
        }
        if self.body.send(Bytes::from(frame)).await.is_err() {
            self.client_gone = true;
        }
    }

    fn finish(&mut self) {
        if let (Some(session), Some(stream)) = (&self.session, self.stream) {
            session.finish_stream(stream);
        }
    }
}

/// Checks the 2026-07-28 headers against the body (S2): `MCP-Protocol-Version`, `Mcp-Method`,
/// and `Mcp-Name` for methods that name a tool, prompt or resource.
pub fn check_modern_headers(
    headers: &HeaderMap,
    version: &str,
    method: &str,
    params: &Value,
) -> Result<(), McpError> {
    let mismatch = |what: String| Err(McpError::new(codes::HEADER_MISMATCH, what));
    match header_decoded(headers, "mcp-protocol-version")? {
        Some(value) if value == version => {}
        Some(value) => {
            return mismatch(format!(
                "MCP-Protocol-Version {value} does not match _meta version {version}"
            ));
        }
        None => return mismatch("MCP-Protocol-Version header is missing".into()),
    }
    match header_decoded(headers, "mcp-method")? {
        Some(value) if value == method => {}
        Some(value) => {
            return mismatch(format!("Mcp-Method {value} does not match method {method}"));
        }
        None => return mismatch("Mcp-Method header is missing".into()),
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str),
        "resources/read" => params.get("uri").and_then(Value::as_str),
        _ => None,
    };
    if let Some(name) = named {
        match header_decoded(headers, "mcp-name")? {
            Some(value) if value == name => {}
            Some(value) => return mismatch(format!("Mcp-Name {value} does not match {name}")),
            None => return mismatch("Mcp-Name header is missing".into()),
        }
    }
    Ok(())
}

/// A header value, trimmed, with `=?base64?…?=` decoded.
fn header_decoded(headers: &HeaderMap, name: &str) -> Result<Option<String>, McpError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| {
            McpError::new(
                codes::HEADER_MISMATCH,
                format!("{name} is not visible ASCII"),
            )
        })?
        .trim();
    if let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        let decoded = decode_base64(encoded)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                McpError::new(codes::HEADER_MISMATCH, format!("{name} has invalid base64"))
            })?;
        return Ok(Some(decoded));
    }
    Ok(Some(value.to_owned()))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

/// `127.0.0.1`, `localhost` or `[::1]`, without a port or with the bound one.
pub fn host_allowed(host: &str, port: u16) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let (name, host_port) = match host.rsplit_once(':') {
        Some((name, port_text))
            if !name.is_empty() && (name.ends_with(']') || !name.contains(':')) =>
        {
            (name.to_owned(), Some(port_text.to_owned()))
        }
        _ => (host.clone(), None),
    };
    let loopback = matches!(name.as_str(), "127.0.0.1" | "localhost" | "[::1]");
    loopback && host_port.is_none_or(|text| text.parse::<u16>().ok() == Some(port))
}

/// A loopback `http://` origin on any port, or one listed exactly.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim();
    if allowed.iter().any(|entry| entry == origin) {
        return true;
    }
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let name = match rest.rsplit_once(':') {
        Some((name, port))
            if (name.ends_with(']') || !name.contains(':')) && port.parse::<u16>().is_ok() =>
        {
            name
        }
        _ => rest,
    };
    matches!(
        name.to_ascii_lowercase().as_str(),
        "127.0.0.1" | "localhost" | "[::1]"
    )
}

fn answered(outcome: Result<Outcome, oneshot::error::RecvError>) -> HttpResponse {
    match outcome {
        Ok(outcome) => outcome_response(outcome),
        Err(_) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "request handler ended without an answer",
        ),
    }
}

fn outcome_response(outcome: Outcome) -> HttpResponse {
    let status = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::OK);
    let mut response = match &outcome.response {
        Some(body) => json_response(status, body),
        None => status_only(StatusCode::ACCEPTED),
    };
    if let Some(session) = outcome.new_session
        && let Ok(value) = HeaderValue::from_str(&session)
    {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

fn json_response(status: StatusCode, body: &Value) -> HttpResponse {
    let mut response = Response::new(HttpBody::full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn sse_response(body: mpsc::Receiver<Bytes>) -> HttpResponse {
    let mut response = Response::new(HttpBody::Stream(body));
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn too_large(limit: usize) -> HttpResponse {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is over the limit of {limit} bytes"),
    )
}

fn plain(status: StatusCode, text: &str) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": codes::INVALID_REQUEST, "message": text}});
    json_response(status, &body)
}

fn status_only(status: StatusCode) -> HttpResponse {
    let mut response = Response::new(HttpBody::empty());
    *response.status_mut() = status;
    response
}

/// Decodes standard base64 (with padding); `None` for anything malformed.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |byte: u8| -> Option<u32> {
        Some(match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let chunks = bytes.len() / 4;
    for (index, chunk) in bytes.chunks(4).enumerate() {
        let padding = chunk.iter().rev().take_while(|byte| **byte == b'=').count();
        if padding > 2 || (padding > 0 && index + 1 != chunks) {
            return None;
        }
        let mut word = 0u32;
        for &byte in &chunk[..4 - padding] {
            word = (word << 6) | value(byte)?;
        }
        word <<= 6 * padding as u32;
        let decoded = [(word >> 16) as u8, (word >> 8) as u8, word as u8];
        out.extend_from_slice(&decoded[..3 - padding]);
    }
    Some(out)
}
