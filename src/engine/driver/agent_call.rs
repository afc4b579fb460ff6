//! `agent()` calls: the checks, the index and label, the route, the call's identity, and then
//! either a replay of a recorded row or a live agent task under the run's concurrency.
//!
//! A live task's first step is polled here, on the driver's own task, and the task is spawned
//! only if that step waits: a runner that answers at once (the instant runner, a replay-like
//! answer) then costs no hand-off to another task.

use std::future::Future;
use std::path::PathBuf;
use std::task::{Context, Waker};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::driver::options::{AgentOptions, CallPayload};
use crate::engine::driver::progress::Progress;
use crate::engine::driver::sessions::CallSession;
use crate::engine::driver::task::AgentTask;
use crate::engine::driver::{Driver, DryCall, InFlight};
use crate::engine::effort::Effort;
use crate::engine::events::Fields;
use crate::engine::journal::{self, AgentIdentity, ReplayDecision};
use crate::engine::preview;
use crate::engine::reopen::CallIdentity;
use crate::engine::routing::{self, AgentDefinition, Route, RouteRequest};
use crate::engine::runner::{BackendOrigin, BackendSpec, SessionSpec};
use crate::engine::status::LiveCall;
use crate::engine::tool_policy::ToolPolicy;
use crate::engine::vm::VmReply;
use crate::model::{CallKind, CallOrigin, CallOutcome, CallRecord, LiveReason, ReplayInfo, Usage};
use crate::prompt_cache::{Follow, Lead, PrefixKey, Turn};
use crate::util::sync::Lock;

/// One `agent()` call after its checks, routed and identified: what a replay or an agent
/// task is made from.
struct AgentCall {
    call_id: u64,
    scope: String,
    index: u32,
    prompt: String,
    path: Option<String>,
    options: AgentOptions,
    phase: Option<String>,
    label: String,
    /// The `agentType` definition, when the call names one.
    definition: Option<AgentDefinition>,
    route: Route,
    hash: String,
    inputs_hash: String,
    cwd: PathBuf,
    /// `isolated()`'s request for the call's changes with its answer: the diff's bound.
    outcome: Option<usize>,
    /// The bytes of its payload (`VmEvent::Call`'s weight), held until it settles.
    weight: usize,
}

/// What a call that runs live carries over from the journal.
#[derive(Default)]
struct LiveStart {
    /// Rows of earlier generations the new row supersedes.
    supersedes: Vec<(u32, u32)>,
    /// A recorded session of this same call to reopen, or why there is none to.
    session: CallSession,
    /// Why it runs live, in a generation that could have replayed it.
    reason: Option<LiveReason>,
}

impl Driver {
    /// `weight`: the bytes of the call's payload, held while the call runs.
    pub(super) async fn on_agent_call(&mut self, call_id: u64, payload: Value, weight: usize) {
        let Some(mut call) = self.plan_agent_call(call_id, payload) else {
            return;
        };
        call.weight = weight;
        let mut live = LiveStart::default();
        // Replay, and reopening a recorded session: only root calls of a resumed run.
        if call.scope == "root" && !self.dry() {
            if !self.setup.pool.is_empty() {
                match self.setup.pool.decide(
                    CallKind::Agent,
                    call.path.as_deref(),
                    &call.hash,
                    Some(&call.inputs_hash),
                ) {
                    ReplayDecision::Replay { row, match_kind } => {
                        self.replay(&call, row, match_kind).await;
                        return;
                    }
                    ReplayDecision::Live(reason) => {
                        tracing::debug!(run = %self.setup.run_id, index = call.index, ?reason, "call runs live");
                        live.reason = Some(self.setup.pool.live_reason(
                            reason,
                            &call.hash,
                            call.path.as_deref(),
                        ));
                        live.supersedes = self.setup.pool.superseded_by_live(
                            CallKind::Agent,
                            call.path.as_deref(),
                            &call.hash,
                        );
                    }
                }
            }
            let identity = CallIdentity {
                path: call.path.as_deref(),
                hash: &call.hash,
                inputs_hash: &call.inputs_hash,
            };
            // A rerun starts afresh: its recorded session holds the answer it redoes.
            if live.reason != Some(LiveReason::Rerun) {
                live.session = self.continuation_session(identity, call.options.isolated);
            }
        }
        if !self.budget_admits() {
            return;
        }
        self.start_agent(call, live);
    }

