//! The status object of the async run API (`run/status`, `mhl_run_status`, and the answers of
//! start, resume, cancel and list): our run mapped onto the original serve mode's shape.
//!
//! | field | when | from |
//! |---|---|---|
//! | `runId`, `name` | always | the run, its workflow |
//! | `state` | always | `queued` (waiting for a slot), `working` (pending or running), `input_required` (paused at a checkpoint or for setup), `completed`, `failed` (failed, or its replica's lease lapsed), `canceled` (stopped, or paused for any other reason) |
//! | `position` | `queued` | its 1-based place among the starts waiting |
//! | `step`, `stepIndex`, `stepTotal` | once a declared phase started | `meta.phases`: the current phase, its 1-based place, their count |
//! | `reached` | always | the declared phases up to the current one |
//! | `result` | `completed` | the value the script returned (the original called it `vars`) |
//! | `error` | `failed`, `canceled` | the failure message |
//! | `resumable` | not `working`, not `completed` | whether `run/resume` can continue it |
//! | `checkpoint` | `input_required` at a checkpoint | `{callIndex, hash, prompt, kind, choices}`: answer it with `checkpointReplies` |
//! | `calls` | always | `{running}` live, `{settled}` otherwise |
//! | `generation` | always | 1, plus one per resume |
//! | `holder` | `working`, while a replica holds the run's lease | `{host, instance, pid}`: which replica executes it |
//!
//! A live run's view is built from the engine's memory alone ([`RunView::live`]); any other
//! from its stored record ([`RunView::stored`]).

use serde::Serialize;
use serde_json::Value;

use crate::engine::manager::{LEASE_EXPIRED, LiveStatus};
use crate::model::{
    CheckpointWait, PauseReason, QueuedEntry, QueuedState, RunId, RunRecord, RunStatus,
};

/// The status object, serialised in this field order.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunView {
    pub run_id: RunId,
    pub name: String,
    pub state: &'static str,
    /// `queued`: its 1-based place among the starts waiting for a slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_total: Option<usize>,
    pub reached: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointWait>,
    pub calls: CallCounts,
    pub generation: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
}

/// `holder`: the replica executing a run, as its lease names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Holder {
    /// Its host name (`null` where it could not be read).
    pub host: Option<String>,
    /// Its instance id: a uuid per serve process.
    pub instance: String,
    pub pid: u32,
}

impl Holder {
    pub(crate) fn of(lease: &crate::model::Lease) -> Holder {
        Holder {
            host: lease.host.clone(),
            instance: lease.owner_id.clone(),
            pid: lease.pid,
        }
    }

    /// This process, for a run it executes.
    pub(crate) fn this_process(owner: &crate::engine::manager::Owner) -> Holder {
        Holder {
            host: crate::util::process::host_name(),
            instance: owner.owner_id.clone(),
            pid: owner.pid,
        }
    }
}

/// `calls`: what is known without reading every call.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CallCounts {
    /// Agent calls executing or queued now (live runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<usize>,
}

impl RunView {
    /// A run executing in this process, from memory only.
    pub(crate) fn live(
        run_id: &RunId,
        name: &str,
        phases: &[String],
        generation: u32,
        live: &LiveStatus,
    ) -> RunView {
        let mut view = RunView::bare(run_id, name, "working", generation);
        view.place(phases, live.current_phase.as_deref());
        view.calls.running = Some(live.calls.len());
        view
    }

    /// A run from its stored record (not executing here).
    pub(crate) fn stored(record: &RunRecord) -> RunView {
        let (state, resumable) = state_of(record);
        let mut view = RunView::bare(
            &record.run_id,
            &record.workflow_name,
            state,
            record.generation,
        );
        let phases: Vec<String> = record.phases.iter().map(|p| p.title.clone()).collect();
        view.place(&phases, record.current_phase.as_deref());
        view.resumable = resumable;
        match state {
            "completed" => {
                view.result = Some(record.result.clone().unwrap_or(Value::Null));
                // On completion every declared phase up to the last one entered was reached.
            }
            "input_required" => {
                view.checkpoint = record.checkpoint_context.clone();
                if view.checkpoint.is_none() {
                    view.error = Some(setup_message(record));
                }
            }
            "failed" | "canceled" => {
                view.error = Some(error_message(record));
            }
            _ => {}
        }
        view
    }

