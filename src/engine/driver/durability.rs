//! The durability rule, in one place: every store write of a generation, the lease
//! heartbeat, and what a failed one does. Besides settled calls and events, a live call's
//! session is journaled at the loop's next tick after it opened, if its call is still live
//! then (`Driver::commit_journal`); a call cut off before that tick (a stop, a pause) carries
//! its session in the transaction of its own row (`Driver::commit_settled`,
//! `Calls::commit_group`). The call's prompt does not wait for it, and a session whose call
//! settles on its own before the tick is never journaled (nothing would reopen it).
//!
//! A settled call reaches the store before the script sees its result: the caller of
//! [`Driver::record_calls`] answers the VM only on `Ok`. The row goes in one transaction with
//! the events buffered so far. Agent calls that settle together are committed together (the
//! group commit, `Driver::commit_settled`): the loop takes every activity already waiting
//! after the one it woke for, writes their rows in one transaction, and only then answers
//! them, in settlement order; a pausing call commits its group before it halts the run.
//! While other calls are live the group waits up to `COMMIT_WINDOW` for more to settle
//! (`Driver::commit_or_wait`); every other write commits a waiting group first
//! (`Driver::commit_group`), so rows reach the store in settlement order. A replayed row's
//! result is already durable, so replays are
//! buffered and written in batches of [`REPLAY_BATCH`], always before the next live row or
//! event batch, so rows reach the store in settlement order. Each write returns
//! [`LostWrite`] when the store refused it, and its caller's branch is
//! [`Driver::on_lost_write`]: the first failure is kept for the outcome, the generation
//! pauses as interrupted (resumable: whatever was not written runs again), and the call
//! whose row was lost gets no answer. The dry run writes nothing and never fails.
//!
//! The generation counts the non-checkpoint rows it wrote ([`Driver::settled_calls`]):
//! the live view shows the count to status while the generation runs, and
//! [`Driver::closing`] hands it with the last events to the write of the generation's outcome,
//! after its last row, so status never counts a run's rows.
//!
//! Under a lease policy that expires leases (`LeasePolicy::Ttl`) the driver's loop renews
//! the lease every `renew_every` ([`Driver::beat`]), with the store's clock and under a
//! deadline; renewals that keep failing cancel the generation's work before the lease
//! could lapse. A renewal or a write refused as
//! `Fenced` means another execution has taken the run over: the generation has lost it, so
//! from then on it makes no store call at all (every write answers [`LostWrite`] at once)
//! and its outcome says `lease_lost`, which the engine does not record either.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::driver::{Closing, Driver, Halt, Persistence};
use crate::model::{CallKind, CallRecord, OpenSession, PauseReason};
use crate::store::{CallWrite, Fence, LeasePolicy, Store, StoreError};
use crate::util::sync::Lock;

/// Replayed rows are written in batches of this size (their results are already durable).
pub(super) const REPLAY_BATCH: usize = 512;

/// A store write that did not happen: the run is no longer recorded faithfully.
#[derive(Debug, thiserror::Error)]
pub(super) enum LostWrite {
    /// A row, an event batch or the outcome the store refused.
    #[error("{0}")]
    Write(#[from] StoreError),
    /// The heartbeat's renewal of the lease, refused.
    #[error("renewing the lease: {0}")]
    Renewal(StoreError),
}

impl LostWrite {
    /// Whether the store refused because the lease is no longer this generation's.
    fn fenced(&self) -> bool {
        matches!(
            self,
            LostWrite::Write(StoreError::Fenced(_)) | LostWrite::Renewal(StoreError::Fenced(_))
        )
    }
}

/// The store a live generation writes to and the lease token its writes are fenced by.
type Target = (Arc<dyn Store>, String);

impl Driver {
    /// Where this generation writes: `None` for the dry run. Once the lease is lost, an
    /// error without asking the store: a generation that lost its run writes nothing more.
    fn target(&self) -> Result<Option<Target>, LostWrite> {
        if self.lease_lost {
            return Err(StoreError::Fenced(self.setup.run_id.clone()).into());
        }
        Ok(match &self.setup.persistence {
            Persistence::Store {
                store, lease_token, ..
            } => Some((store.clone(), lease_token.clone())),
            Persistence::DryRun => None,
        })
    }

    /// Writes one settled call, with the replays and events buffered before it, durably.
    /// Only on `Ok` may the script see the call's result.
    pub(super) async fn record_call(
        &mut self,
        record: &CallRecord,
        supersedes: &[(u32, u32)],
    ) -> Result<(), LostWrite> {
        self.commit_group().await?;
        self.record_calls(&[], &[(record, supersedes)]).await
    }

