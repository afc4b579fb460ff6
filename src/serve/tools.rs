//! The two faces of the run API: the `mhl_run_*` tools (a `tools/call` envelope: text,
//! `structuredContent`, `isError`) and the `run/*` JSON-RPC methods (the bare status object,
//! or a JSON-RPC error). Both call the same [`RunApi`] method with the same parameters, so
//! `mhl_run_status {runId}` and `run/status {runId}` cannot disagree.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::mcp::ToolAnswer;
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::mcp::registry::ToolHandler;

use super::owners::OwnerKey;
use super::runs::{RunApi, RunError};

/// One method of the run API, by its JSON-RPC name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunMethod {
    Start,
    Status,
    Resume,
    Cancel,
    List,
    Logs,
}

impl RunMethod {
    pub(crate) const ALL: [RunMethod; 6] = [
        RunMethod::Start,
        RunMethod::Status,
        RunMethod::Resume,
        RunMethod::Cancel,
        RunMethod::List,
        RunMethod::Logs,
    ];

    /// `run/start`, ...
    pub(crate) fn method(self) -> &'static str {
        match self {
            RunMethod::Start => "run/start",
            RunMethod::Status => "run/status",
            RunMethod::Resume => "run/resume",
            RunMethod::Cancel => "run/cancel",
            RunMethod::List => "run/list",
            RunMethod::Logs => "run/logs",
        }
    }

    /// `mhl_run_start`, ...
    pub(crate) fn tool(self) -> &'static str {
        match self {
            RunMethod::Start => "mhl_run_start",
            RunMethod::Status => "mhl_run_status",
            RunMethod::Resume => "mhl_run_resume",
            RunMethod::Cancel => "mhl_run_cancel",
            RunMethod::List => "mhl_run_list",
            RunMethod::Logs => "mhl_run_logs",
        }
    }

    pub(crate) fn from_method(method: &str) -> Option<RunMethod> {
        RunMethod::ALL.into_iter().find(|m| m.method() == method)
    }

    pub(crate) fn from_tool(tool: &str) -> Option<RunMethod> {
        RunMethod::ALL.into_iter().find(|m| m.tool() == tool)
    }

    /// The tool's `tools/list` entry.
    pub(crate) fn definition(self) -> Value {
        let run_id = json!({"type": "string", "description": "The runId mhl_run_start returned."});
        let (description, properties, required) = match self {
            RunMethod::Start => (
                "Start a workflow of this server in the background and return its runId at once. \
                 Poll mhl_run_status; the result also links the run's logs and result.",
                json!({
                    "name": {"type": "string", "description": "The workflow's tool name."},
                    "arguments": {"type": "object", "description": "The workflow's input (at most 256 KiB of JSON)."},
                }),
                json!(["name"]),
            ),
            RunMethod::Status => (
                "The state of a run you started: state, step, reached, result or error.",
                json!({"runId": run_id}),
                json!(["runId"]),
            ),
            RunMethod::Resume => (
                "Continue a run that stopped, failed or waits at a checkpoint, under the same \
                 runId. Answer checkpoints with arguments.checkpointReplies {\"<callIndex>\": answer}.",
                json!({
                    "runId": run_id,
                    "arguments": {
                        "type": "object",
                        "properties": {"checkpointReplies": {"type": "object"}},
                        "additionalProperties": false,
                    },
                }),
                json!(["runId"]),
            ),
            RunMethod::Cancel => (
                "Stop a run you started; it stays resumable.",
                json!({"runId": run_id}),
                json!(["runId"]),
            ),
            RunMethod::List => ("The runs you started.", json!({}), json!([])),
            RunMethod::Logs => (
                "The latest log lines of a run you started.",
                json!({"runId": run_id}),
                json!(["runId"]),
            ),
        };
        json!({
            "name": self.tool(),
            "description": description,
            "inputSchema": {"type": "object", "properties": properties, "required": required},
        })
    }
}

/// Carries out `method` for the caller of `ctx`, answering the bare document.
pub(crate) async fn answer(
    api: &RunApi,
    ctx: &RequestContext,
    method: RunMethod,
    params: &Value,
) -> Result<Value, RunError> {
    let started = std::time::Instant::now();
    let answered = answer_unmeasured(api, ctx, method, params).await;
    crate::metrics::global().request_took(method.method(), started.elapsed());
    answered
}

async fn answer_unmeasured(
    api: &RunApi,
    ctx: &RequestContext,
    method: RunMethod,
    params: &Value,
) -> Result<Value, RunError> {
    let owner = OwnerKey::of(ctx);
    let view = match method {
        RunMethod::Start => api.start(&owner, params).await?,
        RunMethod::Status => api.status(&owner, params).await?,
        RunMethod::Resume => api.resume(&owner, params).await?,
        RunMethod::Cancel => api.cancel(&owner, params).await?,
        RunMethod::List => return api.list(&owner).await,
        RunMethod::Logs => return api.logs(&owner, params).await,
    };
    Ok(serde_json::to_value(view).unwrap_or(Value::Null))
}

/// The `run/*` method's JSON-RPC answer.
pub(crate) async fn method_answer(
    api: &RunApi,
    ctx: &RequestContext,
    method: RunMethod,
    params: &Value,
) -> McpResult<Value> {
    answer(api, ctx, method, params)
        .await
        .map_err(|error| match error {
            RunError::Unknown | RunError::Invalid(_) => McpError::invalid_params(error.to_string()),
            RunError::Refused(message) => McpError::new(-32000, message),
        })
}

/// Answers `tools/call` for the `mhl_run_*` tools.
pub(crate) struct RunTools {
    pub api: Arc<RunApi>,
}

#[async_trait]
impl ToolHandler for RunTools {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let Some(method) = RunMethod::from_tool(name) else {
            return Ok(tool_error(format!("unknown tool {name}")).into());
        };
        match answer(&self.api, ctx, method, arguments).await {
            Ok(document) => {
                let mut result = text_result(document.to_string());
                if method == RunMethod::Start
                    && self.api.run_links
                    && let Some(run_id) = document["runId"].as_str()
                {
                    result["content"]
                        .as_array_mut()
                        .expect("content is an array")
                        .extend(super::resources::run_links(run_id));
                }
                result["structuredContent"] = document;
                Ok(result.into())
            }
            Err(error) => Ok(tool_error(error.to_string()).into()),
        }
    }
}

/// A tool result of one text item.
pub(crate) fn text_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A tool error (`isError: true`) of one text item.
pub(crate) fn tool_error(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}
