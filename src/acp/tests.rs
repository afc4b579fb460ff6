//! In-memory tests of the ACP connection over `tokio::io::duplex`, with a scripted fake agent
//! written inline: id matching, lenient parsing, a dispatch loop that never blocks, EOF.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{Notify, oneshot};
use tokio_util::task::TaskTracker;

use super::connection::{CloseReason, Connection, RpcError, SessionHandler};
use crate::engine::runner::AgentUpdate;
use crate::util::sync::Lock;

const DEADLINE: Duration = Duration::from_secs(5);

/// The agent's end of the pipe.
struct FakeAgent {
    lines: tokio::io::Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
}

impl FakeAgent {
    async fn receive(&mut self) -> Value {
        let line = tokio::time::timeout(DEADLINE, self.lines.next_line())
            .await
            .expect("the client sent nothing in time")
            .expect("read from client")
            .expect("client closed the stream");
        serde_json::from_str(&line).expect("client sent JSON")
    }

    async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    async fn send_raw(&mut self, line: &str) {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to client");
    }
}

fn connect(close_reason: Option<CloseReason>) -> (Connection, FakeAgent, TaskTracker) {
    let (client, agent) = tokio::io::duplex(64 * 1024);
    let (client_read, client_write) = tokio::io::split(client);
    let (agent_read, agent_write) = tokio::io::split(agent);
    let tracker = TaskTracker::new();
    let connection = Connection::start("fake", client_read, client_write, close_reason, &tracker);
    let agent = FakeAgent {
        lines: BufReader::new(agent_read).lines(),
        writer: agent_write,
    };
    (connection, agent, tracker)
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future)
        .await
        .expect("did not finish in time")
}

/// Records updates; permission requests wait until the test releases them.
#[derive(Default)]
struct Recorder {
    updates: Mutex<Vec<AgentUpdate>>,
    changed: Notify,
    permission_gate: Mutex<Option<oneshot::Receiver<String>>>,
    roots: Vec<std::path::PathBuf>,
}

impl Recorder {
    fn updates(&self) -> Vec<String> {
        self.updates
            .locked()
            .iter()
            .map(|update| format!("{update:?}"))
            .collect()
    }

    async fn wait_for_updates(&self, count: usize) {
        within(async {
            loop {
                let notified = self.changed.notified();
                if self.updates.locked().len() >= count {
                    return;
                }
                notified.await;
            }
        })
        .await
    }
}

#[async_trait]
impl SessionHandler for Recorder {
    fn update(&self, update: AgentUpdate) {
        self.updates.locked().push(update);
        self.changed.notify_waiters();
    }

    async fn request_permission(&self, _params: Value) -> Value {
        let gate = self.permission_gate.locked().take();
        match gate {
            Some(gate) => match gate.await {
                Ok(option) => json!({"outcome": {"outcome": "selected", "optionId": option}}),
                Err(_) => json!({"outcome": {"outcome": "cancelled"}}),
            },
            None => json!({"outcome": {"outcome": "cancelled"}}),
        }
    }

    fn file_roots(&self) -> Vec<std::path::PathBuf> {
        self.roots.clone()
    }
}

#[tokio::test]
async fn responses_match_by_id_out_of_order_and_agent_ids_do_not_collide() {
    let (connection, mut agent, _tracker) = connect(None);
    let first = tokio::spawn({
        let connection = connection.clone();
        async move { connection.request("first", &json!({})).await }
    });
    let one = agent.receive().await;
    let second = tokio::spawn({
        let connection = connection.clone();
        async move { connection.request("second", &json!({})).await }
    });
    let two = agent.receive().await;
    assert_eq!(
        (one["method"].as_str(), two["method"].as_str()),
        (Some("first"), Some("second"))
    );
    // The agent's own request reuses our first id; it must be answered, not taken as a reply.
    agent
        .send(json!({"jsonrpc": "2.0", "id": one["id"], "method": "terminal/create", "params": {}}))
        .await;
    let answer = agent.receive().await;
    assert_eq!(answer["id"], one["id"]);
    assert_eq!(answer["error"]["code"], json!(-32601));
    agent
        .send(json!({"jsonrpc": "2.0", "id": two["id"], "result": {"n": 2}}))
        .await;
    agent
        .send(json!({"jsonrpc": "2.0", "id": one["id"], "error": {"code": -32602, "message": "bad", "data": {"x": 1}}}))
        .await;
    let second = within(second).await.expect("join");
    assert_eq!(second.expect("second result"), json!({"n": 2}));
    let first = within(first).await.expect("join");
    assert_remote(first, -32602, "bad", json!({"x": 1}));
}

