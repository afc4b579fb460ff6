//! The run's spending limits at preparation: the caller's arguments over the script's `meta`,
//! and the refusal of a limit in a unit that a backend the dry run routed to cannot report.
//!
//! Which backends report cost: only the built-in `claude` backend (claude-agent-acp sends
//! `cost` with its `usage_update`s). The others report tokens and no cost, and a backend
//! defined by the host or the script cannot be known to report any, so a `costBudgetUsd`
//! over them is refused at admission rather than accepted and never reached. Every backend
//! reports token usage as far as the engine can tell, so `tokenBudget` is never refused here.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::Rejection;
use crate::budget::{self, Budget, RunBudget, SpendLimits};
use crate::engine::driver::Outcome;
use crate::engine::runner::{BackendOrigin, BackendSpec};
use crate::model::CallKind;

/// The run's limits: each one the caller's arguments set, else the one `meta` sets.
pub(super) fn requested(arguments: SpendLimits, meta: &Value) -> Result<SpendLimits, Rejection> {
    let empty = Map::new();
    let fields = meta.as_object().unwrap_or(&empty);
    let from_meta = budget::limits(fields, "meta.")
        .map_err(|error| Rejection::parse(format!("SCRIPT_VALIDATION_ERROR: {error}")))?;
    Ok(arguments.or(from_meta))
}

/// Refuses `limits` when a backend the dry run routed an agent call to cannot report the
/// unit of one of them.
pub(super) fn check_units(limits: SpendLimits, outcome: &Outcome) -> Result<(), Rejection> {
    let routed: BTreeSet<(String, bool)> = outcome
        .dry_calls
        .iter()
        .filter(|call| call.kind == CallKind::Agent)
        .filter_map(|call| call.route.as_ref().ok())
        .map(|route| (route.backend.id.clone(), reports_cost(&route.backend)))
        .collect();
    let routed: Vec<(String, bool)> = routed.into_iter().collect();
    RunBudget { limits }
        .check_units(&routed)
        .map_err(|refusal| Rejection::routing(refusal.to_string()))
}

/// Whether `backend` reports what its calls cost (see the module's text).
pub(crate) fn reports_cost(backend: &BackendSpec) -> bool {
    backend.origin == BackendOrigin::Builtin && backend.id == "claude"
}
