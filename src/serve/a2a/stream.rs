//! A task as a stream (`SendStreamingMessage` / `message/stream`, and `SubscribeToTask` /
//! `tasks/resubscribe`): the task first, then a status update each time its state or step
//! changes, the result artifact before the completed status, and the end of the stream at a
//! final or input-required state (0.3 marks that last update `final`). Push notifications
//! follow the same way to a final state only.
//!
//! The follower wakes on the engine's notices for the run (this replica executes it) and
//! once a second otherwise (another replica does), and reads the task through the run API
//! each time, so what it streams is what `GetTask` answers. It stops when the client goes
//! away (its next send fails); the channel to the connection is bounded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Version;
use super::task::{self, TaskState};
use crate::model::RunId;
use crate::serve::owners::OwnerKey;
use crate::serve::runs::RunApi;
use crate::serve::view::RunView;

/// Events queued for the connection before the follower waits for the client.
const BUFFER: usize = 8;
/// How often the follower reads the task without a notice (a run on another replica).
const POLL: Duration = Duration::from_secs(1);

/// Where a follower stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Until {
    /// At a final state or `input-required`: a stream, which the client reopens with a new
    /// message or a subscription.
    Interrupted,
    /// At a final state only: push notifications, which go on after a checkpoint's answer.
    Final,
}

impl Until {
    fn reached(self, state: TaskState) -> bool {
        state.is_final() || (self == Until::Interrupted && state == TaskState::InputRequired)
    }
}

/// Streams the task of `first` (just read, or just started when `fresh`) to the client of
/// JSON-RPC request `id`, until `until`.
pub(super) fn follow(
    api: Arc<RunApi>,
    owner: OwnerKey,
    (id, version): (Value, Version),
    first: RunView,
    fresh: bool,
    until: Until,
) -> mpsc::Receiver<Value> {
    let (sender, receiver) = mpsc::channel(BUFFER);
    // Subscribed before anything is read, so no change between the read and the wait is
    // missed.
    let notices = api.engine.subscribe();
    tokio::spawn(async move {
        let out = Out {
            sender,
            id,
            version,
            until,
        };
        let run_id = first.run_id.clone();
        let mut seen = Seen::of(&first, fresh);
        if !out
            .send(json!({"task": task::task(&first, version, fresh)}), "task")
            .await
            || until.reached(seen.state)
        {
            return;
        }
        follow_changes(&api, &owner, &run_id, &out, &mut seen, notices).await;
    });
    receiver
}

/// What the client was last told.
struct Seen {
    state: TaskState,
    step: Option<String>,
}

impl Seen {
    fn of(view: &RunView, fresh: bool) -> Seen {
        Seen {
            state: TaskState::of(view, fresh),
            step: view.step.clone(),
        }
    }
}

async fn follow_changes(
    api: &RunApi,
    owner: &OwnerKey,
    run_id: &RunId,
    out: &Out,
    seen: &mut Seen,
    mut notices: tokio::sync::broadcast::Receiver<crate::engine::events::RunNotice>,
) {
    let params = json!({"runId": run_id});
    loop {
        // Read first: a change between the caller's read and the subscription is seen now.
        let view = match api.status(owner, &params).await {
            Ok(view) => view,
            Err(error) => {
                let _ = out.error(&error.to_string()).await;
                return;
            }
        };
        let now = Seen::of(&view, false);
        if now.state != seen.state || now.step != seen.step {
            *seen = now;
            if seen.state == TaskState::Completed
                && !out.artifact(&task::task(&view, out.version, false)).await
            {
                return;
            }
            let done = out.until.reached(seen.state);
            if !out
                .status(&task::task(&view, out.version, false), done)
                .await
                || done
            {
                return;
            }
        }
        tokio::select! {
            _ = out.sender.closed() => return,
            _ = tokio::time::sleep(POLL) => {}
            notice = wait_for(&mut notices, run_id) => if notice.is_none() {
                // The engine is going away: the poll alone is left.
                tokio::time::sleep(POLL).await;
            },
        }
    }
}

/// Returns at the next notice of `run_id` (or when notices were lost to lag: something may
/// have changed); `None` when the channel closed.
async fn wait_for(
    notices: &mut tokio::sync::broadcast::Receiver<crate::engine::events::RunNotice>,
    run_id: &RunId,
) -> Option<()> {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match notices.recv().await {
            Ok(notice) if notice.run_id() == run_id => return Some(()),
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return Some(()),
            Err(RecvError::Closed) => return None,
        }
    }
}

/// The stream's sending side, shaping each event for the version.
struct Out {
    sender: mpsc::Sender<Value>,
    id: Value,
    version: Version,
    until: Until,
}

impl Out {
    /// Sends one result; whether the client is still there. `kind` names the 1.0 member
    /// (`task`, `statusUpdate`, `artifactUpdate`) whose value `payload` holds.
    async fn send(&self, payload: Value, kind: &str) -> bool {
        let result = match self.version {
            Version::V1 => payload,
            Version::V03 => payload[kind].clone(),
        };
        let message = json!({"jsonrpc": "2.0", "id": self.id, "result": result});
        self.sender.send(message).await.is_ok()
    }

    async fn status(&self, task: &Value, last: bool) -> bool {
        let mut update = json!({
            "taskId": task["id"],
            "contextId": task["contextId"],
            "status": task["status"],
        });
        if self.version == Version::V03 {
            update["kind"] = json!("status-update");
            update["final"] = json!(last);
        }
        self.send(json!({"statusUpdate": update}), "statusUpdate")
            .await
    }

    async fn artifact(&self, task: &Value) -> bool {
        let mut update = json!({
            "taskId": task["id"],
            "contextId": task["contextId"],
            "artifact": task["artifacts"][0],
            "lastChunk": true,
        });
        if self.version == Version::V03 {
            update["kind"] = json!("artifact-update");
        }
        self.send(json!({"artifactUpdate": update}), "artifactUpdate")
            .await
    }

    /// An error ends the stream as a JSON-RPC error event.
    async fn error(&self, message: &str) -> bool {
        let event = json!({"jsonrpc": "2.0", "id": self.id, "error": {
            "code": -32603,
            "message": message,
        }});
        self.sender.send(event).await.is_ok()
    }
}
