//! The run driver: executes one generation of a run (the first execution or one resume).
//!
//! A tokio task that owns the run's state while it executes. It receives the script's calls
//! from the VM thread in program order, assigns call indexes, routes and hashes each call,
//! replays what the journal already holds, and runs the rest as agent tasks bounded by the
//! run's concurrency. A settled call is written to the store *before* its result is handed
//! to the script, so a crash loses no completed call. Stop, pause and single-call cancel
//! arrive as [`Control`] messages. The same driver runs the preparation dry run, with a
//! mock runner and no store.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::events::{EventLog, RunNotice};
use crate::engine::journal::{self, AgentIdentity, ReplayDecision, ReplayPool};
use crate::engine::permissions::PermissionBroker;
use crate::engine::preview;
use crate::engine::routing::{self, BackendLookup, Route, RouteRequest, RoutingSnapshot};
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentUpdate, FailureKind, PermissionOutcome,
    PermissionRequest, SessionSpec, TurnRequest,
};
use crate::engine::schema;
use crate::engine::vm::{self, ScriptFailure, VmEvent, VmLimits, VmReply, VmScript};
use crate::model::{
    CallError, CallKind, CallOrigin, CallOutcome, CallRecord, CheckpointAnswer, Limits,
    PauseReason, Phase, ReplayInfo, RunId, RunStatus, Usage,
};
use crate::store::{CallWrite, Fence, Store};

/// Re-prompts after structured output fails validation, before `SCHEMA_NONCOMPLIANCE`.
const SCHEMA_REPROMPTS: u32 = 2;
/// Replayed rows are written in batches of this size (their results are already durable).
const REPLAY_BATCH: usize = 512;
/// agentProgress is emitted at most once a second per call, plus a heartbeat.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
const TICK: Duration = Duration::from_millis(250);

/// Where the generation's writes go.
#[derive(Clone)]
pub enum Persistence {
    /// A live execution writes through the store under its lease.
    Store {
        store: Arc<dyn Store>,
        lease_token: String,
    },
    /// The preparation dry run writes nothing.
    DryRun,
}

/// Everything a generation needs.
pub struct DriverSetup {
    pub run_id: RunId,
    pub generation: u32,
    pub body: String,
    pub args: Value,
    pub cwd: PathBuf,
    pub phases: Vec<Phase>,
    pub meta_model: Option<String>,
    pub limits: Limits,
    pub routing: RoutingSnapshot,
    pub backends: Arc<dyn BackendLookup>,
    pub runner: Arc<dyn AgentRunner>,
    pub persistence: Persistence,
    pub pool: ReplayPool,
    pub answers: Vec<CheckpointAnswer>,
    pub last_event_seq: u64,
    pub next_settlement: u64,
    pub agent_timeout: Duration,
    pub vm_limits: VmLimits,
    pub broker: PermissionBroker,
    pub notices: Option<tokio::sync::broadcast::Sender<RunNotice>>,
    pub usage: Usage,
    pub current_phase: Option<String>,
    /// Resolves `workflow(name)` to a script body.
    pub nested: Option<vm::NestedResolver>,
    /// Shared with the engine so status can show live calls.
    pub live: Arc<std::sync::Mutex<LiveView>>,
}

/// Requests from outside while a generation runs.
#[derive(Debug)]
pub enum Control {
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

/// What status shows of a live generation.
#[derive(Clone, Debug, Default)]
pub struct LiveView {
    pub current_phase: Option<String>,
    pub usage: Usage,
    /// Calls not yet settled: index → (label, phase, model, "queued"|"running").
    pub calls: BTreeMap<u32, LiveCall>,
    pub latest_activity: Option<Value>,
}

#[derive(Clone, Debug)]
pub struct LiveCall {
    pub label: String,
    pub phase: Option<String>,
    pub model: Option<String>,
    pub backend_id: Option<String>,
    pub state: &'static str,
    pub timeout_ms: u64,
}

/// One call of the dry run, for routing checks, probes and warnings.
#[derive(Clone, Debug)]
pub struct DryCall {
    pub index: u32,
    pub kind: CallKind,
    pub label: String,
    pub phase: Option<String>,
    pub route: Result<Route, String>,
    pub mode: Option<String>,
    pub config_options: Vec<(String, Value)>,
}

/// How a generation ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: RunStatus,
    pub pause_reason: Option<PauseReason>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub result: Option<Value>,
    pub auth_context: Option<Value>,
    pub reset_hint: Option<String>,
    pub checkpoint_context: Option<Value>,
    pub usage: Usage,
    pub current_phase: Option<String>,
    pub last_event_seq: u64,
    pub next_settlement: u64,
    /// Dry run only: every call the script made.
    pub dry_calls: Vec<DryCall>,
    /// Phases the script entered.
    pub phases_entered: Vec<String>,
    /// A store write failed: the run could not be recorded faithfully.
    pub store_error: Option<String>,
}

/// Runs one generation to its end.
pub async fn run(setup: DriverSetup, control: mpsc::UnboundedReceiver<Control>) -> Outcome {
    let (vm_tx, vm_rx) = mpsc::unbounded_channel();
    let script = VmScript {
        body: setup.body.clone(),
        args: setup.args.clone(),
        cwd: setup.cwd.to_string_lossy().into_owned(),
        nested: None,
    };
    let mut script = script;
    let mut setup = setup;
    script.nested = setup.nested.take();
    let vm = vm::spawn(script, setup.vm_limits, vm_tx);
    let driver = Driver::new(setup, vm);
    driver.run(vm_rx, control).await
}

enum TaskResult {
    Value {
        value: Value,
        usage: Usage,
        attempts: u32,
        session: Option<Value>,
    },
    /// A recoverable failure after retries, or a cancelled call: the script gets `null`.
    Null {
        code: String,
        message: String,
        usage: Usage,
        attempts: u32,
    },
    /// Thrown into the script (catchable).
    Throw {
        code: String,
        message: String,
        usage: Usage,
        attempts: u32,
    },
    /// Pauses the run.
    Pause {
        reason: PauseReason,
        code: String,
        message: String,
        auth_context: Option<Value>,
        reset_hint: Option<String>,
        session: Option<Value>,
        usage: Usage,
        attempts: u32,
    },
    /// Never started (the run is halting).
    Interrupted,
}

enum Activity {
    Started(u32),
    Update(u32, AgentUpdate),
    Done(u32, TaskResult),
}

struct InFlight {
    call_id: u64,
    kind: CallKind,
    scope: String,
    label: String,
    phase: Option<String>,
    hash: String,
    path: Option<String>,
    inputs_hash: Option<String>,
    route: Option<Route>,
    supersedes: Vec<(u32, u32)>,
    cancel: CancellationToken,
    started: bool,
    progress: Progress,
}

#[derive(Default)]
struct Progress {
    /// The transcript so far, as upserted entries (assistant text, thoughts, tool calls).
    transcript: Vec<TranscriptEntry>,
    turn_count: u32,
    observed: u64,
    coalesced: u64,
    latest_text: String,
    last_tool: Option<String>,
    last_emit: Option<Instant>,
    dirty: bool,
    start_seq: u64,
}

/// One `agentTranscript` entry; `revision` grows with each change.
struct TranscriptEntry {
    role: &'static str,
    kind: &'static str,
    text: String,
    tool_id: Option<String>,
    tool_name: Option<String>,
    revision: u32,
    dirty: bool,
}

/// Entries beyond this many are not reported (the progress events still are).
const MAX_TRANSCRIPT_ENTRIES: usize = 1000;

