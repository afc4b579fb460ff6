//! The MCP core in memory, without a socket: every malformed or out-of-era input gets the
//! specific JSON-RPC error, and both eras dispatch to a tiny handler. The handler here is
//! shared with the HTTP and stdio tests.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use agentprism::mcp::handler::codes;
use agentprism::mcp::{
    McpError, McpHandler, McpResult, McpServer, NotificationHub, RequestContext, ServerInfo,
    ServerOptions, Tool, ToolAnswer, ToolHandler, ToolRegistry, TransportContext, TransportKind,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Tools `echo`, `progress`, `wait_for_cancel` and `hold`; resources `test://a` (subscribable);
/// no prompts, so prompt methods must be -32601.
pub struct TestHandler {
    pub hub: NotificationHub,
    tools: ToolRegistry,
}

/// Answers the tools of [`TestHandler`].
struct TestTools;

impl TestHandler {
    pub fn server() -> (Arc<McpServer>, NotificationHub) {
        let hub = NotificationHub::new();
        let mut tools = ToolRegistry::new();
        for name in ["echo", "progress", "wait_for_cancel", "hold"] {
            let definition = json!({"name": name, "inputSchema": {"type": "object"}});
            tools
                .register(Tool::new(definition, Arc::new(TestTools)))
                .expect("a valid tool");
        }
        let handler = Arc::new(TestHandler {
            hub: hub.clone(),
            tools,
        });
        (
            Arc::new(McpServer::new(handler, ServerOptions::default())),
            hub,
        )
    }
}

#[async_trait]
impl ToolHandler for TestTools {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let answer = match name {
            "echo" => Ok(json!({"content": [{"type": "text", "text": arguments.to_string()}]})),
            "progress" => {
                ctx.progress(1.0, Some(2.0), None);
                ctx.notifier.notify(
                    "notifications/message",
                    json!({"level": "info", "data": "log line"}),
                );
                Ok(json!({"content": [{"type": "text", "text": "done"}]}))
            }
            "wait_for_cancel" => {
                // Tells the client it started, so tests know when to cancel.
                ctx.notifier.notify(
                    "notifications/progress",
                    json!({"progressToken": "started", "progress": 0}),
                );
                let text =
                    match tokio::time::timeout(Duration::from_secs(30), ctx.cancel.cancelled())
                        .await
                    {
                        Ok(()) => "cancelled",
                        Err(_) => "timed out",
                    };
                Ok(json!({"content": [{"type": "text", "text": text}]}))
            }
            "hold" => {
                // Waits for the test to release it, sending nothing meanwhile (so its answer
                // stays plain JSON), then records that it ran to its end.
                let key = arguments["key"].as_str().unwrap_or_default();
                let hold = Hold::named(key);
                hold.started.add_permits(1);
                let _released = hold.release.acquire().await;
                hold.finished.add_permits(1);
                Ok(json!({"content": [{"type": "text", "text": "held"}]}))
            }
            _ => Err(McpError::invalid_params(format!("unknown tool {name}"))),
        };
        answer.map(ToolAnswer::Value)
    }
}

#[async_trait]
impl McpHandler for TestHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "test".into(),
            version: "1.0.0".into(),
            title: None,
        }
    }

    fn capabilities(&self) -> Value {
        json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}})
    }

    fn hub(&self) -> &NotificationHub {
        &self.hub
    }

    async fn list_tools(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        let schema = json!({"type": "object"});
        Ok(json!({"tools": [
            {"name": "echo", "inputSchema": schema},
            {"name": "progress", "inputSchema": schema},
            {"name": "wait_for_cancel", "inputSchema": schema},
        ]}))
    }

    fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        if uri == "test://a" {
            Ok(json!({"contents": [{"uri": uri, "text": "a"}]}))
        } else {
            Err(
                McpError::new(codes::RESOURCE_NOT_FOUND, "Resource not found")
                    .with_data(json!({"uri": uri})),
            )
        }
    }

    async fn check_subscribe(&self, _ctx: &RequestContext, uri: &str) -> McpResult<()> {
        if uri == "test://a" {
            Ok(())
        } else {
            Err(McpError::invalid_params("no such resource"))
        }
    }
}

