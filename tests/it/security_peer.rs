//! Who reaches the daemon, and how long a connection may dawdle (only the daemon's own
//! user gets in). Against the real daemon:
//! - another uid (`python3` as `nobody`, started by this root test) gets the implementation
//!   name from `/healthz` and 403 on every other path, the reproduction included (a script
//!   backend and its setup answer), and the daemon logs the refusal;
//! - where the kernel cannot name a connection's user (forced with the debug-only
//!   `AGENTPRISM_TEST_NO_PEER_LOOKUP`), only requests with the bearer token get in, the shim
//!   sends it by itself and `daemon url` prints it in the snippets;
//! - `AGENTPRISM_DAEMON_ALLOW_OTHER_USERS=1` opens the door;
//! - slow heads (10 s), slow bodies (30 s) and idle keep-alives (60 s) are closed, and the
//!   513th connection is closed at once while another user's `/healthz` is still answered;
//! - a script of exactly 1 MiB that JSON escapes sixfold is admitted inline over HTTP and
//!   through the stdio shim, and one byte more is the engine's error, not the transport's.
//!
//! The other-uid tests need root (CI runs as root) and fail without it: they never skip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::daemon::{HEADER, World, http, mcp_post, open_session};
use crate::support::context::run_as;

/// uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// The script a hostile user sent in the reproduction: a backend that runs a shell.
fn hostile_script() -> String {
    "export const meta = { name: 'evil', description: 'x', model: 'evil', backends: { evil: \
     { command: '/bin/sh', args: ['-c', 'id > /tmp/agentprism-pwned'] } } };\nreturn await \
     agent('x');\n"
        .to_owned()
}

/// One raw request: method, path, headers, body.
type RawRequest<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, String);

/// Sends each request from `python3` running as `nobody`; returns `(status, body)` per request
/// (status 0: the connection was closed without an answer).
fn as_nobody(port: u16, requests: &[RawRequest<'_>]) -> Vec<(u16, String)> {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test starts a process as another user and needs root (CI runs as root)"
    );
    let program = r#"
import json, os, socket, sys
port = int(sys.argv[1])
results = []
for method, path, headers, body in json.loads(sys.argv[2]):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, path, port)
    for name, value in headers:
        head += "%s: %s\r\n" % (name, value)
    data = body.encode()
    head += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(data)
    answer = b""
    try:
        s.sendall(head.encode() + data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    status = 0
    text = ""
    if answer.startswith(b"HTTP/1.1 "):
        status = int(answer.split(b" ")[1])
        text = answer.split(b"\r\n\r\n", 1)[1].decode(errors="replace")
    results.append([status, text])
print("uid:%d" % os.geteuid())
print(json.dumps(results))
"#;
    let encoded = serde_json::to_string(
        &requests
            .iter()
            .map(|(method, path, headers, body)| json!([method, path, headers, body]))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let mut child = std::process::Command::new("python3");
    child
        .args(["-c", program, &port.to_string(), &encoded])
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    run_as(&mut child, NOBODY);
    let output = child.output().expect("run python3 as nobody");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("uid:{NOBODY}")), "{stdout}");
    let results: Vec<(u16, String)> = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    results
}

fn json_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ]
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "intruder", "version": "1"}}})
    .to_string()
}

fn daemon_log(world: &World) -> String {
    std::fs::read_to_string(world.ctx.state().join("logs/daemon.log")).unwrap_or_default()
}

