//! What status sees of a live generation: [`LiveView`], written by the driver as calls start
//! and settle (and around each of its steps, `driver/live.rs`), read by status, the manager's
//! `live-status` and cancel errors. It lives with status, its reader, so that the driver
//! depends on status and never the other way round.

use std::collections::BTreeMap;

use crate::model::Usage;

/// What status shows of a live generation. The driver writes it as calls start and settle;
/// the engine reads it for `status`, `live-status` and cancel errors.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveView {
    /// The root scope's phase, newer than the run row's.
    pub current_phase: Option<String>,
    /// The run's usage including calls settled in this generation.
    pub usage: Usage,
    /// Calls not yet settled: index → (label, phase, model, "queued"|"waiting"|"running").
    pub calls: BTreeMap<u32, LiveCall>,
    /// The latest progress of any call, status's `latestActivity`.
    pub latest_activity: Option<LatestActivity>,
    /// How many non-checkpoint rows the generation has written, so status need not count
    /// them in the store; `None` in the dry run and in a view another process reported.
    pub settled_calls: Option<u64>,
    /// Changes around every step of the driver that may change what status shows (a store
    /// write of the run, a change of this view): odd from the step's start to its end, and
    /// odd before the driver's loop begins and after it ends. An answer built from this
    /// view and the store while it stayed at one even value is the answer a fresh build
    /// would give until it moves, which is what lets `status` keep a live run's answer.
    pub revision: u64,
}

/// Status's `latestActivity`: the call that last reported progress, and its latest text or
/// tool. Kept as these members (not a JSON value) because the driver replaces it at every
/// progress event; `null` where the call has neither.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatestActivity {
    pub call_index: u32,
    pub label: String,
    pub latest_text: Option<String>,
    pub last_tool_name: Option<String>,
}

impl LiveView {
    /// A view whose generation is not stepping yet (`revision` odd).
    pub(crate) fn starting() -> LiveView {
        LiveView {
            revision: 1,
            ..LiveView::default()
        }
    }
}

/// One call of a [`LiveView`].
#[derive(Clone, Debug)]
pub(crate) struct LiveCall {
    /// The call's label, as status and cancel errors name it.
    pub label: String,
    /// The phase the call runs in.
    pub phase: Option<String>,
    /// The model shown: the resolved model, else the route's spec.
    pub model: Option<String>,
    /// The backend the call was routed to.
    pub backend_id: Option<String>,
    /// `"queued"` until the call holds a permit of the run's concurrency, then `"running"`,
    /// or `"waiting"` while its backend's concurrency cap holds it back.
    pub state: &'static str,
    /// What a `"waiting"` call waits for: "a claude slot (4 in use)".
    pub waiting_for: Option<String>,
    /// The call's effective per-attempt timeout.
    pub timeout_ms: u64,
    /// The attempt under way (or waited for after a failed one), from 1.
    pub attempt: u32,
}
