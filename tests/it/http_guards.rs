//! The folder server's HTTP guards over a real loopback socket: the bearer token
//! (`Access::Bearer`) on every MCP request while the intercept hook stays public, the
//! principal header and its limits, per-method paths, the 1 MiB body cap at its edge, the
//! Origin rule, the Host check switched off for non-loopback binds, and both protocol eras on
//! one keep-alive connection with every guard on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentprism::mcp::handler::codes;
use agentprism::mcp::{
    McpError, McpHandler, McpResult, McpServer, NotificationHub, RequestContext, ServerInfo,
    ServerOptions, Tool, ToolAnswer, ToolHandler, ToolRegistry,
};
use agentprism::transport::http::{HttpBody, Intercept, MAX_PRINCIPAL_BYTES};
use agentprism::transport::peer::Access;
use agentprism::transport::{HttpOptions, serve};
use async_trait::async_trait;
use hyper::Response;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::mcp_core::modern_meta;

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "s3cret-guard-token";
const ONE_MIB: usize = 1_048_576;

/// Tool `whoami` answers the request's principal; `progress` sends a notification first
/// (so its answer is an SSE stream); custom method `run/status` echoes its params.
struct GuardHandler(NotificationHub, ToolRegistry);

impl GuardHandler {
    fn new() -> GuardHandler {
        let mut tools = ToolRegistry::new();
        for name in ["whoami", "progress"] {
            let definition = json!({"name": name, "inputSchema": {"type": "object"}});
            tools
                .register(Tool::new(definition, Arc::new(GuardTools)))
                .expect("a valid tool");
        }
        GuardHandler(NotificationHub::new(), tools)
    }
}

/// Answers the tools of [`GuardHandler`].
struct GuardTools;

#[async_trait]
impl ToolHandler for GuardTools {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        _arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        let answer = match name {
            "whoami" => Ok(json!({"content": [], "structuredContent": {
                "principal": ctx.principal, "session": ctx.session_id}})),
            "progress" => {
                ctx.progress(1.0, Some(2.0), None);
                Ok(json!({"content": [{"type": "text", "text": "done"}]}))
            }
            _ => Err(McpError::invalid_params(format!("unknown tool {name}"))),
        };
        answer.map(ToolAnswer::Value)
    }
}

#[async_trait]
impl McpHandler for GuardHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "guards".into(),
            version: "1.0.0".into(),
            title: None,
        }
    }

    fn capabilities(&self) -> Value {
        json!({"tools": {}})
    }

    fn hub(&self) -> &NotificationHub {
        &self.0
    }

    fn tools(&self) -> &ToolRegistry {
        &self.1
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        Err(McpError::invalid_params(uri.to_owned()))
    }

    async fn custom(
        &self,
        ctx: &RequestContext,
        method: &str,
        params: Value,
    ) -> Option<McpResult<Value>> {
        (method == "run/status").then(|| Ok(json!({"echo": params, "principal": ctx.principal})))
    }
}

/// A public route, as the Agent Card and `/healthz` will be.
fn public_routes() -> Intercept {
    Arc::new(|parts| {
        (parts.uri.path() == "/healthz").then(|| {
            let mut response = Response::new(HttpBody::full(r#"{"ok":true}"#));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                "application/json".parse().unwrap(),
            );
            response
        })
    })
}

/// The options the folder server uses with `--token` and `--principal-header X-User`.
fn folder_options() -> HttpOptions {
    HttpOptions {
        access: Access::Bearer {
            token: Arc::from(TOKEN),
        },
        principal_header: Some("X-User".into()),
        method_paths: true,
        max_body_bytes: ONE_MIB,
        intercept: Some(public_routes()),
        ..HttpOptions::default()
    }
}

struct Served {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Served {
    async fn start(options: HttpOptions) -> Served {
        let handler = Arc::new(GuardHandler::new());
        let server = Arc::new(McpServer::new(handler, ServerOptions::default()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, server, options, async {
            let _ = stopped.await;
        }));
        Served {
            address,
            stop: Some(stop),
            task,
        }
    }

    async fn client(&self) -> Client {
        Client {
            reader: BufReader::new(TcpStream::connect(self.address).await.unwrap()),
            host: self.address.to_string(),
        }
    }

    /// One request on a fresh connection.
    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.client().await.send(method, path, headers, body).await
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// A keep-alive HTTP/1.1 connection that reads sized and chunked answers whole.
struct Client {
    reader: BufReader<TcpStream>,
    host: String,
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// The JSON-RPC response: the body, or the last data event of an SSE stream.
    fn response(&self) -> Value {
        if self.header("content-type") != Some("text/event-stream") {
            return self.json();
        }
        let data = self
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|data| !data.is_empty())
            .unwrap_or_else(|| panic!("no data event in {self:?}"));
        serde_json::from_str(data).unwrap()
    }
}

impl Client {
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let stream = self.reader.get_mut();
        stream.write_all(head.as_bytes()).await.unwrap();
        // The server may answer (413) before reading the body; a failed write is fine then.
        let _ = stream.write_all(body.as_bytes()).await;
        tokio::time::timeout(WAIT, self.read_reply()).await.unwrap()
    }

    async fn read_reply(&mut self) -> Reply {
        let mut line = String::new();
        self.reader.read_line(&mut line).await.unwrap();
        let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).await.unwrap();
            let Some((name, value)) = line.trim_end().split_once(':') else {
                break;
            };
            headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let mut body = Vec::new();
        if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                line.clear();
                self.reader.read_line(&mut line).await.unwrap();
                let size = usize::from_str_radix(line.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).await.unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            let length: usize = find("content-length").map_or(0, |v| v.parse().unwrap());
            body.resize(length, 0);
            self.reader.read_exact(&mut body).await.unwrap();
        }
        Reply {
            status,
            headers,
            body: String::from_utf8(body).unwrap(),
        }
    }
}

