//! The connection's side of the mock: each inbound line parsed and routed, the ACP methods
//! answered (`initialize`, `authenticate`, the session methods), turns started on their own
//! threads, the agent's own requests to the client matched with their answers, and every
//! outbound line written whole.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use serde_json::{Value, json};

use super::turn::token_count;
use super::{
    AUTH_METHOD_ID, Agent, CancelToken, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, MODELS,
    MODES, PARSE_ERROR, PROTOCOL_VERSION, RpcError, Session, Settings, State, Turn, TurnEnd, lock,
};

impl Agent {
    pub(super) fn new(settings: Settings) -> Agent {
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

    pub(super) fn serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed)
    }

    /// Handles one inbound line: framing and JSON-RPC envelope checks, then routing.
    pub(super) fn handle_line(self: &Arc<Self>, raw: &[u8]) {
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

    pub(super) fn handle_request(self: &Arc<Self>, id: Value, method: &str, params: Value) {
        match self.dispatch(&id, method, &params) {
            Ok(Some(result)) => self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result })),
            // A prompt turn answers from its worker thread.
            Ok(None) => {}
            Err(error) => self.send_error(id, &error),
        }
    }

    /// Answers a request, or returns `None` when a worker thread will answer it later.
    pub(super) fn dispatch(
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

    pub(super) fn handle_notification(&self, method: &str, params: &Value) {
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
    pub(super) fn handle_response(
        &self,
        id: &Value,
        result: Option<&Value>,
        error: Option<&Value>,
    ) {
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

    pub(super) fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
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

    pub(super) fn authenticate(&self, params: &Value) -> Result<Value, RpcError> {
        let method_id = str_param(params, "methodId")?;
        if method_id != AUTH_METHOD_ID {
            return Err(RpcError::invalid_params(format!(
                "unknown auth method {method_id:?}"
            )));
        }
        lock(&self.state).authenticated = true;
        Ok(json!({}))
    }

    pub(super) fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
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
    pub(super) fn reopen_session(&self, params: &Value, load: bool) -> Result<Value, RpcError> {
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

    pub(super) fn close_session(&self, params: &Value) -> Result<Value, RpcError> {
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

    pub(super) fn set_mode(&self, params: &Value) -> Result<Value, RpcError> {
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

    pub(super) fn set_config_option(&self, params: &Value) -> Result<Value, RpcError> {
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
    pub(super) fn set_model(&self, params: &Value) -> Result<Value, RpcError> {
        let session_id = str_param(params, "sessionId")?;
        let model_id = str_param(params, "modelId")?;
        self.with_session(session_id, |session| {
            session.model = pick(&MODELS, model_id, "model")?;
            Ok(json!({}))
        })
    }

    /// Registers the turn's cancel token before the worker starts, so a cancel that arrives
    /// right behind the prompt still reaches it.
    pub(super) fn start_turn(self: &Arc<Self>, id: Value, params: &Value) -> Result<(), RpcError> {
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

    pub(super) fn run_turn(
        &self,
        id: Value,
        session_id: String,
        text: String,
        cancel: Arc<CancelToken>,
    ) {
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

    pub(super) fn check_auth(&self, state: &State) -> Result<(), RpcError> {
        if self.settings.auth_required && !state.authenticated {
            return Err(RpcError::auth_required());
        }
        Ok(())
    }

    pub(super) fn with_session<T>(
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
    pub(super) fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel();
        lock(&self.pending).insert(id, sender);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        receiver
            .recv()
            .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "connection closed")))
    }

    pub(super) fn send_update(&self, session_id: &str, update: Value) {
        self.send(&json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": { "sessionId": session_id, "update": update },
        }));
    }

    pub(super) fn send_error(&self, id: Value, error: &RpcError) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() }));
    }

    /// Writes the start of a message and `mebibytes` MiB of its text, never its end.
    pub(super) fn write_unterminated(&self, mebibytes: usize) {
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

    pub(super) fn send(&self, message: &Value) {
        let line = message.to_string();
        let mut output = lock(&self.output);
        // A client that stopped reading is not our problem to report beyond stderr; the
        // process ends at stdin EOF anyway.
        if let Err(error) = writeln!(output, "{line}").and_then(|()| output.flush()) {
            eprintln!("mock-acp-agent: writing stdout failed: {error}");
        }
    }

    pub(super) fn log_inbound(&self, message: &Value) {
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

pub(super) fn modes_json(session: &Session) -> Value {
    json!({
        "currentModeId": session.mode,
        "availableModes": MODES
            .iter()
            .map(|(id, name)| json!({ "id": id, "name": name }))
            .collect::<Vec<_>>(),
    })
}

pub(super) fn config_options_json(session: &Session) -> Value {
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
pub(super) fn pick(choices: &[(&str, &str)], value: &str, what: &str) -> Result<String, RpcError> {
    if choices.iter().any(|(id, _)| *id == value) {
        Ok(value.to_owned())
    } else {
        Err(RpcError::invalid_params(format!(
            "unknown {what} {value:?}"
        )))
    }
}

pub(super) fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{name} must be a string")))
}

pub(super) fn check_cwd(params: &Value) -> Result<(), RpcError> {
    let cwd = str_param(params, "cwd")?;
    if !Path::new(cwd).is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "cwd must be an absolute path, got {cwd:?}"
        )));
    }
    Ok(())
}

/// `mcpServers` is required by session/new and session/load, optional for session/resume.
pub(super) fn check_mcp_servers(params: &Value, required: bool) -> Result<(), RpcError> {
    match params.get("mcpServers") {
        Some(Value::Array(_)) => Ok(()),
        None if !required => Ok(()),
        _ => Err(RpcError::invalid_params("mcpServers must be an array")),
    }
}
