//! GET and DELETE: a legacy session's standalone stream of server notifications, resumable
//! with `Last-Event-ID`, and the end of a session.
//!
//! A new GET stream gets a recorder that logs the session's notifications for as long as
//! the stream is the session's current one, connected or not; every reader (this GET, and
//! later ones with `Last-Event-ID`) follows that log, so a client that reconnects gets what
//! it missed from the bounded per-stream log, and a resumed POST stream reads the same way.

use std::sync::Arc;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::http::request::Parts;
use tokio::sync::mpsc;

use super::State;
use super::body::{HttpResponse, plain, sse_response, status_only};
use super::headers::header;
use super::pump::Pump;
use crate::mcp::session::{Replay, Session, parse_event_id};

pub(super) async fn get(state: Arc<State>, parts: Parts) -> HttpResponse {
    let headers = &parts.headers;
    let accepts_sse =
        header(headers, "accept").is_some_and(|accept| accept.contains("text/event-stream"));
    if !accepts_sse {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "GET needs Accept: text/event-stream",
        );
    }
    let Some(session_id) = header(headers, "mcp-session-id") else {
        return plain(StatusCode::BAD_REQUEST, "GET needs an Mcp-Session-Id");
    };
    let Some(session) = state
        .server
        .session(session_id)
        .filter(|session| !session.closed.is_cancelled())
    else {
        return plain(StatusCode::NOT_FOUND, "session not found");
    };
    let primes = crate::mcp::scope::primes_streams(&session.version);
    let (stream, cursor, priming) = match header(headers, "last-event-id").and_then(parse_event_id)
    {
        Some((stream, after)) => (stream, Some(after), None),
        None => {
            let (stream, priming) = record_standalone(&state, &session, primes);
            let cursor = priming
                .as_deref()
                .and_then(parse_event_id)
                .map(|(_, sequence)| sequence);
            (stream, cursor, priming)
        }
    };
    let (body_sender, body_receiver) = mpsc::channel::<Bytes>(64);
    let reader = StreamReader {
        pump: Pump::new(body_sender, Some(session.clone()), Some(stream)),
        session,
        stream,
    };
    let connection = reader.session.connection();
    let state_for_reader = state.clone();
    state.tasks.spawn(async move {
        let _connection = connection;
        reader.run(&state_for_reader, cursor, priming).await;
    });
    sse_response(body_receiver)
}

pub(super) async fn delete(state: Arc<State>, parts: Parts) -> HttpResponse {
    let Some(session_id) = header(&parts.headers, "mcp-session-id") else {
        return plain(StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id");
    };
    if state.server.evict_session(session_id).await {
        status_only(StatusCode::OK)
    } else {
        plain(StatusCode::NOT_FOUND, "session not found")
    }
}

/// Opens the session's standalone stream and starts its recorder; returns the stream and,
/// for a client that reads one (`primes`), the id of its priming event.
fn record_standalone(state: &State, session: &Arc<Session>, primes: bool) -> (u64, Option<String>) {
    let mut events = state.server.events_of(session.clone());
    let (stream, recording) = session.open_standalone_stream();
    let priming = primes.then(|| session.record_event(stream, String::new()));
    let recorder = session.clone();
    state.tasks.spawn(async move {
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(message) => {
                        recorder.record_event(stream, message.to_string());
                    }
                    None => break,
                },
                () = recording.cancelled() => break,
            }
        }
        recorder.finish_stream(stream);
    });
    (stream, priming)
}

/// One GET connection following a stream's log.
struct StreamReader {
    /// Writes what the log holds to this connection.
    pump: Pump,
    /// Whose log is followed; its end closes the stream.
    session: Arc<Session>,
    /// Which of the session's streams.
    stream: u64,
}

impl StreamReader {
    /// Sends the priming event (or a `resumed` comment for a reconnection; nothing for a new
    /// stream of a client that predates priming), then follows the log after `cursor` (all of
    /// it when `None`): replayed and live events alike come from it, until the stream finishes
    /// (a POST stream after its response, a GET stream when a newer one replaced it or the
    /// session ended).
    async fn run(mut self, state: &State, cursor: Option<u64>, priming: Option<String>) {
        let retry_ms = state.options.retry_ms;
        let pump = &mut self.pump;
        let session = &self.session;
        let watch = pump.body.clone();
        let mut ticker = tokio::time::interval(state.options.keep_alive);
        ticker.reset();
        match &priming {
            Some(id) => {
                pump.send(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
                    .await;
            }
            None if cursor.is_some() => pump.comment("resumed").await,
            None => {}
        }
        let mut cursor = cursor;
        loop {
            let changed = session.stream_change_listener();
            match session.replay(self.stream, cursor) {
                Replay::Events(replayed) => {
                    for (id, data) in replayed {
                        cursor = parse_event_id(&id).map(|(_, sequence)| sequence);
                        pump.raw_event(&id, &data).await;
                    }
                    if pump.client_gone {
                        return;
                    }
                    continue;
                }
                // An ended session's streams just close: reconnecting would find no session.
                _ if session.closed.is_cancelled() => return,
                Replay::Finished | Replay::Unknown => {
                    pump.retry(retry_ms).await;
                    return;
                }
                Replay::Pending => {}
            }
            tokio::select! {
                () = changed => {}
                _ = ticker.tick() => pump.comment("keep-alive").await,
                () = watch.closed() => return,
                () = state.stopping.cancelled() => { pump.retry(retry_ms).await; return; }
                () = session.closed.cancelled() => return,
            }
        }
    }
}
