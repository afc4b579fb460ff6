//! Tests of the scripted mock ACP agent (`examples/mock_acp_agent/`) over raw NDJSON, so
//! the peer every ACP client test relies on is itself shown to follow acp.md section 5.
//!
//! Each test spawns the example binary with its own environment, and every read has a
//! deadline: a broken agent fails a test instead of hanging the suite.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Generous, because two cores are shared by parallel test processes; a healthy agent
/// answers in milliseconds.
const DEADLINE: Duration = Duration::from_secs(20);

/// A running mock agent with its stdout parsed line by line on a reader thread.
struct MockAgent {
    child: Child,
    stdin: Option<ChildStdin>,
    /// One parsed stdout line per message; lines that are not JSON arrive as strings, so
    /// that a framing bug shows up in an assertion.
    lines: mpsc::Receiver<Value>,
    /// Messages read while waiting for something else, handed out before new ones.
    backlog: VecDeque<Value>,
    stderr: Arc<Mutex<String>>,
    /// Joined once the process has exited, so `stderr()` then holds everything it wrote.
    stderr_reader: Option<thread::JoinHandle<()>>,
    next_id: u64,
}

fn mock_agent_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_agentprism"))
        .parent()
        .expect("the binary has a parent directory")
        .join("examples/mock_acp_agent");
    let built = std::fs::metadata(&path).and_then(|metadata| metadata.modified());
    let Ok(built) = built else {
        panic!(
            "{} does not exist: run `cargo build --examples` (plain `cargo test` builds it too)",
            path.display()
        );
    };
    // `cargo test --test it` does not rebuild examples, so a stale mock would be tested
    // silently; fail instead.
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mock_acp_agent");
    let entries = std::fs::read_dir(&sources).expect("the mock agent's sources are readable");
    for entry in entries {
        let source = entry.expect("a source file").path();
        let edited = std::fs::metadata(&source).and_then(|metadata| metadata.modified());
        assert!(
            edited.is_ok_and(|edited| edited <= built),
            "{} is older than {}: run `cargo build --examples`",
            path.display(),
            source.display()
        );
    }
    path
}

impl MockAgent {
    fn spawn(env: &[(&str, &str)]) -> MockAgent {
        MockAgent::spawn_with(env, false)
    }

