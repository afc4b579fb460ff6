//! The embedded SQLite store: one database file, `<root>/store.db`, holds the runs of every
//! project. Several processes (a CLI run and a daemon) may open it at once, so the database runs
//! in WAL mode, a call waits (at most 5 s) for another process's write lock, and every write is one short transaction; read-modify-write
//! operations (fenced writes, the lease compare-and-swap, first-writer-wins inserts) take the
//! write lock up front with `BEGIN IMMEDIATE` so that their check and their write see the same
//! state. By default (`synchronous=FULL`) a commit is on the disk when it returns, so a settled
//! call survives a power cut; `AGENTPRISM_STORE_SYNC=normal` keeps commits across a process
//! crash only (`sync_mode.rs`).
//!
//! The schema is versioned by `PRAGMA user_version` and built by the numbered scripts in
//! `migrations/sqlite/`. The per-run tables are keyed by an integer `run_key` so that the many
//! call and event rows of a run stay small, and the script text lives in its own table so that
//! routine status updates never rewrite it.
//!
//! Blocking work and the async workers: every call runs on the process's one connection, under
//! a `std::sync::Mutex`, from the `async fn`s of the store's traits. A call that finds the
//! mutex free runs inline on its tokio worker; any wait, for the mutex or for another
//! process's write lock (up to 5 s), happens under `tokio::task::block_in_place`, so the
//! runtime keeps its workers (`off_workers.rs`). What a call may hold a worker for is its
//! own statements plus, every few MiB of WAL, the automatic checkpoint's writes and syncs.
//! Running every call under `block_in_place` was measured at 14 µs of CPU per call on an
//! idle machine (a thread hand-off that wakes a second core; 4-9 µs under load), about 10%
//! of an agent call's engine overhead (140-165 µs in `cargo bench --bench engine`), which
//! this way does not change; `spawn_blocking` or a store thread would add copies of every
//! argument to the hand-off, as their work must own its data.
//!
//! This file holds the handle and the trait's dispatch; each table's statements live in a
//! file of their own: `connection.rs` (opening, settings, migrations), `rows.rs` (column
//! conversions, run keys, the fence check), `runs.rs`, `calls.rs`, `sessions.rs` (the sessions
//! live calls opened), `events.rs`,
//! `answers.rs` (checkpoint answers, receipts), `leases.rs`, `control.rs` (intents),
//! `housekeeping.rs` (run counts, finished runs), `versions.rs` (the run version status's answer
//! cache checks), `status_reads.rs` (the narrow call tail status reads), `event_blocks.rs`,
//! `hashes.rs` and `usage_column.rs` (the compact encodings `docs/store.md` measures), and
//! `off_workers.rs` (where the blocking work runs); the inline script copies, the one part of a
//! run kept as a file, are `store/script_copies.rs`, which PostgreSQL shares.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use rusqlite::Connection;

use super::{
    AnswerReads, Answers, CallReads, CallTail, CallWrite, Calls, Capabilities, Capable,
    ControlIntent, Endings, EventReads, Events, Fence, Housekeeping, IntentAck, IntentReads,
    IntentScope, Intents, LeaseReads, Leases, PastRunsOf, RunCounts, RunQueue, RunReads, Runs,
    ScriptChange, ScriptCopies, StoreError, StoreResult,
};
use crate::model::{
    CallRecord, CheckpointAnswer, EndSummary, Enqueued, EventRecord, Lease, OpenSession,
    OperationReceipt, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, RunId, RunRecord,
    RunSummary,
};

mod answers;
mod call_blocks;
mod call_keys;
mod calls;
mod connection;
mod control;
mod endings;
mod event_blocks;
mod events;
mod hashes;
mod housekeeping;
mod leases;
mod off_workers;
mod queue;
mod rows;
mod runs;
mod sessions;
mod status_reads;
mod sync_mode;
mod usage_column;
mod versions;

use super::script_copies as scripts;
pub use sync_mode::StoreSync;

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod tests;

