//! A loopback fake of the model APIs the four built-in adapters speak, so each can finish
//! turns with no network and no key: the Anthropic Messages API (claude-agent-acp, with
//! `ANTHROPIC_BASE_URL=http://<address>`), the OpenAI Responses API (codex-acp, a custom
//! `model_providers` entry with `wire_api="responses"`) and OpenAI chat completions (opencode's
//! `@ai-sdk/openai-compatible` provider and pi's `openai-completions` models), all streamed.
//!
//! Besides the prompt markers below, [`FakeLlm::fail_with`] makes every model request fail
//! with one status until it is cleared, so a test can pause a run on a 401 and resume it once
//! "the credentials are fixed" ([`FakeLlm::fail_tool_results`] fails only Messages requests
//! that carry a tool result, cutting a call off after its tool ran); `MOCK_DELAY=<ms>` in a prompt delays that reply (a slow call
//! to stop), and `MOCK_HOLD` holds it until [`FakeLlm::release_held`], so a test can keep a
//! call busy for exactly as long as it needs to; [`FakeLlm::until_waiting`] tells when such
//! requests have arrived. A 429 carries the reset time the way OpenAI does
//! (`resets_in_seconds`, `resets_at`) and a `retry-after` header of the same length, unless
//! the prompt says `MOCK_RETRY_AFTER=<seconds>` (opencode retries a 429 by itself, waiting out
//! that header each time).
//!
//! [`provider_failure`] lists the markers that make a failure use a real provider's words
//! and headers instead.
//!
//! Every answer is derived from the last user text of the request, so a test steers the fake
//! through its prompt alone: the reply is `MOCK-REPLY: <text>`; a prompt that asks for JSON
//! (see [`asks_for_json`]; plain prompts should not say "JSON") gets the configured JSON value
//! as the whole reply; `MOCK_STATUS=<code>` makes the request fail with that HTTP status and
//! an Anthropic-shaped error body (429 is a `rate_limit_error`), marked as not worth retrying
//! so the adapter reports it at once. `MOCK_BASH=<command>` (to the end of its line) makes a
//! request that offers tools get a `Bash` tool use of that command instead of text (Anthropic
//! API only); a request whose last message carries a tool result gets `MOCK-TOOL-RESULT:
//! <result text>`, so the answer says what became of the tool. A request that offers a tool
//! named `…StructuredOutput` (the engine's client-hosted tool for schema calls) and carries no
//! tool result yet gets a call of that tool with the configured JSON value as its arguments,
//! in the request's API shape, as a model that follows the tool's description would.
//! Requests are recorded for assertions, and paths the fake does not know are logged to stderr
//! and answered 404, so a new adapter version that calls something else shows up in test output
//! instead of hanging.
//!
//! The HTTP/1.1 handling is deliberately minimal (request line, headers, `Content-Length`
//! bodies, keep-alive): it only has to serve the adapter's HTTP client, and it avoids pulling
//! an HTTP stack into the dev-dependencies. The server binds only 127.0.0.1 and stops when the
//! [`FakeLlm`] is dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

mod openai;

pub use super::http1::RecordedRequest;
use super::http1::{Handler, Response, accept_loop, json_response, lock};
use openai::{OpenAiApi, openai};

/// A running fake model server. Dropping it aborts the accept loop and every connection.
pub struct FakeLlm {
    address: SocketAddr,
    state: Arc<State>,
    /// Owns the accept task, which owns the connection tasks; dropping it stops them all.
    _tasks: JoinSet<()>,
}

/// What the server tasks share with the handle.
struct State {
    /// The whole reply to a prompt that asks for JSON.
    json_reply: Value,
    /// When set, every model request fails with this status.
    fail_status: Mutex<Option<u16>>,
    /// When set, a Messages request that carries a tool result fails with this status: the
    /// call is cut off after its tool ran.
    fail_tool_results: Mutex<Option<u16>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// The prompts of the model requests being delayed or held right now.
    waiting: watch::Sender<Vec<String>>,
    /// Once true, held requests are answered.
    released: watch::Sender<bool>,
    /// Model requests arriving (`false`) and their answers being sent (`true`), by prompt, in
    /// the order they happened: what a provider's prompt cache would have seen.
    order: Mutex<Vec<(bool, String)>>,
}

