//! An in-memory task table for servers whose tasks are plain futures: the conformance
//! fixture and tests. A job runs on its own tokio task; it may ask the client for input
//! through its [`TaskInput`] (the task is `input_required` until every request it asked is
//! answered, first answer per key wins); `cancel` settles the task as `cancelled` at once
//! and drops the job. Tasks are forgotten `ttl` after creation.
//!
//! Durable servers (the workflow server) implement [`TaskHandler`](super::TaskHandler) over
//! their own records instead; nothing here survives a restart.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{DEFAULT_POLL_INTERVAL_MS, TaskOutcome, TaskPage, TaskState, TaskStatus, unknown_task};
use crate::mcp::context::{McpResult, RequestContext};
use crate::mcp::handler::{NotificationHub, ServerEvent};
use crate::util::sync::Lock;

/// A task's work: given its input handle, the outcome.
pub type TaskJob =
    Box<dyn FnOnce(TaskInput) -> Pin<Box<dyn Future<Output = TaskOutcome> + Send>> + Send>;

/// The tasks of one server, shared by its handler and the jobs' input handles.
#[derive(Clone)]
pub struct MemoryTasks {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Mutex<HashMap<String, Entry>>,
    /// Woken on every change of any task, for `changed` and waiting jobs.
    changed: Notify,
    /// Where `notifications/tasks/status` for legacy sessions go.
    hub: NotificationHub,
}

struct Entry {
    state: TaskState,
    /// The legacy session that created it: its status notifications go there.
    session_id: Option<String>,
    /// Answers received for pending keys, taken by the job that asked.
    answers: Map<String, Value>,
    /// Stops the job.
    cancel: CancellationToken,
}

/// A running job's way to ask the client for input.
pub struct TaskInput {
    /// `None` for a job run outside any task (a plain call), which cannot ask.
    inner: Option<Arc<Inner>>,
    task_id: String,
    cancel: CancellationToken,
}

impl MemoryTasks {
    pub fn new(hub: NotificationHub) -> MemoryTasks {
        MemoryTasks {
            inner: Arc::new(Inner {
                entries: Mutex::new(HashMap::new()),
                changed: Notify::new(),
                hub,
            }),
        }
    }

    /// Starts `job` as a new task kept for `ttl_ms` and returns its first state; the task
    /// exists before this returns.
    pub fn start(&self, ctx: &RequestContext, ttl_ms: u64, job: TaskJob) -> TaskState {
        let now = crate::util::now_ms();
        let task_id = uuid::Uuid::new_v4().simple().to_string();
        let state = TaskState {
            task_id: task_id.clone(),
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: Some(ttl_ms),
            poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
            input_requests: Map::new(),
            outcome: None,
        };
        let cancel = CancellationToken::new();
        self.inner.entries.locked().insert(
            task_id.clone(),
            Entry {
                state: state.clone(),
                session_id: ctx.session_id.clone(),
                answers: Map::new(),
                cancel: cancel.clone(),
            },
        );
        let input = TaskInput {
            inner: Some(self.inner.clone()),
            task_id: task_id.clone(),
            cancel: cancel.clone(),
        };
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = job(input) => outcome,
            };
            inner.update(&task_id, |entry| {
                if entry.state.status.is_terminal() {
                    return;
                }
                entry.state.status = match outcome {
                    TaskOutcome::Result(_) => TaskStatus::Completed,
                    TaskOutcome::Error(_) => TaskStatus::Failed,
                };
                entry.state.input_requests.clear();
                entry.state.outcome = Some(outcome);
            });
        });
        state
    }

    /// Records a task that is already over (an answer given on a task request that was no
    /// job): kept for `ttl_ms` like any other.
    pub fn finished(&self, ctx: &RequestContext, ttl_ms: u64, outcome: TaskOutcome) -> TaskState {
        let now = crate::util::now_ms();
        let status = match outcome {
            TaskOutcome::Result(_) => TaskStatus::Completed,
            TaskOutcome::Error(_) => TaskStatus::Failed,
        };
        let state = TaskState {
            task_id: uuid::Uuid::new_v4().simple().to_string(),
            status,
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: Some(ttl_ms),
            poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
            input_requests: Map::new(),
            outcome: Some(outcome),
        };
        self.inner.entries.locked().insert(
            state.task_id.clone(),
            Entry {
                state: state.clone(),
                session_id: ctx.session_id.clone(),
                answers: Map::new(),
                cancel: CancellationToken::new(),
            },
        );
        state
    }

    /// Whether `task_id` is one of these tasks (and not expired).
    pub fn contains(&self, task_id: &str) -> bool {
        self.expire();
        self.inner.entries.locked().contains_key(task_id)
    }

    pub fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        let _ = ctx;
        self.expire();
        self.inner
            .entries
            .locked()
            .get(task_id)
            .map(|entry| entry.state.clone())
            .ok_or_else(|| unknown_task(task_id))
    }

    /// Settles a live task as `cancelled`; a terminal one is returned unchanged.
    pub fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        self.get(ctx, task_id)?;
        self.inner.update(task_id, |entry| {
            if !entry.state.status.is_terminal() {
                entry.cancel.cancel();
                entry.state.status = TaskStatus::Cancelled;
                entry.state.status_message = Some("cancelled by the client".into());
                entry.state.input_requests.clear();
            }
        });
        self.get(ctx, task_id)
    }

    pub fn list(&self, _ctx: &RequestContext) -> TaskPage {
        self.expire();
        let mut tasks: Vec<TaskState> = self
            .inner
            .entries
            .locked()
            .values()
            .map(|entry| entry.state.clone())
            .collect();
        tasks.sort_by_key(|task| std::cmp::Reverse(task.created_at_ms));
        TaskPage {
            tasks,
            next_cursor: None,
        }
    }

    /// Takes the answers to pending keys; others are ignored (first answer wins).
    pub fn answer(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> McpResult<()> {
        self.get(ctx, task_id)?;
        self.inner.update(task_id, |entry| {
            for (key, response) in responses {
                if entry.state.input_requests.remove(key).is_some() {
                    entry.answers.insert(key.clone(), response.clone());
                }
            }
        });
        Ok(())
    }

    /// Resolves once the task differs from `seen`, or the request is cancelled.
    pub async fn changed(&self, ctx: &RequestContext, seen: &TaskState) -> McpResult<TaskState> {
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.get(ctx, &seen.task_id)?;
            if now != *seen {
                return Ok(now);
            }
            tokio::select! {
                () = ctx.cancel.cancelled() => {
                    return Err(crate::mcp::McpError::internal("the request was cancelled"));
                }
                () = notified => {}
            }
        }
    }

    fn expire(&self) {
        let now = crate::util::now_ms();
        self.inner
            .entries
            .locked()
            .retain(|_, entry| match entry.state.ttl_ms {
                Some(ttl) => entry.state.created_at_ms.saturating_add(ttl as i64) > now,
                None => true,
            });
    }
}

