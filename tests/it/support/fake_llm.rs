//! A loopback fake of the model APIs the four built-in adapters speak, so each can finish
//! turns with no network and no key: the Anthropic Messages API (claude-agent-acp, with
//! `ANTHROPIC_BASE_URL=http://<address>`), the OpenAI Responses API (codex-acp, a custom
//! `model_providers` entry with `wire_api="responses"`) and OpenAI chat completions (opencode's
//! `@ai-sdk/openai-compatible` provider and pi's `openai-completions` models), all streamed.
//!
//! Besides the prompt markers below, [`FakeLlm::fail_with`] makes every model request fail
//! with one status until it is cleared, so a test can pause a run on a 401 and resume it once
//! "the credentials are fixed"; `MOCK_DELAY=<ms>` in a prompt delays that reply (a slow call
//! to stop). A 429 carries the reset time the way OpenAI does (`resets_in_seconds`,
//! `resets_at`) and a `retry-after` header.
//!
//! Every answer is derived from the last user text of the request, so a test steers the fake
//! through its prompt alone: the reply is `MOCK-REPLY: <text>`; a prompt that asks for JSON
//! (see [`asks_for_json`]; plain prompts should not say "JSON") gets the configured JSON value
//! as the whole reply; `MOCK_STATUS=<code>` makes the request fail with that HTTP status and
//! an Anthropic-shaped error body (429 is a `rate_limit_error`), marked as not worth retrying
//! so the adapter reports it at once.
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Longest request head (request line and headers) the fake accepts.
const HEAD_LIMIT: usize = 64 * 1024;
/// Longest request body the fake accepts; Claude Code sends ~100 KB of system prompt and tools.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A running fake model server. Dropping it aborts the accept loop and every connection.
pub struct FakeLlm {
    address: SocketAddr,
    state: Arc<State>,
    /// Owns the accept task, which owns the connection tasks; dropping it stops them all.
    _tasks: JoinSet<()>,
}

/// One request as the fake received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target without its query string (`/v1/messages`, not `?beta=true`).
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status the fake answered with.
    pub status: u16,
}

/// What the server tasks share with the handle.
struct State {
    /// The whole reply to a prompt that asks for JSON.
    json_reply: Value,
    /// When set, every model request fails with this status.
    fail_status: Mutex<Option<u16>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A response before it is written.
struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
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
            requests: Mutex::new(Vec::new()),
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

impl RecordedRequest {
    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The first header with this name (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A poisoned lock only means another test thread panicked; the records are still good.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Connection tasks live in this set, so aborting the accept task drops them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, state.clone()));
                }
                Err(error) => eprintln!("fake LLM: accept failed: {error}"),
            },
            // Reap finished connections so the set does not grow for the whole test.
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Serves requests on one connection until the client closes it or asks to.
async fn serve_connection(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    loop {
        let request = match read_request(&mut stream, &mut buffer).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(problem) => {
                eprintln!("fake LLM: bad request: {problem}");
                let response = error_response(400, "invalid_request_error", &problem);
                let _ = write_response(&mut stream, response, true).await;
                return;
            }
        };
        let close = request
            .header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"));
        if let Some(delay) = requested_delay(&request) {
            tokio::time::sleep(delay).await;
        }
        let response = respond(&state, &request);
        lock(&state.requests).push(RecordedRequest {
            status: response.status,
            ..request
        });
        if write_response(&mut stream, response, close).await.is_err() || close {
            return;
        }
    }
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests.
/// Bytes past the request stay in `buffer` for the next one (pipelining costs nothing here).
async fn read_request(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<Option<RecordedRequest>, String> {
    let head_end = loop {
        if let Some(position) = find(buffer, b"\r\n\r\n") {
            break position;
        }
        if buffer.len() > HEAD_LIMIT {
            return Err(format!("request head longer than {HEAD_LIMIT} bytes"));
        }
        if !read_more(stream, buffer).await? {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err("connection closed inside a request head".to_owned())
            };
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(format!("malformed request line {request_line:?}"));
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err("chunked request bodies are not supported by the fake".to_owned());
    }
    let length = match header("content-length") {
        None => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| format!("bad content-length {text:?}"))?,
    };
    if length > BODY_LIMIT {
        return Err(format!("request body of {length} bytes is over the limit"));
    }
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        if !read_more(stream, buffer).await? {
            return Err("connection closed inside a request body".to_owned());
        }
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    let path = target.split('?').next().unwrap_or(target).to_owned();
    Ok(Some(RecordedRequest {
        method: method.to_owned(),
        path,
        headers,
        body,
        // Filled in once the request has been answered.
        status: 0,
    }))
}

