//! The durable run model: the records a run leaves in the store and the values that the engine,
//! the store and the front ends (CLI, MCP) pass between each other.
//!
//! These are wire types as well: they serialize to the JSON shapes documented in `docs/api.md`
//! and stored in the run database, so a field rename is a format change.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) mod event_json;
#[cfg(test)]
mod fixtures;
pub(crate) mod isolation;
pub(crate) mod live;
pub(crate) mod queue;
pub(crate) mod routing;
pub(crate) mod session;
pub(crate) mod summary;
pub(crate) mod waits;

pub use event_json::EventJson;
pub use isolation::{CallChanges, WorkspaceBase, short_commit};
pub use live::LiveReason;
pub use queue::{Enqueued, QueueOutcome, QueueStats, QueuedEntry, QueuedStart, QueuedState};
pub use routing::{AgentDefinition, BackendOrigin, BackendSpec, RoutingSnapshot};
pub use session::OpenSession;
pub use summary::{CallCounts, EndSummary, ModelUsage};
pub use waits::{
    AuthContext, AuthMethod, CheckpointKind, CheckpointWait, SetupKind, SetupRequest, SetupState,
    SetupWait, ShownBackend,
};

/// The longest run id accepted anywhere.
pub(crate) const MAX_RUN_ID_LEN: usize = 128;

/// The highest generation a run may reach: its first execution and 4,094 resumes. The
/// SQLite store keys a call by its generation in 12 bits (`store/sqlite/calls.rs`), and a
/// resume past it is refused.
pub const MAX_GENERATION: u32 = 4095;

/// A run's identity: `<epoch-ms base36>-<6 random base36>`, validated as `^[a-z0-9]+-[a-z0-9]+$`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// Mints a fresh id from the current time and 30 random bits.
    pub(crate) fn generate() -> RunId {
        let millis = crate::util::now_ms().max(0) as u64;
        let random = uuid::Uuid::new_v4().as_u128();
        let mut suffix = String::with_capacity(6);
        let mut bits = random;
        for _ in 0..6 {
            suffix.push(base36_digit((bits % 36) as u8));
            bits /= 36;
        }
        RunId(format!("{}-{}", to_base36(millis), suffix))
    }

    /// Parses a caller-supplied id, naming the rule it breaks.
    pub fn parse(text: &str) -> Result<RunId, String> {
        if text.is_empty() || text.len() > MAX_RUN_ID_LEN {
            return Err(format!(
                "runId must be 1 to {MAX_RUN_ID_LEN} characters, got {}",
                text.len()
            ));
        }
        let valid_part = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match text.split_once('-') {
            Some((head, tail)) if valid_part(head) && valid_part(tail) => {
                Ok(RunId(text.to_owned()))
            }
            _ => Err(format!(
                "runId {text:?} does not match ^[a-z0-9]+-[a-z0-9]+$"
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn base36_digit(value: u8) -> char {
    char::from_digit(u32::from(value), 36).unwrap_or('0')
}

fn to_base36(mut value: u64) -> String {
    if value == 0 {
        return "0".into();
    }
    let mut digits = Vec::new();
    while value > 0 {
        digits.push(base36_digit((value % 36) as u8));
        value /= 36;
    }
    digits.iter().rev().collect()
}

/// Where a run is in its life. Paused and aborted runs resume under the same id; failed runs
/// resume after their script file is fixed (a revision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Preparing or waiting for a setup answer.
    Pending,
    Running,
    Paused,
    Completed,
    Failed,
    Aborted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Aborted => "aborted",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "pending" => RunStatus::Pending,
            "running" => RunStatus::Running,
            "paused" => RunStatus::Paused,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "aborted" => RunStatus::Aborted,
            _ => return None,
        })
    }

    /// Completed, failed and aborted: nothing executes any more.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Aborted
        )
    }

    /// Pending and running runs hold a capacity slot and a lease.
    pub(crate) fn is_active(self) -> bool {
        matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

/// Why a run paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    CheckpointRequired,
    AuthRequired,
    UsageLimit,
    Requested,
    Interrupted,
    /// The run's spend reached its `tokenBudget` or `costBudgetUsd`.
    Budget,
}

