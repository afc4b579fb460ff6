//! The run monitor (`docs/monitor.md`): capability gating of `workflow_monitor`,
//! the app-only tools and the panel resource in both eras (`gating`), the app-only tools'
//! shapes and limit edges and the receipt ledger (`app_tools`), Claude Code channel
//! notifications to the legacy sessions that named a run (`channels`; end to end on a
//! daemon's GET streams in `daemon_channels`), and the panel in a plain browser: the daemon's
//! `/ui` route and `agentprism monitor` (`browser`).
//!
//! `gating`, `app_tools` and `channels` drive the workflow server through the MCP core in
//! memory (`McpServer::handle_bytes`, legacy sessions and 2026-07-28 requests), the others a
//! real daemon over loopback HTTP.

use std::time::Duration;

use agentprism::mcp::server::{McpServer, ServerOptions, TransportContext, TransportKind};
use agentprism::tools::{WorkflowServer, WorkflowServerOptions};
use serde_json::{Value, json};

use crate::engine::Harness;

mod app_tools;
mod browser;
mod channels;
mod daemon_channels;
mod gating;

/// Capabilities of an MCP Apps client that renders HTML views.
pub(crate) fn ui() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

/// The workflow server over an engine harness, behind the MCP core.
pub(crate) struct Host {
    pub(crate) h: Harness,
    pub(crate) server: McpServer,
}

impl Host {
    pub(crate) fn new(h: Harness) -> Host {
        let handler = WorkflowServer::new(h.engine.clone(), WorkflowServerOptions::default());
        let server = McpServer::new(handler, ServerOptions::default());
        Host { h, server }
    }

    fn context(session: Option<&str>) -> TransportContext {
        let mut context = TransportContext::new(TransportKind::Http, "monitor-test");
        context.session_id = session.map(str::to_owned);
        context
    }

    /// A legacy session (2025-11-25) that declared `capabilities`.
    pub(crate) async fn initialize(&self, capabilities: Value) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "monitor-test", "version": "1"},
        }});
        let outcome = self
            .server
            .handle_bytes(body.to_string().as_bytes(), Host::context(None))
            .await;
        let session = outcome.new_session.expect("a session");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.server
            .handle_bytes(
                initialized.to_string().as_bytes(),
                Host::context(Some(&session)),
            )
            .await;
        session
    }

    /// One request in a legacy session: the JSON-RPC response.
    pub(crate) async fn legacy(&self, session: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(), "method": method, "params": params});
        let outcome = self
            .server
            .handle_bytes(body.to_string().as_bytes(), Host::context(Some(session)))
            .await;
        outcome.response.expect("a response")
    }

    /// One 2026-07-28 request declaring `capabilities`: the JSON-RPC response.
    pub(crate) async fn modern(&self, capabilities: Value, method: &str, params: Value) -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "monitor-test", "version": "1"},
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let outcome = self
            .server
            .handle_bytes(body.to_string().as_bytes(), Host::context(None))
            .await;
        outcome.response.expect("a response")
    }

    /// `tools/call` in a legacy session: the tool result.
    pub(crate) async fn call(&self, session: &str, tool: &str, arguments: Value) -> Value {
        let response = self
            .legacy(
                session,
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
            )
            .await;
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{tool} {arguments}: {response:#}"))
    }

    /// `workflow` `run` of `script` in `session`: the run id.
    pub(crate) async fn run(&self, session: &str, script: &str) -> String {
        let ack = self
            .call(
                session,
                "workflow",
                json!({"action": "run", "projectDir": self.h.project, "script": script}),
            )
            .await;
        ack["structuredContent"]["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("not admitted: {ack:#}"))
            .to_owned()
    }

    pub(crate) async fn settle(&self, run_id: &str) {
        let run_id = agentprism::model::RunId::parse(run_id).unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.h.engine.wait(&run_id))
            .await
            .expect("the run settles within a minute");
    }
}

/// The tool names of a `tools/list` response.
pub(crate) fn names(response: &Value) -> Vec<String> {
    response["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {response:#}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

pub(crate) fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}
