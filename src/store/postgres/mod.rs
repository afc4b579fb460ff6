//! The shared PostgreSQL store: several `serve` replicas on several hosts keep their runs in
//! one database, through `tokio-postgres` and a `deadpool-postgres` pool (plain TCP or a
//! unix socket; no TLS). It promises `cas`, `fence` and `scan` across every replica:
//!
//! - every compare-and-swap (the lease, the caller tag) is one conditional `UPDATE`, and
//!   every first-writer-wins insert one `INSERT … ON CONFLICT`, so of two replicas exactly
//!   one wins;
//! - every fenced write is a transaction whose first statement locks the run's row on the
//!   lease token (`SELECT … FOR NO KEY UPDATE`, `rows::fenced_run_key`): a replica whose
//!   lease was taken over has its late write refused (`StoreError::Fenced`), writing nothing;
//! - the listings across projects, the housekeeping queries and the pending intents are
//!   single indexed queries.
//!
//! Every call has a deadline (`PgOptions::call_deadline`): a tokio timeout around getting a
//! connection and running the call (a connection that missed it is discarded, not pooled),
//! and the same `statement_timeout` on the server (`idle_in_transaction_session_timeout` at
//! half of it), so a hung database fails the call with `StoreError::Io("… deadline …")` and
//! a stalled replica cannot keep a run's row locked past another replica's deadline. `clock_ms` is the database's clock, so lease
//! expiry never depends on a replica's. The schema is versioned and migrated under an
//! advisory lock (`migrations.rs`); a database newer than this build is refused.
//!
//! This file holds the handle and the trait's dispatch; `connection.rs` (settings, pool,
//! errors), `migrations.rs`, `rows.rs` (column conversions, run keys, the fence), `runs.rs`,
//! `calls.rs`, `sessions.rs`, `events.rs`, `answers.rs` (checkpoint answers, receipts), `leases.rs`,
//! `control.rs` (intents) and `queue.rs` (the folder server's queue of starts) hold the statements; the inline script copies are local files
//! (`store/script_copies.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;

use super::{
    AnswerReads, Answers, CallReads, CallTail, CallWrite, Calls, Capabilities, Capable,
    ControlIntent, Endings, EventReads, Events, Fence, Housekeeping, IntentAck, IntentReads,
    IntentScope, Intents, LeaseReads, Leases, PastRunsOf, RunCounts, RunQueue, RunReads, Runs,
    ScriptChange, ScriptCopies, StoreResult,
};
use crate::model::{
    CallRecord, CheckpointAnswer, EndSummary, Enqueued, EventRecord, Lease, OpenSession,
    OperationReceipt, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, RunId, RunRecord,
    RunSummary,
};

mod answers;
mod calls;
mod connection;
mod control;
mod endings;
mod events;
mod leases;
mod migrations;
mod queue;
mod rows;
mod runs;
mod sessions;
mod tls;

pub use tls::PgEnvironment;

use super::script_copies as scripts;

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod review_tests;

pub(crate) use connection::redacted;

/// How a replica reaches the database.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The longest any one store call may take, connecting included; keep it below a third
    /// of the run lease's TTL, so a hung database fails calls before a lease can lapse.
    pub call_deadline: Duration,
    /// The most connections this handle opens.
    pub pool_size: usize,
    /// A local folder for inline script copies (the `file://` resource's files); the
    /// database keeps every text, so the folder holds nothing another replica needs.
    pub script_copy_root: PathBuf,
    /// The `PG*` variables the connection reads where the URL leaves a setting open (TLS
    /// mode and files, user, password, database; `tls`).
    pub environment: PgEnvironment,
}

impl PgOptions {
    /// The default deadline: 5 s, a ninth of the default 45 s lease TTL.
    pub(crate) const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(5);
    /// The default pool size: enough for a replica's concurrent runs and status readers.
    pub(crate) const DEFAULT_POOL_SIZE: usize = 8;