impl FakeLlm {
    /// Starts a fake that answers JSON requests with `{"ok": true}`.
    pub async fn start() -> FakeLlm {
        FakeLlm::start_with_json_reply(json!({"ok": true})).await
    }

    /// Starts a fake that answers prompts asking for JSON with `json_reply`.
    pub async fn start_with_json_reply(json_reply: Value) -> FakeLlm {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("fake LLM: bind 127.0.0.1:0");
        let address = listener.local_addr().expect("fake LLM: local address");
        let state = Arc::new(State {
            json_reply,
            fail_status: Mutex::new(None),
            fail_tool_results: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            waiting: watch::Sender::new(Vec::new()),
            released: watch::Sender::new(false),
            order: Mutex::new(Vec::new()),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(listener, state.clone()));
        FakeLlm {
            address,
            state,
            _tasks: tasks,
        }
    }

    /// `http://127.0.0.1:<port>`, the value for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Makes every model request fail with `status` (`None`: answer normally again).
    pub fn fail_with(&self, status: Option<u16>) {
        *lock(&self.state.fail_status) = status;
    }

    /// Makes every Messages request that carries a tool result fail with `status` (`None`:
    /// answer them again), so a call is interrupted after its tool ran.
    pub fn fail_tool_results(&self, status: Option<u16>) {
        *lock(&self.state.fail_tool_results) = status;
    }

    /// Answers the requests held by `MOCK_HOLD`, and those still to come.
    pub fn release_held(&self) {
        self.state.released.send_replace(true);
    }

    /// Waits until, for each marker, a delayed or held request whose prompt contains it is
    /// waiting for its answer; after `within`, the prompts waiting by then.
    pub async fn until_waiting(
        &self,
        markers: &[&str],
        within: std::time::Duration,
    ) -> Result<(), Vec<String>> {
        let mut waiting = self.state.waiting.subscribe();
        let arrived = |prompts: &Vec<String>| {
            markers
                .iter()
                .all(|marker| prompts.iter().any(|prompt| prompt.contains(marker)))
        };
        match tokio::time::timeout(within, waiting.wait_for(arrived)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(self.state.waiting.borrow().clone()),
        }
    }

    /// `http://127.0.0.1:<port>/v1`, the base URL of the OpenAI-style APIs.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The last user text of every model request (any of the three APIs) so far.
    pub fn all_prompts(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|request| request.method == "POST" && is_model_path(&request.path))
            .filter_map(RecordedRequest::json)
            .map(|body| last_user_text(&body))
            .collect()
    }

    /// Of the prompts that begin with `marker` (an adapter may send one prompt in more than
    /// one model request): how many reached the fake, and how many first reached it after the
    /// first answer to one of them was sent (a provider would have served those the shared
    /// prefix from its cache).
    pub fn arrivals_after_first_answer(&self, marker: &str) -> (usize, usize) {
        let order = lock(&self.state.order);
        let mut seen: Vec<&str> = Vec::new();
        let (mut after, mut answered) = (0, false);
        for (is_answer, prompt) in order
            .iter()
            .filter(|(_, prompt)| prompt.starts_with(marker))
        {
            if *is_answer {
                answered = true;
            } else if !seen.contains(&prompt.as_str()) {
                seen.push(prompt);
                after += usize::from(answered);
            }
        }
        (seen.len(), after)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// The last user text of every Messages request so far (count_tokens excluded): what the
    /// model was asked.
    pub fn prompts(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|request| request.method == "POST" && request.path == "/v1/messages")
            .filter_map(RecordedRequest::json)
            .map(|body| last_user_text(&body))
            .collect()
    }
}

impl Handler for State {
    async fn respond(&self, request: &RecordedRequest) -> Response {
        let prompt = model_prompt(request);
        if let Some(prompt) = &prompt {
            lock(&self.order).push((false, prompt.clone()));
        }
        let response = self.wait_then_respond(request, prompt.clone()).await;
        if let Some(prompt) = prompt {
            lock(&self.order).push((true, prompt));
        }
        response
    }

    fn record(&self, request: RecordedRequest) {
        lock(&self.requests).push(request);
    }

    fn bad_request(&self, problem: &str) -> Response {
        error_response(400, "invalid_request_error", problem)
    }

    fn name(&self) -> &'static str {
        "fake LLM"
    }
}

