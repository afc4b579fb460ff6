//! POST: one JSON-RPC message in, its answer out.
//!
//! The body is read within the size cap and the body time limit; the message's era and
//! session are resolved here, once, with the HTTP checks in between (2026-07-28 headers
//! against the body, or the legacy session and its `MCP-Protocol-Version`), and the
//! [`Resolution`] goes to the core with the request. The answer is plain JSON unless the
//! request emits a notification first: then it becomes an SSE stream that carries the
//! notifications and ends with the response. A request its client cancelled gets no
//! response: its stream ends without one (an empty stream when nothing was sent yet).
//!
//! A POST to a per-method path (`<path>/<method>`) is the same exchange once its body is
//! checked to be that method: a gateway that allowed the path has allowed exactly the
//! method the server runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::State;
use super::body::{
    HttpResponse, json_response, outcome_response, plain, sse_response, status_only, too_large,
};
use super::headers::{check_modern_headers, header};
use super::pump::Pump;
use crate::mcp::handler::{McpError, codes};
use crate::mcp::jsonrpc::{self, Message, Request};
use crate::mcp::scope::{LEGACY_VERSIONS, RequestEra, Resolution, request_era, session_not_found};
use crate::mcp::server::{McpServer, Outcome, TransportContext, TransportKind};
use crate::mcp::session::Session;

/// What the HTTP checks decided about a message before the core sees it.
struct Admitted {
    /// What `_meta` says, read once.
    era: RequestEra,
    /// The legacy session `Mcp-Session-Id` names, found and checked.
    session: Option<Arc<Session>>,
}

/// What routing found out about a POST before its body is read.
pub(super) struct Routed {
    /// The method a per-method path names; the body must be that method.
    pub(super) path_method: Option<String>,
    /// The caller's identity from the principal header, already checked.
    pub(super) principal: Option<String>,
}

pub(super) async fn post(
    state: Arc<State>,
    parts: Parts,
    body: Incoming,
    routed: Routed,
) -> HttpResponse {
    let bytes = match read_body(&state, &parts, body).await {
        Ok(bytes) => bytes,
        Err(refusal) => return refusal,
    };
    let message = match jsonrpc::parse(&bytes) {
        Ok(message) => message,
        Err(rejected) => {
            return json_response(StatusCode::BAD_REQUEST, &rejected.to_response());
        }
    };
    if let Some(path_method) = &routed.path_method
        && let Err(refusal) = check_path_method(path_method, &message)
    {
        return *refusal;
    }
    let Admitted { era, session } = match admit(&state.server, &parts.headers, &message) {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    // Every session-less exchange is a scope of its own: HTTP clients share no connection,
    // and their ids restart at 1, so one client's `notifications/cancelled` must never
    // reach another client's request (a stateless request is cancelled by closing its
    // response stream instead).
    let mut context = TransportContext::new(TransportKind::Http, exchange_id());
    context.session_id = session.as_ref().map(|session| session.id.clone());
    context.principal = routed.principal;
    let request = match message {
        Message::Request(request) => request,
        Message::Notification(notification) => {
            state
                .server
                .handle_notification(&notification, session.as_ref(), &context);
            return status_only(StatusCode::ACCEPTED);
        }
        Message::Response(response) => {
            // The answer to a request of the server's own (2025 task input).
            state.server.handle_response(response);
            return status_only(StatusCode::ACCEPTED);
        }
    };
    let modern = era.stated_version().is_some();
    let resolution = Resolution::of(&request.method, era, session.clone());
    answer(state, request, resolution, context, session, modern).await
}

/// A name for one session-less exchange, unique in this process (the scope of its
/// cancellations). A counter, not a random id: nothing outside the process sees it.
fn exchange_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("http:{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A per-method path's rule: the body is one message whose `method` is the one the path
/// names (400 with -32600 otherwise, naming both).
fn check_path_method(path_method: &str, message: &Message) -> Result<(), Box<HttpResponse>> {
    let body_method = message.method();
    if body_method == Some(path_method) {
        return Ok(());
    }
    let id = match message {
        Message::Request(request) => request.id.clone(),
        Message::Notification(_) | Message::Response(_) => Value::Null,
    };
    let body_names = match body_method {
        Some(method) => format!("method {}", shortened(method)),
        None => "no method (it is a response)".to_owned(),
    };
    let error = McpError::new(
        codes::INVALID_REQUEST,
        format!(
            "the path names method {} but the body names {body_names}; POST it to the path \
             of its own method",
            shortened(path_method)
        ),
    );
    Err(Box::new(json_response(
        StatusCode::BAD_REQUEST,
        &jsonrpc::error_response(&id, &error),
    )))
}

/// A method name as an error message quotes it: whole up to 128 characters, cut after.
fn shortened(method: &str) -> String {
    const SHOWN: usize = 128;
    match method.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &method[..cut]),
        None => method.to_owned(),
    }
}

