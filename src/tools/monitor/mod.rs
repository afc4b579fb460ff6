//! The run monitor: an MCP App (the `workflow_monitor` launcher, the app-only tools the panel
//! polls, the `ui://` resource holding the panel), the same panel's bytes for the daemon's
//! `/ui` route, and Claude Code channel notifications (`docs/monitor.md` is the contract).
//!
//! Who sees what: the four tools are listed only to clients whose capabilities declare
//! `extensions["io.modelcontextprotocol/ui"].mimeTypes` containing
//! `text/html;profile=mcp-app` ([`ui_capable`], through the tool registry's
//! [`Listing::WhenClientLists`]); the resource is listed to the same clients and readable by
//! anyone (static bytes, no run data). Layout: `tools` (the four tools' inputs and answers),
//! `messages` (the automatic messages, the one function the panel and the channels share),
//! `ledger` (the host-scoped receipt ledger), `channels` (the Claude Code sender and the
//! observer of the `workflow` tool's answers that tells it which runs a session named).

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::Engine;
use crate::mcp::ToolAnswer;
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::mcp::registry::{
    APPS_EXTENSION, APPS_MIME_TYPE, Listing, Tool, ToolHandler, Visibility,
};

use super::resources::Resources;

mod channels;
mod ledger;
mod messages;
mod tools;

pub(crate) use channels::CHANNEL_CAPABILITY;
pub(super) use channels::{ChannelObserver, Channels};
pub(super) use ledger::ReceiptLedger;

/// The model-facing launcher, the only tool associated with the panel resource.
pub(crate) const MONITOR_TOOL: &str = "workflow_monitor";
/// App-only: recent and active runs.
pub(crate) const RUNS_TOOL: &str = "workflow-runs";
/// App-only: a run's status document and a page of its events.
pub(crate) const EVENTS_TOOL: &str = "workflow-events";
/// App-only: a run's automatic messages and their claims.
pub(crate) const NOTIFICATIONS_TOOL: &str = "workflow-notifications";
/// The panel resource.
pub(crate) const PANEL_URI: &str = "ui://agentprism-workflow/run-monitor.html";
/// The panel: one self-contained HTML file compiled into the binary.
pub const PANEL_HTML: &str = include_str!("run-monitor.html");

/// The panel's own content security policy, read from its
/// `<meta http-equiv="Content-Security-Policy" content="…">` tag, so the `/ui` route's header
/// says exactly what the page says about itself. `None` if the page has no such tag (a unit
/// test refuses that panel).
pub fn panel_csp() -> Option<&'static str> {
    static CSP: LazyLock<Option<String>> = LazyLock::new(|| meta_csp(PANEL_HTML));
    CSP.as_deref()
}

fn meta_csp(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let at = lower.find("http-equiv=\"content-security-policy\"")?;
    let tag_start = lower[..at].rfind('<')?;
    let tag_end = tag_start + lower[tag_start..].find('>')?;
    let content = tag_start + lower[tag_start..tag_end].find("content=\"")? + "content=\"".len();
    let length = lower[content..tag_end].find('"')?;
    Some(html[content..content + length].to_owned())
}

/// Whether the client renders MCP Apps HTML views (either era's capabilities).
pub(crate) fn ui_capable(ctx: &RequestContext) -> bool {
    ctx.client_capabilities
        .pointer("/extensions")
        .and_then(|extensions| extensions.get(APPS_EXTENSION))
        .and_then(|ui| ui.get("mimeTypes"))
        .and_then(Value::as_array)
        .is_some_and(|types| types.iter().any(|t| t.as_str() == Some(APPS_MIME_TYPE)))
}

fn ui_listing() -> Listing {
    Listing::WhenClientLists {
        path: vec![
            "extensions".to_owned(),
            APPS_EXTENSION.to_owned(),
            "mimeTypes".to_owned(),
        ],
        value: APPS_MIME_TYPE.to_owned(),
    }
}

/// The panel's `_meta.ui`: no network origins at all, and a border from the host.
fn panel_meta() -> Value {
    json!({"ui": {"csp": {"connectDomains": [], "resourceDomains": []}, "prefersBorder": true}})
}

/// The `resources/list` entry of the panel.
pub(super) fn panel_listing() -> Value {
    json!({
        "uri": PANEL_URI,
        "name": "run-monitor",
        "title": "agentprism run monitor",
        "description": "The run monitor panel (MCP App) that workflow_monitor opens.",
        "mimeType": APPS_MIME_TYPE,
        "_meta": panel_meta(),
    })
}

