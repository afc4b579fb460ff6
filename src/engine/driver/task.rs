//! One agent call on its own tokio task: it waits for a concurrency permit, opens a session,
//! prompts (re-prompting when structured output does not match its schema), retries
//! recoverable failures, and reports its start, updates and result to the driver as
//! [`Activity`]. The dry run fabricates an answer instead. An isolated call runs its
//! attempts in a worktree of its own (`isolation`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::engine::driver::isolation::{CallIsolation, Isolated, WorktreeFailure};
use crate::engine::driver::retry::{self, RetryNotice};
use crate::engine::driver::sessions::SessionOpened;
use crate::engine::driver::trace::{AttemptTrace, CallTrace};
use crate::engine::permissions::PermissionBroker;
use crate::engine::reopen::{self, ReopenMethod, ReopenPath};
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, AgentUpdate, FailureKind,
    OutputChannel, PermissionOutcome, PermissionRequest, SessionSpec, TurnRequest,
};
use crate::engine::schema;
use crate::engine::tool_policy::{self, Denial, ToolPolicy};
use crate::model::{AuthContext, PauseReason, RunId, Usage};
use crate::prompt_cache::{Follow, Lead};
use crate::util::sync::Lock;

/// Re-prompts after structured output fails validation, before `SCHEMA_NONCOMPLIANCE`.
const SCHEMA_REPROMPTS: u32 = 2;

/// How an agent task ended.
pub(super) enum TaskResult {
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
        auth_context: Option<AuthContext>,
        reset_hint: Option<String>,
        /// When the usage limit lifts (Unix ms), if known.
        reset_at: Option<i64>,
        session: Option<Value>,
        usage: Usage,
        attempts: u32,
    },
    /// Never started (the run is halting).
    Interrupted,
}

/// What an agent task reports to the driver.
pub(super) enum Activity {
    Started(u32),
    Update(u32, AgentUpdate),
    /// The definition's tool policy denied a permission request (the tool call's title too).
    PermissionDenied(u32, Denial, Option<String>),
    /// An attempt failed and the call tries again after the notice's wait.
    Retry(u32, RetryNotice),
    /// The call's session opened (each attempt opens one).
    SessionOpened(u32, Box<SessionOpened>),
    /// The call's result, with its changes when it ran isolated and kept them.
    Done(u32, TaskResult, Option<Box<Isolated>>),
}

/// One agent call executing on a tokio task.
pub(super) struct AgentTask {
    /// The call's index, which every report names.
    pub(super) index: u32,
    /// For permission requests and schema errors.
    pub(super) label: String,
    /// The session to open: backend, model, mode, cwd, MCP servers, a session to resume.
    pub(super) spec: SessionSpec,
    /// The first turn's prompt blocks.
    pub(super) prompt: Vec<Value>,
    /// The first turn of a reopened session, when the call overrides the default.
    pub(super) continue_prompt: Option<String>,
    /// `keepSession`: the session is left open at the end, for a later reopen.
    pub(super) keep_session: bool,
    pub(super) prompt_meta: Option<Value>,
    /// Structured output: the answer must be JSON matching it.
    pub(super) schema: Option<Value>,
    /// The per-attempt limit of a turn.
    pub(super) timeout: Duration,
    /// Further attempts after a recoverable failure.
    pub(super) retries: u32,
    /// `retryDelayMs`: the wait between attempts instead of the backoff.
    pub(super) retry_delay: Option<Duration>,
    pub(super) runner: Arc<dyn AgentRunner>,
    /// Cancels this call (single-call cancel or a halt).
    pub(super) cancel: CancellationToken,
    /// Where start, updates and the result go.
    pub(super) activity: super::activity::ActivitySender,
    /// Where the agent's permission requests wait.
    pub(super) broker: PermissionBroker,
    /// The agent definition's `tools`/`disallowedTools`, applied before the broker.
    pub(super) tool_policy: Option<ToolPolicy>,
    pub(super) run_id: RunId,
    /// The run's concurrency, held while the call runs.
    pub(super) semaphore: Arc<Semaphore>,
    /// Closed once the run halts: a task that gets its permit afterwards starts nothing.
    pub(super) gate_closed: Arc<AtomicBool>,
    /// Fabricate an answer from the schema instead of asking an agent.
    pub(super) dry_run: bool,
    /// The dry run's scripted answer for this call, in place of the made-up one.
    pub(super) dry_answer: Option<Value>,
    /// The call's worktree plan when it runs isolated (never in the dry run).
    pub(super) isolation: Option<CallIsolation>,
    /// The call's span, its attempts' and their tool calls' ([`super::trace`]).
    pub(super) trace: CallTrace,
    /// The call's place in the prompt-cache hold: a lead tells it when its answer began, a
    /// follower waits before its first prompt (`crate::prompt_cache`).
    pub(super) cache_lead: Option<Arc<std::sync::Mutex<Lead>>>,
    pub(super) cache_follow: std::sync::Mutex<Option<Follow>>,
}

