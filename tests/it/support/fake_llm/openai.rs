//! The fake's OpenAI shapes: the Responses API (codex-acp) and chat completions (opencode,
//! pi), streamed, under the same prompt rules as the Messages API in the parent module.

use serde_json::{Value, json};

use super::*;

#[derive(Clone, Copy)]
pub(super) enum OpenAiApi {
    Responses,
    ChatCompletions,
}

/// `POST /v1/responses` and `POST /v1/chat/completions`: the same rules as [`messages`], in
/// OpenAI's shapes; always streamed (every adapter here asks for a stream).
pub(super) fn openai(state: &State, request: &RecordedRequest, api: OpenAiApi) -> Response {
    let Some(body) = request.json() else {
        return error_response(400, "invalid_request_error", "body is not JSON");
    };
    let prompt = last_user_text(&body);
    if let Some(status) = requested_status(state, &prompt) {
        if let Some(response) = provider_failure(status, &prompt) {
            return response;
        }
        if status == 429 {
            return usage_limit_response(&prompt);
        }
        return json_response(
            status,
            &json!({"error": {
                "type": if status == 401 { "authentication_error" } else { "invalid_request_error" },
                "code": if status == 401 { "invalid_api_key" } else { "fake_failure" },
                "message": if status == 401 { "invalid x-api-key".to_owned() } else { format!("fake failure (MOCK_STATUS={status})") },
            }}),
        );
    }
    let tool_result = openai_tool_result(&body);
    if let Some(tool) = structured_output_tool(&body)
        && tool_result.is_none()
    {
        return openai_tool_call(api, &tool, &state.json_reply);
    }
    let reply = if let Some(result) = tool_result {
        format!("MOCK-TOOL-RESULT: {result}")
    } else if asks_for_json(&prompt) {
        state.json_reply.to_string()
    } else {
        format!("MOCK-REPLY: {prompt}")
    };
    let mut middle = reply.len() / 2;
    while !reply.is_char_boundary(middle) {
        middle += 1;
    }
    let (first, second) = reply.split_at(middle);
    let body = match api {
        OpenAiApi::Responses => {
            let item = json!({"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": reply, "annotations": []}]});
            let created = json!({"id": "resp_fake", "object": "response", "created_at": 0, "status": "in_progress", "model": "mock-model", "output": []});
            let mut done = created.clone();
            done["status"] = json!("completed");
            done["output"] = json!([item]);
            done["usage"] = json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10});
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            let mut events = vec![
                json!({"type": "response.created", "response": created}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ];
            for text in [first, second].into_iter().filter(|text| !text.is_empty()) {
                events.push(json!({"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": text}));
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
            events.push(json!({"type": "response.completed", "response": done}));
            events
                .iter()
                .map(|event| {
                    format!(
                        "event: {}\ndata: {event}\n\n",
                        event["type"].as_str().unwrap_or("")
                    )
                })
                .collect::<String>()
        }
        OpenAiApi::ChatCompletions => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl_fake", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let mut events = vec![chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )];
            for text in [first, second].into_iter().filter(|text| !text.is_empty()) {
                events.push(chunk(json!({"content": text}), Value::Null));
            }
            events.push(chunk(json!({}), json!("stop")));
            events.push(json!({"id": "chatcmpl_fake", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
                "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}));
            let mut text: String = events
                .iter()
                .map(|event| format!("data: {event}\n\n"))
                .collect();
            text.push_str("data: [DONE]\n\n");
            text
        }
    };
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
        retry_after: None,
        headers: None,
    }
}

/// The output of the tool call the request's last message answers (a chat completions
/// `role: "tool"` message, a Responses `function_call_output` item), if it is one.
fn openai_tool_result(body: &Value) -> Option<String> {
    let last = body
        .get("messages")
        .or_else(|| body.get("input"))?
        .as_array()?
        .last()?;
    let output = if last.get("role").and_then(Value::as_str) == Some("tool") {
        last.get("content")?
    } else if last.get("type").and_then(Value::as_str) == Some("function_call_output") {
        last.get("output")?
    } else {
        return None;
    };
    Some(match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// A streamed turn that calls tool `name` (`namespace/name` for a Responses namespace) with
/// `arguments`, in `api`'s shape.
fn openai_tool_call(api: OpenAiApi, name: &str, arguments: &Value) -> Response {
    let arguments = arguments.to_string();
    let body = match api {
        OpenAiApi::Responses => {
            let mut item = json!({"type": "function_call", "id": "fc_fake", "call_id": "call_fake",
                "arguments": arguments, "status": "completed"});
            match name.split_once('/') {
                Some((namespace, inner)) => {
                    item["namespace"] = json!(namespace);
                    item["name"] = json!(inner);
                }
                None => item["name"] = json!(name),
            }
            let created = json!({"id": "resp_fake_tool", "object": "response", "created_at": 0,
                "status": "in_progress", "model": "mock-model", "output": []});
            let mut done = created.clone();
            done["status"] = json!("completed");
            done["output"] = json!([item]);
            done["usage"] = json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10});
            [
                json!({"type": "response.created", "response": created}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": done}),
            ]
            .iter()
            .map(|event| {
                format!(
                    "event: {}\ndata: {event}\n\n",
                    event["type"].as_str().unwrap_or("")
                )
            })
            .collect::<String>()
        }
        OpenAiApi::ChatCompletions => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl_fake_tool", "object": "chat.completion.chunk", "created": 0,
                    "model": "mock-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let call = json!({"index": 0, "id": "call_fake", "type": "function",
                "function": {"name": name, "arguments": arguments}});
            let events = [
                chunk(
                    json!({"role": "assistant", "content": null, "tool_calls": [call]}),
                    Value::Null,
                ),
                chunk(json!({}), json!("tool_calls")),
                json!({"id": "chatcmpl_fake_tool", "object": "chat.completion.chunk", "created": 0,
                    "model": "mock-model", "choices": [],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}),
            ];
            let mut text: String = events
                .iter()
                .map(|event| format!("data: {event}\n\n"))
                .collect();
            text.push_str("data: [DONE]\n\n");
            text
        }
    };
    Response {
        status: 200,
        content_type: "text/event-stream",
        body: body.into_bytes(),
        retry_after: None,
        headers: None,
    }
}
