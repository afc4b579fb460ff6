//! A scripted fake model for real MCP hosts: the model behind Claude Code (the Anthropic
//! Messages API, streamed as server-sent events) and behind Codex (the OpenAI Responses API,
//! `wire_api = "responses"`, streamed), on loopback. Where a real model would decide, this one
//! follows a [`Plan`] through the host's `workflow` tool: `run`, then `status` until the run is
//! terminal, then `result`, and finally a text answer naming the run (`FAKE-DONE <runId>`).
//!
//! The prompt chooses the plan's branch: `FAKE-PLAN: run` starts the plan's script and, after
//! the first `status` that is not terminal, *parks*: it never answers, so the test can kill the
//! host mid-run. `FAKE-PLAN: check <runId>` polls that run to the end instead. After `run`
//! answers, the fake waits [`Plan::pause_after_run`] before its next call, which is the idle
//! stretch a host's MCP connection must survive.
//!
//! Everything the host sent is recorded: the raw requests, the `workflow` tool definition as
//! each host listed it (with its schema), every tool output the host returned and each move the
//! fake made, so a test asserts on what crossed the host rather than on the host's console.
//! A request that is not the main conversation (no `workflow` tool anywhere in it, such as a
//! host's side query) gets a short text answer. Claude Code defers MCP tools behind its
//! `ToolSearch` tool; the fake then loads the tool with `select:<name>` first, as a model does.
//!
//! The fake runs on a runtime of its own (a thread), so synchronous tests can use it; dropping
//! the [`FakeHostModel`] stops it and every connection, parked ones included.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::http1::{Handler, RecordedRequest, Response, accept_loop, json_response, lock};

mod answers;
pub use answers::{next_call_in, stated_status};

/// What the fake model does with its turns.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The name the host registered agentprism under (`agentprism-workflow`).
    pub server: String,
    /// The arguments of the `run` call.
    pub run_arguments: Value,
    /// How long the model "thinks" after `run` answered, before its first `status`.
    pub pause_after_run: Duration,
}

/// A running fake. Dropping it stops the server thread.
pub struct FakeHostModel {
    address: SocketAddr,
    state: Arc<State>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The `workflow` tool as a host listed it to the model.
#[derive(Clone, Debug)]
pub struct ListedTool {
    /// `anthropic` or `responses`.
    pub api: &'static str,
    /// The name the model calls it by (Codex adds the namespace it sits in).
    pub name: String,
    pub namespace: Option<String>,
    pub description: String,
    /// `input_schema` (Anthropic) or `parameters` (Responses).
    pub schema: Value,
}

/// One thing that happened between the host and the fake, in order.
#[derive(Clone, Debug)]
pub enum Step {
    /// The fake asked for a `workflow` call with these arguments.
    Called { arguments: Value },
    /// The host returned the output of the fake's `workflow` call for `action`.
    Output { action: String, text: String },
    /// The fake will not answer this turn (the test kills the host now).
    Parked { run_id: String },
    /// The fake's final text answer.
    Answered { text: String },
    /// Something the plan did not expect; the text says what.
    Confused { problem: String },
}

struct State {
    plan: Plan,
    requests: Mutex<Vec<RecordedRequest>>,
    record: Mutex<Record>,
    /// Signalled whenever `record` changes.
    changed: Condvar,
    /// Numbers tool-call ids, so every call is distinct within the fake's life.
    serial: AtomicU64,
}

#[derive(Default)]
struct Record {
    tools: Vec<ListedTool>,
    steps: Vec<Step>,
    /// Ids of the calls whose output is already in `steps`.
    seen_outputs: Vec<String>,
}

/// The two wire dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Anthropic,
    Responses,
}

/// The conversation so far, as either API carries it.
#[derive(Debug, Default)]
struct Conversation {
    /// Every user text, in order.
    texts: Vec<String>,
    calls: Vec<PastCall>,
    /// The `workflow` tool, when the host listed it in this request.
    workflow: Option<ListedTool>,
    /// The host offers Claude Code's `ToolSearch` (MCP tools deferred behind it).
    tool_search: bool,
    /// The body names the `workflow` tool somewhere (listed or deferred).
    mentions_workflow: bool,
}

#[derive(Debug)]
struct PastCall {
    id: String,
    name: String,
    namespace: Option<String>,
    input: Value,
    output: Option<String>,
}

