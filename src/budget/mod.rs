//! Run budgets: the limits on what a run may spend (tokens as the agents report usage, US
//! dollars where they report cost) and the decisions the engine takes from them. Nothing
//! enforces a budget yet: `status.limits.tokenBudget` is `null` and no argument sets it.
//!
//! A budget is policy over numbers the engine already journals, not a port to the world:
//! spend is the sum of the settled calls' usage, which the store keeps with each call row, so
//! it survives crashes and restarts exactly, and a replayed call adds nothing because it
//! writes no new usage. The engine will call a `Budget` at three points:
//! - at admission and at `resume` (which may raise the limits), `Budget::check_units`
//!   refuses a limit whose unit a routed backend cannot report (a cost limit over an adapter
//!   that reports no cost), so no limit is accepted and ignored;
//! - before the driver starts a live agent call, `Budget::may_start`: once the spend has
//!   reached a limit no new call starts, and the run pauses with its own pause reason naming
//!   the limit, the spend and the limit;
//! - after each settled call, `Budget::crossed` names the limits whose warning threshold
//!   the call crossed, for the one warning event each.
//!
//! Invariants: calls already running when a limit is reached finish, and their usage counts;
//! a pause for budget is durable like any pause; a limit never lowers what was already spent.
//!
//! This module imports nothing from the engine, the store or any server: it reads the run
//! model's usage and answers with plain values.

use crate::model::Usage;

/// The share of a limit at which its warning fires, once per limit.
pub const WARNING_SHARE: f64 = 0.8;

/// A run's spending limits; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpendLimits {
    /// Total tokens, as the agents report usage (`tokenBudget`).
    pub tokens: Option<u64>,
    /// US dollars, where the agents report cost (`costBudgetUsd`).
    pub cost_usd: Option<f64>,
}

/// Which limit a decision is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    Tokens,
    CostUsd,
}

/// A limit the spend has reached: the pause says which, the spend and the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exhausted {
    pub kind: LimitKind,
    pub spent: f64,
    pub limit: f64,
}

/// A limit set in a unit that a routed backend cannot report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitRefusal {
    pub kind: LimitKind,
    /// The backends that report no usage of that unit.
    pub backends: Vec<String>,
}

/// The decisions the engine takes from a run's limits.
pub trait Budget {
    /// Refuses a limit in a unit one of `backends` cannot report; each backend comes with its
    /// id and whether it reports cost.
    fn check_units(&self, backends: &[(String, bool)]) -> Result<(), UnitRefusal>;

    /// Whether a new live agent call may start after `spent`.
    fn may_start(&self, spent: &Usage) -> Result<(), Exhausted>;

    /// The limits whose [`WARNING_SHARE`] lies in `(before, after]`: the call that moved the
    /// spend from `before` to `after` crossed their threshold.
    fn crossed(&self, before: &Usage, after: &Usage) -> Vec<LimitKind>;
}