impl State {
    /// The answer to `request`, after the delay or hold its prompt asks for.
    async fn wait_then_respond(
        &self,
        request: &RecordedRequest,
        prompt: Option<String>,
    ) -> Response {
        if let Some(prompt) = prompt {
            let delay = marked_number(&prompt, "MOCK_DELAY=");
            let hold = prompt.contains("MOCK_HOLD");
            if delay.is_some() || hold {
                let _waiting = Waiting::enter(&self.waiting, prompt);
                if let Some(delay) = delay {
                    tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                }
                if hold {
                    // The sender lives in `self`, so this ends only with a release.
                    let _ = self
                        .released
                        .subscribe()
                        .wait_for(|released| *released)
                        .await;
                }
            }
        }
        respond(self, request)
    }
}

/// A prompt in [`State::waiting`] for as long as its request waits; the connection task may
/// be dropped meanwhile (the adapter gave up), so the guard takes it out.
struct Waiting<'a> {
    waiting: &'a watch::Sender<Vec<String>>,
    prompt: String,
}

impl<'a> Waiting<'a> {
    fn enter(waiting: &'a watch::Sender<Vec<String>>, prompt: String) -> Waiting<'a> {
        waiting.send_modify(|prompts| prompts.push(prompt.clone()));
        Waiting { waiting, prompt }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waiting.send_modify(|prompts| {
            if let Some(position) = prompts.iter().position(|prompt| *prompt == self.prompt) {
                prompts.remove(position);
            }
        });
    }
}

/// Routes one request.
fn respond(state: &State, request: &RecordedRequest) -> Response {
    match (request.method.as_str(), request.path.as_str()) {
        // Claude Code probes the base URL before its first request.
        ("HEAD", _) => Response {
            status: 200,
            content_type: "text/plain",
            body: Vec::new(),
            retry_after: None,
            headers: None,
        },
        ("POST", "/v1/messages") => messages(state, request),
        ("POST", "/v1/responses") => openai(state, request, OpenAiApi::Responses),
        ("POST", "/v1/chat/completions") => openai(state, request, OpenAiApi::ChatCompletions),
        ("POST", "/v1/messages/count_tokens") => {
            let text = request
                .json()
                .map(|body| body.to_string())
                .unwrap_or_default();
            json_response(200, &json!({"input_tokens": text.len() / 4 + 1}))
        }
        ("GET", "/v1/models") => json_response(
            200,
            &json!({
                "data": [{
                    "type": "model",
                    "id": "claude-sonnet-4-6",
                    "display_name": "Claude Sonnet (fake)",
                    "created_at": "2025-01-01T00:00:00Z"
                }],
                "has_more": false,
                "first_id": "claude-sonnet-4-6",
                "last_id": "claude-sonnet-4-6"
            }),
        ),
        (method, path) => {
            eprintln!("fake LLM: unhandled {method} {path}");
            error_response(
                404,
                "not_found_error",
                &format!("{method} {path} is not faked"),
            )
        }
    }
}

/// `POST /v1/messages`: an error if the prompt asks for one, else the reply, streamed as
/// server-sent events when the request says `"stream": true`.
fn messages(state: &State, request: &RecordedRequest) -> Response {
    let Some(body) = request.json() else {
        return error_response(400, "invalid_request_error", "body is not JSON");
    };
    let prompt = last_user_text(&body);
    if let Some(status) = *lock(&state.fail_tool_results)
        && tool_result_text(&body).is_some()
    {
        return error_response(
            status,
            "authentication_error",
            "fake failure after a tool ran",
        );
    }
    if let Some(status) = requested_status(state, &prompt) {
        if let Some(response) = provider_failure(status, &prompt) {
            return response;
        }
        if status == 429 {
            return usage_limit_response(&prompt);
        }
        let kind = match status {
            401 => "authentication_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        };
        return error_response(
            status,
            kind,
            &format!("fake failure requested by the prompt (MOCK_STATUS={status})"),
        );
    }
    let reply = if let Some(result) = tool_result_text(&body) {
        format!("MOCK-TOOL-RESULT: {result}")
    } else if asks_for_json(&prompt) {
        state.json_reply.to_string()
    } else {
        format!("MOCK-REPLY: {prompt}")
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-fake")
        .to_owned();
    let input_tokens = request.body.len() / 4 + 1;
    let offers_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    if let Some(command) = bash_command(&prompt).filter(|_| offers_tools)
        && tool_result_text(&body).is_none()
    {
        return bash_tool_use(&model, &command, input_tokens);
    }
    if let Some(tool) = structured_output_tool(&body)
        && tool_result_text(&body).is_none()
    {
        return tool_use(&model, &tool, &state.json_reply, input_tokens);
    }
    let output_tokens = reply.len() / 4 + 1;
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        Response {
            status: 200,
            content_type: "text/event-stream",
            body: stream_events(&model, &reply, input_tokens, output_tokens).into_bytes(),
            retry_after: None,
            headers: None,
        }
    } else {
        json_response(
            200,
            &json!({
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": reply}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}
            }),
        )
    }
}

/// The SSE body of a streamed reply. The text goes out in two deltas so the adapter's chunk
/// handling is exercised, not just a single-chunk happy path.
fn stream_events(model: &str, reply: &str, input_tokens: usize, output_tokens: usize) -> String {
    let mut middle = reply.len() / 2;
    while !reply.is_char_boundary(middle) {
        middle += 1;
    }
    let (first, second) = reply.split_at(middle);
    let mut events = vec![
        json!({
            "type": "message_start",
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 0}
            }
        }),
        json!({
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""}
        }),
    ];
    for text in [first, second].into_iter().filter(|text| !text.is_empty()) {
        events.push(json!({
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text}
        }));
    }
    events.extend([
        json!({"type": "content_block_stop", "index": 0}),
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}
        }),
        json!({"type": "message_stop"}),
    ]);
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The command after `MOCK_BASH=`, to the end of its line.
fn bash_command(prompt: &str) -> Option<String> {
    let (_, rest) = prompt.split_once("MOCK_BASH=")?;
    let command = rest.lines().next().unwrap_or_default().trim();
    (!command.is_empty()).then(|| command.to_owned())
}

