//! The `workflow` tool as MCP tasks (`docs/tasks.md`): `run` and `resume` on a task request
//! become a task whose id **is the runId**, so it needs no table of its own and survives a
//! restart or a succession like the run does; its status is read from the run's status
//! document each time it is asked for, and its lifetime is the run's retention (`ttl`
//! null). Other actions on a 2025 task request become a task that is already completed (kept
//! in memory); in 2026-07-28 they are answered at once, as SEP-2663 allows.
//!
//! Waits become `input_required`, one elicitation form per wait, keyed `checkpoint-<call>`,
//! `setup-<setupId>` and `permission-<permissionId>`. An answer is turned into the tool
//! call a client would make (`resume` with `checkpointReplies`, `setup-response`,
//! `permissions-response`) and validated by it; answers are taken one at a time and a key
//! that no longer waits is ignored, so the first answer wins.
//!
//! Status notifications (2025-11-25): the legacy session that created a run task is told of
//! each status change as `notifications/tasks/status`, once per change. Which session created
//! which run task is learnt from the MCP core's answer hook (the [`StatusNotifier`] is a
//! [`CallObserver`]), so creating a task and watching it are apart. The changes are learnt
//! from the engine's run notices (a permission request, a settlement, and the first event
//! after a wait), and after this server's own answers and cancels, which may settle a run
//! without a notice; a run driven by another process over the same store sends this engine no
//! notices, so its changes reach the session only when it reads the task. `changed` (what
//! `tasks/result` waits on) wakes on the same notices, with a slow read as the fallback for
//! such a run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::engine::events::RunNotice;
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::mcp::handler::{ServerEvent, codes};
use crate::mcp::registry::ToolHandler;
use crate::mcp::tasks::legacy_status_notification;
use crate::mcp::tasks::{
    Created, DEFAULT_POLL_INTERVAL_MS, MemoryTasks, TaskCall, TaskHandler, TaskOutcome, TaskPage,
    TaskState, TaskStatus, accepted_content, form_request, unknown_task,
};
use crate::mcp::{AnsweredCall, CallObserver, NotificationHub};
use crate::model::RunId;
use crate::tools::session_runs::SessionRuns;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::WorkflowTool;
use super::schema::TOOL_NAME;
use crate::util::sync::Lock;

/// How long an already-completed task of a non-job action is kept unless asked otherwise.
const IMMEDIATE_TTL_MS: u64 = 60 * 60 * 1000;
/// The result page size used to read a run's whole result.
const RESULT_PAGE: usize = 16384;
/// Run tasks one legacy session is told the status changes of; creating one more forgets the
/// one created longest ago (its client can still poll it).
pub(crate) const MAX_NOTIFIED_TASKS: usize = 256;
/// How often `changed` reads a task whose run sent no notice: only a run driven by another
/// process (a lame duck, another server over the store) changes that way.
const UNNOTICED_READ: Duration = Duration::from_secs(5);
/// Run tasks `tasks/list` names, newest first: each is one status read, so a long-lived
/// daemon must not name every task it ever started. Older ones stay readable by id.
pub(crate) const MAX_LISTED_TASKS: usize = 256;

/// The task handler of the workflow server.
pub(crate) struct WorkflowTasks {
    tool: Arc<WorkflowTool>,
    /// Already-completed tasks of actions that are not jobs (2025 task requests only).
    immediate: MemoryTasks,
    /// Answers are taken one at a time: the second answer to a wait sees it gone.
    answering: tokio::sync::Mutex<()>,
    /// Runs this process started as tasks, newest last, for `tasks/list`.
    started: Mutex<Vec<String>>,
    /// Who is told of which run task's status changes; shared with the notice loop.
    notifier: Arc<StatusNotifier>,
}

/// Sends `notifications/tasks/status` to the legacy sessions that created run tasks.
pub(crate) struct StatusNotifier {
    /// Status documents come from here, and the notices that say when to build one.
    engine: Engine,
    /// Where the notifications go out, addressed to one session each.
    hub: NotificationHub,
    /// Per run, per session: the status that session last saw (in the create answer or a
    /// notification).
    watching: Mutex<SessionRuns<TaskStatus>>,
    /// One evaluation at a time, so a stale read never overwrites a newer status (which
    /// would send a change back and forth).
    evaluating: tokio::sync::Mutex<()>,
}

