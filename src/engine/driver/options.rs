//! What the script passes with a call: the `{scope, prompt, path, options}` payload the
//! prelude sends, and `agent()` options after their type checks (engine.md 1.2). A bad
//! option is a `SCRIPT_VALIDATION_ERROR` naming the option.

use serde_json::{Map, Value};

use crate::engine::schema;

/// What the prelude sends with `agent()` and `checkpoint()`: `{scope, prompt, options, path}`.
pub(super) struct CallPayload {
    pub(super) scope: String,
    pub(super) prompt: String,
    pub(super) path: Option<String>,
    pub(super) options: Value,
}

impl CallPayload {
    pub(super) fn parse(payload: &Value) -> CallPayload {
        let text = |key: &str| payload.get(key).and_then(Value::as_str);
        CallPayload {
            scope: text("scope").unwrap_or("root").to_owned(),
            prompt: text("prompt").unwrap_or_default().to_owned(),
            path: text("path").map(str::to_owned),
            options: payload
                .get("options")
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
        }
    }
}

/// `agent()` options after type checks (engine.md 1.2).
#[derive(Clone, Debug, Default)]
pub(super) struct AgentOptions {
    pub(super) label: Option<String>,
    pub(super) phase: Option<String>,
    pub(super) schema: Option<Value>,
    pub(super) model: Option<String>,
    pub(super) tier: Option<String>,
    pub(super) mode: Option<String>,
    pub(super) config_options: Vec<(String, Value)>,
    pub(super) agent_type: Option<String>,
    pub(super) isolation: Option<String>,
    pub(super) cwd: Option<String>,
    pub(super) mcp_servers: Option<Value>,
    pub(super) images: Option<Value>,
    pub(super) meta: Option<Value>,
    pub(super) prompt_meta: Option<Value>,
    pub(super) keep_session: Option<bool>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) retries: Option<u32>,
}

impl AgentOptions {
    const KNOWN: &'static [&'static str] = &[
        "label",
        "phase",
        "schema",
        "model",
        "tier",
        "mode",
        "configOptions",
        "agentType",
        "isolation",
        "cwd",
        "mcpServers",
        "images",
        "meta",
        "promptMeta",
        "keepSession",
        "timeoutMs",
        "retries",
    ];

    pub(super) fn parse(value: &Value) -> Result<AgentOptions, String> {
        let Some(map) = value.as_object() else {
            return Err("agent() options must be an object".into());
        };
        if let Some(unknown) = map.keys().find(|key| !Self::KNOWN.contains(&key.as_str())) {
            return Err(format!(
                "agent() option {unknown:?} is not known; known options: {}",
                Self::KNOWN.join(", ")
            ));
        }
        let schema = object(map, "schema")?;
        if let Some(schema) = &schema {
            schema::check_schema(schema)
                .map_err(|e| format!("agent() option schema is not a valid JSON Schema: {e}"))?;
        }
        let config_options = config_options(map)?;
        let isolation = string(map, "isolation")?;
        if let Some(isolation) = &isolation
            && isolation != "worktree"
        {
            return Err(format!(
                "agent() option isolation must be \"worktree\", got {isolation:?}"
            ));
        }
        let cwd = string(map, "cwd")?;
        if let Some(cwd) = &cwd
            && !cwd.starts_with('/')
        {
            return Err(format!(
                "agent() option cwd must be an absolute path, got {cwd:?}"
            ));
        }
        let timeout_ms = timeout_ms(map)?;
        let retries = retries(map)?;
        let keep_session = keep_session(map)?;
        Ok(AgentOptions {
            label: string(map, "label")?,
            phase: string(map, "phase")?,
            schema,
            model: string(map, "model")?,
            tier: string(map, "tier")?,
            mode: string(map, "mode")?,
            config_options,
            agent_type: string(map, "agentType")?,
            isolation,
            cwd,
            mcp_servers: array(map, "mcpServers")?,
            images: array(map, "images")?,
            meta: object(map, "meta")?,
            prompt_meta: object(map, "promptMeta")?,
            keep_session,
            timeout_ms,
            retries,
        })
    }
}

/// Options left out and `null` are `None`; anything else must be a non-empty string.
fn string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(Some(text.clone())),
        Some(_) => Err(format!("agent() option {key} must be a non-empty string")),
    }
}

fn object(map: &Map<String, Value>, key: &str) -> Result<Option<Value>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Object(_)) => Ok(Some(value.clone())),
        Some(_) => Err(format!("agent() option {key} must be an object")),
    }
}

fn array(map: &Map<String, Value>, key: &str) -> Result<Option<Value>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value @ Value::Array(_)) => Ok(Some(value.clone())),
        Some(_) => Err(format!("agent() option {key} must be an array")),
    }
}

