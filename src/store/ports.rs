//! The store's ports, one trait per concern, so that a caller names what it touches: runs,
//! calls (the journal, with the sessions live calls opened), events, checkpoint answers and receipts, leases, control intents,
//! script copies, housekeeping, the folder server's queue of starts and the two writes that end a generation. A concern that has
//! readers has a read-only half (`RunReads`, `CallReads`, `EventReads`, `AnswerReads`,
//! `LeaseReads`, `IntentReads`) which its writing trait extends: status and inspection take
//! only those halves, so they cannot write. [`Store`](super::Store) is every trait at once and
//! is implemented for anything that implements them all; the engine holds one
//! `Arc<dyn Store>`, and a `&dyn Store` coerces to any of these traits.
//!
//! A default method here is written over the other methods its trait can see; a backend
//! overrides it where it answers more cheaply (SQLite makes a generation's ending one
//! transaction, PostgreSQL counts runs with one query).

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{
    CallSummary, CallTail, CallWrite, Capabilities, ControlIntent, Fence, IntentAck, IntentScope,
    RunCounts, RunVersion, ScriptChange, StoreResult, SummaryTail, counts,
};
use crate::model::{
    CallRecord, CheckpointAnswer, EndSummary, Enqueued, EventRecord, Lease, OpenSession,
    OperationReceipt, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, RunId, RunRecord,
    RunSummary,
};

/// Whose earlier runs [`RunReads::past_summaries`] reads: one workflow's.
#[derive(Clone, Copy, Debug)]
pub enum PastRunsOf<'a> {
    /// The runs whose recorded script file is this path.
    Script(&'a Path),
    /// The runs of an inline script: a project's runs with this `meta.name`, among the
    /// project's newest `within` runs (and any that started in the same millisecond as the
    /// last of them).
    Named {
        project_dir: &'a Path,
        name: &'a str,
        within: u32,
    },
}

/// What a backend promises beyond the signatures ([`Capabilities`]).
pub trait Capable: Send + Sync {
    fn capabilities(&self) -> Capabilities;
}

/// Reading runs: one run's record, its caller tag and version, and the listings.
#[async_trait]
pub trait RunReads: Send + Sync {
    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord>;

    /// Runs, newest `started_at` first, optionally of one project, at most `limit`.
    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>>;

    /// Runs of a project whose status is pending or running, oldest first: what admission
    /// counts against the per-project cap (after reconciling runs whose holder died).
    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>>;

    /// Runs whose recorded script file is `script_file`, newest first.
    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>>;

