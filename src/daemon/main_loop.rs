//! The daemon once it serves: one struct, [`Daemon`], owns the state, and its main loop wakes
//! up for one closed [`Event`] at a time ([`Daemon::next_event`]) and does one thing for it
//! ([`Daemon::handle_event`]), so every reason to wake up is listed in one place.
//!
//! Ordering rules the loop keeps: the pointer is checked only while current (a lame duck never
//! becomes current again); a lame duck sweeps its idle sessions every [`DRAIN_SWEEP`] and also
//! as soon as a run settles, and exits once nothing is left. The idle clock starts when the
//! last session, request or run ends (the MCP server's activity and the engine's settle
//! notices say when) and stops at the next one; a timer set to the moment the clock reaches
//! the idle lifetime ends the daemon, so it exits one lifetime after it went idle, whatever
//! the tick. The tick only sweeps sessions of dead clients and refreshes the stop-intent
//! count, and catches an idleness no notice announced (intents acknowledged).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::bind::{Front, bind_loopback};
use super::health::{self, Health, Phase};
use super::probe::{self, Probe};
use super::publish::{
    already_running, announce_to, clear_own_pointer, finish, notify, publish_port,
    record_and_claim, serve_more,
};
use super::{
    DRAIN_DEADLINE, DRAIN_SWEEP, POINTER_POLL, Services, Settings, Start, control, succession,
    version,
};
use crate::discovery::pointer::Replaced;
use crate::discovery::{Claim, DaemonRecord, Paths, RunControlKey};
use crate::engine::events::RunNotice;
use crate::logging::notice;
use crate::service::Notifier;
use crate::transport::http::HttpOptions;

