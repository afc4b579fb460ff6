//! The run monitor's four tools: the model-facing `workflow_monitor` launcher and the
//! app-only `workflow-runs`, `workflow-events` and `workflow-notifications` the panel polls.
//!
//! Inputs are strict (unknown fields, wrong types and values outside their ranges are tool
//! errors naming the field and what it accepts); an unknown run is the `workflow` tool's own
//! tool error. Answers are `{content:[{type:"text",text}], structuredContent}` with a one-line
//! text: the panel reads the structured content, and polling stays cheap (one status
//! document, one events page).

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::engine::Engine;
use crate::mcp::handler::{McpError, McpResult, RequestContext, codes};
use crate::model::{RunId, RunStatus};
use crate::tools::resources::Resources;

use super::ledger::{ReceiptLedger, host_scope};
use super::messages::automatic_messages;

/// `workflow-runs`: `limit` 1..=50, default 20.
pub(crate) const MAX_RUNS_LIMIT: u64 = 50;
const DEFAULT_RUNS_LIMIT: u64 = 20;
/// Runs read to put the active ones first: a page of the newest, active and finished alike.
const RUNS_SCANNED: u32 = 200;
/// `workflow-events`: `limit` 1..=1000, default 200.
pub(crate) const MAX_EVENTS_LIMIT: u64 = 1000;
const DEFAULT_EVENTS_LIMIT: u64 = 200;
/// `workflow-notifications`: the longest `claim` (ids are far shorter).
pub(crate) const MAX_CLAIM_CHARS: usize = 256;

/// A tool result that reports a failure of the work.
fn tool_error(message: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": message.into()}], "isError": true})
}

fn answer(text: String, document: Value) -> Value {
    json!({"content": [{"type": "text", "text": text}], "structuredContent": document})
}

/// The arguments object with only `allowed` keys, or the tool error saying which is not.
fn fields<'a>(
    tool: &str,
    arguments: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, Value> {
    // `tools/call` without `arguments`: no fields given.
    static NONE: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    let object = match arguments {
        Value::Null => &*NONE,
        Value::Object(object) => object,
        _ => return Err(tool_error(format!("{tool}: arguments must be an object"))),
    };
    if let Some(unknown) = object.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(tool_error(format!(
            "{tool}: unknown field {unknown:?}; accepted: {}",
            allowed.join(", ")
        )));
    }
    Ok(object)
}

fn run_id(tool: &str, object: &Map<String, Value>) -> Result<RunId, Value> {
    let Some(value) = object.get("runId") else {
        return Err(tool_error(format!("{tool}: runId is required")));
    };
    let text = value
        .as_str()
        .ok_or_else(|| tool_error(format!("{tool}: runId must be a string")))?;
    RunId::parse(text).map_err(|problem| tool_error(format!("{tool}: runId {problem}")))
}

/// An optional whole number within `range`, or the default.
fn number(
    tool: &str,
    object: &Map<String, Value>,
    field: &str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
) -> Result<u64, Value> {
    let Some(value) = object.get(field) else {
        return Ok(default);
    };
    match value.as_u64() {
        Some(number) if range.contains(&number) => Ok(number),
        _ => Err(tool_error(format!(
            "{tool}: {field} must be a whole number from {} to {}, got {value}",
            range.start(),
            range.end()
        ))),
    }
}

/// The `workflow` status document, or the tool's error for it.
async fn status(engine: &Engine, run_id: &RunId) -> McpResult<Result<Value, Value>> {
    crate::tools::workflow::status_document(engine, run_id).await
}

/// `workflow_monitor({runId})`: `{runId, status, workflowName}`; the host renders the panel
/// from the tool's resource.
pub(crate) async fn monitor(engine: &Engine, arguments: &Value) -> McpResult<Value> {
    const TOOL: &str = "workflow_monitor";
    let run_id = match fields(TOOL, arguments, &["runId"]).and_then(|object| run_id(TOOL, object)) {
        Ok(run_id) => run_id,
        Err(error) => return Ok(error),
    };
    let document = match status(engine, &run_id).await? {
        Ok(document) => document,
        Err(error) => return Ok(error),
    };
    let summary = json!({
        "runId": run_id,
        "status": document["status"],
        "workflowName": document["workflowName"],
    });
    Ok(answer(
        format!(
            "Run monitor for workflow run {run_id} ({}, {}).",
            document["workflowName"].as_str().unwrap_or_default(),
            document["status"].as_str().unwrap_or_default()
        ),
        summary,
    ))
}

