//! What a handler is told about the request it answers, and how it answers with an error:
//! the protocol era, the caller's capabilities, cancellation, notifications tied to the
//! request, and the JSON-RPC error codes of the MCP layer.
//!
//! A leaf of the MCP core: the handler boundary, the tool registry and the server all build
//! on it, and it imports none of them.

use crate::util::sync::Lock;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// JSON-RPC error codes used across the MCP layer.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// 2025 era: resource not found.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// 2026-07-28: a header does not match the body.
    pub(crate) const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: a needed client capability was not declared.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// 2026-07-28: unsupported protocol version.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// A JSON-RPC error a handler returns; the core sends it with the request's id.
#[derive(Clone, Debug, PartialEq)]
pub struct McpError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl McpError {
    pub fn new(code: i64, message: impl Into<String>) -> McpError {
        McpError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> McpError {
        McpError::new(codes::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> McpError {
        McpError::new(codes::INTERNAL_ERROR, message)
    }

    pub(crate) fn method_not_found(method: &str) -> McpError {
        McpError::new(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    }

    pub fn with_data(mut self, data: Value) -> McpError {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

pub type McpResult<T> = Result<T, McpError>;

/// The protocol era a request arrived in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Era {
    /// The initialize handshake (2025-11-25, 2025-06-18, 2025-03-26): sessions, server-to-client
    /// requests allowed, GET stream.
    Legacy { version: String },
    /// 2026-07-28: every request carries its version and client capabilities in `_meta`.
    Modern { version: String },
}

impl Era {
    pub fn version(&self) -> &str {
        match self {
            Era::Legacy { version } | Era::Modern { version } => version,
        }
    }

    pub(crate) fn is_modern(&self) -> bool {
        matches!(self, Era::Modern { .. })
    }
}

/// Who is asking, and how to talk back while the request runs.
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub era: Era,
    /// The legacy session (`Mcp-Session-Id`, or the one stdio session); `None` when stateless.
    pub session_id: Option<String>,
    /// The JSON-RPC id of the request.
    pub request_id: Value,
    /// The method, e.g. `tools/call`.
    pub method: String,
    /// Declared client capabilities (from initialize, or the request's `_meta`).
    pub client_capabilities: Value,
    pub client_info: Option<Value>,
    /// `params._meta.progressToken`, if the client asked for progress.
    pub progress_token: Option<Value>,
    /// The request's `params._meta` (`Null` without one), for keys a handler defines
    /// itself, such as the workflow server's idempotency key.
    pub meta: Value,
    /// Fires on `notifications/cancelled` for this request, a closed stateless response
    /// stream, or server shutdown.
    pub cancel: CancellationToken,
    /// Notifications related to this request (progress, logging), sent on its response stream.
    pub notifier: RequestNotifier,
    /// The caller's identity from the HTTP principal header (`TransportContext::principal`);
    /// `None` wherever no such header is configured (stdio, the daemon).
    pub principal: Option<String>,
}

impl RequestContext {
    /// Sends `notifications/progress` if the client gave a progress token.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Some(token) = &self.progress_token {
            let mut params = serde_json::json!({"progressToken": token, "progress": progress});
            if let Some(total) = total {
                params["total"] = total.into();
            }
            if let Some(message) = message {
                params["message"] = message.into();
            }
            self.notifier.notify("notifications/progress", params);
        }
    }

    /// Whether the client declared a capability path such as `["elicitation"]` or
    /// `["extensions", "io.modelcontextprotocol/ui"]`.
    pub fn client_has(&self, path: &[&str]) -> bool {
        let mut cursor = &self.client_capabilities;
        for key in path {
            match cursor.get(key) {
                Some(next) => cursor = next,
                None => return false,
            }
        }
        true
    }
}

/// A notification the core sends on the request's own stream (or stdout on stdio); with an
/// `id` it is a server-to-client request instead, whose response comes back through
/// [`ClientRequests`].
#[derive(Clone, Debug)]
pub struct Notification {
    pub method: String,
    pub params: Value,
    /// Set for a server-to-client request (2025 tasks: elicitation during `tasks/result`).
    pub id: Option<Value>,
}

/// Server-to-client requests waiting for the client's response, by id. The core routes a
/// client's JSON-RPC response here; only ids the server minted can match.
#[derive(Debug, Default)]
pub(crate) struct ClientRequests {
    pending: std::sync::Mutex<std::collections::HashMap<String, oneshot::Sender<ClientAnswer>>>,
}

/// A client's response to a server-to-client request: its result, or its error object.
pub(crate) type ClientAnswer = Result<Value, Value>;

impl ClientRequests {
    fn register(&self) -> (String, oneshot::Receiver<ClientAnswer>) {
        let id = format!("agentprism-{}", uuid::Uuid::new_v4().simple());
        let (sender, receiver) = oneshot::channel();
        self.pending.locked().insert(id.clone(), sender);
        (id, receiver)
    }

    /// Delivers a response; `false` when no request of ours has that id.
    pub(crate) fn answer(&self, id: &Value, answer: ClientAnswer) -> bool {
        let Some(id) = id.as_str() else {
            return false;
        };
        let sender = self.pending.locked().remove(id);
        match sender {
            Some(sender) => sender.send(answer).is_ok(),
            None => false,
        }
    }

    /// Forgets a request whose response nobody waits for any more.
    fn forget(&self, id: &str) {
        self.pending.locked().remove(id);
    }
}

/// A server-to-client request in flight; dropping it forgets the request.
pub struct PendingClientRequest {
    id: String,
    requests: std::sync::Arc<ClientRequests>,
    pub receiver: oneshot::Receiver<ClientAnswer>,
}

impl Drop for PendingClientRequest {
    fn drop(&mut self) {
        self.requests.forget(&self.id);
    }
}

/// Sends notifications tied to one request. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RequestNotifier {
    sender: Option<mpsc::UnboundedSender<Notification>>,
    /// Where responses to server-to-client requests arrive; `None` where none can.
    requests: Option<std::sync::Arc<ClientRequests>>,
}

impl RequestNotifier {
    pub fn new(sender: mpsc::UnboundedSender<Notification>) -> RequestNotifier {
        RequestNotifier {
            sender: Some(sender),
            requests: None,
        }
    }

    /// A notifier that can also send server-to-client requests.
    pub(crate) fn with_requests(
        sender: mpsc::UnboundedSender<Notification>,
        requests: std::sync::Arc<ClientRequests>,
    ) -> RequestNotifier {
        RequestNotifier {
            sender: Some(sender),
            requests: Some(requests),
        }
    }

    /// A notifier that drops everything (tests, in-process calls).
    pub fn discard() -> RequestNotifier {
        RequestNotifier {
            sender: None,
            requests: None,
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        if let Some(sender) = &self.sender {
            let _ = sender.send(Notification {
                method: method.to_owned(),
                params,
                id: None,
            });
        }
    }

    /// Sends a server-to-client request on the request's stream; `None` where that cannot
    /// be answered (no stream, or no way back).
    pub fn request(&self, method: &str, params: Value) -> Option<PendingClientRequest> {
        let (sender, requests) = (self.sender.as_ref()?, self.requests.as_ref()?);
        let (id, receiver) = requests.register();
        let pending = PendingClientRequest {
            id: id.clone(),
            requests: requests.clone(),
            receiver,
        };
        sender
            .send(Notification {
                method: method.to_owned(),
                params,
                id: Some(Value::String(id)),
            })
            .ok()?;
        Some(pending)
    }
}
