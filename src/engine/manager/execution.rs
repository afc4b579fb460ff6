//! Executing a generation: the live entry, the driver task, recording its outcome, and
//! reconciling a run whose owner died.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::engine::driver::{
    self, Control, DriverSetup, IsolationSetup, Persistence, TraceSetup, Waited,
};
use crate::engine::events::{EventLog, RunNotice};
use crate::engine::journal::ReplayPool;
use crate::engine::manager::{Engine, EngineError, EngineResult, LiveRun, Rejected};
use crate::engine::script;
use crate::engine::status::LiveView;
use crate::model::{
    CallKind, CallOrigin, CheckpointAnswer, EndSummary, Lease, PauseReason, RunId, RunRecord,
    RunStatus,
};
use crate::store::{Fence, LeasePolicy, ScriptChange, StoreError};
use crate::telemetry::TraceContext;
use crate::timers;

/// The `error_code` of a run whose executing replica's lease lapsed (`LeasePolicy::Ttl`):
/// it stopped renewing (died, stalled or lost the store). The run is resumable.
pub(crate) const LEASE_EXPIRED: &str = "LEASE_EXPIRED";
use crate::util::now_ms;
use crate::util::sync::Lock;

/// What a generation starts from, besides its record and lease.
pub(super) struct Start {
    /// Where its replay pool, last event and next settlement ordinal come from.
    history: History,
    /// Checkpoint answers a resume brought.
    answers: Vec<CheckpointAnswer>,
    /// The script's result when preparation already computed it ([`driver::settle_known`]).
    known: Option<Option<Value>>,
    /// The caller's trace context, which the run span joins.
    remote: Option<TraceContext>,
}

/// A generation's history in the store.
enum History {
    /// Read from the store, but for the journal's rows a resume already read (`Some`).
    Stored(Option<Box<ReplayPool>>),
    /// None yet: the run row admission created a moment ago (generation 1, no call row, no
    /// event), so the pool is empty and the sequence and ordinal start at 0, unread.
    Fresh,
}

impl Engine {
    /// Starts (or restarts) execution of `record`'s current generation under `lease`.
    pub(super) fn spawn_execution(
        &self,
        record: RunRecord,
        lease: Lease,
        pool: Option<ReplayPool>,
        answers: Vec<CheckpointAnswer>,
    ) {
        self.spawn_generation(
            record,
            lease,
            History::Stored(pool.map(Box::new)),
            answers,
            None,
            None,
        );
    }

    /// Starts the first generation of a run admission just stored, in the caller's trace
    /// when it named one.
    pub(super) fn spawn_admitted(
        &self,
        record: RunRecord,
        lease: Lease,
        remote: Option<TraceContext>,
    ) {
        self.spawn_generation(
            record,
            lease,
            History::Stored(None),
            Vec::new(),
            None,
            remote,
        );
    }

    /// [`Engine::spawn_execution`] of a new run whose result preparation already knows
    /// ([`crate::engine::prepare::Prepared::known_result`]): the generation settles with it,
    /// and no VM runs the script a second time.
    pub(super) fn spawn_known(
        &self,
        record: RunRecord,
        lease: Lease,
        result: Option<Value>,
        remote: Option<TraceContext>,
    ) {
        self.spawn_generation(
            record,
            lease,
            History::Fresh,
            Vec::new(),
            Some(result),
            remote,
        );
    }

    fn spawn_generation(
        &self,
        record: RunRecord,
        lease: Lease,
        history: History,
        answers: Vec<CheckpointAnswer>,
        known: Option<Option<Value>>,
        remote: Option<TraceContext>,
    ) {
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (settled_tx, settled_rx) = watch::channel(false);
        let view = Arc::new(Mutex::new(LiveView {
            current_phase: record.current_phase.clone(),
            usage: record.token_usage,
            ..LiveView::starting()
        }));
        self.inner.live.locked().insert(
            record.run_id.clone(),
            LiveRun {
                generation: record.generation,
                lease_token: lease.token.clone(),
                control: control_tx,
                view: view.clone(),
                settled: settled_rx,
            },
        );
        let engine = self.clone();
        self.inner.tracker.spawn(async move {
            engine
                .execute(
                    record,
                    lease,
                    Start {
                        history,
                        answers,
                        known,
                        remote,
                    },
                    view,
                    control_rx,
                )
                .await;
            let _ = settled_tx.send(true);
        });
    }

