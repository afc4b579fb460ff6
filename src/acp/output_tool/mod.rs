//! The client-hosted `StructuredOutput` tool: a loopback HTTP MCP server through which an
//! agent hands back a schema'd call's answer as tool arguments instead of as text.
//!
//! A session of a call with an output schema, on an agent that advertises HTTP MCP servers
//! (`agentCapabilities.mcpCapabilities.http`), registers here and passes the agent one more
//! `mcpServers` entry. Each registration has its own unguessable path (128 random bits), so
//! one server serves every call and an agent reaches only its own call's tool; any other
//! path, a request from a browser page (one carrying `Origin`), a method other than POST and
//! a body over [`MAX_BODY`] are refused, and a connection another local user opened (as the
//! kernel names its owner, `util::socket_owner`) is closed before a byte is read. The server binds 127.0.0.1 on first use, runs on a
//! thread of its own (so it outlives no runtime it was not started on) and stops when the
//! last handle to it is dropped. What [`mcp`] accepts is kept in the registration until the
//! session takes it; dropping the registration retires its path.
//!
//! The built-in Claude backend is offered its adapter's own channel instead ([`claude`]):
//! Claude Code defers MCP tools behind a search tool, which would cost the model a round trip
//! before it could answer.

pub(crate) mod claude;
mod mcp;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::util::sync::Lock;

pub(crate) use mcp::TOOL_NAME;

/// Largest request body taken, in bytes: an answer bigger than this is refused (413).
pub(crate) const MAX_BODY: usize = 4 * 1024 * 1024;

/// Connections served at once; more wait for a free one.
const MAX_CONNECTIONS: usize = 32;

/// How long one connection may stay open, so a stalled client cannot hold a slot forever.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(600);

/// The `mcpServers` name the tool's server goes by.
const SERVER_NAME: &str = "agentprism_output";

/// Whether the agent (by its `agentInfo.name`) keeps a session's MCP servers for every later
/// session of its process. OpenCode 1.x adds them to its instance, where they stay after the
/// session ends: a sibling session, or the next one on the process, would see this call's
/// tool (and call it, to a path that is gone or answers for another schema). Such an agent is
/// offered the tool only on a process no other session holds, and that process is retired
/// from the pool, so it ends with the session.
pub(crate) fn mcp_servers_outlive_sessions(agent_name: &str) -> bool {
    agent_name.eq_ignore_ascii_case("opencode")
}

/// What a session offered its agent for the call's structured answer.
pub(crate) enum Offer {
    /// This server's `StructuredOutput` tool.
    Tool(Registration),
    /// Claude Code's own structured output for this schema ([`claude`]).
    Claude(Value),
}

/// The shared server; cheap to clone. Binds on the first [`OutputTools::register`].
#[derive(Clone, Default)]
pub(crate) struct OutputTools {
    inner: Arc<Inner>,
}

/// One call's claim on the server: its `mcpServers` entry and the answer the agent gave.
pub(crate) struct Registration {
    inner: Arc<Inner>,
    token: String,
    slot: Arc<CallSlot>,
    url: String,
}

impl OutputTools {
    /// A slot for one call with output schema `schema`; fails only when the server cannot
    /// bind or no randomness is available, in which case the call goes without the tool.
    pub(crate) fn register(&self, schema: &Value) -> Result<Registration, String> {
        let address = self.inner.address()?;
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|error| format!("no randomness: {error}"))?;
        let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let slot = Arc::new(CallSlot {
            schema: schema.clone(),
            answer: Mutex::new(None),
        });
        self.inner
            .slots
            .locked()
            .insert(token.clone(), slot.clone());
        Ok(Registration {
            inner: self.inner.clone(),
            url: format!("http://{address}/{token}"),
            token,
            slot,
        })
    }
}

impl Registration {
    /// The ACP `mcpServers` entry that offers the tool.
    pub(crate) fn server(&self) -> Value {
        json!({"type": "http", "name": SERVER_NAME, "url": self.url, "headers": []})
    }

    /// The last answer the agent gave through the tool that passed validation, taken once.
    pub(crate) fn take(&self) -> Option<Value> {
        self.slot.answer.locked().take()
    }