const BEARER: &str = "Bearer s3cret-guard-token";

fn json_headers<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    headers
}

fn modern(id: u64, method: &str, mut params: Value) -> String {
    params["_meta"] = modern_meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    headers.extend(name.map(|name| ("Mcp-Name", name)));
    headers
}

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}}})
    .to_string()
}

/// A 401 that says what is missing and never shows what was sent.
fn assert_unauthorized(reply: &Reply, mentions: &str, context: &str) {
    assert_eq!(reply.status, 401, "{context}: {reply:?}");
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer"),
        "{context}"
    );
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{context}: no message in {reply:?}"))
        .to_owned();
    assert!(message.contains(mentions), "{context}: {message}");
    assert!(
        !reply.body.contains(TOKEN),
        "{context}: the token is echoed"
    );
    assert!(
        !reply.body.contains("s3cret"),
        "{context}: part of a token is echoed"
    );
}

#[tokio::test]
async fn the_bearer_token_guards_every_mcp_request_and_the_intercept_stays_public() {
    let options = HttpOptions {
        principal_header: None,
        ..folder_options()
    };
    let served = Served::start(options).await;
    let list = modern(1, "tools/list", json!({}));
    let listing = modern_headers("tools/list", None);
    let wrong = [
        None,
        Some("Bearer s3cret-guard-tokeN"),
        Some("Bearer s3cret-guard-toke"),
        Some("Bearer s3cret-guard-token2"),
        Some("bearer s3cret-guard-token"),
        Some("Basic czNjcmV0LWd1YXJkLXRva2Vu"),
        Some("s3cret-guard-token"),
        Some("Bearer"),
    ];
    for (method, path) in [
        ("POST", "/mcp"),
        ("POST", "/mcp/tools/list"),
        ("GET", "/mcp"),
        ("DELETE", "/mcp"),
        ("POST", "/elsewhere"),
    ] {
        for authorization in wrong {
            let mut headers = json_headers(&listing);
            headers.extend(authorization.map(|value| ("Authorization", value)));
            let reply = served.send(method, path, &headers, &list).await;
            let context = format!("{method} {path} with {authorization:?}");
            assert_unauthorized(&reply, "Authorization: Bearer <token>", &context);
        }
    }
    // The right token: the same requests get their MCP answers.
    let mut headers = json_headers(&listing);
    headers.push(("Authorization", BEARER));
    for path in ["/mcp", "/mcp/tools/list"] {
        let reply = served.send("POST", path, &headers, &list).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
        assert_eq!(reply.json()["result"]["tools"][0]["name"], "whoami");
    }
    let with_token = [("Authorization", BEARER), ("Accept", "text/event-stream")];
    let reply = served.send("GET", "/mcp", &with_token, "").await;
    assert_eq!(reply.status, 400, "past the guard: GET needs a session");
    let reply = served.send("DELETE", "/mcp", &with_token, "").await;
    assert_eq!(reply.status, 400, "past the guard: DELETE needs a session");
    let reply = served.send("POST", "/elsewhere", &headers, &list).await;
    assert_eq!(reply.status, 404, "past the guard, unknown paths are 404");
    // The intercept's route needs no token.
    let reply = served.send("GET", "/healthz", &[], "").await;
    assert_eq!((reply.status, reply.json()), (200, json!({"ok": true})));
    served.stop().await;
}

