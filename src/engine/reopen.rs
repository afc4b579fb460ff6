//! Reopening an agent's own session when a call runs again, instead of starting it cold: which
//! recorded session a re-run call continues, the prompt it continues with, and the path its
//! record and events say it took.
//!
//! A live call's session is journaled once it opens (at the driver's next tick while the call is
//! live, or with the row of a call cut off before it, `Calls::commit_group`; only sessions the
//! agent can reopen, `AgentSession::reopen_method`, and none whose call settled on its own first).
//! When a later generation runs the same call live (same path, identity hash and inputs hash) after
//! a usage or auth pause, a stop, a crash or a restart, [`continuation`] picks the session to
//! reopen: the newest journaled one whose call did not settle on its own (no row, an aborted row, a
//! pause row or a cancelled one), or the session a pause row recorded. The driver's
//! `continuation_session` passes its id as `SessionSpec::resume_session`, and the ACP runner
//! reattaches with `session/resume` or `session/load` in the same `cwd`, else opens a fresh
//! session. When the runner kept the requested id ([`reopened`]), the call's first turn is its
//! `continuePrompt` or [`CONTINUATION_PROMPT`] instead of its prompt; otherwise the original
//! prompt. [`ReopenPath`] is what the call's `session` JSON and its `agentEnd` event say: reopened
//! and how, or fresh and why.
//!
//! Invariants: a reopened session works in the same `cwd` as the call's first session (the
//! inputs hash that matches it includes the `cwd`); an isolated call is never reopened (its
//! worktree is gone); a failed reopen falls back to a fresh session with the original prompt
//! and says so in the record; a replayed call reopens nothing.
//!
//! This room imports the runner's and the model's types and nothing from the driver,
//! preparation, the manager or status: the driver asks it, never the other way round.

use serde_json::{Map, Value, json};

use crate::model::{CallRecord, OpenSession};

pub use crate::engine::runner::ReopenMethod;

/// The prompt a reopened session gets instead of the call's original prompt: the agent
/// already holds the task in its history, so it is told only to carry on.
pub const CONTINUATION_PROMPT: &str = "You were interrupted. Continue the task you were given; \
when done, give your final answer as asked.";

/// Error codes of a settled row whose call did not end on its own: its session is worth
/// reopening when the call runs again.
const INTERRUPTED_CODES: &[&str] = &[
    "AUTH_REQUIRED",
    "PROVIDER_USAGE_LIMIT",
    "AGENT_CANCELLED",
    "WORKFLOW_ABORTED",
];

/// A call's identity, as replay matches rows.
#[derive(Clone, Copy, Debug)]
pub struct CallIdentity<'a> {
    pub path: Option<&'a str>,
    pub hash: &'a str,
    pub inputs_hash: &'a str,
}

/// A recorded session a re-run call continues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continuation {
    pub session_id: String,
    /// The journal entry it came from (generation, index), which no other call takes.
    pub entry: Option<(u32, u32)>,
}

/// The session a live call with `identity` continues: the newest journaled session of an
/// earlier generation whose call did not settle on its own (no row in `rows`, or an
/// interrupted one), else the session a settled pause row recorded. `rows` are the standing
/// rows with the call's identity hash; `taken` lists journal entries another call of this
/// generation already continues.
pub fn continuation(
    journaled: &[OpenSession],
    rows: &[&CallRecord],
    identity: CallIdentity<'_>,
    taken: &[(u32, u32)],
) -> Option<Continuation> {
    let from_journal = journaled
        .iter()
        .filter(|entry| {
            entry.hash == identity.hash
                && entry.path.as_deref() == identity.path
                && entry.inputs_hash.as_deref() == Some(identity.inputs_hash)
                && !taken.contains(&(entry.generation, entry.index))
        })
        .filter(|entry| {
            rows.iter()
                .find(|row| row.generation == entry.generation && row.index == entry.index)
                .is_none_or(|row| interrupted(row))
        })
        .filter_map(|entry| {
            let id = session_id(&entry.session)?;
            Some((entry.generation, Some((entry.generation, entry.index)), id))
        });
    let from_rows = rows
        .iter()
        .filter(|row| {
            row.hash == identity.hash
                && row.path.as_deref() == identity.path
                && row.inputs_hash.as_deref() == Some(identity.inputs_hash)
                && matches!(
                    row.error.as_ref().map(|e| e.code.as_str()),
                    Some("AUTH_REQUIRED" | "PROVIDER_USAGE_LIMIT")
                )
        })
        .filter_map(|row| Some((row.generation, None, session_id(row.session.as_ref()?)?)));
    from_journal
        .chain(from_rows)
        .max_by_key(|(generation, entry, _)| (*generation, entry.is_some()))
        .map(|(_, entry, session_id)| Continuation { session_id, entry })
}