#[test]
fn another_user_reaches_only_the_implementation_name() {
    let world = World::with(|ctx| ctx.set("AGENTPRISM_TEST_HOOKS", "1"));
    let record = world.start();
    let project = world.ctx.project();
    let run = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "workflow", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}},
        "arguments": {"action": "run", "projectDir": project, "script": hostile_script()}}})
    .to_string();
    let setup = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "workflow", "arguments": {"action": "setup-response", "runId": "x",
        "setupId": "y", "response": {"action": "accept", "content": {"approve": true}}}}})
    .to_string();
    let mut stateless = json_headers();
    stateless.extend([
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "workflow"),
    ]);
    let requests = vec![
        ("GET", "/healthz?challenge=abc", vec![], String::new()),
        ("POST", "/mcp", json_headers(), initialize_body()),
        ("POST", "/mcp", stateless, run),
        ("POST", "/mcp", json_headers(), setup),
        (
            "GET",
            "/mcp",
            vec![("Accept", "text/event-stream")],
            String::new(),
        ),
        (
            "DELETE",
            "/mcp",
            vec![("Mcp-Session-Id", "x")],
            String::new(),
        ),
        ("POST", "/debug/evict?session=x", vec![], String::new()),
        ("GET", "/metrics", vec![], String::new()),
        ("GET", "/ui", vec![], String::new()),
    ];
    let results = as_nobody(record.port, &requests);
    assert_eq!(results[0].0, 200, "{results:?}");
    let health: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(
        health,
        json!({"implementation": "agentprism-rs"}),
        "nothing else"
    );
    for ((method, path, ..), (status, body)) in requests.iter().zip(&results).skip(1) {
        assert_eq!(*status, 403, "{method} {path} as another user: {body}");
        assert!(
            body.contains("accepts connections from its own user only") && !body.contains("result"),
            "{method} {path}: refused before any MCP is read: {body}"
        );
    }
    // Nothing was admitted, nothing ran, and the refusals are in the log.
    let runs = world.run(&["runs", "--project-dir", project.to_str().unwrap(), "--json"]);
    assert_eq!(runs.code(), 0, "{}", runs.stderr);
    assert!(!runs.stdout.contains("evil"), "{}", runs.stdout);
    let log = daemon_log(&world);
    assert!(
        log.contains("refused a connection from 127.0.0.1") && log.contains("uid 65534"),
        "{log}"
    );
    // The same requests from the daemon's own user are served: only the uid differed.
    let full = http(record.port, "GET", "/healthz?challenge=abc", &[], "");
    assert_eq!(full.status, 200);
    assert!(
        full.json().get("proof").is_some(),
        "the owner gets the full answer"
    );
    open_session(record.port);
}

#[test]
fn without_the_kernel_lookup_only_the_token_gets_in() {
    let world = World::with(|ctx| ctx.set("AGENTPRISM_TEST_NO_PEER_LOOKUP", "1"));
    let record = world.start();
    let port = record.port;
    let token_file = world.ctx.state().join("daemons/http-token.json");
    let key = agentprism::discovery::RunControlKey::load(&token_file).expect("a 0600 token file");
    let token = key.to_bearer();

    // Our own user without the token: refused, and /healthz says only the name.
    let bare = mcp_post(
        port,
        None,
        &serde_json::from_str(&initialize_body()).unwrap(),
    );
    assert_eq!(bare.status, 401);
    assert_eq!(bare.header("www-authenticate"), Some("Bearer"));
    let wrong = http(
        port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", "Bearer not-the-token"),
        ],
        &initialize_body(),
    );
    assert_eq!(wrong.status, 401);
    let health = http(port, "GET", "/healthz?challenge=abc", &[], "");
    assert_eq!(health.json(), json!({"implementation": "agentprism-rs"}));

    // With the token: served.
    let bearer = format!("Bearer {token}");
    let admitted = http(
        port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &bearer),
        ],
        &initialize_body(),
    );
    assert_eq!(
        admitted.status,
        200,
        "{}",
        String::from_utf8_lossy(&admitted.body)
    );
    let proved = http(
        port,
        "GET",
        "/healthz?challenge=abc",
        &[("Authorization", &bearer)],
        "",
    );
    assert!(proved.json().get("proof").is_some());

    // The shim sends it by itself: a whole tool call goes through.
    let mut shim = crate::shim::Shim::start(&world.ctx);
    shim.initialize();
    let listed = shim.request(2, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"][0]["name"], "workflow", "{listed}");
    drop(shim);

    // `daemon url` hands hosts the header.
    let url = world.run(&["daemon", "url"]);
    assert_eq!(url.code(), 0, "{}", url.stderr);
    assert!(
        url.stdout
            .contains(&format!("--header \"Authorization: Bearer {token}\"")),
        "{}",
        url.stdout
    );
    assert!(
        url.stdout.contains(&format!(
            "http_headers = {{ \"Authorization\" = \"Bearer {token}\" }}"
        )),
        "{}",
        url.stdout
    );
}

