//! The `workflow` tool's definition: its name, its actions and the fields each accepts, and
//! the one flat input schema built from them.
//!
//! The schema is flat and strict because hosts (the Anthropic API among them) reject
//! top-level `oneOf`/`anyOf`/`allOf` in a tool's input schema. So it lists every field once,
//! and `parse.rs` enforces which action accepts which field. The bounds below are shared by
//! the schema and the validation, so the two cannot drift. Every field has a `type`: an
//! untyped one (`args` once was) is flagged by the MCP Inspector's portability check, and
//! Gemini-style function declarations take one `type` per field; so `args` is an object.

use serde_json::{Value, json};

/// The tool's name.
pub const TOOL_NAME: &str = "workflow";

/// Every action with the fields it accepts (besides `action`), in the order error messages
/// list them.
pub const ACTIONS: &[(&str, &[&str])] = &[
    (
        "config",
        &["projectDir", "harnesses", "modelSpecs", "modelFilter"],
    ),
    (
        "run",
        &[
            "projectDir",
            "script",
            "scriptPath",
            "args",
            "maxAgents",
            "concurrency",
            "agentRetries",
            "tokenBudget",
            "costBudgetUsd",
        ],
    ),
    (
        "resume",
        &[
            "runId",
            "checkpointReplies",
            "rerun",
            "maxAgents",
            "concurrency",
            "agentRetries",
            "tokenBudget",
            "costBudgetUsd",
        ],
    ),
    ("setup-response", &["runId", "setupId", "response"]),
    ("status", &["runId", "lastN", "labelGlob", "logLines"]),
    ("result", &["runId", "offset", "maxBytes"]),
    (
        "permissions-response",
        &["runId", "permissionId", "response"],
    ),
    (
        "stop",
        &[
            "runId",
            "callIndex",
            "forceOwner",
            "lastN",
            "labelGlob",
            "logLines",
        ],
    ),
    ("pause", &["runId", "lastN", "labelGlob", "logLines"]),
];

/// Bounds shared by the schema and the validation, so the two cannot drift.
pub(super) const LAST_N: (i64, i64, i64) = (1, 50, 20);
pub(super) const LOG_LINES: (i64, i64, i64) = (0, 50, 20);
pub(super) const MAX_BYTES: (i64, i64, i64) = (4, 16_384, 16_384);
pub(super) const LABEL_GLOB_MAX: usize = 128;
pub(super) const RUN_ID_MAX: usize = 128;
pub(super) const NAME_LIST_MAX: usize = 32;
pub(super) const MODEL_FILTER_MAX: usize = 128;
pub(super) const ID_MAX: usize = 256;

/// Claude Code's `anthropic/maxResultSizeChars` for this tool: an answer up to this many
/// characters stays whole in the conversation, and a longer one (the status of a run with a
/// large result) is saved to a file with its first 2 KB shown to the model, where the
/// run's status and the next call lead. Without it Claude Code replaces an answer over
/// ~25,000 tokens with a notice naming only the file. Other hosts ignore the key.
pub(super) const CLAUDE_CODE_MAX_RESULT_CHARS: u64 = 100_000;

