//! One frame POSTed to the daemon, its answer streamed to stdout, and the recovery that
//! rebuilds a lost session.
//!
//! How a POST ends decides what the proxy does next ([`Posted`]): a frame the daemon
//! certainly did not process is replayed, one that may have reached a daemon that then broke
//! is answered with -32603 and never replayed.

use bytes::Bytes;
use hyper::Method;
use serde_json::Value;

use super::ensure::{Daemon, Ensurer};
use super::frames::{self, Frame, codes};
use super::http::{self, MCP_PATH};
use super::output::Output;
use super::sse;
use crate::daemon::health::LAME_DUCK_HEADER;

/// How one POST ended.
#[derive(Debug)]
pub(crate) enum Posted {
    /// The daemon answered; the answer was written (or swallowed). For `initialize`, the
    /// session id and negotiated protocol version.
    Answered {
        session: Option<String>,
        protocol_version: Option<String>,
        /// The answer carried `Agentprism-Lame-Duck: 1`: the daemon was superseded.
        lame_duck: bool,
    },
    /// The daemon did not process it (refused, 404 session gone, 503): replay it.
    Retry(String),
    /// Broken after the daemon may have received it: never replayed.
    Lost(String),
    /// The host cancelled this stateless request; its stream was closed.
    Cancelled,
}

/// What a successful recovery established.
#[derive(Debug)]
pub(crate) struct Recovery {
    pub(super) daemon: Daemon,
    /// The rebuilt legacy session; `None` for a client that never initialized.
    pub(super) session: Option<String>,
    pub(super) protocol_version: Option<String>,
}

/// Where and how one frame is POSTed.
pub(super) struct PostPlan {
    /// The daemon of the current generation.
    pub(super) port: u16,
    /// The legacy session a non-initialize legacy frame goes with.
    pub(super) session: Option<String>,
    /// The negotiated version, sent as `MCP-Protocol-Version` with the session.
    pub(super) protocol_version: Option<String>,
    /// The shim's own replay: the answer is not written to stdout.
    pub(super) swallow: bool,
}

