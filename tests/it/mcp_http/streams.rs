//! Streamable HTTP beyond the legacy session: stateless clients (their ids and headers),
//! `subscriptions/listen` and the GET stream with its replay after a reconnect.

use std::time::Duration;

use agentprism::mcp::ServerEvent;
use agentprism::transport::HttpOptions;
use serde_json::json;

use super::{TestServer, WAIT, legacy_headers};
use crate::mcp_core::modern_meta;

/// Two stateless clients both use id 1 (ids restart in every client): each request is its
/// own scope, so both are in flight at once and a session-less `notifications/cancelled`
/// for id 1 cancels neither; closing a request's response stream is what cancels it.
#[tokio::test]
async fn stateless_clients_with_the_same_id_never_cancel_each_other() {
    let server = TestServer::start(HttpOptions::default()).await;
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "wait_for_cancel"),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "wait_for_cancel", "_meta": modern_meta()}});
    let mut first = server.post(&headers, &call).await;
    let mut second = server.post(&headers, &call).await;
    for stream in [&mut first, &mut second] {
        let _priming = stream.event().await.unwrap();
        let _started = stream.event().await.unwrap();
    }
    assert_eq!(server.server.inflight_count(), 2, "both are in flight");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "_meta": modern_meta()}});
    let notified = server
        .post(
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "notifications/cancelled"),
            ],
            &cancel,
        )
        .await;
    assert!(notified.status < 300, "{}", notified.status);
    assert_eq!(
        server.server.inflight_count(),
        2,
        "another client's cancel reached neither"
    );
    drop(first);
    drop(second);
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.server.inflight_count() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "closing the streams cancels them"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn stateless_requests_check_headers_against_the_body() {
    let server = TestServer::start(HttpOptions::default()).await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {}, "_meta": modern_meta()}});
    let good = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "  echo "),
    ];
    let reply = server.post(&good, &call).await;
    assert_eq!(reply.status, 200);
    let body = reply.json().await;
    assert_eq!(body["result"]["resultType"], "complete");
    assert_eq!(server.server.session_count(), 0);

    let base64 = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("MCP-NAME", "=?base64?ZWNobw==?="),
    ];
    assert_eq!(server.post(&base64, &call).await.status, 200);

    let bad: [&[(&str, &str)]; 5] = [
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Name", "echo"),
        ],
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "TOOLS/CALL"),
            ("Mcp-Name", "echo"),
        ],
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "other"),
        ],
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
        ],
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "echo")],
    ];
    for headers in bad {
        let reply = server.post(headers, &call).await;
        assert_eq!(reply.status, 400, "{headers:?}");
        let body = reply.json().await;
        assert_eq!(body["error"]["code"], -32020, "{headers:?}");
        assert_eq!(body["id"], 3);
    }

    // A session id on a stateless request is ignored, even an unknown one.
    let mut with_session = good.to_vec();
    with_session.push(("Mcp-Session-Id", "not-a-session"));
    assert_eq!(server.post(&with_session, &call).await.status, 200);

    let removed =
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": modern_meta()}});
    let reply = server
        .post(
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "ping"),
            ],
            &removed,
        )
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json().await["error"]["code"], -32601);
    server.stop().await;
}

#[tokio::test]
async fn subscriptions_listen_acknowledges_then_delivers_tagged_notifications() {
    let server = TestServer::start(HttpOptions::default()).await;
    let listen = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": {
        "_meta": modern_meta(),
        "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["test://a"]}
    }});
    let mut stream = server
        .post(
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "subscriptions/listen"),
            ],
            &listen,
        )
        .await;
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    let mut data = Vec::new();
    while data.is_empty() {
        let event = stream.event().await.unwrap();
        if event.data.as_deref().is_some_and(|d| !d.is_empty()) {
            data.push(event.json());
        }
    }
    let ack = &data[0];
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);

    server.hub.publish(ServerEvent::PromptsListChanged);
    server.hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://b".into(),
    });
    server.hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://a".into(),
    });
    server.hub.publish(ServerEvent::ToolsListChanged);
    let mut received = Vec::new();
    while received.len() < 2 {
        let event = stream.event().await.unwrap();
        if event.data.as_deref().is_some_and(|d| !d.is_empty()) {
            received.push(event.json());
        }
    }
    assert_eq!(received[0]["method"], "notifications/resources/updated");
    assert_eq!(received[0]["params"]["uri"], "test://a");
    assert_eq!(received[1]["method"], "notifications/tools/list_changed");
    for note in &received {
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "listen-1"
        );
    }
    drop(stream);
    server.stop().await;
}