/// What the fake says next.
#[derive(Debug)]
enum Move {
    Call {
        name: String,
        namespace: Option<String>,
        input: Value,
    },
    Text(String),
    Park,
}

impl FakeHostModel {
    pub fn start(plan: Plan) -> FakeHostModel {
        let state = Arc::new(State {
            plan,
            requests: Mutex::new(Vec::new()),
            record: Mutex::new(Record::default()),
            changed: Condvar::new(),
            serial: AtomicU64::new(0),
        });
        let (address_sender, address_receiver) = std::sync::mpsc::channel();
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let server_state = state.clone();
        let thread = std::thread::Builder::new()
            .name("fake-host-model".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake host model: runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::bind(("127.0.0.1", 0))
                        .await
                        .expect("fake host model: bind 127.0.0.1:0");
                    let address = listener.local_addr().expect("fake host model: address");
                    let _ = address_sender.send(address);
                    tokio::select! {
                        () = accept_loop(listener, server_state) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime here cancels the connection tasks, parked ones too.
            })
            .expect("fake host model: thread");
        let address = address_receiver
            .recv()
            .expect("fake host model: the server thread's address");
        FakeHostModel {
            address,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`: Claude Code's `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// `http://127.0.0.1:<port>/v1`: a Codex model provider's `base_url`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// Every listing of the `workflow` tool the host sent, in order.
    pub fn listed_tools(&self) -> Vec<ListedTool> {
        lock(&self.state.record).tools.clone()
    }

    pub fn steps(&self) -> Vec<Step> {
        lock(&self.state.record).steps.clone()
    }

    /// Waits until `wanted` holds for the steps so far, and returns its answer; panics with
    /// the steps after `deadline`, or as soon as the fake is confused.
    pub fn wait_for<T>(
        &self,
        what: &str,
        deadline: Duration,
        wanted: impl Fn(&[Step]) -> Option<T>,
    ) -> T {
        let started = Instant::now();
        let mut record = lock(&self.state.record);
        loop {
            if let Some(found) = wanted(&record.steps) {
                return found;
            }
            if let Some(Step::Confused { problem }) = record
                .steps
                .iter()
                .find(|step| matches!(step, Step::Confused { .. }))
            {
                panic!("waiting for {what}, the fake model got confused: {problem}");
            }
            let left = deadline.saturating_sub(started.elapsed());
            assert!(
                !left.is_zero(),
                "no {what} within {deadline:?}; steps so far: {:#?}",
                record.steps
            );
            record = self
                .state
                .changed
                .wait_timeout(record, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for FakeHostModel {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl State {
    fn push(&self, step: Step) {
        lock(&self.record).steps.push(step);
        self.changed.notify_all();
    }

    fn next_id(&self, prefix: &str) -> String {
        format!(
            "{prefix}{}",
            self.serial.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    /// Records what the host sent in this turn: the tool listing and the newest output.
    fn observe(&self, conversation: &Conversation) {
        let mut record = lock(&self.record);
        if let Some(tool) = &conversation.workflow {
            record.tools.push(tool.clone());
        }
        if let Some(call) = conversation
            .calls
            .last()
            .filter(|call| self.is_workflow(&call.name, call.namespace.as_deref()))
            && let Some(output) = &call.output
            && !record.seen_outputs.contains(&call.id)
        {
            record.seen_outputs.push(call.id.clone());
            record.steps.push(Step::Output {
                action: call.input["action"].as_str().unwrap_or_default().to_owned(),
                text: output.clone(),
            });
        }
        drop(record);
        self.changed.notify_all();
    }

    /// Whether a tool name (with the namespace Codex puts MCP tools in) is agentprism's
    /// `workflow` tool: `mcp__<server>__workflow`, or `workflow` in namespace `mcp__<server>`.
    /// Codex spells the server name with `_` for `-`.
    fn is_workflow(&self, name: &str, namespace: Option<&str>) -> bool {
        let full = match namespace {
            Some(namespace) => format!("{namespace}__{name}"),
            None => name.to_owned(),
        };
        let wanted = format!("mcp__{}__workflow", self.plan.server);
        full.replace('-', "_") == wanted.replace('-', "_")
    }

    /// The fake's next move in the main conversation, and how long it thinks first.
    fn decide(&self, conversation: &Conversation) -> (Move, Duration) {
        let now = Duration::ZERO;
        if conversation.workflow.is_none() {
            let searched = conversation
                .calls
                .iter()
                .any(|call| call.name == "ToolSearch");
            if conversation.tool_search && !searched {
                let query = format!("select:mcp__{}__workflow", self.plan.server);
                let input = json!({"query": query, "max_results": 1});
                return (call("ToolSearch", None, input), now);
            }
            return self.confused("the host did not list the workflow tool");
        }
        let tool = conversation.workflow.as_ref().expect("checked above");
        if let Some(decision) = self.decide_answers(conversation, tool) {
            return decision;
        }
        let workflow = |input: Value| Move::Call {
            name: tool.name.clone(),
            namespace: tool.namespace.clone(),
            input,
        };
        let check = conversation.texts.iter().find_map(|text| {
            let (_, rest) = text.split_once("FAKE-PLAN: check ")?;
            let run_id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(run_id)
        });
        let last = conversation
            .calls
            .iter()
            .rev()
            .find(|call| self.is_workflow(&call.name, call.namespace.as_deref()));
        let Some(last) = last else {
            return match check {
                Some(run_id) => (workflow(status_arguments(&run_id)), now),
                None => (workflow(self.plan.run_arguments.clone()), now),
            };
        };
        let Some(output) = &last.output else {
            return self.confused(&format!("no output for call {}", last.id));
        };
        match last.input["action"].as_str().unwrap_or_default() {
            "run" => match run_id_in(output) {
                Some(run_id) => (
                    workflow(status_arguments(&run_id)),
                    self.plan.pause_after_run,
                ),
                None => self.confused(&format!("no run id in the run output: {output}")),
            },
            "status" => {
                let run_id = last.input["runId"].as_str().unwrap_or_default().to_owned();
                match run_status_in(output).as_deref() {
                    Some("completed" | "failed" | "stopped" | "aborted") => (
                        workflow(json!({"action": "result", "runId": run_id, "maxBytes": 8192})),
                        now,
                    ),
                    Some(_) if check.is_none() => {
                        self.push(Step::Parked { run_id });
                        (Move::Park, now)
                    }
                    // A model polling a run waits a little between looks.
                    Some(_) => (
                        workflow(status_arguments(&run_id)),
                        Duration::from_millis(250),
                    ),
                    None => self.confused(&format!("no run status in: {output}")),
                }
            }
            "result" => {
                let run_id = last.input["runId"].as_str().unwrap_or_default();
                (Move::Text(format!("FAKE-DONE {run_id}")), now)
            }
            other => self.confused(&format!("an output for an action it never asked: {other}")),
        }
    }

    fn confused(&self, problem: &str) -> (Move, Duration) {
        self.push(Step::Confused {
            problem: problem.to_owned(),
        });
        (
            Move::Text(format!("FAKE-CONFUSED: {problem}")),
            Duration::ZERO,
        )
    }

    /// Routes one request.
    async fn answer(&self, request: &RecordedRequest) -> Response {
        let api = match (request.method.as_str(), request.path.as_str()) {
            ("HEAD", _) => return text_response(200, ""),
            ("POST", "/v1/messages") => Api::Anthropic,
            ("POST", "/v1/responses") => Api::Responses,
            ("POST", "/v1/messages/count_tokens") => {
                return json_response(200, &json!({"input_tokens": request.body.len() / 4 + 1}));
            }
            ("GET", "/v1/models") => return json_response(200, &json!({"data": [], "models": []})),
            (method, path) => {
                eprintln!("fake host model: unhandled {method} {path}");
                return json_response(404, &json!({"error": {"message": "not faked"}}));
            }
        };
        let Some(body) = request.json() else {
            return json_response(400, &json!({"error": {"message": "body is not JSON"}}));
        };
        let conversation = match api {
            Api::Anthropic => anthropic_conversation(&body, self),
            Api::Responses => responses_conversation(&body, self),
        };
        let streamed = body.get("stream").and_then(Value::as_bool) == Some(true);
        let main = conversation.workflow.is_some() || conversation.mentions_workflow;
        if !main {
            // A side request of the host (a title, a summary): any short text will do.
            return self.reply(api, streamed, &body, Move::Text("OK".to_owned()));
        }
        self.observe(&conversation);
        let (next, think) = self.decide(&conversation);
        if let Move::Call { input, name, .. } = &next
            && name != "ToolSearch"
        {
            self.push(Step::Called {
                arguments: input.clone(),
            });
        }
        if let Move::Text(text) = &next
            && text.starts_with("FAKE-DONE")
        {
            self.push(Step::Answered { text: text.clone() });
        }
        if matches!(next, Move::Park) {
            // The test kills the host while this request waits; dropping the fake ends it.
            std::future::pending::<()>().await;
        }
        if !think.is_zero() {
            tokio::time::sleep(think).await;
        }
        self.reply(api, streamed, &body, next)
    }

    fn reply(&self, api: Api, streamed: bool, body: &Value, next: Move) -> Response {
        match api {
            Api::Anthropic => anthropic_reply(self, streamed, body, next),
            Api::Responses => responses_reply(self, next),
        }
    }
}

impl Handler for State {
    async fn respond(&self, request: &RecordedRequest) -> Response {
        self.answer(request).await
    }

    fn record(&self, request: RecordedRequest) {
        lock(&self.requests).push(request);
    }

    fn bad_request(&self, problem: &str) -> Response {
        json_response(400, &json!({"error": {"message": problem}}))
    }

    fn name(&self) -> &'static str {
        "fake host model"
    }
}

fn call(name: &str, namespace: Option<String>, input: Value) -> Move {
    Move::Call {
        name: name.to_owned(),
        namespace,
        input,
    }
}

fn status_arguments(run_id: &str) -> Value {
    json!({"action": "status", "runId": run_id, "lastN": 5})
}

/// The run id in a `run` output: the value after the first `runId` key, however the host
/// quoted or escaped the JSON it came in.
fn run_id_in(output: &str) -> Option<String> {
    let (_, rest) = output.split_once("runId")?;
    let id: String = rest
        .trim_start_matches(['"', '\\', ':', ' '])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// The run's status in a `status` output: the top-level `status` of the JSON document in it
/// (Codex prefixes it with `Wall time: …\nOutput:\n`), else the text form
/// `Run <id> (<name>): <status>`.
fn run_status_in(output: &str) -> Option<String> {
    let candidates = [
        Some(output),
        output.split_once("Output:\n").map(|(_, json)| json),
        output
            .find('{')
            .zip(output.rfind('}'))
            .and_then(|(start, end)| output.get(start..=end)),
    ];
    for candidate in candidates.into_iter().flatten() {
        if let Ok(document) = serde_json::from_str::<Value>(candidate.trim())
            && let Some(status) = document["status"].as_str()
        {
            return Some(status.to_owned());
        }
    }
    let (_, rest) = output.split_once("Run ")?;
    let (_, rest) = rest.split_once("): ")?;
    let status: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    (!status.is_empty()).then_some(status)
}

/// The text of a tool output in either API: a string, or an array of text blocks.
fn output_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn anthropic_conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation {
        mentions_workflow: body
            .to_string()
            .contains(&format!("mcp__{}__workflow", state.plan.server)),
        ..Conversation::default()
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        let name = tool["name"].as_str().unwrap_or_default();
        if name == "ToolSearch" {
            conversation.tool_search = true;
        }
        if state.is_workflow(name, None) {
            conversation.workflow = Some(ListedTool {
                api: "anthropic",
                name: name.to_owned(),
                namespace: None,
                description: tool["description"].as_str().unwrap_or_default().to_owned(),
                schema: tool["input_schema"].clone(),
            });
        }
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let blocks = match &message["content"] {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(blocks) => blocks.clone(),
            _ => Vec::new(),
        };
        for block in blocks {
            match (message["role"].as_str(), block["type"].as_str()) {
                (Some("user"), Some("text")) => conversation
                    .texts
                    .push(block["text"].as_str().unwrap_or_default().to_owned()),
                (Some("assistant"), Some("tool_use")) => conversation.calls.push(PastCall {
                    id: block["id"].as_str().unwrap_or_default().to_owned(),
                    name: block["name"].as_str().unwrap_or_default().to_owned(),
                    namespace: None,
                    input: block["input"].clone(),
                    output: None,
                }),
                (Some("user"), Some("tool_result")) => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    if let Some(call) = conversation.calls.iter_mut().find(|c| c.id == id) {
                        call.output = Some(output_text(&block["content"]));
                    }
                }
                _ => {}
            }
        }
    }
    conversation
}

fn responses_conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation {
        mentions_workflow: false,
        ..Conversation::default()
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        // Codex groups an MCP server's tools in a namespace; older versions list them flat.
        let (namespace, members) = match tool["type"].as_str() {
            Some("namespace") => (
                tool["name"].as_str().map(str::to_owned),
                tool["tools"].as_array().cloned().unwrap_or_default(),
            ),
            _ => (None, vec![tool.clone()]),
        };
        for member in members {
            let name = member["name"].as_str().unwrap_or_default();
            if state.is_workflow(name, namespace.as_deref()) {
                conversation.workflow = Some(ListedTool {
                    api: "responses",
                    name: name.to_owned(),
                    namespace: namespace.clone(),
                    description: member["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    schema: member["parameters"].clone(),
                });
            }
        }
    }
    conversation.mentions_workflow = conversation.workflow.is_some();
    for item in body["input"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") if item["role"] == "user" => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if let Some(text) = part["text"].as_str() {
                        conversation.texts.push(text.to_owned());
                    }
                }
            }
            Some("function_call") => conversation.calls.push(PastCall {
                id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                name: item["name"].as_str().unwrap_or_default().to_owned(),
                namespace: item["namespace"].as_str().map(str::to_owned),
                input: item["arguments"]
                    .as_str()
                    .and_then(|text| serde_json::from_str(text).ok())
                    .unwrap_or(Value::Null),
                output: None,
            }),
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if let Some(call) = conversation.calls.iter_mut().find(|c| c.id == id) {
                    call.output = Some(output_text(&item["output"]));
                }
            }
            _ => {}
        }
    }
    conversation
}

fn anthropic_reply(state: &State, streamed: bool, body: &Value, next: Move) -> Response {
    let model = body["model"].as_str().unwrap_or("claude-fake").to_owned();
    let (block, stop_reason) = match next {
        Move::Call { name, input, .. } => (
            json!({"type": "tool_use", "id": state.next_id("toolu_fake_"), "name": name, "input": input}),
            "tool_use",
        ),
        Move::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 10});
    if !streamed {
        return json_response(
            200,
            &json!({
                "id": state.next_id("msg_fake_"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": stop_reason,
                "stop_sequence": null,
                "usage": usage,
            }),
        );
    }
    // The block opens empty and its content follows as a delta, as the real API streams it.
    let (start, delta) = if block["type"] == "tool_use" {
        (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        )
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        )
    };
    let events = [
        json!({"type": "message_start", "message": {
            "id": state.next_id("msg_fake_"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 10}}),
        json!({"type": "message_stop"}),
    ];
    sse_response(&events)
}

fn responses_reply(state: &State, next: Move) -> Response {
    let response_id = state.next_id("resp_fake_");
    let item = match next {
        Move::Call {
            name,
            namespace,
            input,
        } => {
            let mut item = json!({
                "type": "function_call",
                "id": state.next_id("fc_fake_"),
                "call_id": state.next_id("call_fake_"),
                "name": name,
                "arguments": input.to_string(),
            });
            if let Some(namespace) = namespace {
                item["namespace"] = Value::String(namespace);
            }
            item
        }
        Move::Text(text) => json!({
            "type": "message",
            "id": state.next_id("msg_fake_"),
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let events = [
        json!({"type": "response.created", "response": {"id": response_id}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {
            "id": response_id,
            "usage": {"input_tokens": 10, "input_tokens_details": null, "output_tokens": 10,
                "output_tokens_details": null, "total_tokens": 20}}}),
    ];
    sse_response(&events)
}

fn sse_response(events: &[Value]) -> Response {
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
        retry_after: None,
    }
}

fn text_response(status: u16, text: &str) -> Response {
    Response {
        status,
        content_type: "text/plain",
        body: text.as_bytes().to_vec(),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_and_statuses_are_found_in_either_hosts_quoting() {
        assert_eq!(
            run_id_in(r#"{"runId":"abc123-x9z","status":"running"}"#).as_deref(),
            Some("abc123-x9z")
        );
        assert_eq!(
            run_id_in(r#"Output:\n{\"runId\":\"abc-def\"}"#).as_deref(),
            Some("abc-def")
        );
        assert_eq!(
            run_status_in(
                "Wall time: 1 s\nOutput:\n{\"calls\":[{\"status\":\"x\"}],\"status\":\"running\"}"
            )
            .as_deref(),
            Some("running")
        );
        assert_eq!(
            run_status_in("Run abc-def (slow): completed\n").as_deref(),
            Some("completed")
        );
    }
}