    /// With `own_group`, the agent leads a new process group, so a test may kill the group
    /// without hitting the test runner.
    fn spawn_with(env: &[(&str, &str)], own_group: bool) -> MockAgent {
        let mut command = Command::new(mock_agent_binary());
        if own_group {
            command.process_group(0);
        }
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MOCK_ACP_") {
                command.env_remove(name);
            }
        }
        command
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn the mock agent");

        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let message = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if sender.send(message).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr_sink = Arc::clone(&stderr);
        let stderr_reader = thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read @ 1..) = stderr_pipe.read(&mut buffer) {
                let text = String::from_utf8_lossy(&buffer[..read]);
                stderr_sink.lock().unwrap().push_str(&text);
            }
        });

        MockAgent {
            stdin: child.stdin.take(),
            child,
            lines,
            backlog: VecDeque::new(),
            stderr,
            stderr_reader: Some(stderr_reader),
            next_id: 1,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        writeln!(stdin, "{line}").expect("write to the mock agent");
        stdin.flush().expect("flush to the mock agent");
    }

    fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and returns its id without waiting for the answer.
    fn start_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// The next message, or `None` once stdout is closed; panics at the deadline.
    fn next_message(&mut self) -> Option<Value> {
        if let Some(message) = self.backlog.pop_front() {
            return Some(message);
        }
        match self.lines.recv_timeout(DEADLINE) {
            Ok(message) => Some(message),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "no message from the mock agent within {DEADLINE:?}; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// Reads until a message matches; returns the ones read before it and the match.
    fn read_until(&mut self, wanted: impl Fn(&Value) -> bool) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let Some(message) = self.next_message() else {
                panic!(
                    "stdout closed while waiting; read {before:#?}\nstderr:\n{}",
                    self.stderr()
                );
            };
            if wanted(&message) {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Reads until the response to request `id`; returns the messages before it and the
    /// response.
    fn response(&mut self, id: u64) -> (Vec<Value>, Value) {
        self.read_until(|message| is_response(message, id))
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_request(method, params);
        self.response(id).1
    }

    fn initialize(&mut self) -> Value {
        let response = self.request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": { "fs": { "readTextFile": true, "writeTextFile": true }, "terminal": false },
                "clientInfo": { "name": "agentprism-tests", "version": "0" },
            }),
        );
        assert_eq!(response["result"]["protocolVersion"], 1, "{response}");
        response
    }

    fn new_session(&mut self) -> String {
        let response = self.request("session/new", json!({ "cwd": "/tmp", "mcpServers": [] }));
        response["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {response}"))
            .to_owned()
    }

    fn start_prompt(&mut self, session_id: &str, text: &str) -> u64 {
        self.start_request(
            "session/prompt",
            json!({ "sessionId": session_id, "prompt": [{ "type": "text", "text": text }] }),
        )
    }

    /// Runs a whole turn; returns the messages the turn produced and its response.
    fn prompt(&mut self, session_id: &str, text: &str) -> (Vec<Value>, Value) {
        let id = self.start_prompt(session_id, text);
        self.response(id)
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit, polling within the deadline.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The pipe closes with the process; wait for the reader to drain it.
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the mock agent did not exit within {DEADLINE:?}; stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for MockAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_response(message: &Value, id: u64) -> bool {
    message["id"] == id && message.get("method").is_none()
}

fn is_request(message: &Value, method: &str) -> bool {
    message["method"] == method && message.get("id").is_some()
}

/// The `session/update` payloads among `messages`, in order.
fn updates(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|message| message["method"] == "session/update")
        .map(|message| &message["params"]["update"])
        .collect()
}