    /// Runs the generation from `start`.
    pub(super) async fn execute(
        &self,
        mut record: RunRecord,
        lease: Lease,
        start: Start,
        view: Arc<Mutex<LiveView>>,
        control: mpsc::UnboundedReceiver<Control>,
    ) {
        let run_id = record.run_id.clone();
        let Start {
            history,
            answers,
            known,
            remote,
        } = start;
        let setup = self
            .driver_setup(&mut record, &lease, history, answers, view)
            .await;
        let mut closing = driver::Closing::default();
        if let Some(mut setup) = setup {
            let kept = self.kept_trace(&run_id, record.generation).await;
            if kept.is_some() {
                setup.trace.waited = self.waited(&run_id, setup.last_event_seq).await;
            }
            let keep = kept.is_none();
            setup.trace.remote = kept.or(remote);
            let mut outcome = match known {
                Some(result) => driver::settle_known(setup, result).await,
                None => driver::run(setup, control).await,
            };
            if keep && let Some(trace) = &outcome.trace {
                self.keep_trace(&run_id, trace).await;
            }
            record_outcome(&mut record, &outcome);
            if outcome.lease_lost {
                // Another execution holds the run now: its row and lease are not ours to
                // write or release.
                tracing::warn!(run = %run_id, "generation {} lost the run's lease; its outcome is not recorded", record.generation);
                self.finish_live(&run_id, record.generation, record.status, false);
                return;
            }
            closing = outcome.closing.take().unwrap_or_default();
        }
        // A usage-limit pause with a known reset schedules the run's automatic resume in the
        // same write; any other ending leaves nothing scheduled.
        record.auto_resume.due_at = timers::schedule(&record, self.inner.config.auto_resume)
            .and_then(|decided| decided.due_at());
        let written = self.end_generation(&mut record, &lease, closing).await;
        if written && record.auto_resume.due_at.is_some() {
            self.timer_scheduled();
        }
        let result = written && record.result.is_some();
        self.finish_live(&run_id, record.generation, record.status, result);
    }

