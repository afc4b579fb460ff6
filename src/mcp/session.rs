//! Legacy sessions: what the initialize handshake negotiated, the session's resource
//! subscriptions, its idle bookkeeping for the daemon's eviction, and the SSE event logs that
//! let a client resume a stream with `Last-Event-ID`.
//!
//! A session is shared between the core (which reads its capabilities and subscriptions) and
//! the transport (which records connections and stream events), so its mutable parts sit
//! behind std mutexes that are never held across an `.await`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::util::sync::Lock;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How many events one SSE stream keeps for replay; older ones are forgotten.
pub(crate) const STREAM_REPLAY_LIMIT: usize = 256;
/// How many finished streams a session remembers for replay.
const FINISHED_STREAM_LIMIT: usize = 64;

/// A snapshot of a session's activity, for idle eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionActivity {
    /// Open HTTP connections (SSE streams and requests being answered) for this session.
    pub open_connections: usize,
    /// Requests being handled right now.
    pub inflight_requests: usize,
    pub last_activity: Instant,
}

pub struct Session {
    pub id: String,
    /// The negotiated legacy protocol version.
    pub version: String,
    pub client_capabilities: Value,
    pub client_info: Option<Value>,
    pub(crate) initialized: AtomicBool,
    pub(crate) subscriptions: Mutex<HashSet<String>>,
    /// The minimum `notifications/message` level set by `logging/setLevel`.
    pub(crate) log_level: Mutex<Option<String>>,
    activity: Mutex<SessionActivity>,
    /// Fires when the session ends (DELETE, eviction, shutdown) so its streams close.
    pub closed: CancellationToken,
    streams: Mutex<StreamLogs>,
    /// Streams opened by GET, which go on live after a replay.
    standalone: Mutex<HashSet<u64>>,
    /// The GET stream that records the session's notifications now, and what stops its
    /// recorder when a newer GET stream takes over.
    current_standalone: Mutex<Option<(u64, CancellationToken)>>,
    /// Woken whenever any stream of this session gets an event or finishes.
    stream_changed: Notify,
}

/// One SSE stream's recent events, kept for `Last-Event-ID` replay.
#[derive(Default)]
struct StreamLog {
    next_sequence: u64,
    events: VecDeque<(u64, String)>,
    finished: bool,
}

#[derive(Default)]
struct StreamLogs {
    next_stream: u64,
    streams: BTreeMap<u64, StreamLog>,
    finished_order: VecDeque<u64>,
}

/// What a replaying reader gets back.
pub enum Replay {
    /// Events after the cursor: `(event id, data)`.
    Events(Vec<(String, String)>),
    /// The stream is finished and everything has been replayed.
    Finished,
    /// Nothing new yet.
    Pending,
    /// The stream is unknown (never existed, or forgotten).
    Unknown,
}

