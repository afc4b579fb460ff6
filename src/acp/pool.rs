//! The process pool: up to `pool_size` long-lived agent processes per backend, each
//! initialized once and multiplexing many sessions. A session leases the least-loaded live
//! process; a process that died (crash, kill after a cancel that did not land) is dropped from
//! the pool, and the next open spawns a fresh one.
//!
//! An adapter that can hold only one session at a time (pi-acp, see [`one_session_per_process`])
//! gets a process per concurrent session instead: an idle pooled process is reused, and a
//! session that finds every pooled process busy gets a process of its own, outside the pool,
//! which ends with that session.
//!
//! The pool is a map of per-backend groups behind async mutexes rather than an actor: the only
//! slow step under a group's lock is spawning and initializing a process, and holding the lock
//! then is what we want (two concurrent opens must not both spawn the last free slot), while
//! other backends stay unaffected.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::acp::AcpConfig;
use crate::acp::connection::{CloseReason, Connection, RpcError};
use crate::acp::failure::{execution, rpc_failure, with_stderr};
use crate::acp::idle::{self, Idle};
use crate::acp::process::{AgentProcess, spawn_agent, wait_exit};
use crate::acp::stderr::StderrMark;
use crate::acp::transcript;
use crate::engine::runner::{AgentFailure, BackendSpec, FailureKind};
use crate::util::sync::Lock;

/// The ACP protocol version we speak.
const PROTOCOL_VERSION: u64 = 1;

/// One initialized agent process.
pub(crate) struct AgentHost {
    pub backend: BackendSpec,
    pub connection: Connection,
    pub process: AgentProcess,
    /// `agentCapabilities` from `initialize`: decides resume/load/close support.
    pub capabilities: Value,
    /// `authMethods` from `initialize`, for auth contexts and probe reports.
    pub auth_methods: Vec<Value>,
    /// `agentInfo.name` from `initialize` (empty when not given): names the adapter even
    /// behind a command override.
    pub agent_name: String,
    /// Open sessions, for least-loaded picking.
    load: AtomicUsize,
    /// Set when we killed it (a cancel that did not land); it must not take new sessions.
    killed: AtomicBool,
    /// Set when a session on it ignored `session/cancel` while others were still using it:
    /// it takes no new sessions, and it goes away (its group killed on drop) once the last of
    /// those sessions lets go of it.
    retired: AtomicBool,
    /// The adapter holds one session at a time (see [`one_session_per_process`]): it is
    /// leased only while idle, so a second session never reaches it.
    exclusive: bool,
    /// pi's agent folder (`PI_CODING_AGENT_DIR`, else `~/.pi/agent`) when the agent is
    /// pi-acp, which drops a provider's error and ends the turn empty: the error is then read
    /// from pi's session file (see `session::pi_turn_error`).
    pub pi_agent_dir: Option<std::path::PathBuf>,
    /// Claude Code's config folder, set when the agent is claude-agent-acp, whose transcripts
    /// show the provider errors of a turn it keeps retrying (`acp::transcript`).
    pub claude_config_dir: Option<std::path::PathBuf>,
    /// Since when the process has had no session (`None` while it has one): the idle
    /// reaper ends it once that lasted the idle time.
    idle_since: Mutex<Option<Instant>>,
    /// Set once a session sent a prompt on it: a process that only answered probes is what
    /// `config` ends at once.
    prompted: AtomicBool,
}

impl AgentHost {
    pub(super) fn is_live(&self) -> bool {
        !self.killed.load(Ordering::Relaxed)
            && !self.connection.is_closed()
            && !self.process.has_exited()
    }