    /// The defaults, with script copies under `script_copy_root`.
    pub fn new(script_copy_root: impl Into<PathBuf>) -> PgOptions {
        PgOptions {
            call_deadline: Self::DEFAULT_CALL_DEADLINE,
            pool_size: Self::DEFAULT_POOL_SIZE,
            script_copy_root: script_copy_root.into(),
            environment: PgEnvironment::default(),
        }
    }
}

/// The run store on one PostgreSQL database.
pub struct PostgresStore {
    /// The pool every call takes its connection from.
    pool: Pool,
    /// The deadline and the script copy folder.
    options: PgOptions,
    /// Where the inline script copies go (`options.script_copy_root`).
    copies: scripts::CopyRoot,
    /// The location with its password hidden, for messages.
    location: String,
}

/// Takes a connection from the pool and runs `$body` with it, the whole within the call
/// deadline. A connection whose call missed the deadline is taken out of the pool (its
/// state is unknown, and it may be the one a partition cut off).
macro_rules! within_deadline {
    ($store:expr, $doing:expr, |$client:ident| $body:expr) => {{
        let store: &PostgresStore = $store;
        let deadline = store.options.call_deadline;
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(deadline, store.pool.get()).await {
            Err(_) => Err(connection::missed_deadline(&$doing(), deadline)),
            Ok(Err(error)) => Err(store.pool_error(&$doing(), error)),
            #[allow(unused_mut)]
            Ok(Ok(mut $client)) => {
                let left = deadline.saturating_sub(started.elapsed());
                let outcome = tokio::time::timeout(left, async { $body }).await;
                match outcome {
                    Ok(result) => result,
                    Err(_) => {
                        drop(deadpool_postgres::Object::take($client));
                        Err(connection::missed_deadline(&$doing(), deadline))
                    }
                }
            }
        }
    }};
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://` or `postgresql://`, or a key=value
    /// string), bringing its schema up to date under the migration lock. Refuses a database
    /// whose schema is newer than this build knows. Errors never show the URL's password.
    pub async fn connect(url: &str, options: PgOptions) -> StoreResult<PostgresStore> {
        let (config, tls) = connection::config(url, &options)?;
        let location = redacted(url);
        // Migrating may wait for another replica's migration, so it gets a few deadlines.
        let migrating = options.call_deadline.saturating_mul(3);
        let migrated = migrations::migrate(&config, tls.clone(), url, migrating);
        match tokio::time::timeout(migrating, migrated).await {
            Ok(outcome) => outcome?,
            Err(_) => {
                return Err(connection::missed_deadline(
                    &format!("migrate the PostgreSQL store {location}"),
                    migrating,
                ));
            }
        }
        let pool = connection::pool(config, tls, &options)?;
        scripts::narrow_existing(&options.script_copy_root)?;
        Ok(PostgresStore {
            pool,
            copies: scripts::CopyRoot::new(&options.script_copy_root),
            options,
            location,
        })
    }

    /// The location this store was opened at, password hidden.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn pool_error(&self, doing: &str, error: deadpool_postgres::PoolError) -> super::StoreError {
        let detail = match &error {
            deadpool_postgres::PoolError::Backend(error) => connection::describe(error),
            other => other.to_string(),
        };
        super::StoreError::Io(format!(
            "{doing}: cannot reach the PostgreSQL store {}: {detail}",
            self.location
        ))
    }
}

impl Capable for PostgresStore {
    /// One database shared by every replica, with atomic conditional statements and row
    /// locks: all three hold.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cas: true,
            fence: true,
            scan: true,
        }
    }
}

#[async_trait]
impl RunReads for PostgresStore {
    async fn load_run(&self, run_id: &RunId) -> StoreResult<RunRecord> {
        let doing = || format!("load run {run_id}");
        within_deadline!(self, doing, |client| runs::load(&client, run_id).await)
    }

