//! `ListTasks` (A2A 1.0): the caller's tasks that this replica knows (the runs it started or
//! handed over, as `run/list` lists them), newest first, filtered by `status` and
//! `contextId` (a task's context is its own id), in pages.

use serde_json::{Value, json};

use super::task::{self, TaskState};
use super::{A2aError, Version, invalid};
use crate::serve::owners::OwnerKey;
use crate::serve::runs::RunApi;

/// Tasks per page by default, and at most.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;

pub(super) async fn list(
    api: &RunApi,
    params: &Value,
    owner: &OwnerKey,
) -> Result<Value, A2aError> {
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => DEFAULT_PAGE,
        Some(size) => size
            .as_u64()
            .filter(|size| (1..=MAX_PAGE as u64).contains(size))
            .map(|size| size as usize)
            .ok_or_else(|| invalid("params.pageSize: a whole number from 1 to 100 is required"))?,
    };
    let offset = match params.get("pageToken").and_then(Value::as_str) {
        None | Some("") => 0,
        Some(token) => token.parse::<usize>().map_err(|_| {
            invalid("params.pageToken: not a token this server gave (nextPageToken)")
        })?,
    };
    let status = match params.get("status").and_then(Value::as_str) {
        None | Some("" | "TASK_STATE_UNSPECIFIED") => None,
        Some(name) => Some(state_named(name)?),
    };
    let context = params.get("contextId").and_then(Value::as_str);
    let mut views = api.list_views(owner).await?;
    views.reverse();
    let matching: Vec<_> = views
        .iter()
        .filter(|view| status.is_none_or(|state| TaskState::of(view, false) == state))
        .filter(|view| context.is_none_or(|context| view.run_id.as_str() == context))
        .collect();
    let total = matching.len();
    let tasks: Vec<Value> = matching
        .iter()
        .skip(offset)
        .take(page_size)
        .map(|view| task::task(view, Version::V1, false))
        .collect();
    let next = offset + tasks.len();
    let next_token = if next < total {
        next.to_string()
    } else {
        String::new()
    };
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next_token,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

fn state_named(name: &str) -> Result<TaskState, A2aError> {
    [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
    ]
    .into_iter()
    .find(|state| state.name(Version::V1) == name)
    .ok_or_else(|| {
        invalid(&format!(
            "params.status: {:?} is not a task state (TASK_STATE_WORKING, …)",
            super::shortened(name)
        ))
    })
}