/// Appends what the socket has; `false` at end of stream.
async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<bool, String> {
    let mut chunk = [0_u8; 16 * 1024];
    let count = stream
        .read(&mut chunk)
        .await
        .map_err(|error| format!("read failed: {error}"))?;
    buffer.extend_from_slice(&chunk[..count]);
    Ok(count > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

async fn write_response(
    stream: &mut TcpStream,
    response: Response,
    close: bool,
) -> std::io::Result<()> {
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        529 => "Overloaded",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\nrequest-id: req_fake\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    if response.status != 200 {
        // Claude Code retries a 429 ten times with back-off unless told not to; the test of the
        // failure path wants the failure, not a minute of retries. `retry-after: 0` covers a
        // client that ignores `x-should-retry`.
        let retry_after = if response.status == 429 {
            RESET_SECONDS
        } else {
            0
        };
        head.push_str(&format!(
            "x-should-retry: false\r\nretry-after: {retry_after}\r\n"
        ));
    }
    head.push_str(if close {
        "connection: close\r\n\r\n"
    } else {
        "connection: keep-alive\r\n\r\n"
    });
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&response.body).await?;
    stream.flush().await
}

/// Routes one request.
fn respond(state: &State, request: &RecordedRequest) -> Response {
    match (request.method.as_str(), request.path.as_str()) {
        // Claude Code probes the base URL before its first request.
        ("HEAD", _) => Response {
            status: 200,
            content_type: "text/plain",
            body: Vec::new(),
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
    if let Some(status) = requested_status(state, &prompt) {
        if status == 429 {
            return usage_limit_response();
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
    let reply = if asks_for_json(&prompt) {
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
    let output_tokens = reply.len() / 4 + 1;
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        Response {
            status: 200,
            content_type: "text/event-stream",
            body: stream_events(&model, &reply, input_tokens, output_tokens).into_bytes(),
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

fn json_response(status: u16, body: &Value) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: body.to_string().into_bytes(),
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
fn last_user_text(body: &Value) -> String {
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
pub const RESET_SECONDS: u64 = 3600;

fn is_model_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/messages" | "/v1/responses" | "/v1/chat/completions"
    )
}

/// `MOCK_DELAY=<ms>` in a model request's prompt.
fn requested_delay(request: &RecordedRequest) -> Option<std::time::Duration> {
    if request.method != "POST" || !is_model_path(&request.path) {
        return None;
    }
    let prompt = last_user_text(&request.json()?);
    let (_, rest) = prompt.split_once("MOCK_DELAY=")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(std::time::Duration::from_millis)
}

/// A usage-limit 429 as OpenAI sends it (the reset time in the body), which the Anthropic
/// SDKs read too: `error.message` is what claude-agent-acp and opencode pass on.
fn usage_limit_response() -> Response {
    let resets_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|now| now.as_secs())
        .unwrap_or_default()
        + RESET_SECONDS;
    json_response(
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
    )
}

#[derive(Clone, Copy)]
enum OpenAiApi {
    Responses,
    ChatCompletions,
}

/// `POST /v1/responses` and `POST /v1/chat/completions`: the same rules as [`messages`], in
/// OpenAI's shapes; always streamed (every adapter here asks for a stream).
fn openai(state: &State, request: &RecordedRequest, api: OpenAiApi) -> Response {
    let Some(body) = request.json() else {
        return error_response(400, "invalid_request_error", "body is not JSON");
    };
    let prompt = last_user_text(&body);
    if let Some(status) = requested_status(state, &prompt) {
        if status == 429 {
            return usage_limit_response();
        }
        return json_response(
            status,
            &json!({"error": {
                "type": if status == 401 { "authentication_error" } else { "invalid_request_error" },
                "code": if status == 401 { "invalid_api_key" } else { "fake_failure" },
                "message": if status == 401 { "invalid x-api-key".to_owned() } else { format!("fake failure (MOCK_STATUS={status})") },
            }}),
        );
    }
    let reply = if asks_for_json(&prompt) {
        state.json_reply.to_string()
    } else {
        format!("MOCK-REPLY: {prompt}")
    };
    let mut middle = reply.len() / 2;
    while !reply.is_char_boundary(middle) {
        middle += 1;
    }
    let (first, second) = reply.split_at(middle);
    let body = match api {
        OpenAiApi::Responses => {
            let item = json!({"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": reply, "annotations": []}]});
            let created = json!({"id": "resp_fake", "object": "response", "created_at": 0, "status": "in_progress", "model": "mock-model", "output": []});
            let mut done = created.clone();
            done["status"] = json!("completed");
            done["output"] = json!([item]);
            done["usage"] = json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10});
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            let mut events = vec![
                json!({"type": "response.created", "response": created}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ];
            for text in [first, second].into_iter().filter(|text| !text.is_empty()) {
                events.push(json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": text}));
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            events.push(json!({"type": "response.completed", "response": done}));
            events
                .iter()
                .map(|event| {
                    format!(
                        "event: {}\ndata: {event}\n\n",
                        event["type"].as_str().unwrap_or("")
                    )
                })
                .collect::<String>()
        }
        OpenAiApi::ChatCompletions => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl_fake", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let mut events = vec![chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )];
            for text in [first, second].into_iter().filter(|text| !text.is_empty()) {
                events.push(chunk(json!({"content": text}), Value::Null));
            }
            events.push(chunk(json!({}), json!("stop")));
            events.push(json!({"id": "chatcmpl_fake", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
                "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}));
            let mut text: String = events
                .iter()
                .map(|event| format!("data: {event}\n\n"))
                .collect();
            text.push_str("data: [DONE]\n\n");
            text
        }
    };
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
    }
}
