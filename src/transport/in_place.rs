//! Polling a connection again in place when it wakes itself.
//!
//! hyper's HTTP/1 connection wakes its own task while it is being polled on every request
//! with a body: the request's body channel, read inside the connection's poll, signals the
//! connection that its body is wanted. tokio's multi-thread scheduler treats a task woken
//! during its own poll as a yield: it goes to the back of the run queue and another worker
//! is roused to take it, a futex wake-up and a thread that finds nothing to do, on every
//! request. [`InPlace`] gives the connection a waker of its own: a wake-up that arrives while
//! the connection is being polled only marks it, and the connection is polled again at once,
//! a few times at most; a wake-up at any other time (the socket is readable, a timer fired)
//! wakes the task as usual. After [`REPOLLS`] rounds that all woke themselves, the task is
//! woken the ordinary way, so a connection that keeps yielding (tokio's cooperative budget
//! ran out) still lets the others run.

use crate::util::sync::Lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Extra polls of one [`InPlace::poll`] after self wake-ups, before it yields.
pub(super) const REPOLLS: usize = 4;

/// Not being polled: a wake-up wakes the task.
const IDLE: u8 = 0;
/// Being polled: a wake-up is only marked.
const POLLING: u8 = 1;
/// Woken while being polled: poll again.
const WOKEN: u8 = 2;

/// A future whose wake-ups during its own poll are answered by polling it again there.
pub(super) struct InPlace<F> {
    inner: Pin<Box<F>>,
    /// Shared with the waker handed to `inner`.
    shared: Arc<Shared>,
    /// The waker handed to `inner`, made once.
    waker: Waker,
}

/// What the waker handed to the inner future knows.
struct Shared {
    /// [`IDLE`], [`POLLING`] or [`WOKEN`].
    state: AtomicU8,
    /// The task's own waker, from its latest poll.
    task: Mutex<Option<Waker>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // Marked now, or already: the poll under way sees the mark and polls again.
            Ok(_) | Err(WOKEN) => return,
            Err(_) => {}
        }
        let task = self.task.locked().clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

impl<F: Future> InPlace<F> {
    pub(super) fn new(inner: F) -> InPlace<F> {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        });
        InPlace {
            inner: Box::pin(inner),
            waker: Waker::from(shared.clone()),
            shared,
        }
    }
}

impl<F> InPlace<F> {
    /// The future itself, to act on between polls.
    pub(super) fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for InPlace<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        {
            let mut task = this.shared.task.locked();
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..=REPOLLS {
            this.shared.state.store(POLLING, Ordering::Release);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            // A wake-up from here on finds the state idle and wakes the task.
            let state = this.shared.state.swap(IDLE, Ordering::AcqRel);
            if polled.is_ready() || state != WOKEN {
                return polled;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wake-ups of the task that polls with it.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    /// Wakes itself `times` times, one per poll, then is ready with its poll count.
    struct SelfWaking {
        times: usize,
        polls: usize,
    }

    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.times {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_up_during_its_poll_is_answered_there_without_waking_the_task() {
        let (counter, waker) = counting();
        let mut future = std::pin::pin!(InPlace::new(SelfWaking { times: 2, polls: 0 }));
        let polled = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert_eq!(polled, Poll::Ready(3));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_scheduler() {
        let (counter, waker) = counting();
        let mut future = std::pin::pin!(InPlace::new(SelfWaking {
            times: usize::MAX,
            polls: 0
        }));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            1,
            "woken once, to run again"
        );
        assert_eq!(future.inner.polls, REPOLLS + 1);
    }

    #[test]
    fn a_wake_up_between_polls_wakes_the_task() {
        let (counter, waker) = counting();
        let (sender, receiver) = tokio::sync::oneshot::channel::<u8>();
        let mut future = std::pin::pin!(InPlace::new(receiver));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        sender.send(7).unwrap();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let polled = future.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(matches!(polled, Poll::Ready(Ok(7))));
    }
}