impl WorkflowTasks {
    pub(crate) fn new(
        engine: Engine,
        tool: Arc<WorkflowTool>,
        hub: NotificationHub,
    ) -> WorkflowTasks {
        WorkflowTasks {
            tool,
            immediate: MemoryTasks::new(hub.clone()),
            answering: tokio::sync::Mutex::new(()),
            started: Mutex::new(Vec::new()),
            notifier: Arc::new(StatusNotifier {
                engine,
                hub,
                watching: Mutex::new(SessionRuns::new(MAX_NOTIFIED_TASKS)),
                evaluating: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The loop that turns engine notices into status notifications; spawn it with the
    /// notices subscribed before, so none is lost. Ends with `shutdown` or the engine.
    pub(crate) fn notify_status(
        &self,
        notices: broadcast::Receiver<RunNotice>,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.notifier.clone().run(notices, shutdown)
    }

    /// What watches the run tasks sessions create: register it with the registry's
    /// observers.
    pub(crate) fn observer(&self) -> Arc<dyn CallObserver> {
        self.notifier.clone()
    }

    /// A legacy session ended: nobody is told of its tasks any more.
    pub(crate) fn session_closed(&self, session: &str) {
        let mut watching = self.notifier.watching.locked();
        watching.session_closed(session);
    }

    /// A tool call's answer, as the era wants it on a task request.
    fn answered(&self, ctx: &RequestContext, ttl_ms: Option<u64>, answer: Value) -> Created {
        if ctx.era.is_modern() {
            Created::Answer(answer)
        } else {
            let ttl = ttl_ms.unwrap_or(IMMEDIATE_TTL_MS);
            Created::Task(
                self.immediate
                    .finished(ctx, ttl, TaskOutcome::Result(answer)),
            )
        }
    }

    /// The task a run is now, and its status document.
    async fn run_task(&self, ctx: &RequestContext, run_id: &str) -> McpResult<(TaskState, Value)> {
        let answer = self
            .tool
            .perform(ctx, json!({"action": "status", "runId": run_id}))
            .await?;
        if answer["isError"] == true {
            let text = answer_text(&answer);
            if text.starts_with("No workflow run found") || text.contains("field \"runId\"") {
                return Err(unknown_task(run_id));
            }
            return Err(McpError::internal(text));
        }
        let document = answer["structuredContent"].clone();
        let mut state = task_of(run_id, &document);
        state.outcome = match state.status {
            TaskStatus::Completed => Some(TaskOutcome::Result(self.result(ctx, run_id).await?)),
            TaskStatus::Failed => {
                let mut failure = answer.clone();
                failure["isError"] = true.into();
                Some(TaskOutcome::Result(failure))
            }
            _ => None,
        };
        Ok((state, document))
    }

    /// The run's exact result: every page of its result read and joined.
    async fn result(&self, ctx: &RequestContext, run_id: &str) -> McpResult<Value> {
        let mut text = String::new();
        let mut offset = 0;
        loop {
            let page = self
                .tool
                .perform(
                    ctx,
                    json!({"action": "result", "runId": run_id, "offset": offset, "maxBytes": RESULT_PAGE}),
                )
                .await?;
            if page["isError"] == true {
                // A completed run without a value.
                return Ok(json!({
                    "content": [{"type": "text", "text": "The run completed without a result value."}],
                    "structuredContent": {"runId": run_id, "result": null},
                }));
            }
            let document = &page["structuredContent"];
            text.push_str(document["chunk"].as_str().unwrap_or_default());
            match document["endOffset"].as_u64() {
                Some(end) if document["hasMore"] == true && end as usize > offset => {
                    offset = end as usize;
                }
                _ => break,
            }
        }
        let value: Value = serde_json::from_str(&text).map_err(|error| {
            McpError::internal(format!("run {run_id}'s result is not JSON: {error}"))
        })?;
        Ok(json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"runId": run_id, "result": value},
        }))
    }
}

#[async_trait]
impl TaskHandler for WorkflowTasks {
    async fn create(&self, ctx: &RequestContext, call: TaskCall) -> McpResult<Created> {
        if call.name != TOOL_NAME {
            return Err(McpError::invalid_params(format!(
                "unknown tool {:?}",
                call.name
            )));
        }
        let action = call.arguments.get("action").and_then(Value::as_str);
        let job = matches!(action, Some("run" | "resume"));
        let answer = self
            .tool
            .call(ctx, TOOL_NAME, &call.arguments)
            .await?
            .into_value();
        let run_id = answer
            .pointer("/structuredContent/runId")
            .and_then(Value::as_str);
        let (true, false, Some(run_id)) = (job, answer["isError"] == true, run_id) else {
            return Ok(self.answered(ctx, call.ttl_ms, answer));
        };
        remember_started(&mut self.started.locked(), run_id);
        let state = self.run_task(ctx, run_id).await?.0;
        Ok(Created::Task(state))
    }

