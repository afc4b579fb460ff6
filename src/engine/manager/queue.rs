//! What the folder server's queue of starts needs from the engine: the store's queue, the
//! clock its claims are dated with, how many slots are free without taking one, and a wake-up
//! when one may have freed. The queue's policy (when to queue, the dispatcher) is the folder
//! server's (`serve::queue`).

use std::path::Path;

use crate::engine::manager::{Engine, EngineResult};
use crate::store::RunQueue;
use crate::util::sync::Lock;

impl Engine {
    /// The store's queue of starts waiting for a slot.
    pub(crate) fn queue(&self) -> &dyn RunQueue {
        self.inner.store.as_ref()
    }

    /// The clock queue claims are dated with: the store's under leases that expire (the
    /// database's on a shared store, so replicas agree on when a claim lapses), else this
    /// host's.
    pub(crate) async fn queue_now(&self) -> EngineResult<i64> {
        self.lease_now().await
    }

    /// How many more runs of `project_dir` could start now, within the project's cap (its
    /// active runs in the store) and this process's, without taking a slot: a start may
    /// still be refused if another takes it first.
    pub(crate) async fn free_slots(&self, project_dir: &Path) -> EngineResult<usize> {
        let active = self.project_active_count(project_dir).await?;
        let preparing = self.inner.preparing.locked();
        let in_project = preparing.get(project_dir).copied().unwrap_or(0);
        let per_project = self
            .inner
            .config
            .max_active_per_project
            .saturating_sub(active.saturating_add(in_project));
        let owned = self.inner.live.locked().len() + preparing.values().sum::<usize>();
        let overall = self.inner.config.max_runs.saturating_sub(owned);
        Ok(per_project.min(overall))
    }

    /// Returns once a slot of this process may have freed since the last return (a
    /// generation ended here, or a preparation gave its slot back); one waiter at a time.
    pub(crate) async fn slot_freed(&self) {
        self.inner.freed.notified().await;
    }
}
