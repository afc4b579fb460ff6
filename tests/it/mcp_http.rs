//! Streamable HTTP over a real loopback socket with a small hand-written HTTP/1.1 client:
//! session lifecycle, Host/Origin checks, the body cap, SSE framing and replay, concurrent
//! streams, cancellation, stateless header checks, `subscriptions/listen`, and the GET stream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentprism::mcp::{McpServer, NotificationHub};
use agentprism::transport::{HttpOptions, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::mcp_core::{Hold, TestHandler, modern_meta};

mod streams;

const WAIT: Duration = Duration::from_secs(30);

pub(super) struct TestServer {
    address: SocketAddr,
    pub(super) hub: NotificationHub,
    pub(super) server: Arc<McpServer>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub(super) async fn start(options: HttpOptions) -> TestServer {
        let (server, hub) = TestHandler::server();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, server.clone(), options, async {
            let _ = stopped.await;
        }));
        TestServer {
            address,
            hub,
            server,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(super) async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    fn host(&self) -> String {
        self.address.to_string()
    }

    pub(super) async fn request(
        &self,
        method: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut all = vec![("Host", self.host())];
        all.extend(
            headers
                .iter()
                .map(|(name, value)| (*name, value.to_string())),
        );
        raw_request(self.address, method, &all, body.as_bytes()).await
    }

    pub(super) async fn post(&self, headers: &[(&str, &str)], body: &Value) -> Reply {
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        self.request("POST", &all, &body.to_string()).await
    }

    async fn initialize(&self) -> String {
        self.initialize_as("2025-11-25").await
    }

    /// A legacy session that negotiated `version`.
    pub(super) async fn initialize_as(&self, version: &str) -> String {
        let reply = self
            .post(&[], &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}
            }}))
            .await;
        assert_eq!(reply.status, 200);
        let session = reply
            .header("mcp-session-id")
            .expect("a session id")
            .to_owned();
        assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        session
    }
}

async fn raw_request(
    address: SocketAddr,
    method: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut head = format!("{method} /mcp HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading everything; a failed write is fine then.
    let _ = stream.write_all(body).await;
    Reply::read(stream).await
}

/// A response whose body is read as it arrives (chunked or sized).
pub(super) struct Reply {
    pub(super) status: u16,
    headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    remaining: Option<usize>,
    buffer: Vec<u8>,
    ended: bool,
}

#[derive(Debug, Default)]
struct Event {
    id: Option<String>,
    data: Option<String>,
    retry: Option<u64>,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(self.data.as_deref().unwrap_or_default()).unwrap()
    }
}

impl Reply {
    async fn read(stream: TcpStream) -> Reply {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        tokio::time::timeout(WAIT, reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line).await.unwrap();
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let (name, value) = trimmed.split_once(':').unwrap();
            headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let chunked = find("transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let remaining = find("content-length").and_then(|v| v.parse().ok());
        Reply {
            status,
            headers,
            reader,
            chunked,
            remaining,
            buffer: Vec::new(),
            ended: false,
        }
    }

    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads the next piece of body into the buffer; false at the end.
    async fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        if self.chunked {
            let mut size_line = String::new();
            tokio::time::timeout(WAIT, self.reader.read_line(&mut size_line))
                .await
                .unwrap()
                .unwrap();
            let size = usize::from_str_radix(size_line.trim(), 16).unwrap_or(0);
            if size == 0 {
                self.ended = true;
                return false;
            }
            let mut chunk = vec![0; size + 2];
            tokio::time::timeout(WAIT, self.reader.read_exact(&mut chunk))
                .await
                .unwrap()
                .unwrap();
            self.buffer.extend_from_slice(&chunk[..size]);
            return true;
        }
        let mut piece = vec![0; 8192];
        let limit = self.remaining.unwrap_or(piece.len()).min(piece.len());
        if limit == 0 {
            self.ended = true;
            return false;
        }
        let read = tokio::time::timeout(WAIT, self.reader.read(&mut piece[..limit]))
            .await
            .unwrap()
            .unwrap();
        if read == 0 {
            self.ended = true;
            return false;
        }
        if let Some(remaining) = &mut self.remaining {
            *remaining -= read;
        }
        self.buffer.extend_from_slice(&piece[..read]);
        true
    }