/// The gates of one `hold` call, by the key its arguments name (tests run in parallel).
pub struct Hold {
    /// A permit once the handler is running.
    pub started: Semaphore,
    /// The test's permit to finish.
    pub release: Semaphore,
    /// A permit once the handler has finished.
    pub finished: Semaphore,
}

impl Hold {
    pub fn named(key: &str) -> Arc<Hold> {
        static HOLDS: LazyLock<Mutex<HashMap<String, Arc<Hold>>>> = LazyLock::new(Mutex::default);
        HOLDS
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_insert_with(|| {
                Arc::new(Hold {
                    started: Semaphore::new(0),
                    release: Semaphore::new(0),
                    finished: Semaphore::new(0),
                })
            })
            .clone()
    }
}

pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

fn context(session: Option<&str>) -> TransportContext {
    let mut context = TransportContext::new(TransportKind::Stdio, "memory");
    context.session_id = session.map(str::to_owned);
    context
}

async fn send(server: &McpServer, body: &str, session: Option<&str>) -> (u16, Value) {
    let outcome = server.handle_bytes(body.as_bytes(), context(session)).await;
    (outcome.status, outcome.response.unwrap_or(Value::Null))
}

async fn initialize(server: &McpServer) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
    }});
    let outcome = server
        .handle_bytes(body.to_string().as_bytes(), context(None))
        .await;
    let response = outcome.response.unwrap();
    assert_eq!(response["result"]["protocolVersion"], "2025-06-18");
    outcome.new_session.expect("initialize creates a session")
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

#[tokio::test]
async fn malformed_messages_get_parse_and_invalid_request_errors() {
    let (server, _) = TestHandler::server();
    let (_, response) = send(&server, "{not json", None).await;
    assert_eq!(error_code(&response), codes::PARSE_ERROR);
    assert_eq!(response["id"], Value::Null);

    let (_, response) = send(
        &server,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        None,
    )
    .await;
    assert_eq!(error_code(&response), codes::INVALID_REQUEST);
    assert_eq!(response["id"], Value::Null);

    let (_, response) = send(&server, "42", None).await;
    assert_eq!(error_code(&response), codes::INVALID_REQUEST);

    let (_, response) = send(&server, r#"{"id":1,"method":"ping"}"#, None).await;
    assert_eq!(error_code(&response), codes::INVALID_REQUEST);
    assert_eq!(response["id"], 1);

    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
        None,
    )
    .await;
    assert_eq!(error_code(&response), codes::INVALID_REQUEST);

    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#,
        None,
    )
    .await;
    assert_eq!(error_code(&response), codes::INVALID_PARAMS);
}

#[tokio::test]
async fn legacy_session_dispatches_and_checks_params() {
    let (server, _) = TestHandler::server();
    let session = initialize(&server).await;
    let session = Some(session.as_str());
    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        session,
    )
    .await;
    assert_eq!(response["result"], json!({}));

    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":2,"method":"no/such"}"#,
        session,
    )
    .await;
    assert_eq!(error_code(&response), codes::METHOD_NOT_FOUND);

    // Prompts were not declared, so their methods do not exist.
    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":3,"method":"prompts/list"}"#,
        session,
    )
    .await;
    assert_eq!(error_code(&response), codes::METHOD_NOT_FOUND);

    let wrong = [
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":7}}"#,
    ];
    for body in wrong {
        let (_, response) = send(&server, body, session).await;
        assert_eq!(error_code(&response), codes::INVALID_PARAMS, "{body}");
    }

    let (_, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"test://zz"}}"#,
        session,
    )
    .await;
    assert_eq!(error_code(&response), codes::RESOURCE_NOT_FOUND);

    let (_, response) =
        send(&server, r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}"#, session).await;
    assert_eq!(response["result"]["content"][0]["text"], r#"{"a":1}"#);
    assert!(
        response["result"].get("resultType").is_none(),
        "legacy results stay unshaped"
    );

    // A stale session id is not found.
    let (status, _) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#,
        Some("stale"),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn stateless_requests_need_meta_and_a_supported_version() {
    let (server, _) = TestHandler::server();
    let (status, response) = send(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        None,
    )
    .await;
    assert_eq!(
        (status, error_code(&response)),
        (400, codes::INVALID_PARAMS)
    );

    let only_version = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28"
    }}});
    let (status, response) = send(&server, &only_version.to_string(), None).await;
    assert_eq!(
        (status, error_code(&response)),
        (400, codes::INVALID_PARAMS)
    );

    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/protocolVersion"] = "1999-01-01".into();
    let body =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}});
    let (status, response) = send(&server, &body.to_string(), None).await;
    assert_eq!(
        (status, error_code(&response)),
        (400, codes::UNSUPPORTED_VERSION)
    );
    assert_eq!(response["error"]["data"]["requested"], "1999-01-01");
    assert_eq!(
        response["error"]["data"]["supported"],
        json!(["2026-07-28"])
    );
    assert_eq!(response["id"], 3);

    for removed in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "no/such",
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 4, "method": removed, "params": {"_meta": modern_meta(), "uri": "test://a"}});
        let (status, response) = send(&server, &body.to_string(), None).await;
        assert_eq!(
            (status, error_code(&response)),
            (404, codes::METHOD_NOT_FOUND),
            "{removed}"
        );
    }

    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"_meta": modern_meta(), "uri": "test://zz"}});
    let (_, response) = send(&server, &body.to_string(), None).await;
    assert_eq!(error_code(&response), codes::INVALID_PARAMS);
    assert_eq!(response["error"]["data"]["uri"], "test://zz");
}

