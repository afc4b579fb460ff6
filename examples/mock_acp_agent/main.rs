//! The scripted mock ACP agent (acp.md section 5): the peer our ACP client's tests talk to.
//!
//! It speaks ACP v1 (newline-delimited JSON-RPC 2.0 on stdin/stdout) like a real coding agent
//! would, but every turn is scripted by `@mock <verb> [args]` lines inside the prompt, so a
//! test can ask for chunked replies, thoughts, tool calls, permission and file-system round
//! trips, waits that only a `session/cancel` (or a file appearing) ends, JSON-RPC errors, usage limits and crashes,
//! and get the same messages in the same order every time. Environment variables (`MOCK_ACP_*`,
//! listed on [`Settings`]) reproduce the quirks of real adapters: auth-gated sessions, agents
//! that ignore stdin EOF, agents that answer a cancel with `end_turn`; with
//! `MOCK_ACP_MCP_HTTP=1` it takes HTTP MCP servers and `@mock mcp_call` calls their tools.
//!
//! Without directives a turn echoes the prompt (`ECHO: <text>`), except a prompt that asks for
//! JSON matching a schema, which gets a value made from that schema by the engine's dry-run
//! fabricator (`agentprism::engine::schema::fabricate`, the one use of the crate here).
//!
//! Only std and serde_json besides that: the main thread reads stdin, every prompt turn runs on its own
//! worker thread (so sessions run concurrently and a turn can wait while the reader keeps
//! delivering cancels and client responses), and every write to stdout goes through one
//! mutex so that lines never interleave. `agent.rs` answers the connection's methods, `turn.rs`
//! plays out a prompt turn; the types they share are here.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::{self, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod agent;
mod turn;

const PROTOCOL_VERSION: u64 = 1;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const AUTH_REQUIRED: i64 = -32000;
const RESOURCE_NOT_FOUND: i64 = -32002;

/// The only auth method the mock advertises and accepts.
const AUTH_METHOD_ID: &str = "mock-login";

/// Session modes as `(id, name)`; the first is where a new session starts.
const MODES: [(&str, &str); 2] = [("default", "Default"), ("plan", "Plan")];
/// Models as `(value, name)`; the first is where a new session starts.
const MODELS: [(&str, &str); 2] = [("mock-fast", "Mock Fast"), ("mock-smart", "Mock Smart")];
/// The reasoning levels `MOCK_ACP_EFFORT_OPTION=1` offers: codex-acp's names.
const EFFORT_LEVELS: [&str; 5] = ["minimal", "low", "medium", "high", "xhigh"];

fn main() {
    let settings = Settings::from_env();
    record_pids(&settings);
    let agent = Arc::new(Agent::new(settings));

    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => agent.handle_line(&line),
            Err(error) => {
                eprintln!("mock-acp-agent: reading stdin failed: {error}");
                break;
            }
        }
    }

    if agent.settings.exit_on_eof {
        eprintln!("mock-acp-agent: stdin closed, exiting");
        process::exit(0);
    }
    // Like codex-acp: stdin is gone, but the process lingers (turns in flight still finish)
    // until someone signals it. This is what forces the client to escalate to a kill.
    eprintln!("mock-acp-agent: stdin closed, staying alive (MOCK_ACP_EXIT_ON_EOF=0)");
    loop {
        thread::park();
    }
}