/// Every reason the daemon's main loop wakes up.
#[derive(Debug)]
pub(super) enum Event {
    /// Time to evict sessions of dead clients and refresh the stop-intent count.
    Tick,
    /// A session or request began or ended, or a run settled: the daemon may have become
    /// idle, or busy again.
    Activity,
    /// The daemon has been idle for its whole idle lifetime (if nothing happened since).
    IdleDeadline,
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
pub(super) enum ExitReason {
    Signal(&'static str),
    ControlShutdown(String),
    Idle(Duration),
    /// A lame duck with nothing left to serve.
    Drained,
    ServerStopped(String),
}

impl ExitReason {
    /// The exit code of `daemon run`: 1 only when the HTTP server failed.
    pub(super) fn code(&self) -> u8 {
        match self {
            ExitReason::ServerStopped(_) => 1,
            ExitReason::Signal(_)
            | ExitReason::ControlShutdown(_)
            | ExitReason::Idle(_)
            | ExitReason::Drained => 0,
        }
    }
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

/// A serving daemon: everything its main loop reads or changes.
pub(super) struct Daemon {
    /// Tick, idle and session lifetimes, and the configured port to take back.
    settings: Settings,
    /// Where the record, the pointer and the superseded record are written.
    paths: Paths,
    /// This daemon's record as published; rewritten when the configured port is taken back.
    record: DaemonRecord,
    /// The engine and the MCP server over it, as the composition root assembled them.
    services: Services,
    /// What `/healthz` answers from: phase, drain state, unacknowledged intents.
    health: Arc<Health>,
    /// sd-notify: READY, STATUS while draining, WATCHDOG, STOPPING.
    notifier: Arc<Notifier>,
    /// The runtime that accepts connections; a listener added later goes there too.
    front: Front,
    /// The HTTP servers and the control server, awaited (bounded) on the way out.
    tasks: TaskTracker,
    /// Stops every listener and the control socket.
    shutdown: CancellationToken,
    /// The first listener's server: its end is an event, since it should never end.
    http: tokio::task::JoinHandle<Result<()>>,
    /// The options of the first listener, reused for the configured port once it is free.
    more_http: HttpOptions,
    /// An activated socket is systemd's to place: never bind another port beside it.
    socket_activated: bool,
    /// The pointer check hands a successor it found to the same path as an announcement.
    superseded: mpsc::UnboundedSender<String>,
    /// Sessions the test hook asks to evict.
    evictions: mpsc::UnboundedReceiver<String>,
    /// Verified `shutdown` requests from the control socket.
    control_shutdowns: mpsc::UnboundedReceiver<String>,
    /// Successors, announced over the control socket or found in the pointer.
    supersessions: mpsc::UnboundedReceiver<String>,
    /// Changes when an MCP session or request begins or ends.
    activity: tokio::sync::watch::Receiver<u64>,
    /// Run notices without events: a settled run may have been the last work (idle clock,
    /// lame duck's drain). `None` once the engine closed the channel.
    notices: Option<broadcast::Receiver<RunNotice>>,
    /// When the daemon last became idle; `None` while busy.
    idle_since: Option<Instant>,
    /// Whether a run in the store waits for an automatic resume (refreshed before every idle
    /// decision): it keeps the daemon from exiting idle.
    timers_pending: bool,
    /// Set once, when the daemon turns lame duck.
    lame_duck: Option<LameDuck>,
}

/// What only a lame duck waits on.
struct LameDuck {
    /// The sweep that closes idle sessions and checks whether the daemon may exit (a settled
    /// run makes it check at once rather than at the next sweep).
    sweep: Interval,
    /// The run count last sent as STATUS, so systemd hears only changes.
    reported_runs: Option<usize>,
}

/// The timers and signals of the main loop, installed when it starts.
pub(super) struct Wake {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    tick: Interval,
    pointer_check: Interval,
    /// Only when systemd asked for watchdog pings.
    watchdog: Option<Interval>,
}

impl Wake {
    pub(super) fn install(settings: &Settings, notifier: &Notifier) -> Result<Wake> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Wake {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            tick: delayed_interval(settings.tick),
            pointer_check: delayed_interval(settings.tick.min(POINTER_POLL)),
            watchdog: notifier.watchdog_interval().map(delayed_interval),
        })
    }
}

fn delayed_interval(period: Duration) -> Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

impl Daemon {
    /// Starts serving on `listener`: binds the control socket (when the key is usable),
    /// builds the record and `/healthz`, and spawns the HTTP and control servers on the front
    /// runtime; `http` holds the base options the composition root chose. Nothing names this
    /// daemon yet: [`Daemon::claim`] publishes it.
    pub(super) fn serve(
        start: Start,
        front: Front,
        listener: TcpListener,
        services: Services,
        http: HttpOptions,
    ) -> Result<Daemon> {
        let address: SocketAddr = listener.local_addr().context("reading the bound address")?;
        let listener = front.adopt(listener)?;
        let control = bind_control(&start, &front);
        let control_url = control
            .as_ref()
            .map(crate::control::ControlServer::control_url)
            .unwrap_or_default();
        let record = DaemonRecord::for_this_process(
            version(),
            &start.instance_id,
            address.port(),
            &start.fingerprint,
            &control_url,
        );
        let health = Arc::new(Health::new(
            record.clone(),
            start.key,
            services.server.clone(),
            services.engine.clone(),
        ));
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let (evict_sender, evictions) = mpsc::unbounded_channel::<String>();
        let (superseded, supersessions) = mpsc::unbounded_channel::<String>();
        let http_options = HttpOptions {
            shutdown_deadline: DRAIN_DEADLINE,
            intercept: Some(super::panel::with_panel(health::routes(
                health.clone(),
                start.settings.test_hooks,
                evict_sender,
            ))),
            decorate: Some(health::decorate(health.clone())),
            implementation: crate::discovery::record::IMPLEMENTATION,
            dispatch: Some(tokio::runtime::Handle::current()),
            ..http
        };
        let http = front
            .handle()
            .spawn(tasks.track_future(crate::transport::http::serve(
                listener,
                services.server.clone(),
                http_options.clone(),
                shutdown.clone().cancelled_owned(),
            )));
        let (control_shutdown, control_shutdowns) = mpsc::unbounded_channel::<String>();
        if let Some(control) = control {
            let handler = Arc::new(control::DaemonControl {
                health: health.clone(),
                engine: services.engine.clone(),
                shutdown: control_shutdown,
                succession: succession::Succession {
                    paths: start.paths.clone(),
                    health: health.clone(),
                    superseded: superseded.clone(),
                },
                engine_runtime: tokio::runtime::Handle::current(),
                workflow: services.workflow.clone(),
            });
            front
                .handle()
                .spawn(tasks.track_future(control.serve(handler, shutdown.clone())));
        }
        // Subscribed before anything is served, so no session or run can end unnoticed.
        let activity = services.server.activity();
        let notices = services.engine.subscribe_lifecycle();
        Ok(Daemon {
            settings: start.settings,
            paths: start.paths,
            record,
            services,
            health,
            notifier: start.notifier,
            front,
            tasks,
            shutdown,
            http,
            more_http: http_options,
            socket_activated: start.socket_activated,
            superseded,
            evictions,
            control_shutdowns,
            supersessions,
            activity,
            notices: Some(notices),
            idle_since: None,
            timers_pending: false,
            lame_duck: None,
        })
    }

