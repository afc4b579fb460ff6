//! JSON-RPC 2.0 framing: turning one received message into a request, notification or
//! response, and building the objects we send back.
//!
//! MCP forbids batches, so an array is an invalid request rather than something to unpack.
//! Errors that occur before an id is known are answered with `id: null`, as JSON-RPC asks.

use serde_json::{Map, Value};

use super::context::{McpError, codes};

/// One message received from a client.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    /// The client's answer to a server-initiated request; we send none, so these are ignored.
    Response(Response),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// A string or an integer (JSON-RPC also allows other numbers; MCP does not).
    pub id: Value,
    pub method: String,
    /// `params`, or `{}` when absent, so handlers can index it without checks.
    pub params: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub id: Value,
    pub body: Result<Value, Value>,
}

/// A message that could not be accepted, already shaped as the error response to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    pub id: Value,
    pub error: McpError,
}

impl Rejected {
    pub(crate) fn to_response(&self) -> Value {
        error_response(&self.id, &self.error)
    }
}

impl Message {
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(request) => Some(&request.method),
            Message::Notification(notification) => Some(&notification.method),
            Message::Response(_) => None,
        }
    }
}

/// Parses one JSON-RPC message from raw bytes.
pub fn parse(bytes: &[u8]) -> Result<Message, Box<Rejected>> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        Box::new(Rejected {
            id: Value::Null,
            error: McpError::new(codes::PARSE_ERROR, format!("parse error: {error}")),
        })
    })?;
    from_value(value)
}

/// Classifies an already-parsed JSON value.
pub fn from_value(value: Value) -> Result<Message, Box<Rejected>> {
    let invalid = |id: Value, message: &str| {
        Box::new(Rejected {
            id,
            error: McpError::new(
                codes::INVALID_REQUEST,
                format!("invalid request: {message}"),
            ),
        })
    };
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => return Err(invalid(Value::Null, "batches are not supported")),
        _ => return Err(invalid(Value::Null, "a message must be a JSON object")),
    };
    let id = object.remove("id");
    let id_is_valid = matches!(&id, Some(Value::String(_)))
        || matches!(&id, Some(Value::Number(n)) if n.is_i64() || n.is_u64());
    if id.is_some() && !id_is_valid {
        return Err(invalid(Value::Null, "id must be a string or an integer"));
    }
    let echo_id = id.clone().unwrap_or(Value::Null);
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(invalid(echo_id, "jsonrpc must be \"2.0\""));
    }
    if let Some(method) = object.remove("method") {
        let Value::String(method) = method else {
            return Err(invalid(echo_id, "method must be a string"));
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(params @ Value::Object(_)) => params,
            Some(_) => {
                return Err(Box::new(Rejected {
                    id: echo_id,
                    error: McpError::invalid_params("params must be an object"),
                }));
            }
        };
        return Ok(match id {
            Some(id) => Message::Request(Request { id, method, params }),
            None => Message::Notification(Notification { method, params }),
        });
    }
    let Some(id) = id else {
        return Err(invalid(Value::Null, "a message needs a method or an id"));
    };
    match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Ok(Message::Response(Response {
            id,
            body: Ok(result),
        })),
        (None, Some(error)) => Ok(Message::Response(Response {
            id,
            body: Err(error),
        })),
        _ => Err(invalid(
            id,
            "a response needs exactly one of result and error",
        )),
    }
}

// The envelopes below move the result, error data or params in: `json!` would copy each
// through the serializer (a full copy of a status document per answer).

pub(crate) fn success_response(id: &Value, result: Value) -> Value {
    envelope([("id", id.clone()), ("result", result)])
}

/// [`success_response`] as text, around a result already written as JSON: the same bytes
/// `serde_json` writes for the envelope.
pub(crate) fn success_text(id: &Value, result: &str) -> String {
    let id = serde_json::to_string(id).expect("a JSON value always serialises");
    let mut text = String::with_capacity(result.len() + id.len() + 34);
    text.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    text.push_str(&id);
    text.push_str(",\"result\":");
    text.push_str(result);
    text.push('}');
    text
}

pub fn error_response(id: &Value, error: &McpError) -> Value {
    let mut body = Map::with_capacity(3);
    body.insert("code".to_owned(), Value::from(error.code));
    body.insert("message".to_owned(), Value::from(error.message.as_str()));
    if let Some(data) = &error.data {
        body.insert("data".to_owned(), data.clone());
    }
    envelope([("id", id.clone()), ("error", Value::Object(body))])
}

pub fn notification(method: &str, params: Value) -> Value {
    envelope([("method", Value::from(method)), ("params", params)])
}

/// `{"jsonrpc": "2.0", …fields}`, in that order.
fn envelope<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut object = Map::with_capacity(N + 1);
    object.insert("jsonrpc".to_owned(), Value::from("2.0"));
    for (key, value) in fields {
        object.insert(key.to_owned(), value);
    }
    Value::Object(object)
}

/// A stable key for a request id, used to find in-flight requests (`1` and `"1"` differ).
pub(crate) fn id_key(id: &Value) -> String {
    match id {
        Value::String(text) => format!("s:{text}"),
        other => format!("n:{other}"),
    }
}
