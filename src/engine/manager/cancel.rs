//! Cancelling one live agent call: here, forwarded to the owner, or as an intent an owner
//! without a control socket picks up.

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::engine::driver::Control;
use crate::engine::manager::remote::unforwarded_error;
use crate::engine::manager::{
    CANCEL_WAIT, ControlState, Engine, EngineError, EngineResult, INTENT_POLL, Rejected,
    StopAnswer, Unforwarded,
};
use crate::engine::status::StatusQuery;
use crate::model::RunId;
use crate::store::{ControlIntent, IntentAck, IntentAction, StoreError};
use crate::util::sync::Lock;

impl Engine {
    /// Cancels one live agent call, here or in the process executing the run.
    pub(super) async fn cancel_agent(
        &self,
        run_id: &RunId,
        index: u32,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        if !self.is_live(run_id) {
            let Some(lease) = self.foreign_owner(run_id).await? else {
                return Err(EngineError::Rejected(Rejected::Owner(format!(
                    "run {run_id} has no live owner process, so callIndex {index} is not a live agent call; cancelling an agent needs the process executing the run (resume the run, or stop it whole)"
                ))));
            };
            let body = json!({"action": "cancel-agent", "runId": run_id, "callIndex": index});
            let op = uuid::Uuid::new_v4().to_string();
            let answer = match self.forward(&lease, &op, &body).await {
                Ok(answer) => answer,
                // An owner with no control socket (a foreground `agentprism run`) reads
                // intents every 250 ms: leave it one and wait for its answer.
                Err(Unforwarded::Unreachable { .. } | Unforwarded::NoControlSocket { .. }) => {
                    return self.cancel_agent_by_intent(run_id, index, query).await;
                }
                Err(unforwarded) => {
                    return Err(unforwarded_error(
                        run_id,
                        &lease,
                        "cancel-agent",
                        unforwarded,
                    ));
                }
            };
            let mut status = StopAnswer::of(self.status(run_id, query).await?);
            status.cancelled = Some(
                answer
                    .get("cancelled")
                    .cloned()
                    .unwrap_or_else(|| json!({"callIndex": index})),
            );
            return Ok(status);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        let sent = self.send_control(
            run_id,
            Control::CancelCall {
                index,
                reply: reply_tx,
            },
        );
        let cancelled = sent && reply_rx.await.unwrap_or(false);
        if !cancelled {
            let view = self.inner.live.locked().get(run_id).map(|l| l.view.clone());
            let live_calls: Vec<String> = view
                .map(|view| {
                    view.locked()
                        .calls
                        .iter()
                        .map(|(i, c)| format!("{i}:{}", c.label))
                        .collect()
                })
                .unwrap_or_default();
            return Err(EngineError::Rejected(Rejected::input(
                "callIndex",
                format!(
                    "callIndex {index} is not a live agent call of run {run_id}; live calls: {}",
                    if live_calls.is_empty() {
                        "none".to_owned()
                    } else {
                        live_calls.join(", ")
                    }
                ),
            )));
        }
        let mut status = StopAnswer::of(self.status(run_id, query).await?);
        status.cancelled = Some(json!({"callIndex": index}));
        Ok(status)
    }

    /// Cancels call `index` of a run whose owner has no control socket: records a
    /// [`IntentAction::CancelAgent`] intent and waits up to [`CANCEL_WAIT`] for the owner's
    /// acknowledgement. Unacknowledged by then, the answer says `control.state:"pending"` and
    /// the intent stays for the owner.
    pub(super) async fn cancel_agent_by_intent(
        &self,
        run_id: &RunId,
        index: u32,
        query: &StatusQuery,
    ) -> EngineResult<StopAnswer> {
        let requested = ControlIntent::new(run_id, IntentAction::CancelAgent, Some(index));
        let intent =
            self.inner
                .store
                .put_intent(&requested)
                .await
                .map_err(|error| match error {
                    StoreError::UnknownRun(_) => EngineError::from(error),
                    error => EngineError::Rejected(Rejected::Unrecorded(format!(
                        "cannot record the cancel request for call {index} of run {run_id}: {error}"
                    ))),
                })?;
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        let acked = loop {
            let found = self.inner.store.intent_ack(run_id, &intent.op).await?;
            if found.is_some() || tokio::time::Instant::now() >= deadline {
                break found;
            }
            tokio::time::sleep(INTENT_POLL).await;
        };
        let Some(IntentAck { outcome: ack, .. }) = acked else {
            let mut status = StopAnswer::of(self.status(run_id, query).await?);
            status.control = Some(ControlState {
                requested_at: Some(Value::from(intent.requested_at)),
                ..ControlState::pending(intent.op.clone())
            });
            return Ok(status);
        };
        if ack.get("cancelled").and_then(Value::as_bool) != Some(true) {
            let why = ack
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("the owner did not cancel it");
            return Err(EngineError::Rejected(Rejected::Owner(format!(
                "call {index} of run {run_id} was not cancelled: {why}"
            ))));
        }
        let mut status = StopAnswer::of(self.status(run_id, query).await?);
        status.cancelled = Some(json!({"callIndex": index}));
        Ok(status)
    }

    /// Carries out a [`IntentAction::CancelAgent`] intent for a run this engine executes, or
    /// acknowledges it as not done when nobody can (the run ended, or has no live owner).
    pub(super) async fn complete_cancel_intent(&self, intent: &ControlIntent) {
        let run_id = &intent.run_id;
        let index = intent.call_index.unwrap_or(u32::MAX);
        let not_done = |reason: &str| {
            json!({"state": "settled", "operationId": intent.op,
            "cancelled": false, "callIndex": index, "reason": reason})
        };
        if self.is_live(run_id) {
            let (reply, answer) = oneshot::channel();
            let sent = self.send_control(run_id, Control::CancelCall { index, reply });
            let cancelled = sent && answer.await.unwrap_or(false);
            let outcome = if cancelled {
                json!({"state": "settled", "operationId": intent.op, "cancelled": true,
                    "callIndex": index, "owner": self.owner_summary()})
            } else {
                not_done(&format!(
                    "callIndex {index} is not a live agent call of run {run_id}"
                ))
            };
            self.acknowledge(run_id, &intent.op, outcome).await;
            return;
        }
        match self.inner.store.load_run(run_id).await {
            Ok(record) if record.status.is_terminal() => {
                self.acknowledge(run_id, &intent.op, not_done("the run has ended"))
                    .await;
            }
            Ok(_) => match self.foreign_owner(run_id).await {
                // Another live process executes it: the intent is that owner's to carry out.
                Ok(Some(_)) => {}
                Ok(None) => {
                    let outcome = not_done("the run has no live owner process");
                    self.acknowledge(run_id, &intent.op, outcome).await;
                }
                Err(error) => tracing::warn!(run = %run_id, "cancel intent {}: {error}", intent.op),
            },
            // Deleted since the listing: its intents went with it.
            Err(StoreError::UnknownRun(_)) => {}
            Err(error) => tracing::warn!(run = %run_id, "cancel intent {}: {error}", intent.op),
        }
    }
}
