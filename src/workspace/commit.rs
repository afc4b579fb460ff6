//! Committing what an agent left in its worktree. One `git status` answers both questions a
//! finished call asks: where the tree's HEAD is (the agent may have committed itself) and
//! whether anything is left uncommitted (tracked changes, and untracked files that are not
//! ignored). Only then is the tree staged and committed, with the plumbing commands
//! `write-tree` and `commit-tree`: they run no hook (`git commit` runs `prepare-commit-msg`
//! and `post-commit` even with `--no-verify`), start no automatic gc, sign nothing and leave
//! the worktree's HEAD where it is, which does not matter since the worktree is removed next.
//!
//! Every git command after a checkout reads again each file written in the same second as
//! the index (git cannot tell those from files changed since), until the index is rewritten
//! in a later second. `status` pays that and rewrites the index, so when the agent took a
//! second or more, staging after it only compares file metadata.

use std::path::Path;

use super::command::{Git, failed};
use super::{CallRef, WorkspaceError, names};

/// Commits everything left uncommitted in `tree` on top of its HEAD; answers the commit the
/// tree ends at (its HEAD when nothing was left).
pub(crate) async fn record(
    git: &Git,
    tree: &Path,
    call: &CallRef,
    identity: &[(&str, &str)],
) -> Result<String, WorkspaceError> {
    let status_args = [
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        // A submodule's own uncommitted work is not staged by `add --all`; its new commit is.
        "--ignore-submodules=dirty",
        "--no-renames",
    ];
    let status = git.run(tree, &status_args).await?;
    if !status.success {
        return Err(failed(tree, &status_args, &status));
    }
    let Status { head, changed } = Status::parse(&status.stdout);
    if !changed {
        return head.ok_or_else(|| no_commit(tree));
    }
    git.ok(tree, &["add", "--all"]).await?;
    let written = git.ok(tree, &["write-tree"]).await?;
    let message = message(call);
    let mut args = vec![
        "-c",
        "commit.gpgsign=false",
        "commit-tree",
        written.as_str(),
        "-m",
        message.as_str(),
    ];
    if let Some(parent) = &head {
        args.extend(["-p", parent.as_str()]);
    }
    let ran = git.run_with(tree, &args, identity).await?;
    if !ran.success {
        return Err(failed(tree, &args, &ran));
    }
    Ok(ran.text())
}

/// The commit message of a call's commit: run, call and label on one line.
fn message(call: &CallRef) -> String {
    format!(
        "agentprism run {} call {}{}",
        names::one_line(&call.run_id, 80),
        call.call_index,
        match names::one_line(&call.label, 200) {
            label if label.is_empty() => String::new(),
            label => format!(": {label}"),
        }
    )
}

fn no_commit(tree: &Path) -> WorkspaceError {
    WorkspaceError::Git {
        command: "status".to_owned(),
        folder: tree.to_path_buf(),
        message: "the worktree's HEAD names no commit and nothing is left to commit".to_owned(),
    }
}

/// What `git status --porcelain=v2 -z --branch` says about a tree.
#[derive(Debug, PartialEq, Eq)]
struct Status {
    /// The tree's HEAD commit; `None` on a branch with no commit yet.
    head: Option<String>,
    /// Whether any change is listed.
    changed: bool,
}

impl Status {
    fn parse(output: &[u8]) -> Status {
        let mut status = Status {
            head: None,
            changed: false,
        };
        for record in output.split(|byte| *byte == 0) {
            if let Some(oid) = record.strip_prefix(b"# branch.oid ") {
                let oid = String::from_utf8_lossy(oid);
                if oid.bytes().all(|byte| byte.is_ascii_hexdigit()) && !oid.is_empty() {
                    status.head = Some(oid.into_owned());
                }
            } else if !record.is_empty() && !record.starts_with(b"# ") {
                // Headers start with `# `; every other record is a change (with
                // `--no-renames` no record carries a second path).
                status.changed = true;
            }
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_head_and_whether_anything_changed() {
        let head = "0123456789abcdef0123456789abcdef01234567";
        let clean = format!("# branch.oid {head}\0# branch.head (detached)\0");
        assert_eq!(
            Status::parse(clean.as_bytes()),
            Status {
                head: Some(head.to_owned()),
                changed: false
            }
        );
        let untracked = format!("{clean}? new file.txt\0");
        assert!(Status::parse(untracked.as_bytes()).changed);
        let modified =
            format!("{clean}1 .M N... 100644 100644 100644 {head} {head} # not a header.txt\0");
        assert!(Status::parse(modified.as_bytes()).changed);
        let unborn = "# branch.oid (initial)\0# branch.head orphan\0? a\0";
        assert_eq!(
            Status::parse(unborn.as_bytes()),
            Status {
                head: None,
                changed: true
            }
        );
    }
}
