//! The control listener. It accepts connections on the instance's socket, at most
//! [`Limits::max_connections`] at a time, each in a task on one [`TaskTracker`], and gives each
//! the whole-exchange deadline. A connection is checked in this order: the kernel's peer uid
//! equals ours, the frame fits, the JSON has the request shape, `v == 1`, `to` is this
//! instance, `ts` is within 30 s of our clock, the nonce is well formed and not seen before,
//! and the mac matches (constant time). Only then is the nonce recorded (so an unsigned frame
//! can neither fill the replay cache nor burn a real nonce) and the handler called. Every
//! failure gets the same unsigned refusal; the reason goes to the debug log only.
//!
//! The handler runs inside the exchange deadline and is dropped when it passes, so handlers
//! should hand long work to an actor and answer with what they know.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use interprocess::local_socket::tokio::{Listener, Stream};
use interprocess::local_socket::traits::StreamCommon;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName};
use interprocess::os::unix::local_socket::ListenerOptionsExt;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::socket::{SocketError, control_url, socket_path};
use super::wire::{
    FrameError, Request, Response, nonce_is_well_formed, read_frame, refusal_body, write_frame,
};
use super::{
    CLOCK_WINDOW, ControlError, EXCHANGE_TIMEOUT, Identity, MAX_FRAME, PROTOCOL_VERSION, Peer,
    REPLAY_WINDOW,
};
use crate::discovery::RunControlKey;
use crate::discovery::paths::FILE_MODE;
use crate::util::sync::Lock;

/// What a daemon does with verified requests. `kind` is one of [`super::kinds`] or something
/// newer (answer [`ControlError::InvalidOperation`]); `op` is the caller's idempotency key;
/// `body` is the parsed request body. An `Ok` object's fields are sent after `"ok": true`
/// (any other value goes under `"value"`).
#[async_trait::async_trait]
pub trait ControlHandler: Send + Sync {
    async fn handle(
        &self,
        kind: &str,
        from: &Peer,
        op: &str,
        body: Value,
    ) -> Result<Value, ControlError>;
}

/// Bounds of one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deadline for one connection, from accept to the answer written.
    pub exchange_timeout: Duration,
    /// Connections served at once; further ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// Nonces remembered at once. When full of unexpired nonces, new requests are refused
    /// rather than forgetting one early (which would reopen it to replay).
    pub max_remembered_nonces: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            exchange_timeout: EXCHANGE_TIMEOUT,
            max_connections: 64,
            max_remembered_nonces: 100_000,
        }
    }
}

/// A bound control socket, ready to [`serve`](ControlServer::serve).
pub struct ControlServer {
    listener: Listener,
    path: PathBuf,
    identity: Identity,
    key: RunControlKey,
    limits: Limits,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What every connection task shares.
struct State {
    identity: Identity,
    key: RunControlKey,
    uid: u32,
    replay: Mutex<ReplayCache>,
}

impl ControlServer {
    /// Binds this instance's socket at the path [`socket_path`] chooses (runtime folder, else
    /// `R/daemons/ctl/`). Needs a tokio runtime.
    pub fn bind(
        paths: &crate::discovery::Paths,
        runtime_dir: Option<&Path>,
        identity: Identity,
        key: RunControlKey,
    ) -> Result<ControlServer, SocketError> {
        let path = socket_path(paths, runtime_dir, &identity.instance_id)?;
        ControlServer::bind_at(&path, identity, key)
    }

