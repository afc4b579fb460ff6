//! Method routing: which [`McpHandler`] method answers which MCP method, the parameter checks
//! the core makes before a handler sees a request, and the results the core builds itself
//! (`initialize`, `server/discover`, `ping`, `logging/setLevel`, subscriptions).
//!
//! A method of a capability the handler does not declare is -32601, as if it did not exist,
//! so the declared capabilities and the behaviour cannot disagree (S4).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::answer::ToolAnswer;
use super::events;
use super::handler::{McpError, McpHandler, McpResult, RequestContext};
use super::jsonrpc::Request;
use super::observer::AnsweredCall;
use super::scope::{LEGACY_VERSIONS, META_SERVER_INFO, MODERN_VERSIONS};
use super::session::Session;
use super::tasks::{self, wire as task_wire};
use crate::util::sync::Lock;

/// The handler's capabilities plus what the core itself serves (`logging`).
pub(super) fn capabilities(handler: &dyn McpHandler) -> Value {
    let mut capabilities = handler.capabilities();
    if let Value::Object(map) = &mut capabilities {
        map.entry("logging").or_insert_with(|| json!({}));
    }
    capabilities
}

/// The capabilities as one client sees them: the tasks capability of its era only when the
/// handler backs tasks and the client speaks them, so other clients see nothing new.
fn capabilities_for(handler: &dyn McpHandler, speaks_tasks: bool, modern: bool) -> Value {
    let mut capabilities = capabilities(handler);
    if speaks_tasks && handler.tasks().is_some() {
        task_wire::add_capability(&mut capabilities, modern);
    }
    capabilities
}

/// The `initialize` result for the negotiated `version`; `client_capabilities` are the
/// ones the client declared.
pub(super) fn initialize_result(
    handler: &dyn McpHandler,
    version: &str,
    client_capabilities: &Value,
) -> Value {
    let speaks_tasks = client_capabilities.get("tasks").is_some();
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities_for(handler, speaks_tasks, false),
        "serverInfo": server_info(handler),
    });
    if let Some(instructions) = handler.instructions() {
        result["instructions"] = instructions.into();
    }
    result
}

/// The `server/discover` result (S4), before era shaping.
pub(super) fn discover(handler: &dyn McpHandler) -> Value {
    let supported: Vec<&str> = MODERN_VERSIONS
        .iter()
        .chain(LEGACY_VERSIONS)
        .copied()
        .collect();
    let mut result = json!({
        "supportedVersions": supported,
        "capabilities": capabilities(handler),
        "_meta": {META_SERVER_INFO: server_info(handler)},
    });
    if let Some(instructions) = handler.instructions() {
        result["instructions"] = instructions.into();
    }
    result
}

fn server_info(handler: &dyn McpHandler) -> Value {
    let info = handler.server_info();
    let mut server_info = json!({"name": info.name, "version": info.version});
    if let Some(title) = info.title {
        server_info["title"] = title.into();
    }
    server_info
}

/// Answers one request in its context; `capabilities` are the server's (see
/// [`capabilities`]), `session` is the request's legacy session, if any. Only `tools/call`
/// may answer with a prepared result.
pub(super) async fn dispatch(
    handler: &dyn McpHandler,
    capabilities: &Value,
    ctx: &RequestContext,
    request: &Request,
    session: Option<&Arc<Session>>,
) -> McpResult<ToolAnswer> {
    if request.method == "tools/call" {
        if !declares(capabilities, "tools") {
            return Err(McpError::method_not_found(&request.method));
        }
        return call_tool(handler, ctx, &request.params).await;
    }
    dispatch_other(handler, capabilities, ctx, request, session)
        .await
        .map(ToolAnswer::Value)
}

fn declares(capabilities: &Value, name: &str) -> bool {
    capabilities.get(name).is_some_and(|c| !c.is_null())
}

/// `tools/call`: through the task backing when the call asks to be a task, else straight to
/// the registry's tool; then the registry's observers are told of the answer.
async fn call_tool(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    params: &Value,
) -> McpResult<ToolAnswer> {
    let name = string_param(params, "name")?;
    let none_given;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => {
            none_given = Value::Object(Map::new());
            &none_given
        }
        Some(arguments @ Value::Object(_)) => arguments,
        Some(_) => return Err(McpError::invalid_params("arguments must be an object")),
    };
    let tools = handler.tools();
    let routed = match handler.tasks() {
        Some(backing) => {
            let support = tools
                .task_support(ctx, name)
                .unwrap_or_else(|| backing.task_support(name));
            task_wire::call(backing, support, ctx, params, name, arguments).await
        }
        None => None,
    };
    let (answer, task) = match routed {
        Some(routed) => {
            let (value, task) = routed?;
            (ToolAnswer::Value(value), task)
        }
        None => (tools.call(ctx, name, arguments).await?, None),
    };
    tools.tell(&AnsweredCall {
        session: ctx.session_id.as_deref(),
        tool: name,
        arguments,
        answer: &answer,
        task: task.as_ref(),
    });
    Ok(answer)
}