#[tokio::test]
async fn resource_subscription_updates_arrive_on_the_get_stream() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = legacy_headers(&session);
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": "test://a"}});
    assert_eq!(
        server.post(&headers, &subscribe).await.json().await["result"],
        json!({})
    );

    let mut get_headers = headers.clone();
    get_headers.push(("Accept", "text/event-stream"));
    let mut stream = server.request("GET", &get_headers, "").await;
    assert_eq!(stream.status, 200);
    let priming = stream.event().await.unwrap();
    assert_eq!(priming.data.as_deref(), Some(""));
    server.hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://unrelated".into(),
    });
    server.hub.publish(ServerEvent::ResourceUpdated {
        uri: "test://a".into(),
    });
    let update = stream.event().await.unwrap().json();
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "test://a");
    let activity = server.server.session_activity();
    assert_eq!(activity.len(), 1);
    assert!(activity[0].1.open_connections >= 1);

    // Ending the session ends its GET stream.
    assert!(server.server.evict_session(&session).await);
    assert!(stream.event().await.is_none());

    let reply = server
        .request("GET", &[("Accept", "text/event-stream")], "")
        .await;
    assert_eq!(reply.status, 400);
    server.stop().await;
}

/// Notifications sent while a session's GET stream is disconnected are
/// logged, and a GET with `Last-Event-ID` gets them, then goes on live.
#[tokio::test]
async fn a_reconnected_get_stream_replays_what_it_missed() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = legacy_headers(&session);
    let mut get_headers = headers.clone();
    get_headers.push(("Accept", "text/event-stream"));
    let mut stream = server.request("GET", &get_headers, "").await;
    assert_eq!(stream.status, 200);
    let priming = stream.event().await.unwrap();
    server.hub.publish(ServerEvent::ToolsListChanged);
    let seen = stream.event().await.unwrap();
    assert_eq!(seen.json()["method"], "notifications/tools/list_changed");
    drop(stream);
    // Wait until the server has noticed the disconnect, so nothing below can reach the old
    // connection's task.
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.server.session_activity()[0].1.open_connections > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the GET never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.hub.publish(ServerEvent::ResourcesListChanged);
    server.hub.publish(ServerEvent::PromptsListChanged);

    let resume_from = seen.id.clone().unwrap();
    let mut resumed_headers = get_headers.clone();
    resumed_headers.push(("Last-Event-ID", &resume_from));
    let mut resumed = server.request("GET", &resumed_headers, "").await;
    assert_eq!(resumed.status, 200);
    let mut missed = Vec::new();
    while missed.len() < 2 {
        let event = resumed.event().await.expect("the resumed stream ended");
        if event.data.as_deref().is_some_and(|d| !d.is_empty()) {
            missed.push((event.id.clone().unwrap(), event.json()["method"].clone()));
        }
    }
    assert_eq!(missed[0].1, "notifications/resources/list_changed");
    assert_eq!(missed[1].1, "notifications/prompts/list_changed");
    let stream_of = |id: &str| id.split_once('-').unwrap().0.to_owned();
    let stream_id = stream_of(priming.id.as_deref().unwrap());
    assert!(missed.iter().all(|(id, _)| stream_of(id) == stream_id));
    // Then live on the same stream.
    server.hub.publish(ServerEvent::ToolsListChanged);
    let live = resumed.event().await.unwrap();
    assert_eq!(live.json()["method"], "notifications/tools/list_changed");
    assert_eq!(stream_of(live.id.as_deref().unwrap()), stream_id);
    server.stop().await;
}
