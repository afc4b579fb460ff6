//! This process as a lease holder, and the owner's half of run control: carrying out the
//! stop and cancel intents other processes leave for the runs it executes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::driver::Control;
use crate::engine::manager::{Engine, EngineError, EngineResult, Rejected, StopRequested};
use crate::engine::status::StatusQuery;
use crate::model::{Lease, RunId, RunStatus};
use crate::store::{Fence, IntentAck, IntentAction, IntentScope, LeasePolicy, StoreError};
use crate::util::now_ms;
use crate::util::sync::Lock;

/// This process as a lease holder.
#[derive(Clone, Debug)]
pub struct Owner {
    /// Names the holder on every lease it takes: a daemon's `instanceId`, so other
    /// processes know whose control socket can act on the run.
    pub owner_id: String,
    /// With `proc_start`, the process identity that tells a live holder from a dead one.
    pub pid: u32,
    pub proc_start: u64,
}

impl Owner {
    /// This process under a fresh owner id.
    pub(crate) fn current() -> Owner {
        Owner::with_id(uuid::Uuid::new_v4().to_string())
    }

    /// This process under `owner_id` (a daemon's `instanceId`).
    pub(crate) fn with_id(owner_id: String) -> Owner {
        let pid = std::process::id();
        Owner {
            owner_id,
            pid,
            proc_start: crate::util::process_start_time(pid).unwrap_or(0),
        }
    }

    /// A fresh lease naming this process, taken at `now` (Unix ms, the lease clock) and
    /// expiring as `policy` says (never, for `HolderLiveness`).
    pub(super) fn lease(&self, policy: LeasePolicy, now: i64) -> Lease {
        Lease {
            owner_id: self.owner_id.clone(),
            pid: self.pid,
            proc_start: self.proc_start,
            boot_id: crate::util::process::current_boot_id(),
            host: crate::util::process::host_name(),
            token: uuid::Uuid::new_v4().to_string(),
            acquired_at: now,
            expires_at: policy.expiry(now),
        }
    }
}

impl Engine {
    /// A fresh lease of this engine under its lease policy, dated by the lease clock
    /// ([`Engine::lease_now`]).
    pub(super) async fn new_lease(&self) -> EngineResult<Lease> {
        let now = self.lease_now().await?;
        Ok(self.inner.owner.lease(self.inner.config.lease_policy, now))
    }

    /// Under a policy that expires leases, a store failure while taking a new run's first
    /// lease is the seed's "could not acquire run execution lease": the run does not start
    /// uncoordinated. Other errors, and every error under holder liveness, pass unchanged.
    pub(super) fn unleased(&self, error: EngineError) -> EngineError {
        match (self.inner.config.lease_policy, error) {
            (LeasePolicy::Ttl(_), EngineError::Store(StoreError::Io(message))) => {
                EngineError::Store(StoreError::Io(format!(
                    "could not acquire run execution lease: {message}"
                )))
            }
            (_, error) => error,
        }
    }

    /// The clock leases are dated and judged with: under a policy that expires leases, the
    /// store's ([`crate::store::Store::clock_ms`], the database's on a shared store, so
    /// replicas whose clocks drift agree on when a lease lapses); this host's otherwise
    /// (holder liveness never looks at time).
    pub(super) async fn lease_now(&self) -> EngineResult<i64> {
        match self.inner.config.lease_policy {
            LeasePolicy::HolderLiveness => Ok(now_ms()),
            LeasePolicy::Ttl(_) => Ok(self.inner.store.clock_ms().await?),
        }
    }

    /// Marks the control intent `op` done with `outcome`. The first acknowledgement wins; a
    /// failure is logged, and the intent stays pending for the next scan. While this process
    /// executes the run, the acknowledgement is fenced by the lease it executes under, so a
    /// holder that was taken over cannot mark done what the new holder must carry out.
    pub(super) async fn acknowledge(&self, run_id: &RunId, op: &str, outcome: Value) {
        let token = self
            .inner
            .live
            .locked()
            .get(run_id)
            .map(|live| live.lease_token.clone());
        self.acknowledge_under(run_id, op, outcome, token.as_deref())
            .await;
    }

    /// [`Engine::acknowledge`] under the lease `token` (`None`: as a process that does not
    /// execute the run).
    pub(super) async fn acknowledge_under(
        &self,
        run_id: &RunId,
        op: &str,
        outcome: Value,
        token: Option<&str>,
    ) {
        let ack = IntentAck::new(outcome);
        let store = &self.inner.store;
        if let Err(error) = store
            .acknowledge_intent(run_id, op, &ack, token.map(Fence))
            .await
        {
            tracing::warn!(run = %run_id, "cannot acknowledge control intent {op}: {error}");
        }
    }

