//! One ACP JSON-RPC connection: newline-delimited JSON over an async reader/writer pair, with
//! a reader task that routes responses, agent requests and `session/update` notifications.
//!
//! We speak the wire protocol with this small hand-written client instead of the
//! `agent-client-protocol` crate. That crate validates every notification against its schema
//! and silently drops the ones that fail, and Claude's adapter sends `usage_update` with
//! `used:null`, so real updates vanished without a trace. Its request handlers also run inside
//! the connection's dispatch loop: a permission request that waits for a human would stall
//! every other session multiplexed on the same agent process. Agents add variants faster than
//! schema crates follow, so we want to parse leniently (unknown `sessionUpdate` tags, unknown
//! auth method types, `_meta`, `_`-prefixed notifications) and decide ourselves what matters.
//!
//! Ids are per direction: the agent numbers its own requests (from 0) and they may collide
//! with ours, so a message is a response only when it has an id and no `method`. Agent
//! requests are answered from their own tasks so a slow one never blocks the reader. When the
//! stream ends or breaks, every pending request fails with a message naming the backend, what
//! happened to the process, and the method that was waiting.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::runner::AgentUpdate;
use crate::util::sync::Lock;

/// JSON-RPC error codes the client produces or branches on.
pub(crate) mod codes {
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// ACP `auth_required`.
    pub(crate) const AUTH_REQUIRED: i64 = -32000;
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// Why a request did not produce a result.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum RpcError {
    /// The agent answered with a JSON-RPC error.
    #[error("{message} (code {code})")]
    Remote {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The connection ended before an answer arrived; the text names backend and method.
    #[error("{0}")]
    Closed(String),
}

/// Receives what the agent sends about one session. The reader calls `update` inline, in
/// stream order, so by the time a `session/prompt` response is delivered every chunk that
/// preceded it has been seen.
#[async_trait]
pub(crate) trait SessionHandler: Send + Sync {
    fn update(&self, update: AgentUpdate);
    /// Answers `session/request_permission`; returns the JSON-RPC result (`{outcome:…}`).
    async fn request_permission(&self, params: Value) -> Value;
    /// A `_`-prefixed extension notification that names this session (`params.sessionId`).
    fn extension(&self, _method: &str, _params: &Value) {}
    /// Folders whose files the agent may read and write through `fs/*` requests: the call's
    /// working tree and any wider roots configured for the backend. None by default.
    fn file_roots(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Produces the description of why the stream ended (for a process: its exit status), once.
pub(crate) type CloseReason =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = String> + Send>> + Send>;

/// A cheap-clone handle to one connection.
#[derive(Clone)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
}

struct Shared {
    /// Names the backend in every error that leaves this module.
    backend: String,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    next_id: AtomicU64,
    state: Mutex<State>,
    sessions: Mutex<HashMap<String, Arc<dyn SessionHandler>>>,
    /// Cancelled once the connection is closed and every pending request has failed.
    closed: CancellationToken,
    /// Asks the reader to stop (the writer broke); the reader then closes everything.
    broken: CancellationToken,
    /// Cancelled when the agent sent a message past [`MAX_MESSAGE_BYTES`]: the owner of its
    /// process stops it.
    overflowed: CancellationToken,
    /// One permit per agent request being answered or whose answer waits to be written.
    requests: Arc<Semaphore>,
}

/// Requests of one agent process answered at once. The reader takes a permit before it
/// starts answering one and stops reading while none is free, so an agent that floods
/// requests (or stops reading our answers) makes the daemon hold at most this many, and
/// waits; a real agent has one or two in flight (a permission request, a file read).
pub(crate) const MAX_AGENT_REQUESTS: usize = 16;

struct State {
    pending: HashMap<u64, Pending>,
    /// Set when the stream ended: the reason, for requests made afterwards.
    closed_reason: Option<String>,
}

struct Pending {
    method: String,
    /// The response's `result` as the agent wrote it: each caller reads what it needs.
    reply: oneshot::Sender<Result<Box<RawValue>, RpcError>>,
}

enum Outgoing {
    Line(String),
    /// The answer to one of the agent's requests, with the permit that request held: it is
    /// given back once the answer is written, so answers waiting for an agent that does not
    /// read count against [`MAX_AGENT_REQUESTS`] too.
    Answer(String, OwnedSemaphorePermit),
    /// Close our side of the stream so the agent sees EOF.
    Close,
}

/// Removes a pending entry when the waiting future is dropped (timeout, cancellation).
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.state.locked().pending.remove(&self.id);
    }
}

