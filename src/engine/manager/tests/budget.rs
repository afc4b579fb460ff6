//! Run budgets through the engine, on the instant runner (whose usage is known: a reply of
//! `n` bytes is `ceil(n/4)` tokens in and out) and a real store: the pause before the call
//! that would start at the limit, the resume with a higher limit that runs no call twice, the
//! warning at 80%, the script's `budget`, and the refusals that store nothing.

use super::*;
use crate::budget::SpendLimits;
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, BackendSpec, ProbeReport, SessionSpec,
    TurnOutput, TurnRequest,
};
use crate::store::EventReads;

/// Five sequential calls; each prompt `call N` is answered `ECHO: call N` (12 bytes, 3 tokens
/// in and 3 out): 6 tokens a call.
const FIVE_CALLS: &str = "export const meta = { name: 'b', description: 'd', model: 'claude' };\n\
    const out = [];\n\
    for (let i = 0; i < 5; i++) out.push(await agent('call ' + i));\n\
    return out.length;";

const PER_CALL: u64 = 6;

fn instant_world() -> (World, Arc<InstantRunner>) {
    let runner = InstantRunner::new();
    (world_on(runner.clone()), runner)
}

pub(super) fn world_on(runner: Arc<dyn AgentRunner>) -> World {
    let folder = tempfile::tempdir().expect("temp dir");
    let project = folder.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store = Arc::new(SqliteStore::open(&folder.path().join("state")).expect("open store"));
    let config = EngineConfig {
        home: Some(folder.path().to_path_buf()),
        probe: false,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        runner,
        Arc::new(NamedBackends::new(["claude", "other"])),
        config,
    );
    World {
        _folder: folder,
        project,
        store,
        engine,
    }
}

/// The instant runner's answers after a few turns of the scheduler: a call's task is
/// spawned and finishes on its own, so the next queued task could take its permit before
/// the driver has counted its usage.
/// With a cost, every turn also reports that many US dollars.
struct YieldingRunner(Arc<InstantRunner>, Option<f64>);

struct YieldingSession(Box<dyn AgentSession>, Option<f64>);

#[async_trait::async_trait]
impl AgentRunner for YieldingRunner {
    async fn open_session(
        &self,
        spec: SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        tokio::task::yield_now().await;
        let session = self.0.open_session(spec, observer).await?;
        Ok(Box::new(YieldingSession(session, self.1)))
    }

    async fn probe(&self, backend: &BackendSpec, model: Option<&str>, cwd: &Path) -> ProbeReport {
        self.0.probe(backend, model, cwd).await
    }

    async fn shutdown(&self, deadline: std::time::Duration) {
        self.0.shutdown(deadline).await;
    }
}

#[async_trait::async_trait]
impl AgentSession for YieldingSession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        let mut output = self.0.prompt(turn, cancel).await?;
        output.usage.cost_usd = self.1;
        Ok(output)
    }

    fn session_ref(&self) -> Option<Value> {
        self.0.session_ref()
    }

    async fn close(self: Box<Self>) {
        self.0.close().await;
    }
}

fn tokens(limit: u64) -> LimitOverrides {
    LimitOverrides {
        budget: SpendLimits {
            tokens: Some(limit),
            cost_usd: None,
        },
        ..LimitOverrides::default()
    }
}

impl World {
    pub(super) async fn start_with(
        &self,
        script: &str,
        limits: LimitOverrides,
    ) -> EngineResult<Admission> {
        self.engine
            .start(RunRequest {
                project_dir: self.project.clone(),
                script: ScriptInput::Inline(script.into()),
                args: json!({}),
                limits,
                caller: None,
                trace: None,
            })
            .await
    }

    pub(super) async fn status_of(&self, run_id: &RunId) -> Value {
        json!(
            self.engine
                .status(run_id, &StatusQuery::default())
                .await
                .expect("status")
        )
    }

    pub(super) async fn event_types(&self, run_id: &RunId) -> Vec<Value> {
        self.store
            .events(run_id, 0, 1000)
            .await
            .expect("events")
            .into_iter()
            .map(|record| record.event.value())
            .collect()
    }
}

