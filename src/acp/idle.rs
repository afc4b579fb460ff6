//! Ending agent processes nobody uses: a pooled process with no session for the idle time
//! (`AGENTPRISM_ACP_IDLE_TTL_MS`, default 60 s) is stopped like at shutdown (stdin closed,
//! SIGTERM, then SIGKILL of its group), and the next session starts a fresh one. An adapter
//! costs the user's memory for as long as it lives (opencode alone holds hundreds of MB), so
//! one the user is not using should not stay.
//!
//! One reaper task per pool, started with the pool's first process, sleeps until the earliest
//! moment an idle process could expire, or until a session lets go of a process (the lease's
//! drop notifies it), and stops at shutdown. [`release_unprompted`] is the other way out: a
//! caller that started processes only to probe them (`config`) ends those at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::pool::{AgentHost, Group};
use crate::util::sync::Lock;

/// The default idle time of a pooled process.
pub(super) const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(60);

/// What the reaper of one pool shares with its leases.
pub(crate) struct Idle {
    /// `None`: idle processes stay until shutdown.
    ttl: Option<Duration>,
    /// A session let go of a process; the reaper looks again.
    released: Notify,
    /// Shutdown: the reaper ends.
    stop: CancellationToken,
    started: AtomicBool,
}

impl Idle {
    pub(super) fn new(ttl: Option<Duration>) -> Idle {
        Idle {
            ttl,
            released: Notify::new(),
            stop: CancellationToken::new(),
            started: AtomicBool::new(false),
        }
    }

    /// A process's last session ended.
    pub(super) fn released(&self) {
        self.released.notify_one();
    }

    /// Starts the reaper once, if idle processes expire at all.
    pub(super) fn start(
        self: &Arc<Idle>,
        groups: &Arc<Mutex<HashMap<String, Group>>>,
        grace: Duration,
        tracker: &TaskTracker,
    ) {
        let Some(ttl) = self.ttl else { return };
        if self.started.swap(true, Ordering::Relaxed) {
            return;
        }
        let idle = self.clone();
        let groups = groups.clone();
        let stoppers = tracker.clone();
        tracker.spawn(async move {
            loop {
                let next = reap(&groups, grace, &stoppers, |host, now| {
                    host.idle_since()
                        .map(|since| since + ttl)
                        .filter(|end| *end > now)
                })
                .await;
                // A release between the scan and here leaves a permit: nothing is missed.
                let released = idle.released.notified();
                tokio::select! {
                    () = idle.stop.cancelled() => return,
                    () = released => {}
                    () = sleep_until(next) => {}
                }
            }
        });
    }

    /// Shutdown: the reaper ends (shutdown stops the processes itself).
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }
}

/// Ends at once every pooled process that has no session and never ran a prompt: what a
/// `config` probe started, once the probes are done.
pub(crate) async fn release_unprompted(
    groups: &Arc<Mutex<HashMap<String, Group>>>,
    grace: Duration,
    tracker: &TaskTracker,
) {
    reap(groups, grace, tracker, |host, _| {
        if host.prompted() {
            Some(Instant::now())
        } else {
            None
        }
    })
    .await;
}

/// Stops every idle process for which `keep` gives no time to live until (given the process
/// and now); returns the earliest of the times it gave for processes that stay idle.
async fn reap(
    groups: &Arc<Mutex<HashMap<String, Group>>>,
    grace: Duration,
    tracker: &TaskTracker,
    keep: impl Fn(&AgentHost, Instant) -> Option<Instant>,
) -> Option<Instant> {
    let all: Vec<Group> = groups.locked().values().cloned().collect();
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    for group in all {
        let mut hosts = group.lock().await;
        let mut index = 0;
        while index < hosts.len() {
            let host = &hosts[index];
            if host.sessions() > 0 || host.idle_since().is_none() {
                index += 1;
                continue;
            }
            if let Some(until) = keep(host, now) {
                next = Some(next.map_or(until, |earlier| earlier.min(until)));
                index += 1;
                continue;
            }
            // Out of the group under its lock: no session can lease it any more.
            let host = hosts.swap_remove(index);
            tracing::debug!(backend = %host.backend.id, pid = host.process.pid(), "stopping an idle agent process");
            tracker.spawn(async move {
                host.connection.close_input();
                host.process.terminate(grace).await;
            });
        }
    }
    next
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
