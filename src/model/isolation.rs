//! What worktree isolation leaves in a run's record: the base every isolated call of the run
//! starts from (recorded at admission, so a resume isolates from the same commit), and what one
//! isolated call changed (on its call row). Both are stored as JSON and shown in status, the
//! events and the `changes` command in exactly these shapes (`docs/api.md`).

use serde::{Deserialize, Serialize};

/// Where every isolated call of one run starts from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceBase {
    /// The repository's top folder.
    pub repository: String,
    /// The commit every worktree of the run is made from, 40 hex digits.
    pub commit: String,
    /// The project folder relative to `repository` (empty at the top).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subfolder: String,
    /// Whether the user's tree had uncommitted changes at admission (they are not in the base).
    #[serde(default)]
    pub dirty: bool,
}

/// What an isolated call changed: its branch (none when it changed nothing), the base and
/// head commits, and the diff's size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallChanges {
    pub branch: Option<String>,
    pub base_commit: String,
    pub head_commit: String,
    pub files_changed: u32,
    pub insertions: u32,
    pub deletions: u32,
}
