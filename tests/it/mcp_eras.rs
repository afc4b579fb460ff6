//! What each protocol version's clients get on the wire from the Streamable HTTP transport,
//! frame by frame: an SSE priming event (an id, `retry:`, empty data) and a closing `retry:`
//! only for clients that negotiated 2025-11-25 or later, or speak the stateless 2026-07-28
//! form. A 2025-03-26 or 2025-06-18 client parses an empty `data:` as a message and fails
//! (Gemini CLI drops the server), so its streams carry message events only.

use agentprism::mcp::ServerEvent;
use agentprism::transport::HttpOptions;
use serde_json::{Value, json};

use super::mcp_core::modern_meta;
use super::mcp_http::{Reply, TestServer};

/// The `retry:` value every priming event and closing hint carries (the default options').
const RETRY_MS: u64 = 1000;

/// Whether `version`'s clients get priming events and `retry:` hints.
fn primes(version: &str) -> bool {
    matches!(version, "2025-11-25" | "2026-07-28")
}

/// A message frame, checked to be exactly `id: <id>\ndata: <json>`; returns the message.
fn message_frame(frame: &str) -> Value {
    let lines: Vec<&str> = frame.split('\n').collect();
    assert_eq!(
        lines.len(),
        2,
        "a message frame is an id and a data line: {frame:?}"
    );
    let id = lines[0].strip_prefix("id: ").expect("the id line");
    assert!(!id.is_empty() && !id.contains(' '), "{frame:?}");
    let data = lines[1].strip_prefix("data: ").expect("the data line");
    let message: Value = serde_json::from_str(data)
        .unwrap_or_else(|error| panic!("data that is not a message ({error}): {frame:?}"));
    assert_eq!(frame, format!("id: {id}\ndata: {data}"), "exact bytes");
    message
}

/// A priming frame, checked to be exactly `id: <id>\nretry: 1000\ndata: `.
fn priming_frame(frame: &str) {
    let id = frame
        .strip_prefix("id: ")
        .and_then(|rest| rest.split_once('\n'))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("no id in the priming frame: {frame:?}"));
    assert_eq!(
        frame,
        format!("id: {id}\nretry: {RETRY_MS}\ndata: "),
        "exact bytes"
    );
}

/// The whole SSE answer of the test handler's `progress` tool: its frames, in order.
async fn progress_answer(mut reply: Reply) -> Vec<String> {
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let mut frames = Vec::new();
    while let Some(frame) = reply.frame().await {
        frames.push(frame);
    }
    frames
}

/// The POST answer of one version: priming first where the version has it, then the progress
/// notification, the log message (a stateless request states no log level, so it gets none)
/// and the response, and nothing after the response.
fn check_post_answer(version: &str, frames: &[String]) {
    let messages = if primes(version) {
        priming_frame(&frames[0]);
        &frames[1..]
    } else {
        frames
    };
    let mut expected = vec![json!("notifications/progress")];
    if version != "2026-07-28" {
        expected.push(json!("notifications/message"));
    }
    expected.push(json!("done"));
    let seen: Vec<Value> = messages
        .iter()
        .map(|frame| message_frame(frame))
        .map(|message| match message.get("method") {
            Some(method) => method.clone(),
            None => message["result"]["content"][0]["text"].clone(),
        })
        .collect();
    assert_eq!(seen, expected, "{version}: {frames:#?}");
}

#[tokio::test]
async fn legacy_post_answers_prime_only_from_2025_11_25() {
    let server = TestServer::start(HttpOptions::default()).await;
    for version in ["2025-03-26", "2025-06-18", "2025-11-25"] {
        let session = server.initialize_as(version).await;
        let headers = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", version),
        ];
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "progress", "_meta": {"progressToken": 7}}});
        let frames = progress_answer(server.post(&headers, &call).await).await;
        check_post_answer(version, &frames);
    }
    server.stop().await;
}

#[tokio::test]
async fn stateless_post_answers_prime() {
    let server = TestServer::start(HttpOptions::default()).await;
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "progress"),
    ];
    let mut meta = modern_meta();
    meta["progressToken"] = json!(7);
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "progress", "_meta": meta}});
    let frames = progress_answer(server.post(&headers, &call).await).await;
    check_post_answer("2026-07-28", &frames);
    server.stop().await;
}

/// The GET stream: a priming event first only where the version has it; a stream replaced by
/// a newer GET ends with `retry:` only there; the session's notifications are message frames.
#[tokio::test]
async fn legacy_get_streams_prime_and_hint_retry_only_from_2025_11_25() {
    let server = TestServer::start(HttpOptions::default()).await;
    for version in ["2025-03-26", "2025-06-18", "2025-11-25"] {
        let session = server.initialize_as(version).await;
        let headers = [
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", version),
            ("Accept", "text/event-stream"),
        ];
        let mut stream = server.request("GET", &headers, "").await;
        assert_eq!(stream.status, 200, "{version}");
        if primes(version) {
            priming_frame(&stream.frame().await.expect("the priming frame"));
        }
        server.hub.publish(ServerEvent::ToolsListChanged);
        let first = stream.frame().await.expect("a notification");
        assert_eq!(
            message_frame(&first)["method"],
            "notifications/tools/list_changed",
            "{version}"
        );

        // A newer GET replaces the stream; the old one ends.
        let newer = server.request("GET", &headers, "").await;
        assert_eq!(newer.status, 200, "{version}");
        let mut rest = Vec::new();
        while let Some(frame) = stream.frame().await {
            rest.push(frame);
        }
        let expected: Vec<String> = if primes(version) {
            vec![format!("retry: {RETRY_MS}")]
        } else {
            vec![]
        };
        assert_eq!(
            rest, expected,
            "{version}: the replaced stream's last frames"
        );
        drop(newer);
        assert!(server.server.evict_session(&session).await);
    }
    server.stop().await;
}

/// A 2025-06-18 client that reconnects with `Last-Event-ID` gets what it missed as message
/// frames, after a comment, and no priming event.
#[tokio::test]
async fn an_old_client_resumes_without_priming() {
    let server = TestServer::start(HttpOptions::default()).await;
    let version = "2025-06-18";
    let session = server.initialize_as(version).await;
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", version),
        ("Accept", "text/event-stream"),
    ];
    let mut stream = server.request("GET", &headers, "").await;
    server.hub.publish(ServerEvent::ToolsListChanged);
    let first = stream.frame().await.expect("a notification");
    let id = first
        .strip_prefix("id: ")
        .and_then(|rest| rest.split_once('\n'))
        .map(|(id, _)| id.to_owned())
        .expect("an id");
    server.hub.publish(ServerEvent::PromptsListChanged);
    let second = stream.frame().await.expect("a second notification");
    assert_eq!(
        message_frame(&second)["method"],
        "notifications/prompts/list_changed"
    );
    drop(stream);

    let mut resumed_headers = headers.to_vec();
    resumed_headers.push(("Last-Event-ID", &id));
    let mut resumed = server.request("GET", &resumed_headers, "").await;
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.frame().await.as_deref(), Some(": resumed"));
    let replayed = resumed.frame().await.expect("the missed notification");
    assert_eq!(replayed, second, "the same frame, byte for byte");
    assert!(server.server.evict_session(&session).await);
    server.stop().await;
}
