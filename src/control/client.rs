//! The calling side of the control plane: sign a request with a fresh nonce and timestamp,
//! send it over a new connection, and trust the answer only if it is signed with the key,
//! names our nonce in `re` and comes from the instance we addressed. The caller keeps `op`
//! across retries so the owner can recognise a repeat; every send gets its own nonce, so a
//! retry is never mistaken for a replay.
//!
//! Errors say what the caller can conclude: [`ControlClientError::is_unreachable`] (nobody
//! answered, so the request may or may not have been carried out), `Refused` (the peer did not
//! verify us: another key, clock skew, wrong instance; nothing was done), `Rejected` (the peer
//! verified us and said no, with a [`ControlError`]) and `BadResponse` (an answer we cannot
//! trust; treat like no answer).

use std::path::{Path, PathBuf};
use std::time::Duration;

use interprocess::local_socket::tokio::Stream;
use interprocess::local_socket::traits::tokio::Stream as _;
use interprocess::local_socket::{GenericFilePath, ToFsName};
use serde_json::Value;

use super::wire::{FrameError, Request, Response, new_nonce, read_frame, write_frame};
use super::{ControlError, EXCHANGE_TIMEOUT, Identity, MAX_FRAME, PROTOCOL_VERSION, codes};
use crate::discovery::RunControlKey;

/// Signs and sends control requests as one daemon (or shim) instance.
#[derive(Clone, Debug)]
pub struct ControlClient {
    key: RunControlKey,
    from: Identity,
    timeout: Duration,
}

/// Why a call did not produce a trusted `{"ok": true}` answer.
#[derive(Debug, thiserror::Error)]
pub enum ControlClientError {
    /// Nothing listens at the path (no socket, connection refused, permission denied).
    #[error("control socket {} is unreachable: {source}", path.display())]
    Unreachable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Connected, but no complete answer came within the deadline.
    #[error("no answer from control socket {} within {timeout:?}", path.display())]
    TimedOut { path: PathBuf, timeout: Duration },
    /// The connection broke after the request may have been delivered.
    #[error("control connection to {} broke: {source}", path.display())]
    Broken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The peer answered UNAUTHENTICATED: it holds another key, our clocks differ by more than
    /// 30 s, it is not the instance we addressed, or we are another user.
    #[error(
        "control socket {} refused the request (UNAUTHENTICATED): different run-control key, \
         clock skew over 30 s, or another instance listens there",
        path.display()
    )]
    Refused { path: PathBuf },
    /// The peer verified the request and declined it.
    #[error(transparent)]
    Rejected(#[from] ControlError),
    /// An answer we cannot trust: bad mac, wrong `re` or sender, malformed.
    #[error("untrustworthy answer from control socket {}: {reason}", path.display())]
    BadResponse { path: PathBuf, reason: String },
    /// The request does not fit in a frame.
    #[error("control request of {size} bytes exceeds the {MAX_FRAME}-byte frame limit")]
    TooLarge { size: usize },
    /// The OS gave no randomness for the nonce.
    #[error("cannot make a nonce: {0}")]
    Nonce(#[source] std::io::Error),
}

impl ControlClientError {
    /// Nobody answered in time (or the connection broke): the request may or may not have
    /// been carried out, so a retry must reuse the same `op`.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ControlClientError::Unreachable { .. }
                | ControlClientError::TimedOut { .. }
                | ControlClientError::Broken { .. }
        )
    }
}

impl ControlClient {
    /// A client signing with `key` as `from`.
    pub fn new(key: RunControlKey, from: Identity) -> ControlClient {
        ControlClient {
            key,
            from,
            timeout: EXCHANGE_TIMEOUT,
        }
    }

