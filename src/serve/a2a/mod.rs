//! The A2A face of a served folder (docs/serve.md, "A2A"): the Agent Card and the task
//! lifecycle over A2A JSON-RPC, beside the MCP face and over the same [`RunApi`], so a task
//! is a run with the same preparation, limits and owner rules.
//!
//! The protocol version is the `A2A-Version` header's, read the way the A2A specification
//! reads it: a header naming 1.0 selects the 1.0 methods (`SendMessage`, `GetTask`,
//! `CancelTask`) and `TASK_STATE_*` states; no header (or 0.3) selects the 0.3 methods
//! (`message/send`, `tasks/get`, `tasks/cancel`) and lowercase states. A method of the other
//! version is refused with A2A's version error, naming the header to send. The skill and its
//! input come from the message's `metadata` (`{skill, input}`); a task's owner is the
//! principal header's identity when one is configured, else the one A2A owner, and a task of
//! another owner is "task not found", exactly as an unknown id. `SendMessage` answers at
//! once (`submitted`): a client polls, as the card offers neither streaming nor push.
//!
//! Layout: this file (requests, methods, errors), `card` (the Agent Card), `task` (a run as
//! a task in either version's form). It knows no HTTP: the command line hands it the body and
//! the two headers it reads.

use std::sync::Arc;

use serde_json::{Value, json};

use super::owners::OwnerKey;
use super::runs::{self, RunApi, RunError};
use super::view::RunView;

pub(crate) mod card;
mod task;

pub(crate) use card::{CARD_PATH, ENDPOINT_PATH};
use task::TaskState;

/// The header that names the A2A protocol version of a request.
pub(crate) const VERSION_HEADER: &str = "A2A-Version";

/// The A2A protocol version a request speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    /// 1.0: `SendMessage`, `GetTask`, `CancelTask`, `TASK_STATE_*`.
    V1,
    /// 0.3: `message/send`, `tasks/get`, `tasks/cancel`, lowercase states.
    V03,
}

impl Version {
    /// The version `A2A-Version` names: absent or empty is 0.3; the patch level is ignored.
    pub(crate) fn from_header(value: Option<&str>) -> Result<Version, A2aError> {
        let text = value.map(str::trim).unwrap_or_default();
        if text.is_empty() {
            return Ok(Version::V03);
        }
        let mut numbers = text.split('.').map(str::parse::<u32>);
        match (numbers.next(), numbers.next()) {
            (Some(Ok(1)), _) => Ok(Version::V1),
            (Some(Ok(0)), Some(Ok(3))) => Ok(Version::V03),
            _ => Err(A2aError::VersionNotSupported(format!(
                "{VERSION_HEADER}: {:?} is not a version this server speaks; send 1.0, or no \
                 header for 0.3",
                shortened(text)
            ))),
        }
    }
}

/// Why an A2A request was not answered with a result; each maps to its JSON-RPC code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum A2aError {
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    MethodNotFound(String),
    /// A field is missing or malformed; the message names it.
    #[error("{0}")]
    InvalidParams(String),
    /// Unknown, or another owner's: one answer for both.
    #[error("task not found")]
    TaskNotFound,
    #[error("{0}")]
    NotCancelable(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    VersionNotSupported(String),
    /// The engine refused (preparation rejected the workflow or its input, capacity).
    #[error("{0}")]
    Refused(String),
}

impl A2aError {
    /// The JSON-RPC error code (A2A's own codes from -32001 on).
    pub(crate) fn code(&self) -> i64 {
        match self {
            A2aError::Parse(_) => -32700,
            A2aError::InvalidRequest(_) => -32600,
            A2aError::MethodNotFound(_) => -32601,
            A2aError::InvalidParams(_) => -32602,
            A2aError::TaskNotFound => -32001,
            A2aError::NotCancelable(_) => -32002,
            A2aError::Unsupported(_) => -32004,
            A2aError::VersionNotSupported(_) => -32009,
            A2aError::Refused(_) => -32603,
        }
    }
}

