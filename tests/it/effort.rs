//! `agent()`'s `effort`: through the ACP runner against the scripted mock agent (the level
//! reaches the adapter's advertised reasoning option; a backend without one, or without that
//! level, fails `Unsupported`), through the real binary (admission probes refuse what the
//! backend cannot take, a bad name is a validation error), and through the engine with the
//! in-process runner (a live call that cannot take it throws once, without retries).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentprism::acp::AcpRunner;
use agentprism::engine::effort::Effort;
use agentprism::engine::instant::InstantRunner;
use agentprism::engine::runner::{
    AgentObserver, AgentRunner, AgentUpdate, FailureKind, PermissionOutcome, PermissionRequest,
};
use agentprism::engine::{Engine, EngineConfig, RunRequest, ScriptInput, StatusQuery};
use agentprism::store::{CallReads, SqliteStore};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::acp::{config, mock_backend, session_spec};
use crate::engine::NamedBackends;
use crate::support::context::{TestContext, prompts_in_log};

const DEADLINE: Duration = Duration::from_secs(20);

const HEADER: &str =
    "export const meta = { name: 'effort', description: 'effort test', model: 'mock' };\n";

/// A probe-like observer: no turn runs in these tests.
struct Quiet;

#[async_trait]
impl AgentObserver for Quiet {
    fn update(&self, _update: AgentUpdate) {}

    async fn request_permission(&self, _request: PermissionRequest) -> PermissionOutcome {
        PermissionOutcome::Cancelled
    }
}

/// The `session/set_config_option` requests the mock logged, as `(configId, value)`.
fn options_set(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["method"] == "session/set_config_option")
        .map(|message| {
            let text = |key: &str| {
                message["params"][key]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            (text("configId"), text("value"))
        })
        .collect()
}

/// Opens a session of `backend` with `effort` (and the mock's second model), returning the
/// failure if it fails; a session that opens is closed.
async fn open_with(
    runner: &AcpRunner,
    backend: &agentprism::engine::runner::BackendSpec,
    effort: Effort,
    config_options: Vec<(String, Value)>,
) -> Option<agentprism::engine::runner::AgentFailure> {
    let mut spec = session_spec(backend);
    spec.model = Some("mock-smart".to_owned());
    spec.effort = Some(effort);
    spec.config_options = config_options;
    let opened = tokio::time::timeout(DEADLINE, runner.open_session(spec, Arc::new(Quiet)))
        .await
        .expect("open_session finishes in time");
    match opened {
        Ok(session) => {
            session.close().await;
            None
        }
        Err(failure) => Some(failure),
    }
}

#[tokio::test]
async fn the_advertised_reasoning_option_is_set_to_the_level_after_the_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("agent.log");
    let log_text = log.display().to_string();
    let runner = AcpRunner::new(config());
    let backend = mock_backend(
        "mock",
        &[("MOCK_ACP_EFFORT_OPTION", "1"), ("MOCK_ACP_LOG", &log_text)],
    );
    assert!(
        open_with(&runner, &backend, Effort::Xhigh, vec![])
            .await
            .is_none()
    );
    assert_eq!(
        options_set(&log),
        vec![
            ("model".to_owned(), "mock-smart".to_owned()),
            ("reasoning_effort".to_owned(), "xhigh".to_owned()),
        ]
    );
    runner.shutdown(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_backend_without_the_option_or_the_level_fails_unsupported_and_sets_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("agent.log");
    let log_text = log.display().to_string();
    let runner = AcpRunner::new(config());

    let plain = mock_backend("plain", &[("MOCK_ACP_LOG", &log_text)]);
    let failure = open_with(&runner, &plain, Effort::High, vec![])
        .await
        .expect("no reasoning option");
    assert_eq!(failure.kind, FailureKind::Unsupported);
    assert_eq!(
        failure.message,
        "agent() option effort \"high\" cannot be set: backend plain (model mock-smart) \
         advertises no reasoning-level config option (category \"thought_level\"); leave effort \
         out for this backend"
    );

    let two = mock_backend(
        "two",
        &[
            ("MOCK_ACP_EFFORT_OPTION", "low,high"),
            ("MOCK_ACP_LOG", &log_text),
        ],
    );
    let failure = open_with(&runner, &two, Effort::Max, vec![])
        .await
        .expect("no max level");
    assert_eq!(failure.kind, FailureKind::Unsupported);
    assert_eq!(
        failure.message,
        "agent() option effort \"max\" cannot be set: backend two (model mock-smart)'s \
         reasoning option \"reasoning_effort\" offers low, high; choose one of those levels or \
         leave effort out"
    );

    let both = vec![("reasoning_effort".to_owned(), json!("low"))];
    let failure = open_with(&runner, &two, Effort::High, both)
        .await
        .expect("two settings of one option");
    assert_eq!(failure.kind, FailureKind::Unsupported);
    assert!(
        failure
            .message
            .contains("effort and configOptions.reasoning_effort both set"),
        "{}",
        failure.message
    );
    let reasoning: Vec<_> = options_set(&log)
        .into_iter()
        .filter(|(id, _)| id == "reasoning_effort")
        .collect();
    assert!(reasoning.is_empty(), "nothing was set: {reasoning:?}");
    runner.shutdown(Duration::from_secs(3)).await;
}