    /// Binds at an explicit path whose folder exists (tests, a caller that chose the path).
    /// The socket is created 0600; a socket already at the path is an error.
    pub fn bind_at(
        path: &Path,
        identity: Identity,
        key: RunControlKey,
    ) -> Result<ControlServer, SocketError> {
        let io = |doing, source| SocketError::Io {
            doing,
            path: path.to_path_buf(),
            source,
        };
        let name = path
            .to_fs_name::<GenericFilePath>()
            .map_err(|e| io("name", e))?;
        // interprocess applies the mode with fchmod before bind, so the socket is never
        // reachable with a wider mode; dropping the listener unlinks it.
        let listener = ListenerOptions::new()
            .name(name)
            .mode(FILE_MODE as nix::libc::mode_t)
            .reclaim_name(true)
            .create_tokio()
            .map_err(|e| io("listen on", e))?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            identity,
            key,
            limits: Limits::default(),
        })
    }

    /// Replaces the default [`Limits`] (tests shorten the deadline).
    pub fn with_limits(mut self, limits: Limits) -> ControlServer {
        self.limits = limits;
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `unix:<path>`, for the daemon record's `controlUrl`.
    pub fn control_url(&self) -> String {
        control_url(&self.path)
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, removes the socket file
    /// and waits for the connections in progress (each bounded by the exchange deadline).
    pub async fn serve(self, handler: Arc<dyn ControlHandler>, shutdown: CancellationToken) {
        let ControlServer {
            listener,
            path,
            identity,
            key,
            limits,
        } = self;
        let state = Arc::new(State {
            identity,
            key,
            uid: nix::unistd::geteuid().as_raw(),
            replay: Mutex::new(ReplayCache::new(limits.max_remembered_nonces)),
        });
        let tracker = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        loop {
            let slot = tokio::select! {
                _ = shutdown.cancelled() => break,
                slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            };
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok(stream) => {
                    let state = state.clone();
                    let handler = handler.clone();
                    tracker.spawn(async move {
                        serve_connection(stream, &state, handler.as_ref(), limits).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    // Out of descriptors or similar: give the system a moment rather than spin.
                    tracing::warn!(%error, path = %path.display(), "control accept failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            }
        }
        drop(listener);
        tracker.close();
        tracker.wait().await;
    }
}

/// One connection: uid check, then the exchange under the deadline.
async fn serve_connection(
    mut stream: Stream,
    state: &State,
    handler: &dyn ControlHandler,
    limits: Limits,
) {
    let credentials = stream.peer_creds();
    let peer_uid = credentials.as_ref().ok().and_then(|c| c.euid());
    let peer_pid = credentials
        .as_ref()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    if peer_uid != Some(state.uid) {
        tracing::debug!(
            ?peer_uid,
            ?peer_pid,
            "control: refused a peer of another user"
        );
        let _ = tokio::time::timeout(
            limits.exchange_timeout,
            write_frame(&mut stream, &refusal_body()),
        )
        .await;
        return;
    }
    let exchange = exchange(&mut stream, state, handler, peer_pid);
    if tokio::time::timeout(limits.exchange_timeout, exchange)
        .await
        .is_err()
    {
        tracing::debug!(
            ?peer_pid,
            "control: connection closed at the exchange deadline"
        );
    }
}

async fn exchange(
    stream: &mut Stream,
    state: &State,
    handler: &dyn ControlHandler,
    peer_pid: Option<u32>,
) {
    let frame = match read_frame(stream).await {
        Ok(frame) => frame,
        Err(error) => {
            tracing::debug!(%error, "control: unreadable request");
            if matches!(error, FrameError::TooLarge(_)) {
                let _ = write_frame(stream, &refusal_body()).await;
            }
            return;
        }
    };
    let request = match state.verify(&frame, crate::util::now_ms(), Instant::now()) {
        Ok(request) => request,
        Err(reason) => {
            tracing::debug!(reason, ?peer_pid, "control: refused a request");
            let _ = write_frame(stream, &refusal_body()).await;
            return;
        }
    };
    let result = match serde_json::from_str::<Value>(&request.body) {
        Ok(body) => {
            let peer = Peer {
                identity: request.from.clone(),
                pid: peer_pid,
            };
            handler
                .handle(&request.kind, &peer, &request.op, body)
                .await
        }
        Err(error) => Err(ControlError::InvalidOperation(format!(
            "body is not JSON: {error}"
        ))),
    };
    let answer = state.answer(&request.nonce, result);
    if let Err(error) = write_frame(stream, &answer).await {
        tracing::debug!(%error, kind = %request.kind, "control: could not send the answer");
    }
}

impl State {
    /// The checks in the module documentation, in order; the `Err` is the reason for the log.
    fn verify(&self, frame: &[u8], now_ms: i64, now: Instant) -> Result<Request, &'static str> {
        let request: Request = serde_json::from_slice(frame).map_err(|_| "not a request object")?;
        if request.v != PROTOCOL_VERSION {
            return Err("unsupported protocol version");
        }
        if request.to != self.identity.instance_id {
            return Err("addressed to another instance");
        }
        if request.ts.abs_diff(now_ms) > CLOCK_WINDOW.as_millis() as u64 {
            return Err("timestamp outside the 30 s window");
        }
        if !nonce_is_well_formed(&request.nonce) {
            return Err("malformed nonce");
        }
        if self.replay.locked().seen(&request.nonce, now) {
            return Err("replayed nonce");
        }
        if !request.mac_is_valid(&self.key) {
            return Err("bad mac");
        }
        // Recorded only now, atomically: two copies of one frame racing both pass `seen` but
        // only one gets in here.
        self.replay.locked().record(&request.nonce, now)?;
        Ok(request)
    }

    /// The signed answer frame for a verified request.
    fn answer(&self, nonce: &str, result: Result<Value, ControlError>) -> Vec<u8> {
        let mut body = answer_body(result);
        // Leave room for the envelope (nonce, identity, mac, escaping) under the frame limit.
        if body.len() > MAX_FRAME / 2 {
            body = answer_body(Err(ControlError::Internal(format!(
                "answer of {} bytes is too large to send",
                body.len()
            ))));
        }
        let response = Response::sign(
            &self.key,
            nonce,
            &self.identity,
            crate::util::now_ms(),
            body,
        );
        serde_json::to_vec(&response).expect("an answer serialises")
    }
}

/// One request frame through the server's checks and answer without a socket or handler: a
/// server named `instance_id` whose clock reads `now_ms` verifies `frame` with `key` and, if it
/// passes, answers with the parsed body echoed back. For `crate::fuzzing`, which has no other
/// way past the private [`State`].
pub(crate) fn answer_frame(
    key: RunControlKey,
    instance_id: &str,
    now_ms: i64,
    frame: &[u8],
) -> Result<Vec<u8>, &'static str> {
    let state = State {
        identity: Identity {
            instance_id: instance_id.to_owned(),
            pid: 1,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        key,
        uid: 0,
        replay: Mutex::new(ReplayCache::new(Limits::default().max_remembered_nonces)),
    };
    let request = state.verify(frame, now_ms, Instant::now())?;
    let result = serde_json::from_str::<Value>(&request.body)
        .map_err(|error| ControlError::InvalidOperation(format!("body is not JSON: {error}")));
    Ok(state.answer(&request.nonce, result))
}

/// `{"ok":true, ...value}` or `{"ok":false, "code", "message"}` as JSON text.
fn answer_body(result: Result<Value, ControlError>) -> String {
    let mut body = Map::new();
    match result {
        Ok(value) => {
            body.insert("ok".into(), Value::Bool(true));
            match value {
                Value::Object(fields) => {
                    body.extend(fields.into_iter().filter(|(name, _)| name != "ok"));
                }
                Value::Null => {}
                other => {
                    body.insert("value".into(), other);
                }
            }
        }
        Err(error) => {
            body.insert("ok".into(), Value::Bool(false));
            body.insert("code".into(), Value::from(error.code()));
            body.insert("message".into(), Value::from(error.message()));
        }
    }
    Value::Object(body).to_string()
}

/// Nonces accepted in the last [`REPLAY_WINDOW`], forgotten in arrival order once expired.
/// A request's `ts` is within 30 s of our clock when accepted, so after 60 s a replay of it
/// fails the clock check anyway.
struct ReplayCache {
    seen: HashMap<String, Instant>,
    order: VecDeque<(Instant, String)>,
    capacity: usize,
}

impl ReplayCache {
    fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            seen: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn seen(&mut self, nonce: &str, now: Instant) -> bool {
        self.expire(now);
        self.seen.contains_key(nonce)
    }

    fn record(&mut self, nonce: &str, now: Instant) -> Result<(), &'static str> {
        self.expire(now);
        if self.seen.contains_key(nonce) {
            return Err("replayed nonce");
        }
        if self.seen.len() >= self.capacity {
            return Err("replay cache full");
        }
        self.seen.insert(nonce.to_owned(), now);
        self.order.push_back((now, nonce.to_owned()));
        Ok(())
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.saturating_duration_since(*at) < REPLAY_WINDOW {
                break;
            }
            let (_, nonce) = self.order.pop_front().expect("front exists");
            self.seen.remove(&nonce);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::control::wire::new_nonce;

    fn state() -> State {
        State {
            identity: Identity {
                instance_id: "me".into(),
                pid: 1,
                version: "0.1.0".into(),
            },
            key: RunControlKey::from_bytes([3; 32]),
            uid: 0,
            replay: Mutex::new(ReplayCache::new(3)),
        }
    }

    fn signed(to: &str, ts: i64, nonce: &str) -> Vec<u8> {
        let from = Identity {
            instance_id: "you".into(),
            pid: 2,
            version: "0.2.0".into(),
        };
        let request = Request::sign(
            &RunControlKey::from_bytes([3; 32]),
            "identify",
            to,
            &from,
            ts,
            nonce,
            "op-1",
            "{}".into(),
        );
        serde_json::to_vec(&request).unwrap()
    }

    #[test]
    fn checks_and_replay_window() {
        let state = state();
        let now = Instant::now();
        let t = 1_000_000_000;
        let nonce = new_nonce().unwrap();
        assert!(state.verify(&signed("me", t, &nonce), t, now).is_ok());
        assert_eq!(
            state.verify(&signed("me", t, &nonce), t, now).unwrap_err(),
            "replayed nonce"
        );
        // Still refused just inside the replay window, forgotten after it.
        let later = now + REPLAY_WINDOW - Duration::from_millis(1);
        assert!(state.verify(&signed("me", t, &nonce), t, later).is_err());
        let after = now + REPLAY_WINDOW;
        assert!(state.verify(&signed("me", t, &nonce), t, after).is_ok());

        let fresh = || new_nonce().unwrap();
        assert_eq!(
            state
                .verify(&signed("other", t, &fresh()), t, now)
                .unwrap_err(),
            "addressed to another instance"
        );
        assert!(
            state
                .verify(&signed("me", t - 30_000, &fresh()), t, now)
                .is_ok()
        );
        assert!(
            state
                .verify(&signed("me", t - 30_001, &fresh()), t, now)
                .is_err()
        );
        assert!(
            state
                .verify(&signed("me", t + 30_001, &fresh()), t, now)
                .is_err()
        );
        assert_eq!(
            state.verify(&signed("me", t, "short"), t, now).unwrap_err(),
            "malformed nonce"
        );
        assert_eq!(
            state.verify(b"[1,2]", t, now).unwrap_err(),
            "not a request object"
        );
    }

    #[test]
    fn a_full_cache_refuses_instead_of_forgetting() {
        let state = state();
        let now = Instant::now();
        let t = 5_000_000;
        for _ in 0..3 {
            state
                .verify(&signed("me", t, &new_nonce().unwrap()), t, now)
                .unwrap();
        }
        assert_eq!(
            state
                .verify(&signed("me", t, &new_nonce().unwrap()), t, now)
                .unwrap_err(),
            "replay cache full"
        );
        let later = now + REPLAY_WINDOW;
        assert!(
            state
                .verify(&signed("me", t, &new_nonce().unwrap()), t, later)
                .is_ok()
        );
    }

    #[test]
    fn a_bad_mac_does_not_burn_the_nonce() {
        let state = state();
        let now = Instant::now();
        let t = 7_000_000;
        let nonce = new_nonce().unwrap();
        let mut forged: Request = serde_json::from_slice(&signed("me", t, &nonce)).unwrap();
        forged.mac = "00".repeat(32);
        let forged = serde_json::to_vec(&forged).unwrap();
        assert_eq!(state.verify(&forged, t, now).unwrap_err(), "bad mac");
        assert!(state.verify(&signed("me", t, &nonce), t, now).is_ok());
    }

    #[test]
    fn answer_bodies() {
        assert_eq!(
            answer_body(Ok(json!({"outcome": "stopped", "ok": false}))),
            r#"{"ok":true,"outcome":"stopped"}"#
        );
        assert_eq!(answer_body(Ok(Value::Null)), r#"{"ok":true}"#);
        assert_eq!(answer_body(Ok(json!([1]))), r#"{"ok":true,"value":[1]}"#);
        assert_eq!(
            answer_body(Err(ControlError::NotOwner("pid 9 holds it".into()))),
            r#"{"ok":false,"code":"NOT_OWNER","message":"pid 9 holds it"}"#
        );
    }
}
