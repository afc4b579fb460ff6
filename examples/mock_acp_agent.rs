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
//! mutex so that lines never interleave.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{self, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

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

impl Agent {
    fn new(settings: Settings) -> Agent {
        let log = settings.log_path.as_deref().and_then(|path| {
            match OpenOptions::new().create(true).append(true).open(path) {
                Ok(file) => Some(Mutex::new(file)),
                Err(error) => {
                    eprintln!(
                        "mock-acp-agent: opening log {} failed: {error}",
                        path.display()
                    );
                    None
                }
            }
        });
        Agent {
            settings,
            output: Mutex::new(io::stdout()),
            log,
            state: Mutex::new(State {
                initialized: false,
                authenticated: false,
                sessions: HashMap::new(),
            }),
            next_request_id: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            next_serial: AtomicU64::new(1),
        }
    }

    fn serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed)
    }

    /// Handles one inbound line: framing and JSON-RPC envelope checks, then routing.
    fn handle_line(self: &Arc<Self>, raw: &[u8]) {
        let Ok(text) = std::str::from_utf8(raw) else {
            self.log_inbound(&Value::String(String::from_utf8_lossy(raw).into_owned()));
            self.send_error(Value::Null, &RpcError::new(PARSE_ERROR, "Parse error"));
            return;
        };
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let message: Value = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(error) => {
                // Logged as a JSON string so the log stays one JSON value per line.
                self.log_inbound(&Value::String(text.to_owned()));
                let error =
                    RpcError::new(PARSE_ERROR, "Parse error").with_data(json!(error.to_string()));
                self.send_error(Value::Null, &error);
                return;
            }
        };
        self.log_inbound(&message);

        let Value::Object(object) = &message else {
            // ACP has no batches: an array is as invalid as a bare number.
            let error = RpcError::new(INVALID_REQUEST, "Invalid request").with_data(json!(
                "expected a single JSON-RPC object (batches are not supported)"
            ));
            self.send_error(Value::Null, &error);
            return;
        };
        let id = object.get("id").cloned();
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let error = RpcError::new(INVALID_REQUEST, "Invalid request")
                .with_data(json!("jsonrpc must be \"2.0\""));
            self.send_error(id.unwrap_or(Value::Null), &error);
            return;
        }
        match (object.get("method"), id) {
            (Some(Value::String(method)), id) => {
                if self.settings.crash_on.as_deref() == Some(method.as_str()) {
                    eprintln!("mock-acp-agent: crashing on {method} (MOCK_ACP_CRASH_ON)");
                    process::exit(3);
                }
                let params = object.get("params").cloned().unwrap_or(Value::Null);
                match id {
                    Some(id) => self.handle_request(id, method, params),
                    None => self.handle_notification(method, &params),
                }
            }
            (None, Some(id)) if object.contains_key("result") || object.contains_key("error") => {
                self.handle_response(&id, object.get("result"), object.get("error"));
            }
            (_, id) => {
                let error = RpcError::new(INVALID_REQUEST, "Invalid request")
                    .with_data(json!("neither a request, a notification nor a response"));
                self.send_error(id.unwrap_or(Value::Null), &error);
            }
        }
    }

    fn handle_request(self: &Arc<Self>, id: Value, method: &str, params: Value) {
        match self.dispatch(&id, method, &params) {
            Ok(Some(result)) => self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result })),
            // A prompt turn answers from its worker thread.
            Ok(None) => {}
            Err(error) => self.send_error(id, &error),
        }
    }

    /// Answers a request, or returns `None` when a worker thread will answer it later.
    fn dispatch(
        self: &Arc<Self>,
        id: &Value,
        method: &str,
        params: &Value,
    ) -> Result<Option<Value>, RpcError> {
        if method != "initialize" && !lock(&self.state).initialized {
            // What SDK 2.4.0 agents do before the handshake.
            return Err(RpcError::new(INVALID_REQUEST, "Invalid request")
                .with_data(json!("the connection is not initialized")));
        }
        let result = match method {
            "initialize" => self.initialize(params)?,
            "authenticate" => self.authenticate(params)?,
            "session/new" => self.new_session(params)?,
            "session/load" => self.reopen_session(params, true)?,
            "session/resume" => self.reopen_session(params, false)?,
            "session/close" => self.close_session(params)?,
            "session/set_mode" => self.set_mode(params)?,
            "session/set_config_option" => self.set_config_option(params)?,
            "session/set_model" => self.set_model(params)?,
            "session/prompt" => {
                self.start_turn(id.clone(), params)?;
                return Ok(None);
            }
            _ => {
                return Err(RpcError::new(METHOD_NOT_FOUND, "Method not found")
                    .with_data(json!({ "method": method })));
            }
        };
        Ok(Some(result))
    }

    fn handle_notification(&self, method: &str, params: &Value) {
        if !lock(&self.state).initialized {
            return;
        }
        if method == "session/cancel" {
            let Some(session_id) = params.get("sessionId").and_then(Value::as_str) else {
                eprintln!("mock-acp-agent: session/cancel without sessionId");
                return;
            };
            if let Some(session) = lock(&self.state).sessions.get(session_id) {
                for turn in &session.turns {
                    turn.cancel();
                }
            }
        }
        // Everything else (`$/cancel_request`, `_`-prefixed extensions) is ignored, as the
        // protocol asks of unknown notifications.
    }

    /// Routes the client's answer to one of our requests to the turn waiting for it.
    fn handle_response(&self, id: &Value, result: Option<&Value>, error: Option<&Value>) {
        let waiter = id.as_u64().and_then(|id| lock(&self.pending).remove(&id));
        let Some(waiter) = waiter else {
            eprintln!("mock-acp-agent: response to unknown request id {id}");
            return;
        };
        let answer = match error {
            Some(error) => Err(RpcError::from_json(error)),
            None => Ok(result.cloned().unwrap_or(Value::Null)),
        };
        // The turn may be gone (the process is about to exit); nothing to do then.
        let _ = waiter.send(answer);
    }

    fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
        if params
            .get("protocolVersion")
            .and_then(Value::as_u64)
            .is_none()
        {
            return Err(RpcError::invalid_params(
                "protocolVersion must be a non-negative integer",
            ));
        }
        if !self.settings.init_delay.is_zero() {
            thread::sleep(self.settings.init_delay);
        }
        lock(&self.state).initialized = true;
        let session_capabilities = if self.settings.reopen {
            json!({ "resume": {}, "close": {} })
        } else {
            json!({ "close": {} })
        };
        // Whatever version was asked for, answer 1, as the SDK's agents do: the client must
        // check the returned version.
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": self.settings.reopen,
                "promptCapabilities": { "image": true, "audio": false, "embeddedContext": true },
                "mcpCapabilities": { "http": self.settings.mcp_http, "sse": false },
                "sessionCapabilities": session_capabilities,
            },
            "authMethods": [{
                "id": AUTH_METHOD_ID,
                "name": "Mock login",
                "description": "Accepted by the mock agent without credentials",
            }],
            "agentInfo": { "name": self.settings.agent_name, "version": "0.1.0" },
        }))
    }

    fn authenticate(&self, params: &Value) -> Result<Value, RpcError> {
        let method_id = str_param(params, "methodId")?;
        if method_id != AUTH_METHOD_ID {
            return Err(RpcError::invalid_params(format!(
                "unknown auth method {method_id:?}"
            )));
        }
        lock(&self.state).authenticated = true;
        Ok(json!({}))
    }

    fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
        check_cwd(params)?;
        check_mcp_servers(params, true)?;
        if !self.settings.session_delay.is_zero() {
            thread::sleep(self.settings.session_delay);
        }
        let mut state = lock(&self.state);
        self.check_auth(&state)?;
        // Unique across processes, as a real agent's ids are: a later process never holds a
        // session of the same id by chance.
        let session_id = format!("mock-session-{}-{}", process::id(), self.serial());
        let levels = &self.settings.effort_levels;
        let session = Session {
            mode: MODES[0].0.to_owned(),
            model: MODELS[0].0.to_owned(),
            cwd: PathBuf::from(str_param(params, "cwd")?),
            effort: levels.first().cloned().unwrap_or_default(),
            effort_levels: levels.clone(),
            mcp_servers: params
                .get("mcpServers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            turns: Vec::new(),
        };
        let result = json!({
            "sessionId": session_id,
            "modes": modes_json(&session),
            "configOptions": config_options_json(&session),
        });
        state.sessions.insert(session_id, session);
        Ok(result)
    }

    /// `session/load` (which would replay history; the mock has none to replay) and
    /// `session/resume` of a session this process created (or any, with `load_unknown`).
    fn reopen_session(&self, params: &Value, load: bool) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        check_cwd(params)?;
        check_mcp_servers(params, load)?;
        let mut state = lock(&self.state);
        self.check_auth(&state)?;
        if self.settings.load_unknown && !state.sessions.contains_key(session_id) {
            let levels = &self.settings.effort_levels;
            let restored = Session {
                mode: MODES[0].0.to_owned(),
                model: MODELS[0].0.to_owned(),
                cwd: PathBuf::from(str_param(params, "cwd")?),
                effort: levels.first().cloned().unwrap_or_default(),
                effort_levels: levels.clone(),
                mcp_servers: Vec::new(),
                turns: Vec::new(),
            };
            state.sessions.insert(session_id.to_owned(), restored);
        }
        let session = state
            .sessions
            .get(session_id)
            .ok_or_else(|| RpcError::session_not_found(session_id))?;
        Ok(json!({
            "modes": modes_json(session),
            "configOptions": config_options_json(session),
        }))
    }

    fn close_session(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let session = lock(&self.state)
            .sessions
            .remove(session_id)
            .ok_or_else(|| RpcError::session_not_found(session_id))?;
        // A closed session's running turns end as cancelled.
        for turn in &session.turns {
            turn.cancel();
        }
        Ok(json!({}))
    }

    fn set_mode(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let mode_id = str_param(params, "modeId")?;
        self.with_session(session_id, |session| {
            session.mode = pick(&MODES, mode_id, "mode")?;
            Ok(())
        })?;
        // Notification first, then the response, as real agents order them.
        self.send_update(
            session_id,
            json!({ "sessionUpdate": "current_mode_update", "currentModeId": mode_id }),
        );
        Ok(json!({}))
    }

    fn set_config_option(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let config_id = str_param(params, "configId")?;
        let value = str_param(params, "value")?;
        self.with_session(session_id, |session| {
            match config_id {
                "mode" => session.mode = pick(&MODES, value, "mode")?,
                "model" => session.model = pick(&MODELS, value, "model")?,
                "reasoning_effort" if !session.effort_levels.is_empty() => {
                    if !session.effort_levels.iter().any(|level| level == value) {
                        return Err(RpcError::invalid_params(format!(
                            "unknown reasoning_effort {value:?}"
                        )));
                    }
                    session.effort = value.to_owned();
                }
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "unknown config option {config_id:?}"
                    )));
                }
            }
            Ok(json!({ "configOptions": config_options_json(session) }))
        })
    }

    /// The legacy way to pick a model, gone from the 2.4.0 schema but still accepted by
    /// claude-agent-acp; kept so the client's fallback path has a peer.
    fn set_model(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let model_id = str_param(params, "modelId")?;
        self.with_session(session_id, |session| {
            session.model = pick(&MODELS, model_id, "model")?;
            Ok(json!({}))
        })
    }

    /// Registers the turn's cancel token before the worker starts, so a cancel that arrives
    /// right behind the prompt still reaches it.
    fn start_turn(self: &Arc<Self>, id: Value, params: &Value) -> Result<(), RpcError> {
        let session_id = str_param(params, "sessionId")?.to_owned();
        let Some(blocks) = params.get("prompt").and_then(Value::as_array) else {
            return Err(RpcError::invalid_params(
                "prompt must be an array of content blocks",
            ));
        };
        let text = blocks
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let cancel = Arc::new(CancelToken::default());
        self.with_session(&session_id, |session| {
            session.turns.push(Arc::clone(&cancel));
            Ok(())
        })?;
        let agent = Arc::clone(self);
        thread::spawn(move || agent.run_turn(id, session_id, text, cancel));
        Ok(())
    }

    fn run_turn(&self, id: Value, session_id: String, text: String, cancel: Arc<CancelToken>) {
        let mut turn = Turn {
            agent: self,
            session_id: session_id.clone(),
            cancel: Arc::clone(&cancel),
            reply: None,
            chunks: 1,
            stop_reason: "end_turn".to_owned(),
            exit_after_reply: false,
            output_bytes: 0,
        };
        let end = turn.play(&text);
        if let Some(session) = lock(&self.state).sessions.get_mut(&session_id) {
            session.turns.retain(|token| !Arc::ptr_eq(token, &cancel));
        }
        match end {
            TurnEnd::Stop(stop_reason) => {
                let input = token_count(text.len());
                let output = token_count(turn.output_bytes);
                let result = json!({
                    "stopReason": stop_reason,
                    "usage": {
                        "inputTokens": input,
                        "outputTokens": output,
                        "totalTokens": input + output,
                    },
                });
                self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result }));
            }
            TurnEnd::Error(error) => self.send_error(id, &error),
        }
        if turn.exit_after_reply {
            eprintln!("mock-acp-agent: exiting after the reply (@mock exit_after_reply)");
            process::exit(0);
        }
    }

    fn check_auth(&self, state: &State) -> Result<(), RpcError> {
        if self.settings.auth_required && !state.authenticated {
            return Err(RpcError::auth_required());
        }
        Ok(())
    }

    fn with_session<T>(
        &self,
        session_id: &str,
        change: impl FnOnce(&mut Session) -> Result<T, RpcError>,
    ) -> Result<T, RpcError> {
        let mut state = lock(&self.state);
        let session = state
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| RpcError::session_not_found(session_id))?;
        change(session)
    }

    /// Sends a request to the client and blocks the calling turn until the answer arrives.
    fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel();
        lock(&self.pending).insert(id, sender);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        receiver
            .recv()
            .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "connection closed")))
    }

    fn send_update(&self, session_id: &str, update: Value) {
        self.send(&json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": { "sessionId": session_id, "update": update },
        }));
    }

    fn send_error(&self, id: Value, error: &RpcError) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() }));
    }

    /// Writes the start of a message and `mebibytes` MiB of its text, never its end.
    fn write_unterminated(&self, mebibytes: usize) {
        let piece = "x".repeat(1 << 20);
        let mut output = lock(&self.output);
        let start = r#"{"jsonrpc":"2.0","method":"session/update","params":{"text":""#;
        if write!(output, "{start}").is_err() {
            return;
        }
        for _ in 0..mebibytes {
            if output
                .write_all(piece.as_bytes())
                .and_then(|()| output.flush())
                .is_err()
            {
                eprintln!("mock-acp-agent: the client stopped reading the endless line");
                return;
            }
        }
    }

    fn send(&self, message: &Value) {
        let line = message.to_string();
        let mut output = lock(&self.output);
        // A client that stopped reading is not our problem to report beyond stderr; the
        // process ends at stdin EOF anyway.
        if let Err(error) = writeln!(output, "{line}").and_then(|()| output.flush()) {
            eprintln!("mock-acp-agent: writing stdout failed: {error}");
        }
    }

    fn log_inbound(&self, message: &Value) {
        if let Some(log) = &self.log {
            let mut file = lock(log);
            // One write per line: agents of several processes append to one log, and a line
            // written in pieces could interleave with another's.
            let line = format!("{message}\n");
            if let Err(error) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
                eprintln!("mock-acp-agent: writing the log failed: {error}");
            }
        }
    }
}

