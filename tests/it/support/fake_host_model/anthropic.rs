//! The Anthropic Messages API as Claude Code calls it (`POST /v1/messages`, streamed as
//! server-sent events or not): the conversation read from a request and the fake's move
//! written back.

use serde_json::{Value, json};

use super::super::http1::{Response, json_response};
use super::{Conversation, ListedTool, Move, PastCall, State, output_text, sse_response};

pub(super) fn conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation {
        mentions_workflow: state.names_workflow(&body.to_string()),
        ..Conversation::default()
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        let name = tool["name"].as_str().unwrap_or_default();
        if name == "ToolSearch" {
            conversation.tool_search = Some(name.to_owned());
        }
        if state.is_workflow(name, None) {
            conversation.workflow = Some(ListedTool {
                api: "anthropic",
                name: name.to_owned(),
                namespace: None,
                description: tool["description"].as_str().unwrap_or_default().to_owned(),
                schema: tool["input_schema"].clone(),
                bridge: None,
            });
        }
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let blocks = match &message["content"] {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(blocks) => blocks.clone(),
            _ => Vec::new(),
        };
        for block in blocks {
            match (message["role"].as_str(), block["type"].as_str()) {
                (Some("user"), Some("text")) => conversation
                    .texts
                    .push(block["text"].as_str().unwrap_or_default().to_owned()),
                (Some("assistant"), Some("tool_use")) => conversation.calls.push(PastCall {
                    id: block["id"].as_str().unwrap_or_default().to_owned(),
                    name: block["name"].as_str().unwrap_or_default().to_owned(),
                    namespace: None,
                    input: block["input"].clone(),
                    output: None,
                }),
                (Some("user"), Some("tool_result")) => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    conversation.answer(id, output_text(&block["content"]));
                }
                _ => {}
            }
        }
    }
    conversation
}

pub(super) fn reply(state: &State, streamed: bool, body: &Value, next: Move) -> Response {
    let model = body["model"].as_str().unwrap_or("claude-fake").to_owned();
    let (block, stop_reason) = match next {
        Move::Call { name, input, .. } => (
            json!({"type": "tool_use", "id": state.next_id("toolu_fake_"), "name": name, "input": input}),
            "tool_use",
        ),
        Move::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 10});
    if !streamed {
        return json_response(
            200,
            &json!({
                "id": state.next_id("msg_fake_"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": stop_reason,
                "stop_sequence": null,
                "usage": usage,
            }),
        );
    }
    // The block opens empty and its content follows as a delta, as the real API streams it.
    let (start, delta) = if block["type"] == "tool_use" {
        (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        )
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        )
    };
    let events = [
        json!({"type": "message_start", "message": {
            "id": state.next_id("msg_fake_"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 10}}),
        json!({"type": "message_stop"}),
    ];
    sse_response(&events, true)
}
