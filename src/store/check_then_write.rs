//! A store wrapper for a backend that cannot fence a write on the lease in the same atomic
//! step (`Capabilities::fence` false): before each execution write, the lease is read and
//! the write refused (`StoreError::Fenced`) unless the writer's token still holds it. Racy by
//! nature (docs/serve.md, "Replicas"): a takeover between the check and the write lets that
//! one write land. Reads and the lease's own compare-and-swap pass straight through; a
//! generation's two ending writes keep the `Endings` defaults, so each of their halves is
//! checked. The composition root (`app::replicate`) puts it in front of such a store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::{
    AnswerReads, Answers, CallReads, CallTail, CallWrite, Calls, Capabilities, Capable,
    ControlIntent, Endings, EventReads, Events, Fence, Housekeeping, IntentAck, IntentReads,
    IntentScope, Intents, LeaseReads, Leases, PastRunsOf, RunCounts, RunQueue, RunReads, Runs,
    ScriptChange, ScriptCopies, Store, StoreError, StoreResult,
};
use crate::model::{
    CallRecord, CheckpointAnswer, EndSummary, Enqueued, EventRecord, Lease, OpenSession,
    OperationReceipt, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, RunId, RunRecord,
    RunSummary,
};

/// `inner` with every fenced write checked against the lease first.
pub(crate) struct CheckThenWrite {
    inner: Arc<dyn Store>,
    /// What this store advertises: `inner`'s, or (the test-only store) less.
    capabilities: Capabilities,
}

impl CheckThenWrite {
    pub(crate) fn new(inner: Arc<dyn Store>) -> CheckThenWrite {
        let capabilities = inner.capabilities();
        CheckThenWrite {
            inner,
            capabilities,
        }
    }

    /// The test-only store that advertises neither `cas` nor `fence` (SQLite itself honestly
    /// offers both between processes on one host), so that `serve`'s refusal of a store
    /// without compare-and-swap can be tested. Its location scheme (`test-nocas:<path>`) is
    /// honoured only where the test hooks are built in (debug builds and the `test-hooks`
    /// feature).
    #[cfg(any(debug_assertions, feature = "test-hooks"))]
    pub(crate) fn without_cas(inner: Arc<dyn Store>) -> CheckThenWrite {
        let capabilities = Capabilities {
            cas: false,
            fence: false,
            ..inner.capabilities()
        };
        CheckThenWrite {
            inner,
            capabilities,
        }
    }

    /// Refuses the write of `fence` unless its token holds the lease of `run_id` now.
    async fn check(&self, run_id: &RunId, fence: Fence<'_>) -> StoreResult<()> {
        match self.inner.lease(run_id).await? {
            Some(lease) if lease.token == fence.0 => Ok(()),
            _ => Err(StoreError::Fenced(run_id.clone())),
        }
    }
}

impl Capable for CheckThenWrite {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
}

#[async_trait]
impl RunReads for CheckThenWrite {
    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        self.inner.load_run(run_id).await
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

    async fn past_summaries(&self, of: PastRunsOf<'_>, limit: u32) -> StoreResult<Vec<EndSummary>> {
        self.inner.past_summaries(of, limit).await
    }

    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        self.inner.run_caller(run_id).await
    }

    async fn run_trace(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        self.inner.run_trace(run_id).await
    }

    async fn run_version(&self, run_id: &RunId) -> StoreResult<Option<crate::store::RunVersion>> {
        self.inner.run_version(run_id).await
    }
}

#[async_trait]
impl Runs for CheckThenWrite {
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        self.inner.create_run(record, lease).await
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(&record.run_id, fence).await?;
        self.inner.update_run(record, script, fence).await
    }

    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool> {
        self.inner.set_run_caller(run_id, expected, caller).await
    }

    // Unfenced, as in every backend: the context only names spans.
    async fn set_run_trace(&self, run_id: &RunId, traceparent: &str) -> StoreResult<bool> {
        self.inner.set_run_trace(run_id, traceparent).await
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        self.inner.delete_run(run_id).await
    }
}

#[async_trait]
impl CallReads for CheckThenWrite {
    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.calls(run_id).await
    }

    async fn next_settlement_ordinal(&self, run_id: &RunId) -> StoreResult<u64> {
        self.inner.next_settlement_ordinal(run_id).await
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

    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.inner.checkpoint_calls(run_id).await
    }

    async fn open_sessions(&self, run_id: &RunId) -> StoreResult<Vec<OpenSession>> {
        self.inner.open_sessions(run_id).await
    }

    async fn status_call_tail(
        &self,
        run_id: &RunId,
        limit: u32,
        count: bool,
    ) -> StoreResult<crate::store::SummaryTail> {
        self.inner.status_call_tail(run_id, limit, count).await
    }
}

#[async_trait]
impl Calls for CheckThenWrite {
    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner.append_call(run_id, write, fence).await
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner.append_calls(run_id, writes, fence).await
    }

    async fn journal_session(
        &self,
        run_id: &RunId,
        session: &OpenSession,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner.journal_session(run_id, session, fence).await
    }

    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner
            .record_call_total(run_id, generation, total, fence)
            .await
    }

    async fn set_aside_calls(
        &self,
        run_id: &RunId,
        rows: &[(u32, u32)],
        by: u32,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner.set_aside_calls(run_id, rows, by, fence).await
    }
}

#[async_trait]
impl EventReads for CheckThenWrite {
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
}

#[async_trait]
impl Events for CheckThenWrite {
    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.check(run_id, fence).await?;
        self.inner.append_events(run_id, events, fence).await
    }
}

