//! The shim's HTTP/1.1 client to the daemon on loopback, on hyper's connection-level client
//! (`hyper::client::conn::http1`): one fresh TCP connection per exchange, no pool, no
//! retries. The daemon is on 127.0.0.1, where a connect costs tens of microseconds, and a
//! fresh connection keeps failures unambiguous: a refused connect means the frame never
//! reached a daemon (safe to replay), while any later failure means it may have (never
//! replayed). hyper already does the server side, so its client adds little code and gives
//! Content-Length, chunked bodies and streamed SSE for free.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The daemon's MCP endpoint: the HTTP transport's default path, which the daemon keeps.
pub(crate) const MCP_PATH: &str = "/mcp";

/// Why an exchange failed, split by whether the daemon may have seen the request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The connection was never established: the request did not reach any daemon.
    #[error("connecting to 127.0.0.1:{port} failed: {source}")]
    Connect {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    /// The connection broke after it was established: the daemon may have the request.
    #[error("the exchange with 127.0.0.1:{port} failed: {reason}")]
    Exchange { port: u16, reason: String },
}

impl SendError {
    /// Whether the request certainly did not reach a daemon.
    pub(crate) fn never_delivered(&self) -> bool {
        matches!(self, SendError::Connect { .. })
    }
}

/// A response whose body is read on demand; dropping it closes the connection.
pub(crate) struct Response {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    body: Incoming,
    /// Drives the connection while the body is read; aborted on drop.
    connection: JoinHandle<()>,
    port: u16,
}

impl Drop for Response {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Response {
    /// A header value as text, trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    }

    /// Whether the body is an SSE stream.
    pub(crate) fn is_event_stream(&self) -> bool {
        self.header("content-type")
            .is_some_and(|value| value.starts_with("text/event-stream"))
    }

    /// The next chunk of the body; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Option<Result<Bytes, SendError>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    Err(_trailers) => continue,
                },
                Err(error) => {
                    return Some(Err(SendError::Exchange {
                        port: self.port,
                        reason: error.to_string(),
                    }));
                }
            }
        }
    }

    /// The whole body.
    pub(crate) async fn bytes(mut self) -> Result<Bytes, SendError> {
        let mut collected = Vec::new();
        while let Some(chunk) = self.chunk().await {
            collected.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(collected))
    }
}

/// One request to `http://127.0.0.1:<port><path>`. `headers` are sent as given, after `Host`.
pub(crate) async fn send(
    port: u16,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Bytes>,
) -> Result<Response, SendError> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|source| SendError::Connect { port, source })?;
    let _ = stream.set_nodelay(true);
    let exchange = |reason: String| SendError::Exchange { port, reason };
    let host = format!("127.0.0.1:{port}");
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, host);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if let Some(token) = crate::discovery::token::sent() {
        builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = match body {
        Some(body) => builder
            .header(hyper::header::CONTENT_LENGTH, body.len())
            .body(Full::new(body)),
        None => builder.body(Full::new(Bytes::new())),
    }
    .map_err(|e| exchange(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| exchange(e.to_string()))?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = (sender.send_request(request).await, connection);
    match response {
        (Ok(response), connection) => {
            let (parts, body) = response.into_parts();
            Ok(Response {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
                connection,
                port,
            })
        }
        (Err(error), connection) => {
            connection.abort();
            Err(exchange(error.to_string()))
        }
    }
}
