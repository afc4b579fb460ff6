//! Validation of the `workflow` tool's arguments into an [`Action`]: the per-action rules the
//! flat schema alone cannot express.
//!
//! Violations are JSON-RPC -32602 errors naming the action, the field and the fields that
//! action accepts: a model that sent a wrong field learns the right ones from one error, and
//! nothing is ever silently stripped. The tool turns them into results with `isError: true`
//! (`reply::invalid_input`), so the model can correct the call.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::engine::rerun::{MAX_LABEL_BYTES, MAX_TARGETS as RERUN_MAX, RerunTarget};
use crate::engine::runner::PermissionOutcome;
use crate::engine::{LimitOverrides, ResumeRequest, RunRequest, ScriptInput, StatusQuery};
use crate::mcp::handler::{McpError, McpResult};
use crate::model::RunId;

use super::config::ConfigInput;
use super::schema::{
    ACTIONS, ID_MAX, LABEL_GLOB_MAX, LAST_N, LOG_LINES, MAX_BYTES, MODEL_FILTER_MAX, NAME_LIST_MAX,
    RUN_ID_MAX,
};

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

/// Validates `arguments` into an [`Action`]; every violation is an error naming the field
/// (the caller turns it into a tool execution error, `reply::invalid_input`).
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
    let input = Input::of(fields)?;
    Ok(match input.action {
        "config" => Action::Config(input.config(default_project)?),
        "run" => Action::Run(input.run(default_project)?),
        "resume" => Action::Resume(ResumeRequest {
            run_id: Some(input.run_id()?),
            checkpoint_replies: input.checkpoint_replies()?,
            limits: input.limits()?,
            operation_id: None,
            timer: None,
            rerun: input.rerun()?,
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
        "stop" => input.stop()?,
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
    /// The action `fields` name, with every field checked to belong to it.
    fn of(fields: &Map<String, Value>) -> McpResult<Input<'_>> {
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
        Ok(input)
    }

    fn config(&self, default_project: Option<&Path>) -> McpResult<ConfigInput> {
        Ok(ConfigInput {
            project_dir: self.project_dir(default_project)?,
            harnesses: self.name_list("harnesses", |_| Ok(()))?,
            model_specs: self.name_list("modelSpecs", |spec| match spec.split_once('/') {
                Some((_, model)) if crate::engine::routing::is_browse_selector(model) => Err(format!(
                    "{spec:?} is a browse selector, not a model; pass {model:?} as modelFilter to list its models"
                )),
                Some((backend, model)) if !backend.is_empty() && !model.is_empty() => Ok(()),
                _ => Err(format!("{spec:?} is not a backend/model route")),
            })?,
            model_filter: self.string("modelFilter", MODEL_FILTER_MAX)?,
        })
    }

    fn run(&self, default_project: Option<&Path>) -> McpResult<RunRequest> {
        let project_dir = self.project_dir(default_project)?;
        let script = match (
            self.string("script", usize::MAX)?,
            self.string("scriptPath", usize::MAX)?,
        ) {
            (Some(text), None) => ScriptInput::Inline(text),
            (None, Some(path)) => ScriptInput::Path(self.absolute("scriptPath", &path)?),
            (Some(_), Some(_)) => {
                return Err(self.error(
                    "scriptPath",
                    "cannot be given together with script; send exactly one of them".into(),
                ));
            }
            (None, None) => {
                return Err(self.error(
                    "script",
                    "is missing: send exactly one of script (the text) and scriptPath (an absolute path)".into(),
                ));
            }
        };
        Ok(RunRequest {
            project_dir,
            script,
            args: match self.fields.get("args") {
                None => json!({}),
                Some(args @ Value::Object(_)) => args.clone(),
                Some(other) => {
                    return Err(self.error(
                        "args",
                        format!(
                            "must be a JSON object, got {}; put other input inside one, e.g. {{\"items\": [...]}}",
                            kind_of(other)
                        ),
                    ));
                }
            },
            limits: self.limits()?,
            caller: None,
            trace: None,
        })
    }

    fn stop(&self) -> McpResult<Action> {
        let call_index = self.integer("callIndex", 0, i64::from(u32::MAX))?;
        // forceOwner widens whose lease a whole-run stop may break: a superseded daemon
        // still holding the run is ended first (the engine verifies it is superseded).
        let force_owner = match self.fields.get("forceOwner") {
            None => false,
            Some(Value::Bool(force)) => *force,
            Some(other) => {
                return Err(self.error(
                    "forceOwner",
                    format!("must be a boolean, got {}", kind_of(other)),
                ));
            }
        };
        if call_index.is_some() && self.fields.contains_key("forceOwner") {
            return Err(self.error(
                "forceOwner",
                "cannot be combined with callIndex: callIndex cancels one live call, forceOwner stops the whole run".into(),
            ));
        }
        Ok(Action::Stop {
            run_id: self.run_id()?,
            call_index: call_index.map(|index| index as u32),
            force_owner,
            query: self.status_query()?,
        })
    }

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

    /// Limits are clamped by the engine (scenario 10), so only the type is checked here;
    /// the spending limits are checked, not clamped (`crate::budget::limits`).
    fn limits(&self) -> McpResult<LimitOverrides> {
        let budget = crate::budget::limits(self.fields, "")
            .map_err(|error| self.error(&error.field, error.problem))?;
        Ok(LimitOverrides {
            max_agents: self.integer("maxAgents", i64::MIN, i64::MAX)?,
            concurrency: self.integer("concurrency", i64::MIN, i64::MAX)?,
            agent_retries: self.integer("agentRetries", i64::MIN, i64::MAX)?,
            budget,
            auto_resume: None,
            confirmed: false,
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

    /// `rerun`: call indexes and labels, each checked here; whether they name calls of the
    /// run is the engine's to say.
    fn rerun(&self) -> McpResult<Vec<RerunTarget>> {
        let Some(value) = self.fields.get("rerun") else {
            return Ok(Vec::new());
        };
        let Some(items) = value.as_array() else {
            return Err(self.error(
                "rerun",
                format!(
                    "must be an array of call indexes and labels, got {}",
                    kind_of(value)
                ),
            ));
        };
        if items.is_empty() || items.len() > RERUN_MAX {
            return Err(self.error(
                "rerun",
                format!("must have 1 to {RERUN_MAX} items, got {}", items.len()),
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(position, item)| match item {
                Value::Number(number) => number
                    .as_u64()
                    .and_then(|index| u32::try_from(index).ok())
                    .map(RerunTarget::Index)
                    .ok_or_else(|| {
                        self.error(
                            "rerun",
                            format!("item {position} ({number}) is not a call index (0, 1, 2, ...)"),
                        )
                    }),
                Value::String(label) if !label.is_empty() && label.len() <= MAX_LABEL_BYTES => {
                    Ok(RerunTarget::Label(label.clone()))
                }
                other => Err(self.error(
                    "rerun",
                    format!(
                        "item {position} must be a call index or a label of 1 to {MAX_LABEL_BYTES} bytes, got {}",
                        kind_of(other)
                    ),
                )),
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_rerun_label_as_long_as_a_call_s_longest_is_taken_and_one_byte_more_refused() {
        let resume = |label: String| {
            parse(
                &json!({"action": "resume", "runId": "abc-def", "rerun": [label]}),
                None,
            )
        };
        let longest = "l".repeat(MAX_LABEL_BYTES);
        match resume(longest.clone()) {
            Ok(Action::Resume(request)) => {
                assert_eq!(request.rerun, [RerunTarget::Label(longest)]);
            }
            _ => panic!("a label of {MAX_LABEL_BYTES} bytes is refused"),
        }
        let refused = match resume("l".repeat(MAX_LABEL_BYTES + 1)) {
            Err(error) => error.to_string(),
            Ok(_) => panic!("a label past the limit is taken"),
        };
        assert!(
            refused.contains("item 0 must be a call index or a label of 1 to 1024 bytes"),
            "{refused}"
        );
    }
}
