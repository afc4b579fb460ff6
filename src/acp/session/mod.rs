//! One ACP session on a pooled process: opening it (resume/load, then `session/new`), choosing
//! model, mode, reasoning level (`effort`) and config options, and running prompt turns with
//! their deadline and cancel.
//!
//! A turn that is cancelled or runs out of time gets `session/cancel` and a grace period; if
//! the agent has not finished the turn by then, the session is abandoned: it is unregistered,
//! so whatever it sends later is discarded, and the call fails at once. The process group is
//! killed only when no other session uses the process (an agent that ignores `session/cancel`
//! must not take its siblings down with it); otherwise the process is retired from the pool
//! and ends when its last session lets go of it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::acp::connection::{RpcError, SessionHandler};
use crate::acp::content;
use crate::acp::failure::execution;
use crate::acp::output_tool::{self, Offer, OutputTools, claude};
use crate::acp::pool::{AgentHost, Lease};
use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentSession, AgentUpdate, BackendOrigin, FailureKind,
    OutputChannel, PermissionOption, PermissionOutcome, PermissionRequest, ReopenMethod,
    SessionSpec, StopReason, TurnOutput, TurnRequest,
};
use crate::engine::{effort, schema};
use crate::model::Usage;
use crate::util::sync::Lock;

mod sink;

pub(crate) use sink::SessionSink;
use sink::answer_too_long;

/// What the agent told us about a freshly opened session (for probes).
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionInfo {
    pub modes: Vec<Value>,
    pub config_options: Vec<Value>,
    pub current_model: Option<String>,
}

/// An open session; dropping it unregisters it and releases its slot on the process.
pub(crate) struct AcpSession {
    lease: Lease,
    session_id: String,
    sink: Arc<SessionSink>,
    cancel_grace: Duration,
    /// Why the session the spec asked to reopen was not: the agent's refusal or failure.
    reopen_failure: Option<String>,
    /// What this session's agent was offered for the call's structured answer, if anything.
    output: Option<Offer>,
}

impl AcpSession {
    fn host(&self) -> &Arc<AgentHost> {
        self.lease.host()
    }
}

impl Drop for AcpSession {
    fn drop(&mut self) {
        self.host().connection.unregister_session(&self.session_id);
    }
}

/// Opens a session on the leased host and applies model, mode and config options. Setup
/// requests are bounded by `setup_timeout` so an agent that hangs there cannot hang a run.
pub(crate) async fn open(
    lease: Lease,
    spec: &SessionSpec,
    observer: Arc<dyn AgentObserver>,
    output_tools: &OutputTools,
    setup_timeout: Duration,
    cancel_grace: Duration,
) -> Result<(AcpSession, Opened), AgentFailure> {
    let host = lease.host().clone();
    let backend = host.backend.id.clone();
    let sink = Arc::new(SessionSink::new(observer, spec, &host.backend.file_roots));
    let mut place = Place {
        cwd: spec.cwd.to_string_lossy().into_owned(),
        mcp_servers: if spec.mcp_servers.is_array() {
            spec.mcp_servers.clone()
        } else {
            json!([])
        },
    };
    let mut output = offer_output(&host, spec, output_tools);
    if let (Some(Offer::Tool(tool)), Value::Array(servers)) = (&output, &mut place.mcp_servers) {
        servers.push(tool.server());
    }
    let reattached = match &spec.resume_session {
        Some(previous) => reattach(&host, previous, &place, &sink, setup_timeout).await?,
        None => Reattached::Fresh(None),
    };
    let (session_id, result, reopen_failure) = match reattached {
        Reattached::Kept(id, result) => {
            // A reattached session keeps the `_meta` it was opened with.
            if matches!(output, Some(Offer::Claude(_))) {
                output = None;
            }
            (id, result, None)
        }
        Reattached::Fresh(reopen_failure) => {
            let mut params = json!({"cwd": place.cwd, "mcpServers": place.mcp_servers});
            let mut meta = merge_meta(host.backend.session_meta.as_ref(), spec.meta.as_ref());
            if let Some(Offer::Claude(schema)) = &output {
                meta = Some(claude::merge(meta, claude::session_meta(schema)));
            }
            if let Some(meta) = meta {
                params["_meta"] = meta;
            }
            let result = setup_call_raw(&host, setup_timeout, "session/new", &params).await?;
            let Some(session_id) = new_session_id(&result) else {
                return Err(execution(format!(
                    "backend {backend}: session/new returned no sessionId"
                )));
            };
            host.connection.register_session(&session_id, sink.clone());
            (session_id, result, reopen_failure)
        }
    };
    // From here a failure drops the session, which unregisters it.
    let session = AcpSession {
        lease,
        session_id,
        sink: sink.clone(),
        cancel_grace,
        reopen_failure,
        output,
    };
    let mut opened = Opened {
        answer: result,
        info: None,
    };
    if makes_choices(spec) {
        let mut answer = opened.answer();
        let mut info = session_info(&mut answer);
        apply_choices(&session, spec, &answer, &mut info, setup_timeout).await?;
        opened.info = Some(info);
    }
    sink.start_forwarding();
    Ok((session, opened))
}

