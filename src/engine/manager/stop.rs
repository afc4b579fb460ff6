//! Stopping a whole run (here, in its owner's process, or cold when nobody executes it) and
//! pausing one.

use serde_json::{Value, json};

use crate::engine::approval;
use crate::engine::driver::Control;
use crate::engine::manager::{
    Engine, EngineError, EngineResult, PAUSE_WAIT, STOP_WAIT, Unforwarded, lease_owner,
};
use crate::engine::status::StatusQuery;
use crate::model::{Lease, PauseReason, RunId, RunRecord, RunStatus};
use crate::store::{ControlIntent, IntentAction, StoreError};
use crate::util::now_ms;

impl Engine {
    /// Stops a whole run (`call_index: None`) or cancels one live agent call.
    pub async fn stop(
        &self,
        run_id: &RunId,
        call_index: Option<u32>,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        self.stop_with(run_id, call_index, false, query).await
    }

    /// [`Engine::stop`] that may also end a superseded daemon still holding the run's lease
    /// (`force_owner`, whole-run stops only; daemon.md 1.10 step 9).
    ///
    /// A run executing in another live process is stopped there: the stop is recorded as a
    /// durable intent and forwarded to the lease holder. When the holder cannot be reached
    /// the answer carries `control: {state:"pending", operationId, requestedAt, owner}` and
    /// the intent stays for the owner to carry out; a retry reuses its operation id.
    pub async fn stop_with(
        &self,
        run_id: &RunId,
        call_index: Option<u32>,
        force_owner: bool,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        if force_owner && call_index.is_some() {
            return Err(EngineError::Rejected(
                "forceOwner cannot be combined with callIndex: callIndex cancels one live call, forceOwner stops the whole run".into(),
            ));
        }
        let record = self.load_reconciled(run_id).await?;
        if let Some(index) = call_index {
            return self.cancel_agent(run_id, index, query).await;
        }
        if record.status.is_terminal() {
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(false);
            status["alreadyTerminal"] = Value::Bool(true);
            return Ok(status);
        }
        if self.send_control(run_id, Control::Stop) {
            let settled = tokio::time::timeout(STOP_WAIT, self.wait(run_id))
                .await
                .is_ok();
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(settled);
            if !settled {
                status["control"] =
                    json!({"state": "pending", "operationId": uuid::Uuid::new_v4().to_string()});
            }
            return Ok(status);
        }
        if record.status == RunStatus::Running
            && let Some(lease) = self.foreign_owner(run_id).await?
        {
            return self.stop_remote(&record, &lease, force_owner, query).await;
        }
        self.stop_cold(run_id, query).await
    }

    /// A whole-run stop of a run another live process holds (daemon.md 1.10 steps 2-9).
    pub(super) async fn stop_remote(
        &self,
        record: &RunRecord,
        lease: &Lease,
        force_owner: bool,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let run_id = &record.run_id;
        let intent = self
            .inner
            .store
            .put_intent(&ControlIntent::new(run_id, IntentAction::Stop, None))
            .await
            .map_err(|error| match error {
                StoreError::UnknownRun(_) => EngineError::from(error),
                error => EngineError::Rejected(format!(
                    "cannot record the stop request for run {run_id}: {error}"
                )),
            })?;
        if force_owner {
            self.end_superseded_owner(lease).await?;
            return self.stop_cold_acknowledged(run_id, &intent, query).await;
        }
        let body = json!({"action": "stop", "runId": run_id});
        let forwarded = self.forward(lease, &intent.op, &body).await;
        let owner = match &forwarded {
            Err(Unforwarded::NoLiveOwner) => {
                return self.stop_cold_acknowledged(run_id, &intent, query).await;
            }
            Err(Unforwarded::Unreachable { owner, reason }) => {
                return self
                    .stop_pending(run_id, &intent, owner.clone(), reason, query)
                    .await;
            }
            Err(Unforwarded::Refused { code, message }) if code == "UNKNOWN_RUN" => {
                return Err(EngineError::Rejected(format!(
                    "the owner of run {run_id} (pid {}) does not know it: {message}",
                    lease.pid
                )));
            }
            Err(Unforwarded::Refused { .. }) => lease_owner(lease),
            Ok(answer) => answer
                .get("owner")
                .cloned()
                .unwrap_or_else(|| lease_owner(lease)),
        };
        // Step 6: whatever the owner said, the store decides.
        let current = self.load_reconciled(run_id).await?;
        if current.status.is_terminal() {
            // The owner's word on whether it was already over, else the stored status's.
            let already = forwarded
                .as_ref()
                .ok()
                .and_then(|a| a.get("alreadyTerminal"))
                .and_then(Value::as_bool)
                .unwrap_or(current.status != RunStatus::Aborted);
            return self.stop_settled(&intent, owner, already, query).await;
        }
        match forwarded {
            Ok(_) => {
                self.stop_pending(
                    run_id,
                    &intent,
                    owner,
                    "the owner is still stopping the run",
                    query,
                )
                .await
            }
            Err(Unforwarded::Refused { message, .. }) => {
                if current.status != RunStatus::Running {
                    // The owner let go between our look and its answer: stop it here.
                    return self.stop_cold_acknowledged(run_id, &intent, query).await;
                }
                Err(EngineError::Rejected(format!(
                    "the owner of run {run_id} (pid {}) refused the stop: {message}",
                    lease.pid
                )))
            }
            Err(_) => unreachable!("handled above"),
        }
    }

