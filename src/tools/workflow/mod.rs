//! The `workflow` tool: one tool whose `action` field names the operation (config, run,
//! resume, setup-response, status, result, permissions-response, stop, pause), registered
//! with the MCP core's tool registry by the workflow server.
//!
//! A call is parsed (`parse`: the per-action rules of the flat schema in `schema`), then
//! carried out on the engine (`actions`), and answered in the shapes of `reply` with the
//! summaries of `text`; `run` and `resume` go through the exact-retry receipts of
//! `receipts`, `config` probes backends (`config`), and `status_cache` keeps the answers of
//! runs that are not running. Dependencies point one way: this
//! file uses the others, and none of them knows the server around the tool.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::mcp::ToolAnswer;
use crate::mcp::handler::{McpError, McpResult, RequestContext, codes};
use crate::mcp::registry::{Tool, ToolHandler};
use crate::mcp::tasks::TaskSupport;

mod actions;
mod config;
mod confirm;
mod parse;
mod receipts;
mod reply;
mod schema;
mod status_cache;
mod tasks;
mod text;

use actions::Actions;
use parse::Action;
use receipts::{ReceiptBook, Uncached, receipt_key};

pub(crate) use config::{ConfigInput, config};
pub use receipts::IDEMPOTENCY_KEY_META;
pub use reply::{OBSERVATION_CEILING, PREPARATION_CEILING};
pub use schema::{ACTIONS, TOOL_NAME};
pub(super) use tasks::WorkflowTasks;

/// The tool's handler: validation, exact retries and the engine work.
pub(super) struct WorkflowTool {
    actions: Actions,
    /// The project a request without `projectDir` means (`--in-process`).
    default_project: Option<PathBuf>,
    receipts: ReceiptBook,
}

impl WorkflowTool {
    pub(super) fn new(
        engine: Engine,
        default_project: Option<PathBuf>,
        tracker: TaskTracker,
        list_changes: mpsc::UnboundedSender<()>,
    ) -> WorkflowTool {
        WorkflowTool {
            actions: Actions {
                engine,
                tracker,
                list_changes,
                status_cache: status_cache::StatusCache::default(),
                config_cache: config::ConfigCache::default(),
            },
            default_project,
            receipts: ReceiptBook::default(),
        }
    }

    /// The registration: listed to every client, visible to model and app; `run` and
    /// `resume` may run as tasks (`tasks.rs`).
    pub(super) fn registration(tool: Arc<WorkflowTool>) -> Tool {
        Tool::new(schema::definition(), tool).with_task_support(TaskSupport::Optional)
    }

    /// Validates and carries out one call without the exact-retry receipts: the task glue's
    /// status reads and the answers it turns into `resume`, `setup-response` and
    /// `permissions-response` calls, checked exactly as a client's would be.
    pub(super) async fn perform(&self, ctx: &RequestContext, arguments: Value) -> McpResult<Value> {
        match parse::parse(&arguments, self.default_project.as_deref()) {
            Ok(action) => self.actions.dispatch(ctx, action, None).await,
            Err(error) => Ok(reply::invalid_input(error)),
        }
    }

    /// A legacy session ended: its request ids will not be retried.
    pub(super) fn session_closed(&self, session_id: &str) {
        self.receipts.forget_session(session_id);
    }
}

/// The `status` action's `structuredContent` for `run_id` (the status document with its
/// `next`), or, as `Err`, the tool error the action answers (an unknown run): the one status
/// builder the run monitor's tools share with this tool. No summary text is built, so a
/// polling panel pays only for the document.
pub(super) async fn status_document(
    engine: &Engine,
    run_id: &crate::model::RunId,
) -> McpResult<Result<Value, Value>> {
    match engine
        .status(run_id, &crate::engine::StatusQuery::default())
        .await
    {
        Ok(status) => Ok(Ok(reply::status_document(serde_json::json!(status)))),
        Err(error) => reply::engine_failure(error).map(Err),
    }
}

#[async_trait]
impl ToolHandler for WorkflowTool {
    /// `status` may answer with a kept answer's text; every other action with a value.
    async fn call(
        &self,
        ctx: &RequestContext,
        _name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let action = match parse::parse(arguments, self.default_project.as_deref()) {
            Ok(action) => action,
            // Bad input is the model's to correct: a tool execution error, not a protocol one.
            Err(error) => return Ok(reply::invalid_input(error).into()),
        };
        if let Action::Status { run_id, query } = &action {
            return self.actions.status_answer(run_id, query).await;
        }
        // Boxed: run and resume hold far more state than a status does, and this future
        // (boxed again by `async_trait`) is as large as its largest branch, copied whole into
        // its box on every call, which a status answer, the most frequent call, should not pay.
        Box::pin(self.answer(ctx, action, arguments))
            .await
            .map(ToolAnswer::Value)
    }
}

impl WorkflowTool {
    /// Every action but `status`: run and resume through their receipts.
    async fn answer(
        &self,
        ctx: &RequestContext,
        action: Action,
        arguments: &Value,
    ) -> McpResult<Value> {
        if !action.admits() {
            return self.actions.dispatch(ctx, action, None).await;
        }
        // Run and resume: an exact retry answers from the receipt instead of admitting again.
        let is_resume = matches!(action, Action::Resume(_));
        let key = match receipt_key(ctx, arguments, is_resume) {
            Ok(Some(key)) => key,
            // A stateless run without an idempotency key is always a new run.
            Ok(None) => return self.actions.dispatch(ctx, action, None).await,
            Err(message) => return Ok(reply::tool_error(message)),
        };
        let check_generation = ctx.session_id.is_none() && is_resume;
        let receipt = match self
            .receipts
            .receipt(&self.actions.engine, &key, check_generation)
            .await
        {
            Ok(receipt) => receipt,
            Err(message) => return Ok(reply::tool_error(message)),
        };
        let operation_id = format!("mcp-{}", &crate::util::sha256_hex(key.id.as_bytes())[..32]);
        // The first request answers with its value; the receipt keeps the text, a third of
        // the value's heap, and a retry reads it back.
        let mut first = None;
        let answer = receipt
            .answer
            .get_or_try_init(|| async {
                let value = self
                    .actions
                    .dispatch(ctx, action, Some(operation_id))
                    .await
                    .map_err(Uncached::Error)?;
                // A request cancelled before admission has no answer worth repeating; nor,
                // without a session, has a refusal: the retry tries again.
                let stateless = ctx.session_id.is_none();
                if (ctx.cancel.is_cancelled() || stateless) && value["isError"] == true {
                    return Err(Uncached::Answer(value));
                }
                let text = value.to_string().into_boxed_str();
                first = Some(value);
                Ok(text)
            })
            .await;
        match answer {
            Ok(text) => match first {
                Some(value) => Ok(value),
                None => serde_json::from_str(text).map_err(|error| {
                    McpError::new(
                        codes::INTERNAL_ERROR,
                        format!("the kept answer of this request could not be read: {error}"),
                    )
                }),
            },
            Err(Uncached::Error(error)) => Err(error),
            Err(Uncached::Answer(value)) => Ok(value),
        }
    }
}
