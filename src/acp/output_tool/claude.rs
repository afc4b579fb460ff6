//! Claude's own structured-output channel, as claude-agent-acp exposes it: a JSON Schema in
//! `session/new` `_meta.claudeCode.options.outputFormat` makes Claude Code give the model a
//! `StructuredOutput` tool of its own (checked against the schema by Claude Code, which asks
//! the model again on a mismatch), and the validated value comes back on the turn's `result`
//! SDK message, which the adapter forwards as a `_claude/sdkMessage` notification when
//! `_meta.claudeCode.emitRawSDKMessages` asks for `result` messages.

use serde_json::{Value, json};

/// The extension notification that carries Claude Code's SDK messages.
const SDK_MESSAGE: &str = "_claude/sdkMessage";

/// The name of the tool Claude Code gives the model for the answer.
pub(crate) const TOOL_NAME: &str = "StructuredOutput";

/// The adapter that forwards the `result` SDK message (`emitRawSDKMessages`): the
/// `@agentclientprotocol` package. The older `@zed-industries/claude-agent-acp` ignores the
/// request, so its answer would never arrive: it gets the prompt path instead.
const FORWARDING_ADAPTER: &str = "@agentclientprotocol/claude-agent-acp";

/// Whether the agent that `initialize` named hands back the channel's answer.
pub(crate) fn forwards_results(agent_name: &str) -> bool {
    agent_name == FORWARDING_ADAPTER
}

/// The `session/new` `_meta` that asks for `schema`'s structured output and for the `result`
/// messages that carry it.
pub(crate) fn session_meta(schema: &Value) -> Value {
    json!({"claudeCode": {
        "options": {"outputFormat": {"type": "json_schema", "schema": schema}},
        "emitRawSDKMessages": [{"type": "result"}],
    }})
}

/// The structured answer an extension notification carries: a `result` SDK message's
/// `structured_output`, when it has one.
pub(crate) fn structured_output(method: &str, params: &Value) -> Option<Value> {
    if method != SDK_MESSAGE {
        return None;
    }
    let message = params.get("message")?;
    if message.get("type").and_then(Value::as_str) != Some("result") {
        return None;
    }
    message
        .get("structured_output")
        .filter(|value| !value.is_null())
        .cloned()
}

/// `over` merged into `base`, objects key by key (so the call's own `claudeCode.options`, a
/// tool policy for one, keep their keys beside `outputFormat`), anything else replaced.
pub(crate) fn merge(base: Option<Value>, over: Value) -> Value {
    match (base, over) {
        (Some(Value::Object(mut base)), Value::Object(over)) => {
            for (key, value) in over {
                let merged = merge(base.remove(&key), value);
                base.insert(key, merged);
            }
            Value::Object(base)
        }
        (_, over) => over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_joins_the_calls_own_claude_options() {
        let call = json!({"claudeCode": {"options": {"disallowedTools": ["Bash"]}}, "x": 1});
        let schema = json!({"type": "object"});
        let merged = merge(Some(call), session_meta(&schema));
        assert_eq!(merged["x"], 1);
        assert_eq!(
            merged["claudeCode"]["options"]["disallowedTools"],
            json!(["Bash"])
        );
        assert_eq!(
            merged["claudeCode"]["options"]["outputFormat"]["schema"],
            schema
        );
        assert_eq!(
            merged["claudeCode"]["emitRawSDKMessages"],
            json!([{"type": "result"}])
        );
    }

    #[test]
    fn only_a_result_messages_structured_output_is_taken() {
        let result = json!({"sessionId": "s", "message": {"type": "result", "subtype": "success",
            "structured_output": {"ok": true}}});
        assert_eq!(
            structured_output(SDK_MESSAGE, &result),
            Some(json!({"ok": true}))
        );
        assert_eq!(structured_output("_other/thing", &result), None);
        let assistant =
            json!({"message": {"type": "assistant", "structured_output": {"ok": true}}});
        assert_eq!(structured_output(SDK_MESSAGE, &assistant), None);
        let none = json!({"message": {"type": "result", "structured_output": null}});
        assert_eq!(structured_output(SDK_MESSAGE, &none), None);
    }
}