#[async_trait]
impl AnswerReads for CheckThenWrite {
    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        self.inner.checkpoint_answers(run_id).await
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        self.inner.receipt(run_id, operation_id).await
    }
}

#[async_trait]
impl Answers for CheckThenWrite {
    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
        fence: Fence<'_>,
    ) -> StoreResult<CheckpointAnswer> {
        self.check(run_id, fence).await?;
        self.inner
            .put_checkpoint_answer(run_id, answer, fence)
            .await
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
        fence: Fence<'_>,
    ) -> StoreResult<OperationReceipt> {
        self.check(run_id, fence).await?;
        self.inner.put_receipt(run_id, receipt, fence).await
    }
}

#[async_trait]
impl LeaseReads for CheckThenWrite {
    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        self.inner.lease(run_id).await
    }

    async fn clock_ms(&self) -> StoreResult<i64> {
        self.inner.clock_ms().await
    }
}

#[async_trait]
impl Leases for CheckThenWrite {
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
}

#[async_trait]
impl IntentReads for CheckThenWrite {
    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>> {
        self.inner.intent(run_id, op).await
    }

    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>> {
        self.inner.pending_intents(scope).await
    }

    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>> {
        self.inner.intent_ack(run_id, op).await
    }
}

#[async_trait]
impl Intents for CheckThenWrite {
    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent> {
        self.inner.put_intent(intent).await
    }

    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
        fence: Option<Fence<'_>>,
    ) -> StoreResult<IntentAck> {
        if let Some(fence) = fence {
            self.check(run_id, fence).await?;
        }
        self.inner.acknowledge_intent(run_id, op, ack, fence).await
    }
}

#[async_trait]
impl ScriptCopies for CheckThenWrite {
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

    async fn script_copy_place(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf> {
        self.inner.script_copy_place(project_dir, run_id).await
    }

    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
        self.inner.delete_script_copy(project_dir, run_id).await
    }
}

#[async_trait]
impl Housekeeping for CheckThenWrite {
    async fn run_counts(&self) -> StoreResult<RunCounts> {
        self.inner.run_counts().await
    }

    async fn terminal_before(&self, before_ms: i64, limit: u32) -> StoreResult<Vec<RunId>> {
        self.inner.terminal_before(before_ms, limit).await
    }

    async fn resumes_due(&self, until_ms: i64, limit: u32) -> StoreResult<Vec<(RunId, i64)>> {
        self.inner.resumes_due(until_ms, limit).await
    }
}

/// The queue is not run state under a lease: every call goes straight through.
#[async_trait]
impl RunQueue for CheckThenWrite {
    async fn enqueue(&self, start: &QueuedStart, bound: u64) -> StoreResult<Enqueued> {
        self.inner.enqueue(start, bound).await
    }

    async fn queued(&self, run_id: &RunId) -> StoreResult<Option<QueuedEntry>> {
        self.inner.queued(run_id).await
    }

    async fn queue_stats(&self) -> StoreResult<QueueStats> {
        self.inner.queue_stats().await
    }

    async fn claim_queued(
        &self,
        claimer: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<Option<QueuedStart>> {
        self.inner.claim_queued(claimer, now_ms, until_ms).await
    }

    async fn unclaim_queued(&self, run_id: &RunId, claimer: &str) -> StoreResult<()> {
        self.inner.unclaim_queued(run_id, claimer).await
    }

    async fn remove_queued(&self, run_id: &RunId) -> StoreResult<Option<QueueOutcome>> {
        self.inner.remove_queued(run_id).await
    }

    async fn end_queued(
        &self,
        run_id: &RunId,
        outcome: QueueOutcome,
        message: &str,
        now_ms: i64,
    ) -> StoreResult<bool> {
        self.inner
            .end_queued(run_id, outcome, message, now_ms)
            .await
    }

    async fn prune_queue(&self, before_ms: i64) -> StoreResult<u64> {
        self.inner.prune_queue(before_ms).await
    }
}

#[async_trait]
impl Endings for CheckThenWrite {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;
    use crate::store::contract::{RUN, assert_fenced, event, lease, run_id, run_record};

    #[tokio::test]
    async fn a_write_whose_token_no_longer_holds_the_lease_is_refused() {
        let folder = tempfile::tempdir().unwrap();
        let inner = Arc::new(SqliteStore::open(folder.path()).unwrap());
        let store = CheckThenWrite::new(inner);
        let id = run_id(RUN);
        let record = run_record(RUN, "/project", 1);
        store.create_run(&record, &lease("first")).await.unwrap();
        store
            .append_events(&id, &[event(1, "started")], Fence("first"))
            .await
            .expect("the holder writes");
        assert!(
            store
                .acquire_lease(&id, Some("first"), &lease("second"))
                .await
                .unwrap()
        );
        assert_fenced(
            store
                .append_events(&id, &[event(2, "late")], Fence("first"))
                .await,
            "the taken-over holder's late events",
        );
        assert_fenced(
            store
                .update_run(&record, ScriptChange::Unchanged, Fence("first"))
                .await,
            "the taken-over holder's outcome",
        );
        // A generation's ending is the two checked writes, not the inner store's own.
        assert_fenced(
            store
                .close_generation(&id, &[event(2, "late")], Some((1, 0)), Fence("first"))
                .await,
            "the taken-over holder's closing events",
        );
        assert_fenced(
            store.record_outcome(&record, "first").await,
            "the taken-over holder's recorded outcome",
        );
        assert_eq!(store.last_event_seq(&id).await.unwrap(), 1);
        store
            .update_run(&record, ScriptChange::Unchanged, Fence("second"))
            .await
            .expect("the successor writes");
    }
}
