//! What callers hand the engine and what it answers: run and resume requests, the
//! admission acknowledgement, and the engine's errors.

use std::path::PathBuf;

use serde_json::Value;

use crate::engine::prepare::{Rejection, ScriptInput};
use crate::model::{Limits, RunId, RunStatus, ScriptSource};
use crate::store::StoreError;

/// Failures of engine operations. `Rejected` is a tool error with nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Rejected(String),
    #[error("No workflow run found for runId \"{0}\"")]
    UnknownRun(RunId),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownRun(run_id) => EngineError::UnknownRun(run_id),
            other => EngineError::Store(other),
        }
    }
}

impl From<Rejection> for EngineError {
    fn from(rejection: Rejection) -> Self {
        EngineError::Rejected(rejection.message)
    }
}

pub type EngineResult<T> = Result<T, EngineError>;

/// Caller overrides of the run limits (clamped).
#[derive(Clone, Copy, Debug, Default)]
pub struct LimitOverrides {
    pub max_agents: Option<i64>,
    pub concurrency: Option<i64>,
    pub agent_retries: Option<i64>,
}

/// A request to start a run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub project_dir: PathBuf,
    pub script: ScriptInput,
    pub args: Value,
    pub limits: LimitOverrides,
}

/// A request to continue a run under the same id.
#[derive(Clone, Debug, Default)]
pub struct ResumeRequest {
    pub run_id: Option<RunId>,
    /// Checkpoint answers by call index.
    pub checkpoint_replies: Vec<(u32, Value)>,
    pub limits: LimitOverrides,
    /// The caller's idempotency key; a repeated key returns the first answer.
    pub operation_id: Option<String>,
}

/// The acknowledgement of an admitted run or resume.
#[derive(Clone, Debug)]
pub struct Admission {
    pub run_id: RunId,
    pub status: RunStatus,
    pub script_source: ScriptSource,
    pub script_file: PathBuf,
    pub limits: Limits,
    pub setup: Option<Value>,
    pub warnings: Vec<String>,
    /// Resume only: `{scriptRevised, generation, operationId}`.
    pub continuation: Option<Value>,
}