    async fn list_runs(
        &self,
        project_dir: Option<&Path>,
        limit: u32,
    ) -> StoreResult<Vec<RunSummary>> {
        let doing = || "list runs".to_owned();
        within_deadline!(self, doing, |client| {
            runs::list(&client, project_dir, limit).await
        })
    }

    async fn active_runs(&self, project_dir: &Path) -> StoreResult<Vec<RunId>> {
        let doing = || format!("list the active runs of {}", project_dir.display());
        within_deadline!(self, doing, |client| runs::active(&client, project_dir)
            .await)
    }

    async fn runs_with_script(&self, script_file: &Path) -> StoreResult<Vec<RunId>> {
        let doing = || format!("find the runs of script {}", script_file.display());
        within_deadline!(self, doing, |client| {
            runs::with_script(&client, script_file).await
        })
    }

    async fn past_summaries(&self, of: PastRunsOf<'_>, limit: u32) -> StoreResult<Vec<EndSummary>> {
        let doing = || format!("read the summaries of {of:?}");
        within_deadline!(self, doing, |client| {
            runs::past_summaries(&client, of, limit).await
        })
    }

    async fn run_caller(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        let doing = || format!("read the caller of run {run_id}");
        within_deadline!(self, doing, |client| runs::caller(&client, run_id).await)
    }

    async fn run_trace(&self, run_id: &RunId) -> StoreResult<Option<Option<String>>> {
        let doing = || format!("read the trace context of run {run_id}");
        within_deadline!(self, doing, |client| runs::trace(&client, run_id).await)
    }
}

#[async_trait]
impl Runs for PostgresStore {
    async fn create_run(&self, record: &RunRecord, lease: &Lease) -> StoreResult<()> {
        let doing = || format!("create run {}", record.run_id);
        within_deadline!(self, doing, |client| runs::create(
            &mut client,
            record,
            lease
        )
        .await)
    }

    async fn update_run(
        &self,
        record: &RunRecord,
        script: ScriptChange,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("update run {}", record.run_id);
        within_deadline!(self, doing, |client| {
            runs::update(&mut client, record, script, fence).await
        })
    }

    async fn set_run_caller(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        caller: Option<&str>,
    ) -> StoreResult<bool> {
        let doing = || format!("set the caller of run {run_id}");
        within_deadline!(self, doing, |client| {
            runs::set_caller(&client, run_id, expected, caller).await
        })
    }

    async fn set_run_trace(&self, run_id: &RunId, traceparent: &str) -> StoreResult<bool> {
        let doing = || format!("keep the trace context of run {run_id}");
        within_deadline!(self, doing, |client| {
            runs::set_trace(&client, run_id, traceparent).await
        })
    }

    async fn delete_run(&self, run_id: &RunId) -> StoreResult<()> {
        let doing = || format!("delete run {run_id}");
        let deleted = within_deadline!(self, doing, |client| runs::delete(&mut client, run_id)
            .await)?;
        scripts::delete_with_run(&self.options.script_copy_root, run_id, &deleted);
        Ok(())
    }
}

#[async_trait]
impl CallReads for PostgresStore {
    async fn calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.read_calls(run_id, calls::Reading::All).await
    }

    async fn replay_pool(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.read_calls(run_id, calls::Reading::ReplayPool).await
    }

    async fn latest_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.read_calls(run_id, calls::Reading::Latest).await
    }

    async fn call_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<CallTail> {
        let doing = || format!("read the last calls of run {run_id}");
        within_deadline!(self, doing, |client| calls::tail(&client, run_id, limit)
            .await)
    }

    async fn call_tail_rows(
        &self,
        run_id: &RunId,
        limit: u32,
    ) -> StoreResult<(Option<u32>, Vec<CallRecord>)> {
        let doing = || format!("read the last calls of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::tail_rows(&client, run_id, limit).await
        })
    }

    async fn checkpoint_calls(&self, run_id: &RunId) -> StoreResult<Vec<CallRecord>> {
        self.read_calls(run_id, calls::Reading::Checkpoints).await
    }

    async fn open_sessions(&self, run_id: &RunId) -> StoreResult<Vec<OpenSession>> {
        let doing = || format!("read the journaled sessions of run {run_id}");
        within_deadline!(self, doing, |client| sessions::all(&client, run_id).await)
    }
}