    /// Checks, numbers, labels, routes and identifies a call; `None` when it was rejected.
    fn plan_agent_call(&mut self, call_id: u64, payload: Value) -> Option<AgentCall> {
        let CallPayload {
            scope,
            prompt,
            path,
            options,
            outcome,
        } = CallPayload::parse(payload);
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
            return None;
        }
        // Every call the script makes counts, refused ones too: the prelude counts the same
        // way and refuses the one past the limit before it crosses.
        self.agent_count += 1;
        let options = match self.checked_options(&options, outcome.is_some()) {
            Ok(options) => options,
            Err(message) => {
                self.reject(call_id, "SCRIPT_VALIDATION_ERROR", message, false);
                return None;
            }
        };
        // A nested workflow's call is numbered in its scope (its default label says so) and
        // keyed apart from the root's calls while it runs.
        let number = self.take_index(&scope);
        let index = if scope == "root" {
            number
        } else {
            self.take_nested_key()
        };
        let phase = options.phase.clone().or_else(|| self.current_phase(&scope));
        let label = options.label.clone().unwrap_or_else(|| match &phase {
            Some(phase) => format!("{phase} agent {number}"),
            None => format!("agent {number}"),
        });
        let definition = options
            .agent_type
            .as_ref()
            .and_then(|name| self.setup.routing.agents.get(name))
            .cloned();
        let route = self.route_agent_call(call_id, index, &label, phase.as_deref(), &options)?;
        let mut call = AgentCall {
            call_id,
            scope,
            index,
            prompt,
            path,
            options,
            phase,
            label,
            definition,
            route,
            hash: String::new(),
            inputs_hash: String::new(),
            cwd: PathBuf::new(),
            outcome,
            weight: 0,
        };
        self.identify(&mut call);
        Some(call)
    }

    /// The call's options after their checks, with a definition's `isolation: worktree`
    /// folded into `isolated`. `isolated()` (an `outcome` asked for) is an isolated call.
    fn checked_options(&self, options: &Value, outcome: bool) -> Result<AgentOptions, String> {
        let mut options = AgentOptions::parse(options)?;
        if let Some(name) = &options.agent_type
            && routing::definition_isolation(name, &self.setup.routing)?
        {
            if options.cwd.is_some() {
                return Err(format!(
                    "agent() option cwd cannot be used with agent definition {name:?}, which \
                     isolates its calls in worktrees of their own"
                ));
            }
            options.isolated = true;
        }
        if outcome && !options.isolated {
            return Err(
                "isolated() runs its call in a worktree: leave isolation out or set \
                 it to \"worktree\""
                    .into(),
            );
        }
        Ok(options)
    }

    /// The call's route; a call without one is rejected, except in the dry run, which
    /// records it and carries on unrouted.
    fn route_agent_call(
        &mut self,
        call_id: u64,
        index: u32,
        label: &str,
        phase: Option<&str>,
        options: &AgentOptions,
    ) -> Option<Route> {
        let route_request = RouteRequest {
            model: options.model.as_deref(),
            agent_type: options.agent_type.as_deref(),
            tier: options.tier.as_deref(),
            phase,
            meta_model: self.setup.meta_model.as_deref(),
        };
        let route = routing::resolve(
            &route_request,
            &self.setup.phases,
            &self.setup.routing,
            self.setup.backends.as_ref(),
        );
        if self.dry() {
            self.dry_calls.push(DryCall {
                index,
                kind: CallKind::Agent,
                label: label.to_owned(),
                phase: phase.map(str::to_owned),
                route: route.clone(),
                mode: options.mode.clone(),
                config_options: options.config_options.clone(),
                isolated: options.isolated,
                effort: options.effort,
            });
            if let Some(mock) = &self.setup.mock_answers {
                let made_up = super::task::made_up(options.schema.as_ref(), label);
                match mock.answer(label, options.schema.as_ref(), made_up) {
                    Some(Ok(answer)) => {
                        self.mock_picks.insert(index, answer);
                    }
                    Some(Err(message)) => {
                        self.reject(call_id, "SCRIPT_VALIDATION_ERROR", message, false);
                        return None;
                    }
                    None => {}
                }
            }
        }
        match route {
            Ok(route) => Some(route),
            Err(reason) if !self.dry() => {
                let names = self.setup.backends.names().join(", ");
                self.reject(
                    call_id,
                    "ROUTING_REQUIRED",
                    format!("{label}@{index} has no route: {reason}. Configured backends: {names}"),
                    false,
                );
                None
            }
            Err(_) => Some(Route {
                spec: "unrouted".into(),
                backend: BackendSpec {
                    id: "unrouted".into(),
                    command: String::new(),
                    args: vec![],
                    env: Default::default(),
                    session_meta: None,
                    structured_output_tool: true,
                    file_roots: Vec::new(),
                    origin: BackendOrigin::Builtin,
                },
                model: None,
            }),
        }
    }

    /// Fills in the call's working directory, and its identity and inputs hashes, which only
    /// rows and replay read: the dry run, which writes no row and replays nothing, leaves
    /// them empty.
    fn identify(&self, call: &mut AgentCall) {
        let options = &call.options;
        call.cwd = options
            .cwd
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.setup.cwd.clone());
        if self.dry() {
            return;
        }
        call.hash = journal::agent_hash(&AgentIdentity {
            prompt: &call.prompt,
            model: Some(&call.route.spec),
            mode: options.mode.as_deref(),
            config_options: &options.config_options,
            effort: options.effort.map(Effort::name),
            tier: options.tier.as_deref(),
            phase: call.phase.as_deref(),
            agent_type: options.agent_type.as_deref(),
            agent_definition: call.definition.as_ref().map(|d| d.digest.as_str()),
            schema: options.schema.as_ref(),
        });
        let backend_digest = (call.route.backend.origin == BackendOrigin::Script).then(|| {
            crate::util::sha256_hex(
                serde_json::to_string(&call.route.backend)
                    .unwrap_or_default()
                    .as_bytes(),
            )
        });
        // The canonical JSON of `{cwd, isolation, keepSession, images, mcpServers, meta,
        // promptMeta, label, backends}`, its keys in ascending order; only `isolated()` adds
        // `outcome`, so every other call's hash stays what it was.
        let mut inputs = journal::CanonicalObject::new();
        inputs.scalar("backends", &backend_digest);
        inputs.scalar("cwd", &call.cwd.to_string_lossy());
        inputs.value("images", options.images.as_ref());
        inputs.scalar("isolation", &options.isolated.then_some("worktree"));
        inputs.scalar("keepSession", &options.keep_session);
        inputs.scalar("label", &call.label);
        inputs.value("mcpServers", options.mcp_servers.as_ref());
        inputs.value("meta", options.meta.as_ref());
        if let Some(bytes) = call.outcome {
            inputs.value("outcome", Some(&json!({ "diffBytes": bytes })));
        }
        inputs.value("promptMeta", options.prompt_meta.as_ref());
        call.inputs_hash = inputs.hash();
    }

    /// Starts the call as an agent task, shown as queued until it holds a permit.
    fn start_agent(&mut self, mut call: AgentCall, live: LiveStart) {
        let cancel = CancellationToken::new();
        // The task takes the prompt: the call keeps nothing that needs it, and a prompt may
        // weigh megabytes.
        let prompt = std::mem::take(&mut call.prompt);
        let mut task = self.agent_task(
            &call,
            prompt,
            live.session.reopening.clone(),
            cancel.clone(),
        );
        task.dry_answer = self.mock_picks.remove(&call.index);
        let route = &call.route;
        let model_shown = route.model.clone().or_else(|| Some(route.spec.clone()));
        self.setup.live.locked().calls.insert(
            call.index,
            LiveCall {
                label: call.label.clone(),
                phase: call.phase.clone(),
                model: model_shown,
                backend_id: Some(route.backend.id.clone()),
                state: "queued",
                waiting_for: None,
                timeout_ms: task.timeout.as_millis() as u64,
                attempt: 1,
            },
        );
        self.held_bytes += call.weight;
        self.in_flight.insert(
            call.index,
            InFlight {
                call_id: call.call_id,
                held: call.weight,
                kind: CallKind::Agent,
                scope: call.scope,
                label: call.label,
                phase: call.phase,
                hash: call.hash,
                path: call.path,
                inputs_hash: Some(call.inputs_hash),
                route: Some(call.route),
                supersedes: live.supersedes,
                cancel,
                started: false,
                progress: Progress::default(),
                outcome: call.outcome.is_some(),
                session: live.session,
                live_reason: live.reason,
            },
        );
        run_or_spawn(&self.tracker, task);
    }

    /// The agent task of a call: its session (with the definition's role prompt and tool
    /// lists), its prompt blocks, timeout and retries.
    fn agent_task(
        &self,
        call: &AgentCall,
        prompt: String,
        resume_session: Option<String>,
        cancel: CancellationToken,
    ) -> AgentTask {
        let options = &call.options;
        let timeout = options
            .timeout_ms
            .map(|ms| Duration::from_millis(ms).min(self.setup.agent_timeout))
            .unwrap_or(self.setup.agent_timeout);
        let retries = options.retries.unwrap_or(self.setup.limits.agent_retries);
        let mut full_prompt = prompt;
        if let Some(definition) = &call.definition
            && !definition.role_prompt.is_empty()
        {
            full_prompt = format!("{}\n\n{}", definition.role_prompt, full_prompt);
        }
        let tool_policy = call.definition.as_ref().and_then(ToolPolicy::of);
        let meta = match &tool_policy {
            Some(policy) => Some(policy.session_meta(
                options.meta.clone(),
                call.route.backend.origin == BackendOrigin::Builtin
                    && call.route.backend.id == "claude",
            )),
            None => options.meta.clone(),
        };
        let spec = SessionSpec {
            backend: call.route.backend.clone(),
            model: call.route.model.clone(),
            mode: options.mode.clone(),
            config_options: options.config_options.clone(),
            effort: options.effort,
            cwd: call.cwd.clone(),
            mcp_servers: options.mcp_servers.clone().unwrap_or(Value::Array(vec![])),
            meta,
            output_schema: options.schema.clone(),
            resume_session,
            run_id: self.setup.run_id.to_string(),
            call_index: call.index,
            label: call.label.clone(),
        };
        let (cache_lead, cache_follow) = self.cache_turn(call, &full_prompt);
        let mut prompt_blocks = vec![json!({"type": "text", "text": full_prompt})];
        prompt_blocks.extend(options.image_blocks.iter().cloned());
        AgentTask {
            index: call.index,
            label: call.label.clone(),
            spec,
            prompt: prompt_blocks,
            prompt_meta: options.prompt_meta.clone(),
            continue_prompt: options.continue_prompt.clone(),
            keep_session: options.keep_session == Some(true),
            schema: options.schema.clone(),
            timeout,
            retries,
            retry_delay: options.retry_delay_ms.map(Duration::from_millis),
            runner: self.setup.runner.clone(),
            cancel,
            activity: self.activity_tx.clone(),
            broker: self.setup.broker.clone(),
            tool_policy,
            run_id: self.setup.run_id.clone(),
            semaphore: self.semaphore.clone(),
            gate_closed: self.gate_closed.clone(),
            dry_run: self.dry(),
            dry_answer: None,
            trace: self.trace.call(call.index, &call.label, Some(&call.route)),
            cache_lead,
            cache_follow: std::sync::Mutex::new(cache_follow),
            isolation: (options.isolated && !self.dry()).then(|| {
                self.setup.isolation.plan(
                    self.setup.run_id.as_str(),
                    call.index,
                    &call.label,
                    call.outcome,
                )
            }),
        }
    }

    /// The call's turn in the prompt-cache hold, by its backend, model and prompt text.
    #[allow(clippy::type_complexity)]
    fn cache_turn(
        &self,
        call: &AgentCall,
        prompt: &str,
    ) -> (
        Option<std::sync::Arc<std::sync::Mutex<Lead>>>,
        Option<Follow>,
    ) {
        let key = PrefixKey::of(&call.route.backend.id, call.route.model.as_deref(), prompt);
        match self.prompt_cache.enter(key, call.index) {
            Turn::Alone => (None, None),
            Turn::Lead(lead) => (Some(std::sync::Arc::new(std::sync::Mutex::new(lead))), None),
            Turn::Follow(follow) => (None, Some(follow)),
        }
    }

    /// Answers the call from recorded row `row`, re-journaled as a replay of it.
    async fn replay(&mut self, call: &AgentCall, row: usize, match_kind: &'static str) {
        self.setup.pool.consume(row);
        let source = self.setup.pool.row(row).clone();
        let value = source.result.clone().unwrap_or(Value::Null);
        let (index, label, phase, route) = (call.index, &call.label, &call.phase, &call.route);
        // No prompt, as in a live call's `agentStart`: a prompt may be built from a pack's
        // confidential texts, and the events are stored.
        let start = Fields::new()
            .text("label", label)
            .opt_text("phase", phase.as_deref())
            .text("model", &route.spec)
            .fixed("callIndex", index.into())
            .opt_text("path", call.path.as_deref())
            .fixed("replay", true.into());
        self.events.push_fields("agentStart", "root", start);
        let shown = preview::preview(&value);
        let end = Fields::new()
            .fixed("callIndex", index.into())
            .text("label", label)
            .value(
                "result",
                &json!({"preview": shown.preview, "redacted": shown.redacted, "truncated": shown.truncated}),
            )
            .fixed("replay", true.into());
        self.events.push_fields("agentEnd", "root", end);
        let record = CallRecord {
            generation: self.setup.generation,
            index,
            kind: CallKind::Agent,
            hash: source.hash.clone(),
            path: call.path.clone(),
            inputs_hash: source.inputs_hash.clone(),
            label: Some(label.clone()),
            phase: phase.clone(),
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
            changes: source.changes.clone(),
            settlement_ordinal: self.next_settlement(),
            superseded_by: None,
            live_reason: None,
        };
        self.trace
            .replayed(index, label, Some(route), &record.usage);
        let supersedes = vec![(source.generation, source.index)];
        self.tally.settled(&record);
        match self.buffer_replay(record, supersedes).await {
            Ok(()) => self.reply(VmReply::Resolve {
                call_id: call.call_id,
                value,
            }),
            Err(lost) => self.on_lost_write(lost),
        }
    }
}

/// Runs an agent task's first step here, and spawns it only if it is still waiting.
///
/// A runner that answers at once (the instant runner, the dry run's fabricated answers, a
/// call whose permit is free and whose session needs no I/O) then finishes on the driver's
/// own thread: its `Started` and `Done` activities are already queued when the driver's loop
/// looks next, so the call costs no task spawn and no two thread hand-offs. Nothing else
/// changes: the activities go through the same channel, in the same order, and the call
/// settles and commits exactly as a spawned one does.
fn run_or_spawn(tracker: &TaskTracker, task: AgentTask) {
    let mut future = Box::pin(task.run());
    // A no-op waker is enough for this one poll: a task that is not done is spawned, and a
    // spawned task is polled at once by the runtime, which registers its own waker with
    // whatever it waits on (futures re-register on every poll).
    let mut context = Context::from_waker(Waker::noop());
    if future.as_mut().poll(&mut context).is_pending() {
        tracker.spawn(future);
    }
}