    /// Kills the process group at once; every session on it fails.
    pub(super) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.process.signal_group(Signal::SIGKILL);
    }

    /// Open sessions on this process (leases, including the caller's own).
    pub(super) fn sessions(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// When its last session ended, if it has none now.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        *self.idle_since.locked()
    }

    pub(super) fn prompted(&self) -> bool {
        self.prompted.load(Ordering::Relaxed)
    }

    /// A session is about to prompt the agent.
    pub(super) fn mark_prompted(&self) {
        self.prompted.store(true, Ordering::Relaxed);
    }

    /// Takes the process out of the pool without killing it; see `retired`.
    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    fn capability(&self, pointer: &str) -> bool {
        self.capabilities
            .pointer(pointer)
            .is_some_and(|value| !value.is_null() && value != &Value::Bool(false))
    }

    pub(super) fn supports_resume(&self) -> bool {
        self.capability("/sessionCapabilities/resume")
    }

    /// The agent takes `type: "http"` entries in `mcpServers`.
    pub(super) fn supports_http_mcp(&self) -> bool {
        self.capability("/mcpCapabilities/http")
    }

    pub(super) fn supports_load(&self) -> bool {
        self.capability("/loadSession")
    }

    pub(super) fn supports_close(&self) -> bool {
        self.capability("/sessionCapabilities/close")
    }

    /// Maps an error from `method` on this host to a failure, with auth methods and what
    /// the agent wrote to stderr since `began` (the request's own part of a shared process's
    /// stderr).
    pub(super) async fn failure(
        &self,
        method: &str,
        error: RpcError,
        began: StderrMark,
    ) -> AgentFailure {
        rpc_failure(
            &self.backend.id,
            method,
            error,
            &self.auth_methods,
            &self.process.stderr_since(began).await,
        )
    }
}

/// A session's claim on a host; releases its load slot on drop. A host outside the pool (one
/// started for a single session) is held by its lease alone, so dropping the lease ends its
/// process group.
pub(crate) struct Lease {
    host: Arc<AgentHost>,
    /// The pool's idle reaper, told when a pooled process's last session ends; `None` for a
    /// process outside the pool, which ends with its lease.
    idle: Option<Arc<Idle>>,
}

impl Lease {
    pub(super) fn host(&self) -> &Arc<AgentHost> {
        &self.host
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The idle mark is set under the load's last decrement; an `acquire` clears it under
        // its group lock before it increments, and the reaper only takes a process whose load
        // is zero under that same lock.
        let mut since = self.host.idle_since.locked();
        if self.host.load.fetch_sub(1, Ordering::Relaxed) == 1 {
            *since = Some(Instant::now());
            drop(since);
            if let Some(idle) = &self.idle {
                idle.released();
            }
        }
    }
}

pub(crate) type Group = Arc<tokio::sync::Mutex<Vec<Arc<AgentHost>>>>;

pub(crate) struct Pool {
    config: AcpConfig,
    /// Owns every reader, writer, stderr and waiter task of every process.
    tracker: TaskTracker,
    groups: Arc<Mutex<HashMap<String, Group>>>,
    idle: Arc<Idle>,
    shut_down: AtomicBool,
}

impl Pool {
    pub(super) fn new(config: AcpConfig) -> Pool {
        Pool {
            idle: Arc::new(Idle::new(config.idle_ttl)),
            config,
            tracker: TaskTracker::new(),
            groups: Arc::new(Mutex::new(HashMap::new())),
            shut_down: AtomicBool::new(false),
        }
    }

    pub(super) fn config(&self) -> &AcpConfig {
        &self.config
    }

