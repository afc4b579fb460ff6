//! The per-user workflow daemon (`agentprism daemon run`): one process per env family that
//! serves the workflow MCP server on loopback HTTP, so runs outlive the hosts and shims that
//! started them (daemon.md 1.1–1.6).
//!
//! Life of a daemon: read the environment once (its fingerprint names the family), bind
//! 127.0.0.1 on the configured port (falling back to an ephemeral one when the port is held),
//! build one engine for every project, serve `/mcp` and `/healthz`, publish its instance
//! record, and claim the family pointer by compare-and-swap. If a healthy daemon of the family
//! already holds the pointer it exits 0 ("already running"). Then its main loop waits on one
//! [`Event`] at a time: a tick (idle check, dead-client session eviction), a signal, a test
//! hook, or the HTTP server ending. On the way out it clears the pointer if it still names
//! this instance, stops taking requests, interrupts live runs within a bounded drain (they
//! stay resumable as `paused/interrupted`) and removes its record.
//!
//! [`spawn`] starts a daemon in the background and waits until it is ready; `daemon start` and
//! the stdio shim both go through it. [`probe`] is the `/healthz` client.

pub mod control;
pub mod health;
pub mod probe;
pub mod run_control;
pub mod spawn;
pub mod succession;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::discovery::pointer::Replaced;
use crate::discovery::pointer::read_pointer;
use crate::discovery::record::{read_instance_records, write_own_record};
use crate::discovery::{
    Claim, DaemonRecord, Paths, RecordRead, RunControlKey, claim_pointer, clear_pointer_if_mine,
    compare_versions, current_fingerprint, process_alive_as, remove_own_record,
};
use crate::engine::events::RunNotice;
use crate::env::{self, EnvSnapshot};
use crate::logging::notice;
use crate::service::{Manager, Notifier};
use health::{Health, Phase};
use probe::Probe;

/// The port a daemon binds unless `--port` or `AGENTPRISM_DAEMON_PORT` says otherwise.
pub const DEFAULT_PORT: u16 = 29888;
/// Default interval of the idle check and session eviction.
pub const DEFAULT_TICK: Duration = Duration::from_secs(60);
/// Default idle lifetime: 15 minutes with no sessions, executions or requests.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(15 * 60);
/// Default lifetime of a session with no open connection.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(5 * 60);
/// How long shutdown waits for live runs to reach `paused/interrupted`, and for HTTP
/// connections to close.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(5);
/// How often a current daemon checks that the family pointer still names it (daemon.md 1.8:
/// ≤2 s); shorter when the tick is.
pub const POINTER_POLL: Duration = Duration::from_secs(2);
/// How often a lame duck closes idle sessions and checks whether it may exit.
pub const DRAIN_SWEEP: Duration = Duration::from_millis(100);
/// The log is rotated at this size.
pub const LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated logs kept besides the current one.
pub const LOG_KEEP: usize = 3;
/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version this process acts as in discovery and succession: [`VERSION`], unless a test
/// build was given `AGENTPRISM_TEST_VERSION` (debug builds and the `version-override` feature
/// only; a release build never reads it).
pub fn version() -> &'static str {
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
pub struct Settings {
    pub port: u16,
    pub tick: Duration,
    /// `None`: never exit for idleness.
    pub idle_ttl: Option<Duration>,
    pub session_ttl: Duration,
    pub test_hooks: bool,
    pub allowed_origins: Vec<String>,
}

