//! The queue of starts (docs/serve.md, "Queue"): a start that finds every slot taken, or
//! other starts already waiting, is kept in the store under the run id answered to its caller
//! and started, oldest first, by whichever replica frees a slot.
//!
//! Each replica runs one dispatcher ([`dispatch_loop`]). It wakes when a run of its own ends,
//! when this replica queued a start, and every [`QueueOptions::poll`] (a slot freed on another
//! replica, a start another replica queued); it then claims the head while it has free slots
//! and starts each claimed entry under its id. A claim lasts [`QueueOptions::claim_ttl`]: the
//! entry of a replica that died while starting it is claimed again after that, in its place.
//! Starting an entry whose run already exists (its claimer admitted it, then died) only
//! removes the entry.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::engine::manager::Rejected;
use crate::engine::{EngineError, StatusQuery};
use crate::model::{Enqueued, QueueOutcome, QueuedStart, RunId};

use super::owners::OwnerKey;
use super::runs::{RunApi, RunError};

/// The bound on waiting starts by default (`--max-queued-runs`).
pub(crate) const DEFAULT_MAX_QUEUED: u64 = 1_000;
/// How often a dispatcher looks at the store without being woken, by default.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// How long a claim lasts by default (one process: nobody else claims).
pub(crate) const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(60);

/// The queue's settings.
#[derive(Clone, Copy, Debug)]
pub struct QueueOptions {
    /// At most this many starts wait; past it a start is refused. 0: no queue, a start
    /// beyond capacity is refused.
    pub bound: u64,
    /// How often the dispatcher looks without being woken.
    pub poll: Duration,
    /// How long a claim lasts before another replica may take the entry.
    pub claim_ttl: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            bound: DEFAULT_MAX_QUEUED,
            poll: DEFAULT_POLL,
            claim_ttl: DEFAULT_CLAIM_TTL,
        }
    }
}

/// The queue as the run API uses it.
pub(crate) struct StartQueue {
    pub options: QueueOptions,
    /// Wakes the dispatcher after this replica queued a start.
    poke: Notify,
}

impl StartQueue {
    pub(crate) fn new(options: QueueOptions) -> Option<Arc<StartQueue>> {
        (options.bound > 0).then(|| {
            Arc::new(StartQueue {
                options,
                poke: Notify::new(),
            })
        })
    }
}

impl RunApi {
    /// Whether a start must queue behind others: some already wait. A queue that cannot be
    /// read does not hold the start up: the start then meets the store's failure itself, in
    /// the engine's words (it cannot take a lease either).
    pub(crate) async fn must_queue(&self) -> bool {
        if self.queue.is_none() {
            return false;
        }
        match self.engine.queue().queue_stats().await {
            Ok(stats) => stats.length > 0,
            Err(error) => {
                tracing::warn!("queue: cannot read its length before a start: {error}");
                false
            }
        }
    }

    /// Keeps a start in the queue for `owner` and answers its id and position; refused when
    /// the queue is full, saying so.
    pub(crate) async fn enqueue(
        &self,
        owner: &OwnerKey,
        workflow: &str,
        arguments: serde_json::Value,
    ) -> Result<RunId, RunError> {
        let Some(queue) = &self.queue else {
            return Err(RunError::Refused("the queue is off".to_owned()));
        };
        let store = |error| RunError::from(EngineError::Store(error));
        let start = QueuedStart {
            run_id: RunId::generate(),
            workflow: workflow.to_owned(),
            caller: owner.as_str().to_owned(),
            arguments,
            enqueued_at: self.engine.queue_now().await?,
        };
        let bound = queue.options.bound;
        match self
            .engine
            .queue()
            .enqueue(&start, bound)
            .await
            .map_err(store)?
        {
            Enqueued::At(_) => {}
            Enqueued::Full(waiting) => {
                return Err(RunError::Refused(format!(
                    "every slot is taken and {waiting} starts already wait in the queue, its \
                     bound (--max-queued-runs / MHL_SERVE_MAX_QUEUED_RUNS = {bound}); try again \
                     when a run finishes"
                )));
            }
        }
        self.owners.started(&start.run_id, owner, workflow, 0);
        queue.poke.notify_one();
        Ok(start.run_id)
    }

    /// Ends a waiting start of the queue as canceled; whether there was one.
    pub(crate) async fn cancel_queued(&self, run_id: &RunId) -> Result<bool, RunError> {
        if self.queue.is_none() {
            return Ok(false);
        }
        let now = self.engine.queue_now().await?;
        self.engine
            .queue()
            .end_queued(
                run_id,
                QueueOutcome::Canceled,
                "canceled before it started",
                now,
            )
            .await
            .map_err(|error| RunError::from(EngineError::Store(error)))
    }
}

/// The dispatcher of this replica: until `shutdown`, starts queued entries while slots are
/// free, waking as the module documentation says.
pub(crate) async fn dispatch_loop(api: Arc<RunApi>, shutdown: CancellationToken) {
    let Some(queue) = api.queue.clone() else {
        return;
    };
    let mut poll = tokio::time::interval(queue.options.poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = poll.tick() => {}
            _ = api.engine.slot_freed() => {}
            _ = queue.poke.notified() => {}
        }
        dispatch(&api, &queue, &shutdown).await;
    }
}

