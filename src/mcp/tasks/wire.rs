//! The tasks wire: which `tools/call` becomes a task, the `tasks/*` methods of each era, and
//! the shapes a [`TaskState`] takes in each (2025 `ttl`/`pollInterval` and `{task}`;
//! 2026-07-28 flat `ttlMs`/`pollIntervalMs` with the outcome inlined on `tasks/get`).

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    Created, MAX_TTL_MS, META_RELATED_TASK, TASKS_EXTENSION, TaskCall, TaskHandler, TaskOutcome,
    TaskState, TaskStatus, TaskSupport, client_speaks_tasks, missing_extension,
};
use crate::mcp::context::{McpError, McpResult, RequestContext, codes};

/// The capability a handler that backs tasks adds, for a client that speaks tasks in this
/// era: `tasks` (2025) or `extensions[TASKS_EXTENSION]` (2026-07-28).
pub(in crate::mcp) fn add_capability(capabilities: &mut Value, modern: bool) {
    let Value::Object(map) = capabilities else {
        return;
    };
    if modern {
        let extensions = map.entry("extensions").or_insert_with(|| json!({}));
        if let Value::Object(extensions) = extensions {
            extensions.insert(TASKS_EXTENSION.into(), json!({}));
        }
    } else {
        map.insert(
            "tasks".into(),
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        );
    }
}

/// A `tools/call` to a handler that backs tasks: `Some` when the task rules answer it (a
/// task, a refusal, or the handler's immediate answer), with the task it created if it
/// created one; `None` to call the tool as usual.
pub(in crate::mcp) async fn call(
    tasks: &dyn TaskHandler,
    support: TaskSupport,
    ctx: &RequestContext,
    params: &Value,
    name: &str,
    arguments: &Value,
) -> Option<McpResult<(Value, Option<TaskState>)>> {
    let modern = ctx.era.is_modern();
    let wants_task = if modern {
        client_speaks_tasks(ctx)
    } else {
        params.get("task").is_some_and(|task| !task.is_null())
    };
    match (support, wants_task) {
        (TaskSupport::Required, false) if modern => {
            return Some(Err(missing_extension(&format!("tool {name:?}"))));
        }
        (TaskSupport::Required, false) => {
            return Some(Err(McpError::new(
                codes::METHOD_NOT_FOUND,
                format!("tool {name:?} runs only as a task: call it with params.task"),
            )));
        }
        // The 2026 wire ignores a legacy `task` hint: registration is authoritative.
        (TaskSupport::Forbidden, true) if !modern => {
            return Some(Err(McpError::new(
                codes::METHOD_NOT_FOUND,
                format!("tool {name:?} does not run as a task: call it without params.task"),
            )));
        }
        (TaskSupport::Forbidden, _) | (_, false) => return None,
        _ => {}
    }
    let ttl_ms = if modern {
        None
    } else {
        match ttl_param(params) {
            Ok(ttl) => ttl,
            Err(error) => return Some(Err(error)),
        }
    };
    let call = TaskCall {
        name: name.to_owned(),
        arguments: arguments.clone(),
        ttl_ms,
        input_responses: params.get("inputResponses").cloned(),
    };
    Some(match tasks.create(ctx, call).await {
        Ok(Created::Task(state)) if modern => Ok((created_modern(&state), Some(state))),
        Ok(Created::Task(state)) => Ok((json!({"task": legacy_task(&state)}), Some(state))),
        Ok(Created::Answer(answer)) => Ok((answer, None)),
        Err(error) => Err(error),
    })
}

/// `params.task.ttl`: a whole number of milliseconds up to [`MAX_TTL_MS`].
fn ttl_param(params: &Value) -> McpResult<Option<u64>> {
    let task = params.get("task").expect("a task request");
    if !task.is_object() {
        return Err(McpError::invalid_params("params.task must be an object"));
    }
    match task.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(ttl) => match ttl.as_u64() {
            Some(ttl) if ttl <= MAX_TTL_MS => Ok(Some(ttl)),
            _ => Err(McpError::invalid_params(format!(
                "params.task.ttl must be a whole number of milliseconds from 0 to {MAX_TTL_MS}"
            ))),
        },
    }
}

/// A `tasks/*` method: `None` when it does not exist in this era (the core answers -32601).
pub(in crate::mcp) async fn method(
    tasks: &dyn TaskHandler,
    ctx: &RequestContext,
    method: &str,
    params: &Value,
) -> Option<McpResult<Value>> {
    let modern = ctx.era.is_modern();
    let known = match method {
        "tasks/get" | "tasks/cancel" => true,
        "tasks/update" => modern,
        "tasks/result" | "tasks/list" => !modern,
        _ => false,
    };
    if !known {
        return None;
    }
    if modern && !client_speaks_tasks(ctx) {
        return Some(Err(missing_extension(method)));
    }
    Some(answer(tasks, ctx, method, params, modern).await)
}

