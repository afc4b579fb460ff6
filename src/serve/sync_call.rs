//! The synchronous face of a served workflow: `tools/call {name: <workflow>}` runs it to the
//! end inside the request and answers with its result.
//!
//! Each call is a run of its own, made under the [`SYNC_CALLER`] key (never handed to anyone)
//! and deleted once answered, so nothing carries over between calls. Progress goes to the
//! request's progress token, one step per settled agent call; a cancelled request stops the
//! run. A checkpoint or setup wait cannot be answered inside a `tools/call`: the run is
//! stopped and deleted and the tool error says to use `mhl_run_start` (docs/serve.md).
//!
//! A client that speaks MCP tasks may run the same tool as a task instead ([`FolderTasks`]):
//! then it is an `mhl_run_start` run, and its checkpoints are answered through the task.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::events::RunNotice;
use crate::engine::manager::exact_result;
use crate::engine::{RunRequest, ScriptInput, StatusQuery};
use crate::mcp::ToolAnswer;
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::mcp::registry::ToolHandler;
use crate::mcp::tasks::{
    Created, DEFAULT_POLL_INTERVAL_MS, TaskCall, TaskHandler, TaskOutcome, TaskPage, TaskState,
    TaskStatus, accepted_content, form_request, unknown_task,
};
use crate::model::{PauseReason, RunId, RunRecord, RunStatus};

use super::owners::SYNC_CALLER;
use super::runs::{RunApi, check_size};
use super::tools::{text_result, tool_error};

/// Answers `tools/call` for every workflow of the folder.
pub(super) struct SyncCalls {
    pub api: Arc<RunApi>,
}

#[async_trait]
impl ToolHandler for SyncCalls {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        self.run_to_the_end(ctx, name, arguments)
            .await
            .map(ToolAnswer::Value)
    }
}