    /// What one workflow's newest runs spent: of the `limit` newest runs `of` names, the
    /// summaries of those a generation has ended or paused (a run gets its summary then),
    /// newest first. Reads no call rows, whatever the runs' sizes.
    async fn past_summaries(&self, of: PastRunsOf<'_>, limit: u32) -> StoreResult<Vec<EndSummary>>;

    /// The caller tag of `run_id` (`RunRecord::caller`): `None` when there is no such run,
    /// `Some(None)` for a run stored without one. One indexed lookup, nothing decoded, so a
    /// front end can check who owns a run before it reads anything else of it.
    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>>;

    /// The `traceparent` of the run's first traced generation (`set_run_trace`): `None` when
    /// there is no such run, `Some(None)` for a run never traced.
    async fn run_trace(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>>;

    /// The run's status and change counter ([`RunVersion`]): one indexed read, so that a
    /// cached `status` answer of a run that is not running can be checked on every call.
    /// `Ok(None)` when this backend keeps no counter (this default: no existing method can
    /// tell that nothing changed), and callers then must not cache. Fails with `UnknownRun`
    /// for a run the store does not have, where the backend keeps a counter.
    async fn run_version(&self, run_id: &RunId) -> StoreResult<Option<RunVersion>> {
        let _ = run_id;
        Ok(None)
    }
}

/// Writing runs: admission, the row's rewrites, the caller tag's compare-and-set, deletion.
#[async_trait]
pub trait Runs: RunReads {
    /// Creates the run and its first lease atomically (admission). Fails with
    /// `AlreadyExists` if the id is taken.
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()>;

    /// Rewrites the run row, except its caller tag (see [`Runs::set_run_caller`]).
    /// `ScriptChange::Unchanged` leaves script, meta, revisions and companion files as
    /// stored, so routine status updates never rewrite the script text.
    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// Compare-and-set of the caller tag: installs `caller` if the stored tag equals
    /// `expected` (`None` = no tag), atomically against every other handle on the same data.
    /// Returns whether it was installed; `false` too when there is no such run. This is how a
    /// new process reclaims a run by id exactly once. No other write changes the tag:
    /// `update_run` leaves it as stored.
    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool>;

    /// Keeps `traceparent` as the run's trace context unless one is kept already (the first
    /// traced generation's wins); whether it was kept. Telemetry only: it fences nothing.
    async fn set_run_trace(&self, run_id: &RunId, traceparent: &str) -> StoreResult<bool>;

    /// Deletes the run and everything stored with it (calls, journaled sessions, events,
    /// answers, receipts, control intents, its inline script copy).
    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()>;
}

/// Reading the journal: a run's call rows, whole or as the bounded tails status shows.
#[async_trait]
pub trait CallReads: Send + Sync {
    /// Every call row of the run, ordered by (generation, settlement ordinal).
    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// One past the highest settlement ordinal of the run's rows, superseded ones included
    /// (0 when it has none): where a new generation's ordinals continue. A backend may
    /// answer without reading the rows themselves.
    async fn next_settlement_ordinal(&self, run_id: &RunId) -> StoreResult<u64> {
        let calls = self.calls(run_id).await?;
        Ok(calls
            .iter()
            .map(|call| call.settlement_ordinal + 1)
            .max()
            .unwrap_or(0))
    }

    /// Replay candidates and blockers: rows with `superseded_by` unset, ordered by
    /// (generation, index).
    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// The call rows of the latest generation that has any, ascending by index.
    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// The count and the last `limit` non-checkpoint rows of the latest generation that has
    /// any rows. The rows cost an index walk, whatever the run's size; the count is the one
    /// [`Calls::record_call_total`] recorded, else counted (a generation still running, or
    /// one whose process died: the cost then grows with the generation).
    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail>;

    /// [`CallReads::call_tail`] without the count: the latest generation with any row and
    /// its last `limit` non-checkpoint rows, ascending. For the generation a process
    /// executes, which keeps its own count.
    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)>;

    /// The checkpoint rows not superseded, of every generation, ordered by (generation,
    /// settlement ordinal), at a cost that grows with the run's checkpoints, not its calls.
    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// The sessions the run's live calls opened ([`Calls::journal_session`]), ordered by
    /// (generation, index): what a later generation reopens.
    async fn open_sessions(&self, run_id: &RunId) -> StoreResult<Vec<OpenSession>>;

    /// What status reads of the calls: [`CallReads::call_tail`] when `count`, else
    /// [`CallReads::call_tail_rows`] (`total` unset), each row narrowed to a
    /// [`CallSummary`]. This default narrows those reads; a backend may read only the shown
    /// columns instead.
    async fn status_call_tail(
        &self,
        run_id: &RunId,
        limit: u32,
        count: bool,
    ) -> StoreResult<SummaryTail> {
        let (generation, calls, total) = if count {
            let tail = self.call_tail(run_id, limit).await?;
            (tail.generation, tail.calls, Some(tail.total))
        } else {
            let (generation, calls) = self.call_tail_rows(run_id, limit).await?;
            (generation, calls, None)
        };
        Ok(SummaryTail {
            generation,
            total,
            calls: calls.iter().map(CallSummary::from).collect(),
        })
    }
}

/// Writing the journal: settled calls and the count a stopped generation records.
#[async_trait]
pub trait Calls: CallReads {
    /// Appends one settled call (journal entry + call record), supersedes the rows it
    /// replaces and appends buffered events, in one durable transaction.
    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// Appends several settled calls in one transaction (replays and interrupted rows).
    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// The driver's group commit: journals `sessions` ([`Calls::journal_session`]) and
    /// appends `writes` ([`Calls::append_calls`]), fenced like both. SQLite makes them one
    /// transaction; this default writes the sessions one after the other, then the calls,
    /// and stops at the first refused.
    async fn commit_group(
        &self,
        run_id: &RunId,
        sessions: &[OpenSession],
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        for session in sessions {
            self.journal_session(run_id, session, fence).await?;
        }
        if !writes.is_empty() {
            self.append_calls(run_id, writes, fence).await?;
        }
        Ok(())
    }