/// `workflow-runs({projectDir?, limit?})`: active runs first (pending, running, paused),
/// then the newest, `limit` in all.
pub(crate) async fn runs(
    engine: &Engine,
    default_project: Option<&std::path::Path>,
    arguments: &Value,
) -> McpResult<Value> {
    const TOOL: &str = "workflow-runs";
    let object = match fields(TOOL, arguments, &["projectDir", "limit"]) {
        Ok(object) => object,
        Err(error) => return Ok(error),
    };
    let limit = match number(
        TOOL,
        object,
        "limit",
        1..=MAX_RUNS_LIMIT,
        DEFAULT_RUNS_LIMIT,
    ) {
        Ok(limit) => limit as usize,
        Err(error) => return Ok(error),
    };
    let project = match object.get("projectDir") {
        None => default_project.map(std::path::Path::to_path_buf),
        Some(Value::String(text)) if std::path::Path::new(text).is_absolute() => {
            Some(PathBuf::from(text))
        }
        Some(other) => {
            return Ok(tool_error(format!(
                "{TOOL}: projectDir must be an absolute path, got {other}"
            )));
        }
    };
    let mut listed = engine
        .list(project.as_deref(), RUNS_SCANNED)
        .await
        .map_err(|error| McpError::internal(error.to_string()))?;
    // Stable: the newest first within each group, as the store lists them.
    listed.sort_by_key(|run| {
        !matches!(
            run.status,
            RunStatus::Pending | RunStatus::Running | RunStatus::Paused
        )
    });
    listed.truncate(limit);
    let runs: Vec<Value> = listed
        .iter()
        .map(|run| {
            json!({
                "runId": run.run_id,
                "workflowName": run.workflow_name,
                "status": run.status,
                "projectDir": run.project_dir,
                "startedAt": crate::util::iso_time(run.started_at),
                "updatedAt": crate::util::iso_time(run.updated_at),
            })
        })
        .collect();
    Ok(answer(
        format!("{} workflow runs.", runs.len()),
        json!({"runs": runs}),
    ))
}

/// `workflow-events({runId, after?, limit?})`: `{status, events}`, the `workflow` status
/// document and the events document of `workflow://runs/{id}/events?after=&limit=`.
pub(crate) async fn events(resources: Resources<'_>, arguments: &Value) -> McpResult<Value> {
    const TOOL: &str = "workflow-events";
    let parsed = fields(TOOL, arguments, &["runId", "after", "limit"]).and_then(|object| {
        Ok((
            run_id(TOOL, object)?,
            number(TOOL, object, "after", 0..=u64::MAX, 0)?,
            number(
                TOOL,
                object,
                "limit",
                1..=MAX_EVENTS_LIMIT,
                DEFAULT_EVENTS_LIMIT,
            )?,
        ))
    });
    let (run_id, after, limit) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return Ok(error),
    };
    let document = match status(resources.engine, &run_id).await? {
        Ok(document) => document,
        Err(error) => return Ok(error),
    };
    let events = match resources.events_after(&run_id, after, limit).await {
        Ok(events) => events,
        // A cursor past the end, or a run deleted since its status was read.
        Err(error) if error.code != codes::INTERNAL_ERROR => {
            return Ok(tool_error(format!("{TOOL}: {}", error.message)));
        }
        Err(error) => return Err(error),
    };
    let text = format!(
        "Workflow run {run_id} is {}; {} events after {after}.",
        document["status"].as_str().unwrap_or_default(),
        events["events"].as_array().map_or(0, Vec::len)
    );
    Ok(answer(text, json!({"status": document, "events": events})))
}

/// `workflow-notifications({runId, claim?})`: the run's automatic messages with whether this
/// host has claimed each, or the claim of one (`claimed` is `true` only for the first claim
/// in the host scope; an id that is not one of the run's current messages is not recorded
/// and answers `false`).
pub(crate) async fn notifications(
    engine: &Engine,
    ledger: &ReceiptLedger,
    ctx: &RequestContext,
    arguments: &Value,
) -> McpResult<Value> {
    const TOOL: &str = "workflow-notifications";
    let parsed = fields(TOOL, arguments, &["runId", "claim"]).and_then(|object| {
        let claim = match object.get("claim") {
            None => None,
            Some(Value::String(id)) if (1..=MAX_CLAIM_CHARS).contains(&id.chars().count()) => {
                Some(id.clone())
            }
            Some(other) => {
                return Err(tool_error(format!(
                    "{TOOL}: claim must be an eventId, a string of 1 to {MAX_CLAIM_CHARS} \
                     characters, got {other}"
                )));
            }
        };
        Ok((run_id(TOOL, object)?, claim))
    });
    let (run_id, claim) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return Ok(error),
    };
    let document = match status(engine, &run_id).await? {
        Ok(document) => document,
        Err(error) => return Ok(error),
    };
    let messages = automatic_messages(&document);
    let scope = host_scope(ctx);
    if let Some(event_id) = claim {
        let current = messages.iter().any(|message| message.event_id == event_id);
        let claimed = current && ledger.claim(&scope, run_id.as_str(), &event_id);
        return Ok(answer(
            format!(
                "Notification {event_id} of workflow run {run_id}: {}.",
                if claimed { "claimed" } else { "not claimed" }
            ),
            json!({"runId": run_id, "eventId": event_id, "claimed": claimed}),
        ));
    }
    let listed: Vec<Value> = messages
        .iter()
        .map(|message| {
            json!({
                "eventId": message.event_id,
                "kind": message.kind,
                "status": message.status,
                "content": message.content,
                "claimed": ledger.is_claimed(&scope, run_id.as_str(), &message.event_id),
            })
        })
        .collect();
    Ok(answer(
        format!("{} notifications for workflow run {run_id}.", listed.len()),
        json!({"runId": run_id, "notifications": listed}),
    ))
}
