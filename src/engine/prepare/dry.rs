//! The mocked dry run of preparation, started in two steps: its VM first (the script, args,
//! cwd, companion texts and nested resolver are all it needs), its driver once the routing
//! is read. The routing capture reads files on the blocking pool; starting the VM before it
//! lets the VM thread load the prelude and run the script meanwhile instead of after it. The
//! VM only queues its events until the driver takes them, in program order, so the dry run
//! sees and decides exactly what it did when the VM started after the capture.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::{DRY_RUN_LIMIT, Rejection};
use crate::engine::driver::{self, DriverSetup, Outcome, Persistence, StartedScript};
use crate::engine::journal::ReplayPool;
use crate::engine::permissions::PermissionBroker;
use crate::engine::routing::{BackendLookup, RoutingSnapshot};
use crate::engine::runner::AgentRunner;
use crate::engine::script::AnalyzedScript;
use crate::engine::vm::{NestedResolver, VmLimits};
use crate::model::{Limits, RunId, Usage};

/// What the dry run's driver gets besides the routing.
pub(super) struct DryInput<'a> {
    pub analyzed: &'a AnalyzedScript,
    pub args: &'a Value,
    pub project_dir: &'a Path,
    pub files: Arc<BTreeMap<String, String>>,
    pub backends: Arc<dyn BackendLookup>,
    pub runner: Arc<dyn AgentRunner>,
    pub vm_limits: VmLimits,
    pub nested: Option<NestedResolver>,
    /// The run's spending limits: the script's `budget` reads them (with the dry run's
    /// made-up usage, so a loop on `budget.remaining()` ends); the dry run never pauses.
    pub budget: crate::budget::SpendLimits,
    /// Scripted answers (`validate --mock-answers`).
    pub mock_answers: Option<Arc<crate::engine::mock_answers::MockAnswers>>,
}

/// A dry run whose VM runs and whose driver waits for the routing. Dropped without
/// [`DryRun::finish`] (preparation rejected the script meanwhile), it halts the VM.
pub(super) struct DryRun {
    setup: Option<DriverSetup>,
    started: Option<StartedScript>,
}

impl DryRun {
    /// Starts the script's VM. The routing stays empty until [`DryRun::finish`].
    pub(super) fn start(input: DryInput<'_>) -> DryRun {
        let mut setup = dry_setup(input);
        let started = driver::start_script(&mut setup);
        DryRun {
            setup: Some(setup),
            started: Some(started),
        }
    }

    /// Drives the dry run under `routing` to its outcome, within [`DRY_RUN_LIMIT`].
    pub(super) async fn finish(mut self, routing: RoutingSnapshot) -> Result<Outcome, Rejection> {
        // Both stand until here: `finish` takes the dry run, and only `Drop` runs after it.
        let (Some(mut setup), Some(started)) = (self.setup.take(), self.started.take()) else {
            unreachable!("a dry run is finished once");
        };
        setup.routing = routing;
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let run = driver::run_started(setup, started, control_rx);
        tokio::pin!(run);
        tokio::select! {
            outcome = &mut run => Ok(outcome),
            _ = tokio::time::sleep(DRY_RUN_LIMIT) => {
                let _ = control_tx.send(driver::Control::Stop);
                let _ = run.await;
                Err(Rejection::new(format!("the mocked dry run did not finish within {} s", DRY_RUN_LIMIT.as_secs())))
            }
        }
    }
}

impl Drop for DryRun {
    fn drop(&mut self) {
        if let Some(started) = self.started.take() {
            started.discard();
        }
    }
}