impl From<RunError> for A2aError {
    fn from(error: RunError) -> A2aError {
        match error {
            RunError::Unknown => A2aError::TaskNotFound,
            RunError::Invalid(message) => A2aError::InvalidParams(message),
            RunError::Refused(message) => A2aError::Refused(message),
        }
    }
}

/// A method this face carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Send,
    Get,
    Cancel,
}

const V1_METHODS: [(&str, Method); 3] = [
    ("SendMessage", Method::Send),
    ("GetTask", Method::Get),
    ("CancelTask", Method::Cancel),
];
const V03_METHODS: [(&str, Method); 3] = [
    ("message/send", Method::Send),
    ("tasks/get", Method::Get),
    ("tasks/cancel", Method::Cancel),
];
/// Methods of either version this server does not offer (the card says so too).
const UNSUPPORTED: [&str; 16] = [
    "SendStreamingMessage",
    "SubscribeToTask",
    "ListTasks",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/stream",
    "tasks/resubscribe",
    "tasks/list",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
];

impl Method {
    fn of(version: Version, name: &str) -> Result<Method, A2aError> {
        let (own, other, other_version) = match version {
            Version::V1 => (
                &V1_METHODS,
                &V03_METHODS,
                "0.3 (send no A2A-Version header)",
            ),
            Version::V03 => (&V03_METHODS, &V1_METHODS, "1.0 (send A2A-Version: 1.0)"),
        };
        if let Some((_, method)) = own.iter().find(|(known, _)| *known == name) {
            return Ok(*method);
        }
        if other.iter().any(|(known, _)| *known == name) {
            return Err(A2aError::VersionNotSupported(format!(
                "{name} is an A2A {other_version} method; this request speaks A2A {}",
                match version {
                    Version::V1 => "1.0",
                    Version::V03 => "0.3 (no A2A-Version header)",
                }
            )));
        }
        if UNSUPPORTED.contains(&name) {
            return Err(A2aError::Unsupported(format!(
                "{name} is not offered: this server has no streaming, push notifications, task \
                 listing or extended card; send a message and poll the task"
            )));
        }
        Err(A2aError::MethodNotFound(format!(
            "method {:?} not found",
            shortened(name)
        )))
    }
}

/// The A2A face: card and JSON-RPC answers over the folder server's run API.
pub struct A2a {
    api: Arc<RunApi>,
    /// The card's `name` (the server's).
    name: String,
    /// Whether the endpoint requires the bearer token (declared in the card).
    bearer: bool,
}

impl A2a {
    pub(crate) fn new(api: Arc<RunApi>, name: String, bearer: bool) -> A2a {
        A2a { api, name, bearer }
    }

    /// The Agent Card, its endpoint under `base_url` (`http://host:port`).
    pub(crate) fn card(&self, base_url: &str) -> serde_json::Value {
        card::card(&self.api.folder, &self.name, base_url, self.bearer)
    }