/// Whether a settled row's call did not end on its own.
pub(crate) fn interrupted(row: &CallRecord) -> bool {
    row.aborted
        || row
            .error
            .as_ref()
            .is_some_and(|error| INTERRUPTED_CODES.contains(&error.code.as_str()))
}

fn session_id(session: &Value) -> Option<String> {
    session.get("sessionId")?.as_str().map(str::to_owned)
}

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

/// Why a re-run call opened a fresh session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreshReason {
    /// The call runs isolated: its earlier session worked in a worktree that is gone.
    Isolated,
    /// The backend offers no way to reopen a session.
    Unsupported,
    /// The agent refused or failed the reopen; the message is its own, when it gave one.
    Failed(Option<String>),
}

/// Which path a re-run call's session took, as its record and events say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReopenPath {
    Reopened { method: Option<ReopenMethod> },
    Fresh(FreshReason),
}

impl ReopenPath {
    /// The path of a session opened for a call that asked to reopen `requested`: `opened` is
    /// the session's reference, `method` how its agent reopens sessions and `failure` the
    /// agent's message when it failed the reopen.
    pub fn of(
        requested: &str,
        opened: Option<&Value>,
        method: Option<ReopenMethod>,
        failure: Option<String>,
    ) -> ReopenPath {
        if reopened(Some(requested), opened) {
            ReopenPath::Reopened { method }
        } else if method.is_none() && failure.is_none() {
            ReopenPath::Fresh(FreshReason::Unsupported)
        } else {
            ReopenPath::Fresh(FreshReason::Failed(failure))
        }
    }

    pub fn is_reopened(&self) -> bool {
        matches!(self, ReopenPath::Reopened { .. })
    }

    /// The fields records and events carry: `reopened`, with `reopenedBy` (`load`,
    /// `resume`) or `fresh` (`isolated`, `unsupported`, `failed`) and `reopenError`.
    pub fn fields(&self) -> Map<String, Value> {
        let mut fields = Map::new();
        fields.insert("reopened".into(), self.is_reopened().into());
        match self {
            ReopenPath::Reopened { method } => {
                if let Some(method) = method {
                    fields.insert("reopenedBy".into(), method.name().into());
                }
            }
            ReopenPath::Fresh(reason) => {
                let name = match reason {
                    FreshReason::Isolated => "isolated",
                    FreshReason::Unsupported => "unsupported",
                    FreshReason::Failed(_) => "failed",
                };
                fields.insert("fresh".into(), name.into());
                if let FreshReason::Failed(Some(message)) = reason {
                    fields.insert("reopenError".into(), message.clone().into());
                }
            }
        }
        fields
    }

    /// `session` (a runner's reference) with the path's fields added.
    pub fn annotate(&self, session: &mut Value) {
        if let Value::Object(object) = session {
            object.extend(self.fields());
        }
    }
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

    use crate::model::{CallError, CallOutcome};
    use crate::store::contract::{call, open_session};

