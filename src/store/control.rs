//! Durable control intents (daemon.md 1.10 step 2) as the store keeps them: a whole-run stop,
//! or a cancel of one call, that has to travel to the process executing the run is first
//! written down, so it survives the caller, an owner that is briefly unreachable, and
//! retries; the owner carries it out and acknowledges it. The first acknowledgement wins.
//!
//! A retry of the same request reuses the pending intent (same operation id), an
//! acknowledged intent is done, and a new request after an acknowledgement is a new
//! operation.

use serde_json::{Map, Value};

use crate::model::RunId;

/// What an intent asks the run's owner to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntentAction {
    /// A whole-run stop: carried out by the owner, or cold once no owner is left.
    Stop,
    /// A cancel of one live agent call ([`ControlIntent::call_index`]), for an owner without
    /// a control socket. Only a live owner can carry it out; without one it is acknowledged
    /// as not done.
    CancelAgent,
}

/// A recorded request to act on a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlIntent {
    /// The operation id (a uuid): the control request's `op` and what the answer's
    /// `control.operationId` names.
    pub op: String,
    pub run_id: RunId,
    pub action: IntentAction,
    /// The call a [`IntentAction::CancelAgent`] intent cancels (absent for a stop).
    pub call_index: Option<u32>,
    /// Unix ms when the first attempt wrote it; pending intents are carried out oldest first.
    pub requested_at: i64,
    /// pid of the process that wrote it, for diagnostics.
    pub requested_by: u32,
}

/// How an intent ended.
#[derive(Clone, Debug, PartialEq)]
pub struct IntentAck {
    /// Unix ms of the acknowledgement.
    pub acked_at: i64,
    /// pid of the process that acknowledged it, for diagnostics.
    pub acked_by: u32,
    /// The outcome object (`state`, `stopped`, `cancelled`, `reason`, …): what the waiting
    /// caller reports.
    pub outcome: Value,
}

/// Which pending intents [`super::Store::pending_intents`] lists.
#[derive(Clone, Copy, Debug)]
pub enum IntentScope<'a> {
    /// Those of one run.
    Run(&'a RunId),
    /// Those of runs whose lease `owner_id` holds: the intents an owner must carry out.
    HeldBy(&'a str),
    /// Every run's: what an owner scans to stop runs nobody executes any more.
    All,
}

impl IntentAction {
    /// The stored and wire name (`"stop"`, `"cancel-agent"`).
    pub fn as_str(self) -> &'static str {
        match self {
            IntentAction::Stop => "stop",
            IntentAction::CancelAgent => "cancel-agent",
        }
    }

    pub fn parse(text: &str) -> Option<IntentAction> {
        match text {
            "stop" => Some(IntentAction::Stop),
            "cancel-agent" => Some(IntentAction::CancelAgent),
            _ => None,
        }
    }
}

impl ControlIntent {
    /// A new intent with a fresh operation id, requested now by this process.
    pub fn new(run_id: &RunId, action: IntentAction, call_index: Option<u32>) -> ControlIntent {
        ControlIntent {
            op: uuid::Uuid::new_v4().to_string(),
            run_id: run_id.clone(),
            action,
            call_index,
            requested_at: crate::util::now_ms(),
            requested_by: std::process::id(),
        }
    }
}

impl IntentAck {
    /// An acknowledgement made now by this process.
    pub fn new(outcome: Value) -> IntentAck {
        IntentAck {
            acked_at: crate::util::now_ms(),
            acked_by: std::process::id(),
            outcome,
        }
    }

    /// The acknowledgement document the intent files held: `{version, op, runId, ackedAt,
    /// ackedBy}` with the outcome's fields merged in (the outcome's win on a clash).
    pub fn document(&self, run_id: &RunId, op: &str) -> Value {
        let mut fields = Map::new();
        fields.insert("version".into(), Value::from(1));
        fields.insert("op".into(), Value::from(op));
        fields.insert("runId".into(), Value::from(run_id.as_str()));
        fields.insert("ackedAt".into(), Value::from(self.acked_at));
        fields.insert("ackedBy".into(), Value::from(self.acked_by));
        if let Some(extra) = self.outcome.as_object() {
            for (name, value) in extra {
                fields.insert(name.clone(), value.clone());
            }
        }
        Value::Object(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_round_trip() {
        for action in [IntentAction::Stop, IntentAction::CancelAgent] {
            assert_eq!(IntentAction::parse(action.as_str()), Some(action));
        }
        assert_eq!(IntentAction::parse("pause"), None);
    }

    #[test]
    fn the_document_merges_the_outcome_like_the_ack_files() {
        let run_id = RunId::parse("abc123-def456").unwrap();
        let ack = IntentAck {
            acked_at: 5,
            acked_by: 7,
            outcome: serde_json::json!({"state": "settled", "stopped": true}),
        };
        assert_eq!(
            ack.document(&run_id, "op-1"),
            serde_json::json!({"version": 1, "op": "op-1", "runId": "abc123-def456",
                "ackedAt": 5, "ackedBy": 7, "state": "settled", "stopped": true})
        );
    }
}