impl Progress {
    /// Folds one update into the transcript: chunks extend the current entry of their kind,
    /// tool calls are keyed by their id.
    fn record(&mut self, update: &AgentUpdate) {
        let (role, kind, text, tool) = match update {
            AgentUpdate::MessageChunk(text) => ("assistant", "text", text.as_str(), None),
            AgentUpdate::ThoughtChunk(text) => ("assistant", "thought", text.as_str(), None),
            AgentUpdate::ToolCall { id, title, .. } => {
                ("tool", "tool_call", title.as_str(), Some(id.as_str()))
            }
            _ => return,
        };
        let existing = match tool {
            Some(id) => self
                .transcript
                .iter()
                .position(|e| e.tool_id.as_deref() == Some(id)),
            None => self
                .transcript
                .last()
                .and_then(|last| (last.kind == kind).then_some(self.transcript.len() - 1)),
        };
        match existing {
            Some(position) => {
                let entry = &mut self.transcript[position];
                if tool.is_some() {
                    entry.text = text.to_owned();
                    entry.tool_name = Some(text.to_owned());
                } else {
                    entry.text.push_str(text);
                    if entry.text.len() > 2048 {
                        entry.text = tail_utf8(&entry.text, 512).to_owned();
                    }
                }
                entry.revision += 1;
                entry.dirty = true;
            }
            None if self.transcript.len() < MAX_TRANSCRIPT_ENTRIES => {
                self.transcript.push(TranscriptEntry {
                    role,
                    kind,
                    text: text.to_owned(),
                    tool_id: tool.map(str::to_owned),
                    tool_name: tool.map(|_| text.to_owned()),
                    revision: 1,
                    dirty: true,
                })
            }
            None => {}
        }
    }
}

#[derive(Clone, Debug)]
enum Halt {
    Done(Option<Value>),
    Failed(ScriptFailure),
    Stop,
    Pause {
        reason: PauseReason,
        auth_context: Option<Value>,
        reset_hint: Option<String>,
        checkpoint_context: Option<Value>,
    },
}

struct Driver {
    setup: DriverSetup,
    vm: Option<vm::VmHandle>,
    /// A VM told to stop, joined (off the async threads) when the generation ends.
    halted_vm: Option<vm::VmHandle>,
    events: EventLog,
    semaphore: Arc<Semaphore>,
    gate_closed: Arc<AtomicBool>,
    tracker: TaskTracker,
    activity_tx: mpsc::UnboundedSender<Activity>,
    activity_rx: Option<mpsc::UnboundedReceiver<Activity>>,
    in_flight: HashMap<u32, InFlight>,
    next_index: u32,
    nested_counters: HashMap<String, u32>,
    agent_count: u32,
    halt: Option<Halt>,
    phase_by_scope: HashMap<String, Option<String>>,
    phases_entered: Vec<String>,
    replay_buffer: Vec<(CallRecord, Vec<(u32, u32)>)>,
    dry_calls: Vec<DryCall>,
    used_answers: Vec<bool>,
    store_error: Option<String>,
}

impl Driver {
    fn new(setup: DriverSetup, vm: vm::VmHandle) -> Driver {
        let (activity_tx, activity_rx) = mpsc::unbounded_channel();
        let events = EventLog::new(
            setup.run_id.clone(),
            setup.last_event_seq,
            setup.notices.clone(),
        );
        let semaphore = Arc::new(Semaphore::new(setup.limits.concurrency.max(1) as usize));
        let mut phase_by_scope = HashMap::new();
        phase_by_scope.insert("root".to_owned(), setup.current_phase.clone());
        let used_answers = vec![false; setup.answers.len()];
        Driver {
            events,
            semaphore,
            gate_closed: Arc::new(AtomicBool::new(false)),
            tracker: TaskTracker::new(),
            activity_tx,
            activity_rx: Some(activity_rx),
            in_flight: HashMap::new(),
            next_index: 0,
            nested_counters: HashMap::new(),
            agent_count: 0,
            halt: None,
            phase_by_scope,
            phases_entered: Vec::new(),
            replay_buffer: Vec::new(),
            dry_calls: Vec::new(),
            used_answers,
            store_error: None,
            vm: Some(vm),
            halted_vm: None,
            setup,
        }
    }

    fn dry(&self) -> bool {
        matches!(self.setup.persistence, Persistence::DryRun)
    }

