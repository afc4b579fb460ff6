//! The proxy between the host's stdio and the daemon's Streamable HTTP (daemon.md 1.7).
//!
//! One task owns all state and wakes up for one closed [`Event`] at a time. Frames are
//! POSTed in client order: a notification or `initialize` holds back the next frame until
//! the daemon has taken it (its 202, or the session id), so `tools/list` cannot overtake
//! `notifications/initialized`; requests then run concurrently and each streams its own
//! answer to stdout. After `initialized` a GET stream carries the session's notifications and
//! resumes with `Last-Event-ID` when the daemon ends it gracefully.
//!
//! Recovery: a POST that the daemon certainly did not process (refused connection, 404 for
//! a gone session, 503) is queued again; one that may have reached a daemon that then broke
//! is answered with -32603 and never replayed. Either starts one recovery per generation:
//! find or start the daemon again, replay the cached `initialize` under a shim-owned id with
//! its reply swallowed, `initialized`, the remembered subscriptions, then the queue. Stateless
//! 2026-07-28 requests carry no session; their `subscriptions/listen` streams are reopened.
//!
//! This file is the actor; what its tasks do lives beside it: `post.rs` (one POST, its
//! answer, the replay of a session), `stream.rs` (the session's GET stream), `output.rs`
//! (stdout).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ensure::{BOOTSTRAP_CAP, BOOTSTRAP_POLL, Daemon, Ensurer};
use super::frames::{self, Frame, Kind, codes};
use super::http::{self, MCP_PATH};
use super::output::Output;
use super::post::{PostPlan, post, reestablish};
pub(crate) use super::post::{Posted, Recovery};
use super::stream::SessionStream;
use crate::daemon::probe::Probe;

/// More recoveries than this within [`RECOVERY_WINDOW`] end the shim.
pub(crate) const MAX_RECOVERIES: usize = 6;
pub(crate) const RECOVERY_WINDOW: Duration = Duration::from_secs(60);
/// How long DELETE of the session may take at exit.
pub(crate) const DELETE_DEADLINE: Duration = Duration::from_secs(1);
/// After stdin EOF, how long answers to already-sent requests are still awaited (so
/// `printf … | agentprism-workflow` works) before the shim ends its session.
pub(crate) const EOF_DRAIN: Duration = Duration::from_millis(500);
/// What a host gets for a request that may have reached a daemon that was then lost.
pub(crate) const LOST_MESSAGE: &str =
    "session lost; the request may have completed; inspect before retrying";
/// How often the parent pid is compared with the one at start.
const PARENT_CHECK: Duration = Duration::from_secs(1);

/// Every reason the proxy wakes up.
#[derive(Debug)]
pub(crate) enum Event {
    /// A frame from stdin (boxed: frames are the largest variant by far).
    Frame(Box<Frame>),
    StdinClosed,
    /// The first search for a daemon ended.
    Ready(Result<Daemon, String>),
    /// A POST ended.
    Posted {
        seq: u64,
        generation: u64,
        result: Posted,
    },
    /// The session's GET stream failed and cannot be resumed.
    StreamFailed {
        generation: u64,
        reason: String,
    },
    /// A recovery ended.
    Recovered(Result<Recovery, String>),
    /// The older daemon adopted under the bootstrap exception is idle (or gone): move on.
    BootstrapOver {
        generation: u64,
        reason: String,
    },
    StdoutClosed,
}

/// How the proxy ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Host gone, signal, broken stdout: the session was ended.
    Done,
    /// Cannot go on; the message says why.
    Failed(String),
}

/// A POST in flight.
struct InFlight {
    frame: Frame,
    /// Closes a stateless request's stream when the host cancels it.
    cancel: CancellationToken,
    /// Whether the frame went with a session (legacy) or statelessly.
    modern: bool,
}

