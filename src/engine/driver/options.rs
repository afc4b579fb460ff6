//! What the script passes with a call: the `{scope, prompt, path, options}` payload the
//! prelude sends, and `agent()` options after their type checks (engine.md 1.2). A bad
//! option is a `SCRIPT_VALIDATION_ERROR` naming the option.

use serde_json::{Map, Value};

use crate::engine::effort::Effort;
use crate::engine::schema;
use crate::engine::script::NAME_MAX_BYTES;

/// The largest diff `isolated()` hands to a script (its `diffBytes` is capped here as well
/// as checked in the prelude).
pub(super) const MAX_DIFF_BYTES: usize = 1024 * 1024;

/// What the prelude sends with `agent()` and `checkpoint()`: `{scope, prompt, options, path}`.
pub(super) struct CallPayload {
    pub(super) scope: String,
    pub(super) prompt: String,
    pub(super) path: Option<String>,
    pub(super) options: Value,
    /// `isolated()`: the call answers with its changes and a diff of at most this many
    /// bytes. Set by the prelude only, never by a script's options.
    pub(super) outcome: Option<usize>,
}

impl CallPayload {
    /// Takes the payload's members apart without copying them: a prompt may weigh
    /// megabytes.
    pub(super) fn parse(payload: Value) -> CallPayload {
        let mut members = match payload {
            Value::Object(members) => members,
            _ => Map::new(),
        };
        let mut text = |key: &str| match members.remove(key) {
            Some(Value::String(text)) => Some(text),
            _ => None,
        };
        let scope = text("scope").unwrap_or_else(|| "root".to_owned());
        let prompt = text("prompt").unwrap_or_default();
        let path = text("path");
        CallPayload {
            scope,
            prompt,
            path,
            options: members
                .remove("options")
                .unwrap_or_else(|| Value::Object(Default::default())),
            outcome: members
                .get("outcome")
                .and_then(|outcome| outcome.get("diffBytes"))
                .and_then(Value::as_u64)
                .map(|bytes| bytes.min(MAX_DIFF_BYTES as u64) as usize),
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
    /// Set through the backend's reasoning-level config option (`engine::effort`).
    pub(super) effort: Option<Effort>,
    pub(super) agent_type: Option<String>,
    pub(super) cwd: Option<String>,
    /// `isolation: "worktree"`: the call runs in a git worktree of its own.
    pub(super) isolated: bool,
    pub(super) mcp_servers: Option<Value>,
    /// As the script gave them (the inputs hash covers them so).
    pub(super) images: Option<Value>,
    /// `images` as ACP `image` content blocks, in order.
    pub(super) image_blocks: Vec<Value>,
    pub(super) meta: Option<Value>,
    pub(super) prompt_meta: Option<Value>,
    /// `keepSession`: `true` leaves the call's session open when the call ends.
    pub(super) keep_session: Option<bool>,
    /// `continuePrompt`: the first turn of a reopened session instead of the default one.
    pub(super) continue_prompt: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) retries: Option<u32>,
    /// `retryDelayMs`: the wait between attempts instead of the backoff (0: none).
    pub(super) retry_delay_ms: Option<u64>,
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
        "effort",
        "agentType",
        "isolation",
        "cwd",
        "mcpServers",
        "images",
        "meta",
        "promptMeta",
        "keepSession",
        "continuePrompt",
        "timeoutMs",
        "retries",
        "retryDelayMs",
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
        let isolated = isolation(map)?;
        let cwd = string(map, "cwd")?;
        if let Some(cwd) = &cwd
            && !cwd.starts_with('/')
        {
            return Err(format!(
                "agent() option cwd must be an absolute path, got {cwd:?}"
            ));
        }
        if isolated && cwd.is_some() {
            return Err(
                "agent() options cwd and isolation cannot be combined: an isolated \
                 call runs in its own worktree, at the project folder's place in it"
                    .into(),
            );
        }
        let images = array(map, "images")?;
        let image_blocks = match &images {
            Some(Value::Array(items)) => image_blocks(items)?,
            _ => Vec::new(),
        };
        let timeout_ms = timeout_ms(map)?;
        let retries = retries(map)?;
        let retry_delay_ms = retry_delay_ms(map)?;
        let keep_session = keep_session(map)?;
        Ok(AgentOptions {
            label: name(map, "label")?,
            phase: name(map, "phase")?,
            schema,
            model: name(map, "model")?,
            tier: name(map, "tier")?,
            mode: name(map, "mode")?,
            config_options,
            effort: effort(map)?,
            agent_type: name(map, "agentType")?,
            cwd,
            isolated,
            mcp_servers: array(map, "mcpServers")?,
            images,
            image_blocks,
            meta: object(map, "meta")?,
            prompt_meta: object(map, "promptMeta")?,
            keep_session,
            continue_prompt: string(map, "continuePrompt")?,
            timeout_ms,
            retries,
            retry_delay_ms,
        })
    }
}

