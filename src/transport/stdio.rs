//! MCP over stdio: one JSON-RPC message per line in each direction, nothing but protocol on
//! the output.
//!
//! Requests run concurrently and their responses are written as they finish; notifications
//! (progress, logging, `resources/updated` for the connection's session, list changes) are
//! interleaved as whole lines. Both eras share the connection: `initialize` creates the one
//! stdio session, and requests carrying a protocol version in `_meta` are served statelessly
//! beside it, so a `server/discover` probe before `initialize` gets a real answer. End of
//! input cancels whatever is still running and returns.
//!
//! Input is read with a bound ([`super::lines`]): no more than [`MAX_LINE_BYTES`] of a line is
//! ever held, and a longer line is refused with -32600 as soon as it passes the limit, its
//! rest discarded as it arrives.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::mcp::handler::{McpError, codes};
use crate::mcp::jsonrpc::{self, Message};
use crate::mcp::server::{McpServer, SessionEvents, TransportContext, TransportKind};
use crate::transport::lines::{AsyncLines, Line};

/// The largest line accepted, the same cap as an HTTP body.
pub const MAX_LINE_BYTES: usize = crate::transport::http::MAX_BODY_BYTES;
/// Requests one stdio connection runs at once; a request past it is answered at once with an
/// error naming the limit, while notifications (a `notifications/cancelled` among them) are
/// still read and acted on. Answers are written by the loop that reads, so a client that stops
/// reading stops being read too.
pub const MAX_REQUESTS_IN_FLIGHT: usize = 64;
/// How long requests cancelled at end of input get to finish.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// Serves one stdio connection until end of input (or server shutdown).
pub async fn serve_stdio(
    server: Arc<McpServer>,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin,
) -> anyhow::Result<()> {
    let mut lines = AsyncLines::new(BufReader::new(input), MAX_LINE_BYTES);
    let mut output = output;
    let (outgoing, mut outgoing_receiver) = crate::mcp::outbox::outbox();
    let mut connection = Connection {
        connection_id: uuid::Uuid::new_v4().simple().to_string(),
        cancel: server.shutdown_token().child_token(),
        server,
        outgoing,
        requests: JoinSet::new(),
        session_id: None,
        session_events: None,
    };
    let shutdown = connection.server.shutdown_token();
    loop {
        tokio::select! {
            // Cancel-safe: a line read in part stays in `lines` if another branch wins.
            read = lines.next() => match read.context("reading a message from stdin")? {
                Some(Line::Text(line)) => connection.on_line(line).await,
                Some(Line::TooLong) => connection.refuse_too_long(),
                None => break,
            },
            Some(message) = outgoing_receiver.recv() => {
                write_line(&mut output, &message).await?;
            }
            Some(event) = next_event(&mut connection.session_events), if connection.session_events.is_some() => {
                match event {
                    Some(message) => write_line(&mut output, &message).await?,
                    None => connection.session_events = None,
                }
            }
            Some(_) = connection.requests.join_next(), if !connection.requests.is_empty() => {}
            () = shutdown.cancelled() => break,
        }
    }
    connection.close(&mut output, &mut outgoing_receiver).await
}

/// One stdio connection's state, owned by its serving loop.
struct Connection {
    server: Arc<McpServer>,
    /// Scopes `notifications/cancelled` before the connection has a session.
    connection_id: String,
    /// Cancels the connection's requests at end of input.
    cancel: CancellationToken,
    /// Responses and notifications waiting for stdout, in the order they were sent.
    outgoing: crate::mcp::outbox::OutboxSender,
    /// Requests running concurrently; their responses go to `outgoing` as they finish.
    requests: JoinSet<()>,
    /// The one legacy session, once `initialize` made it (a later one replaces it).
    session_id: Option<String>,
    /// Server-wide changes for that session.
    session_events: Option<SessionEvents>,
}

impl Connection {
    /// A line over [`MAX_LINE_BYTES`]: its id is unknown (it was never read whole), so the
    /// refusal answers `null`.
    fn refuse_too_long(&self) {
        let error = McpError::new(
            codes::INVALID_REQUEST,
            format!(
                "message too large: a line over the limit of {MAX_LINE_BYTES} bytes; it was \
                 discarded unread"
            ),
        );
        let _ = self
            .outgoing
            .send(jsonrpc::error_response(&Value::Null, &error));
    }

