//! MCP tasks: a tool call answered with a task the client polls, in both eras.
//!
//! - **2025-11-25** (experimental core tasks): the server declares `capabilities.tasks` with
//!   `requests.tools.call`; a `tools/call` with `params.task` (`{ttl?}`) is answered with
//!   `{task}`; `tasks/get`, `tasks/result` (blocks until terminal, sending the task's input
//!   requests to the client on its own response stream), `tasks/list` and `tasks/cancel`
//!   follow, and `notifications/tasks/status` goes to the session that created the task.
//! - **2026-07-28** (the `io.modelcontextprotocol/tasks` extension, SEP-2663): a request whose
//!   client capabilities carry the extension may be answered with a flat `CreateTaskResult`
//!   (`resultType: "task"`); `tasks/get` inlines `result`, `error` or `inputRequests`,
//!   `tasks/update` delivers `inputResponses`, and `tasks/cancel` acknowledges with an empty
//!   result. `tasks/result` and `tasks/list` do not exist there (-32601).
//!
//! The core owns the wire (`wire.rs`); what a task *is* lives behind [`TaskHandler`], which a
//! server implements: the workflow server maps tasks onto durable runs, the conformance
//! fixture and tests use the in-memory [`MemoryTasks`] (`memory.rs`). Clients that declare
//! neither tasks capability see nothing of this: no capability, no `execution` field on
//! tools, and every call answered as before.

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::context::{McpError, McpResult, RequestContext, codes};

mod memory;
pub(super) mod wire;

pub use memory::{MemoryTasks, TaskInput, TaskJob, accepted_content};

/// The tasks extension's key under `capabilities.extensions` (2026-07-28).
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` key that ties a message to its task (2025-11-25).
pub(crate) const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The longest `ttl` a client may ask for: one week. A larger one is refused with -32602
/// naming the limit, so a client never believes a task lives longer than it will.
pub(crate) const MAX_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The poll interval suggested to clients.
pub(crate) const DEFAULT_POLL_INTERVAL_MS: u64 = 500;

/// Whether a tool may run as a task (`execution.taskSupport`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskSupport {
    /// Never a task; the spec's default, so nothing is written.
    #[default]
    Forbidden,
    Optional,
    /// Only as a task: a client that cannot take one is refused.
    Required,
}

impl TaskSupport {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// A task's status, the same five words in both eras.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// How a terminal task ended: the underlying request's result (a tool error result
/// included: that is `completed`), or a protocol error (`failed`).
#[derive(Clone, Debug, PartialEq)]
pub enum TaskOutcome {
    Result(Value),
    Error(McpError),
}

/// One task as a handler reports it; the core shapes it for the era.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskState {
    pub task_id: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: i64,
    pub last_updated_at_ms: i64,
    /// How long the task is kept after creation; `None` for as long as the server keeps
    /// what it stands for (a durable run's retention).
    pub ttl_ms: Option<u64>,
    pub poll_interval_ms: u64,
    /// Pending input requests by server-minted key: `{method, params}` each
    /// (`elicitation/create` with a form). Empty unless `input_required`.
    pub input_requests: Map<String, Value>,
    /// Set once terminal.
    pub outcome: Option<TaskOutcome>,
}

/// A task-augmented `tools/call`, as the core hands it to [`TaskHandler::create`].
#[derive(Clone, Debug)]
pub struct TaskCall {
    pub name: String,
    pub arguments: Value,
    /// The `ttl` the client asked for (2025 `params.task.ttl`), checked against
    /// [`MAX_TTL_MS`].
    pub ttl_ms: Option<u64>,
    /// `params.inputResponses` of a 2026-07-28 multi-round-trip call, if any.
    pub input_responses: Option<Value>,
}

/// What [`TaskHandler::create`] made of a call.
#[derive(Clone, Debug)]
pub enum Created {
    /// A task now exists (durably, so a `tasks/get` at once finds it).
    Task(TaskState),
    /// The call is answered synchronously instead (an action that is not a job, or an
    /// immediate result): the core sends this result as is.
    Answer(Value),
}

/// One page of `tasks/list`.
#[derive(Clone, Debug, Default)]
pub struct TaskPage {
    pub tasks: Vec<TaskState>,
    pub next_cursor: Option<String>,
}

/// What a server implements to back tasks. Every method gets the request's context, so a
/// handler can scope tasks to their creator (a principal, a session).
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// Whether `tool` may run as a task. Tools of the registry answer from their
    /// registration; this is asked for the others.
    fn task_support(&self, _tool: &str) -> TaskSupport {
        TaskSupport::Forbidden
    }

    /// Starts `call` as a task, or answers it at once.
    async fn create(&self, ctx: &RequestContext, call: TaskCall) -> McpResult<Created>;

    /// The task's state; an unknown (or expired, or foreign) id is -32602.
    async fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState>;

    /// Asks the task to stop and returns its state after the request; a terminal task is
    /// returned unchanged (the 2025 wire refuses that, the core decides).
    async fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState>;

    /// The caller's tasks, newest first.
    async fn list(&self, ctx: &RequestContext, cursor: Option<&str>) -> McpResult<TaskPage>;

    /// Answers pending input requests by key. A key that is not pending (unknown, or
    /// answered already: the first answer wins) is ignored; an answer the task refuses is
    /// -32602 naming the key.
    async fn answer(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> McpResult<()>;

    /// Resolves once the task's state differs from `seen` (status, input requests or
    /// outcome), or the request is cancelled. The default polls `get` at the task's poll
    /// interval; a handler that can be told of changes overrides it.
    async fn changed(&self, ctx: &RequestContext, seen: &TaskState) -> McpResult<TaskState> {
        loop {
            let interval = std::time::Duration::from_millis(seen.poll_interval_ms.max(50));
            tokio::select! {
                () = ctx.cancel.cancelled() => {
                    return Err(McpError::internal("the request was cancelled"));
                }
                () = tokio::time::sleep(interval) => {}
            }
            let now = self.get(ctx, &seen.task_id).await?;
            if now.status != seen.status
                || now.input_requests != seen.input_requests
                || now.outcome != seen.outcome
            {
                return Ok(now);
            }
        }
    }
}

/// Whether the client declared task support in this request's era: `capabilities.tasks`
/// from initialize (2025), or the extension in the request's capabilities (2026-07-28).
pub(crate) fn client_speaks_tasks(ctx: &RequestContext) -> bool {
    if ctx.era.is_modern() {
        ctx.client_has(&["extensions", TASKS_EXTENSION])
    } else {
        ctx.client_has(&["tasks"])
    }
}

/// The refusal of a task method or a task-only tool to a client without the extension
/// (2026-07-28: -32021 with the capability it needs).
pub(crate) fn missing_extension(what: &str) -> McpError {
    McpError::new(
        codes::MISSING_CAPABILITY,
        format!("{what} needs the client capability extensions[{TASKS_EXTENSION:?}]"),
    )
    .with_data(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}))
}

/// -32602 for a task id the handler does not know.
pub(crate) fn unknown_task(task_id: &str) -> McpError {
    McpError::invalid_params(format!("unknown task {task_id:?}"))
        .with_data(json!({"taskId": task_id}))
}

/// The params of a 2025-11-25 `notifications/tasks/status`: the task as `tasks/get` answers
/// it, for a handler that sends the notifications itself.
pub(crate) fn legacy_status_notification(state: &TaskState) -> Value {
    wire::legacy_task(state)
}

/// An `elicitation/create` form request for a task's input, as both eras carry it.
pub fn form_request(message: &str, schema: Value) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    })
}

#[cfg(test)]
mod tests;
