//! Carrying out a validated action on the engine: one method per action, each turning the
//! engine's answer into the tool result `docs/api.md` pins (summary text, structured
//! document, resource links, the `next` call).
//!
//! This is the only file of the tool that calls the engine; preparation and resume run under
//! their ceilings here, observations under
//! [`OBSERVATION_CEILING`](super::reply::OBSERVATION_CEILING).

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::engine::manager::Rejected;
use crate::engine::runner::PermissionOutcome;
use crate::engine::{Engine, EngineError, ResumeRequest, RunRequest, StatusQuery};
use crate::mcp::ToolAnswer;
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::model::{RunId, RunStatus};
use crate::tools::resources;

use super::config::{self, ConfigInput};
use super::parse::Action;
use super::reply::{
    PREPARATION_CEILING, acknowledgement, engine_failure, observe, status_result, structured,
    tool_error,
};
use super::status_cache::{AnswerVersion, StatusCache};
use super::text;

/// What the actions need of the server around them.
pub(super) struct Actions {
    pub(super) engine: Engine,
    /// Takes a resume that outlives its request's ceiling, so it still finishes (and the
    /// server's shutdown waits for it).
    pub(super) tracker: TaskTracker,
    /// Asks the notification bridge for one coalesced `resources/list_changed` after an
    /// admission.
    pub(super) list_changes: mpsc::UnboundedSender<()>,
    /// Finished `status` answers of runs that are not running, checked by run version.
    pub(super) status_cache: StatusCache,
    /// Recent `config` answers, so a host that asks twice does not start every backend twice.
    pub(super) config_cache: config::ConfigCache,
}

impl Actions {
    /// Carries out a validated action. `operation_id` is the exact-retry key of run/resume.
    pub(super) async fn dispatch(
        &self,
        ctx: &RequestContext,
        action: Action,
        operation_id: Option<String>,
    ) -> McpResult<Value> {
        match action {
            Action::Config(input) => self.config(input).await,
            Action::Run(request) => self.run(ctx, request).await,
            Action::Resume(mut request) => {
                request.operation_id = operation_id;
                self.resume(request).await
            }
            Action::SetupResponse {
                run_id,
                setup_id,
                response,
            } => self.setup_response(run_id, setup_id, response).await,
            Action::Status { run_id, query } => self
                .status_answer(&run_id, &query)
                .await
                .map(ToolAnswer::into_value),
            Action::Result {
                run_id,
                offset,
                max_bytes,
            } => observe(self.result(run_id, offset, max_bytes)).await,
            Action::PermissionsResponse {
                run_id,
                permission_id,
                outcome,
            } => {
                self.permissions_response(run_id, permission_id, outcome)
                    .await
            }
            Action::Stop {
                run_id,
                call_index,
                force_owner,
                query,
            } => self.stop(run_id, call_index, force_owner, query).await,
            Action::Pause { run_id, query } => match self.engine.pause(&run_id, &query).await {
                Ok(status) => {
                    let status = json!(status);
                    let headline = text::pause_headline(&status);
                    Ok(status_result(Some(headline), status))
                }
                Err(error) => engine_failure(error),
            },
        }
    }

    /// `status` within the observation ceiling, as the tool answers it: a kept answer comes
    /// with its text.
    pub(super) async fn status_answer(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
    ) -> McpResult<ToolAnswer> {
        observe(self.status(run_id, query)).await
    }

    /// `status`: the kept answer while the run's version stands (`status_cache`), else a
    /// new one, kept when nothing in it can change without a new version.
    async fn status(&self, run_id: &RunId, query: &StatusQuery) -> McpResult<ToolAnswer> {
        // Read before the answer is built: a write in between gives the next call a newer
        // version, so an answer kept under this one is never served after it.
        let version = self.cacheable_version(run_id).await;
        if let Some(version) = version
            && let Some(answer) = self.status_cache.get(run_id, query, version.key)
        {
            return Ok(ToolAnswer::Prepared(answer));
        }
        // Boxed: building a document is the rare path of a polled run, and its future is
        // many times the size of the rest of this one, which every kept answer copies whole.
        match Box::pin(self.engine.status(run_id, query)).await {
            Ok(status) => {
                let keep = version.filter(|version| {
                    status.status == version.status
                        && status.pending_permissions.is_empty()
                        && status.remote_pending_permissions.is_empty()
                        && (version.key.live.is_some() || status.latest_activity.is_none())
                        // A live run's view must not have stepped while the answer was built.
                        && version.key.live.is_none_or(|revision| {
                            self.engine.live_revision(run_id) == Some(revision)
                        })
                });
                let answer = status_result(None, json!(status));
                if let Some(version) = keep
                    && let Some(kept) = self.status_cache.put(run_id, query, version.key, &answer)
                {
                    return Ok(ToolAnswer::Prepared(kept));
                }
                Ok(ToolAnswer::Value(answer))
            }
            Err(error) => {
                self.status_cache.forget(run_id);
                engine_failure(error).map(ToolAnswer::Value)
            }
        }
    }

