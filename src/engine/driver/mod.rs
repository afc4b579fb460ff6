//! The run driver: executes one generation of a run (the first execution or one resume).
//!
//! A tokio task that owns the run's state while it executes. It receives the script's calls
//! from the VM thread in program order, assigns call indexes, routes and hashes each call,
//! replays what the journal already holds, and runs the rest as agent tasks bounded by the
//! run's concurrency. A settled call is written to the store *before* its result is handed
//! to the script, so a crash loses no completed call (the rule lives in [`durability`]).
//! Stop, pause and single-call cancel arrive as [`Control`] messages. The same driver runs
//! the preparation dry run, with a mock runner and no store.
//!
//! Rooms: this file holds the public types, the event loop and how a generation halts and
//! ends; `agent_call` turns an `agent()` call into a replay or an agent task, `checkpoint`
//! does the same for `checkpoint()`, `completion` settles a finished agent task into its
//! call row, `durability` is the one place store writes happen (the lease heartbeat too), `progress` turns agent
//! activity into progress events, `options` checks what the script passed, `task` is the
//! agent task itself, `outcome` what a generation hands back, `isolation` an isolated call's
//! worktree, `budget` the run's spending limits, `retry` the wait between attempts,
//! `sessions` the sessions calls open (journaled, and reopened when a call runs again),
//! `script_events` what the script's thread sends, `activity` the calls' channel to the driver,
//! `ceilings` what one generation may store and `summary` the run's summary.

mod activity;
mod agent_call;
mod budget;
mod ceilings;
mod checkpoint;
mod completion;
mod durability;
mod halting;
mod isolation;
mod live;
mod options;
mod outcome;
mod progress;
mod retry;
mod script_events;
mod sessions;
mod summary;
mod task;
mod trace;

pub(crate) use isolation::{IsolationSetup, recorded_base};
use outcome::in_order;
pub(crate) use outcome::{Closing, DryCall, Outcome};
pub(crate) use summary::Tally;
pub(crate) use trace::{TraceSetup, Waited};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::events::EventLog;
use crate::engine::journal::ReplayPool;
use crate::engine::permissions::PermissionBroker;
use crate::engine::routing::{BackendLookup, Route, RoutingSnapshot};
use crate::engine::runner::AgentRunner;
use crate::engine::status::LiveView;
use crate::engine::vm::{self, ScriptFailure, VmLimits, VmReply, VmScript};
use crate::model::{
    AuthContext, CallKind, CallRecord, CheckpointAnswer, CheckpointWait, Limits, PauseReason,
    Phase, RunId, RunStatus, Usage,
};
use crate::store::{LeasePolicy, Store};
use crate::util::sync::Lock;

use progress::Progress;

/// How often the loop looks at progress heartbeats and flushes buffered events.
const TICK: Duration = Duration::from_millis(250);
/// At most this many agent activities (settled calls among them) join one group commit, so
/// a flood of progress updates cannot hold back the answers of calls already settled.
const GROUP_COMMIT_LIMIT: usize = 64;
/// While other calls are live, a settled call's row waits at most this long for more calls
/// to settle and join its transaction (the commit window): a fan-out commits a few rows a
/// millisecond in one transaction each few milliseconds instead of one per wake-up.
const COMMIT_WINDOW: Duration = Duration::from_millis(5);
/// At most this many queued script events are taken at once before settled calls are
/// looked at, so a script issuing calls without pause cannot hold back their answers.
const VM_BATCH_LIMIT: usize = 64;
/// The bytes of running calls' payloads (their prompts, mostly) a driver holds before it
/// stops taking the script's messages: a script whose calls wait for a slot would otherwise
/// have the driver hold every one of them. With the queue's own bound
/// (`vm::EVENT_QUEUE_BYTES`), what one script can make the daemon hold of its calls.
const HELD_BYTES: usize = 16 << 20;
/// After it answers a script that has nothing else in flight, the driver's worker waits this
/// long, spinning, for the script's next message before it parks (`script_events.rs`,
/// `Driver::linger`).
const LINGER: Duration = Duration::from_micros(50);
/// The first key of a nested workflow's agent calls: root call indexes stay below it (the
/// store keys a call's index in 20 bits), so the two never share an in-flight entry.
const NESTED_KEYS: u32 = 1 << 31;