    /// Writes the generation's end: its last events and count, its outcome and the lease's
    /// release, in one write (one transaction on SQLite). Refused by the fence, the run is
    /// another execution's and nothing of it is written. Failing otherwise, the outcome is
    /// written alone, naming the failure, as for a generation whose last events were lost;
    /// should that fail too, the lease is still given up, so that nothing waits for a lease
    /// no execution holds any more. Whether the outcome was written.
    async fn end_generation(
        &self,
        record: &mut RunRecord,
        lease: &Lease,
        closing: driver::Closing,
    ) -> bool {
        let store = &self.inner.store;
        let run_id = &record.run_id;
        let ended = store
            .end_generation(record, &lease.token, &closing.events, closing.call_total)
            .await;
        let error = match ended {
            Ok(()) => return true,
            Err(StoreError::Fenced(_)) => {
                tracing::warn!(run = %run_id, "generation {} lost the run's lease; its outcome is not recorded", record.generation);
                return false;
            }
            Err(error) => error,
        };
        tracing::error!(run = %run_id, "cannot write the end of the run's generation: {error}");
        record.error_message = Some(format!("run store write failed: {error}"));
        match store.record_outcome(record, &lease.token).await {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(run = %run_id, "cannot record the run's outcome: {error}");
                let _ = store.release_lease(run_id, &lease.token).await;
                false
            }
        }
    }

    /// The trace context an earlier generation of the run kept, which this generation's run
    /// span continues; never read when telemetry is off or for a first generation.
    async fn kept_trace(&self, run_id: &RunId, generation: u32) -> Option<TraceContext> {
        if generation < 2 || !self.telemetry().enabled() {
            return None;
        }
        match self.inner.store.run_trace(run_id).await {
            Ok(kept) => kept.flatten().map(|traceparent| TraceContext {
                traceparent,
                tracestate: None,
            }),
            Err(error) => {
                tracing::warn!(run = %run_id, "cannot read the run's trace context: {error}");
                None
            }
        }
    }

    /// The pause this generation ends, from the last `paused` event among the run's newest
    /// few; `None` when there is none there (or it cannot be read: the span is left out).
    async fn waited(&self, run_id: &RunId, last_seq: u64) -> Option<Waited> {
        const NEWEST: u32 = 8;
        let after = last_seq.saturating_sub(u64::from(NEWEST));
        let events = self.inner.store.events(run_id, after, NEWEST).await.ok()?;
        let paused = events
            .iter()
            .rev()
            .find(|event| event.event.event_type().as_deref() == Some("paused"))?;
        let since = u64::try_from(paused.timestamp).ok()?;
        Some(Waited {
            since: std::time::UNIX_EPOCH + std::time::Duration::from_millis(since),
            reason: paused.event.value()["reason"].as_str().map(str::to_owned),
        })
    }

    /// Keeps the first traced generation's context with the run. A failure costs the trace's
    /// continuity only, never the run.
    async fn keep_trace(&self, run_id: &RunId, trace: &TraceContext) {
        if let Err(error) = self
            .inner
            .store
            .set_run_trace(run_id, &trace.traceparent)
            .await
        {
            tracing::warn!(run = %run_id, "cannot keep the run's trace context: {error}");
        }
    }

    /// What the generation's driver needs, read from the store. `None` when the generation
    /// cannot start: `record` then says why (paused when the store could not be read,
    /// failed when the script no longer passes its checks).
    async fn driver_setup(
        &self,
        record: &mut RunRecord,
        lease: &Lease,
        history: History,
        answers: Vec<CheckpointAnswer>,
        view: Arc<Mutex<LiveView>>,
    ) -> Option<DriverSetup> {
        let store = &self.inner.store;
        let run_id = record.run_id.clone();
        let stored_state = async {
            let (pool, last_seq, next_settlement) = match history {
                History::Fresh => (ReplayPool::default(), 0, 0),
                History::Stored(pool) => (
                    match pool {
                        Some(pool) => *pool,
                        None => ReplayPool::new(store.replay_pool(&run_id).await?, false),
                    },
                    store.last_event_seq(&run_id).await?,
                    store.next_settlement_ordinal(&run_id).await?,
                ),
            };
            Ok::<_, StoreError>((pool, last_seq, next_settlement))
        }
        .await;
        let (pool, last_seq, next_settlement) = match stored_state {
            Ok(state) => state,
            Err(error) => {
                tracing::error!(run = %run_id, "cannot start execution: {error}");
                record.status = RunStatus::Paused;
                record.pause_reason = Some(PauseReason::Interrupted);
                record.error_message = Some(format!("could not start: {error}"));
                return None;
            }
        };
        let body = match script::analyze(record.script.as_bytes()) {
            Ok(analyzed) => analyzed.body,
            Err(error) => {
                record.status = RunStatus::Failed;
                record.error_code = Some("SCRIPT_VALIDATION_ERROR".into());
                record.error_message = Some(error.message);
                record.updated_at = now_ms();
                return None;
            }
        };
        Some(DriverSetup {
            mock_answers: None,
            run_id: run_id.clone(),
            generation: record.generation,
            body,
            args: record.args.clone(),
            cwd: record.cwd.clone(),
            phases: record.phases.clone(),
            meta_model: record
                .meta
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
            limits: record.limits,
            routing: record.routing.clone(),
            backends: self.inner.backends.clone(),
            runner: self.inner.runner.clone(),
            persistence: Persistence::Store {
                store: store.clone(),
                lease_token: lease.token.clone(),
                lease_policy: self.inner.config.lease_policy,
            },
            pool,
            answers,
            last_event_seq: last_seq,
            next_settlement,
            agent_timeout: self.inner.config.agent_timeout,
            prompt_cache_hold: self.inner.config.prompt_cache_hold,
            vm_limits: self.inner.config.vm_limits,
            broker: self.inner.broker.clone(),
            notices: Some(self.inner.notices.clone()),
            usage: record.token_usage,
            current_phase: record.current_phase.clone(),
            nested: Some(self.nested_resolver(&record.project_dir, &run_id)),
            files: Arc::new(record.files.clone()),
            live: view,
            isolation: IsolationSetup {
                workspaces: self.inner.workspaces.get().cloned(),
                base: record.workspace.clone(),
                project_dir: record.project_dir.clone(),
            },
            trace: TraceSetup {
                telemetry: self.telemetry(),
                remote: None,
                workflow: record.workflow_name.clone(),
                project: record.project_dir.to_string_lossy().into_owned(),
                waited: None,
            },
        })
    }

    /// Marks `run_id` as being started here until the guard drops: from before its record
    /// says running until its generation is live (or the start failed). Without it another
    /// request in that window (a concurrent admission counting its project's active runs, a
    /// status read) would find a running run no live generation of this process holds, and
    /// record it as interrupted under the generation about to start.
    pub(super) fn starting(&self, run_id: &RunId) -> Starting {
        self.inner.starting.locked().insert(run_id.clone());
        Starting {
            engine: self.clone(),
            run_id: run_id.clone(),
        }
    }

    /// Ends `run_id`'s live generation `generation`, settled as `status`; `result` says
    /// whether the record this process wrote holds a result.
    pub(super) fn finish_live(
        &self,
        run_id: &RunId,
        generation: u32,
        status: RunStatus,
        result: bool,
    ) {
        let mut live = self.inner.live.locked();
        if live
            .get(run_id)
            .is_some_and(|entry| entry.generation == generation)
        {
            live.remove(run_id);
        }
        drop(live);
        self.inner.freed.notify_one();
        self.inner.notices.lifecycle(RunNotice::Settled {
            run_id: run_id.clone(),
            status: status.as_str().to_owned(),
            result,
        });
    }

    /// Loads a run, turning a pending/running run whose owner died into `paused/interrupted`.
    pub async fn load_reconciled(&self, run_id: &RunId) -> EngineResult<RunRecord> {
        let record = self.inner.store.load_run(run_id).await?;
        if record.status != RunStatus::Running
            || self.is_live(run_id)
            || self.inner.starting.locked().contains(run_id)
        {
            return Ok(record);
        }
        let lease = self.inner.store.lease(run_id).await?;
        let ours = self.new_lease().await?;
        if lease
            .as_ref()
            .is_some_and(|lease| self.held_elsewhere(lease, ours.acquired_at))
        {
            return Ok(record);
        }
        // The owner is gone (or, between replicas, its lease lapsed): take the lease, record
        // the interruption, let go again.
        if !self
            .inner
            .store
            .acquire_lease(run_id, lease.as_ref().map(|l| l.token.as_str()), &ours)
            .await?
        {
            return Ok(self.inner.store.load_run(run_id).await?);
        }
        let mut record = self.inner.store.load_run(run_id).await?;
        if record.status == RunStatus::Running {
            record.status = RunStatus::Paused;
            record.pause_reason = Some(PauseReason::Interrupted);
            record.updated_at = now_ms();
            if let LeasePolicy::Ttl(ttl) = self.inner.config.lease_policy {
                // No process to ask between replicas: the holder stopped renewing.
                record.error_code = Some(LEASE_EXPIRED.to_owned());
                record.error_message = Some(format!(
                    "the replica executing this run stopped renewing its lease (TTL {ttl:?}); resume it on a live replica"
                ));
            }
            let calls = self.inner.store.calls(run_id).await?;
            let mut usage = crate::model::Usage::default();
            for call in &calls {
                usage.add(&call.usage);
            }
            record.token_usage = usage;
            record.summary = Some(reconciled_summary(&record, &calls));
            // The dead generation never recorded its call count: record it once here, so
            // status need not count its rows.
            let settled = calls
                .iter()
                .filter(|c| c.generation == record.generation && c.kind != CallKind::Checkpoint)
                .count() as u64;
            if settled > 0 {
                self.inner
                    .store
                    .record_call_total(run_id, record.generation, settled, Fence(&ours.token))
                    .await?;
            }
            self.record_cold(
                &record,
                "paused",
                json!({"reason": "interrupted"}),
                &ours.token,
            )
            .await?;
        }
        self.inner.store.release_lease(run_id, &ours.token).await?;
        Ok(record)
    }

    /// Settles a run that no execution holds: one event on its stream, then the run row,
    /// both fenced by the lease the caller took for the change.
    pub(super) async fn record_cold(
        &self,
        record: &RunRecord,
        event: &str,
        fields: Value,
        lease_token: &str,
    ) -> EngineResult<()> {
        let run_id = &record.run_id;
        let last = self.inner.store.last_event_seq(run_id).await?;
        let mut events = EventLog::new(run_id.clone(), last, Some(self.inner.notices.clone()));
        events.push(event, "root", fields);
        self.inner
            .store
            .append_events(run_id, &events.take(), Fence(lease_token))
            .await?;
        self.inner
            .store
            .update_run(record, ScriptChange::Unchanged, Fence(lease_token))
            .await?;
        Ok(())
    }

    /// A lease of this process on a run no execution holds, taken by CAS from whoever held
    /// it last, for a change made without executing (setup answers, cold stops).
    pub(super) async fn take_free_lease(&self, run_id: &RunId) -> EngineResult<Lease> {
        let lease = self.new_lease().await?;
        let previous = self.inner.store.lease(run_id).await?;
        if !self
            .inner
            .store
            .acquire_lease(run_id, previous.as_ref().map(|l| l.token.as_str()), &lease)
            .await?
        {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is being changed by another process"
            ))));
        }
        Ok(lease)
    }
}