impl Turn<'_> {
    /// Runs the `@mock` directives in order, then streams the reply.
    fn play(&mut self, text: &str) -> TurnEnd {
        let mut user_lines = Vec::new();
        let mut directives = Vec::new();
        for line in text.lines() {
            match parse_directive(line) {
                Some(directive) => directives.push(directive),
                None => user_lines.push(line),
            }
        }
        let user_text = user_lines.join("\n").trim().to_owned();

        for (verb, args) in directives {
            if self.cancel.is_cancelled() {
                return self.cancelled();
            }
            match self.directive(verb, args, &user_text) {
                Ok(None) => {}
                Ok(Some(end)) => return end,
                Err(error) => return TurnEnd::Error(error),
            }
        }

        let reply = self
            .reply
            .take()
            .or_else(|| schema_answer(&user_text))
            .unwrap_or_else(|| format!("ECHO: {user_text}"));
        let message_id = self.message_id();
        for chunk in split_chunks(&reply, self.chunks) {
            // Checked between chunks, so a cancel interrupts a stream.
            if self.cancel.is_cancelled() {
                return self.cancelled();
            }
            self.send_chunk("agent_message_chunk", &message_id, &chunk);
        }
        TurnEnd::Stop(self.stop_reason.clone())
    }

    /// Plays one directive; `Some` ends the turn there.
    fn directive(
        &mut self,
        verb: &str,
        args: &str,
        user_text: &str,
    ) -> Result<Option<TurnEnd>, RpcError> {
        match verb {
            "reply" => self.reply = Some(args.to_owned()),
            // `@mock once PATH VERB ARGS`: plays `@mock VERB ARGS` only when PATH does not
            // exist yet, creating it, so a call fails once and succeeds when it runs again
            // (in this process or another).
            "once" => {
                let (path, directive) = args
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| RpcError::invalid_params("@mock once needs PATH VERB [ARGS]"))?;
                let first = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .is_ok();
                if first {
                    let directive = directive.trim();
                    let (verb, rest) = directive
                        .split_once(char::is_whitespace)
                        .unwrap_or((directive, ""));
                    return self.directive(verb, rest.trim(), user_text);
                }
            }
            "json" => {
                serde_json::from_str::<Value>(args)
                    .map_err(|error| RpcError::invalid_params(format!("@mock json: {error}")))?;
                self.reply = Some(args.to_owned());
            }
            "chunks" => {
                self.chunks = args
                    .parse()
                    .ok()
                    .filter(|&count| count > 0)
                    .ok_or_else(|| RpcError::invalid_params("@mock chunks needs N >= 1"))?;
            }
            "delay" => {
                let ms = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock delay needs milliseconds"))?;
                if self.cancel.wait(Some(Duration::from_millis(ms))) {
                    return Ok(Some(self.cancelled()));
                }
            }
            "hang" => {
                self.cancel.wait(None);
                return Ok(Some(self.cancelled()));
            }
            // `@mock big_answer MIB`: streams MIB MiB of answer text in 1 MiB chunks, then the
            // turn goes on as usual (its reply follows).
            "big_answer" => {
                let mebibytes: usize = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock big_answer needs MIB"))?;
                let piece = "y".repeat(1 << 20);
                let message_id = self.message_id();
                for _ in 0..mebibytes {
                    if self.cancel.is_cancelled() {
                        return Ok(Some(self.cancelled()));
                    }
                    self.send_chunk("agent_message_chunk", &message_id, &piece);
                }
            }
            // `@mock endless_line MIB`: writes one message that never ends, MIB MiB of it in
            // 1 MiB pieces with no newline (until the client stops reading), then hangs: what a
            // broken or hostile agent does to a reader that buffers a line without limit.
            "endless_line" => {
                let mebibytes: usize = args
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock endless_line needs MIB"))?;
                self.agent.write_unterminated(mebibytes);
                self.cancel.wait(None);
                return Ok(Some(self.cancelled()));
            }
            // Holds the turn until a test creates the file (or cancels the turn), so a test
            // decides exactly when a call ends.
            "wait_file" => {
                let path = PathBuf::from(args.trim());
                while !path.exists() {
                    if self.cancel.wait(Some(Duration::from_millis(10))) {
                        return Ok(Some(self.cancelled()));
                    }
                }
            }
            "thought" => {
                let message_id = self.message_id();
                self.send_chunk("agent_thought_chunk", &message_id, args);
            }
            "tool" => {
                let tool_call_id = format!("mock-tool-{}", self.agent.serial());
                self.update(json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": tool_call_id,
                    "title": args,
                    "kind": "other",
                    "status": "in_progress",
                }));
                self.update(json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_call_id,
                    "status": "completed",
                    "content": [{ "type": "content", "content": { "type": "text", "text": "done" } }],
                }));
            }
            "permission" => {
                let outcome = self.ask_permission(args);
                self.add_reply(format!("PERMISSION: {outcome}"));
            }
            "read" => {
                let answer = self.agent.request(
                    "fs/read_text_file",
                    json!({ "sessionId": self.session_id, "path": args }),
                );
                self.add_reply(match answer {
                    Ok(result) => result
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    Err(error) => format!("ERROR {}: {}", error.code, error.message),
                });
            }
            "write" => {
                let (path, content) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
                let answer = self.agent.request(
                    "fs/write_text_file",
                    json!({ "sessionId": self.session_id, "path": path, "content": content }),
                );
                self.add_reply(match answer {
                    Ok(_) => format!("WROTE: {path}"),
                    Err(error) => format!("ERROR {}: {}", error.code, error.message),
                });
            }
            "write_cwd" => {
                let reply = self.write_in_cwd(args);
                self.add_reply(reply);
            }
            "stop" if !args.is_empty() => self.stop_reason = args.to_owned(),
            "error" => {
                let (code, message) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
                let code = code
                    .parse()
                    .map_err(|_| RpcError::invalid_params("@mock error needs CODE MSG"))?;
                return Ok(Some(TurnEnd::Error(RpcError::new(code, message.trim()))));
            }
            "auth_required" => return Ok(Some(TurnEnd::Error(RpcError::auth_required()))),
            "usage_limit" => {
                // Shaped like codex's usage-limit failure: -32603 with a tell-tale message,
                // followed by the words given (say, when to try again).
                let message = format!("You've hit your usage limit. {}", args.trim());
                let error = RpcError::new(INTERNAL_ERROR, message.trim_end())
                    .with_data(json!({ "kind": "usage_limit" }));
                return Ok(Some(TurnEnd::Error(error)));
            }
            "crash" => {
                let reply = self
                    .reply
                    .clone()
                    .unwrap_or_else(|| format!("ECHO: {user_text}"));
                let message_id = self.message_id();
                self.send_chunk("agent_message_chunk", &message_id, &reply);
                eprintln!("mock-acp-agent: crashing mid-turn (@mock crash)");
                process::exit(2);
            }
            "stderr" => eprintln!("{args}"),
            // `@mock claude_transcript <JSON line>`: appends the line to this session's Claude
            // Code transcript (`$HOME/.claude/projects/mock/<session id>.jsonl`), where
            // claude-agent-acp's CLI records provider errors it does not report.
            "claude_transcript" => {
                let home = std::env::var("HOME").unwrap_or_default();
                let folder = Path::new(&home).join(".claude/projects/mock");
                let written = std::fs::create_dir_all(&folder).and_then(|()| {
                    let path = folder.join(format!("{}.jsonl", self.session_id));
                    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
                    writeln!(file, "{}", args.trim())
                });
                written.map_err(|error| {
                    RpcError::invalid_params(format!("@mock claude_transcript: {error}"))
                })?;
            }
            // `@mock env NAME...`: replies with `{"NAME": value-or-null, ...}`, so a test can
            // see exactly what an agent inherited.
            "env" => {
                let seen: serde_json::Map<String, Value> = args
                    .split_whitespace()
                    .map(|name| {
                        let value = std::env::var(name).map_or(Value::Null, Value::String);
                        (name.to_owned(), value)
                    })
                    .collect();
                self.reply = Some(Value::Object(seen).to_string());
            }
            "usage_null" => {
                // claude-agent-acp really sends `used: null`, which the schema does not allow.
                self.update(json!({ "sessionUpdate": "usage_update", "used": null, "size": 1000 }));
            }
            "exit_after_reply" => self.exit_after_reply = true,
            "mcp_call" => {
                let text = self.call_mcp_tool(args)?;
                self.add_reply(format!("MCP-RESULT: {text}"));
            }
            "echo_model" => {
                let (model, mode) = self
                    .agent
                    .with_session(&self.session_id, |session| {
                        Ok((session.model.clone(), session.mode.clone()))
                    })
                    .unwrap_or_else(|_| ("?".to_owned(), "?".to_owned()));
                self.add_reply(format!("MODEL: {model} MODE: {mode}"));
            }
            _ => {
                return Err(RpcError::invalid_params(format!(
                    "unknown or malformed directive: @mock {verb} {args}"
                )));
            }
        }
        Ok(None)
    }

    /// Announces a pending tool call and asks the client to allow it. `args` is `[KIND [NAME]]`:
    /// the ACP tool kind (`edit` when absent) and the adapter's own tool name, sent as
    /// claude-agent-acp sends it (`_meta.claudeCode.toolName`). Deliberately not interrupted by
    /// a cancel: the client must answer `cancelled` itself, as ACP requires.
    fn ask_permission(&mut self, args: &str) -> String {
        let tool_call_id = format!("mock-tool-{}", self.agent.serial());
        let mut words = args.split_whitespace();
        let kind = words.next().unwrap_or("edit");
        let mut tool_call = json!({ "toolCallId": tool_call_id, "title": format!("Mock {kind}"), "kind": kind, "status": "pending" });
        if let Some(name) = words.next() {
            tool_call["_meta"] = json!({ "claudeCode": { "toolName": name } });
        }
        let mut announced = tool_call.clone();
        announced["sessionUpdate"] = json!("tool_call");
        self.update(announced);
        let answer = self.agent.request(
            "session/request_permission",
            json!({
                "sessionId": self.session_id,
                "toolCall": tool_call,
                "options": [
                    { "optionId": "allow", "name": "Allow", "kind": "allow_once" },
                    { "optionId": "reject", "name": "Reject", "kind": "reject_once" },
                ],
            }),
        );
        let outcome = match answer {
            Ok(result) => {
                let outcome = &result["outcome"];
                match outcome["outcome"].as_str() {
                    Some("selected") => outcome["optionId"].as_str().unwrap_or("?").to_owned(),
                    Some("cancelled") => "cancelled".to_owned(),
                    _ => format!("invalid answer {result}"),
                }
            }
            Err(error) => format!("error {}: {}", error.code, error.message),
        };
        let status = if outcome == "allow" {
            "completed"
        } else {
            "failed"
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool_call_id,
            "status": status,
        }));
        outcome
    }

    /// Round-trip verbs add a line to the reply; the first one replaces the echo.
    fn add_reply(&mut self, line: String) {
        match &mut self.reply {
            Some(reply) => {
                reply.push('\n');
                reply.push_str(&line);
            }
            None => self.reply = Some(line),
        }
    }

    fn cancelled(&self) -> TurnEnd {
        TurnEnd::Stop(self.agent.settings.cancel_stop.clone())
    }

    /// A UUID-shaped id, deterministic per process run, as ACP's `messageId` expects.
    fn message_id(&self) -> String {
        format!("00000000-0000-4000-8000-{:012x}", self.agent.serial())
    }

    fn send_chunk(&mut self, kind: &str, message_id: &str, text: &str) {
        self.output_bytes += text.len();
        self.update(json!({
            "sessionUpdate": kind,
            "messageId": message_id,
            "content": { "type": "text", "text": text },
        }));
    }

    fn update(&self, update: Value) {
        self.agent.send_update(&self.session_id, update);
    }
}