/// `configOptions`: string or boolean values by id, sorted by id; `model` is not one.
fn config_options(map: &Map<String, Value>) -> Result<Vec<(String, Value)>, String> {
    let mut config_options = Vec::new();
    if let Some(options) = object(map, "configOptions")? {
        for (id, value) in options.as_object().into_iter().flatten() {
            if id == "model" {
                return Err(
                    "agent() option configOptions may not set \"model\"; use the model option"
                        .into(),
                );
            }
            if !(value.is_string() || value.is_boolean()) {
                return Err(format!(
                    "agent() option configOptions.{id} must be a string or a boolean"
                ));
            }
            config_options.push((id.clone(), value.clone()));
        }
        config_options.sort_by(|a, b| a.0.cmp(&b.0));
    }
    Ok(config_options)
}

/// `timeoutMs`: a positive number of milliseconds.
fn timeout_ms(map: &Map<String, Value>) -> Result<Option<u64>, String> {
    match map.get("timeoutMs") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => Ok(Some(value.as_u64().filter(|ms| *ms > 0).ok_or(
            "agent() option timeoutMs must be a positive whole number of milliseconds",
        )?)),
    }
}

/// `retries`: 0 to 3.
fn retries(map: &Map<String, Value>) -> Result<Option<u32>, String> {
    match map.get("retries") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => Ok(Some(
            value
                .as_u64()
                .filter(|n| *n <= 3)
                .ok_or("agent() option retries must be a whole number from 0 to 3")?
                as u32,
        )),
    }
}

fn keep_session(map: &Map<String, Value>) -> Result<Option<bool>, String> {
    match map.get("keepSession") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(*flag)),
        Some(_) => Err("agent() option keepSession must be a boolean".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(options: Value) -> String {
        AgentOptions::parse(&options).expect_err("refused")
    }

    #[test]
    fn options_are_checked_by_name_and_type() {
        assert!(refused(json!({"colour": "red"})).starts_with(
            "agent() option \"colour\" is not known; known options: label, phase, schema"
        ));
        assert_eq!(refused(json!([])), "agent() options must be an object");
        assert_eq!(
            refused(json!({"label": " "})),
            "agent() option label must be a non-empty string"
        );
        assert_eq!(
            refused(json!({"meta": 1})),
            "agent() option meta must be an object"
        );
        assert_eq!(
            refused(json!({"images": {}})),
            "agent() option images must be an array"
        );
        assert_eq!(
            refused(json!({"cwd": "src"})),
            "agent() option cwd must be an absolute path, got \"src\""
        );
        assert_eq!(
            refused(json!({"retries": 4})),
            "agent() option retries must be a whole number from 0 to 3"
        );
        assert_eq!(
            refused(json!({"timeoutMs": 0})),
            "agent() option timeoutMs must be a positive whole number of milliseconds"
        );
        assert_eq!(
            refused(json!({"keepSession": "yes"})),
            "agent() option keepSession must be a boolean"
        );
        assert_eq!(
            refused(json!({"configOptions": {"model": "x"}})),
            "agent() option configOptions may not set \"model\"; use the model option"
        );
        assert_eq!(
            refused(json!({"configOptions": {"effort": 3}})),
            "agent() option configOptions.effort must be a string or a boolean"
        );
    }

    #[test]
    fn accepted_options_keep_their_values_and_config_options_are_sorted() {
        let options = AgentOptions::parse(&json!({
            "label": "review", "model": "mine", "timeoutMs": 5000, "retries": 0,
            "keepSession": true, "isolation": "worktree", "cwd": "/tmp",
            "configOptions": {"z": true, "a": "high"}, "label2": null
        }));
        assert!(options.is_err(), "label2 is not an option");
        let options = AgentOptions::parse(&json!({
            "label": "review", "model": "mine", "timeoutMs": 5000, "retries": 0,
            "keepSession": true, "isolation": "worktree", "cwd": "/tmp", "phase": null,
            "configOptions": {"z": true, "a": "high"}
        }))
        .expect("valid options");
        assert_eq!(options.label.as_deref(), Some("review"));
        assert_eq!(options.phase, None);
        assert_eq!((options.timeout_ms, options.retries), (Some(5000), Some(0)));
        assert_eq!(options.keep_session, Some(true));
        let ids: Vec<&str> = options
            .config_options
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(ids, ["a", "z"]);
    }

    #[test]
    fn a_payload_defaults_to_the_root_scope_and_empty_options() {
        let payload = CallPayload::parse(&json!({"prompt": "hi"}));
        assert_eq!(payload.scope, "root");
        assert_eq!(payload.prompt, "hi");
        assert_eq!(payload.path, None);
        assert_eq!(payload.options, json!({}));
    }
}