impl Settings {
    pub fn from_env(env: &EnvSnapshot, port_flag: Option<u16>) -> Result<Settings> {
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
            allowed_origins: env
                .get(env::DAEMON_ALLOWED_ORIGINS)
                .map(|list| {
                    list.split(',')
                        .map(|origin| origin.trim().to_owned())
                        .filter(|origin| !origin.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// Whom a listener serving the `workflow` tool lets in: this user only (the kernel names
/// each connection's user; where it cannot, the bearer token of `R/daemons/http-token.json`
/// is required), unless `AGENTPRISM_DAEMON_ALLOW_OTHER_USERS` opens it to everyone.
pub fn http_access(env: &EnvSnapshot, paths: &Paths) -> crate::transport::peer::Access {
    use crate::transport::peer::Access;
    if env.flag(env::DAEMON_ALLOW_OTHER_USERS) {
        notice(format_args!(
            "{} is set: every local user can reach this endpoint and run commands as you",
            env::DAEMON_ALLOW_OTHER_USERS
        ));
        return Access::Open;
    }
    let forced = env::TEST_HOOKS_BUILT_IN && env.flag(env::TEST_NO_PEER_LOOKUP);
    let needs_token = peer_lookup_needs_token(env);
    // The token exists only where it is asked for (this process creates it then, and sends
    // it too); a lookup that fails for one connection on a system where it works is then a
    // refusal, with no token to fall back on.
    crate::discovery::token::remember(paths, needs_token);
    let token = crate::discovery::token::sent().map(str::to_owned);
    if needs_token && token.is_none() {
        notice(format_args!(
            "the HTTP bearer token {} is unusable and this system cannot name a connection's \
             user, so no request gets in",
            paths.http_token().display()
        ));
    }
    Access::Owner {
        uid: nix::unistd::geteuid().as_raw(),
        token: token.map(std::sync::Arc::from),
        lookup: !forced,
    }
}

/// Whether this process's requests to a daemon must carry the bearer token: where the kernel
/// cannot name a loopback connection's user (or a test pretends so).
pub fn peer_lookup_needs_token(env: &EnvSnapshot) -> bool {
    (env::TEST_HOOKS_BUILT_IN && env.flag(env::TEST_NO_PEER_LOOKUP))
        || !crate::transport::peer::lookup_available()
}

/// Decides once whether this process sends the bearer token to daemons (shims, the CLI).
pub fn remember_token(env: &EnvSnapshot, paths: &Paths) {
    crate::discovery::token::remember(paths, peer_lookup_needs_token(env));
}

/// `AGENTPRISM_DAEMON_PORT`, else [`DEFAULT_PORT`].
pub fn configured_port(env: &EnvSnapshot) -> Result<u16> {
    let port = env
        .u64_or(env::DAEMON_PORT, u64::from(DEFAULT_PORT))
        .map_err(anyhow::Error::msg)?;
    u16::try_from(port)
        .map_err(|_| anyhow!("{} must be a port number, got {port}", env::DAEMON_PORT))
}

/// Every reason the daemon's main loop wakes up.
#[derive(Debug)]
enum Event {
    /// Time to check idleness and evict sessions of dead clients.
    Tick,
    /// SIGTERM or SIGINT: exit now.
    Signal(&'static str),
    /// The test hook asked to evict this session.
    Evict(String),
    /// The HTTP server stopped on its own (it should not).
    ServerStopped(String),
    /// Time to prove to systemd's watchdog that we still answer `/healthz`.
    Watchdog,
    /// A verified `shutdown` on the control socket, from the named sender.
    ControlShutdown(String),
    /// A successor took over (announced, or found in the pointer): turn lame duck.
    Superseded(String),
    /// Time to look whether the family pointer names another live daemon.
    PointerCheck,
    /// A lame duck's sweep: close idle sessions, exit once nothing is left.
    Drain,
}

/// Why the daemon is exiting, for its last log line.
#[derive(Debug)]
enum ExitReason {
    Signal(&'static str),
    ControlShutdown(String),
    Idle(Duration),
    /// A lame duck with nothing left to serve.
    Drained,
    ServerStopped(String),
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Signal(name) => write!(f, "received {name}"),
            ExitReason::ControlShutdown(from) => write!(f, "shutdown requested by {from}"),
            ExitReason::Idle(ttl) => write!(f, "idle for {ttl:?}"),
            ExitReason::Drained => f.write_str("superseded and drained"),
            ExitReason::ServerStopped(why) => f.write_str(why),
        }
    }
}

/// Runs the daemon in the foreground until a signal, idleness or a fatal error; returns the
/// exit code (0 also for "already running").
pub async fn run(env: &EnvSnapshot, mut options: RunOptions) -> Result<u8> {
    if let Some(log) = &options.log_file {
        crate::logging::log_to_file(log, LOG_MAX_BYTES, LOG_KEEP, true)
            .with_context(|| format!("opening the daemon log {}", log.display()))?;
    }
    let settings = Settings::from_env(env, options.port)?;
    let paths = Paths::from_env(env)?;
    paths.ensure_dirs()?;
    // The live environment, with non-UTF-8 values, as shims compute it.
    let fingerprint = current_fingerprint();
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

    let front = Front::start()?;
    let activated = options.activated.take();
    let socket_activated = activated.is_some();
    let listener = match activated {
        Some(listener) => {
            listener
                .set_nonblocking(true)
                .context("preparing the activated socket")?;
            TcpListener::from_std(listener).context("serving the activated socket")?
        }
        None => match bind_daemon_port(
            &paths,
            &fingerprint,
            settings.port,
            key.as_ref(),
            options.supersede.then(version),
        )
        .await?
        {
            Bound::Listener(listener) => listener,
            Bound::AlreadyRunning(record) => {
                already_running(&record, &options.notifier);
                return Ok(0);
            }
        },
    };
    let address: SocketAddr = listener.local_addr().context("reading the bound address")?;
    let listener = front.adopt(listener)?;

    let engine = crate::cli::build_engine_as(env, true, Some(instance_id.clone())).await?;
    let handler = crate::tools::WorkflowServer::new(engine.clone(), Default::default());
    let server = Arc::new(crate::mcp::server::McpServer::new(
        handler.clone(),
        crate::mcp::server::ServerOptions::default(),
    ));
    // The control socket exists before the record names it. Without a usable key there is
    // no control plane at all: never an unsigned one.
    let control = match &key {
        Some(key) => {
            let identity = crate::control::Identity {
                instance_id: instance_id.clone(),
                pid: std::process::id(),
                version: version().to_owned(),
            };
            let runtime_dir = crate::control::socket::runtime_dir_from(env);
            // Bound inside the front runtime, which then serves it.
            let _front = front.handle().enter();
            match crate::control::ControlServer::bind(
                &paths,
                runtime_dir.as_deref(),
                identity,
                key.clone(),
            ) {
                Ok(server) => Some(server),
                Err(error) => {
                    notice(format_args!(
                        "control socket unavailable, control is off: {error}"
                    ));
                    None
                }
            }
        }
        None => None,
    };
    let control_url = control
        .as_ref()
        .map(crate::control::ControlServer::control_url)
        .unwrap_or_default();
    let mut record = DaemonRecord::for_this_process(
        version(),
        &instance_id,
        address.port(),
        &fingerprint,
        &control_url,
    );
    let health = Arc::new(Health::new(
        record.clone(),
        key,
        server.clone(),
        engine.clone(),
    ));

    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let (evict_sender, mut evictions) = mpsc::unbounded_channel::<String>();
    let (superseded_sender, mut supersessions) = mpsc::unbounded_channel::<String>();
    let http_options = crate::transport::http::HttpOptions {
        allowed_origins: settings.allowed_origins.clone(),
        shutdown_deadline: DRAIN_DEADLINE,
        intercept: Some(health::routes(
            health.clone(),
            settings.test_hooks,
            evict_sender,
        )),
        decorate: Some(health::decorate(health.clone())),
        access: http_access(env, &paths),
        implementation: crate::discovery::record::IMPLEMENTATION,
        dispatch: Some(tokio::runtime::Handle::current()),
        ..Default::default()
    };
    let second_listener_options = http_options.clone();
    let mut http = front
        .handle()
        .spawn(tasks.track_future(crate::transport::http::serve(
            listener,
            server.clone(),
            http_options,
            shutdown.clone().cancelled_owned(),
        )));

    let (control_shutdown, mut control_shutdowns) = mpsc::unbounded_channel::<String>();
    if let Some(control) = control {
        let handler = Arc::new(control::DaemonControl {
            health: health.clone(),
            engine: engine.clone(),
            shutdown: control_shutdown,
            succession: succession::Succession {
                paths: paths.clone(),
                health: health.clone(),
                superseded: superseded_sender.clone(),
            },
            engine_runtime: tokio::runtime::Handle::current(),
            workflow: handler.clone(),
        });
        front
            .handle()
            .spawn(tasks.track_future(control.serve(handler, shutdown.clone())));
    }

    write_own_record(&paths, &record)?;
    let claim = {
        let (paths, record) = (paths.clone(), record.clone());
        tokio::task::spawn_blocking(move || {
            claim_pointer(&paths, &record, options.supersede, |existing| {
                succession::holds_pointer(&paths, existing)
            })
        })
        .await
        .context("claiming the family pointer")??
    };
    if let Claim::AlreadyRunning(current) = claim {
        already_running(&current, &options.notifier);
        health.set_phase(Phase::Exiting);
        shutdown.cancel();
        server.shutdown();
        finish(&tasks, &paths, &record).await;
        handler.shutdown().await;
        engine.shutdown(DRAIN_DEADLINE).await;
        return Ok(0);
    }
    health.set_phase(Phase::Current);
    if let Claim::Claimed {
        replaced: Replaced::Superseded(predecessor),
    } = &claim
    {
        announce_to(&health, predecessor);
    }
    engine.complete_stop_intents().await;
    // Discovery names us now, so a shim waiting on `systemctl start` finds us at once.
    notify(
        "READY=1",
        options
            .notifier
            .ready_with_status(&format!("current: 127.0.0.1:{}", address.port())),
    );
    notice(format_args!(
        "daemon {} pid {} instance {instance_id} family {fingerprint} listening on {} (idle ttl {}, tick {:?})",
        record.version,
        record.pid,
        record.url,
        settings
            .idle_ttl
            .map_or_else(|| "off".to_owned(), |ttl| format!("{ttl:?}")),
        settings.tick,
    ));
    if options.log_file.is_none() {
        crate::cli::output::stdout(format_args!("{}", record.url), true);
    }

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the SIGINT handler")?;
    let mut tick = tokio::time::interval(settings.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_since: Option<Instant> = None;
    let mut pointer_check = tokio::time::interval(settings.tick.min(POINTER_POLL));
    pointer_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Runs only while lame duck.
    let mut drain: Option<tokio::time::Interval> = None;
    // A lame duck also checks at once when a run settles, so its exit does not wait for the
    // next sweep; it subscribes when it turns lame duck.
    let mut notices: Option<broadcast::Receiver<RunNotice>> = None;
    let mut reported_runs: Option<usize> = None;
    let watchdog_interval = options.notifier.watchdog_interval();
    let mut watchdog = watchdog_interval.map(|period| {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });

    let reason = loop {
        let event = tokio::select! {
            _ = tick.tick() => Event::Tick,
            _ = terminate.recv() => Event::Signal("SIGTERM"),
            _ = interrupt.recv() => Event::Signal("SIGINT"),
            Some(session) = evictions.recv() => Event::Evict(session),
            _ = next_tick(watchdog.as_mut()) => Event::Watchdog,
            Some(from) = control_shutdowns.recv() => Event::ControlShutdown(from),
            Some(successor) = supersessions.recv() => Event::Superseded(successor),
            _ = pointer_check.tick(), if !health.is_lame_duck() => Event::PointerCheck,
            _ = next_tick(drain.as_mut()) => Event::Drain,
            notice = next_notice(notices.as_mut()) => match notice {
                // Lagged: some notices were missed, one of them may have been a settle.
                Ok(RunNotice::Settled { .. }) | Err(_) => Event::Drain,
                Ok(_) => continue,
            },
            ended = &mut http => Event::ServerStopped(match ended {
                Ok(Ok(())) => "the HTTP server stopped".to_owned(),
                Ok(Err(error)) => format!("the HTTP server failed: {error:#}"),
                Err(error) => format!("the HTTP server task failed: {error}"),
            }),
        };
        match event {
            Event::Tick => {
                evict_dead_sessions(&server, settings.session_ttl).await;
                // Stop intents for runs we own are carried out here as well as when they
                // arrive; the count keeps a lame duck alive until they are acknowledged.
                let unacked = engine.complete_stop_intents().await;
                health
                    .unacked_intents
                    .store(unacked, std::sync::atomic::Ordering::Relaxed);
                let busy = !health.drained();
                if busy {
                    idle_since = None;
                    continue;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if let Some(ttl) = settings.idle_ttl
                    && since.elapsed() >= ttl
                {
                    break ExitReason::Idle(ttl);
                }
            }
            Event::Signal(name) => break ExitReason::Signal(name),
            Event::Evict(session) => {
                let evicted = server.evict_session(&session).await;
                notice(format_args!(
                    "test hook: evict session {session}: {evicted}"
                ));
            }
            Event::ServerStopped(why) => break ExitReason::ServerStopped(why),
            Event::ControlShutdown(from) => break ExitReason::ControlShutdown(from),
            Event::PointerCheck => {
                if let Some(successor) =
                    succession::pointer_names_another(&paths, &record, health.key.as_ref()).await
                    && health.become_lame_duck(&successor.instance_id)
                {
                    let _ = superseded_sender.send(successor.instance_id);
                } else if !socket_activated
                    && settings.port != 0
                    && record.port != settings.port
                    && let Ok(listener) = bind_loopback(settings.port)
                    && let Ok(listener) = front.adopt(listener)
                {
                    // The configured port is free again (a drained predecessor exited): serve
                    // there too and publish it, so hosts configured with the usual URL find us.
                    // The first port stays served for the connections that use it.
                    front.handle().spawn(tasks.track_future(serve_more(
                        listener,
                        server.clone(),
                        second_listener_options.clone(),
                        shutdown.clone(),
                    )));
                    record = publish_port(&paths, &record, settings.port).await;
                }
            }
            Event::Superseded(successor) => {
                // The one-way door: on record before anything else.
                succession::record_superseded(&paths, &record, &successor);
                notice(format_args!(
                    "superseded by instance {successor}: lame duck, draining {} runs and {} sessions",
                    engine.active_executions(),
                    server.session_count()
                ));
                let mut interval = tokio::time::interval(DRAIN_SWEEP);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                drain = Some(interval);
                notices = Some(engine.subscribe());
            }
            Event::Drain => {
                close_idle_sessions(&server).await;
                let runs = engine.active_executions();
                if runs == 0
                    && health
                        .unacked_intents
                        .load(std::sync::atomic::Ordering::Relaxed)
                        > 0
                {
                    // The count is refreshed on ticks; do not wait a whole tick for it.
                    let unacked = engine.complete_stop_intents().await;
                    health
                        .unacked_intents
                        .store(unacked, std::sync::atomic::Ordering::Relaxed);
                }
                if reported_runs != Some(runs) {
                    reported_runs = Some(runs);
                    notify(
                        "STATUS",
                        options.notifier.status(&format!("lame duck: {runs} runs")),
                    );
                }
                if health.drained() {
                    break ExitReason::Drained;
                }
            }
            Event::Watchdog => {
                // The same check a shim makes: our own listener, our own key. The deadline
                // is one interval, so a stalled answer cannot delay the next ping too.
                let deadline = watchdog_interval.unwrap_or(DRAIN_DEADLINE);
                match probe::probe(&record, health.key.as_ref(), deadline).await {
                    Probe::Identified(_) => notify("WATCHDOG=1", options.notifier.watchdog()),
                    other => notice(format_args!(
                        "watchdog: our own /healthz failed ({other:?}); not pinging systemd"
                    )),
                }
            }
        }
    };
    // Final: systemd starts its stop timer. Never sent when merely turning lame duck.
    notify("STOPPING=1", options.notifier.stopping());

    notice(format_args!("daemon pid {} exiting: {reason}", record.pid));
    health.set_phase(Phase::Exiting);
    // New shims must stop finding us before we stop answering.
    clear_own_pointer(&paths, &record).await;
    shutdown.cancel();
    server.shutdown();
    handler.shutdown().await;
    engine.shutdown(DRAIN_DEADLINE).await;
    finish(&tasks, &paths, &record).await;
    notice(format_args!("daemon pid {} exited", record.pid));
    Ok(match reason {
        ExitReason::ServerStopped(_) => 1,
        ExitReason::Signal(_)
        | ExitReason::ControlShutdown(_)
        | ExitReason::Idle(_)
        | ExitReason::Drained => 0,
    })
}

/// Waits (bounded) for the HTTP server, then removes this daemon's record and pointer.
async fn finish(tasks: &TaskTracker, paths: &Paths, record: &DaemonRecord) {
    tasks.close();
    if tokio::time::timeout(DRAIN_DEADLINE * 2, tasks.wait())
        .await
        .is_err()
    {
        notice("the HTTP server did not stop within its deadline");
    }
    clear_own_pointer(paths, record).await;
    if let Err(error) = remove_own_record(paths, record.pid, &record.instance_id) {
        notice(format_args!("removing the instance record: {error}"));
    }
}

async fn clear_own_pointer(paths: &Paths, record: &DaemonRecord) {
    let (paths, record) = (paths.clone(), record.clone());
    let cleared = tokio::task::spawn_blocking(move || {
        clear_pointer_if_mine(
            &paths,
            &record.env_fingerprint,
            record.pid,
            &record.instance_id,
        )
    })
    .await;
    match cleared {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => notice(format_args!("clearing the family pointer: {error}")),
        Err(error) => notice(format_args!("clearing the family pointer: {error}")),
    }
}

/// The daemon's front runtime: one worker thread of its own that accepts HTTP connections,
/// answers `/healthz` and serves the control socket, while MCP requests and runs go to the
/// main runtime (`HttpOptions::dispatch`). However busy the engine gets, the daemon still
/// proves it is alive, which is what keeps shims from calling it unresponsive (daemon.md 1.4,
/// pitfall 8).
struct Front(Option<tokio::runtime::Runtime>);

impl Front {
    fn start() -> Result<Front> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentprism-front")
            .enable_all()
            .build()
            .context("starting the daemon's front runtime")?;
        Ok(Front(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("the front runtime lives until drop")
            .handle()
    }

    /// Moves a listener bound on the main runtime over to the front runtime's reactor.
    fn adopt(&self, listener: TcpListener) -> Result<TcpListener> {
        let listener = listener.into_std().context("detaching the listener")?;
        let _front = self.handle().enter();
        TcpListener::from_std(listener).context("moving the listener to the front runtime")
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        // Dropped from async code: shut down without blocking. Its tasks have ended by then
        // (the daemon waits for them), or the daemon is exiting anyway.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Serves `/mcp` on one more listener; its failure is logged, not fatal (the first listener
/// is the daemon's lifeline).
async fn serve_more(
    listener: TcpListener,
    server: Arc<crate::mcp::McpServer>,
    options: crate::transport::http::HttpOptions,
    shutdown: CancellationToken,
) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    notice(format_args!(
        "now also serving on the configured port {port}"
    ));
    if let Err(error) =
        crate::transport::http::serve(listener, server, options, shutdown.cancelled_owned()).await
    {
        notice(format_args!(
            "the listener on port {port} failed: {error:#}"
        ));
    }
}

/// Rewrites this daemon's record, and the family pointer if it names us, with `port`.
/// Returns the record as published.
async fn publish_port(paths: &Paths, record: &DaemonRecord, port: u16) -> DaemonRecord {
    let mut moved = record.clone();
    moved.port = port;
    moved.url = crate::discovery::record::mcp_url(port);
    if let Err(error) = write_own_record(paths, &moved) {
        notice(format_args!("recording port {port}: {error}"));
        return record.clone();
    }
    let (owned_paths, owned) = (paths.clone(), moved.clone());
    let claimed = tokio::task::spawn_blocking(move || {
        claim_pointer(&owned_paths, &owned, false, |existing| {
            succession::holds_pointer(&owned_paths, existing)
        })
    })
    .await;
    match claimed {
        Ok(Ok(Claim::Claimed { .. })) => {}
        Ok(Ok(Claim::AlreadyRunning(other))) => notice(format_args!(
            "port {port}: the pointer names daemon pid {}, left alone",
            other.pid
        )),
        Ok(Err(error)) => notice(format_args!("port {port}: updating the pointer: {error}")),
        Err(error) => notice(format_args!("port {port}: updating the pointer: {error}")),
    }
    moved
}

/// A lame duck hands its idle sessions over: each one with no request in flight is closed, so
/// its client's next request gets 404 and re-initializes with the successor. Sessions busy
/// with a request stay until it ends (requests are bounded by their own ceilings).
async fn close_idle_sessions(server: &crate::mcp::McpServer) {
    for (id, activity) in server.session_activity() {
        if activity.inflight_requests == 0 && server.evict_session(&id).await {
            notice(format_args!("lame duck: handed session {id} over"));
        }
    }
}

/// Tells the predecessor we superseded that we took over, in the background; it notices the
/// pointer within [`POINTER_POLL`] if the message does not arrive.
fn announce_to(health: &Arc<Health>, predecessor: &DaemonRecord) {
    let Some(key) = health.key.clone() else {
        return;
    };
    let (own, predecessor) = (health.record.clone(), predecessor.clone());
    tokio::spawn(async move {
        match succession::announce(&key, &own, &predecessor).await {
            Ok(answer) => notice(format_args!(
                "superseded daemon pid {} (version {}); it still runs {}",
                predecessor.pid,
                predecessor.version,
                answer
                    .get("ownedRuns")
                    .map_or_else(|| "[]".into(), Value::to_string)
            )),
            Err(error) => notice(format_args!(
                "superseded daemon pid {} (version {}), but could not tell it: {error}",
                predecessor.pid, predecessor.version
            )),
        }
    });
}

/// Ends sessions whose clients are gone: no open connection, no request in flight, and no
/// activity for `ttl`. Their runs go on; a returning client re-initializes on the 404.
async fn evict_dead_sessions(server: &crate::mcp::McpServer, ttl: Duration) {
    for (id, activity) in server.session_activity() {
        if activity.open_connections == 0
            && activity.inflight_requests == 0
            && activity.last_activity.elapsed() > ttl
            && server.evict_session(&id).await
        {
            notice(format_args!(
                "evicted session {id}: no connection for {ttl:?}"
            ));
        }
    }
}

/// Exit 0 because `record`'s daemon serves the family. A managed start still reports ready,
/// so `systemctl start` returns successfully and the shim finds that daemon.
fn already_running(record: &DaemonRecord, notifier: &Notifier) {
    notice(format_args!(
        "already running: daemon pid {} serves this env family at {}",
        record.pid, record.url
    ));
    notify(
        "READY=1",
        notifier.ready_with_status(&format!(
            "already running: pid {} at 127.0.0.1:{}",
            record.pid, record.port
        )),
    );
    crate::cli::output::stdout(format_args!("{}", record.url), true);
}

/// Logs a notification that could not be sent; the daemon goes on (systemd will judge us by
/// the missing message).
fn notify(what: &str, sent: std::io::Result<()>) {
    if let Err(error) = sent {
        notice(format_args!("sd-notify {what}: {error}"));
    }
}

/// The next run notice of an optional subscription; never, without one.
async fn next_notice(
    receiver: Option<&mut broadcast::Receiver<RunNotice>>,
) -> Result<RunNotice, broadcast::error::RecvError> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The next tick of an optional interval; never, without one.
async fn next_tick(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The outcome of binding the daemon's port.
enum Bound {
    Listener(TcpListener),
    /// Our own healthy current daemon of this family holds the port and the pointer.
    AlreadyRunning(Box<DaemonRecord>),
}

/// Binds 127.0.0.1:`port` with SO_REUSEADDR (never SO_REUSEPORT: two listeners would split
/// sessions). A held port means either our family's healthy daemon (exit 0) or someone we
/// must not disturb (a foreign process, another family, our draining predecessor, or the
/// older daemon a successor started with `--supersede` replaces; `superseding` is then our
/// version): then an ephemeral port, with the holder logged.
async fn bind_daemon_port(
    paths: &Paths,
    fingerprint: &str,
    port: u16,
    key: Option<&RunControlKey>,
    superseding: Option<&str>,
) -> Result<Bound> {
    match bind_loopback(port) {
        Ok(listener) => return Ok(Bound::Listener(listener)),
        Err(error) if port != 0 && error.kind() == std::io::ErrorKind::AddrInUse => {}
        Err(error) => return Err(anyhow!(error).context(format!("binding 127.0.0.1:{port}"))),
    }
    if let Some(current) = read_pointer(paths, fingerprint)
        && current.port == port
        && process_alive_as(&current).is_alive()
        && probe::probe(&current, key, crate::discovery::healthz::HEALTHZ_TIMEOUT)
            .await
            .qualifies()
        && !superseding.is_some_and(|ours| compare_versions(&current.version, ours).is_lt())
    {
        return Ok(Bound::AlreadyRunning(Box::new(current)));
    }
    let holder = describe_port_holder(paths, fingerprint, port);
    let listener = bind_loopback(0).context("binding 127.0.0.1 on an ephemeral port")?;
    notice(format_args!(
        "port {port} is held by {holder}; listening on ephemeral port {} instead",
        listener.local_addr().map(|a| a.port()).unwrap_or(0)
    ));
    Ok(Bound::Listener(listener))
}

fn bind_loopback(port: u16) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.listen(1024)
}

/// Names who holds `port` as well as the records tell.
fn describe_port_holder(paths: &Paths, fingerprint: &str, port: u16) -> String {
    let records = read_instance_records(paths).unwrap_or_default();
    for file in records {
        if let RecordRead::Ours(record) = file.read
            && record.port == port
            && process_alive_as(&record).is_alive()
        {
            return if record.env_fingerprint == fingerprint {
                format!(
                    "this family's daemon pid {} (draining or unresponsive)",
                    record.pid
                )
            } else {
                format!(
                    "agentprism daemon pid {} of another env family ({})",
                    record.pid, record.env_fingerprint
                )
            };
        }
    }
    "a process that is not an agentprism daemon of this user".to_owned()
}

/// Probes the family's current daemon through its pointer: `Some` with the record and the
/// probe result when the pointer names a live process.
pub async fn probe_family(
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
            (
                env::DAEMON_ALLOWED_ORIGINS,
                "https://a.example, ,https://b.example",
            ),
        ]);
        let settings = Settings::from_env(&env, None).unwrap();
        assert_eq!(settings.port, 0);
        assert_eq!(settings.idle_ttl, None);
        assert_eq!(settings.tick, Duration::from_millis(25));
        assert_eq!(settings.session_ttl, DEFAULT_SESSION_TTL);
        assert!(!settings.test_hooks);
        assert_eq!(
            settings.allowed_origins,
            ["https://a.example", "https://b.example"]
        );
        let defaults = Settings::from_env(&EnvSnapshot::default(), Some(7)).unwrap();
        assert_eq!(defaults.port, 7);
        assert_eq!(defaults.idle_ttl, Some(DEFAULT_IDLE_TTL));
        assert_eq!(defaults.tick, DEFAULT_TICK);
        let bad = EnvSnapshot::from_pairs([(env::DAEMON_PORT, "70000")]);
        assert!(Settings::from_env(&bad, None).is_err());
    }
}