#[tokio::test]
async fn stateless_results_are_shaped_and_discover_describes_the_server() {
    let (server, _) = TestHandler::server();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}});
    let (status, response) = send(&server, &body.to_string(), None).await;
    assert_eq!(status, 200);
    let result = &response["result"];
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].as_u64().is_some());
    assert!(matches!(
        result["cacheScope"].as_str(),
        Some("public" | "private")
    ));
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "progress", "wait_for_cancel"]);

    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": modern_meta()}});
    let (_, response) = send(&server, &body.to_string(), None).await;
    let result = &response["result"];
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test"
    );
    assert!(result["capabilities"]["tools"].is_object());
    assert_eq!(
        server.session_count(),
        0,
        "stateless requests create no session"
    );
}

#[tokio::test]
async fn log_messages_reach_a_stateless_caller_only_when_it_asked() {
    let (server, _) = TestHandler::server();
    for (with_level, expected) in [
        (false, vec!["notifications/progress"]),
        (
            true,
            vec!["notifications/progress", "notifications/message"],
        ),
    ] {
        let mut meta = modern_meta();
        meta["progressToken"] = "p".into();
        if with_level {
            meta["io.modelcontextprotocol/logLevel"] = "debug".into();
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "progress", "_meta": meta}});
        let (sender, mut receiver) = agentprism::mcp::outbox::outbox();
        let mut context = context(None);
        context.notifications = Some(sender);
        let outcome = server
            .handle_bytes(body.to_string().as_bytes(), context)
            .await;
        assert_eq!(
            outcome.response.unwrap()["result"]["resultType"],
            "complete"
        );
        let mut methods = Vec::new();
        while let Some(note) = receiver.try_recv() {
            methods.push(note["method"].as_str().unwrap().to_owned());
        }
        assert_eq!(methods, expected);
    }
}

#[tokio::test]
async fn notifications_cancelled_cancels_the_matching_request_which_gets_no_response() {
    let (server, _) = TestHandler::server();
    let session = initialize(&server).await;
    let (sender, mut receiver) = agentprism::mcp::outbox::outbox();
    let mut call_context = context(Some(&session));
    call_context.notifications = Some(sender);
    let body = r#"{"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{"name":"wait_for_cancel"}}"#;
    let call = {
        let server = server.clone();
        tokio::spawn(async move { server.handle_bytes(body.as_bytes(), call_context).await })
    };
    let started = tokio::time::timeout(Duration::from_secs(30), receiver.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started["params"]["progressToken"], "started");
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-1"}}"#;
    let (status, _) = send(&server, cancel, Some(&session)).await;
    assert_eq!(status, 202);
    let outcome = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .unwrap()
        .unwrap();
    // The client gave up on the request: it gets no response at all.
    assert_eq!(outcome.response, None, "{outcome:?}");
    assert_eq!(outcome.status, 202);
}