/// What opening a session answered. Its modes and config options are read only when a
/// caller asks for them (a probe) or the spec chooses any: a call that chooses nothing
/// never parses the agent's lists.
pub(crate) struct Opened {
    /// The `session/new|load|resume` answer as the agent wrote it.
    answer: Box<RawValue>,
    /// The session's facts once read, kept in step with what choosing answered.
    info: Option<SessionInfo>,
}

impl Opened {
    /// The session's modes, config options and current model.
    pub(crate) fn info(self) -> SessionInfo {
        match self.info {
            Some(info) => info,
            None => session_info(&mut self.answer()),
        }
    }

    fn answer(&self) -> Value {
        serde_json::from_str(self.answer.get()).unwrap_or(Value::Null)
    }
}

/// Whether `spec` sets a model, mode, reasoning level or config option on its session.
fn makes_choices(spec: &SessionSpec) -> bool {
    spec.model.is_some()
        || spec.mode.is_some()
        || spec.effort.is_some()
        || !spec.config_options.is_empty()
}

/// `session/prompt`'s params, written as they are rather than built as a JSON value.
#[derive(serde::Serialize)]
struct PromptParams<'a> {
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    prompt: Vec<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Value>,
}

/// The `sessionId` of a `session/new` answer, read without the rest of it.
fn new_session_id(answer: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct NewSession {
        #[serde(rename = "sessionId")]
        session_id: Option<String>,
    }
    serde_json::from_str::<NewSession>(answer.get())
        .ok()?
        .session_id
}

/// The channel for a call with an output schema: Claude's own on the built-in Claude
/// backend (unless the session narrows Claude Code's tools or its adapter does not forward
/// the answer, where none is offered); else the `StructuredOutput` tool, on an agent that advertises HTTP MCP servers and
/// a backend that does not turn the tool off. `None` otherwise, and when the tool's server
/// cannot start (the call then relies on its prompt alone).
fn offer_output(host: &AgentHost, spec: &SessionSpec, output_tools: &OutputTools) -> Option<Offer> {
    let schema = spec.output_schema.as_ref()?;
    if spec.backend.origin == BackendOrigin::Builtin && spec.backend.id == "claude" {
        // A `tools` list for Claude Code may leave out the tool it answers through.
        let narrowed = [host.backend.session_meta.as_ref(), spec.meta.as_ref()]
            .into_iter()
            .flatten()
            .any(|meta| meta.pointer("/claudeCode/options/tools").is_some());
        // An adapter that does not forward the answer gets the prompt path.
        let forwards = claude::forwards_results(&host.agent_name);
        return (!narrowed && forwards).then(|| Offer::Claude(schema.clone()));
    }
    if !spec.backend.structured_output_tool || !host.supports_http_mcp() {
        return None;
    }
    if output_tool::mcp_servers_outlive_sessions(&host.agent_name) {
        // Retired before the second look, so no session can join after it.
        if host.sessions() != 1 {
            return None;
        }
        host.retire();
        if host.sessions() != 1 {
            return None;
        }
    }
    output_tools
        .register(schema)
        .inspect_err(|error| {
            tracing::warn!(backend = %host.backend.id, %error, "offering no StructuredOutput tool");
        })
        .map(Offer::Tool)
        .ok()
}

/// Where a session works: its folder and MCP servers, as `session/new|load|resume` take them.
struct Place {
    cwd: String,
    mcp_servers: Value,
}

/// One setup request, bounded by `setup_timeout`.
async fn setup_call(
    host: &AgentHost,
    setup_timeout: Duration,
    method: &'static str,
    params: Value,
) -> Result<Value, AgentFailure> {
    let request = host.connection.request(method, &params);
    bounded(host, setup_timeout, method, request).await
}

