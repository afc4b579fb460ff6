//! Durable storage of runs behind one trait, so the engine never talks SQL and a second,
//! shared backend (PostgreSQL for several replicas) can slot in later.
//!
//! Every write made while a run executes is *fenced*: it carries the lease token of the
//! execution that makes it, and the store refuses it (`StoreError::Fenced`) once another
//! holder has taken the lease. SQLite implements the check inside the write transaction.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::model::{
    CallRecord, CheckpointAnswer, EventRecord, Lease, OperationReceipt, RunId, RunRecord,
    RunSummary,
};

pub mod sqlite;

pub use sqlite::SqliteStore;

/// Failures a caller branches on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no workflow run found for runId \"{0}\"")]
    UnknownRun(RunId),
    #[error("run {0} already exists")]
    AlreadyExists(RunId),
    /// The write's lease token is no longer the run's lease.
    #[error("run {0}: lease lost; another execution owns this run now")]
    Fenced(RunId),
    /// Stored data that does not parse: a boundary, never silently repaired.
    #[error("run store is corrupt: {0}")]
    Corrupt(String),
    #[error("run store: {0}")]
    Io(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The lease token a fenced write presents.
#[derive(Clone, Copy, Debug)]
pub struct Fence<'a>(pub &'a str);

/// How `update_run` treats the (possibly large) script text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptChange {
    /// Leave the stored script, meta and revisions untouched (the usual case).
    Unchanged,
    /// Write `script`, `meta` and `script_revisions` too (an accepted revision).
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

/// The durable run store.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The persistence root (`AGENTPRISM_PERSISTENCE_ROOT`, default `~/.agentprism/workflows`).
    fn root(&self) -> &Path;

    /// Creates the run and its first lease atomically (admission). Fails with
    /// `AlreadyExists` if the id is taken.
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()>;

    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord>;

    /// Rewrites the run row. `ScriptChange::Unchanged` leaves script, meta and revisions as
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

    /// Replay candidates and blockers: rows with `superseded_by` unset, ordered by
    /// (generation, index).
    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

    /// The call rows of the latest generation that has any, ascending by index.
    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>>;

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

    /// Compare-and-swap: installs `lease` if the current lease token equals `expected`
    /// (`None` = no lease). Returns whether it was installed.
    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool>;

    /// Clears the lease if `token` still holds it.
    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()>;

    /// Runs, newest `started_at` first, optionally of one project, at most `limit`.
    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>>;

    /// Runs of a project whose status is pending or running.
    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>>;

    /// Runs whose recorded script file is `script_file`, newest first.
    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>>;

    /// Deletes the run and everything stored with it (calls, events, answers, receipts).
    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()>;
}

/// The folder of a project inside the persistence root:
/// `projects/<slug>-<sha256(projectDir)[:12]>`, slug = lowercased basename with runs of
/// `[^a-z0-9._-]` replaced by `-`, at most 48 characters.
pub fn project_folder(root: &Path, project_dir: &Path) -> PathBuf {
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
pub fn script_copy_path(root: &Path, project_dir: &Path, run_id: &RunId) -> PathBuf {
    project_folder(root, project_dir)
        .join("runs")
        .join(format!("{run_id}.script.js"))
}
