//! The OpenAI Responses API as Codex calls it (`POST /v1/responses`, `wire_api =
//! "responses"`, streamed): the conversation read from a request and the fake's move written
//! back. Codex groups an MCP server's tools in a namespace, and its calls carry it.

use serde_json::{Value, json};

use super::super::http1::Response;
use super::{Conversation, ListedTool, Move, PastCall, State, output_text, sse_response};

pub(super) fn conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation::default();
    for tool in body["tools"].as_array().into_iter().flatten() {
        // Codex groups an MCP server's tools in a namespace; older versions list them flat.
        let (namespace, members) = match tool["type"].as_str() {
            Some("namespace") => (
                tool["name"].as_str().map(str::to_owned),
                tool["tools"].as_array().cloned().unwrap_or_default(),
            ),
            _ => (None, vec![tool.clone()]),
        };
        for member in members {
            let name = member["name"].as_str().unwrap_or_default();
            if state.is_workflow(name, namespace.as_deref()) {
                conversation.workflow = Some(ListedTool {
                    api: "responses",
                    name: name.to_owned(),
                    namespace: namespace.clone(),
                    description: member["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    schema: member["parameters"].clone(),
                    bridge: None,
                });
            }
        }
    }
    conversation.mentions_workflow = conversation.workflow.is_some();
    for item in body["input"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") if item["role"] == "user" => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if let Some(text) = part["text"].as_str() {
                        conversation.texts.push(text.to_owned());
                    }
                }
            }
            Some("function_call") => conversation.calls.push(PastCall {
                id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                name: item["name"].as_str().unwrap_or_default().to_owned(),
                namespace: item["namespace"].as_str().map(str::to_owned),
                input: item["arguments"]
                    .as_str()
                    .and_then(|text| serde_json::from_str(text).ok())
                    .unwrap_or(Value::Null),
                output: None,
            }),
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default();
                conversation.answer(id, output_text(&item["output"]));
            }
            _ => {}
        }
    }
    conversation
}

pub(super) fn reply(state: &State, next: Move) -> Response {
    let response_id = state.next_id("resp_fake_");
    let item = match next {
        Move::Call {
            name,
            namespace,
            input,
        } => {
            let mut item = json!({
                "type": "function_call",
                "id": state.next_id("fc_fake_"),
                "call_id": state.next_id("call_fake_"),
                "name": name,
                "arguments": input.to_string(),
            });
            if let Some(namespace) = namespace {
                item["namespace"] = Value::String(namespace);
            }
            item
        }
        Move::Text(text) => json!({
            "type": "message",
            "id": state.next_id("msg_fake_"),
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let events = [
        json!({"type": "response.created", "response": {"id": response_id}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {
            "id": response_id,
            "usage": {"input_tokens": 10, "input_tokens_details": null, "output_tokens": 10,
                "output_tokens_details": null, "total_tokens": 20}}}),
    ];
    sse_response(&events, true)
}