    pub(super) async fn text(mut self) -> String {
        while self.fill().await {}
        String::from_utf8(self.buffer).unwrap()
    }

    async fn json(self) -> Value {
        let text = self.text().await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// The next SSE frame exactly as sent, without its closing blank line (comments too);
    /// `None` at the end of the body.
    pub(super) async fn frame(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                return Some(String::from_utf8(block[..end].to_vec()).unwrap());
            }
            if !self.fill().await {
                assert!(
                    self.buffer.is_empty(),
                    "a partial frame at the end: {:?}",
                    self.buffer
                );
                return None;
            }
        }
    }

    /// The next SSE event that has an id, data or retry (comments are skipped); `None` at end.
    async fn event(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let mut event = Event::default();
                for line in String::from_utf8(block).unwrap().lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        event.id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        event.data = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("retry:") {
                        event.retry = value.trim().parse().ok();
                    }
                }
                if event.id.is_some() || event.data.is_some() || event.retry.is_some() {
                    return Some(event);
                }
                continue;
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// Data events until the response (a message with `result` or `error`).
    async fn until_response(&mut self) -> (Value, Vec<Value>) {
        let mut notes = Vec::new();
        loop {
            let event = self
                .event()
                .await
                .expect("the stream ended before the response");
            if event.data.as_deref().is_none_or(str::is_empty) {
                continue;
            }
            let message = event.json();
            if message.get("result").is_some() || message.get("error").is_some() {
                return (message, notes);
            }
            notes.push(message);
        }
    }
}

fn legacy_headers(session: &str) -> Vec<(&str, &str)> {
    vec![
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]
}

#[tokio::test]
async fn legacy_session_lifecycle() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = legacy_headers(&session);
    let reply = server
        .post(
            &headers,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert_eq!(reply.status, 202);
    assert_eq!(reply.text().await, "");

    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let reply = server.post(&headers, &list).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json().await["result"]["tools"][0]["name"], "echo");

    let reply = server.post(&[], &list).await;
    assert_eq!(reply.status, 400, "no session id");
    let reply = server
        .post(
            &[
                ("Mcp-Session-Id", &session),
                ("MCP-Protocol-Version", "1900-01-01"),
            ],
            &list,
        )
        .await;
    assert_eq!(reply.status, 400, "bad protocol version");
    let reply = server.post(&[("Mcp-Session-Id", "unknown")], &list).await;
    assert_eq!(reply.status, 404);

    assert_eq!(server.server.session_count(), 1);
    let reply = server.request("DELETE", &headers, "").await;
    assert_eq!(reply.status, 200);
    let reply = server.post(&headers, &list).await;
    assert_eq!(reply.status, 404);
    assert_eq!(server.server.session_count(), 0);

    // A response from the client and a notification are accepted with 202.
    let session = server.initialize().await;
    let reply = server
        .post(
            &legacy_headers(&session),
            &json!({"jsonrpc": "2.0", "id": 9, "result": {}}),
        )
        .await;
    assert_eq!(reply.status, 202);
    assert!(server.server.evict_session(&session).await);
    server.stop().await;
}

