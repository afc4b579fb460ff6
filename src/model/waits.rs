//! What a run waits on, as its record stores it and status shows it: the backend-approval
//! setup of a pending run, the checkpoint a paused run waits to have answered, and the sign-in
//! an agent asked for. Each type writes exactly the JSON the engine has always written
//! (`docs/api.md`), so stored rows and the wire keep their bytes; a key a type does not know
//! makes the stored value corrupt rather than something a write-back would silently drop.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The backend-approval setup of a run whose script declares `meta.backends`:
/// `{state, request, answer?}`. It stays on the record once answered, so that a repeated
/// answer is recognised and a declined approval stays final.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupWait {
    pub state: SetupState,
    pub request: SetupRequest,
    /// The user's `setup-response` (or `{action:"cancel"}` from a stop), kept verbatim: it is
    /// the user's JSON, compared with a later answer for equality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

impl SetupWait {
    /// Records `answer` as given and the state it leads to.
    pub(crate) fn answer_with(&mut self, answer: Value, approved: bool) {
        self.answer = Some(answer);
        self.state = if approved {
            SetupState::Approved
        } else {
            SetupState::Declined
        };
    }
}

/// Where a setup stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetupState {
    /// Waiting for the user's answer.
    InputRequired,
    Approved,
    /// Declined or cancelled: final, the run stays aborted.
    Declined,
}

/// What the user is asked: `{id, kind, title, message, backends, requestedSchema}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetupRequest {
    /// The `setupId` an answer must name.
    pub id: String,
    pub kind: SetupKind,
    pub title: String,
    pub message: String,
    pub backends: Vec<ShownBackend>,
    /// The JSON Schema an `accept` answer's `content` is checked against. Kept as JSON: a
    /// schema is JSON by nature and is handed to the schema validator and the host as it is.
    pub requested_schema: Value,
}

/// The kinds of setup there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetupKind {
    /// Approving the commands of the script's declared backends.
    BackendApproval,
}

/// One declared backend as the approval request shows it, exactly as it would be started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShownBackend {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Every `env` entry, values of secret-looking names masked.
    pub env: BTreeMap<String, String>,
    /// The same as one POSIX shell line.
    pub command_line: String,
}

/// The checkpoint a run paused at, waiting for its answer:
/// `{callIndex, hash, prompt, kind, choices}` (`choices` null unless `select`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointWait {
    pub call_index: u32,
    /// The call's identity, which the answer is stored under.
    pub hash: String,
    pub prompt: String,
    pub kind: CheckpointKind,
    /// The choices of a `select`: a non-empty list of strings, checked when the script
    /// called `checkpoint()`.
    pub choices: Option<Vec<String>>,
}

/// The kinds of `checkpoint()`, which decide what an answer must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointKind {
    /// `true` or `false`.
    Confirm,
    /// A string.
    Input,
    /// One of the choices.
    Select,
}

impl CheckpointKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Confirm => "confirm",
            CheckpointKind::Input => "input",
            CheckpointKind::Select => "select",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<CheckpointKind> {
        Some(match text {
            "confirm" => CheckpointKind::Confirm,
            "input" => CheckpointKind::Input,
            "select" => CheckpointKind::Select,
            _ => return None,
        })
    }
}

/// The sign-in an agent asked for (ACP -32000): `{backendId, methods:[{id, type?, name?}]}`.
/// Only identifiers and labels of the agent's advertised methods, never anything else a
/// method carries (descriptions can embed URLs with tokens).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthContext {
    pub backend_id: String,
    pub methods: Vec<AuthMethod>,
}

