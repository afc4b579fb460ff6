//! The MCP side of the `StructuredOutput` tool: one JSON-RPC message in, at most one out.
//!
//! The server is stateless streamable HTTP: every answer is a plain `application/json` body,
//! no session id is issued and no event stream is opened, which the transport allows and
//! every MCP client handles. It offers exactly one tool, whose input schema is the call's
//! output schema (wrapped in an object under `value` when the schema does not describe an
//! object, since MCP tool arguments are always an object). A call of the tool validates the
//! arguments against the call's schema and answers either that the answer was taken or the
//! validation errors, flagged `isError`, so the agent can fix its answer in the same turn.

use serde_json::{Map, Value, json};

use crate::engine::schema;

/// The tool's name, as the agent sees it (prefixed by the server name in most agents).
pub(crate) const TOOL_NAME: &str = "StructuredOutput";

/// MCP protocol revisions this server speaks; an `initialize` naming another gets the newest.
const REVISIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the agent reads about the tool.
const DESCRIPTION: &str = "Returns your final answer to the caller as structured data. \
Call it once, after all other work, with the answer as its arguments; they are checked \
against the required schema. If the call reports errors, correct the arguments and call \
it again. Nothing else is done with the answer.";

/// The key a non-object schema's answer travels under.
const WRAPPED_KEY: &str = "value";

/// One call's slot as the protocol sees it: its schema and where an accepted answer goes.
pub(crate) trait Slot {
    fn schema(&self) -> &Value;
    fn accept(&self, value: Value);
}

/// The answer to one JSON-RPC message: `None` for a notification or a response (HTTP 202).
pub(crate) fn handle(slot: &dyn Slot, message: &Value) -> Option<Value> {
    let Some(object) = message.as_object() else {
        return Some(error(
            Value::Null,
            -32600,
            "expected one JSON-RPC message object",
        ));
    };
    let id = object.get("id").cloned();
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        // A response from the client (there are no server requests to answer) or garbage.
        return id.map(|id| error(id, -32600, "expected a request with a string `method`"));
    };
    let id = id?;
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => Ok(initialize(&params)),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": [tool(slot.schema())]})),
        "tools/call" => call(slot, &params),
        other => Err((-32601, format!("method `{other}` is not offered here"))),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => error(id, code, &message),
    })
}

/// The tool's input schema for `schema`: the schema itself when it describes an object,
/// else an object holding it under `value` (its `$defs` moved up so local references resolve).
pub(crate) fn input_schema(schema: &Value) -> Value {
    if describes_object(schema) {
        let mut input = schema.clone();
        if let Value::Object(fields) = &mut input {
            fields.remove("$schema");
        }
        return input;
    }
    let mut inner = schema.clone();
    let mut wrapper = Map::new();
    if let Value::Object(fields) = &mut inner {
        fields.remove("$schema");
        for key in ["$defs", "definitions"] {
            if let Some(defs) = fields.remove(key) {
                wrapper.insert(key.to_owned(), defs);
            }
        }
    }
    wrapper.insert("type".into(), "object".into());
    wrapper.insert("properties".into(), json!({ WRAPPED_KEY: inner }));
    wrapper.insert("required".into(), json!([WRAPPED_KEY]));
    wrapper.insert("additionalProperties".into(), false.into());
    Value::Object(wrapper)
}

fn describes_object(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let revision = asked
        .filter(|asked| REVISIONS.contains(asked))
        .unwrap_or(REVISIONS[0]);
    json!({
        "protocolVersion": revision,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "agentprism-output", "version": env!("CARGO_PKG_VERSION")},
    })
}

fn tool(schema: &Value) -> Value {
    json!({
        "name": TOOL_NAME,
        "description": DESCRIPTION,
        "inputSchema": input_schema(schema),
        // It only hands the answer back: agents that ask before calling tools with effects
        // (codex asks for every MCP tool not marked so) need not ask about this one.
        "annotations": {"readOnlyHint": true, "destructiveHint": false,
            "idempotentHint": true, "openWorldHint": false},
    })
}

fn call(slot: &dyn Slot, params: &Value) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str);
    if name != Some(TOOL_NAME) {
        return Err((
            -32602,
            format!("params.name: expected \"{TOOL_NAME}\", got {name:?}"),
        ));
    }
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    let value = if describes_object(slot.schema()) {
        arguments
    } else {
        match arguments {
            Value::Object(mut fields) if fields.len() == 1 && fields.contains_key(WRAPPED_KEY) => {
                fields.remove(WRAPPED_KEY).unwrap_or(Value::Null)
            }
            _ => {
                return Ok(rejected(&format!(
                    "the arguments must be an object with exactly one key, `{WRAPPED_KEY}`, holding the answer"
                )));
            }
        }
    };
    match schema::validate(slot.schema(), &value) {
        Ok(()) => {
            slot.accept(value);
            Ok(
                json!({"content": [{"type": "text", "text": "Answer accepted. You are done; end your turn."}]}),
            )
        }
        Err(problem) => Ok(rejected(&problem)),
    }
}

fn rejected(problem: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!(
            "The answer does not match the required schema: {problem}. Correct it and call {TOOL_NAME} again."
        )}],
        "isError": true,
    })
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}