async fn answer(
    tasks: &dyn TaskHandler,
    ctx: &RequestContext,
    method: &str,
    params: &Value,
    modern: bool,
) -> McpResult<Value> {
    if method == "tasks/list" {
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(cursor.as_str()),
            Some(_) => return Err(McpError::invalid_params("params.cursor must be a string")),
        };
        let page = tasks.list(ctx, cursor).await?;
        let listed: Vec<Value> = page.tasks.iter().map(legacy_task).collect();
        let mut result = json!({"tasks": listed});
        if let Some(cursor) = page.next_cursor {
            result["nextCursor"] = cursor.into();
        }
        return Ok(result);
    }
    let task_id = params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("params.taskId must be a string"))?;
    match method {
        "tasks/get" if modern => Ok(detailed_modern(&tasks.get(ctx, task_id).await?)),
        "tasks/get" => Ok(legacy_task(&tasks.get(ctx, task_id).await?)),
        "tasks/update" => {
            let responses = match params.get("inputResponses") {
                Some(Value::Object(responses)) => responses,
                _ => {
                    return Err(McpError::invalid_params(
                        "params.inputResponses must be an object of answers by request key",
                    ));
                }
            };
            tasks.answer(ctx, task_id, responses).await?;
            Ok(json!({}))
        }
        "tasks/cancel" if modern => {
            tasks.cancel(ctx, task_id).await?;
            Ok(json!({}))
        }
        "tasks/cancel" => {
            let before = tasks.get(ctx, task_id).await?;
            if before.status.is_terminal() {
                return Err(McpError::invalid_params(format!(
                    "task {task_id:?} is already {}; only a live task can be cancelled",
                    before.status.as_str()
                )));
            }
            Ok(legacy_task(&tasks.cancel(ctx, task_id).await?))
        }
        _ => payload(tasks, ctx, task_id).await,
    }
}

/// 2025 `tasks/result`: waits until the task is terminal, then its payload with the
/// related-task `_meta`; a failed task is its error. While the task waits for input, each
/// pending request is sent to the client once, on this request's own stream, as a
/// server-to-client request tagged with the task; its response is the answer (the first
/// one wins, as with `tasks/update`).
async fn payload(tasks: &dyn TaskHandler, ctx: &RequestContext, task_id: &str) -> McpResult<Value> {
    let mut state = tasks.get(ctx, task_id).await?;
    let mut asked: HashSet<String> = HashSet::new();
    let (answers, mut answered) = mpsc::unbounded_channel::<(String, Value)>();
    // Ends the waits for answers when this request ends, however it ends.
    let finished = CancellationToken::new();
    let _finish = finished.clone().drop_guard();
    loop {
        if state.status.is_terminal() {
            break;
        }
        for (key, request) in &state.input_requests {
            if !asked.insert(key.clone()) {
                continue;
            }
            let method = request["method"].as_str().unwrap_or("elicitation/create");
            let mut params = request["params"].clone();
            if let Value::Object(map) = &mut params {
                map.insert(
                    "_meta".into(),
                    json!({META_RELATED_TASK: {"taskId": task_id}}),
                );
            }
            let Some(pending) = ctx.notifier.request(method, params) else {
                continue;
            };
            let answers = answers.clone();
            let key = key.clone();
            let finished = finished.clone();
            tokio::spawn(async move {
                // Dropping `pending` forgets the request if the client never answers.
                let mut pending = pending;
                tokio::select! {
                    () = finished.cancelled() => {}
                    answer = &mut pending.receiver => {
                        if let Ok(Ok(answer)) = answer {
                            let _ = answers.send((key, answer));
                        }
                    }
                }
            });
        }
        tokio::select! {
            Some((key, answer)) = answered.recv() => {
                let mut responses = Map::new();
                responses.insert(key, answer);
                tasks.answer(ctx, task_id, &responses).await?;
                state = tasks.get(ctx, task_id).await?;
            }
            changed = tasks.changed(ctx, &state) => state = changed?,
        }
    }
    match state.outcome {
        Some(TaskOutcome::Result(mut result)) => {
            if let Value::Object(map) = &mut result {
                let meta = map.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    meta.insert(META_RELATED_TASK.into(), json!({"taskId": task_id}));
                }
            }
            Ok(result)
        }
        Some(TaskOutcome::Error(error)) => Err(error),
        None => Err(McpError::invalid_params(format!(
            "task {task_id:?} was {} and has no result",
            state.status.as_str()
        ))
        .with_data(json!({"taskId": task_id, "status": state.status.as_str()}))),
    }
}