impl AgentTask {
    pub(super) async fn run(mut self) {
        let index = self.index;
        let activity = self.activity.clone();
        let (result, isolated) = self.execute().await;
        if let Some(lead) = &self.cache_lead {
            // A kept session's observer may still hold the lead: end it with the call.
            lead.locked().end();
        }
        result.report(&self.trace);
        let _ = activity.send(Activity::Done(index, result, isolated));
    }

    async fn execute(&mut self) -> (TaskResult, Option<Box<Isolated>>) {
        let permit = tokio::select! {
            permit = self.semaphore.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return (TaskResult::Interrupted, None),
            },
            _ = self.cancel.cancelled() => return (TaskResult::Interrupted, None),
        };
        if self.gate_closed.load(Ordering::SeqCst) {
            return (TaskResult::Interrupted, None);
        }
        let _ = self.activity.send(Activity::Started(self.index));
        let outcome = if self.dry_run {
            (self.fabricate(), None)
        } else if let Some(plan) = self.isolation.take() {
            self.isolated_attempts(plan).await
        } else {
            (self.attempts().await, None)
        };
        // The driver gives the permit back once it has counted this call's usage
        // (`driver::budget`), so no queued call starts past a limit this call reached.
        permit.forget();
        outcome
    }

    /// The attempts of an isolated call, in its own worktree: the changes are committed
    /// when the call settles with an answer, a `null` or an error, and dropped when it is
    /// cancelled, interrupted or paused (it runs again from a clean worktree).
    async fn isolated_attempts(
        &mut self,
        plan: CallIsolation,
    ) -> (TaskResult, Option<Box<Isolated>>) {
        let workspace = match plan.open().await {
            Ok(workspace) => workspace,
            Err(WorktreeFailure(message)) => {
                return (worktree_error(message, Usage::default(), 0), None);
            }
        };
        self.spec.cwd = workspace.cwd.clone();
        let result = self.attempts().await;
        if !result.keeps_changes() {
            plan.discard(workspace).await;
            return (result, None);
        }
        match plan.finish(workspace).await {
            Ok(isolated) => (result, Some(Box::new(isolated))),
            Err(WorktreeFailure(message)) => {
                let (usage, attempts) = result.spent();
                (worktree_error(message, usage, attempts), None)
            }
        }
    }

    fn fabricate(&self) -> TaskResult {
        let value = self
            .dry_answer
            .clone()
            .unwrap_or_else(|| made_up(self.schema.as_ref(), &self.label));
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
        // The last session opened, so a pause records it for the resume to reopen.
        let mut opened = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self.attempt(attempt, &mut usage, &mut opened).await {
                Ok((value, session)) => {
                    return TaskResult::Value {
                        value,
                        usage,
                        attempts: attempt,
                        session,
                    };
                }
                Err(failure) => failure,
            };
            let failure = match self.ended_by(failure, usage, attempt, &mut opened) {
                Ok(result) => return result,
                Err(retryable) => retryable,
            };
            let code = failure.code();
            if attempt > self.retries {
                return TaskResult::Null {
                    code,
                    message: failure.message(),
                    usage,
                    attempts: attempt,
                };
            }
            if !self.before_retry(attempt, code, &failure).await {
                return cancelled(usage, attempt);
            }
        }
    }

    /// What a failed attempt ends the call with, or the failure back when it is one to
    /// retry: a cancel answers `null`, credentials and usage limits pause the run (with the
    /// session opened, to reopen), refusals, truncations, unsupported options and schema
    /// failures are thrown.
    fn ended_by(
        &self,
        failure: AttemptFailure,
        usage: Usage,
        attempt: u32,
        opened: &mut Option<Value>,
    ) -> Result<TaskResult, AttemptFailure> {
        let code = failure.code();
        let agent = match failure {
            AttemptFailure::Schema(message) => {
                return Ok(TaskResult::Throw {
                    code,
                    message,
                    usage,
                    attempts: attempt,
                });
            }
            AttemptFailure::Agent(agent) => agent,
            other => return Err(other),
        };
        if agent.kind == FailureKind::Cancelled || self.cancel.is_cancelled() {
            return Ok(cancelled(usage, attempt));
        }
        let pause = |reason, auth_context, reset_hint, reset_at, opened: &mut Option<Value>| {
            TaskResult::Pause {
                reason,
                code: code.clone(),
                message: agent.message.clone(),
                auth_context,
                reset_hint,
                reset_at,
                session: opened.take(),
                usage,
                attempts: attempt,
            }
        };
        match agent.kind {
            FailureKind::AuthRequired => Ok(pause(
                PauseReason::AuthRequired,
                agent.auth_context.clone().map(|context| *context),
                None,
                None,
                opened,
            )),
            FailureKind::UsageLimit => Ok(pause(
                PauseReason::UsageLimit,
                None,
                agent.reset_hint.clone(),
                agent.reset_at,
                opened,
            )),
            FailureKind::Refusal | FailureKind::Truncated | FailureKind::Unsupported => {
                Ok(TaskResult::Throw {
                    code,
                    message: agent.message,
                    usage,
                    attempts: attempt,
                })
            }
            _ => Err(AttemptFailure::Agent(agent)),
        }
    }

    /// Reports failed attempt `attempt` as a retry and waits before the next one; `false`
    /// when the call was cancelled during the wait.
    async fn before_retry(&self, attempt: u32, code: String, failure: &AttemptFailure) -> bool {
        let retry_after = match failure {
            AttemptFailure::Agent(agent) => agent.retry_after,
            _ => None,
        };
        let wait = retry::delay(attempt, self.retry_delay, retry_after);
        tracing::info!(run = %self.run_id, call = self.index,
            "attempt {attempt} failed ({code}); retrying in {} ms", wait.as_millis());
        let notice = RetryNotice {
            attempt,
            of: self.retries + 1,
            code,
            message: failure.message(),
            wait,
        };
        let _ = self.activity.send(Activity::Retry(self.index, notice));
        retry::wait(wait, &self.cancel).await
    }

    async fn attempt(
        &self,
        number: u32,
        usage: &mut Usage,
        opened: &mut Option<Value>,
    ) -> Result<(Value, Option<Value>), AttemptFailure> {
        let trace = self.trace.attempt(number);
        let result = self.attempt_traced(trace.clone(), usage, opened).await;
        if let Some(trace) = trace {
            trace.end(result.as_ref().err().map(AttemptFailure::code).as_deref());
        }
        result
    }

    async fn attempt_traced(
        &self,
        trace: Option<Arc<AttemptTrace>>,
        usage: &mut Usage,
        opened: &mut Option<Value>,
    ) -> Result<(Value, Option<Value>), AttemptFailure> {
        let prompt_meta = match &trace {
            Some(trace) => trace.prompt_meta(self.prompt_meta.clone()),
            None => self.prompt_meta.clone(),
        };
        let observer = Arc::new(CallObserver {
            trace,
            index: self.index,
            activity: self.activity.clone(),
            broker: self.broker.clone(),
            tool_policy: self.tool_policy.clone(),
            run_id: self.run_id.clone(),
            label: self.label.clone(),
            cancel: self.cancel.clone(),
            cache_lead: self.cache_lead.clone(),
        });
        let mut session = tokio::select! {
            opened = self.runner.open_session(self.spec.clone(), observer) => opened.map_err(AttemptFailure::Agent)?,
            _ = self.cancel.cancelled() => return Err(AttemptFailure::Agent(AgentFailure::new(FailureKind::Cancelled, "cancelled"))),
        };
        let facts = SessionFacts {
            reference: session.session_ref(),
            method: session.reopen_method(),
            failure: session.reopen_failure(),
        };
        let reopenable = facts.method.is_some();
        let reopened = self.opened(facts, opened).await;
        let result = self
            .converse(session.as_mut(), usage, reopened, prompt_meta)
            .await;
        if self.keep_session || (reopenable && self.interrupted(&result)) {
            // The agent keeps the session for a later reopen; dropping it here only lets go
            // of this process's hold on it.
            drop(session);
        } else {
            session.close().await;
        }
        // The call settles with it; `opened` is kept only for an attempt that failed.
        result.map(|value| (value, opened.take()))
    }

    /// Whether the attempt was interrupted so that the call runs again and reopens this
    /// session: cancelled (a stop, a pause, a cancel) or paused for credentials or a usage
    /// limit. A session its agent can reopen is then left open rather than closed.
    fn interrupted(&self, result: &Result<Value, AttemptFailure>) -> bool {
        self.cancel.is_cancelled()
            || matches!(result, Err(AttemptFailure::Agent(agent))
                if matches!(agent.kind, FailureKind::AuthRequired | FailureKind::UsageLimit))
    }

    /// Tells the driver the session opened (its reference with the reopen path, kept in
    /// `opened` for a pause to record; a session its agent can reopen is journaled by the
    /// driver). Whether the call's requested session was reopened.
    async fn opened(&self, facts: SessionFacts, opened: &mut Option<Value>) -> bool {
        let SessionFacts {
            reference,
            method,
            failure,
        } = facts;
        let path = self
            .spec
            .resume_session
            .as_deref()
            .map(|requested| ReopenPath::of(requested, reference.as_ref(), method, failure));
        let mut recorded = reference.clone();
        if let (Some(path), Some(recorded)) = (&path, recorded.as_mut()) {
            path.annotate(recorded);
        }
        opened.clone_from(&recorded);
        let reopened = path.as_ref().is_some_and(ReopenPath::is_reopened);
        let journal = match reference {
            Some(reference) if method.is_some() && !self.dry_run => {
                Some((reference, self.spec.cwd.to_string_lossy().into_owned()))
            }
            _ => None,
        };
        let report = SessionOpened {
            session: recorded,
            path,
            journal,
        };
        let _ = self
            .activity
            .send(Activity::SessionOpened(self.index, Box::new(report)));
        reopened
    }

    async fn converse(
        &self,
        session: &mut dyn AgentSession,
        usage: &mut Usage,
        reopened: bool,
        prompt_meta: Option<Value>,
    ) -> Result<Value, AttemptFailure> {
        let mut prompt = if reopened {
            reopen::continuation_turn(self.continue_prompt.as_deref())
        } else {
            self.prompt.clone()
        };
        let channel = session.output_channel();
        if let Some(schema) = &self.schema
            && let Some(Value::Object(first)) = prompt.first_mut()
            && let Some(Value::String(text)) = first.get_mut("text")
        {
            text.push_str("\n\n");
            text.push_str(&match channel {
                Some(OutputChannel::Tool(tool)) => schema::tool_instructions(tool),
                None => schema::output_instructions(schema),
            });
        }
        if !reopened {
            // A reopened session's continuation does not resend the shared prompt.
            self.wait_for_cache_lead().await;
        }
        let mut reprompts = 0;
        loop {
            // A turn that needs another prompt builds its own below.
            let turn = TurnRequest {
                prompt: std::mem::take(&mut prompt),
                meta: prompt_meta.clone(),
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
            if let Some(value) = session.take_output() {
                return Ok(value);
            }
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
            let repair = match channel {
                Some(OutputChannel::Tool(tool)) => {
                    schema::tool_repair_instructions(&problem, tool, schema)
                }
                None => schema::repair_instructions(&problem, schema),
            };
            prompt = vec![json!({"type": "text", "text": repair})];
        }
    }
}

