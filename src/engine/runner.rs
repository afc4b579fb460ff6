//! The boundary between the engine and the agents it drives. The engine sees an agent as a
//! session it opens on a routed backend and prompts turn by turn; the ACP implementation
//! (`crate::acp`) and in-process test runners sit behind these traits.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::effort::Effort;
use crate::model::{AuthContext, Usage};

/// The backend shapes live with the routing snapshot that stores them.
pub use crate::model::routing::{BackendOrigin, BackendSpec};

/// Everything needed to open one agent session.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub backend: BackendSpec,
    /// Sent through the `category:"model"` config option (legacy `session/set_model` as a
    /// fallback); `None` keeps the backend's default model.
    pub model: Option<String>,
    pub mode: Option<String>,
    /// Extra config options, in ascending id order.
    pub config_options: Vec<(String, Value)>,
    /// Set through the reasoning-level config option the session advertises, after the model
    /// (`crate::engine::effort`); a session without one fails `Unsupported`.
    pub effort: Option<Effort>,
    pub cwd: PathBuf,
    /// ACP `mcpServers` for `session/new` (an array; empty when unset).
    pub mcp_servers: Value,
    /// `_meta` for `session/new`, merged over the backend's `sessionMeta`.
    pub meta: Option<Value>,
    /// The call's output schema, when it has one: a runner whose agent can take it through a
    /// channel of its own (the client-hosted `StructuredOutput` tool) offers that channel and
    /// says so through [`AgentSession::output_channel`].
    pub output_schema: Option<Value>,
    /// An earlier session to reattach (`session/resume` or `session/load`) if the agent
    /// supports it; the runner falls back to a fresh session and says so.
    pub resume_session: Option<String>,
    /// The run and call this session serves, for permission requests and logs.
    pub run_id: String,
    pub call_index: u32,
    pub label: String,
}

/// A way for an agent to return a structured answer other than as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputChannel {
    /// A tool of this name whose input schema is the call's output schema: hosted by the
    /// runner, or the agent's own; either checks each call of it and tells the agent what is
    /// wrong, so the prompt only has to ask for the tool.
    Tool(&'static str),
}

/// One prompt turn.
#[derive(Clone, Debug)]
pub struct TurnRequest {
    /// ACP content blocks (`{type:"text",text}`, images...).
    pub prompt: Vec<Value>,
    /// `_meta` for `session/prompt`.
    pub meta: Option<Value>,
    /// The turn's deadline; on expiry the runner cancels, waits a grace period, then kills
    /// the backend's process group.
    pub timeout: Duration,
}

/// How the agent ended a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
    Other(String),
}

#[derive(Clone, Debug)]
pub struct TurnOutput {
    /// The agent's message text, concatenated from its chunks.
    pub text: String,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

/// Why a session or turn failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The turn's deadline passed.
    Timeout,
    /// The backend failed to start, crashed, broke protocol or returned an error.
    Execution,
    /// Cancelled by the engine (single-call stop, run stop).
    Cancelled,
    /// ACP -32000: credentials are missing or expired.
    AuthRequired,
    /// The provider's usage limit (detected from the error's message and data).
    UsageLimit,
    /// Stop reason `refusal`.
    Refusal,
    /// Stop reason `max_tokens` or `max_turn_requests`.
    Truncated,
    /// The backend does not offer what the call's options ask for (an `effort` it has no
    /// reasoning level for): the same on every attempt, so never retried.
    Unsupported,
}

#[derive(Clone, Debug)]
pub struct AgentFailure {
    pub kind: FailureKind,
    pub message: String,
    /// For `AuthRequired`: `{backendId, methods:[{id,type,name?}]}`, never secrets. Boxed:
    /// failures travel in `Result`s, and most carry none.
    pub auth_context: Option<Box<AuthContext>>,
    /// For `UsageLimit`: the provider's hint about when the limit resets, if any.
    pub reset_hint: Option<String>,
    /// For `UsageLimit`: when the limit lifts (Unix ms), when the provider's error says it.
    pub reset_at: Option<i64>,
    /// How long the provider asked to wait before trying again (`retry-after`), if it said.
    pub retry_after: Option<std::time::Duration>,
}

impl AgentFailure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> AgentFailure {
        AgentFailure {
            kind,
            message: message.into(),
            auth_context: None,
            reset_hint: None,
            reset_at: None,
            retry_after: None,
        }
    }
}

impl std::fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What an agent does while a turn runs, as the engine turns it into run events.
#[derive(Clone, Debug)]
pub enum AgentUpdate {
    MessageChunk(String),
    ThoughtChunk(String),
    /// A tool call started or changed; `title` is what the agent shows for it.
    ToolCall {
        id: String,
        title: String,
        status: Option<String>,
    },
    /// `usage_update`: context used and size, cost when given. Fields may be absent.
    ContextUsage {
        used: Option<u64>,
        size: Option<u64>,
    },
    Plan(Value),
    ModeChanged(String),
    /// Text the adapter sent as a message chunk that is not the answer (a warning, a retry
    /// notice): it goes to the run's events as `agentNotice`, never into the result.
    Notice(String),
    /// Anything else, by its `sessionUpdate` tag.
    Other(String),
    /// Before the session opens, its backend's concurrency cap is reached: `Some` says what
    /// the call waits for ("a claude slot (4 in use)"), `None` that the wait is over.
    SlotWait(Option<String>),
}

