//! The folder server's resources.
//!
//! - `mhl://workflows/<name>`: each workflow's manifest (name, description, input schema,
//!   its path under the folder and its `meta`), projected from the loaded scripts, over
//!   every transport. Never a script's text: a pack's content stays in the pack.
//! - `mhl://run/{runId}/logs` (text) and `mhl://run/{runId}/result` (JSON): HTTP only, and
//!   owner-gated exactly like `run/status`: anyone but the owner gets the answer of a
//!   resource that does not exist.

use serde_json::{Value, json};

use crate::engine::manager::exact_result;
use crate::mcp::handler::{McpError, McpResult, RequestContext, codes};
use crate::model::RunStatus;

use super::folder::Folder;
use super::owners::OwnerKey;
use super::runs::{RunApi, RunError};

const WORKFLOW_PREFIX: &str = "mhl://workflows/";
const RUN_PREFIX: &str = "mhl://run/";

/// The `resource_link` items of a new run: its logs and its result.
pub(super) fn run_links(run_id: &str) -> Vec<Value> {
    vec![
        json!({
            "type": "resource_link",
            "uri": format!("{RUN_PREFIX}{run_id}/logs"),
            "name": "logs",
            "description": "The run's latest log lines",
            "mimeType": "text/plain",
        }),
        json!({
            "type": "resource_link",
            "uri": format!("{RUN_PREFIX}{run_id}/result"),
            "name": "result",
            "description": "The run's result once it completed",
            "mimeType": "application/json",
        }),
    ]
}

/// `resources/list`: one manifest per workflow.
pub(super) fn list(folder: &Folder) -> Value {
    let resources: Vec<Value> = folder
        .workflows
        .values()
        .map(|workflow| {
            json!({
                "uri": format!("{WORKFLOW_PREFIX}{}", workflow.name),
                "name": workflow.name,
                "description": workflow.description,
                "mimeType": "application/json",
            })
        })
        .collect();
    json!({"resources": resources})
}

/// `resources/templates/list`: the run resources, where they are served.
pub(super) fn templates(run_resources: bool) -> Value {
    if !run_resources {
        return json!({"resourceTemplates": []});
    }
    json!({"resourceTemplates": [
        {"uriTemplate": format!("{RUN_PREFIX}{{runId}}/logs"), "name": "run-logs", "mimeType": "text/plain",
         "description": "The latest log lines of a run you started"},
        {"uriTemplate": format!("{RUN_PREFIX}{{runId}}/result"), "name": "run-result", "mimeType": "application/json",
         "description": "The result of a run you started, once completed"},
    ]})
}

/// `resources/read`.
pub(super) async fn read(
    api: &RunApi,
    ctx: &RequestContext,
    uri: &str,
    run_resources: bool,
) -> McpResult<Value> {
    if let Some(name) = uri.strip_prefix(WORKFLOW_PREFIX)
        && let Some(workflow) = api.folder.get(name)
    {
        let manifest = json!({
            "name": workflow.name,
            "description": workflow.description,
            "inputSchema": workflow.input_schema,
            "path": workflow.relative,
            "meta": workflow.meta,
            "runTool": "mhl_run_start",
        });
        return Ok(contents(uri, "application/json", manifest.to_string()));
    }
    if run_resources && let Some(rest) = uri.strip_prefix(RUN_PREFIX) {
        return read_run(api, ctx, uri, rest).await;
    }
    Err(not_found(uri))
}

async fn read_run(api: &RunApi, ctx: &RequestContext, uri: &str, rest: &str) -> McpResult<Value> {
    let Some((run_id, part)) = rest.split_once('/') else {
        return Err(not_found(uri));
    };
    if part != "logs" && part != "result" {
        return Err(not_found(uri));
    }
    let owner = OwnerKey::of(ctx);
    let run_id = match api.admitted(&owner, &json!({"runId": run_id})).await {
        Ok(run_id) => run_id,
        Err(_) => return Err(not_found(uri)),
    };
    if part == "logs" {
        let (lines, _) = api.log_lines(&run_id).await.map_err(internal)?;
        return Ok(contents(uri, "text/plain", lines.join("\n")));
    }
    let record = api
        .engine
        .load_reconciled(&run_id)
        .await
        .map_err(|error| internal(RunError::from(error)))?;
    if record.status != RunStatus::Completed {
        return Err(McpError::invalid_params(format!(
            "the run has no result yet: it is {}",
            super::view::RunView::stored(&record).state
        )));
    }
    let text = exact_result(&record).map_err(|error| internal(RunError::from(error)))?;
    Ok(contents(uri, "application/json", text))
}

fn contents(uri: &str, mime: &str, text: String) -> Value {
    json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]})
}

/// The one answer for a resource that does not exist or is not the caller's.
fn not_found(uri: &str) -> McpError {
    McpError::new(codes::RESOURCE_NOT_FOUND, "unknown resource").with_data(json!({"uri": uri}))
}

fn internal(error: RunError) -> McpError {
    McpError::internal(error.to_string())
}