    /// Publishes the record and claims the family pointer. `false` when a healthy daemon of
    /// the family holds it: this one has then said so and stopped.
    pub(super) async fn claim(&mut self, supersede: bool) -> Result<bool> {
        let claim = record_and_claim(&self.paths, &self.record, supersede).await?;
        if let Claim::AlreadyRunning(current) = claim {
            already_running(&current, &self.notifier);
            self.health.set_phase(Phase::Exiting);
            self.shutdown.cancel();
            self.services.shutdown(DRAIN_DEADLINE).await;
            finish(&self.tasks, &self.paths, &self.record).await;
            return Ok(false);
        }
        self.health.set_phase(Phase::Current);
        if let Claim::Claimed {
            replaced: Replaced::Superseded(predecessor),
        } = &claim
        {
            announce_to(&self.health, predecessor);
        }
        Ok(true)
    }

    /// Carries out stop intents left for this instance, tells systemd and the log that the
    /// daemon is ready, and prints the URL when in the foreground (`print_url`).
    pub(super) async fn ready(&self, print_url: bool) {
        self.services.engine.complete_stop_intents().await;
        // Discovery names us now, so a shim waiting on `systemctl start` finds us at once.
        notify(
            "READY=1",
            self.notifier
                .ready_with_status(&format!("current: 127.0.0.1:{}", self.record.port)),
        );
        notice(format_args!(
            "daemon {} pid {} instance {} family {} listening on {} (idle ttl {}, tick {:?})",
            self.record.version,
            self.record.pid,
            self.record.instance_id,
            self.record.env_fingerprint,
            self.record.url,
            self.settings
                .idle_ttl
                .map_or_else(|| "off".to_owned(), |ttl| format!("{ttl:?}")),
            self.settings.tick,
        ));
        if print_url {
            crate::output::stdout(format_args!("{}", self.record.url), true);
        }
    }

    /// The main loop: waits for events until one says to exit.
    pub(super) async fn run(&mut self) -> Result<ExitReason> {
        let mut wake = Wake::install(&self.settings, &self.notifier)?;
        self.on_activity();
        loop {
            let event = self.next_event(&mut wake).await;
            if let Some(reason) = self.handle_event(event).await {
                return Ok(reason);
            }
        }
    }

    /// Waits on every source at once and names the first that is ready.
    pub(super) async fn next_event(&mut self, wake: &mut Wake) -> Event {
        loop {
            let idle_deadline = self.idle_deadline();
            let sweep = self.lame_duck.as_mut().map(|lame| &mut lame.sweep);
            let current = !self.health.is_lame_duck();
            return tokio::select! {
                _ = wake.tick.tick() => Event::Tick,
                _ = wake.terminate.recv() => Event::Signal("SIGTERM"),
                _ = wake.interrupt.recv() => Event::Signal("SIGINT"),
                Some(session) = self.evictions.recv() => Event::Evict(session),
                _ = next_tick(wake.watchdog.as_mut()) => Event::Watchdog,
                Some(from) = self.control_shutdowns.recv() => Event::ControlShutdown(from),
                Some(successor) = self.supersessions.recv() => Event::Superseded(successor),
                _ = wake.pointer_check.tick(), if current => Event::PointerCheck,
                _ = next_tick(sweep) => Event::Drain,
                () = next_change(&mut self.activity) => Event::Activity,
                () = until(idle_deadline) => Event::IdleDeadline,
                notice = next_notice(self.notices.as_mut()) => match notice {
                    // Lagged: some notices were missed, one of them may have been a settle.
                    Ok(RunNotice::Settled { .. }) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if current { Event::Activity } else { Event::Drain }
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        self.notices = None;
                        continue;
                    }
                    Ok(_) => continue,
                },
                ended = &mut self.http => Event::ServerStopped(match ended {
                    Ok(Ok(())) => "the HTTP server stopped".to_owned(),
                    Ok(Err(error)) => format!("the HTTP server failed: {error:#}"),
                    Err(error) => format!("the HTTP server task failed: {error}"),
                }),
            };
        }
    }