    /// Writes the sessions opened and the calls that settled together (in settlement
    /// order) in one transaction, with the replays and events buffered before them; the
    /// group commit. Only on `Ok` may the script see any of the calls' results.
    pub(super) async fn record_calls(
        &mut self,
        sessions: &[OpenSession],
        rows: &[(&CallRecord, &[(u32, u32)])],
    ) -> Result<(), LostWrite> {
        self.flush_replays().await?;
        let Some((store, lease_token)) = self.target()? else {
            return Ok(());
        };
        // Buffered events go with the last row; without rows they wait for the next write.
        let events = if rows.is_empty() {
            Vec::new()
        } else {
            self.events.take()
        };
        let last = rows.len().saturating_sub(1);
        let writes: Vec<CallWrite<'_>> = rows
            .iter()
            .enumerate()
            .map(|(position, (record, supersedes))| CallWrite {
                record,
                supersedes,
                events: if position == last { &events } else { &[] },
            })
            .collect();
        match (sessions, writes.as_slice()) {
            ([], [write]) => {
                store
                    .append_call(&self.setup.run_id, write.clone(), Fence(&lease_token))
                    .await?
            }
            ([session], []) => {
                store
                    .journal_session(&self.setup.run_id, session, Fence(&lease_token))
                    .await?
            }
            _ => {
                store
                    .commit_group(&self.setup.run_id, sessions, &writes, Fence(&lease_token))
                    .await?
            }
        }
        let agents = rows
            .iter()
            .filter(|(record, _)| record.kind == CallKind::Agent)
            .count();
        crate::metrics::global().agent_calls_settled(agents);
        let counted = rows
            .iter()
            .filter(|(record, _)| record.kind != CallKind::Checkpoint)
            .count();
        self.count_settled(counted);
        Ok(())
    }

    /// Queues a replayed row; a full batch is written at once.
    pub(super) async fn buffer_replay(
        &mut self,
        record: CallRecord,
        supersedes: Vec<(u32, u32)>,
    ) -> Result<(), LostWrite> {
        // Rows settled before this replay are written before it.
        self.commit_group().await?;
        self.replay_buffer.push((record, supersedes));
        if self.replay_buffer.len() >= REPLAY_BATCH {
            self.flush_replays().await?;
        }
        Ok(())
    }

    /// Writes the buffered replayed rows, the events buffered so far with the last one.
    pub(super) async fn flush_replays(&mut self) -> Result<(), LostWrite> {
        if self.replay_buffer.is_empty() {
            return Ok(());
        }
        let Some((store, lease_token)) = self.target()? else {
            self.replay_buffer.clear();
            return Ok(());
        };
        let buffer = std::mem::take(&mut self.replay_buffer);
        let events = self.events.take();
        let mut writes: Vec<CallWrite<'_>> = buffer
            .iter()
            .map(|(record, supersedes)| CallWrite {
                record,
                supersedes,
                events: &[],
            })
            .collect();
        if let Some(last) = writes.last_mut() {
            last.events = &events;
        }
        store
            .append_calls(&self.setup.run_id, &writes, Fence(&lease_token))
            .await?;
        let counted = buffer
            .iter()
            .filter(|(record, _)| record.kind != CallKind::Checkpoint)
            .count();
        self.count_settled(counted);
        Ok(())
    }

    /// Adds rows just written to the generation's count, and shows it to status.
    fn count_settled(&mut self, rows: usize) {
        self.settled_calls += rows as u64;
        self.setup.live.locked().settled_calls = Some(self.settled_calls);
    }

    /// The generation's last writes, once no row of it can follow and its replays are
    /// written, for the write of its outcome (`Endings::end_generation`, one transaction on
    /// SQLite): the events still buffered and its count of rows, so status of the stopped
    /// run reads the count instead of counting rows (nothing to count for a generation that
    /// wrote no row). `None` when nothing may be written: the dry run, or a lost lease.
    pub(super) fn closing(&mut self) -> Option<Closing> {
        let call_total =
            (self.settled_calls > 0).then_some((self.setup.generation, self.settled_calls));
        let events = self.events.take();
        matches!(self.target(), Ok(Some(_))).then_some(Closing { events, call_total })
    }

    /// Writes the buffered events after any buffered replays. Events a failed write did not
    /// store stay buffered.
    pub(super) async fn flush_events(&mut self) -> Result<(), LostWrite> {
        self.commit_group().await?;
        self.flush_replays().await?;
        let Some((store, lease_token)) = self.target()? else {
            self.events.take();
            return Ok(());
        };
        let events = self.events.take();
        if events.is_empty() {
            return Ok(());
        }
        let written = store
            .append_events(&self.setup.run_id, &events, Fence(&lease_token))
            .await;
        if let Err(error) = written {
            self.events.restore(events);
            return Err(error.into());
        }
        Ok(())
    }

