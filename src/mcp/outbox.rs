//! The queue between a request's handler and the transport writing to its client. A client is
//! untrusted and may read slowly or not at all, while a run can produce notifications as fast
//! as its script logs; so at most [`MAX_QUEUED_NOTIFICATIONS`] notifications (messages without
//! an `id`) wait, and past that further ones are dropped until the transport takes some.
//! Responses and server-to-client requests (messages with an `id`) are never dropped: one is
//! queued per request, so the requests in flight bound them.

use serde_json::Value;

use crate::util::weighed_queue::{self, WeighedReceiver, WeighedSender};

/// Notifications one queue holds that the transport has not taken yet.
pub const MAX_QUEUED_NOTIFICATIONS: usize = 1024;

/// The handlers' side of a queue.
#[derive(Clone, Debug)]
pub struct OutboxSender(WeighedSender<Value>);

/// The transport's side of a queue.
#[derive(Debug)]
pub struct OutboxReceiver(WeighedReceiver<Value>);

/// A new queue.
pub fn outbox() -> (OutboxSender, OutboxReceiver) {
    let (sender, receiver) = weighed_queue::channel(MAX_QUEUED_NOTIFICATIONS, weigh);
    (OutboxSender(sender), OutboxReceiver(receiver))
}

/// A notification (no `id`) counts one; an answer or a server request is never dropped.
fn weigh(message: &Value) -> Option<usize> {
    message.get("id").is_none().then_some(1)
}

impl OutboxSender {
    /// Queues `message`; a notification is dropped while the queue holds
    /// [`MAX_QUEUED_NOTIFICATIONS`] of them. `false` when it was dropped or the transport is
    /// gone.
    pub fn send(&self, message: Value) -> bool {
        self.0.send(message)
    }
}

impl OutboxReceiver {
    /// The next message; `None` once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Value> {
        self.0.recv().await
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Value> {
        self.0.try_recv()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn notifications_past_the_limit_are_dropped_and_answers_never_are() {
        let (sender, mut receiver) = outbox();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
        for _ in 0..MAX_QUEUED_NOTIFICATIONS {
            assert!(sender.send(note.clone()));
        }
        assert!(!sender.send(note.clone()), "one past the limit is dropped");
        let answer = json!({"jsonrpc": "2.0", "id": 7, "result": {}});
        assert!(sender.send(answer.clone()), "an answer is never dropped");
        let mut taken = 0;
        while let Some(message) = receiver.try_recv() {
            taken += 1;
            if taken == MAX_QUEUED_NOTIFICATIONS + 1 {
                assert_eq!(message, answer);
            }
        }
        assert_eq!(taken, MAX_QUEUED_NOTIFICATIONS + 1);
        assert!(sender.send(note), "room again once the transport took them");
    }
}