    /// Handles one input line: a refusal for a malformed one, `initialize` in order (later
    /// messages depend on the session it sets), other requests concurrently.
    async fn on_line(&mut self, taken: Vec<u8>) {
        let text = trim_line(&taken);
        if text.is_empty() {
            return;
        }
        let message = match jsonrpc::parse(text) {
            Ok(message) => message,
            Err(rejected) => {
                let _ = self.outgoing.send(rejected.to_response());
                return;
            }
        };
        let context = TransportContext {
            transport: TransportKind::Stdio,
            session_id: self.session_id.clone(),
            connection_id: self.connection_id.clone(),
            notifications: Some(self.outgoing.clone()),
            cancel: self.cancel.clone(),
            principal: None,
        };
        match &message {
            Message::Request(request) if request.method == "initialize" => {
                let outcome = self.server.handle(message, context).await;
                if let Some(new_session) = outcome.new_session {
                    if let Some(old) = self.session_id.replace(new_session.clone()) {
                        self.server.evict_session(&old).await;
                    }
                    self.session_events = self.server.session_events(&new_session);
                }
                if let Some(response) = outcome.response {
                    let _ = self.outgoing.send(response);
                }
            }
            Message::Request(request) if self.requests.len() >= MAX_REQUESTS_IN_FLIGHT => {
                let refused = McpError::new(
                    -32000,
                    format!(
                        "too many requests in flight on this connection: at most \
                         {MAX_REQUESTS_IN_FLIGHT} run at once; try again when one has answered"
                    ),
                );
                let _ = self
                    .outgoing
                    .send(jsonrpc::error_response(&request.id, &refused));
            }
            Message::Request(_) => {
                let server = self.server.clone();
                let outgoing = self.outgoing.clone();
                self.requests.spawn(async move {
                    if let Some(response) = server.handle(message, context).await.response {
                        let _ = outgoing.send(response);
                    }
                });
            }
            Message::Notification(_) | Message::Response(_) => {
                self.server.handle(message, context).await;
            }
        }
    }

    /// End of input: cancels what still runs, writes what it answers within
    /// [`DRAIN_DEADLINE`], and ends the session.
    async fn close(
        mut self,
        output: &mut (impl AsyncWrite + Unpin),
        outgoing: &mut crate::mcp::outbox::OutboxReceiver,
    ) -> anyhow::Result<()> {
        self.cancel.cancel();
        let requests = &mut self.requests;
        let drain = async {
            loop {
                tokio::select! {
                    Some(message) = outgoing.recv() => write_line(output, &message).await?,
                    joined = requests.join_next() => {
                        if joined.is_none() {
                            break;
                        }
                    }
                }
            }
            while let Some(message) = outgoing.try_recv() {
                write_line(output, &message).await?;
            }
            anyhow::Ok(())
        };
        let drained = tokio::time::timeout(DRAIN_DEADLINE, drain).await;
        self.requests.abort_all();
        if let Some(id) = &self.session_id {
            self.server.evict_session(id).await;
        }
        match drained {
            Ok(result) => result,
            Err(_) => {
                tracing::warn!(
                    "stdio requests did not finish within {DRAIN_DEADLINE:?} of end of input"
                );
                Ok(())
            }
        }
    }
}

async fn next_event(events: &mut Option<SessionEvents>) -> Option<Option<Value>> {
    match events {
        Some(events) => Some(events.next().await),
        None => None,
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let start = line[..end]
        .iter()
        .position(|byte| !byte.is_ascii_whitespace())
        .unwrap_or(end);
    &line[start..end]
}

async fn write_line(output: &mut (impl AsyncWrite + Unpin), message: &Value) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec(message).context("encoding a message for stdout")?;
    bytes.push(b'\n');
    output
        .write_all(&bytes)
        .await
        .context("writing a message to stdout")?;
    output.flush().await.context("flushing stdout")?;
    Ok(())
}
