//! The minimal HTTP/1.1 server under the loopback fakes of model APIs (`fake_llm`,
//! `fake_host_model`): request line, headers, `Content-Length` bodies, keep-alive. It only has
//! to serve the HTTP clients of the adapters and hosts the tests drive, and it keeps an HTTP
//! stack out of the dev-dependencies. A fake supplies a [`Handler`]; [`accept_loop`] serves
//! every connection with it until the task is dropped. Streamed answers (SSE) are written as
//! one `Content-Length` body, which every client tried reads event by event all the same.

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Longest request head (request line and headers) a fake accepts.
const HEAD_LIMIT: usize = 64 * 1024;
/// Longest request body a fake accepts; Claude Code sends ~100 KB of system prompt and tools.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// How long a fake's 429 says the limit lasts (`retry-after`, and the body of `fake_llm`'s).
pub const RATE_LIMIT_RESET_SECONDS: u64 = 3600;

/// One request as a fake received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target without its query string (`/v1/messages`, not `?beta=true`).
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status the fake answered with.
    pub status: u16,
}

/// A response before it is written.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// The `retry-after` of an error answer, in seconds; `None`: [`RATE_LIMIT_RESET_SECONDS`]
    /// for a 429, else 0.
    pub retry_after: Option<u64>,
    /// The headers of an error answer as a provider sends them, instead of the fake's
    /// `x-should-retry: false` and `retry-after`.
    pub headers: Option<Vec<(&'static str, String)>>,
}

/// What a fake does with the requests it receives.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request; the connection waits for it (a fake may take its time on purpose).
    fn respond(&self, request: &RecordedRequest) -> impl Future<Output = Response> + Send;
    /// Keeps a request, with the status it was answered with filled in.
    fn record(&self, request: RecordedRequest);
    /// The answer to a request the server could not parse.
    fn bad_request(&self, problem: &str) -> Response;
    /// Names the fake in its diagnostics on stderr.
    fn name(&self) -> &'static str;
}

impl RecordedRequest {
    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The first header with this name (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A poisoned lock only means another test thread panicked; the records are still good.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Accepts connections and serves each with `handler`, until the task is dropped.
pub async fn accept_loop<H: Handler>(listener: TcpListener, handler: Arc<H>) {
    // Connection tasks live in this set, so aborting the accept task drops them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, handler.clone()));
                }
                Err(error) => eprintln!("{}: accept failed: {error}", handler.name()),
            },
            // Reap finished connections so the set does not grow for the whole test.
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Serves requests on one connection until the client closes it or asks to.
async fn serve_connection<H: Handler>(mut stream: TcpStream, handler: Arc<H>) {
    let mut buffer = Vec::new();
    loop {
        let request = match read_request(&mut stream, &mut buffer).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(problem) => {
                eprintln!("{}: bad request: {problem}", handler.name());
                let response = handler.bad_request(&problem);
                let _ = write_response(&mut stream, response, true).await;
                return;
            }
        };
        let close = request
            .header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"));
        let response = handler.respond(&request).await;
        handler.record(RecordedRequest {
            status: response.status,
            ..request
        });
        if write_response(&mut stream, response, close).await.is_err() || close {
            return;
        }
    }
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests.
/// Bytes past the request stay in `buffer` for the next one (pipelining costs nothing here).
async fn read_request(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<Option<RecordedRequest>, String> {
    let head_end = loop {
        if let Some(position) = find(buffer, b"\r\n\r\n") {
            break position;
        }
        if buffer.len() > HEAD_LIMIT {
            return Err(format!("request head longer than {HEAD_LIMIT} bytes"));
        }
        if !read_more(stream, buffer).await? {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err("connection closed inside a request head".to_owned())
            };
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(format!("malformed request line {request_line:?}"));
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err("chunked request bodies are not supported by the fake".to_owned());
    }
    let length = match header("content-length") {
        None => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| format!("bad content-length {text:?}"))?,
    };
    if length > BODY_LIMIT {
        return Err(format!("request body of {length} bytes is over the limit"));
    }
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        if !read_more(stream, buffer).await? {
            return Err("connection closed inside a request body".to_owned());
        }
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    let path = target.split('?').next().unwrap_or(target).to_owned();
    Ok(Some(RecordedRequest {
        method: method.to_owned(),
        path,
        headers,
        body,
        // Filled in once the request has been answered.
        status: 0,
    }))
}

/// Appends what the socket has; `false` at end of stream.
async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<bool, String> {
    let mut chunk = [0_u8; 16 * 1024];
    let count = stream
        .read(&mut chunk)
        .await
        .map_err(|error| format!("read failed: {error}"))?;
    buffer.extend_from_slice(&chunk[..count]);
    Ok(count > 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

async fn write_response(
    stream: &mut TcpStream,
    response: Response,
    close: bool,
) -> std::io::Result<()> {
    let reason = match response.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        529 => "Overloaded",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\nrequest-id: req_fake\r\n",
        response.status,
        response.content_type,
        response.body.len()
    );
    if let Some(headers) = &response.headers {
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    } else if response.status != 200 {
        // Claude Code retries a 429 ten times with back-off unless told not to; the test of the
        // failure path wants the failure, not a minute of retries. `retry-after: 0` covers a
        // client that ignores `x-should-retry`.
        // A 429 says when the limit resets, as providers do (adapters read it for `resetHint`).
        let retry_after = response.retry_after.unwrap_or(if response.status == 429 {
            RATE_LIMIT_RESET_SECONDS
        } else {
            0
        });
        head.push_str(&format!(
            "x-should-retry: false\r\nretry-after: {retry_after}\r\n"
        ));
    }
    head.push_str(if close {
        "connection: close\r\n\r\n"
    } else {
        "connection: keep-alive\r\n\r\n"
    });
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&response.body).await?;
    stream.flush().await
}

pub fn json_response(status: u16, body: &Value) -> Response {
    Response {
        status,
        content_type: "application/json",
        body: body.to_string().into_bytes(),
        retry_after: None,
        headers: None,
    }
}