impl Inner {
    /// Changes one task, stamps it, tells its session when the status moved, and wakes
    /// every waiter.
    fn update(&self, task_id: &str, change: impl FnOnce(&mut Entry)) {
        let notification = {
            let mut entries = self.entries.locked();
            let Some(entry) = entries.get_mut(task_id) else {
                return;
            };
            let before = (entry.state.status, entry.state.input_requests.len());
            change(entry);
            let after = (entry.state.status, entry.state.input_requests.len());
            if before == after && entry.state.outcome.is_none() {
                None
            } else {
                entry.state.last_updated_at_ms = crate::util::now_ms();
                let moved = before.0 != after.0;
                entry
                    .session_id
                    .clone()
                    .filter(|_| moved)
                    .map(|session| (session, super::wire::legacy_task(&entry.state)))
            }
        };
        if let Some((session_id, task)) = notification {
            self.hub.publish(ServerEvent::ToSession {
                session_id,
                method: "notifications/tasks/status".into(),
                params: task,
            });
        }
        self.changed.notify_waiters();
    }
}

impl TaskInput {
    /// The input handle of a job run as a plain call: every `ask` answers `None`.
    pub fn detached() -> TaskInput {
        TaskInput {
            inner: None,
            task_id: String::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Asks the client: the task is `input_required` with `requests` (key → `{method,
    /// params}`) until every key is answered; returns the answers by key. `None` if the
    /// task was cancelled or forgotten meanwhile.
    pub async fn ask(&self, requests: Map<String, Value>) -> Option<Map<String, Value>> {
        let inner = self.inner.as_ref()?;
        let keys: Vec<String> = requests.keys().cloned().collect();
        inner.update(&self.task_id, |entry| {
            entry.state.status = TaskStatus::InputRequired;
            entry.state.input_requests.extend(requests);
        });
        loop {
            let notified = inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let answered = {
                let mut entries = inner.entries.locked();
                let entry = entries.get_mut(&self.task_id)?;
                if keys.iter().all(|key| entry.answers.contains_key(key)) {
                    let mut answers = Map::new();
                    for key in &keys {
                        if let Some(answer) = entry.answers.remove(key) {
                            answers.insert(key.clone(), answer);
                        }
                    }
                    Some(answers)
                } else {
                    None
                }
            };
            if let Some(answers) = answered {
                inner.update(&self.task_id, |entry| {
                    if entry.state.input_requests.is_empty() && !entry.state.status.is_terminal() {
                        entry.state.status = TaskStatus::Working;
                    }
                });
                return Some(answers);
            }
            tokio::select! {
                () = self.cancel.cancelled() => return None,
                () = notified => {}
            }
        }
    }

    /// Fires when the task is cancelled.
    pub fn cancelled(&self) -> CancellationToken {
        self.cancel.clone()
    }
}

/// The `content` of an accepted elicitation answer, or `None` for decline/cancel.
pub fn accepted_content(answer: &Value) -> Option<&Value> {
    if answer.get("action").and_then(Value::as_str) == Some("accept") {
        answer.get("content")
    } else {
        None
    }
}