/// [`string`], of at most [`NAME_MAX_BYTES`] bytes.
fn name(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    let text = string(map, key)?;
    if let Some(text) = &text
        && text.len() > NAME_MAX_BYTES
    {
        return Err(format!(
            "agent() option {key} must be at most {NAME_MAX_BYTES} bytes, got {}",
            text.len()
        ));
    }
    Ok(text)
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

/// `images`: each item `{data, mimeType, uri?}` (an ACP image block's fields; `type:"image"`
/// may be given too), `data` the image's bytes in base64, `mimeType` an `image/…` type.
/// Returns the items as ACP `image` content blocks.
fn image_blocks(items: &[Value]) -> Result<Vec<Value>, String> {
    const EXPECTED: &str = "{data, mimeType, uri?}: data the image in base64, mimeType \"image/…\"";
    let mut blocks = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let at = format!("agent() option images[{index}]");
        let Some(fields) = item.as_object() else {
            return Err(format!(
                "{at} must be an object {EXPECTED}, got {}",
                shown(item)
            ));
        };
        if let Some(unknown) = fields
            .keys()
            .find(|key| !matches!(key.as_str(), "type" | "data" | "mimeType" | "uri"))
        {
            return Err(format!(
                "{at} has an unknown field {unknown:?}; expected {EXPECTED}"
            ));
        }
        if let Some(kind) = fields.get("type")
            && kind != "image"
        {
            return Err(format!(
                "{at}.type must be \"image\" when given, got {}",
                shown(kind)
            ));
        }
        let data = match fields.get("data") {
            Some(Value::String(data)) if is_base64(data) => data,
            Some(other) => {
                return Err(format!(
                    "{at}.data must be the image's bytes as a non-empty base64 string, got {}",
                    shown(other)
                ));
            }
            None => return Err(format!("{at} has no data; expected {EXPECTED}")),
        };
        let mime_type = match fields.get("mimeType") {
            Some(Value::String(mime)) if is_image_mime(mime) => mime,
            Some(other) => {
                return Err(format!(
                    "{at}.mimeType must be an image media type such as \"image/png\", got {}",
                    shown(other)
                ));
            }
            None => return Err(format!("{at} has no mimeType; expected {EXPECTED}")),
        };
        let mut block = serde_json::json!({"type": "image", "data": data, "mimeType": mime_type});
        match fields.get("uri") {
            None | Some(Value::Null) => {}
            Some(Value::String(uri)) if !uri.trim().is_empty() => block["uri"] = uri.clone().into(),
            Some(other) => {
                return Err(format!(
                    "{at}.uri must be a non-empty string when given, got {}",
                    shown(other)
                ));
            }
        }
        blocks.push(block);
    }
    Ok(blocks)
}

/// A value as an error shows it: its JSON, cut short (an image's data can be megabytes).
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Standard base64 with padding: letters, digits, `+`, `/`, and `=` only at the end.
fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    let body = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="))
        .unwrap_or(bytes);
    !bytes.is_empty()
        && bytes.len().is_multiple_of(4)
        && body
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/'))
}

/// `image/<subtype>`, the subtype a non-empty token.
fn is_image_mime(mime: &str) -> bool {
    mime.strip_prefix("image/").is_some_and(|subtype| {
        !subtype.is_empty()
            && subtype
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&byte))
    })
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