    /// A start in the queue: `queued` at its position, `working` while a replica starts it,
    /// or how it ended before it started (`canceled` or `failed`, not resumable: start it
    /// again).
    pub(crate) fn queued(entry: &QueuedEntry) -> RunView {
        let start = &entry.start;
        match &entry.state {
            QueuedState::Waiting { position } => {
                let mut view = RunView::bare(&start.run_id, &start.workflow, "queued", 0);
                view.position = Some(*position);
                view
            }
            // A replica is starting it: working, as a run being prepared is.
            QueuedState::Starting => RunView::bare(&start.run_id, &start.workflow, "working", 0),
            QueuedState::Ended { outcome, message } => {
                let mut view = RunView::bare(&start.run_id, &start.workflow, outcome.as_str(), 0);
                view.error = Some(message.clone());
                view.resumable = Some(false);
                view
            }
        }
    }

    fn bare(run_id: &RunId, name: &str, state: &'static str, generation: u32) -> RunView {
        RunView {
            run_id: run_id.clone(),
            name: name.to_owned(),
            state,
            position: None,
            step: None,
            step_index: None,
            step_total: None,
            reached: Vec::new(),
            result: None,
            error: None,
            resumable: None,
            checkpoint: None,
            calls: CallCounts::default(),
            generation,
            holder: None,
        }
    }

    /// `step`, `stepIndex`, `stepTotal` and `reached` from the declared phases.
    fn place(&mut self, phases: &[String], current: Option<&str>) {
        let Some(current) = current else {
            return;
        };
        let index = phases.iter().position(|title| title == current);
        self.step = Some(current.to_owned());
        if let Some(index) = index {
            self.step_index = Some(index + 1);
            self.step_total = Some(phases.len());
            self.reached = phases[..=index].to_vec();
        } else {
            self.reached = vec![current.to_owned()];
        }
    }
}

/// The state and `resumable` of a stored run.
fn state_of(record: &RunRecord) -> (&'static str, Option<bool>) {
    match record.status {
        RunStatus::Pending if record.setup.is_some() => ("input_required", Some(true)),
        RunStatus::Pending | RunStatus::Running => ("working", None),
        RunStatus::Completed => ("completed", None),
        RunStatus::Failed => ("failed", Some(true)),
        RunStatus::Aborted => ("canceled", Some(true)),
        // Between replicas the executing one stopped renewing its lease: the seed's "failed,
        // resumable".
        RunStatus::Paused if record.error_code.as_deref() == Some(LEASE_EXPIRED) => {
            ("failed", Some(true))
        }
        RunStatus::Paused => match record.pause_reason {
            Some(PauseReason::CheckpointRequired) => ("input_required", Some(true)),
            Some(PauseReason::AuthRequired) => ("input_required", Some(true)),
            _ => ("canceled", Some(true)),
        },
    }
}

fn error_message(record: &RunRecord) -> String {
    if let Some(message) = &record.error_message {
        return message.clone();
    }
    match (record.status, record.pause_reason) {
        (RunStatus::Paused, Some(reason)) => format!("the run paused ({})", reason.as_str()),
        _ => "the run was stopped".to_owned(),
    }
}

fn setup_message(record: &RunRecord) -> String {
    match (record.status, record.pause_reason) {
        (RunStatus::Paused, Some(PauseReason::AuthRequired)) => {
            "an agent needs credentials on the server; sign it in there, then resume the run"
                .to_owned()
        }
        _ => "the run waits for setup on the server (an approval or an agent's installation); \
              it cannot be answered through the run API"
            .to_owned(),
    }
}
