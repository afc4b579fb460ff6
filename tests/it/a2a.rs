//! The folder server's A2A face (docs/serve.md, "A2A") through the real binary: the official
//! A2A Python SDK (`a2a-sdk`, `tests/e2e/a2a_client.py`) over both of the card's interfaces
//! (1.0 through the SDK's own transport, 0.3 through its compatibility transport, which sends
//! `A2A-Version: 0.3`), and plain HTTP requests for what the SDK never sends: 0.3 method
//! names without any `A2A-Version` header, a method of the wrong version, the guards (a public
//! card, a 401 for `/a2a` without the token), the body cap at its edge, requests naming the
//! bad field, and a task of another principal answered exactly as an unknown one.
//!
//! The folder is `tests/fixtures/serve` (copied per test): `echo` completes without an agent,
//! `slow` with `@mock wait_file` runs until canceled, `approval` waits at a checkpoint.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sdk_clients::{
    CLIENT_DEADLINE, Sweeper, check_client, path_from_manifest, run_with_deadline,
    wait_until_no_process_has_home,
};
use crate::serve::{Reply, Served, copy_folder, fixtures, http};
use crate::support::context::{DEADLINE, TestContext};

const TOKEN: &str = "a2a-test-token";

#[test]
fn the_official_client_over_a2a_1_0() {
    official_client("1.0");
}

#[test]
fn the_official_client_over_a2a_0_3() {
    official_client("0.3");
}

/// Runs `a2a_client.py --version <version>` against a server with a token.
fn official_client(version: &str) {
    let ctx = TestContext::new();
    let home = PathBuf::from(&ctx.env["HOME"]);
    let _sweeper = Sweeper { home: home.clone() };
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let receiver = Receiver::start();
    let allowed = format!("http://{}/hooks/", receiver.address);
    let server = Served::start(
        &ctx,
        &folder,
        &["--token", TOKEN, "--a2a-push-allow", &allowed],
    );
    // Never created: the canceled run's agent waits on it until the cancel stops it.
    let wait_file = ctx.path("never-created");
    // The streamed runs' agents wait on files here until the client has seen them working.
    let gates = ctx.path("gates");
    std::fs::create_dir_all(&gates).unwrap();
    let python = path_from_manifest(
        "python",
        "the Python A2A client (a venv with tests/e2e/requirements.txt)",
    );
    let mut command = Command::new(python);
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/a2a_client.py"))
        .args(["--url", &format!("http://{}", server.address)])
        .args(["--version", version, "--token", TOKEN])
        .arg("--wait-file")
        .arg(&wait_file)
        .arg("--gates")
        .arg(&gates)
        .args(["--push-url", &format!("{allowed}task")])
        .env_clear()
        .envs(&ctx.env)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(ctx.project());
    let started = Instant::now();
    let outcome = run_with_deadline(command, CLIENT_DEADLINE);
    eprintln!("a2a {version}: client took {:?}", started.elapsed());
    let pushed = outcome
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("PUSHED "))
        .map(str::to_owned);
    if let Some(task_id) = &pushed {
        check_pushes(&receiver, task_id, version);
    }
    let stopped = server.stop();
    let describe = check_client(&format!("a2a client {version}"), &outcome, &stopped.stderr);
    assert!(
        pushed.is_some(),
        "the client pushed no task\n{}",
        describe()
    );
    assert!(
        !wait_file.exists(),
        "nothing may create {}: the cancel relies on it never appearing\n{}",
        wait_file.display(),
        describe()
    );
    let leftovers = wait_until_no_process_has_home(&home);
    assert!(
        leftovers.is_empty(),
        "processes left behind: {leftovers:?}\n{}",
        describe()
    );
}

/// A local webhook: every POST recorded (headers in lower case, the JSON body), the first to
/// each path answered 500 (so delivery must retry), the rest 200. Per path, because a test
/// may register a second webhook whose first post races the one it checks.
pub(crate) struct Receiver {
    pub(crate) address: std::net::SocketAddr,
    pub(crate) posts: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    pub(crate) fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let posts = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
        let record = posts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some((head, body)) = read_post(&mut stream) else {
                    continue;
                };
                let first = {
                    let mut posts = record.lock().unwrap();
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    let earlier = posts
                        .iter()
                        .any(|(seen, _)| seen.lines().next() == Some(line.as_str()));
                    posts.push((head, body));
                    !earlier
                };
                let status = if first {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                let answer =
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = std::io::Write::write_all(&mut stream, answer.as_bytes());
            }
        });
        Receiver { address, posts }
    }
}