/// The text of the tool results in the request's last message, when it carries any.
fn tool_result_text(body: &Value) -> Option<String> {
    let last = body.get("messages")?.as_array()?.last()?;
    let blocks = last.get("content")?.as_array()?;
    let results: Vec<String> = blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| match block.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        })
        .collect();
    (!results.is_empty()).then(|| results.join(" | "))
}

/// A streamed assistant turn that asks for the `Bash` tool with `command`.
fn bash_tool_use(model: &str, command: &str, input_tokens: usize) -> Response {
    let input = json!({"command": command, "description": "Run the requested command"});
    tool_use(model, "Bash", &input, input_tokens)
}

/// The name of the `…StructuredOutput` tool the request offers, in whichever API's shape:
/// `tools[].name` (Anthropic, Responses), `tools[].function.name` (chat completions), or a
/// Responses namespace's `tools[].tools[].name`, given as `namespace/name`.
fn structured_output_tool(body: &Value) -> Option<String> {
    let named = |tool: &Value| {
        tool.get("name")
            .or_else(|| tool.pointer("/function/name"))
            .and_then(Value::as_str)
            .filter(|name| name.ends_with("StructuredOutput"))
            .map(str::to_owned)
    };
    body.get("tools")?.as_array()?.iter().find_map(|tool| {
        named(tool).or_else(|| {
            let namespace = tool.get("name").and_then(Value::as_str)?;
            let inner = tool.get("tools")?.as_array()?.iter().find_map(named)?;
            Some(format!("{namespace}/{inner}"))
        })
    })
}

/// A streamed assistant turn that calls tool `name` with `input`.
fn tool_use(model: &str, name: &str, input: &Value, input_tokens: usize) -> Response {
    let events = [
        json!({"type": "message_start", "message": {
            "id": "msg_fake_tool", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_fake_tool", "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": input.to_string()}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ];
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("")
            )
        })
        .collect();
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
        retry_after: None,
        headers: None,
    }
}

