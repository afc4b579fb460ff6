//! Response bodies and the plain responses every route builds: a whole JSON buffer, an SSE
//! stream fed from a channel, the JSON-RPC error objects HTTP refusals carry, and an
//! [`Outcome`] of the MCP core as HTTP.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::mcp::handler::codes;
use crate::mcp::server::Outcome;

/// A response as routes build it.
pub(super) type HttpResponse = Response<HttpBody>;

/// A response body: a whole buffer, or SSE frames from a channel. Dropping it (the client
/// went away) closes the channel, which is how a stream notices a disconnect.
pub enum HttpBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl HttpBody {
    pub fn empty() -> HttpBody {
        HttpBody::Full(None)
    }

    pub fn full(bytes: impl Into<Bytes>) -> HttpBody {
        HttpBody::Full(Some(bytes.into()))
    }
}

impl Body for HttpBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            HttpBody::Full(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            HttpBody::Stream(receiver) => receiver
                .poll_recv(cx)
                .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, HttpBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            HttpBody::Full(bytes) => hyper::body::SizeHint::with_exact(
                bytes.as_ref().map_or(0, |bytes| bytes.len() as u64),
            ),
            HttpBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

pub(super) fn outcome_response(outcome: Outcome) -> HttpResponse {
    let status = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::OK);
    let mut response = match (outcome.json, &outcome.response) {
        (Some(text), _) => json_text_response(status, text.into_bytes()),
        (None, Some(body)) => json_response(status, body),
        (None, None) => status_only(StatusCode::ACCEPTED),
    };
    if let Some(session) = outcome.new_session
        && let Ok(value) = HeaderValue::from_str(&session)
    {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// A response of `status` with `body` as JSON.
pub fn json_response(status: StatusCode, body: &Value) -> HttpResponse {
    // Straight into bytes: `Display` goes through `fmt::Write` and costs about twice as much.
    let bytes = serde_json::to_vec(body).expect("a JSON value always serialises");
    json_text_response(status, bytes)
}

/// A response of `status` whose body is JSON text already written.
fn json_text_response(status: StatusCode, bytes: Vec<u8>) -> HttpResponse {
    let mut response = Response::new(HttpBody::full(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(super) fn sse_response(body: mpsc::Receiver<Bytes>) -> HttpResponse {
    let mut response = Response::new(HttpBody::Stream(body));
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

pub(super) fn too_large(limit: usize) -> HttpResponse {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is over the limit of {limit} bytes"),
    )
}

pub(super) fn plain(status: StatusCode, text: &str) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": codes::INVALID_REQUEST, "message": text}});
    json_response(status, &body)
}

pub(super) fn status_only(status: StatusCode) -> HttpResponse {
    let mut response = Response::new(HttpBody::empty());
    *response.status_mut() = status;
    response
}