#[tokio::test]
async fn a_run_pauses_before_the_call_that_would_start_at_its_token_budget_and_resumes_higher() {
    let (world, runner) = instant_world();
    // 14 tokens: calls 0 and 1 spend 12, call 2 starts below the limit and brings it to 18;
    // call 3 is the one that would start at the limit.
    let admission = world
        .start_with(FIVE_CALLS, tokens(14))
        .await
        .expect("admitted");
    assert_eq!(admission.limits.token_budget, Some(14));
    let run_id = admission.run_id;
    world.engine.wait(&run_id).await;
    let status = world.status_of(&run_id).await;
    assert_eq!(status["status"], "paused", "{status}");
    assert_eq!(status["reason"], "budget");
    assert_eq!(status["limits"]["tokenBudget"], 14);
    assert_eq!(status["tokenUsage"]["totalTokens"], 3 * PER_CALL);
    let context = &status["outcome"]["budgetContext"];
    assert_eq!(context["field"], "tokenBudget");
    assert_eq!(
        (&context["spent"], &context["limit"]),
        (&json!(18), &json!(14))
    );
    assert!(
        context["message"]
            .as_str()
            .unwrap()
            .contains("18 of 14 tokens"),
        "{context}"
    );
    assert_eq!(runner.prompts(), 3, "exactly the calls below the limit ran");

    let events = world.event_types(&run_id).await;
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "budgetWarning")
        .collect();
    assert_eq!(warnings.len(), 1, "one warning at 80% of 14: {warnings:?}");
    assert_eq!(warnings[0]["field"], "tokenBudget");
    assert_eq!(
        (warnings[0]["spent"].as_u64(), warnings[0]["limit"].as_u64()),
        (Some(12), Some(14))
    );
    let paused = events
        .iter()
        .rfind(|e| e["type"] == "paused")
        .expect("paused event");
    assert_eq!(paused["reason"], "budget");
    assert_eq!(paused["budget"]["field"], "tokenBudget");

    // A limit at or below the spend is refused, and nothing changes.
    let mut low = World::resume_request(&run_id, Vec::new());
    low.limits = tokens(18);
    let refused = world.engine.resume(low).await.expect_err("at the spend");
    assert!(refused.to_string().contains("tokenBudget"), "{refused}");
    let record = world.store.load_run(&run_id).await.expect("load");
    assert_eq!(
        (record.generation, record.limits.token_budget),
        (1, Some(14))
    );

    let mut raised = World::resume_request(&run_id, Vec::new());
    raised.limits = tokens(1000);
    let admission = world.engine.resume(raised).await.expect("resumed");
    assert_eq!(admission.limits.token_budget, Some(1000));
    world.engine.wait(&run_id).await;
    let status = world.status_of(&run_id).await;
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["outcome"]["result"], 5);
    assert_eq!(status["tokenUsage"]["totalTokens"], 5 * PER_CALL);
    assert_eq!(
        runner.prompts(),
        5,
        "calls 0..2 replayed, 3 and 4 ran: none twice"
    );
}

#[tokio::test]
async fn calls_waiting_for_a_permit_do_not_start_past_the_limit() {
    let runner = InstantRunner::new();
    let world = world_on(Arc::new(YieldingRunner(runner.clone(), None)));
    // One at a time: every call is queued at once, and the first settles at the limit.
    let script = "export const meta = { name: 'p', description: 'd', model: 'claude' };\n\
        return await parallel([0, 1, 2, 3].map((i) => () => agent('call ' + i)));";
    let limits = LimitOverrides {
        concurrency: Some(1),
        ..tokens(PER_CALL)
    };
    let run_id = world
        .start_with(script, limits)
        .await
        .expect("admitted")
        .run_id;
    world.engine.wait(&run_id).await;
    let status = world.status_of(&run_id).await;
    assert_eq!(status["reason"], "budget", "{status}");
    assert_eq!(runner.prompts(), 1, "the queued calls never started");
    assert_eq!(status["tokenUsage"]["totalTokens"], PER_CALL);
}

