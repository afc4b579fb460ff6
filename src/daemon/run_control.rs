//! The server side of `run-control` (daemon.md 1.9, 1.10): what this daemon does when another
//! agentprism process asks it, over the verified control socket, to act on a run it executes.
//!
//! Every action needs this daemon to be the run's live owner; otherwise the answer is
//! `NOT_OWNER` (the run exists) or `UNKNOWN_RUN`, and the caller decides what to do (a
//! whole-run stop falls back to a cold stop, everything else is an error for its user).
//! Answers are `{outcome, ...}`; the control layer adds `ok:true`.

use std::time::Duration;

use serde_json::{Value, json};

use super::health::Health;
use crate::control::ControlError;
use crate::engine::runner::PermissionOutcome;
use crate::engine::{Engine, EngineError, StatusQuery};
use crate::model::RunId;

/// How long a `run-control stop` waits for the run to settle before answering: inside the
/// 5 s exchange deadline, so the caller gets an answer rather than a timeout.
pub const STOP_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// The actions of protocol 1. `live-status` came later: callers fall back to
/// `list-permissions` when an owner refuses it.
pub const ACTIONS: [&str; 7] = [
    "stop",
    "cancel-agent",
    "pause",
    "list-permissions",
    "live-status",
    "respond-permission",
    "setup-response",
];

/// Answers one verified `run-control` request carrying operation id `op`.
pub async fn serve(
    engine: &Engine,
    health: &Health,
    op: &str,
    body: &Value,
) -> Result<Value, ControlError> {
    let action = match body.get("action") {
        Some(Value::String(action)) if ACTIONS.contains(&action.as_str()) => action.as_str(),
        Some(other) => {
            return Err(ControlError::InvalidOperation(format!(
                "action must be one of {}, got {other}",
                ACTIONS.join(", ")
            )));
        }
        None => return Err(invalid("action is required")),
    };
    let run_id = body
        .get("runId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("runId is required"))
        .and_then(|text| {
            RunId::parse(text).map_err(|e| ControlError::InvalidOperation(format!("runId: {e}")))
        })?;
    // Setup answers go to whoever holds the lease; the run need not be executing.
    if action != "setup-response" && !engine.is_live(&run_id) {
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
    match action {
        "stop" => engine
            .stop_requested(&run_id, op, STOP_ANSWER_WAIT)
            .await
            .map(|answer| json!(answer))
            .map_err(control_error),
        "cancel-agent" => {
            let index = body
                .get("callIndex")
                .and_then(Value::as_u64)
                .and_then(|index| u32::try_from(index).ok())
                .ok_or_else(|| invalid("callIndex must be a non-negative integer"))?;
            let status = json!(
                engine
                    .stop(&run_id, Some(index), &query)
                    .await
                    .map_err(control_error)?
            );
            Ok(
                json!({"outcome": "cancelled", "cancelled": status["cancelled"], "status": status["status"]}),
            )
        }
        "pause" => {
            let status = json!(engine.pause(&run_id, &query).await.map_err(control_error)?);
            Ok(json!({
                "outcome": if status["paused"] == true { "paused" } else { "pausing" },
                "paused": status["paused"],
                "status": status["status"],
            }))
        }
        "list-permissions" => {
            let permissions: Vec<Value> = engine
                .pending_permissions(&run_id)
                .iter()
                .map(|pending| pending.to_json())
                .collect();
            Ok(json!({"outcome": "listed", "permissions": permissions}))
        }
        "live-status" => {
            let permissions: Vec<Value> = engine
                .pending_permissions(&run_id)
                .iter()
                .map(|pending| pending.to_json())
                .collect();
            Ok(
                json!({"outcome": "listed", "live": engine.live_status(&run_id), "permissions": permissions}),
            )
        }
        "respond-permission" => {
            let permission_id = required_string(body, "permissionId")?;
            let outcome: PermissionOutcome = body
                .pointer("/response/outcome")
                .cloned()
                .ok_or_else(|| invalid("response.outcome is required"))
                .and_then(|value| {
                    serde_json::from_value(value).map_err(|e| {
                        ControlError::InvalidOperation(format!("response.outcome: {e}"))
                    })
                })?;
            let answer = engine
                .respond_permission(&run_id, permission_id, outcome)
                .await
                .map_err(control_error)?;
            Ok(json!({"outcome": "answered", "answer": answer}))
        }
        "setup-response" => {
            let setup_id = required_string(body, "setupId")?;
            let response = body
                .get("response")
                .filter(|value| value.is_object())
                .ok_or_else(|| invalid("response must be an object"))?;
            let answer = engine
                .setup_response(&run_id, setup_id, response)
                .await
                .map_err(control_error)?;
            Ok(json!({"outcome": "answered", "answer": answer}))
        }
        _ => unreachable!("every action in ACTIONS is matched"),
    }
}

fn invalid(message: &str) -> ControlError {
    ControlError::InvalidOperation(message.to_owned())
}

fn required_string<'a>(body: &'a Value, field: &str) -> Result<&'a str, ControlError> {
    body.get(field)
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
        .ok_or_else(|| ControlError::InvalidOperation(format!("{field} is required")))
}

fn control_error(error: EngineError) -> ControlError {
    match error {
        EngineError::UnknownRun(run_id) => ControlError::UnknownRun(run_id.to_string()),
        EngineError::Rejected(message) => ControlError::InvalidOperation(message.to_string()),
        EngineError::Store(error) => ControlError::Internal(error.to_string()),
    }
}
