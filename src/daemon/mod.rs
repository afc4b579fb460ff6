//! The per-user workflow daemon (`agentprism daemon run`): one process per env family that
//! serves the workflow MCP server on loopback HTTP, so runs outlive the hosts and shims that
//! started them (daemon.md 1.1–1.6).
//!
//! Life of a daemon ([`run`]): read the environment once (its fingerprint names the family),
//! bind 127.0.0.1 on the configured port (falling back to an ephemeral one when the port is
//! held; `bind.rs`), have the composition root assemble one engine for every project and the
//! MCP server over it ([`Services`], built by `crate::app`: this module never builds them),
//! serve `/mcp`, `/healthz` and the run monitor panel at `/ui` (`panel.rs`), publish its
//! instance record, and claim the family pointer by compare-and-swap (`publish.rs`). If a healthy daemon of the family already holds the
//! pointer it exits 0 ("already running"). Then its main loop (`main_loop.rs`) waits on one
//! event at a time: activity (a session, request or run began or ended) and the idle deadline
//! it sets, a tick (dead-client session eviction), a signal, a test hook, a control-socket
//! shutdown, a successor, or the HTTP server ending. On the way out it clears
//! the pointer if it still names this instance, stops taking requests, interrupts live runs
//! within a bounded drain (they stay resumable as `paused/interrupted`) and removes its record.
//!
//! [`spawn`] starts a daemon in the background and waits until it is ready; `daemon start` and
//! the stdio shim both go through it. [`probe`] is the `/healthz` client.

mod bind;
pub(crate) mod control;
pub(crate) mod health;
mod main_loop;
pub(crate) mod panel;
pub(crate) mod probe;
mod publish;
pub(crate) mod run_control;
pub(crate) mod spawn;
pub(crate) mod succession;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use crate::discovery::pointer::read_pointer;
use crate::discovery::{DaemonRecord, Paths, RunControlKey, current_fingerprint, process_alive_as};
use crate::engine::Engine;
use crate::env::{self, EnvSnapshot};
use crate::logging::notice;
use crate::mcp::McpServer;
use crate::service::{Manager, Notifier};
use crate::tools::WorkflowServer;
use crate::transport::http::HttpOptions;
use bind::{Bound, Front, Listen};
use main_loop::Daemon;
use probe::Probe;

/// The port a daemon binds unless `--port` or `AGENTPRISM_DAEMON_PORT` says otherwise.
pub(crate) const DEFAULT_PORT: u16 = 29888;
/// Default interval of the dead-client session sweep and the stop-intent refresh (the idle
/// exit has a timer of its own).
pub(crate) const DEFAULT_TICK: Duration = Duration::from_secs(60);
/// Default idle lifetime: 15 minutes with no sessions, executions or requests.
pub(crate) const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(15 * 60);
/// Default lifetime of a session with no open connection.
pub(crate) const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(5 * 60);
/// How long shutdown waits for live runs to reach `paused/interrupted`, and for HTTP
/// connections to close.
pub(crate) const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// How often a current daemon checks that the family pointer still names it (daemon.md 1.8:
/// ≤2 s); shorter when the tick is.
pub(crate) const POINTER_POLL: Duration = Duration::from_secs(2);
/// How often a lame duck closes idle sessions and checks whether it may exit.
pub(crate) const DRAIN_SWEEP: Duration = Duration::from_millis(100);
/// The log is rotated at this size.
pub(crate) const LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated logs kept besides the current one.
pub(crate) const LOG_KEEP: usize = 3;
/// This build's version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version this process acts as in discovery and succession: [`VERSION`], unless a test
/// build was given `AGENTPRISM_TEST_VERSION` (debug builds and the `version-override` feature
/// only; a release build never reads it).
pub(crate) fn version() -> &'static str {
    static EFFECTIVE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    EFFECTIVE.get_or_init(|| {
        if cfg!(any(debug_assertions, feature = "version-override"))
            && let Some(version) = std::env::var(env::TEST_VERSION)
                .ok()
                .filter(|version| !version.trim().is_empty())
        {
            return version.trim().to_owned();
        }
        VERSION.to_owned()
    })
}

