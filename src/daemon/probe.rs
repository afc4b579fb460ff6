//! Asking a daemon who it is: `GET /healthz?challenge=<nonce>` on the port its record names,
//! over a plain loopback connection with a deadline, checked with
//! [`verify_identity`](crate::discovery::healthz::verify_identity). Shims, `daemon start` and
//! `daemon status` all probe through here, so "unresponsive" means the same everywhere.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::discovery::healthz::{Challenge, IdentityMismatch, verify_identity};
use crate::discovery::{DaemonRecord, RunControlKey};

/// Largest `/healthz` answer read; a real one is well under 2 KiB.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What a probe found on the recorded port.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Probe {
    /// The listener proved it is the recorded daemon; this is its `/healthz` body.
    Identified(Value),
    /// Something answered, but not as the recorded daemon (a squatter, or another instance).
    Mismatch(String),
    /// Connected, but no complete answer within the deadline: a stopped or starved daemon.
    Unresponsive,
    /// Nothing accepted the connection.
    Refused(String),
}

impl Probe {
    /// Whether a shim may send new work there: identified, current and not a lame duck.
    pub(crate) fn qualifies(&self) -> bool {
        match self {
            Probe::Identified(body) => body_qualifies(body),
            _ => false,
        }
    }
}

/// Whether a `/healthz` body describes a daemon taking new sessions.
pub(crate) fn body_qualifies(body: &Value) -> bool {
    body.get("state").and_then(Value::as_str) == Some("current")
        && body.get("lameDuck").and_then(Value::as_bool) != Some(true)
}

/// Probes the daemon `record` describes. Without a key (a corrupt key file fails closed for
/// control), identity rests on name, pid, instanceId and envFingerprint alone.
pub(crate) async fn probe(
    record: &DaemonRecord,
    key: Option<&RunControlKey>,
    deadline: Duration,
) -> Probe {
    let challenge = Challenge::new(record.port);
    let path = format!("/healthz?challenge={}", challenge.nonce);
    let (status, body) = match get(record.port, &path, deadline).await {
        Ok(answer) => answer,
        Err(GetError::Timeout) => return Probe::Unresponsive,
        Err(GetError::Connect(error)) => return Probe::Refused(error.to_string()),
        Err(GetError::Malformed(reason)) => return Probe::Mismatch(reason),
    };
    if status != 200 {
        return Probe::Mismatch(format!("/healthz answered HTTP {status}"));
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(error) => return Probe::Mismatch(format!("/healthz body is not JSON: {error}")),
    };
    let checked = match key {
        Some(key) => verify_identity(record, &body, key, &challenge.nonce),
        None => {
            // Any key fails the proof; only the field checks decide.
            let unknown = RunControlKey::from_bytes([0; 32]);
            match verify_identity(record, &body, &unknown, &challenge.nonce) {
                Err(IdentityMismatch::Proof) => Ok(()),
                other => other,
            }
        }
    };
    match checked {
        Ok(()) => Probe::Identified(body),
        Err(mismatch) => Probe::Mismatch(mismatch.to_string()),
    }
}

/// Why [`get`] got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("no answer within the deadline")]
    Timeout,
    #[error("{0}")]
    Malformed(String),
}

/// `GET <path>` on `127.0.0.1:<port>` with `Connection: close`; returns status and body.
/// The whole exchange, connect included, is bounded by `deadline`.
pub(crate) async fn get(
    port: u16,
    path: &str,
    deadline: Duration,
) -> Result<(u16, Vec<u8>), GetError> {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(GetError::Connect)?;
        let authorization = crate::discovery::token::sent()
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n{authorization}Connection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| GetError::Malformed(format!("write: {e}")))?;
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream
                .read(&mut chunk)
                .await
                .map_err(|e| GetError::Malformed(format!("read: {e}")))?;
            if read == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..read]);
            if answer.len() > MAX_ANSWER_BYTES {
                return Err(GetError::Malformed("answer too large".into()));
            }
            if let Some(done) = complete_response(&answer) {
                return done;
            }
        }
        complete_response(&answer)
            .unwrap_or_else(|| Err(GetError::Malformed("connection closed mid-answer".into())))
    };
    match tokio::time::timeout(deadline, exchange).await {
        Ok(result) => result,
        Err(_) => Err(GetError::Timeout),
    }
}

/// Parses a buffered HTTP/1.1 response once it is complete (`Content-Length` bodies, which is
/// what the daemon sends for plain answers); `None` while more bytes are needed.
fn complete_response(bytes: &[u8]) -> Option<Result<(u16, Vec<u8>), GetError>> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..head_end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok());
    let Some(status) = status else {
        return Some(Err(GetError::Malformed("not an HTTP response".into())));
    };
    let length = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    });
    let body = &bytes[head_end + 4..];
    match length {
        Some(length) if body.len() >= length => Some(Ok((status, body[..length].to_vec()))),
        Some(_) => None,
        // Without a length the body ends with the connection; the caller's EOF path decides.
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_complete_by_content_length() {
        assert!(complete_response(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab").is_none());
        let Some(Ok((status, body))) =
            complete_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nab")
        else {
            panic!()
        };
        assert_eq!((status, body.as_slice()), (200, &b"ab"[..]));
        assert!(matches!(
            complete_response(b"garbage\r\n\r\n"),
            Some(Err(GetError::Malformed(_)))
        ));
    }

    #[tokio::test]
    async fn a_silent_listener_is_unresponsive_and_a_closed_port_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut record = crate::discovery::record::sample(1, "i", "0.1.0");
        record.port = port;
        // The kernel completes the handshake; nobody ever answers.
        assert_eq!(
            probe(&record, None, Duration::from_millis(200)).await,
            Probe::Unresponsive
        );
        drop(listener);
        assert!(matches!(
            probe(&record, None, Duration::from_secs(2)).await,
            Probe::Refused(_)
        ));
    }
}