    #[cfg(test)]
    fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.inner.slots.locked().remove(&self.token);
    }
}

#[derive(Default)]
struct Inner {
    slots: Mutex<HashMap<String, Arc<CallSlot>>>,
    bound: OnceLock<Result<SocketAddr, String>>,
    stop: CancellationToken,
}

impl Inner {
    fn address(self: &Arc<Self>) -> Result<SocketAddr, String> {
        self.bound
            .get_or_init(|| start(Arc::downgrade(self), self.stop.clone()))
            .clone()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct CallSlot {
    schema: Value,
    answer: Mutex<Option<Value>>,
}

impl mcp::Slot for CallSlot {
    fn schema(&self) -> &Value {
        &self.schema
    }

    fn accept(&self, value: Value) {
        *self.answer.locked() = Some(value);
    }
}

/// Binds 127.0.0.1 on an ephemeral port and serves it from a thread of its own until `stop`.
fn start(inner: Weak<Inner>, stop: CancellationToken) -> Result<SocketAddr, String> {
    let listener = StdListener::bind(("127.0.0.1", 0))
        .map_err(|error| format!("cannot bind the output tool's server: {error}"))?;
    let address = listener
        .local_addr()
        .map_err(|error| format!("the output tool's server has no address: {error}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|error| format!("cannot set up the output tool's server: {error}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the output tool's server: {error}"))?;
    std::thread::Builder::new()
        .name("output-tool".into())
        .spawn(move || runtime.block_on(serve(listener, inner, stop)))
        .map_err(|error| format!("cannot start the output tool's server: {error}"))?;
    Ok(address)
}

async fn serve(listener: StdListener, inner: Weak<Inner>, stop: CancellationToken) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%error, "the output tool's server could not listen");
            return;
        }
    };
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) if from_another_user(&listener, peer) => {
                    drop(stream);
                    continue;
                }
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "the output tool's server failed to accept");
                    continue;
                }
            },
        };
        let inner = inner.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| respond(inner.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::timeout(CONNECTION_LIFETIME, connection) => {}
            }
            drop(permit);
        });
    }
}

/// Whether the kernel says another local user opened this connection: refused before a byte
/// is read. Where the kernel cannot be asked, the call's secret path is the guard.
fn from_another_user(listener: &tokio::net::TcpListener, peer: std::net::SocketAddr) -> bool {
    let Ok(local) = listener.local_addr() else {
        return true;
    };
    match crate::util::socket_owner::socket_owner(local, peer) {
        Ok(Some(uid)) => uid != nix::unistd::geteuid().as_raw(),
        Ok(None) => true,
        Err(_) => false,
    }
}

async fn respond(
    inner: Weak<Inner>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    Ok(answer(inner, request).await)
}

/// One HTTP exchange: the refusals first, then the JSON-RPC message to [`mcp::handle`].
async fn answer(inner: Weak<Inner>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.headers().contains_key(hyper::header::ORIGIN) {
        return plain(StatusCode::FORBIDDEN, "requests from web pages are refused");
    }
    let token = request.uri().path().strip_prefix('/').unwrap_or_default();
    let slot = inner
        .upgrade()
        .and_then(|inner| inner.slots.locked().get(token).cloned());
    let Some(slot) = slot else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    if request.method() != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only POST is served");
        response
            .headers_mut()
            .insert(hyper::header::ALLOW, "POST".parse().expect("static header"));
        return response;
    }
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY as u64) {
        return too_large();
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            );
        }
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(error) => {
            let reply = json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("the body is not JSON: {error}")}});
            return json_response(StatusCode::BAD_REQUEST, &reply);
        }
    };
    match mcp::handle(slot.as_ref(), &message) {
        Some(reply) => json_response(StatusCode::OK, &reply),
        None => plain(StatusCode::ACCEPTED, ""),
    }
}

fn too_large() -> Response<Full<Bytes>> {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the body is over {MAX_BODY} bytes"),
    )
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "text/plain; charset=utf-8".parse().expect("static header"),
    );
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().expect("static header"),
    );
    response
}
