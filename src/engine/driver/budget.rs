//! The run's budget in the driver: the policy (`crate::budget`) asked with the spend of the
//! settled calls, which `setup.usage` holds (the run's usage so far, journaled with every
//! call row; a replayed call adds nothing).
//!
//! A live agent call starts only while the spend is below every limit; the call that would
//! start at the limit is the one that does not, and the generation pauses with reason
//! `budget` there, so a resume with a higher limit continues exactly at that call. Calls
//! already running finish and count. A call waiting for a concurrency permit has not started:
//! its task hands its permit back through the driver ([`Driver::release_permit`]), after the
//! driver has counted the usage of the call that held it, so no queued call slips past a
//! limit that call reached. The dry run's made-up usage reaches the script's `budget` and
//! nothing else: it neither pauses nor warns.

use serde_json::{Value, json};

use crate::budget::{self, Budget, Exhausted, RunBudget};
use crate::engine::driver::{Driver, Halt};
use crate::engine::vm::VmReply;
use crate::model::{CallKind, PauseReason, Usage};

impl Driver {
    /// Whether a live agent call may start now. At a limit, the generation halts with a
    /// budget pause and the call is not started.
    pub(super) fn budget_admits(&mut self) -> bool {
        if self.dry() {
            return true;
        }
        match self.budget().may_start(&self.setup.usage) {
            Ok(()) => true,
            Err(exhausted) => {
                self.pause_for_budget(exhausted);
                false
            }
        }
    }

    /// After a live call settled and moved the spend from `before` to `setup.usage`: one
    /// `budgetWarning` per limit whose threshold it crossed, and the pause when the spend
    /// reached a limit while calls wait for a permit (they must not start).
    pub(super) fn budget_after_settled(&mut self, before: &Usage) {
        if self.dry() {
            return;
        }
        let budget = self.budget();
        let after = self.setup.usage;
        for kind in budget.crossed(before, &after) {
            let (spent, limit) = match kind {
                budget::LimitKind::Tokens => (
                    json!(budget::spent_tokens(&after)),
                    json!(budget.limits.tokens),
                ),
                budget::LimitKind::CostUsd => (
                    json!(budget::spent_cost_usd(&after)),
                    json!(budget.limits.cost_usd),
                ),
            };
            self.events.push(
                "budgetWarning",
                "root",
                json!({"field": kind.field(), "spent": spent, "limit": limit}),
            );
        }
        let waiting = self
            .in_flight
            .values()
            .any(|call| call.kind == CallKind::Agent && !call.started);
        if waiting && let Err(exhausted) = budget.may_start(&after) {
            self.pause_for_budget(exhausted);
        }
    }

    /// Gives back the concurrency permit a finished call's task kept
    /// ([`task::AgentTask`](super::task)): only now, with its usage counted, may a queued
    /// call take it.
    pub(super) fn release_permit(&self) {
        self.semaphore.add_permits(1);
    }

    /// The script's `budget` view of the spend, when it changed since the script was last
    /// told: the caller sends it before the answers of the calls that changed it, so
    /// `budget.spent()` counts every call whose answer the script has.
    pub(super) fn budget_reply(&mut self) -> Option<VmReply> {
        if self.pushed_usage == self.setup.usage {
            return None;
        }
        self.pushed_usage = self.setup.usage;
        let view = budget::script_view(
            &budget::SpendLimits::of(&self.setup.limits),
            &self.setup.usage,
        );
        Some(VmReply::Budget(view))
    }

    /// The `paused` event's fields: the reason (none for a requested pause), and for a
    /// budget pause the limit reached.
    pub(super) fn paused_fields(&self, reason: PauseReason) -> Value {
        let shown_reason = (reason != PauseReason::Requested).then(|| reason.as_str());
        let mut fields = json!({"reason": shown_reason});
        if let Some(exhausted) = self
            .budget_exhausted
            .filter(|_| reason == PauseReason::Budget)
        {
            fields["budget"] = exhausted.to_json();
        }
        fields
    }

    fn budget(&self) -> RunBudget {
        RunBudget {
            limits: budget::SpendLimits::of(&self.setup.limits),
        }
    }

    fn pause_for_budget(&mut self, exhausted: Exhausted) {
        if self.halt.is_some() {
            return;
        }
        tracing::info!(run = %self.setup.run_id, "{exhausted}");
        self.budget_exhausted = Some(exhausted);
        self.begin_halt(Halt::Pause {
            reason: PauseReason::Budget,
            auth_context: None,
            reset_hint: None,
            reset_at: None,
            checkpoint_context: None,
        });
    }
}
