//! Admission refusals from routing and probes: with `AGENTPRISM_DEFAULT_BACKEND`
//! unset, a model spec that names no backend (`mokc`) is a routing error listing the
//! backends, and a probe that fails for any reason but credentials rejects the run naming
//! the backend and the reason; a credential failure only warns. Each through the CLI (exit 2,
//! no run listed) and through the MCP `workflow` tool (a tool error, nothing in the store),
//! with the scripted mock agent as the backend. The `agent()` options a run cannot honour
//! (an unknown `isolation`, a worktree outside a repository) are met by the dry run, so `run`
//! rejects the script naming the option.

use std::sync::Arc;

use agentprism::acp::lookup::Backends;
use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::{Engine, EngineConfig};
use agentprism::env::EnvSnapshot;
use agentprism::mcp::handler::McpHandler;
use agentprism::store::{RunReads, SqliteStore};
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

use crate::support::context::{TestContext, mock_agent_binary};

fn script(model: &str) -> String {
    format!(
        "export const meta = {{ name: 'admission', description: 'admission test', model: '{model}' }};\nreturn await agent('hello');\n"
    )
}

fn runs_listed(ctx: &TestContext) -> usize {
    let listed = ctx.run(&["runs", "--all", "--json"]);
    assert_eq!(listed.code(), 0, "{}", listed.stderr);
    listed.json().as_array().map(Vec::len).unwrap_or(0)
}

#[test]
fn cli_rejects_a_model_spec_that_names_no_backend() {
    let ctx = TestContext::new().with_mock_backend(json!({}));
    let path = ctx.write("wf.js", &script("mokc"));
    let finished = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("\"mokc\" is not a registered backend")
            && finished
                .stderr
                .contains("claude, codex, opencode, pi, mock"),
        "{}",
        finished.stderr
    );
    assert_eq!(runs_listed(&ctx), 0);
}

#[test]
fn cli_rejects_the_options_it_cannot_honour_naming_them() {
    let ctx = TestContext::new().with_mock_backend(json!({}));
    for (option, named) in [
        (
            "{isolation: 'sandbox'}",
            "agent() option isolation must be \"worktree\" or null, got \"sandbox\"",
        ),
        // The test's project folder is not in a git repository.
        (
            "{isolation: 'worktree'}",
            "isolation: \"worktree\" cannot run here",
        ),
    ] {
        let path = ctx.write(
            "wf.js",
            &format!(
                "export const meta = {{ name: 'admission', description: 'admission test', model: 'mock' }};\nreturn await agent('hello', {option});\n"
            ),
        );
        let finished = ctx.run(&["run", path.to_str().unwrap()]);
        assert_eq!(finished.code(), 2, "{option}: {}", finished.stderr);
        assert!(finished.stderr.contains(named), "{}", finished.stderr);
        assert_eq!(runs_listed(&ctx), 0);
    }
}

#[test]
fn cli_rejects_a_failed_probe_and_only_warns_on_credentials() {
    let ctx = TestContext::new().with_mock_backend(json!({}));
    // The mock agent refuses an unknown model in set_config_option (-32602).
    let path = ctx.write("wf.js", &script("mock/no-such-model"));
    let finished = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("probe of backend mock failed")
            && finished.stderr.contains("no-such-model"),
        "{}",
        finished.stderr
    );
    assert_eq!(runs_listed(&ctx), 0);

    let gated = TestContext::new().with_mock_backend(json!({"MOCK_ACP_AUTH": "required"}));
    let path = gated.write("wf.js", &script("mock"));
    let finished = gated.run(&["run", path.to_str().unwrap()]);
    assert_eq!(
        finished.code(),
        3,
        "admitted, then paused: {}",
        finished.stderr
    );
    assert!(
        finished.stderr.contains("needs credentials"),
        "the warning: {}",
        finished.stderr
    );
    assert_eq!(gated.status(&finished.run_id())["reason"], "auth_required");
}

/// The MCP tool over an engine with the real ACP runner and a `mock` backend.
struct Tool {
    _dir: tempfile::TempDir,
    project: std::path::PathBuf,
    store: Arc<SqliteStore>,
    server: Arc<WorkflowServer>,
    runner: Arc<AcpRunner>,
}

