//! `action:"config"` through the MCP `workflow` tool over the real ACP runner, with each of the
//! four built-in backends pointed (by its `AGENTPRISM_*_ACP_CMD` override) at
//! `examples/catalog_acp_agent`, which replays what claude-agent-acp, codex-acp, opencode and
//! pi-acp answered when recorded (`tests/fixtures/catalogs/`). pi's recorded `enabledModels`
//! sit in the test's HOME, where pi keeps them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentprism::acp::lookup::Backends;
use agentprism::acp::{AcpConfig, AcpRunner};
use agentprism::engine::runner::AgentRunner;
use agentprism::engine::{Engine, EngineConfig};
use agentprism::env::EnvSnapshot;
use agentprism::mcp::handler::McpHandler;
use agentprism::store::SqliteStore;
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

use crate::support::context::agentprism_binary;

const BACKENDS: [&str; 4] = ["claude", "codex", "opencode", "pi"];

fn catalog_agent_binary() -> PathBuf {
    let path = agentprism_binary()
        .parent()
        .expect("bin dir")
        .join("examples/catalog_acp_agent");
    assert!(
        path.exists(),
        "{} does not exist: run `cargo build --examples` (plain `cargo test` builds it)",
        path.display()
    );
    path
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/catalogs")
        .join(format!("{name}.json"))
}

fn fixture(name: &str) -> Value {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// The workflow tool over an engine whose four built-ins replay the recorded catalogs.
struct Replay {
    _dir: tempfile::TempDir,
    project: PathBuf,
    server: Arc<WorkflowServer>,
    runner: Arc<AcpRunner>,
}

impl Replay {
    fn new() -> Replay {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".pi/agent")).expect("pi agent dir");
        std::fs::create_dir_all(&project).expect("project");
        std::fs::write(
            home.join(".pi/agent/settings.json"),
            fixture("pi")["piSettings"].to_string(),
        )
        .expect("pi settings");
        let agent = catalog_agent_binary().display().to_string();
        let mut pairs = vec![
            ("PATH".to_owned(), String::new()),
            ("HOME".to_owned(), home.display().to_string()),
        ];
        for name in BACKENDS {
            let path = fixture_path(name).display().to_string();
            assert!(
                !path.contains(char::is_whitespace),
                "{path} contains whitespace (the args variable is split on it)"
            );
            let upper = name.to_uppercase();
            pairs.push((format!("AGENTPRISM_{upper}_ACP_CMD"), agent.clone()));
            pairs.push((format!("AGENTPRISM_{upper}_ACP_ARGS"), path));
        }
        let env = EnvSnapshot::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let runner = Arc::new(AcpRunner::new(AcpConfig::new(env.clone())));
        let engine = Engine::new(
            Arc::new(SqliteStore::open(&dir.path().join("state")).expect("store")),
            runner.clone(),
            Arc::new(Backends::from_env(&env).expect("backends")),
            EngineConfig {
                home: Some(dir.path().to_path_buf()),
                ..EngineConfig::default()
            },
        );
        let server = WorkflowServer::new(engine, WorkflowServerOptions::default());
        Replay {
            _dir: dir,
            project,
            server,
            runner,
        }
    }

    async fn config(&self, extra: Value) -> Value {
        let context =
            crate::workflow_tool::context(Some("s"), json!(uuid::Uuid::new_v4().to_string()));
        let mut arguments = json!({"action": "config", "projectDir": self.project});
        for (key, value) in extra.as_object().expect("fields") {
            arguments[key] = value.clone();
        }
        self.server
            .tools()
            .call(&context, "workflow", &arguments)
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    async fn shutdown(self) {
        self.runner
            .shutdown(std::time::Duration::from_secs(5))
            .await;
    }
}