#[tokio::test]
async fn the_principal_header_names_the_caller_within_its_limits() {
    let served = Served::start(folder_options()).await;
    let call = modern(7, "tools/call", json!({"name": "whoami", "arguments": {}}));
    let calling = modern_headers("tools/call", Some("whoami"));
    let ask = |principal: Option<&'static str>| {
        let mut headers = json_headers(&calling);
        headers.push(("Authorization", BEARER));
        headers.extend(principal.map(|value| ("X-User", value)));
        headers
    };
    let longest: &'static str = "p".repeat(MAX_PRINCIPAL_BYTES).leak();
    let over: &'static str = "p".repeat(MAX_PRINCIPAL_BYTES + 1).leak();
    for principal in ["alice@example.com", longest] {
        let reply = served
            .send("POST", "/mcp", &ask(Some(principal)), &call)
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(
            reply.json()["result"]["structuredContent"]["principal"],
            principal
        );
    }
    // The header name matches whatever its case.
    let mut headers = json_headers(&calling);
    headers.extend([("Authorization", BEARER), ("x-USER", "bob")]);
    let reply = served.send("POST", "/mcp", &headers, &call).await;
    assert_eq!(
        reply.json()["result"]["structuredContent"]["principal"],
        "bob"
    );
    for (principal, mentions) in [
        (None, "needs the X-User header"),
        (Some(""), "X-User header is empty"),
        (Some(over), "X-User header is over 256 bytes"),
        (Some("jane doe"), "X-User header must be visible ASCII"),
    ] {
        let reply = served.send("POST", "/mcp", &ask(principal), &call).await;
        assert_unauthorized(&reply, mentions, &format!("{principal:?}"));
    }
    let mut twice = ask(Some("alice"));
    twice.push(("X-User", "mallory"));
    let reply = served.send("POST", "/mcp", &twice, &call).await;
    assert_unauthorized(&reply, "X-User header is sent more than once", "twice");
    // Non-ASCII bytes straight on the wire (obs-text) are refused too.
    let mut stream = TcpStream::connect(served.address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: {BEARER}\r\nX-User: caf\u{e9}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{call}",
        served.address,
        call.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer.contains("X-User header must be visible ASCII"),
        "{answer}"
    );
    // A legacy session's requests carry the principal each time, on GET as well.
    let session_reply = served
        .send("POST", "/mcp", &ask(Some("alice")), &initialize())
        .await;
    let session = session_reply.header("mcp-session-id").unwrap().to_owned();
    let legacy_call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}}})
    .to_string();
    let mut headers = json_headers(&[("Authorization", BEARER), ("X-User", "carol")]);
    headers.push(("Mcp-Session-Id", &session));
    let reply = served.send("POST", "/mcp", &headers, &legacy_call).await;
    let answer = &reply.json()["result"]["structuredContent"];
    assert_eq!(
        (&answer["principal"], &answer["session"]),
        (&json!("carol"), &json!(session))
    );
    let stream_headers = [
        ("Authorization", BEARER),
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", session.as_str()),
    ];
    let reply = served.send("GET", "/mcp", &stream_headers, "").await;
    assert_unauthorized(&reply, "needs the X-User header", "GET without principal");
    served.stop().await;
}

#[tokio::test]
async fn without_the_option_the_principal_is_none_and_a_principal_needs_a_token() {
    let options = HttpOptions {
        principal_header: None,
        ..folder_options()
    };
    let served = Served::start(options).await;
    let call = modern(1, "tools/call", json!({"name": "whoami", "arguments": {}}));
    let mut headers = json_headers(&modern_headers("tools/call", Some("whoami")));
    headers.extend([("Authorization", BEARER), ("X-User", "alice")]);
    let reply = served.send("POST", "/mcp", &headers, &call).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.json()["result"]["structuredContent"]["principal"],
        Value::Null,
        "a header nobody configured is no identity"
    );
    served.stop().await;

    for access in [Access::Open, Access::owner(Some(TOKEN.into()))] {
        let options = HttpOptions {
            access,
            ..folder_options()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let handler = Arc::new(GuardHandler::new());
        let server = Arc::new(McpServer::new(handler, ServerOptions::default()));
        let refused = serve(listener, server, options, std::future::pending())
            .await
            .expect_err("a principal header without a bearer token is refused");
        assert!(
            refused
                .to_string()
                .contains("principal_header X-User needs a bearer-token"),
            "{refused}"
        );
    }
}