/// The dry run's driver setup: mocked answers, no store, the script's own limits lifted
/// to the dry run's, and an empty routing for [`DryRun::finish`] to fill in.
fn dry_setup(input: DryInput<'_>) -> DriverSetup {
    let DryInput {
        analyzed,
        args,
        project_dir,
        files,
        backends,
        runner,
        vm_limits,
        nested,
        budget,
        mock_answers,
    } = input;
    DriverSetup {
        mock_answers,
        run_id: RunId::parse("dryrun-0").expect("valid id"),
        generation: 1,
        body: analyzed.body.clone(),
        args: args.clone(),
        cwd: project_dir.to_path_buf(),
        isolation: Default::default(),
        trace: crate::engine::driver::TraceSetup::off(),
        phases: analyzed.phases.clone(),
        meta_model: analyzed.model.clone(),
        limits: Limits {
            max_agents: 10_000,
            concurrency: 16,
            agent_retries: 0,
            agent_timeout_ms: None,
            token_budget: budget.tokens,
            cost_budget_usd: budget.cost_usd,
            auto_resume: None,
        },
        routing: RoutingSnapshot::default(),
        backends,
        runner,
        persistence: Persistence::DryRun,
        pool: ReplayPool::default(),
        answers: Vec::new(),
        last_event_seq: 0,
        next_settlement: 0,
        agent_timeout: Duration::from_secs(30),
        // A made-up answer reaches no provider: nothing to warm.
        prompt_cache_hold: Duration::ZERO,
        vm_limits,
        broker: PermissionBroker::new(None),
        notices: None,
        usage: Usage::default(),
        current_phase: analyzed.phases.first().map(|p| p.title.clone()),
        nested,
        files,
        live: Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::instant::InstantRunner;
    use crate::engine::routing::NamedBackends;
    use crate::engine::script;
    use crate::model::RunStatus;

    fn started(source: &str, project: &Path) -> DryRun {
        let analyzed = script::analyze(source.as_bytes()).expect("a valid script");
        DryRun::start(DryInput {
            analyzed: &analyzed,
            args: &json!({}),
            project_dir: project,
            files: Arc::default(),
            backends: Arc::new(NamedBackends::new(["claude"])),
            runner: InstantRunner::new(),
            vm_limits: VmLimits::default(),
            nested: None,
            budget: Default::default(),
            mock_answers: None,
        })
    }

    /// Calls the VM made before the driver existed are all handled, in program order, once
    /// the routing arrives: the same outcome as a dry run started after the capture.
    #[tokio::test]
    async fn calls_made_before_the_routing_is_read_are_handled_in_order() {
        let project = tempfile::tempdir().expect("temp dir");
        let source = "export const meta = { name: 'p', description: 'd', model: 'claude' };\n\
            const a = await agent('one');\n\
            const rest = await parallel([() => agent('two'), () => agent('three')]);\n\
            return [typeof a, rest.length];";
        let dry = started(source, project.path());
        let outcome = dry
            .finish(RoutingSnapshot::default())
            .await
            .expect("the dry run ends");
        assert_eq!(outcome.status, RunStatus::Completed, "{outcome:?}");
        assert_eq!(outcome.result, Some(json!(["string", 2])));
        let indexes: Vec<u32> = outcome.dry_calls.iter().map(|call| call.index).collect();
        assert_eq!(indexes, [0, 1, 2]);
        for call in &outcome.dry_calls {
            assert!(call.route.is_ok(), "{call:?}");
        }
    }

    /// A dry run dropped before its routing arrived (preparation rejected the script) halts
    /// its VM, even one that never yields, without blocking the async worker that drops it;
    /// later dry runs still run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_dry_run_dropped_before_its_routing_halts_its_vm() {
        let project = tempfile::tempdir().expect("temp dir");
        let head = "export const meta = { name: 'p', description: 'd' };\n";
        for _ in 0..8 {
            drop(started(&format!("{head}while (true) {{}}"), project.path()));
        }
        let outcome = started(&format!("{head}return 7;"), project.path())
            .finish(RoutingSnapshot::default())
            .await
            .expect("the dry run ends");
        assert_eq!(outcome.result, Some(json!(7)));
    }
}