impl PauseReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PauseReason::CheckpointRequired => "checkpoint_required",
            PauseReason::AuthRequired => "auth_required",
            PauseReason::UsageLimit => "usage_limit",
            PauseReason::Requested => "requested",
            PauseReason::Interrupted => "interrupted",
            PauseReason::Budget => "budget",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<PauseReason> {
        Some(match text {
            "checkpoint_required" => PauseReason::CheckpointRequired,
            "auth_required" => PauseReason::AuthRequired,
            "usage_limit" => PauseReason::UsageLimit,
            "requested" => PauseReason::Requested,
            "interrupted" => PauseReason::Interrupted,
            "budget" => PauseReason::Budget,
            _ => return None,
        })
    }
}

/// Token usage, summed per call and per run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
        if let Some(cost) = other.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
    }

    pub fn is_zero(&self) -> bool {
        self.total_tokens == 0 && self.input_tokens == 0 && self.output_tokens == 0
    }
}

/// Runtime limits of a run, already clamped (engine.md Decision 10), and its spending limits
/// (`src/budget/`), which are checked, not clamped.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub max_agents: u32,
    pub concurrency: u32,
    pub agent_retries: u32,
    /// The per-attempt ceiling of every agent call of the current generation: the executing
    /// process's `AGENTPRISM_AGENT_TIMEOUT_MS`, recorded when a generation is admitted,
    /// approved or resumed (a call's `timeoutMs` can only shorten it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_timeout_ms: Option<u64>,
    /// Total tokens the run may spend (`tokenBudget`); `None` is no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// US dollars the run may spend where agents report cost (`costBudgetUsd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_budget_usd: Option<f64>,
    /// `Some(false)` when the run's owner turned the automatic resume at a usage reset off
    /// for it (`--no-auto-resume`); `None` leaves it to `meta.autoResume` and the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_agents: 1000,
            concurrency: 8,
            agent_retries: 0,
            agent_timeout_ms: None,
            token_budget: None,
            cost_budget_usd: None,
            auto_resume: None,
        }
    }
}

impl Limits {
    /// Applies caller overrides, clamping each into its range.
    pub(crate) fn with_overrides(
        self,
        max_agents: Option<i64>,
        concurrency: Option<i64>,
        agent_retries: Option<i64>,
    ) -> Limits {
        Limits {
            max_agents: max_agents
                .map(|v| v.clamp(1, 10_000) as u32)
                .unwrap_or(self.max_agents),
            concurrency: concurrency
                .map(|v| v.clamp(1, 16) as u32)
                .unwrap_or(self.concurrency),
            agent_retries: agent_retries
                .map(|v| v.clamp(0, 3) as u32)
                .unwrap_or(self.agent_retries),
            ..self
        }
    }

    /// The limits with `ceiling` as the per-attempt agent timeout in force.
    pub(crate) fn with_agent_timeout(self, ceiling: std::time::Duration) -> Limits {
        Limits {
            agent_timeout_ms: Some(u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX)),
            ..self
        }
    }

    /// The echoed shape
    /// `{maxAgents,tokenBudget,costBudgetUsd,concurrency,agentRetries,agentTimeoutMs}`;
    /// the budgets are null without a limit, `agentTimeoutMs` only for a run whose ceiling
    /// was never recorded; `autoResume: false` added for a run whose owner turned it off.
    pub fn to_json(self) -> Value {
        let mut limits = serde_json::json!({
            "maxAgents": self.max_agents,
            "tokenBudget": self.token_budget,
            "costBudgetUsd": self.cost_budget_usd,
            "concurrency": self.concurrency,
            "agentRetries": self.agent_retries,
            "agentTimeoutMs": self.agent_timeout_ms,
        });
        // Shown only when the owner turned it off: the default adds nothing to the echo.
        if let Some(on) = self.auto_resume {
            limits["autoResume"] = on.into();
        }
        limits
    }
}