/// `answer` is the agent's JSON-RPC error with these members.
fn assert_remote(answer: Result<Value, RpcError>, code: i64, message: &str, data: Value) {
    match answer {
        Err(RpcError::Remote {
            code: got_code,
            message: got_message,
            data: got_data,
        }) => assert_eq!(
            (got_code, got_message.as_str(), got_data),
            (code, message, Some(data))
        ),
        other => panic!("expected a remote error, got {other:?}"),
    }
}

#[tokio::test]
async fn lenient_parsing_keeps_the_stream_alive() {
    let (connection, mut agent, _tracker) = connect(None);
    let recorder = Arc::new(Recorder::default());
    connection.register_session("s1", recorder.clone());
    let pending = tokio::spawn({
        let connection = connection.clone();
        async move {
            connection
                .request("session/prompt", &json!({"sessionId": "s1"}))
                .await
        }
    });
    let request = agent.receive().await;
    let update = |update: Value| json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}});
    agent
        .send(update(
            json!({"sessionUpdate": "usage_update", "used": null, "size": 1000}),
        ))
        .await;
    agent
        .send(update(
            json!({"sessionUpdate": "brand_new_variant", "whatever": [1, 2]}),
        ))
        .await;
    agent.send(update(json!({"noTagAtAll": true}))).await;
    agent.send_raw("this is not json").await;
    agent.send_raw("[1, 2]").await;
    agent
        .send(json!({"jsonrpc": "2.0", "method": "_auth/status_update", "params": {"x": 1}}))
        .await;
    agent
        .send(json!({"jsonrpc": "2.0", "method": "elicitation/complete", "params": {}}))
        .await;
    agent.send(update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}))).await;
    agent
        .send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "other", "update": {"sessionUpdate": "plan"}}}))
        .await;
    agent
        .send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"stopReason": "end_turn"}}))
        .await;
    let result = within(pending).await.expect("join").expect("prompt result");
    assert_eq!(result, json!({"stopReason": "end_turn"}));
    // Updates are delivered inline before the response that follows them.
    assert_eq!(
        recorder.updates(),
        vec![
            "ContextUsage { used: None, size: Some(1000) }",
            "Other(\"brand_new_variant\")",
            "Other(\"unknown\")",
            "MessageChunk(\"hi\")",
        ]
    );
}

/// Responses are routed from the members that name them; the rest reaches the caller as the
/// agent wrote it, whatever its shape.
#[tokio::test]
async fn every_shape_of_response_reaches_its_caller() {
    let (connection, mut agent, _tracker) = connect(None);
    let recorder = Arc::new(Recorder::default());
    connection.register_session("s1", recorder.clone());
    let ask = |method: &'static str| {
        let connection = connection.clone();
        tokio::spawn(async move { connection.request(method, &json!({})).await })
    };
    let raw = tokio::spawn({
        let connection = connection.clone();
        async move { connection.request_raw("raw", &json!({"a": 1})).await }
    });
    let raw_request = agent.receive().await;
    assert_eq!(raw_request["params"], json!({"a": 1}));
    assert_eq!(raw_request["jsonrpc"], "2.0");
    let shapes = [
        (
            "null-error",
            r#""error":null,"result":{"ok":true}"#,
            Some(json!({"ok": true})),
        ),
        ("null-result", r#""result":null"#, Some(Value::Null)),
        ("no-result", "", Some(Value::Null)),
        (
            "escaped",
            r#""result":{"t\u0065xt":"line\nnext \"q\" \u00e9"}"#,
            Some(json!({"text": "line\nnext \"q\" é"})),
        ),
        (
            "error",
            r#""error":{"code":-32002,"message":"gone","data":{"id":1}}"#,
            None,
        ),
    ];
    let mut waiting = Vec::new();
    for (method, _, _) in &shapes {
        waiting.push(ask(method));
        let request = agent.receive().await;
        assert_eq!(request["method"], *method);
        let members = shapes.iter().find(|(m, _, _)| m == method).unwrap().1;
        let comma = if members.is_empty() { "" } else { "," };
        // The id echoed back as a string, as some agents do.
        agent
            .send_raw(&format!(
                r#"{{"jsonrpc":"2.0","id":"{}"{comma}{members}}}"#,
                request["id"]
            ))
            .await;
    }
    // A notification whose session id is escaped still finds its session.
    agent
        .send_raw(r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s\u0031","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#)
        .await;
    agent
        .send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"kept" : [1, 2.50]}}}}"#,
            raw_request["id"]
        ))
        .await;
    for ((method, _, expected), answer) in shapes.iter().zip(waiting) {
        let answer = within(answer).await.expect("join");
        match expected {
            Some(expected) => assert_eq!(answer.as_ref().ok(), Some(expected), "{method}"),
            None => assert_remote(answer, -32002, "gone", json!({"id": 1})),
        }
    }
    let raw = within(raw).await.expect("join").expect("raw answer");
    assert_eq!(raw.get(), r#"{"kept" : [1, 2.50]}"#);
    recorder.wait_for_updates(1).await;
    assert_eq!(recorder.updates(), vec!["MessageChunk(\"hi\")"]);
}

