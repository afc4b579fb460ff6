//! Run budgets: the limits on what a run may spend (tokens as the agents report usage, US
//! dollars where they report cost) and the decisions the engine takes from them. This room is
//! the policy; the engine consults it: the `workflow` tool and the CLI read the limits
//! ([`limits`]), preparation merges them with `meta` and checks their units against the dry
//! run's routes (`engine::prepare::budget`), resume changes them ([`resume_limits`]), the
//! driver asks [`RunBudget`] before each live call and after each settled one
//! (`engine::driver::budget`) and hands the script its [`script_view`], and status shows the
//! limit a `budget` pause reached. The limits live in `model::Limits` (`tokenBudget`,
//! `costBudgetUsd`), stored with the run.
//!
//! A budget is policy over numbers the engine already journals, not a port to the world:
//! spend is the sum of the settled calls' usage ([`settle`]), which the store keeps with each
//! call row, so it survives crashes and restarts exactly, and a replayed call adds nothing.
//! The engine calls a [`Budget`] (a [`RunBudget`]) at three points:
//! - at admission and at `resume`, `Budget::check_units` refuses a limit whose unit a routed
//!   backend cannot report (a cost limit over an adapter that reports no cost), so no limit
//!   is accepted and ignored;
//! - before the driver starts a live agent call, `Budget::may_start`: once the spend has
//!   reached a limit (spend ≥ limit) no new call starts, and the run pauses with its own pause
//!   reason naming the limit, the spend and the limit ([`Exhausted`]'s text);
//! - after each settled call, `Budget::crossed` names the limits whose 80% threshold the call
//!   crossed, for the one warning event each.
//!
//! Rules this room decides:
//! - Limits come from the `workflow` tool's flat `run`/`resume` arguments `tokenBudget` and
//!   `costBudgetUsd` and from the script's `meta` ([`limits`]); an argument overrides `meta`.
//!   `tokenBudget` is a positive integer, `costBudgetUsd` a positive finite number; `null`
//!   or absent is no limit.
//! - Token spend is a usage's `totalTokens`, or input plus output when an agent reports no
//!   total. Cost spend is the sum of reported `costUsd` (zero when none was reported).
//! - `resume` sets a limit it names and keeps the others ([`resume_limits`]). The new value
//!   must lie above what the run has already spent, since a limit at or below the spend would
//!   pause the run again before any call; it may be higher or lower than the old limit. A
//!   limit cannot be removed on resume, only raised.
//! - The 80% warning is derived from the spend before and after a call, never from memory,
//!   so it fires once per limit across restarts and replays; raising a limit on resume puts
//!   its threshold at 80% of the new value, where it fires once more.
//!
//! Invariants: calls already running when a limit is reached finish, and their usage counts;
//! a pause for budget is durable like any pause; a limit never lowers what was already spent.
//!
//! This module imports nothing from the engine, the store or any server: it reads the run
//! model's usage and answers with plain values.

mod limits;
mod view;

#[cfg(test)]
mod tests;

pub use limits::{LimitError, limits, resume_limits};
pub use view::script_view;

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

/// The budget of one run: its limits, asked with the spend the journal holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunBudget {
    pub limits: SpendLimits,
}

/// The run's spend after one settled call: `before` plus the call's usage, or `before`
/// unchanged for a replayed call, whose usage was counted when it first ran.
pub fn settle(before: &Usage, call: &Usage, replayed: bool) -> Usage {
    let mut after = *before;
    if !replayed {
        after.add(call);
    }
    after
}

/// Tokens spent according to `usage`: the reported total, or input plus output when an agent
/// reports the parts without a total.
pub fn spent_tokens(usage: &Usage) -> u64 {
    if usage.total_tokens > 0 {
        usage.total_tokens
    } else {
        usage.input_tokens.saturating_add(usage.output_tokens)
    }
}

/// US dollars spent according to `usage`; zero when no call reported cost.
pub fn spent_cost_usd(usage: &Usage) -> f64 {
    usage.cost_usd.unwrap_or(0.0)
}

impl LimitKind {
    /// The argument and `meta` field that sets this limit.
    pub fn field(self) -> &'static str {
        match self {
            LimitKind::Tokens => "tokenBudget",
            LimitKind::CostUsd => "costBudgetUsd",
        }
    }
}

impl SpendLimits {
    /// The spending limits a run's limits hold.
    pub fn of(limits: &crate::model::Limits) -> SpendLimits {
        SpendLimits {
            tokens: limits.token_budget,
            cost_usd: limits.cost_budget_usd,
        }
    }

