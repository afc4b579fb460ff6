//! Durable storage of runs behind one trait, so the engine never talks SQL or touches files,
//! and a second, shared backend (PostgreSQL for several replicas) slots in and passes the
//! same contract suite (`contract`).
//!
//! Invariants every backend keeps (the contract suite checks each one):
//!
//! - **Fenced writes.** Every write made while a run executes carries the lease token of the
//!   execution that makes it, and the store refuses it (`StoreError::Fenced`), writing
//!   nothing, once another token holds the lease or none does. The check and the write are
//!   one atomic step.
//! - **Leases change hands by compare-and-swap on the token** (`Store::acquire_lease`).
//!   Expiry is data, not a fence: a holder whose lease expired but was not taken over still
//!   renews and writes. Whether an expired or orphaned lease *may* be taken over is the
//!   caller's `LeasePolicy` (the daemon and the CLI: never while the holder process is
//!   alive; serve replicas: after the TTL). A lapsed holder (its token replaced) can neither
//!   renew (`Store::renew_lease`) nor write.
//! - **First writer wins** for checkpoint answers (per call index), operation receipts (per
//!   operation id and generation: a newer generation replaces an older one), control intents
//!   (one pending intent per action and call) and their acknowledgements.
//! - **Events are dense**: a run's event `seq` runs 1, 2, 3, … with no gap or repeat.
//! - **Deleting a run deletes everything stored with it**: calls, events, answers,
//!   receipts, control intents and acknowledgements, and its inline script copy.
//! - **No path in the interface** but the inline script copy's `file://` location
//!   (`Store::create_script_copy`): a shared backend has no persistence root to hand out.
//! - **Bad stored data is `StoreError::Corrupt`**, naming the run and the field; never a
//!   default.
//! - **The caller tag changes only by compare-and-set** (`Store::set_run_caller`): of two
//!   calls expecting the same tag exactly one succeeds, and `update_run` never rewrites it.
//! - **Companion files are part of the script snapshot**: written with the script at
//!   admission and by `ScriptChange::Changed`, read back exactly by `load_run`.
//! - **A pack run's texts never reach the store**: a `ScriptSource::Pack` record carries
//!   `model::content_digest`s in place of its script and companion texts, and a backend
//!   refuses one that does not (`StoreError::Confidential`), before writing anything.
//! - **Bounded reads for status**: `Store::call_tail` and `Store::log_tail` read the tail
//!   of a run, not the run.
//! - **A run's version changes with what status shows** (`Store::run_version`, where a
//!   backend keeps one): every write to a run that is not running, to its row or anything
//!   stored under it, gives it a version no run of the store had before.
//!
//! `sqlite` is the embedded backend (one database file per persistence root), `postgres` the
//! shared one (several replicas on one database; docs/store.md), `location` opens either from
//! one string; `lease` holds the takeover policy, `control` the durable control intents,
//! `counts` what the pending gauge and housekeeping ask.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::model::{
    CallError, CallKind, CallOrigin, CallOutcome, CallRecord, CheckpointAnswer, EventRecord, Lease,
    OperationReceipt, RunId, RunRecord, RunStatus, RunSummary,
};

mod codec;
pub(crate) mod control;
pub(crate) mod counts;
pub(crate) mod lease;
pub(crate) mod location;
pub(crate) mod postgres;
mod script_copies;
pub mod sqlite;

#[cfg(any(test, feature = "store-contract"))]
pub mod contract;

pub use control::{ControlIntent, IntentAck, IntentAction, IntentScope};
pub use counts::RunCounts;
pub use lease::{LapseReason, LeasePolicy, LeaseState};
pub use location::{StoreLocation, open_location};
pub use postgres::{PgOptions, PostgresStore};
pub use sqlite::SqliteStore;

/// Failures a caller branches on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no workflow run found for runId \"{0}\"")]
    UnknownRun(RunId),
    #[error("run {0} already exists")]
    AlreadyExists(RunId),
    /// The write's (or renewal's) lease token is no longer the run's lease.
    #[error("run {0}: lease lost; another execution owns this run now")]
    Fenced(RunId),
    /// An acknowledgement named a control intent the run does not have.
    #[error("run {run_id} has no control intent {op}")]
    UnknownIntent { run_id: RunId, op: String },
    /// The backend lacks the capability the call needs ([`Capabilities`]).
    #[error("this run store cannot {0}")]
    Unsupported(&'static str),
    /// A pack run's record handed over with a text where only digests may be stored
    /// ([`crate::model::ScriptSource::Pack`]); nothing was written.
    #[error(
        "run {0} comes from a workflows pack: its script and companion files are stored only as SHA-256 digests, and a text was handed to the store"
    )]
    Confidential(RunId),
    /// Stored data that does not parse: a boundary, never silently repaired.
    #[error("run store is corrupt: {0}")]
    Corrupt(String),
    #[error("run store: {0}")]
    Io(String),
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// What a backend promises beyond the trait's signatures. The engine needs `cas` and `fence`
/// to run anything; they are stated so that a backend that cannot keep them (a read-only
/// export, say) says so instead of failing late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Compare-and-swap writes are atomic against every other handle on the same data (other
    /// processes, other replicas): of two `acquire_lease` calls expecting the same token
    /// exactly one succeeds, and first-writer-wins inserts (answers, receipts, intents,
    /// acknowledgements) have one winner.
    pub cas: bool,
    /// Fenced writes check the lease token in the same atomic step as the write, so a holder
    /// that lost the lease cannot write, however late its write arrives.
    pub fence: bool,
    /// Queries across projects are answered, from indexes, in one round trip: `list_runs`
    /// without a project, `runs_with_script` and `pending_intents(IntentScope::All |
    /// HeldBy)`. Without it those calls fail with `StoreError::Unsupported`; the per-run and
    /// per-project queries admission and status need (`active_runs`, `list_runs` of one
    /// project) are answered by every backend.
    pub scan: bool,
}

