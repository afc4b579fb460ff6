//! A scripted fake model for real MCP hosts, on loopback, speaking each host's API: the
//! Anthropic Messages API (Claude Code), the OpenAI Responses API (Codex), the Gemini API
//! (Gemini CLI) and the OpenAI Chat Completions API (Qwen Code, opencode), each in its own
//! module here. Where a real model would decide, this one follows a [`Plan`] through the
//! host's `workflow` tool, the same plan whatever the wire: `run`, then `status` until the
//! run is terminal, then `result`, and finally a text answer naming the run
//! (`FAKE-DONE <runId>`).
//!
//! The prompt chooses the plan's branch. `FAKE-PLAN: run` starts the plan's script and, after
//! the first `status` that is not terminal, *parks*: it never answers, so the test can kill the
//! host mid-run. `FAKE-PLAN: check <runId>` polls that run to the end instead, and
//! `FAKE-PLAN: stop <runId>` stops it after the first `status` that is not terminal, then
//! polls it to the end. After `run` answers, the fake waits [`Plan::pause_after_run`] before
//! its next call, which is the idle stretch a host's MCP connection must survive.
//!
//! Everything the host sent is recorded: the raw requests, the `workflow` tool definition as
//! each host listed it (with its schema), every tool output the host returned and each move the
//! fake made, so a test asserts on what crossed the host rather than on the host's console.
//! A request that is not the main conversation (no `workflow` tool anywhere in it, such as a
//! host's side query for a title) gets a short text answer. Hosts that defer MCP tools behind
//! a search tool (Claude Code's `ToolSearch`, Qwen Code's `tool_search`) get a
//! `select:<name>` search first, as a model does.
//!
//! The fake runs on a runtime of its own (a thread), so synchronous tests can use it; dropping
//! the [`FakeHostModel`] stops it and every connection, parked ones included.

mod anthropic;
mod chat;
mod gemini;
mod responses;

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
    /// `anthropic`, `responses`, `gemini` or `chat`.
    pub api: &'static str,
    /// The name the model calls it by (Codex adds the namespace it sits in).
    pub name: String,
    pub namespace: Option<String>,
    pub description: String,
    /// `input_schema` (Anthropic), `parameters` (Responses, Chat Completions) or
    /// `parametersJsonSchema` (Gemini, and Qwen Code's tool search).
    pub schema: Value,
    /// The host's tool that calls this one when it stays deferred (Qwen Code's `tool_call`).
    pub bridge: Option<String>,
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

/// The wire dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Anthropic,
    Responses,
    Gemini,
    Chat,
}

/// The conversation so far, as any API carries it.
#[derive(Debug, Default)]
struct Conversation {
    /// Every user text, in order.
    texts: Vec<String>,
    calls: Vec<PastCall>,
    /// The `workflow` tool, when the host listed it in this request.
    workflow: Option<ListedTool>,
    /// The host's tool search, when it offers one (MCP tools deferred behind it).
    tool_search: Option<String>,
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

/// Which run the prompt follows, and how.
enum Branch {
    /// Start the plan's script, look once, park.
    Run,
    /// Poll this run to its end.
    Check(String),
    /// Stop this run once it is seen not terminal, then poll it to its end.
    Stop(String),
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

    /// `http://127.0.0.1:<port>`: Claude Code's `ANTHROPIC_BASE_URL`, Gemini CLI's
    /// `GOOGLE_GEMINI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// `http://127.0.0.1:<port>/v1`: a Codex model provider's `base_url`, Qwen Code's
    /// `OPENAI_BASE_URL`, an opencode provider's `baseURL`.
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

impl Conversation {
    /// Pairs a tool output with the call it answers.
    fn answer(&mut self, id: &str, output: String) {
        if let Some(call) = self.calls.iter_mut().find(|call| call.id == id) {
            call.output = Some(output);
        }
    }
}

impl State {
    /// A state no server uses, for the wire modules' own tests.
    #[cfg(test)]
    fn for_tests(server: &str) -> State {
        State {
            plan: Plan {
                server: server.to_owned(),
                run_arguments: Value::Null,
                pause_after_run: Duration::ZERO,
            },
            requests: Mutex::new(Vec::new()),
            record: Mutex::new(Record::default()),
            changed: Condvar::new(),
            serial: AtomicU64::new(0),
        }
    }

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

    /// The names hosts give agentprism's `workflow` tool: `mcp__<server>__workflow` (Claude
    /// Code, Qwen Code; Codex as namespace `mcp__<server>` and name `workflow`),
    /// `mcp_<server>_workflow` (Gemini CLI) and `<server>_workflow` (opencode).
    fn workflow_names(&self) -> [String; 3] {
        let server = &self.plan.server;
        [
            format!("mcp__{server}__workflow"),
            format!("mcp_{server}_workflow"),
            format!("{server}_workflow"),
        ]
    }

