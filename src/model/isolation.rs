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

impl CallChanges {
    /// The diff's size in words: `2 files changed, +10 -1`, or `no changes`.
    pub fn stat(&self) -> String {
        if self.branch.is_none() {
            return "no changes".to_owned();
        }
        let files = if self.files_changed == 1 {
            "file"
        } else {
            "files"
        };
        format!(
            "{} {files} changed, +{} -{}",
            self.files_changed, self.insertions, self.deletions
        )
    }

    /// The call's outcome on one line: `<branch>  <stat>  <base>..<head>` with commits cut
    /// to 7 digits, or `no changes (base <base>)`.
    pub fn summary(&self) -> String {
        match &self.branch {
            Some(branch) => format!(
                "{branch}  {}  {}..{}",
                self.stat(),
                short_commit(&self.base_commit),
                short_commit(&self.head_commit)
            ),
            None => format!("no changes (base {})", short_commit(&self.base_commit)),
        }
    }
}

/// A commit cut to the 7 digits git shows by default.
pub fn short_commit(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(branch: Option<&str>, files_changed: u32) -> CallChanges {
        CallChanges {
            branch: branch.map(str::to_owned),
            base_commit: "0123456789abcdef0123456789abcdef01234567".to_owned(),
            head_commit: "fedcba9876543210fedcba9876543210fedcba98".to_owned(),
            files_changed,
            insertions: 12,
            deletions: 3,
        }
    }

    #[test]
    fn a_changed_call_reads_as_its_branch_stat_and_commits() {
        let changed = changes(Some("agentprism/r1/0-fix"), 2);
        assert_eq!(changed.stat(), "2 files changed, +12 -3");
        assert_eq!(
            changed.summary(),
            "agentprism/r1/0-fix  2 files changed, +12 -3  0123456..fedcba9"
        );
        assert_eq!(
            changes(Some("b"), 1).stat(),
            "1 file changed, +12 -3",
            "one file is singular"
        );
    }

    #[test]
    fn a_call_that_changed_nothing_says_so_with_its_base() {
        let unchanged = changes(None, 0);
        assert_eq!(unchanged.stat(), "no changes");
        assert_eq!(unchanged.summary(), "no changes (base 0123456)");
    }

    #[test]
    fn a_short_commit_never_panics_on_a_short_or_odd_text() {
        assert_eq!(short_commit("abc"), "abc");
        assert_eq!(short_commit(""), "");
        // Byte 7 is inside a character: the whole text, not a panic.
        assert_eq!(short_commit("ééééé"), "ééééé");
    }
}