    /// Leases the least-loaded live process for `backend`, spawning one while the pool has
    /// room and every live process is busy (see [`pick`] for adapters that hold one session
    /// at a time).
    pub(super) async fn acquire(&self, backend: &BackendSpec) -> Result<Lease, AgentFailure> {
        if self.shut_down.load(Ordering::Relaxed) {
            return Err(execution(format!(
                "backend {}: the agent runner is shut down",
                backend.id
            )));
        }
        let group = {
            let mut groups = self.groups.locked();
            groups.entry(pool_key(backend)).or_default().clone()
        };
        let mut hosts = group.lock().await;
        // Dropping a dead host's last reference kills whatever is left of its group.
        hosts.retain(|host| host.is_live() && !host.retired.load(Ordering::Relaxed));
        // One command line and environment per group, so one adapter: all or none exclusive.
        let exclusive = hosts.first().is_some_and(|host| host.exclusive);
        let loads: Vec<usize> = hosts.iter().map(|host| host.sessions()).collect();
        let (host, pooled) = match pick(&loads, exclusive, self.config.pool_size) {
            Pick::Reuse(index) => (hosts[index].clone(), true),
            Pick::Spawn { pooled } => {
                let host = Arc::new(start_host(backend, &self.config, &self.tracker).await?);
                stop_on_overflow(&host, &self.tracker);
                if pooled {
                    hosts.push(host.clone());
                    self.idle
                        .start(&self.groups, self.config.shutdown_grace, &self.tracker);
                } else {
                    tracing::debug!(backend = %backend.id, pid = host.process.pid(), "every pooled process holds a session; this one ends with its session");
                }
                (host, pooled)
            }
        };
        {
            let mut since = host.idle_since.locked();
            *since = None;
            host.load.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Lease {
            host,
            idle: pooled.then(|| self.idle.clone()),
        })
    }

    /// Ends at once the pooled processes that have no session and never ran a prompt: the
    /// ones a `config` probe started.
    pub(super) async fn release_unprompted(&self) {
        idle::release_unprompted(&self.groups, self.config.shutdown_grace, &self.tracker).await;
    }

    /// EOF, then SIGTERM, then SIGKILL on every process group, all within `deadline`.
    pub(super) async fn shutdown(&self, deadline: Duration) {
        self.shut_down.store(true, Ordering::Relaxed);
        self.idle.stop();
        let end = Instant::now() + deadline;
        let groups: Vec<Group> = self
            .groups
            .locked()
            .drain()
            .map(|(_, group)| group)
            .collect();
        let mut hosts = Vec::new();
        for group in groups {
            hosts.append(&mut *group.lock().await);
        }
        // Leave time at the end for the final SIGKILL and the reapers.
        let grace = self.config.shutdown_grace.min(deadline * 2 / 5);
        let mut stopping = tokio::task::JoinSet::new();
        for host in &hosts {
            host.connection.close_input();
            let host = host.clone();
            stopping.spawn(async move { host.process.terminate(grace).await });
        }
        let _ =
            tokio::time::timeout_at(end, async { while stopping.join_next().await.is_some() {} })
                .await;
        for host in &hosts {
            host.process.signal_group(Signal::SIGKILL);
        }
        self.tracker.close();
        let _ = tokio::time::timeout_at(end, self.tracker.wait()).await;
    }
}

/// Backends with the same id but a different command line or env get separate processes.
fn pool_key(backend: &BackendSpec) -> String {
    let identity = json!([backend.command, backend.args, backend.env]);
    let digest = crate::util::sha256_hex(identity.to_string().as_bytes());
    format!("{}#{}", backend.id.to_ascii_lowercase(), &digest[..16])
}

/// Spawns `backend` and runs `initialize` under the init timeout.
/// Kills `host`'s process group once its agent sends a message past the connection's limit
/// (`connection::MAX_MESSAGE_BYTES`): the connection stopped reading, and an agent blocked on
/// its output must not linger until the pool next looks.
fn stop_on_overflow(host: &Arc<AgentHost>, tracker: &TaskTracker) {
    let overflowed = host.connection.overflowed();
    let closed = host.connection.closed_token();
    let watched = Arc::downgrade(host);
    tracker.spawn(async move {
        tokio::select! {
            _ = overflowed.cancelled() => {}
            _ = closed.cancelled() => {}
        }
        if overflowed.is_cancelled()
            && let Some(host) = watched.upgrade()
        {
            tracing::warn!(backend = %host.backend.id, pid = host.process.pid(), "stopping an agent that sent a message past the limit");
            host.kill();
        }
    });
}

