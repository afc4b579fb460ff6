//! The permission broker: ACP permission requests wait here until a caller answers them.
//!
//! Permissions live only in the process that owns the run's execution: an answer goes to the
//! waiting agent turn, and a request whose owner dies is gone (it cannot be reconstructed).
//! Only an option the agent advertised is accepted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::engine::events::RunNotice;
use crate::engine::redact;
use crate::engine::runner::{PermissionOutcome, PermissionRequest};
use crate::model::RunId;
use crate::util::sync::Lock;

/// Largest serialized option list a request may have; larger ones are cancelled rather than
/// shown partially.
pub(crate) const MAX_OPTIONS_BYTES: usize = 64 * 1024;

/// A request waiting for an answer, as status shows it.
#[derive(Clone, Debug)]
pub(crate) struct PendingPermission {
    pub permission_id: String,
    pub run_id: String,
    pub call_index: u32,
    pub label: String,
    pub options: Vec<crate::engine::runner::PermissionOption>,
    /// The redacted tool call the agent wants to make.
    pub tool_call: Value,
}

impl PendingPermission {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "permissionId": self.permission_id,
            "callIndex": self.call_index,
            "label": self.label,
            "toolCall": self.tool_call,
            "options": self.options.iter().map(|o| json!({"optionId": o.option_id, "name": o.name, "kind": o.kind})).collect::<Vec<_>>(),
        })
    }
}

struct Waiting {
    pending: PendingPermission,
    answer: oneshot::Sender<PermissionOutcome>,
}

/// Shared by every run of a process.
#[derive(Clone, Default)]
pub(crate) struct PermissionBroker {
    waiting: Arc<Mutex<BTreeMap<String, Waiting>>>,
    notices: Option<crate::engine::events::Notices>,
}

/// Why an answer was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PermissionError {
    #[error(
        "no pending permission request {0} for this run (it may have been answered, or its owner process ended)"
    )]
    Unknown(String),
    #[error("optionId {given:?} was not offered; offered: {offered}")]
    UnknownOption { given: String, offered: String },
}

impl PermissionBroker {
    pub(crate) fn new(notices: Option<crate::engine::events::Notices>) -> PermissionBroker {
        PermissionBroker {
            waiting: Arc::default(),
            notices,
        }
    }

    /// Parks a request until it is answered; `Cancelled` if the broker drops it.
    pub(crate) async fn ask(&self, request: PermissionRequest) -> PermissionOutcome {
        let options_size = serde_json::to_string(&request.options)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if options_size > MAX_OPTIONS_BYTES || request.options.is_empty() {
            return PermissionOutcome::Cancelled;
        }
        let permission_id = uuid::Uuid::new_v4().to_string();
        let (tool_call, _) = redact::redact_value(&request.tool_call);
        let pending = PendingPermission {
            permission_id: permission_id.clone(),
            run_id: request.run_id.clone(),
            call_index: request.call_index,
            label: request.label.clone(),
            options: request.options.clone(),
            tool_call,
        };
        let (sender, receiver) = oneshot::channel();
        self.waiting.locked().insert(
            permission_id.clone(),
            Waiting {
                pending: pending.clone(),
                answer: sender,
            },
        );
        if let (Some(notices), Ok(run_id)) = (&self.notices, RunId::parse(&request.run_id)) {
            notices.lifecycle(RunNotice::Permission {
                run_id,
                permission_id: permission_id.clone(),
                request: pending.to_json(),
            });
        }
        let guard = Forget {
            broker: self.clone(),
            permission_id,
        };
        let outcome = receiver.await.unwrap_or(PermissionOutcome::Cancelled);
        drop(guard);
        outcome
    }

    /// The requests waiting for one run, oldest first.
    pub(crate) fn pending(&self, run_id: &str) -> Vec<PendingPermission> {
        self.waiting
            .locked()
            .values()
            .filter(|w| w.pending.run_id == run_id)
            .map(|w| w.pending.clone())
            .collect()
    }

    /// Whether a request of `run_id` waits (`pending` without building the list).
    pub(crate) fn has_pending(&self, run_id: &str) -> bool {
        self.waiting
            .locked()
            .values()
            .any(|w| w.pending.run_id == run_id)
    }

    /// Answers a request of `run_id`.
    pub(crate) fn answer(
        &self,
        run_id: &str,
        permission_id: &str,
        outcome: PermissionOutcome,
    ) -> Result<(), PermissionError> {
        let mut waiting = self.waiting.locked();
        let Some(entry) = waiting
            .get(permission_id)
            .filter(|w| w.pending.run_id == run_id)
        else {
            return Err(PermissionError::Unknown(permission_id.to_owned()));
        };
        if let PermissionOutcome::Selected { option_id } = &outcome
            && !entry
                .pending
                .options
                .iter()
                .any(|o| &o.option_id == option_id)
        {
            return Err(PermissionError::UnknownOption {
                given: option_id.clone(),
                offered: entry
                    .pending
                    .options
                    .iter()
                    .map(|o| o.option_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if let Some(entry) = waiting.remove(permission_id) {
            let _ = entry.answer.send(outcome);
        }
        Ok(())
    }
}

/// Removes a request when its turn stops waiting (answered, cancelled or dropped).
struct Forget {
    broker: PermissionBroker,
    permission_id: String,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.broker.waiting.locked().remove(&self.permission_id);
    }
}
