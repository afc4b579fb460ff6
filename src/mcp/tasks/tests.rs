//! The task wire against an in-memory handler: capability gating in both eras, the `ttl`
//! limit at its edge, task-support refusals, unknown ids, cancel rules, and first answer wins.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::*;
use crate::mcp::handler::{McpHandler, NotificationHub, ServerInfo};
use crate::mcp::observer::{AnsweredCall, CallObserver};
use crate::mcp::registry::{Tool, ToolHandler, ToolRegistry};
use crate::mcp::server::{McpServer, ServerOptions, TransportContext, TransportKind};
use crate::util::sync::Lock;

/// `ask` is a task that asks one question and answers with what it got; `plain` never
/// runs as a task; `only` runs only as one.
struct Handler {
    hub: NotificationHub,
    tools: ToolRegistry,
    memory: MemoryTasks,
}

struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    async fn call(
        &self,
        _ctx: &RequestContext,
        name: &str,
        _arguments: &Value,
    ) -> McpResult<crate::mcp::ToolAnswer> {
        Ok(json!({"content": [{"type": "text", "text": name}]}).into())
    }
}

#[async_trait]
impl TaskHandler for Handler {
    async fn create(&self, ctx: &RequestContext, call: TaskCall) -> McpResult<Created> {
        let job: TaskJob = Box::new(|input: TaskInput| {
            Box::pin(async move {
                let mut requests = Map::new();
                requests.insert("q".into(), form_request("?", json!({"type": "object"})));
                let answers = input.ask(requests).await.unwrap_or_default();
                TaskOutcome::Result(json!({"content": [], "structuredContent": answers}))
            })
        });
        Ok(Created::Task(self.memory.start(
            ctx,
            call.ttl_ms.unwrap_or(60_000),
            job,
        )))
    }
    async fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        self.memory.get(ctx, task_id)
    }
    async fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        self.memory.cancel(ctx, task_id)
    }
    async fn list(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<TaskPage> {
        Ok(self.memory.list(ctx))
    }
    async fn answer(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> McpResult<()> {
        self.memory.answer(ctx, task_id, responses)
    }
    async fn changed(&self, ctx: &RequestContext, seen: &TaskState) -> McpResult<TaskState> {
        self.memory.changed(ctx, seen).await
    }
}

#[async_trait]
impl McpHandler for Handler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "tasks-test".into(),
            version: "1.0.0".into(),
            title: None,
        }
    }
    fn capabilities(&self) -> Value {
        json!({"tools": {}})
    }
    fn hub(&self) -> &NotificationHub {
        &self.hub
    }
    fn tools(&self) -> &ToolRegistry {
        &self.tools
    }
    fn tasks(&self) -> Option<&dyn TaskHandler> {
        Some(self)
    }
    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        Err(McpError::invalid_params(format!("no resource {uri}")))
    }
}

fn server() -> McpServer {
    server_observed_by(None)
}

/// The test server, its registry's answers observed by `observer`.
fn server_observed_by(observer: Option<Arc<dyn CallObserver>>) -> McpServer {
    let mut tools = ToolRegistry::new();
    if let Some(observer) = observer {
        tools.observe(observer);
    }
    let tool = |name: &str, support| {
        Tool::new(
            json!({"name": name, "inputSchema": {"type": "object"}}),
            Arc::new(Echo),
        )
        .with_task_support(support)
    };
    tools.register(tool("ask", TaskSupport::Optional)).unwrap();
    tools
        .register(tool("plain", TaskSupport::Forbidden))
        .unwrap();
    tools.register(tool("only", TaskSupport::Required)).unwrap();
    let hub = NotificationHub::new();
    let memory = MemoryTasks::new(hub.clone());
    McpServer::new(
        Arc::new(Handler { hub, tools, memory }),
        ServerOptions::default(),
    )
}