async fn start_host(
    backend: &BackendSpec,
    config: &AcpConfig,
    tracker: &TaskTracker,
) -> Result<AgentHost, AgentFailure> {
    let mut process = spawn_agent(backend, &config.base_env, &config.supervision, tracker)
        .await
        .map_err(execution)?;
    let Some((stdin, stdout)) = process.take_stdio() else {
        return Err(execution(format!(
            "backend {}: the agent's stdin/stdout were not piped",
            backend.id
        )));
    };
    let exit = process.exit_watch();
    let close_reason: CloseReason = Box::new(move || {
        Box::pin(async move {
            // The pipe usually closes a moment before the leader is reaped.
            match wait_exit(exit, Duration::from_secs(2)).await {
                Some(status) => format!("agent process exited ({status})"),
                None => "agent process closed its stdout".to_owned(),
            }
        })
    });
    let connection = Connection::start(&backend.id, stdout, stdin, Some(close_reason), tracker);
    let result = initialize(backend, config, &connection, &process).await?;
    let capabilities = result
        .get("agentCapabilities")
        .cloned()
        .unwrap_or(Value::Null);
    let auth_methods = result
        .get("authMethods")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let agent_name = result
        .pointer("/agentInfo/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let exclusive = one_session_per_process(agent_name);
    tracing::debug!(backend = %backend.id, pid = process.pid(), agent = agent_name, exclusive, "agent initialized");
    Ok(AgentHost {
        backend: backend.clone(),
        connection,
        process,
        capabilities,
        auth_methods,
        agent_name: agent_name.to_owned(),
        load: AtomicUsize::new(0),
        killed: AtomicBool::new(false),
        retired: AtomicBool::new(false),
        exclusive,
        idle_since: Mutex::new(None),
        prompted: AtomicBool::new(false),
        pi_agent_dir: agent_name
            .eq_ignore_ascii_case("pi-acp")
            .then(|| pi_agent_dir(backend, config))
            .flatten(),
        claude_config_dir: agent_name
            .ends_with("claude-agent-acp")
            .then(|| transcript::claude_config_dir(|name| agent_path(backend, config, name)))
            .flatten(),
    })
}

/// Runs `initialize` under the init timeout and checks the protocol version it answers.
async fn initialize(
    backend: &BackendSpec,
    config: &AcpConfig,
    connection: &Connection,
    process: &AgentProcess,
) -> Result<Value, AgentFailure> {
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": false,
        },
        "clientInfo": {"name": "agentprism", "version": env!("CARGO_PKG_VERSION")},
    });
    let answer = tokio::time::timeout(
        config.init_timeout,
        connection.request("initialize", &params),
    )
    .await;
    let result = match answer {
        Err(_) => {
            let message = format!(
                "backend {} did not answer initialize within {} ms; is `{}` an ACP agent?",
                backend.id,
                config.init_timeout.as_millis(),
                process.command_line()
            );
            let stderr = process.stderr_since(StderrMark::default()).await;
            return Err(execution(with_stderr(message, &stderr)));
        }
        Ok(Err(error)) => {
            return Err(rpc_failure(
                &backend.id,
                "initialize",
                error,
                &[],
                &process.stderr_since(StderrMark::default()).await,
            ));
        }
        Ok(Ok(result)) => result,
    };
    let version = result.get("protocolVersion").and_then(Value::as_u64);
    if version != Some(PROTOCOL_VERSION) {
        return Err(AgentFailure::new(
            FailureKind::Execution,
            format!(
                "backend {} answered initialize with protocol version {}, but agentprism speaks ACP version {PROTOCOL_VERSION}",
                backend.id,
                result
                    .get("protocolVersion")
                    .map_or_else(|| "none".to_owned(), Value::to_string)
            ),
        ));
    }
    Ok(result)
}

/// Where pi keeps its sessions for this backend's environment.
fn pi_agent_dir(backend: &BackendSpec, config: &AcpConfig) -> Option<std::path::PathBuf> {
    let variable = |name: &str| agent_path(backend, config, name);
    variable("PI_CODING_AGENT_DIR").or_else(|| variable("HOME").map(|home| home.join(".pi/agent")))
}

