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
pub(crate) const STOP_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// The actions of protocol 1. `live-status` came later: callers fall back to
/// `list-permissions` when an owner refuses it.
pub(crate) const ACTIONS: [&str; 7] = [
    "stop",
    "cancel-agent",
    "pause",
    "list-permissions",
    "live-status",
    "respond-permission",
    "setup-response",
];

/// Answers one verified `run-control` request carrying operation id `op`.
pub(crate) async fn serve(
    engine: &Engine,
    health: &Health,
    op: &str,
    body: &Value,
) -> Result<Value, ControlError> {
    let action = action(body)?;
    let run_id = body
        .get("runId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("runId is required"))
        .and_then(|text| {
            RunId::parse(text).map_err(|e| ControlError::InvalidOperation(format!("runId: {e}")))
        })?;
    // Setup answers go to whoever holds the lease; the run need not be executing.
    if action != "setup-response" && !engine.is_live(&run_id) {
        return Err(not_executing(engine, health, &run_id).await);
    }
    match action {
        "stop" => engine
            .stop_requested(&run_id, op, STOP_ANSWER_WAIT)
            .await
            .map(|answer| json!(answer))
            .map_err(control_error),
        "cancel-agent" => cancel_agent(engine, &run_id, body).await,
        "pause" => {
            let status = json!(
                engine
                    .pause(&run_id, &StatusQuery::default())
                    .await
                    .map_err(control_error)?
            );
            Ok(json!({
                "outcome": if status["paused"] == true { "paused" } else { "pausing" },
                "paused": status["paused"],
                "status": status["status"],
            }))
        }
        "list-permissions" => {
            Ok(json!({"outcome": "listed", "permissions": pending_permissions(engine, &run_id)}))
        }
        "live-status" => Ok(json!({
            "outcome": "listed",
            "live": engine.live_status(&run_id),
            "permissions": pending_permissions(engine, &run_id),
        })),
        "respond-permission" => respond_permission(engine, &run_id, body).await,
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

/// The request's `action`, one of [`ACTIONS`].
fn action(body: &Value) -> Result<&str, ControlError> {
    match body.get("action") {
        Some(Value::String(action)) if ACTIONS.contains(&action.as_str()) => Ok(action.as_str()),
        Some(other) => Err(ControlError::InvalidOperation(format!(
            "action must be one of {}, got {other}",
            ACTIONS.join(", ")
        ))),
        None => Err(invalid("action is required")),
    }
}

/// The refusal for a run this daemon does not execute: `NOT_OWNER` if the run exists,
/// `UNKNOWN_RUN` if not.
async fn not_executing(engine: &Engine, health: &Health, run_id: &RunId) -> ControlError {
    match engine.runs().load_run(run_id).await {
        Ok(_) => ControlError::NotOwner(format!(
            "run {run_id} is not executing in daemon pid {}",
            health.record.pid
        )),
        Err(crate::store::StoreError::UnknownRun(_)) => {
            ControlError::UnknownRun(run_id.to_string())
        }
        Err(error) => ControlError::Internal(error.to_string()),
    }
}

async fn cancel_agent(
    engine: &Engine,
    run_id: &RunId,
    body: &Value,
) -> Result<Value, ControlError> {
    let index = body
        .get("callIndex")
        .and_then(Value::as_u64)
        .and_then(|index| u32::try_from(index).ok())
        .ok_or_else(|| invalid("callIndex must be a non-negative integer"))?;
    let status = json!(
        engine
            .stop(run_id, Some(index), &StatusQuery::default())
            .await
            .map_err(control_error)?
    );
    Ok(
        json!({"outcome": "cancelled", "cancelled": status["cancelled"], "status": status["status"]}),
    )
}

async fn respond_permission(
    engine: &Engine,
    run_id: &RunId,
    body: &Value,
) -> Result<Value, ControlError> {
    let permission_id = required_string(body, "permissionId")?;
    let outcome: PermissionOutcome = body
        .pointer("/response/outcome")
        .cloned()
        .ok_or_else(|| invalid("response.outcome is required"))
        .and_then(|value| {
            serde_json::from_value(value)
                .map_err(|e| ControlError::InvalidOperation(format!("response.outcome: {e}")))
        })?;
    let answer = engine
        .respond_permission(run_id, permission_id, outcome)
        .await
        .map_err(control_error)?;
    Ok(json!({"outcome": "answered", "answer": answer}))
}

fn pending_permissions(engine: &Engine, run_id: &RunId) -> Vec<Value> {
    engine
        .pending_permissions(run_id)
        .iter()
        .map(|pending| pending.to_json())
        .collect()
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