    /// Journals the session a live call opened, fenced like every
    /// execution write; the call's earlier entry in the same generation (an earlier
    /// attempt's session) is replaced. A crash leaves no settled row, so this entry is what
    /// a resumed run reopens the call's session from.
    async fn journal_session(
        &self,
        run_id: &RunId,
        session: &OpenSession,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// Records how many non-checkpoint rows `generation` has, once it stopped running, so
    /// [`CallReads::call_tail`] need not count them; fenced like every execution write. A
    /// row appended to that generation later drops the record, so a recorded count is never
    /// stale.
    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// Sets aside the rows `(generation, index)` a resume reruns: they stop being replay
    /// candidates (`superseded_by = by`) and stay in the run's history. All or none, fenced
    /// like every execution write; naming a row that does not exist fails the whole write.
    async fn set_aside_calls(
        &self,
        run_id: &RunId,
        rows: &[(u32, u32)],
        by: u32,
        fence: Fence<'_>,
    ) -> StoreResult<()>;
}

/// Reading a run's event stream and its log lines.
#[async_trait]
pub trait EventReads: Send + Sync {
    /// Events with `seq > after`, at most `limit`, ascending.
    async fn events(&self, run_id: &RunId, after: u64, limit: u32)
    -> StoreResult<Vec<EventRecord>>;

    /// The highest event seq written (0 when none).
    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64>;

    /// The last `limit` log lines (events of type `log`) and the total count.
    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)>;
}

/// Writing a run's event stream.
#[async_trait]
pub trait Events: EventReads {
    /// Appends events; their `seq` values must continue the run's stream densely.
    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()>;
}

/// Reading checkpoint answers and operation receipts.
#[async_trait]
pub trait AnswerReads: Send + Sync {
    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>>;

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>>;
}

/// Recording checkpoint answers and operation receipts, first writer wins.
#[async_trait]
pub trait Answers: AnswerReads {
    /// Records a checkpoint answer unless one exists for that index; returns the answer
    /// that stands (first writer wins). Fenced: refused (`Fenced`, nothing written) unless
    /// `fence` holds the run's lease.
    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
        fence: Fence<'_>,
    ) -> StoreResult<CheckpointAnswer>;

    /// Records an operation receipt unless one with that id exists for the same or a newer
    /// generation (a receipt of an older generation is replaced: the operation resumed the
    /// run again); returns the one that stands. Fenced like
    /// [`Answers::put_checkpoint_answer`].
    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
        fence: Fence<'_>,
    ) -> StoreResult<OperationReceipt>;
}

/// Reading a run's lease and the clock its expiry is judged by.
#[async_trait]
pub trait LeaseReads: Send + Sync {
    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>>;

    /// The store's clock (Unix ms), which lease expiry is computed and judged with: a
    /// shared backend answers with the database's clock, so replicas whose clocks drift
    /// still agree on when a lease lapses. An embedded backend's clock is this host's.
    async fn clock_ms(&self) -> StoreResult<i64> {
        Ok(crate::util::now_ms())
    }
}

/// A lease's hand-over by compare-and-swap, its heartbeat and its release.
#[async_trait]
pub trait Leases: LeaseReads {
    /// Compare-and-swap: installs `lease` if the current lease token equals `expected`
    /// (`None` = no lease). Returns whether it was installed. Expiry plays no part: taking
    /// over an expired lease is this same CAS, once the caller's policy allows it.
    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool>;