#[test]
fn allowing_other_users_opens_the_door() {
    let world = World::with(|ctx| ctx.set("AGENTPRISM_DAEMON_ALLOW_OTHER_USERS", "1"));
    let record = world.start();
    let results = as_nobody(
        record.port,
        &[("POST", "/mcp", json_headers(), initialize_body())],
    );
    assert_eq!(results[0].0, 200, "{results:?}");
    assert!(daemon_log(&world).contains("every local user can reach this endpoint"));
}

/// Reads until the peer closes; the time it took (`None`: still open after `limit`).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<(Duration, Vec<u8>)> {
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match stream.read(&mut chunk) {
            Ok(0) => return Some((started.elapsed(), answer)),
            Ok(read) => answer.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some((started.elapsed(), answer));
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if started.elapsed() >= limit {
                    return None;
                }
            }
            Err(_) => return Some((started.elapsed(), answer)),
        }
    }
}

#[test]
fn slow_heads_slow_bodies_and_idle_connections_are_closed() {
    let world = World::new();
    let port = world.start().port;
    let slack = Duration::from_secs(8);

    // A head that trickles a byte every 2 s: cut off 10 s after its first byte.
    let trickle = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head = b"POST /mcp HTTP/1.1\r\nX-Slow: "
            .iter()
            .chain(std::iter::repeat(&b'a'));
        let started = Instant::now();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        for byte in head.take(100) {
            if stream.write_all(&[*byte]).is_err() {
                return Some(started.elapsed());
            }
            let mut probe = [0u8; 1];
            match stream.read(&mut probe) {
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // End of stream, a reset, or an answer: the server is done with us.
                _ => return Some(started.elapsed()),
            }
        }
        None
    });
    // A body that stops after 10 of 100 bytes: 408 30 s after the head.
    let slow_body = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{\"jsonrpc\"",
            )
            .unwrap();
        closed_within(&mut stream, Duration::from_secs(30) + slack)
    });
    // An idle keep-alive after one answer: closed 60 s later, not at 10 s.
    let idle = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut first = [0u8; 512];
        let read = stream.read(&mut first).unwrap();
        assert!(first[..read].starts_with(b"HTTP/1.1 200"));
        closed_within(&mut stream, Duration::from_secs(60) + slack)
    });

    let trickled = trickle
        .join()
        .unwrap()
        .expect("the trickling head is cut off");
    assert!(
        trickled >= Duration::from_secs(9) && trickled <= Duration::from_secs(10) + slack,
        "head limit: closed after {trickled:?}"
    );
    let (waited, answer) = slow_body.join().unwrap().expect("the slow body is cut off");
    assert!(
        waited >= Duration::from_secs(29),
        "body limit: closed after {waited:?}"
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let (waited, _) = idle.join().unwrap().expect("the idle connection is closed");
    assert!(
        waited >= Duration::from_secs(59),
        "idle limit: closed after {waited:?}"
    );
}

