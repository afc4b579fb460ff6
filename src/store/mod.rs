//! Durable storage of runs behind one trait, so the engine never talks SQL or touches files,
//! and a second, shared backend (PostgreSQL for several replicas) slots in and passes the
//! same contract suite (`contract`).
//!
//! Invariants every backend keeps (the contract suite checks each one):
//!
//! - **Fenced writes.** Every write made while a run executes carries the lease token of the
//!   execution that makes it, and the store refuses it (`StoreError::Fenced`), writing
//!   nothing, once another token holds the lease or none does. The check and the write are
//!   one atomic step. That covers the journal, events, the run row and its outcome, the set-
//!   aside of rerun rows, checkpoint answers and operation receipts (a resume writes them
//!   under the lease it just took), and an executor's acknowledgement of a control intent.
//!   Unfenced on purpose: taking, renewing and releasing the lease (compare-and-swap on the
//!   token instead), recording a control intent (written by whoever asks, never the holder),
//!   an acknowledgement by a process that does not execute the run (the requester withdrawing
//!   its own intent, or the settling of an intent of a run nobody executes), the caller tag
//!   (compare-and-set), the creation and deletion of a run, and the queue of starts (no run
//!   exists yet: its entries are claimed by compare-and-set instead).
//! - **The queue of starts is claimed in order, once** (`RunQueue`): the oldest waiting entry
//!   nobody holds goes to exactly one claimer, and enqueueing never passes its bound, however
//!   many handles enqueue at once.
//! - **Leases change hands by compare-and-swap on the token** (`Leases::acquire_lease`).
//!   Expiry is data, not a fence: a holder whose lease expired but was not taken over still
//!   renews and writes. Whether an expired or orphaned lease *may* be taken over is the
//!   caller's `LeasePolicy` (the daemon and the CLI: never while the holder process is
//!   alive; serve replicas: after the TTL). A lapsed holder (its token replaced) can neither
//!   renew (`Leases::renew_lease`) nor write.
//! - **First writer wins** for checkpoint answers (per call index), operation receipts (per
//!   operation id and generation: a newer generation replaces an older one), control intents
//!   (one pending intent per action and call) and their acknowledgements.
//! - **Events are dense**: a run's event `seq` runs 1, 2, 3, … with no gap or repeat.
//! - **Deleting a run deletes everything stored with it**: calls, events, answers,
//!   receipts, control intents and acknowledgements, and its inline script copy.
//! - **No path in the interface** but the inline script copy's `file://` location
//!   (`ScriptCopies::create_script_copy`): a shared backend has no persistence root to hand out.
//! - **Bad stored data is `StoreError::Corrupt`**, naming the run and the field; never a
//!   default.
//! - **The caller tag changes only by compare-and-set** (`Runs::set_run_caller`): of two
//!   calls expecting the same tag exactly one succeeds, and `update_run` never rewrites it.
//! - **Companion files are part of the script snapshot**: written with the script at
//!   admission and by `ScriptChange::Changed`, read back exactly by `load_run`.
//! - **A pack run's texts never reach the store**: a `ScriptSource::Pack` record carries
//!   `model::content_digest`s in place of its script and companion texts, and a backend
//!   refuses one that does not (`StoreError::Confidential`), before writing anything.
//! - **Bounded reads for status**: `CallReads::call_tail` and `EventReads::log_tail` read the tail
//!   of a run, not the run.
//! - **A run's version changes with what status shows** (`RunReads::run_version`, where a
//!   backend keeps one): every write to a run that is not running, to its row or anything
//!   stored under it, gives it a version no run of the store had before.
//!
//! `ports` holds the traits, one per concern with a read-only half where there are readers;
//! `Store` is all of them. `sqlite` is the embedded backend (one database file per
//! persistence root), `postgres` the shared one (several replicas on one database;
//! docs/store.md), `location` opens either from one string, `check_then_write` puts the lease
//! check in front of a backend that cannot fence; `lease` holds the takeover policy,
//! `control` the durable control intents, `counts` what the pending gauge and housekeeping
//! ask.

use std::path::{Path, PathBuf};

use crate::model::{
    CallChanges, CallError, CallKind, CallOrigin, CallOutcome, CallRecord, EventRecord, RunId,
    RunStatus,
};

mod codec;
pub(crate) mod check_then_write;
pub(crate) mod control;
pub(crate) mod counts;
pub(crate) mod lease;
pub(crate) mod location;
pub(crate) mod ports;
pub(crate) mod postgres;
mod script_copies;
pub mod sqlite;

#[cfg(any(test, feature = "store-contract"))]
pub mod contract;

pub(crate) use check_then_write::CheckThenWrite;
pub use control::{ControlIntent, IntentAck, IntentAction, IntentScope};
pub use counts::RunCounts;
pub use lease::{LapseReason, LeasePolicy, LeaseState};
pub use location::{StoreLocation, open_location};
pub use ports::{
    AnswerReads, Answers, CallReads, Calls, Capable, Endings, EventReads, Events, Housekeeping,
    IntentReads, Intents, LeaseReads, Leases, PastRunsOf, RunQueue, RunReads, Runs, ScriptCopies,
};
pub use postgres::{PgEnvironment, PgOptions, PostgresStore};
pub use sqlite::{SqliteStore, StoreSync};

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
    /// the run has none: the generation [`CallReads::latest_calls`] would read.
    pub generation: Option<u32>,
    /// How many non-checkpoint rows that generation has.
    pub total: u64,
    /// Its last non-checkpoint rows by index, at most the limit asked for, ascending.
    pub calls: Vec<CallRecord>,
}

/// A call row as status shows it ([`CallReads::status_call_tail`]): the fields of a
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
    /// What an isolated call changed.
    pub changes: Option<CallChanges>,
    /// How many attempts the call made; `None` for a row written before attempts were
    /// counted (0 there).
    pub attempts: Option<u32>,
    /// Why a call of a resumed generation ran live.
    pub live_reason: Option<crate::model::LiveReason>,
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
            changes: call.changes.clone(),
            attempts: (call.attempts > 0).then_some(call.attempts),
            live_reason: call.live_reason,
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

/// A run's status and its change counter, as an answer cache checks them ([`RunReads::run_version`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunVersion {
    pub status: RunStatus,
    /// Differs after every write that changes anything stored for the run while its stored
    /// status is not `running` (its row, calls, call counts, events, checkpoint answers), and
    /// from every version any other run of the store ever had, so an answer cached under one
    /// version is never served for changed data, nor for a run deleted and created again.
    pub version: u64,
}

/// The durable run store: every port at once ([`ports`]), implemented for anything that
/// implements them all. The engine holds an `Arc<dyn Store>`; a reader takes the read-only
/// trait it needs (`&dyn RunReads`, …), which a `&dyn Store` coerces to.
pub trait Store:
    Capable
    + Runs
    + Calls
    + Events
    + Answers
    + Leases
    + Intents
    + ScriptCopies
    + Housekeeping
    + RunQueue
    + Endings
    + 'static
{
}

impl<T> Store for T where
    T: Capable
        + Runs
        + Calls
        + Events
        + Answers
        + Leases
        + Intents
        + ScriptCopies
        + Housekeeping
        + RunQueue
        + Endings
        + 'static
        + ?Sized
{
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