/// The `tools/list` entry.
pub(super) fn definition() -> Value {
    let names: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
    let limit = |description: &str| json!({"type": "integer", "description": description});
    let status_fields = "status, stop, pause";
    json!({
        "name": TOOL_NAME,
        "title": "Workflow runs",
        "description": "Run durable multi-agent workflow scripts (JavaScript whose agent() calls go to coding agents) and manage their lifecycle. \
    Actions: config (discover backends, models, modes: do this first), run (prepare and admit a script; returns an acknowledgement at once), \
    status (bounded snapshot), result (page the exact JSON result), resume (continue a paused/stopped/failed run under the same runId, answering checkpoints; rerun redoes chosen calls, also of a completed run), \
    setup-response (approve or decline script-declared backends), permissions-response (answer an agent's permission request), stop, pause. \
    Each action accepts only its own fields; see each field's description. Authoring guide: skill://agentprism-workflow-authoring/SKILL.md.",
        "inputSchema": {
            "type": "object",
            "additionalProperties": false,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "enum": names, "description": "What to do."},
                "projectDir": {"type": "string", "minLength": 1, "description": "config, run: absolute project directory; the run's working directory."},
                "script": {"type": "string", "minLength": 1, "description": "run: the script text (at most 1 MiB), first statement `export const meta = { name, description }`. Exactly one of script and scriptPath."},
                "scriptPath": {"type": "string", "minLength": 1, "description": "run: absolute path of a script file on the server. Exactly one of script and scriptPath."},
                "args": {"type": "object", "description": "run: a JSON object, the script's input (`args` inside it), checked against meta.inputSchema (default {})."},
                "maxAgents": limit("run, resume: cap on agent and checkpoint calls (default 1000, clamped to 1..10000)."),
                "concurrency": limit("run, resume: agents at once (default 8, clamped to 1..16)."),
                "agentRetries": limit("run, resume: retries of a failed agent call (default 0, clamped to 0..3)."),
                "tokenBudget": {"type": "integer", "minimum": 1, "description": "run, resume: total tokens the run may spend, as the agents report usage (overrides meta.tokenBudget; default no limit). At the limit no new agent call starts and the run pauses with reason budget; resume with a higher tokenBudget to continue."},
                "costBudgetUsd": {"type": "number", "exclusiveMinimum": 0, "description": "run, resume: US dollars the run may spend (overrides meta.costBudgetUsd; default no limit); refused when a routed backend reports no cost. At the limit the run pauses with reason budget."},
                "harnesses": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": NAME_LIST_MAX, "description": "config: backends to probe (default: every registered backend)."},
                "modelSpecs": {"type": "array", "items": {"type": "string", "minLength": 3}, "minItems": 1, "maxItems": NAME_LIST_MAX, "description": "config: exact `backend/model` routes to probe for their modes and options."},
                "modelFilter": {"type": "string", "minLength": 1, "maxLength": MODEL_FILTER_MAX, "description": "config: keep model choices containing this text (case-insensitive, `*` matches any run), or `/pattern/` with `.`, `*`, `^`, `$`."},
                "runId": {"type": "string", "pattern": "^[a-z0-9]+-[a-z0-9]+$", "maxLength": RUN_ID_MAX, "description": "Every action but config and run: the exact run id from the run acknowledgement."},
                "checkpointReplies": {"type": "object", "propertyNames": {"pattern": "^(0|[1-9][0-9]*)$"}, "description": "resume: answers by checkpoint call index (outcome.checkpointContext.callIndex): confirm → boolean, input → string, select → one of the choices."},
                "rerun": {"type": "array", "minItems": 1, "maxItems": crate::engine::rerun::MAX_TARGETS, "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1, "maxLength": crate::engine::rerun::MAX_LABEL_BYTES}]}, "description": "resume: calls to redo, by call index (status calls[].index) or label (every call with it). Their recorded answers are set aside (kept in history) and they run live; later calls whose prompts change because of them run live too, the rest replay. Also on completed runs. Not calls inside a nested workflow()."},
                "setupId": {"type": "string", "minLength": 1, "description": "setup-response: the pending setup request id (setup.request.id)."},
                "permissionId": {"type": "string", "minLength": 1, "description": "permissions-response: the pending permission id (status.pendingPermissions)."},
                "response": {"type": "object", "description": "setup-response: {action:\"accept\",content:{approve:true|false}} | {action:\"decline\"} | {action:\"cancel\"}. permissions-response: {outcome:{outcome:\"selected\",optionId}} | {outcome:{outcome:\"cancelled\"}}."},
                "lastN": {"type": "integer", "minimum": LAST_N.0, "maximum": LAST_N.1, "description": format!("{status_fields}: latest calls shown (default {}).", LAST_N.2)},
                "labelGlob": {"type": "string", "minLength": 1, "maxLength": LABEL_GLOB_MAX, "description": format!("{status_fields}: only calls whose whole label matches (case-sensitive; `*`, `?`, `\\` escapes), applied before lastN.")},
                "logLines": {"type": "integer", "minimum": LOG_LINES.0, "maximum": LOG_LINES.1, "description": format!("{status_fields}: log lines shown (default {}).", LOG_LINES.2)},
                "offset": {"type": "integer", "minimum": 0, "description": "result: byte offset into the result JSON (default 0); continue at the previous endOffset."},
                "maxBytes": {"type": "integer", "minimum": MAX_BYTES.0, "maximum": MAX_BYTES.1, "description": format!("result: page size in bytes (default {}).", MAX_BYTES.2)},
                "callIndex": {"type": "integer", "minimum": 0, "description": "stop: cancel only this live agent call (its slot becomes null); not with forceOwner."},
                "forceOwner": {"type": "boolean", "description": "stop: if the run's owner is a superseded server process that cannot stop it, end that process (it may be running other runs) and stop the run here; not with callIndex."}
            }
        },
        "_meta": {"anthropic/maxResultSizeChars": CLAUDE_CODE_MAX_RESULT_CHARS},
        "annotations": {
            "title": "Workflow runs",
            "readOnlyHint": false,
            "destructiveHint": true,
            "idempotentHint": false,
            "openWorldHint": true
        }
    })
}