/// [`setup_call`], answering with the result as the agent wrote it.
async fn setup_call_raw(
    host: &AgentHost,
    setup_timeout: Duration,
    method: &'static str,
    params: &Value,
) -> Result<Box<RawValue>, AgentFailure> {
    let request = host.connection.request_raw(method, params);
    bounded(host, setup_timeout, method, request).await
}

/// Awaits a setup `request` (sent when first polled) for at most `setup_timeout`; a failure
/// names the method and carries what the agent wrote to stderr meanwhile.
async fn bounded<T>(
    host: &AgentHost,
    setup_timeout: Duration,
    method: &str,
    request: impl Future<Output = Result<T, RpcError>>,
) -> Result<T, AgentFailure> {
    let began = host.process.stderr_mark();
    match tokio::time::timeout(setup_timeout, request).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(error)) => Err(host.failure(method, error, began).await),
        Err(_) => Err(execution(format!(
            "backend {} did not answer {method} within {} ms",
            host.backend.id,
            setup_timeout.as_millis()
        ))),
    }
}

/// What became of a request to reopen a session.
enum Reattached {
    /// The agent reopened it: its id and answer.
    Kept(String, Box<RawValue>),
    /// A fresh session is to be opened instead; with the agent's message when it offered a
    /// way to reopen and refused or failed it.
    Fresh(Option<String>),
}

/// The way `host` reopens sessions, preferring `session/resume` (no history replay).
fn reopen_method(host: &AgentHost) -> Option<ReopenMethod> {
    if host.supports_resume() {
        Some(ReopenMethod::Resume)
    } else if host.supports_load() {
        Some(ReopenMethod::Load)
    } else {
        None
    }
}

/// Resumes or loads session `previous` where the agent can; [`Reattached::Fresh`] when a
/// fresh session is to be opened instead (the agent cannot, or refused while staying
/// alive); an error only when the agent died on it.
async fn reattach(
    host: &AgentHost,
    previous: &str,
    place: &Place,
    sink: &Arc<SessionSink>,
    setup_timeout: Duration,
) -> Result<Reattached, AgentFailure> {
    let backend = &host.backend.id;
    let method = match reopen_method(host) {
        Some(ReopenMethod::Resume) => "session/resume",
        Some(ReopenMethod::Load) => "session/load",
        None => {
            tracing::warn!(%backend, session = %previous, "the agent cannot resume or load sessions; opening a fresh one");
            return Ok(Reattached::Fresh(None));
        }
    };
    // Registered first: `session/load` replays history before it answers.
    host.connection.register_session(previous, sink.clone());
    let params = json!({"sessionId": previous, "cwd": place.cwd, "mcpServers": place.mcp_servers});
    match setup_call_raw(host, setup_timeout, method, &params).await {
        Ok(result) => Ok(Reattached::Kept(previous.to_owned(), result)),
        Err(failure) if !host.is_live() => Err(failure),
        Err(failure) => {
            host.connection.unregister_session(previous);
            tracing::warn!(%backend, session = %previous, error = %failure, "could not reattach the session; opening a fresh one");
            Ok(Reattached::Fresh(Some(failure.message)))
        }
    }
}