    /// `forceOwner`: ends the superseded daemon that still holds `lease`.
    async fn end_superseded_owner(&self, lease: &Lease) -> EngineResult<()> {
        let route = self.inner.route.get().ok_or_else(|| {
            EngineError::Rejected(
                "forceOwner: this process cannot verify or end other owners".into(),
            )
        })?;
        route
            .terminate_superseded_owner(lease)
            .await
            .map_err(|reason| EngineError::Rejected(format!("forceOwner refused: {reason}")))
    }

    /// The run settled in its owner's process: the intent is acknowledged as settled.
    async fn stop_settled(
        &self,
        intent: &ControlIntent,
        owner: Value,
        already: bool,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let run_id = &intent.run_id;
        let settled = json!({
            "state": "settled",
            "operationId": intent.op,
            "stopped": !already,
            "alreadyTerminal": already,
            "owner": owner,
        });
        self.acknowledge(run_id, &intent.op, settled.clone()).await;
        let mut status = self.status(run_id, query).await?;
        status["stopped"] = Value::Bool(!already);
        status["alreadyTerminal"] = Value::Bool(already);
        status["control"] = settled;
        Ok(status)
    }

    pub(super) async fn stop_pending(
        &self,
        run_id: &RunId,
        intent: &ControlIntent,
        owner: Value,
        reason: &str,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let mut status = self.status(run_id, query).await?;
        status["stopped"] = Value::Bool(false);
        status["control"] = json!({
            "state": "pending",
            "operationId": intent.op,
            "requestedAt": crate::util::iso_time(intent.requested_at),
            "owner": owner,
            "reason": reason,
        });
        Ok(status)
    }

    /// Step 7: nobody executes the run any more; stop it here and acknowledge the intent.
    pub(super) async fn stop_cold_acknowledged(
        &self,
        run_id: &RunId,
        intent: &ControlIntent,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let mut status = self.stop_cold(run_id, query).await?;
        let already = status["alreadyTerminal"] == true;
        let settled = json!({
            "state": "settled",
            "operationId": intent.op,
            "stopped": !already,
            "alreadyTerminal": already,
            "cold": true,
        });
        self.acknowledge(run_id, &intent.op, settled.clone()).await;
        status["control"] = settled;
        Ok(status)
    }

    /// Stops a run no process executes: a cold stop under a fresh lease.
    pub(super) async fn stop_cold(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
    ) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        if record.status.is_terminal() {
            let mut status = self.status(run_id, query).await?;
            status["stopped"] = Value::Bool(false);
            status["alreadyTerminal"] = Value::Bool(true);
            return Ok(status);
        }
        // Never take a lease a live process holds: it is executing the run, or changing it.
        if let Some(holder) = self.foreign_owner(run_id).await? {
            return Err(EngineError::Rejected(format!(
                "run {run_id} is {} in process {}; stop it again once that process lets go",
                if record.status == RunStatus::Running {
                    "executing"
                } else {
                    "being changed"
                },
                holder.pid
            )));
        }
        let lease = self.take_free_lease(run_id).await?;
        let mut record = self.inner.store.load_run(run_id).await?;
        // Stopping a run that waits for its backend approval cancels the approval, and a
        // cancelled approval is final like a declined one.
        let cancelled_setup =
            record.status == RunStatus::Pending && approval::cancel_pending_setup(&mut record);
        record.status = RunStatus::Aborted;
        record.pause_reason = None;
        record.updated_at = now_ms();
        let fields = if cancelled_setup {
            json!({"reason": approval::SETUP_DECLINED})
        } else {
            json!({})
        };
        self.record_cold(&record, "stopped", fields, &lease.token)
            .await?;
        self.inner.store.release_lease(run_id, &lease.token).await?;
        let mut status = self.status(run_id, query).await?;
        status["stopped"] = Value::Bool(true);
        status["alreadyTerminal"] = Value::Bool(false);
        Ok(status)
    }

    /// Pauses a live run: running calls finish and journal, nothing new starts.
    pub async fn pause(&self, run_id: &RunId, query: &StatusQuery) -> EngineResult<Value> {
        let record = self.load_reconciled(run_id).await?;
        if !self.send_control(run_id, Control::Pause(PauseReason::Requested)) {
            if record.status == RunStatus::Running {
                let Some(lease) = self.foreign_owner(run_id).await? else {
                    return Err(EngineError::Rejected(format!(
                        "run {run_id} has no live owner process to pause it"
                    )));
                };
                let body = json!({"action": "pause", "runId": run_id});
                let answer = self.forward_live(run_id, &lease, &body).await?;
                let mut status = self.status(run_id, query).await?;
                status["pauseRequested"] = Value::Bool(true);
                status["paused"] = Value::Bool(
                    answer.get("paused") == Some(&Value::Bool(true))
                        || status["status"] == "paused",
                );
                return Ok(status);
            }
            let mut status = self.status(run_id, query).await?;
            status["pauseRequested"] = Value::Bool(false);
            status["paused"] = Value::Bool(record.status == RunStatus::Paused);
            return Ok(status);
        }
        let paused = tokio::time::timeout(PAUSE_WAIT, self.wait(run_id))
            .await
            .is_ok();
        let mut status = self.status(run_id, query).await?;
        status["pauseRequested"] = Value::Bool(true);
        status["paused"] = Value::Bool(paused);
        Ok(status)
    }
}