fn error_response(status: u16, kind: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

/// The last text block of the last user message: the prompt itself, after the reminders
/// Claude Code puts in front of it.
pub fn last_user_text(body: &Value) -> String {
    let Some(message) = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
        .and_then(|messages| {
            messages
                .iter()
                .rev()
                .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        })
    else {
        return String::new();
    };
    match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .rev()
            .find(|block| {
                matches!(
                    block.get("type").and_then(Value::as_str),
                    Some("text" | "input_text")
                )
            })
            .and_then(|block| block.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// `MOCK_STATUS=<three digits>` anywhere in the prompt, or the status set by
/// [`FakeLlm::fail_with`].
fn requested_status(state: &State, prompt: &str) -> Option<u16> {
    if let Some(status) = *lock(&state.fail_status) {
        return Some(status);
    }
    let (_, rest) = prompt.split_once("MOCK_STATUS=")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .ok()
        .filter(|status| (400..=599).contains(status))
}

/// Whether the prompt carries structured-output instructions: the engine's schema text names
/// JSON (and the finished schema module fences the schema as ```json).
pub fn asks_for_json(prompt: &str) -> bool {
    prompt.contains("```json") || prompt.contains("JSON")
}

/// How long a 429 says the limit lasts, in its body and its `retry-after`.
pub const RESET_SECONDS: u64 = super::http1::RATE_LIMIT_RESET_SECONDS;

fn is_model_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/messages" | "/v1/responses" | "/v1/chat/completions"
    )
}

/// The prompt of a model request (any of the three APIs).
fn model_prompt(request: &RecordedRequest) -> Option<String> {
    if request.method != "POST" || !is_model_path(&request.path) {
        return None;
    }
    Some(last_user_text(&request.json()?))
}

/// The whole number after `marker` (`MOCK_DELAY=`) in a prompt.
fn marked_number(prompt: &str, marker: &str) -> Option<u64> {
    let (_, rest) = prompt.split_once(marker)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A usage-limit 429 as OpenAI sends it (the reset time in the body), which the Anthropic
/// SDKs read too: `error.message` is what claude-agent-acp and opencode pass on. Its
/// `retry-after` says the same unless the prompt says `MOCK_RETRY_AFTER=<seconds>`.
fn usage_limit_response(prompt: &str) -> Response {
    let resets_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|now| now.as_secs())
        .unwrap_or_default()
        + RESET_SECONDS;
    let mut response = json_response(
        429,
        &json!({
            "type": "error",
            "error": {
                "type": "usage_limit_reached",
                "message": format!("The usage limit has been reached (resets_in_seconds: {RESET_SECONDS})"),
                "resets_in_seconds": RESET_SECONDS,
                "resets_at": resets_at,
            }
        }),
    );
    response.retry_after = marked_number(prompt, "MOCK_RETRY_AFTER=");
    response
}

/// A failure in a real provider's words and headers, when the prompt asks for one:
/// `MOCK_WORDING=openai` answers a 401 as OpenAI does (`invalid_api_key`, "Incorrect API key
/// provided"), `MOCK_LIMIT=rate` a 429 as Anthropic's rate limit (`rate_limit_error`, the
/// reset moment only in `anthropic-ratelimit-unified-reset`), and `MOCK_PROVIDER_HEADERS`
/// sends the provider's headers instead of the fake's `x-should-retry: false`: no retry
/// advice at all, or the `retry-after` of `MOCK_RETRY_AFTER=<seconds>`.
fn provider_failure(status: u16, prompt: &str) -> Option<Response> {
    let body = match status {
        401 if prompt.contains("MOCK_WORDING=openai") => json!({"error": {
            "message": "Incorrect API key provided: mock. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
        401 if prompt.contains("MOCK_PROVIDER_HEADERS") => json!({"type": "error", "error": {
            "type": "authentication_error", "message": "invalid x-api-key"}}),
        429 if prompt.contains("MOCK_LIMIT=rate") => json!({"type": "error", "error": {
            "type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit. Please try again later."}}),
        _ => return None,
    };
    let mut response = json_response(status, &body);
    if prompt.contains("MOCK_PROVIDER_HEADERS") {
        let mut headers = Vec::new();
        if let Some(seconds) = marked_number(prompt, "MOCK_RETRY_AFTER=") {
            headers.push(("retry-after", seconds.to_string()));
        }
        if status == 429 {
            let reset = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|now| now.as_secs())
                .unwrap_or_default()
                + RESET_SECONDS;
            headers.push(("anthropic-ratelimit-unified-status", "rejected".to_owned()));
            headers.push(("anthropic-ratelimit-unified-reset", reset.to_string()));
        }
        response.headers = Some(headers);
    } else {
        response.retry_after = marked_number(prompt, "MOCK_RETRY_AFTER=");
    }
    Some(response)
}