/// The 2025 `Task` object.
pub(crate) fn legacy_task(state: &TaskState) -> Value {
    let mut task = base(state);
    task.insert("ttl".into(), json!(state.ttl_ms));
    task.insert("pollInterval".into(), state.poll_interval_ms.into());
    Value::Object(task)
}

/// The 2026-07-28 `CreateTaskResult`: flat, without the outcome.
fn created_modern(state: &TaskState) -> Value {
    let mut task = modern_task(state);
    task.insert("resultType".into(), "task".into());
    Value::Object(task)
}

/// The 2026-07-28 `DetailedTask` of `tasks/get`: the outcome or the pending input inlined.
pub(crate) fn detailed_modern(state: &TaskState) -> Value {
    let mut task = modern_task(state);
    match &state.outcome {
        Some(TaskOutcome::Result(result)) => {
            task.insert("result".into(), result.clone());
        }
        Some(TaskOutcome::Error(error)) if state.status == TaskStatus::Failed => {
            let mut inlined = json!({"code": error.code, "message": error.message});
            if let Some(data) = &error.data {
                inlined["data"] = data.clone();
            }
            task.insert("error".into(), inlined);
        }
        _ => {}
    }
    if state.status == TaskStatus::InputRequired && !state.input_requests.is_empty() {
        task.insert(
            "inputRequests".into(),
            Value::Object(state.input_requests.clone()),
        );
    }
    Value::Object(task)
}

fn modern_task(state: &TaskState) -> Map<String, Value> {
    let mut task = base(state);
    // A tool that ran and reported an error is `completed` with `isError` here (SEP-2663's
    // error semantics), whatever the 2025 status says.
    if matches!(state.outcome, Some(TaskOutcome::Result(_))) {
        task.insert("status".into(), "completed".into());
    }
    task.insert("ttlMs".into(), json!(state.ttl_ms));
    task.insert(
        "pollIntervalMs".into(),
        state.poll_interval_ms.max(1).into(),
    );
    task
}

fn base(state: &TaskState) -> Map<String, Value> {
    let mut task = Map::new();
    task.insert("taskId".into(), state.task_id.clone().into());
    task.insert("status".into(), state.status.as_str().into());
    if let Some(message) = &state.status_message {
        task.insert("statusMessage".into(), message.clone().into());
    }
    task.insert(
        "createdAt".into(),
        crate::util::iso_time(state.created_at_ms).into(),
    );
    task.insert(
        "lastUpdatedAt".into(),
        crate::util::iso_time(state.last_updated_at_ms).into(),
    );
    task
}

/// The most task ids one `subscriptions/listen` may watch; more is -32602.
pub(crate) const MAX_WATCHED_TASKS: usize = 64;

/// The tasks one 2026-07-28 `subscriptions/listen` asked about (`notifications.taskIds`),
/// with what it last told of each. Task state lives behind the handler (a durable run, a
/// table), so changes are found by reading each watched task at its poll interval and
/// sending `notifications/tasks` (the `tasks/get` shape) when it differs.
pub(in crate::mcp) struct TaskWatch {
    ids: Vec<String>,
    seen: std::collections::HashMap<String, Value>,
}

impl TaskWatch {
    /// The watch a listen request asks for; empty without a task handler or the extension.
    pub(in crate::mcp) fn requested(
        tasks: Option<&dyn TaskHandler>,
        ctx: &RequestContext,
        requested: &Value,
    ) -> McpResult<TaskWatch> {
        let mut ids: Vec<String> = Vec::new();
        if tasks.is_some() && client_speaks_tasks(ctx) {
            let listed = requested.get("taskIds").and_then(Value::as_array);
            for id in listed.into_iter().flatten().filter_map(Value::as_str) {
                if !ids.iter().any(|known| known == id) {
                    ids.push(id.to_owned());
                }
            }
        }
        if ids.len() > MAX_WATCHED_TASKS {
            return Err(McpError::invalid_params(format!(
                "notifications.taskIds names {} tasks; one listen watches at most {MAX_WATCHED_TASKS}",
                ids.len()
            )));
        }
        Ok(TaskWatch {
            ids,
            seen: std::collections::HashMap::new(),
        })
    }

    pub(in crate::mcp) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The honoured ids, for the acknowledgement.
    pub(in crate::mcp) fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The watched tasks that changed since the last call (all of them the first time); a
    /// task that cannot be read is skipped.
    pub(in crate::mcp) async fn changed(
        &mut self,
        tasks: &dyn TaskHandler,
        ctx: &RequestContext,
    ) -> Vec<Value> {
        let mut changed = Vec::new();
        for id in &self.ids {
            let Ok(state) = tasks.get(ctx, id).await else {
                continue;
            };
            let task = detailed_modern(&state);
            if self.seen.get(id) != Some(&task) {
                self.seen.insert(id.clone(), task.clone());
                changed.push(task);
            }
        }
        changed
    }
}
