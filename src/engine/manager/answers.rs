//! Answers from the user: the backend-approval setup answer and answers to agents'
//! permission requests, here or in the process executing the run.

use serde_json::{Value, json};

use crate::engine::approval;
use crate::engine::manager::{
    Engine, EngineError, EngineResult, PermissionAnswer, Rejected, SetupAnswer,
};
use crate::engine::permissions::{PendingPermission, PermissionError};
use crate::engine::prepare;
use crate::engine::runner::PermissionOutcome;
use crate::engine::script;
use crate::model::{Lease, RunId, RunRecord, RunStatus, SetupWait};
use crate::store::{Fence, ScriptChange};
use crate::util::now_ms;

impl Engine {
    /// Answers a pending backend-approval setup.
    pub async fn setup_response(
        &self,
        run_id: &RunId,
        setup_id: &str,
        response: &Value,
    ) -> EngineResult<SetupAnswer> {
        let mut record = self.load_reconciled(run_id).await?;
        let Some(setup) = record.setup.clone() else {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} has no setup request"
            ))));
        };
        let approve = setup_approves(&setup, setup_id, response)?;
        if let Some(answered) = &setup.answer {
            if answered == response {
                return Ok(setup_answer(run_id, setup_id, record.status, approve));
            }
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "setup {setup_id} was already answered with {answered}; a different answer cannot replace it"
            ))));
        }
        if record.status != RunStatus::Pending {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is not waiting for setup"
            ))));
        }
        if let Some(owner) = self.foreign_owner(run_id).await? {
            // A predecessor still holds the lease: the answer is its to carry out.
            let body = json!({"action": "setup-response", "runId": run_id, "setupId": setup_id, "response": response});
            let answer = self.forward_live(run_id, &owner, &body).await?;
            let answer = answer.get("answer").cloned().unwrap_or(answer);
            return serde_json::from_value(answer).map_err(|error| {
                EngineError::Rejected(Rejected::Owner(format!(
                    "process {} executing run {run_id} answered setup-response with something that is not a setup answer: {error}",
                    owner.pid
                )))
            });
        }
        // An approved run starts executing: it needs room under the cap across projects (it
        // already counts in its project). Refused, the setup stays unanswered.
        let slot = if approve {
            Some(self.reserve(&record.project_dir, None)?)
        } else {
            None
        };
        let lease = self.take_free_lease(run_id).await?;
        let _starting = self.starting(run_id);
        let mut answered = setup;
        answered.answer_with(response.clone(), approve);
        record.setup = Some(answered);
        record.updated_at = now_ms();
        if !approve {
            return self.decline_setup(record, &lease, setup_id).await;
        }
        self.reveal(&mut record).await?;
        let analyzed = script::analyze(record.script.as_bytes())
            .map_err(|e| EngineError::Rejected(Rejected::Script(e.message)))?;
        record
            .routing
            .script_backends
            .extend(prepare::declared_backends(&analyzed));
        record.routing.seal();
        record.status = RunStatus::Running;
        record.limits = record
            .limits
            .with_agent_timeout(self.inner.config.agent_timeout);
        self.inner
            .store
            .update_run(&record, ScriptChange::Unchanged, Fence(&lease.token))
            .await?;
        let status = record.status;
        self.spawn_execution(record, lease, None, Vec::new());
        drop(slot);
        Ok(setup_answer(run_id, setup_id, status, true))
    }

    /// A declined (or cancelled) approval aborts the run, for good.
    async fn decline_setup(
        &self,
        mut record: RunRecord,
        lease: &Lease,
        setup_id: &str,
    ) -> EngineResult<SetupAnswer> {
        let run_id = record.run_id.clone();
        record.status = RunStatus::Aborted;
        self.record_cold(
            &record,
            "stopped",
            json!({"reason": approval::SETUP_DECLINED}),
            &lease.token,
        )
        .await?;
        self.inner
            .store
            .release_lease(&run_id, &lease.token)
            .await?;
        Ok(setup_answer(&run_id, setup_id, RunStatus::Aborted, false))
    }

    /// Answers a live permission request, here or in the process executing the run.
    pub async fn respond_permission(
        &self,
        run_id: &RunId,
        permission_id: &str,
        outcome: PermissionOutcome,
    ) -> EngineResult<PermissionAnswer> {
        self.inner.store.load_run(run_id).await?;
        if !self.is_live(run_id)
            && let Some(lease) = self.foreign_owner(run_id).await?
        {
            let body = json!({
                "action": "respond-permission",
                "runId": run_id,
                "permissionId": permission_id,
                "response": {"outcome": outcome},
            });
            self.forward_live(run_id, &lease, &body).await?;
            return Ok(permission_answer(run_id, permission_id));
        }
        self.inner
            .broker
            .answer(run_id.as_str(), permission_id, outcome.clone())
            .map_err(|e| {
                let field = match e {
                    PermissionError::Unknown(_) => "permissionId",
                    PermissionError::UnknownOption { .. } => "response",
                };
                EngineError::Rejected(Rejected::input(field, e.to_string()))
            })?;
        Ok(permission_answer(run_id, permission_id))
    }

    pub(crate) fn pending_permissions(&self, run_id: &RunId) -> Vec<PendingPermission> {
        self.inner.broker.pending(run_id.as_str())
    }
}

/// Whether `response` approves the run's backends: it must answer this setup request, and
/// an `accept` must match the requested schema.
fn setup_approves(setup: &SetupWait, setup_id: &str, response: &Value) -> EngineResult<bool> {
    if setup.request.id != setup_id {
        return Err(EngineError::Rejected(Rejected::input(
            "setupId",
            format!("setupId {setup_id} does not match the run's setup request"),
        )));
    }
    let action = response
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match action {
        "accept" => {
            let content = response.get("content").cloned().unwrap_or(Value::Null);
            crate::engine::schema::validate(&setup.request.requested_schema, &content).map_err(
                |e| {
                    EngineError::Rejected(Rejected::input(
                        "response",
                        format!("setup-response content does not match the requested schema: {e}"),
                    ))
                },
            )?;
            Ok(content
                .get("approve")
                .and_then(Value::as_bool)
                .unwrap_or(false))
        }
        "decline" | "cancel" => Ok(false),
        other => Err(EngineError::Rejected(Rejected::input(
            "response",
            format!("setup-response action must be accept, decline or cancel, got {other:?}"),
        ))),
    }
}

/// The answer to a setup response; one that did not approve says `setup_declined`.
fn setup_answer(run_id: &RunId, setup_id: &str, status: RunStatus, accepted: bool) -> SetupAnswer {
    SetupAnswer {
        action: "setup-response".into(),
        run_id: run_id.clone(),
        setup_id: setup_id.to_owned(),
        status,
        accepted,
        reason: (!accepted).then(|| approval::SETUP_DECLINED.to_owned()),
    }
}

fn permission_answer(run_id: &RunId, permission_id: &str) -> PermissionAnswer {
    PermissionAnswer {
        action: "permissions-response",
        run_id: run_id.clone(),
        permission_id: permission_id.to_owned(),
        accepted: true,
    }
}