    /// The JSON-RPC response to one request `body`, for the caller `principal`, in the
    /// version `version_header` names.
    pub(crate) async fn answer(
        &self,
        version_header: Option<&str>,
        principal: Option<&str>,
        body: &[u8],
    ) -> Value {
        let (id, outcome) = match parse_request(body) {
            Ok((id, method, params)) => {
                let outcome = match Version::from_header(version_header) {
                    Ok(version) => {
                        let owner = OwnerKey::a2a(principal);
                        self.call(version, &method, &params, &owner).await
                    }
                    Err(error) => Err(error),
                };
                (id, outcome)
            }
            Err((id, error)) => (id, Err(error)),
        };
        match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": error.code(),
                "message": error.to_string(),
            }}),
        }
    }

    async fn call(
        &self,
        version: Version,
        method: &str,
        params: &Value,
        owner: &OwnerKey,
    ) -> Result<Value, A2aError> {
        let method = Method::of(version, method)?;
        if !params.is_object() {
            return Err(A2aError::InvalidParams(
                "params: an object is required".to_owned(),
            ));
        }
        let (view, fresh) = match method {
            Method::Send => (self.send_message(params, owner).await?, true),
            Method::Get => (self.get_task(params, owner).await?, false),
            Method::Cancel => (self.cancel_task(params, owner).await?, false),
        };
        let task = task::task(&view, version, fresh);
        Ok(match (method, version) {
            // 1.0's SendMessageResponse holds the task in its `task` member.
            (Method::Send, Version::V1) => json!({"task": task}),
            _ => task,
        })
    }

    /// `SendMessage` / `message/send`: starts the skill's workflow with the input as its
    /// arguments.
    async fn send_message(&self, params: &Value, owner: &OwnerKey) -> Result<RunView, A2aError> {
        let message = params
            .get("message")
            .filter(|message| message.is_object())
            .ok_or_else(|| invalid("params.message: a message object is required"))?;
        if message.get("taskId").is_some_and(|id| !id.is_null()) {
            return Err(A2aError::Unsupported(
                "params.message.taskId: continuing a task is not supported; send a new message \
                 for a new task"
                    .to_owned(),
            ));
        }
        let (place, metadata) = match (message.get("metadata"), params.get("metadata")) {
            (Some(metadata), _) if metadata.is_object() => ("params.message.metadata", metadata),
            (None | Some(Value::Null), Some(metadata)) if metadata.is_object() => {
                ("params.metadata", metadata)
            }
            _ => {
                return Err(invalid(
                    "params.message.metadata: an object {\"skill\": <skill id>, \"input\": \
                     <arguments>} is required; the Agent Card lists the skills",
                ));
            }
        };
        let skill = metadata
            .get("skill")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                invalid(&format!(
                    "{place}.skill: a string naming one of the Agent Card's skills is required"
                ))
            })?;
        if self.api.folder.get(skill).is_none() {
            return Err(invalid(&format!(
                "{place}.skill: no skill is named {:?}; the Agent Card at {CARD_PATH} lists them",
                shortened(skill)
            )));
        }
        let input = match metadata.get("input") {
            None | Some(Value::Null) => json!({}),
            Some(input @ Value::Object(_)) => input.clone(),
            Some(_) => {
                return Err(invalid(&format!(
                    "{place}.input: a JSON object (the workflow's arguments) is required"
                )));
            }
        };
        runs::check_size(&input).map_err(|error| {
            invalid(&format!(
                "{place}.input{}",
                error.to_string().trim_start_matches("arguments")
            ))
        })?;
        let start = json!({"name": skill, "arguments": input});
        self.api
            .start(owner, &start)
            .await
            .map_err(|error| match error {
                // Preparation names the workflow's arguments `args`; here they are the input.
                RunError::Refused(message) if message.starts_with("args ") => {
                    invalid(&format!("{place}.input: {message}"))
                }
                other => A2aError::from(other),
            })
    }

    /// `GetTask` / `tasks/get`.
    async fn get_task(&self, params: &Value, owner: &OwnerKey) -> Result<RunView, A2aError> {
        let run = run_params(params)?;
        Ok(self.api.status(owner, &run).await?)
    }

    /// `CancelTask` / `tasks/cancel`: stops the run; a task already over cannot be canceled.
    async fn cancel_task(&self, params: &Value, owner: &OwnerKey) -> Result<RunView, A2aError> {
        let run = run_params(params)?;
        let view = self.api.status(owner, &run).await?;
        let state = TaskState::of(&view, false);
        if state.is_final() {
            return Err(A2aError::NotCancelable(format!(
                "task {} is {}; only a submitted, working or input-required task can be canceled",
                view.run_id,
                state.name(Version::V03)
            )));
        }
        Ok(self.api.cancel(owner, &run).await?)
    }
}

/// `params.id` as the run API's `{runId}`.
fn run_params(params: &Value) -> Result<Value, A2aError> {
    let id = params
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("params.id: the task id (a string) is required"))?;
    Ok(json!({"runId": id}))
}

