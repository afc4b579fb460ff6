//! The routing snapshot a run records at admission (engine.md 4): tiers, agent definitions and
//! approved script backends, sealed by an integrity hash. The engine captures, seals and
//! resolves it (`engine::routing`); here is only its durable shape, so that the store reads a
//! snapshot that does not fit as a corrupt row instead of handing the engine raw JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Routing inputs captured at admission and reused by every resume, so a run's routing never
/// drifts with files on disk. A missing map reads as empty (every writer writes all four
/// keys); a key it does not know is a corrupt snapshot, since writing it back would drop it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingSnapshot {
    #[serde(default)]
    pub tiers: BTreeMap<String, String>,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentDefinition>,
    /// Approved `meta.backends` (empty until approved).
    #[serde(default)]
    pub script_backends: BTreeMap<String, BackendSpec>,
    /// sha256 over the canonical JSON of the three fields above.
    #[serde(default)]
    pub integrity: String,
}

/// A named agent definition (`.agentprism/agents/<name>.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentDefinition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// The body: a role prompt put before the call's prompt.
    pub role_prompt: String,
    /// sha256 of the file, part of the call's identity.
    pub digest: String,
}

/// A backend as the engine routes to it: where its command comes from and how to run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendSpec {
    /// The routing name (`claude`, `codex`, `opencode`, `pi`, or a custom name).
    pub id: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Merged into `session/new` `_meta`: the backend author's JSON, passed on as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_meta: Option<Value>,
    /// Where it came from: `builtin`, `host` (AGENTPRISM_BACKENDS) or `script` (meta.backends).
    pub origin: BackendOrigin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendOrigin {
    Builtin,
    Host,
    Script,
}