/// Every method but `tools/call`.
async fn dispatch_other(
    handler: &dyn McpHandler,
    capabilities: &Value,
    ctx: &RequestContext,
    request: &Request,
    session: Option<&Arc<Session>>,
) -> McpResult<Value> {
    let params = &request.params;
    let method = request.method.as_str();
    let require = |name: &str| {
        if declares(capabilities, name) {
            Ok(())
        } else {
            Err(McpError::method_not_found(method))
        }
    };
    match method {
        "ping" => Ok(json!({})),
        "server/discover" => {
            let mut result = discover(handler);
            result["capabilities"] =
                capabilities_for(handler, tasks::client_speaks_tasks(ctx), true);
            Ok(result)
        }
        "logging/setLevel" => {
            let level = string_param(params, "level")?;
            if let Some(session) = session {
                *session.log_level.locked() = Some(level.to_owned());
            }
            Ok(json!({}))
        }
        "tools/list" => {
            require("tools")?;
            handler.list_tools(ctx, cursor_param(params)?).await
        }
        "resources/list" | "resources/templates/list" | "resources/read" => {
            require("resources")?;
            resources(handler, ctx, method, params).await
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            subscription(handler, ctx, method, params, capabilities, session).await
        }
        "prompts/list" | "prompts/get" => {
            require("prompts")?;
            prompts(handler, ctx, method, params).await
        }
        "completion/complete" => {
            require("completions")?;
            if !params.get("ref").is_some_and(Value::is_object)
                || !params.get("argument").is_some_and(Value::is_object)
            {
                return Err(McpError::invalid_params(
                    "completion/complete needs ref and argument objects",
                ));
            }
            handler.complete(ctx, params.clone()).await
        }
        "subscriptions/listen" if ctx.era.is_modern() => {
            events::listen(handler, ctx, params, capabilities).await
        }
        _ if method.starts_with("tasks/") && handler.tasks().is_some() => {
            let backing = handler.tasks().expect("checked above");
            match task_wire::method(backing, ctx, method, params).await {
                Some(answer) => answer,
                None => Err(McpError::method_not_found(method)),
            }
        }
        _ => match handler.custom(ctx, method, params.clone()).await {
            Some(result) => result,
            None => Err(McpError::method_not_found(method)),
        },
    }
}

async fn resources(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    method: &str,
    params: &Value,
) -> McpResult<Value> {
    match method {
        "resources/list" => handler.list_resources(ctx, cursor_param(params)?).await,
        "resources/templates/list" => {
            handler
                .list_resource_templates(ctx, cursor_param(params)?)
                .await
        }
        _ => {
            handler
                .read_resource(ctx, string_param(params, "uri")?)
                .await
        }
    }
}

/// `resources/subscribe` and `resources/unsubscribe`: legacy sessions only, and only when
/// the handler declares `resources.subscribe`; the core keeps the subscription.
async fn subscription(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    method: &str,
    params: &Value,
    capabilities: &Value,
    session: Option<&Arc<Session>>,
) -> McpResult<Value> {
    let subscribable = capabilities
        .pointer("/resources/subscribe")
        .and_then(Value::as_bool)
        == Some(true);
    if !subscribable {
        return Err(McpError::method_not_found(method));
    }
    let uri = string_param(params, "uri")?;
    let Some(session) = session else {
        return Err(McpError::method_not_found(method));
    };
    if method == "resources/subscribe" {
        handler.check_subscribe(ctx, uri).await?;
        session.subscriptions.locked().insert(uri.to_owned());
    } else {
        session.subscriptions.locked().remove(uri);
    }
    Ok(json!({}))
}

async fn prompts(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    method: &str,
    params: &Value,
) -> McpResult<Value> {
    if method == "prompts/list" {
        return handler.list_prompts(ctx, cursor_param(params)?).await;
    }
    let name = string_param(params, "name")?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(arguments)) if arguments.values().all(Value::is_string) => {
            Value::Object(arguments.clone())
        }
        Some(_) => {
            return Err(McpError::invalid_params(
                "arguments must be an object of strings",
            ));
        }
    };
    handler.get_prompt(ctx, name, arguments).await
}

fn string_param<'a>(params: &'a Value, name: &str) -> McpResult<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params(format!("params.{name} must be a string")))
}

fn cursor_param(params: &Value) -> McpResult<Option<&str>> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(cursor)) => Ok(Some(cursor)),
        Some(_) => Err(McpError::invalid_params("params.cursor must be a string")),
    }
}
