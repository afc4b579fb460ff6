//! The `workflow` tool: its one flat input schema, the per-action validation that the schema
//! alone cannot express, and the dispatch of each action to the engine.
//!
//! The schema is flat and strict because hosts (the Anthropic API among them) reject
//! top-level `oneOf`/`anyOf`/`allOf` in a tool's input schema. So the schema lists every
//! field once, and [`parse`] enforces which action accepts which field. Violations are
//! JSON-RPC -32602 errors naming the action, the field and the fields that action accepts:
//! a model that sent a wrong field learns the right ones from one error, and nothing is ever
//! silently stripped. Failures of the work itself (a script that does not prepare, an
//! unknown run, a full project) are tool results with `isError: true`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::engine::runner::PermissionOutcome;
use crate::engine::{
    Admission, EngineError, LimitOverrides, ResumeRequest, RunRequest, ScriptInput, StatusQuery,
};
use crate::mcp::handler::{McpError, McpResult, RequestContext};
use crate::model::RunId;

use super::{OBSERVATION_CEILING, PREPARATION_CEILING, WorkflowServer, resources, text};

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
        ],
    ),
    (
        "resume",
        &[
            "runId",
            "checkpointReplies",
            "maxAgents",
            "concurrency",
            "agentRetries",
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
const LAST_N: (i64, i64, i64) = (1, 50, 20);
const LOG_LINES: (i64, i64, i64) = (0, 50, 20);
const MAX_BYTES: (i64, i64, i64) = (4, 16_384, 16_384);
const LABEL_GLOB_MAX: usize = 128;
const RUN_ID_MAX: usize = 128;
const NAME_LIST_MAX: usize = 32;
const MODEL_FILTER_MAX: usize = 128;
const ID_MAX: usize = 256;

/// A validated request.
#[derive(Debug)]
pub(super) enum Action {
    Config(ConfigInput),
    Run(RunRequest),
    Resume(ResumeRequest),
    SetupResponse {
        run_id: RunId,
        setup_id: String,
        response: Value,
    },
    Status {
        run_id: RunId,
        query: StatusQuery,
    },
    Result {
        run_id: RunId,
        offset: usize,
        max_bytes: usize,
    },
    PermissionsResponse {
        run_id: RunId,
        permission_id: String,
        outcome: PermissionOutcome,
    },
    Stop {
        run_id: RunId,
        call_index: Option<u32>,
        /// Also end a superseded daemon still holding the run.
        force_owner: bool,
        query: StatusQuery,
    },
    Pause {
        run_id: RunId,
        query: StatusQuery,
    },
}

impl Action {
    /// Run and resume admit work, so they go through the exact-retry receipts.
    pub(super) fn admits(&self) -> bool {
        matches!(self, Action::Run(_) | Action::Resume(_))
    }
}

#[derive(Debug)]
pub(super) struct ConfigInput {
    pub project_dir: PathBuf,
    pub harnesses: Option<Vec<String>>,
    pub model_specs: Option<Vec<String>>,
    pub model_filter: Option<String>,
}

/// The `tools/list` entry.
pub(super) fn tool_definition() -> Value {
    let names: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
    let limit = |description: &str| json!({"type": "integer", "description": description});
    let status_fields = "status, stop, pause";
    json!({
        "name": TOOL_NAME,
        "title": "Workflow runs",
        "description": "Run durable multi-agent workflow scripts (JavaScript whose agent() calls go to coding agents) and manage their lifecycle. \
    Actions: config (discover backends, models, modes: do this first), run (prepare and admit a script; returns an acknowledgement at once), \
    status (bounded snapshot), result (page the exact JSON result), resume (continue a paused/stopped/failed run under the same runId, answering checkpoints), \
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
                "args": {"description": "run: strict-JSON input for the script (`args` inside it), checked against meta.inputSchema."},
                "maxAgents": limit("run, resume: cap on agent and checkpoint calls (default 1000, clamped to 1..10000)."),
                "concurrency": limit("run, resume: agents at once (default 8, clamped to 1..16)."),
                "agentRetries": limit("run, resume: retries of a failed agent call (default 0, clamped to 0..3)."),
                "harnesses": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": NAME_LIST_MAX, "description": "config: backends to probe (default: every registered backend)."},
                "modelSpecs": {"type": "array", "items": {"type": "string", "minLength": 3}, "minItems": 1, "maxItems": NAME_LIST_MAX, "description": "config: exact `backend/model` routes to probe for their modes and options."},
                "modelFilter": {"type": "string", "minLength": 1, "maxLength": MODEL_FILTER_MAX, "description": "config: keep model choices containing this text (case-insensitive, `*` matches any run), or `/pattern/` with `.`, `*`, `^`, `$`."},
                "runId": {"type": "string", "pattern": "^[a-z0-9]+-[a-z0-9]+$", "maxLength": RUN_ID_MAX, "description": "Every action but config and run: the exact run id from the run acknowledgement."},
                "checkpointReplies": {"type": "object", "propertyNames": {"pattern": "^(0|[1-9][0-9]*)$"}, "description": "resume: answers by checkpoint call index (outcome.checkpointContext.callIndex): confirm → boolean, input → string, select → one of the choices."},
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
        "annotations": {
            "title": "Workflow runs",
            "readOnlyHint": false,
            "destructiveHint": true,
            "idempotentHint": false,
            "openWorldHint": true
        }
    })
}

/// Validates `arguments` into an [`Action`]; every violation is an error naming the field
/// (the caller turns it into a tool execution error, [`invalid_input`]).
pub(super) fn parse(arguments: &Value, default_project: Option<&Path>) -> McpResult<Action> {
    let empty = Map::new();
    let fields = match arguments {
        Value::Object(map) => map,
        Value::Null => &empty,
        other => {
            return Err(McpError::invalid_params(format!(
                "workflow: arguments must be an object, got {}",
                kind_of(other)
            )));
        }
    };
    let action_names: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
    let action = match fields.get("action") {
        Some(Value::String(action)) => action.as_str(),
        Some(other) => {
            return Err(McpError::invalid_params(format!(
                "workflow: field \"action\" must be a string, one of {}; got {}",
                action_names.join(", "),
                kind_of(other)
            ))
            .with_data(json!({"action": null, "field": "action", "accepted": action_names})));
        }
        None => {
            return Err(McpError::invalid_params(format!(
                "workflow: field \"action\" is required; one of {}",
                action_names.join(", ")
            ))
            .with_data(json!({"action": null, "field": "action", "accepted": action_names})));
        }
    };
    let Some((action, accepted)) = ACTIONS.iter().find(|(name, _)| *name == action) else {
        return Err(McpError::invalid_params(format!(
            "workflow: unknown action {action:?}; one of {}",
            action_names.join(", ")
        ))
        .with_data(json!({"action": action, "field": "action", "accepted": action_names})));
    };
    let input = Input {
        action,
        accepted,
        fields,
    };
    for key in fields.keys() {
        if key == "action" || accepted.contains(&key.as_str()) {
            continue;
        }
        let known = ACTIONS.iter().any(|(_, list)| list.contains(&key.as_str()));
        return Err(input.error(
            key,
            if known {
                format!("is not accepted by action {action:?}")
            } else {
                "is not a field of the workflow tool".to_owned()
            },
        ));
    }
    Ok(match *action {
        "config" => Action::Config(ConfigInput {
            project_dir: input.project_dir(default_project)?,
            harnesses: input.name_list("harnesses", |_| Ok(()))?,
            model_specs: input.name_list("modelSpecs", |spec| match spec.split_once('/') {
                Some((backend, model)) if !backend.is_empty() && !model.is_empty() => Ok(()),
                _ => Err(format!("{spec:?} is not a backend/model route")),
            })?,
            model_filter: input.string("modelFilter", MODEL_FILTER_MAX)?,
        }),
        "run" => {
            let project_dir = input.project_dir(default_project)?;
            let script = match (
                input.string("script", usize::MAX)?,
                input.string("scriptPath", usize::MAX)?,
            ) {
                (Some(text), None) => ScriptInput::Inline(text),
                (None, Some(path)) => ScriptInput::Path(input.absolute("scriptPath", &path)?),
                (Some(_), Some(_)) => {
                    return Err(input.error(
                        "scriptPath",
                        "cannot be given together with script; send exactly one of them".into(),
                    ));
                }
                (None, None) => {
                    return Err(input.error(
                        "script",
                        "is missing: send exactly one of script (the text) and scriptPath (an absolute path)".into(),
                    ));
                }
            };
            Action::Run(RunRequest {
                project_dir,
                script,
                args: fields.get("args").cloned().unwrap_or_else(|| json!({})),
                limits: input.limits()?,
            })
        }
        "resume" => Action::Resume(ResumeRequest {
            run_id: Some(input.run_id()?),
            checkpoint_replies: input.checkpoint_replies()?,
            limits: input.limits()?,
            operation_id: None,
        }),
        "setup-response" => Action::SetupResponse {
            run_id: input.run_id()?,
            setup_id: input.required_string("setupId", ID_MAX)?,
            response: input.setup_response()?,
        },
        "status" => Action::Status {
            run_id: input.run_id()?,
            query: input.status_query()?,
        },
        "result" => Action::Result {
            run_id: input.run_id()?,
            offset: input.integer("offset", 0, i64::MAX)?.unwrap_or(0) as usize,
            max_bytes: input
                .integer("maxBytes", MAX_BYTES.0, MAX_BYTES.1)?
                .unwrap_or(MAX_BYTES.2) as usize,
        },
        "permissions-response" => Action::PermissionsResponse {
            run_id: input.run_id()?,
            permission_id: input.required_string("permissionId", ID_MAX)?,
            outcome: input.permission_outcome()?,
        },
        "stop" => {
            let call_index = input.integer("callIndex", 0, i64::from(u32::MAX))?;
            // forceOwner widens whose lease a whole-run stop may break: a superseded daemon
            // still holding the run is ended first (the engine verifies it is superseded).
            let force_owner = match fields.get("forceOwner") {
                None => false,
                Some(Value::Bool(force)) => *force,
                Some(other) => {
                    return Err(input.error(
                        "forceOwner",
                        format!("must be a boolean, got {}", kind_of(other)),
                    ));
                }
            };
            if call_index.is_some() && fields.contains_key("forceOwner") {
                return Err(input.error(
                    "forceOwner",
                    "cannot be combined with callIndex: callIndex cancels one live call, forceOwner stops the whole run".into(),
                ));
            }
            Action::Stop {
                run_id: input.run_id()?,
                call_index: call_index.map(|index| index as u32),
                force_owner,
                query: input.status_query()?,
            }
        }
        "pause" => Action::Pause {
            run_id: input.run_id()?,
            query: input.status_query()?,
        },
        _ => unreachable!("every action in ACTIONS is matched"),
    })
}

/// One request's fields, with the context every error message needs.
struct Input<'a> {
    action: &'a str,
    accepted: &'a [&'a str],
    fields: &'a Map<String, Value>,
}

