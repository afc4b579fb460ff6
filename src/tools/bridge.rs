//! The notification bridge: a task that turns engine notices into `resources/updated` and
//! `resources/list_changed` events on the server's hub, coalesced per run so a burst of
//! events costs a subscriber a handful of re-reads.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::engine::events::RunNotice;
use crate::mcp::handler::{NotificationHub, ServerEvent};
use crate::model::{RunId, RunStatus};

use super::resources;

/// After an events notification for a run, further appends within this window are folded
/// into one trailing notification. The driver makes events durable at least every 250 ms,
/// so a window a little longer than that lets the trailing hint find the events readable.
const COALESCE_WINDOW: Duration = Duration::from_millis(300);

/// Turns engine notices into hub events. Event appends are coalesced per run: the first
/// append notifies at once, later ones within [`COALESCE_WINDOW`] only mark the run dirty,
/// and a dirty run gets one trailing notification when its window ends. So a burst of a
/// thousand events costs a subscriber a handful of re-reads, and the last hint always comes
/// after the last append.
///
/// List changes (an admission, a result that became available) are trailing only: the first
/// opens a window, and one `resources/list_changed` goes out when it ends, whatever else
/// changed the list meanwhile. So a run admitted and completed within the window is one
/// change, not two; deletions still notify at once (`WorkflowServer::delete_run`).
pub(super) struct Bridge {
    pub(super) hub: NotificationHub,
    /// The server's shutdown: the bridge ends with it.
    pub(super) shutdown: CancellationToken,
}

/// One run's coalescing window.
struct Window {
    /// When the window closes.
    ends: tokio::time::Instant,
    /// An append arrived inside the window: one trailing notification is owed.
    dirty: bool,
}

impl Bridge {
    pub(super) async fn run(
        self,
        mut notices: broadcast::Receiver<RunNotice>,
        mut list_requests: mpsc::UnboundedReceiver<()>,
    ) {
        let mut windows: HashMap<RunId, Window> = HashMap::new();
        let mut list_window: Option<tokio::time::Instant> = None;
        loop {
            let next_end = windows.values().map(|w| w.ends).min();
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                Some(()) = list_requests.recv() => {
                    list_window.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE_WINDOW);
                }
                _ = sleep_until(list_window), if list_window.is_some() => {
                    list_window = None;
                    self.hub.publish(ServerEvent::ResourcesListChanged);
                }
                notice = notices.recv() => match notice {
                    Ok(notice) => {
                        if self.notice(notice, &mut windows) {
                            list_window.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE_WINDOW);
                        }
                    }
                    // Missed notices: the trailing hints of open windows still go out, and
                    // readers catch up from their durable cursor.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        for window in windows.values_mut() {
                            window.dirty = true;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = sleep_until(next_end) => {
                    let now = tokio::time::Instant::now();
                    windows.retain(|run_id, window| {
                        if window.ends > now {
                            return true;
                        }
                        if window.dirty {
                            self.updated(run_id);
                            window.dirty = false;
                            window.ends = now + COALESCE_WINDOW;
                            return true;
                        }
                        false
                    });
                }
            }
        }
    }

    /// Handles one notice; returns whether it changed the resource list.
    fn notice(&self, notice: RunNotice, windows: &mut HashMap<RunId, Window>) -> bool {
        match notice {
            // The records broadcast's `Event` never reaches this subscriber of `all`.
            RunNotice::Activity { run_id } | RunNotice::Event { run_id, .. } => {
                match windows.get_mut(&run_id) {
                    Some(window) => window.dirty = true,
                    None => {
                        self.updated(&run_id);
                        windows.insert(
                            run_id,
                            Window {
                                ends: tokio::time::Instant::now() + COALESCE_WINDOW,
                                dirty: false,
                            },
                        );
                    }
                }
                false
            }
            RunNotice::Settled {
                run_id,
                status,
                result,
            } => {
                // The settled record (and every event) is durable now: one last hint.
                self.updated(&run_id);
                if let Some(window) = windows.get_mut(&run_id) {
                    window.dirty = false;
                }
                result && status == RunStatus::Completed.as_str()
            }
            RunNotice::Permission { .. } => false,
        }
    }

    fn updated(&self, run_id: &RunId) {
        self.hub.publish(ServerEvent::ResourceUpdated {
            uri: resources::events_uri(run_id),
        });
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tokio_util::sync::CancellationToken;

    use super::Bridge;
    use crate::engine::events::RunNotice;
    use crate::mcp::handler::NotificationHub;
    use crate::model::RunId;

    /// Only a completed run whose written record holds a result changes the resource list.
    #[test]
    fn a_settled_run_changes_the_list_when_its_result_was_written() {
        let bridge = Bridge {
            hub: NotificationHub::new(),
            shutdown: CancellationToken::new(),
        };
        let mut windows = HashMap::new();
        let run_id = RunId::generate();
        let settled = |status: &str, result| RunNotice::Settled {
            run_id: run_id.clone(),
            status: status.into(),
            result,
        };
        assert!(bridge.notice(settled("completed", true), &mut windows));
        assert!(!bridge.notice(settled("completed", false), &mut windows));
        assert!(!bridge.notice(settled("paused", false), &mut windows));
        assert!(!bridge.notice(settled("failed", false), &mut windows));
    }
}
