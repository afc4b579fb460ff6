//! The workflow MCP server driven through its `McpHandler` methods, without a transport:
//! the tool's validation and actions, run resources, subscriptions, the prompt and the
//! skill (engine.md 9 scenarios that concern the tool surface).

use std::sync::Arc;
use std::time::Duration;

use agentprism::mcp::handler::{Era, McpError, McpHandler, RequestContext, RequestNotifier, codes};
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::{Harness, harness};

mod controls;
mod reads;
mod skill;

/// An engine harness and the workflow tool server over it.
pub(crate) struct Setup {
    pub(crate) h: Harness,
    pub(crate) server: Arc<WorkflowServer>,
}

pub(crate) fn setup() -> Setup {
    let h = harness();
    let server = WorkflowServer::new(h.engine.clone(), WorkflowServerOptions::default());
    Setup { h, server }
}

/// A legacy-session request context for calling the tool handler directly.
pub(crate) fn context(session: Option<&str>, id: Value) -> RequestContext {
    RequestContext {
        era: Era::Legacy {
            version: "2025-11-25".into(),
        },
        session_id: session.map(str::to_owned),
        request_id: id,
        method: "tools/call".into(),
        client_capabilities: json!({}),
        client_info: None,
        progress_token: None,
        meta: Value::Null,
        cancel: CancellationToken::new(),
        notifier: RequestNotifier::discard(),
        principal: None,
    }
}

/// Every call gets a fresh request id unless a test needs a repeat.
pub(crate) fn fresh() -> RequestContext {
    context(Some("session-1"), json!(uuid::Uuid::new_v4().to_string()))
}

impl Setup {
    /// One `workflow` call in a legacy session with a fresh request id.
    pub(crate) async fn call(&self, arguments: Value) -> Value {
        self.server
            .tools()
            .call(&fresh(), "workflow", &arguments)
            .await
            .map(agentprism::mcp::ToolAnswer::into_value)
            .unwrap_or_else(|e| panic!("{arguments}: {e}"))
    }

    /// A call the tool refuses as invalid input: a tool execution error with
    ///  `structuredContent.error` naming the field.
    async fn invalid(&self, arguments: Value) -> Value {
        let result = self.call(arguments.clone()).await;
        assert!(is_error(&result), "{arguments}: {result}");
        assert!(
            result["structuredContent"]["error"].is_object(),
            "{arguments}: {result}"
        );
        result
    }

    async fn run(&self, script: &str) -> Value {
        self.call(json!({"action": "run", "projectDir": self.h.project, "script": script}))
            .await
    }

    /// Runs `script` to its end and returns the run id.
    async fn run_to_end(&self, script: &str) -> String {
        let ack = self.run(script).await;
        assert_eq!(ack["isError"], Value::Null, "{ack:#}");
        let run_id = ack["structuredContent"]["runId"]
            .as_str()
            .unwrap()
            .to_owned();
        self.h.engine.wait(&parse_id(&run_id)).await;
        run_id
    }

    async fn status(&self, run_id: &str) -> Value {
        self.call(json!({"action": "status", "runId": run_id}))
            .await
    }

    async fn read(&self, uri: &str) -> Result<Value, McpError> {
        self.server.read_resource(&fresh(), uri).await
    }

    async fn read_json(&self, uri: &str) -> Value {
        let read = self
            .read(uri)
            .await
            .unwrap_or_else(|e| panic!("{uri}: {e}"));
        serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap()
    }
}

fn parse_id(run_id: &str) -> agentprism::model::RunId {
    agentprism::model::RunId::parse(run_id).unwrap()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

const HI: &str = "export const meta = { name: 'hi', description: 'd' };\nreturn await agent('hi', {model: 'codex'});";

#[tokio::test]
async fn the_tool_list_has_one_flat_strict_tool() {
    let s = setup();
    let list = s.server.list_tools(&fresh(), None).await.unwrap();
    let tools = list["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    let schema = &tools[0]["inputSchema"];
    assert_eq!(tools[0]["name"], "workflow");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["action"]));
    for combinator in ["oneOf", "anyOf", "allOf", "not", "if"] {
        assert!(schema.get(combinator).is_none(), "{combinator}");
    }
    assert_eq!(
        schema["properties"]["action"]["enum"]
            .as_array()
            .unwrap()
            .len(),
        9
    );
    // Every field an action accepts is a property.
    for (_, fields) in agentprism::tools::ACTIONS {
        for field in *fields {
            assert!(schema["properties"].get(*field).is_some(), "{field}");
        }
    }
    let capabilities = s.server.capabilities();
    assert_eq!(
        capabilities["resources"],
        json!({"subscribe": true, "listChanged": true})
    );
    assert_eq!(
        capabilities["extensions"]["io.modelcontextprotocol/skills"],
        json!({"directoryRead": true})
    );
}