/// What `daemon run` was asked to do.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// `--port`; overrides `AGENTPRISM_DAEMON_PORT`.
    pub port: Option<u16>,
    /// `--instance-id`, passed by a spawner so it can recognise its daemon.
    pub instance_id: Option<String>,
    /// `--supersede`: may replace a live daemon of a strictly lower version in the pointer.
    pub supersede: bool,
    /// `--log-file`: diagnostics go there (rotated) instead of stderr; set by self-spawn.
    pub log_file: Option<PathBuf>,
    /// `--managed`: the service manager that started us, if any.
    pub managed: Option<Manager>,
    /// The sd-notify channel, read before any thread started; silent unless systemd manages
    /// us.
    pub notifier: Arc<Notifier>,
    /// A listening socket passed by socket activation (`LISTEN_FDS`), served instead of
    /// binding a port.
    pub activated: Option<std::net::TcpListener>,
}

/// Settings resolved from flags and the environment, once at start.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub port: u16,
    pub tick: Duration,
    /// `None`: never exit for idleness.
    pub idle_ttl: Option<Duration>,
    pub session_ttl: Duration,
    pub test_hooks: bool,
}

impl Settings {
    pub(crate) fn from_env(env: &EnvSnapshot, port_flag: Option<u16>) -> Result<Settings> {
        let millis = |key: &str, default: Duration| -> Result<Duration> {
            let value = env
                .u64_or(key, default.as_millis() as u64)
                .map_err(anyhow::Error::msg)?;
            Ok(Duration::from_millis(value))
        };
        let port = match port_flag {
            Some(port) => port,
            None => configured_port(env)?,
        };
        let idle_ttl = millis(env::DAEMON_IDLE_TTL_MS, DEFAULT_IDLE_TTL)?;
        Ok(Settings {
            port,
            tick: millis(env::DAEMON_TICK_MS, DEFAULT_TICK)?.max(Duration::from_millis(1)),
            idle_ttl: (!idle_ttl.is_zero()).then_some(idle_ttl),
            session_ttl: millis(env::SESSION_TTL_MS, DEFAULT_SESSION_TTL)?,
            test_hooks: env::TEST_HOOKS_BUILT_IN && env.flag(env::TEST_HOOKS),
        })
    }
}

/// Whether this process's requests to a daemon must carry the bearer token: where the kernel
/// cannot name a loopback connection's user (or a test pretends so).
pub(crate) fn peer_lookup_needs_token(env: &EnvSnapshot) -> bool {
    lookup_needs_token(env::TEST_HOOKS_BUILT_IN && env.flag(env::TEST_NO_PEER_LOOKUP))
}

/// Whether the bearer token is needed: where the kernel cannot name a loopback connection's
/// user, or where the test hook `no_peer_lookup` pretends so.
pub(crate) fn lookup_needs_token(no_peer_lookup: bool) -> bool {
    no_peer_lookup || !crate::transport::peer::lookup_available()
}

/// Decides once whether this process sends the bearer token to daemons (shims, the CLI).
pub(crate) fn remember_token(env: &EnvSnapshot, paths: &Paths) {
    crate::discovery::token::remember(paths, peer_lookup_needs_token(env));
}

/// `AGENTPRISM_DAEMON_PORT`, else [`DEFAULT_PORT`].
pub(crate) fn configured_port(env: &EnvSnapshot) -> Result<u16> {
    let port = env
        .u64_or(env::DAEMON_PORT, u64::from(DEFAULT_PORT))
        .map_err(anyhow::Error::msg)?;
    u16::try_from(port)
        .map_err(|_| anyhow!("{} must be a port number, got {port}", env::DAEMON_PORT))
}

/// What a daemon serves: an engine and the MCP server over it, assembled by the composition
/// root (`crate::app`). `agentprism serve` serves the same over stdio or HTTP.
pub(crate) struct Services {
    /// Runs every project's workflows; `/healthz` counts its executions, run control drives
    /// it, the main loop carries out its stop intents.
    pub engine: Engine,
    /// The MCP face of the engine: `delete-run` goes through it so that its sessions hear of
    /// the deletion.
    pub workflow: Arc<WorkflowServer>,
    /// Sessions, protocol eras and dispatch over `workflow`.
    pub server: Arc<McpServer>,
}

impl Services {
    /// Stops taking requests, ends the handler's background work, then interrupts live runs
    /// within `deadline` (they stay resumable as `paused/interrupted`).
    pub(crate) async fn shutdown(&self, deadline: Duration) {
        self.server.shutdown();
        self.workflow.shutdown().await;
        self.engine.shutdown(deadline).await;
    }
}