/// One HTTP/1.1 request: its head (lower case) and JSON body.
fn read_post(stream: &mut std::net::TcpStream) -> Option<(String, Value)> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    read_request(stream)
}

/// The largest head and body the test webhooks read; a request over either is dropped.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;

/// One HTTP/1.1 request read from `stream`: its head (lower case) and JSON body, at most
/// [`MAX_HEAD`] and [`MAX_BODY`] bytes.
pub(crate) fn read_request(stream: &mut impl std::io::Read) -> Option<(String, Value)> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let split = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if bytes.len() > MAX_HEAD {
            return None;
        }
        let read = stream.read(&mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&bytes[..split]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .filter(|length| *length <= MAX_BODY)?;
    let mut body = bytes[split + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some((head, serde_json::from_slice(&body).ok()?))
}

/// The webhook got the pushed task's events with the token, the first one twice (its first
/// delivery answered 500), and last its completion.
fn check_pushes(receiver: &Receiver, task_id: &str, version: &str) {
    let completed = |body: &Value| {
        body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            || (body["kind"] == "status-update" && body["status"]["state"] == "completed")
    };
    crate::serve::wait_until("the webhook receiving the completion", || {
        receiver
            .posts
            .lock()
            .unwrap()
            .iter()
            .any(|(_, body)| completed(body))
    });
    let posts: Vec<(String, Value)> = receiver
        .posts
        .lock()
        .unwrap()
        .iter()
        .filter(|(head, _)| head.starts_with("post /hooks/task "))
        .cloned()
        .collect();
    assert!(posts.len() >= 3, "{version}: {posts:?}");
    for (head, body) in &posts {
        assert!(
            head.contains("x-a2a-notification-token: push-token-1"),
            "{head}"
        );
        assert!(body.to_string().contains(task_id), "{body}");
    }
    assert_eq!(
        posts[0].1, posts[1].1,
        "the refused first delivery is retried"
    );
    let first = &posts[0].1;
    assert!(
        first["task"]["id"] == task_id || (first["kind"] == "task" && first["id"] == task_id),
        "{version}: the first push is the task: {first}"
    );
    assert!(completed(&posts.last().unwrap().1), "{version}: {posts:?}");
}

/// One JSON-RPC request to `/a2a`; `version` is the `A2A-Version` header, if any.
pub(crate) fn call(
    server: &Served,
    headers: &[(&str, &str)],
    version: Option<&str>,
    method: &str,
    params: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let reply = post(server, headers, version, body.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{method}: {reply:?}");
    reply.json()
}

fn post(server: &Served, headers: &[(&str, &str)], version: Option<&str>, body: &[u8]) -> Reply {
    let mut all: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    if let Some(version) = version {
        all.push(("A2A-Version", version));
    }
    http(server.address, "POST", "/a2a", &all, body)
}

/// `message/send` (or `SendMessage` in 1.0) with `metadata`, for its result.
fn send(
    server: &Served,
    headers: &[(&str, &str)],
    version: Option<&str>,
    metadata: Value,
) -> Value {
    let method = if version.is_some() {
        "SendMessage"
    } else {
        "message/send"
    };
    let role = if version.is_some() {
        "ROLE_USER"
    } else {
        "user"
    };
    let message = json!({"messageId": "m-1", "role": role, "parts": [], "metadata": metadata});
    let answer = call(
        server,
        headers,
        version,
        method,
        json!({"message": message}),
    );
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

/// Polls `tasks/get` (or `GetTask`) until the task's state is `state`.
fn poll(
    server: &Served,
    headers: &[(&str, &str)],
    version: Option<&str>,
    id: &str,
    state: &str,
) -> Value {
    let method = if version.is_some() {
        "GetTask"
    } else {
        "tasks/get"
    };
    let started = Instant::now();
    loop {
        let answer = call(server, headers, version, method, json!({"id": id}));
        let task = answer["result"].clone();
        if task["status"]["state"] == state {
            return task;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "task {id} never became {state}: {answer}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_0_3_names_answer_without_a_version_header() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let server = Served::start(&ctx, &folder, &[]);
    let task = send(
        &server,
        &[],
        None,
        json!({"skill": "echo", "input": {"text": "plain"}}),
    );
    assert_eq!(task["kind"], "task", "{task}");
    let first = task["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(first == "submitted" || first == "completed", "{task}");
    let id = task["id"].as_str().expect("a task id").to_owned();
    let done = poll(&server, &[], None, &id, "completed");
    let part = &done["artifacts"][0]["parts"][0];
    assert_eq!(part["kind"], "text");
    let result: Value = serde_json::from_str(part["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(result, json!({"echoed": "plain"}));

    let wait_file = ctx.path("never-created");
    let step = format!("@mock wait_file {}", wait_file.display());
    let slow = send(
        &server,
        &[],
        None,
        json!({"skill": "slow", "input": {"step": step}}),
    );
    assert_eq!(slow["status"]["state"], "submitted", "{slow}");
    let slow_id = slow["id"].as_str().expect("a task id").to_owned();
    poll(&server, &[], None, &slow_id, "working");
    let canceled = call(&server, &[], None, "tasks/cancel", json!({"id": slow_id}));
    assert_eq!(
        canceled["result"]["status"]["state"], "canceled",
        "{canceled}"
    );
    let again = call(&server, &[], None, "tasks/cancel", json!({"id": slow_id}));
    assert_eq!(again["error"]["code"], -32002, "{again}");

    let gate = send(
        &server,
        &[],
        None,
        json!({"skill": "approval", "input": {"request": "ship"}}),
    );
    let gate_id = gate["id"].as_str().expect("a task id").to_owned();
    let waiting = poll(&server, &[], None, &gate_id, "input-required");
    assert_eq!(waiting["status"]["message"]["role"], "agent", "{waiting}");

    // The same tasks in 1.0's spelling.
    let v1 = call(&server, &[], Some("1.0"), "GetTask", json!({"id": id}));
    assert_eq!(
        v1["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{v1}"
    );
    assert!(v1["result"].get("kind").is_none(), "{v1}");
    let v1 = call(&server, &[], Some("1.0"), "GetTask", json!({"id": gate_id}));
    assert_eq!(v1["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let created = send(
        &server,
        &[],
        Some("1.0"),
        json!({"skill": "echo", "input": {"text": "v1"}}),
    );
    assert!(
        created["task"]["id"].is_string(),
        "SendMessageResponse.task: {created}"
    );

    // A method of the other version names the header to send.
    let crossed = call(&server, &[], None, "SendMessage", json!({}));
    assert_eq!(crossed["error"]["code"], -32009, "{crossed}");
    assert!(
        crossed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("A2A-Version: 1.0")
    );
    let crossed = call(&server, &[], Some("1.0"), "tasks/get", json!({"id": id}));
    assert_eq!(crossed["error"]["code"], -32009, "{crossed}");
    let unknown_version = call(&server, &[], Some("2.0"), "GetTask", json!({"id": id}));
    assert_eq!(
        unknown_version["error"]["code"], -32009,
        "{unknown_version}"
    );
    // Push notifications are off without an allowed webhook prefix, saying how to allow one.
    let push = call(
        &server,
        &[],
        None,
        "tasks/pushNotificationConfig/set",
        json!({"taskId": gate_id, "pushNotificationConfig": {"url": "http://127.0.0.1:1/"}}),
    );
    assert_eq!(push["error"]["code"], -32003, "{push}");
    assert!(
        push["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--a2a-push-allow"),
        "{push}"
    );
    assert!(!wait_file.exists());
}

#[test]
fn bad_requests_name_the_field() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let server = Served::start(&ctx, &folder, &[]);
    let refused = |params: Value| {
        let answer = call(&server, &[], None, "message/send", params);
        let error = answer["error"].clone();
        assert!(!error.is_null(), "accepted: {answer}");
        (
            error["code"].as_i64().unwrap_or_default(),
            error["message"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let message = |metadata: Value| json!({"message": {"messageId": "m", "role": "user", "parts": [], "metadata": metadata}});
    let cases = [
        (json!({}), "params.message:"),
        (
            json!({"message": {"role": "user", "parts": []}}),
            "params.message.metadata:",
        ),
        (
            message(json!({"input": {}})),
            "params.message.metadata.skill: a string",
        ),
        (
            message(json!({"skill": "nope"})),
            "params.message.metadata.skill: no skill is named \"nope\"",
        ),
        (
            message(json!({"skill": "echo", "input": [1]})),
            "params.message.metadata.input: a JSON object",
        ),
        (
            message(json!({"skill": "echo", "input": {}})),
            "params.message.metadata.input: args do not match",
        ),
    ];
    for (params, expected) in cases {
        let (code, text) = refused(params.clone());
        assert_eq!(code, -32602, "{params}: {text}");
        assert!(text.starts_with(expected), "{params}: {text}");
    }
    let over = "x".repeat(256 * 1024);
    let (code, text) = refused(message(json!({"skill": "echo", "input": {"text": over}})));
    assert_eq!(code, -32602);
    assert!(
        text.starts_with("params.message.metadata.input: 262155 bytes of JSON; at most 262144"),
        "{text}"
    );
    let missing_id = call(&server, &[], None, "tasks/get", json!({}));
    assert!(
        missing_id["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("params.id:")
    );
    let parse = post(&server, &[], None, b"{not json");
    assert_eq!(parse.json()["error"]["code"], -32700);
}

#[test]
fn the_card_is_public_and_the_endpoint_needs_the_token() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let server = Served::start(&ctx, &folder, &["--token", TOKEN]);
    let card = http(
        server.address,
        "GET",
        "/.well-known/agent-card.json",
        &[],
        b"",
    );
    assert_eq!(card.status, 200, "{card:?}");
    let card = card.json();
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .map(|skill| skill["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(skills, ["approval", "echo", "review", "slow"]);
    assert_eq!(card["url"], format!("http://{}/a2a", server.address));
    assert_eq!(card["securitySchemes"]["bearer"]["scheme"], "bearer");
    // No webhook prefix allowed: push notifications are off, and say how to turn them on.
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    let bearer = format!("Bearer {TOKEN}");
    let push = call(
        &server,
        &[("Authorization", bearer.as_str())],
        None,
        "tasks/pushNotificationConfig/set",
        json!({"taskId": "a-b", "pushNotificationConfig": {"url": "http://127.0.0.1:1/"}}),
    );
    assert_eq!(
        push["error"]["code"], -32001,
        "an unknown task first: {push}"
    );
    let get = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "a-b"}})
        .to_string();
    assert_eq!(post(&server, &[], None, get.as_bytes()).status, 401);
    let wrong = [("Authorization", "Bearer not-the-token")];
    assert_eq!(post(&server, &wrong, None, get.as_bytes()).status, 401);
    let right = format!("Bearer {TOKEN}");
    let auth = [("Authorization", right.as_str())];
    let answer = post(&server, &auth, None, get.as_bytes());
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["error"]["code"], -32001, "{answer:?}");
    let other_method = http(server.address, "GET", "/a2a", &auth, b"");
    assert_eq!(other_method.status, 405);
    // The body cap of the MCP path: 1 MiB is read, one byte more is 413.
    let mut exact = get.clone().into_bytes();
    exact.resize(1024 * 1024, b' ');
    assert_eq!(
        post(&server, &auth, None, &exact).json()["error"]["code"],
        -32001
    );
    exact.push(b' ');
    assert_eq!(post(&server, &auth, None, &exact).status, 413);
    // A cross-origin browser request is refused before the token is looked at.
    let origin = [
        ("Authorization", right.as_str()),
        ("Origin", "https://elsewhere.example"),
    ];
    assert_eq!(post(&server, &origin, None, get.as_bytes()).status, 403);
}

#[test]
fn a_task_of_another_principal_is_not_found() {
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let server = Served::start(
        &ctx,
        &folder,
        &["--token", TOKEN, "--principal-header", "X-User"],
    );
    let bearer = format!("Bearer {TOKEN}");
    let alice = [("Authorization", bearer.as_str()), ("X-User", "alice")];
    let bob = [("Authorization", bearer.as_str()), ("X-User", "bob")];
    let task = send(
        &server,
        &alice,
        None,
        json!({"skill": "echo", "input": {"text": "mine"}}),
    );
    let id = task["id"].as_str().expect("a task id").to_owned();
    poll(&server, &alice, None, &id, "completed");
    let made_up = crate::serve::made_up_id(&id);
    for method in ["tasks/get", "tasks/cancel"] {
        let theirs = call(&server, &bob, None, method, json!({"id": id}));
        let nobody = call(&server, &bob, None, method, json!({"id": made_up}));
        assert_eq!(theirs["error"]["code"], -32001, "{theirs}");
        assert_eq!(
            theirs, nobody,
            "{method}: another's task reads as an unknown one"
        );
    }
    // The principal's key is the MCP one: alice sees her task through the run API too.
    let mcp = server.session(&alice);
    assert_eq!(mcp.status(&id)["state"], "completed");
    let without = post(&server, &[("Authorization", bearer.as_str())], None, b"{}");
    assert_eq!(without.status, 401, "no principal header: {without:?}");
}
