//! The channel agent calls report on to their driver. It stays unbounded for what a call
//! sends once (started, retried, done), which the driver must never miss, while the agent's
//! own updates, which arrive as fast as an agent writes them, are counted in bytes: past
//! [`MAX_QUEUED_UPDATE_BYTES`] not yet taken by the driver, further updates are dropped until
//! it catches up. Updates only feed progress and notices; the answer is gathered by the
//! session itself, so a dropped update loses a progress line, never a result.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use super::task::Activity;
use crate::engine::runner::AgentUpdate;

/// Bytes of agent updates a run's driver may have queued and not yet taken.
pub(super) const MAX_QUEUED_UPDATE_BYTES: usize = 8 << 20;

/// What every queued message costs besides its text.
const MESSAGE_OVERHEAD: usize = 64;

/// The calls' side of a run's activity channel.
#[derive(Clone)]
pub(super) struct ActivitySender {
    sender: mpsc::UnboundedSender<Activity>,
    /// Bytes of updates sent and not yet taken by the driver.
    queued: Arc<AtomicUsize>,
}

/// A new channel: the sender the calls share, and the driver's receiver.
pub(super) fn channel() -> (ActivitySender, mpsc::UnboundedReceiver<Activity>) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (ActivitySender { sender, queued }, receiver)
}

impl ActivitySender {
    /// Sends what a call reports once; fails only when the driver is gone.
    pub(super) fn send(&self, activity: Activity) -> Result<(), ()> {
        self.sender.send(activity).map_err(|_| ())
    }

    /// Sends an agent's update of call `index`, or drops it while the driver has
    /// [`MAX_QUEUED_UPDATE_BYTES`] of updates to take. A slot wait is never dropped: status
    /// would show a call waiting that runs.
    pub(super) fn send_update(&self, index: u32, update: AgentUpdate) {
        let size = queued_size(&update);
        if !matches!(update, AgentUpdate::SlotWait(_)) {
            let before = self.queued.fetch_add(size, Ordering::Relaxed);
            if before + size > MAX_QUEUED_UPDATE_BYTES {
                self.queued.fetch_sub(size, Ordering::Relaxed);
                return;
            }
        } else {
            self.queued.fetch_add(size, Ordering::Relaxed);
        }
        if self.sender.send(Activity::Update(index, update)).is_err() {
            self.queued.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// The driver took `update` off the channel.
    pub(super) fn taken(&self, update: &AgentUpdate) {
        self.queued
            .fetch_sub(queued_size(update), Ordering::Relaxed);
    }
}

/// What `update` is counted as while it waits on the channel.
fn queued_size(update: &AgentUpdate) -> usize {
    let text = match update {
        AgentUpdate::MessageChunk(text)
        | AgentUpdate::ThoughtChunk(text)
        | AgentUpdate::ModeChanged(text)
        | AgentUpdate::Notice(text)
        | AgentUpdate::Other(text) => text.len(),
        AgentUpdate::ToolCall { id, title, status } => {
            id.len() + title.len() + status.as_ref().map_or(0, String::len)
        }
        AgentUpdate::Plan(plan) => plan.to_string().len(),
        AgentUpdate::ContextUsage { .. } => 0,
        AgentUpdate::SlotWait(waiting) => waiting.as_ref().map_or(0, String::len),
    };
    text + MESSAGE_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_past_the_byte_ceiling_are_dropped_until_the_driver_takes_some() {
        let (sender, mut receiver) = channel();
        let chunk = "x".repeat((1 << 20) - MESSAGE_OVERHEAD);
        for _ in 0..8 {
            sender.send_update(1, AgentUpdate::MessageChunk(chunk.clone()));
        }
        sender.send_update(1, AgentUpdate::MessageChunk("one more".into()));
        sender.send_update(1, AgentUpdate::SlotWait(None));
        let mut kinds = Vec::new();
        while let Ok(Activity::Update(_, update)) = receiver.try_recv() {
            sender.taken(&update);
            kinds.push(matches!(update, AgentUpdate::SlotWait(_)));
        }
        // Eight full chunks fit, the ninth update is dropped, the slot wait is not.
        assert_eq!(kinds, [vec![false; 8], vec![true]].concat());
        assert_eq!(sender.queued.load(Ordering::Relaxed), 0);
        sender.send_update(1, AgentUpdate::MessageChunk("after".into()));
        assert!(matches!(
            receiver.try_recv(),
            Ok(Activity::Update(1, AgentUpdate::MessageChunk(text))) if text == "after"
        ));
    }
}