impl Connection {
    /// Starts the reader and writer tasks on `tracker`. `close_reason` describes why the
    /// stream ended (for an agent process, its exit status); without one the text says the
    /// agent closed the connection.
    pub(crate) fn start<R, W>(
        backend: impl Into<String>,
        reader: R,
        writer: W,
        close_reason: Option<CloseReason>,
        tracker: &TaskTracker,
    ) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            backend: backend.into(),
            outgoing,
            next_id: AtomicU64::new(1),
            state: Mutex::new(State {
                pending: HashMap::new(),
                closed_reason: None,
            }),
            sessions: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            broken: CancellationToken::new(),
            overflowed: CancellationToken::new(),
            requests: Arc::new(Semaphore::new(MAX_AGENT_REQUESTS)),
        });
        tracker.spawn(write_loop(shared.clone(), writer, outgoing_rx));
        tracker.spawn(read_loop(
            shared.clone(),
            reader,
            close_reason,
            tracker.clone(),
        ));
        Connection { shared }
    }

    /// Sends a request and waits for its response. Dropping the future forgets the request.
    pub(crate) async fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, RpcError> {
        let raw = self.request_raw(method, params).await?;
        // Valid JSON already; only nesting deeper than the parser's limit fails here.
        serde_json::from_str(raw.get()).map_err(|error| RpcError::Remote {
            code: codes::INTERNAL_ERROR,
            message: format!("the answer to {method} could not be read: {error}"),
            data: None,
        })
    }

    /// [`Connection::request`], answering with the `result` as the agent wrote it, for a
    /// caller that reads a few members of a large answer (or none).
    pub(crate) async fn request_raw<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Box<RawValue>, RpcError> {
        let shared = &*self.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        {
            let mut state = shared.state.locked();
            if let Some(reason) = &state.closed_reason {
                return Err(RpcError::Closed(closed_message(
                    &shared.backend,
                    reason,
                    method,
                )));
            }
            state.pending.insert(
                id,
                Pending {
                    method: method.to_owned(),
                    reply,
                },
            );
        }
        let _guard = PendingGuard { shared, id };
        let line = OutgoingRequest {
            jsonrpc: "2.0",
            id,
            method,
            params,
        };
        let line = match serde_json::to_string(&line) {
            Ok(line) => line,
            Err(error) => {
                return Err(RpcError::Closed(format!(
                    "backend {}: the params of {method} could not be written: {error}",
                    shared.backend
                )));
            }
        };
        if shared.outgoing.send(Outgoing::Line(line)).is_err() {
            return Err(self.closed_error(method));
        }
        match answer.await {
            Ok(result) => result,
            // The sender went away without an answer: the reader shut down.
            Err(_) => Err(self.closed_error(method)),
        }
    }

    /// Sends a notification (no answer expected).
    pub(crate) fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        let line = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.shared
            .outgoing
            .send(Outgoing::Line(line.to_string()))
            .map_err(|_| self.closed_error(method))
    }

    /// Routes `session/update` and permission requests for `session_id` to `handler`.
    pub(crate) fn register_session(&self, session_id: &str, handler: Arc<dyn SessionHandler>) {
        self.shared
            .sessions
            .locked()
            .insert(session_id.to_owned(), handler);
    }

    pub(crate) fn unregister_session(&self, session_id: &str) {
        self.shared.sessions.locked().remove(session_id);
    }

    /// Closes our end of the stream; a well-behaved agent exits on EOF.
    pub(crate) fn close_input(&self) {
        let _ = self.shared.outgoing.send(Outgoing::Close);
    }

    /// Cancelled (before the connection closes) when the agent sent a message past
    /// [`MAX_MESSAGE_BYTES`].
    pub(crate) fn overflowed(&self) -> CancellationToken {
        self.shared.overflowed.clone()
    }

    /// Cancelled once the connection closed, for a task that must end with it.
    pub(crate) fn closed_token(&self) -> CancellationToken {
        self.shared.closed.clone()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// Resolves once the stream has ended and pending requests have failed.
    #[cfg(test)]
    pub(crate) async fn closed(&self) {
        self.shared.closed.cancelled().await
    }

    fn closed_error(&self, method: &str) -> RpcError {
        let state = self.shared.state.locked();
        let reason = state
            .closed_reason
            .as_deref()
            .unwrap_or("the connection to the agent closed");
        RpcError::Closed(closed_message(&self.shared.backend, reason, method))
    }
}

/// A request as it goes on the wire, written without building it as a JSON value first.
#[derive(Serialize)]
struct OutgoingRequest<'a, P: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: &'a P,
}