/// The answer to a prompt that asks for structured output (an `agent()` call with a
/// `schema`): a fenced JSON value made from the schema by the engine's own dry-run fabricator,
/// so a script that declares schemas runs against the mock without `@mock json` lines.
/// `None` when the prompt quotes no schema in the engine's output instructions.
fn schema_answer(user_text: &str) -> Option<String> {
    let after = user_text
        .rfind(SCHEMA_INSTRUCTION)
        .map(|at| &user_text[at + SCHEMA_INSTRUCTION.len()..])?;
    let body = after.split_once("```json\n")?.1;
    let schema: Value = serde_json::from_str(body.split_once("\n```")?.0).ok()?;
    let value = agentprism::engine::schema::fabricate(&schema);
    Some(format!("```json\n{value}\n```"))
}

/// The words the engine puts before the schema it wants an answer to match, in its first
/// prompt and in each re-prompt (`src/engine/schema.rs`).
const SCHEMA_INSTRUCTION: &str = "this JSON Schema";

impl Turn<'_> {
    /// `@mock mcp_call SERVER TOOL ARGS_JSON`: calls TOOL with ARGS_JSON on the HTTP MCP
    /// server named SERVER in this session's `mcpServers` (initialize, then `tools/call`), as
    /// an agent calls a client's tool, and returns the text of the tool's answer, prefixed
    /// `ERROR: ` when it is flagged `isError`. A missing server fails the turn.
    fn call_mcp_tool(&self, args: &str) -> Result<String, RpcError> {
        let mut words = args.splitn(3, char::is_whitespace);
        let (Some(server), Some(tool), Some(arguments)) =
            (words.next(), words.next(), words.next())
        else {
            return Err(RpcError::invalid_params(
                "@mock mcp_call needs SERVER TOOL ARGS_JSON",
            ));
        };
        let arguments: Value = serde_json::from_str(arguments)
            .map_err(|error| RpcError::invalid_params(format!("@mock mcp_call: {error}")))?;
        let url = self
            .agent
            .with_session(&self.session_id, |session| {
                Ok(session
                    .mcp_servers
                    .iter()
                    .find(|entry| entry["name"] == server && entry["type"] == "http")
                    .and_then(|entry| entry["url"].as_str())
                    .map(str::to_owned))
            })?
            .ok_or_else(|| {
                RpcError::invalid_params(format!("@mock mcp_call: no HTTP MCP server {server:?}"))
            })?;
        let failed =
            |error: String| RpcError::new(INTERNAL_ERROR, format!("@mock mcp_call: {error}"));
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "mock-acp-agent", "version": "0.1.0"}}});
        http_post(&url, &init).map_err(failed)?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        http_post(&url, &initialized).map_err(failed)?;
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let answer = http_post(&url, &call).map_err(failed)?;
        let answer: Value =
            serde_json::from_str(&answer).map_err(|error| failed(error.to_string()))?;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| answer.to_string());
        Ok(if answer["result"]["isError"] == true {
            format!("ERROR: {text}")
        } else {
            text
        })
    }
}