/// One advertised authentication method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthMethod {
    pub id: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored text → typed → the same text, byte for byte.
    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(text: &str) -> T {
        let typed: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(serde_json::to_string(&typed).expect("serialize"), text);
        typed
    }

    fn refused<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
        serde_json::from_str::<T>(text).expect_err(text).to_string()
    }

    /// A setup as admission writes it, as an approval records its answer, and as a stop
    /// cancels it.
    #[test]
    fn setups_as_written_read_back_to_the_same_json() {
        let request = r#"{"id":"6f1c","kind":"backend-approval","title":"Approve the script's agent backends","message":"The script declares backends:\n  mine: env OPENAI_API_KEY=<masked> /opt/mine-acp --flag","backends":[{"name":"mine","command":"/opt/mine-acp","args":["--flag"],"env":{"LD_PRELOAD":"/tmp/x.so","OPENAI_API_KEY":"<masked>"},"commandLine":"env LD_PRELOAD=/tmp/x.so OPENAI_API_KEY=<masked> /opt/mine-acp --flag"}],"requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"],"additionalProperties":false}}"#;
        let pending: SetupWait = round_trip(&format!(
            r#"{{"state":"input-required","request":{request}}}"#
        ));
        assert_eq!(pending.state, SetupState::InputRequired);
        assert_eq!(
            pending.request.backends[0].env["OPENAI_API_KEY"],
            "<masked>"
        );
        let approved: SetupWait = round_trip(&format!(
            r#"{{"state":"approved","request":{request},"answer":{{"action":"accept","content":{{"approve":true}}}}}}"#
        ));
        assert_eq!(approved.state, SetupState::Approved);
        let cancelled: SetupWait = round_trip(&format!(
            r#"{{"state":"declined","request":{request},"answer":{{"action":"cancel"}}}}"#
        ));
        assert_eq!(
            cancelled.answer,
            Some(serde_json::json!({"action": "cancel"}))
        );
    }

    /// Answering keeps the stored key order: the state first, the answer last.
    #[test]
    fn an_answer_is_written_after_the_request() {
        let text = r#"{"state":"input-required","request":{"id":"a","kind":"backend-approval","title":"t","message":"m","backends":[],"requestedSchema":{}}}"#;
        let mut setup: SetupWait = serde_json::from_str(text).expect("setup");
        setup.answer_with(serde_json::json!({"action": "decline"}), false);
        assert_eq!(
            serde_json::to_string(&setup).expect("serialize"),
            r#"{"state":"declined","request":{"id":"a","kind":"backend-approval","title":"t","message":"m","backends":[],"requestedSchema":{}},"answer":{"action":"decline"}}"#
        );
    }

    #[test]
    fn a_setup_that_does_not_fit_is_refused() {
        let request = r#"{"id":"a","kind":"backend-approval","title":"t","message":"m","backends":[],"requestedSchema":{}}"#;
        let message = refused::<SetupWait>(&format!(r#"{{"state":"done","request":{request}}}"#));
        assert!(message.contains("unknown variant `done`"), "{message}");
        let message = refused::<SetupWait>(r#"{"state":"approved","request":null}"#);
        assert!(message.contains("invalid type: null"), "{message}");
        let message = refused::<SetupWait>(&format!(
            r#"{{"state":"approved","request":{request},"extra":1}}"#
        ));
        assert!(message.contains("unknown field `extra`"), "{message}");
        let message = refused::<SetupWait>(
            r#"{"state":"approved","request":{"kind":"backend-approval","title":"t","message":"m","backends":[],"requestedSchema":{}}}"#,
        );
        assert!(message.contains("missing field `id`"), "{message}");
    }

    /// A checkpoint as the driver writes it when it pauses: `choices` null unless `select`.
    #[test]
    fn checkpoints_as_written_read_back_to_the_same_json() {
        let confirm: CheckpointWait = round_trip(
            r#"{"callIndex":0,"hash":"9f2a","prompt":"Ship it?","kind":"confirm","choices":null}"#,
        );
        assert_eq!(
            (confirm.kind, confirm.choices),
            (CheckpointKind::Confirm, None)
        );
        let select: CheckpointWait = round_trip(
            r#"{"callIndex":3,"hash":"77ab","prompt":"Which?","kind":"select","choices":["a","b"]}"#,
        );
        assert_eq!(select.choices, Some(vec!["a".to_owned(), "b".to_owned()]));
        round_trip::<CheckpointWait>(
            r#"{"callIndex":1,"hash":"01","prompt":"Name?","kind":"input","choices":null}"#,
        );
    }

    #[test]
    fn a_checkpoint_that_does_not_fit_is_refused() {
        let message = refused::<CheckpointWait>(
            r#"{"callIndex":0,"prompt":"p","kind":"confirm","choices":null}"#,
        );
        assert!(message.contains("missing field `hash`"), "{message}");
        let message = refused::<CheckpointWait>(
            r#"{"callIndex":0,"hash":"h","prompt":"p","kind":"pick","choices":null}"#,
        );
        assert!(message.contains("unknown variant `pick`"), "{message}");
        let message = refused::<CheckpointWait>(
            r#"{"callIndex":-1,"hash":"h","prompt":"p","kind":"confirm","choices":null}"#,
        );
        assert!(message.contains("invalid value"), "{message}");
    }

    /// An auth context as the ACP runner writes it: `type` and `name` only when advertised.
    #[test]
    fn auth_contexts_as_written_read_back_to_the_same_json() {
        let context: AuthContext = round_trip(
            r#"{"backendId":"pi","methods":[{"id":"key","type":"env_var"},{"id":"login","name":"Log in"},{"id":"both","type":"agent","name":"Both"}]}"#,
        );
        assert_eq!(context.methods[0].kind.as_deref(), Some("env_var"));
        round_trip::<AuthContext>(r#"{"backendId":"claude","methods":[]}"#);
        let message = refused::<AuthContext>(r#"{"backendId":"pi","methods":[{"type":"x"}]}"#);
        assert!(message.contains("missing field `id`"), "{message}");
    }
}
