//! Who is offered the run monitor: only clients whose capabilities (legacy `initialize`, or a
//! 2026-07-28 request's `_meta`) list `text/html;profile=mcp-app` under the MCP Apps
//! extension. Visibility and resource association exactly as `docs/monitor.md` says.

use serde_json::{Value, json};

use super::{Host, is_error, names, ui};
use crate::engine::harness;

const ALL: [&str; 5] = [
    "workflow",
    "workflow_monitor",
    "workflow-runs",
    "workflow-events",
    "workflow-notifications",
];

/// Capabilities that do not qualify: nothing, the extension without mime types, another
/// mime type, a string where the list belongs.
fn not_ui() -> Vec<Value> {
    let apps = |value: Value| json!({"extensions": {"io.modelcontextprotocol/ui": value}});
    vec![
        json!({}),
        apps(json!({})),
        apps(json!({"mimeTypes": ["text/html"]})),
        apps(json!({"mimeTypes": "text/html;profile=mcp-app"})),
    ]
}

#[tokio::test]
async fn the_monitor_tools_are_listed_only_to_ui_clients_in_both_eras() {
    let host = Host::new(harness());
    for capabilities in not_ui() {
        let session = host.initialize(capabilities.clone()).await;
        let listed = host.legacy(&session, "tools/list", json!({})).await;
        assert_eq!(names(&listed), ["workflow"], "legacy {capabilities}");
        let listed = host
            .modern(capabilities.clone(), "tools/list", json!({}))
            .await;
        assert_eq!(names(&listed), ["workflow"], "modern {capabilities}");
        assert_eq!(listed["result"]["cacheScope"], "private");
        // Held back means not callable either, in either era.
        let refused = host
            .legacy(
                &session,
                "tools/call",
                json!({"name": "workflow-runs", "arguments": {}}),
            )
            .await;
        assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
        let refused = host
            .modern(
                capabilities.clone(),
                "tools/call",
                json!({"name": "workflow_monitor", "arguments": {"runId": "abc-def"}}),
            )
            .await;
        assert_eq!(refused["error"]["code"], -32021, "{refused:#}");
        assert_eq!(
            refused["error"]["data"]["requiredCapabilities"],
            json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
        );
    }
    let session = host.initialize(ui()).await;
    let legacy = host.legacy(&session, "tools/list", json!({})).await;
    assert_eq!(names(&legacy), ALL);
    let modern = host.modern(ui(), "tools/list", json!({})).await;
    assert_eq!(names(&modern), ALL);
    assert_eq!(modern["result"]["cacheScope"], "private");
    assert_eq!(legacy["result"]["tools"], modern["result"]["tools"]);
}

#[tokio::test]
async fn only_the_launcher_is_associated_with_the_panel_and_the_feeds_are_app_only() {
    let host = Host::new(harness());
    let listed = host.modern(ui(), "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let meta = |name: &str| {
        tools
            .iter()
            .find(|tool| tool["name"] == name)
            .unwrap()
            .get("_meta")
            .cloned()
    };
    assert_eq!(
        meta("workflow"),
        Some(json!({"anthropic/maxResultSizeChars": 100000})),
        "the workflow tool never opens a panel (its only `_meta` is Claude Code's result size)"
    );
    assert_eq!(
        meta("workflow_monitor"),
        Some(json!({"ui": {"resourceUri": "ui://agentprism-workflow/run-monitor.html"}})),
        "model-facing (no visibility written) and associated with the panel"
    );
    for feed in ["workflow-runs", "workflow-events", "workflow-notifications"] {
        assert_eq!(
            meta(feed),
            Some(json!({"ui": {"visibility": ["app"]}})),
            "{feed}: app-only, no resource"
        );
    }
    for tool in tools {
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(schema["additionalProperties"], false, "{tool}");
    }
}

#[tokio::test]
async fn the_panel_resource_is_listed_to_ui_clients_and_readable() {
    let host = Host::new(harness());
    let uri = "ui://agentprism-workflow/run-monitor.html";
    let listed_uris = |response: &Value| -> Vec<String> {
        response["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_owned())
            .collect()
    };
    let plain = host.initialize(json!({})).await;
    let listed = host.legacy(&plain, "resources/list", json!({})).await;
    assert!(
        !listed_uris(&listed).contains(&uri.to_owned()),
        "{listed:#}"
    );
    let listed = host.modern(json!({}), "resources/list", json!({})).await;
    assert!(
        !listed_uris(&listed).contains(&uri.to_owned()),
        "{listed:#}"
    );

    let session = host.initialize(ui()).await;
    for listed in [
        host.legacy(&session, "resources/list", json!({})).await,
        host.modern(ui(), "resources/list", json!({})).await,
    ] {
        let entry = listed["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["uri"] == uri)
            .unwrap_or_else(|| panic!("{listed:#}"))
            .clone();
        assert_eq!(entry["mimeType"], "text/html;profile=mcp-app");
    }
    let read = host
        .legacy(&session, "resources/read", json!({"uri": uri}))
        .await;
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], uri);
    assert_eq!(contents["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(
        contents["text"].as_str().unwrap(),
        agentprism::tools::monitor::PANEL_HTML
    );
    assert_eq!(
        contents["_meta"]["ui"]["csp"],
        json!({"connectDomains": [], "resourceDomains": []}),
        "the panel asks for no network origin"
    );
    // Static bytes, no run data: a client without the extension may read it too.
    let read = host
        .legacy(&plain, "resources/read", json!({"uri": uri}))
        .await;
    assert_eq!(read["result"]["contents"][0]["uri"], uri, "{read:#}");
}

#[tokio::test]
async fn the_server_declares_the_claude_channel_in_both_eras() {
    let host = Host::new(harness());
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "monitor-test", "version": "1"},
    }});
    let outcome = host
        .server
        .handle_bytes(
            body.to_string().as_bytes(),
            agentprism::mcp::server::TransportContext::new(
                agentprism::mcp::server::TransportKind::Http,
                "c",
            ),
        )
        .await;
    let response = outcome.response.unwrap();
    assert_eq!(
        response["result"]["capabilities"]["experimental"],
        json!({"claude/channel": {}}),
        "{response:#}"
    );
    let discovered = host.modern(json!({}), "server/discover", json!({})).await;
    assert_eq!(
        discovered["result"]["capabilities"]["experimental"],
        json!({"claude/channel": {}}),
        "{discovered:#}"
    );
    assert!(!is_error(&discovered["result"]));
}

/// What leaves the process: the four monitor tools as an MCP Apps client is offered them.
/// Accept an intended change with `INSTA_UPDATE=always` and review `tests/it/snapshots/`.
#[tokio::test]
async fn the_monitor_tool_definitions_are_pinned() {
    let host = Host::new(harness());
    let listed = host.modern(ui(), "tools/list", json!({})).await;
    let monitor: Vec<Value> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["name"] != "workflow")
        .cloned()
        .collect();
    let text = serde_json::to_string_pretty(&monitor).unwrap();
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("monitor_tools_list", text);
    });
}