#[tokio::test]
async fn per_method_paths_take_one_message_of_their_method() {
    let served = Served::start(folder_options()).await;
    let guard = [("Authorization", BEARER), ("X-User", "alice")];
    let status = modern(3, "run/status", json!({"runId": "r1"}));
    let mut headers = json_headers(&guard);
    headers.extend(modern_headers("run/status", None));
    let reply = served
        .send("POST", "/mcp/run/status", &headers, &status)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let result = &reply.json()["result"];
    assert_eq!(
        (&result["echo"]["runId"], &result["principal"]),
        (&json!("r1"), &json!("alice"))
    );

    // The body names another method: 400, -32600, both named, the request's id kept.
    let reply = served
        .send("POST", "/mcp/run/resume", &headers, &status)
        .await;
    assert_eq!(reply.status, 400);
    let answer = reply.json();
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["error"]["code"], codes::INVALID_REQUEST);
    assert_eq!(
        answer["error"]["message"],
        "the path names method run/resume but the body names method run/status; POST it to \
         the path of its own method"
    );
    let response = json!({"jsonrpc": "2.0", "id": 9, "result": {}}).to_string();
    let reply = served
        .send("POST", "/mcp/run/status", &headers, &response)
        .await;
    assert_eq!(reply.status, 400);
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("body names no method"), "{message}");
    let long = format!("x{}", "y".repeat(500));
    let reply = served
        .send("POST", &format!("/mcp/{long}"), &headers, &status)
        .await;
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.len() < 400 && message.contains('…'), "{message}");
    // Not decoded: the path is the method verbatim.
    let reply = served
        .send("POST", "/mcp/run%2Fstatus", &headers, &status)
        .await;
    assert_eq!(reply.status, 400);

    // Legacy sessions work there as on the endpoint: initialize, a notification, a call
    // whose notifications turn the answer into an SSE stream.
    let reply = served
        .send(
            "POST",
            "/mcp/initialize",
            &json_headers(&guard),
            &initialize(),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let session = reply.header("mcp-session-id").unwrap().to_owned();
    let mut in_session = json_headers(&guard);
    in_session.extend([
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let reply = served
        .send(
            "POST",
            "/mcp/notifications/initialized",
            &in_session,
            &initialized,
        )
        .await;
    assert_eq!(reply.status, 202);
    let progress = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "progress", "arguments": {}, "_meta": {"progressToken": "p"}}})
    .to_string();
    let reply = served
        .send("POST", "/mcp/tools/call", &in_session, &progress)
        .await;
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert!(reply.body.contains("notifications/progress"), "{reply:?}");
    assert_eq!(reply.response()["result"]["content"][0]["text"], "done");

    // Only POST; an empty method is no path; the endpoint itself is unchanged.
    let reply = served.send("GET", "/mcp/tools/call", &in_session, "").await;
    assert_eq!((reply.status, reply.header("allow")), (405, Some("POST")));
    let reply = served.send("POST", "/mcp/", &in_session, &progress).await;
    assert_eq!(reply.status, 404);
    let reply = served.send("POST", "/mcp", &in_session, &progress).await;
    assert_eq!(reply.status, 200);
    served.stop().await;

    // Off (the daemon's default): a per-method path is 404.
    let served = Served::start(HttpOptions {
        method_paths: false,
        ..folder_options()
    })
    .await;
    let reply = served
        .send("POST", "/mcp/run/status", &headers, &status)
        .await;
    assert_eq!(reply.status, 404);
    served.stop().await;
}

#[tokio::test]
async fn the_one_mebibyte_cap_takes_its_edge_and_refuses_one_byte_more() {
    let served = Served::start(folder_options()).await;
    let list = modern(1, "tools/list", json!({}));
    let mut headers = json_headers(&[("Authorization", BEARER), ("X-User", "alice")]);
    headers.extend(modern_headers("tools/list", None));
    let at_cap = format!("{list}{}", " ".repeat(ONE_MIB - list.len()));
    assert_eq!(at_cap.len(), 1_048_576);
    let reply = served.send("POST", "/mcp", &headers, &at_cap).await;
    assert_eq!(reply.status, 200, "exactly 1 MiB is within the cap");
    assert_eq!(reply.json()["result"]["tools"][0]["name"], "whoami");
    let over = format!("{at_cap} ");
    let reply = served.send("POST", "/mcp", &headers, &over).await;
    assert_eq!(reply.status, 413);
    assert_eq!(
        reply.json()["error"]["message"],
        "the request body is over the limit of 1048576 bytes"
    );

    // Streamed without a declared length, the byte past the cap is what counts.
    for (size, expected) in [(ONE_MIB, "HTTP/1.1 200"), (ONE_MIB + 1, "HTTP/1.1 413")] {
        let body = format!("{list}{}", " ".repeat(size - list.len()));
        let mut stream = TcpStream::connect(served.address).await.unwrap();
        let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", served.address);
        for (name, value) in &headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        for chunk in body.as_bytes().chunks(64 * 1024) {
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
            if stream.write_all(&framed).await.is_err() {
                break;
            }
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with(expected),
            "{size} bytes streamed: {answer}"
        );
    }
    served.stop().await;
}

