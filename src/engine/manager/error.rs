//! The engine's errors. A request is either refused with nothing changed
//! ([`EngineError::Rejected`], with a kind per cause), names a run that is not there, or
//! meets a store failure (a corrupt stored record included: it is an error, never replaced
//! by a default).
//!
//! Each kind's `Display` is exactly the message the `workflow` tool and the CLI show, which
//! `docs/api.md` and the tests pin; callers that only show the message need not look at the
//! kind, callers that reword it (the CLI) can branch on it.

use crate::engine::prepare::{Cause, Rejection};
use crate::model::RunId;
use crate::store::StoreError;

/// Failures of engine operations.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A tool error with nothing changed; the kind says why.
    #[error(transparent)]
    Rejected(Rejected),
    #[error("No workflow run found for runId \"{0}\"")]
    UnknownRun(RunId),
    /// The store failed, or holds a record that does not parse.
    #[error(transparent)]
    Store(StoreError),
}

pub type EngineResult<T> = Result<T, EngineError>;

/// Why a request was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// A field of the request is missing or malformed. `field` names it as the `workflow`
    /// tool spells it (`runId`, `projectDir`, `offset`, `callIndex`, `forceOwner`,
    /// `setupId`, `response`, `checkpointReplies`, `permissionId`).
    #[error("{message}")]
    InvalidInput {
        field: &'static str,
        message: String,
    },
    /// The run's state does not allow the request: it is running, completed, already
    /// answered, held or being changed by another process, ...
    #[error("{0}")]
    Conflict(String),
    /// The run waits for its backend-approval answer, which must come first.
    #[error("run {0} is waiting for a setup answer; answer it with setup-response")]
    AwaitingSetup(RunId),
    /// A capacity cap: the project's active runs, or every run this process executes.
    #[error("{0}")]
    Capacity(String),
    /// The script file (or a revision of it) could not be read: its path, its kind of file,
    /// its size.
    #[error("{0}")]
    Unreadable(String),
    /// The script's text (or a revision's) fails its static checks: UTF-8, a NUL, the `meta`
    /// literal, the syntax, a nondeterministic call.
    #[error("{0}")]
    Parse(String),
    /// The script (or a revision of it) failed what it does in preparation: `args` against
    /// its input schema, its companion files, the mocked dry run.
    #[error("{0}")]
    Script(String),
    /// A call has no route, or a routed backend cannot serve it (probes, modes, options,
    /// backends a revision declares that were never approved).
    #[error("{0}")]
    Routing(String),
    /// The process executing the run could not carry the request out: it is gone, cannot
    /// be reached, or refused; or this process cannot reach other owners at all.
    #[error("{0}")]
    Owner(String),
    /// A file the engine keeps beside the store (the script copy, a control intent) could
    /// not be written.
    #[error("{0}")]
    Unrecorded(String),
    /// The run would start more agent calls than `AGENTPRISM_CONFIRM_AGENTS` allows without a
    /// confirmation, and the caller gave none (an explicit `maxAgents` at or above the size,
    /// the CLI's `--yes`, or an answered question).
    #[error("{message}")]
    NeedsConfirmation { message: String, agents: u32 },
    /// The caller gave up before the run was admitted.
    #[error("{0}")]
    Cancelled(String),
    /// The engine's own state is unusable (a poisoned lock).
    #[error("{0}")]
    Internal(String),
}

impl Rejected {
    /// The request field an [`Rejected::InvalidInput`] names.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Rejected::InvalidInput { field, .. } => Some(field),
            _ => None,
        }
    }

    pub(super) fn input(field: &'static str, message: impl Into<String>) -> Rejected {
        Rejected::InvalidInput {
            field,
            message: message.into(),
        }
    }
}

impl From<Rejected> for EngineError {
    fn from(rejected: Rejected) -> Self {
        EngineError::Rejected(rejected)
    }
}

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownRun(run_id) => EngineError::UnknownRun(run_id),
            other => EngineError::Store(other),
        }
    }
}

impl From<Rejection> for Rejected {
    fn from(rejection: Rejection) -> Self {
        match rejection.cause {
            Cause::Unreadable => Rejected::Unreadable(rejection.message),
            Cause::Parse => Rejected::Parse(rejection.message),
            Cause::Script => Rejected::Script(rejection.message),
            Cause::Routing => Rejected::Routing(rejection.message),
        }
    }
}

impl From<Rejection> for EngineError {
    fn from(rejection: Rejection) -> Self {
        EngineError::Rejected(rejection.into())
    }
}

/// A stored record of `run_id` that does not parse as what it must be.
pub(super) fn corrupt(run_id: &RunId, what: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("run {run_id}: {what}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_shows_its_message_unchanged() {
        let run_id = RunId::parse("r-1").expect("valid id");
        let shown = [
            (
                Rejected::input("offset", "offset 9 is past the end"),
                "offset 9 is past the end",
            ),
            (
                Rejected::Conflict("run r-1 is running".into()),
                "run r-1 is running",
            ),
            (
                Rejected::AwaitingSetup(run_id.clone()),
                "run r-1 is waiting for a setup answer; answer it with setup-response",
            ),
            (Rejected::Capacity("too many".into()), "too many"),
        ];
        for (rejected, message) in shown {
            assert_eq!(EngineError::from(rejected).to_string(), message);
        }
        assert_eq!(
            EngineError::UnknownRun(run_id.clone()).to_string(),
            "No workflow run found for runId \"r-1\""
        );
        assert_eq!(Rejected::input("offset", "x").field(), Some("offset"));
        assert_eq!(Rejected::Conflict("x".into()).field(), None);
    }

    #[test]
    fn preparation_rejections_keep_their_cause() {
        let routing: Rejected = Rejection::routing("missing routing: a@0").into();
        assert_eq!(routing, Rejected::Routing("missing routing: a@0".into()));
        let script: Rejected = Rejection::new("the mocked dry run failed: x").into();
        assert_eq!(
            script,
            Rejected::Script("the mocked dry run failed: x".into())
        );
        let parse: Rejected = Rejection::parse("SCRIPT_VALIDATION_ERROR: x").into();
        assert_eq!(parse, Rejected::Parse("SCRIPT_VALIDATION_ERROR: x".into()));
        let unreadable: Rejected = Rejection::unreadable("scriptPath x: not found").into();
        assert_eq!(
            unreadable,
            Rejected::Unreadable("scriptPath x: not found".into())
        );
    }

    #[test]
    fn a_corrupt_record_is_a_store_error_naming_the_run() {
        let run_id = RunId::parse("r-2").expect("valid id");
        let error = EngineError::from(corrupt(
            &run_id,
            "the routing snapshot does not parse",
            "expected a map",
        ));
        assert!(matches!(error, EngineError::Store(StoreError::Corrupt(_))));
        assert_eq!(
            error.to_string(),
            "run store is corrupt: run r-2: the routing snapshot does not parse: expected a map"
        );
    }
}
