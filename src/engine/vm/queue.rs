//! The queue from a script's thread to its driver: bounded, so a script that sends faster
//! than its driver takes waits instead of growing the daemon, and that wait is kept out of
//! the script's slice.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::{SliceClock, VmEvent};

/// Messages the script's thread may have queued for its driver before it waits: a script that
/// logs or calls faster than the driver takes them blocks on a full queue (its slice clock
/// stopped meanwhile), so the daemon holds at most this many of one script's messages, each
/// cut in the script's thread (a log line to 64 Ki chars, a phase title to 1 Ki chars).
pub(crate) const EVENT_QUEUE: usize = 1024;

/// The script's side of its queue to the driver.
pub(crate) type VmEvents = mpsc::Sender<VmEvent>;

/// A script's queue to its driver, [`EVENT_QUEUE`] messages deep. The driver closes or drops
/// its receiver to stop taking them; a script blocked on the full queue then wakes and stops.
pub(crate) fn event_queue() -> (VmEvents, mpsc::Receiver<VmEvent>) {
    mpsc::channel(EVENT_QUEUE)
}

/// Sends the script's messages to its driver from the script's thread.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) events: VmEvents,
    pub(super) clock: Arc<SliceClock>,
}

impl Outbox {
    /// Queues `event`, waiting while the queue is full: a wait for the driver, which the
    /// slice clock does not count. `false` once the driver stopped taking messages.
    pub(super) fn send(&self, event: VmEvent) -> bool {
        match self.events.try_send(event) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(event)) => {
                let waiting = Instant::now();
                let sent = self.events.blocking_send(event).is_ok();
                self.clock.exclude(waiting.elapsed());
                sent
            }
        }
    }
}