#[tokio::test]
async fn cross_origin_requests_are_refused_and_the_host_check_follows_the_bind() {
    let served = Served::start(folder_options()).await;
    let list = modern(1, "tools/list", json!({}));
    let mut base = json_headers(&[("Authorization", BEARER), ("X-User", "alice")]);
    base.extend(modern_headers("tools/list", None));
    let port = served.address.port();
    let local_origin = format!("http://localhost:{port}");
    for (origin, expected) in [
        ("https://evil.example", 403),
        ("http://10.0.0.1:8080", 403),
        ("null", 403),
        ("http://127.0.0.1:5173", 200),
        (local_origin.as_str(), 200),
        ("http://[::1]", 200),
        ("https://localhost:5173", 200),
        ("https://127.0.0.2", 200),
        ("https://128.0.0.1", 403),
    ] {
        let mut headers = base.clone();
        headers.push(("Origin", origin));
        let reply = served.send("POST", "/mcp", &headers, &list).await;
        assert_eq!(reply.status, expected, "Origin {origin}: {reply:?}");
        if expected == 403 {
            assert_eq!(reply.json()["error"]["message"], "Origin is not allowed");
        }
    }
    // The Host check is on by default (a loopback listener) ...
    let mut client = served.client().await;
    client.host = "serve.example.com".into();
    assert_eq!(client.send("POST", "/mcp", &base, &list).await.status, 403);
    served.stop().await;
    // ... and off for a listener behind a gateway, where Origin is still checked.
    let served = Served::start(HttpOptions {
        check_host: false,
        ..folder_options()
    })
    .await;
    let mut client = served.client().await;
    client.host = "serve.example.com".into();
    assert_eq!(client.send("POST", "/mcp", &base, &list).await.status, 200);
    let mut headers = base.clone();
    headers.push(("Origin", "https://serve.example.com"));
    assert_eq!(
        client.send("POST", "/mcp", &headers, &list).await.status,
        403
    );
    served.stop().await;
}

#[tokio::test]
async fn both_eras_work_on_one_connection_with_every_guard_on() {
    let served = Served::start(folder_options()).await;
    let guard = [("Authorization", BEARER), ("X-User", "alice")];
    let mut client = served.client().await;
    // Legacy: initialize, then a call in the session.
    let reply = client
        .send("POST", "/mcp", &json_headers(&guard), &initialize())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let session = reply.header("mcp-session-id").unwrap().to_owned();
    let mut in_session = json_headers(&guard);
    in_session.extend([
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]);
    let legacy_list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let reply = client.send("POST", "/mcp", &in_session, &legacy_list).await;
    assert_eq!(reply.json()["result"]["tools"][0]["name"], "whoami");
    // Stateless on the same connection, at the endpoint and at a per-method path.
    let mut stateless = json_headers(&guard);
    stateless.extend(modern_headers("tools/list", None));
    let list = modern(2, "tools/list", json!({}));
    for path in ["/mcp", "/mcp/tools/list"] {
        let reply = client.send("POST", path, &stateless, &list).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
        let result = &reply.json()["result"];
        assert_eq!(result["tools"][1]["name"], "progress");
        assert_eq!(result["resultType"], "complete", "{result}");
    }
    // A stateless request missing its `_meta` (no session either) is -32602.
    let bare = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string();
    for path in ["/mcp", "/mcp/tools/list"] {
        let reply = client
            .send("POST", path, &json_headers(&guard), &bare)
            .await;
        assert_eq!(reply.status, 400, "{path}");
        assert_eq!(reply.json()["error"]["code"], codes::INVALID_PARAMS);
    }
    // And the session is still there afterwards.
    let reply = client.send("POST", "/mcp", &in_session, &legacy_list).await;
    assert_eq!(reply.status, 200);
    let reply = client.send("DELETE", "/mcp", &in_session, "").await;
    assert_eq!(reply.status, 200);
    served.stop().await;
}
