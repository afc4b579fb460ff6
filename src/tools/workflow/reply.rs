//! How the `workflow` tool answers: the result shapes every action shares, the mapping of
//! engine failures onto them, and how long an answer may take.
//!
//! Failures of the work (a script that does not prepare, an unknown run, a full project) are
//! tool results with `isError: true`, so the model can correct itself; only failures of the
//! server itself (the run store) are JSON-RPC errors.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::{Admission, EngineError};
use crate::mcp::handler::{McpError, McpResult};
use crate::model::RunId;
use crate::tools::resources;

use super::text;

/// How long `run` may prepare before it is abandoned (nothing stored).
pub const PREPARATION_CEILING: Duration = Duration::from_secs(120);
/// How long an observation (`status`, `result`, `config`) may take.
pub const OBSERVATION_CEILING: Duration = Duration::from_secs(45);

/// A tool result that reports a failure of the work (`isError: true`, text only).
pub(super) fn tool_error(message: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": message.into()}], "isError": true})
}

/// Arguments `parse` refused, as a tool execution error (MCP 2025-11-25) so the model can
/// correct the call: the same text, and `structuredContent.error` = `{action, field,
/// accepted}` (for a problem with `action` itself, `accepted` lists the actions).
pub(super) fn invalid_input(error: McpError) -> Value {
    let detail = error
        .data
        .unwrap_or_else(|| json!({"action": null, "field": null, "accepted": []}));
    json!({
        "content": [{"type": "text", "text": error.message}],
        "structuredContent": {"error": detail},
        "isError": true,
    })
}

/// Engine failures: rejections and unknown runs (in the engine's own words) are tool
/// errors; store failures (integrity, I/O) are JSON-RPC -32603.
pub(super) fn engine_failure(error: EngineError) -> McpResult<Value> {
    match error {
        EngineError::Rejected(message) => Ok(tool_error(message.to_string())),
        unknown @ EngineError::UnknownRun(_) => Ok(tool_error(unknown.to_string())),
        EngineError::Store(error) => Err(McpError::internal(format!("run store: {error}"))),
    }
}

/// Runs an observation under [`OBSERVATION_CEILING`].
pub(super) async fn observe<T: From<Value>>(
    work: impl std::future::Future<Output = McpResult<T>>,
) -> McpResult<T> {
    match tokio::time::timeout(OBSERVATION_CEILING, work).await {
        Ok(result) => result,
        Err(_) => Ok(tool_error(format!(
            "the request took longer than {} s; try again",
            OBSERVATION_CEILING.as_secs()
        ))
        .into()),
    }
}

/// The run/resume acknowledgement (engine.md 6.3).
pub(super) fn acknowledgement(action: &str, admission: &Admission) -> Value {
    let run_id = &admission.run_id;
    let script_uri = crate::engine::status::file_uri(&admission.script_file);
    let mut ack = json!({
        "accepted": true,
        "action": action,
        "runId": run_id,
        "status": admission.status,
        "scriptSource": admission.script_source,
        "scriptUri": script_uri,
        "scriptPath": admission.script_file,
        "eventsUri": resources::events_uri(run_id),
        "limits": admission.limits.to_json(),
    });
    if let Some(setup) = &admission.setup {
        ack["setup"] = setup.clone();
    }
    if let Some(continuation) = &admission.continuation {
        ack["continuation"] = continuation.clone();
    }
    if !admission.warnings.is_empty() {
        ack["warnings"] = json!(admission.warnings);
    }
    ack["next"] = text::next_for_status(&ack);
    let summary = text::acknowledgement(&ack);
    let links = vec![
        resources::script_link(run_id, &admission.script_file),
        resources::events_link(run_id),
    ];
    structured(summary, ack, links)
}

/// Status, stop and pause answers: the summary text, the status document, and links to the
/// run's script, events and (when completed with a value) result.
pub(super) fn status_result(headline: Option<String>, mut status: Value) -> Value {
    status["next"] = text::next_for_status(&status);
    let summary = text::status(headline.as_deref(), &status);
    let mut links = Vec::new();
    if let Some(run_id) = status["runId"]
        .as_str()
        .and_then(|id| RunId::parse(id).ok())
    {
        if let Some(path) = status["scriptPath"].as_str() {
            links.push(resources::script_link(&run_id, Path::new(path)));
        }
        links.push(resources::events_link(&run_id));
        if status.get("resultUri").is_some() {
            links.push(resources::result_link(&run_id));
        }
    }
    structured(summary, status, links)
}

/// `{content:[text, ...links], structuredContent}`.
pub(super) fn structured(summary: String, document: Value, links: Vec<Value>) -> Value {
    // Moved in, not through `json!`, which would copy the document through the serializer.
    let mut text = serde_json::Map::with_capacity(2);
    text.insert("type".to_owned(), Value::from("text"));
    text.insert("text".to_owned(), Value::String(summary));
    let mut content = Vec::with_capacity(links.len() + 1);
    content.push(Value::Object(text));
    content.extend(links);
    let mut result = serde_json::Map::with_capacity(2);
    result.insert("content".to_owned(), Value::Array(content));
    result.insert("structuredContent".to_owned(), document);
    Value::Object(result)
}