/// `effort`: one of the portable level names.
fn effort(map: &Map<String, Value>) -> Result<Option<Effort>, String> {
    match map.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_str()
            .and_then(Effort::parse)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "agent() option effort must be one of {}, got {}",
                    Effort::listed(),
                    shown(value)
                )
            }),
    }
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

/// `retryDelayMs`: a whole number of milliseconds from 0 (no wait) to an hour.
fn retry_delay_ms(map: &Map<String, Value>) -> Result<Option<u64>, String> {
    match map.get("retryDelayMs") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => Ok(Some(value.as_u64().filter(|ms| *ms <= 3_600_000).ok_or(
            "agent() option retryDelayMs must be a whole number of milliseconds from 0 to 3600000",
        )?)),
    }
}

/// `isolation`: `"worktree"` (a git worktree of the call's own) or left out / `null`.
fn isolation(map: &Map<String, Value>) -> Result<bool, String> {
    match map.get("isolation") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(value)) if value == "worktree" => Ok(true),
        Some(value) => Err(format!(
            "agent() option isolation must be \"worktree\" or null, got {}",
            shown(value)
        )),
    }
}

/// `keepSession`: a boolean; `true` leaves the session open when the call ends.
fn keep_session(map: &Map<String, Value>) -> Result<Option<bool>, String> {
    match map.get("keepSession") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(keep)) => Ok(Some(*keep)),
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
    fn a_naming_option_of_the_limit_is_kept_and_one_byte_more_refused() {
        for key in ["label", "phase", "model", "tier", "mode", "agentType"] {
            let at_limit = format!("{}é", "a".repeat(NAME_MAX_BYTES - 2));
            assert!(
                AgentOptions::parse(&json!({ key: at_limit })).is_ok(),
                "{key} of {NAME_MAX_BYTES} bytes"
            );
            assert_eq!(
                refused(json!({ key: "a".repeat(NAME_MAX_BYTES + 1) })),
                format!("agent() option {key} must be at most 1024 bytes, got 1025")
            );
        }
        let long_prompt = "a".repeat(NAME_MAX_BYTES * 4);
        let options = AgentOptions::parse(&json!({"continuePrompt": long_prompt})).expect("kept");
        assert_eq!(
            options.continue_prompt.map(|p| p.len()),
            Some(NAME_MAX_BYTES * 4)
        );
    }

    #[test]
    fn options_are_checked_by_name_and_type() {
        assert!(refused(json!({"colour": "red"})).starts_with(
            "agent() option \"colour\" is not known; known options: label, phase, schema"
        ));
        assert_eq!(refused(json!([])), "agent() options must be an object");
        for bad in [json!(-1), json!(1.5), json!("5"), json!(3_600_001)] {
            assert_eq!(
                refused(json!({ "retryDelayMs": bad })),
                "agent() option retryDelayMs must be a whole number of milliseconds from 0 to 3600000"
            );
        }
        let zero = AgentOptions::parse(&json!({"retryDelayMs": 0})).expect("accepted");
        assert_eq!(zero.retry_delay_ms, Some(0));
        assert_eq!(
            refused(json!({"label": " "})),
            "agent() option label must be a non-empty string"
        );
        assert_eq!(
            refused(json!({"continuePrompt": 3})),
            "agent() option continuePrompt must be a non-empty string"
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
        let kept = AgentOptions::parse(&json!({"keepSession": true})).expect("accepted");
        assert_eq!(kept.keep_session, Some(true));
        assert_eq!(
            refused(json!({"isolation": "none"})),
            "agent() option isolation must be \"worktree\" or null, got \"none\""
        );
        assert_eq!(
            refused(json!({"isolation": "worktree", "cwd": "/tmp"})),
            "agent() options cwd and isolation cannot be combined: an isolated call runs in \
             its own worktree, at the project folder's place in it"
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
            "keepSession": false, "isolation": null, "cwd": "/tmp",
            "configOptions": {"z": true, "a": "high"}, "label2": null
        }));
        assert!(options.is_err(), "label2 is not an option");
        let options = AgentOptions::parse(&json!({
            "label": "review", "model": "mine", "timeoutMs": 5000, "retries": 0,
            "keepSession": false, "isolation": null, "cwd": "/tmp", "phase": null,
            "configOptions": {"z": true, "a": "high"}
        }))
        .expect("valid options");
        assert_eq!(options.label.as_deref(), Some("review"));
        assert_eq!(options.phase, None);
        assert_eq!((options.timeout_ms, options.retries), (Some(5000), Some(0)));
        assert_eq!(options.keep_session, Some(false));
        assert!(!options.isolated);
        let isolated = AgentOptions::parse(&json!({"isolation": "worktree"})).expect("valid");
        assert!(isolated.isolated);
        let ids: Vec<&str> = options
            .config_options
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(ids, ["a", "z"]);
    }

    #[test]
    fn effort_is_one_of_the_portable_levels() {
        let effort = |value: Value| AgentOptions::parse(&json!({ "effort": value }));
        assert_eq!(
            effort(json!("xhigh")).expect("valid").effort,
            Some(Effort::Xhigh)
        );
        assert_eq!(effort(json!(null)).expect("valid").effort, None);
        for bad in [json!("minimal"), json!("High"), json!(3), json!("")] {
            assert_eq!(
                effort(bad.clone()).expect_err("refused"),
                format!(
                    "agent() option effort must be one of \"low\", \"medium\", \"high\", \
                     \"xhigh\", \"max\", got {bad}"
                )
            );
        }
    }

    #[test]
    fn images_become_acp_image_blocks() {
        let options = AgentOptions::parse(&json!({"images": [
            {"data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "image", "data": "R0lGOD==", "mimeType": "image/gif", "uri": "file:///a.gif"},
        ]}))
        .expect("valid images");
        assert_eq!(
            options.image_blocks,
            vec![
                json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
                json!({"type": "image", "data": "R0lGOD==", "mimeType": "image/gif", "uri": "file:///a.gif"}),
            ]
        );
    }

    #[test]
    fn a_bad_image_is_refused_naming_its_index_and_what_was_expected() {
        let image = |item: Value| {
            refused(json!({"images": [{"data": "AAAA", "mimeType": "image/png"}, item]}))
        };
        assert_eq!(
            image(json!("shot.png")),
            "agent() option images[1] must be an object {data, mimeType, uri?}: data the image in base64, mimeType \"image/…\", got \"shot.png\""
        );
        assert_eq!(
            image(json!({"mimeType": "image/png"})),
            "agent() option images[1] has no data; expected {data, mimeType, uri?}: data the image in base64, mimeType \"image/…\""
        );
        assert_eq!(
            image(json!({"data": "not base64!", "mimeType": "image/png"})),
            "agent() option images[1].data must be the image's bytes as a non-empty base64 string, got \"not base64!\""
        );
        assert_eq!(
            image(json!({"data": "AAAA", "mimeType": "text/plain"})),
            "agent() option images[1].mimeType must be an image media type such as \"image/png\", got \"text/plain\""
        );
        assert_eq!(
            image(json!({"data": "AAAA", "mimeType": "image/png", "path": "/x"})),
            "agent() option images[1] has an unknown field \"path\"; expected {data, mimeType, uri?}: data the image in base64, mimeType \"image/…\""
        );
        assert_eq!(
            image(json!({"type": "text", "data": "AAAA", "mimeType": "image/png"})),
            "agent() option images[1].type must be \"image\" when given, got \"text\""
        );
        assert_eq!(
            image(json!({"data": "AAAA", "mimeType": "image/png", "uri": 5})),
            "agent() option images[1].uri must be a non-empty string when given, got 5"
        );
    }

    #[test]
    fn a_payload_defaults_to_the_root_scope_and_empty_options() {
        let payload = CallPayload::parse(json!({"prompt": "hi"}));
        assert_eq!(payload.scope, "root");
        assert_eq!(payload.prompt, "hi");
        assert_eq!(payload.path, None);
        assert_eq!(payload.options, json!({}));
    }
}
