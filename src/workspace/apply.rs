//! Bringing a call's branch onto the project's current branch with `git merge`. A merge that
//! conflicts is aborted, so the user's tree is as it was, and the conflicting files are
//! named; a merge git refuses before starting (local changes it would overwrite) is an error
//! carrying git's message, and it too has changed nothing. A tree in the middle of a merge or
//! with uncommitted changes to tracked files is refused before anything runs: `git merge
//! --abort` would throw away the user's own merge, and cannot always give such changes back.

use std::path::{Path, PathBuf};

use super::command::failed;
use super::git::{GitWorkspaces, identity};
use super::{Applied, Changes, WorkspaceError};

pub(crate) async fn apply(
    workspaces: &GitWorkspaces,
    project_dir: &Path,
    changes: &Changes,
) -> Result<Applied, WorkspaceError> {
    let Some(branch) = &changes.branch else {
        return Ok(Applied::Clean);
    };
    let git = workspaces.git();
    let repository = PathBuf::from(
        git.ok(project_dir, &["rev-parse", "--show-toplevel"])
            .await?,
    );
    workspaces
        .with_repository_lock(&repository, async {
            refuse_unsettled(workspaces, &repository).await?;
            // The user's identity signs the merge when they have one; ours otherwise.
            let has_identity = git
                .run(&repository, &["var", "GIT_COMMITTER_IDENT"])
                .await?;
            let env: &[(&str, &str)] = if has_identity.success {
                &[]
            } else {
                &identity()
            };
            let message = format!("Merge agentprism branch {branch}");
            let args = [
                "merge",
                "--no-edit",
                "--no-verify",
                "-m",
                &message,
                branch.as_str(),
            ];
            let ran = git.run_with(&repository, &args, env).await?;
            if ran.success {
                return Ok(Applied::Clean);
            }
            let conflicted = git
                .ok(&repository, &["diff", "--name-only", "--diff-filter=U"])
                .await?;
            if conflicted.is_empty() {
                return Err(failed(&repository, &args, &ran));
            }
            git.ok(&repository, &["merge", "--abort"]).await?;
            Ok(Applied::Conflicts(
                conflicted.lines().map(PathBuf::from).collect(),
            ))
        })
        .await
}

/// Refuses a repository in the middle of a merge, or with uncommitted changes to tracked
/// files: what a conflicting merge's abort could not leave as it was.
async fn refuse_unsettled(
    workspaces: &GitWorkspaces,
    repository: &Path,
) -> Result<(), WorkspaceError> {
    let git = workspaces.git();
    let unusable = |needed: &str| WorkspaceError::Unusable {
        folder: repository.to_path_buf(),
        needed: needed.to_owned(),
    };
    let merging = git
        .run(
            repository,
            &["rev-parse", "--quiet", "--verify", "MERGE_HEAD"],
        )
        .await?;
    if merging.success {
        return Err(unusable(
            "is in the middle of a merge; conclude or abort it before applying a branch",
        ));
    }
    let tracked = git
        .ok(
            repository,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .await?;
    if !tracked.is_empty() {
        return Err(unusable(
            "has uncommitted changes to tracked files; commit or stash them before applying a \
             branch, so a conflicting merge can leave the tree as it is",
        ));
    }
    Ok(())
}