/// Scenario 1: ack, store row and script copy, completion, exact result.
#[tokio::test]
async fn a_run_is_acknowledged_and_its_result_paged() {
    let s = setup();
    let ack = s.run(HI).await;
    let document = &ack["structuredContent"];
    assert_eq!(document["accepted"], true, "{ack:#}");
    assert_eq!(document["action"], "run");
    assert_eq!(document["scriptSource"], "inline");
    let run_id = document["runId"].as_str().unwrap();
    assert!(agentprism::model::RunId::parse(run_id).is_ok());
    let script_path = document["scriptPath"].as_str().unwrap();
    assert!(script_path.ends_with(&format!("{run_id}.script.js")));
    assert!(std::path::Path::new(script_path).exists());
    assert_eq!(document["scriptUri"], format!("file://{script_path}"));
    assert_eq!(
        document["eventsUri"],
        format!("workflow://runs/{run_id}/events")
    );
    assert_eq!(
        document["limits"],
        json!({"maxAgents": 1000, "tokenBudget": null, "costBudgetUsd": null, "concurrency": 8, "agentRetries": 0, "agentTimeoutMs": 1800000})
    );
    assert!(document.get("result").is_none());
    let links: Vec<&Value> = ack["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{ack:#}");
    assert_eq!(links[0]["uri"], document["scriptUri"]);
    assert_eq!(links[0]["mimeType"], "text/javascript");
    assert_eq!(links[1]["uri"], document["eventsUri"]);
    assert!(
        links.iter().all(|l| l["name"].is_string()
            && l["title"].is_string()
            && l["description"].is_string())
    );

    s.h.engine.wait(&parse_id(run_id)).await;
    let status = s.status(run_id).await;
    assert!(!is_error(&status));
    assert_eq!(status["structuredContent"]["status"], "completed");
    assert!(text_of(&status).len() <= 8192);
    assert!(
        status["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["uri"] == format!("workflow://runs/{run_id}/result")),
        "{status:#}"
    );
    let page = s.call(json!({"action": "result", "runId": run_id})).await;
    assert_eq!(
        page["structuredContent"]["chunk"],
        json!("ECHO: hi").to_string()
    );
    assert_eq!(page["structuredContent"]["hasMore"], false);
    let resource = s
        .read(&format!("workflow://runs/{run_id}/result"))
        .await
        .unwrap();
    assert_eq!(
        resource["contents"][0]["text"],
        json!("ECHO: hi").to_string()
    );
    assert_eq!(resource["contents"][0]["mimeType"], "application/json");
}

/// Scenarios 2 and 4: preparation failures are tool errors and store nothing.
#[tokio::test]
async fn preparation_failures_are_tool_errors_with_nothing_stored() {
    let s = setup();
    let bad = s.run("const x = 1;").await;
    assert!(is_error(&bad), "{bad:#}");
    assert!(bad.get("structuredContent").is_none());
    let unrouted = s
        .run("export const meta = { name: 'x', description: 'd' };\nawait agent('x');")
        .await;
    assert!(is_error(&unrouted));
    assert!(text_of(&unrouted).contains("agent 0@0"), "{unrouted:#}");
    assert!(s.h.engine.list(None, 50).await.unwrap().is_empty());
    assert!(!s.h.runs_dir().exists() || walk_count(&s.h.runs_dir()) == 0);
}

fn walk_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        walk_count(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

const NEEDS_SETUP: &str = "export const meta = { name: 'x', description: 'd', model: 'mine', backends: { mine: { command: 'mine-acp' } } };\nreturn await agent('hi');";

/// Scenario 9: a fifth active run in a project is refused; another project is not full.
#[tokio::test]
async fn a_fifth_active_run_is_refused_but_another_project_is_accepted() {
    let s = setup();
    for _ in 0..4 {
        let ack = s.run(NEEDS_SETUP).await;
        assert_eq!(ack["structuredContent"]["status"], "pending", "{ack:#}");
    }
    let fifth = s.run(NEEDS_SETUP).await;
    assert!(is_error(&fifth), "{fifth:#}");
    assert!(text_of(&fifth).contains("4 active runs"), "{fifth:#}");
    let other = s.h.project.parent().unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let accepted = s
        .call(json!({"action": "run", "projectDir": other, "script": NEEDS_SETUP}))
        .await;
    assert_eq!(
        accepted["structuredContent"]["accepted"], true,
        "{accepted:#}"
    );
}

/// Scenario 10: limits are clamped and echoed.
#[tokio::test]
async fn limits_are_clamped_and_echoed() {
    let s = setup();
    let ack = s
        .call(json!({"action": "run", "projectDir": s.h.project, "script": HI, "concurrency": 99, "agentRetries": 9}))
        .await;
    let limits = &ack["structuredContent"]["limits"];
    assert_eq!(
        (
            limits["concurrency"].as_u64(),
            limits["agentRetries"].as_u64()
        ),
        (Some(16), Some(3))
    );
}

/// Scenario 11 and the rest of the validation table: -32602 naming action, field and the
/// accepted fields.
#[tokio::test]
async fn invalid_input_is_rejected_with_the_accepted_fields() {
    let s = setup();
    let both = s
        .invalid(json!({"action": "run", "projectDir": s.h.project, "script": HI, "scriptPath": "/tmp/x.js"}))
        .await;
    let message = text_of(&both);
    assert!(message.contains("\"run\""), "{both}");
    assert!(message.contains("scriptPath"), "{both}");
    assert!(
        message.contains("accepts: action, projectDir, script, scriptPath, args"),
        "{both}"
    );

    let foreign = s
        .invalid(json!({"action": "status", "runId": "abc-def", "args": {}}))
        .await;
    let message = text_of(&foreign);
    assert!(message.contains("\"args\""), "{foreign}");
    assert!(
        message.contains("accepts: action, runId, lastN, labelGlob, logLines"),
        "{foreign}"
    );
    assert_eq!(
        foreign["structuredContent"]["error"],
        json!({"action": "status", "field": "args", "accepted": ["action", "runId", "lastN", "labelGlob", "logLines"]})
    );

    let cases = [
        json!({}),
        json!({"action": "launch"}),
        json!({"action": 3}),
        json!({"action": "status"}),
        json!({"action": "status", "runId": "Not-Valid"}),
        json!({"action": "status", "runId": format!("a-{}", "b".repeat(200))}),
        json!({"action": "status", "runId": "abc-def", "lastN": 0}),
        json!({"action": "status", "runId": "abc-def", "lastN": 51}),
        json!({"action": "status", "runId": "abc-def", "logLines": 51}),
        json!({"action": "status", "runId": "abc-def", "logLines": "5"}),
        json!({"action": "status", "runId": "abc-def", "labelGlob": ""}),
        json!({"action": "status", "runId": "abc-def", "labelGlob": "é".repeat(129)}),
        json!({"action": "status", "runId": "abc-def", "bogus": 1}),
        json!({"action": "result", "runId": "abc-def", "maxBytes": 3}),
        json!({"action": "result", "runId": "abc-def", "maxBytes": 16385}),
        json!({"action": "result", "runId": "abc-def", "offset": -1}),
        json!({"action": "run", "projectDir": "relative/dir", "script": HI}),
        json!({"action": "run", "projectDir": s.h.project}),
        json!({"action": "run", "projectDir": s.h.project, "scriptPath": "relative.js"}),
        json!({"action": "run", "script": HI}),
        json!({"action": "config"}),
        json!({"action": "config", "projectDir": s.h.project, "modelSpecs": ["codex"]}),
        json!({"action": "config", "projectDir": s.h.project, "harnesses": []}),
        json!({"action": "stop", "runId": "abc-def", "callIndex": 1, "forceOwner": true}),
        json!({"action": "stop", "runId": "abc-def", "forceOwner": "yes"}),
        json!({"action": "resume", "runId": "abc-def", "checkpointReplies": {"01": true}}),
        json!({"action": "resume", "runId": "abc-def", "checkpointReplies": []}),
        json!({"action": "setup-response", "runId": "abc-def", "setupId": "s", "response": {"action": "accept"}}),
        json!({"action": "setup-response", "runId": "abc-def", "setupId": "s", "response": {"action": "decline", "content": {}}}),
        json!({"action": "setup-response", "runId": "abc-def", "response": {"action": "decline"}}),
        json!({"action": "permissions-response", "runId": "abc-def", "permissionId": "p", "response": {"outcome": {"outcome": "selected"}}}),
        json!({"action": "permissions-response", "runId": "abc-def", "permissionId": "p", "response": {"outcome": {"outcome": "cancelled"}, "_meta": {}}}),
        json!({"action": "permissions-response", "runId": "abc-def", "permissionId": "p", "response": {"outcome": {"outcome": "selected", "optionId": "a", "_meta": {}}}}),
        json!({"action": "pause", "runId": "abc-def", "offset": 1}),
    ];
    for case in cases {
        let result = s.invalid(case.clone()).await;
        assert!(text_of(&result).starts_with("workflow"), "{case}: {result}");
        let error = &result["structuredContent"]["error"];
        assert!(
            error["field"].is_string() && error["accepted"].is_array(),
            "{case}: {result}"
        );
    }
    // An unknown tool is still a protocol error.
    let unknown_tool = s
        .server
        .tools()
        .call(&fresh(), "other", &json!({}))
        .await
        .map(agentprism::mcp::ToolAnswer::into_value);
    assert_eq!(unknown_tool.unwrap_err().code, codes::INVALID_PARAMS);
}

/// Every field declares its `type`, which the MCP Inspector's portability check and
/// Gemini-style function declarations want; `args` is therefore an object, and other JSON in
/// it is refused with an error naming `args`, storing nothing.
#[tokio::test]
async fn every_field_is_typed_and_args_takes_only_an_object() {
    let s = setup();
    let list = s.server.list_tools(&fresh(), None).await.unwrap();
    let properties = list["tools"][0]["inputSchema"]["properties"]
        .as_object()
        .unwrap()
        .clone();
    for (field, schema) in &properties {
        assert!(schema["type"].is_string(), "{field}: {schema}");
    }
    assert_eq!(properties["args"]["type"], "object");

    for args in [
        json!([1, 2]),
        json!("text"),
        json!(3),
        json!(null),
        json!(true),
    ] {
        let refused = s
            .invalid(
                json!({"action": "run", "projectDir": s.h.project, "script": HI, "args": args}),
            )
            .await;
        let message = text_of(&refused);
        assert!(
            message.contains("field \"args\" must be a JSON object"),
            "{args}: {refused}"
        );
        assert_eq!(refused["structuredContent"]["error"]["field"], "args");
    }
    assert!(s.h.engine.list(None, 50).await.unwrap().is_empty());
    assert!(!s.h.runs_dir().exists() || walk_count(&s.h.runs_dir()) == 0);
    let accepted = s
        .call(json!({"action": "run", "projectDir": s.h.project, "script": HI, "args": {"n": 1}}))
        .await;
    assert!(!is_error(&accepted), "{accepted}");
}

/// Decision 7: an unknown run id is the same tool error for every action.
#[tokio::test]
async fn unknown_runs_are_tool_errors_with_one_text() {
    let s = setup();
    for arguments in [
        json!({"action": "status", "runId": "zzz-yyy"}),
        json!({"action": "result", "runId": "zzz-yyy"}),
        json!({"action": "stop", "runId": "zzz-yyy"}),
        json!({"action": "pause", "runId": "zzz-yyy"}),
        json!({"action": "resume", "runId": "zzz-yyy"}),
    ] {
        let result = s.call(arguments.clone()).await;
        assert!(is_error(&result), "{arguments}");
        assert!(
            text_of(&result).starts_with("No workflow run found for runId \"zzz-yyy\""),
            "{arguments}: {result}"
        );
    }
}
