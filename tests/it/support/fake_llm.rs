//! A loopback fake of the Anthropic Messages API, so a real ACP adapter (claude-agent-acp and
//! the Claude Code CLI under it) can finish turns with no network and no key. Point the
//! adapter at it with `ANTHROPIC_BASE_URL=http://<address>` and any `ANTHROPIC_API_KEY`.
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
//! The HTTP/1.1 handling is the minimal server in `support::http1`. The server binds only
//! 127.0.0.1 and stops when the [`FakeLlm`] is dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use super::http1::RecordedRequest;
use super::http1::{Handler, Response, accept_loop, json_response, lock};

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
    requests: Mutex<Vec<RecordedRequest>>,
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
        respond(self, request)
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
    if let Some(status) = requested_status(&prompt) {
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
            .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .and_then(|block| block.get("text").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// `MOCK_STATUS=<three digits>` anywhere in the prompt.
fn requested_status(prompt: &str) -> Option<u16> {
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