impl SyncCalls {
    /// Runs workflow `name` with `arguments` inside the request; its answer.
    async fn run_to_the_end(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<Value> {
        let Some(workflow) = self.api.folder.get(name) else {
            return Ok(tool_error(format!("no workflow is named {name:?}")));
        };
        if let Err(error) = check_size(arguments) {
            return Ok(tool_error(error.to_string()));
        }
        let engine = &self.api.engine;
        ctx.progress(0.0, None, Some("preparing"));
        let request = RunRequest {
            project_dir: self.api.folder.root.clone(),
            script: ScriptInput::Path(workflow.path.clone()),
            args: arguments.clone(),
            limits: Default::default(),
            caller: Some(SYNC_CALLER.to_owned()),
            trace: None,
        };
        // Subscribed before admission, so no settled call of a quick run is missed.
        let notices = engine.subscribe_records();
        let admission = match engine.start_cancellable(request, &ctx.cancel).await {
            Ok(admission) => admission,
            Err(error) => {
                return Ok(tool_error(self.api.folder.scrub(&error.to_string())));
            }
        };
        let run_id = admission.run_id;
        let settled = self.follow(ctx, &run_id, notices).await;
        let answer = match settled {
            Some(record) => answer_of(name, &record),
            None => tool_error("the run's record could not be read".to_owned()),
        };
        // Throwaway: the run goes with its answer.
        let _ = engine.delete(&run_id).await;
        Ok(answer)
    }

    /// Waits for the run to settle, reporting progress and stopping it when the request is
    /// cancelled or it waits for an answer. Returns its final record.
    async fn follow(
        &self,
        ctx: &RequestContext,
        run_id: &RunId,
        mut notices: tokio::sync::broadcast::Receiver<RunNotice>,
    ) -> Option<RunRecord> {
        let engine = &self.api.engine;
        let mut settled_calls = 0u64;
        let wait = engine.wait(run_id);
        tokio::pin!(wait);
        loop {
            // Biased, `wait` last: every event is broadcast before the run ends, so the
            // notices still queued then are reported before the loop stops.
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => {
                    let _ = engine.stop(run_id, None, &StatusQuery::default()).await;
                    engine.wait(run_id).await;
                    break;
                }
                notice = notices.recv() => match notice {
                    Ok(RunNotice::Event { run_id: of, record }) if &of == run_id => {
                        match record.event.event_type().as_deref() {
                            Some("agentEnd") => {
                                settled_calls += 1;
                                ctx.progress(settled_calls as f64, None, Some("agent call settled"));
                            }
                            Some("phase") => {
                                let event = record.event.value();
                                let title = event["title"].as_str().unwrap_or("next phase");
                                ctx.progress(settled_calls as f64, None, Some(title));
                            }
                            _ => {}
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        (&mut wait).await;
                        break;
                    }
                },
                _ = &mut wait => break,
            }
        }
        engine.load_reconciled(run_id).await.ok()
    }
}

/// The tool result of a settled synchronous run.
fn answer_of(name: &str, record: &RunRecord) -> Value {
    match record.status {
        RunStatus::Completed => {
            let text = exact_result(record).unwrap_or_else(|_| "null".to_owned());
            let result = record.result.clone().unwrap_or(Value::Null);
            let mut answer = text_result(text);
            answer["structuredContent"] = json!({"result": result});
            answer
        }
        RunStatus::Paused if record.pause_reason == Some(PauseReason::CheckpointRequired) => {
            let prompt = record
                .checkpoint_context
                .as_ref()
                .map_or("a checkpoint", |context| context.prompt.as_str());
            tool_error(format!(
                "{name} stopped at a checkpoint ({prompt}) that a synchronous tools/call cannot \
                 answer; start it with mhl_run_start and answer through mhl_run_resume"
            ))
        }
        RunStatus::Paused | RunStatus::Pending => tool_error(format!(
            "{name} is waiting ({}) and a synchronous tools/call cannot wait for it; start it \
             with mhl_run_start to follow it",
            record
                .pause_reason
                .map_or("setup", |reason| reason.as_str())
        )),
        RunStatus::Failed => tool_error(format!(
            "{name} failed: {}",
            record.error_message.as_deref().unwrap_or("no message")
        )),
        RunStatus::Aborted | RunStatus::Running => tool_error(format!("{name} was cancelled")),
    }
}

/// A served workflow's call as an MCP task (docs/tasks.md): the same run `mhl_run_start`
/// would make for the caller, whose task id is the runId; its status is the run's
/// (`working`, `input_required` at a checkpoint, `completed`, `failed`, `canceled` →
/// `cancelled`), a checkpoint is one elicitation form answered through `mhl_run_resume`'s
/// path, and cancel is `mhl_run_cancel`. Ownership is the run API's, so a task is visible to
/// its starter only, for as long as this server knows the run.
pub(super) struct FolderTasks {
    pub api: Arc<RunApi>,
    /// Refusals of a 2025 task request, as tasks that are already over.
    pub immediate: crate::mcp::tasks::MemoryTasks,
}

/// How long an immediate (already over) task is kept.
const IMMEDIATE_TTL_MS: u64 = 60 * 60 * 1000;

impl FolderTasks {
    async fn task(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        let owner = super::owners::OwnerKey::of(ctx);
        let view = self
            .api
            .status(&owner, &json!({"runId": task_id}))
            .await
            .map_err(|_| unknown_task(task_id))?;
        let view = serde_json::to_value(&view).unwrap_or(Value::Null);
        let record = RunId::parse(task_id)
            .ok()
            .map(|run_id| async move { self.api.engine.load_reconciled(&run_id).await.ok() });
        let record = match record {
            Some(load) => load.await,
            None => None,
        };
        Ok(task_of_view(task_id, &view, record.as_ref()))
    }
}

/// The task a run view describes.
fn task_of_view(task_id: &str, view: &Value, record: Option<&RunRecord>) -> TaskState {
    let state = view["state"].as_str().unwrap_or("working");
    let mut input_requests = serde_json::Map::new();
    if state == "input_required"
        && let Some(checkpoint) = view.get("checkpoint").filter(|c| c.is_object())
    {
        let answer = match checkpoint["kind"].as_str() {
            Some("input") => json!({"type": "string"}),
            Some("select") => json!({"type": "string", "enum": checkpoint["choices"].clone()}),
            _ => json!({"type": "boolean"}),
        };
        let schema =
            json!({"type": "object", "properties": {"answer": answer}, "required": ["answer"]});
        input_requests.insert(
            format!("checkpoint-{}", checkpoint["callIndex"]),
            form_request(checkpoint["prompt"].as_str().unwrap_or("Continue?"), schema),
        );
    }
    let (status, outcome) = match state {
        "completed" => {
            let result = view["result"].clone();
            let mut answer = text_result(result.to_string());
            answer["structuredContent"] = json!({"result": result});
            (TaskStatus::Completed, Some(TaskOutcome::Result(answer)))
        }
        "failed" => {
            let message = view["error"].as_str().unwrap_or("no message");
            (
                TaskStatus::Failed,
                Some(TaskOutcome::Result(tool_error(format!(
                    "the run failed: {message}"
                )))),
            )
        }
        "canceled" => (TaskStatus::Cancelled, None),
        "input_required" => (TaskStatus::InputRequired, None),
        _ => (TaskStatus::Working, None),
    };
    let now = crate::util::now_ms();
    TaskState {
        task_id: task_id.to_owned(),
        status,
        status_message: Some(format!("the run is {state}")),
        created_at_ms: record.map_or(now, |record| record.started_at),
        last_updated_at_ms: record.map_or(now, |record| record.updated_at),
        ttl_ms: None,
        poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
        input_requests,
        outcome,
    }
}

#[async_trait]
impl TaskHandler for FolderTasks {
    async fn create(&self, ctx: &RequestContext, call: TaskCall) -> McpResult<Created> {
        let owner = super::owners::OwnerKey::of(ctx);
        let params = json!({"name": call.name, "arguments": call.arguments});
        match self.api.start(&owner, &params).await {
            Ok(view) => Ok(Created::Task(self.task(ctx, view.run_id.as_str()).await?)),
            Err(error) if ctx.era.is_modern() => Ok(Created::Answer(tool_error(error.to_string()))),
            Err(error) => Ok(Created::Task(self.immediate.finished(
                ctx,
                call.ttl_ms.unwrap_or(IMMEDIATE_TTL_MS),
                TaskOutcome::Result(tool_error(error.to_string())),
            ))),
        }
    }