#[tokio::test]
async fn the_script_reads_its_budget_as_calls_settle() {
    let (world, _) = instant_world();
    let script = "export const meta = { name: 's', description: 'd', model: 'claude', tokenBudget: 1000 };\n\
        const seen = [[budget.total, budget.spent(), budget.remaining()]];\n\
        while (budget.remaining() > 1000 - 2 * 6) { await agent('call 0'); seen.push([budget.spent(), budget.remaining()]); }\n\
        return { seen, cost: [budget.costUsd.total, budget.costUsd.spent(), budget.costUsd.remaining() === Infinity] };";
    let admission = world
        .start_with(script, LimitOverrides::default())
        .await
        .expect("admitted");
    assert_eq!(admission.limits.token_budget, Some(1000), "meta sets it");
    world.engine.wait(&admission.run_id).await;
    let status = world.status_of(&admission.run_id).await;
    assert_eq!(
        status["outcome"]["result"],
        json!({"seen": [[1000, 0, 1000], [6, 994], [12, 988]], "cost": [null, 0, true]}),
        "{status}"
    );
    // Without a limit, remaining() is Infinity; an argument overrides meta.
    let unlimited = "export const meta = { name: 'u', description: 'd', model: 'claude', tokenBudget: 5 };\n\
        return [budget.total, budget.remaining() === Infinity];";
    let admission = world
        .start_with(unlimited, tokens(77))
        .await
        .expect("admitted");
    world.engine.wait(&admission.run_id).await;
    let status = world.status_of(&admission.run_id).await;
    assert_eq!(status["outcome"]["result"], json!([77, false]));
    assert_eq!(status["limits"]["tokenBudget"], 77);
}

#[tokio::test]
async fn bad_limits_and_unreported_units_are_refused_with_nothing_stored() {
    let (world, _) = instant_world();
    let bad_meta = "export const meta = { name: 'm', description: 'd', model: 'claude', tokenBudget: -3 };\nreturn 1;";
    let refused = world
        .start_with(bad_meta, LimitOverrides::default())
        .await
        .expect_err("a negative budget");
    assert!(
        refused.to_string().contains("meta.tokenBudget"),
        "{refused}"
    );
    // `other` is a backend that reports no cost.
    let other = "export const meta = { name: 'o', description: 'd', model: 'other' };\nreturn await agent('x');";
    let cost = LimitOverrides {
        budget: SpendLimits {
            tokens: None,
            cost_usd: Some(1.5),
        },
        ..LimitOverrides::default()
    };
    let refused = world
        .start_with(other, cost)
        .await
        .expect_err("no cost reports");
    let message = refused.to_string();
    assert!(
        message.contains("costBudgetUsd") && message.contains("other"),
        "{message}"
    );
    let runs = world
        .engine
        .list(Some(&world.project), 100)
        .await
        .expect("list runs");
    assert!(runs.is_empty(), "nothing stored: {runs:?}");
    // The built-in claude backend reports cost.
    let claude = "export const meta = { name: 'c', description: 'd', model: 'claude' };\nreturn await agent('x');";
    let admission = world.start_with(claude, cost).await.expect("admitted");
    assert_eq!(admission.limits.cost_budget_usd, Some(1.5));
}

#[tokio::test]
async fn a_cost_budget_pauses_the_run_like_a_token_budget() {
    let runner = InstantRunner::new();
    let world = world_on(Arc::new(YieldingRunner(runner.clone(), Some(0.5))));
    let limits = LimitOverrides {
        budget: SpendLimits {
            tokens: None,
            cost_usd: Some(1.2),
        },
        ..LimitOverrides::default()
    };
    let run_id = world
        .start_with(FIVE_CALLS, limits)
        .await
        .expect("admitted")
        .run_id;
    world.engine.wait(&run_id).await;
    let status = world.status_of(&run_id).await;
    assert_eq!(status["reason"], "budget", "{status}");
    assert_eq!(status["limits"]["costBudgetUsd"], 1.2);
    let context = &status["outcome"]["budgetContext"];
    assert_eq!(context["field"], "costBudgetUsd");
    assert_eq!(
        (&context["spent"], &context["limit"]),
        (&json!(1.5), &json!(1.2))
    );
    assert!(
        context["message"]
            .as_str()
            .unwrap()
            .contains("$1.5 of $1.2"),
        "{context}"
    );
    assert_eq!(runner.prompts(), 3);
    let events = world.event_types(&run_id).await;
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "budgetWarning")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["field"], "costBudgetUsd");
    assert_eq!(warnings[0]["spent"], 1.0);
}