/// The database file inside the persistence root.
pub const DATABASE_FILE: &str = "store.db";

/// The run store on one SQLite database.
pub struct SqliteStore {
    /// The persistence root: the database file and the inline script copies live under it.
    root: PathBuf,
    /// Where the inline script copies go (under `root`).
    copies: scripts::CopyRoot,
    /// The process's connection. Every method holds the lock for one short query or
    /// transaction and never across an `.await`, so a std mutex is enough.
    connection: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store under `root`, bringing its schema up to date, with
    /// every commit synced to the disk ([`StoreSync::Full`]). Refuses a database written by a
    /// newer agentprism.
    pub fn open(root: &Path) -> StoreResult<SqliteStore> {
        SqliteStore::open_with_sync(root, StoreSync::Full)
    }

    /// [`SqliteStore::open`] with the commits as durable as `sync` says.
    pub fn open_with_sync(root: &Path, sync: StoreSync) -> StoreResult<SqliteStore> {
        let mut connection = connection::open(root, &root.join(DATABASE_FILE), sync)?;
        // In place of the plain busy timeout: the same wait, off the async workers.
        connection
            .busy_handler(Some(off_workers::wait_for_lock()))
            .map_err(|error| StoreError::Io(format!("set the busy handler: {error}")))?;
        Ok(SqliteStore {
            root: root.to_path_buf(),
            copies: scripts::CopyRoot::new(root),
            connection: Mutex::new(connection),
        })
    }

    /// The persistence root this store keeps its database and script copies under. Not part
    /// of the `Store` trait: a shared backend has no such path, and the engine never asks.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The database file this store writes.
    pub fn database_path(&self) -> PathBuf {
        self.root.join(DATABASE_FILE)
    }

    /// Runs `work` on the connection; any wait (for the mutex, for another process's lock)
    /// happens off the async workers ([`off_workers`]).
    fn with<T>(&self, work: impl FnOnce(&mut Connection) -> StoreResult<T>) -> StoreResult<T> {
        off_workers::with_connection(&self.connection, work)
    }

    /// The connection, for tests that look at the tables themselves.
    #[cfg(test)]
    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        use crate::util::sync::Lock;
        self.connection.locked()
    }
}

impl Capable for SqliteStore {
    /// One database behind `BEGIN IMMEDIATE` transactions, shared by every process on the
    /// machine: all three hold.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cas: true,
            fence: true,
            scan: true,
        }
    }
}

#[async_trait]
impl RunReads for SqliteStore {
    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        self.with(|connection| runs::load(connection, run_id))
    }

    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>> {
        self.with(|connection| runs::list(connection, project_dir, limit))
    }

    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>> {
        self.with(|connection| runs::active(connection, project_dir))
    }

    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>> {
        self.with(|connection| runs::with_script(connection, script_file))
    }

    async fn past_summaries(&self, of: PastRunsOf<'_>, limit: u32) -> StoreResult<Vec<EndSummary>> {
        self.with(|connection| runs::past_summaries(connection, of, limit))
    }

    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        self.with(|connection| runs::caller(connection, run_id))
    }

    async fn run_trace(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        self.with(|connection| runs::trace(connection, run_id))
    }

    async fn run_version(&self, run_id: &RunId) -> StoreResult<Option<super::RunVersion>> {
        self.with(|connection| versions::run_version(connection, run_id))
            .map(Some)
    }
}

#[async_trait]
impl Runs for SqliteStore {
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        self.with(|connection| runs::create(connection, record, lease))
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| runs::update(connection, record, script, fence))
    }

    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool> {
        self.with(|connection| runs::set_caller(connection, run_id, expected, caller))
    }

    async fn set_run_trace(&self, run_id: &RunId, traceparent: &str) -> StoreResult<bool> {
        self.with(|connection| runs::set_trace(connection, run_id, traceparent))
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        let deleted = self.with(|connection| runs::delete(connection, run_id))?;
        off_workers::run(|| scripts::delete_with_run(&self.root, run_id, &deleted));
        Ok(())
    }
}