fn summary_of<'a>(answer: &'a Value, route: &str) -> &'a Value {
    answer["structuredContent"]["authoringSummary"]["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .find(|entry| entry["route"] == route)
        .unwrap_or_else(|| panic!("no summary for {route}: {answer:#}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// One `config` call over the four recorded catalogs: Claude and Codex listed whole, pi
/// through its `enabledModels`, opencode's direct models before its aggregator selectors and
/// its modes from its mode option; then an exact model's options through `modelSpecs`,
/// opencode's OpenRouter group expanded with `modelFilter`, and a browse selector refused
/// as a `modelSpecs` route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_summarises_the_recorded_adapter_catalogs() {
    let replay = Replay::new();
    let all = replay.config(json!({})).await;
    assert_ne!(all["isError"], true, "{all:#}");
    for name in BACKENDS {
        assert_eq!(summary_of(&all, name)["probed"], true, "{name}: {all:#}");
    }

    let claude = summary_of(&all, "claude");
    assert_eq!(
        strings(&claude["models"]),
        ["default", "opus", "fable", "sonnet", "haiku"]
    );
    assert!(strings(&claude["modes"]).contains(&"bypassPermissions"));
    let codex = summary_of(&all, "codex");
    assert_eq!(codex["currentModel"], "gpt-5.5");
    assert_eq!(
        strings(&codex["modes"]),
        ["read-only", "auto", "full-access"]
    );

    let pi = summary_of(&all, "pi");
    assert_eq!(pi["modelsFrom"], "enabledModels", "{pi:#}");
    assert_eq!(strings(&pi["unmatchedPatterns"]), ["xai/grok-4.7"]);
    let pi_models = strings(&pi["models"]);
    assert!(pi_models.contains(&"anthropic/claude-opus-5-5"));
    assert!(pi_models.contains(&"openrouter/google/gemini-4-argon"));
    assert!(pi_models.len() < 30, "{pi_models:?}");
    assert_eq!(pi["currentModel"], "anthropic/claude-sonnet-5-5");

    let opencode = summary_of(&all, "opencode");
    assert_eq!(strings(&opencode["modes"]), ["build", "plan"]);
    let harness = all["structuredContent"]["harnesses"]
        .as_array()
        .expect("harnesses")
        .iter()
        .find(|entry| entry["backend"] == "opencode")
        .expect("opencode catalog");
    assert_eq!(harness["modes"][1]["id"], "plan");
    assert_eq!(
        harness["modes"][1]["description"],
        "Plan mode. Disallows all edit tools."
    );
    assert!(
        strings(&opencode["models"])
            .iter()
            .all(|model| model.starts_with("anthropic/") || model.starts_with("openai/"))
    );
    let selectors: Vec<&str> = opencode["browse"]
        .as_array()
        .expect("browse")
        .iter()
        .filter_map(|group| group["selector"].as_str())
        .collect();
    for expected in [
        "openrouter/*",
        "opencode/*",
        "huggingface/*",
        "amazon-bedrock/*",
    ] {
        assert!(selectors.contains(&expected), "{expected}: {selectors:?}");
    }
    let text = all["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("xai/grok-4.7"), "{text}");

    let exact = replay
        .config(json!({"modelSpecs": ["pi/openai/gpt-4.1", "opencode/anthropic/claude-haiku-4-5"]}))
        .await;
    let pi_exact = summary_of(&exact, "pi/openai/gpt-4.1");
    assert_eq!(pi_exact["currentModel"], "openai/gpt-4.1", "{exact:#}");
    assert_eq!(pi_exact["options"][0]["values"], json!(["off"]));
    let opencode_exact = summary_of(&exact, "opencode/anthropic/claude-haiku-4-5");
    assert_eq!(opencode_exact["options"][0]["id"], "effort");

    let expanded = replay
        .config(json!({"harnesses": ["opencode"], "modelFilter": "openrouter/anthropic/*"}))
        .await;
    let listed = strings(&summary_of(&expanded, "opencode")["models"]);
    assert!(!listed.is_empty());
    assert!(
        listed
            .iter()
            .all(|model| model.starts_with("openrouter/anthropic/"))
    );

    let refused = replay
        .config(json!({"modelSpecs": ["opencode/openrouter/*"]}))
        .await;
    assert_eq!(refused["isError"], true, "{refused:#}");
    let message = refused.to_string();
    assert!(
        message.contains("modelSpecs") && message.contains("browse selector"),
        "{refused:#}"
    );
    replay.shutdown().await;
}
