//! The caller tag of a run (`RunRecord::caller`): an opaque owner key a front end stores
//! with the run and the engine never interprets. Reading it is one narrow store lookup, and
//! changing it is the store's compare-and-set, so a new process reclaims a run it never
//! started exactly once.

use crate::engine::manager::{Engine, EngineResult};
use crate::model::RunId;

impl Engine {
    /// The caller tag of `run_id`: `None` when there is no such run, `Some(None)` when the
    /// run has no tag. Reads neither the run row's JSON nor anything else of the run.
    pub async fn run_caller(&self, run_id: &RunId) -> EngineResult<Option<Option<String>>> {
        Ok(self.runs().run_caller(run_id).await?)
    }

    /// Replaces the caller tag of `run_id` with `caller` if it is `expected` now: `true`
    /// when this call made the change, `false` when the tag was something else by then (or
    /// there is no such run). Of several processes reclaiming one run with the same
    /// expectation, exactly one gets `true`.
    pub async fn reclaim(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> EngineResult<bool> {
        Ok(self
            .inner
            .store
            .set_run_caller(run_id, expected, caller)
            .await?)
    }
}