    /// Does what `event` asks; `Some` when the daemon must exit.
    pub(super) async fn handle_event(&mut self, event: Event) -> Option<ExitReason> {
        match event {
            Event::Tick => return self.on_tick().await,
            Event::Activity => self.on_activity(),
            Event::IdleDeadline => {
                self.timers_pending = self.services.engine.timers_pending().await;
                return self.idle_exit();
            }
            Event::Signal(name) => return Some(ExitReason::Signal(name)),
            Event::Evict(session) => {
                let evicted = self.services.server.evict_session(&session).await;
                notice(format_args!(
                    "test hook: evict session {session}: {evicted}"
                ));
            }
            Event::ServerStopped(why) => return Some(ExitReason::ServerStopped(why)),
            Event::ControlShutdown(from) => return Some(ExitReason::ControlShutdown(from)),
            Event::PointerCheck => self.on_pointer_check().await,
            Event::Superseded(successor) => self.on_superseded(&successor),
            Event::Drain => return self.on_drain().await,
            Event::Watchdog => self.on_watchdog().await,
        }
        None
    }

    /// Evicts sessions of dead clients and refreshes the unacknowledged-intent count; the
    /// daemon may have become idle without any notice (intents acknowledged), or be idle long
    /// enough already.
    async fn on_tick(&mut self) -> Option<ExitReason> {
        evict_dead_sessions(&self.services.server, self.settings.session_ttl).await;
        // Stop intents for runs we own are carried out here as well as when they arrive;
        // the count keeps a lame duck alive until they are acknowledged.
        self.refresh_unacked_intents().await;
        self.timers_pending = self.services.engine.timers_pending().await;
        if !self.health.drained() {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(Instant::now());
        }
        self.idle_exit()
    }

    /// Something began or ended: the idle clock starts now if nothing keeps the daemon busy,
    /// and stops otherwise.
    fn on_activity(&mut self) {
        self.idle_since = self.health.drained().then(Instant::now);
    }

    /// When the idle clock reaches the idle lifetime; `None` while busy or without one.
    fn idle_deadline(&self) -> Option<Instant> {
        Some(self.idle_since? + self.settings.idle_ttl?)
    }

    /// Exits when the daemon is still idle and has been for its idle lifetime.
    fn idle_exit(&mut self) -> Option<ExitReason> {
        // A run that resumes by itself later keeps its daemon up until then.
        if !self.health.drained() || self.timers_pending {
            self.idle_since = None;
            return None;
        }
        let ttl = self.settings.idle_ttl?;
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        (since.elapsed() >= ttl).then_some(ExitReason::Idle(ttl))
    }

    async fn refresh_unacked_intents(&self) {
        let unacked = self.services.engine.complete_stop_intents().await;
        self.health
            .unacked_intents
            .store(unacked, Ordering::Relaxed);
    }

    /// Turns lame duck if the pointer names another live daemon; otherwise takes the
    /// configured port back once a drained predecessor has freed it.
    async fn on_pointer_check(&mut self) {
        if let Some(successor) =
            succession::pointer_names_another(&self.paths, &self.record, self.health.key.as_ref())
                .await
            && self.health.become_lame_duck(&successor.instance_id)
        {
            let _ = self.superseded.send(successor.instance_id);
            return;
        }
        if self.socket_activated
            || self.settings.port == 0
            || self.record.port == self.settings.port
        {
            return;
        }
        let Ok(listener) = bind_loopback(self.settings.port) else {
            return;
        };
        let Ok(listener) = self.front.adopt(listener) else {
            return;
        };
        // The configured port is free again (a drained predecessor exited): serve there too
        // and publish it, so hosts configured with the usual URL find us. The first port
        // stays served for the connections that use it.
        self.front
            .handle()
            .spawn(self.tasks.track_future(serve_more(
                listener,
                self.services.server.clone(),
                self.more_http.clone(),
                self.shutdown.clone(),
            )));
        self.record = publish_port(&self.paths, &self.record, self.settings.port).await;
    }