/// POSTs one JSON message to a loopback `http://host:port/path` URL (HTTP/1.1, one request
/// per connection) and returns the answer's body.
fn http_post(url: &str, message: &Value) -> Result<String, String> {
    use std::io::Read;
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = std::net::TcpStream::connect(authority).map_err(|error| error.to_string())?;
    let body = message.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|error| error.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|error| error.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    let status = head.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with('2') {
        return Err(format!("HTTP {status}: {body}"));
    }
    Ok(body.to_owned())
}

/// `@mock verb args` → `(verb, args)`; anything else is user text.
impl Turn<'_> {
    /// `@mock write_cwd PATH TEXT`: writes TEXT (and a newline) to PATH relative to the
    /// session's cwd, itself, as a coding agent edits files without asking the client.
    fn write_in_cwd(&self, args: &str) -> String {
        let (path, content) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        let relative = Path::new(path);
        if path.is_empty()
            || relative.is_absolute()
            || relative
                .components()
                .any(|part| matches!(part, std::path::Component::ParentDir))
        {
            return format!("ERROR write_cwd needs a relative path inside the cwd, got {path:?}");
        }
        let cwd = lock(&self.agent.state)
            .sessions
            .get(&self.session_id)
            .map(|session| session.cwd.clone());
        let Some(cwd) = cwd else {
            return format!("ERROR write_cwd: no session {}", self.session_id);
        };
        let target = cwd.join(relative);
        let written = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&target, format!("{content}\n")));
        match written {
            Ok(()) => format!("WROTE_CWD: {path}"),
            Err(error) => format!("ERROR write_cwd {}: {error}", target.display()),
        }
    }
}

