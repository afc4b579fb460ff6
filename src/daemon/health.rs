//! The daemon's own HTTP routes beside `/mcp`, served through the transport's
//! [`Intercept`] hook: `GET /healthz?challenge=<nonce>` (daemon.md 1.4), `GET /metrics`
//! (Prometheus text) and, only with
//! `AGENTPRISM_TEST_HOOKS=1` in a debug or `test-hooks` build, `POST /debug/evict?session=<id>`.
//! Only the daemon's own user reaches these: the transport answers anyone else's `/healthz`
//! with the implementation name alone (`transport/peer.rs`).
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
pub(crate) enum Phase {
    /// Bound and serving, not yet named by the family pointer.
    Starting = 0,
    /// The family's current daemon.
    Current = 1,
    /// Superseded: serves what it has, takes no new sessions, exits once drained. One-way.
    LameDuck = 2,
    /// Shutting down: takes no new work.
    Exiting = 3,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Current => "current",
            Phase::LameDuck => "lame-duck",
            Phase::Exiting => "exiting",
        }
    }
}

/// What `/healthz` reads: the daemon's identity and live counters.
pub(crate) struct Health {
    pub record: DaemonRecord,
    /// `None` when the key file is unusable: the answer then carries no proof (fail closed).
    pub key: Option<RunControlKey>,
    pub server: Arc<McpServer>,
    pub engine: Engine,
    phase: AtomicU8,
    /// Set once, when the daemon turns lame duck.
    drain: std::sync::OnceLock<Drain>,
    /// Unacknowledged stop intents this daemon owns (kept by the main loop).
    pub unacked_intents: std::sync::atomic::AtomicUsize,
}

/// When and for whom a lame duck stepped aside.
#[derive(Clone, Debug)]
pub(crate) struct Drain {
    /// Unix ms.
    pub since: i64,
    /// The successor's instance id.
    pub successor: String,
}

impl Health {
    pub(crate) fn new(
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
            drain: std::sync::OnceLock::new(),
            unacked_intents: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Current,
            2 => Phase::LameDuck,
            _ => Phase::Exiting,
        }
    }

    /// Moves the phase forward; never back (a lame duck never becomes current again).
    pub(crate) fn set_phase(&self, phase: Phase) {
        self.phase.fetch_max(phase as u8, Ordering::AcqRel);
    }

    /// Turns this daemon lame duck for `successor`. `false` if it already was one (or is
    /// exiting): the first successor named stays on record.
    pub(crate) fn become_lame_duck(&self, successor: &str) -> bool {
        let moved = self
            .phase
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |phase| {
                (phase < Phase::LameDuck as u8).then_some(Phase::LameDuck as u8)
            })
            .is_ok();
        if moved {
            let _ = self.drain.set(Drain {
                since: crate::util::now_ms(),
                successor: successor.to_owned(),
            });
        }
        moved
    }

    /// Whether this daemon has stepped aside (lame duck, or exiting after it).
    pub(crate) fn is_lame_duck(&self) -> bool {
        self.drain.get().is_some()
    }

    pub(crate) fn drain(&self) -> Option<&Drain> {
        self.drain.get()
    }

    /// What is left before a lame duck may exit, as `/healthz`, `drain-status` and `daemon
    /// status` show it.
    pub(crate) fn drain_status(&self) -> Value {
        let drain = self.drain.get();
        json!({
            "lameDuck": drain.is_some(),
            "since": drain.map(|d| crate::util::iso_time(d.since)),
            "successor": drain.map(|d| d.successor.clone()),
            "sessions": self.server.session_count(),
            "inflightRequests": self.server.inflight_count(),
            "activeRuns": self.engine.active_executions(),
            "ownedRuns": self.engine.live_run_ids().iter().map(|id| id.as_str().to_owned()).collect::<Vec<_>>(),
            "unackedIntents": self.unacked_intents.load(Ordering::Relaxed),
            "replDrains": 0,
        })
    }

    /// Whether nothing keeps this daemon alive: no session, request, execution or intent.
    pub(crate) fn drained(&self) -> bool {
        self.server.session_count() == 0
            && self.server.inflight_count() == 0
            && self.engine.active_executions() == 0
            && self.unacked_intents.load(Ordering::Relaxed) == 0
    }

    /// The `/healthz` body; `proof` answers `challenge` when one was given.
    pub(crate) fn body(&self, challenge: Option<&str>) -> Value {
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
            "lameDuck": self.is_lame_duck(),
            "supersededBy": self.drain.get().map(|d| d.successor.clone()),
            "drain": if self.is_lame_duck() { self.drain_status() } else { Value::Null },
            "sessions": self.server.session_count(),
            "activeRuns": self.engine.active_executions(),
            "inflightRequests": self.server.inflight_count(),
            "replDrains": 0,
            "controlProtocol": CONTROL_PROTOCOL,
            "controlAvailable": self.key.is_some() && !record.control_url.is_empty(),
            "projects": [],
        })
    }
}

/// The header every answer of a lame duck carries, so a shim moves new work to the successor.
pub(crate) const LAME_DUCK_HEADER: &str = "agentprism-lame-duck";

/// Marks every answer of a lame duck with [`LAME_DUCK_HEADER`].
pub(crate) fn decorate(health: Arc<Health>) -> crate::transport::http::Decorate {
    Arc::new(move |headers: &mut hyper::HeaderMap| {
        if health.is_lame_duck() {
            headers.insert(
                LAME_DUCK_HEADER,
                hyper::header::HeaderValue::from_static("1"),
            );
        }
    })
}

/// The intercept serving `/healthz`, the lame duck's 503 to new sessions and stateless
/// requests, and `/debug/evict` when `test_hooks` is on (eviction requests go to the
/// daemon's main loop through `evictions`).
pub(crate) fn routes(
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
            // Behind the same-user check like every route but `/healthz`: the transport
            // refuses another user's connection before this hook runs.
            (&Method::GET, "/metrics") => Some(metrics_response()),
            // A POST without a session is an `initialize` or a stateless request: new work,
            // which belongs to the successor. Sessions this daemon still has stay served.
            (&Method::POST, crate::transport::http::MCP_PATH)
                if health.is_lame_duck() && !parts.headers.contains_key("mcp-session-id") =>
            {
                let mut response = json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": {
                            "code": -32000,
                            "message": "this agentprism daemon has been superseded and takes no new \
                                        sessions; find the current one through discovery (the \
                                        agentprism-workflow shim does this by itself)",
                            "data": {"supersededBy": health.drain().map(|d| d.successor.clone())},
                        }
                    }),
                );
                response.headers_mut().insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static("0"),
                );
                Some(response)
            }
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

/// `GET /metrics`: the process's metrics in the Prometheus text format
/// ([`crate::metrics`]). The folder server's listener answers it too.
pub(crate) fn metrics_response() -> Response<HttpBody> {
    let mut response = Response::new(HttpBody::full(crate::metrics::global().encode()));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
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