#[test]
fn the_connection_after_the_cap_is_closed_and_other_users_do_not_count() {
    let world = World::new();
    let port = world.start().port;
    let cap = agentprism::transport::http::MAX_CONNECTIONS;
    let mut open = Vec::with_capacity(cap);
    for _ in 0..cap {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // A completed exchange proves the daemon took this connection into a slot.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut answer = [0u8; 512];
        let read = stream.read(&mut answer).unwrap();
        assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
        open.push(stream);
    }
    let mut one_more = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = one_more.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let (_, answer) =
        closed_within(&mut one_more, Duration::from_secs(10)).expect("closed at once");
    assert!(answer.is_empty(), "no answer past the cap");
    // Another user's connection has its own small pool: still answered.
    let results = as_nobody(port, &[("GET", "/healthz", vec![], String::new())]);
    assert_eq!(results[0].0, 200, "{results:?}");
    // A slot freed is a slot taken again.
    drop(open.pop());
    let started = Instant::now();
    loop {
        let reply = crate::daemon::try_http(port, "GET", "/healthz", &[], "");
        if reply.is_some_and(|reply| reply.status == 200) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the freed slot is reused"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A script of exactly `bytes` bytes, nearly all of them U+0001 in a comment (each is six
/// bytes once JSON escapes it).
fn escaped_script(bytes: usize) -> String {
    let head = format!("{HEADER}return 'big';\n// ");
    let filler = bytes - head.len() - 1;
    let script = format!("{head}{}\n", "\u{1}".repeat(filler));
    assert_eq!(script.len(), bytes);
    script
}

#[test]
fn a_one_mebibyte_script_is_sent_inline_over_http_and_stdio() {
    let world = World::new();
    let port = world.start().port;
    let project = world.ctx.project();
    let limit = 1 << 20;
    let session = open_session(port);
    // Distinct request ids: a repeated id in one session is an exact retry.
    let call = |id: u32, script: String| {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "workflow",
            "arguments": {"action": "run", "projectDir": project, "script": script}}});
        let sent = message.to_string().len();
        assert!(
            sent > 6 * (limit - 256),
            "escaping grew it sixfold: {sent} bytes"
        );
        mcp_post(port, Some(&session), &message)
    };
    let accepted = call(3, escaped_script(limit));
    assert_eq!(
        accepted.status,
        200,
        "{}",
        String::from_utf8_lossy(&accepted.body)
    );
    let answer = accepted.json();
    assert!(
        answer["result"]["structuredContent"]["runId"].is_string(),
        "exactly 1 MiB is admitted: {answer}"
    );
    let refused = call(4, escaped_script(limit + 1));
    assert_eq!(
        refused.status, 200,
        "the engine refuses it, not the transport"
    );
    let answer = refused.json();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer.to_string().contains("1 MiB"),
        "the message names the limit: {answer}"
    );

    // Through the stdio shim: one line of over 6 MiB.
    let mut shim = crate::shim::Shim::start(&world.ctx);
    shim.initialize();
    let ack = shim.call_workflow(
        4,
        json!({"action": "run", "projectDir": project, "script": escaped_script(limit)}),
    );
    assert!(
        ack["structuredContent"]["runId"].is_string(),
        "over stdio too: {ack}"
    );
}

#[test]
fn agentprism_serve_over_http_admits_only_its_user_too() {
    let world = World::new();
    let mut serve = world
        .ctx
        .command(&["serve", "--http"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn agentprism serve --http");
    let stdout_pipe = serve.stdout.take().unwrap();
    let _group = KillGroup(serve);
    let mut stdout = std::io::BufReader::new(stdout_pipe);
    let mut url = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut url).unwrap();
    let port: u16 = url
        .trim()
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap_or_else(|_| panic!("a URL on stdout, got {url:?}"));
    let results = as_nobody(
        port,
        &[
            ("POST", "/mcp", json_headers(), initialize_body()),
            ("GET", "/healthz", vec![], String::new()),
        ],
    );
    assert_eq!(results[0].0, 403, "{results:?}");
    assert_eq!(results[1].0, 200, "{results:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&results[1].1).unwrap(),
        json!({"implementation": "agentprism-rs"})
    );
    // Its own user is served.
    open_session(port);
}

/// Kills a child's process group and reaps the child when the test is done with it, however
/// it ends.
struct KillGroup(std::process::Child);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
    }
}
