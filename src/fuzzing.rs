//! Entry points for the fuzz targets in `fuzz/` and the corpus replay in `tests/it`: each takes
//! arbitrary bytes, drives one of the readers that face untrusted peers (an agent's ACP stream,
//! an MCP client's messages, a control-socket frame) entirely in memory, and returns. A panic,
//! an abort or unbounded memory here is a defect in the reader; errors are expected answers.
//!
//! Nothing in the product imports this module; it imports only the readers it wraps, reaching
//! private ones through `pub(crate)` items so the crate's public surface grows by these three
//! functions alone.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acp::connection::{Connection, Line, SessionHandler, read_line};
use crate::control::client::{ControlClient, ControlClientError};
use crate::control::{Identity, server, wire};
use crate::discovery::RunControlKey;
use crate::engine::runner::AgentUpdate;
use crate::mcp::handler::{McpHandler, McpResult, NotificationHub, RequestContext, ServerInfo};
use crate::mcp::server::{McpServer, ServerOptions, TransportContext, TransportKind};

/// The ACP line reader, then the connection that decodes and routes each line.
///
/// The first byte shapes the read: its low six bits pick a line limit of 1 to 64 bytes (so the
/// overflow path is reached without megabytes of input) and its top two bits the reader's
/// buffer size (so lines arrive split across reads). The rest is read line by line under that
/// limit, checking that no line outgrows it and that, without an overflow, the lines put back
/// together are the input. Then the same bytes go through a live [`Connection`] (its real
/// 32 MiB limit) with one session registered and one request of ours pending, so responses,
/// notifications, `session/update` parsing and the agent's own requests are all decoded.
pub fn acp_reader(data: &[u8]) {
    let Some((&shape, input)) = data.split_first() else {
        return;
    };
    let limit = usize::from(shape & 0x3f) + 1;
    let capacity = [1, 3, 17, 8192][usize::from(shape >> 6)];
    runtime().block_on(async {
        read_lines(input, limit, capacity).await;
        converse(input).await;
    });
}

/// The MCP request path: each line of `data` is one message body (as a stdio line or an HTTP
/// POST body is) through [`McpServer::handle_bytes`], which parses it as JSON-RPC (serde's
/// nesting limit, no batches), resolves its era and session and dispatches it to a server
/// with no tools. A session an `initialize` opens is used for the lines after it.
pub fn mcp_request(data: &[u8]) {
    runtime().block_on(async {
        let handler: Arc<dyn McpHandler> = Arc::new(Bare(NotificationHub::new()));
        let server = McpServer::new(handler, ServerOptions::default());
        let mut session = None;
        for body in data.split(|byte| *byte == b'\n') {
            let mut transport = TransportContext::new(TransportKind::Stdio, "fuzz");
            transport.session_id.clone_from(&session);
            let outcome = server.handle_bytes(body, transport).await;
            if outcome.new_session.is_some() {
                session = outcome.new_session;
            }
        }
    });
}

/// The control plane's frame reader and both sides' checks: `data` is read as frames (length
/// prefix, 1 MiB cap) until it runs out; each frame is verified as a request by a server
/// named after the frame's own `to` at the frame's own `ts`, then once more after re-signing
/// it with the server's key (so the fuzzer reaches the body and the answer past the mac), and
/// checked as an answer by a client.
pub fn control_frame(data: &[u8]) {
    runtime().block_on(async {
        let mut input = data;
        while let Ok(frame) = wire::read_frame(&mut input).await {
            check_frame(&frame);
        }
    });
}

/// The key every fuzzed server and client shares.
fn key() -> RunControlKey {
    RunControlKey::from_bytes([7; 32])
}