/// A permission request from the agent, as the broker shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest {
    pub run_id: String,
    pub call_index: u32,
    pub label: String,
    /// The ACP `toolCall` object, redacted before display.
    pub tool_call: Value,
    pub options: Vec<PermissionOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum PermissionOutcome {
    Selected {
        #[serde(rename = "optionId")]
        option_id: String,
    },
    Cancelled,
}

/// Receives a session's activity. Implemented by the engine per call.
#[async_trait]
pub trait AgentObserver: Send + Sync {
    fn update(&self, update: AgentUpdate);
    /// Waits for someone to answer; the runner answers `cancelled` if the turn is cancelled
    /// first.
    async fn request_permission(&self, request: PermissionRequest) -> PermissionOutcome;
}

/// An open agent session.
#[async_trait]
pub trait AgentSession: Send {
    /// Runs one prompt turn. `cancel` ends it early with `FailureKind::Cancelled`.
    async fn prompt(
        &mut self,
        turn: TurnRequest,
        cancel: CancellationToken,
    ) -> Result<TurnOutput, AgentFailure>;

    /// A handle the journal keeps so a later resume can try to reattach
    /// (`SessionSpec::resume_session` takes its `sessionId`).
    fn session_ref(&self) -> Option<Value>;

    /// The channel through which this session's agent was offered to return the call's
    /// structured answer, if the runner offered one for [`SessionSpec::output_schema`].
    fn output_channel(&self) -> Option<OutputChannel> {
        None
    }

    /// The answer the agent returned through that channel since the last take, already
    /// validated against the call's schema; taken once.
    fn take_output(&mut self) -> Option<Value> {
        None
    }

    /// How this session can be reopened later, as its agent advertised; `None` when it
    /// cannot, and the engine then journals nothing for it. This default: it cannot.
    fn reopen_method(&self) -> Option<ReopenMethod> {
        None
    }

    /// When the spec asked to reopen a session and the agent offered a way but refused or
    /// failed it (the runner then opened a fresh session), the agent's message. This
    /// default: nothing to say.
    fn reopen_failure(&self) -> Option<String> {
        None
    }

    /// Ends the session (`session/close` when supported). Never fails. A session the call
    /// keeps (`keepSession`) is dropped instead: the agent keeps it for a later reopen.
    async fn close(self: Box<Self>);
}

/// How an agent reopens a recorded session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReopenMethod {
    /// `session/load` (`agentCapabilities.loadSession`): the agent replays the session.
    Load,
    /// The session-resume capability (`session/resume`): the agent continues it silently.
    Resume,
}

impl ReopenMethod {
    /// The name records and events carry.
    pub fn name(self) -> &'static str {
        match self {
            ReopenMethod::Load => "load",
            ReopenMethod::Resume => "resume",
        }
    }
}

/// What a zero-token probe of one `{backend, model}` found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub backend: String,
    /// The backend process started and completed `initialize`: it is an ACP agent.
    #[serde(default)]
    pub started: bool,
    /// A session opened (and the model, if any, was accepted).
    pub probed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The probe failed because the backend wants credentials (`AuthRequired`): only a
    /// warning at preparation, where any other failure rejects the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auth_required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_model: Option<String>,
    /// `[{id,name,description?,_meta?}]` as the agent advertised them: its ACP modes, or,
    /// from an agent that offers modes only as a `category:"mode"` config option
    /// (opencode), that option's choices under the same keys.
    #[serde(default)]
    pub modes: Vec<Value>,
    /// The raw ACP `configOptions`.
    #[serde(default)]
    pub config_options: Vec<Value>,
    /// The auth methods `initialize` advertised.
    #[serde(default)]
    pub auth_methods: Vec<Value>,
    /// The models the agent's own settings prefer, where it keeps such a list outside ACP
    /// (pi's `enabledModels`), matched against the models the session offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_models: Option<PreferredModels>,
}

/// An agent's own model preferences (pi's `enabledModels` patterns), resolved the way the
/// agent resolves them against the models it is authenticated for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreferredModels {
    /// The settings file the patterns come from (a later layer replaces the list whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// The patterns, as written.
    pub patterns: Vec<String>,
    /// The offered models the patterns select, each once, in pattern order.
    pub models: Vec<String>,
    /// Patterns that select no offered model (a typo, or a provider without credentials).
    pub unmatched: Vec<String>,
    /// A settings file that exists but could not be read or parsed; the agent skips it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Runs agent sessions. One runner serves every run of a process; implementations pool
/// backend processes.
#[async_trait]
pub trait AgentRunner: Send + Sync + 'static {
    async fn open_session(
        &self,
        spec: SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure>;

    /// Opens a session without prompting: selects `model` if given and reports modes and
    /// config options. Failures are reported in the report, never raised.
    async fn probe(
        &self,
        backend: &BackendSpec,
        model: Option<&str>,
        cwd: &std::path::Path,
    ) -> ProbeReport;

    /// Stops at once the backend processes that hold no session and never ran a prompt: what
    /// probes alone started (`config` calls it once its probes are done). Processes that
    /// served prompts stay for their idle time.
    async fn release_probed(&self) {}

    /// Stops every backend process (EOF, then TERM, then KILL on each process group), within
    /// `deadline`.
    async fn shutdown(&self, deadline: Duration);
}
