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
//! once (`submitted`); the streaming methods stream the task as it goes (`stream`); a message
//! naming an input-required task answers its checkpoint (`reply`); `ListTasks` lists the
//! caller's tasks (`list`).
//!
//! Layout: this file (requests, methods, errors), `card` (the Agent Card), `task` (a run as
//! a task in either version's form), `stream`, `reply`, `list`. It knows no HTTP: the
//! command line hands it the body and the two headers it reads, and turns a stream into
//! server-sent events.

use std::sync::Arc;

use serde_json::{Value, json};

use super::owners::OwnerKey;
use super::runs::{self, RunApi, RunError};
use super::view::RunView;

pub(crate) mod card;
mod list;
mod push;
mod push_api;
mod reply;
mod stream;
mod task;
mod webhook;

pub(crate) use push::Pushes;

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
    #[error("{0}")]
    PushNotSupported(String),
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
            A2aError::PushNotSupported(_) => -32003,
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
    Stream,
    Get,
    Cancel,
    Subscribe,
    List,
    PushSet,
    PushGet,
    PushList,
    PushDelete,
}

const V1_METHODS: [(&str, Method); 10] = [
    ("SendMessage", Method::Send),
    ("SendStreamingMessage", Method::Stream),
    ("GetTask", Method::Get),
    ("CancelTask", Method::Cancel),
    ("SubscribeToTask", Method::Subscribe),
    ("ListTasks", Method::List),
    ("CreateTaskPushNotificationConfig", Method::PushSet),
    ("GetTaskPushNotificationConfig", Method::PushGet),
    ("ListTaskPushNotificationConfigs", Method::PushList),
    ("DeleteTaskPushNotificationConfig", Method::PushDelete),
];
const V03_METHODS: [(&str, Method); 9] = [
    ("message/send", Method::Send),
    ("message/stream", Method::Stream),
    ("tasks/get", Method::Get),
    ("tasks/cancel", Method::Cancel),
    ("tasks/resubscribe", Method::Subscribe),
    ("tasks/pushNotificationConfig/set", Method::PushSet),
    ("tasks/pushNotificationConfig/get", Method::PushGet),
    ("tasks/pushNotificationConfig/list", Method::PushList),
    ("tasks/pushNotificationConfig/delete", Method::PushDelete),
];
/// Methods of either version this server does not offer (the card says so too).
const UNSUPPORTED: [&str; 3] = [
    "GetExtendedAgentCard",
    "tasks/list",
    "agent/getAuthenticatedExtendedCard",
];

impl Method {
    fn of(version: Version, name: &str) -> Result<Method, A2aError> {
        let (own, other, other_version) = match version {
            Version::V1 => (
                &V1_METHODS[..],
                &V03_METHODS[..],
                "0.3 (send no A2A-Version header)",
            ),
            Version::V03 => (
                &V03_METHODS[..],
                &V1_METHODS[..],
                "1.0 (send A2A-Version: 1.0)",
            ),
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
                "{name} is not offered: this server has no extended card and no 0.3 task \
                 listing (ListTasks is A2A 1.0's)"
            )));
        }
        Err(A2aError::MethodNotFound(format!(
            "method {:?} not found",
            shortened(name)
        )))
    }
}

/// What a request is answered with.
pub(crate) enum A2aAnswer {
    /// One JSON-RPC response.
    Json(Value),
    /// JSON-RPC responses, one per event, as server-sent events.
    Stream(tokio::sync::mpsc::Receiver<Value>),
}

/// A method's result before it is framed.
enum Outcome {
    Result(Value),
    Stream(tokio::sync::mpsc::Receiver<Value>),
}

/// The A2A face: card and JSON-RPC answers over the folder server's run API.
pub(crate) struct A2a {
    api: Arc<RunApi>,
    /// The card's `name` (the server's).
    name: String,
    /// Whether the endpoint requires the bearer token (declared in the card).
    bearer: bool,
    /// The webhooks push notifications go to, and where they may.
    pushes: Arc<Pushes>,
}

impl A2a {
    pub(crate) fn new(api: Arc<RunApi>, name: String, bearer: bool, pushes: Pushes) -> A2a {
        A2a {
            api,
            name,
            bearer,
            pushes: Arc::new(pushes),
        }
    }

    /// The Agent Card, its endpoint under `base_url` (`http://host:port`).
    pub(crate) fn card(&self, base_url: &str) -> serde_json::Value {
        card::card(
            &self.api.folder,
            &self.name,
            base_url,
            self.bearer,
            self.pushes.enabled(),
        )
    }

