//! What the shim reads from its host: newline-delimited JSON-RPC frames of at most 64 MiB, and
//! the few facts it takes from each (daemon.md 1.7 "inspects only"): the id, the method, the
//! era (a 2026-07-28 request carries its protocol version in `_meta` and goes statelessly),
//! the resource a (un)subscribe names and the request a cancellation names. Everything else
//! passes through as the bytes the host wrote.

use bytes::Bytes;
use serde_json::{Value, json};

pub(crate) use crate::transport::lines::{Line, read_lines};

/// The largest frame the shim accepts; a longer line is answered with an error as soon as it
/// passes the limit, and the rest of it is skipped unread ([`read_lines`]: no more than this
/// much of a line is ever held).
pub(crate) const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// `_meta` key that marks a 2026-07-28 (stateless) request.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// JSON-RPC error codes the shim answers with itself.
pub(crate) mod codes {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
}

/// Whether a frame asks for an answer, is a notification, or answers the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Request,
    Notification,
    Response,
}

/// The headers a 2026-07-28 request must carry, taken from its body (protocol.md S2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Modern {
    pub version: String,
    pub method: String,
    /// `Mcp-Name`: the tool or prompt name, or the resource uri.
    pub name: Option<String>,
}

/// One frame from the host and what the shim knows about it.
#[derive(Clone, Debug)]
pub(crate) struct Frame {
    /// Arrival order; replays keep it so queued frames stay in client order.
    pub seq: u64,
    /// The bytes to POST.
    pub body: Bytes,
    pub kind: Kind,
    /// The request id (also of a response).
    pub id: Option<Value>,
    pub method: Option<String>,
    /// Set for stateless 2026-07-28 requests.
    pub modern: Option<Modern>,
    /// `params.uri` of `resources/subscribe` and `resources/unsubscribe`.
    pub uri: Option<String>,
    /// `params.requestId` of `notifications/cancelled`.
    pub cancels: Option<Value>,
}

impl Frame {
    pub(crate) fn is(&self, method: &str) -> bool {
        self.method.as_deref() == Some(method)
    }

    /// Whether this request's reply goes to the host (the shim's own replays are swallowed).
    pub(crate) fn is_request(&self) -> bool {
        self.kind == Kind::Request
    }
}

/// Reads the facts the shim needs from one line, or the error response to write instead.
pub(crate) fn inspect(seq: u64, line: Vec<u8>) -> Result<Frame, Value> {
    let value: Value = serde_json::from_slice(&line).map_err(|e| {
        error_response(
            &Value::Null,
            codes::PARSE_ERROR,
            &format!("parse error: {e}"),
        )
    })?;
    let Some(object) = value.as_object() else {
        return Err(error_response(
            &Value::Null,
            codes::INVALID_REQUEST,
            "invalid request: a message must be one JSON object (no batches)",
        ));
    };
    let id = object.get("id").filter(|id| !id.is_null()).cloned();
    let method = object
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let kind = match (&method, &id) {
        (Some(_), Some(_)) => Kind::Request,
        (Some(_), None) => Kind::Notification,
        (None, _) => Kind::Response,
    };
    let params = object.get("params");
    let param = |key: &str| params.and_then(|p| p.get(key));
    let modern = match (&method, kind) {
        (Some(method), Kind::Request) => param("_meta")
            .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
            .and_then(Value::as_str)
            .map(|version| Modern {
                version: version.to_owned(),
                method: method.clone(),
                name: match method.as_str() {
                    "tools/call" | "prompts/get" => param("name"),
                    "resources/read" => param("uri"),
                    _ => None,
                }
                .and_then(Value::as_str)
                .map(str::to_owned),
            }),
        _ => None,
    };
    let uri = match method.as_deref() {
        Some("resources/subscribe" | "resources/unsubscribe") => {
            param("uri").and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    };
    let cancels = match method.as_deref() {
        Some("notifications/cancelled") => param("requestId").cloned(),
        _ => None,
    };
    Ok(Frame {
        seq,
        body: Bytes::from(line),
        kind,
        id,
        method,
        modern,
        uri,
        cancels,
    })
}

/// A JSON-RPC error response.
pub(crate) fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A header value as `=?base64?…?=` when it is not plain visible ASCII (protocol.md S2).
pub(crate) fn header_value(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..0x7f).contains(&b)) && text.trim() == text;
    if plain {
        text.to_owned()
    } else {
        use base64::Engine;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspection_of_each_kind() {
        let frame = inspect(
            1,
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#.to_vec(),
        )
        .unwrap();
        assert_eq!(
            (frame.kind, frame.id, frame.modern),
            (Kind::Request, Some(json!(3)), None)
        );
        let frame = inspect(
            2,
            br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"workflow","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#
                .to_vec(),
        )
        .unwrap();
        assert_eq!(
            frame.modern,
            Some(Modern {
                version: "2026-07-28".into(),
                method: "tools/call".into(),
                name: Some("workflow".into())
            })
        );
        let frame = inspect(
            3,
            br#"{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"agentprism://runs/a"}}"#.to_vec(),
        )
        .unwrap();
        assert_eq!(frame.uri.as_deref(), Some("agentprism://runs/a"));
        let frame = inspect(
            4,
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#
                .to_vec(),
        )
        .unwrap();
        assert_eq!(
            (frame.kind, frame.cancels),
            (Kind::Notification, Some(json!(4)))
        );
        let frame = inspect(5, br#"{"jsonrpc":"2.0","id":9,"result":{}}"#.to_vec()).unwrap();
        assert_eq!(frame.kind, Kind::Response);
        assert_eq!(
            inspect(6, b"nope".to_vec()).unwrap_err()["error"]["code"],
            -32700
        );
        assert_eq!(
            inspect(7, b"[1]".to_vec()).unwrap_err()["error"]["code"],
            -32600
        );
    }

    #[test]
    fn header_values_outside_ascii_are_base64() {
        assert_eq!(header_value("workflow"), "workflow");
        assert_eq!(header_value("wörk"), "=?base64?d8O2cms=?=");
    }
}