/// The concatenated `agent_message_chunk` texts among `messages`.
fn reply_text(messages: &[Value]) -> String {
    updates(messages)
        .into_iter()
        .filter(|update| update["sessionUpdate"] == "agent_message_chunk")
        .map(|update| update["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn initialize_reports_version_capabilities_and_auth_methods() {
    let mut agent = MockAgent::spawn(&[]);
    let response = agent.initialize();
    let result = &response["result"];
    assert_eq!(result["agentInfo"]["name"], "mock-acp-agent");
    assert_eq!(result["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        result["agentCapabilities"]["promptCapabilities"],
        json!({ "image": true, "audio": false, "embeddedContext": true })
    );
    assert_eq!(
        result["agentCapabilities"]["sessionCapabilities"],
        json!({ "resume": {}, "close": {} })
    );
    assert_eq!(result["authMethods"][0]["id"], "mock-login");
}

#[test]
fn requests_before_initialize_and_unknown_methods_are_rejected() {
    let mut agent = MockAgent::spawn(&[]);
    let early = agent.request("session/new", json!({ "cwd": "/tmp", "mcpServers": [] }));
    assert_eq!(early["error"]["code"], -32600, "{early}");
    agent.initialize();
    let unknown = agent.request("session/teleport", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let relative = agent.request("session/new", json!({ "cwd": "tmp", "mcpServers": [] }));
    assert_eq!(relative["error"]["code"], -32602, "{relative}");
    let missing = agent.request(
        "session/load",
        json!({ "sessionId": "nope", "cwd": "/tmp", "mcpServers": [] }),
    );
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
}

#[test]
fn bad_json_gets_parse_error_with_null_id() {
    let mut agent = MockAgent::spawn(&[]);
    agent.send_raw("{not json");
    let response = agent.next_message().expect("an answer");
    assert_eq!(response["error"]["code"], -32700, "{response}");
    assert_eq!(response["id"], Value::Null);
}

#[test]
fn batch_gets_invalid_request_with_null_id() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    agent.send_raw(
        r#"[{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":1}}]"#,
    );
    let response = agent.next_message().expect("an answer");
    assert_eq!(response["error"]["code"], -32600, "{response}");
    assert_eq!(response["id"], Value::Null);
}

#[test]
fn prompt_echoes_user_text_in_a_chunk_then_ends_turn_with_usage() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    let (messages, response) = agent.prompt(&session_id, "hello mock");

    let updates = updates(&messages);
    assert_eq!(updates.len(), 1, "{messages:#?}");
    assert_eq!(updates[0]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(updates[0]["content"]["text"], "ECHO: hello mock");
    assert!(updates[0]["messageId"].is_string(), "{}", updates[0]);
    assert_eq!(messages[0]["params"]["sessionId"], session_id.as_str());

    let result = &response["result"];
    assert_eq!(result["stopReason"], "end_turn", "{response}");
    // "hello mock" is 10 bytes, "ECHO: hello mock" 16: a token per 4 bytes, rounded up.
    assert_eq!(
        result["usage"],
        json!({ "inputTokens": 3, "outputTokens": 4, "totalTokens": 7 })
    );
}

#[test]
fn json_directive_replaces_the_echo_and_chunks_split_it() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();

    let (messages, response) = agent.prompt(&session_id, "ignored\n@mock json {\"ok\": true}");
    assert_eq!(reply_text(&messages), "{\"ok\": true}");
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let (messages, _) = agent.prompt(&session_id, "@mock reply abcdefghi\n@mock chunks 3");
    let chunks = updates(&messages);
    let texts: Vec<_> = chunks
        .iter()
        .map(|update| &update["content"]["text"])
        .collect();
    assert_eq!(texts, ["abc", "def", "ghi"]);
    assert!(
        chunks
            .iter()
            .all(|update| update["messageId"] == chunks[0]["messageId"]),
        "chunks of one message share its id: {chunks:#?}"
    );

    let (_, stopped) = agent.prompt(&session_id, "@mock stop max_tokens");
    assert_eq!(stopped["result"]["stopReason"], "max_tokens");
    let (_, failed) = agent.prompt(&session_id, "@mock usage_limit");
    assert_eq!(failed["error"]["code"], -32603);
    assert_eq!(failed["error"]["data"]["kind"], "usage_limit");
}

#[test]
fn selected_model_and_mode_reach_the_agent() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();

    let response = agent.request(
        "session/set_config_option",
        json!({ "sessionId": session_id, "configId": "model", "value": "mock-smart" }),
    );
    let options = response["result"]["configOptions"]
        .as_array()
        .unwrap_or_else(|| panic!("no configOptions: {response}"));
    assert_eq!(options.len(), 2);
    assert_eq!(options[1]["currentValue"], "mock-smart");

    let invalid = agent.request(
        "session/set_config_option",
        json!({ "sessionId": session_id, "configId": "model", "value": "mock-huge" }),
    );
    assert_eq!(invalid["error"]["code"], -32602, "{invalid}");

    let id = agent.start_request(
        "session/set_mode",
        json!({ "sessionId": session_id, "modeId": "plan" }),
    );
    let (before, response) = agent.response(id);
    assert_eq!(response["result"], json!({}));
    assert_eq!(updates(&before)[0]["sessionUpdate"], "current_mode_update");
    assert_eq!(updates(&before)[0]["currentModeId"], "plan");

    let (messages, _) = agent.prompt(&session_id, "@mock echo_model");
    assert_eq!(reply_text(&messages), "MODEL: mock-smart MODE: plan");
}

#[test]
fn cancel_interrupts_a_hanging_turn() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    let id = agent.start_prompt(&session_id, "@mock thought waiting\n@mock hang");
    // The thought arrives just before the wait starts.
    agent.read_until(|message| {
        message["params"]["update"]["sessionUpdate"] == "agent_thought_chunk"
    });
    agent.notify("session/cancel", json!({ "sessionId": session_id }));
    let (_, response) = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
}