/// The lease token a fenced write presents.
#[derive(Clone, Copy, Debug)]
pub struct Fence<'a>(pub &'a str);

/// How `update_run` treats the (possibly large) script text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptChange {
    /// Leave the stored script, meta, revisions and companion files untouched (the usual
    /// case).
    Unchanged,
    /// Write `script`, `meta`, `script_revisions` and `files` too (an accepted revision).
    Changed,
}

/// A whole settled call plus what it implies, written in one transaction.
#[derive(Clone, Debug)]
pub struct CallWrite<'a> {
    pub record: &'a CallRecord,
    /// Rows `(generation, index)` this call consumed or re-executed; they stop being replay
    /// candidates (`superseded_by = record.generation`).
    pub supersedes: &'a [(u32, u32)],
    /// Events buffered since the last write, appended in the same transaction.
    pub events: &'a [EventRecord],
}

/// The end of the latest generation's calls, as `status` shows them.
#[derive(Clone, Debug, PartialEq)]
pub struct CallTail {
    /// The latest generation that has any call row (checkpoint rows included), `None` when
    /// the run has none: the generation [`Store::latest_calls`] would read.
    pub generation: Option<u32>,
    /// How many non-checkpoint rows that generation has.
    pub total: u64,
    /// Its last non-checkpoint rows by index, at most the limit asked for, ascending.
    pub calls: Vec<CallRecord>,
}

/// A call row as status shows it ([`Store::status_call_tail`]): the fields of a
/// [`CallRecord`] a status entry reads, without usage, replay, session, hashes or path.
#[derive(Clone, Debug, PartialEq)]
pub struct CallSummary {
    pub generation: u32,
    pub index: u32,
    pub kind: CallKind,
    pub label: Option<String>,
    pub phase: Option<String>,
    pub model_requested: Option<String>,
    pub backend_id: Option<String>,
    pub outcome: CallOutcome,
    pub origin: CallOrigin,
    pub result: Option<serde_json::Value>,
    pub error: Option<CallError>,
}

impl From<&CallRecord> for CallSummary {
    fn from(call: &CallRecord) -> CallSummary {
        CallSummary {
            generation: call.generation,
            index: call.index,
            kind: call.kind,
            label: call.label.clone(),
            phase: call.phase.clone(),
            model_requested: call.model_requested.clone(),
            backend_id: call.backend_id.clone(),
            outcome: call.outcome,
            origin: call.origin,
            result: call.result.clone(),
            error: call.error.clone(),
        }
    }
}

/// [`CallTail`] in [`CallSummary`]s; `total` only when it was asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SummaryTail {
    /// As [`CallTail::generation`].
    pub generation: Option<u32>,
    /// As [`CallTail::total`], when counted.
    pub total: Option<u64>,
    /// As [`CallTail::calls`], narrowed.
    pub calls: Vec<CallSummary>,
}

/// A run's status and its change counter, as an answer cache checks them ([`Store::run_version`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunVersion {
    pub status: RunStatus,
    /// Differs after every write that changes anything stored for the run while its stored
    /// status is not `running` (its row, calls, call counts, events, checkpoint answers), and
    /// from every version any other run of the store ever had, so an answer cached under one
    /// version is never served for changed data, nor for a run deleted and created again.
    pub version: u64,
}