#[tokio::test]
async fn a_waiting_permission_does_not_block_other_sessions() {
    let (connection, mut agent, _tracker) = connect(None);
    let asking = Arc::new(Recorder::default());
    let (release, gate) = oneshot::channel();
    *asking.permission_gate.locked() = Some(gate);
    let streaming = Arc::new(Recorder::default());
    connection.register_session("asking", asking.clone());
    connection.register_session("streaming", streaming.clone());
    let pending = tokio::spawn({
        let connection = connection.clone();
        async move {
            connection
                .request("session/prompt", &json!({"sessionId": "streaming"}))
                .await
        }
    });
    let request = agent.receive().await;
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "session/request_permission", "params": {
                "sessionId": "asking", "toolCall": {"toolCallId": "t"},
                "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}],
            }}),
        )
        .await;
    for index in 0..3 {
        agent
            .send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "streaming",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("{index}")}}}}))
            .await;
    }
    streaming.wait_for_updates(3).await;
    agent
        .send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"stopReason": "end_turn"}}))
        .await;
    within(pending)
        .await
        .expect("join")
        .expect("the other session's prompt finished");
    // Only now does the human answer.
    release
        .send("yes".to_owned())
        .expect("permission still waiting");
    let answer = agent.receive().await;
    assert_eq!(answer["id"], json!(0));
    assert_eq!(
        answer["result"],
        json!({"outcome": {"outcome": "selected", "optionId": "yes"}})
    );
}

#[tokio::test]
async fn eof_fails_pending_requests_with_a_clear_message() {
    let reason: CloseReason =
        Box::new(|| Box::pin(async { "agent process exited (exit status 3)".to_owned() }));
    let (connection, mut agent, _tracker) = connect(Some(reason));
    let pending = tokio::spawn({
        let connection = connection.clone();
        async move { connection.request("session/prompt", &json!({})).await }
    });
    agent.receive().await;
    drop(agent);
    match within(pending).await.expect("join") {
        Err(RpcError::Closed(message)) => assert_eq!(
            message,
            "backend fake: agent process exited (exit status 3) while waiting for session/prompt"
        ),
        other => panic!("expected a closed error, got {other:?}"),
    }
    within(connection.closed()).await;
    // Later requests fail at once, with the same reason.
    match within(connection.request("session/new", &json!({}))).await {
        Err(RpcError::Closed(message)) => {
            assert!(
                message.contains("exit status 3") && message.contains("session/new"),
                "{message}"
            );
        }
        other => panic!("expected a closed error, got {other:?}"),
    }
}