/// Where the generation's writes go.
#[derive(Clone)]
pub(crate) enum Persistence {
    /// A live execution writes through the store under its lease.
    Store {
        store: Arc<dyn Store>,
        /// The token every write is fenced by.
        lease_token: String,
        /// Whether and how often the lease is renewed (the heartbeat), and to what expiry.
        lease_policy: LeasePolicy,
    },
    /// The preparation dry run writes nothing.
    DryRun,
}

/// Everything a generation needs. The driver keeps it for the whole generation and
/// advances the counters in it (`next_settlement`, `usage`).
pub(crate) struct DriverSetup {
    /// The dry run's scripted answers (`validate --mock-answers`); `None` elsewhere.
    pub mock_answers: Option<Arc<crate::engine::mock_answers::MockAnswers>>,
    /// The run this generation belongs to: every row, event and notice names it.
    pub run_id: RunId,
    /// Stamped on every call row; above 1, the generation starts with a `resumed` event.
    pub generation: u32,
    /// The analyzed script body the VM runs (meta blanked, positions kept).
    pub body: String,
    /// The script's `args`, validated at preparation.
    pub args: Value,
    /// The default working directory of agent sessions and the script's `cwd`.
    pub cwd: PathBuf,
    /// `meta.phases`: their models take part in routing.
    pub phases: Vec<Phase>,
    /// `meta.model`, the lowest-precedence route.
    pub meta_model: Option<String>,
    /// maxAgents, concurrency and retries of this generation.
    pub limits: Limits,
    /// The routing frozen at admission, so a resume routes as the first run did.
    pub routing: RoutingSnapshot,
    /// The configured backends, for routes and for naming them in errors.
    pub backends: Arc<dyn BackendLookup>,
    /// What agent calls run on (ACP, or a mock for the dry run).
    pub runner: Arc<dyn AgentRunner>,
    /// Where settled calls and events are written, if anywhere.
    pub persistence: Persistence,
    /// Rows earlier generations recorded, which identical calls replay.
    pub pool: ReplayPool,
    /// Checkpoint answers given with the resume that started this generation.
    pub answers: Vec<CheckpointAnswer>,
    /// The run's last stored event sequence: new events continue from it.
    pub last_event_seq: u64,
    /// The settlement ordinal the next settled call gets (advanced as calls settle).
    pub next_settlement: u64,
    /// The ceiling of one agent attempt (a call's `timeoutMs` can only lower it).
    pub agent_timeout: Duration,
    /// The prompt-cache hold's cap (`crate::prompt_cache`); zero: off.
    pub prompt_cache_hold: Duration,
    /// Time slice and heap of the script VM.
    pub vm_limits: VmLimits,
    /// Where agents' permission requests wait for an answer.
    pub broker: PermissionBroker,
    /// Live notices for subscribers (`None` in the dry run).
    pub notices: Option<crate::engine::events::Notices>,
    /// Usage of the run so far; settled calls add to it.
    pub usage: Usage,
    /// The phase the root scope is in when the generation starts.
    pub current_phase: Option<String>,
    /// Resolves `workflow(name)` to a script body.
    pub nested: Option<vm::NestedResolver>,
    /// The run's frozen companion texts by path: what `file(path)` returns.
    pub files: Arc<BTreeMap<String, String>>,
    /// Shared with the engine so status can show live calls.
    pub live: Arc<std::sync::Mutex<LiveView>>,
    /// The workspace port and the run's base, for isolated calls.
    pub isolation: isolation::IsolationSetup,
    /// Where the generation's spans and metrics go ([`trace`]).
    pub trace: TraceSetup,
}

/// Requests from outside while a generation runs.
#[derive(Debug)]
pub(crate) enum Control {
    /// Abort: cancel everything, record interrupted rows, settle `aborted`.
    Stop,
    /// Let running calls finish, start nothing new, settle `paused`/`reason`.
    Pause(PauseReason),
    /// Cancel one live agent call; answers whether it was live.
    CancelCall {
        index: u32,
        reply: oneshot::Sender<bool>,
    },
}

