//! What callers hand the engine and what it answers: run and resume requests, the
//! admission acknowledgement, and the answers of status, stop, pause, setup and permission
//! responses and result pages. The answers serialise to the JSON `docs/api.md` documents,
//! fields in their order.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::prepare::ScriptInput;
use crate::engine::status::StatusDocument;
use crate::model::{Limits, RunId, RunStatus, ScriptSource, SetupWait};

/// Caller overrides of the run limits (clamped), and the spending limits the caller sets
/// (checked by `crate::budget::limits` where they are read; `None` each where unset).
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitOverrides {
    pub max_agents: Option<i64>,
    pub concurrency: Option<i64>,
    pub agent_retries: Option<i64>,
    pub budget: crate::budget::SpendLimits,
    /// `Some(false)`: the owner turns the automatic resume at a usage reset off for this run
    /// (`--no-auto-resume`); `None` keeps what the run has.
    pub auto_resume: Option<bool>,
    /// The caller confirmed the run's size (the CLI's `--yes` or a question answered yes), so
    /// a run above the confirmation threshold starts.
    pub confirmed: bool,
}

/// A request to start a run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub project_dir: PathBuf,
    pub script: ScriptInput,
    pub args: Value,
    pub limits: LimitOverrides,
    /// An opaque tag of whoever asks, stored with the run (`RunRecord::caller`) and never
    /// interpreted by the engine: the folder server puts its owner key here
    /// (`session:<id>`, `principal:<name>` or `anonymous`). `None` for front ends without
    /// owners.
    pub caller: Option<String>,
    /// The caller's W3C trace context (a `traceparent` in the MCP request's `_meta`): the
    /// run's first generation becomes a span of the caller's trace. Never stored.
    pub trace: Option<crate::telemetry::TraceContext>,
}

/// A request to continue a run under the same id.
#[derive(Clone, Debug, Default)]
pub struct ResumeRequest {
    pub run_id: Option<RunId>,
    /// Checkpoint answers by call index.
    pub checkpoint_replies: Vec<(u32, Value)>,
    pub limits: LimitOverrides,
    /// The caller's idempotency key; a repeated key returns the first answer.
    pub operation_id: Option<String>,
    /// The due moment of the automatic resume this request fires (`src/timers/`); `None` for
    /// a resume by the run's owner, which cancels any automatic one.
    pub timer: Option<i64>,
    /// Calls to redo (`engine::rerun`): their recorded answers are set aside and they run
    /// live; empty for a plain resume.
    pub rerun: Vec<crate::engine::rerun::RerunTarget>,
}

/// The acknowledgement of an admitted run or resume.
#[derive(Clone, Debug)]
pub struct Admission {
    pub run_id: RunId,
    pub status: RunStatus,
    pub script_source: ScriptSource,
    pub script_file: PathBuf,
    pub limits: Limits,
    pub setup: Option<SetupWait>,
    pub warnings: Vec<String>,
    /// The run's size from its dry run (`engine::estimate`'s `size` object); `None` for a
    /// resume.
    pub size: Option<Value>,
    /// Resume only: `{scriptRevised, generation, operationId}`.
    pub continuation: Option<Value>,
}

/// What `live-status` sends of a run this process executes: its phase and live calls.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveStatus {
    pub current_phase: Option<String>,
    pub calls: Vec<LiveCallStatus>,
}

/// One live call of a [`LiveStatus`].
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveCallStatus {
    pub index: u32,
    pub label: String,
    pub phase: Option<String>,
    pub model: Option<String>,
    pub backend_id: Option<String>,
    pub timeout_ms: u64,
    /// The attempt under way, from 1.
    pub attempt: u32,
    /// `queued`, `waiting` (for a slot of its backend's concurrency cap) or `running`.
    pub status: &'static str,
    /// What a `waiting` call waits for: "a claude slot (4 in use)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// The answer to `stop`: the run's status after the stop, with what the stop did.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopAnswer {
    #[serde(flatten)]
    pub status: StatusDocument,
    /// Whether this request stopped the run (whole-run stops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<bool>,
    /// The run had ended before the stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub already_terminal: Option<bool>,
    /// The call a single-call cancel ended: `{callIndex}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<Value>,
    /// A stop or cancel carried out (or still to be carried out) by the run's owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlState>,
}

impl StopAnswer {
    pub(super) fn of(status: StatusDocument) -> StopAnswer {
        StopAnswer {
            status,
            stopped: None,
            already_terminal: None,
            cancelled: None,
            control: None,
        }
    }
}

/// `control`: the state of a stop or cancel that goes through the run's owner, as the
/// answer shows it and as its intent is acknowledged.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlState {
    /// `pending` (the owner has not carried it out yet) or `settled`.
    pub state: &'static str,
    /// The intent's operation id: a retry reuses it.
    pub operation_id: String,
    /// When the intent was first written (an ISO time, or Unix ms for a cancel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub already_terminal: Option<bool>,
    /// The `control.owner` document of the process that holds (or held) the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Value>,
    /// Stopped here because nobody executed the run any more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold: Option<bool>,
    /// Why it is still pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ControlState {
    pub(super) fn pending(operation_id: String) -> ControlState {
        ControlState {
            state: "pending",
            operation_id,
            requested_at: None,
            stopped: None,
            already_terminal: None,
            owner: None,
            cold: None,
            reason: None,
        }
    }

    /// A settled whole-run stop: `stopped` unless the run had already ended.
    pub(super) fn settled(operation_id: String, already_terminal: bool) -> ControlState {
        ControlState {
            state: "settled",
            stopped: Some(!already_terminal),
            already_terminal: Some(already_terminal),
            ..ControlState::pending(operation_id)
        }
    }

    /// As an intent acknowledgement.
    pub(super) fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The answer to `pause`: the run's status with whether it paused.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseAnswer {
    #[serde(flatten)]
    pub status: StatusDocument,
    /// Whether a pause was asked of an executing run (false: there was nothing to pause).
    pub pause_requested: bool,
    /// Whether the run is paused now.
    pub paused: bool,
}

/// The answer of the process executing a run to a forwarded whole-run stop.
#[derive(Clone, Debug, Serialize)]
#[serde(
    tag = "outcome",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum StopRequested {
    /// The run is settled: stopped by this request, or already over.
    Settled {
        stopped: bool,
        already_terminal: bool,
        status: RunStatus,
        owner: Value,
    },
    /// The run is still stopping; the intent is acknowledged once it has.
    Stopping { operation_id: String, owner: Value },
}

/// The answer to a setup (backend-approval) response.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupAnswer {
    /// Always `setup-response`.
    pub action: String,
    pub run_id: RunId,
    pub setup_id: String,
    /// The run's status after the answer.
    pub status: RunStatus,
    /// Whether the backends were approved.
    pub accepted: bool,
    /// `setup_declined` for an answer that did not approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to a permission response.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAnswer {
    /// Always `permissions-response`.
    pub action: &'static str,
    pub run_id: RunId,
    pub permission_id: String,
    pub accepted: bool,
}

/// One page of a completed run's exact result JSON (engine.md 6.6).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultPage {
    /// Always `result`.
    pub action: &'static str,
    pub run_id: RunId,
    /// Always `completed`: only completed runs have a result.
    pub status: &'static str,
    pub result_uri: String,
    pub events_uri: String,
    pub mime_type: &'static str,
    pub encoding: &'static str,
    pub total_bytes: usize,
    pub offset: usize,
    pub end_offset: usize,
    pub has_more: bool,
    /// The bytes `offset..endOffset`, cut at character boundaries.
    pub chunk: String,
}