fn invalid(message: &str) -> A2aError {
    A2aError::InvalidParams(message.to_owned())
}

/// The id, method and params of one JSON-RPC request, or the id to answer an error with.
fn parse_request(body: &[u8]) -> Result<(Value, String, Value), (Value, A2aError)> {
    let message: Value = serde_json::from_slice(body).map_err(|error| {
        (
            Value::Null,
            A2aError::Parse(format!("the body is not JSON: {error}")),
        )
    })?;
    let Value::Object(object) = message else {
        return Err((
            Value::Null,
            A2aError::InvalidRequest(
                "the body must be one JSON-RPC request object (batches are not supported)"
                    .to_owned(),
            ),
        ));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    let id_ok = matches!(id, Value::String(_) | Value::Number(_));
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !id_ok {
        let id = if id_ok { id } else { Value::Null };
        return Err((
            id,
            A2aError::InvalidRequest(
                "a JSON-RPC 2.0 request needs \"jsonrpc\": \"2.0\" and a string or number id"
                    .to_owned(),
            ),
        ));
    }
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        return Err((
            id,
            A2aError::InvalidRequest("method: a string is required".to_owned()),
        ));
    };
    let params = object.get("params").cloned().unwrap_or_else(|| json!({}));
    Ok((id, method.to_owned(), params))
}

/// At most 64 characters of caller text in a message.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_absent_header_reads_as_0_3() {
        assert_eq!(Version::from_header(None).unwrap(), Version::V03);
        assert_eq!(Version::from_header(Some(" ")).unwrap(), Version::V03);
        assert_eq!(Version::from_header(Some("0.3")).unwrap(), Version::V03);
        assert_eq!(Version::from_header(Some("0.3.0")).unwrap(), Version::V03);
        assert_eq!(Version::from_header(Some("1.0")).unwrap(), Version::V1);
        assert_eq!(Version::from_header(Some("1.0.2")).unwrap(), Version::V1);
        for bad in ["0.2", "2.0", "one", "0"] {
            let error = Version::from_header(Some(bad)).unwrap_err();
            assert_eq!(error.code(), -32009, "{bad}");
            assert!(error.to_string().starts_with("A2A-Version: "), "{error}");
        }
    }

    #[test]
    fn each_version_has_its_own_method_names() {
        assert_eq!(
            Method::of(Version::V1, "SendMessage").unwrap(),
            Method::Send
        );
        assert_eq!(Method::of(Version::V03, "tasks/get").unwrap(), Method::Get);
        assert_eq!(
            Method::of(Version::V03, "tasks/cancel").unwrap(),
            Method::Cancel
        );
        let crossed = Method::of(Version::V03, "SendMessage").unwrap_err();
        assert_eq!(crossed.code(), -32009);
        assert!(
            crossed.to_string().contains("A2A-Version: 1.0"),
            "{crossed}"
        );
        assert_eq!(
            Method::of(Version::V1, "message/send").unwrap_err().code(),
            -32009
        );
        assert_eq!(
            Method::of(Version::V1, "SendStreamingMessage")
                .unwrap_err()
                .code(),
            -32004
        );
        assert_eq!(Method::of(Version::V1, "nope").unwrap_err().code(), -32601);
    }

    #[test]
    fn malformed_requests_are_json_rpc_errors() {
        let (id, error) = parse_request(b"{").unwrap_err();
        assert_eq!((id, error.code()), (Value::Null, -32700));
        let (_, error) = parse_request(b"[]").unwrap_err();
        assert_eq!(error.code(), -32600);
        let (id, error) = parse_request(br#"{"jsonrpc":"2.0","id":7}"#).unwrap_err();
        assert_eq!((id, error.code()), (json!(7), -32600));
        let (id, method, params) =
            parse_request(br#"{"jsonrpc":"2.0","id":"a","method":"tasks/get"}"#).unwrap();
        assert_eq!(
            (id, method.as_str(), params),
            (json!("a"), "tasks/get", json!({}))
        );
    }
}
