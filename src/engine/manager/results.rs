//! Reading a completed run's result page by page, listing runs and deleting one.

use std::path::Path;

use crate::engine::manager::{Engine, EngineError, EngineResult, Rejected, ResultPage};
use crate::model::{RunId, RunRecord, RunStatus, RunSummary};

impl Engine {
    /// One page of the exact result JSON (engine.md 6.6).
    pub async fn result_page(
        &self,
        run_id: &RunId,
        offset: usize,
        max_bytes: usize,
    ) -> EngineResult<ResultPage> {
        let record = self.load_reconciled(run_id).await?;
        let text = exact_result(&record)?;
        let bytes = text.as_bytes();
        if offset > bytes.len() {
            return Err(EngineError::Rejected(Rejected::input(
                "offset",
                format!(
                    "offset {offset} is past the end of the result ({} bytes)",
                    bytes.len()
                ),
            )));
        }
        if offset < bytes.len() && !text.is_char_boundary(offset) {
            return Err(EngineError::Rejected(Rejected::input(
                "offset",
                format!(
                    "offset {offset} is inside a UTF-8 code point; continue at a previous endOffset"
                ),
            )));
        }
        let mut end = (offset + max_bytes).min(bytes.len());
        while end > offset && !text.is_char_boundary(end) {
            end -= 1;
        }
        Ok(ResultPage {
            action: "result",
            run_id: run_id.clone(),
            status: "completed",
            result_uri: format!("workflow://runs/{run_id}/result"),
            events_uri: format!("workflow://runs/{run_id}/events"),
            mime_type: "application/json",
            encoding: "utf-8",
            total_bytes: bytes.len(),
            offset,
            end_offset: end,
            has_more: end < bytes.len(),
            chunk: text[offset..end].to_owned(),
        })
    }

    /// Deletes a run that is not executing; the store deletes its control intents and its
    /// inline script copy with it.
    pub async fn delete(&self, run_id: &RunId) -> EngineResult<()> {
        let record = self.load_reconciled(run_id).await?;
        if record.status == RunStatus::Running || self.is_live(run_id) {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is running; stop it before deleting it"
            ))));
        }
        self.inner.store.delete_run(run_id).await?;
        Ok(())
    }

    pub async fn list(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> EngineResult<Vec<RunSummary>> {
        Ok(self.runs().list_runs(project_dir, limit).await?)
    }
}

/// The exact `JSON.stringify(result)` of a completed run.
pub(crate) fn exact_result(record: &RunRecord) -> EngineResult<String> {
    if record.status != RunStatus::Completed {
        return Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {} has no result: it is {}{}",
            record.run_id,
            record.status.as_str(),
            if record.status.is_terminal() {
                ""
            } else {
                " (read it again once it completes)"
            }
        ))));
    }
    match &record.result {
        Some(value) => Ok(value.to_string()),
        None => Err(EngineError::Rejected(Rejected::Conflict(format!(
            "run {} completed without a value",
            record.run_id
        )))),
    }
}
