//! The writer of one SSE stream: frames with event ids, keep-alive comments, the `retry:`
//! hint, and for legacy sessions the record of every event so a client can resume with
//! `Last-Event-ID`.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::mcp::session::Session;

/// Writes SSE frames for one stream, recording legacy events for replay.
pub(super) struct Pump {
    pub(super) body: mpsc::Sender<Bytes>,
    /// The legacy session whose log records this stream; `None` for stateless streams.
    pub(super) session: Option<Arc<Session>>,
    pub(super) stream: Option<u64>,
    /// Event numbers for stateless streams, which have no log.
    pub(super) local_sequence: u64,
    /// The client closed the connection; events are still logged for replay.
    pub(super) client_gone: bool,
}

impl Pump {
    pub(super) fn new(
        body: mpsc::Sender<Bytes>,
        session: Option<Arc<Session>>,
        stream: Option<u64>,
    ) -> Pump {
        Pump {
            body,
            session,
            stream,
            local_sequence: 0,
            client_gone: false,
        }
    }

    /// Whether this stream's client reads a priming event and `retry:` hints: a legacy
    /// session that negotiated 2025-11-25 or later, and every stateless (2026-07-28) request.
    pub(super) fn primes(&self) -> bool {
        self.session
            .as_ref()
            .is_none_or(|session| crate::mcp::scope::primes_streams(&session.version))
    }

    /// Opens the stream; for a client that reads one, with the priming event: an id to resume
    /// from, the reconnection delay, empty data.
    pub(super) async fn open(&mut self, retry_ms: u64) {
        if let Some(session) = &self.session
            && self.stream.is_none()
        {
            self.stream = Some(session.open_stream());
        }
        if !self.primes() {
            return;
        }
        let id = self.next_id(String::new());
        self.send(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
            .await;
    }

    pub(super) async fn event(&mut self, message: &Value) {
        self.event_text(message.to_string()).await;
    }

    /// An event whose data is a message already written as JSON.
    pub(super) async fn event_text(&mut self, data: String) {
        let id = self.next_id(data.clone());
        self.send(format!("id: {id}\ndata: {data}\n\n")).await;
    }

    pub(super) async fn raw_event(&mut self, id: &str, data: &str) {
        self.send(format!("id: {id}\ndata: {data}\n\n")).await;
    }

    pub(super) async fn comment(&mut self, text: &str) {
        self.send(format!(": {text}\n\n")).await;
    }

    /// The reconnection delay, before a stream the client should reopen ends; nothing for a
    /// client that predates `retry:` handling.
    pub(super) async fn retry(&mut self, retry_ms: u64) {
        if self.primes() {
            self.send(format!("retry: {retry_ms}\n\n")).await;
        }
    }

    fn next_id(&mut self, data: String) -> String {
        match (&self.session, self.stream) {
            (Some(session), Some(stream)) => session.record_event(stream, data),
            _ => {
                self.local_sequence += 1;
                format!("0-{}", self.local_sequence)
            }
        }
    }

    pub(super) async fn send(&mut self, frame: String) {
        if self.client_gone {
            return;
        }
        if self.body.send(Bytes::from(frame)).await.is_err() {
            self.client_gone = true;
        }
    }

    pub(super) fn finish(&mut self) {
        if let (Some(session), Some(stream)) = (&self.session, self.stream) {
            session.finish_stream(stream);
        }
    }
}