/// The era of `message` and its legacy session, or the refusal to send: a 2026-07-28
/// request's headers must match its body (400); a legacy message's `Mcp-Session-Id` must name
/// a live session (404) and its `MCP-Protocol-Version` a legacy version (400).
fn admit(
    server: &McpServer,
    headers: &HeaderMap,
    message: &Message,
) -> Result<Admitted, Box<HttpResponse>> {
    let era = match message {
        Message::Request(request) => request_era(&request.params),
        Message::Notification(_) | Message::Response(_) => RequestEra::Unstated,
    };
    if let (Some(version), Message::Request(request)) = (era.stated_version(), message) {
        if let Err(error) = check_modern_headers(headers, version, &request.method, &request.params)
        {
            return Err(Box::new(json_response(
                StatusCode::BAD_REQUEST,
                &jsonrpc::error_response(&request.id, &error),
            )));
        }
        return Ok(Admitted { era, session: None });
    }
    let initialize = matches!(message, Message::Request(request) if request.method == "initialize");
    let Some(session_id) = header(headers, "mcp-session-id").filter(|_| !initialize) else {
        return Ok(Admitted { era, session: None });
    };
    let Some(session) = server.session(session_id) else {
        let id = match message {
            Message::Request(request) => request.id.clone(),
            Message::Notification(_) | Message::Response(_) => Value::Null,
        };
        return Err(Box::new(json_response(
            StatusCode::NOT_FOUND,
            &jsonrpc::error_response(&id, &session_not_found()),
        )));
    };
    if let Some(version) = header(headers, "mcp-protocol-version")
        && !LEGACY_VERSIONS.contains(&version)
    {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            &format!("unsupported MCP-Protocol-Version {version}"),
        )));
    }
    Ok(Admitted {
        era,
        session: Some(session),
    })
}

/// The whole body of a POST, within the size cap and the body time limit; the refusal
/// (413, 400, or 408 with `Connection: close`) otherwise.
pub(super) async fn read_body(
    state: &State,
    parts: &Parts,
    body: Incoming,
) -> Result<Bytes, HttpResponse> {
    let limit = state.options.max_body_bytes;
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large(limit));
    }
    let body_limit = state.options.limits.body;
    match tokio::time::timeout(body_limit, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large(limit)),
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

/// Runs the request and answers: JSON unless a notification comes before the answer.
/// `modern` requests die with their caller; legacy ones outlive a disconnect.
///
/// The handler runs inline on the connection's task, the cheap case of an ordinary answer
/// (no task, no wake-up of another thread). It moves onto the server's tracker, still
/// pending, when its answer turns into an SSE stream or when its client goes away (this
/// future is dropped): so it always runs to its end, as a spawned task would, and shutdown
/// still waits for it.
async fn answer(
    state: Arc<State>,
    request: Request,
    resolution: Resolution,
    mut context: TransportContext,
    session: Option<Arc<Session>>,
    modern: bool,
) -> HttpResponse {
    let _connection = session.as_ref().map(|session| session.connection());
    let (notes_sender, mut notes) = crate::mcp::outbox::outbox();
    let stream_closed = CancellationToken::new();
    context.notifications = Some(notes_sender);
    context.cancel = stream_closed.clone();
    let cancel_on_drop = modern.then(|| stream_closed.clone().drop_guard());
    let server = state.server.clone();
    let mut handler = Detachable::new(
        async move {
            server
                .handle_request_wire(request, resolution, &context)
                .await
        },
        state.tasks.clone(),
    );
    // The handler's side of `notes` closes when it finishes, after its last notification,
    // so a notification sent just before the answer is still found here. The handler is
    // polled first: an answer ready at once then leaves no waker of this task on `notes`,
    // whose closing would wake the task from inside its own poll (tokio reschedules such a
    // task as a yield and rouses the runtime's other worker for it, on every request).
    let (first_note, done) = tokio::select! {
        biased;
        outcome = &mut handler => match notes.try_recv() {
            Some(note) => (note, answered_already(outcome)),
            None => return request_outcome_response(outcome),
        },
        Some(note) = notes.recv() => (note, handler.detach()),
    };
    if let Some(guard) = cancel_on_drop {
        guard.disarm();
    }
    let (body_sender, body_receiver) = mpsc::channel::<Bytes>(64);
    let stream = AnswerStream {
        pump: Pump::new(
            body_sender,
            if modern { None } else { session.clone() },
            None,
        ),
        notes,
        done,
        stream_closed,
        modern,
    };
    let connection = session.as_ref().map(|session| session.connection());
    let state_for_stream = state.clone();
    state.tasks.spawn(async move {
        let _connection = connection;
        stream.run(&state_for_stream, first_note).await;
    });
    sse_response(body_receiver)
}

