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

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::mcp::registry::ToolHandler;
use crate::mcp::tasks::{
    Created, DEFAULT_POLL_INTERVAL_MS, MemoryTasks, TaskCall, TaskHandler, TaskOutcome, TaskPage,
    TaskState, TaskStatus, accepted_content, form_request, unknown_task,
};
use crate::mcp::{NotificationHub, handler::codes};

use super::WorkflowTool;
use super::schema::TOOL_NAME;

/// How long an already-completed task of a non-job action is kept unless asked otherwise.
const IMMEDIATE_TTL_MS: u64 = 60 * 60 * 1000;
/// The result page size used to read a run's whole result.
const RESULT_PAGE: usize = 16384;

/// The task handler of the workflow server.
pub(crate) struct WorkflowTasks {
    tool: Arc<WorkflowTool>,
    /// Already-completed tasks of actions that are not jobs (2025 task requests only).
    immediate: MemoryTasks,
    /// Answers are taken one at a time: the second answer to a wait sees it gone.
    answering: tokio::sync::Mutex<()>,
    /// Runs this process started as tasks, newest last, for `tasks/list`.
    started: Mutex<Vec<String>>,
}

impl WorkflowTasks {
    pub(crate) fn new(tool: Arc<WorkflowTool>, hub: NotificationHub) -> WorkflowTasks {
        WorkflowTasks {
            tool,
            immediate: MemoryTasks::new(hub),
            answering: tokio::sync::Mutex::new(()),
            started: Mutex::new(Vec::new()),
        }
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
            .call(ctx, TOOL_NAME, call.arguments.clone())
            .await?;
        let run_id = answer
            .pointer("/structuredContent/runId")
            .and_then(Value::as_str);
        let (true, false, Some(run_id)) = (job, answer["isError"] == true, run_id) else {
            return Ok(self.answered(ctx, call.ttl_ms, answer));
        };
        {
            let mut started = self.started.lock().expect("started lock");
            started.retain(|known| known != run_id);
            started.push(run_id.to_owned());
        }
        Ok(Created::Task(self.run_task(ctx, run_id).await?.0))
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
        self.get(ctx, task_id).await
    }

    async fn list(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<TaskPage> {
        let started: Vec<String> = self.started.lock().expect("started lock").clone();
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
        }
        Ok(())
    }
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