impl AgentTask {
    /// A follower of the prompt-cache hold waits, once, before its first prompt, with status
    /// saying what for; its session is already open, so the wait overlaps the start-up.
    async fn wait_for_cache_lead(&self) {
        let Some(mut follow) = self.cache_follow.locked().take() else {
            return;
        };
        self.activity.send_update(
            self.index,
            AgentUpdate::SlotWait(Some(format!(
                "call {}'s answer to begin, so the provider caches the prompt both begin with (at most {} ms)",
                follow.lead(),
                follow.hold().as_millis()
            ))),
        );
        tokio::select! {
            _ = follow.wait() => {}
            _ = self.cancel.cancelled() => {}
        }
        self.activity
            .send_update(self.index, AgentUpdate::SlotWait(None));
    }
}

/// What an attempt learned of the session it opened, read before any wait (a session is
/// not `Sync`).
struct SessionFacts {
    reference: Option<Value>,
    method: Option<ReopenMethod>,
    failure: Option<String>,
}

/// A call cancelled (alone, or by a halt): the script gets `null`.
fn cancelled(usage: Usage, attempts: u32) -> TaskResult {
    TaskResult::Null {
        code: "AGENT_CANCELLED".into(),
        message: "cancelled".into(),
        usage,
        attempts,
    }
}