/// The answer to a request whose outcome came before any notification. A request the client
/// cancelled (`notifications/cancelled`) has no response, as the cancellation utility asks;
/// since a request's POST must still be answered with JSON or an SSE stream (202 is for
/// notifications and responses only), it gets an SSE stream that ends at once, with no
/// event. Without a priming event id the client has nothing to resume, so it does not
/// reconnect for it.
fn request_outcome_response(outcome: Outcome) -> HttpResponse {
    if outcome.response.is_none() && outcome.json.is_none() {
        let (_ended, body) = mpsc::channel::<Bytes>(1);
        return sse_response(body);
    }
    outcome_response(outcome)
}

/// An outcome already in hand, as the stream's `done` channel carries one.
fn answered_already(outcome: Outcome) -> oneshot::Receiver<Outcome> {
    let (sender, receiver) = oneshot::channel();
    let _ = sender.send(outcome);
    receiver
}

/// A request handler polled inline that finishes on the tracker once nobody polls it here.
struct Detachable {
    /// The handler while it is pending here; `None` once it finished or moved.
    future: Option<Pin<Box<dyn Future<Output = Outcome> + Send>>>,
    /// Where a handler left behind goes, so shutdown waits for it.
    tasks: TaskTracker,
}

impl Detachable {
    fn new(future: impl Future<Output = Outcome> + Send + 'static, tasks: TaskTracker) -> Self {
        Detachable {
            future: Some(Box::pin(future)),
            tasks,
        }
    }

    /// Moves the pending handler onto the tracker; its outcome arrives on the receiver.
    fn detach(&mut self) -> oneshot::Receiver<Outcome> {
        let (sender, receiver) = oneshot::channel();
        if let Some(future) = self.future.take() {
            self.tasks.spawn(async move {
                let _ = sender.send(future.await);
            });
        }
        receiver
    }
}

impl Future for Detachable {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Pending;
        };
        let outcome = std::task::ready!(future.as_mut().poll(cx));
        self.future = None;
        Poll::Ready(outcome)
    }
}

impl Drop for Detachable {
    /// The client went away mid-request: the handler finishes on the tracker, its answer
    /// unsent (a stateless one sees its cancellation there). Outside a runtime (the
    /// process is ending) there is nowhere to run it.
    fn drop(&mut self) {
        if let Some(future) = self.future.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(self.tasks.track_future(future));
        }
    }
}

/// A request's SSE answer: its notifications as they come, then its response.
struct AnswerStream {
    /// Writes the stream; records it for replay in a legacy session.
    pump: Pump,
    /// The request's notifications, as the core forwards them.
    notes: crate::mcp::outbox::OutboxReceiver,
    /// The core's outcome, once the request is answered.
    done: oneshot::Receiver<Outcome>,
    /// Cancels a stateless request when its client goes, and any request at server stop.
    stream_closed: CancellationToken,
    /// A stateless request: a closed stream cancels it.
    modern: bool,
}

impl AnswerStream {
    async fn run(mut self, state: &State, first_note: Value) {
        let retry_ms = state.options.retry_ms;
        let pump = &mut self.pump;
        pump.open(retry_ms).await;
        pump.event(&first_note).await;
        let watch = pump.body.clone();
        let mut ticker = tokio::time::interval(state.options.keep_alive);
        ticker.reset();
        loop {
            tokio::select! {
                Some(note) = self.notes.recv() => pump.event(&note).await,
                outcome = &mut self.done => {
                    while let Some(note) = self.notes.try_recv() {
                        pump.event(&note).await;
                    }
                    match outcome {
                        Ok(Outcome { json: Some(text), .. }) => pump.event_text(text).await,
                        Ok(Outcome { response: Some(response), .. }) => {
                            pump.event(&response).await;
                        }
                        _ => {}
                    }
                    break;
                }
                _ = ticker.tick() => pump.comment("keep-alive").await,
                () = watch.closed(), if !pump.client_gone => {
                    pump.client_gone = true;
                    if self.modern {
                        self.stream_closed.cancel();
                    }
                }
                () = state.stopping.cancelled() => {
                    self.stream_closed.cancel();
                    pump.retry(retry_ms).await;
                    break;
                }
            }
        }
        pump.finish();
    }
}