/// Modes, config options and the current model from a `session/new|load|resume` answer,
/// whose lists move out of it (`null` in their place).
pub(crate) fn session_info(result: &mut Value) -> SessionInfo {
    let list = |found: Option<&mut Value>| match found.map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    let config_options = list(result.get_mut("configOptions"));
    let modes = list(result.pointer_mut("/modes/availableModes"));
    let current_model = model_option(&config_options)
        .and_then(|option| option.get("currentValue"))
        .or_else(|| legacy_models(result).and_then(|models| models.get("currentModelId")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    SessionInfo {
        modes,
        config_options,
        current_model,
    }
}

/// The pre-config-option `models` object some agents still send.
fn legacy_models(result: &Value) -> Option<&Value> {
    result.get("models").filter(|models| models.is_object())
}

/// Applies the spec's model, mode and config options to the open session, keeping `info` in
/// step with what the agent answers.
async fn apply_choices(
    session: &AcpSession,
    spec: &SessionSpec,
    result: &Value,
    info: &mut SessionInfo,
    setup_timeout: Duration,
) -> Result<(), AgentFailure> {
    let host = session.host();
    let backend = &host.backend.id;
    let session_id = &session.session_id;
    let call =
        |method: &'static str, params: Value| setup_call(host, setup_timeout, method, params);
    let set_option = |config_id: String, value: Value| {
        call(
            "session/set_config_option",
            json!({"sessionId": session_id, "configId": config_id, "value": value}),
        )
    };
    if let Some(model) = &spec.model {
        if let Some(config_id) = model_option(&info.config_options).and_then(option_id) {
            let answer = set_option(config_id, json!(model)).await?;
            refresh_options(info, &answer);
        } else if legacy_models(result).is_some() {
            call(
                "session/set_model",
                json!({"sessionId": session_id, "modelId": model}),
            )
            .await?;
        } else {
            return Err(execution(format!(
                "backend {backend} does not let clients choose a model (asked for {model:?})"
            )));
        }
        info.current_model = Some(model.clone());
    }
    if let Some(mode) = &spec.mode {
        if !info.modes.is_empty() || result.get("modes").is_some_and(Value::is_object) {
            call(
                "session/set_mode",
                json!({"sessionId": session_id, "modeId": mode}),
            )
            .await?;
        } else if let Some(config_id) =
            option_by_category(&info.config_options, "mode").and_then(option_id)
        {
            let answer = set_option(config_id, json!(mode)).await?;
            refresh_options(info, &answer);
        } else {
            return Err(execution(format!(
                "backend {backend} does not let clients choose a mode (asked for {mode:?})"
            )));
        }
    }
    // After the model, whose levels the session now advertises.
    if let Some(effort) = spec.effort {
        let setting = effort::call_setting(
            &info.config_options,
            effort,
            &spec.config_options,
            backend,
            info.current_model.as_deref(),
        )
        .map_err(|message| AgentFailure::new(FailureKind::Unsupported, message))?;
        let answer = set_option(setting.config_id, json!(setting.value)).await?;
        refresh_options(info, &answer);
        tracing::debug!(%backend, effort = effort.name(), "reasoning level set");
    }
    for (config_id, value) in &spec.config_options {
        let answer = set_option(config_id.clone(), value.clone()).await?;
        refresh_options(info, &answer);
    }
    Ok(())
}

fn option_by_category<'a>(options: &'a [Value], category: &str) -> Option<&'a Value> {
    options
        .iter()
        .find(|option| option.get("category").and_then(Value::as_str) == Some(category))
}

fn model_option(options: &[Value]) -> Option<&Value> {
    option_by_category(options, "model")
}

fn option_id(option: &Value) -> Option<String> {
    option.get("id").and_then(Value::as_str).map(str::to_owned)
}

/// `session/set_config_option` answers with every option's new state.
pub(crate) fn refresh_options(info: &mut SessionInfo, answer: &Value) {
    if let Some(options) = answer.get("configOptions").and_then(Value::as_array) {
        info.config_options = options.clone();
    }
}

/// The backend's `sessionMeta` with the call's `meta` over it (shallow, the call wins).
fn merge_meta(backend: Option<&Value>, call: Option<&Value>) -> Option<Value> {
    match (backend, call) {
        (None, None) => None,
        (Some(meta), None) | (None, Some(meta)) => Some(meta.clone()),
        (Some(Value::Object(base)), Some(Value::Object(over))) => {
            let mut merged: Map<String, Value> = base.clone();
            for (key, value) in over {
                merged.insert(key.clone(), value.clone());
            }
            Some(Value::Object(merged))
        }
        (Some(_), Some(call)) => Some(call.clone()),
    }
}

