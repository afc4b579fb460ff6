//! The journal of open agent sessions: which session a live call opened, kept from the moment
//! the agent answered `session/new` (or reopened one), so a call that runs again after a
//! pause, a stop, a crash or a restart can reopen it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A session a live call opened, journaled once it opened. One per call and
/// generation: a later attempt of the same call replaces it with the session it opened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSession {
    pub generation: u32,
    pub index: u32,
    /// The call's identity hash, path and inputs hash: what a later generation's call is
    /// matched on, as replay matches rows.
    pub hash: String,
    pub path: Option<String>,
    pub inputs_hash: Option<String>,
    /// The runner's opaque session reference (`AgentSession::session_ref`).
    pub session: Value,
    /// The folder the session works in.
    pub cwd: String,
    /// When the session opened (Unix ms).
    pub opened_at: i64,
}
