//! The server side of `run-control` (daemon.md 1.9, 1.10): what this daemon does when another
//! agentprism process asks it, over the verified control socket, to act on a run it executes.

use std::time::Duration;

use serde_json::{Value, json};

use super::health::Health;
use crate::control::ControlError;
use crate::engine::{Engine, EngineError, StatusQuery};
use crate::model::RunId;

/// How long a `run-control stop` waits for the run to settle before answering: inside the
/// 5 s exchange deadline, so the caller gets an answer rather than a timeout.
pub const STOP_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// Answers one verified `run-control` request.
pub async fn serve(engine: &Engine, health: &Health, body: &Value) -> Result<Value, ControlError> {
    let action = body.get("action").and_then(Value::as_str).unwrap_or("");
    if action != "stop" {
        return Err(ControlError::InvalidOperation(format!(
            "run-control action {action:?} is not served by this daemon yet"
        )));
    }
    let run_id = body
        .get("runId")
        .and_then(Value::as_str)
        .ok_or_else(|| ControlError::InvalidOperation("runId is required".into()))
        .and_then(|text| RunId::parse(text).map_err(ControlError::InvalidOperation))?;
    if !engine.is_live(&run_id) {
        return match engine.store().load_run(&run_id).await {
            Ok(_) => Err(ControlError::NotOwner(format!(
                "run {run_id} is not executing in daemon pid {}",
                health.record.pid
            ))),
            Err(crate::store::StoreError::UnknownRun(_)) => {
                Err(ControlError::UnknownRun(run_id.to_string()))
            }
            Err(error) => Err(ControlError::Internal(error.to_string())),
        };
    }
    let query = StatusQuery::default();
    let stop = engine.stop(&run_id, None, &query);
    match tokio::time::timeout(STOP_ANSWER_WAIT, stop).await {
        Ok(Ok(status)) => Ok(json!({"outcome": "stopped", "status": status})),
        Ok(Err(EngineError::UnknownRun(run_id))) => {
            Err(ControlError::UnknownRun(run_id.to_string()))
        }
        Ok(Err(EngineError::Rejected(message))) => Err(ControlError::InvalidOperation(message)),
        Ok(Err(error)) => Err(ControlError::Internal(error.to_string())),
        // The stop was delivered to the run; it settles after we answer.
        Err(_) => Ok(json!({"outcome": "stopping"})),
    }
}