#[test]
fn cancel_stop_override_answers_end_turn() {
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_CANCEL_STOP", "end_turn")]);
    agent.initialize();
    let session_id = agent.new_session();
    let id = agent.start_prompt(&session_id, "@mock delay 600000");
    agent.notify("session/cancel", json!({ "sessionId": session_id }));
    let (_, response) = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
}

#[test]
fn concurrent_sessions_run_independently() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let hanging = agent.new_session();
    let quick = agent.new_session();
    assert_ne!(hanging, quick);
    let hung_id = agent.start_prompt(&hanging, "@mock hang");
    // The second session's turn finishes while the first one waits.
    let (messages, response) = agent.prompt(&quick, "second");
    assert_eq!(reply_text(&messages), "ECHO: second");
    assert_eq!(response["result"]["stopReason"], "end_turn");
    agent.notify("session/cancel", json!({ "sessionId": hanging }));
    let (_, response) = agent.response(hung_id);
    assert_eq!(response["result"]["stopReason"], "cancelled");
}

#[test]
fn permission_round_trip_and_cancel_while_pending() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();

    let id = agent.start_prompt(&session_id, "@mock permission");
    let (_, request) =
        agent.read_until(|message| is_request(message, "session/request_permission"));
    // The agent numbers its own requests from 0.
    assert_eq!(request["id"], 0, "{request}");
    let kinds: Vec<_> = request["params"]["options"]
        .as_array()
        .expect("options")
        .iter()
        .map(|option| option["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["allow_once", "reject_once"]);
    agent.send(&json!({
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": { "outcome": { "outcome": "selected", "optionId": "allow" } },
    }));
    let (messages, response) = agent.response(id);
    assert_eq!(reply_text(&messages), "PERMISSION: allow");
    assert_eq!(response["result"]["stopReason"], "end_turn");

    // After a cancel the request stays pending until the client answers it.
    let id = agent.start_prompt(&session_id, "@mock permission");
    let (_, request) =
        agent.read_until(|message| is_request(message, "session/request_permission"));
    agent.notify("session/cancel", json!({ "sessionId": session_id }));
    agent.send(&json!({
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": { "outcome": { "outcome": "cancelled" } },
    }));
    let (_, response) = agent.response(id);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
}

#[test]
fn file_system_requests_go_to_the_client() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();

    let id = agent.start_prompt(
        &session_id,
        "@mock write /tmp/x.txt some text\n@mock read /tmp/x.txt",
    );
    let (_, write) = agent.read_until(|message| is_request(message, "fs/write_text_file"));
    assert_eq!(write["params"]["path"], "/tmp/x.txt");
    assert_eq!(write["params"]["content"], "some text");
    agent.send(&json!({ "jsonrpc": "2.0", "id": write["id"], "result": {} }));
    let (_, read) = agent.read_until(|message| is_request(message, "fs/read_text_file"));
    agent.send(&json!({
        "jsonrpc": "2.0",
        "id": read["id"],
        "error": { "code": -32002, "message": "Resource not found" },
    }));
    let (messages, _) = agent.response(id);
    assert_eq!(
        reply_text(&messages),
        "WROTE: /tmp/x.txt\nERROR -32002: Resource not found"
    );
}

#[test]
fn auth_is_required_until_authenticate() {
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_AUTH", "required")]);
    agent.initialize();
    let refused = agent.request("session/new", json!({ "cwd": "/tmp", "mcpServers": [] }));
    assert_eq!(
        refused["error"],
        json!({ "code": -32000, "message": "Authentication required" })
    );
    let wrong = agent.request("authenticate", json!({ "methodId": "other" }));
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let accepted = agent.request("authenticate", json!({ "methodId": "mock-login" }));
    assert!(accepted["result"].is_object(), "{accepted}");
    agent.new_session();
}

#[test]
fn crash_sends_one_chunk_then_exits_2_without_responding() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    agent.start_prompt(&session_id, "boom\n@mock crash");
    let chunk = agent.next_message().expect("one chunk");
    assert_eq!(chunk["params"]["update"]["content"]["text"], "ECHO: boom");
    assert_eq!(agent.next_message(), None, "nothing after the chunk");
    assert_eq!(agent.wait_exit().code(), Some(2));
}