    async fn run(
        mut self,
        mut vm_rx: mpsc::UnboundedReceiver<VmEvent>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let mut activity_rx = self
            .activity_rx
            .take()
            .expect("activity receiver is taken once");
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut vm_open = true;
        let mut control_open = true;
        if self.setup.generation > 1 && !self.dry() {
            self.events.push(
                "resumed",
                "root",
                json!({"generation": self.setup.generation}),
            );
        }
        loop {
            if self.halt.is_some() && self.in_flight.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                command = control.recv(), if control_open => match command {
                    Some(command) => self.on_control(command),
                    None => control_open = false,
                },
                Some(activity) = activity_rx.recv() => self.on_activity(activity).await,
                event = vm_rx.recv(), if vm_open && self.halt.is_none() => match event {
                    Some(event) => self.on_vm(event).await,
                    None => {
                        vm_open = false;
                        if self.halt.is_none() {
                            self.begin_halt(Halt::Failed(ScriptFailure::script_error("the script runtime ended unexpectedly")));
                        }
                    }
                },
                _ = tick.tick() => self.on_tick().await,
            }
        }
        self.finish().await
    }

    fn reply(&self, reply: VmReply) {
        if self.halt.is_none()
            && let Some(vm) = &self.vm
        {
            vm.reply(reply);
        }
    }

    fn current_phase(&self, scope: &str) -> Option<String> {
        self.phase_by_scope
            .get(scope)
            .cloned()
            .unwrap_or_else(|| self.phase_by_scope.get("root").cloned().flatten())
    }

    async fn on_vm(&mut self, event: VmEvent) {
        match event {
            VmEvent::Log { level, message } => {
                let line = match level.as_str() {
                    "warn" => format!("[warn] {message}"),
                    "error" => format!("[error] {message}"),
                    _ => message,
                };
                self.events.push("log", "root", json!({"message": line}));
            }
            VmEvent::Phase { scope, title } => {
                if scope == "root" && !self.phases_entered.contains(&title) {
                    self.phases_entered.push(title.clone());
                }
                self.phase_by_scope
                    .insert(scope.clone(), Some(title.clone()));
                if scope == "root" {
                    self.setup
                        .live
                        .lock()
                        .map(|mut live| live.current_phase = Some(title.clone()))
                        .ok();
                }
                self.events.push("phase", &scope, json!({"title": title}));
            }
            VmEvent::Call {
                call_id,
                kind,
                payload,
            } => match kind.as_str() {
                "agent" => self.on_agent_call(call_id, payload).await,
                "checkpoint" => self.on_checkpoint(call_id, payload).await,
                other => self.reply(VmReply::Reject {
                    call_id,
                    code: "SCRIPT_ERROR".into(),
                    message: format!("unknown host call {other}"),
                    recoverable: false,
                }),
            },
            VmEvent::Finished(result) => {
                self.vm = None;
                match result {
                    Ok(value) => self.begin_halt(Halt::Done(value)),
                    Err(failure) => self.begin_halt(Halt::Failed(failure)),
                }
            }
        }
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

    async fn on_agent_call(&mut self, call_id: u64, payload: Value) {
        let CallPayload {
            scope,
            prompt,
            path,
            options,
        } = CallPayload::parse(&payload);
        if self.agent_count >= self.setup.limits.max_agents {
            self.reject(
                call_id,
                "AGENT_LIMIT_EXCEEDED",
                format!(
                    "the run reached its limit of {} agent calls (maxAgents)",
                    self.setup.limits.max_agents
                ),
                false,
            );
            return;
        }
        let options = match AgentOptions::parse(&options) {
            Ok(options) => options,
            Err(message) => {
                self.reject(call_id, "SCRIPT_VALIDATION_ERROR", message, false);
                return;
            }
        };
        self.agent_count += 1;
        let index = self.take_index(&scope);
        let phase = options.phase.clone().or_else(|| self.current_phase(&scope));
        let label = options.label.clone().unwrap_or_else(|| match &phase {
            Some(phase) => format!("{phase} agent {index}"),
            None => format!("agent {index}"),
        });
        let route_request = RouteRequest {
            model: options.model.as_deref(),
            agent_type: options.agent_type.as_deref(),
            tier: options.tier.as_deref(),
            phase: phase.as_deref(),
            meta_model: self.setup.meta_model.as_deref(),
        };
        let route = routing::resolve(
            &route_request,
            &self.setup.phases,
            &self.setup.routing,
            self.setup.backends.as_ref(),
        );
        let definition = options
            .agent_type
            .as_ref()
            .and_then(|name| self.setup.routing.agents.get(name))
            .cloned();
        if self.dry() {
            self.dry_calls.push(DryCall {
                index,
                kind: CallKind::Agent,
                label: label.clone(),
                phase: phase.clone(),
                route: route.clone(),
                mode: options.mode.clone(),
                config_options: options.config_options.clone(),
            });
        }
        let route = match route {
            Ok(route) => route,
            Err(reason) if !self.dry() => {
                let names = self.setup.backends.names().join(", ");
                self.reject(
                    call_id,
                    "ROUTING_REQUIRED",
                    format!("{label}@{index} has no route: {reason}. Configured backends: {names}"),
                    false,
                );
                return;
            }
            Err(_) => Route {
                spec: "unrouted".into(),
                backend: crate::engine::runner::BackendSpec {
                    id: "unrouted".into(),
                    command: String::new(),
                    args: vec![],
                    env: Default::default(),
                    session_meta: None,
                    origin: crate::engine::runner::BackendOrigin::Builtin,
                },
                model: None,
            },
        };
        let hash = journal::agent_hash(&AgentIdentity {
            prompt: &prompt,
            model: Some(&route.spec),
            mode: options.mode.as_deref(),
            config_options: &options.config_options,
            tier: options.tier.as_deref(),
            phase: phase.as_deref(),
            agent_type: options.agent_type.as_deref(),
            agent_definition: definition.as_ref().map(|d| d.digest.as_str()),
            schema: options.schema.as_ref(),
        });
        let cwd = options
            .cwd
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.setup.cwd.clone());
        let backend_digest = if route.backend.origin == crate::engine::runner::BackendOrigin::Script
        {
            Value::String(crate::util::sha256_hex(
                serde_json::to_string(&route.backend)
                    .unwrap_or_default()
                    .as_bytes(),
            ))
        } else {
            Value::Null
        };
        let inputs = json!({
            "cwd": cwd.to_string_lossy(),
            "isolation": options.isolation,
            "keepSession": options.keep_session,
            "images": options.images,
            "mcpServers": options.mcp_servers,
            "meta": options.meta,
            "promptMeta": options.prompt_meta,
            "label": label,
            "backends": backend_digest,
        });
        let inputs_hash = journal::inputs_hash(&inputs);

        // Replay: only root calls of a resumed run.
        let mut resume_session = None;
        let mut supersedes = Vec::new();
        if scope == "root" && !self.dry() && !self.setup.pool.is_empty() {
            match self.setup.pool.decide(
                CallKind::Agent,
                path.as_deref(),
                &hash,
                Some(&inputs_hash),
            ) {
                ReplayDecision::Replay { row, match_kind } => {
                    self.replay(
                        call_id,
                        index,
                        row,
                        match_kind,
                        &label,
                        phase.as_deref(),
                        path.clone(),
                        &prompt,
                        &route,
                    )
                    .await;
                    return;
                }
                ReplayDecision::Live(reason) => {
                    tracing::debug!(run = %self.setup.run_id, index, ?reason, "call runs live");
                    supersedes =
                        self.setup
                            .pool
                            .superseded_by_live(CallKind::Agent, path.as_deref(), &hash);
                    resume_session =
                        self.continuation_session(path.as_deref(), &hash, &inputs_hash);
                }
            }
        }

        let cancel = CancellationToken::new();
        let timeout = options
            .timeout_ms
            .map(|ms| Duration::from_millis(ms).min(self.setup.agent_timeout))
            .unwrap_or(self.setup.agent_timeout);
        let retries = options.retries.unwrap_or(self.setup.limits.agent_retries);
        let mut full_prompt = prompt.clone();
        if let Some(definition) = &definition
            && !definition.role_prompt.is_empty()
        {
            full_prompt = format!("{}\n\n{}", definition.role_prompt, prompt);
        }
        let mut meta = options.meta.clone();
        if let Some(definition) = &definition
            && (!definition.tools.is_empty() || !definition.disallowed_tools.is_empty())
        {
            let entry = json!({"agentprism": {"tools": definition.tools, "disallowedTools": definition.disallowed_tools}});
            meta = Some(match meta {
                Some(Value::Object(mut map)) => {
                    map.extend(entry.as_object().cloned().unwrap_or_default());
                    Value::Object(map)
                }
                _ => entry,
            });
        }
        let spec = SessionSpec {
            backend: route.backend.clone(),
            model: route.model.clone(),
            mode: options.mode.clone(),
            config_options: options.config_options.clone(),
            cwd: cwd.clone(),
            mcp_servers: options.mcp_servers.clone().unwrap_or(Value::Array(vec![])),
            meta,
            resume_session,
            run_id: self.setup.run_id.to_string(),
            call_index: index,
            label: label.clone(),
        };
        let mut prompt_blocks = vec![json!({"type": "text", "text": full_prompt})];
        if let Some(Value::Array(images)) = &options.images {
            prompt_blocks.extend(images.iter().cloned());
        }
        let task = AgentTask {
            index,
            label: label.clone(),
            spec,
            prompt: prompt_blocks,
            prompt_meta: options.prompt_meta.clone(),
            schema: options.schema.clone(),
            timeout,
            retries,
            runner: self.setup.runner.clone(),
            cancel: cancel.clone(),
            activity: self.activity_tx.clone(),
            broker: self.setup.broker.clone(),
            run_id: self.setup.run_id.clone(),
            semaphore: self.semaphore.clone(),
            gate_closed: self.gate_closed.clone(),
            dry_run: self.dry(),
        };
        let model_shown = route.model.clone().or_else(|| Some(route.spec.clone()));
        self.setup
            .live
            .lock()
            .map(|mut live| {
                live.calls.insert(
                    index,
                    LiveCall {
                        label: label.clone(),
                        phase: phase.clone(),
                        model: model_shown,
                        backend_id: Some(route.backend.id.clone()),
                        state: "queued",
                        timeout_ms: timeout.as_millis() as u64,
                    },
                );
            })
            .ok();
        self.in_flight.insert(
            index,
            InFlight {
                call_id,
                kind: CallKind::Agent,
                scope,
                label,
                phase,
                hash,
                path,
                inputs_hash: Some(inputs_hash),
                route: Some(route),
                supersedes,
                cancel,
                started: false,
                progress: Progress {
                    start_seq: 0,
                    ..Progress::default()
                },
            },
        );
        let _ = prompt;
        self.tracker.spawn(task.run());
    }

    /// A recorded session of this same call, interrupted by an auth or usage pause.
    fn continuation_session(
        &self,
        path: Option<&str>,
        hash: &str,
        inputs_hash: &str,
    ) -> Option<String> {
        self.setup
            .pool
            .rows_with_hash(hash)
            .filter(|row| {
                row.path.as_deref() == path && row.inputs_hash.as_deref() == Some(inputs_hash)
            })
            .filter(|row| {
                matches!(
                    row.error.as_ref().map(|e| e.code.as_str()),
                    Some("AUTH_REQUIRED" | "PROVIDER_USAGE_LIMIT")
                )
            })
            .find_map(|row| {
                row.session
                    .as_ref()?
                    .get("sessionId")?
                    .as_str()
                    .map(str::to_owned)
            })
    }

    #[allow(clippy::too_many_arguments)]
    async fn replay(
        &mut self,
        call_id: u64,
        index: u32,
        row: usize,
        match_kind: &'static str,
        label: &str,
        phase: Option<&str>,
        path: Option<String>,
        prompt: &str,
        route: &Route,
    ) {
        self.setup.pool.consume(row);
        let source = self.setup.pool.row(row).clone();
        let value = source.result.clone().unwrap_or(Value::Null);
        self.events.push(
            "agentStart",
            "root",
            json!({"label": label, "phase": phase, "prompt": prompt, "model": route.spec, "callIndex": index, "path": path, "replay": true}),
        );
        let shown = preview::preview(&value);
        self.events.push(
            "agentEnd",
            "root",
            json!({"callIndex": index, "label": label, "result": {"preview": shown.preview, "redacted": shown.redacted, "truncated": shown.truncated}, "replay": true}),
        );
        let record = CallRecord {
            generation: self.setup.generation,
            index,
            kind: CallKind::Agent,
            hash: source.hash.clone(),
            path,
            inputs_hash: source.inputs_hash.clone(),
            label: Some(label.to_owned()),
            phase: phase.map(str::to_owned),
            outcome: CallOutcome::Result,
            origin: CallOrigin::JournalReplay,
            result: Some(value.clone()),
            error: None,
            aborted: false,
            attempts: 0,
            usage: Usage::default(),
            model_requested: Some(route.spec.clone()),
            model_resolved: source.model_resolved.clone(),
            backend_id: source.backend_id.clone(),
            resolved_cwd: source.resolved_cwd.clone(),
            replay: Some(ReplayInfo {
                source_generation: source.generation,
                recorded_index: source.index,
                match_kind: match_kind.to_owned(),
            }),
            session: None,
            settlement_ordinal: self.next_settlement(),
            superseded_by: None,
        };
        self.replay_buffer
            .push((record, vec![(source.generation, source.index)]));
        if self.replay_buffer.len() >= REPLAY_BATCH {
            self.flush_replays().await;
        }
        self.reply(VmReply::Resolve { call_id, value });
    }

    fn next_settlement(&mut self) -> u64 {
        let ordinal = self.setup.next_settlement;
        self.setup.next_settlement += 1;
        ordinal
    }

    async fn flush_replays(&mut self) {
        if self.replay_buffer.is_empty() {
            return;
        }
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
            self.replay_buffer.clear();
            return;
        };
        let buffer = std::mem::take(&mut self.replay_buffer);
        let events = self.events.take();
        let mut writes: Vec<CallWrite<'_>> = buffer
            .iter()
            .map(|(record, supersedes)| CallWrite {
                record,
                supersedes,
                events: &[],
            })
            .collect();
        if let Some(last) = writes.last_mut() {
            last.events = &events;
        }
        if let Err(error) = store
            .append_calls(&self.setup.run_id, &writes, Fence(&lease_token))
            .await
        {
            self.note_store_error(error.to_string());
        }
    }

    fn note_store_error(&mut self, message: String) {
        tracing::error!(run = %self.setup.run_id, "store write failed: {message}");
        if self.store_error.is_none() {
            self.store_error = Some(message.clone());
        }
        if self.halt.is_none() {
            self.begin_halt(Halt::Pause {
                reason: PauseReason::Interrupted,
                auth_context: None,
                reset_hint: None,
                checkpoint_context: None,
            });
        }
    }

    async fn on_checkpoint(&mut self, call_id: u64, payload: Value) {
        let CallPayload {
            scope,
            prompt,
            path,
            options,
        } = CallPayload::parse(&payload);
        let kind = options
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("confirm")
            .to_owned();
        let choices = options.get("choices").cloned();
        if !matches!(kind.as_str(), "confirm" | "input" | "select") {
            self.reject(
                call_id,
                "SCRIPT_VALIDATION_ERROR",
                format!("checkpoint kind must be confirm, input or select, got {kind:?}"),
                false,
            );
            return;
        }
        if kind == "select" {
            let valid = choices
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|list| !list.is_empty() && list.iter().all(Value::is_string));
            if !valid {
                self.reject(
                    call_id,
                    "SCRIPT_VALIDATION_ERROR",
                    "checkpoint kind select needs choices: a non-empty array of strings".into(),
                    false,
                );
                return;
            }
        }
        if self.agent_count >= self.setup.limits.max_agents {
            self.reject(
                call_id,
                "AGENT_LIMIT_EXCEEDED",
                format!(
                    "the run reached its limit of {} calls (maxAgents)",
                    self.setup.limits.max_agents
                ),
                false,
            );
            return;
        }
        self.agent_count += 1;
        let index = self.take_index(&scope);
        let hash = journal::checkpoint_hash(&prompt, &kind, choices.as_ref());
        let label = format!("checkpoint {index}");
        if self.dry() {
            self.dry_calls.push(DryCall {
                index,
                kind: CallKind::Checkpoint,
                label: label.clone(),
                phase: self.current_phase(&scope),
                route: Err("checkpoint".into()),
                mode: None,
                config_options: vec![],
            });
            let answer = match kind.as_str() {
                "confirm" => Value::Bool(true),
                "input" => Value::String(String::new()),
                _ => choices
                    .as_ref()
                    .and_then(|c| c.get(0))
                    .cloned()
                    .unwrap_or(Value::Null),
            };
            self.reply(VmReply::Resolve {
                call_id,
                value: answer,
            });
            return;
        }
        let mut supersedes = Vec::new();
        if scope == "root" {
            match self
                .setup
                .pool
                .decide(CallKind::Checkpoint, path.as_deref(), &hash, None)
            {
                ReplayDecision::Replay { row, match_kind } => {
                    self.setup.pool.consume(row);
                    let source = self.setup.pool.row(row).clone();
                    let value = source.result.clone().unwrap_or(Value::Null);
                    let record = self.checkpoint_record(
                        index,
                        &hash,
                        path,
                        &label,
                        value.clone(),
                        CallOrigin::JournalReplay,
                        Some(ReplayInfo {
                            source_generation: source.generation,
                            recorded_index: source.index,
                            match_kind: match_kind.to_owned(),
                        }),
                    );
                    self.replay_buffer
                        .push((record, vec![(source.generation, source.index)]));
                    self.reply(VmReply::Resolve { call_id, value });
                    return;
                }
                ReplayDecision::Live(_) => {
                    supersedes = self.setup.pool.superseded_by_live(
                        CallKind::Checkpoint,
                        path.as_deref(),
                        &hash,
                    );
                }
            }
        }
        // A durable answer given with resume: by index, else the unused answer with this hash.
        let answer_slot = self
            .setup
            .answers
            .iter()
            .enumerate()
            .find(|(i, a)| !self.used_answers[*i] && a.call_index == index && a.hash == hash)
            .or_else(|| {
                self.setup
                    .answers
                    .iter()
                    .enumerate()
                    .find(|(i, a)| !self.used_answers[*i] && a.hash == hash)
            })
            .map(|(i, a)| (i, a.answer.clone()));
        if let Some((slot, answer)) = answer_slot {
            self.used_answers[slot] = true;
            let record = self.checkpoint_record(
                index,
                &hash,
                path,
                &label,
                answer.clone(),
                CallOrigin::Confirm,
                None,
            );
            self.events.push(
                "checkpointAnswered",
                &scope,
                json!({"callIndex": index, "source": "injected"}),
            );
            self.write_call(&record, &supersedes).await;
            self.reply(VmReply::Resolve {
                call_id,
                value: answer,
            });
            return;
        }
        let context = json!({"callIndex": index, "hash": hash, "prompt": prompt, "kind": kind, "choices": choices});
        self.begin_halt(Halt::Pause {
            reason: PauseReason::CheckpointRequired,
            auth_context: None,
            reset_hint: None,
            checkpoint_context: Some(context),
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn checkpoint_record(
        &mut self,
        index: u32,
        hash: &str,
        path: Option<String>,
        label: &str,
        value: Value,
        origin: CallOrigin,
        replay: Option<ReplayInfo>,
    ) -> CallRecord {
        CallRecord {
            generation: self.setup.generation,
            index,
            kind: CallKind::Checkpoint,
            hash: hash.to_owned(),
            path,
            inputs_hash: None,
            label: Some(label.to_owned()),
            phase: None,
            outcome: CallOutcome::Result,
            origin,
            result: Some(value),
            error: None,
            aborted: false,
            attempts: 0,
            usage: Usage::default(),
            model_requested: None,
            model_resolved: None,
            backend_id: None,
            resolved_cwd: None,
            replay,
            session: None,
            settlement_ordinal: self.next_settlement(),
            superseded_by: None,
        }
    }

    /// Writes one settled call with the buffered events, durably, before anything else.
    async fn write_call(&mut self, record: &CallRecord, supersedes: &[(u32, u32)]) {
        self.flush_replays().await;
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
            return;
        };
        let events = self.events.take();
        let write = CallWrite {
            record,
            supersedes,
            events: &events,
        };
        if let Err(error) = store
            .append_call(&self.setup.run_id, write, Fence(&lease_token))
            .await
        {
            self.note_store_error(error.to_string());
        }
    }

    async fn on_activity(&mut self, activity: Activity) {
        match activity {
            Activity::Started(index) => {
                let seq = self.events.last_seq() + 1;
                let Some(call) = self.in_flight.get_mut(&index) else {
                    return;
                };
                call.started = true;
                call.progress.start_seq = seq;
                let route = call.route.as_ref();
                let fields = json!({
                    "label": call.label,
                    "phase": call.phase,
                    "model": route.map(|r| r.spec.clone()),
                    "backendId": route.map(|r| r.backend.id.clone()),
                    "callIndex": index,
                    "path": call.path,
                });
                let scope = call.scope.clone();
                self.setup
                    .live
                    .lock()
                    .map(|mut live| {
                        if let Some(entry) = live.calls.get_mut(&index) {
                            entry.state = "running";
                        }
                    })
                    .ok();
                self.events.push("agentStart", &scope, fields);
            }
            Activity::Update(index, update) => {
                let Some(call) = self.in_flight.get_mut(&index) else {
                    return;
                };
                if let AgentUpdate::Notice(message) = &update {
                    // Adapter chatter (acp::chatter): an event of its own, never the answer.
                    let fields =
                        json!({"label": call.label, "callIndex": index, "message": message});
                    let scope = call.scope.clone();
                    self.events.push("agentNotice", &scope, fields);
                    return;
                }
                let progress = &mut call.progress;
                progress.observed += 1;
                progress.record(&update);
                match &update {
                    AgentUpdate::MessageChunk(text) => {
                        progress.latest_text.push_str(text);
                        if progress.latest_text.len() > 1024 {
                            let cut = progress.latest_text.len() - 512;
                            let mut start = cut;
                            while !progress.latest_text.is_char_boundary(start) {
                                start += 1;
                            }
                            progress.latest_text.drain(..start);
                        }
                    }
                    AgentUpdate::ToolCall { title, .. } => progress.last_tool = Some(title.clone()),
                    _ => {}
                }
                let due = progress
                    .last_emit
                    .is_none_or(|at| at.elapsed() >= PROGRESS_INTERVAL);
                if due {
                    self.emit_progress(index, "activity");
                } else {
                    let progress = &mut self
                        .in_flight
                        .get_mut(&index)
                        .expect("call is in flight")
                        .progress;
                    progress.coalesced += 1;
                    progress.dirty = true;
                }
            }
            Activity::Done(index, result) => self.on_done(index, result).await,
        }
    }

    fn emit_progress(&mut self, index: u32, cause: &str) {
        let Some(call) = self.in_flight.get_mut(&index) else {
            return;
        };
        let progress = &mut call.progress;
        progress.turn_count = progress.turn_count.max(1);
        progress.last_emit = Some(Instant::now());
        progress.dirty = false;
        let tail = tail_utf8(&progress.latest_text, 512);
        let mut fields = json!({
            "callIndex": index,
            "executionStartSeq": progress.start_seq,
            "turnCount": progress.turn_count,
            "observedEvents": progress.observed,
            "coalescedEvents": progress.coalesced,
            "cause": cause,
        });
        if !tail.is_empty() {
            fields["latestText"] = Value::String(tail.to_owned());
        } else if let Some(tool) = &progress.last_tool {
            fields["lastToolName"] = Value::String(tool.clone());
        }
        let start_seq = progress.start_seq;
        let mut upserts = Vec::new();
        for (entry_index, entry) in progress
            .transcript
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.dirty)
        {
            entry.dirty = false;
            let mut shown = json!({"role": entry.role, "kind": entry.kind, "text": tail_utf8(&entry.text, 512)});
            if let Some(name) = &entry.tool_name {
                shown["toolName"] = Value::String(name.clone());
            }
            upserts.push(json!({
                "callIndex": index,
                "executionStartSeq": start_seq,
                "entryIndex": entry_index,
                "revision": entry.revision,
                "operation": "upsert",
                "entry": shown,
            }));
        }
        let scope = call.scope.clone();
        let activity = json!({"callIndex": index, "label": call.label, "latestText": fields.get("latestText"), "lastToolName": fields.get("lastToolName")});
        self.setup
            .live
            .lock()
            .map(|mut live| live.latest_activity = Some(activity))
            .ok();
        self.events.push("agentProgress", &scope, fields);
        for upsert in upserts {
            self.events.push("agentTranscript", &scope, upsert);
        }
    }

    async fn on_done(&mut self, index: u32, result: TaskResult) {
        if let Some(call) = self.in_flight.get(&index)
            && call.progress.dirty
        {
            self.emit_progress(index, "activity");
        }
        let Some(call) = self.in_flight.remove(&index) else {
            return;
        };
        // A call cancelled because the whole run is halting (stop, interrupt) did not end
        // on its own: it is an interrupted row that a resume re-runs, not a cancelled call.
        let result = match result {
            TaskResult::Null { code, .. } if self.halt.is_some() && code == "AGENT_CANCELLED" => {
                TaskResult::Interrupted
            }
            other => other,
        };
        self.setup
            .live
            .lock()
            .map(|mut live| {
                live.calls.remove(&index);
            })
            .ok();
        let route = call.route.clone();
        let mut record = CallRecord {
            generation: self.setup.generation,
            index,
            kind: call.kind,
            hash: call.hash.clone(),
            path: call.path.clone(),
            inputs_hash: call.inputs_hash.clone(),
            label: Some(call.label.clone()),
            phase: call.phase.clone(),
            outcome: CallOutcome::Result,
            origin: if self.dry() {
                CallOrigin::Headless
            } else {
                CallOrigin::Runner
            },
            result: None,
            error: None,
            aborted: false,
            attempts: 0,
            usage: Usage::default(),
            model_requested: route.as_ref().map(|r| r.spec.clone()),
            model_resolved: route.as_ref().and_then(|r| r.model.clone()),
            backend_id: route.as_ref().map(|r| r.backend.id.clone()),
            resolved_cwd: None,
            replay: None,
            session: None,
            settlement_ordinal: 0,
            superseded_by: None,
        };
        let reply;
        let mut pause = None;
        match result {
            TaskResult::Value {
                value,
                usage,
                attempts,
                session,
            } => {
                record.result = Some(value.clone());
                record.usage = usage;
                record.attempts = attempts;
                record.session = session;
                reply = Some(VmReply::Resolve {
                    call_id: call.call_id,
                    value,
                });
            }
            TaskResult::Null {
                code,
                message,
                usage,
                attempts,
            } => {
                record.outcome = CallOutcome::Null;
                record.usage = usage;
                record.attempts = attempts;
                record.error = Some(CallError {
                    form: "agent".into(),
                    code,
                    message,
                    recoverable: true,
                });
                reply = Some(VmReply::Resolve {
                    call_id: call.call_id,
                    value: Value::Null,
                });
            }
            TaskResult::Throw {
                code,
                message,
                usage,
                attempts,
            } => {
                record.outcome = CallOutcome::Error;
                record.usage = usage;
                record.attempts = attempts;
                record.error = Some(CallError {
                    form: "agent".into(),
                    code: code.clone(),
                    message: message.clone(),
                    recoverable: false,
                });
                reply = Some(VmReply::Reject {
                    call_id: call.call_id,
                    code,
                    message,
                    recoverable: false,
                });
            }
            TaskResult::Pause {
                reason,
                code,
                message,
                auth_context,
                reset_hint,
                session,
                usage,
                attempts,
            } => {
                record.outcome = CallOutcome::Error;
                record.usage = usage;
                record.attempts = attempts;
                record.session = session;
                record.error = Some(CallError {
                    form: "agent".into(),
                    code,
                    message,
                    recoverable: false,
                });
                reply = None;
                pause = Some(Halt::Pause {
                    reason,
                    auth_context,
                    reset_hint,
                    checkpoint_context: None,
                });
            }
            TaskResult::Interrupted => {
                record.outcome = CallOutcome::Error;
                record.origin = CallOrigin::Engine;
                record.aborted = true;
                record.error = Some(CallError {
                    form: "engine".into(),
                    code: "WORKFLOW_ABORTED".into(),
                    message: "interrupted before it finished".into(),
                    recoverable: false,
                });
                reply = None;
            }
        }
        record.settlement_ordinal = self.next_settlement();
        self.setup.usage.add(&record.usage);
        let usage = self.setup.usage;
        self.setup
            .live
            .lock()
            .map(|mut live| live.usage = usage)
            .ok();
        let shown = record.result.as_ref().map(preview::preview);
        let mut end = json!({
            "callIndex": index,
            "label": call.label,
            "result": shown.as_ref().map(|p| json!({"preview": p.preview, "redacted": p.redacted, "truncated": p.truncated})),
            "usage": record.usage,
        });
        if let Some(error) = &record.error {
            end["errorCode"] = Value::String(error.code.clone());
            end["errorMessage"] =
                Value::String(crate::engine::status::error_message(&error.message));
        }
        self.events.push("agentEnd", &call.scope, end);
        if !record.usage.is_zero() {
            self.events
                .push("tokenUsage", &call.scope, json!({"usage": usage}));
        }
        self.events.push(
            "callRecord",
            &call.scope,
            json!({"index": index, "kind": record.kind, "label": record.label, "outcome": record.outcome,
                   "origin": record.origin, "attempts": record.attempts, "errorCode": record.error.as_ref().map(|e| e.code.clone())}),
        );
        if call.scope == "root" && !self.dry() {
            let supersedes = call.supersedes.clone();
            self.write_call(&record, &supersedes).await;
        }
        if let Some(reply) = reply {
            self.reply(reply);
        }
        if let Some(pause) = pause
            && self.halt.is_none()
        {
            self.begin_halt(pause);
        }
    }

    fn on_control(&mut self, command: Control) {
        match command {
            Control::Stop => {
                if !matches!(self.halt, Some(Halt::Stop)) {
                    self.halt = None;
                    self.begin_halt(Halt::Stop);
                }
            }
            Control::Pause(reason) => {
                if self.halt.is_none() {
                    self.begin_halt(Halt::Pause {
                        reason,
                        auth_context: None,
                        reset_hint: None,
                        checkpoint_context: None,
                    });
                }
            }
            Control::CancelCall { index, reply } => {
                let live = self
                    .in_flight
                    .get(&index)
                    .filter(|call| call.kind == CallKind::Agent);
                if let Some(call) = live {
                    call.cancel.cancel();
                }
                let _ = reply.send(live.is_some());
            }
        }
    }

    /// Starts settling: the script stops, nothing new starts; stop and script ends also
    /// cancel running calls, pauses let them finish.
    fn begin_halt(&mut self, halt: Halt) {
        if self.halt.is_some() {
            return;
        }
        self.gate_closed.store(true, Ordering::SeqCst);
        if let Some(vm) = self.vm.take() {
            // The VM thread exits at its next interrupt check or wait; `finish` joins it.
            vm.halt();
            self.halted_vm = Some(vm);
        }
        // A requested pause lets running calls finish and journal; an interrupted one (the
        // owner is going away) cancels them like a stop does.
        let cancel_running =
            !matches!(halt, Halt::Pause { reason, .. } if reason != PauseReason::Interrupted);
        for call in self.in_flight.values() {
            if cancel_running || !call.started {
                call.cancel.cancel();
            }
        }
        self.halt = Some(halt);
    }

    async fn on_tick(&mut self) {
        let due: Vec<u32> = self
            .in_flight
            .iter()
            .filter(|(_, call)| call.started)
            .filter(|(_, call)| {
                let progress = &call.progress;
                (progress.dirty
                    && progress
                        .last_emit
                        .is_none_or(|at| at.elapsed() >= PROGRESS_INTERVAL))
                    || (progress
                        .last_emit
                        .is_some_and(|at| at.elapsed() >= HEARTBEAT_INTERVAL)
                        && (!progress.latest_text.is_empty() || progress.last_tool.is_some()))
            })
            .map(|(index, _)| *index)
            .collect();
        for index in due {
            let heartbeat = self
                .in_flight
                .get(&index)
                .is_some_and(|c| !c.progress.dirty);
            self.emit_progress(index, if heartbeat { "heartbeat" } else { "activity" });
        }
        if self.events.has_pending() && self.halt.is_none() {
            self.flush_events().await;
        }
    }

    async fn flush_events(&mut self) {
        self.flush_replays().await;
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
            self.events.take();
            return;
        };
        let events = self.events.take();
        if events.is_empty() {
            return;
        }
        if let Err(error) = store
            .append_events(&self.setup.run_id, &events, Fence(&lease_token))
            .await
        {
            self.events.restore(events);
            self.note_store_error(error.to_string());
        }
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
            checkpoint_context: None,
            usage: self.setup.usage,
            current_phase: self.phase_by_scope.get("root").cloned().flatten(),
            last_event_seq: 0,
            next_settlement: 0,
            dry_calls: std::mem::take(&mut self.dry_calls),
            phases_entered: std::mem::take(&mut self.phases_entered),
            store_error: None,
        };
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
                checkpoint_context,
            } => {
                outcome.status = RunStatus::Paused;
                outcome.pause_reason = Some(reason);
                outcome.auth_context = auth_context;
                outcome.reset_hint = reset_hint;
                outcome.checkpoint_context = checkpoint_context;
                let shown_reason = (reason != PauseReason::Requested).then(|| reason.as_str());
                self.events
                    .push("paused", "root", json!({"reason": shown_reason}));
            }
        }
        self.flush_replays().await;
        self.flush_events().await;
        outcome.usage = self.setup.usage;
        outcome.last_event_seq = self.events.last_seq();
        outcome.next_settlement = self.setup.next_settlement;
        outcome.store_error = self.store_error.take();
        self.tracker.wait().await;
        if let Some(vm) = self.halted_vm.take() {
            let _ = tokio::task::spawn_blocking(move || drop(vm)).await;
        }
        outcome
    }
}

