//! Routes behind the guards: paths a server adds beside the MCP endpoint that must be
//! authenticated exactly like it (the folder server's A2A endpoint, `POST /a2a`).
//!
//! A guarded route is asked only after every check an MCP request passes first: the peer
//! classification, Host and Origin, the intercept hook (whose public routes, such as an Agent
//! Card, need no token), the bearer token of `Access::Bearer` (constant time) and the
//! principal header (`http/guard.rs`). Its body is read with the MCP path's own cap and time
//! limit, so a route cannot be a way around them. It answers JSON, or a stream of JSON values
//! as server-sent events; it knows nothing of MCP.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, StatusCode};
use serde_json::Value;

use super::State;
use super::body::{HttpResponse, json_response, plain, sse_response};

/// One request a guarded route answers: what the guards established and the whole body.
pub struct GuardedRequest {
    /// The request's headers (a route may read its own version header).
    pub headers: HeaderMap,
    /// The caller's identity from the principal header, when the listener takes one.
    pub principal: Option<String>,
    /// The body, at most the listener's body cap.
    pub body: Bytes,
}

/// A guarded route's answer: an HTTP status and a JSON body, or a stream of JSON values sent
/// as server-sent events.
pub enum GuardedAnswer {
    Json {
        status: StatusCode,
        body: Value,
    },
    /// Each value is one SSE `data:` event, in order; the response ends when the route drops
    /// its sender, and a client that goes away drops the receiver (the route's next send
    /// fails). The channel is the route's, bounded, so a slow client holds the route back
    /// instead of growing a buffer.
    Events(tokio::sync::mpsc::Receiver<Value>),
}

/// SSE events buffered between a route's values and the connection.
const EVENT_BUFFER: usize = 8;

/// The future a guarded handler returns.
pub(crate) type GuardedFuture = Pin<Box<dyn Future<Output = GuardedAnswer> + Send>>;

/// Answers one POST to a guarded route.
pub type GuardedHandler = Arc<dyn Fn(GuardedRequest) -> GuardedFuture + Send + Sync>;

/// A path served behind the guards, POST only.
#[derive(Clone)]
pub struct GuardedRoute {
    /// The exact path (`/a2a`); it must differ from the MCP endpoint's.
    pub path: String,
    pub handler: GuardedHandler,
}

/// Answers a request for `route` that passed the guards: 405 for anything but POST, the body
/// read within the cap (413 beyond), then the handler's JSON.
pub(super) async fn answer(
    state: Arc<State>,
    route: GuardedRoute,
    parts: Parts,
    body: Incoming,
    principal: Option<String>,
) -> HttpResponse {
    if parts.method != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        response
            .headers_mut()
            .insert("allow", HeaderValue::from_static("POST"));
        return response;
    }
    let body = match super::post::read_body(&state, &parts, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let answer = (route.handler)(GuardedRequest {
        headers: parts.headers,
        principal,
        body,
    })
    .await;
    match answer {
        GuardedAnswer::Json { status, body } => json_response(status, &body),
        GuardedAnswer::Events(mut values) => {
            let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(EVENT_BUFFER);
            tokio::spawn(async move {
                while let Some(value) = values.recv().await {
                    let event = Bytes::from(format!("data: {value}\n\n"));
                    if sender.send(event).await.is_err() {
                        return;
                    }
                }
            });
            sse_response(receiver)
        }
    }
}