#[async_trait]
impl Calls for PostgresStore {
    async fn append_call(
        &self,
        run_id: &RunId,
        write: CallWrite<'_>,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("append a call of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::append(&mut client, run_id, std::slice::from_ref(&write), fence).await
        })
    }

    async fn append_calls(
        &self,
        run_id: &RunId,
        writes: &[CallWrite<'_>],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("append calls of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::append(&mut client, run_id, writes, fence).await
        })
    }

    async fn journal_session(
        &self,
        run_id: &RunId,
        session: &OpenSession,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("journal a session of run {run_id}");
        within_deadline!(self, doing, |client| {
            sessions::journal(&mut client, run_id, session, fence).await
        })
    }

    async fn record_call_total(
        &self,
        run_id: &RunId,
        generation: u32,
        total: u64,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("record the call count of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::record_total(&mut client, run_id, generation, total, fence).await
        })
    }

    async fn set_aside_calls(
        &self,
        run_id: &RunId,
        rows: &[(u32, u32)],
        by: u32,
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("set aside calls of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::set_aside(&mut client, run_id, rows, by, fence).await
        })
    }
}

#[async_trait]
impl EventReads for PostgresStore {
    async fn events(
        &self,
        run_id: &RunId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let doing = || format!("read events of run {run_id}");
        within_deadline!(self, doing, |client| {
            events::page(&client, run_id, after, limit).await
        })
    }

    async fn last_event_seq(&self, run_id: &RunId) -> StoreResult<u64> {
        let doing = || format!("read the last event seq of run {run_id}");
        within_deadline!(self, doing, |client| {
            events::last_event_seq(&client, run_id).await
        })
    }

    async fn log_tail(&self, run_id: &RunId, limit: u32) -> StoreResult<(Vec<String>, u64)> {
        let doing = || format!("read the log of run {run_id}");
        within_deadline!(self, doing, |client| {
            events::log_tail(&client, run_id, limit).await
        })
    }
}

#[async_trait]
impl Events for PostgresStore {
    async fn append_events(
        &self,
        run_id: &RunId,
        events: &[EventRecord],
        fence: Fence<'_>,
    ) -> StoreResult<()> {
        let doing = || format!("append events of run {run_id}");
        within_deadline!(self, doing, |client| {
            events::append(&mut client, run_id, events, fence).await
        })
    }
}

#[async_trait]
impl AnswerReads for PostgresStore {
    async fn checkpoint_answers(&self, run_id: &RunId) -> StoreResult<Vec<CheckpointAnswer>> {
        let doing = || format!("read checkpoint answers of run {run_id}");
        within_deadline!(self, doing, |client| {
            answers::checkpoint_answers(&client, run_id).await
        })
    }

    async fn receipt(
        &self,
        run_id: &RunId,
        operation_id: &str,
    ) -> StoreResult<Option<OperationReceipt>> {
        let doing = || format!("read receipt {operation_id} of run {run_id}");
        within_deadline!(self, doing, |client| {
            answers::receipt(&client, run_id, operation_id).await
        })
    }
}

#[async_trait]
impl Answers for PostgresStore {
    async fn put_checkpoint_answer(
        &self,
        run_id: &RunId,
        answer: &CheckpointAnswer,
        fence: Fence<'_>,
    ) -> StoreResult<CheckpointAnswer> {
        let doing = || format!("record a checkpoint answer of run {run_id}");
        within_deadline!(self, doing, |client| {
            answers::put_checkpoint_answer(&mut client, run_id, answer, fence).await
        })
    }