/// What the prelude sends with `agent()` and `checkpoint()`: `{scope, prompt, options, path}`.
struct CallPayload {
    scope: String,
    prompt: String,
    path: Option<String>,
    options: Value,
}

impl CallPayload {
    fn parse(payload: &Value) -> CallPayload {
        let text = |key: &str| payload.get(key).and_then(Value::as_str);
        CallPayload {
            scope: text("scope").unwrap_or("root").to_owned(),
            prompt: text("prompt").unwrap_or_default().to_owned(),
            path: text("path").map(str::to_owned),
            options: payload
                .get("options")
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
        }
    }
}

fn tail_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `agent()` options after type checks (engine.md 1.2).
#[derive(Clone, Debug, Default)]
struct AgentOptions {
    label: Option<String>,
    phase: Option<String>,
    schema: Option<Value>,
    model: Option<String>,
    tier: Option<String>,
    mode: Option<String>,
    config_options: Vec<(String, Value)>,
    agent_type: Option<String>,
    isolation: Option<String>,
    cwd: Option<String>,
    mcp_servers: Option<Value>,
    images: Option<Value>,
    meta: Option<Value>,
    prompt_meta: Option<Value>,
    keep_session: Option<bool>,
    timeout_ms: Option<u64>,
    retries: Option<u32>,
}