#[async_trait]
impl AgentSession for AcpSession {
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure> {
        let host = self.host().clone();
        host.mark_prompted();
        let backend = host.backend.id.clone();
        let params = PromptParams {
            session_id: &self.session_id,
            prompt: content::for_agent(turn.prompt, &host.capabilities, &backend),
            meta: turn.meta,
        };
        let (turn_cancelled, too_long) = self.sink.begin_turn();
        let began = host.process.stderr_mark();
        let request = host.connection.request("session/prompt", &params);
        tokio::pin!(request);
        let interrupted = tokio::select! {
            answer = &mut request => {
                let text = self.sink.end_turn();
                if too_long.is_cancelled() {
                    // The agent ended the turn itself, but past the limit: never a cut answer.
                    return Err(AgentFailure::new(
                        FailureKind::Execution,
                        format!("backend {backend}: the turn {}", answer_too_long()),
                    ));
                }
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(error) => return Err(host.failure("session/prompt", error, began).await),
                };
                if text.trim().is_empty()
                    && let Some((message, data)) = recorded_turn_error(&host, &self.session_id).await
                {
                    return Err(host.failure(
                        "session/prompt",
                        RpcError::Remote { code: -32603, message, data },
                        began,
                    ).await);
                }
                return finish_turn(&host, &answer, text);
            }
            _ = cancel.cancelled() => FailureKind::Cancelled,
            _ = tokio::time::sleep(turn.timeout) => FailureKind::Timeout,
            _ = too_long.cancelled() => FailureKind::Execution,
        };
        // From here the turn counts as cancelled or timed out, whatever the agent answers.
        turn_cancelled.cancel();
        let _ = host
            .connection
            .notify("session/cancel", json!({"sessionId": self.session_id}));
        let landed = tokio::time::timeout(self.cancel_grace, &mut request)
            .await
            .is_ok();
        self.sink.end_turn();
        let mut aftermath = "the agent stopped after session/cancel";
        if !landed {
            // Late chunks and permission requests of this turn must reach nobody.
            host.connection.unregister_session(&self.session_id);
            if host.sessions() <= 1 {
                tracing::warn!(%backend, session = %self.session_id, "the agent did not end the turn after session/cancel; killing its process group");
                host.kill();
                aftermath = "the agent ignored session/cancel and its process was killed";
            } else {
                tracing::warn!(%backend, session = %self.session_id, others = host.sessions() - 1, "the agent did not end the turn after session/cancel; abandoning the session and retiring the process once its other sessions end");
                host.retire();
                aftermath = "the agent ignored session/cancel; the session was abandoned and its late output is discarded";
            }
        }
        let what = match interrupted {
            FailureKind::Timeout => format!("timed out after {} ms", turn.timeout.as_millis()),
            FailureKind::Execution => answer_too_long(),
            _ => "was cancelled".to_owned(),
        };
        let message = format!("backend {backend}: the turn {what}; {aftermath}");
        if interrupted == FailureKind::Timeout {
            // An adapter that retries a rejected key internally never answers; its stderr
            // is the only place the 401 shows.
            let stderr = host.process.stderr_since(began).await;
            let recorded = recorded_turn_error(&host, &self.session_id).await;
            return Err(crate::acp::failure::timeout_failure(
                &backend,
                message,
                &stderr,
                recorded,
                &host.auth_methods,
            ));
        }
        Err(AgentFailure::new(interrupted, message))
    }

    fn session_ref(&self) -> Option<Value> {
        Some(json!({"backendId": self.host().backend.id, "sessionId": self.session_id}))
    }

    fn reopen_method(&self) -> Option<ReopenMethod> {
        reopen_method(self.host())
    }

    fn reopen_failure(&self) -> Option<String> {
        self.reopen_failure.clone()
    }

    fn output_channel(&self) -> Option<OutputChannel> {
        match self.output.as_ref()? {
            Offer::Tool(_) => Some(OutputChannel::Tool(output_tool::TOOL_NAME)),
            Offer::Claude(_) => Some(OutputChannel::Tool(claude::TOOL_NAME)),
        }
    }

    fn take_output(&mut self) -> Option<Value> {
        match self.output.as_ref()? {
            Offer::Tool(tool) => tool.take(),
            // Claude Code checks the answer against the schema; checked again, as the engine
            // takes a channel's answer as valid.
            Offer::Claude(schema) => self
                .sink
                .native_output
                .locked()
                .take()
                .filter(|value| schema::validate(schema, value).is_ok()),
        }
    }

    async fn close(self: Box<Self>) {
        let host = self.host().clone();
        if host.supports_close() && host.is_live() {
            // Its answer is not read.
            let params = json!({"sessionId": self.session_id});
            let request = host.connection.request_raw("session/close", &params);
            // Best effort: a close that does not come back quickly is not worth waiting for.
            let _ = tokio::time::timeout(Duration::from_secs(5), request).await;
        }
    }
}

