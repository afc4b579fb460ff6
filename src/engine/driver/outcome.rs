//! What a generation hands back: its [`Outcome`] (how it ended, with what it leaves the
//! run record), and for the preparation dry run every [`DryCall`] the script made.

use serde_json::Value;

use crate::engine::routing::Route;
use crate::model::{AuthContext, CallKind, CheckpointWait, PauseReason, RunStatus, Usage};

/// One call of the dry run, for routing checks, probes and warnings.
#[derive(Clone, Debug)]
pub(crate) struct DryCall {
    pub index: u32,
    pub kind: CallKind,
    pub label: String,
    pub phase: Option<String>,
    pub route: Result<Route, String>,
    pub mode: Option<String>,
    pub config_options: Vec<(String, Value)>,
    /// Whether the call runs in a worktree of its own.
    pub isolated: bool,
    pub effort: Option<crate::engine::effort::Effort>,
}

/// How a generation ended.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub status: RunStatus,
    pub pause_reason: Option<PauseReason>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub result: Option<Value>,
    pub auth_context: Option<AuthContext>,
    pub reset_hint: Option<String>,
    /// When a usage limit lifts (Unix ms), if the provider said.
    pub reset_at: Option<i64>,
    pub checkpoint_context: Option<CheckpointWait>,
    pub usage: Usage,
    pub current_phase: Option<String>,
    pub last_event_seq: u64,
    pub next_settlement: u64,
    /// Dry run only: every call the script made.
    pub dry_calls: Vec<DryCall>,
    /// Phases the script entered.
    pub phases_entered: Vec<String>,
    /// A store write failed: the run could not be recorded faithfully.
    pub store_error: Option<String>,
    /// Another execution took the lease over (a renewal or a write was fenced): the run is
    /// no longer this generation's, so its outcome must not be written either.
    pub lease_lost: bool,
    /// What the script asked of its host (calls, logs, phases) before it settled: a dry run
    /// with none computed its result alone, which preparation can hand on ([`settle_known`]).
    pub script_events: u64,
    /// The generation's calls and their spend, for the run's summary.
    pub tally: super::Tally,
    /// The generation's last events and call count, written with its outcome
    /// (`Endings::end_generation`); `None` when nothing of it may be written (the dry run, a
    /// lost lease).
    pub closing: Option<Closing>,
    /// The context of the generation's run span, when telemetry records it: the first
    /// traced generation's is kept with the run, and later generations' spans are its
    /// children.
    pub trace: Option<crate::telemetry::TraceContext>,
}

/// What a generation leaves to the write of its outcome, so both are one transaction: the
/// events buffered after its last row, and its call count when it wrote rows.
#[derive(Clone, Debug, Default)]
pub(crate) struct Closing {
    pub events: Vec<crate::model::EventRecord>,
    pub call_total: Option<(u32, u64)>,
}

/// The phases of `entered` (each title with its place in the order of first entry) in that
/// order.
pub(super) fn in_order(entered: std::collections::HashMap<String, usize>) -> Vec<String> {
    let mut places: Vec<(usize, String)> = entered
        .into_iter()
        .map(|(title, place)| (place, title))
        .collect();
    places.sort_unstable_by_key(|(place, _)| *place);
    places.into_iter().map(|(_, title)| title).collect()
}