    /// Sets the expiry of the lease `token` holds to `until` (Unix ms): the holder's
    /// heartbeat. `Fenced` once the token no longer holds the lease (taken over or released).
    async fn renew_lease(&self, run_id: &RunId, token: &str, until: i64) -> StoreResult<()>;

    /// Clears the lease if `token` still holds it.
    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()>;
}

/// Reading durable control intents and their acknowledgements.
#[async_trait]
pub trait IntentReads: Send + Sync {
    /// The intent `op` of `run_id`, acknowledged or not.
    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>>;

    /// Unacknowledged intents, oldest `requested_at` first (then by `op`).
    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>>;

    /// The acknowledgement of `op`, if there is one.
    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>>;
}

/// Recording control intents and acknowledging them, first writer wins.
#[async_trait]
pub trait Intents: IntentReads {
    /// Records a control intent for an existing run, unless one for the same action and call
    /// is still unacknowledged (or one with the same `op` exists): returns the intent that
    /// stands, so a retried request carries the first request's operation id.
    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent>;

    /// Marks the intent `op` done; the first acknowledgement wins and is returned.
    /// `UnknownIntent` if the run has no such intent. An executor acknowledging what it did
    /// to the run passes its lease as `fence`, and is refused (`Fenced`, nothing written)
    /// once that lease is no longer the run's, so a holder that was taken over cannot mark
    /// done what the new holder must still carry out. `None` is an acknowledgement by a
    /// process that does not execute the run: the requester withdrawing its own intent, or
    /// one settling an intent of a run nobody executes.
    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
        fence: Option<Fence<'_>>,
    ) -> StoreResult<IntentAck>;
}

/// The inline script copy, the one part of a run kept as a file.
#[async_trait]
pub trait ScriptCopies: Send + Sync {
    /// Writes `text` as the inline script copy of `run_id` and returns where it is: a file
    /// the `file://` resource serves and edits (on SQLite `…/projects/<slug>/runs/{runId}
    /// .script.js`, resolved, so later reads that refuse links accept it). Called before
    /// admission; the run row keeps the text durably, so the copy needs no fsync.
    async fn create_script_copy(
        &self,
        project_dir: &Path,
        run_id: &RunId,
        text: &str,
    ) -> StoreResult<PathBuf>;

    /// Where [`ScriptCopies::create_script_copy`] writes the copy of `run_id`, resolved as it
    /// returns it, with its folders made: what an admission records while the copy is written
    /// beside the run row's commit.
    async fn script_copy_place(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf>;

    /// Removes the inline script copy of `run_id`, if there is one (an admission that failed
    /// after writing it).
    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()>;
}

/// What the pending gauge and housekeeping read across projects.
#[async_trait]
pub trait Housekeeping: RunReads {
    /// How many runs there are in each status, across projects: the pending gauge's and the
    /// housekeeping's count. A `scan` backend answers with one indexed query; this default
    /// reads every run's summary (and fails with `Unsupported` without `scan`).
    async fn run_counts(&self) -> StoreResult<RunCounts> {
        Ok(RunCounts::of(&self.list_runs(None, u32::MAX).await?))
    }

    /// Runs in a terminal status (completed, failed, aborted) last updated before
    /// `before_ms` (the store's clock, Unix ms), oldest update first, at most `limit`: what
    /// housekeeping deletes. A `scan` backend answers with one indexed query; this default
    /// reads every run's summary (and fails with `Unsupported` without `scan`).
    async fn terminal_before(&self, before_ms: i64, limit: u32) -> StoreResult<Vec<RunId>> {
        let runs = self.list_runs(None, u32::MAX).await?;
        Ok(counts::terminal_before(runs, before_ms, limit))
    }

