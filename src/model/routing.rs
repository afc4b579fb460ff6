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
    /// Whether a call with an output schema may offer this backend's agent the client-hosted
    /// `StructuredOutput` tool (when it advertises HTTP MCP servers); `false` keeps the
    /// schema in the prompt only. Written only when `false`.
    #[serde(default = "offered", skip_serializing_if = "is_offered")]
    pub structured_output_tool: bool,
    /// Absolute folders beyond the call's working tree whose files the agent may read and
    /// write through ACP `fs/*` requests (`fileRoots`, accepted from AGENTPRISM_BACKENDS only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_roots: Vec<std::path::PathBuf>,
    /// Where it came from: `builtin`, `host` (AGENTPRISM_BACKENDS) or `script` (meta.backends).
    pub origin: BackendOrigin,
}

fn offered() -> bool {
    true
}

fn is_offered(flag: &bool) -> bool {
    *flag
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendOrigin {
    Builtin,
    Host,
    Script,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot as admission writes it (every key, agents and backends with their optional
    /// fields) reads back to the same text, byte for byte.
    #[test]
    fn a_snapshot_as_written_reads_back_to_the_same_json() {
        let text = r#"{"tiers":{"small":"codex/mini"},"agents":{"plain":{"rolePrompt":"Hi.","digest":"aa"},"reviewer":{"model":"codex","tools":["Read","Grep"],"disallowedTools":["Bash"],"isolation":"worktree","rolePrompt":"You review code.","digest":"bb"}},"scriptBackends":{"bare":{"id":"bare","command":"bare-acp","args":[],"env":{},"origin":"script"},"mine":{"id":"mine","command":"/opt/mine-acp","args":["--flag"],"env":{"A":"1"},"sessionMeta":{"x":[1,2]},"origin":"script"}},"integrity":"3c1d"}"#;
        let snapshot: RoutingSnapshot = serde_json::from_str(text).expect("snapshot");
        assert_eq!(snapshot.agents["reviewer"].tools, ["Read", "Grep"]);
        assert_eq!(
            snapshot.script_backends["mine"].origin,
            BackendOrigin::Script
        );
        assert_eq!(serde_json::to_string(&snapshot).expect("serialize"), text);
        let empty = r#"{"tiers":{},"agents":{},"scriptBackends":{},"integrity":""}"#;
        let snapshot: RoutingSnapshot = serde_json::from_str(empty).expect("empty");
        assert_eq!(snapshot, RoutingSnapshot::default());
        assert_eq!(serde_json::to_string(&snapshot).expect("serialize"), empty);
    }

    /// Not a snapshot, or one with a key this shape does not have, is refused rather than
    /// read as an empty snapshot that would route the run anew.
    #[test]
    fn a_snapshot_that_does_not_fit_is_refused() {
        for text in [
            r#""not a snapshot""#,
            r#"{"tiers":{"small":3}}"#,
            r#"{"tiers":{},"integrity":"a","tierz":{}}"#,
            r#"{"agents":{"a":{"digest":"d"}}}"#,
        ] {
            assert!(
                serde_json::from_str::<RoutingSnapshot>(text).is_err(),
                "{text}"
            );
        }
    }
}
