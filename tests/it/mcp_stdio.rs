//! MCP over stdio through `tokio::io::duplex`: line framing, a `server/discover` probe before
//! `initialize`, both eras on one connection, notifications as whole lines, and end of input
//! ending the server.

use std::time::Duration;

use agentprism::mcp::ServerEvent;
use agentprism::transport::serve_stdio;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

use super::mcp_core::{TestHandler, modern_meta};

const WAIT: Duration = Duration::from_secs(30);

struct Client {
    input: DuplexStream,
    output: Lines<BufReader<DuplexStream>>,
}

impl Client {
    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.input.write_all(line.as_bytes()).await.unwrap();
    }

    async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.output.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// Reads lines until the response with `id`, returning it and the notifications before it.
    async fn response(&mut self, id: Value) -> (Value, Vec<Value>) {
        let mut notes = Vec::new();
        loop {
            let message = self.line().await;
            if message.get("id") == Some(&id) && message.get("method").is_none() {
                return (message, notes);
            }
            notes.push(message);
        }
    }
}

fn start() -> (
    Client,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    agentprism::mcp::NotificationHub,
) {
    let (server, hub) = TestHandler::server();
    let (client_in, server_in) = tokio::io::duplex(1 << 16);
    let (server_out, client_out) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(serve_stdio(server, server_in, server_out));
    (
        Client {
            input: client_in,
            output: BufReader::new(client_out).lines(),
        },
        task,
        hub,
    )
}

#[tokio::test]
async fn discover_before_initialize_then_both_eras_on_one_connection() {
    let (mut client, task, hub) = start();
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}})).await;
    let (discover, _) = client.response(json!(1)).await;
    assert_eq!(discover["result"]["resultType"], "complete");
    assert!(
        discover["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );

    // A legacy request before initialize has neither a session nor _meta.
    client
        .send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    let (early, _) = client.response(json!(2)).await;
    assert_eq!(early["error"]["code"], -32602);

    client
        .send(&json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
        }}))
        .await;
    let (initialized, _) = client.response(json!(3)).await;
    assert_eq!(initialized["result"]["protocolVersion"], "2025-11-25");
    client
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    client
        .send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .await;
    let (legacy, _) = client.response(json!(4)).await;
    assert!(legacy["result"].get("resultType").is_none());
    client.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": modern_meta()}})).await;
    let (modern, _) = client.response(json!(5)).await;
    assert_eq!(modern["result"]["resultType"], "complete");

    // Progress arrives as its own line before the response.
    client
        .send(
            &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
                "name": "progress", "_meta": {"progressToken": "tok"}
            }}),
        )
        .await;
    let (done, notes) = client.response(json!(6)).await;
    assert_eq!(done["result"]["content"][0]["text"], "done");
    assert!(
        notes
            .iter()
            .any(|n| n["method"] == "notifications/progress"
                && n["params"]["progressToken"] == "tok")
    );

    // The session's subscription gets resources/updated.
    client.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "resources/subscribe", "params": {"uri": "test://a"}})).await;
    let (subscribed, _) = client.response(json!(7)).await;
    assert_eq!(subscribed["result"], json!({}));
    hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://other".into(),
    });
    hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://a".into(),
    });
    let updated = client.line().await;
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "test://a");

    // Garbage gets a parse error line and the connection goes on.
    client.input.write_all(b"{oops\n").await.unwrap();
    let parse_error = client.line().await;
    assert_eq!(parse_error["error"]["code"], -32700);

    drop(client.input);
    let result = tokio::time::timeout(WAIT, task)
        .await
        .expect("the server ends at EOF")
        .unwrap();
    result.unwrap();
}

#[tokio::test]
async fn eof_cancels_requests_in_flight_and_returns() {
    let (mut client, task, _hub) = start();
    client
        .send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "wait_for_cancel", "_meta": modern_meta()
            }}),
        )
        .await;
    let started = client.line().await;
    assert_eq!(started["params"]["progressToken"], "started");
    client.input.shutdown().await.unwrap();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("EOF ends the server")
        .unwrap()
        .unwrap();
    // The cancelled request still answered on its way out.
    let (response, _) = client.response(json!(1)).await;
    assert_eq!(response["result"]["content"][0]["text"], "cancelled");
}

/// A line longer than the limit is refused as soon as it passes the limit, not when (or if)
/// its newline comes, and its rest is discarded as it arrives: the writer of an endless line
/// gets -32600 while still writing, and the connection serves the next line after it.
#[tokio::test]
async fn an_over_long_line_is_refused_before_its_newline_and_the_next_line_is_served() {
    let (mut client, task, _hub) = start();
    let limit = agentprism::transport::stdio::MAX_LINE_BYTES;
    // The writer owns the input while it writes; a stand-in holds its place.
    let mut input = std::mem::replace(&mut client.input, tokio::io::duplex(1).0);
    let writer = tokio::spawn(async move {
        let piece = vec![b'x'; 64 * 1024];
        let mut written = 0;
        while written <= limit + piece.len() {
            input.write_all(&piece).await.unwrap();
            written += piece.len();
        }
        input
    });
    let refusal = client.line().await;
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    assert_eq!(refusal["id"], Value::Null);
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message too large"),
        "{refusal}"
    );
    let mut input = tokio::time::timeout(WAIT, writer).await.unwrap().unwrap();
    // The end of the long line, then a request of its own.
    input.write_all(b"xxxx\n").await.unwrap();
    client.input = input;
    client
        .send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": {"_meta": modern_meta()}}),
        )
        .await;
    let (discover, _) = client.response(json!(1)).await;
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    drop(client.input);
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the server ends at EOF")
        .unwrap()
        .unwrap();
}

/// A connection runs at most `MAX_REQUESTS_IN_FLIGHT` requests: one more is refused at once
/// with an error naming the limit, while a cancellation is still read and frees a place.
#[tokio::test]
async fn a_request_past_the_in_flight_limit_is_refused_and_cancelling_still_works() {
    let (mut client, _task, _hub) = start();
    let limit = agentprism::transport::stdio::MAX_REQUESTS_IN_FLIGHT;
    for id in 0..limit {
        client
            .send(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "wait_for_cancel", "_meta": modern_meta()
                }}),
            )
            .await;
    }
    for _ in 0..limit {
        let started = client.line().await;
        assert_eq!(started["params"]["progressToken"], "started", "{started}");
    }
    let echo = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": {}, "_meta": modern_meta()
        }})
    };
    client.send(&echo("over")).await;
    let (refused, _) = client.response(json!("over")).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("at most {limit} run at once")),
        "{refused}"
    );
    client
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}}))
        .await;
    // The place frees once the cancelled request has ended; until then a request is refused.
    let deadline = tokio::time::Instant::now() + WAIT;
    for attempt in 0.. {
        let id = format!("again-{attempt}");
        client.send(&echo(&id)).await;
        let (answer, _) = client.response(json!(id)).await;
        if answer.get("result").is_some() {
            break;
        }
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("at most")
        );
        assert!(tokio::time::Instant::now() < deadline, "no place freed");
        tokio::task::yield_now().await;
    }
}
