//! The automatic resumes of runs paused on a usage limit (policy in `src/timers/`): a loop
//! that sleeps until the earliest due moment the store holds and resumes each due run as its
//! owner would, with an operation id derived from that moment.
//!
//! The store is the timer: a process that was down when a moment came fires it when it
//! starts, and several processes over one store (a daemon and its successor, replicas) may
//! all see it; the resume itself decides, under the run's lease, whether the run still waits
//! for that very moment, so one generation starts. A resume that cannot start now (capacity,
//! another process holds the run) is tried again after [`RETRY`]; one that can never start
//! from this timer (the script was edited, the run cannot be resumed) cancels the timer and
//! says why in the run's events.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::engine::manager::{Engine, EngineError, Rejected, ResumeRequest};
use crate::model::{RunId, RunStatus};
use crate::timers;
use crate::util::now_ms;

/// The longest sleep between two looks at the store: another process over the same store may
/// have scheduled a timer this one was not told of.
const POLL: Duration = Duration::from_secs(30);
/// How long a resume that could not start now waits before it is tried again.
const RETRY: Duration = Duration::from_secs(30);
/// Runs resumed per look at the store.
const BATCH: u32 = 16;

/// The loop's handles, kept by the engine: a wake-up for a timer this process scheduled, and
/// the stop of the loop.
#[derive(Default)]
pub(super) struct TimerLoop {
    pub(super) wake: Notify,
    pub(super) stop: CancellationToken,
}

/// What firing one timer came to.
enum Fired {
    /// A new generation started, or the run no longer waits for this moment.
    Done,
    /// It could not start now; try again after [`RETRY`].
    Later,
}

impl Engine {
    /// Starts resuming runs whose automatic resume comes due, until [`Engine::stop_timers`] or
    /// the engine's shutdown. Called by the processes that serve runs (the daemon, `serve`),
    /// once they are ready to execute.
    pub fn start_timers(&self) {
        let engine = self.clone();
        tokio::spawn(async move { engine.timer_loop().await });
    }

    /// Stops the loop: a daemon that hands its work to a successor fires no more timers.
    pub fn stop_timers(&self) {
        self.inner.timers.stop.cancel();
    }

    /// Whether any run in the store waits for an automatic resume (a store error counts as
    /// yes: a daemon stays up rather than miss one).
    pub async fn timers_pending(&self) -> bool {
        self.inner
            .store
            .resumes_due(i64::MAX, 1)
            .await
            .map_or(true, |next| !next.is_empty())
    }

    /// Tells the loop that this process scheduled a timer, so it looks again now.
    pub(super) fn timer_scheduled(&self) {
        self.inner.timers.wake.notify_one();
    }

    async fn timer_loop(&self) {
        let stop = self.inner.timers.stop.clone();
        // Runs whose resume could not start, and when to try each again.
        let mut deferred: HashMap<RunId, (i64, i64)> = HashMap::new();
        while !stop.is_cancelled() {
            let now = now_ms();
            deferred.retain(|_, (_, retry_at)| *retry_at > now);
            let full = match self.inner.store.resumes_due(now, BATCH).await {
                Ok(due) => {
                    let full = due.len() == BATCH as usize;
                    for (run_id, due_at) in due {
                        if deferred.get(&run_id).is_some_and(|(at, _)| *at == due_at) {
                            continue;
                        }
                        if let Fired::Later = self.fire(&run_id, due_at).await {
                            let retry_at = now_ms() + RETRY.as_millis() as i64;
                            deferred.insert(run_id, (due_at, retry_at));
                        }
                    }
                    full
                }
                Err(error) => {
                    tracing::warn!("cannot read the automatic resumes due: {error}");
                    false
                }
            };
            if full && deferred.len() < BATCH as usize {
                continue;
            }
            let wait = self.next_wait(&deferred).await;
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.inner.timers.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How long to sleep: until the earliest future due moment, the earliest retry, or
    /// [`POLL`], whichever comes first.
    async fn next_wait(&self, deferred: &HashMap<RunId, (i64, i64)>) -> Duration {
        let now = now_ms();
        let next_due = match self.inner.store.resumes_due(i64::MAX, 1).await {
            Ok(next) => next.first().map(|(_, at)| *at).filter(|at| *at > now),
            Err(_) => None,
        };
        let next_retry = deferred.values().map(|(_, retry_at)| *retry_at).min();
        let until = [next_due, next_retry].into_iter().flatten().min();
        let wait = until.map_or(POLL, |at| {
            Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
        });
        wait.min(POLL)
    }

    /// Resumes `run_id` for its timer due at `due_at`, as its owner would.
    async fn fire(&self, run_id: &RunId, due_at: i64) -> Fired {
        let request = ResumeRequest {
            run_id: Some(run_id.clone()),
            operation_id: Some(timers::operation_id(due_at)),
            timer: Some(due_at),
            ..ResumeRequest::default()
        };
        let error = match self.resume(request).await {
            Ok(admission) => {
                tracing::info!(run = %run_id, generation = ?admission.continuation, "resumed by itself after a usage limit");
                return Fired::Done;
            }
            Err(error) => error,
        };
        if !self.still_waits(run_id, due_at).await {
            return Fired::Done;
        }
        match &error {
            EngineError::Rejected(Rejected::Capacity(_) | Rejected::Conflict(_))
            | EngineError::Store(_) => {
                tracing::info!(run = %run_id, "automatic resume deferred: {error}");
                Fired::Later
            }
            _ => {
                self.cancel_timer(run_id, due_at, &error.to_string()).await;
                Fired::Done
            }
        }
    }

    /// Whether the run is still paused waiting for the timer due at `due_at`.
    async fn still_waits(&self, run_id: &RunId, due_at: i64) -> bool {
        match self.inner.store.load_run(run_id).await {
            Ok(record) => {
                record.status == RunStatus::Paused && record.auto_resume.due_at == Some(due_at)
            }
            Err(_) => false,
        }
    }

    /// Takes the timer off a run whose automatic resume can never start, and says why in its
    /// events.
    async fn cancel_timer(&self, run_id: &RunId, due_at: i64, reason: &str) {
        tracing::warn!(run = %run_id, "automatic resume cancelled: {reason}");
        let cancel = async {
            let lease = self.take_free_lease(run_id).await?;
            let mut record = self.inner.store.load_run(run_id).await?;
            let written = if record.auto_resume.due_at == Some(due_at) {
                record.auto_resume.due_at = None;
                record.updated_at = now_ms();
                let fields = json!({"reason": reason});
                self.record_cold(&record, "autoResumeCancelled", fields, &lease.token)
                    .await
            } else {
                Ok(())
            };
            self.inner.store.release_lease(run_id, &lease.token).await?;
            written
        };
        if let Err(error) = cancel.await {
            tracing::warn!(run = %run_id, "cannot cancel the automatic resume: {error}");
        }
    }
}