    /// Whether a tool name (with the namespace Codex puts MCP tools in) is agentprism's
    /// `workflow` tool. Codex spells the server name with `_` for `-`.
    fn is_workflow(&self, name: &str, namespace: Option<&str>) -> bool {
        let full = match namespace {
            Some(namespace) => format!("{namespace}__{name}"),
            None => name.to_owned(),
        };
        let full = full.replace('-', "_");
        self.workflow_names()
            .iter()
            .any(|wanted| wanted.replace('-', "_") == full)
    }

    /// Whether a text names the `workflow` tool (the reminder a deferring host sends).
    fn names_workflow(&self, text: &str) -> bool {
        self.workflow_names().iter().any(|name| text.contains(name))
    }

    /// The fake's next move in the main conversation, and how long it thinks first.
    fn decide(&self, conversation: &Conversation) -> (Move, Duration) {
        let now = Duration::ZERO;
        let Some(tool) = conversation.workflow.as_ref() else {
            if let Some(search) = &conversation.tool_search {
                let searched = conversation.calls.iter().find(|call| &call.name == search);
                let Some(searched) = searched else {
                    let query = format!("select:mcp__{}__workflow", self.plan.server);
                    let input = json!({"query": query, "max_results": 1});
                    return (call(search, None, input), now);
                };
                return self.confused(&format!(
                    "the host's {search} did not find the workflow tool: {:?}",
                    searched.output
                ));
            }
            return self.confused("the host did not list the workflow tool");
        };
        if let Some(decision) = self.decide_answers(conversation, tool) {
            return decision;
        }
        let workflow = |input: Value| Move::Call {
            name: tool.name.clone(),
            namespace: tool.namespace.clone(),
            input,
        };
        let branch = branch_of(&conversation.texts);
        let last = conversation
            .calls
            .iter()
            .rev()
            .find(|call| self.is_workflow(&call.name, call.namespace.as_deref()));
        let Some(last) = last else {
            return match branch {
                Branch::Run => (workflow(self.plan.run_arguments.clone()), now),
                Branch::Check(run_id) | Branch::Stop(run_id) => {
                    (workflow(status_arguments(&run_id)), now)
                }
            };
        };
        let Some(output) = &last.output else {
            return self.confused(&format!("no output for call {}", last.id));
        };
        let run_id = last.input["runId"].as_str().unwrap_or_default().to_owned();
        match last.input["action"].as_str().unwrap_or_default() {
            "run" => match run_id_in(output) {
                Some(run_id) => (
                    workflow(status_arguments(&run_id)),
                    self.plan.pause_after_run,
                ),
                None => self.confused(&format!("no run id in the run output: {output}")),
            },
            "status" => match run_status_in(output).as_deref() {
                Some("completed" | "failed" | "stopped" | "aborted") => (
                    workflow(json!({"action": "result", "runId": run_id, "maxBytes": 8192})),
                    now,
                ),
                Some(_) => match branch {
                    Branch::Run => {
                        self.push(Step::Parked { run_id });
                        (Move::Park, now)
                    }
                    Branch::Stop(_) if !self.called(conversation, "stop") => {
                        (workflow(json!({"action": "stop", "runId": run_id})), now)
                    }
                    // A model polling a run waits a little between looks.
                    _ => (
                        workflow(status_arguments(&run_id)),
                        Duration::from_millis(250),
                    ),
                },
                None => self.confused(&format!("no run status in: {output}")),
            },
            "stop" => (workflow(status_arguments(&run_id)), now),
            "result" => (Move::Text(format!("FAKE-DONE {run_id}")), now),
            other => self.confused(&format!("an output for an action it never asked: {other}")),
        }
    }

    /// Whether the conversation already holds a `workflow` call of `action`.
    fn called(&self, conversation: &Conversation, action: &str) -> bool {
        conversation.calls.iter().any(|call| {
            self.is_workflow(&call.name, call.namespace.as_deref())
                && call.input["action"] == action
        })
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
        let path = request.path.as_str();
        let api = match (request.method.as_str(), path) {
            ("HEAD", _) => return text_response(200, ""),
            ("POST", "/v1/messages") => Api::Anthropic,
            ("POST", "/v1/responses") => Api::Responses,
            ("POST", "/v1/chat/completions") => Api::Chat,
            ("POST", _) if path.starts_with("/v1beta/models/") => Api::Gemini,
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
            Api::Anthropic => anthropic::conversation(&body, self),
            Api::Responses => responses::conversation(&body, self),
            Api::Gemini => gemini::conversation(&body, self),
            Api::Chat => chat::conversation(&body, self),
        };
        let streamed = match api {
            Api::Gemini => path.ends_with(":streamGenerateContent"),
            _ => body.get("stream").and_then(Value::as_bool) == Some(true),
        };
        let main = conversation.workflow.is_some() || conversation.mentions_workflow;
        if !main {
            // A side request of the host (a title, a summary, a routing decision).
            let text = match api {
                Api::Gemini => gemini::json_side_answer(&body).map(|answer| answer.to_string()),
                _ => None,
            };
            let next = Move::Text(text.unwrap_or_else(|| "OK".to_owned()));
            return self.reply(api, streamed, &body, next);
        }
        self.observe(&conversation);
        let (next, think) = self.decide(&conversation);
        let next = self.record_move(&conversation, next);
        if matches!(next, Move::Park) {
            // The test kills the host while this request waits; dropping the fake ends it.
            std::future::pending::<()>().await;
        }
        if !think.is_zero() {
            tokio::time::sleep(think).await;
        }
        self.reply(api, streamed, &body, next)
    }