#[tokio::test]
async fn fs_requests_are_served_for_absolute_paths_inside_the_working_tree() {
    let (connection, mut agent, _tracker) = connect(None);
    let folder = tempfile::tempdir().expect("temp dir");
    let roots = |roots: &[&Path]| {
        Arc::new(Recorder {
            roots: roots.iter().map(|root| root.to_path_buf()).collect(),
            ..Recorder::default()
        })
    };
    connection.register_session("s", roots(&[folder.path()]));
    connection.register_session("dev", roots(&[Path::new("/dev")]));
    let path = folder.path().join("sub/note.txt");
    let path_text = path.display().to_string();
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": 7, "method": "fs/write_text_file",
            "params": {"sessionId": "s", "path": path_text, "content": "one\ntwo\nthree\n"}}),
        )
        .await;
    let answer = agent.receive().await;
    assert_eq!(
        (answer["id"].clone(), answer["result"].clone()),
        (json!(7), Value::Null),
        "{answer}"
    );
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": 8, "method": "fs/read_text_file",
            "params": {"sessionId": "s", "path": path_text, "line": 2, "limit": 1}}),
        )
        .await;
    let answer = agent.receive().await;
    assert_eq!(answer["result"], json!({"content": "two\n"}));
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": 9, "method": "fs/read_text_file",
            "params": {"sessionId": "s", "path": "relative.txt"}}),
        )
        .await;
    let answer = agent.receive().await;
    assert_eq!(answer["error"]["code"], json!(-32602));
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("absolute")
    );
    agent
        .send(json!({"jsonrpc": "2.0", "id": 10, "method": "fs/read_text_file",
            "params": {"sessionId": "s", "path": folder.path().join("missing").display().to_string()}}))
        .await;
    let answer = agent.receive().await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("missing"),
        "{answer}"
    );
    // A device is refused before a byte is read (reading /dev/zero would never end).
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": 11, "method": "fs/read_text_file",
            "params": {"sessionId": "dev", "path": "/dev/zero"}}),
        )
        .await;
    let answer = agent.receive().await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/dev/zero is a character device"),
        "{answer}"
    );
    // Outside the working tree: refused as invalid params naming the path and the root,
    // through a link inside the tree too, and for a session nobody registered.
    let outside = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(outside.path(), folder.path().join("out")).expect("link");
    std::fs::write(outside.path().join("secret"), "s").expect("write");
    let requests = [
        ("s", "fs/read_text_file", "/etc/passwd".to_owned()),
        (
            "s",
            "fs/write_text_file",
            outside.path().join("new").display().to_string(),
        ),
        (
            "s",
            "fs/read_text_file",
            folder.path().join("out/secret").display().to_string(),
        ),
        (
            "s",
            "fs/write_text_file",
            folder.path().join("out/new").display().to_string(),
        ),
        ("nobody", "fs/read_text_file", path_text.clone()),
    ];
    for (id, (session, method, path)) in requests.iter().enumerate() {
        agent
            .send(json!({"jsonrpc": "2.0", "id": 100 + id, "method": method,
                "params": {"sessionId": session, "path": path, "content": "x"}}))
            .await;
        let answer = agent.receive().await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            answer["error"]["code"],
            json!(-32602),
            "{method} {path}: {answer}"
        );
        assert!(
            message.contains(path.as_str()) && message.contains("outside"),
            "{message}"
        );
    }
    assert!(
        !outside.path().join("new").exists(),
        "nothing written outside"
    );
}

#[tokio::test]
async fn permission_for_an_unknown_session_is_cancelled() {
    let (_connection, mut agent, _tracker) = connect(None);
    agent
        .send(
            json!({"jsonrpc": "2.0", "id": "p1", "method": "session/request_permission",
            "params": {"sessionId": "nobody", "toolCall": {}, "options": []}}),
        )
        .await;
    let answer = agent.receive().await;
    assert_eq!(answer["id"], json!("p1"));
    assert_eq!(
        answer["result"],
        json!({"outcome": {"outcome": "cancelled"}})
    );
}

#[test]
fn config_reads_pool_size_and_init_timeout_and_names_bad_variables() {
    use crate::acp::AcpConfig;
    use crate::env::EnvSnapshot;
    let config = AcpConfig::from_env(&EnvSnapshot::from_pairs([
        ("AGENTPRISM_ACP_POOL_SIZE", "0"),
        ("AGENTPRISM_ACP_INIT_TIMEOUT_MS", "1500"),
    ]))
    .expect("config");
    assert_eq!(config.pool_size, 1, "clamped to at least 1");
    assert_eq!(config.init_timeout, Duration::from_millis(1500));
    let defaults = AcpConfig::from_env(&EnvSnapshot::default()).expect("defaults");
    assert_eq!(
        (defaults.pool_size, defaults.init_timeout),
        (1, Duration::from_secs(60))
    );
    assert_eq!(defaults.idle_ttl, Some(Duration::from_secs(60)));
    let kept = AcpConfig::from_env(&EnvSnapshot::from_pairs([(
        "AGENTPRISM_ACP_IDLE_TTL_MS",
        "0",
    )]))
    .expect("config");
    assert_eq!(kept.idle_ttl, None, "0 keeps idle processes");
    let short = AcpConfig::from_env(&EnvSnapshot::from_pairs([(
        "AGENTPRISM_ACP_IDLE_TTL_MS",
        "2500",
    )]))
    .expect("config");
    assert_eq!(short.idle_ttl, Some(Duration::from_millis(2500)));
    for variable in [
        "AGENTPRISM_ACP_POOL_SIZE",
        "AGENTPRISM_ACP_INIT_TIMEOUT_MS",
        "AGENTPRISM_ACP_IDLE_TTL_MS",
    ] {
        let error = AcpConfig::from_env(&EnvSnapshot::from_pairs([(variable, "lots")]))
            .expect_err("bad number");
        assert!(error.contains(variable), "{error}");
    }
}