/// Where the executing script text came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptSource {
    /// Sent inline; the store keeps a copy as `runs/<id>.script.js`.
    Inline,
    /// The caller's own file at an absolute path, never written or deleted by us.
    Path,
    /// A saved workflow resolved by name (served folders, nested workflows).
    Stored,
    /// A script of an encrypted workflows pack (`serve --workflows-pack`), at
    /// `<served folder>/<its path in the pack>`. Confidential: the stored record holds
    /// [`content_digest`]s in place of the script's and the companion files' texts, and the
    /// engine reads the texts from the pack again (refusing a changed digest) before it
    /// executes. There is no script copy and no `file://` resource.
    Pack,
}

/// Marks a stored digest in place of a confidential text.
pub(crate) const DIGEST_PREFIX: &str = "sha256:";

/// What a pack run stores in place of a text: `sha256:` and the SHA-256 of its bytes in hex.
pub(crate) fn content_digest(bytes: &[u8]) -> String {
    format!("{DIGEST_PREFIX}{}", crate::util::sha256_hex(bytes))
}

/// Whether `text` is a [`content_digest`] (and so no text at all).
pub(crate) fn is_content_digest(text: &str) -> bool {
    text.strip_prefix(DIGEST_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    })
}

impl ScriptSource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ScriptSource::Inline => "inline",
            ScriptSource::Path => "path",
            ScriptSource::Stored => "stored",
            ScriptSource::Pack => "pack",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<ScriptSource> {
        Some(match text {
            "inline" => ScriptSource::Inline,
            "path" => ScriptSource::Path,
            "stored" => ScriptSource::Stored,
            "pack" => ScriptSource::Pack,
            _ => return None,
        })
    }
}

/// A declared phase from `meta.phases`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One accepted script revision (a changed file read back by `resume`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptRevision {
    pub generation: u32,
    pub accepted_at: i64,
    pub sha256: String,
}

/// The persisted record of one run. Calls, events and answers live in their own tables so
/// that each write touches only what changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub run_id: RunId,
    /// Absolute project directory the run belongs to.
    pub project_dir: PathBuf,
    pub workflow_name: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<PauseReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The text that executes (the latest accepted revision); for a [`ScriptSource::Pack`]
    /// run as stored, its [`content_digest`] instead.
    pub script: String,
    /// The one file this run recorded as its script: the store copy or the caller's path.
    pub script_file: PathBuf,
    pub script_source: ScriptSource,
    #[serde(default)]
    pub script_revisions: Vec<ScriptRevision>,
    /// The parsed `meta` literal of the executing script. JSON: it is the script author's
    /// literal, with keys the engine does not know kept as written (the dry run warns of
    /// them); the engine reads its known keys when it analyses the script.
    pub meta: Value,
    /// The caller's `args`, handed to the script as they are: the user's JSON.
    pub args: Value,
    pub cwd: PathBuf,
    pub limits: Limits,
    #[serde(default)]
    pub phases: Vec<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_phase: Option<String>,
    /// `None` while not completed or when the script returned `undefined`. JSON: whatever
    /// the script returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    pub started_at: i64,
    pub updated_at: i64,
    #[serde(default)]
    pub token_usage: Usage,
    /// 32 hex characters; changes only when the event stream is recreated.
    pub stream_id: String,
    /// Incremented by every resume; the first execution is generation 1, the last one a run
    /// may reach [`MAX_GENERATION`].
    pub generation: u32,
    /// The backend-approval setup, from admission on for a script that declares backends:
    /// pending while unanswered, then kept with its answer (status shows it while pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupWait>,
    /// The sign-in an agent asked for, while paused `auth_required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_context: Option<AuthContext>,
    /// The checkpoint the run waits on, while paused `checkpoint_required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_context: Option<CheckpointWait>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_hint: Option<String>,
    /// While paused `usage_limit`: when the provider said the limit lifts (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<i64>,
    /// The run's automatic resume at a usage reset (`src/timers/`): when it is due, while
    /// paused `usage_limit`, and how many automatic resumes came since its owner's last.
    #[serde(default)]
    pub auto_resume: AutoResume,
    /// Routing inputs captured at admission: tiers, agent definitions, approved backends, and
    /// their integrity hash. Reused by every resume.
    pub routing: RoutingSnapshot,
    /// The companion files `meta.files` declares, by their relative path, as read at admission
    /// (or at the latest accepted revision): the texts `file(path)` returns, frozen so that a
    /// resume and a replay see what the first generation saw. Stored with the script (for a
    /// [`ScriptSource::Pack`] run, each text's [`content_digest`] instead).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// An opaque tag of whoever started the run, set by the front end (the folder server
    /// stores its owner key). Written at admission and then only by the store's
    /// compare-and-set `set_run_caller`, never by `update_run`, so a stale record written
    /// back by an execution cannot undo a reclaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The base of the run's isolated calls, recorded at admission when the script isolates
    /// any; `None` for a run that isolates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceBase>,
    /// What the run cost, written when a generation ends or pauses it; kept while a later
    /// generation runs, which starts its usage from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<EndSummary>,
}

