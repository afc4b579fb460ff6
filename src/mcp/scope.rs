//! Which protocol era a request speaks and which legacy session it belongs to, decided once
//! per request.
//!
//! A request whose `params._meta` states a protocol version is a stateless 2026-07-28
//! request; `initialize` starts a legacy session; any other request needs a session the
//! transport names. The rule lives here, in [`Resolution::of`], and both kinds of transport
//! use it: the HTTP transport reads `_meta` and looks the session up itself (it must check
//! headers and answer 404 in between) and hands the [`Resolution`] to
//! [`McpServer::handle_request`](super::server::McpServer::handle_request); stdio and
//! in-memory callers let [`McpServer::handle`](super::server::McpServer::handle) do the same
//! two steps. Nothing is looked up twice.

use std::sync::Arc;

use serde_json::{Value, json};

use super::context::{Era, McpError, codes};
use super::session::Session;

/// Legacy versions we negotiate in `initialize`, newest first.
pub(crate) const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Versions accepted in a stateless request's `_meta`.
pub(crate) const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
/// What an `initialize` with an unknown version gets.
pub(crate) const LATEST_LEGACY_VERSION: &str = "2025-11-25";
/// The first version whose clients read an SSE event with empty data (the priming event that
/// gives a stream its first id) and act on `retry:`; older clients parse the empty data as a
/// message and fail, so their streams carry neither.
pub(crate) const PRIMING_SINCE: &str = "2025-11-25";

/// Whether a stream of a client speaking `version` starts with a priming event and ends with
/// a `retry:` hint. Versions are ISO dates, so their order is their text's.
pub(crate) fn primes_streams(version: &str) -> bool {
    version >= PRIMING_SINCE
}

pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(crate) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The JSON-RPC code of "session not found" (the code the official SDKs use).
const SESSION_NOT_FOUND: i64 = -32001;

/// The era a request's `_meta` asks for, before any dispatch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RequestEra {
    /// No protocol fields in `_meta`.
    Unstated,
    /// A valid stateless request.
    Modern {
        version: String,
        client_capabilities: Value,
        client_info: Option<Value>,
    },
    /// Protocol fields present but unusable; the error and the HTTP status to send.
    /// `version` is the stated version when it is a string, so the HTTP transport can still
    /// hold the headers to it before it sends the error.
    Invalid {
        error: McpError,
        status: u16,
        version: Option<String>,
    },
}

impl RequestEra {
    /// The protocol version `_meta` states as a string, valid or not: the requests the
    /// 2026-07-28 header rules apply to.
    pub(crate) fn stated_version(&self) -> Option<&str> {
        match self {
            RequestEra::Modern { version, .. } => Some(version),
            RequestEra::Invalid { version, .. } => version.as_deref(),
            RequestEra::Unstated => None,
        }
    }
}

/// Reads the per-request protocol fields of `params._meta`.
pub(crate) fn request_era(params: &Value) -> RequestEra {
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return RequestEra::Unstated;
    };
    let version = meta.get(META_PROTOCOL_VERSION);
    let capabilities = meta.get(META_CLIENT_CAPABILITIES);
    if version.is_none() && capabilities.is_none() {
        return RequestEra::Unstated;
    }
    let invalid = |error: McpError, version: Option<&str>| RequestEra::Invalid {
        error,
        status: 400,
        version: version.map(str::to_owned),
    };
    let Some(version) = version.and_then(Value::as_str) else {
        return invalid(
            McpError::invalid_params(format!("_meta needs {META_PROTOCOL_VERSION} as a string")),
            None,
        );
    };
    if !MODERN_VERSIONS.contains(&version) {
        return invalid(unsupported_version(version), Some(version));
    }
    let Some(capabilities @ Value::Object(_)) = capabilities else {
        return invalid(
            McpError::invalid_params(format!(
                "_meta needs {META_CLIENT_CAPABILITIES} as an object"
            )),
            Some(version),
        );
    };
    RequestEra::Modern {
        version: version.to_owned(),
        client_capabilities: capabilities.clone(),
        client_info: meta.get(META_CLIENT_INFO).cloned(),
    }
}

pub(crate) fn unsupported_version(requested: &str) -> McpError {
    McpError::new(
        codes::UNSUPPORTED_VERSION,
        format!("unsupported protocol version {requested}"),
    )
    .with_data(json!({"supported": MODERN_VERSIONS, "requested": requested}))
}

/// The error for a legacy session id nobody knows (never issued, deleted or evicted); sent
/// with HTTP 404 so the client starts a new session.
pub(crate) fn session_not_found() -> McpError {
    McpError::new(SESSION_NOT_FOUND, "session not found")
}

/// Who is asking, as one request's dispatch needs it.
#[derive(Clone)]
pub struct Scope {
    /// The era, and the version it was negotiated or stated in.
    pub era: Era,
    /// Declared client capabilities (from initialize, or the request's `_meta`).
    pub client_capabilities: Value,
    pub client_info: Option<Value>,
    /// The legacy session; `None` for a stateless request.
    pub session: Option<Arc<Session>>,
}

/// What the era and the session make of one request.
#[derive(Clone)]
pub enum Resolution {
    /// Dispatch it in this scope.
    Ready(Scope),
    /// An `initialize` without protocol fields: it creates a legacy session.
    Initialize,
    /// Refused before dispatch: the error and the HTTP status that fits.
    Refused { error: McpError, status: u16 },
}

impl Resolution {
    /// The rule: a valid `_meta` makes the request stateless whatever session it names; an
    /// invalid one is refused; `initialize` starts a session; anything else needs the
    /// session the transport found (`session`), or is refused with 400.
    pub(crate) fn of(method: &str, era: RequestEra, session: Option<Arc<Session>>) -> Resolution {
        match era {
            RequestEra::Invalid { error, status, .. } => Resolution::Refused { error, status },
            RequestEra::Modern {
                version,
                client_capabilities,
                client_info,
            } => Resolution::Ready(Scope {
                era: Era::Modern { version },
                client_capabilities,
                client_info,
                session: None,
            }),
            RequestEra::Unstated if method == "initialize" => Resolution::Initialize,
            RequestEra::Unstated => match session {
                Some(session) => Resolution::Ready(Scope {
                    era: Era::Legacy {
                        version: session.version.clone(),
                    },
                    client_capabilities: session.client_capabilities.clone(),
                    client_info: session.client_info.clone(),
                    session: Some(session),
                }),
                None => Resolution::Refused {
                    error: McpError::invalid_params(format!(
                        "a request needs params._meta with {META_PROTOCOL_VERSION} and \
                         {META_CLIENT_CAPABILITIES}, or a session from initialize"
                    )),
                    status: 400,
                },
            },
        }
    }

    /// An unknown legacy session: 404, so the client re-initializes.
    pub(crate) fn unknown_session() -> Resolution {
        Resolution::Refused {
            error: session_not_found(),
            status: 404,
        }
    }
}