    async fn put_receipt(
        &self,
        run_id: &RunId,
        receipt: &OperationReceipt,
        fence: Fence<'_>,
    ) -> StoreResult<OperationReceipt> {
        let doing = || format!("record a receipt of run {run_id}");
        within_deadline!(self, doing, |client| {
            answers::put_receipt(&mut client, run_id, receipt, fence).await
        })
    }
}

#[async_trait]
impl LeaseReads for PostgresStore {
    async fn lease(&self, run_id: &RunId) -> StoreResult<Option<Lease>> {
        let doing = || format!("read the lease of run {run_id}");
        within_deadline!(self, doing, |client| leases::lease(&client, run_id).await)
    }

    async fn clock_ms(&self) -> StoreResult<i64> {
        let doing = || "read the database's clock".to_owned();
        within_deadline!(self, doing, |client| leases::clock_ms(&client).await)
    }
}

#[async_trait]
impl Leases for PostgresStore {
    async fn acquire_lease(
        &self,
        run_id: &RunId,
        expected: Option<&str>,
        lease: &Lease,
    ) -> StoreResult<bool> {
        let doing = || format!("acquire the lease of run {run_id}");
        within_deadline!(self, doing, |client| {
            leases::acquire(&client, run_id, expected, lease).await
        })
    }

    async fn renew_lease(&self, run_id: &RunId, token: &str, until: i64) -> StoreResult<()> {
        let doing = || format!("renew the lease of run {run_id}");
        within_deadline!(self, doing, |client| {
            leases::renew(&client, run_id, token, until).await
        })
    }

    async fn release_lease(&self, run_id: &RunId, token: &str) -> StoreResult<()> {
        let doing = || format!("release the lease of run {run_id}");
        within_deadline!(self, doing, |client| {
            leases::release(&client, run_id, token).await
        })
    }
}

#[async_trait]
impl IntentReads for PostgresStore {
    async fn intent(&self, run_id: &RunId, op: &str) -> StoreResult<Option<ControlIntent>> {
        let doing = || format!("read control intent {op} of run {run_id}");
        within_deadline!(self, doing, |client| control::read(&client, run_id, op)
            .await)
    }

    async fn pending_intents(&self, scope: IntentScope<'_>) -> StoreResult<Vec<ControlIntent>> {
        let doing = || "list pending control intents".to_owned();
        within_deadline!(self, doing, |client| control::pending(&client, scope).await)
    }

    async fn intent_ack(&self, run_id: &RunId, op: &str) -> StoreResult<Option<IntentAck>> {
        let doing = || format!("read the acknowledgement of intent {op} of run {run_id}");
        within_deadline!(self, doing, |client| control::ack(&client, run_id, op)
            .await)
    }
}

#[async_trait]
impl Intents for PostgresStore {
    async fn put_intent(&self, intent: &ControlIntent) -> StoreResult<ControlIntent> {
        let doing = || format!("record a control intent of run {}", intent.run_id);
        within_deadline!(self, doing, |client| control::put(&mut client, intent)
            .await)
    }

    async fn acknowledge_intent(
        &self,
        run_id: &RunId,
        op: &str,
        ack: &IntentAck,
        fence: Option<Fence<'_>>,
    ) -> StoreResult<IntentAck> {
        let doing = || format!("acknowledge control intent {op} of run {run_id}");
        within_deadline!(self, doing, |client| {
            control::acknowledge(&mut client, run_id, op, ack, fence).await
        })
    }
}

#[async_trait]
impl ScriptCopies for PostgresStore {
    async fn create_script_copy(
        &self,
        project_dir: &Path,
        run_id: &RunId,
        text: &str,
    ) -> StoreResult<PathBuf> {
        scripts::create(&self.copies, project_dir, run_id, text)
    }