    async fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        if self.immediate.contains(task_id) {
            return self.immediate.get(ctx, task_id);
        }
        Ok(self.run_task(ctx, task_id).await?.0)
    }

    async fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        if self.immediate.contains(task_id) {
            return self.immediate.cancel(ctx, task_id);
        }
        let (state, _) = self.run_task(ctx, task_id).await?;
        if state.status.is_terminal() {
            return Ok(state);
        }
        let stopped = self
            .tool
            .perform(ctx, json!({"action": "stop", "runId": task_id}))
            .await?;
        if stopped["isError"] == true {
            return Err(McpError::internal(answer_text(&stopped)));
        }
        // A cold stop settles without a notice.
        self.notifier.evaluate(task_id).await;
        self.get(ctx, task_id).await
    }

    async fn list(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<TaskPage> {
        let started: Vec<String> = self.started.locked().clone();
        let mut tasks = Vec::new();
        for run_id in started.iter().rev() {
            if let Ok((state, _)) = self.run_task(ctx, run_id).await {
                tasks.push(state);
            }
        }
        tasks.extend(self.immediate.list(ctx).tasks);
        Ok(TaskPage {
            tasks,
            next_cursor: None,
        })
    }

    async fn answer(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> McpResult<()> {
        if self.immediate.contains(task_id) {
            return self.immediate.answer(ctx, task_id, responses);
        }
        let _one_at_a_time = self.answering.lock().await;
        for (key, response) in responses {
            let (state, document) = self.run_task(ctx, task_id).await?;
            if !state.input_requests.contains_key(key) {
                continue;
            }
            let arguments = reply_arguments(task_id, key, response, &document)?;
            let answer = self.tool.perform(ctx, arguments).await?;
            if answer["isError"] == true {
                return Err(McpError::invalid_params(format!(
                    "inputResponses[{key:?}] was refused: {}",
                    answer_text(&answer)
                ))
                .with_data(json!({"taskId": task_id, "key": key})));
            }
            self.notifier.evaluate(task_id).await;
        }
        Ok(())
    }

    /// Wakes on the engine's notices for the run rather than reading it at every poll
    /// interval; an already-completed task of a non-job action never changes.
    async fn changed(&self, ctx: &RequestContext, seen: &TaskState) -> McpResult<TaskState> {
        if self.immediate.contains(&seen.task_id) {
            return self.immediate.changed(ctx, seen).await;
        }
        let mut notices = self.notifier.engine.subscribe();
        loop {
            // Read after subscribing, so a change just before is not missed.
            let now = self.get(ctx, &seen.task_id).await?;
            if now.status != seen.status
                || now.input_requests != seen.input_requests
                || now.outcome != seen.outcome
            {
                return Ok(now);
            }
            let deadline = tokio::time::sleep(UNNOTICED_READ);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    () = ctx.cancel.cancelled() => {
                        return Err(McpError::internal("the request was cancelled"));
                    }
                    () = &mut deadline => break,
                    notice = notices.recv() => match notice {
                        Ok(notice) if concerns(&notice, &seen.task_id, seen.status) => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => {
                            notices = self.notifier.engine.subscribe();
                        }
                    },
                }
            }
        }
    }
}