impl AgentOptions {
    const KNOWN: &'static [&'static str] = &[
        "label",
        "phase",
        "schema",
        "model",
        "tier",
        "mode",
        "configOptions",
        "agentType",
        "isolation",
        "cwd",
        "mcpServers",
        "images",
        "meta",
        "promptMeta",
        "keepSession",
        "timeoutMs",
        "retries",
    ];

    fn parse(value: &Value) -> Result<AgentOptions, String> {
        let Some(map) = value.as_object() else {
            return Err("agent() options must be an object".into());
        };
        if let Some(unknown) = map.keys().find(|key| !Self::KNOWN.contains(&key.as_str())) {
            return Err(format!(
                "agent() option {unknown:?} is not known; known options: {}",
                Self::KNOWN.join(", ")
            ));
        }
        let string = |key: &str| -> Result<Option<String>, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) if !text.trim().is_empty() => Ok(Some(text.clone())),
                Some(_) => Err(format!("agent() option {key} must be a non-empty string")),
            }
        };
        let object = |key: &str| -> Result<Option<Value>, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(value @ Value::Object(_)) => Ok(Some(value.clone())),
                Some(_) => Err(format!("agent() option {key} must be an object")),
            }
        };
        let array = |key: &str| -> Result<Option<Value>, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(value @ Value::Array(_)) => Ok(Some(value.clone())),
                Some(_) => Err(format!("agent() option {key} must be an array")),
            }
        };
        let schema = object("schema")?;
        if let Some(schema) = &schema {
            schema::check_schema(schema)
                .map_err(|e| format!("agent() option schema is not a valid JSON Schema: {e}"))?;
        }
        let mut config_options = Vec::new();
        if let Some(options) = object("configOptions")? {
            for (id, value) in options.as_object().into_iter().flatten() {
                if id == "model" {
                    return Err(
                        "agent() option configOptions may not set \"model\"; use the model option"
                            .into(),
                    );
                }
                if !(value.is_string() || value.is_boolean()) {
                    return Err(format!(
                        "agent() option configOptions.{id} must be a string or a boolean"
                    ));
                }
                config_options.push((id.clone(), value.clone()));
            }
            config_options.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let isolation = string("isolation")?;
        if let Some(isolation) = &isolation
            && isolation != "worktree"
        {
            return Err(format!(
                "agent() option isolation must be \"worktree\", got {isolation:?}"
            ));
        }
        let cwd = string("cwd")?;
        if let Some(cwd) = &cwd
            && !cwd.starts_with('/')
        {
            return Err(format!(
                "agent() option cwd must be an absolute path, got {cwd:?}"
            ));
        }
        let timeout_ms = match map.get("timeoutMs") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().filter(|ms| *ms > 0).ok_or(
                "agent() option timeoutMs must be a positive whole number of milliseconds",
            )?),
        };
        let retries = match map.get("retries") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .filter(|n| *n <= 3)
                    .ok_or("agent() option retries must be a whole number from 0 to 3")?
                    as u32,
            ),
        };
        let keep_session = match map.get("keepSession") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(flag)) => Some(*flag),
            Some(_) => return Err("agent() option keepSession must be a boolean".into()),
        };
        Ok(AgentOptions {
            label: string("label")?,
            phase: string("phase")?,
            schema,
            model: string("model")?,
            tier: string("tier")?,
            mode: string("mode")?,
            config_options,
            agent_type: string("agentType")?,
            isolation,
            cwd,
            mcp_servers: array("mcpServers")?,
            images: array("images")?,
            meta: object("meta")?,
            prompt_meta: object("promptMeta")?,
            keep_session,
            timeout_ms,
            retries,
        })
    }
}

