//! The control plane (daemon.md 1.9): how one agentprism daemon asks another, on the same
//! machine and for the same user, to identify itself, step aside for a successor, report its
//! drain, act on a run it owns, or shut down. Each daemon listens on its own Unix socket in a
//! private folder; a connection carries exactly one length-prefixed JSON request and one
//! answer. The kernel vouches for the peer's uid; the shared run-control key vouches for the
//! message: every request and every answer is HMAC-signed over its kind, addressee, sender,
//! timestamp, nonce, operation id and a digest of its exact body bytes, requests older or newer
//! than 30 s are refused, and a nonce is accepted once. Anything doubtful gets the same
//! unsigned `{"ok":false,"code":"UNAUTHENTICATED"}` and never reaches the handler.
//!
//! [`wire`] holds the message formats and signed strings, [`socket`] where the socket lives,
//! [`server`] the listener that verifies and dispatches, [`client`] the caller that signs and
//! checks the answer. What each kind *does* is the daemon's business: it implements
//! [`ControlHandler`].

pub(crate) mod client;
pub(crate) mod server;
pub(crate) mod socket;
pub mod wire;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use client::{ControlClient, ControlClientError};
pub use server::{ControlHandler, ControlServer, Limits};
pub use socket::{SocketError, control_url, socket_path, socket_path_from_url};

/// Version of the message format, the `v` field of requests and answers, and the record's
/// `controlProtocol`.
pub const PROTOCOL_VERSION: u64 = 1;
/// Largest frame either side sends or accepts, in bytes of JSON after the length prefix.
pub(crate) const MAX_FRAME: usize = 1024 * 1024;
/// Deadline for a whole exchange (connect or accept, request, handler, answer), on both sides.
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How far a request's `ts` may be from the receiver's clock, either way.
pub(crate) const CLOCK_WINDOW: Duration = Duration::from_secs(30);
/// How long a seen nonce is remembered: long enough that its `ts` has left the window.
pub(crate) const REPLAY_WINDOW: Duration = Duration::from_secs(60);

/// The message kinds of protocol 1. The server passes the kind through to the handler, which
/// answers `INVALID_OPERATION` for one it does not know.
pub mod kinds {
    /// Who are you: instance id, pid, version, state.
    pub const IDENTIFY: &str = "identify";
    /// A successor tells its predecessor to become a lame duck; the answer lists owned runs.
    pub(crate) const ANNOUNCE_SUCCESSOR: &str = "announce-successor";
    /// What is left before a lame duck can exit.
    pub(crate) const DRAIN_STATUS: &str = "drain-status";
    /// stop, cancel-agent, pause, permissions and setup replies for a run the peer owns.
    pub const RUN_CONTROL: &str = "run-control";
    /// Exit, bound to this instance id (a signal could hit a reused pid).
    pub const SHUTDOWN: &str = "shutdown";
    /// Delete a stored run (`agentprism runs rm`) so the daemon's MCP sessions hear of it.
    pub(crate) const DELETE_RUN: &str = "delete-run";
}

/// Who sent a message: the `from` of requests and answers. Only `instanceId` is signed; pid
/// and version are the sender's claim, for logs and for the handler to cross-check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub instance_id: String,
    pub pid: u32,
    pub version: String,
}

/// The verified caller of a request, as the handler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The request's `from`; its `instance_id` is covered by the mac.
    pub identity: Identity,
    /// The connecting process as the kernel reports it, when the platform says.
    pub pid: Option<u32>,
}

/// Wire codes of refused and failed requests.
pub(crate) mod codes {
    /// The request was not verified (or the peer is another user); nothing was done.
    pub(crate) const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    pub(crate) const UNKNOWN_RUN: &str = "UNKNOWN_RUN";
    pub(crate) const NOT_OWNER: &str = "NOT_OWNER";
    pub(crate) const INVALID_OPERATION: &str = "INVALID_OPERATION";
    pub(crate) const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
}

/// Why a verified request was not carried out: the handler's error, sent back as
/// `{ok:false, code, message}` in a signed answer, and what [`ControlClient::call`] returns
/// inside [`ControlClientError::Rejected`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// No run with that id in any store this daemon knows.
    #[error("unknown run: {0}")]
    UnknownRun(String),
    /// The run exists but another process holds its lease.
    #[error("not the owner: {0}")]
    NotOwner(String),
    /// Unknown kind or action, missing field, or an action the run's state does not allow.
    #[error("invalid operation: {0}")]
    InvalidOperation(String),
    /// Something broke while carrying it out.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ControlError {
    /// The wire code.
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::UnknownRun(_) => codes::UNKNOWN_RUN,
            ControlError::NotOwner(_) => codes::NOT_OWNER,
            ControlError::InvalidOperation(_) => codes::INVALID_OPERATION,
            ControlError::Internal(_) => codes::INTERNAL_ERROR,
        }
    }

    /// The human-readable part.
    pub fn message(&self) -> &str {
        match self {
            ControlError::UnknownRun(message)
            | ControlError::NotOwner(message)
            | ControlError::InvalidOperation(message)
            | ControlError::Internal(message) => message,
        }
    }

    /// The error an answer's `code` and `message` describe. A code this build does not know
    /// (a newer peer) becomes [`ControlError::Internal`] naming it, so nothing is lost.
    pub(crate) fn from_wire(code: &str, message: &str) -> ControlError {
        let message = message.to_owned();
        match code {
            codes::UNKNOWN_RUN => ControlError::UnknownRun(message),
            codes::NOT_OWNER => ControlError::NotOwner(message),
            codes::INVALID_OPERATION => ControlError::InvalidOperation(message),
            codes::INTERNAL_ERROR => ControlError::Internal(message),
            other => ControlError::Internal(format!("{other}: {message}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_trip() {
        for error in [
            ControlError::UnknownRun("r1".into()),
            ControlError::NotOwner("pid 7".into()),
            ControlError::InvalidOperation("no such action".into()),
            ControlError::Internal("disk full".into()),
        ] {
            assert_eq!(
                ControlError::from_wire(error.code(), error.message()),
                error
            );
        }
        assert_eq!(
            ControlError::from_wire("NEW_CODE", "later"),
            ControlError::Internal("NEW_CODE: later".into())
        );
    }

    #[test]
    fn limits_match_the_spec() {
        assert_eq!(MAX_FRAME, 1 << 20);
        assert_eq!(EXCHANGE_TIMEOUT, Duration::from_secs(5));
        assert_eq!(CLOCK_WINDOW, Duration::from_secs(30));
        assert!(REPLAY_WINDOW >= 2 * CLOCK_WINDOW);
    }
}