    const CALL: CallIdentity<'static> = CallIdentity {
        path: Some("3:7<1:1"),
        hash: "hash-0",
        inputs_hash: "inputs-0",
    };

    /// Call 0 of `generation`, settled with error `code`.
    fn failed(generation: u32, code: &str) -> CallRecord {
        CallRecord {
            outcome: CallOutcome::Error,
            result: None,
            error: Some(CallError {
                form: "agent".into(),
                code: code.into(),
                message: "m".into(),
                recoverable: false,
            }),
            ..call(generation, 0, 0)
        }
    }

    fn found(id: &str, entry: Option<(u32, u32)>) -> Option<Continuation> {
        Some(Continuation {
            session_id: id.into(),
            entry,
        })
    }

    #[test]
    fn a_journaled_session_is_continued_when_its_call_did_not_settle_on_its_own() {
        let journaled = [open_session(1, 0, "s-1")];
        // A crash: no row.
        assert_eq!(
            continuation(&journaled, &[], CALL, &[]),
            found("s-1", Some((1, 0)))
        );
        // A stop, a cancel, a pause.
        for code in [
            "WORKFLOW_ABORTED",
            "AGENT_CANCELLED",
            "PROVIDER_USAGE_LIMIT",
        ] {
            let row = failed(1, code);
            assert_eq!(
                continuation(&journaled, &[&row], CALL, &[]),
                found("s-1", Some((1, 0))),
                "{code}"
            );
        }
        // A call that failed on its own runs again cold.
        let row = failed(1, "AGENT_TIMEOUT");
        assert_eq!(continuation(&journaled, &[&row], CALL, &[]), None);
        // Another call's session, or one another call already continues, is not this one's.
        let other = CallIdentity {
            inputs_hash: "inputs-1",
            ..CALL
        };
        assert_eq!(continuation(&journaled, &[], other, &[]), None);
        assert_eq!(continuation(&journaled, &[], CALL, &[(1, 0)]), None);
    }

    #[test]
    fn the_newest_session_wins_and_a_pause_row_counts_without_a_journal() {
        let journaled = [open_session(1, 0, "s-1"), open_session(2, 0, "s-2")];
        let first = failed(1, "AUTH_REQUIRED");
        assert_eq!(
            continuation(&journaled, &[&first], CALL, &[]),
            found("s-2", Some((2, 0)))
        );
        let paused = CallRecord {
            session: Some(json!({"backendId": "mock", "sessionId": "s-9"})),
            ..failed(3, "PROVIDER_USAGE_LIMIT")
        };
        assert_eq!(
            continuation(&journaled, &[&paused], CALL, &[]),
            found("s-9", None)
        );
        assert_eq!(continuation(&[], &[&paused], CALL, &[]), found("s-9", None));
    }

    #[test]
    fn the_path_says_reopened_and_how_or_fresh_and_why() {
        let kept = json!({"backendId": "mock", "sessionId": "s-1"});
        let fresh = json!({"backendId": "mock", "sessionId": "s-2"});
        let load = Some(ReopenMethod::Load);
        let mut session = kept.clone();
        ReopenPath::of("s-1", Some(&kept), load, None).annotate(&mut session);
        assert_eq!(session["reopened"], true);
        assert_eq!(session["reopenedBy"], "load");
        let unsupported = ReopenPath::of("s-1", Some(&fresh), None, None);
        assert_eq!(
            Value::Object(unsupported.fields()),
            json!({"reopened": false, "fresh": "unsupported"})
        );
        let failed = ReopenPath::of("s-1", Some(&fresh), load, Some("gone".into()));
        assert_eq!(
            Value::Object(failed.fields()),
            json!({"reopened": false, "fresh": "failed", "reopenError": "gone"})
        );
        let isolated = ReopenPath::Fresh(FreshReason::Isolated);
        assert_eq!(isolated.fields()["fresh"], "isolated");
    }

    #[test]
    fn the_continuation_turn_is_the_documented_text() {
        let turn = continuation_turn(None);
        assert_eq!(turn.len(), 1);
        assert_eq!(turn[0]["text"], CONTINUATION_PROMPT);
        assert_eq!(continuation_turn(Some("go on"))[0]["text"], "go on");
    }
}
