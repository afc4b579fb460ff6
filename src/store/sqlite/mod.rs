//! The embedded SQLite store: one database file, `<root>/store.db`, holds the runs of every
//! project. Several processes (a CLI run and a daemon) may open it at once, so the database runs
//! in WAL mode with a busy timeout, and every write is one short transaction; read-modify-write
//! operations (fenced writes, the lease compare-and-swap, first-writer-wins inserts) take the
//! write lock up front with `BEGIN IMMEDIATE` so that their check and their write see the same
//! state. `synchronous=NORMAL` keeps each committed transaction across a process crash, which is
//! the durability the engine relies on; a power loss may drop the last few commits.
//!
//! The schema is versioned by `PRAGMA user_version` and built by the numbered scripts in
//! `migrations/sqlite/`. The per-run tables are keyed by an integer `run_key` so that the many
//! call and event rows of a run stay small, and the script text lives in its own table so that
//! routine status updates never rewrite it.
//!
//! This file holds the handle and the trait's dispatch; each table's statements live in a
//! file of their own: `connection.rs` (opening, settings, migrations), `rows.rs` (column
//! conversions, run keys, the fence check), `runs.rs`, `calls.rs`, `events.rs`,
//! `answers.rs` (checkpoint answers, receipts), `leases.rs`, `control.rs` (intents),
//! `housekeeping.rs` (run counts, finished runs), `versions.rs` (the run version status's answer
//! cache checks), `status_reads.rs` (the narrow call tail status reads) and `scripts.rs` (inline
//! script copies, the one part of a run kept as a file).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use rusqlite::Connection;

use super::{
    CallTail, CallWrite, Capabilities, ControlIntent, Fence, IntentAck, IntentScope, RunCounts,
    ScriptChange, Store, StoreResult,
};
use crate::model::{
    CallRecord, CheckpointAnswer, EventRecord, Lease, OperationReceipt, RunId, RunRecord,
    RunSummary,
};

mod answers;
mod call_codes;
mod calls;
mod connection;
mod control;
mod endings;
mod event_blocks;
mod events;
mod hashes;
mod housekeeping;
mod leases;
mod rows;
mod runs;
mod status_reads;
mod usage_column;
mod versions;

use super::script_copies as scripts;
use crate::util::sync::Lock;

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
    /// The process's connection. Every method holds the lock for one short query or
    /// transaction and never across an `.await`, so a std mutex is enough.
    connection: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store under `root`, bringing its schema up to date.
    /// Refuses a database written by a newer agentprism.
    pub fn open(root: &Path) -> StoreResult<SqliteStore> {
        let connection = connection::open(root, &root.join(DATABASE_FILE))?;
        Ok(SqliteStore {
            root: root.to_path_buf(),
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

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic under the lock cannot leave a transaction half applied: a dropped rusqlite
        // `Transaction` rolls back. So the connection behind a poisoned lock is still sound.
        self.connection.locked()
    }
}

#[async_trait]
impl Store for SqliteStore {
    /// One database behind `BEGIN IMMEDIATE` transactions, shared by every process on the
    /// machine: all three hold.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cas: true,
            fence: true,
            scan: true,
        }
    }

    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        runs::create(&mut self.connection(), record, lease)
    }

    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        runs::load(&self.connection(), run_id)
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        runs::update(&mut self.connection(), record, script, fence)
    }

    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        calls::append(
            &mut self.connection(),
            run_id,
            std::slice::from_ref(&write),
            fence,
        )
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        calls::append(&mut self.connection(), run_id, writes, fence)
    }

    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        events::append(&mut self.connection(), run_id, events, fence)
    }

    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        calls::all(&self.connection(), run_id)
    }

    async fn next_settlement_ordinal(&self, run_id: &RunId) -> StoreResult<u64> {
        calls::next_settlement_ordinal(&self.connection(), run_id)
    }

    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        calls::replay_pool(&self.connection(), run_id)
    }

    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        calls::latest(&self.connection(), run_id)
    }

    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
        calls::tail(&self.connection(), run_id, limit)
    }

    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
        calls::tail_rows(&self.connection(), run_id, limit)
    }

    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        calls::record_total(&mut self.connection(), run_id, generation, total, fence)
    }

    async fn close_generation(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        endings::close_generation(&mut self.connection(), run_id, events, call_total, fence)
    }

    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        calls::checkpoints(&self.connection(), run_id)
    }

    async fn events(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        events::page(&self.connection(), run_id, after, limit)
    }

    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64> {
        events::last_event_seq(&self.connection(), run_id)
    }

    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)> {
        events::log_tail(&self.connection(), run_id, limit)
    }

    async fn status_call_tail(
        &self,
        run_id: &RunId,
        limit: u32,
        count: bool,
    ) -> StoreResult<super::SummaryTail> {
        status_reads::tail(&self.connection(), run_id, limit, count)
    }

    async fn run_version(&self, run_id: &RunId) -> StoreResult<Option<super::RunVersion>> {
        versions::run_version(&self.connection(), run_id).map(Some)
    }

    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
    ) -> StoreResult<CheckpointAnswer> {
        answers::put_checkpoint_answer(&mut self.connection(), run_id, answer)
    }

    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        answers::checkpoint_answers(&self.connection(), run_id)
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
    ) -> StoreResult<OperationReceipt> {
        answers::put_receipt(&mut self.connection(), run_id, receipt)
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        answers::receipt(&self.connection(), run_id, operation_id)
    }

    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        leases::lease(&self.connection(), run_id)
    }

    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool> {
        leases::acquire(&mut self.connection(), run_id, expected, lease)
    }

    async fn renew_lease(&self, run_id: &RunId, token: &str, until: i64) -> StoreResult<()> {
        leases::renew(&mut self.connection(), run_id, token, until)
    }

    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()> {
        leases::release(&mut self.connection(), run_id, token)
    }

    async fn record_outcome(&self, record: &RunRecord, lease_token: &str) -> StoreResult<()> {
        endings::record_outcome(&mut self.connection(), record, lease_token)
    }

    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>> {
        runs::list(&self.connection(), project_dir, limit)
    }

    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>> {
        runs::active(&self.connection(), project_dir)
    }

    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>> {
        runs::with_script(&self.connection(), script_file)
    }

    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        runs::caller(&self.connection(), run_id)
    }

    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool> {
        runs::set_caller(&self.connection(), run_id, expected, caller)
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        let deleted = runs::delete(&mut self.connection(), run_id)?;
        scripts::delete_with_run(&self.root, run_id, &deleted);
        Ok(())
    }

    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent> {
        control::put(&mut self.connection(), intent)
    }

    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>> {
        control::read(&self.connection(), run_id, op)
    }

    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>> {
        control::pending(&self.connection(), scope)
    }

    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
    ) -> StoreResult<IntentAck> {
        control::acknowledge(&mut self.connection(), run_id, op, ack)
    }

    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>> {
        control::ack(&self.connection(), run_id, op)
    }

    async fn create_script_copy(
        &self,
        project_dir: &Path,
        run_id: &RunId,
        text: &str,
    ) -> StoreResult<PathBuf> {
        scripts::create(&self.root, project_dir, run_id, text)
    }

    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
        scripts::delete(&self.root, project_dir, run_id)
    }

    async fn run_counts(&self) -> StoreResult<RunCounts> {
        housekeeping::counts(&self.connection())
    }

    async fn terminal_before(&self, before_ms: i64, limit: u32) -> StoreResult<Vec<RunId>> {
        housekeeping::terminal_before(&self.connection(), before_ms, limit)
    }
}