    /// The owner's half of a forwarded whole-run stop (daemon.md 1.10 step 5): re-reads the
    /// intent `op`, stops the run this engine executes, waits up to `wait` for the aborted
    /// state and its one `stopped` event to be stored, and acknowledges the intent.
    /// `{outcome:"stopping"}` when the run has not settled within `wait`: the intent stays
    /// and [`Engine::complete_stop_intents`] acknowledges it later.
    pub(crate) async fn stop_requested(
        &self,
        run_id: &RunId,
        op: &str,
        wait: Duration,
    ) -> EngineResult<StopRequested> {
        let record = self.inner.store.load_run(run_id).await?;
        let intent = self.inner.store.intent(run_id, op).await?;
        let owner = self.owner_summary();
        if record.status.is_terminal() {
            let settled = json!({"state": "settled", "operationId": op, "stopped": false, "alreadyTerminal": true, "owner": owner});
            if intent.is_some() {
                self.acknowledge(run_id, op, settled).await;
            }
            return Ok(StopRequested::Settled {
                stopped: false,
                already_terminal: true,
                status: record.status,
                owner,
            });
        }
        if !self.send_control(run_id, Control::Stop) {
            return Err(EngineError::Rejected(Rejected::Conflict(format!(
                "run {run_id} is not executing in this process"
            ))));
        }
        if tokio::time::timeout(wait, self.wait(run_id)).await.is_err() {
            return Ok(StopRequested::Stopping {
                operation_id: op.to_owned(),
                owner,
            });
        }
        let record = self.inner.store.load_run(run_id).await?;
        let stopped = record.status == RunStatus::Aborted;
        let settled = json!({"state": "settled", "operationId": op, "stopped": stopped, "alreadyTerminal": !stopped, "owner": owner});
        if intent.is_some() {
            self.acknowledge(run_id, op, settled).await;
        }
        Ok(StopRequested::Settled {
            stopped,
            already_terminal: !stopped,
            status: record.status,
            owner,
        })
    }

    /// Carries out unacknowledged control intents (daemon.md 1.10 step 8, "owners scan
    /// intents every tick and at start"): for a stop, a run this engine executes is told to
    /// stop, a settled run's intent is acknowledged, a run nobody executes is stopped cold and
    /// acknowledged; runs another live process holds are left to it. Returns how many stop
    /// intents name runs this engine executes: work that keeps a daemon from exiting.
    pub(crate) async fn complete_stop_intents(&self) -> usize {
        let found = match self.inner.store.pending_intents(IntentScope::All).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!("cannot list pending control intents: {error}");
                return 0;
            }
        };
        let mut owned = 0;
        for intent in found {
            if intent.action == IntentAction::CancelAgent {
                self.complete_cancel_intent(&intent).await;
                continue;
            }
            let run_id = &intent.run_id;
            let record = match self.inner.store.load_run(run_id).await {
                Ok(record) => record,
                // Deleted since the listing: its intents went with it.
                Err(StoreError::UnknownRun(_)) => continue,
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                    continue;
                }
            };
            if record.status.is_terminal() {
                let stopped = record.status == RunStatus::Aborted;
                let settled = json!({"state": "settled", "operationId": intent.op, "stopped": stopped, "alreadyTerminal": !stopped, "owner": self.owner_summary()});
                self.acknowledge(run_id, &intent.op, settled).await;
                continue;
            }
            if self.send_control(run_id, Control::Stop) {
                owned += 1;
                continue;
            }
            match self.foreign_owner(run_id).await {
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                    continue;
                }
            }
            match self.stop_cold(run_id, &StatusQuery::default()).await {
                Ok(answer) => {
                    let already = answer.already_terminal == Some(true);
                    let settled = json!({"state": "settled", "operationId": intent.op, "stopped": !already, "alreadyTerminal": already, "cold": true});
                    self.acknowledge(run_id, &intent.op, settled).await;
                }
                Err(error) => {
                    tracing::warn!(run = %run_id, "stop intent {}: {error}", intent.op);
                }
            }
        }
        owned
    }

    /// `control.owner` describing this engine's process.
    /// The lease of `run_id` as stored: who holds it now, if anyone.
    pub(crate) async fn holder(&self, run_id: &RunId) -> EngineResult<Option<Lease>> {
        Ok(self.inner.store.lease(run_id).await?)
    }

    pub(super) fn owner_summary(&self) -> Value {
        json!({"pid": self.inner.owner.pid, "instanceId": self.inner.owner.owner_id})
    }
}
