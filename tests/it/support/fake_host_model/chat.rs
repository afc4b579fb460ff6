//! The OpenAI Chat Completions API (`POST /v1/chat/completions`) as Qwen Code (its `openai`
//! auth type) and opencode (a provider on `@ai-sdk/openai-compatible`) call it, streamed as
//! `chat.completion.chunk` events ending in `data: [DONE]`, or not.
//!
//! Qwen Code defers MCP tools: they are not in `tools`, only named in a reminder, and the
//! model reviews one with `tool_search` (`select:<name>`, answered with a
//! `<functions><function>{declaration}</function></functions>` block) and then calls it through
//! `tool_call` (`{"name", "arguments"}`). The conversation records the declaration from that
//! answer as the listed tool, and unwraps `tool_call` calls into calls of the tool they carry.

use serde_json::{Value, json};

use super::super::http1::{Response, json_response};
use super::{Conversation, ListedTool, Move, PastCall, State, output_text, sse_response};

/// Qwen Code's deferred-tool search and the bridge that calls what it found.
const SEARCH: &str = "tool_search";
const BRIDGE: &str = "tool_call";

pub(super) fn conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation {
        mentions_workflow: state.names_workflow(&body.to_string()),
        ..Conversation::default()
    };
    let mut bridge = false;
    for tool in body["tools"].as_array().into_iter().flatten() {
        let function = &tool["function"];
        let name = function["name"].as_str().unwrap_or_default();
        match name {
            SEARCH => conversation.tool_search = Some(name.to_owned()),
            BRIDGE => bridge = true,
            _ if state.is_workflow(name, None) => {
                conversation.workflow = Some(listed(function, None));
            }
            _ => {}
        }
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        match message["role"].as_str() {
            Some("user") => conversation.texts.push(output_text(&message["content"])),
            Some("assistant") => {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    conversation.calls.push(past_call(call));
                }
            }
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                conversation.answer(id, output_text(&message["content"]));
            }
            _ => {}
        }
    }
    // Only a request that offers the tool, or the way to it, is the main conversation: a side
    // query can quote the whole transcript (Qwen Code's classifier of untrusted tool calls).
    conversation.mentions_workflow &= conversation.workflow.is_some() || bridge;
    // A reviewed deferred tool counts as listed: its declaration came in the search's answer.
    if conversation.workflow.is_none() && bridge {
        let declaration = conversation
            .calls
            .iter()
            .filter(|call| call.name == SEARCH)
            .filter_map(|call| call.output.as_deref())
            .find_map(|output| declared_in(output, state));
        conversation.workflow = declaration.map(|function| listed(&function, Some(BRIDGE)));
    }
    conversation
}

pub(super) fn reply(state: &State, streamed: bool, body: &Value, next: Move) -> Response {
    let model = body["model"].as_str().unwrap_or("fake-model").to_owned();
    let id = state.next_id("chatcmpl_fake_");
    let (message, finish) = match next {
        Move::Call { name, input, .. } => {
            let call = json!({
                "id": state.next_id("call_fake_"),
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            });
            (
                json!({"role": "assistant", "content": null, "tool_calls": [call]}),
                "tool_calls",
            )
        }
        Move::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20});
    if !streamed {
        return json_response(
            200,
            &json!({
                "id": id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }),
        );
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    // The call's name comes first and its arguments follow as a delta, as the API streams them.
    let mut events = Vec::new();
    if let Some(call) = message["tool_calls"].get(0) {
        let mut head = call.clone();
        head["index"] = json!(0);
        head["function"]["arguments"] = json!("");
        events.push(chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [head]}),
            Value::Null,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]}),
            Value::Null,
        ));
    } else {
        events.push(chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ));
        events.push(chunk(json!({"content": message["content"]}), Value::Null));
    }
    events.push(chunk(json!({}), json!(finish)));
    events.push(
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [], "usage": usage}),
    );
    sse_response(&events, false)
}

fn listed(function: &Value, bridge: Option<&str>) -> ListedTool {
    ListedTool {
        api: "chat",
        name: function["name"].as_str().unwrap_or_default().to_owned(),
        namespace: None,
        description: function["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        // Qwen Code's search answers with a Gemini-style declaration.
        schema: ["parameters", "parametersJsonSchema"]
            .iter()
            .map(|key| function[*key].clone())
            .find(|schema| !schema.is_null())
            .unwrap_or(Value::Null),
        bridge: bridge.map(str::to_owned),
    }
}

/// One call of an assistant message; a `tool_call` of Qwen Code's bridge becomes a call of
/// the tool it names, with the arguments it carries.
fn past_call(call: &Value) -> PastCall {
    let name = call["function"]["name"].as_str().unwrap_or_default();
    let input: Value = call["function"]["arguments"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null);
    let (name, input) = match (name, input["name"].as_str()) {
        (BRIDGE, Some(inner)) => (inner.to_owned(), input["arguments"].clone()),
        _ => (name.to_owned(), input),
    };
    PastCall {
        id: call["id"].as_str().unwrap_or_default().to_owned(),
        name,
        namespace: None,
        input,
        output: None,
    }
}

/// The workflow tool's declaration in a `tool_search` answer.
fn declared_in(output: &str, state: &State) -> Option<Value> {
    output.split("<function>").skip(1).find_map(|rest| {
        let (declaration, _) = rest.split_once("</function>")?;
        let function: Value = serde_json::from_str(declaration).ok()?;
        state
            .is_workflow(function["name"].as_str()?, None)
            .then_some(function)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_of_the_bridge_is_a_call_of_the_tool_it_carries() {
        let call = json!({"id": "c1", "type": "function", "function": {"name": "tool_call",
            "arguments": "{\"name\":\"mcp__s__workflow\",\"arguments\":{\"action\":\"run\"}}"}});
        let past = past_call(&call);
        assert_eq!(
            (past.id.as_str(), past.name.as_str()),
            ("c1", "mcp__s__workflow")
        );
        assert_eq!(past.input, json!({"action": "run"}));
        let plain = json!({"id": "c2", "function": {"name": "grep", "arguments": "{\"q\":1}"}});
        assert_eq!(past_call(&plain).input, json!({"q": 1}));
    }

    #[test]
    fn a_search_answer_yields_the_declaration_and_nothing_else() {
        let state = State::for_tests("agentprism-workflow");
        let declaration = json!({"name": "mcp__agentprism-workflow__workflow",
            "description": "d", "parametersJsonSchema": {"type": "object"}});
        let other = json!({"name": "mcp__agentprism-workflow__workflow_monitor"});
        let output = format!(
            "<functions>\n<function>{other}</function>\n<function>{declaration}</function>\n</functions>"
        );
        assert_eq!(declared_in(&output, &state), Some(declaration));
        assert_eq!(declared_in("Not found: x", &state), None);
    }
}