#[async_trait]
impl CallReads for SqliteStore {
    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.with(|connection| calls::all(connection, run_id))
    }

    async fn next_settlement_ordinal(&self, run_id: &RunId) -> StoreResult<u64> {
        self.with(|connection| calls::next_settlement_ordinal(connection, run_id))
    }

    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.with(|connection| calls::replay_pool(connection, run_id))
    }

    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.with(|connection| calls::latest(connection, run_id))
    }

    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
        self.with(|connection| calls::tail(connection, run_id, limit))
    }

    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
        self.with(|connection| calls::tail_rows(connection, run_id, limit))
    }

    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.with(|connection| calls::checkpoints(connection, run_id))
    }

    async fn open_sessions(&self, run_id: &RunId) -> StoreResult<Vec<OpenSession>> {
        self.with(|connection| sessions::all(connection, run_id))
    }

    async fn status_call_tail(
        &self,
        run_id: &RunId,
        limit: u32,
        count: bool,
    ) -> StoreResult<super::SummaryTail> {
        self.with(|connection| status_reads::tail(connection, run_id, limit, count))
    }
}

#[async_trait]
impl Calls for SqliteStore {
    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| {
            calls::append(connection, run_id, std::slice::from_ref(&write), fence)
        })
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| calls::append(connection, run_id, writes, fence))
    }

    async fn commit_group(
        &self,
        run_id: &RunId,
        sessions: &[OpenSession],
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| calls::commit_group(connection, run_id, sessions, writes, fence))
    }

    async fn journal_session(
        &self,
        run_id: &RunId,
        session: &OpenSession,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| sessions::journal(connection, run_id, session, fence))
    }

    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| calls::record_total(connection, run_id, generation, total, fence))
    }

    async fn set_aside_calls(
        &self,
        run_id: &RunId,
        rows: &[(u32, u32)],
        by: u32,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| calls::set_aside(connection, run_id, rows, by, fence))
    }
}

#[async_trait]
impl EventReads for SqliteStore {
    async fn events(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        self.with(|connection| events::page(connection, run_id, after, limit))
    }

    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64> {
        self.with(|connection| events::last_event_seq(connection, run_id))
    }

    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)> {
        self.with(|connection| events::log_tail(connection, run_id, limit))
    }
}

#[async_trait]
impl Events for SqliteStore {
    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| events::append(connection, run_id, events, fence))
    }
}

#[async_trait]
impl AnswerReads for SqliteStore {
    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        self.with(|connection| answers::checkpoint_answers(connection, run_id))
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        self.with(|connection| answers::receipt(connection, run_id, operation_id))
    }
}

#[async_trait]
impl Answers for SqliteStore {
    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
        fence: Fence<'_>,
    ) -> StoreResult<CheckpointAnswer> {
        self.with(|connection| answers::put_checkpoint_answer(connection, run_id, answer, fence))
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
        fence: Fence<'_>,
    ) -> StoreResult<OperationReceipt> {
        self.with(|connection| answers::put_receipt(connection, run_id, receipt, fence))
    }
}

#[async_trait]
impl LeaseReads for SqliteStore {
    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        self.with(|connection| leases::lease(connection, run_id))
    }
}

#[async_trait]
impl Leases for SqliteStore {
    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool> {
        self.with(|connection| leases::acquire(connection, run_id, expected, lease))
    }

    async fn renew_lease(&self, run_id: &RunId, token: &str, until: i64) -> StoreResult<()> {
        self.with(|connection| leases::renew(connection, run_id, token, until))
    }

    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()> {
        self.with(|connection| leases::release(connection, run_id, token))
    }
}

#[async_trait]
impl IntentReads for SqliteStore {
    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>> {
        self.with(|connection| control::read(connection, run_id, op))
    }

    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>> {
        self.with(|connection| control::pending(connection, scope))
    }

    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>> {
        self.with(|connection| control::ack(connection, run_id, op))
    }
}

