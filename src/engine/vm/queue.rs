//! The queue from a script's thread to its driver: bounded in messages and in bytes, so a
//! script that sends faster than its driver takes waits instead of growing the daemon, and
//! that wait is kept out of the script's slice.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{SliceClock, VmEvent};
use crate::util::sync::Lock;

/// Messages the script's thread may have queued for its driver before it waits: a script that
/// logs or calls faster than the driver takes them blocks on a full queue (its slice clock
/// stopped meanwhile), so the daemon holds at most this many of one script's messages, each
/// cut in the script's thread (a log line to 64 Ki chars, a phase title to 1 Ki chars).
pub(crate) const EVENT_QUEUE: usize = 1024;

/// Bytes of messages (a call's payload, a log line, a phase title) the queue may hold before
/// the script waits: a call's prompt is bounded only by the script's heap, which one string
/// of it can fill, and the same string sent a thousand times would otherwise be queued a
/// thousand times. A message heavier than this alone goes through when the queue is empty.
pub(crate) const EVENT_QUEUE_BYTES: usize = 8 << 20;

/// The bytes queued and whether the driver stopped taking messages.
#[derive(Default)]
struct Weight {
    state: Mutex<WeightState>,
    freed: Condvar,
}

#[derive(Default)]
struct WeightState {
    queued: usize,
    closed: bool,
    /// Scripts' threads waiting for room (one at most: a queue has one script).
    waiting: usize,
}

impl Weight {
    /// Waits until `bytes` more fit (or nothing is queued); `false` once the queue closed.
    fn reserve(&self, bytes: usize) -> bool {
        let mut state = self.state.locked();
        loop {
            if state.closed {
                return false;
            }
            if state.queued == 0 || state.queued.saturating_add(bytes) <= EVENT_QUEUE_BYTES {
                state.queued = state.queued.saturating_add(bytes);
                return true;
            }
            state.waiting += 1;
            state = crate::util::sync::wait(&self.freed, state);
            state.waiting -= 1;
        }
    }

    fn release(&self, bytes: usize) {
        let mut state = self.state.locked();
        state.queued = state.queued.saturating_sub(bytes);
        // A wake-up is a system call: only for a script that waits.
        let waiting = state.waiting > 0;
        drop(state);
        if waiting {
            self.freed.notify_all();
        }
    }

    fn close(&self) {
        self.state.locked().closed = true;
        self.freed.notify_all();
    }
}

/// The script's side of its queue to the driver.
#[derive(Clone)]
pub(crate) struct VmEvents {
    sender: mpsc::Sender<(usize, VmEvent)>,
    weight: Arc<Weight>,
}

impl VmEvents {
    /// Sends the script's last message, waiting for room in the queue's count only: it is
    /// the one message left, whatever it weighs. `false` once the driver stopped taking them.
    pub(super) fn finish(
        &self,
        finished: Result<Option<serde_json::Value>, super::ScriptFailure>,
    ) -> bool {
        self.sender
            .blocking_send((0, VmEvent::Finished(finished)))
            .is_ok()
    }
}

/// The driver's side: taking a message frees its bytes for the script.
pub(crate) struct VmEventReceiver {
    receiver: mpsc::Receiver<(usize, VmEvent)>,
    weight: Arc<Weight>,
}

impl VmEventReceiver {
    pub(crate) async fn recv(&mut self) -> Option<VmEvent> {
        let (bytes, event) = self.receiver.recv().await?;
        self.weight.release(bytes);
        Some(event)
    }

    pub(crate) fn try_recv(&mut self) -> Result<VmEvent, mpsc::error::TryRecvError> {
        let (bytes, event) = self.receiver.try_recv()?;
        self.weight.release(bytes);
        Ok(event)
    }

    /// Stops taking messages: a script waiting on the full queue wakes and stops. Messages
    /// already queued can still be taken.
    pub(crate) fn close(&mut self) {
        self.receiver.close();
        self.weight.close();
    }

    #[cfg(test)]
    pub(crate) fn blocking_recv(&mut self) -> Option<VmEvent> {
        let (bytes, event) = self.receiver.blocking_recv()?;
        self.weight.release(bytes);
        Some(event)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.receiver.len()
    }

    /// The bytes queued, and whether the script's thread waits for room.
    #[cfg(test)]
    pub(crate) fn weight(&self) -> (usize, bool) {
        let state = self.weight.state.locked();
        (state.queued, state.waiting > 0)
    }
}

impl Drop for VmEventReceiver {
    fn drop(&mut self) {
        self.weight.close();
    }
}

/// A script's queue to its driver, [`EVENT_QUEUE`] messages and [`EVENT_QUEUE_BYTES`] deep.
/// The driver closes or drops its receiver to stop taking them; a script blocked on the full
/// queue then wakes and stops.
pub(crate) fn event_queue() -> (VmEvents, VmEventReceiver) {
    let (sender, receiver) = mpsc::channel(EVENT_QUEUE);
    let weight = Arc::new(Weight::default());
    (
        VmEvents {
            sender,
            weight: weight.clone(),
        },
        VmEventReceiver { receiver, weight },
    )
}

/// What a message weighs in the queue: the bytes of its text.
fn weight_of(event: &VmEvent) -> usize {
    match event {
        VmEvent::Call { weight, .. } => *weight,
        VmEvent::Log { message, .. } => message.len(),
        VmEvent::Phase { title, .. } => title.len(),
        VmEvent::Finished(_) => 0,
    }
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
        let bytes = weight_of(&event);
        let waiting = Instant::now();
        let reserved = self.events.weight.reserve(bytes);
        let sent = reserved && self.queue(bytes, event);
        if reserved && !sent {
            self.events.weight.release(bytes);
        }
        self.clock.exclude(waiting.elapsed());
        sent
    }

    fn queue(&self, bytes: usize, event: VmEvent) -> bool {
        match self.events.sender.try_send((bytes, event)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(message)) => {
                self.events.sender.blocking_send(message).is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_reserved_up_to_the_bytes_and_a_lone_heavy_message_passes() {
        let weight = Weight::default();
        assert!(
            weight.reserve(EVENT_QUEUE_BYTES + 1),
            "alone in an empty queue"
        );
        weight.release(EVENT_QUEUE_BYTES + 1);
        assert!(weight.reserve(EVENT_QUEUE_BYTES - 1));
        assert!(weight.reserve(1), "exactly the bytes fit");
        assert_eq!(weight.state.locked().queued, EVENT_QUEUE_BYTES);
        weight.close();
        assert!(!weight.reserve(1), "a closed queue takes nothing");
    }

    #[test]
    fn a_sender_waits_for_room_and_a_release_or_a_close_wakes_it() {
        for close in [false, true] {
            let weight = Arc::new(Weight::default());
            assert!(weight.reserve(EVENT_QUEUE_BYTES));
            let waiter = {
                let weight = weight.clone();
                std::thread::spawn(move || weight.reserve(1))
            };
            while weight.state.locked().waiting == 0 {
                std::thread::yield_now();
            }
            assert_eq!(weight.state.locked().queued, EVENT_QUEUE_BYTES);
            if close {
                weight.close();
            } else {
                weight.release(1);
            }
            assert_eq!(waiter.join().expect("the waiter"), !close);
            // Closed: the waiter reserved nothing; released: it took the byte freed.
            assert_eq!(weight.state.locked().queued, EVENT_QUEUE_BYTES);
        }
    }
}
