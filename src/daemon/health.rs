//! The daemon's own HTTP routes beside `/mcp`, served through the transport's
//! [`Intercept`] hook: `GET /healthz?challenge=<nonce>` (daemon.md 1.4) and, only with
//! `AGENTPRISM_TEST_HOOKS=1`, `POST /debug/evict?session=<id>`.
//!
//! `/healthz` is answered inline from counters and an HMAC: it takes no lock that engine or
//! request work holds for long and awaits nothing, so a busy daemon still proves it is alive
//! (pitfall 8: a starved health check made shims spawn a second daemon over the store).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::discovery::record::{CONTROL_PROTOCOL, DAEMON_NAME, IMPLEMENTATION};
use crate::discovery::{DaemonRecord, RunControlKey, healthz_proof};
use crate::engine::Engine;
use crate::mcp::McpServer;
use crate::transport::http::{HttpBody, Intercept};

/// Where a daemon is in its life, as `/healthz` reports it in `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Bound and serving, not yet named by the family pointer.
    Starting = 0,
    /// The family's current daemon.
    Current = 1,
    /// Shutting down: takes no new work.
    Exiting = 2,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Current => "current",
            Phase::Exiting => "exiting",
        }
    }
}

/// What `/healthz` reads: the daemon's identity and live counters.
pub struct Health {
    pub record: DaemonRecord,
    /// `None` when the key file is unusable: the answer then carries no proof (fail closed).
    pub key: Option<RunControlKey>,
    pub server: Arc<McpServer>,
    pub engine: Engine,
    phase: AtomicU8,
}

impl Health {
    pub fn new(
        record: DaemonRecord,
        key: Option<RunControlKey>,
        server: Arc<McpServer>,
        engine: Engine,
    ) -> Health {
        Health {
            record,
            key,
            server,
            engine,
            phase: AtomicU8::new(Phase::Starting as u8),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Starting,
            1 => Phase::Current,
            _ => Phase::Exiting,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// The `/healthz` body; `proof` answers `challenge` when one was given.
    pub fn body(&self, challenge: Option<&str>) -> Value {
        let record = &self.record;
        let proof = match (&self.key, challenge) {
            (Some(key), Some(nonce)) => {
                Value::String(healthz_proof(key, &record.instance_id, nonce))
            }
            _ => Value::Null,
        };
        json!({
            "name": DAEMON_NAME,
            "implementation": IMPLEMENTATION,
            "version": record.version,
            "pid": record.pid,
            "instanceId": record.instance_id,
            "envFingerprint": record.env_fingerprint,
            "proof": proof,
            "port": record.port,
            "url": record.url,
            "startedAt": record.started_at,
            "uptimeMs": crate::util::now_ms().saturating_sub(record.started_at),
            "state": self.phase().as_str(),
            "lameDuck": false,
            "sessions": self.server.session_count(),
            "activeRuns": self.engine.active_executions(),
            "inflightRequests": self.server.inflight_count(),
            "replDrains": 0,
            "controlProtocol": CONTROL_PROTOCOL,
            "controlAvailable": self.key.is_some(),
            "projects": [],
        })
    }
}

/// The intercept serving `/healthz`, and `/debug/evict` when `test_hooks` is on (eviction
/// requests go to the daemon's main loop through `evictions`).
pub fn routes(
    health: Arc<Health>,
    test_hooks: bool,
    evictions: mpsc::UnboundedSender<String>,
) -> Intercept {
    Arc::new(move |parts: &Parts| {
        let query = parts.uri.query().unwrap_or_default();
        match (&parts.method, parts.uri.path()) {
            (&Method::GET, "/healthz") => {
                let challenge = query_value(query, "challenge").filter(|nonce| valid_nonce(nonce));
                Some(json_response(StatusCode::OK, &health.body(challenge)))
            }
            (_, "/healthz") => Some(json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &json!({"error": "use GET"}),
            )),
            (&Method::POST, "/debug/evict") if test_hooks => {
                let Some(session) = query_value(query, "session") else {
                    return Some(json_response(
                        StatusCode::BAD_REQUEST,
                        &json!({"error": "session=<id> is required"}),
                    ));
                };
                let _ = evictions.send(session.to_owned());
                Some(json_response(
                    StatusCode::ACCEPTED,
                    &json!({"evicting": session}),
                ))
            }
            _ => None,
        }
    })
}

/// The raw value of `name` in a query string (nonces and session ids need no decoding).
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name && !value.is_empty()).then_some(value)
    })
}

/// A challenge is echoed into an HMAC only if it is short and plain.
fn valid_nonce(nonce: &str) -> bool {
    nonce.len() <= 128
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn json_response(status: StatusCode, body: &Value) -> Response<HttpBody> {
    let mut response = Response::new(HttpBody::full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_nonces() {
        assert_eq!(query_value("a=1&challenge=xyz", "challenge"), Some("xyz"));
        assert_eq!(query_value("challenge=", "challenge"), None);
        assert_eq!(query_value("", "challenge"), None);
        assert!(valid_nonce("0123abcdef-_"));
        assert!(!valid_nonce("a b"));
        assert!(!valid_nonce(&"a".repeat(129)));
    }
}