/// Claims and starts entries, oldest first, while this replica has free slots.
async fn dispatch(api: &RunApi, queue: &StartQueue, shutdown: &CancellationToken) {
    let claimer = api.engine.owner().owner_id.clone();
    while !shutdown.is_cancelled() {
        let Some((waiting, now)) = observe(api).await else {
            return;
        };
        if waiting == 0 {
            return;
        }
        match api.engine.free_slots(&api.folder.root).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!("queue: cannot count the free slots: {error}");
                return;
            }
        }
        let until = now.saturating_add(queue.options.claim_ttl.as_millis() as i64);
        let claimed = api.engine.queue().claim_queued(&claimer, now, until).await;
        match claimed {
            Ok(Some(start)) => {
                if !start_claimed(api, &claimer, start).await {
                    return;
                }
            }
            Ok(None) => return,
            Err(error) => {
                tracing::warn!("queue: cannot claim the oldest start: {error}");
                return;
            }
        }
    }
}

/// Reads the queue's length and oldest wait into `/metrics`; the length and the queue's
/// clock (claims are dated with it), `None` when the store cannot be read.
async fn observe(api: &RunApi) -> Option<(u64, i64)> {
    let read = async {
        Ok::<_, String>((
            api.engine
                .queue()
                .queue_stats()
                .await
                .map_err(|e| e.to_string())?,
            api.engine.queue_now().await.map_err(|e| e.to_string())?,
        ))
    };
    let (stats, now) = match read.await {
        Ok(read) => read,
        Err(error) => {
            tracing::warn!("queue: cannot read its length and clock: {error}");
            return None;
        }
    };
    let oldest_wait = stats
        .oldest_enqueued_at
        .map_or(0, |at| now.saturating_sub(at).max(0) as u64);
    crate::metrics::global().set_queue(stats.length, Duration::from_millis(oldest_wait));
    Some((stats.length, now))
}

/// Starts one claimed entry under its id; `false` when this replica has no slot after all
/// (the entry was given back, in its place).
async fn start_claimed(api: &RunApi, claimer: &str, start: QueuedStart) -> bool {
    let run_id = start.run_id.clone();
    let queue = api.engine.queue();
    // Its claimer admitted it and died before removing the entry.
    if matches!(api.engine.run_caller(&run_id).await, Ok(Some(_))) {
        remove(api, &run_id).await;
        return true;
    }
    let Some(workflow) = api.folder.get(&start.workflow) else {
        let message = format!(
            "the workflow {:?} is no longer served, so the queued start could not run",
            start.workflow
        );
        end_failed(api, &run_id, &message).await;
        return true;
    };
    let request = api.run_request(&workflow.path, start.arguments.clone(), &start.caller);
    match api.engine.start_as(request, run_id.clone()).await {
        Ok(_) => {
            let waited = api
                .engine
                .queue_now()
                .await
                .map_or(0, |now| now.saturating_sub(start.enqueued_at));
            tracing::info!(run = %run_id, waited_ms = waited, "started a queued run");
            api.owners
                .started(&run_id, &OwnerKey::stored(&start.caller), &workflow.name, 1);
            remove(api, &run_id).await;
            true
        }
        Err(EngineError::Rejected(Rejected::Capacity(_))) => {
            if let Err(error) = queue.unclaim_queued(&run_id, claimer).await {
                tracing::warn!(run = %run_id, "queue: cannot give the claim back: {error}");
            }
            false
        }
        // Another replica claimed it after this claim lapsed and admitted it first.
        Err(_) if matches!(api.engine.run_caller(&run_id).await, Ok(Some(_))) => {
            remove(api, &run_id).await;
            true
        }
        Err(error) => {
            let message = api.folder.scrub(&error.to_string());
            end_failed(api, &run_id, &message).await;
            true
        }
    }
}

/// Removes the entry of an admitted run; one canceled meanwhile is stopped.
async fn remove(api: &RunApi, run_id: &RunId) {
    match api.engine.queue().remove_queued(run_id).await {
        Ok(Some(QueueOutcome::Canceled)) => {
            if let Err(error) = api.engine.stop(run_id, None, &StatusQuery::default()).await {
                tracing::warn!(run = %run_id, "queue: cannot stop a run canceled while it started: {error}");
            }
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(run = %run_id, "queue: cannot remove a started entry: {error}")
        }
    }
}

async fn end_failed(api: &RunApi, run_id: &RunId, message: &str) {
    let now = api
        .engine
        .queue_now()
        .await
        .unwrap_or_else(|_| crate::util::now_ms());
    if let Err(error) = api
        .engine
        .queue()
        .end_queued(run_id, QueueOutcome::Failed, message, now)
        .await
    {
        tracing::warn!(run = %run_id, "queue: cannot record a refused start: {error}");
    }
}