/// Runs one generation to its end.
pub(crate) async fn run(
    mut setup: DriverSetup,
    control: mpsc::UnboundedReceiver<Control>,
) -> Outcome {
    let started = start_script(&mut setup);
    run_started(setup, started, control).await
}

/// A generation's script running on its VM before its driver exists. The VM only queues its
/// events until [`run_started`] takes them, in the order it sent them, so a driver that
/// starts later sees exactly what it would have seen from [`run`].
pub(crate) struct StartedScript {
    vm: vm::VmHandle,
    events: vm::VmEventReceiver,
}

impl StartedScript {
    /// Halts the script and frees its VM handle on the blocking pool: dropping the handle
    /// waits for the job to reach its next interrupt check, which an async worker must not.
    pub(crate) fn discard(self) {
        let StartedScript { vm, events } = self;
        drop(events);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                vm.halt();
                drop(runtime.spawn_blocking(move || drop(vm)));
            }
            Err(_) => drop(vm),
        }
    }
}

/// Starts `setup`'s script on a VM: everything the VM needs is the script, its args, cwd,
/// companion files, nested resolver and limits, none of it the routing, so preparation
/// starts the dry run's VM while it reads the routing and fills it in before
/// [`run_started`].
pub(crate) fn start_script(setup: &mut DriverSetup) -> StartedScript {
    let (vm_tx, events) = vm::event_queue();
    let script = VmScript {
        body: setup.body.clone(),
        args: setup.args.clone(),
        cwd: setup.cwd.to_string_lossy().into_owned(),
        nested: setup.nested.take(),
        files: setup.files.clone(),
        // The dry run writes no row and replays nothing: no call path to read.
        call_paths: !matches!(setup.persistence, Persistence::DryRun),
        budget: crate::budget::script_view(
            &crate::budget::SpendLimits::of(&setup.limits),
            &setup.usage,
        ),
        max_calls: setup.limits.max_agents,
    };
    let vm = vm::spawn(script, setup.vm_limits, vm_tx);
    StartedScript { vm, events }
}

/// Drives the generation of a script [`start_script`] started with this `setup`.
pub(crate) async fn run_started(
    setup: DriverSetup,
    started: StartedScript,
    control: mpsc::UnboundedReceiver<Control>,
) -> Outcome {
    let StartedScript { vm, events } = started;
    let driver = Driver::new(setup, Some(vm));
    driver.run(events, control).await
}

/// Ends a generation whose script already settled with `result` without running it: the
/// preparation dry run of a script that asked its host nothing (no call, log, phase or nested
/// workflow) computed exactly what the execution would, since scripts are deterministic
/// (engine.md 1.3) and get the same body, args, cwd, files and limits. The generation ends
/// as one whose VM finished at once: the same `complete` event, writes and outcome.
pub(crate) async fn settle_known(setup: DriverSetup, result: Option<Value>) -> Outcome {
    let mut driver = Driver::new(setup, None);
    driver.begin_halt(Halt::Done(result));
    driver.finish().await
}