    /// The answer to one JSON-RPC request `body`, for the caller `principal`, in the version
    /// `version_header` names: one response, or a stream of them for the streaming methods.
    pub(crate) async fn answer(
        &self,
        version_header: Option<&str>,
        principal: Option<&str>,
        body: &[u8],
    ) -> A2aAnswer {
        let (id, outcome) = match parse_request(body) {
            Ok((id, method, params)) => {
                let outcome = match Version::from_header(version_header) {
                    Ok(version) => {
                        let owner = OwnerKey::a2a(principal);
                        self.call(version, &method, &params, &owner, &id).await
                    }
                    Err(error) => Err(error),
                };
                (id, outcome)
            }
            Err((id, error)) => (id, Err(error)),
        };
        match outcome {
            Ok(Outcome::Result(result)) => {
                A2aAnswer::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            }
            Ok(Outcome::Stream(events)) => A2aAnswer::Stream(events),
            Err(error) => A2aAnswer::Json(json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": error.code(),
                "message": error.to_string(),
            }})),
        }
    }

    async fn call(
        &self,
        version: Version,
        method: &str,
        params: &Value,
        owner: &OwnerKey,
        id: &Value,
    ) -> Result<Outcome, A2aError> {
        let method = Method::of(version, method)?;
        if !params.is_object() {
            return Err(A2aError::InvalidParams(
                "params: an object is required".to_owned(),
            ));
        }
        let (view, fresh) = match method {
            Method::Send | Method::Stream => {
                let push = self.push_of_send(params, version)?;
                let (view, fresh) = self.send_message(params, owner).await?;
                self.push_on_send(push, owner, &view)?;
                (view, fresh)
            }
            Method::Get => (self.get_task(params, owner).await?, false),
            Method::Cancel => (self.cancel_task(params, owner).await?, false),
            Method::Subscribe => (self.subscribable(params, owner).await?, false),
            Method::List => return Ok(Outcome::Result(self.list_tasks(params, owner).await?)),
            Method::PushSet | Method::PushGet | Method::PushList | Method::PushDelete => {
                let result = self.push_method(method, version, params, owner).await?;
                return Ok(Outcome::Result(result));
            }
        };
        if matches!(method, Method::Stream | Method::Subscribe) {
            let events = stream::follow(
                self.api.clone(),
                owner.clone(),
                (id.clone(), version),
                view,
                fresh,
                stream::Until::Interrupted,
            );
            return Ok(Outcome::Stream(events));
        }
        let task = task::task(&view, version, fresh);
        Ok(Outcome::Result(match (method, version) {
            // 1.0's SendMessageResponse holds the task in its `task` member.
            (Method::Send, Version::V1) => json!({"task": task}),
            _ => task,
        }))
    }

    /// `SendMessage` / `message/send` (and their streaming forms): starts the skill's
    /// workflow with the input as its arguments, or answers the checkpoint of the task the
    /// message continues (`message.taskId`). The view, and whether the run was just started.
    async fn send_message(
        &self,
        params: &Value,
        owner: &OwnerKey,
    ) -> Result<(RunView, bool), A2aError> {
        let message = params
            .get("message")
            .filter(|message| message.is_object())
            .ok_or_else(|| invalid("params.message: a message object is required"))?;
        match message.get("taskId") {
            None | Some(Value::Null) => {}
            Some(Value::String(task_id)) => {
                return Ok((self.continue_task(task_id, message, owner).await?, false));
            }
            Some(_) => return Err(invalid("params.message.taskId: a string is required")),
        }
        Ok((self.start_task(params, message, owner).await?, true))
    }

    /// A message continuing task `task_id`: the answer to the checkpoint it waits at.
    async fn continue_task(
        &self,
        task_id: &str,
        message: &Value,
        owner: &OwnerKey,
    ) -> Result<RunView, A2aError> {
        let view = self.api.status(owner, &json!({"runId": task_id})).await?;
        let Some(checkpoint) = view
            .checkpoint
            .as_ref()
            .filter(|_| TaskState::of(&view, false) == TaskState::InputRequired)
        else {
            return Err(invalid(&format!(
                "params.message.taskId: task {task_id} is {} and waits for no answer; only a task \
                 input-required at a checkpoint takes a message",
                TaskState::of(&view, false).name(Version::V03)
            )));
        };
        let resume = reply::resume_params(task_id, checkpoint, message)?;
        Ok(self.api.resume(owner, &resume).await?)
    }

    /// A message starting a task of the skill its metadata names.
    async fn start_task(
        &self,
        params: &Value,
        message: &Value,
        owner: &OwnerKey,
    ) -> Result<RunView, A2aError> {
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

    /// `SubscribeToTask` / `tasks/resubscribe`: the task, unless it is over (nothing more
    /// would come).
    async fn subscribable(&self, params: &Value, owner: &OwnerKey) -> Result<RunView, A2aError> {
        let view = self.get_task(params, owner).await?;
        let state = TaskState::of(&view, false);
        if state.is_final() {
            return Err(A2aError::Unsupported(format!(
                "task {} is {}: nothing more will happen to it; read it with GetTask",
                view.run_id,
                state.name(Version::V03)
            )));
        }
        Ok(view)
    }

    /// `ListTasks` (1.0): the caller's tasks this replica knows, newest first, filtered by
    /// `status` and `contextId`, in pages of `pageSize` (1 to 100, default 50) continued by
    /// `pageToken`.
    async fn list_tasks(&self, params: &Value, owner: &OwnerKey) -> Result<Value, A2aError> {
        list::list(&self.api, params, owner).await
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
            Method::of(Version::V1, "GetExtendedAgentCard")
                .unwrap_err()
                .code(),
            -32004
        );
        assert_eq!(
            Method::of(Version::V1, "SendStreamingMessage").unwrap(),
            Method::Stream
        );
        assert_eq!(
            Method::of(Version::V03, "tasks/resubscribe").unwrap(),
            Method::Subscribe
        );
        assert_eq!(
            Method::of(Version::V03, "ListTasks").unwrap_err().code(),
            -32009
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