fn closed_message(backend: &str, reason: &str, method: &str) -> String {
    format!("backend {backend}: {reason} while waiting for {method}")
}

/// The most bytes of queued messages the writer joins into one write. What is queued once it
/// woke and let the other ready tasks run goes out together, up to this much: one system
/// call and one wake-up of the agent instead of one per message. A longer message goes out
/// on its own.
const WRITE_BATCH_BYTES: usize = 64 << 10;

async fn write_loop<W>(
    shared: Arc<Shared>,
    writer: W,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut writer = writer;
    let mut batch: Vec<u8> = Vec::new();
    let mut permits: Vec<OwnedSemaphorePermit> = Vec::new();
    while let Some(message) = tokio::select! {
        message = outgoing.recv() => message,
        _ = shared.closed.cancelled() => None,
    } {
        // The sender's task woke this one, which runs next: a turn of the scheduler first lets
        // every other task that is ready queue its message too (calls settle and start in
        // waves), so they go out in one write.
        tokio::task::yield_now().await;
        let mut next = Some(message);
        let mut close = false;
        while let Some(message) = next.take() {
            match message {
                Outgoing::Line(line) => append_line(&mut batch, &line),
                Outgoing::Answer(line, permit) => {
                    append_line(&mut batch, &line);
                    permits.push(permit);
                }
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if batch.len() < WRITE_BATCH_BYTES {
                next = outgoing.try_recv().ok();
            }
        }
        let result = if batch.is_empty() {
            Ok(())
        } else {
            async {
                writer.write_all(&batch).await?;
                writer.flush().await
            }
            .await
        };
        batch.clear();
        if batch.capacity() > WRITE_BATCH_BYTES {
            batch = Vec::new();
        }
        permits.clear();
        if let Err(error) = result {
            tracing::debug!(backend = %shared.backend, %error, "writing to the agent failed");
            shared.broken.cancel();
            return;
        }
        if close {
            let _ = writer.shutdown().await;
            return;
        }
    }
}

/// Appends one message and its newline to the writer's batch.
fn append_line(batch: &mut Vec<u8>, line: &str) {
    batch.extend_from_slice(line.as_bytes());
    batch.push(b'\n');
}

async fn read_loop<R>(
    shared: Arc<Shared>,
    reader: R,
    close_reason: Option<CloseReason>,
    tracker: TaskTracker,
) where
    R: AsyncRead + Unpin + Send + 'static,
{
    let mut reader = BufReader::new(reader);
    let mut buffer = Vec::new();
    let mut broken_by_writer = false;
    let mut overflowed = false;
    loop {
        buffer.clear();
        let read = tokio::select! {
            read = read_line(&mut reader, &mut buffer, MAX_MESSAGE_BYTES) => read,
            _ = shared.broken.cancelled() => { broken_by_writer = true; break; }
        };
        match read {
            Ok(Line::End) => break,
            Ok(Line::Complete) => {
                let line = String::from_utf8_lossy(&buffer);
                let line = line.trim();
                let request = if line.is_empty() {
                    None
                } else {
                    dispatch(&shared, line)
                };
                if let Some(request) = request {
                    // No free permit: stop reading until an answer is written.
                    let permit = tokio::select! {
                        permit = shared.requests.clone().acquire_owned() => permit,
                        _ = shared.broken.cancelled() => { broken_by_writer = true; break; }
                    };
                    let Ok(permit) = permit else { break };
                    tracker.spawn(answer_in_background(shared.clone(), request, permit));
                }
            }
            Ok(Line::TooLong) => {
                overflowed = true;
                break;
            }
            Err(error) => {
                tracing::debug!(backend = %shared.backend, %error, "reading from the agent failed");
                break;
            }
        }
    }
    drop(buffer);
    let mut reason = if overflowed {
        // The agent is killed (by whoever owns its process, told through `overflowed`); its
        // exit says nothing more than this.
        shared.overflowed.cancel();
        format!(
            "the agent sent a message longer than {} MiB, the most agentprism reads; the agent was stopped",
            MAX_MESSAGE_BYTES >> 20
        )
    } else {
        match close_reason {
            Some(describe) => describe().await,
            None => "the agent closed the connection".to_owned(),
        }
    };
    if broken_by_writer {
        reason = format!("{reason} (writing to it failed)");
    }
    let pending: Vec<Pending> = {
        let mut state = shared.state.locked();
        state.closed_reason = Some(reason.clone());
        state.pending.drain().map(|(_, pending)| pending).collect()
    };
    for entry in pending {
        let message = closed_message(&shared.backend, &reason, &entry.method);
        let _ = entry.reply.send(Err(RpcError::Closed(message)));
    }
    shared.sessions.locked().clear();
    shared.closed.cancel();
}

/// The longest message an agent may send: one line of NDJSON, newline excluded. Past it the
/// connection closes and the agent is stopped, so the daemon never holds more of one message
/// than this.
pub(crate) const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// How reading one line ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The stream ended with nothing (or only a partial line without a newline, which is
    /// handed on as the last line) read.
    End,
    /// A line (with its newline, or the stream's last bytes) is in the buffer.
    Complete,
    /// The line grew past the limit before its newline; what was read is dropped.
    TooLong,
}