/// An isolated call whose worktree failed: thrown into the script (catchable), with what
/// the agent spent.
fn worktree_error(message: String, usage: Usage, attempts: u32) -> TaskResult {
    TaskResult::Throw {
        code: "WORKTREE_ERROR".into(),
        message,
        usage,
        attempts,
    }
}

impl TaskResult {
    /// Whether an isolated call that ended so keeps what it changed: it settled on its own
    /// (not cancelled, interrupted or paused to run again).
    fn keeps_changes(&self) -> bool {
        match self {
            TaskResult::Value { .. } | TaskResult::Throw { .. } => true,
            TaskResult::Null { code, .. } => code != "AGENT_CANCELLED",
            TaskResult::Pause { .. } | TaskResult::Interrupted => false,
        }
    }

    /// Ends the call's span and counts its metrics from how it ended.
    fn report(&self, trace: &CallTrace) {
        let (status, code) = match self {
            TaskResult::Value { .. } => ("ok", None),
            TaskResult::Null { code, .. } => ("null", Some(code.as_str())),
            TaskResult::Throw { code, .. } => ("error", Some(code.as_str())),
            TaskResult::Pause { code, .. } => ("paused", Some(code.as_str())),
            TaskResult::Interrupted => ("interrupted", None),
        };
        let (usage, _) = self.spent();
        trace.end(status, code, &usage);
    }