    async fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        if self.immediate.contains(task_id) {
            return self.immediate.get(ctx, task_id);
        }
        self.task(ctx, task_id).await
    }

    async fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        if self.immediate.contains(task_id) {
            return self.immediate.cancel(ctx, task_id);
        }
        let before = self.task(ctx, task_id).await?;
        if !before.status.is_terminal() {
            let owner = super::owners::OwnerKey::of(ctx);
            self.api
                .cancel(&owner, &json!({"runId": task_id}))
                .await
                .map_err(|error| McpError::internal(error.to_string()))?;
        }
        self.task(ctx, task_id).await
    }

    async fn list(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<TaskPage> {
        let owner = super::owners::OwnerKey::of(ctx);
        let listed = self.api.list(&owner).await.unwrap_or(Value::Null);
        let mut tasks = Vec::new();
        for run in listed["runs"].as_array().into_iter().flatten().rev() {
            if let Some(run_id) = run["runId"].as_str()
                && let Ok(task) = self.task(ctx, run_id).await
            {
                tasks.push(task);
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
        responses: &serde_json::Map<String, Value>,
    ) -> McpResult<()> {
        if self.immediate.contains(task_id) {
            return self.immediate.answer(ctx, task_id, responses);
        }
        let owner = super::owners::OwnerKey::of(ctx);
        for (key, response) in responses {
            // Re-read per key: one that no longer waits was answered first, and is ignored.
            let task = self.task(ctx, task_id).await?;
            if !task.input_requests.contains_key(key) {
                continue;
            }
            let Some(index) = key.strip_prefix("checkpoint-") else {
                continue;
            };
            let answer = match accepted_content(response).and_then(|content| content.get("answer"))
            {
                Some(answer) => answer.clone(),
                None => Value::Bool(false),
            };
            let params =
                json!({"runId": task_id, "arguments": {"checkpointReplies": {index: answer}}});
            self.api.resume(&owner, &params).await.map_err(|error| {
                McpError::invalid_params(format!("inputResponses[{key:?}] was refused: {error}"))
                    .with_data(json!({"taskId": task_id, "key": key}))
            })?;
        }
        Ok(())
    }
}
