//! The Gemini API as Gemini CLI calls it with an API key and `GOOGLE_GEMINI_BASE_URL`:
//! `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` for the conversation (each
//! event a whole `GenerateContentResponse` on a `data:` line) and `:generateContent` for side
//! queries. Tools arrive as `functionDeclarations` with a `parametersJsonSchema`; calls go out
//! as `functionCall` parts and come back as `functionResponse` parts of a user turn.
//!
//! A side query that asks for JSON (`responseMimeType: application/json` with a
//! `responseJsonSchema`, such as the CLI's model router) gets a small instance of that schema,
//! as a model keeping to the schema would answer.

use serde_json::{Map, Value, json};

use super::super::http1::{Response, json_response};
use super::{Conversation, ListedTool, Move, PastCall, State, sse_response};

pub(super) fn conversation(body: &Value, state: &State) -> Conversation {
    let mut conversation = Conversation::default();
    let declarations = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|tool| {
            tool["functionDeclarations"]
                .as_array()
                .into_iter()
                .flatten()
        });
    for function in declarations {
        let name = function["name"].as_str().unwrap_or_default();
        if state.is_workflow(name, None) {
            conversation.workflow = Some(ListedTool {
                api: "gemini",
                name: name.to_owned(),
                namespace: None,
                description: function["description"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                schema: ["parametersJsonSchema", "parameters"]
                    .iter()
                    .map(|key| function[*key].clone())
                    .find(|schema| !schema.is_null())
                    .unwrap_or(Value::Null),
                bridge: None,
            });
        }
    }
    conversation.mentions_workflow = conversation.workflow.is_some();
    for content in body["contents"].as_array().into_iter().flatten() {
        let role = content["role"].as_str().unwrap_or("user");
        for part in content["parts"].as_array().into_iter().flatten() {
            if let (Some(text), "user") = (part["text"].as_str(), role) {
                conversation.texts.push(text.to_owned());
            }
            let call = &part["functionCall"];
            if call.is_object() {
                conversation.calls.push(PastCall {
                    id: call["id"].as_str().unwrap_or_default().to_owned(),
                    name: call["name"].as_str().unwrap_or_default().to_owned(),
                    namespace: None,
                    input: call["args"].clone(),
                    output: None,
                });
            }
            let response = &part["functionResponse"];
            if response.is_object() {
                let id = response["id"].as_str().unwrap_or_default();
                conversation.answer(id, response_text(&response["response"]));
            }
        }
    }
    conversation
}

/// Whether a request is a side query that wants JSON back; its answer if so.
pub(super) fn json_side_answer(body: &Value) -> Option<Value> {
    let config = &body["generationConfig"];
    if config["responseMimeType"] != "application/json" {
        return None;
    }
    let schema = ["responseJsonSchema", "responseSchema"]
        .iter()
        .map(|key| &config[*key])
        .find(|schema| schema.is_object())?;
    Some(instance_of(schema))
}

pub(super) fn reply(state: &State, streamed: bool, body: &Value, next: Move) -> Response {
    let part = match next {
        Move::Call { name, input, .. } => json!({"functionCall": {
            "id": state.next_id("gemini_call_"), "name": name, "args": input,
        }}),
        Move::Text(text) => json!({"text": text}),
        Move::Park => unreachable!("a parked turn is never answered"),
    };
    let model = body["model"].as_str().unwrap_or("gemini-fake");
    let response = json!({
        "candidates": [{
            "content": {"role": "model", "parts": [part]},
            "finishReason": "STOP",
            "index": 0,
        }],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
        "modelVersion": model,
        "responseId": state.next_id("gemini_response_"),
    });
    if streamed {
        sse_response(&[response], false)
    } else {
        json_response(200, &response)
    }
}

/// The text of a `functionResponse.response`: Gemini CLI puts an MCP tool's text under
/// `output`; anything else is shown as its JSON.
fn response_text(response: &Value) -> String {
    match &response["output"] {
        Value::String(text) => text.clone(),
        Value::Null => response.to_string(),
        other => other.to_string(),
    }
}

/// A small value that satisfies `schema` (Gemini's upper-case types or JSON Schema's).
fn instance_of(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|values| values.first()) {
        return first.clone();
    }
    let kind = schema["type"]
        .as_str()
        .unwrap_or("object")
        .to_ascii_lowercase();
    match kind.as_str() {
        "string" => json!("fake"),
        "integer" | "number" => {
            let low = schema["minimum"].as_f64().unwrap_or(1.0).max(1.0);
            json!(low as i64)
        }
        "boolean" => json!(false),
        "array" => json!([]),
        _ => {
            let mut object = Map::new();
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            for name in required.iter().filter_map(Value::as_str) {
                object.insert(name.to_owned(), instance_of(&schema["properties"][name]));
            }
            Value::Object(object)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_side_query_gets_an_instance_of_its_schema() {
        let body = json!({"generationConfig": {"responseMimeType": "application/json",
            "responseJsonSchema": {"type": "OBJECT", "required": ["reason", "score", "mode"],
                "properties": {"reason": {"type": "STRING"}, "score": {"type": "INTEGER", "minimum": 3},
                    "mode": {"type": "STRING", "enum": ["fast", "slow"]}, "extra": {"type": "STRING"}}}}});
        assert_eq!(
            json_side_answer(&body),
            Some(json!({"reason": "fake", "score": 3, "mode": "fast"}))
        );
        assert_eq!(json_side_answer(&json!({"contents": []})), None);
    }

    #[test]
    fn calls_and_responses_pair_by_id() {
        let state = State::for_tests("agentprism-workflow");
        let body = json!({
            "tools": [{"functionDeclarations": [{"name": "mcp_agentprism-workflow_workflow",
                "description": "d", "parametersJsonSchema": {"type": "object"}}]}],
            "contents": [
                {"role": "user", "parts": [{"text": "FAKE-PLAN: run"}]},
                {"role": "model", "parts": [{"functionCall": {"id": "g1",
                    "name": "mcp_agentprism-workflow_workflow", "args": {"action": "run"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "g1",
                    "name": "mcp_agentprism-workflow_workflow", "response": {"output": "ok"}}}]},
            ],
        });
        let conversation = conversation(&body, &state);
        assert!(conversation.workflow.is_some());
        assert_eq!(conversation.texts, ["FAKE-PLAN: run"]);
        assert_eq!(conversation.calls[0].output.as_deref(), Some("ok"));
    }
}