    /// The lease's TTL under a policy that expires leases; `None` otherwise (and for the dry
    /// run).
    pub(super) fn lease_ttl(&self) -> Option<Duration> {
        match &self.setup.persistence {
            Persistence::Store {
                lease_policy: LeasePolicy::Ttl(ttl),
                ..
            } => Some(*ttl),
            _ => None,
        }
    }

    /// One beat of the heartbeat: renews the lease. A fenced renewal loses the run at once.
    /// Another failure (the store unreachable or too slow) is tolerated while the next beat
    /// would still come before the lease's confirmed expiry; past that the generation
    /// cancels its own work ([`Driver::on_lost_write`]) before the lease lapses and another
    /// replica may take the run over.
    pub(super) async fn beat(&mut self) {
        let started = tokio::time::Instant::now();
        match self.renew_lease().await {
            Ok(()) => {
                crate::metrics::global().lease_renewed();
                self.lease_confirmed_until = self.lease_ttl().map(|ttl| started + ttl);
            }
            Err(lost) => {
                crate::metrics::global().lease_renewal_failed();
                let every = self.lease_ttl().map_or(Duration::ZERO, |ttl| ttl / 3);
                let next_beat_in_time = self
                    .lease_confirmed_until
                    .is_some_and(|until| tokio::time::Instant::now() + every < until);
                if lost.fenced() || !next_beat_in_time {
                    self.on_lost_write(lost);
                } else {
                    tracing::warn!(run = %self.setup.run_id, "{lost}; retrying on the next beat, before the lease expires");
                }
            }
        }
    }

    /// The heartbeat's renewal: moves the lease's expiry to the policy's next one, computed
    /// with the store's clock (the database's, on a shared store). Both store calls are
    /// under a deadline of a sixth of the TTL, so a hung store leaves time for another beat
    /// before the lease lapses. Nothing to do for the dry run or a policy whose leases never
    /// expire.
    pub(super) async fn renew_lease(&mut self) -> Result<(), LostWrite> {
        let Persistence::Store { lease_policy, .. } = &self.setup.persistence else {
            return Ok(());
        };
        let lease_policy = *lease_policy;
        let Some(ttl) = self.lease_ttl() else {
            return Ok(());
        };
        let Some((store, lease_token)) = self.target()? else {
            return Ok(());
        };
        let run_id = self.setup.run_id.clone();
        let renewal = async move {
            let now = store.clock_ms().await?;
            let Some(until) = lease_policy.expiry(now) else {
                return Ok(());
            };
            store.renew_lease(&run_id, &lease_token, until).await
        };
        // On a thread of the blocking pool: an embedded store answers synchronously, and one
        // stuck on a lock would otherwise hold this task past the deadline. A renewal that
        // missed its deadline finishes (or fails) there on its own.
        let runtime = tokio::runtime::Handle::current();
        let renewal = tokio::task::spawn_blocking(move || runtime.block_on(renewal));
        let deadline = ttl / 6;
        match tokio::time::timeout(deadline, renewal).await {
            Ok(Ok(result)) => result.map_err(LostWrite::Renewal),
            Ok(Err(join)) => Err(LostWrite::Renewal(StoreError::Io(format!(
                "the renewal did not finish: {join}"
            )))),
            Err(_) => Err(LostWrite::Renewal(StoreError::Io(format!(
                "the store did not answer within {deadline:?}"
            )))),
        }
    }

    /// What a lost write does to the generation: the first failure is kept for the
    /// outcome, and the run pauses as interrupted, so the script gets no more answers (an
    /// interrupted pause cancels running calls too). A fenced one also marks the lease lost.
    pub(super) fn on_lost_write(&mut self, lost: LostWrite) {
        let message = lost.to_string();
        if !lost.fenced() {
            tracing::error!(run = %self.setup.run_id, "store write failed: {message}");
        } else if !self.lease_lost {
            tracing::error!(run = %self.setup.run_id, "this execution lost the run's lease; it stops and writes nothing more: {message}");
            self.lease_lost = true;
        }
        if self.store_error.is_none() {
            self.store_error = Some(message);
        }
        if self.halt.is_none() {
            self.begin_halt(Halt::Pause {
                reason: PauseReason::Interrupted,
                auth_context: None,
                reset_hint: None,
                reset_at: None,
                checkpoint_context: None,
            });
        }
    }
}