/// One agent call executing on a tokio task.
struct AgentTask {
    index: u32,
    label: String,
    spec: SessionSpec,
    prompt: Vec<Value>,
    prompt_meta: Option<Value>,
    schema: Option<Value>,
    timeout: Duration,
    retries: u32,
    runner: Arc<dyn AgentRunner>,
    cancel: CancellationToken,
    activity: mpsc::UnboundedSender<Activity>,
    broker: PermissionBroker,
    run_id: RunId,
    semaphore: Arc<Semaphore>,
    gate_closed: Arc<AtomicBool>,
    dry_run: bool,
}

impl AgentTask {
    async fn run(self) {
        let index = self.index;
        let activity = self.activity.clone();
        let result = self.execute().await;
        let _ = activity.send(Activity::Done(index, result));
    }

    async fn execute(self) -> TaskResult {
        let permit = tokio::select! {
            permit = self.semaphore.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return TaskResult::Interrupted,
            },
            _ = self.cancel.cancelled() => return TaskResult::Interrupted,
        };
        if self.gate_closed.load(Ordering::SeqCst) {
            return TaskResult::Interrupted;
        }
        let _ = self.activity.send(Activity::Started(self.index));
        let result = if self.dry_run {
            self.fabricate()
        } else {
            self.attempts().await
        };
        drop(permit);
        result
    }

    fn fabricate(&self) -> TaskResult {
        let value = match &self.schema {
            Some(schema) => schema::fabricate(schema),
            None => Value::String(format!("[dry-run] mock output for {}", self.label)),
        };
        TaskResult::Value {
            value,
            usage: Usage {
                input_tokens: 750,
                output_tokens: 250,
                total_tokens: 1000,
                cost_usd: None,
            },
            attempts: 1,
            session: None,
        }
    }

    async fn attempts(&self) -> TaskResult {
        let mut usage = Usage::default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(&mut usage).await {
                Ok((value, session)) => {
                    return TaskResult::Value {
                        value,
                        usage,
                        attempts: attempt,
                        session,
                    };
                }
                Err(failure) => {
                    let code = failure.code();
                    match failure {
                        AttemptFailure::Agent(agent)
                            if agent.kind == FailureKind::Cancelled
                                || self.cancel.is_cancelled() =>
                        {
                            return TaskResult::Null {
                                code: "AGENT_CANCELLED".into(),
                                message: "cancelled".into(),
                                usage,
                                attempts: attempt,
                            };
                        }
                        AttemptFailure::Agent(agent) if agent.kind == FailureKind::AuthRequired => {
                            return TaskResult::Pause {
                                reason: PauseReason::AuthRequired,
                                code,
                                message: agent.message,
                                auth_context: agent.auth_context,
                                reset_hint: None,
                                session: None,
                                usage,
                                attempts: attempt,
                            };
                        }
                        AttemptFailure::Agent(agent) if agent.kind == FailureKind::UsageLimit => {
                            return TaskResult::Pause {
                                reason: PauseReason::UsageLimit,
                                code,
                                message: agent.message,
                                auth_context: None,
                                reset_hint: agent.reset_hint,
                                session: None,
                                usage,
                                attempts: attempt,
                            };
                        }
                        AttemptFailure::Agent(agent)
                            if matches!(
                                agent.kind,
                                FailureKind::Refusal | FailureKind::Truncated
                            ) =>
                        {
                            return TaskResult::Throw {
                                code,
                                message: agent.message,
                                usage,
                                attempts: attempt,
                            };
                        }
                        AttemptFailure::Schema(message) => {
                            return TaskResult::Throw {
                                code,
                                message,
                                usage,
                                attempts: attempt,
                            };
                        }
                        other => {
                            if attempt > self.retries {
                                return TaskResult::Null {
                                    code,
                                    message: other.message(),
                                    usage,
                                    attempts: attempt,
                                };
                            }
                            tracing::info!(run = %self.run_id, call = self.index, "attempt {attempt} failed ({code}); retrying");
                        }
                    }
                }
            }
        }
    }

    async fn attempt(&self, usage: &mut Usage) -> Result<(Value, Option<Value>), AttemptFailure> {
        let observer = Arc::new(CallObserver {
            index: self.index,
            activity: self.activity.clone(),
            broker: self.broker.clone(),
            run_id: self.run_id.clone(),
            label: self.label.clone(),
            cancel: self.cancel.clone(),
        });
        let mut session = tokio::select! {
            opened = self.runner.open_session(self.spec.clone(), observer) => opened.map_err(AttemptFailure::Agent)?,
            _ = self.cancel.cancelled() => return Err(AttemptFailure::Agent(AgentFailure::new(FailureKind::Cancelled, "cancelled"))),
        };
        let session_ref = session.session_ref();
        let result = self.converse(session.as_mut(), usage).await;
        session.close().await;
        result.map(|value| (value, session_ref))
    }

    async fn converse(
        &self,
        session: &mut dyn crate::engine::runner::AgentSession,
        usage: &mut Usage,
    ) -> Result<Value, AttemptFailure> {
        let mut prompt = self.prompt.clone();
        if let Some(schema) = &self.schema
            && let Some(Value::Object(first)) = prompt.first_mut()
            && let Some(Value::String(text)) = first.get_mut("text")
        {
            text.push_str("\n\n");
            text.push_str(&schema::output_instructions(schema));
        }
        let mut reprompts = 0;
        loop {
            let turn = TurnRequest {
                prompt: prompt.clone(),
                meta: self.prompt_meta.clone(),
                timeout: self.timeout,
            };
            let output = session
                .prompt(turn, self.cancel.clone())
                .await
                .map_err(AttemptFailure::Agent)?;
            usage.add(&output.usage);
            let Some(schema) = &self.schema else {
                if output.text.trim().is_empty() {
                    return Err(AttemptFailure::Empty);
                }
                return Ok(Value::String(output.text));
            };
            let problem = match schema::extract_json(&output.text) {
                None => "the answer contained no JSON value".to_owned(),
                Some(value) => match schema::validate(schema, &value) {
                    Ok(()) => return Ok(value),
                    Err(error) => error,
                },
            };
            if reprompts >= SCHEMA_REPROMPTS {
                return Err(AttemptFailure::Schema(format!(
                    "{} did not return JSON matching its schema after {} re-prompts: {problem}",
                    self.label, SCHEMA_REPROMPTS
                )));
            }
            reprompts += 1;
            prompt = vec![
                json!({"type": "text", "text": schema::repair_instructions(&problem, schema)}),
            ];
        }
    }
}