/// Whether `notice` may change the status of run `run_id`, last seen as `status`: a
/// permission request or a settlement always may; an event only ends a wait (a resumed run
/// writes one), so while working the events are not worth a status read each.
fn concerns(notice: &RunNotice, run_id: &str, status: TaskStatus) -> bool {
    match notice {
        RunNotice::Permission { run_id: id, .. } | RunNotice::Settled { run_id: id, .. } => {
            id.as_str() == run_id
        }
        RunNotice::Activity { run_id: id } | RunNotice::Event { run_id: id, .. } => {
            id.as_str() == run_id && status != TaskStatus::Working
        }
    }
}

impl StatusNotifier {
    async fn run(
        self: Arc<Self>,
        mut notices: broadcast::Receiver<RunNotice>,
        shutdown: CancellationToken,
    ) {
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => break,
                notice = notices.recv() => notice,
            };
            match notice {
                Ok(notice) => {
                    let run_id = notice.run_id();
                    if self.worth_reading(&notice, run_id) {
                        self.evaluate(run_id.as_str()).await;
                    }
                }
                // Missed notices: look at every watched run once.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let runs = self.watching.locked().runs();
                    for run_id in runs {
                        self.evaluate(run_id.as_str()).await;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }

    /// Whether some session watches `run_id` and `notice` may have changed what it saw.
    fn worth_reading(&self, notice: &RunNotice, run_id: &RunId) -> bool {
        let watching = self.watching.locked();
        watching.sessions(run_id).is_some_and(|sessions| {
            sessions
                .values()
                .any(|status| concerns(notice, run_id.as_str(), *status))
        })
    }

    /// Reads run `run_id`'s status and tells each watching session whose last seen status
    /// differs; a terminal status is the last one sent.
    async fn evaluate(&self, run_id: &str) {
        let Ok(id) = RunId::parse(run_id) else {
            return;
        };
        if !self.watching.locked().has_run(&id) {
            return;
        }
        let _one_at_a_time = self.evaluating.lock().await;
        let Ok(Ok(document)) = super::status_document(&self.engine, &id).await else {
            return;
        };
        let state = task_of(run_id, &document);
        let mut watching = self.watching.locked();
        let Some(sessions) = watching.sessions_mut(&id) else {
            return;
        };
        for (session, seen) in sessions.iter_mut() {
            if *seen != state.status {
                *seen = state.status;
                self.hub.publish(ServerEvent::ToSession {
                    session_id: session.clone(),
                    method: "notifications/tasks/status".into(),
                    params: legacy_status_notification(&state),
                });
            }
        }
        if state.status.is_terminal() {
            // A terminal run: nobody is told of it again (a resume on a task request watches
            // anew).
            watching.forget_run(&id);
        }
    }
}

impl CallObserver for StatusNotifier {
    /// A legacy session created a run task: from now on it is told of the run's status
    /// changes, starting from the status its create answer showed. A run task's id is its
    /// runId; an action answered at once as a task has an id of its own, and is not watched.
    fn answered(&self, call: &AnsweredCall<'_>) {
        let (Some(session), Some(task)) = (call.session, call.task) else {
            return;
        };
        if call.tool != TOOL_NAME || !matches!(call.action(), Some("run" | "resume")) {
            return;
        }
        let Ok(run_id) = RunId::parse(&task.task_id) else {
            return;
        };
        let mut watching = self.watching.locked();
        watching
            .name(session, &run_id)
            .and_modify(|seen| *seen = task.status)
            .or_insert(task.status);
    }
}

/// `: <which limit, the spend and the limit>` when the document's outcome says it.
fn budget_shown(document: &Value) -> String {
    document["outcome"]["budgetContext"]["message"]
        .as_str()
        .map(|message| format!(": {message}"))
        .unwrap_or_default()
}

/// The task a run's status document describes (without its outcome).
fn task_of(run_id: &str, document: &Value) -> TaskState {
    let run_status = document["status"].as_str().unwrap_or("running");
    let terminal = match run_status {
        "completed" => Some(TaskStatus::Completed),
        "failed" => Some(TaskStatus::Failed),
        "aborted" => Some(TaskStatus::Cancelled),
        _ => None,
    };
    let input_requests = if terminal.is_some() {
        Map::new()
    } else {
        waits(document)
    };
    let status = match terminal {
        Some(status) => status,
        None if !input_requests.is_empty() || run_status == "paused" => TaskStatus::InputRequired,
        None => TaskStatus::Working,
    };
    let status_message = match status {
        TaskStatus::InputRequired
            if input_requests.is_empty() && document["reason"] == "budget" =>
        {
            Some(format!(
                "run {run_id} is paused at its budget{}; continue it with the workflow tool's action \"resume\" and a higher tokenBudget or costBudgetUsd",
                budget_shown(document)
            ))
        }
        TaskStatus::InputRequired if input_requests.is_empty() => Some(format!(
            "run {run_id} is paused; continue it with the workflow tool's action \"resume\""
        )),
        _ => Some(format!("run {run_id} is {run_status}")),
    };
    let time = |key: &str| {
        document[key]
            .as_str()
            .and_then(|text| humantime::parse_rfc3339(text).ok())
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or_else(crate::util::now_ms, |since| since.as_millis() as i64)
    };
    TaskState {
        task_id: run_id.to_owned(),
        status,
        status_message,
        created_at_ms: time("startedAt"),
        last_updated_at_ms: time("updatedAt"),
        ttl_ms: None,
        poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
        input_requests,
        outcome: None,
    }
}

/// One elicitation form per wait of the run.
fn waits(document: &Value) -> Map<String, Value> {
    let mut requests = Map::new();
    if let Some(request) = document.pointer("/setup/request") {
        let id = request["id"].as_str().unwrap_or_default();
        requests.insert(
            format!("setup-{id}"),
            form_request(
                request["message"]
                    .as_str()
                    .unwrap_or("Approve the run's backends?"),
                request["requestedSchema"].clone(),
            ),
        );
    }
    for permission in document["pendingPermissions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let options: Vec<Value> = permission["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|option| option.get("optionId").cloned())
            .collect();
        let schema = json!({
            "type": "object",
            "properties": {"optionId": {"type": "string", "enum": options}},
            "required": ["optionId"],
        });
        let message = format!(
            "Call {} asks for permission: {}",
            permission["callIndex"],
            permission["label"].as_str().unwrap_or("an agent's request")
        );
        let id = permission["permissionId"].as_str().unwrap_or_default();
        requests.insert(format!("permission-{id}"), form_request(&message, schema));
    }
    if document["status"] == "paused"
        && let Some(context) = document.pointer("/outcome/checkpointContext")
    {
        let answer = match context["kind"].as_str() {
            Some("input") => json!({"type": "string"}),
            Some("select") => json!({"type": "string", "enum": context["choices"].clone()}),
            _ => json!({"type": "boolean"}),
        };
        let schema = json!({
            "type": "object",
            "properties": {"answer": answer},
            "required": ["answer"],
        });
        requests.insert(
            format!("checkpoint-{}", context["callIndex"]),
            form_request(context["prompt"].as_str().unwrap_or("Continue?"), schema),
        );
    }
    requests
}

