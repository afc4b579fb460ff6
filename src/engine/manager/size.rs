//! A run's size before it starts: the dry run's agent calls per phase, what earlier runs of
//! the same workflow spent per call, and whether the caller must confirm the run first
//! (`engine::estimate` holds the rules; this file reads the store for them).

use std::path::Path;

use serde_json::Value;

use super::Engine;
use super::api::LimitOverrides;
use super::error::Rejected;
use crate::engine::ScriptInput;
use crate::engine::estimate::{self, Decision, Estimate, PastRun, RunSize};
use crate::store::PastRunsOf;

/// Among how many of the project's newest runs the earlier runs of an inline script are
/// found by its `meta.name`.
const LISTED_RUNS: u32 = 200;
/// How many earlier runs' summaries are read at most (newest first) to find the ones with
/// usage, so a script run a thousand times without usage costs a bounded look at each
/// admission.
const EXAMINED_RUNS: u32 = 30;

impl Engine {
    /// The size object of `size` for `script`'s earlier runs in `project_dir`, and whether the
    /// run needs confirmation under `limits`.
    pub(super) async fn size_report(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        workflow_name: &str,
        size: &RunSize,
        limits: &LimitOverrides,
    ) -> (Value, bool) {
        let past = self.past_runs(project_dir, script, workflow_name).await;
        let estimate = Estimate::new(size.clone(), &past);
        let needs = self.needs_confirmation(size, limits);
        (estimate.to_json(needs), needs)
    }

    /// The `size` object `validate` reports for a prepared script: the dry run's size, the
    /// earlier runs' estimate, and whether a run with no `maxAgents` would need confirmation.
    pub async fn size_of(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        prepared: &crate::engine::prepare::Prepared,
    ) -> Value {
        let name = &prepared.analyzed.name;
        let limits = LimitOverrides::default();
        self.size_report(project_dir, script, name, &prepared.size, &limits)
            .await
            .0
    }

    /// The `size` object of a prepared run, or the refusal when it needs a confirmation the
    /// request does not give.
    pub(super) async fn size_gate(
        &self,
        request: &super::api::RunRequest,
        prepared: &crate::engine::prepare::Prepared,
    ) -> Result<Value, Rejected> {
        self.check_confirmed(&prepared.size, &request.limits)?;
        let (size, _) = self
            .size_report(
                &request.project_dir,
                &request.script,
                &prepared.analyzed.name,
                &prepared.size,
                &request.limits,
            )
            .await;
        Ok(size)
    }

    /// The refusal for a run above the confirmation threshold that nobody confirmed.
    pub(super) fn check_confirmed(
        &self,
        size: &RunSize,
        limits: &LimitOverrides,
    ) -> Result<(), Rejected> {
        if self.needs_confirmation(size, limits) {
            return Err(Rejected::NeedsConfirmation {
                message: estimate::refusal_message(size, self.inner.config.confirm_agents),
                agents: size.agents,
            });
        }
        Ok(())
    }

    fn needs_confirmation(&self, size: &RunSize, limits: &LimitOverrides) -> bool {
        let size = &capped(size, limits);
        let explicit = limits.max_agents.and_then(|max| u32::try_from(max).ok());
        !limits.confirmed
            && matches!(
                estimate::decide(size, self.inner.config.confirm_agents, explicit),
                Decision::NeedsConfirmation(_)
            )
    }

    /// Token usage of the newest earlier runs of the same workflow, newest first: runs of the
    /// same script file, or for an inline script the project's runs of the same `meta.name`,
    /// from their summaries (no call row is read). A store that cannot be read gives no
    /// history (the estimate is then `null`).
    async fn past_runs(
        &self,
        project_dir: &Path,
        script: &ScriptInput,
        name: &str,
    ) -> Vec<PastRun> {
        let resolved;
        let of = match script {
            ScriptInput::Path(path) => {
                resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                PastRunsOf::Script(&resolved)
            }
            ScriptInput::Inline(_) => PastRunsOf::Named {
                project_dir,
                name,
                within: LISTED_RUNS,
            },
        };
        self.inner
            .store
            .past_summaries(of, EXAMINED_RUNS)
            .await
            .unwrap_or_default()
            .iter()
            .map(PastRun::from_summary)
            .collect()
    }
}

/// `size` with its agent calls cut to what the run's `maxAgents` lets it start: a loop the
/// dry run follows to its own ceiling (10,000) starts at most `maxAgents` (default 1,000).
fn capped(size: &RunSize, limits: &LimitOverrides) -> RunSize {
    let cap = crate::model::Limits::default()
        .with_overrides(limits.max_agents, None, None)
        .max_agents;
    RunSize {
        agents: size.agents.min(cap),
        ..size.clone()
    }
}
