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
        ack["setup"] = json!(setup);
    }
    if let Some(continuation) = &admission.continuation {
        ack["continuation"] = continuation.clone();
    }
    if !admission.warnings.is_empty() {
        ack["warnings"] = json!(admission.warnings);
    }
    if let Some(size) = &admission.size {
        ack["size"] = size.clone();
    }
    ack["next"] = text::next_for_status(&ack);
    let summary = text::acknowledgement(&ack);
    let links = vec![
        resources::script_link(run_id, &admission.script_file),
        resources::events_link(run_id),
    ];
    structured(summary, ack, links)
}

/// The status document as the tool answers it: the engine's document led by `runId`,
/// `status`, `resultBytes` (the size of a completed run's result, when it has a value) and
/// `next`, ahead of the engine's other fields and the uncapped `outcome`, so a host that
/// keeps only the start of a large answer still shows how the run ended and the call that
/// reads its result.
pub(super) fn status_document(engine_document: Value) -> Value {
    let mut lead = vec![
        ("runId", engine_document["runId"].clone()),
        ("status", engine_document["status"].clone()),
    ];
    if engine_document.get("resultUri").is_some()
        && let Some(result) = engine_document.pointer("/outcome/result")
    {
        lead.push(("resultBytes", Value::from(text::json_bytes(result))));
    }
    lead.push(("next", text::next_for_status(&engine_document)));
    text::lead_with(engine_document, lead)
}

/// Status, stop and pause answers: the summary text, the [`status_document`], and links to
/// the run's script, events and (when completed with a value) result.
pub(super) fn status_result(headline: Option<String>, status: Value) -> Value {
    let status = status_document(status);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed run's status document as the engine builds it: the engine's field order,
    /// `outcome` last, with a result of about 300 KB.
    fn completed(result: &Value) -> Value {
        json!({
            "runId": "mabc-def",
            "status": "completed",
            "workflowName": "large",
            "limits": {"maxAgents": 1000},
            "scriptUri": "file:///state/runs/mabc-def.script.js",
            "scriptPath": "/state/runs/mabc-def.script.js",
            "eventsUri": "workflow://runs/mabc-def/events",
            "resultUri": "workflow://runs/mabc-def/result",
            "calls": [],
            "outcome": {"result": result, "logs": []},
        })
    }

    fn large_result() -> Value {
        let rows: Vec<String> = (0..6000)
            .map(|index| format!("row {index}: \"quoted\" back\\slash é 🙂"))
            .collect();
        json!({"rows": rows})
    }

    /// The facts a model needs lead the document, ahead of the uncapped outcome, and the
    /// summary text states the same ones first.
    #[test]
    fn a_completed_status_leads_with_its_status_result_size_and_next_call() {
        let result = large_result();
        let answer = status_result(None, completed(&result));
        let document = &answer["structuredContent"];
        let keys: Vec<&str> = document
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys[..4], ["runId", "status", "resultBytes", "next"]);
        assert_eq!(keys.last(), Some(&"outcome"));
        let next = json!({"action": "result", "runId": "mabc-def", "offset": 0, "maxBytes": 4096});
        assert_eq!(document["next"], next);
        assert_eq!(document["resultBytes"], result.to_string().len());
        assert_eq!(
            document["outcome"]["result"], result,
            "the outcome stays exact"
        );
        let head = crate::util::truncate_utf8(&document.to_string(), 200).to_owned();
        assert!(head.contains("\"status\":\"completed\""), "{head}");
        assert!(head.contains(&next.to_string()), "{head}");

        let text = answer["content"][0]["text"].as_str().expect("the summary");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Run mabc-def (large): completed");
        assert_eq!(
            lines[1],
            format!(
                "Result: {} bytes of JSON at workflow://runs/mabc-def/result. Page it with the next call, continuing at each page's endOffset until hasMore is false.",
                result.to_string().len()
            )
        );
        assert_eq!(lines[2], format!("Next call: {next}"));
    }

    /// Every status answer has `next` right after `status`, `null` included; only a run with
    /// a result value has `resultBytes`.
    #[test]
    fn every_status_answer_has_its_next_call_second() {
        let running =
            json!({"runId": "mabc-def", "workflowName": "w", "status": "running", "calls": []});
        let answer = status_result(None, running);
        let document = &answer["structuredContent"];
        let keys: Vec<&str> = document
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["runId", "status", "next", "workflowName", "calls"]);
        assert_eq!(
            document["next"],
            json!({"action": "status", "runId": "mabc-def"})
        );
        let text = answer["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            text.lines().nth(1),
            Some(r#"Next call: {"action":"status","runId":"mabc-def"}"#)
        );

        let mut valueless = completed(&Value::Null);
        valueless.as_object_mut().unwrap().remove("resultUri");
        let answer = status_result(None, valueless);
        let document = &answer["structuredContent"];
        assert!(document.get("resultBytes").is_none(), "{document:#}");
        assert_eq!(document["next"], Value::Null);
        assert!(
            !answer["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Next call")
        );
    }
}