/// A run's automatic resume: the durable timer of a run paused on a usage limit, and the
/// count that caps how often it may fire in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoResume {
    /// When the run resumes by itself (Unix ms, jitter included); `None` when nothing is
    /// scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<i64>,
    /// Automatic resumes since the owner last resumed the run by hand.
    #[serde(default)]
    pub count: u32,
}

/// How a settled call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallOutcome {
    Result,
    Null,
    Error,
}

impl CallOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Result => "result",
            CallOutcome::Null => "null",
            CallOutcome::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<CallOutcome> {
        Some(match text {
            "result" => CallOutcome::Result,
            "null" => CallOutcome::Null,
            "error" => CallOutcome::Error,
            _ => return None,
        })
    }
}

/// Which part of the system produced a call's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallOrigin {
    Runner,
    JournalReplay,
    Confirm,
    Headless,
    Engine,
}

impl CallOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            CallOrigin::Runner => "runner",
            CallOrigin::JournalReplay => "journal-replay",
            CallOrigin::Confirm => "confirm",
            CallOrigin::Headless => "headless",
            CallOrigin::Engine => "engine",
        }
    }

    pub fn parse(text: &str) -> Option<CallOrigin> {
        Some(match text {
            "runner" => CallOrigin::Runner,
            "journal-replay" => CallOrigin::JournalReplay,
            "confirm" => CallOrigin::Confirm,
            "headless" => CallOrigin::Headless,
            "engine" => CallOrigin::Engine,
            _ => return None,
        })
    }
}

/// The kind of a journaled call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    Agent,
    Checkpoint,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Agent => "agent",
            CallKind::Checkpoint => "checkpoint",
        }
    }

    pub fn parse(text: &str) -> Option<CallKind> {
        Some(match text {
            "agent" => CallKind::Agent,
            "checkpoint" => CallKind::Checkpoint,
            _ => return None,
        })
    }
}

/// A failure attached to a call record or a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallError {
    /// `"agent"`, `"engine"` or `"script"`: which layer raised it.
    pub form: String,
    pub code: String,
    pub message: String,
    pub recoverable: bool,
}

/// How a replayed call was matched to its recorded source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayInfo {
    pub source_generation: u32,
    pub recorded_index: u32,
    /// `path-hash` or `unique-hash`.
    #[serde(rename = "match")]
    pub match_kind: String,
}

/// One settled call (engine.md 2.2): the journal entry and the call record in one row.
/// A row with `outcome == Result` is a journal entry and a replay candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    pub generation: u32,
    pub index: u32,
    pub kind: CallKind,
    pub hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    pub outcome: CallOutcome,
    pub origin: CallOrigin,
    /// The value handed to the script (only for `outcome == Result`). JSON: an agent's
    /// answer or a checkpoint's, as the script received it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    #[serde(default)]
    pub aborted: bool,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_requested: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_resolved: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayInfo>,
    /// The ACP session this call ran in, kept for continuation after auth or usage pauses.
    /// JSON: the runner port's opaque reference (`AgentSession::session_ref`),
    /// whose shape each runner chooses (the ACP runner's is `{backendId, sessionId}`); the
    /// engine only reads `sessionId` back to ask the same runner to reattach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Value>,
    pub settlement_ordinal: u64,
    /// What an isolated call changed; `None` for a call that ran in the shared tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<CallChanges>,
    /// Set once a later generation consumed (replayed), re-executed or set aside (a resume
    /// that reruns it) this row; such rows are no longer replay candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<u32>,
    /// Why a call of a resumed generation ran live instead of replaying
    /// ([`LiveReason::as_str`]); `None` for a first generation's calls and replayed ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_reason: Option<LiveReason>,
}