/// The durable run store.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What this backend promises ([`Capabilities`]).
    fn capabilities(&self) -> Capabilities;

    /// Creates the run and its first lease atomically (admission). Fails with
    /// `AlreadyExists` if the id is taken.
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()>;

    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord>;

    /// Rewrites the run row, except its caller tag (see [`Store::set_run_caller`]).
    /// `ScriptChange::Unchanged` leaves script, meta, revisions and companion files as
    /// stored, so routine status updates never rewrite the script text.
    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

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

    /// Appends events; their `seq` values must continue the run's stream densely.
    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()>;

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
    /// [`Store::record_call_total`] recorded, else counted (a generation still running, or
    /// one whose process died: the cost then grows with the generation).
    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail>;

    /// [`Store::call_tail`] without the count: the latest generation with any row and its
    /// last `limit` non-checkpoint rows, ascending. For the generation a process executes,
    /// which keeps its own count.
    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)>;

    /// Records how many non-checkpoint rows `generation` has, once it stopped running, so
    /// [`Store::call_tail`] need not count them; fenced like every execution write. A row
    /// appended to that generation later drops the record, so a recorded count is never
    /// stale.
    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()>;

    /// A stopped generation's last writes: its last events, then its call count
    /// ([`Store::record_call_total`]) when it wrote rows, fenced like both. SQLite makes them
    /// one transaction; this default makes them one after the other, and stops at the first
    /// refused.
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

    /// The checkpoint rows not superseded, of every generation, ordered by (generation,
    /// settlement ordinal), at a cost that grows with the run's checkpoints, not its calls.
    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// Events with `seq > after`, at most `limit`, ascending.
    async fn events(&self, run_id: &RunId, after: u64, limit: u32)
    -> StoreResult<Vec<EventRecord>>;

    /// The highest event seq written (0 when none).
    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64>;

    /// The last `limit` log lines (events of type `log`) and the total count.
    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)>;

    /// Records a checkpoint answer unless one exists for that index; returns the answer
    /// that stands (first writer wins).
    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
    ) -> StoreResult<CheckpointAnswer>;

    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>>;

    /// Records an operation receipt unless one with that id exists for the same or a newer
    /// generation (a receipt of an older generation is replaced: the operation resumed the
    /// run again); returns the one that stands.
    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
    ) -> StoreResult<OperationReceipt>;

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>>;

    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>>;

    /// The store's clock (Unix ms), which lease expiry is computed and judged with: a
    /// shared backend answers with the database's clock, so replicas whose clocks drift
    /// still agree on when a lease lapses. An embedded backend's clock is this host's.
    async fn clock_ms(&self) -> StoreResult<i64> {
        Ok(crate::util::now_ms())
    }

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

    /// A generation's outcome and the end of its lease: the run row rewritten as
    /// [`Store::update_run`] does with `ScriptChange::Unchanged`, fenced by `lease_token`, then
    /// that lease released as [`Store::release_lease`] does. SQLite makes them one
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

    /// The caller tag of `run_id` (`RunRecord::caller`): `None` when there is no such run,
    /// `Some(None)` for a run stored without one. One indexed lookup, nothing decoded, so a
    /// front end can check who owns a run before it reads anything else of it.
    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>>;

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

    /// Deletes the run and everything stored with it (calls, events, answers, receipts,
    /// control intents, its inline script copy).
    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()>;

    /// Records a control intent for an existing run, unless one for the same action and call
    /// is still unacknowledged (or one with the same `op` exists): returns the intent that
    /// stands, so a retried request carries the first request's operation id.
    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent>;

    /// The intent `op` of `run_id`, acknowledged or not.
    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>>;

    /// Unacknowledged intents, oldest `requested_at` first (then by `op`).
    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>>;

    /// Marks the intent `op` done; the first acknowledgement wins and is returned.
    /// `UnknownIntent` if the run has no such intent.
    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
    ) -> StoreResult<IntentAck>;

    /// The acknowledgement of `op`, if there is one.
    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>>;

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

    /// Removes the inline script copy of `run_id`, if there is one (an admission that failed
    /// after writing it).
    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()>;

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

    /// What status reads of the calls: [`Store::call_tail`] when `count`, else
    /// [`Store::call_tail_rows`] (`total` unset), each row narrowed to a [`CallSummary`]. This
    /// default narrows those reads; a backend may read only the shown columns instead.
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

/// The folder of a project inside the persistence root:
/// `projects/<slug>-<sha256(projectDir)[:12]>`, slug = lowercased basename with runs of
/// `[^a-z0-9._-]` replaced by `-`, at most 48 characters.
pub(crate) fn project_folder(root: &Path, project_dir: &Path) -> PathBuf {
    let base = project_dir
        .file_name()
        .map(|name| name.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut slug = String::new();
    for ch in base.chars() {
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '.' | '_' | '-') {
            slug.push(ch);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug: String = slug.chars().take(48).collect();
    let slug = if slug.is_empty() {
        "project".to_owned()
    } else {
        slug
    };
    let digest = crate::util::sha256_hex(project_dir.as_os_str().as_encoded_bytes());
    root.join("projects")
        .join(format!("{slug}-{}", &digest[..12]))
}

/// Where an inline script's store copy lives.
pub(crate) fn script_copy_path(root: &Path, project_dir: &Path, run_id: &RunId) -> PathBuf {
    project_folder(root, project_dir)
        .join("runs")
        .join(format!("{run_id}.script.js"))
}