/// The `workflow` call that gives `response` to the wait `key`.
fn reply_arguments(
    run_id: &str,
    key: &str,
    response: &Value,
    document: &Value,
) -> McpResult<Value> {
    let refuse = |what: &str| {
        Err(McpError::new(
            codes::INVALID_PARAMS,
            format!("inputResponses[{key:?}] {what}"),
        ))
    };
    if let Some(index) = key.strip_prefix("checkpoint-") {
        let kind = document
            .pointer("/outcome/checkpointContext/kind")
            .and_then(Value::as_str);
        let answer = match accepted_content(response) {
            Some(content) => match content.get("answer") {
                Some(answer) => answer.clone(),
                None => return refuse("must be {action:\"accept\", content:{answer}}"),
            },
            None if kind == Some("confirm") || kind.is_none() => Value::Bool(false),
            None => {
                return refuse("must accept with content.answer; this checkpoint takes no decline");
            }
        };
        let mut replies = Map::new();
        replies.insert(index.to_owned(), answer);
        return Ok(json!({"action": "resume", "runId": run_id, "checkpointReplies": replies}));
    }
    if let Some(setup_id) = key.strip_prefix("setup-") {
        return Ok(json!({
            "action": "setup-response", "runId": run_id, "setupId": setup_id, "response": response,
        }));
    }
    if let Some(permission_id) = key.strip_prefix("permission-") {
        let outcome = match accepted_content(response).and_then(|content| content.get("optionId")) {
            Some(option) => json!({"outcome": "selected", "optionId": option}),
            None => json!({"outcome": "cancelled"}),
        };
        return Ok(json!({
            "action": "permissions-response", "runId": run_id, "permissionId": permission_id,
            "response": {"outcome": outcome},
        }));
    }
    refuse("names no wait of this run")
}