/// How long a run has taken up to its `updated_at`.
fn duration_ms(record: &RunRecord) -> u64 {
    u64::try_from(record.updated_at.saturating_sub(record.started_at)).unwrap_or(0)
}

/// The summary of a run whose executing generation died, from its rows (which the
/// reconciliation reads anyway): the dead generation's calls, every generation's spend.
fn reconciled_summary(record: &RunRecord, calls: &[crate::model::CallRecord]) -> EndSummary {
    let mut tally = driver::Tally::default();
    for call in calls {
        if call.generation == record.generation {
            tally.settled(call);
        } else if call.kind == CallKind::Agent && call.origin != CallOrigin::JournalReplay {
            tally.spend(call);
        }
    }
    tally.summary(record.generation, duration_ms(record), None)
}

/// The run row after a generation: its outcome, usage, phase and summary, and a failed store
/// write named in its error message.
fn record_outcome(record: &mut RunRecord, outcome: &driver::Outcome) {
    record.status = outcome.status;
    record.pause_reason = outcome.pause_reason;
    record.error_code = outcome.error_code.clone();
    record.error_message = outcome.error_message.clone();
    record.result = outcome.result.clone();
    record.auth_context = outcome.auth_context.clone();
    record.reset_hint = outcome.reset_hint.clone();
    record.reset_at = outcome.reset_at;
    record.checkpoint_context = outcome.checkpoint_context.clone();
    record.token_usage = outcome.usage;
    record.current_phase = outcome
        .current_phase
        .clone()
        .or(record.current_phase.clone());
    record.updated_at = now_ms();
    // Earlier generations' spend comes from the summary the last one left on the record.
    record.summary = Some(outcome.tally.summary(
        record.generation,
        duration_ms(record),
        record.summary.as_ref(),
    ));
    if let Some(error) = &outcome.store_error {
        record.error_message = Some(format!("run store write failed: {error}"));
    }
}

/// A run being started by this process ([`Engine::starting`]); dropping it ends the mark.
pub(super) struct Starting {
    engine: Engine,
    run_id: RunId,
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.engine.inner.starting.locked().remove(&self.run_id);
    }
}
