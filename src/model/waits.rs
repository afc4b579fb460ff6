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
    pub fn answer_with(&mut self, answer: Value, approved: bool) {
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
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Confirm => "confirm",
            CheckpointKind::Input => "input",
            CheckpointKind::Select => "select",
        }
    }

    pub fn parse(text: &str) -> Option<CheckpointKind> {
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