fn check_frame(frame: &[u8]) {
    let parsed: Option<wire::Request> = serde_json::from_slice(frame).ok();
    let (to, ts) = parsed
        .as_ref()
        .map_or(("fuzz", 0), |request| (request.to.as_str(), request.ts));
    let _ = server::answer_frame(key(), to, ts, frame);
    if let Some(request) = parsed {
        let signed = wire::Request::sign(
            &key(),
            &request.kind,
            &request.to,
            &request.from,
            request.ts,
            &request.nonce,
            &request.op,
            request.body.clone(),
        );
        let resigned = serde_json::to_vec(&signed).expect("a request serialises");
        if let Ok(answer) = server::answer_frame(key(), &request.to, request.ts, &resigned) {
            let client = ControlClient::new(key(), identity("fuzz-client"));
            let checked =
                client.check_answer(Path::new("fuzz"), &request.to, &request.nonce, &answer);
            assert!(
                !matches!(checked, Err(ControlClientError::BadResponse { .. })),
                "the client refused the server's own answer: {checked:?}"
            );
        }
    }
    let client = ControlClient::new(key(), identity("fuzz-client"));
    let _ = client.check_answer(Path::new("fuzz"), "fuzz", "AAECAwQFBgcICQoLDA0ODw", frame);
}

fn identity(instance_id: &str) -> Identity {
    Identity {
        instance_id: instance_id.to_owned(),
        pid: 1,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds")
}

async fn read_lines(input: &[u8], limit: usize, capacity: usize) {
    let mut reader = BufReader::with_capacity(capacity, input);
    let mut buffer = Vec::new();
    let mut joined = Vec::new();
    let mut overflowed = false;
    loop {
        buffer.clear();
        match read_line(&mut reader, &mut buffer, limit).await {
            Ok(Line::End) => break,
            Ok(Line::TooLong) => overflowed = true,
            Ok(Line::Complete) => {
                let body = buffer.strip_suffix(b"\n").unwrap_or(&buffer);
                assert!(
                    body.len() <= limit,
                    "a line of {} bytes passed a limit of {limit}",
                    body.len()
                );
                assert!(!body.contains(&b'\n'), "a line holds a newline");
                joined.extend_from_slice(&buffer);
            }
            Err(error) => panic!("reading from memory failed: {error}"),
        }
    }
    if !overflowed {
        assert_eq!(joined, input, "the lines read are not the input");
    }
}

/// `input`, then a response to our own pending request (id 1), through a live connection.
/// That response marks the point where every earlier line has been routed; the stream stays
/// open until then so the answers to the agent's requests are not cut short by its end.
async fn converse(input: &[u8]) {
    let tracker = TaskTracker::new();
    let (mut feed, reader) = tokio::io::duplex(64 * 1024);
    let connection = Connection::start("fuzz", reader, tokio::io::sink(), None, &tracker);
    connection.register_session("fuzz", Arc::new(Quiet));
    let done = CancellationToken::new();
    let mut stream = input.to_vec();
    stream.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":null}\n");
    let hold = done.clone();
    tokio::spawn(async move {
        let _ = feed.write_all(&stream).await;
        hold.cancelled().await;
    });
    let _ = connection.request("fuzz/ping", &json!({})).await;
    // The requests routed before the mark answer from tasks of their own; give each a turn.
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    done.cancel();
}

/// A session that takes every update and refuses every permission; it has no file roots, so
/// the agent's `fs/*` requests are refused before touching the disk.
struct Quiet;

#[async_trait]
impl SessionHandler for Quiet {
    fn update(&self, update: AgentUpdate) {
        drop(update);
    }

    async fn request_permission(&self, _params: Value) -> Value {
        json!({"outcome": {"outcome": "cancelled"}})
    }
}

/// An MCP server with nothing on it.
struct Bare(NotificationHub);

#[async_trait]
impl McpHandler for Bare {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "fuzz".into(),
            version: "0.0.0".into(),
            title: None,
        }
    }

    fn capabilities(&self) -> Value {
        json!({"tools": {}, "resources": {}})
    }

    fn hub(&self) -> &NotificationHub {
        &self.0
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        Err(crate::mcp::McpError::invalid_params(format!(
            "no resource {uri}"
        )))
    }
}
