//! The session's GET stream: the daemon's notifications for one legacy session, resumed
//! with `Last-Event-ID` whenever the daemon ends the stream gracefully.

use std::time::Duration;

use hyper::Method;

use super::http::{self, MCP_PATH};
use super::output::Output;
use super::sse;
use crate::daemon::health::LAME_DUCK_HEADER;

/// The GET stream of one session in one generation.
pub(super) struct SessionStream {
    /// The daemon's port in this generation.
    pub(super) port: u16,
    /// Whose notifications the stream carries.
    pub(super) session: String,
    /// Sent as `MCP-Protocol-Version`.
    pub(super) protocol_version: Option<String>,
    /// The recovery generation, so a failure of an old stream starts no new recovery.
    pub(super) generation: u64,
}

impl SessionStream {
    /// Streams session notifications to stdout, resuming after graceful ends; returns why it
    /// failed, or `None` when the daemon offers no stream.
    pub(super) async fn run(&self, output: &Output) -> Option<String> {
        let mut last_event_id: Option<String> = None;
        let mut retry = Duration::from_millis(1000);
        loop {
            let mut headers = vec![
                ("accept", "text/event-stream"),
                ("mcp-session-id", self.session.as_str()),
            ];
            if let Some(version) = &self.protocol_version {
                headers.push(("mcp-protocol-version", version));
            }
            if let Some(id) = &last_event_id {
                headers.push(("last-event-id", id));
            }
            let mut response =
                match http::send(self.port, Method::GET, MCP_PATH, &headers, None).await {
                    Ok(response) => response,
                    Err(error) => return Some(error.to_string()),
                };
            match response.status {
                200 if response.header(LAME_DUCK_HEADER) == Some("1") => {
                    return Some("the daemon was superseded (lame duck)".into());
                }
                200 => {}
                405 => return None,
                status => return Some(format!("GET answered {status}")),
            }
            let mut parser = sse::Parser::new();
            while let Some(chunk) = response.chunk().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(error) => return Some(error.to_string()),
                };
                for event in parser.feed(&chunk) {
                    if let Some(id) = event.id {
                        last_event_id = Some(id);
                    }
                    if let Some(ms) = event.retry {
                        retry = Duration::from_millis(ms.min(10_000));
                    }
                    if !event.data.is_empty() {
                        output.write(event.data.as_bytes());
                    }
                }
            }
            // The daemon ended the stream (it may be stopping): resume after `retry`.
            tokio::time::sleep(retry).await;
        }
    }
}