#[test]
fn crash_on_method_exits_3_without_answering() {
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_CRASH_ON", "session/new")]);
    agent.initialize();
    agent.start_request("session/new", json!({ "cwd": "/tmp", "mcpServers": [] }));
    assert_eq!(agent.next_message(), None);
    assert_eq!(agent.wait_exit().code(), Some(3));
}

#[test]
fn log_file_records_inbound_messages() {
    let directory = tempfile::tempdir().expect("temp dir");
    let log = directory.path().join("inbound.jsonl");
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_LOG", log.to_str().expect("utf-8 path"))]);
    agent.initialize();
    let session_id = agent.new_session();
    agent.prompt(&session_id, "logged");
    agent.close_stdin();
    assert_eq!(agent.wait_exit().code(), Some(0));

    let text = std::fs::read_to_string(&log).expect("read the log");
    let methods: Vec<String> = text
        .lines()
        .map(|line| {
            let message: Value = serde_json::from_str(line).expect("one JSON value per line");
            message["method"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(methods, ["initialize", "session/new", "session/prompt"]);
}

#[test]
fn stdin_eof_exits_0() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    agent.close_stdin();
    assert_eq!(agent.next_message(), None);
    assert_eq!(agent.wait_exit().code(), Some(0));
}

#[test]
fn exit_on_eof_0_keeps_running_after_eof() {
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_EXIT_ON_EOF", "0")]);
    agent.initialize();
    let session_id = agent.new_session();
    // The default agent would exit at EOF before this turn ends; this one still answers.
    let id = agent.start_prompt(&session_id, "@mock delay 200\nstill here");
    agent.close_stdin();
    let (messages, _) = agent.response(id);
    assert_eq!(reply_text(&messages), "ECHO: still here");
    assert!(agent.child.try_wait().expect("try_wait").is_none());
}

#[test]
fn sessions_load_resume_switch_model_and_close() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    let loaded = agent.request(
        "session/load",
        json!({ "sessionId": session_id, "cwd": "/tmp", "mcpServers": [] }),
    );
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "default",
        "{loaded}"
    );
    let resumed = agent.request(
        "session/resume",
        json!({ "sessionId": session_id, "cwd": "/tmp" }),
    );
    assert!(resumed["result"]["configOptions"].is_array(), "{resumed}");

    let legacy = agent.request(
        "session/set_model",
        json!({ "sessionId": session_id, "modelId": "mock-smart" }),
    );
    assert_eq!(legacy["result"], json!({}), "{legacy}");
    let (messages, _) = agent.prompt(&session_id, "@mock echo_model");
    assert_eq!(reply_text(&messages), "MODEL: mock-smart MODE: default");

    let closed = agent.request("session/close", json!({ "sessionId": session_id }));
    assert_eq!(closed["result"], json!({}), "{closed}");
    let (_, gone) = agent.prompt(&session_id, "anyone?");
    assert_eq!(gone["error"]["code"], -32002, "{gone}");
}

#[test]
fn turn_verbs_stream_in_order_and_errors_end_the_turn() {
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    let (messages, response) = agent.prompt(
        &session_id,
        "@mock thought pondering\n@mock tool Read file\n@mock usage_null\n@mock stderr to the log\nhi",
    );
    let kinds: Vec<_> = updates(&messages)
        .iter()
        .map(|update| update["sessionUpdate"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_thought_chunk",
            "tool_call",
            "tool_call_update",
            "usage_update",
            "agent_message_chunk"
        ]
    );
    assert_eq!(updates(&messages)[1]["title"], "Read file");
    assert_eq!(updates(&messages)[2]["status"], "completed");
    assert_eq!(updates(&messages)[3]["used"], Value::Null);
    assert_eq!(reply_text(&messages), "ECHO: hi");
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let (_, failed) = agent.prompt(&session_id, "@mock error -32099 custom failure");
    assert_eq!(
        failed["error"],
        json!({ "code": -32099, "message": "custom failure" })
    );
    let (_, auth) = agent.prompt(&session_id, "@mock auth_required");
    assert_eq!(auth["error"]["code"], -32000);
    let (_, typo) = agent.prompt(&session_id, "@mock replly oops");
    assert_eq!(typo["error"]["code"], -32602, "{typo}");

    let (messages, response) = agent.prompt(&session_id, "bye\n@mock exit_after_reply");
    assert_eq!(reply_text(&messages), "ECHO: bye");
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(agent.next_message(), None);
    assert_eq!(agent.wait_exit().code(), Some(0));
    assert!(agent.stderr().contains("to the log"), "{}", agent.stderr());
}