fn answer_text(answer: &Value) -> String {
    answer
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or("the workflow tool refused")
        .to_owned()
}

/// Records `run_id` as the newest run task `tasks/list` names, keeping at most
/// [`MAX_LISTED_TASKS`] (the oldest goes first).
fn remember_started(started: &mut Vec<String>, run_id: &str) {
    started.retain(|known| known != run_id);
    started.push(run_id.to_owned());
    if started.len() > MAX_LISTED_TASKS {
        let excess = started.len() - MAX_LISTED_TASKS;
        started.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_matter_only_to_a_task_that_waits() {
        let run = RunId::generate();
        let event = RunNotice::Activity {
            run_id: run.clone(),
        };
        assert!(!concerns(&event, run.as_str(), TaskStatus::Working));
        assert!(concerns(&event, run.as_str(), TaskStatus::InputRequired));
        assert!(!concerns(&event, "another-run", TaskStatus::InputRequired));
        let settled = RunNotice::Settled {
            run_id: run.clone(),
            status: "paused".into(),
            result: false,
        };
        assert!(concerns(&settled, run.as_str(), TaskStatus::Working));
        assert!(!concerns(&settled, "another-run", TaskStatus::Working));
    }

    #[test]
    fn a_budget_pause_asks_for_a_resume_with_a_higher_limit() {
        let document = json!({"status": "paused", "reason": "budget",
            "outcome": {"budgetContext": {"message": "the run reached its token budget: 18 of 14 tokens spent (tokenBudget)"}}});
        let task = task_of("r-1", &document);
        assert_eq!(task.status, TaskStatus::InputRequired);
        let message = task.status_message.expect("a status message");
        assert!(
            message.contains("18 of 14 tokens") && message.contains("higher tokenBudget"),
            "{message}"
        );
        let requested = task_of("r-1", &json!({"status": "paused", "reason": "requested"}));
        assert!(!requested.status_message.unwrap().contains("budget"));
    }

    #[test]
    fn tasks_list_names_at_most_the_newest_listed_tasks() {
        let mut started = Vec::new();
        for index in 0..MAX_LISTED_TASKS {
            remember_started(&mut started, &format!("run-{index}"));
        }
        assert_eq!(started.len(), MAX_LISTED_TASKS);
        assert_eq!(started[0], "run-0");
        remember_started(&mut started, "run-0");
        assert_eq!(
            started.len(),
            MAX_LISTED_TASKS,
            "a repeat is moved, not added"
        );
        assert_eq!(started.last().map(String::as_str), Some("run-0"));
        remember_started(&mut started, "one more");
        assert_eq!(started.len(), MAX_LISTED_TASKS);
        assert_eq!(started[0], "run-2", "the oldest (run-1) went first");
        assert_eq!(started.last().map(String::as_str), Some("one more"));
    }
}
