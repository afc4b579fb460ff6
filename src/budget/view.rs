//! The budget as a workflow script reads it, in the shape Claude Code's workflows use so
//! their scripts port unchanged: `budget.total` is the token limit (`null` without one),
//! `budget.spent()` and `budget.remaining()` count tokens, and the cost figures sit beside
//! them. This is the JSON the VM builds that object from; the VM owns the functions.

use serde_json::{Value, json};

use super::{SpendLimits, spent_cost_usd, spent_tokens};
use crate::model::Usage;

/// The script's view of the budget after `spent`:
/// `{total, spent, remaining, costTotalUsd, costSpentUsd, costRemainingUsd}`.
///
/// `total` and `costTotalUsd` are the limits or `null`. `remaining` and `costRemainingUsd`
/// never go below zero (calls already running when a limit is reached still count, so the
/// spend can pass it) and are `null` without a limit, because JSON has no `Infinity`: the VM
/// answers `remaining()` with `Infinity` for `null`.
pub fn script_view(limits: &SpendLimits, spent: &Usage) -> Value {
    let tokens = spent_tokens(spent);
    let cost = spent_cost_usd(spent);
    json!({
        "total": limits.tokens,
        "spent": tokens,
        "remaining": limits.tokens.map(|limit| limit.saturating_sub(tokens)),
        "costTotalUsd": limits.cost_usd,
        "costSpentUsd": cost,
        "costRemainingUsd": limits.cost_usd.map(|limit| (limit - cost).max(0.0)),
    })
}
