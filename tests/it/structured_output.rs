//! Schema calls on the scripted mock agent through the real ACP runner: an agent that takes
//! HTTP MCP servers is offered the `StructuredOutput` tool and answers through it (fixing a
//! rejected answer in the same turn); one that never calls it, or cannot be offered it, falls
//! back to the JSON in its text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentprism::engine::{Engine, EngineConfig, RunRequest, ScriptInput, StatusQuery};
use agentprism::store::SqliteStore;
use serde_json::{Value, json};

const SCHEMA: &str = "{type: 'object', properties: {verdict: {enum: ['pass', 'fail']}, \
                      score: {type: 'integer'}}, required: ['verdict', 'score'], \
                      additionalProperties: false}";

/// An engine whose backend `mock` is the mock agent with `knobs` in its environment, and the
/// file the agent logs every inbound message to.
struct World {
    dir: tempfile::TempDir,
    engine: Engine,
}

impl World {
    fn new(knobs: &[(&str, &str)]) -> World {
        World::with_backend(knobs, json!({}))
    }

    /// Like [`World::new`], with `fields` added to the backend's entry.
    fn with_backend(knobs: &[(&str, &str)], fields: Value) -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).expect("project dir");
        let mut env: serde_json::Map<String, Value> = knobs
            .iter()
            .map(|(key, value)| (key.to_string(), json!(value)))
            .collect();
        env.insert(
            "MOCK_ACP_LOG".into(),
            json!(dir.path().join("agent.log").display().to_string()),
        );
        let mut entry =
            json!({"command": crate::support::context::mock_agent_binary(), "env": env});
        if let (Value::Object(entry), Value::Object(fields)) = (&mut entry, fields) {
            entry.extend(fields);
        }
        let env = agentprism::env::EnvSnapshot::from_pairs([
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), dir.path().display().to_string()),
            (
                "AGENTPRISM_BACKENDS".to_owned(),
                json!({ "mock": entry }).to_string(),
            ),
        ]);
        let store = Arc::new(SqliteStore::open(&dir.path().join("state")).expect("store"));
        let acp = agentprism::acp::AcpConfig::from_env(&env).expect("acp config");
        let runner = Arc::new(agentprism::acp::AcpRunner::new(acp));
        let backends = agentprism::acp::lookup::Backends::from_env(&env).expect("backends");
        let engine = Engine::new(
            store,
            runner,
            Arc::new(backends),
            EngineConfig {
                home: Some(dir.path().to_path_buf()),
                probe: false,
                ..EngineConfig::default()
            },
        );
        World { dir, engine }
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// Runs one schema call with `prompt` and returns the run's status document.
    async fn schema_call(&self, prompt: &str) -> Value {
        let script = format!(
            "export const meta = {{ name: 's', description: 'd', model: 'mock' }};\n\
             return await agent({}, {{schema: {SCHEMA}}});",
            json!(prompt)
        );
        let admission = self
            .engine
            .start(RunRequest {
                project_dir: self.project(),
                script: ScriptInput::Inline(script),
                args: json!({}),
                limits: Default::default(),
                caller: None,
                trace: None,
            })
            .await
            .expect("admitted");
        self.engine.wait(&admission.run_id).await;
        json!(
            self.engine
                .status(&admission.run_id, &StatusQuery::default())
                .await
                .expect("status")
        )
    }

    /// The agent's inbound messages with this method, in order.
    fn received(&self, method: &str) -> Vec<Value> {
        logged(&self.dir.path().join("agent.log"))
            .into_iter()
            .filter(|message| message["method"] == method)
            .collect()
    }
}

fn logged(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn prompt_text(message: &Value) -> String {
    message["params"]["prompt"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn an_agent_that_takes_http_mcp_answers_through_the_tool_and_fixes_it_in_one_turn() {
    let world = World::new(&[("MOCK_ACP_MCP_HTTP", "1")]);
    let status = world
        .schema_call(
            "Judge the change.\n\
             @mock mcp_call agentprism_output StructuredOutput {\"verdict\":\"maybe\",\"score\":7}\n\
             @mock mcp_call agentprism_output StructuredOutput {\"verdict\":\"fail\",\"score\":7}",
        )
        .await;
    assert_eq!(status["status"], "completed", "{status:#}");
    assert_eq!(
        status["outcome"]["result"],
        json!({"verdict": "fail", "score": 7})
    );
    let opened = world.received("session/new");
    let servers = opened[0]["params"]["mcpServers"]
        .as_array()
        .expect("mcpServers");
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0]["type"], "http");
    assert_eq!(servers[0]["name"], "agentprism_output");
    let url = servers[0]["url"].as_str().expect("url");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let prompts = world.received("session/prompt");
    assert_eq!(prompts.len(), 1, "answered in one turn, no re-prompt");
    let text = prompt_text(&prompts[0]);
    assert!(text.contains("`StructuredOutput` tool"), "{text}");
    assert!(
        !text.contains("additionalProperties"),
        "the tool carries the schema, the prompt does not repeat it: {text}"
    );
}

#[tokio::test]
async fn an_agent_that_never_calls_the_tool_is_re_prompted_for_json() {
    let world = World::new(&[("MOCK_ACP_MCP_HTTP", "1")]);
    let status = world.schema_call("Judge the change.").await;
    assert_eq!(status["status"], "completed", "{status:#}");
    let result = &status["outcome"]["result"];
    assert!(
        result["verdict"].is_string() && result["score"].is_i64(),
        "{result}"
    );
    let prompts = world.received("session/prompt");
    assert_eq!(prompts.len(), 2, "one re-prompt");
    let repair = prompt_text(&prompts[1]);
    assert!(repair.contains("`StructuredOutput` tool"), "{repair}");
    assert!(
        repair.contains("additionalProperties"),
        "the re-prompt quotes the schema: {repair}"
    );
}

#[tokio::test]
async fn an_agent_without_http_mcp_gets_the_schema_in_its_prompt_and_no_tool() {
    let world = World::new(&[]);
    let status = world.schema_call("Judge the change.").await;
    assert_eq!(status["status"], "completed", "{status:#}");
    let opened = world.received("session/new");
    assert_eq!(opened[0]["params"]["mcpServers"], json!([]));
    let prompts = world.received("session/prompt");
    assert_eq!(prompts.len(), 1);
    assert!(prompt_text(&prompts[0]).contains("additionalProperties"));
}

#[tokio::test]
async fn a_backend_that_turns_the_tool_off_gets_the_schema_in_its_prompt() {
    let world = World::with_backend(
        &[("MOCK_ACP_MCP_HTTP", "1")],
        json!({"structuredOutputTool": false}),
    );
    let status = world.schema_call("Judge the change.").await;
    assert_eq!(status["status"], "completed", "{status:#}");
    let opened = world.received("session/new");
    assert_eq!(opened[0]["params"]["mcpServers"], json!([]));
    let prompts = world.received("session/prompt");
    assert_eq!(prompts.len(), 1);
    assert!(prompt_text(&prompts[0]).contains("additionalProperties"));
}
