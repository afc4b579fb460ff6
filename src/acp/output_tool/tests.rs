//! The output tool's server over real loopback HTTP: what the agent is offered, what it is
//! told when its answer is wrong, and what is refused.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{MAX_BODY, OutputTools, TOOL_NAME};

fn verdict_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"verdict": {"enum": ["pass", "fail"]}, "score": {"type": "integer"}},
        "required": ["verdict", "score"],
        "additionalProperties": false,
    })
}

/// Sends one HTTP/1.1 request and returns the status and body of the answer.
async fn send(url: &str, method: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut stream = TcpStream::connect(authority).await.expect("connect");
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    let declares_length = headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-length"));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !declares_length {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    // The server may answer (and close) before taking a refused body whole.
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

async fn rpc(url: &str, message: Value) -> (u16, Value) {
    let headers = [
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
    ];
    let (status, body) = send(url, "POST", &headers, message.to_string().as_bytes()).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn call(arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": TOOL_NAME, "arguments": arguments}})
}

#[tokio::test]
async fn the_tool_offers_the_calls_schema_as_its_input() {
    let tools = OutputTools::default();
    let registration = tools.register(&verdict_schema()).expect("register");
    let (status, init) = rpc(
        registration.url(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let (status, _) = rpc(
        registration.url(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    let (_, list) = rpc(
        registration.url(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let tools = list["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], TOOL_NAME);
    assert_eq!(tools[0]["inputSchema"], verdict_schema());
}

#[tokio::test]
async fn a_wrong_answer_gets_its_errors_and_a_corrected_one_is_kept() {
    let tools = OutputTools::default();
    let registration = tools.register(&verdict_schema()).expect("register");
    let (status, wrong) = rpc(
        registration.url(),
        call(json!({"verdict": "maybe", "score": 3})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(wrong["result"]["isError"], true, "{wrong}");
    let text = wrong["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.contains("/verdict"), "names the bad field: {text}");
    assert_eq!(registration.take(), None, "a rejected answer is not kept");
    let (_, right) = rpc(
        registration.url(),
        call(json!({"verdict": "pass", "score": 3})),
    )
    .await;
    assert!(right["result"]["isError"].is_null(), "{right}");
    assert_eq!(
        registration.take(),
        Some(json!({"verdict": "pass", "score": 3}))
    );
    assert_eq!(registration.take(), None, "taken once");
}

#[tokio::test]
async fn a_non_object_schema_travels_under_value() {
    let tools = OutputTools::default();
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let registration = tools.register(&schema).expect("register");
    let (_, list) = rpc(
        registration.url(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let input = &list["result"]["tools"][0]["inputSchema"];
    assert_eq!(input["type"], "object");
    assert_eq!(input["properties"]["value"], schema);
    let (_, bare) = rpc(registration.url(), call(json!({"items": ["a"]}))).await;
    assert_eq!(bare["result"]["isError"], true, "{bare}");
    rpc(registration.url(), call(json!({"value": ["a", "b"]}))).await;
    assert_eq!(registration.take(), Some(json!(["a", "b"])));
}

#[tokio::test]
async fn another_calls_path_or_a_retired_one_is_not_found() {
    let tools = OutputTools::default();
    let first = tools.register(&verdict_schema()).expect("register");
    let second = tools.register(&verdict_schema()).expect("register");
    assert_ne!(first.url(), second.url());
    let (authority_path, _) = first.url().rsplit_once('/').expect("a token");
    let guessed = format!("{authority_path}/{}", "0".repeat(32));
    let (status, _) = rpc(&guessed, call(json!({"verdict": "pass", "score": 1}))).await;
    assert_eq!(status, 404);
    rpc(second.url(), call(json!({"verdict": "fail", "score": 2}))).await;
    assert_eq!(
        first.take(),
        None,
        "one call's answer never reaches another"
    );
    let retired = second.url().to_owned();
    drop(second);
    let (status, _) = rpc(&retired, call(json!({"verdict": "pass", "score": 1}))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn browsers_other_methods_and_oversized_bodies_are_refused() {
    let tools = OutputTools::default();
    let registration = tools.register(&verdict_schema()).expect("register");
    let url = registration.url();
    let message = call(json!({"verdict": "pass", "score": 1})).to_string();
    let origin = [("Origin", "http://example.invalid".to_owned())];
    let (status, _) = send(url, "POST", &origin, message.as_bytes()).await;
    assert_eq!(status, 403);
    let (status, _) = send(url, "GET", &[], b"").await;
    assert_eq!(status, 405);
    let declared = [("Content-Length", (MAX_BODY + 1).to_string())];
    let (status, _) = send(url, "POST", &declared, b"{}").await;
    assert_eq!(status, 413);
    let chunk = vec![b' '; MAX_BODY + 1];
    let mut body = format!("{:x}\r\n", chunk.len()).into_bytes();
    body.extend_from_slice(&chunk);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let (status, _) = send_chunked(url, &body).await;
    assert_eq!(status, 413);
    assert_eq!(registration.take(), None);
}

/// A POST with a chunked body (no `Content-Length`), so only the read bound can refuse it.
async fn send_chunked(url: &str, body: &[u8]) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut stream = TcpStream::connect(authority).await.expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, text)
}

/// Another local user who knows a call's path still gets nothing: the connection is closed
/// before a byte is read, and the call's answer stays unset. Needs root to start a process
/// as `nobody` (CI runs as root).
#[tokio::test]
async fn another_local_user_is_refused_even_with_the_path() {
    use std::os::unix::process::CommandExt;
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test starts a process as another user and needs root (CI runs as root)"
    );
    let tools = OutputTools::default();
    let registration = tools.register(&verdict_schema()).expect("register");
    let message = call(json!({"verdict": "pass", "score": 1})).to_string();
    let program = r#"
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST",
    headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
try:
    print(urllib.request.urlopen(request, timeout=30).status)
except Exception as error:
    print("refused: %s" % type(error).__name__)
"#;
    let url = registration.url().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", program, &url, &message])
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run python3 as nobody")
    })
    .await
    .expect("join");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.starts_with("refused"),
        "{said}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(registration.take(), None);
    // The same request from this user is taken.
    let (status, _) = rpc(
        registration.url(),
        call(json!({"verdict": "pass", "score": 1})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        registration.take(),
        Some(json!({"verdict": "pass", "score": 1}))
    );
}
