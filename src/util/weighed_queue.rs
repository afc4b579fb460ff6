//! A queue between tasks whose producer an untrusted peer drives (an agent's updates, a run's
//! notifications toward a client): messages that may be lost are weighed as they go in, and
//! past a ceiling of weight not yet taken further ones are dropped until the consumer catches
//! up; messages that must arrive (an answer, a call's end) weigh nothing and are never dropped,
//! so their own producers bound them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

/// What a message weighs; `None` for one that must never be dropped.
pub(crate) type Weigh<T> = fn(&T) -> Option<usize>;

/// The producers' side.
pub(crate) struct WeighedSender<T> {
    sender: mpsc::UnboundedSender<T>,
    queued: Arc<AtomicUsize>,
    ceiling: usize,
    weigh: Weigh<T>,
}

// Derived `Clone` would ask `T: Clone`.
impl<T> Clone for WeighedSender<T> {
    fn clone(&self) -> Self {
        WeighedSender {
            sender: self.sender.clone(),
            queued: self.queued.clone(),
            ceiling: self.ceiling,
            weigh: self.weigh,
        }
    }
}

impl<T> std::fmt::Debug for WeighedSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeighedSender")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .field("ceiling", &self.ceiling)
            .finish()
    }
}

/// The consumer's side.
#[derive(Debug)]
pub(crate) struct WeighedReceiver<T> {
    receiver: mpsc::UnboundedReceiver<T>,
    queued: Arc<AtomicUsize>,
    weigh: Weigh<T>,
}

/// A new queue holding at most `ceiling` of weight not yet taken.
pub(crate) fn channel<T>(
    ceiling: usize,
    weigh: Weigh<T>,
) -> (WeighedSender<T>, WeighedReceiver<T>) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let sender = WeighedSender {
        sender,
        queued: queued.clone(),
        ceiling,
        weigh,
    };
    (
        sender,
        WeighedReceiver {
            receiver,
            queued,
            weigh,
        },
    )
}

impl<T> WeighedSender<T> {
    /// Queues `message`; `false` when it was dropped (past the ceiling) or the consumer is gone.
    pub(crate) fn send(&self, message: T) -> bool {
        let weight = (self.weigh)(&message);
        if let Some(weight) = weight {
            let before = self.queued.fetch_add(weight, Ordering::Relaxed);
            if before + weight > self.ceiling {
                self.queued.fetch_sub(weight, Ordering::Relaxed);
                return false;
            }
        }
        if self.sender.send(message).is_err() {
            if let Some(weight) = weight {
                self.queued.fetch_sub(weight, Ordering::Relaxed);
            }
            return false;
        }
        true
    }

    /// The weight queued and not yet taken.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

impl<T> WeighedReceiver<T> {
    /// The next message; `None` once every sender is gone and the queue is empty.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        let message = self.receiver.recv().await?;
        self.taken(&message);
        Some(message)
    }

    /// The next message if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        let message = self.receiver.try_recv().ok()?;
        self.taken(&message);
        Some(message)
    }

    fn taken(&self, message: &T) {
        if let Some(weight) = (self.weigh)(message) {
            self.queued.fetch_sub(weight, Ordering::Relaxed);
        }
    }
}