    /// The usage and attempts the result reports.
    fn spent(&self) -> (Usage, u32) {
        match self {
            TaskResult::Value {
                usage, attempts, ..
            }
            | TaskResult::Null {
                usage, attempts, ..
            }
            | TaskResult::Throw {
                usage, attempts, ..
            }
            | TaskResult::Pause {
                usage, attempts, ..
            } => (*usage, *attempts),
            TaskResult::Interrupted => (Usage::default(), 0),
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
                FailureKind::Unsupported => "AGENT_OPTION_UNSUPPORTED",
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
    /// The attempt's span: the tool calls the agent reports get spans under it.
    trace: Option<Arc<AttemptTrace>>,
    /// The call the updates belong to.
    index: u32,
    activity: super::activity::ActivitySender,
    broker: PermissionBroker,
    /// Denies what the agent definition does not allow before anyone is asked.
    tool_policy: Option<ToolPolicy>,
    /// Stamped on permission requests, with `index` and `label`.
    run_id: RunId,
    label: String,
    /// A cancelled call's pending permission request is answered `Cancelled`.
    cancel: CancellationToken,
    /// The call leads its prompt's cache hold: told at the answer's first output.
    cache_lead: Option<Arc<std::sync::Mutex<Lead>>>,
}

#[async_trait]
impl AgentObserver for CallObserver {
    fn update(&self, update: AgentUpdate) {
        if let Some(lead) = &self.cache_lead
            && matches!(
                update,
                AgentUpdate::MessageChunk(_)
                    | AgentUpdate::ThoughtChunk(_)
                    | AgentUpdate::ToolCall { .. }
                    | AgentUpdate::Plan(_)
            )
        {
            // The model is answering: it has read the prompt, so its prefix is cached.
            lead.locked().began();
        }
        if let (Some(trace), AgentUpdate::ToolCall { id, status, .. }) = (&self.trace, &update) {
            trace.tool_call(id, status.as_deref());
        }
        self.activity.send_update(self.index, update);
    }

    async fn request_permission(&self, mut request: PermissionRequest) -> PermissionOutcome {
        if let Some(denial) = self
            .tool_policy
            .as_ref()
            .and_then(|policy| policy.check(&request.tool_call))
        {
            let title = request.tool_call.get("title").and_then(Value::as_str);
            let denied = Activity::PermissionDenied(self.index, denial, title.map(str::to_owned));
            let _ = self.activity.send(denied);
            return tool_policy::deny_outcome(&request.options);
        }
        request.run_id = self.run_id.to_string();
        request.call_index = self.index;
        request.label = self.label.clone();
        tokio::select! {
            outcome = self.broker.ask(request) => outcome,
            _ = self.cancel.cancelled() => PermissionOutcome::Cancelled,
        }
    }
}

/// The dry run's made-up answer of a call: a value from its schema, or a line naming it.
pub(super) fn made_up(schema: Option<&Value>, label: &str) -> Value {
    match schema {
        Some(schema) => schema::fabricate(schema),
        None => Value::String(format!("[dry-run] mock output for {label}")),
    }
}