    /// Records a move in the steps, and sends a call of a deferred `workflow` through the
    /// host's bridge tool.
    fn record_move(&self, conversation: &Conversation, next: Move) -> Move {
        match next {
            Move::Call {
                name,
                namespace,
                input,
            } if self.is_workflow(&name, namespace.as_deref()) => {
                self.push(Step::Called {
                    arguments: input.clone(),
                });
                match conversation
                    .workflow
                    .as_ref()
                    .and_then(|tool| tool.bridge.clone())
                {
                    Some(bridge) => call(&bridge, None, json!({"name": name, "arguments": input})),
                    None => Move::Call {
                        name,
                        namespace,
                        input,
                    },
                }
            }
            Move::Text(text) if text.starts_with("FAKE-DONE") => {
                self.push(Step::Answered { text: text.clone() });
                Move::Text(text)
            }
            other => other,
        }
    }

    fn reply(&self, api: Api, streamed: bool, body: &Value, next: Move) -> Response {
        match api {
            Api::Anthropic => anthropic::reply(self, streamed, body, next),
            Api::Responses => responses::reply(self, next),
            Api::Gemini => gemini::reply(self, streamed, body, next),
            Api::Chat => chat::reply(self, streamed, body, next),
        }
    }
}

/// The branch the prompt chose: `FAKE-PLAN: run`, `check <runId>` or `stop <runId>`.
fn branch_of(texts: &[String]) -> Branch {
    let run_id_after = |marker: &str| {
        texts.iter().find_map(|text| {
            let (_, rest) = text.split_once(marker)?;
            let run_id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(run_id)
        })
    };
    if let Some(run_id) = run_id_after("FAKE-PLAN: check ") {
        return Branch::Check(run_id);
    }
    if let Some(run_id) = run_id_after("FAKE-PLAN: stop ") {
        return Branch::Stop(run_id);
    }
    Branch::Run
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

/// The text of a tool output in any API: a string, or an array of text blocks.
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

/// Server-sent events, one JSON document per event: `named` puts each event's `type` on an
/// `event:` line (Anthropic, Responses); the Chat Completions stream ends in `data: [DONE]`.
fn sse_response(events: &[Value], named: bool) -> Response {
    let mut body: String = events
        .iter()
        .map(|event| match (named, event["type"].as_str()) {
            (true, Some(kind)) => format!("event: {kind}\ndata: {event}\n\n"),
            _ => format!("data: {event}\n\n"),
        })
        .collect();
    if !named
        && events
            .iter()
            .any(|event| event["object"] == "chat.completion.chunk")
    {
        body.push_str("data: [DONE]\n\n");
    }
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
        retry_after: None,
        headers: None,
    }
}

fn text_response(status: u16, text: &str) -> Response {
    Response {
        status,
        content_type: "text/plain",
        body: text.as_bytes().to_vec(),
        retry_after: None,
        headers: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_chooses_the_branch() {
        let texts = |text: &str| vec!["context".to_owned(), text.to_owned()];
        assert!(matches!(
            branch_of(&texts("FAKE-PLAN: run. Go")),
            Branch::Run
        ));
        assert!(
            matches!(branch_of(&texts("FAKE-PLAN: stop ab1-cd2. Stop it")), Branch::Stop(id) if id == "ab1-cd2")
        );
        assert!(
            matches!(branch_of(&texts("FAKE-PLAN: check ab1-cd2.")), Branch::Check(id) if id == "ab1-cd2")
        );
    }

    #[test]
    fn every_hosts_spelling_of_the_tool_is_the_workflow_tool() {
        let state = State::for_tests("agentprism-workflow");
        for (name, namespace) in [
            ("mcp__agentprism-workflow__workflow", None),
            ("workflow", Some("mcp__agentprism_workflow")),
            ("mcp_agentprism-workflow_workflow", None),
            ("agentprism-workflow_workflow", None),
        ] {
            assert!(state.is_workflow(name, namespace), "{name} {namespace:?}");
        }
        assert!(!state.is_workflow("agentprism-workflow_workflow_monitor", None));
        assert!(!state.is_workflow("workflow", None));
    }

    #[test]
    fn run_ids_and_statuses_are_found_in_any_hosts_quoting() {
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