impl Input<'_> {
    fn error(&self, field: &str, problem: String) -> McpError {
        McpError::invalid_params(format!(
            "workflow action {:?}: field {field:?} {problem}. Action {:?} accepts: action, {}",
            self.action,
            self.action,
            self.accepted.join(", ")
        ))
        .with_data(json!({
            "action": self.action,
            "field": field,
            "accepted": std::iter::once("action").chain(self.accepted.iter().copied()).collect::<Vec<_>>(),
        }))
    }

    fn string(&self, field: &str, max_chars: usize) -> McpResult<Option<String>> {
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::String(text)) if text.is_empty() => {
                Err(self.error(field, "must not be empty".into()))
            }
            Some(Value::String(text)) if text.chars().count() > max_chars => {
                Err(self.error(field, format!("is longer than {max_chars} characters")))
            }
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(other) => {
                Err(self.error(field, format!("must be a string, got {}", kind_of(other))))
            }
        }
    }

    fn required_string(&self, field: &str, max_chars: usize) -> McpResult<String> {
        self.string(field, max_chars)?
            .ok_or_else(|| self.error(field, "is required".into()))
    }

    fn absolute(&self, field: &str, path: &str) -> McpResult<PathBuf> {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(self.error(
                field,
                format!(
                    "must be an absolute path, got {:?}",
                    path.display().to_string()
                ),
            ));
        }
        Ok(path)
    }

    fn project_dir(&self, default: Option<&Path>) -> McpResult<PathBuf> {
        match self.string("projectDir", usize::MAX)? {
            Some(path) => self.absolute("projectDir", &path),
            None => default.map(Path::to_path_buf).ok_or_else(|| {
                self.error(
                    "projectDir",
                    "is required (an absolute project directory)".into(),
                )
            }),
        }
    }

    fn run_id(&self) -> McpResult<RunId> {
        let text = self.required_string("runId", usize::MAX)?;
        RunId::parse(&text).map_err(|problem| {
            self.error(
                "runId",
                format!("is not a run id ({problem}); expected ^[a-z0-9]+-[a-z0-9]+$, at most {RUN_ID_MAX} characters"),
            )
        })
    }

    /// An integer in `min..=max`. Whole-valued floats (`5.0`) count as integers.
    fn integer(&self, field: &str, min: i64, max: i64) -> McpResult<Option<i64>> {
        let Some(value) = self.fields.get(field) else {
            return Ok(None);
        };
        let number = value.as_i64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        });
        match number {
            Some(number) if (min..=max).contains(&number) => Ok(Some(number)),
            Some(number) => Err(self.error(
                field,
                if max == i64::MAX {
                    format!("must be at least {min}, got {number}")
                } else {
                    format!("must be from {min} to {max}, got {number}")
                },
            )),
            None => Err(self.error(field, format!("must be an integer, got {}", kind_of(value)))),
        }
    }

    /// Limits are clamped by the engine (scenario 10), so only the type is checked here.
    fn limits(&self) -> McpResult<LimitOverrides> {
        Ok(LimitOverrides {
            max_agents: self.integer("maxAgents", i64::MIN, i64::MAX)?,
            concurrency: self.integer("concurrency", i64::MIN, i64::MAX)?,
            agent_retries: self.integer("agentRetries", i64::MIN, i64::MAX)?,
        })
    }

    fn status_query(&self) -> McpResult<StatusQuery> {
        let label_glob = self.string("labelGlob", LABEL_GLOB_MAX)?;
        Ok(StatusQuery {
            last_n: self
                .integer("lastN", LAST_N.0, LAST_N.1)?
                .unwrap_or(LAST_N.2) as usize,
            label_glob,
            log_lines: self
                .integer("logLines", LOG_LINES.0, LOG_LINES.1)?
                .unwrap_or(LOG_LINES.2) as usize,
        })
    }

    fn name_list(
        &self,
        field: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> McpResult<Option<Vec<String>>> {
        let Some(value) = self.fields.get(field) else {
            return Ok(None);
        };
        let Some(items) = value.as_array() else {
            return Err(self.error(
                field,
                format!("must be an array of strings, got {}", kind_of(value)),
            ));
        };
        if items.is_empty() || items.len() > NAME_LIST_MAX {
            return Err(self.error(
                field,
                format!("must have 1 to {NAME_LIST_MAX} items, got {}", items.len()),
            ));
        }
        let mut names = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(name) if !name.is_empty() && name.len() <= ID_MAX => {
                    check(name)
                        .map_err(|problem| self.error(field, format!("item {index}: {problem}")))?;
                    names.push(name.to_owned());
                }
                _ => {
                    return Err(self.error(
                        field,
                        format!("item {index} must be a non-empty string, got {item}"),
                    ));
                }
            }
        }
        Ok(Some(names))
    }

    fn checkpoint_replies(&self) -> McpResult<Vec<(u32, Value)>> {
        let Some(value) = self.fields.get("checkpointReplies") else {
            return Ok(Vec::new());
        };
        let Some(map) = value.as_object() else {
            return Err(self.error(
                "checkpointReplies",
                format!(
                    "must be an object mapping call indexes to answers, got {}",
                    kind_of(value)
                ),
            ));
        };
        let mut replies = Vec::with_capacity(map.len());
        for (key, answer) in map {
            // Canonical decimal only: "01" and "+1" would name the same checkpoint twice.
            let canonical =
                key == "0" || (!key.starts_with('0') && key.bytes().all(|b| b.is_ascii_digit()));
            let index = key
                .parse::<u32>()
                .ok()
                .filter(|_| canonical && !key.is_empty());
            let Some(index) = index else {
                return Err(self.error(
                    "checkpointReplies",
                    format!("has key {key:?}, which is not a canonical call index (0, 1, 2, ...)"),
                ));
            };
            replies.push((index, answer.clone()));
        }
        Ok(replies)
    }

    fn setup_response(&self) -> McpResult<Value> {
        let response = self.response_object()?;
        let shape = "must be {action:\"accept\",content:{...}}, {action:\"decline\"} or {action:\"cancel\"}";
        let action = response.get("action").and_then(Value::as_str);
        let allowed: &[&str] = match action {
            Some("accept") => &["action", "content"],
            Some("decline" | "cancel") => &["action"],
            _ => return Err(self.error("response", shape.into())),
        };
        if let Some(extra) = response.keys().find(|key| !allowed.contains(&key.as_str())) {
            return Err(self.error(
                "response",
                format!("has unexpected key {extra:?}; it {shape}"),
            ));
        }
        if action == Some("accept") && !response.get("content").is_some_and(Value::is_object) {
            return Err(self.error(
                "response",
                format!("accept needs a content object; it {shape}"),
            ));
        }
        Ok(Value::Object(response.clone()))
    }

    fn permission_outcome(&self) -> McpResult<PermissionOutcome> {
        let response = self.response_object()?;
        let shape = "must be {outcome:{outcome:\"selected\",optionId}} or {outcome:{outcome:\"cancelled\"}}";
        if response.contains_key("_meta") {
            return Err(self.error("response", "must not carry _meta".into()));
        }
        if let Some(extra) = response.keys().find(|key| *key != "outcome") {
            return Err(self.error(
                "response",
                format!("has unexpected key {extra:?}; it {shape}"),
            ));
        }
        let Some(outcome) = response.get("outcome").and_then(Value::as_object) else {
            return Err(self.error("response", shape.into()));
        };
        if outcome.contains_key("_meta") {
            return Err(self.error("response", "must not carry _meta (in outcome)".into()));
        }
        match outcome.get("outcome").and_then(Value::as_str) {
            Some("selected") => {
                if let Some(extra) = outcome.keys().find(|k| *k != "outcome" && *k != "optionId") {
                    return Err(self.error(
                        "response",
                        format!("has unexpected key outcome.{extra}; it {shape}"),
                    ));
                }
                match outcome.get("optionId").and_then(Value::as_str) {
                    Some(option_id) if !option_id.is_empty() => Ok(PermissionOutcome::Selected {
                        option_id: option_id.to_owned(),
                    }),
                    _ => Err(self.error("response", "needs a non-empty outcome.optionId".into())),
                }
            }
            Some("cancelled") => {
                if let Some(extra) = outcome.keys().find(|k| *k != "outcome") {
                    return Err(self.error(
                        "response",
                        format!("has unexpected key outcome.{extra}; it {shape}"),
                    ));
                }
                Ok(PermissionOutcome::Cancelled)
            }
            _ => Err(self.error("response", shape.into())),
        }
    }

    fn response_object(&self) -> McpResult<&Map<String, Value>> {
        match self.fields.get("response") {
            Some(Value::Object(map)) => Ok(map),
            Some(other) => Err(self.error(
                "response",
                format!("must be an object, got {}", kind_of(other)),
            )),
            None => Err(self.error("response", "is required".into())),
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A tool result that reports a failure of the work (`isError: true`, text only).
pub(super) fn tool_error(message: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": message.into()}], "isError": true})
}

/// Arguments [`parse`] refused, as a tool execution error (MCP 2025-11-25) so the model can
/// correct the call: the same text, and `structuredContent.error` = `{action, field,
/// accepted}` (for a problem with `action` itself, `accepted` lists the actions).
pub(super) fn invalid_input(error: McpError) -> Value {
    let detail = error
        .data
        .unwrap_or_else(|| json!({"action": null, "field": null, "accepted": []}));
    json!({
        "content": [{"type": "text", "text": error.message}],
        "structuredContent": {"error": detail},
        "isError": true,
    })
}

/// Engine failures: rejections and unknown runs are tool errors; store failures (integrity,
/// I/O) are JSON-RPC -32603.
fn engine_failure(error: EngineError) -> McpResult<Value> {
    match error {
        EngineError::Rejected(message) => Ok(tool_error(message.to_string())),
        EngineError::UnknownRun(run_id) => Ok(tool_error(unknown_run(&run_id))),
        EngineError::Store(error) => Err(McpError::internal(format!("run store: {error}"))),
    }
}

/// The one text for a run id that is not there, whether it never existed or was deleted.
pub(super) fn unknown_run(run_id: &RunId) -> String {
    format!("No workflow run found for runId \"{run_id}\"")
}

impl WorkflowServer {
    /// Carries out a validated action. `operation_id` is the exact-retry key of run/resume.
    pub(super) async fn dispatch(
        &self,
        ctx: &RequestContext,
        action: Action,
        operation_id: Option<String>,
    ) -> McpResult<Value> {
        match action {
            Action::Config(input) => {
                let project_dir = input.project_dir.clone();
                let mut answer = observe(self.config(input)).await?;
                if let Some(document) = answer.get_mut("structuredContent") {
                    document["next"] = json!({
                        "action": "run",
                        "projectDir": project_dir,
                        "script": "<the workflow script text>",
                    });
                }
                Ok(answer)
            }
            Action::Run(request) => self.run(ctx, request).await,
            Action::Resume(mut request) => {
                request.operation_id = operation_id;
                self.resume(request).await
            }
            Action::SetupResponse {
                run_id,
                setup_id,
                response,
            } => match self
                .engine
                .setup_response(&run_id, &setup_id, &response)
                .await
            {
                Ok(answer) => {
                    let mut answer = json!(answer);
                    let headline = format!(
                        "Setup {setup_id} of run {run_id} answered: {}; the run is {}.{}",
                        if answer["accepted"] == true {
                            "approved"
                        } else {
                            "not approved"
                        },
                        answer["status"].as_str().unwrap_or("unknown"),
                        if answer["accepted"] == true {
                            ""
                        } else {
                            " A declined approval is final: the run cannot be resumed."
                        }
                    );
                    answer["next"] = if answer["accepted"] == true {
                        json!({"action": "status", "runId": run_id})
                    } else {
                        Value::Null
                    };
                    Ok(structured(headline, answer, Vec::new()))
                }
                Err(error) => engine_failure(error),
            },
            Action::Status { run_id, query } => {
                observe(async {
                    match self.engine.status(&run_id, &query).await {
                        Ok(status) => Ok(status_result(None, json!(status))),
                        Err(error) => engine_failure(error),
                    }
                })
                .await
            }
            Action::Result {
                run_id,
                offset,
                max_bytes,
            } => {
                observe(async {
                    match self.engine.result_page(&run_id, offset, max_bytes).await {
                        Ok(page) => {
                            let mut page = json!(page);
                            let links = vec![
                                resources::result_link(&run_id),
                                resources::events_link(&run_id),
                            ];
                            page["next"] = text::next_for_result(&page, max_bytes);
                            Ok(structured(page.to_string(), page, links))
                        }
                        Err(error) => engine_failure(error),
                    }
                })
                .await
            }
            Action::PermissionsResponse {
                run_id,
                permission_id,
                outcome,
            } => match self
                .engine
                .respond_permission(&run_id, &permission_id, outcome)
                .await
            {
                Ok(answer) => {
                    let mut answer = json!(answer);
                    answer["next"] = json!({"action": "status", "runId": run_id});
                    let mut links = vec![resources::events_link(&run_id)];
                    if let Ok(record) = self.engine.store().load_run(&run_id).await {
                        links.insert(0, resources::script_link(&run_id, &record.script_file));
                    }
                    Ok(structured(
                        format!("Permission {permission_id} of run {run_id} answered."),
                        answer,
                        links,
                    ))
                }
                Err(error) => engine_failure(error),
            },
            Action::Stop {
                run_id,
                call_index,
                force_owner,
                query,
            } => match self
                .engine
                .stop_with(&run_id, call_index, force_owner, &query)
                .await
            {
                Ok(status) => {
                    let status = json!(status);
                    let headline = text::stop_headline(&status, call_index);
                    Ok(status_result(Some(headline), status))
                }
                Err(error) => engine_failure(error),
            },
            Action::Pause { run_id, query } => match self.engine.pause(&run_id, &query).await {
                Ok(status) => {
                    let status = json!(status);
                    let headline = text::pause_headline(&status);
                    Ok(status_result(Some(headline), status))
                }
                Err(error) => engine_failure(error),
            },
        }
    }

    /// Prepares and admits a run inside the request: progress when asked for, abandoned on
    /// cancellation or after [`PREPARATION_CEILING`] as long as it is not admitted yet.
    async fn run(&self, ctx: &RequestContext, request: RunRequest) -> McpResult<Value> {
        ctx.progress(
            0.0,
            Some(1.0),
            Some("preparing: static checks, dry run, routing probes"),
        );
        let cancel = ctx.cancel.child_token();
        let preparation = self.engine.start_cancellable(request, &cancel);
        tokio::pin!(preparation);
        let mut timed_out = false;
        // Never drop the preparation once started: past the ceiling we cancel it and keep
        // awaiting, so an admission already under way completes and is reported.
        let result = tokio::select! {
            result = &mut preparation => result,
            _ = tokio::time::sleep(PREPARATION_CEILING) => {
                timed_out = true;
                cancel.cancel();
                preparation.await
            }
        };
        match result {
            // No "admitted" progress here: sent this close to the response it can arrive
            // after it (a client drops a request's progress handler with its response, and
            // the TypeScript SDK then reports an unknown progress token), so the response
            // alone says the run was admitted.
            Ok(admission) => {
                self.list_changed();
                Ok(acknowledgement("run", &admission))
            }
            Err(EngineError::Rejected(_)) if timed_out => Ok(tool_error(format!(
                "preparation took longer than {} s and was abandoned; nothing was stored",
                PREPARATION_CEILING.as_secs()
            ))),
            Err(error) => engine_failure(error),
        }
    }

    /// Resumes under the engine's receipt. The engine's resume cannot be abandoned halfway,
    /// so past the ceiling it continues on the server's tracker and the caller is told to
    /// retry: the retry (same request id) finds the engine's durable receipt.
    async fn resume(&self, request: ResumeRequest) -> McpResult<Value> {
        let engine = self.engine.clone();
        let mut task = self
            .tracker
            .spawn(async move { engine.resume(request).await });
        let joined = tokio::select! {
            joined = &mut task => joined,
            _ = tokio::time::sleep(PREPARATION_CEILING) => {
                return Ok(tool_error(format!(
                    "resume is still validating the revised script after {} s; it continues in the background. Check status, or repeat this request to get its acknowledgement",
                    PREPARATION_CEILING.as_secs()
                )));
            }
        };
        match joined {
            Ok(Ok(admission)) => Ok(acknowledgement("resume", &admission)),
            Ok(Err(error)) => engine_failure(error),
            Err(error) => Err(McpError::internal(format!("resume task failed: {error}"))),
        }
    }
}

/// Runs an observation under [`OBSERVATION_CEILING`].
async fn observe(work: impl std::future::Future<Output = McpResult<Value>>) -> McpResult<Value> {
    match tokio::time::timeout(OBSERVATION_CEILING, work).await {
        Ok(result) => result,
        Err(_) => Ok(tool_error(format!(
            "the request took longer than {} s; try again",
            OBSERVATION_CEILING.as_secs()
        ))),
    }
}

/// The run/resume acknowledgement (engine.md 6.3).
fn acknowledgement(action: &str, admission: &Admission) -> Value {
    let run_id = &admission.run_id;
    let script_uri = crate::engine::status::file_uri(&admission.script_file);
    let mut ack = json!({
        "accepted": true,
        "action": action,
        "runId": run_id,
        "status": admission.status,
        "scriptSource": admission.script_source,
        "scriptUri": script_uri,
        "scriptPath": admission.script_file,
        "eventsUri": resources::events_uri(run_id),
        "limits": admission.limits.to_json(),
    });
    if let Some(setup) = &admission.setup {
        ack["setup"] = setup.clone();
    }
    if let Some(continuation) = &admission.continuation {
        ack["continuation"] = continuation.clone();
    }
    if !admission.warnings.is_empty() {
        ack["warnings"] = json!(admission.warnings);
    }
    ack["next"] = text::next_for_status(&ack);
    let summary = text::acknowledgement(&ack);
    let links = vec![
        resources::script_link(run_id, &admission.script_file),
        resources::events_link(run_id),
    ];
    structured(summary, ack, links)
}

/// Status, stop and pause answers: the summary text, the status document, and links to the
/// run's script, events and (when completed with a value) result.
fn status_result(headline: Option<String>, mut status: Value) -> Value {
    status["next"] = text::next_for_status(&status);
    let summary = text::status(headline.as_deref(), &status);
    let mut links = Vec::new();
    if let Some(run_id) = status["runId"]
        .as_str()
        .and_then(|id| RunId::parse(id).ok())
    {
        if let Some(path) = status["scriptPath"].as_str() {
            links.push(resources::script_link(&run_id, Path::new(path)));
        }
        links.push(resources::events_link(&run_id));
        if status.get("resultUri").is_some() {
            links.push(resources::result_link(&run_id));
        }
    }
    structured(summary, status, links)
}

/// `{content:[text, ...links], structuredContent}`.
fn structured(summary: String, document: Value, links: Vec<Value>) -> Value {
    let mut content = vec![json!({"type": "text", "text": summary})];
    content.extend(links);
    json!({"content": content, "structuredContent": document})
}