/// One record of a run's append-only event stream (engine.md 7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    pub seq: u64,
    pub timestamp: i64,
    /// The `event` object, already redacted and capped: `{type, runId, scope, ...}`. JSON
    /// text: each event type has its own members, many carrying previews of agents' and
    /// scripts' values, and the stream is stored and served exactly as it was appended.
    pub event: EventJson,
    pub redacted: bool,
    pub truncated: bool,
}

/// A durable answer to a checkpoint, keyed by call index (first writer wins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointAnswer {
    pub call_index: u32,
    pub hash: String,
    /// The user's answer, handed to the script as it is.
    pub answer: Value,
    pub answered_at: i64,
}

/// The receipt a resume writes before it executes, so a lost-ack retry returns the same answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationReceipt {
    pub operation_id: String,
    pub generation: u32,
    pub input_digest: String,
    /// The answer the resume gave, returned again on a retry. JSON: it is the engine's
    /// admission answer, a type of the engine, which this layer does not know; the engine
    /// decodes it and reports a receipt that does not parse as a corrupt record.
    pub response: Value,
    pub created_at: i64,
}

/// A run's exclusive execution lease. The token fences the writes of a holder that lost the
/// lease; whether a lease may be taken over is the engine's [`crate::store::LeasePolicy`],
/// judged from the holder's identity (pid, start time, boot id) and `expires_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Who holds it: a daemon's `instanceId`, else a fresh uuid per process; control
    /// requests are routed to this owner.
    pub owner_id: String,
    /// The holder's process, for the liveness check of the daemon's and the CLI's policy.
    pub pid: u32,
    /// Process start time (Linux: `/proc/<pid>/stat` field 22), against pid reuse.
    pub proc_start: u64,
    /// The holder's boot id, against a pid and start time recycled after a reboot. `None` in
    /// leases written before schema version 4 or where the kernel does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The holder's host name: with the boot id, pid and `owner_id`, one process on one
    /// machine among every host sharing the store. `None` in leases written before schema
    /// version 9 or where the host name cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The fencing token: every write made under the lease carries it, and the lease
    /// changes hands only by compare-and-swap on it.
    pub token: String,
    pub acquired_at: i64,
    /// Unix ms after which the lease counts as lapsed unless renewed; `None` = no expiry
    /// (held until released or until its holder dies). The store fences by token only, so an
    /// expired lease that nobody took over still renews and writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

/// Summary row for listings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: RunId,
    pub project_dir: PathBuf,
    pub workflow_name: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<PauseReason>,
    pub started_at: i64,
    pub updated_at: i64,
    pub has_result: bool,
    /// The run's [`RunRecord::summary`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<EndSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_run_ids_parse() {
        for _ in 0..100 {
            let id = RunId::generate();
            assert_eq!(RunId::parse(id.as_str()).unwrap(), id);
        }
    }

    #[test]
    fn run_id_rules() {
        assert!(RunId::parse("abc-123").is_ok());
        assert!(RunId::parse("ABC-123").is_err());
        assert!(RunId::parse("abc").is_err());
        assert!(RunId::parse("abc-").is_err());
        assert!(RunId::parse("a-b-c").is_err());
        assert!(RunId::parse(&format!("a-{}", "b".repeat(126))).is_ok());
        assert!(RunId::parse(&format!("a-{}", "b".repeat(127))).is_err());
    }

    #[test]
    fn limits_clamp() {
        let limits = Limits::default().with_overrides(Some(0), Some(99), Some(9));
        assert_eq!(
            limits,
            Limits {
                max_agents: 1,
                concurrency: 16,
                agent_retries: 3,
                ..Limits::default()
            }
        );
    }
}