enum AttemptFailure {
    Agent(AgentFailure),
    Empty,
    Schema(String),
}

impl AttemptFailure {
    fn code(&self) -> String {
        match self {
            AttemptFailure::Agent(agent) => match agent.kind {
                FailureKind::Timeout => "AGENT_TIMEOUT",
                FailureKind::Execution => "AGENT_EXECUTION_ERROR",
                FailureKind::Cancelled => "AGENT_CANCELLED",
                FailureKind::AuthRequired => "AUTH_REQUIRED",
                FailureKind::UsageLimit => "PROVIDER_USAGE_LIMIT",
                FailureKind::Refusal => "AGENT_REFUSAL",
                FailureKind::Truncated => "AGENT_TRUNCATED",
            },
            AttemptFailure::Empty => "AGENT_EMPTY_OUTPUT",
            AttemptFailure::Schema(_) => "SCHEMA_NONCOMPLIANCE",
        }
        .to_owned()
    }

    fn message(&self) -> String {
        match self {
            AttemptFailure::Agent(agent) => agent.message.clone(),
            AttemptFailure::Empty => "the agent returned no text".into(),
            AttemptFailure::Schema(message) => message.clone(),
        }
    }
}

/// Forwards a call's agent activity to the driver and its permission requests to the broker.
struct CallObserver {
    index: u32,
    activity: mpsc::UnboundedSender<Activity>,
    broker: PermissionBroker,
    run_id: RunId,
    label: String,
    cancel: CancellationToken,
}

#[async_trait]
impl AgentObserver for CallObserver {
    fn update(&self, update: AgentUpdate) {
        let _ = self.activity.send(Activity::Update(self.index, update));
    }

    async fn request_permission(&self, mut request: PermissionRequest) -> PermissionOutcome {
        request.run_id = self.run_id.to_string();
        request.call_index = self.index;
        request.label = self.label.clone();
        tokio::select! {
            outcome = self.broker.ask(request) => outcome,
            _ = self.cancel.cancelled() => PermissionOutcome::Cancelled,
        }
    }
}