/// POSTs one frame and streams its answer to stdout.
pub(super) async fn post(plan: &PostPlan, frame: &Frame, output: &Output) -> Posted {
    let (headers, with_session) = request_headers(plan, frame);
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut response = match http::send(
        plan.port,
        Method::POST,
        MCP_PATH,
        &borrowed,
        Some(frame.body.clone()),
    )
    .await
    {
        Ok(response) => response,
        Err(error) if error.never_delivered() => return Posted::Retry(error.to_string()),
        Err(error) => return Posted::Lost(error.to_string()),
    };
    match response.status {
        404 if with_session => {
            return Posted::Retry("the daemon no longer knows the session".into());
        }
        503 => return Posted::Retry("the daemon is not taking new work (503)".into()),
        _ => {}
    }
    let session = response.header("mcp-session-id").map(str::to_owned);
    let lame_duck = response.header(LAME_DUCK_HEADER) == Some("1");
    let answer = if response.is_event_stream() {
        stream_answer(&mut response, plan, frame, output).await
    } else {
        json_answer(response, plan, frame, output).await
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(ended) => return ended,
    };
    let protocol_version = answer
        .as_ref()
        .and_then(|answer| answer.pointer("/result/protocolVersion"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Posted::Answered {
        session,
        protocol_version,
        lame_duck,
    }
}

/// The POST's headers, and whether it goes with the session: a 2026-07-28 frame carries
/// its protocol headers and no session; `initialize` neither; any other frame the session
/// and its negotiated version.
fn request_headers(plan: &PostPlan, frame: &Frame) -> (Vec<(&'static str, String)>, bool) {
    let mut headers: Vec<(&str, String)> = vec![
        ("accept", "application/json, text/event-stream".into()),
        ("content-type", "application/json".into()),
    ];
    let with_session = match &frame.modern {
        Some(modern) => {
            headers.push((
                "mcp-protocol-version",
                frames::header_value(&modern.version),
            ));
            headers.push(("mcp-method", frames::header_value(&modern.method)));
            if let Some(name) = &modern.name {
                headers.push(("mcp-name", frames::header_value(name)));
            }
            false
        }
        None if frame.is("initialize") => false,
        None => {
            if let Some(session) = &plan.session {
                headers.push(("mcp-session-id", session.clone()));
            }
            if let Some(version) = &plan.protocol_version {
                headers.push(("mcp-protocol-version", version.clone()));
            }
            plan.session.is_some()
        }
    };
    (headers, with_session)
}

/// Writes an SSE answer's events to stdout; returns the parsed answer for `initialize`, or
/// how the POST ended if the stream broke or ended without an answer.
async fn stream_answer(
    response: &mut http::Response,
    plan: &PostPlan,
    frame: &Frame,
    output: &Output,
) -> Result<Option<Value>, Posted> {
    let wants_answer = frame.is("initialize");
    let mut answer = None;
    let mut parser = sse::Parser::new();
    let mut answered = false;
    while let Some(chunk) = response.chunk().await {
        let chunk = chunk.map_err(|error| Posted::Lost(error.to_string()))?;
        for event in parser.feed(&chunk) {
            if event.data.is_empty() {
                continue;
            }
            if is_answer_to(event.data.as_bytes(), frame.id.as_ref()) {
                answered = true;
                if wants_answer {
                    answer = serde_json::from_str(&event.data).ok();
                }
            }
            if !plan.swallow {
                output.write(event.data.as_bytes());
            }
        }
    }
    if frame.is_request() && !answered {
        return Err(Posted::Lost(
            "the answer stream ended without an answer".into(),
        ));
    }
    Ok(answer)
}

/// Writes a JSON answer to stdout (rewritten for the request's id if the daemon's HTTP
/// error does not name it); returns the parsed answer for `initialize`, or how the POST
/// ended if the body broke or was an accepted cancellation.
async fn json_answer(
    response: http::Response,
    plan: &PostPlan,
    frame: &Frame,
    output: &Output,
) -> Result<Option<Value>, Posted> {
    let status = response.status;
    let body = response
        .bytes()
        .await
        .map_err(|error| Posted::Lost(error.to_string()))?;
    if !body.iter().all(u8::is_ascii_whitespace) {
        let message = answer_for(frame, status, &body);
        if !plan.swallow && (frame.is_request() || (200..300).contains(&status)) {
            output.write(&message);
        }
        return Ok(if frame.is("initialize") {
            serde_json::from_slice(&message).ok()
        } else {
            None
        });
    }
    if frame.is_request() && status == 202 {
        // Accepted without an answer: the host cancelled the request.
        return Err(Posted::Cancelled);
    }
    if frame.is_request() {
        let message = frames::error_response(
            frame.id.as_ref().unwrap_or(&Value::Null),
            codes::INTERNAL_ERROR,
            &format!("the daemon answered HTTP {status} without a body"),
        );
        if !plan.swallow {
            output.write_value(&message);
        }
    }
    Ok(None)
}

/// Whether an SSE `data` is the response to request `id`.
fn is_answer_to(data: &[u8], id: Option<&Value>) -> bool {
    let Some(id) = id else {
        return false;
    };
    #[derive(serde::Deserialize)]
    struct Probe {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(data)
        .is_ok_and(|probe| probe.method.is_none() && probe.id.as_ref() == Some(id))
}

/// The message to write for a JSON answer: as is, unless the daemon's HTTP error does not
/// name the request (`id: null`, plain text), in which case it is rewritten for its id.
fn answer_for(frame: &Frame, status: u16, body: &Bytes) -> Vec<u8> {
    let Some(id) = frame.id.as_ref().filter(|_| frame.is_request()) else {
        return body.to_vec();
    };
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) if object.get("id") == Some(id) => body.to_vec(),
        Ok(Value::Object(mut object)) if object.contains_key("error") => {
            object.insert("id".into(), id.clone());
            Value::Object(object).to_string().into_bytes()
        }
        _ => frames::error_response(
            id,
            codes::INTERNAL_ERROR,
            &format!(
                "the daemon answered HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
        )
        .to_string()
        .into_bytes(),
    }
}

/// Finds or starts the daemon and rebuilds the session: the host's initialize under a shim
/// id (answer swallowed), `initialized`, then each remembered subscription.
pub(super) async fn reestablish(
    ensurer: &Ensurer,
    initialize: Option<Frame>,
    initialized: bool,
    subscriptions: &[Frame],
    replay: u64,
    protocol_version: Option<String>,
    output: &Output,
) -> Result<Recovery, String> {
    let daemon = ensurer.ensure().await.map_err(|e| e.to_string())?;
    let Some(initialize) = initialize else {
        return Ok(Recovery {
            daemon,
            session: None,
            protocol_version: None,
        });
    };
    let mut plan = PostPlan {
        port: daemon.port,
        session: None,
        protocol_version,
        swallow: true,
    };
    let reinit = with_id(
        &initialize,
        Value::from(format!("__shim_reinit_{replay}__")),
    )?;
    let (session, version) = match post(&plan, &reinit, output).await {
        Posted::Answered {
            session: Some(session),
            protocol_version,
            ..
        } => (session, protocol_version),
        Posted::Answered { session: None, .. } => {
            return Err("the daemon answered the replayed initialize without a session".into());
        }
        Posted::Retry(reason) | Posted::Lost(reason) => {
            return Err(format!("replaying initialize failed: {reason}"));
        }
        Posted::Cancelled => return Err("replaying initialize was cancelled".into()),
    };
    plan.session = Some(session.clone());
    if version.is_some() {
        plan.protocol_version = version.clone();
    }
    if initialized {
        let notification = frames::inspect(
            0,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec(),
        )
        .expect("a valid notification");
        match post(&plan, &notification, output).await {
            Posted::Answered { .. } => {}
            Posted::Retry(reason) | Posted::Lost(reason) => {
                return Err(format!("replaying initialized failed: {reason}"));
            }
            Posted::Cancelled => return Err("replaying initialized was cancelled".into()),
        }
    }
    for (index, subscribe) in subscriptions.iter().enumerate() {
        let frame = with_id(
            subscribe,
            Value::from(format!("__shim_resubscribe_{replay}_{index}__")),
        )?;
        if let Posted::Retry(reason) | Posted::Lost(reason) = post(&plan, &frame, output).await {
            return Err(format!("replaying a subscription failed: {reason}"));
        }
    }
    Ok(Recovery {
        daemon,
        session: Some(session),
        protocol_version: version,
    })
}

/// A copy of `frame` with another request id.
fn with_id(frame: &Frame, id: Value) -> Result<Frame, String> {
    let mut value: Value = serde_json::from_slice(&frame.body).map_err(|e| e.to_string())?;
    value["id"] = id;
    frames::inspect(frame.seq, value.to_string().into_bytes()).map_err(|error| error.to_string())
}
