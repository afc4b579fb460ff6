//! A run as an A2A task, in the wire form of either protocol version.
//!
//! The task id is the run id and so is its `contextId` (the server keeps no conversation
//! beyond the run). The state is the run's lifecycle, never its step: `submitted` in the
//! answer that started it while it is still going, then `working`, `input-required` at a
//! checkpoint or a setup wait, `completed` with one artifact whose only part is the result
//! JSON as text, `failed` and `canceled` with the run's message as the status message. A
//! 1.0 task spells states `TASK_STATE_*` and roles `ROLE_*`; a 0.3 task spells them in lower
//! case and tags every object with its `kind`.

use serde_json::{Map, Value, json};

use super::Version;
use crate::serve::view::RunView;

/// The A2A task states a run can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl TaskState {
    /// The state of `view`; `fresh` for the answer that started the run.
    pub(super) fn of(view: &RunView, fresh: bool) -> TaskState {
        match view.state {
            "working" if fresh => TaskState::Submitted,
            "queued" => TaskState::Submitted,
            "working" => TaskState::Working,
            "input_required" => TaskState::InputRequired,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            _ => TaskState::Canceled,
        }
    }

    /// The state's name in `version`.
    pub(super) fn name(self, version: Version) -> &'static str {
        match (version, self) {
            (Version::V1, TaskState::Submitted) => "TASK_STATE_SUBMITTED",
            (Version::V1, TaskState::Working) => "TASK_STATE_WORKING",
            (Version::V1, TaskState::InputRequired) => "TASK_STATE_INPUT_REQUIRED",
            (Version::V1, TaskState::Completed) => "TASK_STATE_COMPLETED",
            (Version::V1, TaskState::Failed) => "TASK_STATE_FAILED",
            (Version::V1, TaskState::Canceled) => "TASK_STATE_CANCELED",
            (Version::V03, TaskState::Submitted) => "submitted",
            (Version::V03, TaskState::Working) => "working",
            (Version::V03, TaskState::InputRequired) => "input-required",
            (Version::V03, TaskState::Completed) => "completed",
            (Version::V03, TaskState::Failed) => "failed",
            (Version::V03, TaskState::Canceled) => "canceled",
        }
    }

    /// Whether the task will not change any more through A2A.
    pub(super) fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled
        )
    }
}

/// The task object of `view` in `version`'s form.
pub(super) fn task(view: &RunView, version: Version, fresh: bool) -> Value {
    let state = TaskState::of(view, fresh);
    let id = view.run_id.as_str();
    let mut status = Map::new();
    status.insert("state".into(), json!(state.name(version)));
    if let Some(text) = status_text(view, state) {
        status.insert("message".into(), agent_message(id, &text, version));
    }
    let mut metadata = json!({"skill": view.name});
    if state == TaskState::InputRequired
        && let Some(checkpoint) = &view.checkpoint
    {
        metadata["checkpoint"] = json!(checkpoint);
    }
    let mut task = json!({
        "id": id,
        "contextId": id,
        "status": status,
        "metadata": metadata,
    });
    if state == TaskState::Completed {
        let result = view.result.clone().unwrap_or(Value::Null);
        task["artifacts"] = json!([{
            "artifactId": "result",
            "name": "result",
            "description": "the workflow's result, as JSON",
            "parts": [text_part(&result.to_string(), version, true)],
        }]);
    }
    if version == Version::V03 {
        task["kind"] = json!("task");
    }
    task
}

/// What the status message says: the failure, why the run stopped, or what it waits for.
fn status_text(view: &RunView, state: TaskState) -> Option<String> {
    match state {
        TaskState::Failed | TaskState::Canceled => view.error.clone(),
        TaskState::Submitted => view
            .position
            .map(|position| format!("queued for a free slot, at position {position}")),
        TaskState::InputRequired => view
            .checkpoint
            .as_ref()
            .map(|checkpoint| {
                let prompt = &checkpoint.prompt;
                format!(
                    "{prompt} (the run waits at this checkpoint: answer it with a message \
                     whose taskId is this task's)"
                )
            })
            .or_else(|| view.error.clone()),
        _ => None,
    }
}

fn agent_message(task_id: &str, text: &str, version: Version) -> Value {
    let mut message = json!({
        "messageId": format!("{task_id}-status"),
        "taskId": task_id,
        "contextId": task_id,
        "parts": [text_part(text, version, false)],
    });
    match version {
        Version::V1 => message["role"] = json!("ROLE_AGENT"),
        Version::V03 => {
            message["role"] = json!("agent");
            message["kind"] = json!("message");
        }
    }
    message
}

fn text_part(text: &str, version: Version, is_json: bool) -> Value {
    match version {
        Version::V1 if is_json => json!({"text": text, "mediaType": "application/json"}),
        Version::V1 => json!({"text": text}),
        Version::V03 => json!({"kind": "text", "text": text}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunId;
    use crate::serve::view::CallCounts;

    fn view(state: &'static str) -> RunView {
        RunView {
            run_id: RunId::parse("run-abc").expect("a run id"),
            name: "echo".into(),
            state,
            position: None,
            step: None,
            step_index: None,
            step_total: None,
            reached: Vec::new(),
            result: Some(json!({"echoed": "hi"})),
            error: Some("stopped by the caller".into()),
            resumable: None,
            checkpoint: None,
            calls: CallCounts::default(),
            generation: 1,
            holder: None,
        }
    }

    #[test]
    fn states_follow_the_lifecycle_in_both_spellings() {
        let working = view("working");
        assert_eq!(TaskState::of(&working, true), TaskState::Submitted);
        assert_eq!(TaskState::of(&working, false), TaskState::Working);
        let cases = [
            (
                "input_required",
                "TASK_STATE_INPUT_REQUIRED",
                "input-required",
            ),
            ("completed", "TASK_STATE_COMPLETED", "completed"),
            ("failed", "TASK_STATE_FAILED", "failed"),
            ("canceled", "TASK_STATE_CANCELED", "canceled"),
        ];
        for (run_state, v1, v03) in cases {
            let state = TaskState::of(&view(run_state), false);
            assert_eq!(state.name(Version::V1), v1);
            assert_eq!(state.name(Version::V03), v03);
        }
        assert_eq!(TaskState::Submitted.name(Version::V03), "submitted");
    }

    #[test]
    fn a_completed_task_carries_the_result_json_as_its_artifact() {
        let completed = view("completed");
        let v1 = task(&completed, Version::V1, false);
        assert_eq!(v1["status"]["state"], "TASK_STATE_COMPLETED");
        let text = v1["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"echoed": "hi"})
        );
        assert!(v1.get("kind").is_none());
        let v03 = task(&completed, Version::V03, false);
        assert_eq!(v03["kind"], "task");
        assert_eq!(v03["artifacts"][0]["parts"][0]["kind"], "text");
        assert_eq!(v03["id"], v03["contextId"]);
    }

    #[test]
    fn a_failed_task_says_why_and_has_no_artifact() {
        let failed = task(&view("failed"), Version::V03, false);
        assert!(failed.get("artifacts").is_none());
        let message = &failed["status"]["message"];
        assert_eq!(message["role"], "agent");
        assert_eq!(message["parts"][0]["text"], "stopped by the caller");
        let v1 = task(&view("canceled"), Version::V1, false);
        assert_eq!(v1["status"]["message"]["role"], "ROLE_AGENT");
    }
}