#[tokio::test]
async fn host_and_origin_are_validated() {
    let options = HttpOptions {
        allowed_origins: vec!["https://app.example".into()],
        ..HttpOptions::default()
    };
    let server = TestServer::start(options).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}});
    let body = ping.to_string();
    let modern = [
        ("Content-Type", "application/json".to_owned()),
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
        ("Mcp-Method", "server/discover".to_owned()),
    ];
    let with = |extra: Vec<(&'static str, String)>| {
        let mut headers: Vec<(&str, String)> = modern.to_vec();
        headers.extend(extra);
        headers
    };
    let port = server.address.port();
    let cases = [
        (vec![("Host", "evil.example.com".to_owned())], 403),
        (vec![("Host", format!("localhost:{}", port + 1))], 403),
        (vec![("Host", format!("localhost:{port}"))], 200),
        (vec![("Host", format!("[::1]:{port}"))], 200),
        (
            vec![
                ("Host", server.host()),
                ("Origin", "http://evil.example.com".to_owned()),
            ],
            403,
        ),
        (
            vec![
                ("Host", server.host()),
                ("Origin", "http://localhost:5173".to_owned()),
            ],
            200,
        ),
        (
            vec![
                ("Host", server.host()),
                ("Origin", "https://app.example".to_owned()),
            ],
            200,
        ),
        (
            vec![("Host", server.host()), ("Origin", "null".to_owned())],
            403,
        ),
    ];
    for (extra, expected) in cases {
        let headers = with(extra.clone());
        let reply = raw_request(server.address, "POST", &headers, body.as_bytes()).await;
        assert_eq!(reply.status, expected, "{extra:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn bodies_over_the_cap_are_refused_and_a_body_at_the_cap_is_read() {
    let server = TestServer::start(HttpOptions::default()).await;
    let cap = agentprism::transport::http::MAX_BODY_BYTES;
    // Exactly at the cap: read and answered (a tools/list padded with white space).
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": modern_meta()}})
    .to_string();
    let padded = format!("{list}{}", " ".repeat(cap - list.len()));
    assert_eq!(padded.len(), cap);
    let reply = server
        .request(
            "POST",
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("Mcp-Method", "tools/list"),
                ("MCP-Protocol-Version", "2026-07-28"),
            ],
            &padded,
        )
        .await;
    assert_eq!(
        reply.status, 200,
        "a body of exactly {cap} bytes is within the cap"
    );
    let too_big = (cap + 1).to_string();
    let reply = server
        .request(
            "POST",
            &[
                ("Content-Type", "application/json"),
                ("Content-Length", &too_big),
            ],
            "",
        )
        .await;
    assert_eq!(reply.status, 413);

    // Without a declared length the streamed size is what counts.
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        server.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..=cap / chunk.len() {
        if stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .is_err()
            || stream.write_all(&chunk).await.is_err()
            || stream.write_all(b"\r\n").await.is_err()
        {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let reply = Reply::read(stream).await;
    assert_eq!(reply.status, 413);
    server.stop().await;
}

#[tokio::test]
async fn sse_stream_primes_numbers_events_and_replays_after_last_event_id() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = legacy_headers(&session);
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "progress", "_meta": {"progressToken": 7}}});
    let mut reply = server.post(&headers, &call).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(reply.header("x-accel-buffering"), Some("no"));
    let priming = reply.event().await.unwrap();
    assert!(
        priming.id.is_some() && priming.data.as_deref() == Some("") && priming.retry.is_some(),
        "{priming:?}"
    );
    let progress = reply.event().await.unwrap();
    assert_eq!(progress.json()["params"]["progressToken"], 7);
    let log = reply.event().await.unwrap();
    assert_eq!(log.json()["method"], "notifications/message");
    let response = reply.event().await.unwrap();
    assert_eq!(response.json()["result"]["content"][0]["text"], "done");
    let ids = [&priming.id, &progress.id, &log.id, &response.id];
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 4, "event ids are unique: {ids:?}");
    assert!(
        reply.event().await.is_none(),
        "the stream ends after the response"
    );

    // Resuming after the progress event replays exactly the later events of that stream.
    let resume_from = progress.id.clone().unwrap();
    let mut get_headers = headers.clone();
    get_headers.push(("Accept", "text/event-stream"));
    get_headers.push(("Last-Event-ID", &resume_from));
    let mut replay = server.request("GET", &get_headers, "").await;
    assert_eq!(replay.status, 200);
    let (replayed_response, replayed_notes) = replay.until_response().await;
    assert_eq!(replayed_notes.len(), 1);
    assert_eq!(replayed_notes[0]["method"], "notifications/message");
    assert_eq!(replayed_response["id"], 5);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_streams_and_cancellation_by_notification() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = legacy_headers(&session);
    let call = |id: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "wait_for_cancel"}});
    let mut first = server.post(&headers, &call("a")).await;
    let mut second = server.post(&headers, &call("b")).await;
    for stream in [&mut first, &mut second] {
        assert_eq!(stream.header("content-type"), Some("text/event-stream"));
        let _priming = stream.event().await.unwrap();
        assert_eq!(
            stream.event().await.unwrap().json()["params"]["progressToken"],
            "started"
        );
    }
    for id in ["b", "a"] {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
        assert_eq!(server.post(&headers, &cancel).await.status, 202);
    }
    // A cancelled request gets no response: each stream ends without one.
    for stream in [&mut first, &mut second] {
        while let Some(event) = stream.event().await {
            if let Some(data) = event.data.as_deref().filter(|d| !d.is_empty()) {
                let message: Value = serde_json::from_str(data).unwrap();
                assert!(
                    message.get("result").is_none() && message.get("error").is_none(),
                    "a cancelled request was answered: {message}"
                );
            }
        }
    }
    server.stop().await;
}