    /// The one-way door: on record first, then the lame duck's sweep and run notices.
    fn on_superseded(&mut self, successor: &str) {
        succession::record_superseded(&self.paths, &self.record, successor);
        // The successor fires the automatic resumes from now on.
        self.services.engine.stop_timers();
        notice(format_args!(
            "superseded by instance {successor}: lame duck, draining {} runs and {} sessions",
            self.services.engine.active_executions(),
            self.services.server.session_count()
        ));
        self.lame_duck = Some(LameDuck {
            sweep: delayed_interval(DRAIN_SWEEP),
            reported_runs: None,
        });
    }

    /// A lame duck's sweep: hands idle sessions over, reports the run count, exits once
    /// drained.
    async fn on_drain(&mut self) -> Option<ExitReason> {
        close_idle_sessions(&self.services.server).await;
        let runs = self.services.engine.active_executions();
        if runs == 0 && self.health.unacked_intents.load(Ordering::Relaxed) > 0 {
            // The count is refreshed on ticks; do not wait a whole tick for it.
            self.refresh_unacked_intents().await;
        }
        if let Some(lame) = &mut self.lame_duck
            && lame.reported_runs != Some(runs)
        {
            lame.reported_runs = Some(runs);
            notify(
                "STATUS",
                self.notifier.status(&format!("lame duck: {runs} runs")),
            );
        }
        self.health.drained().then_some(ExitReason::Drained)
    }

    /// Pings systemd's watchdog after the same check a shim makes: our own listener, our own
    /// key. The deadline is one interval, so a stalled answer cannot delay the next ping too.
    async fn on_watchdog(&self) {
        let deadline = self.notifier.watchdog_interval().unwrap_or(DRAIN_DEADLINE);
        match probe::probe(&self.record, self.health.key.as_ref(), deadline).await {
            Probe::Identified(_) => notify("WATCHDOG=1", self.notifier.watchdog()),
            other => notice(format_args!(
                "watchdog: our own /healthz failed ({other:?}); not pinging systemd"
            )),
        }
    }

    /// The way out: stop being found, stop taking requests, interrupt live runs within the
    /// drain deadline (they stay resumable), then remove the record. Returns the exit code.
    pub(super) async fn shutdown(self, reason: ExitReason) -> u8 {
        // Final: systemd starts its stop timer. Never sent when merely turning lame duck.
        notify("STOPPING=1", self.notifier.stopping());
        notice(format_args!(
            "daemon pid {} exiting: {reason}",
            self.record.pid
        ));
        self.health.set_phase(Phase::Exiting);
        // New shims must stop finding us before we stop answering.
        clear_own_pointer(&self.paths, &self.record).await;
        self.shutdown.cancel();
        self.services.shutdown(DRAIN_DEADLINE).await;
        finish(&self.tasks, &self.paths, &self.record).await;
        notice(format_args!("daemon pid {} exited", self.record.pid));
        reason.code()
    }
}

/// The control socket, bound inside the front runtime (which then serves it) before the
/// record names it. Without a usable key there is no control plane at all: never an unsigned
/// one.
fn bind_control(start: &Start, front: &Front) -> Option<crate::control::ControlServer> {
    let key: &RunControlKey = start.key.as_ref()?;
    let identity = crate::control::Identity {
        instance_id: start.instance_id.clone(),
        pid: std::process::id(),
        version: version().to_owned(),
    };
    let _front = front.handle().enter();
    match crate::control::ControlServer::bind(
        &start.paths,
        start.runtime_dir.as_deref(),
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

/// The next run notice of an optional subscription; never, without one.
async fn next_notice(
    receiver: Option<&mut broadcast::Receiver<RunNotice>>,
) -> Result<RunNotice, broadcast::error::RecvError> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The next change of `activity`; never, once its sender is gone.
async fn next_change(activity: &mut tokio::sync::watch::Receiver<u64>) {
    if activity.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Sleeps until `deadline`; never, without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// The next tick of an optional interval; never, without one.
async fn next_tick(interval: Option<&mut Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}