/// Behaviour switches read once from the environment at start.
struct Settings {
    /// `MOCK_ACP_AUTH=required`: session/new, load and resume fail with -32000 until the client
    /// calls `authenticate` with `mock-login`.
    auth_required: bool,
    /// `MOCK_ACP_LOG=path`: every inbound message is appended there as one JSON line, so tests
    /// can assert what the client sent (or did not send).
    log_path: Option<PathBuf>,
    /// `MOCK_ACP_EXIT_ON_EOF=0` turns this off: the agent ignores stdin EOF, as codex does.
    exit_on_eof: bool,
    /// `MOCK_ACP_CANCEL_STOP`: the stop reason of a cancelled turn (opencode says `end_turn`).
    cancel_stop: String,
    /// `MOCK_ACP_INIT_DELAY_MS`: how long `initialize` takes, to exercise handshake deadlines.
    init_delay: Duration,
    /// `MOCK_ACP_SESSION_DELAY_MS`: how long `session/new` takes, to exercise probe limits.
    session_delay: Duration,
    /// `MOCK_ACP_CRASH_ON=<method>`: exit 3 without answering when that method arrives.
    crash_on: Option<String>,
    /// `MOCK_ACP_PID_FILE=path`: our pid (and the child's, see below) is appended there, so
    /// tests can check that the processes are gone after the client shuts down.
    pid_file: Option<PathBuf>,
    /// `MOCK_ACP_SPAWN_CHILD=1`: start a `sleep 300` in our process group, like claude's
    /// helpers, so tests can check that the whole group is killed, not only this process.
    spawn_child: bool,
    /// `MOCK_ACP_EFFORT_OPTION=<level,level,…>` (`1`: [`EFFORT_LEVELS`]): sessions advertise a
    /// `reasoning_effort` option of category `thought_level` with these values, the first
    /// current, as codex-acp does; empty when unset.
    effort_levels: Vec<String>,
    /// `MOCK_ACP_LOAD_SESSION=0`: `initialize` advertises neither `loadSession` nor session
    /// resume, like an agent that cannot reopen a session.
    reopen: bool,
    /// `MOCK_ACP_LOAD_UNKNOWN=1`: `session/load` and `session/resume` accept a session id this
    /// process never created (in the recorded `cwd`), standing in for agents that keep their
    /// sessions on disk and so reopen them after a restart.
    load_unknown: bool,
    /// `MOCK_ACP_MCP_HTTP=1`: `initialize` advertises `mcpCapabilities.http`, so a client may
    /// pass HTTP MCP servers, which `@mock mcp_call` calls.
    mcp_http: bool,
    /// `MOCK_ACP_AGENT_NAME`: the `agentInfo.name` of `initialize` (`mock-acp-agent`), so a
    /// test can be taken for a real adapter (`@agentclientprotocol/claude-agent-acp`).
    agent_name: String,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Settings {
            auth_required: var("MOCK_ACP_AUTH").as_deref() == Some("required"),
            log_path: var("MOCK_ACP_LOG").map(PathBuf::from),
            exit_on_eof: var("MOCK_ACP_EXIT_ON_EOF").as_deref() != Some("0"),
            cancel_stop: var("MOCK_ACP_CANCEL_STOP").unwrap_or_else(|| "cancelled".to_owned()),
            init_delay: Duration::from_millis(
                var("MOCK_ACP_INIT_DELAY_MS")
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(0),
            ),
            session_delay: Duration::from_millis(
                var("MOCK_ACP_SESSION_DELAY_MS")
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(0),
            ),
            crash_on: var("MOCK_ACP_CRASH_ON"),
            pid_file: var("MOCK_ACP_PID_FILE").map(PathBuf::from),
            spawn_child: var("MOCK_ACP_SPAWN_CHILD").as_deref() == Some("1"),
            effort_levels: match var("MOCK_ACP_EFFORT_OPTION").as_deref() {
                None => Vec::new(),
                Some("1") => EFFORT_LEVELS
                    .iter()
                    .map(|level| level.to_string())
                    .collect(),
                Some(levels) => levels.split(',').map(str::to_owned).collect(),
            },
            reopen: var("MOCK_ACP_LOAD_SESSION").as_deref() != Some("0"),
            load_unknown: var("MOCK_ACP_LOAD_UNKNOWN").as_deref() == Some("1"),
            mcp_http: var("MOCK_ACP_MCP_HTTP").as_deref() == Some("1"),
            agent_name: var("MOCK_ACP_AGENT_NAME").unwrap_or_else(|| "mock-acp-agent".to_owned()),
        }
    }
}

/// The connection: settings, output, session table and the agent's own pending requests.
struct Agent {
    settings: Settings,
    /// Every outbound line is written and flushed under this lock, so concurrent turns never
    /// interleave partial lines.
    output: Mutex<io::Stdout>,
    log: Option<Mutex<File>>,
    state: Mutex<State>,
    /// Ids of the agent's own requests; they start at 0 like the SDK's, which is exactly the
    /// case where they collide with the client's ids.
    next_request_id: AtomicU64,
    /// Turns waiting for the client's answer to a request we sent, by request id.
    pending: Mutex<HashMap<u64, mpsc::Sender<Result<Value, RpcError>>>>,
    /// Counter behind message, tool-call and session ids, so every run hands out the same ids.
    next_serial: AtomicU64,
}