/// A legacy request cancelled by `notifications/cancelled` before it sent anything gets no
/// response, yet its POST is still answered the way a request's must be (an SSE stream, not
/// the 202 that only notifications and responses get): the stream ends at once, empty.
#[tokio::test]
async fn a_legacy_request_cancelled_before_it_sent_anything_gets_an_empty_stream() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let headers = [
        ("Mcp-Session-Id", session.clone()),
        ("MCP-Protocol-Version", "2025-11-25".to_owned()),
    ];
    let hold = Hold::named("legacy-cancelled");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "hold", "arguments": {"key": "legacy-cancelled"}}});
    let (address, host) = (server.address, server.host());
    let answer = tokio::spawn(async move {
        let mut all = vec![
            ("Host", host),
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
        ];
        all.extend(headers);
        raw_request(address, "POST", &all, call.to_string().as_bytes()).await
    });
    tokio::time::timeout(WAIT, hold.started.acquire())
        .await
        .expect("the handler never started")
        .unwrap()
        .forget();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "the user stopped it"}});
    let notified = server.post(&legacy_headers(&session), &cancel).await;
    assert_eq!(notified.status, 202);
    // The handler ignores cancellation; once it ends, its answer is dropped.
    hold.release.add_permits(1);
    let reply = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(reply.text().await, "", "a cancelled request was answered");
    server.stop().await;
}

/// A legacy request whose answer is plain JSON keeps running when its client disconnects
/// mid-request, and finishes: its handler leaves the closed connection for the server's
/// tracker instead of being dropped with it.
#[tokio::test]
async fn a_legacy_request_runs_to_its_end_after_its_client_disconnects() {
    let server = TestServer::start(HttpOptions::default()).await;
    let session = server.initialize().await;
    let hold = Hold::named("legacy-disconnect");
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "hold", "arguments": {"key": "legacy-disconnect"}}})
    .to_string();
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
        server.host(),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = tokio::time::timeout(WAIT, hold.started.acquire()).await;
    started
        .expect("the handler never started")
        .unwrap()
        .forget();
    drop(stream);
    // Wait until the server has let go of the request's connection, so the handler is past
    // the point where it would have been dropped with it.
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.server.session_activity()[0].1.open_connections > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never noticed the disconnect"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.server.session_activity()[0].1.inflight_requests, 1);
    hold.release.add_permits(1);
    let finished = tokio::time::timeout(WAIT, hold.finished.acquire()).await;
    finished
        .expect("the handler was dropped with its connection")
        .unwrap()
        .forget();
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.server.inflight_count() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request stayed in flight"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
}
