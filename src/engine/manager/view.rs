//! The status of a run: the stored record, this process's live view of it, or the live
//! calls and permissions another process executing it reports.

use serde_json::{Value, json};

use crate::engine::manager::{
    Engine, EngineResult, LiveCallStatus, LiveStatus, REMOTE_STATUS_WAIT, Unforwarded,
};
use crate::engine::status::{self, StatusDocument, StatusQuery};
use crate::engine::status::{LiveCall, LiveView};
use crate::model::{RunId, RunStatus};
use crate::util::sync::Lock;

impl Engine {
    /// The bounded status view (engine.md 6.4).
    pub async fn status(
        &self,
        run_id: &RunId,
        query: &StatusQuery,
    ) -> EngineResult<StatusDocument> {
        let record = self.load_reconciled(run_id).await?;
        let view = self.inner.live.locked().get(run_id).map(|l| l.view.clone());
        let mut live_view = view.map(|v| v.locked().clone());
        let permissions = self.inner.broker.pending(run_id.as_str());
        // A run another live process executes: its live calls and pending permissions are
        // that process's to tell (`live-status`; an owner that does not know it is asked for
        // `list-permissions` only).
        let mut remote_permissions = Vec::new();
        if record.status == RunStatus::Running && live_view.is_none() {
            let (remote_view, remote) = self.remote_live(run_id).await?;
            live_view = remote_view;
            remote_permissions = remote;
        }
        let mut document = status::build(
            self.inner.store.as_ref(),
            &record,
            live_view.as_ref(),
            &permissions,
            query,
        )
        .await?;
        if let Some(outcome) = &mut document.outcome {
            outcome.resume_at = record.auto_resume.due_at.map(crate::util::iso_time);
            outcome.auto_resume = crate::timers::describe(&record, self.inner.config.auto_resume);
        }
        if !remote_permissions.is_empty() {
            // They replace this process's own, or come last when there are none.
            if document.pending_permissions.is_empty() {
                document.remote_pending_permissions = remote_permissions;
            } else {
                document.pending_permissions = remote_permissions;
            }
        }
        Ok(document)
    }

    /// The live calls (as `live-status` sends them) of a run this process executes.
    pub(crate) fn live_status(&self, run_id: &RunId) -> Option<LiveStatus> {
        let view = self
            .inner
            .live
            .locked()
            .get(run_id)
            .map(|l| l.view.clone())?;
        let view = view.locked().clone();
        let calls = view
            .calls
            .iter()
            .map(|(index, call)| LiveCallStatus {
                index: *index,
                label: call.label.clone(),
                phase: call.phase.clone(),
                model: call.model.clone(),
                backend_id: call.backend_id.clone(),
                timeout_ms: call.timeout_ms,
                attempt: call.attempt,
                status: call.state,
                waiting_for: call.waiting_for.clone(),
            })
            .collect();
        Some(LiveStatus {
            current_phase: view.current_phase,
            calls,
        })
    }

    /// Asks the live foreign owner of `run_id` for its live calls and pending permissions,
    /// within [`REMOTE_STATUS_WAIT`]; nothing when it cannot say.
    pub(super) async fn remote_live(
        &self,
        run_id: &RunId,
    ) -> EngineResult<(Option<LiveView>, Vec<Value>)> {
        let Some(lease) = self.foreign_owner(run_id).await? else {
            return Ok((None, Vec::new()));
        };
        let body = json!({"action": "live-status", "runId": run_id});
        let op = uuid::Uuid::new_v4().to_string();
        let asked =
            tokio::time::timeout(REMOTE_STATUS_WAIT, self.forward(&lease, &op, &body)).await;
        match asked {
            Ok(Ok(answer)) => {
                let permissions = answer
                    .get("permissions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                Ok((answer.get("live").and_then(live_view_of), permissions))
            }
            Ok(Err(Unforwarded::Refused { .. })) => {
                Ok((None, self.remote_permissions(run_id).await?))
            }
            _ => Ok((None, Vec::new())),
        }
    }

    /// The pending permission requests of a run another live process executes, asked of
    /// that process (`list-permissions`); empty when it cannot say within a second.
    pub(super) async fn remote_permissions(&self, run_id: &RunId) -> EngineResult<Vec<Value>> {
        let Some(lease) = self.foreign_owner(run_id).await? else {
            return Ok(Vec::new());
        };
        let body = json!({"action": "list-permissions", "runId": run_id});
        let op = uuid::Uuid::new_v4().to_string();
        let asked =
            tokio::time::timeout(REMOTE_STATUS_WAIT, self.forward(&lease, &op, &body)).await;
        Ok(match asked {
            Ok(Ok(answer)) => answer
                .get("permissions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => Vec::new(),
        })
    }
}

/// A [`LiveView`] from another process's `live-status` answer (what [`Engine::live_status`]
/// sends); entries that do not parse are left out.
pub(super) fn live_view_of(live: &Value) -> Option<LiveView> {
    let calls = live
        .get("calls")?
        .as_array()?
        .iter()
        .filter_map(|call| {
            let index = u32::try_from(call.get("index")?.as_u64()?).ok()?;
            let text = |key: &str| call.get(key).and_then(Value::as_str).map(str::to_owned);
            let state = match call.get("status").and_then(Value::as_str) {
                Some("queued") => "queued",
                Some("waiting") => "waiting",
                _ => "running",
            };
            Some((
                index,
                LiveCall {
                    label: text("label").unwrap_or_default(),
                    phase: text("phase"),
                    model: text("model"),
                    backend_id: text("backendId"),
                    state,
                    waiting_for: text("waitingFor"),
                    timeout_ms: call.get("timeoutMs").and_then(Value::as_u64).unwrap_or(0),
                    attempt: call
                        .get("attempt")
                        .and_then(Value::as_u64)
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(1),
                },
            ))
        })
        .collect();
    Some(LiveView {
        current_phase: live
            .get("currentPhase")
            .and_then(Value::as_str)
            .map(str::to_owned),
        calls,
        ..LiveView::default()
    })
}