    /// The version a status answer built now may be kept under: for a run stored as not
    /// running, its stored version; for a run this process executes, that and its live
    /// view's revision between two steps of its driver (everything the document shows of
    /// it changes only in such a step, or reaches it as a permission request, which
    /// `live_revision` rules out). A run another process executes is never kept.
    async fn cacheable_version(&self, run_id: &RunId) -> Option<CacheableVersion> {
        let live = if self.engine.is_live(run_id) {
            Some(self.engine.live_revision(run_id)?)
        } else {
            None
        };
        match self.engine.runs().run_version(run_id).await {
            Ok(Some(version)) if live.is_some() || version.status != RunStatus::Running => {
                Some(CacheableVersion {
                    status: version.status,
                    key: AnswerVersion {
                        stored: version.version,
                        live,
                    },
                })
            }
            _ => None,
        }
    }

    async fn config(&self, input: ConfigInput) -> McpResult<Value> {
        let project_dir = input.project_dir.clone();
        let key = input.cache_key();
        if let Some(answer) = self.config_cache.get(&key) {
            return Ok(answer);
        }
        let mut answer = observe(config::config(&self.engine, input)).await?;
        if let Some(document) = answer.get_mut("structuredContent") {
            document["next"] = json!({
                "action": "run",
                "projectDir": project_dir,
                "script": "<the workflow script text>",
            });
        }
        self.config_cache.put(key, &answer);
        Ok(answer)
    }

    /// Prepares and admits a run inside the request: progress when asked for, abandoned on
    /// cancellation or after [`PREPARATION_CEILING`] as long as it is not admitted yet.
    async fn run(&self, ctx: &RequestContext, mut request: RunRequest) -> McpResult<Value> {
        // A caller's `traceparent` puts the run into the caller's trace.
        request.trace = crate::telemetry::TraceContext::from_meta(&ctx.meta);
        let retry = request.clone();
        ctx.progress(
            0.0,
            Some(1.0),
            Some("preparing: static checks, dry run, routing probes"),
        );
        let cancel = ctx.cancel.child_token();
        let preparation = self.engine.start_cancellable(request, &cancel);
        tokio::pin!(preparation);
        let mut timed_out = false;
        // Never drop the preparation once started: past the ceiling we cancel it and keep
        // awaiting, so an admission already under way completes and is reported.
        let result = tokio::select! {
            result = &mut preparation => result,
            _ = tokio::time::sleep(PREPARATION_CEILING) => {
                timed_out = true;
                cancel.cancel();
                preparation.await
            }
        };
        match result {
            // No "admitted" progress here: sent this close to the response it can arrive
            // after it (a client drops a request's progress handler with its response, and
            // the TypeScript SDK then reports an unknown progress token), so the response
            // alone says the run was admitted.
            Ok(admission) => {
                let _ = self.list_changes.send(());
                Ok(acknowledgement("run", &admission))
            }
            Err(EngineError::Rejected(Rejected::NeedsConfirmation { message, agents }))
                if !timed_out && !retry.limits.confirmed =>
            {
                if super::confirm::ask(ctx, &message, agents).await == Some(true) {
                    let mut confirmed = retry;
                    confirmed.limits.confirmed = true;
                    return Box::pin(self.run(ctx, confirmed)).await;
                }
                Ok(tool_error(message))
            }
            Err(EngineError::Rejected(_)) if timed_out => Ok(tool_error(format!(
                "preparation took longer than {} s and was abandoned; nothing was stored",
                PREPARATION_CEILING.as_secs()
            ))),
            Err(error) => engine_failure(error),
        }
    }