fn parse_directive(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("@mock")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    Some(match rest.split_once(char::is_whitespace) {
        Some((verb, args)) => (verb, args.trim()),
        None => (rest, ""),
    })
}

/// Splits `text` into `count` pieces of near-equal length (fewer if it is shorter), on char
/// boundaries.
fn split_chunks(text: &str, count: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let count = count.min(chars.len());
    let size = chars.len().div_ceil(count);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// Deterministic stand-in for a tokenizer: a token per 4 bytes, rounded up, at least 1.
fn token_count(bytes: usize) -> usize {
    bytes.div_ceil(4).max(1)
}

fn modes_json(session: &Session) -> Value {
    json!({
        "currentModeId": session.mode,
        "availableModes": MODES
            .iter()
            .map(|(id, name)| json!({ "id": id, "name": name }))
            .collect::<Vec<_>>(),
    })
}

fn config_options_json(session: &Session) -> Value {
    let select = |id: &str, name: &str, current: &str, choices: &[(&str, &str)]| {
        json!({
            "id": id,
            "name": name,
            "category": id,
            "type": "select",
            "currentValue": current,
            "options": choices
                .iter()
                .map(|(value, name)| json!({ "value": value, "name": name }))
                .collect::<Vec<_>>(),
        })
    };
    let mut options = vec![
        select("mode", "Mode", &session.mode, &MODES),
        select("model", "Model", &session.model, &MODELS),
    ];
    if !session.effort_levels.is_empty() {
        let levels: Vec<(&str, &str)> = session
            .effort_levels
            .iter()
            .map(|level| (level.as_str(), level.as_str()))
            .collect();
        let mut effort = select(
            "reasoning_effort",
            "Reasoning Effort",
            &session.effort,
            &levels,
        );
        effort["category"] = json!("thought_level");
        options.push(effort);
    }
    Value::Array(options)
}

/// Validates `value` against a fixed list of choices.
fn pick(choices: &[(&str, &str)], value: &str, what: &str) -> Result<String, RpcError> {
    if choices.iter().any(|(id, _)| *id == value) {
        Ok(value.to_owned())
    } else {
        Err(RpcError::invalid_params(format!(
            "unknown {what} {value:?}"
        )))
    }
}

fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{name} must be a string")))
}

fn check_cwd(params: &Value) -> Result<(), RpcError> {
    let cwd = str_param(params, "cwd")?;
    if !Path::new(cwd).is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "cwd must be an absolute path, got {cwd:?}"
        )));
    }
    Ok(())
}

/// `mcpServers` is required by session/new and session/load, optional for session/resume.
fn check_mcp_servers(params: &Value, required: bool) -> Result<(), RpcError> {
    match params.get("mcpServers") {
        Some(Value::Array(_)) => Ok(()),
        None if !required => Ok(()),
        _ => Err(RpcError::invalid_params("mcpServers must be an array")),
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