/// Reads one line into `buffer`, holding at most `limit` bytes of it (plus its newline).
/// Cancel-safe as `read_until` is: every await is `fill_buf`, and what it returned is taken
/// before the next one.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buffer.is_empty() {
                Line::End
            } else {
                Line::Complete
            });
        }
        let (take, ends) = match available.iter().position(|byte| *byte == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let body = take - usize::from(ends);
        if buffer.len() + body > limit {
            reader.consume(take);
            buffer.clear();
            return Ok(Line::TooLong);
        }
        buffer.extend_from_slice(&available[..take]);
        reader.consume(take);
        if ends {
            return Ok(Line::Complete);
        }
    }
}

/// A request the agent made of us, to answer.
struct InboundRequest {
    id: Value,
    method: String,
    params: Value,
}

/// Answers `request` and queues the answer with `permit`, which the writer gives back.
async fn answer_in_background(
    shared: Arc<Shared>,
    request: InboundRequest,
    permit: OwnedSemaphorePermit,
) {
    let InboundRequest { id, method, params } = request;
    let answer = tokio::select! {
        answer = answer_request(&shared, &method, params) => answer,
        // The agent is gone; nobody is left to read an answer.
        _ = shared.closed.cancelled() => return,
    };
    let line = match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": code, "message": message},
        }),
    };
    let _ = shared
        .outgoing
        .send(Outgoing::Answer(line.to_string(), permit));
}

/// One inbound message, read without building it as a JSON value: the members that route
/// it, and the rest as the agent wrote it, parsed only by whoever needs it.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<Value>,
}

/// A notification's params as far as routing needs them: the session it names
/// (`params.sessionId`) and, for `session/update`, its update.
#[derive(Deserialize)]
struct NotificationParams<'a> {
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    update: Option<&'a RawValue>,
}

/// Routes one inbound message; a request is handed back for the reader to answer under a
/// permit ([`answer_in_background`]). Never blocks.
fn dispatch(shared: &Arc<Shared>, line: &str) -> Option<InboundRequest> {
    let message: Envelope = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            tracing::debug!(backend = %shared.backend, %error, "ignoring a line that is not a JSON-RPC object");
            return None;
        }
    };
    let handler = |session: Option<&str>| {
        session.and_then(|session| shared.sessions.locked().get(session).cloned())
    };
    let parse = |raw: Option<&RawValue>| {
        raw.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .unwrap_or(Value::Null)
    };
    let id = message.id.filter(|id| !id.is_null());
    match (message.method, id) {
        (Some(method), Some(id)) => {
            return Some(InboundRequest {
                id,
                method: method.into_owned(),
                params: parse(message.params),
            });
        }
        (Some(method), None) => {
            // Anything else we do not know is ignored on purpose.
            if method != "session/update" && !method.starts_with('_') {
                return None;
            }
            let text = message.params.map_or("null", RawValue::get);
            let params = serde_json::from_str::<NotificationParams>(text).ok()?;
            let handler = handler(params.session_id.as_deref())?;
            if method == "session/update" {
                handler.update(parse_update(&parse(params.update)));
            } else {
                handler.extension(&method, &parse(message.params));
            }
        }
        (None, Some(id)) => {
            let Some(id) = response_id(&id) else {
                tracing::debug!(backend = %shared.backend, %id, "ignoring a response with an id we never used");
                return None;
            };
            let entry = shared.state.locked().pending.remove(&id);
            let Some(entry) = entry else {
                tracing::debug!(backend = %shared.backend, id, "ignoring a response nobody waits for");
                return None;
            };
            let result = match message.error {
                Some(error) => Err(RpcError::Remote {
                    code: error
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(codes::INTERNAL_ERROR),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    data: error.get("data").cloned(),
                }),
                None => Ok(message
                    .result
                    .map_or_else(|| RawValue::NULL.to_owned(), RawValue::to_owned)),
            };
            let _ = entry.reply.send(result);
        }
        (None, None) => {
            tracing::debug!(backend = %shared.backend, "ignoring a message with neither id nor method");
        }
    }
    None
}

