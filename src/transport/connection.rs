//! One HTTP/1.1 connection under a watchdog: the time limits hyper alone cannot express.
//!
//! A connection is in one of three stretches, which [`Activity`] tracks:
//! - *idle*: no request open and no bytes since the last answer ended (or since it opened);
//!   it is closed after [`Limits::idle`];
//! - *reading a head*: bytes arrived while idle, and hyper has not yet handed us a request;
//!   it is closed after [`Limits::header`] (a client that sends a header byte every few
//!   seconds is cut off however slowly it trickles);
//! - *busy*: a request is being served, or its response (an SSE stream included) is still
//!   being written; no limit here, the body read has its own ([`Limits::body`], enforced
//!   where the body is collected).
//!
//! hyper's own `header_read_timeout` starts whenever it waits for a head, so it would also
//! close idle keep-alive connections after the header limit; we turn it off and watch here.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::util::sync::Lock;
use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The time limits of one connection.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// From a request's first byte to its complete head.
    pub header: Duration,
    /// From a complete head to the complete body.
    pub body: Duration,
    /// An open connection with nothing to do.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
        }
    }
}

/// What a connection is doing, shared by its reader, its requests and its watchdog.
///
/// Nothing here wakes the watchdog: a change only updates the state, and the watchdog
/// looks again at least every [`Limits::look`] (see [`expired`]). So a request costs a few
/// uncontended locks, never a wake-up of the connection's task or a timer armed anew, which
/// on tokio's multi-thread runtime would wake the second worker and the I/O driver's thread
/// on every request.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
}

/// One lock over all three, so the watchdog never reads a stretch half changed (a new
/// reading flag with the old start, say, which would close a connection early).
#[derive(Debug)]
struct State {
    /// Requests whose response is not yet fully written.
    busy: usize,
    /// Bytes arrived while idle: a head is being read.
    reading: bool,
    /// When the current idle or reading stretch began.
    since: Instant,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            state: Mutex::new(State {
                busy: 0,
                reading: false,
                since: Instant::now(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below is a single assignment: a panic cannot leave it half made.
        self.state.locked()
    }

    /// Marks a request open until the returned guard drops (with its response body).
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        let mut state = self.state();
        state.busy += 1;
        state.reading = false;
        drop(state);
        Busy(self.clone())
    }

    /// When the connection is due to be closed, `None` while it is busy.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Stretch)> {
        let state = self.state();
        if state.busy > 0 {
            return None;
        }
        Some(if state.reading {
            (state.since + limits.header, Stretch::ReadingHead)
        } else {
            (state.since + limits.idle, Stretch::Idle)
        })
    }

    fn saw_bytes(&self) {
        let mut state = self.state();
        if state.busy == 0 && !state.reading {
            state.reading = true;
            state.since = Instant::now();
        }
    }
}

impl Limits {
    /// The longest the watchdog waits between two looks at a connection: the shortest
    /// stretch limit. A stretch that begins just after a look is then seen at the next
    /// one, before or at its own deadline, which the watchdog then waits for exactly.
    fn look(&self) -> Duration {
        self.header.min(self.idle)
    }
}

/// Which limit ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stretch {
    Idle,
    ReadingHead,
}

/// A request in progress; dropping it may start the idle clock.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.busy -= 1;
        if state.busy == 0 {
            state.since = Instant::now();
        }
    }
}

/// Waits until the connection overstays a limit, and says which. Never returns while busy.
///
/// Exact without being told of changes: it looks at least every [`Limits::look`], and a
/// stretch with limit `l ≥ look` that began at `t` after the last look (at `c < t`) is seen
/// at the next one, due by `c + look < t + l`; from then on it sleeps until that stretch's
/// own deadline (or the next look, whichever is first) and re-reads the state on waking.
pub(crate) async fn expired(activity: &Activity, limits: &Limits) -> Stretch {
    let look = limits.look();
    loop {
        let now = Instant::now();
        let wake = match activity.deadline(limits) {
            Some((due, stretch)) if due <= now => return stretch,
            Some((due, _)) => due.min(now + look),
            None => now + look,
        };
        tokio::time::sleep_until(wake).await;
    }
}

/// The socket, reporting each read to the connection's [`Activity`].
pub(crate) struct WatchedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> WatchedIo<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> WatchedIo<T> {
        WatchedIo { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.saw_bytes();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that keeps its request [`Busy`] until hyper has written all of it.
pub(crate) struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B> Tracked<B> {
    pub(crate) fn new(body: B, busy: Busy) -> Tracked<B> {
        Tracked { body, _busy: busy }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn limits() -> Limits {
        Limits {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_expire_after_the_idle_limit() {
        let activity = Activity::new();
        let started = Instant::now();
        assert_eq!(expired(&activity, &limits()).await, Stretch::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_head_gets_the_header_limit() {
        let activity = Activity::new();
        tokio::time::advance(Duration::from_secs(30)).await;
        activity.saw_bytes();
        let started = Instant::now();
        // More bytes do not extend it: a trickle is cut off as surely as silence.
        let trickle = {
            let activity = activity.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    activity.saw_bytes();
                }
            })
        };
        assert_eq!(expired(&activity, &limits()).await, Stretch::ReadingHead);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        trickle.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_never_expires_and_idles_from_its_end() {
        let activity = Activity::new();
        let busy = activity.busy();
        let watcher = {
            let activity = activity.clone();
            tokio::spawn(async move { expired(&activity, &limits()).await })
        };
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(
            !watcher.is_finished(),
            "a stream open for an hour is not idle"
        );
        let ended = Instant::now();
        drop(busy);
        assert_eq!(watcher.await.unwrap(), Stretch::Idle);
        assert_eq!(ended.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_begun_between_two_looks_gets_exactly_the_header_limit() {
        let activity = Activity::new();
        let watcher = {
            let activity = activity.clone();
            tokio::spawn(async move { expired(&activity, &limits()).await })
        };
        // The watcher looked at 0 and sleeps until its next look at 10; the head starts at 3.
        tokio::time::sleep(Duration::from_secs(3)).await;
        activity.saw_bytes();
        let started = Instant::now();
        assert_eq!(watcher.await.unwrap(), Stretch::ReadingHead);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    /// Counts the wake-ups of the task that polls with it.
    struct CountingWaker(AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_never_wake_the_watchdog() {
        let activity = Activity::new();
        let limits = limits();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut watcher = std::pin::pin!(expired(&activity, &limits));
        assert!(watcher.as_mut().poll(&mut cx).is_pending());
        for _ in 0..3 {
            activity.saw_bytes();
            let busy = activity.busy();
            activity.saw_bytes();
            drop(busy);
        }
        // A wake-up per request would put the connection's task back on the run queue and
        // rouse the runtime's other worker for nothing.
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert!(watcher.as_mut().poll(&mut cx).is_pending());
    }
}
