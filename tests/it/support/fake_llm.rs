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
        head.push_str("x-should-retry: false\r\nretry-after: 0\r\n");
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