/// Our ids are numbers; accept a peer that echoes them back as strings.
fn response_id(id: &Value) -> Option<u64> {
    id.as_u64()
        .or_else(|| id.as_str().and_then(|text| text.parse().ok()))
}

async fn answer_request(
    shared: &Shared,
    method: &str,
    params: Value,
) -> Result<Value, (i64, String)> {
    match method {
        "session/request_permission" => {
            let handler = params
                .get("sessionId")
                .and_then(Value::as_str)
                .and_then(|session| shared.sessions.locked().get(session).cloned());
            match handler {
                Some(handler) => Ok(handler.request_permission(params).await),
                // Nobody can answer for a session we do not know; refusing is the safe default.
                None => Ok(json!({"outcome": {"outcome": "cancelled"}})),
            }
        }
        "fs/read_text_file" | "fs/write_text_file" => {
            // A request for an unknown session has no working tree, so every path is refused.
            let roots = params
                .get("sessionId")
                .and_then(Value::as_str)
                .and_then(|session| shared.sessions.locked().get(session).cloned())
                .map(|handler| handler.file_roots())
                .unwrap_or_default();
            crate::acp::file_roots::answer(method, &params, &roots).await
        }
        _ => Err((
            codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

/// Turns a `session/update` `update` object into an [`AgentUpdate`], leniently: fields may be
/// missing or null, and tags we do not know become `Other(tag)`.
pub(crate) fn parse_update(update: &Value) -> AgentUpdate {
    let text_of = |field: &str| {
        update
            .get(field)
            .and_then(|content| content.get("text"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let string_of = |field: &str| update.get(field).and_then(Value::as_str).map(str::to_owned);
    let tag = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match tag {
        "agent_message_chunk" => match text_of("content") {
            Some(text) if crate::acp::chatter::is_chatter(&text, update) => {
                AgentUpdate::Notice(text)
            }
            Some(text) => AgentUpdate::MessageChunk(text),
            None => AgentUpdate::Other(tag.to_owned()),
        },
        "agent_thought_chunk" => match text_of("content") {
            Some(text) => AgentUpdate::ThoughtChunk(text),
            None => AgentUpdate::Other(tag.to_owned()),
        },
        "tool_call" | "tool_call_update" => AgentUpdate::ToolCall {
            id: string_of("toolCallId").unwrap_or_default(),
            title: string_of("title").unwrap_or_default(),
            status: string_of("status"),
        },
        "usage_update" => AgentUpdate::ContextUsage {
            used: update.get("used").and_then(Value::as_u64),
            size: update.get("size").and_then(Value::as_u64),
        },
        "plan" => AgentUpdate::Plan(update.get("entries").cloned().unwrap_or(Value::Null)),
        "current_mode_update" => match string_of("currentModeId") {
            Some(mode) => AgentUpdate::ModeChanged(mode),
            None => AgentUpdate::Other(tag.to_owned()),
        },
        other => AgentUpdate::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod line_tests {
    use super::{Line, read_line};

    /// Reads every line of `input` with `limit`, in pieces of `chunk` bytes.
    async fn lines(input: &[u8], limit: usize, chunk: usize) -> Vec<(Line, Vec<u8>)> {
        let reader = tokio::io::BufReader::with_capacity(chunk, input);
        let mut reader = reader;
        let mut read = Vec::new();
        loop {
            let mut buffer = Vec::new();
            let line = read_line(&mut reader, &mut buffer, limit).await.unwrap();
            if line == Line::End {
                return read;
            }
            let stop = line == Line::TooLong;
            read.push((line, buffer));
            if stop {
                return read;
            }
        }
    }

    #[tokio::test]
    async fn a_line_at_the_limit_is_read_and_one_byte_more_is_refused() {
        for chunk in [1, 3, 64] {
            let at = lines(b"abcd\nxy", 4, chunk).await;
            assert_eq!(
                at,
                [
                    (Line::Complete, b"abcd\n".to_vec()),
                    (Line::Complete, b"xy".to_vec())
                ],
                "chunk {chunk}"
            );
            let over = lines(b"abcde\nxy\n", 4, chunk).await;
            assert_eq!(over, [(Line::TooLong, Vec::new())], "chunk {chunk}");
            let endless = lines(&[b'x'; 1000], 10, chunk).await;
            assert_eq!(endless, [(Line::TooLong, Vec::new())], "chunk {chunk}");
        }
        assert!(lines(b"", 4, 8).await.is_empty());
    }
}