    async fn script_copy_place(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<PathBuf> {
        scripts::place(&self.copies, project_dir, run_id)
    }

    async fn delete_script_copy(&self, project_dir: &Path, run_id: &RunId) -> StoreResult<()> {
        scripts::delete(&self.options.script_copy_root, project_dir, run_id)
    }
}

#[async_trait]
impl Housekeeping for PostgresStore {
    async fn run_counts(&self) -> StoreResult<RunCounts> {
        let doing = || "count the runs by status".to_owned();
        within_deadline!(self, doing, |client| runs::counts(&client).await)
    }

    async fn terminal_before(&self, before_ms: i64, limit: u32) -> StoreResult<Vec<RunId>> {
        let doing = || "list the runs that finished before a time".to_owned();
        within_deadline!(self, doing, |client| {
            runs::terminal_before(&client, before_ms, limit).await
        })
    }

    async fn resumes_due(&self, until_ms: i64, limit: u32) -> StoreResult<Vec<(RunId, i64)>> {
        let doing = || "list the runs whose automatic resume is due".to_owned();
        within_deadline!(self, doing, |client| {
            runs::resumes_due(&client, until_ms, limit).await
        })
    }
}

#[async_trait]
impl RunQueue for PostgresStore {
    async fn enqueue(&self, start: &QueuedStart, bound: u64) -> StoreResult<Enqueued> {
        let doing = || format!("queue the start of run {}", start.run_id);
        within_deadline!(self, doing, |client| queue::enqueue(
            &mut client,
            start,
            bound
        )
        .await)
    }

    async fn queued(&self, run_id: &RunId) -> StoreResult<Option<QueuedEntry>> {
        let doing = || format!("read the queue entry of run {run_id}");
        within_deadline!(self, doing, |client| queue::queued(&client, run_id).await)
    }

    async fn queue_stats(&self) -> StoreResult<QueueStats> {
        let doing = || "count the queued starts".to_owned();
        within_deadline!(self, doing, |client| queue::stats(&client).await)
    }

    async fn claim_queued(
        &self,
        claimer: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> StoreResult<Option<QueuedStart>> {
        let doing = || "claim the oldest queued start".to_owned();
        within_deadline!(self, doing, |client| {
            queue::claim(&client, claimer, now_ms, until_ms).await
        })
    }

    async fn unclaim_queued(&self, run_id: &RunId, claimer: &str) -> StoreResult<()> {
        let doing = || format!("give back the claim on queued run {run_id}");
        within_deadline!(self, doing, |client| {
            queue::unclaim(&client, run_id, claimer).await
        })
    }

    async fn remove_queued(&self, run_id: &RunId) -> StoreResult<Option<QueueOutcome>> {
        let doing = || format!("remove queued run {run_id}");
        within_deadline!(self, doing, |client| queue::remove(&client, run_id).await)
    }

    async fn end_queued(
        &self,
        run_id: &RunId,
        outcome: QueueOutcome,
        message: &str,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let doing = || format!("end queued run {run_id}");
        within_deadline!(self, doing, |client| {
            queue::end(&client, run_id, outcome, message, now_ms).await
        })
    }

    async fn prune_queue(&self, before_ms: i64) -> StoreResult<u64> {
        let doing = || "delete the ended queue entries".to_owned();
        within_deadline!(self, doing, |client| queue::prune(&client, before_ms).await)
    }
}

#[async_trait]
#[async_trait]
impl Endings for PostgresStore {
    async fn end_generation(
        &self,
        record: &RunRecord,
        lease_token: &str,
        events: &[EventRecord],
        call_total: Option<(u32, u64)>,
    ) -> StoreResult<()> {
        let doing = || format!("end the generation of run {}", record.run_id);
        within_deadline!(self, doing, |client| {
            endings::end_generation(&mut client, record, lease_token, events, call_total).await
        })
    }
}

impl PostgresStore {
    async fn read_calls(
        &self,
        run_id: &RunId,
        reading: calls::Reading,
    ) -> StoreResult<Vec<CallRecord>> {
        let doing = || format!("read calls of run {run_id}");
        within_deadline!(self, doing, |client| {
            calls::read(&client, run_id, reading).await
        })
    }
}
