//! A test-only store that advertises neither `cas` nor `fence`: the SQLite store under a
//! wrapper that says so. It exists so that `serve`'s refusal of a store without
//! compare-and-swap can be tested (SQLite itself honestly offers both between processes on
//! one host); the location scheme that opens it (`test-nocas:<path>`) is honoured only where
//! the test hooks are built in (debug builds and the `test-hooks` feature).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use crate::model::{
    CallRecord, CheckpointAnswer, EventRecord, Lease, OperationReceipt, RunId, RunRecord,
    RunSummary,
};
use crate::store::{
    CallTail, CallWrite, Capabilities, ControlIntent, Fence, IntentAck, IntentScope, ScriptChange,
    Store, StoreResult,
};

/// Every call goes to `inner`; only the capabilities differ.
pub struct WithoutCas {
    inner: Arc<dyn Store>,
}

impl WithoutCas {
    pub fn new(inner: Arc<dyn Store>) -> WithoutCas {
        WithoutCas { inner }
    }
}

#[async_trait]
impl Store for WithoutCas {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cas: false,
            fence: false,
            ..self.inner.capabilities()
        }
    }

    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        self.inner.create_run(record, lease).await
    }

    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        self.inner.load_run(run_id).await
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.inner.update_run(record, script, fence).await
    }

    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.inner.append_call(run_id, write, fence).await
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.inner.append_calls(run_id, writes, fence).await
    }

    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.inner.append_events(run_id, events, fence).await
    }

    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.calls(run_id).await
    }

    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.replay_pool(run_id).await
    }

    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.latest_calls(run_id).await
    }

    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
        self.inner.call_tail(run_id, limit).await
    }

    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
        self.inner.call_tail_rows(run_id, limit).await
    }

    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.inner
            .record_call_total(run_id, generation, total, fence)
            .await
    }

    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.checkpoint_calls(run_id).await
    }

    async fn events(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        self.inner.events(run_id, after, limit).await
    }

    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64> {
        self.inner.last_event_seq(run_id).await
    }

    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)> {
        self.inner.log_tail(run_id, limit).await
    }

    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
    ) -> StoreResult<CheckpointAnswer> {
        self.inner.put_checkpoint_answer(run_id, answer).await
    }

    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        self.inner.checkpoint_answers(run_id).await
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
    ) -> StoreResult<OperationReceipt> {
        self.inner.put_receipt(run_id, receipt).await
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        self.inner.receipt(run_id, operation_id).await
    }

    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        self.inner.lease(run_id).await
    }

    async fn clock_ms(&self) -> StoreResult<i64> {
        self.inner.clock_ms().await
    }

    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool> {
        self.inner.acquire_lease(run_id, expected, lease).await
    }

    async fn renew_lease(&self, run_id: &RunId, token: &str, until: i64) -> StoreResult<()> {
        self.inner.renew_lease(run_id, token, until).await
    }

    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()> {
        self.inner.release_lease(run_id, token).await
    }

    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>> {
        self.inner.list_runs(project_dir, limit).await
    }

    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>> {
        self.inner.active_runs(project_dir).await
    }

    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>> {
        self.inner.runs_with_script(script_file).await
    }

    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        self.inner.run_caller(run_id).await
    }

    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool> {
        self.inner.set_run_caller(run_id, expected, caller).await
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        self.inner.delete_run(run_id).await
    }

    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent> {
        self.inner.put_intent(intent).await
    }

    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>> {
        self.inner.intent(run_id, op).await
    }

    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>> {
        self.inner.pending_intents(scope).await
    }

    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
    ) -> StoreResult<IntentAck> {
        self.inner.acknowledge_intent(run_id, op, ack).await
    }

    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>> {
        self.inner.intent_ack(run_id, op).await
    }

    async fn create_script_copy(
        &self,
        project_dir: &Path,
        run_id: &RunId,
        text: &str,
    ) -> StoreResult<PathBuf> {
        self.inner
            .create_script_copy(project_dir, run_id, text)
            .await
    }

    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
        self.inner.delete_script_copy(project_dir, run_id).await
    }
}