/// The proxy's state, owned by its one task.
pub(crate) struct Proxy {
    /// Finds or starts the daemon, at start and on every recovery.
    ensurer: Arc<Ensurer>,
    output: Output,
    /// Where the proxy's own tasks (POSTs, streams, recoveries) report back.
    events: mpsc::UnboundedSender<Event>,
    /// Those tasks, so none outlives the proxy.
    tasks: TaskTracker,
    /// The daemon of the current generation; `None` until the first ensure ends.
    daemon: Option<Daemon>,
    /// Bumped by every recovery; results of older generations never trigger another.
    generation: u64,
    /// The legacy session on the current daemon, once `initialize` was answered.
    session: Option<String>,
    /// The version that `initialize` negotiated, sent with every legacy frame.
    protocol_version: Option<String>,
    /// The host's `initialize`, replayed after a session is lost.
    initialize: Option<Frame>,
    /// The host's `notifications/initialized` was accepted: hold the GET stream.
    initialized: bool,
    /// Whether any stateless request was seen (a modern client never initializes).
    seen_modern: bool,
    /// Subscribed resources and the frame that subscribed each.
    subscriptions: BTreeMap<String, Frame>,
    /// Open `subscriptions/listen` streams by request id.
    listens: BTreeMap<String, Frame>,
    /// Legacy requests the host cancelled (`notifications/cancelled`), by id: the daemon
    /// sends no answer for them, so a stream that ends without one is no loss.
    cancelled: std::collections::HashSet<String>,
    /// Frames waiting to be sent, in client order.
    queue: BTreeMap<u64, Frame>,
    /// The frame that must be taken before the next is sent.
    blocked_on: Option<u64>,
    /// POSTs under way, by frame sequence number.
    in_flight: HashMap<u64, InFlight>,
    /// A recovery is running: frames wait in the queue.
    recovering: bool,
    /// When recent recoveries started, for the bound of [`MAX_RECOVERIES`] per window.
    recoveries: VecDeque<Instant>,
    /// Numbers the shim's own replayed requests.
    replays: u64,
    /// Stops the session's GET stream.
    session_stream: Option<CancellationToken>,
    /// Set at stdin EOF: answers are awaited until then.
    draining_until: Option<Instant>,
    /// `AGENTPRISM_LOG` is set: say more on stderr (each session and daemon).
    verbose: bool,
}

impl Proxy {
    pub(crate) fn new(
        ensurer: Arc<Ensurer>,
        output: Output,
        events: mpsc::UnboundedSender<Event>,
    ) -> Proxy {
        Proxy {
            ensurer,
            output,
            events,
            tasks: TaskTracker::new(),
            daemon: None,
            generation: 0,
            session: None,
            protocol_version: None,
            initialize: None,
            initialized: false,
            seen_modern: false,
            subscriptions: BTreeMap::new(),
            listens: BTreeMap::new(),
            cancelled: std::collections::HashSet::new(),
            queue: BTreeMap::new(),
            blocked_on: None,
            in_flight: HashMap::new(),
            recovering: false,
            recoveries: VecDeque::new(),
            replays: 0,
            session_stream: None,
            draining_until: None,
            verbose: std::env::var_os(crate::env::LOG).is_some_and(|value| !value.is_empty()),
        }
    }

    /// Says on stderr which session on which daemon the shim now uses (verbose only).
    fn log_session(&self) {
        if let (true, Some(session), Some(daemon)) = (self.verbose, &self.session, &self.daemon) {
            eprintln!(
                "agentprism-workflow: session {session} on daemon pid {} port {}",
                daemon.pid, daemon.port
            );
        }
    }