    /// `limits` with these as its spending limits.
    pub fn set_on(self, limits: crate::model::Limits) -> crate::model::Limits {
        crate::model::Limits {
            token_budget: self.tokens,
            cost_budget_usd: self.cost_usd,
            ..limits
        }
    }

    /// Whether no limit is set.
    pub fn is_none(&self) -> bool {
        self.tokens.is_none() && self.cost_usd.is_none()
    }

    /// The limits as `status.limits` echoes them: `{tokenBudget, costBudgetUsd}`, `null`
    /// where unset.
    pub fn echo(&self) -> serde_json::Value {
        serde_json::json!({"tokenBudget": self.tokens, "costBudgetUsd": self.cost_usd})
    }

    /// Each set limit with its spend according to `usage`, tokens first.
    fn with_spend(&self, usage: &Usage) -> Vec<(LimitKind, f64, f64)> {
        let mut pairs = Vec::with_capacity(2);
        if let Some(limit) = self.tokens {
            pairs.push((LimitKind::Tokens, spent_tokens(usage) as f64, limit as f64));
        }
        if let Some(limit) = self.cost_usd {
            pairs.push((LimitKind::CostUsd, spent_cost_usd(usage), limit));
        }
        pairs
    }
}

impl Budget for RunBudget {
    fn check_units(&self, backends: &[(String, bool)]) -> Result<(), UnitRefusal> {
        if self.limits.cost_usd.is_none() {
            return Ok(());
        }
        let silent: Vec<String> = backends
            .iter()
            .filter(|(_, reports_cost)| !reports_cost)
            .map(|(id, _)| id.clone())
            .collect();
        if silent.is_empty() {
            Ok(())
        } else {
            Err(UnitRefusal {
                kind: LimitKind::CostUsd,
                backends: silent,
            })
        }
    }

    fn may_start(&self, spent: &Usage) -> Result<(), Exhausted> {
        match self
            .limits
            .with_spend(spent)
            .into_iter()
            .find(|(_, spent, limit)| spent >= limit)
        {
            Some((kind, spent, limit)) => Err(Exhausted { kind, spent, limit }),
            None => Ok(()),
        }
    }

    fn crossed(&self, before: &Usage, after: &Usage) -> Vec<LimitKind> {
        let before = self.limits.with_spend(before);
        self.limits
            .with_spend(after)
            .into_iter()
            .zip(before)
            .filter(|((_, after, limit), (_, before, _))| {
                let threshold = limit * WARNING_SHARE;
                *before < threshold && threshold <= *after
            })
            .map(|((kind, _, _), _)| kind)
            .collect()
    }
}

impl Exhausted {
    /// The limit as the `paused` event and status show it:
    /// `{field, spent, limit, message}`.
    pub fn to_json(&self) -> serde_json::Value {
        // Tokens are whole numbers: shown as integers, as `limits.tokenBudget` is.
        let number = |value: f64| match self.kind {
            LimitKind::Tokens => serde_json::json!(value as u64),
            LimitKind::CostUsd => serde_json::json!(value),
        };
        serde_json::json!({
            "field": self.kind.field(),
            "spent": number(self.spent),
            "limit": number(self.limit),
            "message": self.to_string(),
        })
    }
}

impl std::fmt::Display for Exhausted {
    /// The pause reason's text: which limit, the spend and the limit.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            LimitKind::Tokens => write!(
                f,
                "the run reached its token budget: {} of {} tokens spent (tokenBudget); resume with a higher tokenBudget to continue",
                self.spent, self.limit
            ),
            LimitKind::CostUsd => write!(
                f,
                "the run reached its cost budget: ${} of ${} spent (costBudgetUsd); resume with a higher costBudgetUsd to continue",
                dollars(self.spent),
                dollars(self.limit)
            ),
        }
    }
}

/// Dollars to the hundredth of a cent, without trailing zeros: summed costs carry float noise
/// (`0.30000000000000004`) that a pause reason should not show.
fn dollars(amount: f64) -> String {
    let text = format!("{amount:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

impl std::fmt::Display for UnitRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.kind {
            LimitKind::Tokens => "token usage",
            LimitKind::CostUsd => "cost",
        };
        write!(
            f,
            "{} is set, but backend(s) {} report no {unit}, so the limit could not be enforced; remove {} or route the run to backends that report {unit}",
            self.kind.field(),
            self.backends.join(", "),
            self.kind.field(),
        )
    }
}

impl std::error::Error for UnitRefusal {}
