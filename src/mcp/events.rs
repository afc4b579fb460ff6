//! Server-wide changes fanned out from the handler's [`NotificationHub`]: to one legacy
//! session ([`SessionEvents`], read by the transport's GET stream or stdout) and to one
//! 2026-07-28 `subscriptions/listen` stream ([`listen`]).
//!
//! Both filter the same events by what their reader asked for: a session gets
//! `resources/updated` only for its subscriptions; a listen stream gets only the kinds its
//! filter named and the handler declares, each tagged with the listen request's id; a listen
//! that names `taskIds` also gets `notifications/tasks` for those tasks (docs/tasks.md).
//!
//! [`NotificationHub`]: super::handler::NotificationHub

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::handler::{McpError, McpHandler, McpResult, RequestContext, ServerEvent};
use super::jsonrpc;
use super::scope::META_SUBSCRIPTION_ID;
use super::session::Session;
use super::tasks::DEFAULT_POLL_INTERVAL_MS;
use super::tasks::wire::TaskWatch;
use crate::util::sync::Lock;

/// Server-wide changes as one legacy session sees them: `resources/updated` only for its
/// subscriptions, list changes, and notifications addressed to it.
pub struct SessionEvents {
    receiver: broadcast::Receiver<ServerEvent>,
    session: Arc<Session>,
    /// The server's shutdown: the session's stream ends with it.
    shutdown: CancellationToken,
}

impl SessionEvents {
    pub(super) fn new(
        receiver: broadcast::Receiver<ServerEvent>,
        session: Arc<Session>,
        shutdown: CancellationToken,
    ) -> SessionEvents {
        SessionEvents {
            receiver,
            session,
            shutdown,
        }
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The next notification for this session, or `None` once the session or server ends.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let event = tokio::select! {
                () = self.session.closed.cancelled() => return None,
                () = self.shutdown.cancelled() => return None,
                event = self.receiver.recv() => event,
            };
            let message = match event {
                Ok(ServerEvent::ResourceUpdated { uri }) if self.session.is_subscribed(&uri) => {
                    jsonrpc::notification("notifications/resources/updated", json!({"uri": uri}))
                }
                Ok(ServerEvent::ResourceDeleted { uri }) => {
                    self.session.subscriptions.locked().remove(&uri);
                    continue;
                }
                Ok(ServerEvent::ResourcesListChanged) => {
                    jsonrpc::notification("notifications/resources/list_changed", json!({}))
                }
                Ok(ServerEvent::ToolsListChanged) => {
                    jsonrpc::notification("notifications/tools/list_changed", json!({}))
                }
                Ok(ServerEvent::PromptsListChanged) => {
                    jsonrpc::notification("notifications/prompts/list_changed", json!({}))
                }
                Ok(ServerEvent::ToSession {
                    session_id,
                    method,
                    params,
                }) if session_id == self.session.id => jsonrpc::notification(&method, params),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            return Some(message);
        }
    }
}

/// What one listen request asked for and may have.
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    subscriptions: Vec<String>,
}

/// `subscriptions/listen` (S9): acknowledge, forward matching changes tagged with the
/// listen request's id, end with a complete result when cancelled.
pub(super) async fn listen(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    params: &Value,
    capabilities: &Value,
) -> McpResult<Value> {
    let filter = filter(handler, ctx, params, capabilities).await?;
    let requested = params.get("notifications").cloned().unwrap_or(Value::Null);
    let mut watch = TaskWatch::requested(handler.tasks(), ctx, &requested)?;
    let tag = json!({META_SUBSCRIPTION_ID: ctx.request_id});
    let mut receiver = handler.hub().subscribe();
    let mut honoured = filter.honoured();
    if !watch.is_empty() {
        honoured["taskIds"] = json!(watch.ids());
    }
    ctx.notifier.notify(
        "notifications/subscriptions/acknowledged",
        json!({"_meta": tag, "notifications": honoured}),
    );
    let mut task_poll = tokio::time::interval(Duration::from_millis(DEFAULT_POLL_INTERVAL_MS));
    loop {
        let event = tokio::select! {
            () = ctx.cancel.cancelled() => break,
            _ = task_poll.tick(), if !watch.is_empty() => {
                let tasks = handler.tasks().expect("a watch needs a task handler");
                for mut task in watch.changed(tasks, ctx).await {
                    task["_meta"] = tag.clone();
                    ctx.notifier.notify("notifications/tasks", task);
                }
                continue;
            }
            event = receiver.recv() => event,
        };
        let (method, mut params) = match event {
            Ok(ServerEvent::ToolsListChanged) if filter.tools => {
                ("notifications/tools/list_changed", json!({}))
            }
            Ok(ServerEvent::PromptsListChanged) if filter.prompts => {
                ("notifications/prompts/list_changed", json!({}))
            }
            Ok(ServerEvent::ResourcesListChanged) if filter.resources => {
                ("notifications/resources/list_changed", json!({}))
            }
            Ok(ServerEvent::ResourceUpdated { uri }) if filter.subscriptions.contains(&uri) => {
                ("notifications/resources/updated", json!({"uri": uri}))
            }
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        params["_meta"] = tag.clone();
        ctx.notifier.notify(method, params);
    }
    Ok(json!({"_meta": tag}))
}

/// The kinds requested and declared. Only URIs the handler would let a legacy session
/// subscribe to are honoured; the acknowledgement leaves the others out, so the client sees
/// at once which of its subscriptions will never fire (a query URI, an unknown run).
async fn filter(
    handler: &dyn McpHandler,
    ctx: &RequestContext,
    params: &Value,
    capabilities: &Value,
) -> McpResult<Filter> {
    let requested = params
        .get("notifications")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !requested.is_object() {
        return Err(McpError::invalid_params("notifications must be an object"));
    }
    let declared = |capability: &str| capabilities.get(capability).is_some_and(|c| !c.is_null());
    let wants = |key: &str, capability: &str| {
        requested.get(key).and_then(Value::as_bool) == Some(true) && declared(capability)
    };
    let mut subscriptions: Vec<String> = Vec::new();
    if declared("resources") {
        let uris = requested
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for uri in uris.iter().filter_map(Value::as_str) {
            if !subscriptions.iter().any(|known| known == uri)
                && handler.check_subscribe(ctx, uri).await.is_ok()
            {
                subscriptions.push(uri.to_owned());
            }
        }
    }
    Ok(Filter {
        tools: wants("toolsListChanged", "tools"),
        prompts: wants("promptsListChanged", "prompts"),
        resources: wants("resourcesListChanged", "resources"),
        subscriptions,
    })
}

impl Filter {
    /// The acknowledgement's `notifications`: what this stream will deliver.
    fn honoured(&self) -> Value {
        let mut honoured = Map::new();
        if self.tools {
            honoured.insert("toolsListChanged".into(), true.into());
        }
        if self.prompts {
            honoured.insert("promptsListChanged".into(), true.into());
        }
        if self.resources {
            honoured.insert("resourcesListChanged".into(), true.into());
        }
        if !self.subscriptions.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(self.subscriptions));
        }
        Value::Object(honoured)
    }
}