    /// Runs until the host goes away or the shim gives up. `stop` resolves on a signal or when
    /// the host process is gone.
    pub(crate) async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        stop: impl std::future::Future<Output = &'static str>,
    ) -> Exit {
        {
            let ensurer = self.ensurer.clone();
            let sender = self.events.clone();
            self.tasks.spawn(async move {
                let found = ensurer.ensure().await.map_err(|e| e.to_string());
                let _ = sender.send(Event::Ready(found));
            });
        }
        let parent = nix::unistd::getppid();
        let mut parent_check = tokio::time::interval(PARENT_CHECK);
        tokio::pin!(stop);
        let exit = loop {
            let drain_deadline = self.draining_until;
            let event = tokio::select! {
                Some(event) = events.recv() => event,
                reason = &mut stop => break self.finish(reason).await,
                _ = parent_check.tick() => {
                    if nix::unistd::getppid() != parent {
                        break self.finish("the parent process exited").await;
                    }
                    continue;
                }
                () = sleep_until(drain_deadline) => break self.finish("stdin closed").await,
            };
            if let Some(exit) = self.handle(event).await {
                break exit;
            }
        };
        self.tasks.close();
        exit
    }

    async fn handle(&mut self, event: Event) -> Option<Exit> {
        match event {
            Event::Frame(frame) => {
                if frame.modern.is_some() {
                    self.seen_modern = true;
                }
                if let Some(cancelled) = &frame.cancels {
                    let pending = self
                        .in_flight
                        .values()
                        .map(|flight| &flight.frame)
                        .chain(self.queue.values())
                        .any(|waiting| waiting.id.as_ref() == Some(cancelled));
                    if frame.modern.is_none() && pending {
                        self.cancelled.insert(cancelled.to_string());
                    }
                    self.cancel_stateless(cancelled);
                }
                self.queue.insert(frame.seq, *frame);
                self.pump();
            }
            Event::StdinClosed => {
                if self.awaiting_answers() {
                    self.draining_until = Some(Instant::now() + EOF_DRAIN);
                } else {
                    return Some(self.finish("stdin closed").await);
                }
            }
            Event::Ready(Ok(daemon)) => {
                self.watch_bootstrap(&daemon);
                self.daemon = Some(daemon);
                self.pump();
            }
            Event::BootstrapOver { generation, reason } => {
                if generation == self.generation
                    && let Some(exit) = self.recover(reason)
                {
                    return Some(exit);
                }
            }
            Event::Ready(Err(error)) => return Some(Exit::Failed(error)),
            Event::Posted {
                seq,
                generation,
                result,
            } => {
                if let Some(exit) = self.posted(seq, generation, result) {
                    return Some(exit);
                }
            }
            Event::StreamFailed { generation, reason } => {
                if generation == self.generation
                    && let Some(exit) = self.recover(format!("the session stream failed: {reason}"))
                {
                    return Some(exit);
                }
            }
            Event::Recovered(Ok(recovery)) => {
                eprintln!(
                    "agentprism-workflow: recovered on daemon pid {} (port {})",
                    recovery.daemon.pid, recovery.daemon.port
                );
                self.generation += 1;
                self.recovering = false;
                self.watch_bootstrap(&recovery.daemon);
                self.daemon = Some(recovery.daemon);
                self.session = recovery.session;
                if recovery.protocol_version.is_some() {
                    self.protocol_version = recovery.protocol_version;
                }
                self.log_session();
                if self.initialized && self.session.is_some() {
                    self.open_session_stream();
                }
                self.pump();
            }
            Event::Recovered(Err(reason)) => {
                self.recovering = false;
                if let Some(exit) = self.recover(reason) {
                    return Some(exit);
                }
            }
            Event::StdoutClosed => return Some(self.finish("stdout closed").await),
        }
        if self.draining_until.is_some() && !self.awaiting_answers() {
            return Some(self.finish("stdin closed").await);
        }
        None
    }

    /// Whether requests the host sent are still unanswered.
    fn awaiting_answers(&self) -> bool {
        self.queue.values().any(Frame::is_request)
            || self
                .in_flight
                .values()
                .any(|flight| flight.frame.is_request() && !flight.frame.is("subscriptions/listen"))
    }

    /// Sends queued frames in order while nothing holds them back.
    fn pump(&mut self) {
        while self.daemon.is_some() && !self.recovering && self.blocked_on.is_none() {
            let Some((_, frame)) = self.queue.pop_first() else {
                return;
            };
            self.dispatch(frame);
        }
    }

    fn dispatch(&mut self, frame: Frame) {
        let modern = frame.modern.is_some();
        let is_initialize = frame.is("initialize") && !modern;
        if is_initialize {
            self.initialize = Some(frame.clone());
        }
        if frame.kind == Kind::Notification || is_initialize {
            self.blocked_on = Some(frame.seq);
        }
        if let Some(uri) = &frame.uri {
            if frame.is("resources/subscribe") {
                self.subscriptions.insert(uri.clone(), frame.clone());
            } else {
                self.subscriptions.remove(uri);
            }
        }
        if frame.is("subscriptions/listen")
            && let Some(id) = &frame.id
        {
            self.listens.insert(id.to_string(), frame.clone());
        }
        let plan = self.plan(false);
        let cancel = CancellationToken::new();
        self.in_flight.insert(
            frame.seq,
            InFlight {
                frame: frame.clone(),
                cancel: cancel.clone(),
                modern,
            },
        );
        let output = self.output.clone();
        let events = self.events.clone();
        let generation = self.generation;
        self.tasks.spawn(async move {
            let result = tokio::select! {
                result = post(&plan, &frame, &output) => result,
                () = cancel.cancelled() => Posted::Cancelled,
            };
            let _ = events.send(Event::Posted {
                seq: frame.seq,
                generation,
                result,
            });
        });
    }

    /// Closes the stream of a stateless request the host cancelled (closing is how the 2026
    /// era cancels); the cancellation itself is still forwarded.
    fn cancel_stateless(&mut self, cancelled: &Value) {
        let key = cancelled.to_string();
        self.listens.remove(&key);
        for flight in self.in_flight.values() {
            if flight.modern && flight.frame.id.as_ref() == Some(cancelled) {
                flight.cancel.cancel();
            }
        }
        self.queue
            .retain(|_, frame| !(frame.modern.is_some() && frame.id.as_ref() == Some(cancelled)));
    }

    fn plan(&self, swallow: bool) -> PostPlan {
        PostPlan {
            port: self.daemon.as_ref().map_or(0, |daemon| daemon.port),
            session: self.session.clone(),
            protocol_version: self.protocol_version.clone(),
            swallow,
        }
    }

    fn posted(&mut self, seq: u64, generation: u64, result: Posted) -> Option<Exit> {
        let flight = self.in_flight.remove(&seq)?;
        if self.blocked_on == Some(seq) {
            self.blocked_on = None;
        }
        let frame = flight.frame;
        let mut lost = None;
        let cancelled = frame
            .id
            .as_ref()
            .is_some_and(|id| self.cancelled.remove(&id.to_string()));
        // The daemon answers no request the host cancelled: its stream ending without an
        // answer is what was asked for, not a lost daemon.
        let result = match result {
            Posted::Lost(_) if cancelled => Posted::Cancelled,
            other => other,
        };
        match result {
            Posted::Answered {
                session,
                protocol_version,
                lame_duck,
            } => {
                if lame_duck {
                    // Superseded: new frames go to a session on the successor; requests still
                    // in flight here finish on their own transport.
                    lost = Some("the daemon was superseded (lame duck)".to_owned());
                }
                if frame.is("initialize") && !flight.modern && session.is_some() {
                    self.session = session;
                    self.protocol_version = protocol_version;
                    self.log_session();
                }
                if frame.is("notifications/initialized") && self.session.is_some() {
                    self.initialized = true;
                    self.open_session_stream();
                }
                if let Some(id) = &frame.id
                    && frame.is("subscriptions/listen")
                {
                    self.listens.remove(&id.to_string());
                }
            }
            Posted::Retry(reason) => {
                self.queue.insert(seq, frame);
                lost = Some(reason);
            }
            Posted::Lost(reason) => {
                let listening = frame
                    .id
                    .as_ref()
                    .is_some_and(|id| self.listens.contains_key(&id.to_string()));
                if listening {
                    // A listen stream only delivers notifications: reopen it.
                    self.queue.insert(seq, frame);
                } else if let (Kind::Request, Some(id)) = (frame.kind, &frame.id) {
                    self.output.write_value(&frames::error_response(
                        id,
                        codes::INTERNAL_ERROR,
                        LOST_MESSAGE,
                    ));
                }
                lost = Some(reason);
            }
            Posted::Cancelled => {}
        }
        if let Some(reason) = lost
            && generation == self.generation
            && let Some(exit) = self.recover(reason)
        {
            return Some(exit);
        }
        self.pump();
        None
    }

    /// Starts a recovery unless one is running, or gives up (daemon.md 1.7 bounds).
    fn recover(&mut self, reason: String) -> Option<Exit> {
        if self.recovering {
            return None;
        }
        if self.initialize.is_none() && !self.seen_modern {
            return Some(Exit::Failed(format!(
                "lost the daemon before the host's initialize: {reason}"
            )));
        }
        let now = Instant::now();
        while self
            .recoveries
            .front()
            .is_some_and(|at| now.duration_since(*at) > RECOVERY_WINDOW)
        {
            self.recoveries.pop_front();
        }
        if self.recoveries.len() >= MAX_RECOVERIES {
            return Some(Exit::Failed(format!(
                "giving up after {MAX_RECOVERIES} recoveries within {RECOVERY_WINDOW:?}; last: \
                 {reason}"
            )));
        }
        self.recoveries.push_back(now);
        eprintln!("agentprism-workflow: recovering: {reason}");
        self.recovering = true;
        // Retire the generation: its session and stream are gone.
        if let Some(stream) = self.session_stream.take() {
            stream.cancel();
        }
        let legacy = self.session.is_some() || self.initialize_answered();
        self.session = None;
        let reinit = if legacy {
            self.initialize.clone()
        } else {
            None
        };
        let subscriptions: Vec<Frame> = self.subscriptions.values().cloned().collect();
        let initialized = self.initialized;
        self.replays += 1;
        let replay = self.replays;
        let ensurer = self.ensurer.clone();
        let events = self.events.clone();
        let output = self.output.clone();
        let protocol_version = self.protocol_version.clone();
        self.tasks.spawn(async move {
            let result = reestablish(
                &ensurer,
                reinit,
                initialized,
                &subscriptions,
                replay,
                protocol_version,
                &output,
            )
            .await;
            let _ = events.send(Event::Recovered(result));
        });
        None
    }

    /// Under the bootstrap exception, watches the older daemon (every [`BOOTSTRAP_POLL`]) and
    /// reports when it has no runs and no requests left, or is gone, or the cap is reached.
    fn watch_bootstrap(&self, daemon: &Daemon) {
        let Some(record) = daemon.bootstrap.clone() else {
            return;
        };
        // The recovery that installs this daemon bumps the generation first.
        let generation = self.generation;
        let events = self.events.clone();
        let key =
            crate::discovery::RunControlKey::load(&self.ensurer.paths().run_control_key()).ok();
        self.tasks.spawn(async move {
            let started = Instant::now();
            let reason = loop {
                tokio::time::sleep(BOOTSTRAP_POLL).await;
                if started.elapsed() >= BOOTSTRAP_CAP {
                    break format!(
                        "daemon pid {} is still busy after {BOOTSTRAP_CAP:?}",
                        record.pid
                    );
                }
                match crate::daemon::probe::probe(&record, key.as_ref(), BOOTSTRAP_POLL * 2).await {
                    Probe::Identified(health) => {
                        let count =
                            |field: &str| health.get(field).and_then(Value::as_u64).unwrap_or(0);
                        if count("activeRuns") == 0 && count("inflightRequests") == 0 {
                            break format!("older daemon pid {} is idle", record.pid);
                        }
                    }
                    Probe::Unresponsive => {}
                    other => break format!("older daemon pid {} is gone ({other:?})", record.pid),
                }
            };
            let _ = events.send(Event::BootstrapOver { generation, reason });
        });
    }

    /// Whether the host's initialize was answered (the shim had a session at some point).
    fn initialize_answered(&self) -> bool {
        self.initialize.is_some()
            && !self
                .in_flight
                .values()
                .any(|flight| flight.frame.is("initialize"))
            && !self.queue.values().any(|frame| frame.is("initialize"))
    }

    fn open_session_stream(&mut self) {
        if let Some(stream) = self.session_stream.take() {
            stream.cancel();
        }
        let (Some(session), Some(daemon)) = (self.session.clone(), self.daemon.as_ref()) else {
            return;
        };
        let token = CancellationToken::new();
        self.session_stream = Some(token.clone());
        let stream = SessionStream {
            port: daemon.port,
            session,
            protocol_version: self.protocol_version.clone(),
            generation: self.generation,
        };
        let output = self.output.clone();
        let events = self.events.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                failure = stream.run(&output) => {
                    if let Some(reason) = failure {
                        let _ = events.send(Event::StreamFailed {
                            generation: stream.generation,
                            reason,
                        });
                    }
                }
                () = token.cancelled() => {}
            }
        });
    }

    /// Ends the session (bounded) and stops. Never signals the daemon.
    async fn finish(&mut self, reason: &str) -> Exit {
        if let Some(stream) = self.session_stream.take() {
            stream.cancel();
        }
        for flight in self.in_flight.values() {
            flight.cancel.cancel();
        }
        if let (Some(session), Some(daemon)) = (&self.session, &self.daemon) {
            let headers = [("mcp-session-id", session.as_str())];
            let delete = http::send(daemon.port, Method::DELETE, MCP_PATH, &headers, None);
            let _ = tokio::time::timeout(DELETE_DEADLINE, delete).await;
        }
        if reason != "stdin closed" {
            eprintln!("agentprism-workflow: exiting: {reason}");
        }
        Exit::Done
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}