struct State {
    initialized: bool,
    authenticated: bool,
    sessions: HashMap<String, Session>,
}

struct Session {
    mode: String,
    model: String,
    /// The session's working directory, where `@mock write_cwd` writes.
    cwd: PathBuf,
    /// The current reasoning level and those on offer; empty without `MOCK_ACP_EFFORT_OPTION`.
    effort: String,
    effort_levels: Vec<String>,
    /// The `mcpServers` of `session/new`, which `@mock mcp_call` calls.
    mcp_servers: Vec<Value>,
    /// Cancel tokens of the turns running on this session; `session/cancel` fires them all.
    turns: Vec<Arc<CancelToken>>,
}

/// A JSON-RPC error object.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

/// Fired by `session/cancel` (or `session/close`); a turn checks it between steps and waits
/// on it instead of sleeping, so a cancel interrupts a wait at once.
#[derive(Default)]
struct CancelToken {
    cancelled: Mutex<bool>,
    signal: Condvar,
}

/// How a turn ends: a `session/prompt` result or a JSON-RPC error.
enum TurnEnd {
    Stop(String),
    Error(RpcError),
}

/// One `session/prompt` being played out on its worker thread.
struct Turn<'a> {
    agent: &'a Agent,
    session_id: String,
    cancel: Arc<CancelToken>,
    /// The reply replacing the default echo, built by `reply`, `json` and the round-trip verbs.
    reply: Option<String>,
    chunks: usize,
    stop_reason: String,
    exit_after_reply: bool,
    /// Bytes of text the agent streamed, for the deterministic usage numbers.
    output_bytes: usize,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    fn invalid_params(detail: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, format!("Invalid params: {}", detail.into()))
    }

    fn auth_required() -> RpcError {
        RpcError::new(AUTH_REQUIRED, "Authentication required")
    }

    fn session_not_found(session_id: &str) -> RpcError {
        RpcError::new(
            RESOURCE_NOT_FOUND,
            format!("Session not found: {session_id}"),
        )
        .with_data(json!({ "sessionId": session_id }))
    }

    fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }

    fn from_json(error: &Value) -> RpcError {
        RpcError {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            data: error.get("data").cloned(),
        }
    }
}

impl CancelToken {
    fn cancel(&self) {
        *lock(&self.cancelled) = true;
        self.signal.notify_all();
    }

    fn is_cancelled(&self) -> bool {
        *lock(&self.cancelled)
    }

    /// Waits until cancelled or, with a limit, until it runs out; true if cancelled.
    fn wait(&self, limit: Option<Duration>) -> bool {
        let deadline = limit.map(|limit| Instant::now() + limit);
        let mut cancelled = lock(&self.cancelled);
        while !*cancelled {
            match deadline {
                None => {
                    cancelled = self
                        .signal
                        .wait(cancelled)
                        .unwrap_or_else(|poison| poison.into_inner());
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    cancelled = self
                        .signal
                        .wait_timeout(cancelled, deadline - now)
                        .unwrap_or_else(|poison| poison.into_inner())
                        .0;
                }
            }
        }
        true
    }
}

/// Appends our pid (and the optional child's) to `MOCK_ACP_PID_FILE`.
fn record_pids(settings: &Settings) {
    let mut pids = vec![process::id()];
    if settings.spawn_child {
        // Null stdio: the child must not hold our pipes open, or the client would never see
        // EOF on our stdout after we die; only the process group ties it to us.
        match Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(mut child) => {
                pids.push(child.id());
                // Reaps it should it die before us.
                thread::spawn(move || child.wait());
            }
            Err(error) => eprintln!("mock-acp-agent: spawning the child failed: {error}"),
        }
    }
    let Some(path) = &settings.pid_file else {
        return;
    };
    let text: String = pids.iter().map(|pid| format!("{pid}\n")).collect();
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(error) = written {
        eprintln!(
            "mock-acp-agent: writing pid file {} failed: {error}",
            path.display()
        );
    }
}

/// Locks, ignoring poisoning: a panicked turn must not take the whole agent down with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