#[test]
fn initialize_waits_for_the_configured_delay() {
    let mut agent = MockAgent::spawn(&[("MOCK_ACP_INIT_DELAY_MS", "150")]);
    let started = Instant::now();
    agent.initialize();
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[test]
fn pid_file_names_the_agent_and_its_child_in_one_process_group() {
    let directory = tempfile::tempdir().expect("temp dir");
    let pid_file = directory.path().join("pids");
    let mut agent = MockAgent::spawn_with(
        &[
            ("MOCK_ACP_PID_FILE", pid_file.to_str().expect("utf-8 path")),
            ("MOCK_ACP_SPAWN_CHILD", "1"),
        ],
        true,
    );
    // The pids are written before the agent reads stdin, so they are there once it answers.
    agent.initialize();
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .expect("read the pid file")
        .lines()
        .map(|line| line.parse().expect("a pid per line"))
        .collect();
    let agent_pid = i32::try_from(agent.child.id()).expect("pid fits i32");
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_eq!(pids[0], agent_pid);

    killpg(Pid::from_raw(agent_pid), Signal::SIGKILL).expect("kill the agent's group");
    agent.wait_exit();
    let deadline = Instant::now() + DEADLINE;
    while is_alive(pids[1]) {
        assert!(
            Instant::now() < deadline,
            "the child {} outlived its group kill",
            pids[1]
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// True while `pid` runs; a zombie waiting for a reaper that may be slow counts as gone.
fn is_alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some(Some('Z' | 'X')))
}

#[test]
fn a_prompt_that_asks_for_a_schema_gets_a_value_that_matches_it() {
    let schema = json!({
        "type": "object",
        "properties": {
            "files": { "type": "array", "items": { "type": "string" }, "maxItems": 5 },
            "verdict": { "enum": ["ok", "broken"] },
            "score": { "type": "integer", "minimum": 3 }
        },
        "required": ["files", "verdict", "score"]
    });
    let prompt = format!(
        "List the files.\n\n{}",
        agentprism::engine::schema::output_instructions(&schema)
    );
    let mut agent = MockAgent::spawn(&[]);
    agent.initialize();
    let session_id = agent.new_session();
    let (messages, response) = agent.prompt(&session_id, &prompt);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let text = reply_text(&messages);
    let value = agentprism::engine::schema::extract_json(&text)
        .unwrap_or_else(|| panic!("no JSON in the answer: {text}"));
    agentprism::engine::schema::validate(&schema, &value)
        .unwrap_or_else(|error| panic!("{value} does not match: {error}"));
    assert_eq!(value["verdict"], "ok", "{value}");
    assert_eq!(value["score"], 3, "{value}");

    // The engine's re-prompt quotes the schema the same way; an explicit reply still wins.
    let repair = agentprism::engine::schema::repair_instructions("not JSON", &schema);
    let (messages, _) = agent.prompt(&session_id, &repair);
    let again = agentprism::engine::schema::extract_json(&reply_text(&messages));
    assert_eq!(again.as_ref(), Some(&value));
    let (messages, _) = agent.prompt(&session_id, &format!("{prompt}\n@mock reply plain"));
    assert_eq!(reply_text(&messages), "plain");
}
