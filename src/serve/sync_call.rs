//! The synchronous face of a served workflow: `tools/call {name: <workflow>}` runs it to the
//! end inside the request and answers with its result.
//!
//! Each call is a run of its own, made under the [`SYNC_CALLER`] key (never handed to anyone)
//! and deleted once answered, so nothing carries over between calls. Progress goes to the
//! request's progress token, one step per settled agent call; a cancelled request stops the
//! run. A checkpoint or setup wait cannot be answered inside a `tools/call`: the run is
//! stopped and deleted and the tool error says to use `mhl_run_start` (docs/serve.md).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::events::RunNotice;
use crate::engine::manager::exact_result;
use crate::engine::{RunRequest, ScriptInput, StatusQuery};
use crate::mcp::handler::{McpResult, RequestContext};
use crate::mcp::registry::ToolHandler;
use crate::model::{PauseReason, RunId, RunRecord, RunStatus};

use super::owners::SYNC_CALLER;
use super::runs::{RunApi, check_size};
use super::tools::{text_result, tool_error};

/// Answers `tools/call` for every workflow of the folder.
pub struct SyncCalls {
    pub api: Arc<RunApi>,
}

#[async_trait]
impl ToolHandler for SyncCalls {
    async fn call(&self, ctx: &RequestContext, name: &str, arguments: Value) -> McpResult<Value> {
        let Some(workflow) = self.api.folder.get(name) else {
            return Ok(tool_error(format!("no workflow is named {name:?}")));
        };
        if let Err(error) = check_size(&arguments) {
            return Ok(tool_error(error.to_string()));
        }
        let engine = &self.api.engine;
        ctx.progress(0.0, None, Some("preparing"));
        let request = RunRequest {
            project_dir: self.api.folder.root.clone(),
            script: ScriptInput::Path(workflow.path.clone()),
            args: arguments,
            limits: Default::default(),
            caller: Some(SYNC_CALLER.to_owned()),
        };
        // Subscribed before admission, so no settled call of a quick run is missed.
        let notices = engine.subscribe();
        let admission = match engine.start_cancellable(request, &ctx.cancel).await {
            Ok(admission) => admission,
            Err(error) => {
                return Ok(tool_error(self.api.folder.scrub(&error.to_string())));
            }
        };
        let run_id = admission.run_id;
        let settled = self.follow(ctx, &run_id, notices).await;
        let answer = match settled {
            Some(record) => answer_of(name, &record),
            None => tool_error("the run's record could not be read".to_owned()),
        };
        // Throwaway: the run goes with its answer.
        let _ = engine.delete(&run_id).await;
        Ok(answer)
    }
}

impl SyncCalls {
    /// Waits for the run to settle, reporting progress and stopping it when the request is
    /// cancelled or it waits for an answer. Returns its final record.
    async fn follow(
        &self,
        ctx: &RequestContext,
        run_id: &RunId,
        mut notices: tokio::sync::broadcast::Receiver<RunNotice>,
    ) -> Option<RunRecord> {
        let engine = &self.api.engine;
        let mut settled_calls = 0u64;
        let wait = engine.wait(run_id);
        tokio::pin!(wait);
        loop {
            // Biased, `wait` last: every event is broadcast before the run ends, so the
            // notices still queued then are reported before the loop stops.
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => {
                    let _ = engine.stop(run_id, None, &StatusQuery::default()).await;
                    engine.wait(run_id).await;
                    break;
                }
                notice = notices.recv() => match notice {
                    Ok(RunNotice::Event { run_id: of, record }) if &of == run_id => {
                        match record.event["type"].as_str() {
                            Some("agentEnd") => {
                                settled_calls += 1;
                                ctx.progress(settled_calls as f64, None, Some("agent call settled"));
                            }
                            Some("phase") => {
                                let title = record.event["title"].as_str().unwrap_or("next phase");
                                ctx.progress(settled_calls as f64, None, Some(title));
                            }
                            _ => {}
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        (&mut wait).await;
                        break;
                    }
                },
                _ = &mut wait => break,
            }
        }
        engine.load_reconciled(run_id).await.ok()
    }
}

/// The tool result of a settled synchronous run.
fn answer_of(name: &str, record: &RunRecord) -> Value {
    match record.status {
        RunStatus::Completed => {
            let text = exact_result(record).unwrap_or_else(|_| "null".to_owned());
            let result = record.result.clone().unwrap_or(Value::Null);
            let mut answer = text_result(text);
            answer["structuredContent"] = json!({"result": result});
            answer
        }
        RunStatus::Paused if record.pause_reason == Some(PauseReason::CheckpointRequired) => {
            let prompt = record
                .checkpoint_context
                .as_ref()
                .and_then(|context| context["prompt"].as_str())
                .unwrap_or("a checkpoint");
            tool_error(format!(
                "{name} stopped at a checkpoint ({prompt}) that a synchronous tools/call cannot \
                 answer; start it with mhl_run_start and answer through mhl_run_resume"
            ))
        }
        RunStatus::Paused | RunStatus::Pending => tool_error(format!(
            "{name} is waiting ({}) and a synchronous tools/call cannot wait for it; start it \
             with mhl_run_start to follow it",
            record
                .pause_reason
                .map_or("setup", |reason| reason.as_str())
        )),
        RunStatus::Failed => tool_error(format!(
            "{name} failed: {}",
            record.error_message.as_deref().unwrap_or("no message")
        )),
        RunStatus::Aborted | RunStatus::Running => tool_error(format!("{name} was cancelled")),
    }
}