#[async_trait]
impl Intents for SqliteStore {
    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent> {
        self.with(|connection| control::put(connection, intent))
    }

    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
        fence: Option<Fence<'_>>,
    ) -> StoreResult<IntentAck> {
        self.with(|connection| control::acknowledge(connection, run_id, op, ack, fence))
    }
}

#[async_trait]
impl ScriptCopies for SqliteStore {
    async fn create_script_copy(
        &self,
        project_dir: &Path,
        run_id: &RunId,
        text: &str,
    ) -> StoreResult<PathBuf> {
        off_workers::run(|| scripts::create(&self.copies, project_dir, run_id, text))
    }

    /// Inline: three `lstat` calls once a project's folders exist (`script_copies::place`),
    /// with no lock to wait for (a hand-off would cost more than the calls).
    async fn script_copy_place(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf> {
        scripts::place(&self.copies, project_dir, run_id)
    }

    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
        off_workers::run(|| scripts::delete(&self.root, project_dir, run_id))
    }
}

#[async_trait]
impl Housekeeping for SqliteStore {
    async fn run_counts(&self) -> StoreResult<RunCounts> {
        self.with(|connection| housekeeping::counts(connection))
    }

    async fn terminal_before(&self, before_ms: i64, limit: u32) -> StoreResult<Vec<RunId>> {
        self.with(|connection| housekeeping::terminal_before(connection, before_ms, limit))
    }

    async fn resumes_due(&self, until_ms: i64, limit: u32) -> StoreResult<Vec<(RunId, i64)>> {
        self.with(|connection| housekeeping::resumes_due(connection, until_ms, limit))
    }
}

#[async_trait]
impl RunQueue for SqliteStore {
    async fn enqueue(&self, start: &QueuedStart, bound: u64) -> StoreResult<Enqueued> {
        self.with(|connection| queue::enqueue(connection, start, bound))
    }

    async fn queued(&self, run_id: &RunId) -> StoreResult<Option<QueuedEntry>> {
        self.with(|connection| queue::queued(connection, run_id))
    }

    async fn queue_stats(&self) -> StoreResult<QueueStats> {
        self.with(|connection| queue::stats(connection))
    }

    async fn claim_queued(
        &self,
        claimer: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<Option<QueuedStart>> {
        self.with(|connection| queue::claim(connection, claimer, now_ms, until_ms))
    }

    async fn unclaim_queued(&self, run_id: &RunId, claimer: &str) -> StoreResult<()> {
        self.with(|connection| queue::unclaim(connection, run_id, claimer))
    }

    async fn remove_queued(&self, run_id: &RunId) -> StoreResult<Option<QueueOutcome>> {
        self.with(|connection| queue::remove(connection, run_id))
    }

    async fn end_queued(
        &self,
        run_id: &RunId,
        outcome: QueueOutcome,
        message: &str,
        now_ms: i64,
    ) -> StoreResult<bool> {
        self.with(|connection| queue::end(connection, run_id, outcome, message, now_ms))
    }

    async fn prune_queue(&self, before_ms: i64) -> StoreResult<u64> {
        self.with(|connection| queue::prune(connection, before_ms))
    }
}

#[async_trait]
impl Endings for SqliteStore {
    async fn close_generation(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        self.with(|connection| {
            endings::close_generation(connection, run_id, events, call_total, fence)
        })
    }

    async fn end_generation(
        &self,
        record: &RunRecord,
        lease_token: &str,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
    ) -> StoreResult<()> {
        self.with(|connection| {
            endings::end_generation(connection, record, lease_token, events, call_total)
        })
    }

    async fn record_outcome(&self, record: &RunRecord, lease_token: &str) -> StoreResult<()> {
        self.with(|connection| endings::record_outcome(connection, record, lease_token))
    }
}
