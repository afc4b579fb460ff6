//! Reopening an agent's own session when a call runs again, instead of starting it cold: the
//! engine's policy for it, and the runner capability it needs.
//!
//! What exists today: a call re-run after an auth or usage pause passes the recorded session
//! id in `SessionSpec::resume_session` (chosen by the driver's `continuation_session`), and
//! the ACP runner reattaches with `session/resume` or `session/load` when the agent offers
//! one, else opens a fresh session. When the runner kept the requested id ([`reopened`]), the
//! call's first turn is [`CONTINUATION_PROMPT`] instead of its prompt, and its `session` JSON
//! says `"reopened"`. What this room will hold as that grows:
//! - which re-run reopens which session: after a usage or auth pause, a stop of the call, a
//!   crash or a restart, from the session id journaled when the call's session opened (the
//!   store's call records keep it; the observer reports it at `session/new`);
//! - [`ReopenPath`], which the call's record and events carry: reopened, or fresh and why.
//!
//! The runner's half is [`SessionReopening`]: whether a backend can reopen at all, so the
//! engine chooses the prompt before it opens the session. `keepSession` (leaving a session
//! open at the end of a call so it can be reopened later) is the runner's too, a variant of
//! closing a session, and lands with it.
//!
//! Invariants: a reopened session works in the same `cwd` as the call's first session (its
//! worktree, for an isolated call); a failed reopen falls back to a fresh session with the
//! original prompt and says so in the record; a replayed call reopens nothing.
//!
//! This room imports the runner's types and nothing from the driver, preparation, the manager
//! or status: the driver asks it, never the other way round.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::engine::runner::BackendSpec;

/// The prompt a reopened session gets instead of the call's original prompt: the agent
/// already holds the task in its history, so it is told only to carry on.
pub const CONTINUATION_PROMPT: &str = "You were interrupted. Continue the task you were given; \
when done, give your final answer as asked.";

/// Whether the session the runner opened is the recorded one the call asked to reopen: the
/// runner falls back to a fresh session (a new id) when the agent cannot or will not reopen.
pub fn reopened(requested: Option<&str>, opened: Option<&Value>) -> bool {
    let opened_id = opened
        .and_then(|session| session.get("sessionId"))
        .and_then(Value::as_str);
    requested.is_some() && requested == opened_id
}

/// The first turn of a reopened session: the call's `continuePrompt`, else
/// [`CONTINUATION_PROMPT`], alone as one text block (images and the role prompt are already in
/// the session's history).
pub fn continuation_turn(custom: Option<&str>) -> Vec<Value> {
    let text = custom.unwrap_or(CONTINUATION_PROMPT);
    vec![json!({"type": "text", "text": text})]
}

/// How an agent reopens a recorded session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReopenMethod {
    /// `session/load` (`agentCapabilities.loadSession`): the agent replays the session.
    Load,
    /// The session-resume capability (`session/resume`): the agent continues it silently.
    Resume,
}

/// Why a re-run call opened a fresh session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreshReason {
    /// No session was recorded for the call.
    NothingRecorded,
    /// The backend offers no way to reopen a session.
    Unsupported,
    /// The agent refused or failed the reopen; the message is its own.
    Failed(String),
}

/// Which path a call's session took, as its record and events say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReopenPath {
    Reopened {
        session_id: String,
        method: ReopenMethod,
    },
    Fresh(FreshReason),
}

/// The runner capability reopening needs, beside `AgentRunner::open_session`.
#[async_trait]
pub trait SessionReopening: Send + Sync {
    /// How `backend` can reopen a recorded session, as its `initialize` advertised; `None`
    /// when it cannot, and the call then starts cold with its original prompt.
    async fn reopen_method(&self, backend: &BackendSpec) -> Option<ReopenMethod>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_reopened_only_when_the_runner_kept_the_requested_id() {
        let kept = json!({"backendId": "mock", "sessionId": "s-1"});
        let fresh = json!({"backendId": "mock", "sessionId": "s-2"});
        assert!(reopened(Some("s-1"), Some(&kept)));
        assert!(!reopened(Some("s-1"), Some(&fresh)));
        assert!(!reopened(None, Some(&kept)));
        assert!(!reopened(Some("s-1"), None));
    }

    #[test]
    fn the_continuation_turn_is_the_documented_text() {
        let turn = continuation_turn(None);
        assert_eq!(turn.len(), 1);
        assert_eq!(turn[0]["text"], CONTINUATION_PROMPT);
        assert_eq!(continuation_turn(Some("go on"))[0]["text"], "go on");
    }
}
