//! What status sees of a live generation ([`LiveView`]), and the marks the driver puts
//! around its steps so that status may keep an answer between them (`LiveView::revision`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::Driver;
use crate::model::Usage;
use crate::util::sync::Lock;

/// What status shows of a live generation. The driver writes it as calls start and settle;
/// the engine reads it for `status`, `live-status` and cancel errors.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveView {
    /// The root scope's phase, newer than the run row's.
    pub current_phase: Option<String>,
    /// The run's usage including calls settled in this generation.
    pub usage: Usage,
    /// Calls not yet settled: index → (label, phase, model, "queued"|"running").
    pub calls: BTreeMap<u32, LiveCall>,
    /// The latest progress of any call, status's `latestActivity`.
    pub latest_activity: Option<Value>,
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
    /// `"queued"` until the call holds a concurrency permit, then `"running"`.
    pub state: &'static str,
    /// The call's effective per-attempt timeout.
    pub timeout_ms: u64,
}

impl Driver {
    /// Marks the start of a step that may change what status shows (see
    /// [`LiveView::revision`]).
    pub(super) fn step_begins(&self) {
        self.setup.live.locked().revision |= 1;
    }

    /// Marks its end: the revision moves on to the next even value.
    pub(super) fn step_ends(&self) {
        let mut view = self.setup.live.locked();
        view.revision = (view.revision | 1) + 1;
    }

    /// Runs a synchronous step between its marks.
    pub(super) fn step(&mut self, work: impl FnOnce(&mut Driver)) {
        self.step_begins();
        work(self);
        self.step_ends();
    }
}
