//! Stopping a whole run (here, in its owner's process, or cold when nobody executes it) and
//! pausing one.

use serde_json::{Value, json};

use crate::engine::approval;
use crate::engine::driver::Control;
use crate::engine::manager::{
    ControlState, Engine, EngineError, EngineResult, INTENT_POLL, PAUSE_WAIT, PauseAnswer,
    Rejected, STOP_WAIT, StopAnswer, Unforwarded, lease_owner,
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
    ) -> EngineResult<StopAnswer> {
        self.stop_with(run_id, call_index, false, query).await
    }

    /// [`Engine::stop`] that may also end a superseded daemon still holding the run's lease
    /// (`force_owner`, whole-run stops only; daemon.md 1.10 step 9).
    ///
    /// A run executing in another live process is stopped there: the stop is recorded as a
    /// durable intent and forwarded to the lease holder, or, when the holder is no daemon
    /// and so has no control socket, waited for until the holder has carried the intent out.
    /// When the holder cannot be reached, or has not settled the run within [`STOP_WAIT`],
    /// the answer carries `control: {state:"pending", operationId, requestedAt, owner}` and
    /// the intent stays for the owner to carry out; a retry reuses its operation id. A
    /// `forceOwner` the holder does not qualify for is refused before anything is recorded.
    pub(crate) async fn stop_with(
        &self,
        run_id: &RunId,
        call_index: Option<u32>,
        force_owner: bool,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        if force_owner && call_index.is_some() {
            return Err(EngineError::Rejected(Rejected::input(
                "forceOwner",
                "forceOwner cannot be combined with callIndex: callIndex cancels one live call, forceOwner stops the whole run",
            )));
        }
        let record = self.load_reconciled(run_id).await?;
        if let Some(index) = call_index {
            return self.cancel_agent(run_id, index, query).await;
        }
        if record.status.is_terminal() {
            return self.already_terminal(run_id, query).await;
        }
        if self.send_control(run_id, Control::Stop) {
            let settled = tokio::time::timeout(STOP_WAIT, self.wait(run_id))
                .await
                .is_ok();
            if !settled {
                // Still stopping: the request is recorded, so its operation id is one a retry
                // and `status` find, and the intent scan acknowledges it once the run settles.
                let intent = ControlIntent::new(run_id, IntentAction::Stop, None);
                let intent = self.inner.store.put_intent(&intent).await?;
                return self
                    .stop_pending(
                        run_id,
                        &intent,
                        self.owner_summary(),
                        "this process is still stopping the run",
                        query,
                    )
                    .await;
            }
            let mut answer = StopAnswer::of(self.status(run_id, query).await?);
            answer.stopped = Some(true);
            return Ok(answer);
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
    ) -> EngineResult<StopAnswer> {
        let run_id = &record.run_id;
        if force_owner {
            return self.stop_forced(run_id, lease, query).await;
        }
        let intent = self.record_stop(run_id).await?;
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
            Err(Unforwarded::NoControlSocket { owner, reason }) => {
                return self
                    .stop_through_intent(run_id, &intent, owner.clone(), reason, query)
                    .await;
            }
            Err(Unforwarded::Refused { code, message }) if code == "UNKNOWN_RUN" => {
                self.withdraw(&intent, message).await;
                return Err(EngineError::Rejected(Rejected::Owner(format!(
                    "the owner of run {run_id} (pid {}) does not know it: {message}",
                    lease.pid
                ))));
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
                self.withdraw(&intent, &message).await;
                Err(EngineError::Rejected(Rejected::Owner(format!(
                    "the owner of run {run_id} (pid {}) refused the stop: {message}",
                    lease.pid
                ))))
            }
            Err(_) => unreachable!("handled above"),
        }
    }

    /// `forceOwner` (daemon.md 1.10 step 9): ends the superseded daemon holding `lease`, then
    /// stops the run here. Whether that daemon may be ended is settled before anything is
    /// recorded, so a refusal leaves the store, the run and its owner as they were.
    async fn stop_forced(
        &self,
        run_id: &RunId,
        lease: &Lease,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let refused = |reason: String| {
            EngineError::Rejected(Rejected::Owner(format!("forceOwner refused: {reason}")))
        };
        let route = self
            .inner
            .route
            .get()
            .ok_or_else(|| refused("this process cannot verify or end other owners".into()))?;
        route
            .verify_superseded_owner(lease)
            .await
            .map_err(refused)?;
        let intent = self.record_stop(run_id).await?;
        if let Err(reason) = route.terminate_superseded_owner(lease).await {
            // The owner lives on, and the recorded intent is its to carry out.
            let reason = format!("forceOwner could not end the owner: {reason}");
            return self
                .stop_pending(run_id, &intent, lease_owner(lease), &reason, query)
                .await;
        }
        self.stop_cold_acknowledged(run_id, &intent, query).await
    }

    /// Records the durable stop intent of `run_id` (or finds the unacknowledged one a
    /// previous stop left), whose operation id the owner acknowledges.
    async fn record_stop(&self, run_id: &RunId) -> EngineResult<ControlIntent> {
        self.inner
            .store
            .put_intent(&ControlIntent::new(run_id, IntentAction::Stop, None))
            .await
            .map_err(|error| match error {
                StoreError::UnknownRun(_) => EngineError::from(error),
                error => EngineError::Rejected(Rejected::Unrecorded(format!(
                    "cannot record the stop request for run {run_id}: {error}"
                ))),
            })
    }

    /// A stop of a run whose owner has no control socket (a foreground `agentprism run`):
    /// that owner finds the recorded intent itself, so the stop reads the store every
    /// [`INTENT_POLL`] for up to [`STOP_WAIT`] until the run has settled, and is pending only
    /// if it has not by then. An owner that lets go of the run without stopping it (it
    /// ended, or the run paused) leaves it to be stopped here.
    async fn stop_through_intent(
        &self,
        run_id: &RunId,
        intent: &ControlIntent,
        owner: Value,
        reason: &str,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let current = self.load_reconciled(run_id).await?;
            if current.status.is_terminal() {
                let already = current.status != RunStatus::Aborted;
                return self.stop_settled(intent, owner, already, query).await;
            }
            if self.foreign_owner(run_id).await?.is_none() {
                return self.stop_cold_acknowledged(run_id, intent, query).await;
            }
            if tokio::time::Instant::now() >= deadline {
                let reason = format!(
                    "{reason}, and it has not carried out the recorded stop within {} s",
                    STOP_WAIT.as_secs()
                );
                return self
                    .stop_pending(run_id, intent, owner, &reason, query)
                    .await;
            }
            tokio::time::sleep(INTENT_POLL).await;
        }
    }

    /// Acknowledges a stop intent whose caller is told the stop was refused, so that no
    /// owner carries it out later.
    async fn withdraw(&self, intent: &ControlIntent, reason: &str) {
        let refused = json!({"state": "refused", "operationId": intent.op, "reason": reason});
        self.acknowledge(&intent.run_id, &intent.op, refused).await;
    }

    /// The run settled in its owner's process: the intent is acknowledged as settled.
    async fn stop_settled(
        &self,
        intent: &ControlIntent,
        owner: Value,
        already: bool,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let run_id = &intent.run_id;
        let settled = ControlState {
            owner: Some(owner),
            ..ControlState::settled(intent.op.clone(), already)
        };
        self.acknowledge(run_id, &intent.op, settled.to_json())
            .await;
        let mut answer = StopAnswer::of(self.status(run_id, query).await?);
        answer.stopped = Some(!already);
        answer.already_terminal = Some(already);
        answer.control = Some(settled);
        Ok(answer)
    }

    pub(super) async fn stop_pending(
        &self,
        run_id: &RunId,
        intent: &ControlIntent,
        owner: Value,
        reason: &str,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let mut answer = StopAnswer::of(self.status(run_id, query).await?);
        answer.stopped = Some(false);
        answer.control = Some(ControlState {
            requested_at: Some(Value::String(crate::util::iso_time(intent.requested_at))),
            owner: Some(owner),
            reason: Some(reason.to_owned()),
            ..ControlState::pending(intent.op.clone())
        });
        Ok(answer)
    }

    /// Step 7: nobody executes the run any more; stop it here and acknowledge the intent.
    pub(super) async fn stop_cold_acknowledged(
        &self,
        run_id: &RunId,
        intent: &ControlIntent,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let mut answer = self.stop_cold(run_id, query).await?;
        let already = answer.already_terminal == Some(true);
        let settled = ControlState {
            cold: Some(true),
            ..ControlState::settled(intent.op.clone(), already)
        };
        self.acknowledge(run_id, &intent.op, settled.to_json())
            .await;
        answer.control = Some(settled);
        Ok(answer)
    }

    /// The answer to a stop of a run that had already ended.
    async fn already_terminal(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let mut answer = StopAnswer::of(self.status(run_id, query).await?);
        answer.stopped = Some(false);
        answer.already_terminal = Some(true);
        Ok(answer)
    }

    /// Stops a run no process executes: a cold stop under a fresh lease.
    pub(super) async fn stop_cold(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let record = self.load_reconciled(run_id).await?;
        if record.status.is_terminal() {
            return self.already_terminal(run_id, query).await;
        }
        // Never take a lease a live process holds: it is executing the run, or changing it.
        if let Some(holder) = self.foreign_owner(run_id).await? {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is {} in process {}; stop it again once that process lets go",
                if record.status == RunStatus::Running {
                    "executing"
                } else {
                    "being changed"
                },
                holder.pid
            ))));
        }
        let lease = self.take_free_lease(run_id).await?;
        let mut record = self.inner.store.load_run(run_id).await?;
        // Stopping a run that waits for its backend approval cancels the approval, and a
        // cancelled approval is final like a declined one.
        let cancelled_setup =
            record.status == RunStatus::Pending && approval::cancel_pending_setup(&mut record);
        record.status = RunStatus::Aborted;
        record.pause_reason = None;
        // A stop cancels the automatic resume it was waiting for.
        record.auto_resume.due_at = None;
        record.updated_at = now_ms();
        let fields = if cancelled_setup {
            json!({"reason": approval::SETUP_DECLINED})
        } else {
            json!({})
        };
        self.record_cold(&record, "stopped", fields, &lease.token)
            .await?;
        self.inner.store.release_lease(run_id, &lease.token).await?;
        let mut answer = StopAnswer::of(self.status(run_id, query).await?);
        answer.stopped = Some(true);
        answer.already_terminal = Some(false);
        Ok(answer)
    }

    /// Pauses a live run: running calls finish and journal, nothing new starts.
    pub async fn pause(&self, run_id: &RunId, query: &StatusQuery) -> EngineResult<PauseAnswer> {
        let record = self.load_reconciled(run_id).await?;
        if !self.send_control(run_id, Control::Pause(PauseReason::Requested)) {
            if record.status == RunStatus::Running {
                let Some(lease) = self.foreign_owner(run_id).await? else {
                    return Err(EngineError::Rejected(Rejected::Owner(format!(
                        "run {run_id} has no live owner process to pause it"
                    ))));
                };
                let body = json!({"action": "pause", "runId": run_id});
                let answer = self.forward_live(run_id, &lease, &body).await?;
                let status = self.status(run_id, query).await?;
                let paused = answer.get("paused") == Some(&Value::Bool(true))
                    || status.status == RunStatus::Paused;
                return Ok(PauseAnswer {
                    status,
                    pause_requested: true,
                    paused,
                });
            }
            return Ok(PauseAnswer {
                status: self.status(run_id, query).await?,
                pause_requested: false,
                paused: record.status == RunStatus::Paused,
            });
        }
        let paused = tokio::time::timeout(PAUSE_WAIT, self.wait(run_id))
            .await
            .is_ok();
        Ok(PauseAnswer {
            status: self.status(run_id, query).await?,
            pause_requested: true,
            paused,
        })
    }
}