    /// Replaces the whole-exchange deadline (default [`EXCHANGE_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> ControlClient {
        self.timeout = timeout;
        self
    }

    /// Who this client signs as.
    pub fn identity(&self) -> &Identity {
        &self.from
    }

    /// Sends `kind` with `body` to instance `to_instance` listening at `socket_path` and
    /// returns the answer's fields without `ok`. `op` identifies the logical operation: pass
    /// the same one when retrying.
    pub async fn call(
        &self,
        socket_path: &Path,
        to_instance: &str,
        kind: &str,
        op: &str,
        body: &Value,
    ) -> Result<Value, ControlClientError> {
        let nonce = new_nonce().map_err(ControlClientError::Nonce)?;
        let request = Request::sign(
            &self.key,
            kind,
            to_instance,
            &self.from,
            crate::util::now_ms(),
            &nonce,
            op,
            body.to_string(),
        );
        let frame = serde_json::to_vec(&request).expect("a request serialises");
        if frame.len() > MAX_FRAME {
            return Err(ControlClientError::TooLarge { size: frame.len() });
        }
        let answer = self.exchange(socket_path, &frame).await?;
        self.check_answer(socket_path, to_instance, &nonce, &answer)
    }

    /// Connects, sends one frame and reads one back, all within the deadline.
    async fn exchange(&self, path: &Path, frame: &[u8]) -> Result<Vec<u8>, ControlClientError> {
        let unreachable = |source| ControlClientError::Unreachable {
            path: path.to_path_buf(),
            source,
        };
        let broken = |source| ControlClientError::Broken {
            path: path.to_path_buf(),
            source,
        };
        let name = path.to_fs_name::<GenericFilePath>().map_err(unreachable)?;
        let exchange = async {
            let mut stream = Stream::connect(name).await.map_err(unreachable)?;
            write_frame(&mut stream, frame).await.map_err(broken)?;
            match read_frame(&mut stream).await {
                Ok(answer) => Ok(answer),
                Err(FrameError::Io(source)) => Err(broken(source)),
                Err(error @ FrameError::TooLarge(_)) => Err(ControlClientError::BadResponse {
                    path: path.to_path_buf(),
                    reason: error.to_string(),
                }),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(ControlClientError::TimedOut {
                path: path.to_path_buf(),
                timeout: self.timeout,
            }))
    }

    /// Accepts a signed answer to our nonce from the addressed instance, or the unsigned
    /// refusal; anything else is a [`ControlClientError::BadResponse`].
    pub(crate) fn check_answer(
        &self,
        path: &Path,
        to_instance: &str,
        nonce: &str,
        answer: &[u8],
    ) -> Result<Value, ControlClientError> {
        let bad = |reason: &str| ControlClientError::BadResponse {
            path: path.to_path_buf(),
            reason: reason.to_owned(),
        };
        let value: Value =
            serde_json::from_slice(answer).map_err(|_| bad("the answer is not JSON"))?;
        if value.get("mac").is_none() {
            return if value.get("ok") == Some(&Value::Bool(false))
                && value.get("code").and_then(Value::as_str) == Some(codes::UNAUTHENTICATED)
            {
                Err(ControlClientError::Refused {
                    path: path.to_path_buf(),
                })
            } else {
                Err(bad("unsigned answer"))
            };
        }
        let response: Response =
            serde_json::from_value(value).map_err(|_| bad("not an answer object"))?;
        if response.v != PROTOCOL_VERSION {
            return Err(bad("unsupported protocol version"));
        }
        if !response.mac_is_valid(&self.key) {
            return Err(bad("bad mac"));
        }
        if response.re != nonce {
            return Err(bad("answers another request"));
        }
        if response.from.instance_id != to_instance {
            return Err(bad("answered by another instance"));
        }
        let body: Value =
            serde_json::from_str(&response.body).map_err(|_| bad("the body is not JSON"))?;
        let Value::Object(mut fields) = body else {
            return Err(bad("the body is not an object"));
        };
        match fields.remove("ok") {
            Some(Value::Bool(true)) => Ok(Value::Object(fields)),
            Some(Value::Bool(false)) => {
                let text = |name: &str| {
                    fields
                        .get(name)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let code = text("code");
                if code == codes::UNAUTHENTICATED {
                    return Err(ControlClientError::Refused {
                        path: path.to_path_buf(),
                    });
                }
                Err(ControlError::from_wire(&code, &text("message")).into())
            }
            _ => Err(bad("the body has no boolean \"ok\"")),
        }
    }
}