/// What a daemon knows about itself before it binds: read once at start.
struct Start {
    settings: Settings,
    paths: Paths,
    /// The live environment's fingerprint, with non-UTF-8 values, as shims compute it.
    fingerprint: String,
    instance_id: String,
    /// `None` when the key is unusable: `/healthz` then answers without proof and there is
    /// no control plane.
    key: Option<RunControlKey>,
    /// Where the control socket goes (`XDG_RUNTIME_DIR`), if set.
    runtime_dir: Option<PathBuf>,
    socket_activated: bool,
    /// The sd-notify channel, read before any thread started.
    notifier: Arc<Notifier>,
}

impl Start {
    fn resolve(env: &EnvSnapshot, options: &RunOptions) -> Result<Start> {
        if let Some(log) = &options.log_file {
            crate::logging::log_to_file(log, LOG_MAX_BYTES, LOG_KEEP, true)
                .with_context(|| format!("opening the daemon log {}", log.display()))?;
        }
        let settings = Settings::from_env(env, options.port)?;
        let paths = Paths::from_env(env)?;
        paths.ensure_dirs()?;
        let instance_id = options
            .instance_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let key = match RunControlKey::load_or_create(&paths) {
            Ok(key) => Some(key),
            Err(error) => {
                notice(format_args!(
                    "run-control key unusable, /healthz answers without proof and control is off: {error}"
                ));
                None
            }
        };
        Ok(Start {
            settings,
            paths,
            fingerprint: current_fingerprint(),
            instance_id,
            key,
            runtime_dir: crate::control::socket::runtime_dir_from(env),
            socket_activated: options.activated.is_some(),
            notifier: options.notifier.clone(),
        })
    }
}

/// Runs the daemon in the foreground until a signal, idleness or a fatal error; returns the
/// exit code (0 also for "already running"). `assemble` builds what it serves under its
/// instance id, with the base HTTP options (allowed origins, who may connect; the daemon adds
/// its own hooks), once the port is bound and diagnostics go to the log: a daemon that finds
/// its family's daemon already running never opens the store.
pub(crate) async fn run<F, Fut>(
    env: &EnvSnapshot,
    mut options: RunOptions,
    assemble: F,
) -> Result<u8>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<(Services, HttpOptions)>>,
{
    let start = Start::resolve(env, &options)?;
    let front = Front::start()?;
    let listen = Listen {
        paths: &start.paths,
        fingerprint: &start.fingerprint,
        port: start.settings.port,
        key: start.key.as_ref(),
        superseding: options.supersede.then(version),
    };
    let listener = match bind::listen(options.activated.take(), listen).await? {
        Bound::Listener(listener) => listener,
        Bound::AlreadyRunning(record) => {
            publish::already_running(&record, &options.notifier);
            return Ok(0);
        }
    };
    let (services, http) = assemble(start.instance_id.clone()).await?;
    let mut daemon = Daemon::serve(start, front, listener, services, http)?;
    if !daemon.claim(options.supersede).await? {
        return Ok(0);
    }
    daemon.ready(options.log_file.is_none()).await;
    let reason = daemon.run().await?;
    Ok(daemon.shutdown(reason).await)
}

/// Probes the family's current daemon through its pointer: `Some` with the record and the
/// probe result when the pointer names a live process.
pub(crate) async fn probe_family(
    paths: &Paths,
    fingerprint: &str,
    key: Option<&RunControlKey>,
) -> Option<(DaemonRecord, Probe)> {
    let record = read_pointer(paths, fingerprint)?;
    if !process_alive_as(&record).is_alive() {
        return None;
    }
    let probe = probe::probe(&record, key, crate::discovery::healthz::HEALTHZ_TIMEOUT).await;
    Some((record, probe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_env() {
        let env = EnvSnapshot::from_pairs([
            (env::DAEMON_IDLE_TTL_MS, "0"),
            (env::DAEMON_TICK_MS, "25"),
            (env::DAEMON_PORT, "0"),
        ]);
        let settings = Settings::from_env(&env, None).unwrap();
        assert_eq!(settings.port, 0);
        assert_eq!(settings.idle_ttl, None);
        assert_eq!(settings.tick, Duration::from_millis(25));
        assert_eq!(settings.session_ttl, DEFAULT_SESSION_TTL);
        assert!(!settings.test_hooks);
        let defaults = Settings::from_env(&EnvSnapshot::default(), Some(7)).unwrap();
        assert_eq!(defaults.port, 7);
        assert_eq!(defaults.idle_ttl, Some(DEFAULT_IDLE_TTL));
        assert_eq!(defaults.tick, DEFAULT_TICK);
        let bad = EnvSnapshot::from_pairs([(env::DAEMON_PORT, "70000")]);
        assert!(Settings::from_env(&bad, None).is_err());
    }
}