#[test]
fn a_run_sets_the_level_on_the_mock_and_admission_refuses_a_backend_without_it() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let with_option =
        ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_EFFORT_OPTION": "1"}));
    let script = with_option.write(
        "wf.js",
        &format!("{HEADER}return await agent('think', {{effort: 'high'}});\n"),
    );
    let done = with_option.run(&["run", script.to_str().unwrap()]);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(done.json(), json!("ECHO: think"));
    // The admission probe opens a session too, but sets no level.
    assert_eq!(
        options_set(&log),
        vec![("reasoning_effort".to_owned(), "high".to_owned())]
    );

    let ctx = with_option.with_mock_backend(json!({"MOCK_ACP_LOG": log}));
    let refused = ctx.run(&["run", script.to_str().unwrap()]);
    assert_eq!(refused.code(), 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "agent 0@0: agent() option effort \"high\" cannot be set: backend mock (model \
             mock-fast) advertises no reasoning-level config option"
        ),
        "{}",
        refused.stderr
    );
    assert_eq!(
        prompts_in_log(&ctx, "agent.log"),
        vec!["think"],
        "no second prompt"
    );
    let runs = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(
        runs.json().as_array().map(Vec::len),
        Some(1),
        "nothing stored"
    );
}

/// A name that is not a level, a level the backend's option lacks, and the same option set
/// twice are each refused at admission, naming `effort`, with nothing stored or prompted.
#[test]
fn bad_efforts_are_refused_at_admission() {
    let ctx = TestContext::new();
    let log = ctx.path("agent.log");
    let ctx = ctx.with_mock_backend(json!({"MOCK_ACP_LOG": log, "MOCK_ACP_EFFORT_OPTION": "1"}));
    let refused = |options: &str, expected: &str| {
        let script = ctx.write(
            "wf.js",
            &format!("{HEADER}return await agent('think', {options});\n"),
        );
        let finished = ctx.run(&["run", script.to_str().unwrap()]);
        assert_eq!(finished.code(), 2, "{}", finished.stderr);
        assert!(finished.stderr.contains(expected), "{}", finished.stderr);
    };
    refused(
        "{effort: 'minimal'}",
        "SCRIPT_VALIDATION_ERROR: agent() option effort must be one of \"low\", \"medium\", \
         \"high\", \"xhigh\", \"max\", got \"minimal\"",
    );
    refused(
        "{effort: 'max'}",
        "agent 0@0: agent() option effort \"max\" cannot be set: backend mock (model mock-fast)'s \
         reasoning option \"reasoning_effort\" offers minimal, low, medium, high, xhigh",
    );
    refused(
        "{effort: 'high', configOptions: {reasoning_effort: 'low'}}",
        "agent 0@0: agent() options effort and configOptions.reasoning_effort both set backend \
         mock (model mock-fast)'s reasoning level",
    );
    assert!(prompts_in_log(&ctx, "agent.log").is_empty());
    assert!(options_set(&log).is_empty(), "the probes set nothing");
    let runs = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(runs.json(), json!([]), "nothing stored");
}

/// Without probes, nothing stops the run at admission: the live call fails `Unsupported`,
/// which is thrown into the script on the first attempt whatever `retries` says.
#[tokio::test]
async fn a_live_call_that_cannot_take_the_level_throws_without_retrying() {
    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("state")).expect("store"));
    let runner = InstantRunner::new();
    let engine = Engine::new(
        store.clone(),
        runner.clone(),
        Arc::new(NamedBackends::new(["claude"])),
        EngineConfig {
            home: Some(dir.path().to_path_buf()),
            probe: false,
            ..EngineConfig::default()
        },
    );
    let script = "export const meta = { name: 'x', description: 'd', model: 'claude' };\n\
        try { await agent('think', {effort: 'low', retries: 3}); return 'ran'; }\n\
        catch (e) { return [e.code, e.message]; }\n";
    let admission = engine
        .start(RunRequest {
            project_dir: project,
            script: ScriptInput::Inline(script.to_owned()),
            args: json!({}),
            limits: Default::default(),
            caller: None,
            trace: None,
        })
        .await
        .expect("admitted");
    engine.wait(&admission.run_id).await;
    let status = json!(
        engine
            .status(&admission.run_id, &StatusQuery::default())
            .await
            .expect("status")
    );
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!([
            "AGENT_OPTION_UNSUPPORTED",
            "agent() option effort \"low\" cannot be set: backend claude advertises no \
             reasoning-level config option (category \"thought_level\"); leave effort out for \
             this backend"
        ]),
        "{status:#}"
    );
    let calls = store.latest_calls(&admission.run_id).await.expect("calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].attempts, 1, "never retried");
    assert_eq!(runner.prompts(), 0);
}