    /// Paused runs whose automatic resume is due at or before `until_ms` (Unix ms), with
    /// their due moment, earliest first, at most `limit`: what the timer loop resumes, and
    /// (with `until_ms = i64::MAX`, `limit = 1`) when it next has something to do.
    async fn resumes_due(&self, until_ms: i64, limit: u32) -> StoreResult<Vec<(RunId, i64)>>;
}

/// The writes that end a generation, over the runs, journal, events and leases they touch:
/// the whole end at once, or its two halves.
#[async_trait]
pub trait Endings: Runs + Calls + Events + Leases {
    /// A stopped generation's last writes: its last events, then its call count
    /// ([`Calls::record_call_total`]) when it wrote rows, fenced like both. SQLite makes
    /// them one transaction; this default makes them one after the other, and stops at the
    /// first refused.
    async fn close_generation(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        if !events.is_empty() {
            self.append_events(run_id, events, fence).await?;
        }
        if let Some((generation, total)) = call_total {
            self.record_call_total(run_id, generation, total, fence)
                .await?;
        }
        Ok(())
    }

    /// A generation's whole end: [`Endings::close_generation`]'s events and count, then
    /// [`Endings::record_outcome`]'s row and release, fenced by `lease_token`. SQLite and
    /// PostgreSQL make them one transaction, which a refused fence leaves unwritten as a
    /// whole; this default makes the two writes one after the other and stops at a refused
    /// first one.
    async fn end_generation(
        &self,
        record: &RunRecord,
        lease_token: &str,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
    ) -> StoreResult<()> {
        self.close_generation(&record.run_id, events, call_total, Fence(lease_token))
            .await?;
        self.record_outcome(record, lease_token).await
    }

    /// A generation's outcome and the end of its lease: the run row rewritten as
    /// [`Runs::update_run`] does with `ScriptChange::Unchanged`, fenced by `lease_token`,
    /// then that lease released as [`Leases::release_lease`] does. SQLite makes them one
    /// transaction, which a refused row leaves unwritten as a whole; this default makes them
    /// one after the other, releases the lease even when the row was refused, and answers
    /// the row's error.
    async fn record_outcome(&self, record: &RunRecord, lease_token: &str) -> StoreResult<()> {
        let updated = self
            .update_run(record, ScriptChange::Unchanged, Fence(lease_token))
            .await;
        let released = self.release_lease(&record.run_id, lease_token).await;
        updated.and(released)
    }
}

/// The folder server's queue of starts waiting for a slot (`model::queue`). Entries wait in
/// the order they were queued; claiming the head is atomic against every handle on the same
/// data, so of two replicas claiming at once each gets a different entry.
#[async_trait]
pub trait RunQueue: Send + Sync {
    /// Keeps `start` at the tail if fewer than `bound` entries wait (claimed ones count),
    /// atomically against every other handle; [`Enqueued::Full`] otherwise, keeping nothing.
    /// Fails with `AlreadyExists` if its run id is queued already.
    async fn enqueue(&self, start: &QueuedStart, bound: u64) -> StoreResult<Enqueued>;

    /// The entry of `run_id` and where it stands; `None` when there is none (never queued,
    /// started, or removed by housekeeping).
    async fn queued(&self, run_id: &RunId) -> StoreResult<Option<QueuedEntry>>;

    /// How many entries wait and since when.
    async fn queue_stats(&self) -> StoreResult<QueueStats>;

    /// Claims the oldest waiting entry that nobody holds (or whose claim ended before
    /// `now_ms`) for `claimer` until `until_ms`, and answers it.
    async fn claim_queued(
        &self,
        claimer: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<Option<QueuedStart>>;

    /// Gives `claimer`'s claim on `run_id` back, so the entry waits again in its place.
    async fn unclaim_queued(&self, run_id: &RunId, claimer: &str) -> StoreResult<()>;

    /// Removes the entry of `run_id` (its run was admitted) and answers how it had ended
    /// meanwhile, if it had (`Canceled`: its owner canceled it while it was being started).
    async fn remove_queued(&self, run_id: &RunId) -> StoreResult<Option<QueueOutcome>>;

    /// Ends a waiting entry without a run, at `now_ms`; whether it was waiting.
    async fn end_queued(
        &self,
        run_id: &RunId,
        outcome: QueueOutcome,
        message: &str,
        now_ms: i64,
    ) -> StoreResult<bool>;

    /// Deletes entries that ended before `before_ms`; how many.
    async fn prune_queue(&self, before_ms: i64) -> StoreResult<u64>;
}