fn transport(session: Option<&str>) -> TransportContext {
    let mut context = TransportContext::new(TransportKind::Stdio, "tasks-test");
    context.session_id = session.map(str::to_owned);
    context
}

async fn send(server: &McpServer, session: Option<&str>, body: Value) -> Value {
    let outcome = server
        .handle_bytes(body.to_string().as_bytes(), transport(session))
        .await;
    outcome.response.expect("a response")
}

async fn initialize(server: &McpServer, capabilities: Value) -> (String, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
    }});
    let outcome = server
        .handle_bytes(body.to_string().as_bytes(), transport(None))
        .await;
    (
        outcome.new_session.expect("a session"),
        outcome.response.expect("a response"),
    )
}

async fn legacy(server: &McpServer, session: &str, method: &str, params: Value) -> Value {
    send(
        server,
        Some(session),
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
    .await
}

async fn modern(server: &McpServer, tasks: bool, method: &str, mut params: Value) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {TASKS_EXTENSION: {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    send(
        server,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
    )
    .await
}

fn code(response: &Value) -> i64 {
    response["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn only_clients_that_speak_tasks_see_the_capability_and_the_execution_field() {
    let server = server();
    let (plain, answer) = initialize(&server, json!({})).await;
    assert!(answer["result"]["capabilities"].get("tasks").is_none());
    let listed = legacy(&server, &plain, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"][0].get("execution").is_none());

    let (speaking, answer) = initialize(&server, json!({"tasks": {}})).await;
    assert_eq!(
        answer["result"]["capabilities"]["tasks"]["requests"],
        json!({"tools": {"call": {}}})
    );
    let listed = legacy(&server, &speaking, "tools/list", json!({})).await;
    assert_eq!(
        listed["result"]["tools"][0]["execution"],
        json!({"taskSupport": "optional"})
    );
    assert!(listed["result"]["tools"][1].get("execution").is_none());

    let discovered = modern(&server, true, "server/discover", json!({})).await;
    let capabilities = &discovered["result"]["capabilities"];
    assert!(capabilities["extensions"].get(TASKS_EXTENSION).is_some());
    assert!(capabilities.get("tasks").is_none());
    let discovered = modern(&server, false, "server/discover", json!({})).await;
    assert!(
        discovered["result"]["capabilities"]
            .get("extensions")
            .is_none()
    );
}

#[tokio::test]
async fn a_ttl_at_the_limit_is_kept_and_one_past_it_refused() {
    let server = server();
    let (session, _) = initialize(&server, json!({"tasks": {}})).await;
    let call = |ttl: u64| json!({"name": "ask", "arguments": {}, "task": {"ttl": ttl}});
    let at = legacy(&server, &session, "tools/call", call(MAX_TTL_MS)).await;
    assert_eq!(at["result"]["task"]["ttl"], json!(MAX_TTL_MS), "{at}");
    assert_eq!(at["result"]["task"]["status"], "working");
    let past = legacy(&server, &session, "tools/call", call(MAX_TTL_MS + 1)).await;
    assert_eq!(code(&past), codes::INVALID_PARAMS, "{past}");
    assert!(
        past["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params.task.ttl")
    );
}

#[tokio::test]
async fn task_support_is_enforced_in_each_era() {
    let server = server();
    let (session, _) = initialize(&server, json!({"tasks": {}})).await;
    let task = json!({"task": {}});
    let mut forbidden = json!({"name": "plain", "arguments": {}});
    forbidden["task"] = task["task"].clone();
    let answer = legacy(&server, &session, "tools/call", forbidden).await;
    assert_eq!(code(&answer), codes::METHOD_NOT_FOUND, "{answer}");
    let answer = legacy(
        &server,
        &session,
        "tools/call",
        json!({"name": "only", "arguments": {}}),
    )
    .await;
    assert_eq!(code(&answer), codes::METHOD_NOT_FOUND, "{answer}");
    let plain = legacy(
        &server,
        &session,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    assert_eq!(plain["result"]["content"][0]["text"], "ask", "{plain}");

    let answer = modern(
        &server,
        false,
        "tools/call",
        json!({"name": "only", "arguments": {}}),
    )
    .await;
    assert_eq!(code(&answer), codes::MISSING_CAPABILITY, "{answer}");
    assert!(
        answer["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXTENSION].is_object()
    );
    // The 2026 wire ignores a legacy hint on a tool that never runs as a task.
    let answer = modern(
        &server,
        true,
        "tools/call",
        json!({"name": "plain", "arguments": {}, "task": {"ttl": 5}}),
    )
    .await;
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    let created = modern(
        &server,
        true,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert!(created["result"].get("task").is_none());
}

#[tokio::test]
async fn unknown_ids_removed_methods_and_missing_extension_are_refused() {
    let server = server();
    let unknown = modern(&server, true, "tasks/get", json!({"taskId": "nope"})).await;
    assert_eq!(code(&unknown), codes::INVALID_PARAMS);
    let gated = modern(&server, false, "tasks/get", json!({"taskId": "nope"})).await;
    assert_eq!(code(&gated), codes::MISSING_CAPABILITY);
    for removed in ["tasks/result", "tasks/list"] {
        let answer = modern(&server, true, removed, json!({"taskId": "nope"})).await;
        assert_eq!(code(&answer), codes::METHOD_NOT_FOUND, "{removed}");
    }
    let (session, _) = initialize(&server, json!({"tasks": {}})).await;
    let answer = legacy(
        &server,
        &session,
        "tasks/update",
        json!({"taskId": "nope", "inputResponses": {}}),
    )
    .await;
    assert_eq!(code(&answer), codes::METHOD_NOT_FOUND);
    let answer = legacy(&server, &session, "tasks/get", json!({"taskId": "nope"})).await;
    assert_eq!(code(&answer), codes::INVALID_PARAMS);
}

#[tokio::test]
async fn the_first_answer_wins_and_a_finished_task_cannot_be_cancelled_in_2025() {
    let server = server();
    let created = modern(
        &server,
        true,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let task = wait_for(&server, &task_id, "input_required").await;
    assert_eq!(
        task["result"]["inputRequests"]["q"]["method"],
        "elicitation/create"
    );
    for answer in ["first", "second"] {
        let ack = modern(&server, true, "tasks/update", json!({
            "taskId": task_id, "inputResponses": {"q": {"action": "accept", "content": {"a": answer}}},
        }))
        .await;
        assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    }
    let task = wait_for(&server, &task_id, "completed").await;
    assert_eq!(
        task["result"]["result"]["structuredContent"]["q"]["content"]["a"],
        "first"
    );

    let (session, _) = initialize(&server, json!({"tasks": {}})).await;
    let answer = legacy(
        &server,
        &session,
        "tasks/cancel",
        json!({"taskId": task_id}),
    )
    .await;
    assert_eq!(code(&answer), codes::INVALID_PARAMS, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already completed")
    );
    let ack = modern(&server, true, "tasks/cancel", json!({"taskId": task_id})).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
}

/// Reads the task until it has `status`; the job runs on the same runtime, so each yield
/// lets it move. Bounded, so a task that never gets there fails instead of hanging.
async fn wait_for(server: &McpServer, task_id: &str, status: &str) -> Value {
    for _ in 0..10_000 {
        let task = modern(server, true, "tasks/get", json!({"taskId": task_id})).await;
        if task["result"]["status"] == status {
            return task;
        }
        tokio::task::yield_now().await;
    }
    panic!("task {task_id} never became {status}");
}

/// A stateless `subscriptions/listen` naming `task_ids`, running until `cancel` fires; its
/// notifications arrive on the returned receiver.
fn listen(
    server: &Arc<McpServer>,
    task_ids: Vec<String>,
) -> (
    crate::mcp::outbox::OutboxReceiver,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<crate::mcp::server::Outcome>,
) {
    let (sender, receiver) = crate::mcp::outbox::outbox();
    let mut context = transport(None);
    context.notifications = Some(sender);
    let cancel = context.cancel.clone();
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": task_ids},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        },
    }});
    let server = server.clone();
    let running = tokio::spawn(async move {
        server
            .handle_bytes(body.to_string().as_bytes(), context)
            .await
    });
    (receiver, cancel, running)
}

#[tokio::test]
async fn a_listen_stream_tells_of_watched_tasks_and_watches_at_most_64() {
    let server = Arc::new(server());
    let created = modern(
        &server,
        true,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
    )
    .await;
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let (mut notifications, cancel, running) = listen(&server, vec![task_id.clone()]);
    let ack = notifications.recv().await.expect("the acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task_id]));
    let told = notifications.recv().await.expect("the task's state");
    assert_eq!(told["method"], "notifications/tasks");
    assert_eq!(told["params"]["taskId"], json!(task_id));
    assert_eq!(
        told["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
    cancel.cancel();
    running.await.unwrap();

    let ids = |count: usize| (0..count).map(|n| format!("task-{n}")).collect::<Vec<_>>();
    let (mut notifications, cancel, running) = listen(&server, ids(MAX_WATCHED));
    let ack = notifications.recv().await.expect("the acknowledgement");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"]
            .as_array()
            .unwrap()
            .len(),
        MAX_WATCHED
    );
    cancel.cancel();
    running.await.unwrap();
    let (_notifications, _cancel, running) = listen(&server, ids(MAX_WATCHED + 1));
    let refused = running.await.unwrap().response.expect("a refusal");
    assert_eq!(code(&refused), codes::INVALID_PARAMS, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 64")
    );
}

const MAX_WATCHED: usize = super::wire::MAX_WATCHED_TASKS;

/// Writes down what it is told, one JSON object per answered call.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<Value>>);

impl CallObserver for Recorder {
    fn answered(&self, call: &AnsweredCall<'_>) {
        self.0.locked().push(json!({
            "session": call.session,
            "tool": call.tool,
            "arguments": call.arguments,
            "task": call.task.map(|task| task.task_id.clone()),
            "answer": call.answer.value(),
        }));
    }
}

/// The one hook: a plain call and a call that became a task are both told, with the
/// session, the arguments and the task; refusals are not; a stateless call has no session.
#[tokio::test]
async fn observers_are_told_of_each_answered_call_and_the_task_it_became() {
    let recorder = Arc::new(Recorder::default());
    let server = server_observed_by(Some(recorder.clone()));
    let (session, _) = initialize(&server, json!({"tasks": {}})).await;
    let arguments = json!({"name": "plain", "arguments": {"x": 1}});
    legacy(&server, &session, "tools/call", arguments).await;
    let created = legacy(
        &server,
        &session,
        "tools/call",
        json!({"name": "ask", "task": {}}),
    )
    .await;
    let task_id = created["result"]["task"]["taskId"].clone();
    assert!(task_id.is_string(), "{created}");
    let unknown = legacy(&server, &session, "tools/call", json!({"name": "nope"})).await;
    assert_eq!(code(&unknown), codes::INVALID_PARAMS);
    let task_only = legacy(&server, &session, "tools/call", json!({"name": "only"})).await;
    assert_eq!(code(&task_only), codes::METHOD_NOT_FOUND);
    modern(&server, false, "tools/call", json!({"name": "plain"})).await;
    let plain = json!({"content": [{"type": "text", "text": "plain"}]});
    let told = recorder.0.locked().clone();
    assert_eq!(
        told,
        [
            json!({"session": session, "tool": "plain", "arguments": {"x": 1}, "task": null, "answer": plain}),
            json!({"session": session, "tool": "ask", "arguments": {}, "task": task_id, "answer": created["result"]}),
            json!({"session": null, "tool": "plain", "arguments": {}, "task": null, "answer": plain}),
        ]
    );
}