impl Session {
    pub fn new(
        id: String,
        version: String,
        client_capabilities: Value,
        client_info: Option<Value>,
    ) -> Session {
        Session {
            id,
            version,
            client_capabilities,
            client_info,
            initialized: AtomicBool::new(false),
            subscriptions: Mutex::new(HashSet::new()),
            log_level: Mutex::new(None),
            activity: Mutex::new(SessionActivity {
                open_connections: 0,
                inflight_requests: 0,
                last_activity: Instant::now(),
            }),
            closed: CancellationToken::new(),
            streams: Mutex::new(StreamLogs::default()),
            standalone: Mutex::new(HashSet::new()),
            current_standalone: Mutex::new(None),
            stream_changed: Notify::new(),
        }
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Relaxed)
    }

    pub fn activity(&self) -> SessionActivity {
        self.activity.locked().clone()
    }

    pub(crate) fn is_subscribed(&self, uri: &str) -> bool {
        self.subscriptions.locked().contains(uri)
    }

    pub(crate) fn touch(&self) {
        self.activity.locked().last_activity = Instant::now();
    }

    /// Counts an open connection until the guard drops.
    pub fn connection(self: &std::sync::Arc<Self>) -> ActivityGuard {
        self.adjust(|activity| activity.open_connections += 1);
        ActivityGuard {
            session: self.clone(),
            kind: ActivityKind::Connection,
        }
    }

    pub(crate) fn request(self: &std::sync::Arc<Self>) -> ActivityGuard {
        self.adjust(|activity| activity.inflight_requests += 1);
        ActivityGuard {
            session: self.clone(),
            kind: ActivityKind::Request,
        }
    }

    fn adjust(&self, change: impl FnOnce(&mut SessionActivity)) {
        let mut activity = self.activity.locked();
        change(&mut activity);
        activity.last_activity = Instant::now();
    }

    /// Starts a new SSE stream and returns its number.
    pub(crate) fn open_stream(&self) -> u64 {
        let mut logs = self.streams.locked();
        logs.next_stream += 1;
        let stream = logs.next_stream;
        logs.streams.insert(stream, StreamLog::default());
        stream
    }

    /// Opens the session's standalone (GET) stream, which logs the session's notifications
    /// whether or not a client is connected to it, so a client that reconnects with
    /// `Last-Event-ID` gets what it missed. A newer GET stream without `Last-Event-ID`
    /// replaces it: the older one is finished, and the returned token of its recorder fires.
    pub(crate) fn open_standalone_stream(&self) -> (u64, CancellationToken) {
        let stream = self.open_stream();
        self.mark_standalone(stream);
        let recording = self.closed.child_token();
        let previous = self
            .current_standalone
            .locked()
            .replace((stream, recording.clone()));
        if let Some((old, old_recording)) = previous {
            old_recording.cancel();
            self.finish_stream(old);
        }
        (stream, recording)
    }

    pub(crate) fn mark_standalone(&self, stream: u64) {
        self.standalone.locked().insert(stream);
    }

    /// Records an event on a stream and returns its event id (`<stream>-<sequence>`).
    pub(crate) fn record_event(&self, stream: u64, data: String) -> String {
        let id = {
            let mut logs = self.streams.locked();
            let log = logs.streams.entry(stream).or_default();
            let sequence = log.next_sequence;
            log.next_sequence += 1;
            log.events.push_back((sequence, data));
            if log.events.len() > STREAM_REPLAY_LIMIT {
                log.events.pop_front();
            }
            event_id(stream, sequence)
        };
        self.stream_changed.notify_waiters();
        id
    }

    pub(crate) fn finish_stream(&self, stream: u64) {
        {
            let mut logs = self.streams.locked();
            if let Some(log) = logs.streams.get_mut(&stream) {
                log.finished = true;
            }
            logs.finished_order.push_back(stream);
            while logs.finished_order.len() > FINISHED_STREAM_LIMIT {
                if let Some(old) = logs.finished_order.pop_front() {
                    logs.streams.remove(&old);
                }
            }
        }
        self.stream_changed.notify_waiters();
    }

    /// Events of `stream` after `after` (a sequence number), or its state.
    pub fn replay(&self, stream: u64, after: Option<u64>) -> Replay {
        let logs = self.streams.locked();
        let Some(log) = logs.streams.get(&stream) else {
            return Replay::Unknown;
        };
        let events: Vec<(String, String)> = log
            .events
            .iter()
            .filter(|(sequence, _)| after.is_none_or(|after| *sequence > after))
            .map(|(sequence, data)| (event_id(stream, *sequence), data.clone()))
            .collect();
        if !events.is_empty() {
            Replay::Events(events)
        } else if log.finished {
            Replay::Finished
        } else {
            Replay::Pending
        }
    }

    /// A future that resolves on the next stream change; create it before checking state so
    /// no wake-up is missed.
    pub(crate) fn stream_change_listener(&self) -> tokio::sync::futures::Notified<'_> {
        self.stream_changed.notified()
    }
}

/// Formats an SSE event id that names its stream.
pub(crate) fn event_id(stream: u64, sequence: u64) -> String {
    format!("{stream}-{sequence}")
}

/// Parses an id made by [`event_id`].
pub(crate) fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, sequence) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, sequence.parse().ok()?))
}

enum ActivityKind {
    Connection,
    Request,
}

/// Decrements a session's activity counter when dropped.
pub struct ActivityGuard {
    session: std::sync::Arc<Session>,
    kind: ActivityKind,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        match self.kind {
            ActivityKind::Connection => self
                .session
                .adjust(|a| a.open_connections = a.open_connections.saturating_sub(1)),
            ActivityKind::Request => self
                .session
                .adjust(|a| a.inflight_requests = a.inflight_requests.saturating_sub(1)),
        }
    }
}
