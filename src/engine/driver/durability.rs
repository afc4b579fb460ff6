//! The durability rule, in one place: every store write of a generation, and what a failed
//! one does.
//!
//! A settled call reaches the store before the script sees its result: the caller of
//! [`Driver::record_call`] answers the VM only on `Ok`. The row goes in one transaction with
//! the events buffered so far. A replayed row's result is already durable, so replays are
//! buffered and written in batches of [`REPLAY_BATCH`], always before the next live row or
//! event batch, so rows reach the store in settlement order. Each write returns
//! [`LostWrite`] when the store refused it, and its caller's branch is
//! [`Driver::on_lost_write`]: the first failure is kept for the outcome, the generation
//! pauses as interrupted (resumable: whatever was not written runs again), and the call
//! whose row was lost gets no answer. The dry run writes nothing and never fails.

use crate::engine::driver::{Driver, Halt, Persistence};
use crate::model::{CallRecord, PauseReason};
use crate::store::{CallWrite, Fence, StoreError};

/// Replayed rows are written in batches of this size (their results are already durable).
pub(super) const REPLAY_BATCH: usize = 512;

/// A store write that did not happen: the run is no longer recorded faithfully.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct LostWrite(#[from] StoreError);

impl Driver {
    /// Writes one settled call, with the replays and events buffered before it, durably.
    /// Only on `Ok` may the script see the call's result.
    pub(super) async fn record_call(
        &mut self,
        record: &CallRecord,
        supersedes: &[(u32, u32)],
    ) -> Result<(), LostWrite> {
        self.flush_replays().await?;
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
            return Ok(());
        };
        let events = self.events.take();
        let write = CallWrite {
            record,
            supersedes,
            events: &events,
        };
        store
            .append_call(&self.setup.run_id, write, Fence(&lease_token))
            .await?;
        Ok(())
    }

    /// Queues a replayed row; a full batch is written at once.
    pub(super) async fn buffer_replay(
        &mut self,
        record: CallRecord,
        supersedes: Vec<(u32, u32)>,
    ) -> Result<(), LostWrite> {
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
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
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
        Ok(())
    }

    /// Writes the buffered events (after any buffered replays). Events a failed write did
    /// not store stay buffered.
    pub(super) async fn flush_events(&mut self) -> Result<(), LostWrite> {
        self.flush_replays().await?;
        let Persistence::Store { store, lease_token } = self.setup.persistence.clone() else {
            self.events.take();
            return Ok(());
        };
        let events = self.events.take();
        if events.is_empty() {
            return Ok(());
        }
        if let Err(error) = store
            .append_events(&self.setup.run_id, &events, Fence(&lease_token))
            .await
        {
            self.events.restore(events);
            return Err(error.into());
        }
        Ok(())
    }

    /// What a lost write does to the generation: the first failure is kept for the
    /// outcome, and the run pauses as interrupted, so the script gets no more answers.
    pub(super) fn on_lost_write(&mut self, lost: LostWrite) {
        let message = lost.to_string();
        tracing::error!(run = %self.setup.run_id, "store write failed: {message}");
        if self.store_error.is_none() {
            self.store_error = Some(message);
        }
        if self.halt.is_none() {
            self.begin_halt(Halt::Pause {
                reason: PauseReason::Interrupted,
                auth_context: None,
                reset_hint: None,
                checkpoint_context: None,
            });
        }
    }
}