impl Tool {
    fn new() -> Tool {
        let dir = tempfile::tempdir().expect("temp dir");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let store = Arc::new(SqliteStore::open(&dir.path().join("state")).expect("store"));
        let backends = format!(
            "{{\"mock\": {{\"command\": \"{}\"}}}}",
            mock_agent_binary().display()
        );
        let env =
            EnvSnapshot::from_pairs([("PATH", ""), ("AGENTPRISM_BACKENDS", backends.as_str())]);
        let runner = Arc::new(AcpRunner::new(AcpConfig::new(env.clone())));
        let engine = Engine::new(
            store.clone(),
            runner.clone(),
            Arc::new(Backends::from_env(&env).expect("backends")),
            EngineConfig {
                home: Some(dir.path().to_path_buf()),
                ..EngineConfig::default()
            },
        );
        let server = WorkflowServer::new(engine, WorkflowServerOptions::default());
        Tool {
            _dir: dir,
            project,
            store,
            server,
            runner,
        }
    }

    async fn run(&self, script: &str) -> Value {
        let context =
            crate::workflow_tool::context(Some("s"), json!(uuid::Uuid::new_v4().to_string()));
        let arguments = json!({"action": "run", "projectDir": self.project, "script": script});
        self.server
            .tools()
            .call(&context, "workflow", &arguments)
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    async fn assert_rejected(&self, script: &str, needles: &[&str]) {
        let answer = self.run(script).await;
        assert_eq!(answer["isError"], true, "{answer:#}");
        let text = answer.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{needle}: {answer:#}");
        }
        let runs = self.store.list_runs(None, 10).await.expect("list runs");
        assert!(runs.is_empty(), "nothing is stored: {runs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_rejects_an_unknown_backend_and_a_failed_probe() {
    let tool = Tool::new();
    tool.assert_rejected(
        &script("mokc"),
        &["mokc", "is not a registered backend", "mock"],
    )
    .await;
    tool.assert_rejected(
        &script("mock/no-such-model"),
        &["probe of backend mock failed", "no-such-model"],
    )
    .await;
    agentprism::engine::runner::AgentRunner::shutdown(
        &*tool.runner,
        std::time::Duration::from_secs(5),
    )
    .await;
}

/// A dry run that fails after made-up answers says that the answers were the dry run's and
/// what they look like, so code written for a live answer is not a mystery.
#[test]
fn a_dry_run_failure_after_made_up_answers_says_where_they_came_from() {
    let ctx = TestContext::new().with_mock_backend(json!({}));
    let path = ctx.write(
        "wf.js",
        "export const meta = { name: 'dry', description: 'dry run values', model: 'mock' };\n\
         const listed = await agent('List the files');\n\
         return listed.files.map((file) => file.trim());\n",
    );
    let finished = ctx.run(&["run", path.to_str().unwrap()]);
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    for needle in [
        "TypeError",
        "the dry run calls no agent",
        "[dry-run] mock output for <label>",
        "docs/dry-run.md",
    ] {
        assert!(
            finished.stderr.contains(needle),
            "{needle:?} in:\n{}",
            finished.stderr
        );
    }
    assert_eq!(runs_listed(&ctx), 0);

    // A script that fails before any answer gets no such note: nothing made up was involved.
    let early = ctx.write(
        "early.js",
        "export const meta = { name: 'dry', description: 'dry run values', model: 'mock' };\n\
         null.x;\n\
         return await agent('never');\n",
    );
    let finished = ctx.run(&["run", early.to_str().unwrap()]);
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    assert!(finished.stderr.contains("TypeError"), "{}", finished.stderr);
    assert!(
        !finished.stderr.contains("docs/dry-run.md"),
        "{}",
        finished.stderr
    );
}

/// A backend started through `npx` may spend a while downloading its adapter: the command
/// line says so on stderr as it starts it, instead of waiting silently.
#[test]
fn starting_a_backend_through_npx_says_it_may_download() {
    let ctx = TestContext::new();
    let npx = ctx.write(
        "bin/npx",
        &format!("#!/bin/sh\nexec {} \"$@\"\n", mock_agent_binary().display()),
    );
    std::fs::set_permissions(&npx, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let backends = json!({"viaNpx": {"command": npx, "args": ["-y", "some-acp-adapter"]}});
    let ctx = ctx.set("AGENTPRISM_BACKENDS", backends.to_string());
    let path = ctx.write("wf.js", &script("viaNpx"));
    let finished = ctx.run(&["validate", path.to_str().unwrap()]);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stderr.contains("backend viaNpx: starting `")
            && finished.stderr.contains("npx downloads the adapter"),
        "{}",
        finished.stderr
    );
}