/// A path-valued variable of the agent's environment, if set and not empty.
fn agent_path(backend: &BackendSpec, config: &AcpConfig, name: &str) -> Option<std::path::PathBuf> {
    backend
        .env
        .get(name)
        .map(String::as_str)
        .or_else(|| config.base_env.non_empty(name))
        .filter(|value| !value.is_empty())
        .map(std::path::PathBuf::from)
}

/// What [`Pool::acquire`] does, given the open sessions on each live pooled process.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    /// Lease the process at this index.
    Reuse(usize),
    /// Start a process; `pooled` keeps it for later sessions, otherwise it is the session's
    /// own and ends with it.
    Spawn { pooled: bool },
}

/// Multiplexing adapters share the least-loaded process, spawning while the pool has room and
/// every process is busy. An `exclusive` adapter is leased only while idle; with every pooled
/// process busy, the session gets a process of its own (pooled while there is room), since a
/// second session on a busy one would end the first.
fn pick(loads: &[usize], exclusive: bool, pool_size: usize) -> Pick {
    let room = loads.len() < pool_size;
    if exclusive {
        return match loads.iter().position(|load| *load == 0) {
            Some(index) => Pick::Reuse(index),
            None => Pick::Spawn { pooled: room },
        };
    }
    match loads.iter().enumerate().min_by_key(|(_, load)| **load) {
        Some((index, load)) if *load == 0 || !room => Pick::Reuse(index),
        _ => Pick::Spawn { pooled: true },
    }
}

/// Whether the agent (by the `agentInfo.name` it gave in `initialize`, so a command override
/// is recognised too) can hold only one session at a time. pi-acp 0.0.34 runs a `pi` process
/// per session, and every `session/new` ends with `closeAllExcept(newSession)`: it SIGTERMs
/// the `pi` of every other session, one in the middle of a turn included. That turn then never
/// ends (pi-acp waits for pi's `agent_settled`), a `session/cancel` for it finds no session and
/// does nothing, and sessions opened concurrently write to a dead `pi` (EPIPE, and pi-acp
/// crashes). With one session per process, each `pi` lives as long as its session.
fn one_session_per_process(agent_name: &str) -> bool {
    agent_name.eq_ignore_ascii_case("pi-acp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexing_adapters_share_the_least_loaded_process() {
        assert_eq!(pick(&[], false, 1), Pick::Spawn { pooled: true });
        assert_eq!(pick(&[3], false, 1), Pick::Reuse(0));
        assert_eq!(pick(&[2, 1], false, 2), Pick::Reuse(1));
        // Room left and every process busy: one more.
        assert_eq!(pick(&[1], false, 2), Pick::Spawn { pooled: true });
        assert_eq!(pick(&[1, 0], false, 3), Pick::Reuse(1));
    }

    #[test]
    fn an_exclusive_adapter_gets_a_process_per_concurrent_session() {
        assert_eq!(pick(&[], true, 1), Pick::Spawn { pooled: true });
        // The idle pooled process serves the next session.
        assert_eq!(pick(&[0], true, 1), Pick::Reuse(0));
        // Busy and no room: a process of the session's own, outside the pool.
        assert_eq!(pick(&[1], true, 1), Pick::Spawn { pooled: false });
        assert_eq!(pick(&[1], true, 2), Pick::Spawn { pooled: true });
        assert_eq!(pick(&[1, 0], true, 2), Pick::Reuse(1));
        assert_eq!(pick(&[1, 1], true, 2), Pick::Spawn { pooled: false });
    }

    #[test]
    fn pi_acp_is_recognised_by_its_initialize_name() {
        assert!(one_session_per_process("pi-acp"));
        assert!(one_session_per_process("PI-ACP"));
        assert!(!one_session_per_process("mock-acp-agent"));
        assert!(!one_session_per_process("opencode"));
    }
}