    /// Resumes under the engine's receipt. The engine's resume cannot be abandoned halfway,
    /// so past the ceiling it continues on the server's tracker and the caller is told to
    /// retry: the retry (same request id) finds the engine's durable receipt.
    async fn resume(&self, request: ResumeRequest) -> McpResult<Value> {
        let engine = self.engine.clone();
        let mut task = self
            .tracker
            .spawn(async move { engine.resume(request).await });
        let joined = tokio::select! {
            joined = &mut task => joined,
            _ = tokio::time::sleep(PREPARATION_CEILING) => {
                return Ok(tool_error(format!(
                    "resume is still validating the revised script after {} s; it continues in the background. Check status, or repeat this request to get its acknowledgement",
                    PREPARATION_CEILING.as_secs()
                )));
            }
        };
        match joined {
            Ok(Ok(admission)) => Ok(acknowledgement("resume", &admission)),
            Ok(Err(error)) => engine_failure(error),
            Err(error) => Err(McpError::internal(format!("resume task failed: {error}"))),
        }
    }

    async fn setup_response(
        &self,
        run_id: RunId,
        setup_id: String,
        response: Value,
    ) -> McpResult<Value> {
        let mut answer = match self
            .engine
            .setup_response(&run_id, &setup_id, &response)
            .await
        {
            Ok(answer) => json!(answer),
            Err(error) => return engine_failure(error),
        };
        let approved = answer["accepted"] == true;
        let summary = format!(
            "Setup {setup_id} of run {run_id} answered: {}; the run is {}.{}",
            if approved { "approved" } else { "not approved" },
            answer["status"].as_str().unwrap_or("unknown"),
            if approved {
                ""
            } else {
                " A declined approval is final: the run cannot be resumed."
            }
        );
        answer["next"] = if approved {
            json!({"action": "status", "runId": run_id})
        } else {
            Value::Null
        };
        Ok(structured(summary, answer, Vec::new()))
    }

    async fn result(&self, run_id: RunId, offset: usize, max_bytes: usize) -> McpResult<Value> {
        match self.engine.result_page(&run_id, offset, max_bytes).await {
            Ok(page) => {
                let page = json!(page);
                let links = vec![
                    resources::result_link(&run_id),
                    resources::events_link(&run_id),
                ];
                let next = text::next_for_result(&page, max_bytes);
                let page = text::page_with_next(page, next);
                // The text is the page itself: a host that shows only the text learns the same.
                Ok(structured(page.to_string(), page, links))
            }
            Err(error) => engine_failure(error),
        }
    }

    async fn permissions_response(
        &self,
        run_id: RunId,
        permission_id: String,
        outcome: PermissionOutcome,
    ) -> McpResult<Value> {
        let mut answer = match self
            .engine
            .respond_permission(&run_id, &permission_id, outcome)
            .await
        {
            Ok(answer) => json!(answer),
            Err(error) => return engine_failure(error),
        };
        answer["next"] = json!({"action": "status", "runId": run_id});
        let mut links = vec![resources::events_link(&run_id)];
        if let Ok(record) = self.engine.runs().load_run(&run_id).await {
            links.insert(0, resources::script_link(&run_id, &record.script_file));
        }
        Ok(structured(
            format!("Permission {permission_id} of run {run_id} answered."),
            answer,
            links,
        ))
    }

    async fn stop(
        &self,
        run_id: RunId,
        call_index: Option<u32>,
        force_owner: bool,
        query: StatusQuery,
    ) -> McpResult<Value> {
        match self
            .engine
            .stop_with(&run_id, call_index, force_owner, &query)
            .await
        {
            Ok(status) => {
                let status = json!(status);
                let headline = text::stop_headline(&status, call_index);
                Ok(status_result(Some(headline), status))
            }
            Err(error) => engine_failure(error),
        }
    }
}

/// What [`Actions::cacheable_version`] reads: the stored status the answer must
/// show, and the key it is kept under.
#[derive(Clone, Copy)]
struct CacheableVersion {
    status: RunStatus,
    key: AnswerVersion,
}