/// Resolves at the end of the open commit window; never when none is open.
async fn window_end(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// The next beat of an optional heartbeat; never, without one.
async fn next_beat(heartbeat: &mut Option<tokio::time::Interval>) {
    match heartbeat {
        Some(beat) => {
            beat.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// A call the driver has numbered and not yet settled: an agent task, queued or running.
struct InFlight {
    /// The VM's id of the call, which its answer must carry.
    call_id: u64,
    /// The bytes of the call's payload the driver holds until it settles.
    held: usize,
    kind: CallKind,
    /// `"root"` or a nested workflow's scope; only root calls are journaled.
    scope: String,
    label: String,
    phase: Option<String>,
    /// The call's identity hash (journal.md), written on its row.
    hash: String,
    /// The script's structural path of the call, for replay matching.
    path: Option<String>,
    /// The hash of inputs outside the identity (cwd, images, ...), for replay matching.
    inputs_hash: Option<String>,
    /// Where it was routed; `None` only for calls that have no route.
    route: Option<Route>,
    /// Rows of earlier generations this call's row supersedes when written.
    supersedes: Vec<(u32, u32)>,
    /// Cancels this call alone (single-call cancel, halts).
    cancel: CancellationToken,
    /// Whether the task holds a concurrency permit: a pause cancels only calls not started.
    started: bool,
    /// What progress events have said of the call so far.
    progress: Progress,
    /// `isolated()`: the answer carries the call's changes.
    outcome: bool,
    /// The session it reopens or opened, and the path that took ([`sessions`]).
    session: sessions::CallSession,
    /// Why it runs live in a generation that could have replayed it.
    live_reason: Option<crate::model::LiveReason>,
}

/// A settled call waiting for its group commit: its row (when journaled) and its answer.
struct Settled {
    record: CallRecord,
    supersedes: Vec<(u32, u32)>,
    /// What the script gets once the row is durable; `None` when it gets nothing.
    reply: Option<VmReply>,
    /// Whether the row is journaled (root calls of a live generation).
    journaled: bool,
}

/// Why and how a generation is settling; once set, the script gets no more answers.
#[derive(Clone, Debug)]
enum Halt {
    Done(Option<Value>),
    Failed(ScriptFailure),
    Stop,
    Pause {
        reason: PauseReason,
        auth_context: Option<AuthContext>,
        reset_hint: Option<String>,
        reset_at: Option<i64>,
        checkpoint_context: Option<CheckpointWait>,
    },
}

/// The state of one executing generation, owned by its task.
struct Driver {
    /// The generation's inputs and the counters it advances.
    setup: DriverSetup,
    /// The running script; `None` once it finished or was halted.
    vm: Option<vm::VmHandle>,
    /// A VM told to stop, joined (off the async threads) when the generation ends.
    halted_vm: Option<vm::VmHandle>,
    /// Events not yet written, with the run's sequence numbers.
    events: EventLog,
    /// The run's concurrency: agent tasks hold a permit while they run.
    semaphore: Arc<Semaphore>,
    /// Calls whose prompts begin alike wait for the first one's answer (`crate::prompt_cache`).
    prompt_cache: Arc<crate::prompt_cache::PromptCacheHold>,
    /// Closed when the generation halts, so a task that gets its permit late starts nothing.
    gate_closed: Arc<AtomicBool>,
    /// Every agent task, awaited before the generation ends.
    tracker: TaskTracker,
    /// Given to each agent task to report start, updates and its result.
    activity_tx: activity::ActivitySender,
    /// Taken by the loop when it starts.
    activity_rx: Option<activity::ActivityReceiver>,
    /// Agent calls numbered and not yet settled, by index.
    in_flight: HashMap<u32, InFlight>,
    /// The bytes of the in-flight calls' payloads ([`InFlight::held`]): past
    /// [`HELD_BYTES`] the driver takes no more of the script's messages until calls settle.
    held_bytes: usize,
    /// Set when the script is sent an answer; [`Driver::linger`] takes it.
    answered: std::cell::Cell<bool>,
    /// The next root call index (program order).
    next_index: u32,
    /// The next call index of each nested scope (never journaled).
    nested_counters: HashMap<String, u32>,
    /// The next key of a nested workflow's agent call or checkpoint, from [`NESTED_KEYS`] up:
    /// an agent call's index while it runs (`in_flight`, the live view, its task's reports),
    /// a checkpoint's index for its answer, which a root call's index never reaches.
    next_nested_key: u32,
    /// Calls made so far, against `maxAgents`.
    agent_count: u32,
    /// Set once the generation starts settling.
    halt: Option<Halt>,
    /// The phase each scope is in, for labels and call rows.
    phase_by_scope: HashMap<String, Option<String>>,
    /// Root phases entered, each with its place in the order they were first entered in, for
    /// the dry run's report (a map, so that a script of thousands of phases is not checked
    /// against each of them at each entry).
    phases_entered: HashMap<String, usize>,
    /// Replayed rows not yet written: their results are already durable, so they go in
    /// batches ([`durability`]).
    replay_buffer: Vec<(CallRecord, Vec<(u32, u32)>)>,
    /// Dry run only: every call the script made.
    dry_calls: Vec<DryCall>,
    /// Scripted dry-run answers picked for calls, by index, when they were numbered.
    mock_picks: std::collections::HashMap<u32, Value>,
    /// Which of `setup.answers` a checkpoint has taken.
    used_answers: Vec<bool>,
    /// The first failed store write: the outcome reports it.
    store_error: Option<String>,
    /// Set once a write or the heartbeat was fenced: the generation writes nothing more.
    lease_lost: bool,
    /// Calls settled since the last group commit, in settlement order: their rows are
    /// written in one transaction and only then are they answered ([`durability`]).
    settling: Vec<Settled>,
    /// When the settled group's commit window ends; `None` while no group waits.
    commit_due: Option<tokio::time::Instant>,
    /// Sessions opened since the last tick, journaled at the next one while their calls are
    /// live, or with an interrupted call's row ([`durability`]).
    journaling: Vec<crate::model::OpenSession>,
    /// Until when the lease is known to hold, on this host's monotonic clock (the last
    /// renewal that succeeded, plus the TTL): the heartbeat tolerates a failed renewal only
    /// while the next one would still come before it ([`durability`]).
    lease_confirmed_until: Option<tokio::time::Instant>,
    /// Non-checkpoint rows this generation has written: status's call count while it runs
    /// (through the live view), recorded in the store when it stops ([`durability`]).
    settled_calls: u64,
    /// The script's events other than `Finished`, for [`Outcome::script_events`].
    script_events: u64,
    /// The script's log so far, against the generation's ceilings.
    logged: ceilings::LogTally,
    /// The phase events this generation's script wrote, against their ceiling.
    phases: ceilings::PhaseTally,
    /// The limit the generation paused at, when it paused for its budget.
    budget_exhausted: Option<crate::budget::Exhausted>,
    /// The spend the script's `budget` was last told ([`budget`]).
    pushed_usage: Usage,
    /// The sessions earlier generations journaled, which re-run calls reopen ([`sessions`]).
    reopening: sessions::Reopening,
    /// The run's summary so far: the generation's calls and their spend ([`summary`]).
    tally: Tally,
    /// The generation's run and phase spans ([`trace`]).
    trace: trace::RunTrace,
}

impl Driver {
    fn new(setup: DriverSetup, vm: Option<vm::VmHandle>) -> Driver {
        let (activity_tx, activity_rx) = activity::channel();
        let events = match setup.persistence {
            Persistence::DryRun if setup.notices.is_none() => {
                EventLog::discarding(setup.run_id.clone(), setup.last_event_seq)
            }
            _ => EventLog::new(
                setup.run_id.clone(),
                setup.last_event_seq,
                setup.notices.clone(),
            ),
        };
        let semaphore = Arc::new(Semaphore::new(setup.limits.concurrency.max(1) as usize));
        let prompt_cache = crate::prompt_cache::PromptCacheHold::new(setup.prompt_cache_hold);
        let mut phase_by_scope = HashMap::new();
        phase_by_scope.insert("root".to_owned(), setup.current_phase.clone());
        let used_answers = vec![false; setup.answers.len()];
        if let Persistence::Store { .. } = &setup.persistence {
            // Status counts this generation's rows from here on, not in the store.
            setup.live.locked().settled_calls = Some(0);
        }
        let trace = trace::RunTrace::begin(
            &setup.trace,
            setup.run_id.as_str(),
            setup.generation,
            setup.current_phase.as_deref(),
        );
        Driver {
            trace,
            events,
            semaphore,
            prompt_cache,
            gate_closed: Arc::new(AtomicBool::new(false)),
            tracker: TaskTracker::new(),
            activity_tx,
            activity_rx: Some(activity_rx),
            in_flight: HashMap::new(),
            held_bytes: 0,
            answered: std::cell::Cell::new(false),
            next_index: 0,
            nested_counters: HashMap::new(),
            next_nested_key: NESTED_KEYS,
            agent_count: 0,
            halt: None,
            phase_by_scope,
            phases_entered: HashMap::new(),
            replay_buffer: Vec::new(),
            dry_calls: Vec::new(),
            mock_picks: Default::default(),
            used_answers,
            store_error: None,
            lease_lost: false,
            lease_confirmed_until: None,
            settled_calls: 0,
            script_events: 0,
            logged: ceilings::LogTally::default(),
            phases: ceilings::PhaseTally::default(),
            budget_exhausted: None,
            pushed_usage: setup.usage,
            reopening: sessions::Reopening::default(),
            tally: Tally::default(),
            settling: Vec::new(),
            commit_due: None,
            journaling: Vec::new(),
            vm,
            halted_vm: None,
            setup,
        }
    }

    fn dry(&self) -> bool {
        matches!(self.setup.persistence, Persistence::DryRun)
    }

    /// The lease heartbeat's clock: every `renew_every` of the policy, first one period
    /// after the start (the lease was just taken or renewed); `None` when nothing is renewed.
    /// It beats while a halting generation waits for its running calls too: their rows
    /// still need the lease.
    fn heartbeat(&self) -> Option<tokio::time::Interval> {
        let Persistence::Store { lease_policy, .. } = &self.setup.persistence else {
            return None;
        };
        let every = lease_policy
            .renew_every()
            .filter(|every| !every.is_zero())?;
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Some(beat)
    }

    async fn run(
        mut self,
        mut vm_rx: vm::VmEventReceiver,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let mut activity_rx = self
            .activity_rx
            .take()
            .expect("activity receiver is taken once");
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = self.heartbeat();
        self.lease_confirmed_until = self
            .lease_ttl()
            .map(|ttl| tokio::time::Instant::now() + ttl);
        let mut vm_open = true;
        let mut control_open = true;
        self.load_journaled_sessions().await;
        if self.setup.generation > 1 && !self.dry() {
            let mut resumed = json!({"generation": self.setup.generation});
            // A resume that reruns calls names the rows it set aside.
            let rerun: Vec<Value> = self
                .setup
                .pool
                .set_aside()
                .iter()
                .map(|row| json!({"generation": row.generation, "callIndex": row.index, "label": row.label}))
                .collect();
            if !rerun.is_empty() {
                resumed["rerun"] = Value::Array(rerun);
            }
            self.events.push("resumed", "root", resumed);
        }
        // The generation is set up: status may keep what it shows between steps now.
        self.step_ends();
        loop {
            if self.halt.is_some() {
                // A halted script may be blocked on its full queue: closing it wakes the
                // thread, which then stops.
                vm_rx.close();
                if self.in_flight.is_empty() {
                    break;
                }
            }
            tokio::select! {
                biased;
                command = control.recv(), if control_open => match command {
                    Some(command) => self.step(|driver| driver.on_control(command)),
                    None => control_open = false,
                },
                Some(activity) = activity_rx.recv() => {
                    self.step_begins();
                    self.on_activity(activity).await;
                    // Group commit: what settled meanwhile joins this call's transaction.
                    for _ in 1..GROUP_COMMIT_LIMIT {
                        let Some(more) = activity_rx.try_recv() else { break };
                        self.on_activity(more).await;
                    }
                    self.commit_or_wait().await;
                    self.linger(&mut vm_rx).await;
                    self.step_ends();
                }
                _ = window_end(self.commit_due), if self.commit_due.is_some() => {
                    self.step_begins();
                    self.commit_settled().await;
                    self.step_ends();
                }
                event = vm_rx.recv(), if vm_open && self.halt.is_none()
                    && self.held_bytes < HELD_BYTES => match event {
                    Some(event) => {
                        self.step_begins();
                        self.on_vm(event).await;
                        self.after_vm_event(&mut vm_rx).await;
                        self.step_ends();
                    }
                    None => {
                        vm_open = false;
                        if self.halt.is_none() {
                            let failure = ScriptFailure::script_error(
                                "the script runtime ended unexpectedly",
                            );
                            self.step(|driver| driver.begin_halt(Halt::Failed(failure)));
                        }
                    }
                },
                // A tick marks its own step, when it has work.
                _ = tick.tick() => self.on_tick().await,
                _ = next_beat(&mut heartbeat), if heartbeat.is_some() && !self.lease_lost => {
                    self.step_begins();
                    self.beat().await;
                    self.step_ends();
                }
            }
        }
        // Odd from here on: the generation's last writes and its end are never kept.
        self.step_begins();
        self.finish().await
    }

    /// The next key of a nested workflow's call ([`Driver::next_nested_key`]).
    fn take_nested_key(&mut self) -> u32 {
        let key = self.next_nested_key;
        self.next_nested_key = self.next_nested_key.saturating_add(1);
        key
    }

    /// Takes the next index of a scope; only root indexes are journaled.
    fn take_index(&mut self, scope: &str) -> u32 {
        if scope == "root" {
            let index = self.next_index;
            self.next_index += 1;
            index
        } else {
            let counter = self.nested_counters.entry(scope.to_owned()).or_insert(0);
            let index = *counter;
            *counter += 1;
            index
        }
    }

    fn reject(&self, call_id: u64, code: &str, message: String, recoverable: bool) {
        self.reply(VmReply::Reject {
            call_id,
            code: code.into(),
            message,
            recoverable,
        });
    }

    /// The settlement ordinal of the next settled call.
    fn next_settlement(&mut self) -> u64 {
        let ordinal = self.setup.next_settlement;
        self.setup.next_settlement += 1;
        ordinal
    }

    async fn finish(mut self) -> Outcome {
        self.tracker.close();
        let halt = self
            .halt
            .clone()
            .unwrap_or(Halt::Failed(ScriptFailure::script_error(
                "the run ended without an outcome",
            )));
        let mut outcome = Outcome {
            status: RunStatus::Failed,
            pause_reason: None,
            error_code: None,
            error_message: None,
            result: None,
            auth_context: None,
            reset_hint: None,
            reset_at: None,
            checkpoint_context: None,
            usage: self.setup.usage,
            current_phase: self.phase_by_scope.get("root").cloned().flatten(),
            last_event_seq: 0,
            next_settlement: 0,
            dry_calls: std::mem::take(&mut self.dry_calls),
            phases_entered: in_order(std::mem::take(&mut self.phases_entered)),
            store_error: None,
            lease_lost: false,
            script_events: self.script_events,
            tally: Tally::default(),
            closing: None,
            trace: None,
        };
        self.settle_outcome(halt, &mut outcome);
        // The last rows, events and replayed rows: a failure is reported, there is nothing
        // left to halt.
        self.commit_settled().await;
        if let Err(lost) = self.flush_replays().await {
            self.on_lost_write(lost);
        }
        // Last, once no row of the generation can follow: its events and its count, which
        // its outcome's write takes.
        outcome.closing = self.closing();
        outcome.usage = self.setup.usage;
        outcome.last_event_seq = self.events.last_seq();
        outcome.next_settlement = self.setup.next_settlement;
        outcome.store_error = self.store_error.take();
        outcome.lease_lost = self.lease_lost;
        outcome.tally = std::mem::take(&mut self.tally);
        outcome.trace = self.trace.context();
        self.trace.end(
            outcome.status,
            outcome.pause_reason,
            outcome.error_code.as_deref(),
            &outcome.usage,
        );
        self.tracker.wait().await;
        if let Some(vm) = self.halted_vm.take() {
            let _ = tokio::task::spawn_blocking(move || drop(vm)).await;
        }
        outcome
    }

    /// The run's status from how it halted, with its closing event.
    fn settle_outcome(&mut self, halt: Halt, outcome: &mut Outcome) {
        match halt {
            Halt::Done(value) => {
                outcome.status = RunStatus::Completed;
                outcome.result = value;
                self.events.push(
                    "complete",
                    "root",
                    json!({"summary": {"usage": self.setup.usage, "calls": self.next_index}}),
                );
            }
            Halt::Failed(failure) => {
                outcome.status = RunStatus::Failed;
                outcome.error_code = Some(failure.code.clone());
                outcome.error_message = Some(failure.describe());
                self.events.push(
                    "error",
                    "root",
                    json!({"errorRecord": {"code": failure.code, "message": failure.describe(), "line": failure.line, "column": failure.column}}),
                );
            }
            Halt::Stop => {
                outcome.status = RunStatus::Aborted;
                self.events.push("stopped", "root", json!({}));
            }
            Halt::Pause {
                reason,
                auth_context,
                reset_hint,
                reset_at,
                checkpoint_context,
            } => {
                outcome.status = RunStatus::Paused;
                outcome.pause_reason = Some(reason);
                outcome.auth_context = auth_context;
                outcome.reset_hint = reset_hint;
                outcome.reset_at = reset_at;
                outcome.checkpoint_context = checkpoint_context;
                let fields = self.paused_fields(reason);
                self.events.push("paused", "root", fields);
            }
        }
    }
}

#[cfg(test)]
mod tests;