/// An agent that sends requests and never reads our answers: the reader stops once
/// `MAX_AGENT_REQUESTS` answers wait to be written, so the agent's own writes wait instead of
/// our queue growing; when the agent reads again, every request is answered.
#[tokio::test(start_paused = true)]
async fn an_agent_flooding_requests_waits_instead_of_growing_our_queue() {
    let (client, agent) = tokio::io::duplex(4096);
    let (client_read, client_write) = tokio::io::split(client);
    let (agent_read, mut agent_write) = tokio::io::split(agent);
    let tracker = TaskTracker::new();
    let _connection = Connection::start("fake", client_read, client_write, None, &tracker);
    const TOTAL: usize = 2000;
    let flood: String = (0..TOTAL)
        .map(|id| {
            let params = json!({"sessionId": "unknown", "path": "/etc/hostname"});
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "fs/read_text_file", "params": params});
            format!("{request}\n")
        })
        .collect();
    let mut writing = tokio::spawn(async move {
        agent_write
            .write_all(flood.as_bytes())
            .await
            .expect("write");
        agent_write
    });
    // Time is paused: the timeout fires only once every task waits on something that
    // nothing will do, here the reader on a permit and the agent on its write.
    let stuck = tokio::time::timeout(Duration::from_secs(60), &mut writing).await;
    assert!(
        stuck.is_err(),
        "the reader took every request while none was answered"
    );

    let mut lines = BufReader::new(agent_read).lines();
    let mut answered = 0;
    while answered < TOTAL {
        let line = within(lines.next_line())
            .await
            .expect("read")
            .expect("a line");
        let answer: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        answered += 1;
    }
    within(writing).await.expect("the agent's writes complete");
}

/// What the connection writes, one entry per write call, with a signal after each.
#[derive(Clone, Default)]
struct RecordingWriter {
    writes: Arc<Mutex<Vec<Vec<u8>>>>,
    wrote: Arc<Notify>,
}

impl tokio::io::AsyncWrite for RecordingWriter {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.writes.locked().push(buf.to_vec());
        self.wrote.notify_one();
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Requests that tasks send in one turn of the scheduler go out in one write, in the order
/// they were sent, on the runtime the daemon uses (one worker, whose next task is the one
/// just woken).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn requests_queued_in_one_turn_go_out_in_one_write() {
    let (client, _agent) = tokio::io::duplex(1024);
    let (client_read, _) = tokio::io::split(client);
    let writer = RecordingWriter::default();
    let tracker = TaskTracker::new();
    let connection = Connection::start("fake", client_read, writer.clone(), None, &tracker);
    const SENDERS: usize = 5;
    // Spawned from a task on the worker, so all of them are queued before any runs.
    let spawner = connection.clone();
    tokio::spawn(async move {
        for sender in 0..SENDERS {
            let connection = spawner.clone();
            tokio::spawn(async move {
                let _ = connection
                    .request_raw("test/m", &json!({"sender": sender}))
                    .await;
            });
        }
    });
    let lines = || -> Vec<Value> {
        let writes = writer.writes.locked();
        writes
            .iter()
            .flat_map(|write| write.split(|&byte| byte == b'\n'))
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).expect("a JSON line"))
            .collect()
    };
    within(async {
        while lines().len() < SENDERS {
            writer.wrote.notified().await;
        }
    })
    .await;
    let senders: std::collections::BTreeSet<u64> = lines()
        .iter()
        .map(|line| line["params"]["sender"].as_u64().expect("a sender"))
        .collect();
    assert_eq!(senders.len(), SENDERS, "every request is written once");
    assert_eq!(writer.writes.locked().len(), 1, "one write for all of them");
    connection.close_input();
}
