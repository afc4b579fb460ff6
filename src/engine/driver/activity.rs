//! The channel agent calls report on to their driver. It stays unbounded for what a call
//! sends once (started, retried, done), which the driver must never miss, while the agent's
//! own updates, which arrive as fast as an agent writes them, are counted in bytes: past
//! [`MAX_QUEUED_UPDATE_BYTES`] not yet taken by the driver, further updates are dropped until
//! it catches up. Updates only feed progress and notices; the answer is gathered by the
//! session itself, so a dropped update loses a progress line, never a result.

use super::task::Activity;
use crate::engine::runner::AgentUpdate;
use crate::util::weighed_queue::{self, WeighedReceiver, WeighedSender};

/// Bytes of agent updates a run's driver may have queued and not yet taken.
pub(super) const MAX_QUEUED_UPDATE_BYTES: usize = 8 << 20;

/// What every queued message costs besides its text.
const MESSAGE_OVERHEAD: usize = 64;

/// The calls' side of a run's activity channel.
#[derive(Clone)]
pub(super) struct ActivitySender(WeighedSender<Activity>);

/// The driver's side.
pub(super) type ActivityReceiver = WeighedReceiver<Activity>;

/// A new channel: the sender the calls share, and the driver's receiver.
pub(super) fn channel() -> (ActivitySender, ActivityReceiver) {
    let (sender, receiver) = weighed_queue::channel(MAX_QUEUED_UPDATE_BYTES, weigh);
    (ActivitySender(sender), receiver)
}

/// An agent's update weighs its bytes; a slot wait (status would show a call waiting that
/// runs) and what a call reports once weigh nothing and are never dropped.
fn weigh(activity: &Activity) -> Option<usize> {
    match activity {
        Activity::Update(_, AgentUpdate::SlotWait(_)) => None,
        Activity::Update(_, update) => Some(queued_size(update)),
        _ => None,
    }
}

impl ActivitySender {
    /// Sends what a call reports once; fails only when the driver is gone.
    pub(super) fn send(&self, activity: Activity) -> Result<(), ()> {
        if self.0.send(activity) {
            Ok(())
        } else {
            Err(())
        }
    }

    /// Sends an agent's update of call `index`, or drops it while the driver has
    /// [`MAX_QUEUED_UPDATE_BYTES`] of updates to take.
    pub(super) fn send_update(&self, index: u32, update: AgentUpdate) {
        self.0.send(Activity::Update(index, update));
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
        AgentUpdate::ContextUsage { .. } | AgentUpdate::SlotWait(_) => 0,
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
        while let Some(Activity::Update(_, update)) = receiver.try_recv() {
            kinds.push(matches!(update, AgentUpdate::SlotWait(_)));
        }
        // Eight full chunks fit, the ninth update is dropped, the slot wait is not.
        assert_eq!(kinds, [vec![false; 8], vec![true]].concat());
        assert_eq!(sender.0.queued(), 0);
        sender.send_update(1, AgentUpdate::MessageChunk("after".into()));
        assert!(matches!(
            receiver.try_recv(),
            Some(Activity::Update(1, AgentUpdate::MessageChunk(text))) if text == "after"
        ));
    }
}