/// `resources/read` of the panel.
pub(super) fn read_panel() -> Value {
    json!({"contents": [{
        "uri": PANEL_URI,
        "mimeType": APPS_MIME_TYPE,
        "text": PANEL_HTML,
        "_meta": panel_meta(),
    }]})
}

/// The four tools' handler.
pub(super) struct Monitor {
    pub(super) engine: Engine,
    /// `workflow-runs` without `projectDir` lists this project's runs (`--in-process`).
    pub(super) default_project: Option<std::path::PathBuf>,
    /// The host-scoped claims of `workflow-notifications`.
    pub(super) ledger: ReceiptLedger,
}

impl Monitor {
    /// The four registrations, in the order `tools/list` shows them after `workflow`.
    pub(super) fn registrations(monitor: Arc<Monitor>) -> Vec<Tool> {
        let handler: Arc<dyn ToolHandler> = monitor;
        let run_id = json!({"type": "string", "description": "The workflow run id."});
        vec![
            Tool::new(
                json!({
                    "name": MONITOR_TOOL,
                    "title": "Open the workflow run monitor",
                    "description": "Opens the interactive run monitor for a durably accepted workflow run: phases and agents, live usage, pending setup, checkpoints and permissions, stopping, and the exact result.",
                    "inputSchema": {"type": "object", "properties": {"runId": run_id}, "required": ["runId"], "additionalProperties": false},
                    "_meta": {"ui": {"resourceUri": PANEL_URI}},
                }),
                handler.clone(),
            )
            .listed(ui_listing()),
            Tool::new(
                json!({
                    "name": RUNS_TOOL,
                    "description": "Active runs first, then the newest.",
                    "inputSchema": {"type": "object", "properties": {
                        "projectDir": {"type": "string", "description": "Only runs of this project (an absolute path)."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": tools::MAX_RUNS_LIMIT, "default": 20},
                    }, "additionalProperties": false},
                }),
                handler.clone(),
            )
            .listed(ui_listing())
            .visible_to(Visibility::App),
            Tool::new(
                json!({
                    "name": EVENTS_TOOL,
                    "description": "A run's status document and a page of its events after a cursor.",
                    "inputSchema": {"type": "object", "properties": {
                        "runId": run_id,
                        "after": {"type": "integer", "minimum": 0, "default": 0},
                        "limit": {"type": "integer", "minimum": 1, "maximum": tools::MAX_EVENTS_LIMIT, "default": 200},
                    }, "required": ["runId"], "additionalProperties": false},
                }),
                handler.clone(),
            )
            .listed(ui_listing())
            .visible_to(Visibility::App),
            Tool::new(
                json!({
                    "name": NOTIFICATIONS_TOOL,
                    "description": "A run's automatic messages (required input, terminal outcome) and this host's claims of them; claim one with claim: <eventId>.",
                    "inputSchema": {"type": "object", "properties": {
                        "runId": run_id,
                        "claim": {"type": "string", "minLength": 1, "maxLength": tools::MAX_CLAIM_CHARS},
                    }, "required": ["runId"], "additionalProperties": false},
                }),
                handler,
            )
            .listed(ui_listing())
            .visible_to(Visibility::App),
        ]
    }
}

#[async_trait]
impl ToolHandler for Monitor {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let answer = match name {
            MONITOR_TOOL => tools::monitor(&self.engine, arguments).await,
            RUNS_TOOL => {
                tools::runs(&self.engine, self.default_project.as_deref(), arguments).await
            }
            EVENTS_TOOL => {
                let resources = Resources {
                    engine: &self.engine,
                    project: self.default_project.as_deref(),
                };
                tools::events(resources, arguments).await
            }
            NOTIFICATIONS_TOOL => {
                tools::notifications(&self.engine, &self.ledger, ctx, arguments).await
            }
            other => Err(McpError::invalid_params(format!("unknown tool {other:?}"))),
        };
        answer.map(ToolAnswer::Value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `/ui` route sends the page's own policy as its header: the panel must have one,
    /// strict (nothing loaded from elsewhere), and fit the size the issue allows.
    #[test]
    fn the_panel_has_a_strict_policy_and_fits() {
        let csp =
            panel_csp().expect("the panel declares its Content-Security-Policy in a meta tag");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(!csp.contains("http:") && !csp.contains("https:"), "{csp}");
        assert!(PANEL_HTML.len() < 200 * 1024, "{} bytes", PANEL_HTML.len());
        assert_eq!(
            meta_csp("<meta charset=utf-8><META HTTP-EQUIV=\"Content-Security-Policy\" content=\"default-src 'none'\">").as_deref(),
            Some("default-src 'none'")
        );
        assert_eq!(meta_csp("<meta name=\"x\" content=\"y\">"), None);
    }
}