fn finish_turn(host: &AgentHost, result: &Value, text: String) -> Result<TurnOutput, AgentFailure> {
    let backend = &host.backend.id;
    let stop = result
        .get("stopReason")
        .and_then(Value::as_str)
        .unwrap_or("end_turn");
    let failure = |kind, what: &str| -> Result<TurnOutput, AgentFailure> {
        Err(AgentFailure::new(
            kind,
            format!("backend {backend}: {what} (stopReason {stop})"),
        ))
    };
    let stop_reason = match stop {
        "end_turn" => StopReason::EndTurn,
        "refusal" => return failure(FailureKind::Refusal, "the agent refused the prompt"),
        "max_tokens" | "max_turn_requests" => {
            return failure(FailureKind::Truncated, "the agent stopped before finishing");
        }
        "cancelled" => return failure(FailureKind::Cancelled, "the agent cancelled the turn"),
        other => StopReason::Other(other.to_owned()),
    };
    Ok(TurnOutput {
        text,
        stop_reason,
        usage: parse_usage(result.get("usage")),
    })
}

/// The provider error of the current turn as the agent recorded it where it does not report
/// it over ACP: pi's session file, Claude Code's transcript (`acp::transcript`).
async fn recorded_turn_error(
    host: &AgentHost,
    session_id: &str,
) -> Option<(String, Option<Value>)> {
    if let Some(dir) = &host.pi_agent_dir {
        return pi_turn_error(dir, session_id)
            .await
            .map(|message| (message, None));
    }
    let dir = host.claude_config_dir.as_ref()?;
    let (message, data) = crate::acp::transcript::claude_turn_error(dir, session_id).await?;
    Some((message, Some(data)))
}

/// The provider error of the last turn of pi session `session_id`, from pi's own session file
/// (`<agent dir>/sessions/<cwd folder>/<time>_<session id>.jsonl`, whose last entry is the
/// assistant message with `stopReason:"error"` and `errorMessage`). pi-acp 0.0.34 drops that
/// message and answers `end_turn` with no text, so without this a 401 or a 429 on pi would be
/// an empty answer. Only the file's last 64 KiB are read, off the async workers.
async fn pi_turn_error(agent_dir: &std::path::Path, session_id: &str) -> Option<String> {
    let sessions = agent_dir.join("sessions");
    let suffix = format!("_{session_id}.jsonl");
    let read = move || -> Option<String> {
        for folder in std::fs::read_dir(&sessions).ok()?.flatten() {
            let Ok(files) = std::fs::read_dir(folder.path()) else {
                continue;
            };
            for file in files.flatten() {
                if !file.file_name().to_string_lossy().ends_with(&suffix) {
                    continue;
                }
                let text = super::transcript::tail(&file.path())?;
                let last: Value = serde_json::from_str(text.lines().last()?).ok()?;
                let message = last.get("message")?;
                if message.get("stopReason").and_then(Value::as_str) != Some("error") {
                    return None;
                }
                return message
                    .get("errorMessage")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(5), tokio::task::spawn_blocking(read))
        .await
        .ok()?
        .ok()?
}

/// Reads the prompt result's `usage`, accepting the spellings adapters use; absent → zero.
fn parse_usage(usage: Option<&Value>) -> Usage {
    let Some(usage) = usage.filter(|usage| usage.is_object()) else {
        return Usage::default();
    };
    let number = |names: &[&str]| {
        names
            .iter()
            .find_map(|name| usage.get(*name).and_then(Value::as_u64))
    };
    let input = number(&[
        "inputTokens",
        "input_tokens",
        "promptTokens",
        "prompt_tokens",
    ])
    .unwrap_or(0);
    let output = number(&[
        "outputTokens",
        "output_tokens",
        "completionTokens",
        "completion_tokens",
    ])
    .unwrap_or(0);
    let total = number(&["totalTokens", "total_tokens"]).unwrap_or(input + output);
    let cost_usd = ["costUsd", "cost_usd", "cost"]
        .iter()
        .find_map(|name| usage.get(*name))
        .and_then(|cost| {
            cost.as_f64()
                .or_else(|| cost.get("amount").and_then(Value::as_f64))
        });
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total,
        cost_usd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_accepts_several_spellings() {
        let usage = parse_usage(Some(&json!({"inputTokens": 3, "outputTokens": 4})));
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (3, 4, 7)
        );
        let usage = parse_usage(Some(
            &json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 9}),
        ));
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (1, 2, 9)
        );
        assert_eq!(parse_usage(None), Usage::default());
        assert_eq!(parse_usage(Some(&json!(null))), Usage::default());
    }

    #[test]
    fn meta_merges_shallowly_with_the_call_winning() {
        let merged = merge_meta(Some(&json!({"a": 1, "b": 1})), Some(&json!({"b": 2})));
        assert_eq!(merged, Some(json!({"a": 1, "b": 2})));
        assert_eq!(merge_meta(None, None), None);
    }
}
